//! The quantized linear layer: `x · Wᵀ` for a [`QTensor`] weight, and
//! [`Weight`], dense or quantized behind one `forward`. Up to
//! [`QMATVEC_MAX_M`] rows of `x` (decode) run the matrix-vector product that
//! reads each weight byte once, on `x` rounded to 8 bits per group of 16
//! (`quantize_x_{dtype}` then `qmatvec{1,2,4}_{format}_{dtype}` on GPUs,
//! the same two functions under rayon on the Cpu); more rows dequantize the
//! weight to `x`'s dtype and run the dense matrix product.

use crate::engine::{self, Op};
use crate::quant::QTensor;
use crate::quant::format::with_block;
use crate::{DType, Device, Error, Result, Tensor, WithDType};
use ferrocm_host::{DeviceBuffer, In, LaunchConfig, Out};
use ferrocm_kernels::elem::Elem;
use ferrocm_kernels::quant::blocks::QuantBlock;
#[cfg(target_arch = "x86_64")]
use ferrocm_kernels::quant::blocks::{BlockQ8K, QuantizeBlock};
pub use ferrocm_kernels::quant::matvec::QMATVEC_MAX_M;
use ferrocm_kernels::quant::matvec::{
    QMATVEC_BLOCK, QMATVEC_LDS_BYTES, QMATVEC_ROW_LANES, QMatvecKernels, QuantizeXKernel,
    quantize_x_group, unit_half_dot,
};
use rayon::prelude::*;

impl QTensor {
    /// `x · Wᵀ` with this tensor the weight `W` `[out, in]` (as GGUF stores
    /// it) and `x` `[.., in]` in f32, f16 or bf16: the result is `[.., out]`
    /// in `x`'s dtype, each output a sum in f32 of the weights (as
    /// [`QTensor::dequantize`] defines them) times `x`, rounded once.
    ///
    /// Up to [`QMATVEC_MAX_M`] rows of `x` (decode) are first rounded to 8
    /// bits per group of 16 (scale `amax / 127`, so each element moves by at
    /// most `amax / 254`), as llama.cpp's quantized products do on every
    /// backend: the product is then integer dot products, one instruction
    /// per four codes on GPUs that have one. NaN or ±inf in such a group
    /// makes the outputs it feeds NaN. More rows multiply `x` as it is by
    /// the weight dequantized to `x`'s dtype.
    ///
    /// ```
    /// # use ferrocm_ops::WaveSize;
    /// use ferrocm_ops::{Device, QTensor, QuantFormat, Tensor};
    /// let dev = Device::emulator(WaveSize::Wave32);
    /// // W = [[1, 2, ..., 32], [-1, -1, ..., -1]] in Q8_0 (exact: codes 1..32 and -127 at scale 1/127).
    /// let w: Vec<f32> = (1..=32).map(|v| v as f32).chain([-1.0; 32]).collect();
    /// let w = QTensor::quantize(&Tensor::from_slice(&w, &[2, 32], &dev)?, QuantFormat::Q8_0)?;
    /// let x = Tensor::from_slice(&[1.0f32; 32], &[1, 32], &dev)?;
    /// let y = w.forward(&x)?.to_vec()?;
    /// assert!((y[0] - 528.0).abs() < 0.5 && (y[1] + 32.0).abs() < 0.1);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] when the weight is not 2-D or `x`'s last dim
    /// is not its second; [`Error::DeviceMismatch`] when they are on
    /// different devices; [`Error::UnsupportedDType`] for an integer `x`;
    /// [`Error::Host`] when allocation or a launch fails.
    pub fn forward<T: WithDType>(&self, x: &Tensor<T>) -> Result<Tensor<T>> {
        let op = "QTensor::forward";
        if !matches!(T::DTYPE, DType::F32 | DType::F16 | DType::BF16) {
            return Err(Error::UnsupportedDType {
                op,
                dtype: T::DTYPE,
            });
        }
        let (n, k) = match *self.shape() {
            [n, k] => (n, k),
            _ => {
                return Err(Error::ShapeMismatch {
                    op,
                    lhs: x.shape().to_vec(),
                    rhs: self.shape().to_vec(),
                });
            }
        };
        if x.shape().last() != Some(&k) {
            return Err(Error::ShapeMismatch {
                op,
                lhs: x.shape().to_vec(),
                rhs: self.shape().to_vec(),
            });
        }
        if x.device() != self.device() {
            return Err(Error::DeviceMismatch {
                op,
                lhs: x.device().to_string(),
                rhs: self.device().to_string(),
            });
        }
        let m = x.elem_count() / k.max(1);
        let mut out_shape = x.shape().to_vec();
        *out_shape.last_mut().expect("x has a last dim") = n;
        if m > QMATVEC_MAX_M as usize || n > u32::MAX as usize || k > u32::MAX as usize {
            // The matrix product: the weight dequantized to x's dtype.
            let w = self.dequantize::<T>()?;
            return x.linear(&w, None, None);
        }
        let x = x.contiguous()?;
        let dev = self.device();
        let out = dev.alloc::<T>(m * n)?;
        let buf = with_block!(self.format(), B => {
            let w = self.shared_storage().raw().typed::<B>().expect("a whole number of blocks (checked at creation)");
            engine::run(dev, QMatvec { w, x: &x, n, k, m, out })?
        });
        Ok(Tensor::from_parts(buf, &out_shape))
    }
}

