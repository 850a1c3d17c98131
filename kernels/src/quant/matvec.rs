//! `qmatvec{C}_{format}_{dtype}` (C = 1, 2, 4, 8): `y = x · Wᵀ` for a
//! quantized weight `W` `[n, k]` (rows = output features, as GGUF stores
//! them) and a few rows of activations `x` `[m, k]` (decode: m = 1 to 8),
//! `y` `[m, n]`.
//!
//! As llama.cpp's mmvq does, `x` is first rounded to 8 bits
//! (`quantize_x_{dtype}`: per group of 16, the scale `amax / 127`, the codes
//! and the group's sum), so the product is integer dot products of 8-bit
//! codes ([`dot4_i8`]: one instruction per four codes where the GPU has
//! one) scaled once per group. `L` workitems per weight row (the format's
//! [`QuantBlock::MATVEC_LANES`] for the pass, or [`QMATVEC_ROW_LANES`]
//! where the host's `lanes` asks for them): each takes units
//! of 32 weights ([`QuantBlock::unit8`], neighbouring workitems
//! neighbouring bytes), decodes a unit once and multiplies it into `C` rows
//! of `x`; the sums are reduced across waves and then in LDS. Each weight
//! byte is read once; rows of `x` past `m` repeat the last (not stored).

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

/// A group of 16 values of `x` in 8-bit form: the codes `round(v / d)` with
/// `d = amax / 127` (four per word, little-endian) and `meta = d | (d *
/// sum(codes)) << 32` (f32 bits). A group holding NaN or ±inf gets `d` =
/// NaN, so the outputs it feeds are NaN rather than a silently finite sum.
/// The one definition: the kernels and the Cpu path both call it.
///
/// ```
/// use ferrocm_kernels::quant::matvec::quantize_x_group;
/// let mut v = [0.0f32; 16];
/// v[0] = 1.0;
/// v[1] = -0.25;
/// let (codes, meta) = quantize_x_group(v);
/// assert_eq!(codes[0] & 0xFFFF, 127 | (0xE0 << 8)); // 127 and round(-31.75) = -32
/// assert_eq!(f32::from_bits(meta as u32), 1.0 / 127.0);
/// ```
#[amdgpu_device]
#[inline(always)]
pub fn quantize_x_group(v: [f32; 16]) -> ([u32; 4], u64) {
    let mut amax = 0.0f32;
    let mut finite = true;
    crate::unroll16!(l => {
        (amax, finite) = x_amax(amax, finite, v[l]);
    });
    let (d, inv) = x_scale(amax);
    let mut words = [0u32; 4];
    let mut sum = 0i32;
    crate::unroll16!(l => {
        let q = x_code(v[l], inv);
        sum += q;
        words[l / 4] |= ((q as u8) as u32) << (8 * (l % 4));
    });
    (words, x_meta(d, finite, sum))
}

/// The running `(amax, finite)` of a group of `x` after value `v`: NaN
/// never raises `amax` but clears `finite`, as ±inf does.
#[amdgpu_device]
#[inline(always)]
fn x_amax(amax: f32, finite: bool, v: f32) -> (f32, bool) {
    let a = f32::from_bits(v.to_bits() & 0x7fff_ffff);
    (if a > amax { a } else { amax }, finite & (a <= f32::MAX))
}

/// A group's scale `d = amax / 127` and the factor that takes a value to
/// its code (0 for an all-zero group).
#[amdgpu_device]
#[inline(always)]
fn x_scale(amax: f32) -> (f32, f32) {
    let d = amax / 127.0;
    (d, if d > 0.0 { 1.0 / d } else { 0.0 })
}

/// The 8-bit code of `v` (`round(v / d)`, in -127..=127 for finite groups).
#[amdgpu_device]
#[inline(always)]
fn x_code(v: f32, inv: f32) -> i32 {
    math::round(v * inv) as i32
}

/// A group's `meta` word: `d` (NaN for a group that held NaN or ±inf) and
/// `d * sum(codes)`, f32 bits.
#[amdgpu_device]
#[inline(always)]
fn x_meta(d: f32, finite: bool, sum: i32) -> u64 {
    let d = if finite { d } else { f32::NAN };
    let s = d * sum as f32;
    d.to_bits() as u64 | (s.to_bits() as u64) << 32
}

