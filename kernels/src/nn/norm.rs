//! Row normalisations over the last dim, for f32, f16 and bf16 (f32
//! arithmetic):
//! - `rms_norm_{dtype}`: `y = h / sqrt(mean(h²) + eps) * w` (Llama, Mistral,
//!   Qwen, Gemma; T5's "layer norm");
//! - `layer_norm_{dtype}`: `y = (h - mean(h)) / sqrt(var(h) + eps) * w + b`
//!   (biased variance, as `torch.nn.LayerNorm`; `b` may be null);
//! - `add_rms_norm_{dtype}`, `add_layer_norm_{dtype}`: the same with
//!   `h = x + residual` (rounded to the dtype, exactly as a separate `add`
//!   would store it), writing `h` too: the residual stream and the next
//!   layer's input in one pass, as llama.cpp and vLLM fuse them;
//! - `rms_norm_q8_{dtype}`, `add_rms_norm_q8_{dtype}`: the RMS norms with
//!   the output stored only in the 8-bit form the quantized products take
//!   (rounded to the dtype first, so the bits equal a norm then
//!   `quantize_x`).
//!
//! The rows are `rows × cols`, contiguous. Rows of up to [`NORM_WAVE_COLS`]
//! go one wave per row (several rows per workgroup: no barrier, no LDS);
//! longer rows one workgroup per row. Both loop when there are more rows
//! than teams. Each workitem reads a strided slice of its row, a 16-byte
//! word per load when the row and every operand start on words
//! ([`NORM_WORDS`]: 4 f32 or 8 f16/bf16 per load; 2-byte loads left bf16
//! rows at 59% of the H100's copy bandwidth), else four elements in flight;
//! the team sums in f32 (a wave butterfly, then one LDS
//! slot per wave), and a second pass writes the output: it re-reads `x`
//! (or, fused, the `h` it stored, one stream instead of two), which the
//! row's first pass has just brought into the cache.
//!
//! The layer norm sums `h - h[0]` and its square (the shifted-data
//! formula): the variance keeps its precision when the mean is large
//! against the spread, where `Σh² - (Σh)²/n` would cancel.

use crate::device::*;
use crate::elem::W128;
use crate::elem::*;
use crate::kernels;
use crate::quant::matvec::{X8Out, store_x_lanes};
use crate::reduce::reductions::{Sum, block_reduce};
use rocm_kernel_macros::{amdgpu_device, amdgpu_global};

/// Workitems per workgroup of the norm kernels.
#[amdgpu_device]
pub const NORM_BLOCK: u32 = 256;

/// Rows up to this many elements go one wave per row.
#[amdgpu_device]
pub const NORM_WAVE_COLS: u32 = 1024;

/// LDS a norm launch must provide (the workgroup sum's slots:
/// [`crate::reduce::reductions::REDUCE_LDS_BYTES`]).
#[amdgpu_device]
pub const NORM_LDS_BYTES: u32 = crate::reduce::reductions::REDUCE_LDS_BYTES;

/// `1 / sqrt(mean(h²) + eps)` from `Σ h²` over `cols` elements: the scale
/// of an RMS norm (shared by the kernels and the Cpu backend).
///
/// ```
/// use ferrocm_kernels::nn::norm::rms_scale;
/// assert_eq!(rms_scale(16.0, 4, 0.0), 0.5); // h = [2, 2, 2, 2]
/// ```
#[amdgpu_device]
#[inline(always)]
pub fn rms_scale(sum_sq: f32, cols: u32, eps: f32) -> f32 {
    crate::math::rsqrt(sum_sq / cols as f32 + eps)
}

