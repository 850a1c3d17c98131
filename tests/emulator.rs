//! The SIMT emulator and its sanitizer, on kernels written for these tests.
//!
//! The broken kernels below are plain host functions on the device layer with a
//! hand-made `KernelInfo`: they are not `#[amdgpu_global]`, so they never reach
//! the shipped code objects.

use ferrocm::WaveSize;
use ferrocm::host::{Arg, Device, EmulatorConfig, Error, LaunchConfig};
use ferrocm::kernels::device::*;
use ferrocm::kernels::host::{KernelArg, KernelInfo};
use std::time::{Duration, Instant};

/// A test kernel: a host fn plus its KernelInfo.
macro_rules! test_kernel {
    ($info:ident = fn $name:ident($($arg:ident: $ty:ty),*) $body:block) => {
        #[allow(clippy::not_unsafe_ptr_arg_deref)]
        fn $name($($arg: $ty),*) $body
        const $info: KernelInfo = KernelInfo::host_only(
            stringify!($name),
            &[$(<$ty as KernelArg>::KIND),*],
            {
                fn entry(raw: &[u64]) {
                    let mut _it = raw.iter();
                    $name($(<$ty as KernelArg>::from_raw(*_it.next().unwrap())),*)
                }
                entry
            },
        );
    };
}

test_kernel!(OOB_WRITE = fn oob_write(out: *mut f32, n: u64) {
    let i = global_id_x();
    // Bug: `<=` writes one element past the end.
    if i <= n {
        unsafe { *out.add(i as usize) = 1.0 };
    }
});

test_kernel!(SKIPS_ODD = fn skips_odd(out: *mut f32, n: u64) {
    let i = global_id_x();
    // Bug: odd elements are never written.
    if i < n && i.is_multiple_of(2) {
        unsafe { *out.add(i as usize) = 1.0 };
    }
});

test_kernel!(LDS_OVERRUN = fn lds_overrun(out: *mut f32) {
    let l = lds::<f32>();
    // Bug: the launch gives 64 floats of LDS for 128 workitems.
    l.store(workitem_id_x(), 1.0);
    barrier();
    unsafe { *out.add(workitem_id_x() as usize) = l.load(workitem_id_x()) };
});

test_kernel!(HALF_BARRIER = fn half_barrier(out: *mut u32) {
    // Bug: only half the workgroup reaches the barrier.
    if workitem_id_x() < workgroup_size_x() / 2 {
        barrier();
    }
    unsafe { *out.add(global_id_x() as usize) = 1 };
});

test_kernel!(DIVERGENT_WAVE = fn divergent_wave(out: *mut f32) {
    // Bug: lanes of one wave wait at different ops.
    let v = if lane_id() < 4 { wave_sum_f32(1.0) } else { barrier(); 0.0 };
    unsafe { *out.add(global_id_x() as usize) = v };
});

test_kernel!(WAVE_OPS = fn wave_ops(sum: *mut f32, max: *mut f32, xor1: *mut u32, bcast: *mut u32, ballot: *mut u64, lane: *mut u32, gather: *mut u32) {
    let g = global_id_x() as usize;
    let l = lane_id();
    unsafe {
        *sum.add(g) = wave_sum_f32(l as f32);
        *max.add(g) = wave_max_f32(-(l as f32));
        *xor1.add(g) = wave_shfl_xor(l, 1);
        *bcast.add(g) = wave_broadcast(l * 10, 3);
        *ballot.add(g) = wave_ballot(l.is_multiple_of(3));
        *lane.add(g) = l;
        // A source per lane: lane l reads lane (5l + 3) mod the wave size.
        *gather.add(g) = wave_shfl(l * 7 + 1, (l * 5 + 3) % wave_size());
    }
});

test_kernel!(BLOCK_SUM = fn block_sum(out: *mut f32, inp: *const f32) {
    // Two-phase reduction through LDS with barriers: every workitem writes its
    // value, then workitem 0 adds them up after the barrier.
    let l = lds::<f32>();
    let t = workitem_id_x();
    l.store(t, unsafe { *inp.add(global_id_x() as usize) });
    barrier();
    if t == 0 {
        let mut s = 0.0;
        for k in 0..workgroup_size_x() {
            s += l.load(k);
        }
        unsafe { *out.add(workgroup_id_x() as usize) = s };
    }
});

