//! Row reductions and softmax, one workgroup per row (looping over rows when
//! there are more rows than workgroups):
//! - `reduce_{sum,max,min,prod}_{dtype}` for every dtype,
//!   `reduce_mean_{f32,f16,bf16}`;
//! - `reduce_cols_{sum,max,min,prod}_{dtype}`, `reduce_cols_mean_{f32,f16,bf16}`:
//!   the same reductions over the leading dims of a contiguous input
//!   (columns), coalesced: a column a workitem, the rows split over the
//!   grid's y, the splits' partials combined by a second launch
//!   ([`reduce_cols_body`]; no LDS);
//! - `reduce_argmax_{dtype}`, `reduce_argmin_{dtype}` (u32 index of the first
//!   extreme element; of the first NaN when the row holds one, as PyTorch);
//! - `softmax_{f32,f16,bf16}`, `log_softmax_{...}`, numerically stable, over
//!   contiguous rows.
//!
//! The input is `rows × cols` in logical order (the op library permutes the
//! reduced dims last); `ndim > 0` gives its strided layout. Each workitem of
//! a row kernel accumulates a strided slice of the row in `T::Acc` (f32 or
//! i64), then the workgroup combines with a wave butterfly and one LDS slot
//! per wave. The workgroup size must be a multiple of the wave size;
//! [`REDUCE_LDS_BYTES`] of LDS cover any workgroup up to 1024 workitems.

use crate::device::*;
use crate::elem::*;
use crate::kernels;
use crate::math;
use rocm_kernel_macros::{amdgpu_device, amdgpu_global};

/// LDS a reduction launch must provide: per wave (at most 32) an 8-byte
/// partial at offset 0 and a 4-byte index at [`INDEX_LDS_OFFSET`].
#[amdgpu_device]
pub const REDUCE_LDS_BYTES: u32 = 384;

/// Byte offset of the per-wave indices in LDS.
#[amdgpu_device]
pub const INDEX_LDS_OFFSET: u32 = 256;

/// A reduction: identity, combine, and a final step (mean divides).
#[amdgpu_device]
pub trait ReduceOp {
    /// Start value.
    fn identity<A: Elem>() -> A;
    /// Combines two partial results.
    fn combine<A: Elem>(a: A, b: A) -> A;
    /// Turns the row's result into the output value.
    #[inline(always)]
    fn finish<A: Elem>(acc: A, _cols: u64) -> A {
        acc
    }
    /// Whether each workitem's running float sum is compensated
    /// ([`Compensated`]): sum and mean.
    const COMPENSATED: bool = false;
    /// Folds element `x` into a workitem's running `acc`: [`combine`](Self::combine)
    /// unless an op has a form better suited to a long chain.
    #[inline(always)]
    fn fold_in<A: Elem>(acc: A, x: A) -> A {
        Self::combine(acc, x)
    }
}

/// A float running sum with Neumaier's compensation: the rounding error of
/// each addition is kept in `err` and added back at the end, so a workitem's
/// sum over thousands of elements (a 1M-wide row over 256 workitems) stays
/// within a few ulp instead of drifting by its length times an ulp.
/// Infinities and NaN pass through as in a plain sum.
///
/// ```
/// use ferrocm_kernels::reduce::Compensated;
/// let mut s = Compensated::ZERO;
/// s.add(1.0);
/// for _ in 0..1000 { s.add(1e-8); } // each lost in a plain f32 sum
/// assert!((s.value() - 1.00001).abs() < 1e-7);
/// ```
#[amdgpu_device]
#[derive(Clone, Copy)]
pub struct Compensated {
    /// The running sum.
    pub sum: f32,
    /// The rounding errors of the additions so far.
    pub err: f32,
}

#[amdgpu_device]
impl Compensated {
    /// Nothing added yet.
    pub const ZERO: Self = Self { sum: 0.0, err: 0.0 };

    /// Adds `x`.
    #[inline(always)]
    pub fn add(&mut self, x: f32) {
        let t = self.sum + x;
        let abs = |v: f32| if v < 0.0 { -v } else { v };
        let e = if abs(self.sum) >= abs(x) {
            (self.sum - t) + x
        } else {
            (x - t) + self.sum
        };
        // Past overflow the error term would be inf - inf: keep it finite.
        if t.is_finite() {
            self.err += e;
        }
        self.sum = t;
    }

    /// Multiplies the sum by `f` (the rescale of an online softmax).
    #[inline(always)]
    pub fn scale(&mut self, f: f32) {
        self.sum *= f;
        self.err *= f;
    }

    /// The compensated sum.
    #[inline(always)]
    pub fn value(self) -> f32 {
        self.sum + self.err
    }
}

/// Sum.
#[amdgpu_device]
pub struct Sum;
#[amdgpu_device]
impl ReduceOp for Sum {
    const COMPENSATED: bool = true;
    #[inline(always)]
    fn identity<A: Elem>() -> A {
        A::ZERO
    }
    #[inline(always)]
    fn combine<A: Elem>(a: A, b: A) -> A {
        a.add(b)
    }
}

/// Mean (float types).
#[amdgpu_device]
pub struct Mean;
#[amdgpu_device]
impl ReduceOp for Mean {
    const COMPENSATED: bool = true;
    #[inline(always)]
    fn identity<A: Elem>() -> A {
        A::ZERO
    }
    #[inline(always)]
    fn combine<A: Elem>(a: A, b: A) -> A {
        a.add(b)
    }
    #[inline(always)]
    fn finish<A: Elem>(acc: A, cols: u64) -> A {
        A::from_f32(acc.to_f32() / cols as f32)
    }
}

