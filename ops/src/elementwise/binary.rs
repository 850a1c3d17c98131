//! Binary ops with broadcasting and comparisons: API, Cpu implementation,
//! kernel path.

use crate::core::dtype::WithDType;
use crate::core::error::Result;
use crate::core::layout::broadcast_shape;
use crate::core::tensor::{BLOCK, Tensor};
use crate::engine::kernels::Strided;
use crate::engine::{self, Op};
use ferrocm_host::{Device, DeviceBuffer, LaunchConfig, Out};
use ferrocm_kernels::binary::{self as k, BinaryKernel, BinaryKernels, CmpKernel};
use std::marker::PhantomData;

macro_rules! op_enum {
    ($(#[$doc:meta])* $enum:ident, $method:ident -> $ret:ty, $($v:ident => $name:literal;)*) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum $enum { $(#[doc = $name] $v,)* }
        impl $enum {
            /// Every op of this kind.
            pub const ALL: &'static [$enum] = &[$($enum::$v,)*];
            /// The op's name (as in its kernels' names).
            pub fn name(self) -> &'static str { match self { $($enum::$v => $name,)* } }
            /// Runs the op: the one place the run-time op picks its type.
            fn apply<T: WithDType>(self, a: &Tensor<T>, b: &Tensor<T>) -> Result<Tensor<$ret>> {
                match self { $($enum::$v => a.$method::<k::$v>(b, self.name()),)* }
            }
        }
    };
}

op_enum!(
    /// An arithmetic binary op.
    Binary, binary_op -> T, Add => "add"; Sub => "sub"; Mul => "mul"; Div => "div"; Maximum => "maximum"; Minimum => "minimum";
);
op_enum!(
    /// A comparison, giving a `Tensor<u8>` of 0/1.
    Cmp, cmp_op -> u8, Eq => "eq"; Ne => "ne"; Lt => "lt"; Le => "le"; Gt => "gt"; Ge => "ge";
);

/// Broadcasts two tensors to their common shape (views).
pub(crate) fn broadcast_pair<A: WithDType, B: WithDType>(
    op: &'static str,
    a: &Tensor<A>,
    b: &Tensor<B>,
) -> Result<(Vec<usize>, Tensor<A>, Tensor<B>)> {
    a.same_device(op, b)?;
    let shape = broadcast_shape(op, a.shape(), b.shape())?;
    Ok((
        shape.clone(),
        a.broadcast_as(&shape)?,
        b.broadcast_as(&shape)?,
    ))
}

impl<T: WithDType> Tensor<T> {
    /// `op(self, rhs)` elementwise with broadcasting.
    ///
    /// ```
    /// # use ferrocm_ops::WaveSize;
    /// use ferrocm_ops::{Binary, Device, Tensor};
    /// let dev = Device::emulator(WaveSize::Wave32);
    /// let a = Tensor::from_slice(&[1i64, 2, 3, 4], &[2, 2], &dev)?;
    /// let b = Tensor::from_slice(&[10i64, 20], &[2], &dev)?; // broadcast over rows
    /// assert_eq!(a.binary(&b, Binary::Mul)?.to_vec()?, vec![10, 40, 30, 80]);
    /// assert_eq!(a.binary(&b, Binary::Sub)?.to_vec()?, vec![-9, -18, -7, -16]);
    /// assert!(a.binary(&Tensor::zeros(&[3], &dev)?, Binary::Add).is_err()); // [2, 2] and [3]
    /// let c = Tensor::from_slice(&[1i64], &[1], &Device::Cpu)?;
    /// assert!(a.binary(&c, Binary::Add).is_err()); // another device
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::DeviceMismatch`](crate::Error::DeviceMismatch) across devices;
    /// [`Error::BroadcastIncompatible`](crate::Error::BroadcastIncompatible)
    /// when the shapes do not broadcast; [`Error::TooLarge`](crate::Error::TooLarge)
    /// when the broadcast element count overflows;
    /// [`Error::Host`](crate::Error::Host) when allocation or the launch fails.
    pub fn binary(&self, rhs: &Self, op: Binary) -> Result<Self> {
        op.apply(self, rhs)
    }

    /// `op(self, rhs)` elementwise with broadcasting, as 0/1 bytes.
    ///
    /// ```
    /// use ferrocm_ops::{Cmp, Device, Tensor};
    /// let a = Tensor::from_slice(&[1.0f32, 5.0], &[2], &Device::Cpu)?;
    /// let b = Tensor::from_slice(&[3.0f32], &[1], &Device::Cpu)?;
    /// assert_eq!(a.cmp(&b, Cmp::Lt)?.to_vec()?, vec![1, 0]);
    /// assert_eq!(a.cmp(&b, Cmp::Ge)?.to_vec()?, vec![0, 1]);
    /// let n = Tensor::from_slice(&[f32::NAN], &[1], &Device::Cpu)?;
    /// assert_eq!(a.cmp(&n, Cmp::Eq)?.to_vec()?, vec![0, 0]); // NaN equals nothing
    /// assert_eq!(a.cmp(&n, Cmp::Ne)?.to_vec()?, vec![1, 1]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Tensor::binary`]: [`Error::DeviceMismatch`](crate::Error::DeviceMismatch),
    /// [`Error::BroadcastIncompatible`](crate::Error::BroadcastIncompatible),
    /// [`Error::TooLarge`](crate::Error::TooLarge), [`Error::Host`](crate::Error::Host).
    pub fn cmp(&self, rhs: &Self, op: Cmp) -> Result<Tensor<u8>> {
        op.apply(self, rhs)
    }

    fn binary_op<O: BinaryKernel>(&self, rhs: &Self, name: &'static str) -> Result<Self> {
        self.zip::<T, Arith<O>>(rhs, name)
    }

    /// `F(self, rhs)` elementwise with broadcasting, into a new tensor: the
    /// arithmetic ops, the comparisons and the gated activations.
    pub(crate) fn zip<R: WithDType, F: ZipFn<T, R>>(
        &self,
        rhs: &Self,
        name: &'static str,
    ) -> Result<Tensor<R>> {
        let (shape, a, b) = broadcast_pair(name, self, rhs)?;
        let dev = a.device();
        let out = dev.alloc::<R>(shape.iter().product())?;
        let op = Zip::<T, R, F> {
            name,
            a: &a,
            b: &b,
            out,
            _op: PhantomData,
        };
        Ok(Tensor::from_parts(engine::run(dev, op)?, &shape))
    }

    fn cmp_op<O: CmpKernel>(&self, rhs: &Self, name: &'static str) -> Result<Tensor<u8>> {
        self.zip::<u8, Compare<O>>(rhs, name)
    }
}

/// An elementwise function of two `T`s into an `R`, with its kernel per dtype:
/// what [`Zip`] needs to run both an arithmetic op and a comparison.
pub(crate) trait ZipFn<T: WithDType, R: WithDType> {
    /// What a fault of this op is ("" for an op that cannot fault).
    const FAULT: &'static str = "";
    /// Whether `apply(a, b)` is a fault (integer division by zero).
    #[inline(always)]
    fn faults(_a: T, _b: T) -> bool {
        false
    }
    fn apply(a: T, b: T) -> R;
    fn launch(
        dev: &Device,
        name: &'static str,
        cfg: LaunchConfig,
        args: ZipArgs<'_, T::Kernel, R::Kernel>,
    ) -> Result<()>;
}

pub(crate) type ZipArgs<'a, K, R> = (
    Out<'a, R>,
    ferrocm_host::In<'a, K>,
    ferrocm_host::In<'a, K>,
    u64,
    u32,
    ferrocm_host::In<'a, u64>,
    u64,
    u64,
    u64,
    u64,
    u64,
    u64,
);

