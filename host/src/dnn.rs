//! The DNN-library hook of a GPU backend: MIOpen on ROCm, cuDNN on CUDA,
//! opened at run time like the BLAS libraries, bound to the device's stream,
//! reached by the op layer through the checked entry
//! [`Device::dnn_conv`](crate::Device::dnn_conv) and absent without error
//! where the library does not load (our kernels run then).
//!
//! A convolution is described once, backend-neutrally, as a
//! [`ConvProblem`]: dense NCHW (or NHWC) tensors, symmetric padding, groups.
//! Each library turns it into its descriptors, picks an algorithm for it
//! once per process (cuDNN: its graph API's engines, timed at the first
//! call, else its legacy heuristics; MIOpen: its immediate mode,
//! which reads MIOpen's find-db), keeps both in a cache keyed by the
//! problem, and says how much workspace the algorithm needs; the workspace
//! comes from the device's caching allocator. A problem the library has no
//! algorithm for is declined (`Ok(None)`), and the op runs our kernels.

use crate::error::Result;

/// A DNN library bound to a device's stream.
pub trait Dnn: Send + Sync {
    /// `MIOpen` or `cuDNN`.
    fn name(&self) -> &'static str;

    /// The library's handle (`miopenHandle_t`, `cudnnHandle_t`) as an
    /// address, locked for the caller until the guard drops; the handle is
    /// already bound to the device's stream. The convolution calls below
    /// take the same lock: a thread holding the guard must not call them.
    fn handle(&self) -> DnnGuard<'_>;

    /// The workspace bytes the library's algorithm for `p` needs, choosing
    /// that algorithm (and building the descriptors) at the first sight of
    /// `p` in this process; `None` when the library has no algorithm for
    /// it (the caller runs its own kernels).
    ///
    /// # Errors
    /// The library's status when it fails for another reason than not
    /// supporting the problem.
    fn conv_workspace(&self, p: &ConvProblem) -> Result<Option<usize>>;

    /// Queues `y = conv(x, w)` for `p`, or its transposed convolution
    /// (after [`Dnn::conv_workspace`] answered `Some` for it), plus the
    /// bias at `at.bias` where the library fuses it (cuDNN's graph path):
    /// `Ok(true)` when the bias was added (to the f32 sums, before the one
    /// rounding), `Ok(false)` when the caller still has to add it.
    ///
    /// # Safety
    /// `p` passed [`ConvProblem::validate`], and `at` addresses live device
    /// buffers of this device holding at least [`ConvProblem::extents`]
    /// elements from `x`, `w` and `y`, and `workspace_bytes` (at least what
    /// [`Dnn::conv_workspace`] said) from `workspace`, and `at.bias`, when
    /// given (`p.bias`), `out_channels` elements.
    ///
    /// # Errors
    /// The library's status.
    unsafe fn conv(&self, p: &ConvProblem, at: ConvAddresses) -> Result<bool>;

    /// Queues the pooling `p` from the input at device address `x` into the
    /// output at `y`: `Ok(true)` when queued, `Ok(false)` when the library
    /// declines the problem (nothing queued; the caller runs its own
    /// kernels). The default declines.
    ///
    /// # Safety
    /// `p` passed [`PoolProblem::validate`], and `x` and `y` address live
    /// device memory of this device holding [`PoolProblem::extents`]
    /// elements each.
    ///
    /// # Errors
    /// The library's status when the call fails for another reason than not
    /// taking the problem.
    unsafe fn pool(&self, p: &PoolProblem, x: u64, y: u64) -> Result<bool> {
        let _ = (p, x, y);
        Ok(false)
    }

    /// Queues the batch normalisation `p` with `epsilon` (at least 0):
    /// `Ok(true)` when queued, `Ok(false)` when the library declines it
    /// (nothing queued). The default declines.
    ///
    /// # Safety
    /// `p` passed [`BatchNormProblem::validate`]; `at.x` and `at.y` address
    /// live device memory of this device holding [`BatchNormProblem::elements`]
    /// elements each, and the four vectors `channels` f32 each.
    ///
    /// # Errors
    /// The library's status when the call fails for another reason than not
    /// taking the problem.
    unsafe fn batch_norm(
        &self,
        p: &BatchNormProblem,
        at: BatchNormAddresses,
        epsilon: f64,
    ) -> Result<bool> {
        let _ = (p, at, epsilon);
        Ok(false)
    }
}

/// Element types a DNN call takes (f32 accumulation for all three).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DnnType {
    /// f32 (no TF32 or other reduced-precision products: f32 results).
    F32,
    /// IEEE half.
    F16,
    /// bfloat16.
    Bf16,
}

impl DnnType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DnnType::F32 => 4,
            DnnType::F16 | DnnType::Bf16 => 2,
        }
    }
}

