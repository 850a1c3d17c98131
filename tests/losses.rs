//! The losses (`ferrocm::ops::loss`) and `clamp` against f64 formulas
//! written here from PyTorch's definitions, on every device (the Cpu, the
//! emulator at wave 32 and 64 with the sanitizer on, any GPU that answers)
//! and every float dtype: the reference takes the inputs as rounded to the
//! dtype, so the only rounding it cannot see is the loss's own. One test
//! provokes a device fault (a target past the classes), so they take turns.

mod common;

use ferrocm::ops::WithDType;
use ferrocm::ops::loss::{CrossEntropyOptions, Reduction};
use ferrocm::{Device, Tensor, bf16, f16};

/// Deterministic values in `[-scale, scale]` (an LCG: no shared code with
/// the op library's generators).
fn values(n: usize, seed: u64, scale: f64) -> Vec<f64> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) * scale
        })
        .collect()
}

/// The dtype's tolerance: f32 sums a few rounding steps; f16 and bf16 round
/// the loss once at the end (half an ulp), plus the f32 work before it.
fn tol<T: WithDType>() -> f64 {
    match T::DTYPE {
        ferrocm::ops::DType::F32 => 2e-5,
        ferrocm::ops::DType::F16 => 1.5e-3,
        _ => 8e-3,
    }
}

fn close(got: f64, want: f64, rel: f64) -> bool {
    if want.is_nan() {
        return got.is_nan();
    }
    if want.is_infinite() {
        return got == want;
    }
    (got - want).abs() <= 1e-6 + rel * want.abs()
}

/// `got` (any shape) against `want`, element for element. A reference past
/// the dtype's range is taken as the dtype holds it (infinity).
fn check<T: WithDType>(got: Tensor<T>, want: &[f64], what: &str) {
    let got: Vec<f64> = got
        .to_vec()
        .unwrap()
        .into_iter()
        .map(|v| v.to_f64())
        .collect();
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let held = T::from_f64(w).to_f64();
        let w = if held.is_infinite() { held } else { w };
        assert!(
            close(g, w, tol::<T>()),
            "{what} [{}]: element {i}: got {g}, want {w}",
            T::DTYPE
        );
    }
}

/// Folds per-element losses as PyTorch's reductions do.
fn fold(l: &[f64], r: Reduction, count: Option<f64>) -> Vec<f64> {
    match r {
        Reduction::None => l.to_vec(),
        Reduction::Sum => vec![l.iter().sum()],
        Reduction::Mean => vec![l.iter().sum::<f64>() / count.unwrap_or(l.len() as f64)],
    }
}

const REDUCTIONS: [Reduction; 3] = [Reduction::None, Reduction::Mean, Reduction::Sum];

/// Inputs that break things: signed zeros, huge and tiny magnitudes, NaN,
/// infinities, then ordinary values (37 elements: not a multiple of 8).
fn hard_pair() -> (Vec<f64>, Vec<f64>) {
    let mut x = vec![
        0.0,
        -0.0,
        1e30,
        -3e38,
        1e-40,
        f64::NAN,
        f64::INFINITY,
        2.5,
        1.0,
    ];
    let mut y = vec![-0.0, 0.0, -1e30, 3e38, 0.0, 1.0, f64::INFINITY, 2.5, 1.5];
    x.extend(values(28, 1, 4.0));
    y.extend(values(28, 2, 4.0));
    (x, y)
}

fn tensor<T: WithDType>(v: &[f64], shape: &[usize], dev: &Device) -> (Tensor<T>, Vec<f64>) {
    let t: Vec<T> = v.iter().map(|&x| T::from_f64(x)).collect();
    let rounded = t.iter().map(|x| x.to_f64()).collect();
    (Tensor::from_vec(t, shape, dev).unwrap(), rounded)
}

/// ln v clamped below at -100 as PyTorch's binary cross entropy does (a
/// NaN stays NaN: `f64::max` would drop it).
fn clamp_ln(v: f64) -> f64 {
    let l = v.ln();
    if l.is_nan() { l } else { l.max(-100.0) }
}

