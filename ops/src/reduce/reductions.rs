//! Reductions over any set of dims (sum, mean, max, min, argmax, argmin) and
//! softmax / log_softmax over the last dim: API, Cpu implementation, GPU dispatch.
//!
//! Reduced dims are permuted last (a view), so every reduction is over rows
//! of `cols` elements in logical order; the kernels read that view through its
//! strides.

use crate::core::dim::{Dim, Dims};
use crate::core::dtype::WithDType;
use crate::core::error::{Error, Result};
use crate::core::tensor::{BLOCK, Tensor};
use crate::engine::kernels::Strided;
use crate::engine::{self, Op};
use ferrocm_host::{Device, DeviceBuffer, In, LaunchConfig, Out};
use ferrocm_kernels::elem::Elem;
use ferrocm_kernels::host::KernelRef;
use ferrocm_kernels::math;
use ferrocm_kernels::reduce::{
    self as k, COL_BLOCK, REDUCE_LDS_BYTES, ReduceArgs, ReduceKernel, ReduceKernels, ReduceOp,
};
use rayon::prelude::*;
use std::marker::PhantomData;

/// A value reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Reduce {
    /// Sum (f16/bf16 accumulate in f32, integers wrap).
    Sum,
    /// Mean (float dtypes).
    Mean,
    /// Maximum (NaN when the reduced slice holds a NaN, as PyTorch).
    Max,
    /// Minimum (NaN when the reduced slice holds a NaN).
    Min,
    /// Product (f16/bf16 multiply in f32, integers wrap; 1 over no elements).
    Prod,
}

impl Reduce {
    /// Every value reduction.
    pub const ALL: &'static [Reduce] = &[
        Reduce::Sum,
        Reduce::Mean,
        Reduce::Max,
        Reduce::Min,
        Reduce::Prod,
    ];

    /// The op's name.
    pub fn name(self) -> &'static str {
        match self {
            Reduce::Sum => "sum",
            Reduce::Mean => "mean",
            Reduce::Max => "max",
            Reduce::Min => "min",
            Reduce::Prod => "prod",
        }
    }
}

/// Rows × cols view of `t` with `dims` reduced, and the output shape.
fn plan<T: WithDType>(
    op: &'static str,
    t: &Tensor<T>,
    dims: &[usize],
    keepdim: bool,
) -> Result<(Tensor<T>, usize, usize, Vec<usize>)> {
    let rank = t.rank();
    let mut seen = vec![false; rank];
    for &d in dims {
        if std::mem::replace(&mut seen[d], true) {
            return Err(Error::DuplicateDim {
                op,
                dim: d,
                dims: dims.to_vec(),
            });
        }
    }
    let kept: Vec<usize> = (0..rank).filter(|d| !seen[*d]).collect();
    let mut perm = kept.clone();
    perm.extend((0..rank).filter(|d| seen[*d]));
    let view = t.permute(&perm)?;
    let rows: usize = kept.iter().map(|&d| t.shape()[d]).product();
    let cols: usize = dims.iter().map(|&d| t.shape()[d]).product();
    let out_shape = if keepdim {
        (0..rank)
            .map(|d| if seen[d] { 1 } else { t.shape()[d] })
            .collect()
    } else {
        kept.iter().map(|&d| t.shape()[d]).collect()
    };
    Ok((view, rows, cols, out_shape))
}

/// The workgroup size of a row reduction (`reduce_*`, `reduce_arg*`) over
/// rows of `cols` elements of `elem_bytes`: the power of two from 64 to 256
/// workitems that gives each at least four 16-byte words where the row has
/// them (four to eight: a pass of four in flight, a second pass or a tail).
/// The per-row tail (wave shuffles, one LDS slot per wave, two barriers) is
/// paid once per workitem's share of the row, so rows of 4096 f32 ran faster
/// on 128 workitems than on 256 (argmax on an H200: 4168 -> 4294 GB/s; ncu:
/// 48 M -> 21 M instructions at 64). Longer rows keep 256, the size every
/// row reduction had before: the kernels carry no launch bound, so a larger
/// workgroup than a kernel's registers allow would be refused at launch.
fn row_block(cols: usize, elem_bytes: usize) -> u32 {
    let words = cols.saturating_mul(elem_bytes).div_ceil(16) as u64;
    words.div_ceil(8).next_power_of_two().clamp(64, 256) as u32
}

/// Launches a row kernel `(out, inp, rows, cols, ndim, layout)` with one
/// workgroup of [`row_block`] per row over `view` (logically `rows × cols`).
fn launch_rows<T: WithDType, O: bytemuck::Pod>(
    dev: &Device,
    kernel: KernelRef<ReduceArgs<T::Kernel, O>>,
    view: &Tensor<T>,
    out: &DeviceBuffer<O>,
    rows: usize,
    cols: usize,
) -> Result<()> {
    let block = row_block(cols, size_of::<T>());
    if rows == 0 {
        return Ok(());
    }
    let s = Strided::in_memory(dev, view.shape(), [&view.layout])?;
    dev.launch_typed(
        kernel,
        LaunchConfig::rows(rows as u64, block, REDUCE_LDS_BYTES),
        (
            Out::new(out),
            view.input(),
            rows as u64,
            cols as u64,
            s.ndim(),
            s.arg(),
        ),
    )?;
    Ok(())
}

