//! Matrix products: `matmul` (torch.matmul semantics), `matvec` and
//! `linear` (weight `[out, in]`, fused bias and activation): API, Cpu
//! implementation, kernel path.
//!
//! f32, f16 and bf16; f16 and bf16 accumulate in f32 on every device and are
//! rounded once, after the bias and the activation.
//!
//! Views run in place: every operand is described by three element strides
//! (row, column, batch), so transposed and permuted matrices, broadcast
//! batches and narrowed views need no copy. The kernels take any strides.
//! Two layouts are copied first (to contiguous, once per call):
//! - batch dims that do not collapse into one stride (e.g. `[2, 1, m, k]`
//!   against `[1, 3, k, n]`: the broadcast batch is not a single stride);
//! - for the matrix-vector kernel, a left operand that is not contiguous
//!   along `k` (it is small: at most 8 rows).
//!
//! Kernel choice: up to [`GEMV_MAX_M`] rows against a right operand stored
//! `[n, k]` (contiguous along `k`: `linear`'s weight, `b.transpose()` of a
//! row-major matrix) use the bandwidth-bound GEMV kernel, reading each weight
//! element once; everything else the tiled GEMM. Batches sharing one right
//! operand whose left rows are evenly spaced fold into the rows (`[b, s, k] x
//! [k, n]` is one `[b*s, k] x [k, n]` product).

use crate::core::dtype::{DType, WithDType};
use crate::core::dyn_tensor::DynTensor;
use crate::core::error::{Error, Result};
use crate::core::layout::{broadcast_shape, checked_count};
use crate::core::tensor::Tensor;
use crate::engine::{self, Libraries, Op, Vendor};
use ferrocm_host::blas::{Gemm, GemmOperand, GemmType};
use ferrocm_host::{Device, DeviceBuffer, In, LaunchConfig, Out};
use ferrocm_kernels::elem::Elem;
use ferrocm_kernels::matmul::{
    ACT_GELU, ACT_GELU_ERF, ACT_NONE, ACT_RELU, ACT_SILU, GEMM_BLOCK, GEMM_BN, GEMM_ROWS,
    GEMM_WIDE_ROWS, GEMV_BLOCK, GEMV_GLU_MAX_M, GEMV_MAX_M, MMA_A_WORDS, MMA_ASYNC,
    MMA_ASYNC_LDS_BYTES, MMA_B_WORDS, MMA_BLOCK, MMA_BM, MMA_BN, MMA_LDS_BYTES, MMA_T_TILES,
    MatmulKernels, WGMMA_LDS_BYTES, activation, gemm_bm, gemm_lds_bytes,
};
use rayon::prelude::*;
use std::sync::atomic::{AtomicBool, Ordering};

/// An activation fused into [`Tensor::linear`]'s output (the formulas of the
/// unary ops of the same names).
///
/// ```
/// use ferrocm_ops::{Activation, Device, Tensor};
/// let x = Tensor::from_slice(&[1.0f32, -2.0], &[1, 2], &Device::Cpu)?;
/// let w = Tensor::from_slice(&[1.0f32, 1.0], &[1, 2], &Device::Cpu)?;
/// let y = x.linear(&w, None, Some(Activation::Relu))?;
/// assert_eq!(y.to_vec()?, vec![0.0]); // relu(1 - 2)
/// # Ok::<(), ferrocm_ops::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Activation {
    /// `max(x, 0)`.
    Relu,
    /// `gelu`, tanh approximation.
    Gelu,
    /// `gelu` with erf (exact).
    GeluErf,
    /// `x * sigmoid(x)`.
    Silu,
}

impl Activation {
    /// The kernels' code for it.
    fn code(act: Option<Self>) -> u32 {
        match act {
            None => ACT_NONE,
            Some(Self::Relu) => ACT_RELU,
            Some(Self::Gelu) => ACT_GELU,
            Some(Self::GeluErf) => ACT_GELU_ERF,
            Some(Self::Silu) => ACT_SILU,
        }
    }
}