struct Arith<O>(PhantomData<O>);
struct Compare<O>(PhantomData<O>);

impl<T: WithDType, O: BinaryKernel> ZipFn<T, T> for Arith<O> {
    const FAULT: &'static str = O::FAULT;
    #[inline(always)]
    fn faults(a: T, b: T) -> bool {
        O::faults(a.to_kernel(), b.to_kernel())
    }
    #[inline(always)]
    fn apply(a: T, b: T) -> T {
        T::from_kernel(O::apply(a.to_kernel(), b.to_kernel()))
    }
    fn launch(
        dev: &Device,
        name: &'static str,
        cfg: LaunchConfig,
        args: ZipArgs<'_, T::Kernel, T::Kernel>,
    ) -> Result<()> {
        let (out, a, b, n, ndim, layout, d0, d1, a0, a1, b0, b1) = args;
        // Only an op that can fault on this dtype reports through the
        // device's status words (and makes the next wait read them).
        let can_fault = !O::FAULT.is_empty() && !T::DTYPE.is_float();
        let channel = match can_fault {
            true => Some(dev.fault_channel(name, O::FAULT)?),
            false => None,
        };
        let (status, tag) = match &channel {
            Some(c) => (c.status(), c.tag()),
            None => (Out::null(), 0),
        };
        let args = (
            out, a, b, n, ndim, layout, d0, d1, a0, a1, b0, b1, status, tag,
        );
        Ok(dev.launch_typed(T::Kernel::binary::<O>(), cfg, args)?)
    }
}

