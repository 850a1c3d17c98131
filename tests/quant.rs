//! Quantized formats: every format's dequantize against a reference written
//! here from the format's definition in f64 (GGML's `dequantize_row_*` loops,
//! walking the output in order, and FP4 decoded from its bits), on every
//! device, to f32, f16 and bf16; blocks built by hand to reach extreme
//! scales (±0, negative, f16's largest and smallest, inf, NaN), all-min and
//! all-max codes, and random ones. A second, independent check against
//! bytes and values made by gguf-py's NumPy reference is in
//! `quant_fixture` below.

mod common;
use common::{devices, one_at_a_time};
use ferrocm::ops::quant::Q8Activations;
use ferrocm::ops::{DType, QTensor, QuantFormat};
use ferrocm::{bf16, f16};
use rand::{Rng, SeedableRng};

/// A fixture's path: under the source tree this test was built in, else
/// relative to the working directory (a test binary run elsewhere, from a
/// copy of the repository's root).
fn fixture(rel: &str) -> std::path::PathBuf {
    let built = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    if built.exists() { built } else { rel.into() }
}

/// f16 bits to f64.
fn h(bytes: &[u8], at: usize) -> f64 {
    half::f16::from_bits(u16::from_le_bytes([bytes[at], bytes[at + 1]])).to_f64()
}

/// A value and the sum of the magnitudes of the terms it is made of (the
/// scale of its rounding error in f32).
#[derive(Clone, Copy)]
struct Ref {
    v: f64,
    mag: f64,
}

fn prod(a: f64, b: f64) -> Ref {
    Ref {
        v: a * b,
        mag: (a * b).abs(),
    }
}

fn diff(a: f64, b: f64) -> Ref {
    Ref {
        v: a - b,
        mag: a.abs() + b.abs(),
    }
}

/// MXFP4's E2M1 code as a number, from its bits (sign, 2-bit exponent with
/// bias 1, 1-bit mantissa).
fn e2m1(code: u8) -> f64 {
    let sign = if code & 8 != 0 { -1.0 } else { 1.0 };
    let (e, m) = ((code >> 1) & 3, (code & 1) as f64);
    let mag = if e == 0 {
        m * 0.5
    } else {
        2f64.powi(e as i32 - 1) * (1.0 + m / 2.0)
    };
    sign * mag
}

const IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// The 6-bit scale and minimum `j` of Q4_K/Q5_K's 12 scale bytes.
fn scale_min_k4(j: usize, q: &[u8]) -> (f64, f64) {
    if j < 4 {
        ((q[j] & 63) as f64, (q[j + 4] & 63) as f64)
    } else {
        (
            ((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4)) as f64,
            ((q[j + 4] >> 4) | ((q[j] >> 6) << 4)) as f64,
        )
    }
}

/// The reference of one block, in output order.
fn reference(f: QuantFormat, b: &[u8]) -> Vec<Ref> {
    let mut y = Vec::new();
    match f {
        QuantFormat::Q4_0 | QuantFormat::Q4_1 | QuantFormat::Iq4Nl | QuantFormat::Mxfp4 => {
            let qs = match f {
                QuantFormat::Q4_1 => &b[4..20],
                QuantFormat::Mxfp4 => &b[1..17],
                _ => &b[2..18],
            };
            for half in 0..2 {
                for &q in qs {
                    let code = if half == 0 { q & 0xF } else { q >> 4 };
                    y.push(match f {
                        QuantFormat::Q4_0 => prod(code as f64 - 8.0, h(b, 0)),
                        QuantFormat::Q4_1 => {
                            let r = prod(code as f64, h(b, 0));
                            let m = h(b, 2);
                            Ref {
                                v: r.v + m,
                                mag: r.mag + m.abs(),
                            }
                        }
                        QuantFormat::Iq4Nl => prod(h(b, 0), IQ4NL[code as usize] as f64),
                        _ => prod(e2m1(code), 2f64.powi(b[0] as i32 - 127)),
                    });
                }
            }
        }
        QuantFormat::Q5_0 | QuantFormat::Q5_1 => {
            let o = if f == QuantFormat::Q5_1 { 2 } else { 0 };
            let qh = u32::from_le_bytes(b[o + 2..o + 6].try_into().unwrap());
            let qs = &b[o + 6..o + 22];
            for j in 0..32 {
                let low = if j < 16 { qs[j] & 0xF } else { qs[j - 16] >> 4 };
                let code = low as u32 + 16 * ((qh >> j) & 1);
                y.push(if o == 0 {
                    prod(code as f64 - 16.0, h(b, 0))
                } else {
                    let r = prod(code as f64, h(b, 0));
                    Ref {
                        v: r.v + h(b, 2),
                        mag: r.mag + h(b, 2).abs(),
                    }
                });
            }
        }
        QuantFormat::Q8_0 | QuantFormat::Q8_1 => {
            let o = if f == QuantFormat::Q8_1 { 4 } else { 2 };
            for &q in &b[o..o + 32] {
                y.push(prod(q as i8 as f64, h(b, 0)));
            }
        }
        QuantFormat::Q8K => {
            let d = f32::from_le_bytes(b[0..4].try_into().unwrap()) as f64;
            for &q in &b[4..260] {
                y.push(prod(d, q as i8 as f64));
            }
        }
        QuantFormat::Q2K => {
            let (scales, qs) = (&b[0..16], &b[16..80]);
            let (d, min) = (h(b, 80), h(b, 82));
            let mut is = 0;
            for n in 0..2 {
                let q = &qs[32 * n..];
                for shift in [0, 2, 4, 6] {
                    for part in 0..2 {
                        let sc = scales[is];
                        is += 1;
                        let (dl, ml) = (d * (sc & 0xF) as f64, min * (sc >> 4) as f64);
                        for l in 0..16 {
                            let code = (q[l + 16 * part] >> shift) & 3;
                            y.push(diff(dl * code as f64, ml));
                        }
                    }
                }
            }
        }
        QuantFormat::Q3K => {
            let (hm, qs, sb) = (&b[0..32], &b[32..96], &b[96..108]);
            let d_all = h(b, 108);
            // GGML's unpacking of the sixteen 6-bit scales, word by word.
            let mut aux = [0u32; 4];
            for (i, w) in aux.iter_mut().take(3).enumerate() {
                *w = u32::from_le_bytes(sb[4 * i..4 * i + 4].try_into().unwrap());
            }
            let (k1, k2) = (0x0303_0303u32, 0x0f0f_0f0fu32);
            let tmp = aux[2];
            aux[2] = ((aux[0] >> 4) & k2) | (((tmp >> 4) & k1) << 4);
            aux[3] = ((aux[1] >> 4) & k2) | (((tmp >> 6) & k1) << 4);
            aux[0] = (aux[0] & k2) | ((tmp & k1) << 4);
            aux[1] = (aux[1] & k2) | (((tmp >> 2) & k1) << 4);
            let scales: Vec<i8> = aux
                .iter()
                .flat_map(|w| w.to_le_bytes())
                .map(|x| x as i8)
                .collect();
            let mut is = 0;
            let mut m = 1u8;
            for n in 0..2 {
                let q = &qs[32 * n..];
                for shift in [0, 2, 4, 6] {
                    for part in 0..2 {
                        let dl = d_all * (scales[is] as f64 - 32.0);
                        is += 1;
                        for l in 0..16 {
                            let low = ((q[l + 16 * part] >> shift) & 3) as f64;
                            let minus = if hm[l + 16 * part] & m != 0 { 0.0 } else { 4.0 };
                            y.push(prod(dl, low - minus));
                        }
                    }
                    m <<= 1;
                }
            }
        }
        QuantFormat::Q4K | QuantFormat::Q5K => {
            let five = f == QuantFormat::Q5K;
            let (d, min, scales) = (h(b, 0), h(b, 2), &b[4..16]);
            let (qh, qs) = if five {
                (&b[16..48], &b[48..176])
            } else {
                (&b[0..0], &b[16..144])
            };
            let (mut u1, mut u2) = (1u8, 2u8);
            for c in 0..4 {
                let (s1, m1) = scale_min_k4(2 * c, scales);
                let (s2, m2) = scale_min_k4(2 * c + 1, scales);
                let q = &qs[32 * c..32 * c + 32];
                for l in 0..32 {
                    let hi = if five && qh[l] & u1 != 0 { 16.0 } else { 0.0 };
                    y.push(diff(d * s1 * ((q[l] & 0xF) as f64 + hi), min * m1));
                }
                for l in 0..32 {
                    let hi = if five && qh[l] & u2 != 0 { 16.0 } else { 0.0 };
                    y.push(diff(d * s2 * ((q[l] >> 4) as f64 + hi), min * m2));
                }
                u1 <<= 2;
                u2 <<= 2;
            }
        }
        QuantFormat::Q6K => {
            let (ql, qh, sc) = (&b[0..128], &b[128..192], &b[192..208]);
            let d = h(b, 208);
            let mut out = vec![Ref { v: 0.0, mag: 0.0 }; 256];
            for n in 0..2 {
                let (ql, qh, sc, y) = (
                    &ql[64 * n..],
                    &qh[32 * n..],
                    &sc[8 * n..],
                    &mut out[128 * n..],
                );
                for l in 0..32 {
                    let is = l / 16;
                    let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as f64 - 32.0;
                    let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as f64 - 32.0;
                    let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as f64 - 32.0;
                    let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as f64 - 32.0;
                    y[l] = prod(d * sc[is] as i8 as f64, q1);
                    y[l + 32] = prod(d * sc[is + 2] as i8 as f64, q2);
                    y[l + 64] = prod(d * sc[is + 4] as i8 as f64, q3);
                    y[l + 96] = prod(d * sc[is + 6] as i8 as f64, q4);
                }
            }
            y = out;
        }
        QuantFormat::Iq4Xs => {
            let d = h(b, 0);
            let scales_h = u16::from_le_bytes([b[2], b[3]]);
            let (scales_l, qs) = (&b[4..8], &b[8..136]);
            for ib in 0..8 {
                let ls = ((scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) as i32
                    | ((((scales_h >> (2 * ib)) & 3) as i32) << 4);
                let dl = d * (ls - 32) as f64;
                let q = &qs[16 * ib..16 * ib + 16];
                for half in 0..2 {
                    for &x in q {
                        let code = if half == 0 { x & 0xF } else { x >> 4 };
                        y.push(prod(dl, IQ4NL[code as usize] as f64));
                    }
                }
            }
        }
        other => panic!("no reference for {other}"),
    }
    assert_eq!(y.len(), f.block_elems());
    y
}

/// Byte offsets of a format's f16 scales (the f32 scale of Q8_K is handled
/// apart; MXFP4's exponent byte is drawn whole).
fn f16_scales(f: QuantFormat) -> &'static [usize] {
    match f {
        QuantFormat::Q4_0
        | QuantFormat::Q5_0
        | QuantFormat::Q8_0
        | QuantFormat::Iq4Nl
        | QuantFormat::Iq4Xs => &[0],
        QuantFormat::Q4_1
        | QuantFormat::Q5_1
        | QuantFormat::Q8_1
        | QuantFormat::Q4K
        | QuantFormat::Q5K => &[0, 2],
        QuantFormat::Q2K => &[80, 82],
        QuantFormat::Q3K => &[108],
        QuantFormat::Q6K => &[208],
        _ => &[],
    }
}

