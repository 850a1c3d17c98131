//! Attention, `softmax(q·kᵀ·scale (softcapped) + mask) · v` per query row,
//! for f32, f16 and bf16 (f32 math), with causal and sliding-window
//! masking, grouped-query heads and split-K ("flash-decoding"):
//!
//! - `attn_rows_{dtype}_w{1,2,4}` (and `_w1_l8`): a workgroup takes [`ATTN_ROWS`] `/ w` query
//!   rows of one batch and KV head (the query heads that share it first:
//!   GQA reads each key once for all of them) and one split of the keys.
//!   Its workitems form groups of 16 (`_l8`: 8) workitems per key: each
//!   holds `w` 16-byte words of every row's query and of the key and value
//!   rows. The group sums the rows' dot products scattered (each workitem
//!   ends with one row's sum, `group_sum_scatter`), so a row's online
//!   softmax (max `m`, sum `l`) is one workitem's work, not every one's;
//!   its owners hand each workitem the row's rescale and weight for the
//!   unnormalised output `o` it holds. Each group visits every
//!   `groups`-th key, the next key's words in flight while one is used. At
//!   the end the groups of a wave merge through butterflies, the waves
//!   through LDS; with one split the result is the output, else `(m, l,
//!   o)` goes to a partial buffer;
//! - `attn_merge_{dtype}`: merges the splits' partials of each row;
//! - `attn_mma_{dtype}_d{64,80,96,128}` (f16, bf16): 16 query rows a wave
//!   on the device layer's matrix-unit primitive ([`attn_mma_body`]);
//! - `attn_wgmma_{dtype}_d{64,128}` (f16, bf16): 64 query rows a
//!   workgroup on Hopper's warpgroup product ([`attn_wgmma_body`]), for
//!   prefills without a mask tensor or softcap.
//!
//! Keys a query cannot see (causal, window) are never read, so one split
//! of a long cache and a prefill's early rows cost nothing there; a key
//! whose logit is -inf (an additive mask) adds nothing; a row that sees no
//! key is zeros (`l == 0`), never NaN. NaN in a seen logit gives NaN.
//!
//! The scalar steps ([`attn_span`], [`attn_logit`], [`attn_weight`],
//! [`attn_finish`]) are shared with the Cpu backend.

use crate::device::*;
use crate::elem::W128;
use crate::elem::*;
use crate::kernels;
use crate::math;
use crate::matmul::dense::MatElem;
use crate::unroll4;
use rocm_kernel_macros::{amdgpu_device, amdgpu_global};

/// Workitems per workgroup of the attention row kernels.
#[amdgpu_device]
pub const ATTN_BLOCK: u32 = 256;
/// Query rows per workgroup of the row kernels with one word per
/// workitem and row; with `w` words, `ATTN_ROWS / w` (the registers of a
/// row grow with its words: 4 rows of 2 words spilled on gfx90a).
#[amdgpu_device]
pub const ATTN_ROWS: u32 = 4;
/// Workitems per workgroup of the merge kernel (one row each).
#[amdgpu_device]
pub const ATTN_MERGE_BLOCK: u32 = 256;
/// `flags` bit: causal (aligned to the end: query `i` of `s_q` sits at
/// position `i + s_kv - s_q`).
#[amdgpu_device]
pub const ATTN_CAUSAL: u32 = 1;
/// The largest row max (base-2 units, `|max dot · scale · log2 e|`) the
/// matrix-unit kernel's raw path takes: its weight `2^(dot · c - m)` is
/// exact before one rounding while `m = max · c` was rounded, so every
/// weight of the row carries a common `2^r`, `|r| <= |m| 2^-24`. It cancels
/// in `o / l`, but past 2^24 (`|r|` over 1) it could push the probabilities
/// past f16's range or to 0; beyond it the logits path runs.
#[amdgpu_device]
pub const ATTN_RAW_LIMIT: f32 = 16_777_216.0;
/// `flags` bit of the matrix-unit kernel: two K/V buffers in LDS, the next
/// stage fetched ([`crate::device::lds_copy_async`]) while this one is
/// computed on ([`attn_mma_lds_bytes`] with `double_buffer`).
#[amdgpu_device]
pub const ATTN_DOUBLE_BUFFER: u32 = 1 << 16;
/// How far (natural log units) a row kernel's logit may pass the row's
/// running max before the max moves and the row's sums are rescaled:
/// weights stay below e^8 (about 2981), and most keys rescale nothing.
#[amdgpu_device]
pub const ATTN_RESCALE_SLACK: f32 = 8.0;
/// f32 values per (wave, row) slot of the row kernels' LDS beyond the head
/// dim: `m` and `l`.
#[amdgpu_device]
pub const ATTN_STATS: u32 = 2;

/// The head dims the kernels take.
pub const ATTN_HEAD_DIMS: [usize; 5] = [64, 80, 96, 128, 256];

/// The keys query `i` (of `s_q`, aligned to the end of `s_kv` keys: at
/// position `p = i + s_kv - s_q`) sees, as the range `lo..hi`: `j <= p`
/// when causal, and `j > p - window` when `window > 0` (Mistral's sliding
/// window: the query and the `window - 1` keys before it). Empty (`lo ==
/// hi`) when it sees none.
///
/// ```
/// use ferrocm_kernels::nn::attention::attn_span;
/// assert_eq!(attn_span(0, 1, 10, true, 0), (0, 10)); // decode: every key
/// assert_eq!(attn_span(0, 1, 10, true, 3), (7, 10)); // the last three
/// assert_eq!(attn_span(0, 4, 4, true, 0), (0, 1)); // prefill row 0
/// assert_eq!(attn_span(0, 6, 4, true, 0), (0, 0)); // before every key
/// ```
#[amdgpu_device]
#[inline(always)]
pub fn attn_span(i: u32, s_q: u32, s_kv: u32, causal: bool, window: u32) -> (u32, u32) {
    // p + 1, both sides shifted by s_q: no negative positions.
    let p1 = i as u64 + s_kv as u64 + 1;
    let hi = if causal {
        Ord::min(p1.saturating_sub(s_q as u64), s_kv as u64)
    } else {
        s_kv as u64
    };
    let lo = if window > 0 {
        p1.saturating_sub(s_q as u64 + window as u64)
    } else {
        0
    };
    (Ord::min(lo, hi) as u32, hi as u32)
}

/// The logit of a seen key: `dot * scale`, softcapped (`cap * tanh(s /
/// cap)`, Gemma 2) when `softcap > 0`, plus the additive mask value.
///
/// ```
/// use ferrocm_kernels::nn::attention::attn_logit;
/// assert_eq!(attn_logit(4.0, 0.5, 0.0, 1.0), 3.0);
/// assert!((attn_logit(100.0, 1.0, 5.0, 0.0) - 5.0).abs() < 1e-6);
/// ```
#[amdgpu_device]
#[inline(always)]
pub fn attn_logit(dot: f32, scale: f32, softcap: f32, mask: f32) -> f32 {
    let s = dot * scale;
    let s = if softcap > 0.0 {
        softcap * math::tanh(s / softcap)
    } else {
        s
    };
    s + mask
}

/// `exp(s - m)`, the weight of logit `s` under the running max `m`; 0 for
/// `s = -inf` (also when `m` is: a row that has seen nothing).
///
/// ```
/// use ferrocm_kernels::nn::attention::attn_weight;
/// assert_eq!(attn_weight(2.0, 2.0), 1.0);
/// assert_eq!(attn_weight(f32::NEG_INFINITY, f32::NEG_INFINITY), 0.0);
/// ```
#[amdgpu_device]
#[inline(always)]
pub fn attn_weight(s: f32, m: f32) -> f32 {
    if s == f32::NEG_INFINITY {
        0.0
    } else {
        math::exp_fast(s - m)
    }
}

/// The output value from the unnormalised sum `o` and the softmax
/// denominator `l`: 0 when no key was seen.
///
/// ```
/// use ferrocm_kernels::nn::attention::attn_finish;
/// assert_eq!(attn_finish(3.0, 2.0), 1.5);
/// assert_eq!(attn_finish(0.0, 0.0), 0.0);
/// ```
#[amdgpu_device]
#[inline(always)]
pub fn attn_finish(o: f32, l: f32) -> f32 {
    if l == 0.0 { 0.0 } else { o / l }
}

/// Whether a row's max `m` moves for logit `x`: when `x` passes it by more
/// than `slack`, or either is NaN. (`x - m`, not `m + slack`: far from 0 an
/// ulp of `m` can exceed the slack, and the weights `e^(x - m)` would pass
/// f16's range. `x <= m` first: -inf against -inf stays.)
#[amdgpu_device]
#[inline(always)]
#[allow(clippy::nonminimal_bool, clippy::neg_cmp_op_on_partial_ord)]
fn max_moves(x: f32, m: f32, slack: f32) -> bool {
    !(x <= m || x - m <= slack)
}

/// Whether `t`, computed from `s`, overflowed: infinite where `s` is
/// finite (false for NaN).
#[amdgpu_device]
#[inline(always)]
fn overflows(s: f32, t: f32) -> bool {
    t.is_infinite() && !s.is_infinite()
}

/// A logit in base-2 units (`s · log2 e`), finite where `s` is: logits past
/// ±f32::MAX / log2 e (an additive mask of f32's or bf16's lowest value, the
/// usual fill) saturate at ±f32::MAX instead of becoming ±inf, which would
/// make a row that sees only such keys zeros instead of their values' mean.
/// (Logits that far out then tie: their differences are lost.)
#[amdgpu_device]
#[inline(always)]
fn base2(s: f32) -> f32 {
    let t = s * core::f32::consts::LOG2_E;
    if overflows(s, t) {
        if s < 0.0 { -f32::MAX } else { f32::MAX }
    } else {
        t
    }
}

/// The running max after `s` (NaN if either is NaN: a NaN logit shows).
#[amdgpu_device]
#[inline(always)]
fn max_nan(m: f32, s: f32) -> f32 {
    math::maximum(m, s)
}

/// A probability as it multiplies V: rounded to the inputs' dtype (f16,
/// bf16; f32 unchanged), as FlashAttention and the matrix-unit kernel's
/// second product have it. Every path (the kernels, the Cpu) rounds so;
/// the softmax's sum is of the unrounded values.
///
/// ```
/// use ferrocm_kernels::elem::Bf16;
/// use ferrocm_kernels::nn::attention::attn_round;
/// assert_eq!(attn_round::<f32>(0.1), 0.1);
/// assert_eq!(attn_round::<Bf16>(1.0 + 1.0 / 512.0), 1.0); // below half a bf16 ulp
/// ```
#[amdgpu_device]
#[inline(always)]
pub fn attn_round<T: MatElem>(p: f32) -> f32 {
    T::from_f32(p).widen()
}

/// `o += p * v` over a word's elements (the rescale of `o`, where the
/// row's max moved, is the caller's).
#[amdgpu_device]
#[inline(always)]
fn add_weighted<T: MatElem>(o: &mut [f32; 8], p: f32, v: [f32; 8]) {
    let mut e = 0;
    while e < T::PER_WORD as usize {
        o[e] = math::fma(p, v[e], o[e]);
        e += 1;
    }
}

