//! One launch path for every device that runs kernels.

use crate::buffer::{DeviceBuffer, HostAlloc};
use crate::device::Device;
use crate::error::{Error, Result};
use ferrocm_kernels::host::{ArgKind, KernelInfo, KernelRef};
use std::marker::PhantomData;

/// Most workitems in one workgroup (HIP's limit on every AMD GPU).
pub const MAX_BLOCK_SIZE: u32 = 1024;
/// Largest grid dimension in workgroups we launch along x.
pub const MAX_GRID_X: u32 = (1 << 31) - 1;
/// Largest grid dimension along y and z.
pub const MAX_GRID_YZ: u32 = 65535;

/// Grid (in workgroups), block (workitems per workgroup) and dynamic LDS of a launch.
///
/// ```
/// use ferrocm_host::LaunchConfig;
/// let cfg = LaunchConfig::linear(1000, 256);
/// assert_eq!(cfg.grid, [4, 1, 1]);
/// assert_eq!(cfg.block, [256, 1, 1]);
/// assert!(!cfg.early_start);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchConfig {
    /// Workgroups in x, y, z.
    pub grid: [u32; 3],
    /// Workitems per workgroup in x, y, z.
    pub block: [u32; 3],
    /// Launch-sized LDS in bytes.
    pub lds_bytes: u32,
    /// The kernel calls
    /// [`wait_prior_grids`](ferrocm_kernels::device::wait_prior_grids)
    /// before it touches global memory, so the device may start it before
    /// the kernel queued ahead of it has finished. On an sm_90 or newer
    /// CUDA GPU it is then launched as a programmatic dependent launch:
    /// its workgroups are scheduled while the previous kernel drains (and,
    /// when that kernel called
    /// [`release_dependent_grids`](ferrocm_kernels::device::release_dependent_grids),
    /// as soon as its workgroups are all running) and wait in the kernel,
    /// which saves the gap between two launches (1-2 us on an H100).
    /// Elsewhere the flag changes nothing. The emulator holds the kernel to
    /// the promise: a global access before the wait, or a return without
    /// it, is a kernel panic.
    pub early_start: bool,
}

impl LaunchConfig {
    /// Workgroups covering `n` elements with one workitem each, capped at
    /// 65536 workgroups: kernels use grid-stride loops, so any `n` is covered.
    pub fn linear(n: u64, block: u32) -> Self {
        let groups = n.div_ceil(block.max(1) as u64).clamp(1, 65536) as u32;
        Self {
            grid: [groups, 1, 1],
            block: [block, 1, 1],
            lds_bytes: 0,
            early_start: false,
        }
    }

    /// Workgroups for an elementwise kernel over `n` elements that loops
    /// with [`grid_stride_batched`](ferrocm_kernels::device::grid_stride_batched):
    /// one workitem per [`GRID_STRIDE_BATCH`](ferrocm_kernels::device::GRID_STRIDE_BATCH)
    /// elements, capped at 65536 workgroups.
    ///
    /// ```
    /// use ferrocm_host::LaunchConfig;
    /// assert_eq!(LaunchConfig::elementwise(4096, 256).grid, [4, 1, 1]);
    /// ```
    pub fn elementwise(n: u64, block: u32) -> Self {
        Self::linear(
            n.div_ceil(ferrocm_kernels::device::GRID_STRIDE_BATCH),
            block,
        )
    }

    /// One workgroup per row (capped at 65536: kernels loop over rows), with
    /// `lds_bytes` of LDS.
    pub fn rows(rows: u64, block: u32, lds_bytes: u32) -> Self {
        let groups = rows.clamp(1, 65536) as u32;
        Self {
            grid: [groups, 1, 1],
            block: [block, 1, 1],
            lds_bytes,
            early_start: false,
        }
    }

    /// This launch with [`early_start`](Self::early_start) set: for a
    /// kernel that calls
    /// [`wait_prior_grids`](ferrocm_kernels::device::wait_prior_grids)
    /// before any global access.
    ///
    /// ```
    /// use ferrocm_host::LaunchConfig;
    /// assert!(LaunchConfig::rows(32, 256, 0).starting_early().early_start);
    /// ```
    pub const fn starting_early(mut self) -> Self {
        self.early_start = true;
        self
    }