/// Blocks for `f`: random, all-zero and all-one code bytes in turn, with
/// scales cycling through extreme values and random finite ones.
fn blocks(f: QuantFormat, count: usize, seed: u64) -> Vec<u8> {
    const F16_SCALES: [u16; 11] = [
        0x3c00, 0xbc00, 0x0000, 0x8000, 0x7bff, 0xfbff, 0x0001, 0x0400, 0x7c00, 0x7e00, 0x2e66,
    ];
    const F32_SCALES: [f32; 7] = [1.0, -1.5e38, 1e-45, 0.0, f32::NAN, f32::INFINITY, 3.25e-3];
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let bb = f.block_bytes();
    let mut out = vec![0u8; count * bb];
    for (i, b) in out.chunks_exact_mut(bb).enumerate() {
        match i % 3 {
            0 => rng.fill(b),
            1 => b.fill(0),
            _ => b.fill(0xff),
        }
        for (k, &at) in f16_scales(f).iter().enumerate() {
            let bits = if (i + k) % 4 == 3 {
                // A random finite scale of either sign.
                let v: f32 = rng.random_range(-4.0..4.0);
                half::f16::from_f32(v).to_bits()
            } else {
                F16_SCALES[(i * 7 + k * 3) % F16_SCALES.len()]
            };
            b[at..at + 2].copy_from_slice(&bits.to_le_bytes());
        }
        if f == QuantFormat::Q8K {
            b[0..4].copy_from_slice(&F32_SCALES[i % F32_SCALES.len()].to_le_bytes());
        }
        if f == QuantFormat::Mxfp4 && i % 5 == 4 {
            b[0] = [0u8, 1, 2, 127, 254, 255][(i / 5) % 6];
        }
    }
    out
}

/// Whether `got` (f32) is the reference value within f32 rounding of its
/// terms: exactly NaN where the reference is, ±inf where it overflows f32.
fn close(got: f32, r: Ref) -> bool {
    if r.v.is_nan() {
        return got.is_nan();
    }
    if r.v.abs() > f32::MAX as f64 || r.v.is_infinite() {
        return got.is_infinite() && (got > 0.0) == (r.v > 0.0);
    }
    (got as f64 - r.v).abs() <= 2.0 * f32::EPSILON as f64 * r.mag + f64::from(f32::from_bits(1))
}

#[test]
fn dequantize_matches_the_definition_on_every_device() {
    let _turn = one_at_a_time();
    for f in QuantFormat::ALL {
        // 7 rows of 3 blocks: odd counts, 21 blocks reaching every scale kind.
        let (rows, per_row) = (7, 3);
        let bytes = blocks(f, rows * per_row, f.ggml_type() as u64);
        let refs: Vec<Ref> = bytes
            .chunks_exact(f.block_bytes())
            .flat_map(|b| reference(f, b))
            .collect();
        let shape = [rows, per_row * f.block_elems()];
        let mut cpu: Option<Vec<f32>> = None;
        for dev in devices() {
            let w = QTensor::from_bytes(&bytes, f, &shape, &dev).unwrap();
            let got = w.dequantize::<f32>().unwrap().to_vec().unwrap();
            assert_eq!(got.len(), refs.len());
            // Second check: every device's kernels give the Cpu's values
            // bit for bit (both round each value once, as group16
            // defines it).
            match &cpu {
                None => cpu = Some(got.clone()),
                Some(c) => {
                    for (i, (&g, &c)) in got.iter().zip(c).enumerate() {
                        assert!(
                            g.to_bits() == c.to_bits() || (g.is_nan() && c.is_nan()),
                            "{f} on {dev}: element {i}: {g:e}, the Cpu's {c:e}"
                        );
                    }
                }
            }
            for (i, (&g, &r)) in got.iter().zip(&refs).enumerate() {
                assert!(
                    close(g, r),
                    "{f} on {dev}: element {i}: got {g:e}, reference {:e} (terms {:e})",
                    r.v,
                    r.mag
                );
            }
            // f16 and bf16: the f32 values rounded once (NaN stays NaN).
            let hs = w.dequantize::<f16>().unwrap().to_vec().unwrap();
            let bs = w.dequantize::<bf16>().unwrap().to_vec().unwrap();
            for (i, &g) in got.iter().enumerate() {
                let (eh, eb) = (f16::from_f32(g), bf16::from_f32(g));
                assert!(
                    hs[i].to_bits() == eh.to_bits() || (g.is_nan() && hs[i].is_nan()),
                    "{f} on {dev} f16: element {i}"
                );
                assert!(
                    bs[i].to_bits() == eb.to_bits() || (g.is_nan() && bs[i].is_nan()),
                    "{f} on {dev} bf16: element {i}"
                );
            }
        }
    }
}

