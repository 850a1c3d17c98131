//! `qmatvec{C}_{format}_{dtype}`: `y = x · Wᵀ` for a quantized weight `W`
//! `[n, k]` (rows = output features, as GGUF stores them) and a few rows of
//! activations `x` `[m, k]` (decode: m = 1 to 8), `y` `[m, n]`.
//!
//! A wave per weight row: its lanes stride over the row's groups of 16
//! elements, each decoding its group once ([`QuantBlock::group16`], the
//! same definition as dequantize) and multiplying it into `C` rows of `x`
//! at a time, in f32; the wave's sums are reduced across lanes. Each weight
//! byte is read from memory once per pass; more than `C` rows of `x` take
//! further passes that find the row in the cache.

use crate::device::*;
use crate::elem::*;
use crate::kernels;
use crate::math;
use crate::quant::blocks::*;
use rocm_kernel_macros::{amdgpu_device, amdgpu_global};

/// Workitems per workgroup of the quantized matrix-vector kernels.
pub const QMATVEC_BLOCK: u32 = 256;

/// Most rows of `x` the quantized matrix-vector kernels take (more are a
/// matrix product).
pub const QMATVEC_MAX_M: u32 = 8;

/// The body every quantized matrix-vector kernel instantiates (see the
/// module doc): `n` weight rows of `k` elements (a whole number of blocks),
/// `m` rows of `x` (contiguous, `k` apart), `y` contiguous `[m, n]`.
#[amdgpu_device]
#[inline(always)]
/// `C` is 1 or 2 (more rows take further passes).
#[allow(clippy::needless_range_loop)]
pub fn qmatvec_body<B: QuantBlock, T: Elem, const C: usize>(
    y: *mut T,
    w: *const B,
    x: *const T,
    n: u32,
    k: u32,
    m: u32,
) {
    // Launched with `early_start`: nothing global is touched before this.
    wait_prior_grids();
    release_dependent_grids();
    let lane = lane_id();
    let wave = wave_size();
    let waves = QMATVEC_BLOCK / wave;
    let groups = k / 16;
    let blocks_per_row = (k as usize) / B::ELEMS;
    let per_block = B::GROUPS as u32;
    let last = Ord::max(m, 1) - 1;
    let mut row = workgroup_id_x() * waves + wave_id();
    while row < n {
        let first_block = row as usize * blocks_per_row;
        let mut m0 = 0;
        while m0 < m {
            let mut acc = [0.0f32; C];
            let mut g = lane;
            while g < groups {
                let b = unsafe { global_ref(w, first_block + (g / per_block) as usize) };
                let v = b.group16((g % per_block) as usize);
                crate::unroll4!(c < C => {
                    // Rows past `m` re-read the last one (not stored).
                    let xr = Ord::min(m0 + c as u32, last) as usize * k as usize + 16 * g as usize;
                    let mut s = acc[c];
                    crate::unroll16!(l => {
                        s = math::fma(v[l], unsafe { load(x, xr + l) }.to_f32(), s);
                    });
                    acc[c] = s;
                });
                g += wave;
            }
            crate::unroll4!(c < C => {
                let s = wave_sum_f32(acc[c]);
                let r = m0 + c as u32;
                if lane == 0 && r < m {
                    unsafe { store(y, r as usize * n as usize + row as usize, T::from_f32(s)) };
                }
            });
            m0 += C as u32;
        }
        row += num_workgroups_x() * waves;
    }
}

/// The parameter types of a quantized matrix-vector kernel: `(y, w, x, n,
/// k, m)`.
#[cfg(not(ferrocm_device))]
pub type QMatvecArgs<B, T> = (*mut T, *const B, *const T, u32, u32, u32);

#[cfg(not(ferrocm_device))]
use crate::host::KernelRef;

/// A format's matrix-vector kernels for one activation type: one row of `x`
/// per pass, and two (host side).
#[cfg(not(ferrocm_device))]
pub trait QMatvecKernels<T>: QuantBlock {
    /// One row of `x` per pass.
    const ROWS1: KernelRef<QMatvecArgs<Self, T>>;
    /// Two rows of `x` per pass.
    const ROWS2: KernelRef<QMatvecArgs<Self, T>>;
}

macro_rules! qmatvec {
    ($($b:ident: [$($t:ty => $one:ident, $two:ident);*];)*) => {
        $($(
            #[cfg(not(ferrocm_device))]
            impl QMatvecKernels<$t> for $b {
                const ROWS1: KernelRef<QMatvecArgs<Self, $t>> = KernelRef::of::<$one>();
                const ROWS2: KernelRef<QMatvecArgs<Self, $t>> = KernelRef::of::<$two>();
            }
        )*)*
        kernels! {$($(
            fn $one(y: *mut $t, w: *const $b, x: *const $t, n: u32, k: u32, m: u32) { qmatvec_body::<$b, $t, 1>(y, w, x, n, k, m) }
            fn $two(y: *mut $t, w: *const $b, x: *const $t, n: u32, k: u32, m: u32) { qmatvec_body::<$b, $t, 2>(y, w, x, n, k, m) }
        )*)*}
    };
}

