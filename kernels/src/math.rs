//! f32 math of the device layer.
//!
//! On AMDGPU, exp, log, sin, cos, pow, sqrt and fma map to LLVM intrinsics; on
//! the host (the emulator) to the host's libm. NVPTX lowers only sqrt, fma and
//! the roundings to instructions (LLVM has no PTX body for exp, log, sin, cos
//! or pow): there they come from [`portable`], plain Rust evaluated in f64 and
//! tested on the host against libm, but for exp ([`exp_ex2`], on
//! `ex2.approx`). tanh and erf have no LLVM intrinsic: they
//! are written here once and run unchanged everywhere.

use rocm_kernel_macros::amdgpu_device;

#[amdgpu_device]
#[cfg(ferrocm_device)]
mod llvm {
    unsafe extern "C" {
        #[cfg(target_arch = "amdgpu")]
        #[link_name = "llvm.exp2.f32"]
        pub fn exp2(x: f32) -> f32;
        #[cfg(target_arch = "amdgpu")]
        #[link_name = "llvm.exp.f32"]
        pub fn exp(x: f32) -> f32;
        #[cfg(target_arch = "amdgpu")]
        #[link_name = "llvm.log.f32"]
        pub fn log(x: f32) -> f32;
        #[cfg(target_arch = "amdgpu")]
        #[link_name = "llvm.sin.f32"]
        pub fn sin(x: f32) -> f32;
        #[cfg(target_arch = "amdgpu")]
        #[link_name = "llvm.cos.f32"]
        pub fn cos(x: f32) -> f32;
        #[link_name = "llvm.sqrt.f32"]
        pub fn sqrt(x: f32) -> f32;
        #[cfg(target_arch = "nvptx64")]
        #[link_name = "llvm.nvvm.ex2.approx.ftz.f"]
        pub fn ex2_approx_ftz(x: f32) -> f32;
        #[cfg(target_arch = "nvptx64")]
        #[link_name = "llvm.nvvm.ex2.approx.f"]
        pub fn ex2_approx(x: f32) -> f32;
        #[cfg(target_arch = "nvptx64")]
        #[link_name = "llvm.maximum.f32"]
        pub fn maximum(a: f32, b: f32) -> f32;
        #[link_name = "llvm.fma.f32"]
        pub fn fma(a: f32, b: f32, c: f32) -> f32;
        #[link_name = "llvm.floor.f32"]
        pub fn floor(x: f32) -> f32;
        #[link_name = "llvm.ceil.f32"]
        pub fn ceil(x: f32) -> f32;
        #[link_name = "llvm.round.f32"]
        pub fn round(x: f32) -> f32;
        #[cfg(target_arch = "amdgpu")]
        #[link_name = "llvm.pow.f32"]
        pub fn pow(x: f32, y: f32) -> f32;
    }
}