/// `(mean, 1 / sqrt(var + eps))` of a row from the sums of `h - shift`
/// and of its square over `cols` elements (biased variance; a rounding
/// below zero counts as zero, a NaN stays NaN). A mean square past f32's
/// range (values near ±1e30) is an infinite variance, as PyTorch's f32
/// arithmetic has it, and the scale is 0; it never becomes `inf - inf`.
/// Shared by the kernels and the Cpu backend.
///
/// ```
/// use ferrocm_kernels::nn::norm::layer_stats;
/// // h = [1, 3]: shifted by 1, the sums are 2 and 4.
/// assert_eq!(layer_stats(1.0, 2.0, 4.0, 2, 0.0), (2.0, 1.0));
/// // h = [1e30, 1e30]: the squares overflow; scale 0, not NaN.
/// assert_eq!(layer_stats(1e30, 0.0, f32::INFINITY, 2, 1e-5), (1e30, 0.0));
/// ```
#[amdgpu_device]
#[inline(always)]
pub fn layer_stats(shift: f32, s1: f32, s2: f32, cols: u32, eps: f32) -> (f32, f32) {
    let n = cols as f32;
    let d = s1 / n;
    let mean_sq = s2 / n;
    // A finite mean square bounds d * d (Cauchy-Schwarz), so only an
    // overflowed one could give inf - inf: it stands for the variance.
    let var = if mean_sq == f32::INFINITY {
        mean_sq
    } else {
        mean_sq - d * d
    };
    // Below zero only by rounding; NaN (an infinite or NaN input) stays.
    let var = if var < 0.0 { 0.0 } else { var };
    (shift + d, crate::math::rsqrt(var + eps))
}

/// The normalised value of `h`: `(h - mean) * scale * w + b` (an RMS norm
/// has mean 0; no bias is `b = -0.0`, the additive identity that keeps the
/// sign of a zero), in f32, rounded once by the caller.
///
/// ```
/// use ferrocm_kernels::nn::norm::norm_apply;
/// assert_eq!(norm_apply(3.0, 1.0, 0.5, 2.0, 1.0), 3.0);
/// ```
#[amdgpu_device]
#[inline(always)]
pub fn norm_apply(h: f32, mean: f32, scale: f32, w: f32, b: f32) -> f32 {
    (h - mean) * scale * w + b
}

/// `flags` bit: each wave is a team of its own (the op sets it for rows of
/// at most [`NORM_WAVE_COLS`]).
#[amdgpu_device]
pub const NORM_PER_WAVE: u32 = 1;
/// `flags` bit: rows and every operand start on 16-byte words, so rows are
/// read and written a word (4 f32, 8 f16/bf16) per load.
#[amdgpu_device]
pub const NORM_WORDS: u32 = 2;

