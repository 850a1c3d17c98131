//! Shared setup of the benches: the devices to measure and criterion settings.

use criterion::Criterion;
use ferrocm::Device;
use std::time::Duration;

/// The Cpu always; each GPU (ROCm, CUDA) when one answers (else a message
/// says why not).
#[allow(dead_code)] // not every bench measures the GPU
pub fn devices() -> Vec<Device> {
    let mut v = vec![Device::Cpu];
    for (name, gpu) in [("rocm:0", Device::rocm(0)), ("cuda:0", Device::cuda(0))] {
        match gpu {
            Ok(gpu) => v.push(gpu),
            Err(e) => eprintln!("{name} benches skipped: {e}"),
        }
    }
    v
}

/// Few samples: the machines here have 2 cores and big inputs.
pub fn criterion() -> Criterion {
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
}

/// One device's inputs of a bench file.
#[allow(dead_code)] // not every bench runs families
pub trait OnDevice {
    fn device(&self) -> &Device;
}

/// An op family: its name and ops (name, bytes moved per run, the op).
#[allow(dead_code)]
pub type Family<I> = (&'static str, Vec<(&'static str, usize, fn(&I))>);

/// One criterion group per family; in it each op on every device's inputs,
/// side by side (`BenchmarkId(op, device)`), throughput in bytes, each run
/// waited for.
#[allow(dead_code)]
pub fn run_families<I: OnDevice>(c: &mut Criterion, inputs: &[I], families: Vec<Family<I>>) {
    run_families_as(c, inputs, families, |n| {
        criterion::Throughput::Bytes(n as u64)
    });
}

/// [`run_families`] with each op's count read as `throughput` says (for
/// example elements instead of bytes).
#[allow(dead_code)]
pub fn run_families_as<I: OnDevice>(
    c: &mut Criterion,
    inputs: &[I],
    families: Vec<Family<I>>,
    throughput: fn(usize) -> criterion::Throughput,
) {
    use criterion::BenchmarkId;
    for (family, ops) in families {
        let mut g = c.benchmark_group(family);
        for (op, count, run) in ops {
            g.throughput(throughput(count));
            for i in inputs {
                g.bench_with_input(BenchmarkId::new(op, i.device()), i, |b, i| {
                    b.iter(|| {
                        run(i);
                        i.device().synchronize().unwrap()
                    })
                });
            }
        }
        g.finish();
    }
}