test_kernel!(PANICS = fn panics(out: *mut u32, n: u64) {
    let v = [1u32, 2, 3];
    // Bug: index out of bounds for every workitem past 2.
    unsafe { *out.add(global_id_x() as usize % n as usize) = v[global_id_x() as usize] };
});

fn emu(wave: WaveSize) -> Device {
    Device::emulator(wave)
}

test_kernel!(OOB_READ = fn oob_read(out: *mut f32, inp: *const f32, n: u64) {
    let i = global_id_x();
    // Bug: `<=` reads one element past the end of `inp`.
    if i <= n {
        unsafe { store(out, i as usize % n as usize, load(inp, i as usize)) };
    }
});

test_kernel!(WRITES_INPUT = fn writes_input(inp: *const f32) {
    // Bug: writes through a `*const` argument.
    unsafe { store(inp as *mut f32, global_id_x() as usize, 0.0) };
});

/// Reads are checked too: one element past an input's end is an error that
/// names the kernel, the argument and the offset (the red zones only see
/// writes, and a read leaves no trace).
#[test]
fn out_of_bounds_read_is_caught() {
    for wave in WaveSize::ALL {
        let dev = emu(wave);
        let x = dev.upload(&[1.0f32; 100]).unwrap();
        let out = dev.alloc::<f32>(100).unwrap();
        let err = dev
            .launch_kernel(
                &OOB_READ,
                LaunchConfig::linear(101, 64),
                &[Arg::output(&out), Arg::input(&x), Arg::U64(100)],
            )
            .unwrap_err();
        match err {
            Error::OutOfBoundsAccess { kernel, detail } => {
                assert_eq!(kernel, "oob_read");
                assert!(
                    detail.starts_with(
                        "read 4 bytes at byte offset 400 of argument 1, outside the 400 bytes"
                    ),
                    "{detail}"
                );
            }
            e => panic!("expected OutOfBoundsAccess, got {e}"),
        }
        // The same kernel within bounds runs.
        dev.launch_kernel(
            &OOB_READ,
            LaunchConfig::linear(100, 64),
            &[Arg::output(&out), Arg::input(&x), Arg::U64(99)],
        )
        .unwrap();
        // A range narrower than the buffer is what the kernel may read:
        // element 50 lies in the buffer but outside the declared 50.
        let err = dev
            .launch_kernel(
                &OOB_READ,
                LaunchConfig::linear(51, 64),
                &[Arg::output(&out), Arg::input_range(&x, 0, 50), Arg::U64(50)],
            )
            .unwrap_err();
        assert!(matches!(err, Error::OutOfBoundsAccess { .. }), "{err}");
        let err = dev
            .launch_kernel(
                &WRITES_INPUT,
                LaunchConfig::linear(4, 64),
                &[Arg::input(&x)],
            )
            .unwrap_err();
        assert!(err.to_string().contains("read-only"), "{err}");
    }
}

/// Before any memory is touched, the launch proves that each buffer
/// argument's range lies in its buffer: an offset or a range past the end
/// is refused on every device (here the emulator and, with nothing
/// launched, the checks alone), and the overflowing end prints as such.
#[test]
fn buffer_ranges_past_the_end_are_refused_before_launch() {
    let dev = emu(WaveSize::Wave64);
    let x = dev.upload(&[1.0f32; 8]).unwrap();
    let out = dev.alloc::<f32>(8).unwrap();
    for (arg, want) in [
        (
            Arg::input_at(&x, 9),
            "argument 1 covers elements 9..its end of a buffer of 8",
        ),
        (
            Arg::input_range(&x, 4, 5),
            "argument 1 covers elements 4..9 of a buffer of 8",
        ),
        (
            Arg::input_range(&x, 1, usize::MAX),
            "argument 1 covers elements 1..1 + 18446744073709551615 (overflows) of a buffer of 8",
        ),
    ] {
        let err = dev
            .launch_kernel(
                &OOB_READ,
                LaunchConfig::linear(1, 64),
                &[Arg::output(&out), arg, Arg::U64(1)],
            )
            .unwrap_err();
        assert!(
            matches!(err, Error::ArgumentOutOfBounds { arg: 1, .. }),
            "{err}"
        );
        assert!(err.to_string().ends_with(want), "{err}");
    }
    // A range that ends at the buffer's end is inside it.
    dev.launch_kernel(
        &OOB_READ,
        LaunchConfig::linear(1, 64),
        &[Arg::output(&out), Arg::input_range(&x, 4, 4), Arg::U64(1)],
    )
    .unwrap();
}

