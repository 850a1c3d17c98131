//! The quantized linear layer: `x · Wᵀ` for a [`QTensor`] weight, and
//! [`Weight`], dense or quantized behind one `forward`. Up to
//! [`QMATVEC_MAX_M`] rows of `x` (decode) run the matrix-vector product that
//! reads each weight byte once, on `x` rounded to 8 bits per group of 16
//! (`quantize_x_{dtype}` then `qmatvec{1,2,4}_{format}_{dtype}` on GPUs,
//! the same two functions under rayon on the Cpu); more rows dequantize the
//! weight to `x`'s dtype and run the dense matrix product (on the Cpu, for
//! f32 `x`, a panel of weight rows at a time), except on a Cpu with AVX-512
//! VNNI, whose integer tiles (`tiles.rs`) take any number of rows on
//! `x`'s 8-bit form (and the legacy formats' 4 to 8 rows).

use crate::engine::{self, Op};
use crate::quant::format::with_block;
use crate::quant::{Q8Activations, QTensor};
use crate::{DType, Device, Error, Result, Tensor, WithDType};
use ferrocm_host::{DeviceBuffer, In, LaunchConfig, Out};
use ferrocm_kernels::device::{QMATVEC_WIDE_PASS_AMD, QMATVEC_WIDE_PASS_NVIDIA};
use ferrocm_kernels::elem::Elem;
use ferrocm_kernels::quant::blocks::QuantBlock;
pub use ferrocm_kernels::quant::matvec::QMATVEC_MAX_M;
use ferrocm_kernels::quant::matvec::{
    QMATVEC_BLOCK, QMATVEC_LDS_BYTES, QMATVEC_ROW_LANES, QMatvecKernels, qmatvec_pass8_on,
    qmatvec_rows, unit_half_dot,
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
    /// the weight dequantized to `x`'s dtype, except on a Cpu with AVX-512
    /// VNNI, where they take the 8-bit form too (integer products, each
    /// output the same sum as for fewer rows): [`QTensor::rounds_x_to_8_bits`]
    /// says which.
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
        if m > QMATVEC_MAX_M as usize || n > u32::MAX as usize || k > u32::MAX as usize {
            #[cfg(target_arch = "x86_64")]
            if *self.device() == Device::Cpu && m > 0 && super::tiles::available() {
                return self.forward_cpu_tiles(x, n, k, m);
            }
            if *self.device() == Device::Cpu && T::DTYPE == DType::F32 && m > 0 {
                let x = x.to_dyn().typed::<f32>()?;
                let y = self.forward_cpu_panels(&x, n, k, m)?;
                return y.to_dyn().typed::<T>();
            }
            // The matrix product: the weight dequantized to x's dtype.
            let w = self.dequantize::<T>()?;
            return x.linear(&w, None, None);
        }
        // The paired copy of x's codes only for a format that reads it
        // (the copy's stores cost the others' one-row products 2-4%).
        let paired = with_block!(self.format(), B => B::PAIRED_X);
        self.forward_q8(&Q8Activations::quantize_with(x, paired)?)
    }

    /// Whether [`QTensor::forward`] rounds `m` rows of `x` to their 8-bit
    /// form ([`Q8Activations`]) on this tensor's device: up to
    /// [`QMATVEC_MAX_M`] rows everywhere, and any number on a Cpu with
    /// AVX-512 VNNI, whose integer products then run a prompt at about
    /// twice the f32 rate.
    ///
    /// ```
    /// # use ferrocm_ops::WaveSize;
    /// use ferrocm_ops::{Device, QTensor, QuantFormat, Tensor};
    /// let dev = Device::emulator(WaveSize::Wave32);
    /// let w = QTensor::quantize(&Tensor::from_slice(&[0.5f32; 64], &[2, 32], &dev)?, QuantFormat::Q4_0)?;
    /// assert!(w.rounds_x_to_8_bits(1) && !w.rounds_x_to_8_bits(512));
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    pub fn rounds_x_to_8_bits(&self, m: usize) -> bool {
        let fits = |v: usize| v <= u32::MAX as usize;
        let matvec = m <= QMATVEC_MAX_M as usize && self.shape().iter().all(|&d| fits(d));
        #[cfg(target_arch = "x86_64")]
        let tiles = *self.device() == Device::Cpu && super::tiles::available();
        #[cfg(not(target_arch = "x86_64"))]
        let tiles = false;
        matvec || tiles
    }

    /// [`QTensor::forward`]'s matrix product on a Cpu with AVX-512 VNNI:
    /// `x` rounded to its 8-bit form as for fewer rows, then integer dot
    /// products a tile of 16 weight rows at a time ([`super::tiles`]), each
    /// output the sum of [`unit_half_dot`] the Cpu's scalar rows make.
    #[cfg(target_arch = "x86_64")]
    fn forward_cpu_tiles<T: WithDType>(
        &self,
        x: &Tensor<T>,
        n: usize,
        k: usize,
        m: usize,
    ) -> Result<Tensor<T>> {
        let q = Q8Activations::quantize(x)?;
        let codes = crate::engine::cpu::host(&q.codes).as_chunks::<4>().0;
        let meta = crate::engine::cpu::host(&q.meta);
        let mut y = Device::Cpu.alloc::<f32>(m * n)?;
        with_block!(self.format(), B => {
            let blocks = crate::engine::cpu::host(self.blocks::<B>());
            super::tiles::product::<B>(crate::engine::cpu::host_mut(&mut y), blocks, codes, meta, (n, k, m));
        });
        let mut shape = x.shape().to_vec();
        *shape.last_mut().expect("x has a last dim") = n;
        let y = Tensor::<f32>::from_parts(y, &shape);
        if T::DTYPE == DType::F32 {
            y.to_dyn().typed::<T>()
        } else {
            y.to_dtype::<T>()
        }
    }

    /// [`QTensor::forward`]'s matrix product on the Cpu for f32 `x` of `m`
    /// rows: the weight dequantized [`CPU_PANEL_ROWS`] rows at a time into
    /// each thread's buffer, and each panel's product (the gemm crate, one
    /// thread) written into its columns of y. The whole weight in f32 went
    /// to memory and was read back to be packed, which cost a prefill more
    /// than the products did; a panel stays in the caches. The same values
    /// as [`QTensor::dequantize`] then [`Tensor::linear`]: each weight as
    /// `group16` gives it, each output an f32 sum.
    fn forward_cpu_panels(
        &self,
        x: &Tensor<f32>,
        n: usize,
        k: usize,
        m: usize,
    ) -> Result<Tensor<f32>> {
        let x = x.contiguous()?;
        let xs = &crate::engine::cpu::host(x.buf())[x.layout().offset()..][..m * k];
        let mut y = Device::Cpu.alloc::<f32>(m * n)?;
        let dst = PanelDst(crate::engine::cpu::host_mut(&mut y).as_mut_ptr());
        with_block!(self.format(), B => {
            let blocks = crate::engine::cpu::host(self.blocks::<B>());
            let per_row = k / B::ELEMS;
            #[cfg(target_arch = "x86_64")]
            let avx512 = std::arch::is_x86_feature_detected!("avx512f");
            (0..n.div_ceil(CPU_PANEL_ROWS)).into_par_iter().for_each(|p| {
                let r0 = p * CPU_PANEL_ROWS;
                let rows = CPU_PANEL_ROWS.min(n - r0);
                PANEL.with_borrow_mut(|panel| {
                    panel.resize(panel.len().max(rows * k), 0.0);
                    // [k, rows]: each k's weights of the panel's rows side
                    // by side, as the gemm crate packs them (from [rows, k]
                    // its packing cost more than the products), filled a
                    // block column at a time (a few KiB of lines).
                    let panel = &mut panel[..rows * k];
                    let src = &blocks[r0 * per_row..(r0 + rows) * per_row];
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: AVX-512 F (checked); a Cpu buffer's blocks.
                    let filled = if avx512 {
                        unsafe { x86::fill_panel512::<B>(panel, src, per_row, rows) }
                    } else {
                        0
                    };
                    #[cfg(not(target_arch = "x86_64"))]
                    let filled = 0;
                    for bi in 0..per_row {
                        let column = &mut panel[bi * B::ELEMS * rows..][..B::ELEMS * rows];
                        for r in filled..rows {
                            let b = &src[r * per_row + bi];
                            for g in 0..B::GROUPS {
                                for (l, v) in b.group16(g).into_iter().enumerate() {
                                    column[(16 * g + l) * rows + r] = v;
                                }
                            }
                        }
                    }
                    let dst = &dst;
                    // SAFETY: columns r0..r0 + rows of the m rows of y
                    // (n apart) are this task's alone; the panel is the
                    // [k, rows] right operand.
                    unsafe {
                        crate::matmul::dense::sgemm_rows(
                            (m, rows, k),
                            dst.0.add(r0),
                            n,
                            xs,
                            (k, 1),
                            panel,
                            (rows, 1),
                            1,
                        )
                    };
                });
            });
        });
        let mut shape = x.shape().to_vec();
        *shape.last_mut().expect("x has a last dim") = n;
        Ok(Tensor::from_parts(y, &shape))
    }

    /// [`QTensor::forward`] of up to [`QMATVEC_MAX_M`] rows of `x` already
    /// in 8-bit form (made by an op that produced `x`, e.g.
    /// [`Tensor::add_rms_norm_q8`], or by [`Q8Activations::quantize`]): `[..,
    /// out]` in `T` (f32, f16 or bf16), bit for bit what `forward` gives for
    /// the `x` they were made from.
    ///
    /// ```
    /// # use ferrocm_ops::WaveSize;
    /// use ferrocm_ops::quant::Q8Activations;
    /// use ferrocm_ops::{Device, QTensor, QuantFormat, Tensor};
    /// let dev = Device::emulator(WaveSize::Wave32);
    /// let w = QTensor::quantize(&Tensor::from_slice(&[0.5f32; 64], &[2, 32], &dev)?, QuantFormat::Q8_0)?;
    /// let x = Tensor::from_slice(&[2.0f32; 32], &[1, 32], &dev)?;
    /// let y = w.forward_q8::<f32>(&Q8Activations::quantize(&x)?)?;
    /// assert_eq!(y.to_vec()?, w.forward(&x)?.to_vec()?);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] when the weight is not 2-D or `x`'s last dim
    /// is not its second; [`Error::BadParameter`] for more than
    /// [`QMATVEC_MAX_M`] rows (a matrix product: [`QTensor::forward`] takes
    /// those in their dense form); [`Error::DeviceMismatch`];
    /// [`Error::UnsupportedDType`] for an integer `T`; [`Error::Host`].
    pub fn forward_q8<T: WithDType>(&self, x: &Q8Activations) -> Result<Tensor<T>> {
        let op = "QTensor::forward_q8";
        if !matches!(T::DTYPE, DType::F32 | DType::F16 | DType::BF16) {
            return Err(Error::UnsupportedDType {
                op,
                dtype: T::DTYPE,
            });
        }
        let (n, k) = match *self.shape() {
            [n, k] if x.shape().last() == Some(&k) => (n, k),
            _ => {
                return Err(Error::ShapeMismatch {
                    op,
                    lhs: x.shape().to_vec(),
                    rhs: self.shape().to_vec(),
                });
            }
        };
        if x.device() != self.device() {
            return Err(Error::DeviceMismatch {
                op,
                lhs: x.device().to_string(),
                rhs: self.device().to_string(),
            });
        }
        let m = x.shape().iter().product::<usize>() / k.max(1);
        if m > QMATVEC_MAX_M as usize || n > u32::MAX as usize || k > u32::MAX as usize {
            return Err(Error::BadParameter {
                op,
                what: format!(
                    "x in 8-bit form {:?} times a [{n}, {k}] weight: at most {QMATVEC_MAX_M} rows, n and k within u32",
                    x.shape()
                ),
            });
        }
        let mut out_shape = x.shape().to_vec();
        *out_shape.last_mut().expect("x has a last dim") = n;
        let dev = self.device();
        let out = dev.alloc::<T>(m * n)?;
        let buf = with_block!(self.format(), B => {
            if B::PAIRED_X && !x.paired() && !matches!(dev, Device::Cpu) {
                // Only `forward` makes x without the copy, for a format that
                // does not read it.
                return Err(Error::BadParameter {
                    op,
                    what: format!("x in 8-bit form {:?} lacks the paired copy of its codes a {} weight reads", x.shape(), self.format()),
                });
            }
            let w = self.shared_storage().raw().typed::<B>().expect("a whole number of blocks (checked at creation)");
            engine::run(dev, QMatvec { w, x, n, k, m, out })?
        });
        Ok(Tensor::from_parts(buf, &out_shape))
    }
}