/// `acc + Σ q[e] * k[e]` over a word's elements.
#[amdgpu_device]
#[inline(always)]
fn dot<T: MatElem>(q: [f32; 8], k: W128, acc: f32) -> f32 {
    let k = T::unpack(k);
    let mut acc = acc;
    let mut e = 0;
    while e < T::PER_WORD as usize {
        acc = math::fma(q[e], k[e], acc);
        e += 1;
    }
    acc
}

/// The shape and strides of an attention launch (element units; `mask`
/// rows are contiguous along the keys).
#[amdgpu_device]
#[derive(Clone, Copy)]
pub struct AttnGeometry {
    /// Query heads, KV heads, query rows, keys, head dim.
    pub dims: (u32, u32, u32, u32, u32),
    /// Strides of q over (batch, head, row).
    pub q: (u64, u64, u64),
    /// Strides of k.
    pub k: (u64, u64, u64),
    /// Strides of v.
    pub v: (u64, u64, u64),
    /// Strides of the mask over (batch, query head, query row).
    pub mask: (u64, u64, u64),
}

/// The LDS bytes of a row kernel launch with `waves` waves and `rows` rows
/// per workgroup: a slot of `o[d]` per wave and row (16-byte words: every
/// head dim is a multiple of 4), then each slot's `m` and `l`, the slots'
/// weights, the rows' denominators and maxima.
///
/// ```
/// use ferrocm_kernels::nn::attention::attn_rows_lds_bytes;
/// assert_eq!(attn_rows_lds_bytes(8, 4, 128), 4 * (8 * 4 * 130 + 8 * 4 + 2 * 4));
/// ```
#[amdgpu_device]
#[inline(always)]
pub const fn attn_rows_lds_bytes(waves: u32, rows: u32, d: u32) -> u32 {
    4 * (waves * rows * (d + ATTN_STATS + 1) + 2 * rows)
}

/// The query row `r` of a workgroup's block `rb` in KV head `kvh`: `(valid,
/// query head, row)`.
#[amdgpu_device]
#[inline(always)]
fn block_row(rb: u32, r: u32, rows: u32, kvh: u32, g: u32, s_q: u32) -> (bool, u32, u32) {
    let rho = rb * rows + r;
    (rho < g * s_q, kvh * g + rho / s_q, rho % s_q)
}

/// The sums over a group of `L` workitems (a power of two, at least
/// `R`; `gl` this workitem's place in it) of each of its `R` values,
/// scattered: the workitem gets the sum of value `gl / (L / R)`. The
/// first halvings exchange half the values each (a butterfly on all `R`
/// would take `R` exchanges per level; this takes `R - 1` in all before the
/// last levels' single ones).
#[amdgpu_device]
#[inline(always)]
fn group_sum_scatter<const R: usize, const L: u32>(fw: FullWaves, v: [f32; R], gl: u32) -> f32 {
    let mut v = v;
    let (mut n, mut off) = (R, L / 2);
    while n > 1 {
        let h = n / 2;
        let upper = gl & off != 0;
        let mut i = 0;
        while i < h {
            let (lo, hi) = (v[i], v[i + h]);
            let (keep, send) = if upper { (hi, lo) } else { (lo, hi) };
            v[i] = keep + fw.shfl_xor_f32(send, off);
            i += 1;
        }
        n = h;
        off /= 2;
    }
    let mut x = v[0];
    while off > 0 {
        x += fw.shfl_xor_f32(x, off);
        off /= 2;
    }
    x
}

