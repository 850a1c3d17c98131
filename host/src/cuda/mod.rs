//! The CUDA backend (feature `cuda`): NVIDIA GPUs run the very kernels the
//! AMDGPU code objects hold, compiled from the same sources to PTX
//! ([`ferrocm_kernels::PTX_MODULE`]).
//!
//! The driver (`libcuda.so`) is opened at run time through cudarc's dynamic
//! loading, so a `cuda` build starts on a machine without CUDA: discovery
//! reports the absence ([`absence_reason`]) and [`crate::Device::best`] falls
//! back. Every driver call's status is checked and becomes [`Error::Cuda`]
//! (or [`Error::OutOfMemory`]) naming the call and the device.
//!
//! One device = the primary context of its ordinal, one non-blocking stream
//! on which every copy and launch is queued in order, and the PTX module
//! loaded once (the driver compiles it for the GPU it finds; its JIT cache
//! keeps the result for the next process).

use crate::blas::Gemm;
use crate::buffer::Block;
use crate::cublas::CublasHandle;
use crate::device::GpuInfo;
use crate::error::{Error, Result};
use crate::launch::LaunchConfig;
use crate::memory::Pool;
use cudarc::driver::result as cu;
use cudarc::driver::sys;
use ferrocm_kernels::host::KernelInfo;
use std::collections::HashMap;
use std::ffi::{CString, c_void};
use std::sync::{Mutex, OnceLock};

/// Whether cuBLAS loads on this machine: where it was found, or why not.
///
/// # Errors
/// Why no cuBLAS loads (each path tried and the loader's message).
pub fn cublas_found() -> std::result::Result<String, String> {
    crate::cublas::cublas()
        .map(|l| format!("cuBLAS ({})", l.found_as))
        .map_err(String::from)
}

/// Largest dynamic shared memory a launch may ask for (the emulator's and
/// AMD's LDS limit, so a launch valid on one device is valid on all).
const MAX_DYNAMIC_SHARED: u32 = 64 * 1024;

fn driver_present() -> bool {
    // SAFETY: only tries to open the library.
    unsafe { sys::is_culib_present() }
}

fn init() -> std::result::Result<(), String> {
    if !driver_present() {
        return Err("the CUDA driver (libcuda.so) is not installed".into());
    }
    cu::init().map_err(|e| format!("cuInit failed: {}", describe(&e)))
}