/// A forward convolution (cross-correlation, as in PyTorch) of dense
/// tensors, in the libraries' terms: input `(N, C_in, spatial..)`, filter
/// `(C_out, C_in / groups, kernel..)`, output `(N, C_out, output..)`, each
/// stored contiguous NC(D)HW, or N(D)HWC when `channels_last` (the filter
/// then `(C_out, kernel.., C_in / groups)`).
///
/// ```
/// use ferrocm_host::dnn::{ConvProblem, DnnType};
/// let p = ConvProblem {
///     dtype: DnnType::F32,
///     batch: 2, in_channels: 4, out_channels: 6, groups: 2,
///     input: vec![5, 7], kernel: vec![3, 3], output: vec![3, 4],
///     stride: vec![1, 2], padding: vec![0, 1], dilation: vec![1, 1],
///     channels_last: false, transposed: false, bias: false,
/// };
/// p.validate().unwrap();
/// assert_eq!(p.extents(), [2 * 4 * 35, 6 * 2 * 9, 2 * 6 * 12]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ConvProblem {
    /// Element type of input, filter and output.
    pub dtype: DnnType,
    /// N.
    pub batch: usize,
    /// C_in.
    pub in_channels: usize,
    /// C_out.
    pub out_channels: usize,
    /// Groups (C_in and C_out are multiples).
    pub groups: usize,
    /// Input spatial dims (1 to 3 of them).
    pub input: Vec<usize>,
    /// Kernel spatial dims.
    pub kernel: Vec<usize>,
    /// Output spatial dims.
    pub output: Vec<usize>,
    /// Stride per spatial dim.
    pub stride: Vec<usize>,
    /// Padding per spatial dim, the same before and after.
    pub padding: Vec<usize>,
    /// Dilation per spatial dim.
    pub dilation: Vec<usize>,
    /// NHWC memory (and a `(C_out, kernel.., C_in / groups)` filter, or
    /// `(C_in, kernel.., C_out / groups)` transposed).
    pub channels_last: bool,
    /// A transposed convolution (PyTorch's `conv_transpose`, the libraries'
    /// backward data): the filter is `(C_in, C_out / groups, kernel..)` and
    /// the output the size whose forward convolution has the input's size,
    /// `(output + 2·padding - dilation·(kernel - 1) - 1) / stride + 1 =
    /// input` (an output padding below the stride).
    pub transposed: bool,
    /// A per-channel bias (`out_channels` elements, 16-byte aligned) comes
    /// with the call, for the library to add where it can fuse it.
    pub bias: bool,
}

/// Where a [`Dnn::conv`] reads and writes: device addresses of the
/// first elements, and the workspace.
#[derive(Clone, Copy, Debug)]
pub struct ConvAddresses {
    /// The input's first element.
    pub x: u64,
    /// The filter's first element.
    pub w: u64,
    /// The output's first element.
    pub y: u64,
    /// The workspace (any address when `workspace_bytes` is 0).
    pub workspace: u64,
    /// Its size.
    pub workspace_bytes: usize,
    /// The bias's first element (given exactly when the problem's `bias`).
    pub bias: Option<u64>,
}

/// What [`Device::dnn_conv`](crate::Device::dnn_conv) did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DnnConv {
    /// Nothing: no library, no algorithm for the problem, or no memory for
    /// its workspace (the caller runs its own kernels).
    Declined,
    /// The convolution is queued; `bias_added`: the bias too (else the
    /// caller adds it).
    Ran {
        /// Whether the library added the bias.
        bias_added: bool,
    },
}

