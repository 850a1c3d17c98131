//! The Cpu engine: elementwise maps over strided views, row folds, all
//! parallel over rayon and vectorised. Public for ops written outside
//! ferrocm: [`host`] / [`host_mut`] give a Cpu buffer's elements, [`map1`],
//! [`map2`], [`map3`] apply a [`Func1`] / [`Func2`] / [`Func3`] over views
//! of any strides (broadcast included), [`fold`] reduces a slice pairwise.
//!
//! How they stay fast (each measured in `compare/benches/vs_candle.rs`):
//! - every op's scalar function is a generic parameter, monomorphised and
//!   inlined into the loop (no function pointer per element);
//! - the loops run over slices where memory is contiguous, so the compiler
//!   vectorises them and drops bounds checks; strided views are walked one
//!   run of the innermost dim at a time (dims that are contiguous together
//!   are merged first), never with index arithmetic per element;
//! - [`vectorized`] compiles each loop a second time for AVX2 + FMA and picks
//!   that copy at run time when the CPU has them: the device layer's math
//!   (`exp` and everything built on it) is plain arithmetic, so it vectorises
//!   too, and its `fma` becomes one instruction.

use crate::core::layout::Layout;
use ferrocm_host::DeviceBuffer;
use rayon::prelude::*;
use std::marker::PhantomData;

/// Elements per rayon task of an elementwise map.
const CHUNK: usize = 1 << 15;

/// The host slice of a buffer on the Cpu device (empty for a buffer of
/// another device: an op's `cpu` path only ever sees Cpu buffers).
pub fn host<T: bytemuck::Pod>(b: &DeviceBuffer<T>) -> &[T] {
    b.as_slice().unwrap_or_default()
}

/// The mutable host slice of a buffer on the Cpu device.
pub fn host_mut<T: bytemuck::Pod>(b: &mut DeviceBuffer<T>) -> &mut [T] {
    b.as_mut_slice().unwrap_or_default()
}

/// Runs `f` on one of the Cpu's worker threads (rayon's global pool) and
/// returns what it returns. Every Cpu op splits its loop over that pool;
/// called from another thread, each op hands its loop to the pool and
/// sleeps until the loop is done, a wake-up per op. A caller that runs
/// many small ops in a row (a model's decode step: some 300) runs them
/// all through one `on_worker`, from a thread that takes part in each
/// loop. From a worker thread, `f` simply runs.
///
/// ```
/// use ferrocm_ops::{engine::cpu::on_worker, Device, Tensor};
/// let x = Tensor::from_slice(&[1.0f32, 2.0], &[2], &Device::Cpu)?;
/// let y = on_worker(|| x.affine(2.0, 1.0))?;
/// assert_eq!(y.to_vec()?, [3.0, 5.0]);
/// # Ok::<(), ferrocm_ops::Error>(())
/// ```
pub fn on_worker<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    rayon::scope(|_| f())
}

/// A loop the Cpu backend runs vectorised: [`vectorized`] compiles `run` a
/// second time for AVX2 + FMA. Implementations mark `run` (and every function
/// it calls per element) `#[inline(always)]` and call no closures in the hot
/// loop: a closure is a function of its own that LLVM may leave out of line
/// (it did, for the exp loop), and then it runs without AVX2 and calls
/// libm's `fmaf` per multiply-add.
pub trait Task {
    /// What the loop returns.
    type Out;
    /// The loop.
    fn run(self) -> Self::Out;
}

/// Runs `task` compiled for AVX2 and FMA when this CPU has them (checked by
/// std once and cached), else as built: the loops are vectorised 8 f32 wide
/// and the device layer's `fma` (in `exp`, `affine`) becomes one instruction.
#[inline(always)]
pub fn vectorized<T: Task>(task: T) -> T::Out {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU supports both features (checked just above).
        return unsafe { avx2_fma(task) };
    }
    task.run()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2_fma<T: Task>(task: T) -> T::Out {
    task.run()
}

