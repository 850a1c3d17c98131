//! `group_norm`, `instance_norm` and `batch_norm` (inference) against f64
//! formulas written here from PyTorch's definitions, on every device (the
//! Cpu, the emulator at wave 32 and 64 with the sanitizer on, any GPU) and
//! every float dtype: contiguous, channels-last and strided inputs, NaN and
//! inf, large offsets (where `Σx² - (Σx)²/n` would cancel), typed errors.
//!
//! Bound: the f32 sums' worst case over a group of `count` elements
//! (`(count + 8) · 2^-24` relative, on the normalised value and the affine
//! terms) plus half an ulp of the dtype.

mod common;

use ferrocm::ops::WithDType;
use ferrocm::{Device, Error, Tensor, bf16, f16};

fn values(n: usize, seed: u64, scale: f64, offset: f64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) * scale + offset
        })
        .collect()
}

fn rounded<T: WithDType>(v: &[f64]) -> (Vec<T>, Vec<f64>) {
    let t: Vec<T> = v.iter().map(|&x| T::from_f64(x)).collect();
    let r = t.iter().map(|x| x.to_f64()).collect();
    (t, r)
}

fn half_ulp<T: WithDType>() -> f64 {
    match T::DTYPE {
        ferrocm::ops::DType::F32 => 2f64.powi(-24),
        ferrocm::ops::DType::F16 => 2f64.powi(-11),
        _ => 2f64.powi(-8),
    }
}

#[derive(Clone, Copy, Debug)]
enum Norm {
    Group(usize),
    Instance,
    Batch,
}

/// The norm in f64: `(x - mean) / sqrt(var + eps) * w + b` with the group's
/// (or the running) statistics; also each output's scale of error
/// (`|z·w| + |b|`, z the normalised value) and its group's count.
#[allow(clippy::too_many_arguments)]
fn reference(
    norm: Norm,
    shape: &[usize],
    x: &[f64],
    w: Option<&[f64]>,
    b: Option<&[f64]>,
    stats: Option<(&[f64], &[f64])>,
    eps: f64,
) -> Vec<(f64, f64, f64)> {
    let (n, c) = (shape[0], shape[1]);
    let s: usize = shape[2..].iter().product();
    let groups = match norm {
        Norm::Group(g) => g,
        _ => c,
    };
    let cg = c / groups;
    let mut out = vec![(0.0, 0.0, 0.0); n * c * s];
    for img in 0..n {
        for g in 0..groups {
            let idx = |ch: usize, p: usize| (img * c + g * cg + ch) * s + p;
            let count = (cg * s) as f64;
            let (mean, var) = if let Norm::Batch = norm {
                (0.0, 0.0)
            } else {
                let mut m = 0.0;
                for ch in 0..cg {
                    for p in 0..s {
                        m += x[idx(ch, p)];
                    }
                }
                m /= count;
                let mut v = 0.0;
                for ch in 0..cg {
                    for p in 0..s {
                        v += (x[idx(ch, p)] - m).powi(2);
                    }
                }
                (m, v / count)
            };
            for ch in 0..cg {
                let cc = g * cg + ch;
                let (mean, var, count) = match (norm, stats) {
                    (Norm::Batch, Some((rm, rv))) => (rm[cc], rv[cc], 1.0),
                    _ => (mean, var, count),
                };
                let wc = w.map_or(1.0, |w| w[cc]);
                let bc = b.map_or(0.0, |b| b[cc]);
                for p in 0..s {
                    let z = (x[idx(ch, p)] - mean) / (var + eps).sqrt();
                    out[idx(ch, p)] = (z * wc + bc, (z * wc).abs() + bc.abs(), count);
                }
            }
        }
    }
    out
}