impl ConvProblem {
    /// Checks that the problem is one convolution the libraries take: 1 to 3
    /// spatial dims given for every list, channels divisible by the groups,
    /// every size at least 1, each output dim the one the input, kernel,
    /// stride, padding and dilation give, and every dim and element count
    /// within the libraries' `int`.
    ///
    /// # Errors
    /// What is wrong, with the values.
    pub fn validate(&self) -> std::result::Result<(), String> {
        let sd = self.input.len();
        if !(1..=3).contains(&sd) {
            return Err(format!("{sd} spatial dims; 1 to 3 are supported"));
        }
        let lists = [
            &self.kernel,
            &self.output,
            &self.stride,
            &self.padding,
            &self.dilation,
        ];
        if lists.iter().any(|l| l.len() != sd) {
            return Err(format!(
                "every per-dim list must have {sd} entries: {self:?}"
            ));
        }
        if self.groups == 0
            || !self.in_channels.is_multiple_of(self.groups)
            || !self.out_channels.is_multiple_of(self.groups)
        {
            return Err(format!(
                "groups {} must divide C_in {} and C_out {}",
                self.groups, self.in_channels, self.out_channels
            ));
        }
        let sizes = [self.batch, self.in_channels, self.out_channels];
        let spatial = [&self.input, &self.kernel, &self.stride, &self.dilation];
        if sizes.contains(&0) || spatial.iter().any(|l| l.contains(&0)) {
            return Err(format!("a size, stride or dilation of 0: {self:?}"));
        }
        for d in 0..sd {
            let span = (self.kernel[d] - 1)
                .checked_mul(self.dilation[d])
                .and_then(|s| s.checked_add(1));
            // The forward convolution's input and output along this dim.
            let (fwd_in, fwd_out) = match self.transposed {
                false => (self.input[d], self.output[d]),
                true => (self.output[d], self.input[d]),
            };
            let padded = self.padding[d]
                .checked_mul(2)
                .and_then(|p| p.checked_add(fwd_in));
            let out = match (span, padded) {
                (Some(s), Some(p)) if p >= s => (p - s) / self.stride[d] + 1,
                _ => 0,
            };
            if out != fwd_out {
                return Err(format!(
                    "{} {d} is {fwd_out} but {} {fwd_in}, kernel {}, stride {}, padding {}, dilation {} give {out}",
                    if self.transposed {
                        "input dim"
                    } else {
                        "output dim"
                    },
                    if self.transposed { "output" } else { "input" },
                    self.kernel[d],
                    self.stride[d],
                    self.padding[d],
                    self.dilation[d]
                ));
            }
        }
        let fits = |v: usize| i32::try_from(v).is_ok();
        let counts = self.checked_extents();
        let all = sizes.iter().chain(spatial.iter().flat_map(|l| l.iter()));
        if !all
            .chain(&self.padding)
            .chain(&self.output)
            .all(|&v| fits(v))
            || !counts.is_some_and(|c| c.iter().all(|&v| fits(v)))
        {
            return Err(format!("a dim or element count past i32: {self:?}"));
        }
        Ok(())
    }

    /// Elements of the input, filter and output (dense).
    ///
    /// # Panics
    /// When a count overflows `usize` (a problem that passed
    /// [`ConvProblem::validate`] does not).
    pub fn extents(&self) -> [usize; 3] {
        self.checked_extents().expect("validated problem")
    }

    fn checked_extents(&self) -> Option<[usize; 3]> {
        let product = |head: &[usize], l: &[usize]| {
            head.iter()
                .chain(l)
                .try_fold(1usize, |acc, &v| acc.checked_mul(v))
        };
        Some([
            product(&[self.batch, self.in_channels], &self.input)?,
            match self.transposed {
                false => product(
                    &[self.out_channels, self.in_channels / self.groups.max(1)],
                    &self.kernel,
                )?,
                true => product(
                    &[self.in_channels, self.out_channels / self.groups.max(1)],
                    &self.kernel,
                )?,
            },
            product(&[self.batch, self.out_channels], &self.output)?,
        ])
    }

    /// The problem with at least two spatial dims (a 1-d convolution as a
    /// 2-d one of height 1): the libraries' descriptors start at 4-d.
    pub fn at_least_2d(&self) -> ConvProblem {
        if self.input.len() >= 2 {
            return self.clone();
        }
        let lift = |l: &[usize], one: usize| [&[one][..], l].concat();
        ConvProblem {
            input: lift(&self.input, 1),
            kernel: lift(&self.kernel, 1),
            output: lift(&self.output, 1),
            stride: lift(&self.stride, 1),
            padding: lift(&self.padding, 0),
            dilation: lift(&self.dilation, 1),
            ..self.clone()
        }
    }

    /// Dims and strides (elements, `int`s) of the input (`channels =
    /// in_channels`, `spatial = input`) or output tensor, NC.. order, for
    /// the stored layout (of a problem that passed
    /// [`ConvProblem::validate`]; values past `int` saturate).
    pub fn tensor_dims(&self, channels: usize, spatial: &[usize]) -> (Vec<i32>, Vec<i32>) {
        dense_dims(self.batch, channels, spatial, self.channels_last)
    }
}

/// Dims and strides (`int`s, saturating) of a dense `(batch, channels,
/// spatial..)` tensor stored NC.. or, `channels_last`, N..C.
fn dense_dims(
    batch: usize,
    channels: usize,
    spatial: &[usize],
    channels_last: bool,
) -> (Vec<i32>, Vec<i32>) {
    let mut dims = vec![batch, channels];
    dims.extend_from_slice(spatial);
    let n = dims.len();
    // Memory order: N, C, spatial.. or N, spatial.., C.
    let order: Vec<usize> = if channels_last {
        [0].into_iter().chain(2..n).chain([1]).collect()
    } else {
        (0..n).collect()
    };
    let mut strides = vec![0usize; n];
    let mut step = 1usize;
    for &d in order.iter().rev() {
        strides[d] = step;
        step = step.saturating_mul(dims[d]);
    }
    let ints = |v: Vec<usize>| {
        v.into_iter()
            .map(|x| i32::try_from(x).unwrap_or(i32::MAX))
            .collect()
    };
    (ints(dims), ints(strides))
}

