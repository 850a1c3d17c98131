//! PyTorch's NaN rules and long-row accuracy, on every device (the Cpu, the
//! emulator at wave 32 and 64, and any GPU that answers), against references
//! written here: exact expected values for the NaN rules, f64 sums for the
//! accuracy bounds.
//!
//! - maximum/minimum propagate NaN from either side;
//! - max/min reductions are NaN when the reduced slice holds a NaN;
//! - argmax/argmin give the index of the first NaN, else of the first extreme;
//! - sum, mean and softmax's normalising sum stay within 1e-6 relative of an
//!   f64 reference on rows of up to 1M elements (pairwise on the Cpu,
//!   compensated per workitem in the kernels).

mod common;
use ferrocm::{Device, Tensor, bf16, f16};
use rand::{Rng, SeedableRng};

use common::devices;

const NAN: f32 = f32::NAN;
const INF: f32 = f32::INFINITY;

/// Bitwise-equal or both NaN.
fn same(a: f32, b: f32) -> bool {
    (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits() || (a == b && a != 0.0)
}

fn to_f32<T: ferrocm::ops::WithDType>(t: &Tensor<T>) -> Vec<f32> {
    t.to_vec()
        .unwrap()
        .iter()
        .map(|v| v.to_f64() as f32)
        .collect()
}

fn from_f32<T: ferrocm::ops::WithDType>(v: &[f32], shape: &[usize], dev: &Device) -> Tensor<T> {
    let data: Vec<T> = v.iter().map(|x| T::from_f64(*x as f64)).collect();
    Tensor::from_slice(&data, shape, dev).unwrap()
}

fn maximum_minimum_for<T: ferrocm::ops::WithDType>(dev: &Device) {
    let a = [1.0, NAN, 3.0, -INF, NAN, 0.5, -2.0];
    let b = [NAN, 2.0, 1.0, 0.0, NAN, 0.5, INF];
    let max = [NAN, NAN, 3.0, 0.0, NAN, 0.5, INF];
    let min = [NAN, NAN, 1.0, -INF, NAN, 0.5, -2.0];
    let (ta, tb) = (from_f32::<T>(&a, &[7], dev), from_f32::<T>(&b, &[7], dev));
    let got_max = to_f32(&ta.maximum(&tb).unwrap());
    let got_min = to_f32(&ta.minimum(&tb).unwrap());
    for i in 0..7 {
        assert!(
            same(got_max[i], max[i]),
            "{dev} {:?} maximum[{i}] = {} (want {})",
            T::DTYPE,
            got_max[i],
            max[i]
        );
        assert!(
            same(got_min[i], min[i]),
            "{dev} {:?} minimum[{i}] = {} (want {})",
            T::DTYPE,
            got_min[i],
            min[i]
        );
    }
    // Broadcast: a NaN scalar against a row, and a row against a NaN-free scalar.
    let nan = from_f32::<T>(&[NAN], &[1], dev);
    assert!(
        to_f32(&ta.maximum(&nan).unwrap())
            .iter()
            .all(|v| v.is_nan()),
        "{dev}: maximum with a NaN scalar"
    );
    let zero = from_f32::<T>(&[0.0], &[1], dev);
    let got = to_f32(&ta.minimum(&zero).unwrap());
    assert!(
        got[1].is_nan() && got[4].is_nan() && got[0] == 0.0 && got[3] == -INF,
        "{dev}: {got:?}"
    );
}

#[test]
fn maximum_and_minimum_propagate_nan() {
    for dev in devices() {
        maximum_minimum_for::<f32>(&dev);
        maximum_minimum_for::<f16>(&dev);
        maximum_minimum_for::<bf16>(&dev);
    }
}

/// Rows of `cols` values with NaNs placed at `nans` of some rows, and ties.
fn rows_with_nans(rows: usize, cols: usize, seed: u64) -> (Vec<f32>, Vec<Vec<usize>>) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut v: Vec<f32> = (0..rows * cols)
        .map(|_| rng.random_range(-100i32..100) as f32)
        .collect();
    let mut nan_at = vec![vec![]; rows];
    for r in 0..rows {
        let picks: &[usize] = match r % 4 {
            0 => &[],
            1 => &[cols - 1],               // the last element only
            2 => &[cols / 2, 0, cols - 1],  // several: the first is 0
            _ => &[cols / 3, 2 * cols / 3], // first is cols / 3
        };
        for &c in picks {
            v[r * cols + c] = NAN;
            nan_at[r].push(c);
        }
        nan_at[r].sort();
    }
    (v, nan_at)
}

