//! Normalisation over the channels of `(N, C, spatial..)` tensors:
//! PyTorch's `group_norm`, `instance_norm` (input statistics) and
//! `batch_norm` in inference form (running statistics). API, Cpu
//! implementation, kernel path.
//!
//! f32, f16 and bf16, computed in f32 and rounded once. Inputs are read at
//! their strides when the spatial dims merge into one (contiguous NCHW, or
//! a channels-last view, whose output is channels-last too); other views
//! are copied first. Statistics are the biased variance of the
//! shifted-data sums ([`ferrocm_kernels::nn::norm::layer_stats`], shared
//! with LayerNorm) and the output `(x - mean) / sqrt(var + eps) * w + b`
//! ([`ferrocm_kernels::nn::norm::norm_apply`]), the same two functions on
//! the Cpu and in the kernels (`channel_stats_*`, `channel_norm_*`).

use crate::conv::{elems, is_channels_last, narrow, out_strides, spatial_output, widen};
use crate::core::dtype::DType;
use crate::core::dtype::WithDType;
use crate::core::error::{Error, Result};
use crate::core::tensor::Tensor;
use crate::engine::{self, Libraries, Op, Vendor};
use ferrocm_host::dnn::{BatchNormProblem, DnnType};
use ferrocm_host::launch::MAX_GRID_X;
use ferrocm_host::{Device, DeviceBuffer, In, LaunchConfig, Out};
use ferrocm_kernels::device::CHUNK;
use ferrocm_kernels::nn::channel_norm::{
    CHANNEL_NORM_BLOCK, CHANNEL_STATS_BLOCK, CN_BATCH, CN_CHANNELS, CN_CHANNELS_PER_GROUP,
    CN_FLAGS, CN_HEADER, CN_NORM_CHUNKS, CN_POSITIONS, CN_STATS_CHUNKS, CN_STATS_PER_IMAGE,
    CN_X_STRIDES, CN_Y_STRIDES, ChannelNormKernels,
};
use ferrocm_kernels::norm::{NORM_LDS_BYTES, layer_stats, norm_apply};
use rayon::prelude::*;

/// An `(N, C, S)` view of a `(N, C, spatial..)` tensor: its strides, when
/// the spatial dims merge into one stride.
fn ncs_strides(shape: &[usize], strides: &[usize]) -> Option<[usize; 3]> {
    let mut s_stride = None::<usize>;
    let mut expect = None::<usize>;
    for d in (2..shape.len()).rev() {
        if shape[d] == 1 {
            continue;
        }
        match expect {
            Some(e) if strides[d] != e => return None,
            None => s_stride = Some(strides[d]),
            _ => {}
        }
        expect = Some(strides[d] * shape[d]);
    }
    Some([strides[0], strides[1], s_stride.unwrap_or(1)])
}

/// The compute units [`Geom::fused_grid`] takes the emulator to have: few,
/// so that its workgroups each take several rows where there are many,
/// and under 4 rows take the two kernels.
const EMULATED_UNITS: usize = 16;

/// The geometry header shared by the kernels.
#[derive(Clone, Copy, Debug)]
struct Geom {
    batch: usize,
    channels: usize,
    per_group: usize,
    stats_per_image: usize,
    positions: usize,
    xs: [usize; 3],
    ys: [usize; 3],
    /// The chunked paths that hold ([`CN_NORM_CHUNKS`], [`CN_STATS_CHUNKS`]).
    flags: u64,
}

impl Geom {
    /// The chunked paths of `x` starting `x_offset` elements of `T` into its
    /// buffer (16-byte aligned, as every allocation is) and a fresh output:
    /// whole chunks of positions, contiguous, every row a whole number of
    /// chunks from the start. The stats rows take their chunks as one run
    /// where a group's channels lie back to back.
    fn chunk_flags<T>(&self, x_offset: usize) -> u64 {
        let chunk = CHUNK as usize;
        let whole = |st: [usize; 3]| {
            st[2] == 1 && st[0].is_multiple_of(chunk) && st[1].is_multiple_of(chunk)
        };
        let x_chunks = self.positions.is_multiple_of(chunk)
            && whole(self.xs)
            && (x_offset * size_of::<T>()).is_multiple_of(16);
        let mut flags = 0;
        if x_chunks && whole(self.ys) {
            flags |= CN_NORM_CHUNKS;
        }
        if x_chunks && (self.per_group == 1 || self.xs[1] == self.positions) {
            flags |= CN_STATS_CHUNKS;
        }
        flags
    }