impl<T: WithDType> Tensor<T> {
    /// The matrix product, as `torch.matmul`: the last two dims multiply
    /// (`[.., m, k] x [.., k, n] -> [.., m, n]`), the dims before them
    /// broadcast; a 1-D left operand is a row vector and a 1-D right operand
    /// a column vector, their dim dropped from the result (two 1-D operands:
    /// the dot product, rank 0). f32, f16 and bf16 (f32 accumulation).
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3], &Device::Cpu)?;
    /// let b = Tensor::from_slice(&[1.0f32, 0.0, 1.0], &[3], &Device::Cpu)?;
    /// assert_eq!(a.matmul(&b)?.to_vec()?, vec![4.0, 10.0]); // [2, 3] x [3]
    /// let at = a.transpose(0, 1)?; // [3, 2], a view: no copy
    /// let c = a.matmul(&at)?;
    /// assert_eq!(c.shape(), &[2, 2]);
    /// assert_eq!(c.to_vec()?, vec![14.0, 32.0, 32.0, 77.0]);
    /// // batch dims broadcast: [4, 2, 3] x [3, 2] -> [4, 2, 2]
    /// let batch = a.broadcast_as(&[4, 2, 3])?;
    /// assert_eq!(batch.matmul(&at)?.shape(), &[4, 2, 2]);
    /// assert!(a.matmul(&a).is_err()); // inner dims 3 and 2
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::UnsupportedDType`] for integer dtypes; [`Error::ShapeMismatch`]
    /// when the inner dims differ or an operand is a scalar;
    /// [`Error::BroadcastIncompatible`] when the batch dims do not broadcast;
    /// [`Error::DeviceMismatch`]; [`Error::TooLarge`] past `u32::MAX` rows,
    /// columns, inner dim or batches; [`Error::Host`] when allocation or a
    /// launch fails.
    pub fn matmul(&self, rhs: &Self) -> Result<Self> {
        const OP: &str = "matmul";
        if self.rank() == 0 || rhs.rank() == 0 {
            return Err(Error::ShapeMismatch {
                op: OP,
                lhs: self.shape().to_vec(),
                rhs: rhs.shape().to_vec(),
            });
        }
        // Vectors become matrices, and their dim leaves the result.
        let a = match self.rank() {
            1 => self.reshape(&[1, self.shape()[0]])?,
            _ => self.clone(),
        };
        let b = match rhs.rank() {
            1 => rhs.reshape(&[rhs.shape()[0], 1])?,
            _ => rhs.clone(),
        };
        let out = product(
            OP,
            (self.shape(), rhs.shape()),
            &a,
            &b,
            None,
            ACT_NONE,
            None,
        )?;
        let mut shape = out.shape().to_vec();
        if rhs.rank() == 1 {
            shape.pop();
        }
        if self.rank() == 1 {
            shape.remove(shape.len() - 1 - (rhs.rank() != 1) as usize);
        }
        out.reshape(&shape)
    }

    /// Matrix times vector: `self` is `[.., m, k]`, `v` is `[.., k]` (its
    /// leading dims broadcast against `self`'s batch dims); the result is
    /// `[.., m]`. Unlike [`Tensor::matmul`], a 2-D `v` is a batch of vectors,
    /// not a matrix.
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let m = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2], &Device::Cpu)?;
    /// let v = Tensor::from_slice(&[1.0f32, 1.0, 0.0, 1.0], &[2, 2], &Device::Cpu)?;
    /// // two vectors against one matrix: [2, 2] x [2, 2] -> [2, 2]
    /// assert_eq!(m.matvec(&v)?.to_vec()?, vec![3.0, 7.0, 2.0, 4.0]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Tensor::matmul`]; [`Error::ShapeMismatch`] when `self` has fewer
    /// than two dims or `v` none.
    pub fn matvec(&self, v: &Self) -> Result<Self> {
        const OP: &str = "matvec";
        if self.rank() < 2 || v.rank() == 0 {
            return Err(Error::ShapeMismatch {
                op: OP,
                lhs: self.shape().to_vec(),
                rhs: v.shape().to_vec(),
            });
        }
        let mut col = v.shape().to_vec();
        col.push(1);
        let out = product(
            OP,
            (self.shape(), v.shape()),
            self,
            &v.reshape(&col)?,
            None,
            ACT_NONE,
            None,
        )?;
        let mut shape = out.shape().to_vec();
        shape.pop();
        out.reshape(&shape)
    }

    /// A linear layer: `act(self · wᵀ + bias)` with `self` `[.., in]`, the
    /// weight `w` stored `[out, in]` (as PyTorch and GGUF store it) and
    /// `bias` `[out]`; the result is `[.., out]`. The bias and the activation
    /// are applied in f32 before the one rounding to `T`. With a few rows
    /// (decode) this is the matrix-vector kernel, reading `w` once.
    ///
    /// ```
    /// use ferrocm_ops::{Activation, Device, Tensor};
    /// let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[1, 3], &Device::Cpu)?;
    /// let w = Tensor::from_slice(&[1.0f32, 0.0, 0.0, 0.0, 1.0, -1.0], &[2, 3], &Device::Cpu)?;
    /// let b = Tensor::from_slice(&[0.5f32, 0.0], &[2], &Device::Cpu)?;
    /// assert_eq!(x.linear(&w, Some(&b), None)?.to_vec()?, vec![1.5, -1.0]);
    /// let y = x.linear(&w, Some(&b), Some(Activation::Relu))?;
    /// assert_eq!(y.to_vec()?, vec![1.5, 0.0]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] when `w` is not 2-D, `self`'s last dim is not
    /// `w`'s second, or `bias` is not `[out]`; otherwise as
    /// [`Tensor::matmul`].
    pub fn linear(&self, w: &Self, bias: Option<&Self>, act: Option<Activation>) -> Result<Self> {
        const OP: &str = "linear";
        let mismatch = |rhs: &[usize]| Error::ShapeMismatch {
            op: OP,
            lhs: self.shape().to_vec(),
            rhs: rhs.to_vec(),
        };
        if w.rank() != 2 || self.rank() == 0 || self.shape()[self.rank() - 1] != w.shape()[1] {
            return Err(mismatch(w.shape()));
        }
        if let Some(b) = bias {
            if b.shape() != [w.shape()[0]] {
                return Err(mismatch(b.shape()));
            }
            self.same_device(OP, b)?;
        }
        let (inner, out) = (w.shape()[1], w.shape()[0]);
        let lead = &self.shape()[..self.rank() - 1];
        let x = self.reshape(&[lead.iter().product(), inner])?;
        let y = product(
            OP,
            (self.shape(), w.shape()),
            &x,
            &w.transpose(0, 1)?,
            bias,
            Activation::code(act),
            None,
        )?;
        let mut shape = lead.to_vec();
        shape.push(out);
        y.reshape(&shape)
    }

    /// The gated unit of a stacked gate-up projection: `w` `[2d, in]` holds
    /// the gate's `d` rows and then up's; the result `[.., d]` is
    /// `act(gate) * up` with `gate`, `up` the two halves of `self · wᵀ`, each
    /// rounded to `T` first: bit for bit
    /// `self.linear(w, None, None)?.glu_halves(act)`. With a few rows
    /// (one or two: decode) on a GPU or the emulator it is one pass of the
    /// matrix-vector kernel, which reads a gate row and its up row and
    /// stores the product (no `[.., 2d]` tensor, one launch less);
    /// otherwise it is that composition.
    ///
    /// ```
    /// use ferrocm_ops::{Activation, Device, Tensor};
    /// let x = Tensor::from_slice(&[1.0f32, 2.0], &[1, 2], &Device::Cpu)?;
    /// // gate rows [1, 0] and [0, 1]; up rows [1, 1] and [2, 0]
    /// let w = Tensor::from_slice(&[1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0, 2.0, 0.0], &[4, 2], &Device::Cpu)?;
    /// let y = x.linear_glu(&w, Activation::Relu)?;
    /// assert_eq!(y.to_vec()?, vec![3.0, 4.0]); // relu(1) * 3, relu(2) * 2
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::BadParameter`] when `w` has an odd number of rows;
    /// otherwise as [`Tensor::linear`].
    pub fn linear_glu(&self, w: &Self, act: Activation) -> Result<Self> {
        const OP: &str = "linear_glu";
        if w.rank() != 2 || self.rank() == 0 || self.shape()[self.rank() - 1] != w.shape()[1] {
            return Err(Error::ShapeMismatch {
                op: OP,
                lhs: self.shape().to_vec(),
                rhs: w.shape().to_vec(),
            });
        }
        if !w.shape()[0].is_multiple_of(2) {
            return Err(Error::BadParameter {
                op: OP,
                what: format!(
                    "the weight's rows must be even (gate and up halves), shape {:?}",
                    w.shape()
                ),
            });
        }
        let (inner, out) = (w.shape()[1], w.shape()[0] / 2);
        let lead = &self.shape()[..self.rank() - 1];
        let rows: usize = lead.iter().product();
        // The fused pass is the matrix-vector kernel's: a few rows, the
        // weight's rows contiguous (else the product, then the gated unit).
        let gemv = rows <= GEMV_GLU_MAX_M as usize
            && (w.layout().strides()[1] == 1 || inner <= 1)
            && self.device().runs_kernels();
        if !gemv {
            return self.linear(w, None, None)?.glu_halves(act);
        }
        let x = self.reshape(&[rows, inner])?;
        let y = product(
            OP,
            (self.shape(), w.shape()),
            &x,
            &w.transpose(0, 1)?,
            None,
            ACT_NONE,
            Some(act),
        )?;
        let mut shape = lead.to_vec();
        shape.push(out);
        y.reshape(&shape)
    }
}

impl<T: WithDType> Tensor<T> {
    /// `x · Wᵀ` ([`Tensor::linear`] without bias) for a weight `w` `[out,
    /// in]` of any float dtype, which may differ from x's: a model keeps an
    /// f16 or bf16 file's weights as stored under f32 activations.
    ///
    /// On the Cpu the weight is widened to f32 as the product reads it, so
    /// it is read at its own width (half of an f32 copy's bytes, and no
    /// copy in memory), and x is widened once; the sums are f32, rounded
    /// once to T. Elsewhere x and `w` are cast to f32 first, copies every
    /// call: load weights there as T.
    ///
    /// ```
    /// use ferrocm_ops::{Device, DynTensor, Tensor, f16};
    /// let x = Tensor::from_slice(&[1.0f32, 2.0], &[1, 2], &Device::Cpu)?;
    /// let w = [f16::from_f32(0.5), f16::from_f32(-1.0)];
    /// let w = DynTensor::from(Tensor::from_slice(&w, &[1, 2], &Device::Cpu)?);
    /// assert_eq!(x.linear_mixed(&w)?.to_vec()?, vec![-1.5]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::UnsupportedDType`] when `w` or x is not a float dtype;
    /// [`Error::FormatMismatch`] when `w` holds blocks;
    /// [`Error::ShapeMismatch`] when `w` is not 2-D or x's last dim is not
    /// `w`'s second; [`Error::DeviceMismatch`]; [`Error::Host`].
    pub fn linear_mixed(&self, w: &DynTensor) -> Result<Self> {
        const OP: &str = "linear_mixed";
        let wd = w.dtype_for(OP)?;
        for dtype in [T::DTYPE, wd] {
            if !dtype.is_float() {
                return Err(Error::UnsupportedDType { op: OP, dtype });
            }
        }
        if wd == T::DTYPE {
            return self.linear(&w.typed::<T>()?, None, None);
        }
        if !matches!(self.device(), Device::Cpu) {
            // Both as f32 (each holds every f16 and bf16 value), so the
            // weight is not rounded to T.
            let w = w.to_dtype(DType::F32)?.typed::<f32>()?;
            return self
                .to_dtype::<f32>()?
                .linear(&w, None, None)?
                .to_dtype::<T>();
        }
        crate::core::dyn_tensor::with_dtype!(w, OP, |w| linear_widened(OP, self, &w))
    }
}

