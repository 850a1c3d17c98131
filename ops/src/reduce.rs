//! Reductions over any set of dims (sum, mean, max, min, argmax, argmin) and
//! softmax / log_softmax over the last dim: API, Cpu implementation, GPU dispatch.
//!
//! Reduced dims are permuted last (a view), so every reduction is over rows
//! of `cols` elements in logical order; the kernels read that view through its
//! strides.

use crate::backend::{self, Op};
use crate::dtype::WithDType;
use crate::error::{Error, Result};
use crate::gpu::Strided;
use crate::tensor::{BLOCK, Tensor};
use ferrocm_host::{Device, DeviceBuffer, In, LaunchConfig, Out};
use ferrocm_kernels::elem::Elem;
use ferrocm_kernels::host::KernelRef;
use ferrocm_kernels::reduce::{
    self as k, COL_BLOCK, COL_LDS_BYTES, COL_TILE, REDUCE_LDS_BYTES, ReduceArgs, ReduceKernel,
    ReduceKernels, arg_better,
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
    /// Maximum (NaN ignored).
    Max,
    /// Minimum (NaN ignored).
    Min,
}

impl Reduce {
    /// Every value reduction.
    pub const ALL: &'static [Reduce] = &[Reduce::Sum, Reduce::Mean, Reduce::Max, Reduce::Min];

