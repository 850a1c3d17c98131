//! The matrix-core primitive of the device layer: one wave multiplies a
//! 16 x 16 tile of A by a 16 x 16 tile of B (f16 or bf16) and adds the
//! product to a 16 x 16 f32 accumulator spread over its lanes.
//!
//! Kernels load fragments from LDS ([`load_a`], [`load_b`]), call [`mma`],
//! and read the accumulator through [`Acc::at`] / [`Acc::value`]: which lane
//! holds which element is this module's business, so no kernel names a
//! target. One body per target, picked by `cfg(ferrocm_mma)` (set by
//! build.rs per arch):
//!
//! | unit | targets | instruction per 16 x 16 x 16 |
//! |---|---|---|
//! | `sync` | NVIDIA sm_80+ | two `mma.sync.aligned.m16n8k16.row.col.f32` |
//! | `mfma` | gfx90a, gfx942, gfx950 | `v_mfma_f32_16x16x16{f16,bf16_1k}` (wave 64) |
//! | `wmma11` | gfx11 (RDNA3) | `v_wmma_f32_16x16x16_{f16,bf16}` (wave 32) |
//! | `wmma12` | gfx12 (RDNA4) | the same instructions, RDNA4's register layout |
//! | FMA | the emulator, gfx10, gfx906/908, sm_70/75 | f32 `fma` per element |
//!
//! Tiles live in LDS with K contiguous ([`load_a`], [`load_b`]): element
//! `(r, k)` of an A tile (row `r`) and element `(k, c)` of a B tile (column
//! `c`) are the 16-bit values at index `r * 2 * pitch + k` (resp. `c * 2 *
//! pitch + k`) of the tile's `Lds<u32>` seen as halves, `pitch` in 32-bit
//! words. Every target's fragments hold consecutive pairs along K, so each
//! fragment word is one 32-bit LDS read. Or they live as in a matrix whose
//! rows run along K ([`load_a_t`], [`load_b_t`]: half `k * 2 * pitch + r`),
//! which is how a row-major B (and a transposed A) reaches LDS with 16-byte
//! stores; `ldmatrix .trans` reads those on NVIDIA, the other units gather
//! the pairs half by half.
//!
//! The register layouts of each instruction ([`a_word`], [`b_word`],
//! [`acc_at`]) are plain functions of (unit, lane, register), compiled on
//! the host too: tests check that every layout covers each tile element
//! exactly once. The FMA body holds no registers in its fragments: it reads
//! the LDS tiles when [`mma`] runs (a kernel must not change a tile between
//! loading a fragment and using it, which the GEMM's barriers ensure
//! anyway), so kernels written for the matrix units fit in the registers of
//! archs without them.

use crate::device::*;
use crate::elem::*;
use crate::math;
use crate::unroll4;
use rocm_kernel_macros::amdgpu_device;

/// Rows, columns and depth of one wave's tile product.
pub const MMA_TILE: u32 = 16;

/// A matrix unit's register layout (see the module doc).
#[amdgpu_device]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum MmaUnit {
    /// NVIDIA `mma.sync` m16n8k16, two per tile (wave 32).
    Sync,
    /// AMD CDNA2/3 MFMA 16x16x16 (wave 64).
    Mfma,
    /// AMD RDNA3 WMMA (wave 32; lanes 16-31 repeat lanes 0-15's operands).
    Wmma11,
    /// AMD RDNA4 WMMA (wave 32).
    Wmma12,
}

/// The unit this build's [`mma`] uses; `None` for the FMA body.
#[amdgpu_device]
#[cfg(ferrocm_mma = "sync")]
pub const MMA_UNIT: Option<MmaUnit> = Some(MmaUnit::Sync);
/// The unit this build's [`mma`] uses; `None` for the FMA body.
#[amdgpu_device]
#[cfg(ferrocm_mma = "mfma")]
pub const MMA_UNIT: Option<MmaUnit> = Some(MmaUnit::Mfma);
/// The unit this build's [`mma`] uses; `None` for the FMA body.
#[amdgpu_device]
#[cfg(ferrocm_mma = "wmma11")]
pub const MMA_UNIT: Option<MmaUnit> = Some(MmaUnit::Wmma11);
/// The unit this build's [`mma`] uses; `None` for the FMA body.
#[amdgpu_device]
#[cfg(ferrocm_mma = "wmma12")]
pub const MMA_UNIT: Option<MmaUnit> = Some(MmaUnit::Wmma12);
/// The unit this build's [`mma`] uses; `None` for the FMA body (the
/// emulator, and archs without a matrix unit).
///
/// ```
/// // The host build (the emulator) runs the FMA body.
/// assert_eq!(ferrocm_kernels::mma::MMA_UNIT, None);
/// ```
#[amdgpu_device]
#[cfg(not(ferrocm_mma))]
pub const MMA_UNIT: Option<MmaUnit> = None;

/// 32-bit words per lane in an A (and a B) fragment of `unit`.
///
/// ```
/// use ferrocm_kernels::mma::{MmaUnit, fragment_words};
/// // 16 x 16 halves = 128 words over the lanes (gfx11 holds them twice).
/// assert_eq!(fragment_words(MmaUnit::Mfma) * 64, 128);
/// assert_eq!(fragment_words(MmaUnit::Wmma11) * 32, 256);
/// ```
#[amdgpu_device]
#[inline(always)]
pub const fn fragment_words(unit: MmaUnit) -> usize {
    match unit {
        MmaUnit::Sync => 4,
        MmaUnit::Mfma => 2,
        MmaUnit::Wmma11 => 8,
        MmaUnit::Wmma12 => 4,
    }
}

/// f32 accumulator elements per lane of `unit`.
///
/// ```
/// use ferrocm_kernels::mma::{MmaUnit, acc_len};
/// assert_eq!(acc_len(MmaUnit::Mfma) * 64, 256);
/// assert_eq!(acc_len(MmaUnit::Sync) * 32, 256);
/// ```
#[amdgpu_device]
#[inline(always)]
pub const fn acc_len(unit: MmaUnit) -> usize {
    match unit {
        MmaUnit::Mfma => 4,
        _ => 8,
    }
}

/// `(row, k)` of the first of the two A elements (`k`, `k + 1`) word `w`
/// of lane `lane`'s fragment holds (PTX ISA "Matrix Fragments for
/// mma.m16n8k16"; AMD's matrix instruction calculator for MFMA; the RDNA3
/// and RDNA4 ISA guides for WMMA).
///
/// ```
/// use ferrocm_kernels::mma::{MmaUnit, a_word};
/// assert_eq!(a_word(MmaUnit::Sync, 5, 1), (9, 2)); // group 1 + 8, k 2 * 1
/// assert_eq!(a_word(MmaUnit::Mfma, 17, 1), (1, 6));
/// ```
#[amdgpu_device]
#[inline(always)]
pub const fn a_word(unit: MmaUnit, lane: u32, w: u32) -> (u32, u32) {
    match unit {
        // a0: (g, 2t) a1: (g + 8, 2t) a2: (g, 2t + 8) a3: (g + 8, 2t + 8).
        MmaUnit::Sync => (lane / 4 + 8 * (w % 2), 2 * (lane % 4) + 8 * (w / 2)),
        MmaUnit::Mfma => (lane % 16, 4 * (lane / 16) + 2 * w),
        MmaUnit::Wmma11 => (lane % 16, 2 * w),
        MmaUnit::Wmma12 => (lane % 16, 8 * (lane / 16) + 2 * w),
    }
}

/// `(column, k)` of the first of the two B elements word `w` of lane
/// `lane`'s fragment holds. For `Sync`, words 0-1 are the first n8 half's
/// `b0, b1`, words 2-3 the second's.
///
/// ```
/// use ferrocm_kernels::mma::{MmaUnit, b_word};
/// assert_eq!(b_word(MmaUnit::Sync, 5, 3), (9, 10));
/// ```
#[amdgpu_device]
#[inline(always)]
pub const fn b_word(unit: MmaUnit, lane: u32, w: u32) -> (u32, u32) {
    match unit {
        // b0: (k 2t, col g), b1: (k 2t + 8, col g); then columns + 8.
        MmaUnit::Sync => (lane / 4 + 8 * (w / 2), 2 * (lane % 4) + 8 * (w % 2)),
        // B's column plays A's row.
        _ => a_word(unit, lane, w),
    }
}

/// `(row, column)` of accumulator element `i` of lane `lane`.
///
/// ```
/// use ferrocm_kernels::mma::{MmaUnit, acc_at};
/// assert_eq!(acc_at(MmaUnit::Wmma11, 17, 3), (7, 1));
/// ```
#[amdgpu_device]
#[inline(always)]
pub const fn acc_at(unit: MmaUnit, lane: u32, i: u32) -> (u32, u32) {
    match unit {
        // c0, c1: (g, 2t + {0,1}), c2, c3: (g + 8, ..); then columns + 8.
        MmaUnit::Sync => (
            lane / 4 + 8 * ((i % 4) / 2),
            8 * (i / 4) + 2 * (lane % 4) + i % 2,
        ),
        MmaUnit::Mfma => (4 * (lane / 16) + i, lane % 16),
        MmaUnit::Wmma11 => (2 * i + lane / 16, lane % 16),
        MmaUnit::Wmma12 => (8 * (lane / 16) + i, lane % 16),
    }
}

/// How many of the tile's rows a lane of `unit` holds accumulator
/// elements of ([`row_slot`] numbers them).
///
/// ```
/// use ferrocm_kernels::mma::{MmaUnit, row_slots};
/// assert_eq!(row_slots(MmaUnit::Sync), 2); // rows g and g + 8
/// assert_eq!(row_slots(MmaUnit::Mfma), 4);
/// ```
#[amdgpu_device]
#[inline(always)]
pub const fn row_slots(unit: MmaUnit) -> usize {
    match unit {
        MmaUnit::Sync => 2,
        _ => acc_len(unit),
    }
}

