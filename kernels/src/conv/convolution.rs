//! Convolution in 1, 2 and 3 spatial dims (f32, f16, bf16; f32
//! accumulation), any stride, padding, dilation and groups, inputs and
//! outputs at any strides (NCHW, or NHWC as a permuted view):
//! - `conv_gemm_{dtype}`: an implicit GEMM. Per group, C `[cout_g, cols]`
//!   = W `[cout_g, K]` · X̂ `[K, cols]` with `cols` the batch's output
//!   positions and `K = cin_g * kernel volume`, on the register-tiled GEMM's tiles and
//!   LDS staging (`crate::matmul::dense`): W's tiles load as a GEMM operand,
//!   X̂'s element `(k, col)` is read from the input where the convolution
//!   window puts it (zero in the padding) as the tile is staged, so no
//!   column buffer ever exists in memory. One workgroup per 64 x 64 tile of
//!   a group's output (grid y: the groups); grids too small to fill the GPU
//!   split the reduction into chunks (f32 sums per chunk, which
//!   `conv_split_sum_{dtype}` adds up with the bias).
//! - `conv_mma_{f16,bf16}`: the same implicit GEMM on the matrix units
//!   (`crate::matmul::dense::mma_k_loop_with`, 128 x 128 tiles of a group's
//!   output), for an input in channels-last memory with `cin_g` a multiple
//!   of 8: the reduction runs over `k = (tap, ci)` (the weight permuted to
//!   `[cout, kd, kh, kw, cin_g]`), so the 8 values of X̂ a workitem stages
//!   are 8 neighbouring channels of one input position, one 16-byte load
//!   (or zeros in the padding). Its table has one entry per tap.
//! - `conv_wgmma_{f16,bf16}`: `conv_mma_*` on Hopper's warpgroup product
//!   (`crate::matmul::dense::wgmma_k_loop_with`): the same tiles, operands
//!   and table, each K step copied from memory straight into LDS, four
//!   stages. Launched where `Device::warpgroup_mma` holds; empty on AMD.
//! - `conv_direct_{dtype}`: a workitem per output element summing its
//!   window: depthwise and other convolutions with few output channels per
//!   group, where a 64-row tile would be mostly empty.
//!
//! All read the geometry from `geom`, a small array of u64 the op layer
//! uploads: the header ([`G_BATCH`] ..) and then, for each `k < K`, where
//! reduction index `k = (ci, kd, kh, kw)` reads relative to the window's
//! corner ([`G_TABLE`]: the element offset `ci·x_c + kd·dil_d·x_d + ..` and
//! the three dilated kernel offsets packed in 21 bits each), so the kernels
//! never divide by the kernel's shape. Spatial dims are always three: a
//! 1-d or 2-d convolution has leading dims of size 1. A transposed
//! convolution's output phases run in one launch, the phase in the grid's
//! z, each with its own geometry, weights and first output
//! ([`G_PHASE_WORDS`] ..); workgroups past a smaller phase's tiles return.
//!
//! The weight is contiguous `[cout, cin_g, kd, kh, kw]`; the bias `[cout]`
//! (may be null) is added in f32 before the one rounding.

use crate::device::*;
use crate::elem::W128;
use crate::elem::*;
use crate::kernels;
use crate::math;
use crate::matmul::dense::{
    GEMM_BK, GEMM_BLOCK, GEMM_BN, GEMM_ROWS, MMA_BLOCK, MMA_BM, MMA_BN, MMA_FETCH_GROUPS, MatElem,
    MmaOperand, WGMMA_GROUPS, fma_stage_bytes, gemm_bm, gemm_fetch, gemm_stage, gemm_tile_fma,
    gemm_tile_loads, gemm_tiles, mma_k_loop_with, mma_operand_fetch, wgmma_copier, wgmma_group_at,
    wgmma_k_loop_with,
};
use crate::unroll4;
use rocm_kernel_macros::{amdgpu_device, amdgpu_global};

/// Header word: the batch size.
pub const G_BATCH: usize = 0;
/// Header word: input channels per group.
pub const G_CIN_G: usize = 1;
/// Header word: output channels per group.
pub const G_COUT_G: usize = 2;
/// Header word: `K`, the reduction length (`cin_g` x the kernel volume).
pub const G_K: usize = 3;
/// Header word: output positions per image (`od * oh * ow`).
pub const G_POSITIONS: usize = 4;
/// Header words: the input's spatial dims `(d, h, w)`.
pub const G_IN: usize = 5;
/// Header words: the output's two inner spatial dims `(oh, ow)`.
pub const G_OUT_HW: usize = 8;
/// Header words: the strides of the window `(d, h, w)`.
pub const G_STRIDE: usize = 10;
/// Header words: the padding before each spatial dim `(d, h, w)`.
pub const G_PAD: usize = 13;
/// Header words: the input's element strides `(n, c, d, h, w)`.
pub const G_X_STRIDES: usize = 16;
/// Header words: the output's element strides `(n, c, d, h, w)`.
pub const G_Y_STRIDES: usize = 21;
/// Header word: the words from one phase's geometry to the next. A
/// transposed convolution runs its output phases (see the op layer) in one
/// launch, the phase in the grid's z: phase `z` reads the geometry at
/// `geom + z · geom[G_PHASE_WORDS]` (read from the first), each phase's
/// header and table the same length.
pub const G_PHASE_WORDS: usize = 26;
/// Header word: the element offset of the phase's first output in `y`.
pub const G_Y_FIRST: usize = 27;
/// Header word: the element offset of the phase's weights in `w`.
pub const G_W_FIRST: usize = 28;
/// Header word: the element offset of the phase's f32 sums in `part`
/// (`conv_gemm_*` with its reduction split).
pub const G_PART_FIRST: usize = 29;
/// Words of the header; the table of `K` pairs follows.
pub const G_TABLE: usize = 30;
/// Bits of each dilated kernel offset in a table entry's second word.
pub const G_OFFSET_BITS: u32 = 21;