macro_rules! unary_math {
    ($(#[$doc:meta])* $name:ident, $host:ident) => {
        $(#[$doc])*
        #[amdgpu_device]
        #[inline(always)]
        pub fn $name(x: f32) -> f32 {
            #[cfg(ferrocm_device)]
            return unsafe { llvm::$name(x) };
            #[cfg(not(ferrocm_device))]
            return x.$host();
        }
    };
    // No PTX lowering: the portable body on NVPTX.
    ($(#[$doc:meta])* $name:ident, $host:ident, $portable:ident) => {
        $(#[$doc])*
        #[amdgpu_device]
        #[inline(always)]
        pub fn $name(x: f32) -> f32 {
            #[cfg(target_arch = "amdgpu")]
            return unsafe { llvm::$name(x) };
            #[cfg(target_arch = "nvptx64")]
            return portable::$portable(x);
            #[cfg(not(ferrocm_device))]
            return x.$host();
        }
    };
}

/// e^x.
///
/// AMDGPU: `llvm.exp.f32`. NVPTX: [`exp_ex2`], within 2 ulp (CUDA's own
/// `expf` bound): one `ex2.approx` of the reduced argument and an exact
/// scaling, about a third of the portable body's instructions. Elsewhere
/// (the emulator, the Cpu backend) [`portable::exp_f32_fma`], within 1 ulp:
/// plain arithmetic, so the Cpu backend's loops vectorise it (libm's `expf`
/// is a call per element), and the two agree bit for bit.
///
/// ```
/// assert_eq!(ferrocm_kernels::math::exp(0.0), 1.0);
/// ```
#[amdgpu_device]
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    #[cfg(target_arch = "amdgpu")]
    return unsafe { llvm::exp(x) };
    #[cfg(target_arch = "nvptx64")]
    return exp_ex2(x);
    #[cfg(not(ferrocm_device))]
    return portable::exp_f32_fma(x);
}

/// e^x on NVPTX as `2^n · 2^f`: `n = round(x · log2 e)` and `f = x · log2 e
/// - n` with `log2 e` in two parts (the first product exact inside an FMA,
/// so `f` is within about 2^-24 of its value), `2^f` by `ex2.approx.ftz`
/// (MUFU; `f` in [-0.5, 0.5], no subnormal in sight) and `2^n` built from
/// its bits, a normal power of two, so the last product rounds once,
/// into the subnormals too. `n` comes from `x` clamped to [-87, 88], which
/// keeps it in [-126, 127]; past that `f` grows and `ex2` and the product
/// overflow and underflow where e^x does. The clamp drops a NaN, `f` keeps
/// it; `±inf` give `inf` and 0. Within 2 ulp (`tests/nan_and_accuracy.rs`
/// sweeps every 64th f32 of [-104, 89] on the GPU, outside which e^x
/// rounds to 0 or inf; every one of them on an H200) where the portable
/// body is within 1, in about 10 instructions to its 25: an elementwise
/// `exp` f32 ran at 77% of an H200's copy bandwidth on that body.
///
/// Compiled for NVPTX only; elsewhere a body with the same contract
/// ([`portable::exp_f32_fma`]) so the doc and host tests see it.
///
/// ```
/// use ferrocm_kernels::math::exp_ex2;
/// assert_eq!(exp_ex2(0.0), 1.0);
/// assert_eq!(exp_ex2(f32::NEG_INFINITY), 0.0);
/// assert!(exp_ex2(f32::NAN).is_nan());
/// ```
#[amdgpu_device]
#[inline(always)]
pub fn exp_ex2(x: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    {
        const LOG2E: f32 = core::f32::consts::LOG2_E;
        // log2 e - LOG2E, the part f32's LOG2E drops.
        const LOG2E_LO: f32 = 1.925_963e-8;
        #[allow(clippy::manual_clamp)] // min/max drop a NaN on purpose (f keeps it)
        let xc = x.min(88.0).max(-87.0);
        // n = round(xc · log2 e) by the 1.5·2^23 trick: t's low bits hold n.
        let t = fma(xc, LOG2E, 12_582_912.0);
        let n = t - 12_582_912.0;
        let ni = (t.to_bits() as i32).wrapping_sub(0x4B40_0000);
        let f = fma(x, LOG2E_LO, fma(x, LOG2E, -n));
        let pow2n = f32::from_bits(((ni + 127) as u32) << 23);
        // SAFETY: a register-only intrinsic.
        unsafe { llvm::ex2_approx_ftz(f) * pow2n }
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        portable::exp_f32_fma(x)
    }
}
/// e^x where speed matters more than the last ulps: the weights of a
/// softmax inside a kernel (attention), whose error the f32 sums dwarf.
///
/// NVPTX: `ex2.approx.ftz` of `x · log2 e` (one multiply and one MUFU op
/// instead of [`exp`]'s 10; about 2 ulp, plus `|x|` times the product's
/// rounding, results below 2^-126 flushed to 0). AMDGPU: `llvm.exp.f32`
/// (`v_exp_f32` with its range reduction). Elsewhere (the emulator, the Cpu
/// backend): [`exp`], so those two agree bit for bit. `-inf` gives 0, NaN
/// gives NaN everywhere.
///
/// ```
/// use ferrocm_kernels::math::exp_fast;
/// assert_eq!(exp_fast(0.0), 1.0);
/// assert_eq!(exp_fast(f32::NEG_INFINITY), 0.0);
/// assert!((exp_fast(-3.0) - (-3.0f32).exp()).abs() < 1e-6);
/// ```
#[amdgpu_device]
#[inline(always)]
pub fn exp_fast(x: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    return unsafe { llvm::ex2_approx_ftz(x * core::f32::consts::LOG2_E) };
    #[cfg(not(target_arch = "nvptx64"))]
    return exp(x);
}
/// 2^x where speed matters more than the last ulps: [`exp_fast`] for a
/// softmax whose logits are already in base-2 units (the matrix-unit
/// attention scales its scores by `scale · log2 e`, so a weight is one
/// fused multiply-add and this).
///
/// NVPTX: `ex2.approx.ftz` (about 2 ulp, results below 2^-126 flushed to
/// 0). AMDGPU: `llvm.exp2.f32` (`v_exp_f32`). Elsewhere (the emulator):
/// [`exp`] of `x · ln 2`. `-inf` gives 0, NaN gives NaN everywhere.
///
/// ```
/// use ferrocm_kernels::math::exp2_fast;
/// assert_eq!(exp2_fast(0.0), 1.0);
/// assert_eq!(exp2_fast(f32::NEG_INFINITY), 0.0);
/// assert!((exp2_fast(-3.0) - 0.125).abs() < 1e-7);
/// ```
#[amdgpu_device]
#[inline(always)]
pub fn exp2_fast(x: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    return unsafe { llvm::ex2_approx_ftz(x) };
    #[cfg(target_arch = "amdgpu")]
    return unsafe { llvm::exp2(x) };
    #[cfg(not(ferrocm_device))]
    return exp(x * core::f32::consts::LN_2);
}
/// e^x for a result rounded to f16 or bf16 next (the unary map `exp` on
/// those types, through [`crate::elementwise::unary::apply_for`]; `gelu`,
/// `silu` and `sigmoid` there add 1 to [`exp_fast`] instead, which needs no
/// subnormal results).
///
/// NVPTX: `ex2.approx` of `x · log2 e`, with subnormal results (the bf16
/// subnormals are f32's): the product's rounding is at most 2^-17 of the
/// exponent where the result is finite, so with the instruction's ~2 ulp of
/// f32 the result is within 6e-6 relative of e^x, a thousandth of a bf16 ulp
/// (a 300th of an f16 ulp): once rounded, within half an ulp of the narrow
/// type plus that. A quarter of the portable exp's instructions, which held
/// the bf16 maps to 78% of the copy rate. Elsewhere (AMDGPU, the emulator, the Cpu
/// backend): [`exp`], so those keep agreeing bit for bit. `-inf` gives 0,
/// `+inf` inf, NaN NaN everywhere.
///
/// ```
/// use ferrocm_kernels::math::exp_for_half;
/// assert_eq!(exp_for_half(0.0), 1.0);
/// assert_eq!(exp_for_half(f32::NEG_INFINITY), 0.0);
/// assert!((exp_for_half(-3.0) - (-3.0f32).exp()).abs() < 1e-6);
/// ```
#[amdgpu_device]
#[inline(always)]
pub fn exp_for_half(x: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    return unsafe { llvm::ex2_approx(x * core::f32::consts::LOG2_E) };
    #[cfg(not(target_arch = "nvptx64"))]
    return exp(x);
}
/// a / b for a result rounded to f16 or bf16 next (the quotients of `gelu`,
/// `silu` and `sigmoid` there, and of softmax's outputs).
///
/// NVPTX: `div.full.f32`, within 2 ulp of f32 over the whole range (a
/// thousandth of a bf16 ulp) in a third of `div.rn`'s instructions;
/// subnormal inputs and results are flushed to zero (results below 2^-126,
/// where the unary ops' tests take an absolute bound: their formulas lose
/// those in f32 too once e^x overflows). Elsewhere `a / b`. inf / inf and
/// 0 / 0 give NaN, x / inf 0, as `/`.
///
/// ```
/// use ferrocm_kernels::math::div_for_half;
/// assert_eq!(div_for_half(3.0, 2.0), 1.5);
/// assert_eq!(div_for_half(-3.0, f32::INFINITY), 0.0);
/// ```
#[amdgpu_device]
#[inline(always)]
pub fn div_for_half(a: f32, b: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let q: f32;
        // SAFETY: a register-only instruction.
        unsafe {
            core::arch::asm!(
                "div.full.f32 {q}, {a}, {b};",
                q = out(reg32) q,
                a = in(reg32) a,
                b = in(reg32) b,
                options(pure, nomem, nostack)
            )
        };
        q
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        a / b
    }
}
/// The larger of `a` and `b`, NaN when either is (PyTorch's `maximum`). On
/// NVIDIA one `max.NaN` instruction (sm_80+); elsewhere a compare and a
/// select, as [`crate::elem::Elem::max`] (which of two zeros comes back may
/// differ between the two).
///
/// ```
/// use ferrocm_kernels::math::maximum;
/// assert_eq!(maximum(1.0, 2.0), 2.0);
/// assert!(maximum(f32::NAN, 2.0).is_nan() && maximum(2.0, f32::NAN).is_nan());
/// ```
#[amdgpu_device]
#[inline(always)]
pub fn maximum(a: f32, b: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    return unsafe { llvm::maximum(a, b) };
    #[cfg(not(target_arch = "nvptx64"))]
    return if b > a || b.is_nan() { b } else { a };
}
unary_math!(
    /// Natural logarithm.
    log,
    ln,
    log_f32
);
unary_math!(
    /// Sine.
    sin,
    sin,
    sin_f32
);
unary_math!(
    /// Cosine.
    cos,
    cos,
    cos_f32
);
unary_math!(
    /// Square root.
    sqrt,
    sqrt
);
unary_math!(
    /// Round toward -inf.
    floor,
    floor
);
unary_math!(
    /// Round toward +inf.
    ceil,
    ceil
);
unary_math!(
    /// Round half away from zero.
    round,
    round
);

/// 1 / sqrt(x), correctly rounded sqrt then a division (not the approximate `v_rsq`).
#[amdgpu_device]
#[inline(always)]
pub fn rsqrt(x: f32) -> f32 {
    1.0 / sqrt(x)
}

/// a * b + c with one rounding.
#[amdgpu_device]
#[inline(always)]
pub fn fma(a: f32, b: f32, c: f32) -> f32 {
    #[cfg(ferrocm_device)]
    return unsafe { llvm::fma(a, b, c) };
    #[cfg(not(ferrocm_device))]
    return a.mul_add(b, c);
}

/// x^y.
#[amdgpu_device]
#[inline(always)]
pub fn powf(x: f32, y: f32) -> f32 {
    #[cfg(target_arch = "amdgpu")]
    return unsafe { llvm::pow(x, y) };
    #[cfg(target_arch = "nvptx64")]
    return portable::pow_f32(x, y);
    #[cfg(not(ferrocm_device))]
    return x.powf(y);
}

/// ln(1 + y) for y ≥ 0, accurate for tiny y (where `log(1.0 + y)` would
/// round 1 + y to 1): log(u)·y/(u - 1) with u = 1 + y corrects the rounding
/// of u (Goldberg, "What every computer scientist should know about
/// floating-point arithmetic", thm. 4).
///
/// ```
/// let y = 1e-10f32;
/// assert!((ferrocm_kernels::math::ln_1p(y) - y).abs() < 1e-16);
/// ```
#[amdgpu_device]
#[inline(always)]
pub fn ln_1p(y: f32) -> f32 {
    let u = 1.0 + y;
    if u == 1.0 {
        y
    } else if u == f32::INFINITY {
        u
    } else {
        log(u) * (y / (u - 1.0))
    }
}

/// Hyperbolic tangent, within a few ulp of libm.
///
/// Odd Taylor polynomial below |x| = 0.55 (no cancellation near 0), else
/// `1 - 2 / (e^{2|x|} + 1)`; saturates to ±1 past |x| = 9.
///
/// ```
/// let t = ferrocm_kernels::math::tanh(0.5);
/// assert!((t - 0.5f32.tanh()).abs() < 1e-7);
/// ```
#[amdgpu_device]
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    let a = if x < 0.0 { -x } else { x };
    // NaN stays NaN; ±0 keeps its sign (tanh is odd).
    if a.is_nan() || a == 0.0 {
        return x;
    }
    let r = if a < 0.55 {
        // tanh a = a + a^3 * P(a^2), coefficients of the Taylor series.
        let z = a * a;
        let p = -1.0 / 3.0
            + z * (2.0 / 15.0
                + z * (-17.0 / 315.0
                    + z * (62.0 / 2835.0
                        + z * (-1382.0 / 155925.0
                            + z * (21844.0 / 6081075.0
                                + z * (-929569.0 / 638512875.0
                                    + z * (6404582.0 / 10854718875.0
                                        + z * (-443861162.0 / 1856156927625.0))))))));
        fma(a * z, p, a)
    } else if a < 9.0 {
        1.0 - 2.0 / (exp(2.0 * a) + 1.0)
    } else {
        1.0
    };
    if x < 0.0 { -r } else { r }
}

/// Error function, within a few ulp of libm.
///
/// Taylor series of erf below |x| = 0.5; above, `1 - erfc(x)` with a
/// Chebyshev fit of erfc (fractional error < 1.2e-7, Numerical Recipes'
/// `erfcc`); ±1 past |x| = 4.
///
/// ```
/// let e = ferrocm_kernels::math::erf(0.3);
/// assert!((e - 0.328626759).abs() < 1e-7);
/// ```
#[amdgpu_device]
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    let a = if x < 0.0 { -x } else { x };
    if a.is_nan() {
        return x;
    }
    let r = if a < 0.5 {
        // erf a = 2/sqrt(pi) * sum (-1)^n a^(2n+1) / (n! (2n+1))
        let z = a * a;
        let p = 1.0
            + z * (-1.0 / 3.0
                + z * (1.0 / 10.0
                    + z * (-1.0 / 42.0
                        + z * (1.0 / 216.0
                            + z * (-1.0 / 1320.0 + z * (1.0 / 9360.0 + z * (-1.0 / 75600.0)))))));
        core::f32::consts::FRAC_2_SQRT_PI * a * p
    } else if a < 4.0 {
        let t = 1.0 / (1.0 + 0.5 * a);
        let poly = -1.265_512_2
            + t * (1.000_023_7
                + t * (0.374_091_96
                    + t * (0.096_784_18
                        + t * (-0.186_288_06
                            + t * (0.278_868_07
                                + t * (-1.135_204
                                    + t * (1.488_515_9
                                        + t * (-0.822_152_2 + t * 0.170_872_77))))))));
        1.0 - t * exp(-a * a + poly)
    } else {
        1.0
    };
    if x < 0.0 { -r } else { r }
}