/// How a pooling window is reduced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PoolMode {
    /// The largest element; a NaN in the window gives NaN (PyTorch's rule).
    Max,
    /// The window's sum over its size, the padding's zeros counted.
    AvgIncludePad,
    /// The sum over the number of the window's elements inside the input.
    AvgExcludePad,
}

/// A pooling forward of a dense tensor in the libraries' terms: input
/// `(N, C, input..)`, output `(N, C, output..)`, both stored NC(D)HW or,
/// `channels_last`, N(D)HWC; per spatial dim a window, a stride and a
/// padding on both sides (below the window), the output
/// `(input + 2·padding - window) / stride + 1` (rounded down). No dilation,
/// no indices.
///
/// ```
/// use ferrocm_host::dnn::{DnnType, PoolMode, PoolProblem};
/// let p = PoolProblem {
///     dtype: DnnType::F32, mode: PoolMode::Max, batch: 1, channels: 64,
///     input: vec![112, 112], window: vec![3, 3], output: vec![56, 56],
///     stride: vec![2, 2], padding: vec![1, 1], channels_last: false,
/// };
/// p.validate().unwrap();
/// assert_eq!(p.extents(), [64 * 112 * 112, 64 * 56 * 56]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PoolProblem {
    /// Element type of input and output.
    pub dtype: DnnType,
    /// The reduction.
    pub mode: PoolMode,
    /// N.
    pub batch: usize,
    /// C.
    pub channels: usize,
    /// Input spatial dims (1 to 3).
    pub input: Vec<usize>,
    /// Window per spatial dim.
    pub window: Vec<usize>,
    /// Output spatial dims.
    pub output: Vec<usize>,
    /// Stride per spatial dim.
    pub stride: Vec<usize>,
    /// Padding per spatial dim, the same before and after.
    pub padding: Vec<usize>,
    /// N(D)HWC memory for both tensors.
    pub channels_last: bool,
}

impl PoolProblem {
    /// Checks that the problem is one pooling the libraries take: 1 to 3
    /// spatial dims given for every list, every size, window and stride at
    /// least 1, padding below the window, each output dim the one the
    /// others give, every dim and element count within `int`.
    ///
    /// # Errors
    /// What is wrong, with the values.
    pub fn validate(&self) -> std::result::Result<(), String> {
        let sd = self.input.len();
        if !(1..=3).contains(&sd) {
            return Err(format!("{sd} spatial dims; 1 to 3 are supported"));
        }
        let lists = [&self.window, &self.output, &self.stride, &self.padding];
        if lists.iter().any(|l| l.len() != sd) {
            return Err(format!(
                "every per-dim list must have {sd} entries: {self:?}"
            ));
        }
        let spatial = [&self.input, &self.window, &self.stride];
        if self.batch == 0 || self.channels == 0 || spatial.iter().any(|l| l.contains(&0)) {
            return Err(format!("a size, window or stride of 0: {self:?}"));
        }
        for d in 0..sd {
            if self.padding[d] >= self.window[d] {
                return Err(format!(
                    "padding {} must be below the window {} (dim {d})",
                    self.padding[d], self.window[d]
                ));
            }
            let padded = self.padding[d]
                .checked_mul(2)
                .and_then(|p| p.checked_add(self.input[d]));
            let out = match padded {
                Some(p) if p >= self.window[d] => (p - self.window[d]) / self.stride[d] + 1,
                _ => 0,
            };
            if out != self.output[d] {
                return Err(format!(
                    "output dim {d} is {} but input {}, window {}, stride {}, padding {} give {out}",
                    self.output[d], self.input[d], self.window[d], self.stride[d], self.padding[d]
                ));
            }
        }
        let fits = |v: usize| i32::try_from(v).is_ok();
        let all = [self.batch, self.channels]
            .into_iter()
            .chain(lists.into_iter().flatten().copied())
            .chain(self.input.iter().copied());
        let counts = self.checked_extents();
        if !all.into_iter().all(fits) || !counts.is_some_and(|c| c.iter().all(|&v| fits(v))) {
            return Err(format!("a dim or element count past i32: {self:?}"));
        }
        Ok(())
    }

    /// Elements of the input and the output.
    ///
    /// # Panics
    /// When a count overflows `usize` (a problem that passed
    /// [`PoolProblem::validate`] does not).
    pub fn extents(&self) -> [usize; 2] {
        self.checked_extents().expect("validated problem")
    }

    fn checked_extents(&self) -> Option<[usize; 2]> {
        let product = |l: &[usize]| {
            l.iter()
                .try_fold(self.batch.checked_mul(self.channels)?, |acc, &v| {
                    acc.checked_mul(v)
                })
        };
        Some([product(&self.input)?, product(&self.output)?])
    }

