//! Errors found on the device side (an integer division by zero, an id past
//! its dim), reported without a wait after each launch.
//!
//! Each device has [`FAULT_WORDS`] status words (`[tag, index low, index
//! high, id low, id high, size low, size high, 0]`, zero when nothing
//! happened; the id and size only for [`ID_OUT_OF_RANGE`]). A launch that can fault takes a
//! [`FaultChannel`]: the words and a tag naming the op and what can go
//! wrong. Its kernel compare-and-swaps the tag into word 0 when it finds the
//! error (the first report wins) and writes the element index. The host
//! reads the words at the points where it waits anyway — [`Device::synchronize`]
//! and every download (`to_vec`, `DeviceBuffer::download`, a copy to another
//! device) — and only when a launch that can fault ran since it last looked;
//! then it clears them and returns [`Error::Fault`] naming the op. So the
//! error surfaces at the next wait, on every device the same way, and a
//! result computed with a fault never reaches the host silently.
//!
//! The status is the device's, not a tensor's (as a CUDA error is the
//! context's): the next wait on that device reports it, whichever tensor it
//! downloads and whichever thread waits, and reports it once. The Cpu runs
//! ops at once and returns the error from the op itself.

use super::Device;
use super::args::Out;
use super::buffer::DeviceBuffer;
use crate::error::{Error, Result};
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

/// The u32 status words of a device (the kernel side's `Fault::status`).
pub const FAULT_WORDS: usize = 8;

/// The `what` of the faults of indexing ops: an id past its dim. Reported
/// as [`Error::IdOutOfRange`] with the id and the dim's size the kernel
/// wrote (`Fault::raise_id`).
pub const ID_OUT_OF_RANGE: &str = "id out of range";

/// The status words of one device and whether a launch that can fault ran
/// since the host last read them.
#[derive(Default)]
struct FaultWords {
    words: Option<DeviceBuffer<u32>>,
    armed: bool,
}

/// Every device's status words, by device (two handles on one GPU share
/// them). Created at a device's first faulting launch and kept for the
/// process, as the device itself is.
static DEVICES: Mutex<Option<HashMap<super::DeviceKey, &'static Mutex<FaultWords>>>> =
    Mutex::new(None);

fn words_of(device: &Device) -> &'static Mutex<FaultWords> {
    let mut map = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
    map.get_or_insert_with(HashMap::new)
        .entry(device.key())
        .or_insert_with(|| Box::leak(Box::default()))
}

/// What each tag means: (op, what went wrong). Tags are process-wide.
static SITES: Mutex<Vec<(&'static str, &'static str)>> = Mutex::new(Vec::new());

fn tag_of(op: &'static str, what: &'static str) -> u32 {
    let mut sites = SITES.lock().unwrap_or_else(|e| e.into_inner());
    let i = match sites.iter().position(|&s| s == (op, what)) {
        Some(i) => i,
        None => {
            sites.push((op, what));
            sites.len() - 1
        }
    };
    i as u32 + 1
}

fn site(tag: u32) -> (&'static str, &'static str) {
    let sites = SITES.lock().unwrap_or_else(|e| e.into_inner());
    sites
        .get(tag as usize - 1)
        .copied()
        .unwrap_or(("an unknown op", "an unknown fault"))
}

/// The status words and tag one launch that can fault passes to its kernel
/// (the device-layer `Fault { status, tag }`). Holds the device's status
/// lock until dropped: create it right before the launch.
///
/// ```
/// use ferrocm_host::{Device, WaveSize};
/// let dev = Device::emulator(WaveSize::Wave32);
/// let ch = dev.fault_channel("div", "integer division by zero").unwrap();
/// assert!(ch.tag() > 0);
/// drop(ch);
/// dev.synchronize().unwrap(); // nothing was reported
/// ```
pub struct FaultChannel<'a> {
    guard: MutexGuard<'a, FaultWords>,
    tag: u32,
}

impl FaultChannel<'_> {
    /// The `status: *mut u32` kernel argument.
    pub fn status(&self) -> Out<'_, u32> {
        Out::new(
            self.guard
                .words
                .as_ref()
                .expect("allocated with the channel"),
        )
    }

    /// The `tag: u32` kernel argument.
    pub fn tag(&self) -> u32 {
        self.tag
    }
}

impl Device {
    fn fault_words(&self) -> MutexGuard<'static, FaultWords> {
        words_of(self).lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The channel for a launch of `op` that can find `what` on the device;
    /// the error, if the kernel reports it, comes from the next wait.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] when the status words (32 bytes, once per
    /// device) cannot be allocated.
    pub fn fault_channel(&self, op: &'static str, what: &'static str) -> Result<FaultChannel<'_>> {
        let mut guard = self.fault_words();
        if guard.words.is_none() {
            guard.words = Some(self.alloc_zeroed::<u32>(FAULT_WORDS)?);
        }
        guard.armed = true;
        Ok(FaultChannel {
            guard,
            tag: tag_of(op, what),
        })
    }

    /// Reads and clears this device's status words when a launch that can
    /// fault ran since they were last read (`Device::check_faults`, called
    /// by every wait).
    pub(super) fn take_fault(&self) -> Result<()> {
        let mut guard = self.fault_words();
        if !guard.armed {
            return Ok(());
        }
        guard.armed = false;
        let words = guard.words.as_mut().expect("armed only with words");
        let v = words.download_unchecked()?;
        if v[0] == 0 {
            return Ok(());
        }
        words.write(&[0; FAULT_WORDS])?;
        let (op, what) = site(v[0]);
        let word64 = |k: usize| v[k] as u64 | (v[k + 1] as u64) << 32;
        if what == ID_OUT_OF_RANGE {
            return Err(Error::IdOutOfRange {
                op: op.into(),
                id: word64(3) as i64,
                position: word64(1),
                size: word64(5),
                device: self.to_string(),
            });
        }
        Err(Error::Fault {
            op: op.into(),
            what: what.into(),
            index: v[1] as u64 | (v[2] as u64) << 32,
            device: self.to_string(),
        })
    }
}
