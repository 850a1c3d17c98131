//! Pooling in 1, 2 and 3 spatial dims (PyTorch's `max_pool*d`,
//! `avg_pool*d`, `adaptive_avg_pool*d`, `adaptive_max_pool*d`): API, Cpu
//! implementation, kernel path.
//!
//! f32, f16 and bf16 (averages summed in f32 and rounded once). Inputs
//! `(N, C, spatial..)` or unbatched `(C, spatial..)`, read at their strides:
//! a channels-last input (an NCHW view of NHWC memory) runs without a copy
//! and its output comes back channels-last, as PyTorch's does.
//!
//! Where every window lies is worked out here once per spatial dim and
//! output index, into the table `ferrocm_kernels::conv::pool` describes;
//! the kernels (`pool_max_*`, `pool_avg_*`) and the Cpu path below both
//! walk it, so the two cannot disagree about a window.

use crate::core::dtype::DType;
use crate::core::dtype::WithDType;
use crate::core::error::{Error, Result};
use crate::core::tensor::Tensor;
use crate::engine::{self, Libraries, Op, Vendor};
use ferrocm_host::dnn::{DnnType, PoolMode, PoolProblem};
use ferrocm_host::launch::MAX_GRID_X;
use ferrocm_host::{Device, DeviceBuffer, In, LaunchConfig, Out};
use ferrocm_kernels::conv::pool::{
    P_CHANNELS, P_DILATION, P_DIVISOR, P_IN_HW, P_OUT, P_POSITIONS, P_ROWS, P_TABLE, P_X_STRIDES,
    P_Y_STRIDES, POOL_ROWS_AT_ONCE, PoolKernels, pool_max_takes,
};
use rayon::prelude::*;

use super::{
    is_channels_last, narrow, out_strides, per_dim, spatial_output, store_rows, vendor_dnn, widen,
};

/// The parameters of a max or average pool: PyTorch's `kernel_size`,
/// `stride` (default: the kernel), `padding`, `dilation` (max pools only),
/// `ceil_mode`, and for averages `count_include_pad` and
/// `divisor_override`. A list of one value applies to every spatial dim.
///
/// ```
/// use ferrocm_ops::conv::PoolOptions;
/// let o = PoolOptions::new(&[3]).stride(&[2]).padding(&[1]);
/// assert_eq!((o.kernel, o.stride, o.padding), (vec![3], vec![2], vec![1]));
/// assert!(PoolOptions::new(&[2]).count_include_pad);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolOptions {
    /// The window's size along each spatial dim.
    pub kernel: Vec<usize>,
    /// The window's step along each spatial dim; empty: the kernel's size.
    pub stride: Vec<usize>,
    /// Implicit padding on both sides of each spatial dim (at most half
    /// the window; a max pool pads with -inf, an average with zeros).
    pub padding: Vec<usize>,
    /// The spacing of a max pool's taps (default 1; averages take 1 only).
    pub dilation: Vec<usize>,
    /// Round the output size up: a last window may start in the input's
    /// tail (never wholly in the right padding).
    pub ceil_mode: bool,
    /// Averages: count the padding's zeros in the divisor (default true,
    /// as PyTorch).
    pub count_include_pad: bool,
    /// Averages: divide every window by this instead.
    pub divisor_override: Option<usize>,
}

impl PoolOptions {
    /// A window of `kernel`, stride equal to it, no padding, dilation 1,
    /// floor mode, `count_include_pad` true.
    pub fn new(kernel: &[usize]) -> Self {
        Self {
            kernel: kernel.to_vec(),
            stride: Vec::new(),
            padding: vec![0],
            dilation: vec![1],
            ceil_mode: false,
            count_include_pad: true,
            divisor_override: None,
        }
    }

    /// The stride along each spatial dim (one value: all of them).
    pub fn stride(mut self, stride: &[usize]) -> Self {
        self.stride = stride.to_vec();
        self
    }

    /// The padding on both sides of each spatial dim (one value: all).
    pub fn padding(mut self, padding: &[usize]) -> Self {
        self.padding = padding.to_vec();
        self
    }

    /// The dilation along each spatial dim (one value: all of them).
    pub fn dilation(mut self, dilation: &[usize]) -> Self {
        self.dilation = dilation.to_vec();
        self
    }

    /// Round output sizes up instead of down.
    pub fn ceil_mode(mut self, on: bool) -> Self {
        self.ceil_mode = on;
        self
    }