/// `y[m, n] = x[m, k] · W[n, k]ᵀ` with `m <= QMATVEC_MAX_M`, `x` contiguous.
struct QMatvec<'a, B, T: WithDType> {
    w: &'a DeviceBuffer<B>,
    x: &'a Tensor<T>,
    n: usize,
    k: usize,
    m: usize,
    out: DeviceBuffer<T>,
}

/// Weight rows per Cpu task.
const ROWS_PER_TASK: usize = 16;

/// A Cpu task: whole weight rows `w` times every row of `x` in 8-bit form
/// into `sums` (`[rows, m]`), unit by unit as the kernels go.
struct CpuRows<'a, B> {
    sums: &'a mut [f32],
    w: &'a [B],
    codes: &'a [[u32; 4]],
    meta: &'a [u64],
    k: usize,
    m: usize,
}

impl<B: QuantBlock> crate::engine::cpu::Task for CpuRows<'_, B> {
    type Out = ();
    #[inline(always)]
    fn run(self) {
        let (k, m) = (self.k, self.m);
        let per_row = k / B::ELEMS;
        let groups = k / 16;
        for (s, row) in self
            .sums
            .chunks_exact_mut(m)
            .zip(self.w.chunks_exact(per_row))
        {
            for (bi, b) in row.iter().enumerate() {
                for u in 0..B::UNITS {
                    // SAFETY: Cpu buffers start on a 256-byte boundary.
                    let q = unsafe { b.unit8(u) };
                    for (c, s) in s.iter_mut().enumerate() {
                        for h in 0..2 {
                            let g = c * groups + bi * B::GROUPS + q.group[h] as usize;
                            *s = unit_half_dot(&q, h, self.codes[g], self.meta[g], *s);
                        }
                    }
                }
            }
        }
    }
}

impl<B, T: WithDType> QMatvec<'_, B, T> {
    /// `y[c, r] = sums[r, c]` rounded to `T`.
    fn finish(mut self, sums: &[f32]) -> DeviceBuffer<T> {
        let (n, m) = (self.n, self.m);
        let y = crate::engine::cpu::host_mut(&mut self.out);
        for (r, s) in sums.chunks_exact(m.max(1)).enumerate().take(n) {
            for (c, &v) in s.iter().enumerate() {
                y[c * n + r] = T::from_kernel(T::Kernel::from_f32(v));
            }
        }
        self.out
    }
}

