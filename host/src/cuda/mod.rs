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
//! on which every copy and launch is queued in order, and the PTX modules,
//! each kernel compiled by the driver at its first launch from a module cut
//! to it, so a process pays for the kernels it uses (the driver's JIT cache
//! keeps each for the next process).
//!
//! Files: [`driver`] (loading, discovery, errors), this one (the device and
//! its [`GpuBackend`] implementation), `memory` (allocations and copies),
//! `launch` (modules, kernels, launches), `graph` (CUDA graphs), `blas` (cuBLAS), `dnn`
//! (cuDNN, the DNN library's counterpart of MIOpen).

mod blas;
mod dnn;
mod driver;
mod graph;
mod launch;
mod memory;

pub use blas::CublasHandle;
pub use dnn::CudnnHandle;
pub use driver::{absence_reason, device_count};
pub use launch::KernelResources;
pub use memory::CudaAlloc;

use crate::dnn::Dnn;
use crate::error::{Error, Result};
use crate::gpu::{Blas, GpuBackend, GpuInfo, Library};
use crate::launch::LaunchConfig;
use crate::memory::{GpuMemory, Pool};
use cudarc::driver::result as cu;
use cudarc::driver::sys;
use driver::{Event, Handle, describe};
use ferrocm_kernels::KernelModule;
use ferrocm_kernels::host::KernelInfo;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// Whether cuBLAS loads on this machine: where it was found, or why not.
///
/// # Errors
/// Why no cuBLAS loads (each path tried and the loader's message).
pub fn cublas_found() -> std::result::Result<String, String> {
    blas::cublas()
        .map(|l| format!("cuBLAS ({})", l.found_as))
        .map_err(String::from)
}

/// Whether cuDNN loads on this machine: where it was found and its
/// version, or why not.
///
/// # Errors
/// Why no cuDNN loads (each path tried and the loader's message).
pub fn cudnn_found() -> std::result::Result<String, String> {
    dnn::cudnn()
        .map(|l| format!("cuDNN {} ({})", l.version, l.found_as))
        .map_err(String::from)
}

/// A driver call's result, its error as [`Error::Cuda`] naming the call
/// and the device.
fn checked<T>(r: std::result::Result<T, cu::DriverError>, call: &str, device: &str) -> Result<T> {
    r.map_err(|e| Error::Cuda {
        call: call.into(),
        device: device.into(),
        message: describe(&e),
    })
}

/// Largest dynamic shared memory a launch may ask for (the emulator's and
/// AMD's LDS limit, so a launch valid on one device is valid on all).
const MAX_DYNAMIC_SHARED: u32 = 64 * 1024;

/// One CUDA GPU: context, stream, the loaded PTX modules and the caching
/// allocator. Get one through [`crate::Device::cuda`].
pub struct CudaDevice {
    ordinal: usize,
    label: String,
    dev: sys::CUdevice,
    ctx: Handle<sys::CUcontext>,
    stream: Handle<sys::CUstream>,
    /// Compute capability, `major * 10 + minor`.
    cc: u32,
    /// Loaded modules by the address of their (static) `KernelModule`:
    /// ferrocm's from the start, others at the first launch of one of
    /// their kernels.
    modules: Mutex<HashMap<usize, Arc<launch::LoadedModule>>>,
    functions: Mutex<HashMap<usize, launch::Function>>,
    resources: Mutex<HashMap<usize, KernelResources>>,
    pool: Pool,
    /// Page-locked memory queued reads land in, kept for reuse.
    read_slots: crate::gpu::ReadSlots<memory::PinnedSlot>,
    info: GpuInfo,
    /// cuBLAS, created on first use on the stream (or why not). Dropped
    /// first, in `Drop`, while the context is alive.
    cublas: OnceLock<std::result::Result<CublasHandle, String>>,
    /// cuDNN, the same way.
    cudnn: OnceLock<std::result::Result<CudnnHandle, String>>,
    /// ferrocm's module loaded in its sm_90a form: kernels that use the
    /// warpgroup product run here.
    warpgroup_mma: bool,
}

