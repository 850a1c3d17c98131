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
    ndim: u32,
    layout: *const u64,
) {
    let mut i = global_id_x();
    let step = global_size_x();
    while i < n {
        let (m, t, f) = if ndim == 0 {
            (i, i, i)
        } else {
            (
                strided_offset(i, ndim, layout, ndim),
                strided_offset(i, ndim, layout, 2 * ndim),
                strided_offset(i, ndim, layout, 3 * ndim),
            )
        };
        unsafe {
            let pick = !(*mask.add(m as usize)).eq(M::ZERO);
            *out.add(i as usize) = if pick {
                *on_true.add(t as usize)
            } else {
                *on_false.add(f as usize)
            };
        }
        i += step;
    }
}

macro_rules! where_kernels {
    ($($m:ty => $($name:ident: $t:ty),*;)*) => {
        kernels! {$($(
            fn $name(out: *mut $t, mask: *const $m, on_true: *const $t, on_false: *const $t, n: u64, ndim: u32, layout: *const u64) {
                where_body::<$m, $t>(out, mask, on_true, on_false, n, ndim, layout)
            }
        )*)*}
    };
}

where_kernels! {
    u8 => where_u8_f32: f32, where_u8_f16: F16, where_u8_bf16: Bf16, where_u8_u8: u8, where_u8_u32: u32, where_u8_i64: i64;
    u32 => where_u32_f32: f32, where_u32_f16: F16, where_u32_bf16: Bf16, where_u32_u8: u8, where_u32_u32: u32, where_u32_i64: i64;
    i64 => where_i64_f32: f32, where_i64_f16: F16, where_i64_bf16: Bf16, where_i64_u8: u8, where_i64_u32: u32, where_i64_i64: i64;
}