fn check_reductions<T: ferrocm::ops::WithDType>(dev: &Device, rows: usize, cols: usize) {
    let (v, nan_at) = rows_with_nans(rows, cols, cols as u64);
    // As [rows, cols] over dim 1, and transposed ([cols, rows] over dim 0:
    // the column path on every device).
    let x = from_f32::<T>(&v, &[rows, cols], dev);
    let xt = x.transpose(0, 1).unwrap().contiguous().unwrap();
    for (t, dim) in [(&x, 1usize), (&xt, 0)] {
        let max = to_f32(&t.max(&[dim], false).unwrap());
        let min = to_f32(&t.min(&[dim], false).unwrap());
        let amax = t.argmax(&[dim], false).unwrap().to_vec().unwrap();
        let amin = t.argmin(&[dim], false).unwrap().to_vec().unwrap();
        for r in 0..rows {
            let row = &v[r * cols..(r + 1) * cols];
            let ctx = format!("{dev} {:?} {rows}x{cols} dim {dim} row {r}", T::DTYPE);
            if let Some(&first) = nan_at[r].first() {
                assert!(
                    max[r].is_nan() && min[r].is_nan(),
                    "{ctx}: max {} min {}",
                    max[r],
                    min[r]
                );
                assert_eq!(amax[r] as usize, first, "{ctx}: argmax is the first NaN");
                assert_eq!(amin[r] as usize, first, "{ctx}: argmin is the first NaN");
            } else {
                let m = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
                let n = row.iter().cloned().fold(f32::INFINITY, f32::min);
                assert_eq!((max[r], min[r]), (m, n), "{ctx}");
                // Integers in -100..100 repeat: the first of the ties.
                assert_eq!(
                    amax[r] as usize,
                    row.iter().position(|x| *x == m).unwrap(),
                    "{ctx}: argmax"
                );
                assert_eq!(
                    amin[r] as usize,
                    row.iter().position(|x| *x == n).unwrap(),
                    "{ctx}: argmin"
                );
            }
        }
    }
}

#[test]
fn max_min_argmax_argmin_follow_pytorch_nan_rules() {
    for dev in devices() {
        // Short rows, rows longer than a workgroup, an odd prime length;
        // rows of whole 16-byte words (72: a word a workitem; 1024 and up:
        // four words in flight a workitem for f32, from 4096 for f16/bf16;
        // 4100 and 6144: a pass of four, then single words).
        for (rows, cols) in [
            (8, 5),
            (4, 3001),
            (5, 1031),
            (3, 72),
            (4, 1024),
            (4, 4096),
            (4, 8192),
            (3, 4100),
            (3, 6144),
        ] {
            check_reductions::<f32>(&dev, rows, cols);
            check_reductions::<bf16>(&dev, rows, cols);
        }
        check_reductions::<f16>(&dev, 8, 257);
        check_reductions::<f16>(&dev, 3, 256);
        check_reductions::<f16>(&dev, 3, 4096);
    }
}

#[test]
fn relu_keeps_nan() {
    for dev in devices() {
        let x = Tensor::from_slice(&[NAN, -1.0f32, 2.0], &[3], &dev).unwrap();
        let y = x.relu().unwrap().to_vec().unwrap();
        assert!(y[0].is_nan() && y[1] == 0.0 && y[2] == 2.0, "{dev}: {y:?}");
    }
}

/// Positive values (no cancellation: the relative error of the sum is the
/// summation's own), as the f32 values the device holds.
fn positive(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n).map(|_| rng.random_range(0.0f32..1.0)).collect()
}

const ROW: usize = 1 << 20;