/// The body of the norm kernels: `LAYER` picks the layer norm, `ADD` the
/// fused residual add (`res` and `sum_out` are used only then; `b` may be
/// null); `flags` holds [`NORM_PER_WAVE`] and [`NORM_WORDS`]. `Q8` (RMS
/// norms) stores the output in `q8`'s 8-bit form instead of `out`; its
/// rows must start on words and have a multiple of 16 elements (the op
/// checks: it then reads and writes words whatever `flags` says).
#[amdgpu_device]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub fn norm_body<T: Elem, const LAYER: bool, const ADD: bool, const Q8: bool>(
    out: *mut T,
    q8: X8Out,
    sum_out: *mut T,
    x: *const T,
    res: *const T,
    w: *const T,
    b: *const T,
    rows: u64,
    cols: u32,
    eps: f32,
    flags: u32,
) {
    // Launched with `early_start`: nothing global is touched before this.
    wait_prior_grids();
    release_dependent_grids();
    let per_wave = flags & NORM_PER_WAVE != 0;
    let words = (Q8 || flags & NORM_WORDS != 0) && size_of::<T>() <= 4;
    let waves = num_waves() as u64;
    let (mut row, teams, me, size) = if per_wave {
        let team = workgroup_id_x() as u64 * waves + wave_id() as u64;
        (
            team,
            num_workgroups_x() as u64 * waves,
            lane_id(),
            wave_size(),
        )
    } else {
        let team = workgroup_id_x() as u64;
        (
            team,
            num_workgroups_x() as u64,
            workitem_id_x(),
            workgroup_size_x(),
        )
    };
    let team_sum = |v: f32| {
        if per_wave {
            wave_sum_f32(v)
        } else {
            block_reduce::<f32, Sum>(v)
        }
    };
    let has_bias = LAYER && !b.is_null();
    // Unfused f32 rows of at most four words per workitem stay in
    // registers between the passes: no second read (rows of 16384 x 4096
    // re-read from L2 ran at 76% of the copy bandwidth, held at 99%). bf16
    // rows ran slower held (96% -> 76%: two of the four slots used, the
    // registers of all four): they take the two-pass path.
    let per = per_word::<T>();
    let held = !Q8 && words && !ADD && size_of::<T>() == 4 && cols / per <= 4 * size;
    while row < rows {
        let base = row as usize * cols as usize;
        if held {
            norm_row_held::<T, LAYER>(out, x, w, b, base, cols, eps, me, size, has_bias, &team_sum);
            row += teams;
            continue;
        }
        // The layer norm's shift: the row's first value (every workitem
        // reads it; fused, it is recomputed, not read back).
        let shift = if LAYER {
            let v = unsafe { load(x, base) };
            if ADD {
                v.add(unsafe { load(res, base) }).to_f32()
            } else {
                v.to_f32()
            }
        } else {
            0.0
        };
        let (mut s1, mut s2) = (0.0f32, 0.0f32);
        let mut acc = |v: T| {
            let d = v.to_f32() - shift;
            s1 += d;
            s2 += d * d;
        };
        if words {
            norm_sums_words::<T, ADD>(sum_out, x, res, base, cols, me, size, &mut acc);
        } else {
            norm_sums::<T, ADD>(sum_out, x, res, base, cols, me, size, &mut acc);
        }
        let (mean, scale) = if LAYER {
            let (s1, s2) = (team_sum(s1), team_sum(s2));
            layer_stats(shift, s1, s2, cols, eps)
        } else {
            (0.0, rms_scale(team_sum(s2), cols, eps))
        };
        // The second pass reads h back: x, or the sum this workitem stored
        // (the same elements as in the first pass).
        let src = if ADD { sum_out as *const T } else { x };
        if Q8 {
            norm_store_q8::<T>(q8, src, w, row as usize, cols, scale, me, size);
            row += teams;
            continue;
        }
        let y = |v: T, w: T, b: T| {
            let bias = if has_bias { b.to_f32() } else { -0.0 };
            norm_apply(v.to_f32(), mean, scale, w.to_f32(), bias)
        };
        if words {
            let per = per_word::<T>() as usize;
            let (src, ow) = (src as *const W128, out as *mut W128);
            let (ww, bw) = (w as *const W128, b as *const W128);
            let (wbase, nw) = (base / per, cols / per as u32);
            let mut c = me;
            while c < nw {
                unsafe {
                    let hv = load(src, wbase + c as usize);
                    let wv = load(ww, c as usize);
                    let bv = if has_bias { load(bw, c as usize) } else { wv };
                    store(
                        ow,
                        wbase + c as usize,
                        word_map3_f32::<T>(hv, wv, bv, |_, h, w, b| y(h, w, b)),
                    );
                }
                c += size;
            }
        } else {
            let put = |c: u32, v: T| unsafe {
                let bias = if has_bias { load(b, c as usize) } else { v };
                store(
                    out,
                    base + c as usize,
                    T::from_f32(y(v, load(w, c as usize), bias)),
                );
            };
            let get = |c: u32| unsafe { load(src, base + c as usize) };
            let mut c = me;
            while c + 3 * size < cols {
                let (v0, v1, v2, v3) =
                    (get(c), get(c + size), get(c + 2 * size), get(c + 3 * size));
                put(c, v0);
                put(c + size, v1);
                put(c + 2 * size, v2);
                put(c + 3 * size, v3);
                c += 4 * size;
            }
            while c < cols {
                put(c, get(c));
                c += size;
            }
        }
        row += teams;
    }
}

