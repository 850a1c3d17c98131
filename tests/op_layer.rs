//! The op layer's promises: no synchronisation and no fresh allocation on an
//! op's path after warm-up, the caching allocator's statistics, typed
//! kernel launches, and run-time typed tensors.
//!
//! The counters and caches are per device and shared by every thread of the
//! process: the counting test is the only one in this binary that uses its
//! emulator (no sanitizer, wave 32), and every test holds [`CPU_COUNTERS`]
//! so that the Cpu's counters move only for the one counting and the
//! emulators' caches only for the test reading them.

use ferrocm::host::{EmulatorConfig, In, LaunchConfig, MemoryStats, Out};
use ferrocm::kernels::host::KernelRef;
use ferrocm::ops::{Binary, DType, DynTensor, Reduce, Unary};
use ferrocm::{Device, Tensor, WaveSize};
use std::sync::{Mutex, MutexGuard};

/// Held by every test here: the Cpu's counters and each emulator's cache
/// are one per process, and a test running beside the one reading them
/// would move them.
static CPU_COUNTERS: Mutex<()> = Mutex::new(());

fn hold_cpu_counters() -> MutexGuard<'static, ()> {
    // A failed test poisons the lock; the counters are still sound.
    CPU_COUNTERS.lock().unwrap_or_else(|e| e.into_inner())
}

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
    let _cpu = hold_cpu_counters();
    let dev = Device::emulator_with(EmulatorConfig {
        sanitize: false,
        ..EmulatorConfig::new(WaveSize::Wave32)
    });
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
    // The wave-64 emulator's cache is shared with the other tests here: one
    // freeing a buffer between `empty_cache` and the check would fill it
    // (CI saw 2560 bytes cached).
    let _serial = hold_cpu_counters();
    let dev = Device::emulator(WaveSize::Wave64);
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
    let _serial = hold_cpu_counters();
    let dev = Device::emulator(WaveSize::Wave32); // sanitizer on
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
    let _cpu = hold_cpu_counters();
    use ferrocm::kernels::unary::unary_exp_f32;
    let emu = Device::emulator(WaveSize::Wave64);
    let x = Device::Cpu.upload(&[0.0f32; 4]).unwrap(); // wrong device
    let y = emu.alloc::<f32>(4).unwrap();
    let err = emu
        .launch_typed(
            KernelRef::of::<unary_exp_f32>(),
            LaunchConfig::linear(4, 64),
            (Out::new(&y), In::new(&x), 4, 0, In::null(), 0, 0, 0, 0, 0.0),
        )
        .unwrap_err();
    assert!(err.to_string().contains("unary_exp_f32"), "{err}");
}

#[test]
fn dyn_tensors_run_ops_chosen_at_run_time() {
    let _cpu = hold_cpu_counters();
    let dev = Device::emulator(WaveSize::Wave32);
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

/// Layouts reach kernels three ways: the contiguous fast path, by value
/// (rank ≤ 4) and from memory (rank 5 and more; reductions always). Every
/// way, for every rank from 1 to 6, against the Cpu backend, element for
/// element (copies and casts exactly).
#[test]
fn strided_layouts_of_every_rank_agree_with_the_cpu() {
    let _cpu = hold_cpu_counters();
    for rank in 1..=6usize {
        let shape: Vec<usize> = (0..rank).map(|d| 2 + (d * 3 + rank) % 4).collect();
        let perm: Vec<usize> = (0..rank).rev().collect();
        for dev in [
            Device::emulator(WaveSize::Wave32),
            Device::emulator(WaveSize::Wave64),
        ] {
            let x = Tensor::<f32>::randn(&shape, 0.0, 1.0, rank as u64, &Device::Cpu).unwrap();
            let y = Tensor::<f32>::randn(&shape, 0.0, 1.0, 99, &Device::Cpu).unwrap();
            let (xe, ye) = (x.to_device(&dev).unwrap(), y.to_device(&dev).unwrap());
            // A permuted view, and one with a broadcast (stride 0) dim.
            let pick = |t: &Tensor<f32>| {
                let p = t.permute(&perm).unwrap();
                let mut b = p.shape().to_vec();
                b[rank - 1] = 1;
                (
                    p.clone(),
                    p.narrow(rank - 1, 1, 1)
                        .unwrap()
                        .broadcast_as(p.shape())
                        .unwrap(),
                    b,
                )
            };
            let ((pc, bc, _), (pe, be, _)) = (pick(&x), pick(&xe));
            let (qc, qe) = (y.permute(&perm).unwrap(), ye.permute(&perm).unwrap());
            let same = |what: &str, a: Vec<f32>, b: Vec<f32>| {
                assert_eq!(a.len(), b.len(), "{what}, rank {rank}, {dev}");
                for (k, (u, v)) in a.iter().zip(&b).enumerate() {
                    assert!(
                        (u - v).abs() <= 1e-6 * v.abs().max(1.0),
                        "{what}, rank {rank}, {dev}, element {k}: {u} vs {v}"
                    );
                }
            };
            same(
                "contiguous",
                pe.contiguous().unwrap().to_vec().unwrap(),
                pc.contiguous().unwrap().to_vec().unwrap(),
            );
            same(
                "exp",
                pe.exp().unwrap().to_vec().unwrap(),
                pc.exp().unwrap().to_vec().unwrap(),
            );
            same(
                "affine",
                pe.affine(2.0, 1.0).unwrap().to_vec().unwrap(),
                pc.affine(2.0, 1.0).unwrap().to_vec().unwrap(),
            );
            same(
                "add",
                pe.add(&qe).unwrap().to_vec().unwrap(),
                pc.add(&qc).unwrap().to_vec().unwrap(),
            );
            same(
                "mul bcast",
                be.mul(&qe).unwrap().to_vec().unwrap(),
                bc.mul(&qc).unwrap().to_vec().unwrap(),
            );
            let (me, mc) = (pe.gt(&be).unwrap(), pc.gt(&bc).unwrap());
            assert_eq!(
                me.to_vec().unwrap(),
                mc.to_vec().unwrap(),
                "gt, rank {rank}, {dev}"
            );
            same(
                "where",
                me.where_cond(&pe, &qe).unwrap().to_vec().unwrap(),
                mc.where_cond(&pc, &qc).unwrap().to_vec().unwrap(),
            );
            let (ce, cc) = (
                pe.to_dtype::<half::bf16>().unwrap(),
                pc.to_dtype::<half::bf16>().unwrap(),
            );
            assert_eq!(
                ce.to_vec().unwrap(),
                cc.to_vec().unwrap(),
                "cast, rank {rank}, {dev}"
            );
            let dims: Vec<usize> = (0..rank).step_by(2).collect();
            same(
                "sum",
                pe.sum(&dims, false).unwrap().to_vec().unwrap(),
                pc.sum(&dims, false).unwrap().to_vec().unwrap(),
            );
            assert_eq!(
                pe.argmax(&[rank - 1], false).unwrap().to_vec().unwrap(),
                pc.argmax(&[rank - 1], false).unwrap().to_vec().unwrap(),
                "argmax, rank {rank}, {dev}"
            );
        }
    }
}
