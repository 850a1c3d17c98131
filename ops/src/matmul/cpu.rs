//! The Cpu's dense products' inner loops where the right operand is not
//! plain f32 rows: f16 and bf16 operands, and `Wᵀ` (a weight stored
//! `[n, k]`, as `linear` takes it) in any float dtype.
//!
//! The f32 arithmetic is the gemm crate's; what this adds is where the
//! elements become the f32 panels it works on:
//! - the matrix-vector rows ([`gemv`]) widen the weight eight elements at a
//!   time in registers (F16C's `vcvtph2ps` for f16, a shift for bf16), so
//!   each weight element is read once, at its own width;
//! - the GEMM ([`gemm_widened`]) widens the right operand one block of
//!   columns at a time into a buffer that stays in the core's cache, laid
//!   out so the gemm crate packs it by plain copies, then runs the f32
//!   kernel on that block. Widening the whole matrix first wrote and read
//!   back twice its bytes through memory on every call; `Wᵀ` handed to the
//!   gemm crate as it is was packed a column at a time, a cache line per
//!   element.

use crate::core::dtype::{DType, WithDType};
use ferrocm_kernels::elem::Elem;
use ferrocm_kernels::matmul::GEMV_MAX_M;
use rayon::prelude::*;

/// Most rows of x [`gemv`] takes.
const MAX_M: usize = GEMV_MAX_M as usize;

/// f32 bytes a GEMM block's widened columns take: about half of a Zen 4/5
/// or recent Intel core's L2, so the block stays there while the f32
/// kernel reads it. (A TinyLlama-shaped prompt of 128 tokens in bf16 on a
/// 2-core Zen 5: 256 KiB to 512 KiB level, 1 MiB 8% slower, 4 MiB 25%.)
const BLOCK_BYTES: usize = 512 << 10;

/// Fewest columns a GEMM block takes, whatever `k`: the gemm crate's f32
/// kernel spans 64 of them with AVX-512, and blocks of 16 (a 512 KiB block
/// at k = 5632) ran the prompt above 16% slower.
const MIN_COLUMNS: usize = 64;

/// Contiguous `src` widened to f32 into `dst` (the same length).
pub(super) fn widen<T: WithDType>(dst: &mut [f32], src: &[T]) {
    debug_assert_eq!(dst.len(), src.len());
    #[cfg(target_arch = "x86_64")]
    if x86::available() {
        // SAFETY: the CPU has AVX2, FMA and F16C (checked).
        return unsafe { x86::widen(dst, src) };
    }
    for (d, s) in dst.iter_mut().zip(src) {
        *d = s.to_kernel().to_f32();
    }
}

/// `dst` `[k, cols]` (row-major) = the first `cols` rows of `src`, rows
/// `rs` apart and contiguous along `k`, transposed and widened to f32.
fn widen_transposed<T: WithDType>(dst: &mut [f32], src: &[T], rs: usize, cols: usize, k: usize) {
    debug_assert!(dst.len() == k * cols && (cols == 0 || src.len() >= (cols - 1) * rs + k));
    #[cfg(target_arch = "x86_64")]
    if x86::available() {
        // SAFETY: the CPU has AVX2, FMA and F16C (checked); the sizes as
        // asserted above (the caller's plan).
        return unsafe { x86::widen_transposed(dst, src, rs, cols, k) };
    }
    for (j, row) in src.chunks(rs.max(1)).take(cols).enumerate() {
        for (i, v) in row[..k].iter().enumerate() {
            dst[i * cols + j] = v.to_kernel().to_f32();
        }
    }
}

