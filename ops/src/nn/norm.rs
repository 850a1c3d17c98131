//! RMSNorm and LayerNorm over the last dim, and their fused residual-add
//! forms: API, Cpu implementation, kernel path.
//!
//! The math is f32 whatever the dtype: `h` is the input (fused: `x +
//! residual`, rounded to the dtype as a separate `add` would store it, so
//! `add_rms_norm(x, r)` equals `rms_norm(x.add(r))` bit for bit), and the
//! output `(h - mean) * scale * w (+ b)` is rounded once. RMSNorm's `scale`
//! is `1 / sqrt(mean(h²) + eps)` (candle's and llama.cpp's formula; Hugging
//! Face rounds `h * scale` to the dtype before multiplying by `w`, which
//! differs by that one rounding); LayerNorm's variance is the biased one,
//! as `torch.nn.LayerNorm`.

use crate::core::dtype::WithDType;
use crate::core::error::{Error, Result};
use crate::core::tensor::Tensor;
use crate::engine::{self, Op};
use crate::quant::Q8Activations;
use crate::quant::activations::check_shape;
use ferrocm_host::{Device, DeviceBuffer, In, LaunchConfig, Out};
use ferrocm_kernels::elem::{Elem, per_word};
use ferrocm_kernels::norm::{
    NORM_BLOCK, NORM_LDS_BYTES, NORM_PER_WAVE, NORM_WAVE_COLS, NORM_WORDS, NormKernels,
    layer_stats, norm_apply, rms_scale,
};
use rayon::prelude::*;

/// Which normalisation.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Rms,
    Layer,
}

/// One norm over the rows of a contiguous `x` (and `residual`, fused).
struct Norm<'a, T: WithDType> {
    kind: Kind,
    x: &'a Tensor<T>,
    residual: Option<&'a Tensor<T>>,
    weight: &'a Tensor<T>,
    bias: Option<&'a Tensor<T>>,
    eps: f32,
    rows: usize,
    cols: usize,
    out: DeviceBuffer<T>,
    /// The sum `x + residual`, fused only.
    sum: Option<DeviceBuffer<T>>,
}

/// A contiguous tensor's elements on the Cpu.
fn elems<T: WithDType>(t: &Tensor<T>) -> &[T] {
    let off = t.layout().offset();
    &crate::engine::cpu::host(t.buf())[off..off + t.elem_count()]
}

/// One row on the Cpu: the sums in f32, then the outputs.
struct NormRow<'a, T> {
    layer: bool,
    h: &'a [T],
    w: &'a [T],
    b: Option<&'a [T]>,
    eps: f32,
    out: &'a mut [T],
}

impl<T: WithDType> crate::engine::cpu::Task for NormRow<'_, T> {
    type Out = ();
    #[inline(always)]
    fn run(self) {
        let f = |v: &T| v.to_kernel().to_f32();
        let cols = self.h.len() as u32;
        // Eight partial sums: the loop vectorises (a single f32 sum would
        // be a chain of dependent adds).
        let (mut s1, mut s2) = ([0.0f32; 8], [0.0f32; 8]);
        let shift = if self.layer { f(&self.h[0]) } else { 0.0 };
        let (chunks, tail) = self.h.as_chunks::<8>();
        for c in chunks {
            for j in 0..8 {
                let d = f(&c[j]) - shift;
                s1[j] += d;
                s2[j] += d * d;
            }
        }
        for (j, v) in tail.iter().enumerate() {
            let d = f(v) - shift;
            s1[j] += d;
            s2[j] += d * d;
        }
        let (s1, s2) = (s1.iter().sum::<f32>(), s2.iter().sum::<f32>());
        let (mean, scale) = if self.layer {
            layer_stats(shift, s1, s2, cols, self.eps)
        } else {
            (0.0, rms_scale(s2, cols, self.eps))
        };
        match self.b {
            Some(b) => {
                for (((o, h), w), b) in self.out.iter_mut().zip(self.h).zip(self.w).zip(b) {
                    let y = norm_apply(f(h), mean, scale, f(w), f(b));
                    *o = T::from_kernel(T::Kernel::from_f32(y));
                }
            }
            None => {
                for ((o, h), w) in self.out.iter_mut().zip(self.h).zip(self.w) {
                    let y = norm_apply(f(h), mean, scale, f(w), -0.0);
                    *o = T::from_kernel(T::Kernel::from_f32(y));
                }
            }
        }
    }
}