/// Which of its rows (`0..row_slots`) accumulator element `i` of a lane of
/// `unit` lies in: every lane's elements of one row share a slot.
///
/// ```
/// use ferrocm_kernels::mma::{MmaUnit, row_slot};
/// assert_eq!(row_slot(MmaUnit::Sync, 6), 1); // c2..c3 of the second n8 half
/// ```
#[amdgpu_device]
#[inline(always)]
pub const fn row_slot(unit: MmaUnit, i: usize) -> usize {
    match unit {
        MmaUnit::Sync => (i % 4) / 2,
        _ => i,
    }
}

/// The lanes that hold the other columns of a lane's rows are those whose
/// index differs from its own in the bits below this (a power of two), in
/// the same slots: a row's reduction is butterflies over xor `1, 2, ..`.
///
/// ```
/// use ferrocm_kernels::mma::{MmaUnit, row_lanes};
/// assert_eq!(row_lanes(MmaUnit::Sync), 4); // a quad holds a row
/// assert_eq!(row_lanes(MmaUnit::Wmma11), 16);
/// ```
#[amdgpu_device]
#[inline(always)]
pub const fn row_lanes(unit: MmaUnit) -> u32 {
    match unit {
        MmaUnit::Sync => 4,
        _ => 16,
    }
}

/// A 16-bit float type the matrix units multiply.
#[amdgpu_device]
pub trait MmaElem: Elem {
    /// bf16 (else f16).
    const BF16: bool;
}

#[amdgpu_device]
impl MmaElem for F16 {
    const BF16: bool = false;
}

#[amdgpu_device]
impl MmaElem for Bf16 {
    const BF16: bool = true;
}

/// Whether this build's [`load_a_t`] / [`load_b_t`] are as cheap as
/// [`load_a`] / [`load_b`] (see `host::transposed_loads`): on NVIDIA's
/// `ldmatrix .trans`, and on the FMA body (which reads LDS either way).
/// Kernels leave the transposed-tile code out of builds where it is not.
#[amdgpu_device]
pub const TRANSPOSED_LOADS: bool = matches!(MMA_UNIT, Some(MmaUnit::Sync) | None);

/// Rows whose elements a lane holds in this build (FMA: one, see
/// [`Acc::at`]).
#[amdgpu_device]
pub const ROW_SLOTS: usize = match MMA_UNIT {
    Some(u) => row_slots(u),
    None => 1,
};

/// [`row_lanes`] in this build (FMA: the lanes that split a row, 2 at
/// wave 32 and 4 at wave 64).
#[amdgpu_device]
#[inline(always)]
fn row_lanes_here() -> u32 {
    match MMA_UNIT {
        Some(u) => row_lanes(u),
        None => MMA_TILE / Acc::len(),
    }
}

/// Words per fragment in this build (FMA: none held, see [`FragA`]).
#[amdgpu_device]
const WORDS: usize = match MMA_UNIT {
    Some(u) => fragment_words(u),
    None => 1,
};

/// Accumulator elements per lane in this build (FMA: up to 8, at wave 32).
#[amdgpu_device]
const ACC: usize = match MMA_UNIT {
    Some(u) => acc_len(u),
    None => 8,
};

/// A lane's part of a 16 x 16 A tile (rows x K), loaded by [`load_a`] or
/// [`load_a_t`]. On the FMA body: where the tile is (read when [`mma`]
/// runs): element `(i, k)` is half `swizzle.half(at + i * i_pitch + k *
/// k_pitch)` of `tile`.
#[amdgpu_device]
#[derive(Clone, Copy)]
pub struct FragA {
    w: [u32; WORDS],
    tile: Lds<u32>,
    at: u32,
    i_pitch: u32,
    k_pitch: u32,
    swizzle: TileLayout,
}

/// How an operand tile's rows sit in LDS, for the fragment loads
/// ([`load_a`], [`load_a_t`], [`load_b`], [`load_b_t`]): rows `pitch`
/// words apart (a plain `u32` pitch converts to this), and, for tiles
/// copied in 16-byte pieces without padding, the pieces of each 128-byte
/// line permuted ([`TileLayout::swizzled`]) so that neither the fragment
/// loads' eight rows nor the copies' eight pieces meet in a bank.
#[amdgpu_device]
#[derive(Clone, Copy)]
pub struct TileLayout {
    /// Words from one row to the next.
    pub pitch: u32,
    /// 0: halves sit where the pitch puts them. Else the half index `h`
    /// is stored at `h ^ (((h >> swizzle) & 7) << 3)`: its 16-byte piece
    /// within the line XORed with bits of the line's row group.
    swizzle: u32,
}

#[amdgpu_device]
impl TileLayout {
    /// Unpadded rows of `pieces` 16-byte pieces (8 halves each; a power of
    /// two, 4 or more), each 128-byte line's pieces permuted by the row
    /// (rows of 8 pieces or more) or the pair of rows (4). Any 8
    /// consecutive rows' pieces at one column, and the 8 pieces of a line,
    /// then fall in 8 different groups of 4 banks. The permutation repeats
    /// every [`TileLayout::period`] pieces: a tile filled in blocks of
    /// whole periods puts each block's pieces at a fixed offset.
    ///
    /// ```
    /// use ferrocm_kernels::mma::TileLayout;
    /// // Rows of 32 halves: rows 0 and 1 share the first line, as they are;
    /// // in the next line (rows 2, 3) each piece trades places with its
    /// // neighbour.
    /// let l = TileLayout::swizzled(4);
    /// assert_eq!((l.pitch, l.half(40), l.half(64), l.half(72)), (16, 40, 72, 64));
    /// ```
    pub const fn swizzled(pieces: u32) -> Self {
        assert!(pieces >= 4 && pieces.is_power_of_two());
        let row_group = if pieces > 8 { pieces } else { 8 };
        TileLayout {
            pitch: 4 * pieces,
            swizzle: 3 + row_group.trailing_zeros(),
        }
    }

    /// Pieces (16 bytes) after which the swizzle repeats: 8 rows of 8
    /// pieces or more, 16 rows of 4 (0 for a plain layout).
    pub const fn period(self) -> u32 {
        if self.swizzle == 0 {
            0
        } else {
            1 << self.swizzle
        }
    }

    /// Where half `h` of the unswizzled layout is stored.
    #[inline(always)]
    pub fn half(self, h: u32) -> u32 {
        if self.swizzle == 0 {
            h
        } else {
            h ^ (((h >> self.swizzle) & 7) << 3)
        }
    }

    /// Where word `w` of the unswizzled layout is stored.
    #[inline(always)]
    pub fn word(self, w: u32) -> u32 {
        self.half(2 * w) / 2
    }
}

#[amdgpu_device]
impl From<u32> for TileLayout {
    /// Rows `pitch` words apart, as they are.
    #[inline(always)]
    fn from(pitch: u32) -> Self {
        TileLayout { pitch, swizzle: 0 }
    }
}

/// The fragment of the 16 x 16 tile at `(i0, k0)` (`i` the row of A or the
/// column of B) of an LDS array of halves where element `(i, k)` is half
/// `i * i_pitch + k * k_pitch`, gathered pair by pair through the unit's
/// layout ([`b_word`] for B, else [`a_word`]).
#[amdgpu_device]
#[inline(always)]
#[allow(unused_variables)]
fn gather<const B: bool>(
    tile: Lds<u32>,
    (i0, k0): (u32, u32),
    (i_pitch, k_pitch): (u32, u32),
    swizzle: TileLayout,
) -> FragA {
    let at = i0 * i_pitch + k0 * k_pitch;
    let mut w = [0u32; WORDS];
    if let Some(u) = MMA_UNIT {
        let lane = lane_id();
        let mut q = 0;
        while q < WORDS {
            let (i, k) = if B {
                b_word(u, lane, q as u32)
            } else {
                a_word(u, lane, q as u32)
            };
            let h = at + i * i_pitch + k * k_pitch;
            w[q] = if k_pitch == 1 {
                // K contiguous: the pair is one aligned word. Its index as
                // words (k0 and k are even, i_pitch is): the lane's part plus
                // constants, so the loads share one address register.
                tile.load(swizzle.word(i0 * (i_pitch / 2) + k0 / 2 + i * (i_pitch / 2) + k / 2))
            } else {
                half(tile, swizzle.half(h)) | half(tile, swizzle.half(h + k_pitch)) << 16
            };
            q += 1;
        }
    }
    FragA {
        w,
        tile,
        at,
        i_pitch,
        k_pitch,
        swizzle,
    }
}

/// Half `h` of an LDS array of words, zero-extended.
#[amdgpu_device]
#[inline(always)]
fn half(tile: Lds<u32>, h: u32) -> u32 {
    (tile.load(h / 2) >> (16 * (h % 2))) & 0xffff
}

/// A lane's part of a 16 x 16 B tile (K x columns), loaded by [`load_b`].
#[amdgpu_device]
#[derive(Clone, Copy)]
pub struct FragB(FragA);

/// A lane's part of a 16 x 16 f32 accumulator.
#[amdgpu_device]
#[derive(Clone, Copy)]
pub struct Acc {
    v: [f32; ACC],
}

#[amdgpu_device]
impl Acc {
    /// All zeros.
    #[inline(always)]
    pub fn zero() -> Self {
        Acc { v: [0.0; ACC] }
    }

    /// Elements this lane holds (a constant on the matrix units; 256 / wave
    /// size on the FMA body). Indices `0..len()` of [`Acc::at`] and
    /// [`Acc::value`] are valid; the most any build has is [`Acc::MAX_LEN`].
    #[inline(always)]
    pub fn len() -> u32 {
        match MMA_UNIT {
            Some(u) => acc_len(u) as u32,
            None => MMA_TILE * MMA_TILE / wave_size(),
        }
    }