/// f32 exp, log, sin, cos and pow in plain Rust (`core` only), evaluated in
/// f64 and rounded once: the NVPTX bodies of [`exp`], [`log`], [`sin`],
/// [`cos`] and [`powf`], where LLVM has none. Compiled on the host too, where
/// `kernels/tests/portable_math.rs` checks them against libm.
///
/// ```
/// use ferrocm_kernels::math::portable;
/// assert_eq!(portable::exp_f32(1.0), 1.0f32.exp());
/// assert_eq!(portable::pow_f32(2.0, -150.0), 0.0);
/// ```
#[allow(
    clippy::excessive_precision,
    clippy::unreadable_literal,
    clippy::manual_range_contains
)]
pub mod portable {
    // Portable f32 math for GPU kernels (`core` only, no libm).
    //
    // LLVM's llvm.exp/log/sin/cos/pow intrinsics do not lower on NVPTX, so these
    // functions use only + - * /, comparisons, bit casts and `as` casts. Every f32
    // function works in f64 internally (relative error a few 1e-16) and rounds once
    // to f32 with `as f32` (round-to-nearest-even, subnormals included), so the f32
    // results are within 1 ulp of the correctly rounded value and almost always
    // exactly it.
    //
    // Sources of constants:
    // - Taylor coefficients 1/k! and 2/(2k+1) are written as constant expressions
    //   (folded by rustc, correctly rounded).
    // - LN2_HI/LN2_LO and PIO2_1/2/3/3T (a split of pi/2) are the fdlibm constants
    //   (e_exp.c, e_log.c, e_rem_pio2.c). LN2_HI has 32 significant bits and
    //   PIO2_1/2/3 have 33, so k*part is exact for |k| < 2^21 (exp/log) and
    //   |k| < 2^20 (sin/cos).
    // - TWO_OVER_PI holds the first 256 bits of 2/pi (checked with mpmath).