/// The sum of an AVX register's eight f32 lanes, `((0 + 4) + (2 + 6)) + ((1
/// + 5) + (3 + 7))`: the reductions of the Cpu's matrix-vector products.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn hsum_f32(v: std::arch::x86_64::__m256) -> f32 {
    use std::arch::x86_64::*;
    let h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)))
}

/// An elementwise function of one value (implementations: `#[inline(always)]`).
pub trait Func1<S, D>: Sync {
    /// The function.
    fn call(&self, x: S) -> D;
}

/// An elementwise function of two values.
pub trait Func2<A, B, D>: Sync {
    /// The function.
    fn call(&self, a: A, b: B) -> D;
}

/// An elementwise function of three values.
pub trait Func3<M, A, B, D>: Sync {
    /// The function.
    fn call(&self, m: M, a: A, b: B) -> D;
}

/// A reduction of `X`s through an accumulator (implementations:
/// `#[inline(always)]`); `combine` must be associative up to rounding.
pub trait Fold<X>: Sync {
    /// The accumulator.
    type Acc: Copy + Send + Sync;
    /// The accumulator of no element.
    fn identity(&self) -> Self::Acc;
    /// One element as an accumulator.
    fn convert(&self, x: X) -> Self::Acc;
    /// Two accumulators as one.
    fn combine(&self, a: Self::Acc, b: Self::Acc) -> Self::Acc;
}

/// The storage offsets of `N` views of one shape, walked one run of the
/// innermost dim at a time. Adjacent dims that every view holds contiguously
/// together are merged first, so a contiguous view is one run per chunk and a
/// broadcast row is runs of whole rows.
pub(crate) struct Walk<const N: usize> {
    shape: Vec<usize>,
    strides: [Vec<usize>; N],
    bases: [usize; N],
}

impl<const N: usize> Walk<N> {
    /// The walk of `layouts`, which all have the shape of the first.
    pub(crate) fn new(layouts: [&Layout; N]) -> Self {
        let rank = layouts[0].rank();
        let mut shape: Vec<usize> = Vec::with_capacity(rank.max(1));
        let mut strides: [Vec<usize>; N] = std::array::from_fn(|_| Vec::new());
        for d in 0..rank {
            let n = layouts[0].shape()[d];
            if n == 1 {
                continue; // a size-1 dim moves nothing
            }
            let mergeable = !shape.is_empty()
                && (0..N).all(|k| {
                    let s = layouts[k].strides()[d];
                    strides[k].last() == Some(&(s * n))
                });
            if mergeable {
                *shape.last_mut().expect("not empty") *= n;
                for k in 0..N {
                    *strides[k].last_mut().expect("not empty") = layouts[k].strides()[d];
                }
            } else {
                shape.push(n);
                for k in 0..N {
                    strides[k].push(layouts[k].strides()[d]);
                }
            }
        }
        if shape.is_empty() {
            shape.push(1);
            for s in strides.iter_mut() {
                s.push(0);
            }
        }
        Self {
            shape,
            strides,
            bases: layouts.map(|l| l.offset()),
        }
    }

    /// The stride of each view along the innermost (merged) dim.
    pub(crate) fn inner_strides(&self) -> [usize; N] {
        std::array::from_fn(|k| *self.strides[k].last().expect("rank >= 1"))
    }

    /// The runs of elements `start..start + len` (logical order) along the
    /// innermost dim: each is `(pos, offsets, count)`, `pos` counting from
    /// `start`, `offsets` each view's storage offset of the run's first
    /// element; a run steps by [`Walk::inner_strides`].
    #[inline(always)]
    pub(crate) fn runs(&self, start: usize, len: usize) -> Runs<'_, N> {
        let r = self.shape.len();
        let w = self.shape[r - 1];
        let mut idx = vec![0; r - 1];
        if len == 0 || w == 0 {
            // Nothing to walk (an empty view has a dim of 0).
            return Runs {
                walk: self,
                idx,
                j: 0,
                pos: 0,
                len: 0,
            };
        }
        let (mut outer, j) = (start / w, start % w);
        for d in (0..r - 1).rev() {
            idx[d] = outer % self.shape[d];
            outer /= self.shape[d];
        }
        Runs {
            walk: self,
            idx,
            j,
            pos: 0,
            len,
        }
    }
}

