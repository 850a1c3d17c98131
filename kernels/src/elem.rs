//! Element types and conversions of the device layer.
//!
//! f16 and bf16 are stored as their bit patterns ([`F16`], [`Bf16`], the same
//! layout as `half::f16` / `half::bf16`) and computed in f32. The conversions
//! round to nearest even and keep NaNs NaN. On a GPU f16 converts with the
//! target's instruction (`cvt` on NVIDIA, `v_cvt_f32_f16`/`v_cvt_f16_f32` on
//! AMD: the same values; a NaN's payload may differ); in the emulator and on
//! the host the conversions are written out here (sign and top payload bits
//! kept, quieted). The written-out form is thirty instructions and branches
//! a value, which made every f16 kernel slower than its bf16 twin on the
//! H100 (`add_rms_norm_f16` 10.9 us against 4.95 us with `cvt`, for one
//! 4096-row). [`f16_bits_to_f32_written`] stays available to a kernel whose
//! registers need it (Q4_K's scales on AMD).

use rocm_kernel_macros::amdgpu_device;

/// IEEE half precision, stored as bits.
#[amdgpu_device]
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
#[repr(transparent)]
pub struct F16(pub u16);

/// bfloat16, stored as bits.
#[amdgpu_device]
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
#[repr(transparent)]
pub struct Bf16(pub u16);

/// f16 bits to f32 (exact).
///
/// ```
/// use ferrocm_kernels::elem::f16_bits_to_f32;
/// assert_eq!(f16_bits_to_f32(0x3c00), 1.0);
/// ```
#[amdgpu_device]
#[inline(always)]
pub fn f16_bits_to_f32(h: u16) -> f32 {
    #[cfg(ferrocm_device)]
    return f16::from_bits(h) as f32;
    #[cfg(not(ferrocm_device))]
    return f16_bits_to_f32_selects(h);
}

/// [`f16_bits_to_f32`] on the host (the Cpu backend and the emulator):
/// the bits [`f16_bits_to_f32_written`] gives for every input, from selects
/// and one exact f32 subtraction, so a loop over f16 values vectorises (the
/// written form's normalising shift kept such loops scalar: the Cpu's f16
/// casts ran at a fifth of the bf16 ones).
///
/// ```
/// use ferrocm_kernels::elem::f16_bits_to_f32_selects;
/// assert_eq!(f16_bits_to_f32_selects(0xbc00), -1.0);
/// assert_eq!(f16_bits_to_f32_selects(0x0001), 2.0f32.powi(-24)); // subnormal
/// assert_eq!(f16_bits_to_f32_selects(0x7c00), f32::INFINITY);
/// ```
#[cfg(not(ferrocm_device))]
#[inline(always)]
pub fn f16_bits_to_f32_selects(h: u16) -> f32 {
    let h = h as u32;
    // Exponent and mantissa in f32's places, the exponent rebased.
    let shifted = (h & 0x7fff) << 13;
    let exp = shifted & 0x0f80_0000;
    let rebased = shifted + ((127 - 15) << 23);
    let bits = if exp == 0x0f80_0000 {
        // inf / NaN: the exponent all ones, the payload kept.
        rebased + ((128 - 16) << 23)
    } else if exp == 0 {
        // Zero / subnormal: m 2^-24 is (1 + m / 1024) 2^-14 less 2^-14,
        // exactly.
        (f32::from_bits(rebased + (1 << 23)) - f32::from_bits(113 << 23)).to_bits()
    } else {
        rebased
    };
    f32::from_bits(bits | ((h & 0x8000) << 16))
}

/// [`f16_bits_to_f32`] written out: the emulator's and the host's, and on a
/// GPU a kernel's whose registers cannot take the instruction's schedule
/// (`qmatvec4_q4_k_*` spilled on gfx90a with it).
///
/// ```
/// use ferrocm_kernels::elem::f16_bits_to_f32_written;
/// assert_eq!(f16_bits_to_f32_written(0x3c00), 1.0);
/// assert_eq!(f16_bits_to_f32_written(0x0001), 2.0f32.powi(-24)); // subnormal
/// ```
#[amdgpu_device]
#[inline(always)]
pub fn f16_bits_to_f32_written(h: u16) -> f32 {
    let sign = ((h as u32) & 0x8000) << 16;
    let exp = ((h >> 10) & 0x1f) as u32;
    let man = (h & 0x3ff) as u32;
    let bits = if exp == 0x1f {
        // inf / NaN: payload kept in the top mantissa bits.
        sign | 0x7f80_0000 | (man << 13)
    } else if exp != 0 {
        sign | ((exp + 112) << 23) | (man << 13)
    } else if man == 0 {
        sign
    } else {
        // Subnormal: normalise.
        let shift = man.leading_zeros() - 21; // leading zeros within 10 bits, plus one
        let man = (man << shift) & 0x3ff;
        sign | ((113 - shift) << 23) | (man << 13)
    };
    f32::from_bits(bits)
}