    /// Grid x of `channel_norm_*`: a workitem a position, or a chunk of them.
    fn norm_blocks(&self) -> usize {
        let per_item = if self.flags & CN_NORM_CHUNKS != 0 {
            CHUNK as usize
        } else {
            1
        };
        self.positions
            .div_ceil(per_item)
            .div_ceil(CHANNEL_NORM_BLOCK as usize)
    }

    /// Grid x of `channel_group_norm_*` where it serves: both chunked paths
    /// hold, each group's channels lie back to back in the output too, and
    /// there are stat rows for at least a quarter of the compute units
    /// (`units`; the emulator's taken as [`EMULATED_UNITS`]). One workgroup
    /// a unit at most: a Stable-Diffusion group is 160 KB of f32, so the
    /// rows in flight (21 MB on an H100's 132 units) stay in its 50 MB
    /// cache between their two reads. On the H100 the one kernel took 16%
    /// less time than the two at 1024 rows and 30% less at 64, where the
    /// whole input fits the cache; two workgroups a unit gained under 1%.
    fn fused_grid(&self, units: Option<usize>) -> Option<usize> {
        let units = units.unwrap_or(EMULATED_UNITS).max(1);
        let rows = self.batch * self.stats_per_image;
        let chunks = CN_NORM_CHUNKS | CN_STATS_CHUNKS;
        let grouped_out = self.per_group == 1 || self.ys[1] == self.positions;
        (self.stats_per_image > 0
            && self.flags & chunks == chunks
            && grouped_out
            && 4 * rows >= units)
            .then(|| rows.min(units).min(MAX_GRID_X as usize))
    }

    fn words(&self) -> Vec<u64> {
        let mut g = vec![0u64; CN_HEADER];
        g[CN_BATCH] = self.batch as u64;
        g[CN_CHANNELS] = self.channels as u64;
        g[CN_CHANNELS_PER_GROUP] = self.per_group as u64;
        g[CN_STATS_PER_IMAGE] = self.stats_per_image as u64;
        g[CN_POSITIONS] = self.positions as u64;
        for d in 0..3 {
            g[CN_X_STRIDES + d] = self.xs[d] as u64;
            g[CN_Y_STRIDES + d] = self.ys[d] as u64;
        }
        g[CN_FLAGS] = self.flags;
        g
    }

    fn fits(&self) -> bool {
        let f = |v: usize| v < (1 << 31);
        f(self.batch * self.channels) && f(self.positions) && f(self.per_group * self.positions)
    }
}

