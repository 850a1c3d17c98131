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
        sanitize: false,
        ..EmulatorConfig::new(WaveSize::Wave32)
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

mod common;

/// The GPUs that answer (shared by this file's tests, as in the other
/// files: a graph's recording meets other tests' work on the same stream).
fn gpus() -> Vec<Device> {
    common::devices()
        .into_iter()
        .filter(Device::is_gpu)
        .collect()
}

/// exp(a) * b + 1 in f64, the work the graph tests record.
fn expected(a: &[f32], b: &[f32]) -> Vec<f32> {
    a.iter()
        .zip(b)
        .map(|(&a, &b)| ((a as f64).exp() * b as f64 + 1.0) as f32)
        .collect()
}

fn recorded_work(a: &Tensor<f32>, b: &Tensor<f32>) -> ferrocm::Result<Tensor<f32>> {
    let one = Tensor::<f32>::ones(a.shape(), a.device())?;
    a.exp()?.mul(b)?.add(&one)
}

fn close(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-5 * w.abs().max(1.0),
            "{what}: element {i}: {g} vs {w}"
        );
    }
}

/// On the host devices a graph runs its work as queued: nothing recorded,
/// nothing refused (a copy to the host inside is fine there).
#[test]
fn graphs_on_host_devices_run_the_work_as_queued() {
    for dev in [Device::Cpu, Device::emulator(WaveSize::Wave64)] {
        let mut g = ferrocm::Graph::new(&dev);
        assert!(!g.records(), "{dev}");
        let a = Tensor::from_slice(&[0.5f32, -1.0, 2.0], &[3], &dev).unwrap();
        let b = Tensor::from_slice(&[2.0f32, 3.0, -1.0], &[3], &dev).unwrap();
        let v = g.run(|| recorded_work(&a, &b)?.to_vec()).unwrap();
        close(&v, &expected(&[0.5, -1.0, 2.0], &[2.0, 3.0, -1.0]), "host");
        assert_eq!(g.stats(), ferrocm::GraphStats::default());
    }
}

/// On a GPU: the recorded work gives the f64 formula's values; a second
/// recording with other buffers updates the kept graph; other kernels
/// instantiate a new one; the outputs match the work queued plainly.
#[test]
fn graphs_replay_recorded_work_on_gpus() {
    for dev in gpus() {
        let mut g = ferrocm::Graph::new(&dev);
        assert!(g.records(), "{dev}");
        let mut last = ferrocm::GraphStats::default();
        for (round, n) in [(0, 1000usize), (1, 1000), (2, 4099), (3, 7)].into_iter() {
            let av: Vec<f32> = (0..n)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) / 17.0)
                .collect();
            let bv: Vec<f32> = (0..n)
                .map(|i| ((i * 13 % 29) as f32 - 14.0) / 3.0 + round as f32)
                .collect();
            let a = Tensor::from_slice(&av, &[n], &dev).unwrap();
            let b = Tensor::from_slice(&bv, &[n], &dev).unwrap();
            let plain = recorded_work(&a, &b).unwrap().to_vec().unwrap();
            let out = g.run(|| recorded_work(&a, &b)).unwrap();
            assert_eq!(out.to_vec().unwrap(), plain, "{dev}, round {round}");
            close(
                &plain,
                &expected(&av, &bv),
                &format!("{dev}, round {round}"),
            );
            let s = g.stats();
            assert_eq!(s.launched, last.launched + 1, "{dev}");
            // Round 1 is round 0's work on other buffers: an update.
            if round == 1 {
                assert_eq!(s.updated, last.updated + 1, "{dev}");
            }
            last = s;
        }
        // Other kernels (a different op sequence) still give the right values.
        let a = Tensor::from_slice(&[1.0f32, 4.0, 9.0], &[3], &dev).unwrap();
        let out = g.run(|| a.sqrt()?.neg()).unwrap();
        assert_eq!(out.to_vec().unwrap(), [-1.0, -2.0, -3.0], "{dev}");
        assert_eq!(g.stats().launched, last.launched + 1, "{dev}");
    }
}

/// A copy to the host or a wait inside a recording is a typed error;
/// nothing of the recording ran, and the device works on after it.
#[test]
fn graphs_refuse_host_copies_and_waits_on_gpus() {
    for dev in gpus() {
        let mut g = ferrocm::Graph::new(&dev);
        let mut buf = dev.upload(&[7u32; 64]).unwrap();
        let threes = dev.upload(&[3u32; 64]).unwrap();
        let e = g
            .run(|| {
                buf.copy_from(&threes)?; // recorded, then abandoned
                buf.download()
            })
            .unwrap_err();
        assert!(
            matches!(
                e,
                HostError::NotRecordable {
                    what: "a copy to the host",
                    ..
                }
            ),
            "{dev}: {e}"
        );
        assert!(e.to_string().contains("cannot be recorded"), "{e}");
        assert_eq!(
            buf.download().unwrap(),
            vec![7u32; 64],
            "{dev}: the fill ran"
        );
        let e = g.run(|| dev.synchronize()).unwrap_err();
        assert!(
            matches!(e, HostError::NotRecordable { what: "a wait", .. }),
            "{dev}: {e}"
        );
        let e = g.run(|| dev.upload(&[1u8, 2]).map(drop)).unwrap_err();
        assert!(matches!(e, HostError::NotRecordable { .. }), "{dev}: {e}");
        // A panic inside a recording ends it; nothing of it runs.
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = g.run(|| -> Result<(), HostError> {
                buf.copy_from(&threes)?;
                panic!("inside a recording")
            });
        }));
        assert!(panicked.is_err());
        assert_eq!(
            buf.download().unwrap(),
            vec![7u32; 64],
            "{dev}: the copy ran"
        );
        // The device and the graph work on.
        let a = Tensor::from_slice(&[0.0f32, 1.0], &[2], &dev).unwrap();
        let out = g.run(|| a.exp()).unwrap();
        close(
            &out.to_vec().unwrap(),
            &[1.0, std::f32::consts::E],
            "after the errors",
        );
        assert_eq!(g.stats().launched, 1, "{dev}");
    }
}