/// [`quantize_x_group`] of a group held by `16 / L` neighbouring lanes
/// (`L` = 4 or 8 consecutive values each, the group's first at a lane
/// that is a multiple of `16 / L`), the maximum and the code sum exchanged
/// across them: this lane's codes (`L / 4` words; the rest 0) and the
/// group's `meta`, bit for bit what [`quantize_x_group`] gives. Every lane
/// of the wave calls it together. The kernels that produce `x` (norms,
/// gated units) store it in 8-bit form this way, without a pass of their
/// own.
#[amdgpu_device]
#[inline(always)]
pub fn quantize_x_lanes<const L: usize>(v: [f32; L]) -> ([u32; 2], u64) {
    const { assert!(L == 4 || L == 8) };
    // Exchanges across 16 / L lanes: log2 of it.
    let hops = if L == 4 { 2 } else { 1 };
    let mut amax = 0.0f32;
    let mut finite = true;
    crate::unroll8!(l < L => {
        (amax, finite) = x_amax(amax, finite, v[l]);
    });
    let mut bad = (!finite) as u32;
    crate::unroll4!(j < 2 => {
        if j < hops {
            let other = wave_shfl_xor_f32(amax, 1 << j);
            amax = if other > amax { other } else { amax };
            bad |= wave_shfl_xor(bad, 1 << j);
        }
    });
    let (d, inv) = x_scale(amax);
    let mut words = [0u32; 2];
    let mut sum = 0i32;
    crate::unroll8!(l < L => {
        let q = x_code(v[l], inv);
        sum += q;
        words[l / 4] |= ((q as u8) as u32) << (8 * (l % 4));
    });
    crate::unroll4!(j < 2 => {
        if j < hops {
            sum += wave_shfl_xor(sum as u32, 1 << j) as i32;
        }
    });
    (words, x_meta(d, bad == 0, sum))
}

/// Where a kernel stores `x` in 8-bit form (a `Q8Activations` of the
/// op library): the codes in row order, then (where a row holds whole
/// units, [`x_code_words`]) the same codes again in paired order
/// ([`x_paired_slot`]), and each group's `meta`.
#[amdgpu_device]
#[derive(Clone, Copy)]
pub struct X8Out {
    /// Four codes per word: row order, then the paired copy.
    pub codes: *mut u32,
    /// A group's scale and scaled code sum.
    pub meta: *mut u64,
    /// Elements per row of `x`.
    pub k: usize,
    /// The word of `codes` where the paired copy starts (0: none).
    pub paired: usize,
}

impl X8Out {
    /// The stores of `elems` elements of `x` in rows of `k`.
    #[amdgpu_device]
    #[inline(always)]
    pub fn new(codes: *mut u32, meta: *mut u64, elems: usize, k: usize) -> Self {
        let paired = if x_code_words(elems, k) > elems / 4 {
            elems / 4
        } else {
            0
        };
        Self {
            codes,
            meta,
            k,
            paired,
        }
    }
}

/// Groups of 16 a row of `k` elements takes in the paired copy of `x`'s
/// codes: 16 per run of eight units (the last run padded).
#[amdgpu_device]
#[inline(always)]
pub const fn x_paired_row_groups(k: usize) -> usize {
    16 * k.div_ceil(256)
}

/// Words of codes `elems` elements of `x` in 8-bit form take in rows of
/// `k` on a device that runs the kernels: the codes in row order and,
/// where `k` is a multiple of 32 (a row of whole units, which every
/// weight of a paired format has), the paired copy after them
/// ([`x_paired_row_groups`] a row). The Cpu reads the row order only.
///
/// ```
/// use ferrocm_kernels::quant::matvec::x_code_words;
/// assert_eq!(x_code_words(2 * 256, 256), 128 + 128);
/// assert_eq!(x_code_words(2 * 288, 288), 144 + 256); // padded runs
/// assert_eq!(x_code_words(2 * 48, 48), 24); // no paired copy
/// ```
#[amdgpu_device]
#[inline(always)]
pub const fn x_code_words(elems: usize, k: usize) -> usize {
    if k > 0 && k.is_multiple_of(32) {
        elems / 4 + (elems / k) * 4 * x_paired_row_groups(k)
    } else {
        elems / 4
    }
}

/// Where the paired copy of a row of `x`'s codes holds the first group of
/// unit `u` (a unit is 32 elements), in groups of 16 from the row's start;
/// its second group is 8 on. Each run of eight units' first halves
/// (groups `2 u`), then their second halves (`2 u + 1`), a row's last run
/// padded to eight. A paired format's unit is groups `2 u` and `2 u + 1`
/// ([`QuantBlock::PAIRED_X`]), so neighbouring workitems' loads of a half
/// fall on one 128-byte line, where in row order they straddle two.
///
/// ```
/// use ferrocm_kernels::quant::matvec::x_paired_slot;
/// assert_eq!(x_paired_slot(0), 0);
/// assert_eq!(x_paired_slot(7), 7);
/// assert_eq!(x_paired_slot(9), 17);
/// ```
#[amdgpu_device]
#[inline(always)]
pub const fn x_paired_slot(u: u32) -> u32 {
    u + (u & !7)
}