/// The geometry the kernels read, as 32-bit values where they fit.
#[amdgpu_device]
#[derive(Clone, Copy)]
struct Geom {
    batch: u32,
    cin_g: u32,
    cout_g: u32,
    k: u32,
    positions: u32,
    inp: [u32; 3],
    oh: u32,
    ow: u32,
    stride: [u32; 3],
    pad: [u32; 3],
    xs: [u64; 5],
    ys: [u64; 5],
    y_first: u64,
    w_first: u64,
    part_first: u64,
}

/// The geometry of this workgroup's phase (grid z; see [`G_PHASE_WORDS`]).
#[amdgpu_device]
#[inline(always)]
fn phase_geom(geom: *const u64) -> *const u64 {
    let z = workgroup_id_z();
    // Phase 0 (every launch of one phase) waits on no load for it.
    if z == 0 {
        return geom;
    }
    let words = unsafe { load(geom, G_PHASE_WORDS) };
    geom.wrapping_add((z as u64 * words) as usize)
}

#[amdgpu_device]
#[inline(always)]
fn read_geom(g: *const u64) -> Geom {
    let w = |i: usize| unsafe { load(g, i) };
    let w32 = |i: usize| w(i) as u32;
    Geom {
        batch: w32(G_BATCH),
        cin_g: w32(G_CIN_G),
        cout_g: w32(G_COUT_G),
        k: w32(G_K),
        positions: w32(G_POSITIONS),
        inp: [w32(G_IN), w32(G_IN + 1), w32(G_IN + 2)],
        oh: w32(G_OUT_HW),
        ow: w32(G_OUT_HW + 1),
        stride: [w32(G_STRIDE), w32(G_STRIDE + 1), w32(G_STRIDE + 2)],
        pad: [w32(G_PAD), w32(G_PAD + 1), w32(G_PAD + 2)],
        xs: [
            w(G_X_STRIDES),
            w(G_X_STRIDES + 1),
            w(G_X_STRIDES + 2),
            w(G_X_STRIDES + 3),
            w(G_X_STRIDES + 4),
        ],
        ys: [
            w(G_Y_STRIDES),
            w(G_Y_STRIDES + 1),
            w(G_Y_STRIDES + 2),
            w(G_Y_STRIDES + 3),
            w(G_Y_STRIDES + 4),
        ],
        y_first: w(G_Y_FIRST),
        w_first: w(G_W_FIRST),
        part_first: w(G_PART_FIRST),
    }
}

/// Where output position `p` of image `n` reads: the window's corner in
/// input coordinates (`o * stride - pad`, wrapping below zero) and the
/// input offset of that corner in group `g` (wrapping likewise: adding an
/// in-bounds entry's offset brings it back).
#[amdgpu_device]
#[derive(Clone, Copy)]
struct Window {
    corner: [u32; 3],
    base: u64,
}

/// Output position `p` as `(od, oh, ow)`.
#[amdgpu_device]
#[inline(always)]
fn position(g: &Geom, p: u32) -> [u32; 3] {
    let hw = g.oh * g.ow;
    [p / hw, (p % hw) / g.ow, p % g.ow]
}

#[amdgpu_device]
#[inline(always)]
fn window(g: &Geom, n: u32, group: u32, p: u32) -> Window {
    let o = position(g, p);
    let mut w = Window {
        corner: [0; 3],
        base: n as u64 * g.xs[0] + (group * g.cin_g) as u64 * g.xs[1],
    };
    unroll4!(d < 3 => {
        let c = (o[d] * g.stride[d]).wrapping_sub(g.pad[d]);
        w.corner[d] = c;
        // Sign-extended: a corner above the padding is negative.
        w.base = w.base.wrapping_add((c as i32 as i64 as u64).wrapping_mul(g.xs[2 + d]));
    });
    w
}

/// Reduction index `k`'s input element for the window, or 0 in the padding.
#[amdgpu_device]
#[inline(always)]
fn window_at<T: MatElem>(x: *const T, g: &Geom, table: *const u64, w: &Window, k: u32) -> f32 {
    let (off, dk) = unsafe { (load(table, 2 * k as usize), load(table, 2 * k as usize + 1)) };
    let mask = (1u64 << G_OFFSET_BITS) - 1;
    // Unsigned: a coordinate below zero wraps past the dim.
    let iz = w.corner[0].wrapping_add((dk & mask) as u32);
    let iy = w.corner[1].wrapping_add(((dk >> G_OFFSET_BITS) & mask) as u32);
    let ix = w.corner[2].wrapping_add((dk >> (2 * G_OFFSET_BITS)) as u32);
    if iz < g.inp[0] && iy < g.inp[1] && ix < g.inp[2] {
        unsafe { load(x, w.base.wrapping_add(off) as usize) }.widen()
    } else {
        0.0
    }
}