/// [`Tensor::linear_mixed`] on the Cpu: `w` widened inside the product.
fn linear_widened<T: WithDType, W: WithDType>(
    op: &'static str,
    x: &Tensor<T>,
    w: &Tensor<W>,
) -> Result<Tensor<T>> {
    x.same_device(op, w)?;
    let r = x.rank();
    if w.rank() != 2 || r == 0 || x.shape()[r - 1] != w.shape()[1] {
        return Err(Error::ShapeMismatch {
            op,
            lhs: x.shape().to_vec(),
            rhs: w.shape().to_vec(),
        });
    }
    let (n, k) = (w.shape()[0], w.shape()[1]);
    let mut out_shape = x.shape()[..r - 1].to_vec();
    out_shape.push(n);
    let m: usize = x.shape()[..r - 1].iter().product();
    checked_count(op, &out_shape, size_of::<T>())?;
    let mut y = vec![0.0f32; m * n];
    if !y.is_empty() && k > 0 {
        let xc = x.contiguous()?;
        let mut xf = vec![0.0f32; m * k];
        super::cpu::widen(&mut xf, &host_view(&xc)[..m * k]);
        // The product reads W's rows contiguous along k.
        let w = match w.layout().strides()[1] == 1 {
            true => w.clone(),
            false => w.contiguous()?,
        };
        let (rs, wv) = (w.layout().strides()[0], host_view(&w));
        if m <= GEMV_MAX_M as usize {
            super::cpu::gemv(&mut y, &xf, wv, rs, m, k);
        } else {
            // SAFETY: y holds the m x n product; Wᵀ's element (i, j) is
            // wv[j * rs + i], inside w's storage for i < k, j < n.
            unsafe {
                super::cpu::gemm_widened(
                    (m, n, k),
                    y.as_mut_ptr(),
                    n,
                    &xf,
                    wv,
                    (1, rs),
                    rayon::current_num_threads(),
                )
            }
        }
    }
    let mut out = vec![T::from_f64(0.0); m * n];
    crate::engine::cpu::vectorized(BiasActRound {
        out: &mut out,
        sums: &y,
        bias: None,
        act: ACT_NONE,
    });
    Tensor::from_vec(out, &out_shape, &Device::Cpu)
}

/// One operand's element strides: row, column, batch (0: shared).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Strides {
    rs: usize,
    cs: usize,
    bs: usize,
}

/// A batched product `[batch, m, k] x [batch, k, n] -> [batch, m, n]` over
/// operands given by their strides.
#[derive(Clone, Copy, Debug)]
struct Plan {
    m: usize,
    n: usize,
    k: usize,
    batch: usize,
    a: Strides,
    b: Strides,
}

impl Plan {
    /// The matrix-vector kernel's case: few rows and a right operand whose
    /// columns are contiguous along k (a weight stored `[n, k]`).
    fn is_gemv(&self) -> bool {
        self.m <= GEMV_MAX_M as usize && (self.b.rs == 1 || self.k <= 1)
    }
}

/// The single batch stride of `layout`'s first `nb` dims, if they collapse
/// into one (size-1 dims are skipped; none left: 0).
fn batch_stride(shape: &[usize], strides: &[usize], nb: usize) -> Option<usize> {
    let mut inner: Option<(usize, usize)> = None; // (stride, size) of the dim inside
    for d in (0..nb).rev() {
        if shape[d] == 1 {
            continue;
        }
        match inner {
            None => inner = Some((strides[d], shape[d])),
            Some((s, size)) if strides[d] == s * size => inner = Some((s, size * shape[d])),
            Some(_) => return None,
        }
    }
    Some(inner.map_or(0, |(s, _)| s))
}