/// The iterator of [`Walk::runs`].
pub(crate) struct Runs<'a, const N: usize> {
    walk: &'a Walk<N>,
    idx: Vec<usize>,
    j: usize,
    pos: usize,
    len: usize,
}

impl<const N: usize> Iterator for Runs<'_, N> {
    type Item = (usize, [usize; N], usize);

    #[inline(always)]
    fn next(&mut self) -> Option<Self::Item> {
        if self.pos >= self.len {
            return None;
        }
        let (shape, r) = (&self.walk.shape, self.walk.shape.len());
        let count = (shape[r - 1] - self.j).min(self.len - self.pos);
        let offsets = std::array::from_fn(|k| {
            let s = &self.walk.strides[k];
            let mut o = self.walk.bases[k] + self.j * s[r - 1];
            for (i, s) in self.idx.iter().zip(s) {
                o += i * s;
            }
            o
        });
        let item = (self.pos, offsets, count);
        self.pos += count;
        self.j = 0;
        for d in (0..r - 1).rev() {
            self.idx[d] += 1;
            if self.idx[d] < shape[d] {
                break;
            }
            self.idx[d] = 0;
        }
        Some(item)
    }
}

/// One chunk of an elementwise map: `dst` holds elements `start..` of the
/// output; `srcs` the inputs and `walk` their views.
struct MapChunk<'a, const N: usize, D, S, F> {
    walk: &'a Walk<N>,
    dst: &'a mut [D],
    start: usize,
    srcs: S,
    f: &'a F,
}

impl<D: Copy, X: Copy, F: Func1<X, D>> Task for MapChunk<'_, 1, D, &[X], F> {
    type Out = ();
    #[inline(always)]
    fn run(self) {
        let (src, f) = (self.srcs, self.f);
        let [s] = self.walk.inner_strides();
        for (pos, [o], n) in self.walk.runs(self.start, self.dst.len()) {
            let d = &mut self.dst[pos..pos + n];
            if s == 1 {
                for (d, x) in d.iter_mut().zip(&src[o..o + n]) {
                    *d = f.call(*x);
                }
            } else {
                for (k, d) in d.iter_mut().enumerate() {
                    *d = f.call(src[o + k * s]);
                }
            }
        }
    }
}

impl<D: Copy, A: Copy, B: Copy, F: Func2<A, B, D>> Task for MapChunk<'_, 2, D, (&[A], &[B]), F> {
    type Out = ();
    #[inline(always)]
    fn run(self) {
        let ((a, b), f) = (self.srcs, self.f);
        let [sa, sb] = self.walk.inner_strides();
        for (pos, [i, j], n) in self.walk.runs(self.start, self.dst.len()) {
            let d = &mut self.dst[pos..pos + n];
            match (sa, sb) {
                (1, 1) => {
                    for ((d, x), y) in d.iter_mut().zip(&a[i..i + n]).zip(&b[j..j + n]) {
                        *d = f.call(*x, *y);
                    }
                }
                (1, 0) => {
                    let y = b[j];
                    for (d, x) in d.iter_mut().zip(&a[i..i + n]) {
                        *d = f.call(*x, y);
                    }
                }
                (0, 1) => {
                    let x = a[i];
                    for (d, y) in d.iter_mut().zip(&b[j..j + n]) {
                        *d = f.call(x, *y);
                    }
                }
                _ => {
                    for (k, d) in d.iter_mut().enumerate() {
                        *d = f.call(a[i + k * sa], b[j + k * sb]);
                    }
                }
            }
        }
    }
}

