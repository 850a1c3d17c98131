//! Rotary position embeddings in three layouts (halves, interleaved, and
//! halves over `(b, t, h, d)`), with a position offset, per-batch tables
//! and partial rotary dims: API, Cpu implementation, kernel path. See
//! `ferrocm_kernels::rope` for the formula.

use crate::core::dtype::WithDType;
use crate::core::error::{Error, Result};
use crate::core::tensor::{BLOCK, Tensor};
use crate::engine::{self, Op};
use ferrocm_host::{Device, DeviceBuffer, LaunchConfig, Out};
use ferrocm_kernels::elem::{Elem, per_word};
use ferrocm_kernels::rope::{
    ROPE_HALVES, ROPE_INTERLEAVED, ROPE_THD, RopeKernels, rope_pair, rope_pair_at,
};
use rayon::prelude::*;

/// The sizes of one rope call.
#[derive(Clone, Copy, Debug)]
struct Plan {
    b: usize,
    h: usize,
    t: usize,
    d: usize,
    /// Rotary dims (twice the tables' columns).
    r: usize,
    /// Rows of one table.
    t_table: usize,
    offset: usize,
    per_batch: bool,
}

impl Plan {
    /// The position and batch of row `row` (of `b * h * t`).
    #[inline(always)]
    fn position(&self, row: usize, layout: u32) -> (usize, usize) {
        let ti = match layout {
            ROPE_THD => row / self.h % self.t,
            _ => row % self.t,
        };
        (ti, row / (self.h * self.t))
    }

    /// Where the table row of `(ti, bi)` starts.
    #[inline(always)]
    fn table_row(&self, ti: usize, bi: usize) -> usize {
        let first = if self.per_batch { bi * self.t_table } else { 0 };
        (first + self.offset + ti) * (self.r / 2)
    }
}

/// One rope call over a contiguous `x` and contiguous tables.
struct Rope<'a, T: WithDType, const LAYOUT: u32> {
    x: &'a Tensor<T>,
    cos: &'a Tensor<T>,
    sin: &'a Tensor<T>,
    plan: Plan,
    out: DeviceBuffer<T>,
}

/// A contiguous tensor's elements on the Cpu.
fn elems<T: WithDType>(t: &Tensor<T>) -> &[T] {
    let off = t.layout().offset();
    &crate::engine::cpu::host(t.buf())[off..off + t.elem_count()]
}

impl<T: WithDType, const LAYOUT: u32> Op for Rope<'_, T, LAYOUT> {
    type Output = DeviceBuffer<T>;

    fn cpu(mut self) -> Result<DeviceBuffer<T>> {
        let p = self.plan;
        if self.out.is_empty() {
            return Ok(self.out);
        }
        let (x, cos, sin) = (elems(self.x), elems(self.cos), elems(self.sin));
        let f = |v: T| v.to_kernel().to_f32();
        let half = p.r / 2;
        crate::engine::cpu::host_mut(&mut self.out)
            .par_chunks_mut(p.d)
            .zip(x.par_chunks(p.d))
            .enumerate()
            .with_min_len(((1 << 14) / p.d).max(1))
            .for_each(|(row, (out, x))| {
                let (ti, bi) = p.position(row, LAYOUT);
                let at = p.table_row(ti, bi);
                let (c, s) = (&cos[at..at + half], &sin[at..at + half]);
                for k in 0..half {
                    let (i0, i1) = rope_pair_at::<LAYOUT>(k as u32, p.r as u32);
                    let (i0, i1) = (i0 as usize, i1 as usize);
                    let (y0, y1) = rope_pair(f(x[i0]), f(x[i1]), f(c[k]), f(s[k]));
                    out[i0] = T::from_kernel(T::Kernel::from_f32(y0));
                    out[i1] = T::from_kernel(T::Kernel::from_f32(y1));
                }
                out[p.r..].copy_from_slice(&x[p.r..]);
            });
        Ok(self.out)
    }

    fn kernels(self, dev: &Device) -> Result<DeviceBuffer<T>> {
        let p = self.plan;
        let table = T::Kernel::ROPE.ok_or(Error::UnsupportedDType {
            op: name(LAYOUT),
            dtype: T::DTYPE,
        })?;
        let kernel = match LAYOUT {
            ROPE_HALVES => table.halves,
            ROPE_INTERLEAVED => table.interleaved,
            _ => table.thd,
        };
        let rows = (p.b * p.h * p.t) as u64;
        let units = rows * (p.d - p.r / 2) as u64;
        // The kernel moves 16-byte words when rows, halves and tables
        // start on them (the buffers are 256-byte
        // aligned): a workitem per word, not per element (7 of 8 idle
        // workitems held bf16 to 61% of the copy bandwidth). Any grid is
        // correct: the kernel loops.
        let per = per_word::<T::Kernel>() as usize;
        let on_words = (p.r / 2).is_multiple_of(per)
            && p.d.is_multiple_of(per)
            && [self.x, self.cos, self.sin]
                .iter()
                .all(|t| t.layout().offset().is_multiple_of(per));
        let workitems = if on_words { units / per as u64 } else { units };
        if units > 0 {
            let out = self.out.view_as::<T::Kernel>().expect("same size");
            dev.launch_typed(
                kernel,
                LaunchConfig::linear(workitems, BLOCK).starting_early(),
                (
                    Out::new(out),
                    self.x.input(),
                    self.cos.input(),
                    self.sin.input(),
                    rows,
                    p.h as u32,
                    p.t as u32,
                    p.d as u32,
                    p.r as u32,
                    p.t_table as u32,
                    p.offset as u32,
                    p.per_batch as u32,
                ),
            )?;
        }
        Ok(self.out)
    }
}