    /// The problem with at least two spatial dims (1-d as 2-d of height 1).
    pub fn at_least_2d(&self) -> PoolProblem {
        if self.input.len() >= 2 {
            return self.clone();
        }
        let lift = |l: &[usize], one: usize| [&[one][..], l].concat();
        PoolProblem {
            input: lift(&self.input, 1),
            window: lift(&self.window, 1),
            output: lift(&self.output, 1),
            stride: lift(&self.stride, 1),
            padding: lift(&self.padding, 0),
            ..self.clone()
        }
    }

    /// Dims and strides (`int`s) of the input (`spatial = input`) or the
    /// output, NC.. order, for the stored layout.
    pub fn tensor_dims(&self, spatial: &[usize]) -> (Vec<i32>, Vec<i32>) {
        dense_dims(self.batch, self.channels, spatial, self.channels_last)
    }
}

/// Batch normalisation in inference form (`cudnnBatchNormalizationForwardInference`,
/// `miopenBatchNormalizationForwardInference`, spatial mode) over a dense
/// `(N, C, positions)` tensor (its spatial dims merged), stored NC.. or,
/// `channels_last`, N..C: `y = (x - mean[c]) / sqrt(var[c] + epsilon) ·
/// scale[c] + bias[c]`, the four per-channel vectors f32, the epsilon given
/// with the call.
///
/// ```
/// use ferrocm_host::dnn::{BatchNormProblem, DnnType};
/// let p = BatchNormProblem {
///     dtype: DnnType::Bf16, batch: 2, channels: 320, positions: 64 * 64, channels_last: false,
/// };
/// p.validate().unwrap();
/// assert_eq!(p.elements(), 2 * 320 * 4096);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BatchNormProblem {
    /// Element type of input and output.
    pub dtype: DnnType,
    /// N.
    pub batch: usize,
    /// C.
    pub channels: usize,
    /// The spatial dims' product (1 for an `(N, C)` input).
    pub positions: usize,
    /// N..C memory for both tensors.
    pub channels_last: bool,
}

/// Where a [`Dnn::batch_norm`] reads and writes (device addresses).
#[derive(Clone, Copy, Debug)]
pub struct BatchNormAddresses {
    /// The input's first element.
    pub x: u64,
    /// The output's first element.
    pub y: u64,
    /// Per channel, f32: the scale (weight).
    pub scale: u64,
    /// The bias.
    pub bias: u64,
    /// The running mean.
    pub mean: u64,
    /// The running variance.
    pub var: u64,
}

impl BatchNormProblem {
    /// Checks that every size is at least 1 and every dim and the element
    /// count fit the libraries' `int`.
    ///
    /// # Errors
    /// What is wrong, with the values.
    pub fn validate(&self) -> std::result::Result<(), String> {
        let dims = [self.batch, self.channels, self.positions];
        if dims.contains(&0) {
            return Err(format!("a size of 0: {self:?}"));
        }
        let count = dims.iter().try_fold(1usize, |a, &v| a.checked_mul(v));
        if !count.is_some_and(|c| i32::try_from(c).is_ok()) {
            return Err(format!("an element count past i32: {self:?}"));
        }
        Ok(())
    }

    /// Elements of the input (and the output).
    pub fn elements(&self) -> usize {
        self.batch * self.channels * self.positions
    }

    /// Dims and strides (`int`s) of input and output as the 4-d tensors
    /// the libraries take: `(N, C, positions, 1)`.
    pub fn tensor_dims(&self) -> (Vec<i32>, Vec<i32>) {
        dense_dims(
            self.batch,
            self.channels,
            &[self.positions, 1],
            self.channels_last,
        )
    }
}

/// Where a backend's planning of a problem stopped: the library declined
/// it (a NOT_SUPPORTED or BAD_PARAM status: not this problem), or failed.
pub(crate) enum PlanStop {
    Declined,
    Failed(crate::error::Error),
}

/// A planning outcome as the plan or `None`: a failure other than "not
/// this problem" (a sub-library that does not load, memory) is said once on
/// stderr, as a device that fails to open is, and declines too: ferrocm's
/// kernels can still run the problem.
pub(crate) fn planned<P>(
    outcome: std::result::Result<P, PlanStop>,
    library: &str,
    problem: &dyn std::fmt::Debug,
) -> Option<P> {
    match outcome {
        Ok(plan) => Some(plan),
        Err(PlanStop::Declined) => None,
        Err(PlanStop::Failed(e)) => {
            eprintln!(
                "ferrocm: {library} could not plan {problem:?}: {e}; ferrocm's kernels run it"
            );
            None
        }
    }
}

/// The plan for `key` in a per-process `cache`, made with `plan` at the
/// key's first sight (a decline remembered as `None`, see [`planned`]).
pub(crate) fn plan_once<'c, K, P>(
    cache: &'c mut std::collections::HashMap<K, Option<P>>,
    key: &K,
    library: &str,
    plan: impl FnOnce() -> std::result::Result<P, PlanStop>,
) -> Option<&'c P>
where
    K: std::hash::Hash + Eq + Clone + std::fmt::Debug,
{
    if !cache.contains_key(key) {
        let outcome = planned(plan(), library, key);
        cache.insert(key.clone(), outcome);
    }
    cache.get(key).and_then(Option::as_ref)
}