#[test]
fn out_of_bounds_write_is_caught_by_red_zones() {
    for wave in WaveSize::ALL {
        let dev = emu(wave);
        let out = dev.alloc::<f32>(100).unwrap();
        let err = dev
            .launch_kernel(
                &OOB_WRITE,
                LaunchConfig::linear(101, 64),
                &[Arg::output(&out), Arg::U64(100)],
            )
            .unwrap_err();
        match err {
            Error::OutOfBoundsWrite {
                kernel, arg, side, ..
            } => {
                assert_eq!((kernel.as_str(), arg, side), ("oob_write", 0, "end"));
            }
            e => panic!("expected OutOfBoundsWrite, got {e}"),
        }
    }
}

#[test]
fn unwritten_outputs_stay_poisoned() {
    let dev = emu(WaveSize::Wave64);
    let out = dev.alloc::<f32>(10).unwrap();
    dev.launch_kernel(
        &SKIPS_ODD,
        LaunchConfig::linear(10, 64),
        &[Arg::output(&out), Arg::U64(10)],
    )
    .unwrap();
    let v = out.download().unwrap();
    assert!(v.iter().step_by(2).all(|x| *x == 1.0));
    assert!(
        v.iter().skip(1).step_by(2).all(|x| x.is_nan()),
        "odd elements must be poisoned: {v:?}"
    );
    // Without the sanitizer fresh buffers are zeroed, and the bug is invisible.
    let plain = Device::emulator_with(EmulatorConfig {
        sanitize: false,
        ..EmulatorConfig::new(WaveSize::Wave64)
    });
    let out = plain.alloc::<f32>(10).unwrap();
    plain
        .launch_kernel(
            &SKIPS_ODD,
            LaunchConfig::linear(10, 64),
            &[Arg::output(&out), Arg::U64(10)],
        )
        .unwrap();
    assert_eq!(out.download().unwrap()[1], 0.0);
}

#[test]
fn lds_overrun_is_caught() {
    let dev = emu(WaveSize::Wave32);
    let out = dev.alloc::<f32>(128).unwrap();
    let cfg = LaunchConfig {
        grid: [1, 1, 1],
        block: [128, 1, 1],
        lds_bytes: 64 * 4,
        early_start: false,
    };
    match dev
        .launch_kernel(&LDS_OVERRUN, cfg, &[Arg::output(&out)])
        .unwrap_err()
    {
        Error::LdsOutOfBounds {
            kernel,
            byte_offset,
            lds_len,
            ..
        } => {
            assert_eq!(kernel, "lds_overrun");
            assert_eq!(lds_len, 256);
            assert!(byte_offset >= 256);
        }
        e => panic!("expected LdsOutOfBounds, got {e}"),
    }
}

#[test]
fn barrier_not_reached_by_all_is_a_deadlock_error_not_a_hang() {
    let dev = emu(WaveSize::Wave64);
    let out = dev.alloc::<u32>(512).unwrap();
    let start = Instant::now();
    let err = dev
        .launch_kernel(
            &HALF_BARRIER,
            LaunchConfig::linear(512, 256),
            &[Arg::output(&out)],
        )
        .unwrap_err();
    assert!(start.elapsed() < Duration::from_secs(5));
    match err {
        Error::Deadlock { kernel, detail, .. } => {
            assert_eq!(kernel, "half_barrier");
            assert!(
                detail.contains("128 workitem(s) wait at a barrier"),
                "{detail}"
            );
        }
        e => panic!("expected Deadlock, got {e}"),
    }
}

#[test]
fn divergent_wave_op_is_reported() {
    let dev = emu(WaveSize::Wave32);
    let out = dev.alloc::<f32>(64).unwrap();
    let err = dev
        .launch_kernel(
            &DIVERGENT_WAVE,
            LaunchConfig::linear(64, 64),
            &[Arg::output(&out)],
        )
        .unwrap_err();
    assert!(matches!(err, Error::Deadlock { .. }), "{err}");
}