/// Maximum (NaN if the slice holds one).
#[amdgpu_device]
pub struct Max;
#[amdgpu_device]
impl ReduceOp for Max {
    #[inline(always)]
    fn identity<A: Elem>() -> A {
        A::LOWEST
    }
    #[inline(always)]
    fn combine<A: Elem>(a: A, b: A) -> A {
        a.max(b)
    }
    /// `combine`'s result in a form whose every comparison reads `acc`: `x`
    /// wins unless it is no larger (a NaN `x` is unordered, so it wins) or
    /// `acc` is already a NaN. `combine`'s NaN test of `x` reads only `x`, so
    /// the compiler hoisted a pass's sixteen of them ahead of the chain
    /// (sixteen lane masks live: SGPR spills on gfx942).
    #[inline(always)]
    fn fold_in<A: Elem>(acc: A, x: A) -> A {
        let no_larger = x.lt(acc) | x.eq(acc);
        if !no_larger & !acc.is_nan() { x } else { acc }
    }
}

/// Minimum (NaN if the slice holds one).
#[amdgpu_device]
pub struct Min;
#[amdgpu_device]
impl ReduceOp for Min {
    #[inline(always)]
    fn identity<A: Elem>() -> A {
        A::HIGHEST
    }
    #[inline(always)]
    fn combine<A: Elem>(a: A, b: A) -> A {
        a.min(b)
    }
    /// As [`Max::fold_in`], smaller.
    #[inline(always)]
    fn fold_in<A: Elem>(acc: A, x: A) -> A {
        let no_smaller = acc.lt(x) | acc.eq(x);
        if !no_smaller & !acc.is_nan() { x } else { acc }
    }
}

/// Product (f16/bf16 multiply in f32, integers wrap; 1 over no elements).
#[amdgpu_device]
pub struct Prod;
#[amdgpu_device]
impl ReduceOp for Prod {
    #[inline(always)]
    fn identity<A: Elem>() -> A {
        A::ONE
    }
    #[inline(always)]
    fn combine<A: Elem>(a: A, b: A) -> A {
        a.mul(b)
    }
}

/// A workitem's running reduction `Op` of `T`s: Neumaier-compensated in f32
/// for float sums and means (`Op::COMPENSATED`), else `Op::fold_in` in
/// `T::Acc` (integer sums wrap, max/min propagate NaN).
#[amdgpu_device]
pub struct Running<T: Elem, Op> {
    acc: T::Acc,
    sum: Compensated,
    _op: core::marker::PhantomData<Op>,
}

#[amdgpu_device]
impl<T: Elem, Op: ReduceOp> Running<T, Op> {
    const COMPENSATED: bool = Op::COMPENSATED && T::Acc::IS_FLOAT;

    /// Nothing reduced yet.
    #[inline(always)]
    #[allow(clippy::new_without_default)] // device code: no trait impls needed
    pub fn new() -> Self {
        Self {
            acc: Op::identity::<T::Acc>(),
            sum: Compensated::ZERO,
            _op: core::marker::PhantomData,
        }
    }

    /// Reduces `x` in.
    #[inline(always)]
    pub fn add(&mut self, x: T) {
        if Self::COMPENSATED {
            self.sum.add(x.to_f32());
        } else {
            self.acc = Op::fold_in(self.acc, x.convert::<T::Acc>());
        }
    }

    /// The result so far, in `T::Acc`.
    #[inline(always)]
    pub fn value(self) -> T::Acc {
        if Self::COMPENSATED {
            T::Acc::from_f32(self.sum.value())
        } else {
            self.acc
        }
    }
}

/// Combines `v` over the whole workgroup; every workitem gets the result.
/// Uses wave butterflies, then one LDS slot per wave and two barriers.
#[amdgpu_device]
#[inline(always)]
pub fn block_reduce<A: Elem, Op: ReduceOp>(v: A) -> A {
    let mut acc = v;
    let mut offset = wave_size() / 2;
    while offset > 0 {
        acc = Op::combine(acc, wave_shfl_xor_elem(acc, offset));
        offset /= 2;
    }
    let partials = lds::<A>();
    if lane_id() == 0 {
        partials.store(wave_id(), acc);
    }
    barrier();
    let mut r = Op::identity::<A>();
    let mut w = 0;
    while w < num_waves() {
        r = Op::combine(r, partials.load(w));
        w += 1;
    }
    // The slots are reused by the next reduction.
    barrier();
    r
}

/// The body of `reduce_{sum,mean,max,min}_*`.
#[amdgpu_device]
#[inline(always)]
pub fn reduce_body<T: Elem, Op: ReduceOp>(
    out: *mut T,
    inp: *const T,
    rows: u64,
    cols: u64,
    strides: Strides<1>,
) {
    let mut row = workgroup_id_x() as u64;
    while row < rows {
        let mut acc = Running::<T, Op>::new();
        let bs = workgroup_size_x() as u64;
        let elem = |c: u64| unsafe { load(inp, strides.offset(row * cols + c, 0)) };
        let mut c = workitem_id_x() as u64;
        // Contiguous rows of whole 16-byte words: four words in flight a
        // workitem, then combined in column order (four elements in flight
        // held sum f32 at 81% of an H200's copy bandwidth). Offsets within
        // the row in 32 bits, as `arg_reduce_body`'s.
        let pw = per_word::<T>() as u64;
        let words_of_t = size_of::<T>() == 2 || size_of::<T>() == 4; // word_for_each's types
        if words_of_t
            && strides.is_contiguous()
            && cols.is_multiple_of(pw)
            && cols <= u32::MAX as u64
            && (inp as usize).is_multiple_of(16)
        {
            let words = (cols / pw) as u32;
            let src = unsafe { (inp as *const W128).add((row * words as u64) as usize) };
            let bs = bs as u32;
            let ld = |w: u32| unsafe { load(src, w as usize) };
            let mut add = |word: W128| word_for_each::<T>(word, |_, x| acc.add(x));
            let mut w = c as u32;
            while w + 3 * bs < words {
                // Named, not an array in a loop: a loop the compiler kept
                // rolled (mean f16/bf16) put the array in local memory.
                let (w0, w1, w2, w3) = (ld(w), ld(w + bs), ld(w + 2 * bs), ld(w + 3 * bs));
                add(w0);
                add(w1);
                add(w2);
                add(w3);
                w += 4 * bs;
            }
            while w < words {
                add(ld(w));
                w += bs;
            }
            c = cols;
        }
        // Other contiguous rows: four loads in flight before they are
        // combined (in column order). Strided rows one at a time (registers,
        // see `grid_stride_batched`).
        let batch = strides.is_contiguous();
        while batch && c + 3 * bs < cols {
            let (x0, x1, x2, x3) = (elem(c), elem(c + bs), elem(c + 2 * bs), elem(c + 3 * bs));
            acc.add(x0);
            acc.add(x1);
            acc.add(x2);
            acc.add(x3);
            c += 4 * bs;
        }
        while c < cols {
            acc.add(elem(c));
            c += bs;
        }
        let r = block_reduce::<T::Acc, Op>(acc.value());
        if workitem_id_x() == 0 {
            unsafe { store(out, row as usize, Op::finish(r, cols).convert::<T>()) };
        }
        row += num_workgroups_x() as u64;
    }
}

