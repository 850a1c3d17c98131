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
    ROPE_HALVES, ROPE_INTERLEAVED, ROPE_THD, RopeCacheShape, RopeKernels, rope_pair, rope_pair_at,
};
use rayon::prelude::*;
use std::sync::Arc;

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

/// Which pairs of a head's dims rotate together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeMode {
    /// `(i, i + r/2)`: the halves of the rotary dims ([`Tensor::rope`]).
    Halves,
    /// `(2i, 2i + 1)`: interleaved pairs ([`Tensor::rope_i`]).
    Interleaved,
}

/// The elements between tokens of `x` `(b, t, h, d)` when its heads are
/// contiguous within a token and tokens follow one another at one stride
/// (a projection's output, or a view into a stacked one), else None.
fn token_stride<T: WithDType>(x: &Tensor<T>) -> Option<usize> {
    let (shape, strides) = (x.shape(), x.layout().strides());
    let [b, t, h, d] = *shape else { return None };
    let [sb, st, sh, sd] = *strides else {
        return None;
    };
    // A dim of size 1 may have any stride: the tokens' stride then comes
    // from the batch (t = 1), or is the heads' extent (one token).
    let s = match (t, b) {
        (2.., _) => st,
        (_, 2..) => sb,
        _ => h * d,
    };
    let ok = (d <= 1 || sd == 1) && (h <= 1 || sh == d) && (b <= 1 || sb == t * s);
    ok.then_some(s)
}

