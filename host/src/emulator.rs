//! The CPU SIMT emulator: runs the host copy of any kernel over a grid.
//!
//! Each workitem is a stackful coroutine (corosensei) rather than an OS
//! thread: a workgroup of 1024 workitems is 1024 cheap context switches per
//! barrier instead of 1024 threads, and the switch points are exactly the
//! barrier and wave operations, so lockstep wave semantics are simple to get
//! right. Workgroups run in parallel on rayon's threads; each thread keeps a
//! pool of coroutine stacks.
//!
//! Scheduling inside a workgroup: run every runnable workitem until it
//! finishes or blocks (at a barrier or a wave op). Then release a wave whose
//! live lanes all wait at the same wave op, else release the barrier when every
//! workitem waits at it. Anything else (some workitems finished while others
//! wait at a barrier, lanes of one wave at different ops) is a deadlock,
//! reported at once with who waited where.

use crate::error::{Error, Result};
use crate::launch::LaunchConfig;
use crate::memory::HostAlloc;
use corosensei::stack::DefaultStack;
use corosensei::{Coroutine, CoroutineResult, Yielder};
use ferrocm_kernels::host::KernelInfo;
use ferrocm_kernels::host::emu::{
    self, GlobalOutOfBounds, GlobalRange, LdsOutOfBounds, Scheduler, WaveOp, WorkitemContext,
};
use rayon::prelude::*;
use std::cell::{Cell, RefCell};
use std::fmt;
use std::panic::AssertUnwindSafe;

/// The wave (warp) width the emulator runs kernels with: the two widths AMD
/// GPUs have, so a wrong width is not representable.
///
/// ```
/// use ferrocm_host::{Device, WaveSize};
/// assert_eq!(WaveSize::Wave64.lanes(), 64);
/// assert_eq!(WaveSize::try_from(32).unwrap(), WaveSize::Wave32);
/// assert!(WaveSize::try_from(48).is_err());
/// let _rdna_like = Device::emulator(WaveSize::Wave32);
/// ```
/// # use ferrocm_host::WaveSize;
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum WaveSize {
    /// 32 lanes (RDNA; also NVIDIA's warp).
    Wave32 = 32,
    /// 64 lanes (CDNA and GCN).
    Wave64 = 64,
}

impl WaveSize {
    /// Both wave sizes, for tests that run on each.
    pub const ALL: [WaveSize; 2] = [WaveSize::Wave32, WaveSize::Wave64];

    /// Lanes per wave: 32 or 64.
    pub const fn lanes(self) -> u32 {
        match self {
            WaveSize::Wave32 => 32,
            WaveSize::Wave64 => 64,
        }
    }
}

impl TryFrom<u32> for WaveSize {
    type Error = Error;
    /// 32 or 64; anything else is [`Error::UnknownDevice`].
    fn try_from(lanes: u32) -> Result<Self> {
        match lanes {
            32 => Ok(WaveSize::Wave32),
            64 => Ok(WaveSize::Wave64),
            _ => Err(Error::UnknownDevice {
                name: format!("emulator:{lanes}"),
                detail: "the emulator's wave size is 32 or 64".into(),
            }),
        }
    }
}

impl fmt::Display for WaveSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.lanes())
    }
}

/// Settings of an emulator device.
///
/// ```
/// use ferrocm_host::{Device, EmulatorConfig, WaveSize};
/// let fast = Device::emulator_with(EmulatorConfig { sanitize: false, ..EmulatorConfig::new(WaveSize::Wave64) });
/// assert_eq!(fast.to_string(), "emulator(wave64)");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EmulatorConfig {
    /// Wave size: 32 (RDNA) or 64 (CDNA).
    pub wave_size: WaveSize,
    /// Red zones, poisoned allocations and LDS bounds checks.
    pub sanitize: bool,
    /// Whether the op library launches the kernels built on the warpgroup
    /// product here, as on an H100 (`Device::warpgroup_mma`).
    pub warpgroup_mma: bool,
}

impl EmulatorConfig {
    /// The sanitizer on; the warpgroup-product kernels at wave 32 (where
    /// the emulator runs the NVIDIA-like paths), not at wave 64.
    pub fn new(wave_size: WaveSize) -> Self {
        EmulatorConfig {
            wave_size,
            sanitize: true,
            warpgroup_mma: wave_size == WaveSize::Wave32,
        }
    }
}

