//! The ROCm backend (feature `rocm`): HIP devices, memory, streams, kernel
//! launch from the embedded code objects, and rocBLAS / MIOpen handles.
//!
//! # How ROCm is reached
//! The HIP runtime (`libamdhip64`), rocBLAS and MIOpen are opened at run time
//! with `dlopen` (the private `ffi` module of this one), not linked. A
//! binary built with `--features rocm` therefore starts on any machine: with
//! no ROCm installed, [`device_count`] is 0, [`absence_reason`] says why, and
//! `Device::best()` picks the CPU. The C declarations (types, constants,
//! signatures) are rocm-rs 0.5.2's, checked against ours at compile time;
//! rocm-rs's own safe wrappers are not used (several are unsound, see
//! `shared/notes/rocm-rs.md`, and calling them would need link flags that
//! rocm-rs does not emit when built without ROCm).
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
//! compile-checked only; the `on_a_gpu` test in this module exercises all of
//! it and runs when a GPU answers
//! (`cargo test -p ferrocm-host --features rocm rocm::`).
//!
//! # Kernel arguments
//! Launches pass `kernelParams` (an array of pointers, one per argument) to
//! `hipModuleLaunchKernel`, not the `extra` buffer. Both are copied by the
//! runtime before the call returns, but they differ in who decides the
//! layout: with `kernelParams` the runtime copies each value to the offset the
//! code object's own metadata gives for that argument; with `extra` it reads
//! the caller's buffer at those metadata offsets (and ignores
//! `HIP_LAUNCH_PARAM_BUFFER_SIZE`), so any disagreement between our packing
//! and the compiler's layout would silently corrupt arguments. (Read from
//! ROCm's `clr`, `hipamd/src/hip_module.cpp`, `ihipLaunchKernelCommand`; the
//! HIP reference only says `extra` "must be in the memory layout and alignment
//! expected by the kernel" and leaves `kernelParams` undescribed, following
//! CUDA's `cuLaunchKernel`.) The runtime reads one pointer per argument the
//! metadata declares, so before a kernel's first launch its metadata is
//! checked against its [`KernelInfo`] and the layout [`pack_args`] gives
//! (`crate::codeobject::check_args`); a mismatch is an error, not a launch.
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

mod ffi;

use crate::blas::{Gemm, GemmType};
use crate::buffer::Block;
use crate::codeobject::{KernelResources, check_args, parse_code_object};
use crate::device::{GpuInfo, select_code_object};
use crate::error::{Error, Result};
use crate::launch::LaunchConfig;
use crate::memory::Pool;
use ferrocm_kernels::host::{ArgKind, KernelInfo};
use rocm_rs::hip::bindings as hb;
use std::collections::HashMap;
use std::ffi::CString;
use std::os::raw::{c_int, c_void};
use std::ptr::null_mut;
use std::sync::{Mutex, MutexGuard, OnceLock};

/// `hipMemcpyKind` values (`hipMemcpyHostToDevice`, ...), from rocm-rs.
const HOST_TO_DEVICE: hb::hipMemcpyKind = hb::hipMemcpyKind_hipMemcpyHostToDevice;
const DEVICE_TO_HOST: hb::hipMemcpyKind = hb::hipMemcpyKind_hipMemcpyDeviceToHost;
const DEVICE_TO_DEVICE: hb::hipMemcpyKind = hb::hipMemcpyKind_hipMemcpyDeviceToDevice;

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

/// Packs kernel arguments into one kernarg byte buffer.
///
/// Each argument takes [`ArgKind::size`] bytes (pointers, `u64`, `i64`: 8;
/// `u32`, `i32`, `f32`: 4) at the previous end rounded up to its size, holding
/// the low bytes of its 64-bit slot in `raw`, little-endian (the GPU's byte
/// order). The buffer is padded to a multiple of 8 bytes. Returns the buffer and
/// each argument's offset in it. A missing slot packs as 0 and surplus slots
/// are ignored (callers check the count first).
///
/// ```
/// use ferrocm_host::rocm::pack_args;
/// use ferrocm_kernels::host::ArgKind;
/// let (bytes, offsets) = pack_args(&[ArgKind::U32, ArgKind::U64], &[7, 9]);
/// assert_eq!(offsets, vec![0, 8]);
/// assert_eq!(bytes.len(), 16);
/// assert_eq!(bytes[0], 7);
/// assert_eq!(bytes[8], 9);
/// ```
pub fn pack_args(kinds: &[ArgKind], raw: &[u64]) -> (Vec<u8>, Vec<usize>) {
    let mut bytes = Vec::with_capacity(kinds.len() * 8);
    let mut offsets = Vec::with_capacity(kinds.len());
    for (i, kind) in kinds.iter().enumerate() {
        let size = kind.size();
        let offset = bytes.len().next_multiple_of(size);
        bytes.resize(offset, 0);
        let value = raw.get(i).copied().unwrap_or(0);
        bytes.extend_from_slice(&value.to_le_bytes()[..size]);
        offsets.push(offset);
    }
    bytes.resize(bytes.len().next_multiple_of(8), 0);
    (bytes, offsets)
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

/// A loaded code object.
struct Module {
    raw: hb::hipModule_t,
    hip: &'static ffi::Hip,
}

// SAFETY: as for Stream.
unsafe impl Send for Module {}
// SAFETY: as for Stream.
unsafe impl Sync for Module {}

impl Drop for Module {
    fn drop(&mut self) {
        // SAFETY: loaded by hipModuleLoadData, unloaded once. Errors are ignored.
        unsafe { (self.hip.hipModuleUnload)(self.raw) };
    }
}

/// A kernel of the loaded module.
#[derive(Clone, Copy)]
struct Function(hb::hipFunction_t);

// SAFETY: an opaque handle owned by the module (which outlives every use: both
// live in the same RocmDevice); HIP serialises concurrent launches of one
// function itself (see the module docs).
unsafe impl Send for Function {}

/// A HIP event (for timing), destroyed on drop.
struct Event {
    raw: hb::hipEvent_t,
    hip: &'static ffi::Hip,
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: created by hipEventCreate, destroyed once. Errors are ignored.
        unsafe { (self.hip.hipEventDestroy)(self.raw) };
    }
}