#[test]
fn sums_of_a_million_elements_stay_within_1e6() {
    let v = positive(ROW, 11);
    let exact: f64 = v.iter().map(|x| *x as f64).sum();
    // Rounded to bf16 by the test (bf16 inputs are exact in f32).
    let vb: Vec<f32> = v.iter().map(|x| bf16::from_f32(*x).to_f32()).collect();
    let exact_b: f64 = vb.iter().map(|x| *x as f64).sum();
    for dev in devices() {
        let rel = |got: f64, want: f64| ((got - want) / want).abs();
        let x = Tensor::from_slice(&v, &[1, ROW], &dev).unwrap();
        let sum = x.sum(&[1], false).unwrap().to_vec().unwrap()[0] as f64;
        assert!(
            rel(sum, exact) <= 1e-6,
            "{dev}: sum {sum} vs {exact} ({:.2e})",
            rel(sum, exact)
        );
        let mean = x.mean(&[1], false).unwrap().to_vec().unwrap()[0] as f64;
        let want = exact / ROW as f64;
        assert!(
            rel(mean, want) <= 1e-6,
            "{dev}: mean {mean} vs {want} ({:.2e})",
            rel(mean, want)
        );
        // The same million as the leading dim of [ROW, 2] (the column path).
        let pairs: Vec<f32> = v.iter().flat_map(|x| [*x, 2.0 * *x]).collect();
        let xc = Tensor::from_slice(&pairs, &[ROW, 2], &dev).unwrap();
        let s = xc.sum(&[0], false).unwrap().to_vec().unwrap();
        assert!(
            rel(s[0] as f64, exact) <= 1e-6,
            "{dev}: column sum {} vs {exact}",
            s[0]
        );
        assert!(
            rel(s[1] as f64, 2.0 * exact) <= 1e-6,
            "{dev}: column sum {} vs {}",
            s[1],
            2.0 * exact
        );
        // bf16 accumulates in f32: its sum is the f64 sum rounded to bf16 (or
        // its neighbour, when the f64 sum lies within 1e-6 of a tie).
        let xb = Tensor::from_slice(
            &vb.iter().map(|x| bf16::from_f32(*x)).collect::<Vec<_>>(),
            &[1, ROW],
            &dev,
        )
        .unwrap();
        let sb = xb.sum(&[1], false).unwrap().to_vec().unwrap()[0].to_f64();
        let ulp = bf16::from_f64(exact_b).to_f64() * 2f64.powi(-8);
        assert!(
            (sb - exact_b).abs() <= ulp,
            "{dev}: bf16 sum {sb} vs {exact_b}"
        );
    }
}

#[test]
fn softmax_of_wide_rows_sums_to_one() {
    for (cols, seed) in [(100_000, 5), (ROW, 6)] {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let v: Vec<f32> = (0..cols).map(|_| rng.random_range(-4.0f32..4.0)).collect();
        for dev in devices() {
            let x = Tensor::from_slice(&v, &[1, cols], &dev).unwrap();
            let s: f64 = x
                .softmax()
                .unwrap()
                .to_vec()
                .unwrap()
                .iter()
                .map(|p| *p as f64)
                .sum();
            assert!((s - 1.0).abs() <= 1e-6, "{dev} {cols}: softmax sums to {s}");
            let l: f64 = x
                .log_softmax()
                .unwrap()
                .to_vec()
                .unwrap()
                .iter()
                .map(|p| (*p as f64).exp())
                .sum();
            assert!(
                (l - 1.0).abs() <= 1e-6,
                "{dev} {cols}: exp(log_softmax) sums to {l}"
            );
        }
    }
}

#[test]
fn softmax_of_a_scalar() {
    for dev in devices() {
        let x = Tensor::from_slice(&[3.5f32], &[], &dev).unwrap();
        let s = x.softmax().unwrap();
        assert_eq!(
            (s.shape(), s.to_vec().unwrap()),
            (&[][..], vec![1.0]),
            "{dev}"
        );
        let l = x.log_softmax().unwrap();
        assert_eq!(
            (l.shape(), l.to_vec().unwrap()),
            (&[][..], vec![0.0]),
            "{dev}"
        );
    }
}