/// One kernel argument as the emulator takes it: the 64-bit slot the kernel
/// reads, and for a buffer the byte range `[start, end)` the launch may
/// touch (and whether it may write it) and its host block, whose red zones
/// the sanitizer checks after the launch.
pub(crate) struct EmulatedArg<'a> {
    pub(crate) raw: u64,
    pub(crate) range: Option<(usize, usize, bool)>,
    pub(crate) host: Option<&'a HostAlloc>,
}

/// Stack of one workitem coroutine.
const STACK_SIZE: usize = 128 * 1024;
/// Canary bytes on each side of the LDS arena under the sanitizer.
const LDS_RED_ZONE: usize = 64;

thread_local! {
    static STACKS: RefCell<Vec<DefaultStack>> = const { RefCell::new(Vec::new()) };
}

fn take_stack() -> Result<DefaultStack> {
    if let Some(s) = STACKS.with(|p| p.borrow_mut().pop()) {
        return Ok(s);
    }
    DefaultStack::new(STACK_SIZE).map_err(|e| Error::OutOfMemory {
        device: format!("emulator (coroutine stack: {e})"),
        bytes: STACK_SIZE,
        free: None,
    })
}

fn give_stack(s: DefaultStack) {
    STACKS.with(|p| p.borrow_mut().push(s));
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    Runnable,
    Barrier,
    Wave(WaveOp),
    Done,
}

/// The scheduler of one workgroup: the workitems' states and exchange slots.
struct Group {
    state: Vec<Cell<State>>,
    value: Vec<Cell<u64>>,
    current: Cell<usize>,
    yielders: Vec<Cell<*const Yielder<(), ()>>>,
}

impl Group {
    fn suspend(&self, i: usize) {
        // SAFETY: set by the coroutine itself when it started; valid while it runs.
        unsafe { (*self.yielders[i].get()).suspend(()) }
    }
}

impl Scheduler for Group {
    fn barrier(&self) {
        let i = self.current.get();
        self.state[i].set(State::Barrier);
        self.suspend(i);
    }

    fn wave_op(&self, op: WaveOp, value: u64) -> u64 {
        let i = self.current.get();
        self.state[i].set(State::Wave(op));
        self.value[i].set(value);
        self.suspend(i);
        self.value[i].get()
    }
}

/// Runs `kernel` over the grid of `cfg`. Arguments are already checked.
pub(crate) fn launch(
    config: &EmulatorConfig,
    kernel: &KernelInfo,
    cfg: &LaunchConfig,
    args: &[EmulatedArg],
) -> Result<()> {
    let raw: Vec<u64> = args.iter().map(|a| a.raw).collect();
    // Under the sanitizer every global access is checked against the ranges
    // the launch check proved inside their buffers.
    let globals: Vec<GlobalRange> = if config.sanitize {
        args.iter()
            .enumerate()
            .filter_map(|(i, a)| {
                let (start, end, writable) = a.range?;
                Some(GlobalRange {
                    start,
                    end,
                    writable,
                    arg: i,
                })
            })
            .collect()
    } else {
        Vec::new()
    };
    let groups = cfg.num_groups();
    let result = (0..groups).into_par_iter().try_for_each(|g| {
        let gx = (g % cfg.grid[0] as u64) as u32;
        let gy = ((g / cfg.grid[0] as u64) % cfg.grid[1] as u64) as u32;
        let gz = (g / (cfg.grid[0] as u64 * cfg.grid[1] as u64)) as u32;
        run_group(config, kernel, cfg, [gx, gy, gz], &raw, &globals)
    });
    // Red zones are checked even after a failed launch: an overrun explains a lot.
    if config.sanitize {
        for (i, a) in args.iter().enumerate() {
            if let Some(h) = a.host {
                let (before, after) = h.check_red_zones();
                if before + after > 0 {
                    return Err(Error::OutOfBoundsWrite {
                        kernel: kernel.name.into(),
                        arg: i,
                        len_bytes: h.len_bytes(),
                        side: if after > 0 { "end" } else { "start" },
                        bytes_changed: before + after,
                    });
                }
            }
        }
    }
    result
}