    /// Whether an average's divisor counts the padding.
    pub fn count_include_pad(mut self, on: bool) -> Self {
        self.count_include_pad = on;
        self
    }

    /// An average's divisor for every window.
    pub fn divisor_override(mut self, divisor: usize) -> Self {
        self.divisor_override = Some(divisor);
        self
    }
}

/// Which pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Max,
    Avg,
    AdaptiveMax,
    AdaptiveAvg,
}

impl Kind {
    fn is_max(self) -> bool {
        matches!(self, Kind::Max | Kind::AdaptiveMax)
    }
}

/// A pool's windows: the kernels' geometry array (header and table), and
/// the shapes the op needs.
#[derive(Clone, Debug)]
struct Plan {
    geom: Vec<u64>,
    batch: usize,
    channels: usize,
    /// The output's spatial dims, three (leading 1s).
    out: [usize; 3],
    /// The input's spatial dims, three.
    inp: [usize; 3],
    dilation: [usize; 3],
    /// Input strides `(n, c, d, h, w)`.
    xs: [usize; 5],
    divisor: usize,
}

impl Plan {
    fn positions(&self) -> usize {
        self.out.iter().product()
    }

    /// Output index `o` along dim `d`: `(first, count, factor)`.
    fn span(&self, d: usize, o: usize) -> (usize, usize, usize) {
        let at = P_TABLE + 2 * (self.out[..d].iter().sum::<usize>() + o);
        let w = self.geom[at];
        (
            (w as u32) as usize,
            (w >> 32) as usize,
            self.geom[at + 1] as usize,
        )
    }
}

/// PyTorch's pooled size: `(in + 2 pad - dilation (k - 1) - 1) / stride +
/// 1`, rounded down or (`ceil`) up, a last window never starting in the
/// right padding. None when below 1.
fn pooled_size(
    inp: usize,
    k: usize,
    s: usize,
    pad: usize,
    dil: usize,
    ceil: bool,
) -> Option<usize> {
    let span = (dil * (k - 1) + 1) as i128;
    let num = inp as i128 + 2 * pad as i128 - span + if ceil { s as i128 - 1 } else { 0 };
    let mut out = num.div_euclid(s as i128) + 1;
    if ceil && (out - 1) * s as i128 >= inp as i128 + pad as i128 {
        out -= 1;
    }
    (out >= 1).then_some(out as usize)
}

/// One dim's window table entries, `(first, count, factor)` per output.
fn dim_table(
    kind: Kind,
    (inp, out): (usize, usize),
    (k, s, pad, dil): (usize, usize, usize, usize),
    count_include_pad: bool,
) -> impl Iterator<Item = (usize, usize, usize)> {
    (0..out).map(move |o| match kind {
        Kind::Max => {
            let start = (o * s) as i128 - pad as i128;
            // The first tap at or past 0, and the taps inside.
            let j0 = if start < 0 {
                (-start as usize).div_ceil(dil)
            } else {
                0
            };
            let first = (start + (j0 * dil) as i128) as usize;
            let count = if j0 >= k || first >= inp {
                0
            } else {
                (k - j0).min((inp - 1 - first) / dil + 1)
            };
            (first, count, 1)
        }
        Kind::Avg => {
            let start = (o * s) as i128 - pad as i128;
            let end = (start + k as i128).min((inp + pad) as i128);
            let lo = start.max(0);
            let hi = end.min(inp as i128);
            let count = (hi - lo).max(0) as usize;
            let factor = if count_include_pad {
                (end - start) as usize
            } else {
                count
            };
            (lo as usize, count, factor)
        }
        Kind::AdaptiveMax | Kind::AdaptiveAvg => {
            // In u128: `o · in` may pass usize for asked-for sizes.
            let (o, inp, out) = (o as u128, inp as u128, out as u128);
            let lo = (o * inp / out) as usize;
            let hi = ((o + 1) * inp).div_ceil(out) as usize;
            (lo, hi - lo, hi - lo)
        }
    })
}

