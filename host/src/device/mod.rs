//! Devices: the CPU, the SIMT emulator, ROCm GPUs and CUDA GPUs, and what
//! every device has: memory from its caching allocator ([`buffer`]), typed
//! kernel arguments ([`args`]), one checked launch path ([`launch`]), the
//! status words kernels report faults in ([`fault`]), and the vendor
//! libraries behind one checked entry each ([`libraries`]).
//!
//! A GPU is reached through its [`GpuBackend`]: [`Device::gpu`] is the one
//! place that maps a device to it; everything else here is written once for
//! every backend.

pub mod args;
pub mod buffer;
pub mod fault;
pub mod launch;
mod libraries;

use crate::emulator::{EmulatorConfig, WaveSize};
use crate::error::{Error, Result};
use crate::gpu::{GpuBackend, GpuInfo};
use crate::memory::{MemoryStats, Pool};
use std::fmt;
#[cfg(any(feature = "rocm", feature = "cuda"))]
use std::sync::Arc;

pub use crate::gpu::{generic_family, select_code_object};

/// Where buffers live and kernels run.
///
/// - `Cpu`: host memory; ops run their native CPU implementations.
/// - `Emulator`: host memory with red zones; kernels run in the SIMT emulator,
///   the very same functions that are compiled for the GPU.
/// - `Rocm`: an AMD GPU through HIP (feature `rocm`).
/// - `Cuda`: an NVIDIA GPU through the CUDA driver (feature `cuda`), running
///   the same kernels compiled to PTX.
///
/// Devices parse from their names (`cpu`, `emulator`, `emulator:64`,
/// `rocm:1`, `cuda:0`; see [`Device::from_str`](std::str::FromStr)).
///
/// ```
/// use ferrocm_host::Device;
/// use ferrocm_host::WaveSize;
/// let emu = Device::emulator(WaveSize::Wave64);
/// assert_eq!(emu.wave_size(), Some(64));
/// assert_eq!(Device::Cpu.to_string(), "cpu");
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub enum Device {
    /// The host CPU.
    Cpu,
    /// The CPU SIMT emulator.
    Emulator(EmulatorConfig),
    /// A ROCm GPU.
    #[cfg(feature = "rocm")]
    Rocm(Arc<crate::rocm::RocmDevice>),
    /// A CUDA GPU.
    #[cfg(feature = "cuda")]
    Cuda(Arc<crate::cuda::CudaDevice>),
}

impl Device {
    /// An emulator with the given wave size and the sanitizer on.
    ///
    /// ```
    /// use ferrocm_host::{Device, WaveSize};
    /// let emu = Device::emulator(WaveSize::Wave32);
    /// assert_eq!(emu.wave_size(), Some(32));
    /// // From a number or a name, a wrong width is an error:
    /// assert!(WaveSize::try_from(48).is_err());
    /// assert!("emulator:48".parse::<Device>().is_err());
    /// ```
    ///
    /// A plain number does not compile (no width is assumed):
    ///
    /// ```compile_fail
    /// let _ = ferrocm_host::Device::emulator(48);
    /// ```
    pub fn emulator(wave_size: WaveSize) -> Device {
        Self::emulator_with(EmulatorConfig::new(wave_size))
    }

    /// An emulator with explicit settings (see [`EmulatorConfig`]).
    pub fn emulator_with(config: EmulatorConfig) -> Device {
        Device::Emulator(config)
    }

    /// ROCm GPU number `ordinal`.
    ///
    /// ```
    /// // Without a GPU (or without the `rocm` feature) this is an error, never a panic.
    /// let _ = ferrocm_host::Device::rocm(0);
    /// ```
    ///
    /// # Errors
    /// [`Error::RocmNotCompiled`] without the `rocm` feature; [`Error::NoGpu`]
    /// when the runtime is missing or has fewer GPUs; [`Error::NoCodeObject`]
    /// when this build has no code object for the GPU's arch; [`Error::Rocm`]
    /// when a runtime call fails.
    pub fn rocm(ordinal: usize) -> Result<Device> {
        #[cfg(feature = "rocm")]
        {
            Ok(Device::Rocm(rocm_device(ordinal)?))
        }
        #[cfg(not(feature = "rocm"))]
        {
            let _ = ordinal;
            Err(Error::RocmNotCompiled)
        }
    }