    /// Workitems per workgroup.
    pub fn block_size(&self) -> u64 {
        self.block.iter().map(|&b| b as u64).product()
    }

    /// Number of workgroups.
    pub fn num_groups(&self) -> u64 {
        self.grid.iter().map(|&g| g as u64).product()
    }
}

/// A buffer argument: the buffer, the element the kernel's pointer starts at
/// and how many elements from there the launch may touch.
///
/// Nothing here is trusted until the launch check (`Device::launch_kernel`) has proved the range
/// inside the buffer (`offset + extent <= len`, checked arithmetic).
#[derive(Clone, Copy)]
pub struct BufferArg<'a> {
    base: u64,
    /// First element the kernel's pointer points at.
    offset: usize,
    /// Elements from `offset` the kernel may access (`None`: to the end).
    extent: Option<usize>,
    /// The buffer's length in elements.
    len: usize,
    pub(crate) elem_size: usize,
    pub(crate) device: &'a Device,
    pub(crate) host: Option<&'a HostAlloc>,
}

impl BufferArg<'_> {
    /// The kernel's pointer (only meaningful once the range is checked).
    pub(crate) fn ptr(&self) -> u64 {
        self.base
            .wrapping_add((self.offset as u64).wrapping_mul(self.elem_size as u64))
    }

    /// Elements the kernel may access from its pointer, when that range
    /// lies inside the buffer.
    pub(crate) fn checked_extent(&self) -> Option<usize> {
        let room = self.len.checked_sub(self.offset)?;
        match self.extent {
            None => Some(room),
            Some(e) if e <= room => Some(e),
            Some(_) => None,
        }
    }
}

/// One kernel argument.
///
/// ```
/// use ferrocm_host::{Arg, Device, WaveSize};
/// let dev = Device::emulator(WaveSize::Wave32);
/// let x = dev.upload(&[1.0f32; 8]).unwrap();
/// let args = [Arg::input(&x), Arg::U64(8), Arg::F32(2.0)];
/// assert_eq!(args.len(), 3);
/// ```
#[derive(Clone, Copy)]
#[non_exhaustive]
pub enum Arg<'a> {
    /// A buffer the kernel reads (`*const T`).
    In(BufferArg<'a>),
    /// A buffer the kernel writes (`*mut T`).
    Out(BufferArg<'a>),
    /// A null pointer (an optional argument left out, e.g. the layout of a contiguous input).
    Null,
    /// `u32` scalar.
    U32(u32),
    /// `i32` scalar.
    I32(i32),
    /// `u64` scalar.
    U64(u64),
    /// `i64` scalar.
    I64(i64),
    /// `f32` scalar.
    F32(f32),
}

impl<'a> Arg<'a> {
    fn buffer<T: bytemuck::Pod>(
        b: &'a DeviceBuffer<T>,
        offset: usize,
        extent: Option<usize>,
    ) -> BufferArg<'a> {
        BufferArg {
            base: b.device_ptr(),
            offset,
            extent,
            len: b.len(),
            elem_size: size_of::<T>(),
            device: b.device(),
            host: b.host_alloc(),
        }
    }

    /// An input buffer: the kernel may read all of it.
    pub fn input<T: bytemuck::Pod>(b: &'a DeviceBuffer<T>) -> Self {
        Arg::In(Self::buffer(b, 0, None))
    }

    /// An input buffer from element `offset` to its end. An offset past the
    /// end is refused when the launch is checked.
    pub fn input_at<T: bytemuck::Pod>(b: &'a DeviceBuffer<T>, offset: usize) -> Self {
        Arg::In(Self::buffer(b, offset, None))
    }

    /// Elements `offset..offset + extent` of an input buffer: the kernel's
    /// pointer is at `offset`, and the launch is refused unless the whole
    /// range lies in the buffer. (In the emulator with the sanitizer on, an
    /// access outside the range is an error.)
    pub fn input_range<T: bytemuck::Pod>(
        b: &'a DeviceBuffer<T>,
        offset: usize,
        extent: usize,
    ) -> Self {
        Arg::In(Self::buffer(b, offset, Some(extent)))
    }

    /// An output buffer: the kernel may write all of it.
    pub fn output<T: bytemuck::Pod>(b: &'a DeviceBuffer<T>) -> Self {
        Arg::Out(Self::buffer(b, 0, None))
    }

    /// An output buffer from element `offset` to its end.
    pub fn output_at<T: bytemuck::Pod>(b: &'a DeviceBuffer<T>, offset: usize) -> Self {
        Arg::Out(Self::buffer(b, offset, None))
    }

    /// Elements `offset..offset + extent` of an output buffer, as
    /// [`Arg::input_range`].
    pub fn output_range<T: bytemuck::Pod>(
        b: &'a DeviceBuffer<T>,
        offset: usize,
        extent: usize,
    ) -> Self {
        Arg::Out(Self::buffer(b, offset, Some(extent)))
    }

    fn describe(&self) -> String {
        match self {
            Arg::In(b) => format!("input buffer [{}-byte]", b.elem_size),
            Arg::Out(b) => format!("output buffer [{}-byte]", b.elem_size),
            Arg::Null => "null".into(),
            Arg::U32(_) => "u32".into(),
            Arg::I32(_) => "i32".into(),
            Arg::U64(_) => "u64".into(),
            Arg::I64(_) => "i64".into(),
            Arg::F32(_) => "f32".into(),
        }
    }

    pub(crate) fn raw(&self) -> u64 {
        match *self {
            Arg::In(b) | Arg::Out(b) => b.ptr(),
            Arg::Null => 0,
            Arg::U32(v) => v as u64,
            Arg::I32(v) => v as u32 as u64,
            Arg::U64(v) => v,
            Arg::I64(v) => v as u64,
            Arg::F32(v) => v.to_bits() as u64,
        }
    }
}