impl<D: Copy, M: Copy, A: Copy, F: Func3<M, A, A, D>> Task
    for MapChunk<'_, 3, D, (&[M], &[A], &[A]), F>
{
    type Out = ();
    #[inline(always)]
    fn run(self) {
        let ((m, a, b), f) = (self.srcs, self.f);
        let strides = self.walk.inner_strides();
        for (pos, [h, i, j], n) in self.walk.runs(self.start, self.dst.len()) {
            let d = &mut self.dst[pos..pos + n];
            if strides == [1, 1, 1] {
                let it = d.iter_mut().zip(&m[h..h + n]);
                for (((d, c), x), y) in it.zip(&a[i..i + n]).zip(&b[j..j + n]) {
                    *d = f.call(*c, *x, *y);
                }
            } else {
                let [sm, sa, sb] = strides;
                for (k, d) in d.iter_mut().enumerate() {
                    *d = f.call(m[h + k * sm], a[i + k * sa], b[j + k * sb]);
                }
            }
        }
    }
}

/// Runs [`MapChunk`]s over `dst` in parallel: the one driver of the maps below.
fn map_chunks<const N: usize, D: Copy + Send, S: Copy + Send + Sync, F: Sync>(
    dst: &mut [D],
    layouts: [&Layout; N],
    srcs: S,
    f: &F,
) where
    for<'a> MapChunk<'a, N, D, S, F>: Task<Out = ()>,
{
    let walk = Walk::new(layouts);
    dst.par_chunks_mut(CHUNK).enumerate().for_each(|(c, dst)| {
        let (walk, start) = (&walk, c * CHUNK);
        vectorized(MapChunk {
            walk,
            dst,
            start,
            srcs,
            f,
        })
    });
}

/// `dst[i] = f(src[element i of layout])`, parallel and vectorised.
pub fn map1<X: Copy + Sync, D: Copy + Send>(
    dst: &mut [D],
    src: &[X],
    layout: &Layout,
    f: &impl Func1<X, D>,
) {
    map_chunks(dst, [layout], src, f);
}

/// `dst[i] = f(a[i], b[i])` over two views of the output's shape (broadcast
/// views have stride 0 where they repeat).
pub fn map2<A: Copy + Sync, B: Copy + Sync, D: Copy + Send>(
    dst: &mut [D],
    (a, la): (&[A], &Layout),
    (b, lb): (&[B], &Layout),
    f: &impl Func2<A, B, D>,
) {
    map_chunks(dst, [la, lb], (a, b), f);
}

/// `dst[i] = f(m[i], a[i], b[i])` over three views of the output's shape.
pub fn map3<M: Copy + Sync, A: Copy + Sync, D: Copy + Send>(
    dst: &mut [D],
    (m, lm): (&[M], &Layout),
    (a, la): (&[A], &Layout),
    (b, lb): (&[A], &Layout),
    f: &impl Func3<M, A, A, D>,
) {
    map_chunks(dst, [lm, la, lb], (m, a, b), f);
}

/// Copies the elements `start..start + len` (logical order) of `layout` into
/// `buf` (cleared first): a strided row made contiguous for [`fold`].
pub(crate) fn gather<T: Copy>(
    buf: &mut Vec<T>,
    src: &[T],
    walk: &Walk<1>,
    start: usize,
    len: usize,
) {
    buf.clear();
    let [s] = walk.inner_strides();
    for (_, [o], n) in walk.runs(start, len) {
        if s == 1 {
            buf.extend_from_slice(&src[o..o + n]);
        } else {
            buf.extend((0..n).map(|k| src[o + k * s]));
        }
    }
}

/// Lanes of [`fold`]: 32 independent accumulators (four AVX2 registers of
/// f32) hide the latency of the combine.
const LANES: usize = 32;
/// Elements of one block of [`fold`]: below this, lanes; above, halves.
const FOLD_BLOCK: usize = 32 * LANES;

