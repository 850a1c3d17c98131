//! Device memory of a CUDA GPU: allocations (`cuMemAlloc`), fills and
//! copies on the device's stream. Lengths and ranges were checked by the
//! caller (`Device`); these are the driver calls.

use super::CudaDevice;
use super::driver::Event;
use super::driver::{Handle, describe};
use crate::error::{Error, Result};
use crate::gpu::{HostSlot, QueuedRead, ReadDone, ReadSlots};
use crate::memory::GpuMemory;
use cudarc::driver::result as cu;
use cudarc::driver::sys;

/// Page-locked host memory a queued read lands in (`cuMemAllocHost`),
/// freed by the device's drop (a slot held by a read that outlives the
/// device is not freed).
pub(super) struct PinnedSlot {
    ptr: *mut u8,
    cap: usize,
}

// SAFETY: host memory owned by the slot, used by one read at a time.
unsafe impl Send for PinnedSlot {}

impl HostSlot for PinnedSlot {
    fn ptr(&self) -> *mut u8 {
        self.ptr
    }
    fn cap(&self) -> usize {
        self.cap
    }
}

/// Frees the free slots (the device's drop, its context current).
pub(super) fn free_slots(slots: &ReadSlots<PinnedSlot>) {
    for s in slots.drain() {
        // SAFETY: from cuMemAllocHost, freed once. Errors are ignored.
        let _ = unsafe { cu::free_host(s.ptr.cast()) };
    }
}

/// The event recorded after a queued read's copy, with what waiting for it
/// needs.
struct ReadEvent {
    event: Event,
    ctx: Handle<sys::CUcontext>,
    label: String,
}

// SAFETY: a CUDA event may be waited for and destroyed from any thread once
// its context is current (the wait sets it).
unsafe impl Send for ReadEvent {}

impl ReadEvent {
    fn wait(&self) -> Result<()> {
        // SAFETY: our context and event.
        unsafe { cu::ctx::set_current(self.ctx.0) }
            .and_then(|()| unsafe { cu::event::synchronize(self.event.0) })
            .map_err(|e| Error::Cuda {
                call: "cuEventSynchronize (a queued read)".into(),
                device: self.label.clone(),
                message: describe(&e),
            })
    }
}

/// Device memory of a [`CudaDevice`] (`cuMemAlloc`), freed on drop.
pub struct CudaAlloc {
    ptr: sys::CUdeviceptr,
    bytes: usize,
    ctx: Handle<sys::CUcontext>,
}

impl std::fmt::Debug for CudaAlloc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CudaAlloc({:#x}, {} bytes)", self.ptr, self.bytes)
    }
}

impl GpuMemory for CudaAlloc {
    fn ptr(&self) -> u64 {
        self.ptr
    }
    fn len_bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for CudaAlloc {
    fn drop(&mut self) {
        // SAFETY: a live allocation of this context; cuMemFree waits for work
        // using it. An error (a dead context) leaves nothing to free.
        unsafe {
            let _ = cu::ctx::set_current(self.ctx.0);
            let _ = cu::free_sync(self.ptr);
        }
    }
}

impl CudaDevice {
    /// `bytes` of device memory (at least 1, so every buffer has its own
    /// address). Out of memory is [`Error::OutOfMemory`] with the free bytes.
    pub(super) fn alloc_memory(&self, bytes: usize) -> Result<CudaAlloc> {
        self.current()?;
        // SAFETY: plain allocation.
        match unsafe { cu::malloc_sync(bytes.max(1)) } {
            Ok(ptr) => Ok(CudaAlloc {
                ptr,
                bytes,
                ctx: self.ctx,
            }),
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => Err(Error::OutOfMemory {
                device: self.label.clone(),
                bytes,
                free: cu::mem_get_info().ok().map(|(f, _)| f as u64),
            }),
            Err(e) => Err(Error::Cuda {
                call: "cuMemAlloc".into(),
                device: self.label.clone(),
                message: describe(&e),
            }),
        }
    }