    /// 1.5 * 2^52: (v + SHIFT) - SHIFT rounds v to the nearest integer, |v| < 2^51.
    const SHIFT: f64 = 6755399441055744.0;

    #[inline(always)]
    fn round_f64(v: f64) -> f64 {
        (v + SHIFT) - SHIFT
    }

    /// 2^n for n in [-1022, 1023] (normal range), built from the exponent bits.
    #[inline(always)]
    fn pow2i(n: i32) -> f64 {
        f64::from_bits(((n + 1023) as u64) << 52)
    }

    /// y * 2^n with one rounding, for y in [0.5, 2] and n in [-2000, 2000]. Outside
    /// the normal exponent range it scales in two steps: the first is exact, the
    /// second rounds once (into the subnormals, or to inf).
    #[inline(always)]
    fn scale2(y: f64, n: i32) -> f64 {
        if n >= -1022 && n <= 1023 {
            y * pow2i(n)
        } else {
            let h = n / 2;
            y * pow2i(h) * pow2i(n - h)
        }
    }

    // ------------------------------------------------------------------ exp

    const LOG2E: f64 = core::f64::consts::LOG2_E; // 1/ln 2
    const LN2_HI: f64 = 6.93147180369123816490e-01; // 0x3FE62E42FEE00000
    const LN2_LO: f64 = 1.90821492927058770002e-10; // ln 2 - LN2_HI

