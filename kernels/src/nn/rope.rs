//! Rotary position embeddings, for f32, f16 and bf16 (f32 arithmetic, one
//! rounding per element), in three layouts:
//! - `rope_{dtype}`: x is `(b, h, t, d)` and each rotated pair is `(i, i +
//!   r/2)`, the two halves of the rotary dims (Llama, Mistral, Qwen, Gemma as
//!   Hugging Face writes them; GGML's NeoX mode);
//! - `rope_i_{dtype}`: `(b, h, t, d)` with interleaved pairs `(2i, 2i + 1)`
//!   (GPT-J, GGML's normal mode: Llama as Meta wrote it);
//! - `rope_thd_{dtype}`: x is `(b, t, h, d)`, halves as `rope` (a layout
//!   straight out of a QKV projection, without a transpose).
//!
//! Pair `i` of position `p` turns by the angle whose cosine and sine are
//! `cos[p][i]` and `sin[p][i]`: `(x0, x1) -> (x0 c - x1 s, x0 s + x1 c)`.
//! The tables hold `r/2` columns, so only the first `r` of the `d` dims
//! rotate (partial rotary: Phi, GPT-NeoX, ChatGLM); the rest are copied.
//! Position `p` is `offset + t_i` (decode with a cache: the table is the
//! whole context, `offset` the cache length), read from row `p` of the
//! table, or of batch `b_i`'s table when `per_batch` is set (`(b, T, r/2)`
//! tables: packed sequences, per-sequence positions).
//!
//! One workitem per unit of a row: units `0..r/2` are the rotated pairs,
//! the `d - r` after them copy one element each. Input and output are
//! contiguous.
//!
//! `rope_cache_{dtype}` and `rope_i_cache_{dtype}` serve attention with a
//! KV cache in one launch: q and k as a projection leaves them (`(b, t, h,
//! d)`, tokens a stride apart), q rotated into `(b, hq, t, d)`, k rotated
//! and v copied into rows `pos..pos + t` of caches `(b, hk, cap, d)`
//! (halves or interleaved pairs; positions `pos + j` of the table).

use crate::device::*;
use crate::elem::W128;
use crate::elem::*;
use crate::kernels;
use rocm_kernel_macros::{amdgpu_device, amdgpu_global};

/// The halves layout `(b, h, t, d)`.
#[amdgpu_device]
pub const ROPE_HALVES: u32 = 0;
/// Interleaved pairs, `(b, h, t, d)`.
#[amdgpu_device]
pub const ROPE_INTERLEAVED: u32 = 1;
/// The halves layout, `(b, t, h, d)`.
#[amdgpu_device]
pub const ROPE_THD: u32 = 2;

/// One rotated pair: `(x0 c - x1 s, x0 s + x1 c)` in f32 (shared by the
/// kernels and the Cpu backend).
///
/// ```
/// use ferrocm_kernels::nn::rope::rope_pair;
/// assert_eq!(rope_pair(1.0, 0.0, 0.0, 1.0), (0.0, 1.0)); // a quarter turn
/// ```
#[amdgpu_device]
#[inline(always)]
pub fn rope_pair(x0: f32, x1: f32, c: f32, s: f32) -> (f32, f32) {
    (x0 * c - x1 * s, x0 * s + x1 * c)
}

/// Where pair `i` of a row sits: the offsets of its two elements (the
/// halves layouts `(i, i + r/2)`, the interleaved `(2i, 2i + 1)`).
///
/// ```
/// use ferrocm_kernels::nn::rope::{ROPE_HALVES, ROPE_INTERLEAVED, rope_pair_at};
/// assert_eq!(rope_pair_at::<ROPE_HALVES>(3, 16), (3, 11));
/// assert_eq!(rope_pair_at::<ROPE_INTERLEAVED>(3, 16), (6, 7));
/// ```
#[amdgpu_device]
#[inline(always)]
pub fn rope_pair_at<const LAYOUT: u32>(i: u32, r: u32) -> (u32, u32) {
    if LAYOUT == ROPE_INTERLEAVED {
        (2 * i, 2 * i + 1)
    } else {
        (i, i + r / 2)
    }
}