/// Checks a launch against the kernel's signature and the device's limits.
pub(crate) fn check_launch(
    device: &Device,
    kernel: &KernelInfo,
    cfg: &LaunchConfig,
    args: &[Arg],
) -> Result<()> {
    let mismatch = |detail: String| Error::ArgumentMismatch {
        kernel: kernel.name.into(),
        detail,
    };
    if args.len() != kernel.args.len() {
        return Err(mismatch(format!(
            "takes {} arguments, {} given",
            kernel.args.len(),
            args.len()
        )));
    }
    for (i, (want, got)) in kernel.args.iter().zip(args).enumerate() {
        let ok = match (*want, got) {
            (
                ArgKind::Ptr {
                    mutable: true,
                    elem_size,
                },
                Arg::Out(b),
            ) => b.elem_size == elem_size,
            (
                ArgKind::Ptr {
                    mutable: false,
                    elem_size,
                },
                Arg::In(b) | Arg::Out(b),
            ) => b.elem_size == elem_size,
            (ArgKind::Ptr { .. }, Arg::Null) => true,
            (ArgKind::U32, Arg::U32(_))
            | (ArgKind::I32, Arg::I32(_))
            | (ArgKind::U64, Arg::U64(_))
            | (ArgKind::I64, Arg::I64(_))
            | (ArgKind::F32, Arg::F32(_)) => true,
            _ => false,
        };
        if !ok {
            return Err(mismatch(format!(
                "argument {i} is `{}`, got {}",
                want.describe(),
                got.describe()
            )));
        }
        if let Arg::In(b) | Arg::Out(b) = got {
            if !b.device.same_device(device) {
                return Err(Error::DeviceMismatch {
                    what: format!("kernel `{}` argument {i}", kernel.name),
                    buffer_device: b.device.to_string(),
                    device: device.to_string(),
                });
            }
            // The proof every launch carries: the range the kernel may touch
            // lies inside its buffer.
            if b.checked_extent().is_none() {
                return Err(Error::ArgumentOutOfBounds {
                    kernel: kernel.name.into(),
                    arg: i,
                    offset: b.offset,
                    extent: b.extent,
                    len: b.len,
                });
            }
        }
    }
    let bad = |detail: String| Error::BadLaunchConfig {
        kernel: kernel.name.into(),
        detail,
    };
    if cfg.block.contains(&0) || cfg.grid.contains(&0) {
        return Err(bad(format!(
            "empty grid {:?} or block {:?}",
            cfg.grid, cfg.block
        )));
    }
    if cfg.block_size() > MAX_BLOCK_SIZE as u64 {
        return Err(bad(format!(
            "block {:?} has {} workitems, the maximum is {MAX_BLOCK_SIZE}",
            cfg.block,
            cfg.block_size()
        )));
    }
    if cfg.grid[0] > MAX_GRID_X || cfg.grid[1] > MAX_GRID_YZ || cfg.grid[2] > MAX_GRID_YZ {
        return Err(bad(format!(
            "grid {:?} exceeds [{MAX_GRID_X}, {MAX_GRID_YZ}, {MAX_GRID_YZ}]",
            cfg.grid
        )));
    }
    for d in 0..3 {
        // The dispatch packet holds the grid size in workitems as u32.
        if cfg.grid[d] as u64 * cfg.block[d] as u64 > u32::MAX as u64 {
            return Err(bad(format!(
                "grid {:?} x block {:?} exceeds 2^32 workitems in dimension {d}",
                cfg.grid, cfg.block
            )));
        }
    }
    if cfg.lds_bytes > device.max_lds_bytes() {
        return Err(bad(format!(
            "{} bytes of LDS requested, the device allows {}",
            cfg.lds_bytes,
            device.max_lds_bytes()
        )));
    }
    Ok(())
}

