//! The CUDA driver (`libcuda.so`), opened at run time through cudarc's
//! dynamic loading: whether it is there, how many GPUs it reports, its error
//! messages, and the handles and events the other files share.

use cudarc::driver::result as cu;
use cudarc::driver::sys;

fn driver_present() -> bool {
    // SAFETY: only tries to open the library.
    unsafe { sys::is_culib_present() }
}

/// `cuInit`, or why the driver is not usable.
pub(super) fn init() -> std::result::Result<(), String> {
    if !driver_present() {
        return Err("the CUDA driver (libcuda.so) is not installed".into());
    }
    cu::init().map_err(|e| format!("cuInit failed: {}", describe(&e)))
}

/// The driver's name and message for an error.
pub(crate) fn describe(e: &cu::DriverError) -> String {
    let name = e
        .error_name()
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("{:?}", e.0));
    match e.error_string() {
        Ok(s) => format!("{name}: {}", s.to_string_lossy()),
        Err(_) => name,
    }
}

/// Number of CUDA GPUs (0 when the driver is missing or reports none).
///
/// ```
/// // 0 on a machine without an NVIDIA GPU: never a panic.
/// let _n = ferrocm_host::cuda::device_count();
/// ```
pub fn device_count() -> usize {
    if init().is_err() {
        return 0;
    }
    cu::device::get_count()
        .map(|n| n.max(0) as usize)
        .unwrap_or(0)
}

/// Why no CUDA GPU is usable, for messages (`ferrocm info`).
pub fn absence_reason() -> String {
    match init() {
        Err(why) => why,
        Ok(()) => match cu::device::get_count() {
            Ok(0) => "the CUDA driver reports no device".into(),
            Ok(n) => format!("the CUDA driver reports {n} device(s)"),
            Err(e) => format!("cuDeviceGetCount failed: {}", describe(&e)),
        },
    }
}

/// A raw handle that lives as long as its device.
#[derive(Clone, Copy)]
pub(crate) struct Handle<T>(pub(crate) T);
// SAFETY: CUDA handles may be used from any thread once the context is current.
unsafe impl<T> Send for Handle<T> {}
unsafe impl<T> Sync for Handle<T> {}

/// A CUDA event, destroyed on drop.
pub(super) struct Event(pub(super) sys::CUevent);

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: our event.
        let _ = unsafe { cu::event::destroy(self.0) };
    }
}