/// Quantized embedding: rows of a 7-row table at ids of shape [2, 3] (with
/// repeats, the first and last row), u8, u32 and i64 ids, every format on
/// every device, against the f64 reference of each row's blocks; f16/bf16
/// rounded once from those values; bad ids, empty ids, a 3-D table and a
/// float dtype refused or handled as the dense embedding does.
#[test]
fn embedding_matches_the_definition_on_every_device() {
    let _turn = one_at_a_time();
    use ferrocm::ops::quant::Weight;
    let (rows, per_row) = (7usize, 2usize);
    let picks = [6usize, 0, 3, 3, 1, 6];
    for f in QuantFormat::ALL {
        let bytes = blocks(f, rows * per_row, 100 + f.ggml_type() as u64);
        let cols = per_row * f.block_elems();
        let row_refs: Vec<Vec<Ref>> = bytes
            .chunks_exact(per_row * f.block_bytes())
            .map(|r| {
                r.chunks_exact(f.block_bytes())
                    .flat_map(|b| reference(f, b))
                    .collect()
            })
            .collect();
        for dev in devices() {
            let w = QTensor::from_bytes(&bytes, f, &[rows, cols], &dev).unwrap();
            let ids32: Vec<u32> = picks.iter().map(|&p| p as u32).collect();
            let ids64: Vec<i64> = picks.iter().map(|&p| p as i64).collect();
            let ids8: Vec<u8> = picks.iter().map(|&p| p as u8).collect();
            let e32 = w
                .embedding::<f32, u32>(&ferrocm::Tensor::from_slice(&ids32, &[2, 3], &dev).unwrap())
                .unwrap();
            assert_eq!(e32.shape(), &[2, 3, cols]);
            let got = e32.to_vec().unwrap();
            for (k, &p) in picks.iter().enumerate() {
                for (j, &r) in row_refs[p].iter().enumerate() {
                    let g = got[k * cols + j];
                    assert!(
                        close(g, r),
                        "{f} on {dev}: id {p} at {k}, element {j}: {g:e} vs {:e}",
                        r.v
                    );
                }
            }
            let e64 = w
                .embedding::<f32, i64>(&ferrocm::Tensor::from_slice(&ids64, &[6], &dev).unwrap())
                .unwrap();
            let e8 = Weight::<bf16>::Quantized(w.clone())
                .embedding(&ferrocm::Tensor::from_slice(&ids8, &[6], &dev).unwrap())
                .unwrap();
            let same_nan =
                |a: f32, b: f32| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
            let (v64, v8) = (e64.to_vec().unwrap(), e8.to_vec().unwrap());
            for (i, &g) in got.iter().enumerate() {
                assert!(same_nan(v64[i], g), "{f} on {dev}: i64 ids, element {i}");
                let b = bf16::from_f32(g);
                assert!(
                    v8[i].to_bits() == b.to_bits() || (g.is_nan() && v8[i].is_nan()),
                    "{f} on {dev}: bf16, element {i}"
                );
            }
        }
    }
    for dev in devices() {
        let f = QuantFormat::Q4_0;
        let w = QTensor::from_bytes(&blocks(f, 4, 1), f, &[4, 32], &dev).unwrap();
        // An id past the table, or negative: the dense embedding's error.
        for bad in [4i64, -1] {
            let ids = ferrocm::Tensor::from_slice(&[0i64, bad], &[2], &dev).unwrap();
            let e = w
                .embedding::<f32, i64>(&ids)
                .and_then(|e| e.to_vec())
                .unwrap_err();
            assert!(
                e.to_string().contains(&format!(
                    "id {bad} at position 1 is out of range for a dim of size 4"
                )),
                "{dev}: {e}"
            );
        }
        let none = ferrocm::Tensor::<u32>::zeros(&[0, 5], &dev).unwrap();
        assert_eq!(w.embedding::<f16, u32>(&none).unwrap().shape(), &[0, 5, 32]);
        let ids = ferrocm::Tensor::from_slice(&[1u32], &[1], &dev).unwrap();
        assert!(w.embedding::<u32, u32>(&ids).is_err());
        let w3 = QTensor::from_bytes(&blocks(f, 4, 1), f, &[2, 2, 32], &dev).unwrap();
        assert!(
            w3.embedding::<f32, u32>(&ids)
                .unwrap_err()
                .to_string()
                .contains("[2, 2, 32]")
        );
        if dev != ferrocm::Device::Cpu {
            let cpu_ids =
                ferrocm::Tensor::from_slice(&[1u32], &[1], &ferrocm::Device::Cpu).unwrap();
            assert!(w.embedding::<f32, u32>(&cpu_ids).is_err());
        }
    }
}

#[test]
fn dequantize_through_dyn_tensor_and_unsupported_dtypes() {
    let _turn = one_at_a_time();
    let bytes = blocks(QuantFormat::Q4K, 2, 1);
    for dev in devices() {
        let d = ferrocm::ops::DynTensor::from_blocks(&bytes, QuantFormat::Q4K, &[2, 256], &dev)
            .unwrap();
        let x = d.dequantize(DType::BF16).unwrap();
        assert_eq!(
            (x.dtype().unwrap(), x.shape()),
            (DType::BF16, &[2usize, 256][..])
        );
        assert!(d.dequantize(DType::U8).is_err(), "u8 on {dev}");
        let q = QTensor::from_dyn(&d).unwrap();
        assert!(q.dequantize::<i64>().is_err());
        // Views of block storage are refused (a block is not an element).
        assert!(d.narrow(0, 1, 1).is_err());
    }
}

#[test]
fn formats_table() {
    let _turn = one_at_a_time();
    // GGML's block sizes and type ids (ggml.h, ggml-common.h).
    let want = [
        ("q4_0", 2, 32, 18),
        ("q4_1", 3, 32, 20),
        ("q5_0", 6, 32, 22),
        ("q5_1", 7, 32, 24),
        ("q8_0", 8, 32, 34),
        ("q8_1", 9, 32, 36),
        ("q2_K", 10, 256, 84),
        ("q3_K", 11, 256, 110),
        ("q4_K", 12, 256, 144),
        ("q5_K", 13, 256, 176),
        ("q6_K", 14, 256, 210),
        ("q8_K", 15, 256, 292),
        ("iq4_nl", 20, 32, 18),
        ("iq4_xs", 23, 256, 136),
        ("mxfp4", 39, 32, 17),
    ];
    for (f, (name, id, elems, bytes)) in QuantFormat::ALL.into_iter().zip(want) {
        assert_eq!(
            (f.name(), f.ggml_type(), f.block_elems(), f.block_bytes()),
            (name, id, elems, bytes)
        );
        assert_eq!(QuantFormat::from_ggml_type(id), Some(f));
        assert_eq!(name.to_uppercase().parse::<QuantFormat>().unwrap(), f);
    }
    assert_eq!(QuantFormat::from_ggml_type(1), None); // f16 is dense
    assert_eq!(QuantFormat::Q8K.bytes_for(usize::MAX - 255), None); // (2^56 - 1) blocks of 292 bytes overflow
}

#[test]
fn empty_and_multi_dim() {
    let _turn = one_at_a_time();
    for dev in devices() {
        let w = QTensor::from_bytes(&[], QuantFormat::Q8_0, &[0, 64], &dev).unwrap();
        assert_eq!(w.dequantize::<f32>().unwrap().shape(), &[0, 64]);
        // Rank 3 (stacked experts): rows are the leading dims' product.
        let bytes = blocks(QuantFormat::Q5_0, 6, 9);
        let w = QTensor::from_bytes(&bytes, QuantFormat::Q5_0, &[2, 3, 32], &dev).unwrap();
        assert_eq!((w.rows(), w.cols()), (6, 32));
        assert_eq!(w.dequantize::<f32>().unwrap().shape(), &[2, 3, 32]);
    }
}

/// Random blocks of 13 formats and their values from gguf-py's NumPy
/// reference (tests/fixtures/quant/make_gguf_py_fixture.py says how they were
/// made): equal to f32 rounding on every device.
#[test]
fn quant_fixture() {
    let _turn = one_at_a_time();
    let data = std::fs::read(fixture("tests/fixtures/quant/gguf_py_dequant.bin")).unwrap();
    assert_eq!(&data[0..4], b"FQD1");
    let u32_at = |at: usize| u32::from_le_bytes(data[at..at + 4].try_into().unwrap()) as usize;
    let entries = u32_at(4);
    let mut at = 8;
    let mut seen = Vec::new();
    for _ in 0..entries {
        let f = QuantFormat::from_ggml_type(u32_at(at) as u32).unwrap();
        let n = u32_at(at + 4);
        at += 8;
        let bytes = &data[at..at + n * f.block_bytes()];
        at += bytes.len();
        let want: Vec<f32> = data[at..at + 4 * n * f.block_elems()]
            .as_chunks::<4>()
            .0
            .iter()
            .map(|c| f32::from_le_bytes(*c))
            .collect();
        at += 4 * want.len();
        for dev in devices() {
            let got = QTensor::from_bytes(bytes, f, &[n * f.block_elems()], &dev)
                .unwrap()
                .dequantize::<f32>()
                .unwrap()
                .to_vec()
                .unwrap();
            for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                // NumPy rounds each product as ggml's C does; a GPU compiler
                // may fuse `d * q - m` into one FMA: a rounding of the terms
                // apart, bounded by the block's largest value.
                let block = &want[i / f.block_elems() * f.block_elems()..][..f.block_elems()];
                let scale = block.iter().fold(f32::MIN_POSITIVE, |m, v| m.max(v.abs()));
                assert!(
                    (g - w).abs() <= 2.0 * f32::EPSILON * scale,
                    "{f} on {dev}: element {i}: got {g:e}, gguf-py {w:e}"
                );
            }
        }
        seen.push(f);
    }
    assert_eq!(at, data.len());
    assert_eq!(seen.len(), 13);
}

