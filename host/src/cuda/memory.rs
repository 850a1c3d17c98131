//! Device memory of a CUDA GPU: allocations (`cuMemAlloc`), fills and
//! copies on the device's stream. Lengths and ranges were checked by the
//! caller (`Device`); these are the driver calls.

use super::CudaDevice;
use super::driver::{Handle, describe};
use crate::error::{Error, Result};
use crate::gpu::{QueuedRead, ReadDone};
use crate::memory::GpuMemory;
use cudarc::driver::result as cu;
use cudarc::driver::sys;
use std::sync::{Arc, Mutex};

/// Page-locked host memory a queued read lands in (`cuMemAllocHost`). The
/// device keeps the slots for reuse: allocating page-locked memory may
/// wait for the device, which would undo the point of queueing the read.
pub(super) struct PinnedSlot {
    ptr: *mut u8,
    cap: usize,
}

// SAFETY: host memory owned by the slot, used by one read at a time.
unsafe impl Send for PinnedSlot {}

/// A device's free slots.
pub(super) type PinnedSlots = Arc<Mutex<Vec<PinnedSlot>>>;

/// Frees the free slots (the device's drop, its context current). A slot
/// still held by a read that outlives the device is not freed.
pub(super) fn free_slots(slots: &PinnedSlots) {
    for s in slots.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
        // SAFETY: from cuMemAllocHost, freed once. Errors are ignored.
        let _ = unsafe { cu::free_host(s.ptr.cast()) };
    }
}

/// A read queued by [`CudaDevice::copy_dtoh_queued_raw`]: the copy into a
/// slot and an event recorded after it.
struct CudaQueuedRead {
    slot: Option<PinnedSlot>,
    len: usize,
    event: Handle<sys::CUevent>,
    ctx: Handle<sys::CUcontext>,
    slots: PinnedSlots,
    label: String,
}

impl QueuedRead for CudaQueuedRead {
    fn wait(mut self: Box<Self>) -> Result<Vec<u8>> {
        // SAFETY: our context and event.
        unsafe { cu::ctx::set_current(self.ctx.0) }
            .and_then(|()| unsafe { cu::event::synchronize(self.event.0) })
            .map_err(|e| Error::Cuda {
                call: "cuEventSynchronize (a queued read)".into(),
                device: self.label.clone(),
                message: describe(&e),
            })?;
        let slot = self.slot.take().expect("held until waited");
        // SAFETY: the copy into the slot's first `len` bytes has finished.
        let bytes = unsafe { std::slice::from_raw_parts(slot.ptr, self.len) }.to_vec();
        self.slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(slot);
        Ok(bytes)
    }
}

impl Drop for CudaQueuedRead {
    fn drop(&mut self) {
        // SAFETY: our context and event; a slot whose copy may still be
        // running (the wait failed) is not reused.
        unsafe {
            let _ = cu::ctx::set_current(self.ctx.0);
            if let Some(slot) = self.slot.take()
                && cu::event::synchronize(self.event.0).is_ok()
            {
                self.slots
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(slot);
            }
            let _ = cu::event::destroy(self.event.0);
        }
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
        let free = {
            let mut slots = self.read_slots.lock().unwrap_or_else(|e| e.into_inner());
            let fit = slots.iter().position(|s| s.cap >= len);
            fit.map(|i| slots.swap_remove(i))
        };
        let slot = match free {
            Some(s) => s,
            None => {
                let cap = len.next_power_of_two().max(256);
                // SAFETY: a plain allocation, owned by the slot.
                let ptr = self.check(unsafe { cu::malloc_host(cap, 0) }, "cuMemAllocHost")?;
                PinnedSlot {
                    ptr: ptr.cast(),
                    cap,
                }
            }
        };
        let event = match cu::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING) {
            Ok(e) => Handle(e),
            Err(e) => {
                self.read_slots
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(slot);
                return Err(self.check::<()>(Err(e), "cuEventCreate").unwrap_err());
            }
        };
        let dst = slot.ptr;
        // From here the read's drop returns the slot and destroys the event.
        let read = CudaQueuedRead {
            slot: Some(slot),
            len,
            event,
            ctx: self.ctx,
            slots: self.read_slots.clone(),
            label: self.label.clone(),
        };
        // SAFETY: the slot holds at least `len` bytes and is not reused
        // before the read is waited; the caller's source range.
        let out = unsafe { std::slice::from_raw_parts_mut(dst, len) };
        self.check(
            unsafe { cu::memcpy_dtoh_async(out, src, self.stream.0) },
            "cuMemcpyDtoHAsync",
        )?;
        // SAFETY: our event and stream.
        self.check(
            unsafe { cu::event::record(read.event.0, self.stream.0) },
            "cuEventRecord",
        )?;
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
