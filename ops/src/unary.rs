//! Unary ops and affine: API, Cpu implementation, GPU dispatch.
//!
//! The scalar math of each op is `ferrocm_kernels::unary::*::apply`, shared
//! by the kernels and the Cpu backend.

use crate::dtype::WithDType;
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use ferrocm_host::Arg;
use ferrocm_kernels::elem::Elem;
use ferrocm_kernels::unary::{self as k, UnaryOp};

macro_rules! unary_enum {
    ($($v:ident => $name:literal, $ty:ident;)*) => {
        /// A unary elementwise op (float dtypes).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Unary { $(#[doc = $name] $v,)* }

        impl Unary {
            /// Every unary op.
            pub const ALL: &'static [Unary] = &[$(Unary::$v,)*];

            /// The op's name in kernel names (`unary_{name}_{dtype}`).
            pub fn name(self) -> &'static str {
                match self { $(Unary::$v => $name,)* }
            }

            /// The shared scalar definition.
            pub fn scalar_fn(self) -> fn(f32, f32) -> f32 {
                match self { $(Unary::$v => <k::$ty as UnaryOp>::apply,)* }
            }
        }
    };
}

unary_enum! {
    Neg => "neg", Neg; Abs => "abs", Abs; Sqr => "sqr", Sqr; Sqrt => "sqrt", Sqrt; Rsqrt => "rsqrt", Rsqrt;
    Recip => "recip", Recip; Exp => "exp", Exp; Log => "log", Log; Sin => "sin", Sin; Cos => "cos", Cos;
    Tanh => "tanh", Tanh; Erf => "erf", Erf; Gelu => "gelu", Gelu; GeluErf => "gelu_erf", GeluErf;
    Silu => "silu", Silu; Relu => "relu", Relu; Sigmoid => "sigmoid", Sigmoid; Sign => "sign", Sign;
    Ceil => "ceil", Ceil; Floor => "floor", Floor; Round => "round", Round; Powf => "powf", Powf; Elu => "elu", Elu;
}

macro_rules! unary_methods {
    ($($m:ident => $v:ident),*) => {
        impl<T: WithDType> Tensor<T> {$(
            #[doc = concat!("Elementwise `", stringify!($m), "` (float dtypes).")]
            pub fn $m(&self) -> Result<Self> {
                self.unary(Unary::$v, 0.0)
            }
        )*}
    };
}

unary_methods!(neg => Neg, abs => Abs, sqr => Sqr, sqrt => Sqrt, rsqrt => Rsqrt, recip => Recip, exp => Exp,
    log => Log, sin => Sin, cos => Cos, tanh => Tanh, erf => Erf, gelu => Gelu, gelu_erf => GeluErf,
    silu => Silu, relu => Relu, sigmoid => Sigmoid, sign => Sign, ceil => Ceil, floor => Floor, round => Round);

impl<T: WithDType> Tensor<T> {
    /// Applies `op` with scalar parameter `p` (the exponent of powf, alpha of elu).
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor, Unary};
    /// let x = Tensor::from_slice(&[1.0f32, 4.0], &[2], &Device::emulator(32))?;
    /// assert_eq!(x.unary(Unary::Sqrt, 0.0)?.to_vec()?, vec![1.0, 2.0]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    pub fn unary(&self, op: Unary, p: f32) -> Result<Self> {
        if !T::DTYPE.is_float() {
            return Err(Error::UnsupportedDType {
                op: op.name(),
                dtype: T::DTYPE,
            });
        }
        let n = self.elem_count();
        let dev = self.device().clone();
        let mut out = dev.alloc::<T>(n)?;
        if dev.runs_kernels() {
            let kernel = format!("unary_{}_{}", op.name(), T::DTYPE);
            crate::gpu::launch_map(self, &kernel, &out, &[Arg::F32(p)])?;
        } else {
            let f = op.scalar_fn();
            let src = crate::cpu::host(&self.storage);
            crate::cpu::map_strided(out.as_mut_slice().unwrap_or_default(), &self.layout, |o| {
                T::from_kernel(T::Kernel::from_f32(f(src[o].to_kernel().to_f32(), p)))
            });
        }
        Ok(Tensor::from_parts(out, self.shape()))
    }

    /// `x^e` elementwise.
    pub fn powf(&self, e: f32) -> Result<Self> {
        self.unary(Unary::Powf, e)
    }

    /// ELU with `alpha`.
    pub fn elu(&self, alpha: f32) -> Result<Self> {
        self.unary(Unary::Elu, alpha)
    }

    /// `x * mul + add` elementwise (every dtype; integers wrap).
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let x = Tensor::from_slice(&[1u32, 2], &[2], &Device::emulator(64))?;
    /// assert_eq!(x.affine(3.0, 1.0)?.to_vec()?, vec![4, 7]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    pub fn affine(&self, mul: f32, add: f32) -> Result<Self> {
        let n = self.elem_count();
        let dev = self.device().clone();
        let mut out = dev.alloc::<T>(n)?;
        if dev.runs_kernels() {
            let kernel = format!("affine_{}", T::DTYPE);
            crate::gpu::launch_map(self, &kernel, &out, &[Arg::F32(mul), Arg::F32(add)])?;
        } else {
            let src = crate::cpu::host(&self.storage);
            crate::cpu::map_strided(out.as_mut_slice().unwrap_or_default(), &self.layout, |o| {
                T::from_kernel(ferrocm_kernels::affine::affine_apply(
                    src[o].to_kernel(),
                    mul,
                    add,
                ))
            });
        }
        Ok(Tensor::from_parts(out, self.shape()))
    }
}