qmatvec! {
    BlockQ4_0: [f32 => qmatvec1_q4_0_f32, qmatvec2_q4_0_f32; F16 => qmatvec1_q4_0_f16, qmatvec2_q4_0_f16; Bf16 => qmatvec1_q4_0_bf16, qmatvec2_q4_0_bf16];
    BlockQ4_1: [f32 => qmatvec1_q4_1_f32, qmatvec2_q4_1_f32; F16 => qmatvec1_q4_1_f16, qmatvec2_q4_1_f16; Bf16 => qmatvec1_q4_1_bf16, qmatvec2_q4_1_bf16];
    BlockQ5_0: [f32 => qmatvec1_q5_0_f32, qmatvec2_q5_0_f32; F16 => qmatvec1_q5_0_f16, qmatvec2_q5_0_f16; Bf16 => qmatvec1_q5_0_bf16, qmatvec2_q5_0_bf16];
    BlockQ5_1: [f32 => qmatvec1_q5_1_f32, qmatvec2_q5_1_f32; F16 => qmatvec1_q5_1_f16, qmatvec2_q5_1_f16; Bf16 => qmatvec1_q5_1_bf16, qmatvec2_q5_1_bf16];
    BlockQ8_0: [f32 => qmatvec1_q8_0_f32, qmatvec2_q8_0_f32; F16 => qmatvec1_q8_0_f16, qmatvec2_q8_0_f16; Bf16 => qmatvec1_q8_0_bf16, qmatvec2_q8_0_bf16];
    BlockQ8_1: [f32 => qmatvec1_q8_1_f32, qmatvec2_q8_1_f32; F16 => qmatvec1_q8_1_f16, qmatvec2_q8_1_f16; Bf16 => qmatvec1_q8_1_bf16, qmatvec2_q8_1_bf16];
    BlockQ2K: [f32 => qmatvec1_q2_k_f32, qmatvec2_q2_k_f32; F16 => qmatvec1_q2_k_f16, qmatvec2_q2_k_f16; Bf16 => qmatvec1_q2_k_bf16, qmatvec2_q2_k_bf16];
    BlockQ3K: [f32 => qmatvec1_q3_k_f32, qmatvec2_q3_k_f32; F16 => qmatvec1_q3_k_f16, qmatvec2_q3_k_f16; Bf16 => qmatvec1_q3_k_bf16, qmatvec2_q3_k_bf16];
    BlockQ4K: [f32 => qmatvec1_q4_k_f32, qmatvec2_q4_k_f32; F16 => qmatvec1_q4_k_f16, qmatvec2_q4_k_f16; Bf16 => qmatvec1_q4_k_bf16, qmatvec2_q4_k_bf16];
    BlockQ5K: [f32 => qmatvec1_q5_k_f32, qmatvec2_q5_k_f32; F16 => qmatvec1_q5_k_f16, qmatvec2_q5_k_f16; Bf16 => qmatvec1_q5_k_bf16, qmatvec2_q5_k_bf16];
    BlockQ6K: [f32 => qmatvec1_q6_k_f32, qmatvec2_q6_k_f32; F16 => qmatvec1_q6_k_f16, qmatvec2_q6_k_f16; Bf16 => qmatvec1_q6_k_bf16, qmatvec2_q6_k_bf16];
    BlockQ8K: [f32 => qmatvec1_q8_k_f32, qmatvec2_q8_k_f32; F16 => qmatvec1_q8_k_f16, qmatvec2_q8_k_f16; Bf16 => qmatvec1_q8_k_bf16, qmatvec2_q8_k_bf16];
    BlockIq4Nl: [f32 => qmatvec1_iq4_nl_f32, qmatvec2_iq4_nl_f32; F16 => qmatvec1_iq4_nl_f16, qmatvec2_iq4_nl_f16; Bf16 => qmatvec1_iq4_nl_bf16, qmatvec2_iq4_nl_bf16];
    BlockIq4Xs: [f32 => qmatvec1_iq4_xs_f32, qmatvec2_iq4_xs_f32; F16 => qmatvec1_iq4_xs_f16, qmatvec2_iq4_xs_f16; Bf16 => qmatvec1_iq4_xs_bf16, qmatvec2_iq4_xs_bf16];
    BlockMxfp4: [f32 => qmatvec1_mxfp4_f32, qmatvec2_mxfp4_f32; F16 => qmatvec1_mxfp4_f16, qmatvec2_mxfp4_f16; Bf16 => qmatvec1_mxfp4_bf16, qmatvec2_mxfp4_bf16];
}