impl<T: WithDType> Tensor<T> {
    /// Group normalisation (PyTorch's `group_norm`): the channels of `(N, C,
    /// spatial..)` split into `groups`, each image's group normalised by its
    /// own mean and biased variance, then `* weight[c] + bias[c]` (each
    /// `(C)`, optional).
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// // One image, 2 channels of 2 positions, one group: mean 2.5, var 1.25.
    /// let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[1, 2, 2], &Device::Cpu)?;
    /// let y = x.group_norm(1, None, None, 0.0)?.to_vec()?;
    /// let s = 1.25f32.sqrt();
    /// let want = [-1.5 / s, -0.5 / s, 0.5 / s, 1.5 / s];
    /// assert!(y.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-6));
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::UnsupportedDType`] for integer dtypes; [`Error::BadParameter`]
    /// for an input of rank below 2, `groups` 0 or not dividing C, a weight
    /// or bias that is not `(C)`; [`Error::TooLarge`] past the kernels'
    /// 32-bit limits; [`Error::DeviceMismatch`]; [`Error::Host`].
    pub fn group_norm(
        &self,
        groups: usize,
        weight: Option<&Self>,
        bias: Option<&Self>,
        eps: f32,
    ) -> Result<Self> {
        let op = "group_norm";
        self.check_channel_norm(op, 2, weight, bias)?;
        let c = self.shape()[1];
        if groups == 0 || !c.is_multiple_of(groups) {
            return Err(Error::BadParameter {
                op,
                what: format!("groups {groups} must be at least 1 and divide the channels {c}"),
            });
        }
        self.channel_norm(op, Stats::Input { groups, eps }, weight, bias)
    }

    /// Instance normalisation with the input's statistics (PyTorch's
    /// `instance_norm`, `use_input_stats=True`): every channel of every
    /// image normalised over its positions, then `* weight[c] + bias[c]`
    /// (optional). Group normalisation with a group per channel.
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let x = Tensor::from_slice(&[1.0f32, 3.0, 10.0, 30.0], &[1, 2, 2], &Device::Cpu)?;
    /// assert_eq!(x.instance_norm(None, None, 0.0)?.to_vec()?, vec![-1.0, 1.0, -1.0, 1.0]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Tensor::group_norm`]; [`Error::BadParameter`] for an input of
    /// rank below 3 or of one position per channel (PyTorch's rule: its
    /// variance would be 0).
    pub fn instance_norm(
        &self,
        weight: Option<&Self>,
        bias: Option<&Self>,
        eps: f32,
    ) -> Result<Self> {
        let op = "instance_norm";
        self.check_channel_norm(op, 3, weight, bias)?;
        if self.shape()[2..].iter().product::<usize>() == 1 {
            return Err(Error::BadParameter {
                op,
                what: format!(
                    "instance statistics need more than one position per channel, shape {:?}",
                    self.shape()
                ),
            });
        }
        let groups = self.shape()[1];
        self.channel_norm(op, Stats::Input { groups, eps }, weight, bias)
    }

    /// Batch normalisation in inference form (PyTorch's `batch_norm` with
    /// `training=False`): `(x - running_mean[c]) / sqrt(running_var[c] +
    /// eps) * weight[c] + bias[c]` over `(N, C, spatial..)` or `(N, C)`.
    /// The statistics (each `(C)`) are not updated.
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let x = Tensor::from_slice(&[1.0f32, 2.0, 5.0, 6.0], &[2, 2], &Device::Cpu)?;
    /// let mean = Tensor::from_slice(&[1.0f32, 2.0], &[2], &Device::Cpu)?;
    /// let var = Tensor::from_slice(&[4.0f32, 1.0], &[2], &Device::Cpu)?;
    /// let y = x.batch_norm(&mean, &var, None, None, 0.0)?;
    /// assert_eq!(y.to_vec()?, vec![0.0, 0.0, 2.0, 4.0]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Tensor::group_norm`]; [`Error::BadParameter`] for running
    /// statistics that are not `(C)`.
    pub fn batch_norm(
        &self,
        running_mean: &Self,
        running_var: &Self,
        weight: Option<&Self>,
        bias: Option<&Self>,
        eps: f32,
    ) -> Result<Self> {
        let op = "batch_norm";
        self.check_channel_norm(op, 2, weight, bias)?;
        let c = self.shape()[1];
        for (name, t) in [("running_mean", running_mean), ("running_var", running_var)] {
            self.same_device(op, t)?;
            if t.shape() != [c] {
                return Err(Error::BadParameter {
                    op,
                    what: format!("{name} must have shape [{c}] (C), shape {:?}", t.shape()),
                });
            }
        }
        // Per channel, in f32: the mean and the variance (a DNN library
        // takes them with eps; ours take 1 / sqrt(var + eps)).
        let mean = running_mean.to_dtype::<f32>()?.contiguous()?;
        let var = running_var.to_dtype::<f32>()?.contiguous()?;
        self.channel_norm(op, Stats::Given { mean, var, eps }, weight, bias)
    }

    fn check_channel_norm(
        &self,
        op: &'static str,
        min_rank: usize,
        weight: Option<&Self>,
        bias: Option<&Self>,
    ) -> Result<()> {
        if !T::DTYPE.is_float() {
            return Err(Error::UnsupportedDType {
                op,
                dtype: T::DTYPE,
            });
        }
        if self.rank() < min_rank {
            return Err(Error::BadParameter {
                op,
                what: format!(
                    "the input must have rank {min_rank} or more (N, C, ..), shape {:?}",
                    self.shape()
                ),
            });
        }
        let c = self.shape()[1];
        for (name, t) in [("weight", weight), ("bias", bias)] {
            if let Some(t) = t {
                self.same_device(op, t)?;
                if t.shape() != [c] {
                    return Err(Error::BadParameter {
                        op,
                        what: format!(
                            "the {name} must have shape [{c}] (C), shape {:?}",
                            t.shape()
                        ),
                    });
                }
            }
        }
        Ok(())
    }

    fn channel_norm(
        &self,
        op: &'static str,
        stats: Stats,
        weight: Option<&Self>,
        bias: Option<&Self>,
    ) -> Result<Self> {
        let x = match ncs_strides(self.shape(), self.layout().strides()) {
            Some(_) => self.clone(),
            None => self.contiguous()?,
        };
        let xs = ncs_strides(x.shape(), x.layout().strides()).expect("merged");
        let shape = x.shape().to_vec();
        let channels_last = x.rank() > 2 && is_channels_last(&x);
        let st = out_strides(&shape, channels_last);
        let ys = [
            st[0],
            st[1],
            if shape.len() > 2 {
                st[shape.len() - 1]
            } else {
                1
            },
        ];
        let (batch, channels) = (shape[0], shape[1]);
        let positions: usize = shape[2..].iter().product();
        let n_out = crate::core::layout::checked_count(op, &shape, size_of::<T>())?;
        let dev = x.device().clone();
        let (per_group, stats_per_image) = match &stats {
            // (No channels: no groups either, and nothing to compute.)
            Stats::Input { groups, .. } => (channels / (*groups).max(1), *groups),
            Stats::Given { .. } => (1, 0),
        };
        let mut geom = Geom {
            batch,
            channels,
            per_group,
            stats_per_image,
            positions,
            xs,
            ys,
            flags: 0,
        };
        geom.flags = geom.chunk_flags::<T>(x.layout().offset());
        let out = dev.alloc::<T>(n_out)?;
        if n_out == 0 {
            return spatial_output(out, &shape, channels_last);
        }
        let weight = weight.map(|w| w.contiguous()).transpose()?;
        let bias = bias.map(|b| b.contiguous()).transpose()?;
        let buf = match stats {
            Stats::Input { eps, .. } => engine::run(
                &dev,
                ComputedNorm {
                    op,
                    x: &x,
                    geom,
                    eps,
                    w: weight.as_ref(),
                    b: bias.as_ref(),
                    channels_last,
                    out,
                },
            )?,
            Stats::Given { mean, var, eps } => engine::run(
                &dev,
                ChannelNorm {
                    op,
                    x: &x,
                    geom,
                    mean: &mean,
                    rstd: &Rstd::OfVariance(var, eps),
                    w: weight.as_ref(),
                    b: bias.as_ref(),
                    channels_last,
                    out,
                },
            )?,
        };
        spatial_output(buf, &shape, channels_last)
    }
}

