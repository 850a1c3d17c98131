//! The ROCm backend (feature `rocm`): HIP devices, memory, streams, kernel
//! launch from the embedded code objects, and rocBLAS / MIOpen handles.
//!
//! Files: `ffi` (the entry points, resolved at run time), this one (the
//! device and its [`GpuBackend`] implementation), `memory` (allocations,
//! copies, pinned staging), `launch` (code objects, kernels, the kernarg
//! packing, launches), `graph` (HIP graphs), `blas` (rocBLAS), `dnn` (MIOpen).
//!
//! # How ROCm is reached
//! The HIP runtime (`libamdhip64`), rocBLAS and MIOpen are opened at run time
//! with `dlopen` (the private `ffi` module of this one), not linked. A
//! binary built with `--features rocm` therefore starts on any machine: with
//! no ROCm installed, [`device_count`] is 0, [`absence_reason`] says why, and
//! `Device::best()` picks the CPU. The C declarations (types, constants,
//! signatures) are rocm-rs 0.5.2's, checked against ours at compile time;
//! rocm-rs's own safe wrappers are not used (several are unsound: they take
//! raw pointers in safe functions and free handles they do not own; and
//! calling them would need link flags that rocm-rs does not emit when built
//! without ROCm).
//!
//! Libraries are looked up under `$ROCM_PATH/lib` (when set), then by soname
//! on the loader's path (`LD_LIBRARY_PATH`, the ld.so cache), then in
//! `/opt/rocm/lib`. Device properties come from `hipGetDevicePropertiesR0600`,
//! so a GPU needs a ROCm 6.0 or newer runtime (ROCm 5 runtimes are reported as
//! such, not misread).
//!
//! # What has run and what has not
//! No AMD GPU was available where this was written. What ran: library
//! discovery with no ROCm installed, and the resulting "no GPU" path
//! ([`device_count`], [`absence_reason`], [`RocmDevice::new`] returning an
//! error, the CPU fallback); the same against a real HIP runtime without a GPU
//! (Debian's HIP 5.2 on `LD_LIBRARY_PATH`: every HIP entry point below
//! resolved, `hipGetDeviceCount` answered `hipErrorNoDevice`); [`pack_args`],
//! also against the argument layout in the metadata of the embedded code
//! objects. Everything that needs a GPU — properties, code-object loading,
//! memory, copies, launch, events, rocBLAS and MIOpen handles — is
//! compile-checked only; the `on_a_gpu` test of `host/tests/gpu_backends.rs`
//! exercises all of it and runs when a GPU answers
//! (`cargo test -p ferrocm-host --features rocm rocm::`).
//!
//! # Kernel arguments
//! See `launch`: `kernelParams`, with each kernel's argument layout in the
//! code object's metadata checked against the host's packing before its
//! first launch.
//!
//! # Threads
//! [`RocmDevice`] is `Send + Sync` and shared across threads through an `Arc`.
//! Its HIP handles are opaque pointers into the HIP runtime, which serialises
//! access to its objects itself (for example `clr` holds a per-function lock
//! while it captures a launch's arguments); the
//! HIP reference for `hipSetDevice` states that it "may be called from any
//! host thread" and that "multiple host threads may use the same device". The
//! one piece of per-thread HIP state, the current device, is set by every
//! method before it calls HIP. rocBLAS and MIOpen handles are *not* safe to use
//! from two threads at once (a rocBLAS handle owns a workspace and mutable
//! settings), so their raw handles are reachable only through a mutex guard.
//!
//! # Ordering
//! All work goes to the device's one stream, in call order. Copies from or to
//! host memory wait for the stream before returning (the host slice is only
//! borrowed for the call), so they also see every earlier kernel's writes;
//! `memset`, device-to-device copies and launches are queued and return at once.

mod blas;
mod dnn;
mod ffi;
mod graph;
mod launch;
mod memory;
#[cfg(test)]
mod tests;