impl<T: WithDType> Op for Norm<'_, T> {
    type Output = (DeviceBuffer<T>, Option<DeviceBuffer<T>>);

    fn cpu(mut self) -> Result<Self::Output> {
        let cols = self.cols;
        if self.rows == 0 || cols == 0 {
            return Ok((self.out, self.sum));
        }
        let x = elems(self.x);
        // Fused: the sum first (the add op's own rounding), then the norm of it.
        if let (Some(r), Some(sum)) = (self.residual, self.sum.as_mut()) {
            let sum = crate::engine::cpu::host_mut(sum);
            sum.par_iter_mut()
                .zip(x.par_iter().zip(elems(r)))
                .with_min_len(1 << 14)
                .for_each(|(s, (a, b))| {
                    *s = T::from_kernel(a.to_kernel().add(b.to_kernel()));
                });
        }
        let h = match &self.sum {
            Some(sum) => crate::engine::cpu::host(sum),
            None => x,
        };
        let (w, b) = (elems(self.weight), self.bias.map(elems));
        let (layer, eps) = (self.kind == Kind::Layer, self.eps);
        crate::engine::cpu::host_mut(&mut self.out)
            .par_chunks_mut(cols)
            .zip(h.par_chunks(cols))
            .with_min_len(((1 << 14) / cols).max(1))
            .for_each(|(out, h)| {
                crate::engine::cpu::vectorized(NormRow {
                    layer,
                    h,
                    w,
                    b,
                    eps,
                    out,
                })
            });
        Ok((self.out, self.sum))
    }

    fn kernels(self, dev: &Device) -> Result<Self::Output> {
        let table = T::Kernel::NORM.ok_or(Error::UnsupportedDType {
            op: self.name(),
            dtype: T::DTYPE,
        })?;
        if self.rows == 0 || self.cols == 0 {
            return Ok((self.out, self.sum));
        }
        let kernel = match (self.kind, self.residual.is_some()) {
            (Kind::Rms, false) => table.rms,
            (Kind::Rms, true) => table.add_rms,
            (Kind::Layer, false) => table.layer,
            (Kind::Layer, true) => table.add_layer,
        };
        // Short rows: a wave per row, as many rows per workgroup as waves.
        let per_wave = self.cols <= NORM_WAVE_COLS as usize;
        // 16-byte words when every row and operand starts on one (the
        // buffers are 256-byte aligned; views start at their offset).
        let per = per_word::<T::Kernel>() as usize;
        let operands = [Some(self.x), self.residual, Some(self.weight), self.bias];
        let words = self.cols.is_multiple_of(per)
            && operands
                .iter()
                .flatten()
                .all(|t| t.layout().offset().is_multiple_of(per));
        let flags = if per_wave { NORM_PER_WAVE } else { 0 } | if words { NORM_WORDS } else { 0 };
        let teams = match per_wave {
            true => {
                (self.rows as u64).div_ceil((NORM_BLOCK / dev.wave_size().unwrap_or(32)) as u64)
            }
            false => self.rows as u64,
        };
        let out = self.out.view_as::<T::Kernel>().expect("same size");
        let sum = self
            .sum
            .as_ref()
            .map(|s| s.view_as::<T::Kernel>().expect("same size"));
        dev.launch_typed(
            kernel,
            LaunchConfig::rows(teams, NORM_BLOCK, NORM_LDS_BYTES).starting_early(),
            (
                Out::new(out),
                sum.map(Out::new).unwrap_or_else(Out::null),
                self.x.input(),
                self.residual.map(|r| r.input()).unwrap_or_else(In::null),
                self.weight.input(),
                self.bias.map(|b| b.input()).unwrap_or_else(In::null),
                self.rows as u64,
                self.cols as u32,
                self.eps,
                flags,
            ),
        )?;
        Ok((self.out, self.sum))
    }
}

