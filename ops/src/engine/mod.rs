//! The backend seam: the one place that decides, per device, how an op runs.
//!
//! Every op is written once as an [`Op`]: its Cpu implementation, its kernel
//! path (shared by every kernel-running device: the emulator, ROCm, and any
//! device added later) and, optionally, a vendor-library path. [`run`] picks
//! one from the device. Adding a device or a library changes [`run`] and
//! [`Libraries`], not the ops.
//!
//! ```text
//! Tensor::exp ──► Tensor::unary: check dtype, allocate the output (caching allocator)
//!                   │
//!                   ▼
//!             backend::run(device, UnaryMap { .. })
//!        ┌──────────┼─────────────────────────────┐
//!        ▼          ▼                             ▼
//!   Device::Cpu   Emulator                       Rocm
//!   op.cpu()      op.kernels(dev)                op.vendor(libs) ─► Done(result)
//!   (rayon, the   │                                   └─► Fallback(op) ─► op.kernels(dev)
//!   shared scalar │
//!   definition)   ▼
//!             T::Kernel::kernel::<Exp>()  (typed handle, chosen by the type system)
//!             dev.launch_typed(k, cfg, (Out, In, n, ndim, layout, p))
//!                   │  argument checks, counters
//!                   ▼
//!             emulator: coroutine per workitem │ ROCm: hipModuleLaunchKernel on the stream
//! ```

use crate::error::Result;
use ferrocm_host::Device;

/// What a vendor-library path did: ran (with its result), or declined and
/// hands the op back for the kernel path.
pub(crate) enum Vendor<O: Op> {
    /// The library ran the op.
    Done(Result<O::Output>),
    /// No library path for this op, dtype or device: use our kernels.
    Fallback(O),
}

/// The vendor libraries a device offers (rocBLAS and MIOpen on ROCm, each
/// loaded lazily; none on the emulator). An op asks for the one it needs and
/// falls back to its kernel when that is absent.
#[allow(dead_code)]
pub(crate) struct Libraries<'a> {
    device: &'a Device,
}

#[allow(dead_code)]
impl Libraries<'_> {
    /// The device the op runs on (its BLAS is reached through
    /// [`Device::blas_gemm`]).
    pub(crate) fn device(&self) -> &Device {
        self.device
    }

    /// rocBLAS, when the device is a ROCm GPU and the library loads.
    #[cfg(feature = "rocm")]
    pub(crate) fn rocblas(&self) -> Option<&ferrocm_host::rocm::RocblasHandle> {
        match self.device {
            Device::Rocm(r) => r.rocblas().ok(),
            _ => None,
        }
    }

    /// MIOpen, when the device is a ROCm GPU and the library loads.
    #[cfg(feature = "rocm")]
    pub(crate) fn miopen(&self) -> Option<&ferrocm_host::rocm::MiopenHandle> {
        match self.device {
            Device::Rocm(r) => r.miopen().ok(),
            _ => None,
        }
    }
}

/// One op's implementations. The op value holds its inputs and the output it
/// writes (allocated by the op's API function from the device's cache).
pub(crate) trait Op: Sized {
    /// What the op produces (usually the output buffer).
    type Output;
    /// Native Rust on the host: the Cpu device.
    fn cpu(self) -> Result<Self::Output>;
    /// Our kernels: every device that runs them.
    fn kernels(self, device: &Device) -> Result<Self::Output>;
    /// A vendor library's implementation. The default declines.
    fn vendor(self, _libs: &Libraries) -> Vendor<Self> {
        Vendor::Fallback(self)
    }
}

/// Runs `op` on `device`: the Cpu implementation, the vendor library where the
/// device has one and the op uses it, else the kernels.
pub(crate) fn run<O: Op>(device: &Device, op: O) -> Result<O::Output> {
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
