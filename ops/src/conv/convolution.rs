//! Convolution in 1, 2 and 3 spatial dims (PyTorch's `conv1d`, `conv2d`,
//! `conv3d`) and transposed convolution (`conv_transpose1d` .. `3d`): API,
//! Cpu implementation, kernel path.
//!
//! f32, f16 and bf16, accumulated in f32 and rounded once (after the bias).
//! Any stride, padding (each side of each dim on its own), dilation and
//! groups, depthwise included. The input is read at its strides: an NHWC
//! buffer viewed as NCHW (`x.permute([0, 3, 1, 2])`) runs without a copy,
//! and the output then comes back in the same channels-last form (an NCHW
//! view of NHWC memory), as PyTorch's `channels_last` format does.
//!
//! Kernel devices run an implicit GEMM (no column buffer in memory) when a
//! group has at least [`CONV_GEMM_MIN_COUT_G`] output channels:
//! `conv_mma_{dtype}` on the matrix units for f16/bf16 with a multiple of 8
//! input channels per group (`conv_wgmma_{dtype}`, the same on Hopper's
//! warpgroup product, where `Device::warpgroup_mma` holds), else
//! `conv_gemm_{dtype}` on FMA tiles, its reduction split across workgroups
//! when the output has too few tiles to fill the GPU (`split_reduction`);
//! with fewer output channels, `conv_direct_{dtype}` (a workitem per
//! output, as a depthwise convolution wants). The Cpu builds the columns (im2col) of a
//! block of output lines at a time, in a buffer that stays in the cache, and
//! multiplies them on the tuned CPU GEMM, a block per task on its own
//! thread; or sums windows directly for the same few-channel groups.
//!
//! A transposed convolution runs on kernel devices as one convolution per
//! output phase (the output position modulo the stride, per dim): the
//! outputs of a phase take a fixed subset of the taps, each from input `m +
//! e` for output `phase + stride · m`, so a phase is a stride-1 convolution
//! with those taps, written at stride `stride` from its first output, on the
//! same kernels; no product with a zero between two inputs is made. Where
//! every phase takes as many taps (e.g. an undilated kernel a multiple of
//! the stride, as the 4x4/2 upsampling layer; a dilation sharing a factor
//! with the stride gives phases without taps) all phases run in one launch,
//! the phase in the grid's z, their weights gathered in one pass; otherwise
//! a launch a phase. On the Cpu it is a GEMM per image and group (`W_gᵀ · X_g`, every tap of every
//! input) whose rows are then added into the output where each tap lands
//! (col2im).

use crate::core::dtype::DType;
use crate::core::dtype::WithDType;
use crate::core::error::{Error, Result};
use crate::core::tensor::Tensor;
use crate::engine::{self, Libraries, Op, Vendor};
use crate::matmul::dense::{sgemm, sgemm_rows};
use ferrocm_host::dnn::{ConvProblem, DnnConv, DnnType};
use ferrocm_host::launch::{MAX_GRID_X, MAX_GRID_YZ};
use ferrocm_host::{Device, DeviceBuffer, In, LaunchConfig, Out};
use ferrocm_kernels::conv::convolution::{
    CONV_GEMM_BLOCK, CONV_GEMM_BM, CONV_GEMM_BN, CONV_GEMM_LDS_BYTES, CONV_GEMM_MIN_COUT_G,
    ConvKernels, G_BATCH, G_CIN_G, G_COUT_G, G_IN, G_K, G_OFFSET_BITS, G_OUT_HW, G_PAD,
    G_PART_FIRST, G_PHASE_WORDS, G_POSITIONS, G_STRIDE, G_TABLE, G_W_FIRST, G_X_STRIDES, G_Y_FIRST,
    G_Y_STRIDES,
};
use ferrocm_kernels::matmul::{GEMM_BK, MMA_BLOCK, MMA_BM, MMA_BN, MMA_LDS_BYTES, WGMMA_LDS_BYTES};
use rayon::prelude::*;
use std::borrow::Cow;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use super::{elems, narrow, out_strides, per_dim, widen};

/// The parameters of a convolution besides its operands: PyTorch's
/// `stride`, `padding`, `dilation` and `groups`, and a transposed
/// convolution's `output_padding`. A list of one value applies to every
/// spatial dim; otherwise it has one entry per spatial dim.
///
/// ```
/// use ferrocm_ops::conv::ConvOptions;
/// let o = ConvOptions::new().stride(&[2]).padding(&[3]).groups(1);
/// assert_eq!(o.padding, vec![(3, 3)]);
/// let a = ConvOptions::new().padding_each_side(&[(0, 1), (1, 0)]);
/// assert_eq!(a.padding, vec![(0, 1), (1, 0)]);
/// let t = ConvOptions::new().stride(&[2]).output_padding(&[1]);
/// assert_eq!(t.output_padding, vec![1]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConvOptions {
    /// The window's step along each spatial dim (default 1).
    pub stride: Vec<usize>,
    /// Zeros added before and after each spatial dim (default none). For a
    /// transposed convolution, the positions cut from the start and end of
    /// each dim of the full output, as PyTorch's `padding` there.
    pub padding: Vec<(usize, usize)>,
    /// The spacing of the kernel's taps along each spatial dim (default 1).
    pub dilation: Vec<usize>,
    /// Channel groups: input and output channels split into this many
    /// independent convolutions (default 1; the channel count for a
    /// depthwise convolution).
    pub groups: usize,
    /// A transposed convolution's extra positions at the end of each
    /// spatial dim (default 0; below the stride or the dilation), which pick
    /// one of the input sizes a stride > 1 maps to the same output size. A
    /// convolution refuses any but 0.
    pub output_padding: Vec<usize>,
}

impl Default for ConvOptions {
    fn default() -> Self {
        Self {
            stride: vec![1],
            padding: vec![(0, 0)],
            dilation: vec![1],
            groups: 1,
            output_padding: vec![0],
        }
    }
}

impl ConvOptions {
    /// Stride 1, no padding, dilation 1, one group.
    pub fn new() -> Self {
        Self::default()
    }

    /// The stride along each spatial dim (one value: all of them).
    pub fn stride(mut self, stride: &[usize]) -> Self {
        self.stride = stride.to_vec();
        self
    }

    /// The same padding on both sides of each spatial dim (one value: all
    /// of them).
    pub fn padding(mut self, padding: &[usize]) -> Self {
        self.padding = padding.iter().map(|&p| (p, p)).collect();
        self
    }

    /// `(before, after)` padding of each spatial dim (one pair: all of them).
    pub fn padding_each_side(mut self, padding: &[(usize, usize)]) -> Self {
        self.padding = padding.to_vec();
        self
    }

    /// The dilation along each spatial dim (one value: all of them).
    pub fn dilation(mut self, dilation: &[usize]) -> Self {
        self.dilation = dilation.to_vec();
        self
    }

    /// The number of channel groups.
    pub fn groups(mut self, groups: usize) -> Self {
        self.groups = groups;
        self
    }

    /// A transposed convolution's output padding (one value: all dims).
    pub fn output_padding(mut self, output_padding: &[usize]) -> Self {
        self.output_padding = output_padding.to_vec();
        self
    }
}

static VENDOR_DNN: AtomicBool = AtomicBool::new(true);
static VENDOR_DNN_ENV: std::sync::Once = std::sync::Once::new();

/// `FERROCM_VENDOR_DNN=0` in the environment starts the process with the
/// DNN library off.
fn vendor_dnn_from_env() {
    VENDOR_DNN_ENV.call_once(|| {
        if std::env::var("FERROCM_VENDOR_DNN").is_ok_and(|v| v == "0") {
            VENDOR_DNN.store(false, Ordering::Relaxed);
        }
    });
}

/// Whether convolutions and pools may use the GPU's DNN library (MIOpen, cuDNN)
/// where it is loaded (the default; `FERROCM_VENDOR_DNN=0` in the
/// environment turns it off from the start), or always ferrocm's kernels
/// (benches time both in one run). Process-wide.
///
/// ```
/// ferrocm_ops::conv::set_vendor_dnn(false);
/// assert!(!ferrocm_ops::conv::vendor_dnn());
/// ferrocm_ops::conv::set_vendor_dnn(true);
/// ```
pub fn set_vendor_dnn(on: bool) {
    vendor_dnn_from_env();
    VENDOR_DNN.store(on, Ordering::Relaxed);
}

/// See [`set_vendor_dnn`].
///
/// ```
/// // On unless FERROCM_VENDOR_DNN=0 or set_vendor_dnn(false).
/// let _on: bool = ferrocm_ops::conv::vendor_dnn();
/// ```
pub fn vendor_dnn() -> bool {
    vendor_dnn_from_env();
    VENDOR_DNN.load(Ordering::Relaxed)
}

/// A convolution's shapes, checked, with its spatial dims always three
/// (leading dims of size 1 for 1-d and 2-d).
#[derive(Clone, Debug)]
struct Plan {
    batch: usize,
    cin: usize,
    cout: usize,
    groups: usize,
    inp: [usize; 3],
    kernel: [usize; 3],
    out: [usize; 3],
    stride: [usize; 3],
    pad: [usize; 3],
    /// Padding after (or, transposed, cut from the end).
    pad_after: [usize; 3],
    /// The input's size with both sides' padding.
    padded: [usize; 3],
    dilation: [usize; 3],
    /// Input strides `(n, c, d, h, w)`, elements.
    xs: [usize; 5],
    /// A transposed convolution: `stride` spreads the input out, `pad`
    /// cuts the full output's start, `cout` is the weight's dim 1 x groups.
    transposed: bool,
}