fn check<T: WithDType>(got: &Tensor<T>, want: &[(f64, f64, f64)], what: &str) {
    let got = got.to_vec().unwrap();
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, &(w, scale, count))) in got.iter().zip(want).enumerate() {
        let g = g.to_f64();
        if w.is_nan() {
            assert!(
                g.is_nan(),
                "{what} [{}] element {i}: got {g}, want NaN",
                T::DTYPE
            );
            continue;
        }
        let bound = (count + 8.0) * 2f64.powi(-24) * (scale + 1.0) + half_ulp::<T>() * w.abs();
        assert!(
            (g - w).abs() <= bound,
            "{what} [{}] element {i}: got {g}, want {w} (bound {bound:e})",
            T::DTYPE
        );
    }
}

fn run<T: WithDType>(dev: &Device) {
    let cases: [(Norm, &[usize], bool, f64); 21] = [
        (Norm::Group(2), &[3, 4, 5, 7], true, 0.0),
        (Norm::Group(1), &[1, 6, 3, 3], false, 0.0),
        (Norm::Group(3), &[2, 9, 17], true, 100.0),
        (Norm::Group(4), &[1, 8, 2, 3, 5], true, 0.0),
        (Norm::Group(5), &[2, 5], true, 0.0),
        (Norm::Instance, &[2, 3, 4, 6], true, 0.0),
        (Norm::Instance, &[1, 4, 13], false, -50.0),
        (Norm::Batch, &[3, 4, 5, 6], true, 0.0),
        // Few long stat rows (each workitem sums many elements), rows and
        // positions that fill no whole workgroup.
        (Norm::Group(2), &[2, 4, 64, 64], true, 0.0),
        (Norm::Group(1), &[1, 4, 67, 67], false, 100.0),
        (Norm::Instance, &[1, 2, 97, 97], true, -50.0),
        // More images x channels than the grid has rows of workgroups:
        // each workitem normalises several.
        (Norm::Batch, &[2, 1030, 2, 3], true, 0.0),
        (Norm::Group(4), &[1, 2052, 3], true, 0.0),
        // Positions in whole chunks of 8 (the kernels' 16-byte paths), with
        // a large offset, and a batch norm.
        (Norm::Group(3), &[2, 6, 5, 8], true, 100.0),
        (Norm::Batch, &[2, 5, 4, 8], true, 0.0),
        // Chunked stat rows, under a quarter of the emulator's 16 units:
        // statistics and normalisation as two kernels; more: one kernel (a
        // group of 3 channels of 8 positions: words end on a channel's end
        // in f32 and f16 alike), and instance norms (one channel a group)
        // likewise.
        (Norm::Group(1), &[1, 3, 2, 8], true, 100.0),
        (Norm::Group(3), &[5, 9, 8], true, -50.0),
        (Norm::Instance, &[3, 5, 2, 8], false, 0.0),
        // More stat rows than units, the emulator's or a large GPU's (an
        // H100's 132, an MI300X's 304): one kernel, each workgroup taking
        // several rows.
        (Norm::Group(2), &[160, 4, 8], true, 0.0),
        (Norm::Instance, &[2, 160, 16], true, 50.0),
        // One kernel on long stat rows: 65664 elements, 8208 16-byte words
        // in f16/bf16 and 16416 in f32, eight or more a workitem.
        (Norm::Group(2), &[4, 4, 8, 4104], true, 10.0),
    ];
    for (i, &(norm, shape, affine, offset)) in cases.iter().enumerate() {
        let seed = 700 + 10 * i as u64;
        let count: usize = shape.iter().product();
        let c = shape[1];
        let (x, xr) = rounded::<T>(&values(count, seed, 3.0, offset));
        let (w, wr) = rounded::<T>(&values(c, seed + 1, 1.5, 0.0));
        let (b, br) = rounded::<T>(&values(c, seed + 2, 1.0, 0.0));
        let (rm, rmr) = rounded::<T>(&values(c, seed + 3, 1.0, 0.0));
        let (rv, rvr) = rounded::<T>(&values(c, seed + 4, 1.0, 2.0));
        let xt = Tensor::from_vec(x, shape, dev).unwrap();
        let wt = Tensor::from_vec(w, &[c], dev).unwrap();
        let bt = Tensor::from_vec(b, &[c], dev).unwrap();
        let rmt = Tensor::from_vec(rm, &[c], dev).unwrap();
        let rvt = Tensor::from_vec(rv, &[c], dev).unwrap();
        let eps = 1e-5;
        let (wo, bo) = if affine {
            (Some(&wt), Some(&bt))
        } else {
            (None, None)
        };
        let want = reference(
            norm,
            shape,
            &xr,
            affine.then_some(&wr[..]),
            affine.then_some(&br[..]),
            Some((&rmr, &rvr)),
            eps as f64,
        );
        let apply = |t: &Tensor<T>| {
            match norm {
                Norm::Group(g) => t.group_norm(g, wo, bo, eps),
                Norm::Instance => t.instance_norm(wo, bo, eps),
                Norm::Batch => t.batch_norm(&rmt, &rvt, wo, bo, eps),
            }
            .unwrap()
        };
        let what = format!("{norm:?} {shape:?} affine {affine} on {dev}");
        let y = apply(&xt);
        assert_eq!(y.shape(), shape, "{what}");
        check(&y, &want, &what);
        if shape.len() > 2 {
            // Channels-last memory, read in place, output channels-last.
            let r = shape.len();
            let mut to_last: Vec<usize> = vec![0];
            to_last.extend(2..r);
            to_last.push(1);
            let mut to_first = vec![0, r - 1];
            to_first.extend(1..r - 1);
            let view = xt
                .permute(&to_last)
                .unwrap()
                .contiguous()
                .unwrap()
                .permute(&to_first)
                .unwrap();
            let y = apply(&view);
            check(&y, &want, &format!("{what}, channels-last"));
            assert_eq!(y.layout().strides()[1], 1, "{what}: channels-last output");
        }
        if count.is_multiple_of(8) {
            // The same values one element into their buffer: dense, but not
            // on a 16-byte boundary, so the kernels go element by element.
            let mut v = vec![T::from_f64(7.0)];
            v.extend(xt.to_vec().unwrap());
            let flat = Tensor::from_vec(v, &[count + 1], dev).unwrap();
            let t = flat.narrow(0, 1, count).unwrap().reshape(shape).unwrap();
            assert_eq!(t.layout().offset(), 1, "{what}: an offset view");
            check(&apply(&t), &want, &format!("{what}, an offset view"));
        }
        if shape.len() > 3 {
            // A spatial view that does not merge: copied, same result.
            let r = shape.len();
            let t = xt.transpose(r - 2, r - 1).unwrap();
            let dense = t.contiguous().unwrap();
            let (a, b) = (apply(&t).to_vec().unwrap(), apply(&dense).to_vec().unwrap());
            let same = a
                .iter()
                .zip(&b)
                .all(|(p, q)| p.to_f64().to_bits() == q.to_f64().to_bits());
            assert!(same, "{what}: a transposed view");
        }
    }
}