/// Workgroup size of `reduce_cols_*` launches: a column per workitem, so a
/// workgroup reads [`COL_BLOCK`] adjacent elements of a row (1 KB of f32) at
/// a time. Any size works (the kernel has no barriers).
#[amdgpu_device]
pub const COL_BLOCK: u32 = 256;

/// The body of `reduce_cols_{sum,mean,max,min,prod}_*`: `inp` is a
/// contiguous `rows × cols` matrix and `out[c]` the reduction of column `c`
/// (the reduced dims lead and the kept dims trail: `sum(&[0])` of a
/// contiguous tensor). The row kernel would read such a column with a stride
/// of a whole row; here each workitem takes one column (adjacent workitems
/// adjacent columns: coalesced row segments) over the rows
/// `split * chunk ..` of its workgroup's split (`workgroup_id_y`), four
/// loads in flight.
///
/// With one split (`part` null) it writes `out`. With more, each split
/// writes its column's partial (`T::Acc`) to `part[split * cols + c]`
/// (`part` is a buffer of `T::Acc`; the host sizes it at 8 bytes a partial,
/// the widest `Acc`), and a second launch of the same kernel
/// with `inp` null and `chunk` = the number of splits combines them in
/// split order into `out` (deterministic). The splits let a few columns'
/// tiles fill the GPU: 16384 x 4096 f32 ran as 128 workgroups of 32 columns
/// at 75% of an H200's copy bandwidth.
#[amdgpu_device]
#[inline(always)]
pub fn reduce_cols_body<T: Elem, Op: ReduceOp>(
    out: *mut T,
    part: *mut u64,
    inp: *const T,
    (rows, cols, chunk): (u64, u64, u64),
) {
    let c = workgroup_id_x() as u64 * workgroup_size_x() as u64 + workitem_id_x() as u64;
    if c >= cols {
        return;
    }
    let partials = part as *mut T::Acc;
    if inp.is_null() {
        // The second pass: `chunk` partials of column `c`, in split order.
        let mut acc = Running::<T::Acc, Op>::new();
        let part_of =
            |split: u64| unsafe { load(partials as *const T::Acc, (split * cols + c) as usize) };
        // Four in flight: one at a time, this pass took 17 us of the 77 of
        // a 16384 x 4096 f32 column sum on an H200.
        let mut split = 0;
        while split + 3 < chunk {
            let (p0, p1, p2, p3) = (
                part_of(split),
                part_of(split + 1),
                part_of(split + 2),
                part_of(split + 3),
            );
            acc.add(p0);
            acc.add(p1);
            acc.add(p2);
            acc.add(p3);
            split += 4;
        }
        while split < chunk {
            acc.add(part_of(split));
            split += 1;
        }
        let total = acc.value().convert::<T::Acc>();
        unsafe { store(out, c as usize, Op::finish(total, rows).convert::<T>()) };
        return;
    }
    let split = workgroup_id_y() as u64;
    let begin = Ord::min(split * chunk, rows);
    let end = Ord::min(begin.saturating_add(chunk), rows);
    let mut acc = Running::<T, Op>::new();
    let elem = |r: u64| unsafe { load(inp, (r * cols + c) as usize) };
    let mut r = begin;
    while r + 3 < end {
        let (x0, x1, x2, x3) = (elem(r), elem(r + 1), elem(r + 2), elem(r + 3));
        acc.add(x0);
        acc.add(x1);
        acc.add(x2);
        acc.add(x3);
        r += 4;
    }
    while r < end {
        acc.add(elem(r));
        r += 1;
    }
    if part.is_null() {
        unsafe {
            store(
                out,
                c as usize,
                Op::finish(acc.value(), rows).convert::<T>(),
            )
        };
    } else {
        unsafe { store(partials, (split * cols + c) as usize, acc.value()) };
    }
}

/// Whether candidate (`v`, `i`) beats (`best`, `best_i`) (`best_i ==
/// u32::MAX`: nothing yet): NaN beats any number and the lower index wins
/// between NaNs (argmax/argmin give the first NaN, as PyTorch); else larger
/// (smaller for `MIN`), or equal with a smaller index.
#[amdgpu_device]
#[inline(always)]
pub fn arg_better<A: Elem, const MIN: bool>(v: A, i: u32, best: A, best_i: u32) -> bool {
    if best_i == u32::MAX {
        return i != u32::MAX;
    }
    let (v_nan, best_nan) = (v.is_nan(), best.is_nan());
    if v_nan || best_nan {
        return v_nan && (!best_nan || i < best_i);
    }
    let strictly = if MIN { v.lt(best) } else { best.lt(v) };
    strictly || (v.eq(best) && i < best_i)
}