/// Exclusive use of a DNN handle until dropped.
pub struct DnnGuard<'a> {
    raw: *mut std::ffi::c_void,
    _lock: std::sync::MutexGuard<'a, ()>,
}

impl<'a> DnnGuard<'a> {
    /// A guard over `raw`, held while `lock` is.
    pub fn new(raw: *mut std::ffi::c_void, lock: std::sync::MutexGuard<'a, ()>) -> Self {
        Self { raw, _lock: lock }
    }

    /// The raw handle, for the library's calls.
    pub fn raw(&self) -> *mut std::ffi::c_void {
        self.raw
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Device, Error, WaveSize};

    fn problem() -> ConvProblem {
        ConvProblem {
            dtype: DnnType::F32,
            batch: 2,
            in_channels: 6,
            out_channels: 4,
            groups: 2,
            input: vec![7, 9],
            kernel: vec![3, 2],
            output: vec![3, 5],
            stride: vec![2, 2],
            padding: vec![0, 1],
            dilation: vec![1, 2],
            channels_last: false,
            transposed: false,
            bias: false,
        }
    }

    /// Each broken field is refused with its values; sizes past `int` too.
    #[test]
    fn validate_refuses_inconsistent_problems() {
        // (7 - 3) / 2 + 1 = 3 and (9 + 2 - 3) / 2 + 1 = 5.
        problem().validate().unwrap();
        let broken: Vec<(ConvProblem, &str)> = vec![
            (
                ConvProblem {
                    output: vec![3, 6],
                    ..problem()
                },
                "output dim 1 is 6",
            ),
            (
                ConvProblem {
                    groups: 4,
                    ..problem()
                },
                "groups 4",
            ),
            (
                ConvProblem {
                    groups: 0,
                    ..problem()
                },
                "groups 0",
            ),
            (
                ConvProblem {
                    stride: vec![0, 2],
                    ..problem()
                },
                "a size, stride or dilation of 0",
            ),
            (
                ConvProblem {
                    kernel: vec![3],
                    ..problem()
                },
                "2 entries",
            ),
            (
                ConvProblem {
                    input: vec![1, 1, 1, 1],
                    ..problem()
                },
                "4 spatial dims",
            ),
            (
                ConvProblem {
                    batch: 1 << 31,
                    ..problem()
                },
                "past i32",
            ),
        ];
        for (p, want) in broken {
            let e = p.validate().unwrap_err();
            assert!(e.contains(want), "{e}");
        }
    }

    /// A transposed problem: the output is the forward convolution's input
    /// (any of the sizes that stride rounds to it), the filter's dims swap.
    #[test]
    fn transposed_problems_size_their_output_from_the_input() {
        let t = |out: usize| ConvProblem {
            input: vec![3, 5],
            output: vec![out, 9],
            transposed: true,
            ..problem()
        };
        // Forward (7 or 8 + 0 - 3) / 2 + 1 = 3, (9 + 2 - 3) / 2 + 1 = 5.
        t(7).validate().unwrap();
        t(8).validate().unwrap();
        let e = t(9).validate().unwrap_err();
        assert!(e.contains("input dim 0 is 3"), "{e}");
        assert_eq!(t(7).extents(), [2 * 6 * 15, 6 * 2 * 6, 2 * 4 * 63]);
    }

    /// NCHW and NHWC strides, and a 1-d problem lifted to 2-d.
    #[test]
    fn descriptors_follow_the_layout() {
        let p = problem();
        assert_eq!(
            p.tensor_dims(6, &[7, 9]),
            (vec![2, 6, 7, 9], vec![378, 63, 9, 1])
        );
        let last = ConvProblem {
            channels_last: true,
            ..problem()
        };
        assert_eq!(
            last.tensor_dims(6, &[7, 9]),
            (vec![2, 6, 7, 9], vec![378, 1, 54, 6])
        );
        let one = ConvProblem {
            input: vec![9],
            kernel: vec![2],
            output: vec![5],
            stride: vec![2],
            padding: vec![1],
            dilation: vec![2],
            ..problem()
        };
        one.validate().unwrap();
        let two = one.at_least_2d();
        two.validate().unwrap();
        assert_eq!(
            (two.input, two.kernel, two.output),
            (vec![1, 9], vec![1, 2], vec![1, 5])
        );
        assert_eq!(
            (two.stride, two.padding, two.dilation),
            (vec![1, 2], vec![0, 1], vec![1, 2])
        );
    }

    fn pool_problem() -> PoolProblem {
        PoolProblem {
            dtype: DnnType::F32,
            mode: PoolMode::AvgExcludePad,
            batch: 2,
            channels: 3,
            input: vec![7, 8],
            window: vec![3, 2],
            output: vec![4, 5],
            stride: vec![2, 2],
            padding: vec![1, 1],
            channels_last: false,
        }
    }