/// Folds `xs` with `r`, pairwise: blocks of [`FOLD_BLOCK`] elements go into
/// 32 lanes (32 elements each) combined as a tree, and blocks are combined by
/// recursive halving. A float sum of n elements then rounds about 32 + 5 +
/// log2(n / 1024) times along any path instead of n times (1M elements: 47),
/// so its error stays near 1e-7 relative where a running sum drifts to 1e-4
/// (NumPy sums the same way). Call it inside a [`Task`].
#[inline(always)]
pub fn fold<X: Copy, R: Fold<X>>(xs: &[X], r: &R) -> R::Acc {
    if xs.len() <= FOLD_BLOCK {
        let mut lanes = [r.identity(); LANES];
        if size_of::<X>() < size_of::<R::Acc>() && xs.len() >= 4 * LANES {
            // Widened first, in a loop of its own: f16/bf16 widen 8 at a
            // time there, where inside the lane loop they did not vectorise
            // (bf16 sums ran at a third of f32's bandwidth). Short rows skip
            // it (the block's initialisation would cost more than it saves).
            let mut block = [r.identity(); FOLD_BLOCK];
            let block = &mut block[..xs.len()];
            for (b, x) in block.iter_mut().zip(xs) {
                *b = r.convert(*x);
            }
            fold_lanes(&mut lanes, block, &|x| x, &|a, b| r.combine(a, b));
        } else {
            fold_lanes(&mut lanes, xs, &|x| r.convert(x), &|a, b| r.combine(a, b));
        }
        let mut width = LANES / 2;
        while width > 0 {
            for k in 0..width {
                lanes[k] = r.combine(lanes[k], lanes[k + width]);
            }
            width /= 2;
        }
        lanes[0]
    } else {
        let mid = (xs.len() / FOLD_BLOCK / 2).max(1) * FOLD_BLOCK;
        let (lo, hi) = xs.split_at(mid);
        r.combine(fold_call(lo, r), fold_call(hi, r))
    }
}

/// `lanes[k] = combine(lanes[k], convert(x))` for the elements `x` of `xs`
/// that fall in lane `k`.
#[inline(always)]
fn fold_lanes<X: Copy, A: Copy>(
    lanes: &mut [A; LANES],
    xs: &[X],
    convert: &impl Fn(X) -> A,
    combine: &impl Fn(A, A) -> A,
) {
    let (chunks, rest) = xs.as_chunks::<LANES>();
    for c in chunks {
        for (l, x) in lanes.iter_mut().zip(c) {
            *l = combine(*l, convert(*x));
        }
    }
    for (l, x) in lanes.iter_mut().zip(rest) {
        *l = combine(*l, convert(*x));
    }
}

/// [`fold`] as a vectorised call (recursion cannot be inlined).
fn fold_call<X: Copy, R: Fold<X>>(xs: &[X], r: &R) -> R::Acc {
    struct F<'a, X, R>(&'a [X], &'a R);
    impl<X: Copy, R: Fold<X>> Task for F<'_, X, R> {
        type Out = R::Acc;
        #[inline(always)]
        fn run(self) -> R::Acc {
            fold(self.0, self.1)
        }
    }
    vectorized(F(xs, r))
}

/// Folds the columns of the contiguous `rows × cols` matrix `src` (the
/// reduced dims lead: `sum(&[0])`) into `out[c] = finish(fold of column c)`,
/// pairwise over rows: blocks of 64 rows are read as they lie in memory
/// (streaming, each row combined into a row of accumulators, vectorised
/// along it), and blocks combine by halving, the halves in parallel
/// (`rayon::join`: the tree, so the result, is the same every run).
pub(crate) fn fold_columns<X: Copy + Sync, O: Copy + Send, R: Fold<X>>(
    out: &mut [O],
    src: &[X],
    rows: usize,
    r: &R,
    finish: impl Fn(R::Acc) -> O + Sync,
) {
    let acc = fold_rows(src, out.len(), 0..rows, r);
    out.par_chunks_mut(CHUNK)
        .zip(acc.par_chunks(CHUNK))
        .for_each(|(o, a)| {
            for (o, a) in o.iter_mut().zip(a) {
                *o = finish(*a);
            }
        });
}

