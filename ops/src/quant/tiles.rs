//! The Cpu's quantized matrix product for many rows of `x` (a prompt) on
//! 8-bit integer dot products: AVX-512 VNNI's `vpdpbusd`, 64 products
//! an instruction, where f32 products of the dequantized weight take 16.
//!
//! `x` comes in its 8-bit form ([`Q8Activations`](super::Q8Activations),
//! per group of 16: codes, `dx`, `sx = dx · Σ codes`); each thread decodes
//! 16 weight rows at a time into a tile of bytes laid out for the
//! instruction (4 consecutive codes of each of the 16 rows in one 64-byte
//! line) and multiplies it by every row of `x`, 8 rows at a time, holding
//! 16 x 8 outputs in registers across the whole row.
//!
//! Each half unit's integer dot product is exact: `vpdpbusd` takes one
//! operand unsigned, so the codes go in offset by 128 and the accumulator
//! starts at `-(128 + UNIT_BIAS) · Σ x codes`, which leaves `Σ (code -
//! UNIT_BIAS) · x code`, the definition's values over the scale. Each
//! output then sums, unit by unit in order, `fma(scale · dx, dot, y)` and,
//! for formats with a minimum, `fma(offset, sx, y)`: for those, bit for
//! bit the scalar rows' [`unit_half_dot`]; for the others the bias's term
//! is in the integer sum, exact, where [`unit_half_dot`] rounds it apart
//! (one FMA fewer a half unit, 7-10% of the product's time).
//!
//! [`unit_half_dot`]: ferrocm_kernels::quant::matvec::unit_half_dot

use super::matvec::x86::{legacy_codes, legacy_format, prefetch_ahead};
use ferrocm_kernels::quant::blocks::QuantBlock;
use rayon::prelude::*;
use std::arch::x86_64::*;

/// Weight rows a tile holds: one 512-bit vector of i32 or f32 lanes.
const TILE_ROWS: usize = 16;

/// Rows of `x` one pass over a tile takes (its outputs stay in registers).
const PASS_ROWS: usize = 8;

/// 64-byte lines of a tile per unit of 32 elements: 8 of codes (4 a
/// row), then each half's scales and offsets (an f32 a row).
const UNIT_LINES: usize = 12;

/// One 64-byte line of a tile.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u32; 16]);

/// One group of 16 of one row of `x`, as the pass reads it.
#[derive(Clone, Copy, Default)]
#[repr(C, align(32))]
struct XGroup {
    /// Codes, four per word.
    codes: [u32; 4],
    /// `-(128 + UNIT_BIAS) · Σ codes`: where the tile's offset codes leave
    /// the dot.
    init: i32,
    /// The group's scale.
    dx: f32,
    /// `dx · Σ codes`.
    sx: f32,
    _pad: u32,
}