/// The body of the row kernels (see the module doc): `W` words per workitem
/// and row, `R` rows per workgroup (`ATTN_ROWS / W`), `L` workitems per key
/// (8 or 16: a constant, so the exchanges unroll); `flags` holds
/// [`ATTN_CAUSAL`].
#[amdgpu_device]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub fn attn_rows_body<T: MatElem, const W: usize, const R: usize, const L: u32>(
    out: *mut T,
    part: *mut f32,
    q: *const T,
    k: *const T,
    v: *const T,
    mask: *const T,
    geo: AttnGeometry,
    (scale, softcap, window, flags, chunk): (f32, f32, u32, u32, u32),
) {
    let (h_q, h_kv, s_q, s_kv, d) = geo.dims;
    let per = T::PER_WORD;
    let nw = d / per;
    let lanes = L;
    let causal = flags & ATTN_CAUSAL != 0;
    // The op launches whole waves (ATTN_BLOCK or half of it).
    let fw = unsafe { FullWaves::assume() };
    // Launched with `early_start`: nothing global is touched before this.
    wait_prior_grids();
    release_dependent_grids();
    let tid = workitem_id_x();
    // Powers of two: shifts, not divisions (which NVIDIA runs as
    // subroutines).
    let lanes_log = lanes.trailing_zeros();
    let (gi, gl) = (tid >> lanes_log, tid & (lanes - 1));
    let groups = workgroup_size_x() >> lanes_log;
    // After the scattered sums, the workitems of a group own its rows in
    // blocks of `rpl`: this one owns row `mine`, whose softmax state it
    // keeps; `first` is the group's first lane.
    let rpl = Ord::max(lanes / R as u32, 1);
    let mine = gl >> rpl.trailing_zeros();
    let first = lane_id() - gl;
    // At least 1: a division the compiler cannot prove safe calls the panic
    // handler.
    let g = Ord::max(h_q / Ord::max(h_kv, 1), 1);
    let s_q = Ord::max(s_q, 1);
    let row_blocks = Ord::max((g * s_q).div_ceil(R as u32), 1);
    let wg = workgroup_id_x();
    let (rb, bh) = (wg % row_blocks, wg / row_blocks);
    let (kvh, bi) = (bh % Ord::max(h_kv, 1), bh / Ord::max(h_kv, 1));
    let (split, splits) = (workgroup_id_y(), num_workgroups_y());
    let begin = Ord::min(split as u64 * chunk as u64, s_kv as u64) as u32;
    let end = Ord::min(begin as u64 + chunk as u64, s_kv as u64) as u32;
    // Positions in words: every offset and stride of k and v is a whole
    // number of words (the op copies other views; a dim of size 1 adds
    // nothing), so key j's first word of this workitem is `base + j *
    // step`, stepped on by additions in the loop.
    let pw = per as u64;
    let kv_base = |s: (u64, u64, u64)| (bi as u64 * s.0 + kvh as u64 * s.1) / pw + gl as u64;
    let (k_base, v_base) = (kv_base(geo.k), kv_base(geo.v));
    let (k_step, v_step) = (geo.k.2 / pw, geo.v.2 / pw);
    let at = |j: u32| (k_base + j as u64 * k_step, v_base + j as u64 * v_step);
    // The key's words at `(ko, vo)` (zeros past the head dim or the span).
    let fetch = |(ko, vo): (u64, u64), ok: bool| {
        let mut kw = [W128([0; 4]); W];
        let mut vw = [W128([0; 4]); W];
        if ok {
            unroll4!(t < W => {
                let wi = gl + lanes * t as u32;
                if wi < nw {
                    let off = (lanes * t as u32) as u64;
                    unsafe {
                        kw[t] = load(k as *const W128, (ko + off) as usize);
                        vw[t] = load(v as *const W128, (vo + off) as usize);
                    }
                }
            });
        }
        (kw, vw)
    };
    // The first key's words load before the rows' spans are known, from
    // `begin` on, where decode and most blocks start (fetched again below
    // where the spans start later): every warp of the launch does this
    // setup at once, and the memory would idle through it.
    let prefetch = W == 1;
    let j0 = begin + gi;
    let (kw0, vw0) = fetch(at(j0), prefetch && j0 < end);
    // The keys some row sees within the split (none for rows past the
    // block's end); those of this workitem's row and where its mask row
    // starts.
    let (mut lo, mut hi) = (end, begin);
    let mut span = (0u32, 0u32);
    let mut mask_row = 0u64;
    let mut q_words = [[W128([0; 4]); W]; R];
    // The block's rows in turn, (head, row) stepped on from the first's:
    // one division, not one per row.
    let rho0 = rb * R as u32;
    let (mut head, mut i) = (kvh * g + rho0 / s_q, rho0 % s_q);
    unroll4!(r < R => {
        if rho0 + (r as u32) < g * s_q {
            let (a, b) = attn_span(i, s_q, s_kv, causal, window);
            let (a, b) = (Ord::max(a, begin), Ord::min(b, end));
            if a < b {
                if r as u32 == mine {
                    span = (a, b);
                }
                lo = Ord::min(lo, a);
                hi = Ord::max(hi, b);
            }
            if r as u32 == mine {
                mask_row = bi as u64 * geo.mask.0 + head as u64 * geo.mask.1 + i as u64 * geo.mask.2;
            }
            let base = bi as u64 * geo.q.0 + head as u64 * geo.q.1 + i as u64 * geo.q.2;
            unroll4!(t < W => {
                let wi = gl + lanes * t as u32;
                if wi < nw {
                    q_words[r][t] = unsafe { load(q as *const W128, (base / per as u64) as usize + wi as usize) };
                }
            });
        }
        i += 1;
        if i == s_q {
            i = 0;
            head += 1;
        }
    });
    // Where the block's rows go (a KV head's query rows are contiguous in
    // the output) and how many there are, worked out before the loop so
    // that what they are made of need not be held through it.
    let row0 = (bi as u64 * h_q as u64 + (kvh * g) as u64) * s_q as u64 + rho0 as u64;
    let rows = Ord::min(R as u32, g * s_q - rho0);
    // The online softmax of this workitem's row, and every row's output
    // words.
    let (mut m, mut l) = (f32::NEG_INFINITY, 0.0f32);
    let mut o = [[[0.0f32; 8]; W]; R];
    // Every group runs the same number of steps (the exchanges need all
    // lanes of the wave), idle past the span.
    let steps = if hi > lo {
        (hi - lo).div_ceil(groups)
    } else {
        0
    };
    let mut j = lo + gi;
    // One word per row: the next key's words load while this one is used
    // (with two, the registers they take made gfx942 spill). Zeros past the
    // span (a key there may hold anything, and its weight 0 times inf is
    // NaN).
    let (mut kw, mut vw) = if lo == begin {
        let (mut kw, mut vw) = (kw0, vw0);
        unroll4!(t < W => {
            kw[t] = word_if(kw[t], j < hi);
            vw[t] = word_if(vw[t], j < hi);
        });
        (kw, vw)
    } else {
        fetch(at(j), prefetch && j < hi)
    };
    // The loop's loads: key `far`'s words, `groups` keys on each step.
    let (mut kx, mut vx) = at(if prefetch { j + groups } else { j });
    let (k_next, v_next) = (groups as u64 * k_step, groups as u64 * v_step);
    let mut step = 0;
    while step < steps {
        let next = j + groups;
        let far = if prefetch { next } else { j };
        let (kn, vn) = fetch((kx, vx), far < hi);
        kx += k_next;
        vx += v_next;
        if !prefetch {
            kw = kn;
            vw = vn;
        }
        let mut s = [0.0f32; R];
        unroll4!(r < R => {
            unroll4!(t < W => {
                s[r] = dot::<T>(T::unpack(q_words[r][t]), kw[t], s[r]);
            });
        });
        // This workitem's row: its logit, the new max, the rescale of what
        // came before and the key's weight (a key it does not see: -inf,
        // weight 0, rescale 1; no branch but the mask's load).
        let dot = group_sum_scatter::<R, L>(fw, s, gl);
        // (The logit is computed for every workitem and then selected: a
        // branch around it made the H100 wait here for the next key's
        // loads, so they overlapped nothing. The softcap's branch makes it
        // wait too: a second copy of the body without that branch gained
        // 3% under ncu but took CDNA past its scalar registers.)
        let seen = j < hi && span.0 <= j && j < span.1;
        let mv = if seen && !mask.is_null() {
            unsafe { load(mask, (mask_row + j as u64) as usize) }.to_f32()
        } else {
            0.0
        };
        let x = attn_logit(dot, scale, softcap, mv);
        let x = if seen { x } else { f32::NEG_INFINITY };
        // The max moves only when the logit passes it by more than
        // ATTN_RESCALE_SLACK (or is NaN): `l` and `o` are sums relative to
        // whichever max the row holds, and weights up to e^slack keep them
        // far from overflow. Most steps then rescale nothing, and skip it.
        let moved = max_moves(x, m, ATTN_RESCALE_SLACK);
        let mn = if moved { max_nan(m, x) } else { m };
        let (a, p) = (attn_weight(m, mn), attn_weight(x, mn));
        m = mn;
        l = math::fma(l, a, p);
        // The weight multiplies V rounded to the dtype, as on the matrix
        // units (FlashAttention's second product); the sum `l` keeps it
        // unrounded. Identity for f32.
        let pv = attn_round::<T>(p);
        // Every row's rescale (where some row of the wave moved) and
        // weight from its owners.
        if fw.any(moved) {
            unroll4!(r < R => {
                let ar = fw.shfl_f32(a, first + r as u32 * rpl);
                unroll4!(t < W => {
                    let mut e = 0;
                    while e < per as usize {
                        o[r][t][e] *= ar;
                        e += 1;
                    }
                });
            });
        }
        let mut vf = [[0.0f32; 8]; W];
        unroll4!(t < W => {
            vf[t] = T::unpack(vw[t]);
        });
        unroll4!(r < R => {
            let pr = fw.shfl_f32(pv, first + r as u32 * rpl);
            unroll4!(t < W => {
                add_weighted::<T>(&mut o[r][t], pr, vf[t]);
            });
        });
        kw = kn;
        vw = vn;
        j = next;
        step += 1;
    }
    // The groups of a wave merge their states (the partner's workitem of
    // the same place owns the same row).
    let mut off = lanes;
    while off < wave_size() {
        let (mo, lo_) = (fw.shfl_xor_f32(m, off), fw.shfl_xor_f32(l, off));
        let mn = max_nan(m, mo);
        let (a, b) = (attn_weight(m, mn), attn_weight(mo, mn));
        m = mn;
        l = l * a + lo_ * b;
        unroll4!(r < R => {
            let src = first + r as u32 * rpl;
            let (ar, br) = (fw.shfl_f32(a, src), fw.shfl_f32(b, src));
            unroll4!(t < W => {
                let mut e = 0;
                while e < per as usize {
                    let oo = fw.shfl_xor_f32(o[r][t][e], off);
                    o[r][t][e] = o[r][t][e] * ar + oo * br;
                    e += 1;
                }
            });
        });
        off *= 2;
    }
    // Then the waves, through LDS: slot (wave, row) holds o[d] (d words,
    // a whole number of 16-byte words: vector stores and loads), then each
    // slot's m and l, each slot's weight under its row's max, each row's
    // denominator, then its max.
    let sh = lds::<f32>();
    let words = lds::<W128>();
    let (wave, waves) = (wave_id(), num_waves());
    let slots = waves * R as u32;
    let (stats, wts) = (slots * d, slots * (d + ATTN_STATS));
    let (lts, mts) = (wts + slots, wts + slots + R as u32);
    if lane_id() < lanes {
        if gl % rpl == 0 && mine < R as u32 {
            let at = stats + ATTN_STATS * (wave * R as u32 + mine);
            sh.store(at, m);
            sh.store(at + 1, l);
        }
        unroll4!(r < R => {
            let at = (wave * R as u32 + r as u32) * d;
            unroll4!(t < W => {
                let wi = gl + lanes * t as u32;
                if wi < nw {
                    let mut h = 0;
                    while h < per / 4 {
                        let x = &o[r][t][4 * h as usize..];
                        let w = W128([x[0].to_bits(), x[1].to_bits(), x[2].to_bits(), x[3].to_bits()]);
                        words.store((at + wi * per) / 4 + h, w);
                        h += 1;
                    }
                }
            });
        });
    }
    barrier();
    // The first wave weighs the slots, workitem `w * R + r` slot (w, r)
    // (waves * R <= 32 workitems, a power of two), and sums each row's
    // denominator over its slots by butterflies: each slot's exp once, not
    // once per column.
    if wave == 0 {
        let (sw, sr) = (tid / R as u32, tid % R as u32);
        let (mut lw, mut mt) = (0.0f32, f32::NEG_INFINITY);
        if tid < slots {
            let mut w = 0;
            while w < waves {
                mt = max_nan(mt, sh.load(stats + ATTN_STATS * (w * R as u32 + sr)));
                w += 1;
            }
            let at = stats + ATTN_STATS * (sw * R as u32 + sr);
            let wt = attn_weight(sh.load(at), mt);
            lw = sh.load(at + 1) * wt;
            sh.store(wts + tid, wt);
        }
        let mut off = R as u32;
        while off < slots {
            lw += fw.shfl_xor_f32(lw, off);
            off *= 2;
        }
        if tid < R as u32 {
            sh.store(lts + tid, lw);
            sh.store(mts + tid, mt);
        }
    }
    barrier();
    // This workitem's outputs, four columns (row r, word c) from `tid` on
    // in steps of the workgroup: one division, then additions (NVIDIA runs
    // divisions as subroutines).
    let (wgs, dw) = (workgroup_size_x(), d / 4);
    let (dr, dc) = (wgs / dw, wgs % dw);
    let (mut r, mut c) = (tid / dw, tid % dw);
    while r < R as u32 {
        if r < rows {
            let mut ot = [0.0f32; 4];
            let mut w = 0;
            while w < waves {
                let at = w * R as u32 + r;
                let x = words.load((at * d) / 4 + c);
                let wt = sh.load(wts + at);
                let mut h = 0;
                while h < 4 {
                    ot[h] = math::fma(f32::from_bits(x.0[h]), wt, ot[h]);
                    h += 1;
                }
                w += 1;
            }
            let lt = sh.load(lts + r);
            let row = row0 + r as u64;
            let e = 4 * c;
            if splits == 1 {
                let mut h = 0;
                while h < 4 {
                    unsafe {
                        store(
                            out,
                            (row * d as u64 + (e + h) as u64) as usize,
                            T::from_f32(attn_finish(ot[h as usize], lt)),
                        )
                    };
                    h += 1;
                }
            } else {
                let at = (row * splits as u64 + split as u64) * (d + ATTN_STATS) as u64;
                let mut h = 0;
                while h < 4 {
                    unsafe {
                        store(
                            part,
                            (at + (ATTN_STATS + e + h) as u64) as usize,
                            ot[h as usize],
                        )
                    };
                    h += 1;
                }
                if e == 0 {
                    unsafe {
                        store(part, at as usize, sh.load(mts + r));
                        store(part, at as usize + 1, lt);
                    }
                }
            }
        }
        r += dr;
        c += dc;
        if c >= dw {
            c -= dw;
            r += 1;
        }
    }
}

/// `w` where `keep`, else zeros (lane by lane: selects, no branch).
#[amdgpu_device]
#[inline(always)]
fn word_if(w: W128, keep: bool) -> W128 {
    let m = if keep { u32::MAX } else { 0 };
    W128([w.0[0] & m, w.0[1] & m, w.0[2] & m, w.0[3] & m])
}

/// Query rows per wave of the matrix-unit kernel (one mma tile).
#[amdgpu_device]
pub const ATTN_MMA_ROWS: u32 = 16;
/// Keys per LDS stage of the matrix-unit kernel (two mma column tiles).
#[amdgpu_device]
pub const ATTN_MMA_KEYS: u32 = 32;
/// The largest head dim of the matrix-unit kernel (its output tiles are
/// registers: 256 would take twice as many).
pub const ATTN_MMA_MAX_D: usize = 128;
/// Words per row of the matrix-unit kernel's stats in LDS: `m`, `l`, the
/// output row (two words), the row's span of keys (two).
#[amdgpu_device]
const ATTN_MMA_STATS: u32 = 6;
/// Words per row of a wave's probability tile (16-bit values) in LDS,
/// where the accumulator's layout is not the A fragment's
/// ([`crate::mma::a_from_accs`]).
#[amdgpu_device]
const P_PITCH: u32 = ATTN_MMA_KEYS / 2 + 4;

/// Words per row of the v tile stored transposed (a row per dim, the
/// stage's keys along it), where the matrix unit's transposed fragment
/// loads are not cheap ([`crate::mma::TRANSPOSED_LOADS`]): gathering them
/// half by half made the PV product's loads take 120 registers on gfx11.
#[amdgpu_device]
const VT_PITCH: u32 = ATTN_MMA_KEYS / 2 + 4;

/// Words of the v tile for head dim `d` (either layout).
#[amdgpu_device]
#[inline(always)]
const fn v_words(d: u32) -> u32 {
    let rows = ATTN_MMA_KEYS * tile_pitch(d);
    let transposed = d * VT_PITCH;
    if rows > transposed { rows } else { transposed }
}

/// Words (32-bit) per row of the q, k and v tiles of head dim `d`: the row
/// and one 16-byte word of padding (rows land on different banks).
#[amdgpu_device]
#[inline(always)]
const fn tile_pitch(d: u32) -> u32 {
    d / 2 + 4
}