    /// The most elements a lane holds in this build (a constant for loops).
    pub const MAX_LEN: usize = ACC;

    /// `(row, column)` in the tile of element `i`.
    #[inline(always)]
    pub fn at(i: u32) -> (u32, u32) {
        match MMA_UNIT {
            Some(u) => acc_at(u, lane_id(), i),
            None => {
                // One row per lane's elements (the row's lanes side by
                // side): a row fold is one or two exchanges in the emulator,
                // where each is a rendezvous of the wave.
                let len = Self::len();
                let per_row = MMA_TILE / len;
                (lane_id() / per_row, (lane_id() % per_row) * len + i)
            }
        }
    }

    /// Element `i`'s value.
    #[inline(always)]
    pub fn value(&self, i: usize) -> f32 {
        self.v[i]
    }

    /// Replaces each element this lane holds by `f(row, column, value)`
    /// (written out: the indices stay constants).
    #[inline(always)]
    pub fn map(&mut self, mut f: impl FnMut(u32, u32, f32) -> f32) {
        self.map_rows(|_, r, c, x| f(r, c, x));
    }

    /// [`Acc::map`] that also names the element's row slot (`0..`
    /// [`ROW_SLOTS`]), to index per-row values such as [`Acc::row_fold`]'s.
    #[inline(always)]
    pub fn map_rows(&mut self, mut f: impl FnMut(usize, u32, u32, f32) -> f32) {
        let len = Self::len();
        unroll4!(e1 < ACC.div_ceil(4) => {
            unroll4!(e0 < 4 => {
                let e = 4 * e1 + e0;
                if e < ACC && (e as u32) < len {
                    let (r, c) = Self::at(e as u32);
                    self.v[e] = f(Self::slot(e), r, c, self.v[e]);
                }
            });
        });
    }

    /// The row slot of element `i` ([`row_slot`] in this build).
    #[inline(always)]
    pub const fn slot(i: usize) -> usize {
        match MMA_UNIT {
            Some(u) => row_slot(u, i),
            None => 0,
        }
    }

    /// Per row this lane holds (by slot): `f` folded from `init` over the
    /// row's elements in every tile of `tiles` (tiles side by side: the
    /// same rows, more columns), then over the lanes that hold the row's
    /// other columns, so each of them gets the whole row's result. All
    /// lanes of the wave call it together. With a matrix unit the fold is
    /// a few butterflies of registers; no LDS.
    ///
    /// A kernel's row softmax over an accumulator: the max of each row is
    /// `Acc::row_fold(&s, f32::NEG_INFINITY, math::maximum)` (NaN shows;
    /// `f32::max` would drop it).
    #[inline(always)]
    pub fn row_fold<const N: usize>(
        tiles: &[Acc; N],
        init: f32,
        f: impl Fn(f32, f32) -> f32,
    ) -> [f32; ROW_SLOTS] {
        let mut rows = [init; ROW_SLOTS];
        let len = Self::len();
        unroll4!(t < N => {
            unroll4!(e1 < ACC.div_ceil(4) => {
                unroll4!(e0 < 4 => {
                    let e = 4 * e1 + e0;
                    if e < ACC && (e as u32) < len {
                        let s = Self::slot(e);
                        rows[s] = f(rows[s], tiles[t].v[e]);
                    }
                });
            });
        });
        let mut off = 1;
        while off < row_lanes_here() {
            unroll4!(s1 < ROW_SLOTS.div_ceil(4) => {
                unroll4!(s0 < 4 => {
                    let s = 4 * s1 + s0;
                    if s < ROW_SLOTS {
                        rows[s] = f(rows[s], wave_shfl_xor_f32(rows[s], off));
                    }
                });
            });
            off *= 2;
        }
        rows
    }
}

/// Loads this lane's fragment of the A tile whose `(0, 0)` is row `row0`,
/// K index `k0` (even) of an LDS array of rows `layout` (a pitch in words,
/// or a [`TileLayout`]), K contiguous. All lanes of the wave call it
/// together.
#[amdgpu_device]
#[inline(always)]
pub fn load_a(tile: Lds<u32>, layout: impl Into<TileLayout>, row0: u32, k0: u32) -> FragA {
    let l = layout.into();
    #[cfg(ferrocm_mma = "sync")]
    {
        // ldmatrix .x4: lanes 8q..8q+7 point at the rows of matrix q (rows
        // 8 * (q % 2).., K 8 * (q / 2)): a0..a3.
        let (lane, q) = (lane_id(), lane_id() / 8);
        let at = (row0 + 8 * (q % 2) + lane % 8) * l.pitch + (k0 + 8 * (q / 2)) / 2;
        let w = nv::ldmatrix_x4::<false>(tile.shared_address(l.word(at)));
        return frag(w, tile);
    }
    #[allow(unreachable_code)]
    gather::<false>(tile, (row0, k0), (2 * l.pitch, 1), l)
}

/// [`load_a`] from a tile stored transposed: rows of K, `layout` apart,
/// A's row index contiguous (element `(r, k)` is half `k * 2 * pitch +
/// r`); `row0` even.
#[amdgpu_device]
#[inline(always)]
pub fn load_a_t(tile: Lds<u32>, layout: impl Into<TileLayout>, row0: u32, k0: u32) -> FragA {
    let l = layout.into();
    #[cfg(ferrocm_mma = "sync")]
    {
        // ldmatrix .x4 .trans: lanes 8q..8q+7 point at the K rows of
        // matrix q, each 8 rows of A wide; transposed, each lane gets A's
        // layout.
        let (lane, q) = (lane_id(), lane_id() / 8);
        let at = (k0 + 8 * (q / 2) + lane % 8) * l.pitch + (row0 + 8 * (q % 2)) / 2;
        let w = nv::ldmatrix_x4::<true>(tile.shared_address(l.word(at)));
        return frag(w, tile);
    }
    #[allow(unreachable_code)]
    gather::<false>(tile, (row0, k0), (1, 2 * l.pitch), l)
}

/// Loads this lane's fragment of the B tile whose `(0, 0)` is column `col0`,
/// K index `k0` (even), columns stored `layout` apart with K contiguous
/// (B transposed in LDS). All lanes of the wave call it together.
#[amdgpu_device]
#[inline(always)]
pub fn load_b(tile: Lds<u32>, layout: impl Into<TileLayout>, col0: u32, k0: u32) -> FragB {
    let l = layout.into();
    #[cfg(ferrocm_mma = "sync")]
    {
        // ldmatrix .x4: lanes 8q..8q+7 point at the columns of matrix q
        // (columns 8 * (q / 2) .., K 8 * (q % 2)): b0, b1 of columns 0-7,
        // then of columns 8-15.
        let (lane, q) = (lane_id(), lane_id() / 8);
        let at = (col0 + 8 * (q / 2) + lane % 8) * l.pitch + (k0 + 8 * (q % 2)) / 2;
        let w = nv::ldmatrix_x4::<false>(tile.shared_address(l.word(at)));
        return FragB(frag(w, tile));
    }
    #[allow(unreachable_code)]
    FragB(gather::<true>(tile, (col0, k0), (2 * l.pitch, 1), l))
}

/// [`load_b`] from a tile stored as B is in a row-major matrix: rows of K,
/// `layout` apart, columns contiguous (element `(k, c)` is half `k * 2 *
/// pitch + c`); `col0` even.
#[amdgpu_device]
#[inline(always)]
pub fn load_b_t(tile: Lds<u32>, layout: impl Into<TileLayout>, col0: u32, k0: u32) -> FragB {
    let l = layout.into();
    #[cfg(ferrocm_mma = "sync")]
    {
        // ldmatrix .x4 .trans: lanes 8q..8q+7 point at the K rows of
        // matrix q, each 8 columns wide; transposed, each lane gets B's
        // layout.
        let (lane, q) = (lane_id(), lane_id() / 8);
        let at = (k0 + 8 * (q % 2) + lane % 8) * l.pitch + (col0 + 8 * (q / 2)) / 2;
        let w = nv::ldmatrix_x4::<true>(tile.shared_address(l.word(at)));
        return FragB(frag(w, tile));
    }
    #[allow(unreachable_code)]
    FragB(gather::<true>(tile, (col0, k0), (1, 2 * l.pitch), l))
}

/// The tiles of [`a_from_accs`] as A fragments ([`AccsAsA::frag`]).
#[amdgpu_device]
#[derive(Clone, Copy)]
pub struct AccsAsA<const N: usize> {
    /// The repacked registers (NVIDIA only).
    w: [[u32; WORDS]; N],
    scratch: Lds<u32>,
    pitch: u32,
}

/// The A fragments of the 16 x 16 tiles `accs` hold, each element rounded
/// to `T`: a product's result as the next product's left operand
/// (FlashAttention's probabilities times the values), tile `h` as K
/// `16 h..16 h + 16`. Where the accumulator's layout is A's (NVIDIA: the
/// two n8 halves are A's k halves) the fragments are the registers
/// repacked and `scratch` is not touched. Elsewhere the elements go to
/// `scratch` (this wave's own 16-row tile, `8 N` words of a row used, rows
/// `pitch` words apart), then a workgroup barrier, and [`AccsAsA::frag`]
/// loads them: every workitem of the workgroup calls this together, and
/// the kernel leaves `scratch` alone until its [`mma`]s have run.
#[amdgpu_device]
#[inline(always)]
#[allow(unused_mut, unused_variables)]
pub fn a_from_accs<T: MmaElem, const N: usize>(
    accs: &[Acc; N],
    scratch: Lds<u32>,
    pitch: u32,
) -> AccsAsA<N> {
    let mut w = [[0u32; WORDS]; N];
    #[cfg(ferrocm_mma = "sync")]
    unroll4!(h < N => {
        // A word q: (row g + 8 (q % 2), k 2t + 8 (q / 2)); the
        // accumulator's element 4 (q / 2) + 2 (q % 2) and the next hold
        // that pair.
        unroll4!(q < 4 => {
            let i = 4 * (q / 2) + 2 * (q % 2);
            w[h][q] = T::pack2(accs[h].v[i], accs[h].v[i + 1]);
        });
    });
    #[cfg(not(ferrocm_mma = "sync"))]
    {
        let halves = scratch.cast::<u16>();
        unroll4!(h < N => {
            let mut a = accs[h];
            a.map(|r, c, x| {
                halves.store(r * 2 * pitch + 16 * h as u32 + c, T::from_f32(x).to_bits64() as u16);
                x
            });
        });
        barrier();
    }
    AccsAsA { w, scratch, pitch }
}

