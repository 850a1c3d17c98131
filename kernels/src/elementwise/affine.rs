//! `affine_{dtype}`: `out = x * mul + add`, computed in f32 for f32, f16 and
//! bf16 (one fused multiply-add), in the integer type (wrapping) for u8, u32
//! and i64 with `mul` and `add` cast to it. Strided input allowed.

use crate::device::*;
use crate::elem::*;
use crate::kernels;
use crate::math;
use rocm_kernel_macros::{amdgpu_device, amdgpu_global};

/// x * mul + add for one element, as the CPU backend computes it too.
#[amdgpu_device]
#[inline(always)]
pub fn affine_apply<T: Elem>(x: T, mul: f32, add: f32) -> T {
    if T::IS_FLOAT {
        T::from_f32(math::fma(x.to_f32(), mul, add))
    } else {
        x.mul(T::from_f32(mul)).add(T::from_f32(add))
    }
}

/// The body every affine kernel instantiates.
#[amdgpu_device]
#[inline(always)]
pub fn affine_body<T: Elem>(
    out: *mut T,
    inp: *const T,
    n: u64,
    strides: Strides<1>,
    mul: f32,
    add: f32,
) {
    if strides.is_contiguous() && chunk_aligned(out) && chunk_aligned(inp) {
        grid_stride_chunks(
            n,
            chunk_pairs::<T>(),
            |c| unsafe { load_chunk(inp, c) },
            |c, x| unsafe { store_chunk(out, c, chunk_of(|k| affine_apply(x[k], mul, add))) },
            |i| unsafe {
                store(
                    out,
                    i as usize,
                    affine_apply(load(inp, i as usize), mul, add),
                )
            },
        );
        return;
    }
    grid_stride_batched(
        n,
        strides.is_contiguous(),
        |i| unsafe { load(inp, strides.offset(i, 0)) },
        |i, x| unsafe { store(out, i as usize, affine_apply(x, mul, add)) },
    );
}

#[cfg(not(ferrocm_device))]
use crate::host::KernelRef;

/// The parameter types of the affine kernel of element type `T`.
#[cfg(not(ferrocm_device))]
pub type AffineArgs<T> = (
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
    f32,
);

/// The affine kernel of an element type (host side).
#[cfg(not(ferrocm_device))]
pub trait AffineKernels: Sized + 'static {
    /// `affine_{T}(out, inp, n, ndim, layout, mul, add)`.
    const AFFINE: KernelRef<AffineArgs<Self>>;
}

macro_rules! affine_kernels {
    ($($name:ident: $t:ty),*) => {
        $(
            #[cfg(not(ferrocm_device))]
            impl AffineKernels for $t {
                const AFFINE: KernelRef<AffineArgs<Self>> = KernelRef::of::<$name>();
            }
        )*
        kernels! {$(
            fn $name(out: *mut $t, inp: *const $t, n: u64, ndim: u32, layout: *const u64, l0: u64, l1: u64, l2: u64, l3: u64, mul: f32, add: f32) {
                affine_body::<$t>(out, inp, n, Strides::new(ndim, layout, [l0, l1], [[l2, l3]]), mul, add)
            }
        )*}
    };
}

affine_kernels!(affine_f32: f32, affine_f16: F16, affine_bf16: Bf16, affine_u8: u8, affine_u32: u32, affine_i64: i64);
