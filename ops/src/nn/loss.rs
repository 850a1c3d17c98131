//! The common losses with PyTorch's conventions: [`Tensor::mse_loss`],
//! [`Tensor::l1_loss`], [`Tensor::smooth_l1_loss`],
//! [`Tensor::binary_cross_entropy`],
//! [`Tensor::binary_cross_entropy_with_logits`], [`Tensor::nll_loss`],
//! [`Tensor::cross_entropy`] (integer class targets) and
//! [`Tensor::cross_entropy_soft`] (class probabilities).
//!
//! Each is composed of the op library's kernels (log-softmax, gather, the
//! elementwise maps, the reductions), so it runs on every device. f16 and
//! bf16 inputs are widened to f32 first and the loss rounded to the input's
//! dtype once at the end, as PyTorch accumulates them. Every form is the
//! numerically stable one: the cross entropies go through log-softmax (no
//! log of a softmax that underflowed), the logits form of the binary cross
//! entropy through `max(x, 0) - x·y + ln(1 + e^-|x|)` (no exponential that
//! overflows), and the probability form clamps each log at -100 as PyTorch
//! does (a 0 or 1 probability costs 100, not infinity).
//!
//! ```
//! use ferrocm_ops::loss::Reduction;
//! use ferrocm_ops::{Device, Tensor};
//! let x = Tensor::from_slice(&[1.0f32, 2.0, 4.0], &[3], &Device::Cpu)?;
//! let y = Tensor::from_slice(&[1.0f32, 0.0, 2.0], &[3], &Device::Cpu)?;
//! assert_eq!(x.mse_loss(&y, Reduction::Mean)?.to_vec()?, vec![(0.0 + 4.0 + 4.0) / 3.0]);
//! assert_eq!(x.l1_loss(&y, Reduction::None)?.to_vec()?, vec![0.0, 2.0, 2.0]);
//! # Ok::<(), ferrocm_ops::Error>(())
//! ```

use crate::dtype::WithDType;
use crate::index::IdType;
use crate::{Error, Result, Tensor};

/// How a loss folds its per-element values (PyTorch's `reduction`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Reduction {
    /// The per-element losses, in the target's shape.
    None,
    /// Their mean, a 0-d tensor (NaN over no elements, as PyTorch). The
    /// cross entropies divide by the targets not ignored.
    #[default]
    Mean,
    /// Their sum, a 0-d tensor (0 over no elements).
    Sum,
}

/// The options of [`Tensor::cross_entropy`] and [`Tensor::nll_loss`]:
/// PyTorch's `reduction`, `ignore_index` and `label_smoothing`.
///
/// ```
/// use ferrocm_ops::loss::{CrossEntropyOptions, Reduction};
/// let o = CrossEntropyOptions::new().reduction(Reduction::Sum).label_smoothing(0.1);
/// assert_eq!(o.ignore_index, Some(-100)); // PyTorch's default
/// assert_eq!(CrossEntropyOptions::new().ignore_index(None).ignore_index, None);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CrossEntropyOptions {
    /// How the per-target losses fold (default [`Reduction::Mean`]).
    pub reduction: Reduction,
    /// Targets equal to this contribute nothing, to the sum or to the mean's
    /// count (default `Some(-100)`, PyTorch's; never matches unsigned ids).
    pub ignore_index: Option<i64>,
    /// ε in `[0, 1]`: the target distribution is `1 - ε` on the class plus
    /// `ε / C` on every class (default 0).
    pub label_smoothing: f32,
}

impl Default for CrossEntropyOptions {
    fn default() -> Self {
        Self {
            reduction: Reduction::Mean,
            ignore_index: Some(-100),
            label_smoothing: 0.0,
        }
    }
}

impl CrossEntropyOptions {
    /// PyTorch's defaults: mean, ignore index -100, no smoothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the reduction.
    pub fn reduction(mut self, r: Reduction) -> Self {
        self.reduction = r;
        self
    }

    /// Sets (or, with `None`, removes) the ignored target value.
    pub fn ignore_index(mut self, i: Option<i64>) -> Self {
        self.ignore_index = i;
        self
    }

    /// Sets the label smoothing ε.
    pub fn label_smoothing(mut self, eps: f32) -> Self {
        self.label_smoothing = eps;
        self
    }
}

