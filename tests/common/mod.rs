//! Shared by the test files that run on every device.

use ferrocm::Device;
use ferrocm::WaveSize;

/// The Cpu, the emulator at wave 32 and 64, and every GPU that answers
/// (opened once per test binary; a GPU that does not answer is reported
/// once with why, and skipped).
pub fn devices() -> Vec<Device> {
    static GPUS: std::sync::OnceLock<Vec<Device>> = std::sync::OnceLock::new();
    let gpus = GPUS.get_or_init(|| {
        let mut found = Vec::new();
        for (name, dev) in [("cuda:0", Device::cuda(0)), ("rocm:0", Device::rocm(0))] {
            match dev {
                Ok(d) => found.push(d),
                Err(e) => eprintln!("skipping {name}: {e}"),
            }
        }
        found
    });
    let mut v = vec![
        Device::Cpu,
        Device::emulator(WaveSize::Wave32),
        Device::emulator(WaveSize::Wave64),
    ];
    v.extend(gpus.iter().cloned());
    v
}
