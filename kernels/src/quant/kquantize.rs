//! GGML's reference (non-imatrix) quantizers of the K-quants and Q8_K
//! (`quantize_row_q{2,3,4,5,6,8}_K_ref`, what `llama-quantize` runs without
//! an importance matrix), written from the algorithms' description in
//! ggml-quants.c: per 16- or 32-element group a scale (and minimum) found by
//! a small search that minimises the weighted squared (or absolute) error,
//! those scales quantized to 4, 6 or 8 bits against one f16 super-scale, and
//! the codes rounded again against the quantized scales.
//!
//! Bit-exact with GGML built without floating-point contraction (the
//! default on x86-64 without `-march`; tests/quant.rs checks every format
//! against bytes from GGML's own C): every product and sum here is one f32
//! operation in GGML's order, and rounding is GGML's `nearest_int` (add
//! 1.5 * 2^23 and read the mantissa bits), which also fixes what non-finite
//! or huge inputs produce (GGML asserts in debug builds; release builds
//! compute the same bits as this code).
//!
//! Host only: quantizing weights is a one-off load-time step, and the
//! searches keep whole blocks of scratch that a kernel would spill.

// Index loops keep GGML's order of operations visible, element by element.
#![allow(clippy::needless_range_loop)]

use super::blocks::*;
use crate::elem::{F16, f16_bits_to_f32, f32_to_f16_bits};

/// Below this, a group's largest magnitude counts as all zero (GGML's
/// `GROUP_MAX_EPS`).
const GROUP_MAX_EPS: f32 = 1e-15;

/// GGML's `nearest_int`: round half to even through the f32 adder, valid
/// for |v| < 2^22 (outside it the mantissa bits wrap, as GGML's do).
#[inline(always)]
fn nearest_int(v: f32) -> i32 {
    let bits = (v + 12_582_912.0).to_bits() as i32;
    (bits & 0x007f_ffff) - 0x0040_0000
}

fn f16(v: f32) -> F16 {
    F16(f32_to_f16_bits(v))
}

fn f32_of(h: F16) -> f32 {
    f16_bits_to_f32(h.0)
}

/// The block's 256 inputs, zero past the end of `x`.
fn block_values(x: &[f32]) -> [f32; QK_K] {
    let mut v = [0.0f32; QK_K];
    let n = x.len().min(QK_K);
    v[..n].copy_from_slice(&x[..n]);
    v
}

/// The value of largest magnitude (the first on ties) and that magnitude:
/// of a group's inputs, or of a super-block's signed group scales.
fn signed_max(x: &[f32]) -> (f32, f32) {
    let (mut max, mut amax) = (0.0f32, 0.0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    (max, amax)
}

/// GGML's `make_qkx2_quants`: codes `l[i]` in 0..=nmax with
/// `x ≈ scale * l - min_out`, trying `nstep + 1` scales around
/// `nmax / (max - min)` and keeping the one of least weighted error
/// (absolute when `use_mad`). Returns `(scale, min_out)`.
#[allow(clippy::too_many_arguments)]
fn make_qkx2_quants(
    nmax: i32,
    x: &[f32],
    weights: &[f32],
    l_out: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
    use_mad: bool,
) -> (f32, f32) {
    let n = x.len();
    let (mut min, mut max) = (x[0], x[0]);
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l_out.iter_mut().for_each(|l| *l = 0);
        return (0.0, -min);
    }
    let error = |d: f32| if use_mad { d.abs() } else { d * d };
    let nmax_f = nmax as f32;
    let mut iscale = nmax_f / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for i in 0..n {
        let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
        l_out[i] = l as u8;
        let diff = scale * l as f32 + min - x[i];
        best_error += weights[i] * error(diff);
    }
    let mut aux = [0u8; 32];
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmax_f) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for i in 0..n {
            let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            aux[i] = l as u8;
            let (w, lf) = (weights[i], l as f32);
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * x[i];
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0.0f32;
            for i in 0..n {
                let diff = this_scale * aux[i] as f32 + this_min - x[i];
                cur_error += weights[i] * error(diff);
            }
            if cur_error < best_error {
                l_out.copy_from_slice(&aux[..n]);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// GGML's `make_q3_quants` with its least-squares refinement: signed codes
/// in -nmax..nmax (stored biased by `nmax`) and their scale, weighted by
/// x². An all-zero group gets codes 0 (not the bias) and scale 0, as GGML's.
fn make_q3_quants(nmax: i32, x: &[f32; 16], l_out: &mut [i8]) -> f32 {
    let (max, amax) = signed_max(x);
    if amax < GROUP_MAX_EPS {
        l_out.iter_mut().for_each(|l| *l = 0);
        return 0.0;
    }
    let iscale = -(nmax as f32) / max;
    let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
    let mut l = [0i32; 16];
    for i in 0..16 {
        l[i] = nearest_int(iscale * x[i]).clamp(-nmax, nmax - 1);
        let w = x[i] * x[i];
        sumlx += w * x[i] * l[i] as f32;
        suml2 += w * l[i] as f32 * l[i] as f32;
    }
    for _ in 0..5 {
        let mut changed = false;
        for i in 0..16 {
            let w = x[i] * x[i];
            let li = l[i] as f32;
            let mut slx = sumlx - w * x[i] * li;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * li * li;
                let new_l = nearest_int(x[i] * sl2 / slx).clamp(-nmax, nmax - 1);
                if new_l != l[i] {
                    let nl = new_l as f32;
                    slx += w * x[i] * nl;
                    sl2 += w * nl * nl;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        l[i] = new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        changed = true;
                    }
                }
            }
        }
        if !changed {
            break;
        }
    }
    for i in 0..16 {
        l_out[i] = (l[i] + nmax) as i8;
    }
    if suml2 > 0.0 { sumlx / suml2 } else { 0.0 }
}