/// `t` broadcast to `batch ++ [rows, cols]`, as strides; copied to
/// contiguous first when its batch dims do not collapse.
fn operand<T: WithDType>(t: &Tensor<T>, batch: &[usize]) -> Result<(Tensor<T>, Strides)> {
    let r = t.rank();
    let mut shape = batch.to_vec();
    shape.extend_from_slice(&t.shape()[r - 2..]);
    let mut v = t.broadcast_as(&shape)?;
    let nb = batch.len();
    let bs = match batch_stride(v.shape(), v.layout().strides(), nb) {
        Some(bs) => bs,
        None => {
            v = v.contiguous()?;
            batch_stride(v.shape(), v.layout().strides(), nb).expect("contiguous batches collapse")
        }
    };
    let s = v.layout().strides();
    let (rs, cs) = (s[nb], s[nb + 1]);
    Ok((v, Strides { rs, cs, bs }))
}

/// Checks and plans `a x b` (`a` `[.., m, k]`, `b` `[.., k, n]`, both at
/// least 2-D) and runs it, with `bias` (`[n]`) and the activation fused.
/// `shown` are the operands' shapes as the caller passed them (before a
/// vector became a matrix, or a weight was transposed): the errors name
/// those.
fn product<T: WithDType>(
    op: &'static str,
    shown: (&[usize], &[usize]),
    a: &Tensor<T>,
    b: &Tensor<T>,
    bias: Option<&Tensor<T>>,
    act: u32,
    glu: Option<Activation>,
) -> Result<Tensor<T>> {
    if !T::DTYPE.is_float() {
        return Err(Error::UnsupportedDType {
            op,
            dtype: T::DTYPE,
        });
    }
    a.same_device(op, b)?;
    let (ra, rb) = (a.rank(), b.rank());
    let (m, k) = (a.shape()[ra - 2], a.shape()[ra - 1]);
    let n = b.shape()[rb - 1];
    if b.shape()[rb - 2] != k {
        return Err(Error::ShapeMismatch {
            op,
            lhs: shown.0.to_vec(),
            rhs: shown.1.to_vec(),
        });
    }
    let batch_shape =
        broadcast_shape(op, &a.shape()[..ra - 2], &b.shape()[..rb - 2]).map_err(|_| {
            Error::BroadcastIncompatible {
                op,
                lhs: shown.0.to_vec(),
                rhs: shown.1.to_vec(),
            }
        })?;
    let mut out_shape = batch_shape.clone();
    // With the gated unit fused, half the product's columns.
    out_shape.extend([m, if glu.is_some() { n / 2 } else { n }]);
    checked_count(op, &out_shape, size_of::<T>())?;
    let batch: usize = batch_shape.iter().product();
    // Past u32: the kernels count rows, columns, the inner dim and batches
    // in u32; the operand that holds the dim is named.
    let big = |d: usize| d > u32::MAX as usize;
    if big(m) || big(k) {
        return Err(Error::TooLarge {
            op,
            shape: shown.0.to_vec(),
        });
    }
    if big(n) {
        return Err(Error::TooLarge {
            op,
            shape: shown.1.to_vec(),
        });
    }
    if big(batch) {
        return Err(Error::TooLarge {
            op,
            shape: out_shape,
        });
    }
    let dev = a.device();
    let out = dev.alloc::<T>(batch * m * out_shape[out_shape.len() - 1])?;
    if out.is_empty() {
        return Ok(Tensor::from_parts(out, &out_shape));
    }
    let (mut av, sa) = operand(a, &batch_shape)?;
    let (mut bv, sb) = operand(b, &batch_shape)?;
    let mut plan = Plan {
        m,
        n,
        k,
        batch,
        a: sa,
        b: sb,
    };
    // One right operand for every batch, left rows evenly spaced: one
    // product of batch * m rows.
    if plan.batch > 1 && plan.b.bs == 0 && (plan.a.bs == plan.m * plan.a.rs || plan.m == 1) {
        plan.a.rs = if plan.m == 1 { plan.a.bs } else { plan.a.rs };
        plan.m *= plan.batch;
        plan.batch = 1;
        plan.a.bs = 0;
    }
    // A matrix times column vectors (`[m, k] x [k, 1]`, rows of A contiguous):
    // the same numbers as the vector's row times Aᵀ, the matrix-vector
    // kernel's layout (A read once, at the copy rate); C `[m, 1]` and
    // `[1, m]` are the same memory. Not with a bias: its one element
    // would have to cover every column of the swapped product.
    if plan.n == 1 && bias.is_none() && !plan.is_gemv() && (plan.a.cs == 1 || plan.k <= 1) {
        plan = Plan {
            m: 1,
            n: plan.m,
            k: plan.k,
            batch: plan.batch,
            a: Strides {
                rs: plan.k,
                cs: plan.b.rs,
                bs: plan.b.bs,
            },
            b: Strides {
                rs: plan.a.cs,
                cs: plan.a.rs,
                bs: plan.a.bs,
            },
        };
        std::mem::swap(&mut av, &mut bv);
    }
    if plan.is_gemv() && plan.a.cs != 1 && plan.k > 1 && dev.runs_kernels() {
        // The GEMV kernel reads rows of the left operand contiguous along k:
        // copy it (at most 8 rows per batch). `[batch, m, k]` contiguous is
        // also the folded `[batch * m, k]`.
        av = av.contiguous()?;
        plan.a = Strides {
            rs: plan.k,
            cs: 1,
            bs: if plan.batch == 1 { 0 } else { plan.m * plan.k },
        };
    }
    // The fused gated unit runs in the matrix-vector kernel only (the
    // caller picks it for those shapes; anything else composes).
    if let Some(g) = glu
        && !(plan.is_gemv()
            && plan.batch == 1
            && plan.m <= GEMV_GLU_MAX_M as usize
            && dev.runs_kernels())
    {
        return product(op, shown, a, b, bias, act, None)?.glu_halves(g);
    }
    let bias = bias.map(|b| b.contiguous()).transpose()?;
    let op = Matmul {
        op,
        shown,
        a: &av,
        b: &bv,
        bias: bias.as_ref(),
        plan,
        act: match glu {
            Some(g) => Activation::code(Some(g)),
            None => act,
        },
        glu: glu.is_some(),
        out,
    };
    Ok(Tensor::from_parts(engine::run(dev, op)?, &out_shape))
}

static VENDOR_BLAS: AtomicBool = AtomicBool::new(true);
static VENDOR_BLAS_ENV: std::sync::Once = std::sync::Once::new();

/// `FERROCM_VENDOR_BLAS=0` in the environment starts the process with the
/// vendor BLAS off (to run a test binary on ferrocm's kernels).
fn vendor_blas_from_env() {
    VENDOR_BLAS_ENV.call_once(|| {
        if std::env::var("FERROCM_VENDOR_BLAS").is_ok_and(|v| v == "0") {
            VENDOR_BLAS.store(false, Ordering::Relaxed);
        }
    });
}

