//! The emulator's per-workitem context, read by the device layer's host bodies.
//!
//! The emulator (in ferrocm-host) runs each workitem as a coroutine and, before
//! resuming one, points this thread's `CURRENT` at that workitem's
//! [`WorkitemContext`]. There is no process-global state: workgroups run on
//! several threads at once, each with its own current workitem.

use std::cell::Cell;

/// A lockstep operation across the lanes of a wave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WaveOp {
    /// Each lane gets the value of lane `lane ^ mask`.
    ShflXor(u32),
    /// Each lane gets the value of lane `src`.
    Broadcast(u32),
    /// Each lane gets the value (low 32 bits) of the lane its own value's
    /// high 32 bits name: a gather with a source per lane.
    Gather,
    /// Each lane gets the mask of lanes whose value is non-zero.
    Ballot,
}

impl WaveOp {
    /// The lane whose value lane `lane` gets, or `None` when it gets the
    /// ballot of the wave or names its source in its value (`Gather`).
    ///
    /// ```
    /// use ferrocm_kernels::host::emu::WaveOp;
    /// assert_eq!(WaveOp::ShflXor(1).source_lane(6), Some(7));
    /// assert_eq!(WaveOp::Ballot.source_lane(6), None);
    /// ```
    pub const fn source_lane(self, lane: usize) -> Option<usize> {
        match self {
            WaveOp::ShflXor(m) => Some(lane ^ m as usize),
            WaveOp::Broadcast(s) => Some(s as usize),
            WaveOp::Gather | WaveOp::Ballot => None,
        }
    }
}

/// What a workitem asks its scheduler for; implemented by the emulator.
pub trait Scheduler {
    /// Suspends until every workitem of the workgroup reached the barrier.
    fn barrier(&self);
    /// Suspends until every active lane of the wave called the same op, then
    /// returns this lane's result.
    fn wave_op(&self, op: WaveOp, value: u64) -> u64;
}

/// Everything the device layer's host bodies need to know about one workitem.
pub struct WorkitemContext {
    /// Kernel name, for messages.
    pub kernel: &'static str,
    /// Workitem id inside the workgroup (x, y, z).
    pub workitem_id: [u32; 3],
    /// Workgroup id (x, y, z).
    pub workgroup_id: [u32; 3],
    /// Workgroup size (x, y, z).
    pub workgroup_size: [u32; 3],
    /// Number of workgroups (x, y, z).
    pub num_workgroups: [u32; 3],
    /// Lane in the wave.
    pub lane: u32,
    /// Wave size (32 or 64).
    pub wave_size: u32,
    /// The workgroup's launch-sized LDS arena.
    pub lds: *mut u8,
    /// Its size in bytes (the launch's `lds_bytes`).
    pub lds_len: usize,
    /// The workgroup's scheduler.
    pub scheduler: *const dyn Scheduler,
    /// The global memory the launch's buffer arguments may touch, when the
    /// sanitizer checks global accesses (empty slice: no checks).
    pub globals: *const [GlobalRange],
    /// Set while a workitem of a launch with `early_start` has not yet
    /// called `wait_prior_grids()`: a global access then is a broken
    /// promise (on CUDA it could race with the previous kernel).
    pub before_prior_wait: Cell<bool>,
}

/// Bytes `start..end` of global memory that a launch's buffer argument
/// number `arg` may access (`writable`: a `*mut T` argument).
#[derive(Clone, Copy, Debug)]
pub struct GlobalRange {
    /// First byte.
    pub start: usize,
    /// One past the last byte.
    pub end: usize,
    /// Whether the kernel may write it.
    pub writable: bool,
    /// Argument index.
    pub arg: usize,
}

thread_local! {
    static CURRENT: Cell<*const WorkitemContext> = const { Cell::new(std::ptr::null()) };
}

/// Makes `ctx` the current workitem of this thread (the emulator calls this
/// before resuming a workitem) and returns the previous one.
///
/// # Safety
/// `ctx` must stay valid until it is replaced.
pub unsafe fn set_current(ctx: *const WorkitemContext) -> *const WorkitemContext {
    CURRENT.with(|c| c.replace(ctx))
}

