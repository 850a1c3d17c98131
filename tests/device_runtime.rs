//! The device runtime a GPU user expects, checked on every machine: devices
//! named by strings, `FERROCM_DEVICE`, memory limits and out-of-memory errors
//! that leave live tensors intact, GPU discovery that reports absence. On a
//! machine with a GPU (a `cuda` or `rocm` build) the GPU parts run too.

use ferrocm::Device;
use ferrocm::WaveSize;
use ferrocm::host::{self, EmulatorConfig, Error as HostError};
use ferrocm::ops::{Error, Tensor};

#[test]
fn devices_parse_from_their_names() {
    assert_eq!("cpu".parse::<Device>().unwrap(), Device::Cpu);
    assert_eq!(" CPU ".parse::<Device>().unwrap(), Device::Cpu);
    let e = "emulator:32".parse::<Device>().unwrap();
    assert_eq!(e.wave_size(), Some(32));
    assert!(e.sanitizer());
    let e = "emulator:64:nosan".parse::<Device>().unwrap();
    assert_eq!(e.wave_size(), Some(64));
    assert!(!e.sanitizer());
    assert_eq!("emulator".parse::<Device>().unwrap().wave_size(), Some(64));
    for bad in [
        "",
        "tpu",
        "cpu:1",
        "emulator:48",
        "emulator:32:x",
        "cuda:x",
        "rocm:-1",
        "cuda:0:1",
    ] {
        match bad.parse::<Device>() {
            Err(HostError::UnknownDevice { name, detail }) => {
                assert_eq!(name, bad);
                assert!(!detail.is_empty());
            }
            other => panic!("`{bad}` parsed as {other:?}"),
        }
    }
    // A GPU name parses only when that GPU answers; otherwise a typed error.
    for name in ["cuda:0", "rocm:0", "cuda:7"] {
        match name.parse::<Device>() {
            Ok(d) => assert!(d.is_gpu()),
            Err(e) => assert!(
                matches!(
                    e,
                    HostError::NoGpu { .. }
                        | HostError::CudaNotCompiled
                        | HostError::RocmNotCompiled
                ),
                "{name}: {e}"
            ),
        }
    }
}

#[test]
fn gpu_discovery_reports_why_there_is_none() {
    match host::device::gpus() {
        Ok(gpus) => {
            for g in gpus {
                assert!(g.wave_size == 32 || g.wave_size == 64);
                assert!(g.total_memory > 0);
                let d: Device = format!("{}:{}", g.backend, g.ordinal).parse().unwrap();
                let (free, total) = d.memory_info().unwrap().unwrap();
                assert!(free <= total);
            }
        }
        Err(e) => {
            eprintln!("no GPU: {e}");
            assert!(!e.to_string().is_empty());
        }
    }
    assert_eq!(Device::Cpu.memory_info().unwrap(), None);
}

/// An allocation past the memory limit is OutOfMemory naming the bytes asked
/// for and the room left; the tensors alive before are untouched.
#[test]
fn memory_limit_gives_out_of_memory_and_keeps_live_tensors() {
    // A device of its own (wave 32, no sanitizer): no other test shares its pool.
    let dev = Device::emulator_with(EmulatorConfig {
        wave_size: WaveSize::Wave32,
        sanitize: false,
    });
    let x = Tensor::<f32>::arange(0, 1000, &dev).unwrap();
    dev.empty_cache();
    let held = dev.memory_stats().bytes_in_use;
    dev.set_memory_limit(Some(held + 64 * 1024));
    assert_eq!(dev.memory_limit(), Some(held + 64 * 1024));
    let e = Tensor::<f32>::zeros(&[1 << 20], &dev).unwrap_err();
    match &e {
        Error::Host(HostError::OutOfMemory { bytes, free, .. }) => {
            assert_eq!(*bytes, 4 << 20);
            assert!(free.is_some_and(|f| f <= 64 * 1024), "{e}");
        }
        other => panic!("expected OutOfMemory, got {other}"),
    }
    assert!(e.to_string().contains("bytes free"), "{e}");
    // Small work still fits, and the live tensor is intact.
    let y = x.affine(2.0, 0.0).unwrap();
    assert_eq!(y.to_vec().unwrap()[999], 1998.0);
    assert_eq!(x.to_vec().unwrap()[999], 999.0);
    dev.set_memory_limit(None);
    assert!(Tensor::<f32>::zeros(&[1 << 20], &dev).is_ok());
}

/// `FERROCM_DEVICE` picks the device `best` returns; a bad name is an error
/// naming it (the variable is read per call, so the test sets and restores it).
#[test]
fn ferrocm_device_env_is_honoured() {
    let old = std::env::var("FERROCM_DEVICE").ok();
    // SAFETY: this test binary's only test touching the environment.
    unsafe { std::env::set_var("FERROCM_DEVICE", "emulator:32") };
    assert_eq!(Device::best_or_err().unwrap().wave_size(), Some(32));
    unsafe { std::env::set_var("FERROCM_DEVICE", "warp-drive") };
    let e = Device::best_or_err().unwrap_err();
    assert!(e.to_string().contains("warp-drive"), "{e}");
    assert!(e.to_string().contains("FERROCM_DEVICE"), "{e}");
    assert_eq!(Device::best(), Device::Cpu);
    match old {
        Some(v) => unsafe { std::env::set_var("FERROCM_DEVICE", v) },
        None => unsafe { std::env::remove_var("FERROCM_DEVICE") },
    }
}

#[test]
fn time_measures_queued_work() {
    let dev = Device::emulator(WaveSize::Wave32);
    let x = Tensor::<f32>::ones(&[64, 64], &dev).unwrap();
    let ms = dev
        .time(|| {
            x.exp().expect("exp on the emulator");
            Ok(())
        })
        .unwrap();
    assert!(ms >= 0.0);
}
