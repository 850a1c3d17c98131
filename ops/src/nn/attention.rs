//! Scaled dot-product attention for decode and prefill: API, Cpu
//! implementation, kernel path.
//!
//! `out[b, h, i] = Σ_j softmax_j(logit(q[b, h, i] · k[b, h / g, j])) v[b, h / g, j]`
//! with `logit(x) = softcap(x * scale) + mask[b, h, i, j]`, keys a query
//! cannot see (causal, sliding window) left out, `g = h_q / h_kv` query
//! heads per KV head (grouped-query and multi-query attention). f32 math
//! whatever the dtype, with one rounding besides the output's: for f16 and
//! bf16, each probability is rounded to the dtype where it multiplies V (as
//! FlashAttention and PyTorch's fused kernels do; the softmax's sum keeps
//! the f32 values), on every device and path alike.
//!
//! Both implementations keep an online softmax per query row (a running
//! max, the denominator and the unnormalised output), so no `s_q x s_kv`
//! score matrix exists anywhere: the Cpu walks tiles of 64 keys for blocks
//! of 16 query rows, in parallel over heads and row blocks; the kernels
//! split the keys across workgroups (flash-decoding) and merge the splits'
//! statistics in a second launch. A prefill (more than 16 query rows a KV
//! head) of f16/bf16 at head dim up to 128 runs the matrix-unit kernel
//! (`attn_mma_*`), or on Hopper at d 64 and 128 without a mask tensor or
//! softcap, where its row blocks fill the GPU, the warpgroup kernel
//! (`attn_wgmma_*`, one split).

use crate::core::dtype::WithDType;
use crate::core::error::{Error, Result};
use crate::core::tensor::Tensor;
use crate::engine::{self, Op};
use ferrocm_host::{Device, DeviceBuffer, In, LaunchConfig, Out};
use ferrocm_kernels::attention::{
    ATTN_BLOCK, ATTN_CAUSAL, ATTN_DOUBLE_BUFFER, ATTN_HEAD_DIMS, ATTN_MERGE_BLOCK, ATTN_MMA_MAX_D,
    ATTN_MMA_ROWS, ATTN_ROWS, ATTN_STATS, ATTN_WG_HEAD_DIMS, ATTN_WG_ROWS, AttnKernels,
    attn_finish, attn_logit, attn_merge_lds_bytes, attn_mma_lds_bytes, attn_rows_lds_bytes,
    attn_span, attn_weight, attn_wgmma_lds_bytes,
};
use ferrocm_kernels::elem::{Elem, per_word};
use rayon::prelude::*;

/// Query rows per Cpu task.
const CPU_ROWS: usize = 16;
/// Keys per Cpu tile (converted to f32 once per tile).
const CPU_KEYS: usize = 64;
/// The fewest keys a kernel split takes: shorter splits spend more on the
/// merge than they save.
const MIN_CHUNK: usize = 128;

/// The options of [`Tensor::attention`]: the scale, causal masking, an
/// additive mask, a sliding window and a logit softcap. `Default` is plain
/// attention with scale `1 / sqrt(d)`.
///
/// ```
/// use ferrocm_ops::attention::AttentionOptions;
/// use ferrocm_ops::Tensor;
/// let opts: AttentionOptions<'_, f32> = AttentionOptions::new().causal().window(4096).softcap(50.0);
/// assert!(opts.causal && opts.window == Some(4096) && opts.softcap == Some(50.0));
/// ```
#[derive(Clone, Copy)]
pub struct AttentionOptions<'a, T: WithDType> {
    /// Multiplies `q · k` (default `1 / sqrt(head dim)`).
    pub scale: Option<f32>,
    /// Query `i` of `s_q` sits at position `i + s_kv - s_q` and sees keys
    /// up to its position (aligned to the end: decode with a cache).
    pub causal: bool,
    /// Added to the logits, broadcastable to `(b, h_q, s_q, s_kv)` as
    /// NumPy broadcasts (-inf hides a key).
    pub mask: Option<&'a Tensor<T>>,
    /// A query at position `p` sees keys `j > p - window` (Mistral's
    /// sliding window: itself and the `window - 1` keys before it).
    pub window: Option<usize>,
    /// Logits become `cap * tanh(logit / cap)` before the mask (Gemma 2).
    pub softcap: Option<f32>,
}

impl<T: WithDType> Default for AttentionOptions<'_, T> {
    fn default() -> Self {
        Self {
            scale: None,
            causal: false,
            mask: None,
            window: None,
            softcap: None,
        }
    }
}