/// f32 to f16 bits, round to nearest even, NaN kept (quieted).
///
/// ```
/// use ferrocm_kernels::elem::f32_to_f16_bits;
/// assert_eq!(f32_to_f16_bits(1.0), 0x3c00);
/// assert_eq!(f32_to_f16_bits(65520.0), 0x7c00); // rounds to infinity
/// ```
#[amdgpu_device]
#[inline(always)]
pub fn f32_to_f16_bits(f: f32) -> u16 {
    #[cfg(ferrocm_device)]
    return (f as f16).to_bits();
    #[cfg(not(ferrocm_device))]
    return f32_to_f16_bits_written(f);
}

/// [`f32_to_f16_bits`] written out (the emulator's and the host's).
#[amdgpu_device]
#[inline(always)]
#[cfg_attr(ferrocm_device, allow(dead_code))]
fn f32_to_f16_bits_written(f: f32) -> u16 {
    let x = f.to_bits();
    let sign = ((x >> 16) & 0x8000) as u16;
    let exp = ((x >> 23) & 0xff) as i32;
    let man = x & 0x7f_ffff;
    if exp == 0xff {
        if man == 0 {
            return sign | 0x7c00;
        }
        return sign | 0x7e00 | (man >> 13) as u16;
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    if e <= 0 {
        // Subnormal or zero in f16.
        if e < -10 {
            return sign;
        }
        let m = man | 0x80_0000;
        let shift = (14 - e) as u32;
        let half_bits = m >> shift;
        let rem = m & ((1 << shift) - 1);
        let halfway = 1 << (shift - 1);
        let round_up = rem > halfway || (rem == halfway && (half_bits & 1) == 1);
        return sign | (half_bits + round_up as u32) as u16;
    }
    let half_bits = ((e as u32) << 10) | (man >> 13);
    let rem = man & 0x1fff;
    let round_up = rem > 0x1000 || (rem == 0x1000 && (half_bits & 1) == 1);
    // A carry out of the mantissa correctly bumps the exponent (up to inf).
    sign | (half_bits + round_up as u32) as u16
}

/// bf16 bits to f32 (exact).
#[amdgpu_device]
#[inline(always)]
pub fn bf16_bits_to_f32(b: u16) -> f32 {
    f32::from_bits((b as u32) << 16)
}

/// f32 to bf16 bits, round to nearest even, NaN kept (quieted).
///
/// Written out on every target. Measured on the H100 (docs/h100-bench.md):
/// `cvt.rn.bf16.f32` by inline assembly for each value sped bf16 maps up
/// (exp bf16 80 -> 92% of copy) but slowed other kernels by up to 30%
/// (rope_i, dequantize to bf16), and a branch-free select of both results
/// slowed the dequantize kernels too; this form keeps them. Kernels that
/// round values in pairs use [`pack2_bf16`] (one `cvt.rn.bf16x2.f32` a pair
/// on NVIDIA, marked pure) through [`Elem::pack2`].
///
/// ```
/// use ferrocm_kernels::elem::f32_to_bf16_bits;
/// assert_eq!(f32_to_bf16_bits(1.0), 0x3f80);
/// assert_eq!(f32_to_bf16_bits(f32::from_bits(0x7f80_0001)), 0x7fc0); // NaN, quieted
/// ```
#[amdgpu_device]
#[inline(always)]
pub fn f32_to_bf16_bits(f: f32) -> u16 {
    let x = f.to_bits();
    if (x & 0x7fff_ffff) > 0x7f80_0000 {
        return ((x >> 16) | 0x0040) as u16;
    }
    let round = 0x7fff + ((x >> 16) & 1);
    ((x + round) >> 16) as u16
}

/// An element type kernels are generic over: f32, [`F16`], [`Bf16`], u8, u32, i64.
///
/// Float types compute in f32; integer types compute natively with wrapping
/// arithmetic (division by zero gives 0). Conversions follow Rust's `as`.
#[amdgpu_device]
pub trait Elem: Copy + 'static {
    /// Additive identity.
    const ZERO: Self;
    /// Multiplicative identity.
    const ONE: Self;
    /// Lowest value (-inf for floats), the start of a max reduction.
    const LOWEST: Self;
    /// Highest value (+inf for floats), the start of a min reduction.
    const HIGHEST: Self;
    /// Whether this is a float type.
    const IS_FLOAT: bool;
    /// The accumulator of reductions: f32 for float types, i64 for integers.
    type Acc: Elem + Send + Sync;
    /// To f32 (`as` for integers).
    fn to_f32(self) -> f32;
    /// From f32 (`as`, saturating, for integers; RNE for f16/bf16).
    fn from_f32(v: f32) -> Self;
    /// To i64 (`as`: truncating for floats).
    fn to_i64(self) -> i64;
    /// From i64 (`as`: wrapping for integers).
    fn from_i64(v: i64) -> Self;
    /// `self + o`.
    fn add(self, o: Self) -> Self;
    /// `self - o`.
    fn sub(self, o: Self) -> Self;
    /// `self * o`.
    fn mul(self, o: Self) -> Self;
    /// `self / o`.
    fn div(self, o: Self) -> Self;
    /// The larger; NaN if either is NaN (PyTorch's `maximum`, not `f32::max`,
    /// which drops NaN: a NaN in a model's activations must show).
    fn max(self, o: Self) -> Self;
    /// The smaller; NaN if either is NaN.
    fn min(self, o: Self) -> Self;
    /// `self < o`.
    fn lt(self, o: Self) -> bool;
    /// `self == o`.
    fn eq(self, o: Self) -> bool;
    /// Whether this is NaN.
    fn is_nan(self) -> bool;
    /// The value's bits, zero-extended to 64 (for wave exchanges and scalar arguments).
    fn to_bits64(self) -> u64;
    /// Inverse of [`Elem::to_bits64`].
    fn from_bits64(b: u64) -> Self;
    /// `lo` and `hi` rounded to this type and packed into one 32-bit lane
    /// of a 16-byte word (`lo` in the low half; for 32-bit types `lo`
    /// alone): [`lane_of`] of the two conversions, in one instruction for
    /// both on NVIDIA for f16 and bf16 ([`pack2_bf16`], [`pack2_f16`]).
    #[inline(always)]
    fn pack2(lo: f32, hi: f32) -> u32 {
        lane_of(Self::from_f32(lo), Self::from_f32(hi))
    }
    /// Two 32-bit lanes of this type's elements combined element by element
    /// with [`Elem::max`] (`MIN`: [`Elem::min`]): the larger (smaller) of
    /// each pair, NaN when either is. On NVIDIA sm_80+ one `max.NaN` or
    /// `min.NaN` for both halves of f16 and bf16 ([`pick2_bf16`],
    /// [`pick2_f16`]); which of two zeros comes back may differ by target.
    ///
    /// ```
    /// use ferrocm_kernels::elem::{Bf16, Elem};
    /// // (1, -2) and (3, -4) as bf16 pairs, low half first.
    /// assert_eq!(Bf16::pick2::<false>(0xc000_3f80, 0xc080_4040), 0xc000_4040);
    /// assert_eq!(Bf16::pick2::<true>(0xc000_3f80, 0xc080_4040), 0xc080_3f80);
    /// ```
    #[inline(always)]
    fn pick2<const MIN: bool>(a: u32, b: u32) -> u32 {
        pick2_lanes::<Self>(a, b, MIN)
    }
    /// Converts to another element type, as Rust's `as` would.
    #[inline(always)]
    fn convert<D: Elem>(self) -> D {
        if D::IS_FLOAT || Self::IS_FLOAT {
            D::from_f32(self.to_f32())
        } else {
            D::from_i64(self.to_i64())
        }
    }
}