/// The body of the rope kernels. `rows` is `b * h * t`; `t_table` the rows
/// of one table (of each batch's, `per_batch != 0`).
#[amdgpu_device]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub fn rope_body<T: Elem, const LAYOUT: u32>(
    out: *mut T,
    x: *const T,
    cos: *const T,
    sin: *const T,
    rows: u64,
    h: u32,
    t: u32,
    d: u32,
    r: u32,
    t_table: u32,
    offset: u32,
    per_batch: u32,
) {
    // Launched with `early_start`: nothing global is touched before this.
    wait_prior_grids();
    release_dependent_grids();
    let half = r / 2;
    // Rows, halves and tables on 16-byte words: a word of each half (4
    // f32, 8 f16/bf16 pairs), or the two words of `per` interleaved pairs,
    // per load (2-byte loads held bf16 to 41% of the H100's copy
    // bandwidth).
    let per = per_word::<T>();
    let on_word = |p: usize| p.is_multiple_of(16);
    if size_of::<T>() <= 4
        && half.is_multiple_of(per)
        && d.is_multiple_of(per)
        && on_word(out as usize)
        && on_word(x as usize)
        && on_word(cos as usize)
        && on_word(sin as usize)
    {
        rope_words::<T, LAYOUT>(
            out,
            x,
            cos,
            sin,
            rows,
            h,
            t,
            d / per,
            half / per,
            t_table,
            offset,
            per_batch,
        );
        return;
    }
    let units = (d - half) as u64;
    let small = rows * units <= u32::MAX as u64;
    grid_stride(rows * units, |u| {
        let (row, k) = rope_split(u, units, small);
        let base = row as usize * d as usize;
        if k < half {
            let table_row = rope_table_row::<LAYOUT>(row, h, t, t_table, offset, per_batch, small);
            let at = table_row * half as usize + k as usize;
            let (c, s) = unsafe { (load(cos, at).to_f32(), load(sin, at).to_f32()) };
            let (i0, i1) = rope_pair_at::<LAYOUT>(k, r);
            let (i0, i1) = (base + i0 as usize, base + i1 as usize);
            unsafe {
                let (y0, y1) = rope_pair(load(x, i0).to_f32(), load(x, i1).to_f32(), c, s);
                store(out, i0, T::from_f32(y0));
                store(out, i1, T::from_f32(y1));
            }
        } else {
            let i = base + (r + k - half) as usize;
            unsafe { store(out, i, load(x, i)) };
        }
    });
}

/// [`rope_pair`] on elements of `T`, rounded once.
#[amdgpu_device]
#[inline(always)]
fn rope_elems<T: Elem>(x0: T, x1: T, c: T, s: T) -> (T, T) {
    let (a, b) = rope_pair(x0.to_f32(), x1.to_f32(), c.to_f32(), s.to_f32());
    (T::from_f32(a), T::from_f32(b))
}

/// `per` interleaved pairs: words `a` and `b` hold pairs `0..per/2` and
/// `per/2..per` as `(x0, x1)` neighbours, `c` and `s` their `per` cosines
/// and sines. Written out lane by lane with constant indices (16-bit types:
/// a lane is a pair; f32: two lanes are).
#[amdgpu_device]
#[inline(always)]
fn rope_interleaved_words<T: Elem>(a: W128, b: W128, c: W128, s: W128) -> (W128, W128) {
    if size_of::<T>() == 2 {
        // Pair p's cosine is element p % 2 of lane p / 2 of `c`.
        let pair = |x: u32, cl: u32, sl: u32, k: u32| {
            let (y0, y1) = rope_elems::<T>(
                lane_get(x, 0),
                lane_get(x, 1),
                lane_get(cl, k),
                lane_get(sl, k),
            );
            lane_of(y0, y1)
        };
        (
            W128([
                pair(a.0[0], c.0[0], s.0[0], 0),
                pair(a.0[1], c.0[0], s.0[0], 1),
                pair(a.0[2], c.0[1], s.0[1], 0),
                pair(a.0[3], c.0[1], s.0[1], 1),
            ]),
            W128([
                pair(b.0[0], c.0[2], s.0[2], 0),
                pair(b.0[1], c.0[2], s.0[2], 1),
                pair(b.0[2], c.0[3], s.0[3], 0),
                pair(b.0[3], c.0[3], s.0[3], 1),
            ]),
        )
    } else {
        // A pair is two lanes; pair p's cosine is lane p of `c`.
        let pair = |x0: u32, x1: u32, cl: u32, sl: u32| {
            let (y0, y1) = rope_elems::<T>(
                lane_get(x0, 0),
                lane_get(x1, 0),
                lane_get(cl, 0),
                lane_get(sl, 0),
            );
            (lane_of(y0, y0), lane_of(y1, y1))
        };
        let (p0, p1) = (
            pair(a.0[0], a.0[1], c.0[0], s.0[0]),
            pair(a.0[2], a.0[3], c.0[1], s.0[1]),
        );
        let (p2, p3) = (
            pair(b.0[0], b.0[1], c.0[2], s.0[2]),
            pair(b.0[2], b.0[3], c.0[3], s.0[3]),
        );
        (
            W128([p0.0, p0.1, p1.0, p1.1]),
            W128([p2.0, p2.1, p3.0, p3.1]),
        )
    }
}