impl<T: WithDType> Norm<'_, T> {
    fn name(&self) -> &'static str {
        match (self.kind, self.residual.is_some()) {
            (Kind::Rms, false) => "rms_norm",
            (Kind::Rms, true) => "add_rms_norm",
            (Kind::Layer, false) => "layer_norm",
            (Kind::Layer, true) => "add_layer_norm",
        }
    }
}

impl<T: WithDType> Tensor<T> {
    /// RMSNorm over the last dim: `x / sqrt(mean(x²) + eps) * weight`, with
    /// `weight` of shape `[last dim]` (Llama, Mistral, Qwen; Gemma's
    /// `(1 + w)` is a weight with 1 added once). f32, f16, bf16; f32 math,
    /// one rounding. Any layout (a strided `self` is copied first).
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let x = Tensor::from_slice(&[3.0f32, 4.0, 0.0, 0.0], &[2, 2], &Device::Cpu)?;
    /// let w = Tensor::from_slice(&[1.0f32, 2.0], &[2], &Device::Cpu)?;
    /// let y = x.rms_norm(&w, 0.0)?.to_vec()?; // row 0: rms = sqrt(12.5)
    /// assert!((y[0] - 3.0 / 12.5f32.sqrt()).abs() < 1e-6 && (y[1] - 8.0 / 12.5f32.sqrt()).abs() < 1e-6);
    /// assert!(y[2..].iter().all(|v| v.is_nan())); // 0 / sqrt(0 + 0)
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::UnsupportedDType`] for integers; [`Error::ShapeMismatch`]
    /// when `weight` is not `[last dim]` (or `self` has rank 0);
    /// [`Error::BadParameter`] for a negative or NaN `eps`;
    /// [`Error::DeviceMismatch`]; [`Error::TooLarge`] for a last dim past
    /// u32; [`Error::Host`] (memory, launch).
    pub fn rms_norm(&self, weight: &Self, eps: f32) -> Result<Self> {
        Ok(self.norm(Kind::Rms, None, weight, None, eps)?.0)
    }

    /// `x + residual`, and the RMSNorm of that sum, in one pass: returns
    /// `(sum, normed)`, the residual stream and the next sublayer's input
    /// (llama.cpp's and vLLM's fused add-RMSNorm). Equal to
    /// `(s, s.rms_norm(weight, eps))` with `s = self.add(residual)`, bit for
    /// bit. `residual` has `self`'s shape.
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let x = Tensor::from_slice(&[1.0f32, 2.0], &[1, 2], &Device::Cpu)?;
    /// let r = Tensor::from_slice(&[2.0f32, 2.0], &[1, 2], &Device::Cpu)?;
    /// let w = Tensor::from_slice(&[1.0f32, 1.0], &[2], &Device::Cpu)?;
    /// let (sum, y) = x.add_rms_norm(&r, &w, 1e-6)?;
    /// assert_eq!(sum.to_vec()?, vec![3.0, 4.0]);
    /// assert_eq!(y.to_vec()?, sum.rms_norm(&w, 1e-6)?.to_vec()?);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Tensor::rms_norm`], and [`Error::ShapeMismatch`] when
    /// `residual`'s shape differs from `self`'s.
    pub fn add_rms_norm(&self, residual: &Self, weight: &Self, eps: f32) -> Result<(Self, Self)> {
        let (y, sum) = self.norm(Kind::Rms, Some(residual), weight, None, eps)?;
        Ok((sum.expect("fused norms return the sum"), y))
    }

    /// LayerNorm over the last dim: `(x - mean) / sqrt(var + eps) * weight
    /// + bias` (biased variance, as `torch.nn.LayerNorm`), `weight` and
    /// `bias` of shape `[last dim]`. f32, f16, bf16; f32 math, one rounding.
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let x = Tensor::from_slice(&[1.0f32, 3.0], &[1, 2], &Device::Cpu)?;
    /// let w = Tensor::from_slice(&[1.0f32, 1.0], &[2], &Device::Cpu)?;
    /// let b = Tensor::from_slice(&[0.5f32, 0.5], &[2], &Device::Cpu)?;
    /// assert_eq!(x.layer_norm(&w, Some(&b), 0.0)?.to_vec()?, vec![-0.5, 1.5]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Tensor::rms_norm`], and [`Error::ShapeMismatch`] for a bias
    /// not of shape `[last dim]`.
    pub fn layer_norm(&self, weight: &Self, bias: Option<&Self>, eps: f32) -> Result<Self> {
        Ok(self.norm(Kind::Layer, None, weight, bias, eps)?.0)
    }

    /// `x + residual` and the LayerNorm of that sum in one pass: `(sum,
    /// normed)`, as [`Tensor::add_rms_norm`].
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let x = Tensor::from_slice(&[1.0f32, 2.0], &[1, 2], &Device::Cpu)?;
    /// let r = Tensor::from_slice(&[0.0f32, 1.0], &[1, 2], &Device::Cpu)?;
    /// let w = Tensor::from_slice(&[1.0f32, 1.0], &[2], &Device::Cpu)?;
    /// let (sum, y) = x.add_layer_norm(&r, &w, None, 0.0)?;
    /// assert_eq!((sum.to_vec()?, y.to_vec()?), (vec![1.0, 3.0], vec![-1.0, 1.0]));
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Tensor::layer_norm`] and [`Tensor::add_rms_norm`].
    pub fn add_layer_norm(
        &self,
        residual: &Self,
        weight: &Self,
        bias: Option<&Self>,
        eps: f32,
    ) -> Result<(Self, Self)> {
        let (y, sum) = self.norm(Kind::Layer, Some(residual), weight, bias, eps)?;
        Ok((sum.expect("fused norms return the sum"), y))
    }

    /// The checks every norm makes, then its operands made contiguous.
    fn norm_operands(
        &self,
        op: &'static str,
        residual: Option<&Self>,
        weight: &Self,
        bias: Option<&Self>,
        eps: f32,
    ) -> Result<Operands<T>> {
        if !T::DTYPE.is_float() {
            return Err(Error::UnsupportedDType {
                op,
                dtype: T::DTYPE,
            });
        }
        let cols = self.shape().last().copied();
        let Some(cols) = cols else {
            return Err(Error::BadParameter {
                op,
                what: "x must have at least one dim (the normalised one), got a scalar".into(),
            });
        };
        // The error names the operand and both shapes as passed.
        for (t, name) in [(Some(weight), "weight"), (bias, "bias")] {
            if let Some(t) = t {
                self.same_device(op, t)?;
                if t.shape() != [cols] {
                    return Err(Error::BadParameter {
                        op,
                        what: format!(
                            "{name} must have shape [{cols}] (the last dim of x {:?}), got {:?}",
                            self.shape(),
                            t.shape()
                        ),
                    });
                }
            }
        }
        if let Some(r) = residual {
            self.same_device(op, r)?;
            if r.shape() != self.shape() {
                return Err(Error::ShapeMismatch {
                    op,
                    lhs: self.shape().to_vec(),
                    rhs: r.shape().to_vec(),
                });
            }
        }
        if eps.is_nan() || eps < 0.0 {
            return Err(Error::BadParameter {
                op,
                what: format!("eps must be >= 0, got {eps}"),
            });
        }
        if cols > u32::MAX as usize {
            return Err(Error::TooLarge {
                op,
                shape: self.shape().to_vec(),
            });
        }
        let x = self.contiguous()?;
        let residual = residual.map(|r| r.contiguous()).transpose()?;
        let weight = weight.contiguous()?;
        let bias = bias.map(|b| b.contiguous()).transpose()?;
        let rows = x.elem_count().checked_div(cols).unwrap_or(0);
        Ok(Operands {
            x,
            residual,
            weight,
            bias,
            rows,
            cols,
        })
    }

    fn norm(
        &self,
        kind: Kind,
        residual: Option<&Self>,
        weight: &Self,
        bias: Option<&Self>,
        eps: f32,
    ) -> Result<(Self, Option<Self>)> {
        let op = match (kind, residual.is_some()) {
            (Kind::Rms, false) => "rms_norm",
            (Kind::Rms, true) => "add_rms_norm",
            (Kind::Layer, false) => "layer_norm",
            (Kind::Layer, true) => "add_layer_norm",
        };
        let ops = self.norm_operands(op, residual, weight, bias, eps)?;
        let x = &ops.x;
        let (out, sum) = engine::run(x.device(), ops.op(kind, eps)?)?;
        Ok((
            Tensor::from_parts(out, x.shape()),
            sum.map(|s| Tensor::from_parts(s, x.shape())),
        ))
    }

    /// RMSNorm ([`Tensor::rms_norm`]) stored only in the 8-bit form the
    /// quantized products take: bit for bit
    /// `Q8Activations::quantize(&self.rms_norm(weight, eps)?)`, in one pass
    /// on a GPU (the norm's second pass rounds each group of 16 as it
    /// writes it), for a model whose next step is [`QTensor::forward_q8`].
    /// The last dim must be a multiple of 16.
    ///
    /// ```
    /// # use ferrocm_ops::WaveSize;
    /// use ferrocm_ops::quant::Q8Activations;
    /// use ferrocm_ops::{Device, Tensor};
    /// let dev = Device::emulator(WaveSize::Wave32);
    /// let x = Tensor::from_slice(&(0..32).map(|v| v as f32 - 7.0).collect::<Vec<_>>(), &[1, 32], &dev)?;
    /// let w = Tensor::from_slice(&[0.5f32; 32], &[32], &dev)?;
    /// let q = x.rms_norm_q8(&w, 1e-6)?;
    /// let r = Q8Activations::quantize(&x.rms_norm(&w, 1e-6)?)?;
    /// assert_eq!(q.to_host()?, r.to_host()?);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// [`QTensor::forward_q8`]: crate::QTensor::forward_q8
    ///
    /// # Errors
    /// As [`Tensor::rms_norm`], and [`Error::BadParameter`] for a last dim
    /// that is not a multiple of 16.
    pub fn rms_norm_q8(&self, weight: &Self, eps: f32) -> Result<Q8Activations> {
        Ok(self.norm_q8(None, weight, eps)?.1)
    }

    /// `x + residual` and its RMSNorm in 8-bit form, in one pass: `(sum,
    /// normed)` as [`Tensor::add_rms_norm`] returns them, the norm as
    /// [`Tensor::rms_norm_q8`] stores it (bit for bit
    /// `Q8Activations::quantize` of `add_rms_norm`'s `normed`).
    ///
    /// ```
    /// use ferrocm_ops::quant::Q8Activations;
    /// use ferrocm_ops::{Device, Tensor};
    /// let x = Tensor::from_slice(&[1.0f32; 16], &[1, 16], &Device::Cpu)?;
    /// let w = Tensor::from_slice(&[2.0f32; 16], &[16], &Device::Cpu)?;
    /// let (sum, q) = x.add_rms_norm_q8(&x, &w, 0.0)?;
    /// assert_eq!(sum.to_vec()?, vec![2.0; 16]);
    /// assert_eq!(q.to_host()?, (vec![127; 16], vec![2.0 / 127.0]));
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Tensor::add_rms_norm`] and [`Tensor::rms_norm_q8`].
    pub fn add_rms_norm_q8(
        &self,
        residual: &Self,
        weight: &Self,
        eps: f32,
    ) -> Result<(Self, Q8Activations)> {
        let (sum, q) = self.norm_q8(Some(residual), weight, eps)?;
        Ok((sum.expect("fused norms return the sum"), q))
    }

    fn norm_q8(
        &self,
        residual: Option<&Self>,
        weight: &Self,
        eps: f32,
    ) -> Result<(Option<Self>, Q8Activations)> {
        let op = match residual {
            Some(_) => "add_rms_norm_q8",
            None => "rms_norm_q8",
        };
        let ops = self.norm_operands(op, residual, weight, None, eps)?;
        check_shape::<T>(op, self.shape())?;
        let x = &ops.x;
        let dev = x.device();
        let norm = NormQ8 {
            norm: ops.op(Kind::Rms, eps)?,
            q8: Q8Activations::alloc(dev, x.shape())?,
        };
        let (q8, sum) = engine::run(dev, norm)?;
        Ok((sum.map(|s| Tensor::from_parts(s, x.shape())), q8))
    }
}

/// A norm's operands, checked and contiguous.
struct Operands<T: WithDType> {
    x: Tensor<T>,
    residual: Option<Tensor<T>>,
    weight: Tensor<T>,
    bias: Option<Tensor<T>>,
    rows: usize,
    cols: usize,
}

impl<T: WithDType> Operands<T> {
    /// The norm op over these operands, its outputs allocated.
    fn op(&self, kind: Kind, eps: f32) -> Result<Norm<'_, T>> {
        let (n, dev) = (self.x.elem_count(), self.x.device());
        Ok(Norm {
            kind,
            x: &self.x,
            residual: self.residual.as_ref(),
            weight: &self.weight,
            bias: self.bias.as_ref(),
            eps,
            rows: self.rows,
            cols: self.cols,
            out: dev.alloc::<T>(n)?,
            sum: match self.residual {
                Some(_) => Some(dev.alloc::<T>(n)?),
                None => None,
            },
        })
    }
}

/// An RMS norm (fused with the residual add or not) stored in 8-bit form:
/// on the Cpu, and where an operand does not start on a 16-byte word, the
/// norm and then its rounding (the same bits); on kernel devices otherwise
/// `rms_norm_q8_{dtype}` / `add_rms_norm_q8_{dtype}` in one launch.
struct NormQ8<'a, T: WithDType> {
    norm: Norm<'a, T>,
    q8: Q8Activations,
}

impl<T: WithDType> NormQ8<'_, T> {
    /// The norm, then its rounding to 8 bits.
    fn composed(
        self,
        run: impl FnOnce(Norm<'_, T>) -> Result<(DeviceBuffer<T>, Option<DeviceBuffer<T>>)>,
    ) -> Result<(Q8Activations, Option<DeviceBuffer<T>>)> {
        let shape = self.q8.shape().to_vec();
        let (out, sum) = run(self.norm)?;
        let q8 = Q8Activations::quantize(&Tensor::from_parts(out, &shape))?;
        Ok((q8, sum))
    }
}

impl<T: WithDType> Op for NormQ8<'_, T> {
    type Output = (Q8Activations, Option<DeviceBuffer<T>>);

    fn cpu(self) -> Result<Self::Output> {
        self.composed(|n| n.cpu())
    }

    fn kernels(self, dev: &Device) -> Result<Self::Output> {
        let table = T::Kernel::NORM.ok_or(Error::UnsupportedDType {
            op: self.norm.name(),
            dtype: T::DTYPE,
        })?;
        let n = &self.norm;
        if n.rows == 0 || n.cols == 0 {
            return Ok((self.q8, self.norm.sum));
        }
        let per = per_word::<T::Kernel>() as usize;
        let operands = [Some(n.x), n.residual, Some(n.weight)];
        if !operands
            .iter()
            .flatten()
            .all(|t| t.layout().offset().is_multiple_of(per))
        {
            return self.composed(|n| n.kernels(dev));
        }
        let per_wave = n.cols <= NORM_WAVE_COLS as usize;
        let flags = if per_wave { NORM_PER_WAVE } else { 0 } | NORM_WORDS;
        let teams = match per_wave {
            true => (n.rows as u64).div_ceil((NORM_BLOCK / dev.wave_size().unwrap_or(32)) as u64),
            false => n.rows as u64,
        };
        let cfg = LaunchConfig::rows(teams, NORM_BLOCK, NORM_LDS_BYTES).starting_early();
        let (codes, meta) = (Out::new(&self.q8.codes), Out::new(&self.q8.meta));
        let (rows, cols) = (n.rows as u64, n.cols as u32);
        match (n.residual, &n.sum) {
            (Some(r), Some(sum)) => dev.launch_typed(
                table.add_rms_q8,
                cfg,
                (
                    codes,
                    meta,
                    Out::new(sum.view_as::<T::Kernel>().expect("same size")),
                    n.x.input(),
                    r.input(),
                    n.weight.input(),
                    rows,
                    cols,
                    n.eps,
                    flags,
                ),
            )?,
            _ => dev.launch_typed(
                table.rms_q8,
                cfg,
                (
                    codes,
                    meta,
                    n.x.input(),
                    n.weight.input(),
                    rows,
                    cols,
                    n.eps,
                    flags,
                ),
            )?,
        }
        Ok((self.q8, self.norm.sum))
    }
}

impl crate::DynTensor {
    /// [`Tensor::rms_norm`] for a dtype known at run time (f32, f16, bf16).
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let x = Tensor::from_slice(&[3.0f32, 4.0], &[1, 2], &Device::Cpu)?.to_dyn();
    /// let w = Tensor::from_slice(&[1.0f32, 1.0], &[2], &Device::Cpu)?.to_dyn();
    /// let y = x.rms_norm(&w, 0.0)?.to_f64_vec()?;
    /// assert!((y[0] - 3.0 / 12.5f64.sqrt()).abs() < 1e-6);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::DTypeMismatch`] when the dtypes differ; as [`Tensor::rms_norm`].
    pub fn rms_norm(&self, weight: &Self, eps: f32) -> Result<Self> {
        self.same_dtype("rms_norm", weight)?;
        crate::core::dyn_tensor::with_dtype!(self, "rms_norm", |t| Ok(t
            .rms_norm(&weight.typed()?, eps)?
            .into()))
    }

    /// [`Tensor::add_rms_norm`] for a dtype known at run time: `(sum, norm)`.
    ///
    /// # Errors
    /// [`Error::DTypeMismatch`] when the dtypes differ; as [`Tensor::add_rms_norm`].
    pub fn add_rms_norm(&self, residual: &Self, weight: &Self, eps: f32) -> Result<(Self, Self)> {
        self.same_dtype("add_rms_norm", residual)?;
        self.same_dtype("add_rms_norm", weight)?;
        crate::core::dyn_tensor::with_dtype!(self, "add_rms_norm", |t| {
            let (sum, y) = t.add_rms_norm(&residual.typed()?, &weight.typed()?, eps)?;
            Ok((sum.into(), y.into()))
        })
    }

    /// [`Tensor::layer_norm`] for a dtype known at run time.
    ///
    /// # Errors
    /// [`Error::DTypeMismatch`] when the dtypes differ; as [`Tensor::layer_norm`].
    pub fn layer_norm(&self, weight: &Self, bias: Option<&Self>, eps: f32) -> Result<Self> {
        self.same_dtype("layer_norm", weight)?;
        if let Some(b) = bias {
            self.same_dtype("layer_norm", b)?;
        }
        crate::core::dyn_tensor::with_dtype!(self, "layer_norm", |t| {
            let bias = bias.map(|b| b.typed()).transpose()?;
            Ok(t.layer_norm(&weight.typed()?, bias.as_ref(), eps)?.into())
        })
    }

    /// [`Tensor::add_layer_norm`] for a dtype known at run time: `(sum, norm)`.
    ///
    /// # Errors
    /// [`Error::DTypeMismatch`] when the dtypes differ; as [`Tensor::add_layer_norm`].
    pub fn add_layer_norm(
        &self,
        residual: &Self,
        weight: &Self,
        bias: Option<&Self>,
        eps: f32,
    ) -> Result<(Self, Self)> {
        self.same_dtype("add_layer_norm", residual)?;
        self.same_dtype("add_layer_norm", weight)?;
        if let Some(b) = bias {
            self.same_dtype("add_layer_norm", b)?;
        }
        crate::core::dyn_tensor::with_dtype!(self, "add_layer_norm", |t| {
            let bias = bias.map(|b| b.typed()).transpose()?;
            let (sum, y) =
                t.add_layer_norm(&residual.typed()?, &weight.typed()?, bias.as_ref(), eps)?;
            Ok((sum.into(), y.into()))
        })
    }
}