impl<'a, T: WithDType> AttentionOptions<'a, T> {
    /// Plain attention, scale `1 / sqrt(d)`.
    ///
    /// ```
    /// use ferrocm_ops::attention::AttentionOptions;
    /// let o = AttentionOptions::<f32>::new();
    /// assert!(!o.causal && o.scale.is_none());
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// With this scale.
    ///
    /// ```
    /// use ferrocm_ops::attention::AttentionOptions;
    /// assert_eq!(AttentionOptions::<f32>::new().scale(0.125).scale, Some(0.125));
    /// ```
    pub fn scale(mut self, scale: f32) -> Self {
        self.scale = Some(scale);
        self
    }

    /// Causal, aligned to the end.
    ///
    /// ```
    /// use ferrocm_ops::attention::AttentionOptions;
    /// assert!(AttentionOptions::<f32>::new().causal().causal);
    /// ```
    pub fn causal(mut self) -> Self {
        self.causal = true;
        self
    }

    /// With an additive mask.
    ///
    /// ```
    /// use ferrocm_ops::{attention::AttentionOptions, Device, Tensor};
    /// let m = Tensor::<f32>::zeros(&[1, 4], &Device::Cpu)?;
    /// assert!(AttentionOptions::new().mask(&m).mask.is_some());
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    pub fn mask(mut self, mask: &'a Tensor<T>) -> Self {
        self.mask = Some(mask);
        self
    }

    /// With a sliding window of `window` keys.
    ///
    /// ```
    /// use ferrocm_ops::attention::AttentionOptions;
    /// assert_eq!(AttentionOptions::<f32>::new().window(8).window, Some(8));
    /// ```
    pub fn window(mut self, window: usize) -> Self {
        self.window = Some(window);
        self
    }

    /// With a logit softcap.
    ///
    /// ```
    /// use ferrocm_ops::attention::AttentionOptions;
    /// assert_eq!(AttentionOptions::<f32>::new().softcap(30.0).softcap, Some(30.0));
    /// ```
    pub fn softcap(mut self, cap: f32) -> Self {
        self.softcap = Some(cap);
        self
    }
}

/// The checked sizes of one attention call.
#[derive(Clone, Copy)]
struct Dims {
    b: usize,
    h_q: usize,
    h_kv: usize,
    s_q: usize,
    s_kv: usize,
    d: usize,
}

/// One attention over prepared views (see [`Inputs`]) into `out`.
struct Attend<'a, T: WithDType> {
    inputs: Inputs<'a, T>,
    out: DeviceBuffer<T>,
}

/// The operands of one attention: q, k, v with unit stride along the head
/// dim, the mask broadcast to `(b, h_q, s_q, s_kv)` with unit stride along
/// the keys.
struct Inputs<'a, T: WithDType> {
    q: &'a Tensor<T>,
    k: &'a Tensor<T>,
    v: &'a Tensor<T>,
    mask: Option<&'a Tensor<T>>,
    dims: Dims,
    scale: f32,
    /// 0: none.
    softcap: f32,
    causal: bool,
    /// 0: none.
    window: u32,
}

/// Strides of a rank-4 view over its first three dims.
fn strides3<T: WithDType>(t: &Tensor<T>) -> [usize; 3] {
    let s = t.layout().strides();
    [s[0], s[1], s[2]]
}

/// Whether a head's last key word lies under 2^32 16-byte words from its
/// first, with keys `row_stride` elements apart: the matrix-unit kernel
/// finds a key's words in 32 bits (others take the row kernels).
fn key_words_fit_u32<T: WithDType>(s_kv: usize, row_stride: usize, d: usize) -> bool {
    let per = per_word::<T::Kernel>() as u64;
    let last = (s_kv.max(1) as u64 - 1) * (row_stride as u64 / per) + d as u64 / per;
    last <= u32::MAX as u64
}

/// A view's elements from its offset on (the Cpu's buffer).
fn data<T: WithDType>(t: &Tensor<T>) -> &[T] {
    &crate::engine::cpu::host(t.buf())[t.layout().offset()..]
}

/// `Σ a[e] * b[e]` in f32, eight partial sums (the loop vectorises).
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (ac, at) = a.as_chunks::<8>();
    let (bc, bt) = b.as_chunks::<8>();
    for (x, y) in ac.iter().zip(bc) {
        for e in 0..8 {
            acc[e] = x[e].mul_add(y[e], acc[e]);
        }
    }
    for (e, (x, y)) in at.iter().zip(bt).enumerate() {
        acc[e] = x.mul_add(*y, acc[e]);
    }
    acc.iter().sum()
}

