//! What a GPU backend is: the one trait ROCm and CUDA implement
//! ([`GpuBackend`]), what `ferrocm info` shows of a GPU ([`GpuInfo`]), and
//! the library hooks a backend offers the op layer ([`Blas`], and
//! [`Dnn`](crate::dnn::Dnn) for convolution and pooling).
//!
//! A backend is the driver side only: it allocates, copies, launches on its
//! stream, times and waits. Everything a caller can get wrong is checked
//! once, above it, for every backend alike: [`Device`](crate::Device)
//! proves every buffer range (a launch's arguments, a copy's lengths, a
//! GEMM's operands) before it calls a backend method, which is why the
//! methods that take device addresses are `unsafe`. [`Device::gpu`](crate::Device::gpu)
//! is the one place that maps a device to its backend.
//!
//! Adding a backend: implement this trait in a folder of its own (as
//! `rocm/` and `cuda/`: driver bindings, device, memory, launch, BLAS, DNN),
//! add a `Device` variant and its arm in `Device::gpu` and in the parser.

use crate::blas::Gemm;
use crate::dnn::Dnn;
use crate::error::Result;
use crate::launch::LaunchConfig;
use crate::memory::{GpuMemory, Pool};
use ferrocm_kernels::host::KernelInfo;
use std::fmt;

#[cfg(any(feature = "cuda", feature = "rocm"))]
mod slots;
#[cfg(any(feature = "cuda", feature = "rocm"))]
pub(crate) use slots::{HostSlot, ReadSlots};

/// What `ferrocm info` shows about a GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuInfo {
    /// `rocm` or `cuda`.
    pub backend: &'static str,
    /// Ordinal.
    pub ordinal: usize,
    /// Marketing name.
    pub name: String,
    /// gcnArchName without feature suffixes (`gfx942`), or `sm_90`.
    pub arch: String,
    /// Full gcnArchName (`gfx942:sramecc+:xnack-`), or the compute capability.
    pub arch_full: String,
    /// Compute units (multiprocessors).
    pub compute_units: u32,
    /// Global memory in bytes.
    pub total_memory: u64,
    /// Wave size.
    pub wave_size: u32,
    /// LDS per workgroup in bytes.
    pub max_lds_bytes: u32,
    /// The embedded code object chosen for it, if any.
    pub code_object: Option<String>,
}

/// A library a backend may open at run time (rocBLAS, MIOpen, cuBLAS,
/// cuDNN): where it was found, or why not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Library {
    /// `rocBLAS`, `MIOpen`, `cuBLAS`, ...
    pub name: &'static str,
    /// `Ok(where it was found)` or `Err(why it did not load)`.
    pub status: std::result::Result<String, String>,
}

/// A copy to the host queued by [`GpuBackend::copy_dtoh_queued`]. Dropping
/// it unwaited waits for the copy (the memory it lands in is reused).
pub trait QueuedRead: Send {
    /// Waits for the copy and returns its bytes.
    ///
    /// # Errors
    /// The driver's error for the wait (a kernel fault of the driver's kind
    /// surfaces here).
    fn wait(self: Box<Self>) -> Result<Vec<u8>>;
}

/// A read that was done when it was queued.
pub(crate) struct ReadDone(pub(crate) Vec<u8>);

impl QueuedRead for ReadDone {
    fn wait(self: Box<Self>) -> Result<Vec<u8>> {
        Ok(self.0)
    }
}