/// The Cpu rows on x86-64 with AVX2: the same integer dot products as
/// [`unit_half_dot`] (`vpmaddubsw` on |code| and x signed like the code,
/// exact: no pair of products reaches i16's limit, as x codes stay in
/// -127..=127), scaled per lane and summed in f32 vectors, one horizontal
/// sum per output. Columns go in passes of 8, 4, 2 and 1 over a task's
/// weight rows (cached by then).
#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::QuantBlock;
    use ferrocm_kernels::elem::{F16, f16_bits_to_f32};
    use ferrocm_kernels::quant::blocks::{
        BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K, QK_K, k4_scale_min,
    };
    use std::arch::x86_64::*;

    /// `sums[r, c] += w_r · x_c` for every weight row `r` of `w` and every
    /// row `c < m` of `x` in 8-bit form (`codes`, `meta` per group of 16).
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn rows<B: QuantBlock>(
        sums: &mut [f32],
        w: &[B],
        codes: &[[u32; 4]],
        meta: &[u64],
        k: usize,
        m: usize,
    ) {
        let mut c = 0;
        while c < m {
            let left = m - c;
            // SAFETY: AVX2 and FMA, as this function's caller promised.
            unsafe {
                if left >= 8 {
                    pass::<B, 8>(sums, w, codes, meta, k, m, c);
                    c += 8;
                } else if left >= 4 {
                    pass::<B, 4>(sums, w, codes, meta, k, m, c);
                    c += 4;
                } else if left >= 2 {
                    pass::<B, 2>(sums, w, codes, meta, k, m, c);
                    c += 2;
                } else {
                    pass::<B, 1>(sums, w, codes, meta, k, m, c);
                    c += 1;
                }
            }
        }
    }

    /// Columns `c0..c0 + C` of every weight row.
    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn pass<B: QuantBlock, const C: usize>(
        sums: &mut [f32],
        w: &[B],
        codes: &[[u32; 4]],
        meta: &[u64],
        k: usize,
        m: usize,
        c0: usize,
    ) {
        let per_row = k / B::ELEMS;
        let groups = k / 16;
        let ones = _mm256_set1_epi16(1);
        for (s, row) in sums.chunks_exact_mut(m).zip(w.chunks_exact(per_row)) {
            let mut acc = [_mm256_setzero_ps(); C];
            let mut off = [0.0f32; C];
            for (bi, b) in row.iter().enumerate() {
                for u in 0..B::UNITS {
                    // SAFETY: Cpu buffers start on a 256-byte boundary.
                    let q = unsafe { b.unit8(u) };
                    // SAFETY: [u32; 8] is 32 bytes; unaligned load.
                    let wv = unsafe { _mm256_loadu_si256(q.codes.as_ptr().cast()) };
                    let aw = _mm256_sign_epi8(wv, wv);
                    let base = bi * B::GROUPS;
                    for j in 0..C {
                        let g0 = (c0 + j) * groups + base + q.group[0] as usize;
                        let g1 = (c0 + j) * groups + base + q.group[1] as usize;
                        // SAFETY: g0, g1 < m * groups = codes.len().
                        let xv = unsafe {
                            _mm256_set_m128i(
                                _mm_loadu_si128(codes.as_ptr().add(g1).cast()),
                                _mm_loadu_si128(codes.as_ptr().add(g0).cast()),
                            )
                        };
                        let p = _mm256_madd_epi16(
                            _mm256_maddubs_epi16(aw, _mm256_sign_epi8(xv, wv)),
                            ones,
                        );
                        let (m0, m1) = (meta[g0], meta[g1]);
                        let scale = _mm256_set_m128(
                            _mm_set1_ps(q.scale[1] * f32::from_bits(m1 as u32)),
                            _mm_set1_ps(q.scale[0] * f32::from_bits(m0 as u32)),
                        );
                        acc[j] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(p), acc[j]);
                        let sx0 = f32::from_bits((m0 >> 32) as u32);
                        let sx1 = f32::from_bits((m1 >> 32) as u32);
                        off[j] = q.offset[1].mul_add(sx1, q.offset[0].mul_add(sx0, off[j]));
                    }
                }
            }
            for j in 0..C {
                let v = acc[j];
                let h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
                let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
                let h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
                s[c0 + j] += _mm_cvtss_f32(h) + off[j];
            }
        }
    }

    /// Whether `B` takes [`superblock_rows`]: Q4_K, Q5_K, Q6_K.
    pub(super) fn superblock_format<B: QuantBlock>() -> bool {
        matches!(B::GGML_TYPE, 12..=14)
    }

    /// `sums[r, c] += w_r · x_c` for the Q4_K, Q5_K or Q6_K rows `w` and
    /// x as Q8_K blocks (`m` rows of `k / 256`): per super-block, the codes'
    /// products summed in i32 with the integer sub-block scales (and the
    /// minimums against x's group sums), then one f32 multiply-add per
    /// scale of the super-block, as GGML's CPU dot products go.
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA; `B` is one of the three formats.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn superblock_rows<B: QuantBlock + bytemuck::Pod>(
        sums: &mut [f32],
        w: &[B],
        x: &[BlockQ8K],
        k: usize,
        m: usize,
    ) {
        let per_row = k / QK_K;
        for (s, row) in sums.chunks_exact_mut(m).zip(w.chunks_exact(per_row)) {
            for (c, s) in s.iter_mut().enumerate() {
                let xs = &x[c * per_row..][..per_row];
                let mut acc = 0.0f32;
                match B::GGML_TYPE {
                    12 => {
                        let row: &[BlockQ4K] = bytemuck::cast_slice(row);
                        for (b, xb) in row.iter().zip(xs) {
                            acc += dot_q45k(b.d, b.dmin, &b.scales, &b.qs, None, xb);
                        }
                    }
                    13 => {
                        let row: &[BlockQ5K] = bytemuck::cast_slice(row);
                        for (b, xb) in row.iter().zip(xs) {
                            acc += dot_q45k(b.d, b.dmin, &b.scales, &b.qs, Some(&b.qh), xb);
                        }
                    }
                    _ => {
                        let row: &[BlockQ6K] = bytemuck::cast_slice(row);
                        for (b, xb) in row.iter().zip(xs) {
                            acc += dot_q6k(b, xb);
                        }
                    }
                }
                *s += acc;
            }
        }
    }

    /// The sum of the eight i32 lanes.
    #[target_feature(enable = "avx2")]
    fn hsum_i32(v: __m256i) -> i32 {
        let h = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
        let h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0b01_00_11_10));
        let h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0b10_11_00_01));
        _mm_cvtsi128_si32(h)
    }

    /// One Q4_K (or, with `qh`, Q5_K) super-block times a Q8_K block:
    /// `d dx Σ_j sc_j Σ q x - dmin dx Σ_j m_j (x's sums of sub-block j)`.
    #[target_feature(enable = "avx2,fma")]
    fn dot_q45k(
        d: F16,
        dmin: F16,
        scales: &[u8; 12],
        qs: &[u8; 128],
        qh: Option<&[u8; 32]>,
        x: &BlockQ8K,
    ) -> f32 {
        let mut sc = [0i16; 8];
        let mut summ = 0i32;
        for (j, sc) in sc.iter_mut().enumerate() {
            let (s, mn) = k4_scale_min(j, scales);
            *sc = s as i16;
            summ += mn as i32 * (x.bsums[2 * j] as i32 + x.bsums[2 * j + 1] as i32);
        }
        let low4 = _mm256_set1_epi8(0x0F);
        // SAFETY: 32-byte unaligned loads inside qs (128 bytes), qh (32)
        // and x.qs (256).
        let high = qh.map(|h| unsafe { _mm256_loadu_si256(h.as_ptr().cast()) });
        let mut acc = _mm256_setzero_si256();
        for c in 0..4 {
            let (q, xl, xh) = unsafe {
                (
                    _mm256_loadu_si256(qs.as_ptr().add(32 * c).cast()),
                    _mm256_loadu_si256(x.qs.as_ptr().add(64 * c).cast()),
                    _mm256_loadu_si256(x.qs.as_ptr().add(64 * c + 32).cast()),
                )
            };
            let mut lo = _mm256_and_si256(q, low4);
            let mut hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
            if let Some(h) = high {
                // The fifth bit of sub-block s is bit s of qh[l]: 16 where set.
                let sixteen = _mm256_set1_epi8(16);
                let b0 = _mm256_set1_epi8(1 << (2 * c));
                let b1 = _mm256_set1_epi8((1 << (2 * c + 1)) as i8);
                let set0 = _mm256_cmpeq_epi8(_mm256_and_si256(h, b0), b0);
                let set1 = _mm256_cmpeq_epi8(_mm256_and_si256(h, b1), b1);
                lo = _mm256_or_si256(lo, _mm256_and_si256(set0, sixteen));
                hi = _mm256_or_si256(hi, _mm256_and_si256(set1, sixteen));
            }
            let pl = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, xl), _mm256_set1_epi16(sc[2 * c]));
            let ph = _mm256_madd_epi16(
                _mm256_maddubs_epi16(hi, xh),
                _mm256_set1_epi16(sc[2 * c + 1]),
            );
            acc = _mm256_add_epi32(acc, _mm256_add_epi32(pl, ph));
        }
        let (d, dmin) = (f16_bits_to_f32(d.0) * x.d, f16_bits_to_f32(dmin.0) * x.d);
        d * hsum_i32(acc) as f32 - dmin * summ as f32
    }

    /// One Q6_K super-block times a Q8_K block: `d dx Σ_g sc_g (Σ q x - 32
    /// (x's sum of group g))`.
    #[target_feature(enable = "avx2,fma")]
    fn dot_q6k(w: &BlockQ6K, x: &BlockQ8K) -> f32 {
        let low4 = _mm256_set1_epi8(0x0F);
        let three = _mm256_set1_epi8(3);
        let mut acc = _mm256_setzero_si256();
        for h in 0..2 {
            // SAFETY: 32-byte unaligned loads inside ql (128), qh (64), x.qs (256).
            let (l0, l1, hb) = unsafe {
                (
                    _mm256_loadu_si256(w.ql.as_ptr().add(64 * h).cast()),
                    _mm256_loadu_si256(w.ql.as_ptr().add(64 * h + 32).cast()),
                    _mm256_loadu_si256(w.qh.as_ptr().add(32 * h).cast()),
                )
            };
            // Quarter k of the half: ql low/high nibbles, qh bit pair k.
            let quarters = [
                (_mm256_and_si256(l0, low4), hb),
                (_mm256_and_si256(l1, low4), _mm256_srli_epi16(hb, 2)),
                (
                    _mm256_and_si256(_mm256_srli_epi16(l0, 4), low4),
                    _mm256_srli_epi16(hb, 4),
                ),
                (
                    _mm256_and_si256(_mm256_srli_epi16(l1, 4), low4),
                    _mm256_srli_epi16(hb, 6),
                ),
            ];
            for (k, (lo, hi)) in quarters.into_iter().enumerate() {
                let q = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(hi, three), 4));
                // SAFETY: inside x.qs.
                let xv = unsafe { _mm256_loadu_si256(x.qs.as_ptr().add(128 * h + 32 * k).cast()) };
                let g = 8 * h + 2 * k;
                let scale = _mm256_set_m128i(
                    _mm_set1_epi16(w.scales[g + 1] as i16),
                    _mm_set1_epi16(w.scales[g] as i16),
                );
                acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(q, xv), scale));
            }
        }
        let mut bias = 0i32;
        for g in 0..16 {
            bias += w.scales[g] as i32 * x.bsums[g] as i32;
        }
        f16_bits_to_f32(w.d.0) * x.d * (hsum_i32(acc) - 32 * bias) as f32
    }
}