impl Device {
    /// Launches kernel `name` with `cfg` and `args`, after checking the
    /// arguments against the kernel's signature and the configuration against
    /// the device's limits. Synchronous on the emulator; queued on a GPU stream.
    ///
    /// ```
    /// # use ferrocm_host::WaveSize;
    /// use ferrocm_host::{Arg, Device, LaunchConfig};
    /// let dev = Device::emulator(WaveSize::Wave64);
    /// let x = dev.upload(&[0.0f32, 1.0]).unwrap();
    /// let y = dev.alloc::<f32>(2).unwrap();
    /// dev.launch("unary_exp_f32", LaunchConfig::linear(2, 64),
    ///     &[Arg::output(&y), Arg::input(&x), Arg::U64(2), Arg::U32(0), Arg::Null,
    ///       Arg::U64(0), Arg::U64(0), Arg::U64(0), Arg::U64(0), Arg::F32(0.0)]).unwrap();
    /// assert_eq!(y.download().unwrap()[0], 1.0);
    /// ```
    ///
    /// # Errors
    /// [`Error::UnknownKernel`] when no kernel has that name;
    /// [`Error::ArgumentMismatch`] when `args` do not match its signature;
    /// [`Error::BadLaunchConfig`] for an empty or oversized grid, block or LDS
    /// size; [`Error::ArgumentOutOfBounds`] / [`Error::DeviceMismatch`] when a
    /// buffer argument is too short or on another device; on the emulator what
    /// the kernel did wrong ([`Error::OutOfBoundsAccess`],
    /// [`Error::OutOfBoundsWrite`], [`Error::LdsOutOfBounds`],
    /// [`Error::Deadlock`], [`Error::KernelPanic`]); [`Error::Rocm`] /
    /// [`Error::Cuda`] when the launch fails.
    pub fn launch(&self, name: &str, cfg: LaunchConfig, args: &[Arg]) -> Result<()> {
        let kernel = ferrocm_kernels::kernel(name).ok_or_else(|| Error::UnknownKernel {
            kernel: name.into(),
        })?;
        self.launch_kernel(kernel, cfg, args)
    }