/// GGML's reference quantizers, bit for bit: rows and their blocks made by
/// gguf-py's quantizers (written to match ggml's `quantize_row_*_ref`; see
/// tests/fixtures/quant/make_gguf_py_fixture.py), from f32 on every device,
/// and from f16/bf16 through their f32 values.
#[test]
fn quantize_matches_ggml_reference() {
    let _turn = one_at_a_time();
    let data = std::fs::read(fixture("tests/fixtures/quant/gguf_py_quantize.bin")).unwrap();
    assert_eq!(&data[0..4], b"FQQ1");
    let u32_at = |at: usize| u32::from_le_bytes(data[at..at + 4].try_into().unwrap()) as usize;
    let mut at = 8;
    let mut q8_0_values = Vec::new();
    for _ in 0..u32_at(4) {
        let f = QuantFormat::from_ggml_type(u32_at(at) as u32).unwrap();
        let n = u32_at(at + 4);
        at += 8;
        let values: Vec<f32> = data[at..at + 4 * n]
            .as_chunks::<4>()
            .0
            .iter()
            .map(|c| f32::from_le_bytes(*c))
            .collect();
        at += 4 * n;
        let want = &data[at..at + f.bytes_for(n).unwrap()];
        at += want.len();
        for dev in devices() {
            let x = ferrocm::Tensor::from_slice(&values, &[n / 64, 64], &dev).unwrap();
            let got = QTensor::quantize(&x, f).unwrap();
            assert_eq!(got.device(), &dev);
            let got = got.to_bytes().unwrap();
            for (b, (g, w)) in got
                .chunks(f.block_bytes())
                .zip(want.chunks(f.block_bytes()))
                .enumerate()
            {
                assert_eq!(
                    g,
                    w,
                    "{f} on {dev}: block {b} (values {:?})",
                    &values[32 * b..32 * b + 32]
                );
            }
        }
        if f == QuantFormat::Q8_0 {
            q8_0_values = values;
        }
    }
    assert_eq!(at, data.len());
    // Q8_1 is Q8_0's codes and scale plus s = d * sum(codes) (as f16).
    let x = ferrocm::Tensor::from_slice(&q8_0_values, &[q8_0_values.len()], &ferrocm::Device::Cpu)
        .unwrap();
    let q8_0 = QTensor::quantize(&x, QuantFormat::Q8_0)
        .unwrap()
        .to_bytes()
        .unwrap();
    let q8_1 = QTensor::quantize(&x, QuantFormat::Q8_1)
        .unwrap()
        .to_bytes()
        .unwrap();
    for (i, (a, b)) in q8_0.chunks(34).zip(q8_1.chunks(36)).enumerate() {
        assert_eq!((&a[0..2], &a[2..]), (&b[0..2], &b[4..]), "Q8_1 block {i}");
        let amax = q8_0_values[32 * i..32 * i + 32]
            .iter()
            .fold(0f32, |m, v| m.max(v.abs()));
        let sum: i32 = b[4..].iter().map(|&q| q as i8 as i32).sum();
        let s = half::f16::from_f32(sum as f32 * (amax / 127.0));
        assert_eq!(
            u16::from_le_bytes([b[2], b[3]]),
            s.to_bits(),
            "Q8_1 block {i}: s"
        );
    }
}

#[test]
fn quantize_round_trips_within_half_a_step_and_refuses_bad_input() {
    let _turn = one_at_a_time();
    let values: Vec<f32> = (0..256)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
        .collect();
    for dev in devices() {
        let x = ferrocm::Tensor::from_slice(&values, &[4, 64], &dev).unwrap();
        for f in [
            QuantFormat::Q4_0,
            QuantFormat::Q4_1,
            QuantFormat::Q5_0,
            QuantFormat::Q5_1,
            QuantFormat::Q8_0,
            QuantFormat::Q8_1,
        ] {
            let back = QTensor::quantize(&x, f)
                .unwrap()
                .dequantize::<f32>()
                .unwrap()
                .to_vec()
                .unwrap();
            // Each block's step: its range over the code count (and the f16
            // scale's rounding); a value is within half a step and a bit,
            // but Q4_0/Q5_0 map the block's extreme to the code -8 (-16) and
            // clip the other side at 7 (15) steps: a full step there.
            for (b, (xs, ys)) in values.chunks(32).zip(back.chunks(32)).enumerate() {
                let (lo, hi) = xs
                    .iter()
                    .fold((f32::MAX, f32::MIN), |(l, h), &v| (l.min(v), h.max(v)));
                let amax = lo.abs().max(hi.abs());
                let step = match f {
                    QuantFormat::Q4_0 => amax / 8.0,
                    QuantFormat::Q5_0 => amax / 16.0,
                    QuantFormat::Q4_1 => (hi - lo) / 15.0,
                    QuantFormat::Q5_1 => (hi - lo) / 31.0,
                    _ => amax / 127.0,
                };
                let reach = if matches!(f, QuantFormat::Q4_0 | QuantFormat::Q5_0) {
                    1.0
                } else {
                    0.5
                };
                for (x, y) in xs.iter().zip(ys) {
                    assert!(
                        (x - y).abs() <= reach * step + 2e-3 * amax,
                        "{f} on {dev} block {b}: {x} -> {y}"
                    );
                }
            }
        }
        let h = x.to_dtype::<bf16>().unwrap();
        assert_eq!(
            QTensor::quantize(&h, QuantFormat::Q8_0).unwrap().shape(),
            &[4, 64]
        );
        let ints = ferrocm::Tensor::<u32>::zeros(&[32], &dev).unwrap();
        assert!(QTensor::quantize(&ints, QuantFormat::Q8_0).is_err());
        let odd = ferrocm::Tensor::<f32>::zeros(&[2, 48], &dev).unwrap();
        assert!(QTensor::quantize(&odd, QuantFormat::Q4_0).is_err());
        // No quantizer for IQ4_NL; Q4_K's blocks of 256 do not fit rows of 64.
        assert!(QTensor::quantize(&x, QuantFormat::Iq4Nl).is_err());
        assert!(QTensor::quantize(&x, QuantFormat::Q4K).is_err());
    }
}

/// The K-quants' and Q8_K's quantizers against GGML's own C, bit for bit:
/// rows and the blocks `quantize_row_q*_K_ref` made of them
/// (tests/fixtures/quant/make_ggml_kquants_fixture.c): weights-like, small,
/// offset, all-positive, all-negative, zero, constant, an outlier past f16,
/// tiny (below GGML's all-zero threshold), sparse, tied and heavy-tailed
/// blocks, quantized from f32 on every device.
#[test]
fn kquantize_matches_ggml_c() {
    let _turn = one_at_a_time();
    let data = std::fs::read(fixture("tests/fixtures/quant/ggml_kquants.bin")).unwrap();
    assert_eq!(&data[0..4], b"FQK1");
    let u32_at = |at: usize| u32::from_le_bytes(data[at..at + 4].try_into().unwrap()) as usize;
    let n = u32_at(4);
    let values: Vec<f32> = data[8..8 + 4 * n]
        .as_chunks::<4>()
        .0
        .iter()
        .map(|c| f32::from_le_bytes(*c))
        .collect();
    let mut at = 8 + 4 * n;
    let entries = u32_at(at);
    at += 4;
    let mut seen = Vec::new();
    for _ in 0..entries {
        let f = QuantFormat::from_ggml_type(u32_at(at) as u32).unwrap();
        at += 4;
        let want = &data[at..at + f.bytes_for(n).unwrap()];
        at += want.len();
        seen.push(f);
        for dev in devices() {
            let x = ferrocm::Tensor::from_slice(&values, &[n / 256, 256], &dev).unwrap();
            let got = QTensor::quantize(&x, f).unwrap().to_bytes().unwrap();
            for (b, (g, w)) in got
                .chunks(f.block_bytes())
                .zip(want.chunks(f.block_bytes()))
                .enumerate()
            {
                assert_eq!(g, w, "{f} on {dev}: block {b}");
            }
        }
    }
    assert_eq!(at, data.len());
    use QuantFormat::*;
    assert_eq!(seen, [Q2K, Q3K, Q4K, Q5K, Q6K, Q8K]);
}

/// Blocks with finite scales only (the products' tests): f16 scales in
/// ±[1/64, 2], Q8_K's f32 scale likewise, MXFP4 exponents near 1.0.
fn finite_blocks(f: QuantFormat, count: usize, seed: u64) -> Vec<u8> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut out = vec![0u8; count * f.block_bytes()];
    rng.fill(&mut out[..]);
    for b in out.chunks_exact_mut(f.block_bytes()) {
        let mut scale = || {
            let v: f32 = rng.random_range(1.0 / 64.0..2.0);
            if rng.random_bool(0.5) { -v } else { v }
        };
        for &at in f16_scales(f) {
            let s = half::f16::from_f32(scale()).to_bits();
            b[at..at + 2].copy_from_slice(&s.to_le_bytes());
        }
        if f == QuantFormat::Q8K {
            b[0..4].copy_from_slice(&scale().to_le_bytes());
        }
        if f == QuantFormat::Mxfp4 {
            b[0] = 120 + (b[0] % 16);
        }
    }
    out
}

