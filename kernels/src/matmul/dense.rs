//! Matrix products for f32, f16 and bf16 (f32 accumulation):
//! - `gemm_{dtype}`: C = act(A·B + bias), batched, any strides. One
//!   workgroup per 64 x 64 tile of C ([`gemm_bm`], [`GEMM_BN`]): K is walked in steps
//!   of [`GEMM_BK`], each step's A and B tiles staged in LDS (as f32; the
//!   next step's loads in flight while this one computes), each workitem
//!   accumulating a 4 x 4 block of C in registers (register blocking: two
//!   16-byte LDS reads per 16 FMAs). `gemm_wide_f32` is the same body with
//!   8 x 4 blocks (128-row tiles) and two LDS stages, one barrier a step:
//!   the f32 GEMM where LDS stages pay (NVIDIA, the emulator at wave 32),
//!   [`GEMM_WIDE_ROWS`];
//! - `gemv{R}_{dtype}`: Y = act(X·Wᵀ + bias) for up to [`GEMV_MAX_M`] rows of X
//!   and a weight stored `[n, k]` (rows contiguous, as PyTorch and GGUF store
//!   a linear layer): one wave per output column, each weight element read
//!   once, 16-byte loads when rows allow them, wave reductions. The kernel of
//!   matrix-vector products and of decode-time `linear`: bandwidth-bound.
//! - `gemv_glu{R}_{dtype}`: the same pass over a stacked gate-up weight
//!   (`2n` rows, the gate's then up's) storing the gated unit of each gate
//!   row and its up row (`linear_glu`), for up to [`GEMV_GLU_MAX_M`] rows.
//!
//! Operand `(i, j)` of a matrix sits at `i * rs + j * cs` (element strides,
//! any of them zero or one), so transposed and permuted views run in place;
//! batch `z` starts `z * bs` elements in. C and Y are contiguous.
//!
//! The bias (`[n]`, may be null) and the activation ([`ACT_RELU`] ..) are
//! fused into the store; [`activation`] is the one definition the Cpu
//! backend applies too. `epilogue_{dtype}` applies them to the f32 sums of
//! a vendor GEMM (rocBLAS, cuBLAS), rounding once.

use crate::device::*;
use crate::elem::W128;
use crate::elem::*;
pub use crate::elementwise::unary::{
    ACT_GELU, ACT_GELU_ERF, ACT_NONE, ACT_RELU, ACT_SILU, activation,
};
use crate::kernels;
use crate::math;
use crate::nn::glu::glu_apply;
use crate::{unroll4, unroll8, unroll16};
use rocm_kernel_macros::{amdgpu_device, amdgpu_global};

#[cfg(not(ferrocm_device))]
use crate::host::KernelRef;

/// Rows of C each workitem of `gemm_{dtype}` accumulates (and elements of
/// the A tile it loads each K step); its columns are 4.
pub const GEMM_ROWS: usize = 4;
/// Rows of C each workitem of `gemm_wide_f32` accumulates: 32
/// accumulators, three 16-byte LDS reads for 32 products (four rows: two
/// for 16), which keeps the FMA units rather than the LDS busy. Its tiles
/// go round two LDS stages. It is the f32 GEMM where LDS stages pay
/// (`Device::double_buffers_lds`: NVIDIA, the emulator at wave 32); on AMD
/// GPUs, whose 128 registers a workitem its loop spilled past on gfx942,
/// it is built empty: the ROCm device's `double_buffers_lds` is false,
/// so the op library never launches it there.
pub const GEMM_WIDE_ROWS: usize = 8;
/// Rows of C per GEMM workgroup whose workitems accumulate `rows` rows
/// ([`GEMM_ROWS`], [`GEMM_WIDE_ROWS`]).
pub const fn gemm_bm(rows: usize) -> u32 {
    16 * rows as u32
}
/// Columns of C per GEMM workgroup.
pub const GEMM_BN: u32 = 64;
/// K step of the GEMM's LDS tiles.
pub const GEMM_BK: u32 = 16;
/// Workitems per GEMM workgroup (16 x 16, each `rows` x 4 of C).
pub const GEMM_BLOCK: u32 = 256;
/// LDS row pitch, in f32, of an FMA tile holding `rows` elements of its
/// non-K dim per K index: the data and one 16-byte word of padding. Rows
/// stay 16-byte aligned (each workitem reads its rows of A and columns of
/// B as 16-byte words per K step), and the K-major stores of a row-major
/// operand spread over 8 banks instead of one.
const fn fma_pitch(rows: u32) -> u32 {
    rows + 4
}
/// Bytes of one K step's A and B tiles of an FMA-tiled product whose
/// workitems accumulate `r` rows of C (A tiles of `16 r` rows, B tiles of
/// [`GEMM_BN`] columns), f32.
pub const fn fma_stage_bytes(r: usize) -> u32 {
    GEMM_BK * (fma_pitch(16 * r as u32) + fma_pitch(GEMM_BN)) * 4
}
/// K steps of tiles a GEMM workgroup of `rows`-row workitems holds in LDS:
/// two for the wide kernel (one multiplied while the next is stored, one
/// barrier a step), one for the others.
pub const fn gemm_stages(rows: usize) -> u32 {
    if rows >= GEMM_WIDE_ROWS { 2 } else { 1 }
}
/// LDS of one GEMM workgroup of `rows`-row workitems.
pub const fn gemm_lds_bytes(rows: usize) -> u32 {
    gemm_stages(rows) * fma_stage_bytes(rows)
}

/// Most rows of X one GEMV launch takes (its accumulators are registers).
pub const GEMV_MAX_M: u32 = 8;
/// Workitems per GEMV workgroup (one wave per output column).
pub const GEMV_BLOCK: u32 = 256;
/// Most rows of X the fused gated-unit GEMV (`gemv_glu{R}_{dtype}`) takes.
pub const GEMV_GLU_MAX_M: u32 = 2;

/// A float element the matrix kernels take: how many fit in a 16-byte word
/// and the dot product of two words (written out element by element: a
/// loop indexed by a variable would put the word in scratch memory).
#[amdgpu_device]
pub trait MatElem: Elem {
    /// Elements per 16-byte word.
    const PER_WORD: u32;
    /// `acc + Σ w[e] * x[e]` over the word's elements, in f32, in order.
    fn dot_word(w: W128, x: W128, acc: f32) -> f32;
    /// The value as f32 ([`Elem::to_f32`], through the GPU's conversion
    /// instruction for f16).
    fn widen(self) -> f32;
    /// The word's elements as f32, in order (the first [`MatElem::PER_WORD`]
    /// entries; the rest 0).
    fn unpack(w: W128) -> [f32; 8];
}

#[amdgpu_device]
impl MatElem for f32 {
    const PER_WORD: u32 = 4;
    #[inline(always)]
    fn widen(self) -> f32 {
        self
    }
    #[inline(always)]
    fn unpack(w: W128) -> [f32; 8] {
        let f = f32::from_bits;
        [
            f(w.0[0]),
            f(w.0[1]),
            f(w.0[2]),
            f(w.0[3]),
            0.0,
            0.0,
            0.0,
            0.0,
        ]
    }
    #[inline(always)]
    fn dot_word(w: W128, x: W128, acc: f32) -> f32 {
        let f = f32::from_bits;
        let acc = math::fma(f(w.0[0]), f(x.0[0]), acc);
        let acc = math::fma(f(w.0[1]), f(x.0[1]), acc);
        let acc = math::fma(f(w.0[2]), f(x.0[2]), acc);
        math::fma(f(w.0[3]), f(x.0[3]), acc)
    }
}

/// The two halves of a word of 16-bit floats as f32, low first.
#[amdgpu_device]
#[inline(always)]
fn halves(word: u32, bf16: bool) -> (f32, f32) {
    if bf16 {
        // bf16 is the high half of an f32: a shift, no conversion.
        (
            f32::from_bits(word << 16),
            f32::from_bits(word & 0xffff_0000),
        )
    } else {
        (
            f16_bits_to_f32(word as u16),
            f16_bits_to_f32((word >> 16) as u16),
        )
    }
}

/// The 8 halves of a word as f32, in order.
#[amdgpu_device]
#[inline(always)]
fn unpack_halves(w: W128, bf16: bool) -> [f32; 8] {
    let (a0, a1) = halves(w.0[0], bf16);
    let (b0, b1) = halves(w.0[1], bf16);
    let (c0, c1) = halves(w.0[2], bf16);
    let (d0, d1) = halves(w.0[3], bf16);
    [a0, a1, b0, b1, c0, c1, d0, d1]
}

/// `acc + Σ w[e] * x[e]` over the 8 halves of two words.
#[amdgpu_device]
#[inline(always)]
fn dot_halves(w: W128, x: W128, mut acc: f32, bf16: bool) -> f32 {
    let (w0, w1) = halves(w.0[0], bf16);
    let (x0, x1) = halves(x.0[0], bf16);
    acc = math::fma(w1, x1, math::fma(w0, x0, acc));
    let (w0, w1) = halves(w.0[1], bf16);
    let (x0, x1) = halves(x.0[1], bf16);
    acc = math::fma(w1, x1, math::fma(w0, x0, acc));
    let (w0, w1) = halves(w.0[2], bf16);
    let (x0, x1) = halves(x.0[2], bf16);
    acc = math::fma(w1, x1, math::fma(w0, x0, acc));
    let (w0, w1) = halves(w.0[3], bf16);
    let (x0, x1) = halves(x.0[3], bf16);
    math::fma(w1, x1, math::fma(w0, x0, acc))
}

#[amdgpu_device]
impl MatElem for Bf16 {
    const PER_WORD: u32 = 8;
    #[inline(always)]
    fn widen(self) -> f32 {
        f32::from_bits((self.0 as u32) << 16)
    }
    #[inline(always)]
    fn unpack(w: W128) -> [f32; 8] {
        unpack_halves(w, true)
    }
    #[inline(always)]
    fn dot_word(w: W128, x: W128, acc: f32) -> f32 {
        dot_halves(w, x, acc, true)
    }
}

#[amdgpu_device]
impl MatElem for F16 {
    const PER_WORD: u32 = 8;
    #[inline(always)]
    fn widen(self) -> f32 {
        f16_bits_to_f32(self.0)
    }
    #[inline(always)]
    fn unpack(w: W128) -> [f32; 8] {
        unpack_halves(w, false)
    }
    #[inline(always)]
    fn dot_word(w: W128, x: W128, acc: f32) -> f32 {
        dot_halves(w, x, acc, false)
    }
}