/// LDS of the matrix-unit kernel with `waves` waves and head dim `d`, in
/// bytes: q (16 rows per wave), k and v ([`ATTN_MMA_KEYS`] rows), each
/// wave's probabilities (16-bit; used where they cannot stay in registers),
/// six words per row (its `m`, `l`, output row and span of keys).
///
/// ```
/// use ferrocm_kernels::nn::attention::attn_mma_lds_bytes;
/// assert!(attn_mma_lds_bytes(4, 128, false) <= 64 * 1024);
/// assert!(attn_mma_lds_bytes(4, 128, true) <= 96 * 1024);
/// ```
#[amdgpu_device]
#[inline(always)]
pub const fn attn_mma_lds_bytes(waves: u32, d: u32, double_buffer: bool) -> u32 {
    let rows = waves * ATTN_MMA_ROWS;
    let kv = ATTN_MMA_KEYS * tile_pitch(d) + v_words(d);
    let one = 4 * (rows * tile_pitch(d) + kv + rows * (P_PITCH + ATTN_MMA_STATS));
    // The second K/V buffer starts where the first did, one buffer's span
    // (K, V, probabilities and stats) after it.
    let span = 4 * (kv + rows * (P_PITCH + ATTN_MMA_STATS));
    if double_buffer {
        let k_b = 4 * rows * tile_pitch(d);
        k_b + span + 4 * kv
    } else {
        one
    }
}