/// Unit `u` as (row, unit in the row), in 32-bit arithmetic when `small`
/// (every index fits): a 64-bit division is a long instruction sequence on
/// a GPU, and it is per unit.
#[amdgpu_device]
#[inline(always)]
fn rope_split(u: u64, units: u64, small: bool) -> (u64, u32) {
    if small {
        let (u, units) = (u as u32, units as u32);
        let row = u / units;
        (row as u64, u - row * units)
    } else {
        let row = u / units;
        (row, (u - row * units) as u32)
    }
}

/// The table row of `row`: its position in the sequence plus `offset`, in
/// its batch's table when `per_batch != 0`; 32-bit arithmetic when `small`
/// (the row fits).
#[amdgpu_device]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn rope_table_row<const LAYOUT: u32>(
    row: u64,
    h: u32,
    t: u32,
    t_table: u32,
    offset: u32,
    per_batch: u32,
    small: bool,
) -> usize {
    let (ti, bi) = if small {
        let row = row as u32;
        let ti = if LAYOUT == ROPE_THD {
            row / h % t
        } else {
            row % t
        };
        (ti, (row / h / t) as u64)
    } else {
        let ti = if LAYOUT == ROPE_THD {
            row / h as u64 % t as u64
        } else {
            row % t as u64
        };
        (ti as u32, row / (h as u64 * t as u64))
    };
    let first = if per_batch != 0 {
        bi * t_table as u64
    } else {
        0
    };
    (first + (offset + ti) as u64) as usize
}

/// [`rope_body`] on 16-byte words: `dw` words per row, `hw` per half; unit
/// `k < hw` of a row rotates word `k` of each half (interleaved: words `2k`
/// and `2k + 1`, the same pairs as word `k` of the tables), the others copy
/// a word.
#[amdgpu_device]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn rope_words<T: Elem, const LAYOUT: u32>(
    out: *mut T,
    x: *const T,
    cos: *const T,
    sin: *const T,
    rows: u64,
    h: u32,
    t: u32,
    dw: u32,
    hw: u32,
    t_table: u32,
    offset: u32,
    per_batch: u32,
) {
    let (ow, xw, cw, sw) = (
        out as *mut W128,
        x as *const W128,
        cos as *const W128,
        sin as *const W128,
    );
    let units = (dw - hw) as u64;
    let small = rows * units <= u32::MAX as u64;
    grid_stride(rows * units, |u| {
        let (row, k) = rope_split(u, units, small);
        let base = row as usize * dw as usize;
        if k < hw {
            let table_row = rope_table_row::<LAYOUT>(row, h, t, t_table, offset, per_batch, small);
            let at = table_row * hw as usize + k as usize;
            // Halves: word k of each half. Interleaved: the two words of
            // pairs k * per .. (k + 1) * per.
            let (i0, i1) = if LAYOUT == ROPE_INTERLEAVED {
                (base + 2 * k as usize, base + 2 * k as usize + 1)
            } else {
                (base + k as usize, base + (hw + k) as usize)
            };
            unsafe {
                let (c, s) = (load(cw, at), load(sw, at));
                let (x0, x1) = (load(xw, i0), load(xw, i1));
                let (y0, y1) = if LAYOUT == ROPE_INTERLEAVED {
                    rope_interleaved_words::<T>(x0, x1, c, s)
                } else {
                    word_map4x2::<T>(x0, x1, c, s, |x0, x1, c, s| rope_elems(x0, x1, c, s))
                };
                store(ow, i0, y0);
                store(ow, i1, y1);
            }
        } else {
            let i = base + (hw + k) as usize;
            unsafe { store(ow, i, load(xw, i)) };
        }
    });
}

/// The parameter types of every rope kernel on element type `T`: `(out, x,
/// cos, sin, rows, h, t, d, r, t_table, offset, per_batch)`.
#[cfg(not(ferrocm_device))]
pub type RopeArgs<T> = (
    *mut T,
    *const T,
    *const T,
    *const T,
    u64,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
);