/// Y `[m, n]` = X `[m, k]` (f32, contiguous) · Wᵀ for `m` ≤ 8, W's rows
/// (`Wᵀ`'s columns) contiguous along k: `y[r * n + j] = Σ_i x[r * k + i] ·
/// w[j * w_rs + i]`. Each weight element is read once; the rows of W run in
/// parallel.
pub(super) fn gemv<T: WithDType>(
    y: &mut [f32],
    x: &[f32],
    w: &[T],
    w_rs: usize,
    m: usize,
    k: usize,
) {
    debug_assert!((1..=MAX_M).contains(&m) && x.len() >= m * k);
    let n = y.len() / m;
    // Sums of a block of W's rows for every row of x, then placed in y.
    let rows_of = |j0: usize, out: &mut [[f32; MAX_M]]| {
        #[cfg(target_arch = "x86_64")]
        if x86::available() {
            // SAFETY: the CPU has AVX2, FMA and F16C (checked); row j of W is
            // w[j * w_rs..][..k] for j < n (the plan's strides).
            return unsafe { x86::gemv_rows(out, x, w, w_rs, j0, m, k) };
        }
        for (jj, o) in out.iter_mut().enumerate() {
            let row = &w[(j0 + jj) * w_rs..][..k];
            for (r, o) in o.iter_mut().enumerate().take(m) {
                *o = row
                    .iter()
                    .zip(&x[r * k..][..k])
                    .map(|(w, x)| w.to_kernel().to_f32() * x)
                    .sum();
            }
        }
    };
    // About 64 KiB of weight a task.
    let block = (65536 / (k * size_of::<T>()).max(1)).clamp(1, 256);
    let mut sums = vec![[0.0f32; MAX_M]; n];
    sums.par_chunks_mut(block)
        .enumerate()
        .for_each(|(b, out)| rows_of(b * block, out));
    for (j, s) in sums.iter().enumerate() {
        for (r, v) in s.iter().enumerate().take(m) {
            y[r * n + j] = *v;
        }
    }
}

/// Rows `dst_rs` elements apart of an f32 product being written by
/// several tasks, each into its own columns.
#[derive(Clone, Copy)]
struct Columns(*mut f32);
// SAFETY: tasks write disjoint columns (the caller of `gemm_widened`
// promises the buffer; `gemm_widened` hands each block to one task).
unsafe impl Send for Columns {}
unsafe impl Sync for Columns {}