/// This workitem's four elements of X̂'s K-tile at `k0`: reduction indices
/// `k0 + kk0 + 4 r` of its column's window (zero from `k_end` on or past
/// the columns).
#[amdgpu_device]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn fetch_window<T: MatElem>(
    x: *const T,
    g: &Geom,
    table: *const u64,
    win: &Window,
    live: bool,
    (kk0, k0, k_end): (u32, u32, u32),
    out: &mut [f32; 4],
) {
    unroll4!(r < 4 => {
        let k = k0 + kk0 + 4 * r as u32;
        out[r] = if live && k < k_end { window_at(x, g, table, win, k) } else { 0.0 };
    });
}

/// The output offset of channel `c` at position `p` of image `n`.
#[amdgpu_device]
#[inline(always)]
fn out_offset(g: &Geom, n: u32, c: u32, p: u32) -> usize {
    let o = position(g, p);
    (n as u64 * g.ys[0]
        + c as u64 * g.ys[1]
        + o[0] as u64 * g.ys[2]
        + o[1] as u64 * g.ys[3]
        + o[2] as u64 * g.ys[4]) as usize
}

/// This workgroup's place in an implicit GEMM of `bm x bn` output tiles
/// (x: the tile, y: the group after `g0`): `(cols, m0, n0, group)`, the
/// GEMM's column count and the tile's first row and column.
#[amdgpu_device]
#[inline(always)]
fn gemm_tile(g: &Geom, g0: u32, bm: u32, bn: u32) -> (u32, u32, u32, u32) {
    let cols = g.batch * g.positions;
    let (m0, n0) = tile_corner(workgroup_id_x(), cols, bm, bn);
    (cols, m0, n0, g0 + workgroup_id_y())
}

/// Whether this workgroup is past the `bm x bn` tiles of its phase (a
/// launch over several phases is sized for the largest).
#[amdgpu_device]
#[inline(always)]
fn past_tiles(g: &Geom, bm: u32, bn: u32) -> bool {
    let tiles = g.cout_g.div_ceil(bm) as u64 * (g.batch * g.positions).div_ceil(bn) as u64;
    workgroup_id_x() as u64 >= tiles
}

/// The first row and column of tile `tile` (row-major over `bm x bn`
/// tiles of a GEMM with `cols` columns).
#[amdgpu_device]
#[inline(always)]
fn tile_corner(tile: u32, cols: u32, bm: u32, bn: u32) -> (u32, u32) {
    // At least 1: a division the compiler cannot prove safe calls the
    // panic handler.
    let tiles_n = Ord::max(cols.div_ceil(bn), 1);
    ((tile / tiles_n) * bm, (tile % tiles_n) * bn)
}