pub use blas::{RocblasGuard, RocblasHandle, rocblas_found};
pub use dnn::MiopenHandle;
pub use launch::pack_args;
pub use memory::RocmAlloc;

use crate::dnn::Dnn;
use crate::error::{Error, Result};
use crate::gpu::{Blas, GpuBackend, GpuInfo, Library};
use crate::launch::LaunchConfig;
use crate::memory::{GpuMemory, Pool};
use ferrocm_kernels::KernelModule;
use ferrocm_kernels::host::{ArgKind, KernelInfo};
use memory::Staging;
use rocm_rs::hip::bindings as hb;
use std::collections::HashMap;
use std::os::raw::c_int;
use std::ptr::null_mut;
use std::sync::{Arc, Mutex, OnceLock};

/// `hipErrorName (code): description`, from the runtime's own tables.
fn hip_message(hip: &ffi::Hip, code: hb::hipError_t) -> String {
    // SAFETY: both functions return pointers to static strings (or null).
    let name =
        unsafe { ffi::c_text((hip.hipGetErrorName)(code)) }.unwrap_or_else(|| "hipError".into());
    // SAFETY: as above.
    let text = unsafe { ffi::c_text((hip.hipGetErrorString)(code)) }.unwrap_or_default();
    format!("{name} ({code}): {text}")
}

/// Maps a HIP return code to `Ok` or [`Error::Rocm`].
fn hip_check(hip: &ffi::Hip, code: hb::hipError_t, call: &str, device: &str) -> Result<()> {
    if code == hb::hipError_t_hipSuccess {
        Ok(())
    } else {
        Err(Error::Rocm {
            call: call.into(),
            device: device.into(),
            message: hip_message(hip, code),
        })
    }
}

/// The runtime's version as `major.minor.patch`, if it answers.
fn runtime_version(hip: &ffi::Hip) -> Option<String> {
    let mut v: c_int = 0;
    // SAFETY: writes one int.
    if unsafe { (hip.hipRuntimeGetVersion)(&mut v) } != hb::hipError_t_hipSuccess || v <= 0 {
        return None;
    }
    Some(format!(
        "{}.{}.{}",
        v / 10_000_000,
        (v / 100_000) % 100,
        v % 100_000
    ))
}

/// What asking the HIP runtime for devices gave.
enum Probe {
    /// The library could not be opened or lacks an entry point.
    Missing(&'static str),
    /// `hipGetDeviceCount` failed (with no GPU, ROCm answers `hipErrorNoDevice`).
    Failed(String),
    /// This many devices.
    Devices(usize),
}

fn probe() -> Probe {
    let rt = match ffi::hip() {
        Ok(rt) => rt,
        Err(why) => return Probe::Missing(why),
    };
    let mut n: c_int = 0;
    // SAFETY: writes one int.
    let code = unsafe { (rt.api.hipGetDeviceCount)(&mut n) };
    if code != hb::hipError_t_hipSuccess {
        return Probe::Failed(format!(
            "hipGetDeviceCount failed: {}",
            hip_message(&rt.api, code)
        ));
    }
    Probe::Devices(usize::try_from(n).unwrap_or(0))
}

/// Number of HIP devices; 0 when the HIP runtime is absent, fails, or reports none.
/// Never panics.
pub fn device_count() -> usize {
    match probe() {
        Probe::Devices(n) => n,
        Probe::Missing(_) | Probe::Failed(_) => 0,
    }
}

/// Why there is no GPU, for people: the runtime library was not found (with
/// every place tried), `hipGetDeviceCount` failed (its error name, code and
/// message), or the runtime reports zero devices. When devices are present it
/// says how many.
pub fn absence_reason() -> String {
    let runtime = || {
        ffi::hip().map_or_else(
            |_| "the HIP runtime".to_string(),
            |rt| match runtime_version(&rt.api) {
                Some(v) => format!("the HIP runtime {v} ({})", rt.api.found_as),
                None => format!("the HIP runtime ({})", rt.api.found_as),
            },
        )
    };
    match probe() {
        Probe::Missing(why) => format!("ROCm is not installed or not on the library path: {why}"),
        Probe::Failed(msg) => format!("{} is present but {msg}", runtime()),
        Probe::Devices(0) => format!("{} reports no devices", runtime()),
        Probe::Devices(n) => format!("{} reports {n} device(s)", runtime()),
    }
}

/// A HIP stream owned by one device.
struct Stream {
    raw: hb::hipStream_t,
    hip: &'static ffi::Hip,
}

// SAFETY: an opaque handle into the HIP runtime, which synchronises its use
// from several threads itself (see the module docs, "Threads").
unsafe impl Send for Stream {}
// SAFETY: as above.
unsafe impl Sync for Stream {}

impl Drop for Stream {
    fn drop(&mut self) {
        // SAFETY: created by hipStreamCreate, destroyed once. Errors are ignored.
        unsafe { (self.hip.hipStreamDestroy)(self.raw) };
    }
}

/// A HIP event (for timing), destroyed on drop.
pub(super) struct Event {
    pub(super) raw: hb::hipEvent_t,
    hip: &'static ffi::Hip,
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: created by hipEventCreate, destroyed once. Errors are ignored.
        unsafe { (self.hip.hipEventDestroy)(self.raw) };
    }
}