#[amdgpu_device]
impl<const N: usize> AccsAsA<N> {
    /// Tile `h`'s fragment (K `16 h..`): the registers on NVIDIA, else
    /// loaded from the scratch tile now. All lanes of the wave call it
    /// together.
    #[inline(always)]
    pub fn frag(&self, h: usize) -> FragA {
        #[cfg(ferrocm_mma = "sync")]
        return frag(self.w[h], self.scratch);
        #[allow(unreachable_code)]
        load_a(self.scratch, self.pitch, 0, 16 * h as u32)
    }
}

/// A fragment loaded into registers (the FMA body's fields unused).
#[amdgpu_device]
#[inline(always)]
#[allow(dead_code)]
fn frag(w: [u32; WORDS], tile: Lds<u32>) -> FragA {
    FragA {
        w,
        tile,
        at: 0,
        i_pitch: 0,
        k_pitch: 0,
        swizzle: TileLayout::from(0),
    }
}

/// `acc += A · B` for the wave's 16 x 16 x 16 tiles, f32 accumulation
/// (`T` says how the fragments' halves are read). All lanes of the wave call
/// it together.
#[amdgpu_device]
#[inline(always)]
pub fn mma<T: MmaElem>(acc: &mut Acc, a: &FragA, b: &FragB) {
    #[cfg(ferrocm_mma = "sync")]
    nv::mma(acc, a, b, T::BF16);
    #[cfg(ferrocm_mma = "mfma")]
    amd::mfma(acc, a, b, T::BF16);
    #[cfg(any(ferrocm_mma = "wmma11", ferrocm_mma = "wmma12"))]
    amd::wmma(acc, a, b, T::BF16);
    #[cfg(not(ferrocm_mma))]
    fma_body(acc, a, b, T::BF16);
}

/// The two halves of a word of 16-bit floats as f32, low (lower K) first.
#[amdgpu_device]
#[inline(always)]
fn halves(word: u32, bf16: bool) -> (f32, f32) {
    if bf16 {
        (
            f32::from_bits(word << 16),
            f32::from_bits(word & 0xffff_0000),
        )
    } else {
        (F16(word as u16).to_f32(), F16((word >> 16) as u16).to_f32())
    }
}

/// The FMA body: each lane computes its accumulator elements (those of
/// [`Acc::at`]) as sums over K in order, reading both tiles from LDS.
#[amdgpu_device]
#[inline(always)]
#[allow(dead_code)]
fn fma_body(acc: &mut Acc, a: &FragA, b: &FragB, bf16: bool) {
    let b = &b.0;
    // The pair (k, k + 1) of row/column `i` of a fragment's tile.
    let pair = |f: &FragA, i: u32, k: u32| -> u32 {
        let h = f.at + i * f.i_pitch + k * f.k_pitch;
        if f.k_pitch == 1 {
            f.tile.load(f.swizzle.half(h) / 2)
        } else {
            half(f.tile, f.swizzle.half(h)) | half(f.tile, f.swizzle.half(h + f.k_pitch)) << 16
        }
    };
    let mut i = 0;
    while i < ACC {
        if (i as u32) < Acc::len() {
            let (r, c) = Acc::at(i as u32);
            let mut s = acc.v[i];
            let mut k = 0;
            while k < MMA_TILE {
                let (a0, a1) = halves(pair(a, r, k), bf16);
                let (b0, b1) = halves(pair(b, c, k), bf16);
                s = math::fma(a1, b1, math::fma(a0, b0, s));
                k += 2;
            }
            acc.v[i] = s;
        }
        i += 1;
        // Without a matrix unit, the compiler would hoist the LDS reads of
        // every element (and every tile of a kernel's unrolled tile loop)
        // ahead of the math, and spill.
        schedule_barrier();
    }
}

#[amdgpu_device]
#[cfg(ferrocm_mma = "sync")]
mod nv {
    use super::{Acc, FragA, FragB};

    /// One m16n8k16 product: `d += a · b` for columns `8 * half ..`.
    macro_rules! mma_m16n8k16 {
        ($ty:literal, $acc:expr, $a:expr, $b0:expr, $b1:expr, $h:literal) => {
            unsafe {
                core::arch::asm!(
                    concat!(
                        "mma.sync.aligned.m16n8k16.row.col.f32.", $ty, ".", $ty, ".f32 ",
                        "{{{0}, {1}, {2}, {3}}}, {{{4}, {5}, {6}, {7}}}, {{{8}, {9}}}, ",
                        "{{{0}, {1}, {2}, {3}}};"
                    ),
                    inout(reg32) $acc.v[4 * $h],
                    inout(reg32) $acc.v[4 * $h + 1],
                    inout(reg32) $acc.v[4 * $h + 2],
                    inout(reg32) $acc.v[4 * $h + 3],
                    in(reg32) $a.w[0],
                    in(reg32) $a.w[1],
                    in(reg32) $a.w[2],
                    in(reg32) $a.w[3],
                    in(reg32) $b0,
                    in(reg32) $b1,
                    options(pure, nomem, nostack),
                )
            }
        };
    }

    /// Four 8 x 8 matrices of 16-bit values from LDS (`ldmatrix`): each
    /// lane gives the shared-window address of one 16-byte row (lanes 8q..8q+7 the rows
    /// of matrix q) and gets, in word q, the pair at (lane / 4, 2 * (lane %
    /// 4)) of matrix q: mma.sync's fragment layout. sm_75+.
    /// `TRANS`: `ldmatrix ... .trans`, each 8 x 8 matrix transposed (lane
    /// gets the pair at (2 * (lane % 4), lane / 4) and the one below it).
    #[inline(always)]
    pub fn ldmatrix_x4<const TRANS: bool>(row: u32) -> [u32; 4] {
        let (w0, w1, w2, w3): (u32, u32, u32, u32);
        macro_rules! ldmatrix {
            ($trans:literal) => {
                unsafe {
                    core::arch::asm!(
                        concat!(
                            "ldmatrix.sync.aligned.m8n8.x4",
                            $trans,
                            ".shared.b16 {{{0}, {1}, {2}, {3}}}, [{p}];"
                        ),
                        out(reg32) w0,
                        out(reg32) w1,
                        out(reg32) w2,
                        out(reg32) w3,
                        p = in(reg32) row,
                        options(readonly, nostack),
                    )
                }
            };
        }
        if TRANS {
            ldmatrix!(".trans");
        } else {
            ldmatrix!("");
        }
        [w0, w1, w2, w3]
    }

    #[inline(always)]
    pub fn mma(acc: &mut Acc, a: &FragA, b: &FragB, bf16: bool) {
        let b = &b.0.w;
        if bf16 {
            mma_m16n8k16!("bf16", acc, a, b[0], b[1], 0);
            mma_m16n8k16!("bf16", acc, a, b[2], b[3], 1);
        } else {
            mma_m16n8k16!("f16", acc, a, b[0], b[1], 0);
            mma_m16n8k16!("f16", acc, a, b[2], b[3], 1);
        }
    }
}

#[amdgpu_device]
#[cfg(any(ferrocm_mma = "mfma", ferrocm_mma = "wmma11", ferrocm_mma = "wmma12"))]
mod amd {
    use super::{Acc, FragA, FragB};

    // Literal lengths: a SIMD type whose length is computed from the
    // build's unit has "an unknown layout" to rustc.
    #[cfg(ferrocm_mma = "mfma")]
    const WORDS: usize = 2;
    #[cfg(ferrocm_mma = "wmma11")]
    const WORDS: usize = 8;
    #[cfg(ferrocm_mma = "wmma12")]
    const WORDS: usize = 4;
    #[cfg(ferrocm_mma = "mfma")]
    const ACC: usize = 4;
    #[cfg(not(ferrocm_mma = "mfma"))]
    const ACC: usize = 8;
    #[cfg(ferrocm_mma = "mfma")]
    const HALVES: usize = 4;
    #[cfg(ferrocm_mma = "wmma11")]
    const HALVES: usize = 16;
    #[cfg(ferrocm_mma = "wmma12")]
    const HALVES: usize = 8;
    const _: () = assert!(WORDS == super::WORDS && ACC == super::ACC && HALVES == 2 * WORDS);

    // The intrinsics' vector operands, lengths written out: rustc gives a
    // SIMD type whose length is a named constant "an unknown layout".
    /// `2 * WORDS` f16 (the f16 intrinsics' operand type).
    #[cfg(ferrocm_mma = "mfma")]
    #[repr(simd)]
    #[derive(Clone, Copy)]
    pub struct F16s([f16; 4]);
    /// The same bits as i16 (the bf16 intrinsics' operand type).
    #[cfg(ferrocm_mma = "mfma")]
    #[repr(simd)]
    #[derive(Clone, Copy)]
    pub struct Bf16s([i16; 4]);
    /// The accumulator.
    #[cfg(ferrocm_mma = "mfma")]
    #[repr(simd)]
    #[derive(Clone, Copy)]
    pub struct Floats([f32; 4]);

