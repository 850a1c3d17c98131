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
    grid_stride(n, |i| unsafe {
        let pick = !(*mask.add(input_offset(i, ndim, layout, 0))).eq(M::ZERO);
        *out.add(i as usize) = if pick {
            *on_true.add(input_offset(i, ndim, layout, 1))
        } else {
            *on_false.add(input_offset(i, ndim, layout, 2))
        };
    });
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