/// `dst` `[m, n]` (rows `dst_rs` apart) = X `[m, k]` (f32, contiguous) · B
/// `[k, n]`, B's element (i, j) at `b[i * rs + j * cs]` in any float dtype:
/// B widened to f32 a block of columns at a time ([`BLOCK_BYTES`]), each
/// block's product on one thread (`threads` > 1: the blocks in parallel).
///
/// # Safety
/// `dst` is valid for writes at `i * dst_rs + j` for `i < m`, `j < n`, and
/// nothing else reads or writes them during the call; B's elements are in
/// `b` (as above, for `i < k`, `j < n`).
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn gemm_widened<T: WithDType>(
    (m, n, k): (usize, usize, usize),
    dst: *mut f32,
    dst_rs: usize,
    x: &[f32],
    b: &[T],
    (rs, cs): (usize, usize),
    threads: usize,
) {
    let nc = (BLOCK_BYTES / (4 * k.max(1))).clamp(MIN_COLUMNS, n.max(MIN_COLUMNS)) / 16 * 16;
    let dst = Columns(dst);
    let block = |j0: usize| {
        let cols = nc.min(n - j0);
        let mut buf = vec![0.0f32; cols * k];
        // The block as `[k, cols]`, row-major: after the gemm crate turns
        // the row-major product around, these columns are the operand it
        // packs into panels along the columns, and contiguous ones pack by
        // plain copies (a weight's rows, `Wᵀ` in B, are transposed here).
        if rs == 1 || k == 1 {
            widen_transposed(&mut buf, &b[j0 * cs..], cs, cols, k);
        } else {
            for (i, row) in buf.chunks_exact_mut(cols).enumerate() {
                let at = &b[i * rs + j0 * cs..];
                if cs == 1 {
                    widen(row, &at[..cols]);
                } else {
                    for (jj, v) in row.iter_mut().enumerate() {
                        *v = at[jj * cs].to_kernel().to_f32();
                    }
                }
            }
        }
        let d = dst;
        // SAFETY: columns j0..j0 + cols of dst are this block's alone (the
        // caller's promise for the whole product).
        unsafe {
            super::dense::sgemm_rows(
                (m, cols, k),
                d.0.add(j0),
                dst_rs,
                x,
                (k, 1),
                &buf,
                (cols, 1),
                1,
            )
        }
    };
    let blocks = n.div_ceil(nc);
    if threads > 1 {
        (0..blocks).into_par_iter().for_each(|b| block(b * nc));
    } else {
        (0..blocks).for_each(|b| block(b * nc));
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::*;
    use crate::engine::cpu::hsum_f32;
    use std::arch::x86_64::*;

    /// Whether the CPU has what these paths are compiled for.
    pub(super) fn available() -> bool {
        std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
            && std::arch::is_x86_feature_detected!("f16c")
    }

    /// Eight elements from `p` as f32.
    ///
    /// # Safety
    /// `p` is valid for reads of 8 `T`s; the CPU has AVX2 and F16C.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load8<T: WithDType>(p: *const T) -> __m256 {
        // SAFETY: 8 elements at p (the caller's promise); unaligned loads.
        unsafe {
            match T::DTYPE {
                DType::F32 => _mm256_loadu_ps(p.cast()),
                DType::F16 => _mm256_cvtph_ps(_mm_loadu_si128(p.cast())),
                DType::BF16 => _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(
                    _mm_loadu_si128(p.cast()),
                ))),
                _ => {
                    let s = std::slice::from_raw_parts(p, 8);
                    _mm256_loadu_ps(
                        std::array::from_fn::<f32, 8, _>(|e| s[e].to_kernel().to_f32()).as_ptr(),
                    )
                }
            }
        }
    }

    /// [`super::widen`].
    ///
    /// # Safety
    /// The CPU has AVX2, FMA and F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn widen<T: WithDType>(dst: &mut [f32], src: &[T]) {
        let (dc, dt) = dst.as_chunks_mut::<8>();
        let (sc, st) = src.as_chunks::<8>();
        for (d, s) in dc.iter_mut().zip(sc) {
            // SAFETY: 8 elements each side.
            unsafe { _mm256_storeu_ps(d.as_mut_ptr(), load8(s.as_ptr())) };
        }
        for (d, s) in dt.iter_mut().zip(st) {
            *d = s.to_kernel().to_f32();
        }
    }

    /// [`super::widen_transposed`]: 8 x 8 tiles widened and transposed in
    /// registers.
    ///
    /// # Safety
    /// The CPU has AVX2, FMA and F16C; `dst` holds `k * cols`; row j <
    /// `cols` of `src` is `src[j * rs..][..k]`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn widen_transposed<T: WithDType>(
        dst: &mut [f32],
        src: &[T],
        rs: usize,
        cols: usize,
        k: usize,
    ) {
        let (jw, iw) = (cols / 8 * 8, k / 8 * 8);
        let d = dst.as_mut_ptr();
        for j in (0..jw).step_by(8) {
            for i in (0..iw).step_by(8) {
                // SAFETY: rows j..j + 8 < cols, elements i..i + 8 <= k of
                // each; dst's rows i..i + 8 < k, columns j..j + 8 <= cols.
                unsafe {
                    let r: [__m256; 8] =
                        std::array::from_fn(|t| load8(src.as_ptr().add((j + t) * rs + i)));
                    for (u, v) in transpose8(r).into_iter().enumerate() {
                        _mm256_storeu_ps(d.add((i + u) * cols + j), v);
                    }
                }
            }
            for t in j..j + 8 {
                for i in iw..k {
                    dst[i * cols + t] = src[t * rs + i].to_kernel().to_f32();
                }
            }
        }
        for t in jw..cols {
            for (i, v) in src[t * rs..][..k].iter().enumerate() {
                dst[i * cols + t] = v.to_kernel().to_f32();
            }
        }
    }

    /// An 8 x 8 f32 tile transposed: lane e of `r[t]` to lane t of `[e]`.
    #[inline]
    #[target_feature(enable = "avx")]
    fn transpose8(r: [__m256; 8]) -> [__m256; 8] {
        let t0 = _mm256_unpacklo_ps(r[0], r[1]);
        let t1 = _mm256_unpackhi_ps(r[0], r[1]);
        let t2 = _mm256_unpacklo_ps(r[2], r[3]);
        let t3 = _mm256_unpackhi_ps(r[2], r[3]);
        let t4 = _mm256_unpacklo_ps(r[4], r[5]);
        let t5 = _mm256_unpackhi_ps(r[4], r[5]);
        let t6 = _mm256_unpacklo_ps(r[6], r[7]);
        let t7 = _mm256_unpackhi_ps(r[6], r[7]);
        let s0 = _mm256_shuffle_ps::<0x44>(t0, t2);
        let s1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
        let s2 = _mm256_shuffle_ps::<0x44>(t1, t3);
        let s3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
        let s4 = _mm256_shuffle_ps::<0x44>(t4, t6);
        let s5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
        let s6 = _mm256_shuffle_ps::<0x44>(t5, t7);
        let s7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
        [
            _mm256_permute2f128_ps::<0x20>(s0, s4),
            _mm256_permute2f128_ps::<0x20>(s1, s5),
            _mm256_permute2f128_ps::<0x20>(s2, s6),
            _mm256_permute2f128_ps::<0x20>(s3, s7),
            _mm256_permute2f128_ps::<0x31>(s0, s4),
            _mm256_permute2f128_ps::<0x31>(s1, s5),
            _mm256_permute2f128_ps::<0x31>(s2, s6),
            _mm256_permute2f128_ps::<0x31>(s3, s7),
        ]
    }

    /// [`super::gemv`]'s sums for W's rows `j0..j0 + out.len()`.
    ///
    /// # Safety
    /// The CPU has AVX2, FMA and F16C; row j of W is `w[j * w_rs..][..k]`;
    /// `x` holds `m` rows of `k`, `m` in 1..=8.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn gemv_rows<T: WithDType>(
        out: &mut [[f32; MAX_M]],
        x: &[f32],
        w: &[T],
        w_rs: usize,
        j0: usize,
        m: usize,
        k: usize,
    ) {
        // SAFETY (each): the caller's promises, passed on.
        unsafe {
            match m {
                1 => rows::<T, 1, 4>(out, x, w, w_rs, j0, k),
                2 => rows::<T, 2, 2>(out, x, w, w_rs, j0, k),
                3 => rows::<T, 3, 2>(out, x, w, w_rs, j0, k),
                4 => rows::<T, 4, 2>(out, x, w, w_rs, j0, k),
                5 => rows::<T, 5, 1>(out, x, w, w_rs, j0, k),
                6 => rows::<T, 6, 1>(out, x, w, w_rs, j0, k),
                7 => rows::<T, 7, 1>(out, x, w, w_rs, j0, k),
                _ => rows::<T, 8, 1>(out, x, w, w_rs, j0, k),
            }
        }
    }

    /// `M` rows of x against each of W's rows, `U` runs of eight in flight
    /// per row of x (independent sums, so the FMA latency is hidden).
    ///
    /// # Safety
    /// As [`gemv_rows`], with `m` = `M`.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn rows<T: WithDType, const M: usize, const U: usize>(
        out: &mut [[f32; MAX_M]],
        x: &[f32],
        w: &[T],
        w_rs: usize,
        j0: usize,
        k: usize,
    ) {
        let step = 8 * U;
        let whole = k / step * step;
        for (jj, o) in out.iter_mut().enumerate() {
            let row = &w[(j0 + jj) * w_rs..][..k];
            let mut acc = [[_mm256_setzero_ps(); M]; U];
            let mut i = 0;
            while i < whole {
                for (u, acc) in acc.iter_mut().enumerate() {
                    // SAFETY: i + 8 * u + 8 <= whole <= k: in the row and in
                    // each of x's rows.
                    let wv = unsafe { load8(row.as_ptr().add(i + 8 * u)) };
                    for (r, a) in acc.iter_mut().enumerate() {
                        let xv = unsafe { _mm256_loadu_ps(x.as_ptr().add(r * k + i + 8 * u)) };
                        *a = _mm256_fmadd_ps(wv, xv, *a);
                    }
                }
                i += step;
            }
            for r in 0..M {
                let mut v = acc[0][r];
                for a in &acc[1..] {
                    v = _mm256_add_ps(v, a[r]);
                }
                let tail: f32 = row[whole..]
                    .iter()
                    .zip(&x[r * k + whole..r * k + k])
                    .map(|(w, x)| w.to_kernel().to_f32() * x)
                    .sum();
                o[r] = hsum_f32(v) + tail;
            }
        }
    }
}
