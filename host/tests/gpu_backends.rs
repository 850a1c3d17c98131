//! The GPU backends through `Device`, the way every caller reaches them:
//! discovery without a GPU (this workspace's CI: absence reported, errors
//! instead of panics, the CPU as the best device), and, where a GPU
//! answers, memory, copies, a launch, timing, the libraries and use from
//! another thread, each checked against the host.
//!
//! `cargo test -p ferrocm-host --features rocm,cuda -- rocm:: cuda::` runs
//! them (CI does, with no GPU).

#![allow(unused_imports)]

use ferrocm_host::{Arg, Device, Error, LaunchConfig};

/// Everything a GPU device offers, checked on `dev`.
#[allow(dead_code)]
fn exercise(dev: &Device) {
    let info = dev.gpu_info().expect("a GPU");
    eprintln!("on_a_gpu: {info:?}");
    assert!(info.wave_size == 32 || info.wave_size == 64);
    assert!(info.compute_units > 0 && info.total_memory > 0 && info.max_lds_bytes >= 32 * 1024);
    let (free, total) = dev.memory_info().unwrap().unwrap();
    assert!(free <= total && total > 0);

    // Memory: zero-byte, fills, round trips, device copies, length checks.
    let empty = dev.upload::<u8>(&[]).unwrap();
    assert_ne!(empty.device_ptr(), 0);
    let data: Vec<u8> = (0..=255).cycle().take(4099).collect();
    let zeros = dev.alloc_zeroed::<u8>(data.len()).unwrap();
    assert!(zeros.download().unwrap().iter().all(|&x| x == 0));
    let a = dev.upload(&data).unwrap();
    let mut b = dev.alloc::<u8>(data.len()).unwrap();
    b.copy_from(&a).unwrap();
    assert_eq!(b.download().unwrap(), data);
    // The asynchronous upload lands in stream order.
    let rev: Vec<u8> = data.iter().rev().copied().collect();
    let c = dev.upload_async(&rev).unwrap();
    assert_eq!(c.download().unwrap(), rev);
    assert!(matches!(
        b.write(&data[1..]),
        Err(Error::LengthMismatch { .. })
    ));
    assert!(matches!(
        dev.alloc::<u8>(usize::MAX / 4),
        Err(Error::OutOfMemory { .. } | Error::Rocm { .. } | Error::Cuda { .. })
    ));
    dev.synchronize().unwrap();

    // A kernel through the public launch path, timed, against the host.
    let n = 100_003usize;
    let xs: Vec<f32> = (0..n).map(|i| (i % 1000) as f32 * 0.01 - 5.0).collect();
    let x = dev.upload(&xs).unwrap();
    let y = dev.alloc::<f32>(n).unwrap();
    let args = [
        Arg::output(&y),
        Arg::input(&x),
        Arg::U64(n as u64),
        Arg::U32(0),
        Arg::Null,
        Arg::U64(0),
        Arg::U64(0),
        Arg::U64(0),
        Arg::U64(0),
        Arg::F32(0.0),
    ];
    let ms = dev
        .time(|| dev.launch("unary_exp_f32", LaunchConfig::linear(n as u64, 256), &args))
        .unwrap();
    eprintln!("on_a_gpu: unary_exp_f32 over {n} elements: {ms:.3} ms");
    assert!(ms >= 0.0);
    for (i, (g, x)) in y.download().unwrap().iter().zip(&xs).enumerate() {
        let want = x.exp();
        assert!(
            (g - want).abs() <= 1e-5 * want.abs().max(1.0),
            "element {i}: {g} vs {want}"
        );
    }

    // Libraries, where they load (each backend says which it opens).
    let gpu = dev.gpu().unwrap();
    for lib in gpu.libraries() {
        eprintln!("on_a_gpu: {}: {:?}", lib.name, lib.status);
    }
    if let Some(blas) = gpu.blas() {
        eprintln!("on_a_gpu: BLAS {}", blas.name());
    }
    if let Some(dnn) = dev.dnn() {
        assert!(!dnn.handle().raw().is_null());
    }
    // Used from another thread.
    let dev2 = dev.clone();
    std::thread::spawn(move || dev2.synchronize().unwrap())
        .join()
        .unwrap();
}

#[cfg(feature = "rocm")]
mod rocm {
    use super::*;
    use ferrocm_host::rocm::{RocmDevice, absence_reason, device_count};

    /// On a machine without ROCm (this workspace's CI): no devices, a reason,
    /// errors instead of panics, and the CPU as the best device.
    #[test]
    fn without_rocm_there_is_no_rocm_device_and_best_falls_back() {
        let reason = absence_reason();
        assert!(!reason.is_empty());
        eprintln!("absence_reason: {reason}");
        if reason.contains("not installed") {
            assert_eq!(device_count(), 0);
            assert!(reason.contains("libamdhip64"), "{reason}");
        }
        if device_count() == 0 {
            match RocmDevice::new(0) {
                Err(Error::NoGpu { reason }) => assert!(!reason.is_empty()),
                Err(Error::Rocm { .. }) => {}
                Err(e) => panic!("unexpected error: {e}"),
                Ok(d) => panic!("a device without devices: {d:?}"),
            }
            assert!(matches!(
                Device::rocm(0),
                Err(Error::NoGpu { .. } | Error::Rocm { .. })
            ));
            // No ROCm device: `best` falls back (to a CUDA GPU when one
            // answers, else the CPU) and never picks ROCm.
            let best = Device::best();
            assert!(!best.to_string().starts_with("rocm"), "{best}");
            if std::env::var_os("FERROCM_DEVICE").is_none() {
                #[cfg(feature = "cuda")]
                let cuda = ferrocm_host::cuda::device_count() > 0;
                #[cfg(not(feature = "cuda"))]
                let cuda = false;
                if !cuda {
                    assert_eq!(best, Device::Cpu);
                    assert!(ferrocm_host::gpus().is_err());
                }
            }
        }
    }

    /// Everything that needs a GPU. Skipped (with a note) when none answers,
    /// as on this workspace's CI; the first run on an AMD GPU checks the whole
    /// backend against the host.
    #[test]
    fn on_a_gpu() {
        if device_count() == 0 {
            eprintln!("on_a_gpu: skipped, no ROCm GPU ({})", absence_reason());
            return;
        }
        match Device::rocm(0) {
            Ok(dev) => exercise(&dev),
            // A GPU this build has no code object for is reported, not failed.
            Err(e @ Error::NoCodeObject { .. }) => eprintln!("on_a_gpu: skipped: {e}"),
            Err(e) => panic!("{e}"),
        }
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    use super::*;
    use ferrocm_host::cuda::{absence_reason, device_count};

    /// Without a driver: no devices, a reason, an error naming CUDA.
    #[test]
    fn without_cuda_there_is_no_cuda_device() {
        if device_count() > 0 {
            return;
        }
        assert!(!absence_reason().is_empty());
        assert!(matches!(Device::cuda(0), Err(Error::NoGpu { .. })));
        assert!("cuda:0".parse::<Device>().is_err());
    }

    /// The same checks as on ROCm, on every CUDA GPU that answers.
    #[test]
    fn on_a_gpu() {
        if device_count() == 0 {
            eprintln!("on_a_gpu: skipped, no CUDA GPU ({})", absence_reason());
            return;
        }
        exercise(&Device::cuda(0).unwrap());
    }
}
