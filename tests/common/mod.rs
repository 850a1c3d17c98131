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

/// A device-side fault is device-wide (it surfaces at the next wait on its
/// device, from whichever thread waits), so the tests of a file that
/// provokes faults on purpose take turns: each holds this while it runs
/// (`indexing.rs` keeps its own read/write turns: only its fault test runs
/// alone there).
#[allow(dead_code)]
pub fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}
