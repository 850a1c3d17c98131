//! The faster of a vendor library's path and our kernels, found once per
//! problem and device by timing both, and remembered for the process.
//!
//! A DNN library is not always the faster path: on the H100 ferrocm's pool
//! and batch-norm kernels beat cuDNN's by 12-35% on batch-32 tensors and are
//! level at batch 1-2, and nobody has timed MIOpen against them on an AMD
//! GPU. So an op that has both paths (pooling, inference batch norm) times
//! them the first time it meets a problem on a device (keyed by the
//! problem's hash and the device) and takes the faster one from then on, as
//! MIOpen's and cuDNN's own searches do for their algorithms. The lookup
//! allocates nothing: it runs on every call of a small op, whose launch
//! takes a few microseconds.

use crate::core::error::Result;
use ferrocm_host::{Device, DeviceBuffer};
use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Mutex, OnceLock};

/// The two paths an op with a library path can take on a GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// The vendor library (MIOpen, cuDNN).
    Library,
    /// Our kernels.
    Kernels,
}

/// Timed runs of each path before choosing (each path also runs once
/// untimed first, so neither pays a first call's setup in its time).
const TIMED_RUNS: usize = 3;

fn choices() -> &'static Mutex<HashMap<u64, Path>> {
    static CHOICES: OnceLock<Mutex<HashMap<u64, Path>>> = OnceLock::new();
    CHOICES.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The device (a GPU by backend and ordinal; a host device by its name)
/// and the problem, hashed together.
fn key<P: Hash + ?Sized>(device: &Device, problem: &P) -> u64 {
    let mut h = DefaultHasher::new();
    match device.gpu() {
        Some(gpu) => (gpu.info().backend, gpu.info().ordinal).hash(&mut h),
        None => device.to_string().hash(&mut h),
    }
    problem.hash(&mut h);
    h.finish()
}

/// The path chosen for `problem` on `device`, if it has been timed.
///
/// ```
/// use ferrocm_ops::Device;
/// use ferrocm_ops::engine::choice::chosen;
/// assert_eq!(chosen(&Device::Cpu, &"a problem never timed"), None);
/// ```
pub fn chosen<P: Hash + ?Sized>(device: &Device, problem: &P) -> Option<Path> {
    let map = choices().lock().unwrap_or_else(|e| e.into_inner());
    map.get(&key(device, problem)).copied()
}