/// `x · Wᵀ` against f64 sums of the reference weights, for every format on
/// every device: 1, 3 and 8 rows of x (the matrix-vector kernels: one row
/// per pass, one pass of four with a row repeated, two passes of four) and
/// 33 (the matrix product on the dequantized weight, or on a Cpu with
/// AVX-512 VNNI the integer tiles on x's 8-bit form); f32 for every format,
/// f16 and bf16 for three. With 1 to 8 rows (and where
/// `rounds_x_to_8_bits` says so) the products are defined on x
/// rounded to 8 bits per group of 16, so the f64 sum takes x's codes times
/// their group's scale (`Q8Activations`, itself checked against the
/// rounding's definition in `q8_activations_match_the_definition`).
/// Bound: recursive summation's `k u Σ|w x|` plus the one rounding to the
/// output type; with 1 to 8 rows each weight is `scale * code + offset`,
/// whose two products may cancel up to the size of the largest weight of
/// its 32-element unit, and each group's `d Σ codes` is one f32 product.
#[test]
fn forward_matches_f64_sums() {
    let _turn = one_at_a_time();
    check_forward(5, 1024, &[1, 3, 5, 8, 33], true);
}

/// Rows long enough that each workitem of the matrix-vector kernels takes
/// several rounds of units in flight and a remainder (wave 32 and 64),
/// for 1, 2, 4 and 8 rows of `x` per pass.
#[test]
fn forward_matches_f64_sums_on_long_rows() {
    let _turn = one_at_a_time();
    check_forward(3, 37 * 256, &[1, 2, 4, 7, 8], false);
}

/// Rows of an odd number of 32-element units (the formats of 32-element
/// blocks; the others' blocks do not divide them): the Cpu's one-row pass
/// takes units in pairs, two sums, and the last unit alone.
#[test]
fn forward_matches_f64_sums_on_odd_unit_counts() {
    let _turn = one_at_a_time();
    check_forward(3, 37 * 32, &[1, 3, 8], false);
}

/// More rows of x than the matrix-vector products take, with more weight
/// rows than one of the Cpu's panels (64): two whole panels and a partial
/// one, each writing its own columns of y; on a Cpu with AVX-512 VNNI,
/// eight tiles of 16 rows and a partial one, in a pass of 8 rows of x and
/// one of 1 (ops' unit tests check the f32 panels there).
#[test]
fn forward_matches_f64_sums_across_cpu_panels() {
    let _turn = one_at_a_time();
    check_forward(131, 256, &[9], false);
}