impl<T: WithDType> Tensor<T> {
    /// Rotary embedding of attention's q and k with the key/value cache
    /// written in the same pass: `self` is q `(b, t, hq, d)` and `k`, `v`
    /// are `(b, t, hk, d)`, as a projection leaves them (any layout; tokens
    /// of one stride are read in place); returns q rotated as `(b, hq, t,
    /// d)`, and writes k rotated and v as they are into rows `pos..pos + t`
    /// of `k_cache` and `v_cache` `(b, hk, cap, d)` (contiguous). Bit for
    /// bit `q.rope_thd(..)` (or `rope_i` on the transposed view) transposed
    /// to `(b, hq, t, d)`, and `slice_set` of the rotated k and of v at
    /// `pos`: one launch on a GPU instead of four. `cos` and `sin` are
    /// `(T, r/2)` tables as [`Tensor::rope`] takes them, position `pos + j`
    /// on row `pos + j`.
    ///
    /// ```
    /// use ferrocm_ops::rope::RopeMode;
    /// use ferrocm_ops::{Device, Tensor};
    /// let dev = Device::Cpu;
    /// // One head of 2 dims; the table turns position 1 a quarter.
    /// let (cos, sin) = (Tensor::from_slice(&[1.0f32, 0.0], &[2, 1], &dev)?, Tensor::from_slice(&[0.0f32, 1.0], &[2, 1], &dev)?);
    /// let q = Tensor::from_slice(&[1.0f32, 0.0], &[1, 1, 1, 2], &dev)?;
    /// let (k, v) = (q.clone(), Tensor::from_slice(&[5.0f32, 6.0], &[1, 1, 1, 2], &dev)?);
    /// let mut kc = Tensor::<f32>::zeros(&[1, 1, 3, 2], &dev)?;
    /// let mut vc = kc.clone();
    /// let q = q.rope_into_cache(&k, &v, &cos, &sin, 1, RopeMode::Halves, &mut kc, &mut vc)?;
    /// assert_eq!(q.to_vec()?, vec![0.0, 1.0]);
    /// assert_eq!(kc.to_vec()?, vec![0.0, 0.0, 0.0, 1.0, 0.0, 0.0]);
    /// assert_eq!(vc.to_vec()?, vec![0.0, 0.0, 5.0, 6.0, 0.0, 0.0]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::UnsupportedDType`] for integers; [`Error::BadParameter`] for
    /// shapes that do not match as above, tables not `(T, r/2)` or rotating
    /// more than `d` dims, positions past the tables or the caches, caches
    /// that are not contiguous, sizes whose indices pass u32;
    /// [`Error::DeviceMismatch`]; [`Error::Host`] (memory, launch).
    #[allow(clippy::too_many_arguments)]
    pub fn rope_into_cache(
        &self,
        k: &Self,
        v: &Self,
        cos: &Self,
        sin: &Self,
        pos: usize,
        mode: RopeMode,
        k_cache: &mut Self,
        v_cache: &mut Self,
    ) -> Result<Self> {
        let op = "rope_into_cache";
        if !T::DTYPE.is_float() {
            return Err(Error::UnsupportedDType {
                op,
                dtype: T::DTYPE,
            });
        }
        for t in [k, v, cos, sin, &*k_cache, &*v_cache] {
            self.same_device(op, t)?;
        }
        let bad = |what: String| Err(Error::BadParameter { op, what });
        let &[b, t, hq, d] = self.shape() else {
            return bad(format!("q must be (b, t, hq, d), got {:?}", self.shape()));
        };
        let hk = k.shape().get(2).copied().unwrap_or(0);
        if k.shape() != [b, t, hk, d] || v.shape() != k.shape() {
            return bad(format!(
                "k and v must be (b, t, hk, d) with q's b, t and d; q {:?}, k {:?}, v {:?}",
                self.shape(),
                k.shape(),
                v.shape()
            ));
        }
        let cap = k_cache.shape().get(2).copied().unwrap_or(0);
        if k_cache.shape() != [b, hk, cap, d] || v_cache.shape() != k_cache.shape() {
            return bad(format!(
                "the caches must be ({b}, {hk}, cap, {d}); k_cache {:?}, v_cache {:?}",
                k_cache.shape(),
                v_cache.shape()
            ));
        }
        if !k_cache.is_contiguous() || !v_cache.is_contiguous() {
            return bad("the caches must be contiguous".into());
        }
        let (t_table, cols) = match (cos.shape(), sin.shape()) {
            (&[t_table, cols], s) if s == cos.shape() => (t_table, cols),
            _ => {
                return bad(format!(
                    "cos and sin must both be (T, r/2), got {:?} and {:?}",
                    cos.shape(),
                    sin.shape()
                ));
            }
        };
        let r = cols.saturating_mul(2);
        if r > d {
            return bad(format!(
                "the tables rotate {r} dims, more than the head dim {d}"
            ));
        }
        if pos.checked_add(t).is_none_or(|end| end > t_table.min(cap)) {
            return bad(format!(
                "positions {pos}..{pos}+{t} are past the tables' {t_table} rows or the caches' {cap}"
            ));
        }
        let (q, k, v) = (rows_of(self)?, rows_of(k)?, rows_of(v)?);
        let units = |h: usize| b.checked_mul(t)?.checked_mul(h)?.checked_mul(d);
        let total = units(hq)
            .zip(units(hk))
            .and_then(|(a, c)| a.checked_add(c.checked_mul(2)?));
        let cache_elems = b
            .checked_mul(hk)
            .and_then(|n| n.checked_mul(cap)?.checked_mul(d));
        let fits = |v: Option<usize>| v.is_some_and(|v| v <= u32::MAX as usize);
        let strides = [q.1, k.1, v.1].map(|s| b.checked_mul(t).and_then(|n| n.checked_mul(s)));
        if !fits(total) || !fits(cache_elems) || !strides.into_iter().all(fits) || !fits(units(hq))
        {
            return bad(format!(
                "indices past u32: q {:?}, k {:?}, caches {:?}",
                self.shape(),
                k.0.shape(),
                k_cache.shape()
            ));
        }
        let (cos, sin) = (cos.contiguous()?, sin.contiguous()?);
        for cache in [&mut *k_cache, &mut *v_cache] {
            // Written in place: a storage shared with another tensor is
            // copied first, as `slice_set` does.
            if Arc::strong_count(&cache.storage) > 1 || Arc::weak_count(&cache.storage) > 0 {
                *cache = cache.copy()?;
            }
        }
        let dev = self.device().clone();
        let out = dev.alloc::<T>(b * hq * t * d)?;
        let s = RopeCacheShape {
            b: b as u32,
            t: t as u32,
            hq: hq as u32,
            hk: hk as u32,
            d: d as u32,
            r: r as u32,
            q_stride: q.1 as u32,
            k_stride: k.1 as u32,
            v_stride: v.1 as u32,
            cap: cap as u32,
            pos: pos as u32,
        };
        let out = match dev {
            Device::Cpu => rope_cache_cpu(
                out,
                [&q.0, &k.0, &v.0],
                [&cos, &sin],
                s,
                mode,
                [k_cache, v_cache],
            ),
            _ => {
                let table = T::Kernel::ROPE.ok_or(Error::UnsupportedDType {
                    op,
                    dtype: T::DTYPE,
                })?;
                let kernel = match mode {
                    RopeMode::Halves => table.halves_cache,
                    RopeMode::Interleaved => table.interleaved_cache,
                };
                let per_row = (d - r / 2) * (hq + hk) + hk * d;
                if b * t * per_row > 0 {
                    let o = out.view_as::<T::Kernel>().expect("same size");
                    dev.launch_typed(
                        kernel,
                        LaunchConfig::linear((b * t * per_row) as u64, BLOCK).starting_early(),
                        (
                            Out::new(o),
                            Out::range(
                                k_cache.kbuf(),
                                k_cache.layout().offset(),
                                k_cache.elem_count(),
                            ),
                            Out::range(
                                v_cache.kbuf(),
                                v_cache.layout().offset(),
                                v_cache.elem_count(),
                            ),
                            q.0.input(),
                            k.0.input(),
                            v.0.input(),
                            cos.input(),
                            sin.input(),
                            s.b,
                            s.t,
                            s.hq,
                            s.hk,
                            s.d,
                            s.r,
                            s.q_stride,
                            s.k_stride,
                            s.v_stride,
                            s.cap,
                            s.pos,
                        ),
                    )?;
                }
                out
            }
        };
        Ok(Tensor::from_parts(out, &[b, hq, t, d]))
    }
}