fn name(layout: u32) -> &'static str {
    match layout {
        ROPE_HALVES => "rope",
        ROPE_INTERLEAVED => "rope_i",
        _ => "rope_thd",
    }
}

impl<T: WithDType> Tensor<T> {
    /// Rotary embedding of `x` of shape `(b, h, t, d)`, pairs `(i, i + r/2)`
    /// (the halves of the rotary dims: Hugging Face's Llama, Mistral, Qwen,
    /// Gemma). `cos` and `sin` are `(T, r/2)`, or `(b, T, r/2)` per batch;
    /// position `offset + j` of the sequence turns by row `offset + j` of
    /// them (decode with a cache of `offset` tokens), so `offset + t <= T`.
    /// `r <= d`: only the first `r` dims rotate (partial rotary), the rest
    /// are copied. f32, f16, bf16 (f32 math, one rounding). Any layout (a
    /// strided input is copied first).
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let dev = Device::Cpu;
    /// let x = Tensor::from_slice(&[1.0f32, 0.0, 5.0], &[1, 1, 1, 3], &dev)?;
    /// // One pair (dims 0 and 1) turned a quarter: cos 0, sin 1; dim 2 copied.
    /// let (cos, sin) = (Tensor::from_slice(&[0.0f32], &[1, 1], &dev)?, Tensor::from_slice(&[1.0f32], &[1, 1], &dev)?);
    /// assert_eq!(x.rope(&cos, &sin, 0)?.to_vec()?, vec![0.0, 1.0, 5.0]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::UnsupportedDType`] for integers; [`Error::ShapeMismatch`]
    /// when `cos` and `sin` differ; [`Error::BadParameter`] for `x` not of
    /// rank 4, tables not of rank 2 or 3 (or of another batch), more rotary
    /// dims than `d`, positions past the table, sizes past u32;
    /// [`Error::DeviceMismatch`]; [`Error::Host`] (memory, launch).
    pub fn rope(&self, cos: &Self, sin: &Self, offset: usize) -> Result<Self> {
        self.rope_impl::<ROPE_HALVES>(cos, sin, offset)
    }

    /// Rotary embedding with interleaved pairs `(2i, 2i + 1)` (GPT-J, GGML's
    /// normal mode, Meta's Llama code); otherwise as [`Tensor::rope`].
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let dev = Device::Cpu;
    /// let x = Tensor::from_slice(&[1.0f32, 0.0, 0.0, 1.0], &[1, 1, 1, 4], &dev)?;
    /// let cos = Tensor::from_slice(&[0.0f32, 1.0], &[1, 2], &dev)?; // pair 0 turns a quarter
    /// let sin = Tensor::from_slice(&[1.0f32, 0.0], &[1, 2], &dev)?; // pair 1 stays
    /// assert_eq!(x.rope_i(&cos, &sin, 0)?.to_vec()?, vec![0.0, 1.0, 0.0, 1.0]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Tensor::rope`].
    pub fn rope_i(&self, cos: &Self, sin: &Self, offset: usize) -> Result<Self> {
        self.rope_impl::<ROPE_INTERLEAVED>(cos, sin, offset)
    }

    /// Rotary embedding of `x` of shape `(b, t, h, d)` (heads after the
    /// sequence, as a QKV projection leaves them), pairs as [`Tensor::rope`].
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let dev = Device::Cpu;
    /// let x = Tensor::from_slice(&[1.0f32, 0.0, 1.0, 0.0], &[1, 2, 1, 2], &dev)?;
    /// // Position 0 stays, position 1 turns a half.
    /// let cos = Tensor::from_slice(&[1.0f32, -1.0], &[2, 1], &dev)?;
    /// let sin = Tensor::from_slice(&[0.0f32, 0.0], &[2, 1], &dev)?;
    /// assert_eq!(x.rope_thd(&cos, &sin, 0)?.to_vec()?, vec![1.0, 0.0, -1.0, 0.0]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Tensor::rope`].
    pub fn rope_thd(&self, cos: &Self, sin: &Self, offset: usize) -> Result<Self> {
        self.rope_impl::<ROPE_THD>(cos, sin, offset)
    }