/// [`Elem::pick2`] element by element: [`lane_get`], [`Elem::max`] or
/// [`Elem::min`], [`lane_of`].
#[amdgpu_device]
#[inline(always)]
pub fn pick2_lanes<T: Elem>(a: u32, b: u32, min: bool) -> u32 {
    let f = |x: T, y: T| if min { x.min(y) } else { x.max(y) };
    let lo = f(lane_get::<T>(a, 0), lane_get::<T>(b, 0));
    let hi = f(lane_get::<T>(a, 1), lane_get::<T>(b, 1));
    lane_of(lo, hi)
}

macro_rules! float_elem {
    ($t:ty, $to:expr, $from:expr, $tobits:expr, $frombits:expr, $zero:expr, $one:expr, $lowest:expr, $highest:expr, $pack:expr $(, $pick2:expr)?) => {
        #[amdgpu_device]
        impl Elem for $t {
            const ZERO: Self = $zero;
            const ONE: Self = $one;
            const LOWEST: Self = $lowest;
            const HIGHEST: Self = $highest;
            const IS_FLOAT: bool = true;
            type Acc = f32;
            #[inline(always)]
            fn to_f32(self) -> f32 {
                let to: fn($t) -> f32 = $to;
                to(self)
            }
            #[inline(always)]
            fn from_f32(v: f32) -> Self {
                let from: fn(f32) -> $t = $from;
                from(v)
            }
            #[inline(always)]
            fn to_i64(self) -> i64 {
                self.to_f32() as i64
            }
            #[inline(always)]
            fn from_i64(v: i64) -> Self {
                Self::from_f32(v as f32)
            }
            #[inline(always)]
            fn add(self, o: Self) -> Self {
                Self::from_f32(self.to_f32() + o.to_f32())
            }
            #[inline(always)]
            fn sub(self, o: Self) -> Self {
                Self::from_f32(self.to_f32() - o.to_f32())
            }
            #[inline(always)]
            fn mul(self, o: Self) -> Self {
                Self::from_f32(self.to_f32() * o.to_f32())
            }
            #[inline(always)]
            fn div(self, o: Self) -> Self {
                Self::from_f32(self.to_f32() / o.to_f32())
            }
            #[inline(always)]
            fn max(self, o: Self) -> Self {
                // NaN propagates from either side (PyTorch's maximum); a
                // compare and a select, so loops vectorise it.
                let (a, b) = (self.to_f32(), o.to_f32());
                if b > a || b != b { o } else { self }
            }
            #[inline(always)]
            fn min(self, o: Self) -> Self {
                let (a, b) = (self.to_f32(), o.to_f32());
                if b < a || b != b { o } else { self }
            }
            #[inline(always)]
            fn lt(self, o: Self) -> bool {
                self.to_f32() < o.to_f32()
            }
            #[inline(always)]
            fn eq(self, o: Self) -> bool {
                self.to_f32() == o.to_f32()
            }
            #[inline(always)]
            fn is_nan(self) -> bool {
                self.to_f32().is_nan()
            }
            #[inline(always)]
            fn to_bits64(self) -> u64 {
                let f: fn($t) -> u64 = $tobits;
                f(self)
            }
            #[inline(always)]
            fn from_bits64(b: u64) -> Self {
                let f: fn(u64) -> $t = $frombits;
                f(b)
            }
            #[inline(always)]
            fn pack2(lo: f32, hi: f32) -> u32 {
                let f: fn(f32, f32) -> u32 = $pack;
                f(lo, hi)
            }
            $(
                #[inline(always)]
                fn pick2<const MIN: bool>(a: u32, b: u32) -> u32 {
                    let f: fn(u32, u32, bool) -> u32 = $pick2;
                    f(a, b, MIN)
                }
            )?
        }
    };
}

