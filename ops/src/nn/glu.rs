//! Gated activations, `act(gate) * up` (SwiGLU, GeGLU, ReGLU): API, Cpu
//! implementation, kernel path. They ride on the binary ops' machinery
//! ([`Zip`]: broadcasting, strided views, the Cpu's vectorised loops); the
//! kernel is `glu_{dtype}` with the activation as an argument.

use crate::core::dtype::WithDType;
use crate::core::error::{Error, Result};
use crate::core::tensor::Tensor;
use crate::elementwise::binary::{ZipArgs, ZipFn};
use crate::engine::{self, Op};
use crate::matmul::Activation;
use crate::quant::Q8Activations;
use crate::quant::activations::check_shape;
use ferrocm_host::{Device, In, LaunchConfig, Out};
use ferrocm_kernels::elem::per_word;
use ferrocm_kernels::glu::{GluKernels, glu_apply};
use ferrocm_kernels::unary::{ACT_GELU, ACT_GELU_ERF, ACT_RELU, ACT_SILU};

/// `act(a) * b` with the activation's code `ACT` as a constant: the Cpu
/// loop is compiled once per activation, the kernel takes the code.
struct Gated<const ACT: u32>;

impl<T: WithDType, const ACT: u32> ZipFn<T, T> for Gated<ACT> {
    #[inline(always)]
    fn apply(a: T, b: T) -> T {
        T::from_kernel(glu_apply(a.to_kernel(), b.to_kernel(), ACT))
    }
    fn launch(
        dev: &Device,
        name: &'static str,
        cfg: LaunchConfig,
        args: ZipArgs<'_, T::Kernel, T::Kernel>,
    ) -> Result<()> {
        let kernel = T::Kernel::GLU.ok_or(Error::UnsupportedDType {
            op: name,
            dtype: T::DTYPE,
        })?;
        let (out, a, b, n, ndim, layout, d0, d1, a0, a1, b0, b1) = args;
        // Contiguous operands go a 16-byte word per workitem when they
        // start on words (the kernel checks; any grid is correct).
        let per = per_word::<T::Kernel>() as u64;
        let cfg = match ndim {
            0 => LaunchConfig::linear(n.div_ceil(per), cfg.block[0]),
            _ => cfg,
        }
        .starting_early();
        let args = (out, a, b, n, ndim, layout, d0, d1, a0, a1, b0, b1, ACT);
        Ok(dev.launch_typed(kernel, cfg, args)?)
    }
}

impl<T: WithDType> Tensor<T> {
    /// `act(self) * up` elementwise, with broadcasting: the gate of a gated
    /// linear unit (f32, f16, bf16; computed in f32 and rounded once, so
    /// it can differ from `self.silu()?.mul(up)` by the rounding of the
    /// intermediate). `Activation::Silu` is SwiGLU (Llama, Mistral, Qwen),
    /// `Gelu` / `GeluErf` GeGLU (Gemma, T5 v1.1), `Relu` ReGLU.
    ///
    /// ```
    /// use ferrocm_ops::{Activation, Device, Tensor};
    /// let gate = Tensor::from_slice(&[-1.0f32, 0.0, 2.0], &[3], &Device::Cpu)?;
    /// let up = Tensor::from_slice(&[5.0f32, 5.0, 3.0], &[3], &Device::Cpu)?;
    /// assert_eq!(gate.glu(&up, Activation::Relu)?.to_vec()?, vec![0.0, 0.0, 6.0]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::UnsupportedDType`] for integer dtypes,
    /// [`Error::BroadcastIncompatible`], [`Error::DeviceMismatch`],
    /// [`Error::Host`] (memory, launch).
    pub fn glu(&self, up: &Self, act: Activation) -> Result<Self> {
        match act {
            Activation::Relu => self.gated::<ACT_RELU>(up, "glu(relu)"),
            Activation::Gelu => self.gated::<ACT_GELU>(up, "glu(gelu)"),
            Activation::GeluErf => self.gated::<ACT_GELU_ERF>(up, "glu(gelu_erf)"),
            Activation::Silu => self.gated::<ACT_SILU>(up, "swiglu"),
        }
    }