#[test]
fn rand_and_randn_reject_bad_parameters() {
    let dev = Device::Cpu;
    for (lo, hi) in [
        (1.0, 0.0),
        (f64::NAN, 1.0),
        (0.0, f64::NAN),
        (f64::NEG_INFINITY, 0.0),
        (0.0, f64::INFINITY),
    ] {
        let e = Tensor::<f32>::rand(&[3], lo, hi, 1, &dev).unwrap_err();
        assert!(
            matches!(e, ferrocm::ops::Error::BadParameter { op: "rand", .. }),
            "{lo}..{hi}: {e}"
        );
        assert!(e.to_string().contains(&format!("{lo}")), "{e}");
    }
    assert_eq!(
        Tensor::<f32>::rand(&[3], 2.0, 2.0, 1, &dev)
            .unwrap()
            .to_vec()
            .unwrap(),
        vec![2.0; 3]
    );
    for (mean, std) in [
        (0.0, -1.0),
        (0.0, f64::NAN),
        (f64::NAN, 1.0),
        (0.0, f64::INFINITY),
    ] {
        let e = Tensor::<f32>::randn(&[3], mean, std, 1, &dev).unwrap_err();
        assert!(
            matches!(e, ferrocm::ops::Error::BadParameter { op: "randn", .. }),
            "{mean}, {std}: {e}"
        );
    }
    assert_eq!(
        Tensor::<f32>::randn(&[2], 1.5, 0.0, 1, &dev)
            .unwrap()
            .to_vec()
            .unwrap(),
        vec![1.5; 2]
    );
}

/// The Cpu's strided walk (dims merged, runs along the innermost dim) against
/// index arithmetic written here, on views that merge, do not merge,
/// broadcast in the middle and at the end, and start at an offset.
#[test]
fn cpu_walks_every_view_shape() {
    let dev = Device::Cpu;
    let base: Vec<f32> = (0..2 * 3 * 5 * 7).map(|v| v as f32).collect();
    let x = Tensor::from_slice(&base, &[2, 3, 5, 7], &dev).unwrap();
    let views = [
        x.permute(&[0, 1, 3, 2]).unwrap(),
        x.permute(&[3, 2, 1, 0]).unwrap(),
        x.narrow(2, 1, 3).unwrap(),
        x.narrow(3, 2, 4).unwrap().narrow(0, 1, 1).unwrap(),
        x.narrow(1, 1, 1)
            .unwrap()
            .broadcast_as(&[4, 2, 3, 5, 7])
            .unwrap(),
        x.narrow(3, 0, 1)
            .unwrap()
            .broadcast_as(&[2, 3, 5, 6])
            .unwrap(),
        x.reshape(&[6, 35]).unwrap().transpose(0, 1).unwrap(),
    ];
    for v in &views {
        let (shape, strides, off) = (
            v.shape().to_vec(),
            v.layout().strides().to_vec(),
            v.layout().offset(),
        );
        let n: usize = shape.iter().product();
        let want: Vec<f32> = (0..n)
            .map(|mut i| {
                let mut o = off;
                for d in (0..shape.len()).rev() {
                    o += (i % shape[d]) * strides[d];
                    i /= shape[d];
                }
                base[o]
            })
            .collect();
        assert_eq!(
            v.contiguous().unwrap().to_vec().unwrap(),
            want,
            "{shape:?} {strides:?}"
        );
        let sum: Vec<f32> = want.iter().map(|w| w + w).collect();
        assert_eq!(
            v.add(v).unwrap().to_vec().unwrap(),
            sum,
            "{shape:?} {strides:?}"
        );
        let ex: Vec<f32> = want.iter().map(|w| (w / 100.0).exp()).collect();
        let got = v
            .affine(0.01, 0.0)
            .unwrap()
            .exp()
            .unwrap()
            .to_vec()
            .unwrap();
        for (g, e) in got.iter().zip(&ex) {
            assert!((g - e).abs() <= 2.0 * f32::EPSILON * e, "{g} vs {e}");
        }
    }
}

/// Transposed copies (the Cpu's 32 x 32 tiles, the kernel's LDS tiles) over
/// several tiles with partial edges and a batch, against index arithmetic.
#[test]
fn transposed_copies_span_tiles() {
    let (b, r, c) = (3, 70, 45);
    let base: Vec<u32> = (0..(b * r * c) as u32).collect();
    for dev in devices() {
        let x = Tensor::from_slice(&base, &[b, r, c], &dev).unwrap();
        let got = x
            .permute(&[0, 2, 1])
            .unwrap()
            .contiguous()
            .unwrap()
            .to_vec()
            .unwrap();
        let want: Vec<u32> = (0..b)
            .flat_map(|m| {
                (0..c).flat_map(move |j| (0..r).map(move |i| (m * r * c + i * c + j) as u32))
            })
            .collect();
        assert_eq!(got, want, "{dev}");
    }
}