/// A value reduction `R` of `view` (rows × cols, reduced dims last) into one value per row.
struct RowReduce<'a, T: WithDType, R> {
    name: &'static str,
    view: &'a Tensor<T>,
    cols: usize,
    out: DeviceBuffer<T>,
    _op: PhantomData<R>,
}

impl<T: WithDType, R: ReduceKernel> Op for RowReduce<'_, T, R> {
    type Output = DeviceBuffer<T>;

    fn cpu(mut self) -> Result<DeviceBuffer<T>> {
        let (src, cols, view) = (
            crate::engine::cpu::host(self.view.buf()),
            self.cols,
            self.view,
        );
        let out = crate::engine::cpu::host_mut(&mut self.out);
        let r = ReduceFold::<T, R>(PhantomData);
        let finish = |a: Acc<T>| T::from_kernel(R::finish(a, cols as u64).convert());
        let rows = out.len();
        if rows > 1 && cols > 1 && reduces_leading_dims(view, rows, cols) {
            // `cols` reduced rows of `rows` kept elements each.
            let off = view.layout.offset();
            let src = &src[off..off + rows * cols];
            crate::engine::cpu::fold_columns(out, src, cols, &r, finish);
            return Ok(self.out);
        }
        for_each_row(out, src, view, cols, |o, row| {
            *o = finish(crate::engine::cpu::vectorized(FoldRow(row, &r)))
        });
        Ok(self.out)
    }

    fn kernels(self, dev: &Device) -> Result<DeviceBuffer<T>> {
        let unsupported = Error::UnsupportedDType {
            op: self.name,
            dtype: T::DTYPE,
        };
        let out = self.out.view_as::<T::Kernel>().expect("same size");
        let rows = out.len();
        // (The column kernel takes a column a workitem in one grid, and AMD
        // caps a grid's x at 2^32 workitems: more columns take the row
        // kernel, which loops.)
        let one_grid = rows as u64 <= u64::from(u32::MAX - COL_BLOCK);
        if rows > 1 && self.cols > 1 && one_grid && reduces_leading_dims(self.view, rows, self.cols)
        {
            // Memory holds `cols` reduced rows of `rows` kept elements: reduce
            // columns, coalesced (the row kernel would stride by a whole row).
            let kernel = T::Kernel::reduce_cols::<R>().ok_or(unsupported)?;
            let (tiles, depth) = ((rows as u64).div_ceil(COL_BLOCK as u64), self.cols as u64);
            let (chunk, splits) = col_splits(tiles, depth, dev.gpu_info().map(|i| i.compute_units));
            let part = match splits {
                1 => None,
                _ => Some(dev.alloc::<u64>(splits as usize * rows)?),
            };
            let launch = |block: u32, splits: u64| LaunchConfig {
                grid: [
                    (rows as u64).div_ceil(block as u64) as u32,
                    splits as u32,
                    1,
                ],
                block: [block, 1, 1],
                lds_bytes: 0,
                early_start: false,
            };
            let part_arg = || part.as_ref().map(Out::new).unwrap_or_else(Out::null);
            let view = self.view.input();
            let args = (Out::new(out), part_arg(), view, depth, rows as u64, chunk);
            dev.launch_typed(kernel, launch(COL_BLOCK, splits), args)?;
            if part.is_some() {
                // The partials combined in split order (`inp` null).
                let out = self.out.view_as::<T::Kernel>().expect("same size");
                let args = (
                    Out::new(out),
                    part_arg(),
                    In::null(),
                    depth,
                    rows as u64,
                    splits,
                );
                // Workgroups of 64: four times the compute units the
                // first pass's tiles would use.
                dev.launch_typed(kernel, launch(64, 1), args)?;
            }
            return Ok(self.out);
        }
        let kernel = T::Kernel::reduce::<R>().ok_or(unsupported)?;
        launch_rows(dev, kernel, self.view, out, rows, self.cols)?;
        Ok(self.out)
    }
}

/// Rows per split and splits of a column reduction (`reduce_cols_*`) with
/// `tiles` workgroups of columns over `depth` reduced rows: enough splits
/// for eight workgroups a compute unit (the emulator: eight in all), 64
/// rows a split or more on average, at most 65535 (the grid's y limit). Returns
/// `(chunk, splits)` with `splits * chunk >= depth`.
fn col_splits(tiles: u64, depth: u64, compute_units: Option<u32>) -> (u64, u64) {
    let target = compute_units.map_or(8, |cus| 8 * cus as u64);
    let splits = target
        .div_ceil(tiles.max(1))
        .clamp(1, (depth / 64).clamp(1, 65535));
    let chunk = depth.div_ceil(splits).max(1);
    (chunk, depth.div_ceil(chunk).max(1))
}