/// The body of `rope_cache_*` / `rope_i_cache_*` (see the module doc):
/// one workitem per rotated pair or copied element of q's and k's head
/// rows (`d - r/2` units each), then per element of v's. `q_stride`,
/// `k_stride`, `v_stride`: elements between tokens of the inputs (heads
/// contiguous within a token, tokens of a batch after one another). The op
/// checks that every index fits in 32 bits.
#[amdgpu_device]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub fn rope_cache_body<T: Elem, const LAYOUT: u32>(
    q_out: *mut T,
    k_cache: *mut T,
    v_cache: *mut T,
    q: *const T,
    k: *const T,
    v: *const T,
    cos: *const T,
    sin: *const T,
    shape: RopeCacheShape,
) {
    // Launched with `early_start`: nothing global is touched before this.
    wait_prior_grids();
    release_dependent_grids();
    let s = shape;
    let tokens = s.b * s.t;
    // Three loops, one per input: each keeps its pointers uniform and
    // few values live (one loop choosing among them per workitem spilled
    // scalar registers on gfx942).
    rope_head_rows::<T, LAYOUT>(q_out, q, cos, sin, &s, s.hq, s.q_stride, |tok, hh| {
        let (bi, ti) = (tok / s.t, tok % s.t);
        ((bi * s.hq + hh) * s.t + ti) as usize * s.d as usize
    });
    rope_head_rows::<T, LAYOUT>(k_cache, k, cos, sin, &s, s.hk, s.k_stride, |tok, hh| {
        rope_cache_row(&s, tok, hh)
    });
    grid_stride((tokens * s.hk * s.d) as u64, |u| {
        let u = u as u32;
        let row = u / s.d;
        let j = u - row * s.d;
        let (tok, hh) = (row / s.hk, row % s.hk);
        let from = tok as usize * s.v_stride as usize + (hh * s.d + j) as usize;
        unsafe {
            store(
                v_cache,
                rope_cache_row(&s, tok, hh) + j as usize,
                load(v, from),
            )
        };
    });
}

/// Where head `hh` of token `tok` (of `b * t`) starts in a cache `(b, hk,
/// cap, d)`: its row `pos + ti`.
#[amdgpu_device]
#[inline(always)]
fn rope_cache_row(s: &RopeCacheShape, tok: u32, hh: u32) -> usize {
    let (bi, ti) = (tok / s.t, tok % s.t);
    ((bi * s.hk + hh) as usize * s.cap as usize + (s.pos + ti) as usize) * s.d as usize
}

/// One input of `rope_cache_*`: each of its `b * t * heads` head rows
/// (tokens `stride` apart, heads contiguous) rotated into `dst` at
/// `to(token, head)`, a workitem per rotated pair or copied element.
#[amdgpu_device]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn rope_head_rows<T: Elem, const LAYOUT: u32>(
    dst: *mut T,
    src: *const T,
    cos: *const T,
    sin: *const T,
    s: &RopeCacheShape,
    heads: u32,
    stride: u32,
    to: impl Fn(u32, u32) -> usize,
) {
    let half = s.r / 2;
    let units = s.d - half;
    grid_stride((s.b * s.t * heads * units) as u64, |u| {
        let u = u as u32;
        let row = u / units;
        let unit = u - row * units;
        let (tok, hh) = (row / heads, row % heads);
        let from = tok as usize * stride as usize + (hh * s.d) as usize;
        let to = to(tok, hh);
        if unit < half {
            let at = (s.pos + tok % s.t) as usize * half as usize + unit as usize;
            let (c, sn) = unsafe { (load(cos, at).to_f32(), load(sin, at).to_f32()) };
            let (i0, i1) = rope_pair_at::<LAYOUT>(unit, s.r);
            let (i0, i1) = (i0 as usize, i1 as usize);
            unsafe {
                let (y0, y1) = rope_pair(
                    load(src, from + i0).to_f32(),
                    load(src, from + i1).to_f32(),
                    c,
                    sn,
                );
                store(dst, to + i0, T::from_f32(y0));
                store(dst, to + i1, T::from_f32(y1));
            }
        } else {
            let i = (s.r + unit - half) as usize;
            unsafe { store(dst, to + i, load(src, from + i)) };
        }
    });
}

/// The sizes of a `rope_cache_*` launch (one struct so the body's
/// parameter list stays short; the kernels take them as separate `u32`s).
#[amdgpu_device]
#[derive(Clone, Copy)]
pub struct RopeCacheShape {
    /// Batch.
    pub b: u32,
    /// Tokens.
    pub t: u32,
    /// Query heads.
    pub hq: u32,
    /// Key/value heads.
    pub hk: u32,
    /// Head dims.
    pub d: u32,
    /// Rotary dims (twice the tables' columns).
    pub r: u32,
    /// Elements between tokens of q, k and v.
    pub q_stride: u32,
    /// See `q_stride`.
    pub k_stride: u32,
    /// See `q_stride`.
    pub v_stride: u32,
    /// Cache rows per head.
    pub cap: u32,
    /// The first cache row (and table row) written.
    pub pos: u32,
}