/// Stores this lane's part of `x` in 8-bit form ([`quantize_x_lanes`]):
/// `L` values from column `col` (a multiple of `L`) of row `row` of `x`,
/// in row order and in the paired copy where `out` has one, and, from the
/// group's first lane, its `meta`. Every lane of the wave calls it
/// together; only `live` lanes store.
#[amdgpu_device]
#[inline(always)]
pub fn store_x_lanes<const L: usize>(out: X8Out, row: usize, col: usize, v: [f32; L], live: bool) {
    let (words, m) = quantize_x_lanes::<L>(v);
    let e = row * out.k + col;
    if live {
        unsafe {
            crate::unroll4!(j < 2 => {
                if j < L / 4 {
                    store(out.codes, e / 4 + j, words[j]);
                }
            });
            if out.paired != 0 {
                let g = (col / 16) as u32;
                let slot = (x_paired_slot(g / 2) + 8 * (g % 2)) as usize;
                let group = row * x_paired_row_groups(out.k) + slot;
                let word = out.paired + 4 * group + (col % 16) / 4;
                crate::unroll4!(j < 2 => {
                    if j < L / 4 {
                        store(out.codes, word + j, words[j]);
                    }
                });
            }
            if e.is_multiple_of(16) {
                store(out.meta, e / 16, m);
            }
        }
    }
}

/// Half `h` of a unit of a `B` block times a group of `x` in 8-bit form,
/// added to `acc`: `scale * dx * Σ code · xcode + offset * sx`, the last
/// term only where `B`'s units carry an offset ([`unit_has_offset`]). The
/// one definition: the kernels and the Cpu path both call it.
#[amdgpu_device]
#[inline(always)]
pub fn unit_half_dot<B: QuantBlock>(q: &Unit8, h: usize, xc: [u32; 4], xm: u64, acc: f32) -> f32 {
    let mut dot = 0i32;
    crate::unroll4!(i < 4 => {
        dot = dot4_i8(q.codes[4 * h + i], xc[i], dot);
    });
    let dx = f32::from_bits(xm as u32);
    let s = math::fma(q.scale[h] * dx, dot as f32, acc);
    if unit_has_offset::<B>() {
        let sx = f32::from_bits((xm >> 32) as u32);
        math::fma(q.offset[h], sx, s)
    } else {
        s
    }
}

/// `x` (rows of `k`) in 8-bit form ([`quantize_x_group`]'s values, and
/// the paired copy where rows hold whole units and `k` is not 0,
/// [`X8Out`]): four workitems
/// per group of 16, each loading four elements and storing their four codes,
/// the group's maximum and code sum exchanged across the four lanes (a
/// decode step's x is a few thousand elements: one workitem per group left
/// the launch waiting on a few hundred workitems' loads).
#[amdgpu_device]
#[inline(always)]
pub fn quantize_x_body<T: Elem>(codes: *mut u32, meta: *mut u64, x: *const T, groups: u64, k: u64) {
    wait_prior_grids();
    let out = X8Out::new(codes, meta, 16 * groups as usize, k as usize);
    // A loop of its own for each way to find the row: without the copy
    // (`paired` a constant 0: its stores and the row's division leave the
    // loop), in 32 bits where x fits (a 64-bit division is a long sequence
    // on the GPU; any decode step's x does), else in 64. Choosing inside
    // the loop cost every format's 8-row product 1-2.6% (H100).
    if out.paired == 0 {
        let plain = X8Out { paired: 0, ..out };
        quantize_x_rounds(plain, x, groups, |e| (0, e));
    } else if out.paired <= u32::MAX as usize / 4 {
        let k = out.k as u32;
        quantize_x_rounds(out, x, groups, |e| {
            let e = e as u32;
            ((e / k) as usize, (e % k) as usize)
        });
    } else {
        quantize_x_rounds(out, x, groups, |e| (e / out.k, e % out.k));
    }
    release_dependent_grids();
}

/// [`quantize_x_body`]'s loop, element `e`'s row and column by `row_col`.
#[amdgpu_device]
#[inline(always)]
fn quantize_x_rounds<T: Elem>(
    out: X8Out,
    x: *const T,
    groups: u64,
    row_col: impl Fn(usize) -> (usize, usize),
) {
    // Whole waves run the loop together (the exchanges); a quad of lanes
    // never straddles a wave, as waves hold a multiple of 4 lanes.
    let quads = groups * 4;
    let stride = global_size_x();
    let mut i = global_id_x();
    let rounds = quads.div_ceil(stride);
    let mut round = 0;
    while round < rounds {
        let live = i < quads;
        let mut v = [0.0f32; 4];
        if live {
            crate::unroll4!(l < 4 => {
                v[l] = unsafe { load(x, 4 * i as usize + l) }.to_f32();
            });
        }
        let (row, col) = row_col(4 * i as usize);
        store_x_lanes::<4>(out, row, col, v, live);
        i += stride;
        round += 1;
    }
}

/// Most workitems that share one weight row (whole waves: 4 of 32 or 2 of
/// 64), the `lanes` a launch asks for where the format's count would leave
/// half the compute units without a workgroup (a layer of few rows).
pub const QMATVEC_ROW_LANES: u32 = 128;

/// Most weight rows one workitem of the quantized matrix-vector kernels
/// takes ([`qmatvec_rows`]).
pub const QMATVEC_MAX_ROWS: u32 = 4;