fn elementwise_losses<T: WithDType>(dev: &Device) {
    let (xv, yv) = hard_pair();
    let n = xv.len();
    let (x, xr) = tensor::<T>(&xv, &[n], dev);
    let (y, yr) = tensor::<T>(&yv, &[n], dev);
    let each = |f: &dyn Fn(f64, f64) -> f64| -> Vec<f64> {
        xr.iter().zip(&yr).map(|(&a, &b)| f(a, b)).collect()
    };
    // Every element with no reduction (the hard ones give inf and NaN);
    // the reductions over the ordinary tail, a view at an odd offset.
    let tail = |t: &Tensor<T>| t.narrow(0, 9, n - 9).unwrap();
    let (xs, ys) = (tail(&x), tail(&y));
    for r in REDUCTIONS {
        let (a, b, from) = match r {
            Reduction::None => (&x, &y, 0),
            _ => (&xs, &ys, 9),
        };
        let w = fold(&each(&|a, b| (a - b) * (a - b))[from..], r, None);
        check(a.mse_loss(b, r).unwrap(), &w, &format!("mse {r:?} {dev}"));
        let w = fold(&each(&|a, b| (a - b).abs())[from..], r, None);
        check(a.l1_loss(b, r).unwrap(), &w, &format!("l1 {r:?} {dev}"));
        for beta in [0.0, 0.5, 1.0] {
            let f = |a: f64, b: f64| {
                let d = (a - b).abs();
                if d < beta {
                    0.5 * d * d / beta
                } else {
                    d - 0.5 * beta
                }
            };
            let w = fold(&each(&f)[from..], r, None);
            check(
                a.smooth_l1_loss(b, beta as f32, r).unwrap(),
                &w,
                &format!("smooth_l1 beta {beta} {r:?} {dev}"),
            );
        }
    }
    // Probabilities: exact 0 and 1 (the -100 clamp on either log), NaN,
    // then ordinary ones; targets 0, 1 and between.
    let mut p = vec![0.0, 1.0, 0.0, 1.0, 0.5, f64::NAN, 1e-30];
    let mut t = vec![1.0, 0.0, 0.0, 1.0, 0.25, 1.0, 1.0];
    p.extend(values(30, 3, 0.5).into_iter().map(|v| v + 0.5));
    t.extend(values(30, 4, 0.5).into_iter().map(|v| v + 0.5));
    let n = p.len();
    let (pt, pr) = tensor::<T>(&p, &[n], dev);
    let (tt, tr) = tensor::<T>(&t, &[n], dev);
    let bce: Vec<f64> = pr
        .iter()
        .zip(&tr)
        .map(|(&x, &y)| -(y * clamp_ln(x) + (1.0 - y) * clamp_ln(1.0 - x)))
        .collect();
    // Logits: huge ones either way (the naive form overflows), zero, NaN.
    let mut z = vec![1e4, -1e4, 88.0, -88.0, 0.0, -0.0, f64::NAN, 30.0, -30.0];
    let mut zt = vec![1.0, 1.0, 0.0, 0.0, 1.0, 0.5, 1.0, 1.0, 0.0];
    z.extend(values(28, 5, 12.0));
    zt.extend(values(28, 6, 0.5).into_iter().map(|v| v + 0.5));
    let m = z.len();
    let (zx, zr) = tensor::<T>(&z, &[m], dev);
    let (zy, zyr) = tensor::<T>(&zt, &[m], dev);
    let bcel: Vec<f64> = zr
        .iter()
        .zip(&zyr)
        .map(|(&x, &y)| x.max(0.0) - x * y + (-x.abs()).exp().ln_1p())
        .collect();
    for r in REDUCTIONS {
        // The reductions skip the NaN (probabilities from 6, logits from 7).
        let (pf, zf) = if r == Reduction::None { (0, 0) } else { (6, 7) };
        check(
            pt.narrow(0, pf, n - pf)
                .unwrap()
                .binary_cross_entropy(&tt.narrow(0, pf, n - pf).unwrap(), r)
                .unwrap(),
            &fold(&bce[pf..], r, None),
            &format!("bce {r:?} {dev}"),
        );
        check(
            zx.narrow(0, zf, m - zf)
                .unwrap()
                .binary_cross_entropy_with_logits(&zy.narrow(0, zf, m - zf).unwrap(), r)
                .unwrap(),
            &fold(&bcel[zf..], r, None),
            &format!("bce_with_logits {r:?} {dev}"),
        );
    }
}

