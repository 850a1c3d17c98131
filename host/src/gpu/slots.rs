//! Page-locked host slots the GPU backends' queued reads land in, kept
//! for reuse, and the read that holds one until it is waited or dropped.

use super::QueuedRead;
use crate::error::Result;
use std::sync::{Arc, Mutex};

/// Host memory a backend's queued reads land in (page-locked: the copy
/// runs without the host).
pub(crate) trait HostSlot: Send {
    /// The first byte.
    fn ptr(&self) -> *mut u8;
    /// Bytes it holds.
    fn cap(&self) -> usize;
}

/// A backend's free [`HostSlot`]s, shared with the reads that hold one: a
/// slot is kept for the next read, since allocating page-locked memory may
/// wait for the device, which would undo the point of queueing a read.
pub(crate) struct ReadSlots<S>(Arc<Mutex<Vec<S>>>);

impl<S> Default for ReadSlots<S> {
    fn default() -> Self {
        Self(Arc::default())
    }
}

impl<S: HostSlot> ReadSlots<S> {
    /// A free slot of at least `len` bytes, else `alloc(bytes)`'s new one
    /// (`len` rounded up to a power of two, 256 at least).
    pub(crate) fn take(&self, len: usize, alloc: impl FnOnce(usize) -> Result<S>) -> Result<S> {
        let free = {
            let mut slots = self.0.lock().unwrap_or_else(|e| e.into_inner());
            let fit = slots.iter().position(|s| s.cap() >= len);
            fit.map(|i| slots.swap_remove(i))
        };
        match free {
            Some(s) => Ok(s),
            None => alloc(len.next_power_of_two().max(256)),
        }
    }

    /// Keeps `slot` for a later read.
    pub(crate) fn give(&self, slot: S) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(slot);
    }

    /// The free slots, taken out (a device's drop frees them).
    pub(crate) fn drain(&self) -> Vec<S> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// A read of `len` bytes into `slot`, whose copy (queued by the caller)
    /// `done` waits for: an event recorded after it.
    pub(crate) fn read<W>(&self, slot: S, len: usize, done: W) -> SlotRead<S, W>
    where
        W: FnMut() -> Result<()> + Send,
    {
        SlotRead {
            slot: Some(slot),
            len,
            slots: ReadSlots(self.0.clone()),
            done,
        }
    }
}

/// A queued read into a [`HostSlot`]: waiting returns the slot to its
/// device's [`ReadSlots`]; dropped unwaited, it waits for the copy before
/// the slot is reused, and leaks the slot when that wait fails (the copy
/// may still be writing into it).
pub(crate) struct SlotRead<S: HostSlot, W: FnMut() -> Result<()> + Send> {
    slot: Option<S>,
    len: usize,
    slots: ReadSlots<S>,
    done: W,
}

impl<S: HostSlot, W: FnMut() -> Result<()> + Send> QueuedRead for SlotRead<S, W> {
    fn wait(mut self: Box<Self>) -> Result<Vec<u8>> {
        (self.done)()?;
        let slot = self.slot.take().expect("held until waited");
        // SAFETY: the copy into the slot's first `len` bytes has finished.
        let bytes = unsafe { std::slice::from_raw_parts(slot.ptr(), self.len) }.to_vec();
        self.slots.give(slot);
        Ok(bytes)
    }
}

impl<S: HostSlot, W: FnMut() -> Result<()> + Send> Drop for SlotRead<S, W> {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            match (self.done)() {
                Ok(()) => self.slots.give(slot),
                Err(_) => std::mem::forget(slot),
            }
        }
    }
}