/// A GPU backend: one GPU, its stream, its loaded kernel modules, its
/// caching allocator and its libraries.
///
/// Every method queues work on the device's one stream, in call order,
/// except where it says it waits. Methods taking device addresses are
/// `unsafe`: the caller ([`Device`](crate::Device)) has proved that each
/// address range lies in a live allocation of this device.
pub trait GpuBackend: Send + Sync + fmt::Debug + 'static {
    /// Name, arch, compute units, memory, wave size, LDS, code object.
    fn info(&self) -> &GpuInfo;

    /// The device's caching allocator and counters.
    fn pool(&self) -> &Pool;

    /// The matrix instruction the device layer's `mma` primitive uses in
    /// the code this GPU runs (`"mfma"`, `"wmma11"`, `"wmma12"`, `"sync"`),
    /// if any.
    fn matrix_unit(&self) -> Option<&'static str>;

    /// Whether copies into LDS run on without the workitems, so a kernel's
    /// second LDS stage pays (see `Device::double_buffers_lds`).
    fn double_buffers_lds(&self) -> bool;

    /// Whether kernels that use the device layer's warpgroup product
    /// (`ferrocm_kernels::mma::wg_mma`, Hopper's `wgmma`) run here (see
    /// `Device::warpgroup_mma`).
    fn warpgroup_mma(&self) -> bool {
        false
    }

    /// (free, total) device memory in bytes, from the driver.
    ///
    /// # Errors
    /// The driver's error for the query.
    fn memory_info(&self) -> Result<(u64, u64)>;

    /// `bytes` of fresh device memory (at least 1 byte, so every buffer has
    /// its own address), given back to the driver when dropped.
    ///
    /// # Errors
    /// `Error::OutOfMemory` (with the free bytes where the driver says), or
    /// the driver's error.
    fn alloc(&self, bytes: usize) -> Result<Box<dyn GpuMemory>>;

    /// Sets `len` bytes at `dst` to `byte` (queued).
    ///
    /// # Safety
    /// `dst..dst + len` lies in a live allocation of this device.
    ///
    /// # Errors
    /// The driver's error.
    unsafe fn memset(&self, dst: u64, byte: u8, len: usize) -> Result<()>;

    /// Copies `src` to `dst` after the queued work, and waits for the copy.
    ///
    /// # Safety
    /// `dst..dst + src.len()` lies in a live allocation of this device.
    ///
    /// # Errors
    /// The driver's error.
    unsafe fn copy_htod(&self, dst: u64, src: &[u8]) -> Result<()>;

    /// Copies `src` to `dst` in stream order without waiting (`src` may be
    /// dropped when this returns: the backend stages it).
    ///
    /// # Safety
    /// As [`GpuBackend::copy_htod`].
    ///
    /// # Errors
    /// The driver's error.
    unsafe fn copy_htod_async(&self, dst: u64, src: &[u8]) -> Result<()>;

    /// Copies `dst.len()` bytes from `src` to the host after the queued
    /// work, and waits.
    ///
    /// # Safety
    /// `src..src + dst.len()` lies in a live allocation of this device.
    ///
    /// # Errors
    /// The driver's error (a kernel fault of the driver's kind surfaces here).
    unsafe fn copy_dtoh(&self, src: u64, dst: &mut [u8]) -> Result<()>;

    /// Queues a copy of `len` bytes at `src` to the host behind the queued
    /// work and returns without waiting; [`QueuedRead::wait`] then waits for
    /// that copy only, not for work queued after it. A decode loop reads a
    /// step's token this way while the next step is already queued. The
    /// default copies at once ([`GpuBackend::copy_dtoh`]).
    ///
    /// # Safety
    /// `src..src + len` lies in a live allocation of this device, and the
    /// caller keeps it alive until the copy is waited for (or dropped).
    ///
    /// # Errors
    /// The driver's error.
    unsafe fn copy_dtoh_queued(&self, src: u64, len: usize) -> Result<Box<dyn QueuedRead>> {
        let mut bytes = vec![0u8; len];
        // SAFETY: the caller's range.
        unsafe { self.copy_dtoh(src, &mut bytes)? };
        Ok(Box::new(ReadDone(bytes)))
    }

    /// Copies `bytes` from `src` to `dst` on the device (queued).
    ///
    /// # Safety
    /// Both ranges lie in live allocations of this device.
    ///
    /// # Errors
    /// The driver's error.
    unsafe fn copy_dtod(&self, dst: u64, src: u64, bytes: usize) -> Result<()>;

    /// Queues `kernel` with one 64-bit slot per argument (`args`), loading
    /// the kernel's module first if this is its first launch here, and
    /// checking the compiled kernel's parameters against the signature
    /// before its first launch.
    ///
    /// # Safety
    /// `args` match the kernel's signature (count and kinds), and every
    /// pointer slot addresses the range of a live buffer of this device
    /// the kernel may touch (the launch check proved it).
    ///
    /// # Errors
    /// `Error::NoCodeObject` when the kernel's module has no code for this
    /// GPU; `Error::ArgumentMismatch` when the compiled parameters differ
    /// from the signature; `Error::BadLaunchConfig` for a workgroup the
    /// compiled kernel cannot run; the driver's error.
    unsafe fn launch(&self, kernel: &KernelInfo, cfg: &LaunchConfig, args: &[u64]) -> Result<()>;

    /// Waits until all queued work has finished.
    ///
    /// # Errors
    /// The driver's error (a kernel fault of the driver's kind surfaces here).
    fn synchronize(&self) -> Result<()>;

    /// Runs `f` (which queues work on this device) between two events on the
    /// stream and returns the GPU milliseconds between them.
    ///
    /// # Errors
    /// What `f` returns; the driver's error for the events.
    fn time(&self, f: &mut dyn FnMut() -> Result<()>) -> Result<f32>;

    /// Whether this GPU records its stream's work as graphs
    /// ([`crate::Graph`]); `false` leaves graphs running their work as
    /// queued.
    fn records_graphs(&self) -> bool {
        false
    }

    /// Starts recording: work queued on the stream from now on is recorded
    /// into a graph instead of run, until [`GpuBackend::end_recording`].
    ///
    /// # Errors
    /// The driver's error.
    fn begin_recording(&self) -> Result<()> {
        Err(crate::error::Error::NotRecordable {
            device: self.info().name.clone(),
            what: "a recording",
        })
    }

    /// Ends the recording. With `launch`, launches it on the stream: through
    /// `exec` (the executable graph kept from the last recording, downcast
    /// to this backend's type) updated with the recording's arguments when
    /// it has the same work, else through a graph instantiated for it, which
    /// replaces `exec`. Without, the recording is dropped.
    ///
    /// # Safety
    /// Every buffer the recorded work names is live, or was freed during
    /// the recording into a cache that reuses it only for work queued after
    /// this call.
    ///
    /// # Errors
    /// The driver's error (a recording that an unrecordable call
    /// invalidated fails here); nothing was launched then.
    unsafe fn end_recording(
        &self,
        exec: &mut Option<Box<dyn std::any::Any + Send>>,
        launch: bool,
    ) -> Result<crate::graph::GraphLaunch> {
        let _ = (exec, launch);
        Ok(crate::graph::GraphLaunch::Discarded)
    }

    /// The device's BLAS (rocBLAS, cuBLAS) on its stream, created at first
    /// use; `None` when the library does not load here.
    fn blas(&self) -> Option<&dyn Blas>;

    /// The device's DNN library (MIOpen, cuDNN) on its stream, created at
    /// first use; `None` when it does not load here (our kernels run then).
    fn dnn(&self) -> Option<&dyn Dnn>;

    /// The libraries this backend opens at run time, and whether each loads.
    fn libraries(&self) -> Vec<Library>;
}