impl crate::DynTensor {
    /// [`Tensor::group_norm`] for a dtype known at run time (`weight` and
    /// `bias` of the input's dtype).
    ///
    /// # Errors
    /// [`Error::DTypeMismatch`] when the dtypes differ; as [`Tensor::group_norm`].
    pub fn group_norm(
        &self,
        groups: usize,
        weight: Option<&Self>,
        bias: Option<&Self>,
        eps: f32,
    ) -> Result<Self> {
        for t in [weight, bias].into_iter().flatten() {
            self.same_dtype("group_norm", t)?;
        }
        crate::core::dyn_tensor::with_dtype!(self, "group_norm", |t| {
            let w = weight.map(|w| w.typed()).transpose()?;
            let b = bias.map(|b| b.typed()).transpose()?;
            Ok(t.group_norm(groups, w.as_ref(), b.as_ref(), eps)?.into())
        })
    }
}

/// Where the statistics come from.
enum Stats {
    /// Each image's groups, computed.
    Input { groups: usize, eps: f32 },
    /// Per channel, given (a batch norm's running statistics): the mean
    /// and the variance, f32, and eps.
    Given {
        mean: Tensor<f32>,
        var: Tensor<f32>,
        eps: f32,
    },
}

/// Each stat row's `1 / sqrt(var + eps)`: computed with the mean, or, for a
/// batch norm, worked out from its variance only where ferrocm's path runs
/// (a DNN library takes the variance and eps).
enum Rstd {
    Computed(Tensor<f32>),
    OfVariance(Tensor<f32>, f32),
}

impl Rstd {
    fn get(&self) -> Result<std::borrow::Cow<'_, Tensor<f32>>> {
        Ok(match self {
            Rstd::Computed(r) => std::borrow::Cow::Borrowed(r),
            Rstd::OfVariance(v, eps) => {
                std::borrow::Cow::Owned(v.affine(1.0, *eps)?.rsqrt()?.contiguous()?)
            }
        })
    }
}