/// Whether matrix products may use the GPU's vendor BLAS (rocBLAS, cuBLAS)
/// where it is loaded (the default; `FERROCM_VENDOR_BLAS=0` in the
/// environment turns it off from the start), or always ferrocm's kernels
/// (benches time both in one run). Process-wide.
///
/// ```
/// ferrocm_ops::matmul::set_vendor_blas(false);
/// assert!(!ferrocm_ops::matmul::vendor_blas());
/// ferrocm_ops::matmul::set_vendor_blas(true);
/// ```
pub fn set_vendor_blas(on: bool) {
    vendor_blas_from_env();
    VENDOR_BLAS.store(on, Ordering::Relaxed);
}

/// See [`set_vendor_blas`].
///
/// ```
/// // On unless FERROCM_VENDOR_BLAS=0 or set_vendor_blas(false).
/// let _on: bool = ferrocm_ops::matmul::vendor_blas();
/// ```
pub fn vendor_blas() -> bool {
    vendor_blas_from_env();
    VENDOR_BLAS.load(Ordering::Relaxed)
}

/// A matrix `M` (`rows x cols`, element `(r, c)` at `r * rs + c * cs`)
/// as BLAS sees `Mᵀ` (column-major `cols x rows`): stored so directly
/// (`false`) when `M`'s rows are contiguous, or as `M` column-major and
/// transposed (`true`) when its columns are; with the leading dimension.
fn as_blas(s: Strides, rows: usize, cols: usize) -> Option<(bool, usize)> {
    if s.cs == 1 || cols <= 1 {
        let ld = if rows <= 1 { cols.max(1) } else { s.rs };
        if ld >= cols.max(1) {
            return Some((false, ld));
        }
    }
    if s.rs == 1 || rows <= 1 {
        let ld = if cols <= 1 { rows.max(1) } else { s.cs };
        if ld >= rows.max(1) {
            return Some((true, ld));
        }
    }
    None
}

/// The plan as a column-major BLAS call, `Cᵀ = Bᵀ · Aᵀ` (C `[m, n]`
/// row-major is `Cᵀ` column-major with leading dimension n), or `None` when
/// an operand has no unit stride.
fn blas_gemm<T: WithDType>(p: &Plan, a_offset: usize, b_offset: usize) -> Option<Gemm> {
    let dtype = match T::DTYPE {
        DType::F32 => GemmType::F32,
        DType::F16 => GemmType::F16,
        DType::BF16 => GemmType::Bf16,
        _ => return None,
    };
    let (trans_a, lda) = as_blas(p.b, p.k, p.n)?;
    let (trans_b, ldb) = as_blas(p.a, p.m, p.k)?;
    Some(Gemm {
        dtype,
        c_type: dtype,
        trans_a,
        trans_b,
        m: p.n,
        n: p.m,
        k: p.k,
        batch: p.batch,
        a: GemmOperand {
            offset: b_offset,
            ld: lda,
            stride: p.b.bs,
        },
        b: GemmOperand {
            offset: a_offset,
            ld: ldb,
            stride: p.a.bs,
        },
        c: GemmOperand {
            offset: 0,
            ld: p.n,
            stride: p.m * p.n,
        },
    })
}

struct Matmul<'a, T: WithDType> {
    /// The op's name and its operands' shapes as the caller passed them,
    /// for errors.
    op: &'static str,
    shown: (&'a [usize], &'a [usize]),
    a: &'a Tensor<T>,
    b: &'a Tensor<T>,
    bias: Option<&'a Tensor<T>>,
    plan: Plan,
    /// The activation code (with `glu`, the gated unit's).
    act: u32,
    /// The gated unit of the two halves of the columns, fused
    /// (`gemv_glu`: `out` has half the plan's columns).
    glu: bool,
    out: DeviceBuffer<T>,
}

/// The operand's elements from its first one, on the Cpu.
fn host_view<T: WithDType>(t: &Tensor<T>) -> &[T] {
    &crate::engine::cpu::host(t.buf())[t.layout().offset()..]
}

/// Batch `z`'s matrix of an operand as contiguous f32 `[rows, cols]`.
fn to_f32<T: WithDType>(x: &[T], s: Strides, z: usize, rows: usize, cols: usize) -> Vec<f32> {
    let base = z * s.bs;
    let mut out = vec![0.0f32; rows * cols];
    out.par_chunks_mut(cols.max(1))
        .enumerate()
        .for_each(|(i, row)| {
            if s.cs == 1 {
                super::cpu::widen(row, &x[base + i * s.rs..][..cols]);
                return;
            }
            for (j, o) in row.iter_mut().enumerate() {
                *o = x[base + i * s.rs + j * s.cs].to_kernel().to_f32();
            }
        });
    out
}

/// f32 `[m, k] x [k, n] -> [m, n]` through the gemm crate (any strides;
/// `dst` contiguous).
#[allow(clippy::too_many_arguments)]
pub(crate) fn sgemm(
    (m, n, k): (usize, usize, usize),
    dst: &mut [f32],
    a: &[f32],
    sa: (usize, usize),
    b: &[f32],
    sb: (usize, usize),
    threads: usize,
) {
    assert!(
        dst.len() >= m * n,
        "sgemm: dst holds {} < {m} x {n}",
        dst.len()
    );
    // SAFETY: dst holds m rows of n (checked above), borrowed exclusively.
    unsafe { sgemm_rows((m, n, k), dst.as_mut_ptr(), n, a, sa, b, sb, threads) }
}

/// [`sgemm`] into rows `dst_rs` elements apart: `dst[i * dst_rs + j]` for
/// `i < m`, `j < n` (a block of a larger matrix).
///
/// # Safety
/// `dst` is valid for writes at every such element, and nothing else reads
/// or writes them during the call.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn sgemm_rows(
    (m, n, k): (usize, usize, usize),
    dst: *mut f32,
    dst_rs: usize,
    a: &[f32],
    sa: (usize, usize),
    b: &[f32],
    sb: (usize, usize),
    threads: usize,
) {
    let parallelism = if threads > 1 {
        gemm::Parallelism::Rayon(threads)
    } else {
        gemm::Parallelism::None
    };
    if k == 0 {
        for i in 0..m {
            // SAFETY: row i's n elements are the caller's (above).
            unsafe { std::slice::from_raw_parts_mut(dst.add(i * dst_rs), n) }.fill(0.0);
        }
        return;
    }
    // SAFETY: dst's elements as the caller promised; a's elements (i, j)
    // at i*sa.0 + j*sa.1 < a.len() for i < m, j < k (the plan's strides
    // over a view whose storage holds them), and b's likewise.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst,
            1,
            dst_rs as isize,
            false,
            a.as_ptr(),
            sa.1 as isize,
            sa.0 as isize,
            b.as_ptr(),
            sb.1 as isize,
            sb.0 as isize,
            0.0,
            1.0,
            false,
            false,
            false,
            parallelism,
        )
    }
}