/// The body of `conv_gemm_*`: see the module doc. Phase
/// `workgroup_id_z()` (its `y`, `w` and `part` from the header's
/// [`G_Y_FIRST`], [`G_W_FIRST`] and [`G_PART_FIRST`] on), group `g0 +
/// workgroup_id_y()`; tile `workgroup_id_x() % tiles` of its `cout_g x
/// (batch * positions)` output, row-major over tiles.
///
/// `chunk` 0: each workgroup sums the whole reduction and stores its
/// outputs. Otherwise the reduction is split in chunks of `chunk` (a
/// multiple of [`GEMM_BK`]) for grids too small to fill the GPU: split
/// `workgroup_id_x() / tiles` sums its chunk and stores the f32 sums, no
/// bias, at `part[(c * splits + split) * cols + col]` (`c` the output
/// channel, `cols` the batch's positions), which [`conv_split_sum_body`]
/// adds up.
#[amdgpu_device]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub fn conv_gemm_body<T: MatElem>(
    y: *mut T,
    x: *const T,
    w: *const T,
    bias: *const T,
    geom: *const u64,
    g0: u32,
    part: *mut f32,
    chunk: u32,
) {
    let geom = phase_geom(geom);
    let g = read_geom(geom);
    let table = geom.wrapping_add(G_TABLE);
    let tid = workitem_id_x();
    let (tx, ty) = (tid % 16, tid / 16);
    let (m, k) = (g.cout_g, g.k);
    let cols = g.batch * g.positions;
    // At least 1: a division the compiler cannot prove safe calls the
    // panic handler.
    let tiles = Ord::max(m.div_ceil(CONV_GEMM_BM) * cols.div_ceil(CONV_GEMM_BN), 1);
    let splits = if chunk == 0 {
        1
    } else {
        Ord::max(k.div_ceil(chunk), 1)
    };
    // Past this phase's tiles and splits (the grid is sized for the
    // largest phase): nothing to do. Uniform over the workgroup.
    if workgroup_id_x() as u64 >= tiles as u64 * splits as u64 {
        return;
    }
    let (y, w) = (
        y.wrapping_add(g.y_first as usize),
        w.wrapping_add(g.w_first as usize),
    );
    let part = part.wrapping_add(g.part_first as usize);
    let (split, tile) = (workgroup_id_x() / tiles, workgroup_id_x() % tiles);
    let (m0, n0) = tile_corner(tile, cols, CONV_GEMM_BM, CONV_GEMM_BN);
    let group = g0 + workgroup_id_y();
    // This workgroup's reduction indices.
    let (k_lo, k_hi) = if chunk == 0 {
        (0, k)
    } else {
        let lo = Ord::min(split as u64 * chunk as u64, k as u64) as u32;
        (lo, Ord::min(lo as u64 + chunk as u64, k as u64) as u32)
    };
    let (ta, tb) = gemm_tiles::<GEMM_ROWS>(0);
    // The group's weights: a `[cout_g, K]` row-major operand.
    let wg = w.wrapping_add((group as u64 * m as u64 * k as u64) as usize);
    let la = gemm_tile_loads::<GEMM_ROWS>(m0, m, k, 1);
    // X̂'s tile is staged as a row-major GEMM operand's (its fast dim the
    // columns: neighbouring output positions read neighbouring inputs), so
    // this workitem's four elements share one column, at K rows
    // `tid / 64 + 4 r`.
    let col = n0 + tid % GEMM_BN;
    let kk0 = tid / GEMM_BN;
    let live = col < cols;
    let win = window(&g, col / g.positions, group, col % g.positions);
    // The epilogue below and fetch_window take 4 rows a workitem.
    const _: () = assert!(GEMM_ROWS == 4);
    let mut acc = [[0.0f32; 4]; GEMM_ROWS];
    let (mut ra, mut rb) = ([0.0f32; GEMM_ROWS], [0.0f32; 4]);
    gemm_fetch(wg, &la, k_lo, k_hi, 1, &mut ra);
    fetch_window(x, &g, table, &win, live, (kk0, k_lo, k_hi), &mut rb);
    let mut k0 = k_lo;
    while k0 < k_hi {
        // The previous step's reads of the tiles are done; stage this one.
        barrier();
        gemm_stage(ta, true, &ra);
        gemm_stage(tb, false, &rb);
        barrier();
        if k0 + GEMM_BK < k_hi {
            // The next step's loads fly while this step computes.
            gemm_fetch(wg, &la, k0 + GEMM_BK, k_hi, 1, &mut ra);
            fetch_window(x, &g, table, &win, live, (kk0, k0 + GEMM_BK, k_hi), &mut rb);
        }
        gemm_tile_fma(&mut acc, 0);
        k0 += GEMM_BK;
    }
    unroll4!(i < 4 => {
        let row = m0 + 4 * ty + i as u32;
        if row < m {
            let c = group * m + row;
            if chunk != 0 {
                let at = (c as u64 * splits as u64 + split as u64) * cols as u64;
                unroll4!(j < 4 => {
                    let col = n0 + 4 * tx + j as u32;
                    if col < cols {
                        unsafe { store(part, (at + col as u64) as usize, acc[i][j]) };
                    }
                });
            } else {
                let b = if bias.is_null() { 0.0 } else { unsafe { load(bias, c as usize) }.widen() };
                unroll4!(j < 4 => {
                    let col = n0 + 4 * tx + j as u32;
                    if col < cols {
                        let (n, p) = (col / g.positions, col % g.positions);
                        let v = T::from_f32(acc[i][j] + b);
                        unsafe { store(y, out_offset(&g, n, c, p), v) };
                    }
                });
            }
        }
    });
}

/// The body of `conv_split_sum_*`: the outputs of a `conv_gemm_*` launch
/// whose reduction was split (`splits` chunks, sums at `part` as
/// [`conv_gemm_body`] stores them), each the f32 sum of its chunks in
/// order plus the bias, rounded once; `cout` output channels, a workitem per
/// output in a grid-stride loop.
#[amdgpu_device]
#[inline(always)]
pub fn conv_split_sum_body<T: MatElem>(
    y: *mut T,
    part: *const f32,
    bias: *const T,
    geom: *const u64,
    splits: u32,
    cout: u32,
) {
    let g = read_geom(phase_geom(geom));
    let y = y.wrapping_add(g.y_first as usize);
    let part = part.wrapping_add(g.part_first as usize);
    let cols = g.batch * g.positions;
    let total = cout as u64 * cols as u64;
    // At least 1: see conv_gemm_body.
    let (cols, positions) = (Ord::max(cols, 1), Ord::max(g.positions, 1));
    let mut i = global_id_x();
    while i < total {
        let (c, col) = ((i / cols as u64) as u32, (i % cols as u64) as u32);
        let at = c as u64 * splits as u64 * cols as u64 + col as u64;
        let mut v = if bias.is_null() {
            0.0
        } else {
            unsafe { load(bias, c as usize) }.widen()
        };
        let mut s = 0;
        while s < splits {
            v += unsafe { load(part, (at + s as u64 * cols as u64) as usize) };
            s += 1;
        }
        let (n, p) = (col / positions, col % positions);
        unsafe { store(y, out_offset(&g, n, c, p), T::from_f32(v)) };
        i += global_size_x();
    }
}