fn run_group(
    config: &EmulatorConfig,
    kernel: &KernelInfo,
    cfg: &LaunchConfig,
    wg: [u32; 3],
    raw: &[u64],
    globals: &[GlobalRange],
) -> Result<()> {
    let n = cfg.block_size() as usize;
    let ws = config.wave_size.lanes() as usize;
    let red = if config.sanitize { LDS_RED_ZONE } else { 0 };
    let lds_len = cfg.lds_bytes as usize;
    // u64 backing keeps the arena 8-byte aligned.
    let mut arena = vec![0u64; (lds_len + 2 * red).div_ceil(8)];
    let arena_bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut arena);
    for i in 0..red {
        arena_bytes[i] = 0xa5;
        arena_bytes[red + lds_len + i] = 0xa5;
    }
    let lds_ptr = arena_bytes[red..].as_mut_ptr();

    let group = Group {
        state: (0..n).map(|_| Cell::new(State::Runnable)).collect(),
        value: (0..n).map(|_| Cell::new(0)).collect(),
        current: Cell::new(0),
        yielders: (0..n).map(|_| Cell::new(std::ptr::null())).collect(),
    };
    let sched: &dyn Scheduler = &group;
    let [bx, by, _] = cfg.block;
    let contexts: Vec<WorkitemContext> = (0..n)
        .map(|i| {
            let i32_ = i as u32;
            WorkitemContext {
                kernel: kernel.name,
                workitem_id: [i32_ % bx, (i32_ / bx) % by, i32_ / (bx * by)],
                workgroup_id: wg,
                workgroup_size: cfg.block,
                num_workgroups: cfg.grid,
                lane: (i % ws) as u32,
                wave_size: config.wave_size.lanes(),
                lds: lds_ptr,
                lds_len,
                // SAFETY (lifetime erased): `group` outlives every coroutine below.
                scheduler: unsafe {
                    std::mem::transmute::<&dyn Scheduler, &'static dyn Scheduler>(sched)
                },
                globals: globals as *const [GlobalRange],
                before_prior_wait: std::cell::Cell::new(cfg.early_start),
            }
        })
        .collect();

    let mut coros: Vec<Coroutine<(), (), (), DefaultStack>> = Vec::with_capacity(n);
    for i in 0..n {
        let stack = take_stack()?;
        let group_ref = &group;
        let entry = kernel.entry;
        // SAFETY: every coroutine is driven to completion or force-reset below,
        // before `group`, `raw` and the contexts go away.
        coros.push(unsafe {
            Coroutine::with_stack_unchecked(stack, move |y: &Yielder<(), ()>, ()| {
                group_ref.yielders[i].set(y as *const _);
                entry(raw);
                ferrocm_kernels::host::emu::check_finished();
            })
        });
    }

    let outcome = schedule(&group, &contexts, &mut coros, kernel, wg, ws);

    for mut c in coros {
        if !c.done() {
            // SAFETY: kernel frames own nothing that needs Drop.
            unsafe { c.force_reset() };
        }
        give_stack(c.into_stack());
    }
    outcome?;

    if config.sanitize {
        let bytes: &[u8] = bytemuck::cast_slice(&arena);
        let bad = (0..red)
            .filter(|&i| bytes[i] != 0xa5 || bytes[red + lds_len + i] != 0xa5)
            .count();
        if bad > 0 {
            return Err(Error::LdsOutOfBounds {
                kernel: kernel.name.into(),
                byte_offset: lds_len,
                access_bytes: bad,
                lds_len,
            });
        }
    }
    Ok(())
}

