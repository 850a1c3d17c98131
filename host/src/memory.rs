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

use std::collections::BTreeMap;
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

/// A cache of freed blocks of type `B`, by size class, with the counters.
pub(crate) struct Pool<B> {
    inner: Mutex<PoolInner<B>>,
    synchronizations: AtomicU64,
    launches: AtomicU64,
    /// Most bytes (in use + cached) the pool may hold; u64::MAX for no cap.
    limit: AtomicU64,
    /// The device's fault status words (see `fault`).
    pub(crate) faults: Mutex<crate::fault::FaultWords>,
}

struct PoolInner<B> {
    free: BTreeMap<usize, Vec<B>>,
    in_use: u64,
    cached: u64,
    peak: u64,
    fresh: u64,
    reused: u64,
}

impl<B> Pool<B> {
    pub(crate) const fn new() -> Self {
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
            faults: Mutex::new(crate::fault::FaultWords::new()),
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

    fn lock(&self) -> std::sync::MutexGuard<'_, PoolInner<B>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A cached block of `class`, or one from `fresh` (counted). A failed
    /// fresh allocation empties the cache and is tried once more.
    pub(crate) fn take<E>(
        &self,
        class: usize,
        fresh: impl Fn() -> Result<B, E>,
    ) -> Result<(B, bool), E> {
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
    pub(crate) fn give(&self, class: usize, block: B) {
        let mut p = self.lock();
        p.in_use = p.in_use.saturating_sub(class as u64);
        p.cached += class as u64;
        p.free.entry(class).or_default().push(block);
    }

    /// Drops every cached block (gives the memory back to the system).
    pub(crate) fn empty(&self) {
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