    /// e^x in f64, relative error ~2e-16 (a subnormal result is rounded once).
    #[inline(always)]
    pub fn exp_f64(x: f64) -> f64 {
        if x.is_nan() {
            return x;
        }
        if x > 710.0 {
            return f64::INFINITY; // e^710 > f64::MAX
        }
        if x < -746.0 {
            return 0.0; // e^-746 < 2^-1075, half the smallest subnormal
        }
        // Cody-Waite: x = n ln2 + r, |r| <= ln2/2 (+ rounding). |n| <= 1077, so
        // n * LN2_HI is exact (32 + 11 bits) and x - n * LN2_HI is exact.
        let kf = round_f64(x * LOG2E);
        let r = (x - kf * LN2_HI) - kf * LN2_LO;
        // Taylor series to degree 13: truncation |r|^14/14! < 5e-18 for |r| <= 0.347.
        let q = r * (1.0 / 6227020800.0) + 1.0 / 479001600.0; // 1/13!, 1/12!
        let q = q * r + 1.0 / 39916800.0; // 1/11!
        let q = q * r + 1.0 / 3628800.0; // 1/10!
        let q = q * r + 1.0 / 362880.0; // 1/9!
        let q = q * r + 1.0 / 40320.0; // 1/8!
        let q = q * r + 1.0 / 5040.0; // 1/7!
        let q = q * r + 1.0 / 720.0; // 1/6!
        let q = q * r + 1.0 / 120.0; // 1/5!
        let q = q * r + 1.0 / 24.0; // 1/4!
        let q = q * r + 1.0 / 6.0; // 1/3!
        let q = q * r + 0.5; // 1/2!
        let q = q * r + 1.0; // 1/1!
        scale2(1.0 + r * q, kf as i32)
    }

    /// e^x for f32. NaN -> NaN, +inf -> +inf, -inf -> +0.
    #[inline(always)]
    pub fn exp_f32(x: f32) -> f32 {
        if x.is_nan() {
            return x;
        }
        if x > 89.0 {
            return f32::INFINITY; // e^89 > f32::MAX
        }
        if x < -104.0 {
            return 0.0; // e^-104 < 2^-150, half the smallest f32 subnormal
        }
        // The f64 result is normal here; `as f32` rounds it once, including into
        // the f32 subnormals and to +inf past f32::MAX.
        exp_f64(x as f64) as f32
    }