#[test]
fn kernel_panic_is_an_error_naming_the_workitem() {
    let dev = emu(WaveSize::Wave64);
    let out = dev.alloc::<u32>(8).unwrap();
    match dev
        .launch_kernel(
            &PANICS,
            LaunchConfig::linear(8, 64),
            &[Arg::output(&out), Arg::U64(8)],
        )
        .unwrap_err()
    {
        Error::KernelPanic {
            kernel,
            workitem,
            message,
            ..
        } => {
            assert_eq!(kernel, "panics");
            assert!(workitem[0] >= 3);
            assert!(message.contains("index out of bounds"), "{message}");
        }
        e => panic!("expected KernelPanic, got {e}"),
    }
}

test_kernel!(FULL_WAVES = fn full_waves(out: *mut f32) {
    let fw = unsafe { FullWaves::assume() };
    let l = lane_id() as f32;
    let g = global_id_x() as usize;
    // Each lane: its partner's lane under xor 1 plus lane 3's value times 100.
    let v = fw.shfl_xor_f32(l, 1) + 100.0 * fw.shfl_f32(l, 3);
    unsafe { *out.add(g) = v };
});

#[test]
fn full_wave_exchanges_work_and_a_partial_wave_is_refused() {
    for wave in WaveSize::ALL {
        let dev = emu(wave);
        let out = dev.alloc::<f32>(128).unwrap();
        dev.launch_kernel(
            &FULL_WAVES,
            LaunchConfig::linear(128, 128),
            &[Arg::output(&out)],
        )
        .unwrap();
        let got = out.download().unwrap();
        let w = wave.lanes() as usize;
        for (g, v) in got.iter().enumerate() {
            let lane = g % w;
            assert_eq!(*v, (lane ^ 1) as f32 + 300.0, "wave {w} item {g}");
        }
        // 48 workitems: the second wave of 32 (or the only one of 64) is
        // partial, which the promise rules out.
        let out = dev.alloc::<f32>(48).unwrap();
        match dev
            .launch_kernel(
                &FULL_WAVES,
                LaunchConfig::linear(48, 48),
                &[Arg::output(&out)],
            )
            .unwrap_err()
        {
            Error::KernelPanic { message, .. } => {
                assert!(message.contains("partial wave"), "{message}")
            }
            e => panic!("expected KernelPanic, got {e}"),
        }
    }
}

test_kernel!(EARLY_START = fn early_start(out: *mut f32, src: *const f32, wait_first: u32) {
    let i = global_id_x() as usize;
    // Bug when `wait_first` is 2 and the launch starts early: this workitem
    // could end before the kernel ahead of it.
    if wait_first == 2 {
        return;
    }
    if wait_first != 0 {
        wait_prior_grids();
    }
    // Bug when `wait_first` is 0 and the launch starts early: this read
    // could see the previous kernel's data half written on CUDA.
    let v = unsafe { load(src, i) };
    wait_prior_grids();
    release_dependent_grids();
    unsafe { store(out, i, v + 1.0) };
});

#[test]
fn an_early_start_launch_must_wait_before_it_touches_memory() {
    for wave in WaveSize::ALL {
        let dev = emu(wave);
        let src = dev.upload(&[1.0f32; 64]).unwrap();
        let out = dev.alloc::<f32>(64).unwrap();
        let run = |cfg: LaunchConfig, wait_first: u32| {
            dev.launch_kernel(
                &EARLY_START,
                cfg,
                &[Arg::output(&out), Arg::input(&src), Arg::U32(wait_first)],
            )
        };
        let cfg = LaunchConfig::linear(64, 64);
        // Waiting first keeps the promise; without early start the late
        // wait is allowed (stream order holds).
        run(cfg.starting_early(), 1).unwrap();
        assert_eq!(out.download().unwrap(), vec![2.0f32; 64]);
        run(cfg, 0).unwrap();
        match run(cfg.starting_early(), 0).unwrap_err() {
            Error::KernelPanic {
                kernel, message, ..
            } => {
                assert_eq!(kernel, "early_start");
                assert!(
                    message.contains("read global memory before wait_prior_grids"),
                    "{message}"
                );
            }
            e => panic!("expected KernelPanic, got {e}"),
        }
        match run(cfg.starting_early(), 2).unwrap_err() {
            Error::KernelPanic { message, .. } => {
                assert!(
                    message.contains("returned without calling wait_prior_grids"),
                    "{message}"
                );
            }
            e => panic!("expected KernelPanic, got {e}"),
        }
        run(cfg, 2).unwrap();
    }
}