/// Whether `view` (logically `rows × cols`: kept dims, then reduced dims)
/// lies in memory as a contiguous `cols × rows` matrix: the reduced dims of a
/// contiguous tensor were its leading dims (`sum(&[0])`, a mean over a batch).
///
/// ```ignore
/// // [4, 3] reduced over dim 0: the view is [3, 4] with strides [1, 3].
/// assert!(reduces_leading_dims(&x.permute(&[1, 0])?, 3, 4));
/// ```
fn reduces_leading_dims<T: WithDType>(view: &Tensor<T>, rows: usize, cols: usize) -> bool {
    let (shape, strides) = (view.shape(), view.layout.strides());
    // The split between kept and reduced dims: the first where the trailing
    // product is `cols` (size-1 dims on either side do not matter).
    let mut split = shape.len();
    let mut trailing = 1;
    while split > 0 && trailing < cols {
        split -= 1;
        trailing *= shape[split];
    }
    if trailing != cols || shape[..split].iter().product::<usize>() != rows {
        return false;
    }
    let mut expected = 1;
    for d in (0..split).rev().chain((split..shape.len()).rev()) {
        if shape[d] != 1 && strides[d] != expected {
            return false;
        }
        expected *= shape[d];
    }
    true
}

/// The reduction accumulator of `T` (f32 for float types, i64 for integers).
type Acc<T> = <<T as WithDType>::Kernel as Elem>::Acc;

/// Calls `f(out[r], row r)` for each row of `view` (logically `out.len() ×
/// cols`, reduced dims last), parallel over groups of rows; a strided row is
/// gathered into a per-task buffer first, so `f` always sees a slice.
fn for_each_row<T: WithDType, O: Send>(
    out: &mut [O],
    src: &[T],
    view: &Tensor<T>,
    cols: usize,
    f: impl Fn(&mut O, &[T]) + Sync,
) {
    let rows_per_task = (1 << 14) / cols.max(1) + 1;
    let contiguous = view.layout.is_contiguous();
    let (walk, off) = (
        crate::engine::cpu::Walk::new([&view.layout]),
        view.layout.offset(),
    );
    out.par_chunks_mut(rows_per_task)
        .enumerate()
        .for_each_init(Vec::new, |buf, (t, o)| {
            for (k, o) in o.iter_mut().enumerate() {
                let r = t * rows_per_task + k;
                if contiguous {
                    f(o, &src[off + r * cols..off + (r + 1) * cols]);
                } else {
                    crate::engine::cpu::gather(buf, src, &walk, r * cols, cols);
                    f(o, buf);
                }
            }
        });
}

/// Reduction `R` of `T` on the Cpu: [`ReduceOp`]'s identity and combine in
/// `T`'s accumulator.
struct ReduceFold<T, R>(PhantomData<fn() -> (T, R)>);

impl<T: WithDType, R: ReduceOp> crate::engine::cpu::Fold<T> for ReduceFold<T, R> {
    type Acc = Acc<T>;
    #[inline(always)]
    fn identity(&self) -> Acc<T> {
        R::identity()
    }
    #[inline(always)]
    fn convert(&self, x: T) -> Acc<T> {
        x.to_kernel().convert()
    }
    #[inline(always)]
    fn combine(&self, a: Acc<T>, b: Acc<T>) -> Acc<T> {
        R::combine(a, b)
    }
}

/// One row folded (pairwise, vectorised).
struct FoldRow<'a, T, F>(&'a [T], &'a F);

impl<T: Copy, F: crate::engine::cpu::Fold<T>> crate::engine::cpu::Task for FoldRow<'_, T, F> {
    type Out = F::Acc;
    #[inline(always)]
    fn run(self) -> F::Acc {
        crate::engine::cpu::fold(self.0, self.1)
    }
}

/// argmax (`MIN = false`) or argmin of one row: the extreme value first
/// (vectorised; NaN wins, as in max/min), then the first index holding it
/// (PyTorch's rule: the first NaN, else the first of equal extremes).
struct ArgRow<'a, T, const MIN: bool>(&'a [T]);

impl<T: WithDType, const MIN: bool> crate::engine::cpu::Task for ArgRow<'_, T, MIN> {
    type Out = u32;
    #[inline(always)]
    fn run(self) -> u32 {
        let row = self.0;
        let best = if MIN {
            crate::engine::cpu::fold(row, &ReduceFold::<T, k::Min>(PhantomData))
        } else {
            crate::engine::cpu::fold(row, &ReduceFold::<T, k::Max>(PhantomData))
        };
        let acc = |x: &T| x.to_kernel().convert::<Acc<T>>();
        let at = if best.is_nan() {
            row.iter().position(|x| acc(x).is_nan())
        } else {
            row.iter().position(|x| acc(x).eq(best))
        };
        at.unwrap_or(0) as u32
    }
}

/// softmax / log_softmax of one row on the Cpu: the maximum (NaN-propagating:
/// a NaN anywhere makes every output NaN; a row of -inf gives NaN too, as on
/// the GPU), e^(x - max) into `exps`, their pairwise sum, then the outputs.
struct SoftmaxRow<'a, T, const LOG: bool> {
    x: &'a [T],
    out: &'a mut [T],
    exps: &'a mut Vec<f32>,
}