/// `hipDeviceProp_tR0600` with slack after it, so that a runtime writing a
/// larger struct than the one ferrocm was built against cannot write past it.
#[repr(C)]
struct PaddedProps {
    props: hb::hipDeviceProp_tR0600,
    slack: [u8; 4096],
}

/// One ROCm GPU: its properties, the code objects loaded for its arch, one
/// stream, and lazily created rocBLAS and MIOpen handles bound to that stream.
///
/// Obtained through [`crate::Device::rocm`]; see the module docs for how HIP
/// is reached and how it is used from several threads.
pub struct RocmDevice {
    ordinal: usize,
    info: GpuInfo,
    /// `rocm:N (name, arch)`, as `Device`'s Display: the device in error messages.
    label: String,
    hip: &'static ffi::Hip,
    /// HIP's graph entry points, when the runtime has them.
    graphs: Option<&'static ffi::HipGraphApi>,
    /// Looked-up kernels by the address of their (static) `KernelInfo`, with
    /// the argument kinds their layout was verified for.
    functions: Mutex<HashMap<usize, (launch::Function, &'static [ArgKind])>>,
    /// The caching allocator and counters of this device.
    pool: Pool,
    /// Pinned host memory that asynchronous uploads are staged in.
    staging: Mutex<Staging>,
    /// Pinned host memory queued reads land in, kept for reuse.
    read_slots: crate::gpu::ReadSlots<memory::PinnedSlot>,
    /// Serialises the lazy creation of the handles below.
    handle_init: Mutex<()>,
    // Drop order is field order: the handles (bound to the stream) go first,
    // then the modules (each with the image it was loaded from), and the stream.
    rocblas: OnceLock<RocblasHandle>,
    miopen: OnceLock<MiopenHandle>,
    /// Loaded code objects by the address of their (static) `KernelModule`:
    /// ferrocm's from the start, others at the first launch of one of their
    /// kernels.
    modules: Mutex<HashMap<usize, Arc<launch::LoadedModule>>>,
    stream: Stream,
}

// RocmDevice is shared across threads (the Device enum holds it in an Arc).
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<RocmDevice>();
    send_sync::<RocmAlloc>();
};