/// A checked pool: `(plan, output shape)`, or the error naming `op`.
fn plan<T: WithDType>(
    op: &'static str,
    kind: Kind,
    x: &Tensor<T>,
    sd: usize,
    options: Option<&PoolOptions>,
    sizes: &[usize],
) -> Result<(Plan, Vec<usize>)> {
    let bad = |what: String| Error::BadParameter { op, what };
    let mut p = Plan {
        geom: Vec::new(),
        batch: x.shape()[0],
        channels: x.shape()[1],
        out: [1; 3],
        inp: [1; 3],
        dilation: [1; 3],
        xs: [0; 5],
        divisor: 0,
    };
    let lead = 3 - sd;
    let spatial = &x.shape()[2..];
    if spatial.contains(&0) {
        return Err(bad(format!(
            "the input's spatial dims must be non-empty, shape {:?}",
            x.shape()
        )));
    }
    let mut tables = Vec::new();
    match options {
        Some(o) => {
            let kernel = per_dim(op, "kernel", &o.kernel, sd)?;
            let stride = if o.stride.is_empty() {
                kernel.clone()
            } else {
                per_dim(op, "stride", &o.stride, sd)?
            };
            let padding = per_dim(op, "padding", &o.padding, sd)?;
            let dilation = per_dim(op, "dilation", &o.dilation, sd)?;
            if kernel.contains(&0) || stride.contains(&0) || dilation.contains(&0) {
                return Err(bad(format!(
                    "kernel {kernel:?}, stride {stride:?} and dilation {dilation:?} must be at least 1"
                )));
            }
            if kind == Kind::Avg && dilation.iter().any(|&d| d != 1) {
                return Err(bad(format!(
                    "an average pool has no dilation, dilation {dilation:?}"
                )));
            }
            if o.divisor_override == Some(0) {
                return Err(bad("divisor_override must not be 0".into()));
            }
            for d in 0..sd {
                let (k, dil) = (kernel[d], dilation[d]);
                let reach = k
                    .checked_sub(1)
                    .and_then(|e| e.checked_mul(dil))
                    .and_then(|e| e.checked_add(1))
                    .filter(|&e| e < 1 << 40);
                let Some(reach) = reach else {
                    return Err(bad(format!(
                        "kernel {kernel:?} with dilation {dilation:?} is too large"
                    )));
                };
                if padding[d] > reach / 2 {
                    return Err(bad(format!(
                        "padding {padding:?} must be at most half the window {kernel:?} (dilation {dilation:?})"
                    )));
                }
                let inp = spatial[d];
                let out = pooled_size(inp, k, stride[d], padding[d], dil, o.ceil_mode)
                    .ok_or_else(|| {
                        bad(format!(
                            "the window {kernel:?} (dilation {dilation:?}, padding {padding:?}) must fit the input {spatial:?}: an output dim below 1"
                        ))
                    })?;
                p.inp[lead + d] = inp;
                p.out[lead + d] = out;
                p.dilation[lead + d] = if kind.is_max() { dil } else { 1 };
                tables.push((
                    kind,
                    (inp, out),
                    (k, stride[d], padding[d], dil),
                    o.count_include_pad,
                ));
            }
            p.divisor = o.divisor_override.unwrap_or(0);
        }
        None => {
            if sizes.len() != sd {
                return Err(bad(format!(
                    "output size {sizes:?} must have {sd} entries (one per spatial dim)"
                )));
            }
            for d in 0..sd {
                let (inp, out) = (spatial[d], sizes[d]);
                p.inp[lead + d] = inp;
                p.out[lead + d] = out;
                tables.push((kind, (inp, out), (1, 1, 0, 1), true));
            }
        }
    }
    for _ in 0..lead {
        // A leading dim of 1: one window, the one element.
        tables.insert(0, (Kind::AdaptiveAvg, (1, 1), (1, 1, 0, 1), true));
    }
    let st = x.layout().strides();
    p.xs[0] = st[0];
    p.xs[1] = st[1];
    for d in 0..sd {
        p.xs[2 + lead + d] = st[2 + d];
    }
    let mut shape = vec![p.batch, p.channels];
    shape.extend_from_slice(&p.out[lead..]);
    crate::core::layout::checked_count(op, &shape, size_of::<T>())?;
    // The table has an entry per output index of each dim: an adaptive
    // pool's asked-for sizes bound it, so it is reserved, not assumed.
    let too_large = || Error::TooLarge {
        op,
        shape: x.shape().to_vec(),
    };
    let words = p
        .out
        .iter()
        .try_fold(P_TABLE, |a, &o| o.checked_mul(2)?.checked_add(a))
        .ok_or_else(too_large)?;
    let mut geom = Vec::new();
    geom.try_reserve_exact(words).map_err(|_| too_large())?;
    geom.resize(P_TABLE, 0u64);
    for &(kind, io, params, include_pad) in &tables {
        for (first, count, factor) in dim_table(kind, io, params, include_pad) {
            geom.push(first as u64 | (count as u64) << 32);
            geom.push(factor as u64);
        }
    }
    p.geom = geom;
    Ok((p, shape))
}