impl<T: WithDType, O: CmpKernel> ZipFn<T, u8> for Compare<O> {
    #[inline(always)]
    fn apply(a: T, b: T) -> u8 {
        O::apply(a.to_kernel(), b.to_kernel()) as u8
    }
    fn launch(
        dev: &Device,
        _name: &'static str,
        cfg: LaunchConfig,
        args: ZipArgs<'_, T::Kernel, u8>,
    ) -> Result<()> {
        Ok(dev.launch_typed(T::Kernel::cmp::<O>(), cfg, args)?)
    }
}

/// [`ZipFn`] `F` as the Cpu's per-element function; notes a fault.
struct ZipCall<F> {
    faulted: std::sync::atomic::AtomicBool,
    _f: PhantomData<fn() -> F>,
}

impl<T: WithDType, R: WithDType, F: ZipFn<T, R>> crate::engine::cpu::Func2<T, T, R> for ZipCall<F> {
    #[inline(always)]
    fn call(&self, a: T, b: T) -> R {
        if F::faults(a, b) {
            self.faulted
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        F::apply(a, b)
    }
}

/// `out[i] = F(a[i], b[i])` over two tensors of the output's shape (broadcast views).
struct Zip<'a, T: WithDType, R: WithDType, F> {
    name: &'static str,
    a: &'a Tensor<T>,
    b: &'a Tensor<T>,
    out: DeviceBuffer<R>,
    _op: PhantomData<F>,
}

impl<T: WithDType, R: WithDType, F: ZipFn<T, R>> Op for Zip<'_, T, R, F> {
    type Output = DeviceBuffer<R>;

    fn cpu(mut self) -> Result<DeviceBuffer<R>> {
        let (sa, sb) = (
            crate::engine::cpu::host(self.a.buf()),
            crate::engine::cpu::host(self.b.buf()),
        );
        let f = ZipCall::<F> {
            faulted: false.into(),
            _f: PhantomData,
        };
        crate::engine::cpu::map2(
            crate::engine::cpu::host_mut(&mut self.out),
            (sa, &self.a.layout),
            (sb, &self.b.layout),
            &f,
        );
        if f.faulted.into_inner() {
            // The first element at fault, found again in order (an error path).
            let index = (0..self.a.elem_count())
                .find(|&i| {
                    F::faults(
                        sa[self.a.layout.offset_of(i)],
                        sb[self.b.layout.offset_of(i)],
                    )
                })
                .unwrap_or(0);
            return Err(ferrocm_host::Error::Fault {
                op: self.name.into(),
                what: F::FAULT.into(),
                index: index as u64,
                device: Device::Cpu.to_string(),
            }
            .into());
        }
        Ok(self.out)
    }

    fn kernels(self, dev: &Device) -> Result<DeviceBuffer<R>> {
        let n = self.out.len() as u64;
        if n > 0 {
            let s = Strided::new(dev, self.a.shape(), [&self.a.layout, &self.b.layout])?;
            let ([d0, d1], [a0, a1], [b0, b1]) = (s.dims(), s.strides(0), s.strides(1));
            let out = self.out.view_as::<R::Kernel>().expect("same size");
            F::launch(
                dev,
                self.name,
                LaunchConfig::chunked_for(n, size_of::<T>().max(size_of::<R>()), BLOCK),
                (
                    Out::new(out),
                    self.a.input(),
                    self.b.input(),
                    n,
                    s.ndim(),
                    s.arg(),
                    d0,
                    d1,
                    a0,
                    a1,
                    b0,
                    b1,
                ),
            )?;
        }
        Ok(self.out)
    }
}

