//! The `ferrocm` command: `check`, `bench`, `kernels`, `info`.

use ferrocm::WaveSize;
use ferrocm::host::{self, Device};
use ferrocm::ops::{bench, check};
use std::io::Write;
use std::process::ExitCode;

/// `println!` that ignores a closed pipe (`ferrocm kernels | head`).
macro_rules! outln {
    ($($t:tt)*) => {{
        let _ = writeln!(std::io::stdout(), $($t)*);
    }};
}

const USAGE: &str = "usage:
  ferrocm check [--device D] [--json]
      run every op x dtype on the device against the Cpu backend (default:
      FERROCM_DEVICE if set, else the first GPU that answers, ROCm then CUDA,
      else the emulator with wave 32 and 64)
  ferrocm bench [--device D] [--json] [--size ROWSxCOLS] [--reps N] [--no-cpu]
                [--only elementwise|indexing|layer|matmul|attention]
      time every kernel family (or one) on the device (default: as for
      check) as a share of its copy bandwidth, and against the Cpu backend
  ferrocm kernels [--arch ARCH | --device cuda[:N]] [--json]
      registers, LDS, scratch, spills and occupancy of every kernel per arch;
      with a CUDA device, what the driver's compile of the PTX uses there
  ferrocm info
      devices found and code objects embedded
