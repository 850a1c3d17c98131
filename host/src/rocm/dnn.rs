//! MIOpen on a ROCm GPU (the backend's [`Dnn`]): one handle per device,
//! created on first use on the device's stream (`miopenCreateWithStream`),
//! destroyed with it (`miopenDestroy`), statuses read with
//! `miopenGetErrorString`. The convolution, pooling and batch-norm paths
//! will use it through the trait.

use super::{RocmDevice, ffi};
use crate::dnn::{Dnn, DnnGuard};
use crate::error::{Error, Result};
use std::ptr::null_mut;
use std::sync::Mutex;

/// An MIOpen handle created on its device's stream, destroyed with the device.
///
/// MIOpen handles must not be used by two threads at once, so the raw handle
/// is reached through [`Dnn::handle`], which locks it.
pub struct MiopenHandle {
    raw: rocm_rs::miopen::ffi::miopenHandle_t,
    lock: Mutex<()>,
    lib: &'static ffi::Miopen,
}

// SAFETY: MIOpen handles may be used from any thread, one at a time: every
// use goes through `lock`.
unsafe impl Send for MiopenHandle {}
// SAFETY: as above.
unsafe impl Sync for MiopenHandle {}

impl MiopenHandle {
    pub(super) fn new(dev: &RocmDevice) -> Result<Self> {
        let lib = ffi::miopen().map_err(|why| Error::Rocm {
            call: "loading MIOpen".into(),
            device: dev.label.clone(),
            message: why.into(),
        })?;
        dev.set_device()?;
        let mut raw = null_mut();
        // SAFETY: writes one handle, on our stream.
        let status = unsafe { (lib.miopenCreateWithStream)(&mut raw, dev.stream.raw.cast()) };
        if status != rocm_rs::miopen::ffi::miopenStatus_t_miopenStatusSuccess {
            // SAFETY: returns a static string (or null).
            let text =
                unsafe { ffi::c_text((lib.miopenGetErrorString)(status)) }.unwrap_or_default();
            return Err(Error::Rocm {
                call: "miopenCreateWithStream".into(),
                device: dev.label.clone(),
                message: format!("{text} ({status})"),
            });
        }
        Ok(MiopenHandle {
            raw,
            lock: Mutex::new(()),
            lib,
        })
    }
}

impl Dnn for MiopenHandle {
    fn name(&self) -> &'static str {
        "MIOpen"
    }

    fn handle(&self) -> DnnGuard<'_> {
        DnnGuard::new(
            self.raw.cast(),
            self.lock.lock().unwrap_or_else(|e| e.into_inner()),
        )
    }
}

impl Drop for MiopenHandle {
    fn drop(&mut self) {
        // SAFETY: created by miopenCreateWithStream, destroyed once. Errors ignored.
        unsafe { (self.lib.miopenDestroy)(self.raw) };
    }
}