#[test]
fn elementwise_losses_match_their_formulas() {
    let _turn = common::one_at_a_time();
    for dev in common::devices() {
        elementwise_losses::<f32>(&dev);
        elementwise_losses::<f16>(&dev);
        elementwise_losses::<bf16>(&dev);
    }
}

/// f64 log-softmax of each row of `(rows, c)`.
fn log_softmax_rows(x: &[f64], c: usize) -> Vec<f64> {
    x.chunks(c)
        .flat_map(|row| {
            let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = row.iter().map(|v| (v - m).exp()).sum();
            row.iter().map(move |v| v - m - s.ln()).collect::<Vec<_>>()
        })
        .collect()
}

/// The reference nll / cross entropy over rows of `c` log-probabilities:
/// per-row losses (0 where ignored) and the count of rows kept.
fn class_reference(
    logp: &[f64],
    c: usize,
    t: &[i64],
    ignore: Option<i64>,
    eps: f64,
) -> (Vec<f64>, f64) {
    let mut kept = 0.0;
    let l = logp
        .chunks(c)
        .zip(t)
        .map(|(row, &t)| {
            if Some(t) == ignore {
                return 0.0;
            }
            kept += 1.0;
            let nll = -row[t as usize];
            let spread = -row.iter().sum::<f64>() / c as f64;
            (1.0 - eps) * nll + eps * spread
        })
        .collect();
    (l, kept)
}

/// `(n, c, rest)` in row-major order to rows of `c` (class last), and the
/// targets of `(n, rest)` in the same row order.
fn class_last(x: &[f64], n: usize, c: usize, rest: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(x.len());
    for i in 0..n {
        for r in 0..rest {
            for k in 0..c {
                out.push(x[(i * c + k) * rest + r]);
            }
        }
    }
    out
}