/// GGML's `make_qx_quants` with `rmse_type` 1 (weights x², no importance):
/// signed codes in -nmax..nmax (stored biased by `nmax`) and their scale,
/// searching 18 scales around `nmax / max` for the least weighted error.
fn make_qx_quants(nmax: i32, x: &[f32; 16], l_out: &mut [i8]) -> f32 {
    let (max, amax) = signed_max(x);
    if amax < GROUP_MAX_EPS {
        l_out.iter_mut().for_each(|l| *l = 0);
        return 0.0;
    }
    let nmax_f = nmax as f32;
    let sums = |iscale: f32| {
        let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
        for &v in x {
            let l = nearest_int(iscale * v).clamp(-nmax, nmax - 1) as f32;
            let w = v * v;
            sumlx += w * v * l;
            suml2 += w * l * l;
        }
        (sumlx, suml2)
    };
    let codes = |iscale: f32, l_out: &mut [i8]| {
        for (o, &v) in l_out.iter_mut().zip(x) {
            *o = (nearest_int(iscale * v).clamp(-nmax, nmax - 1) + nmax) as i8;
        }
    };
    let iscale = -nmax_f / max;
    codes(iscale, l_out);
    let (sumlx, suml2) = sums(iscale);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in (-9..=9).filter(|&is| is != 0) {
        let iscale = -(nmax_f + 0.1 * is as f32) / max;
        let (sumlx, suml2) = sums(iscale);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            codes(iscale, l_out);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// Four 2-bit codes per byte as Q2_K and Q3_K pack them: in each half of
/// 128, byte `l` holds codes `l`, `l + 32`, `l + 64`, `l + 96`.
fn pack2(l: &[u8; QK_K]) -> [u8; 64] {
    let mut qs = [0u8; 64];
    for half in 0..2 {
        let (j, q) = (half * 128, &mut qs[half * 32..half * 32 + 32]);
        for (i, b) in q.iter_mut().enumerate() {
            *b = l[j + i] | (l[j + i + 32] << 2) | (l[j + i + 64] << 4) | (l[j + i + 96] << 6);
        }
    }
    qs
}

/// Q4_K/Q5_K's first stage: each sub-block of 32's scale and minimum
/// (`make_qkx2_quants` weighted by rms + |x|), quantized to 6 bits each
/// against the largest, packed as GGML packs them; then codes in 0..=nmax
/// against the quantized values. Returns `(d, dmin, scales, codes)`.
fn k4_quantize(
    x: &[f32; QK_K],
    nmax: i32,
    rmin: f32,
    nstep: i32,
) -> (F16, F16, [u8; 12], [u8; QK_K]) {
    let mut l = [0u8; QK_K];
    let (mut scales, mut mins) = ([0.0f32; 8], [0.0f32; 8]);
    let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
    for j in 0..8 {
        let xs = &x[32 * j..32 * j + 32];
        let mut sum_x2 = 0.0f32;
        for &v in xs {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        let mut weights = [0.0f32; 32];
        for (w, &v) in weights.iter_mut().zip(xs) {
            *w = av_x + v.abs();
        }
        let l_j = &mut l[32 * j..32 * j + 32];
        (scales[j], mins[j]) = make_qkx2_quants(nmax, xs, &weights, l_j, rmin, 0.1, nstep, false);
        if scales[j] > max_scale {
            max_scale = scales[j];
        }
        if mins[j] > max_min {
            max_min = mins[j];
        }
    }
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let mut packed = [0u8; 12];
    for j in 0..8 {
        // GGML stores the rounded value in a byte before clamping.
        let ls = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        let lm = (nearest_int(inv_min * mins[j]) as u8).min(63);
        if j < 4 {
            packed[j] = ls;
            packed[j + 4] = lm;
        } else {
            packed[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4);
            packed[j - 4] |= (ls >> 4) << 6;
            packed[j] |= (lm >> 4) << 6;
        }
    }
    let (d, dmin) = (f16(max_scale / 63.0), f16(max_min / 63.0));
    for j in 0..8 {
        let (sc, m) = k4_scale_min(j, &packed);
        let dj = f32_of(d) * sc as f32;
        if dj == 0.0 {
            continue;
        }
        let dm = f32_of(dmin) * m as f32;
        for i in 32 * j..32 * j + 32 {
            l[i] = nearest_int((x[i] + dm) / dj).clamp(0, nmax) as u8;
        }
    }
    (d, dmin, packed, l)
}

/// The 16 elements of group `j`.
fn group(x: &[f32; QK_K], j: usize) -> &[f32; 16] {
    x[16 * j..16 * j + 16].try_into().expect("16 elements")
}

impl QuantizeBlock for BlockQ2K {
    fn quantize(x: &[f32]) -> Self {
        let x = &block_values(x);
        let mut l = [0u8; QK_K];
        let (mut scales, mut mins) = ([0.0f32; 16], [0.0f32; 16]);
        let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
        for j in 0..16 {
            let xs = group(x, j);
            let weights = xs.map(f32::abs);
            let l_j = &mut l[16 * j..16 * j + 16];
            (scales[j], mins[j]) = make_qkx2_quants(3, xs, &weights, l_j, -0.5, 0.1, 15, true);
            if scales[j] > max_scale {
                max_scale = scales[j];
            }
            if mins[j] > max_min {
                max_min = mins[j];
            }
        }
        let mut packed = [0u8; 16];
        let mut d = f16(0.0);
        if max_scale > 0.0 {
            let iscale = 15.0 / max_scale;
            for j in 0..16 {
                packed[j] = nearest_int(iscale * scales[j]) as u8;
            }
            d = f16(max_scale / 15.0);
        }
        let mut dmin = f16(0.0);
        if max_min > 0.0 {
            let iscale = 15.0 / max_min;
            for j in 0..16 {
                packed[j] |= (nearest_int(iscale * mins[j]) << 4) as u8;
            }
            dmin = f16(max_min / 15.0);
        }
        for j in 0..16 {
            let dj = f32_of(d) * (packed[j] & 0xF) as f32;
            if dj == 0.0 {
                continue;
            }
            let dm = f32_of(dmin) * (packed[j] >> 4) as f32;
            for i in 16 * j..16 * j + 16 {
                l[i] = nearest_int((x[i] + dm) / dj).clamp(0, 3) as u8;
            }
        }
        Self {
            scales: packed,
            qs: pack2(&l),
            d,
            dmin,
        }
    }
}

impl QuantizeBlock for BlockQ3K {
    fn quantize(x: &[f32]) -> Self {
        let x = &block_values(x);
        let mut l = [0i8; QK_K];
        let mut scales = [0.0f32; 16];
        for j in 0..16 {
            scales[j] = make_q3_quants(4, group(x, j), &mut l[16 * j..16 * j + 16]);
        }
        let (max_scale, _) = signed_max(&scales);
        let mut packed = [0u8; 12];
        let mut d = f16(0.0);
        if max_scale != 0.0 {
            let iscale = -32.0 / max_scale;
            for j in 0..16 {
                // GGML rounds into an int8_t, then clamps and biases.
                let q = ((nearest_int(iscale * scales[j]) as i8) as i32).clamp(-32, 31) + 32;
                if j < 8 {
                    packed[j] = (q & 0xF) as u8;
                } else {
                    packed[j - 8] |= ((q & 0xF) << 4) as u8;
                }
                packed[j % 4 + 8] |= ((q >> 4) << (2 * (j / 4))) as u8;
            }
            d = f16(1.0 / iscale);
        }
        for j in 0..16 {
            let dj = f32_of(d) * q3k_scale(j, &packed) as f32;
            if dj == 0.0 {
                continue;
            }
            for i in 16 * j..16 * j + 16 {
                l[i] = (nearest_int(x[i] / dj).clamp(-4, 3) + 4) as i8;
            }
        }
        // The third bit of code j goes to bit j / 32 of hmask[j % 32].
        let mut hmask = [0u8; 32];
        let mut low = [0u8; QK_K];
        for j in 0..QK_K {
            let mut q = l[j];
            if q > 3 {
                hmask[j % 32] |= 1 << (j / 32);
                q -= 4;
            }
            low[j] = q as u8;
        }
        Self {
            hmask,
            qs: pack2(&low),
            scales: packed,
            d,
        }
    }
}

impl QuantizeBlock for BlockQ4K {
    fn quantize(x: &[f32]) -> Self {
        let (d, dmin, scales, l) = k4_quantize(&block_values(x), 15, -1.0, 20);
        let mut qs = [0u8; 128];
        for (c, chunk) in qs.as_chunks_mut::<32>().0.iter_mut().enumerate() {
            for (i, b) in chunk.iter_mut().enumerate() {
                *b = l[64 * c + i] | (l[64 * c + i + 32] << 4);
            }
        }
        Self {
            d,
            dmin,
            scales,
            qs,
        }
    }
}

impl QuantizeBlock for BlockQ5K {
    fn quantize(x: &[f32]) -> Self {
        let (d, dmin, scales, l) = k4_quantize(&block_values(x), 31, -0.5, 15);
        let (mut qs, mut qh) = ([0u8; 128], [0u8; 32]);
        for (c, chunk) in qs.as_chunks_mut::<32>().0.iter_mut().enumerate() {
            for (i, b) in chunk.iter_mut().enumerate() {
                let (lo, hi) = (l[64 * c + i], l[64 * c + i + 32]);
                qh[i] |= ((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1));
                *b = (lo & 0xF) | ((hi & 0xF) << 4);
            }
        }
        Self {
            d,
            dmin,
            scales,
            qh,
            qs,
        }
    }
}

impl QuantizeBlock for BlockQ6K {
    fn quantize(x: &[f32]) -> Self {
        let x = &block_values(x);
        let mut l = [0i8; QK_K];
        let mut scales = [0.0f32; 16];
        for j in 0..16 {
            scales[j] = make_qx_quants(32, group(x, j), &mut l[16 * j..16 * j + 16]);
        }
        let (max_scale, max_abs) = signed_max(&scales);
        if max_abs < GROUP_MAX_EPS {
            return Self {
                ql: [0; 128],
                qh: [0; 64],
                scales: [0; 16],
                d: f16(0.0),
            };
        }
        let iscale = -128.0 / max_scale;
        let d = f16(1.0 / iscale);
        // GGML clamps above only and stores into an int8_t.
        let group_scales = scales.map(|s| nearest_int(iscale * s).min(127) as i8);
        for j in 0..16 {
            let dj = f32_of(d) * group_scales[j] as f32;
            if dj == 0.0 {
                continue;
            }
            for i in 16 * j..16 * j + 16 {
                l[i] = (nearest_int(x[i] / dj).clamp(-32, 31) + 32) as i8;
            }
        }
        let (mut ql, mut qh) = ([0u8; 128], [0u8; 64]);
        for half in 0..2 {
            let (j, ql, qh) = (
                half * 128,
                &mut ql[half * 64..half * 64 + 64],
                &mut qh[half * 32..half * 32 + 32],
            );
            for i in 0..32 {
                let q = [0, 32, 64, 96].map(|o| l[j + i + o] as u8);
                ql[i] = (q[0] & 0xF) | ((q[2] & 0xF) << 4);
                ql[i + 32] = (q[1] & 0xF) | ((q[3] & 0xF) << 4);
                qh[i] = (q[0] >> 4) | ((q[1] >> 4) << 2) | ((q[2] >> 4) << 4) | ((q[3] >> 4) << 6);
            }
        }
        Self {
            ql,
            qh,
            scales: group_scales,
            d,
        }
    }
}

impl QuantizeBlock for BlockQ8K {
    fn quantize(x: &[f32]) -> Self {
        let x = &block_values(x);
        let (max, amax) = signed_max(x);
        if amax == 0.0 {
            return Self {
                d: 0.0,
                qs: [0; QK_K],
                bsums: [0; 16],
            };
        }
        let iscale = -127.0 / max;
        let qs = x.map(|v| nearest_int(iscale * v).min(127) as i8);
        let mut bsums = [0i16; 16];
        for (j, s) in bsums.iter_mut().enumerate() {
            *s = qs[16 * j..16 * j + 16].iter().map(|&q| q as i16).sum();
        }
        Self {
            d: 1.0 / iscale,
            qs,
            bsums,
        }
    }
}