/// A row whose variance overflows f32 (values near ±1e30, or one 1e30):
/// PyTorch's f32 LayerNorm gives the bias there (the variance is inf, so
/// the scale 1/sqrt(var + eps) is 0); the fused add too. An ordinary row
/// beside them keeps its f64-checked value.
fn layer_norm_overflow_for<T: ferrocm::ops::WithDType>(dev: &Device) {
    let cols = 8;
    let rows: [[f32; 8]; 4] = [
        [1e30, -1e30, 1e30, -1e30, 1e30, 1e30, -1e30, 1e30],
        [1e30; 8],
        [0.0, 0.0, 1e30, 0.0, 0.0, 0.0, 0.0, 0.0],
        [1.0, 2.0, 3.0, 4.0, -1.0, -2.0, 0.5, 0.25],
    ];
    let flat: Vec<f32> = rows.concat();
    let x = from_f32::<T>(&flat, &[4, cols], dev);
    let zeros = from_f32::<T>(&[0.0; 32], &[4, cols], dev);
    let w = from_f32::<T>(&[1.5, -2.0, 0.5, 1.0, 2.0, 3.0, -1.0, 0.25], &[cols], dev);
    let b = from_f32::<T>(&[0.5, 1.0, -1.5, 2.0, 0.0, -0.25, 4.0, 8.0], &[cols], dev);
    let bias = to_f32(&b);
    let (ws, bs) = (to_f32(&w), bias.clone());
    let check = |y: &[f32], what: &str| {
        for r in 0..3 {
            for c in 0..cols {
                assert!(
                    same(y[r * cols + c], bias[c]),
                    "{dev} {:?} {what} row {r} col {c}: {} (want the bias {})",
                    T::DTYPE,
                    y[r * cols + c],
                    bias[c]
                );
            }
        }
        // The ordinary row, against f64.
        let h: Vec<f64> = to_f32(&x)[3 * cols..].iter().map(|&v| v as f64).collect();
        let mean = h.iter().sum::<f64>() / cols as f64;
        let var = h.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / cols as f64;
        for c in 0..cols {
            let want = (h[c] - mean) / (var + 1e-5).sqrt() * ws[c] as f64 + bs[c] as f64;
            let tol = if T::DTYPE == ferrocm::DType::F32 {
                1e-5
            } else {
                0.05
            };
            assert!(
                (y[3 * cols + c] as f64 - want).abs() <= tol * want.abs().max(1.0),
                "{dev} {:?} {what} ordinary row col {c}: {} vs {want}",
                T::DTYPE,
                y[3 * cols + c]
            );
        }
    };
    check(
        &to_f32(&x.layer_norm(&w, Some(&b), 1e-5).unwrap()),
        "layer_norm",
    );
    let (_, y) = x.add_layer_norm(&zeros, &w, Some(&b), 1e-5).unwrap();
    check(&to_f32(&y), "add_layer_norm");
}

#[test]
fn layer_norm_of_an_overflowing_variance_gives_the_bias() {
    for dev in devices() {
        layer_norm_overflow_for::<f32>(&dev);
        layer_norm_overflow_for::<bf16>(&dev);
    }
}