    #[cfg(ferrocm_mma = "wmma11")]
    #[repr(simd)]
    #[derive(Clone, Copy)]
    pub struct F16s([f16; 16]);
    #[cfg(ferrocm_mma = "wmma11")]
    #[repr(simd)]
    #[derive(Clone, Copy)]
    pub struct Bf16s([i16; 16]);

    #[cfg(ferrocm_mma = "wmma12")]
    #[repr(simd)]
    #[derive(Clone, Copy)]
    pub struct F16s([f16; 8]);
    #[cfg(ferrocm_mma = "wmma12")]
    #[repr(simd)]
    #[derive(Clone, Copy)]
    pub struct Bf16s([i16; 8]);

    #[cfg(any(ferrocm_mma = "wmma11", ferrocm_mma = "wmma12"))]
    #[repr(simd)]
    #[derive(Clone, Copy)]
    pub struct Floats([f32; 8]);

    #[inline(always)]
    fn f16s(w: &[u32; WORDS]) -> F16s {
        let mut h = [f16::from_bits(0); HALVES];
        let mut i = 0;
        while i < WORDS {
            h[2 * i] = f16::from_bits(w[i] as u16);
            h[2 * i + 1] = f16::from_bits((w[i] >> 16) as u16);
            i += 1;
        }
        F16s(h)
    }

    #[inline(always)]
    fn bf16s(w: &[u32; WORDS]) -> Bf16s {
        let mut h = [0i16; HALVES];
        let mut i = 0;
        while i < WORDS {
            h[2 * i] = w[i] as u16 as i16;
            h[2 * i + 1] = (w[i] >> 16) as u16 as i16;
            i += 1;
        }
        Bf16s(h)
    }

    #[allow(improper_ctypes)]
    unsafe extern "llvm-intrinsic" {
        #[cfg(ferrocm_mma = "mfma")]
        #[link_name = "llvm.amdgcn.mfma.f32.16x16x16f16"]
        fn mfma_f16(a: F16s, b: F16s, c: Floats, cbsz: i32, abid: i32, blgp: i32) -> Floats;
        #[cfg(ferrocm_mma = "mfma")]
        #[link_name = "llvm.amdgcn.mfma.f32.16x16x16bf16.1k"]
        fn mfma_bf16(a: Bf16s, b: Bf16s, c: Floats, cbsz: i32, abid: i32, blgp: i32) -> Floats;
        #[cfg(ferrocm_mma = "wmma11")]
        #[link_name = "llvm.amdgcn.wmma.f32.16x16x16.f16.v8f32.v16f16"]
        fn wmma_f16(a: F16s, b: F16s, c: Floats) -> Floats;
        #[cfg(ferrocm_mma = "wmma11")]
        #[link_name = "llvm.amdgcn.wmma.f32.16x16x16.bf16.v8f32.v16i16"]
        fn wmma_bf16(a: Bf16s, b: Bf16s, c: Floats) -> Floats;
        #[cfg(ferrocm_mma = "wmma12")]
        #[link_name = "llvm.amdgcn.wmma.f32.16x16x16.f16.v8f32.v8f16"]
        fn wmma_f16(a: F16s, b: F16s, c: Floats) -> Floats;
        #[cfg(ferrocm_mma = "wmma12")]
        #[link_name = "llvm.amdgcn.wmma.f32.16x16x16.bf16.v8f32.v8i16"]
        fn wmma_bf16(a: Bf16s, b: Bf16s, c: Floats) -> Floats;
    }

    #[cfg(ferrocm_mma = "mfma")]
    #[inline(always)]
    pub fn mfma(acc: &mut Acc, a: &FragA, b: &FragB, bf16: bool) {
        let c = Floats(acc.v);
        // cbsz, abid, blgp 0: no broadcast between blocks or lanes.
        let d = unsafe {
            if bf16 {
                mfma_bf16(bf16s(&a.w), bf16s(&b.0.w), c, 0, 0, 0)
            } else {
                mfma_f16(f16s(&a.w), f16s(&b.0.w), c, 0, 0, 0)
            }
        };
        // SAFETY: the same f32s (a SIMD type may not be projected into).
        acc.v = unsafe { core::mem::transmute::<Floats, [f32; ACC]>(d) };
    }

    #[cfg(any(ferrocm_mma = "wmma11", ferrocm_mma = "wmma12"))]
    #[inline(always)]
    pub fn wmma(acc: &mut Acc, a: &FragA, b: &FragB, bf16: bool) {
        let c = Floats(acc.v);
        let d = unsafe {
            if bf16 {
                wmma_bf16(bf16s(&a.w), bf16s(&b.0.w), c)
            } else {
                wmma_f16(f16s(&a.w), f16s(&b.0.w), c)
            }
        };
        // SAFETY: the same f32s (a SIMD type may not be projected into).
        acc.v = unsafe { core::mem::transmute::<Floats, [f32; ACC]>(d) };
    }
}

// ---------------------------------------------------------------------------
// The warpgroup product (Hopper's `wgmma`).

/// A PTX line of sm_90a (the warpgroup product) behind the marker the CUDA
/// device looks for (`ferrocm_kernels::host::SM90A_ONLY`): uncommented
/// only when it loads the module for a GPU of compute capability 9.0
/// (`ferrocm_host::ptx::specialise_for_sm90a`), a comment elsewhere. The op
/// library launches kernels that use it only there
/// (`Device::warpgroup_mma`).
#[cfg(target_arch = "nvptx64")]
macro_rules! sm90a_only {
    ($ins:literal) => {
        concat!("// ferrocm-sm90a: ", $ins)
    };
}
#[cfg(target_arch = "nvptx64")]
use sm90a_only;

/// Workitems that issue one warpgroup product together: four consecutive
/// warps (on NVIDIA, starting at a warp index divisible by 4).
#[amdgpu_device]
pub const WG_THREADS: u32 = 128;
/// Rows of A (and of the accumulator) one warpgroup product covers.
#[amdgpu_device]
pub const WG_M: u32 = 64;
/// Columns of B (and of the accumulator) one warpgroup product covers.
#[amdgpu_device]
pub const WG_N: u32 = 128;
/// K of one warpgroup product.
#[amdgpu_device]
pub const WG_K: u32 = 16;
/// An operand tile of the warpgroup product in LDS: [`WG_TILE_I`] rows of
/// A (or columns of B) by [`WG_TILE_K`] of K, 16-bit values, laid out by
/// [`wg_tile_byte`].
#[amdgpu_device]
pub const WG_TILE_I: u32 = 128;
/// K of an operand tile ([`WG_TILE_I`]).
#[amdgpu_device]
pub const WG_TILE_K: u32 = 32;
/// Bytes of an operand tile.
#[amdgpu_device]
pub const WG_TILE_BYTES: u32 = WG_TILE_I * WG_TILE_K * 2;
/// The alignment an operand tile's LDS offset needs (the 128-byte
/// swizzle's period; the LDS arena of a kernel that calls [`wg_mma`] is
/// aligned to it in the shared window).
#[amdgpu_device]
pub const WG_TILE_ALIGN: u32 = 1024;

/// Byte of element `(i, k)` of an operand tile (`i` < [`WG_TILE_I`] the
/// row of A or column of B, `k` < [`WG_TILE_K`]), in the layouts the
/// warpgroup product reads from LDS ("canonical" layouts of PTX's matrix
/// descriptors), 16-byte pieces of 8 elements permuted so that 8
/// consecutive rows' pieces, or a row's pieces, meet no bank twice:
/// - `k_major` (K the operand's contiguous dim): rows of 32 elements (64
///   bytes), the 64-byte swizzle (piece `k / 8` XOR `(i / 2) % 4`);
/// - else (the other dim contiguous): blocks of 64 `i`, each 32 rows of K
///   of 128 bytes, the 128-byte swizzle (piece `(i % 64) / 8` XOR `k % 8`).
///
/// Either way the 64 rows from a multiple of 64 start `64 * i` bytes in.
///
/// ```
/// use ferrocm_kernels::mma::wg_tile_byte;
/// assert_eq!(wg_tile_byte(true, 2, 0), 2 * 64 + 16); // row 2: pieces XOR 1
/// assert_eq!(wg_tile_byte(false, 8, 1), 128 + 0); // k row 1: piece 1 XOR 1
/// assert_eq!(wg_tile_byte(false, 64, 0), 64 * 64);
/// ```
#[amdgpu_device]
#[inline(always)]
pub const fn wg_tile_byte(k_major: bool, i: u32, k: u32) -> u32 {
    if k_major {
        i * 64 + (((k / 8) ^ ((i / 2) % 4)) * 16) + (k % 8) * 2
    } else {
        (i / 64) * 4096 + k * 128 + ((((i % 64) / 8) ^ (k % 8)) * 16) + (i % 8) * 2
    }
}

/// A warpgroup's 64 x N f32 accumulator (`N = 2 E`: 128 by default, 64
/// for [`WgAcc64`]): workitem `t` of the warpgroup holds elements
/// [`wg_acc_at`]`(t, e)`, `e < E`.
#[amdgpu_device]
#[derive(Clone, Copy)]
pub struct WgAcc<const E: usize = 64> {
    /// The workitem's elements.
    pub v: [f32; E],
}

/// A warpgroup's 64 x 64 accumulator (`wgmma` m64n64k16).
#[amdgpu_device]
pub type WgAcc64 = WgAcc<32>;

#[amdgpu_device]
impl<const E: usize> WgAcc<E> {
    /// All zero.
    #[inline(always)]
    pub fn zero() -> Self {
        const { assert!(E == 32 || E == 64) };
        WgAcc { v: [0.0; E] }
    }
}