/// Weight rows each workitem of a quantized matrix-vector kernel takes with
/// `c` rows of `x` a pass (1, 2, 4 or 8): the format's
/// [`QuantBlock::MATVEC_ROWS`], [`QuantBlock::MATVEC_ROWS_PAIR`],
/// [`QuantBlock::MATVEC_ROWS_WIDE`] or [`QuantBlock::MATVEC_ROWS_8`] (the
/// loads of `x` outnumber the weight's as rows of `x` grow; further weight
/// rows share them).
#[amdgpu_device]
#[inline(always)]
pub const fn qmatvec_rows<B: QuantBlock>(c: u32) -> u32 {
    if c >= 8 {
        B::MATVEC_ROWS_8
    } else if c >= 4 {
        B::MATVEC_ROWS_WIDE
    } else if c == 2 {
        B::MATVEC_ROWS_PAIR
    } else {
        B::MATVEC_ROWS
    }
}

/// Rows of `x` a pass of `qmatvec8_*` takes on a device whose widest pass
/// holds `wide` rows ([`QMATVEC_WIDE_PASS`] where the code runs): `wide`
/// where the format gains from one pass ([`QuantBlock::MATVEC_ONE_PASS_8`]),
/// else 4 (two passes).
#[amdgpu_device]
#[inline(always)]
pub const fn qmatvec_pass8_on<B: QuantBlock>(wide: usize) -> usize {
    if B::MATVEC_ONE_PASS_8 { wide } else { 4 }
}

/// [`qmatvec_pass8_on`] for the device this code is compiled for.
#[amdgpu_device]
#[inline(always)]
pub const fn qmatvec_pass8<B: QuantBlock>() -> usize {
    qmatvec_pass8_on::<B>(QMATVEC_WIDE_PASS)
}

/// LDS bytes a quantized matrix-vector launch reserves: a partial sum per
/// wave (of 32), weight row of a workitem (up to [`QMATVEC_MAX_ROWS`]) and
/// row of `x` in a pass (up to [`QMATVEC_MAX_M`]).
pub const QMATVEC_LDS_BYTES: u32 = (QMATVEC_BLOCK / 32) * QMATVEC_MAX_ROWS * QMATVEC_MAX_M * 4;

