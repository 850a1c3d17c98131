//! The op layer's promises: no synchronisation and no fresh allocation on an
//! op's path after warm-up, the caching allocator's statistics, typed
//! kernel launches, and run-time typed tensors.
//!
//! The counters are per device and shared by every thread of the process:
//! the counting test is the only one in this binary that uses its device
//! (the emulator without sanitizer, wave 32).

use ferrocm::host::{EmulatorConfig, In, LaunchConfig, MemoryStats, Out};
use ferrocm::kernels::host::KernelRef;
use ferrocm::ops::{Binary, DType, DynTensor, Reduce, Unary};
use ferrocm::{Device, Tensor};

/// 100 ops over strided and broadcast views: transposes, narrows and
/// broadcasts feed unary, binary, affine, cast, where, reductions and copies.
fn chain_of_100_strided_ops(x: &Tensor<f32>, y: &Tensor<f32>) -> f32 {
    let mut acc = 0.0;
    for _ in 0..10 {
        let xt = x.transpose(0, 1).unwrap(); // [40, 30] strided
        let yn = y.narrow(1, 3, 30).unwrap(); // [40, 30] strided, offset
        let a = xt.add(&yn).unwrap(); // 1
        let b = xt.exp().unwrap(); // 2
        let c = b.mul(&yn).unwrap(); // 3
        let d = c.transpose(0, 1).unwrap().silu().unwrap(); // 4
        let e = d.affine(0.5, 1.0).unwrap(); // 5
        let f = e.to_dtype::<half::bf16>().unwrap(); // 6
        let g = f.transpose(0, 1).unwrap().to_dtype::<f32>().unwrap(); // 7
        let m = g.gt(&a).unwrap(); // 8
        let h = m.where_cond(&g, &a).unwrap(); // 9
        let s = h.transpose(0, 1).unwrap().sum(&[0], false).unwrap(); // 10 -> [40]
        acc += s.narrow(0, 0, 1).unwrap().elem_count() as f32;
        drop((a, b, c, d, e, f, g, m, h, s));
    }
    acc
}

fn delta(after: MemoryStats, before: MemoryStats) -> (u64, u64, u64) {
    (
        after.fresh_allocations - before.fresh_allocations,
        after.synchronizations - before.synchronizations,
        after.launches - before.launches,
    )
}

#[test]
fn a_chain_of_100_strided_ops_after_warm_up_neither_synchronises_nor_allocates() {
    let dev = Device::emulator_with(EmulatorConfig {
        wave_size: 32,
        sanitize: false,
    })
    .unwrap();
    let x = Tensor::<f32>::randn(&[30, 40], 0.0, 1.0, 1, &dev).unwrap();
    let y = Tensor::<f32>::randn(&[40, 33], 0.0, 1.0, 2, &dev).unwrap();
    chain_of_100_strided_ops(&x, &y); // warm-up: fills the cache
    let before = dev.memory_stats();
    chain_of_100_strided_ops(&x, &y);
    let after = dev.memory_stats();
    let (fresh, syncs, launches) = delta(after, before);
    assert_eq!(
        fresh, 0,
        "fresh allocations after warm-up: {before:?} -> {after:?}"
    );
    assert_eq!(
        syncs, 0,
        "synchronisations on the op path: {before:?} -> {after:?}"
    );
    assert_eq!(launches, 100, "one launch per op");
    assert!(after.reused_allocations > before.reused_allocations);
    // Reading back is where the host waits, and it is counted.
    let _ = x.to_vec().unwrap();
    assert_eq!(
        dev.memory_stats().synchronizations,
        after.synchronizations + 1
    );

    // The same chain on the Cpu device allocates nothing fresh either.
    let (xc, yc) = (
        x.to_device(&Device::Cpu).unwrap(),
        y.to_device(&Device::Cpu).unwrap(),
    );
    chain_of_100_strided_ops(&xc, &yc);
    let before = Device::Cpu.memory_stats();
    chain_of_100_strided_ops(&xc, &yc);
    let (fresh, syncs, launches) = delta(Device::Cpu.memory_stats(), before);
    assert_eq!((fresh, syncs, launches), (0, 0, 0));
}

#[test]
fn the_cache_reports_use_peak_and_empties() {
    let dev = Device::emulator(64);
    let a = dev.alloc::<f32>(1 << 16).unwrap();
    let s = dev.memory_stats();
    assert!(s.bytes_in_use >= 1 << 18);
    assert!(s.peak_bytes_in_use >= s.bytes_in_use);
    drop(a);
    assert!(dev.memory_stats().bytes_cached >= 1 << 18);
    dev.empty_cache();
    assert_eq!(dev.memory_stats().bytes_cached, 0);
}

#[test]
fn a_reused_block_is_poisoned_again_and_keeps_its_red_zones() {
    let dev = Device::emulator(32); // sanitizer on
    let mut a = dev.alloc::<u32>(100).unwrap();
    a.write(&[7; 100]).unwrap();
    drop(a);
    // Same size class, shorter: the red zone must sit right after 90 elements
    // and the stale 7s must be gone.
    let b = dev.alloc::<u32>(90).unwrap();
    assert!(b.download().unwrap().iter().all(|&v| v == u32::MAX));
}

#[test]
fn typed_launch_checks_devices_at_run_time() {
    use ferrocm::kernels::unary::unary_exp_f32;
    let emu = Device::emulator(64);
    let x = Device::Cpu.upload(&[0.0f32; 4]).unwrap(); // wrong device
    let y = emu.alloc::<f32>(4).unwrap();
    let err = emu
        .launch_typed(
            KernelRef::of::<unary_exp_f32>(),
            LaunchConfig::linear(4, 64),
            (Out::new(&y), In::new(&x), 4, 0, In::null(), 0.0),
        )
        .unwrap_err();
    assert!(err.to_string().contains("unary_exp_f32"), "{err}");
}

#[test]
fn dyn_tensors_run_ops_chosen_at_run_time() {
    let dev = Device::emulator(32);
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        let x: DynTensor = Tensor::from_slice(&[1.0f32, 4.0, 9.0, 16.0], &[2, 2], &dev)
            .unwrap()
            .to_dyn()
            .to_dtype(dtype)
            .unwrap();
        assert_eq!(x.dtype().unwrap(), dtype);
        let y = x
            .transpose(0, 1)
            .unwrap()
            .unary(Unary::Sqrt, 0.0)
            .unwrap()
            .binary(&x.transpose(0, 1).unwrap(), Binary::Add)
            .unwrap()
            .reduce(Reduce::Sum, &[1], false)
            .unwrap();
        assert_eq!(
            y.to_f64_vec().unwrap(),
            vec![1.0 + 1.0 + 9.0 + 3.0, 4.0 + 2.0 + 16.0 + 4.0]
        );
        assert!(y.typed::<f32>().is_ok() == (dtype == DType::F32));
    }
    let ints: DynTensor = Tensor::from_slice(&[3i64, -1], &[2], &dev).unwrap().into();
    assert!(ints.unary(Unary::Exp, 0.0).is_err());
    assert_eq!(
        ints.argmax(&[0], false)
            .unwrap()
            .typed::<u32>()
            .unwrap()
            .to_vec()
            .unwrap(),
        vec![0]
    );
    let back: Tensor<i64> = ints.clone().try_into().unwrap();
    assert!(std::sync::Arc::ptr_eq(
        back.shared_storage(),
        ints.shared_storage()
    ));
}
