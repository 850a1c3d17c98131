//! Pooling in 1, 2 and 3 spatial dims (f32, f16, bf16): max (with the
//! index of each maximum), average, and the adaptive forms of both.
//!
//! Every pool is a window per output position; where the windows lie is
//! worked out once on the host, per spatial dim and output index, into a
//! table the kernels (and the op layer's Cpu path) read: the first tap
//! inside the input, the number of taps inside it, and the dim's factor of
//! an average's divisor. So one body serves PyTorch's `max_pool*d` (stride,
//! padding, dilation, `ceil_mode`), `avg_pool*d` (`count_include_pad`,
//! `divisor_override`) and `adaptive_*_pool*d` (windows `floor(o·in/out) ..
//! ceil((o+1)·in/out)`), and the kernels never divide by a window's shape.
//!
//! - `pool_max_{dtype}`: the window's maximum and the input position it
//!   came from (flattened over the input's spatial dims, as PyTorch's
//!   indices are), NaN winning as in PyTorch ([`pool_max_takes`]);
//!   `pool_max_values_{dtype}` the maximum alone.
//! - `pool_avg_{dtype}`: the window's f32 sum divided by the divisor.
//!
//! A workitem per output position (grid x), looping over the `(image,
//! channel)` rows from the grid's y, four rows at a time; inputs and outputs at any strides
//! (NCHW, or NHWC as a permuted view). Spatial dims are always three: a 1-d
//! or 2-d pool has leading dims of size 1.

use crate::device::*;
use crate::elem::*;
use crate::kernels;
use crate::matmul::dense::MatElem;
use crate::unroll4;
use rocm_kernel_macros::{amdgpu_device, amdgpu_global};

/// Header word: the output rows (images x channels).
pub const P_ROWS: usize = 0;
/// Header word: the channels (a row's `(n, c)` is `(row / C, row % C)`).
pub const P_CHANNELS: usize = 1;
/// Header word: output positions per row (`od * oh * ow`).
pub const P_POSITIONS: usize = 2;
/// Header words: the output's spatial dims `(od, oh, ow)`.
pub const P_OUT: usize = 3;
/// Header words: the input's two inner spatial dims `(h, w)` (to flatten an
/// index).
pub const P_IN_HW: usize = 6;
/// Header words: the distance between taps along each dim (the dilation).
pub const P_DILATION: usize = 8;
/// Header words: the input's element strides `(n, c, d, h, w)`.
pub const P_X_STRIDES: usize = 11;
/// Header words: the output's element strides `(n, c, d, h, w)` (the
/// indices' too).
pub const P_Y_STRIDES: usize = 16;
/// Header word: an average's divisor for every window, or 0 for the
/// product of the table's factors.
pub const P_DIVISOR: usize = 21;
/// Words of the header; the window table follows: for each spatial dim in
/// turn and each of its output indices, two words: the first tap inside the
/// input (low 32 bits; for an empty window the first tap at or past 0) and
/// the count of taps inside it (high 32 bits), then the dim's divisor
/// factor.
pub const P_TABLE: usize = 22;

/// Whether a max pool's running maximum `m` gives way to `v`: a larger
/// value, or any NaN (PyTorch's rule: a NaN in the window is the result,
/// its index the last NaN's). The kernels and the Cpu path both use it.
///
/// ```
/// use ferrocm_kernels::conv::pool::pool_max_takes;
/// assert!(pool_max_takes(2.0, 1.0) && !pool_max_takes(1.0, 1.0));
/// assert!(pool_max_takes(f32::NAN, f32::INFINITY) && pool_max_takes(f32::NAN, f32::NAN));
/// assert!(!pool_max_takes(f32::INFINITY, f32::NAN));
/// ```
#[amdgpu_device]
#[inline(always)]
pub fn pool_max_takes(v: f32, m: f32) -> bool {
    v > m || v.is_nan()
}

/// A window along one dim: its first tap, the taps inside the input, the
/// dim's divisor factor.
#[amdgpu_device]
#[derive(Clone, Copy)]
struct Span {
    first: u32,
    count: u32,
    factor: u32,
}

#[amdgpu_device]
#[derive(Clone, Copy)]
struct PoolGeom {
    rows: u32,
    channels: u32,
    positions: u32,
    out: [u32; 3],
    in_hw: [u32; 2],
    dilation: [u32; 3],
    xs: [u64; 5],
    ys: [u64; 5],
    divisor: u32,
}