/// A norm by the input's own statistics (group and instance norm): the
/// statistics, then the normalisation. On the kernel path the two are one
/// kernel (`channel_group_norm_*`) where [`Geom::fused_grid`] allows.
struct ComputedNorm<'a, T: WithDType> {
    op: &'static str,
    x: &'a Tensor<T>,
    geom: Geom,
    eps: f32,
    w: Option<&'a Tensor<T>>,
    b: Option<&'a Tensor<T>>,
    channels_last: bool,
    out: DeviceBuffer<T>,
}

impl<T: WithDType> ComputedNorm<'_, T> {
    /// The statistics op, its outputs allocated.
    fn stats(&self) -> Result<ChannelStats<'_, T>> {
        let rows = self.geom.batch * self.geom.stats_per_image;
        let dev = self.x.device();
        Ok(ChannelStats {
            op: self.op,
            x: self.x,
            geom: self.geom,
            eps: self.eps,
            mean: dev.alloc::<f32>(rows)?,
            rstd: dev.alloc::<f32>(rows)?,
        })
    }

    /// The normalisation by computed statistics, run by `run` (a path).
    fn normalise(
        self,
        (mean, rstd): (DeviceBuffer<f32>, DeviceBuffer<f32>),
        run: impl FnOnce(ChannelNorm<'_, T>) -> Result<DeviceBuffer<T>>,
    ) -> Result<DeviceBuffer<T>> {
        let rows = self.geom.batch * self.geom.stats_per_image;
        let mean = Tensor::from_parts(mean, &[rows]);
        let rstd = Rstd::Computed(Tensor::from_parts(rstd, &[rows]));
        run(ChannelNorm {
            op: self.op,
            x: self.x,
            geom: self.geom,
            mean: &mean,
            rstd: &rstd,
            w: self.w,
            b: self.b,
            channels_last: self.channels_last,
            out: self.out,
        })
    }
}

impl<T: WithDType> Op for ComputedNorm<'_, T> {
    type Output = DeviceBuffer<T>;

    fn cpu(self) -> Result<DeviceBuffer<T>> {
        let stats = self.stats()?.cpu()?;
        self.normalise(stats, |n| n.cpu())
    }

    fn kernels(self, dev: &Device) -> Result<DeviceBuffer<T>> {
        let units = dev.gpu_info().map(|i| i.compute_units as usize);
        let Some(grid) = self.geom.fused_grid(units) else {
            let stats = self.stats()?.kernels(dev)?;
            return self.normalise(stats, |n| n.kernels(dev));
        };
        let g = self.geom;
        if !g.fits() {
            return Err(Error::TooLarge {
                op: self.op,
                shape: self.x.shape().to_vec(),
            });
        }
        let kernel = T::Kernel::CHANNEL_GROUP_NORM.ok_or(Error::UnsupportedDType {
            op: self.op,
            dtype: T::DTYPE,
        })?;
        let geom = dev.upload_words(&g.words())?;
        let cfg = LaunchConfig {
            grid: [grid as u32, 1, 1],
            block: [CHANNEL_STATS_BLOCK, 1, 1],
            lds_bytes: NORM_LDS_BYTES,
            early_start: false,
        };
        let args = (
            Out::new(self.out.view_as::<T::Kernel>().expect("same size")),
            self.x.input(),
            self.w.map_or_else(In::null, |t| t.input()),
            self.b.map_or_else(In::null, |t| t.input()),
            In::new(&geom),
            self.eps,
        );
        dev.launch_typed(kernel, cfg, args)?;
        Ok(self.out)
    }
}

/// The statistics of every `(image, group)`.
struct ChannelStats<'a, T: WithDType> {
    op: &'static str,
    x: &'a Tensor<T>,
    geom: Geom,
    eps: f32,
    mean: DeviceBuffer<f32>,
    rstd: DeviceBuffer<f32>,
}

