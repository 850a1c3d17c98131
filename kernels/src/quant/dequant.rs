//! `dequant_{format}_{dtype}`: quantized blocks to f32, f16 or bf16, for
//! every format of [`blocks`](super::blocks). One workitem per group of 16
//! elements, or two ([`QuantBlock::DEQUANT_GROUPS`]; neighbouring
//! workitems share a block, so its scales are read once from memory), each
//! value as [`QuantBlock::group16`] defines it (read in wide loads,
//! [`QuantBlock::group16_wide`]), then rounded to the output
//! type ([`Elem::pack2`]: pairs by one instruction on NVIDIA) and stored in
//! 16-byte words.

use crate::device::*;
use crate::elem::*;
use crate::kernels;
use crate::quant::blocks::*;
use rocm_kernel_macros::{amdgpu_device, amdgpu_global};

/// The body every dequantize kernel instantiates: `groups` groups of 16
/// elements of `blocks` into `out` (contiguous). With
/// [`QuantBlock::DEQUANT_GROUPS`] = 2, workitem `i` of a grid of
/// `groups.div_ceil(2)` takes groups `i` and `i + groups.div_ceil(2)`,
/// both read before either is stored (twice the loads in flight); with 1,
/// workitem `i` takes group `i`.
#[amdgpu_device]
#[inline(always)]
pub fn dequant_body<B: QuantBlock, T: Elem>(out: *mut T, blocks: *const B, groups: u64) {
    wait_prior_grids();
    let per_block = B::GROUPS as u64;
    let group = |g: u64| {
        let b = unsafe { global_ref(blocks, (g / per_block) as usize) };
        // A device buffer starts on a 16-byte boundary.
        unsafe { b.group16_wide((g % per_block) as usize) }
    };
    // 16-byte words (the output is a fresh buffer, a group's 16 values
    // start on a 32- or 64-byte boundary): element e of word j in lane
    // (e % per) / (per / 4).
    let per = per_word::<T>() as usize;
    let ow = out as *mut W128;
    let put = |g: u64, v: [f32; 16]| {
        crate::unroll4!(j < 16 / per => {
            let mut lanes = [0u32; 4];
            crate::unroll4!(u < 4 => {
                let e = j * per + u * (per / 4);
                lanes[u] = T::pack2(v[e], if per == 8 { v[e + 1] } else { 0.0 });
            });
            unsafe { store(ow, (g as usize * 16) / per + j, W128(lanes)) };
        });
    };
    if B::DEQUANT_GROUPS == 1 {
        grid_stride(groups, |i| put(i, group(i)));
        release_dependent_grids();
        return;
    }
    let half = groups.div_ceil(2);
    grid_stride(half, |i| {
        let second = i + half < groups;
        let v0 = group(i);
        let v1 = if second { group(i + half) } else { v0 };
        put(i, v0);
        if second {
            put(i + half, v1);
        }
    });
    release_dependent_grids();
}

/// The parameter types of a dequantize kernel from blocks `B` to `T`.
#[cfg(not(ferrocm_device))]
pub type DequantArgs<B, T> = (*mut T, *const B, u64);

#[cfg(not(ferrocm_device))]
use crate::host::KernelRef;

/// A format's dequantize kernels, one per output type (host side).
#[cfg(not(ferrocm_device))]
pub trait DequantKernels: QuantBlock + bytemuck::Pod {
    /// To f32.
    const TO_F32: KernelRef<DequantArgs<Self, f32>>;
    /// To f16.
    const TO_F16: KernelRef<DequantArgs<Self, F16>>;
    /// To bf16.
    const TO_BF16: KernelRef<DequantArgs<Self, Bf16>>;
}

macro_rules! dequant {
    ($($b:ident => $f32:ident, $f16:ident, $bf16:ident;)*) => {
        $(
            #[cfg(not(ferrocm_device))]
            impl DequantKernels for $b {
                const TO_F32: KernelRef<DequantArgs<Self, f32>> = KernelRef::of::<$f32>();
                const TO_F16: KernelRef<DequantArgs<Self, F16>> = KernelRef::of::<$f16>();
                const TO_BF16: KernelRef<DequantArgs<Self, Bf16>> = KernelRef::of::<$bf16>();
            }
        )*
        kernels! {$(
            fn $f32(out: *mut f32, blocks: *const $b, groups: u64) { dequant_body::<$b, f32>(out, blocks, groups) }
            fn $f16(out: *mut F16, blocks: *const $b, groups: u64) { dequant_body::<$b, F16>(out, blocks, groups) }
            fn $bf16(out: *mut Bf16, blocks: *const $b, groups: u64) { dequant_body::<$b, Bf16>(out, blocks, groups) }
        )*}
    };
}

dequant! {
    BlockQ4_0 => dequant_q4_0_f32, dequant_q4_0_f16, dequant_q4_0_bf16;
    BlockQ4_1 => dequant_q4_1_f32, dequant_q4_1_f16, dequant_q4_1_bf16;
    BlockQ5_0 => dequant_q5_0_f32, dequant_q5_0_f16, dequant_q5_0_bf16;
    BlockQ5_1 => dequant_q5_1_f32, dequant_q5_1_f16, dequant_q5_1_bf16;
    BlockQ8_0 => dequant_q8_0_f32, dequant_q8_0_f16, dequant_q8_0_bf16;
    BlockQ8_1 => dequant_q8_1_f32, dequant_q8_1_f16, dequant_q8_1_bf16;
    BlockQ2K => dequant_q2_k_f32, dequant_q2_k_f16, dequant_q2_k_bf16;
    BlockQ3K => dequant_q3_k_f32, dequant_q3_k_f16, dequant_q3_k_bf16;
    BlockQ4K => dequant_q4_k_f32, dequant_q4_k_f16, dequant_q4_k_bf16;
    BlockQ5K => dequant_q5_k_f32, dequant_q5_k_f16, dequant_q5_k_bf16;
    BlockQ6K => dequant_q6_k_f32, dequant_q6_k_f16, dequant_q6_k_bf16;
    BlockQ8K => dequant_q8_k_f32, dequant_q8_k_f16, dequant_q8_k_bf16;
    BlockIq4Nl => dequant_iq4_nl_f32, dequant_iq4_nl_f16, dequant_iq4_nl_bf16;
    BlockIq4Xs => dequant_iq4_xs_f32, dequant_iq4_xs_f16, dequant_iq4_xs_bf16;
    BlockMxfp4 => dequant_mxfp4_f32, dequant_mxfp4_f16, dequant_mxfp4_bf16;
}