/// A vendor BLAS bound to a device's stream.
pub trait Blas: Send + Sync {
    /// `rocBLAS` or `cuBLAS`.
    fn name(&self) -> &'static str;

    /// Queues `g` with A, B and C at the device addresses `ptrs` (their
    /// first elements).
    ///
    /// # Safety
    /// `g` was validated against the buffers `ptrs` point into (see
    /// [`crate::blas`]): every element it touches lies in them.
    ///
    /// # Errors
    /// The library's status, as `Error::Rocm` / `Error::Cuda`.
    unsafe fn gemm(&self, g: &Gemm, ptrs: [u64; 3]) -> Result<()>;
}

/// Picks the embedded code object for a device arch: the exact arch, else its
/// generic family, else None.
///
/// ```
/// use ferrocm_host::gpu::select_code_object;
/// assert_eq!(select_code_object("gfx1103", &["gfx1100", "gfx11-generic"]), Some("gfx11-generic"));
/// assert_eq!(select_code_object("gfx942:sramecc+:xnack-", &["gfx942"]), Some("gfx942"));
/// assert_eq!(select_code_object("gfx803", &["gfx942"]), None);
/// ```
pub fn select_code_object<'a>(device_arch: &str, built: &[&'a str]) -> Option<&'a str> {
    let arch = device_arch.split(':').next().unwrap_or(device_arch);
    if let Some(a) = built.iter().find(|a| **a == arch) {
        return Some(a);
    }
    let generic = generic_family(arch)?;
    built.iter().find(|a| **a == generic).copied()
}

/// The generic target whose code object runs on `arch` (ROCm 6.3+ runtimes).
///
/// ```
/// assert_eq!(ferrocm_host::gpu::generic_family("gfx1101"), Some("gfx11-generic"));
/// ```
pub fn generic_family(arch: &str) -> Option<&'static str> {
    Some(match arch {
        "gfx900" | "gfx902" | "gfx904" | "gfx906" | "gfx909" | "gfx90c" => "gfx9-generic",
        "gfx940" | "gfx941" | "gfx942" | "gfx950" => "gfx9-4-generic",
        "gfx1010" | "gfx1011" | "gfx1012" | "gfx1013" => "gfx10-1-generic",
        "gfx1030" | "gfx1031" | "gfx1032" | "gfx1033" | "gfx1034" | "gfx1035" | "gfx1036" => {
            "gfx10-3-generic"
        }
        "gfx1100" | "gfx1101" | "gfx1102" | "gfx1103" | "gfx1150" | "gfx1151" | "gfx1152"
        | "gfx1153" => "gfx11-generic",
        "gfx1200" | "gfx1201" => "gfx12-generic",
        _ => return None,
    })
}
