//! Device memory of a ROCm GPU: allocations (`hipMalloc`), fills and copies
//! on the device's stream, and the pinned staging memory asynchronous
//! uploads go through. Lengths and ranges were checked by the caller
//! (`Device`); these are the runtime calls.

use super::{Event, RocmDevice, ffi};
use crate::error::{Error, Result};
use crate::gpu::{HostSlot, QueuedRead, ReadDone};
use crate::memory::GpuMemory;
use rocm_rs::hip::bindings as hb;
use std::os::raw::{c_int, c_void};
use std::ptr::null_mut;

/// `hipMemcpyKind` values (`hipMemcpyHostToDevice`, ...), from rocm-rs.
const HOST_TO_DEVICE: hb::hipMemcpyKind = hb::hipMemcpyKind_hipMemcpyHostToDevice;
const DEVICE_TO_HOST: hb::hipMemcpyKind = hb::hipMemcpyKind_hipMemcpyDeviceToHost;
const DEVICE_TO_DEVICE: hb::hipMemcpyKind = hb::hipMemcpyKind_hipMemcpyDeviceToDevice;

/// Device memory of a [`RocmDevice`] (`hipMalloc`), freed (`hipFree`) on drop.
#[derive(Debug)]
pub struct RocmAlloc {
    ptr: u64,
    bytes: usize,
    ordinal: usize,
}

impl RocmAlloc {
    /// Ordinal of the device the memory is on.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }
}

impl GpuMemory for RocmAlloc {
    fn ptr(&self) -> u64 {
        self.ptr
    }
    fn len_bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for RocmAlloc {
    fn drop(&mut self) {
        // A RocmAlloc exists only if the runtime loaded. Errors are ignored.
        if let Ok(rt) = ffi::hip() {
            // SAFETY: our allocation, freed once (hipFree waits for work using it).
            unsafe {
                (rt.api.hipSetDevice)(self.ordinal as c_int);
                (rt.api.hipFree)(self.ptr as *mut c_void);
            }
        }
    }
}

/// One chunk of pinned host memory for asynchronous uploads: bytes
/// `0..used` are (or were) sources of queued copies; `done`, once recorded,
/// completes when they have all run.
pub(super) struct StagingChunk {
    ptr: *mut u8,
    cap: usize,
    used: usize,
    done: Option<Event>,
    hip: &'static ffi::Hip,
}

// SAFETY: pinned host memory owned by this chunk; used under the staging mutex.
unsafe impl Send for StagingChunk {}

impl Drop for StagingChunk {
    fn drop(&mut self) {
        // The device synchronises its stream before its fields drop, so no
        // copy still reads this memory. Errors are ignored.
        // SAFETY: from hipHostMalloc, freed once.
        unsafe { (self.hip.hipHostFree)(self.ptr.cast()) };
    }
}

/// Pinned host memory a queued read lands in (`hipHostMalloc`), freed on
/// drop.
pub(super) struct PinnedSlot {
    ptr: *mut u8,
    cap: usize,
    hip: &'static ffi::Hip,
}

// SAFETY: pinned host memory owned by the slot, used by one read at a time.
unsafe impl Send for PinnedSlot {}

impl HostSlot for PinnedSlot {
    fn ptr(&self) -> *mut u8 {
        self.ptr
    }
    fn cap(&self) -> usize {
        self.cap
    }
}

impl Drop for PinnedSlot {
    fn drop(&mut self) {
        // SAFETY: from hipHostMalloc, freed once. Errors are ignored.
        unsafe { (self.hip.hipHostFree)(self.ptr.cast()) };
    }
}

/// The event recorded after a queued read's copy.
struct ReadEvent {
    event: Event,
    label: String,
}

// SAFETY: HIP events may be waited for and destroyed from any thread.
unsafe impl Send for ReadEvent {}

impl ReadEvent {
    fn wait(&self) -> Result<()> {
        let hip = self.event.hip;
        // SAFETY: our event.
        let code = unsafe { (hip.hipEventSynchronize)(self.event.raw) };
        super::hip_check(
            hip,
            code,
            "hipEventSynchronize (a queued read)",
            &self.label,
        )
    }
}

/// The staging chunks of a device and the one being filled.
#[derive(Default)]
pub(super) struct Staging {
    chunks: Vec<StagingChunk>,
    current: usize,
}

impl RocmDevice {
    /// Allocates `bytes` of device memory (`hipMalloc`). A zero-byte request
    /// gets a 1-byte allocation, so every buffer has a distinct, non-null
    /// address as on the other devices. Out of memory is
    /// [`Error::OutOfMemory`].
    pub(super) fn alloc_memory(&self, bytes: usize) -> Result<RocmAlloc> {
        self.set_device()?;
        let mut p: *mut c_void = null_mut();
        // SAFETY: writes one pointer.
        let code = unsafe { (self.hip.hipMalloc)(&mut p, bytes.max(1)) };
        if code == hb::hipError_t_hipErrorOutOfMemory
            || (code == hb::hipError_t_hipSuccess && p.is_null())
        {
            return Err(Error::OutOfMemory {
                device: self.label.clone(),
                bytes,
                free: self.free_bytes(),
            });
        }
        self.check(code, "hipMalloc")?;
        Ok(RocmAlloc {
            ptr: p as u64,
            bytes,
            ordinal: self.ordinal,
        })
    }