    /// CUDA GPU number `ordinal`.
    ///
    /// ```
    /// // Without a GPU (or without the `cuda` feature) this is an error, never a panic.
    /// let _ = ferrocm_host::Device::cuda(0);
    /// ```
    ///
    /// # Errors
    /// [`Error::CudaNotCompiled`] without the `cuda` feature; [`Error::NoGpu`]
    /// when the driver is missing or has fewer GPUs; [`Error::NoCodeObject`]
    /// when this build embeds no PTX; [`Error::Cuda`] when a driver call fails
    /// (the PTX compile included).
    pub fn cuda(ordinal: usize) -> Result<Device> {
        #[cfg(feature = "cuda")]
        {
            Ok(Device::Cuda(cuda_device(ordinal)?))
        }
        #[cfg(not(feature = "cuda"))]
        {
            let _ = ordinal;
            Err(Error::CudaNotCompiled)
        }
    }

    /// The device `FERROCM_DEVICE` names when it is set (an error if that
    /// device does not parse or does not answer), else the first that answers
    /// of a ROCm GPU, a CUDA GPU, the CPU.
    ///
    /// ```
    /// let d = ferrocm_host::Device::best_or_err().unwrap_or(ferrocm_host::Device::Cpu);
    /// println!("running on {d}");
    /// ```
    ///
    /// # Errors
    /// The last GPU backend's reason ([`Error::NoGpu`] and friends, as
    /// [`Device::rocm`] and [`Device::cuda`]) when no GPU opens; use
    /// [`Device::best`] for the CPU fallback.
    pub fn best_or_err() -> Result<Device> {
        if let Ok(name) = std::env::var("FERROCM_DEVICE")
            && !name.trim().is_empty()
        {
            return name.parse::<Device>().map_err(|e| match e {
                Error::UnknownDevice { name, detail } => Error::UnknownDevice {
                    name,
                    detail: format!("{detail} (from FERROCM_DEVICE)"),
                },
                other => other,
            });
        }
        Ok(Self::rocm(0)
            .or_else(|_| Self::cuda(0))
            .unwrap_or(Device::Cpu))
    }

    /// [`Device::best_or_err`], falling back to the CPU (with a message on
    /// stderr) when `FERROCM_DEVICE` names a device that is not there.
    ///
    /// ```
    /// let d = ferrocm_host::Device::best();
    /// println!("running on {d}");
    /// ```
    pub fn best() -> Device {
        Self::best_or_err().unwrap_or_else(|e| {
            eprintln!("ferrocm: {e}; using the cpu");
            Device::Cpu
        })
    }

    /// Wave size kernels see on this device (None for the CPU).
    pub fn wave_size(&self) -> Option<u32> {
        match self {
            Device::Emulator(c) => Some(c.wave_size.lanes()),
            _ => self.gpu().map(|g| g.info().wave_size),
        }
    }

