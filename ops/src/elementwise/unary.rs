//! Unary ops and affine: API, Cpu implementation, kernel path.
//!
//! The scalar math of each op is `ferrocm_kernels::unary::apply_for` (one
//! definition for the kernels and the Cpu backend: the op's `apply`, or its
//! `apply_half` where the result is f16/bf16), monomorphised per op on both
//! sides: no function pointer per element.

use crate::core::dtype::WithDType;
use crate::core::error::{Error, Result};
use crate::core::tensor::Tensor;
use crate::engine::kernels::map1;
use crate::engine::{self, Op};
use ferrocm_host::{Device, DeviceBuffer};
use ferrocm_kernels::affine::AffineKernels;
use ferrocm_kernels::elem::Elem;
use ferrocm_kernels::unary::{self as k, UnaryKernel, UnaryKernels, apply_for};
use std::marker::PhantomData;

macro_rules! unary_enum {
    ($($v:ident($m:ident $(: $param:ident)?) => $f32:ident, $f16:ident, $bf16:ident;)*) => {
        /// A unary elementwise op (float dtypes). The ops, their kernels and
        /// their `Tensor` methods all come from one list,
        /// [`ferrocm_kernels::unary_op_list!`]; each op's formula is on its
        /// struct in [`ferrocm_kernels::unary`].
        ///
        /// ```
        /// # use ferrocm_ops::WaveSize;
        /// use ferrocm_ops::{Device, Tensor, Unary};
        /// let x = Tensor::from_slice(&[-2.0f32, 3.0], &[2], &Device::emulator(WaveSize::Wave64))?;
        /// assert_eq!(x.leaky_relu(0.5)?.to_vec()?, vec![-1.0, 3.0]);
        /// assert_eq!(x.unary(Unary::Relu, 0.0)?.to_vec()?, vec![0.0, 3.0]);
        /// assert_eq!(Unary::LeakyRelu.name(), "leaky_relu");
        /// # Ok::<(), ferrocm_ops::Error>(())
        /// ```
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum Unary { $(#[doc = concat!("`", stringify!($m), "`: see [`ferrocm_kernels::unary::", stringify!($v), "`]")] $v,)* }

        impl Unary {
            /// Every unary op.
            pub const ALL: &'static [Unary] = &[$(Unary::$v,)*];

            /// The op's name (as in its kernels' names, `unary_{name}_{dtype}`).
            pub fn name(self) -> &'static str {
                match self { $(Unary::$v => stringify!($m),)* }
            }

            /// Runs the op: the one place the run-time op picks its type.
            fn apply<T: WithDType>(self, x: &Tensor<T>, p: f32) -> Result<Tensor<T>> {
                match self { $(Unary::$v => x.unary_op::<k::$v>(self.name(), p),)* }
            }
        }

        impl<T: WithDType> Tensor<T> {
            $(unary_method!($v, $m $(, $param)?);)*
        }
    };
}

macro_rules! unary_method {
    ($v:ident, $m:ident) => {
        #[doc = concat!("Elementwise `", stringify!($m), "` (float dtypes; [`ferrocm_kernels::unary::", stringify!($v), "`] gives the formula).")]
        ///
        /// ```
        /// use ferrocm_kernels::unary::UnaryOp;
        /// use ferrocm_ops::{Device, Tensor};
        /// let x = Tensor::from_slice(&[-2.0f32, 0.25, 1.0, 2.5], &[2, 2], &Device::Cpu)?;
        #[doc = concat!("let y = x.", stringify!($m), "()?;")]
        /// assert_eq!(y.shape(), &[2, 2]);
        /// // Each element is the formula applied to the input element.
        /// for (a, b) in x.to_vec()?.into_iter().zip(y.to_vec()?) {
        #[doc = concat!("    let want = ferrocm_kernels::unary::", stringify!($v), "::apply(a, 0.0);")]
        ///     assert!((b - want).abs() <= 1e-6 * want.abs() || (b.is_nan() && want.is_nan()));
        /// }
        #[doc = concat!("assert!(Tensor::<u32>::zeros(&[2], &Device::Cpu)?.", stringify!($m), "().is_err()); // integers")]
        /// # Ok::<(), ferrocm_ops::Error>(())
        /// ```
        ///
        /// # Errors
        /// [`Error::UnsupportedDType`] for integer dtypes; [`Error::Host`] when
        /// allocation or the launch fails.
        pub fn $m(&self) -> Result<Self> {
            self.unary(Unary::$v, 0.0)
        }
    };
    ($v:ident, $m:ident, $param:ident) => {
        #[doc = concat!("Elementwise `", stringify!($m), "` with `", stringify!($param), "` (float dtypes; [`ferrocm_kernels::unary::", stringify!($v), "`] gives the formula).")]
        ///
        /// ```
        /// use ferrocm_kernels::unary::UnaryOp;
        /// use ferrocm_ops::{Device, Tensor};
        /// let x = Tensor::from_slice(&[-2.0f32, 0.25, 1.0, 2.5], &[2, 2], &Device::Cpu)?;
        #[doc = concat!("let y = x.", stringify!($m), "(0.5)?; // ", stringify!($param), " = 0.5")]
        /// assert_eq!(y.shape(), &[2, 2]);
        /// // Each element is the formula applied to the input element.
        /// for (a, b) in x.to_vec()?.into_iter().zip(y.to_vec()?) {
        #[doc = concat!("    let want = ferrocm_kernels::unary::", stringify!($v), "::apply(a, 0.5);")]
        ///     assert!((b - want).abs() <= 1e-6 * want.abs() || (b.is_nan() && want.is_nan()));
        /// }
        #[doc = concat!("assert!(Tensor::<u32>::zeros(&[2], &Device::Cpu)?.", stringify!($m), "(0.5).is_err()); // integers")]
        /// # Ok::<(), ferrocm_ops::Error>(())
        /// ```
        ///
        /// # Errors
        /// [`Error::UnsupportedDType`] for integer dtypes; [`Error::Host`] when
        /// allocation or the launch fails.
        pub fn $m(&self, $param: f32) -> Result<Self> {
            self.unary(Unary::$v, $param)
        }
    };
}

ferrocm_kernels::unary_op_list!(unary_enum);

impl<T: WithDType> Tensor<T> {
    /// Applies `op` with scalar parameter `p` (the exponent of powf, alpha of
    /// elu, the negative slope of leaky_relu; ignored by the others).
    ///
    /// ```
    /// # use ferrocm_ops::WaveSize;
    /// use ferrocm_ops::{Device, Tensor, Unary};
    /// let x = Tensor::from_slice(&[1.0f32, 4.0], &[2], &Device::emulator(WaveSize::Wave32))?;
    /// assert_eq!(x.unary(Unary::Sqrt, 0.0)?.to_vec()?, vec![1.0, 2.0]);
    /// assert_eq!(x.unary(Unary::Powf, 3.0)?.to_vec()?, vec![1.0, 64.0]);
    /// let y = Tensor::from_slice(&[-2.0f32, 2.0], &[2], &Device::Cpu)?;
    /// assert_eq!(y.unary(Unary::LeakyRelu, 0.25)?.to_vec()?, vec![-0.5, 2.0]);
    /// assert!(Tensor::from_slice(&[1u8], &[1], &Device::Cpu)?.unary(Unary::Exp, 0.0).is_err());
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::UnsupportedDType`] for integer dtypes; [`Error::Host`] when
    /// allocation or the launch fails.
    pub fn unary(&self, op: Unary, p: f32) -> Result<Self> {
        op.apply(self, p)
    }

    fn unary_op<U: UnaryKernel>(&self, name: &'static str, p: f32) -> Result<Self> {
        if !T::DTYPE.is_float() {
            return Err(Error::UnsupportedDType {
                op: name,
                dtype: T::DTYPE,
            });
        }
        let dev = self.device();
        let out = dev.alloc::<T>(self.elem_count())?;
        let op = UnaryMap::<T, U> {
            name,
            x: self,
            p,
            out,
            _op: PhantomData,
        };
        Ok(Tensor::from_parts(engine::run(dev, op)?, self.shape()))
    }

    /// `x * mul + add` elementwise (every dtype; integers wrap).
    ///
    /// ```
    /// # use ferrocm_ops::WaveSize;
    /// use ferrocm_ops::{Device, Tensor};
    /// let x = Tensor::from_slice(&[1u32, 2], &[2], &Device::emulator(WaveSize::Wave64))?;
    /// assert_eq!(x.affine(3.0, 1.0)?.to_vec()?, vec![4, 7]);
    /// let f = Tensor::from_slice(&[0.5f32, -1.0], &[2], &Device::Cpu)?;
    /// assert_eq!(f.affine(2.0, 0.5)?.to_vec()?, vec![1.5, -1.5]);
    /// let b = Tensor::from_slice(&[200u8], &[1], &Device::Cpu)?;
    /// assert_eq!(b.affine(2.0, 1.0)?.to_vec()?, vec![145]); // 400 wraps to 144, plus 1
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Host`] when allocation or the launch fails (every dtype is
    /// supported).
    pub fn affine(&self, mul: f32, add: f32) -> Result<Self> {
        let dev = self.device();
        let out = dev.alloc::<T>(self.elem_count())?;
        let op = AffineMap {
            x: self,
            mul,
            add,
            out,
        };
        Ok(Tensor::from_parts(engine::run(dev, op)?, self.shape()))
    }
}

/// One unary op `U` over a tensor.
struct UnaryMap<'a, T: WithDType, U> {
    name: &'static str,
    x: &'a Tensor<T>,
    p: f32,
    out: DeviceBuffer<T>,
    _op: PhantomData<U>,
}

impl<T: WithDType, U: UnaryKernel> Op for UnaryMap<'_, T, U> {
    type Output = DeviceBuffer<T>;

    fn cpu(mut self) -> Result<DeviceBuffer<T>> {
        let (src, p) = (crate::engine::cpu::host(self.x.buf()), self.p);
        let f = UnaryFn::<T, U>(p, PhantomData);
        crate::engine::cpu::map1(
            crate::engine::cpu::host_mut(&mut self.out),
            src,
            &self.x.layout,
            &f,
        );
        Ok(self.out)
    }

    fn kernels(self, dev: &Device) -> Result<DeviceBuffer<T>> {
        let kernel = T::Kernel::kernel::<U>().ok_or(Error::UnsupportedDType {
            op: self.name,
            dtype: T::DTYPE,
        })?;
        map1(
            dev,
            self.x,
            &self.out,
            |cfg, (o, x, n, nd, l, d0, d1, a0, a1)| {
                dev.launch_typed(kernel, cfg, (o, x, n, nd, l, d0, d1, a0, a1, self.p))
            },
        )?;
        Ok(self.out)
    }
}

/// `x * mul + add`.
struct AffineMap<'a, T: WithDType> {
    x: &'a Tensor<T>,
    mul: f32,
    add: f32,
    out: DeviceBuffer<T>,
}

impl<T: WithDType> Op for AffineMap<'_, T> {
    type Output = DeviceBuffer<T>;

    fn cpu(mut self) -> Result<DeviceBuffer<T>> {
        let (src, mul, add) = (crate::engine::cpu::host(self.x.buf()), self.mul, self.add);
        let f = AffineFn::<T> {
            mul,
            add,
            _t: PhantomData,
        };
        crate::engine::cpu::map1(
            crate::engine::cpu::host_mut(&mut self.out),
            src,
            &self.x.layout,
            &f,
        );
        Ok(self.out)
    }

    fn kernels(self, dev: &Device) -> Result<DeviceBuffer<T>> {
        let (mul, add) = (self.mul, self.add);
        map1(
            dev,
            self.x,
            &self.out,
            |cfg, (o, x, n, nd, l, d0, d1, a0, a1)| {
                let args = (o, x, n, nd, l, d0, d1, a0, a1, mul, add);
                dev.launch_typed(T::Kernel::AFFINE, cfg, args)
            },
        )?;
        Ok(self.out)
    }
}

/// The Cpu's per-element function of unary op `U` with parameter `p`.
struct UnaryFn<T, U>(f32, PhantomData<fn() -> (T, U)>);

impl<T: WithDType, U: UnaryKernel> crate::engine::cpu::Func1<T, T> for UnaryFn<T, U> {
    #[inline(always)]
    fn call(&self, x: T) -> T {
        T::from_kernel(T::Kernel::from_f32(apply_for::<T::Kernel, U>(
            x.to_kernel().to_f32(),
            self.0,
        )))
    }
}

/// The Cpu's per-element function of `affine`.
struct AffineFn<T> {
    mul: f32,
    add: f32,
    _t: PhantomData<fn() -> T>,
}

impl<T: WithDType> crate::engine::cpu::Func1<T, T> for AffineFn<T> {
    #[inline(always)]
    fn call(&self, x: T) -> T {
        T::from_kernel(ferrocm_kernels::affine::affine_apply(
            x.to_kernel(),
            self.mul,
            self.add,
        ))
    }
}