/// PyTorch ranks NaN above every number: `sort` puts it last ascending and
/// first descending, `topk(largest)` returns it first.
fn nan_order_for<T: ferrocm::ops::WithDType>(dev: &Device) {
    let v = [2.0, NAN, -1.0, INF, NAN, 0.0];
    let t = from_f32::<T>(&v, &[6], dev);
    let (asc, ai) = t.sort(false).unwrap();
    let (desc, di) = t.sort(true).unwrap();
    assert_eq!(
        ai.to_vec().unwrap(),
        vec![2, 5, 0, 3, 1, 4],
        "{dev} {:?}",
        T::DTYPE
    );
    assert_eq!(
        di.to_vec().unwrap(),
        vec![1, 4, 3, 0, 5, 2],
        "{dev} {:?}",
        T::DTYPE
    );
    assert!(to_f32(&asc)[4].is_nan() && to_f32(&desc)[0].is_nan());
    assert_eq!(
        t.argsort(true).unwrap().to_vec().unwrap(),
        vec![1, 4, 3, 0, 5, 2]
    );
    let (top, ti) = t.topk(3, true).unwrap();
    assert_eq!(ti.to_vec().unwrap(), vec![1, 4, 3], "{dev} {:?}", T::DTYPE);
    assert!(to_f32(&top)[0].is_nan() && to_f32(&top)[1].is_nan());
    let (_, si) = t.topk(3, false).unwrap();
    assert_eq!(si.to_vec().unwrap(), vec![2, 5, 0], "{dev} {:?}", T::DTYPE);
    let (_, all) = t.topk(6, false).unwrap();
    assert_eq!(
        all.to_vec().unwrap(),
        vec![2, 5, 0, 3, 1, 4],
        "{dev} {:?}",
        T::DTYPE
    );
}

#[test]
fn sort_and_topk_rank_nan_above_every_number() {
    for dev in devices() {
        nan_order_for::<f32>(&dev);
        nan_order_for::<f16>(&dev);
        nan_order_for::<bf16>(&dev);
    }
}

#[test]
fn allclose_refuses_negative_or_nan_tolerances() {
    let a = Tensor::from_slice(&[1.0f32], &[1], &Device::Cpu).unwrap();
    for (rtol, atol) in [(-1.0, 0.0), (0.0, -1e-8), (f64::NAN, 0.0)] {
        let e = a.allclose(&a, rtol, atol).unwrap_err();
        assert!(
            matches!(&e, ferrocm::Error::BadParameter { op: "allclose", .. }),
            "{e}"
        );
    }
    assert!(a.allclose(&a, 0.0, 0.0).unwrap());
}

/// argmax/argmin of rows of whole 16-byte words (the kernels read them a
/// word at a time, each workitem its own words in column order) against the
/// first index of the extreme found by a loop here: ties planted in one
/// workitem's word, across words and across workitems.
fn first_of_ties<T: ferrocm::ops::WithDType>(dev: &Device) {
    for cols in [8usize, 72, 1024, 4096, 4100, 6144] {
        let rows = 3;
        let mut v: Vec<f32> = (0..rows * cols).map(|k| (1 + (k * 5) % 7) as f32).collect();
        for r in 0..rows {
            // Row r's maximum 100 at three columns, its minimum 0 at two.
            for c in [cols / 2 + r, cols - 1, (cols / 4 + 3 * r) % cols] {
                v[r * cols + c] = 100.0;
            }
            for c in [cols - 1 - r, (cols / 8 + r) % cols] {
                v[r * cols + c] = 0.0;
            }
        }
        let x = from_f32::<T>(&v, &[rows, cols], dev);
        let amax = x.argmax(&[1], false).unwrap().to_vec().unwrap();
        let amin = x.argmin(&[1], false).unwrap().to_vec().unwrap();
        for r in 0..rows {
            let row = &v[r * cols..(r + 1) * cols];
            let first = |want: f32| row.iter().position(|&y| y == want).unwrap() as u32;
            let ctx = format!("{:?} cols {cols} row {r} on {dev}", T::DTYPE);
            assert_eq!(amax[r], first(100.0), "argmax {ctx}");
            assert_eq!(amin[r], first(0.0), "argmin {ctx}");
        }
        // Signed zeros are equal: of -0 and +0 planted in a row of
        // negatives (positives for argmin), in one word and in two words,
        // the first wins whichever sign it has (the word kernels may pick
        // either zero as a word's extreme).
        let zero_pairs = [(1, 3), (3, 12.min(cols - 1)), (cols / 2, cols - 1)];
        for (a, b) in zero_pairs.into_iter().filter(|_| T::DTYPE.is_float()) {
            for first_sign in [-0.0f32, 0.0] {
                let mut neg = vec![-1.5f32; cols];
                let mut pos = vec![1.5f32; cols];
                for row in [&mut neg, &mut pos] {
                    row[a] = first_sign;
                    row[b] = -first_sign;
                }
                neg.extend(pos);
                let x = from_f32::<T>(&neg, &[2, cols], dev);
                let amax = x.argmax(&[1], false).unwrap().to_vec().unwrap();
                let amin = x.argmin(&[1], false).unwrap().to_vec().unwrap();
                let ctx = format!("{:?} cols {cols} zeros at {a}, {b} on {dev}", T::DTYPE);
                assert_eq!(amax[0], a as u32, "argmax {ctx}");
                assert_eq!(amin[1], a as u32, "argmin {ctx}");
            }
        }
    }
}