/// `(row, column)` of accumulator element `e` of workitem `t` (its index
/// in the warpgroup): the m16n8 layout of each warp's 16 rows, repeated
/// over the 16 groups of 8 columns.
///
/// ```
/// use ferrocm_kernels::mma::wg_acc_at;
/// assert_eq!(wg_acc_at(0, 0), (0, 0));
/// assert_eq!(wg_acc_at(37, 7), (16 + 1 + 8, 8 + 2 + 1));
/// ```
#[amdgpu_device]
#[inline(always)]
pub const fn wg_acc_at(t: u32, e: u32) -> (u32, u32) {
    let (warp, lane) = ((t % WG_THREADS) / 32, t % 32);
    (
        warp * 16 + lane / 4 + 8 * ((e / 2) % 2),
        (e / 4) * 8 + (lane % 4) * 2 + e % 2,
    )
}

/// `acc += A[a_i0 .. a_i0 + 64, k0 .. k0 + 16] · B[k0 .. k0 + 16, 0 .. N]`
/// (`N = 2 E`: 128, or 64 for a [`WgAcc64`], B's first 64 rows of the tile)
/// for the calling warpgroup (all [`WG_THREADS`] workitems call it
/// together), f32 accumulation: A is the operand tile at LDS byte `a_tile`
/// (K-major when `A_K`), B the one at `b_tile` (K-major when `B_K`);
/// `a_i0` a multiple of 64, `k0` 0 or 16.
///
/// On NVIDIA (sm_90a) one `wgmma.mma_async` that reads both tiles from LDS
/// while the warps go on: call [`wg_begin`] before a batch of these,
/// [`wg_commit`] after, and [`wg_wait`] before touching the tiles or the
/// accumulator again; the tiles' copies must be made visible to it with
/// [`wg_lds_fence`] and a barrier. Elsewhere (the emulator, AMD) each
/// workitem computes its own elements from the tiles now, in order of K.
#[amdgpu_device]
#[inline(always)]
pub fn wg_mma<T: MmaElem, const A_K: bool, const B_K: bool, const E: usize>(
    acc: &mut WgAcc<E>,
    a_tile: u32,
    a_i0: u32,
    b_tile: u32,
    k0: u32,
) {
    #[cfg(target_arch = "nvptx64")]
    {
        // The tiles' starts: both layouts put rows i0.. (a multiple of 64)
        // at 64 * i0 and K step k0 (0 or 16) where no swizzle moves it.
        let a = wg_desc::<A_K>(a_tile + wg_tile_byte(A_K, a_i0, k0));
        let b = wg_desc::<B_K>(b_tile + wg_tile_byte(B_K, 0, k0));
        if E == 64 {
            // SAFETY: the same array (E is 64).
            let v = unsafe { &mut *(acc.v.as_mut_ptr() as *mut [f32; 64]) };
            nv_wg::mma(v, a, b, T::BF16, !A_K, !B_K);
        } else {
            // SAFETY: the same array (E is 32, `WgAcc::zero`'s check).
            let v = unsafe { &mut *(acc.v.as_mut_ptr() as *mut [f32; 32]) };
            nv_wg::mma64(v, a, b, T::BF16, !A_K, !B_K);
        }
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let t = workitem_id_x() % WG_THREADS;
        let at = |tile: u32, k_major: bool, i: u32, k: u32| -> f32 {
            let h = lds_at::<u16>(tile).load(wg_tile_byte(k_major, i, k) / 2) as u32;
            if T::BF16 {
                f32::from_bits(h << 16)
            } else {
                F16(h as u16).to_f32()
            }
        };
        let (r0, c0) = wg_acc_at(t, 0);
        let mut kk = 0;
        while kk < WG_K {
            let k = k0 + kk;
            let a0 = at(a_tile, A_K, a_i0 + r0, k);
            let a1 = at(a_tile, A_K, a_i0 + r0 + 8, k);
            crate::unroll16!(j => {
                if 4 * j < E {
                    unroll4!(e < 2 => {
                        let b = at(b_tile, B_K, c0 + 8 * j as u32 + e as u32, k);
                        acc.v[4 * j + e] = math::fma(a0, b, acc.v[4 * j + e]);
                        acc.v[4 * j + 2 + e] = math::fma(a1, b, acc.v[4 * j + 2 + e]);
                    });
                }
            });
            kk += 1;
            schedule_barrier();
        }
    }
}

/// A's 16 x 16 fragment of one warp for [`wg_mma_ra`], four words of two
/// 16-bit values: word `w` holds row `lane / 4 + 8 (w % 2)`, columns
/// `8 (w / 2) + 2 (lane % 4)` and the next, of the warp's 16 rows (the
/// `mma.sync` m16n8k16 A layout, which a [`WgAcc`]'s columns `16 k0 ..
/// 16 k0 + 16` take as they are: elements `8 k0 + 2 w` and `8 k0 + 2 w + 1`).
#[amdgpu_device]
pub type WgFragA = [u32; 4];

/// `acc += A · B[k0 .. k0 + 16, 0 .. N]` as [`wg_mma`], with A's 64 x 16
/// values in registers: each warp's 16 rows in its workitems' [`WgFragA`]
/// (the scores of a product turned into the next one's left operand
/// without LDS, as attention's probabilities). Elsewhere than NVIDIA each
/// workitem gathers its rows' 16 values from the four workitems of its
/// quad (wave shuffles) and computes its elements.
#[amdgpu_device]
#[inline(always)]
pub fn wg_mma_ra<T: MmaElem, const B_K: bool, const E: usize>(
    acc: &mut WgAcc<E>,
    a: &WgFragA,
    b_tile: u32,
    k0: u32,
) {
    #[cfg(target_arch = "nvptx64")]
    {
        let b = wg_desc::<B_K>(b_tile + wg_tile_byte(B_K, 0, k0));
        if E == 64 {
            // SAFETY: the same array (E is 64).
            let v = unsafe { &mut *(acc.v.as_mut_ptr() as *mut [f32; 64]) };
            nv_wg::mma_ra(v, a, b, T::BF16, !B_K);
        } else {
            // SAFETY: the same array (E is 32, `WgAcc::zero`'s check).
            let v = unsafe { &mut *(acc.v.as_mut_ptr() as *mut [f32; 32]) };
            nv_wg::mma64_ra(v, a, b, T::BF16, !B_K);
        }
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let t = workitem_id_x() % WG_THREADS;
        let value = |h: u32| -> f32 {
            if T::BF16 {
                f32::from_bits(h << 16)
            } else {
                F16(h as u16).to_f32()
            }
        };
        // Row r0's and r0 + 8's 16 values from the quad: workitem q of it
        // holds columns 2q, 2q + 1 (words 0, 1) and 8 + 2q, 9 + 2q (2, 3).
        let (mut r_lo, mut r_hi) = ([0.0f32; 16], [0.0f32; 16]);
        let q_self = lane_id() % 4;
        unroll4!(x < 4 => {
            let w = [0, 1, 2, 3].map(|i| crate::device::wave_shfl_xor(a[i], x as u32));
            let q = (q_self ^ x as u32) as usize;
            unroll4!(i < 4 => {
                let col = 8 * (i / 2) + 2 * q;
                let row = if i.is_multiple_of(2) { &mut r_lo } else { &mut r_hi };
                row[col] = value(w[i] & 0xffff);
                row[col + 1] = value(w[i] >> 16);
            });
        });
        let (_, c0) = wg_acc_at(t, 0);
        let mut kk = 0;
        while kk < WG_K {
            let k = k0 + kk;
            let b_at = |i: u32| -> f32 {
                let h = lds_at::<u16>(b_tile).load(wg_tile_byte(B_K, i, k) / 2) as u32;
                value(h)
            };
            let (a0, a1) = (r_lo[kk as usize], r_hi[kk as usize]);
            crate::unroll16!(j => {
                if 4 * j < E {
                    unroll4!(e < 2 => {
                        let b = b_at(c0 + 8 * j as u32 + e as u32);
                        acc.v[4 * j + e] = math::fma(a0, b, acc.v[4 * j + e]);
                        acc.v[4 * j + 2 + e] = math::fma(a1, b, acc.v[4 * j + 2 + e]);
                    });
                }
            });
            kk += 1;
            schedule_barrier();
        }
    }
}

/// The matrix descriptor of an operand tile's product window starting at
/// LDS byte `start` ([`wg_tile_byte`]'s layouts): K-major tiles the 64-byte
/// swizzle with 8-row groups 512 bytes apart; MN-major ones the 128-byte
/// swizzle, 64-wide blocks 4096 bytes apart and 8-row groups of K 1024.
#[cfg(target_arch = "nvptx64")]
#[amdgpu_device]
#[inline(always)]
fn wg_desc<const K_MAJOR: bool>(start: u32) -> u64 {
    // The arena as a 1024-aligned type: its PTX declaration then asks the
    // shared window for that alignment (every dynamic shared array starts
    // at the same place).
    let arena = core::intrinsics::gpu::gpu_launch_sized_workgroup_mem::<LdsAligned>();
    let window: u32;
    // SAFETY: an address conversion, no memory access.
    unsafe {
        core::arch::asm!(
            "{{ .reg .u64 s; cvta.to.shared.u64 s, {p}; cvt.u32.u64 {w}, s; }}",
            p = in(reg64) arena,
            w = out(reg32) window,
            options(pure, nomem, nostack),
        )
    };
    let addr = window + start;
    let (lbo, sbo, swizzle): (u64, u64, u64) = if K_MAJOR {
        (16, 512, 2)
    } else {
        (4096, 1024, 1)
    };
    ((addr as u64 >> 4) & 0x3fff) | ((lbo >> 4) << 16) | ((sbo >> 4) << 32) | (swizzle << 62)
}