/// `x` `(b, t, h, d)` with tokens one stride apart (read in place), or a
/// contiguous copy, and that stride.
fn rows_of<T: WithDType>(x: &Tensor<T>) -> Result<(Tensor<T>, usize)> {
    match token_stride(x) {
        Some(s) => Ok((x.clone(), s)),
        None => {
            let c = x.contiguous()?;
            let s = c.shape()[2] * c.shape()[3];
            Ok((c, s))
        }
    }
}

/// A tensor's elements on the Cpu from its first (any layout: the caller
/// indexes with its strides).
fn host<T: WithDType>(x: &Tensor<T>) -> &[T] {
    &crate::engine::cpu::host(x.buf())[x.layout().offset()..]
}

/// A contiguous cache's elements on the Cpu, to write in place (its
/// storage is unique: `rope_into_cache` copied a shared one).
fn cache_elems<T: WithDType>(c: &mut Tensor<T>) -> &mut [T] {
    let (off, n) = (c.layout.offset(), c.elem_count());
    let storage = Arc::get_mut(&mut c.storage).expect("unique: copied before");
    let all = storage
        .raw_mut()
        .typed_mut::<T>()
        .and_then(|buf| buf.as_mut_slice())
        .expect("a Cpu storage of T's");
    &mut all[off..off + n]
}

/// [`Tensor::rope_into_cache`] on the Cpu: the kernels' loops, the same
/// scalar definitions.
fn rope_cache_cpu<T: WithDType>(
    mut out: DeviceBuffer<T>,
    [q, k, v]: [&Tensor<T>; 3],
    [cos, sin]: [&Tensor<T>; 2],
    s: RopeCacheShape,
    mode: RopeMode,
    [k_cache, v_cache]: [&mut Tensor<T>; 2],
) -> DeviceBuffer<T> {
    let f = |v: T| v.to_kernel().to_f32();
    let round = |v: f32| T::from_kernel(T::Kernel::from_f32(v));
    let (b, t, d, r, cap, pos) = (
        s.b as usize,
        s.t as usize,
        s.d as usize,
        s.r as usize,
        s.cap as usize,
        s.pos as usize,
    );
    let half = r / 2;
    let (cos, sin) = (elems(cos), elems(sin));
    // One head row rotated from `src` into `dst`.
    let rotate = |dst: &mut [T], src: &[T], ti: usize| {
        let at = (pos + ti) * half;
        for unit in 0..half {
            let (i0, i1) = match mode {
                RopeMode::Halves => rope_pair_at::<ROPE_HALVES>(unit as u32, r as u32),
                RopeMode::Interleaved => rope_pair_at::<ROPE_INTERLEAVED>(unit as u32, r as u32),
            };
            let (i0, i1) = (i0 as usize, i1 as usize);
            let (y0, y1) = rope_pair(f(src[i0]), f(src[i1]), f(cos[at + unit]), f(sin[at + unit]));
            dst[i0] = round(y0);
            dst[i1] = round(y1);
        }
        dst[r..d].copy_from_slice(&src[r..d]);
    };
    let (qs, ks, vs) = (host(q), host(k), host(v));
    let o = crate::engine::cpu::host_mut(&mut out);
    let (kc, vc) = (cache_elems(k_cache), cache_elems(v_cache));
    for bi in 0..b {
        for ti in 0..t {
            let tok = bi * t + ti;
            for hh in 0..s.hq as usize {
                let src = &qs[tok * s.q_stride as usize + hh * d..][..d];
                let to = ((bi * s.hq as usize + hh) * t + ti) * d;
                rotate(&mut o[to..to + d], src, ti);
            }
            for hh in 0..s.hk as usize {
                let row = ((bi * s.hk as usize + hh) * cap + pos + ti) * d;
                let src = &ks[tok * s.k_stride as usize + hh * d..][..d];
                rotate(&mut kc[row..row + d], src, ti);
                vc[row..row + d].copy_from_slice(&vs[tok * s.v_stride as usize + hh * d..][..d]);
            }
        }
    }
    out
}