/// One Cpu task: rows `rho0..rho0 + out.len() / d` of the query rows that
/// share KV head `kvh` of batch `b` (its `g` query heads' rows one head
/// after another, as the output holds them), tile by tile over the keys
/// they see: each key tile is converted to f32 once for all of them (a
/// decode step's four GQA heads: a quarter of the conversions of one task
/// per head).
struct CpuBlock<'a, T: WithDType> {
    op: &'a Inputs<'a, T>,
    b: usize,
    kvh: usize,
    rho0: usize,
    out: &'a mut [T],
}

impl<T: WithDType> crate::engine::cpu::Task for CpuBlock<'_, T> {
    type Out = ();
    #[inline(always)]
    fn run(self) {
        let a = self.op;
        let Dims { s_q, s_kv, d, .. } = a.dims;
        let g = a.dims.h_q / a.dims.h_kv;
        let (b, kvh, rho0) = (self.b, self.kvh, self.rho0);
        let n = self.out.len() / d;
        // Row r's query head and position.
        let row = |r: usize| (kvh * g + (rho0 + r) / s_q, (rho0 + r) % s_q);
        let f = |v: &T| v.to_kernel().to_f32();
        let (qd, kd, vd) = (data(a.q), data(a.k), data(a.v));
        let (qs, ks, vs) = (strides3(a.q), strides3(a.k), strides3(a.v));
        let q: Vec<f32> = (0..n)
            .flat_map(|r| {
                let (h, i) = row(r);
                let at = b * qs[0] + h * qs[1] + i * qs[2];
                qd[at..at + d].iter().map(f)
            })
            .collect();
        let mask = a.mask.map(|m| (data(m), strides3(m)));
        // Each row's keys, and those some row of the block sees.
        let spans: Vec<(usize, usize)> = (0..n)
            .map(|r| {
                let (a0, b0) =
                    attn_span(row(r).1 as u32, s_q as u32, s_kv as u32, a.causal, a.window);
                (a0 as usize, b0 as usize)
            })
            .collect();
        let seen = spans.iter().filter(|s| s.0 < s.1);
        let lo = seen.clone().map(|s| s.0).min().unwrap_or(0);
        let hi = seen.map(|s| s.1).max().unwrap_or(0);
        let (mut m, mut l) = (vec![f32::NEG_INFINITY; n], vec![0.0f32; n]);
        let mut o = vec![0.0f32; n * d];
        let (mut kt, mut vt) = (vec![0.0f32; CPU_KEYS * d], vec![0.0f32; CPU_KEYS * d]);
        let mut s = vec![0.0f32; CPU_KEYS];
        let (kv_k, kv_v) = (b * ks[0] + kvh * ks[1], b * vs[0] + kvh * vs[1]);
        let mut j0 = lo;
        while j0 < hi {
            let kb = CPU_KEYS.min(hi - j0);
            for jj in 0..kb {
                let (ka, va) = (kv_k + (j0 + jj) * ks[2], kv_v + (j0 + jj) * vs[2]);
                // Slices zipped, so the conversion loop has no bounds checks
                // and vectorises.
                for (t, x) in kt[jj * d..(jj + 1) * d].iter_mut().zip(&kd[ka..ka + d]) {
                    *t = f(x);
                }
                for (t, x) in vt[jj * d..(jj + 1) * d].iter_mut().zip(&vd[va..va + d]) {
                    *t = f(x);
                }
            }
            for r in 0..n {
                let (h, i) = row(r);
                let qr = &q[r * d..(r + 1) * d];
                let mut mx = m[r];
                let span = spans[r];
                for jj in 0..kb {
                    let j = j0 + jj;
                    s[jj] = if span.0 <= j && j < span.1 {
                        let mv = match mask {
                            Some((md, ms)) => f(&md[b * ms[0] + h * ms[1] + i * ms[2] + j]),
                            None => 0.0,
                        };
                        attn_logit(dot(qr, &kt[jj * d..(jj + 1) * d]), a.scale, a.softcap, mv)
                    } else {
                        f32::NEG_INFINITY
                    };
                    mx = Elem::max(mx, s[jj]);
                }
                if mx == f32::NEG_INFINITY {
                    continue;
                }
                let alpha = attn_weight(m[r], mx);
                let or = &mut o[r * d..(r + 1) * d];
                if alpha != 1.0 {
                    or.iter_mut().for_each(|x| *x *= alpha);
                }
                l[r] *= alpha;
                for jj in 0..kb {
                    let p = attn_weight(s[jj], mx);
                    if p != 0.0 {
                        l[r] += p;
                        // Rounded to the dtype as it multiplies V, as the
                        // kernels do (`attn_round`; f32 unchanged).
                        let pv = T::Kernel::from_f32(p).to_f32();
                        for (x, y) in or.iter_mut().zip(&vt[jj * d..(jj + 1) * d]) {
                            *x = pv.mul_add(*y, *x);
                        }
                    }
                }
                m[r] = mx;
            }
            j0 += kb;
        }
        for (r, row) in self.out.chunks_mut(d).enumerate() {
            for (y, x) in row.iter_mut().zip(&o[r * d..(r + 1) * d]) {
                *y = T::from_kernel(T::Kernel::from_f32(attn_finish(*x, l[r])));
            }
        }
    }
}