/// Starts a batch of warpgroup products: orders the accumulator registers'
/// earlier writes before them (`wgmma.fence`). A no-op off NVIDIA.
#[amdgpu_device]
#[inline(always)]
pub fn wg_begin() {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: no operands; a memory clobber.
    unsafe {
        core::arch::asm!(sm90a_only!("wgmma.fence.sync.aligned;"), options(nostack))
    };
}

/// Closes the batch of warpgroup products issued since the last one
/// (`wgmma.commit_group`). A no-op off NVIDIA.
#[amdgpu_device]
#[inline(always)]
pub fn wg_commit() {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: no operands; a memory clobber.
    unsafe {
        core::arch::asm!(
            sm90a_only!("wgmma.commit_group.sync.aligned;"),
            options(nostack)
        )
    };
}

/// Waits until at most `PENDING` of the warpgroup's closed batches still
/// run (`wgmma.wait_group`); with 0, `acc`'s registers are final (each is
/// passed through an empty instruction after the wait, so no read of them
/// moves above it). A no-op off NVIDIA.
#[amdgpu_device]
#[inline(always)]
#[allow(unused_variables)]
pub fn wg_wait<const PENDING: u32, const E: usize>(acc: &mut WgAcc<E>) {
    #[cfg(target_arch = "nvptx64")]
    {
        // SAFETY: no operands; a memory clobber.
        unsafe {
            core::arch::asm!(
                sm90a_only!("wgmma.wait_group.sync.aligned {n};"),
                n = const PENDING,
                options(nostack)
            )
        };
        if PENDING == 0 {
            crate::unroll64!(e => {
                if e < E {
                    // SAFETY: a comment that names the register.
                    unsafe { core::arch::asm!("// wg_wait {0}", inout(reg32) acc.v[e], options(nostack)) };
                }
            });
        }
    }
}

/// Makes this workitem's earlier writes and copies into LDS visible to
/// the warpgroup product's reads (`fence.proxy.async`); a barrier after it
/// makes everyone's. A no-op off NVIDIA.
#[amdgpu_device]
#[inline(always)]
pub fn wg_lds_fence() {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: no operands; a memory clobber.
    unsafe {
        core::arch::asm!(
            sm90a_only!("fence.proxy.async.shared::cta;"),
            options(nostack)
        )
    };
}

/// A type of [`WG_TILE_ALIGN`] bytes' alignment: the LDS arena seen as it
/// declares the shared memory `.align 1024`, which places the arena there.
#[cfg(target_arch = "nvptx64")]
#[amdgpu_device]
#[derive(Clone, Copy)]
#[repr(C, align(1024))]
struct LdsAligned([u8; 1024]);

#[amdgpu_device]
#[cfg(target_arch = "nvptx64")]
mod nv_wg {
    /// Hands `[0, 1, .., N - 1]`, an accumulator of N registers' indices, to
    /// `$m` ahead of its arguments: an `asm!` operand list is written out.
    macro_rules! acc_regs {
        (64 => $m:ident!($($args:tt)*)) => {
            $m!([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63] $($args)*)
        };
        (32 => $m:ident!($($args:tt)*)) => {
            $m!([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31] $($args)*)
        };
    }

    /// One `wgmma.mma_async` of shape `$shape` (f32 += `$ty` x `$ty`): the
    /// accumulator's registers `$acc[i]` for each index listed, A as the
    /// operand text `$a_text` with its operands `$a_ops`, B's descriptor,
    /// then the scale and transpose flags `$flags`.
    macro_rules! wgmma {
        (
            [$i0:literal $(, $i:literal)*] $acc:expr, $shape:literal, $ty:literal,
            $a_text:literal [$($a_ops:tt)*], $b:expr, $flags:literal
        ) => {
            // SAFETY: reads the tiles the descriptors name in LDS (a
            // `wg_wait` orders it before their next writes).
            unsafe {
                core::arch::asm!(
                    concat!(
                        "// ferrocm-sm90a: {{ .reg .pred p; setp.ne.b32 p, {s}, 0; ",
                        "wgmma.mma_async.sync.aligned.", $shape, ".f32.", $ty, ".", $ty,
                        " {{{", $i0, "}", $(", {", $i, "}",)* "}}, ", $a_text,
                        ", {b}, p, 1, 1, ", $flags, "; }}"
                    ),
                    inout(reg32) $acc[$i0],
                    $(inout(reg32) $acc[$i],)*
                    $($a_ops)*
                    b = in(reg64) $b,
                    s = in(reg32) 1u32,
                    options(nostack),
                )
            }
        };
    }

    /// [`wgmma`] with A from LDS (its descriptor `$a`), N registers.
    macro_rules! wgmma_lds {
        ($n:tt, $acc:expr, $shape:literal, $ty:literal, $a:expr, $b:expr, $flags:literal) => {
            acc_regs!($n => wgmma!($acc, $shape, $ty, "{a}" [a = in(reg64) $a,], $b, $flags))
        };
    }

    /// [`wgmma`] with A from four registers, N registers.
    macro_rules! wgmma_regs {
        ($n:tt, $acc:expr, $shape:literal, $ty:literal, $a:expr, $b:expr, $flags:literal) => {
            acc_regs!($n => wgmma!(
                $acc, $shape, $ty, "{{{a0}, {a1}, {a2}, {a3}}}"
                [a0 = in(reg32) $a[0], a1 = in(reg32) $a[1], a2 = in(reg32) $a[2], a3 = in(reg32) $a[3],],
                $b, $flags
            ))
        };
    }

    /// One `wgmma` m64n128k16 with f32 accumulation; `ta`/`tb`: the
    /// operand's tile is MN-major (the instruction's transpose flags).
    #[inline(always)]
    pub fn mma(acc: &mut [f32; 64], a: u64, b: u64, bf16: bool, ta: bool, tb: bool) {
        macro_rules! pick {
            ($ty:literal) => {
                match (ta, tb) {
                    (false, false) => wgmma_lds!(64, acc, "m64n128k16", $ty, a, b, "0, 0"),
                    (false, true) => wgmma_lds!(64, acc, "m64n128k16", $ty, a, b, "0, 1"),
                    (true, false) => wgmma_lds!(64, acc, "m64n128k16", $ty, a, b, "1, 0"),
                    (true, true) => wgmma_lds!(64, acc, "m64n128k16", $ty, a, b, "1, 1"),
                }
            };
        }
        if bf16 {
            pick!("bf16");
        } else {
            pick!("f16");
        }
    }

    /// One `wgmma` m64n64k16 (a [`super::WgAcc64`]'s elements), as [`mma`].
    #[inline(always)]
    pub fn mma64(acc: &mut [f32; 32], a: u64, b: u64, bf16: bool, ta: bool, tb: bool) {
        macro_rules! pick {
            ($ty:literal) => {
                match (ta, tb) {
                    (false, false) => wgmma_lds!(32, acc, "m64n64k16", $ty, a, b, "0, 0"),
                    (false, true) => wgmma_lds!(32, acc, "m64n64k16", $ty, a, b, "0, 1"),
                    (true, false) => wgmma_lds!(32, acc, "m64n64k16", $ty, a, b, "1, 0"),
                    (true, true) => wgmma_lds!(32, acc, "m64n64k16", $ty, a, b, "1, 1"),
                }
            };
        }
        if bf16 {
            pick!("bf16");
        } else {
            pick!("f16");
        }
    }

    /// One `wgmma` m64n128k16 with A from registers, as [`mma`].
    #[inline(always)]
    pub fn mma_ra(acc: &mut [f32; 64], a: &[u32; 4], b: u64, bf16: bool, tb: bool) {
        match (bf16, tb) {
            (true, false) => wgmma_regs!(64, acc, "m64n128k16", "bf16", a, b, "0"),
            (true, true) => wgmma_regs!(64, acc, "m64n128k16", "bf16", a, b, "1"),
            (false, false) => wgmma_regs!(64, acc, "m64n128k16", "f16", a, b, "0"),
            (false, true) => wgmma_regs!(64, acc, "m64n128k16", "f16", a, b, "1"),
        }
    }

