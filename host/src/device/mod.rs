//! Devices: the CPU, the SIMT emulator, ROCm GPUs and CUDA GPUs.

use crate::error::{Error, Result};
use std::fmt;
#[cfg(any(feature = "rocm", feature = "cuda"))]
use std::sync::Arc;

/// The wave (warp) width the emulator runs kernels with: the two widths AMD
/// GPUs have, so a wrong width is not representable.
///
/// ```
/// use ferrocm_host::{Device, WaveSize};
/// assert_eq!(WaveSize::Wave64.lanes(), 64);
/// assert_eq!(WaveSize::try_from(32).unwrap(), WaveSize::Wave32);
/// assert!(WaveSize::try_from(48).is_err());
/// let _rdna_like = Device::emulator(WaveSize::Wave32);
/// ```
/// # use ferrocm_host::WaveSize;
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum WaveSize {
    /// 32 lanes (RDNA; also NVIDIA's warp).
    Wave32 = 32,
    /// 64 lanes (CDNA and GCN).
    Wave64 = 64,
}

impl WaveSize {
    /// Both wave sizes, for tests that run on each.
    pub const ALL: [WaveSize; 2] = [WaveSize::Wave32, WaveSize::Wave64];

    /// Lanes per wave: 32 or 64.
    pub const fn lanes(self) -> u32 {
        match self {
            WaveSize::Wave32 => 32,
            WaveSize::Wave64 => 64,
        }
    }
}

impl TryFrom<u32> for WaveSize {
    type Error = Error;
    /// 32 or 64; anything else is [`Error::UnknownDevice`].
    fn try_from(lanes: u32) -> Result<Self> {
        match lanes {
            32 => Ok(WaveSize::Wave32),
            64 => Ok(WaveSize::Wave64),
            _ => Err(Error::UnknownDevice {
                name: format!("emulator:{lanes}"),
                detail: "the emulator's wave size is 32 or 64".into(),
            }),
        }
    }
}

impl fmt::Display for WaveSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.lanes())
    }
}

/// Settings of an emulator device.
///
/// ```
/// use ferrocm_host::{Device, EmulatorConfig, WaveSize};
/// let fast = Device::emulator_with(EmulatorConfig { wave_size: WaveSize::Wave64, sanitize: false });
/// assert_eq!(fast.to_string(), "emulator(wave64)");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EmulatorConfig {
    /// Wave size: 32 (RDNA) or 64 (CDNA).
    pub wave_size: WaveSize,
    /// Red zones, poisoned allocations and LDS bounds checks.
    pub sanitize: bool,
}

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
        Self::emulator_with(EmulatorConfig {
            wave_size,
            sanitize: true,
        })
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
            Device::Cpu => None,
            Device::Emulator(c) => Some(c.wave_size.lanes()),
            #[cfg(feature = "rocm")]
            Device::Rocm(r) => Some(r.info().wave_size),
            #[cfg(feature = "cuda")]
            Device::Cuda(c) => Some(c.info().wave_size),
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
        match self {
            Device::Cpu | Device::Emulator(_) => None,
            #[cfg(feature = "rocm")]
            Device::Rocm(r) => r
                .info()
                .code_object
                .as_deref()
                .and_then(ferrocm_kernels::host::matrix_unit_of),
            #[cfg(feature = "cuda")]
            Device::Cuda(_) => ferrocm_kernels::PTX_MODULE
                .and_then(|p| ferrocm_kernels::host::matrix_unit_of(p.target)),
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
        match self {
            Device::Cpu | Device::Emulator(_) => 64 * 1024,
            #[cfg(feature = "rocm")]
            Device::Rocm(r) => r.info().max_lds_bytes,
            #[cfg(feature = "cuda")]
            Device::Cuda(c) => c.info().max_lds_bytes,
        }
    }

    /// Waits for all work queued on the device (counted in
    /// [`MemoryStats::synchronizations`](crate::MemoryStats)), then reports
    /// a fault a kernel found since the last wait ([`Error::Fault`], see
    /// [`crate::fault`]).
    ///
    /// # Errors
    /// [`Error::Fault`] or [`Error::IdOutOfRange`] when a kernel reported one
    /// since the last wait; [`Error::Rocm`] / [`Error::Cuda`] when the wait
    /// itself fails; on the emulator, what a kernel did wrong
    /// ([`Error::OutOfBoundsAccess`], [`Error::KernelPanic`], ...) comes from
    /// its launch instead.
    pub fn synchronize(&self) -> Result<()> {
        self.pool().count_sync();
        match self {
            Device::Cpu | Device::Emulator(_) => Ok(()),
            #[cfg(feature = "rocm")]
            Device::Rocm(r) => r.synchronize(),
            #[cfg(feature = "cuda")]
            Device::Cuda(c) => c.synchronize(),
        }?;
        self.check_faults()
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
            Device::Cpu => false,
            Device::Emulator(_) => self.wave_size() == Some(32),
            #[cfg(feature = "rocm")]
            Device::Rocm(_) => false,
            #[cfg(feature = "cuda")]
            Device::Cuda(_) => true,
        }
    }

    /// Whether this is a GPU (ROCm or CUDA).
    pub fn is_gpu(&self) -> bool {
        !matches!(self, Device::Cpu | Device::Emulator(_))
    }

    /// What `ferrocm info` shows about a GPU device (None for the CPU and
    /// the emulator).
    pub fn gpu_info(&self) -> Option<GpuInfo> {
        match self {
            Device::Cpu | Device::Emulator(_) => None,
            #[cfg(feature = "rocm")]
            Device::Rocm(r) => Some(r.info().clone()),
            #[cfg(feature = "cuda")]
            Device::Cuda(c) => Some(c.info().clone()),
        }
    }

    /// (free, total) device memory in bytes as the driver reports it (None
    /// for the host devices).
    ///
    /// # Errors
    /// [`Error::Rocm`] / [`Error::Cuda`] when the driver call fails.
    pub fn memory_info(&self) -> Result<Option<(u64, u64)>> {
        match self {
            Device::Cpu | Device::Emulator(_) => Ok(None),
            #[cfg(feature = "rocm")]
            Device::Rocm(r) => r.memory_info().map(Some),
            #[cfg(feature = "cuda")]
            Device::Cuda(c) => c.memory_info().map(Some),
        }
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
        match self {
            Device::Cpu | Device::Emulator(_) => {
                let t = std::time::Instant::now();
                f()?;
                Ok(t.elapsed().as_secs_f32() * 1e3)
            }
            #[cfg(feature = "rocm")]
            Device::Rocm(r) => r.time(f),
            #[cfg(feature = "cuda")]
            Device::Cuda(c) => c.time(f),
        }
    }

    /// A stable identity for comparisons (two handles on one GPU are the same device).
    pub fn same_device(&self, other: &Device) -> bool {
        match (self, other) {
            (Device::Cpu, Device::Cpu) => true,
            (Device::Emulator(a), Device::Emulator(b)) => a == b,
            #[cfg(feature = "rocm")]
            (Device::Rocm(a), Device::Rocm(b)) => a.ordinal() == b.ordinal(),
            #[cfg(feature = "cuda")]
            (Device::Cuda(a), Device::Cuda(b)) => a.ordinal() == b.ordinal(),
            _ => false,
        }
    }
}