#[test]
fn argmax_argmin_of_word_rows_take_the_first_of_ties() {
    for dev in devices() {
        first_of_ties::<f32>(&dev);
        first_of_ties::<bf16>(&dev);
        first_of_ties::<f16>(&dev);
        first_of_ties::<u32>(&dev);
    }
}

/// Rows whose extreme is the value each workitem's scan starts from (-inf for
/// argmax, +inf for argmin; `i64::MIN`/`MAX` for integers): the first index
/// holding it wins, and a finite value next to the infinities is the extreme.
/// The float lengths run one word a workitem, four words in flight, and
/// element loads; i64 rows always take element loads.
fn rows_at_the_scan_start<T: ferrocm::ops::WithDType>(dev: &Device) {
    let inf = f32::INFINITY;
    for cols in [8usize, 4096, 8192, 4099] {
        // Rows: all -inf; all +inf; -inf but one finite value near the end
        // (the argmax); +inf but one finite value near the end (the argmin);
        // +inf but two -inf (argmin the first of them).
        let mut v = vec![-inf; cols];
        v.extend(std::iter::repeat_n(inf, cols));
        let mut lowest_above = vec![-inf; cols];
        lowest_above[cols - 2] = -6e4;
        v.extend(lowest_above);
        let mut highest_below = vec![inf; cols];
        highest_below[cols - 3] = 6e4;
        v.extend(highest_below);
        let mut two_lows = vec![inf; cols];
        two_lows[cols / 2] = -inf;
        two_lows[cols - 1] = -inf;
        v.extend(two_lows);
        let x = from_f32::<T>(&v, &[5, cols], dev);
        let amax = x.argmax(&[1], false).unwrap().to_vec().unwrap();
        let amin = x.argmin(&[1], false).unwrap().to_vec().unwrap();
        let ctx = format!("{:?} cols {cols} on {dev}", T::DTYPE);
        let (at_finite_max, at_finite_min) = ((cols - 2) as u32, (cols - 3) as u32);
        assert_eq!(amax, [0, 0, at_finite_max, 0, 0], "argmax {ctx}");
        assert_eq!(
            amin,
            [0, 0, 0, at_finite_min, (cols / 2) as u32],
            "argmin {ctx}"
        );
    }
}

/// u32 sum, max, min and prod over rows of whole 16-byte words (four words
/// in flight, then single words) and over a row that is not, against exact
/// integer results computed here.
#[test]
fn u32_row_reductions_over_whole_words_are_exact() {
    for dev in devices() {
        for cols in [4096usize, 4100, 6144, 4099] {
            let rows = 3;
            let v: Vec<u32> = (0..rows * cols)
                .map(|k| ((k * 7919) % 1000) as u32)
                .collect();
            // prod: ones with a 2 and a 3 planted per row (2 * 3 = 6).
            let mut ones = vec![1u32; rows * cols];
            for r in 0..rows {
                ones[r * cols + cols / 3 + r] = 2;
                ones[r * cols + cols - 1 - r] = 3;
            }
            let x = Tensor::from_slice(&v, &[rows, cols], &dev).unwrap();
            let p = Tensor::from_slice(&ones, &[rows, cols], &dev).unwrap();
            let sum = x.sum(&[1], false).unwrap().to_vec().unwrap();
            let max = x.max(&[1], false).unwrap().to_vec().unwrap();
            let min = x.min(&[1], false).unwrap().to_vec().unwrap();
            let prod = p.prod(&[1], false).unwrap().to_vec().unwrap();
            for r in 0..rows {
                let row = &v[r * cols..(r + 1) * cols];
                let ctx = format!("u32 cols {cols} row {r} on {dev}");
                assert_eq!(sum[r], row.iter().sum::<u32>(), "sum {ctx}");
                assert_eq!(max[r], *row.iter().max().unwrap(), "max {ctx}");
                assert_eq!(min[r], *row.iter().min().unwrap(), "min {ctx}");
                assert_eq!(prod[r], 6, "prod {ctx}");
            }
        }
    }
}