    /// Launches a kernel given by its [`KernelInfo`], with the same checks as
    /// [`Device::launch`]. This is how a kernel author runs a kernel that is not
    /// (yet) in the shipped code objects in the emulator; on a GPU the kernel
    /// must be in the loaded code object.
    ///
    /// # Errors
    /// As [`Device::launch`].
    pub fn launch_kernel(
        &self,
        kernel: &KernelInfo,
        cfg: LaunchConfig,
        args: &[Arg],
    ) -> Result<()> {
        let name = kernel.name;
        check_launch(self, kernel, &cfg, args)?;
        self.pool().count_launch();
        match self {
            Device::Cpu => Err(Error::BadLaunchConfig {
                kernel: name.into(),
                detail: "the Cpu device runs no kernels (use Device::emulator or a GPU)".into(),
            }),
            Device::Emulator(c) => crate::emulator::launch(c, kernel, &cfg, args),
            #[cfg(feature = "rocm")]
            Device::Rocm(r) => {
                let raw: Vec<u64> = args.iter().map(|a| a.raw()).collect();
                r.launch(kernel, &cfg, &raw)
            }
            #[cfg(feature = "cuda")]
            Device::Cuda(c) => {
                let raw: Vec<u64> = args.iter().map(|a| a.raw()).collect();
                c.launch(kernel, &cfg, &raw)
            }
        }
    }
}

/// An input buffer argument for a `*const T` kernel parameter (or a null
/// pointer, for an optional input such as the layout of a contiguous tensor).
///
/// ```
/// # use ferrocm_host::WaveSize;
/// use ferrocm_host::{Device, In};
/// let x = Device::emulator(WaveSize::Wave32).upload(&[1.0f32, 2.0]).unwrap();
/// let _whole = In::new(&x);
/// let _from_1 = In::at(&x, 1);
/// let _none = In::<u64>::null();
/// ```
#[derive(Clone, Copy)]
pub struct In<'a, T>(Arg<'a>, PhantomData<fn() -> T>);

impl<'a, T: bytemuck::Pod> In<'a, T> {
    /// All of `b`.
    pub fn new(b: &'a DeviceBuffer<T>) -> Self {
        Self(Arg::input(b), PhantomData)
    }
    /// `b` from element `offset` to its end (an offset past the end is
    /// refused at launch).
    pub fn at(b: &'a DeviceBuffer<T>, offset: usize) -> Self {
        Self(Arg::input_at(b, offset), PhantomData)
    }
    /// Elements `offset..offset + extent` of `b` (see [`Arg::input_range`]).
    pub fn range(b: &'a DeviceBuffer<T>, offset: usize, extent: usize) -> Self {
        Self(Arg::input_range(b, offset, extent), PhantomData)
    }
    /// A null pointer.
    pub fn null() -> Self {
        Self(Arg::Null, PhantomData)
    }
    /// `b` if given, else null.
    pub fn opt(b: Option<&'a DeviceBuffer<T>>) -> Self {
        b.map(Self::new).unwrap_or_else(Self::null)
    }
}

/// An output buffer argument for a `*mut T` kernel parameter.
///
/// ```
/// # use ferrocm_host::WaveSize;
/// use ferrocm_host::{Device, Out};
/// let y = Device::emulator(WaveSize::Wave32).alloc::<u32>(4).unwrap();
/// let _ = Out::new(&y);
/// ```
#[derive(Clone, Copy)]
pub struct Out<'a, T>(Arg<'a>, PhantomData<fn() -> T>);

impl<'a, T: bytemuck::Pod> Out<'a, T> {
    /// A null pointer (an optional output left out, e.g. the status words
    /// of a launch that cannot fault).
    pub fn null() -> Self {
        Self(Arg::Null, PhantomData)
    }
    /// All of `b`.
    pub fn new(b: &'a DeviceBuffer<T>) -> Self {
        Self(Arg::output(b), PhantomData)
    }
    /// `b` from element `offset` to its end (an offset past the end is
    /// refused at launch).
    pub fn at(b: &'a DeviceBuffer<T>, offset: usize) -> Self {
        Self(Arg::output_at(b, offset), PhantomData)
    }
    /// Elements `offset..offset + extent` of `b` (see [`Arg::input_range`]).
    pub fn range(b: &'a DeviceBuffer<T>, offset: usize, extent: usize) -> Self {
        Self(Arg::output_range(b, offset, extent), PhantomData)
    }
}