    fn rope_impl<const LAYOUT: u32>(&self, cos: &Self, sin: &Self, offset: usize) -> Result<Self> {
        let op = name(LAYOUT);
        if !T::DTYPE.is_float() {
            return Err(Error::UnsupportedDType {
                op,
                dtype: T::DTYPE,
            });
        }
        self.same_device(op, cos)?;
        self.same_device(op, sin)?;
        if cos.shape() != sin.shape() {
            return Err(Error::ShapeMismatch {
                op,
                lhs: cos.shape().to_vec(),
                rhs: sin.shape().to_vec(),
            });
        }
        let bad = |what: String| Err(Error::BadParameter { op, what });
        let &[b, d0, d1, d] = self.shape() else {
            return bad(format!("x must have rank 4, got shape {:?}", self.shape()));
        };
        let (h, t) = if LAYOUT == ROPE_THD {
            (d1, d0)
        } else {
            (d0, d1)
        };
        let (per_batch, t_table, cols) = match *cos.shape() {
            [t_table, cols] => (false, t_table, cols),
            [tb, t_table, cols] if tb == b => (true, t_table, cols),
            _ => {
                return bad(format!(
                    "cos/sin must be (T, r/2) or ({b}, T, r/2), got {:?}",
                    cos.shape()
                ));
            }
        };
        // `cols` may be any size in a broadcast view: checked arithmetic.
        let r = cols.saturating_mul(2);
        if r > d {
            return bad(format!(
                "the tables rotate {r} dims, more than the head dim {d}"
            ));
        }
        if offset.checked_add(t).is_none_or(|end| end > t_table) {
            return bad(format!(
                "positions {offset}..{offset}+{t} are past the table's {t_table} rows"
            ));
        }
        let fits = |v: usize| v <= u32::MAX as usize;
        // The table's rows over the batch (per-batch tables): b * t_table,
        // which a broadcast x of 2^60 batches must not overflow.
        let batch_rows = b.saturating_mul(t_table);
        if ![h, t, d, t_table, offset, batch_rows].into_iter().all(fits) {
            return bad(format!(
                "sizes past u32: x {:?}, tables {:?}, offset {offset}",
                self.shape(),
                cos.shape()
            ));
        }
        let x = self.contiguous()?;
        let (cos, sin) = (cos.contiguous()?, sin.contiguous()?);
        let dev = x.device();
        let rope = Rope::<T, LAYOUT> {
            x: &x,
            cos: &cos,
            sin: &sin,
            plan: Plan {
                b,
                h,
                t,
                d,
                r,
                t_table,
                offset,
                per_batch,
            },
            out: dev.alloc::<T>(x.elem_count())?,
        };
        Ok(Tensor::from_parts(engine::run(dev, rope)?, x.shape()))
    }
}

impl crate::DynTensor {
    /// [`Tensor::rope`] (halves, as Hugging Face) for a dtype known at run time.
    ///
    /// # Errors
    /// [`Error::DTypeMismatch`] when the dtypes differ; as [`Tensor::rope`].
    pub fn rope(&self, cos: &Self, sin: &Self, offset: usize) -> Result<Self> {
        self.same_dtype("rope", cos)?;
        self.same_dtype("rope", sin)?;
        crate::core::dyn_tensor::with_dtype!(self, "rope", |t| Ok(t
            .rope(&cos.typed()?, &sin.typed()?, offset)?
            .into()))
    }

    /// [`Tensor::rope_i`] (interleaved, GGML's normal mode) for a dtype known at run time.
    ///
    /// # Errors
    /// [`Error::DTypeMismatch`] when the dtypes differ; as [`Tensor::rope_i`].
    pub fn rope_i(&self, cos: &Self, sin: &Self, offset: usize) -> Result<Self> {
        self.same_dtype("rope_i", cos)?;
        self.same_dtype("rope_i", sin)?;
        crate::core::dyn_tensor::with_dtype!(self, "rope_i", |t| Ok(t
            .rope_i(&cos.typed()?, &sin.typed()?, offset)?
            .into()))
    }

    /// [`Tensor::rope_thd`] (`(b, t, h, d)` inputs) for a dtype known at run time.
    ///
    /// # Errors
    /// [`Error::DTypeMismatch`] when the dtypes differ; as [`Tensor::rope_thd`].
    pub fn rope_thd(&self, cos: &Self, sin: &Self, offset: usize) -> Result<Self> {
        self.same_dtype("rope_thd", cos)?;
        self.same_dtype("rope_thd", sin)?;
        crate::core::dyn_tensor::with_dtype!(self, "rope_thd", |t| Ok(t
            .rope_thd(&cos.typed()?, &sin.typed()?, offset)?
            .into()))
    }
}