impl<T: WithDType> Op for Attend<'_, T> {
    type Output = DeviceBuffer<T>;

    fn cpu(self) -> Result<DeviceBuffer<T>> {
        let Attend { inputs, mut out } = self;
        let Dims {
            b,
            h_q,
            h_kv,
            s_q,
            d,
            ..
        } = inputs.dims;
        let this = &inputs;
        // Tasks over each KV head's query rows (`h_q / h_kv` heads of `s_q`
        // rows, contiguous in the output): blocks of CPU_ROWS, fewer rows
        // where that would leave threads idle (a decode step's few rows).
        let rows = h_q / h_kv * s_q;
        let threads = rayon::current_num_threads();
        let block = if b * h_kv * rows.div_ceil(CPU_ROWS) >= threads {
            CPU_ROWS
        } else {
            (b * h_kv * rows).div_ceil(threads).clamp(1, CPU_ROWS)
        };
        crate::engine::cpu::host_mut(&mut out)
            .par_chunks_mut(rows * d)
            .enumerate()
            .for_each(|(bk, group)| {
                group
                    .par_chunks_mut(block * d)
                    .enumerate()
                    .for_each(|(blk, out)| {
                        crate::engine::cpu::vectorized(CpuBlock {
                            op: this,
                            b: bk / h_kv,
                            kvh: bk % h_kv,
                            rho0: blk * block,
                            out,
                        })
                    })
            });
        Ok(out)
    }

    fn kernels(self, dev: &Device) -> Result<DeviceBuffer<T>> {
        let Attend {
            inputs: a,
            out: out_buf,
        } = self;
        let table = T::Kernel::ATTN.ok_or(Error::UnsupportedDType {
            op: "attention",
            dtype: T::DTYPE,
        })?;
        let Dims {
            b,
            h_q,
            h_kv,
            s_q,
            s_kv,
            d,
        } = a.dims;
        let rows = (h_q / h_kv) * s_q;
        let wave = dev.wave_size().unwrap_or(32);
        // The matrix-unit kernel for 16-bit types up to d 128 when a KV
        // head has more than 16 query rows (prefill): four waves of 16
        // rows. Otherwise the row kernel: workitems per key and the words
        // each holds, a 16-byte word per workitem while a row has at most
        // 16, else 16 workitems. (A decode step on the matrix-unit kernel,
        // one wave per workgroup, took 22.0 us on the H100 against the row
        // kernel's 18.5: a lone wave per workgroup, and each one's LDS
        // leaves five per SM.)
        let words_fit = key_words_fit_u32::<T>(s_kv, strides3(a.k)[2], d)
            && key_words_fit_u32::<T>(s_kv, strides3(a.v)[2], d);
        // The warpgroup kernel (Hopper's `wgmma`, the emulator at wave 32)
        // for prefills at d 64 and 128 without a mask tensor or softcap:
        // one split of the keys, so where its row blocks fill the GPU's
        // compute units at least once (fewer take the split kernels).
        let wg_blocks = (b * h_kv * rows.div_ceil(ATTN_WG_ROWS as usize)) as u64;
        let wg_kernel = table.wgmma.and_then(|wg| {
            let pos = ATTN_WG_HEAD_DIMS.iter().position(|&h| h == d)?;
            let fits = dev.warpgroup_mma()
                && rows > ATTN_MMA_ROWS as usize
                && a.mask.is_none()
                && a.softcap <= 0.0
                && a.scale > 0.0
                && words_fit
                && attn_wgmma_lds_bytes(d as u32) <= dev.max_lds_bytes()
                && dev
                    .gpu_info()
                    .is_none_or(|i| wg_blocks >= i.compute_units as u64);
            fits.then_some(wg[pos])
        });
        let (kernel, block, block_rows, lds, min_chunk, mma_flags) = match (wg_kernel, table.mma) {
            (Some(wg), _) => (
                wg,
                ferrocm_kernels::mma::WG_THREADS,
                ATTN_WG_ROWS,
                attn_wgmma_lds_bytes(d as u32),
                s_kv.max(1),
                0,
            ),
            // (A GPU without a matrix unit runs the row kernel: the FMA
            // body's registers do not fit there.)
            (None, Some(mma))
                if d <= ATTN_MMA_MAX_D
                    && rows > ATTN_MMA_ROWS as usize
                    && (!dev.is_gpu() || dev.matrix_unit().is_some())
                    && words_fit =>
            {
                let waves = 4;
                // Two K/V buffers where the next stage's copy overlaps the
                // math (and fits).
                let double = dev.double_buffers_lds()
                    && attn_mma_lds_bytes(waves, d as u32, true) <= dev.max_lds_bytes();
                let lds = attn_mma_lds_bytes(waves, d as u32, double);
                let kernel = mma[ATTN_HEAD_DIMS
                    .iter()
                    .position(|&h| h == d)
                    .expect("checked")];
                let flags = if double { ATTN_DOUBLE_BUFFER } else { 0 };
                (kernel, waves * wave, waves * ATTN_MMA_ROWS, lds, 64, flags)
            }
            _ => {
                // 16-byte words per row: 8 or fewer take the 8-lane kernel
                // (16-bit types at d 64), up to 16 one word per workitem,
                // more 2 or 4 words.
                let words = d / per_word::<T::Kernel>() as usize;
                let w = if words <= 16 { 1 } else { words.div_ceil(16) };
                let block_rows = ATTN_ROWS / w as u32;
                // Two words per workitem (f32, d 256) take half the rows
                // per workgroup: half the workitems and twice the
                // workgroups did better there (the H100: f32 decode 35.7 ->
                // 25.5 us), one word the full block (bf16: 18.7 against
                // 20.0 us).
                let block = if w == 1 { ATTN_BLOCK } else { ATTN_BLOCK / 2 };
                let waves = block / wave;
                let lds = attn_rows_lds_bytes(waves, block_rows, d as u32);
                let kernel = match table.rows_l8 {
                    Some(narrow) if words <= 8 => narrow,
                    _ => table.rows[w.trailing_zeros() as usize],
                };
                (kernel, block, block_rows, lds, MIN_CHUNK, 0)
            }
        };
        let blocks = (b * h_kv * rows.div_ceil(block_rows as usize)) as u64;
        // Enough splits of the keys to give each compute unit two
        // workgroups and sixteen waves (the emulator: eight workgroups),
        // none shorter than `min_chunk`. (On the H100, a 4096-key decode
        // step: bf16 with 17 splits instead of 32 took 26.5 us, not 18.7;
        // f32 with eight waves per compute unit 35.7 us, with sixteen 25.5.)
        let waves = Ord::max(block / wave, 1) as u64;
        let target = dev.gpu_info().map_or(8, |i| {
            let cus = i.compute_units as u64;
            Ord::max(2 * cus, 16 * cus / waves)
        });
        let max_splits = s_kv.div_ceil(min_chunk).max(1) as u64;
        let splits = target.div_ceil(blocks).clamp(1, max_splits.min(1024));
        let chunk = s_kv.div_ceil(splits as usize).max(1);
        let splits = s_kv.div_ceil(chunk).max(1);
        if blocks > i32::MAX as u64 {
            return Err(Error::TooLarge {
                op: "attention",
                shape: a.q.shape().to_vec(),
            });
        }
        let out_rows = b * h_q * s_q;
        let part = match splits {
            1 => None,
            _ => Some(dev.alloc::<f32>(out_rows * splits * (d + ATTN_STATS as usize))?),
        };
        let flags = mma_flags | if a.causal { ATTN_CAUSAL } else { 0 };
        let (qs, ks, vs) = (strides3(a.q), strides3(a.k), strides3(a.v));
        let ms = a.mask.map_or([0; 3], strides3);
        let u = |x: usize| x as u64;
        let out = out_buf.view_as::<T::Kernel>().expect("same size");
        dev.launch_typed(
            kernel,
            // Every attention kernel waits for the prior grids before its
            // first global access (and releases the next launch at once):
            // on an H100 this took a decode step from 12.4 to 11.0 us.
            LaunchConfig {
                grid: [blocks as u32, splits as u32, 1],
                block: [block, 1, 1],
                lds_bytes: lds,
                early_start: true,
            },
            (
                Out::new(out),
                part.as_ref().map(Out::new).unwrap_or_else(Out::null),
                a.q.input(),
                a.k.input(),
                a.v.input(),
                a.mask.map(|m| m.input()).unwrap_or_else(In::null),
                h_q as u32,
                h_kv as u32,
                s_q as u32,
                s_kv as u32,
                d as u32,
                u(qs[0]),
                u(qs[1]),
                u(qs[2]),
                u(ks[0]),
                u(ks[1]),
                u(ks[2]),
                u(vs[0]),
                u(vs[1]),
                u(vs[2]),
                u(ms[0]),
                u(ms[1]),
                u(ms[2]),
                a.scale,
                a.softcap,
                a.window,
                flags,
                chunk as u32,
            ),
        )?;
        if let Some(part) = &part {
            dev.launch_typed(
                table.merge,
                LaunchConfig::rows(
                    out_rows as u64,
                    ATTN_MERGE_BLOCK,
                    attn_merge_lds_bytes(wave, d as u32),
                )
                .starting_early(),
                (
                    Out::new(out),
                    In::new(part),
                    out_rows as u64,
                    d as u32,
                    splits as u32,
                ),
            )?;
        }
        Ok(out_buf)
    }
}