#[test]
fn channel_norms_match_f64_formulas_on_every_device_and_dtype() {
    for dev in common::devices() {
        run::<f32>(&dev);
        run::<f16>(&dev);
        run::<bf16>(&dev);
    }
}

/// A NaN or inf poisons exactly its group (its statistics); under a batch
/// norm only its own element. An empty batch is an empty output.
#[test]
fn channel_norms_confine_nan_and_inf_and_take_empty_batches() {
    for dev in common::devices() {
        let mut x: Vec<f32> = (0..2 * 4 * 3).map(|i| i as f32 * 0.25).collect();
        x[1] = f32::NAN; // image 0, channel 0: group 0 of 2
        x[2 * 4 * 3 - 1] = f32::INFINITY; // image 1, channel 3: group 1
        let t = Tensor::from_slice(&x, &[2, 4, 3], &dev).unwrap();
        let y = t.group_norm(2, None, None, 1e-5).unwrap().to_vec().unwrap();
        for (i, v) in y.iter().enumerate() {
            let (img, ch) = (i / 12, (i / 3) % 4);
            let poisoned = (img == 0 && ch < 2) || (img == 1 && ch >= 2);
            assert_eq!(v.is_nan(), poisoned, "{dev}: element {i} = {v}");
        }
        let ones = Tensor::<f32>::ones(&[4], &dev).unwrap();
        let zeros = Tensor::<f32>::zeros(&[4], &dev).unwrap();
        let y = t
            .batch_norm(&zeros, &ones, None, None, 0.0)
            .unwrap()
            .to_vec()
            .unwrap();
        assert!(y[1].is_nan() && y[23] == f32::INFINITY, "{dev}");
        assert_eq!(y.iter().filter(|v| !v.is_finite()).count(), 2, "{dev}");
        let e = Tensor::<f32>::zeros(&[0, 4, 3], &dev).unwrap();
        assert_eq!(
            e.group_norm(2, None, None, 1e-5).unwrap().shape(),
            &[0, 4, 3]
        );
        assert_eq!(
            e.instance_norm(None, None, 1e-5).unwrap().shape(),
            &[0, 4, 3]
        );
    }
}