impl RocmDevice {
    /// Opens GPU number `ordinal`: reads its properties, loads the embedded code
    /// object for its arch (exact arch, else its generic family) and creates a
    /// stream.
    ///
    /// # Errors
    /// [`Error::NoGpu`] when ROCm is absent, reports no device or fewer
    /// than `ordinal + 1`; [`Error::NoCodeObject`] when this build embeds no code
    /// object for the GPU's arch; [`Error::Rocm`] when a HIP call fails.
    pub fn new(ordinal: usize) -> Result<RocmDevice> {
        let count = match probe() {
            Probe::Devices(n) if n > 0 => n,
            _ => {
                return Err(Error::NoGpu {
                    reason: absence_reason(),
                });
            }
        };
        if ordinal >= count {
            return Err(Error::NoGpu {
                reason: format!(
                    "ROCm device {ordinal} requested, but the runtime reports {count} device(s)"
                ),
            });
        }
        let rt = ffi::hip().map_err(|why| Error::NoGpu {
            reason: why.to_string(),
        })?;
        let hip = &rt.api;
        let ord = ordinal as c_int; // < count <= c_int::MAX
        let label = format!("rocm:{ordinal}");
        // SAFETY: plain call.
        let code = unsafe { (hip.hipSetDevice)(ord) };
        hip_check(hip, code, "hipSetDevice", &label)?;

        let get_props = rt.get_device_properties.ok_or_else(|| Error::Rocm {
            call: "hipGetDevicePropertiesR0600".into(),
            device: label.clone(),
            message: format!(
                "{} does not export it: ferrocm needs a ROCm 6.0 or newer runtime (found {})",
                hip.found_as,
                runtime_version(hip).unwrap_or_else(|| "an unknown version".into())
            ),
        })?;
        // SAFETY: the struct holds integers, arrays, a bitfield word and raw
        // pointers only: all-zero is a valid value.
        let mut padded: Box<PaddedProps> = Box::new(unsafe { std::mem::zeroed() });
        // SAFETY: the runtime fills the struct (the slack absorbs a larger one).
        let code = unsafe { get_props(&mut padded.props, ord) };
        hip_check(hip, code, "hipGetDevicePropertiesR0600", &label)?;
        let p = &padded.props;
        let name = ffi::field_text(&p.name);
        let arch_full = ffi::field_text(&p.gcnArchName);
        let arch = arch_full.split(':').next().unwrap_or_default().to_string();
        if !(p.warpSize == 32 || p.warpSize == 64) || !arch.starts_with("gfx") {
            return Err(Error::Rocm {
                call: "hipGetDevicePropertiesR0600".into(),
                device: label,
                message: format!(
                    "implausible properties (warpSize {}, gcnArchName {arch_full:?}): this runtime's \
                     hipDeviceProp_tR0600 differs from the ROCm 7.0 layout ferrocm was built with",
                    p.warpSize
                ),
            });
        }
        let label = format!("rocm:{ordinal} ({name}, {arch})");

        let own = &ferrocm_kernels::KERNEL_MODULE;
        let loaded = launch::load(hip, own, &arch_full, &label)?;
        let info = GpuInfo {
            backend: "rocm",
            ordinal,
            name: name.clone(),
            arch,
            arch_full: arch_full.clone(),
            compute_units: u32::try_from(p.multiProcessorCount).unwrap_or(0),
            total_memory: p.totalGlobalMem as u64,
            wave_size: p.warpSize as u32,
            max_lds_bytes: u32::try_from(p.sharedMemPerBlock).unwrap_or(u32::MAX),
            code_object: Some(loaded.chosen.to_string()),
        };

        let mut raw_stream: hb::hipStream_t = null_mut();
        // SAFETY: writes one handle.
        let code = unsafe { (hip.hipStreamCreate)(&mut raw_stream) };
        hip_check(hip, code, "hipStreamCreate", &label)?;
        let stream = Stream {
            raw: raw_stream,
            hip,
        };

        let mut modules = HashMap::new();
        modules.insert(own as *const KernelModule as usize, Arc::new(loaded));
        Ok(RocmDevice {
            ordinal,
            info,
            label,
            hip,
            graphs: rt.graphs.as_ref(),
            functions: Mutex::new(HashMap::new()),
            pool: Pool::new(),
            staging: Mutex::new(Staging::default()),
            read_slots: Default::default(),
            handle_init: Mutex::new(()),
            rocblas: OnceLock::new(),
            miopen: OnceLock::new(),
            modules: Mutex::new(modules),
            stream,
        })
    }