/// The bodies every quantized matrix-vector kernel instantiates (see the
/// module doc): `n` weight rows of `k` elements (a whole number of blocks),
/// `m` rows of `x` in 8-bit form (`quantize_x_body`), `y` contiguous
/// `[m, n]`. `L` workitems (at least a wave) share [`qmatvec_rows`] weight
/// rows (each row of `x` loaded then serves them all), each wave reducing
/// its sums and the rows' first workitem adding the waves' in LDS. `C` (1,
/// 2, 4 or 8) rows of `x` per pass; more take further passes that find the
/// weight rows in the cache. `qmatvec_body` takes up to two weight rows,
/// `qmatvec_body4` up to four: one source, two widths of its arrays, so the
/// one- and two-row kernels' code stays what it was when the four-row
/// width came (a body generic over the width moved their registers: H100,
/// 8 rows of x, Q4_K 45.1 -> 53.1 us).
macro_rules! qmatvec_bodies {
    ($($name:ident: $cap:literal, [$($q:ident = $r:literal),*];)*) => {$(
#[amdgpu_device]
#[inline(always)]
#[allow(clippy::needless_range_loop, clippy::too_many_arguments)]
pub fn $name<B: QuantBlock, T: Elem, const C: usize, const L: u32>(
    y: *mut T,
    w: *const B,
    codes: *const u32,
    meta: *const u64,
    n: u32,
    k: u32,
    m: u32,
) {
    // Launched with `early_start`: nothing global is touched before this.
    wait_prior_grids();
    release_dependent_grids();
    // Weight rows per workitem (`qmatvec_rows`).
    // At most the arrays' width (the kernels call the body of the rows
    // they take; the other width is instantiated, never run).
    let rows: u32 = Ord::min(qmatvec_rows::<B>(C as u32), $cap);
    const { assert!(C == 1 || C == 2 || C == 4 || C == 8) };
    let wave = wave_size();
    // Workitems that share a weight row: a compile-time count where the
    // wave's size is one (a run-time stride cost up to 40%: the unit a
    // workitem takes of each block, and its decoding, no longer folded out
    // of the loop; H100, Q5_K, 1 row of x, 17.3 -> 24.5 us).
    let row_lanes = Ord::max(L, wave);
    let waves_per_row = row_lanes / wave;
    let slots = QMATVEC_BLOCK / row_lanes;
    let w_id = wave_id();
    let slot = w_id / waves_per_row;
    // With two or more rows of x, a row's waves in reverse order in every
    // other slot: where a row's units are not a multiple of its lanes, its
    // first waves take one unit more, and the reversal pairs each such wave
    // with a shorter one on the same scheduler (NVIDIA gives wave w of a
    // workgroup to scheduler w % 4) instead of leaving half the schedulers
    // idle at the barrier (H200, 4096 x 14336, 8 rows of x: Q5_1 40.8 ->
    // 37.8 us, IQ4_XS 40.9 -> 38.4). One row of x keeps the order: the
    // reversal cost it up to 5% (Q4_1 12.1 -> 12.7 us).
    let wave_in_row = w_id % waves_per_row;
    let wave_in_row = if C > 1 && slot % 2 == 1 {
        waves_per_row - 1 - wave_in_row
    } else {
        wave_in_row
    };
    let lane = wave_in_row * wave + lane_id();
    let units = k / 32;
    let groups_per_row = (k / 16) as usize;
    let blocks_per_row = (k as usize) / B::ELEMS;
    let per_block = B::UNITS as u32;
    let last = Ord::max(m, 1) - 1;
    let xw = codes as *const W128;
    // The paired formats' codes of x from the paired copy (`X8Out`), after
    // the `m` rows in row order.
    let xp = unsafe { xw.add(m as usize * groups_per_row) };
    let paired_row = x_paired_row_groups(k as usize);
    let partials = lds::<f32>();
    // Every wave runs the same number of passes (the barriers).
    let mut base = workgroup_id_x() * slots * rows;
    while base < n {
        let row0 = base + slot * rows;
        let live = row0 < n;
        let mut m0 = 0;
        while m0 < m {
            let mut acc = [[0.0f32; C]; $cap];
            // Unit u of weight row row0 + r (a missing second row re-reads
            // the first; not stored).
            let unit_at = |r: u32, u: u32| {
                let row = if row0 + r < n { row0 + r } else { row0 };
                let bi = (u / per_block) as usize;
                let b = unsafe { global_ref(w, row as usize * blocks_per_row + bi) };
                let u = (u % per_block) as usize;
                let unit = if C > 1 {
                    unsafe { b.unit8_shared(u) }
                } else {
                    unsafe { b.unit8(u) }
                };
                (unit, bi * B::GROUPS)
            };
            let mut add = |qs: &[Unit8; $cap], group0: usize, slot: u32| {
                crate::unroll8!(c < C => {
                    // Rows of x past `m` re-read the last one (not stored).
                    let xrow = Ord::min(m0 + c as u32, last) as usize;
                    let xr = xrow * groups_per_row + group0;
                    let xs = xrow * paired_row + slot as usize;
                    let g = [xr + qs[0].group[0] as usize, xr + qs[0].group[1] as usize];
                    // Both halves' scales in one load where the groups pair
                    // (`g[0]` even: rows of x and blocks hold even counts).
                    let xm = if B::PAIRED_GROUPS {
                        let p = unsafe { load(meta as *const W128, g[0] / 2) }.0;
                        [p[0] as u64 | (p[1] as u64) << 32, p[2] as u64 | (p[3] as u64) << 32]
                    } else {
                        unsafe { [load(meta, g[0]), load(meta, g[1])] }
                    };
                    crate::unroll4!(h < 2 => {
                        let xc = if B::PAIRED_X {
                            unsafe { load(xp, xs + 8 * h) }.0
                        } else {
                            unsafe { load(xw, g[h]) }.0
                        };
                        crate::unroll4!(r < $cap => {
                            if r < rows as usize {
                                acc[r][c] = unit_half_dot::<B>(&qs[r], h, xc, xm[h], acc[r][c]);
                            }
                        });
                    });
                });
            };
            let mut u = if live { lane } else { units };
            while u < units {
                let (q0, g0) = unit_at(0, u);
                $(let $q = if rows > $r { unit_at($r, u).0 } else { q0 };)*
                add(&[q0, $($q),*], g0, x_paired_slot(u));
                u += row_lanes;
            }
            crate::unroll4!(r < $cap => {
                if r < rows as usize {
                crate::unroll8!(c < C => {
                    let s = wave_sum_f32(acc[r][c]);
                    if lane_id() == 0 {
                        partials.store((w_id * $cap + r as u32) * C as u32 + c as u32, s);
                    }
                });
                }
            });
            barrier();
            if lane == 0 {
                crate::unroll4!(r < $cap => {
                    let row = row0 + r as u32;
                    crate::unroll8!(c < C => {
                        let mut s = 0.0f32;
                        let mut i = 0;
                        while i < waves_per_row {
                            let wi = slot * waves_per_row + i;
                            s += partials.load((wi * $cap + r as u32) * C as u32 + c as u32);
                            i += 1;
                        }
                        let xrow = m0 + c as u32;
                        if (r as u32) < rows && row < n && xrow < m {
                            unsafe { store(y, xrow as usize * n as usize + row as usize, T::from_f32(s)) };
                        }
                    });
                });
            }
            barrier();
            m0 += C as u32;
        }
        base += num_workgroups_x() * slots * rows;
    }
}
    )*};
}

qmatvec_bodies! {
    qmatvec_body: 2, [q1 = 1];
    qmatvec_body4: 4, [q1 = 1, q2 = 2, q3 = 3];
}

