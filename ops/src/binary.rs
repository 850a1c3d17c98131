//! Binary ops with broadcasting and comparisons: API, Cpu implementation, GPU dispatch.

use crate::dtype::WithDType;
use crate::error::Result;
use crate::layout::broadcast_shape;
use crate::tensor::{BLOCK, Tensor};
use ferrocm_host::{Arg, Device, DeviceBuffer, LaunchConfig};
use ferrocm_kernels::binary::{self as k, BinaryOp, CmpOp};

macro_rules! op_enum {
    ($(#[$doc:meta])* $enum:ident, $trait:ident, $ret:ty, $($v:ident => $name:literal;)*) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $enum { $(#[doc = $name] $v,)* }
        impl $enum {
            /// Every op of this kind.
            pub const ALL: &'static [$enum] = &[$($enum::$v,)*];
            /// The op's name in kernel names.
            pub fn name(self) -> &'static str { match self { $($enum::$v => $name,)* } }
            fn apply<T: WithDType>(self, a: T, b: T) -> $ret {
                match self { $($enum::$v => wrap::<$ret, _>(<k::$v as $trait>::apply(a.to_kernel(), b.to_kernel())),)* }
            }
        }
    };
}

/// Converts a kernel-side result (element or bool) to the host type.
trait FromKernel<K> {
    fn from_k(k: K) -> Self;
}
impl<T: WithDType> FromKernel<T::Kernel> for T {
    fn from_k(k: T::Kernel) -> Self {
        T::from_kernel(k)
    }
}
impl FromKernel<bool> for u8 {
    fn from_k(k: bool) -> Self {
        k as u8
    }
}
fn wrap<R: FromKernel<K>, K>(k: K) -> R {
    R::from_k(k)
}

op_enum!(
    /// An arithmetic binary op.
    Binary, BinaryOp, T, Add => "add"; Sub => "sub"; Mul => "mul"; Div => "div"; Maximum => "maximum"; Minimum => "minimum";
);
op_enum!(
    /// A comparison, giving a `Tensor<u8>` of 0/1.
    Cmp, CmpOp, u8, Eq => "eq"; Ne => "ne"; Lt => "lt"; Le => "le"; Gt => "gt"; Ge => "ge";
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

/// Launch arguments shared by binary-shaped kernels: contiguous fast path when
/// every input is contiguous with the output's shape.
pub(crate) fn nary_layout(
    device: &Device,
    shape: &[usize],
    layouts: &[&crate::Layout],
) -> Result<(u32, Option<DeviceBuffer<u64>>)> {
    if layouts.iter().all(|l| l.is_contiguous()) {
        return Ok((0, None));
    }
    Ok((
        shape.len() as u32,
        Some(crate::gpu::layouts_buffer(device, shape, layouts)?),
    ))
}

fn layout_arg(b: &Option<DeviceBuffer<u64>>) -> Arg<'_> {
    b.as_ref().map(Arg::input).unwrap_or(Arg::Null)
}

impl<T: WithDType> Tensor<T> {
    fn binary_into<R: WithDType>(
        &self,
        rhs: &Self,
        kernel: String,
        op: &'static str,
        f: impl Fn(T, T) -> R + Sync,
    ) -> Result<Tensor<R>> {
        let (shape, a, b) = broadcast_pair(op, self, rhs)?;
        let n = shape.iter().product::<usize>();
        let dev = a.device().clone();
        let mut out = dev.alloc::<R>(n)?;
        if dev.runs_kernels() {
            if n > 0 {
                let (ndim, lb) = nary_layout(&dev, &shape, &[&a.layout, &b.layout])?;
                dev.launch(
                    &kernel,
                    LaunchConfig::linear(n as u64, BLOCK),
                    &[
                        Arg::output(&out),
                        Arg::input_at(&a.storage, a.layout.offset()),
                        Arg::input_at(&b.storage, b.layout.offset()),
                        Arg::U64(n as u64),
                        Arg::U32(ndim),
                        layout_arg(&lb),
                    ],
                )?;
            }
        } else {
            let (sa, sb) = (crate::cpu::host(&a.storage), crate::cpu::host(&b.storage));
            crate::cpu::map_strided_n(
                out.as_mut_slice().unwrap_or_default(),
                [&a.layout, &b.layout],
                |[i, j]| f(sa[i], sb[j]),
            );
        }
        Ok(Tensor::from_parts(out, &shape))
    }

    /// `op(self, rhs)` elementwise with broadcasting.
    ///
    /// ```
    /// use ferrocm_ops::{Binary, Device, Tensor};
    /// let dev = Device::emulator(32);
    /// let a = Tensor::from_slice(&[1i64, 2, 3, 4], &[2, 2], &dev)?;
    /// let b = Tensor::from_slice(&[10i64, 20], &[2], &dev)?; // broadcast over rows
    /// assert_eq!(a.binary(&b, Binary::Mul)?.to_vec()?, vec![10, 40, 30, 80]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    pub fn binary(&self, rhs: &Self, op: Binary) -> Result<Self> {
        self.binary_into(
            rhs,
            format!("binary_{}_{}", op.name(), T::DTYPE),
            op.name(),
            move |x, y| op.apply::<T>(x, y),
        )
    }

    /// `op(self, rhs)` elementwise with broadcasting, as 0/1 bytes.
    ///
    /// ```
    /// use ferrocm_ops::{Cmp, Device, Tensor};
    /// let a = Tensor::from_slice(&[1.0f32, 5.0], &[2], &Device::Cpu)?;
    /// let b = Tensor::from_slice(&[3.0f32], &[1], &Device::Cpu)?;
    /// assert_eq!(a.cmp(&b, Cmp::Lt)?.to_vec()?, vec![1, 0]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    pub fn cmp(&self, rhs: &Self, op: Cmp) -> Result<Tensor<u8>> {
        self.binary_into(
            rhs,
            format!("cmp_{}_{}", op.name(), T::DTYPE),
            op.name(),
            move |x, y| op.apply::<T>(x, y),
        )
    }
}

macro_rules! binary_methods {
    ($($m:ident => $f:ident($v:expr) -> $r:ty),*) => {
        impl<T: WithDType> Tensor<T> {$(
            #[doc = concat!("Elementwise `", stringify!($m), "` with broadcasting.")]
            pub fn $m(&self, rhs: &Self) -> Result<$r> {
                self.$f(rhs, $v)
            }
        )*}
    };
}

binary_methods!(add => binary(Binary::Add) -> Tensor<T>, sub => binary(Binary::Sub) -> Tensor<T>,
    mul => binary(Binary::Mul) -> Tensor<T>, div => binary(Binary::Div) -> Tensor<T>,
    maximum => binary(Binary::Maximum) -> Tensor<T>, minimum => binary(Binary::Minimum) -> Tensor<T>,
    eq => cmp(Cmp::Eq) -> Tensor<u8>, ne => cmp(Cmp::Ne) -> Tensor<u8>, lt => cmp(Cmp::Lt) -> Tensor<u8>,
    le => cmp(Cmp::Le) -> Tensor<u8>, gt => cmp(Cmp::Gt) -> Tensor<u8>, ge => cmp(Cmp::Ge) -> Tensor<u8>);