/// A row of f32 sums given its bias and activation in place, compiled for
/// AVX2 + FMA by [`crate::engine::cpu::vectorized`] (as a closure the
/// activation called libm's `fmaf` per element: a quarter of a bf16
/// `linear` with bias and silu at 128 x 1024 x 1024).
struct BiasActF32<'a> {
    row: &'a mut [f32],
    bias: Option<&'a [f32]>,
    act: u32,
}

impl crate::engine::cpu::Task for BiasActF32<'_> {
    type Out = ();
    #[inline(always)]
    fn run(self) {
        for (j, v) in self.row.iter_mut().enumerate() {
            *v = activation::<f32>(*v + self.bias.map_or(0.0, |b| b[j]), self.act);
        }
    }
}

/// [`BiasActF32`] into `T`: a row of f32 sums given its bias and
/// activation, then rounded once.
struct BiasActRound<'a, T> {
    out: &'a mut [T],
    sums: &'a [f32],
    bias: Option<&'a [f32]>,
    act: u32,
}

impl<T: WithDType> crate::engine::cpu::Task for BiasActRound<'_, T> {
    type Out = ();
    #[inline(always)]
    fn run(self) {
        for (j, (o, v)) in self.out.iter_mut().zip(self.sums).enumerate() {
            let v = activation::<T::Kernel>(*v + self.bias.map_or(0.0, |b| b[j]), self.act);
            *o = T::from_kernel(T::Kernel::from_f32(v));
        }
    }
}

