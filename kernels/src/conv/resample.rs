//! Resizing images (f32, f16, bf16): PyTorch's `upsample_nearest2d` and
//! `upsample_bilinear2d` (`interpolate(mode="nearest" | "bilinear")`), to any
//! output size, larger or smaller.
//!
//! Where each output row and column reads is worked out on the host once
//! per output index (PyTorch's source-index formulas, in f32 as PyTorch
//! computes them) into a table the kernels and the op layer's Cpu path both
//! read: the two source indices and the weight of the second. So the
//! kernels hold no scale arithmetic, and the Cpu and GPU agree bit for bit.
//!
//! A workitem per output position (grid x), or per chunk of eight output
//! columns where the output's rows allow one store a chunk ([`R_CHUNKS`]),
//! looping over the `(image, channel)` rows from the grid's y; inputs and
//! outputs at any strides.

use crate::device::*;
use crate::elem::*;
use crate::kernels;
use crate::matmul::dense::MatElem;
use rocm_kernel_macros::{amdgpu_device, amdgpu_global};

/// Header word: the output rows (images x channels).
pub const R_ROWS: usize = 0;
/// Header word: the channels (a row's `(n, c)` is `(row / C, row % C)`).
pub const R_CHANNELS: usize = 1;
/// Header words: the output's size `(oh, ow)`.
pub const R_OUT: usize = 2;
/// Header words: the input's element strides `(n, c, h, w)`.
pub const R_X_STRIDES: usize = 4;
/// Header words: the output's element strides `(n, c, h, w)`.
pub const R_Y_STRIDES: usize = 8;
/// Header word: 1 where each workitem writes a chunk of [`CHUNK`] output
/// columns in one store (grid x counts chunks): the host sets it where a
/// row's columns are contiguous, a whole number of chunks, and every row
/// starts a whole number of chunks from the output's start.
pub const R_CHUNKS: usize = 12;
/// Words of the header; the table follows: an entry per output row, then
/// one per output column ([`resample_entry`]).
pub const R_TABLE: usize = 13;

/// A table entry: source index `i0` (below 2^31; the low 31 bits), the step
/// to the second source index (0 or 1; bit 31) and the second's weight
/// `lambda` (f32 bits, the high word; the first's is `1 - lambda`).
///
/// ```
/// use ferrocm_kernels::conv::resample::{resample_entry, resample_unpack};
/// assert_eq!(resample_unpack(resample_entry(7, 1, 0.25)), (7, 8, 0.75, 0.25));
/// ```
pub fn resample_entry(i0: u32, step: u32, lambda: f32) -> u64 {
    (i0 as u64) | ((step as u64) << 31) | ((lambda.to_bits() as u64) << 32)
}

/// An entry's `(i0, i1, 1 - lambda, lambda)`.
#[amdgpu_device]
#[inline(always)]
pub fn resample_unpack(e: u64) -> (u32, u32, f32, f32) {
    let i0 = (e as u32) & 0x7fff_ffff;
    let i1 = i0 + ((e >> 31) as u32 & 1);
    let l1 = f32::from_bits((e >> 32) as u32);
    (i0, i1, 1.0 - l1, l1)
}

/// The bilinear blend of a 2 x 2 neighbourhood `[[v00, v01], [v10, v11]]`
/// with row weights `(h0, h1)` and column weights `(w0, w1)`, in PyTorch's
/// order. The kernels and the Cpu path both use it.
#[amdgpu_device]
#[inline(always)]
pub fn bilinear_blend(v: [f32; 4], h: (f32, f32), w: (f32, f32)) -> f32 {
    h.0 * (w.0 * v[0] + w.1 * v[1]) + h.1 * (w.0 * v[2] + w.1 * v[3])
}

#[amdgpu_device]
#[derive(Clone, Copy)]
struct ResampleGeom {
    rows: u32,
    channels: u32,
    out: [u32; 2],
    xs: [u64; 4],
    ys: [u64; 4],
    chunks: bool,
}

#[amdgpu_device]
#[inline(always)]
fn read_geom(g: *const u64) -> ResampleGeom {
    let w = |i: usize| unsafe { load(g, i) };
    ResampleGeom {
        rows: w(R_ROWS) as u32,
        channels: w(R_CHANNELS) as u32,
        out: [w(R_OUT) as u32, w(R_OUT + 1) as u32],
        xs: [
            w(R_X_STRIDES),
            w(R_X_STRIDES + 1),
            w(R_X_STRIDES + 2),
            w(R_X_STRIDES + 3),
        ],
        ys: [
            w(R_Y_STRIDES),
            w(R_Y_STRIDES + 1),
            w(R_Y_STRIDES + 2),
            w(R_Y_STRIDES + 3),
        ],
        chunks: w(R_CHUNKS) != 0,
    }
}