/// The matrix-unit attention kernel (f16, bf16; head dims up to
/// [`ATTN_MMA_MAX_D`], a multiple of 16): the arguments and the split of
/// the keys of the row kernels, with [`ATTN_MMA_ROWS`] query rows per wave
/// (one wave per workgroup for a decode step, four for a prefill). Per
/// stage of [`ATTN_MMA_KEYS`] keys staged in LDS: each wave multiplies its
/// q tile by the keys on the device layer's [`crate::mma`] primitive, runs
/// the online softmax on the score accumulators themselves (per-row folds
/// of [`crate::mma::Acc::row_fold`]: no score tile in LDS), turns the
/// probabilities (rounded to `T`, as FlashAttention's second product takes
/// them) into the left operand of the second product
/// ([`crate::mma::a_from_accs`]: registers on NVIDIA), and multiplies them
/// by the values into its f32 output tiles. Two workgroup barriers per
/// stage where the probabilities stay in registers, three elsewhere. The
/// softmax runs in base-2 units (logits times `log2 e`, weights
/// [`math::exp2_fast`]; inside every row's span, with no mask or softcap,
/// a weight is one fused multiply-add of the raw score), and a row's max
/// moves only by more than [`ATTN_RESCALE_SLACK`], as in the row kernels,
/// so a wave whose rows all stay skips the output tiles' rescale.
#[amdgpu_device]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub fn attn_mma_body<T: MatElem + crate::mma::MmaElem, const D: u32>(
    out: *mut T,
    part: *mut f32,
    q: *const T,
    k: *const T,
    v: *const T,
    mask: *const T,
    geo: AttnGeometry,
    (scale, softcap, window, flags, chunk): (f32, f32, u32, u32, u32),
) {
    #[allow(unused_imports)]
    use crate::math::exp2_fast;
    use crate::mma::{
        Acc, ROW_SLOTS, TRANSPOSED_LOADS, a_from_accs, load_a, load_b, load_b_t, mma,
    };
    use core::f32::consts::{LN_2, LOG2_E};
    // Launched with `early_start`: nothing global is touched before this.
    wait_prior_grids();
    release_dependent_grids();
    // A GPU without a matrix unit gets the row kernels from the op layer:
    // the FMA body's registers do not fit this kernel there. The emulator
    // runs it, the logic the matrix units run.
    #[cfg(all(ferrocm_device, not(ferrocm_mma)))]
    {
        let _ = (
            out, part, q, k, v, mask, geo, scale, softcap, window, flags, chunk,
        );
        return;
    }
    // Output tiles held per pass over the keys: all of d 128's eight; four
    // in the emulator, which so runs the passes' logic (d 80 to 128 take
    // two, each recomputing the scores); two where 128 registers must do
    // (gfx11's lanes hold eight rows' softmax state: four tiles spilled).
    #[cfg(all(ferrocm_device, not(ferrocm_vgprs128)))]
    const OT: usize = (ATTN_MMA_MAX_D / 16) as usize;
    #[cfg(not(ferrocm_device))]
    const OT: usize = 4;
    #[cfg(all(ferrocm_device, ferrocm_vgprs128))]
    const OT: usize = 2;
    // The head dim is the kernel's (`geo.dims.4` equals it): constant
    // loop bounds, and registers for its tiles only.
    #[allow(unreachable_code)]
    let (h_q, h_kv, s_q, s_kv, _) = geo.dims;
    let d = D;
    let causal = flags & ATTN_CAUSAL != 0;
    let pitch = tile_pitch(d);
    let (wpr, nw, nt) = (pitch / 4, d / 8, d / 16);
    let (tid, size, wave, waves) = (workitem_id_x(), workgroup_size_x(), wave_id(), num_waves());
    let lane = lane_id();
    let block_rows = ATTN_MMA_ROWS * waves;
    let g = Ord::max(h_q / Ord::max(h_kv, 1), 1);
    let s_q = Ord::max(s_q, 1);
    let rows = g * s_q;
    let row_blocks = Ord::max(rows.div_ceil(block_rows), 1);
    let wg = workgroup_id_x();
    // The row blocks from the last, every head's block `rb` beside each
    // other: under a causal mask the last rows see the most keys, and the
    // workgroups launched first should be the longest, so that the short
    // ones fill the last wave's gaps. (The op launches `row_blocks` times
    // the batch's heads.)
    let heads = Ord::max(num_workgroups_x() / row_blocks, 1);
    let (rb, bh) = (
        row_blocks - 1 - Ord::min(wg / heads, row_blocks - 1),
        wg % heads,
    );
    let (kvh, bi) = (bh % Ord::max(h_kv, 1), bh / Ord::max(h_kv, 1));
    let (split, splits) = (workgroup_id_y(), num_workgroups_y());
    let begin = Ord::min(split as u64 * chunk as u64, s_kv as u64) as u32;
    let end = Ord::min(begin as u64 + chunk as u64, s_kv as u64) as u32;
    // LDS: q, k, v tiles, then per wave its probability scratch
    // (`a_from_accs`, off NVIDIA) and its rows' stats. With
    // `ATTN_DOUBLE_BUFFER`, the second K/V buffer follows the stats.
    let double = flags & ATTN_DOUBLE_BUFFER != 0;
    let k_b = 4 * block_rows * pitch;
    let v_b = k_b + 4 * ATTN_MMA_KEYS * pitch;
    let p_b = v_b + 4 * v_words(d);
    let st_b = p_b + 4 * block_rows * P_PITCH;
    let kv_bytes = st_b + 4 * block_rows * ATTN_MMA_STATS - k_b;
    let qt = lds_at::<u32>(0);
    let pw_b = p_b + 4 * wave * ATTN_MMA_ROWS * P_PITCH;
    let stw = lds_at::<f32>(st_b + 4 * wave * ATTN_MMA_ROWS * ATTN_MMA_STATS);
    // The keys some row of the block sees: the spans move right with the
    // row, so the hull runs from the first row's to the last row's (every
    // row when the block holds two heads' rows).
    let first = rb * block_rows;
    let last = Ord::min(first + block_rows, rows) - 1;
    let (i_lo, i_hi) = if first / s_q == last / s_q {
        (first % s_q, last % s_q)
    } else {
        (0, s_q - 1)
    };
    let lo = Ord::max(attn_span(i_lo, s_q, s_kv, causal, window).0, begin);
    let hi = Ord::min(attn_span(i_hi, s_q, s_kv, causal, window).1, end);
    // Row `r` of the wave's tile: the keys of the split it sees (the stage
    // past the split's end holds zeros, not keys), none past the block.
    let row_span = |r: u32| {
        let (valid, _, i) = block_row(rb, wave * ATTN_MMA_ROWS + r, block_rows, kvh, g, s_q);
        if valid {
            let (a, b) = attn_span(i, s_q, s_kv, causal, window);
            (Ord::max(a, lo), Ord::min(b, hi))
        } else {
            (0, 0)
        }
    };
    // Each row's span in LDS (words 4 and 5 of its stats), read in the
    // stages at a span's edge (registers for every held row's would spill
    // on gfx11, whose lanes hold eight rows); the first stage's barrier
    // publishes them. The keys every row of the wave sees: `wave_lo..
    // wave_hi` (lanes `r`, `r + 16`, .. take row `r`).
    let (my_row, my_part) = (lane % ATTN_MMA_ROWS, lane / ATTN_MMA_ROWS);
    let (mut wave_lo, mut wave_hi) = row_span(my_row);
    if my_part == 0 {
        stw.store(ATTN_MMA_STATS * my_row + 4, f32::from_bits(wave_lo));
        stw.store(ATTN_MMA_STATS * my_row + 5, f32::from_bits(wave_hi));
    }
    let mut off = 1;
    while off < ATTN_MMA_ROWS {
        wave_lo = Ord::max(wave_lo, wave_shfl_xor(wave_lo, off));
        wave_hi = Ord::min(wave_hi, wave_shfl_xor(wave_hi, off));
        off *= 2;
    }
    let k_base = bi as u64 * geo.k.0 + kvh as u64 * geo.k.1;
    let v_base = bi as u64 * geo.v.0 + kvh as u64 * geo.v.1;
    // The stage fetch finds a key's words from its head's first word in 32
    // bits (the op takes this kernel only where a head's last key word is
    // under 2^32 words from its first): one multiply-add per copy instead
    // of a 64-bit product, sum and shift. Pointers to the head's first
    // word: the workgroup's K/V head lies inside the tensors.
    let (k_head, v_head) = (
        (k as *const W128).wrapping_add((k_base / 8) as usize),
        (v as *const W128).wrapping_add((v_base / 8) as usize),
    );
    let (k_stride_words, v_stride_words) = ((geo.k.2 / 8) as u32, (geo.v.2 / 8) as u32);
    // Whole waves: each holds 16 rows of matrix-unit tiles.
    let fw = unsafe { FullWaves::assume() };
    // The scale and the max's slack in base-2 units.
    let (c2, slack2) = (scale * LOG2_E, ATTN_RESCALE_SLACK * LOG2_E);
    // Output tiles tile0 + 0..OT of this pass.
    let mut tile0 = 0;
    while tile0 < nt {
        // The block's q rows (zeros past its end), staged by each pass: the
        // last one's output went through this LDS.
        let mut e = tid;
        while e < block_rows * nw {
            let (r, c) = (e / nw, e % nw);
            // Rows past the block's end read its first row, then zeros.
            let (valid, _, _) = block_row(rb, r, block_rows, kvh, g, s_q);
            let (_, head, i) = block_row(rb, if valid { r } else { 0 }, block_rows, kvh, g, s_q);
            let base = bi as u64 * geo.q.0 + head as u64 * geo.q.1 + i as u64 * geo.q.2;
            let w = word_if(
                unsafe { load(q as *const W128, (base / 8) as usize + c as usize) },
                valid,
            );
            // Four word stores: one 16-byte store here left 32 bytes of
            // scratch on gfx90a and gfx11.
            let words = lds_at::<u32>(0);
            unroll4!(h < 4 => {
                words.store(4 * (r * wpr + c) + h as u32, w.0[h]);
            });
            e += size;
        }
        // Each held row's running max and sum.
        let (mut m, mut l) = ([f32::NEG_INFINITY; ROW_SLOTS], [0.0f32; ROW_SLOTS]);
        let mut o = [Acc::zero(); OT];
        // The stage of keys `j0..` into K/V buffer `buf` (zeros past the
        // span): on NVIDIA without waiting, in a copy group of its own.
        let fetch = |j0: u32, buf: u32| {
            let (kb, vb) = (k_b + buf * kv_bytes, v_b + buf * kv_bytes);
            let mut e = tid;
            while e < ATTN_MMA_KEYS * nw {
                let (c, w) = (e / nw, e % nw);
                let j = j0 + c;
                // Keys past the span point at the stage's first key and
                // copy zeros.
                let ok = j < hi;
                let jj = if ok { j } else { j0 };
                // A 32-bit word index from the head's first word.
                let (ki, vi) = (
                    (jj * k_stride_words + w) as usize,
                    (jj * v_stride_words + w) as usize,
                );
                unsafe { lds_copy_async(lds_at::<W128>(kb), c * wpr + w, k_head, ki, ok) };
                if TRANSPOSED_LOADS {
                    unsafe { lds_copy_async(lds_at::<W128>(vb), c * wpr + w, v_head, vi, ok) };
                } else {
                    // Dims 8w.. of key c go down column c of the dim rows.
                    let vw = word_if(unsafe { load(v_head, vi) }, ok);
                    let halves = lds_at::<u16>(vb);
                    unroll4!(h < 4 => {
                        let dim = 8 * w + 2 * h as u32;
                        halves.store(dim * 2 * VT_PITCH + c, vw.0[h] as u16);
                        halves.store((dim + 1) * 2 * VT_PITCH + c, (vw.0[h] >> 16) as u16);
                    });
                }
                e += size;
            }
            lds_copy_commit();
        };
        let mut j0 = lo;
        // Double-buffered: the first stage now, each next one while this
        // one is computed on.
        if double && j0 < hi {
            fetch(j0, 0);
        }
        let mut buf = 0;
        while j0 < hi {
            if !double {
                fetch(j0, 0);
                lds_copy_wait::<0>();
            } else if j0 + ATTN_MMA_KEYS < hi {
                fetch(j0 + ATTN_MMA_KEYS, buf ^ 1);
                lds_copy_wait::<1>();
            } else {
                lds_copy_wait::<0>();
            }
            barrier();
            let (kt, vt) = (
                lds_at::<u32>(k_b + buf * kv_bytes),
                lds_at::<u32>(v_b + buf * kv_bytes),
            );
            // Scores: the wave's 16 rows by the stage's two 16-key tiles.
            let mut sacc = [Acc::zero(); 2];
            let mut ks = 0;
            while ks < d {
                let fa = load_a(qt, pitch, wave * ATTN_MMA_ROWS, ks);
                unroll4!(t < 2 => {
                    let fb = load_b(kt, pitch, 16 * t as u32, ks);
                    mma::<T>(&mut sacc[t], &fa, &fb);
                    schedule_barrier();
                });
                ks += 16;
            }
            // Logits on the accumulators, in base-2 units (`s · log2 e`, so
            // a weight is `2^(t - m)`; `m` is kept in those units too). A
            // stage inside every row's span (most of a long prefill) checks
            // no key; without mask or softcap and with a positive scale it
            // leaves the scores as they are: rounding is monotonic, so the
            // row max of `dot · c` is the max of the dots times `c`, and
            // each weight is one fused multiply-add `dot · c - m` (exact
            // before its one rounding) and a `2^x`, with `cw = c` (1 where
            // the logits are computed).
            let inside = mask.is_null() && wave_lo <= j0 && j0 + ATTN_MMA_KEYS <= wave_hi;
            let candidate = inside && softcap <= 0.0 && c2 > 0.0;
            if inside {
                if !candidate {
                    unroll4!(t < 2 => {
                        // (No mask: -0.0, whose addition is no instruction.)
                        sacc[t].map(|_, _, x| base2(attn_logit(x, scale, softcap, -0.0)));
                    });
                }
            } else {
                unroll4!(t < 2 => {
                    sacc[t].map(|r, c, x| {
                        let j = j0 + 16 * t as u32 + c;
                        let a = stw.load(ATTN_MMA_STATS * r + 4).to_bits();
                        let b = stw.load(ATTN_MMA_STATS * r + 5).to_bits();
                        if a <= j && j < b {
                            let mv = if mask.is_null() {
                                0.0
                            } else {
                                let (_, head, i) =
                                    block_row(rb, wave * ATTN_MMA_ROWS + r, block_rows, kvh, g, s_q);
                                let at = bi as u64 * geo.mask.0
                                    + head as u64 * geo.mask.1
                                    + i as u64 * geo.mask.2
                                    + j as u64;
                                unsafe { load(mask, at as usize) }.to_f32()
                            };
                            base2(attn_logit(x, scale, softcap, mv))
                        } else {
                            f32::NEG_INFINITY
                        }
                    });
                });
            }
            // The online softmax per row, on the registers. The max moves
            // only where a logit passes it by more than the slack (or is
            // NaN), as in the row kernels: `o` and `l` are sums relative to
            // whichever max the row holds, weights stay below e^slack, and
            // after a row's first stages almost no stage rescales: a wave
            // where no row moved skips the output tiles' rescale.
            let mut mx = Acc::row_fold(&sacc, f32::NEG_INFINITY, max_nan);
            // A max past ATTN_RAW_LIMIT in base-2 units (or infinite, or
            // NaN) takes the stage through the logits instead: `base2`
            // keeps them finite, and their `x - m` is between rounded
            // values, where the raw path's product is not.
            let mut raw = candidate;
            if candidate {
                let mut over = false;
                unroll4!(s1 < ROW_SLOTS.div_ceil(4) => {
                    unroll4!(s0 < 4 => {
                        let sl = 4 * s1 + s0;
                        if sl < ROW_SLOTS {
                            over |= !(-ATTN_RAW_LIMIT..=ATTN_RAW_LIMIT).contains(&(mx[sl] * c2));
                        }
                    });
                });
                if fw.any(over) {
                    raw = false;
                    unroll4!(t < 2 => {
                        sacc[t].map(|_, _, x| base2(x * scale));
                    });
                    // base2 is monotonic: the max of the logits.
                    unroll4!(s1 < ROW_SLOTS.div_ceil(4) => {
                        unroll4!(s0 < 4 => {
                            let sl = 4 * s1 + s0;
                            if sl < ROW_SLOTS {
                                mx[sl] = base2(mx[sl] * scale);
                            }
                        });
                    });
                }
            }
            let cw = if raw { c2 } else { 1.0 };
            let mut alpha = [1.0f32; ROW_SLOTS];
            let mut moved_any = false;
            unroll4!(s1 < ROW_SLOTS.div_ceil(4) => {
                unroll4!(s0 < 4 => {
                    let sl = 4 * s1 + s0;
                    if sl < ROW_SLOTS {
                        let x = mx[sl] * cw;
                        let moved = max_moves(x, m[sl], slack2);
                        if moved {
                            // 2^(-inf - m) is 0: no check for a first max.
                            let mn = max_nan(m[sl], x);
                            alpha[sl] = exp2_fast(m[sl] - mn);
                            m[sl] = mn;
                            l[sl] *= alpha[sl];
                        }
                        moved_any |= moved;
                    }
                });
            });
            // The output tiles rescaled now, where some row of the wave
            // moved: the factors' registers are free before the
            // probabilities take theirs.
            if fw.any(moved_any) {
                unroll4!(t1 < 2 => {
                    unroll4!(t0 < 4 => {
                        let t = 4 * t1 + t0;
                        if t < OT && tile0 + (t as u32) < nt {
                            o[t].map_rows(|sl, _, _, x| x * alpha[sl]);
                        }
                    });
                });
            }
            // The weights `2^(x · cw - m)`; a row whose max is still -inf
            // (every logit so far -inf) subtracts 0 instead, so they are 0.
            let mut mc = [0.0f32; ROW_SLOTS];
            unroll4!(s1 < ROW_SLOTS.div_ceil(4) => {
                unroll4!(s0 < 4 => {
                    let sl = 4 * s1 + s0;
                    if sl < ROW_SLOTS && m[sl] != f32::NEG_INFINITY {
                        mc[sl] = m[sl];
                    }
                });
            });
            unroll4!(t < 2 => {
                sacc[t].map_rows(|sl, _, _, x| exp2_fast(math::fma(x, cw, -mc[sl])));
            });
            let psum = Acc::row_fold(&sacc, 0.0, |a, b| a + b);
            unroll4!(s1 < ROW_SLOTS.div_ceil(4) => {
                unroll4!(s0 < 4 => {
                    let sl = 4 * s1 + s0;
                    if sl < ROW_SLOTS {
                        l[sl] += psum[sl];
                    }
                });
            });
            // The probabilities, rounded to T, as the left operand of the
            // second product: times the values into the output tiles, one
            // 16-key fragment at a time against every tile.
            let pa = a_from_accs::<T, 2>(&sacc, lds_at::<u32>(pw_b), P_PITCH);
            unroll4!(h < 2 => {
                let k0 = 16 * h as u32;
                let fa = pa.frag(h);
                unroll4!(t1 < 2 => {
                    unroll4!(t0 < 4 => {
                        let t = 4 * t1 + t0;
                        if t < OT && tile0 + (t as u32) < nt {
                            let fb = if TRANSPOSED_LOADS {
                                load_b_t(vt, pitch, 16 * (tile0 + t as u32), k0)
                            } else {
                                load_b(vt, VT_PITCH, 16 * (tile0 + t as u32), k0)
                            };
                            mma::<T>(&mut o[t], &fa, &fb);
                            // One tile's loads at a time.
                            schedule_barrier();
                        }
                    });
                });
            });
            // Every wave is done with this buffer before it is refilled.
            barrier();
            j0 += ATTN_MMA_KEYS;
            if double {
                buf ^= 1;
            }
        }
        // Each row's (m, l) and output row (u32::MAX twice: none) for the
        // lanes that hold its outputs.
        Acc::zero().map_rows(|sl, r, c, x| {
            if c == 0 {
                // The max back in natural units, as the merge reads it.
                stw.store(ATTN_MMA_STATS * r, m[sl] * LN_2);
                stw.store(ATTN_MMA_STATS * r + 1, l[sl]);
            }
            x
        });
        if my_part == 0 {
            let (valid, head, i) =
                block_row(rb, wave * ATTN_MMA_ROWS + my_row, block_rows, kvh, g, s_q);
            let row = (bi as u64 * h_q as u64 + head as u64) * s_q as u64 + i as u64;
            let row = if valid { row } else { u64::MAX };
            stw.store(ATTN_MMA_STATS * my_row + 2, f32::from_bits(row as u32));
            stw.store(
                ATTN_MMA_STATS * my_row + 3,
                f32::from_bits((row >> 32) as u32),
            );
        }
        // The output tiles through LDS (the q, k and v tiles are done with),
        // then written a row at a time: one store site, not one per element.
        barrier();
        let ob = lds_at::<f32>(4 * wave * ATTN_MMA_ROWS * d);
        unroll4!(t1 < 2 => {
            unroll4!(t0 < 4 => {
                let t = 4 * t1 + t0;
                if t < OT && tile0 + (t as u32) < nt {
                    o[t].map(|r, c, x| {
                        ob.store(r * d + 16 * (tile0 + t as u32) + c, x);
                        x
                    });
                }
            });
        });
        barrier();
        let slot = (d + ATTN_STATS) as u64;
        // This pass's columns.
        let c_lo = 16 * tile0;
        let width = 16 * Ord::min(tile0 + OT as u32, nt) - c_lo;
        let mut e = lane;
        while e < ATTN_MMA_ROWS * width {
            let (r, col) = (e / width, c_lo + e % width);
            let row = stw.load(ATTN_MMA_STATS * r + 2).to_bits() as u64
                | (stw.load(ATTN_MMA_STATS * r + 3).to_bits() as u64) << 32;
            if row != u64::MAX {
                let (x, rm, rl) = (
                    ob.load(r * d + col),
                    stw.load(ATTN_MMA_STATS * r),
                    stw.load(ATTN_MMA_STATS * r + 1),
                );
                if splits == 1 {
                    unsafe {
                        store(
                            out,
                            (row * d as u64 + col as u64) as usize,
                            T::from_f32(attn_finish(x, rl)),
                        )
                    };
                } else {
                    let at = (row * splits as u64 + split as u64) * slot;
                    unsafe {
                        store(part, (at + (ATTN_STATS + col) as u64) as usize, x);
                        if col == 0 {
                            store(part, at as usize, rm);
                            store(part, at as usize + 1, rl);
                        }
                    }
                }
            }
            e += wave_size();
        }
        tile0 += OT as u32;
        // The next pass rewrites the LDS this one's output went through.
        barrier();
    }
}