float_elem!(
    f32,
    |x| x,
    |x| x,
    |x| x.to_bits() as u64,
    |b| f32::from_bits(b as u32),
    0.0,
    1.0,
    f32::NEG_INFINITY,
    f32::INFINITY,
    |lo, _| lo.to_bits()
);
float_elem!(
    F16,
    |x| f16_bits_to_f32(x.0),
    |x| F16(f32_to_f16_bits(x)),
    |x| x.0 as u64,
    |b| F16(b as u16),
    F16(0),
    F16(0x3c00),
    F16(0xfc00),
    F16(0x7c00),
    pack2_f16,
    pick2_f16
);
float_elem!(
    Bf16,
    |x| bf16_bits_to_f32(x.0),
    |x| Bf16(f32_to_bf16_bits(x)),
    |x| x.0 as u64,
    |b| Bf16(b as u16),
    Bf16(0),
    Bf16(0x3f80),
    Bf16(0xff80),
    Bf16(0x7f80),
    pack2_bf16,
    pick2_bf16
);

/// Two f32 rounded to bf16 (nearest even) and packed, `lo` in the low half:
/// on NVIDIA sm_80+ (`cfg(ferrocm_mma = "sync")`) one `cvt.rn.bf16x2.f32` (a NaN becomes the canonical
/// NaN, sign and payload dropped), elsewhere [`f32_to_bf16_bits`] twice.
/// The paired instruction is a quarter of the written-out form's work,
/// which bounded the dequantize kernels (85% of the SM's issue at 62-70%
/// of copy on an H200). Marked pure: the optimiser moves and merges it
/// like arithmetic.
///
/// ```
/// use ferrocm_kernels::elem::pack2_bf16;
/// assert_eq!(pack2_bf16(1.0, -2.0), 0xc000_3f80);
/// ```
#[amdgpu_device]
#[inline(always)]
pub fn pack2_bf16(lo: f32, hi: f32) -> u32 {
    #[cfg(ferrocm_mma = "sync")]
    {
        let out: u32;
        // SAFETY: a register-only conversion.
        unsafe {
            core::arch::asm!(
                "cvt.rn.bf16x2.f32 {o}, {h}, {l};",
                o = out(reg32) out,
                h = in(reg32) hi,
                l = in(reg32) lo,
                options(pure, nomem, nostack)
            )
        };
        out
    }
    #[cfg(not(ferrocm_mma = "sync"))]
    {
        f32_to_bf16_bits(lo) as u32 | (f32_to_bf16_bits(hi) as u32) << 16
    }
}