impl<B, T> Op for QMatvec<'_, B, T>
where
    B: QuantBlock
        + bytemuck::Pod
        + Sync
        + QMatvecKernels<f32>
        + QMatvecKernels<ferrocm_kernels::elem::F16>
        + QMatvecKernels<ferrocm_kernels::elem::Bf16>,
    T: WithDType,
{
    type Output = DeviceBuffer<T>;

    fn cpu(self) -> Result<DeviceBuffer<T>> {
        let (n, k, m) = (self.n, self.k, self.m);
        let w = crate::engine::cpu::host(self.w);
        let x = &crate::engine::cpu::host(self.x.buf())[self.x.layout.offset()..][..m * k];
        let per_row = k / B::ELEMS;
        // Sums per weight row (row-major [n, m]), then transposed into y.
        let mut sums = vec![0.0f32; n * m];
        #[cfg(target_arch = "x86_64")]
        let avx2 = std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma");
        #[cfg(not(target_arch = "x86_64"))]
        let avx2 = false;
        #[cfg(target_arch = "x86_64")]
        if avx2 && x86::superblock_format::<B>() && per_row > 0 && m > 0 {
            // Q4_K, Q5_K, Q6_K: x as Q8_K (GGML's activation format for
            // them), integer sums over whole super-blocks.
            let xq: Vec<BlockQ8K> = x
                .as_chunks::<256>()
                .0
                .iter()
                .map(|c| {
                    let v = c.map(|v| v.to_kernel().to_f32());
                    let mut b = BlockQ8K::quantize(&v);
                    // GGML's quantizer passes NaN by; the sum must not.
                    if v.iter().any(|v| !v.is_finite()) {
                        b.d = f32::NAN;
                    }
                    b
                })
                .collect();
            sums.par_chunks_mut(m * ROWS_PER_TASK)
                .zip(w.par_chunks(per_row * ROWS_PER_TASK))
                // SAFETY: the CPU has AVX2 and FMA (checked above).
                .for_each(|(sums, w)| unsafe { x86::superblock_rows(sums, w, &xq, k, m) });
            return Ok(self.finish(&sums));
        }
        // x in 8-bit form, as the kernels take it (the same function).
        let (codes, meta): (Vec<[u32; 4]>, Vec<u64>) = x
            .as_chunks::<16>()
            .0
            .iter()
            .map(|g| quantize_x_group(g.map(|v| v.to_kernel().to_f32())))
            .unzip();
        if per_row > 0 && m > 0 {
            sums.par_chunks_mut(m * ROWS_PER_TASK)
                .zip(w.par_chunks(per_row * ROWS_PER_TASK))
                .for_each(|(sums, w)| {
                    if avx2 {
                        #[cfg(target_arch = "x86_64")]
                        // SAFETY: the CPU has AVX2 and FMA (checked above).
                        unsafe {
                            x86::rows(sums, w, &codes, &meta, k, m)
                        };
                    } else {
                        crate::engine::cpu::vectorized(CpuRows {
                            sums,
                            w,
                            codes: &codes,
                            meta: &meta,
                            k,
                            m,
                        })
                    }
                });
        }
        Ok(self.finish(&sums))
    }

    fn kernels(self, dev: &Device) -> Result<DeviceBuffer<T>> {
        let (n, k, m) = (self.n as u32, self.k as u32, self.m as u32);
        if n == 0 || m == 0 {
            return Ok(self.out);
        }
        // x in 8-bit form: a 16-byte word of codes and a u64 (scale, sum)
        // per group of 16.
        let groups = self.m * self.k / 16;
        let codes = dev.alloc::<u32>(4 * groups)?;
        let meta = dev.alloc::<u64>(groups)?;
        // Four workitems per group.
        let xcfg = LaunchConfig::linear(4 * groups as u64, 256).starting_early();
        // Rows of x per pass: 1, 2, or 4 (more take passes of 4).
        let variant = match m {
            1 => 0,
            2 => 1,
            _ => 2,
        };
        // QMATVEC_ROW_LANES workitems per weight row, or per two with 4 rows
        // of x per pass.
        let rows_per_lane = if variant == 2 { 2 } else { 1 };
        let mut cfg = LaunchConfig::linear(
            (n as u64).div_ceil(rows_per_lane) * QMATVEC_ROW_LANES as u64,
            QMATVEC_BLOCK,
        )
        .starting_early();
        cfg.lds_bytes = QMATVEC_LDS_BYTES;
        let (offset, len) = (self.x.layout.offset(), self.m * self.k);
        macro_rules! go {
            ($t:ty) => {{
                let x = In::range(
                    self.x.buf().view_as::<$t>().expect("same size"),
                    offset,
                    len,
                );
                dev.launch_typed(
                    <$t as QuantizeXKernel>::QUANTIZE_X,
                    xcfg,
                    (Out::new(&codes), Out::new(&meta), x, groups as u64),
                )?;
                let out = self.out.view_as::<$t>().expect("same size");
                let kernel = <B as QMatvecKernels<$t>>::ROWS[variant];
                dev.launch_typed(
                    kernel,
                    cfg,
                    (
                        Out::new(out),
                        In::new(self.w),
                        In::new(&codes),
                        In::new(&meta),
                        n,
                        k,
                        m,
                    ),
                )?
            }};
        }
        match T::DTYPE {
            DType::F32 => go!(f32),
            DType::F16 => go!(ferrocm_kernels::elem::F16),
            DType::BF16 => go!(ferrocm_kernels::elem::Bf16),
            dtype => {
                return Err(Error::UnsupportedDType {
                    op: "QTensor::forward",
                    dtype,
                });
            }
        }
        Ok(self.out)
    }
}