/// Runs `problem` on the library where that is the faster path on `device`.
///
/// `library` runs the library into the op's output and says whether it ran
/// (`Ok(false)`: it declined the problem). `trial` runs our kernels into a
/// scratch output of the same size, never the op's: the output the caller
/// returns is always the library's when this returns `Ok(true)`.
///
/// The first time a problem is met on a device both paths run once
/// untimed and then [`TIMED_RUNS`] times each, alternating, timed with the
/// device's events; the faster by its best time is remembered. A library
/// that declines is remembered as [`Path::Kernels`]; kernels that fail on
/// the problem (a shape they do not take) as [`Path::Library`]. While the
/// current thread records a graph nothing is timed (events cannot be part
/// of one): the library runs and nothing is remembered.
///
/// Returns `Ok(true)` when the library wrote the op's output, `Ok(false)`
/// when the caller should run its kernels.
///
/// ```
/// use ferrocm_ops::Device;
/// use ferrocm_ops::engine::choice::{Path, chosen, library_if_faster};
/// let dev = Device::Cpu;
/// // A library slower than the kernels: it runs once (the first call's
/// // output is its own), and the kernels are chosen from then on.
/// let slow = || { std::thread::sleep(std::time::Duration::from_millis(3)); Ok(true) };
/// let fast = || Ok(());
/// assert!(library_if_faster(&dev, &"doc example", slow, fast)?);
/// assert_eq!(chosen(&dev, &"doc example"), Some(Path::Kernels));
/// assert!(!library_if_faster(&dev, &"doc example", slow, fast)?);
/// # Ok::<(), ferrocm_ops::Error>(())
/// ```
///
/// # Errors
/// The library's errors, and the device's errors of recording and waiting
/// for the timing events.
pub fn library_if_faster<P: Hash + ?Sized>(
    device: &Device,
    problem: &P,
    mut library: impl FnMut() -> Result<bool>,
    mut trial: impl FnMut() -> Result<()>,
) -> Result<bool> {
    match chosen(device, problem) {
        Some(Path::Kernels) => return Ok(false),
        Some(Path::Library) => return library(),
        None => {}
    }
    let remember = |path| {
        let mut map = choices().lock().unwrap_or_else(|e| e.into_inner());
        map.insert(key(device, problem), path);
    };
    if !library()? {
        remember(Path::Kernels);
        return Ok(false);
    }
    // The first library run already happened; a warm-up of the kernels.
    if trial().is_err() {
        remember(Path::Library);
        return Ok(true);
    }
    // A timed run of one path: its result, and its time where it ran.
    let mut timed = |path| -> Result<Option<f32>> {
        let mut ran = Ok(());
        let ms = device.time(|| {
            ran = match path {
                Path::Library => library().map(drop),
                Path::Kernels => trial(),
            };
            Ok(())
        });
        match ms {
            Err(ferrocm_host::Error::NotRecordable { .. }) => Ok(None),
            Err(e) => Err(e.into()),
            Ok(ms) => ran.map(|()| Some(ms)),
        }
    };
    let (mut lib, mut ours) = (f32::INFINITY, f32::INFINITY);
    for _ in 0..TIMED_RUNS {
        match timed(Path::Library)? {
            Some(ms) => lib = lib.min(ms),
            // Recording a graph: no choice now.
            None => return Ok(true),
        }
        match timed(Path::Kernels) {
            Ok(Some(ms)) => ours = ours.min(ms),
            Ok(None) => return Ok(true),
            Err(_) => {
                remember(Path::Library);
                return Ok(true);
            }
        }
    }
    // The library's output is the one written last.
    library()?;
    remember(if ours < lib {
        Path::Kernels
    } else {
        Path::Library
    });
    Ok(true)
}