#[test]
fn channel_norms_refuse_bad_inputs_with_typed_errors() {
    let dev = Device::Cpu;
    let x = Tensor::<f32>::zeros(&[2, 6, 5], &dev).unwrap();
    let c6 = Tensor::<f32>::ones(&[6], &dev).unwrap();
    let c5 = Tensor::<f32>::ones(&[5], &dev).unwrap();
    let bad = |r: ferrocm::Result<Tensor<f32>>, op: &str, needle: &str| match r {
        Err(Error::BadParameter { op: o, what }) => {
            assert_eq!(o, op);
            assert!(what.contains(needle), "{what} lacks {needle}");
        }
        other => panic!("{op}: expected BadParameter ({needle}), got {other:?}"),
    };
    bad(
        x.group_norm(4, None, None, 1e-5),
        "group_norm",
        "divide the channels 6",
    );
    bad(
        x.group_norm(0, None, None, 1e-5),
        "group_norm",
        "at least 1",
    );
    bad(
        x.group_norm(2, Some(&c5), None, 1e-5),
        "group_norm",
        "weight must have shape [6]",
    );
    bad(
        x.group_norm(2, None, Some(&c5), 1e-5),
        "group_norm",
        "bias must have shape [6]",
    );
    bad(
        c6.group_norm(1, None, None, 1e-5),
        "group_norm",
        "rank 2 or more",
    );
    bad(
        x.reshape(&[12, 5]).unwrap().instance_norm(None, None, 1e-5),
        "instance_norm",
        "rank 3",
    );
    bad(
        x.reshape(&[2, 30, 1])
            .unwrap()
            .instance_norm(None, None, 1e-5),
        "instance_norm",
        "more than one position",
    );
    bad(
        x.batch_norm(&c5, &c6, None, None, 1e-5),
        "batch_norm",
        "running_mean",
    );
    bad(
        x.batch_norm(&c6, &c5, None, None, 1e-5),
        "batch_norm",
        "running_var",
    );
    let i = Tensor::<u32>::zeros(&[2, 6, 5], &dev).unwrap();
    assert!(matches!(
        i.group_norm(2, None, None, 1e-5),
        Err(Error::UnsupportedDType { .. })
    ));
    if let Some(other) = common::devices()
        .into_iter()
        .find(|d| !matches!(d, Device::Cpu))
    {
        let w = Tensor::<f32>::ones(&[6], &other).unwrap();
        assert!(matches!(
            x.group_norm(2, Some(&w), None, 1e-5),
            Err(Error::DeviceMismatch { .. })
        ));
    }
}