/// One chunk of pinned host memory for asynchronous uploads: bytes
/// `0..used` are (or were) sources of queued copies; `done`, once recorded,
/// completes when they have all run.
struct StagingChunk {
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

/// The staging chunks of a device and the one being filled.
#[derive(Default)]
struct Staging {
    chunks: Vec<StagingChunk>,
    current: usize,
}

/// The embedded code object copied to 8-byte-aligned memory: `include_bytes!`
/// data has alignment 1, and the runtime reads ELF headers in place. It must
/// outlive the module loaded from it.
struct Image(Vec<u64>);

impl Image {
    fn new(bytes: &[u8]) -> Self {
        let mut words = vec![0u64; bytes.len().div_ceil(8)];
        bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..bytes.len()].copy_from_slice(bytes);
        Image(words)
    }

    fn as_ptr(&self) -> *const c_void {
        self.0.as_ptr().cast()
    }
}

/// `hipDeviceProp_tR0600` with slack after it, so that a runtime writing a
/// larger struct than the one ferrocm was built against cannot write past it.
#[repr(C)]
struct PaddedProps {
    props: hb::hipDeviceProp_tR0600,
    slack: [u8; 4096],
}

/// One ROCm GPU: its properties, the code object loaded for its arch, one
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
    /// The loaded code object's kernel metadata (argument layouts), or why it
    /// could not be read.
    kernel_meta: std::result::Result<Vec<KernelResources>, String>,
    /// Looked-up kernels by the address of their (static) `KernelInfo`, with
    /// the argument kinds their layout was verified for.
    functions: Mutex<HashMap<usize, (Function, &'static [ArgKind])>>,
    /// The caching allocator and counters of this device.
    pool: Pool<Block>,
    /// Pinned host memory that asynchronous uploads are staged in.
    staging: Mutex<Staging>,
    /// Serialises the lazy creation of the handles below.
    handle_init: Mutex<()>,
    // Drop order is field order: the handles (bound to the stream) go first,
    // then the module, the image it was loaded from, and the stream.
    rocblas: OnceLock<RocblasHandle>,
    miopen: OnceLock<MiopenHandle>,
    module: Module,
    _image: Image,
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
    /// Errors: [`Error::NoGpu`] when ROCm is absent, reports no device or fewer
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

        let built: Vec<&'static str> = ferrocm_kernels::CODE_OBJECTS
            .iter()
            .map(|c| c.arch)
            .collect();
        let no_code_object = || Error::NoCodeObject {
            device: name.clone(),
            arch: arch_full.clone(),
            built: built.join(", "),
        };
        let chosen = select_code_object(&arch_full, &built).ok_or_else(no_code_object)?;
        let code_object = ferrocm_kernels::code_object(chosen).ok_or_else(no_code_object)?;

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
            code_object: Some(chosen.to_string()),
        };

        let mut raw_stream: hb::hipStream_t = null_mut();
        // SAFETY: writes one handle.
        let code = unsafe { (hip.hipStreamCreate)(&mut raw_stream) };
        hip_check(hip, code, "hipStreamCreate", &label)?;
        let stream = Stream {
            raw: raw_stream,
            hip,
        };

        let kernel_meta = parse_code_object(chosen, code_object.bytes).map_err(|e| e.to_string());
        let image = Image::new(code_object.bytes);
        let mut raw_module: hb::hipModule_t = null_mut();
        // SAFETY: `image` is a complete code object and outlives the module
        // (both end up in the RocmDevice, the module dropped first).
        let code = unsafe { (hip.hipModuleLoadData)(&mut raw_module, image.as_ptr()) };
        hip_check(
            hip,
            code,
            &format!("hipModuleLoadData(code object {chosen})"),
            &label,
        )?;
        let module = Module {
            raw: raw_module,
            hip,
        };

        Ok(RocmDevice {
            ordinal,
            info,
            label,
            hip,
            kernel_meta,
            functions: Mutex::new(HashMap::new()),
            pool: Pool::new(),
            staging: Mutex::new(Staging::default()),
            handle_init: Mutex::new(()),
            rocblas: OnceLock::new(),
            miopen: OnceLock::new(),
            module,
            _image: image,
            stream,
        })
    }

    /// The device's ordinal (its HIP device id).
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// Name, arch, compute units, memory, wave size, LDS and the chosen code object.
    pub fn info(&self) -> &GpuInfo {
        &self.info
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

    fn same_device(&self, what: &str, a: &RocmAlloc) -> Result<()> {
        if a.ordinal == self.ordinal {
            Ok(())
        } else {
            Err(Error::DeviceMismatch {
                what: what.into(),
                buffer_device: format!("rocm:{}", a.ordinal),
                device: self.label.clone(),
            })
        }
    }

    /// (free, total) device memory in bytes (`hipMemGetInfo`).
    pub fn memory_info(&self) -> Result<(u64, u64)> {
        self.set_device()?;
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: writes two integers.
        let code = unsafe { (self.hip.hipMemGetInfo)(&mut free, &mut total) };
        self.check(code, "hipMemGetInfo")?;
        Ok((free as u64, total as u64))
    }

    /// Waits until all work queued on the device's stream has finished.
    pub fn synchronize(&self) -> Result<()> {
        self.set_device()?;
        // SAFETY: our stream.
        let code = unsafe { (self.hip.hipStreamSynchronize)(self.stream.raw) };
        self.check(code, "hipStreamSynchronize")
    }

    /// Allocates `bytes` of device memory (`hipMalloc`). A zero-byte request gets
    /// a 1-byte allocation, so every buffer has a distinct, non-null address as
    /// on the other devices. Out of memory is [`Error::OutOfMemory`].
    pub fn alloc(&self, bytes: usize) -> Result<RocmAlloc> {
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
                free: self.memory_info().ok().map(|(free, _)| free),
            });
        }
        self.check(code, "hipMalloc")?;
        Ok(RocmAlloc {
            ptr: p as u64,
            bytes,
            ordinal: self.ordinal,
        })
    }

    /// The caching allocator and counters of this device.
    pub(crate) fn pool(&self) -> &Pool<Block> {
        &self.pool
    }

    /// Sets the first `len` bytes of `a` to `byte` (queued on the stream).
    pub fn memset(&self, a: &RocmAlloc, byte: u8, len: usize) -> Result<()> {
        self.same_device("memset", a)?;
        if len > a.bytes {
            return Err(Error::LengthMismatch {
                what: "memset".into(),
                expected: a.bytes,
                got: len,
            });
        }
        if len == 0 {
            return Ok(());
        }
        self.set_device()?;
        // SAFETY: `a` is a live allocation of this device of `a.bytes` bytes.
        let code = unsafe {
            (self.hip.hipMemsetAsync)(
                a.ptr as *mut c_void,
                c_int::from(byte),
                len,
                self.stream.raw,
            )
        };
        self.check(code, "hipMemsetAsync")
    }

    /// Copies `src` into the first `src.len()` bytes of `dst` and waits for
    /// the copy.
    pub fn copy_htod(&self, dst: &RocmAlloc, src: &[u8]) -> Result<()> {
        self.same_device("copy to device", dst)?;
        if src.len() > dst.bytes {
            return Err(Error::LengthMismatch {
                what: "copy to device".into(),
                expected: dst.bytes,
                got: src.len(),
            });
        }
        if src.is_empty() {
            return Ok(());
        }
        self.set_device()?;
        // SAFETY: `dst` has `src.len()` bytes; `src` stays borrowed until the
        // stream is synchronised below.
        let code = unsafe {
            (self.hip.hipMemcpyAsync)(
                dst.ptr as *mut c_void,
                src.as_ptr().cast(),
                src.len(),
                HOST_TO_DEVICE,
                self.stream.raw,
            )
        };
        self.check(code, "hipMemcpyAsync(host to device)")?;
        // SAFETY: our stream.
        let code = unsafe { (self.hip.hipStreamSynchronize)(self.stream.raw) };
        self.check(code, "hipStreamSynchronize")
    }

    /// Copies the first `dst.len()` bytes of `src` into `dst` after all
    /// queued work, and waits.
    pub fn copy_dtoh(&self, src: &RocmAlloc, dst: &mut [u8]) -> Result<()> {
        self.same_device("copy to host", src)?;
        if dst.len() > src.bytes {
            return Err(Error::LengthMismatch {
                what: "copy to host".into(),
                expected: src.bytes,
                got: dst.len(),
            });
        }
        if dst.is_empty() {
            return Ok(());
        }
        self.set_device()?;
        // SAFETY: `src` has `dst.len()` bytes; `dst` stays borrowed until the
        // stream is synchronised below.
        let code = unsafe {
            (self.hip.hipMemcpyAsync)(
                dst.as_mut_ptr().cast(),
                src.ptr as *const c_void,
                dst.len(),
                DEVICE_TO_HOST,
                self.stream.raw,
            )
        };
        self.check(code, "hipMemcpyAsync(device to host)")?;
        // SAFETY: our stream.
        let code = unsafe { (self.hip.hipStreamSynchronize)(self.stream.raw) };
        self.check(code, "hipStreamSynchronize")
    }

    /// Copies the first `bytes` bytes of `src` into `dst` (queued on the stream).
    pub fn copy_dtod(&self, dst: &RocmAlloc, src: &RocmAlloc, bytes: usize) -> Result<()> {
        self.same_device("device copy", dst)?;
        self.same_device("device copy", src)?;
        if bytes > src.bytes || bytes > dst.bytes {
            return Err(Error::LengthMismatch {
                what: "device copy".into(),
                expected: dst.bytes.min(src.bytes),
                got: bytes,
            });
        }
        if bytes == 0 {
            return Ok(());
        }
        self.set_device()?;
        // SAFETY: both are live allocations of this device of `src.bytes` bytes.
        let code = unsafe {
            (self.hip.hipMemcpyAsync)(
                dst.ptr as *mut c_void,
                src.ptr as *const c_void,
                bytes,
                DEVICE_TO_DEVICE,
                self.stream.raw,
            )
        };
        self.check(code, "hipMemcpyAsync(device to device)")
    }

    /// Copies `src` into the first `src.len()` bytes of `dst` in stream order,
    /// without waiting: the bytes are first copied into pinned staging memory
    /// (a pageable source would make `hipMemcpyAsync` synchronous with the
    /// host), which is reused once an event recorded after its copies says
    /// they ran. A new pinned chunk is allocated only when every chunk still
    /// has copies in flight.
    pub fn copy_htod_async(&self, dst: &RocmAlloc, src: &[u8]) -> Result<()> {
        self.same_device("asynchronous copy to device", dst)?;
        if src.len() > dst.bytes {
            return Err(Error::LengthMismatch {
                what: "asynchronous copy to device".into(),
                expected: dst.bytes,
                got: src.len(),
            });
        }
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
        // recorded after this copy completes; `dst` holds at least that many.
        let code = unsafe {
            (self.hip.hipMemcpyAsync)(
                dst.ptr as *mut c_void,
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

    /// The kernel of the loaded module, looked up once and cached. Before the
    /// first lookup, its argument layout in the code object's metadata is
    /// checked against the one [`pack_args`] produces: `kernelParams` makes
    /// the runtime read one value per argument the metadata declares, so a
    /// kernel whose metadata disagrees with its [`KernelInfo`] is refused
    /// rather than launched.
    fn function(&self, kernel: &KernelInfo) -> Result<Function> {
        let key = kernel as *const KernelInfo as usize;
        let mut cache = self.functions.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((f, args)) = cache.get(&key)
            && *args == kernel.args
        {
            return Ok(*f);
        }
        let mismatch = |detail: String| Error::ArgumentMismatch {
            kernel: kernel.name.into(),
            detail,
        };
        let rows = self.kernel_meta.as_ref().map_err(|e| {
            mismatch(format!(
                "cannot read the argument layout of {}'s code object: {e}",
                self.label
            ))
        })?;
        check_args(rows, kernel).map_err(mismatch)?;
        let c_name = CString::new(kernel.name).map_err(|_| Error::UnknownKernel {
            kernel: kernel.name.into(),
        })?;
        let mut raw: hb::hipFunction_t = null_mut();
        // SAFETY: our module; writes one handle.
        let code =
            unsafe { (self.hip.hipModuleGetFunction)(&mut raw, self.module.raw, c_name.as_ptr()) };
        self.check(code, &format!("hipModuleGetFunction({})", kernel.name))?;
        cache.insert(key, (Function(raw), kernel.args));
        Ok(Function(raw))
    }

    /// Queues kernel `kernel` on the device's stream (`hipModuleLaunchKernel`):
    /// `cfg.grid` workgroups of `cfg.block` workitems with `cfg.lds_bytes` of
    /// dynamic LDS. `raw_args` holds one 64-bit slot per argument (see
    /// [`pack_args`]).
    ///
    /// The slots are not checked against live allocations here: use
    /// [`crate::Device::launch`], which checks every argument against the
    /// kernel's signature and the buffers' devices first. A pointer to memory
    /// the kernel may not touch is a GPU memory fault, which the ROCm runtime
    /// reports by ending the process.
    pub(crate) fn launch(
        &self,
        kernel: &KernelInfo,
        cfg: &LaunchConfig,
        raw_args: &[u64],
    ) -> Result<()> {
        if raw_args.len() != kernel.args.len() {
            return Err(Error::ArgumentMismatch {
                kernel: kernel.name.into(),
                detail: format!(
                    "takes {} arguments, {} given",
                    kernel.args.len(),
                    raw_args.len()
                ),
            });
        }
        self.set_device()?;
        let function = self.function(kernel)?;
        let (mut kernarg, offsets) = pack_args(kernel.args, raw_args);
        let base = kernarg.as_mut_ptr();
        // SAFETY: every offset is inside `kernarg` (each argument has at least
        // 4 bytes there).
        let mut params: Vec<*mut c_void> = offsets
            .iter()
            .map(|&o| unsafe { base.add(o) }.cast())
            .collect();
        // SAFETY: `params` has one pointer per kernel argument, each to a value
        // of the argument's size; HIP copies them before returning.
        let code = unsafe {
            (self.hip.hipModuleLaunchKernel)(
                function.0,
                cfg.grid[0],
                cfg.grid[1],
                cfg.grid[2],
                cfg.block[0],
                cfg.block[1],
                cfg.block[2],
                cfg.lds_bytes,
                self.stream.raw,
                params.as_mut_ptr(),
                null_mut(),
            )
        };
        self.check(code, &format!("hipModuleLaunchKernel({})", kernel.name))
    }

    fn event(&self) -> Result<Event> {
        let mut raw: hb::hipEvent_t = null_mut();
        // SAFETY: writes one handle.
        let code = unsafe { (self.hip.hipEventCreate)(&mut raw) };
        self.check(code, "hipEventCreate")?;
        Ok(Event { raw, hip: self.hip })
    }

    /// Runs `f` (which queues work on this device) between two events recorded
    /// on the stream, waits for the second, and returns the milliseconds
    /// between them: the GPU time of the work `f` queued.
    pub fn time<F: FnOnce() -> Result<()>>(&self, f: F) -> Result<f32> {
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

    /// Runs `g` (validated by [`crate::blas`]) through rocBLAS on the
    /// device's stream; `Ok(false)` when rocBLAS is not available here.
    pub(crate) fn blas_gemm(&self, g: &Gemm, ptrs: [u64; 3]) -> Result<bool> {
        let Ok(h) = self.rocblas() else {
            return Ok(false);
        };
        self.set_device()?;
        h.gemm(g, ptrs, &self.label).map(|()| true)
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

/// Device memory from [`RocmDevice::alloc`], freed (`hipFree`) on drop.
#[derive(Debug)]
pub struct RocmAlloc {
    ptr: u64,
    bytes: usize,
    ordinal: usize,
}

impl RocmAlloc {
    /// The device address.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// The size requested, in bytes (a zero-byte request holds 1 byte).
    pub fn len_bytes(&self) -> usize {
        self.bytes
    }

    /// Ordinal of the device the memory is on.
    pub fn ordinal(&self) -> usize {
        self.ordinal
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

/// Whether rocBLAS loads on this machine: where it was found, or why not.
pub fn rocblas_found() -> std::result::Result<String, String> {
    ffi::rocblas()
        .map(|l| format!("rocBLAS ({})", l.found_as))
        .map_err(String::from)
}

/// A raw rocBLAS handle (a pointer), movable between threads: rocBLAS handles
/// may be used from any thread, one at a time.
struct RawRocblas(rocm_rs::rocblas::ffi::rocblas_handle);

// SAFETY: see above; the mutex in RocblasHandle provides the "one at a time".
unsafe impl Send for RawRocblas {}

/// A rocBLAS handle bound to its device's stream, destroyed with the device.
///
/// rocBLAS handles must not be used by two threads at once, so the raw handle
/// is reached through [`RocblasHandle::lock`].
pub struct RocblasHandle {
    raw: Mutex<RawRocblas>,
    lib: &'static ffi::Rocblas,
}

/// Exclusive use of a [`RocblasHandle`] until dropped.
pub struct RocblasGuard<'a> {
    guard: MutexGuard<'a, RawRocblas>,
}

impl RocblasGuard<'_> {
    /// The `rocblas_handle` for rocBLAS calls (already on the device's stream).
    pub fn raw(&self) -> rocm_rs::rocblas::ffi::rocblas_handle {
        self.guard.0
    }
}

fn rocblas_check(
    lib: &ffi::Rocblas,
    status: rocm_rs::rocblas::ffi::rocblas_status,
    call: &str,
    device: &str,
) -> Result<()> {
    if status == rocm_rs::rocblas::ffi::rocblas_status__rocblas_status_success {
        return Ok(());
    }
    // SAFETY: returns a static string (or null).
    let text = unsafe { ffi::c_text((lib.rocblas_status_to_string)(status)) }.unwrap_or_default();
    Err(Error::Rocm {
        call: call.into(),
        device: device.into(),
        message: format!("{text} ({status})"),
    })
}

impl RocblasHandle {
    fn new(dev: &RocmDevice) -> Result<Self> {
        let lib = ffi::rocblas().map_err(|why| Error::Rocm {
            call: "loading rocBLAS".into(),
            device: dev.label.clone(),
            message: why.into(),
        })?;
        dev.set_device()?;
        let mut raw = null_mut();
        // SAFETY: writes one handle (for the current device, just set).
        let status = unsafe { (lib.rocblas_create_handle)(&mut raw) };
        rocblas_check(lib, status, "rocblas_create_handle", &dev.label)?;
        let handle = RocblasHandle {
            raw: Mutex::new(RawRocblas(raw)),
            lib,
        };
        // SAFETY: our handle and stream (rocm-rs's rocBLAS bindings declare
        // their own, identical, hipStream_t type).
        let status = unsafe { (lib.rocblas_set_stream)(raw, dev.stream.raw.cast()) };
        rocblas_check(lib, status, "rocblas_set_stream", &dev.label)?;
        Ok(handle)
    }

    /// Queues `g` on the handle's stream: `rocblas_sgemm_strided_batched`
    /// for f32, `rocblas_gemm_strided_batched_ex` with f32 compute for f16
    /// and bf16, C in the inputs' type or f32 (C is also D). `ptrs` are A, B and C's first elements; the
    /// caller validated `g` ([`crate::blas`]).
    fn gemm(&self, g: &Gemm, ptrs: [u64; 3], device: &str) -> Result<()> {
        use rocm_rs::rocblas::ffi as rf;
        let op = |t: bool| match t {
            true => rf::rocblas_operation__rocblas_operation_transpose,
            false => rf::rocblas_operation__rocblas_operation_none,
        };
        let (alpha, beta) = (1.0f32, 0.0f32);
        let (m, n, k, batch) = (g.m as i32, g.n as i32, g.k as i32, g.batch as i32);
        let (lda, ldb, ldc) = (g.a.ld as i32, g.b.ld as i32, g.c.ld as i32);
        let (sa, sb, sc) = (g.a.stride as i64, g.b.stride as i64, g.c.stride as i64);
        let p = |i: usize| ptrs[i] as usize as *const c_void;
        let guard = self.lock();
        let (status, call) = match g.dtype {
            // SAFETY: validated dims, leading dims and ranges inside live
            // buffers of this device; alpha/beta are host f32 (the default
            // pointer mode), matching the f32 compute type.
            GemmType::F32 => (
                unsafe {
                    (self.lib.rocblas_sgemm_strided_batched)(
                        guard.raw(),
                        op(g.trans_a),
                        op(g.trans_b),
                        m,
                        n,
                        k,
                        &alpha,
                        p(0).cast(),
                        lda,
                        sa,
                        p(1).cast(),
                        ldb,
                        sb,
                        &beta,
                        ptrs[2] as usize as *mut f32,
                        ldc,
                        sc,
                        batch,
                    )
                },
                "rocblas_sgemm_strided_batched",
            ),
            GemmType::F16 | GemmType::Bf16 => {
                let data_type = |t: GemmType| match t {
                    GemmType::F16 => rf::rocblas_datatype__rocblas_datatype_f16_r,
                    GemmType::Bf16 => rf::rocblas_datatype__rocblas_datatype_bf16_r,
                    GemmType::F32 => rf::rocblas_datatype__rocblas_datatype_f32_r,
                };
                let (ty, c_ty) = (data_type(g.dtype), data_type(g.c_type));
                let f32_r = rf::rocblas_datatype__rocblas_datatype_f32_r;
                // SAFETY: as above; C and D are the same matrix (allowed
                // with ldc == ldd).
                let status = unsafe {
                    (self.lib.rocblas_gemm_strided_batched_ex)(
                        guard.raw(),
                        op(g.trans_a),
                        op(g.trans_b),
                        m,
                        n,
                        k,
                        (&alpha as *const f32).cast(),
                        p(0),
                        ty,
                        lda,
                        sa,
                        p(1),
                        ty,
                        ldb,
                        sb,
                        (&beta as *const f32).cast(),
                        p(2),
                        c_ty,
                        ldc,
                        sc,
                        ptrs[2] as usize as *mut c_void,
                        c_ty,
                        ldc,
                        sc,
                        batch,
                        f32_r,
                        rf::rocblas_gemm_algo__rocblas_gemm_algo_standard,
                        0,
                        0,
                    )
                };
                (status, "rocblas_gemm_strided_batched_ex")
            }
        };
        rocblas_check(self.lib, status, call, device)
    }

    /// Locks the handle for a sequence of rocBLAS calls.
    pub fn lock(&self) -> RocblasGuard<'_> {
        RocblasGuard {
            guard: self.raw.lock().unwrap_or_else(|e| e.into_inner()),
        }
    }
}

impl Drop for RocblasHandle {
    fn drop(&mut self) {
        let raw = self.raw.get_mut().unwrap_or_else(|e| e.into_inner()).0;
        // SAFETY: created by rocblas_create_handle, destroyed once. Errors ignored.
        unsafe { (self.lib.rocblas_destroy_handle)(raw) };
    }
}

/// A raw MIOpen handle (a pointer), movable between threads, used by one at a time.
struct RawMiopen(rocm_rs::miopen::ffi::miopenHandle_t);

// SAFETY: as for RawRocblas.
unsafe impl Send for RawMiopen {}

/// An MIOpen handle created on its device's stream, destroyed with the device.
///
/// MIOpen handles must not be used by two threads at once, so the raw handle
/// is reached through [`MiopenHandle::lock`].
pub struct MiopenHandle {
    raw: Mutex<RawMiopen>,
    lib: &'static ffi::Miopen,
}

/// Exclusive use of a [`MiopenHandle`] until dropped.
pub struct MiopenGuard<'a> {
    guard: MutexGuard<'a, RawMiopen>,
}

impl MiopenGuard<'_> {
    /// The `miopenHandle_t` for MIOpen calls (already on the device's stream).
    pub fn raw(&self) -> rocm_rs::miopen::ffi::miopenHandle_t {
        self.guard.0
    }
}

impl MiopenHandle {
    fn new(dev: &RocmDevice) -> Result<Self> {
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
            raw: Mutex::new(RawMiopen(raw)),
            lib,
        })
    }

    /// Locks the handle for a sequence of MIOpen calls.
    pub fn lock(&self) -> MiopenGuard<'_> {
        MiopenGuard {
            guard: self.raw.lock().unwrap_or_else(|e| e.into_inner()),
        }
    }
}