    /// The matrix instruction the device layer's `mma` primitive uses in the
    /// code this device runs ([`ferrocm_kernels::host::matrix_unit_of`]:
    /// `"mfma"`, `"wmma11"`, `"wmma12"`, `"sync"`); `None` on the CPU, the
    /// emulator (which runs the primitive's FMA body) and GPUs without one.
    ///
    /// ```
    /// use ferrocm_host::{Device, WaveSize};
    /// assert_eq!(Device::emulator(WaveSize::Wave64).matrix_unit(), None);
    /// ```
    pub fn matrix_unit(&self) -> Option<&'static str> {
        self.gpu().and_then(|g| g.matrix_unit())
    }

    /// Whether this is a ROCm GPU: the code it runs is compiled for AMD, so
    /// the device layer's AMD constants hold there (the emulator and CUDA
    /// run the NVIDIA/host ones).
    ///
    /// ```
    /// use ferrocm_host::{Device, WaveSize};
    /// assert!(!Device::emulator(WaveSize::Wave64).is_rocm());
    /// assert!(!Device::Cpu.is_rocm());
    /// ```
    pub fn is_rocm(&self) -> bool {
        #[cfg(feature = "rocm")]
        {
            matches!(self, Device::Rocm(_))
        }
        #[cfg(not(feature = "rocm"))]
        {
            false
        }
    }

    /// Whether kernels run on this device (emulator or GPU), as opposed to the CPU backend.
    pub fn runs_kernels(&self) -> bool {
        !matches!(self, Device::Cpu)
    }

    /// Whether the sanitizer is on (emulator only).
    pub fn sanitizer(&self) -> bool {
        matches!(self, Device::Emulator(c) if c.sanitize)
    }

    /// Largest LDS a launch may request, in bytes.
    pub fn max_lds_bytes(&self) -> u32 {
        self.gpu().map_or(64 * 1024, |g| g.info().max_lds_bytes)
    }

    /// Waits for all work queued on the device (counted in
    /// [`MemoryStats::synchronizations`]), then reports
    /// a fault a kernel found since the last wait ([`Error::Fault`], see
    /// [`fault`]).
    ///
    /// # Errors
    /// [`Error::Fault`] or [`Error::IdOutOfRange`] when a kernel reported one
    /// since the last wait; [`Error::Rocm`] / [`Error::Cuda`] when the wait
    /// itself fails; on the emulator, what a kernel did wrong
    /// ([`Error::OutOfBoundsAccess`], [`Error::KernelPanic`], ...) comes from
    /// its launch instead.
    pub fn synchronize(&self) -> Result<()> {
        self.pool().count_sync();
        if let Some(gpu) = self.gpu() {
            self.refuse_in_recording("a wait")?;
            let _turn = self.turn();
            gpu.synchronize()?;
        }
        self.check_faults()
    }

    /// Reads and clears the device's fault status words when a launch that
    /// can fault ran since the last read: every wait calls it (see
    /// [`fault`]).
    pub(crate) fn check_faults(&self) -> Result<()> {
        self.take_fault()
    }

    /// Whether kernels that can fetch their next LDS stage while computing
    /// on the last one (two buffers, [`ferrocm_kernels::device::lds_copy_async`])
    /// should: on NVIDIA, whose copies into LDS run on without the
    /// workitems; not on ROCm, where the copies are synchronous and a second
    /// buffer would only cost occupancy. The emulator runs both logics: at
    /// wave 32 as NVIDIA, at wave 64 as AMD's CDNA.
    ///
    /// ```
    /// use ferrocm_host::{Device, WaveSize};
    /// assert!(Device::emulator(WaveSize::Wave32).double_buffers_lds());
    /// assert!(!Device::emulator(WaveSize::Wave64).double_buffers_lds());
    /// assert!(!Device::Cpu.double_buffers_lds());
    /// ```
    pub fn double_buffers_lds(&self) -> bool {
        match self {
            Device::Emulator(c) => c.wave_size == WaveSize::Wave32,
            _ => self.gpu().is_some_and(|g| g.double_buffers_lds()),
        }
    }

    /// Whether the kernels that use the device layer's warpgroup product
    /// (`ferrocm_kernels::mma::wg_mma`: `gemm_wgmma_*`, `conv_wgmma_*`)
    /// should run: on a CUDA GPU of compute capability 9.0 (H100, H200),
    /// whose module is loaded in its sm_90a form for it (`FERROCM_WGMMA=0`
    /// turns that off), and on the emulator where its [`EmulatorConfig`]
    /// says so (by default at wave 32, beside the NVIDIA-like copy stages),
    /// whose body computes the same product from the same LDS tiles.
    ///
    /// ```
    /// use ferrocm_host::{Device, EmulatorConfig, WaveSize};
    /// assert!(Device::emulator(WaveSize::Wave32).warpgroup_mma());
    /// assert!(!Device::emulator(WaveSize::Wave64).warpgroup_mma());
    /// let plain = EmulatorConfig { warpgroup_mma: false, ..EmulatorConfig::new(WaveSize::Wave32) };
    /// assert!(!Device::emulator_with(plain).warpgroup_mma());
    /// assert!(!Device::Cpu.warpgroup_mma());
    /// ```
    pub fn warpgroup_mma(&self) -> bool {
        match self {
            Device::Emulator(c) => c.warpgroup_mma,
            _ => self.gpu().is_some_and(|g| g.warpgroup_mma()),
        }
    }

    /// Whether this is a GPU (ROCm or CUDA).
    pub fn is_gpu(&self) -> bool {
        !matches!(self, Device::Cpu | Device::Emulator(_))
    }

    /// What `ferrocm info` shows about a GPU device (None for the CPU and
    /// the emulator).
    pub fn gpu_info(&self) -> Option<GpuInfo> {
        self.gpu().map(|g| g.info().clone())
    }

    /// (free, total) device memory in bytes as the driver reports it (None
    /// for the host devices).
    ///
    /// # Errors
    /// [`Error::Rocm`] / [`Error::Cuda`] when the driver call fails.
    pub fn memory_info(&self) -> Result<Option<(u64, u64)>> {
        self.gpu().map(|g| g.memory_info()).transpose()
    }

    /// Runs `f`, which queues work on this device, and returns its duration
    /// in milliseconds: between two GPU events on a GPU, by the host clock on
    /// the host devices (whose work is synchronous).
    ///
    /// ```
    /// # use ferrocm_host::WaveSize;
    /// use ferrocm_host::Device;
    /// let dev = Device::emulator(WaveSize::Wave32);
    /// let ms = dev.time(|| dev.upload(&[1u8; 64]).map(drop)).unwrap();
    /// assert!(ms >= 0.0);
    /// ```
    ///
    /// # Errors
    /// What `f` returns, and the device errors of recording and waiting for the
    /// timing events ([`Error::Rocm`] / [`Error::Cuda`]).
    pub fn time<F: FnOnce() -> Result<()>>(&self, f: F) -> Result<f32> {
        match self.gpu() {
            None => {
                let t = std::time::Instant::now();
                f()?;
                Ok(t.elapsed().as_secs_f32() * 1e3)
            }
            Some(gpu) => {
                self.refuse_in_recording("a timing")?;
                let _turn = self.turn();
                let mut f = Some(f);
                gpu.time(&mut || f.take().map_or(Ok(()), |f| f()))
            }
        }
    }

    /// A stable identity for comparisons (two handles on one GPU are the same device).
    pub fn same_device(&self, other: &Device) -> bool {
        self.key() == other.key()
    }

    /// The device's identity: two handles on one GPU have the same key.
    pub(crate) fn key(&self) -> DeviceKey {
        match (self, self.gpu()) {
            (_, Some(gpu)) => DeviceKey::Gpu(gpu.info().backend, gpu.info().ordinal),
            (Device::Emulator(c), None) => DeviceKey::Emulator(*c),
            _ => DeviceKey::Cpu,
        }
    }

    /// The GPU backend of this device: `None` for the Cpu and the emulator.
    /// The one place a device is mapped to its backend; every GPU method of
    /// `Device` goes through it.
    ///
    /// ```
    /// assert!(ferrocm_host::Device::Cpu.gpu().is_none());
    /// ```
    pub fn gpu(&self) -> Option<&dyn GpuBackend> {
        match self {
            Device::Cpu | Device::Emulator(_) => None,
            #[cfg(feature = "rocm")]
            Device::Rocm(r) => Some(&**r),
            #[cfg(feature = "cuda")]
            Device::Cuda(c) => Some(&**c),
        }
    }
}