/// `p + z * stride` elements (a batch's start).
#[amdgpu_device]
#[inline(always)]
fn offset_by<T>(p: *const T, z: u32, stride: u64) -> *const T {
    p.wrapping_add((z as u64 * stride) as usize)
}

/// Where this workitem's `N` elements of an operand's K-tile come from:
/// for each, its offset in the matrix at `k0 = 0` and its index along K in
/// the tile (`u32::MAX` when its row (A) or column (B) does not exist, so
/// one comparison tests both; a bool per element would hold a 64-bit lane
/// mask in scalar registers). Computed once per tile: a K step adds
/// `k0 * k_stride` to the offsets. A tile of `N` elements a workitem spans
/// `16 N` rows (A) or columns (B) by [`GEMM_BK`].
#[amdgpu_device]
#[derive(Clone, Copy)]
pub(crate) struct TileLoads<const N: usize> {
    off: [u32; N],
    kk: [u32; N],
}

/// The element of a tile `size` wide in its non-K dim that workitem-slot
/// `e` holds: `(index in that dim, index along K)`. Consecutive workitems
/// take consecutive addresses along whichever of the operand's strides is
/// 1 (`k_fast`: K), so row-major and transposed operands both coalesce.
#[amdgpu_device]
#[inline(always)]
fn gemm_slot(e: u32, k_fast: bool, size: u32) -> (u32, u32) {
    if k_fast {
        (e / GEMM_BK, e % GEMM_BK)
    } else {
        (e % size, e / size)
    }
}

/// This workitem's [`TileLoads`] of an operand whose tile starts at `i0` in
/// its non-K dim of size `size`; `i_stride` and `k_stride` are its element
/// strides along that dim and along K.
#[amdgpu_device]
#[inline(always)]
pub(crate) fn gemm_tile_loads<const N: usize>(
    i0: u32,
    size: u32,
    i_stride: u32,
    k_stride: u32,
) -> TileLoads<N> {
    const { assert!(N <= 8) };
    let tid = workitem_id_x();
    let mut t = TileLoads {
        off: [0; N],
        kk: [0; N],
    };
    unroll8!(r < N => {
        let (ii, kk) = gemm_slot(tid + GEMM_BLOCK * r as u32, k_stride == 1, 16 * N as u32);
        let i = i0 + ii;
        // Rows past the end never load: their offset may wrap, unused.
        t.off[r] = i.wrapping_mul(i_stride).wrapping_add(kk.wrapping_mul(k_stride));
        t.kk[r] = if i < size { kk } else { u32::MAX };
    });
    t
}

/// The `N` elements of the K-tile at `k0` as f32 (zero past the matrix).
#[amdgpu_device]
#[inline(always)]
pub(crate) fn gemm_fetch<T: MatElem, const N: usize>(
    p: *const T,
    t: &TileLoads<N>,
    k0: u32,
    k: u32,
    k_stride: u32,
    out: &mut [f32; N],
) {
    const { assert!(N <= 8) };
    // k0 <= k on every call.
    let left = k - k0;
    unroll8!(r < N => {
        out[r] = if t.kk[r] < left {
            unsafe { load(p, (t.off[r] + k0 * k_stride) as usize) }.widen()
        } else {
            0.0
        };
    });
}

/// Stores the registers [`gemm_fetch`] loaded into an LDS tile, K-major
/// (`tile[kk * pitch + i]`).
#[amdgpu_device]
#[inline(always)]
pub(crate) fn gemm_stage<const N: usize>(tile: Lds<f32>, k_fast: bool, regs: &[f32; N]) {
    const { assert!(N <= 8) };
    let tid = workitem_id_x();
    let size = 16 * N as u32;
    unroll8!(r < N => {
        let (ii, kk) = gemm_slot(tid + GEMM_BLOCK * r as u32, k_fast, size);
        tile.store(kk * fma_pitch(size) + ii, regs[r]);
    });
}

/// The A and B tiles of stage `stage` (0 or 1) of an FMA-tiled product
/// whose workitems accumulate `R` rows of C, in LDS (f32, K-major).
#[amdgpu_device]
#[inline(always)]
pub(crate) fn gemm_tiles<const R: usize>(stage: u32) -> (Lds<f32>, Lds<f32>) {
    let a = stage * fma_stage_bytes(R);
    let b = a + GEMM_BK * fma_pitch(16 * R as u32) * 4;
    (lds_at::<f32>(a), lds_at::<f32>(b))
}

/// One K step of the register-tiled products: this workitem's `R` x 4
/// block of C (rows `64 h + 4 ty..` for `h < R / 4` of the A tile, columns
/// `4 tx..` of the B tile, both staged in LDS stage `stage` by
/// [`gemm_stage`]) accumulates the step's [`GEMM_BK`] products. Shared by
/// the GEMMs (`R` = [`GEMM_ROWS`], [`GEMM_WIDE_ROWS`]) and the
/// implicit-GEMM convolution (4).
#[amdgpu_device]
#[inline(always)]
pub(crate) fn gemm_tile_fma<const R: usize>(acc: &mut [[f32; 4]; R], stage: u32) {
    // B tiles are GEMM_BN = 16 workitems x 4 columns wide, staged as
    // 4-element loads (`gemm_stage::<4>`).
    const { assert!(R.is_multiple_of(4) && R <= 16 && GEMM_BN == 16 * 4) };
    let tid = workitem_id_x();
    let (tx, ty) = (tid % 16, tid / 16);
    let (ta, tb) = gemm_tiles::<R>(stage);
    let (ta4, tb4) = (ta.cast::<W128>(), tb.cast::<W128>());
    let (pa, pb) = (fma_pitch(16 * R as u32) / 4, fma_pitch(GEMM_BN) / 4);
    let mut step = |kk: u32| {
        let bv = tb4.load(kk * pb + tx).0.map(f32::from_bits);
        unroll4!(h < R / 4 => {
            // This workitem's rows 64 h + 4 ty.. of A.
            let av = ta4.load(kk * pa + 16 * h as u32 + ty).0.map(f32::from_bits);
            for i in 0..4 {
                for j in 0..4 {
                    acc[4 * h + i][j] = math::fma(av[i], bv[j], acc[4 * h + i][j]);
                }
            }
        });
        if kk % 4 == 3 {
            // Reads of four K steps ahead at most: all sixteen in flight
            // at once would need many more registers (AMD GPUs hold these
            // kernels to 128).
            schedule_barrier();
        }
    };
    if R == GEMM_WIDE_ROWS {
        // Written out: the compilers left the loop rolled (a branch and
        // three additions a step, no reads of the next step issued ahead).
        unroll16!(kk => { step(kk as u32) });
    } else {
        for kk in 0..GEMM_BK {
            step(kk);
        }
    }
}

/// The GEMM: see the module doc. `c` is `[batch, m, n]` contiguous.
#[amdgpu_device]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub fn gemm_body<T: MatElem, const R: usize>(
    c: *mut T,
    a: *const T,
    b: *const T,
    bias: *const T,
    (m, n, k, batch, z0): (u32, u32, u32, u32, u32),
    (a_rs, a_cs, a_bs): (u32, u32, u64),
    (b_rs, b_cs, b_bs): (u32, u32, u64),
    act: u32,
) {
    let tiles_n = n.div_ceil(GEMM_BN);
    let tile = workgroup_id_x();
    let (m0, n0) = ((tile / tiles_n) * gemm_bm(R), (tile % tiles_n) * GEMM_BN);
    #[cfg(all(ferrocm_device, not(ferrocm_nvptx)))]
    if R == GEMM_WIDE_ROWS {
        // Never launched on AMD GPUs (see GEMM_WIDE_ROWS): its loop does
        // not fit their registers, and neither did the tile as two of
        // `gemm_f32`'s in one kernel (gfx942 spilled both).
        let _ = (
            c,
            a,
            b,
            bias,
            m0,
            n0,
            (m, n, k, batch, z0),
            (a_rs, a_cs, a_bs),
        );
        let _ = ((b_rs, b_cs, b_bs), act);
        return;
    }
    gemm_tile::<T, R>(
        c,
        a,
        b,
        bias,
        (m, n, k, batch, z0),
        (a_rs, a_cs, a_bs),
        (b_rs, b_cs, b_bs),
        act,
        (m0, n0),
    );
}

/// [`gemm_body`]'s work for the [`gemm_bm`] x [`GEMM_BN`] tile of C at
/// `(m0, n0)`.
#[amdgpu_device]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn gemm_tile<T: MatElem, const R: usize>(
    c: *mut T,
    a: *const T,
    b: *const T,
    bias: *const T,
    (m, n, k, batch, z0): (u32, u32, u32, u32, u32),
    (a_rs, a_cs, a_bs): (u32, u32, u64),
    (b_rs, b_cs, b_bs): (u32, u32, u64),
    act: u32,
    (m0, n0): (u32, u32),
) {
    const { assert!(R.is_multiple_of(4) && R <= 8) };
    let tid = workitem_id_x();
    let (tx, ty) = (tid % 16, tid / 16);
    // A's non-K dim is its rows, B's its columns.
    let la = gemm_tile_loads::<R>(m0, m, a_rs, a_cs);
    let lb = gemm_tile_loads::<4>(n0, n, b_cs, b_rs);
    // One batch per workgroup row (the launch covers `z0..z0 + 65535` at
    // most). No loop over batches: the compiler would hoist the epilogue's
    // addresses out of it, ahead of the K loop, and hold them there.
    let z = z0 + workgroup_id_y();
    if z < batch {
        let az = offset_by(a, z, a_bs);
        let bz = offset_by(b, z, b_bs);
        let mut acc = [[0.0f32; 4]; R];
        let (mut ra, mut rb) = ([0.0f32; R], [0.0f32; 4]);
        gemm_fetch(az, &la, 0, k, a_cs, &mut ra);
        gemm_fetch(bz, &lb, 0, k, b_rs, &mut rb);
        let mut k0 = 0;
        if gemm_stages(R) == 2 {
            // Two stages: each step's tiles are stored into the stage the
            // last barrier ended the reads of, after the products of the
            // other: one barrier a step.
            let (ta, tb) = gemm_tiles::<R>(0);
            gemm_stage(ta, a_cs == 1, &ra);
            gemm_stage(tb, b_rs == 1, &rb);
            barrier();
            let mut stage = 0;
            while k0 < k {
                let more = k0 + GEMM_BK < k;
                if more {
                    // The next step's loads fly while this step computes.
                    gemm_fetch(az, &la, k0 + GEMM_BK, k, a_cs, &mut ra);
                    gemm_fetch(bz, &lb, k0 + GEMM_BK, k, b_rs, &mut rb);
                }
                gemm_tile_fma(&mut acc, stage);
                if more {
                    let (ta, tb) = gemm_tiles::<R>(stage ^ 1);
                    gemm_stage(ta, a_cs == 1, &ra);
                    gemm_stage(tb, b_rs == 1, &rb);
                }
                barrier();
                stage ^= 1;
                k0 += GEMM_BK;
            }
        } else {
            let (ta, tb) = gemm_tiles::<R>(0);
            while k0 < k {
                // The previous step's reads of the tiles are done; stage
                // this one.
                barrier();
                gemm_stage(ta, a_cs == 1, &ra);
                gemm_stage(tb, b_rs == 1, &rb);
                barrier();
                if k0 + GEMM_BK < k {
                    // The next step's loads fly while this step computes.
                    gemm_fetch(az, &la, k0 + GEMM_BK, k, a_cs, &mut ra);
                    gemm_fetch(bz, &lb, k0 + GEMM_BK, k, b_rs, &mut rb);
                }
                gemm_tile_fma(&mut acc, 0);
                k0 += GEMM_BK;
            }
        }
        // C's batch z starts z * m * n elements in.
        let cz = c.wrapping_add((z as u64 * m as u64 * n as u64) as usize);
        unroll8!(i < R => {
            let row = m0 + 64 * (i as u32 / 4) + 4 * ty + i as u32 % 4;
            unroll4!(j < 4 => {
                let col = n0 + 4 * tx + j as u32;
                if row < m && col < n {
                    let mut v = acc[i][j];
                    if !bias.is_null() {
                        v += unsafe { load(bias, col as usize) }.widen();
                    }
                    unsafe { store(cz, (row * n + col) as usize, T::from_f32(activation::<T>(v, act))) };
                }
            });
        });
    }
}

