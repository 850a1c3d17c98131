//! Normalisation over channels of `(N, C, spatial..)` tensors (f32, f16,
//! bf16; f32 arithmetic), as PyTorch's `group_norm`, `instance_norm` and
//! `batch_norm` (inference form) compute it, in two kernels:
//! - `channel_stats_{dtype}`: one workgroup per `(image, group)` stat row
//!   (the `C / G` channels of a group over every position): the mean and
//!   `1 / sqrt(var + eps)` (biased variance, the shifted-data sums of
//!   [`crate::nn::norm::layer_stats`]), stored as f32;
//! - `channel_norm_{dtype}`: `y = (x - mean) * rstd * w[c] + b[c]`
//!   ([`crate::nn::norm::norm_apply`]) with the stats of the row's group
//!   (`n * stats_per_image + c / channels_per_group`: a group norm's per
//!   image; a batch norm's running stats, `stats_per_image` 0, shared by
//!   every image), a workitem per position (grid x) looping over the
//!   `(n, c)` rows from the grid's y. `w` and `b` may be null;
//! - `channel_group_norm_{dtype}`: both in one workgroup per stat row, for
//!   group norms whose rows are contiguous 16-byte words in and out: the
//!   row is read a second time from the cache rather than from memory.
//!
//! Inputs are `(N, C, S)` views at any strides (the spatial dims merged:
//! NCHW, or NHWC as a permuted view), outputs likewise.

use crate::device::*;
use crate::elem::*;
use crate::kernels;
use crate::matmul::dense::MatElem;
use crate::nn::norm::{NORM_BLOCK, layer_stats, norm_apply};
use crate::reduce::reductions::{Sum, block_reduce};
use rocm_kernel_macros::{amdgpu_device, amdgpu_global};

/// Header word: the images `N`.
pub const CN_BATCH: usize = 0;
/// Header word: the channels `C`.
pub const CN_CHANNELS: usize = 1;
/// Header word: channels per stat group (`C / G`; 1 for a batch norm).
pub const CN_CHANNELS_PER_GROUP: usize = 2;
/// Header word: stat rows per image (`G`; 0 for a batch norm's shared
/// stats).
pub const CN_STATS_PER_IMAGE: usize = 3;
/// Header word: positions per channel `S`.
pub const CN_POSITIONS: usize = 4;
/// Header words: the input's element strides `(n, c, s)`.
pub const CN_X_STRIDES: usize = 5;
/// Header words: the output's element strides `(n, c, s)`.
pub const CN_Y_STRIDES: usize = 8;
/// Header word: the chunked paths the host found valid ([`CN_NORM_CHUNKS`],
/// [`CN_STATS_CHUNKS`]).
pub const CN_FLAGS: usize = 11;
/// Words of the header.
pub const CN_HEADER: usize = 12;

/// Flag: `channel_norm_*` takes [`CHUNK`] positions a workitem (grid x
/// counts chunks, not positions). The host sets it where the positions
/// are a multiple of a chunk, contiguous in `x` and `y`, every `(n, c)`
/// row starts a whole number of chunks from a chunk-aligned start.
pub const CN_NORM_CHUNKS: u64 = 1;
/// Flag: `channel_stats_*` reads each stat row as one contiguous run of
/// whole chunks from a chunk-aligned start (four chunks in flight a
/// workitem), where the row's channels lie back to back.
pub const CN_STATS_CHUNKS: u64 = 2;

/// Workitems per workgroup of `channel_norm_*`.
pub const CHANNEL_NORM_BLOCK: u32 = NORM_BLOCK;
/// Workitems per workgroup of `channel_stats_*`: a stat row is long (a
/// Stable-Diffusion group is 40960 elements) and there are few of them
/// (images x groups), so each workgroup is as wide as a launch allows.
pub const CHANNEL_STATS_BLOCK: u32 = 1024;

#[amdgpu_device]
#[derive(Clone, Copy)]
struct CnGeom {
    batch: u32,
    channels: u32,
    per_group: u32,
    stats_per_image: u32,
    positions: u32,
    xs: [u64; 3],
    ys: [u64; 3],
    flags: u64,
}