    /// SwiGLU: `silu(self) * up`, fused ([`Tensor::glu`] with
    /// [`Activation::Silu`]): the MLP of Llama, Mistral and Qwen,
    /// `down(swiglu(gate(x), up(x)))`.
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let gate = Tensor::from_slice(&[0.0f32, 1.0], &[2], &Device::Cpu)?;
    /// let up = Tensor::from_slice(&[4.0f32, 2.0], &[2], &Device::Cpu)?;
    /// let y = gate.swiglu(&up)?.to_vec()?;
    /// assert_eq!(y[0], 0.0);
    /// assert!((y[1] - 2.0 / (1.0 + (-1.0f32).exp())).abs() < 1e-6);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Tensor::glu`].
    pub fn swiglu(&self, up: &Self) -> Result<Self> {
        self.glu(up, Activation::Silu)
    }

    /// The gated unit of one `[.., 2d]` tensor holding the gate in its first
    /// half of the last dim and up in its second (candle-nn's `swiglu`, a
    /// fused gate-up projection): `act(x[.., :d]) * x[.., d:]`, `[.., d]`.
    /// The halves are read in place (views).
    ///
    /// ```
    /// use ferrocm_ops::{Activation, Device, Tensor};
    /// let x = Tensor::from_slice(&[1.0f32, -2.0, 3.0, 4.0], &[1, 4], &Device::Cpu)?;
    /// let y = x.glu_halves(Activation::Relu)?;
    /// assert_eq!((y.shape(), y.to_vec()?), (&[1, 2][..], vec![3.0, 0.0]));
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::BadParameter`] for a rank-0 tensor or an odd last dim; as
    /// [`Tensor::glu`] otherwise.
    pub fn glu_halves(&self, act: Activation) -> Result<Self> {
        let last = self.shape().last().copied();
        let d = match last {
            Some(n) if n % 2 == 0 => n / 2,
            _ => {
                return Err(Error::BadParameter {
                    op: "glu_halves",
                    what: format!(
                        "the last dim must be even (gate and up halves), shape {:?}",
                        self.shape()
                    ),
                });
            }
        };
        let dim = self.rank() - 1;
        self.narrow(dim, 0, d)?.glu(&self.narrow(dim, d, d)?, act)
    }

    /// [`Tensor::glu_halves`] stored only in the 8-bit form the quantized
    /// products take: bit for bit `Q8Activations::quantize(&self.glu_halves(act)?)`,
    /// in one pass on a GPU (each group of 16 rounded where it is computed),
    /// for a model whose next step is [`QTensor::forward_q8`] (a decode
    /// step's down projection). Half the last dim must be a multiple of 16.
    ///
    /// ```
    /// # use ferrocm_ops::WaveSize;
    /// use ferrocm_ops::quant::Q8Activations;
    /// use ferrocm_ops::{Activation, Device, Tensor};
    /// let dev = Device::emulator(WaveSize::Wave32);
    /// let v: Vec<f32> = (0..64).map(|i| (i as f32 - 20.0) / 8.0).collect();
    /// let x = Tensor::from_slice(&v, &[1, 64], &dev)?;
    /// let q = x.glu_halves_q8(Activation::Silu)?;
    /// assert_eq!(q.shape(), &[1, 32]);
    /// assert_eq!(q.to_host()?, Q8Activations::quantize(&x.glu_halves(Activation::Silu)?)?.to_host()?);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// [`QTensor::forward_q8`]: crate::QTensor::forward_q8
    ///
    /// # Errors
    /// As [`Tensor::glu_halves`], and [`Error::BadParameter`] when half the
    /// last dim is not a multiple of 16.
    pub fn glu_halves_q8(&self, act: Activation) -> Result<Q8Activations> {
        let op = "glu_halves_q8";
        if !T::DTYPE.is_float() {
            return Err(Error::UnsupportedDType {
                op,
                dtype: T::DTYPE,
            });
        }
        let mut shape = self.shape().to_vec();
        let d = match shape.last_mut() {
            Some(n) if *n % 2 == 0 => {
                *n /= 2;
                *n
            }
            _ => {
                return Err(Error::BadParameter {
                    op,
                    what: format!(
                        "the last dim must be even (gate and up halves), shape {:?}",
                        self.shape()
                    ),
                });
            }
        };
        check_shape::<T>(op, &shape)?;
        let x = self.contiguous()?;
        let dev = x.device();
        let q8 = Q8Activations::alloc(dev, &shape)?;
        engine::run(dev, GluQ8 { x: &x, d, act, q8 })
    }