/// Whether every entry of a format's [`QuantBlock::MATVEC_LANES`] is a
/// power of two from 32 to [`QMATVEC_ROW_LANES`] (whole waves that divide
/// a workgroup, as the body's slots need).
#[amdgpu_device]
const fn lanes_fit(lanes: [u32; 4]) -> bool {
    let mut i = 0;
    while i < 4 {
        let l = lanes[i];
        if !l.is_power_of_two() || l < 32 || l > QMATVEC_ROW_LANES {
            return false;
        }
        i += 1;
    }
    true
}

/// A quantized matrix-vector kernel's body for its `lanes` argument:
/// `P` (the format's [`QuantBlock::MATVEC_LANES`] for the pass) or
/// [`QMATVEC_ROW_LANES`], each a compiled instance (uniform across the
/// grid: one branch a launch). `WIDE` takes [`qmatvec_body4`] (up to four
/// weight rows a workitem).
#[amdgpu_device]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub fn qmatvec_entry<B: QuantBlock, T: Elem, const C: usize, const P: u32, const WIDE: bool>(
    y: *mut T,
    w: *const B,
    codes: *const u32,
    meta: *const u64,
    n: u32,
    k: u32,
    m: u32,
    lanes: u32,
) {
    macro_rules! body {
        ($l:expr) => {
            if WIDE {
                qmatvec_body4::<B, T, C, { $l }>(y, w, codes, meta, n, k, m)
            } else {
                qmatvec_body::<B, T, C, { $l }>(y, w, codes, meta, n, k, m)
            }
        };
    }
    if P < QMATVEC_ROW_LANES && lanes == QMATVEC_ROW_LANES {
        body!(QMATVEC_ROW_LANES)
    } else {
        body!(P)
    }
}

/// The parameter types of a quantized matrix-vector kernel: `(y, w,
/// codes, meta, n, k, m, lanes)` (`codes` and `meta`: `x` in 8-bit form;
/// `lanes`, the workitems that share a weight row: [`QMATVEC_ROW_LANES`],
/// else the format's [`QuantBlock::MATVEC_LANES`] for the pass or a wave,
/// whichever is more, whatever value it holds; the host sizes the grid by
/// the same count). Each count is its own compiled body
/// ([`qmatvec_entry`]).
#[cfg(not(ferrocm_device))]
pub type QMatvecArgs<B, T> = (*mut T, *const B, *const u32, *const u64, u32, u32, u32, u32);

/// The parameter types of an activation-quantize kernel: `(codes, meta, x,
/// groups, k)`: `x`'s rows hold `k` elements, and `k` = 0 stores no paired
/// copy ([`X8Out`]).
#[cfg(not(ferrocm_device))]
pub type QuantizeXArgs<T> = (*mut u32, *mut u64, *const T, u64, u64);

#[cfg(not(ferrocm_device))]
use crate::host::KernelRef;

/// A format's matrix-vector kernels for one activation type, by rows of `x`
/// per pass (host side).
#[cfg(not(ferrocm_device))]
pub trait QMatvecKernels<T>: QuantBlock {
    /// 1, 2, 4 and 8 rows of `x` (the last in one pass or two,
    /// [`qmatvec_pass8`]: a fifth to eighth row of `x` in registers spills
    /// on AMD).
    const ROWS: [KernelRef<QMatvecArgs<Self, T>>; 4];
}

/// The activation-quantize kernel of `x`'s dtype (host side).
#[cfg(not(ferrocm_device))]
pub trait QuantizeXKernel: Elem {
    /// `quantize_x_{dtype}`.
    const QUANTIZE_X: KernelRef<QuantizeXArgs<Self>>;
}

macro_rules! qmatvec {
    ($($b:ident: [$($t:ty => $one:ident, $two:ident, $four:ident, $eight:ident);*];)*) => {
        $($(
            #[cfg(not(ferrocm_device))]
            impl QMatvecKernels<$t> for $b {
                const ROWS: [KernelRef<QMatvecArgs<Self, $t>>; 4] = [
                    KernelRef::of::<$one>(),
                    KernelRef::of::<$two>(),
                    KernelRef::of::<$four>(),
                    KernelRef::of::<$eight>(),
                ];
            }
        )*)*
        // The host sizes a grid by the rows a workitem takes: a body's
        // arrays must hold them (its `min` never clamps).
        $(
            const _: () = assert!(qmatvec_rows::<$b>(4) <= 2 && qmatvec_rows::<$b>(2) <= 2 && qmatvec_rows::<$b>(1) <= 2);
            const _: () = assert!(qmatvec_rows::<$b>(8) <= QMATVEC_MAX_ROWS);
            const _: () = assert!(lanes_fit(<$b as QuantBlock>::MATVEC_LANES));
        )*
        kernels! {$($(
            fn $one(y: *mut $t, w: *const $b, codes: *const u32, meta: *const u64, n: u32, k: u32, m: u32, lanes: u32) {
                qmatvec_entry::<$b, $t, 1, { <$b as QuantBlock>::MATVEC_LANES[0] }, false>(y, w, codes, meta, n, k, m, lanes)
            }
            fn $two(y: *mut $t, w: *const $b, codes: *const u32, meta: *const u64, n: u32, k: u32, m: u32, lanes: u32) {
                qmatvec_entry::<$b, $t, 2, { <$b as QuantBlock>::MATVEC_LANES[1] }, false>(y, w, codes, meta, n, k, m, lanes)
            }
            fn $four(y: *mut $t, w: *const $b, codes: *const u32, meta: *const u64, n: u32, k: u32, m: u32, lanes: u32) {
                qmatvec_entry::<$b, $t, 4, { <$b as QuantBlock>::MATVEC_LANES[2] }, false>(y, w, codes, meta, n, k, m, lanes)
            }
            fn $eight(y: *mut $t, w: *const $b, codes: *const u32, meta: *const u64, n: u32, k: u32, m: u32, lanes: u32) {
                qmatvec_entry::<
                    $b,
                    $t,
                    { qmatvec_pass8::<$b>() },
                    { <$b as QuantBlock>::MATVEC_LANES[qmatvec_pass8::<$b>().trailing_zeros() as usize] },
                    { qmatvec_rows::<$b>(qmatvec_pass8::<$b>() as u32) > 2 },
                >(y, w, codes, meta, n, k, m, lanes)
            }
        )*)*}
    };
}