/// The loss's per-element values `l` folded by `r`, rounded to `T`.
/// `count` is the mean's divisor when it is not `l`'s element count.
fn reduce_loss<T: WithDType>(
    l: Tensor<f32>,
    r: Reduction,
    count: Option<Tensor<f32>>,
) -> Result<Tensor<T>> {
    let folded = match r {
        Reduction::None => l,
        Reduction::Sum | Reduction::Mean => {
            let n = l.elem_count();
            let sum = l.reshape(&[n])?.sum(&[0], false)?;
            match (r, count) {
                (Reduction::Sum, _) => sum,
                (_, Some(c)) => sum.div(&c)?,
                // 0 / 0 is NaN over no elements, as PyTorch's mean.
                (_, None) => sum.div(&Tensor::full(n as f32, &[], l.device())?)?,
            }
        }
    };
    folded.to_dtype::<T>()
}

/// Checks a float dtype and the shapes and devices of an elementwise loss,
/// and widens both operands to f32.
fn pair<T: WithDType>(
    op: &'static str,
    x: &Tensor<T>,
    y: &Tensor<T>,
) -> Result<(Tensor<f32>, Tensor<f32>)> {
    float_only::<T>(op)?;
    x.same_device(op, y)?;
    if x.shape() != y.shape() {
        return Err(Error::ShapeMismatch {
            op,
            lhs: x.shape().to_vec(),
            rhs: y.shape().to_vec(),
        });
    }
    Ok((x.to_dtype::<f32>()?, y.to_dtype::<f32>()?))
}

fn float_only<T: WithDType>(op: &'static str) -> Result<()> {
    match T::DTYPE.is_float() {
        true => Ok(()),
        false => Err(Error::UnsupportedDType {
            op,
            dtype: T::DTYPE,
        }),
    }
}

impl<T: WithDType> Tensor<T> {
    /// The mean squared error `(self - target)²` (PyTorch's `mse_loss`),
    /// folded by `reduction`.
    ///
    /// ```
    /// use ferrocm_ops::loss::Reduction;
    /// use ferrocm_ops::{Device, Tensor};
    /// let x = Tensor::from_slice(&[0.5f32, -1.0], &[2], &Device::Cpu)?;
    /// let y = Tensor::from_slice(&[1.5f32, 1.0], &[2], &Device::Cpu)?;
    /// assert_eq!(x.mse_loss(&y, Reduction::Sum)?.to_vec()?, vec![5.0]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::UnsupportedDType`] for integers; [`Error::ShapeMismatch`]
    /// when the shapes differ (no broadcasting, as PyTorch warns);
    /// [`Error::DeviceMismatch`]; [`Error::Host`].
    pub fn mse_loss(&self, target: &Self, reduction: Reduction) -> Result<Self> {
        let (x, y) = pair("mse_loss", self, target)?;
        reduce_loss(x.sub(&y)?.sqr()?, reduction, None)
    }

    /// The absolute error `|self - target|` (PyTorch's `l1_loss`).
    ///
    /// ```
    /// use ferrocm_ops::loss::Reduction;
    /// use ferrocm_ops::{Device, Tensor};
    /// let x = Tensor::from_slice(&[0.5f32, -1.0], &[2], &Device::Cpu)?;
    /// let y = Tensor::from_slice(&[1.5f32, 1.0], &[2], &Device::Cpu)?;
    /// assert_eq!(x.l1_loss(&y, Reduction::Mean)?.to_vec()?, vec![1.5]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Tensor::mse_loss`].
    pub fn l1_loss(&self, target: &Self, reduction: Reduction) -> Result<Self> {
        let (x, y) = pair("l1_loss", self, target)?;
        reduce_loss(x.sub(&y)?.abs()?, reduction, None)
    }