/// The host-side value of one kernel parameter type: [`In`] for `*const T`,
/// [`Out`] for `*mut T`, the scalar itself for `u32 i32 u64 i64 f32`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a kernel parameter type",
    note = "kernel parameters are `*const T`, `*mut T`, u32, i32, u64, i64 or f32"
)]
pub trait Param<'a> {
    /// What the host passes.
    type Host;
    /// As an untyped argument.
    fn arg(host: Self::Host) -> Arg<'a>;
}

impl<'a, T: bytemuck::Pod> Param<'a> for *const T {
    type Host = In<'a, T>;
    fn arg(host: In<'a, T>) -> Arg<'a> {
        host.0
    }
}

impl<'a, T: bytemuck::Pod> Param<'a> for *mut T {
    type Host = Out<'a, T>;
    fn arg(host: Out<'a, T>) -> Arg<'a> {
        host.0
    }
}

macro_rules! scalar_param {
    ($($t:ty => $v:ident),*) => {$(
        impl<'a> Param<'a> for $t {
            type Host = $t;
            fn arg(host: $t) -> Arg<'a> {
                Arg::$v(host)
            }
        }
    )*};
}
scalar_param!(u32 => U32, i32 => I32, u64 => U64, i64 => I64, f32 => F32);

/// A kernel's parameter tuple: its host-side counterpart is the tuple of
/// each parameter's [`Param::Host`].
pub trait Params<'a> {
    /// The host-side tuple.
    type Host;
    /// Calls `f` with the untyped arguments.
    fn with_args<R>(host: Self::Host, f: impl FnOnce(&[Arg<'a>]) -> R) -> R;
}

macro_rules! params_tuple {
    ($($p:ident $h:ident),*) => {
        impl<'a, $($p: Param<'a>),*> Params<'a> for ($($p,)*) {
            type Host = ($($p::Host,)*);
            #[allow(non_snake_case)]
            fn with_args<R>(host: Self::Host, f: impl FnOnce(&[Arg<'a>]) -> R) -> R {
                let ($($h,)*) = host;
                f(&[$($p::arg($h)),*])
            }
        }
    };
}
params_tuple!(A a);
params_tuple!(A a, B b);
params_tuple!(A a, B b, C c);
params_tuple!(A a, B b, C c, D d);
params_tuple!(A a, B b, C c, D d, E e);
params_tuple!(A a, B b, C c, D d, E e, F f);
params_tuple!(A a, B b, C c, D d, E e, F f, G g);
params_tuple!(A a, B b, C c, D d, E e, F f, G g, H h);
params_tuple!(A a, B b, C c, D d, E e, F f, G g, H h, I i);
params_tuple!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j);
params_tuple!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k);
params_tuple!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k, L l);
params_tuple!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k, L l, M m);
params_tuple!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k, L l, M m, N n);
params_tuple!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k, L l, M m, N n, O o);
params_tuple!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k, L l, M m, N n, O o, P p);
params_tuple!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k, L l, M m, N n, O o, P p, Q q);
params_tuple!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k, L l, M m, N n, O o, P p, Q q, P18 p18);
params_tuple!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k, L l, M m, N n, O o, P p, Q q, P18 p18, P19 p19);
params_tuple!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k, L l, M m, N n, O o, P p, Q q, P18 p18, P19 p19, P20 p20);
params_tuple!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k, L l, M m, N n, O o, P p, Q q, P18 p18, P19 p19, P20 p20, P21 p21);
params_tuple!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k, L l, M m, N n, O o, P p, Q q, P18 p18, P19 p19, P20 p20, P21 p21, P22 p22);
params_tuple!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k, L l, M m, N n, O o, P p, Q q, P18 p18, P19 p19, P20 p20, P21 p21, P22 p22, P23 p23);
params_tuple!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k, L l, M m, N n, O o, P p, Q q, P18 p18, P19 p19, P20 p20, P21 p21, P22 p22, P23 p23, P24 p24);
params_tuple!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k, L l, M m, N n, O o, P p, Q q, P18 p18, P19 p19, P20 p20, P21 p21, P22 p22, P23 p23, P24 p24, P25 p25);
params_tuple!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k, L l, M m, N n, O o, P p, Q q, P18 p18, P19 p19, P20 p20, P21 p21, P22 p22, P23 p23, P24 p24, P25 p25, P26 p26);
params_tuple!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k, L l, M m, N n, O o, P p, Q q, P18 p18, P19 p19, P20 p20, P21 p21, P22 p22, P23 p23, P24 p24, P25 p25, P26 p26, P27 p27);
params_tuple!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k, L l, M m, N n, O o, P p, Q q, P18 p18, P19 p19, P20 p20, P21 p21, P22 p22, P23 p23, P24 p24, P25 p25, P26 p26, P27 p27, P28 p28);

