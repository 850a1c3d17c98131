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