    /// The Huber-style loss of PyTorch's `smooth_l1_loss`: with `d = |self -
    /// target|`, `0.5 d² / beta` where `d < beta`, else `d - 0.5 beta`
    /// (`beta = 0` is the L1 loss).
    ///
    /// ```
    /// use ferrocm_ops::loss::Reduction;
    /// use ferrocm_ops::{Device, Tensor};
    /// let x = Tensor::from_slice(&[0.0f32, 0.0], &[2], &Device::Cpu)?;
    /// let y = Tensor::from_slice(&[0.5f32, 3.0], &[2], &Device::Cpu)?;
    /// assert_eq!(x.smooth_l1_loss(&y, 1.0, Reduction::None)?.to_vec()?, vec![0.125, 2.5]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Tensor::mse_loss`]; [`Error::BadParameter`] for a `beta` that is
    /// negative or not finite.
    pub fn smooth_l1_loss(&self, target: &Self, beta: f32, reduction: Reduction) -> Result<Self> {
        let op = "smooth_l1_loss";
        if !(beta >= 0.0 && beta.is_finite()) {
            return Err(Error::BadParameter {
                op,
                what: format!("beta {beta} must be finite and at least 0"),
            });
        }
        let (x, y) = pair(op, self, target)?;
        let d = x.sub(&y)?.abs()?;
        let linear = d.affine(1.0, -0.5 * beta)?;
        let l = match beta {
            0.0 => linear,
            _ => d
                .lt_scalar(beta)?
                .where_cond(&d.sqr()?.affine(0.5 / beta, 0.0)?, &linear)?,
        };
        reduce_loss(l, reduction, None)
    }

