//! Binary elementwise kernels with broadcasting: `binary_{op}_{dtype}` (add,
//! sub, mul, div, maximum, minimum) and comparisons `cmp_{op}_{dtype}` (eq, ne,
//! lt, le, gt, ge; output u8 0/1), for f32, f16, bf16, u8, u32, i64.
//!
//! `layout` (when `ndim > 0`) holds the output dims, then the lhs strides,
//! then the rhs strides; a broadcast dim has stride 0. `ndim == 0` means both
//! inputs are contiguous with the output's shape.

use crate::device::*;
use crate::elem::*;
use crate::kernels;
use rocm_kernel_macros::{amdgpu_device, amdgpu_global};

/// An arithmetic binary op.
#[amdgpu_device]
pub trait BinaryOp {
    /// Applies the op.
    fn apply<T: Elem>(a: T, b: T) -> T;
    /// Whether `apply(a, b)` is an error the op reports (integer division by
    /// zero): the kernel still writes `apply`'s value and raises a fault
    /// the host reads at its next wait; the Cpu refuses the op.
    #[inline(always)]
    fn faults<T: Elem>(_a: T, _b: T) -> bool {
        false
    }
    /// What a fault means, for the error message.
    const FAULT: &'static str = "";
}

/// A comparison.
#[amdgpu_device]
pub trait CmpOp {
    /// Applies the comparison (false when either float is NaN, except `ne`).
    fn apply<T: Elem>(a: T, b: T) -> bool;
}

