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
pub fn cast_body<S: Elem, D: Elem>(out: *mut D, inp: *const S, n: u64, strides: Strides<1>) {
    if strides.is_contiguous() && chunk_aligned(out) && chunk_aligned(inp) {
        grid_stride_chunks(
            n,
            chunk_pairs::<S>() && chunk_pairs::<D>(),
            |c| unsafe { load_chunk(inp, c) },
            |c, x| unsafe { store_chunk(out, c, chunk_of(|k| x[k].convert::<D>())) },
            |i| unsafe { store(out, i as usize, load(inp, i as usize).convert::<D>()) },
        );
        return;
    }
    grid_stride_batched(
        n,
        strides.is_contiguous(),
        |i| unsafe { load(inp, strides.offset(i, 0)) },
        |i, x| unsafe { store(out, i as usize, x.convert::<D>()) },
    );
}

/// The parameter types of the cast kernel from `S` to `D` (and of the copy
/// kernel when `S == D`).
#[cfg(not(ferrocm_device))]
pub type CastArgs<S, D> = (*mut D, *const S, u64, u32, *const u64, u64, u64, u64, u64);

#[cfg(not(ferrocm_device))]
use crate::host::KernelRef;

/// The cast kernels into a target type, one per source type (host side); the
/// identity entry is the target's `copy_*` kernel (same signature).
#[cfg(not(ferrocm_device))]
pub trait CastTarget: Sized + 'static {
    /// From f32.
    const FROM_F32: KernelRef<CastArgs<f32, Self>>;
    /// From f16.
    const FROM_F16: KernelRef<CastArgs<F16, Self>>;
    /// From bf16.
    const FROM_BF16: KernelRef<CastArgs<Bf16, Self>>;
    /// From u8.
    const FROM_U8: KernelRef<CastArgs<u8, Self>>;
    /// From u32.
    const FROM_U32: KernelRef<CastArgs<u32, Self>>;
    /// From i64.
    const FROM_I64: KernelRef<CastArgs<i64, Self>>;
}

/// A cast source type: picks the kernel casting it to `D`.
#[cfg(not(ferrocm_device))]
pub trait CastSource: Sized + 'static {
    /// The kernel.
    fn kernel<D: CastTarget>() -> KernelRef<CastArgs<Self, D>>;
}

#[cfg(not(ferrocm_device))]
const _: () = {
    macro_rules! source {
        ($($t:ty => $c:ident),*) => {$(
            impl CastSource for $t {
                fn kernel<D: CastTarget>() -> KernelRef<CastArgs<Self, D>> { D::$c }
            }
        )*};
    }
    source!(f32 => FROM_F32, F16 => FROM_F16, Bf16 => FROM_BF16, u8 => FROM_U8, u32 => FROM_U32, i64 => FROM_I64);
    macro_rules! target {
        ($($t:ty => $f32:ident, $f16:ident, $bf16:ident, $u8:ident, $u32:ident, $i64:ident;)*) => {$(
            impl CastTarget for $t {
                const FROM_F32: KernelRef<CastArgs<f32, Self>> = KernelRef::of::<$f32>();
                const FROM_F16: KernelRef<CastArgs<F16, Self>> = KernelRef::of::<$f16>();
                const FROM_BF16: KernelRef<CastArgs<Bf16, Self>> = KernelRef::of::<$bf16>();
                const FROM_U8: KernelRef<CastArgs<u8, Self>> = KernelRef::of::<$u8>();
                const FROM_U32: KernelRef<CastArgs<u32, Self>> = KernelRef::of::<$u32>();
                const FROM_I64: KernelRef<CastArgs<i64, Self>> = KernelRef::of::<$i64>();
            }
        )*};
    }
    use crate::elementwise::fill::{copy_bf16, copy_f16, copy_f32, copy_i64, copy_u8, copy_u32};
    target! {
        f32 => copy_f32, cast_f16_f32, cast_bf16_f32, cast_u8_f32, cast_u32_f32, cast_i64_f32;
        F16 => cast_f32_f16, copy_f16, cast_bf16_f16, cast_u8_f16, cast_u32_f16, cast_i64_f16;
        Bf16 => cast_f32_bf16, cast_f16_bf16, copy_bf16, cast_u8_bf16, cast_u32_bf16, cast_i64_bf16;
        u8 => cast_f32_u8, cast_f16_u8, cast_bf16_u8, copy_u8, cast_u32_u8, cast_i64_u8;
        u32 => cast_f32_u32, cast_f16_u32, cast_bf16_u32, cast_u8_u32, copy_u32, cast_i64_u32;
        i64 => cast_f32_i64, cast_f16_i64, cast_bf16_i64, cast_u8_i64, cast_u32_i64, copy_i64;
    }
};

macro_rules! cast_kernels {
    ($($name:ident: $s:ty => $d:ty,)*) => {
        kernels! {$(
            fn $name(out: *mut $d, inp: *const $s, n: u64, ndim: u32, layout: *const u64, l0: u64, l1: u64, l2: u64, l3: u64) {
                cast_body::<$s, $d>(out, inp, n, Strides::new(ndim, layout, [l0, l1], [[l2, l3]]))
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