    fn gated<const ACT: u32>(&self, up: &Self, name: &'static str) -> Result<Self> {
        if !T::DTYPE.is_float() {
            return Err(Error::UnsupportedDType {
                op: name,
                dtype: T::DTYPE,
            });
        }
        self.zip::<T, Gated<ACT>>(up, name)
    }
}

impl crate::DynTensor {
    /// [`Tensor::glu`] (`act(self) * up`) for a dtype known at run time.
    ///
    /// # Errors
    /// [`Error::DTypeMismatch`] when the dtypes differ; as [`Tensor::glu`].
    pub fn glu(&self, up: &Self, act: Activation) -> Result<Self> {
        self.same_dtype("glu", up)?;
        crate::core::dyn_tensor::with_dtype!(self, "glu", |t| Ok(t.glu(&up.typed()?, act)?.into()))
    }

    /// [`Tensor::swiglu`] (`silu(self) * up`) for a dtype known at run time.
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let g = Tensor::from_slice(&[0.0f32, 1.0], &[2], &Device::Cpu)?.to_dyn();
    /// let y = g.swiglu(&g)?.to_f64_vec()?;
    /// assert_eq!(y[0], 0.0);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::DTypeMismatch`] when the dtypes differ; as [`Tensor::swiglu`].
    pub fn swiglu(&self, up: &Self) -> Result<Self> {
        self.same_dtype("swiglu", up)?;
        crate::core::dyn_tensor::with_dtype!(self, "swiglu", |t| Ok(t.swiglu(&up.typed()?)?.into()))
    }

    /// [`Tensor::glu_halves`] (the last dim's two halves as gate and up) for
    /// a dtype known at run time.
    ///
    /// # Errors
    /// As [`Tensor::glu_halves`].
    pub fn glu_halves(&self, act: Activation) -> Result<Self> {
        crate::core::dyn_tensor::with_dtype!(self, "glu_halves", |t| Ok(t.glu_halves(act)?.into()))
    }
}

/// The gated unit of the halves of a contiguous `[rows, 2d]` tensor in 8-bit
/// form: `glu_q8_{dtype}` on kernel devices when the rows start on 16-byte
/// words, else (and on the Cpu) `glu_halves` then its rounding (the same
/// bits).
struct GluQ8<'a, T: WithDType> {
    x: &'a Tensor<T>,
    d: usize,
    act: Activation,
    q8: Q8Activations,
}

impl<T: WithDType> GluQ8<'_, T> {
    fn composed(self) -> Result<Q8Activations> {
        Q8Activations::quantize(&self.x.glu_halves(self.act)?)
    }
}

impl<T: WithDType> Op for GluQ8<'_, T> {
    type Output = Q8Activations;

    fn cpu(self) -> Result<Q8Activations> {
        self.composed()
    }

    fn kernels(self, dev: &Device) -> Result<Q8Activations> {
        let kernel = T::Kernel::GLU_Q8.ok_or(Error::UnsupportedDType {
            op: "glu_halves_q8",
            dtype: T::DTYPE,
        })?;
        let (n, d) = (self.x.elem_count(), self.d);
        let off = self.x.layout().offset();
        let per = per_word::<T::Kernel>() as usize;
        if n == 0 {
            return Ok(self.q8);
        }
        if !off.is_multiple_of(per) {
            return self.composed();
        }
        let rows = n / (2 * d);
        let act = match self.act {
            Activation::Relu => ACT_RELU,
            Activation::Gelu => ACT_GELU,
            Activation::GeluErf => ACT_GELU_ERF,
            Activation::Silu => ACT_SILU,
        };
        let buf = self.x.buf().view_as::<T::Kernel>().expect("same size");
        // A word per workitem.
        let cfg = LaunchConfig::linear((n / 2 / per) as u64, 256).starting_early();
        dev.launch_typed(
            kernel,
            cfg,
            (
                Out::new(&self.q8.codes),
                Out::new(&self.q8.meta),
                In::range(buf, off, n - d),
                In::range(buf, off + d, n - d),
                rows as u64,
                d as u64,
                2 * d as u64,
                2 * d as u64,
                act,
            ),
        )?;
        Ok(self.q8)
    }
}