/// The second pass of an RMS norm in 8-bit form: each workitem's words of
/// `y = h * scale * w` rounded to `T` (as the norm stores them), each group
/// of 16 quantized across the lanes holding it (`16 / per` neighbours, in
/// rounds every lane of the team runs, for the exchanges).
#[amdgpu_device]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn norm_store_q8<T: Elem>(
    q8: X8Out,
    src: *const T,
    w: *const T,
    row: usize,
    cols: u32,
    scale: f32,
    me: u32,
    size: u32,
) {
    let per = per_word::<T>() as usize;
    let (src, ww) = (src as *const W128, w as *const W128);
    let (wbase, nw) = (row * cols as usize / per, cols / per as u32);
    let rounds = nw.div_ceil(size);
    let mut round = 0;
    while round < rounds {
        let c = me + round * size;
        let live = c < nw;
        let mut v = [0.0f32; 8];
        if live {
            let (hv, wv) = unsafe { (load(src, wbase + c as usize), load(ww, c as usize)) };
            word_for_each::<T>(norm_word::<T>(hv, wv, wv, 0.0, scale, false), |k, y| {
                v[k as usize] = y.to_f32()
            });
        }
        let col = c as usize * per;
        if per == 8 {
            store_x_lanes::<8>(q8, row, col, v, live);
        } else {
            store_x_lanes::<4>(q8, row, col, [v[0], v[1], v[2], v[3]], live);
        }
        round += 1;
    }
}

/// `(h - mean) * scale * w + b` on each element of a word (a named function:
/// see [`norm_row_held`]).
#[amdgpu_device]
#[inline(always)]
fn norm_word<T: Elem>(hv: W128, wv: W128, bv: W128, mean: f32, scale: f32, has_bias: bool) -> W128 {
    word_map3_f32::<T>(hv, wv, bv, |_, h, w, b| {
        let bias = if has_bias { b.to_f32() } else { -0.0 };
        norm_apply(h.to_f32(), mean, scale, w.to_f32(), bias)
    })
}

/// One unfused row of at most four words per workitem, held in registers
/// from the first pass to the second (words `me + j * size`, `j < 4`,
/// written out: an array indexed by `j` would live in scratch, and the
/// per-word work is in named functions, which inline where a closure
/// called four times was outlined).
#[amdgpu_device]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn norm_row_held<T: Elem, const LAYER: bool>(
    out: *mut T,
    x: *const T,
    w: *const T,
    b: *const T,
    base: usize,
    cols: u32,
    eps: f32,
    me: u32,
    size: u32,
    has_bias: bool,
    team_sum: &impl Fn(f32) -> f32,
) {
    let per = per_word::<T>() as usize;
    let (xw, ow, ww, bw) = (
        x as *const W128,
        out as *mut W128,
        w as *const W128,
        b as *const W128,
    );
    let (wbase, nw) = (base / per, cols / per as u32);
    let at = |j: u32| me + j * size;
    let get = |j: u32| {
        if at(j) < nw {
            unsafe { load(xw, wbase + at(j) as usize) }
        } else {
            W128::default()
        }
    };
    let (a0, a1, a2, a3) = (get(0), get(1), get(2), get(3));
    let shift = if LAYER {
        unsafe { load(x, base) }.to_f32()
    } else {
        0.0
    };
    let (mut s1, mut s2) = (0.0f32, 0.0f32);
    let mut acc = |j: u32, a: W128| {
        if at(j) < nw {
            word_for_each::<T>(a, |_, v| {
                let d = v.to_f32() - shift;
                s1 += d;
                s2 += d * d;
            });
        }
    };
    acc(0, a0);
    acc(1, a1);
    acc(2, a2);
    acc(3, a3);
    let (mean, scale) = if LAYER {
        let (s1, s2) = (team_sum(s1), team_sum(s2));
        layer_stats(shift, s1, s2, cols, eps)
    } else {
        (0.0, rms_scale(team_sum(s2), cols, eps))
    };
    let put = |j: u32, hv: W128| {
        if at(j) < nw {
            let c = at(j) as usize;
            unsafe {
                let wv = load(ww, c);
                let bv = if has_bias { load(bw, c) } else { wv };
                store(
                    ow,
                    wbase + c,
                    norm_word::<T>(hv, wv, bv, mean, scale, has_bias),
                );
            }
        }
    };
    put(0, a0);
    put(1, a1);
    put(2, a2);
    put(3, a3);
}

