//! The `ferrocm` command: `check`, `kernels`, `info`.

use ferrocm::host::{self, Device};
use ferrocm::ops::check;
use std::io::Write;
use std::process::ExitCode;

/// `println!` that ignores a closed pipe (`ferrocm kernels | head`).
macro_rules! outln {
    ($($t:tt)*) => {{
        let _ = writeln!(std::io::stdout(), $($t)*);
    }};
}

const USAGE: &str = "usage:
  ferrocm check [--device cpu|emulator|emulator32|emulator64|rocm] [--json]
      run every op x dtype on the device (default: the ROCm GPU if one
      answers, else the emulator with wave 32 and 64) against the Cpu backend
  ferrocm kernels [--arch ARCH] [--json]
      registers, LDS, scratch, spills and occupancy of every kernel per arch
  ferrocm info
      devices found and code objects embedded";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| args.iter().any(|a| a == name);
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    match args.first().map(String::as_str) {
        Some("check") => run_check(value("--device").as_deref(), flag("--json")),
        Some("kernels") => run_kernels(value("--arch").as_deref(), flag("--json")),
        Some("info") => run_info(),
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn devices_for(name: Option<&str>) -> Result<Vec<Device>, String> {
    Ok(match name {
        None => match Device::rocm(0) {
            Ok(gpu) => vec![gpu],
            Err(e) => {
                eprintln!("no ROCm GPU ({e}); checking the kernels in the emulator instead");
                vec![Device::emulator(32), Device::emulator(64)]
            }
        },
        Some("cpu") => vec![Device::Cpu],
        Some("emulator") => vec![Device::emulator(32), Device::emulator(64)],
        Some("emulator32") => vec![Device::emulator(32)],
        Some("emulator64") => vec![Device::emulator(64)],
        Some("rocm") => vec![Device::rocm(0).map_err(|e| e.to_string())?],
        Some(other) => return Err(format!("unknown device `{other}`\n{USAGE}")),
    })
}

fn run_check(device: Option<&str>, json: bool) -> ExitCode {
    let devices = match devices_for(device) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let mut results = Vec::new();
    for d in &devices {
        let start = std::time::Instant::now();
        let r = check::run_default(d);
        if !json {
            eprintln!(
                "{d}: {} cases in {:.1}s",
                r.len(),
                start.elapsed().as_secs_f64()
            );
        }
        results.extend(r);
    }
    let failed = results.iter().filter(|r| !r.passed).count();
    if json {
        outln!("{}", check::to_json(&results));
    } else {
        outln!(
            "{:<16} {:<5} {:<24} {:<22} {:>11} {:>11}  result",
            "op",
            "dtype",
            "device",
            "layout",
            "max_abs",
            "max_rel"
        );
        for r in &results {
            outln!(
                "{:<16} {:<5} {:<24} {:<22} {:>11.3e} {:>11.3e}  {}{}",
                r.op,
                r.dtype.as_str(),
                r.device,
                r.layout,
                r.max_abs_err,
                r.max_rel_err,
                if r.passed { "pass" } else { "FAIL" },
                r.error
                    .as_ref()
                    .map(|e| format!(" ({e})"))
                    .unwrap_or_default()
            );
        }
        outln!("{} passed, {} failed", results.len() - failed, failed);
    }
    if failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn run_kernels(arch: Option<&str>, json: bool) -> ExitCode {
    let objects: Vec<_> = ferrocm::kernels::CODE_OBJECTS
        .iter()
        .filter(|c| arch.is_none_or(|a| a == c.arch))
        .copied()
        .collect();
    if objects.is_empty() {
        let built: Vec<&str> = ferrocm::kernels::CODE_OBJECTS
            .iter()
            .map(|c| c.arch)
            .collect();
        eprintln!(
            "no code object for arch `{}`; embedded: {}",
            arch.unwrap_or("?"),
            built.join(", ")
        );
        return ExitCode::from(2);
    }
    match host::codeobject::report(&objects) {
        Ok(rows) => {
            if json {
                outln!("{}", host::codeobject::to_json(&rows));
            } else {
                let _ = write!(
                    std::io::stdout(),
                    "{}",
                    host::codeobject::format_table(&rows)
                );
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

fn run_info() -> ExitCode {
    let built: Vec<&str> = ferrocm::kernels::CODE_OBJECTS
        .iter()
        .map(|c| c.arch)
        .collect();
    outln!("ferrocm {}", env!("CARGO_PKG_VERSION"));
    outln!(
        "code objects embedded: {} ({} kernels each)",
        built.join(", "),
        ferrocm::kernels::kernels().count()
    );
    outln!("cpu: {} threads (rayon)", rayon_threads());
    outln!("emulator: wave 32 and 64, sanitizer available");
    match host::device::gpus() {
        Ok(gpus) => {
            for g in gpus {
                outln!(
                    "rocm:{} {} arch {} ({}), {} CUs, {:.1} GiB, wave {}, code object: {}",
                    g.ordinal,
                    g.name,
                    g.arch,
                    g.arch_full,
                    g.compute_units,
                    g.total_memory as f64 / (1u64 << 30) as f64,
                    g.wave_size,
                    g.code_object.as_deref().unwrap_or("none matches")
                );
            }
        }
        Err(e) => outln!("rocm: {e}"),
    }
    outln!("best device: {}", Device::best());
    ExitCode::SUCCESS
}

fn rayon_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}