/// A linear layer's weight, dense or quantized: model code calls
/// [`Weight::forward`] either way (candle's `QMatMul`).
///
/// ```
/// use ferrocm_ops::{Device, QTensor, QuantFormat, Tensor, quant::Weight};
/// let w = Tensor::from_slice(&[1.0f32; 64], &[2, 32], &Device::Cpu)?;
/// let x = Tensor::from_slice(&[0.5f32; 32], &[1, 32], &Device::Cpu)?;
/// let dense = Weight::Dense(w.clone());
/// let q = Weight::Quantized(QTensor::quantize(&w, QuantFormat::Q8_0)?);
/// assert_eq!(dense.forward(&x)?.to_vec()?, vec![16.0, 16.0]);
/// // Q8_0 keeps 1.0 as 127 times an f16 scale of 1/127: 0.99994.
/// assert!(q.forward(&x)?.to_vec()?.iter().all(|v| (v - 16.0).abs() < 1e-2));
/// assert_eq!(q.shape(), &[2, 32]);
/// # Ok::<(), ferrocm_ops::Error>(())
/// ```
#[derive(Clone, Debug)]
pub enum Weight<T: WithDType> {
    /// A dense `[out, in]` weight.
    Dense(Tensor<T>),
    /// A quantized `[out, in]` weight.
    Quantized(QTensor),
}

impl<T: WithDType> Weight<T> {
    /// `x · Wᵀ`: [`Tensor::linear`] or [`QTensor::forward`].
    ///
    /// # Errors
    /// Those of the product taken.
    pub fn forward(&self, x: &Tensor<T>) -> Result<Tensor<T>> {
        match self {
            Weight::Dense(w) => x.linear(w, None, None),
            Weight::Quantized(w) => w.forward(x),
        }
    }

    /// Rows at `ids` of a `[vocab, hidden]` table, dense or quantized:
    /// [`Tensor::embedding`] or [`QTensor::embedding`] (shape `ids.shape()
    /// + [hidden]`).
    ///
    /// # Errors
    /// Those of the lookup taken.
    pub fn embedding<I: crate::IdType>(&self, ids: &Tensor<I>) -> Result<Tensor<T>> {
        match self {
            Weight::Dense(w) => w.embedding(ids),
            Weight::Quantized(w) => w.embedding::<T, I>(ids),
        }
    }

    /// The weight's shape `[out, in]`.
    pub fn shape(&self) -> &[usize] {
        match self {
            Weight::Dense(w) => w.shape(),
            Weight::Quantized(w) => w.shape(),
        }
    }
}