    /// The device's ordinal (its HIP device id).
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    fn check(&self, code: hb::hipError_t, call: &str) -> Result<()> {
        hip_check(self.hip, code, call, &self.label)
    }

    /// Makes this device current on the calling thread (HIP's current device is
    /// thread-local, and this device may be used from any thread).
    fn set_device(&self) -> Result<()> {
        // SAFETY: plain call.
        let code = unsafe { (self.hip.hipSetDevice)(self.ordinal as c_int) };
        self.check(code, "hipSetDevice")
    }

    /// Waits until all work queued on the device's stream has finished.
    fn wait(&self) -> Result<()> {
        self.set_device()?;
        // SAFETY: our stream.
        let code = unsafe { (self.hip.hipStreamSynchronize)(self.stream.raw) };
        self.check(code, "hipStreamSynchronize")
    }

    /// Free device memory, if the runtime answers (for out-of-memory errors).
    fn free_bytes(&self) -> Option<u64> {
        self.memory_info().ok().map(|(free, _)| free)
    }

    fn event(&self) -> Result<Event> {
        let mut raw: hb::hipEvent_t = null_mut();
        // SAFETY: writes one handle.
        let code = unsafe { (self.hip.hipEventCreate)(&mut raw) };
        self.check(code, "hipEventCreate")?;
        Ok(Event { raw, hip: self.hip })
    }

    /// The device's rocBLAS handle, created on first use and bound to its stream.
    /// Errors if rocBLAS cannot be loaded or the handle not created.
    pub fn rocblas(&self) -> Result<&RocblasHandle> {
        if let Some(h) = self.rocblas.get() {
            return Ok(h);
        }
        let _init = self.handle_init.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(h) = self.rocblas.get() {
            return Ok(h);
        }
        let h = RocblasHandle::new(self)?;
        Ok(self.rocblas.get_or_init(|| h))
    }

    /// The device's MIOpen handle, created on first use on its stream.
    /// Errors if MIOpen cannot be loaded or the handle not created.
    pub fn miopen(&self) -> Result<&MiopenHandle> {
        if let Some(h) = self.miopen.get() {
            return Ok(h);
        }
        let _init = self.handle_init.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(h) = self.miopen.get() {
            return Ok(h);
        }
        let h = MiopenHandle::new(self)?;
        Ok(self.miopen.get_or_init(|| h))
    }
}

impl GpuBackend for RocmDevice {
    fn info(&self) -> &GpuInfo {
        &self.info
    }

    fn pool(&self) -> &Pool {
        &self.pool
    }