/// [`arg_better`] for a workitem's own scan, where each candidate's index is
/// larger than any seen before, so a tie never wins and the index need not be
/// compared (the full rule cost the H100's argmax a third of its bandwidth):
/// `v` is taken unless it is no better (`v <= best` for argmax; a NaN `v` is
/// unordered, so it wins) or `best` is already a NaN (the first NaN stays).
/// The scan starts from the workitem's first index with `best` at
/// [`Elem::LOWEST`] (argmin: [`Elem::HIGHEST`]): a row of that value keeps the
/// first index, which holds it. Evaluated without branches (`&`, `|`), so the
/// loads after it do not wait for its data.
#[amdgpu_device]
#[inline(always)]
pub fn arg_scan_takes<A: Elem, const MIN: bool>(v: A, best: A) -> bool {
    let no_better = if MIN {
        best.lt(v) | best.eq(v)
    } else {
        v.lt(best) | v.eq(best)
    };
    !no_better & !best.is_nan()
}

/// One step of a workitem's argmax/argmin scan: `(x, i)` replaces (`best`,
/// `best_i`) when [`arg_scan_takes`] says so, without branches.
#[amdgpu_device]
#[inline(always)]
pub fn arg_scan_step<A: Elem, const MIN: bool>(best: &mut A, best_i: &mut u32, x: A, i: u32) {
    let take = arg_scan_takes::<A, MIN>(x, *best);
    *best = if take { x } else { *best };
    *best_i = if take { i } else { *best_i };
}

/// The largest (`MIN`: smallest) element of a 16-byte word of 16-bit
/// floats in f32, NaN when any is: [`Elem::pick2`] over its four lanes,
/// then the last pair.
#[amdgpu_device]
#[inline(always)]
pub fn word_extreme<T: Elem, const MIN: bool>(w: W128) -> T::Acc {
    let [a, b, c, d] = w.0;
    let m = T::pick2::<MIN>(T::pick2::<MIN>(a, b), T::pick2::<MIN>(c, d));
    let (lo, hi) = (
        lane_get::<T>(m, 0).convert::<T::Acc>(),
        lane_get::<T>(m, 1).convert::<T::Acc>(),
    );
    if MIN { lo.min(hi) } else { lo.max(hi) }
}

/// The body of `reduce_argmax_*` / `reduce_argmin_*`.
#[amdgpu_device]
#[inline(always)]
pub fn arg_reduce_body<T: Elem, const MIN: bool>(
    out: *mut u32,
    inp: *const T,
    rows: u64,
    cols: u64,
    strides: Strides<1>,
) {
    let vals = lds::<T::Acc>();
    let idxs = lds_at::<u32>(INDEX_LDS_OFFSET);
    // f16/bf16 rows of whole words compare each word's extreme, found
    // without indices (paired `max.NaN` on NVIDIA), against the running
    // best: a fifth of the per-element scan's instructions, which held
    // argmax bf16 at 84% of an H200's copy bandwidth.
    let word_extremes = T::IS_FLOAT && size_of::<T>() == 2;
    let mut row = workgroup_id_x() as u64;
    while row < rows {
        let mut best = if MIN { T::Acc::HIGHEST } else { T::Acc::LOWEST };
        let bs = workgroup_size_x() as u64;
        let elem =
            |c: u64| unsafe { load(inp, strides.offset(row * cols + c, 0)) }.convert::<T::Acc>();
        let mut c = workitem_id_x() as u64;
        // Contiguous rows of whole 16-byte words: four words in flight, then
        // compared in column order. The scan has no branches, so the loads
        // are all issued before the first comparison waits for its data (a
        // scan that branched on each value kept one load in flight: argmax
        // f32 at 75% of an H200's copy bandwidth).
        let pw = per_word::<T>() as u64;
        let words_of_t = size_of::<T>() == 2 || size_of::<T>() == 4; // word_for_each's types
        let by_words = words_of_t
            && strides.is_contiguous()
            && cols.is_multiple_of(pw)
            && (inp as usize).is_multiple_of(16);
        // The workitem's first index, or none (`u32::MAX`): the scan starts
        // there with `best` at LOWEST/HIGHEST (see `arg_scan_takes`).
        let first = if by_words { c * pw } else { c };
        let mut best_i = if first < cols { first as u32 } else { u32::MAX };
        if by_words {
            // Offsets within the row in 32 bits (a row's index fits u32, as
            // the result does): u64 counters spilled SGPRs on gfx942.
            let words = (cols / pw) as u32;
            let src = unsafe { (inp as *const W128).add((row * words as u64) as usize) };
            let (bs, pw) = (bs as u32, pw as u32);
            let ld = |w: u32| unsafe { load(src, w as usize) };
            let (mut best_w, mut best_word) = (c as u32, W128([0; 4]));
            let mut scan = |w: u32, word: W128| {
                if word_extremes {
                    // The word's extreme first, then one comparison for
                    // the word; its index is found once, at the end.
                    let m = word_extreme::<T, MIN>(word);
                    let take = arg_scan_takes::<T::Acc, MIN>(m, best);
                    best = if take { m } else { best };
                    best_w = if take { w } else { best_w };
                    let pick = |l: usize| if take { word.0[l] } else { best_word.0[l] };
                    best_word = W128([pick(0), pick(1), pick(2), pick(3)]);
                } else {
                    word_for_each::<T>(word, |k, x| {
                        arg_scan_step::<T::Acc, MIN>(
                            &mut best,
                            &mut best_i,
                            x.convert(),
                            w * pw + k,
                        )
                    })
                }
            };
            let mut w = c as u32;
            while w + 3 * bs < words {
                let (w0, w1, w2, w3) = (ld(w), ld(w + bs), ld(w + 2 * bs), ld(w + 3 * bs));
                scan(w, w0);
                scan(w + bs, w1);
                scan(w + 2 * bs, w2);
                scan(w + 3 * bs, w3);
                w += 4 * bs;
            }
            while w < words {
                scan(w, ld(w));
                w += bs;
            }
            if word_extremes && best_i != u32::MAX {
                // The first element of the chosen word that equals its
                // extreme (or is a NaN, when that is a NaN). None does only
                // when no word was taken, from a first word all of the
                // start value: its first index.
                let mut k_hit = 0;
                let mut found = false;
                word_for_each::<T>(best_word, |k, x| {
                    let x = x.convert::<T::Acc>();
                    let hit = x.eq(best) | (x.is_nan() & best.is_nan());
                    k_hit = if hit & !found { k } else { k_hit };
                    found |= hit;
                });
                best_i = best_w * pw + k_hit;
            }
            c = cols;
        }
        let mut consider =
            |x: T::Acc, i: u32| arg_scan_step::<T::Acc, MIN>(&mut best, &mut best_i, x, i);
        // Other contiguous rows: four loads in flight, then compared in
        // column order.
        let batch = strides.is_contiguous();
        while batch && c + 3 * bs < cols {
            let xs = [elem(c), elem(c + bs), elem(c + 2 * bs), elem(c + 3 * bs)];
            let mut k = 0;
            while k < 4 {
                consider(xs[k], (c + k as u64 * bs) as u32);
                k += 1;
            }
            c += 4 * bs;
        }
        while c < cols {
            consider(elem(c), c as u32);
            c += bs;
        }
        let mut offset = wave_size() / 2;
        while offset > 0 {
            let v = wave_shfl_xor_elem(best, offset);
            let i = wave_shfl_xor(best_i, offset);
            if arg_better::<T::Acc, MIN>(v, i, best, best_i) {
                best = v;
                best_i = i;
            }
            offset /= 2;
        }
        if lane_id() == 0 {
            vals.store(wave_id(), best);
            idxs.store(wave_id(), best_i);
        }
        barrier();
        if workitem_id_x() == 0 {
            let mut w = 1;
            best = vals.load(0);
            best_i = idxs.load(0);
            while w < num_waves() {
                let (v, i) = (vals.load(w), idxs.load(w));
                if arg_better::<T::Acc, MIN>(v, i, best, best_i) {
                    best = v;
                    best_i = i;
                }
                w += 1;
            }
            unsafe {
                store(
                    out,
                    row as usize,
                    if best_i == u32::MAX { 0 } else { best_i },
                )
            };
        }
        barrier();
        row += num_workgroups_x() as u64;
    }
}