    /// Sets `len` bytes at `dst` to `byte` (queued on the stream).
    ///
    /// # Safety
    /// `dst..dst + len` lies in a live allocation of this device.
    pub(super) unsafe fn memset_raw(&self, dst: u64, byte: u8, len: usize) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        self.set_device()?;
        // SAFETY: the caller's range.
        let code = unsafe {
            (self.hip.hipMemsetAsync)(dst as *mut c_void, c_int::from(byte), len, self.stream.raw)
        };
        self.check(code, "hipMemsetAsync")
    }

    /// Copies `src` to `dst` and waits for the copy (the host slice is only
    /// borrowed for the call).
    ///
    /// # Safety
    /// `dst..dst + src.len()` lies in a live allocation of this device.
    pub(super) unsafe fn copy_htod_raw(&self, dst: u64, src: &[u8]) -> Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        self.set_device()?;
        // SAFETY: the caller's range; `src` stays borrowed until the stream
        // is synchronised below.
        let code = unsafe {
            (self.hip.hipMemcpyAsync)(
                dst as *mut c_void,
                src.as_ptr().cast(),
                src.len(),
                HOST_TO_DEVICE,
                self.stream.raw,
            )
        };
        self.check(code, "hipMemcpyAsync(host to device)")?;
        self.wait()
    }

    /// Copies `dst.len()` bytes from `src` to the host after all queued
    /// work, and waits.
    ///
    /// # Safety
    /// `src..src + dst.len()` lies in a live allocation of this device.
    pub(super) unsafe fn copy_dtoh_raw(&self, src: u64, dst: &mut [u8]) -> Result<()> {
        if dst.is_empty() {
            return Ok(());
        }
        self.set_device()?;
        // SAFETY: the caller's range; `dst` stays borrowed until the stream
        // is synchronised below.
        let code = unsafe {
            (self.hip.hipMemcpyAsync)(
                dst.as_mut_ptr().cast(),
                src as *const c_void,
                dst.len(),
                DEVICE_TO_HOST,
                self.stream.raw,
            )
        };
        self.check(code, "hipMemcpyAsync(device to host)")?;
        self.wait()
    }

    /// Queues a copy of `len` bytes at `src` into a pinned slot and an event
    /// after it (see [`crate::GpuBackend::copy_dtoh_queued`]).
    ///
    /// # Safety
    /// `src..src + len` lies in a live allocation of this device, kept
    /// alive until the read is waited for or dropped.
    pub(super) unsafe fn copy_dtoh_queued_raw(
        &self,
        src: u64,
        len: usize,
    ) -> Result<Box<dyn QueuedRead>> {
        if len == 0 {
            return Ok(Box::new(ReadDone(Vec::new())));
        }
        self.set_device()?;
        let slot = self.read_slots.take(len, |cap| {
            let mut p: *mut c_void = null_mut();
            // SAFETY: writes one pointer; flags 0 is hipHostMallocDefault.
            let code = unsafe { (self.hip.hipHostMalloc)(&mut p, cap, 0) };
            self.check(code, "hipHostMalloc")?;
            Ok(PinnedSlot {
                ptr: p.cast(),
                cap,
                hip: self.hip,
            })
        })?;
        let event = match self.event() {
            Ok(event) => ReadEvent {
                event,
                label: self.label.clone(),
            },
            Err(e) => {
                self.read_slots.give(slot);
                return Err(e);
            }
        };
        let (dst, raw_event) = (slot.ptr, event.event.raw);
        // From here the read's drop waits for the event and keeps the slot.
        let read = self.read_slots.read(slot, len, move || event.wait());
        // SAFETY: the slot holds at least `len` bytes and is not reused
        // before the read is waited; the caller's source range.
        let code = unsafe {
            (self.hip.hipMemcpyAsync)(
                dst.cast(),
                src as *const c_void,
                len,
                DEVICE_TO_HOST,
                self.stream.raw,
            )
        };
        self.check(code, "hipMemcpyAsync(device to host, queued read)")?;
        // SAFETY: our event and stream.
        let code = unsafe { (self.hip.hipEventRecord)(raw_event, self.stream.raw) };
        let recorded = self.check(code, "hipEventRecord");
        if recorded.is_err() {
            // The read's drop would not wait for the copy: the stream does.
            let _ = self.wait();
        }
        recorded?;
        Ok(Box::new(read))
    }

    /// Copies `bytes` from `src` to `dst` (queued on the stream).
    ///
    /// # Safety
    /// Both ranges lie in live allocations of this device.
    pub(super) unsafe fn copy_dtod_raw(&self, dst: u64, src: u64, bytes: usize) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        self.set_device()?;
        // SAFETY: the caller's ranges.
        let code = unsafe {
            (self.hip.hipMemcpyAsync)(
                dst as *mut c_void,
                src as *const c_void,
                bytes,
                DEVICE_TO_DEVICE,
                self.stream.raw,
            )
        };
        self.check(code, "hipMemcpyAsync(device to device)")
    }

    /// Copies `src` to `dst` in stream order, without waiting: the bytes are
    /// first copied into pinned staging memory (a pageable source would make
    /// `hipMemcpyAsync` synchronous with the host), which is reused once an
    /// event recorded after its copies says they ran. A new pinned chunk is
    /// allocated only when every chunk still has copies in flight.
    ///
    /// # Safety
    /// `dst..dst + src.len()` lies in a live allocation of this device.
    pub(super) unsafe fn copy_htod_async_raw(&self, dst: u64, src: &[u8]) -> Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        self.set_device()?;
        let mut staging = self.staging.lock().unwrap_or_else(|e| e.into_inner());
        let at = self.staging_slot(&mut staging, src.len())?;
        let current = staging.current;
        let chunk = &mut staging.chunks[current];
        // SAFETY: `at + src.len()` is within the chunk (staging_slot), whose
        // earlier copies that read this range have completed.
        let host = unsafe { chunk.ptr.add(at) };
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), host, src.len()) };
        // SAFETY: pinned source of `src.len()` bytes kept until an event
        // recorded after this copy completes; the caller's range at `dst`.
        let code = unsafe {
            (self.hip.hipMemcpyAsync)(
                dst as *mut c_void,
                host as *const c_void,
                src.len(),
                HOST_TO_DEVICE,
                self.stream.raw,
            )
        };
        self.check(code, "hipMemcpyAsync(pinned host to device)")
    }

    /// An offset in the current staging chunk with room for `len` bytes,
    /// moving to a chunk whose copies have all run (or a new one) if needed.
    fn staging_slot(&self, staging: &mut Staging, len: usize) -> Result<usize> {
        const CHUNK: usize = 1 << 20;
        let need = len.next_multiple_of(256);
        if let Some(c) = staging.chunks.get_mut(staging.current)
            && c.used + need <= c.cap
        {
            c.used += need;
            return Ok(c.used - need);
        }
        // Mark the end of the current chunk's copies.
        if let Some(c) = staging.chunks.get_mut(staging.current)
            && c.used > 0
            && c.done.is_none()
        {
            let e = self.event()?;
            // SAFETY: our event and stream.
            let code = unsafe { (self.hip.hipEventRecord)(e.raw, self.stream.raw) };
            self.check(code, "hipEventRecord")?;
            c.done = Some(e);
        }
        // Reuse a chunk whose copies have run.
        for (i, c) in staging.chunks.iter_mut().enumerate() {
            if c.cap < need {
                continue;
            }
            let free = match &c.done {
                None => c.used == 0,
                // SAFETY: our event; hipSuccess means the work before it ran.
                Some(e) => {
                    let code = unsafe { (self.hip.hipEventQuery)(e.raw) };
                    code == hb::hipError_t_hipSuccess
                }
            };
            if free {
                c.used = need;
                c.done = None;
                staging.current = i;
                return Ok(0);
            }
        }
        let cap = need.max(CHUNK);
        let mut p: *mut c_void = null_mut();
        // SAFETY: writes one pointer; flags 0 = hipHostMallocDefault.
        let code = unsafe { (self.hip.hipHostMalloc)(&mut p, cap, 0) };
        if code == hb::hipError_t_hipErrorOutOfMemory
            || (code == hb::hipError_t_hipSuccess && p.is_null())
        {
            return Err(Error::OutOfMemory {
                device: format!("{} (pinned host staging)", self.label),
                bytes: cap,
                free: None,
            });
        }
        self.check(code, "hipHostMalloc")?;
        staging.chunks.push(StagingChunk {
            ptr: p.cast(),
            cap,
            used: need,
            done: None,
            hip: self.hip,
        });
        staging.current = staging.chunks.len() - 1;
        Ok(0)
    }
}
