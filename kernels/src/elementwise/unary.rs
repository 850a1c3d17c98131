//! Unary elementwise kernels: `unary_{op}_{dtype}` for f32, f16 and bf16.
//!
//! One generic body ([`unary_body`]) and one op struct per operation; the op's
//! math ([`UnaryOp::apply`]) is also what the CPU backend calls, so the three
//! devices share one definition. Inputs may be strided (`ndim > 0`, `layout`
//! = dims then strides); `ndim == 0` is the contiguous fast path.

use crate::device::*;
use crate::elem::*;
use crate::kernels;
use crate::math;
use rocm_kernel_macros::{amdgpu_device, amdgpu_global};

/// A unary operation on f32 (f16/bf16 compute in f32). `p` is the op's scalar
/// parameter (the exponent of `powf`, alpha of `elu`), ignored by the others.
#[amdgpu_device]
pub trait UnaryOp {
    /// Applies the op.
    fn apply(x: f32, p: f32) -> f32;
    /// Applies the op for a result that is rounded to f16 or bf16 next: the
    /// same formula, its exponential [`math::exp_for_half`] (`1 + e^z`:
    /// [`math::exp_fast`]) and its quotient [`math::div_for_half`] (on
    /// NVIDIA a fraction of the instructions, well inside half an ulp of the
    /// narrow type). Use [`apply_for`], which picks by element type.
    fn apply_half(x: f32, p: f32) -> f32;
    /// Whether the contiguous f16/bf16 kernel may take two chunks a step
    /// ([`grid_stride_chunks`]); `false` for the ops whose portable bodies
    /// (sin, cos, pow on NVPTX) would then no longer fit in registers.
    const PAIRS: bool;
}

/// `true` unless the op is marked `single` in `unary_ops!`.
macro_rules! pairs_unless {
    () => {
        true
    };
    (single) => {
        false
    };
}

/// Op `Op` on `x` for a result rounded to `T` next: [`UnaryOp::apply_half`]
/// for f16 and bf16, [`UnaryOp::apply`] otherwise. What the kernels and the
/// Cpu backend both call.
///
/// ```
/// use ferrocm_kernels::elem::Bf16;
/// use ferrocm_kernels::elementwise::unary::{apply_for, Exp};
/// assert_eq!(apply_for::<f32, Exp>(0.0, 0.0), 1.0);
/// assert_eq!(apply_for::<Bf16, Exp>(f32::NEG_INFINITY, 0.0), 0.0);
/// ```
#[amdgpu_device]
#[inline(always)]
pub fn apply_for<T: Elem, Op: UnaryOp>(x: f32, p: f32) -> f32 {
    if T::IS_FLOAT && core::mem::size_of::<T>() == 2 {
        Op::apply_half(x, p)
    } else {
        Op::apply(x, p)
    }
}