/// 16-byte words of a row each workitem of `softmax_*` holds in registers:
/// rows of up to `SOFTMAX_HELD_WORDS * workgroup size` words (4096 f32 or
/// 8192 f16/bf16 at 256 workitems, four times that at 1024) are read once.
#[amdgpu_device]
pub const SOFTMAX_HELD_WORDS: u32 = 4;

/// Whether `softmax_*` reads its rows once, into registers: every row starts
/// on a 16-byte word (both buffers aligned, `cols` a whole number of words)
/// and fits [`SOFTMAX_HELD_WORDS`] words per workitem of a workgroup of
/// `block` (the host sizes the workgroup by this rule too).
///
/// ```
/// use ferrocm_kernels::reduce::reductions::softmax_holds_rows;
/// let p = 256 as *const f32; // aligned
/// assert!(softmax_holds_rows::<f32>(p, p as *mut f32, 4096, 256));
/// assert!(!softmax_holds_rows::<f32>(p, p as *mut f32, 4100, 256));
/// assert!(!softmax_holds_rows::<f32>(p, p as *mut f32, 4098, 1024)); // not whole words
/// ```
#[amdgpu_device]
#[inline(always)]
pub fn softmax_holds_rows<T>(inp: *const T, out: *mut T, cols: u64, block: u64) -> bool {
    let per = per_word::<T>() as u64;
    (inp as usize).is_multiple_of(16)
        && (out as usize).is_multiple_of(16)
        && cols.is_multiple_of(per)
        && cols / per <= SOFTMAX_HELD_WORDS as u64 * block
}

/// `f(0)` .. `f(SOFTMAX_HELD_WORDS - 1)`, written out.
#[amdgpu_device]
#[inline(always)]
fn held_each(mut f: impl FnMut(usize)) {
    f(0);
    f(1);
    f(2);
    f(3);
}

/// [`softmax_body`] on rows held in registers: each workitem loads its words
/// of the row (all loads in flight together), the row's maximum and then
/// the sum of e^(x - max) are combined over the workgroup, and the outputs
/// are computed from the held values (the exponential again: one
/// instruction on NVIDIA, cheaper than holding the results) and stored a
/// word at a time. One read and one write of the row: the two-pass body
/// re-reads it and ran at 44% of the H100's copy bandwidth (f32, 4096).
/// NaN anywhere in a row makes it all NaN, and a row of -inf is NaN (the
/// maximum is NaN-propagating; -inf - -inf is NaN), as in the two-pass body.
#[amdgpu_device]
#[inline(always)]
pub fn softmax_held<T: Elem, const LOG: bool>(out: *mut T, inp: *const T, rows: u64, cols: u64) {
    let bs = workgroup_size_x() as u64;
    let words = cols / per_word::<T>() as u64;
    let (src, dst) = (inp as *const W128, out as *mut W128);
    let word = |j: usize| workitem_id_x() as u64 + j as u64 * bs;
    let mut row = workgroup_id_x() as u64;
    while row < rows {
        let base = row * words;
        let ld = |j: usize| {
            if word(j) < words {
                unsafe { load(src, (base + word(j)) as usize) }
            } else {
                W128([0; 4])
            }
        };
        // Written out, as every pass over `held` (`held_each`): loops indexed
        // by a variable put the words in local memory on NVPTX.
        let held: [W128; SOFTMAX_HELD_WORDS as usize] = [ld(0), ld(1), ld(2), ld(3)];
        let mut m = f32::NEG_INFINITY;
        held_each(|j| {
            if word(j) < words {
                word_for_each::<T>(held[j], |_, x| m = math::maximum(m, x.to_f32()));
            }
        });
        let row_max = block_reduce::<f32, Max>(m);
        let mut s = 0.0f32;
        held_each(|j| {
            if word(j) < words {
                word_for_each::<T>(held[j], |_, x| s += math::exp_fast(x.to_f32() - row_max));
            }
        });
        let total = block_reduce::<f32, Sum>(s);
        let log_s = math::log(total);
        held_each(|j| {
            if word(j) < words {
                let y = word_map_f32::<T>(held[j], |x| {
                    let x = x - row_max;
                    if LOG {
                        x - log_s
                    } else if size_of::<T>() == 2 {
                        // Rounded to 8 or 11 bits next: `div.full`'s 2 ulp
                        // of f32 are plenty (`div.rn` per element held bf16
                        // rows to 69% of copy on an H200).
                        math::div_for_half(math::exp_fast(x), total)
                    } else {
                        math::exp_fast(x) / total
                    }
                });
                unsafe { store(dst, (base + word(j)) as usize, y) };
            }
        });
        row += num_workgroups_x() as u64;
    }
}