    /// e^x for f32 in f32 arithmetic with fused multiply-adds (no f64: the
    /// emulator's and the Cpu's body of [`super::exp`], NVPTX's until
    /// [`super::exp_ex2`]; f64 runs at half the f32 rate or less there). Cody-Waite reduction x = n·ln2 + r with a two-part ln2 (each
    /// step one fma, one rounding), Taylor polynomial of e^r to degree 7 on
    /// |r| <= 0.35 (truncation 5.5e-9 relative), exact scaling by 2^n in two
    /// steps (the first exact, the second rounding once, into the subnormals
    /// too). Within 1 ulp of libm over every binade
    /// (`kernels/tests/portable_math.rs`).
    ///
    /// No branch: the range is handled by clamping `x` first (the scaling
    /// then overflows and underflows where e^x does) and selecting a NaN
    /// back at the end, so an elementwise `exp` costs its arithmetic alone
    /// (with early returns it ran at 76% of the H100's copy bandwidth).
    #[inline(always)]
    pub fn exp_f32_fma(x: f32) -> f32 {
        use super::fma;
        const LOG2E: f32 = core::f32::consts::LOG2_E;
        // ln 2 = LN2_HI + LN2_LO; LN2_HI has 16 significant bits.
        const LN2_HI: f32 = 0.693_145_75;
        const LN2_LO: f32 = 1.428_606_8e-6;
        // Clamped so that n stays within the two-step scaling's range: past
        // 89 and -104 the scaling itself overflows to inf and rounds to 0.
        // (min/max drop a NaN; it is selected back at the end.)
        #[allow(clippy::manual_clamp)] // clamp keeps a NaN; min/max drop it (measured)
        let xc = x.min(89.0).max(-104.0);
        // n = round(x / ln 2) by the 1.5·2^23 trick (|x / ln 2| < 2^22):
        // t's low mantissa bits hold n.
        let t = fma(xc, LOG2E, 12_582_912.0);
        let n = t - 12_582_912.0;
        let ni = (t.to_bits() as i32).wrapping_sub(0x4B40_0000);
        let r = fma(n, -LN2_LO, fma(n, -LN2_HI, xc));
        let mut p = 1.0 / 5040.0;
        p = fma(p, r, 1.0 / 720.0);
        p = fma(p, r, 1.0 / 120.0);
        p = fma(p, r, 1.0 / 24.0);
        p = fma(p, r, 1.0 / 6.0);
        p = fma(p, r, 0.5);
        p = fma(p, r, 1.0);
        p = fma(p, r, 1.0);
        // n in [-150, 129]: both halves are normal powers of two, and p·2^h
        // (p in [0.7, 1.42]) is exact, so the product rounds once.
        let pow2 = |k: i32| f32::from_bits(((k + 127) as u32) << 23);
        let h = ni >> 1;
        let y = p * pow2(h) * pow2(ni - h);
        if x.is_nan() { x } else { y }
    }

    // ------------------------------------------------------------------ log

    const SQRT2_BITS: u64 = 0x3FF6_A09E_667F_3BCD; // sqrt(2) rounded to f64

    /// Natural log in f64, error ~1 ulp. ln(+-0) = -inf, ln(x < 0) = NaN,
    /// ln(+inf) = +inf, NaN -> NaN.
    #[inline(always)]
    pub fn ln_f64(x: f64) -> f64 {
        if x.is_nan() {
            return x;
        }
        if x < 0.0 {
            return f64::NAN;
        }
        if x == 0.0 {
            return f64::NEG_INFINITY;
        }
        if x == f64::INFINITY {
            return x;
        }
        let mut bits = x.to_bits();
        let mut e: i32 = -1023;
        if bits < 0x0010_0000_0000_0000 {
            // Subnormal: scale by 2^54 to make it normal.
            bits = (x * 18014398509481984.0).to_bits();
            e -= 54;
        }
        e += (bits >> 52) as i32;
        // m in [1, 2), then folded into [sqrt(1/2), sqrt(2)) (exact).
        let mut mbits = (bits & 0x000F_FFFF_FFFF_FFFF) | 0x3FF0_0000_0000_0000;
        if mbits >= SQRT2_BITS {
            mbits -= 1 << 52;
            e += 1;
        }
        let f = f64::from_bits(mbits) - 1.0; // exact, |f| <= 0.415
        // log(1+f) = 2 atanh(s), s = f/(2+f), |s| <= 0.1716, z = s^2 <= 0.02944:
        //   = 2s + s*R, R = 2z/3 + 2z^2/5 + ... + 2z^11/23 (next term < 1e-19).
        // Evaluated as f - s*(f - R) (2s = f - s*f) so the rounding error of s only
        // touches the small correction term, as in fdlibm's e_log.c.
        let s = f / (2.0 + f);
        let z = s * s;
        let r = z * (2.0 / 23.0) + 2.0 / 21.0;
        let r = r * z + 2.0 / 19.0;
        let r = r * z + 2.0 / 17.0;
        let r = r * z + 2.0 / 15.0;
        let r = r * z + 2.0 / 13.0;
        let r = r * z + 2.0 / 11.0;
        let r = r * z + 2.0 / 9.0;
        let r = r * z + 2.0 / 7.0;
        let r = r * z + 2.0 / 5.0;
        let r = r * z + 2.0 / 3.0;
        let r = r * z;
        let log1pf = f - s * (f - r);
        // e * LN2_HI is exact (|e| <= 1077), so only the final sums round.
        let ef = e as f64;
        ef * LN2_HI + (ef * LN2_LO + log1pf)
    }

    /// Natural log for f32. log(+-0) = -inf, log(x < 0) = NaN, log(+inf) = +inf.
    /// f32 subnormals are normal f64 numbers.
    #[inline(always)]
    pub fn log_f32(x: f32) -> f32 {
        ln_f64(x as f64) as f32
    }

    // ------------------------------------------------------------ sin / cos

    const INV_PIO2: f64 = core::f64::consts::FRAC_2_PI; // 2/pi
    const PIO2_1: f64 = 1.57079632673412561417e+00; // 0x3FF921FB54400000, first 33 bits of pi/2
    const PIO2_2: f64 = 6.07710050630396597660e-11; // 0x3DD0B4611A600000, next 33 bits
    const PIO2_3: f64 = 2.02226624871116645580e-21; // 0x3BA3198A2E000000, next 33 bits
    const PIO2_3T: f64 = 8.47842766036889956997e-32; // pi/2 - PIO2_1 - PIO2_2 - PIO2_3
    /// Cody-Waite is used below this |x|: then |k| <= 667544 < 2^20 and every
    /// k * PIO2_i is exact. Above it, the integer Payne-Hanek path is used.
    const CW_LIMIT: f32 = 1048576.0; // 2^20