    /// A pooling problem: each broken field refused with its values; the
    /// output rounded down; 1-d lifted to 2-d; NCHW and NHWC strides.
    #[test]
    fn pool_problems_validate_and_describe() {
        let p = pool_problem();
        p.validate().unwrap();
        assert_eq!(p.extents(), [2 * 3 * 56, 2 * 3 * 20]);
        let broken = [
            (
                PoolProblem {
                    output: vec![5, 5],
                    ..p.clone()
                },
                "output dim 0 is 5 but input 7, window 3, stride 2, padding 1 give 4",
            ),
            (
                PoolProblem {
                    padding: vec![3, 1],
                    ..p.clone()
                },
                "padding 3 must be below the window 3",
            ),
            (
                PoolProblem {
                    stride: vec![0, 2],
                    ..p.clone()
                },
                "of 0",
            ),
            (
                PoolProblem {
                    window: vec![3],
                    ..p.clone()
                },
                "2 entries",
            ),
            (
                PoolProblem {
                    input: vec![1; 4],
                    ..p.clone()
                },
                "4 spatial dims",
            ),
            (
                PoolProblem {
                    batch: 1 << 31,
                    ..p.clone()
                },
                "past i32",
            ),
        ];
        for (q, want) in broken {
            let e = q.validate().unwrap_err();
            assert!(e.contains(want), "{e}");
        }
        let one = PoolProblem {
            input: vec![9],
            window: vec![3],
            output: vec![4],
            stride: vec![2],
            padding: vec![0],
            ..p.clone()
        };
        one.validate().unwrap();
        let two = one.at_least_2d();
        two.validate().unwrap();
        assert_eq!(
            (two.input, two.window, two.output),
            (vec![1, 9], vec![1, 3], vec![1, 4])
        );
        assert_eq!((two.stride, two.padding), (vec![1, 2], vec![0, 0]));
        let last = PoolProblem {
            channels_last: true,
            ..p.clone()
        };
        assert_eq!(
            last.tensor_dims(&[4, 5]),
            (vec![2, 3, 4, 5], vec![60, 1, 15, 3])
        );
        assert_eq!(
            p.tensor_dims(&[4, 5]),
            (vec![2, 3, 4, 5], vec![60, 20, 5, 1])
        );
    }

    /// `Device::dnn_pool` refuses bad calls before it looks for a library,
    /// and declines where there is none.
    #[test]
    fn dnn_pool_checks_before_declining() {
        let p = pool_problem();
        let [nx, ny] = p.extents();
        let dev = Device::emulator(WaveSize::Wave32);
        let (x, y) = (dev.alloc::<f32>(nx).unwrap(), dev.alloc::<f32>(ny).unwrap());
        assert!(!dev.dnn_pool(&p, &x, 0, &y).unwrap());
        let refused = |r: crate::Result<bool>, want: &str| match r {
            Err(Error::BadDnnCall { why, .. }) => assert!(why.contains(want), "{why}"),
            other => panic!("expected BadDnnCall ({want}), got {other:?}"),
        };
        refused(dev.dnn_pool(&p, &x, 1, &y), "from element 1");
        let short = dev.alloc::<f32>(ny - 1).unwrap();
        refused(dev.dnn_pool(&p, &x, 0, &short), "need");
        let h = dev.alloc::<u16>(nx).unwrap();
        let hy = dev.alloc::<u16>(ny).unwrap();
        refused(dev.dnn_pool(&p, &h, 0, &hy), "2-byte elements");
        let bad = PoolProblem {
            output: vec![1, 1],
            ..p.clone()
        };
        refused(dev.dnn_pool(&bad, &x, 0, &y), "output dim");
        let cpu = Device::Cpu.alloc::<f32>(ny).unwrap();
        refused(dev.dnn_pool(&p, &x, 0, &cpu), "another device");
    }