/// `q.forward(x)` for `m` in `ms` (every format whose blocks divide `k`)
/// against f64 sums of the definition's weights times `x`, within the
/// bounds of `x`'s 8-bit rounding (decode) or the matrix product's.
fn check_forward(n: usize, k: usize, ms: &[usize], all_dtypes: bool) {
    let mmax = *ms.iter().max().unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(77);
    let xs: Vec<f32> = (0..mmax * k)
        .map(|_| rng.random_range(-1.0f32..1.0))
        .collect();
    for f in QuantFormat::ALL {
        if !k.is_multiple_of(f.block_elems()) {
            continue;
        }
        let bytes = finite_blocks(f, n * k / f.block_elems(), 1000 + f.ggml_type() as u64);
        let w: Vec<f64> = bytes
            .chunks_exact(f.block_bytes())
            .flat_map(|b| reference(f, b))
            .map(|r| r.v)
            .collect();
        let dtypes: &[DType] = if all_dtypes
            && matches!(f, QuantFormat::Q4K | QuantFormat::Q8_0 | QuantFormat::Mxfp4)
        {
            &[DType::F32, DType::F16, DType::BF16]
        } else {
            &[DType::F32]
        };
        for dev in devices() {
            let q = QTensor::from_bytes(&bytes, f, &[n, k], &dev).unwrap();
            for &dt in dtypes {
                for &m in ms {
                    let x = ferrocm::Tensor::from_slice(&xs[..m * k], &[m, k], &dev)
                        .unwrap()
                        .to_dyn()
                        .to_dtype(dt)
                        .unwrap();
                    // Decode, and a prompt on a Cpu with AVX-512 VNNI.
                    let eight_bit = q.rounds_x_to_8_bits(m);
                    // The matrix-vector products' x: codes times scales.
                    let xv = if eight_bit {
                        let (codes, scales) = match dt {
                            DType::F32 => Q8Activations::quantize(&x.typed::<f32>().unwrap()),
                            DType::F16 => Q8Activations::quantize(&x.typed::<f16>().unwrap()),
                            _ => Q8Activations::quantize(&x.typed::<bf16>().unwrap()),
                        }
                        .unwrap()
                        .to_host()
                        .unwrap();
                        codes
                            .iter()
                            .enumerate()
                            .map(|(i, &c)| c as f64 * scales[i / 16] as f64)
                            .collect()
                    } else {
                        x.to_f64_vec().unwrap()
                    };
                    let y = match dt {
                        DType::F32 => q.forward(&x.typed::<f32>().unwrap()).unwrap().to_dyn(),
                        DType::F16 => q.forward(&x.typed::<f16>().unwrap()).unwrap().to_dyn(),
                        _ => q.forward(&x.typed::<bf16>().unwrap()).unwrap().to_dyn(),
                    };
                    assert_eq!(y.shape(), &[m, n]);
                    let y = y.to_f64_vec().unwrap();
                    let unit = match dt {
                        DType::F32 => 2f64.powi(-24),
                        DType::F16 => 2f64.powi(-11),
                        _ => 2f64.powi(-8),
                    };
                    let u = 2f64.powi(-24);
                    for c in 0..m {
                        for r in 0..n {
                            let mut q8 = 0.0;
                            if eight_bit {
                                for j in 0..k {
                                    let unit_max = w[r * k + j / 32 * 32..][..32]
                                        .iter()
                                        .fold(0.0f64, |a, v| a.max(v.abs()));
                                    let xj = xv[c * k + j].abs();
                                    q8 += 2.0 * u * w[r * k + j].abs() * xj
                                        + 16.0 * u * unit_max * xj;
                                }
                            }
                            let terms = (0..k).map(|j| w[r * k + j] * xv[c * k + j]);
                            let (want, mag) =
                                terms.fold((0.0, 0.0), |(s, a), t| (s + t, a + t.abs()));
                            // The dense matrix product multiplies weights
                            // rounded to x's dtype.
                            let wround = if !eight_bit && dt != DType::F32 {
                                unit * mag
                            } else {
                                0.0
                            };
                            let tol = (k as f64) * 2f64.powi(-24) * mag
                                + unit * want.abs()
                                + wround
                                + q8
                                + 1e-30;
                            let got = y[c * n + r];
                            assert!(
                                (got - want).abs() <= tol,
                                "{f} {dt:?} m={m} on {dev}: y[{c}, {r}] = {got}, f64 {want} (tol {tol:e})"
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn forward_refuses_bad_input() {
    let _turn = one_at_a_time();
    let dev = ferrocm::Device::Cpu;
    let q = QTensor::from_bytes(
        &finite_blocks(QuantFormat::Q4_0, 4, 3),
        QuantFormat::Q4_0,
        &[2, 64],
        &dev,
    )
    .unwrap();
    let x = ferrocm::Tensor::<f32>::zeros(&[1, 32], &dev).unwrap();
    let e = q.forward(&x).unwrap_err().to_string();
    assert_eq!(e, "QTensor::forward: shape mismatch [1, 32] vs [2, 64]");
    let xi = ferrocm::Tensor::<u32>::zeros(&[1, 64], &dev).unwrap();
    assert!(q.forward(&xi).is_err());
    let emu = ferrocm::Device::emulator(ferrocm::WaveSize::Wave32);
    let xe = ferrocm::Tensor::<f32>::zeros(&[1, 64], &emu).unwrap();
    assert!(q.forward(&xe).unwrap_err().to_string().contains("devices"));
    let q3 = QTensor::from_bytes(
        &finite_blocks(QuantFormat::Q4_0, 4, 3),
        QuantFormat::Q4_0,
        &[2, 1, 64],
        &dev,
    )
    .unwrap();
    assert!(
        q3.forward(&ferrocm::Tensor::<f32>::zeros(&[1, 64], &dev).unwrap())
            .is_err()
    );
    // No rows: an empty result.
    let x0 = ferrocm::Tensor::<f32>::zeros(&[0, 64], &dev).unwrap();
    assert_eq!(q.forward(&x0).unwrap().shape(), &[0, 2]);
}

/// `x` starting off a 16-byte boundary takes the kernels' scalar loads;
/// the result is bit-identical to the aligned word loads.
#[test]
fn forward_with_x_off_a_word_boundary() {
    let _turn = one_at_a_time();
    let (n, k) = (3usize, 256usize);
    let bytes = finite_blocks(QuantFormat::Q4K, n * k / 256, 5);
    let xs: Vec<f32> = (0..=k)
        .map(|i| ((i * 7919) % 113) as f32 / 50.0 - 1.0)
        .collect();
    for dev in devices() {
        let q = QTensor::from_bytes(&bytes, QuantFormat::Q4K, &[n, k], &dev).unwrap();
        let whole = ferrocm::Tensor::from_slice(&xs, &[k + 1], &dev).unwrap();
        let shifted = whole.narrow(0, 1, k).unwrap().reshape(&[1, k]).unwrap();
        assert!(shifted.is_contiguous() && shifted.layout().offset() == 1);
        let aligned = ferrocm::Tensor::from_slice(&xs[1..], &[1, k], &dev).unwrap();
        let (a, b) = (
            q.forward(&shifted).unwrap().to_vec().unwrap(),
            q.forward(&aligned).unwrap().to_vec().unwrap(),
        );
        assert_eq!(
            a.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            b.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            "{dev}"
        );
    }
}

/// Every unit of every format in 8-bit form (what the matrix-vector kernels
/// multiply): `scale * code + offset` against the f64 reference of the same
/// element, within the two roundings of `scale` and `offset` and the one of
/// the f64 reference's f32 value; the units of a block cover each of its
/// groups once, and the values [`unit_half`] makes of them are
/// `group16`'s to the bit, as are `group16_wide`'s. Blocks with extreme
/// scales included, in a 16-byte aligned array (the loads the units use
/// assume one).
#[test]
fn units_match_the_definition() {
    let _turn = one_at_a_time();
    use ferrocm::kernels::quant::blocks::*;
    fn check<B: QuantBlock>(f: QuantFormat, bytes: &[u8]) {
        let count = bytes.len() / f.block_bytes();
        let mut words = vec![0u128; bytes.len().div_ceil(16)];
        bytemuck::cast_slice_mut::<u128, u8>(&mut words)[..bytes.len()].copy_from_slice(bytes);
        let blocks = words.as_ptr() as *const B;
        for bi in 0..count {
            let b = unsafe { &*blocks.add(bi) };
            let want = reference(f, &bytes[bi * f.block_bytes()..][..f.block_bytes()]);
            let mut seen = vec![0u32; B::GROUPS];
            for u in 0..B::UNITS {
                let unit = unsafe { b.unit8(u) };
                // The form the kernels read with two or more rows of x, to
                // the bit (NaN scales included).
                let bits = |x: &Unit8| {
                    let f = |v: [f32; 2]| v.map(f32::to_bits);
                    (x.codes, f(x.scale), f(x.offset), x.group)
                };
                assert_eq!(
                    bits(&unsafe { b.unit8_shared(u) }),
                    bits(&unit),
                    "{f} block {bi} unit {u}: unit8_shared"
                );
                if B::PAIRED_X {
                    // The kernels find both halves' codes of x in the paired
                    // copy by the unit's number.
                    assert_eq!(unit.group, [2 * u as u32, 2 * u as u32 + 1], "{f} unit {u}");
                }
                if B::PAIRED_GROUPS {
                    // The kernels load both halves' x scales as one pair.
                    assert!(
                        unit.group[0] % 2 == 0 && unit.group[1] == unit.group[0] + 1,
                        "{f} unit {u}: groups {:?} are not a pair",
                        unit.group
                    );
                }
                for h in 0..2 {
                    let g = unit.group[h] as usize;
                    seen[g] += 1;
                    // What the Cpu's prefill panels store: group16's
                    // values to the bit (zeros' signs and NaNs' bits
                    // included).
                    let (from_unit, defined) = (unit_half::<B>(&unit, h), b.group16(g));
                    for l in 0..16 {
                        assert_eq!(
                            from_unit[l].to_bits(),
                            defined[l].to_bits(),
                            "{f} block {bi} unit {u} half {h}: element {} from the unit {:e}, group16 {:e}",
                            16 * g + l,
                            from_unit[l],
                            defined[l]
                        );
                    }
                    for l in 0..16 {
                        let code = (unit.codes[4 * h + l / 4] >> (8 * (l % 4))) as u8 as i8 as f64;
                        let (s, o) = (unit.scale[h] as f64, unit.offset[h] as f64);
                        let got = s * code + o;
                        let r = want[16 * g + l];
                        let tol = 2f64.powi(-23) * ((s * code).abs() + o.abs() + r.mag);
                        // An infinite scale makes an element NaN where
                        // the definition may give ±inf: non-finite either
                        // way, as is the product it feeds.
                        let ok = (got - r.v).abs() <= tol
                            || got == r.v
                            || (!got.is_finite() && !r.v.is_finite());
                        assert!(
                            ok,
                            "{f} block {bi} unit {u} half {h}: element {} = {s} * {code} + {o} = {got}, reference {}",
                            16 * g + l,
                            r.v
                        );
                    }
                }
            }
            assert!(seen.iter().all(|&c| c == 1), "{f}: groups covered {seen:?}");
            // What the dequantize kernels read: group16's values, to the
            // bit, from wide loads.
            for g in 0..B::GROUPS {
                let (wide, defined) = (unsafe { b.group16_wide(g) }, b.group16(g));
                for l in 0..16 {
                    assert_eq!(
                        wide[l].to_bits(),
                        defined[l].to_bits(),
                        "{f} block {bi} group {g}: element {l} group16_wide {:e}, group16 {:e}",
                        wide[l],
                        defined[l]
                    );
                }
            }
        }
    }
    for f in QuantFormat::ALL {
        let mut bytes = blocks(f, 24, 7 + f.ggml_type() as u64);
        bytes.extend(finite_blocks(f, 24, 70 + f.ggml_type() as u64));
        match f {
            QuantFormat::Q4_0 => check::<BlockQ4_0>(f, &bytes),
            QuantFormat::Q4_1 => check::<BlockQ4_1>(f, &bytes),
            QuantFormat::Q5_0 => check::<BlockQ5_0>(f, &bytes),
            QuantFormat::Q5_1 => check::<BlockQ5_1>(f, &bytes),
            QuantFormat::Q8_0 => check::<BlockQ8_0>(f, &bytes),
            QuantFormat::Q8_1 => check::<BlockQ8_1>(f, &bytes),
            QuantFormat::Q2K => check::<BlockQ2K>(f, &bytes),
            QuantFormat::Q3K => check::<BlockQ3K>(f, &bytes),
            QuantFormat::Q4K => check::<BlockQ4K>(f, &bytes),
            QuantFormat::Q5K => check::<BlockQ5K>(f, &bytes),
            QuantFormat::Q6K => check::<BlockQ6K>(f, &bytes),
            QuantFormat::Q8K => check::<BlockQ8K>(f, &bytes),
            QuantFormat::Iq4Nl => check::<BlockIq4Nl>(f, &bytes),
            QuantFormat::Iq4Xs => check::<BlockIq4Xs>(f, &bytes),
            QuantFormat::Mxfp4 => check::<BlockMxfp4>(f, &bytes),
            other => panic!("no block type for {other}"),
        }
    }
}

/// NaN or ±inf in x makes the outputs it feeds NaN (x's 8-bit form cannot
/// hold them): never a finite number.
#[test]
fn forward_with_non_finite_x_is_not_finite() {
    let _turn = one_at_a_time();
    let (n, k) = (3usize, 256usize);
    let f = QuantFormat::Q4K;
    let bytes = finite_blocks(f, n * k / f.block_elems(), 5);
    for dev in devices() {
        let q = QTensor::from_bytes(&bytes, f, &[n, k], &dev).unwrap();
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut xs = vec![0.25f32; 2 * k];
            xs[k + 37] = bad;
            let x = ferrocm::Tensor::from_slice(&xs, &[2, k], &dev).unwrap();
            let y = q.forward(&x).unwrap().to_vec().unwrap();
            assert!(
                y[..n].iter().all(|v| v.is_finite()),
                "{dev}: row 0 {:?}",
                &y[..n]
            );
            assert!(
                y[n..].iter().all(|v| !v.is_finite()),
                "{dev} {bad}: row 1 {:?}",
                &y[n..]
            );
        }
    }
}

/// x of finite values so large that the sum of a group's 8-bit codes times
/// its scale overflows f32 (3e37 * 16 > f32::MAX), against weights that
/// cancel within every group: the product is exactly 0. The formats whose
/// units carry no offset (Q8_0, MXFP4 here) never use that sum; before they
/// skipped it, the GPU kernels multiplied the offset 0 by the overflowed
/// sum and gave NaN. Q8_0: d = 1 and codes +1, -1 in turn; MXFP4: scale 1
/// (e = 127) and codes 1 (+0.5) and 9 (-0.5) in turn, in both nibbles.
#[test]
fn forward_with_huge_finite_x_and_no_offset_is_exact() {
    let _turn = one_at_a_time();
    let (n, k) = (5usize, 256usize);
    let q8_0: Vec<u8> = (0..n * k / 32)
        .flat_map(|_| {
            let mut b = vec![0x00, 0x3C];
            b.extend((0..32).map(|j| if j % 2 == 0 { 1u8 } else { 0xFF }));
            b
        })
        .collect();
    let mxfp4: Vec<u8> = (0..n * k / 32)
        .flat_map(|_| {
            let mut b = vec![127u8];
            b.extend((0..16).map(|j| if j % 2 == 0 { 0x11u8 } else { 0x99 }));
            b
        })
        .collect();
    for dev in devices() {
        for (f, bytes) in [(QuantFormat::Q8_0, &q8_0), (QuantFormat::Mxfp4, &mxfp4)] {
            let q = QTensor::from_bytes(bytes, f, &[n, k], &dev).unwrap();
            for m in 1..=8 {
                let x = ferrocm::Tensor::from_slice(&vec![3e37f32; m * k], &[m, k], &dev).unwrap();
                let y = q.forward(&x).unwrap().to_vec().unwrap();
                assert!(y.iter().all(|&v| v == 0.0), "{f} m={m} on {dev}: {y:?}");
            }
        }
    }
}

/// Values that break a rounding: ±0, subnormals, ties, huge magnitudes,
/// a lone large value among small ones, NaN and ±inf (each in its own
/// group), then plain random values.
fn hard_values(len: usize, seed: u64) -> Vec<f32> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let special = [
        0.0, -0.0, 1e-40, -3e-39, 0.5, -0.5, 1.5, 2.5, 3e38, -3e38, 65504.0, 1e-3, 127.0, -127.0,
        1.0, -1.0,
    ];
    let mut v: Vec<f32> = (0..len).map(|_| rng.random_range(-2.0f32..2.0)).collect();
    for (i, s) in special.iter().enumerate().take(len) {
        v[i] = *s;
    }
    if len >= 64 {
        v[35] = f32::NAN;
        v[50] = f32::INFINITY;
        v[63] = f32::NEG_INFINITY;
    }
    v
}

/// The 8-bit form against its definition, computed here in f64: per group
/// of 16, `d = amax / 127` (the f32 division), each code within half a step
/// of `v / d` (a tie may round either way after the f32 reciprocal), a group
/// with NaN or ±inf gets `d` = NaN and an all-zero group codes 0. Every
/// device, f32, f16 and bf16 (the values rounded to the dtype first).
#[test]
fn q8_activations_match_the_definition() {
    let _turn = one_at_a_time();
    for (rows, k) in [(1usize, 16usize), (3, 64), (2, 4096), (1, 592)] {
        let xs = hard_values(rows * k, 11);
        for dev in devices() {
            for dt in [DType::F32, DType::F16, DType::BF16] {
                let x = ferrocm::Tensor::from_slice(&xs, &[rows, k], &dev)
                    .unwrap()
                    .to_dyn()
                    .to_dtype(dt)
                    .unwrap();
                let xv = x.to_f64_vec().unwrap();
                let q = match dt {
                    DType::F32 => Q8Activations::quantize(&x.typed::<f32>().unwrap()),
                    DType::F16 => Q8Activations::quantize(&x.typed::<f16>().unwrap()),
                    _ => Q8Activations::quantize(&x.typed::<bf16>().unwrap()),
                }
                .unwrap();
                assert_eq!(q.shape(), &[rows, k]);
                let (codes, scales) = q.to_host().unwrap();
                assert_eq!((codes.len(), scales.len()), (rows * k, rows * k / 16));
                for (g, vals) in xv.chunks(16).enumerate() {
                    let what = format!("{dev} {dt:?} group {g} of {rows}x{k}");
                    if vals.iter().any(|v| !v.is_finite()) {
                        assert!(scales[g].is_nan(), "{what}");
                        continue;
                    }
                    let amax = vals.iter().fold(0.0f64, |a, v| a.max(v.abs()));
                    let d = (amax as f32 / 127.0) as f64;
                    assert_eq!(scales[g] as f64, d, "{what}");
                    for (j, &v) in vals.iter().enumerate() {
                        let c = codes[g * 16 + j] as f64;
                        if d == 0.0 {
                            assert_eq!(c, 0.0, "{what}");
                        } else {
                            assert!(
                                (c - v / d).abs() <= 0.5 + 1e-5,
                                "{what}: {v} -> {c} at d {d}"
                            );
                        }
                    }
                }
            }
        }
    }
}

/// `rms_norm_q8` and `add_rms_norm_q8` store bit for bit what rounding the
/// unfused norm's output gives (their sum too), on every device and dtype:
/// rows of one wave (cols <= 1024) and of a workgroup, several rows, a
/// residual or none, operands off a 16-byte word (which take the unfused
/// path); and the codes times the scale stay within half a step of the
/// norm computed here in f64.
#[test]
fn norm_q8_equals_the_norm_rounded() {
    let _turn = one_at_a_time();
    fn bits(q: &Q8Activations) -> (Vec<i8>, Vec<u32>) {
        let (c, s) = q.to_host().unwrap();
        (c, s.iter().map(|v| v.to_bits()).collect())
    }
    for (rows, k) in [(1usize, 4096usize), (3, 1024), (5, 48), (2, 1040), (3, 288)] {
        let xs = hard_values(rows * k + 1, 3);
        let mut rng = rand::rngs::StdRng::seed_from_u64(9);
        let rs: Vec<f32> = (0..rows * k)
            .map(|_| rng.random_range(-1.0f32..1.0))
            .collect();
        let ws: Vec<f32> = (0..k).map(|_| rng.random_range(0.5f32..1.5)).collect();
        for dev in devices() {
            for dt in [DType::F32, DType::F16, DType::BF16] {
                let t = |v: &[f32], shape: &[usize]| {
                    ferrocm::Tensor::from_slice(v, shape, &dev)
                        .unwrap()
                        .to_dyn()
                        .to_dtype(dt)
                        .unwrap()
                };
                // Aligned, and one element on (offset 1, contiguous).
                let whole = t(&xs, &[rows * k + 1]);
                let shifted = whole
                    .narrow(0, 1, rows * k)
                    .unwrap()
                    .reshape(&[rows, k])
                    .unwrap();
                let aligned = t(&xs[..rows * k], &[rows, k]);
                let (r, w) = (t(&rs, &[rows, k]), t(&ws, &[k]));
                for x in [aligned, shifted] {
                    macro_rules! go {
                        ($ty:ty) => {{
                            let (x, r, w) = (
                                x.typed::<$ty>().unwrap(),
                                r.typed::<$ty>().unwrap(),
                                w.typed::<$ty>().unwrap(),
                            );
                            let what =
                                format!("{dev} {dt:?} {rows}x{k} offset {}", x.layout().offset());
                            let q = x.rms_norm_q8(&w, 1e-5).unwrap();
                            let y = x.rms_norm(&w, 1e-5).unwrap();
                            let yq = Q8Activations::quantize(&y).unwrap();
                            assert_eq!(bits(&q), bits(&yq), "{what}");
                            same_paired_products(&q, &yq, &what);
                            let (sum_q, q2) = x.add_rms_norm_q8(&r, &w, 1e-5).unwrap();
                            let (sum, y2) = x.add_rms_norm(&r, &w, 1e-5).unwrap();
                            let tbits = |t: ferrocm::Tensor<$ty>| -> Vec<u64> {
                                t.to_dyn()
                                    .to_f64_vec()
                                    .unwrap()
                                    .iter()
                                    .map(|v| v.to_bits())
                                    .collect()
                            };
                            assert_eq!(tbits(sum_q), tbits(sum), "{what}");
                            let y2q = Q8Activations::quantize(&y2).unwrap();
                            assert_eq!(bits(&q2), bits(&y2q), "{what}");
                            same_paired_products(&q2, &y2q, &what);
                            (q, x.to_dyn().to_f64_vec().unwrap())
                        }};
                    }
                    let (q, xv) = match dt {
                        DType::F32 => go!(f32),
                        DType::F16 => go!(f16),
                        _ => go!(bf16),
                    };
                    // Against the norm in f64 (finite rows only).
                    let (codes, scales) = q.to_host().unwrap();
                    let wv = w.to_f64_vec().unwrap();
                    let unit = match dt {
                        DType::F32 => 2f64.powi(-23),
                        DType::F16 => 2f64.powi(-10),
                        _ => 2f64.powi(-7),
                    };
                    for (row, xr) in xv.chunks(k).enumerate() {
                        if xr.iter().any(|v| !v.is_finite()) {
                            continue;
                        }
                        let ms = xr.iter().map(|v| v * v).sum::<f64>() / k as f64;
                        let scale = 1.0 / (ms + 1e-5).sqrt();
                        for j in 0..k {
                            let y = xr[j] * scale * wv[j];
                            let d = scales[(row * k + j) / 16] as f64;
                            let got = codes[row * k + j] as f64 * d;
                            let tol = d * (0.5 + 1e-4) + y.abs() * (unit + 1e-5);
                            assert!(
                                (got - y).abs() <= tol,
                                "{dev} {dt:?} row {row} col {j}: {got} vs {y}"
                            );
                        }
                    }
                }
            }
        }
    }
}

/// A paired format's products (Q4_0, Q5_0: their kernels read the paired
/// copy of x's codes, `x_paired_slots`) of `q`, made by a fused producer,
/// and `r`, made by `Q8Activations::quantize`, bit for bit the same: the
/// producer's paired copy is the one quantize stores (the kernels against
/// the definition check that one). Rows of `x` that are not whole units
/// have no paired copy and no paired format's weight to meet.
fn same_paired_products(q: &Q8Activations, r: &Q8Activations, what: &str) {
    let k = *q.shape().last().unwrap();
    let m = q.shape().iter().product::<usize>() / k;
    if !k.is_multiple_of(32) || m > 8 {
        return;
    }
    for f in [QuantFormat::Q4_0, QuantFormat::Q5_0] {
        let bytes = finite_blocks(f, 3 * k / 32, 13);
        let w = QTensor::from_bytes(&bytes, f, &[3, k], q.device()).unwrap();
        let bits = |x: &Q8Activations| -> Vec<u32> {
            let y = w.forward_q8::<f32>(x).unwrap();
            y.to_vec().unwrap().iter().map(|v| v.to_bits()).collect()
        };
        assert_eq!(bits(q), bits(r), "{what}: {f} products");
    }
}

/// `glu_halves_q8` stores bit for bit what rounding `glu_halves` gives, for
/// every activation, device and dtype, one row and several, halves off a
/// 16-byte word too; and its bad inputs are typed errors naming it.
#[test]
fn glu_q8_equals_the_gated_unit_rounded() {
    use ferrocm::Activation;
    use ferrocm::ops::quant::Q8Activations;
    let _turn = one_at_a_time();
    for (rows, d) in [(1usize, 4096usize), (3, 48), (2, 16), (2, 288)] {
        let xs = hard_values(rows * 2 * d + 8, 5);
        for dev in devices() {
            for dt in [DType::F32, DType::F16, DType::BF16] {
                let whole = ferrocm::Tensor::from_slice(&xs, &[xs.len()], &dev)
                    .unwrap()
                    .to_dyn()
                    .to_dtype(dt)
                    .unwrap();
                for off in [0usize, 8, 3] {
                    let x = whole
                        .narrow(0, off, rows * 2 * d)
                        .unwrap()
                        .reshape(&[rows, 2 * d])
                        .unwrap();
                    for act in [
                        Activation::Silu,
                        Activation::Gelu,
                        Activation::GeluErf,
                        Activation::Relu,
                    ] {
                        macro_rules! go {
                            ($ty:ty) => {{
                                let x = x.typed::<$ty>().unwrap();
                                let q = x.glu_halves_q8(act).unwrap();
                                let r =
                                    Q8Activations::quantize(&x.glu_halves(act).unwrap()).unwrap();
                                (q, r)
                            }};
                        }
                        let (q, r) = match dt {
                            DType::F32 => go!(f32),
                            DType::F16 => go!(f16),
                            _ => go!(bf16),
                        };
                        assert_eq!(q.shape(), &[rows, d]);
                        let (qc, qs) = q.to_host().unwrap();
                        let (rc, rs) = r.to_host().unwrap();
                        let what = format!("{dev} {dt:?} {rows}x{d} offset {off} {act:?}");
                        assert_eq!(qc, rc, "{what}");
                        same_paired_products(&q, &r, &what);
                        assert_eq!(
                            qs.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                            rs.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                            "{what}"
                        );
                    }
                }
            }
        }
    }
    let dev = ferrocm::Device::Cpu;
    let err = |shape: &[usize]| {
        let n = shape.iter().product();
        ferrocm::Tensor::from_slice(&vec![0.0f32; n], shape, &dev)
            .unwrap()
            .glu_halves_q8(Activation::Silu)
            .unwrap_err()
            .to_string()
    };
    assert!(
        err(&[1, 33]).starts_with("glu_halves_q8: "),
        "{}",
        err(&[1, 33])
    );
    assert!(
        err(&[1, 40]).contains("multiple of 16"),
        "{}",
        err(&[1, 40])
    );
    let ids = ferrocm::Tensor::from_slice(&[0u32; 32], &[1, 32], &dev).unwrap();
    assert!(ids.glu_halves_q8(Activation::Silu).is_err());
}

/// `forward_q8` on `x` made by `Q8Activations::quantize` is bit for bit
/// `forward` on `x`, every device and format's first dtype, 1 to 8 rows;
/// more rows, a wrong width, another device and a norm of a last dim that
/// is not a multiple of 16 are typed errors.
#[test]
fn forward_q8_equals_forward_and_refuses_bad_input() {
    use ferrocm::ops::quant::Q8Activations;
    let _turn = one_at_a_time();
    let (n, k) = (5usize, 512usize);
    let xs = hard_values(9 * k, 21)
        .into_iter()
        .map(|v| {
            if v.is_finite() {
                v.clamp(-4.0, 4.0)
            } else {
                1.0
            }
        })
        .collect::<Vec<_>>();
    for f in [
        QuantFormat::Q4_0,
        QuantFormat::Q4K,
        QuantFormat::Q6K,
        QuantFormat::Mxfp4,
    ] {
        let bytes = finite_blocks(f, n * k / f.block_elems(), 8);
        for dev in devices() {
            let q = QTensor::from_bytes(&bytes, f, &[n, k], &dev).unwrap();
            for m in [1usize, 2, 3, 8] {
                let x = ferrocm::Tensor::from_slice(&xs[..m * k], &[m, k], &dev).unwrap();
                let a = q
                    .forward_q8::<f32>(&Q8Activations::quantize(&x).unwrap())
                    .unwrap();
                let b = q.forward(&x).unwrap();
                assert_eq!(a.shape(), &[m, n]);
                let bits = |t: ferrocm::Tensor<f32>| {
                    t.to_vec()
                        .unwrap()
                        .iter()
                        .map(|v| v.to_bits())
                        .collect::<Vec<_>>()
                };
                assert_eq!(bits(a), bits(b), "{dev} {f:?} m {m}");
            }
            let nine = ferrocm::Tensor::from_slice(&xs[..9 * k], &[9, k], &dev).unwrap();
            let e = q
                .forward_q8::<f32>(&Q8Activations::quantize(&nine).unwrap())
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with("QTensor::forward_q8: ") && e.contains("at most 8 rows"),
                "{e}"
            );
        }
    }
    let dev = ferrocm::Device::Cpu;
    let q = QTensor::from_bytes(
        &finite_blocks(QuantFormat::Q8_0, 4, 3),
        QuantFormat::Q8_0,
        &[2, 64],
        &dev,
    )
    .unwrap();
    let narrow =
        Q8Activations::quantize(&ferrocm::Tensor::<f32>::zeros(&[1, 32], &dev).unwrap()).unwrap();
    assert_eq!(
        q.forward_q8::<f32>(&narrow).unwrap_err().to_string(),
        "QTensor::forward_q8: shape mismatch [1, 32] vs [2, 64]"
    );
    let emu = ferrocm::Device::emulator(ferrocm::WaveSize::Wave32);
    let elsewhere =
        Q8Activations::quantize(&ferrocm::Tensor::<f32>::zeros(&[1, 64], &emu).unwrap()).unwrap();
    assert!(
        q.forward_q8::<f32>(&elsewhere)
            .unwrap_err()
            .to_string()
            .contains("devices")
    );
    let x = ferrocm::Tensor::<f32>::zeros(&[1, 24], &dev).unwrap();
    let w = ferrocm::Tensor::<f32>::ones(&[24], &dev).unwrap();
    let e = x.rms_norm_q8(&w, 1e-5).unwrap_err().to_string();
    assert!(
        e.starts_with("rms_norm_q8: ") && e.contains("multiple of 16"),
        "{e}"
    );
    let e = x.add_rms_norm_q8(&x, &w, 1e-5).unwrap_err().to_string();
    assert!(e.starts_with("add_rms_norm_q8: "), "{e}");
    assert!(
        Q8Activations::quantize(&x)
            .unwrap_err()
            .to_string()
            .starts_with("Q8Activations::quantize: ")
    );
}