impl PartialEq for Device {
    fn eq(&self, other: &Self) -> bool {
        self.same_device(other)
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => write!(f, "cpu"),
            Device::Emulator(c) => {
                write!(
                    f,
                    "emulator(wave{}{})",
                    c.wave_size,
                    if c.sanitize { ", sanitizer" } else { "" }
                )
            }
            #[cfg(feature = "rocm")]
            Device::Rocm(r) => write!(
                f,
                "rocm:{} ({}, {})",
                r.ordinal(),
                r.info().name,
                r.info().arch
            ),
            #[cfg(feature = "cuda")]
            Device::Cuda(c) => write!(
                f,
                "cuda:{} ({}, {})",
                c.ordinal(),
                c.info().name,
                c.info().arch
            ),
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
                    wave_size: wave,
                    sanitize,
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

/// What `ferrocm info` shows about a GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuInfo {
    /// `rocm` or `cuda`.
    pub backend: &'static str,
    /// Ordinal.
    pub ordinal: usize,
    /// Marketing name.
    pub name: String,
    /// gcnArchName without feature suffixes (`gfx942`).
    pub arch: String,
    /// Full gcnArchName (`gfx942:sramecc+:xnack-`).
    pub arch_full: String,
    /// Compute units.
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

/// Picks the embedded code object for a device arch: the exact arch, else its
/// generic family, else None.
///
/// ```
/// use ferrocm_host::device::select_code_object;
/// assert_eq!(select_code_object("gfx1103", &["gfx1100", "gfx11-generic"]), Some("gfx11-generic"));
/// assert_eq!(select_code_object("gfx942:sramecc+:xnack-", &["gfx942"]), Some("gfx942"));
/// assert_eq!(select_code_object("gfx803", &["gfx942"]), None);
/// ```
/// # use ferrocm_host::WaveSize;
pub fn select_code_object<'a>(device_arch: &str, built: &[&'a str]) -> Option<&'a str> {
    let arch = device_arch.split(':').next().unwrap_or(device_arch);
    if let Some(a) = built.iter().find(|a| **a == arch) {
        return Some(a);
    }
    let generic = generic_family(arch)?;
    built.iter().find(|a| **a == generic).copied()
}

/// The generic target whose code object runs on `arch` (ROCm 6.3+ runtimes).
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