impl Plan {
    fn cin_g(&self) -> usize {
        self.cin / self.groups
    }
    fn cout_g(&self) -> usize {
        self.cout / self.groups
    }
    fn positions(&self) -> usize {
        self.out.iter().product()
    }
    fn volume(&self) -> usize {
        self.kernel.iter().product()
    }
    fn k(&self) -> usize {
        self.cin_g() * self.volume()
    }

    /// Reduction index `k`'s `(ci, kd, kh, kw)`.
    fn tap(&self, k: usize) -> (usize, [usize; 3]) {
        let [_, kh, kw] = self.kernel;
        let v = self.volume();
        let (ci, r) = (k / v, k % v);
        (ci, [r / (kh * kw), (r / kw) % kh, r % kw])
    }

    /// The outputs `lo..hi` (of `count` along spatial dim `d`) whose tap
    /// `t` reads inside the input: `0 <= o * stride + t * dilation - pad <
    /// in`.
    fn inside(&self, d: usize, t: usize, count: usize) -> (usize, usize) {
        let (s, reach, pad) = (self.stride[d], t * self.dilation[d], self.pad[d]);
        let lo = pad.saturating_sub(reach).div_ceil(s);
        let hi = (self.inp[d] + pad).saturating_sub(reach).div_ceil(s);
        (lo.min(count), hi.min(count))
    }

    /// The output strides `(n, c, d, h, w)` of a contiguous NCDHW output,
    /// or of NDHWC memory when `channels_last`.
    fn y_strides(&self, channels_last: bool) -> [usize; 5] {
        let [od, oh, ow] = self.out;
        let p = od * oh * ow;
        if channels_last {
            let c = self.cout;
            [p * c, 1, oh * ow * c, ow * c, c]
        } else {
            [self.cout * p, p, oh * ow, ow, 1]
        }
    }
}

impl<T: WithDType> Tensor<T> {
    /// Convolution of `self` (`(N, C_in, spatial..)` or unbatched `(C_in,
    /// spatial..)`) with `weight` (`(C_out, C_in / groups, kernel..)`; its
    /// rank says the spatial dims: 1, 2 or 3) and an optional `bias`
    /// (`(C_out)`): PyTorch's `conv1d` / `conv2d` / `conv3d`, the output
    /// `(N, C_out, out..)` with `out = (in + before + after - dilation *
    /// (kernel - 1) - 1) / stride + 1` along each spatial dim. Cross-
    /// correlation, as every framework computes it (the kernel is not
    /// flipped). Products are summed in f32 and rounded once, after the
    /// bias.
    ///
    /// On a GPU whose DNN library loads (cuDNN, MIOpen; see
    /// [`set_vendor_dnn`](crate::conv::set_vendor_dnn)) the library runs
    /// the convolutions it has an algorithm for (symmetric padding, a dense
    /// NCHW input or NHWC memory; MIOpen NCHW only), with f32 accumulation
    /// and no TF32, FFT or Winograd; an f16/bf16 one with a bias is then
    /// rounded twice (the library's sums, then the bias added: at most one
    /// more half ulp, as PyTorch's cuDNN path) unless cuDNN's graph path
    /// fuses the bias (ungrouped convolutions). Everything else runs
    /// ferrocm's kernels.
    ///
    /// ```
    /// use ferrocm_ops::conv::ConvOptions;
    /// use ferrocm_ops::{Device, Tensor};
    /// // One channel of 5, a kernel [1, 0, -1], padding 1: a centred difference.
    /// let x = Tensor::from_slice(&[1.0f32, 2.0, 4.0, 7.0, 11.0], &[1, 1, 5], &Device::Cpu)?;
    /// let w = Tensor::from_slice(&[1.0f32, 0.0, -1.0], &[1, 1, 3], &Device::Cpu)?;
    /// let y = x.conv(&w, None, &ConvOptions::new().padding(&[1]))?;
    /// assert_eq!(y.shape(), &[1, 1, 5]);
    /// assert_eq!(y.to_vec()?, vec![-2.0, -3.0, -5.0, -7.0, 7.0]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::UnsupportedDType`] for integer dtypes;
    /// [`Error::BadParameter`] for a weight of rank other than 3 to 5, an
    /// input whose rank or channels do not match it, groups of 0 or that do
    /// not divide both channel counts, a stride or dilation of 0, a kernel
    /// dim of 0, a kernel larger than the padded input (an output dim below
    /// 1), a bias that is not `(C_out)`, a parameter list of the wrong
    /// length; [`Error::TooLarge`] past the kernels' 32-bit limits;
    /// [`Error::DeviceMismatch`]; [`Error::Host`] (memory, launch).
    pub fn conv(&self, weight: &Self, bias: Option<&Self>, options: &ConvOptions) -> Result<Self> {
        let op = match weight.rank() {
            3 => "conv1d",
            4 => "conv2d",
            5 => "conv3d",
            _ => "conv",
        };
        self.conv_as(op, false, weight, bias, options)
    }

    /// [`Tensor::conv`] over one spatial dim: input `(N, C_in, L)` or `(C_in,
    /// L)`, weight `(C_out, C_in / groups, k)`.
    ///
    /// # Errors
    /// As [`Tensor::conv`]; [`Error::BadParameter`] for a weight of another
    /// rank.
    pub fn conv1d(
        &self,
        weight: &Self,
        bias: Option<&Self>,
        options: &ConvOptions,
    ) -> Result<Self> {
        self.conv_ranked("conv1d", 3, weight, bias, options)
    }

    /// [`Tensor::conv`] over two spatial dims: input `(N, C_in, H, W)` or
    /// `(C_in, H, W)`, weight `(C_out, C_in / groups, kh, kw)`.
    ///
    /// ```
    /// use ferrocm_ops::conv::ConvOptions;
    /// use ferrocm_ops::{Device, Tensor};
    /// let x = Tensor::<f32>::ones(&[2, 4, 7, 7], &Device::Cpu)?;
    /// let w = Tensor::<f32>::ones(&[8, 2, 3, 3], &Device::Cpu)?;
    /// let o = ConvOptions::new().stride(&[2]).padding(&[1]).groups(2);
    /// let y = x.conv2d(&w, None, &o)?;
    /// assert_eq!(y.shape(), &[2, 8, 4, 4]);
    /// // An interior window sums 2 channels x 9 taps of ones.
    /// assert_eq!(y.to_vec()?[5], 18.0);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Tensor::conv1d`].
    pub fn conv2d(
        &self,
        weight: &Self,
        bias: Option<&Self>,
        options: &ConvOptions,
    ) -> Result<Self> {
        self.conv_ranked("conv2d", 4, weight, bias, options)
    }

    /// [`Tensor::conv`] over three spatial dims: input `(N, C_in, D, H, W)`
    /// or `(C_in, D, H, W)`, weight `(C_out, C_in / groups, kd, kh, kw)`.
    ///
    /// # Errors
    /// As [`Tensor::conv1d`].
    pub fn conv3d(
        &self,
        weight: &Self,
        bias: Option<&Self>,
        options: &ConvOptions,
    ) -> Result<Self> {
        self.conv_ranked("conv3d", 5, weight, bias, options)
    }

    /// Transposed convolution of `self` (`(N, C_in, spatial..)` or unbatched
    /// `(C_in, spatial..)`) with `weight` (`(C_in, C_out / groups,
    /// kernel..)`; its rank says the spatial dims: 1, 2 or 3) and an optional
    /// `bias` (`(C_out)`): PyTorch's `conv_transpose1d` / `2d` / `3d`, the
    /// gradient of [`Tensor::conv`] with respect to its input. Each input
    /// element adds `x · w[tap]` at output `i · stride + tap · dilation -
    /// before`; the output is `(N, C_out, out..)` with `out = (in - 1) ·
    /// stride - before - after + dilation · (kernel - 1) + output_padding +
    /// 1` along each spatial dim. On a GPU whose DNN library loads, the
    /// library's backward data runs it where [`Tensor::conv`] says the
    /// library runs a convolution, when the output padding is below the
    /// stride.
    ///
    /// ```
    /// use ferrocm_ops::conv::ConvOptions;
    /// use ferrocm_ops::{Device, Tensor};
    /// // Stride 2 spreads each input over its own two outputs.
    /// let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[1, 1, 3], &Device::Cpu)?;
    /// let w = Tensor::from_slice(&[1.0f32, 10.0], &[1, 1, 2], &Device::Cpu)?;
    /// let y = x.conv_transpose(&w, None, &ConvOptions::new().stride(&[2]))?;
    /// assert_eq!(y.to_vec()?, vec![1.0, 10.0, 2.0, 20.0, 3.0, 30.0]);
    /// // A kernel longer than the stride: neighbours overlap and add.
    /// let w = Tensor::from_slice(&[1.0f32, 1.0, 1.0], &[1, 1, 3], &Device::Cpu)?;
    /// let y = x.conv_transpose(&w, None, &ConvOptions::new().stride(&[2]).padding(&[1]))?;
    /// assert_eq!(y.to_vec()?, vec![1.0, 3.0, 2.0, 5.0, 3.0]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Tensor::conv`], with the weight `(C_in, C_out / groups,
    /// kernel..)`, and [`Error::BadParameter`] for an output padding not
    /// below the stride or the dilation, or an output dim below 1.
    pub fn conv_transpose(
        &self,
        weight: &Self,
        bias: Option<&Self>,
        options: &ConvOptions,
    ) -> Result<Self> {
        let op = match weight.rank() {
            3 => "conv_transpose1d",
            4 => "conv_transpose2d",
            5 => "conv_transpose3d",
            _ => "conv_transpose",
        };
        self.conv_as(op, true, weight, bias, options)
    }