impl<T: WithDType> Tensor<T> {
    /// Scaled dot-product attention with `self` as the queries, `(b, h_q,
    /// s_q, d)`, and keys and values `(b, h_kv, s_kv, d)`:
    /// `softmax(q · kᵀ · scale + mask) · v` per query row, with `h_q / h_kv` query heads
    /// sharing each KV head (GQA, MQA). Returns `(b, h_q, s_q, d)`. f32,
    /// f16, bf16 in f32 math, the output rounded once; for f16 and bf16 the
    /// probabilities are also rounded to the dtype where they multiply `v`
    /// (as FlashAttention), on every device (each weight within half an
    /// ulp of the dtype, relative); head dims 64, 80, 96, 128 and 256.
    ///
    /// Views need no copy when their last dim is contiguous and, on a GPU,
    /// they start on 16 bytes: a `narrow` of a longer KV cache along the
    /// sequence, a `(b, s, h, d)` tensor permuted to `(b, h, s, d)`. Others
    /// are copied first. [`AttentionOptions`] sets the scale, causal
    /// masking (aligned to the end, for decode with a cache), an additive
    /// mask, a sliding window and a softcap; a query row that sees no key
    /// (everything masked) is zeros.
    ///
    /// ```
    /// use ferrocm_ops::{attention::AttentionOptions, Device, Tensor};
    /// let dev = Device::Cpu;
    /// // One query, two keys: the second key is twice as likely.
    /// let q = Tensor::from_slice(&[1.0f32; 64], &[1, 1, 1, 64], &dev)?;
    /// let mut k = vec![0.0f32; 128];
    /// k[64] = 2f32.ln(); // q · k1 = ln 2 with scale 1
    /// let k = Tensor::from_slice(&k, &[1, 1, 2, 64], &dev)?;
    /// let v: Vec<f32> = (0..128).map(|i| (i / 64) as f32 * 3.0).collect(); // rows 0 and 3
    /// let v = Tensor::from_slice(&v, &[1, 1, 2, 64], &dev)?;
    /// let out = q.attention(&k, &v, &AttentionOptions::new().scale(1.0))?.to_vec()?;
    /// assert!((out[0] - 2.0).abs() < 1e-6); // (1 * 0 + 2 * 3) / 3
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::UnsupportedDType`] for integers; [`Error::ShapeMismatch`]
    /// when an operand is not rank 4, k's or v's batch or head dim differs
    /// from q's, v's shape from k's, or the mask does not broadcast to
    /// `(b, h_q, s_q, s_kv)`; [`Error::BadParameter`] for a head dim other
    /// than 64, 80, 96, 128, 256, `h_q` not a multiple of `h_kv` (or no KV
    /// heads), a scale that is not finite, a softcap that is not a positive
    /// finite number, a window of 0; [`Error::DeviceMismatch`];
    /// [`Error::TooLarge`] past the kernels' 32-bit counts; [`Error::Host`].
    pub fn attention(&self, k: &Self, v: &Self, opts: &AttentionOptions<'_, T>) -> Result<Self> {
        let op = "attention";
        if !T::DTYPE.is_float() {
            return Err(Error::UnsupportedDType {
                op,
                dtype: T::DTYPE,
            });
        }
        self.same_device(op, k)?;
        self.same_device(op, v)?;
        if let Some(m) = opts.mask {
            self.same_device(op, m)?;
        }
        let bad = |what: String| Error::BadParameter { op, what };
        let mismatch = |op, lhs: &[usize], rhs: &[usize]| Error::ShapeMismatch {
            op,
            lhs: lhs.to_vec(),
            rhs: rhs.to_vec(),
        };
        for (t, name) in [(self, "q"), (k, "k"), (v, "v")] {
            if t.rank() != 4 {
                return Err(bad(format!(
                    "{name} must have rank 4 (b, heads, seq, head dim), got shape {:?}",
                    t.shape()
                )));
            }
        }
        let (qs, ks) = (self.shape(), k.shape());
        if ks[0] != qs[0] || ks[3] != qs[3] {
            return Err(mismatch("attention k", qs, ks));
        }
        if v.shape() != ks {
            return Err(mismatch("attention v", ks, v.shape()));
        }
        let dims = Dims {
            b: qs[0],
            h_q: qs[1],
            h_kv: ks[1],
            s_q: qs[2],
            s_kv: ks[2],
            d: qs[3],
        };
        if !ATTN_HEAD_DIMS.contains(&dims.d) {
            return Err(bad(format!(
                "head dim {} is not supported (supported: 64, 80, 96, 128, 256)",
                dims.d
            )));
        }
        if dims.h_kv == 0 || !dims.h_q.is_multiple_of(dims.h_kv) {
            return Err(bad(format!(
                "{} query heads are not a multiple of {} key/value heads",
                dims.h_q, dims.h_kv
            )));
        }
        let scale = opts.scale.unwrap_or(1.0 / (dims.d as f32).sqrt());
        if !scale.is_finite() {
            return Err(bad(format!("scale must be finite, got {scale}")));
        }
        let softcap = match opts.softcap {
            Some(c) if !(c.is_finite() && c > 0.0) => {
                return Err(bad(format!("softcap must be positive and finite, got {c}")));
            }
            Some(c) => c,
            None => 0.0,
        };
        let window = match opts.window {
            Some(0) => return Err(bad("window must be at least 1 key".into())),
            // Past every position it hides nothing.
            Some(w) => w.min(dims.s_q + dims.s_kv) as u32,
            None => 0,
        };
        let full = [dims.b, dims.h_q, dims.s_q, dims.s_kv];
        let mask = match opts.mask {
            Some(m) => {
                if m.rank() > 4 {
                    return Err(mismatch("attention mask", &full, m.shape()));
                }
                let m = m
                    .broadcast_as(&full)
                    .map_err(|_| mismatch("attention mask", &full, m.shape()))?;
                // Keys at unit stride (a mask broadcast along them is copied).
                Some(match m.layout().strides()[3] == 1 || dims.s_kv <= 1 {
                    true => m,
                    false => m.contiguous()?,
                })
            }
            None => None,
        };
        // The kernels count rows (heads x queries) and positions (keys +
        // queries + rows) in u32: the operand that passes it is named.
        let fits = |x: usize| x <= u32::MAX as usize;
        let rows = dims.h_q.saturating_mul(dims.s_q);
        if !fits(rows) || !fits(dims.s_q.saturating_add(rows)) {
            return Err(Error::TooLarge {
                op,
                shape: qs.to_vec(),
            });
        }
        if !fits(dims.s_kv.saturating_add(dims.s_q).saturating_add(rows)) {
            return Err(Error::TooLarge {
                op,
                shape: ks.to_vec(),
            });
        }
        let dev = self.device();
        let out_shape = [dims.b, dims.h_q, dims.s_q, dims.d];
        let n = out_shape.iter().product::<usize>();
        if n == 0 {
            return Tensor::zeros(&out_shape, dev);
        }
        if dims.s_kv == 0 {
            // No keys: every row sees nothing.
            return Tensor::zeros(&out_shape, dev);
        }
        let (q, k, v) = (ready(self)?, ready(k)?, ready(v)?);
        let inputs = Inputs {
            q: &q,
            k: &k,
            v: &v,
            mask: mask.as_ref(),
            dims,
            scale,
            softcap,
            causal: opts.causal,
            window,
        };
        let out = dev.alloc::<T>(n)?;
        let out = engine::run(dev, Attend { inputs, out })?;
        Ok(Tensor::from_parts(out, &out_shape))
    }
}

/// `t` itself when the kernels can read it in place (unit stride along the
/// head dim; its start and its strides on 16-byte words), else a
/// contiguous copy.
fn ready<T: WithDType>(t: &Tensor<T>) -> Result<Tensor<T>> {
    let per = per_word::<T::Kernel>() as usize;
    let l = t.layout();
    let s = l.strides();
    let words = l.offset().is_multiple_of(per)
        && (0..3).all(|i| s[i].is_multiple_of(per) || l.shape()[i] == 1);
    if s[3] == 1 && words {
        Ok(t.clone())
    } else {
        // A new buffer: `contiguous` keeps a contiguous view off its words.
        t.copy()
    }
}

/// [`AttentionOptions`] for [`DynTensor::attention`](crate::DynTensor::attention):
/// the same settings, with the additive mask a `DynTensor` of the inputs'
/// dtype.
///
/// ```
/// use ferrocm_ops::attention::DynAttentionOptions;
/// let o = DynAttentionOptions::new().causal().window(128);
/// assert!(o.causal && o.window == Some(128));
/// ```
#[derive(Clone, Copy, Default)]
pub struct DynAttentionOptions<'a> {
    /// As [`AttentionOptions::scale`].
    pub scale: Option<f32>,
    /// As [`AttentionOptions::causal`].
    pub causal: bool,
    /// As [`AttentionOptions::mask`], of the inputs' dtype.
    pub mask: Option<&'a crate::DynTensor>,
    /// As [`AttentionOptions::window`].
    pub window: Option<usize>,
    /// As [`AttentionOptions::softcap`].
    pub softcap: Option<f32>,
}