fn class_losses<T: WithDType>(dev: &Device) {
    // (N, C) with C prime; (C) with a 0-d target; (N, C, d1, d2).
    for (shape, seed) in [
        (vec![7usize, 13], 10u64),
        (vec![13], 11),
        (vec![3, 5, 2, 3], 12),
    ] {
        let c = if shape.len() == 1 { shape[0] } else { shape[1] };
        let n = if shape.len() == 1 { 1 } else { shape[0] };
        let rest: usize = shape.iter().skip(2).product();
        let count = n * c * rest;
        let mut xv = values(count, seed, 6.0);
        // Huge logits either way: log-softmax keeps them finite.
        xv[0] = 1e4;
        xv[count - 1] = -1e4;
        let (x, xr) = tensor::<T>(&xv, &shape, dev);
        let mut tshape = shape.clone();
        tshape.remove(if shape.len() == 1 { 0 } else { 1 });
        let rows = n * rest;
        let tv: Vec<i64> = (0..rows)
            .map(|i| ((i * 7 + seed as usize) % c) as i64)
            .collect();
        // Some targets ignored (-100, PyTorch's default) where there are
        // several rows.
        let tv_ign: Vec<i64> = tv
            .iter()
            .enumerate()
            .map(|(i, &t)| if rows > 1 && i % 3 == 1 { -100 } else { t })
            .collect();
        let rows_f64 = class_last(&xr, n, c, rest);
        let logp = log_softmax_rows(&rows_f64, c);
        for (targets, ignore) in [(&tv, None), (&tv_ign, Some(-100)), (&tv, Some(2))] {
            let t64 = Tensor::from_vec(targets.clone(), &tshape, dev).unwrap();
            for eps in [0.0, 0.1, 1.0] {
                for r in REDUCTIONS {
                    let opts = CrossEntropyOptions::new()
                        .reduction(r)
                        .ignore_index(ignore)
                        .label_smoothing(eps as f32);
                    let (l, kept) = class_reference(&logp, c, targets, ignore, eps);
                    let want = fold(&l, r, Some(kept));
                    let what =
                        format!("cross_entropy {shape:?} ignore {ignore:?} eps {eps} {r:?} {dev}");
                    check(x.cross_entropy(&t64, &opts).unwrap(), &want, &what);
                    // nll_loss of the log-probabilities: the same numbers
                    // (the log-softmax rounded to T first).
                    let lp = x
                        .log_softmax_dim(if shape.len() == 1 { 0 } else { 1 })
                        .unwrap();
                    let lpr = class_last(
                        &lp.to_vec()
                            .unwrap()
                            .iter()
                            .map(|v| v.to_f64())
                            .collect::<Vec<_>>(),
                        n,
                        c,
                        rest,
                    );
                    let (l, kept) = class_reference(&lpr, c, targets, ignore, eps);
                    check(
                        lp.nll_loss(&t64, &opts).unwrap(),
                        &fold(&l, r, Some(kept)),
                        &format!("nll {what}"),
                    );
                }
            }
            // u32 targets: -100 cannot be one, so nothing is ignored by the
            // default; an ignore index of 2 is.
            if targets.iter().all(|&t| t >= 0) {
                let t32 =
                    Tensor::from_vec(targets.iter().map(|&t| t as u32).collect(), &tshape, dev)
                        .unwrap();
                let opts = CrossEntropyOptions::new().ignore_index(ignore);
                let (l, kept) = class_reference(&logp, c, targets, ignore, 0.0);
                check(
                    x.cross_entropy(&t32, &opts).unwrap(),
                    &fold(&l, Reduction::Mean, Some(kept)),
                    &format!("cross_entropy u32 {shape:?} {ignore:?} {dev}"),
                );
            }
        }
        // Class probabilities of the same shape (soft targets).
        let pv: Vec<f64> = values(count, seed + 100, 1.0)
            .iter()
            .map(|v| v.abs())
            .collect();
        let (p, pr) = tensor::<T>(&pv, &shape, dev);
        let prow = class_last(&pr, n, c, rest);
        for eps in [0.0, 0.2] {
            let l: Vec<f64> = logp
                .chunks(c)
                .zip(prow.chunks(c))
                .map(|(lr, tr)| {
                    -lr.iter()
                        .zip(tr)
                        .map(|(a, t)| a * ((1.0 - eps) * t + eps / c as f64))
                        .sum::<f64>()
                })
                .collect();
            for r in REDUCTIONS {
                check(
                    x.cross_entropy_soft(&p, eps as f32, r).unwrap(),
                    &fold(&l, r, None),
                    &format!("cross_entropy_soft {shape:?} eps {eps} {r:?} {dev}"),
                );
            }
        }
    }
}

#[test]
fn class_losses_match_log_softmax_formulas() {
    let _turn = common::one_at_a_time();
    for dev in common::devices() {
        class_losses::<f32>(&dev);
        class_losses::<f16>(&dev);
        class_losses::<bf16>(&dev);
    }
}