    /// [`Tensor::conv_transpose`] over one spatial dim: input `(N, C_in,
    /// L)` or `(C_in, L)`, weight `(C_in, C_out / groups, k)`.
    ///
    /// # Errors
    /// As [`Tensor::conv_transpose`]; [`Error::BadParameter`] for a weight
    /// of another rank.
    pub fn conv_transpose1d(
        &self,
        weight: &Self,
        bias: Option<&Self>,
        options: &ConvOptions,
    ) -> Result<Self> {
        self.conv_ranked("conv_transpose1d", 3, weight, bias, options)
    }

    /// [`Tensor::conv_transpose`] over two spatial dims: input `(N, C_in, H,
    /// W)` or `(C_in, H, W)`, weight `(C_in, C_out / groups, kh, kw)`.
    ///
    /// ```
    /// use ferrocm_ops::conv::ConvOptions;
    /// use ferrocm_ops::{Device, Tensor};
    /// // The usual 2x upsampling layer: kernel 4, stride 2, padding 1.
    /// let x = Tensor::<f32>::ones(&[1, 8, 5, 5], &Device::Cpu)?;
    /// let w = Tensor::<f32>::ones(&[8, 3, 4, 4], &Device::Cpu)?;
    /// let o = ConvOptions::new().stride(&[2]).padding(&[1]);
    /// let y = x.conv_transpose2d(&w, None, &o)?;
    /// assert_eq!(y.shape(), &[1, 3, 10, 10]);
    /// // An interior output gathers 2 x 2 taps of 8 channels.
    /// assert_eq!(y.to_vec()?[3 * 10 + 4], 32.0);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Tensor::conv_transpose1d`].
    pub fn conv_transpose2d(
        &self,
        weight: &Self,
        bias: Option<&Self>,
        options: &ConvOptions,
    ) -> Result<Self> {
        self.conv_ranked("conv_transpose2d", 4, weight, bias, options)
    }

    /// [`Tensor::conv_transpose`] over three spatial dims: input `(N, C_in,
    /// D, H, W)` or `(C_in, D, H, W)`, weight `(C_in, C_out / groups, kd,
    /// kh, kw)`.
    ///
    /// # Errors
    /// As [`Tensor::conv_transpose1d`].
    pub fn conv_transpose3d(
        &self,
        weight: &Self,
        bias: Option<&Self>,
        options: &ConvOptions,
    ) -> Result<Self> {
        self.conv_ranked("conv_transpose3d", 5, weight, bias, options)
    }

    fn conv_ranked(
        &self,
        op: &'static str,
        rank: usize,
        weight: &Self,
        bias: Option<&Self>,
        options: &ConvOptions,
    ) -> Result<Self> {
        let transposed = op.starts_with("conv_transpose");
        if weight.rank() != rank {
            let dims = if transposed {
                "C_in, C_out / groups"
            } else {
                "C_out, C_in / groups"
            };
            return Err(Error::BadParameter {
                op,
                what: format!(
                    "the weight must have rank {rank} ({dims}, kernel..), shape {:?}",
                    weight.shape()
                ),
            });
        }
        self.conv_as(op, transposed, weight, bias, options)
    }

    fn conv_as(
        &self,
        op: &'static str,
        transposed: bool,
        weight: &Self,
        bias: Option<&Self>,
        options: &ConvOptions,
    ) -> Result<Self> {
        if !T::DTYPE.is_float() {
            return Err(Error::UnsupportedDType {
                op,
                dtype: T::DTYPE,
            });
        }
        self.same_device(op, weight)?;
        if let Some(b) = bias {
            self.same_device(op, b)?;
        }
        let bad = |what: String| Error::BadParameter { op, what };
        let wr = weight.rank();
        let wdims = if transposed {
            "C_in, C_out / groups"
        } else {
            "C_out, C_in / groups"
        };
        if !(3..=5).contains(&wr) {
            return Err(bad(format!(
                "the weight must have rank 3, 4 or 5 ({wdims}, kernel..), shape {:?}",
                weight.shape()
            )));
        }
        let sd = wr - 2;
        let unbatched = self.rank() == sd + 1;
        if !unbatched && self.rank() != sd + 2 {
            return Err(bad(format!(
                "the input must have rank {} (N, C_in, spatial..) or {} (C_in, spatial..) for a weight of shape {:?}, shape {:?}",
                sd + 2,
                sd + 1,
                weight.shape(),
                self.shape()
            )));
        }
        let x = if unbatched {
            self.reshape_view_batched()?
        } else {
            self.clone()
        };
        let groups = options.groups;
        let cin = x.shape()[1];
        let (cout, wcin) = if transposed {
            if groups == 0 || !cin.is_multiple_of(groups) {
                return Err(bad(format!(
                    "groups {groups} must be at least 1 and divide C_in {cin}"
                )));
            }
            if weight.shape()[0] != cin {
                return Err(bad(format!(
                    "the weight {:?} must have C_in = {cin} input channels (dim 0)",
                    weight.shape()
                )));
            }
            let cout = weight.shape()[1]
                .checked_mul(groups)
                .ok_or(Error::TooLarge {
                    op,
                    shape: weight.shape().to_vec(),
                })?;
            (cout, cin / groups)
        } else {
            (weight.shape()[0], weight.shape()[1])
        };
        if groups == 0 || !cin.is_multiple_of(groups) || !cout.is_multiple_of(groups) {
            return Err(bad(format!(
                "groups {groups} must be at least 1 and divide C_in {cin} and C_out {cout}"
            )));
        }
        if wcin != cin / groups {
            return Err(bad(format!(
                "the weight {:?} must have C_in / groups = {cin} / {groups} = {} input channels",
                weight.shape(),
                cin / groups
            )));
        }
        if let Some(b) = bias
            && b.shape() != [cout]
        {
            return Err(bad(format!(
                "the bias must have shape [{cout}] (C_out), shape {:?}",
                b.shape()
            )));
        }
        let stride = per_dim(op, "stride", &options.stride, sd)?;
        let padding = per_dim(op, "padding", &options.padding, sd)?;
        let dilation = per_dim(op, "dilation", &options.dilation, sd)?;
        if stride.contains(&0) || dilation.contains(&0) {
            return Err(bad(format!(
                "stride {stride:?} and dilation {dilation:?} must be at least 1"
            )));
        }
        let output_padding = per_dim(op, "output_padding", &options.output_padding, sd)?;
        if !transposed && output_padding.iter().any(|&p| p != 0) {
            return Err(bad(format!(
                "output_padding {output_padding:?} applies only to a transposed convolution"
            )));
        }
        if let Some(d) = (0..sd).find(|&d| output_padding[d] >= stride[d].max(dilation[d])) {
            return Err(bad(format!(
                "output_padding {output_padding:?} must be below the stride {stride:?} or the dilation {dilation:?} (dim {d})"
            )));
        }
        let mut plan = Plan {
            batch: x.shape()[0],
            cin,
            cout,
            groups,
            inp: [1; 3],
            kernel: [1; 3],
            out: [1; 3],
            stride: [1; 3],
            pad: [0; 3],
            pad_after: [0; 3],
            padded: [1; 3],
            dilation: [1; 3],
            xs: [0; 5],
            transposed,
        };
        let lead = 3 - sd;
        for d in 0..sd {
            let (i, k) = (x.shape()[2 + d], weight.shape()[2 + d]);
            let (lo, hi) = padding[d];
            let span = k
                .checked_sub(1)
                .and_then(|e| e.checked_mul(dilation[d]))
                .and_then(|e| e.checked_add(1));
            let out = if transposed {
                // In i128: `(in - 1) · stride` with `in = 0` or huge values.
                span.map(|span| {
                    (i as i128 - 1) * stride[d] as i128 - lo as i128 - hi as i128
                        + span as i128
                        + output_padding[d] as i128
                })
                .filter(|&o| k > 0 && o >= 1)
                .and_then(|o| usize::try_from(o).ok())
                .map(|o| (o, o))
            } else {
                let padded = i.checked_add(lo).and_then(|v| v.checked_add(hi));
                match (span, padded) {
                    (Some(span), Some(padded)) if k > 0 && padded >= span => {
                        Some(((padded - span) / stride[d] + 1, padded))
                    }
                    _ => None,
                }
            };
            let Some((o, padded)) = out else {
                return Err(bad(if transposed {
                    format!(
                        "the kernel {:?} must be non-empty and the output of the input {:?} (stride {stride:?}, padding {padding:?}, dilation {dilation:?}, output_padding {output_padding:?}) at least 1 along each dim",
                        &weight.shape()[2..],
                        &x.shape()[2..]
                    )
                } else {
                    format!(
                        "the kernel {:?} (dilation {dilation:?}) must be non-empty and fit the padded input {:?} (padding {padding:?}): an output dim below 1",
                        &weight.shape()[2..],
                        &x.shape()[2..]
                    )
                }));
            };
            plan.inp[lead + d] = i;
            plan.kernel[lead + d] = k;
            plan.out[lead + d] = o;
            plan.stride[lead + d] = stride[d];
            plan.pad[lead + d] = lo;
            plan.pad_after[lead + d] = hi;
            plan.padded[lead + d] = padded;
            plan.dilation[lead + d] = dilation[d];
        }
        let st = x.layout().strides();
        plan.xs[0] = st[0];
        plan.xs[1] = st[1];
        for d in 0..sd {
            plan.xs[2 + lead + d] = st[2 + d];
        }
        // Channels-last in, channels-last out (an NCHW view of NHWC memory).
        let channels_last = cin > 1 && st[1] == 1 && !x.is_contiguous();
        let mut shape = vec![plan.batch, cout];
        shape.extend_from_slice(&plan.out[lead..]);
        let n_out = crate::core::layout::checked_count(op, &shape, size_of::<T>())?;
        let dev = x.device().clone();
        let out = dev.alloc::<T>(n_out)?;
        let weight = weight.contiguous()?;
        let bias = bias.map(|b| b.contiguous()).transpose()?;
        let buf = engine::run(
            &dev,
            Conv {
                op,
                x: &x,
                w: &weight,
                bias: bias.as_ref(),
                plan: plan.clone(),
                channels_last,
                out,
            },
        )?;
        let y = if channels_last {
            let mut nhwc = vec![plan.batch];
            nhwc.extend_from_slice(&plan.out[lead..]);
            nhwc.push(cout);
            let r = nhwc.len();
            let mut perm = vec![0, r - 1];
            perm.extend(1..r - 1);
            Tensor::from_parts(buf, &nhwc).permute(&perm)?
        } else {
            Tensor::from_parts(buf, &shape)
        };
        if unbatched { y.squeeze_batch() } else { Ok(y) }
    }
}

