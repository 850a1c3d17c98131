//! The SIMT emulator's own speed: a 1M-element elementwise kernel and a
//! reduction with LDS and barriers, wave 64, sanitizer off and on. (The
//! emulator is for correctness; this tells how big a test input can be.)

use criterion::{Throughput, criterion_group, criterion_main};
use ferrocm::Device;
use ferrocm::host::{EmulatorConfig, WaveSize};
use ferrocm::ops::Tensor;

#[path = "common.rs"]
mod common;

fn emulator(c: &mut criterion::Criterion) {
    let n = 1 << 20;
    let mut g = c.benchmark_group("emulator");
    g.throughput(Throughput::Elements(n as u64));
    for sanitize in [false, true] {
        let dev = Device::emulator_with(EmulatorConfig {
            sanitize,
            ..EmulatorConfig::new(WaveSize::Wave64)
        });
        let x = Tensor::<f32>::randn(&[n], 0.0, 1.0, 1, &dev).unwrap();
        let m = x.reshape(&[1024, 1024]).unwrap();
        let tag = if sanitize { "sanitizer" } else { "plain" };
        g.bench_function(format!("unary_exp_f32_1M/{tag}"), |b| {
            b.iter(|| x.exp().unwrap())
        });
        g.bench_function(format!("reduce_sum_f32_1024x1024/{tag}"), |b| {
            b.iter(|| m.sum(&[1], false).unwrap())
        });
    }
    g.finish();
}

criterion_group! { name = benches; config = common::criterion(); targets = emulator }
criterion_main!(benches);
