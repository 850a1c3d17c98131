//! Every op × dtype on the emulator (wave 32 and 64, sanitizer on) against the
//! Cpu backend, over layouts and shapes: contiguous, transposed, narrowed,
//! broadcast, empty, size 1, odd and prime sizes, rows longer than a workgroup.

use ferrocm_cli::check::{CaseResult, InputLayout, Inputs, run};
use ferrocm_ops::{Device, EmulatorConfig, WaveSize};

fn assert_all_pass(results: &[CaseResult]) {
    let failed: Vec<String> = results
        .iter()
        .filter(|r| !r.passed)
        .map(|r| {
            format!(
                "{} {} {} {}: abs {:e} rel {:e} {:?}",
                r.op, r.dtype, r.device, r.layout, r.max_abs_err, r.max_rel_err, r.error
            )
        })
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {} cases failed:\n{}",
        failed.len(),
        results.len(),
        failed.join("\n")
    );
    assert!(results.len() > 100);
}

fn emulator(wave: WaveSize) -> Device {
    let d = Device::emulator_with(EmulatorConfig {
        sanitize: true,
        ..EmulatorConfig::new(wave)
    });
    assert!(d.sanitizer());
    d
}

macro_rules! layout_tests {
    ($($name:ident: $rows:expr, $cols:expr, $layout:ident;)*) => {$(
        #[test]
        fn $name() {
            for wave in WaveSize::ALL {
                assert_all_pass(&run(&emulator(wave), Inputs { rows: $rows, cols: $cols, layout: InputLayout::$layout }));
            }
        }
    )*};
}

layout_tests! {
    contiguous_rows_longer_than_a_workgroup: 37, 300, Contiguous;
    transposed: 37, 300, Transposed;
    narrowed: 37, 300, Narrowed;
    broadcast: 37, 300, Broadcast;
    prime_sizes: 13, 17, Contiguous;
    prime_sizes_transposed: 13, 17, Transposed;
    long_prime_rows: 3, 1031, Narrowed;
    size_one: 1, 1, Contiguous;
    empty_rows: 0, 7, Contiguous;
    empty_cols: 5, 0, Contiguous;
    single_row: 1, 513, Broadcast;
}