devices D: cpu, emulator (wave 32 and 64), emulator:32, emulator:64,
  emulator:64:nosan, rocm[:N], cuda[:N]";

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
        Some("bench") => run_bench(
            value("--device").as_deref(),
            flag("--json"),
            value("--size").as_deref(),
            value("--reps").as_deref(),
            value("--only").as_deref(),
            !flag("--no-cpu"),
        ),
        Some("kernels") => match value("--device") {
            Some(d) => run_kernels_on(&d, flag("--json")),
            None => run_kernels(value("--arch").as_deref(), flag("--json")),
        },
        Some("info") => run_info(),
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn devices_for(name: Option<&str>) -> Result<Vec<Device>, String> {
    let name = name.map(str::to_string).or_else(|| {
        std::env::var("FERROCM_DEVICE")
            .ok()
            .filter(|s| !s.trim().is_empty())
    });
    Ok(match name.as_deref() {
        None => match Device::best_or_err() {
            Ok(d) if d.is_gpu() => vec![d],
            _ => {
                eprintln!(
                    "no GPU answers ({}); checking the kernels in the emulator instead",
                    host::device::gpus()
                        .err()
                        .map(|e| e.to_string())
                        .unwrap_or_default()
                );
                vec![
                    Device::emulator(WaveSize::Wave32),
                    Device::emulator(WaveSize::Wave64),
                ]
            }
        },
        // Both wave sizes.
        Some("emulator") => vec![
            Device::emulator(WaveSize::Wave32),
            Device::emulator(WaveSize::Wave64),
        ],
        Some("emulator32") => vec![Device::emulator(WaveSize::Wave32)],
        Some("emulator64") => vec![Device::emulator(WaveSize::Wave64)],
        Some(other) => vec![
            other
                .parse::<Device>()
                .map_err(|e| format!("{e}\n{USAGE}"))?,
        ],
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

fn run_bench(
    device: Option<&str>,
    json: bool,
    size: Option<&str>,
    reps: Option<&str>,
    only: Option<&str>,
    compare_cpu: bool,
) -> ExitCode {
    let dev = match devices_for(device) {
        Ok(d) => d[0].clone(),
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let mut cfg = bench::BenchConfig {
        compare_cpu,
        ..Default::default()
    };
    if !dev.is_gpu() {
        // The host devices are far slower: a smaller default.
        cfg.rows = 1024;
        cfg.cols = 1024;
        cfg.reps = 5;
    }
    if let Some(s) = size {
        match s.split_once('x').map(|(r, c)| (r.parse(), c.parse())) {
            Some((Ok(r), Ok(c))) if r > 0 && c > 0 => {
                cfg.rows = r;
                cfg.cols = c;
            }
            _ => {
                eprintln!("--size takes ROWSxCOLS, e.g. 16384x4096; got `{s}`");
                return ExitCode::from(2);
            }
        }
    }
    if let Some(n) = reps {
        match n.parse::<usize>() {
            Ok(n) if n > 0 => cfg.reps = n,
            _ => {
                eprintln!("--reps takes a positive number; got `{n}`");
                return ExitCode::from(2);
            }
        }
    }
    if let Some(f) = only {
        match bench::BenchFamily::parse(f) {
            Some(f) => cfg.only = Some(f),
            None => {
                let names = bench::BenchFamily::NAMES.join(", ");
                eprintln!("--only takes one of {names}; got `{f}`");
                return ExitCode::from(2);
            }
        }
    }
    match bench::run(&dev, cfg) {
        Ok(report) => {
            if json {
                outln!("{}", bench::to_json(&report));
            } else {
                let _ = write!(std::io::stdout(), "{}", bench::format_table(&report));
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("bench on {dev}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Per kernel, what the driver's compile uses on a CUDA GPU: registers,
/// local (spill) bytes, static shared memory. Fails when any kernel uses
/// local memory.
fn run_kernels_on(device: &str, json: bool) -> ExitCode {
    let _ = json; // used by the CUDA report only
    let dev = match device.parse::<Device>() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    #[cfg(feature = "cuda")]
    if let Device::Cuda(c) = &dev {
        let mut rows = Vec::new();
        for k in ferrocm::kernels::kernels() {
            match c.kernel_resources(k) {
                Ok(r) => rows.push((k.name, r)),
                Err(e) => {
                    eprintln!("{}: {e}", k.name);
                    return ExitCode::FAILURE;
                }
            }
        }
        let spilling: Vec<&str> = rows
            .iter()
            .filter(|(_, r)| r.local_bytes > 0)
            .map(|(n, _)| *n)
            .collect();
        if json {
            let v: Vec<_> = rows
                .iter()
                .map(|(n, r)| {
                    serde_json::json!({"kernel": n, "arch": c.info().arch, "registers": r.registers,
                        "local_bytes": r.local_bytes, "static_shared_bytes": r.static_shared_bytes,
                        "max_threads": r.max_threads})
                })
                .collect();
            outln!("{}", serde_json::Value::Array(v));
        } else {
            outln!(
                "{:<28} {:>6} {:>5} {:>6} {:>7} {:>11}",
                "kernel",
                "arch",
                "regs",
                "local",
                "shared",
                "max_threads"
            );
            for (n, r) in &rows {
                outln!(
                    "{:<28} {:>6} {:>5} {:>6} {:>7} {:>11}",
                    n,
                    c.info().arch,
                    r.registers,
                    r.local_bytes,
                    r.static_shared_bytes,
                    r.max_threads
                );
            }
            let max_regs = rows.iter().map(|(_, r)| r.registers).max().unwrap_or(0);
            outln!(
                "{} kernels, at most {max_regs} registers, {} with local memory",
                rows.len(),
                spilling.len()
            );
        }
        if !spilling.is_empty() {
            eprintln!("local memory (spills) in: {}", spilling.join(", "));
            return ExitCode::FAILURE;
        }
        return ExitCode::SUCCESS;
    }
    eprintln!(
        "`kernels --device` reads the driver's compile on a CUDA GPU; {dev} is not one (use --arch for AMD code objects)"
    );
    ExitCode::from(2)
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
    if let Some(ptx) = ferrocm::kernels::PTX_MODULE {
        outln!(
            "PTX module embedded: {} ({} KiB) for NVIDIA GPUs",
            ptx.target,
            ptx.text.len() / 1024
        );
    }
    match host::device::gpus() {
        Ok(gpus) => {
            for g in gpus {
                let dev = format!("{}:{}", g.backend, g.ordinal).parse::<Device>();
                let mem = match dev.as_ref().map(|d| d.memory_info()) {
                    Ok(Ok(Some((free, total)))) => format!(
                        "{:.1} GiB free of {:.1} GiB",
                        free as f64 / (1u64 << 30) as f64,
                        total as f64 / (1u64 << 30) as f64
                    ),
                    _ => format!("{:.1} GiB", g.total_memory as f64 / (1u64 << 30) as f64),
                };
                outln!(
                    "{}:{} {} arch {} ({}), {} {}, {mem}, wave {}, max LDS {} KiB, code: {}",
                    g.backend,
                    g.ordinal,
                    g.name,
                    g.arch,
                    g.arch_full,
                    g.compute_units,
                    if g.backend == "cuda" { "SMs" } else { "CUs" },
                    g.wave_size,
                    g.max_lds_bytes / 1024,
                    g.code_object.as_deref().unwrap_or("none matches")
                );
            }
        }
        Err(e) => outln!("gpu: {e}"),
    }
    // Matrix products use the vendor BLAS where it loads, else our kernels.
    let blas = |found: Result<String, String>| match found {
        Ok(lib) => format!("{lib} (epilogues and matrix-vector shapes: ferrocm's kernels)"),
        Err(why) => format!("ferrocm's kernels ({why})"),
    };
    #[cfg(feature = "rocm")]
    outln!("matmul on ROCm GPUs: {}", blas(host::rocm::rocblas_found()));
    #[cfg(feature = "cuda")]
    outln!("matmul on CUDA GPUs: {}", blas(host::cuda::cublas_found()));
    let _ = blas;
    outln!("best device: {}", Device::best());
    ExitCode::SUCCESS
}

fn rayon_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}