/// Rows of C per matrix-unit GEMM workgroup (`gemm_mma_{dtype}`).
pub const MMA_BM: u32 = 128;
/// Columns of C per matrix-unit GEMM workgroup.
pub const MMA_BN: u32 = 128;
/// K step of the matrix-unit GEMM's LDS tiles.
pub const MMA_BK: u32 = 32;
/// Workitems per matrix-unit GEMM workgroup: 4 waves of 64, each 64 x 64 of
/// C (4 x 4 tiles), or 8 waves of 32, each 64 x 32 (4 x 2 tiles): 64
/// accumulators per lane either way.
pub const MMA_BLOCK: u32 = 256;
/// LDS row pitch in 32-bit words of an operand tile stored K contiguous
/// (the operand's fast dim is K): 16 words of data (32 halves along K) and
/// 4 of padding. Rows stay 16-byte aligned for the staging stores, and the
/// fragment reads of 8 rows x 4 words (ldmatrix) fall in 32 different banks.
const MMA_PITCH: u32 = MMA_BK / 2 + 4;
/// LDS row pitch in words of an operand tile stored with K as its rows (the
/// operand's fast dim is M or N, as B's in a row-major matrix): 64 words of
/// data (128 halves) and 4 of padding, for the same two reasons.
const MMA_PITCH_T: u32 = MMA_BM / 2 + 4;
/// Bytes of one operand's tile in either layout.
const MMA_TILE_BYTES: u32 = {
    let (k_rows, i_rows) = (MMA_BK * MMA_PITCH_T * 4, MMA_BM * MMA_PITCH * 4);
    if k_rows > i_rows { k_rows } else { i_rows }
};
/// LDS of one matrix-unit GEMM workgroup: two stages (one computes while
/// the next is stored), each an A tile and a B tile of 16-bit elements.
pub const MMA_LDS_BYTES: u32 = 2 * 2 * MMA_TILE_BYTES;
/// K steps of the copy-staged matrix-unit loop ([`MMA_ASYNC`]) held in
/// LDS at once: one multiplied while the copies of the next three run.
pub const MMA_ASYNC_STAGES: u32 = 4;
/// Bytes of one operand's tile in the copy-staged loop: no padding (its
/// 16-byte pieces are swizzled instead, [`MMA_SWIZZLED_K`],
/// [`MMA_SWIZZLED_T`]), so four stages fit the 64 KiB every device gives.
const MMA_ASYNC_TILE_BYTES: u32 = MMA_BM * MMA_BK * 2;
/// LDS of a matrix-unit GEMM workgroup that runs the copy-staged loop.
pub const MMA_ASYNC_LDS_BYTES: u32 = MMA_ASYNC_STAGES * 2 * MMA_ASYNC_TILE_BYTES;
const _: () = assert!(MMA_ASYNC_LDS_BYTES <= 64 * 1024);
/// The copy-staged loop's tile stored K contiguous: rows of [`MMA_BK`]
/// halves (4 pieces of 16 bytes), pieces swizzled by pairs of rows.
const MMA_SWIZZLED_K: crate::mma::TileLayout = crate::mma::TileLayout::swizzled(MMA_BK / 8);
/// The copy-staged loop's tile stored with K as its rows: rows of
/// [`MMA_BM`] halves (16 pieces), pieces swizzled by row.
const MMA_SWIZZLED_T: crate::mma::TileLayout = crate::mma::TileLayout::swizzled(MMA_BM / 8);
/// Flag of `gemm_mma`: A's groups of 8 elements along its fast dim can be
/// read as 16-byte words (that dim's stride is 1, the other strides and
/// the offset are multiples of 8).
pub const MMA_A_WORDS: u32 = 1;
/// Flag of `gemm_mma`: likewise for B.
pub const MMA_B_WORDS: u32 = 2;
/// Flag of `gemm_mma`: an operand whose fast dim is not K (B of a
/// row-major matrix) is stored in LDS as it is in memory, with K as the
/// tile's rows, and read with the primitive's transposed loads; without
/// it, such an operand is transposed on its way into LDS (16-bit stores).
/// The op layer sets it where the unit's transposed loads are cheap
/// (`host::transposed_loads`).
pub const MMA_T_TILES: u32 = 4;

/// Flag of `gemm_mma`: copy every group of 8 elements straight from
/// memory into its LDS tile ([`crate::device::lds_copy_async`]),
/// [`MMA_ASYNC_STAGES`] K steps in flight, where the build has that loop
/// ([`crate::device::COPY_STAGED_LOOPS`]; elsewhere the flag is ignored).
/// The launch gives [`MMA_ASYNC_LDS_BYTES`] of LDS. The op layer sets it
/// only with [`MMA_T_TILES`] and both `*_WORDS` flags, when every group is
/// wholly inside its matrix or wholly outside: `k` a multiple of 8 where
/// an operand's fast dim is K, M (N) a multiple of 8 where it is A's (B's).
pub const MMA_ASYNC: u32 = 8;

/// Groups of 8 elements in one operand's K-tile (128 x 32 / 8).
const MMA_GROUPS: u32 = MMA_BM * MMA_BK / 8;

/// Group `e` of an operand's K-tile: `(index in the non-K dim, index along
/// K)` of its first element; its 8 elements run along K (`k_fast`) or
/// along the other dim, whichever has stride 1, so loads coalesce.
#[amdgpu_device]
#[inline(always)]
fn mma_slot(e: u32, k_fast: bool) -> (u32, u32) {
    if k_fast {
        (e / (MMA_BK / 8), (e % (MMA_BK / 8)) * 8)
    } else {
        ((e % (MMA_BM / 8)) * 8, e / (MMA_BM / 8))
    }
}

/// One operand of the matrix-unit GEMM: where its tile starts, its sizes
/// and strides, and how it is read.
#[amdgpu_device]
#[derive(Clone, Copy)]
pub struct MmaOperand<T> {
    /// The matrix's first element.
    pub p: *const T,
    /// First index of the tile in the non-K dim.
    pub i0: u32,
    /// The non-K dim's size.
    pub size: u32,
    /// Element stride along the non-K dim.
    pub i_stride: u32,
    /// Element stride along K.
    pub k_stride: u32,
    /// K is the dim with stride 1 (groups run along it).
    pub k_fast: bool,
    /// Groups can be read as 16-byte words ([`MMA_A_WORDS`]).
    pub words: bool,
}

#[amdgpu_device]
impl<T> MmaOperand<T> {
    /// The operand's tile lies inside the matrix and is read in words
    /// (A's tiles are [`MMA_BM`] deep, B's [`MMA_BN`]: the same).
    #[inline(always)]
    pub fn whole(&self) -> bool {
        const _: () = assert!(MMA_BM == MMA_BN);
        self.words && self.i0 + MMA_BM <= self.size
    }
}

/// The 8 elements of group `e` of the K-tile at `k0` as packed halves
/// (zero past the matrix): one 16-byte load when the group is whole and
/// `words` allows, else element by element.
#[amdgpu_device]
#[inline(always)]
fn mma_fetch<T: MatElem>(o: &MmaOperand<T>, e: u32, k0: u32, k: u32) -> W128 {
    let (ii, kk) = mma_slot(e, o.k_fast);
    let (i, kk) = (o.i0 + ii, k0 + kk);
    // Elements run along K from (i, kk), or along i.
    let (step, whole) = if o.k_fast {
        (o.k_stride, i < o.size && kk + 8 <= k)
    } else {
        (o.i_stride, i + 8 <= o.size && kk < k)
    };
    let at = i
        .wrapping_mul(o.i_stride)
        .wrapping_add(kk.wrapping_mul(o.k_stride));
    if whole && o.words {
        return unsafe { load(o.p as *const W128, (at / 8) as usize) };
    }
    // How many of the group's 8 elements exist: one number, so the
    // compiler does not hoist 8 loop-invariant conditions (scalar masks
    // held across the K loop) out of it.
    let valid = if o.k_fast {
        if i < o.size { k.saturating_sub(kk) } else { 0 }
    } else if kk < k {
        o.size.saturating_sub(i)
    } else {
        0
    };
    let half = |j: u32| -> u32 {
        if j < valid {
            (unsafe { load(o.p as *const u16, at.wrapping_add(j * step) as usize) }) as u32
        } else {
            0
        }
    };
    // Word q holds elements 2q (low half) and 2q + 1; constant indices
    // (a variable one puts the word in scratch memory).
    let mut w = W128([0; 4]);
    unroll4!(q < 4 => {
        w.0[q] = half(2 * q as u32) | (half(2 * q as u32 + 1) << 16);
    });
    w
}