impl CudaDevice {
    /// Opens CUDA GPU `ordinal`: retains its primary context, creates a
    /// stream and prepares ferrocm's PTX module (its kernels compile at
    /// their first launch).
    ///
    /// # Errors
    /// [`Error::NoGpu`] when the driver is missing or has fewer GPUs;
    /// [`Error::NoCodeObject`] when this build embeds no PTX
    /// (`FERROCM_PTX=off`) or only PTX for a newer GPU; [`Error::Cuda`] when
    /// a driver call fails (with `FERROCM_CUDA_MODULES=whole`, including the
    /// PTX compile, with the driver's log; otherwise a kernel's compile
    /// error comes at its first launch).
    pub fn new(ordinal: usize) -> Result<CudaDevice> {
        driver::init().map_err(|reason| Error::NoGpu { reason })?;
        let count = cu::device::get_count().unwrap_or(0).max(0) as usize;
        if ordinal >= count {
            return Err(Error::NoGpu {
                reason: format!(
                    "CUDA device {ordinal} requested, but the driver reports {count} device(s)"
                ),
            });
        }
        let label = format!("cuda:{ordinal}");
        macro_rules! check {
            ($r:expr, $call:expr $(,)?) => {
                checked($r, $call, &label)
            };
        }
        let dev = check!(cu::device::get(ordinal as i32), "cuDeviceGet")?;
        // SAFETY: a valid device handle.
        let ctx = check!(
            unsafe { cu::primary_ctx::retain(dev) },
            "cuDevicePrimaryCtxRetain",
        )?;
        // SAFETY: the context just retained.
        check!(unsafe { cu::ctx::set_current(ctx) }, "cuCtxSetCurrent")?;
        let attr = |a: sys::CUdevice_attribute, name: &str| -> Result<i32> {
            // SAFETY: a valid device handle.
            checked(unsafe { cu::device::get_attribute(dev, a) }, name, &label)
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
        let name = check!(cu::device::get_name(dev), "cuDeviceGetName")?;
        // SAFETY: a valid device handle.
        let total = check!(unsafe { cu::device::total_mem(dev) }, "cuDeviceTotalMem")?;
        let cc = (major * 10 + minor).max(0) as u32;
        let stream = check!(
            cu::stream::create(cu::stream::StreamKind::NonBlocking),
            "cuStreamCreate",
        )?;
        let own = &ferrocm_kernels::KERNEL_MODULE;
        let loaded = launch::load(own, cc, &label)?;
        let info = GpuInfo {
            backend: "cuda",
            ordinal,
            name,
            arch: format!("sm_{major}{minor}"),
            arch_full: format!("compute capability {major}.{minor}"),
            compute_units: sms.max(0) as u32,
            total_memory: total as u64,
            wave_size: warp.max(0) as u32,
            max_lds_bytes: MAX_DYNAMIC_SHARED.min(smem_optin.max(0) as u32),
            code_object: Some(loaded.description.clone()),
        };
        let warpgroup_mma = loaded.sm90a;
        let mut modules = HashMap::new();
        modules.insert(own as *const KernelModule as usize, Arc::new(loaded));
        Ok(CudaDevice {
            ordinal,
            label,
            dev,
            ctx: Handle(ctx),
            stream: Handle(stream),
            cc,
            modules: Mutex::new(modules),
            functions: Mutex::new(HashMap::new()),
            resources: Mutex::new(HashMap::new()),
            pool: Pool::new(),
            read_slots: Default::default(),
            info,
            cublas: OnceLock::new(),
            cudnn: OnceLock::new(),
            warpgroup_mma,
        })
    }

    /// The GPU's ordinal.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    fn check<T>(&self, r: std::result::Result<T, cu::DriverError>, call: &str) -> Result<T> {
        r.map_err(|e| Error::Cuda {
            call: call.into(),
            device: self.label.clone(),
            message: describe(&e),
        })
    }