/// `$body` for `$i` = 0..32, written out: a 64 x 64 warpgroup
/// accumulator's elements.
macro_rules! unroll32 {
    ($i:ident => $body:block) => {{
        unroll4!(hi < 2 => {
            crate::unroll16!(lo => {
                let $i = hi * 16 + lo;
                $body
            })
        })
    }};
}

/// Query rows of a workgroup of the warpgroup kernel (`attn_wgmma_*`): one
/// warpgroup, 64 rows (the product's M).
#[amdgpu_device]
pub const ATTN_WG_ROWS: u32 = 64;
/// Keys per stage of the warpgroup kernel (the scores' product's N).
#[amdgpu_device]
pub const ATTN_WG_KEYS: u32 = 64;
/// The head dims of the warpgroup kernel (its output product's N is the
/// head dim: 64 or 128).
pub const ATTN_WG_HEAD_DIMS: [usize; 2] = [64, 128];

/// Whether the warpgroup kernel at head dim `d` holds two stages of k (it
/// always holds two of v): the next stage's k and v are then copied while
/// this one is computed on, where both fit the 64 KB every device gives a
/// launch, d 64 (at d 128 the next k is copied once this stage's scores
/// are done).
#[amdgpu_device]
#[inline(always)]
pub const fn attn_wgmma_double(d: u32) -> bool {
    d <= 64
}

/// LDS of the warpgroup kernel at head dim `d` (64 or 128), in bytes: q
/// and a stage's k (`d / 32` operand tiles of 64 rows, 4 KB each), two
/// stages' v (each two 32-key tiles of `d` columns), and a second stage's
/// k where [`attn_wgmma_double`]. (The probabilities stay in registers.)
///
/// ```
/// use ferrocm_kernels::nn::attention::attn_wgmma_lds_bytes;
/// assert_eq!(attn_wgmma_lds_bytes(128), 64 * 1024);
/// assert_eq!(attn_wgmma_lds_bytes(64), 40 * 1024);
/// ```
#[amdgpu_device]
#[inline(always)]
pub const fn attn_wgmma_lds_bytes(d: u32) -> u32 {
    let (qk, v) = (4096 * (d / 32), 2 * 4096 * (d / 64));
    let k_stages = if attn_wgmma_double(d) { 2 } else { 1 };
    qk + k_stages * qk + 2 * v
}

