//! Element types of tensors.

use ferrocm_kernels::ElemKernels;
use ferrocm_kernels::elem::{Bf16, F16};
use half::{bf16, f16};

/// The six element types.
///
/// ```
/// use ferrocm_ops::{DType, Tensor, Device};
/// let t = Tensor::<u32>::zeros(&[2], &Device::Cpu)?;
/// assert_eq!(t.dtype(), DType::U32);
/// assert_eq!(DType::ALL.len(), 6);
/// assert!(DType::BF16.is_float() && !DType::I64.is_float());
/// assert_eq!(DType::F16.size_in_bytes(), 2);
/// # Ok::<(), ferrocm_ops::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DType {
    /// 32-bit float.
    F32,
    /// IEEE half.
    F16,
    /// bfloat16.
    BF16,
    /// Byte (also the type of masks and comparison results).
    U8,
    /// 32-bit unsigned (indices).
    U32,
    /// 64-bit signed.
    I64,
}

impl DType {
    /// Every dtype (example: [`DType`]).
    pub const ALL: [DType; 6] = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::U8,
        DType::U32,
        DType::I64,
    ];

    /// The name used in kernel names (`f32`, `bf16`, ...).
    ///
    /// ```
    /// assert_eq!(ferrocm_ops::DType::BF16.as_str(), "bf16");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::U8 => "u8",
            DType::U32 => "u32",
            DType::I64 => "i64",
        }
    }

    /// Whether this is a float type (example: [`DType`]).
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16)
    }

    /// Size of one element in bytes (example: [`DType`]).
    pub fn size_in_bytes(self) -> usize {
        match self {
            DType::U8 => 1,
            DType::F16 | DType::BF16 => 2,
            DType::F32 | DType::U32 => 4,
            DType::I64 => 8,
        }
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A Rust type that can be a tensor element: f32, half::f16, half::bf16, u8, u32, i64.
///
/// ```
/// use ferrocm_ops::{DType, WithDType, bf16};
/// fn describe<T: WithDType>(x: T) -> String {
///     format!("{} {}", T::DTYPE, x.to_f64())
/// }
/// assert_eq!(describe(bf16::from_f32(1.5)), "bf16 1.5");
/// assert_eq!(u8::from_f64(3.0), 3);
/// ```
///
/// `Kernel` is the device layer's type with the same bits (f16/bf16 are bit
/// patterns there); the CPU backend computes through it so that CPU and GPU
/// share each op's scalar definition.
pub trait WithDType:
    bytemuck::Pod + Send + Sync + Copy + PartialEq + std::fmt::Debug + Default + 'static
{
    /// The dtype.
    const DTYPE: DType;
    /// The device layer's element type, with every kernel family's table
    /// for it ([`ferrocm_kernels::ElemKernels`]): how an op picks the
    /// kernel of its dtype through the type system.
    type Kernel: ElemKernels + bytemuck::Pod;
    /// To the device layer's type (same bits).
    fn to_kernel(self) -> Self::Kernel;
    /// From the device layer's type (same bits).
    fn from_kernel(k: Self::Kernel) -> Self;
    /// From f64 (`as` for integers), for creation functions.
    fn from_f64(v: f64) -> Self;
    /// To f64 (`as`), for error measurements.
    fn to_f64(self) -> f64;
}

macro_rules! plain_dtype {
    ($t:ty, $d:ident) => {
        impl WithDType for $t {
            const DTYPE: DType = DType::$d;
            type Kernel = $t;
            #[inline(always)]
            fn to_kernel(self) -> $t {
                self
            }
            #[inline(always)]
            fn from_kernel(k: $t) -> Self {
                k
            }
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
        }
    };
}
plain_dtype!(f32, F32);
plain_dtype!(u8, U8);
plain_dtype!(u32, U32);
plain_dtype!(i64, I64);

macro_rules! half_dtype {
    ($t:ty, $d:ident, $k:ident) => {
        impl WithDType for $t {
            const DTYPE: DType = DType::$d;
            type Kernel = $k;
            #[inline(always)]
            fn to_kernel(self) -> $k {
                $k(self.to_bits())
            }
            #[inline(always)]
            fn from_kernel(k: $k) -> Self {
                <$t>::from_bits(k.0)
            }
            fn from_f64(v: f64) -> Self {
                <$t>::from_f64(v)
            }
            fn to_f64(self) -> f64 {
                <$t>::to_f64(self)
            }
        }
    };
}
half_dtype!(f16, F16, F16);
half_dtype!(bf16, BF16, Bf16);