/// Stores a group [`mma_fetch`] loaded into its LDS tile: `[i][k]` rows of
/// [`MMA_PITCH`] words when the tile is K contiguous (`KC`), else `[k][i]`
/// rows of [`MMA_PITCH_T`] words. The group runs along the operand's fast
/// dim (`k_fast`: K): one 16-byte store when that is the tile's fast dim,
/// else eight 16-bit stores, one per row.
#[amdgpu_device]
#[inline(always)]
fn mma_stage<const KC: bool>(tile_byte: u32, e: u32, k_fast: bool, w: W128) {
    let (ii, kk) = mma_slot(e, k_fast);
    if KC && !k_fast {
        let halves = lds_at::<u16>(tile_byte);
        unroll4!(q < 4 => {
            let j = 2 * q as u32;
            halves.store((ii + j) * 2 * MMA_PITCH + kk, w.0[q] as u16);
            halves.store((ii + j + 1) * 2 * MMA_PITCH + kk, (w.0[q] >> 16) as u16);
        });
        return;
    }
    let word = if KC {
        ii * MMA_PITCH + kk / 2
    } else {
        kk * MMA_PITCH_T + ii / 2
    };
    lds_at::<W128>(tile_byte).store(word / 4, w);
}

/// One K step of the matrix-unit loops: the wave's `(wm, wn)` block, `tn`
/// column tiles wide, of the A tile `ta` times the B tile `tb` (layouts as
/// `A_K`, `B_K`), added into `acc`. The wave's B fragments stay in
/// registers; each A fragment is used against all of them. A macro, not a
/// function: the same code through an inlined function (`acc` by
/// reference) spilled a VGPR on gfx1102, which the build refuses.
macro_rules! mma_multiply_step {
    ($t:ty, $a_k:ident, $b_k:ident, $acc:ident, ($ta:ident, $tb:ident), ($wm:ident, $wn:ident, $tn:ident)) => {
        mma_multiply_step!($t, $a_k, $b_k, $acc, ($ta, $tb), ($wm, $wn, $tn), (MMA_PITCH, MMA_PITCH_T))
    };
    // `$lk`, `$lt`: the layout of a tile stored K contiguous, and of one
    // stored with K as its rows.
    ($t:ty, $a_k:ident, $b_k:ident, $acc:ident, ($ta:ident, $tb:ident), ($wm:ident, $wn:ident, $tn:ident), ($lk:expr, $lt:expr)) => {{
        use crate::mma::{load_a, load_a_t, load_b, load_b_t, mma};
        let mut ks = 0;
        while ks < MMA_BK {
            let fragment_b = |c: u32| {
                if $b_k {
                    load_b($tb, $lk, c, ks)
                } else {
                    load_b_t($tb, $lt, c, ks)
                }
            };
            let fb0 = fragment_b($wn);
            let fb1 = fragment_b($wn + 16);
            let (fb2, fb3) = if $tn > 2 {
                (fragment_b($wn + 32), fragment_b($wn + 48))
            } else {
                (fb0, fb1)
            };
            let fb = [fb0, fb1, fb2, fb3];
            unroll4!(i < 4 => {
                let row = $wm + 16 * i as u32;
                let fa = if $a_k {
                    load_a($ta, $lk, row, ks)
                } else {
                    load_a_t($ta, $lt, row, ks)
                };
                unroll4!(j < 4 => {
                    if (j as u32) < $tn {
                        mma::<$t>(&mut $acc[i][j], &fa, &fb[j]);
                    }
                });
            });
            ks += 16;
        }
    }};
}

/// Groups of 8 elements of each operand a workitem fetches per K step of
/// the matrix-unit loop (`tid + MMA_BLOCK * g`, `g <` this).
pub const MMA_FETCH_GROUPS: usize = (MMA_GROUPS / MMA_BLOCK) as usize;

/// The fetch of a matrix operand [`mma_k_loop_with`] takes: this workitem's
/// [`MMA_FETCH_GROUPS`] groups of the K step at `k0`.
/// Where `whole` holds (its [`MmaOperand::whole`]) each group is one
/// 16-byte load from an offset computed once; edge tiles go through
/// [`mma_fetch`].
#[amdgpu_device]
#[inline(always)]
pub fn mma_operand_fetch<T: MatElem>(
    o: MmaOperand<T>,
    k: u32,
    whole: bool,
) -> impl Fn(u32) -> [W128; MMA_FETCH_GROUPS] {
    let tid = workitem_id_x();
    // The element offset of this workitem's first group at K step 0, and
    // the step from one of its groups to the next (the same for every
    // workitem: MMA_BLOCK groups further on is 64 rows, or 16 K, on).
    // Wrapping: only used when the tile is whole, where they are in range.
    let (ii, kk) = mma_slot(tid, o.k_fast);
    let at = (o.i0 + ii)
        .wrapping_mul(o.i_stride)
        .wrapping_add(kk.wrapping_mul(o.k_stride));
    let (ii, kk) = mma_slot(MMA_BLOCK, o.k_fast);
    let step = ii
        .wrapping_mul(o.i_stride)
        .wrapping_add(kk.wrapping_mul(o.k_stride));
    move |k0: u32| {
        let mut r = [W128([0; 4]); MMA_FETCH_GROUPS];
        if whole && k0 + MMA_BK <= k {
            let at0 = at.wrapping_add(k0.wrapping_mul(o.k_stride));
            unroll4!(g < MMA_FETCH_GROUPS => {
                let e = at0.wrapping_add(g as u32 * step);
                r[g] = unsafe { load(o.p as *const W128, (e / 8) as usize) };
            });
        } else {
            unroll4!(g < MMA_FETCH_GROUPS => {
                r[g] = mma_fetch(&o, tid + MMA_BLOCK * g as u32, k0, k);
            });
        }
        r
    }
}

/// [`mma_k_loop`] with the operands' fetch passed in, for kernels whose
/// operands are not strided matrices (the convolution's window operand).
/// The GEMM keeps its own copy of the loop: through this one it spilled a
/// register on gfx1102 (128 VGPRs), which the build refuses.
///
/// The K loop for one pair of LDS tile layouts
/// (`A_K`: A's tile is stored K contiguous, else with K as its rows; `B_K`
/// likewise): the wave's accumulators for its `(wm, wn)` block, `tn` column
/// tiles wide. `fetch(k0, r, op)` loads this workitem's groups of A's `[M,
/// K]` (`op` 0) or B's `[K, N]` (`op` 1) tile of the K step at `k0` into
/// `r[2 * g + op]` (the convolution's reads its input's windows); `a_k_fast` / `b_k_fast` say
/// whether their groups run along K ([`mma_slot`]).
///
/// Two LDS stages: while one is multiplied, the next K step's global loads
/// are in flight, and they are stored into the other stage after the
/// multiply; one barrier per step.
#[amdgpu_device]
#[inline(always)]
pub fn mma_k_loop_with<T: MatElem + crate::mma::MmaElem, const A_K: bool, const B_K: bool>(
    (a_k_fast, b_k_fast): (bool, bool),
    fetch: &impl Fn(u32, &mut [W128; 2 * MMA_FETCH_GROUPS], usize),
    k: u32,
    (wm, wn, tn): (u32, u32, u32),
) -> [[crate::mma::Acc; 4]; 4] {
    use crate::mma::Acc;
    let tid = workitem_id_x();
    // Two groups of 8 per workitem and operand, A's and B's interleaved.
    const GROUPS: usize = MMA_FETCH_GROUPS;
    // Stage s's A tile starts at byte `2 * s * MMA_TILE_BYTES`, its B tile
    // one tile later.
    let stage = |s: u32, r: &[W128; 2 * GROUPS]| {
        unroll4!(g < GROUPS => {
            let e = tid + MMA_BLOCK * g as u32;
            mma_stage::<A_K>(2 * s * MMA_TILE_BYTES, e, a_k_fast, r[2 * g]);
            mma_stage::<B_K>((2 * s + 1) * MMA_TILE_BYTES, e, b_k_fast, r[2 * g + 1]);
        });
    };
    let mut acc = [[Acc::zero(); 4]; 4];
    let mut regs = [W128([0; 4]); 2 * GROUPS];
    if k > 0 {
        fetch(0, &mut regs, 0);
        fetch(0, &mut regs, 1);
        stage(0, &regs);
    }
    barrier();
    let (mut k0, mut cur) = (0, 0);
    while k0 < k {
        let next = k0 + MMA_BK < k;
        if next {
            // The next step's A loads fly while this step computes.
            fetch(k0 + MMA_BK, &mut regs, 0);
        }
        let ta = lds_at::<u32>(2 * cur * MMA_TILE_BYTES);
        let tb = lds_at::<u32>((2 * cur + 1) * MMA_TILE_BYTES);
        mma_multiply_step!(T, A_K, B_K, acc, (ta, tb), (wm, wn, tn));
        if next {
            // B's loads after the multiply: in flight across it they made
            // too many registers live for archs with 128 (gfx1102).
            fetch(k0 + MMA_BK, &mut regs, 1);
            // The other stage was last read before the previous barrier.
            stage(cur ^ 1, &regs);
        }
        // One barrier per step: the stage just stored is complete, and every
        // wave is done reading the one it overwrites next.
        barrier();
        cur ^= 1;
        k0 += MMA_BK;
    }
    acc
}