    /// 2/pi = 0.A2F9836E4E441529 FC2757D1F534DDC0 DB6295993C439041 FE5163ABDEBBC561...
    const TWO_OVER_PI: [u64; 4] = [
        0xA2F9_836E_4E44_1529,
        0xFC27_57D1_F534_DDC0,
        0xDB62_9599_3C43_9041,
        0xFE51_63AB_DEBB_C561,
    ];
    const PIO2_2M62: f64 = core::f64::consts::FRAC_PI_2 / 4611686018427387904.0; // pi/2 * 2^-62 (exact scaling)

    /// 64 bits of 2/pi starting at bit p (bit 0 = first fractional bit),
    /// p in [-63, 191]; bits before the binary point are 0.
    #[inline(always)]
    fn two_over_pi_bits(p: i32) -> u64 {
        if p < 0 {
            return TWO_OVER_PI[0] >> ((-p) as u32 & 63);
        }
        let k = (p >> 6) as usize;
        let s = (p & 63) as u32;
        let w0 = TWO_OVER_PI[k & 3];
        if s == 0 {
            w0
        } else {
            (w0 << s) | (TWO_OVER_PI[(k + 1) & 3] >> (64 - s))
        }
    }

    /// x = n * pi/2 + r with |r| <= pi/4 (+ rounding). Returns (n, r).
    ///
    /// |x| < 2^20: Cody-Waite in f64 with pi/2 in four parts; r has relative
    /// error ~3e-16 (the pi/2 truncation after PIO2_3T is ~1e-47 * k).
    /// |x| >= 2^20 (all finite f32 up to f32::MAX): Payne-Hanek with integer
    /// arithmetic. x = m * 2^e with a 24-bit m; (x * 2/pi mod 4) is formed exactly
    /// as a 2.62 fixed-point u64 from a 128-bit window of 2/pi (u64 ops only, no
    /// u128), truncation error < 2^-61 quarter-turns (~7e-19 rad). No f32 lies
    /// closer than 2^-30 quarter-turns to a multiple of pi/2 (ARM
    /// optimized-routines' sincosf analysis: at most 29 leading zero bits), so
    /// r's relative error is < 2^-31, far below an f32 ulp (2^-24).
    #[inline(always)]
    fn rem_pio2(x: f32) -> (i64, f64) {
        if x.abs() < CW_LIMIT {
            let xd = x as f64;
            let kf = round_f64(xd * INV_PIO2);
            // x - k*PIO2_1 is exact (exact product, Sterbenz), the rest round once each.
            let r = ((xd - kf * PIO2_1) - kf * PIO2_2) - kf * PIO2_3;
            let r = r - kf * PIO2_3T;
            (kf as i64, r)
        } else {
            let bits = x.to_bits();
            let m = ((bits & 0x007F_FFFF) | 0x0080_0000) as u64;
            let e = ((bits >> 23) & 0xFF) as i32 - 150; // |x| = m * 2^e, e in [-3, 104]
            // x*(2/pi)*2^62 = m * sum_q b_q 2^(e+61-q); bits q < e-2 weigh >= 2^64
            // (whole turns) and drop out mod 2^64. Window starts at p = e-2.
            let p = e - 2;
            let hi = two_over_pi_bits(p);
            let lo = two_over_pi_bits(p + 64);
            // m*hi mod 2^64 plus the high 64 bits of m*lo (m < 2^24).
            let lo_hi = m * (lo >> 32) + ((m * (lo & 0xFFFF_FFFF)) >> 32);
            let res = m.wrapping_mul(hi).wrapping_add(lo_hi >> 32);
            // Nearest quadrant n (top 2 bits, rounded), signed remainder in 2^-62 units.
            let n = res.wrapping_add(1 << 61) >> 62;
            let rf = res.wrapping_sub(n << 62) as i64;
            let r = rf as f64 * PIO2_2M62;
            if bits >> 31 != 0 {
                (-(n as i64), -r)
            } else {
                (n as i64, r)
            }
        }
    }

    /// sin(r) for |r| <= pi/4: Taylor to r^17 (truncation < 1e-19 relative).
    #[inline(always)]
    fn sin_poly(r: f64) -> f64 {
        let z = r * r;
        let p = z * (1.0 / 355687428096000.0) - 1.0 / 1307674368000.0; // 1/17!, -1/15!
        let p = p * z + 1.0 / 6227020800.0; // 1/13!
        let p = p * z - 1.0 / 39916800.0; // 1/11!
        let p = p * z + 1.0 / 362880.0; // 1/9!
        let p = p * z - 1.0 / 5040.0; // 1/7!
        let p = p * z + 1.0 / 120.0; // 1/5!
        let p = p * z - 1.0 / 6.0; // 1/3!
        r + r * (z * p)
    }

