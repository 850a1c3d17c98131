//! A fused op written outside ferrocm, with its own kernel:
//! `y = gelu(x + bias) + residual` (a transformer MLP's bias, activation
//! and residual add in one pass over memory instead of three), for f32, f16
//! and bf16 (computed in f32, rounded once), on every device ferrocm has.
//!
//! How it is built, all through ferrocm's public API:
//! - `src/fused.rs` declares the kernel with `kernels!` against ferrocm's
//!   device layer (`ferrocm_kernels::prelude`); `build.rs` compiles it for
//!   every AMD arch and the PTX module with one line
//!   (`ferrocm_build::compile_kernels`), and `kernel_module!` below embeds
//!   the result;
//! - [`BiasGeluResidual`] implements ferrocm's seam ([`engine::Op`]): its
//!   Cpu path (native Rust on the host, the same scalar function as the
//!   kernel) and its kernel path (the typed, range-checked launch), and
//!   [`bias_gelu_residual`] runs it with [`engine::run`] on whatever device
//!   the tensors are on: the Cpu, the emulator, a ROCm or CUDA GPU.
//!
//! ```
//! use ferrocm::{Device, Tensor};
//! let dev = Device::Cpu;
//! let x = Tensor::from_slice(&[0.0f32, 1.0, -1.0, 2.0], &[2, 2], &dev)?;
//! let bias = Tensor::from_slice(&[0.5f32, -0.5], &[2], &dev)?;
//! let residual = Tensor::<f32>::ones(&[2, 2], &dev)?;
//! let y = ferrocm_example_fused_op::bias_gelu_residual(&x, &bias, &residual)?;
//! assert_eq!(y.shape(), &[2, 2]);
//! # Ok::<(), ferrocm::Error>(())
//! ```

ferrocm_kernels::kernel_module!();

pub mod fused;

use ferrocm::host::{DeviceBuffer, LaunchConfig, Out};
use ferrocm::ops::engine::cpu::Func3;
use ferrocm::ops::engine::{self, Op};
use ferrocm::{Device, Error, Result, Tensor, WithDType};
use ferrocm_kernels::elem::Elem;
use fused::FusedKernel;
use std::marker::PhantomData;

/// Workitems per workgroup of the kernel's launches.
const BLOCK: u32 = 256;

/// `gelu(x + bias) + residual`: `x` and `residual` of one shape (rank 1 or
/// more), `bias` of its last dim; f32, f16 or bf16, all one dtype, all on
/// one device. Views of any layout are read in logical order (made
/// contiguous first when they are not).
///
/// # Errors
/// `Error::UnsupportedDType` for an integer dtype; `Error::ShapeMismatch`
/// naming the shapes passed when `residual`'s shape differs from `x`'s or
/// `bias` is not `[x.shape()[last]]`, or `x` is rank 0;
/// `Error::DeviceMismatch`; the device's errors (allocation, the launch).
pub fn bias_gelu_residual<T>(
    x: &Tensor<T>,
    bias: &Tensor<T>,
    residual: &Tensor<T>,
) -> Result<Tensor<T>>
where
    T: WithDType<Kernel: FusedKernel>,
{
    let op = "bias_gelu_residual";
    if !T::DTYPE.is_float() {
        return Err(Error::UnsupportedDType {
            op,
            dtype: T::DTYPE,
        });
    }
    let cols = *x.shape().last().ok_or_else(|| Error::ShapeMismatch {
        op,
        lhs: x.shape().to_vec(),
        rhs: bias.shape().to_vec(),
    })?;
    if residual.shape() != x.shape() {
        return Err(Error::ShapeMismatch {
            op,
            lhs: x.shape().to_vec(),
            rhs: residual.shape().to_vec(),
        });
    }
    if bias.shape() != [cols] {
        return Err(Error::ShapeMismatch {
            op,
            lhs: x.shape().to_vec(),
            rhs: bias.shape().to_vec(),
        });
    }
    let dev = x.device();
    for t in [bias, residual] {
        if !t.device().same_device(dev) {
            return Err(Error::DeviceMismatch {
                op,
                lhs: dev.to_string(),
                rhs: t.device().to_string(),
            });
        }
    }
    // The kernel reads contiguous rows; a view becomes contiguous first
    // (a contiguous tensor is not copied).
    let (x, bias, residual) = (x.contiguous()?, bias.contiguous()?, residual.contiguous()?);
    let out = dev.alloc::<T>(x.elem_count())?;
    let op = BiasGeluResidual {
        x: &x,
        bias: &bias,
        residual: &residual,
        out,
    };
    Tensor::from_buffer(engine::run(dev, op)?, x.shape())
}

/// The op as a value for ferrocm's seam: its inputs (contiguous), and the
/// output it writes.
pub struct BiasGeluResidual<'a, T: WithDType> {
    x: &'a Tensor<T>,
    bias: &'a Tensor<T>,
    residual: &'a Tensor<T>,
    out: DeviceBuffer<T>,
}

impl<T> Op for BiasGeluResidual<'_, T>
where
    T: WithDType<Kernel: FusedKernel>,
{
    type Output = DeviceBuffer<T>;

    /// Native Rust on ferrocm's Cpu engine (parallel, vectorised, any
    /// layout: `bias` is read as a broadcast view), with the kernel's own
    /// scalar function.
    fn cpu(mut self) -> Result<DeviceBuffer<T>> {
        use ferrocm::ops::engine::cpu::{host, host_mut, map3};
        let bias = self.bias.broadcast_as(self.x.shape())?;
        map3(
            host_mut(&mut self.out),
            (host(self.x.storage()), self.x.layout()),
            (host(bias.storage()), bias.layout()),
            (host(self.residual.storage()), self.residual.layout()),
            &Fused::<T>(PhantomData),
        );
        Ok(self.out)
    }

    /// Our kernel, on every device that runs kernels.
    fn kernels(self, dev: &Device) -> Result<DeviceBuffer<T>> {
        let n = self.out.len() as u64;
        if n == 0 {
            return Ok(self.out);
        }
        let out = self
            .out
            .view_as::<T::Kernel>()
            .expect("the kernel type has the dtype's size");
        dev.launch_typed(
            <T::Kernel as FusedKernel>::KERNEL,
            LaunchConfig::linear(n, BLOCK),
            (
                Out::new(out),
                self.x.kernel_input(),
                self.bias.kernel_input(),
                self.residual.kernel_input(),
                n,
                self.bias.elem_count() as u64,
            ),
        )?;
        Ok(self.out)
    }
}

/// The Cpu engine's per-element function: the kernel's scalar function on
/// the f32 values of each dtype, rounded once.
struct Fused<T>(PhantomData<fn() -> T>);

impl<T: WithDType> Func3<T, T, T, T> for Fused<T> {
    #[inline(always)]
    fn call(&self, x: T, bias: T, residual: T) -> T {
        let f = |v: T| v.to_kernel().to_f32();
        let y = fused::bias_gelu_residual(f(x), f(bias), f(residual));
        T::from_kernel(<T::Kernel as Elem>::from_f32(y))
    }
}