    /// The binary cross entropy of probabilities `self` against targets in
    /// `[0, 1]` (PyTorch's `binary_cross_entropy`):
    /// `-(y ln x + (1 - y) ln(1 - x))`, each log clamped at -100 as PyTorch
    /// does, so a probability of exactly 0 or 1 costs at most 100. A
    /// probability outside `[0, 1]` gives NaN (PyTorch raises; the check would
    /// cost a read back).
    ///
    /// ```
    /// use ferrocm_ops::loss::Reduction;
    /// use ferrocm_ops::{Device, Tensor};
    /// let p = Tensor::from_slice(&[0.5f32, 0.0], &[2], &Device::Cpu)?;
    /// let y = Tensor::from_slice(&[1.0f32, 1.0], &[2], &Device::Cpu)?;
    /// let l = p.binary_cross_entropy(&y, Reduction::None)?.to_vec()?;
    /// assert!((l[0] - std::f32::consts::LN_2).abs() < 1e-6);
    /// assert_eq!(l[1], 100.0); // ln 0 clamped
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Tensor::mse_loss`].
    pub fn binary_cross_entropy(&self, target: &Self, reduction: Reduction) -> Result<Self> {
        let (x, y) = pair("binary_cross_entropy", self, target)?;
        let ln_x = x.log()?.maximum_scalar(-100.0)?;
        let ln_1mx = x.affine(-1.0, 1.0)?.log()?.maximum_scalar(-100.0)?;
        // -(y ln x + (1 - y) ln(1 - x)) = (y - 1) ln(1 - x) - y ln x
        let l = y.affine(1.0, -1.0)?.mul(&ln_1mx)?.sub(&y.mul(&ln_x)?)?;
        reduce_loss(l, reduction, None)
    }

    /// The binary cross entropy of logits `self` (PyTorch's
    /// `binary_cross_entropy_with_logits`): `-(y ln σ(x) + (1 - y) ln(1 -
    /// σ(x)))` as `max(x, 0) - x y + ln(1 + e^-|x|)`, exact for logits of any
    /// size (no exponential overflows, no probability rounds to 0 or 1).
    ///
    /// ```
    /// use ferrocm_ops::loss::Reduction;
    /// use ferrocm_ops::{Device, Tensor};
    /// let x = Tensor::from_slice(&[0.0f32, 1000.0], &[2], &Device::Cpu)?;
    /// let y = Tensor::from_slice(&[1.0f32, 0.0], &[2], &Device::Cpu)?;
    /// let l = x.binary_cross_entropy_with_logits(&y, Reduction::None)?.to_vec()?;
    /// assert!((l[0] - std::f32::consts::LN_2).abs() < 1e-6);
    /// assert_eq!(l[1], 1000.0); // -ln(1 - σ(1000)), not infinity
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Tensor::mse_loss`].
    pub fn binary_cross_entropy_with_logits(
        &self,
        target: &Self,
        reduction: Reduction,
    ) -> Result<Self> {
        let (x, y) = pair("binary_cross_entropy_with_logits", self, target)?;
        // softplus(-|x|) = ln(1 + e^-|x|) through ln_1p: accurate where
        // e^-|x| is far below f32's epsilon.
        let tail = x.abs()?.neg()?.softplus()?;
        let l = x.relu()?.sub(&x.mul(&y)?)?.add(&tail)?;
        reduce_loss(l, reduction, None)
    }

    /// The negative log-likelihood of log-probabilities `self` at integer
    /// class targets (PyTorch's `nll_loss`): `self` is `(N, C)`, `(C)` or
    /// `(N, C, d1, ..)` and `target` `(N)`, `()` or `(N, d1, ..)`; the loss
    /// of each target is `-self[n, target[n], ..]`, 0 where the target is
    /// the ignore index. The mean divides by the targets not ignored (NaN
    /// when every one is). Label smoothing `ε` mixes in the mean over the
    /// classes: `(1 - ε) · nll + ε · (-Σ_c self[n, c, ..] / C)`.
    ///
    /// ```
    /// use ferrocm_ops::loss::CrossEntropyOptions;
    /// use ferrocm_ops::{Device, Tensor};
    /// let logp = Tensor::from_slice(&[-0.5f32, -1.0, -2.0, -3.0], &[2, 2], &Device::Cpu)?;
    /// let t = Tensor::from_slice(&[1i64, -100], &[2], &Device::Cpu)?;
    /// // Row 1 is ignored: the mean is over row 0 only.
    /// assert_eq!(logp.nll_loss(&t, &CrossEntropyOptions::new())?.to_vec()?, vec![1.0]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::UnsupportedDType`] for integer inputs;
    /// [`Error::ShapeMismatch`] when `target`'s shape is not `self`'s
    /// without the class dim; [`Error::BadParameter`] for a smoothing outside
    /// `[0, 1]`; [`Error::DeviceMismatch`]; a target outside `0..C` (other
    /// than the ignore index) is `gather`'s
    /// [`HostError::IdOutOfRange`](ferrocm_host::Error::IdOutOfRange), from
    /// this call on the Cpu and from the next wait on a kernel device;
    /// [`Error::Host`].
    pub fn nll_loss<I: IdType>(
        &self,
        target: &Tensor<I>,
        opts: &CrossEntropyOptions,
    ) -> Result<Self> {
        class_loss("nll_loss", self, target, opts, false)
    }

    /// The cross entropy of logits `self` at integer class targets
    /// (PyTorch's `cross_entropy` with class indices): [`Tensor::nll_loss`]
    /// of `self`'s log-softmax over the class dim (dim 1, or 0 for a `(C)`
    /// input), with the same shapes, ignore index, smoothing and reductions.
    ///
    /// ```
    /// use ferrocm_ops::loss::{CrossEntropyOptions, Reduction};
    /// use ferrocm_ops::{Device, Tensor};
    /// let logits = Tensor::from_slice(&[0.0f32, 0.0, 1000.0, 0.0], &[2, 2], &Device::Cpu)?;
    /// let t = Tensor::from_slice(&[0u32, 1], &[2], &Device::Cpu)?;
    /// let l = logits.cross_entropy(&t, &CrossEntropyOptions::new().reduction(Reduction::None))?;
    /// let l = l.to_vec()?;
    /// assert!((l[0] - std::f32::consts::LN_2).abs() < 1e-6);
    /// assert_eq!(l[1], 1000.0); // finite: through log-softmax
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Tensor::nll_loss`].
    pub fn cross_entropy<I: IdType>(
        &self,
        target: &Tensor<I>,
        opts: &CrossEntropyOptions,
    ) -> Result<Self> {
        class_loss("cross_entropy", self, target, opts, true)
    }

    /// The cross entropy of logits `self` against class probabilities
    /// `target` of the same shape (PyTorch's `cross_entropy` with a float
    /// target): `-Σ_c t_c · log_softmax(self)_c` over the class dim (dim 1,
    /// or 0 for a `(C)` input), with `t` smoothed to `(1 - ε) t + ε / C`. The
    /// mean divides by the number of rows (every element but the class dim).
    ///
    /// ```
    /// use ferrocm_ops::loss::Reduction;
    /// use ferrocm_ops::{Device, Tensor};
    /// let logits = Tensor::from_slice(&[0.0f32, 0.0], &[1, 2], &Device::Cpu)?;
    /// let t = Tensor::from_slice(&[0.25f32, 0.75], &[1, 2], &Device::Cpu)?;
    /// let l = logits.cross_entropy_soft(&t, 0.0, Reduction::Mean)?.to_vec()?;
    /// assert!((l[0] - std::f32::consts::LN_2).abs() < 1e-6);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Tensor::mse_loss`]; [`Error::BadParameter`] for a smoothing
    /// outside `[0, 1]` or an input of rank 0.
    pub fn cross_entropy_soft(
        &self,
        target: &Self,
        label_smoothing: f32,
        reduction: Reduction,
    ) -> Result<Self> {
        let op = "cross_entropy";
        check_smoothing(op, label_smoothing)?;
        let (x, t) = pair(op, self, target)?;
        let class_dim = class_dim(op, x.shape())?;
        let classes = x.shape()[class_dim];
        let t = match label_smoothing {
            0.0 => t,
            e => t.affine(1.0 - e, e / classes as f32)?,
        };
        let l = x
            .log_softmax_dim(class_dim)?
            .mul(&t)?
            .sum(&[class_dim], false)?
            .neg()?;
        reduce_loss(l, reduction, None)
    }
}

/// The class dim of a loss input: 1, or 0 for a `(C)` input.
fn class_dim(op: &'static str, shape: &[usize]) -> Result<usize> {
    match shape.len() {
        0 => Err(Error::BadParameter {
            op,
            what: "the input is 0-d: it needs a class dim".into(),
        }),
        1 => Ok(0),
        _ => Ok(1),
    }
}

fn check_smoothing(op: &'static str, eps: f32) -> Result<()> {
    match (0.0..=1.0).contains(&eps) {
        true => Ok(()),
        false => Err(Error::BadParameter {
            op,
            what: format!("label_smoothing {eps} must lie in [0, 1]"),
        }),
    }
}

/// nll_loss, and cross_entropy (`logits`: through log-softmax first).
fn class_loss<T: WithDType, I: IdType>(
    op: &'static str,
    x: &Tensor<T>,
    target: &Tensor<I>,
    opts: &CrossEntropyOptions,
    logits: bool,
) -> Result<Tensor<T>> {
    float_only::<T>(op)?;
    check_smoothing(op, opts.label_smoothing)?;
    x.same_device(op, target)?;
    let class_dim = class_dim(op, x.shape())?;
    let mut want = x.shape().to_vec();
    let classes = want.remove(class_dim);
    if target.shape() != want {
        return Err(Error::ShapeMismatch {
            op,
            lhs: x.shape().to_vec(),
            rhs: target.shape().to_vec(),
        });
    }
    let x = x.to_dtype::<f32>()?;
    let logp = match logits {
        true => x.log_softmax_dim(class_dim)?,
        false => x,
    };
    // The ignore index as `I` (none when `I` cannot hold it: u32 ids and
    // the default -100).
    let ignore = opts.ignore_index.and_then(id_from_i64::<I>);
    let ignored = ignore.map(|i| target.eq_scalar(i)).transpose()?;
    // Ignored targets read class 0 instead (their loss is dropped below).
    let safe = match &ignored {
        Some(m) => m.where_cond(&Tensor::zeros(&[], logp.device())?, target)?,
        None => target.clone(),
    };
    let mut one_per_row = safe.shape().to_vec();
    one_per_row.insert(class_dim, 1);
    let picked = logp
        .gather(class_dim, &safe.reshape(&one_per_row)?)?
        .reshape(&want)?;
    let mut l = picked.neg()?;
    let eps = opts.label_smoothing;
    if eps > 0.0 {
        let spread = logp
            .sum(&[class_dim], false)?
            .affine(-eps / classes as f32, 0.0)?;
        l = l.affine(1.0 - eps, 0.0)?.add(&spread)?;
    }
    let (l, count) = match ignored {
        Some(m) => {
            let kept = m.eq_scalar(0)?.to_dtype::<f32>()?;
            let n = kept.elem_count();
            let count = kept.reshape(&[n])?.sum(&[0], false)?;
            // A select, not a product: an ignored row may hold inf or NaN.
            (
                m.where_cond(&Tensor::zeros(&[], l.device())?, &l)?,
                Some(count),
            )
        }
        None => (l, None),
    };
    reduce_loss(l, opts.reduction, count)
}

/// `i` as an id of type `I`, when `I` holds it exactly (u32 and u8 ids
/// never equal PyTorch's default -100).
fn id_from_i64<I: IdType>(i: i64) -> Option<I> {
    let v = I::from_f64(i as f64);
    (v.to_f64() == i as f64 && i as f64 as i64 == i).then_some(v)
}
