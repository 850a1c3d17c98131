//! f32 math of the device layer.
//!
//! exp, log, sin, cos, sqrt and fma map to LLVM intrinsics on the GPU and to
//! the host's libm in the emulator. tanh and erf have no LLVM intrinsic: they
//! are written here once and run unchanged on both sides.

use rocm_kernel_macros::amdgpu_device;

#[amdgpu_device]
#[cfg(target_arch = "amdgpu")]
mod llvm {
    unsafe extern "C" {
        #[link_name = "llvm.exp.f32"]
        pub fn exp(x: f32) -> f32;
        #[link_name = "llvm.log.f32"]
        pub fn log(x: f32) -> f32;
        #[link_name = "llvm.sin.f32"]
        pub fn sin(x: f32) -> f32;
        #[link_name = "llvm.cos.f32"]
        pub fn cos(x: f32) -> f32;
        #[link_name = "llvm.sqrt.f32"]
        pub fn sqrt(x: f32) -> f32;
        #[link_name = "llvm.fma.f32"]
        pub fn fma(a: f32, b: f32, c: f32) -> f32;
        #[link_name = "llvm.floor.f32"]
        pub fn floor(x: f32) -> f32;
        #[link_name = "llvm.ceil.f32"]
        pub fn ceil(x: f32) -> f32;
        #[link_name = "llvm.round.f32"]
        pub fn round(x: f32) -> f32;
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
            #[cfg(target_arch = "amdgpu")]
            return unsafe { llvm::$name(x) };
            #[cfg(not(target_arch = "amdgpu"))]
            return x.$host();
        }
    };
}

unary_math!(
    /// e^x.
    ///
    /// ```
    /// assert_eq!(ferrocm_kernels::math::exp(0.0), 1.0);
    /// ```
    exp,
    exp
);
unary_math!(
    /// Natural logarithm.
    log,
    ln
);
unary_math!(
    /// Sine.
    sin,
    sin
);
unary_math!(
    /// Cosine.
    cos,
    cos
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
    #[cfg(target_arch = "amdgpu")]
    return unsafe { llvm::fma(a, b, c) };
    #[cfg(not(target_arch = "amdgpu"))]
    return a.mul_add(b, c);
}

/// x^y.
#[amdgpu_device]
#[inline(always)]
pub fn powf(x: f32, y: f32) -> f32 {
    #[cfg(target_arch = "amdgpu")]
    return unsafe { llvm::pow(x, y) };
    #[cfg(not(target_arch = "amdgpu"))]
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