impl crate::DynTensor {
    /// [`Tensor::conv`] for a dtype known at run time (`weight` and `bias`
    /// of the input's dtype).
    ///
    /// ```
    /// use ferrocm_ops::conv::ConvOptions;
    /// use ferrocm_ops::{Device, Tensor};
    /// let x = Tensor::<f32>::ones(&[1, 1, 4], &Device::Cpu)?.to_dyn();
    /// let w = Tensor::<f32>::ones(&[1, 1, 2], &Device::Cpu)?.to_dyn();
    /// assert_eq!(x.conv(&w, None, &ConvOptions::new())?.to_f64_vec()?, vec![2.0; 3]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::DTypeMismatch`] when the dtypes differ; as [`Tensor::conv`].
    pub fn conv(&self, weight: &Self, bias: Option<&Self>, options: &ConvOptions) -> Result<Self> {
        self.same_dtype("conv", weight)?;
        if let Some(b) = bias {
            self.same_dtype("conv", b)?;
        }
        crate::core::dyn_tensor::with_dtype!(self, "conv", |t| {
            let b = bias.map(|b| b.typed()).transpose()?;
            Ok(t.conv(&weight.typed()?, b.as_ref(), options)?.into())
        })
    }

    /// [`Tensor::conv_transpose`] for a dtype known at run time (`weight`
    /// and `bias` of the input's dtype).
    ///
    /// ```
    /// use ferrocm_ops::conv::ConvOptions;
    /// use ferrocm_ops::{Device, Tensor};
    /// let x = Tensor::<f32>::ones(&[1, 1, 2], &Device::Cpu)?.to_dyn();
    /// let w = Tensor::<f32>::ones(&[1, 1, 2], &Device::Cpu)?.to_dyn();
    /// let y = x.conv_transpose(&w, None, &ConvOptions::new())?;
    /// assert_eq!(y.to_f64_vec()?, vec![1.0, 2.0, 1.0]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::DTypeMismatch`] when the dtypes differ; as
    /// [`Tensor::conv_transpose`].
    pub fn conv_transpose(
        &self,
        weight: &Self,
        bias: Option<&Self>,
        options: &ConvOptions,
    ) -> Result<Self> {
        self.same_dtype("conv_transpose", weight)?;
        if let Some(b) = bias {
            self.same_dtype("conv_transpose", b)?;
        }
        crate::core::dyn_tensor::with_dtype!(self, "conv_transpose", |t| {
            let b = bias.map(|b| b.typed()).transpose()?;
            Ok(t.conv_transpose(&weight.typed()?, b.as_ref(), options)?
                .into())
        })
    }
}

/// One convolution: operands checked, the output allocated (`NCDHW`
/// contiguous, or `NDHWC` when `channels_last`).
struct Conv<'a, T: WithDType> {
    op: &'static str,
    x: &'a Tensor<T>,
    w: &'a Tensor<T>,
    bias: Option<&'a Tensor<T>>,
    plan: Plan,
    channels_last: bool,
    out: DeviceBuffer<T>,
}

impl<T: WithDType> Conv<'_, T> {
    /// Image `n`'s columns for group `g` over the output lines `l0..l1`
    /// (a line: one `(z, y)`, `ow` outputs): `[K, (l1 - l0) * ow]` f32,
    /// zero where the tap falls in the padding.
    fn im2col_lines(
        &self,
        xh: &[T],
        (n, g): (usize, usize),
        (l0, l1): (usize, usize),
        cols: &mut [f32],
    ) {
        let p = &self.plan;
        let [od, oh, ow] = p.out;
        let step = p.stride[2] * p.xs[4];
        for (k, row) in cols.chunks_mut((l1 - l0) * ow).enumerate() {
            let (ci, tap) = p.tap(k);
            let at = |d: usize, o: usize| o * p.stride[d] + tap[d] * p.dilation[d] - p.pad[d];
            let (zr, yr, (x0, x1)) = (
                p.inside(0, tap[0], od),
                p.inside(1, tap[1], oh),
                p.inside(2, tap[2], ow),
            );
            let base = n * p.xs[0] + (g * p.cin_g() + ci) * p.xs[1];
            for (l, line) in (l0..l1).zip(row.chunks_mut(ow)) {
                let (z, y) = (l / oh, l % oh);
                if x0 >= x1 || !(zr.0..zr.1).contains(&z) || !(yr.0..yr.1).contains(&y) {
                    line.fill(0.0);
                    continue;
                }
                line[..x0].fill(0.0);
                line[x1..].fill(0.0);
                let first = base + at(0, z) * p.xs[2] + at(1, y) * p.xs[3] + at(2, x0) * p.xs[4];
                let inside = &mut line[x0..x1];
                if step == 1 {
                    let src = &xh[first..first + inside.len()];
                    inside.iter_mut().zip(src).for_each(|(v, &s)| *v = widen(s));
                } else {
                    for (j, v) in inside.iter_mut().enumerate() {
                        *v = widen(xh[first + j * step]);
                    }
                }
            }
        }
    }

    /// The convolution's f32 sums (bias added) into `sums` (NC-spatial rows)
    /// on the tuned CPU GEMM: tasks of one image, group and block of output
    /// lines, each building its columns (im2col) in its thread's buffer,
    /// sized to stay in the cache, and multiplying them into its place in
    /// `sums` on one thread. Blocks are cut small enough to give every
    /// thread several tasks.
    fn gemm_sums(&self, xh: &[T], w: &[f32], bias: &[f32], sums: &mut [f32]) {
        let p = &self.plan;
        let (k, cout_g, positions) = (p.k(), p.cout_g(), p.positions());
        let [od, oh, ow] = p.out;
        let lines = od * oh;
        let threads = rayon::current_num_threads();
        let images = p.batch * p.groups;
        let by_cache = CPU_COLS_BLOCK / (k * ow).max(1);
        let by_balance = (images * lines) / (4 * threads);
        let block = by_cache
            .min(by_balance)
            .max(CPU_MIN_BLOCK_COLUMNS.div_ceil(ow))
            .clamp(1, lines);
        let blocks = lines.div_ceil(block);
        let buffers: Vec<Mutex<Vec<f32>>> = (0..threads).map(|_| Mutex::default()).collect();
        let out = SharedRows(sums.as_mut_ptr(), sums.len());
        (0..images * blocks).into_par_iter().for_each(|task| {
            let (n, g) = (task / blocks / p.groups, task / blocks % p.groups);
            let l0 = task % blocks * block;
            let l1 = (l0 + block).min(lines);
            let width = (l1 - l0) * ow;
            let slot = rayon::current_thread_index().unwrap_or(0) % buffers.len();
            let mut buffer = buffers[slot].lock().unwrap_or_else(|e| e.into_inner());
            if buffer.len() < k * width {
                buffer.resize(k * width, 0.0);
            }
            let cols = &mut buffer[..k * width];
            self.im2col_lines(xh, (n, g), (l0, l1), cols);
            let c0 = g * cout_g;
            let first = (n * p.cout + c0) * positions + l0 * ow;
            // SAFETY: this task's block, rows `first + c * positions` for
            // `c < cout_g`, `width` long, lies inside `sums` (the last
            // row ends at most at `(n * cout + c0 + cout_g) * positions`)
            // and no other task's block overlaps it (tasks differ in the
            // image, the group's rows or the lines).
            unsafe {
                let dst = out.at(first, (cout_g - 1) * positions + width);
                let wg = &w[c0 * k..(c0 + cout_g) * k];
                sgemm_rows(
                    (cout_g, width, k),
                    dst,
                    positions,
                    wg,
                    (k, 1),
                    cols,
                    (width, 1),
                    1,
                );
                for (c, &b) in bias[c0..c0 + cout_g].iter().enumerate() {
                    std::slice::from_raw_parts_mut(dst.add(c * positions), width)
                        .iter_mut()
                        .for_each(|v| *v += b);
                }
            }
        });
    }
}