/// f32 sum for [`crate::engine::cpu::fold`].
struct SumF32;

impl crate::engine::cpu::Fold<f32> for SumF32 {
    type Acc = f32;
    #[inline(always)]
    fn identity(&self) -> f32 {
        0.0
    }
    #[inline(always)]
    fn convert(&self, x: f32) -> f32 {
        x
    }
    #[inline(always)]
    fn combine(&self, a: f32, b: f32) -> f32 {
        a + b
    }
}

impl<T: WithDType, const LOG: bool> crate::engine::cpu::Task for SoftmaxRow<'_, T, LOG> {
    type Out = ();
    #[inline(always)]
    fn run(self) {
        let m = crate::engine::cpu::fold(self.x, &ReduceFold::<T, k::Max>(PhantomData)).to_f32();
        let f = |x: &T| x.to_kernel().to_f32();
        self.exps.clear();
        self.exps.resize(self.x.len(), 0.0);
        for (e, x) in self.exps.iter_mut().zip(self.x) {
            *e = math::exp(f(x) - m);
        }
        let sum = crate::engine::cpu::fold(self.exps, &SumF32);
        if LOG {
            let log_sum = math::log(sum);
            for (o, x) in self.out.iter_mut().zip(self.x) {
                *o = T::from_kernel(T::Kernel::from_f32(f(x) - m - log_sum));
            }
        } else {
            for (o, e) in self.out.iter_mut().zip(self.exps.iter()) {
                *o = T::from_kernel(T::Kernel::from_f32(e / sum));
            }
        }
    }
}

/// argmax (`MIN = false`) or argmin of each row.
struct ArgReduce<'a, T: WithDType, const MIN: bool> {
    view: &'a Tensor<T>,
    cols: usize,
    out: DeviceBuffer<u32>,
}

impl<T: WithDType, const MIN: bool> Op for ArgReduce<'_, T, MIN> {
    type Output = DeviceBuffer<u32>;

    fn cpu(mut self) -> Result<DeviceBuffer<u32>> {
        let (src, cols, view) = (
            crate::engine::cpu::host(self.view.buf()),
            self.cols,
            self.view,
        );
        for_each_row(
            crate::engine::cpu::host_mut(&mut self.out),
            src,
            view,
            cols,
            |o, row| *o = crate::engine::cpu::vectorized(ArgRow::<T, MIN>(row)),
        );
        Ok(self.out)
    }

    fn kernels(self, dev: &Device) -> Result<DeviceBuffer<u32>> {
        let kernel = if MIN {
            T::Kernel::ARGMIN
        } else {
            T::Kernel::ARGMAX
        };
        launch_rows(dev, kernel, self.view, &self.out, self.out.len(), self.cols)?;
        Ok(self.out)
    }
}

/// The workgroup size of a softmax over rows of `cols`. Rows the kernel holds
/// in registers (`softmax_holds_rows`: whole 16-byte words, up to 16384 f32
/// or 32768 f16/bf16 elements at 1024 workitems, a vocabulary's logits in
/// 16-bit form) get the smallest power of two from 64 that holds them: a
/// workgroup's time goes mostly to waiting for its row, so the more rows in
/// flight per multiprocessor the better (bf16 rows of 4096 on 256 workitems
/// ran at 61% of the H100's copy bandwidth). Other rows: [`BLOCK`].
fn softmax_block<K>(cols: u64) -> u32 {
    use ferrocm_kernels::reduce::reductions::SOFTMAX_HELD_WORDS;
    let per = (16 / size_of::<K>()) as u64;
    let words = cols / per;
    let held = SOFTMAX_HELD_WORDS as u64;
    if cols.is_multiple_of(per) && words <= held * 1024 {
        words.div_ceil(held).next_power_of_two().max(64) as u32
    } else {
        BLOCK
    }
}

/// softmax (`LOG = false`) or log_softmax over the rows of a contiguous `x`.
struct Softmax<'a, T: WithDType, const LOG: bool> {
    x: &'a Tensor<T>,
    rows: usize,
    cols: usize,
    out: DeviceBuffer<T>,
}

impl<T: WithDType, const LOG: bool> Op for Softmax<'_, T, LOG> {
    type Output = DeviceBuffer<T>;

    fn cpu(mut self) -> Result<DeviceBuffer<T>> {
        let (rows, cols, off) = (self.rows, self.cols, self.x.layout.offset());
        if rows == 0 || cols == 0 {
            return Ok(self.out);
        }
        let src = &crate::engine::cpu::host(self.x.buf())[off..off + rows * cols];
        crate::engine::cpu::host_mut(&mut self.out)
            .par_chunks_mut(cols)
            .zip(src.par_chunks(cols))
            .for_each_init(Vec::new, |exps, (out, x)| {
                crate::engine::cpu::vectorized(SoftmaxRow::<T, LOG> { x, out, exps })
            });
        Ok(self.out)
    }

    fn kernels(self, dev: &Device) -> Result<DeviceBuffer<T>> {
        let op = if LOG { "log_softmax" } else { "softmax" };
        let kernel = if LOG {
            T::Kernel::LOG_SOFTMAX
        } else {
            T::Kernel::SOFTMAX
        }
        .ok_or(Error::UnsupportedDType {
            op,
            dtype: T::DTYPE,
        })?;
        if self.rows > 0 {
            let out = self.out.view_as::<T::Kernel>().expect("same size");
            dev.launch_typed(
                kernel,
                LaunchConfig::rows(
                    self.rows as u64,
                    softmax_block::<T::Kernel>(self.cols as u64),
                    REDUCE_LDS_BYTES,
                ),
                (
                    Out::new(out),
                    self.x.input(),
                    self.rows as u64,
                    self.cols as u64,
                ),
            )?;
        }
        Ok(self.out)
    }
}