impl<T: WithDType> Tensor<T> {
    /// Max pooling over the last `spatial_dims` (1 to 3) dims of `self`
    /// (`(N, C, spatial..)` or unbatched `(C, spatial..)`): each output the
    /// largest element of its window, a NaN in the window winning (as
    /// PyTorch's `max_pool1d/2d/3d`); padding never wins.
    ///
    /// ```
    /// use ferrocm_ops::conv::PoolOptions;
    /// use ferrocm_ops::{Device, Tensor};
    /// let x = Tensor::from_slice(&[1.0f32, 5.0, 2.0, 0.0, 3.0, 4.0], &[1, 1, 6], &Device::Cpu)?;
    /// let y = x.max_pool(1, &PoolOptions::new(&[2]))?;
    /// assert_eq!(y.to_vec()?, vec![5.0, 2.0, 4.0]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::UnsupportedDType`] for integer dtypes; [`Error::BadParameter`]
    /// for `spatial_dims` not 1 to 3, an input of another rank, an empty
    /// spatial dim, a kernel, stride or dilation of 0, padding over half the
    /// window, a window that does not fit (an output dim below 1), a
    /// parameter list of the wrong length; [`Error::TooLarge`] past the
    /// kernels' 32-bit limits; [`Error::Host`].
    pub fn max_pool(&self, spatial_dims: usize, options: &PoolOptions) -> Result<Self> {
        let op = name(Kind::Max, spatial_dims);
        Ok(self
            .pool(op, Kind::Max, spatial_dims, Some(options), &[], false)?
            .0)
    }

    /// [`Tensor::max_pool`] and, for every output, where its maximum is:
    /// the input position flattened over the spatial dims (`(h * W + w)` in
    /// 2-d; the last NaN's when the window holds NaNs), as PyTorch's
    /// `return_indices=True`.
    ///
    /// ```
    /// use ferrocm_ops::conv::PoolOptions;
    /// use ferrocm_ops::{Device, Tensor};
    /// let x = Tensor::from_slice(&[1.0f32, 5.0, 2.0, 0.0], &[1, 1, 2, 2], &Device::Cpu)?;
    /// let (y, i) = x.max_pool_with_indices(2, &PoolOptions::new(&[2]))?;
    /// assert_eq!((y.to_vec()?, i.to_vec()?), (vec![5.0], vec![1]));
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Tensor::max_pool`].
    pub fn max_pool_with_indices(
        &self,
        spatial_dims: usize,
        options: &PoolOptions,
    ) -> Result<(Self, Tensor<i64>)> {
        let op = name(Kind::Max, spatial_dims);
        let (y, i) = self.pool(op, Kind::Max, spatial_dims, Some(options), &[], true)?;
        Ok((y, i.expect("indices asked for")))
    }

    /// Average pooling over the last `spatial_dims` (1 to 3) dims (PyTorch's
    /// `avg_pool1d/2d/3d`): each window's sum in f32 divided by its size
    /// with the padding (`count_include_pad`, the default), without it, or
    /// by `divisor_override`.
    ///
    /// ```
    /// use ferrocm_ops::conv::PoolOptions;
    /// use ferrocm_ops::{Device, Tensor};
    /// let x = Tensor::from_slice(&[2.0f32, 4.0, 6.0], &[1, 1, 3], &Device::Cpu)?;
    /// let o = PoolOptions::new(&[2]).stride(&[1]).padding(&[1]);
    /// assert_eq!(x.avg_pool(1, &o)?.to_vec()?, vec![1.0, 3.0, 5.0, 3.0]);
    /// let o = o.count_include_pad(false);
    /// assert_eq!(x.avg_pool(1, &o)?.to_vec()?, vec![2.0, 3.0, 5.0, 6.0]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Tensor::max_pool`]; [`Error::BadParameter`] for a dilation
    /// other than 1 or a `divisor_override` of 0.
    pub fn avg_pool(&self, spatial_dims: usize, options: &PoolOptions) -> Result<Self> {
        let op = name(Kind::Avg, spatial_dims);
        Ok(self
            .pool(op, Kind::Avg, spatial_dims, Some(options), &[], false)?
            .0)
    }