#[test]
fn wave_ops_are_lockstep_for_both_wave_sizes() {
    for wave in WaveSize::ALL {
        let dev = emu(wave);
        let n = 128usize;
        let sum = dev.alloc::<f32>(n).unwrap();
        let max = dev.alloc::<f32>(n).unwrap();
        let xor1 = dev.alloc::<u32>(n).unwrap();
        let bcast = dev.alloc::<u32>(n).unwrap();
        let ballot = dev.alloc::<u64>(n).unwrap();
        let lane = dev.alloc::<u32>(n).unwrap();
        let gather = dev.alloc::<u32>(n).unwrap();
        dev.launch_kernel(
            &WAVE_OPS,
            LaunchConfig::linear(n as u64, 128),
            &[
                Arg::output(&sum),
                Arg::output(&max),
                Arg::output(&xor1),
                Arg::output(&bcast),
                Arg::output(&ballot),
                Arg::output(&lane),
                Arg::output(&gather),
            ],
        )
        .unwrap();
        let w = wave.lanes() as usize;
        let expect_sum = (0..w).sum::<usize>() as f32;
        let expect_ballot = (0..w).filter(|l| l % 3 == 0).fold(0u64, |m, l| m | 1 << l);
        let (lanes, sums, maxs) = (
            lane.download().unwrap(),
            sum.download().unwrap(),
            max.download().unwrap(),
        );
        let (xors, bcasts, ballots) = (
            xor1.download().unwrap(),
            bcast.download().unwrap(),
            ballot.download().unwrap(),
        );
        let gathers = gather.download().unwrap();
        for (g, &l) in lanes.iter().enumerate() {
            assert_eq!(l as usize, g % w);
            assert_eq!(sums[g], expect_sum, "wave {wave}");
            assert_eq!(maxs[g], 0.0);
            assert_eq!(xors[g] as usize, (g % w) ^ 1);
            assert_eq!(bcasts[g], 30);
            assert_eq!(ballots[g], expect_ballot);
            assert_eq!(gathers[g] as usize, ((g % w) * 5 + 3) % w * 7 + 1);
        }
    }
}

#[test]
fn barriers_and_lds_work_across_waves() {
    for wave in WaveSize::ALL {
        let dev = emu(wave);
        let data: Vec<f32> = (0..1024).map(|i| (i % 7) as f32).collect();
        let inp = dev.upload(&data).unwrap();
        let out = dev.alloc::<f32>(4).unwrap();
        let cfg = LaunchConfig {
            grid: [4, 1, 1],
            block: [256, 1, 1],
            lds_bytes: 256 * 4,
            early_start: false,
        };
        dev.launch_kernel(&BLOCK_SUM, cfg, &[Arg::output(&out), Arg::input(&inp)])
            .unwrap();
        let want: Vec<f32> = data.chunks(256).map(|c| c.iter().sum()).collect();
        assert_eq!(out.download().unwrap(), want);
    }
}