std::thread_local! {
    /// Each thread's tile, kept between calls.
    static TILE: std::cell::RefCell<Vec<Line>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Whether this CPU runs [`product`]: AVX-512 F, BW and VNNI (and AVX2 and
/// F16C, which every such CPU has).
pub(crate) fn available() -> bool {
    is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("f16c")
        && is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vnni")
}

/// y's first element, shared by the tasks that write its disjoint columns.
struct Dst(*mut f32);
// SAFETY: each task writes only its own tile's columns (`product`).
unsafe impl Sync for Dst {}

/// `y[c * n + r] = w_r · x_c` for the `n` weight rows of `blocks` (`k`
/// elements each) and the `m` rows of `x` in 8-bit form (`codes` and
/// `meta` per group of 16, as [`Q8Activations`](super::Q8Activations)
/// holds them), under rayon, a tile of 16 weight rows a task.
///
/// # Panics
/// When [`available`] is false, or the slices are shorter than the shapes
/// say (the callers' invariants).
pub(crate) fn product<B: QuantBlock + bytemuck::Pod + Sync>(
    y: &mut [f32],
    blocks: &[B],
    codes: &[[u32; 4]],
    meta: &[u64],
    (n, k, m): (usize, usize, usize),
) {
    assert!(available(), "tiles::product needs AVX-512 F, BW and VNNI");
    let groups = k / 16;
    let per_row = k / B::ELEMS;
    assert!(k % B::ELEMS == 0 && y.len() >= m * n && blocks.len() >= n * per_row);
    assert!(codes.len() >= m * groups && meta.len() >= m * groups);
    if n == 0 || m == 0 {
        return;
    }
    if k == 0 {
        y[..m * n].fill(0.0);
        return;
    }
    // [m / 8, groups, 8]: a pass's rows of one group side by side, one
    // base address for all of them.
    let mut x = vec![XGroup::default(); m.div_ceil(PASS_ROWS) * groups * PASS_ROWS];
    x.par_chunks_mut(groups * PASS_ROWS)
        .zip(
            codes
                .par_chunks(groups * PASS_ROWS)
                .zip(meta.par_chunks(groups * PASS_ROWS)),
        )
        .for_each(|(x, (codes, meta))| {
            let (codes, meta) = (codes.chunks(groups), meta.chunks(groups));
            for (c, (codes, meta)) in codes.zip(meta).enumerate() {
                for (g, (&codes, &meta)) in codes.iter().zip(meta).enumerate() {
                    let sum: i32 = codes
                        .iter()
                        .flat_map(|w| w.to_le_bytes())
                        .map(|b| b as i8 as i32)
                        .sum();
                    x[g * PASS_ROWS + c] = XGroup {
                        codes,
                        init: -(128 + tile_bias::<B>()) * sum,
                        dx: f32::from_bits(meta as u32),
                        sx: f32::from_bits((meta >> 32) as u32),
                        _pad: 0,
                    };
                }
            }
        });
    // Each unit's two groups of 16 within the row (the same in every block).
    let unit_groups: Vec<[u32; 2]> = (0..per_row * B::UNITS)
        .map(|i| {
            // SAFETY: a Cpu buffer's blocks (16-byte aligned).
            let g = unsafe { blocks[0].unit8(i % B::UNITS) }.group;
            let first = (i / B::UNITS * B::GROUPS) as u32;
            [first + g[0], first + g[1]]
        })
        .collect();
    let dst = Dst(y.as_mut_ptr());
    (0..n.div_ceil(TILE_ROWS)).into_par_iter().for_each(|t| {
        let r0 = t * TILE_ROWS;
        let rows = TILE_ROWS.min(n - r0);
        let dst = &dst;
        TILE.with_borrow_mut(|tile| {
            let units = per_row * B::UNITS;
            tile.resize(tile.len().max(units * UNIT_LINES), Line([0; 16]));
            let tile = &mut tile[..units * UNIT_LINES];
            let src = &blocks[r0 * per_row..(r0 + rows) * per_row];
            // SAFETY: AVX-512 F, AVX2 and F16C (asserted).
            unsafe { fill(tile, src, per_row, rows) };
            let mask = ((1u32 << rows) - 1) as u16;
            let mut c = 0;
            while c < m {
                let step = match m - c {
                    8.. => PASS_ROWS,
                    4.. => 4,
                    2.. => 2,
                    _ => 1,
                };
                // SAFETY: AVX-512 F, BW and VNNI (asserted); rows c..c +
                // step of x exist; y's columns r0..r0 + rows of those rows
                // are this task's alone (the mask keeps the rest).
                unsafe {
                    let y = dst.0.add(c * n + r0);
                    let x = &x[c / PASS_ROWS * groups * PASS_ROWS + c % PASS_ROWS..];
                    match step {
                        8 => pass::<B, 8>(tile, &unit_groups, x, y, n, mask),
                        4 => pass::<B, 4>(tile, &unit_groups, x, y, n, mask),
                        2 => pass::<B, 2>(tile, &unit_groups, x, y, n, mask),
                        _ => pass::<B, 1>(tile, &unit_groups, x, y, n, mask),
                    }
                }
                c += step;
            }
        });
    });
}

/// Decodes `rows` (at most 16) weight rows of `per_row` blocks each into
/// `tile`: per unit, line `j < 8` holds word `j` of each row's codes
/// (offset by 128) at lane `r`, lines 8 and 9 each half's scales, lines 10
/// and 11 its offsets; rows past `rows` get zero scales and offsets.
///
/// # Safety
/// AVX-512 F, AVX2 and F16C.
#[target_feature(enable = "avx512f,avx2,f16c")]
unsafe fn fill<B: QuantBlock + bytemuck::Pod>(
    tile: &mut [Line],
    blocks: &[B],
    per_row: usize,
    rows: usize,
) {
    assert!(rows <= TILE_ROWS && blocks.len() >= rows * per_row);
    for (i, lines) in tile.as_chunks_mut::<UNIT_LINES>().0.iter_mut().enumerate() {
        let (bi, u) = (i / B::UNITS, i % B::UNITS);
        let mut codes = [_mm256_setzero_si256(); TILE_ROWS];
        // Each half's scales, then its offsets.
        let mut scales = [[0.0f32; TILE_ROWS]; 4];
        for r in 0..rows {
            let b = &blocks[r * per_row + bi];
            if u == 0 {
                // 16 rows' streams: the hardware's prefetch left them
                // waiting, as it did the matrix-vector rows.
                prefetch_ahead(b);
            }
            if legacy_format::<B>() {
                // The matrix-vector rows' decode: a few vector
                // instructions where `unit8` spends many (MXFP4's table).
                let (c, d, min) = legacy_codes::<B>(bytemuck::bytes_of(b), u);
                codes[r] = c;
                scales[0][r] = d;
                scales[1][r] = d;
                scales[2][r] = min;
                scales[3][r] = min;
                continue;
            }
            // SAFETY: a Cpu buffer's blocks (16-byte aligned).
            let q = unsafe { b.unit8(u) };
            // SAFETY: 32 bytes of the unit's codes.
            codes[r] = unsafe { _mm256_loadu_si256(q.codes.as_ptr().cast()) };
            scales[0][r] = q.scale[0];
            scales[1][r] = q.scale[1];
            scales[2][r] = q.offset[0];
            scales[3][r] = q.offset[1];
        }
        for (j, word) in transpose_codes(codes).into_iter().enumerate() {
            let word = _mm512_xor_si512(word, _mm512_set1_epi32(0x8080_8080u32 as i32));
            // SAFETY: an aligned line of the tile.
            unsafe { _mm512_store_si512(lines[j].0.as_mut_ptr().cast(), word) };
        }
        for (line, s) in lines[8..].iter_mut().zip(&scales) {
            // SAFETY: 16 f32 into an aligned line.
            unsafe { _mm512_store_ps(line.0.as_mut_ptr().cast(), _mm512_loadu_ps(s.as_ptr())) };
        }
    }
}

/// The bias of the codes [`fill`] puts in a tile: `legacy_codes` gives the
/// legacy formats' values less their bias already, `unit8` the others'
/// codes with [`QuantBlock::UNIT_BIAS`].
fn tile_bias<B: QuantBlock>() -> i32 {
    if legacy_format::<B>() {
        0
    } else {
        B::UNIT_BIAS
    }
}

/// 16 rows of 8 words to 8 vectors of 16: word `j` of row `r` at lane `r`
/// of vector `j` (an 8 x 8 transpose in each half, rows `p` and `p + 8`
/// side by side).
#[target_feature(enable = "avx512f")]
fn transpose_codes(rows: [__m256i; TILE_ROWS]) -> [__m512i; 8] {
    let z: [__m512i; 8] = std::array::from_fn(|p| {
        _mm512_inserti64x4::<1>(_mm512_castsi256_si512(rows[p]), rows[p + 8])
    });
    // Per 128-bit lane: pairs of words, then quads (rows 4a..4a + 3).
    let t: [__m512i; 8] = std::array::from_fn(|i| {
        let (a, b) = (z[i / 2 * 2], z[i / 2 * 2 + 1]);
        if i % 2 == 0 {
            _mm512_unpacklo_epi32(a, b)
        } else {
            _mm512_unpackhi_epi32(a, b)
        }
    });
    // q[4 g + w]: words w and w + 4 of rows 4 g..4 g + 3 (and 8 more).
    let q: [__m512i; 8] = std::array::from_fn(|i| {
        let (g, w) = (i / 4, i % 4);
        let (a, b) = (t[4 * g + w / 2], t[4 * g + 2 + w / 2]);
        if w % 2 == 0 {
            _mm512_unpacklo_epi64(a, b)
        } else {
            _mm512_unpackhi_epi64(a, b)
        }
    });
    std::array::from_fn(|j| {
        let w = j % 4;
        // Qwords of q[w] (rows 0..3, 8..11) and q[4 + w] (rows 4..7, 12..15):
        // 128-bit lane 0 or 1 (word w or w + 4), then lane 2 or 3.
        let lo = if j < 4 { 0 } else { 2 };
        let idx = _mm512_setr_epi64(lo, lo + 1, 8 + lo, 9 + lo, 4 + lo, 5 + lo, 12 + lo, 13 + lo);
        _mm512_permutex2var_epi64(q[w], idx, q[4 + w])
    })
}

/// Rows `0..C` of `x` (group `g` of row `c` at `x[g * 8 + c]`) times a
/// filled tile, stored to `y` (row `c` at `y + c * n`) in the lanes of
/// `mask`; the offsets' term only for formats with a minimum.
///
/// # Safety
/// AVX-512 F, BW and VNNI; `y` as said.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn pass<B: QuantBlock, const C: usize>(
    tile: &[Line],
    unit_groups: &[[u32; 2]],
    x: &[XGroup],
    y: *mut f32,
    n: usize,
    mask: u16,
) {
    let groups = 2 * unit_groups.len();
    assert!(
        tile.len() >= unit_groups.len() * UNIT_LINES && x.len() > (groups - 1) * PASS_ROWS + C - 1
    );
    let mut acc = [_mm512_setzero_ps(); C];
    for (lines, g) in tile.as_chunks::<UNIT_LINES>().0.iter().zip(unit_groups) {
        let line = |j: usize| {
            // SAFETY: an aligned line of the tile.
            unsafe { _mm512_load_si512(lines[j].0.as_ptr().cast()) }
        };
        for h in 0..2 {
            let w = [
                line(4 * h),
                line(4 * h + 1),
                line(4 * h + 2),
                line(4 * h + 3),
            ];
            let scale = _mm512_castsi512_ps(line(8 + h));
            let offset = _mm512_castsi512_ps(line(10 + h));
            let xs = &x[g[h] as usize * PASS_ROWS..][..C];
            for (xg, acc) in xs.iter().zip(&mut acc) {
                let mut dot = _mm512_set1_epi32(xg.init);
                for (i, &w) in w.iter().enumerate() {
                    dot = _mm512_dpbusd_epi32(dot, w, _mm512_set1_epi32(xg.codes[i] as i32));
                }
                let s = _mm512_mul_ps(scale, _mm512_set1_ps(xg.dx));
                *acc = _mm512_fmadd_ps(s, _mm512_cvtepi32_ps(dot), *acc);
                if B::UNIT_HAS_MIN {
                    *acc = _mm512_fmadd_ps(offset, _mm512_set1_ps(xg.sx), *acc);
                }
            }
        }
    }
    for (c, acc) in acc.into_iter().enumerate() {
        // SAFETY: the caller's promise for y.
        unsafe { _mm512_mask_storeu_ps(y.add(c * n), mask, acc) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::QuantFormat;
    use crate::quant::format::with_block;
    use ferrocm_kernels::quant::matvec::unit_half_dot;
    use rand::{Rng, SeedableRng};

    /// `product` bit for bit against its sums written out: `unit_half_dot`,
    /// unit by unit in order, for formats with a minimum; for the others
    /// the exact integer `Σ (code - UNIT_BIAS) · x code` times `scale · dx`
    /// in one FMA. Every format: random block bytes
    /// (scales of every f16/e8m0 value, NaN and infinities included),
    /// random x codes, 37 weight rows (two tiles and a partial one) and 11
    /// rows of x (a pass of 8, of 2 and of 1).
    #[test]
    fn product_matches_the_scalar_rows() {
        if !available() {
            eprintln!("skipped: this CPU lacks AVX-512 VNNI");
            return;
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let (n, m) = (37, 11);
        for f in QuantFormat::ALL {
            with_block!(f, B => {
                let k = 2 * B::ELEMS.max(64);
                let (per_row, groups) = (k / B::ELEMS, k / 16);
                let mut blocks: Vec<B> = vec![bytemuck::Zeroable::zeroed(); n * per_row];
                rng.fill(bytemuck::cast_slice_mut::<B, u8>(&mut blocks));
                let codes: Vec<[u32; 4]> = (0..m * groups)
                    .map(|_| std::array::from_fn(|_| {
                        u32::from_le_bytes(std::array::from_fn(|_| rng.random_range(-127i8..=127) as u8))
                    }))
                    .collect();
                let meta: Vec<u64> = (0..m * groups)
                    .map(|_| {
                        let dx = rng.random_range(0.0f32..0.01);
                        let sx = rng.random_range(-1.0f32..1.0);
                        dx.to_bits() as u64 | (sx.to_bits() as u64) << 32
                    })
                    .collect();
                let mut y = vec![f32::NAN; m * n];
                product::<B>(&mut y, &blocks, &codes, &meta, (n, k, m));
                for r in 0..n {
                    for c in 0..m {
                        let mut want = 0.0f32;
                        for (bi, b) in blocks[r * per_row..][..per_row].iter().enumerate() {
                            for u in 0..B::UNITS {
                                // SAFETY: a Vec of blocks (aligned as B).
                                let q = unsafe { b.unit8(u) };
                                for h in 0..2 {
                                    let g = c * groups + bi * B::GROUPS + q.group[h] as usize;
                                    if B::UNIT_HAS_MIN {
                                        want = unit_half_dot::<B>(&q, h, codes[g], meta[g], want);
                                        continue;
                                    }
                                    let w = q.codes[4 * h..][..4].iter().flat_map(|w| w.to_le_bytes());
                                    let x = codes[g].iter().flat_map(|w| w.to_le_bytes());
                                    let dot: i32 = w
                                        .zip(x)
                                        .map(|(w, x)| (w as i8 as i32 - B::UNIT_BIAS) * x as i8 as i32)
                                        .sum();
                                    let dx = f32::from_bits(meta[g] as u32);
                                    want = (q.scale[h] * dx).mul_add(dot as f32, want);
                                }
                            }
                        }
                        let got = y[c * n + r];
                        assert!(
                            got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                            "{f}: y[{c}, {r}] = {got}, the scalar rows {want}"
                        );
                    }
                }
            });
        }
    }
}