/// The body of `conv_mma_*`: see the module doc. Group `g0 +
/// workgroup_id_y()`; tile `workgroup_id_x()` of its `cout_g x (batch *
/// positions)` output, row-major over tiles. `x` is channels-last: its
/// channel stride is 1 and its other strides, its start and `cin_g` are
/// multiples of 8 elements (the op layer's promise), so each group of 8
/// channels is one aligned 16-byte word. The table holds one entry per tap
/// (`k / cin_g`): its offset from the window's corner and its dilated
/// kernel offsets.
#[amdgpu_device]
#[inline(always)]
pub fn conv_mma_body<T: MatElem + crate::mma::MmaElem>(
    y: *mut T,
    x: *const T,
    w: *const T,
    bias: *const T,
    geom: *const u64,
    g0: u32,
) {
    // Never launched on a GPU without a matrix unit (the op layer takes
    // `conv_gemm_*` there), whose registers the loop would not fit.
    #[cfg(all(ferrocm_device, not(ferrocm_mma)))]
    {
        let _ = (y, x, w, bias, geom, g0);
        return;
    }
    #[allow(unreachable_code)]
    let geom = phase_geom(geom);
    let g = read_geom(geom);
    if past_tiles(&g, MMA_BM, MMA_BN) {
        return;
    }
    let (y, w) = (
        y.wrapping_add(g.y_first as usize),
        w.wrapping_add(g.w_first as usize),
    );
    let table = geom.wrapping_add(G_TABLE);
    let tid = workitem_id_x();
    let (m, k) = (g.cout_g, g.k);
    let (cols, m0, n0, group) = gemm_tile(&g, g0, MMA_BM, MMA_BN);
    let tn: u32 = if wave_size() >= 64 { 4 } else { 2 };
    let waves_n = MMA_BN / (16 * tn);
    let (wm, wn) = ((wave_id() / waves_n) * 64, (wave_id() % waves_n) * 16 * tn);
    // The group's weights: a `[cout_g, K]` row-major operand, K = (tap, ci).
    let oa = MmaOperand {
        p: w.wrapping_add((group as u64 * m as u64 * k as u64) as usize),
        i0: m0,
        size: m,
        i_stride: k,
        k_stride: 1,
        k_fast: true,
        words: true,
    };
    // X̂'s groups run along K (channels): this workitem's two groups are
    // columns `n0 + tid / 4` and 64 further, K rows `(tid % 4) * 8 ..`
    // (the loop's `mma_slot` with K fast).
    let kk = (tid % 4) * 8;
    let col = |gi: u32| n0 + tid / 4 + 64 * gi;
    let wins = [0, 1].map(|gi| window(&g, col(gi) / g.positions, group, col(gi) % g.positions));
    let cin_g = Ord::max(g.cin_g, 1);
    let fetch_b = |k0: u32| {
        let kq = k0 + kk;
        let mut v = [W128([0; 4]); 2];
        if kq < k {
            let tap = kq / cin_g;
            let ci = kq - tap * cin_g;
            let (off, dk) = unsafe {
                (
                    load(table, 2 * tap as usize),
                    load(table, 2 * tap as usize + 1),
                )
            };
            let mask = (1u64 << G_OFFSET_BITS) - 1;
            unroll4!(gi < 2 => {
                let win = &wins[gi];
                // Unsigned: a coordinate below zero wraps past the dim.
                let iz = win.corner[0].wrapping_add((dk & mask) as u32);
                let iy = win.corner[1].wrapping_add(((dk >> G_OFFSET_BITS) & mask) as u32);
                let ix = win.corner[2].wrapping_add((dk >> (2 * G_OFFSET_BITS)) as u32);
                if col(gi as u32) < cols && iz < g.inp[0] && iy < g.inp[1] && ix < g.inp[2] {
                    let at = win.base.wrapping_add(off).wrapping_add(ci as u64);
                    v[gi] = unsafe { load(x as *const W128, (at / 8) as usize) };
                }
            });
        }
        v
    };
    let fetch_a = mma_operand_fetch(oa, k, oa.whole());
    let fetch = |k0: u32, r: &mut [W128; 2 * MMA_FETCH_GROUPS], op: usize| {
        let v = if op == 0 { fetch_a(k0) } else { fetch_b(k0) };
        unroll4!(g < MMA_FETCH_GROUPS => {
            r[2 * g + op] = v[g];
        });
    };
    let acc = mma_k_loop_with::<T, true, true>((true, true), &fetch, k, (wm, wn, tn));
    // The tile's corner again (not held across the loop).
    let (m0, n0) = tile_corner(workgroup_id_x_again(), cols, MMA_BM, MMA_BN);
    use crate::mma::Acc;
    let len = Acc::len();
    unroll4!(j < 4 => {
        if (j as u32) < tn {
            // Each accumulator element's output offset but its channel's
            // term (its column's image and position: divisions once per
            // column, not per element).
            let mut base = [0u64; Acc::MAX_LEN];
            let mut inside = [false; Acc::MAX_LEN];
            unroll4!(e1 < Acc::MAX_LEN.div_ceil(4) => {
            unroll4!(e0 < 4 => {
                let e = 4 * e1 + e0;
                if e < Acc::MAX_LEN && (e as u32) < len {
                    let col = n0 + wn + 16 * j as u32 + Acc::at(e as u32).1;
                    inside[e] = col < cols;
                    base[e] = out_offset(&g, col / g.positions, 0, col % g.positions) as u64;
                }
            });
            });
            unroll4!(i < 4 => {
            unroll4!(e1 < Acc::MAX_LEN.div_ceil(4) => {
            unroll4!(e0 < 4 => {
                let e = 4 * e1 + e0;
                if e < Acc::MAX_LEN && (e as u32) < len {
                    let row = m0 + wm + 16 * i as u32 + Acc::at(e as u32).0;
                    if row < m && inside[e] {
                        let c = group * m + row;
                        let mut v = acc[i][j].value(e);
                        if !bias.is_null() {
                            v += unsafe { load(bias, c as usize) }.widen();
                        }
                        let at = base[e] + c as u64 * g.ys[1];
                        unsafe { store(y, at as usize, T::from_f32(v)) };
                    }
                }
            });
            });
            });
        }
        // One column of tiles' stores at a time (as the GEMM's epilogue).
        schedule_barrier();
    });
}

