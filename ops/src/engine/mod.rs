//! The seam: the one place that decides, per device, how an op runs, and
//! the engines behind it ([`cpu`]: native Rust on the host; [`kernels`]:
//! helpers of the kernel path shared by every kernel-running device).
//!
//! Every op is written once as an [`Op`]: its Cpu implementation, its kernel
//! path (shared by every kernel-running device: the emulator, ROCm, CUDA, and
//! any device added later) and, optionally, a vendor-library path. [`run`]
//! picks one from the device. Adding a device or a library changes [`run`]
//! and [`Libraries`], not the ops.
//!
//! The seam is public: a crate outside ferrocm adds a fused op the same way
//! ferrocm's own families are written, with its own kernels (compiled by
//! `ferrocm-build`, launched with `Device::launch_typed`) on every device
//! (see `examples/fused-op` and docs/adding-a-kernel.md, "An op in your own
//! crate").
//!
//! ```text
//! Tensor::exp ──► Tensor::unary: check dtype, allocate the output (caching allocator)
//!                   │
//!                   ▼
//!             engine::run(device, UnaryMap { .. })
//!        ┌──────────┼──────────────────────────────┐
//!        ▼          ▼                              ▼
//!   Device::Cpu   Emulator                       a GPU (ROCm, CUDA)
//!   op.cpu()      op.kernels(dev)                op.vendor(libs) ─► Done(result)
//!   (rayon, the   │                                   └─► Fallback(op) ─► op.kernels(dev)
//!   shared scalar │
//!   definition)   ▼
//!             T::Kernel::kernel::<Exp>()  (typed handle, chosen by the type system)
//!             dev.launch_typed(k, cfg, (Out, In, n, ndim, layout, p))
//!                   │  the launch check, counters
//!                   ▼
//!             emulator: coroutine per workitem │ GPU: its backend, on its stream
//! ```
//!
//! A fused op of your own, end to end (the kernel path here reuses one of
//! ferrocm's kernels; a crate with kernels of its own launches those):
//!
//! ```
//! use ferrocm_ops::engine::{self, Op, cpu};
//! use ferrocm_ops::{Device, Result, Tensor};
//! use ferrocm_host::DeviceBuffer;
//!
//! /// y = 2x + 1 for a contiguous f32 tensor.
//! struct TwiceAndOne<'a> {
//!     x: &'a Tensor<f32>,
//!     out: DeviceBuffer<f32>,
//! }
//!
//! impl Op for TwiceAndOne<'_> {
//!     type Output = DeviceBuffer<f32>;
//!     fn cpu(mut self) -> Result<DeviceBuffer<f32>> {
//!         let x = cpu::host(self.x.storage());
//!         for (o, x) in cpu::host_mut(&mut self.out).iter_mut().zip(x) {
//!             *o = 2.0 * x + 1.0;
//!         }
//!         Ok(self.out)
//!     }
//!     fn kernels(self, _dev: &Device) -> Result<DeviceBuffer<f32>> {
//!         // Any kernel launch goes here; this sketch reuses `affine`.
//!         let y = self.x.affine(2.0, 1.0)?;
//!         let mut out = self.out;
//!         out.copy_from(y.storage())?;
//!         Ok(out)
//!     }
//! }
//!
//! let dev = Device::Cpu;
//! let x = Tensor::from_slice(&[1.0f32, 2.0], &[2], &dev)?;
//! let out = dev.alloc::<f32>(2)?;
//! let y = Tensor::from_buffer(engine::run(&dev, TwiceAndOne { x: &x, out })?, &[2])?;
//! assert_eq!(y.to_vec()?, vec![3.0, 5.0]);
//! # Ok::<(), ferrocm_ops::Error>(())
//! ```

pub mod choice;
pub mod cpu;
pub mod kernels;

use crate::core::error::Result;
use ferrocm_host::Device;
use ferrocm_host::dnn::Dnn;
use ferrocm_host::gpu::Blas;

/// What a vendor-library path did: ran (with its result), or declined and
/// hands the op back for the kernel path.
pub enum Vendor<O: Op> {
    /// The library ran the op.
    Done(Result<O::Output>),
    /// No library path for this op, dtype or device: use our kernels.
    Fallback(O),
}

/// The vendor libraries of the device an op runs on (rocBLAS and MIOpen on
/// ROCm, cuBLAS on CUDA, each loaded at first use; none on the emulator). An
/// op asks for the one it needs and falls back to its kernel when that is
/// absent.
pub struct Libraries<'a> {
    device: &'a Device,
}

impl Libraries<'_> {
    /// The device the op runs on: its checked library entries
    /// ([`Device::blas_gemm`], which proves every operand's range first)
    /// are what an op calls.
    pub fn device(&self) -> &Device {
        self.device
    }

    /// The device's BLAS (rocBLAS, cuBLAS), when it loads.
    pub fn blas(&self) -> Option<&dyn Blas> {
        self.device.gpu().and_then(|g| g.blas())
    }

    /// The device's DNN library (MIOpen), when it loads.
    pub fn dnn(&self) -> Option<&dyn Dnn> {
        self.device.dnn()
    }
}

/// One op's implementations. The op value holds its inputs (borrowed
/// tensors), its parameters and the output it writes (allocated by the
/// op's API function from the device's cache).
pub trait Op: Sized {
    /// What the op produces (usually the output buffer).
    type Output;
    /// Native Rust on the host: the Cpu device.
    ///
    /// # Errors
    /// What the op finds wrong in its data (an id out of range, ...).
    fn cpu(self) -> Result<Self::Output>;
    /// Our kernels: every device that runs them.
    ///
    /// # Errors
    /// The launch's errors (see `Device::launch_typed`).
    fn kernels(self, device: &Device) -> Result<Self::Output>;
    /// A vendor library's implementation. The default declines.
    fn vendor(self, _libs: &Libraries) -> Vendor<Self> {
        Vendor::Fallback(self)
    }
}

/// Runs `op` on `device`: the Cpu implementation, the vendor library where the
/// device has one and the op uses it, else the kernels.
///
/// # Errors
/// What the path taken returns.
pub fn run<O: Op>(device: &Device, op: O) -> Result<O::Output> {
    match device {
        Device::Cpu => op.cpu(),
        Device::Emulator(_) => op.kernels(device),
        // A GPU (ROCm, CUDA): its vendor library where the op has a use for
        // one, else our kernels.
        _ => match op.vendor(&Libraries { device }) {
            Vendor::Done(r) => r,
            Vendor::Fallback(op) => op.kernels(device),
        },
    }
}