/// The first pass over a row, an element at a time: `acc(h)` for this
/// workitem's elements (four loads in flight), storing `h = x + res` when
/// fused.
#[amdgpu_device]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn norm_sums<T: Elem, const ADD: bool>(
    sum_out: *mut T,
    x: *const T,
    res: *const T,
    base: usize,
    cols: u32,
    me: u32,
    size: u32,
    acc: &mut impl FnMut(T),
) {
    // The row's value at c: x, or x + residual rounded to T (stored: the
    // second pass and the caller read it back).
    let h = |c: u32| unsafe {
        let v = load(x, base + c as usize);
        if ADD {
            let s = v.add(load(res, base + c as usize));
            store(sum_out, base + c as usize, s);
            s
        } else {
            v
        }
    };
    let mut c = me;
    while c + 3 * size < cols {
        let (v0, v1, v2, v3) = (h(c), h(c + size), h(c + 2 * size), h(c + 3 * size));
        acc(v0);
        acc(v1);
        acc(v2);
        acc(v3);
        c += 4 * size;
    }
    while c < cols {
        acc(h(c));
        c += size;
    }
}

/// [`norm_sums`] a 16-byte word at a time (two in flight per input).
#[amdgpu_device]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn norm_sums_words<T: Elem, const ADD: bool>(
    sum_out: *mut T,
    x: *const T,
    res: *const T,
    base: usize,
    cols: u32,
    me: u32,
    size: u32,
    acc: &mut impl FnMut(T),
) {
    let per = per_word::<T>() as usize;
    let (xw, rw, sw) = (x as *const W128, res as *const W128, sum_out as *mut W128);
    let (wbase, nw) = (base / per, cols / per as u32);
    let h = |c: u32, a: W128| unsafe {
        if ADD {
            let r = load(rw, wbase + c as usize);
            let s = word_map3::<T>(a, r, r, |_, x, r, _| x.add(r));
            store(sw, wbase + c as usize, s);
            s
        } else {
            a
        }
    };
    let mut c = me;
    // Unfused: two words in flight. Fused, x and res make two already, and
    // a second call site of `h` (its f16 adds are long) would be outlined,
    // its words passed through scratch.
    while !ADD && c + size < nw {
        let (a0, a1) = unsafe {
            (
                load(xw, wbase + c as usize),
                load(xw, wbase + (c + size) as usize),
            )
        };
        word_for_each::<T>(a0, |_, v| acc(v));
        word_for_each::<T>(a1, |_, v| acc(v));
        c += 2 * size;
    }
    while c < nw {
        let a = unsafe { load(xw, wbase + c as usize) };
        word_for_each::<T>(h(c, a), |_, v| acc(v));
        c += size;
    }
}

/// The parameter types of every norm kernel on element type `T`: `(out,
/// sum_out, x, residual, weight, bias, rows, cols, eps, flags)`; the
/// unfused kernels get null `sum_out` and `residual`, the RMS norms a null
/// bias.
#[cfg(not(ferrocm_device))]
pub type NormArgs<T> = (
    *mut T,
    *mut T,
    *const T,
    *const T,
    *const T,
    *const T,
    u64,
    u32,
    f32,
    u32,
);

/// The parameter types of `rms_norm_q8_{T}`: `(codes, meta, x, weight,
/// rows, cols, eps, flags)`.
#[cfg(not(ferrocm_device))]
pub type RmsNormQ8Args<T> = (*mut u32, *mut u64, *const T, *const T, u64, u32, f32, u32);

/// The parameter types of `add_rms_norm_q8_{T}`: `(codes, meta, sum_out, x,
/// residual, weight, rows, cols, eps, flags)`.
#[cfg(not(ferrocm_device))]
pub type AddRmsNormQ8Args<T> = (
    *mut u32,
    *mut u64,
    *mut T,
    *const T,
    *const T,
    *const T,
    u64,
    u32,
    f32,
    u32,
);

#[cfg(not(ferrocm_device))]
use crate::host::KernelRef;

/// The norm kernels of one element type (host side).
#[cfg(not(ferrocm_device))]
#[derive(Clone, Copy, Debug)]
pub struct NormTable<T: 'static> {
    /// `rms_norm_{T}`.
    pub rms: KernelRef<NormArgs<T>>,
    /// `add_rms_norm_{T}`.
    pub add_rms: KernelRef<NormArgs<T>>,
    /// `layer_norm_{T}`.
    pub layer: KernelRef<NormArgs<T>>,
    /// `add_layer_norm_{T}`.
    pub add_layer: KernelRef<NormArgs<T>>,
    /// `rms_norm_q8_{T}`: the output in 8-bit form.
    pub rms_q8: KernelRef<RmsNormQ8Args<T>>,
    /// `add_rms_norm_q8_{T}`: the output in 8-bit form.
    pub add_rms_q8: KernelRef<AddRmsNormQ8Args<T>>,
}