/// The warpgroup attention kernel (f16, bf16; head dims 64 and 128; no
/// mask tensor, no softcap, a positive scale, one split of the keys: the
/// op library launches it for such prefills where `Device::warpgroup_mma`
/// holds, Hopper's `wgmma`, and the emulator at wave 32 checks its logic).
/// One warpgroup per workgroup holds [`ATTN_WG_ROWS`] query rows (the rows
/// of [`attn_mma_body`]'s row blocks, longest first) and walks the keys of
/// their spans in stages of [`ATTN_WG_KEYS`]: the scores `q · kᵀ` are one
/// warpgroup product from the LDS tiles ([`crate::mma::wg_mma`], 64 x 64),
/// the online softmax runs on its accumulators (base-2, the lazy max and
/// the raw-score weights of [`attn_mma_body`]; keys outside a row's span
/// are -inf), and the probabilities, rounded to `T`, stay in registers as
/// the left operand of the second product, `p · v` ([`crate::mma::wg_mma_ra`]),
/// into f32 output accumulators (64 x d). v has two buffers: the next
/// stage's is copied while this one is computed on; so is k at d 64 ([`attn_wgmma_double`]),
/// while at d 128 (one k buffer in the 64 KB) the next stage's k is copied
/// once every warp's scores are done, behind a second barrier. (Two k
/// buffers and one v at d 128, and five workgroups an SM at d 64 under a
/// launch bound, ran no faster on an H200.)
#[amdgpu_device]
#[inline(always)]
// `e % 2 == 0` on the unrolled index folds before rustc's bounds lint
// sees `s.v[e + 1]`; `is_multiple_of` does not.
#[allow(clippy::manual_is_multiple_of)]
pub fn attn_wgmma_body<T: MatElem + crate::mma::MmaElem, const E: usize>(
    out: *mut T,
    q: *const T,
    k: *const T,
    v: *const T,
    geo: AttnGeometry,
    (scale, window, flags): (f32, u32, u32),
) {
    // Launched with `early_start`: nothing global is touched before this.
    wait_prior_grids();
    release_dependent_grids();
    // AMD GPUs never launch it.
    #[cfg(all(ferrocm_device, not(ferrocm_nvptx)))]
    {
        let _ = (out, q, k, v, geo, scale, window, flags);
        return;
    }
    #[allow(unused_imports)]
    use crate::math::exp2_fast;
    use crate::mma::{
        WG_THREADS, WgAcc, WgFragA, wg_acc_at, wg_begin, wg_commit, wg_lds_fence, wg_mma,
        wg_mma_ra, wg_tile_byte, wg_wait,
    };
    use core::f32::consts::LOG2_E;
    // The head dim: twice the output accumulator's elements a workitem
    // (64 x d over 128 workitems).
    let dd = (2 * E) as u32;
    #[allow(unreachable_code)]
    let (h_q, h_kv, s_q, s_kv, _) = geo.dims;
    let causal = flags & ATTN_CAUSAL != 0;
    let tid = workitem_id_x();
    let (rows_b, keys) = (ATTN_WG_ROWS, ATTN_WG_KEYS);
    let g = Ord::max(h_q / Ord::max(h_kv, 1), 1);
    let s_q = Ord::max(s_q, 1);
    let rows = g * s_q;
    let row_blocks = Ord::max(rows.div_ceil(rows_b), 1);
    // The row blocks from the last, as `attn_mma_body`'s.
    let wg = workgroup_id_x();
    let heads = Ord::max(num_workgroups_x() / row_blocks, 1);
    let (rb, bh) = (
        row_blocks - 1 - Ord::min(wg / heads, row_blocks - 1),
        wg % heads,
    );
    let (kvh, bi) = (bh % Ord::max(h_kv, 1), bh / Ord::max(h_kv, 1));
    // LDS: q's d / 32 tiles, k's (twice at d 64), then two stages' v, each
    // two 32-key tiles.
    let tile = 4096;
    let double = attn_wgmma_double(dd);
    let (q_b, k_b) = (0, tile * (dd / 32));
    let k_second = k_b;
    let v_b = k_b + if double { 2 } else { 1 } * k_second;
    let v_tile = tile * (dd / 64);
    let v_second = 2 * v_tile;
    let words = lds_at::<W128>(0);
    // The keys some row of the block sees (the hull of its rows' spans).
    let first = rb * rows_b;
    let last = Ord::min(first + rows_b, rows) - 1;
    let (i_lo, i_hi) = if first / s_q == last / s_q {
        (first % s_q, last % s_q)
    } else {
        (0, s_q - 1)
    };
    let lo = attn_span(i_lo, s_q, s_kv, causal, window).0;
    let hi = attn_span(i_hi, s_q, s_kv, causal, window).1;
    // This workitem's two rows (accumulator elements with (e / 2) % 2 = h
    // are row r0 + 8h) and their spans; its first column in each 8.
    let (r0, c_base) = wg_acc_at(tid, 0);
    let span = |r: u32| {
        let (valid, _, i) = block_row(rb, r, rows_b, kvh, g, s_q);
        if valid {
            attn_span(i, s_q, s_kv, causal, window)
        } else {
            (0, 0)
        }
    };
    let spans = [span(r0), span(r0 + 8)];
    let nw = dd / 8;
    // The block's q rows (zeros past its end): 16-byte words into the
    // K-major operand tiles, one copy group with the first stage's k.
    let mut e = tid;
    while e < rows_b * nw {
        let (r, c) = (e / nw, e % nw);
        let (valid, _, _) = block_row(rb, r, rows_b, kvh, g, s_q);
        let (_, head, i) = block_row(rb, if valid { r } else { 0 }, rows_b, kvh, g, s_q);
        let base = bi as u64 * geo.q.0 + head as u64 * geo.q.1 + i as u64 * geo.q.2;
        let at = q_b + (c / 4) * tile + wg_tile_byte(true, r, (c % 4) * 8);
        unsafe {
            lds_copy_async(
                words,
                at / 16,
                q as *const W128,
                (base / 8) as usize + c as usize,
                valid,
            )
        };
        e += WG_THREADS;
    }
    // K/V heads' first words; keys by a 32-bit word index from them (the
    // op checks that a head's last key word is under 2^32 words).
    let k_base = bi as u64 * geo.k.0 + kvh as u64 * geo.k.1;
    let v_base = bi as u64 * geo.v.0 + kvh as u64 * geo.v.1;
    let (k_head, v_head) = (
        (k as *const W128).wrapping_add((k_base / 8) as usize),
        (v as *const W128).wrapping_add((v_base / 8) as usize),
    );
    let (k_stride_words, v_stride_words) = ((geo.k.2 / 8) as u32, (geo.v.2 / 8) as u32);
    // The stage's k (K-major tiles, a row per key) or v (MN-major tiles of
    // 32 keys, the dims along a row): zeros past the span, a copy group.
    // Workitem `tid` copies word `w` of keys `c0 + kp i` (the workgroup's
    // 128 copies cover `kp` keys a pass): each tile's swizzle is the same
    // for all of them (`kp` is a multiple of 8), so the LDS offsets are
    // the first copy's plus constants, and the sources one multiply-add
    // from the head's first word.
    let kp = WG_THREADS / nw;
    let (c0, w) = (tid / nw, tid % nw);
    let k_at0 = k_b + (w / 4) * tile + wg_tile_byte(true, c0, (w % 4) * 8);
    let v_at0 = v_b + wg_tile_byte(false, 8 * w, c0);
    let fetch = |j0: u32, is_v: bool, buf: u32| {
        let (k_at0, v_at0) = (k_at0 + buf * k_second, v_at0 + buf * v_second);
        let j = j0 + c0;
        crate::unroll8!(i < (keys / kp) as usize => {
            let step = kp * i as u32;
            let jj = j + step;
            let ok = jj < hi;
            // Keys past the span point at the stage's first key and copy
            // zeros.
            let jj = if ok { jj } else { j0 };
            if is_v {
                let at = v_at0 + (step / 32) * v_tile + (step % 32) * 128;
                let vi = (jj * v_stride_words + w) as usize;
                unsafe { lds_copy_async(words, at / 16, v_head, vi, ok) };
            } else {
                let at = k_at0 + step * 64;
                let ki = (jj * k_stride_words + w) as usize;
                unsafe { lds_copy_async(words, at / 16, k_head, ki, ok) };
            }
        });
        lds_copy_commit();
    };
    if lo < hi {
        fetch(lo, false, 0);
        fetch(lo, true, 0);
    } else {
        lds_copy_commit();
    }
    let fw = unsafe { FullWaves::assume() };
    let (c2, slack2) = (scale * LOG2_E, ATTN_RESCALE_SLACK * LOG2_E);
    let mut o = WgAcc::<E>::zero();
    let (mut m, mut l) = ([f32::NEG_INFINITY; 2], [0.0f32; 2]);
    let (mut j0, mut kb, mut vb) = (lo, 0, 0);
    while j0 < hi {
        // This stage's k and v (and q) in and visible to the products;
        // every warp is past the last stage's second product: the other v
        // buffer (and k buffer, with two) is free for the next stage's.
        lds_copy_wait::<0>();
        wg_lds_fence();
        barrier();
        if j0 + keys < hi {
            fetch(j0 + keys, true, vb ^ 1);
            if double {
                fetch(j0 + keys, false, kb ^ 1);
            }
        }
        let (kt, vt) = (k_b + kb * k_second, v_b + vb * v_second);
        // The scores: 64 rows by the stage's 64 keys.
        let mut s = WgAcc::<32>::zero();
        wg_begin();
        crate::unroll8!(kk < dd as usize / 16 => {
            let (t, k0) = ((kk / 2) as u32 * tile, 16 * (kk % 2) as u32);
            wg_mma::<T, true, true, 32>(&mut s, q_b + t, 0, kt + t, k0);
        });
        wg_commit();
        wg_wait::<0, 32>(&mut s);
        // Keys outside a row's span (at the span's edges only): -inf.
        let inside = |h: usize| spans[h].0 <= j0 && j0 + keys <= spans[h].1;
        if fw.any(!(inside(0) && inside(1))) {
            unroll32!(e => {
                {
                    let h = (e / 2) % 2;
                    let j = j0 + (e / 4) as u32 * 8 + c_base + (e % 2) as u32;
                    if !(spans[h].0 <= j && j < spans[h].1) {
                        s.v[e] = f32::NEG_INFINITY;
                    }
                }
            });
        }
        // Each row's max over its four lanes.
        let mut mx = [f32::NEG_INFINITY; 2];
        unroll32!(e => {
            {
                let h = (e / 2) % 2;
                mx[h] = max_nan(mx[h], s.v[e]);
            }
        });
        unroll4!(h < 2 => {
            mx[h] = max_nan(mx[h], fw.shfl_xor_f32(mx[h], 1));
            mx[h] = max_nan(mx[h], fw.shfl_xor_f32(mx[h], 2));
        });
        // Raw scores (a weight is one FMA and a `2^x`, as in
        // `attn_mma_body`) unless a row's max times `c` leaves
        // ATTN_RAW_LIMIT (or is NaN or +inf): then the logits in base-2
        // units, saturated.
        let mut over = false;
        unroll4!(h < 2 => {
            over |= mx[h] != f32::NEG_INFINITY
                && !(-ATTN_RAW_LIMIT..=ATTN_RAW_LIMIT).contains(&(mx[h] * c2));
        });
        let mut cw = c2;
        if fw.any(over) {
            cw = 1.0;
            unroll32!(e => {
                {
                    s.v[e] = base2(s.v[e] * scale);
                }
            });
            unroll4!(h < 2 => {
                mx[h] = base2(mx[h] * scale);
            });
        }
        // The lazy max: it moves only past the slack (or to NaN).
        let mut alpha = [1.0f32; 2];
        let mut moved_any = false;
        unroll4!(h < 2 => {
            let x = mx[h] * cw;
            let moved = max_moves(x, m[h], slack2);
            if moved {
                let mn = max_nan(m[h], x);
                alpha[h] = exp2_fast(m[h] - mn);
                m[h] = mn;
                l[h] *= alpha[h];
            }
            moved_any |= moved;
        });
        if fw.any(moved_any) {
            crate::unroll64!(e => {
                if e < E {
                    o.v[e] *= alpha[(e / 2) % 2];
                }
            });
        }
        // The weights (0 while a row's max is -inf), this workitem's share
        // of each row's sum, and the probabilities rounded to T, two keys
        // a word, as the second product's A fragments: elements 8 kk ..
        // 8 kk + 8 are keys 16 kk .. 16 kk + 16 of the workitem's rows in
        // the fragment's order.
        let mc = [0, 1].map(|h| if m[h] != f32::NEG_INFINITY { m[h] } else { 0.0 });
        let mut pa: [WgFragA; 4] = [[0; 4]; 4];
        unroll32!(e => {
            if e % 2 == 0 {
                let h = (e / 2) % 2;
                let p0 = exp2_fast(math::fma(s.v[e], cw, -mc[h]));
                let p1 = exp2_fast(math::fma(s.v[e + 1], cw, -mc[h]));
                l[h] += p0 + p1;
                pa[e / 8][(e % 8) / 2] = T::pack2(p0, p1);
            }
        });
        // One k buffer: every warp is past the scores before the next
        // stage's k is copied over this one's.
        if !double {
            barrier();
            if j0 + keys < hi {
                fetch(j0 + keys, false, 0);
            }
        }
        wg_begin();
        unroll4!(kk < 4 => {
            let k0 = 16 * (kk % 2) as u32;
            wg_mma_ra::<T, false, E>(&mut o, &pa[kk], vt + (kk / 2) as u32 * v_tile, k0);
        });
        wg_commit();
        wg_wait::<0, E>(&mut o);
        vb ^= 1;
        if double {
            kb ^= 1;
        }
        j0 += keys;
    }
    // (The last group, empty or the first stage's unused copies.)
    lds_copy_wait::<0>();
    // Each row's sum over its four lanes, then the outputs, two columns a
    // word.
    unroll4!(h < 2 => {
        l[h] += fw.shfl_xor_f32(l[h], 1);
        l[h] += fw.shfl_xor_f32(l[h], 2);
    });
    unroll4!(h < 2 => {
        let (valid, head, i) = block_row(rb, r0 + 8 * h as u32, rows_b, kvh, g, s_q);
        if valid {
            let row = (bi as u64 * h_q as u64 + head as u64) * s_q as u64 + i as u64;
            crate::unroll64!(e => {
                if e < E && e % 4 == 2 * h {
                    let c = (e / 4) as u32 * 8 + c_base;
                    let word = T::pack2(attn_finish(o.v[e], l[h]), attn_finish(o.v[e + 1], l[h]));
                    unsafe { store(out as *mut u32, ((row * dd as u64 + c as u64) / 2) as usize, word) };
                }
            });
        }
    });
}

/// The LDS bytes of a merge launch of [`ATTN_MERGE_BLOCK`] workitems: a
/// column sum of head dim `d` per wave.
///
/// ```
/// use ferrocm_kernels::nn::attention::attn_merge_lds_bytes;
/// assert_eq!(attn_merge_lds_bytes(32, 128), 8 * 128 * 4);
/// ```
#[amdgpu_device]
#[inline(always)]
pub const fn attn_merge_lds_bytes(wave: u32, d: u32) -> u32 {
    ATTN_MERGE_BLOCK / wave * d * 4
}

/// The merge kernel's body: for each of `rows` output rows (a workgroup
/// each), the splits' partial `(m, l, o[d])` (slots of `d + ATTN_STATS`
/// f32, `splits` per row) combined into `o / l`. Every wave finds the max
/// `m` and the denominator `sum(l exp(m - max))` itself (lane `s` takes
/// split `s`, then butterflies: no barrier); wave `w` sums the columns of
/// splits `w`, `w + waves`, .. (each lane its columns `lane`, `lane +
/// wave`, .., four splits' loads in flight, the first four's issued before
/// the max is known); the waves' sums meet in LDS.
/// (A workgroup per row with eleven barriers took 7.5 us for a decode
/// step's 32 rows of 32 splits on the H100; a wave per row summing the
/// splits in turn, 32.)
#[amdgpu_device]
#[inline(always)]
pub fn attn_merge_body<T: Elem>(out: *mut T, part: *const f32, rows: u64, d: u32, splits: u32) {
    // Columns per lane: d 256 over 32 lanes.
    const COLS: usize = 8;
    let slot = (d + ATTN_STATS) as u64;
    let (ws, lane) = (wave_size(), lane_id());
    let (wave, waves) = (wave_id(), num_waves());
    let sums = lds::<f32>();
    // Launched with `early_start`: the splits are the row kernel's output.
    wait_prior_grids();
    release_dependent_grids();
    let mut row = workgroup_id_x() as u64;
    while row < rows {
        let base = row * splits as u64 * slot;
        let at = |s: u32, x: u32| (base + s as u64 * slot + x as u64) as usize;
        // Four splits' m and columns from `s` on (-inf and zeros past the
        // splits): the first four load before the max is known, so a
        // decode step's merge waits on memory once.
        let block = |s: u32| {
            let mut mw = [f32::NEG_INFINITY; 4];
            let mut x = [[0.0f32; COLS]; 4];
            unroll4!(u < 4 => {
                let su = s + u as u32 * waves;
                if su < splits {
                    mw[u] = unsafe { load(part, at(su, 0)) };
                    unroll4!(c1 < 2 => {
                        unroll4!(c0 < 4 => {
                            let e = lane + (4 * c1 + c0) as u32 * ws;
                            if e < d {
                                x[u][4 * c1 + c0] = unsafe { load(part, at(su, ATTN_STATS + e)) };
                            }
                        });
                    });
                }
            });
            (mw, x)
        };
        let mut s = wave;
        let (mut mw, mut x) = block(s);
        let mut mt = f32::NEG_INFINITY;
        let mut sl = lane;
        while sl < splits {
            mt = max_nan(mt, unsafe { load(part, at(sl, 0)) });
            sl += ws;
        }
        let mut off = ws / 2;
        while off > 0 {
            mt = max_nan(mt, wave_shfl_xor_f32(mt, off));
            off /= 2;
        }
        let mut lt = 0.0f32;
        let mut sl = lane;
        while sl < splits {
            lt += unsafe { load(part, at(sl, 1)) }
                * attn_weight(unsafe { load(part, at(sl, 0)) }, mt);
            sl += ws;
        }
        let lt = wave_sum_f32(lt);
        let mut ot = [0.0f32; COLS];
        while s < splits {
            // The next four splits load while these are summed.
            let (mn, xn) = block(s + 4 * waves);
            unroll4!(u < 4 => {
                let w = attn_weight(mw[u], mt);
                let mut c = 0;
                while c < COLS {
                    ot[c] = math::fma(x[u][c], w, ot[c]);
                    c += 1;
                }
            });
            mw = mn;
            x = xn;
            s += 4 * waves;
        }
        unroll4!(c1 < 2 => {
            unroll4!(c0 < 4 => {
                let e = lane + (4 * c1 + c0) as u32 * ws;
                if e < d {
                    sums.store(wave * d + e, ot[4 * c1 + c0]);
                }
            });
        });
        barrier();
        let mut e = workitem_id_x();
        while e < d {
            let mut o = 0.0f32;
            let mut w = 0;
            while w < waves {
                o += sums.load(w * d + e);
                w += 1;
            }
            unsafe {
                store(
                    out,
                    (row * d as u64 + e as u64) as usize,
                    T::from_f32(attn_finish(o, lt)),
                )
            };
            e += workgroup_size_x();
        }
        // The LDS is rewritten for the next row.
        barrier();
        row += num_workgroups_x() as u64;
    }
}