/// Work queued from another thread while one records waits for the launch
/// and never lands in the graph: both threads get their own values.
#[test]
fn graphs_keep_other_threads_work_out_on_gpus() {
    for dev in gpus() {
        let n = 4096;
        let av: Vec<f32> = (0..n).map(|i| (i % 13) as f32 / 7.0).collect();
        let bv: Vec<f32> = (0..n).map(|i| (i % 5) as f32 - 2.0).collect();
        let want = expected(&av, &bv);
        std::thread::scope(|s| {
            let other = s.spawn(|| {
                for k in 0..200 {
                    let x = Tensor::from_slice(&[k as f32, 2.0], &[2], &dev).unwrap();
                    let y = x.mul(&x).unwrap().to_vec().unwrap();
                    assert_eq!(y, [(k * k) as f32, 4.0], "{dev}: the other thread");
                }
            });
            let mut g = ferrocm::Graph::new(&dev);
            for _ in 0..20 {
                let a = Tensor::from_slice(&av, &[n], &dev).unwrap();
                let b = Tensor::from_slice(&bv, &[n], &dev).unwrap();
                let out = g
                    .run(|| {
                        let y = recorded_work(&a, &b)?;
                        std::thread::sleep(std::time::Duration::from_millis(2));
                        Ok::<_, ferrocm::Error>(y)
                    })
                    .unwrap();
                close(&out.to_vec().unwrap(), &want, "the recording thread");
            }
            other.join().unwrap();
        });
    }
}

/// An op's geometry goes up once per device and content
/// (`Device::upload_words`): the same words give the same buffer, other
/// words another; a pooling run outside a recording then records (no copy
/// from the host left in it) and gives the values of a max written here; a
/// shape not run before is refused inside one, as every copy from the host.
#[test]
fn cached_geometry_lets_a_pool_record_on_gpus() {
    use ferrocm::ops::conv::PoolOptions;
    for dev in gpus() {
        let a = dev.upload_words(&[5, 9, 2, 6]).unwrap();
        let b = dev.upload_words(&[5, 9, 2, 6]).unwrap();
        let c = dev.upload_words(&[5, 9, 2, 7]).unwrap();
        assert!(std::sync::Arc::ptr_eq(&a, &b), "{dev}: one upload");
        assert!(!std::sync::Arc::ptr_eq(&a, &c), "{dev}");
        assert_eq!(b.download().unwrap(), [5, 9, 2, 6], "{dev}");
        assert_eq!(c.download().unwrap(), [5, 9, 2, 7], "{dev}");

        // (2, 3, 7, 5), windows 3 x 2 at stride 3 x 2: 2 x 2 outputs a plane.
        let (n, ch, h, w) = (2, 3, 7, 5);
        let xv: Vec<f32> = (0..n * ch * h * w)
            .map(|i| ((i * 29 % 41) as f32 - 20.0) / 3.0)
            .collect();
        let mut want = Vec::new();
        for plane in 0..n * ch {
            for oy in 0..2 {
                for ox in 0..2 {
                    let mut best = f32::NEG_INFINITY;
                    for ky in 0..3 {
                        for kx in 0..2 {
                            best = best.max(xv[plane * h * w + (3 * oy + ky) * w + 2 * ox + kx]);
                        }
                    }
                    want.push(best);
                }
            }
        }
        let x = Tensor::from_slice(&xv, &[n, ch, h, w], &dev).unwrap();
        let o = PoolOptions::new(&[3, 2]);
        let (plain, plain_at) = x.max_pool_with_indices(2, &o).unwrap();
        assert_eq!(plain.to_vec().unwrap(), want, "{dev}: plain");
        let mut g = ferrocm::Graph::new(&dev);
        let (y, at) = g.run(|| x.max_pool_with_indices(2, &o)).unwrap();
        assert_eq!(y.to_vec().unwrap(), want, "{dev}: recorded");
        assert_eq!(at.to_vec().unwrap(), plain_at.to_vec().unwrap(), "{dev}");
        assert_eq!(g.stats().launched, 1, "{dev}");

        let other = Tensor::from_slice(&xv, &[n, ch, w, h], &dev).unwrap();
        let e = g
            .run(|| other.max_pool_with_indices(2, &o))
            .map(drop)
            .unwrap_err();
        assert!(
            matches!(e, Error::Host(HostError::NotRecordable { .. })),
            "{dev}: {e}"
        );

        // A strided row reduction reads its layout from memory, which goes
        // up the same way: after a plain run it records. Integer values, so
        // the sums are exact in f32.
        let mv: Vec<f32> = (0..6 * 35).map(|i| (i * 7 % 13) as f32 - 6.0).collect();
        let m = Tensor::from_slice(&mv, &[6, 35], &dev)
            .unwrap()
            .transpose(0, 1)
            .unwrap();
        let want: Vec<f32> = (0..35)
            .map(|r| (0..6).map(|c| mv[c * 35 + r]).sum())
            .collect();
        assert_eq!(m.sum(&[1], false).unwrap().to_vec().unwrap(), want, "{dev}");
        let s = g.run(|| m.sum(&[1], false)).unwrap();
        assert_eq!(s.to_vec().unwrap(), want, "{dev}: recorded");
        assert_eq!(g.stats().launched, 2, "{dev}");
    }
}