impl<T: WithDType> Op for Matmul<'_, T> {
    type Output = DeviceBuffer<T>;

    fn cpu(mut self) -> Result<DeviceBuffer<T>> {
        // `product` takes the fused gated unit only where kernels run.
        debug_assert!(!self.glu);
        let p = self.plan;
        let (a, b) = (host_view(self.a), host_view(self.b));
        let bias: Option<Vec<f32>> = self.bias.map(|t| {
            host_view(t)[..p.n]
                .iter()
                .map(|v| v.to_kernel().to_f32())
                .collect()
        });
        let threads = rayon::current_num_threads();
        // f32 results are summed straight into the output (a scratch buffer
        // and a copy pass cost 3% at 1024^3); other dtypes round from f32 sums.
        let f32_out = T::DTYPE == DType::F32;
        let mut scratch = vec![0.0f32; if f32_out { 0 } else { p.batch * p.m * p.n }];
        let out = crate::engine::cpu::host_mut(&mut self.out);
        let acc: &mut [f32] = if f32_out {
            bytemuck::cast_slice_mut(out)
        } else {
            &mut scratch
        };
        let mn = p.m * p.n;
        let f32_operands = T::DTYPE == DType::F32;
        let batch_task = |z: usize, dst: &mut [f32], threads: usize| {
            if p.is_gemv() {
                let x = to_f32(a, p.a, z, p.m, p.k);
                super::cpu::gemv(dst, &x, &b[z * p.b.bs..], p.b.cs, p.m, p.k);
            } else if f32_operands && !(p.b.rs == 1 && p.b.cs != 1) {
                let (a, b): (&[f32], &[f32]) = (bytemuck::cast_slice(a), bytemuck::cast_slice(b));
                sgemm(
                    (p.m, p.n, p.k),
                    dst,
                    &a[z * p.a.bs..],
                    (p.a.rs, p.a.cs),
                    &b[z * p.b.bs..],
                    (p.b.rs, p.b.cs),
                    threads,
                );
            } else {
                // f16/bf16, and f32 `Wᵀ` (a weight stored `[n, k]`): B
                // widened to f32 a block of columns at a time, laid out for
                // the f32 kernel's packing (see `cpu::gemm_widened`).
                // Packing `Wᵀ` as it is gathered a column per cache line:
                // f32 prompts of a TinyLlama-shaped model ran at 92-95
                // tokens/s that way, 165-172 through the blocks.
                let x = to_f32(a, p.a, z, p.m, p.k);
                assert!(
                    dst.len() >= p.m * p.n,
                    "{}: dst holds {}",
                    self.op,
                    dst.len()
                );
                // SAFETY: dst holds the m x n product (checked); b's elements
                // at the plan's strides from batch z's first.
                unsafe {
                    super::cpu::gemm_widened(
                        (p.m, p.n, p.k),
                        dst.as_mut_ptr(),
                        p.n,
                        &x,
                        &b[z * p.b.bs..],
                        (p.b.rs, p.b.cs),
                        threads,
                    )
                }
            }
        };
        if p.k == 0 {
            // Empty sums: zeros (then bias and activation).
            acc.fill(0.0);
        } else if p.batch >= threads && mn * p.k < (1 << 22) {
            // Many small products: one per task.
            acc.par_chunks_mut(mn)
                .enumerate()
                .for_each(|(z, dst)| batch_task(z, dst, 1));
        } else {
            for (z, dst) in acc.chunks_mut(mn).enumerate() {
                batch_task(z, dst, threads);
            }
        }
        let (n, act) = (p.n, self.act);
        let bias = bias.as_deref();
        if f32_out {
            if bias.is_some() || act != ACT_NONE {
                acc.par_chunks_mut(n.max(1))
                    .for_each(|row| crate::engine::cpu::vectorized(BiasActF32 { row, bias, act }));
            }
        } else {
            let out = crate::engine::cpu::host_mut(&mut self.out);
            out.par_chunks_mut(n.max(1))
                .zip(scratch.par_chunks(n.max(1)))
                .for_each(|(out, sums)| {
                    crate::engine::cpu::vectorized(BiasActRound {
                        out,
                        sums,
                        bias,
                        act,
                    })
                });
        }
        Ok(self.out)
    }

    fn vendor(self, libs: &Libraries) -> Vendor<Self> {
        // The library for the products; the bandwidth-bound matrix-vector
        // shapes run our kernel (it reads the weight once, at the copy rate).
        let p = self.plan;
        if !vendor_blas() || p.is_gemv() || p.k == 0 {
            return Vendor::Fallback(self);
        }
        let Some(mut g) = blas_gemm::<T>(&p, self.a.layout().offset(), self.b.layout().offset())
        else {
            return Vendor::Fallback(self);
        };
        let dev = libs.device();
        if self.bias.is_none() && self.act == ACT_NONE {
            return match dev.blas_gemm(&g, self.b.buf(), self.a.buf(), &self.out) {
                Ok(true) => Vendor::Done(Ok(self.out)),
                Ok(false) => Vendor::Fallback(self),
                Err(e) => Vendor::Done(Err(e.into())),
            };
        }
        // An epilogue: the library's f32 sums, then bias and activation,
        // rounded once to T by our kernel.
        g.c_type = GemmType::F32;
        let sums = match dev.alloc::<f32>(p.batch * p.m * p.n) {
            Ok(s) => s,
            Err(e) => return Vendor::Done(Err(e.into())),
        };
        match dev.blas_gemm(&g, self.b.buf(), self.a.buf(), &sums) {
            Ok(true) => {}
            Ok(false) => return Vendor::Fallback(self),
            Err(e) => return Vendor::Done(Err(e.into())),
        }
        let Some(epilogue) = T::Kernel::EPILOGUE else {
            return Vendor::Fallback(self);
        };
        let rows = (p.batch * p.m) as u64;
        let r = dev.launch_typed(
            epilogue,
            LaunchConfig::rows(rows, 256, 0),
            (
                Out::new(self.out.view_as::<T::Kernel>().expect("same size")),
                In::new(&sums),
                self.bias.map(|t| t.input()).unwrap_or_else(In::null),
                rows,
                p.n as u32,
                self.act,
            ),
        );
        Vendor::Done(r.map(|()| self.out).map_err(Into::into))
    }

    fn kernels(self, dev: &Device) -> Result<DeviceBuffer<T>> {
        let p = self.plan;
        let out = self.out.view_as::<T::Kernel>().expect("same size");
        let bias = self.bias.map(|t| t.input()).unwrap_or_else(In::null);
        // The kernels index inside one matrix in u32 (batches in u64): an
        // operand whose matrix spans more is named as the caller passed it.
        let too_large = |shape: &[usize]| Error::TooLarge {
            op: self.op,
            shape: shape.to_vec(),
        };
        let span = |s: Strides, rows: usize, cols: usize| {
            rows.saturating_sub(1)
                .saturating_mul(s.rs)
                .saturating_add(cols.saturating_sub(1).saturating_mul(s.cs))
                .saturating_add(1)
        };
        let fits = |v: usize| v <= u32::MAX as usize;
        if !fits(span(p.a, p.m, p.k)) || !fits(p.m.saturating_mul(p.n)) {
            return Err(too_large(self.shown.0));
        }
        if !fits(span(p.b, p.k, p.n)) {
            return Err(too_large(self.shown.1));
        }
        let u32_of = |v: usize| v as u32;
        let grid_y = p.batch.min(65535) as u32;
        if p.is_gemv() {
            let gemv = T::Kernel::GEMV.ok_or(Error::UnsupportedDType {
                op: self.op,
                dtype: T::DTYPE,
            })?;
            // One pass of 1, 2 or 4 rows that covers m, else passes of 4.
            let mut gemv = gemv[(p.m.max(1).next_power_of_two().trailing_zeros() as usize).min(2)];
            if self.glu {
                let glu = T::Kernel::GEMV_GLU.ok_or(Error::UnsupportedDType {
                    op: self.op,
                    dtype: T::DTYPE,
                })?;
                gemv = glu[p.m.clamp(1, 2) - 1];
            }
            // 16-byte words when every row starts on a word boundary.
            let per_word = 16 / size_of::<T>();
            let words = [p.k, p.b.cs, p.b.bs, self.b.layout().offset()]
                .iter()
                .chain(&[p.a.rs, p.a.bs, self.a.layout().offset()])
                .all(|v| v % per_word == 0);
            let unit = if words { per_word } else { 1 };
            let waves = GEMV_BLOCK / dev.wave_size().unwrap_or(32);
            // At most the workgroups the GPU holds at once (2048 workitems
            // per compute unit), each looping over its columns: a second,
            // partial round of short-lived workgroups cost the H100 about
            // 1% (14336 x 4096 bf16: 89.3% of copy against 90.3%).
            let resident = dev.gpu_info().map_or(usize::MAX, |i| {
                i.compute_units as usize * 2048 / GEMV_BLOCK as usize
            });
            // The gated unit's output: half the weight's rows.
            let n_out = if self.glu { p.n / 2 } else { p.n };
            let groups = n_out
                .div_ceil(waves as usize)
                .min(1 << 20)
                .min(resident.max(1)) as u32;
            let cfg = LaunchConfig {
                grid: [groups, grid_y, 1],
                block: [GEMV_BLOCK, 1, 1],
                lds_bytes: 0,
                // The kernel waits for the prior grids first.
                early_start: true,
            };
            dev.launch_typed(
                gemv,
                cfg,
                (
                    Out::new(out),
                    self.b.input(),
                    self.a.input(),
                    bias,
                    u32_of(n_out),
                    u32_of(p.k),
                    u32_of(p.m),
                    u32_of(p.batch),
                    u32_of(p.b.cs / unit),
                    p.b.bs as u64,
                    u32_of(p.a.rs / unit),
                    p.a.bs as u64,
                    self.act,
                    words as u32,
                ),
            )?;
        } else if let Some(gemm) = T::Kernel::GEMM_MMA.filter(|_| {
            // The matrix units where the code has them; the emulator runs
            // the same kernel on the primitive's FMA body (its logic is the
            // GPUs'). GPUs without one take the FMA-tiled kernel below.
            dev.matrix_unit().is_some() || !dev.is_gpu()
        }) {
            let tiles = p.m.div_ceil(MMA_BM as usize) * p.n.div_ceil(MMA_BN as usize);
            if tiles > ferrocm_host::launch::MAX_GRID_X as usize {
                return Err(too_large(self.shown.0));
            }
            // Groups of 8 elements along an operand's stride-1 dim load as
            // 16-byte words when every group starts on a word.
            let words = |i_stride: usize, k_stride: usize, bs: usize, offset: usize| {
                let (fast, other) = if k_stride == 1 {
                    (k_stride, i_stride)
                } else {
                    (i_stride, k_stride)
                };
                fast == 1 && [other, bs, offset].iter().all(|v| v % 8 == 0)
            };
            let mut flags = 0;
            if words(p.a.rs, p.a.cs, p.a.bs, self.a.layout().offset()) {
                flags |= MMA_A_WORDS;
            }
            if words(p.b.cs, p.b.rs, p.b.bs, self.b.layout().offset()) {
                flags |= MMA_B_WORDS;
            }
            // Transposed LDS tiles where the unit loads them cheaply. The
            // emulator takes them at wave 32 and the K-contiguous tiles at
            // wave 64, so its runs check both ways the GPUs work.
            let t_tiles = match dev.matrix_unit() {
                Some(unit) => ferrocm_kernels::host::transposed_loads(unit),
                None => dev.wave_size() == Some(32),
            };
            if t_tiles {
                flags |= MMA_T_TILES;
            }
            // Groups copied straight into LDS, several K steps in flight,
            // where the GPU copies asynchronously (the emulator checks that
            // loop at wave 32, beside the transposed tiles), when every
            // group is wholly inside its matrix or wholly outside.
            let copies = dev.double_buffers_lds();
            let whole_groups = |k_fast: bool, size: usize| {
                if k_fast {
                    p.k.is_multiple_of(8)
                } else {
                    size.is_multiple_of(8)
                }
            };
            let copied = copies
                && t_tiles
                && flags & MMA_A_WORDS != 0
                && flags & MMA_B_WORDS != 0
                && whole_groups(p.a.cs == 1, p.m)
                && whole_groups(p.b.rs == 1, p.n);
            let lds_bytes = if copied {
                flags |= MMA_ASYNC;
                MMA_ASYNC_LDS_BYTES
            } else {
                MMA_LDS_BYTES
            };
            // Hopper's warpgroup product where the device runs it (the
            // emulator at wave 32 checks its logic), on the same operands
            // as the copy-staged loop.
            let (gemm, lds_bytes) = match T::Kernel::GEMM_WGMMA {
                Some(wg) if copied && dev.warpgroup_mma() => (wg, WGMMA_LDS_BYTES),
                _ => (gemm, lds_bytes),
            };
            for z0 in (0..p.batch).step_by(65535) {
                let cfg = LaunchConfig {
                    grid: [tiles as u32, (p.batch - z0).min(65535) as u32, 1],
                    block: [MMA_BLOCK, 1, 1],
                    lds_bytes,
                    early_start: false,
                };
                dev.launch_typed(
                    gemm,
                    cfg,
                    (
                        Out::new(out),
                        self.a.input(),
                        self.b.input(),
                        bias,
                        u32_of(p.m),
                        u32_of(p.n),
                        u32_of(p.k),
                        u32_of(p.batch),
                        u32_of(z0),
                        u32_of(p.a.rs),
                        u32_of(p.a.cs),
                        p.a.bs as u64,
                        u32_of(p.b.rs),
                        u32_of(p.b.cs),
                        p.b.bs as u64,
                        self.act,
                        flags,
                    ),
                )?;
            }
        } else {
            let gemm = T::Kernel::GEMM.ok_or(Error::UnsupportedDType {
                op: self.op,
                dtype: T::DTYPE,
            })?;
            // The wide f32 GEMM where LDS stages pay (see GEMM_WIDE_ROWS).
            let (gemm, rows) = match T::Kernel::GEMM_WIDE {
                Some(wide) if dev.double_buffers_lds() => (wide, GEMM_WIDE_ROWS),
                _ => (gemm, GEMM_ROWS),
            };
            let bm = gemm_bm(rows);
            let tiles = p.m.div_ceil(bm as usize) * p.n.div_ceil(GEMM_BN as usize);
            if tiles > ferrocm_host::launch::MAX_GRID_X as usize {
                return Err(too_large(self.shown.0));
            }
            // A launch per 65535 batches (the grid's y limit).
            for z0 in (0..p.batch).step_by(65535) {
                let cfg = LaunchConfig {
                    grid: [tiles as u32, (p.batch - z0).min(65535) as u32, 1],
                    block: [GEMM_BLOCK, 1, 1],
                    lds_bytes: gemm_lds_bytes(rows),
                    early_start: false,
                };
                dev.launch_typed(
                    gemm,
                    cfg,
                    (
                        Out::new(out),
                        self.a.input(),
                        self.b.input(),
                        bias,
                        u32_of(p.m),
                        u32_of(p.n),
                        u32_of(p.k),
                        u32_of(p.batch),
                        u32_of(z0),
                        u32_of(p.a.rs),
                        u32_of(p.a.cs),
                        p.a.bs as u64,
                        u32_of(p.b.rs),
                        u32_of(p.b.cs),
                        p.b.bs as u64,
                        self.act,
                    ),
                )?;
            }
        }
        Ok(self.out)
    }
}