/// The parameter types of `rope_cache_*`: `(q_out, k_cache, v_cache, q, k,
/// v, cos, sin, b, t, hq, hk, d, r, q_stride, k_stride, v_stride, cap,
/// pos)`.
#[cfg(not(ferrocm_device))]
pub type RopeCacheArgs<T> = (
    *mut T,
    *mut T,
    *mut T,
    *const T,
    *const T,
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
    u32,
    u32,
    u32,
    u32,
);

#[cfg(not(ferrocm_device))]
use crate::host::KernelRef;

/// The rope kernels of one element type, by layout (host side).
#[cfg(not(ferrocm_device))]
#[derive(Clone, Copy, Debug)]
pub struct RopeTable<T: 'static> {
    /// `rope_{T}` ([`ROPE_HALVES`]).
    pub halves: KernelRef<RopeArgs<T>>,
    /// `rope_i_{T}` ([`ROPE_INTERLEAVED`]).
    pub interleaved: KernelRef<RopeArgs<T>>,
    /// `rope_thd_{T}` ([`ROPE_THD`]).
    pub thd: KernelRef<RopeArgs<T>>,
    /// `rope_cache_{T}`: halves, into a KV cache.
    pub halves_cache: KernelRef<RopeCacheArgs<T>>,
    /// `rope_i_cache_{T}`: interleaved pairs, into a KV cache.
    pub interleaved_cache: KernelRef<RopeCacheArgs<T>>,
}

/// The rope kernels of an element type: float types only.
#[cfg(not(ferrocm_device))]
pub trait RopeKernels: Sized + 'static {
    /// The three kernels, if the type has them.
    const ROPE: Option<RopeTable<Self>>;
}

macro_rules! rope_kernels {
    (none: $($n:ty),*) => {$(
        #[cfg(not(ferrocm_device))]
        impl RopeKernels for $n {
            const ROPE: Option<RopeTable<Self>> = None;
        }
    )*};
    ($($t:ty => $halves:ident, $inter:ident, $thd:ident, $hc:ident, $ic:ident;)*) => {
        $(
            #[cfg(not(ferrocm_device))]
            impl RopeKernels for $t {
                const ROPE: Option<RopeTable<Self>> = Some(RopeTable {
                    halves: KernelRef::of::<$halves>(),
                    interleaved: KernelRef::of::<$inter>(),
                    thd: KernelRef::of::<$thd>(),
                    halves_cache: KernelRef::of::<$hc>(),
                    interleaved_cache: KernelRef::of::<$ic>(),
                });
            }
        )*
        rope_kernels!(@k $($t => $halves ROPE_HALVES, $inter ROPE_INTERLEAVED, $thd ROPE_THD;)*);
        rope_kernels!(@cache $($t => $hc ROPE_HALVES, $ic ROPE_INTERLEAVED;)*);
    };
    (@cache $($t:ty => $($name:ident $layout:ident),*;)*) => {
        kernels! { table CACHE_KERNELS; $($(
            fn $name(q_out: *mut $t, k_cache: *mut $t, v_cache: *mut $t, q: *const $t, k: *const $t,
                     v: *const $t, cos: *const $t, sin: *const $t, b: u32, t: u32, hq: u32, hk: u32,
                     d: u32, r: u32, q_stride: u32, k_stride: u32, v_stride: u32, cap: u32, pos: u32) {
                let shape = RopeCacheShape { b, t, hq, hk, d, r, q_stride, k_stride, v_stride, cap, pos };
                rope_cache_body::<$t, $layout>(q_out, k_cache, v_cache, q, k, v, cos, sin, shape)
            }
        )*)*}
    };
    (@k $($t:ty => $($name:ident $layout:ident),*;)*) => {
        kernels! {$($(
            fn $name(out: *mut $t, x: *const $t, cos: *const $t, sin: *const $t, rows: u64, h: u32,
                     t: u32, d: u32, r: u32, t_table: u32, offset: u32, per_batch: u32) {
                rope_body::<$t, $layout>(out, x, cos, sin, rows, h, t, d, r, t_table, offset, per_batch)
            }
        )*)*}
    };
}

rope_kernels! {
    f32 => rope_f32, rope_i_f32, rope_thd_f32, rope_cache_f32, rope_i_cache_f32;
    F16 => rope_f16, rope_i_f16, rope_thd_f16, rope_cache_f16, rope_i_cache_f16;
    Bf16 => rope_bf16, rope_i_bf16, rope_thd_bf16, rope_cache_bf16, rope_i_cache_bf16;
}
rope_kernels!(none: u8, u32, i64);