    /// cos(r) for |r| <= pi/4: Taylor to r^16 (truncation < 3e-18).
    #[inline(always)]
    fn cos_poly(r: f64) -> f64 {
        let z = r * r;
        let p = z * (1.0 / 20922789888000.0) - 1.0 / 87178291200.0; // 1/16!, -1/14!
        let p = p * z + 1.0 / 479001600.0; // 1/12!
        let p = p * z - 1.0 / 3628800.0; // 1/10!
        let p = p * z + 1.0 / 40320.0; // 1/8!
        let p = p * z - 1.0 / 720.0; // 1/6!
        let p = p * z + 1.0 / 24.0; // 1/4!
        let p = p * z - 0.5; // 1/2!
        1.0 + z * p
    }

    /// sin for f32, within 1 ulp for every finite input (see `rem_pio2`).
    /// sin(+-0) = +-0, sin(+-inf) = NaN, NaN -> NaN.
    #[inline(always)]
    pub fn sin_f32(x: f32) -> f32 {
        if !x.is_finite() {
            return f32::NAN;
        }
        if x == 0.0 {
            return x; // keeps the sign of zero
        }
        let (n, r) = rem_pio2(x);
        let v = match n & 3 {
            0 => sin_poly(r),
            1 => cos_poly(r),
            2 => -sin_poly(r),
            _ => -cos_poly(r),
        };
        v as f32
    }

    /// cos for f32, within 1 ulp for every finite input (see `rem_pio2`).
    /// cos(+-inf) = NaN, NaN -> NaN.
    #[inline(always)]
    pub fn cos_f32(x: f32) -> f32 {
        if !x.is_finite() {
            return f32::NAN;
        }
        let (n, r) = rem_pio2(x);
        let v = match n & 3 {
            0 => cos_poly(r),
            1 => -sin_poly(r),
            2 => -cos_poly(r),
            _ => sin_poly(r),
        };
        v as f32
    }

    // ------------------------------------------------------------------ pow

    /// x^y for f32 with the C99 Annex F special cases (same as C powf and Rust's
    /// f32::powf). Integer |y| <= 1024: exact-when-possible binary powering in
    /// f64. Otherwise exp(y * ln|x|) in f64, whose relative error (<= ~1e-14, from
    /// rounding y*ln|x| with |y*ln|x|| <= ~104) is far below an f32 ulp.
    #[inline(always)]
    pub fn pow_f32(x: f32, y: f32) -> f32 {
        if y == 0.0 {
            return 1.0; // pow(x, +-0) = 1 even for NaN x
        }
        if x == 1.0 {
            return 1.0; // pow(1, y) = 1 even for NaN y
        }
        if x.is_nan() || y.is_nan() {
            return f32::NAN;
        }
        // y is: 0 = not an integer, 1 = odd integer, 2 = even integer.
        // |y| >= 2^24 (or inf) is always an even integer in f32.
        let ay = y.abs();
        let yclass = if ay >= 16777216.0 {
            2
        } else {
            let t = y as i32; // exact truncation for |y| < 2^24
            if t as f32 != y {
                0
            } else if t & 1 != 0 {
                1
            } else {
                2
            }
        };
        let x_neg = x.to_bits() >> 31 != 0;
        let ax = x.abs();
        if ay == f32::INFINITY {
            if ax == 1.0 {
                return 1.0; // pow(-1, +-inf) = 1
            }
            // |x| < 1: +inf -> +0, -inf -> +inf; |x| > 1: the reverse.
            return if (ax < 1.0) == (y > 0.0) {
                0.0
            } else {
                f32::INFINITY
            };
        }
        if ax == 0.0 || ax == f32::INFINITY {
            // Zero base: y < 0 -> inf, y > 0 -> 0; infinite base: the reverse.
            // Negative base and odd integer y keep the base's sign.
            let big = (ax == 0.0) == (y < 0.0);
            let v = if big { f32::INFINITY } else { 0.0 };
            return if x_neg && yclass == 1 { -v } else { v };
        }
        if x_neg && yclass == 0 {
            return f32::NAN; // negative finite base, non-integer finite exponent
        }
        let v = if yclass != 0 && ay <= 1024.0 {
            // Integer |y| <= 1024: binary powering in f64 (11 fixed rounds). Exact
            // whenever x^|y| fits in 53 bits, which covers every case where the
            // result is exactly halfway between two f32 (e.g. 4097^2, 2^-150),
            // so the tie rounds like C powf; otherwise rel. error <= ~2e-13.
            // Overflow/underflow of intermediates only happens when the f32
            // result is inf/0 anyway (1/inf = 0, 1/tiny = inf).
            let mut n = ay as u32;
            let mut b = ax as f64;
            let mut acc = 1.0f64;
            for _ in 0..11 {
                acc *= if n & 1 != 0 { b } else { 1.0 };
                b *= b;
                n >>= 1;
            }
            if y < 0.0 { 1.0 / acc } else { acc }
        } else {
            exp_f64(y as f64 * ln_f64(ax as f64))
        };
        // Overflow -> inf and underflow -> 0 come from the cast; sign before it.
        if x_neg && yclass == 1 {
            (-v) as f32
        } else {
            v as f32
        }
    }
}