#[amdgpu_device]
#[inline(always)]
fn read_geom(g: *const u64) -> CnGeom {
    let w = |i: usize| unsafe { load(g, i) };
    CnGeom {
        batch: w(CN_BATCH) as u32,
        channels: w(CN_CHANNELS) as u32,
        per_group: w(CN_CHANNELS_PER_GROUP) as u32,
        stats_per_image: w(CN_STATS_PER_IMAGE) as u32,
        positions: w(CN_POSITIONS) as u32,
        xs: [w(CN_X_STRIDES), w(CN_X_STRIDES + 1), w(CN_X_STRIDES + 2)],
        ys: [w(CN_Y_STRIDES), w(CN_Y_STRIDES + 1), w(CN_Y_STRIDES + 2)],
        flags: w(CN_FLAGS),
    }
}

/// `(mean, 1 / sqrt(var + eps))` of stat row `r` (image `r / G`, group
/// `r % G`), summed by the whole workgroup; every workitem gets them.
/// `CHUNKED`: the caller knows [`CN_STATS_CHUNKS`] holds (the
/// element-by-element path left out).
#[amdgpu_device]
#[inline(always)]
fn row_stats<T: MatElem, const CHUNKED: bool>(
    x: *const T,
    g: &CnGeom,
    r: u32,
    eps: f32,
) -> (f32, f32) {
    let tid = workitem_id_x();
    let block = workgroup_size_x();
    let count = g.per_group * g.positions;
    let (n, grp) = (r / g.stats_per_image, r % g.stats_per_image);
    let base = n as u64 * g.xs[0] + (grp * g.per_group) as u64 * g.xs[1];
    let shift = unsafe { load(x, base as usize) }.widen();
    let (mut s1, mut s2) = (0.0f32, 0.0f32);
    let mut add = |w: W128| {
        word_for_each::<T>(w, |_, e| {
            let d = e.widen() - shift;
            s1 += d;
            s2 = crate::math::fma(d, d, s2);
        })
    };
    // The chunked row as 16-byte words: four in flight a workitem, then
    // the rest one at a time.
    let per = per_word::<T>();
    let words = if CHUNKED || g.flags & CN_STATS_CHUNKS != 0 {
        count / per
    } else {
        0
    };
    let first = base as usize / per as usize;
    let at = |q: u32| unsafe { load(x as *const W128, first + q as usize) };
    let mut q = tid;
    while q + 3 * block < words {
        let (a, b, c, d) = (at(q), at(q + block), at(q + 2 * block), at(q + 3 * block));
        add(a);
        add(b);
        add(c);
        add(d);
        q += 4 * block;
    }
    while q < words {
        add(at(q));
        q += block;
    }
    // Element by element otherwise (`words` 0 skipped the above).
    let mut c = if CHUNKED || words > 0 { g.per_group } else { 0 };
    while c < g.per_group {
        let cb = base + c as u64 * g.xs[1];
        let mut s = tid;
        while s < g.positions {
            let d = unsafe { load(x, (cb + s as u64 * g.xs[2]) as usize) }.widen() - shift;
            s1 += d;
            s2 = crate::math::fma(d, d, s2);
            s += block;
        }
        c += 1;
    }
    let s1 = block_reduce::<f32, Sum>(s1);
    let s2 = block_reduce::<f32, Sum>(s2);
    layer_stats(shift, s1, s2, count, eps)
}

/// Channel `c`'s weight and bias, each optional (null: 1 and -0, so an
/// absent bias leaves a normalised -0 as it is).
#[amdgpu_device]
#[inline(always)]
fn channel_affine<T: MatElem>(w: *const T, b: *const T, c: u32) -> (f32, f32) {
    let wc = if w.is_null() {
        1.0
    } else {
        unsafe { load(w, c as usize) }.widen()
    };
    let bc = if b.is_null() {
        -0.0
    } else {
        unsafe { load(b, c as usize) }.widen()
    };
    (wc, bc)
}

/// The body of `channel_stats_*`: stat row `workgroup_id_x()` (stepping
/// by the grid) of `N * G`; `mean[r]`, `rstd[r]`.
#[amdgpu_device]
#[inline(always)]
pub fn channel_stats_body<T: MatElem>(
    mean: *mut f32,
    rstd: *mut f32,
    x: *const T,
    geom: *const u64,
    eps: f32,
) {
    let g = read_geom(geom);
    let rows = g.batch * g.stats_per_image;
    let mut r = workgroup_id_x();
    while r < rows {
        let (m, scale) = row_stats::<T, false>(x, &g, r, eps);
        if workitem_id_x() == 0 {
            unsafe {
                store(mean, r as usize, m);
                store(rstd, r as usize, scale);
            }
        }
        r += num_workgroups_x();
    }
}