/// `y[m, n] = x[m, k] · W[n, k]ᵀ` with `m <= QMATVEC_MAX_M`, `x` in 8-bit form.
struct QMatvec<'a, B, T: WithDType> {
    w: &'a DeviceBuffer<B>,
    x: &'a Q8Activations,
    n: usize,
    k: usize,
    m: usize,
    out: DeviceBuffer<T>,
}

/// Weight rows per Cpu task.
const ROWS_PER_TASK: usize = 16;

/// Weight rows a Cpu task of the quantized matrix product dequantizes at
/// once ([`QTensor::forward`] with more than [`QMATVEC_MAX_M`] rows of x):
/// 64 rows of 2048 to 14336 f32 values, 0.5 to 3.5 MiB.
const CPU_PANEL_ROWS: usize = 64;

std::thread_local! {
    /// Each thread's dequantized panel, kept between calls.
    static PANEL: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// y's first element, shared by the tasks that write its disjoint columns.
struct PanelDst(*mut f32);
// SAFETY: each task writes only its own columns (`forward_cpu_panels`).
unsafe impl Sync for PanelDst {}

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
                            *s = unit_half_dot::<B>(&q, h, self.codes[g], self.meta[g], *s);
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
pub(super) mod x86 {
    use super::QuantBlock;

    /// Calls `pass::<B, C>(args.., c)` over x's rows `c = 0..m` in passes
    /// of `C` = 8, 4, 2 and 1 rows, from within an `unsafe fn` whose
    /// caller promised the target features `pass` needs.
    macro_rules! in_passes {
        ($m:expr, $pass:ident::<$b:ty>($($arg:expr),*)) => {{
            let m = $m;
            let mut c = 0;
            while c < m {
                let step = match m - c {
                    8.. => 8,
                    4.. => 4,
                    2.. => 2,
                    _ => 1,
                };
                // SAFETY: the features this function's caller promised.
                unsafe {
                    match step {
                        8 => $pass::<$b, 8>($($arg,)* c),
                        4 => $pass::<$b, 4>($($arg,)* c),
                        2 => $pass::<$b, 2>($($arg,)* c),
                        _ => $pass::<$b, 1>($($arg,)* c),
                    }
                }
                c += step;
            }
        }};
    }
    use crate::engine::cpu::hsum_f32;
    use ferrocm_kernels::quant::blocks::{
        BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, IQ4NL_VALUES, MXFP4_VALUES, QK_K,
        e8m0_half_to_f32, unit_has_offset,
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
        in_passes!(m, pass::<B>(sums, w, codes, meta, k, m));
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
                prefetch_ahead(b);
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
                        if unit_has_offset::<B>() {
                            let sx0 = f32::from_bits((m0 >> 32) as u32);
                            let sx1 = f32::from_bits((m1 >> 32) as u32);
                            off[j] = q.offset[1].mul_add(sx1, q.offset[0].mul_add(sx0, off[j]));
                        }
                    }
                }
            }
            for j in 0..C {
                s[c0 + j] += hsum_f32(acc[j]) + off[j];
            }
        }
    }

    /// Whether `B` takes [`legacy_rows`]: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
    /// Q8_1, Q8_K, IQ4_NL, IQ4_XS or MXFP4 (GGML types 2, 3, 6, 7, 8, 9, 15,
    /// 20, 23, 39): units of 32 codes with one scale (and Q4_1/Q5_1's
    /// minimum).
    pub(in crate::quant) fn legacy_format<B: QuantBlock>() -> bool {
        matches!(B::GGML_TYPE, 2 | 3 | 6 | 7 | 8 | 9 | 15 | 20 | 23 | 39)
    }

    /// Whether the legacy format `B` adds a minimum (Q4_1, Q5_1).
    pub(super) fn legacy_has_min<B: QuantBlock>() -> bool {
        matches!(B::GGML_TYPE, 3 | 7)
    }

    /// `sums[r, c] += w_r · x_c` for rows `w` of a legacy format
    /// ([`legacy_format`]) and `m` rows of x in 8-bit form, decoding each
    /// unit of 32 once into a 32-byte vector of codes for every row of x a
    /// pass takes (8, 4, 2 or 1). Signed codes (Q4_0's nibbles less 8, Q5_0's
    /// five bits less 16, Q8_0/Q8_1's bytes, the IQ4 and MXFP4 tables'
    /// values by `vpshufb`) go into `vpmaddubsw` as |w| against x signed
    /// like w; unsigned ones (Q4_1, Q5_1) as they are.
    /// Both of x's groups of 16 in one load, each group's i32 sums times its
    /// scale (`dx`, per pair of groups as `pair_scales` takes them) and the
    /// block's `d` in f32 vectors; a minimum `m` times x's sum over the
    /// block (`sx32`, empty for the formats without one).
    ///
    /// # Safety
    /// The CPU has AVX2, FMA and F16C; `B` is a legacy format.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn legacy_rows<B: QuantBlock + bytemuck::Pod>(
        sums: &mut [f32],
        w: &[B],
        codes: &[[u32; 4]],
        dx: &[[f32; 8]],
        sx32: &[f32],
        k: usize,
        m: usize,
    ) {
        in_passes!(m, legacy_pass::<B>(sums, w, codes, dx, sx32, k, m));
    }

    /// Unit `sub`'s 32 codes (element `l` in byte `l`), scale and minimum
    /// (0 where the format has none) from block `bytes`, by GGML's layouts:
    /// after the f16 `d` (MXFP4: an E8M0 exponent), Q4_1/Q5_1 an f16
    /// minimum, Q8_1 an f16 sum (unused), Q5_0/Q5_1 the fifth bits (u32, bit
    /// `l` element `l`), IQ4_XS its sub-block scales, then the nibbles
    /// (element `l` low, `l + 16` high; IQ4_XS 16 bytes a unit) or the
    /// bytes (Q8_K: an f32 `d`, 256 codes, sums not read).
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    pub(in crate::quant) fn legacy_codes<B: QuantBlock>(
        bytes: &[u8],
        sub: usize,
    ) -> (__m256i, f32, f32) {
        let half = |at: usize| f16_to_f32(u16::from_le_bytes([bytes[at], bytes[at + 1]]));
        let (d, min, qs) = match B::GGML_TYPE {
            3 => (half(0), half(2), 4),
            6 => (half(0), 0.0, 6),
            7 => (half(0), half(2), 8),
            9 => (half(0), 0.0, 4),
            23 => {
                // 6-bit sub-block scales less 32: low four bits in
                // scales_l (bytes 4..8), high two in scales_h (bytes 2..4).
                let low = (bytes[4 + sub / 2] >> (4 * (sub % 2))) & 0xF;
                let high = (u16::from_le_bytes([bytes[2], bytes[3]]) >> (2 * sub)) as u8 & 3;
                (
                    half(0) * ((low | high << 4) as i32 - 32) as f32,
                    0.0,
                    8 + 16 * sub,
                )
            }
            15 => {
                let d = f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
                (d, 0.0, 4 + 32 * sub)
            }
            39 => (e8m0_half_to_f32(bytes[0]), 0.0, 1),
            _ => (half(0), 0.0, 2),
        };
        let bytewise = matches!(B::GGML_TYPE, 8 | 9 | 15);
        let len = if bytewise { 32 } else { 16 };
        assert!(bytes.len() >= qs + len);
        if bytewise {
            // SAFETY: 32 bytes from `qs` (asserted); unaligned load.
            let q = unsafe { _mm256_loadu_si256(bytes.as_ptr().add(qs).cast()) };
            return (q, d, min);
        }
        let low4 = _mm_set1_epi8(0x0F);
        // SAFETY: 16 bytes from `qs` (asserted); unaligned load.
        let q = unsafe { _mm_loadu_si128(bytes.as_ptr().add(qs).cast()) };
        let lo = _mm_and_si128(q, low4);
        let hi = _mm_and_si128(_mm_srli_epi16(q, 4), low4);
        let mut codes = _mm256_set_m128i(hi, lo);
        if matches!(B::GGML_TYPE, 6 | 7) {
            // Bit l of qh to 16 in byte l: each byte of the word copied to
            // the eight lanes it covers, one bit tested in each.
            let qh =
                u32::from_le_bytes([bytes[qs - 4], bytes[qs - 3], bytes[qs - 2], bytes[qs - 1]]);
            let spread = _mm256_shuffle_epi8(
                _mm256_set1_epi32(qh as i32),
                _mm256_setr_epi8(
                    0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3,
                    3, 3, 3, 3, 3, 3,
                ),
            );
            let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
            let set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
            codes = _mm256_or_si256(codes, _mm256_and_si256(set, _mm256_set1_epi8(16)));
        }
        let table = |t: &[i8; 16]| {
            // SAFETY: 16 bytes; unaligned load.
            _mm256_broadcastsi128_si256(unsafe { _mm_loadu_si128(t.as_ptr().cast()) })
        };
        match B::GGML_TYPE {
            2 => codes = _mm256_sub_epi8(codes, _mm256_set1_epi8(8)),
            6 => codes = _mm256_sub_epi8(codes, _mm256_set1_epi8(16)),
            20 | 23 => codes = _mm256_shuffle_epi8(table(&IQ4NL_VALUES), codes),
            39 => codes = _mm256_shuffle_epi8(table(&MXFP4_VALUES), codes),
            _ => {}
        }
        (codes, d, min)
    }

    /// Columns `c0..c0 + C` of every weight row, as [`legacy_rows`].
    #[target_feature(enable = "avx2,fma,f16c")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn legacy_pass<B: QuantBlock + bytemuck::Pod, const C: usize>(
        sums: &mut [f32],
        w: &[B],
        codes: &[[u32; 4]],
        dx: &[[f32; 8]],
        sx32: &[f32],
        k: usize,
        m: usize,
        c0: usize,
    ) {
        let per_row = k / B::ELEMS;
        let subs = B::ELEMS / 32;
        let units = per_row * subs;
        let groups = k / 16;
        for (s, row) in sums.chunks_exact_mut(m).zip(w.chunks_exact(per_row)) {
            let mut acc = [[_mm256_setzero_ps(); C]; 2];
            let mut off = [[0.0f32; C]; 2];
            let mut ui = 0;
            // One row of x: even and odd units in two sums, so that each
            // unit's multiply-add waits for the one two units back. (Indexed
            // by the unit's parity, the sums lived on the stack: the store
            // and reload held one row of x to half of Q4_K's rate.)
            if C == 1 {
                let [acc0, acc1] = &mut acc;
                let [off0, off1] = &mut off;
                while ui + 1 < units {
                    legacy_unit::<B, C>(row, ui, codes, dx, sx32, groups, c0, acc0, off0);
                    legacy_unit::<B, C>(row, ui + 1, codes, dx, sx32, groups, c0, acc1, off1);
                    ui += 2;
                }
            }
            while ui < units {
                legacy_unit::<B, C>(
                    row,
                    ui,
                    codes,
                    dx,
                    sx32,
                    groups,
                    c0,
                    &mut acc[0],
                    &mut off[0],
                );
                ui += 1;
            }
            for j in 0..C {
                s[c0 + j] +=
                    hsum_f32(_mm256_add_ps(acc[0][j], acc[1][j])) + (off[0][j] + off[1][j]);
            }
        }
    }

    /// Whether the CPU has the 512-bit integer forms [`legacy_row512`]
    /// takes (AVX-512 F, BW and VL).
    pub(super) fn has_avx512bw() -> bool {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vl")
    }

    /// Whether [`legacy_row512`] takes one row of x for `B`: every legacy
    /// format but Q5_0, whose row ran slower in it (4096 x 14336, 2 threads
    /// of a Zen 5: 1.56-1.67 -> 1.73-1.76 ms).
    pub(super) fn legacy_pairs512<B: QuantBlock>() -> bool {
        legacy_format::<B>() && B::GGML_TYPE != 6
    }

    /// [`legacy_rows`] for one row of x (`m` = 1), two units at a time in
    /// 512-bit vectors: the units are decoded as there, then one sign,
    /// multiply-add, conversion and scaling serve both (Zen 5 runs them at
    /// full width; 4096 x 14336, 2 threads, ms: Q4_0 1.21 -> 0.93-0.95,
    /// Q4_1 1.34-1.39 -> 1.03-1.05, IQ4_XS 1.58-1.59 -> 1.26-1.28, MXFP4
    /// 1.04-1.06 -> 0.85-0.89; Q8_0, at the memory's rate, level).
    ///
    /// # Safety
    /// The CPU has AVX2, FMA, F16C and AVX-512 F, BW and VL; `B` is a
    /// legacy format.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
    pub(super) unsafe fn legacy_row512<B: QuantBlock + bytemuck::Pod>(
        sums: &mut [f32],
        w: &[B],
        codes: &[[u32; 4]],
        dx: &[[f32; 8]],
        sx32: &[f32],
        k: usize,
    ) {
        let per_row = k / B::ELEMS;
        let subs = B::ELEMS / 32;
        let units = per_row * subs;
        let unsigned = legacy_has_min::<B>();
        let ones = _mm512_set1_epi16(1);
        let zero = _mm512_setzero_si512();
        for (s, row) in sums.iter_mut().zip(w.chunks_exact(per_row)) {
            let mut acc = [_mm512_setzero_ps(); 2];
            let mut off = [0.0f32; 2];
            let mut ui = 0;
            while ui + 1 < units {
                let (b0, sub0) = (&row[ui / subs], ui % subs);
                let (b1, sub1) = (&row[(ui + 1) / subs], (ui + 1) % subs);
                if sub0 == 0 {
                    prefetch_ahead(b0);
                }
                if sub1 == 0 {
                    prefetch_ahead(b1);
                }
                let (q0, d0, min0) = legacy_codes::<B>(bytemuck::bytes_of(b0), sub0);
                let (q1, d1, min1) = legacy_codes::<B>(bytemuck::bytes_of(b1), sub1);
                let q = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(q0), q1);
                let g = 2 * ui;
                debug_assert!(g + 3 < codes.len() && g / 2 + 1 < dx.len());
                // SAFETY: groups g..g + 4 < codes.len() (units ui, ui + 1);
                // unaligned loads.
                let xv = unsafe { _mm512_loadu_si512(codes.as_ptr().add(g).cast()) };
                let scales = unsafe { _mm512_loadu_ps(dx.as_ptr().add(g / 2).cast()) };
                // |w| against x signed like w (x where w is 0 meets a 0).
                let (wv, xs) = if unsigned {
                    (q, xv)
                } else {
                    let negative = _mm512_movepi8_mask(q);
                    (
                        _mm512_abs_epi8(q),
                        _mm512_mask_sub_epi8(xv, negative, zero, xv),
                    )
                };
                let p = _mm512_madd_epi16(_mm512_maddubs_epi16(wv, xs), ones);
                let dv = _mm512_castpd_ps(_mm512_insertf64x4::<1>(
                    _mm512_castps_pd(_mm512_castps256_ps512(_mm256_set1_ps(d0))),
                    _mm256_castps_pd(_mm256_set1_ps(d1)),
                ));
                let scaled = _mm512_mul_ps(_mm512_cvtepi32_ps(p), scales);
                acc[0] = _mm512_fmadd_ps(scaled, dv, acc[0]);
                if unsigned {
                    // SAFETY: g / 2 + 1 < sx32.len() (units ui, ui + 1).
                    let (sx0, sx1) =
                        unsafe { (*sx32.get_unchecked(g / 2), *sx32.get_unchecked(g / 2 + 1)) };
                    off[0] = min1.mul_add(sx1, min0.mul_add(sx0, off[0]));
                }
                acc.swap(0, 1);
                off.swap(0, 1);
                ui += 2;
            }
            let mut tail = [_mm256_setzero_ps()];
            let mut tail_off = [0.0f32];
            if ui < units {
                legacy_unit::<B, 1>(
                    row,
                    ui,
                    codes,
                    dx,
                    sx32,
                    k / 16,
                    0,
                    &mut tail,
                    &mut tail_off,
                );
            }
            let wide = _mm512_add_ps(acc[0], acc[1]);
            let halves = _mm256_add_ps(
                _mm512_castps512_ps256(wide),
                _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(wide))),
            );
            *s += hsum_f32(_mm256_add_ps(halves, tail[0])) + (off[0] + off[1] + tail_off[0]);
        }
    }

    /// Unit `ui` of weight row `row` into the sums `acc` (and `off`, the
    /// minimums' terms) of x's rows `c0..c0 + C`, as [`legacy_rows`].
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    #[allow(clippy::too_many_arguments)]
    fn legacy_unit<B: QuantBlock + bytemuck::Pod, const C: usize>(
        row: &[B],
        ui: usize,
        codes: &[[u32; 4]],
        dx: &[[f32; 8]],
        sx32: &[f32],
        groups: usize,
        c0: usize,
        acc: &mut [__m256; C],
        off: &mut [f32; C],
    ) {
        let subs = B::ELEMS / 32;
        let (b, sub) = (&row[ui / subs], ui % subs);
        if sub == 0 {
            prefetch_ahead(b);
        }
        let unsigned = legacy_has_min::<B>();
        let (q, d, min) = legacy_codes::<B>(bytemuck::bytes_of(b), sub);
        // `vpmaddubsw` takes one unsigned operand: |w| against x signed
        // like w, or the unsigned codes as they are.
        let wv = if unsigned { q } else { _mm256_sign_epi8(q, q) };
        let dv = _mm256_set1_ps(d);
        let ones = _mm256_set1_epi16(1);
        for (j, sum) in acc.iter_mut().enumerate() {
            let g = (c0 + j) * groups + 2 * ui;
            debug_assert!(g + 1 < codes.len());
            // SAFETY: groups g, g + 1 < m * groups = codes.len().
            let xv = unsafe { _mm256_loadu_si256(codes.as_ptr().add(g).cast()) };
            let xs = if unsigned {
                xv
            } else {
                _mm256_sign_epi8(xv, q)
            };
            let p = _mm256_madd_epi16(_mm256_maddubs_epi16(wv, xs), ones);
            let scaled = _mm256_mul_ps(_mm256_cvtepi32_ps(p), pair_scales(dx, g));
            *sum = _mm256_fmadd_ps(scaled, dv, *sum);
            if unsigned {
                // SAFETY: g / 2 < m * groups / 2 = sx32.len().
                let sx = unsafe { *sx32.get_unchecked(g / 2) };
                off[j] = min.mul_add(sx, off[j]);
            }
        }
    }

    /// `sums[r, c] += w_r · x_c` for Q6_K rows `w` and `m` rows of x in
    /// 8-bit form, each super-block decoded once for the rows of x a pass
    /// takes (8, 4, 2 or 1), one 32-byte chunk of its 6-bit codes
    /// (unsigned, 0..63) at a time: `vpmaddubsw` against x's two groups of
    /// 16 and `vpmaddwd` with the groups' integer scales, x's group scales
    /// `dx` in f32 vectors and `d` once a super-block; the codes' `-32`
    /// against x's group sums `sx` (`sc_g sx_g`, eight lanes at a time).
    ///
    /// # Safety
    /// The CPU has AVX2, FMA and F16C; `B` is Q6_K.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn q6k_rows<B: QuantBlock + bytemuck::Pod>(
        sums: &mut [f32],
        w: &[B],
        codes: &[[u32; 4]],
        dx: &[[f32; 8]],
        sx: &[f32],
        k: usize,
        m: usize,
    ) {
        in_passes!(m, q6k_pass::<B>(sums, w, codes, dx, sx, k, m));
    }

    /// Columns `c0..c0 + C` of every weight row, as [`q6k_rows`].
    #[target_feature(enable = "avx2,fma,f16c")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn q6k_pass<B: QuantBlock + bytemuck::Pod, const C: usize>(
        sums: &mut [f32],
        w: &[B],
        codes: &[[u32; 4]],
        dx: &[[f32; 8]],
        sx: &[f32],
        k: usize,
        m: usize,
        c0: usize,
    ) {
        let per_row = k / QK_K;
        let groups = k / 16;
        let low4 = _mm256_set1_epi8(0x0F);
        let top2 = _mm256_set1_epi8(0x30);
        for (s, row) in sums.chunks_exact_mut(m).zip(w.chunks_exact(per_row)) {
            let mut acc = [_mm256_setzero_ps(); C];
            for (bi, b) in row.iter().enumerate() {
                prefetch_ahead(b);
                let b: &BlockQ6K = bytemuck::cast_ref(b);
                let d = f16_to_f32(b.d.0);
                // Each chunk's two group scales as 16-bit lanes (group 2 ci
                // in the low half, 2 ci + 1 in the high), and all sixteen
                // times -32 in f32 (the codes' offset, against x's group
                // sums).
                // SAFETY: 16 bytes of scales; unaligned load.
                let s16 = unsafe { _mm_loadu_si128(b.scales.as_ptr().cast()) };
                let w16 = _mm256_cvtepi8_epi16(s16);
                let halves = [
                    _mm256_permute2x128_si256::<0x00>(w16, w16),
                    _mm256_permute2x128_si256::<0x11>(w16, w16),
                ];
                let off = q6k_offsets(s16);
                let mut bacc: [__m256; C] = std::array::from_fn(|j| {
                    let g0 = (c0 + j) * groups + 16 * bi;
                    // SAFETY: sixteen sums from g0 < m * groups = sx.len().
                    unsafe {
                        let sxv = sx.as_ptr().add(g0);
                        _mm256_fmadd_ps(
                            off[1],
                            _mm256_loadu_ps(sxv.add(8)),
                            _mm256_mul_ps(off[0], _mm256_loadu_ps(sxv)),
                        )
                    }
                });
                // Chunk 4 h + i: elements 128 h + 32 i .. + 32, groups
                // 8 h + 2 i and the next, whose scales they take; its low
                // four bits a nibble of ql[64 h + 32 (i % 2) + l] (the high
                // one for i >= 2), its top two bits 2 i of qh[32 h + l].
                // Decoded one at a time, into the sums of every row of x.
                for ci in 0..8 {
                    let (h, i) = (ci / 4, ci % 4);
                    // SAFETY: 32-byte unaligned loads inside ql (128 bytes)
                    // and qh (64).
                    let (l, hb) = unsafe {
                        (
                            _mm256_loadu_si256(b.ql.as_ptr().add(64 * h + 32 * (i % 2)).cast()),
                            _mm256_loadu_si256(b.qh.as_ptr().add(32 * h).cast()),
                        )
                    };
                    let low = if i < 2 { l } else { _mm256_srli_epi16::<4>(l) };
                    let qc = _mm256_or_si256(
                        _mm256_and_si256(low, low4),
                        _mm256_and_si256(bits_to_4(hb, 2 * i), top2),
                    );
                    let pick = (4 * i as i16 + 3) << 8 | (4 * i as i16 + 2);
                    let scv = _mm256_shuffle_epi8(
                        halves[h],
                        _mm256_set_m128i(_mm_set1_epi16(pick), _mm_set1_epi16(pick - 0x0202)),
                    );
                    for (j, bacc) in bacc.iter_mut().enumerate() {
                        let g = (c0 + j) * groups + 16 * bi + 2 * ci;
                        // SAFETY: groups g, g + 1 < m * groups = codes.len().
                        let xv = unsafe { _mm256_loadu_si256(codes.as_ptr().add(g).cast()) };
                        let p = _mm256_madd_epi16(_mm256_maddubs_epi16(qc, xv), scv);
                        *bacc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), pair_scales(dx, g), *bacc);
                    }
                }
                let dv = _mm256_set1_ps(d);
                for (acc, bacc) in acc.iter_mut().zip(bacc) {
                    *acc = _mm256_fmadd_ps(bacc, dv, *acc);
                }
            }
            for j in 0..C {
                s[c0 + j] += hsum_f32(acc[j]);
            }
        }
    }

    /// A Q6_K block's sixteen group scales (`s16`, i8) times -32, groups
    /// 0..8 and 8..16: the codes' offset, against x's group sums.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn q6k_offsets(s16: __m128i) -> [__m256; 2] {
        let m32 = _mm256_set1_ps(-32.0);
        [
            _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(s16)), m32),
            _mm256_mul_ps(
                _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(s16, 8))),
                m32,
            ),
        ]
    }

    /// [`q6k_rows`] for one row of x (`m` = 1): two chunks of codes (64
    /// elements, one 64-byte load of ql) in one 512-bit vector against x's
    /// four groups, so one multiply-add, conversion and scaling serve both.
    ///
    /// # Safety
    /// The CPU has AVX2, FMA, F16C and AVX-512 F, BW and VL; `B` is Q6_K.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
    pub(super) unsafe fn q6k_row512<B: QuantBlock + bytemuck::Pod>(
        sums: &mut [f32],
        w: &[B],
        codes: &[[u32; 4]],
        dx: &[[f32; 8]],
        sx: &[f32],
        k: usize,
    ) {
        let per_row = k / QK_K;
        let low4 = _mm512_set1_epi8(0x0F);
        let top2 = _mm512_set1_epi8(0x30);
        // Chunk i's two group scales (16-bit lanes of its half's eight).
        let pat = |i: usize| {
            let pick = (4 * i as i16 + 3) << 8 | (4 * i as i16 + 2);
            _mm256_set_m128i(_mm_set1_epi16(pick), _mm_set1_epi16(pick - 0x0202))
        };
        let join = |a: __m256i, b: __m256i| _mm512_inserti64x4::<1>(_mm512_castsi256_si512(a), b);
        for (s, row) in sums.iter_mut().zip(w.chunks_exact(per_row)) {
            let mut acc = _mm256_setzero_ps();
            for (bi, b) in row.iter().enumerate() {
                prefetch_ahead(b);
                let b: &BlockQ6K = bytemuck::cast_ref(b);
                let d = f16_to_f32(b.d.0);
                // SAFETY: 16 bytes of scales; unaligned load.
                let s16 = unsafe { _mm_loadu_si128(b.scales.as_ptr().cast()) };
                let w16 = _mm256_cvtepi8_epi16(s16);
                let halves = [
                    _mm512_broadcast_i64x4(_mm256_permute2x128_si256::<0x00>(w16, w16)),
                    _mm512_broadcast_i64x4(_mm256_permute2x128_si256::<0x11>(w16, w16)),
                ];
                let g0 = 16 * bi;
                debug_assert!(g0 + 15 < codes.len() && g0 + 15 < sx.len());
                // SAFETY: sixteen group sums from g0 (the block's groups).
                let [off0, off1] = q6k_offsets(s16);
                let offs = unsafe {
                    let sxv = sx.as_ptr().add(g0);
                    _mm256_fmadd_ps(
                        off1,
                        _mm256_loadu_ps(sxv.add(8)),
                        _mm256_mul_ps(off0, _mm256_loadu_ps(sxv)),
                    )
                };
                let mut bacc = _mm512_setzero_ps();
                // Chunks 4 h + i and 4 h + i + 1 (i = 0, 2): ql bytes 64 h
                // .. + 64 (the high nibbles for i = 2), qh bit pairs 2 i and
                // 2 i + 2 of qh[32 h ..].
                for (h, half) in halves.iter().enumerate() {
                    // SAFETY: 64- and 32-byte unaligned loads inside ql (128
                    // bytes) and qh (64).
                    let (l, hb) = unsafe {
                        (
                            _mm512_loadu_si512(b.ql.as_ptr().add(64 * h).cast()),
                            _mm256_loadu_si256(b.qh.as_ptr().add(32 * h).cast()),
                        )
                    };
                    for i in [0, 2] {
                        let low = if i == 0 { l } else { _mm512_srli_epi16::<4>(l) };
                        let qc = _mm512_or_si512(
                            _mm512_and_si512(low, low4),
                            _mm512_and_si512(
                                join(bits_to_4(hb, 2 * i), bits_to_4(hb, 2 * i + 2)),
                                top2,
                            ),
                        );
                        let scv = _mm512_shuffle_epi8(*half, join(pat(i), pat(i + 1)));
                        let g = g0 + 2 * (4 * h + i);
                        // SAFETY: groups g..g + 4 and their pair scales
                        // (the block's chunks); unaligned loads.
                        let (xv, dxs) = unsafe {
                            (
                                _mm512_loadu_si512(codes.as_ptr().add(g).cast()),
                                _mm512_loadu_ps(dx.as_ptr().add(g / 2).cast()),
                            )
                        };
                        let p = _mm512_madd_epi16(_mm512_maddubs_epi16(qc, xv), scv);
                        bacc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), dxs, bacc);
                    }
                }
                let folded = _mm256_add_ps(
                    _mm512_castps512_ps256(bacc),
                    _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(bacc))),
                );
                acc = _mm256_fmadd_ps(_mm256_add_ps(folded, offs), _mm256_set1_ps(d), acc);
            }
            *s += hsum_f32(acc);
        }
    }

    /// `sums[r, c] += w_r · x_c` for Q2_K or Q3_K rows `w` and `m` rows of
    /// x in 8-bit form, each super-block decoded once for the rows of x a
    /// pass takes (8, 4, 2 or 1), one unit of 32 codes at a time: the two
    /// bits `2 j` of 32 bytes of `qs` (Q3_K: and bit `4 h + j` of `hmask` as
    /// the third), unsigned, into `vpmaddubsw` against x's two groups of 16
    /// and `vpmaddwd` with the groups' integer scales; x's group scales `dx`
    /// in f32 vectors and `d` once a super-block; the offsets (Q2_K's
    /// `-dmin m_g`, Q3_K's `-4 d sc_g`) against x's group sums `sx`, eight
    /// lanes at a time.
    ///
    /// # Safety
    /// The CPU has AVX2, FMA and F16C; `B` is Q2_K or Q3_K.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn k23_rows<B: QuantBlock + bytemuck::Pod>(
        sums: &mut [f32],
        w: &[B],
        codes: &[[u32; 4]],
        dx: &[[f32; 8]],
        sx: &[f32],
        k: usize,
        m: usize,
    ) {
        in_passes!(m, k23_pass::<B>(sums, w, codes, dx, sx, k, m));
    }

    /// Columns `c0..c0 + C` of every weight row, as [`k23_rows`].
    #[target_feature(enable = "avx2,fma,f16c")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn k23_pass<B: QuantBlock + bytemuck::Pod, const C: usize>(
        sums: &mut [f32],
        w: &[B],
        codes: &[[u32; 4]],
        dx: &[[f32; 8]],
        sx: &[f32],
        k: usize,
        m: usize,
        c0: usize,
    ) {
        let per_row = k / QK_K;
        let groups = k / 16;
        let q3 = B::GGML_TYPE == 11;
        let two = _mm256_set1_epi8(3);
        let one = _mm256_set1_epi8(1);
        for (s, row) in sums.chunks_exact_mut(m).zip(w.chunks_exact(per_row)) {
            let mut acc = [_mm256_setzero_ps(); C];
            for (bi, b) in row.iter().enumerate() {
                prefetch_ahead(b);
                // The sixteen groups' integer scales, the offsets' factors
                // (f32, applied to x's group sums), `d`, and the 64 bytes of
                // two-bit codes and (Q3_K) the 32 of third bits.
                let mut sc = [0i16; 16];
                let mut off = [0.0f32; 16];
                let (d, qs, hmask) = if q3 {
                    let b: &BlockQ3K = bytemuck::cast_ref(b);
                    let d = f16_to_f32(b.d.0);
                    for (g, v) in q3k_scales(&b.scales).into_iter().enumerate() {
                        sc[g] = v as i16;
                        off[g] = -4.0 * d * v as f32;
                    }
                    (d, &b.qs, Some(&b.hmask))
                } else {
                    let b: &BlockQ2K = bytemuck::cast_ref(b);
                    let dmin = f16_to_f32(b.dmin.0);
                    for g in 0..16 {
                        sc[g] = (b.scales[g] & 0xF) as i16;
                        off[g] = -dmin * (b.scales[g] >> 4) as f32;
                    }
                    (f16_to_f32(b.d.0), &b.qs, None)
                };
                // SAFETY: sixteen f32s; unaligned loads.
                let offv = unsafe {
                    [
                        _mm256_loadu_ps(off.as_ptr()),
                        _mm256_loadu_ps(off.as_ptr().add(8)),
                    ]
                };
                for (j, acc) in acc.iter_mut().enumerate() {
                    let g0 = (c0 + j) * groups + 16 * bi;
                    // SAFETY: sixteen sums from g0 < m * groups = sx.len().
                    unsafe {
                        let sxv = sx.as_ptr().add(g0);
                        *acc = _mm256_fmadd_ps(offv[0], _mm256_loadu_ps(sxv), *acc);
                        *acc = _mm256_fmadd_ps(offv[1], _mm256_loadu_ps(sxv.add(8)), *acc);
                    }
                }
                let mut bacc = [_mm256_setzero_ps(); C];
                // Unit 4 h + i: elements 128 h + 32 i .. + 32 (groups
                // 8 h + 2 i and the next), bits 2 i of qs[32 h + l] and
                // (Q3_K) bit 4 h + i of hmask[l].
                for u in 0..8 {
                    let (h, i) = (u / 4, u % 4);
                    // SAFETY: 32-byte unaligned loads inside qs (64 bytes)
                    // and hmask (32).
                    let raw = unsafe { _mm256_loadu_si256(qs.as_ptr().add(32 * h).cast()) };
                    let mut qc = _mm256_and_si256(
                        _mm256_srl_epi16(raw, _mm_cvtsi32_si128(2 * i as i32)),
                        two,
                    );
                    if let Some(hm) = hmask {
                        // SAFETY: as above.
                        let hb = unsafe { _mm256_loadu_si256(hm.as_ptr().cast()) };
                        let bit = _mm256_and_si256(
                            _mm256_srl_epi16(hb, _mm_cvtsi32_si128((4 * h + i) as i32)),
                            one,
                        );
                        qc = _mm256_or_si256(qc, _mm256_slli_epi16::<2>(bit));
                    }
                    let scv =
                        _mm256_set_m128i(_mm_set1_epi16(sc[2 * u + 1]), _mm_set1_epi16(sc[2 * u]));
                    for (j, bacc) in bacc.iter_mut().enumerate() {
                        let g = (c0 + j) * groups + 16 * bi + 2 * u;
                        // SAFETY: groups g, g + 1 < m * groups = codes.len().
                        let xv = unsafe { _mm256_loadu_si256(codes.as_ptr().add(g).cast()) };
                        let p = _mm256_madd_epi16(_mm256_maddubs_epi16(qc, xv), scv);
                        *bacc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), pair_scales(dx, g), *bacc);
                    }
                }
                let dv = _mm256_set1_ps(d);
                for (acc, bacc) in acc.iter_mut().zip(bacc) {
                    *acc = _mm256_fmadd_ps(bacc, dv, *acc);
                }
            }
            for j in 0..C {
                s[c0 + j] += hsum_f32(acc[j]);
            }
        }
    }

    /// Q3_K's twelve packed scale bytes as its sixteen 6-bit scales less 32
    /// (`q3k_scale` of each group, all at once): the low four bits of group
    /// `g` a nibble of byte `g % 8` (low for `g < 8`), the high two bits
    /// `2 (g / 4)` of byte `8 + g % 4`.
    #[inline]
    fn q3k_scales(q: &[u8; 12]) -> [i8; 16] {
        let low = u64::from_le_bytes(q[..8].try_into().expect("8 bytes"));
        let high = u32::from_le_bytes(q[8..].try_into().expect("4 bytes")) as u64;
        let (four, two) = (0x0f0f_0f0f_0f0f_0f0fu64, 0x0303_0303u64);
        let high_0_7 = (high & two) | ((high >> 2) & two) << 32;
        let high_8_15 = ((high >> 4) & two) | ((high >> 6) & two) << 32;
        let a = (low & four) | high_0_7 << 4;
        let b = ((low >> 4) & four) | high_8_15 << 4;
        let mut out = [0i8; 16];
        for (i, byte) in a
            .to_le_bytes()
            .into_iter()
            .chain(b.to_le_bytes())
            .enumerate()
        {
            out[i] = byte as i8 - 32;
        }
        out
    }

    /// The 16 x 16 matrix whose rows are `r` transposed: element `e` of
    /// output `e'` is element `e'` of row `e`.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn transpose16(r: [__m512; 16]) -> [__m512; 16] {
        // Pairs of rows interleaved, then quads (each 128-bit lane j holds
        // elements 4 j .. 4 j + 4), then the lanes gathered.
        let t: [__m512; 16] = std::array::from_fn(|i| {
            let (a, b) = (r[2 * (i / 2)], r[2 * (i / 2) + 1]);
            if i % 2 == 0 {
                _mm512_unpacklo_ps(a, b)
            } else {
                _mm512_unpackhi_ps(a, b)
            }
        });
        // u[4 q + c]: rows 4 q .. 4 q + 4 of element 4 j + c in lane j.
        let u: [__m512; 16] = std::array::from_fn(|i| {
            let (q, c) = (i / 4, i % 4);
            let (a, b) = (
                _mm512_castps_pd(t[4 * q + c / 2]),
                _mm512_castps_pd(t[4 * q + 2 + c / 2]),
            );
            _mm512_castpd_ps(if c % 2 == 0 {
                _mm512_unpacklo_pd(a, b)
            } else {
                _mm512_unpackhi_pd(a, b)
            })
        });
        let mut out = [_mm512_setzero_ps(); 16];
        for c in 0..4 {
            let v0 = _mm512_shuffle_f32x4::<0x88>(u[c], u[4 + c]);
            let w0 = _mm512_shuffle_f32x4::<0xDD>(u[c], u[4 + c]);
            let v1 = _mm512_shuffle_f32x4::<0x88>(u[8 + c], u[12 + c]);
            let w1 = _mm512_shuffle_f32x4::<0xDD>(u[8 + c], u[12 + c]);
            out[c] = _mm512_shuffle_f32x4::<0x88>(v0, v1);
            out[8 + c] = _mm512_shuffle_f32x4::<0xDD>(v0, v1);
            out[4 + c] = _mm512_shuffle_f32x4::<0x88>(w0, w1);
            out[12 + c] = _mm512_shuffle_f32x4::<0xDD>(w0, w1);
        }
        out
    }

    /// Fills the first `16 * (rows / 16)` rows of a prefill panel
    /// (`[k, rows]`: element `e` of weight row `r` at `e * rows + r`) from
    /// their blocks (`rows` rows of `per_row` blocks) and returns how many:
    /// each unit of 16 rows decoded from [`QuantBlock::unit8`]'s wide loads
    /// into 512-bit vectors of values ([`unit_half`]'s products, to the
    /// bit), then transposed so that each element's 16 rows go out in one
    /// store.
    ///
    /// # Safety
    /// The CPU has AVX-512 F; `blocks` lies in a 16-byte aligned array (a
    /// Cpu buffer); `panel` holds `rows * per_row * B::ELEMS` values.
    ///
    /// [`unit_half`]: ferrocm_kernels::quant::blocks::unit_half
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn fill_panel512<B: QuantBlock>(
        panel: &mut [f32],
        blocks: &[B],
        per_row: usize,
        rows: usize,
    ) -> usize {
        let tiles = rows / 16;
        assert!(panel.len() >= rows * per_row * B::ELEMS && blocks.len() >= rows * per_row);
        let bias = _mm512_set1_epi32(B::UNIT_BIAS);
        for bi in 0..per_row {
            for tile in 0..tiles {
                let rb = 16 * tile;
                for u in 0..B::UNITS {
                    let mut v = [[_mm512_setzero_ps(); 16]; 2];
                    let mut groups = [0u32; 2];
                    for r in 0..16 {
                        // SAFETY: a Cpu buffer's blocks (the caller's promise).
                        let x = unsafe { blocks[(rb + r) * per_row + bi].unit8(u) };
                        groups = x.group;
                        for (h, v) in v.iter_mut().enumerate() {
                            // SAFETY: 16 bytes of the unit's 32; unaligned.
                            let bytes =
                                unsafe { _mm_loadu_si128(x.codes.as_ptr().add(4 * h).cast()) };
                            let c = _mm512_sub_epi32(_mm512_cvtepi8_epi32(bytes), bias);
                            let mut val =
                                _mm512_mul_ps(_mm512_cvtepi32_ps(c), _mm512_set1_ps(x.scale[h]));
                            if B::UNIT_HAS_MIN {
                                val = _mm512_add_ps(val, _mm512_set1_ps(x.offset[h]));
                            }
                            v[r] = val;
                        }
                    }
                    for (h, v) in v.into_iter().enumerate() {
                        let e0 = bi * B::ELEMS + 16 * groups[h] as usize;
                        for (e, col) in transpose16(v).into_iter().enumerate() {
                            // SAFETY: (e0 + e) * rows + rb + 16 <= rows *
                            // per_row * ELEMS <= panel.len() (asserted).
                            unsafe {
                                _mm512_storeu_ps(panel.as_mut_ptr().add((e0 + e) * rows + rb), col)
                            };
                        }
                    }
                }
            }
        }
        16 * tiles
    }

    #[test]
    fn transpose16_transposes() {
        if !std::arch::is_x86_feature_detected!("avx512f") {
            eprintln!("skipping: no AVX-512 F");
            return;
        }
        let m: Vec<f32> = (0..256).map(|i| i as f32).collect();
        // SAFETY: AVX-512 F (checked); 16-float unaligned loads and stores.
        unsafe {
            let rows: [__m512; 16] =
                std::array::from_fn(|r| _mm512_loadu_ps(m.as_ptr().add(16 * r)));
            let cols = transpose16(rows);
            for (e, c) in cols.iter().enumerate() {
                let mut got = [0.0f32; 16];
                _mm512_storeu_ps(got.as_mut_ptr(), *c);
                for (r, g) in got.iter().enumerate() {
                    assert_eq!(*g, m[16 * r + e], "column {e}, row {r}");
                }
            }
        }
    }

    #[test]
    fn q3k_scales_match_each_groups_definition() {
        let mut q = [0u8; 12];
        for seed in 0..64u32 {
            for (i, b) in q.iter_mut().enumerate() {
                *b = (seed.wrapping_mul(2_654_435_761) >> (i % 24)) as u8
                    ^ (37u8.wrapping_mul(i as u8));
            }
            q[(seed % 12) as usize] = if seed % 2 == 0 { 0xFF } else { 0 };
            let all = q3k_scales(&q);
            for (g, &v) in all.iter().enumerate() {
                assert_eq!(
                    v as i32,
                    ferrocm_kernels::quant::blocks::q3k_scale(g, &q),
                    "{q:?} {g}"
                );
            }
        }
    }

    /// Q4_K's and Q5_K's twelve packed scale bytes as eight 6-bit scales
    /// and eight 6-bit minimums, one per byte (what `k4_scale_min` gives
    /// for each sub-block, all eight at once): sub-blocks 0..4 are the low
    /// six bits of bytes 0..4 and 4..8; sub-blocks 4..8 take a nibble of
    /// bytes 8..12 (low for the scale, high for the minimum) under the top
    /// two bits of bytes 0..4 (scale) or 4..8 (minimum).
    #[inline]
    fn k4_scales_mins(q: &[u8; 12]) -> (u64, u64) {
        let word =
            |i: usize| u32::from_le_bytes([q[4 * i], q[4 * i + 1], q[4 * i + 2], q[4 * i + 3]]);
        let (a, b, c) = (word(0), word(1), word(2));
        let (six, four, two) = (0x3f3f_3f3f, 0x0f0f_0f0f, 0x0303_0303);
        let scales_hi = (c & four) | (((a >> 6) & two) << 4);
        let mins_hi = ((c >> 4) & four) | (((b >> 6) & two) << 4);
        (
            (a & six) as u64 | (scales_hi as u64) << 32,
            (b & six) as u64 | (mins_hi as u64) << 32,
        )
    }

    /// Bit `b` of each byte of `h` (and the bits above it) moved to bit 4,
    /// the other bits the caller's to mask: Q5_K's fifth bit of sub-block
    /// `b`, and Q6_K's top two bits of chunk `i` (bits `2 i`, `2 i + 1` to
    /// 4 and 5). A shift of the 16-bit lanes by at most four moves no bit
    /// that lands on bit 4 or 5 across a byte.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn bits_to_4(h: __m256i, b: usize) -> __m256i {
        match b {
            0 => _mm256_slli_epi16::<4>(h),
            1 => _mm256_slli_epi16::<3>(h),
            2 => _mm256_slli_epi16::<2>(h),
            3 => _mm256_slli_epi16::<1>(h),
            4 => h,
            5 => _mm256_srli_epi16::<1>(h),
            6 => _mm256_srli_epi16::<2>(h),
            _ => _mm256_srli_epi16::<3>(h),
        }
    }

    /// An f16's value (F16C's conversion).
    #[inline]
    #[target_feature(enable = "f16c")]
    fn f16_to_f32(bits: u16) -> f32 {
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
    }

    /// Whether `B` takes [`superblock_rows`]: Q4_K and Q5_K.
    pub(super) fn superblock_format<B: QuantBlock>() -> bool {
        matches!(B::GGML_TYPE, 12 | 13)
    }

    /// What both Q4_K/Q5_K row functions take from a super-block before
    /// its sub-blocks: `d`, the eight sub-block scales as 16-bit lanes, the
    /// eight minimums times `-dmin / d` (against x's sums over each
    /// sub-block; `d` multiplies the whole sum), the codes and Q5_K's fifth
    /// bits.
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    #[allow(clippy::type_complexity)]
    fn superblock_head<B: QuantBlock + bytemuck::Pod>(
        b: &B,
    ) -> (f32, __m128i, __m256, &[u8; 128], Option<&[u8; 32]>) {
        let (d, dmin, scales, qs, qh) = if B::GGML_TYPE == 12 {
            let b: &BlockQ4K = bytemuck::cast_ref(b);
            (b.d, b.dmin, &b.scales, &b.qs, None)
        } else {
            let b: &BlockQ5K = bytemuck::cast_ref(b);
            (b.d, b.dmin, &b.scales, &b.qs, Some(&b.qh))
        };
        let (d, dmin) = (f16_to_f32(d.0), f16_to_f32(dmin.0));
        let (sc8, mn8) = k4_scales_mins(scales);
        let minv = _mm256_mul_ps(
            _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(mn8 as i64))),
            _mm256_set1_ps(-dmin / d),
        );
        (
            d,
            _mm_cvtepu8_epi16(_mm_cvtsi64_si128(sc8 as i64)),
            minv,
            qs,
            qh,
        )
    }

    /// `sums[r, c] += w_r · x_c` for the Q4_K or Q5_K rows `w` and `m` rows
    /// of x in 8-bit form (`codes`, each pair of groups' scales `dx` as
    /// `pair_scales` takes them, x's sum over each 32 elements `sx32`),
    /// each super-block's scales decoded once (eight scales and eight
    /// minimums from the twelve bytes in a few word operations, the scales
    /// as 16-bit lanes) and its sub-blocks one at a time, each into every
    /// row of x a pass takes (8, 4, 2 or 1): the codes' products summed in
    /// i32 with the integer sub-block scale, x's group scales in f32
    /// vectors, one multiply by the super-block's scale, and the eight
    /// minimums against `sx32` in one vector, as GGML's CPU dot products
    /// go.
    ///
    /// # Safety
    /// The CPU has AVX2, FMA and F16C; `B` is one of the two formats.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn superblock_rows<B: QuantBlock + bytemuck::Pod>(
        sums: &mut [f32],
        w: &[B],
        codes: &[[u32; 4]],
        dx: &[[f32; 8]],
        sx32: &[f32],
        k: usize,
        m: usize,
    ) {
        in_passes!(m, superblock_pass::<B>(sums, w, codes, dx, sx32, k, m));
    }

    /// Columns `c0..c0 + C` of every weight row, as [`superblock_rows`].
    #[target_feature(enable = "avx2,fma,f16c")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn superblock_pass<B: QuantBlock + bytemuck::Pod, const C: usize>(
        sums: &mut [f32],
        w: &[B],
        codes: &[[u32; 4]],
        dx: &[[f32; 8]],
        sx32: &[f32],
        k: usize,
        m: usize,
        c0: usize,
    ) {
        let per_row = k / QK_K;
        let groups = k / 16;
        let low4 = _mm256_set1_epi8(0x0F);
        let sixteen = _mm256_set1_epi8(16);
        for (s, row) in sums.chunks_exact_mut(m).zip(w.chunks_exact(per_row)) {
            let mut acc = [_mm256_setzero_ps(); C];
            for (bi, b) in row.iter().enumerate() {
                prefetch_ahead(b);
                // Sub-block j: elements 32 j .. + 32, x's groups 2 j and
                // 2 j + 1; its codes (the fifth bit of Q5_K's is bit j of
                // qh[l]), its scale in 16-bit lanes, its minimum times
                // -dmin / d (d multiplies the whole sum) against x's sum
                // over the sub-block.
                let (d, scales8, minv, qs, qh) = superblock_head(b);
                // The eight scales as 16-bit lanes in both halves (each
                // sub-block's broadcast to all sixteen by a shuffle).
                let sc16 = _mm256_broadcastsi128_si256(scales8);
                let mut bacc: [__m256; C] = std::array::from_fn(|j| {
                    let g0 = (c0 + j) * groups + 16 * bi;
                    // SAFETY: eight sums from g0 / 2 < m * groups / 2 =
                    // sx32.len().
                    _mm256_mul_ps(minv, unsafe { _mm256_loadu_ps(sx32.as_ptr().add(g0 / 2)) })
                });
                // SAFETY: a 32-byte unaligned load inside qh (32 bytes).
                let high = qh.map(|h| unsafe { _mm256_loadu_si256(h.as_ptr().cast()) });
                // Decoded one sub-block at a time, into the sums of every
                // row of x.
                for sb in 0..8 {
                    // SAFETY: a 32-byte unaligned load inside qs (128 bytes).
                    let v = unsafe { _mm256_loadu_si256(qs.as_ptr().add(32 * (sb / 2)).cast()) };
                    let v = if sb % 2 == 0 {
                        v
                    } else {
                        _mm256_srli_epi16::<4>(v)
                    };
                    let mut qc = _mm256_and_si256(v, low4);
                    if let Some(h) = high {
                        qc = _mm256_or_si256(qc, _mm256_and_si256(bits_to_4(h, sb), sixteen));
                    }
                    let pick = (2 * sb as i16 + 1) << 8 | (2 * sb as i16);
                    let scv = _mm256_shuffle_epi8(sc16, _mm256_set1_epi16(pick));
                    for (j, bacc) in bacc.iter_mut().enumerate() {
                        let g = (c0 + j) * groups + 16 * bi + 2 * sb;
                        // SAFETY: groups g, g + 1 < m * groups = codes.len().
                        let xv = unsafe { _mm256_loadu_si256(codes.as_ptr().add(g).cast()) };
                        let p = _mm256_madd_epi16(_mm256_maddubs_epi16(qc, xv), scv);
                        *bacc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), pair_scales(dx, g), *bacc);
                    }
                }
                let dv = _mm256_set1_ps(d);
                for (acc, bacc) in acc.iter_mut().zip(bacc) {
                    *acc = _mm256_fmadd_ps(bacc, dv, *acc);
                }
            }
            for j in 0..C {
                s[c0 + j] += hsum_f32(acc[j]);
            }
        }
    }

    /// [`superblock_rows`] for one row of x (`m` = 1): each 32-byte chunk
    /// of codes (two sub-blocks, the low and the high nibbles) in one
    /// 512-bit vector against x's four groups, so one multiply-add,
    /// conversion and scaling serve both sub-blocks.
    ///
    /// # Safety
    /// The CPU has AVX2, FMA, F16C and AVX-512 F, BW and VL; `B` is Q4_K
    /// or Q5_K.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
    pub(super) unsafe fn superblock_row512<B: QuantBlock + bytemuck::Pod>(
        sums: &mut [f32],
        w: &[B],
        codes: &[[u32; 4]],
        dx: &[[f32; 8]],
        sx32: &[f32],
        k: usize,
    ) {
        let per_row = k / QK_K;
        let low4 = _mm512_set1_epi8(0x0F);
        let sixteen = _mm256_set1_epi8(16);
        // Sub-block sb's scale: 16-bit lane sb of the eight, in every lane.
        let pick = |sb: usize| _mm256_set1_epi16((2 * sb as i16 + 1) << 8 | (2 * sb as i16));
        for (s, row) in sums.iter_mut().zip(w.chunks_exact(per_row)) {
            let mut acc = _mm256_setzero_ps();
            for (bi, b) in row.iter().enumerate() {
                prefetch_ahead(b);
                let (d, scales8, minv, qs, qh) = superblock_head(b);
                let sc16 = _mm512_broadcast_i32x4(scales8);
                let g0 = 16 * bi;
                debug_assert!(g0 + 15 < codes.len() && g0 / 2 + 7 < sx32.len());
                // SAFETY: eight sums from g0 / 2 (the block's sub-blocks).
                let mins =
                    _mm256_mul_ps(minv, unsafe { _mm256_loadu_ps(sx32.as_ptr().add(g0 / 2)) });
                // SAFETY: a 32-byte unaligned load inside qh (32 bytes).
                let high = qh.map(|h| unsafe { _mm256_loadu_si256(h.as_ptr().cast()) });
                let mut bacc = _mm512_setzero_ps();
                for c in 0..4 {
                    // SAFETY: a 32-byte unaligned load inside qs (128 bytes).
                    let v = unsafe { _mm256_loadu_si256(qs.as_ptr().add(32 * c).cast()) };
                    let v = _mm512_inserti64x4::<1>(
                        _mm512_castsi256_si512(v),
                        _mm256_srli_epi16::<4>(v),
                    );
                    let mut qc = _mm512_and_si512(v, low4);
                    if let Some(h) = high {
                        let fifth = |sb| _mm256_and_si256(bits_to_4(h, sb), sixteen);
                        qc = _mm512_or_si512(
                            qc,
                            _mm512_inserti64x4::<1>(
                                _mm512_castsi256_si512(fifth(2 * c)),
                                fifth(2 * c + 1),
                            ),
                        );
                    }
                    let scv = _mm512_shuffle_epi8(
                        sc16,
                        _mm512_inserti64x4::<1>(
                            _mm512_castsi256_si512(pick(2 * c)),
                            pick(2 * c + 1),
                        ),
                    );
                    let g = g0 + 4 * c;
                    // SAFETY: groups g..g + 4 and their pair scales (the
                    // block's sub-blocks 2 c and 2 c + 1); unaligned loads.
                    let (xv, dxs) = unsafe {
                        (
                            _mm512_loadu_si512(codes.as_ptr().add(g).cast()),
                            _mm512_loadu_ps(dx.as_ptr().add(g / 2).cast()),
                        )
                    };
                    let p = _mm512_madd_epi16(_mm512_maddubs_epi16(qc, xv), scv);
                    bacc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), dxs, bacc);
                }
                let halves = _mm256_add_ps(
                    _mm512_castps512_ps256(bacc),
                    _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(bacc))),
                );
                acc = _mm256_fmadd_ps(_mm256_add_ps(halves, mins), _mm256_set1_ps(d), acc);
            }
            *s += hsum_f32(acc);
        }
    }

    /// How far ahead of the block being decoded the weight rows are
    /// requested, in bytes. With one row of x, perf put a third of Q4_K's
    /// time on the first use of a block's bytes: the hardware's own
    /// prefetch did not keep up. Asking for the lines 2 KiB ahead took
    /// every format's 4096 x 14336 product about 30% faster on this 2-core
    /// machine (Q4_K 2.6-2.9 -> 1.8-2.0 ms, before the decode was
    /// reworked); 4 KiB measured a little ahead of 2 and 8.
    const PREFETCH_DISTANCE: usize = 4096;

    /// Requests the cache lines of the weights [`PREFETCH_DISTANCE`] bytes
    /// past block `b` (blocks lie back to back, so one line a block covers
    /// the blocks under 64 bytes and the lines of longer ones are each
    /// asked for).
    #[inline]
    #[target_feature(enable = "sse")]
    pub(in crate::quant) fn prefetch_ahead<B>(b: &B) {
        let at = (b as *const B).cast::<i8>().wrapping_add(PREFETCH_DISTANCE);
        for line in 0..size_of::<B>().div_ceil(64) {
            // A prefetch never faults, even past the end of the weights.
            _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(64 * line));
        }
    }

    /// `[dx_g x4, dx_(g+1) x4]` (`g` even): the scales of the i32 lanes
    /// `vpmaddwd` leaves for 32 codes (groups g and g + 1).
    #[inline]
    #[target_feature(enable = "avx2")]
    fn pair_scales(dx: &[[f32; 8]], g: usize) -> __m256 {
        // SAFETY: eight f32s; unaligned load.
        unsafe { _mm256_loadu_ps(dx[g / 2].as_ptr()) }
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
        let per_row = k / B::ELEMS;
        // Sums per weight row (row-major [n, m]), then transposed into y.
        let mut sums = vec![0.0f32; n * m];
        #[cfg(target_arch = "x86_64")]
        let avx2 = std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma");
        #[cfg(not(target_arch = "x86_64"))]
        let avx2 = false;
        let codes = crate::engine::cpu::host(&self.x.codes).as_chunks::<4>().0;
        let meta = crate::engine::cpu::host(&self.x.meta);
        debug_assert_eq!(codes.len(), m * k / 16);
        // The legacy formats' 4 to 8 rows of x (8 for the 8-bit ones, whose
        // vector rows decode fastest) on the prompt's integer tiles: their
        // fill is cheap enough there (4096 x 14336, Q4_0: 4 rows 2.50 ->
        // 2.12 ms, 8 rows 4.40 -> 2.44; Q8_0: 4 rows 2.05 -> 2.33, 8 rows
        // 4.12 -> 2.72). The K-quants' fills (`unit8`) keep them on the rows.
        #[cfg(target_arch = "x86_64")]
        if x86::legacy_format::<B>()
            && m >= if matches!(B::GGML_TYPE, 8 | 9 | 15) {
                8
            } else {
                4
            }
            && super::tiles::available()
        {
            let mut y = vec![0.0f32; m * n];
            super::tiles::product::<B>(&mut y, w, codes, meta, (n, k, m));
            let mut out = self.out;
            for (o, &v) in crate::engine::cpu::host_mut(&mut out).iter_mut().zip(&y) {
                *o = T::from_kernel(T::Kernel::from_f32(v));
            }
            return Ok(out);
        }
        // Each pair of x's groups' scales as the lanes `vpmaddwd` leaves
        // for 32 codes: [dx_g x4, dx_(g+1) x4].
        #[cfg(target_arch = "x86_64")]
        let pair_scales = || -> Vec<[f32; 8]> {
            meta.as_chunks::<2>()
                .0
                .iter()
                .map(|p| {
                    let (a, b) = (f32::from_bits(p[0] as u32), f32::from_bits(p[1] as u32));
                    [a, a, a, a, b, b, b, b]
                })
                .collect()
        };
        // x's sums over each pair of groups (32 values).
        #[cfg(target_arch = "x86_64")]
        let sums32 = || -> Vec<f32> {
            meta.as_chunks::<2>()
                .0
                .iter()
                .map(|p| f32::from_bits((p[0] >> 32) as u32) + f32::from_bits((p[1] >> 32) as u32))
                .collect()
        };
        #[cfg(target_arch = "x86_64")]
        if avx2
            && std::arch::is_x86_feature_detected!("f16c")
            && x86::legacy_format::<B>()
            && per_row > 0
            && m > 0
        {
            // The legacy formats: each block decoded once for the rows of x
            // a pass takes; a minimum against x's sums over each block.
            let dx = pair_scales();
            let wide = x86::legacy_pairs512::<B>() && x86::has_avx512bw();
            let sx32 = if x86::legacy_has_min::<B>() {
                sums32()
            } else {
                Vec::new()
            };
            sums.par_chunks_mut(m * ROWS_PER_TASK)
                .zip(w.par_chunks(per_row * ROWS_PER_TASK))
                // SAFETY: the CPU has AVX2, FMA and F16C (checked above).
                .for_each(|(sums, w)| unsafe {
                    if m == 1 && wide {
                        // SAFETY: and AVX-512 F, BW and VL (checked).
                        x86::legacy_row512(sums, w, codes, &dx, &sx32, k)
                    } else {
                        x86::legacy_rows(sums, w, codes, &dx, &sx32, k, m)
                    }
                });
            return Ok(self.finish(&sums));
        }
        #[cfg(target_arch = "x86_64")]
        if avx2
            && std::arch::is_x86_feature_detected!("f16c")
            && matches!(B::GGML_TYPE, 10 | 11 | 14)
            && per_row > 0
            && m > 0
        {
            // Q2_K, Q3_K, Q6_K: each super-block decoded once for the rows of x
            // a pass takes, the group scales in 16-bit lanes.
            let dx = pair_scales();
            let sx: Vec<f32> = meta
                .iter()
                .map(|&v| f32::from_bits((v >> 32) as u32))
                .collect();
            let wide = x86::has_avx512bw();
            sums.par_chunks_mut(m * ROWS_PER_TASK)
                .zip(w.par_chunks(per_row * ROWS_PER_TASK))
                // SAFETY: the CPU has AVX2, FMA and F16C (checked above).
                .for_each(|(sums, w)| unsafe {
                    if B::GGML_TYPE == 14 && m == 1 && wide {
                        // SAFETY: and AVX-512 F, BW and VL (checked).
                        x86::q6k_row512(sums, w, codes, &dx, &sx, k)
                    } else if B::GGML_TYPE == 14 {
                        x86::q6k_rows(sums, w, codes, &dx, &sx, k, m)
                    } else {
                        x86::k23_rows(sums, w, codes, &dx, &sx, k, m)
                    }
                });
            return Ok(self.finish(&sums));
        }
        #[cfg(target_arch = "x86_64")]
        if avx2
            && std::arch::is_x86_feature_detected!("f16c")
            && x86::superblock_format::<B>()
            && per_row > 0
            && m > 0
        {
            // Q4_K, Q5_K: integer sums per sub-block with the integer
            // scales, x's group scales applied in f32 vectors, the
            // minimums against x's sums over each sub-block of 32.
            let dx = pair_scales();
            let sx32 = sums32();
            let wide = x86::has_avx512bw();
            sums.par_chunks_mut(m * ROWS_PER_TASK)
                .zip(w.par_chunks(per_row * ROWS_PER_TASK))
                // SAFETY: the CPU has AVX2, FMA and F16C (checked above).
                .for_each(|(sums, w)| unsafe {
                    if m == 1 && wide {
                        // SAFETY: and AVX-512 F, BW and VL (checked).
                        x86::superblock_row512(sums, w, codes, &dx, &sx32, k)
                    } else {
                        x86::superblock_rows(sums, w, codes, &dx, &sx32, k, m)
                    }
                });
            return Ok(self.finish(&sums));
        }
        if per_row > 0 && m > 0 {
            sums.par_chunks_mut(m * ROWS_PER_TASK)
                .zip(w.par_chunks(per_row * ROWS_PER_TASK))
                .for_each(|(sums, w)| {
                    if avx2 {
                        #[cfg(target_arch = "x86_64")]
                        // SAFETY: the CPU has AVX2 and FMA (checked above).
                        unsafe {
                            x86::rows(sums, w, codes, meta, k, m)
                        };
                    } else {
                        crate::engine::cpu::vectorized(CpuRows {
                            sums,
                            w,
                            codes,
                            meta,
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
        // Rows of x per pass: 1, 2, 4 or 8.
        let variant = match m {
            1 => 0,
            2 => 1,
            3 | 4 => 2,
            _ => 3,
        };
        // Rows of x a pass of the chosen kernel takes on this device (AMD's
        // widest pass holds four), and so the weight rows each workitem
        // takes and the workitems that share them.
        let pass = match variant {
            3 => qmatvec_pass8_on::<B>(if dev.is_rocm() {
                QMATVEC_WIDE_PASS_AMD
            } else {
                QMATVEC_WIDE_PASS_NVIDIA
            }) as u32,
            v => [1, 2, 4][v],
        };
        let row_groups = (n as u64).div_ceil(qmatvec_rows::<B>(pass) as u64);
        let lanes = qmatvec_lanes(
            B::MATVEC_LANES[pass.trailing_zeros() as usize],
            dev.wave_size().unwrap_or(32),
            row_groups,
            dev.gpu_info().map_or(1, |i| i.compute_units as u64),
        );
        let mut cfg =
            LaunchConfig::linear(row_groups * lanes as u64, QMATVEC_BLOCK).starting_early();
        cfg.lds_bytes = QMATVEC_LDS_BYTES;
        let (codes, meta) = (&self.x.codes, &self.x.meta);
        macro_rules! go {
            ($t:ty) => {{
                let out = self.out.view_as::<$t>().expect("same size");
                let kernel = <B as QMatvecKernels<$t>>::ROWS[variant];
                dev.launch_typed(
                    kernel,
                    cfg,
                    (
                        Out::new(out),
                        In::new(self.w),
                        In::new(codes),
                        In::new(meta),
                        n,
                        k,
                        m,
                        lanes,
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
/// assert_eq!((dense.len_bytes(), q.len_bytes()), (256, 68));
/// # Ok::<(), ferrocm_ops::Error>(())
/// ```
#[derive(Clone, Debug)]
pub enum Weight<T: WithDType> {
    /// A dense `[out, in]` weight.
    Dense(Tensor<T>),
    /// A quantized `[out, in]` weight.
    Quantized(QTensor),
    /// A dense `[out, in]` weight in a float dtype other than the
    /// activations' (an f16 or bf16 file's weight kept as stored under f32
    /// activations on the Cpu): [`Tensor::linear_mixed`].
    Mixed(crate::DynTensor),
}

impl<T: WithDType> Weight<T> {
    /// `x · Wᵀ`: [`Tensor::linear`], [`QTensor::forward`] or
    /// [`Tensor::linear_mixed`].
    ///
    /// # Errors
    /// Those of the product taken.
    pub fn forward(&self, x: &Tensor<T>) -> Result<Tensor<T>> {
        match self {
            Weight::Dense(w) => x.linear(w, None, None),
            Weight::Quantized(w) => w.forward(x),
            Weight::Mixed(w) => x.linear_mixed(w),
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
            Weight::Mixed(w) => {
                crate::core::dyn_tensor::with_dtype!(w, "Weight::embedding", |w| w
                    .embedding(ids)?
                    .to_dtype::<T>())
            }
        }
    }

    /// Bytes the weight holds (its elements at their own width, or its
    /// blocks).
    pub fn len_bytes(&self) -> usize {
        match self {
            Weight::Dense(w) => w.elem_count() * size_of::<T>(),
            Weight::Quantized(w) => w.len_bytes(),
            Weight::Mixed(w) => w.elem_count() * w.dtype().map_or(0, |d| d.size_in_bytes()),
        }
    }

    /// The weight's shape `[out, in]`.
    pub fn shape(&self) -> &[usize] {
        match self {
            Weight::Dense(w) => w.shape(),
            Weight::Quantized(w) => w.shape(),
            Weight::Mixed(w) => w.shape(),
        }
    }
}

/// Workitems that share a weight row of a quantized matrix-vector launch:
/// the format's `preferred` ([`QuantBlock::MATVEC_LANES`] for the pass) or
/// a `wave`, whichever is more, unless `row_groups` groups of weight rows
/// (a workitem's) would then give fewer workgroups than half the
/// `compute_units` (a layer of few rows): [`QMATVEC_ROW_LANES`]. Half, not
/// all: 128 workgroups on the H100's 132 lost little, but 128 lanes there
/// cost up to 40% (4096 rows, four a workitem, 8 rows of x: IQ4_XS 27.7
/// -> 38.9 us, Q5_K 42.4 -> 59.7). The kernels hold a compiled body for
/// each of the two counts, none between (a run-time count cost up to
/// 40%). The emulator (no compute units to fill) takes the preferred.
fn qmatvec_lanes(preferred: u32, wave: u32, row_groups: u64, compute_units: u64) -> u32 {
    let lanes = Ord::max(preferred, wave);
    if 2 * (row_groups * lanes as u64).div_ceil(QMATVEC_BLOCK as u64) < compute_units {
        QMATVEC_ROW_LANES
    } else {
        lanes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::QuantFormat;
    use rand::{Rng, SeedableRng};

    #[test]
    fn lanes_are_the_format_s_where_they_fill_half_the_compute_units() {
        // 4096 rows, two a workitem, on an H100 (132) and an MI300X (304,
        // wave 64).
        assert_eq!(qmatvec_lanes(32, 32, 2048, 132), 32);
        assert_eq!(qmatvec_lanes(32, 64, 2048, 304), 64);
        assert_eq!(qmatvec_lanes(128, 32, 4096, 132), 128);
        // Four a workitem: 128 workgroups on 132 keep 32 lanes.
        assert_eq!(qmatvec_lanes(32, 32, 1024, 132), 32);
        // 1024 rows, two a workitem: 64 workgroups at 32 lanes, under half
        // of 132 (128 lanes), half of 128 (32 lanes).
        assert_eq!(qmatvec_lanes(32, 32, 512, 132), 128);
        assert_eq!(qmatvec_lanes(32, 32, 512, 128), 32);
        // An MI300X: 512 groups at 64 lanes (wave 64) are 128 workgroups,
        // under half of 304.
        assert_eq!(qmatvec_lanes(32, 64, 512, 304), 128);
        // Never past 128, however few the rows.
        assert_eq!(qmatvec_lanes(64, 64, 1, 132), 128);
        assert_eq!(qmatvec_lanes(32, 32, 1, 1), 32);
    }

    /// The f32 panels (the prompt's path on a Cpu without AVX-512 VNNI,
    /// which `tests/quant.rs` then checks against f64 sums) against the
    /// dequantized weight's dense product: 131 weight rows (two panels and
    /// a partial one), 9 rows of x, every format that quantizes.
    #[test]
    fn cpu_panels_match_the_dense_product() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let (n, k, m) = (131, 256, 9);
        let wf: Vec<f32> = (0..n * k).map(|_| rng.random_range(-1.0f32..1.0)).collect();
        let xs: Vec<f32> = (0..m * k).map(|_| rng.random_range(-1.0f32..1.0)).collect();
        let x = Tensor::from_slice(&xs, &[m, k], &Device::Cpu).unwrap();
        let wt = Tensor::from_slice(&wf, &[n, k], &Device::Cpu).unwrap();
        let mut checked = 0;
        for f in QuantFormat::ALL {
            let Ok(q) = QTensor::quantize(&wt, f) else {
                continue;
            };
            let w = q.dequantize::<f32>().unwrap();
            let got = q.forward_cpu_panels(&x, n, k, m).unwrap().to_vec().unwrap();
            let want = x.linear(&w, None, None).unwrap().to_vec().unwrap();
            let wv = w.to_vec().unwrap();
            for c in 0..m {
                for r in 0..n {
                    let mag: f64 = (0..k)
                        .map(|j| (wv[r * k + j] as f64 * xs[c * k + j] as f64).abs())
                        .sum();
                    let (g, w) = (got[c * n + r], want[c * n + r]);
                    assert!(
                        ((g - w) as f64).abs() <= 2.0 * k as f64 * 2f64.powi(-24) * mag,
                        "{f}: y[{c}, {r}] = {g}, dense {w}"
                    );
                }
            }
            checked += 1;
        }
        assert!(checked >= 10, "only {checked} formats quantize");
    }
}