impl<T: WithDType> Tensor<T> {
    /// Reduces `dims` with `op`; `keepdim` keeps them as size-1 dims.
    ///
    /// ```
    /// # use ferrocm_ops::WaveSize;
    /// use ferrocm_ops::{Device, Reduce, Tensor};
    /// let x = Tensor::from_slice(&[1.0f32, 5.0, 3.0, 2.0], &[2, 2], &Device::emulator(WaveSize::Wave32))?;
    /// assert_eq!(x.reduce(Reduce::Max, &[0], false)?.to_vec()?, vec![3.0, 5.0]);
    /// assert_eq!(x.reduce(Reduce::Sum, &[0, 1], true)?.shape(), &[1, 1]);
    /// assert_eq!(x.reduce(Reduce::Min, &[-1], false)?.to_vec()?, vec![1.0, 2.0]); // -1: the last dim
    /// assert!(x.reduce(Reduce::Sum, &[0, 0], false).is_err()); // dim given twice
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::DimOutOfRange`] for a dim outside `-rank..rank`;
    /// [`Error::DuplicateDim`] for a dim given twice;
    /// [`Error::UnsupportedDType`] for [`Reduce::Mean`] of an integer dtype;
    /// [`Error::EmptyReduction`] for [`Reduce::Max`] / [`Reduce::Min`] over an
    /// empty dim (when other elements remain); [`Error::TooLarge`] when the
    /// output's byte size overflows; [`Error::Host`] when allocation or the
    /// launch fails.
    pub fn reduce(&self, op: Reduce, dims: impl Dims, keepdim: bool) -> Result<Self> {
        let dims = &dims.resolve(op.name(), self.shape())?[..];
        if op == Reduce::Mean && !T::DTYPE.is_float() {
            return Err(Error::UnsupportedDType {
                op: "mean",
                dtype: T::DTYPE,
            });
        }
        let (view, rows, cols, out_shape) = plan(op.name(), self, dims, keepdim)?;
        if cols == 0 && rows > 0 && matches!(op, Reduce::Max | Reduce::Min) {
            return Err(Error::EmptyReduction {
                op: op.name(),
                shape: self.shape().to_vec(),
                dims: dims.to_vec(),
            });
        }
        let dev = self.device();
        crate::core::layout::checked_count(op.name(), &out_shape, size_of::<T>())?;
        if cols == 1 {
            // Every reduced dim has size 1 (or none is reduced): each output
            // is its one input, exactly, in the same order. No launch of one
            // workgroup per element.
            return self.contiguous()?.reshape(&out_shape);
        }
        let out = dev.alloc::<T>(rows)?;
        let out = match op {
            Reduce::Sum => self.row_reduce::<k::Sum>(dev, op, &view, cols, out),
            Reduce::Mean => self.row_reduce::<k::Mean>(dev, op, &view, cols, out),
            Reduce::Max => self.row_reduce::<k::Max>(dev, op, &view, cols, out),
            Reduce::Min => self.row_reduce::<k::Min>(dev, op, &view, cols, out),
            Reduce::Prod => self.row_reduce::<k::Prod>(dev, op, &view, cols, out),
        }?;
        Ok(Tensor::from_parts(out, &out_shape))
    }

    fn row_reduce<R: ReduceKernel>(
        &self,
        dev: &Device,
        op: Reduce,
        view: &Tensor<T>,
        cols: usize,
        out: DeviceBuffer<T>,
    ) -> Result<DeviceBuffer<T>> {
        let op = RowReduce::<T, R> {
            name: op.name(),
            view,
            cols,
            out,
            _op: PhantomData,
        };
        engine::run(dev, op)
    }

    /// Sum over `dims` (f16/bf16 accumulate in f32; integers wrap).
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3], &Device::Cpu)?;
    /// assert_eq!(x.sum(&[-1], false)?.to_vec()?, vec![6.0, 15.0]);
    /// let s = x.sum(&[0], true)?;
    /// assert_eq!(s.shape(), &[1, 3]);
    /// assert_eq!(s.to_vec()?, vec![5.0, 7.0, 9.0]);
    /// let b = Tensor::from_slice(&[200u8, 100], &[2], &Device::Cpu)?;
    /// assert_eq!(b.sum(&[0], false)?.to_vec()?, vec![44]); // 300 wraps to 300 - 256
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::DimOutOfRange`], [`Error::DuplicateDim`], [`Error::TooLarge`]
    /// and [`Error::Host`], as [`Tensor::reduce`].
    pub fn sum(&self, dims: impl Dims, keepdim: bool) -> Result<Self> {
        self.reduce(Reduce::Sum, dims, keepdim)
    }

    /// Mean over `dims` (float dtypes).
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3], &Device::Cpu)?;
    /// assert_eq!(x.mean(&[-1], false)?.to_vec()?, vec![2.0, 5.0]);
    /// let m = x.mean(&[0, 1], true)?;
    /// assert_eq!(m.shape(), &[1, 1]);
    /// assert_eq!(m.to_vec()?, vec![3.5]);
    /// assert!(Tensor::<u32>::zeros(&[2], &Device::Cpu)?.mean(&[0], false).is_err());
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::UnsupportedDType`] for integer dtypes; otherwise as
    /// [`Tensor::sum`] ([`Error::DimOutOfRange`], [`Error::DuplicateDim`],
    /// [`Error::TooLarge`], [`Error::Host`]).
    pub fn mean(&self, dims: impl Dims, keepdim: bool) -> Result<Self> {
        self.reduce(Reduce::Mean, dims, keepdim)
    }

    /// Maximum over `dims` (NaN when the reduced slice holds a NaN).
    ///
    /// ```
    /// use ferrocm_ops::{Device, Error, Tensor};
    /// let x = Tensor::from_slice(&[1.0f32, 5.0, 3.0, 4.0, 2.0, 6.0], &[2, 3], &Device::Cpu)?;
    /// assert_eq!(x.max(&[-1], false)?.to_vec()?, vec![5.0, 6.0]);
    /// assert_eq!(x.max(&[0], false)?.to_vec()?, vec![4.0, 5.0, 6.0]);
    /// let empty = Tensor::<f32>::zeros(&[2, 0], &Device::Cpu)?;
    /// assert!(matches!(empty.max(&[1], false), Err(Error::EmptyReduction { .. })));
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::EmptyReduction`] over an empty dim (when other elements
    /// remain); otherwise as [`Tensor::sum`] ([`Error::DimOutOfRange`],
    /// [`Error::DuplicateDim`], [`Error::TooLarge`], [`Error::Host`]).
    pub fn max(&self, dims: impl Dims, keepdim: bool) -> Result<Self> {
        self.reduce(Reduce::Max, dims, keepdim)
    }

    /// Product over `dims` (PyTorch's `prod`, several dims at once): f16 and
    /// bf16 multiply in f32, integers wrap in their own type (PyTorch widens
    /// them to i64 first: cast before for that), 1 over no elements.
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3], &Device::Cpu)?;
    /// assert_eq!(x.prod(&[-1], false)?.to_vec()?, vec![6.0, 120.0]);
    /// assert_eq!(x.prod(&[0, 1], false)?.to_vec()?, vec![720.0]);
    /// let b = Tensor::from_slice(&[16u8, 17], &[2], &Device::Cpu)?;
    /// assert_eq!(b.prod(&[0], false)?.to_vec()?, vec![16]); // 272 wraps to 272 - 256
    /// let e = Tensor::<f32>::zeros(&[2, 0], &Device::Cpu)?;
    /// assert_eq!(e.prod(&[1], false)?.to_vec()?, vec![1.0, 1.0]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::DimOutOfRange`], [`Error::DuplicateDim`], [`Error::TooLarge`]
    /// and [`Error::Host`], as [`Tensor::reduce`].
    pub fn prod(&self, dims: impl Dims, keepdim: bool) -> Result<Self> {
        self.reduce(Reduce::Prod, dims, keepdim)
    }

    /// Minimum over `dims` (NaN when the reduced slice holds a NaN).
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let x = Tensor::from_slice(&[1i64, 5, 3, 4, 2, 6], &[2, 3], &Device::Cpu)?;
    /// assert_eq!(x.min(&[-1], false)?.to_vec()?, vec![1, 2]);
    /// let m = x.min(&[0], true)?;
    /// assert_eq!(m.shape(), &[1, 3]);
    /// assert_eq!(m.to_vec()?, vec![1, 2, 3]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Tensor::max`]: [`Error::EmptyReduction`], [`Error::DimOutOfRange`],
    /// [`Error::DuplicateDim`], [`Error::TooLarge`], [`Error::Host`].
    pub fn min(&self, dims: impl Dims, keepdim: bool) -> Result<Self> {
        self.reduce(Reduce::Min, dims, keepdim)
    }

    fn arg_reduce<const MIN: bool>(&self, dims: impl Dims, keepdim: bool) -> Result<Tensor<u32>> {
        let op = if MIN { "argmin" } else { "argmax" };
        let dims = &dims.resolve(op, self.shape())?[..];
        let (view, rows, cols, out_shape) = plan(op, self, dims, keepdim)?;
        if cols == 0 && rows > 0 {
            return Err(Error::EmptyReduction {
                op,
                shape: self.shape().to_vec(),
                dims: dims.to_vec(),
            });
        }
        if cols > u32::MAX as usize {
            return Err(Error::TooLarge {
                op,
                shape: self.shape().to_vec(),
            });
        }
        if cols == 1 {
            // One candidate per output: index 0 everywhere.
            crate::core::layout::checked_count(op, &out_shape, size_of::<u32>())?;
            return Tensor::zeros(&out_shape, self.device());
        }
        let dev = self.device();
        let op = ArgReduce::<T, MIN> {
            view: &view,
            cols,
            out: {
                crate::core::layout::checked_count(op, &out_shape, size_of::<u32>())?;
                dev.alloc::<u32>(rows)?
            },
        };
        Ok(Tensor::from_parts(engine::run(dev, op)?, &out_shape))
    }

    /// Index (u32) of the first maximum over `dims`, or of the first NaN when
    /// the slice holds one (PyTorch's rule); error when a reduced dim is empty.
    ///
    /// ```
    /// # use ferrocm_ops::WaveSize;
    /// use ferrocm_ops::{Device, Tensor};
    /// let x = Tensor::from_slice(&[1u8, 9, 9, 2], &[4], &Device::emulator(WaveSize::Wave64))?;
    /// assert_eq!(x.argmax(&[0], false)?.to_vec()?, vec![1]);
    /// let y = Tensor::from_slice(&[1.0f32, 5.0, 3.0, f32::NAN, 2.0, 6.0], &[2, 3], &Device::Cpu)?;
    /// assert_eq!(y.argmax(&[-1], false)?.to_vec()?, vec![1, 0]); // the NaN wins row 1
    /// assert_eq!(y.argmax(&[-1], true)?.shape(), &[2, 1]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::DimOutOfRange`] for a dim outside `-rank..rank`;
    /// [`Error::DuplicateDim`] for a dim given twice;
    /// [`Error::EmptyReduction`] over an empty dim (when other elements
    /// remain); [`Error::TooLarge`] when a reduced slice has more than
    /// `u32::MAX` elements or the output's byte size overflows;
    /// [`Error::Host`] when allocation or the launch fails.
    pub fn argmax(&self, dims: impl Dims, keepdim: bool) -> Result<Tensor<u32>> {
        self.arg_reduce::<false>(dims, keepdim)
    }

    /// Index (u32) of the first minimum over `dims`, or of the first NaN.
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let x = Tensor::from_slice(&[3u32, 1, 1, 1, 0, 5], &[2, 3], &Device::Cpu)?;
    /// assert_eq!(x.argmin(&[-1], false)?.to_vec()?, vec![1, 1]); // the first of equal minima
    /// assert_eq!(x.argmin(&[0], false)?.to_vec()?, vec![1, 1, 0]);
    /// assert!(x.argmin(&[2], false).is_err()); // rank 2
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Tensor::argmax`]: [`Error::DimOutOfRange`], [`Error::DuplicateDim`],
    /// [`Error::EmptyReduction`], [`Error::TooLarge`], [`Error::Host`].
    pub fn argmin(&self, dims: impl Dims, keepdim: bool) -> Result<Tensor<u32>> {
        self.arg_reduce::<true>(dims, keepdim)
    }

    fn softmax_impl<const LOG: bool>(&self) -> Result<Self> {
        let op = if LOG { "log_softmax" } else { "softmax" };
        if !T::DTYPE.is_float() {
            return Err(Error::UnsupportedDType {
                op,
                dtype: T::DTYPE,
            });
        }
        if self.rank() == 0 {
            // One element over a dim of one: softmax 1, log_softmax 0 (as PyTorch).
            return self.reshape(&[1])?.softmax_impl::<LOG>()?.reshape(&[]);
        }
        let x = self.contiguous()?;
        let cols = *x.shape().last().unwrap_or(&1);
        let n = x.elem_count();
        let rows = n.checked_div(cols).unwrap_or(0);
        let dev = x.device();
        let op = Softmax::<T, LOG> {
            x: &x,
            rows,
            cols,
            out: dev.alloc::<T>(n)?,
        };
        Ok(Tensor::from_parts(engine::run(dev, op)?, x.shape()))
    }

    /// Softmax over the last dim, computed as exp(x - max) / Σ exp(x - max).
    ///
    /// ```
    /// # use ferrocm_ops::WaveSize;
    /// use ferrocm_ops::{Device, Tensor};
    /// let x = Tensor::from_slice(&[0.0f32, 0.0], &[1, 2], &Device::emulator(WaveSize::Wave32))?;
    /// assert_eq!(x.softmax()?.to_vec()?, vec![0.5, 0.5]);
    /// let v = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3], &Device::Cpu)?.softmax()?.to_vec()?;
    /// assert!((v.iter().sum::<f32>() - 1.0).abs() < 1e-6 && v[0] < v[1] && v[1] < v[2]);
    /// assert!(Tensor::<u8>::zeros(&[2], &Device::Cpu)?.softmax().is_err()); // integers
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::UnsupportedDType`] for integer dtypes; [`Error::Host`] when
    /// allocation, the copy of a strided input or the launch fails.
    pub fn softmax(&self) -> Result<Self> {
        self.softmax_impl::<false>()
    }

    /// Log-softmax over the last dim: (x - max) - ln Σ exp(x - max).
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let x = Tensor::from_slice(&[0.0f32, 0.0, 7.0, 7.0], &[2, 2], &Device::Cpu)?;
    /// for v in x.log_softmax()?.to_vec()? {
    ///     assert!((v + std::f32::consts::LN_2).abs() < 1e-6); // ln(1/2): two equal values per row
    /// }
    /// assert!(Tensor::<i64>::zeros(&[2], &Device::Cpu)?.log_softmax().is_err());
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Tensor::softmax`]: [`Error::UnsupportedDType`], [`Error::Host`].
    pub fn log_softmax(&self) -> Result<Self> {
        self.softmax_impl::<true>()
    }

    /// Softmax over `dim` (negative counts from the end: -1 is the last
    /// dim). Another dim than the last is moved last, made contiguous and
    /// moved back (two copies).
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let x = Tensor::from_slice(&[0.0f32, 5.0, 0.0, 5.0], &[2, 2], &Device::Cpu)?;
    /// assert_eq!(x.softmax_dim(0)?.to_vec()?, vec![0.5, 0.5, 0.5, 0.5]);
    /// assert_eq!(x.softmax_dim(-1)?.to_vec()?, x.softmax()?.to_vec()?);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::DimOutOfRange`] when `dim` is not in `-rank..rank`;
    /// [`Error::UnsupportedDType`] for integer dtypes; [`Error::Host`] when
    /// allocation, a copy or the launch fails.
    pub fn softmax_dim(&self, dim: impl Dim) -> Result<Self> {
        self.softmax_over::<false>(dim)
    }

    /// Log-softmax over `dim` (negative counts from the end), as
    /// [`Tensor::softmax_dim`].
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let x = Tensor::from_slice(&[0.0f32, 5.0, 0.0, 5.0], &[2, 2], &Device::Cpu)?;
    /// for v in x.log_softmax_dim(0)?.to_vec()? {
    ///     assert!((v + std::f32::consts::LN_2).abs() < 1e-6); // each column: two equal values
    /// }
    /// assert_eq!(x.log_softmax_dim(-1)?.to_vec()?, x.log_softmax()?.to_vec()?);
    /// assert!(x.log_softmax_dim(2).is_err());
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Tensor::softmax_dim`]: [`Error::DimOutOfRange`],
    /// [`Error::UnsupportedDType`], [`Error::Host`].
    pub fn log_softmax_dim(&self, dim: impl Dim) -> Result<Self> {
        self.softmax_over::<true>(dim)
    }

    fn softmax_over<const LOG: bool>(&self, dim: impl Dim) -> Result<Self> {
        let op = if LOG { "log_softmax" } else { "softmax" };
        let rank = self.rank();
        // A rank-0 tensor has one dim of one for this purpose (as PyTorch).
        let d = dim.index(rank.max(1)).ok_or_else(|| Error::DimOutOfRange {
            op,
            dim: dim.given(),
            rank,
            shape: self.shape().to_vec(),
        })?;
        if rank == 0 || d == rank - 1 {
            return self.softmax_impl::<LOG>();
        }
        let moved = self.transpose(d, rank - 1)?;
        moved
            .softmax_impl::<LOG>()?
            .transpose(d, rank - 1)?
            .contiguous()
    }
}

#[cfg(test)]
mod tests {
    use super::{col_splits, row_block};

    #[test]
    fn column_reductions_split_to_eight_workgroups_a_compute_unit() {
        // 16384 x 4096 over dim 0 on 132 CUs: 16 tiles of 256 columns.
        let (chunk, splits) = col_splits(16, 16384, Some(132));
        assert_eq!(splits, 66);
        assert!(chunk * splits >= 16384 && chunk * (splits - 1) < 16384);
        assert_eq!(col_splits(1, 128, None), (64, 2));
        assert_eq!(col_splits(1, 127, None), (127, 1)); // 64 rows a split or more
        assert_eq!(col_splits(1, 1000, None), (125, 8));
        assert_eq!(col_splits(2000, 1 << 20, Some(132)), (1 << 20, 1));
        assert_eq!(col_splits(1, 0, None), (1, 1));
        let (chunk, splits) = col_splits(1, u64::MAX / 2, Some(1 << 20));
        assert!(splits <= 65535 && chunk.saturating_mul(splits) >= u64::MAX / 2);
    }

    #[test]
    fn row_blocks_give_four_to_eight_words_a_workitem() {
        assert_eq!(row_block(4096, 4), 128); // 1024 words: 8 each
        assert_eq!(row_block(4096, 2), 64); // 512 words: 8 each
        assert_eq!(row_block(4100, 4), 256); // 1025 words: 4 each and a tail word
        assert_eq!(row_block(3, 1), 64);
        assert_eq!(row_block(128_256, 4), 256); // one vocabulary's logits
        assert_eq!(row_block(usize::MAX / 32, 1), 256);
    }
}
