//! How a device launches a kernel: one check of every launch against the
//! kernel's signature, the buffers' devices and ranges and the device's
//! limits ([`check_launch`], the only one, for every device), then the
//! emulator or the GPU backend.

use super::Device;
use super::args::{Arg, Params};
use crate::emulator::{self, EmulatedArg};
use crate::error::{Error, Result};
use crate::launch::{LaunchConfig, MAX_BLOCK_SIZE, MAX_GRID_X, MAX_GRID_YZ};
use ferrocm_kernels::host::{ArgKind, KernelInfo, KernelRef};

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
    /// [`Device::launch`]. This is how a kernel author runs a kernel that is
    /// in no code object yet ([`KernelInfo::host_only`]) in the emulator, and
    /// how a kernel of a crate outside ferrocm runs anywhere: a GPU loads the
    /// kernel's [`module`](KernelInfo::module) the first time one of its
    /// kernels launches.
    ///
    /// # Errors
    /// As [`Device::launch`]; on a GPU, [`Error::NoCodeObject`] when the
    /// kernel's module has no code for it (or the kernel is host-only).
    pub fn launch_kernel(
        &self,
        kernel: &KernelInfo,
        cfg: LaunchConfig,
        args: &[Arg],
    ) -> Result<()> {
        check_launch(self, kernel, &cfg, args)?;
        self.pool().count_launch();
        match (self, self.gpu()) {
            (_, Some(gpu)) => {
                let _turn = self.turn();
                // On the stack for the usual counts (a launch is a few
                // microseconds of host time; a vector each was part of it).
                let mut slots = [0u64; 32];
                let heap: Vec<u64>;
                let raw: &[u64] = if args.len() <= slots.len() {
                    for (s, a) in slots.iter_mut().zip(args) {
                        *s = a.raw();
                    }
                    &slots[..args.len()]
                } else {
                    heap = args.iter().map(Arg::raw).collect();
                    &heap
                };
                // SAFETY: `check_launch` proved the arguments against the
                // kernel's signature and every buffer's range inside a live
                // buffer of this device, borrowed for the call.
                unsafe { gpu.launch(kernel, &cfg, raw) }
            }
            (Device::Emulator(c), None) => {
                let emulated: Vec<EmulatedArg> = args.iter().map(Arg::emulated).collect();
                emulator::launch(c, kernel, &cfg, &emulated)
            }
            _ => Err(Error::BadLaunchConfig {
                kernel: kernel.name.into(),
                detail: "the Cpu device runs no kernels (use Device::emulator or a GPU)".into(),
            }),
        }
    }
}

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