/// The body of `upsample_nearest_*` (`BILINEAR` false: each output copies
/// its first source) and `upsample_bilinear_*`.
#[amdgpu_device]
#[inline(always)]
pub fn resample_body<T: MatElem, const BILINEAR: bool>(y: *mut T, x: *const T, geom: *const u64) {
    let g = read_geom(geom);
    let q = workgroup_id_x() * workgroup_size_x() + workitem_id_x();
    let p = if g.chunks { q * CHUNK as u32 } else { q };
    if p >= g.out[0] * g.out[1] {
        return;
    }
    let (oy, ox) = (p / g.out[1], p % g.out[1]);
    let (y0, y1, h0, h1) = resample_unpack(unsafe { load(geom, R_TABLE + oy as usize) });
    if g.chunks {
        resample_chunks::<T, BILINEAR>(y, x, geom, &g, oy, ox, (y0, y1, h0, h1));
        return;
    }
    let (x0, x1, w0, w1) =
        resample_unpack(unsafe { load(geom, R_TABLE + (g.out[0] + ox) as usize) });
    let (r0, r1) = (y0 as u64 * g.xs[2], y1 as u64 * g.xs[2]);
    let (c0, c1) = (x0 as u64 * g.xs[3], x1 as u64 * g.xs[3]);
    let mut row = workgroup_id_y();
    while row < g.rows {
        let (n, c) = (row / g.channels, row % g.channels);
        let xb = n as u64 * g.xs[0] + c as u64 * g.xs[1];
        let at = |o: u64| unsafe { load(x, (xb + o) as usize) };
        let v = if BILINEAR {
            let v = [at(r0 + c0), at(r0 + c1), at(r1 + c0), at(r1 + c1)];
            T::from_f32(bilinear_blend(v.map(|e| e.widen()), (h0, h1), (w0, w1)))
        } else {
            at(r0 + c0)
        };
        let dst =
            n as u64 * g.ys[0] + c as u64 * g.ys[1] + oy as u64 * g.ys[2] + ox as u64 * g.ys[3];
        unsafe { store(y, dst as usize, v) };
        row += num_workgroups_y();
    }
}

/// [`resample_body`]'s chunked form: output columns `ox..ox + CHUNK` of
/// output row `oy` (source rows and weights `rows`), one store a chunk.
#[amdgpu_device]
#[inline(always)]
fn resample_chunks<T: MatElem, const BILINEAR: bool>(
    y: *mut T,
    x: *const T,
    geom: *const u64,
    g: &ResampleGeom,
    oy: u32,
    ox: u32,
    rows: (u32, u32, f32, f32),
) {
    let (y0, y1, h0, h1) = rows;
    let (r0, r1) = (y0 as u64 * g.xs[2], y1 as u64 * g.xs[2]);
    let entries = || {
        chunk_of(|k| {
            let (x0, x1, w0, w1) =
                resample_unpack(unsafe { load(geom, R_TABLE + (g.out[0] + ox) as usize + k) });
            (x0 as u64 * g.xs[3], x1 as u64 * g.xs[3], w0, w1)
        })
    };
    let held = entries();
    let mut row = workgroup_id_y();
    while row < g.rows {
        // Bilinear reads its columns' entries again for each row (cache
        // hits): held across the rows, eight columns' offsets and weights
        // took 96 registers and held the H100 to a quarter of its
        // occupancy; nearest's offsets alone are cheaper held.
        let cols = if BILINEAR { entries() } else { held };
        let (n, c) = (row / g.channels, row % g.channels);
        let xb = n as u64 * g.xs[0] + c as u64 * g.xs[1];
        let at = |o: u64| unsafe { load(x, (xb + o) as usize) };
        let v = chunk_of(|k| {
            let (c0, c1, w0, w1) = cols[k];
            if BILINEAR {
                let v = [at(r0 + c0), at(r0 + c1), at(r1 + c0), at(r1 + c1)];
                T::from_f32(bilinear_blend(v.map(|e| e.widen()), (h0, h1), (w0, w1)))
            } else {
                at(r0 + c0)
            }
        });
        let dst = n as u64 * g.ys[0] + c as u64 * g.ys[1] + oy as u64 * g.ys[2] + ox as u64;
        unsafe { store_chunk(y, dst, v) };
        row += num_workgroups_y();
    }
}

#[cfg(not(ferrocm_device))]
use crate::host::KernelRef;

/// The parameter types of `upsample_{nearest,bilinear}_{T}`: `(y, x, geom)`.
#[cfg(not(ferrocm_device))]
pub type ResampleArgs<T> = (*mut T, *const T, *const u64);

/// The resizing kernels of an element type (float types; host side).
#[cfg(not(ferrocm_device))]
pub trait ResampleKernels: Sized + 'static {
    /// `upsample_nearest_{T}`, if the type has one.
    const NEAREST: Option<KernelRef<ResampleArgs<Self>>>;
    /// `upsample_bilinear_{T}`, if the type has one.
    const BILINEAR: Option<KernelRef<ResampleArgs<Self>>>;
}

macro_rules! resample_kernels {
    ($($nearest:ident, $bilinear:ident: $t:ty),*; none: $($n:ty),*) => {
        $(
            #[cfg(not(ferrocm_device))]
            impl ResampleKernels for $t {
                const NEAREST: Option<KernelRef<ResampleArgs<Self>>> = Some(KernelRef::of::<$nearest>());
                const BILINEAR: Option<KernelRef<ResampleArgs<Self>>> = Some(KernelRef::of::<$bilinear>());
            }
        )*
        $(
            #[cfg(not(ferrocm_device))]
            impl ResampleKernels for $n {
                const NEAREST: Option<KernelRef<ResampleArgs<Self>>> = None;
                const BILINEAR: Option<KernelRef<ResampleArgs<Self>>> = None;
            }
        )*
        kernels! {$(
            fn $nearest(y: *mut $t, x: *const $t, geom: *const u64) {
                resample_body::<$t, false>(y, x, geom)
            }
            fn $bilinear(y: *mut $t, x: *const $t, geom: *const u64) {
                resample_body::<$t, true>(y, x, geom)
            }
        )*}
    };
}

resample_kernels!(
    upsample_nearest_f32, upsample_bilinear_f32: f32,
    upsample_nearest_f16, upsample_bilinear_f16: F16,
    upsample_nearest_bf16, upsample_bilinear_bf16: Bf16;
    none: u8, u32, i64
);