impl crate::DynTensor {
    /// [`Tensor::matmul`] for a dtype known at run time (f32, f16, bf16).
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2], &Device::Cpu)?.to_dyn();
    /// assert_eq!(a.matmul(&a)?.to_f64_vec()?, vec![7.0, 10.0, 15.0, 22.0]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::DTypeMismatch`] when the dtypes differ; as [`Tensor::matmul`].
    pub fn matmul(&self, rhs: &Self) -> Result<Self> {
        self.same_dtype("matmul", rhs)?;
        crate::core::dyn_tensor::with_dtype!(self, "matmul", |t| Ok(t
            .matmul(&rhs.typed()?)?
            .into()))
    }

    /// [`Tensor::matvec`] for a dtype known at run time.
    ///
    /// # Errors
    /// [`Error::DTypeMismatch`] when the dtypes differ; as [`Tensor::matvec`].
    pub fn matvec(&self, v: &Self) -> Result<Self> {
        self.same_dtype("matvec", v)?;
        crate::core::dyn_tensor::with_dtype!(self, "matvec", |t| Ok(t.matvec(&v.typed()?)?.into()))
    }

    /// [`Tensor::linear`] for a dtype known at run time: `x wᵀ + bias` with
    /// `w` stored `[out, in]` and an optional fused activation.
    ///
    /// # Errors
    /// [`Error::DTypeMismatch`] when the dtypes differ; as [`Tensor::linear`].
    pub fn linear(&self, w: &Self, bias: Option<&Self>, act: Option<Activation>) -> Result<Self> {
        self.same_dtype("linear", w)?;
        if let Some(b) = bias {
            self.same_dtype("linear", b)?;
        }
        crate::core::dyn_tensor::with_dtype!(self, "linear", |t| {
            let bias = bias.map(|b| b.typed()).transpose()?;
            Ok(t.linear(&w.typed()?, bias.as_ref(), act)?.into())
        })
    }

    /// [`Tensor::linear_glu`] for a dtype known at run time.
    ///
    /// # Errors
    /// [`Error::DTypeMismatch`] when the dtypes differ; as
    /// [`Tensor::linear_glu`].
    pub fn linear_glu(&self, w: &Self, act: Activation) -> Result<Self> {
        self.same_dtype("linear_glu", w)?;
        crate::core::dyn_tensor::with_dtype!(self, "linear_glu", |t| Ok(t
            .linear_glu(&w.typed()?, act)?
            .into()))
    }
}