    /// Makes the device's context current on this thread (every call does:
    /// ops may run on any thread), asking the driver first: reading the
    /// thread's context is cheaper than setting it at every launch.
    fn current(&self) -> Result<()> {
        if let Ok(Some(ctx)) = cu::ctx::get_current()
            && ctx == self.ctx.0
        {
            return Ok(());
        }
        // SAFETY: our retained context.
        self.check(
            unsafe { cu::ctx::set_current(self.ctx.0) },
            "cuCtxSetCurrent",
        )
    }

    /// Waits for all work queued on the device's stream.
    fn wait(&self) -> Result<()> {
        self.current()?;
        // SAFETY: our stream.
        self.check(
            unsafe { cu::stream::synchronize(self.stream.0) },
            "cuStreamSynchronize",
        )
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
                CublasHandle::new(self.stream.0.cast(), self.ctx, &self.label)
                    .map_err(|e| e.to_string())
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The device's cuDNN handle (created at first use, bound to the
    /// device's stream), or why there is none.
    ///
    /// # Errors
    /// Why cuDNN is not available (not found, or the handle could not be
    /// created on the stream).
    pub fn cudnn(&self) -> std::result::Result<&CudnnHandle, String> {
        self.cudnn
            .get_or_init(|| {
                self.current().map_err(|e| e.to_string())?;
                CudnnHandle::new(self.stream.0.cast(), self.ctx, &self.label)
                    .map_err(|e| e.to_string())
            })
            .as_ref()
            .map_err(Clone::clone)
    }
}

impl GpuBackend for CudaDevice {
    fn info(&self) -> &GpuInfo {
        &self.info
    }

    fn pool(&self) -> &Pool {
        &self.pool
    }

    fn matrix_unit(&self) -> Option<&'static str> {
        ferrocm_kernels::PTX_MODULE.and_then(|p| ferrocm_kernels::host::matrix_unit_of(p.target))
    }

    fn double_buffers_lds(&self) -> bool {
        // `cp.async`: copies into shared memory run on without the threads.
        true
    }

    fn warpgroup_mma(&self) -> bool {
        self.warpgroup_mma
    }

    fn memory_info(&self) -> Result<(u64, u64)> {
        self.current()?;
        let (free, total) = self.check(cu::mem_get_info(), "cuMemGetInfo")?;
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
        unsafe { self.copy_htod_raw(dst, src)? };
        self.wait()
    }

    unsafe fn copy_htod_async(&self, dst: u64, src: &[u8]) -> Result<()> {
        // SAFETY: the caller's range; the driver stages pageable memory.
        unsafe { self.copy_htod_raw(dst, src) }
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

    fn records_graphs(&self) -> bool {
        true
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
        self.cublas().ok().map(|h| h as &dyn Blas)
    }

    fn dnn(&self) -> Option<&dyn Dnn> {
        self.cudnn().ok().map(|h| h as &dyn Dnn)
    }

    fn libraries(&self) -> Vec<Library> {
        vec![
            Library {
                name: "cuBLAS",
                status: cublas_found(),
            },
            Library {
                name: "cuDNN",
                status: cudnn_found(),
            },
        ]
    }
}

impl Drop for CudaDevice {
    fn drop(&mut self) {
        // Cached blocks go first (they free through this context), then the
        // modules, stream and the context reference.
        self.pool.empty();
        // SAFETY: our handles; errors leave nothing to release.
        unsafe {
            let _ = cu::ctx::set_current(self.ctx.0);
            let _ = cu::stream::synchronize(self.stream.0);
            memory::free_slots(&self.read_slots);
            // cuBLAS frees its workspace through this context: before it goes.
            drop(self.cublas.take());
            drop(self.cudnn.take());
            for (_, m) in self
                .modules
                .get_mut()
                .unwrap_or_else(|e| e.into_inner())
                .drain()
            {
                m.unload();
            }
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