    /// Adaptive average pooling to `output_size` (one entry per spatial
    /// dim, 1 to 3): output `o` of a dim of `in` averages inputs
    /// `floor(o·in/out) .. ceil((o+1)·in/out)`, as PyTorch's
    /// `adaptive_avg_pool1d/2d/3d`.
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0], &[1, 1, 5], &Device::Cpu)?;
    /// assert_eq!(x.adaptive_avg_pool(&[2])?.to_vec()?, vec![2.0, 4.0]);
    /// assert_eq!(x.adaptive_avg_pool(&[1])?.to_vec()?, vec![3.0]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Tensor::max_pool`], the spatial dims being `output_size.len()`.
    pub fn adaptive_avg_pool(&self, output_size: &[usize]) -> Result<Self> {
        let sd = output_size.len();
        let op = name(Kind::AdaptiveAvg, sd);
        Ok(self
            .pool(op, Kind::AdaptiveAvg, sd, None, output_size, false)?
            .0)
    }

    /// Adaptive max pooling to `output_size` (windows as
    /// [`Tensor::adaptive_avg_pool`]'s) with the maximum's flattened input
    /// position, as PyTorch's `adaptive_max_pool1d/2d/3d(return_indices=True)`.
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let x = Tensor::from_slice(&[1.0f32, 7.0, 3.0, 4.0, 5.0], &[1, 1, 5], &Device::Cpu)?;
    /// let (y, i) = x.adaptive_max_pool(&[2])?;
    /// assert_eq!((y.to_vec()?, i.to_vec()?), (vec![7.0, 5.0], vec![1, 4]));
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Tensor::adaptive_avg_pool`].
    pub fn adaptive_max_pool(&self, output_size: &[usize]) -> Result<(Self, Tensor<i64>)> {
        let sd = output_size.len();
        let op = name(Kind::AdaptiveMax, sd);
        let (y, i) = self.pool(op, Kind::AdaptiveMax, sd, None, output_size, true)?;
        Ok((y, i.expect("indices asked for")))
    }

    /// [`Tensor::max_pool`] over 2 spatial dims (`(N, C, H, W)`).
    ///
    /// # Errors
    /// As [`Tensor::max_pool`].
    pub fn max_pool2d(&self, options: &PoolOptions) -> Result<Self> {
        self.max_pool(2, options)
    }

    /// [`Tensor::avg_pool`] over 2 spatial dims (`(N, C, H, W)`).
    ///
    /// # Errors
    /// As [`Tensor::avg_pool`].
    pub fn avg_pool2d(&self, options: &PoolOptions) -> Result<Self> {
        self.avg_pool(2, options)
    }

    /// [`Tensor::adaptive_avg_pool`] to `(oh, ow)`.
    ///
    /// # Errors
    /// As [`Tensor::adaptive_avg_pool`].
    pub fn adaptive_avg_pool2d(&self, output_size: [usize; 2]) -> Result<Self> {
        self.adaptive_avg_pool(&output_size)
    }

    /// [`Tensor::adaptive_max_pool`] to `(oh, ow)`.
    ///
    /// # Errors
    /// As [`Tensor::adaptive_avg_pool`].
    pub fn adaptive_max_pool2d(&self, output_size: [usize; 2]) -> Result<(Self, Tensor<i64>)> {
        self.adaptive_max_pool(&output_size)
    }

    fn pool(
        &self,
        op: &'static str,
        kind: Kind,
        sd: usize,
        options: Option<&PoolOptions>,
        sizes: &[usize],
        indices: bool,
    ) -> Result<(Self, Option<Tensor<i64>>)> {
        if !T::DTYPE.is_float() {
            return Err(Error::UnsupportedDType {
                op,
                dtype: T::DTYPE,
            });
        }
        if !(1..=3).contains(&sd) {
            return Err(Error::BadParameter {
                op,
                what: format!("pools have 1 to 3 spatial dims, asked for {sd}"),
            });
        }
        let unbatched = self.rank() == sd + 1;
        if !unbatched && self.rank() != sd + 2 {
            return Err(Error::BadParameter {
                op,
                what: format!(
                    "the input must have rank {} (N, C, spatial..) or {} (C, spatial..), shape {:?}",
                    sd + 2,
                    sd + 1,
                    self.shape()
                ),
            });
        }
        let x = if unbatched {
            self.reshape_view_batched()?
        } else {
            self.clone()
        };
        let (plan, shape) = plan(op, kind, &x, sd, options, sizes)?;
        let n_out = crate::core::layout::checked_count(op, &shape, size_of::<T>())?;
        let channels_last = is_channels_last(&x);
        let dnn = options
            .filter(|_| !indices)
            .and_then(|o| dnn_problem(kind, &x, o, &shape, channels_last));
        let dev = x.device().clone();
        let out = dev.alloc::<T>(n_out)?;
        let idx = if indices {
            Some(dev.alloc::<i64>(n_out)?)
        } else {
            None
        };
        let (buf, idx) = engine::run(
            &dev,
            Pool {
                op,
                kind,
                x: &x,
                plan,
                channels_last,
                dnn,
                out,
                idx,
            },
        )?;
        let y = spatial_output(buf, &shape, channels_last)?;
        let i = idx
            .map(|b| spatial_output(b, &shape, channels_last))
            .transpose()?;
        if unbatched {
            let i = i.map(|i| i.squeeze_batch()).transpose()?;
            return Ok((y.squeeze_batch()?, i));
        }
        Ok((y, i))
    }
}

impl crate::DynTensor {
    /// [`Tensor::max_pool`] for a dtype known at run time.
    ///
    /// # Errors
    /// As [`Tensor::max_pool`].
    pub fn max_pool(&self, spatial_dims: usize, options: &PoolOptions) -> Result<Self> {
        crate::core::dyn_tensor::with_dtype!(self, "max_pool", |t| Ok(t
            .max_pool(spatial_dims, options)?
            .into()))
    }

    /// [`Tensor::avg_pool`] for a dtype known at run time.
    ///
    /// # Errors
    /// As [`Tensor::avg_pool`].
    pub fn avg_pool(&self, spatial_dims: usize, options: &PoolOptions) -> Result<Self> {
        crate::core::dyn_tensor::with_dtype!(self, "avg_pool", |t| Ok(t
            .avg_pool(spatial_dims, options)?
            .into()))
    }

    /// [`Tensor::adaptive_avg_pool`] for a dtype known at run time.
    ///
    /// # Errors
    /// As [`Tensor::adaptive_avg_pool`].
    pub fn adaptive_avg_pool(&self, output_size: &[usize]) -> Result<Self> {
        crate::core::dyn_tensor::with_dtype!(self, "adaptive_avg_pool", |t| Ok(t
            .adaptive_avg_pool(output_size)?
            .into()))
    }
}

/// The op's name as PyTorch spells it.
fn name(kind: Kind, sd: usize) -> &'static str {
    const NAMES: [[&str; 3]; 4] = [
        ["max_pool1d", "max_pool2d", "max_pool3d"],
        ["avg_pool1d", "avg_pool2d", "avg_pool3d"],
        [
            "adaptive_max_pool1d",
            "adaptive_max_pool2d",
            "adaptive_max_pool3d",
        ],
        [
            "adaptive_avg_pool1d",
            "adaptive_avg_pool2d",
            "adaptive_avg_pool3d",
        ],
    ];
    let k = match kind {
        Kind::Max => 0,
        Kind::Avg => 1,
        Kind::AdaptiveMax => 2,
        Kind::AdaptiveAvg => 3,
    };
    match sd {
        1..=3 => NAMES[k][sd - 1],
        _ => [
            "max_pool",
            "avg_pool",
            "adaptive_max_pool",
            "adaptive_avg_pool",
        ][k],
    }
}

/// One pool: operands checked, outputs allocated.
struct Pool<'a, T: WithDType> {
    op: &'static str,
    kind: Kind,
    x: &'a Tensor<T>,
    plan: Plan,
    channels_last: bool,
    /// The pool in a DNN library's terms, where one could run it.
    dnn: Option<PoolProblem>,
    out: DeviceBuffer<T>,
    idx: Option<DeviceBuffer<i64>>,
}

/// The pool as a [`PoolProblem`] where the DNN libraries compute exactly
/// what the op promises: a max or average pool of a float dtype without
/// dilation or a divisor override, whose output is the library's (rounded
/// down: a `ceil_mode` that adds no window is the same pool), of a dense
/// NC.. or channels-last input starting 16-byte aligned (as the output
/// is). Indices are never asked of a library (the caller filters them).
fn dnn_problem<T: WithDType>(
    kind: Kind,
    x: &Tensor<T>,
    o: &PoolOptions,
    shape: &[usize],
    channels_last: bool,
) -> Option<PoolProblem> {
    let dtype = match T::DTYPE {
        DType::F32 => DnnType::F32,
        DType::F16 => DnnType::F16,
        DType::BF16 => DnnType::Bf16,
        _ => return None,
    };
    let mode = match kind {
        Kind::Max => PoolMode::Max,
        Kind::Avg if o.count_include_pad => PoolMode::AvgIncludePad,
        Kind::Avg => PoolMode::AvgExcludePad,
        _ => return None,
    };
    let sd = x.rank() - 2;
    let window = per_dim("pool", "kernel", &o.kernel, sd).ok()?;
    let stride = match o.stride.is_empty() {
        true => window.clone(),
        false => per_dim("pool", "stride", &o.stride, sd).ok()?,
    };
    let padding = per_dim("pool", "padding", &o.padding, sd).ok()?;
    let dilation = per_dim("pool", "dilation", &o.dilation, sd).ok()?;
    let dense = if channels_last {
        x.layout().strides() == out_strides(x.shape(), true).as_slice()
    } else {
        x.is_contiguous()
    };
    if o.divisor_override.is_some()
        || dilation.iter().any(|&d| d != 1)
        || !dense
        || !(x.layout().offset() * size_of::<T>()).is_multiple_of(16)
    {
        return None;
    }
    let p = PoolProblem {
        dtype,
        mode,
        batch: x.shape()[0],
        channels: x.shape()[1],
        input: x.shape()[2..].to_vec(),
        window,
        output: shape[2..].to_vec(),
        stride,
        padding,
        channels_last,
    };
    // `validate` compares the output with the rounded-down size.
    p.validate().is_ok().then_some(p)
}

impl<T: WithDType> Op for Pool<'_, T> {
    type Output = (DeviceBuffer<T>, Option<DeviceBuffer<i64>>);

    fn vendor(self, libs: &Libraries) -> Vendor<Self> {
        let Some(p) = self.dnn.as_ref() else {
            return Vendor::Fallback(self);
        };
        if !vendor_dnn() || libs.dnn().is_none() {
            return Vendor::Fallback(self);
        }
        let (dev, x) = (libs.device(), self.x);
        let library = || Ok(dev.dnn_pool(p, x.buf(), x.layout().offset(), &self.out)?);
        // Our kernels' trial writes a scratch output (no indices: a pool
        // that wants them never reaches a library).
        let trial = engine::choice::scratch_trial(dev, self.out.len(), |out| {
            let pool = Pool {
                op: self.op,
                kind: self.kind,
                x,
                plan: self.plan.clone(),
                channels_last: self.channels_last,
                dnn: None,
                out,
                idx: None,
            };
            Ok(pool.kernels(dev)?.0)
        });
        match engine::choice::library_if_faster(dev, p, library, trial) {
            Ok(true) => Vendor::Done(Ok((self.out, self.idx))),
            Ok(false) => Vendor::Fallback(self),
            Err(e) => Vendor::Done(Err(e)),
        }
    }

    fn cpu(mut self) -> Result<Self::Output> {
        let p = &self.plan;
        let positions = p.positions();
        let rows = p.batch * p.channels;
        if rows * positions == 0 {
            return Ok((self.out, self.idx));
        }
        let xh = &engine::cpu::host(self.x.buf())[self.x.layout().offset()..];
        let spans: Vec<[(usize, usize, usize); 3]> = (0..positions)
            .map(|q| {
                let [_, oh, ow] = p.out;
                let o = [q / (oh * ow), (q / ow) % oh, q % ow];
                [p.span(0, o[0]), p.span(1, o[1]), p.span(2, o[2])]
            })
            .collect();
        let [_, ih, iw] = p.inp;
        let is_max = self.kind.is_max();
        let mut vals = vec![T::default(); rows * positions];
        // Indices only when asked for: otherwise a slot per row, unused.
        let want_ids = self.idx.is_some();
        let mut ids = vec![0i64; if want_ids { rows * positions } else { rows }];
        let id_chunk = if want_ids { positions } else { 1 };
        vals.par_chunks_mut(positions)
            .zip(ids.par_chunks_mut(id_chunk))
            .enumerate()
            .for_each(|(r, (vrow, irow))| {
                let (n, c) = (r / p.channels, r % p.channels);
                let xb = n * p.xs[0] + c * p.xs[1];
                for (q, s) in spans.iter().enumerate() {
                    let taps = |a: usize, d: usize| s[d].0 + a * p.dilation[d];
                    if is_max {
                        let mut m = f32::NEG_INFINITY;
                        let mut at = (s[0].0 * ih + s[1].0) * iw + s[2].0;
                        for a in 0..s[0].1 {
                            let iz = taps(a, 0);
                            for b in 0..s[1].1 {
                                let iy = taps(b, 1);
                                for e in 0..s[2].1 {
                                    let ix = taps(e, 2);
                                    let v =
                                        widen(xh[xb + iz * p.xs[2] + iy * p.xs[3] + ix * p.xs[4]]);
                                    if pool_max_takes(v, m) {
                                        m = v;
                                        at = (iz * ih + iy) * iw + ix;
                                    }
                                }
                            }
                        }
                        vrow[q] = narrow(m);
                        if want_ids {
                            irow[q] = at as i64;
                        }
                    } else {
                        let mut sum = 0.0f32;
                        for a in 0..s[0].1 {
                            for b in 0..s[1].1 {
                                let base = xb + (s[0].0 + a) * p.xs[2] + (s[1].0 + b) * p.xs[3];
                                for e in 0..s[2].1 {
                                    sum += widen(xh[base + (s[2].0 + e) * p.xs[4]]);
                                }
                            }
                        }
                        let empty = s.iter().any(|t| t.1 == 0);
                        let divisor = if p.divisor != 0 {
                            p.divisor
                        } else {
                            s[0].2 * s[1].2 * s[2].2
                        };
                        vrow[q] = narrow(if empty { 0.0 } else { sum / divisor as f32 });
                    }
                }
            });
        let out = engine::cpu::host_mut(&mut self.out);
        store_rows(out, &vals, p.channels, positions, self.channels_last);
        if let Some(idx) = self.idx.as_mut() {
            let idx = engine::cpu::host_mut(idx);
            store_rows(idx, &ids, p.channels, positions, self.channels_last);
        }
        Ok((self.out, self.idx))
    }

    fn kernels(self, dev: &Device) -> Result<Self::Output> {
        let p = &self.plan;
        let positions = p.positions();
        let rows = p.batch * p.channels;
        if rows * positions == 0 {
            return Ok((self.out, self.idx));
        }
        let fits = |v: usize| v < (1 << 31);
        if !fits(rows) || !fits(positions) || p.inp.iter().any(|&v| !fits(v)) {
            return Err(Error::TooLarge {
                op: self.op,
                shape: self.x.shape().to_vec(),
            });
        }
        let mut geom = p.geom.clone();
        let mut shape = vec![p.batch, p.channels];
        shape.extend_from_slice(&p.out);
        let ys = out_strides(&shape, self.channels_last);
        let header = [
            (P_ROWS, rows),
            (P_CHANNELS, p.channels),
            (P_POSITIONS, positions),
            (P_IN_HW, p.inp[1]),
            (P_IN_HW + 1, p.inp[2]),
            (P_DIVISOR, p.divisor),
        ];
        for (i, v) in header {
            geom[i] = v as u64;
        }
        for d in 0..3 {
            geom[P_OUT + d] = p.out[d] as u64;
            geom[P_DILATION + d] = p.dilation[d] as u64;
        }
        for d in 0..5 {
            geom[P_X_STRIDES + d] = p.xs[d] as u64;
            geom[P_Y_STRIDES + d] = ys[d] as u64;
        }
        let geom = dev.upload_words(&geom)?;
        const BLOCK: usize = 256;
        let blocks = positions.div_ceil(BLOCK);
        if blocks > MAX_GRID_X as usize {
            return Err(Error::TooLarge {
                op: self.op,
                shape: self.x.shape().to_vec(),
            });
        }
        let cfg = LaunchConfig {
            grid: [
                blocks as u32,
                super::row_groups_by(rows, blocks, POOL_ROWS_AT_ONCE),
                1,
            ],
            block: [BLOCK as u32, 1, 1],
            lds_bytes: 0,
            early_start: false,
        };
        let unsupported = || Error::UnsupportedDType {
            op: self.op,
            dtype: T::DTYPE,
        };
        let y = Out::new(self.out.view_as::<T::Kernel>().expect("same size"));
        if self.kind.is_max() {
            // Indices only where asked for: the values-only kernel tracks none.
            match &self.idx {
                Some(b) => {
                    let kernel = T::Kernel::POOL_MAX.ok_or_else(unsupported)?;
                    let args = (y, Out::new(b), self.x.input(), In::new(&geom));
                    dev.launch_typed(kernel, cfg, args)?;
                }
                None => {
                    let kernel = T::Kernel::POOL_MAX_VALUES.ok_or_else(unsupported)?;
                    dev.launch_typed(kernel, cfg, (y, self.x.input(), In::new(&geom)))?;
                }
            }
        } else {
            let kernel = T::Kernel::POOL_AVG.ok_or_else(unsupported)?;
            dev.launch_typed(kernel, cfg, (y, self.x.input(), In::new(&geom)))?;
        }
        Ok((self.out, self.idx))
    }
}