macro_rules! binary_ops {
    ($($(#[$doc:meta])* $name:ident = |$a:ident, $b:ident| $body:expr
        $(, faults |$fa:ident, $fb:ident| $fault:expr => $what:literal)?;)*) => {$(
        $(#[$doc])*
        #[amdgpu_device]
        pub struct $name;
        #[amdgpu_device]
        impl BinaryOp for $name {
            #[inline(always)]
            fn apply<T: Elem>($a: T, $b: T) -> T { $body }
            $(
                #[inline(always)]
                fn faults<T: Elem>($fa: T, $fb: T) -> bool { $fault }
                const FAULT: &'static str = $what;
            )?
        }
    )*};
}

binary_ops! {
    /// a + b
    Add = |a, b| a.add(b);
    /// a - b
    Sub = |a, b| a.sub(b);
    /// a * b
    Mul = |a, b| a.mul(b);
    /// a / b; an integer division by zero is a fault (its element is 0), and
    /// `MIN / -1` wraps to `MIN` (Rust's `wrapping_div`)
    Div = |a, b| a.div(b), faults |_a, b| !T::IS_FLOAT && b.eq(T::ZERO) => "integer division by zero";
    /// max(a, b)
    Maximum = |a, b| a.max(b);
    /// min(a, b)
    Minimum = |a, b| a.min(b);
}

macro_rules! cmp_ops {
    ($($(#[$doc:meta])* $name:ident = |$a:ident, $b:ident| $body:expr;)*) => {$(
        $(#[$doc])*
        #[amdgpu_device]
        pub struct $name;
        #[amdgpu_device]
        impl CmpOp for $name {
            #[inline(always)]
            fn apply<T: Elem>($a: T, $b: T) -> bool { $body }
        }
    )*};
}

cmp_ops! {
    /// a == b
    Eq = |a, b| a.eq(b);
    /// a != b
    Ne = |a, b| !a.eq(b);
    /// a < b
    Lt = |a, b| a.lt(b);
    /// a <= b
    Le = |a, b| a.lt(b) || a.eq(b);
    /// a > b
    Gt = |a, b| b.lt(a);
    /// a >= b
    Ge = |a, b| b.lt(a) || a.eq(b);
}

/// The body every arithmetic binary kernel instantiates.
#[amdgpu_device]
#[inline(always)]
pub fn binary_body<T: Elem, Op: BinaryOp>(
    out: *mut T,
    lhs: *const T,
    rhs: *const T,
    n: u64,
    strides: Strides<2>,
    fault: Fault,
) {
    let apply = |i: u64, a: T, b: T| {
        if Op::faults(a, b) {
            fault.raise(i);
        }
        Op::apply(a, b)
    };
    if strides.is_contiguous() && chunk_aligned(out) && chunk_aligned(lhs) && chunk_aligned(rhs) {
        grid_stride_chunks(
            n,
            chunk_pairs::<T>(),
            |c| unsafe { (load_chunk(lhs, c), load_chunk(rhs, c)) },
            |c, (a, b)| unsafe {
                store_chunk(out, c, chunk_of(|k| apply(c + k as u64, a[k], b[k])))
            },
            |i| unsafe {
                store(
                    out,
                    i as usize,
                    apply(i, load(lhs, i as usize), load(rhs, i as usize)),
                )
            },
        );
        return;
    }
    grid_stride_batched(
        n,
        strides.is_contiguous(),
        |i| unsafe {
            let at = strides.coords(i);
            (load(lhs, strides.at(at, 0)), load(rhs, strides.at(at, 1)))
        },
        |i, (a, b)| unsafe { store(out, i as usize, apply(i, a, b)) },
    );
}

/// The body every comparison kernel instantiates.
#[amdgpu_device]
#[inline(always)]
pub fn cmp_body<T: Elem, Op: CmpOp>(
    out: *mut u8,
    lhs: *const T,
    rhs: *const T,
    n: u64,
    strides: Strides<2>,
) {
    if strides.is_contiguous() && chunk_aligned(out) && chunk_aligned(lhs) && chunk_aligned(rhs) {
        grid_stride_chunks(
            n,
            chunk_pairs::<T>(),
            |c| unsafe { (load_chunk(lhs, c), load_chunk(rhs, c)) },
            |c, (a, b)| unsafe { store_chunk(out, c, chunk_of(|k| Op::apply(a[k], b[k]) as u8)) },
            |i| unsafe {
                let (a, b) = (load(lhs, i as usize), load(rhs, i as usize));
                store(out, i as usize, Op::apply(a, b) as u8)
            },
        );
        return;
    }
    grid_stride_batched(
        n,
        strides.is_contiguous(),
        |i| unsafe {
            let at = strides.coords(i);
            (load(lhs, strides.at(at, 0)), load(rhs, strides.at(at, 1)))
        },
        |i, (a, b)| unsafe { store(out, i as usize, Op::apply(a, b) as u8) },
    );
}

/// The parameter types of every binary kernel on element type `T`.
#[cfg(not(ferrocm_device))]
pub type BinaryArgs<T> = (
    *mut T,
    *const T,
    *const T,
    u64,
    u32,
    *const u64,
    u64,
    u64,
    u64,
    u64,
    u64,
    u64,
    *mut u32,
    u32,
);

/// The parameter types of every comparison kernel on element type `T`.
#[cfg(not(ferrocm_device))]
pub type CmpArgs<T> = (
    *mut u8,
    *const T,
    *const T,
    u64,
    u32,
    *const u64,
    u64,
    u64,
    u64,
    u64,
    u64,
    u64,
);

#[cfg(not(ferrocm_device))]
use crate::host::KernelRef;

/// The kernels of one arithmetic binary op, per dtype (host side).
#[cfg(not(ferrocm_device))]
pub trait BinaryKernel: BinaryOp {
    /// Per dtype: f32, f16, bf16, u8, u32, i64.
    const F32: KernelRef<BinaryArgs<f32>>;
    #[allow(missing_docs)]
    const F16: KernelRef<BinaryArgs<F16>>;
    #[allow(missing_docs)]
    const BF16: KernelRef<BinaryArgs<Bf16>>;
    #[allow(missing_docs)]
    const U8: KernelRef<BinaryArgs<u8>>;
    #[allow(missing_docs)]
    const U32: KernelRef<BinaryArgs<u32>>;
    #[allow(missing_docs)]
    const I64: KernelRef<BinaryArgs<i64>>;
}

/// The kernels of one comparison, per dtype (host side).
#[cfg(not(ferrocm_device))]
pub trait CmpKernel: CmpOp {
    /// Per dtype: f32, f16, bf16, u8, u32, i64.
    const F32: KernelRef<CmpArgs<f32>>;
    #[allow(missing_docs)]
    const F16: KernelRef<CmpArgs<F16>>;
    #[allow(missing_docs)]
    const BF16: KernelRef<CmpArgs<Bf16>>;
    #[allow(missing_docs)]
    const U8: KernelRef<CmpArgs<u8>>;
    #[allow(missing_docs)]
    const U32: KernelRef<CmpArgs<u32>>;
    #[allow(missing_docs)]
    const I64: KernelRef<CmpArgs<i64>>;
}

/// The binary and comparison kernels of op `Op` for this element type.
#[cfg(not(ferrocm_device))]
pub trait BinaryKernels: Sized + 'static {
    /// The arithmetic kernel of `Op`.
    fn binary<Op: BinaryKernel>() -> KernelRef<BinaryArgs<Self>>;
    /// The comparison kernel of `Op`.
    fn cmp<Op: CmpKernel>() -> KernelRef<CmpArgs<Self>>;
}

#[cfg(not(ferrocm_device))]
const _: () = {
    macro_rules! pick {
        ($($t:ty => $c:ident),*) => {$(
            impl BinaryKernels for $t {
                fn binary<Op: BinaryKernel>() -> KernelRef<BinaryArgs<Self>> { Op::$c }
                fn cmp<Op: CmpKernel>() -> KernelRef<CmpArgs<Self>> { Op::$c }
            }
        )*};
    }
    pick!(f32 => F32, F16 => F16, Bf16 => BF16, u8 => U8, u32 => U32, i64 => I64);
};

macro_rules! binary_kernels {
    ($($op:ident => $f32:ident: f32, $f16:ident: F16, $bf16:ident: Bf16, $u8:ident: u8, $u32:ident: u32, $i64:ident: i64;)*) => {
        $(
            #[cfg(not(ferrocm_device))]
            impl BinaryKernel for $op {
                const F32: KernelRef<BinaryArgs<f32>> = KernelRef::of::<$f32>();
                const F16: KernelRef<BinaryArgs<F16>> = KernelRef::of::<$f16>();
                const BF16: KernelRef<BinaryArgs<Bf16>> = KernelRef::of::<$bf16>();
                const U8: KernelRef<BinaryArgs<u8>> = KernelRef::of::<$u8>();
                const U32: KernelRef<BinaryArgs<u32>> = KernelRef::of::<$u32>();
                const I64: KernelRef<BinaryArgs<i64>> = KernelRef::of::<$i64>();
            }
        )*
        binary_kernels!(@kernels $($op => $f32: f32, $f16: F16, $bf16: Bf16, $u8: u8, $u32: u32, $i64: i64;)*);
    };
    (@kernels $($op:ident => $($name:ident: $t:ty),*;)*) => {
        kernels! {$($(
            fn $name(out: *mut $t, lhs: *const $t, rhs: *const $t, n: u64, ndim: u32, layout: *const u64, l0: u64, l1: u64, a0: u64, a1: u64, b0: u64, b1: u64, status: *mut u32, tag: u32) {
                binary_body::<$t, $op>(out, lhs, rhs, n, Strides::new(ndim, layout, [l0, l1], [[a0, a1], [b0, b1]]), Fault { status, tag })
            }
        )*)*}
    };
}

macro_rules! cmp_kernels {
    ($($op:ident => $f32:ident: f32, $f16:ident: F16, $bf16:ident: Bf16, $u8:ident: u8, $u32:ident: u32, $i64:ident: i64;)*) => {
        $(
            #[cfg(not(ferrocm_device))]
            impl CmpKernel for $op {
                const F32: KernelRef<CmpArgs<f32>> = KernelRef::of::<$f32>();
                const F16: KernelRef<CmpArgs<F16>> = KernelRef::of::<$f16>();
                const BF16: KernelRef<CmpArgs<Bf16>> = KernelRef::of::<$bf16>();
                const U8: KernelRef<CmpArgs<u8>> = KernelRef::of::<$u8>();
                const U32: KernelRef<CmpArgs<u32>> = KernelRef::of::<$u32>();
                const I64: KernelRef<CmpArgs<i64>> = KernelRef::of::<$i64>();
            }
        )*
        cmp_kernels!(@kernels $($op => $f32: f32, $f16: F16, $bf16: Bf16, $u8: u8, $u32: u32, $i64: i64;)*);
    };
    (@kernels $($op:ident => $($name:ident: $t:ty),*;)*) => {
        kernels! { table CMP_KERNELS; $($(
            fn $name(out: *mut u8, lhs: *const $t, rhs: *const $t, n: u64, ndim: u32, layout: *const u64, l0: u64, l1: u64, a0: u64, a1: u64, b0: u64, b1: u64) {
                cmp_body::<$t, $op>(out, lhs, rhs, n, Strides::new(ndim, layout, [l0, l1], [[a0, a1], [b0, b1]]))
            }
        )*)*}
    };
}

binary_kernels! {
    Add => binary_add_f32: f32, binary_add_f16: F16, binary_add_bf16: Bf16, binary_add_u8: u8, binary_add_u32: u32, binary_add_i64: i64;
    Sub => binary_sub_f32: f32, binary_sub_f16: F16, binary_sub_bf16: Bf16, binary_sub_u8: u8, binary_sub_u32: u32, binary_sub_i64: i64;
    Mul => binary_mul_f32: f32, binary_mul_f16: F16, binary_mul_bf16: Bf16, binary_mul_u8: u8, binary_mul_u32: u32, binary_mul_i64: i64;
    Div => binary_div_f32: f32, binary_div_f16: F16, binary_div_bf16: Bf16, binary_div_u8: u8, binary_div_u32: u32, binary_div_i64: i64;
    Maximum => binary_maximum_f32: f32, binary_maximum_f16: F16, binary_maximum_bf16: Bf16, binary_maximum_u8: u8, binary_maximum_u32: u32, binary_maximum_i64: i64;
    Minimum => binary_minimum_f32: f32, binary_minimum_f16: F16, binary_minimum_bf16: Bf16, binary_minimum_u8: u8, binary_minimum_u32: u32, binary_minimum_i64: i64;
}

cmp_kernels! {
    Eq => cmp_eq_f32: f32, cmp_eq_f16: F16, cmp_eq_bf16: Bf16, cmp_eq_u8: u8, cmp_eq_u32: u32, cmp_eq_i64: i64;
    Ne => cmp_ne_f32: f32, cmp_ne_f16: F16, cmp_ne_bf16: Bf16, cmp_ne_u8: u8, cmp_ne_u32: u32, cmp_ne_i64: i64;
    Lt => cmp_lt_f32: f32, cmp_lt_f16: F16, cmp_lt_bf16: Bf16, cmp_lt_u8: u8, cmp_lt_u32: u32, cmp_lt_i64: i64;
    Le => cmp_le_f32: f32, cmp_le_f16: F16, cmp_le_bf16: Bf16, cmp_le_u8: u8, cmp_le_u32: u32, cmp_le_i64: i64;
    Gt => cmp_gt_f32: f32, cmp_gt_f16: F16, cmp_gt_bf16: Bf16, cmp_gt_u8: u8, cmp_gt_u32: u32, cmp_gt_i64: i64;
    Ge => cmp_ge_f32: f32, cmp_ge_f16: F16, cmp_ge_bf16: Bf16, cmp_ge_u8: u8, cmp_ge_u32: u32, cmp_ge_i64: i64;
}