fn schedule(
    group: &Group,
    contexts: &[WorkitemContext],
    coros: &mut [Coroutine<(), (), (), DefaultStack>],
    kernel: &KernelInfo,
    wg: [u32; 3],
    ws: usize,
) -> Result<()> {
    let n = coros.len();
    loop {
        for i in 0..n {
            if group.state[i].get() != State::Runnable {
                continue;
            }
            group.current.set(i);
            // SAFETY: contexts[i] outlives the resume.
            let prev = unsafe { emu::set_current(&contexts[i]) };
            let r = std::panic::catch_unwind(AssertUnwindSafe(|| coros[i].resume(())));
            // SAFETY: restoring what was there.
            unsafe { emu::set_current(prev) };
            match r {
                Ok(CoroutineResult::Return(())) => group.state[i].set(State::Done),
                Ok(CoroutineResult::Yield(())) => {}
                Err(payload) => {
                    group.state[i].set(State::Done);
                    return Err(panic_error(payload, kernel, wg, contexts[i].workitem_id));
                }
            }
        }
        if group.state.iter().all(|s| s.get() == State::Done) {
            return Ok(());
        }
        // Release every wave whose live lanes all wait at one wave op.
        let mut released = false;
        for w in 0..n.div_ceil(ws) {
            let lanes = w * ws..((w + 1) * ws).min(n);
            let mut op = None;
            let mut uniform = true;
            for l in lanes.clone() {
                match group.state[l].get() {
                    State::Done => {}
                    State::Wave(o) if op.is_none() || op == Some(o) => op = Some(o),
                    _ => uniform = false,
                }
            }
            let (Some(op), true) = (op, uniform) else {
                continue;
            };
            let live = |l: usize| lanes.contains(&l) && group.state[l].get() != State::Done;
            let inputs: Vec<u64> = lanes.clone().map(|l| group.value[l].get()).collect();
            let ballot: u64 = lanes
                .clone()
                .filter(|&l| live(l) && inputs[l - lanes.start] != 0)
                .fold(0, |m, l| m | 1 << (l - lanes.start));
            for l in lanes.clone() {
                if group.state[l].get() == State::Done {
                    continue;
                }
                let lane = l - lanes.start;
                let out = match (op, op.source_lane(lane)) {
                    (WaveOp::Gather, _) => match (inputs[lane] >> 32) as usize {
                        // Reading an inactive or out-of-range lane gives 0, as ds_bpermute does.
                        s if s < ws && live(lanes.start + s) => inputs[s] & 0xffff_ffff,
                        _ => 0,
                    },
                    (_, Some(s)) if s < ws && live(lanes.start + s) => inputs[s],
                    (_, Some(_)) => 0,
                    (_, None) => ballot,
                };
                group.value[l].set(out);
                group.state[l].set(State::Runnable);
            }
            released = true;
        }
        if released {
            continue;
        }
        let at_barrier = group
            .state
            .iter()
            .filter(|s| s.get() == State::Barrier)
            .count();
        if at_barrier == n {
            group.state.iter().for_each(|s| s.set(State::Runnable));
            continue;
        }
        return Err(Error::Deadlock {
            kernel: kernel.name.into(),
            workgroup: wg,
            detail: describe_wait(group),
        });
    }
}

fn describe_wait(group: &Group) -> String {
    let mut done = 0;
    let mut barrier = 0;
    let mut waves = std::collections::BTreeMap::<String, usize>::new();
    for s in &group.state {
        match s.get() {
            State::Done => done += 1,
            State::Barrier => barrier += 1,
            State::Wave(op) => *waves.entry(format!("{op:?}")).or_default() += 1,
            State::Runnable => {}
        }
    }
    let mut parts = vec![
        format!("{barrier} workitem(s) wait at a barrier"),
        format!("{done} finished without reaching it"),
    ];
    for (op, c) in waves {
        parts.push(format!("{c} wait at wave op {op}"));
    }
    parts.join(", ")
}

fn panic_error(
    payload: Box<dyn std::any::Any + Send>,
    kernel: &KernelInfo,
    wg: [u32; 3],
    wi: [u32; 3],
) -> Error {
    if let Some(l) = payload.downcast_ref::<LdsOutOfBounds>() {
        return Error::LdsOutOfBounds {
            kernel: l.kernel.into(),
            byte_offset: l.byte_offset,
            access_bytes: l.access_bytes,
            lds_len: l.lds_len,
        };
    }
    if let Some(g) = payload.downcast_ref::<GlobalOutOfBounds>() {
        return Error::OutOfBoundsAccess {
            kernel: g.kernel.into(),
            detail: format!("{} (workgroup {wg:?}, workitem {wi:?})", g.detail),
        };
    }
    let message = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic".into());
    Error::KernelPanic {
        kernel: kernel.name.into(),
        workgroup: wg,
        workitem: wi,
        message,
    }
}