impl<'a> DynAttentionOptions<'a> {
    /// Plain attention, scale `1 / sqrt(d)`.
    pub fn new() -> Self {
        Self::default()
    }
    /// See [`AttentionOptions::scale`].
    pub fn scale(mut self, scale: f32) -> Self {
        self.scale = Some(scale);
        self
    }
    /// See [`AttentionOptions::causal`].
    pub fn causal(mut self) -> Self {
        self.causal = true;
        self
    }
    /// See [`AttentionOptions::mask`].
    pub fn mask(mut self, mask: &'a crate::DynTensor) -> Self {
        self.mask = Some(mask);
        self
    }
    /// See [`AttentionOptions::window`].
    pub fn window(mut self, window: usize) -> Self {
        self.window = Some(window);
        self
    }
    /// See [`AttentionOptions::softcap`].
    pub fn softcap(mut self, cap: f32) -> Self {
        self.softcap = Some(cap);
        self
    }
}

impl crate::DynTensor {
    /// [`Tensor::attention`] for a dtype known at run time (f32, f16, bf16).
    ///
    /// ```
    /// use ferrocm_ops::attention::DynAttentionOptions;
    /// use ferrocm_ops::{Device, Tensor};
    /// let q = Tensor::<f32>::randn(&[1, 2, 3, 64], 0.0, 1.0, 1, &Device::Cpu)?.to_dyn();
    /// let o = q.attention(&q, &q, &DynAttentionOptions::new().causal())?;
    /// assert_eq!(o.shape(), &[1, 2, 3, 64]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::DTypeMismatch`] when the dtypes differ (the mask's
    /// included); as [`Tensor::attention`].
    pub fn attention(&self, k: &Self, v: &Self, opts: &DynAttentionOptions<'_>) -> Result<Self> {
        self.same_dtype("attention", k)?;
        self.same_dtype("attention", v)?;
        if let Some(m) = opts.mask {
            self.same_dtype("attention", m)?;
        }
        crate::core::dyn_tensor::with_dtype!(self, "attention", |t| {
            let mask = opts.mask.map(|m| m.typed()).transpose()?;
            let typed = AttentionOptions {
                scale: opts.scale,
                causal: opts.causal,
                mask: mask.as_ref(),
                window: opts.window,
                softcap: opts.softcap,
            };
            Ok(t.attention(&k.typed()?, &v.typed()?, &typed)?.into())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::key_words_fit_u32;
    use half::bf16;

    /// The matrix-unit kernel's 32-bit key index: the last word of a head's
    /// last key at 2^32 - 1 words fits, one word more does not.
    #[test]
    fn key_words_fit_u32_at_the_edge() {
        // bf16: 8 elements a word; d 128 is 16 words.
        let fits = |s_kv, stride| key_words_fit_u32::<bf16>(s_kv, stride, 128);
        assert!(fits(0, 128) && fits(1, 128) && fits(1 << 20, 4096));
        let stride_words = 1u64 << 16;
        let keys = ((u32::MAX as u64 - 16) / stride_words + 1) as usize;
        assert!(fits(keys, (stride_words * 8) as usize));
        assert!(!fits(keys + 1, (stride_words * 8) as usize));
        // Keys a word apart: the last key's last word is word s_kv + 14.
        assert!(fits((1 << 32) - 16, 8));
        assert!(!fits((1 << 32) - 15, 8));
    }
}
