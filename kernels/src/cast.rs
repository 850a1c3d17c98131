//! `cast_{src}_{dst}` between every pair of f32, f16, bf16, u8, u32, i64, with
//! Rust's `as` semantics (float to int saturates, NaN gives 0; int to int
//! wraps; to f16/bf16 rounds to nearest even). Strided input allowed.

use crate::device::*;
use crate::elem::*;
use crate::kernels;
use rocm_kernel_macros::{amdgpu_device, amdgpu_global};

/// The body every cast kernel instantiates.
#[amdgpu_device]
#[inline(always)]
pub fn cast_body<S: Elem, D: Elem>(
    out: *mut D,
    inp: *const S,
    n: u64,
    ndim: u32,
    layout: *const u64,
) {
    grid_stride(n, |i| unsafe {
        *out.add(i as usize) = (*inp.add(input_offset(i, ndim, layout, 0))).convert::<D>();
    });
}

macro_rules! cast_kernels {
    ($($name:ident: $s:ty => $d:ty,)*) => {
        kernels! {$(
            fn $name(out: *mut $d, inp: *const $s, n: u64, ndim: u32, layout: *const u64) {
                cast_body::<$s, $d>(out, inp, n, ndim, layout)
            }
        )*}
    };
}

cast_kernels! {
    cast_f32_f16: f32 => F16, cast_f32_bf16: f32 => Bf16, cast_f32_u8: f32 => u8, cast_f32_u32: f32 => u32, cast_f32_i64: f32 => i64,
    cast_f16_f32: F16 => f32, cast_f16_bf16: F16 => Bf16, cast_f16_u8: F16 => u8, cast_f16_u32: F16 => u32, cast_f16_i64: F16 => i64,
    cast_bf16_f32: Bf16 => f32, cast_bf16_f16: Bf16 => F16, cast_bf16_u8: Bf16 => u8, cast_bf16_u32: Bf16 => u32, cast_bf16_i64: Bf16 => i64,
    cast_u8_f32: u8 => f32, cast_u8_f16: u8 => F16, cast_u8_bf16: u8 => Bf16, cast_u8_u32: u8 => u32, cast_u8_i64: u8 => i64,
    cast_u32_f32: u32 => f32, cast_u32_f16: u32 => F16, cast_u32_bf16: u32 => Bf16, cast_u32_u8: u32 => u8, cast_u32_i64: u32 => i64,
    cast_i64_f32: i64 => f32, cast_i64_f16: i64 => F16, cast_i64_bf16: i64 => Bf16, cast_i64_u8: i64 => u8, cast_i64_u32: i64 => u32,
}