fn describe(e: &cu::DriverError) -> String {
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
struct Handle<T>(T);
// SAFETY: CUDA handles may be used from any thread once the context is current.
unsafe impl<T> Send for Handle<T> {}
unsafe impl<T> Sync for Handle<T> {}

/// One CUDA GPU: context, stream, the loaded PTX module and the caching
/// allocator. Get one through [`crate::Device::cuda`].
pub struct CudaDevice {
    ordinal: usize,
    label: String,
    dev: sys::CUdevice,
    ctx: Handle<sys::CUcontext>,
    stream: Handle<sys::CUstream>,
    module: Handle<sys::CUmodule>,
    /// Kernel parameter sizes per entry, read from the PTX.
    entries: Vec<crate::ptx::PtxEntry>,
    functions: Mutex<HashMap<usize, Handle<sys::CUfunction>>>,
    resources: Mutex<HashMap<usize, KernelResources>>,
    pool: Pool<Block>,
    /// Whether the module was loaded for sm_90 (`griddepcontrol`), so a
    /// launch with [`LaunchConfig::early_start`] may overlap the previous.
    early_start: bool,
    info: GpuInfo,
    /// cuBLAS, created on first use on the stream (or why not). Dropped
    /// first, in `Drop`, while the context is alive.
    cublas: OnceLock<std::result::Result<CublasHandle, String>>,
}

/// Device memory of a [`CudaDevice`] (`cuMemAlloc`), freed on drop.
pub struct CudaAlloc {
    ptr: sys::CUdeviceptr,
    bytes: usize,
    ordinal: usize,
    ctx: Handle<sys::CUcontext>,
}

impl CudaAlloc {
    /// The device address.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }
    /// Size in bytes.
    pub fn len_bytes(&self) -> usize {
        self.bytes
    }
    /// The ordinal of the GPU it is on.
    pub fn ordinal(&self) -> usize {
        self.ordinal
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
    /// Opens CUDA GPU `ordinal`: retains its primary context, creates a
    /// stream and loads the embedded PTX module.
    ///
    /// Errors: [`Error::NoGpu`] when the driver is missing or has fewer GPUs;
    /// [`Error::NoCodeObject`] when this build embeds no PTX
    /// (`FERROCM_PTX=off`); [`Error::Cuda`] when a driver call fails
    /// (including the PTX compile, with the driver's log).
    ///
    /// # Errors
    /// As listed above: [`Error::NoGpu`], [`Error::NoCodeObject`],
    /// [`Error::Cuda`].
    pub fn new(ordinal: usize) -> Result<CudaDevice> {
        init().map_err(|reason| Error::NoGpu { reason })?;
        let count = cu::device::get_count().unwrap_or(0).max(0) as usize;
        if ordinal >= count {
            return Err(Error::NoGpu {
                reason: format!(
                    "CUDA device {ordinal} requested, but the driver reports {count} device(s)"
                ),
            });
        }
        let label = format!("cuda:{ordinal}");
        fn check<T>(
            label: &str,
            r: std::result::Result<T, cu::DriverError>,
            call: &str,
        ) -> Result<T> {
            r.map_err(|e| Error::Cuda {
                call: call.into(),
                device: label.into(),
                message: describe(&e),
            })
        }
        let dev = check(&label, cu::device::get(ordinal as i32), "cuDeviceGet")?;
        // SAFETY: a valid device handle.
        let ctx = check(
            &label,
            unsafe { cu::primary_ctx::retain(dev) },
            "cuDevicePrimaryCtxRetain",
        )?;
        // SAFETY: the context just retained.
        check(
            &label,
            unsafe { cu::ctx::set_current(ctx) },
            "cuCtxSetCurrent",
        )?;
        let attr = |a: sys::CUdevice_attribute, name: &str| -> Result<i32> {
            // SAFETY: a valid device handle.
            check(&label, unsafe { cu::device::get_attribute(dev, a) }, name)
        };
        use sys::CUdevice_attribute as A;
        let major = attr(
            A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
            "cuDeviceGetAttribute(major)",
        )?;
        let minor = attr(
            A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
            "cuDeviceGetAttribute(minor)",
        )?;
        let sms = attr(
            A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
            "cuDeviceGetAttribute(multiprocessors)",
        )?;
        let smem_optin = attr(
            A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
            "cuDeviceGetAttribute(shared memory)",
        )?;
        let warp = attr(
            A::CU_DEVICE_ATTRIBUTE_WARP_SIZE,
            "cuDeviceGetAttribute(warp)",
        )?;
        let name = check(&label, cu::device::get_name(dev), "cuDeviceGetName")?;
        // SAFETY: a valid device handle.
        let total = check(
            &label,
            unsafe { cu::device::total_mem(dev) },
            "cuDeviceTotalMem",
        )?;
        let arch = format!("sm_{major}{minor}");

        let ptx = ferrocm_kernels::PTX_MODULE.ok_or_else(|| Error::NoCodeObject {
            device: label.clone(),
            arch: arch.clone(),
            built: "no PTX module (built with FERROCM_PTX=off)".into(),
        })?;
        let ptx_target: u32 = ptx.target.trim_start_matches("sm_").parse().unwrap_or(0);
        if ((major * 10 + minor) as u32) < ptx_target {
            return Err(Error::NoCodeObject {
                device: label.clone(),
                arch,
                built: format!("PTX for {} and newer", ptx.target),
            });
        }
        let stream = check(
            &label,
            cu::stream::create(cu::stream::StreamKind::NonBlocking),
            "cuStreamCreate",
        )?;
        // On sm_90 and newer, the module with its sm_90 instructions made
        // real (early-start launches); the module as built when that one
        // does not load, so a driver that refuses it costs only the overlap.
        // `FERROCM_EARLY_START=0` keeps the module as built: every launch
        // then waits for the one before it (to rule the overlap out).
        let wanted = std::env::var("FERROCM_EARLY_START").map_or(true, |v| v.trim() != "0");
        let mut sm90_refused = None;
        let sm90 = (wanted && major * 10 + minor >= 90)
            .then(|| crate::ptx::specialise_for_sm90(ptx.text))
            .flatten()
            .and_then(|text| match load_module(&text) {
                Ok(m) => Some(m),
                Err(why) => {
                    sm90_refused = Some(why);
                    None
                }
            });
        let early_start = sm90.is_some();
        let module = match sm90 {
            Some(m) => m,
            None => load_module(ptx.text).map_err(|message| Error::Cuda {
                call: "cuModuleLoadDataEx (PTX JIT)".into(),
                device: label.clone(),
                message,
            })?,
        };
        let info = GpuInfo {
            backend: "cuda",
            ordinal,
            name,
            arch: arch.clone(),
            arch_full: format!("compute capability {major}.{minor}"),
            compute_units: sms.max(0) as u32,
            total_memory: total as u64,
            wave_size: warp.max(0) as u32,
            max_lds_bytes: MAX_DYNAMIC_SHARED.min(smem_optin.max(0) as u32),
            code_object: Some(match (early_start, &sm90_refused) {
                (true, _) => format!("ptx {}, loaded as sm_90 (early-start launches)", ptx.target),
                (false, Some(why)) => format!(
                    "ptx {} (its sm_90 form did not load, so launches do not overlap: {})",
                    ptx.target,
                    why.lines().next().unwrap_or("")
                ),
                (false, None) => format!("ptx {}", ptx.target),
            }),
        };
        Ok(CudaDevice {
            ordinal,
            label,
            dev,
            ctx: Handle(ctx),
            stream: Handle(stream),
            module: Handle(module),
            entries: crate::ptx::entries(ptx.text),
            functions: Mutex::new(HashMap::new()),
            resources: Mutex::new(HashMap::new()),
            pool: Pool::new(),
            early_start,
            info,
            cublas: OnceLock::new(),
        })
    }

    /// The GPU's ordinal.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// Name, compute capability, SMs, memory, warp size.
    pub fn info(&self) -> &GpuInfo {
        &self.info
    }

    /// (free, total) device memory in bytes, from the driver.
    ///
    /// # Errors
    /// [`Error::Cuda`] when `cuMemGetInfo` fails.
    pub fn memory_info(&self) -> Result<(u64, u64)> {
        self.current()?;
        let (free, total) = self.check(cu::mem_get_info(), "cuMemGetInfo")?;
        Ok((free as u64, total as u64))
    }

    pub(crate) fn pool(&self) -> &Pool<Block> {
        &self.pool
    }

    fn check<T>(&self, r: std::result::Result<T, cu::DriverError>, call: &str) -> Result<T> {
        r.map_err(|e| Error::Cuda {
            call: call.into(),
            device: self.label.clone(),
            message: describe(&e),
        })
    }

    /// Makes the device's context current on this thread (every call does:
    /// ops may run on any thread).
    fn current(&self) -> Result<()> {
        // SAFETY: our retained context.
        self.check(
            unsafe { cu::ctx::set_current(self.ctx.0) },
            "cuCtxSetCurrent",
        )
    }

    /// Waits for all work queued on the device's stream.
    ///
    /// # Errors
    /// [`Error::Cuda`] when the stream wait fails (a kernel fault of the
    /// driver's kind surfaces here).
    pub fn synchronize(&self) -> Result<()> {
        self.current()?;
        // SAFETY: our stream.
        self.check(
            unsafe { cu::stream::synchronize(self.stream.0) },
            "cuStreamSynchronize",
        )
    }

    /// `bytes` of device memory (at least 1, so every buffer has its own
    /// address). Out of memory is [`Error::OutOfMemory`] with the free bytes.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] with the free bytes; [`Error::Cuda`] for another
    /// driver failure.
    pub fn alloc(&self, bytes: usize) -> Result<CudaAlloc> {
        self.current()?;
        // SAFETY: plain allocation.
        match unsafe { cu::malloc_sync(bytes.max(1)) } {
            Ok(ptr) => Ok(CudaAlloc {
                ptr,
                bytes,
                ordinal: self.ordinal,
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

    fn fits(&self, what: &str, a: &CudaAlloc, len: usize) -> Result<()> {
        if a.ordinal != self.ordinal {
            return Err(Error::DeviceMismatch {
                what: what.into(),
                buffer_device: format!("cuda:{}", a.ordinal),
                device: self.label.clone(),
            });
        }
        if len > a.bytes {
            return Err(Error::LengthMismatch {
                what: what.into(),
                expected: a.bytes,
                got: len,
            });
        }
        Ok(())
    }

    /// Sets the first `len` bytes of `a` to `byte` (queued).
    ///
    /// # Errors
    /// [`Error::DeviceMismatch`] / [`Error::LengthMismatch`] when `a` is
    /// another GPU's or shorter than `len`; [`Error::Cuda`] when the call
    /// fails.
    pub fn memset(&self, a: &CudaAlloc, byte: u8, len: usize) -> Result<()> {
        self.fits("memset", a, len)?;
        if len == 0 {
            return Ok(());
        }
        self.current()?;
        // SAFETY: `len` bytes of a live allocation.
        self.check(
            unsafe { cu::memset_d8_async(a.ptr, byte, len, self.stream.0) },
            "cuMemsetD8Async",
        )
    }

    /// Copies `src` to the start of `dst` and waits for the copy.
    ///
    /// # Errors
    /// [`Error::DeviceMismatch`] / [`Error::LengthMismatch`] when `dst` is
    /// another GPU's or shorter than `src`; [`Error::Cuda`] when the copy
    /// fails.
    pub fn copy_htod(&self, dst: &CudaAlloc, src: &[u8]) -> Result<()> {
        self.copy_htod_async(dst, src)?;
        self.synchronize()
    }

    /// Copies `src` to the start of `dst`, queued in stream order. From
    /// pageable memory the driver stages the bytes before returning, so
    /// `src` may be dropped at once.
    ///
    /// # Errors
    /// As [`CudaDevice::copy_htod`].
    pub fn copy_htod_async(&self, dst: &CudaAlloc, src: &[u8]) -> Result<()> {
        self.fits("copy to device", dst, src.len())?;
        if src.is_empty() {
            return Ok(());
        }
        self.current()?;
        // SAFETY: `dst` holds `src.len()` bytes.
        self.check(
            unsafe { cu::memcpy_htod_async(dst.ptr, src, self.stream.0) },
            "cuMemcpyHtoDAsync",
        )
    }

    /// Copies the first `dst.len()` bytes of `src` to the host, after the
    /// work queued before it.
    ///
    /// # Errors
    /// [`Error::DeviceMismatch`] / [`Error::LengthMismatch`] when `src` is
    /// another GPU's or shorter than `dst`; [`Error::Cuda`] when the copy
    /// fails.
    pub fn copy_dtoh(&self, src: &CudaAlloc, dst: &mut [u8]) -> Result<()> {
        self.fits("copy to host", src, dst.len())?;
        if dst.is_empty() {
            return Ok(());
        }
        self.current()?;
        // SAFETY: `src` holds `dst.len()` bytes; the stream is synchronised
        // before `dst` is released.
        self.check(
            unsafe { cu::memcpy_dtoh_async(dst, src.ptr, self.stream.0) },
            "cuMemcpyDtoHAsync",
        )?;
        self.synchronize()
    }

    /// Copies `bytes` from `src` to `dst` on the device (queued).
    ///
    /// # Errors
    /// [`Error::DeviceMismatch`] / [`Error::LengthMismatch`] when a buffer is
    /// another GPU's or shorter than `bytes`; [`Error::Cuda`] when the copy
    /// fails.
    pub fn copy_dtod(&self, dst: &CudaAlloc, src: &CudaAlloc, bytes: usize) -> Result<()> {
        self.fits("device copy", dst, bytes)?;
        self.fits("device copy", src, bytes)?;
        if bytes == 0 {
            return Ok(());
        }
        self.current()?;
        // SAFETY: both hold `bytes` bytes.
        self.check(
            unsafe { cu::memcpy_dtod_async(dst.ptr, src.ptr, bytes, self.stream.0) },
            "cuMemcpyDtoDAsync",
        )
    }

    /// The loaded kernel, looked up once: its PTX parameters are checked
    /// against its signature first, and its dynamic shared memory limit is
    /// raised to [`GpuInfo::max_lds_bytes`].
    fn function(&self, kernel: &KernelInfo) -> Result<sys::CUfunction> {
        let key = kernel as *const KernelInfo as usize;
        let mut cache = self.functions.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = cache.get(&key) {
            return Ok(f.0);
        }
        crate::ptx::check_entry(&self.entries, kernel).map_err(|detail| {
            Error::ArgumentMismatch {
                kernel: kernel.name.into(),
                detail,
            }
        })?;
        let name = CString::new(kernel.name).map_err(|_| Error::UnknownKernel {
            kernel: kernel.name.into(),
        })?;
        // SAFETY: our module.
        let f = self.check(
            unsafe { cu::module::get_function(self.module.0, name) },
            &format!("cuModuleGetFunction({})", kernel.name),
        )?;
        // SAFETY: a function of our module.
        self.check(
            unsafe {
                cu::function::set_function_attribute(
                    f,
                    sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    self.info.max_lds_bytes as i32,
                )
            },
            "cuFuncSetAttribute(max dynamic shared memory)",
        )?;
        cache.insert(key, Handle(f));
        Ok(f)
    }

    /// Registers, local (stack) bytes and static shared bytes of a kernel as
    /// the driver compiled it for this GPU.
    ///
    /// # Errors
    /// [`Error::UnknownKernel`] when the module has no such entry;
    /// [`Error::Cuda`] when an attribute query fails.
    pub fn kernel_resources(&self, kernel: &KernelInfo) -> Result<KernelResources> {
        let key = kernel as *const KernelInfo as usize;
        if let Some(r) = self
            .resources
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return Ok(*r);
        }
        self.current()?;
        let f = self.function(kernel)?;
        use sys::CUfunction_attribute as F;
        let get = |a: F, what: &str| {
            // SAFETY: a function of our module.
            self.check(
                unsafe { cu::function::get_function_attribute(f, a) },
                &format!("cuFuncGetAttribute({what})"),
            )
        };
        let r = KernelResources {
            registers: get(F::CU_FUNC_ATTRIBUTE_NUM_REGS, "registers")?.max(0) as u32,
            local_bytes: get(F::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, "local size")?.max(0) as u32,
            static_shared_bytes: get(F::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, "shared size")?.max(0)
                as u32,
            max_threads: get(F::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, "max threads")?.max(0)
                as u32,
        };
        self.resources
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, r);
        Ok(r)
    }

    /// Queues `kernel` on the stream. `raw_args` holds one 64-bit slot per
    /// argument; the driver reads each parameter's size (4 or 8 bytes, checked
    /// against the PTX at the first lookup) from the start of its slot, which
    /// is the value on a little-endian host.
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
        self.current()?;
        let f = self.function(kernel)?;
        let max_threads = self.kernel_resources(kernel)?.max_threads;
        if cfg.block_size() > max_threads as u64 {
            return Err(Error::BadLaunchConfig {
                kernel: kernel.name.into(),
                detail: format!(
                    "block {:?} has {} threads; the driver's compile for {} allows {max_threads}",
                    cfg.block,
                    cfg.block_size(),
                    self.info.arch
                ),
            });
        }
        let mut slots: Vec<u64> = raw_args.to_vec();
        let mut params: Vec<*mut c_void> = slots
            .iter_mut()
            .map(|s| s as *mut u64 as *mut c_void)
            .collect();
        if cfg.early_start && self.early_start {
            return self.launch_early(kernel, f, cfg, &mut params);
        }
        // SAFETY: one pointer per parameter, each to 8 readable bytes; the
        // driver copies the values before returning.
        let r = unsafe {
            cu::launch_kernel(
                f,
                (cfg.grid[0], cfg.grid[1], cfg.grid[2]),
                (cfg.block[0], cfg.block[1], cfg.block[2]),
                cfg.lds_bytes,
                self.stream.0,
                &mut params,
            )
        };
        self.check(r, &format!("cuLaunchKernel({})", kernel.name))
    }

    /// Queues `kernel` as a programmatic dependent launch
    /// (`CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION`): its
    /// workgroups may be scheduled before the previous kernel on the stream
    /// has finished, and wait for it in `wait_prior_grids` (the promise
    /// [`LaunchConfig::early_start`] makes).
    fn launch_early(
        &self,
        kernel: &KernelInfo,
        f: sys::CUfunction,
        cfg: &LaunchConfig,
        params: &mut [*mut c_void],
    ) -> Result<()> {
        // SAFETY: all-zero is a valid attribute (id 0, value bytes 0).
        let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
        attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr.value.programmaticStreamSerializationAllowed = 1;
        let config = sys::CUlaunchConfig {
            gridDimX: cfg.grid[0],
            gridDimY: cfg.grid[1],
            gridDimZ: cfg.grid[2],
            blockDimX: cfg.block[0],
            blockDimY: cfg.block[1],
            blockDimZ: cfg.block[2],
            sharedMemBytes: cfg.lds_bytes,
            hStream: self.stream.0,
            attrs: &mut attr,
            numAttrs: 1,
        };
        // SAFETY: the config and its one attribute outlive the call; one
        // pointer per parameter as in `launch`. cuLaunchKernelEx is in
        // every driver that runs sm_90 (CUDA 11.8 and newer).
        let r =
            unsafe { sys::cuLaunchKernelEx(&config, f, params.as_mut_ptr(), std::ptr::null_mut()) };
        self.check(r.result(), &format!("cuLaunchKernelEx({})", kernel.name))
    }

    /// The device's cuBLAS handle (created at first use, bound to the
    /// device's stream), or why there is none.
    ///
    /// # Errors
    /// Why cuBLAS is not available (not found, or the handle could not be
    /// created on the stream).
    pub fn cublas(&self) -> std::result::Result<&CublasHandle, String> {
        self.cublas
            .get_or_init(|| {
                self.current().map_err(|e| e.to_string())?;
                CublasHandle::new(self.stream.0.cast(), &self.label).map_err(|e| e.to_string())
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Runs `g` (validated by [`crate::blas`]) through cuBLAS on the
    /// device's stream; `Ok(false)` when cuBLAS is not available here.
    pub(crate) fn blas_gemm(&self, g: &Gemm, ptrs: [u64; 3]) -> Result<bool> {
        let Ok(h) = self.cublas() else {
            return Ok(false);
        };
        self.current()?;
        h.gemm(g, ptrs, &self.label).map(|()| true)
    }

    /// Runs `f` (which queues work on this device) between two events and
    /// returns the GPU milliseconds between them.
    ///
    /// # Errors
    /// What `f` returns; [`Error::Cuda`] when an event call fails.
    pub fn time<F: FnOnce() -> Result<()>>(&self, f: F) -> Result<f32> {
        self.current()?;
        let flags = sys::CUevent_flags::CU_EVENT_DEFAULT;
        let start = Event(self.check(cu::event::create(flags), "cuEventCreate")?);
        let stop = Event(self.check(cu::event::create(flags), "cuEventCreate")?);
        // SAFETY: our events and stream.
        self.check(
            unsafe { cu::event::record(start.0, self.stream.0) },
            "cuEventRecord",
        )?;
        f()?;
        self.current()?;
        // SAFETY: as above.
        unsafe {
            self.check(cu::event::record(stop.0, self.stream.0), "cuEventRecord")?;
            self.check(cu::event::synchronize(stop.0), "cuEventSynchronize")?;
            self.check(cu::event::elapsed(start.0, stop.0), "cuEventElapsedTime")
        }
    }
}

struct Event(sys::CUevent);
impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: our event.
        let _ = unsafe { cu::event::destroy(self.0) };
    }
}

/// What the driver's compile of one kernel uses on this GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelResources {
    /// Registers per thread.
    pub registers: u32,
    /// Local memory per thread (spills, stack): 0 is the goal.
    pub local_bytes: u32,
    /// Static shared memory (dynamic shared memory comes with the launch).
    pub static_shared_bytes: u32,
    /// Most threads per block the compile allows.
    pub max_threads: u32,
}

/// Loads PTX text, with the driver's JIT error log on failure.
fn load_module(ptx: &str) -> std::result::Result<sys::CUmodule, String> {
    let text = CString::new(ptx).map_err(|_| "the PTX holds a NUL byte".to_string())?;
    const LOG: usize = 16 * 1024;
    let mut error_log = vec![0u8; LOG];
    let mut options = [
        sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
        sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
    ];
    let mut values: [*mut c_void; 2] = [error_log.as_mut_ptr().cast(), LOG as *mut c_void];
    let mut module = std::mem::MaybeUninit::uninit();
    // SAFETY: NUL-terminated PTX; the option values are a buffer and its size.
    let r = unsafe {
        sys::cuModuleLoadDataEx(
            module.as_mut_ptr(),
            text.as_ptr().cast(),
            options.len() as u32,
            options.as_mut_ptr(),
            values.as_mut_ptr(),
        )
    };
    match r.result() {
        // SAFETY: written on success.
        Ok(()) => Ok(unsafe { module.assume_init() }),
        Err(e) => {
            let end = error_log.iter().position(|&b| b == 0).unwrap_or(0);
            Err(format!(
                "{}: {}",
                describe(&e),
                String::from_utf8_lossy(&error_log[..end])
            ))
        }
    }
}

impl Drop for CudaDevice {
    fn drop(&mut self) {
        // Cached blocks go first (they free through this context), then the
        // module, stream and the context reference.
        self.pool.empty();
        // SAFETY: our handles; errors leave nothing to release.
        unsafe {
            let _ = cu::ctx::set_current(self.ctx.0);
            let _ = cu::stream::synchronize(self.stream.0);
            // cuBLAS frees its workspace through this context: before it goes.
            drop(self.cublas.take());
            let _ = cu::module::unload(self.module.0);
            let _ = cu::stream::destroy(self.stream.0);
            let _ = cu::primary_ctx::release(self.dev);
        }
    }
}

impl std::fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CudaDevice({}, {})", self.label, self.info.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without a driver (CI), discovery reports why and never panics; with
    /// one, every reported GPU opens.
    #[test]
    fn discovery_reports_absence_or_opens_every_gpu() {
        let n = device_count();
        if n == 0 {
            assert!(!absence_reason().is_empty());
            match CudaDevice::new(0) {
                Err(Error::NoGpu { reason }) => assert!(!reason.is_empty()),
                Err(e) => panic!("expected NoGpu, got {e}"),
                Ok(_) => panic!("a device opened although none was counted"),
            }
            eprintln!("no CUDA GPU: {}", absence_reason());
            return;
        }
        for i in 0..n {
            let d = CudaDevice::new(i).unwrap();
            assert_eq!(d.info().wave_size, 32);
        }
        assert!(matches!(CudaDevice::new(n), Err(Error::NoGpu { .. })));
    }
}