#[amdgpu_device]
#[inline(always)]
fn read_geom(g: *const u64) -> PoolGeom {
    let w = |i: usize| unsafe { load(g, i) };
    let w32 = |i: usize| w(i) as u32;
    PoolGeom {
        rows: w32(P_ROWS),
        channels: w32(P_CHANNELS),
        positions: w32(P_POSITIONS),
        out: [w32(P_OUT), w32(P_OUT + 1), w32(P_OUT + 2)],
        in_hw: [w32(P_IN_HW), w32(P_IN_HW + 1)],
        dilation: [w32(P_DILATION), w32(P_DILATION + 1), w32(P_DILATION + 2)],
        xs: [
            w(P_X_STRIDES),
            w(P_X_STRIDES + 1),
            w(P_X_STRIDES + 2),
            w(P_X_STRIDES + 3),
            w(P_X_STRIDES + 4),
        ],
        ys: [
            w(P_Y_STRIDES),
            w(P_Y_STRIDES + 1),
            w(P_Y_STRIDES + 2),
            w(P_Y_STRIDES + 3),
            w(P_Y_STRIDES + 4),
        ],
        divisor: w32(P_DIVISOR),
    }
}

/// Output position `p`'s coordinates and its window along each dim.
#[amdgpu_device]
#[inline(always)]
fn spans(g: &PoolGeom, geom: *const u64, p: u32) -> ([u32; 3], [Span; 3]) {
    let hw = g.out[1] * g.out[2];
    let o = [p / hw, (p / g.out[2]) % g.out[1], p % g.out[2]];
    let mut s = [Span {
        first: 0,
        count: 0,
        factor: 0,
    }; 3];
    let mut at = P_TABLE;
    unroll4!(d < 3 => {
        let e = at + 2 * o[d] as usize;
        let w = unsafe { load(geom, e) };
        s[d] = Span {
            first: w as u32,
            count: (w >> 32) as u32,
            factor: unsafe { load(geom, e + 1) } as u32,
        };
        at += 2 * g.out[d] as usize;
    });
    (o, s)
}

/// The offset of output position `o` within its `(n, c)` row (value and
/// index alike).
#[amdgpu_device]
#[inline(always)]
fn y_position(g: &PoolGeom, o: [u32; 3]) -> u64 {
    o[0] as u64 * g.ys[2] + o[1] as u64 * g.ys[3] + o[2] as u64 * g.ys[4]
}

/// The offset of row `row`'s output at position offset `at` (from
/// [`y_position`]).
#[amdgpu_device]
#[inline(always)]
fn y_offset(g: &PoolGeom, row: u32, at: u64) -> usize {
    ((row / g.channels) as u64 * g.ys[0] + (row % g.channels) as u64 * g.ys[1] + at) as usize
}

/// Rows a workitem pools at once. A window's taps along a row mostly hit
/// the L1 after the first, so one row at a time leaves a workitem about one
/// memory miss in flight per window row; four rows (`num_workgroups_y`
/// apart, as they would be visited one by one) put four in flight and share
/// each tap's offset arithmetic. The host gives a workitem at least this
/// many rows where there are enough.
pub const POOL_ROWS_AT_ONCE: usize = 4;
const ROWS_AT_ONCE: usize = POOL_ROWS_AT_ONCE;

/// Whether row `row + r·step` exists (`row` does): the same across the
/// workgroup. A comparison, not a count of the rows left, which would
/// divide by the step (the host keeps `step` within the grid's y limit,
/// so `r·step` does not overflow).
#[amdgpu_device]
#[inline(always)]
fn row_exists(g: &PoolGeom, row: u32, step: u32, r: usize) -> bool {
    (r as u32) * step < g.rows - row
}

/// The input offsets of the window's first tap `w0` in rows `row + r·step`
/// for `r < ROWS_AT_ONCE`. With `CLAMP` a row past the last has `row`'s
/// offsets, so that its loads stay in bounds (its result is not stored);
/// without, its offsets are meaningless and must not be loaded from. Per
/// workitem (vector registers): the rows' own offsets are the same across
/// the workgroup and would otherwise hold eight scalar registers through
/// the tap loop.
#[amdgpu_device]
#[inline(always)]
fn row_starts<const CLAMP: bool>(
    g: &PoolGeom,
    row: u32,
    step: u32,
    w0: u64,
) -> [u64; ROWS_AT_ONCE] {
    let mut starts = [0u64; ROWS_AT_ONCE];
    unroll4!(r < ROWS_AT_ONCE => {
        let at = if !CLAMP || row_exists(g, row, step, r) {
            row.wrapping_add(r as u32 * step)
        } else {
            row
        };
        starts[r] = (at / g.channels) as u64 * g.xs[0] + (at % g.channels) as u64 * g.xs[1] + w0;
    });
    starts
}