/// Two f32 rounded to f16 (nearest even) and packed, `lo` in the low half:
/// on NVIDIA sm_80+ one `cvt.rn.f16x2.f32`, elsewhere [`f32_to_f16_bits`]
/// twice.
///
/// ```
/// use ferrocm_kernels::elem::pack2_f16;
/// assert_eq!(pack2_f16(1.0, -2.0), 0xc000_3c00);
/// ```
#[amdgpu_device]
#[inline(always)]
pub fn pack2_f16(lo: f32, hi: f32) -> u32 {
    #[cfg(ferrocm_mma = "sync")]
    {
        let out: u32;
        // SAFETY: a register-only conversion.
        unsafe {
            core::arch::asm!(
                "cvt.rn.f16x2.f32 {o}, {h}, {l};",
                o = out(reg32) out,
                h = in(reg32) hi,
                l = in(reg32) lo,
                options(pure, nomem, nostack)
            )
        };
        out
    }
    #[cfg(not(ferrocm_mma = "sync"))]
    {
        f32_to_f16_bits(lo) as u32 | (f32_to_f16_bits(hi) as u32) << 16
    }
}

/// Declares `pick2_{bf16,f16}`: [`Elem::pick2`] of two lanes of 16-bit
/// floats in one `max.NaN`/`min.NaN` instruction on NVIDIA sm_80+ (a NaN
/// comes back as the canonical NaN), elsewhere [`pick2_lanes`].
macro_rules! pick2_16 {
    ($(#[$doc:meta])* $name:ident, $t:ty, $max:literal, $min:literal) => {
        $(#[$doc])*
        #[amdgpu_device]
        #[inline(always)]
        pub fn $name(a: u32, b: u32, min: bool) -> u32 {
            #[cfg(ferrocm_mma = "sync")]
            {
                let out: u32;
                // SAFETY: register-only arithmetic.
                unsafe {
                    if min {
                        core::arch::asm!($min, o = out(reg32) out, a = in(reg32) a, b = in(reg32) b,
                            options(pure, nomem, nostack))
                    } else {
                        core::arch::asm!($max, o = out(reg32) out, a = in(reg32) a, b = in(reg32) b,
                            options(pure, nomem, nostack))
                    }
                };
                out
            }
            #[cfg(not(ferrocm_mma = "sync"))]
            {
                pick2_lanes::<$t>(a, b, min)
            }
        }
    };
}

pick2_16!(
    /// [`Elem::pick2`] for bf16 pairs (`max.NaN.bf16x2` on NVIDIA sm_80+).
    ///
    /// ```
    /// use ferrocm_kernels::elem::pick2_bf16;
    /// assert_eq!(pick2_bf16(0x7fc0_3f80, 0x0000_4040, false) & 0xffff, 0x4040);
    /// ```
    pick2_bf16,
    Bf16,
    "max.NaN.bf16x2 {o}, {a}, {b};",
    "min.NaN.bf16x2 {o}, {a}, {b};"
);
pick2_16!(
    /// [`Elem::pick2`] for f16 pairs (`max.NaN.f16x2` on NVIDIA sm_80+).
    ///
    /// ```
    /// use ferrocm_kernels::elem::pick2_f16;
    /// assert_eq!(pick2_f16(0x3c00_3c00, 0xbc00_4000, true), 0xbc00_3c00);
    /// ```
    pick2_f16,
    F16,
    "max.NaN.f16x2 {o}, {a}, {b};",
    "min.NaN.f16x2 {o}, {a}, {b};"
);

macro_rules! int_elem {
    ($t:ty) => {
        #[amdgpu_device]
        impl Elem for $t {
            const ZERO: Self = 0;
            const ONE: Self = 1;
            const LOWEST: Self = <$t>::MIN;
            const HIGHEST: Self = <$t>::MAX;
            const IS_FLOAT: bool = false;
            type Acc = i64;
            #[inline(always)]
            fn to_f32(self) -> f32 {
                self as f32
            }
            #[inline(always)]
            fn from_f32(v: f32) -> Self {
                v as $t
            }
            #[inline(always)]
            fn to_i64(self) -> i64 {
                self as i64
            }
            #[inline(always)]
            fn from_i64(v: i64) -> Self {
                v as $t
            }
            #[inline(always)]
            fn add(self, o: Self) -> Self {
                self.wrapping_add(o)
            }
            #[inline(always)]
            fn sub(self, o: Self) -> Self {
                self.wrapping_sub(o)
            }
            #[inline(always)]
            fn mul(self, o: Self) -> Self {
                self.wrapping_mul(o)
            }
            #[inline(always)]
            fn div(self, o: Self) -> Self {
                if o == 0 { 0 } else { self.wrapping_div(o) }
            }
            #[inline(always)]
            fn max(self, o: Self) -> Self {
                if o > self { o } else { self }
            }
            #[inline(always)]
            fn min(self, o: Self) -> Self {
                if o < self { o } else { self }
            }
            #[inline(always)]
            fn lt(self, o: Self) -> bool {
                self < o
            }
            #[inline(always)]
            fn eq(self, o: Self) -> bool {
                self == o
            }
            #[inline(always)]
            fn is_nan(self) -> bool {
                false
            }
            #[inline(always)]
            fn to_bits64(self) -> u64 {
                self as u64
            }
            #[inline(always)]
            fn from_bits64(b: u64) -> Self {
                b as $t
            }
        }
    };
}

int_elem!(u8);
int_elem!(u32);
int_elem!(i64);

/// Elements of `T` in one 16-byte word ([`W128`]): the unit of
/// the vector loads of contiguous rows (4 f32, 8 f16 or bf16).
///
/// ```
/// use ferrocm_kernels::elem::{Bf16, per_word};
/// assert_eq!((per_word::<f32>(), per_word::<Bf16>()), (4, 8));
/// ```
#[amdgpu_device]
#[inline(always)]
pub const fn per_word<T>() -> u32 {
    (16 / size_of::<T>()) as u32
}

/// Element `k` (0 or 1; 0 for 32-bit types) of a 32-bit lane of `T`s (a
/// 16-byte word is four lanes).
///
/// ```
/// use ferrocm_kernels::elem::{Bf16, lane_get};
/// assert_eq!(lane_get::<Bf16>(0x4000_3f80, 1), Bf16(0x4000)); // [1.0, 2.0]
/// ```
#[amdgpu_device]
#[inline(always)]
pub fn lane_get<T: Elem>(lane: u32, k: u32) -> T {
    if size_of::<T>() == 4 {
        T::from_bits64(lane as u64)
    } else {
        T::from_bits64(((lane >> (16 * k)) & 0xffff) as u64)
    }
}

/// A 32-bit lane from its elements (`hi` unused for 32-bit types).
///
/// ```
/// use ferrocm_kernels::elem::{Bf16, lane_of};
/// assert_eq!(lane_of(Bf16(0x3f80), Bf16(0x4000)), 0x4000_3f80);
/// ```
#[amdgpu_device]
#[inline(always)]
pub fn lane_of<T: Elem>(lo: T, hi: T) -> u32 {
    if size_of::<T>() == 4 {
        lo.to_bits64() as u32
    } else {
        (lo.to_bits64() as u32 & 0xffff) | ((hi.to_bits64() as u32) << 16)
    }
}

/// Calls `f(k, element k)` for each element of a 16-byte word of 16- or
/// 32-bit `T`s, in order. Written out lane by lane (no loop indexed by a
/// variable), so the word stays in registers.
///
/// ```
/// use ferrocm_kernels::elem::word_for_each;
/// use ferrocm_kernels::elem::W128;
/// let w = W128([1.0f32.to_bits(), 2.0f32.to_bits(), 3.0f32.to_bits(), 4.0f32.to_bits()]);
/// let mut sum = 0.0;
/// word_for_each::<f32>(w, |_, x| sum += x);
/// assert_eq!(sum, 10.0);
/// ```
#[amdgpu_device]
#[inline(always)]
pub fn word_for_each<T: Elem>(w: W128, mut f: impl FnMut(u32, T)) {
    let two = size_of::<T>() == 2;
    let mut lane = |l: u32, v: u32| {
        if two {
            f(2 * l, lane_get::<T>(v, 0));
            f(2 * l + 1, lane_get::<T>(v, 1));
        } else {
            f(l, lane_get::<T>(v, 0));
        }
    };
    lane(0, w.0[0]);
    lane(1, w.0[1]);
    lane(2, w.0[2]);
    lane(3, w.0[3]);
}

/// A 16-byte word of 16- or 32-bit `T`s whose element `k` is `f(w[k])`,
/// written out lane by lane (see [`word_for_each`]).
///
/// ```
/// use ferrocm_kernels::elem::{W128, word_map};
/// let w = |v: [f32; 4]| W128(v.map(f32::to_bits));
/// assert_eq!(word_map::<f32>(w([1.0, 2.0, 3.0, 4.0]), |x| x * 2.0), w([2.0, 4.0, 6.0, 8.0]));
/// ```
#[amdgpu_device]
#[inline(always)]
pub fn word_map<T: Elem>(w: W128, mut f: impl FnMut(T) -> T) -> W128 {
    let two = size_of::<T>() == 2;
    let mut lane = |v: u32| {
        let lo = f(lane_get::<T>(v, 0));
        let hi = if two { f(lane_get::<T>(v, 1)) } else { lo };
        lane_of(lo, hi)
    };
    W128([lane(w.0[0]), lane(w.0[1]), lane(w.0[2]), lane(w.0[3])])
}

/// A 16-byte word of float `T`s (f32, f16 or bf16) whose element `k` is
/// `f(w[k])` computed in f32 and rounded to `T` ([`Elem::pack2`]: pairs by
/// one instruction on NVIDIA), written out lane by lane.
///
/// ```
/// use ferrocm_kernels::elem::{Bf16, W128, word_map_f32};
/// let w = W128([0x4000_3f80; 4]); // bf16 1.0 and 2.0 in each lane
/// assert_eq!(word_map_f32::<Bf16>(w, |x| x * 2.0), W128([0x4080_4000; 4]));
/// ```
#[amdgpu_device]
#[inline(always)]
pub fn word_map_f32<T: Elem>(w: W128, mut f: impl FnMut(f32) -> f32) -> W128 {
    let two = size_of::<T>() == 2;
    let mut lane = |v: u32| {
        let lo = f(lane_get::<T>(v, 0).to_f32());
        let hi = if two {
            f(lane_get::<T>(v, 1).to_f32())
        } else {
            0.0
        };
        T::pack2(lo, hi)
    };
    W128([lane(w.0[0]), lane(w.0[1]), lane(w.0[2]), lane(w.0[3])])
}

/// A 16-byte word of 16- or 32-bit `T`s whose element `k` is `f(k, a[k],
/// b[k], c[k])`, written out lane by lane (see [`word_for_each`]).
///
/// ```
/// use ferrocm_kernels::elem::word_map3;
/// use ferrocm_kernels::elem::W128;
/// let w = |v: [f32; 4]| W128(v.map(f32::to_bits));
/// let out = word_map3::<f32>(w([1.0, 2.0, 3.0, 4.0]), w([1.0; 4]), w([0.5; 4]), |_, a, b, c| a + b * c);
/// assert_eq!(out, w([1.5, 2.5, 3.5, 4.5]));
/// ```
#[amdgpu_device]
#[inline(always)]
pub fn word_map3<T: Elem>(a: W128, b: W128, c: W128, mut f: impl FnMut(u32, T, T, T) -> T) -> W128 {
    let two = size_of::<T>() == 2;
    let mut lane = |l: u32, a: u32, b: u32, c: u32| {
        let k = if two { 2 * l } else { l };
        let lo = f(
            k,
            lane_get::<T>(a, 0),
            lane_get::<T>(b, 0),
            lane_get::<T>(c, 0),
        );
        let hi = if two {
            f(
                k + 1,
                lane_get::<T>(a, 1),
                lane_get::<T>(b, 1),
                lane_get::<T>(c, 1),
            )
        } else {
            lo
        };
        lane_of::<T>(lo, hi)
    };
    W128([
        lane(0, a.0[0], b.0[0], c.0[0]),
        lane(1, a.0[1], b.0[1], c.0[1]),
        lane(2, a.0[2], b.0[2], c.0[2]),
        lane(3, a.0[3], b.0[3], c.0[3]),
    ])
}

/// [`word_map3`] for float `T`s (f32, f16 or bf16) whose `f` gives f32:
/// the results rounded to `T` in pairs ([`Elem::pack2`]).
///
/// ```
/// use ferrocm_kernels::elem::{Bf16, Elem, W128, word_map3_f32};
/// let w = W128([0x4000_3f80; 4]); // bf16 1.0 and 2.0 in each lane
/// let out = word_map3_f32::<Bf16>(w, w, w, |_, a, b, c| a.to_f32() + b.to_f32() * c.to_f32());
/// assert_eq!(out, W128([0x40c0_4000; 4])); // 2.0 and 6.0
/// ```
#[amdgpu_device]
#[inline(always)]
pub fn word_map3_f32<T: Elem>(
    a: W128,
    b: W128,
    c: W128,
    mut f: impl FnMut(u32, T, T, T) -> f32,
) -> W128 {
    let two = size_of::<T>() == 2;
    let mut lane = |l: u32, a: u32, b: u32, c: u32| {
        let k = if two { 2 * l } else { l };
        let lo = f(
            k,
            lane_get::<T>(a, 0),
            lane_get::<T>(b, 0),
            lane_get::<T>(c, 0),
        );
        let hi = if two {
            f(
                k + 1,
                lane_get::<T>(a, 1),
                lane_get::<T>(b, 1),
                lane_get::<T>(c, 1),
            )
        } else {
            0.0
        };
        T::pack2(lo, hi)
    };
    W128([
        lane(0, a.0[0], b.0[0], c.0[0]),
        lane(1, a.0[1], b.0[1], c.0[1]),
        lane(2, a.0[2], b.0[2], c.0[2]),
        lane(3, a.0[3], b.0[3], c.0[3]),
    ])
}

/// Two 16-byte words of 16- or 32-bit `T`s from four: element `k` of the
/// results is `f(a[k], b[k], c[k], d[k])` (a rotation's pair of outputs),
/// written out lane by lane (see [`word_for_each`]).
///
/// ```
/// use ferrocm_kernels::elem::word_map4x2;
/// use ferrocm_kernels::elem::W128;
/// let w = |v: f32| W128([v.to_bits(); 4]);
/// let (p, q) = word_map4x2::<f32>(w(1.0), w(2.0), w(3.0), w(4.0), |a, b, c, d| (a + b, c * d));
/// assert_eq!((p, q), (w(3.0), w(12.0)));
/// ```
#[amdgpu_device]
#[inline(always)]
pub fn word_map4x2<T: Elem>(
    a: W128,
    b: W128,
    c: W128,
    d: W128,
    mut f: impl FnMut(T, T, T, T) -> (T, T),
) -> (W128, W128) {
    let two = size_of::<T>() == 2;
    let mut lane = |a: u32, b: u32, c: u32, d: u32| {
        let g = |v: u32, k: u32| lane_get::<T>(v, k);
        let (p0, q0) = f(g(a, 0), g(b, 0), g(c, 0), g(d, 0));
        let (p1, q1) = if two {
            f(g(a, 1), g(b, 1), g(c, 1), g(d, 1))
        } else {
            (p0, q0)
        };
        (lane_of::<T>(p0, p1), lane_of::<T>(q0, q1))
    };
    let l0 = lane(a.0[0], b.0[0], c.0[0], d.0[0]);
    let l1 = lane(a.0[1], b.0[1], c.0[1], d.0[1]);
    let l2 = lane(a.0[2], b.0[2], c.0[2], d.0[2]);
    let l3 = lane(a.0[3], b.0[3], c.0[3], d.0[3]);
    (
        W128([l0.0, l1.0, l2.0, l3.0]),
        W128([l0.1, l1.1, l2.1, l3.1]),
    )
}

/// Whether `T` converts to and from f32 in a few instructions: every type
/// but f16, whose conversions are long in software. Kernels that repeat a
/// per-word body at several sites keep f16 to one site (the compiler
/// outlines a long body called from several, and the call passes its words
/// through scratch memory).
///
/// ```
/// use ferrocm_kernels::elem::{Bf16, F16, short_convert};
/// assert!(short_convert::<f32>() && short_convert::<Bf16>() && !short_convert::<F16>());
/// ```
#[amdgpu_device]
#[inline(always)]
pub fn short_convert<T: Elem>() -> bool {
    // bf16's one is 0x3f80 (f32's high half), f16's 0x3c00.
    size_of::<T>() != 2 || T::ONE.to_bits64() == 0x3f80
}

/// A 16-byte word (four u32s, 16-byte aligned): `index_select` moves rows
/// whose bytes are a multiple of 16 in these, one 128-bit load and store per
/// word.
#[amdgpu_device]
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
#[repr(C, align(16))]
pub struct W128(pub [u32; 4]);

/// An element moved as opaque bits.
#[amdgpu_device]
pub trait Word: Copy + 'static {
    /// All bits zero (what a skipped element is set to).
    const ZERO: Self;
}

#[amdgpu_device]
impl Word for u8 {
    const ZERO: Self = 0;
}
#[amdgpu_device]
impl Word for u16 {
    const ZERO: Self = 0;
}
#[amdgpu_device]
impl Word for u32 {
    const ZERO: Self = 0;
}
#[amdgpu_device]
impl Word for u64 {
    const ZERO: Self = 0;
}
#[amdgpu_device]
impl Word for W128 {
    const ZERO: Self = W128([0; 4]);
}

#[cfg(all(test, not(ferrocm_device)))]
mod tests {
    use super::*;

    #[test]
    fn f16_selects_match_the_definition_for_every_value() {
        for h in 0..=u16::MAX {
            let got = f16_bits_to_f32_selects(h);
            // The same bits as the written form, NaN payloads included.
            assert_eq!(
                got.to_bits(),
                f16_bits_to_f32_written(h).to_bits(),
                "{h:#06x}"
            );
            let (sign, e, m) = (
                (h >> 15) as i32,
                ((h >> 10) & 0x1f) as i32,
                (h & 0x3ff) as f64,
            );
            let s = if sign == 1 { -1.0 } else { 1.0 };
            let want = match e {
                0x1f if m == 0.0 => s * f64::INFINITY,
                0x1f => {
                    assert!(got.is_nan(), "{h:#06x}");
                    continue;
                }
                0 => s * m * 2f64.powi(-24),
                _ => s * (1.0 + m / 1024.0) * 2f64.powi(e - 15),
            };
            assert_eq!(got as f64, want, "{h:#06x}");
            assert_eq!(got.is_sign_negative(), sign == 1, "{h:#06x}");
        }
    }
}