/// The body of `conv_wgmma_*`: `conv_mma_*`'s implicit GEMM (its
/// arguments, tiles, channels-last input and per-tap table) on Hopper's
/// warpgroup product ([`wgmma_k_loop_with`]): both operands' K steps go
/// straight from memory into LDS ([`lds_copy_async`]: the weights as a
/// matrix operand, X̂'s groups of 8 channels from where each column's
/// window puts them, zeros in the padding and past K), four stages, two
/// steps in flight while one is multiplied. The op library launches it where
/// `Device::warpgroup_mma` holds (the emulator at wave 32 checks its logic);
/// an empty body on AMD GPUs, where it is never launched.
#[amdgpu_device]
#[inline(always)]
pub fn conv_wgmma_body<T: MatElem + crate::mma::MmaElem>(
    y: *mut T,
    x: *const T,
    w: *const T,
    bias: *const T,
    geom: *const u64,
    g0: u32,
) {
    #[cfg(all(ferrocm_device, not(ferrocm_nvptx)))]
    {
        let _ = (y, x, w, bias, geom, g0);
        return;
    }
    #[allow(unreachable_code)]
    let geom = phase_geom(geom);
    let g = read_geom(geom);
    if past_tiles(&g, MMA_BM, MMA_BN) {
        return;
    }
    let (y, w) = (
        y.wrapping_add(g.y_first as usize),
        w.wrapping_add(g.w_first as usize),
    );
    use crate::mma::{WG_THREADS, wg_acc_at, wg_tile_byte};
    let table = geom.wrapping_add(G_TABLE);
    let tid = workitem_id_x();
    let (m, k) = (g.cout_g, g.k);
    let (cols, m0, n0, group) = gemm_tile(&g, g0, MMA_BM, MMA_BN);
    // The group's weights: a `[cout_g, K]` row-major operand, K = (tap, ci).
    let oa = MmaOperand {
        p: w.wrapping_add((group as u64 * m as u64 * k as u64) as usize),
        i0: m0,
        size: m,
        i_stride: k,
        k_stride: 1,
        k_fast: true,
        words: true,
    };
    let copy_a = wgmma_copier(oa, true, k);
    // X̂'s tile is K-major (8 channels of a position are one group): this
    // workitem's groups are columns `tid / 4 + 64 g` of the tile, all at
    // the same K of the step (`wgmma_group_at`).
    const _: () = assert!(WGMMA_GROUPS == 2 && MMA_BLOCK == 256);
    let slot = |gi: u32| wgmma_group_at(tid + MMA_BLOCK * gi, true);
    let kk = slot(0).1;
    let col = |gi: u32| n0 + slot(gi).0;
    let wins = [0, 1].map(|gi| window(&g, col(gi) / g.positions, group, col(gi) % g.positions));
    let live = [col(0) < cols, col(1) < cols];
    let cin_g = Ord::max(g.cin_g, 1);
    let copy_b = |tile: u32, k0: u32| {
        let dst = lds_at::<W128>(tile);
        let kq = k0 + kk;
        let inside = kq < k;
        // The tap's entry (any in range past K: nothing is read there).
        let tap = if inside { kq / cin_g } else { 0 };
        let ci = kq.wrapping_sub(tap * cin_g);
        let (off, dk) = unsafe {
            (
                load(table, 2 * tap as usize),
                load(table, 2 * tap as usize + 1),
            )
        };
        let mask = (1u64 << G_OFFSET_BITS) - 1;
        unroll4!(gi < 2 => {
            let win = &wins[gi];
            // Unsigned: a coordinate below zero wraps past the dim.
            let iz = win.corner[0].wrapping_add((dk & mask) as u32);
            let iy = win.corner[1].wrapping_add(((dk >> G_OFFSET_BITS) & mask) as u32);
            let ix = win.corner[2].wrapping_add((dk >> (2 * G_OFFSET_BITS)) as u32);
            let keep = inside && live[gi] && iz < g.inp[0] && iy < g.inp[1] && ix < g.inp[2];
            let at = win.base.wrapping_add(off).wrapping_add(ci as u64);
            let j = wg_tile_byte(true, slot(gi as u32).0, kk) / 16;
            unsafe { lds_copy_async(dst, j, x as *const W128, (at / 8) as usize, keep) };
        });
    };
    let copy = |ta: u32, tb: u32, k0: u32| {
        copy_a(ta, k0);
        copy_b(tb, k0);
    };
    let acc = wgmma_k_loop_with::<T, true, true>(&copy, k);
    // The tile's corner again (not held across the loop); this
    // warpgroup's 64 rows of it.
    let (m0, n0) = tile_corner(workgroup_id_x_again(), cols, MMA_BM, MMA_BN);
    let m0 = m0 + (tid / WG_THREADS) * 64;
    // Accumulator elements 4c + h: column pair c (h % 2 the column), rows
    // r and r + 8 (h / 2): each column's output offset once (its image and
    // position: divisions per column, not per element).
    crate::unroll64!(e => {
        let e = e as u32;
        if e % 4 < 2 {
            let (r, cc) = wg_acc_at(tid, e);
            let col = n0 + cc;
            if col < cols {
                let base = out_offset(&g, col / g.positions, 0, col % g.positions) as u64;
                unroll4!(h < 2 => {
                    let row = m0 + r + 8 * h as u32;
                    if row < m {
                        let c = group * m + row;
                        let mut v = acc.v[(e + 2 * h as u32) as usize];
                        if !bias.is_null() {
                            v += unsafe { load(bias, c as usize) }.widen();
                        }
                        unsafe { store(y, (base + c as u64 * g.ys[1]) as usize, T::from_f32(v)) };
                    }
                });
            }
        }
    });
}