#[test]
fn launch_arguments_are_checked_before_launch() {
    let dev = emu(WaveSize::Wave64);
    let f = dev.alloc::<f32>(4).unwrap();
    let cfg = LaunchConfig::linear(4, 64);
    // Wrong count.
    let e = dev
        .launch("unary_exp_f32", cfg, &[Arg::output(&f)])
        .unwrap_err();
    assert!(
        matches!(e, Error::ArgumentMismatch { .. })
            && e.to_string().contains("takes 10 arguments, 1 given"),
        "{e}"
    );
    // Input buffer where the kernel writes.
    let e = dev
        .launch(
            "unary_exp_f32",
            cfg,
            &[
                Arg::input(&f),
                Arg::input(&f),
                Arg::U64(4),
                Arg::U32(0),
                Arg::Null,
                Arg::U64(0),
                Arg::U64(0),
                Arg::U64(0),
                Arg::U64(0),
                Arg::F32(0.0),
            ],
        )
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("argument 0 is `*mut [4-byte]`, got input buffer"),
        "{e}"
    );
    // Wrong element size.
    let e = dev
        .launch(
            "unary_exp_f16",
            cfg,
            &[
                Arg::output(&f),
                Arg::input(&f),
                Arg::U64(4),
                Arg::U32(0),
                Arg::Null,
                Arg::U64(0),
                Arg::U64(0),
                Arg::U64(0),
                Arg::U64(0),
                Arg::F32(0.0),
            ],
        )
        .unwrap_err();
    assert!(
        e.to_string().contains("argument 0 is `*mut [2-byte]`"),
        "{e}"
    );
    // Wrong scalar.
    let e = dev
        .launch(
            "unary_exp_f32",
            cfg,
            &[
                Arg::output(&f),
                Arg::input(&f),
                Arg::U32(4),
                Arg::U32(0),
                Arg::Null,
                Arg::U64(0),
                Arg::U64(0),
                Arg::U64(0),
                Arg::U64(0),
                Arg::F32(0.0),
            ],
        )
        .unwrap_err();
    assert!(
        e.to_string().contains("argument 2 is `u64`, got u32"),
        "{e}"
    );
    let good = [
        Arg::output(&f),
        Arg::input(&f),
        Arg::U64(4),
        Arg::U32(0),
        Arg::Null,
        Arg::U64(0),
        Arg::U64(0),
        Arg::U64(0),
        Arg::U64(0),
        Arg::F32(0.0),
    ];
    // Block too large, LDS too large, empty grid.
    let e = dev
        .launch(
            "unary_exp_f32",
            LaunchConfig {
                grid: [1, 1, 1],
                block: [2048, 1, 1],
                lds_bytes: 0,
                early_start: false,
            },
            &good,
        )
        .unwrap_err();
    assert!(
        matches!(e, Error::BadLaunchConfig { .. }) && e.to_string().contains("maximum is 1024"),
        "{e}"
    );
    let e = dev
        .launch(
            "unary_exp_f32",
            LaunchConfig {
                grid: [1, 1, 1],
                block: [64, 1, 1],
                lds_bytes: 1 << 20,
                early_start: false,
            },
            &good,
        )
        .unwrap_err();
    assert!(e.to_string().contains("bytes of LDS requested"), "{e}");
    let e = dev
        .launch(
            "unary_exp_f32",
            LaunchConfig {
                grid: [0, 1, 1],
                block: [64, 1, 1],
                lds_bytes: 0,
                early_start: false,
            },
            &good,
        )
        .unwrap_err();
    assert!(e.to_string().contains("empty grid"), "{e}");
    // Unknown kernel, buffer from another device, the Cpu device.
    assert!(matches!(
        dev.launch("no_such_kernel", cfg, &good).unwrap_err(),
        Error::UnknownKernel { .. }
    ));
    let other = Device::emulator(WaveSize::Wave32).alloc::<f32>(4).unwrap();
    let e = dev
        .launch(
            "unary_exp_f32",
            cfg,
            &[
                Arg::output(&other),
                Arg::input(&f),
                Arg::U64(4),
                Arg::U32(0),
                Arg::Null,
                Arg::U64(0),
                Arg::U64(0),
                Arg::U64(0),
                Arg::U64(0),
                Arg::F32(0.0),
            ],
        )
        .unwrap_err();
    assert!(matches!(e, Error::DeviceMismatch { .. }), "{e}");
    let c = Device::Cpu.alloc::<f32>(4).unwrap();
    let e = Device::Cpu
        .launch(
            "unary_exp_f32",
            cfg,
            &[
                Arg::output(&c),
                Arg::input(&c),
                Arg::U64(4),
                Arg::U32(0),
                Arg::Null,
                Arg::U64(0),
                Arg::U64(0),
                Arg::U64(0),
                Arg::U64(0),
                Arg::F32(0.0),
            ],
        )
        .unwrap_err();
    assert!(e.to_string().contains("runs no kernels"), "{e}");
}

#[test]
fn every_declared_kernel_has_a_host_entry_and_a_unique_name() {
    let names: Vec<&str> = ferrocm::kernels::kernels().map(|k| k.name).collect();
    let mut sorted = names.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), names.len(), "duplicate kernel names");
    assert!(names.len() >= 250);
}