/// Rows `rows` of the `cols`-wide matrix `src`, folded per column.
fn fold_rows<X: Copy + Sync, R: Fold<X>>(
    src: &[X],
    cols: usize,
    rows: std::ops::Range<usize>,
    r: &R,
) -> Vec<R::Acc> {
    struct Leaf<'a, X, R: Fold<X>> {
        acc: &'a mut [R::Acc],
        src: &'a [X],
        cols: usize,
        c0: usize,
        rows: std::ops::Range<usize>,
        r: &'a R,
    }
    impl<X: Copy, R: Fold<X>> Task for Leaf<'_, X, R> {
        type Out = ();
        #[inline(always)]
        fn run(self) {
            let (w, c0, r) = (self.acc.len(), self.c0, self.r);
            // Narrow types are widened a row at a time first (see `fold`).
            let mut wide = Vec::new();
            for row in self.rows {
                let row = &self.src[row * self.cols + c0..row * self.cols + c0 + w];
                if size_of::<X>() < size_of::<R::Acc>() {
                    wide.clear();
                    wide.extend(row.iter().map(|x| r.convert(*x)));
                    for (a, x) in self.acc.iter_mut().zip(&wide) {
                        *a = r.combine(*a, *x);
                    }
                } else {
                    for (a, x) in self.acc.iter_mut().zip(row) {
                        *a = r.combine(*a, r.convert(*x));
                    }
                }
            }
        }
    }
    struct Merge<'a, X, R: Fold<X>>(&'a mut [R::Acc], &'a [R::Acc], &'a R, PhantomData<X>);
    impl<X, R: Fold<X>> Task for Merge<'_, X, R> {
        type Out = ();
        #[inline(always)]
        fn run(self) {
            for (a, u) in self.0.iter_mut().zip(self.1) {
                *a = self.2.combine(*a, *u);
            }
        }
    }
    if rows.len() <= 64 {
        // Few rows of many columns: the columns in parallel slabs.
        let mut acc = vec![r.identity(); cols];
        acc.par_chunks_mut(CHUNK).enumerate().for_each(|(s, acc)| {
            let c0 = s * CHUNK;
            let rows = rows.clone();
            vectorized(Leaf {
                acc,
                src,
                cols,
                c0,
                rows,
                r,
            })
        });
        acc
    } else {
        let mid = rows.start + rows.len() / 2;
        let (mut lo, hi) = rayon::join(
            || fold_rows(src, cols, rows.start..mid, r),
            || fold_rows(src, cols, mid..rows.end, r),
        );
        vectorized(Merge(&mut lo, &hi, r, PhantomData));
        lo
    }
}

/// `out` = the `rows × cols` matrices of `src` (contiguous, one after the
/// other) transposed, in 32 x 32 tiles: each tile's 32 source rows stay in
/// cache while its columns are written out as rows. Parallel over matrices
/// and over 32-row strips of each output matrix.
pub(crate) fn transpose<T: Copy + Send + Sync>(out: &mut [T], src: &[T], rows: usize, cols: usize) {
    const TILE: usize = 32;
    let size = rows * cols;
    if size == 0 {
        return;
    }
    out.par_chunks_mut(size)
        .zip(src.par_chunks(size))
        .for_each(|(out, src)| {
            // Output strip s holds output rows (source columns) s*TILE.. .
            out.par_chunks_mut(TILE * rows)
                .enumerate()
                .for_each(|(s, strip)| {
                    let c0 = s * TILE;
                    let tc = strip.len() / rows;
                    // The tile's source rows are copied into a local block
                    // (whole-row reads), then written out column by column
                    // from there: the strided reads stay inside 4 KiB.
                    let mut tile = [[src[0]; TILE]; TILE];
                    for r0 in (0..rows).step_by(TILE) {
                        let tr = TILE.min(rows - r0);
                        for (r, t) in tile.iter_mut().enumerate().take(tr) {
                            let at = (r0 + r) * cols + c0;
                            t[..tc].copy_from_slice(&src[at..at + tc]);
                        }
                        for c in 0..tc {
                            let dst = &mut strip[c * rows + r0..c * rows + r0 + tr];
                            for (d, t) in dst.iter_mut().zip(&tile) {
                                *d = t[c];
                            }
                        }
                    }
                })
        });
}
