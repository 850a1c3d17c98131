//! The caching allocator every device draws its buffers from, and the
//! per-device counters the launch path keeps.
//!
//! A freed buffer goes back to its device's cache, keyed by a size class, and
//! the next request of that class reuses it: after warm-up an op allocates
//! nothing from the system (no `hipMalloc`, whose implicit synchronisation
//! would stall the GPU; no `hipFree`, ditto). Reuse is stream-ordered: every
//! device runs its work on one stream (the emulator and the Cpu run it in
//! order, synchronously), so a block freed by the host after queueing a kernel
//! that reads it can only be written by work queued later.
//!
//! ```
//! # use ferrocm_host::WaveSize;
//! use ferrocm_host::Device;
//! let dev = Device::emulator(WaveSize::Wave64);
//! dev.empty_cache();
//! let a = dev.alloc::<f32>(1000).unwrap();
//! drop(a);                               // back to the cache
//! let before = dev.memory_stats();
//! let b = dev.alloc::<f32>(1000).unwrap(); // reused: no fresh allocation
//! assert_eq!(dev.memory_stats().fresh_allocations, before.fresh_allocations);
//! assert!(dev.memory_stats().bytes_in_use >= 4000);
//! # drop(b);
//! ```

use crate::error::{Error, Result};
use crate::graph::StreamTurns;
use std::alloc::Layout;
use std::collections::BTreeMap;
use std::ptr::NonNull;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Memory and launch statistics of one device (see [`crate::Device::memory_stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Bytes held by live buffers (their size classes).
    pub bytes_in_use: u64,
    /// Bytes kept in the cache for reuse.
    pub bytes_cached: u64,
    /// Largest `bytes_in_use` seen.
    pub peak_bytes_in_use: u64,
    /// Allocations that went to the system allocator (`malloc`, `hipMalloc`).
    pub fresh_allocations: u64,
    /// Allocations served from the cache.
    pub reused_allocations: u64,
    /// Times the host waited for the device: stream synchronisations, blocking
    /// copies to or from the host (`DeviceBuffer::write`, `download`).
    pub synchronizations: u64,
    /// Kernel launches.
    pub launches: u64,
}

/// The size class a request of `bytes` is served from: powers of two up to
/// 1 MiB (512 bytes at least), then steps of an eighth of the next power of
/// two, so at most 12.5% of a large block is slack.
///
/// ```
/// use ferrocm_host::memory::size_class;
/// assert_eq!(size_class(1), 512);
/// assert_eq!(size_class(1000), 1024);
/// assert_eq!(size_class(3 << 20), 3 << 20);
/// assert_eq!(size_class((3 << 20) + 1), (3 << 20) + (1 << 19));
/// ```
pub fn size_class(bytes: usize) -> usize {
    const SMALL: usize = 1 << 20;
    if bytes <= 512 {
        return 512;
    }
    if bytes <= SMALL {
        return bytes.next_power_of_two();
    }
    let step = bytes.next_power_of_two() / 8;
    bytes.div_ceil(step) * step
}

/// One device's caching allocator: freed blocks by size class, the bytes
/// in use and cached, the memory limit, and the device's counters
/// ([`MemoryStats`]). Every device has one (a GPU backend holds its own,
/// [`GpuBackend::pool`](crate::gpu::GpuBackend::pool)); its methods are
/// the host crate's, reached through [`Device`](crate::Device).
pub struct Pool {
    inner: Mutex<PoolInner>,
    synchronizations: AtomicU64,
    launches: AtomicU64,
    /// Most bytes (in use + cached) the pool may hold; u64::MAX for no cap.
    limit: AtomicU64,
    /// Whose turn it is to queue work on the device's stream, and whether
    /// a graph is being recorded (see [`crate::graph`]).
    pub(crate) turns: StreamTurns,
}

impl Default for Pool {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Pool({:?})", self.stats())
    }
}

struct PoolInner {
    free: BTreeMap<usize, Vec<Block>>,
    in_use: u64,
    cached: u64,
    peak: u64,
    fresh: u64,
    reused: u64,
}

impl Pool {
    /// An empty pool with no memory limit.
    pub const fn new() -> Self {
        Self {
            inner: Mutex::new(PoolInner {
                free: BTreeMap::new(),
                in_use: 0,
                cached: 0,
                peak: 0,
                fresh: 0,
                reused: 0,
            }),
            synchronizations: AtomicU64::new(0),
            launches: AtomicU64::new(0),
            limit: AtomicU64::new(u64::MAX),
            turns: StreamTurns::new(),
        }
    }

    pub(crate) fn set_limit(&self, limit: Option<u64>) {
        self.limit
            .store(limit.unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    pub(crate) fn limit(&self) -> Option<u64> {
        Some(self.limit.load(Ordering::Relaxed)).filter(|&l| l != u64::MAX)
    }

    /// Bytes a fresh block may still take under the limit (None: no limit).
    pub(crate) fn room(&self) -> Option<u64> {
        let limit = self.limit()?;
        let p = self.lock();
        Some(limit.saturating_sub(p.in_use + p.cached))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PoolInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A cached block of `class`, or one from `fresh` (counted). A failed
    /// fresh allocation empties the cache and is tried once more (not while
    /// a graph records: see [`Pool::empty`]).
    pub(crate) fn take<E>(
        &self,
        class: usize,
        fresh: impl Fn() -> Result<Block, E>,
    ) -> std::result::Result<(Block, bool), E> {
        {
            let mut p = self.lock();
            if let Some(b) = p.free.get_mut(&class).and_then(|v| v.pop()) {
                p.cached -= class as u64;
                p.in_use += class as u64;
                p.peak = p.peak.max(p.in_use);
                p.reused += 1;
                return Ok((b, true));
            }
        }
        let b = match fresh() {
            Ok(b) => b,
            Err(_) => {
                self.empty();
                fresh()?
            }
        };
        let mut p = self.lock();
        p.in_use += class as u64;
        p.peak = p.peak.max(p.in_use);
        p.fresh += 1;
        Ok((b, false))
    }

    /// Returns a block of `class` to the cache.
    pub(crate) fn give(&self, class: usize, block: Block) {
        let mut p = self.lock();
        p.in_use = p.in_use.saturating_sub(class as u64);
        p.cached += class as u64;
        p.free.entry(class).or_default().push(block);
    }

    /// Drops every cached block (gives the memory back to the system),
    /// except while a graph records: work recorded but not yet launched may
    /// still write blocks freed during the recording.
    pub(crate) fn empty(&self) {
        if self.turns.recording() {
            return;
        }
        let blocks = {
            let mut p = self.lock();
            p.cached = 0;
            std::mem::take(&mut p.free)
        };
        drop(blocks);
    }

    pub(crate) fn count_sync(&self) {
        self.synchronizations.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_launch(&self) {
        self.launches.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn stats(&self) -> MemoryStats {
        let p = self.lock();
        MemoryStats {
            bytes_in_use: p.in_use,
            bytes_cached: p.cached,
            peak_bytes_in_use: p.peak,
            fresh_allocations: p.fresh,
            reused_allocations: p.reused,
            synchronizations: self.synchronizations.load(Ordering::Relaxed),
            launches: self.launches.load(Ordering::Relaxed),
        }
    }
}

/// Bytes of red zone on each side of an emulator buffer under the sanitizer.
pub const RED_ZONE: usize = 256;
/// Byte that fills fresh (uninitialised) buffers under the sanitizer: all-ones
/// is NaN for f32/f16/bf16 and the maximum for unsigned types, so an output
/// element a kernel forgot to write fails the comparison with the CPU.
pub const POISON: u8 = 0xff;

fn canary(i: usize) -> u8 {
    (i as u8) ^ 0x5a
}

/// Host memory for the Cpu and Emulator devices: 256-byte aligned, `capacity`
/// bytes of data (a size class), with red zones (filled with canaries) on both
/// sides of the `len_bytes` in use when the sanitizer is on.
pub(crate) struct HostAlloc {
    base: NonNull<u8>,
    layout: Layout,
    red_zone: usize,
    capacity: usize,
    len_bytes: usize,
}

// SAFETY: plain memory; access is synchronised by the launch API (launches are
// synchronous on host-memory devices).
unsafe impl Send for HostAlloc {}
unsafe impl Sync for HostAlloc {}

impl HostAlloc {
    /// A zero-filled block of `capacity` data bytes (zeroed so that stale
    /// reads of a reused block always see initialised memory).
    pub(crate) fn new(capacity: usize, red_zone: usize, device: &str) -> Result<Self> {
        let oom = || Error::OutOfMemory {
            device: device.to_string(),
            bytes: capacity,
            free: None,
        };
        let total = capacity
            .checked_add(2 * red_zone)
            .and_then(|t| t.checked_next_multiple_of(256))
            .filter(|t| *t <= isize::MAX as usize / 2)
            .ok_or_else(oom)?;
        let layout = Layout::from_size_align(total.max(256), 256).map_err(|_| oom())?;
        // SAFETY: non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        let base = NonNull::new(p).ok_or_else(oom)?;
        Ok(Self {
            base,
            layout,
            red_zone,
            capacity,
            len_bytes: 0,
        })
    }

    /// Prepares the block for a buffer of `len_bytes` (at most the capacity):
    /// canaries right around those bytes, and the bytes set to `fill` if given.
    pub(crate) fn prepare(&mut self, len_bytes: usize, fill: Option<u8>) {
        debug_assert!(len_bytes <= self.capacity);
        self.len_bytes = len_bytes;
        let (p, red) = (self.base.as_ptr(), self.red_zone);
        // SAFETY: every write is inside the allocation (capacity + 2 red zones).
        unsafe {
            if let Some(b) = fill {
                std::ptr::write_bytes(p.add(red), b, len_bytes);
            }
            for i in 0..red {
                *p.add(i) = canary(i);
                *p.add(red + len_bytes + i) = canary(i);
            }
        }
    }

    pub(crate) fn ptr(&self) -> *mut u8 {
        // SAFETY: within the allocation.
        unsafe { self.base.as_ptr().add(self.red_zone) }
    }

    pub(crate) fn len_bytes(&self) -> usize {
        self.len_bytes
    }

    /// Counts changed canary bytes before and after the data.
    pub(crate) fn check_red_zones(&self) -> (usize, usize) {
        let mut before = 0;
        let mut after = 0;
        // SAFETY: within the allocation.
        unsafe {
            let p = self.base.as_ptr();
            for i in 0..self.red_zone {
                before += (*p.add(i) != canary(i)) as usize;
                after += (*p.add(self.red_zone + self.len_bytes + i) != canary(i)) as usize;
            }
        }
        (before, after)
    }
}

impl Drop for HostAlloc {
    fn drop(&mut self) {
        // SAFETY: allocated with this layout.
        unsafe { std::alloc::dealloc(self.base.as_ptr(), self.layout) }
    }
}

/// Memory a GPU backend allocated ([`GpuBackend::alloc`](crate::gpu::GpuBackend::alloc)),
/// given back to the driver when dropped.
pub trait GpuMemory: Send + Sync + std::fmt::Debug {
    /// The device address.
    fn ptr(&self) -> u64;
    /// The bytes allocated.
    fn len_bytes(&self) -> usize;
}

/// A block of device memory as the caches hold it.
pub(crate) enum Block {
    /// Host memory (the Cpu and the emulator).
    Host(HostAlloc),
    /// A GPU backend's memory.
    Gpu(Box<dyn GpuMemory>),
}

impl Block {
    /// The address kernels see.
    pub(crate) fn ptr(&self) -> u64 {
        match self {
            Block::Host(h) => h.ptr() as u64,
            Block::Gpu(g) => g.ptr(),
        }
    }
}