/// At most this many f32 in one task's columns (`K x` its outputs): 4 MiB,
/// which the product reads back from the cache.
const CPU_COLS_BLOCK: usize = 1 << 20;

/// At least this many outputs (columns) in one task's product, where the
/// output has them: narrower products run the GEMM's edge paths.
const CPU_MIN_BLOCK_COLUMNS: usize = 128;

/// `sums` shared by the tasks of [`Conv::gemm_sums`], each writing its own
/// block.
struct SharedRows(*mut f32, usize);

// SAFETY: the tasks write disjoint blocks (see `gemm_sums`).
unsafe impl Sync for SharedRows {}

impl SharedRows {
    /// The address of element `first`, checking that `len` elements from it
    /// lie inside.
    fn at(&self, first: usize, len: usize) -> *mut f32 {
        assert!(
            first + len <= self.1,
            "conv sums: block {first}+{len} past {}",
            self.1
        );
        // SAFETY: inside the allocation (checked).
        unsafe { self.0.add(first) }
    }
}

impl<T: WithDType> Conv<'_, T> {
    /// Adds a transposed convolution's products into `sums` (NC-spatial
    /// f32 rows): per image and group, `cols = W_gᵀ · X_g` (`[cout_g ·
    /// volume, in positions]`, every tap times every input, on the tuned CPU
    /// GEMM), then each output row adds its taps' rows where they land
    /// (input `i` at output `i · stride + tap · dilation - before`).
    fn transposed_sums(&self, xh: &[T], w: &[f32], sums: &mut [f32]) -> Result<()> {
        let p = &self.plan;
        let (cin_g, cout_g, volume) = (p.cin_g(), p.cout_g(), p.volume());
        let ([id, ih, iw], [_, kh, kw]) = (p.inp, p.kernel);
        let [od, oh, ow] = p.out;
        let (inputs, positions, m) = (id * ih * iw, p.positions(), cout_g * volume);
        if cin_g == 0 || inputs == 0 {
            return Ok(());
        }
        let too_large = || Error::TooLarge {
            op: self.op,
            shape: self.x.shape().to_vec(),
        };
        let mut cols = Vec::new();
        m.checked_mul(inputs)
            .and_then(|n| cols.try_reserve_exact(n).ok())
            .ok_or_else(too_large)?;
        cols.resize(m * inputs, 0.0f32);
        let mut xg = vec![0.0f32; cin_g * inputs];
        // The inputs `lo..hi` whose tap `t` lands inside output dim `d`.
        let lands = |d: usize, t: usize, count: usize| {
            let (s, reach, pad) = (p.stride[d], t * p.dilation[d], p.pad[d]);
            let lo = pad.saturating_sub(reach).div_ceil(s);
            let hi = (count + pad).saturating_sub(reach).div_ceil(s);
            (
                lo.min(p.inp[d]),
                hi.min(p.inp[d]),
                reach as isize - pad as isize,
            )
        };
        let threads = rayon::current_num_threads();
        for n in 0..p.batch {
            for g in 0..p.groups {
                // The group's inputs as `[cin_g, in positions]` f32.
                xg.par_chunks_mut(inputs).enumerate().for_each(|(ci, row)| {
                    let base = n * p.xs[0] + (g * cin_g + ci) * p.xs[1];
                    for (zy, line) in row.chunks_mut(iw).enumerate() {
                        let first = base + (zy / ih) * p.xs[2] + (zy % ih) * p.xs[3];
                        for (i, v) in line.iter_mut().enumerate() {
                            *v = widen(xh[first + i * p.xs[4]]);
                        }
                    }
                });
                // W_g is `[cin_g, cout_g · volume]` row-major: its transpose
                // is the product's left operand read at swapped strides.
                let wg = &w[g * cin_g * m..(g + 1) * cin_g * m];
                sgemm(
                    (m, inputs, cin_g),
                    &mut cols,
                    wg,
                    (1, m),
                    &xg,
                    (inputs, 1),
                    threads,
                );
                let rows = &mut sums[(n * p.cout + g * cout_g) * positions..][..cout_g * positions];
                rows.par_chunks_mut(positions)
                    .enumerate()
                    .for_each(|(co, out)| {
                        for t in 0..volume {
                            let tap = [t / (kh * kw), (t / kw) % kh, t % kw];
                            let col = &cols[(co * volume + t) * inputs..][..inputs];
                            let (z0, z1, rz) = lands(0, tap[0], od);
                            let (y0, y1, ry) = lands(1, tap[1], oh);
                            let (x0, x1, rx) = lands(2, tap[2], ow);
                            if x0 >= x1 {
                                continue;
                            }
                            let (sx, ox0) = (p.stride[2], (x0 * p.stride[2]) as isize + rx);
                            for z in z0..z1 {
                                let oz = (z * p.stride[0]) as isize + rz;
                                for y in y0..y1 {
                                    let oy = (y * p.stride[1]) as isize + ry;
                                    let line = &col[(z * ih + y) * iw..][x0..x1];
                                    let orow = &mut out[(oz as usize * oh + oy as usize) * ow..];
                                    for (j, &v) in line.iter().enumerate() {
                                        orow[ox0 as usize + j * sx] += v;
                                    }
                                }
                            }
                        }
                    });
            }
        }
        Ok(())
    }
}

/// One output row `(n, c)` of the direct Cpu path: bias, then each tap's
/// products over the outputs whose tap lands inside the input (bounds per
/// line, the inner loop along the width).
struct DirectRow<'a, T> {
    p: &'a Plan,
    xh: &'a [T],
    w: &'a [f32],
    bias: &'a [f32],
    r: usize,
    row: &'a mut [f32],
}

impl<T: WithDType> engine::cpu::Task for DirectRow<'_, T> {
    type Out = ();
    #[inline(always)]
    fn run(self) {
        let p = self.p;
        let (n, c) = (self.r / p.cout, self.r % p.cout);
        let (k, cin_g) = (p.k(), p.cin_g());
        let g = c / p.cout_g();
        let [od, oh, ow] = p.out;
        self.row.fill(self.bias[c]);
        for (kk, &wv) in self.w[c * k..(c + 1) * k].iter().enumerate() {
            let (ci, tap) = p.tap(kk);
            let base = n * p.xs[0] + (g * cin_g + ci) * p.xs[1];
            // Input coordinate of output `o`'s tap along dim `d` (inside).
            let at = |d: usize, o: usize| o * p.stride[d] + tap[d] * p.dilation[d] - p.pad[d];
            let ((z0, z1), (y0, y1), (x0, x1)) = (
                p.inside(0, tap[0], od),
                p.inside(1, tap[1], oh),
                p.inside(2, tap[2], ow),
            );
            if x0 >= x1 {
                continue;
            }
            let step = p.stride[2] * p.xs[4];
            for z in z0..z1 {
                for y in y0..y1 {
                    let first =
                        base + at(0, z) * p.xs[2] + at(1, y) * p.xs[3] + at(2, x0) * p.xs[4];
                    let out = &mut self.row[(z * oh + y) * ow..][x0..x1];
                    for (j, s) in out.iter_mut().enumerate() {
                        *s = wv.mul_add(widen(self.xh[first + j * step]), *s);
                    }
                }
            }
        }
    }
}