/// The body of `channel_group_norm_*`: [`channel_stats_body`] and
/// [`channel_norm_body`] in one pass for a group norm whose stat rows are
/// chunked runs in `x` and `y` alike (both [`CN_STATS_CHUNKS`] and
/// [`CN_NORM_CHUNKS`], each group's channels back to back in `y` too).
/// A workgroup sums its row, then normalises it at once: the second read
/// of the row finds it in the cache the first left it in (a
/// Stable-Diffusion group is 160 KB of f32), where two kernels read it
/// twice from memory. The host sizes the grid so that the rows in flight
/// fit the cache. `mean` and `rstd` are not stored: the output is all.
#[amdgpu_device]
#[inline(always)]
pub fn channel_group_norm_body<T: MatElem>(
    y: *mut T,
    x: *const T,
    w: *const T,
    b: *const T,
    geom: *const u64,
    eps: f32,
) {
    let g = read_geom(geom);
    let tid = workitem_id_x();
    let block = workgroup_size_x();
    let rows = g.batch * g.stats_per_image;
    let per = per_word::<T>();
    let words = g.per_group * g.positions / per;
    let mut r = workgroup_id_x();
    while r < rows {
        let (m, scale) = row_stats::<T, true>(x, &g, r, eps);
        let (n, grp) = (r / g.stats_per_image, r % g.stats_per_image);
        let c0 = grp * g.per_group;
        let src = (n as u64 * g.xs[0] + c0 as u64 * g.xs[1]) as usize / per as usize;
        let dst = (n as u64 * g.ys[0] + c0 as u64 * g.ys[1]) as usize / per as usize;
        // Word `q` of the row: its channel's affine pair (a chunk of
        // positions never straddles two channels), the word normalised.
        let apply = |q: u32, v: W128| {
            let c = c0 + q * per / g.positions;
            let (wc, bc) = channel_affine(w, b, c);
            let out = word_map_f32::<T>(v, |e| norm_apply(e, m, scale, wc, bc));
            unsafe { store(y as *mut W128, dst + q as usize, out) };
        };
        let at = |q: u32| unsafe { load(x as *const W128, src + q as usize) };
        let mut q = tid;
        while q < words {
            apply(q, at(q));
            q += block;
        }
        r += num_workgroups_x();
    }
}

/// The body of `channel_norm_*`: see the module doc.
#[amdgpu_device]
#[inline(always)]
pub fn channel_norm_body<T: MatElem>(
    y: *mut T,
    x: *const T,
    mean: *const f32,
    rstd: *const f32,
    w: *const T,
    b: *const T,
    geom: *const u64,
) {
    let g = read_geom(geom);
    let chunked = g.flags & CN_NORM_CHUNKS != 0;
    // A workitem's first position: one, or a chunk's worth.
    let q = workgroup_id_x() * workgroup_size_x() + workitem_id_x();
    let s = if chunked { q * CHUNK as u32 } else { q };
    if s >= g.positions {
        return;
    }
    let rows = g.batch * g.channels;
    let mut row = workgroup_id_y();
    while row < rows {
        let (n, c) = (row / g.channels, row % g.channels);
        let stat = (n * g.stats_per_image + c / g.per_group) as usize;
        let (m, scale) = unsafe { (load(mean, stat), load(rstd, stat)) };
        let (wc, bc) = channel_affine(w, b, c);
        if chunked {
            let at = n as u64 * g.xs[0] + c as u64 * g.xs[1] + s as u64;
            let dst = n as u64 * g.ys[0] + c as u64 * g.ys[1] + s as u64;
            let v = unsafe { load_chunk(x, at) };
            let out = chunk_of(|k| norm_apply(v[k].widen(), m, scale, wc, bc));
            unsafe { store_chunk_f32(y, dst, out) };
            row += num_workgroups_y();
            continue;
        }
        let at = n as u64 * g.xs[0] + c as u64 * g.xs[1] + s as u64 * g.xs[2];
        let v = unsafe { load(x, at as usize) }.widen();
        let dst = n as u64 * g.ys[0] + c as u64 * g.ys[1] + s as u64 * g.ys[2];
        unsafe {
            store(
                y,
                dst as usize,
                T::from_f32(norm_apply(v, m, scale, wc, bc)),
            )
        };
        row += num_workgroups_y();
    }
}