/// What identifies a device (see [`Device::same_device`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum DeviceKey {
    Cpu,
    Emulator(EmulatorConfig),
    Gpu(&'static str, usize),
}

/// The caches of the host-memory devices: the Cpu, and the emulator per wave
/// size and sanitizer setting (each is its own device).
static HOST_POOLS: [Pool; 5] = [
    Pool::new(),
    Pool::new(),
    Pool::new(),
    Pool::new(),
    Pool::new(),
];

impl Device {
    /// The cache and counters of this device.
    pub(crate) fn pool(&self) -> &Pool {
        match (self, self.gpu()) {
            (_, Some(gpu)) => gpu.pool(),
            (Device::Emulator(c), None) => {
                &HOST_POOLS
                    [1 + (c.wave_size == WaveSize::Wave64) as usize * 2 + c.sanitize as usize]
            }
            _ => &HOST_POOLS[0],
        }
    }

    /// Caps the bytes this device's allocator may hold (live buffers plus its
    /// cache) at `limit`, or lifts the cap (`None`). An allocation past the cap
    /// first empties the cache, then fails with [`Error::OutOfMemory`]. Two
    /// handles on one device share the cap.
    ///
    /// ```
    /// use ferrocm_host::{Device, EmulatorConfig, Error, WaveSize};
    /// let dev = Device::emulator_with(EmulatorConfig { sanitize: false, ..EmulatorConfig::new(WaveSize::Wave64) });
    /// dev.set_memory_limit(Some(dev.memory_stats().bytes_in_use + 4096));
    /// assert!(matches!(dev.alloc::<u8>(1 << 20), Err(Error::OutOfMemory { .. })));
    /// dev.set_memory_limit(None);
    /// assert!(dev.alloc::<u8>(1 << 20).is_ok());
    /// ```
    pub fn set_memory_limit(&self, limit: Option<u64>) {
        self.pool().set_limit(limit)
    }