impl<T: WithDType> Op for Conv<'_, T> {
    type Output = DeviceBuffer<T>;

    fn cpu(mut self) -> Result<DeviceBuffer<T>> {
        let p = self.plan.clone();
        let (positions, k, cout_g) = (p.positions(), p.k(), p.cout_g());
        let rows = p.batch * p.cout;
        if rows * positions == 0 {
            return Ok(self.out);
        }
        let xh = &engine::cpu::host(self.x.buf())[self.x.layout().offset()..];
        let w: Vec<f32> = elems(self.w).iter().map(|&v| widen(v)).collect();
        let bias: Vec<f32> = match self.bias {
            Some(b) => elems(b).iter().map(|&v| widen(v)).collect(),
            None => vec![0.0; p.cout],
        };
        // NCDHW f32 sums, then rounded (and moved to channels-last).
        let mut sums = vec![0.0f32; rows * positions];
        if p.transposed {
            sums.par_chunks_mut(positions)
                .enumerate()
                .for_each(|(r, row)| row.fill(bias[r % p.cout]));
            self.transposed_sums(xh, &w, &mut sums)?;
        } else if cout_g >= CONV_GEMM_MIN_COUT_G && k > 0 {
            self.gemm_sums(xh, &w, &bias, &mut sums);
        } else {
            // Tap by tap over the whole output row (each output's sum still
            // in reduction order, as the kernel's), compiled for AVX2/FMA.
            sums.par_chunks_mut(positions)
                .enumerate()
                .for_each(|(r, row)| {
                    engine::cpu::vectorized(DirectRow {
                        p: &p,
                        xh,
                        w: &w,
                        bias: &bias,
                        r,
                        row,
                    })
                });
        }
        let out = engine::cpu::host_mut(&mut self.out);
        if self.channels_last {
            // Image by image, [C_out, positions] -> [positions, C_out].
            out.par_chunks_mut(p.cout * positions)
                .zip(sums.par_chunks(p.cout * positions))
                .for_each(|(o, s)| {
                    for (q, orow) in o.chunks_mut(p.cout).enumerate() {
                        for (c, v) in orow.iter_mut().enumerate() {
                            *v = narrow(s[c * positions + q]);
                        }
                    }
                });
        } else {
            out.par_iter_mut()
                .zip(sums.par_iter())
                .with_min_len(1 << 14)
                .for_each(|(o, &s)| *o = narrow(s));
        }
        Ok(self.out)
    }

    fn vendor(self, libs: &Libraries) -> Vendor<Self> {
        if !vendor_dnn() || libs.dnn().is_none() {
            return Vendor::Fallback(self);
        }
        let Some(problem) = self.dnn_problem() else {
            return Vendor::Fallback(self);
        };
        let dev = libs.device();
        // The libraries' vectorised kernels want 16-byte aligned tensors: a
        // view starting elsewhere runs our kernels (a channels-last filter
        // is permuted into a tensor of its own, which starts at 0).
        let aligned = |t: &Tensor<T>| (t.layout().offset() * size_of::<T>()).is_multiple_of(16);
        if !problem.channels_last && !aligned(self.w) {
            return Vendor::Fallback(self);
        }
        // The bias offered to the library where it is one dense 16-byte
        // aligned run (it adds it to the f32 sums where it can).
        let bias = self
            .bias
            .filter(|b| b.layout().strides() == [1] && aligned(b));
        let problem = ConvProblem {
            bias: bias.is_some(),
            ..problem
        };
        let Conv {
            op,
            x,
            w,
            bias: any_bias,
            plan,
            channels_last,
            out,
        } = self;
        // The library's path, as one run: the filter's permute (channels
        // last), the convolution, and our add of a bias it did not fuse.
        // The add writes a buffer of its own, which becomes the output.
        let (len, mut out) = (out.len(), out);
        let library = || -> Result<bool> {
            // A channels-last problem takes the filter as (C_out, kernel..,
            // C_in / groups), or transposed (C_in, kernel.., C_out / groups).
            let krsc;
            let w = if problem.channels_last {
                let r = w.rank();
                let perm: Vec<usize> = [0].into_iter().chain(2..r).chain([1]).collect();
                krsc = w.permute(&perm)?.contiguous()?;
                &krsc
            } else {
                w
            };
            let ran = dev.dnn_conv(
                &problem,
                x.buf(),
                x.layout().offset(),
                w.buf(),
                w.layout().offset(),
                &out,
                bias.map(|b| (b.buf(), b.layout().offset())),
            )?;
            match (ran, any_bias) {
                (DnnConv::Declined, _) => Ok(false),
                (DnnConv::Ran { bias_added: true }, _) | (DnnConv::Ran { .. }, None) => Ok(true),
                (DnnConv::Ran { bias_added: false }, Some(b)) => {
                    // The bias by our broadcast add (a second rounding for
                    // f16/bf16: the library rounds the sums to T first).
                    let (n, c) = (problem.batch, problem.out_channels);
                    let sd = problem.output.len();
                    let (memory, per_channel) = if problem.channels_last {
                        ([&[n][..], &problem.output, &[c]].concat(), vec![c])
                    } else {
                        (
                            [&[n, c][..], &problem.output].concat(),
                            [&[c][..], &vec![1; sd]].concat(),
                        )
                    };
                    let y = std::mem::replace(&mut out, dev.alloc::<T>(0)?);
                    let y = Tensor::from_parts(y, &memory);
                    out = b
                        .reshape(&per_channel)
                        .and_then(|b| y.add(&b))?
                        .into_buffer()?;
                    Ok(true)
                }
            }
        };
        // Our kernels' run into a scratch output.
        let trial = engine::choice::scratch_trial(dev, len, |out| {
            let conv = Conv {
                op,
                x,
                w,
                bias: any_bias,
                plan: plan.clone(),
                channels_last,
                out,
            };
            conv.kernels(dev)
        });
        let library_ran = engine::choice::library_if_faster(dev, &problem, library, trial);
        match library_ran {
            Ok(true) => Vendor::Done(Ok(out)),
            Ok(false) => Vendor::Fallback(Conv {
                op,
                x,
                w,
                bias: any_bias,
                plan,
                channels_last,
                out,
            }),
            Err(e) => Vendor::Done(Err(e)),
        }
    }

    fn kernels(self, dev: &Device) -> Result<DeviceBuffer<T>> {
        let p = &self.plan;
        if p.batch * p.cout * p.positions() == 0 {
            return Ok(self.out);
        }
        let fits = |v: usize| v < (1 << 31);
        // The kernels hold sizes, channels and window coordinates (down to
        // `o * stride - pad`) in 32 bits; transposed, the input's reach
        // past the output's ends and its positions times the stride.
        let coords = (0..3).all(|d| {
            if p.transposed {
                let reach = p.dilation[d] * (p.kernel[d] - 1);
                p.inp[d].checked_mul(p.stride[d]).is_some_and(fits)
                    && p.out[d]
                        .checked_add(p.pad[d])
                        .and_then(|v| v.checked_add(reach))
                        .is_some_and(fits)
            } else {
                fits(p.padded[d]) && fits(p.stride[d])
            }
        });
        let cols = p.batch * p.positions();
        if !fits(cols) || !fits(p.batch * p.cout) || !fits(p.k()) || !fits(p.cin) || !coords {
            return Err(self.too_large());
        }
        let ys = p.y_strides(self.channels_last);
        let x = self.source(dev)?;
        if !p.transposed {
            // Every tap, in the weight's order, at its dilated offset.
            let taps: Vec<[usize; 3]> = (0..p.volume())
                .map(|t| p.tap(t).1)
                .map(|t| [0, 1, 2].map(|d| t[d] * p.dilation[d]))
                .collect();
            let pad = p.pad.map(|v| v as i64);
            let geom = self.geom(&x, (p.out, ys), (p.stride, pad), &taps)?;
            // The matrix-unit kernels reduce over `(tap, ci)`.
            let w = match x.mma {
                true => Cow::Owned(
                    self.w
                        .reshape(&[p.cout, p.cin_g(), p.volume()])?
                        .permute(&[0, 2, 1])?
                        .contiguous()?,
                ),
                false => Cow::Borrowed(self.w),
            };
            self.launch(dev, &x, geom, 1, &w, p.out)?;
            return Ok(self.out);
        }
        // Transposed: output `o = φ + s·m` of phase `φ` (per dim, `φ <
        // stride`) takes tap `t` from input `m + e` when `s` divides `φ +
        // before - t·dilation = s·e`: per phase, a stride-1 convolution of
        // the input with the taps that phase takes, written at stride `s`
        // from the phase's first output. No tap meets a spread-out zero.
        let phases = self.phases(ys);
        let mut strided = ys;
        for d in 0..3 {
            strided[2 + d] = ys[2 + d] * p.stride[d];
        }
        let geom_of = |ph: &Phase, w_first: usize| -> Result<Vec<u64>> {
            let mut geom = self.geom(&x, (ph.count, strided), ([1; 3], ph.pad), &ph.taps)?;
            geom[G_Y_FIRST] = ph.first as u64;
            geom[G_W_FIRST] = w_first as u64;
            Ok(geom)
        };
        let largest = |phases: &[Phase]| {
            [0, 1, 2].map(|d| phases.iter().map(|ph| ph.count[d]).max().unwrap_or(0))
        };
        let taps = phases.first().map_or(0, |ph| ph.taps.len());
        if phases.iter().all(|ph| ph.taps.len() == taps) && phases.len() <= MAX_GRID_YZ as usize {
            // One launch: phase `z`'s weights `z · cout · cin_g · taps` on.
            let ids: Vec<u32> = phases
                .iter()
                .flat_map(|ph| ph.ids.iter().copied())
                .collect();
            let w = self.phase_weights(dev, &x, &ids, phases.len())?;
            let mut geom = Vec::new();
            for (z, ph) in phases.iter().enumerate() {
                geom.extend(geom_of(ph, z * p.cout * p.cin_g() * taps)?);
            }
            self.launch(dev, &x, geom, phases.len(), &w, largest(&phases))?;
        } else {
            for ph in &phases {
                let w = self.phase_weights(dev, &x, &ph.ids, 1)?;
                let geom = geom_of(ph, 0)?;
                self.launch(dev, &x, geom, 1, &w, ph.count)?;
            }
        }
        Ok(self.out)
    }
}

/// One output phase of a transposed convolution on kernel devices: its
/// output positions per dim (`count`), the element offset of its first
/// output, its taps (their offsets from the window's corner `m + pad`) and
/// their indices in the weight's `(kd, kh, kw)` order (`ids`).
struct Phase {
    count: [usize; 3],
    first: usize,
    pad: [i64; 3],
    taps: Vec<[usize; 3]>,
    ids: Vec<u32>,
}