    /// The op's name.
    pub fn name(self) -> &'static str {
        match self {
            Reduce::Sum => "sum",
            Reduce::Mean => "mean",
            Reduce::Max => "max",
            Reduce::Min => "min",
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
        if d >= rank {
            return Err(Error::DimOutOfRange {
                op,
                dim: d,
                rank,
                shape: t.shape().to_vec(),
            });
        }
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

/// Launches a row kernel `(out, inp, rows, cols, ndim, layout)` with one
/// workgroup per row over `view` (logically `rows × cols`).
fn launch_rows<T: WithDType, O: bytemuck::Pod>(
    dev: &Device,
    kernel: KernelRef<ReduceArgs<T::Kernel, O>>,
    view: &Tensor<T>,
    out: &DeviceBuffer<O>,
    rows: usize,
    cols: usize,
) -> Result<()> {
    if rows == 0 {
        return Ok(());
    }
    let s = Strided::in_memory(dev, view.shape(), [&view.layout])?;
    dev.launch_typed(
        kernel,
        LaunchConfig::rows(rows as u64, BLOCK, REDUCE_LDS_BYTES),
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
        let (src, cols, layout) = (
            crate::cpu::host(self.view.buf()),
            self.cols,
            &self.view.layout,
        );
        crate::cpu::host_mut(&mut self.out)
            .par_iter_mut()
            .enumerate()
            .for_each(|(r, o)| {
                let mut acc = R::identity::<<T::Kernel as Elem>::Acc>();
                for off in crate::cpu::Offsets::new(layout, r * cols).take(cols) {
                    acc = R::combine(acc, src[off].to_kernel().convert());
                }
                *o = T::from_kernel(R::finish(acc, cols as u64).convert());
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
        if rows > 1 && self.cols > 1 && reduces_leading_dims(self.view, rows, self.cols) {
            // Memory holds `cols` reduced rows of `rows` kept elements: reduce
            // columns, coalesced (the row kernel would stride by a whole row).
            let kernel = T::Kernel::reduce_cols::<R>().ok_or(unsupported)?;
            let groups = (rows as u64).div_ceil(COL_TILE as u64);
            dev.launch_typed(
                kernel,
                LaunchConfig::rows(groups, COL_BLOCK, COL_LDS_BYTES),
                (
                    Out::new(out),
                    In::at(self.view.kbuf(), self.view.layout.offset()),
                    self.cols as u64,
                    rows as u64,
                ),
            )?;
            return Ok(self.out);
        }
        let kernel = T::Kernel::reduce::<R>().ok_or(unsupported)?;
        launch_rows(dev, kernel, self.view, out, rows, self.cols)?;
        Ok(self.out)
    }
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

/// argmax (`MIN = false`) or argmin of each row.
struct ArgReduce<'a, T: WithDType, const MIN: bool> {
    view: &'a Tensor<T>,
    cols: usize,
    out: DeviceBuffer<u32>,
}

impl<T: WithDType, const MIN: bool> Op for ArgReduce<'_, T, MIN> {
    type Output = DeviceBuffer<u32>;

    fn cpu(mut self) -> Result<DeviceBuffer<u32>> {
        let (src, cols, layout) = (
            crate::cpu::host(self.view.buf()),
            self.cols,
            &self.view.layout,
        );
        crate::cpu::host_mut(&mut self.out)
            .par_iter_mut()
            .enumerate()
            .for_each(|(r, o)| {
                let mut best = if MIN {
                    <<T::Kernel as Elem>::Acc as Elem>::HIGHEST
                } else {
                    <<T::Kernel as Elem>::Acc as Elem>::LOWEST
                };
                let mut best_i = u32::MAX;
                for (c, off) in crate::cpu::Offsets::new(layout, r * cols)
                    .take(cols)
                    .enumerate()
                {
                    let x = src[off].to_kernel().convert();
                    if arg_better::<_, MIN>(x, c as u32, best, best_i) {
                        best = x;
                        best_i = c as u32;
                    }
                }
                *o = if best_i == u32::MAX { 0 } else { best_i };
            });
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
        if rows == 0 {
            return Ok(self.out);
        }
        let src = &crate::cpu::host(self.x.buf())[off..off + rows * cols];
        crate::cpu::host_mut(&mut self.out)
            .par_chunks_mut(cols)
            .zip(src.par_chunks(cols))
            .for_each(|(o, s)| {
                let m = s
                    .iter()
                    .fold(f32::NEG_INFINITY, |m, v| m.max(v.to_kernel().to_f32()));
                let sum: f32 = s.iter().map(|v| (v.to_kernel().to_f32() - m).exp()).sum();
                let log_sum = sum.ln();
                for (o, v) in o.iter_mut().zip(s) {
                    let d = v.to_kernel().to_f32() - m;
                    *o = T::from_kernel(T::Kernel::from_f32(if LOG {
                        d - log_sum
                    } else {
                        d.exp() / sum
                    }));
                }
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
                LaunchConfig::rows(self.rows as u64, BLOCK, REDUCE_LDS_BYTES),
                (
                    Out::new(out),
                    In::at(self.x.kbuf(), self.x.layout.offset()),
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
    /// use ferrocm_ops::{Device, Reduce, Tensor};
    /// let x = Tensor::from_slice(&[1.0f32, 5.0, 3.0, 2.0], &[2, 2], &Device::emulator(32))?;
    /// assert_eq!(x.reduce(Reduce::Max, &[0], false)?.to_vec()?, vec![3.0, 5.0]);
    /// assert_eq!(x.reduce(Reduce::Sum, &[0, 1], true)?.shape(), &[1, 1]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    pub fn reduce(&self, op: Reduce, dims: &[usize], keepdim: bool) -> Result<Self> {
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
        let out = dev.alloc::<T>(rows)?;
        let out = match op {
            Reduce::Sum => self.row_reduce::<k::Sum>(dev, op, &view, cols, out),
            Reduce::Mean => self.row_reduce::<k::Mean>(dev, op, &view, cols, out),
            Reduce::Max => self.row_reduce::<k::Max>(dev, op, &view, cols, out),
            Reduce::Min => self.row_reduce::<k::Min>(dev, op, &view, cols, out),
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
        backend::run(dev, op)
    }

    /// Sum over `dims`.
    pub fn sum(&self, dims: &[usize], keepdim: bool) -> Result<Self> {
        self.reduce(Reduce::Sum, dims, keepdim)
    }

    /// Mean over `dims` (float dtypes).
    pub fn mean(&self, dims: &[usize], keepdim: bool) -> Result<Self> {
        self.reduce(Reduce::Mean, dims, keepdim)
    }

    /// Maximum over `dims`.
    pub fn max(&self, dims: &[usize], keepdim: bool) -> Result<Self> {
        self.reduce(Reduce::Max, dims, keepdim)
    }

    /// Minimum over `dims`.
    pub fn min(&self, dims: &[usize], keepdim: bool) -> Result<Self> {
        self.reduce(Reduce::Min, dims, keepdim)
    }

    fn arg_reduce<const MIN: bool>(&self, dims: &[usize], keepdim: bool) -> Result<Tensor<u32>> {
        let op = if MIN { "argmin" } else { "argmax" };
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
        let dev = self.device();
        let op = ArgReduce::<T, MIN> {
            view: &view,
            cols,
            out: dev.alloc::<u32>(rows)?,
        };
        Ok(Tensor::from_parts(backend::run(dev, op)?, &out_shape))
    }

    /// Index (u32) of the first maximum over `dims` (NaN ignored); error when a reduced dim is empty.
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let x = Tensor::from_slice(&[1u8, 9, 9, 2], &[4], &Device::emulator(64))?;
    /// assert_eq!(x.argmax(&[0], false)?.to_vec()?, vec![1]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    pub fn argmax(&self, dims: &[usize], keepdim: bool) -> Result<Tensor<u32>> {
        self.arg_reduce::<false>(dims, keepdim)
    }

    /// Index (u32) of the first minimum over `dims` (NaN ignored).
    pub fn argmin(&self, dims: &[usize], keepdim: bool) -> Result<Tensor<u32>> {
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
            return Err(Error::DimOutOfRange {
                op,
                dim: 0,
                rank: 0,
                shape: vec![],
            });
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
        Ok(Tensor::from_parts(backend::run(dev, op)?, x.shape()))
    }

    /// Softmax over the last dim, computed as exp(x - max) / Σ exp(x - max).
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let x = Tensor::from_slice(&[0.0f32, 0.0], &[1, 2], &Device::emulator(32))?;
    /// assert_eq!(x.softmax()?.to_vec()?, vec![0.5, 0.5]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    pub fn softmax(&self) -> Result<Self> {
        self.softmax_impl::<false>()
    }

    /// Log-softmax over the last dim: (x - max) - ln Σ exp(x - max).
    pub fn log_softmax(&self) -> Result<Self> {
        self.softmax_impl::<true>()
    }
}