qmatvec! {
    BlockQ4_0: [f32 => qmatvec1_q4_0_f32, qmatvec2_q4_0_f32, qmatvec4_q4_0_f32, qmatvec8_q4_0_f32; F16 => qmatvec1_q4_0_f16, qmatvec2_q4_0_f16, qmatvec4_q4_0_f16, qmatvec8_q4_0_f16; Bf16 => qmatvec1_q4_0_bf16, qmatvec2_q4_0_bf16, qmatvec4_q4_0_bf16, qmatvec8_q4_0_bf16];
    BlockQ4_1: [f32 => qmatvec1_q4_1_f32, qmatvec2_q4_1_f32, qmatvec4_q4_1_f32, qmatvec8_q4_1_f32; F16 => qmatvec1_q4_1_f16, qmatvec2_q4_1_f16, qmatvec4_q4_1_f16, qmatvec8_q4_1_f16; Bf16 => qmatvec1_q4_1_bf16, qmatvec2_q4_1_bf16, qmatvec4_q4_1_bf16, qmatvec8_q4_1_bf16];
    BlockQ5_0: [f32 => qmatvec1_q5_0_f32, qmatvec2_q5_0_f32, qmatvec4_q5_0_f32, qmatvec8_q5_0_f32; F16 => qmatvec1_q5_0_f16, qmatvec2_q5_0_f16, qmatvec4_q5_0_f16, qmatvec8_q5_0_f16; Bf16 => qmatvec1_q5_0_bf16, qmatvec2_q5_0_bf16, qmatvec4_q5_0_bf16, qmatvec8_q5_0_bf16];
    BlockQ5_1: [f32 => qmatvec1_q5_1_f32, qmatvec2_q5_1_f32, qmatvec4_q5_1_f32, qmatvec8_q5_1_f32; F16 => qmatvec1_q5_1_f16, qmatvec2_q5_1_f16, qmatvec4_q5_1_f16, qmatvec8_q5_1_f16; Bf16 => qmatvec1_q5_1_bf16, qmatvec2_q5_1_bf16, qmatvec4_q5_1_bf16, qmatvec8_q5_1_bf16];
    BlockQ8_0: [f32 => qmatvec1_q8_0_f32, qmatvec2_q8_0_f32, qmatvec4_q8_0_f32, qmatvec8_q8_0_f32; F16 => qmatvec1_q8_0_f16, qmatvec2_q8_0_f16, qmatvec4_q8_0_f16, qmatvec8_q8_0_f16; Bf16 => qmatvec1_q8_0_bf16, qmatvec2_q8_0_bf16, qmatvec4_q8_0_bf16, qmatvec8_q8_0_bf16];
    BlockQ8_1: [f32 => qmatvec1_q8_1_f32, qmatvec2_q8_1_f32, qmatvec4_q8_1_f32, qmatvec8_q8_1_f32; F16 => qmatvec1_q8_1_f16, qmatvec2_q8_1_f16, qmatvec4_q8_1_f16, qmatvec8_q8_1_f16; Bf16 => qmatvec1_q8_1_bf16, qmatvec2_q8_1_bf16, qmatvec4_q8_1_bf16, qmatvec8_q8_1_bf16];
    BlockQ2K: [f32 => qmatvec1_q2_k_f32, qmatvec2_q2_k_f32, qmatvec4_q2_k_f32, qmatvec8_q2_k_f32; F16 => qmatvec1_q2_k_f16, qmatvec2_q2_k_f16, qmatvec4_q2_k_f16, qmatvec8_q2_k_f16; Bf16 => qmatvec1_q2_k_bf16, qmatvec2_q2_k_bf16, qmatvec4_q2_k_bf16, qmatvec8_q2_k_bf16];
    BlockQ3K: [f32 => qmatvec1_q3_k_f32, qmatvec2_q3_k_f32, qmatvec4_q3_k_f32, qmatvec8_q3_k_f32; F16 => qmatvec1_q3_k_f16, qmatvec2_q3_k_f16, qmatvec4_q3_k_f16, qmatvec8_q3_k_f16; Bf16 => qmatvec1_q3_k_bf16, qmatvec2_q3_k_bf16, qmatvec4_q3_k_bf16, qmatvec8_q3_k_bf16];
    BlockQ4K: [f32 => qmatvec1_q4_k_f32, qmatvec2_q4_k_f32, qmatvec4_q4_k_f32, qmatvec8_q4_k_f32; F16 => qmatvec1_q4_k_f16, qmatvec2_q4_k_f16, qmatvec4_q4_k_f16, qmatvec8_q4_k_f16; Bf16 => qmatvec1_q4_k_bf16, qmatvec2_q4_k_bf16, qmatvec4_q4_k_bf16, qmatvec8_q4_k_bf16];
    BlockQ5K: [f32 => qmatvec1_q5_k_f32, qmatvec2_q5_k_f32, qmatvec4_q5_k_f32, qmatvec8_q5_k_f32; F16 => qmatvec1_q5_k_f16, qmatvec2_q5_k_f16, qmatvec4_q5_k_f16, qmatvec8_q5_k_f16; Bf16 => qmatvec1_q5_k_bf16, qmatvec2_q5_k_bf16, qmatvec4_q5_k_bf16, qmatvec8_q5_k_bf16];
    BlockQ6K: [f32 => qmatvec1_q6_k_f32, qmatvec2_q6_k_f32, qmatvec4_q6_k_f32, qmatvec8_q6_k_f32; F16 => qmatvec1_q6_k_f16, qmatvec2_q6_k_f16, qmatvec4_q6_k_f16, qmatvec8_q6_k_f16; Bf16 => qmatvec1_q6_k_bf16, qmatvec2_q6_k_bf16, qmatvec4_q6_k_bf16, qmatvec8_q6_k_bf16];
    BlockQ8K: [f32 => qmatvec1_q8_k_f32, qmatvec2_q8_k_f32, qmatvec4_q8_k_f32, qmatvec8_q8_k_f32; F16 => qmatvec1_q8_k_f16, qmatvec2_q8_k_f16, qmatvec4_q8_k_f16, qmatvec8_q8_k_f16; Bf16 => qmatvec1_q8_k_bf16, qmatvec2_q8_k_bf16, qmatvec4_q8_k_bf16, qmatvec8_q8_k_bf16];
    BlockIq4Nl: [f32 => qmatvec1_iq4_nl_f32, qmatvec2_iq4_nl_f32, qmatvec4_iq4_nl_f32, qmatvec8_iq4_nl_f32; F16 => qmatvec1_iq4_nl_f16, qmatvec2_iq4_nl_f16, qmatvec4_iq4_nl_f16, qmatvec8_iq4_nl_f16; Bf16 => qmatvec1_iq4_nl_bf16, qmatvec2_iq4_nl_bf16, qmatvec4_iq4_nl_bf16, qmatvec8_iq4_nl_bf16];
    BlockIq4Xs: [f32 => qmatvec1_iq4_xs_f32, qmatvec2_iq4_xs_f32, qmatvec4_iq4_xs_f32, qmatvec8_iq4_xs_f32; F16 => qmatvec1_iq4_xs_f16, qmatvec2_iq4_xs_f16, qmatvec4_iq4_xs_f16, qmatvec8_iq4_xs_f16; Bf16 => qmatvec1_iq4_xs_bf16, qmatvec2_iq4_xs_bf16, qmatvec4_iq4_xs_bf16, qmatvec8_iq4_xs_bf16];
    BlockMxfp4: [f32 => qmatvec1_mxfp4_f32, qmatvec2_mxfp4_f32, qmatvec4_mxfp4_f32, qmatvec8_mxfp4_f32; F16 => qmatvec1_mxfp4_f16, qmatvec2_mxfp4_f16, qmatvec4_mxfp4_f16, qmatvec8_mxfp4_f16; Bf16 => qmatvec1_mxfp4_bf16, qmatvec2_mxfp4_bf16, qmatvec4_mxfp4_bf16, qmatvec8_mxfp4_bf16];
}

macro_rules! quantize_x {
    ($($t:ty => $name:ident;)*) => {
        $(
            #[cfg(not(ferrocm_device))]
            impl QuantizeXKernel for $t {
                const QUANTIZE_X: KernelRef<QuantizeXArgs<Self>> = KernelRef::of::<$name>();
            }
        )*
        kernels! { table QUANTIZE_X_KERNELS; $(
            fn $name(codes: *mut u32, meta: *mut u64, x: *const $t, groups: u64, k: u64) { quantize_x_body::<$t>(codes, meta, x, groups, k) }
        )*}
    };
}

quantize_x! {
    f32 => quantize_x_f32;
    F16 => quantize_x_f16;
    Bf16 => quantize_x_bf16;
}