impl<T: WithDType> Conv<'_, T> {
    /// The phases of a transposed convolution with outputs (`count` in
    /// every dim above 0), output strides `ys`.
    fn phases(&self, ys: [usize; 5]) -> Vec<Phase> {
        let p = &self.plan;
        let [s0, s1, s2] = p.stride;
        let mut phases = Vec::new();
        for phase in 0..s0 * s1 * s2 {
            let phi = [phase / (s1 * s2), (phase / s2) % s1, phase % s2];
            let mut count = [0; 3];
            let mut taken: [Vec<(usize, i64)>; 3] = Default::default();
            for d in 0..3 {
                let s = p.stride[d] as i64;
                count[d] = p.out[d].saturating_sub(phi[d]).div_ceil(p.stride[d]);
                for t in 0..p.kernel[d] {
                    let v = (phi[d] + p.pad[d]) as i64 - (t * p.dilation[d]) as i64;
                    if v.rem_euclid(s) == 0 {
                        taken[d].push((t, v.div_euclid(s)));
                    }
                }
            }
            if count.contains(&0) {
                continue;
            }
            // The window's corner `m - pad` puts the phase's first tap (the
            // least `e`) at offset 0.
            let pad = [0, 1, 2].map(|d| -taken[d].iter().map(|t| t.1).min().unwrap_or(0));
            let [kh, kw] = [p.kernel[1], p.kernel[2]];
            let (mut ids, mut taps) = (Vec::new(), Vec::new());
            for &(t0, e0) in &taken[0] {
                for &(t1, e1) in &taken[1] {
                    for &(t2, e2) in &taken[2] {
                        ids.push(((t0 * kh + t1) * kw + t2) as u32);
                        let e = [e0, e1, e2];
                        taps.push([0, 1, 2].map(|d| (e[d] + pad[d]) as usize));
                    }
                }
            }
            let first = (0..3).map(|d| phi[d] * ys[2 + d]).sum();
            phases.push(Phase {
                count,
                first,
                pad,
                taps,
                ids,
            });
        }
        phases
    }

    /// The weights of `phases` phases of a transposed convolution, each
    /// taking the `ids.len() / phases` taps of its slice of `ids`, one
    /// phase's `[cout, K]` after another in the kernels' reduction order
    /// (`(ci, tap)`, or `(tap, ci)` for the matrix units): one gather and
    /// one copy. The weight is `[cin, cout_g, kd, kh, kw]` (its channel
    /// dims swapped against a convolution's).
    fn phase_weights(
        &self,
        dev: &Device,
        x: &Source<'_, T>,
        ids: &[u32],
        phases: usize,
    ) -> Result<Tensor<T>> {
        let p = &self.plan;
        let taps = ids.len() / phases.max(1);
        let ids = Tensor::from_slice(ids, &[ids.len()], dev)?;
        let order = if x.mma {
            [3, 0, 2, 4, 1]
        } else {
            [3, 0, 2, 1, 4]
        };
        self.w
            .reshape(&[p.groups, p.cin_g(), p.cout_g(), p.volume()])?
            .index_select(3, &ids)?
            .reshape(&[p.groups, p.cin_g(), p.cout_g(), phases, taps])?
            .permute(&order)?
            .contiguous()
    }
}

impl<T: WithDType> Conv<'_, T> {
    /// The convolution as a DNN library takes it, if it does: f32/f16/bf16,
    /// symmetric padding, a dense NCHW input (or NHWC memory when the output
    /// is channels-last) starting 16-byte aligned, nothing empty; transposed with an output padding
    /// below the stride (the libraries' backward data).
    fn dnn_problem(&self) -> Option<ConvProblem> {
        let p = &self.plan;
        let dtype = match T::DTYPE {
            DType::F32 => DnnType::F32,
            DType::F16 => DnnType::F16,
            DType::BF16 => DnnType::Bf16,
            _ => return None,
        };
        let sd = self.x.rank() - 2;
        let lead = 3 - sd;
        let dims = lead..3;
        if dims.clone().any(|d| p.pad[d] != p.pad_after[d]) {
            return None;
        }
        let dense = if self.channels_last {
            self.x.layout().strides() == out_strides(self.x.shape(), true).as_slice()
        } else {
            self.x.is_contiguous()
        };
        if !dense || !(self.x.layout().offset() * size_of::<T>()).is_multiple_of(16) {
            return None;
        }
        let problem = ConvProblem {
            dtype,
            batch: p.batch,
            in_channels: p.cin,
            out_channels: p.cout,
            groups: p.groups,
            input: p.inp[dims.clone()].to_vec(),
            kernel: p.kernel[dims.clone()].to_vec(),
            output: p.out[dims.clone()].to_vec(),
            stride: p.stride[dims.clone()].to_vec(),
            padding: p.pad[dims.clone()].to_vec(),
            dilation: p.dilation[dims].to_vec(),
            channels_last: self.channels_last,
            transposed: p.transposed,
            bias: false,
        };
        problem.validate().is_ok().then_some(problem)
    }
}

/// The fewest reduction indices a split of `conv_gemm_*`'s reduction
/// takes (two K steps).
const MIN_SPLIT_CHUNK: usize = 2 * GEMM_BK as usize;

/// Workgroups per compute unit: a `conv_gemm_*` grid with fewer has its
/// reduction split until it has about this many.
const SPLIT_WORKGROUPS_PER_UNIT: usize = 2;

/// How `conv_gemm_*` splits its reduction of `k` indices over a grid of
/// `blocks` workgroups: `(chunk, splits)`, `(0, 1)` for none. A grid of
/// fewer than [`SPLIT_WORKGROUPS_PER_UNIT`] workgroups a compute unit (the
/// emulator counts as 4 units) is split up to that many, in chunks of at
/// least [`MIN_SPLIT_CHUNK`] but the last. On an H200 (132 units): (1, 64, 56, 56) 3x3
/// 64->64 f32, 49 tiles, 0.070 -> 0.028 ms in 6 chunks; each phase of the
/// 4x4/2 transposed convolution, 160 tiles, in 2 (0.75 -> 0.52 ms); a third
/// workgroup a unit lost on both and on the 392-tile 256->256 shape
/// (docs/h100-bench.md).
fn split_reduction(dev: &Device, blocks: usize, k: usize) -> (usize, usize) {
    let units = dev.gpu_info().map_or(4, |i| i.compute_units as usize);
    let target = SPLIT_WORKGROUPS_PER_UNIT * units;
    if blocks == 0 || blocks >= target {
        return (0, 1);
    }
    let splits = target.div_ceil(blocks).min(k / MIN_SPLIT_CHUNK);
    if splits <= 1 {
        return (0, 1);
    }
    let chunk = k.div_ceil(splits).next_multiple_of(GEMM_BK as usize);
    match k.div_ceil(chunk) {
        0 | 1 => (0, 1),
        splits => (chunk, splits),
    }
}

/// The input the kernels read: the caller's, or its channels-last copy
/// for the matrix-unit kernel; `xs` its strides `(n, c, d, h, w)`.
struct Source<'t, T: WithDType> {
    x: Cow<'t, Tensor<T>>,
    xs: [usize; 5],
    /// `conv_mma_*` (or `conv_wgmma_*`) runs (see [`Conv::source`]).
    mma: bool,
}