/// The K loop of [`gemm_mma_body`] for one pair of LDS tile layouts
/// (`A_K`: A's tile is stored K contiguous, else with K as its rows; `B_K`
/// likewise): the wave's accumulators for its `(wm, wn)` block, `tn` column
/// tiles wide.
///
/// Two LDS stages: while one is multiplied, the next K step's global loads
/// are in flight, and they are stored into the other stage after the
/// multiply; one barrier per step. Tiles inside the matrices with 16-byte
/// rows (the usual case) load each group with one 16-byte load from an
/// offset computed once; edge tiles go through [`mma_fetch`].
#[amdgpu_device]
#[inline(always)]
fn mma_k_loop<T: MatElem + crate::mma::MmaElem, const A_K: bool, const B_K: bool>(
    oa: &MmaOperand<T>,
    ob: &MmaOperand<T>,
    k: u32,
    (wm, wn, tn): (u32, u32, u32),
) -> [[crate::mma::Acc; 4]; 4] {
    use crate::mma::Acc;
    let tid = workitem_id_x();
    // Two groups of 8 per workitem and operand, A's and B's interleaved.
    const GROUPS: usize = (MMA_GROUPS / MMA_BLOCK) as usize;
    // The element offset of this workitem's first group at K step 0, and
    // the step from one of its groups to the next (the same for every
    // workitem: MMA_BLOCK groups further on is 64 rows, or 16 K, on).
    // Wrapping: only used when the tile is whole, where they are in range.
    let origin = |o: &MmaOperand<T>, k_fast: bool| {
        let (ii, kk) = mma_slot(tid, k_fast);
        let at = (o.i0 + ii)
            .wrapping_mul(o.i_stride)
            .wrapping_add(kk.wrapping_mul(o.k_stride));
        let (ii, kk) = mma_slot(MMA_BLOCK, k_fast);
        (
            at,
            ii.wrapping_mul(o.i_stride)
                .wrapping_add(kk.wrapping_mul(o.k_stride)),
        )
    };
    let ((at_a, step_a), (at_b, step_b)) = (origin(oa, oa.k_fast), origin(ob, ob.k_fast));
    // The whole tile lies inside both matrices and is read in words.
    let whole = oa.words && ob.words && oa.i0 + MMA_BM <= oa.size && ob.i0 + MMA_BN <= ob.size;
    // Loads this workitem's groups of the K step at `k0` of A (`op` 0) or
    // B (`op` 1) into `r`.
    let fetch = |k0: u32, r: &mut [W128; 2 * GROUPS], op: usize| {
        let (o, at, step) = if op == 0 {
            (oa, at_a, step_a)
        } else {
            (ob, at_b, step_b)
        };
        if whole && k0 + MMA_BK <= k {
            let at0 = at.wrapping_add(k0.wrapping_mul(o.k_stride));
            unroll4!(g < GROUPS => {
                let e = at0.wrapping_add(g as u32 * step);
                r[2 * g + op] = unsafe { load(o.p as *const W128, (e / 8) as usize) };
            });
        } else {
            unroll4!(g < GROUPS => {
                r[2 * g + op] = mma_fetch(o, tid + MMA_BLOCK * g as u32, k0, k);
            });
        }
    };
    // Stage s's A tile starts at byte `2 * s * MMA_TILE_BYTES`, its B tile
    // one tile later.
    let stage = |s: u32, r: &[W128; 2 * GROUPS]| {
        unroll4!(g < GROUPS => {
            let e = tid + MMA_BLOCK * g as u32;
            mma_stage::<A_K>(2 * s * MMA_TILE_BYTES, e, oa.k_fast, r[2 * g]);
            mma_stage::<B_K>((2 * s + 1) * MMA_TILE_BYTES, e, ob.k_fast, r[2 * g + 1]);
        });
    };
    let mut acc = [[Acc::zero(); 4]; 4];
    let mut regs = [W128([0; 4]); 2 * GROUPS];
    if k > 0 {
        fetch(0, &mut regs, 0);
        fetch(0, &mut regs, 1);
        stage(0, &regs);
    }
    barrier();
    let (mut k0, mut cur) = (0, 0);
    while k0 < k {
        let next = k0 + MMA_BK < k;
        if next {
            // The next step's A loads fly while this step computes.
            fetch(k0 + MMA_BK, &mut regs, 0);
        }
        let ta = lds_at::<u32>(2 * cur * MMA_TILE_BYTES);
        let tb = lds_at::<u32>((2 * cur + 1) * MMA_TILE_BYTES);
        mma_multiply_step!(T, A_K, B_K, acc, (ta, tb), (wm, wn, tn));
        if next {
            // B's loads after the multiply: in flight across it they made
            // too many registers live for archs with 128 (gfx1102).
            fetch(k0 + MMA_BK, &mut regs, 1);
            // The other stage was last read before the previous barrier.
            stage(cur ^ 1, &regs);
        }
        // One barrier per step: the stage just stored is complete, and every
        // wave is done reading the one it overwrites next.
        barrier();
        cur ^= 1;
        k0 += MMA_BK;
    }
    acc
}

/// The copy-staged K loop of [`gemm_mma_body`] ([`MMA_ASYNC`]): each group
/// of 8 elements goes from memory into its LDS tile without passing
/// through registers, in the tile layout that is the operand's own (`A_K`
/// is `oa.k_fast`, `B_K` is `ob.k_fast`), groups past the matrix zero.
/// [`MMA_ASYNC_STAGES`] stages rotate: the step multiplied waits only for
/// its own copies, the next ones still fly; one barrier per step, after
/// which the stage multiplied in the step before is refilled.
#[amdgpu_device]
#[inline(always)]
fn mma_k_loop_copied<T: MatElem + crate::mma::MmaElem, const A_K: bool, const B_K: bool>(
    oa: &MmaOperand<T>,
    ob: &MmaOperand<T>,
    k: u32,
    block: (u32, u32, u32),
) -> [[crate::mma::Acc; 4]; 4] {
    use crate::mma::Acc;
    const STAGES: u32 = MMA_ASYNC_STAGES;
    const GROUPS: usize = MMA_FETCH_GROUPS;
    let tid = workitem_id_x();
    // The copier of one operand: issues this workitem's copies of the K
    // step at `k0` into the tile at LDS byte `tile`. Its groups: the element
    // offset of its first at K step 0 and the step to the next (as
    // `mma_k_loop`), its LDS word (16 bytes) in a tile and the step to the
    // next, and its first (i, kk) to test the edges.
    let copier = |o: MmaOperand<T>, tile_k: bool| {
        let (ii, kk) = mma_slot(tid, o.k_fast);
        let at = (o.i0 + ii)
            .wrapping_mul(o.i_stride)
            .wrapping_add(kk.wrapping_mul(o.k_stride));
        let (si, sk) = mma_slot(MMA_BLOCK, o.k_fast);
        let step = si
            .wrapping_mul(o.i_stride)
            .wrapping_add(sk.wrapping_mul(o.k_stride));
        // Group e is piece e of the unswizzled tile in either layout (8
        // halves along the tile's rows); MMA_BLOCK groups on is MMA_BLOCK
        // pieces on, whole periods of the swizzle.
        const _: () = assert!(
            MMA_BLOCK.is_multiple_of(MMA_SWIZZLED_K.period())
                && MMA_BLOCK.is_multiple_of(MMA_SWIZZLED_T.period())
        );
        let layout = if tile_k {
            MMA_SWIZZLED_K
        } else {
            MMA_SWIZZLED_T
        };
        let (word0, word_step, i) = (layout.half(8 * tid) / 8, MMA_BLOCK, o.i0 + ii);
        move |tile: u32, k0: u32| {
            let at0 = at.wrapping_add(k0.wrapping_mul(o.k_stride));
            let dst = lds_at::<W128>(tile);
            unroll4!(g < GROUPS => {
                let g = g as u32;
                // Every group is wholly in or wholly out ([`MMA_ASYNC`]).
                let keep = i + g * si < o.size && k0 + kk + g * sk < k;
                let e = at0.wrapping_add(g * step);
                unsafe {
                    lds_copy_async(dst, word0 + g * word_step, o.p as *const W128, (e / 8) as usize, keep)
                };
            });
        }
    };
    let (copy_a, copy_b) = (copier(*oa, A_K), copier(*ob, B_K));
    // Issues this workitem's copies of the K step at `k0` into stage `s`.
    let copy = |s: u32, k0: u32| {
        copy_a(2 * s * MMA_ASYNC_TILE_BYTES, k0);
        copy_b((2 * s + 1) * MMA_ASYNC_TILE_BYTES, k0);
    };
    let mut acc = [[Acc::zero(); 4]; 4];
    // The first STAGES - 1 steps in flight, one copy group each (empty past
    // K, so the count of groups is the same in every workitem and step).
    unroll4!(s < (STAGES - 1) as usize => {
        let s = s as u32;
        if s * MMA_BK < k {
            copy(s, s * MMA_BK);
        }
        lds_copy_commit();
    });
    let (mut k0, mut cur) = (0, 0);
    while k0 < k {
        // This step's group is done (the STAGES - 2 after it may run on);
        // the barrier makes every workitem's copies visible and says every
        // wave is done with the stage multiplied last step, refilled next.
        lds_copy_wait::<{ MMA_ASYNC_STAGES - 2 }>();
        barrier();
        let ahead = k0 + (STAGES - 1) * MMA_BK;
        if ahead < k {
            copy((cur + STAGES - 1) % STAGES, ahead);
        }
        lds_copy_commit();
        let ta = lds_at::<u32>(2 * cur * MMA_ASYNC_TILE_BYTES);
        let tb = lds_at::<u32>((2 * cur + 1) * MMA_ASYNC_TILE_BYTES);
        let (wm, wn, tn) = block;
        mma_multiply_step!(
            T,
            A_K,
            B_K,
            acc,
            (ta, tb),
            (wm, wn, tn),
            (MMA_SWIZZLED_K, MMA_SWIZZLED_T)
        );
        cur = if cur + 1 == STAGES { 0 } else { cur + 1 };
        k0 += MMA_BK;
    }
    acc
}