/// The body of `pool_max_*` (`INDICES`: each maximum's index too, into
/// `idx`, which may still be null) and `pool_max_values_*` (values only:
/// no index is tracked, which saves the max pool a quarter of its
/// registers and its index arithmetic). See the module doc.
#[amdgpu_device]
#[inline(always)]
pub fn pool_max_body<T: MatElem, const INDICES: bool>(
    y: *mut T,
    idx: *mut i64,
    x: *const T,
    geom: *const u64,
) {
    let g = read_geom(geom);
    let p = workgroup_id_x() * workgroup_size_x() + workitem_id_x();
    if p >= g.positions {
        return;
    }
    let (o, s) = spans(&g, geom, p);
    // Per workitem, so the position's strides leave the scalar registers.
    let yo = y_position(&g, o);
    let plane = g.in_hw[0] as u64 * g.in_hw[1] as u64;
    // The window's first tap: its input offset within a row and its index.
    let w0 =
        s[0].first as u64 * g.xs[2] + s[1].first as u64 * g.xs[3] + s[2].first as u64 * g.xs[4];
    let first =
        s[0].first as u64 * plane + s[1].first as u64 * g.in_hw[1] as u64 + s[2].first as u64;
    let step = num_workgroups_y();
    let mut row = workgroup_id_y();
    while row < g.rows {
        let starts = row_starts::<true>(&g, row, step, w0);
        let mut m = [f32::NEG_INFINITY; ROWS_AT_ONCE];
        let mut at = [0u64; ROWS_AT_ONCE];
        let mut a = 0;
        while a < s[0].count {
            let (dz, fz) = (
                (a * g.dilation[0]) as u64 * g.xs[2],
                (a * g.dilation[0]) as u64 * plane,
            );
            let mut b = 0;
            while b < s[1].count {
                let dy = (b * g.dilation[1]) as u64;
                let (dzy, fzy) = (dz + dy * g.xs[3], fz + dy * g.in_hw[1] as u64);
                let mut e = 0;
                while e < s[2].count {
                    // The tap's distance from the window's first, in the
                    // row and as an index.
                    let dx = (e * g.dilation[2]) as u64;
                    let tap = dzy + dx * g.xs[4];
                    let mut v = [0.0f32; ROWS_AT_ONCE];
                    // Every row's load, past the last too (measured: a
                    // branch around each costs the max pool 15% on an H100,
                    // where it gains the average pool 8%).
                    unroll4!(r < ROWS_AT_ONCE => {
                        v[r] = unsafe { load(x, (starts[r] + tap) as usize) }.widen();
                    });
                    unroll4!(r < ROWS_AT_ONCE => {
                        if pool_max_takes(v[r], m[r]) {
                            m[r] = v[r];
                            if INDICES {
                                at[r] = fzy + dx;
                            }
                        }
                    });
                    e += 1;
                }
                b += 1;
            }
            a += 1;
        }
        unroll4!(r < ROWS_AT_ONCE => {
            let this = row + r as u32 * step;
            if row_exists(&g, row, step, r) {
                let dst = y_offset(&g, this, yo);
                unsafe { store(y, dst, T::from_f32(m[r])) };
                if INDICES && !idx.is_null() {
                    unsafe { store(idx, dst, (first + at[r]) as i64) };
                }
            }
        });
        row += ROWS_AT_ONCE as u32 * step;
    }
}