impl<T: WithDType> Conv<'_, T> {
    /// What the kernels read. The matrix units take f16/bf16 groups of at
    /// least [`CONV_GEMM_MIN_COUT_G`] output channels and a multiple of 8
    /// input channels (the emulator runs the same kernel on the primitive's
    /// FMA body); their kernel reads 8 channels of a position as one
    /// 16-byte word, so the input must be channels-last with every other
    /// stride and its start a multiple of 8 elements: copied so when it is
    /// not (one pass over the input, small beside the product).
    fn source(&self, dev: &Device) -> Result<Source<'_, T>> {
        let p = &self.plan;
        let mma = T::Kernel::CONV_MMA.is_some()
            && (dev.matrix_unit().is_some() || !dev.is_gpu())
            && p.cin_g().is_multiple_of(8)
            && p.cout_g() >= CONV_GEMM_MIN_COUT_G
            && p.k() > 0;
        let st = self.x.layout().strides();
        let words = st[1] == 1
            && self.x.layout().offset().is_multiple_of(8)
            && st.iter().all(|v| v.is_multiple_of(8) || *v == 1);
        if !mma || words {
            return Ok(Source {
                x: Cow::Borrowed(self.x),
                xs: p.xs,
                mma,
            });
        }
        // (N, C, spatial..) -> (N, spatial.., C) memory, seen as (N, C, ..):
        // for a contiguous input a transpose of its last two dims as (N, C,
        // positions), which the tiled transpose copies.
        let r = self.x.rank();
        let (n, c) = (self.x.shape()[0], self.x.shape()[1]);
        let spatial = &self.x.shape()[2..];
        let s: usize = spatial.iter().product();
        let mut nhwc = vec![n];
        nhwc.extend_from_slice(spatial);
        nhwc.push(c);
        let mut back = vec![0, r - 1];
        back.extend(1..r - 1);
        let x = if self.x.is_contiguous() {
            self.x.reshape(&[n, c, s])?.transpose(1, 2)?.contiguous()?
        } else {
            let mut last = vec![0];
            last.extend(2..r);
            last.push(1);
            self.x.permute(&last)?.contiguous()?
        };
        let x = x.reshape(&nhwc)?.permute(&back)?;
        let (st, lead) = (x.layout().strides(), 5 - r);
        let mut xs = [0; 5];
        xs[0] = st[0];
        xs[1] = st[1];
        xs[2 + lead..r + lead].copy_from_slice(&st[2..r]);
        Ok(Source {
            x: Cow::Owned(x),
            xs,
            mma,
        })
    }

    fn too_large(&self) -> Error {
        Error::TooLarge {
            op: self.op,
            shape: self.x.shape().to_vec(),
        }
    }

    /// The kernels' geometry: the header for outputs `out` at strides
    /// `ys`, windows at `stride` from corner `o·stride - pad` (a negative pad
    /// puts the corner past the output), then per reduction index `(ci,
    /// tap)` its offset from the corner (`taps`: dilated offsets per dim).
    ///
    /// For the matrix-unit kernel (`x.mma`) the table has one entry per tap
    /// (its reduction runs over `(tap, ci)`, the channel added in the
    /// kernel).
    fn geom(
        &self,
        x: &Source<'_, T>,
        (out, ys): ([usize; 3], [usize; 5]),
        (stride, pad): ([usize; 3], [i64; 3]),
        taps: &[[usize; 3]],
    ) -> Result<Vec<u64>> {
        let p = &self.plan;
        let k = p.cin_g() * taps.len();
        let entries = if x.mma { taps.len() } else { k };
        let mut geom = vec![0u64; G_TABLE + 2 * entries];
        // The first output and the weights at the start; the next phase
        // (if any) right after this one.
        let header = [
            (G_PHASE_WORDS, geom.len()),
            (G_BATCH, p.batch),
            (G_CIN_G, p.cin_g()),
            (G_COUT_G, p.cout_g()),
            (G_K, k),
            (G_POSITIONS, out.iter().product()),
            (G_OUT_HW, out[1]),
            (G_OUT_HW + 1, out[2]),
        ];
        for (i, v) in header {
            geom[i] = v as u64;
        }
        for d in 0..3 {
            geom[G_IN + d] = p.inp[d] as u64;
            geom[G_STRIDE + d] = stride[d] as u64;
            // 32-bit, wrapping: the kernels subtract it from `o · stride`.
            geom[G_PAD + d] = pad[d] as u32 as u64;
        }
        let xs = x.xs;
        for d in 0..5 {
            geom[G_X_STRIDES + d] = xs[d] as u64;
            geom[G_Y_STRIDES + d] = ys[d] as u64;
        }
        let limit = 1usize << G_OFFSET_BITS;
        for (kk, entry) in geom[G_TABLE..].chunks_mut(2).enumerate() {
            let (ci, dk) = (kk / taps.len(), taps[kk % taps.len()]);
            if dk.iter().any(|&v| v >= limit) {
                return Err(self.too_large());
            }
            entry[0] = (ci * xs[1] + (0..3).map(|d| dk[d] * xs[2 + d]).sum::<usize>()) as u64;
            entry[1] = (dk[0] | dk[1] << G_OFFSET_BITS | dk[2] << (2 * G_OFFSET_BITS)) as u64;
        }
        Ok(geom)
    }

    /// Launches the convolution kernel over `phases` phases (the grid's z),
    /// their geometries one after another in `geom`, their weights in `w`
    /// (each `[cout, K]` in the kernel's reduction order, where its header
    /// says); `out` the largest phase's output positions per dim.
    fn launch(
        &self,
        dev: &Device,
        x: &Source<'_, T>,
        mut geom: Vec<u64>,
        phases: usize,
        w: &Tensor<T>,
        out: [usize; 3],
    ) -> Result<()> {
        let unsupported = || Error::UnsupportedDType {
            op: self.op,
            dtype: T::DTYPE,
        };
        let p = &self.plan;
        let (positions, cout_g) = (out.iter().product::<usize>(), p.cout_g());
        let cols = p.batch * positions;
        let k = geom[G_K] as usize;
        let y = Out::new(self.out.view_as::<T::Kernel>().expect("same size"));
        let bias = match self.bias {
            Some(b) => b.input(),
            None => In::opt(None::<&DeviceBuffer<T::Kernel>>),
        };
        // The implicit GEMMs: the matrix-unit tiles or the FMA tiles, one
        // launch per 65535 groups (the grid's y limit).
        let grid = |tiles: usize, g0: usize| -> Result<[u32; 3]> {
            if tiles > MAX_GRID_X as usize || phases > MAX_GRID_YZ as usize {
                return Err(self.too_large());
            }
            Ok([
                tiles as u32,
                (p.groups - g0).min(MAX_GRID_YZ as usize) as u32,
                phases as u32,
            ])
        };
        if x.mma {
            let kernel = T::Kernel::CONV_MMA.ok_or_else(unsupported)?;
            // Hopper's warpgroup product where the device runs it (the
            // emulator at wave 32 checks its logic).
            let (kernel, lds_bytes) = match T::Kernel::CONV_WGMMA {
                Some(wg) if dev.warpgroup_mma() => (wg, WGMMA_LDS_BYTES),
                _ => (kernel, MMA_LDS_BYTES),
            };
            let geom = dev.upload_words(&geom)?;
            let tiles = cout_g.div_ceil(MMA_BM as usize) * cols.div_ceil(MMA_BN as usize);
            for g0 in (0..p.groups).step_by(MAX_GRID_YZ as usize) {
                let cfg = LaunchConfig {
                    grid: grid(tiles, g0)?,
                    block: [MMA_BLOCK, 1, 1],
                    lds_bytes,
                    early_start: false,
                };
                let args = (y, x.x.input(), w.input(), bias, In::new(&geom), g0 as u32);
                dev.launch_typed(kernel, cfg, args)?;
            }
        } else if cout_g >= CONV_GEMM_MIN_COUT_G {
            let kernel = T::Kernel::CONV_GEMM.ok_or_else(unsupported)?;
            let split_sum = T::Kernel::CONV_SPLIT_SUM.ok_or_else(unsupported)?;
            let tiles =
                cout_g.div_ceil(CONV_GEMM_BM as usize) * cols.div_ceil(CONV_GEMM_BN as usize);
            let (chunk, splits) = split_reduction(dev, tiles * p.groups * phases, k);
            let part = match splits {
                1 => None,
                _ => Some(dev.alloc::<f32>(p.cout * splits * cols * phases)?),
            };
            // Each phase's sums after the last's (its own split count, as
            // its reduction length, is the same: the phases of one launch
            // take as many taps).
            let words = geom.len() / phases;
            for z in 0..phases {
                geom[z * words + G_PART_FIRST] = (z * p.cout * splits * cols) as u64;
            }
            let geom = dev.upload_words(&geom)?;
            let part_out = || part.as_ref().map(Out::new).unwrap_or_else(Out::null);
            for g0 in (0..p.groups).step_by(MAX_GRID_YZ as usize) {
                let cfg = LaunchConfig {
                    grid: grid(tiles * splits, g0)?,
                    block: [CONV_GEMM_BLOCK, 1, 1],
                    lds_bytes: CONV_GEMM_LDS_BYTES,
                    early_start: false,
                };
                let args = (
                    y,
                    x.x.input(),
                    w.input(),
                    bias,
                    In::new(&geom),
                    g0 as u32,
                    part_out(),
                    chunk as u32,
                );
                dev.launch_typed(kernel, cfg, args)?;
            }
            if let Some(part) = &part {
                // The chunks' sums added in order, the bias, one rounding.
                const BLOCK: usize = 256;
                let cfg = LaunchConfig {
                    grid: [
                        (p.cout * cols).div_ceil(BLOCK).min(MAX_GRID_X as usize) as u32,
                        1,
                        phases as u32,
                    ],
                    block: [BLOCK as u32, 1, 1],
                    lds_bytes: 0,
                    early_start: false,
                };
                let args = (
                    y,
                    In::new(part),
                    bias,
                    In::new(&geom),
                    splits as u32,
                    p.cout as u32,
                );
                dev.launch_typed(split_sum, cfg, args)?;
            }
        } else {
            let kernel = T::Kernel::CONV_DIRECT.ok_or_else(unsupported)?;
            let geom = dev.upload_words(&geom)?;
            const BLOCK: usize = 256;
            let rows = p.batch * p.cout;
            if positions.div_ceil(BLOCK) > MAX_GRID_X as usize || phases > MAX_GRID_YZ as usize {
                return Err(self.too_large());
            }
            let cfg = LaunchConfig {
                grid: [
                    positions.div_ceil(BLOCK) as u32,
                    super::row_groups(rows, positions.div_ceil(BLOCK)),
                    phases as u32,
                ],
                block: [BLOCK as u32, 1, 1],
                lds_bytes: 0,
                early_start: false,
            };
            let args = (
                y,
                x.x.input(),
                w.input(),
                bias,
                In::new(&geom),
                p.cout as u32,
            );
            dev.launch_typed(kernel, cfg, args)?;
        }
        Ok(())
    }
}