    fn matrix_unit(&self) -> Option<&'static str> {
        self.info
            .code_object
            .as_deref()
            .and_then(ferrocm_kernels::host::matrix_unit_of)
    }

    fn double_buffers_lds(&self) -> bool {
        // Copies into LDS are synchronous here: a second buffer would only
        // cost occupancy. (`gemm_wide_f32`, which the op library takes
        // where this is true, is built empty in the AMD code objects.)
        false
    }

    fn memory_info(&self) -> Result<(u64, u64)> {
        self.set_device()?;
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: writes two integers.
        let code = unsafe { (self.hip.hipMemGetInfo)(&mut free, &mut total) };
        self.check(code, "hipMemGetInfo")?;
        Ok((free as u64, total as u64))
    }

    fn alloc(&self, bytes: usize) -> Result<Box<dyn GpuMemory>> {
        Ok(Box::new(self.alloc_memory(bytes)?))
    }

    unsafe fn memset(&self, dst: u64, byte: u8, len: usize) -> Result<()> {
        // SAFETY: the caller's range.
        unsafe { self.memset_raw(dst, byte, len) }
    }

    unsafe fn copy_htod(&self, dst: u64, src: &[u8]) -> Result<()> {
        // SAFETY: the caller's range.
        unsafe { self.copy_htod_raw(dst, src) }
    }

    unsafe fn copy_htod_async(&self, dst: u64, src: &[u8]) -> Result<()> {
        // SAFETY: the caller's range.
        unsafe { self.copy_htod_async_raw(dst, src) }
    }

    unsafe fn copy_dtoh(&self, src: u64, dst: &mut [u8]) -> Result<()> {
        // SAFETY: the caller's range.
        unsafe { self.copy_dtoh_raw(src, dst) }
    }

    unsafe fn copy_dtod(&self, dst: u64, src: u64, bytes: usize) -> Result<()> {
        // SAFETY: the caller's ranges.
        unsafe { self.copy_dtod_raw(dst, src, bytes) }
    }

    unsafe fn copy_dtoh_queued(
        &self,
        src: u64,
        len: usize,
    ) -> Result<Box<dyn crate::gpu::QueuedRead>> {
        // SAFETY: the caller's range, kept alive until the read is waited.
        unsafe { self.copy_dtoh_queued_raw(src, len) }
    }

    unsafe fn launch(&self, kernel: &KernelInfo, cfg: &LaunchConfig, args: &[u64]) -> Result<()> {
        // SAFETY: the caller's proof (see the trait).
        unsafe { self.launch_raw(kernel, cfg, args) }
    }

    fn synchronize(&self) -> Result<()> {
        self.wait()
    }

    fn time(&self, f: &mut dyn FnMut() -> Result<()>) -> Result<f32> {
        self.set_device()?;
        let start = self.event()?;
        let stop = self.event()?;
        // SAFETY: our events and stream.
        let code = unsafe { (self.hip.hipEventRecord)(start.raw, self.stream.raw) };
        self.check(code, "hipEventRecord")?;
        f()?;
        self.set_device()?;
        // SAFETY: as above.
        let code = unsafe { (self.hip.hipEventRecord)(stop.raw, self.stream.raw) };
        self.check(code, "hipEventRecord")?;
        // SAFETY: as above.
        let code = unsafe { (self.hip.hipEventSynchronize)(stop.raw) };
        self.check(code, "hipEventSynchronize")?;
        let mut ms = 0f32;
        // SAFETY: both events recorded and complete.
        let code = unsafe { (self.hip.hipEventElapsedTime)(&mut ms, start.raw, stop.raw) };
        self.check(code, "hipEventElapsedTime")?;
        Ok(ms)
    }

    fn records_graphs(&self) -> bool {
        self.graphs.is_some()
    }

    fn begin_recording(&self) -> Result<()> {
        self.begin_recording_raw()
    }

    unsafe fn end_recording(
        &self,
        exec: &mut Option<Box<dyn std::any::Any + Send>>,
        launch: bool,
    ) -> Result<crate::graph::GraphLaunch> {
        // SAFETY: the caller's proof (see the trait).
        unsafe { self.end_recording_raw(exec, launch) }
    }

    fn blas(&self) -> Option<&dyn Blas> {
        self.rocblas().ok().map(|h| h as &dyn Blas)
    }

    fn dnn(&self) -> Option<&dyn Dnn> {
        self.miopen().ok().map(|h| h as &dyn Dnn)
    }

    fn libraries(&self) -> Vec<Library> {
        vec![
            Library {
                name: "rocBLAS",
                status: rocblas_found(),
            },
            Library {
                name: "MIOpen",
                status: ffi::miopen()
                    .map(|l| format!("MIOpen ({})", l.found_as))
                    .map_err(String::from),
            },
        ]
    }
}

impl Drop for RocmDevice {
    fn drop(&mut self) {
        // Finish queued work before the handles, module and stream go (field
        // drops follow, on this thread, with this device current). Errors are
        // ignored: nothing useful can be done with them here.
        // SAFETY: plain calls on our stream.
        unsafe {
            (self.hip.hipSetDevice)(self.ordinal as c_int);
            (self.hip.hipStreamSynchronize)(self.stream.raw);
        }
    }
}

impl std::fmt::Debug for RocmDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.label)
    }
}