/// The matrix-unit GEMM (f16, bf16): C = act(A·B + bias) as [`gemm_body`],
/// on the device layer's [`crate::mma`] primitive. One workgroup of
/// [`MMA_BLOCK`] workitems per [`MMA_BM`] x [`MMA_BN`] tile of C; K in steps
/// of [`MMA_BK`] staged in LDS as 16-bit values (the next step's loads in
/// flight while this one computes); each wave multiplies a 64 x 64 (wave
/// 64) or 64 x 32 (wave 32) block as 16 x 16 tiles, its B fragments held
/// while each A fragment meets them all. `flags`: [`MMA_A_WORDS`],
/// [`MMA_B_WORDS`], [`MMA_T_TILES`], [`MMA_ASYNC`] (then the copy-staged
/// loop [`mma_k_loop_copied`]).
#[amdgpu_device]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub fn gemm_mma_body<T: MatElem + crate::mma::MmaElem>(
    c: *mut T,
    a: *const T,
    b: *const T,
    bias: *const T,
    (m, n, k, batch, z0): (u32, u32, u32, u32, u32),
    (a_rs, a_cs, a_bs): (u32, u32, u64),
    (b_rs, b_cs, b_bs): (u32, u32, u64),
    act: u32,
    flags: u32,
) {
    use crate::mma::Acc;
    // At least 1: a division the compiler cannot prove safe calls the
    // panic handler, and the call costs the kernel a stack.
    let tiles_n = Ord::max(n.div_ceil(MMA_BN), 1);
    let tile = workgroup_id_x();
    let (m0, n0) = ((tile / tiles_n) * MMA_BM, (tile % tiles_n) * MMA_BN);
    // A GPU without a matrix unit (the op layer launches the FMA-tiled
    // `gemm` there) runs the tile as four tiles of that kernel, which fit
    // its registers; the emulator runs the primitive's FMA body below, the
    // logic the matrix units run.
    #[cfg(all(ferrocm_device, not(ferrocm_mma)))]
    {
        const _: () = assert!(MMA_BLOCK == GEMM_BLOCK && gemm_lds_bytes(4) <= MMA_LDS_BYTES);
        const _: () = assert!(MMA_BM == 2 * gemm_bm(4) && MMA_BN == 2 * GEMM_BN);
        let _ = (flags, mma_k_loop::<T, true, true>);
        let shape = (m, n, k, batch, z0);
        let (sa, sb) = ((a_rs, a_cs, a_bs), (b_rs, b_cs, b_bs));
        unroll4!(q < 4 => {
            let at = (m0 + gemm_bm(4) * (q as u32 / 2), n0 + GEMM_BN * (q as u32 % 2));
            gemm_tile::<T, 4>(c, a, b, bias, shape, sa, sb, act, at);
        });
        return;
    }
    #[allow(unreachable_code)]
    // 16-wide column tiles per wave: 4 at wave 64, 2 at wave 32 (a
    // constant on a GPU; the emulator's wave size is run time).
    let tn: u32 = if wave_size() >= 64 { 4 } else { 2 };
    let waves_n = MMA_BN / (16 * tn);
    let (wm, wn) = ((wave_id() / waves_n) * 64, (wave_id() % waves_n) * 16 * tn);
    let z = z0 + workgroup_id_y();
    if z < batch {
        // A's non-K dim is its rows, B's its columns.
        let oa = MmaOperand {
            p: offset_by(a, z, a_bs),
            i0: m0,
            size: m,
            i_stride: a_rs,
            k_stride: a_cs,
            k_fast: a_cs == 1,
            words: flags & MMA_A_WORDS != 0,
        };
        let ob = MmaOperand {
            p: offset_by(b, z, b_bs),
            i0: n0,
            size: n,
            i_stride: b_cs,
            k_stride: b_rs,
            k_fast: b_rs == 1,
            words: flags & MMA_B_WORDS != 0,
        };
        // One loop per pair of tile layouts, so none of it branches on
        // them: K contiguous when that is the operand's fast dim or the
        // unit's transposed loads are not wanted.
        let t_tiles = crate::mma::TRANSPOSED_LOADS && flags & MMA_T_TILES != 0;
        let copied = COPY_STAGED_LOOPS && t_tiles && flags & MMA_ASYNC != 0;
        let acc = if copied {
            // Each operand's tile in its own layout: groups copy as they are.
            match (oa.k_fast, ob.k_fast) {
                (true, true) => mma_k_loop_copied::<T, true, true>(&oa, &ob, k, (wm, wn, tn)),
                (true, false) => mma_k_loop_copied::<T, true, false>(&oa, &ob, k, (wm, wn, tn)),
                (false, true) => mma_k_loop_copied::<T, false, true>(&oa, &ob, k, (wm, wn, tn)),
                (false, false) => mma_k_loop_copied::<T, false, false>(&oa, &ob, k, (wm, wn, tn)),
            }
        } else {
            match (oa.k_fast || !t_tiles, ob.k_fast || !t_tiles) {
                (true, true) => mma_k_loop::<T, true, true>(&oa, &ob, k, (wm, wn, tn)),
                (true, false) => mma_k_loop::<T, true, false>(&oa, &ob, k, (wm, wn, tn)),
                (false, true) => mma_k_loop::<T, false, true>(&oa, &ob, k, (wm, wn, tn)),
                (false, false) => mma_k_loop::<T, false, false>(&oa, &ob, k, (wm, wn, tn)),
            }
        };
        // The tile's corner again: held across the K loop it was spilled
        // on sm_90 with two workgroups per SM.
        let tile = workgroup_id_x_again();
        let (m0, n0) = ((tile / tiles_n) * MMA_BM, (tile % tiles_n) * MMA_BN);
        // C's batch z starts z * m * n elements in.
        let cz = c.wrapping_add((z as u64 * m as u64 * n as u64) as usize);
        let len = Acc::len();
        unroll4!(i < 4 => {
            unroll4!(j < 4 => {
                if (j as u32) < tn {
                // e = 4 * e1 + e0 < Acc::MAX_LEN (8 at most), written out.
                unroll4!(e1 < Acc::MAX_LEN.div_ceil(4) => {
                unroll4!(e0 < 4 => {
                    let e = 4 * e1 + e0;
                    if e < Acc::MAX_LEN && (e as u32) < len {
                        let (r, cc) = Acc::at(e as u32);
                        let row = m0 + wm + 16 * i as u32 + r;
                        let col = n0 + wn + 16 * j as u32 + cc;
                        if row < m && col < n {
                            let mut v = acc[i][j].value(e);
                            if !bias.is_null() {
                                v += unsafe { load(bias, col as usize) }.widen();
                            }
                            // The f32 formulas even for f16/bf16: with the
                            // short forms ptxas laid out the K loop 3%
                            // slower on an H200 (bf16 4096^3 321 -> 311).
                            unsafe { store(cz, (row * n + col) as usize, T::from_f32(activation::<f32>(v, act))) };
                        }
                    }
                });
                });
                }
                // One tile's stores at a time: interleaving all sixteen
                // holds their masks and addresses at once (scalar spills on
                // gfx9).
                schedule_barrier();
            });
        });
    }
}

/// LDS stages of [`gemm_wgmma_body`]: an A and a B operand tile each
/// ([`crate::mma::WG_TILE_BYTES`], 8 KB).
pub const WGMMA_STAGES: u32 = 4;
/// LDS of [`gemm_wgmma_body`]: 64 KB.
pub const WGMMA_LDS_BYTES: u32 = WGMMA_STAGES * 2 * crate::mma::WG_TILE_BYTES;

/// 16-byte groups a workitem copies of each operand tile of the
/// warpgroup K loop ([`wgmma_k_loop_with`]): group `g` is tile group `tid +
/// MMA_BLOCK * g`.
pub const WGMMA_GROUPS: usize =
    (crate::mma::WG_TILE_I * crate::mma::WG_TILE_K / 8 / MMA_BLOCK) as usize;

/// Where tile group `e` (`tid + MMA_BLOCK * g`) of a warpgroup operand tile
/// lies: `(i, kk)` of its first element (8 along the operand's contiguous
/// dim: K when `k_major`).
#[amdgpu_device]
#[inline(always)]
pub const fn wgmma_group_at(e: u32, k_major: bool) -> (u32, u32) {
    use crate::mma::{WG_TILE_I, WG_TILE_K};
    if k_major {
        (e / (WG_TILE_K / 8), (e % (WG_TILE_K / 8)) * 8)
    } else {
        ((e % (WG_TILE_I / 8)) * 8, e / (WG_TILE_I / 8))
    }
}

/// The copier of a matrix operand into a warpgroup operand tile: `(tile,
/// k0)` copies the K step at `k0` of `o`'s tile into the LDS tile at byte
/// `tile` ([`lds_copy_async`], groups past the matrix zero; every group
/// wholly in or out, as [`MMA_ASYNC`]), K-major when `k_major`.
#[amdgpu_device]
#[inline(always)]
pub fn wgmma_copier<T: MatElem>(o: MmaOperand<T>, k_major: bool, k: u32) -> impl Fn(u32, u32) {
    use crate::mma::wg_tile_byte;
    let tid = workitem_id_x();
    move |tile: u32, k0: u32| {
        let dst = lds_at::<W128>(tile);
        unroll4!(g < WGMMA_GROUPS => {
            let (ii, kk) = wgmma_group_at(tid + MMA_BLOCK * g as u32, k_major);
            let (i, kg) = (o.i0 + ii, k0 + kk);
            let keep = i < o.size && kg < k;
            let at = i.wrapping_mul(o.i_stride).wrapping_add(kg.wrapping_mul(o.k_stride));
            unsafe {
                lds_copy_async(dst, wg_tile_byte(k_major, ii, kk) / 16, o.p as *const W128, (at / 8) as usize, keep)
            };
        });
    }
}

/// The K loop of [`gemm_wgmma_body`] (and of the convolution's warpgroup
/// kernel) for one pair of operand tile layouts (`A_K`: A's tile is
/// K-major, `B_K` likewise): the calling warpgroup's 64 x 128 accumulator
/// of rows `64 * warpgroup` of the tile. `copy(a_tile, b_tile, k0)` copies
/// the K step at `k0` of both operands into the LDS tiles at those bytes
/// with [`lds_copy_async`] (in the layouts of [`crate::mma::wg_tile_byte`],
/// zeros past K), the same number of copies in every workitem.
///
/// Two steps' copies fly while a step is multiplied, and the warpgroup's
/// products of one step run on while the next is issued ([`wg_wait`] of
/// 1), so a stage is refilled two steps after it was multiplied. One
/// barrier a step.
#[amdgpu_device]
#[inline(always)]
pub fn wgmma_k_loop_with<T: MatElem + crate::mma::MmaElem, const A_K: bool, const B_K: bool>(
    copy: &impl Fn(u32, u32, u32),
    k: u32,
) -> crate::mma::WgAcc {
    use crate::mma::{
        WG_THREADS, WG_TILE_BYTES, WG_TILE_I, WG_TILE_K, WgAcc, wg_begin, wg_commit, wg_lds_fence,
        wg_mma, wg_wait,
    };
    const STAGES: u32 = WGMMA_STAGES;
    // Steps whose copies are in flight ahead of the one multiplied: a
    // stage is refilled AHEAD steps after it was multiplied, which
    // `wg_wait::<1>` below makes two (one step's products still run).
    const AHEAD: u32 = STAGES - 2;
    const _: () =
        assert!(MMA_BM == WG_TILE_I && MMA_BN == WG_TILE_I && MMA_BLOCK == 2 * WG_THREADS);
    let tid = workitem_id_x();
    // Stage s: A's tile, then B's.
    let stage = |s: u32, k0: u32| copy(2 * s * WG_TILE_BYTES, (2 * s + 1) * WG_TILE_BYTES, k0);
    let mut acc = WgAcc::zero();
    // The first AHEAD steps in flight, one copy group each (empty past K,
    // so every workitem counts the same groups).
    unroll4!(s < AHEAD as usize => {
        let s = s as u32;
        if s * WG_TILE_K < k {
            stage(s, s * WG_TILE_K);
        }
        lds_copy_commit();
    });
    let a_i0 = (tid / WG_THREADS) * 64;
    let (mut k0, mut cur) = (0, 0);
    while k0 < k {
        // This step's copies are done, visible to the products (the fence)
        // and everyone's (the barrier); every warpgroup is past the wait
        // that finished its products of the step two back, whose stage is
        // refilled now.
        // AHEAD - 1 groups (the newest) may still run.
        lds_copy_wait::<{ WGMMA_STAGES - 3 }>();
        wg_lds_fence();
        barrier();
        let ahead = k0 + AHEAD * WG_TILE_K;
        if ahead < k {
            stage((cur + AHEAD) % STAGES, ahead);
        }
        lds_copy_commit();
        let (ta, tb) = (2 * cur * WG_TILE_BYTES, (2 * cur + 1) * WG_TILE_BYTES);
        wg_begin();
        wg_mma::<T, A_K, B_K, 64>(&mut acc, ta, a_i0, tb, 0);
        wg_mma::<T, A_K, B_K, 64>(&mut acc, ta, a_i0, tb, 16);
        wg_commit();
        wg_wait::<1, 64>(&mut acc);
        cur = if cur + 1 == STAGES { 0 } else { cur + 1 };
        k0 += WG_TILE_K;
    }
    wg_wait::<0, 64>(&mut acc);
    acc
}