macro_rules! binary_methods {
    ($($m:ident => $f:ident($v:expr) -> $r:ty $([$errors:literal])?),*) => {
        impl<T: WithDType> Tensor<T> {$(
            #[doc = concat!("Elementwise `", stringify!($m), "` with broadcasting.")]
            ///
            /// ```
            /// use ferrocm_ops::{Device, Tensor};
            /// let a = Tensor::from_slice(&[1.0f32, 6.0, -2.0, 4.0], &[2, 2], &Device::Cpu)?;
            /// let b = Tensor::from_slice(&[2.0f32, 4.0], &[2], &Device::Cpu)?; // broadcast over the rows
            #[doc = concat!("let c = a.", stringify!($m), "(&b)?;")]
            /// assert_eq!(c.shape(), &[2, 2]);
            /// // `want` (hidden): the op on the pairs (1, 2), (6, 4), (-2, 2), (4, 4).
            #[doc = concat!("# let want: Vec<f64> = match \"", stringify!($m), "\" {")]
            /// #     "add" => vec![3.0, 10.0, 0.0, 8.0],
            /// #     "sub" => vec![-1.0, 2.0, -4.0, 0.0],
            /// #     "mul" => vec![2.0, 24.0, -4.0, 16.0],
            /// #     "div" => vec![0.5, 1.5, -1.0, 1.0],
            /// #     "maximum" => vec![2.0, 6.0, 2.0, 4.0],
            /// #     "minimum" => vec![1.0, 4.0, -2.0, 4.0],
            /// #     "eq" => vec![0.0, 0.0, 0.0, 1.0],
            /// #     "ne" => vec![1.0, 1.0, 1.0, 0.0],
            /// #     "lt" => vec![1.0, 0.0, 1.0, 0.0],
            /// #     "le" => vec![1.0, 0.0, 1.0, 1.0],
            /// #     "gt" => vec![0.0, 1.0, 0.0, 0.0],
            /// #     "ge" => vec![0.0, 1.0, 0.0, 1.0],
            /// #     _ => unreachable!(),
            /// # };
            /// assert_eq!(c.to_vec()?.iter().map(|&v| v as f64).collect::<Vec<f64>>(), want);
            #[doc = concat!("assert!(a.", stringify!($m), "(&Tensor::zeros(&[3], &Device::Cpu)?).is_err()); // [2, 2] and [3]")]
            /// # Ok::<(), ferrocm_ops::Error>(())
            /// ```
            ///
            /// # Errors
            /// As [`Tensor::binary`]: [`Error::DeviceMismatch`](crate::Error::DeviceMismatch),
            /// [`Error::BroadcastIncompatible`](crate::Error::BroadcastIncompatible),
            /// [`Error::TooLarge`](crate::Error::TooLarge), [`Error::Host`](crate::Error::Host).
            $(#[doc = ""] #[doc = $errors])?
            pub fn $m(&self, rhs: &Self) -> Result<$r> {
                self.$f(rhs, $v)
            }
        )*}
    };
}

binary_methods!(add => binary(Binary::Add) -> Tensor<T>, sub => binary(Binary::Sub) -> Tensor<T>,
    mul => binary(Binary::Mul) -> Tensor<T>, div => binary(Binary::Div) -> Tensor<T> ["An integer division by zero is [`Error::Host`](crate::Error::Host) holding `HostError::Fault` for op `div`: returned by the call on the Cpu, by the next wait (`to_vec`, `synchronize`) on a kernel device, whose result must not be used. Floats follow IEEE 754 (±inf, NaN)."],
    maximum => binary(Binary::Maximum) -> Tensor<T>, minimum => binary(Binary::Minimum) -> Tensor<T>,
    eq => cmp(Cmp::Eq) -> Tensor<u8>, ne => cmp(Cmp::Ne) -> Tensor<u8>, lt => cmp(Cmp::Lt) -> Tensor<u8>,
    le => cmp(Cmp::Le) -> Tensor<u8>, gt => cmp(Cmp::Gt) -> Tensor<u8>, ge => cmp(Cmp::Ge) -> Tensor<u8>);

macro_rules! scalar_methods {
    ($($m:ident => $op:ident $([$errors:literal])?),*) => {
        impl<T: WithDType> Tensor<T> {$(
            #[doc = concat!("Elementwise `", stringify!($op), "` with the scalar `rhs` (broadcast; every dtype, integers wrap).")]
            ///
            /// ```
            /// use ferrocm_ops::{Device, Tensor};
            /// let x = Tensor::from_slice(&[1u32, 6], &[2], &Device::Cpu)?;
            #[doc = concat!("assert_eq!(x.", stringify!($m), "(2)?.shape(), &[2]);")]
            /// // `want` (hidden): the op on (1, 2) and (6, 2); u32 wraps below 0.
            #[doc = concat!("# let want: Vec<u32> = match \"", stringify!($m), "\" {")]
            /// #     "add_scalar" => vec![3, 8],
            /// #     "sub_scalar" => vec![u32::MAX, 4],
            /// #     "mul_scalar" => vec![2, 12],
            /// #     "div_scalar" => vec![0, 3],
            /// #     "maximum_scalar" => vec![2, 6],
            /// #     "minimum_scalar" => vec![1, 2],
            /// #     _ => unreachable!(),
            /// # };
            #[doc = concat!("assert_eq!(x.", stringify!($m), "(2)?.to_vec()?, want);")]
            /// # Ok::<(), ferrocm_ops::Error>(())
            /// ```
            ///
            /// # Errors
            /// Device errors (allocation) only: [`Error::Host`](crate::Error::Host)
            /// when allocation or the launch fails.
            $(#[doc = ""] #[doc = $errors])?
            pub fn $m(&self, rhs: T) -> Result<Self> {
                let s = Tensor::full(rhs, &[], self.device())?;
                self.binary(&s, Binary::$op)
            }
        )*}
    };
}

scalar_methods!(add_scalar => Add, sub_scalar => Sub, mul_scalar => Mul, div_scalar => Div ["An integer division by zero is [`Error::Host`](crate::Error::Host) holding `HostError::Fault` for op `div`: returned by the call on the Cpu, by the next wait (`to_vec`, `synchronize`) on a kernel device, whose result must not be used. Floats follow IEEE 754 (±inf, NaN)."],
    maximum_scalar => Maximum, minimum_scalar => Minimum);

impl<T: WithDType> Tensor<T> {
    /// Each element limited to `[min, max]`: `minimum(maximum(x, min), max)`,
    /// PyTorch's `clamp` on every dtype. As there, `min > max` gives `max`
    /// everywhere and a NaN (element or bound) stays NaN; one bound alone is
    /// [`Tensor::maximum_scalar`] or [`Tensor::minimum_scalar`].
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let x = Tensor::from_slice(&[-2.0f32, 0.5, 7.0, f32::NAN], &[4], &Device::Cpu)?;
    /// let y = x.clamp(0.0, 1.0)?.to_vec()?;
    /// assert_eq!(&y[..3], &[0.0, 0.5, 1.0]);
    /// assert!(y[3].is_nan());
    /// let i = Tensor::from_slice(&[3i64, -9, 40], &[3], &Device::Cpu)?;
    /// assert_eq!(i.clamp(-5, 10)?.to_vec()?, vec![3, -5, 10]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Host`](crate::Error::Host) when allocation or a launch fails.
    pub fn clamp(&self, min: T, max: T) -> Result<Self> {
        self.maximum_scalar(min)?.minimum_scalar(max)
    }
}

macro_rules! scalar_cmp_methods {
    ($($m:ident => $op:ident),*) => {
        impl<T: WithDType> Tensor<T> {$(
            #[doc = concat!("Elementwise `", stringify!($op), "` against the scalar `rhs`, as 0/1 bytes (NaN compares as in [`Tensor::cmp`]).")]
            ///
            /// ```
            /// use ferrocm_ops::{Device, Tensor};
            /// let x = Tensor::from_slice(&[1.0f32, 2.0, f32::NAN], &[3], &Device::Cpu)?;
            /// // `want` (hidden): the comparison of 1, 2 and NaN with 2.
            #[doc = concat!("# let want: Vec<u8> = match \"", stringify!($m), "\" {")]
            /// #     "eq_scalar" => vec![0, 1, 0],
            /// #     "ne_scalar" => vec![1, 0, 1],
            /// #     "lt_scalar" => vec![1, 0, 0],
            /// #     "le_scalar" => vec![1, 1, 0],
            /// #     "gt_scalar" => vec![0, 0, 0],
            /// #     "ge_scalar" => vec![0, 1, 0],
            /// #     _ => unreachable!(),
            /// # };
            #[doc = concat!("assert_eq!(x.", stringify!($m), "(2.0)?.to_vec()?, want);")]
            /// # Ok::<(), ferrocm_ops::Error>(())
            /// ```
            ///
            /// # Errors
            /// [`Error::Host`](crate::Error::Host) when allocation or the
            /// launch fails.
            pub fn $m(&self, rhs: T) -> Result<Tensor<u8>> {
                let s = Tensor::full(rhs, &[], self.device())?;
                self.cmp(&s, Cmp::$op)
            }
        )*}
    };
}

scalar_cmp_methods!(eq_scalar => Eq, ne_scalar => Ne, lt_scalar => Lt, le_scalar => Le,
    gt_scalar => Gt, ge_scalar => Ge);

/// `std::ops` on tensors, as candle has them: `&a + &b`, `&a * 2.0`, `-&a`.
/// An op that can fail returns `Result<Tensor<T>>` (shapes that do not
/// broadcast, tensors on different devices, a full device), so chains read
/// `((&a + &b)? * 2.0)?`.
///
/// ```
/// use ferrocm_ops::{Device, Tensor};
/// let dev = Device::Cpu;
/// let a = Tensor::from_slice(&[1.0f32, 2.0], &[2], &dev)?;
/// let b = Tensor::from_slice(&[10.0f32], &[1], &dev)?;
/// let c = ((&a + &b)? * 2.0)?;
/// assert_eq!(c.to_vec()?, vec![22.0, 24.0]);
/// assert_eq!((-&a)?.to_vec()?, vec![-1.0, -2.0]);
/// assert!((&a + &Tensor::zeros(&[3], &dev)?).is_err()); // [2] and [3] do not broadcast
/// # Ok::<(), ferrocm_ops::Error>(())
/// ```
mod operators {
    use super::*;
    use std::ops::{Add, Div, Mul, Neg, Sub};

    macro_rules! tensor_op {
        ($($tr:ident $f:ident => $m:ident, $s:ident;)*) => {$(
            impl<T: WithDType> $tr<&Tensor<T>> for &Tensor<T> {
                type Output = Result<Tensor<T>>;
                fn $f(self, rhs: &Tensor<T>) -> Result<Tensor<T>> {
                    Tensor::$m(self, rhs)
                }
            }
            impl<T: WithDType> $tr<Tensor<T>> for Tensor<T> {
                type Output = Result<Tensor<T>>;
                fn $f(self, rhs: Tensor<T>) -> Result<Tensor<T>> {
                    Tensor::$m(&self, &rhs)
                }
            }
            impl<T: WithDType> $tr<T> for &Tensor<T> {
                type Output = Result<Tensor<T>>;
                fn $f(self, rhs: T) -> Result<Tensor<T>> {
                    self.$s(rhs)
                }
            }
            impl<T: WithDType> $tr<T> for Tensor<T> {
                type Output = Result<Tensor<T>>;
                fn $f(self, rhs: T) -> Result<Tensor<T>> {
                    self.$s(rhs)
                }
            }
            /// Chains: `(a + b)? ...` needs no `?` in between when the left side is a `Result`.
            impl<T: WithDType> $tr<&Tensor<T>> for Result<Tensor<T>> {
                type Output = Result<Tensor<T>>;
                fn $f(self, rhs: &Tensor<T>) -> Result<Tensor<T>> {
                    Tensor::$m(&self?, rhs)
                }
            }
        )*};
    }

    tensor_op! {
        Add add => add, add_scalar;
        Sub sub => sub, sub_scalar;
        Mul mul => mul, mul_scalar;
        Div div => div, div_scalar;
    }

    impl<T: WithDType> Neg for &Tensor<T> {
        type Output = Result<Tensor<T>>;
        /// `0 - x` for every dtype (wrapping for unsigned integers; -0.0 for 0.0 is kept by `neg()`, the float op).
        fn neg(self) -> Result<Tensor<T>> {
            if T::DTYPE.is_float() {
                self.unary(crate::Unary::Neg, 0.0)
            } else {
                Tensor::sub(&Tensor::zeros(&[], self.device())?, self)
            }
        }
    }

    impl<T: WithDType> Neg for Tensor<T> {
        type Output = Result<Tensor<T>>;
        fn neg(self) -> Result<Tensor<T>> {
            -&self
        }
    }
}