/// `exp`, `div` and `one_plus_exp` in a body (named by `with exp, div,
/// one_plus_exp;`, so that the bodies see them) are e^x, a / b and 1 + e^x
/// at the precision of the result: [`math::exp`] and `/` in `apply`,
/// [`math::exp_for_half`], [`math::div_for_half`] and `1 +`
/// [`math::exp_fast`] in `apply_half` (the sum absorbs what `exp_fast`
/// flushes to 0, so it needs no subnormal results; a bare e^x does). (`elu`
/// and `softplus` call `math::exp` in both: e^x - 1 near 0 needs every bit
/// of f32.)
macro_rules! unary_ops {
    (with $exp:ident, $div:ident, $one_plus_exp:ident; $($(#[$doc:meta])* $name:ident = $($single:ident)? |$x:ident, $p:ident| $body:expr;)*) => {
        $(
            $(#[$doc])*
            #[amdgpu_device]
            pub struct $name;
            #[amdgpu_device]
            impl UnaryOp for $name {
                const PAIRS: bool = pairs_unless!($($single)?);
                #[inline(always)]
                #[allow(unused_variables)]
                fn apply($x: f32, $p: f32) -> f32 {
                    let $exp = math::exp;
                    let $div = |a: f32, b: f32| a / b;
                    let $one_plus_exp = |z: f32| 1.0 + math::exp(z);
                    $body
                }
                #[inline(always)]
                #[allow(unused_variables)]
                fn apply_half($x: f32, $p: f32) -> f32 {
                    let $exp = math::exp_for_half;
                    let $div = math::div_for_half;
                    let $one_plus_exp = |z: f32| 1.0 + math::exp_fast(z);
                    $body
                }
            }
        )*
    };
}

unary_ops! {
    with exp, div, one_plus_exp;
    /// -x
    Neg = |x, p| -x;
    /// |x|
    Abs = |x, p| if x < 0.0 { -x } else if x == 0.0 { 0.0 } else { x };
    /// x²
    Sqr = |x, p| x * x;
    /// √x
    Sqrt = |x, p| math::sqrt(x);
    /// 1/√x
    Rsqrt = |x, p| math::rsqrt(x);
    /// 1/x
    Recip = |x, p| 1.0 / x;
    /// eˣ
    Exp = |x, p| exp(x);
    /// ln x
    Log = |x, p| math::log(x);
    /// sin x
    Sin = single |x, p| math::sin(x);
    /// cos x
    Cos = single |x, p| math::cos(x);
    /// tanh x
    Tanh = |x, p| math::tanh(x);
    /// erf x
    Erf = |x, p| math::erf(x);
    /// GELU, tanh approximation: 0.5x(1 + tanh(u)), u = √(2/π)(x + 0.044715x³),
    /// computed as x / (1 + e^(-2u)) (the same function: 1 + tanh u =
    /// 2 / (1 + e^(-2u))): one exponential and no cancellation where tanh u
    /// nears -1; e^(-2u) = inf gives -0 for negative x, as the limit. NaN
    /// stays NaN. -2u is x(-1.5957692 - 0.07135481x²): a multiply and an FMA
    /// after x².
    Gelu = |x, p| div(x, one_plus_exp(x * math::fma(-0.071_354_814, x * x, -1.595_769_2)));
    /// GELU, exact: 0.5x(1 + erf(x/√2))
    GeluErf = |x, p| 0.5 * x * (1.0 + math::erf(x * core::f32::consts::FRAC_1_SQRT_2));
    /// x·σ(x)
    Silu = |x, p| div(x, one_plus_exp(-x));
    /// max(x, 0); NaN stays NaN (as PyTorch)
    Relu = |x, p| if x <= 0.0 { 0.0 } else { x };
    /// 1/(1 + e⁻ˣ)
    Sigmoid = |x, p| div(1.0, one_plus_exp(-x));
    /// -1, 0 or 1 (NaN stays NaN)
    Sign = |x, p| if x > 0.0 { 1.0 } else if x < 0.0 { -1.0 } else { x * 0.0 };
    /// ⌈x⌉
    Ceil = |x, p| math::ceil(x);
    /// ⌊x⌋
    Floor = |x, p| math::floor(x);
    /// round half away from zero
    Round = |x, p| math::round(x);
    /// xᵖ
    Powf = single |x, p| math::powf(x, p);
    /// x if x ≥ 0 else p(eˣ - 1)
    Elu = |x, p| if x >= 0.0 { x } else { p * (math::exp(x) - 1.0) };
    /// ln(1 + eˣ), as PyTorch: x itself above 20; computed as
    /// max(x, 0) + ln1p(e^-|x|) so neither side overflows nor cancels
    Softplus = |x, p| if x > 20.0 { x } else {
        (if x > 0.0 { x } else { 0.0 }) + math::ln_1p(math::exp(if x > 0.0 { -x } else { x }))
    };
    /// x if x ≥ 0 else p·x (p: the negative slope)
    LeakyRelu = |x, p| if x < 0.0 { p * x } else { x };
    /// x·min(max(x + 3, 0), 6)/6
    Hardswish = |x, p| x * (x + 3.0).clamp(0.0, 6.0) / 6.0;
}

/// The body every unary kernel instantiates.
#[amdgpu_device]
#[inline(always)]
pub fn unary_body<T: Elem, Op: UnaryOp>(
    out: *mut T,
    inp: *const T,
    n: u64,
    strides: Strides<1>,
    p: f32,
) {
    let f = |x: T| T::from_f32(apply_for::<T, Op>(x.to_f32(), p));
    if strides.is_contiguous() && chunk_aligned(out) && chunk_aligned(inp) {
        let load_c = |c| unsafe { load_chunk(inp, c) };
        let store_c = |c, x: [T; CHUNK as usize]| unsafe {
            store_chunk_f32(out, c, chunk_of(|k| apply_for::<T, Op>(x[k].to_f32(), p)))
        };
        let one = |i| unsafe { store(out, i as usize, f(load(inp, i as usize))) };
        grid_stride_chunks(n, Op::PAIRS && chunk_pairs::<T>(), load_c, store_c, one);
        return;
    }
    grid_stride_batched(
        n,
        strides.is_contiguous(),
        |i| unsafe { load(inp, strides.offset(i, 0)) },
        |i, x| unsafe { store(out, i as usize, f(x)) },
    );
}

/// The parameter types of every unary kernel on element type `T`.
#[cfg(not(ferrocm_device))]
pub type UnaryArgs<T> = (
    *mut T,
    *const T,
    u64,
    u32,
    *const u64,
    u64,
    u64,
    u64,
    u64,
    f32,
);

/// The kernels of one unary op, per float dtype (host side).
#[cfg(not(ferrocm_device))]
pub trait UnaryKernel: UnaryOp {
    /// `unary_{op}_f32`.
    const F32: KernelRef<UnaryArgs<f32>>;
    /// `unary_{op}_f16`.
    const F16: KernelRef<UnaryArgs<F16>>;
    /// `unary_{op}_bf16`.
    const BF16: KernelRef<UnaryArgs<Bf16>>;
}

/// The unary kernel of op `Op` for this element type; `None` for the integer
/// types (unary ops are float-only).
#[cfg(not(ferrocm_device))]
pub trait UnaryKernels: Sized + 'static {
    /// The kernel, if this dtype has one.
    fn kernel<Op: UnaryKernel>() -> Option<KernelRef<UnaryArgs<Self>>>;
}

#[cfg(not(ferrocm_device))]
const _: () = {
    macro_rules! pick {
        ($($t:ty => $c:ident),*; $($none:ty),*) => {
            $(impl UnaryKernels for $t {
                fn kernel<Op: UnaryKernel>() -> Option<KernelRef<UnaryArgs<Self>>> { Some(Op::$c) }
            })*
            $(impl UnaryKernels for $none {
                fn kernel<Op: UnaryKernel>() -> Option<KernelRef<UnaryArgs<Self>>> { None }
            })*
        };
    }
    pick!(f32 => F32, F16 => F16, Bf16 => BF16; u8, u32, i64);
};

/// No activation.
pub const ACT_NONE: u32 = 0;
/// `relu` ([`Relu`]).
pub const ACT_RELU: u32 = 1;
/// `gelu`, tanh approximation ([`Gelu`]).
pub const ACT_GELU: u32 = 2;
/// `gelu` with erf ([`GeluErf`]).
pub const ACT_GELU_ERF: u32 = 3;
/// `silu` ([`Silu`]).
pub const ACT_SILU: u32 = 4;

/// The activation `act` (one of the `ACT_*` codes) applied to `v`, for a
/// result rounded to `T` next: the unary ops' own formulas ([`apply_for`]),
/// for the kernels that fuse one (`linear(.., Some(Silu))` equals
/// `linear(..).silu()` up to the rounding of the intermediate; `glu` gates
/// with it).
///
/// ```
/// use ferrocm_kernels::elementwise::unary::{ACT_NONE, ACT_RELU, activation};
/// assert_eq!(activation::<f32>(-2.0, ACT_RELU), 0.0);
/// assert_eq!(activation::<f32>(-2.0, ACT_NONE), -2.0);
/// ```
#[amdgpu_device]
#[inline(always)]
pub fn activation<T: Elem>(v: f32, act: u32) -> f32 {
    match act {
        ACT_RELU => apply_for::<T, Relu>(v, 0.0),
        ACT_GELU => apply_for::<T, Gelu>(v, 0.0),
        ACT_GELU_ERF => apply_for::<T, GeluErf>(v, 0.0),
        ACT_SILU => apply_for::<T, Silu>(v, 0.0),
        _ => v,
    }
}

#[cfg(not(ferrocm_device))]
use crate::host::KernelRef;

macro_rules! unary_kernels {
    ($($op:ident($method:ident $(: $param:ident)?) => $f32:ident, $f16:ident, $bf16:ident;)*) => {
        $(
            #[cfg(not(ferrocm_device))]
            impl UnaryKernel for $op {
                const F32: KernelRef<UnaryArgs<f32>> = KernelRef::of::<$f32>();
                const F16: KernelRef<UnaryArgs<F16>> = KernelRef::of::<$f16>();
                const BF16: KernelRef<UnaryArgs<Bf16>> = KernelRef::of::<$bf16>();
            }
        )*
        kernels! {
            $(
                fn $f32(out: *mut f32, inp: *const f32, n: u64, ndim: u32, layout: *const u64, l0: u64, l1: u64, l2: u64, l3: u64, p: f32) {
                    unary_body::<f32, $op>(out, inp, n, Strides::new(ndim, layout, [l0, l1], [[l2, l3]]), p)
                }
                fn $f16(out: *mut F16, inp: *const F16, n: u64, ndim: u32, layout: *const u64, l0: u64, l1: u64, l2: u64, l3: u64, p: f32) {
                    unary_body::<F16, $op>(out, inp, n, Strides::new(ndim, layout, [l0, l1], [[l2, l3]]), p)
                }
                fn $bf16(out: *mut Bf16, inp: *const Bf16, n: u64, ndim: u32, layout: *const u64, l0: u64, l1: u64, l2: u64, l3: u64, p: f32) {
                    unary_body::<Bf16, $op>(out, inp, n, Strides::new(ndim, layout, [l0, l1], [[l2, l3]]), p)
                }
            )*
        }
    };
}

/// Every unary op, the one list a new op joins (after its struct in
/// `unary_ops!` above): `Op(method) => kernel names;`, or
/// `Op(method: parameter) => ...;` for an op with a scalar parameter. The
/// list instantiates the kernels here and, through [`unary_op_list!`], the op
/// library's `Unary` enum and `Tensor` methods.
#[macro_export]
macro_rules! unary_op_list {
    ($callback:ident) => {
        $callback! {
            Neg(neg) => unary_neg_f32, unary_neg_f16, unary_neg_bf16;
            Abs(abs) => unary_abs_f32, unary_abs_f16, unary_abs_bf16;
            Sqr(sqr) => unary_sqr_f32, unary_sqr_f16, unary_sqr_bf16;
            Sqrt(sqrt) => unary_sqrt_f32, unary_sqrt_f16, unary_sqrt_bf16;
            Rsqrt(rsqrt) => unary_rsqrt_f32, unary_rsqrt_f16, unary_rsqrt_bf16;
            Recip(recip) => unary_recip_f32, unary_recip_f16, unary_recip_bf16;
            Exp(exp) => unary_exp_f32, unary_exp_f16, unary_exp_bf16;
            Log(log) => unary_log_f32, unary_log_f16, unary_log_bf16;
            Sin(sin) => unary_sin_f32, unary_sin_f16, unary_sin_bf16;
            Cos(cos) => unary_cos_f32, unary_cos_f16, unary_cos_bf16;
            Tanh(tanh) => unary_tanh_f32, unary_tanh_f16, unary_tanh_bf16;
            Erf(erf) => unary_erf_f32, unary_erf_f16, unary_erf_bf16;
            Gelu(gelu) => unary_gelu_f32, unary_gelu_f16, unary_gelu_bf16;
            GeluErf(gelu_erf) => unary_gelu_erf_f32, unary_gelu_erf_f16, unary_gelu_erf_bf16;
            Silu(silu) => unary_silu_f32, unary_silu_f16, unary_silu_bf16;
            Relu(relu) => unary_relu_f32, unary_relu_f16, unary_relu_bf16;
            Sigmoid(sigmoid) => unary_sigmoid_f32, unary_sigmoid_f16, unary_sigmoid_bf16;
            Sign(sign) => unary_sign_f32, unary_sign_f16, unary_sign_bf16;
            Ceil(ceil) => unary_ceil_f32, unary_ceil_f16, unary_ceil_bf16;
            Floor(floor) => unary_floor_f32, unary_floor_f16, unary_floor_bf16;
            Round(round) => unary_round_f32, unary_round_f16, unary_round_bf16;
            Powf(powf: exponent) => unary_powf_f32, unary_powf_f16, unary_powf_bf16;
            Elu(elu: alpha) => unary_elu_f32, unary_elu_f16, unary_elu_bf16;
            Softplus(softplus) => unary_softplus_f32, unary_softplus_f16, unary_softplus_bf16;
            LeakyRelu(leaky_relu: negative_slope) => unary_leaky_relu_f32, unary_leaky_relu_f16, unary_leaky_relu_bf16;
            Hardswish(hardswish) => unary_hardswish_f32, unary_hardswish_f16, unary_hardswish_bf16;
        }
    };
}

unary_op_list!(unary_kernels);