impl Drop for MiopenHandle {
    fn drop(&mut self) {
        let raw = self.raw.get_mut().unwrap_or_else(|e| e.into_inner()).0;
        // SAFETY: created by miopenCreateWithStream, destroyed once. Errors ignored.
        unsafe { (self.lib.miopenDestroy)(raw) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Arg, Device};

    const PTR: ArgKind = ArgKind::Ptr {
        mutable: false,
        elem_size: 4,
    };
    const PTR_MUT: ArgKind = ArgKind::Ptr {
        mutable: true,
        elem_size: 4,
    };

    #[test]
    fn pack_args_mixed_signature() {
        let kinds = [PTR_MUT, ArgKind::U32, PTR, ArgKind::F32, ArgKind::U64];
        let raw = [
            0x1122_3344_5566_7788,
            7,
            0xdead_beef_0000_1000,
            1.5f32.to_bits() as u64,
            u64::MAX - 1,
        ];
        let (bytes, offsets) = pack_args(&kinds, &raw);
        // u32 at 8, the next pointer rounds 12 up to 16, f32 at 24, u64 at 32.
        assert_eq!(offsets, vec![0, 8, 16, 24, 32]);
        assert_eq!(bytes.len(), 40);
        assert_eq!(&bytes[0..8], &0x1122_3344_5566_7788u64.to_le_bytes());
        assert_eq!(&bytes[8..12], &7u32.to_le_bytes());
        assert_eq!(&bytes[12..16], &[0; 4]);
        assert_eq!(&bytes[16..24], &0xdead_beef_0000_1000u64.to_le_bytes());
        assert_eq!(&bytes[24..28], &1.5f32.to_le_bytes());
        assert_eq!(&bytes[28..32], &[0; 4]);
        assert_eq!(&bytes[32..40], &(u64::MAX - 1).to_le_bytes());
    }

    #[test]
    fn pack_args_packs_4_byte_runs_and_pads_the_end() {
        let kinds = [ArgKind::U32, ArgKind::I32, PTR, ArgKind::F32];
        let raw = [1, (-2i32) as u32 as u64, 0x10, 0.25f32.to_bits() as u64];
        let (bytes, offsets) = pack_args(&kinds, &raw);
        assert_eq!(offsets, vec![0, 4, 8, 16]);
        assert_eq!(bytes.len(), 24);
        assert_eq!(&bytes[4..8], &(-2i32).to_le_bytes());
        assert_eq!(&bytes[16..20], &0.25f32.to_le_bytes());
        assert_eq!(&bytes[20..24], &[0; 4]);
    }

    #[test]
    fn pack_args_takes_the_low_bytes_and_tolerates_a_short_slice() {
        let (bytes, offsets) = pack_args(&[ArgKind::U32, ArgKind::I64], &[0xffff_ffff_0000_0005]);
        assert_eq!(offsets, vec![0, 8]);
        assert_eq!(&bytes[0..4], &5u32.to_le_bytes());
        assert_eq!(&bytes[8..16], &[0; 8]);
        assert_eq!(pack_args(&[], &[1, 2]), (vec![], vec![]));
    }

    #[test]
    fn pack_args_matches_every_kernel_signature() {
        for k in ferrocm_kernels::kernels() {
            let raw: Vec<u64> = (0..k.args.len() as u64).collect();
            let (bytes, offsets) = pack_args(k.args, &raw);
            for (i, (kind, off)) in k.args.iter().zip(&offsets).enumerate() {
                assert_eq!(off % kind.size(), 0, "{}: argument {i} misaligned", k.name);
                assert_eq!(bytes[*off], i as u8, "{}: argument {i}", k.name);
            }
            assert_eq!(bytes.len() % 8, 0);
        }
    }

    /// The layout `pack_args` produces is the one the compiler chose: checked
    /// against the metadata of every embedded code object (real compiler
    /// output, no GPU needed).
    #[test]
    fn pack_args_matches_the_compiled_code_objects() {
        assert!(!ferrocm_kernels::CODE_OBJECTS.is_empty());
        for co in ferrocm_kernels::CODE_OBJECTS {
            let rows = parse_code_object(co.arch, co.bytes).unwrap();
            for k in ferrocm_kernels::kernels() {
                let row = rows
                    .iter()
                    .find(|r| r.kernel == k.name)
                    .unwrap_or_else(|| panic!("{}: {} missing", co.arch, k.name));
                let explicit: Vec<_> = row
                    .args
                    .iter()
                    .filter(|a| !a.value_kind.starts_with("hidden_"))
                    .collect();
                let (_, offsets) = pack_args(k.args, &vec![0; k.args.len()]);
                assert_eq!(explicit.len(), k.args.len(), "{}: {}", co.arch, k.name);
                for (i, ((meta, offset), kind)) in
                    explicit.iter().zip(&offsets).zip(k.args).enumerate()
                {
                    assert_eq!(
                        (meta.offset as usize, meta.size as usize),
                        (*offset, kind.size()),
                        "{}: {} argument {i}",
                        co.arch,
                        k.name
                    );
                }
            }
        }
    }

    /// On a machine without ROCm (this workspace's CI): no devices, a reason,
    /// errors instead of panics, and the CPU as the best device.
    #[test]
    fn without_rocm_there_is_no_rocm_device_and_best_falls_back() {
        let reason = absence_reason();
        assert!(!reason.is_empty());
        eprintln!("absence_reason: {reason}");
        if ffi::hip().is_err() {
            assert_eq!(device_count(), 0);
            assert!(reason.contains("libamdhip64"), "{reason}");
        }
        if device_count() == 0 {
            match RocmDevice::new(0) {
                Err(Error::NoGpu { reason }) => assert!(!reason.is_empty()),
                Err(Error::Rocm { .. }) => {}
                Err(e) => panic!("unexpected error: {e}"),
                Ok(d) => panic!("a device without devices: {d:?}"),
            }
            assert!(matches!(
                Device::rocm(0),
                Err(Error::NoGpu { .. } | Error::Rocm { .. })
            ));
            // No ROCm device: `best` falls back (to a CUDA GPU when one
            // answers, else the CPU) and never picks ROCm.
            let best = Device::best();
            assert!(!best.to_string().starts_with("rocm"), "{best}");
            if std::env::var_os("FERROCM_DEVICE").is_none() {
                #[cfg(feature = "cuda")]
                let cuda = crate::cuda::device_count() > 0;
                #[cfg(not(feature = "cuda"))]
                let cuda = false;
                if !cuda {
                    assert_eq!(best, Device::Cpu);
                    assert!(crate::device::gpus().is_err());
                }
            }
        }
    }

    #[test]
    fn an_ordinal_past_the_last_device_is_no_gpu() {
        assert!(matches!(
            RocmDevice::new(usize::MAX),
            Err(Error::NoGpu { .. })
        ));
        assert!(matches!(
            RocmDevice::new(device_count()),
            Err(Error::NoGpu { .. })
        ));
    }

    /// Everything that needs a GPU. Skipped (with a note) when none answers,
    /// as on this workspace's CI; the first run on an AMD GPU checks the whole
    /// backend against the CPU.
    #[test]
    fn on_a_gpu() {
        if device_count() == 0 {
            eprintln!("on_a_gpu: skipped, no ROCm GPU ({})", absence_reason());
            return;
        }
        let dev = match RocmDevice::new(0) {
            Ok(d) => d,
            // A GPU this build has no code object for is reported, not failed.
            Err(e @ Error::NoCodeObject { .. }) => {
                eprintln!("on_a_gpu: skipped: {e}");
                return;
            }
            Err(e) => panic!("{e}"),
        };
        let info = dev.info().clone();
        eprintln!("on_a_gpu: {info:?}");
        assert!(info.wave_size == 32 || info.wave_size == 64);
        assert!(info.compute_units > 0 && info.total_memory > 0 && info.max_lds_bytes >= 32 * 1024);

        // Memory: zero-byte, memset, round trips, device copies, length checks.
        let empty = dev.alloc(0).unwrap();
        assert_ne!(empty.ptr(), 0);
        dev.copy_htod(&empty, &[]).unwrap();
        let data: Vec<u8> = (0..=255).cycle().take(4099).collect();
        let a = dev.alloc(data.len()).unwrap();
        let b = dev.alloc(data.len()).unwrap();
        dev.memset(&a, 0xab, data.len()).unwrap();
        let mut back = vec![0u8; data.len()];
        dev.copy_dtoh(&a, &mut back).unwrap();
        assert!(back.iter().all(|&x| x == 0xab));
        dev.copy_htod(&a, &data).unwrap();
        dev.copy_dtod(&b, &a, data.len()).unwrap();
        dev.copy_dtoh(&b, &mut back).unwrap();
        assert_eq!(back, data);
        // The asynchronous (pinned, staged) upload lands in stream order.
        let rev: Vec<u8> = data.iter().rev().copied().collect();
        dev.copy_htod_async(&a, &rev).unwrap();
        dev.copy_dtoh(&a, &mut back).unwrap();
        assert_eq!(back, rev);
        let longer = vec![0u8; data.len() + 1];
        assert!(matches!(
            dev.copy_htod(&a, &longer),
            Err(Error::LengthMismatch { .. })
        ));
        assert!(matches!(
            dev.copy_dtod(&a, &empty, data.len()),
            Err(Error::LengthMismatch { .. })
        ));
        assert!(matches!(
            dev.alloc(usize::MAX / 2),
            Err(Error::OutOfMemory { .. } | Error::Rocm { .. })
        ));
        dev.synchronize().unwrap();

        // A kernel through the public launch path, against the CPU.
        let gpu = Device::Rocm(std::sync::Arc::new(dev));
        let n = 100_003usize;
        let xs: Vec<f32> = (0..n).map(|i| (i % 1000) as f32 * 0.01 - 5.0).collect();
        let x = gpu.upload(&xs).unwrap();
        let y = gpu.alloc::<f32>(n).unwrap();
        let args = [
            Arg::output(&y),
            Arg::input(&x),
            Arg::U64(n as u64),
            Arg::U32(0),
            Arg::Null,
            Arg::U64(0),
            Arg::U64(0),
            Arg::U64(0),
            Arg::U64(0),
            Arg::F32(0.0),
        ];
        let Device::Rocm(dev) = &gpu else {
            unreachable!()
        };
        let ms = dev
            .time(|| {
                gpu.launch(
                    "unary_exp_f32",
                    crate::LaunchConfig::linear(n as u64, 256),
                    &args,
                )
            })
            .unwrap();
        eprintln!("on_a_gpu: unary_exp_f32 over {n} elements: {ms:.3} ms");
        assert!(ms >= 0.0);
        let got = y.download().unwrap();
        for (i, (g, x)) in got.iter().zip(&xs).enumerate() {
            let want = x.exp();
            assert!(
                (g - want).abs() <= 1e-5 * want.abs().max(1.0),
                "element {i}: {g} vs {want}"
            );
        }

        // Library handles, when the libraries are installed.
        if ffi::rocblas().is_ok() {
            let h = dev.rocblas().unwrap();
            assert!(!h.lock().raw().is_null());
            assert!(std::ptr::eq(h, dev.rocblas().unwrap()));
        }
        if ffi::miopen().is_ok() {
            assert!(!dev.miopen().unwrap().lock().raw().is_null());
        }
        // Used from another thread.
        let dev2 = dev.clone();
        std::thread::spawn(move || dev2.synchronize().unwrap())
            .join()
            .unwrap();
    }
}
