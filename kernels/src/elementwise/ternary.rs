//! `where_{mask}_{dtype}`: `out[i] = mask[i] != 0 ? on_true[i] : on_false[i]`,
//! masks u8, u32 or i64, values of every dtype, all three inputs broadcastable.
//!
//! `layout` (when `ndim > 0`) holds the output dims, then the strides of
//! mask, on_true and on_false.

use crate::device::*;
use crate::elem::*;
use crate::kernels;
use rocm_kernel_macros::{amdgpu_device, amdgpu_global};

/// The body every where kernel instantiates.
#[amdgpu_device]
#[inline(always)]
pub fn where_body<M: Elem, T: Elem>(
    out: *mut T,
    mask: *const M,
    on_true: *const T,
    on_false: *const T,
    n: u64,
    strides: Strides<3>,
) {
    let aligned = chunk_aligned(out)
        && chunk_aligned(mask)
        && chunk_aligned(on_true)
        && chunk_aligned(on_false);
    if strides.is_contiguous() && aligned {
        // Both values are read (contiguous chunks cost the same either way).
        grid_stride_chunks(
            n,
            false,
            |c| unsafe {
                (
                    load_chunk(mask, c),
                    load_chunk(on_true, c),
                    load_chunk(on_false, c),
                )
            },
            |c, (m, t, f)| unsafe {
                store_chunk(
                    out,
                    c,
                    chunk_of(|k| if m[k].eq(M::ZERO) { f[k] } else { t[k] }),
                )
            },
            |i| unsafe {
                let i = i as usize;
                let v = if load(mask, i).eq(M::ZERO) {
                    load(on_false, i)
                } else {
                    load(on_true, i)
                };
                store(out, i, v)
            },
        );
        return;
    }
    grid_stride_batched(
        n,
        strides.is_contiguous(),
        |i| unsafe {
            let at = strides.coords(i);
            let pick = !(load(mask, strides.at(at, 0))).eq(M::ZERO);
            if pick {
                load(on_true, strides.at(at, 1))
            } else {
                load(on_false, strides.at(at, 2))
            }
        },
        |i, v| unsafe { store(out, i as usize, v) },
    );
}

/// The parameter types of the where kernel of mask type `M`, value type `T`.
#[cfg(not(ferrocm_device))]
pub type WhereArgs<M, T> = (
    *mut T,
    *const M,
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
    u64,
    u64,
);

#[cfg(not(ferrocm_device))]
use crate::host::KernelRef;

/// The where kernels of a value type, one per mask type (host side).
#[cfg(not(ferrocm_device))]
pub trait WhereValue: Sized + 'static {
    /// `where_u8_{T}`.
    const MASK_U8: KernelRef<WhereArgs<u8, Self>>;
    /// `where_u32_{T}`.
    const MASK_U32: KernelRef<WhereArgs<u32, Self>>;
    /// `where_i64_{T}`.
    const MASK_I64: KernelRef<WhereArgs<i64, Self>>;
}

/// A mask type: picks the where kernel for value type `T`.
#[cfg(not(ferrocm_device))]
pub trait WhereMask: Sized + 'static {
    /// The kernel.
    fn kernel<T: WhereValue>() -> KernelRef<WhereArgs<Self, T>>;
}

#[cfg(not(ferrocm_device))]
const _: () = {
    impl WhereMask for u8 {
        fn kernel<T: WhereValue>() -> KernelRef<WhereArgs<Self, T>> {
            T::MASK_U8
        }
    }
    impl WhereMask for u32 {
        fn kernel<T: WhereValue>() -> KernelRef<WhereArgs<Self, T>> {
            T::MASK_U32
        }
    }
    impl WhereMask for i64 {
        fn kernel<T: WhereValue>() -> KernelRef<WhereArgs<Self, T>> {
            T::MASK_I64
        }
    }
};

macro_rules! where_values {
    ($($t:ty => $u8:ident, $u32:ident, $i64:ident;)*) => {$(
        #[cfg(not(ferrocm_device))]
        impl WhereValue for $t {
            const MASK_U8: KernelRef<WhereArgs<u8, Self>> = KernelRef::of::<$u8>();
            const MASK_U32: KernelRef<WhereArgs<u32, Self>> = KernelRef::of::<$u32>();
            const MASK_I64: KernelRef<WhereArgs<i64, Self>> = KernelRef::of::<$i64>();
        }
    )*};
}

where_values! {
    f32 => where_u8_f32, where_u32_f32, where_i64_f32;
    F16 => where_u8_f16, where_u32_f16, where_i64_f16;
    Bf16 => where_u8_bf16, where_u32_bf16, where_i64_bf16;
    u8 => where_u8_u8, where_u32_u8, where_i64_u8;
    u32 => where_u8_u32, where_u32_u32, where_i64_u32;
    i64 => where_u8_i64, where_u32_i64, where_i64_i64;
}

macro_rules! where_kernels {
    ($($m:ty => $($name:ident: $t:ty),*;)*) => {
        kernels! {$($(
            fn $name(out: *mut $t, mask: *const $m, on_true: *const $t, on_false: *const $t, n: u64, ndim: u32, layout: *const u64, l0: u64, l1: u64, m0: u64, m1: u64, t0: u64, t1: u64, f0: u64, f1: u64) {
                where_body::<$m, $t>(out, mask, on_true, on_false, n, Strides::new(ndim, layout, [l0, l1], [[m0, m1], [t0, t1], [f0, f1]]))
            }
        )*)*}
    };
}

where_kernels! {
    u8 => where_u8_f32: f32, where_u8_f16: F16, where_u8_bf16: Bf16, where_u8_u8: u8, where_u8_u32: u32, where_u8_i64: i64;
    u32 => where_u32_f32: f32, where_u32_f16: F16, where_u32_bf16: Bf16, where_u32_u8: u8, where_u32_u32: u32, where_u32_i64: i64;
    i64 => where_i64_f32: f32, where_i64_f16: F16, where_i64_bf16: Bf16, where_i64_u8: u8, where_i64_u32: u32, where_i64_i64: i64;
}