/// The body of `softmax_*` (`LOG = false`) and `log_softmax_*` (`LOG = true`),
/// in two passes over the row (rows [`softmax_holds_rows`] refuses; the
/// others go to [`softmax_held`]): the running maximum and the sum of
/// exp(x - max) together (online softmax: the sum is rescaled when the maximum
/// grows), combined over the workgroup, then the output. Rows with NaN or
/// only -inf give NaN, as the three-pass formula did. The input is contiguous
/// `rows × cols` (the op library makes it so). The exponentials are
/// [`math::exp_fast`]: on NVPTX the portable `exp` made softmax f32 run at
/// 36% of copy bandwidth on the H100.
#[amdgpu_device]
#[inline(always)]
pub fn softmax_body<T: Elem, const LOG: bool>(out: *mut T, inp: *const T, rows: u64, cols: u64) {
    let mut row = workgroup_id_x() as u64;
    let bs = workgroup_size_x() as u64;
    if softmax_holds_rows::<T>(inp, out, cols, bs) {
        softmax_held::<T, LOG>(out, inp, rows, cols);
        return;
    }
    while row < rows {
        let base = row * cols;
        let elem = |c: u64| unsafe { load(inp, (base + c) as usize) }.to_f32();
        let mut m = f32::NEG_INFINITY;
        // The sum of e^(x - m), compensated (rows up to 1M stay within 1e-6).
        let mut s = Compensated::ZERO;
        // -inf adds nothing (e^-inf = 0 against any finite maximum; a row of
        // -inf only gives NaN in the output pass, as the formula does).
        let mut add = |x: f32| {
            if x > m {
                s.scale(math::exp_fast(m - x));
                s.add(1.0);
                m = x;
            } else if x != f32::NEG_INFINITY {
                s.add(math::exp_fast(x - m));
            }
        };
        let mut c = workitem_id_x() as u64;
        while c + 3 * bs < cols {
            let (x0, x1, x2, x3) = (elem(c), elem(c + bs), elem(c + 2 * bs), elem(c + 3 * bs));
            add(x0);
            add(x1);
            add(x2);
            add(x3);
            c += 4 * bs;
        }
        while c < cols {
            add(elem(c));
            c += bs;
        }
        let row_max = block_reduce::<f32, Max>(m);
        // This workitem's sum, rescaled to the row's maximum (0 when it saw
        // no element: m = -inf, s = 0).
        let s = s.value();
        let mine = if s == 0.0 {
            0.0
        } else {
            s * math::exp_fast(m - row_max)
        };
        let total = block_reduce::<f32, Sum>(mine);
        let log_s = math::log(total);
        let put = |c: u64, x: f32| {
            let x = x - row_max;
            let y = if LOG {
                x - log_s
            } else {
                math::exp_fast(x) / total
            };
            unsafe { store(out, (base + c) as usize, T::from_f32(y)) };
        };
        c = workitem_id_x() as u64;
        while c + 3 * bs < cols {
            let (x0, x1, x2, x3) = (elem(c), elem(c + bs), elem(c + 2 * bs), elem(c + 3 * bs));
            put(c, x0);
            put(c + bs, x1);
            put(c + 2 * bs, x2);
            put(c + 3 * bs, x3);
            c += 4 * bs;
        }
        while c < cols {
            put(c, elem(c));
            c += bs;
        }
        row += num_workgroups_x() as u64;
    }
}

/// The parameter types of the value and arg reductions of element type `T`
/// (`O` is `T` for the value reductions, `u32` for argmax/argmin). A strided
/// input's layout is read from memory: with the by-value words, the row loop
/// spilled SGPRs on gfx9.
#[cfg(not(ferrocm_device))]
pub type ReduceArgs<T, O> = (*mut O, *const T, u64, u64, u32, *const u64);

/// The parameter types of the column reductions on element type `T`:
/// `(out, part, inp, rows, cols, chunk)` (see [`reduce_cols_body`]).
#[cfg(not(ferrocm_device))]
pub type ColReduceArgs<T> = (*mut T, *mut u64, *const T, u64, u64, u64);

/// The parameter types of softmax / log_softmax on element type `T`.
#[cfg(not(ferrocm_device))]
pub type SoftmaxArgs<T> = (*mut T, *const T, u64, u64);

#[cfg(not(ferrocm_device))]
use crate::host::KernelRef;