/// The body of `conv_direct_*`: a workitem per output position
/// (`workgroup_id_x() * block + tid`), looping over the output rows (image,
/// channel) `workgroup_id_y()`, stepping by the grid's y size, each window
/// summed in f32 in reduction order. The row's image and channel are
/// uniform over the workgroup: no per-workitem division by the channels.
#[amdgpu_device]
#[inline(always)]
pub fn conv_direct_body<T: MatElem>(
    y: *mut T,
    x: *const T,
    w: *const T,
    bias: *const T,
    geom: *const u64,
    cout: u32,
) {
    let geom = phase_geom(geom);
    let g = read_geom(geom);
    let (y, w) = (
        y.wrapping_add(g.y_first as usize),
        w.wrapping_add(g.w_first as usize),
    );
    let table = geom.wrapping_add(G_TABLE);
    let p = workgroup_id_x() * workgroup_size_x() + workitem_id_x();
    if p >= g.positions {
        return;
    }
    let rows = g.batch * cout;
    let mut row = workgroup_id_y();
    while row < rows {
        let (n, c) = (row / cout, row % cout);
        let win = window(&g, n, c / g.cout_g, p);
        let wc = w.wrapping_add((c as u64 * g.k as u64) as usize);
        let mut acc = if bias.is_null() {
            0.0
        } else {
            unsafe { load(bias, c as usize) }.widen()
        };
        let mut k = 0;
        while k < g.k {
            let v = window_at(x, &g, table, &win, k);
            acc = math::fma(unsafe { load(wc, k as usize) }.widen(), v, acc);
            k += 1;
        }
        unsafe { store(y, out_offset(&g, n, c, p), T::from_f32(acc)) };
        row += num_workgroups_y();
    }
}

/// Output channels per group from which `conv_gemm_*` is used (fewer go
/// to `conv_direct_*`).
pub const CONV_GEMM_MIN_COUT_G: usize = 16;

#[cfg(not(ferrocm_device))]
use crate::host::KernelRef;

/// The parameter types of `conv_gemm_{T}`: `(y, x, w, bias, geom, g0,
/// part, chunk)`.
#[cfg(not(ferrocm_device))]
pub type ConvGemmArgs<T> = (
    *mut T,
    *const T,
    *const T,
    *const T,
    *const u64,
    u32,
    *mut f32,
    u32,
);
/// The parameter types of `conv_split_sum_{T}`: `(y, part, bias, geom,
/// splits, cout)`.
#[cfg(not(ferrocm_device))]
pub type ConvSplitSumArgs<T> = (*mut T, *const f32, *const T, *const u64, u32, u32);
/// The parameter types of `conv_mma_{T}` and `conv_wgmma_{T}`: `(y, x, w,
/// bias, geom, g0)`.
#[cfg(not(ferrocm_device))]
pub type ConvMmaArgs<T> = (*mut T, *const T, *const T, *const T, *const u64, u32);
/// The parameter types of `conv_direct_{T}`: `(y, x, w, bias, geom, cout)`.
#[cfg(not(ferrocm_device))]
pub type ConvDirectArgs<T> = (*mut T, *const T, *const T, *const T, *const u64, u32);