/// The parameter types of the row kernels on element type `T`: `(out,
/// part, q, k, v, mask, h_q, h_kv, s_q, s_kv, d, q strides (batch, head,
/// row), k strides, v strides, mask strides (batch, head, row), scale,
/// softcap, window, flags, chunk)`; `mask` may be null, `part` is null
/// with one split.
#[cfg(not(ferrocm_device))]
pub type AttnArgs<T> = (
    *mut T,
    *mut f32,
    *const T,
    *const T,
    *const T,
    *const T,
    u32,
    u32,
    u32,
    u32,
    u32,
    u64,
    u64,
    u64,
    u64,
    u64,
    u64,
    u64,
    u64,
    u64,
    u64,
    u64,
    u64,
    f32,
    f32,
    u32,
    u32,
    u32,
);

/// The parameter types of the merge kernel: `(out, part, rows, d, splits)`.
#[cfg(not(ferrocm_device))]
pub type AttnMergeArgs<T> = (*mut T, *const f32, u64, u32, u32);

#[cfg(not(ferrocm_device))]
use crate::host::KernelRef;

/// The attention kernels of one element type (host side).
#[cfg(not(ferrocm_device))]
#[derive(Clone, Copy, Debug)]
pub struct AttnTable<T: 'static> {
    /// `attn_rows_{T}_w{1,2,4}`: 1, 2 and 4 words per workitem and row,
    /// 16 workitems per key (16-bit types have no `w4`: their largest head
    /// dim needs 2; that slot repeats `w2`).
    pub rows: [KernelRef<AttnArgs<T>>; 3],
    /// `attn_rows_{T}_w1_l8`: one word per workitem, 8 workitems per key
    /// (16-bit types at head dim 64; f32 has none: its rows have 16 words
    /// or more).
    pub rows_l8: Option<KernelRef<AttnArgs<T>>>,
    /// `attn_merge_{T}`.
    pub merge: KernelRef<AttnMergeArgs<T>>,
    /// `attn_mma_{T}_d{64,80,96,128}`: the matrix-unit kernels (16-bit
    /// types), one per head dim.
    pub mma: Option<[KernelRef<AttnArgs<T>>; 4]>,
    /// `attn_wgmma_{T}_d{64,128}`: the warpgroup kernels (16-bit types,
    /// Hopper's `wgmma`; [`ATTN_WG_HEAD_DIMS`]).
    pub wgmma: Option<[KernelRef<AttnArgs<T>>; 2]>,
}

/// The attention kernels of an element type: float types only.
#[cfg(not(ferrocm_device))]
pub trait AttnKernels: Sized + 'static {
    /// The kernels, if the type has them.
    const ATTN: Option<AttnTable<Self>>;
}

macro_rules! attn_kernels {
    (none: $($n:ty),*) => {$(
        #[cfg(not(ferrocm_device))]
        impl AttnKernels for $n {
            const ATTN: Option<AttnTable<Self>> = None;
        }
    )*};
    ($($t:ty => [$($rows:ident $w:literal $l:literal),*], [$w1:ident, $w2:ident, $w4:ident], [$($l8:ident)?], $merge:ident, [$($mma:ident $d:literal),*], [$($wgk:ident $we:literal),*];)*) => {
        $(
            #[cfg(not(ferrocm_device))]
            impl AttnKernels for $t {
                const ATTN: Option<AttnTable<Self>> = Some(AttnTable {
                    rows: [KernelRef::of::<$w1>(), KernelRef::of::<$w2>(), KernelRef::of::<$w4>()],
                    rows_l8: attn_kernels!(@one $($l8)?),
                    merge: KernelRef::of::<$merge>(),
                    mma: attn_kernels!(@opt $($mma)*),
                    wgmma: attn_kernels!(@opt $($wgk)*),
                });
            }
        )*
        kernels! {$(
            $(
                fn $rows(out: *mut $t, part: *mut f32, q: *const $t, k: *const $t, v: *const $t,
                         mask: *const $t, h_q: u32, h_kv: u32, s_q: u32, s_kv: u32, d: u32,
                         q_bs: u64, q_hs: u64, q_ss: u64, k_bs: u64, k_hs: u64, k_ss: u64,
                         v_bs: u64, v_hs: u64, v_ss: u64, m_bs: u64, m_hs: u64, m_qs: u64,
                         scale: f32, softcap: f32, window: u32, flags: u32, chunk: u32) {
                    let geo = AttnGeometry {
                        dims: (h_q, h_kv, s_q, s_kv, d),
                        q: (q_bs, q_hs, q_ss),
                        k: (k_bs, k_hs, k_ss),
                        v: (v_bs, v_hs, v_ss),
                        mask: (m_bs, m_hs, m_qs),
                    };
                    let params = (scale, softcap, window, flags, chunk);
                    attn_rows_body::<$t, $w, { ATTN_ROWS as usize / $w }, $l>(out, part, q, k, v, mask, geo, params)
                }
            )*
            fn $merge(out: *mut $t, part: *const f32, rows: u64, d: u32, splits: u32) {
                attn_merge_body::<$t>(out, part, rows, d, splits)
            }
            $(
                fn $mma(out: *mut $t, part: *mut f32, q: *const $t, k: *const $t, v: *const $t,
                        mask: *const $t, h_q: u32, h_kv: u32, s_q: u32, s_kv: u32, d: u32,
                        q_bs: u64, q_hs: u64, q_ss: u64, k_bs: u64, k_hs: u64, k_ss: u64,
                        v_bs: u64, v_hs: u64, v_ss: u64, m_bs: u64, m_hs: u64, m_qs: u64,
                        scale: f32, softcap: f32, window: u32, flags: u32, chunk: u32) {
                    let geo = AttnGeometry {
                        dims: (h_q, h_kv, s_q, s_kv, d),
                        q: (q_bs, q_hs, q_ss),
                        k: (k_bs, k_hs, k_ss),
                        v: (v_bs, v_hs, v_ss),
                        mask: (m_bs, m_hs, m_qs),
                    };
                    let params = (scale, softcap, window, flags, chunk);
                    attn_mma_body::<$t, $d>(out, part, q, k, v, mask, geo, params)
                }
            )*
            $(
                fn $wgk(out: *mut $t, part: *mut f32, q: *const $t, k: *const $t, v: *const $t,
                        mask: *const $t, h_q: u32, h_kv: u32, s_q: u32, s_kv: u32, d: u32,
                        q_bs: u64, q_hs: u64, q_ss: u64, k_bs: u64, k_hs: u64, k_ss: u64,
                        v_bs: u64, v_hs: u64, v_ss: u64, m_bs: u64, m_hs: u64, m_qs: u64,
                        scale: f32, softcap: f32, window: u32, flags: u32, chunk: u32) {
                    // No split, mask or softcap: the op launches it without.
                    let _ = (part, mask, m_bs, m_hs, m_qs, softcap, chunk);
                    let geo = AttnGeometry {
                        dims: (h_q, h_kv, s_q, s_kv, d),
                        q: (q_bs, q_hs, q_ss),
                        k: (k_bs, k_hs, k_ss),
                        v: (v_bs, v_hs, v_ss),
                        mask: (0, 0, 0),
                    };
                    attn_wgmma_body::<$t, $we>(out, q, k, v, geo, (scale, window, flags))
                }
            )*
        )*}
    };
    (@one) => { None };
    (@one $k:ident) => { Some(KernelRef::of::<$k>()) };
    (@opt) => { None };
    (@opt $($mma:ident)+) => { Some([$(KernelRef::of::<$mma>()),+]) };
}

attn_kernels! {
    f32 => [attn_rows_f32_w1 1 16, attn_rows_f32_w2 2 16, attn_rows_f32_w4 4 16],
        [attn_rows_f32_w1, attn_rows_f32_w2, attn_rows_f32_w4], [], attn_merge_f32, [], [];
    F16 => [attn_rows_f16_w1 1 16, attn_rows_f16_w2 2 16, attn_rows_f16_w1_l8 1 8],
        [attn_rows_f16_w1, attn_rows_f16_w2, attn_rows_f16_w2], [attn_rows_f16_w1_l8], attn_merge_f16,
        [attn_mma_f16_d64 64, attn_mma_f16_d80 80, attn_mma_f16_d96 96, attn_mma_f16_d128 128],
        [attn_wgmma_f16_d64 32, attn_wgmma_f16_d128 64];
    Bf16 => [attn_rows_bf16_w1 1 16, attn_rows_bf16_w2 2 16, attn_rows_bf16_w1_l8 1 8],
        [attn_rows_bf16_w1, attn_rows_bf16_w2, attn_rows_bf16_w2], [attn_rows_bf16_w1_l8], attn_merge_bf16,
        [attn_mma_bf16_d64 64, attn_mma_bf16_d80 80, attn_mma_bf16_d96 96, attn_mma_bf16_d128 128],
        [attn_wgmma_bf16_d64 32, attn_wgmma_bf16_d128 64];
}
attn_kernels!(none: u8, u32, i64);