impl Device {
    /// Launches a kernel through its typed handle: `args` is the tuple of the
    /// host-side values of the kernel's parameters ([`In`], [`Out`], scalars),
    /// so rustc checks their number and types where the launch is written.
    /// The same run-time checks as [`Device::launch`] follow (devices, launch
    /// limits). Synchronous on the emulator; queued on a GPU stream.
    ///
    /// ```
    /// # use ferrocm_host::WaveSize;
    /// use ferrocm_host::{Device, In, LaunchConfig, Out};
    /// use ferrocm_kernels::host::KernelRef;
    /// use ferrocm_kernels::unary::unary_sqrt_f32;
    /// let dev = Device::emulator(WaveSize::Wave64);
    /// let x = dev.upload(&[1.0f32, 4.0, 9.0]).unwrap();
    /// let y = dev.alloc::<f32>(3).unwrap();
    /// dev.launch_typed(KernelRef::of::<unary_sqrt_f32>(), LaunchConfig::linear(3, 64),
    ///     (Out::new(&y), In::new(&x), 3, 0, In::null(), 0, 0, 0, 0, 0.0)).unwrap();
    /// assert_eq!(y.download().unwrap(), vec![1.0, 2.0, 3.0]);
    /// ```
    /// # use ferrocm_host::WaveSize;
    ///
    /// A missing argument does not compile:
    ///
    /// ```compile_fail
    /// # use ferrocm_host::{Device, In, LaunchConfig, Out};
    /// # use ferrocm_kernels::host::KernelRef;
    /// # use ferrocm_kernels::unary::unary_sqrt_f32;
    /// # let dev = Device::emulator(WaveSize::Wave64);
    /// # let x = dev.upload(&[1.0f32, 4.0, 9.0]).unwrap();
    /// # let y = dev.alloc::<f32>(3).unwrap();
    /// dev.launch_typed(KernelRef::of::<unary_sqrt_f32>(), LaunchConfig::linear(3, 64),
    ///     (Out::new(&y), In::new(&x), 3, 0, 0, 0, 0, 0, 0.0)).unwrap(); // no layout
    /// ```
    /// # use ferrocm_host::WaveSize;
    ///
    /// nor does a buffer of another element type:
    ///
    /// ```compile_fail
    /// # use ferrocm_host::{Device, In, LaunchConfig, Out};
    /// # use ferrocm_kernels::host::KernelRef;
    /// # use ferrocm_kernels::unary::unary_sqrt_f32;
    /// # let dev = Device::emulator(WaveSize::Wave64);
    /// let x = dev.upload(&[1u32, 4, 9]).unwrap();
    /// # let y = dev.alloc::<f32>(3).unwrap();
    /// dev.launch_typed(KernelRef::of::<unary_sqrt_f32>(), LaunchConfig::linear(3, 64),
    ///     (Out::new(&y), In::new(&x), 3, 0, In::null(), 0, 0, 0, 0, 0.0)).unwrap();
    /// ```
    ///
    /// # Errors
    /// As [`Device::launch`]; the argument types are checked at compile time,
    /// their count and sizes against the kernel again at run time
    /// ([`Error::ArgumentMismatch`]).
    pub fn launch_typed<'a, A: Params<'a>>(
        &self,
        kernel: KernelRef<A>,
        cfg: LaunchConfig,
        args: A::Host,
    ) -> Result<()> {
        A::with_args(args, |args| self.launch_kernel(kernel.info, cfg, args))
    }
}