impl<T: WithDType> Op for ChannelStats<'_, T> {
    type Output = (DeviceBuffer<f32>, DeviceBuffer<f32>);

    fn cpu(mut self) -> Result<Self::Output> {
        let g = self.geom;
        let xh = &engine::cpu::host(self.x.buf())[self.x.layout().offset()..];
        let count = g.per_group * g.positions;
        let stats: Vec<(f32, f32)> = (0..g.batch * g.stats_per_image)
            .into_par_iter()
            .map(|r| {
                let (n, grp) = (r / g.stats_per_image, r % g.stats_per_image);
                let base = n * g.xs[0] + grp * g.per_group * g.xs[1];
                let shift = widen(xh[base]);
                let (mut s1, mut s2) = (0.0f64, 0.0f64);
                for c in 0..g.per_group {
                    let cb = base + c * g.xs[1];
                    for s in 0..g.positions {
                        let d = (widen(xh[cb + s * g.xs[2]]) - shift) as f64;
                        s1 += d;
                        s2 += d * d;
                    }
                }
                layer_stats(shift, s1 as f32, s2 as f32, count as u32, self.eps)
            })
            .collect();
        let m = engine::cpu::host_mut(&mut self.mean);
        for (d, s) in m.iter_mut().zip(&stats) {
            *d = s.0;
        }
        let r = engine::cpu::host_mut(&mut self.rstd);
        for (d, s) in r.iter_mut().zip(&stats) {
            *d = s.1;
        }
        Ok((self.mean, self.rstd))
    }

    fn kernels(self, dev: &Device) -> Result<Self::Output> {
        let g = self.geom;
        if !g.fits() {
            return Err(Error::TooLarge {
                op: self.op,
                shape: self.x.shape().to_vec(),
            });
        }
        let kernel = T::Kernel::CHANNEL_STATS.ok_or(Error::UnsupportedDType {
            op: self.op,
            dtype: T::DTYPE,
        })?;
        let rows = g.batch * g.stats_per_image;
        let geom = dev.upload_words(&g.words())?;
        let cfg = LaunchConfig {
            grid: [rows.min(MAX_GRID_X as usize) as u32, 1, 1],
            block: [CHANNEL_STATS_BLOCK, 1, 1],
            lds_bytes: NORM_LDS_BYTES,
            early_start: false,
        };
        let args = (
            Out::new(&self.mean),
            Out::new(&self.rstd),
            self.x.input(),
            In::new(&geom),
            self.eps,
        );
        dev.launch_typed(kernel, cfg, args)?;
        Ok((self.mean, self.rstd))
    }
}

/// `(x - mean) * rstd * w + b` with each row's statistics.
struct ChannelNorm<'a, T: WithDType> {
    op: &'static str,
    x: &'a Tensor<T>,
    geom: Geom,
    mean: &'a Tensor<f32>,
    rstd: &'a Rstd,
    w: Option<&'a Tensor<T>>,
    b: Option<&'a Tensor<T>>,
    channels_last: bool,
    out: DeviceBuffer<T>,
}

impl<T: WithDType> ChannelNorm<'_, T> {
    /// The batch norm as a library problem: a float dtype, the input dense
    /// (NC.. or channels-last, as the output is) from a 16-byte aligned
    /// start.
    fn dnn_problem(&self) -> Option<BatchNormProblem> {
        let dtype = match T::DTYPE {
            DType::F32 => DnnType::F32,
            DType::F16 => DnnType::F16,
            DType::BF16 => DnnType::Bf16,
            _ => return None,
        };
        let g = &self.geom;
        let dense = match self.channels_last {
            true => g.xs == [g.positions * g.channels, 1, g.channels],
            false => g.xs == [g.channels * g.positions, g.positions, 1] || g.positions == 1,
        };
        let aligned = (self.x.layout().offset() * size_of::<T>()).is_multiple_of(16);
        let p = BatchNormProblem {
            dtype,
            batch: g.batch,
            channels: g.channels,
            positions: g.positions,
            channels_last: self.channels_last,
        };
        (dense && aligned && g.xs == g.ys && p.validate().is_ok()).then_some(p)
    }
}