/// The body of `pool_avg_*`: see the module doc. A window with no tap
/// inside the input gives 0 (as PyTorch's).
#[amdgpu_device]
#[inline(always)]
pub fn pool_avg_body<T: MatElem>(y: *mut T, x: *const T, geom: *const u64) {
    let g = read_geom(geom);
    let p = workgroup_id_x() * workgroup_size_x() + workitem_id_x();
    if p >= g.positions {
        return;
    }
    let (o, s) = spans(&g, geom, p);
    let yo = y_position(&g, o);
    let divisor = if g.divisor != 0 {
        g.divisor
    } else {
        s[0].factor * s[1].factor * s[2].factor
    };
    // u64: an adaptive window may hold more than 2^32 taps.
    let taps = s[0].count as u64 * s[1].count as u64 * s[2].count as u64;
    let empty = taps == 0;
    let w0 =
        s[0].first as u64 * g.xs[2] + s[1].first as u64 * g.xs[3] + s[2].first as u64 * g.xs[4];
    let step = num_workgroups_y();
    let mut row = workgroup_id_y();
    while row < g.rows {
        let starts = row_starts::<false>(&g, row, step, w0);
        let mut sum = [0.0f32; ROWS_AT_ONCE];
        // The window's taps in one loop (dims outer to inner, as the Cpu
        // sums them): three nested loops of per-workitem trip counts hold
        // more scalar registers (their exit masks) than the rows leave.
        let (mut e, mut b) = (0u32, 0u32);
        let (mut plane_at, mut line_at) = (0u64, 0u64);
        let mut t = 0u64;
        while t < taps {
            let tap = line_at + e as u64 * g.xs[4];
            let mut v = [0.0f32; ROWS_AT_ONCE];
            unroll4!(r < ROWS_AT_ONCE => {
                if row_exists(&g, row, step, r) {
                    v[r] = unsafe { load(x, (starts[r] + tap) as usize) }.widen();
                }
            });
            unroll4!(r < ROWS_AT_ONCE => {
                sum[r] += v[r];
            });
            e += 1;
            if e == s[2].count {
                e = 0;
                b += 1;
                line_at += g.xs[3];
                if b == s[1].count {
                    b = 0;
                    plane_at += g.xs[2];
                    line_at = plane_at;
                }
            }
            t += 1;
        }
        unroll4!(r < ROWS_AT_ONCE => {
            let this = row + r as u32 * step;
            if row_exists(&g, row, step, r) {
                let v = if empty { 0.0 } else { sum[r] / divisor as f32 };
                unsafe { store(y, y_offset(&g, this, yo), T::from_f32(v)) };
            }
        });
        row += ROWS_AT_ONCE as u32 * step;
    }
}

#[cfg(not(ferrocm_device))]
use crate::host::KernelRef;

/// The parameter types of `pool_max_{T}`: `(y, indices or null, x, geom)`.
#[cfg(not(ferrocm_device))]
pub type PoolMaxArgs<T> = (*mut T, *mut i64, *const T, *const u64);
/// The parameter types of `pool_avg_{T}` and `pool_max_values_{T}`: `(y, x,
/// geom)`.
#[cfg(not(ferrocm_device))]
pub type PoolAvgArgs<T> = (*mut T, *const T, *const u64);

/// The pooling kernels of an element type (float types; host side).
#[cfg(not(ferrocm_device))]
pub trait PoolKernels: Sized + 'static {
    /// `pool_max_{T}` (values and indices), if the type has one.
    const POOL_MAX: Option<KernelRef<PoolMaxArgs<Self>>>;
    /// `pool_max_values_{T}` (values only), if the type has one.
    const POOL_MAX_VALUES: Option<KernelRef<PoolAvgArgs<Self>>>;
    /// `pool_avg_{T}`, if the type has one.
    const POOL_AVG: Option<KernelRef<PoolAvgArgs<Self>>>;
}

macro_rules! pool_kernels {
    ($($max:ident, $values:ident, $avg:ident: $t:ty),*; none: $($n:ty),*) => {
        $(
            #[cfg(not(ferrocm_device))]
            impl PoolKernels for $t {
                const POOL_MAX: Option<KernelRef<PoolMaxArgs<Self>>> = Some(KernelRef::of::<$max>());
                const POOL_MAX_VALUES: Option<KernelRef<PoolAvgArgs<Self>>> = Some(KernelRef::of::<$values>());
                const POOL_AVG: Option<KernelRef<PoolAvgArgs<Self>>> = Some(KernelRef::of::<$avg>());
            }
        )*
        $(
            #[cfg(not(ferrocm_device))]
            impl PoolKernels for $n {
                const POOL_MAX: Option<KernelRef<PoolMaxArgs<Self>>> = None;
                const POOL_MAX_VALUES: Option<KernelRef<PoolAvgArgs<Self>>> = None;
                const POOL_AVG: Option<KernelRef<PoolAvgArgs<Self>>> = None;
            }
        )*
        kernels! {$(
            fn $max(y: *mut $t, idx: *mut i64, x: *const $t, geom: *const u64) {
                pool_max_body::<$t, true>(y, idx, x, geom)
            }
            fn $values(y: *mut $t, x: *const $t, geom: *const u64) {
                pool_max_body::<$t, false>(y, core::ptr::null_mut(), x, geom)
            }
            fn $avg(y: *mut $t, x: *const $t, geom: *const u64) {
                pool_avg_body::<$t>(y, x, geom)
            }
        )*}
    };
}

pool_kernels!(
    pool_max_f32, pool_max_values_f32, pool_avg_f32: f32,
    pool_max_f16, pool_max_values_f16, pool_avg_f16: F16,
    pool_max_bf16, pool_max_values_bf16, pool_avg_bf16: Bf16;
    none: u8, u32, i64
);