/// Runs `f` on the current workitem's context.
///
/// # Panics
/// When called outside a kernel launched in the emulator: a device-layer
/// function has no meaning there.
#[inline]
pub fn with<R>(f: impl FnOnce(&WorkitemContext) -> R) -> R {
    let p = CURRENT.with(|c| c.get());
    assert!(
        !p.is_null(),
        "ferrocm device-layer function called outside a kernel launch (call kernels through a Device)"
    );
    // SAFETY: set_current's contract keeps it alive while current.
    f(unsafe { &*p })
}

/// Host body of `barrier()`.
pub fn barrier() {
    let s = with(|c| c.scheduler);
    // SAFETY: the scheduler outlives the workitems it runs.
    unsafe { (*s).barrier() }
}

/// Host body of the wave operations.
pub fn wave_op(op: WaveOp, value: u64) -> u64 {
    let s = with(|c| c.scheduler);
    // SAFETY: as above.
    unsafe { (*s).wave_op(op, value) }
}

/// Panic payload of an LDS access past the launch size; the emulator turns it
/// into a typed error.
#[derive(Debug)]
pub struct LdsOutOfBounds {
    /// Kernel name.
    pub kernel: &'static str,
    /// First byte accessed.
    pub byte_offset: usize,
    /// Bytes accessed.
    pub access_bytes: usize,
    /// The launch's LDS size.
    pub lds_len: usize,
}

/// Checks an LDS access of element `i` of `T` against the launch size.
#[inline]
pub fn check_lds<T>(byte_offset: u32, i: u32) {
    with(|c| {
        let start = byte_offset as usize + i as usize * size_of::<T>();
        if start + size_of::<T>() > c.lds_len {
            std::panic::panic_any(LdsOutOfBounds {
                kernel: c.kernel,
                byte_offset: start,
                access_bytes: size_of::<T>(),
                lds_len: c.lds_len,
            });
        }
    })
}

/// Panic payload of a global memory access outside every range of the
/// launch; the emulator turns it into a typed error.
#[derive(Debug)]
pub struct GlobalOutOfBounds {
    /// Kernel name.
    pub kernel: &'static str,
    /// What was accessed, relative to the nearest argument.
    pub detail: String,
}

/// Host body of `wait_prior_grids()`: from here on the workitem may touch
/// global memory.
pub fn waited_prior_grids() {
    with(|c| c.before_prior_wait.set(false));
}

/// Called by the emulator when a workitem's kernel returns: a launch with
/// `early_start` must have waited on every path, or the kernel could end
/// (and the next one start) before the one ahead of it did.
pub fn check_finished() {
    with(|c| {
        assert!(
            !c.before_prior_wait.get(),
            "launched with early_start, but returned without calling wait_prior_grids()"
        );
    })
}

/// Checks a global access of `bytes` bytes at `addr` against the launch's
/// buffer ranges (nothing to do when the sanitizer is off), and that a
/// launch with `early_start` waited for the prior grids first.
#[inline]
pub fn check_global(addr: usize, bytes: usize, write: bool) {
    with(|c| {
        assert!(
            !c.before_prior_wait.get(),
            "launched with early_start, but {} global memory before wait_prior_grids()",
            if write { "wrote" } else { "read" }
        );
        // SAFETY: the emulator keeps the ranges alive for the launch.
        let globals = unsafe { &*c.globals };
        if globals.is_empty() {
            return;
        }
        let inside = |g: &GlobalRange| addr >= g.start && addr.saturating_add(bytes) <= g.end;
        if globals.iter().any(|g| inside(g) && (g.writable || !write)) {
            return;
        }
        let what = if write { "wrote" } else { "read" };
        let detail = match globals.iter().find(|g| inside(g)) {
            Some(g) => format!(
                "wrote {bytes} bytes into argument {} (a read-only `*const` argument) at byte {}",
                g.arg,
                addr - g.start
            ),
            None => {
                // Report against the nearest range, with a signed offset.
                let g = globals
                    .iter()
                    .min_by_key(|g| {
                        if addr < g.start {
                            g.start - addr
                        } else {
                            addr.saturating_sub(g.end)
                        }
                    })
                    .expect("not empty");
                let off = addr as i128 - g.start as i128;
                format!(
                    "{what} {bytes} bytes at byte offset {off} of argument {}, outside the {} bytes its launch covers",
                    g.arg,
                    g.end - g.start
                )
            }
        };
        std::panic::panic_any(GlobalOutOfBounds {
            kernel: c.kernel,
            detail,
        });
    })
}