    /// `Device::dnn_batch_norm` refuses bad calls before it looks for a
    /// library, and declines where there is none.
    #[test]
    fn dnn_batch_norm_checks_before_declining() {
        let p = BatchNormProblem {
            dtype: DnnType::F32,
            batch: 2,
            channels: 3,
            positions: 5,
            channels_last: true,
        };
        assert_eq!(p.tensor_dims(), (vec![2, 3, 5, 1], vec![15, 1, 3, 3]));
        let dev = Device::emulator(WaveSize::Wave32);
        let (x, y) = (dev.alloc::<f32>(30).unwrap(), dev.alloc::<f32>(30).unwrap());
        let v = dev.alloc::<f32>(4).unwrap();
        let vs = [(&v, 0); 4];
        assert!(!dev.dnn_batch_norm(&p, &x, 0, &y, vs, 1e-5).unwrap());
        let refused = |r: crate::Result<bool>, want: &str| match r {
            Err(Error::BadDnnCall { why, .. }) => assert!(why.contains(want), "{why}"),
            other => panic!("expected BadDnnCall ({want}), got {other:?}"),
        };
        refused(
            dev.dnn_batch_norm(&p, &x, 1, &y, vs, 1e-5),
            "from element 1",
        );
        refused(dev.dnn_batch_norm(&p, &x, 0, &y, vs, -1.0), "epsilon -1");
        refused(
            dev.dnn_batch_norm(&p, &x, 0, &y, vs, f64::NAN),
            "epsilon NaN",
        );
        let mut short = vs;
        short[3] = (&v, 2);
        refused(
            dev.dnn_batch_norm(&p, &x, 0, &y, short, 1e-5),
            "the var needs 3 elements; its buffer holds 4 (from element 2)",
        );
        let empty = BatchNormProblem {
            positions: 0,
            ..p.clone()
        };
        refused(
            dev.dnn_batch_norm(&empty, &x, 0, &y, vs, 1e-5),
            "a size of 0",
        );
        let h = dev.alloc::<u16>(30).unwrap();
        refused(
            dev.dnn_batch_norm(&p, &h, 0, &h, vs, 1e-5),
            "2-byte elements",
        );
        let cpu = Device::Cpu.alloc::<f32>(4).unwrap();
        refused(
            dev.dnn_batch_norm(&p, &x, 0, &y, [(&cpu, 0); 4], 1e-5),
            "another device",
        );
    }

    /// The checked entry refuses bad calls before it looks for a library,
    /// and declines (`DnnConv::Declined`) where there is none.
    #[test]
    fn dnn_conv_checks_before_declining() {
        for dev in [Device::Cpu, Device::emulator(WaveSize::Wave32)] {
            let p = problem();
            let [nx, nw, ny] = p.extents();
            let x = dev.alloc::<f32>(nx).unwrap();
            let w = dev.alloc::<f32>(nw).unwrap();
            let y = dev.alloc::<f32>(ny).unwrap();
            assert_eq!(
                dev.dnn_conv(&p, &x, 0, &w, 0, &y, None).unwrap(),
                DnnConv::Declined
            );
            let short = dev.alloc::<f32>(ny - 1).unwrap();
            let refused = |r: crate::Result<DnnConv>, want: &str| match r {
                Err(Error::BadDnnCall { why, .. }) => assert!(why.contains(want), "{why}"),
                other => panic!("expected BadDnnCall ({want}), got {other:?}"),
            };
            refused(dev.dnn_conv(&p, &x, 0, &w, 0, &short, None), "need");
            refused(dev.dnn_conv(&p, &x, 1, &w, 0, &y, None), "from element 1");
            refused(dev.dnn_conv(&p, &x, 0, &w, 2, &y, None), "filter from 2");
            refused(
                dev.dnn_conv(
                    &ConvProblem {
                        output: vec![1, 1],
                        ..p.clone()
                    },
                    &x,
                    0,
                    &w,
                    0,
                    &y,
                    None,
                ),
                "output dim",
            );
            let h = dev.alloc::<u16>(nx).unwrap();
            let hw = dev.alloc::<u16>(nw).unwrap();
            let hy = dev.alloc::<u16>(ny).unwrap();
            refused(
                dev.dnn_conv(&p, &h, 0, &hw, 0, &hy, None),
                "2-byte elements",
            );
            // The bias: exactly when the problem says, `out_channels` (4)
            // elements from a 16-byte aligned start.
            let b = dev.alloc::<f32>(8).unwrap();
            let pb = ConvProblem {
                bias: true,
                ..p.clone()
            };
            refused(
                dev.dnn_conv(&p, &x, 0, &w, 0, &y, Some((&b, 0))),
                "without one",
            );
            refused(dev.dnn_conv(&pb, &x, 0, &w, 0, &y, None), "none given");
            refused(
                dev.dnn_conv(&pb, &x, 0, &w, 0, &y, Some((&b, 5))),
                "8 elements from element 5",
            );
            refused(
                dev.dnn_conv(&pb, &x, 0, &w, 0, &y, Some((&b, 2))),
                "not 16-byte aligned",
            );
            assert_eq!(
                dev.dnn_conv(&pb, &x, 0, &w, 0, &y, Some((&b, 4))).unwrap(),
                DnnConv::Declined
            );
        }
        let cpu = Device::Cpu.alloc::<f32>(1 << 10).unwrap();
        let emu = Device::emulator(WaveSize::Wave32);
        let p = problem();
        let [nx, nw, _] = p.extents();
        let (x, w) = (emu.alloc::<f32>(nx).unwrap(), emu.alloc::<f32>(nw).unwrap());
        match emu.dnn_conv(&p, &x, 0, &w, 0, &cpu, None) {
            Err(Error::BadDnnCall { why, .. }) => assert!(why.contains("another device")),
            other => panic!("{other:?}"),
        }
    }
}