    /// Sets `len` bytes at `dst` to `byte` (queued).
    ///
    /// # Safety
    /// `dst..dst + len` lies in a live allocation of this device.
    pub(super) unsafe fn memset_raw(&self, dst: u64, byte: u8, len: usize) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        self.current()?;
        // SAFETY: the caller's range.
        self.check(
            unsafe { cu::memset_d8_async(dst, byte, len, self.stream.0) },
            "cuMemsetD8Async",
        )
    }

    /// Copies `src` to `dst`, queued in stream order. From pageable memory
    /// the driver stages the bytes before returning, so `src` may be
    /// dropped at once.
    ///
    /// # Safety
    /// `dst..dst + src.len()` lies in a live allocation of this device.
    pub(super) unsafe fn copy_htod_raw(&self, dst: u64, src: &[u8]) -> Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        self.current()?;
        // SAFETY: the caller's range.
        self.check(
            unsafe { cu::memcpy_htod_async(dst, src, self.stream.0) },
            "cuMemcpyHtoDAsync",
        )
    }

    /// Copies `dst.len()` bytes from `src` to the host after the queued
    /// work, and waits.
    ///
    /// # Safety
    /// `src..src + dst.len()` lies in a live allocation of this device.
    pub(super) unsafe fn copy_dtoh_raw(&self, src: u64, dst: &mut [u8]) -> Result<()> {
        if dst.is_empty() {
            return Ok(());
        }
        self.current()?;
        // SAFETY: the caller's range; the stream is synchronised before
        // `dst` is released.
        self.check(
            unsafe { cu::memcpy_dtoh_async(dst, src, self.stream.0) },
            "cuMemcpyDtoHAsync",
        )?;
        self.wait()
    }

    /// Queues a copy of `len` bytes at `src` into a page-locked slot and an
    /// event after it (see [`crate::GpuBackend::copy_dtoh_queued`]).
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
        self.current()?;
        let slot = self.read_slots.take(len, |cap| {
            // SAFETY: a plain allocation, owned by the slot.
            let ptr = self.check(unsafe { cu::malloc_host(cap, 0) }, "cuMemAllocHost")?;
            Ok(PinnedSlot {
                ptr: ptr.cast(),
                cap,
            })
        })?;
        let event = match cu::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING) {
            Ok(e) => ReadEvent {
                event: Event(e),
                ctx: self.ctx,
                label: self.label.clone(),
            },
            Err(e) => {
                self.read_slots.give(slot);
                return Err(self.check::<()>(Err(e), "cuEventCreate").unwrap_err());
            }
        };
        let (dst, raw_event) = (slot.ptr, event.event.0);
        // From here the read's drop waits for the event and keeps the slot.
        let read = self.read_slots.read(slot, len, move || event.wait());
        // SAFETY: the slot holds at least `len` bytes and is not reused
        // before the read is waited; the caller's source range.
        let out = unsafe { std::slice::from_raw_parts_mut(dst, len) };
        self.check(
            unsafe { cu::memcpy_dtoh_async(out, src, self.stream.0) },
            "cuMemcpyDtoHAsync",
        )?;
        // SAFETY: our event and stream.
        let recorded = self.check(
            unsafe { cu::event::record(raw_event, self.stream.0) },
            "cuEventRecord",
        );
        if recorded.is_err() {
            // The read's drop would not wait for the copy: the stream does.
            let _ = self.wait();
        }
        recorded?;
        Ok(Box::new(read))
    }

    /// Copies `bytes` from `src` to `dst` on the device (queued).
    ///
    /// # Safety
    /// Both ranges lie in live allocations of this device.
    pub(super) unsafe fn copy_dtod_raw(&self, dst: u64, src: u64, bytes: usize) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        self.current()?;
        // SAFETY: the caller's ranges.
        self.check(
            unsafe { cu::memcpy_dtod_async(dst, src, bytes, self.stream.0) },
            "cuMemcpyDtoDAsync",
        )
    }
}