    /// The cap set by [`Device::set_memory_limit`], if any.
    pub fn memory_limit(&self) -> Option<u64> {
        self.pool().limit()
    }

    /// Memory and launch statistics of this device: bytes in use and cached,
    /// the peak, fresh versus reused allocations, synchronisations, launches.
    /// Two handles on one device share them.
    ///
    /// ```
    /// use ferrocm_host::Device;
    /// let s = Device::Cpu.memory_stats();
    /// assert!(s.peak_bytes_in_use >= s.bytes_in_use);
    /// ```
    pub fn memory_stats(&self) -> MemoryStats {
        self.pool().stats()
    }

    /// Gives every cached (free) block back to the system. Live buffers are
    /// untouched. On a GPU, `hipFree` waits for the device.
    ///
    /// ```
    /// # use ferrocm_host::WaveSize;
    /// use ferrocm_host::Device;
    /// let dev = Device::emulator(WaveSize::Wave32);
    /// drop(dev.alloc::<u8>(100).unwrap());
    /// dev.empty_cache();
    /// assert_eq!(dev.memory_stats().bytes_cached, 0);
    /// ```
    pub fn empty_cache(&self) {
        self.pool().empty()
    }
}

impl PartialEq for Device {
    fn eq(&self, other: &Self) -> bool {
        self.same_device(other)
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self, self.gpu()) {
            (_, Some(gpu)) => {
                let i = gpu.info();
                write!(f, "{}:{} ({}, {})", i.backend, i.ordinal, i.name, i.arch)
            }
            (Device::Emulator(c), None) => write!(
                f,
                "emulator(wave{}{}{})",
                c.wave_size,
                if c.sanitize { ", sanitizer" } else { "" },
                // Named only where it differs from the wave size's default.
                match (
                    c.warpgroup_mma,
                    EmulatorConfig::new(c.wave_size).warpgroup_mma
                ) {
                    (true, false) => ", warpgroup products",
                    (false, true) => ", no warpgroup products",
                    _ => "",
                }
            ),
            _ => write!(f, "cpu"),
        }
    }
}

impl std::str::FromStr for Device {
    type Err = Error;