#[cfg(not(ferrocm_device))]
use crate::host::KernelRef;

/// The parameter types of `channel_stats_{T}`: `(mean, rstd, x, geom, eps)`.
#[cfg(not(ferrocm_device))]
pub type ChannelStatsArgs<T> = (*mut f32, *mut f32, *const T, *const u64, f32);
/// The parameter types of `channel_norm_{T}`: `(y, x, mean, rstd, w, b, geom)`.
#[cfg(not(ferrocm_device))]
pub type ChannelNormArgs<T> = (
    *mut T,
    *const T,
    *const f32,
    *const f32,
    *const T,
    *const T,
    *const u64,
);

/// The parameter types of `channel_group_norm_{T}`: `(y, x, w, b, geom, eps)`.
#[cfg(not(ferrocm_device))]
pub type ChannelGroupNormArgs<T> = (*mut T, *const T, *const T, *const T, *const u64, f32);

/// The channel-norm kernels of an element type (float types; host side).
#[cfg(not(ferrocm_device))]
pub trait ChannelNormKernels: Sized + 'static {
    /// `channel_stats_{T}`, if the type has one.
    const CHANNEL_STATS: Option<KernelRef<ChannelStatsArgs<Self>>>;
    /// `channel_norm_{T}`, if the type has one.
    const CHANNEL_NORM: Option<KernelRef<ChannelNormArgs<Self>>>;
    /// `channel_group_norm_{T}`, if the type has one.
    const CHANNEL_GROUP_NORM: Option<KernelRef<ChannelGroupNormArgs<Self>>>;
}

macro_rules! channel_norm_kernels {
    ($($stats:ident, $norm:ident, $fused:ident: $t:ty),*; none: $($n:ty),*) => {
        $(
            #[cfg(not(ferrocm_device))]
            impl ChannelNormKernels for $t {
                const CHANNEL_STATS: Option<KernelRef<ChannelStatsArgs<Self>>> = Some(KernelRef::of::<$stats>());
                const CHANNEL_NORM: Option<KernelRef<ChannelNormArgs<Self>>> = Some(KernelRef::of::<$norm>());
                const CHANNEL_GROUP_NORM: Option<KernelRef<ChannelGroupNormArgs<Self>>> = Some(KernelRef::of::<$fused>());
            }
        )*
        $(
            #[cfg(not(ferrocm_device))]
            impl ChannelNormKernels for $n {
                const CHANNEL_STATS: Option<KernelRef<ChannelStatsArgs<Self>>> = None;
                const CHANNEL_NORM: Option<KernelRef<ChannelNormArgs<Self>>> = None;
                const CHANNEL_GROUP_NORM: Option<KernelRef<ChannelGroupNormArgs<Self>>> = None;
            }
        )*
        kernels! {$(
            fn $stats(mean: *mut f32, rstd: *mut f32, x: *const $t, geom: *const u64, eps: f32) {
                channel_stats_body::<$t>(mean, rstd, x, geom, eps)
            }
            fn $norm(y: *mut $t, x: *const $t, mean: *const f32, rstd: *const f32, w: *const $t, b: *const $t, geom: *const u64) {
                channel_norm_body::<$t>(y, x, mean, rstd, w, b, geom)
            }
            fn $fused(y: *mut $t, x: *const $t, w: *const $t, b: *const $t, geom: *const u64, eps: f32) {
                channel_group_norm_body::<$t>(y, x, w, b, geom, eps)
            }
        )*}
    };
}

channel_norm_kernels!(
    channel_stats_f32, channel_norm_f32, channel_group_norm_f32: f32,
    channel_stats_f16, channel_norm_f16, channel_group_norm_f16: F16,
    channel_stats_bf16, channel_norm_bf16, channel_group_norm_bf16: Bf16;
    none: u8, u32, i64
);