/// A trial for [`library_if_faster`] that writes our kernels' output to a
/// scratch buffer of `len` elements, allocated on the first run and reused:
/// `run` takes the buffer to write, runs the kernels into it and returns it.
///
/// ```
/// use ferrocm_ops::Device;
/// use ferrocm_ops::engine::choice::scratch_trial;
/// use std::cell::RefCell;
/// let dev = Device::Cpu;
/// let written_to = RefCell::new(Vec::new());
/// let mut trial = scratch_trial::<f32>(&dev, 4, |out| {
///     // A real trial launches the kernels with `out` as their output.
///     written_to.borrow_mut().push(out.device_ptr());
///     Ok(out)
/// });
/// trial()?;
/// trial()?;
/// drop(trial);
/// let written_to = written_to.into_inner();
/// assert_eq!(written_to.len(), 2);
/// assert_eq!(written_to[0], written_to[1]); // one buffer, reused
/// # Ok::<(), ferrocm_ops::Error>(())
/// ```
pub fn scratch_trial<'a, T: bytemuck::Pod>(
    device: &'a Device,
    len: usize,
    mut run: impl FnMut(DeviceBuffer<T>) -> Result<DeviceBuffer<T>> + 'a,
) -> impl FnMut() -> Result<()> + 'a {
    let mut scratch = None;
    move || {
        let out = match scratch.take() {
            Some(out) => out,
            None => device.alloc::<T>(len)?,
        };
        scratch = Some(run(out)?);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::time::Duration;

    fn sleep_ms(ms: u64) {
        std::thread::sleep(Duration::from_millis(ms));
    }

    #[test]
    fn a_scratch_trial_allocates_once_and_reuses_its_buffer() {
        const MARK: f32 = -8765.5;
        let dev = Device::Cpu;
        let runs = Cell::new(0);
        let mut trial = scratch_trial::<f32>(&dev, 37, |mut out| {
            let values = out.as_mut_slice().expect("a Cpu buffer is host memory");
            if runs.get() == 0 {
                values.fill(MARK);
            } else {
                // A buffer allocated afresh would not hold the first run's values.
                assert!(values.iter().all(|&v| v == MARK), "run {}", runs.get());
            }
            runs.set(runs.get() + 1);
            Ok(out)
        });
        trial().unwrap();
        // Were the first buffer freed, this would take its cached block and
        // overwrite the mark.
        let mut other = dev.alloc::<f32>(37).unwrap();
        other.fill(1.0).unwrap();
        trial().unwrap();
        trial().unwrap();
        drop(trial);
        assert_eq!(runs.get(), 3);
        drop(other);
    }

    #[test]
    fn the_faster_path_is_chosen_once_and_remembered() {
        let dev = Device::Cpu;
        for (lib_ms, ours_ms, want) in [(4, 0, Path::Kernels), (0, 4, Path::Library)] {
            let problem = format!("pool {lib_ms} {ours_ms}");
            let (lib_runs, trials) = (Cell::new(0), Cell::new(0));
            let library = || {
                lib_runs.set(lib_runs.get() + 1);
                sleep_ms(lib_ms);
                Ok(true)
            };
            let trial = || {
                trials.set(trials.get() + 1);
                sleep_ms(ours_ms);
                Ok(())
            };
            // First call: the library writes the output; both timed.
            assert!(library_if_faster(&dev, &problem, library, trial).unwrap());
            assert_eq!(chosen(&dev, &problem), Some(want));
            assert_eq!(lib_runs.get(), 2 + TIMED_RUNS);
            assert_eq!(trials.get(), 1 + TIMED_RUNS);
            // Later calls take the chosen path and time nothing.
            let ran_library = library_if_faster(&dev, &problem, library, trial).unwrap();
            assert_eq!(ran_library, want == Path::Library);
            let lib_after = 2 + TIMED_RUNS + usize::from(want == Path::Library);
            assert_eq!(lib_runs.get(), lib_after);
            assert_eq!(trials.get(), 1 + TIMED_RUNS);
        }
    }

    #[test]
    fn a_declining_library_or_failing_kernels_settle_the_choice() {
        let dev = Device::Cpu;
        let declines = || Ok(false);
        let never = || -> Result<()> { panic!("the kernels' trial must not run") };
        assert!(!library_if_faster(&dev, &"declined", declines, never).unwrap());
        assert_eq!(chosen(&dev, &"declined"), Some(Path::Kernels));

        let runs = || Ok(true);
        let fails = || {
            Err(crate::Error::TooLarge {
                op: "max_pool2d",
                shape: vec![1 << 40],
            })
        };
        assert!(library_if_faster(&dev, &"kernels fail", runs, fails).unwrap());
        assert_eq!(chosen(&dev, &"kernels fail"), Some(Path::Library));
        // The library's own error reaches the caller, and nothing is chosen.
        let broken = || {
            Err(crate::Error::TooLarge {
                op: "batch_norm",
                shape: vec![3],
            })
        };
        let ok = || Ok(());
        assert!(library_if_faster(&dev, &"library fails", broken, ok).is_err());
        assert_eq!(chosen(&dev, &"library fails"), None);
    }

    #[test]
    fn choices_are_per_device() {
        let cpu = Device::Cpu;
        let emu = Device::emulator(ferrocm_host::WaveSize::Wave32);
        let slow = || {
            sleep_ms(3);
            Ok(true)
        };
        assert!(library_if_faster(&cpu, &"per device", slow, || Ok(())).unwrap());
        assert_eq!(chosen(&cpu, &"per device"), Some(Path::Kernels));
        assert_eq!(chosen(&emu, &"per device"), None);
    }
}