/// The convolution kernels of an element type (float types; host side).
#[cfg(not(ferrocm_device))]
pub trait ConvKernels: Sized + 'static {
    /// `conv_gemm_{T}`, if the type has one.
    const CONV_GEMM: Option<KernelRef<ConvGemmArgs<Self>>>;
    /// `conv_split_sum_{T}`, if the type has one.
    const CONV_SPLIT_SUM: Option<KernelRef<ConvSplitSumArgs<Self>>>;
    /// `conv_direct_{T}`, if the type has one.
    const CONV_DIRECT: Option<KernelRef<ConvDirectArgs<Self>>>;
    /// `conv_mma_{T}` (f16, bf16), if the type has one.
    const CONV_MMA: Option<KernelRef<ConvMmaArgs<Self>>>;
    /// `conv_wgmma_{T}` (f16, bf16; Hopper's warpgroup product), if the
    /// type has one.
    const CONV_WGMMA: Option<KernelRef<ConvMmaArgs<Self>>>;
}

macro_rules! conv_kernels {
    ($($gemm:ident, $sum:ident, $direct:ident $(, $mma:ident, $wgmma:ident)?: $t:ty),*; none: $($n:ty),*) => {
        $(
            #[cfg(not(ferrocm_device))]
            impl ConvKernels for $t {
                const CONV_GEMM: Option<KernelRef<ConvGemmArgs<Self>>> = Some(KernelRef::of::<$gemm>());
                const CONV_SPLIT_SUM: Option<KernelRef<ConvSplitSumArgs<Self>>> = Some(KernelRef::of::<$sum>());
                const CONV_DIRECT: Option<KernelRef<ConvDirectArgs<Self>>> = Some(KernelRef::of::<$direct>());
                const CONV_MMA: Option<KernelRef<ConvMmaArgs<Self>>> = conv_kernels!(@opt $($mma)?);
                const CONV_WGMMA: Option<KernelRef<ConvMmaArgs<Self>>> = conv_kernels!(@opt $($wgmma)?);
            }
        )*
        $(
            #[cfg(not(ferrocm_device))]
            impl ConvKernels for $n {
                const CONV_GEMM: Option<KernelRef<ConvGemmArgs<Self>>> = None;
                const CONV_SPLIT_SUM: Option<KernelRef<ConvSplitSumArgs<Self>>> = None;
                const CONV_DIRECT: Option<KernelRef<ConvDirectArgs<Self>>> = None;
                const CONV_MMA: Option<KernelRef<ConvMmaArgs<Self>>> = None;
                const CONV_WGMMA: Option<KernelRef<ConvMmaArgs<Self>>> = None;
            }
        )*
        kernels! {$(
            fn $gemm(y: *mut $t, x: *const $t, w: *const $t, bias: *const $t, geom: *const u64, g0: u32,
                     part: *mut f32, chunk: u32) {
                conv_gemm_body::<$t>(y, x, w, bias, geom, g0, part, chunk)
            }
            fn $sum(y: *mut $t, part: *const f32, bias: *const $t, geom: *const u64, splits: u32, cout: u32) {
                conv_split_sum_body::<$t>(y, part, bias, geom, splits, cout)
            }
            fn $direct(y: *mut $t, x: *const $t, w: *const $t, bias: *const $t, geom: *const u64, cout: u32) {
                conv_direct_body::<$t>(y, x, w, bias, geom, cout)
            }
            $(
            fn $mma(y: *mut $t, x: *const $t, w: *const $t, bias: *const $t, geom: *const u64, g0: u32) {
                conv_mma_body::<$t>(y, x, w, bias, geom, g0)
            }
            fn $wgmma(y: *mut $t, x: *const $t, w: *const $t, bias: *const $t, geom: *const u64, g0: u32) {
                conv_wgmma_body::<$t>(y, x, w, bias, geom, g0)
            }
            )?
        )*}
    };
    (@opt $mma:ident) => { Some(KernelRef::of::<$mma>()) };
    (@opt) => { None };
}

conv_kernels!(
    conv_gemm_f32, conv_split_sum_f32, conv_direct_f32: f32,
    conv_gemm_f16, conv_split_sum_f16, conv_direct_f16, conv_mma_f16, conv_wgmma_f16: F16,
    conv_gemm_bf16, conv_split_sum_bf16, conv_direct_bf16, conv_mma_bf16, conv_wgmma_bf16: Bf16;
    none: u8, u32, i64
);

/// The launch shape of `conv_gemm_*`: [`GEMM_BLOCK`] workitems, LDS
/// [`CONV_GEMM_LDS_BYTES`].
pub const CONV_GEMM_BLOCK: u32 = GEMM_BLOCK;
/// Output channels per `conv_gemm_*` workgroup: 64 (each workitem
/// [`GEMM_ROWS`] rows, as `gemm_{dtype}`), so 64-channel layers fill their
/// tiles.
pub const CONV_GEMM_BM: u32 = gemm_bm(GEMM_ROWS);
/// Output positions per `conv_gemm_*` workgroup.
pub const CONV_GEMM_BN: u32 = GEMM_BN;
/// LDS of a `conv_gemm_*` workgroup: one stage of the FMA tiles.
pub const CONV_GEMM_LDS_BYTES: u32 = fma_stage_bytes(GEMM_ROWS);