/// [`wgmma_k_loop_with`] on two matrix operands (`A_K` is `oa.k_fast`,
/// `B_K` is `ob.k_fast`).
#[amdgpu_device]
#[inline(always)]
fn wgmma_k_loop<T: MatElem + crate::mma::MmaElem, const A_K: bool, const B_K: bool>(
    oa: &MmaOperand<T>,
    ob: &MmaOperand<T>,
    k: u32,
) -> crate::mma::WgAcc {
    let (copy_a, copy_b) = (wgmma_copier(*oa, A_K, k), wgmma_copier(*ob, B_K, k));
    let copy = |ta: u32, tb: u32, k0: u32| {
        copy_a(ta, k0);
        copy_b(tb, k0);
    };
    wgmma_k_loop_with::<T, A_K, B_K>(&copy, k)
}

/// The warpgroup GEMM (f16, bf16; Hopper's `wgmma`, which the op library
/// launches where `Device::warpgroup_mma` holds): C = act(A·B + bias) as
/// [`gemm_mma_body`], with its arguments. One workgroup of [`MMA_BLOCK`]
/// workitems (two warpgroups) per [`MMA_BM`] x [`MMA_BN`] tile of C, each
/// warpgroup 64 rows of it; K in steps of 32 copied into
/// [`WGMMA_STAGES`] LDS stages ([`wgmma_k_loop`]). The operands' groups of
/// 8 must be read as 16-byte words, each wholly inside or outside its
/// matrix (the op library's condition for [`MMA_ASYNC`]); `flags` is not
/// read. On the emulator and AMD the device layer's [`crate::mma::wg_mma`]
/// computes each workitem's elements from the same LDS tiles.
#[amdgpu_device]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub fn gemm_wgmma_body<T: MatElem + crate::mma::MmaElem>(
    c: *mut T,
    a: *const T,
    b: *const T,
    bias: *const T,
    (m, n, k, batch, z0): (u32, u32, u32, u32, u32),
    (a_rs, a_cs, a_bs): (u32, u32, u64),
    (b_rs, b_cs, b_bs): (u32, u32, u64),
    act: u32,
) {
    use crate::mma::{WG_THREADS, wg_acc_at};
    let tiles_n = Ord::max(n.div_ceil(MMA_BN), 1);
    let tile = workgroup_id_x();
    let (m0, n0) = ((tile / tiles_n) * MMA_BM, (tile % tiles_n) * MMA_BN);
    let z = z0 + workgroup_id_y();
    if z >= batch {
        return;
    }
    let oa = MmaOperand {
        p: offset_by(a, z, a_bs),
        i0: m0,
        size: m,
        i_stride: a_rs,
        k_stride: a_cs,
        k_fast: a_cs == 1,
        words: true,
    };
    let ob = MmaOperand {
        p: offset_by(b, z, b_bs),
        i0: n0,
        size: n,
        i_stride: b_cs,
        k_stride: b_rs,
        k_fast: b_rs == 1,
        words: true,
    };
    let acc = match (oa.k_fast, ob.k_fast) {
        (true, true) => wgmma_k_loop::<T, true, true>(&oa, &ob, k),
        (true, false) => wgmma_k_loop::<T, true, false>(&oa, &ob, k),
        (false, true) => wgmma_k_loop::<T, false, true>(&oa, &ob, k),
        (false, false) => wgmma_k_loop::<T, false, false>(&oa, &ob, k),
    };
    let tid = workitem_id_x();
    let tile = workgroup_id_x_again();
    let (m0, n0) = (
        (tile / tiles_n) * MMA_BM + (tid / WG_THREADS) * 64,
        (tile % tiles_n) * MMA_BN,
    );
    let cz = c.wrapping_add((z as u64 * m as u64 * n as u64) as usize);
    crate::unroll64!(e => {
        let (r, cc) = wg_acc_at(tid, e as u32);
        let (row, col) = (m0 + r, n0 + cc);
        if row < m && col < n {
            let mut v = acc.v[e];
            if !bias.is_null() {
                v += unsafe { load(bias, col as usize) }.widen();
            }
            unsafe { store(cz, (row * n + col) as usize, T::from_f32(activation::<f32>(v, act))) };
        }
    });
}

/// The GEMV: see the module doc. `x` is `[batch, m, k]` with rows `x_rs`
/// apart and contiguous along k, `w` is `[batch, n, k]` with rows `w_rs`
/// apart and contiguous along k, `y` is `[batch, m, n]` contiguous.
/// `words`: rows start on 16-byte boundaries and `k` is a multiple of
/// [`MatElem::PER_WORD`], so they are read in 16-byte words (`w_rs` and
/// `x_rs` are then in words).
///
/// `R` (1, 2 or 4) rows of x are done per pass over a weight row, their
/// sums in registers; more rows (up to [`GEMV_MAX_M`]) take further passes,
/// which find the weight row in the cache (a wave's row is a few KiB), so
/// memory still delivers each weight once. Rows of a pass past `m` re-read
/// row `m - 1` (the loop has no conditions) and are not stored.
///
/// `GLU`: `w` holds `2n` rows; column `j` is [`glu_apply`] (activation
/// `act`) of the sums of rows `j` and `n + j`, each rounded to `T` first
/// (bit for bit the product stored, then `glu_halves`); `bias` must be null.
#[amdgpu_device]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub fn gemv_body<T: MatElem, const R: usize, const GLU: bool>(
    y: *mut T,
    w: *const T,
    x: *const T,
    bias: *const T,
    (n, k, m, batch): (u32, u32, u32, u32),
    (w_rs, w_bs, x_rs, x_bs): (u32, u64, u32, u64),
    act: u32,
    words: bool,
) {
    // Launched with `early_start`: nothing global is touched before this.
    wait_prior_grids();
    release_dependent_grids();
    let lane = lane_id();
    let wave = wave_size();
    let waves = GEMV_BLOCK / wave;
    let last = Ord::max(m, 1) - 1;
    // Words in flight per lane: four with one or two rows a pass, two with
    // four (whose x loads keep enough in flight).
    let unroll: u32 = if R <= 2 { 4 } else { 2 };
    let mut z = workgroup_id_y();
    while z < batch {
        let xz = offset_by(x, z, x_bs);
        let wz = offset_by(w, z, w_bs);
        let yz = y.wrapping_add((z as u64 * m as u64 * n as u64) as usize);
        let mut col = workgroup_id_x() * waves + wave_id();
        while col < n {
            let b = if bias.is_null() {
                0.0
            } else {
                unsafe { load(bias, col as usize) }.widen()
            };
            let mut m0 = 0;
            while m0 < m {
                // This pass's rows of x (clamped to the last one).
                let mut xrow = [0u32; R];
                unroll4!(r < R => {
                    xrow[r] = Ord::min(m0 + r as u32, last) * x_rs;
                });
                let mut gate = [T::ZERO; R];
                let mut wrow = col * w_rs;
                // With GLU the gate row's pass, then up's, which stores.
                let mut gate_pass = GLU;
                loop {
                    let mut acc = [0.0f32; R];
                    if words {
                        let kw = k / T::PER_WORD;
                        let (ww, xw) = (wz as *const W128, xz as *const W128);
                        let mut i = lane;
                        while i + (unroll - 1) * wave < kw {
                            let w0 = unsafe { load(ww, (wrow + i) as usize) };
                            let w1 = unsafe { load(ww, (wrow + i + wave) as usize) };
                            let (w2, w3) = if unroll == 4 {
                                unsafe {
                                    (
                                        load(ww, (wrow + i + 2 * wave) as usize),
                                        load(ww, (wrow + i + 3 * wave) as usize),
                                    )
                                }
                            } else {
                                (w0, w0)
                            };
                            unroll4!(r < R => {
                                let xr = xrow[r] + i;
                                let mut a = acc[r];
                                a = T::dot_word(w0, unsafe { load(xw, xr as usize) }, a);
                                a = T::dot_word(w1, unsafe { load(xw, (xr + wave) as usize) }, a);
                                if unroll == 4 {
                                    a = T::dot_word(w2, unsafe { load(xw, (xr + 2 * wave) as usize) }, a);
                                    a = T::dot_word(w3, unsafe { load(xw, (xr + 3 * wave) as usize) }, a);
                                }
                                acc[r] = a;
                            });
                            i += unroll * wave;
                        }
                        while i < kw {
                            let w0 = unsafe { load(ww, (wrow + i) as usize) };
                            unroll4!(r < R => {
                                acc[r] = T::dot_word(w0, unsafe { load(xw, (xrow[r] + i) as usize) }, acc[r]);
                            });
                            i += wave;
                        }
                    } else {
                        let mut i = lane;
                        while i < k {
                            let wv = unsafe { load(wz, (wrow + i) as usize) }.widen();
                            unroll4!(r < R => {
                                acc[r] = math::fma(wv, unsafe { load(xz, (xrow[r] + i) as usize) }.widen(), acc[r]);
                            });
                            i += wave;
                        }
                    }
                    if gate_pass {
                        unroll4!(r < R => {
                            gate[r] = T::from_f32(wave_sum_f32(acc[r]) + b);
                        });
                        wrow += n * w_rs;
                        gate_pass = false;
                        continue;
                    }
                    unroll4!(r < R => {
                        let s = wave_sum_f32(acc[r]) + b;
                        let row = m0 + r as u32;
                        if lane == 0 && row < m {
                            let v = match GLU {
                                true => glu_apply(gate[r], T::from_f32(s), act),
                                false => T::from_f32(activation::<T>(s, act)),
                            };
                            unsafe { store(yz, (row * n + col) as usize, v) };
                        }
                    });
                    break;
                }
                m0 += R as u32;
            }
            col += num_workgroups_x() * waves;
        }
        z += num_workgroups_y();
    }
}