    /// One `wgmma` m64n64k16 with A from registers, as [`mma`].
    #[inline(always)]
    pub fn mma64_ra(acc: &mut [f32; 32], a: &[u32; 4], b: u64, bf16: bool, tb: bool) {
        match (bf16, tb) {
            (true, false) => wgmma_regs!(32, acc, "m64n64k16", "bf16", a, b, "0"),
            (true, true) => wgmma_regs!(32, acc, "m64n64k16", "bf16", a, b, "1"),
            (false, false) => wgmma_regs!(32, acc, "m64n64k16", "f16", a, b, "0"),
            (false, true) => wgmma_regs!(32, acc, "m64n64k16", "f16", a, b, "1"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UNITS: [(MmaUnit, u32); 4] = [
        (MmaUnit::Sync, 32),
        (MmaUnit::Mfma, 64),
        (MmaUnit::Wmma11, 32),
        (MmaUnit::Wmma12, 32),
    ];

    /// Every element of a 16 x 16 operand tile is in some lane's fragment
    /// (each pair once per 16 lanes' copy: RDNA3 holds the tile twice), and
    /// every accumulator element in exactly one lane.
    #[test]
    fn every_layout_covers_each_element_once() {
        for (unit, wave) in UNITS {
            let copies = (fragment_words(unit) as u32 * wave * 2) / 256;
            for word in [a_word, b_word] {
                let mut seen = [[0u32; 16]; 16];
                for lane in 0..wave {
                    for w in 0..fragment_words(unit) as u32 {
                        let (i, k) = word(unit, lane, w);
                        assert_eq!(k % 2, 0, "{unit:?}: pairs start at even K");
                        seen[i as usize][k as usize] += 1;
                        seen[i as usize][k as usize + 1] += 1;
                    }
                }
                assert!(
                    seen.iter().flatten().all(|&n| n == copies),
                    "{unit:?}: {seen:?}"
                );
            }
            let mut seen = [[0u32; 16]; 16];
            for lane in 0..wave {
                for i in 0..acc_len(unit) as u32 {
                    let (r, c) = acc_at(unit, lane, i);
                    seen[r as usize][c as usize] += 1;
                }
            }
            assert!(seen.iter().flatten().all(|&n| n == 1), "{unit:?}: {seen:?}");
        }
    }

    /// The swizzled tile layouts: a permutation of each 128-byte line's
    /// 16-byte pieces; any 8 consecutive rows' pieces at one column (what
    /// `ldmatrix` reads, from a multiple of 8 rows) in 8 different
    /// 16-byte bank groups; 1 KiB on, the same permutation.
    #[test]
    fn swizzled_tiles_spread_rows_over_the_banks() {
        for pieces in [4u32, 8, 16, 32] {
            let l = TileLayout::swizzled(pieces);
            assert_eq!(l.pitch, 4 * pieces);
            let rows = 64;
            let piece_of = |row: u32, col: u32| l.half(row * 8 * pieces + 8 * col) / 8;
            for row in 0..rows {
                for col in 0..pieces {
                    let (at, home) = (piece_of(row, col), row * pieces + col);
                    assert_eq!(
                        at / 8,
                        home / 8,
                        "{pieces} pieces: ({row}, {col}) left its line"
                    );
                    assert_eq!(
                        l.half(8 * home + 3),
                        8 * at + 3,
                        "halves move with their piece"
                    );
                    let period = l.period();
                    assert_eq!(piece_of(row + period / pieces, col), at + period, "period");
                }
            }
            for row0 in (0..rows).step_by(8) {
                for col in 0..pieces {
                    let mut banks: Vec<u32> =
                        (row0..row0 + 8).map(|r| piece_of(r, col) % 8).collect();
                    banks.sort();
                    assert_eq!(
                        banks,
                        (0..8).collect::<Vec<_>>(),
                        "{pieces} pieces, rows {row0}.., col {col}"
                    );
                }
            }
        }
        assert_eq!(
            (
                TileLayout::swizzled(4).period(),
                TileLayout::swizzled(16).period()
            ),
            (64, 128)
        );
        let plain = TileLayout::from(20);
        assert_eq!(
            (plain.pitch, plain.half(77), plain.word(9), plain.period()),
            (20, 77, 9, 0)
        );
    }

    /// The row folds' layout facts: a lane's elements of one row share a
    /// slot (and distinct slots are distinct rows), and the lanes that
    /// differ in the bits below `row_lanes` hold the same rows in the same
    /// slots and, together, every column of them.
    #[test]
    fn row_slots_and_row_lanes_cover_each_row() {
        for (unit, wave) in UNITS {
            let row_of = |lane: u32, slot: usize| -> Vec<u32> {
                let mut rows: Vec<u32> = (0..acc_len(unit))
                    .filter(|&i| row_slot(unit, i) == slot)
                    .map(|i| acc_at(unit, lane, i as u32).0)
                    .collect();
                rows.dedup();
                rows
            };
            for lane in 0..wave {
                let group = lane & !(row_lanes(unit) - 1);
                for slot in 0..row_slots(unit) {
                    let rows = row_of(lane, slot);
                    assert_eq!(rows.len(), 1, "{unit:?} lane {lane} slot {slot}");
                    let mut cols = vec![];
                    for other in group..group + row_lanes(unit) {
                        assert_eq!(row_of(other, slot), rows, "{unit:?} lanes {lane} {other}");
                        for i in 0..acc_len(unit) {
                            if row_slot(unit, i) == slot {
                                cols.push(acc_at(unit, other, i as u32).1);
                            }
                        }
                    }
                    cols.sort();
                    assert_eq!(cols, (0..16).collect::<Vec<_>>(), "{unit:?} lane {lane}");
                }
            }
        }
    }

    /// `a_from_accs`'s register repacking on NVIDIA: A's word `w` is the
    /// pair of accumulator elements `4 (w / 2) + 2 (w % 2)` and the next.
    #[test]
    fn sync_accumulator_pairs_are_a_words() {
        for lane in 0..32 {
            for w in 0..4u32 {
                let i = 4 * (w / 2) + 2 * (w % 2);
                let (r, k) = a_word(MmaUnit::Sync, lane, w);
                assert_eq!(acc_at(MmaUnit::Sync, lane, i), (r, k));
                assert_eq!(acc_at(MmaUnit::Sync, lane, i + 1), (r, k + 1));
            }
        }
    }

    /// A 16 x 16 x 16 product computed the way each instruction is
    /// specified (every lane's registers gathered into the tiles by the
    /// layout functions, the product written back by the accumulator
    /// layout) equals the plain product: the layouts agree with each other.
    #[test]
    fn each_layout_computes_the_product() {
        let a: Vec<f32> = (0..256).map(|i| ((i * 7 % 13) as f32) - 6.0).collect();
        let b: Vec<f32> = (0..256).map(|i| ((i * 5 % 11) as f32) - 5.0).collect();
        let want = |r: usize, c: usize| (0..16).map(|k| a[r * 16 + k] * b[k * 16 + c]).sum::<f32>();
        for (unit, wave) in UNITS {
            // The registers each lane would load.
            let frag = |lane: u32, w: u32, is_a: bool| -> (f32, f32) {
                if is_a {
                    let (r, k) = a_word(unit, lane, w);
                    (a[(r * 16 + k) as usize], a[(r * 16 + k + 1) as usize])
                } else {
                    let (c, k) = b_word(unit, lane, w);
                    (b[(k * 16 + c) as usize], b[((k + 1) * 16 + c) as usize])
                }
            };
            // The instruction: gather A and B from the registers.
            let (mut ga, mut gb) = ([[f32::NAN; 16]; 16], [[f32::NAN; 16]; 16]);
            for lane in 0..wave {
                for w in 0..fragment_words(unit) as u32 {
                    let (r, k) = a_word(unit, lane, w);
                    let (x, y) = frag(lane, w, true);
                    (ga[r as usize][k as usize], ga[r as usize][k as usize + 1]) = (x, y);
                    let (c, k) = b_word(unit, lane, w);
                    let (x, y) = frag(lane, w, false);
                    (gb[k as usize][c as usize], gb[k as usize + 1][c as usize]) = (x, y);
                }
            }
            for lane in 0..wave {
                for i in 0..acc_len(unit) as u32 {
                    let (r, c) = acc_at(unit, lane, i);
                    let got: f32 = (0..16).map(|k| ga[r as usize][k] * gb[k][c as usize]).sum();
                    assert_eq!(
                        got,
                        want(r as usize, c as usize),
                        "{unit:?} lane {lane} elem {i}"
                    );
                }
            }
        }
    }

    /// The warpgroup operand tiles: every element of a 128 x 32 tile at
    /// its own 2-byte slot inside 8 KB; each 16-byte piece holds 8
    /// consecutive elements along the operand's contiguous dim (what one
    /// 16-byte copy writes); the 8 pieces of 8 consecutive rows at one
    /// column, and the pieces of 128 consecutive bytes, fall in 8 distinct
    /// 16-byte bank groups (no conflicts for the copies or the reads); and
    /// rows from a multiple of 64 start 64 bytes a row in.
    #[test]
    fn warpgroup_tiles_are_bijective_and_conflict_free() {
        for k_major in [true, false] {
            let mut seen = vec![false; (WG_TILE_BYTES / 2) as usize];
            for i in 0..WG_TILE_I {
                for k in 0..WG_TILE_K {
                    let b = wg_tile_byte(k_major, i, k);
                    assert!(b < WG_TILE_BYTES && b.is_multiple_of(2));
                    assert!(!std::mem::replace(&mut seen[(b / 2) as usize], true));
                    // The piece's first element and this one's place in it.
                    let (i0, k0, j) = if k_major {
                        (i, k - k % 8, k % 8)
                    } else {
                        (i - i % 8, k, i % 8)
                    };
                    assert_eq!(b, wg_tile_byte(k_major, i0, k0) + 2 * j);
                }
            }
            for i in (0..WG_TILE_I).step_by(64) {
                assert_eq!(wg_tile_byte(k_major, i, 0), 64 * i);
            }
            // 8 consecutive rows (the non-contiguous dim) at one piece
            // column: distinct bank groups.
            let rows = if k_major { WG_TILE_I } else { WG_TILE_K };
            let pieces = if k_major {
                WG_TILE_K / 8
            } else {
                WG_TILE_I / 8
            };
            for r0 in (0..rows).step_by(8) {
                for p in 0..pieces {
                    let mut groups: Vec<u32> = (r0..r0 + 8)
                        .map(|r| {
                            let b = if k_major {
                                wg_tile_byte(true, r, 8 * p)
                            } else {
                                wg_tile_byte(false, 8 * p, r)
                            };
                            (b / 16) % 8
                        })
                        .collect();
                    groups.sort();
                    groups.dedup();
                    assert_eq!(groups.len(), 8, "k_major {k_major} rows {r0}.. piece {p}");
                }
            }
        }
    }

    /// Each of a warpgroup accumulator's 64 x 128 elements is held by
    /// exactly one (workitem, element).
    #[test]
    fn warpgroup_accumulator_covers_each_element_once() {
        let mut seen = vec![0u32; (WG_M * WG_N) as usize];
        for t in 0..WG_THREADS {
            for e in 0..64 {
                let (r, c) = wg_acc_at(t, e);
                assert!(r < WG_M && c < WG_N);
                seen[(r * WG_N + c) as usize] += 1;
            }
        }
        assert!(seen.iter().all(|&n| n == 1));
    }
}