#[test]
fn class_losses_read_strided_logits_and_fold_edge_cases() {
    let _turn = common::one_at_a_time();
    for dev in common::devices() {
        // A transposed (strided) view of the logits: (C, N) read as (N, C).
        let (n, c) = (5, 4);
        let xv = values(n * c, 20, 3.0);
        let xt = Tensor::from_vec(xv.iter().map(|&v| v as f32).collect(), &[c, n], &dev).unwrap();
        let x = xt.transpose(0, 1).unwrap();
        let xv = &xv;
        let rows: Vec<f64> = (0..n)
            .flat_map(|i| (0..c).map(move |k| xv[k * n + i] as f32 as f64))
            .collect();
        let t = vec![3i64, 0, 1, 2, 3];
        let tt = Tensor::from_vec(t.clone(), &[n], &dev).unwrap();
        let (l, kept) = class_reference(&log_softmax_rows(&rows, c), c, &t, None, 0.0);
        check(
            x.cross_entropy(&tt, &CrossEntropyOptions::new()).unwrap(),
            &fold(&l, Reduction::Mean, Some(kept)),
            &format!("strided cross_entropy {dev}"),
        );
        // -inf logits of other classes: the target's loss stays finite.
        let x = Tensor::from_slice(&[f32::NEG_INFINITY, 2.0, f32::NEG_INFINITY], &[1, 3], &dev)
            .unwrap();
        let t1 = Tensor::from_slice(&[1i64], &[1], &dev).unwrap();
        check(
            x.cross_entropy(&t1, &CrossEntropyOptions::new()).unwrap(),
            &[0.0],
            "one live class",
        );
        // Every target ignored: the mean is 0 / 0 = NaN, the sum 0, and the
        // per-row losses 0 even where the ignored row's logits are NaN.
        let x = Tensor::from_slice(&[f32::NAN, 1.0, 2.0, 3.0], &[2, 2], &dev).unwrap();
        let t = Tensor::from_slice(&[-100i64, -100], &[2], &dev).unwrap();
        let opts = CrossEntropyOptions::new();
        check(
            x.cross_entropy(&t, &opts).unwrap(),
            &[f64::NAN],
            "all ignored, mean",
        );
        check(
            x.cross_entropy(&t, &opts.reduction(Reduction::Sum))
                .unwrap(),
            &[0.0],
            "all ignored, sum",
        );
        check(
            x.cross_entropy(&t, &opts.reduction(Reduction::None))
                .unwrap(),
            &[0.0, 0.0],
            "all ignored, none",
        );
        // No rows at all.
        let x = Tensor::<f32>::zeros(&[0, 3], &dev).unwrap();
        let t = Tensor::<i64>::zeros(&[0], &dev).unwrap();
        check(
            x.cross_entropy(&t, &opts).unwrap(),
            &[f64::NAN],
            "no rows, mean",
        );
        check(
            x.cross_entropy(&t, &opts.reduction(Reduction::Sum))
                .unwrap(),
            &[0.0],
            "no rows, sum",
        );
        let e = Tensor::<f32>::zeros(&[0], &dev).unwrap();
        check(
            e.mse_loss(&e, Reduction::Mean).unwrap(),
            &[f64::NAN],
            "empty mse mean",
        );
        check(
            e.mse_loss(&e, Reduction::Sum).unwrap(),
            &[0.0],
            "empty mse sum",
        );
        assert_eq!(e.mse_loss(&e, Reduction::None).unwrap().shape(), &[0]);
    }
}

