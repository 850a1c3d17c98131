//! Reductions over any set of dims (sum, mean, max, min, argmax, argmin) and
//! softmax / log_softmax over the last dim: API, Cpu implementation, GPU dispatch.
//!
//! Reduced dims are permuted last (a view), so every reduction is over rows
//! of `cols` elements in logical order; the kernels read that view through its
//! strides.

use crate::dtype::WithDType;
use crate::error::{Error, Result};
use crate::tensor::{BLOCK, Tensor};
use ferrocm_host::{Arg, LaunchConfig};
use ferrocm_kernels::elem::Elem;
use ferrocm_kernels::reduce::{self as k, REDUCE_LDS_BYTES, ReduceOp, arg_better};
use rayon::prelude::*;

/// A value reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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

fn cpu_reduce<T: WithDType, Op: ReduceOp>(src: &[T], view: &Tensor<T>, cols: usize, out: &mut [T]) {
    out.par_iter_mut().enumerate().for_each(|(r, o)| {
        let mut acc = Op::identity::<<T::Kernel as Elem>::Acc>();
        for off in crate::cpu::Offsets::new(&view.layout, r * cols).take(cols) {
            acc = Op::combine(acc, src[off].to_kernel().convert());
        }
        *o = T::from_kernel(Op::finish(acc, cols as u64).convert());
    });
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
        let dev = self.device().clone();
        let mut out = dev.alloc::<T>(rows)?;
        if dev.runs_kernels() {
            let kernel = format!("reduce_{}_{}", op.name(), T::DTYPE);
            crate::gpu::launch_rows(&view, &kernel, &out, rows, cols)?;
        } else {
            let src = crate::cpu::host(&view.storage);
            let dst = out.as_mut_slice().unwrap_or_default();
            match op {
                Reduce::Sum => cpu_reduce::<T, k::Sum>(src, &view, cols, dst),
                Reduce::Mean => cpu_reduce::<T, k::Mean>(src, &view, cols, dst),
                Reduce::Max => cpu_reduce::<T, k::Max>(src, &view, cols, dst),
                Reduce::Min => cpu_reduce::<T, k::Min>(src, &view, cols, dst),
            }
        }
        Ok(Tensor::from_parts(out, &out_shape))
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
        let dev = self.device().clone();
        let mut out = dev.alloc::<u32>(rows)?;
        if dev.runs_kernels() {
            let kernel = format!("reduce_{op}_{}", T::DTYPE);
            crate::gpu::launch_rows(&view, &kernel, &out, rows, cols)?;
        } else {
            let src = crate::cpu::host(&view.storage);
            out.as_mut_slice()
                .unwrap_or_default()
                .par_iter_mut()
                .enumerate()
                .for_each(|(r, o)| {
                    let mut best = if MIN {
                        <<T::Kernel as Elem>::Acc as Elem>::HIGHEST
                    } else {
                        <<T::Kernel as Elem>::Acc as Elem>::LOWEST
                    };
                    let mut best_i = u32::MAX;
                    for (c, off) in crate::cpu::Offsets::new(&view.layout, r * cols)
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
        }
        Ok(Tensor::from_parts(out, &out_shape))
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
        let dev = x.device().clone();
        let mut out = dev.alloc::<T>(n)?;
        if dev.runs_kernels() {
            if rows > 0 {
                dev.launch(
                    &format!("{op}_{}", T::DTYPE),
                    LaunchConfig::rows(rows as u64, BLOCK, REDUCE_LDS_BYTES),
                    &[
                        Arg::output(&out),
                        Arg::input_at(&x.storage, x.layout.offset()),
                        Arg::U64(rows as u64),
                        Arg::U64(cols as u64),
                    ],
                )?;
            }
        } else if rows > 0 {
            let src = &crate::cpu::host(&x.storage)[x.layout.offset()..x.layout.offset() + n];
            out.as_mut_slice()
                .unwrap_or_default()
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
        }
        Ok(Tensor::from_parts(out, x.shape()))
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