impl<T: WithDType> Op for ChannelNorm<'_, T> {
    type Output = DeviceBuffer<T>;

    fn vendor(self, libs: &Libraries) -> Vendor<Self> {
        let (Rstd::OfVariance(var, eps), Some(p)) = (self.rstd, self.dnn_problem()) else {
            return Vendor::Fallback(self);
        };
        if !crate::conv::vendor_dnn() || libs.dnn().is_none() {
            return Vendor::Fallback(self);
        }
        let dev = libs.device();
        // The library takes f32 vectors: the affine ones widened, or 1 and 0.
        let vector = |t: Option<&Tensor<T>>, fill: f32| match t {
            Some(t) => t.to_dtype::<f32>()?.contiguous(),
            None => Tensor::full(fill, &[p.channels], dev),
        };
        fn at(t: &Tensor<f32>) -> (&DeviceBuffer<f32>, usize) {
            (t.buf(), t.layout().offset())
        }
        let x = self.x;
        // The vectors made on each library run (part of its time), none
        // where the kernels are chosen.
        let library = || {
            let (scale, bias) = (vector(self.w, 1.0)?, vector(self.b, 0.0)?);
            Ok(dev.dnn_batch_norm(
                &p,
                x.buf(),
                x.layout().offset(),
                &self.out,
                [at(&scale), at(&bias), at(self.mean), at(var)],
                f64::from(*eps),
            )?)
        };
        // Our kernel's trial writes a scratch output.
        let trial = engine::choice::scratch_trial(dev, self.out.len(), |out| {
            let norm = ChannelNorm {
                op: self.op,
                x,
                geom: self.geom,
                mean: self.mean,
                rstd: self.rstd,
                w: self.w,
                b: self.b,
                channels_last: self.channels_last,
                out,
            };
            norm.kernels(dev)
        });
        // The problem and its affine's presence: with neither weight nor
        // bias the library's path adds two fills.
        let key = (&p, self.w.is_some(), self.b.is_some());
        match engine::choice::library_if_faster(dev, &key, library, trial) {
            Ok(true) => Vendor::Done(Ok(self.out)),
            Ok(false) => Vendor::Fallback(self),
            Err(e) => Vendor::Done(Err(e)),
        }
    }

    fn cpu(mut self) -> Result<DeviceBuffer<T>> {
        let g = self.geom;
        let xh = &engine::cpu::host(self.x.buf())[self.x.layout().offset()..];
        let rstd = self.rstd.get()?;
        let (mean, rstd) = (elems(self.mean), elems(&rstd));
        let w: Vec<f32> = match self.w {
            Some(w) => elems(w).iter().map(|&v| widen(v)).collect(),
            None => vec![1.0; g.channels],
        };
        let b: Vec<f32> = match self.b {
            Some(b) => elems(b).iter().map(|&v| widen(v)).collect(),
            None => vec![-0.0; g.channels],
        };
        let rows: Vec<Vec<T>> = (0..g.batch * g.channels)
            .into_par_iter()
            .map(|r| {
                let (n, c) = (r / g.channels, r % g.channels);
                let stat = n * g.stats_per_image + c / g.per_group;
                let base = n * g.xs[0] + c * g.xs[1];
                (0..g.positions)
                    .map(|s| {
                        let v = widen(xh[base + s * g.xs[2]]);
                        narrow(norm_apply(v, mean[stat], rstd[stat], w[c], b[c]))
                    })
                    .collect()
            })
            .collect();
        let out = engine::cpu::host_mut(&mut self.out);
        for (r, row) in rows.iter().enumerate() {
            let (n, c) = (r / g.channels, r % g.channels);
            let base = n * g.ys[0] + c * g.ys[1];
            for (s, &v) in row.iter().enumerate() {
                out[base + s * g.ys[2]] = v;
            }
        }
        Ok(self.out)
    }

    fn kernels(self, dev: &Device) -> Result<DeviceBuffer<T>> {
        let g = self.geom;
        let blocks = g.norm_blocks();
        if !g.fits() || blocks > MAX_GRID_X as usize {
            return Err(Error::TooLarge {
                op: self.op,
                shape: self.x.shape().to_vec(),
            });
        }
        let kernel = T::Kernel::CHANNEL_NORM.ok_or(Error::UnsupportedDType {
            op: self.op,
            dtype: T::DTYPE,
        })?;
        let rows = g.batch * g.channels;
        let rstd = self.rstd.get()?;
        let geom = dev.upload_words(&g.words())?;
        let cfg = LaunchConfig {
            grid: [blocks as u32, crate::conv::row_groups(rows, blocks), 1],
            block: [CHANNEL_NORM_BLOCK, 1, 1],
            lds_bytes: 0,
            early_start: false,
        };
        let args = (
            Out::new(self.out.view_as::<T::Kernel>().expect("same size")),
            self.x.input(),
            self.mean.input(),
            rstd.input(),
            self.w.map_or_else(In::null, |t| t.input()),
            self.b.map_or_else(In::null, |t| t.input()),
            In::new(&geom),
        );
        dev.launch_typed(kernel, cfg, args)?;
        Ok(self.out)
    }
}