#[test]
fn losses_refuse_bad_inputs_with_typed_errors() {
    let _turn = common::one_at_a_time();
    for dev in common::devices() {
        let x = Tensor::<f32>::zeros(&[2, 3], &dev).unwrap();
        let msg = |e: ferrocm::ops::Error| e.to_string();
        let e = msg(x
            .mse_loss(&Tensor::zeros(&[3, 2], &dev).unwrap(), Reduction::Mean)
            .unwrap_err());
        assert!(
            e.contains("mse_loss") && e.contains("[2, 3]") && e.contains("[3, 2]"),
            "{e}"
        );
        let i = Tensor::<i64>::zeros(&[2, 3], &dev).unwrap();
        let e = msg(i.l1_loss(&i, Reduction::Sum).unwrap_err());
        assert!(e.contains("l1_loss"), "{e}");
        let e = msg(x.smooth_l1_loss(&x, -1.0, Reduction::Mean).unwrap_err());
        assert!(e.contains("smooth_l1_loss") && e.contains("-1"), "{e}");
        assert!(x.smooth_l1_loss(&x, f32::NAN, Reduction::Mean).is_err());
        let t = Tensor::<i64>::zeros(&[3], &dev).unwrap();
        let e = msg(x
            .cross_entropy(&t, &CrossEntropyOptions::new())
            .unwrap_err());
        assert!(
            e.contains("cross_entropy") && e.contains("[2, 3]") && e.contains("[3]"),
            "{e}"
        );
        let t = Tensor::<i64>::zeros(&[2], &dev).unwrap();
        let e = msg(x
            .cross_entropy(&t, &CrossEntropyOptions::new().label_smoothing(1.5))
            .unwrap_err());
        assert!(e.contains("label_smoothing 1.5"), "{e}");
        let s = Tensor::<f32>::zeros(&[], &dev).unwrap();
        let e = msg(s
            .nll_loss(
                &Tensor::<i64>::zeros(&[], &dev).unwrap(),
                &CrossEntropyOptions::new(),
            )
            .unwrap_err());
        assert!(e.contains("nll_loss") && e.contains("0-d"), "{e}");
        assert!(i.cross_entropy(&t, &CrossEntropyOptions::new()).is_err());
        if dev != Device::Cpu {
            let e = msg(x
                .mse_loss(
                    &Tensor::zeros(&[2, 3], &Device::Cpu).unwrap(),
                    Reduction::Mean,
                )
                .unwrap_err());
            assert!(e.contains("mse_loss"), "{e}");
        }
        // A target past the classes: gather's typed error, from the call on
        // the Cpu and from the next wait on a kernel device.
        let bad = Tensor::from_slice(&[0i64, 3], &[2], &dev).unwrap();
        let r = x
            .cross_entropy(&bad, &CrossEntropyOptions::new())
            .and_then(|l| l.to_vec().map(drop));
        let e = msg(r.unwrap_err());
        assert!(e.contains("id 3") && e.contains("size 3"), "{e}");
    }
}

#[test]
fn clamp_limits_every_dtype_as_pytorch() {
    let _turn = common::one_at_a_time();
    for dev in common::devices() {
        let x = Tensor::from_slice(
            &[-2.0f32, -0.0, 0.5, 7.0, f32::NAN, f32::INFINITY],
            &[6],
            &dev,
        )
        .unwrap();
        let y = x.clamp(-1.0, 1.0).unwrap().to_vec().unwrap();
        assert_eq!(&y[..4], &[-1.0, -0.0, 0.5, 1.0]);
        assert!(y[4].is_nan());
        assert_eq!(y[5], 1.0);
        // min > max: max everywhere (PyTorch's order: the max bound last).
        assert_eq!(x.clamp(3.0, 1.0).unwrap().to_vec().unwrap()[..4], [1.0; 4]);
        // A NaN bound makes NaN.
        assert!(
            x.clamp(f32::NAN, 1.0)
                .unwrap()
                .to_vec()
                .unwrap()
                .iter()
                .all(|v| v.is_nan())
        );
        let b = x
            .to_dtype::<bf16>()
            .unwrap()
            .clamp(bf16::from_f32(-1.0), bf16::from_f32(1.0))
            .unwrap();
        assert_eq!(
            b.to_vec().unwrap()[..4],
            [-1.0, -0.0, 0.5, 1.0].map(bf16::from_f32)
        );
        let u = Tensor::from_slice(&[0u8, 5, 200, 255], &[4], &dev).unwrap();
        assert_eq!(
            u.clamp(4, 201).unwrap().to_vec().unwrap(),
            vec![4, 5, 200, 201]
        );
        let i = Tensor::from_slice(&[i64::MIN, -3, 0, i64::MAX], &[4], &dev).unwrap();
        assert_eq!(
            i.clamp(-5, 10).unwrap().to_vec().unwrap(),
            vec![-5, -3, 0, 10]
        );
        let w = Tensor::from_slice(&[1u32, 9, u32::MAX], &[3], &dev).unwrap();
        assert_eq!(w.clamp(2, 8).unwrap().to_vec().unwrap(), vec![2, 8, 8]);
        // Strided: a transposed view.
        let m = Tensor::from_slice(&[-5.0f32, 5.0, 0.25, -0.25], &[2, 2], &dev).unwrap();
        let t = m.transpose(0, 1).unwrap().clamp(-1.0, 1.0).unwrap();
        assert_eq!(t.to_vec().unwrap(), vec![-1.0, 0.25, 1.0, -0.25]);
    }
}