/// The norm kernels of an element type: float types only.
#[cfg(not(ferrocm_device))]
pub trait NormKernels: Sized + 'static {
    /// The four kernels, if the type has them.
    const NORM: Option<NormTable<Self>>;
}

macro_rules! norm_kernels {
    (none: $($n:ty),*) => {$(
        #[cfg(not(ferrocm_device))]
        impl NormKernels for $n {
            const NORM: Option<NormTable<Self>> = None;
        }
    )*};
    ($($t:ty => $rms:ident, $add_rms:ident, $layer:ident, $add_layer:ident, $rms_q8:ident, $add_rms_q8:ident;)*) => {
        $(
            #[cfg(not(ferrocm_device))]
            impl NormKernels for $t {
                const NORM: Option<NormTable<Self>> = Some(NormTable {
                    rms: KernelRef::of::<$rms>(),
                    add_rms: KernelRef::of::<$add_rms>(),
                    layer: KernelRef::of::<$layer>(),
                    add_layer: KernelRef::of::<$add_layer>(),
                    rms_q8: KernelRef::of::<$rms_q8>(),
                    add_rms_q8: KernelRef::of::<$add_rms_q8>(),
                });
            }
        )*
        norm_kernels!(@k $($t => $rms false false, $add_rms false true, $layer true false, $add_layer true true;)*);
        norm_kernels!(@q8 $($t => $rms_q8, $add_rms_q8;)*);
    };
    (@k $($t:ty => $($name:ident $layer:literal $add:literal),*;)*) => {
        kernels! {$($(
            fn $name(out: *mut $t, sum_out: *mut $t, x: *const $t, res: *const $t, w: *const $t,
                     b: *const $t, rows: u64, cols: u32, eps: f32, flags: u32) {
                let q8 = X8Out { codes: core::ptr::null_mut(), meta: core::ptr::null_mut(), k: 0, paired: 0 };
                norm_body::<$t, $layer, $add, false>(out, q8, sum_out, x, res, w, b, rows, cols, eps, flags)
            }
        )*)*}
    };
    (@q8 $($t:ty => $rms:ident, $add_rms:ident;)*) => {
        kernels! { table Q8_KERNELS; $(
            fn $rms(codes: *mut u32, meta: *mut u64, x: *const $t, w: *const $t, rows: u64, cols: u32, eps: f32, flags: u32) {
                let (out, sum_out, res, b) = (core::ptr::null_mut(), core::ptr::null_mut(), core::ptr::null(), core::ptr::null());
                let q8 = X8Out::new(codes, meta, rows as usize * cols as usize, cols as usize);
                norm_body::<$t, false, false, true>(out, q8, sum_out, x, res, w, b, rows, cols, eps, flags)
            }
            fn $add_rms(codes: *mut u32, meta: *mut u64, sum_out: *mut $t, x: *const $t, res: *const $t, w: *const $t,
                        rows: u64, cols: u32, eps: f32, flags: u32) {
                let (out, b) = (core::ptr::null_mut(), core::ptr::null());
                let q8 = X8Out::new(codes, meta, rows as usize * cols as usize, cols as usize);
                norm_body::<$t, false, true, true>(out, q8, sum_out, x, res, w, b, rows, cols, eps, flags)
            }
        )*}
    };
}

norm_kernels! {
    f32 => rms_norm_f32, add_rms_norm_f32, layer_norm_f32, add_layer_norm_f32, rms_norm_q8_f32, add_rms_norm_q8_f32;
    F16 => rms_norm_f16, add_rms_norm_f16, layer_norm_f16, add_layer_norm_f16, rms_norm_q8_f16, add_rms_norm_q8_f16;
    Bf16 => rms_norm_bf16, add_rms_norm_bf16, layer_norm_bf16, add_layer_norm_bf16, rms_norm_q8_bf16, add_rms_norm_q8_bf16;
}
norm_kernels!(none: u8, u32, i64);