/// The kernels of one value reduction, per dtype (host side); `None` where the
/// dtype has none (mean of an integer type).
#[cfg(not(ferrocm_device))]
pub trait ReduceKernel: ReduceOp {
    /// Per dtype: f32, f16, bf16, u8, u32, i64.
    const F32: Option<KernelRef<ReduceArgs<f32, f32>>>;
    #[allow(missing_docs)]
    const F16: Option<KernelRef<ReduceArgs<F16, F16>>>;
    #[allow(missing_docs)]
    const BF16: Option<KernelRef<ReduceArgs<Bf16, Bf16>>>;
    #[allow(missing_docs)]
    const U8: Option<KernelRef<ReduceArgs<u8, u8>>>;
    #[allow(missing_docs)]
    const U32: Option<KernelRef<ReduceArgs<u32, u32>>>;
    #[allow(missing_docs)]
    const I64: Option<KernelRef<ReduceArgs<i64, i64>>>;
    /// The column reductions (`reduce_cols_*`), per dtype.
    const COLS_F32: Option<KernelRef<ColReduceArgs<f32>>>;
    #[allow(missing_docs)]
    const COLS_F16: Option<KernelRef<ColReduceArgs<F16>>>;
    #[allow(missing_docs)]
    const COLS_BF16: Option<KernelRef<ColReduceArgs<Bf16>>>;
    #[allow(missing_docs)]
    const COLS_U8: Option<KernelRef<ColReduceArgs<u8>>>;
    #[allow(missing_docs)]
    const COLS_U32: Option<KernelRef<ColReduceArgs<u32>>>;
    #[allow(missing_docs)]
    const COLS_I64: Option<KernelRef<ColReduceArgs<i64>>>;
}

/// The reduction kernels of an element type (host side).
#[cfg(not(ferrocm_device))]
pub trait ReduceKernels: Sized + 'static {
    /// The value reduction `Op`, if this dtype has it.
    fn reduce<Op: ReduceKernel>() -> Option<KernelRef<ReduceArgs<Self, Self>>>;
    /// The column reduction `Op` (`reduce_cols_*`), if this dtype has it.
    fn reduce_cols<Op: ReduceKernel>() -> Option<KernelRef<ColReduceArgs<Self>>>;
    /// `reduce_argmax_{T}`.
    const ARGMAX: KernelRef<ReduceArgs<Self, u32>>;
    /// `reduce_argmin_{T}`.
    const ARGMIN: KernelRef<ReduceArgs<Self, u32>>;
    /// `softmax_{T}` (float types).
    const SOFTMAX: Option<KernelRef<SoftmaxArgs<Self>>>;
    /// `log_softmax_{T}` (float types).
    const LOG_SOFTMAX: Option<KernelRef<SoftmaxArgs<Self>>>;
}

#[cfg(not(ferrocm_device))]
const _: () = {
    macro_rules! reduce_op {
        ($($op:ident => $($c:ident, $cc:ident: $t:ty = $k:tt, $kc:tt),*;)*) => {$(
            impl ReduceKernel for $op {
                $(const $c: Option<KernelRef<ReduceArgs<$t, $t>>> = reduce_op!(@k $k);)*
                $(const $cc: Option<KernelRef<ColReduceArgs<$t>>> = reduce_op!(@k $kc);)*
            }
        )*};
        (@k None) => { None };
        (@k $k:ident) => { Some(KernelRef::of::<$k>()) };
    }
    reduce_op! {
        Sum => F32, COLS_F32: f32 = reduce_sum_f32, reduce_cols_sum_f32, F16, COLS_F16: F16 = reduce_sum_f16, reduce_cols_sum_f16, BF16, COLS_BF16: Bf16 = reduce_sum_bf16, reduce_cols_sum_bf16, U8, COLS_U8: u8 = reduce_sum_u8, reduce_cols_sum_u8, U32, COLS_U32: u32 = reduce_sum_u32, reduce_cols_sum_u32, I64, COLS_I64: i64 = reduce_sum_i64, reduce_cols_sum_i64;
        Max => F32, COLS_F32: f32 = reduce_max_f32, reduce_cols_max_f32, F16, COLS_F16: F16 = reduce_max_f16, reduce_cols_max_f16, BF16, COLS_BF16: Bf16 = reduce_max_bf16, reduce_cols_max_bf16, U8, COLS_U8: u8 = reduce_max_u8, reduce_cols_max_u8, U32, COLS_U32: u32 = reduce_max_u32, reduce_cols_max_u32, I64, COLS_I64: i64 = reduce_max_i64, reduce_cols_max_i64;
        Min => F32, COLS_F32: f32 = reduce_min_f32, reduce_cols_min_f32, F16, COLS_F16: F16 = reduce_min_f16, reduce_cols_min_f16, BF16, COLS_BF16: Bf16 = reduce_min_bf16, reduce_cols_min_bf16, U8, COLS_U8: u8 = reduce_min_u8, reduce_cols_min_u8, U32, COLS_U32: u32 = reduce_min_u32, reduce_cols_min_u32, I64, COLS_I64: i64 = reduce_min_i64, reduce_cols_min_i64;
        Prod => F32, COLS_F32: f32 = reduce_prod_f32, reduce_cols_prod_f32, F16, COLS_F16: F16 = reduce_prod_f16, reduce_cols_prod_f16, BF16, COLS_BF16: Bf16 = reduce_prod_bf16, reduce_cols_prod_bf16, U8, COLS_U8: u8 = reduce_prod_u8, reduce_cols_prod_u8, U32, COLS_U32: u32 = reduce_prod_u32, reduce_cols_prod_u32, I64, COLS_I64: i64 = reduce_prod_i64, reduce_cols_prod_i64;
        Mean => F32, COLS_F32: f32 = reduce_mean_f32, reduce_cols_mean_f32, F16, COLS_F16: F16 = reduce_mean_f16, reduce_cols_mean_f16, BF16, COLS_BF16: Bf16 = reduce_mean_bf16, reduce_cols_mean_bf16, U8, COLS_U8: u8 = None, None, U32, COLS_U32: u32 = None, None, I64, COLS_I64: i64 = None, None;
    }
    macro_rules! per_type {
        ($($t:ty => $c:ident, $cc:ident, $amax:ident, $amin:ident, $sm:tt, $lsm:tt;)*) => {$(
            impl ReduceKernels for $t {
                fn reduce<Op: ReduceKernel>() -> Option<KernelRef<ReduceArgs<Self, Self>>> { Op::$c }
                fn reduce_cols<Op: ReduceKernel>() -> Option<KernelRef<ColReduceArgs<Self>>> { Op::$cc }
                const ARGMAX: KernelRef<ReduceArgs<Self, u32>> = KernelRef::of::<$amax>();
                const ARGMIN: KernelRef<ReduceArgs<Self, u32>> = KernelRef::of::<$amin>();
                const SOFTMAX: Option<KernelRef<SoftmaxArgs<Self>>> = per_type!(@k $sm);
                const LOG_SOFTMAX: Option<KernelRef<SoftmaxArgs<Self>>> = per_type!(@k $lsm);
            }
        )*};
        (@k None) => { None };
        (@k $k:ident) => { Some(KernelRef::of::<$k>()) };
    }
    per_type! {
        f32 => F32, COLS_F32, reduce_argmax_f32, reduce_argmin_f32, softmax_f32, log_softmax_f32;
        F16 => F16, COLS_F16, reduce_argmax_f16, reduce_argmin_f16, softmax_f16, log_softmax_f16;
        Bf16 => BF16, COLS_BF16, reduce_argmax_bf16, reduce_argmin_bf16, softmax_bf16, log_softmax_bf16;
        u8 => U8, COLS_U8, reduce_argmax_u8, reduce_argmin_u8, None, None;
        u32 => U32, COLS_U32, reduce_argmax_u32, reduce_argmin_u32, None, None;
        i64 => I64, COLS_I64, reduce_argmax_i64, reduce_argmin_i64, None, None;
    }
};