/// The epilogue of a vendor GEMM: `out = act(sums + bias)` rounded once to
/// `T`, over `rows` rows of `n` f32 sums (contiguous). A workgroup per row
/// (looping when there are more rows than workgroups), its workitems along
/// the row: no division per element.
#[amdgpu_device]
#[inline(always)]
pub fn epilogue_body<T: MatElem>(
    out: *mut T,
    sums: *const f32,
    bias: *const T,
    rows: u64,
    n: u32,
    act: u32,
) {
    let mut row = workgroup_id_x() as u64;
    while row < rows {
        let base = row * n as u64;
        let mut col = workitem_id_x();
        while col < n {
            let at = (base + col as u64) as usize;
            let mut v = unsafe { load(sums, at) };
            if !bias.is_null() {
                v += unsafe { load(bias, col as usize) }.widen();
            }
            unsafe { store(out, at, T::from_f32(activation::<T>(v, act))) };
            col += workgroup_size_x();
        }
        row += num_workgroups_x() as u64;
    }
}

/// `epilogue_{T}`'s parameters: `(out, sums, bias, rows, n, act)`.
#[cfg(not(ferrocm_device))]
pub type EpilogueArgs<T> = (*mut T, *const f32, *const T, u64, u32, u32);

/// `gemm_{T}`'s parameters: `(c, a, b, bias, m, n, k, batch, z0, a_rs,
/// a_cs, a_bs, b_rs, b_cs, b_bs, act)`; workgroup row `y` computes batch
/// `z0 + y`.
#[cfg(not(ferrocm_device))]
pub type GemmArgs<T> = (
    *mut T,
    *const T,
    *const T,
    *const T,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    u64,
    u32,
    u32,
    u64,
    u32,
);
/// `gemm_mma_{T}`'s parameters: [`GemmArgs`] and the flags
/// ([`MMA_A_WORDS`], [`MMA_B_WORDS`]).
#[cfg(not(ferrocm_device))]
pub type GemmMmaArgs<T> = (
    *mut T,
    *const T,
    *const T,
    *const T,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    u64,
    u32,
    u32,
    u64,
    u32,
    u32,
);
/// `gemv_{T}`'s parameters: `(y, w, x, bias, n, k, m, batch, w_rs, w_bs,
/// x_rs, x_bs, act, words)`.
#[cfg(not(ferrocm_device))]
pub type GemvArgs<T> = (
    *mut T,
    *const T,
    *const T,
    *const T,
    u32,
    u32,
    u32,
    u32,
    u32,
    u64,
    u32,
    u64,
    u32,
    u32,
);

/// The matrix kernels of an element type (host side): `None` for the
/// integer types, which have no matrix products.
#[cfg(not(ferrocm_device))]
pub trait MatmulKernels: Sized + 'static {
    /// `gemm_{T}`.
    const GEMM: Option<KernelRef<GemmArgs<Self>>>;
    /// `gemm_wide_{T}` (f32): [`GEMM_WIDE_ROWS`] rows a workitem, for
    /// devices whose LDS stages pay (`Device::double_buffers_lds`).
    const GEMM_WIDE: Option<KernelRef<GemmArgs<Self>>>;
    /// `gemv{R}_{T}` for R = 1, 2, 4 rows per pass (any `m` up to
    /// [`GEMV_MAX_M`]; `gemv4` takes two passes past 4 rows).
    const GEMV: Option<[KernelRef<GemvArgs<Self>>; 3]>;
    /// `gemv_glu{R}_{T}` for R = 1, 2 (`m` up to [`GEMV_GLU_MAX_M`]).
    const GEMV_GLU: Option<[KernelRef<GemvArgs<Self>>; 2]>;
    /// `epilogue_{T}`.
    const EPILOGUE: Option<KernelRef<EpilogueArgs<Self>>>;
    /// `gemm_mma_{T}` (the 16-bit floats: the matrix units take f16 and
    /// bf16).
    const GEMM_MMA: Option<KernelRef<GemmMmaArgs<Self>>>;
    /// `gemm_wgmma_{T}` (f16, bf16): the warpgroup GEMM, same arguments.
    const GEMM_WGMMA: Option<KernelRef<GemmMmaArgs<Self>>>;
}

macro_rules! matmul_kernels {
    ($($t:ty => $gemm:ident, $epilogue:ident, [$($gemv:ident: $rows:literal),*], [$($glu:ident: $grows:literal),*], $mma:expr, $wgmma:expr, $wide:expr;)*) => {
        kernels! { $(
            fn $epilogue(out: *mut $t, sums: *const f32, bias: *const $t, rows: u64, n: u32, act: u32) {
                epilogue_body::<$t>(out, sums, bias, rows, n, act)
            }
            fn $gemm(c: *mut $t, a: *const $t, b: *const $t, bias: *const $t, m: u32, n: u32, k: u32, batch: u32,
                     z0: u32, a_rs: u32, a_cs: u32, a_bs: u64, b_rs: u32, b_cs: u32, b_bs: u64, act: u32) {
                gemm_body::<$t, GEMM_ROWS>(c, a, b, bias, (m, n, k, batch, z0), (a_rs, a_cs, a_bs), (b_rs, b_cs, b_bs), act)
            }
            $(
            fn $gemv(y: *mut $t, w: *const $t, x: *const $t, bias: *const $t, n: u32, k: u32, m: u32, batch: u32,
                     w_rs: u32, w_bs: u64, x_rs: u32, x_bs: u64, act: u32, words: u32) {
                gemv_body::<$t, $rows, false>(y, w, x, bias, (n, k, m, batch), (w_rs, w_bs, x_rs, x_bs), act, words != 0)
            }
            )*
            $(
            fn $glu(y: *mut $t, w: *const $t, x: *const $t, bias: *const $t, n: u32, k: u32, m: u32, batch: u32,
                    w_rs: u32, w_bs: u64, x_rs: u32, x_bs: u64, act: u32, words: u32) {
                gemv_body::<$t, $grows, true>(y, w, x, bias, (n, k, m, batch), (w_rs, w_bs, x_rs, x_bs), act, words != 0)
            }
            )*
        )* }

        #[cfg(not(ferrocm_device))]
        const _: () = { $(
            impl MatmulKernels for $t {
                const GEMM: Option<KernelRef<GemmArgs<Self>>> = Some(KernelRef::of::<$gemm>());
                const GEMM_WIDE: Option<KernelRef<GemmArgs<Self>>> = $wide;
                const GEMV: Option<[KernelRef<GemvArgs<Self>>; 3]> = Some([$(KernelRef::of::<$gemv>()),*]);
                const GEMV_GLU: Option<[KernelRef<GemvArgs<Self>>; 2]> = Some([$(KernelRef::of::<$glu>()),*]);
                const EPILOGUE: Option<KernelRef<EpilogueArgs<Self>>> = Some(KernelRef::of::<$epilogue>());
                const GEMM_MMA: Option<KernelRef<GemmMmaArgs<Self>>> = $mma;
                const GEMM_WGMMA: Option<KernelRef<GemmMmaArgs<Self>>> = $wgmma;
            }
        )* };
    };
}

matmul_kernels! {
    f32 => gemm_f32, epilogue_f32, [gemv1_f32: 1, gemv2_f32: 2, gemv4_f32: 4], [gemv_glu1_f32: 1, gemv_glu2_f32: 2], None, None, Some(KernelRef::of::<gemm_wide_f32>());
    F16 => gemm_f16, epilogue_f16, [gemv1_f16: 1, gemv2_f16: 2, gemv4_f16: 4], [gemv_glu1_f16: 1, gemv_glu2_f16: 2], Some(KernelRef::of::<gemm_mma_f16>()), Some(KernelRef::of::<gemm_wgmma_f16>()), None;
    Bf16 => gemm_bf16, epilogue_bf16, [gemv1_bf16: 1, gemv2_bf16: 2, gemv4_bf16: 4], [gemv_glu1_bf16: 1, gemv_glu2_bf16: 2], Some(KernelRef::of::<gemm_mma_bf16>()), Some(KernelRef::of::<gemm_wgmma_bf16>()), None;
}

kernels! { table WIDE_KERNELS;
    fn gemm_wide_f32(c: *mut f32, a: *const f32, b: *const f32, bias: *const f32, m: u32, n: u32, k: u32, batch: u32,
                     z0: u32, a_rs: u32, a_cs: u32, a_bs: u64, b_rs: u32, b_cs: u32, b_bs: u64, act: u32) {
        gemm_body::<f32, GEMM_WIDE_ROWS>(c, a, b, bias, (m, n, k, batch, z0), (a_rs, a_cs, a_bs), (b_rs, b_cs, b_bs), act)
    }
}

#[cfg(not(ferrocm_device))]
macro_rules! no_matmul {
    ($($t:ty),*) => { $(
        impl MatmulKernels for $t {
            const GEMM: Option<KernelRef<GemmArgs<Self>>> = None;
            const GEMM_WIDE: Option<KernelRef<GemmArgs<Self>>> = None;
            const GEMV: Option<[KernelRef<GemvArgs<Self>>; 3]> = None;
            const GEMV_GLU: Option<[KernelRef<GemvArgs<Self>>; 2]> = None;
            const EPILOGUE: Option<KernelRef<EpilogueArgs<Self>>> = None;
            const GEMM_MMA: Option<KernelRef<GemmMmaArgs<Self>>> = None;
            const GEMM_WGMMA: Option<KernelRef<GemmMmaArgs<Self>>> = None;
        }
    )* };
}
#[cfg(not(ferrocm_device))]
no_matmul!(u8, u32, i64);

macro_rules! gemm_mma_kernels {
    ($($t:ty => $name:ident, $wg:ident;)*) => {
        kernels! { table MMA_KERNELS; $(
            fn $name(c: *mut $t, a: *const $t, b: *const $t, bias: *const $t, m: u32, n: u32, k: u32, batch: u32,
                     z0: u32, a_rs: u32, a_cs: u32, a_bs: u64, b_rs: u32, b_cs: u32, b_bs: u64, act: u32, flags: u32) {
                gemm_mma_body::<$t>(c, a, b, bias, (m, n, k, batch, z0), (a_rs, a_cs, a_bs), (b_rs, b_cs, b_bs), act, flags)
            }
            fn $wg(c: *mut $t, a: *const $t, b: *const $t, bias: *const $t, m: u32, n: u32, k: u32, batch: u32,
                   z0: u32, a_rs: u32, a_cs: u32, a_bs: u64, b_rs: u32, b_cs: u32, b_bs: u64, act: u32, flags: u32) {
                let _ = flags;
                gemm_wgmma_body::<$t>(c, a, b, bias, (m, n, k, batch, z0), (a_rs, a_cs, a_bs), (b_rs, b_cs, b_bs), act)
            }
        )* }
    };
}

gemm_mma_kernels! {
    F16 => gemm_mma_f16, gemm_wgmma_f16;
    Bf16 => gemm_mma_bf16, gemm_wgmma_bf16;
}