    /// `cpu`; `emulator` (wave 64, sanitizer on), `emulator:32`,
    /// `emulator:64`, `emulator:32:nosan`; `rocm`, `rocm:N`; `cuda`,
    /// `cuda:N` (a GPU must answer). Case-insensitive.
    ///
    /// ```
    /// use ferrocm_host::Device;
    /// assert_eq!("cpu".parse::<Device>().unwrap(), Device::Cpu);
    /// assert_eq!("emulator:32".parse::<Device>().unwrap().wave_size(), Some(32));
    /// assert!("tpu:0".parse::<Device>().is_err());
    /// assert!("emulator:48".parse::<Device>().is_err());
    /// assert!("emulator:64:nosan:junk".parse::<Device>().is_err());
    /// ```
    /// # use ferrocm_host::WaveSize;
    fn from_str(s: &str) -> Result<Device> {
        let name = s.trim().to_ascii_lowercase();
        let bad = |detail: &str| Error::UnknownDevice {
            name: s.to_string(),
            detail: detail.into(),
        };
        let mut parts = name.split(':');
        let kind = parts.next().unwrap_or("");
        let arg = parts.next();
        let extra = parts.next();
        // At most three parts (`emulator:64:nosan`): anything after them is
        // a mistake, not something to ignore.
        if parts.next().is_some() {
            return Err(bad(
                "too many `:` parts: expected cpu, emulator[:32|:64][:nosan], rocm[:N] or cuda[:N]",
            ));
        }
        let ordinal = |arg: Option<&str>| -> Result<usize> {
            match arg {
                None | Some("") => Ok(0),
                Some(n) => n
                    .parse::<usize>()
                    .map_err(|_| bad("the ordinal after `:` must be a number, as in `cuda:0`")),
            }
        };
        match kind {
            "cpu" if arg.is_none() => Ok(Device::Cpu),
            "emulator" | "emu" => {
                let wave = match arg {
                    None | Some("") => WaveSize::Wave64,
                    Some("32") => WaveSize::Wave32,
                    Some("64") => WaveSize::Wave64,
                    Some(_) => return Err(bad("the emulator's wave size is 32 or 64")),
                };
                let sanitize = match extra {
                    None => true,
                    Some("nosan") => false,
                    Some(_) => return Err(bad("after the wave size only `nosan` is accepted")),
                };
                Ok(Device::emulator_with(EmulatorConfig {
                    sanitize,
                    ..EmulatorConfig::new(wave)
                }))
            }
            "rocm" | "hip" if extra.is_none() => Device::rocm(ordinal(arg)?),
            "cuda" if extra.is_none() => Device::cuda(ordinal(arg)?),
            _ => Err(bad(
                "expected cpu, emulator[:32|:64][:nosan], rocm[:N] or cuda[:N]",
            )),
        }
    }
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// All devices this process can use: the CPU, both emulator wave sizes, and
/// every ROCm and CUDA GPU that answers.
pub fn devices() -> Vec<Device> {
    #[allow(unused_mut)]
    let mut v = vec![
        Device::Cpu,
        Device::emulator(WaveSize::Wave32),
        Device::emulator(WaveSize::Wave64),
    ];
    #[cfg(feature = "rocm")]
    for i in 0..crate::rocm::device_count() {
        if let Ok(d) = Device::rocm(i) {
            v.push(d);
        }
    }
    #[cfg(feature = "cuda")]
    for i in 0..crate::cuda::device_count() {
        if let Ok(d) = Device::cuda(i) {
            v.push(d);
        }
    }
    v
}

/// Info on every ROCm and CUDA GPU, or why there is none (each compiled-in
/// backend's reason; [`Error::RocmNotCompiled`] when neither is compiled in).
///
/// # Errors
/// [`Error::RocmNotCompiled`] when no GPU backend is compiled in; otherwise the
/// backends' reasons for finding no GPU ([`Error::NoGpu`]).
pub fn gpus() -> Result<Vec<GpuInfo>> {
    #[allow(unused_mut)]
    let mut found: Vec<GpuInfo> = Vec::new();
    #[allow(unused_mut)]
    let mut reasons: Vec<String> = Vec::new();
    #[cfg(feature = "rocm")]
    {
        let n = crate::rocm::device_count();
        if n == 0 {
            reasons.push(format!("ROCm: {}", crate::rocm::absence_reason()));
        }
        for i in 0..n {
            found.push(rocm_device(i)?.info().clone());
        }
    }
    #[cfg(feature = "cuda")]
    {
        let n = crate::cuda::device_count();
        if n == 0 {
            reasons.push(format!("CUDA: {}", crate::cuda::absence_reason()));
        }
        for i in 0..n {
            found.push(cuda_device(i)?.info().clone());
        }
    }
    if !found.is_empty() {
        return Ok(found);
    }
    if cfg!(not(any(feature = "rocm", feature = "cuda"))) {
        return Err(Error::RocmNotCompiled);
    }
    Err(Error::NoGpu {
        reason: reasons.join("; "),
    })
}

/// The GPU devices opened so far, one per ordinal: every handle of an
/// ordinal shares its module and stream, so work queued through two handles
/// stays ordered (buffers of equal ordinals are interchangeable, see
/// `same_device`).
#[cfg(any(feature = "rocm", feature = "cuda"))]
type Opened<D> = std::sync::OnceLock<std::sync::Mutex<std::collections::HashMap<usize, Arc<D>>>>;

/// The device of `ordinal` in `opened`, opened with `open` the first time.
#[cfg(any(feature = "rocm", feature = "cuda"))]
fn shared_device<D>(
    opened: &'static Opened<D>,
    ordinal: usize,
    open: impl FnOnce(usize) -> Result<D>,
) -> Result<Arc<D>> {
    let mut map = opened
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(d) = map.get(&ordinal) {
        return Ok(d.clone());
    }
    let d = Arc::new(open(ordinal)?);
    map.insert(ordinal, d.clone());
    Ok(d)
}

/// The one `RocmDevice` of an ordinal.
#[cfg(feature = "rocm")]
fn rocm_device(ordinal: usize) -> Result<Arc<crate::rocm::RocmDevice>> {
    static OPENED: Opened<crate::rocm::RocmDevice> = std::sync::OnceLock::new();
    shared_device(&OPENED, ordinal, crate::rocm::RocmDevice::new)
}

/// The one `CudaDevice` of an ordinal.
#[cfg(feature = "cuda")]
fn cuda_device(ordinal: usize) -> Result<Arc<crate::cuda::CudaDevice>> {
    static OPENED: Opened<crate::cuda::CudaDevice> = std::sync::OnceLock::new();
    shared_device(&OPENED, ordinal, crate::cuda::CudaDevice::new)
}