macro_rules! reduce_kernels {
    ($($op:ident => $($name:ident: $t:ty),*;)*) => {
        kernels! {$($(
            fn $name(out: *mut $t, inp: *const $t, rows: u64, cols: u64, ndim: u32, layout: *const u64) {
                reduce_body::<$t, $op>(out, inp, rows, cols, Strides::in_memory(ndim, layout))
            }
        )*)*}
    };
}

macro_rules! col_reduce_kernels {
    ($($op:ident => $($name:ident: $t:ty),*;)*) => {
        kernels! { table COL_KERNELS; $($(
            fn $name(out: *mut $t, part: *mut u64, inp: *const $t, rows: u64, cols: u64, chunk: u64) {
                reduce_cols_body::<$t, $op>(out, part, inp, (rows, cols, chunk))
            }
        )*)*}
    };
}

macro_rules! arg_reduce_kernels {
    ($($min:literal => $($name:ident: $t:ty),*;)*) => {
        kernels! { table ARG_KERNELS; $($(
            fn $name(out: *mut u32, inp: *const $t, rows: u64, cols: u64, ndim: u32, layout: *const u64) {
                arg_reduce_body::<$t, $min>(out, inp, rows, cols, Strides::in_memory(ndim, layout))
            }
        )*)*}
    };
}

macro_rules! softmax_kernels {
    ($($log:literal => $($name:ident: $t:ty),*;)*) => {
        kernels! { table SOFTMAX_KERNELS; $($(
            fn $name(out: *mut $t, inp: *const $t, rows: u64, cols: u64) {
                softmax_body::<$t, $log>(out, inp, rows, cols)
            }
        )*)*}
    };
}

reduce_kernels! {
    Sum => reduce_sum_f32: f32, reduce_sum_f16: F16, reduce_sum_bf16: Bf16, reduce_sum_u8: u8, reduce_sum_u32: u32, reduce_sum_i64: i64;
    Max => reduce_max_f32: f32, reduce_max_f16: F16, reduce_max_bf16: Bf16, reduce_max_u8: u8, reduce_max_u32: u32, reduce_max_i64: i64;
    Min => reduce_min_f32: f32, reduce_min_f16: F16, reduce_min_bf16: Bf16, reduce_min_u8: u8, reduce_min_u32: u32, reduce_min_i64: i64;
    Prod => reduce_prod_f32: f32, reduce_prod_f16: F16, reduce_prod_bf16: Bf16, reduce_prod_u8: u8, reduce_prod_u32: u32, reduce_prod_i64: i64;
    Mean => reduce_mean_f32: f32, reduce_mean_f16: F16, reduce_mean_bf16: Bf16;
}

col_reduce_kernels! {
    Sum => reduce_cols_sum_f32: f32, reduce_cols_sum_f16: F16, reduce_cols_sum_bf16: Bf16, reduce_cols_sum_u8: u8, reduce_cols_sum_u32: u32, reduce_cols_sum_i64: i64;
    Max => reduce_cols_max_f32: f32, reduce_cols_max_f16: F16, reduce_cols_max_bf16: Bf16, reduce_cols_max_u8: u8, reduce_cols_max_u32: u32, reduce_cols_max_i64: i64;
    Min => reduce_cols_min_f32: f32, reduce_cols_min_f16: F16, reduce_cols_min_bf16: Bf16, reduce_cols_min_u8: u8, reduce_cols_min_u32: u32, reduce_cols_min_i64: i64;
    Prod => reduce_cols_prod_f32: f32, reduce_cols_prod_f16: F16, reduce_cols_prod_bf16: Bf16, reduce_cols_prod_u8: u8, reduce_cols_prod_u32: u32, reduce_cols_prod_i64: i64;
    Mean => reduce_cols_mean_f32: f32, reduce_cols_mean_f16: F16, reduce_cols_mean_bf16: Bf16;
}

arg_reduce_kernels! {
    false => reduce_argmax_f32: f32, reduce_argmax_f16: F16, reduce_argmax_bf16: Bf16, reduce_argmax_u8: u8, reduce_argmax_u32: u32, reduce_argmax_i64: i64;
    true => reduce_argmin_f32: f32, reduce_argmin_f16: F16, reduce_argmin_bf16: Bf16, reduce_argmin_u8: u8, reduce_argmin_u32: u32, reduce_argmin_i64: i64;
}

softmax_kernels! {
    false => softmax_f32: f32, softmax_f16: F16, softmax_bf16: Bf16;
    true => log_softmax_f32: f32, log_softmax_f16: F16, log_softmax_bf16: Bf16;
}