#[test]
fn argmax_argmin_of_rows_at_the_scan_start_value() {
    for dev in devices() {
        rows_at_the_scan_start::<f32>(&dev);
        rows_at_the_scan_start::<bf16>(&dev);
        rows_at_the_scan_start::<f16>(&dev);
        for cols in [8usize, 4096, 4099] {
            // i64: rows of i64::MIN (argmax 0), of i64::MAX (argmin 0), and
            // i64::MIN + 1 after a run of MIN (argmax there).
            let mut v = vec![i64::MIN; cols];
            v.extend(std::iter::repeat_n(i64::MAX, cols));
            let mut later = vec![i64::MIN; cols];
            later[cols - 3] = i64::MIN + 1;
            v.extend(later);
            let x = Tensor::from_slice(&v, &[3, cols], &dev).unwrap();
            let amax = x.argmax(&[1], false).unwrap().to_vec().unwrap();
            let amin = x.argmin(&[1], false).unwrap().to_vec().unwrap();
            assert_eq!(
                amax,
                [0, 0, (cols - 3) as u32],
                "argmax i64 cols {cols} on {dev}"
            );
            assert_eq!(amin, [0, 0, 0], "argmin i64 cols {cols} on {dev}");
        }
    }
}

/// Distance in ulps between two finite f32 values or equal infinities
/// (the bit patterns put in one increasing order; -0 and +0 coincide).
fn ulps_apart(a: f32, b: f32) -> u64 {
    let ordered = |v: f32| {
        let b = v.to_bits() as i64;
        if b < 0x8000_0000 { b } else { 0x8000_0000 - b }
    };
    ordered(a).abs_diff(ordered(b))
}

/// `exp` f32 within 2 ulp of the f64 exponential rounded to f32 over every
/// 64th f32 of [-104, 89] (both signs, the subnormal results and the
/// overflow edge among them: about 35 million values) on the Cpu and the
/// GPUs; every 65536th on the emulator. 2 ulp is CUDA's own `expf` bound and
/// the reference suite's for a GPU: the NVIDIA body is an `ex2.approx` of the
/// reduced argument (`math::exp_ex2`), the Cpu's the portable 1-ulp body.
/// `FERROCM_EXP_SWEEP_STEP=1` takes every f32 of the range on the Cpu and
/// the GPUs (2.2 billion values: 18 GB of host memory).
#[test]
fn exp_f32_within_two_ulp_over_a_dense_sweep() {
    let dense: u32 = std::env::var("FERROCM_EXP_SWEEP_STEP")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&s| s > 0)
        .unwrap_or(64);
    for dev in devices() {
        let step: u32 = if dev.is_gpu() || dev == Device::Cpu {
            dense
        } else {
            65_536
        };
        let xs: Vec<f32> = (0..=0x42D0_0000u32)
            .step_by(step as usize)
            .flat_map(|b| [f32::from_bits(b), -f32::from_bits(b)])
            .filter(|x| (-104.0..=89.0).contains(x))
            .collect();
        let got = Tensor::from_slice(&xs, &[xs.len()], &dev)
            .unwrap()
            .exp()
            .unwrap()
            .to_vec()
            .unwrap();
        let mut worst = (0u64, 0.0f32);
        for (&x, &g) in xs.iter().zip(&got) {
            let want = (x as f64).exp() as f32;
            let d = ulps_apart(g, want);
            if d > worst.0 {
                worst = (d, x);
            }
        }
        eprintln!(
            "{dev}: exp f32 at most {} ulp ({} values)",
            worst.0,
            xs.len()
        );
        assert!(
            worst.0 <= 2,
            "{dev}: exp({:e}) is {} ulp from {:e} ({} values)",
            worst.1,
            worst.0,
            (worst.1 as f64).exp() as f32,
            xs.len()
        );
    }
}
