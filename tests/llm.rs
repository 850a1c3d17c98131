//! The LLM ops (RMSNorm, LayerNorm and their fused residual adds, the gated
//! activations, rotary embeddings) against f64 formulas written here, on
//! the Cpu, the emulator (wave 32 and 64, sanitizer on) and any GPU that
//! answers. Nothing here calls the ops' scalar functions: inputs are decoded
//! to f64 with the `half` crate (exact), the formula is evaluated in f64,
//! and the bound says what the op's f32 arithmetic may add to it.

mod common;
use ferrocm::ops::{Error, WithDType};
use ferrocm::{Activation, Device, Tensor, bf16, f16};

/// 2^-24: the unit roundoff of f32.
const U32: f64 = 1.0 / 16_777_216.0;

/// A dtype under test: its exact value as f64, its rounding from f64, the
/// spacing of its values near `v`.
trait Float: WithDType + Copy {
    const MANT: i32;
    fn f64(self) -> f64;
    fn of(v: f64) -> Self;
    /// The distance between `|v|` and the next value of the type up
    /// (subnormals: the smallest step).
    fn ulp(v: f64) -> f64 {
        let min_exp = if Self::MANT == 10 { -14 } else { -126 };
        let e = if v == 0.0 || !v.is_finite() {
            min_exp
        } else {
            (v.abs().log2().floor() as i32).max(min_exp)
        };
        2f64.powi(e - Self::MANT)
    }
}
impl Float for f32 {
    const MANT: i32 = 23;
    fn f64(self) -> f64 {
        self as f64
    }
    fn of(v: f64) -> Self {
        v as f32
    }
}
impl Float for f16 {
    const MANT: i32 = 10;
    fn f64(self) -> f64 {
        self.to_f64()
    }
    fn of(v: f64) -> Self {
        f16::from_f64(v)
    }
}
impl Float for bf16 {
    const MANT: i32 = 7;
    fn f64(self) -> f64 {
        self.to_f64()
    }
    fn of(v: f64) -> Self {
        bf16::from_f64(v)
    }
}

/// Deterministic pseudo-random numbers (xorshift), uniform in [-1, 1).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }
    fn vec<T: Float>(&mut self, n: usize, scale: f64, shift: f64) -> Vec<T> {
        (0..n).map(|_| T::of(shift + scale * self.next())).collect()
    }
    /// Small integers in `-k..=k` (their sums and squares are exact in f32).
    fn ints<T: Float>(&mut self, n: usize, k: i32) -> Vec<T> {
        (0..n)
            .map(|_| T::of(((self.next() + 1.0) * (k as f64 + 0.5)).floor() - k as f64))
            .collect()
    }
}

/// `got` against `want` (NaN matches NaN; infinities exactly), within
/// `bound(i)`; the message names the case and the element.
fn check<T: Float>(case: &str, got: &[T], want: &[f64], bound: impl Fn(usize) -> f64) {
    assert_eq!(got.len(), want.len(), "{case}: length");
    for (i, (g, &w)) in got.iter().zip(want).enumerate() {
        let g = g.f64();
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() {
            g == w
        } else {
            (g - w).abs() <= bound(i)
        };
        assert!(
            ok,
            "{case}: element {i}: got {g}, want {w} (bound {:e})",
            bound(i)
        );
    }
}

// ===========================================================================
// RMSNorm and LayerNorm
// ===========================================================================

/// The f64 references: the sum rounded to the dtype (fused), then per row
/// `(h - mean) / sqrt(var + eps) * w + b` (RMS: mean 0, var = mean(h²)).
fn norm_reference<T: Float>(
    layer: bool,
    h: &[T],
    cols: usize,
    w: &[T],
    b: Option<&[T]>,
    eps: f64,
) -> Vec<f64> {
    let mut out = Vec::with_capacity(h.len());
    for row in h.chunks(cols) {
        let v: Vec<f64> = row.iter().map(|x| x.f64()).collect();
        let n = cols as f64;
        let mean = if layer {
            v.iter().sum::<f64>() / n
        } else {
            0.0
        };
        let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
        let scale = 1.0 / (var + eps).sqrt();
        for (c, x) in v.iter().enumerate() {
            let bias = b.map_or(0.0, |b| b[c].f64());
            out.push((x - mean) * scale * w[c].f64() + bias);
        }
    }
    out
}

/// The bound of one output: what the f32 math may add (`rel` of the terms:
/// the sums' chains and a few roundings), plus the rounding to the dtype.
fn norm_bound<T: Float>(want: f64, terms: f64, rel: f64) -> f64 {
    let half_ulp = if T::MANT == 23 { 0.0 } else { T::ulp(want) };
    rel * terms + half_ulp
}

/// Runs one norm case on `dev` and checks it.
#[allow(clippy::too_many_arguments)]
fn norm_case<T: Float>(
    dev: &Device,
    layer: bool,
    fused: bool,
    rows: usize,
    cols: usize,
    x: &[T],
    r: &[T],
    w: &[T],
    b: Option<&[T]>,
    rel: f64,
) {
    let eps = 1e-5;
    let shape = [rows, cols];
    let case = format!(
        "{}{}_norm {} {rows}x{cols} on {dev}{}",
        if fused { "add_" } else { "" },
        if layer { "layer" } else { "rms" },
        T::DTYPE,
        if b.is_some() { " with bias" } else { "" }
    );
    let xt = Tensor::from_slice(x, &shape, dev).unwrap();
    let rt = Tensor::from_slice(r, &shape, dev).unwrap();
    let wt = Tensor::from_slice(w, &[cols], dev).unwrap();
    let bt = b.map(|b| Tensor::from_slice(b, &[cols], dev).unwrap());
    // The sum rounded once to the dtype (these inputs make x + r exact in
    // f32, so this is also the f32 add's result).
    let h: Vec<T> = if fused {
        x.iter()
            .zip(r)
            .map(|(a, b)| T::of(a.f64() + b.f64()))
            .collect()
    } else {
        x.to_vec()
    };
    let (sum, y) = match (layer, fused) {
        (false, false) => (None, xt.rms_norm(&wt, eps as f32)),
        (true, false) => (None, xt.layer_norm(&wt, bt.as_ref(), eps as f32)),
        (false, true) => {
            let (s, y) = xt.add_rms_norm(&rt, &wt, eps as f32).unwrap();
            (Some(s), Ok(y))
        }
        (true, true) => {
            let (s, y) = xt
                .add_layer_norm(&rt, &wt, bt.as_ref(), eps as f32)
                .unwrap();
            (Some(s), Ok(y))
        }
    };
    let y = y.unwrap_or_else(|e| panic!("{case}: {e}"));
    assert_eq!(y.shape(), &shape, "{case}: shape");
    if let Some(s) = sum {
        let got: Vec<T> = s.to_vec().unwrap();
        let bits = |v: &[T]| v.iter().map(|x| x.f64().to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got), bits(&h), "{case}: the sum");
    }
    let want = norm_reference(layer, &h, cols, w, b, eps);
    // The terms the error scales with: the output's size, and for the layer
    // norm the weight (the centred value's error is relative to the spread).
    let got: Vec<T> = y.to_vec().unwrap();
    check(&case, &got, &want, |i| {
        let c = i % cols;
        let terms = want[i].abs() + if layer { w[c].f64().abs() } else { 0.0 };
        norm_bound::<T>(want[i], terms, rel) + b.map_or(0.0, |b| b[c].f64().abs() * U32)
    });
}

/// Random rows: the worst case of f32 sums over the longest chain any
/// device adds (a Cpu lane: cols/8 terms; a GPU workitem fewer, plus its
/// tree), then a square root, a division and three products.
fn random_rel(cols: usize) -> f64 {
    (cols as f64 / 8.0 + 32.0) * U32
}

fn norm_random<T: Float>() {
    for dev in common::devices() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for &(rows, cols) in &[
            (1, 1),
            (3, 2),
            (2, 7),
            (5, 31),
            (3, 64),
            (2, 129),
            (9, 1000),
            (3, 1024),
            (2, 1025),
            (2, 4099),
        ] {
            let x = rng.vec::<T>(rows * cols, 2.0, 0.5);
            let r = rng.vec::<T>(rows * cols, 1.0, 0.0);
            let w = rng.vec::<T>(cols, 1.0, 0.2);
            let b = rng.vec::<T>(cols, 0.5, 0.0);
            for (layer, fused, bias) in [
                (false, false, false),
                (false, true, false),
                (true, false, true),
                (true, false, false),
                (true, true, true),
            ] {
                let bias = bias.then_some(&b[..]);
                norm_case(
                    &dev,
                    layer,
                    fused,
                    rows,
                    cols,
                    &x,
                    &r,
                    &w,
                    bias,
                    random_rel(cols),
                );
            }
        }
    }
}

#[test]
fn rms_and_layer_norm_f32_random_rows() {
    norm_random::<f32>();
}

#[test]
fn rms_and_layer_norm_f16_random_rows() {
    norm_random::<f16>();
}

#[test]
fn rms_and_layer_norm_bf16_random_rows() {
    norm_random::<bf16>();
}

/// Long rows of small integers: every sum and square is exact in f32 (in
/// any order), so only the final square root, division and products round:
/// a tight bound that would catch one element too many or too few even in
/// a row of 65536.
#[test]
fn norms_of_long_rows_with_exact_sums() {
    for dev in common::devices() {
        let mut rng = Rng(7);
        for &cols in &[4096usize, 65536, 65537] {
            let rows = 2;
            let x = rng.ints::<f32>(rows * cols, 4);
            let r = rng.ints::<f32>(rows * cols, 2);
            let w = rng.vec::<f32>(cols, 1.0, 0.0);
            for (layer, fused) in [(false, false), (false, true), (true, false), (true, true)] {
                norm_case(&dev, layer, fused, rows, cols, &x, &r, &w, None, 16.0 * U32);
            }
            let xb = rng.ints::<bf16>(rows * cols, 4);
            let wb = rng.vec::<bf16>(cols, 1.0, 0.0);
            norm_case(
                &dev,
                false,
                false,
                rows,
                cols,
                &xb,
                &xb,
                &wb,
                None,
                16.0 * U32,
            );
        }
    }
}

/// A large mean against a small spread: `Σh² - (Σh)²/n` in f32 would lose
/// every digit of the variance; the shifted sums keep it.
#[test]
fn layer_norm_keeps_the_variance_under_a_large_mean() {
    for dev in common::devices() {
        let mut rng = Rng(11);
        let (rows, cols) = (3, 1000);
        let x = rng.vec::<f32>(rows * cols, 1.0, 1000.0);
        let w = vec![1.0f32; cols];
        // The mean rounds at 1000 (half an ulp: 2^-15), an error relative to
        // the spread (~0.58) of 5e-5 in each output; the bound is 4x that.
        // The unshifted formula's error would be ~1.
        norm_case(
            &dev,
            true,
            false,
            rows,
            cols,
            &x,
            &x,
            &w,
            None,
            4000.0 * U32,
        );
    }
}

#[test]
fn norms_propagate_nan_and_infinity_per_row() {
    for dev in common::devices() {
        let cols = 5;
        let x = [
            1.0f32,
            f32::NAN,
            2.0,
            3.0,
            4.0,
            1.0,
            2.0,
            f32::INFINITY,
            3.0,
            4.0,
            1.0,
            -2.0,
            0.0,
            -0.0,
            2.0,
        ];
        let w = [1.0f32; 5];
        for layer in [false, true] {
            norm_case(&dev, layer, false, 3, cols, &x, &x, &w, None, 64.0 * U32);
        }
        // A row of zeros: 0 with eps > 0 (the sign of zero kept by rms).
        let z = Tensor::from_slice(&[0.0f32, -0.0], &[1, 2], &dev).unwrap();
        let w2 = Tensor::from_slice(&[1.0f32, 1.0], &[2], &dev).unwrap();
        let y = z.rms_norm(&w2, 1e-6).unwrap().to_vec().unwrap();
        assert_eq!(
            y.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            vec![0, (-0.0f32).to_bits()],
            "rms_norm of zeros on {dev}"
        );
    }
}

#[test]
fn norms_take_views_and_empty_tensors() {
    for dev in common::devices() {
        // A transposed view: the op normalises its logical rows.
        let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2], &dev).unwrap();
        let xt = x.transpose(0, 1).unwrap(); // [[1, 3, 5], [2, 4, 6]]
        let w = Tensor::from_slice(&[1.0f32, 1.0, 1.0], &[3], &dev).unwrap();
        let y = xt.rms_norm(&w, 0.0).unwrap().to_vec().unwrap();
        let want = norm_reference(
            false,
            &[1.0f32, 3.0, 5.0, 2.0, 4.0, 6.0],
            3,
            &[1.0f32; 3],
            None,
            0.0,
        );
        check(
            &format!("rms_norm of a transposed view on {dev}"),
            &y,
            &want,
            |i| 8.0 * U32 * want[i].abs(),
        );
        // A weight that is a strided view.
        let wide = Tensor::from_slice(&[1.0f32, 9.0, 1.0, 9.0, 1.0, 9.0], &[3, 2], &dev).unwrap();
        let w_view = wide.narrow(1, 0, 1).unwrap().reshape(&[3]).unwrap(); // stride 2
        let y2 = xt.rms_norm(&w_view, 0.0).unwrap().to_vec().unwrap();
        assert_eq!(y, y2, "strided weight on {dev}");
        // Rank 1: one row.
        let v = Tensor::from_slice(&[3.0f32, 4.0], &[2], &dev).unwrap();
        let w2 = Tensor::from_slice(&[1.0f32, 1.0], &[2], &dev).unwrap();
        assert_eq!(
            v.layer_norm(&w2, None, 0.0).unwrap().to_vec().unwrap(),
            vec![-1.0, 1.0],
            "{dev}"
        );
        // Empty: no rows, or rows of nothing.
        for shape in [[0usize, 4], [3, 0]] {
            let e = Tensor::<bf16>::zeros(&shape, &dev).unwrap();
            let we = Tensor::<bf16>::ones(&[shape[1]], &dev).unwrap();
            assert_eq!(e.rms_norm(&we, 1e-6).unwrap().shape(), &shape);
            let (s, y) = e.add_layer_norm(&e, &we, Some(&we), 1e-6).unwrap();
            assert_eq!((s.shape(), y.shape()), (&shape[..], &shape[..]));
        }
    }
}

#[test]
fn norms_refuse_bad_inputs_with_typed_errors() {
    let dev = Device::Cpu;
    let x = Tensor::<f32>::zeros(&[2, 3], &dev).unwrap();
    let w = Tensor::<f32>::ones(&[3], &dev).unwrap();
    let w4 = Tensor::<f32>::ones(&[4], &dev).unwrap();
    // The message names the op, the operand and both shapes as passed.
    assert_eq!(
        x.rms_norm(&w4, 1e-6).unwrap_err().to_string(),
        "rms_norm: weight must have shape [3] (the last dim of x [2, 3]), got [4]"
    );
    assert_eq!(
        x.layer_norm(&w, Some(&w4), 1e-6).unwrap_err().to_string(),
        "layer_norm: bias must have shape [3] (the last dim of x [2, 3]), got [4]"
    );
    let r = Tensor::<f32>::zeros(&[3, 2], &dev).unwrap();
    assert!(matches!(
        x.add_rms_norm(&r, &w, 1e-6),
        Err(Error::ShapeMismatch {
            op: "add_rms_norm",
            ..
        })
    ));
    for eps in [-1.0, f32::NAN] {
        assert!(
            matches!(
                x.rms_norm(&w, eps),
                Err(Error::BadParameter { op: "rms_norm", .. })
            ),
            "eps {eps}"
        );
    }
    let s = Tensor::<f32>::zeros(&[], &dev).unwrap();
    assert!(matches!(
        s.rms_norm(&w, 1e-6),
        Err(Error::BadParameter { op: "rms_norm", .. })
    ));
    let i = Tensor::<i64>::zeros(&[2, 3], &dev).unwrap();
    let wi = Tensor::<i64>::ones(&[3], &dev).unwrap();
    assert!(matches!(
        i.rms_norm(&wi, 1e-6),
        Err(Error::UnsupportedDType { op: "rms_norm", .. })
    ));
    let emu = Device::emulator(ferrocm::WaveSize::Wave32);
    let we = Tensor::<f32>::ones(&[3], &emu).unwrap();
    assert!(matches!(
        x.rms_norm(&we, 1e-6),
        Err(Error::DeviceMismatch { op: "rms_norm", .. })
    ));
}

// ===========================================================================
// Gated activations
// ===========================================================================

fn act_reference(act: Activation, x: f64) -> f64 {
    match act {
        Activation::Relu => x.max(0.0),
        Activation::Silu => x / (1.0 + (-x).exp()),
        Activation::Gelu => {
            0.5 * x
                * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh())
        }
        // erf(x/√2) from its series / continued fraction is long to write;
        // 1 + erf(z) = erfc(-z), and erfc by its Chebyshev fit (Numerical
        // Recipes' erfcc, relative error < 1.2e-7, below f32's 6e-8 ulp
        // times the bound below).
        Activation::GeluErf => 0.5 * x * erfcc(-x / std::f64::consts::SQRT_2),
        _ => unreachable!(),
    }
}

fn erfcc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let ans = t
        * (-z * z - 1.26551223
            + t * (1.00002368
                + t * (0.37409196
                    + t * (0.09678418
                        + t * (-0.18628806
                            + t * (0.27886807
                                + t * (-1.13520398
                                    + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))))
            .exp();
    if x >= 0.0 { ans } else { 2.0 - ans }
}

fn glu_case<T: Float>(dev: &Device, act: Activation) {
    let mut rng = Rng(3);
    let n = 1000;
    let mut g = rng.vec::<T>(n, 6.0, 0.0);
    g.extend([0.0, -0.0, 1e-3, -20.0, 20.0].map(T::of));
    let u = rng.vec::<T>(g.len(), 3.0, 0.0);
    let gt = Tensor::from_slice(&g, &[g.len()], dev).unwrap();
    let ut = Tensor::from_slice(&u, &[u.len()], dev).unwrap();
    let got: Vec<T> = gt.glu(&ut, act).unwrap().to_vec().unwrap();
    let want: Vec<f64> = g
        .iter()
        .zip(&u)
        .map(|(g, u)| act_reference(act, g.f64()) * u.f64())
        .collect();
    // f32: the activation's own bound (8 ulp for gelu, 4 silu, exact relu;
    // erfcc's 1.2e-7 for gelu_erf) and one product; gelu's cancellation for
    // x << 0 adds |x|·2⁻²¹. f16/bf16: one rounding of that.
    let case = format!("glu({act:?}) {} on {dev}", T::DTYPE);
    check(&case, &got, &want, |i| {
        let (x, w) = (g[i].f64(), want[i]);
        let rel = match act {
            Activation::Relu => U32,
            Activation::Silu => 6.0 * U32,
            Activation::Gelu => 10.0 * U32,
            _ => 10.0 * U32 + 1.3e-7,
        };
        let floor = match act {
            Activation::Gelu | Activation::GeluErf => x.abs() * 2f64.powi(-21) * u[i].f64().abs(),
            _ => 0.0,
        };
        rel * w.abs() + floor + if T::MANT == 23 { 0.0 } else { T::ulp(w) }
    });
}

#[test]
fn glu_matches_the_formulas_for_every_activation() {
    for dev in common::devices() {
        for act in [
            Activation::Silu,
            Activation::Gelu,
            Activation::GeluErf,
            Activation::Relu,
        ] {
            glu_case::<f32>(&dev, act);
            glu_case::<f16>(&dev, act);
            glu_case::<bf16>(&dev, act);
        }
    }
}

#[test]
fn glu_broadcasts_and_reads_halves_in_place() {
    for dev in common::devices() {
        // [.., 2d] halves: gate first (candle-nn's swiglu).
        let x = Tensor::from_slice(
            &[1.0f32, -2.0, 3.0, 4.0, -1.0, 0.5, 2.0, 2.0],
            &[2, 4],
            &dev,
        )
        .unwrap();
        let y = x.glu_halves(Activation::Relu).unwrap();
        assert_eq!(
            (y.shape(), y.to_vec().unwrap()),
            (&[2, 2][..], vec![3.0, 0.0, 0.0, 1.0]),
            "{dev}"
        );
        // A broadcast up: [2, 2] gate, [2] up.
        let g = Tensor::from_slice(&[1.0f32, -1.0, 2.0, -2.0], &[2, 2], &dev).unwrap();
        let u = Tensor::from_slice(&[10.0f32, 100.0], &[2], &dev).unwrap();
        assert_eq!(
            g.glu(&u, Activation::Relu).unwrap().to_vec().unwrap(),
            vec![10.0, 0.0, 20.0, 0.0],
            "{dev}"
        );
        // swiglu = glu(silu); NaN propagates; empty works.
        let n = Tensor::from_slice(&[f32::NAN, 1.0], &[2], &dev).unwrap();
        let s = n.swiglu(&n).unwrap().to_vec().unwrap();
        assert!(
            s[0].is_nan() && (s[1] as f64 - act_reference(Activation::Silu, 1.0)).abs() < 1e-6,
            "{dev}"
        );
        let e = Tensor::<bf16>::zeros(&[0, 8], &dev).unwrap();
        assert_eq!(e.glu_halves(Activation::Gelu).unwrap().shape(), &[0, 4]);
    }
    let odd = Tensor::<f32>::zeros(&[2, 3], &Device::Cpu).unwrap();
    assert!(matches!(
        odd.glu_halves(Activation::Silu),
        Err(Error::BadParameter {
            op: "glu_halves",
            ..
        })
    ));
    let i = Tensor::<u32>::zeros(&[2], &Device::Cpu).unwrap();
    assert!(matches!(
        i.swiglu(&i),
        Err(Error::UnsupportedDType { op: "swiglu", .. })
    ));
    let a = Tensor::<f32>::zeros(&[2, 3], &Device::Cpu).unwrap();
    let b = Tensor::<f32>::zeros(&[2], &Device::Cpu).unwrap();
    assert!(matches!(
        a.swiglu(&b),
        Err(Error::BroadcastIncompatible { .. })
    ));
}

// ===========================================================================
// Rotary embeddings
// ===========================================================================

#[derive(Clone, Copy, Debug, PartialEq)]
enum RopeLayout {
    Halves,
    Interleaved,
    Thd,
}

/// The f64 reference: for each `(b, h, t)` row, position `offset + t`,
/// pairs `(i, i + r/2)` or `(2i, 2i + 1)` turned by that position's angle.
#[allow(clippy::too_many_arguments)]
fn rope_reference<T: Float>(
    layout: RopeLayout,
    x: &[T],
    [b, d0, d1, d]: [usize; 4],
    cos: &[T],
    sin: &[T],
    t_table: usize,
    half: usize,
    per_batch: bool,
    offset: usize,
) -> Vec<f64> {
    let mut out: Vec<f64> = x.iter().map(|v| v.f64()).collect();
    for bi in 0..b {
        for i0 in 0..d0 {
            for i1 in 0..d1 {
                let t = if layout == RopeLayout::Thd { i0 } else { i1 };
                let row = ((bi * d0 + i0) * d1 + i1) * d;
                let trow = if per_batch { bi * t_table } else { 0 } + offset + t;
                for k in 0..half {
                    let (c, s) = (cos[trow * half + k].f64(), sin[trow * half + k].f64());
                    let (p, q) = match layout {
                        RopeLayout::Interleaved => (2 * k, 2 * k + 1),
                        _ => (k, k + half),
                    };
                    let (x0, x1) = (x[row + p].f64(), x[row + q].f64());
                    out[row + p] = x0 * c - x1 * s;
                    out[row + q] = x0 * s + x1 * c;
                }
            }
        }
    }
    out
}

fn rope_case<T: Float>(
    dev: &Device,
    layout: RopeLayout,
    shape: [usize; 4],
    half: usize,
    per_batch: bool,
    offset: usize,
) {
    let mut rng = Rng(5 + half as u64);
    let t = if layout == RopeLayout::Thd {
        shape[1]
    } else {
        shape[2]
    };
    let t_table = offset + t + 3;
    let tables = if per_batch { shape[0] } else { 1 } * t_table * half;
    let x = rng.vec::<T>(shape.iter().product(), 4.0, 0.0);
    // Angles: real cos/sin pairs.
    let angles: Vec<f64> = (0..tables).map(|_| rng.next() * 10.0).collect();
    let cos: Vec<T> = angles.iter().map(|a| T::of(a.cos())).collect();
    let sin: Vec<T> = angles.iter().map(|a| T::of(a.sin())).collect();
    let tshape: Vec<usize> = if per_batch {
        vec![shape[0], t_table, half]
    } else {
        vec![t_table, half]
    };
    let xt = Tensor::from_slice(&x, &shape, dev).unwrap();
    let ct = Tensor::from_slice(&cos, &tshape, dev).unwrap();
    let st = Tensor::from_slice(&sin, &tshape, dev).unwrap();
    let y = match layout {
        RopeLayout::Halves => xt.rope(&ct, &st, offset),
        RopeLayout::Interleaved => xt.rope_i(&ct, &st, offset),
        RopeLayout::Thd => xt.rope_thd(&ct, &st, offset),
    };
    let case = format!(
        "{layout:?} rope {} {shape:?} r={} per_batch={per_batch} offset={offset} on {dev}",
        T::DTYPE,
        2 * half
    );
    let got: Vec<T> = y
        .unwrap_or_else(|e| panic!("{case}: {e}"))
        .to_vec()
        .unwrap();
    let want = rope_reference(
        layout, &x, shape, &cos, &sin, t_table, half, per_batch, offset,
    );
    // Two products and a sum in f32: 2 ulp of each product's size (the sum
    // may cancel), then the rounding to the dtype.
    let xmax = 4.0;
    check(&case, &got, &want, |i| {
        3.0 * U32 * 2.0 * xmax + if T::MANT == 23 { 0.0 } else { T::ulp(want[i]) }
    });
}

#[test]
fn rope_matches_the_rotation_in_every_layout() {
    for dev in common::devices() {
        for layout in [RopeLayout::Halves, RopeLayout::Interleaved, RopeLayout::Thd] {
            // (b, h, t, d) or (b, t, h, d); full and partial rotary; odd heads
            // and lengths; a decode step (t = 1 at an offset); per-batch tables.
            for (shape, half, per_batch, offset) in [
                ([2, 3, 5, 8], 4, false, 0),
                ([1, 2, 7, 16], 4, false, 0),
                ([2, 3, 1, 64], 32, false, 37),
                ([3, 1, 4, 6], 3, true, 2),
                ([1, 5, 3, 10], 1, true, 0),
                // Partial rotary on 16-byte words (the kernels' word path).
                ([1, 2, 3, 32], 8, true, 1),
            ] {
                let shape = if layout == RopeLayout::Thd {
                    [shape[0], shape[2], shape[1], shape[3]]
                } else {
                    shape
                };
                rope_case::<f32>(&dev, layout, shape, half, per_batch, offset);
                rope_case::<f16>(&dev, layout, shape, half, per_batch, offset);
                rope_case::<bf16>(&dev, layout, shape, half, per_batch, offset);
            }
        }
    }
}

/// `rope_into_cache`: q rotated against the f64 reference (as `(b, t, hq,
/// d)` rows, then read as `(b, hq, t, d)`), k rotated and v copied into
/// their cache rows `pos..pos + t` against the same reference, every other
/// cache row unchanged; and bit for bit the unfused ops (`rope_thd` /
/// `rope_i` and `slice_set`). Decode (t = 1 at a position), prefill, a
/// batch of 2, partial rotary, q/k/v read in place from one stacked
/// projection, and a q that needs a copy (transposed view).
fn rope_cache_case<T: Float>(dev: &Device, interleaved: bool, c: [usize; 7]) {
    use ferrocm::ops::rope::RopeMode;
    let [b, t, hq, hk, d, half, pos] = c;
    let cap = pos + t + 2;
    let mut rng = Rng(11 + (t * hq * d) as u64);
    let width = (hq + 2 * hk) * d;
    let proj = rng.vec::<T>(b * t * width, 4.0, 0.0);
    let angles: Vec<f64> = (0..cap * half).map(|_| rng.next() * 10.0).collect();
    let cos: Vec<T> = angles.iter().map(|a| T::of(a.cos())).collect();
    let sin: Vec<T> = angles.iter().map(|a| T::of(a.sin())).collect();
    let kc0 = rng.vec::<T>(b * hk * cap * d, 1.0, 0.0);
    let vc0 = rng.vec::<T>(b * hk * cap * d, 1.0, 0.0);
    let all = Tensor::from_slice(&proj, &[b, t, width], dev).unwrap();
    let part = |at: usize, h: usize| all.narrow(2, at * d, h * d).unwrap().reshape(&[b, t, h, d]);
    let (q, k, v) = (
        part(0, hq).unwrap(),
        part(hq, hk).unwrap(),
        part(hq + hk, hk).unwrap(),
    );
    let (ct, st) = (
        Tensor::from_slice(&cos, &[cap, half], dev).unwrap(),
        Tensor::from_slice(&sin, &[cap, half], dev).unwrap(),
    );
    let mode = if interleaved {
        RopeMode::Interleaved
    } else {
        RopeMode::Halves
    };
    let case = format!("rope_into_cache {} {c:?} {mode:?} on {dev}", T::DTYPE);
    let mut kc = Tensor::from_slice(&kc0, &[b, hk, cap, d], dev).unwrap();
    let mut vc = Tensor::from_slice(&vc0, &[b, hk, cap, d], dev).unwrap();
    let qr = q
        .rope_into_cache(&k, &v, &ct, &st, pos, mode, &mut kc, &mut vc)
        .unwrap_or_else(|e| panic!("{case}: {e}"));
    assert_eq!(qr.shape(), &[b, hq, t, d], "{case}");
    // The f64 reference over (b, t, h, d) rows (interleaved: the same
    // per-row rotation; only the pairs differ).
    let reference = |x: &Tensor<T>, h: usize| {
        let xv: Vec<T> = x.to_vec().unwrap();
        if !interleaved {
            return rope_reference(
                RopeLayout::Thd,
                &xv,
                [b, t, h, d],
                &cos,
                &sin,
                cap,
                half,
                false,
                pos,
            );
        }
        // Interleaved pairs over (b, t, h, d) rows (rope_reference takes
        // the interleaved layout as (b, h, t, d)).
        let mut want: Vec<f64> = xv.iter().map(|v| v.f64()).collect();
        for bi in 0..b {
            for ti in 0..t {
                for hh in 0..h {
                    let row = ((bi * t + ti) * h + hh) * d;
                    for u in 0..half {
                        let at = (pos + ti) * half + u;
                        let (cs, sn) = (cos[at].f64(), sin[at].f64());
                        let (x0, x1) = (xv[row + 2 * u].f64(), xv[row + 2 * u + 1].f64());
                        want[row + 2 * u] = x0 * cs - x1 * sn;
                        want[row + 2 * u + 1] = x0 * sn + x1 * cs;
                    }
                }
            }
        }
        want
    };
    let bound = |w: f64| 3.0 * U32 * 2.0 * 4.0 + if T::MANT == 23 { 0.0 } else { T::ulp(w) };
    // q: reference rows (b, t, hq, d) read as (b, hq, t, d).
    let wq = reference(&q, hq);
    let gq: Vec<T> = qr.to_vec().unwrap();
    let mut wq_t = vec![0.0; wq.len()];
    for bi in 0..b {
        for ti in 0..t {
            for hh in 0..hq {
                for j in 0..d {
                    wq_t[((bi * hq + hh) * t + ti) * d + j] = wq[((bi * t + ti) * hq + hh) * d + j];
                }
            }
        }
    }
    check(&format!("{case} q"), &gq, &wq_t, |i| bound(wq_t[i]));
    // The caches: rows pos..pos + t hold k rotated and v; the rest as before.
    let wk = reference(&k, hk);
    let vv: Vec<T> = v.to_vec().unwrap();
    let (gk, gv): (Vec<T>, Vec<T>) = (kc.to_vec().unwrap(), vc.to_vec().unwrap());
    let mut want_k: Vec<f64> = kc0.iter().map(|v| v.f64()).collect();
    let mut want_v: Vec<f64> = vc0.iter().map(|v| v.f64()).collect();
    for bi in 0..b {
        for ti in 0..t {
            for hh in 0..hk {
                for j in 0..d {
                    let at = ((bi * hk + hh) * cap + pos + ti) * d + j;
                    let from = ((bi * t + ti) * hk + hh) * d + j;
                    want_k[at] = wk[from];
                    want_v[at] = vv[from].f64();
                }
            }
        }
    }
    check(&format!("{case} k cache"), &gk, &want_k, |i| {
        bound(want_k[i])
    });
    check(&format!("{case} v cache"), &gv, &want_v, |_| 0.0);
    // Bit for bit the unfused ops.
    let (q2, k2) = if interleaved {
        (
            q.transpose(1, 2).unwrap().rope_i(&ct, &st, pos).unwrap(),
            k.transpose(1, 2).unwrap().rope_i(&ct, &st, pos).unwrap(),
        )
    } else {
        (
            q.rope_thd(&ct, &st, pos).unwrap().transpose(1, 2).unwrap(),
            k.rope_thd(&ct, &st, pos).unwrap().transpose(1, 2).unwrap(),
        )
    };
    let mut kc2 = Tensor::from_slice(&kc0, &[b, hk, cap, d], dev).unwrap();
    let mut vc2 = Tensor::from_slice(&vc0, &[b, hk, cap, d], dev).unwrap();
    kc2.slice_set(&k2, 2, pos).unwrap();
    vc2.slice_set(&v.transpose(1, 2).unwrap(), 2, pos).unwrap();
    let bits = |x: &Tensor<T>| -> Vec<u64> {
        x.to_vec()
            .unwrap()
            .iter()
            .map(|v: &T| v.f64().to_bits())
            .collect()
    };
    assert_eq!(bits(&qr), bits(&q2), "{case}: q against rope + transpose");
    assert_eq!(bits(&kc), bits(&kc2), "{case}: k cache against slice_set");
    assert_eq!(bits(&vc), bits(&vc2), "{case}: v cache against slice_set");
}

#[test]
fn rope_into_cache_matches_the_rotation_and_the_unfused_ops() {
    for dev in common::devices() {
        for interleaved in [false, true] {
            // [b, t, hq, hk, d, r/2, pos]: decode at a position, prefill,
            // a batch, partial rotary, heads of 64.
            for c in [
                [1, 1, 4, 2, 8, 4, 5],
                [1, 3, 4, 4, 8, 2, 0],
                [2, 2, 6, 2, 16, 8, 3],
                [1, 1, 8, 2, 64, 32, 17],
            ] {
                rope_cache_case::<f32>(&dev, interleaved, c);
                rope_cache_case::<f16>(&dev, interleaved, c);
                rope_cache_case::<bf16>(&dev, interleaved, c);
            }
        }
    }
}

#[test]
fn rope_into_cache_copies_odd_views_and_refuses_bad_input() {
    use ferrocm::ops::rope::RopeMode;
    for dev in common::devices() {
        let (b, t, h, d) = (1usize, 2usize, 2usize, 4usize);
        let x: Vec<f32> = (0..b * t * h * d).map(|i| i as f32 * 0.25 - 1.0).collect();
        let cos = Tensor::from_slice(&[0.6f32; 8], &[4, 2], &dev).unwrap();
        let sin = Tensor::from_slice(&[0.8f32; 8], &[4, 2], &dev).unwrap();
        // q as a transposed view: (b, h, t, d) data read as (b, t, h, d).
        let qt = Tensor::from_slice(&x, &[b, h, t, d], &dev)
            .unwrap()
            .transpose(1, 2)
            .unwrap();
        let qc = qt.contiguous().unwrap();
        let k = Tensor::from_slice(&x, &[b, t, h, d], &dev).unwrap();
        let fresh = || Tensor::<f32>::zeros(&[b, h, 4, d], &dev).unwrap();
        let (mut k1, mut v1, mut k2, mut v2) = (fresh(), fresh(), fresh(), fresh());
        let a = qt
            .rope_into_cache(&k, &k, &cos, &sin, 1, RopeMode::Halves, &mut k1, &mut v1)
            .unwrap();
        let c = qc
            .rope_into_cache(&k, &k, &cos, &sin, 1, RopeMode::Halves, &mut k2, &mut v2)
            .unwrap();
        assert_eq!(a.to_vec().unwrap(), c.to_vec().unwrap(), "{dev}");
        // A cache shared with another tensor is copied, not written under it.
        let mut shared = fresh();
        let keep = shared.clone();
        qc.rope_into_cache(
            &k,
            &k,
            &cos,
            &sin,
            0,
            RopeMode::Halves,
            &mut shared,
            &mut v2,
        )
        .unwrap();
        assert!(keep.to_vec().unwrap().iter().all(|&v| v == 0.0), "{dev}");
        assert!(shared.to_vec().unwrap().iter().any(|&v| v != 0.0), "{dev}");
        let err = |r: Result<Tensor<f32>, Error>| r.unwrap_err().to_string();
        let e = err(qc.rope_into_cache(&k, &k, &cos, &sin, 3, RopeMode::Halves, &mut k1, &mut v1));
        assert!(
            e.starts_with("rope_into_cache: ") && e.contains("past"),
            "{e}"
        );
        let short = Tensor::<f32>::zeros(&[b, t, 1, d], &dev).unwrap();
        let e = err(qc.rope_into_cache(
            &short,
            &k,
            &cos,
            &sin,
            0,
            RopeMode::Halves,
            &mut k1,
            &mut v1,
        ));
        assert!(e.contains("k and v must be"), "{e}");
        let mut strided = Tensor::<f32>::zeros(&[b, 4, h, d], &dev)
            .unwrap()
            .transpose(1, 2)
            .unwrap();
        let e = err(qc.rope_into_cache(
            &k,
            &k,
            &cos,
            &sin,
            0,
            RopeMode::Halves,
            &mut strided,
            &mut v1,
        ));
        assert!(e.contains("contiguous"), "{e}");
        let wide = Tensor::from_slice(&[0.0f32; 12], &[4, 3], &dev).unwrap();
        let e =
            err(qc.rope_into_cache(&k, &k, &wide, &wide, 0, RopeMode::Halves, &mut k1, &mut v1));
        assert!(e.contains("more than the head dim"), "{e}");
    }
    let ids = Tensor::<u32>::zeros(&[1, 1, 1, 2], &Device::Cpu).unwrap();
    let mut c = Tensor::<u32>::zeros(&[1, 1, 2, 2], &Device::Cpu).unwrap();
    let mut c2 = c.clone();
    let tab = Tensor::<u32>::zeros(&[2, 1], &Device::Cpu).unwrap();
    assert!(matches!(
        ids.rope_into_cache(
            &ids,
            &ids,
            &tab,
            &tab,
            0,
            ferrocm::ops::rope::RopeMode::Halves,
            &mut c,
            &mut c2
        ),
        Err(Error::UnsupportedDType { .. })
    ));
}

#[test]
fn rope_takes_views_and_refuses_bad_tables() {
    for dev in common::devices() {
        // A (b, t, h, d) tensor transposed to (b, h, t, d): rope on the view
        // equals rope_thd on the original, transposed.
        let mut rng = Rng(9);
        let x: Vec<f32> = rng.vec(2 * 3 * 4 * 8, 1.0, 0.0);
        let thd = Tensor::from_slice(&x, &[2, 3, 4, 8], &dev).unwrap();
        let angles: Vec<f64> = (0..3 * 4).map(|_| rng.next() * 3.0).collect();
        let cos = Tensor::from_slice(
            &angles.iter().map(|a| a.cos() as f32).collect::<Vec<_>>(),
            &[3, 4],
            &dev,
        )
        .unwrap();
        let sin = Tensor::from_slice(
            &angles.iter().map(|a| a.sin() as f32).collect::<Vec<_>>(),
            &[3, 4],
            &dev,
        )
        .unwrap();
        let a = thd
            .rope_thd(&cos, &sin, 0)
            .unwrap()
            .transpose(1, 2)
            .unwrap()
            .to_vec()
            .unwrap();
        let b = thd
            .transpose(1, 2)
            .unwrap()
            .rope(&cos, &sin, 0)
            .unwrap()
            .to_vec()
            .unwrap();
        assert_eq!(a, b, "rope of a view vs rope_thd on {dev}");
        let e = Tensor::<f32>::zeros(&[0, 2, 3, 8], &dev).unwrap();
        assert_eq!(e.rope(&cos, &sin, 0).unwrap().shape(), &[0, 2, 3, 8]);
    }
    let dev = Device::Cpu;
    let x = Tensor::<f32>::zeros(&[1, 2, 3, 8], &dev).unwrap();
    let t = |s: &[usize]| Tensor::<f32>::zeros(s, &dev).unwrap();
    let bad = |r: ferrocm::ops::Result<Tensor<f32>>| matches!(r, Err(Error::BadParameter { .. }));
    assert!(
        bad(x.rope(&t(&[3, 5]), &t(&[3, 5]), 0)),
        "10 rotary dims of 8"
    );
    assert!(
        bad(x.rope(&t(&[3, 4]), &t(&[3, 4]), 1)),
        "positions 1..4 of 3"
    );
    assert!(
        bad(x.rope(&t(&[2, 3, 4]), &t(&[2, 3, 4]), 0)),
        "tables of another batch"
    );
    assert!(
        bad(t(&[2, 8]).rope(&t(&[3, 4]), &t(&[3, 4]), 0)),
        "rank 2 x"
    );
    assert!(matches!(
        x.rope(&t(&[3, 4]), &t(&[4, 4]), 0),
        Err(Error::ShapeMismatch { op: "rope", .. })
    ));
    let xi = Tensor::<u8>::zeros(&[1, 1, 1, 2], &dev).unwrap();
    let ti = Tensor::<u8>::zeros(&[1, 1], &dev).unwrap();
    assert!(matches!(
        xi.rope_i(&ti, &ti, 0),
        Err(Error::UnsupportedDType { op: "rope_i", .. })
    ));
}

// ===========================================================================
// Attention
// ===========================================================================

/// One attention case: `(b, h_q, h_kv, s_q, s_kv, d)` and the options.
#[derive(Clone)]
struct AttnCase {
    dims: [usize; 6],
    causal: bool,
    window: Option<usize>,
    softcap: Option<f32>,
    /// The mask's shape (broadcast to `(b, h_q, s_q, s_kv)`), if any.
    mask: Option<Vec<usize>>,
}

/// The f64 reference: per query row, the logits of the keys it sees
/// (`q · k * scale`, softcapped, plus the mask), their softmax, the
/// weighted sum of the values; a row that sees nothing (or only -inf) is 0.
#[allow(clippy::too_many_arguments)]
fn attn_reference<T: Float>(
    c: &AttnCase,
    q: &[T],
    k: &[T],
    v: &[T],
    mask: Option<&[T]>,
    scale: f64,
) -> Vec<f64> {
    let [b, h_q, h_kv, s_q, s_kv, d] = c.dims;
    let g = h_q / h_kv;
    // The mask's strides over (b, h_q, s_q, s_kv): 0 where it broadcasts.
    let mstrides = c.mask.as_ref().map(|shape| {
        let full = [b, h_q, s_q, s_kv];
        let mut padded = vec![1; 4 - shape.len()];
        padded.extend(shape);
        let mut st = [0usize; 4];
        let mut acc = 1;
        for i in (0..4).rev() {
            st[i] = if padded[i] == 1 && full[i] != 1 {
                0
            } else {
                acc
            };
            acc *= padded[i];
        }
        st
    });
    let mut out = vec![0.0; b * h_q * s_q * d];
    for bi in 0..b {
        for h in 0..h_q {
            for i in 0..s_q {
                let pos = i as i64 + s_kv as i64 - s_q as i64;
                let qr = &q[((bi * h_q + h) * s_q + i) * d..][..d];
                let mut logits = Vec::new();
                for j in 0..s_kv {
                    let jj = j as i64;
                    if (c.causal && jj > pos) || c.window.is_some_and(|w| jj <= pos - w as i64) {
                        continue;
                    }
                    let kr = &k[((bi * h_kv + h / g) * s_kv + j) * d..][..d];
                    let mut x: f64 = qr
                        .iter()
                        .zip(kr)
                        .map(|(a, b)| a.f64() * b.f64())
                        .sum::<f64>()
                        * scale;
                    if let Some(cap) = c.softcap {
                        x = cap as f64 * (x / cap as f64).tanh();
                    }
                    if let (Some(m), Some(st)) = (mask, mstrides) {
                        x += m[bi * st[0] + h * st[1] + i * st[2] + j * st[3]].f64();
                    }
                    logits.push((j, x));
                }
                let row = &mut out[((bi * h_q + h) * s_q + i) * d..][..d];
                if logits.iter().any(|(_, x)| x.is_nan()) {
                    row.iter_mut().for_each(|y| *y = f64::NAN);
                    continue;
                }
                let mx = logits
                    .iter()
                    .map(|(_, x)| *x)
                    .fold(f64::NEG_INFINITY, f64::max);
                if mx == f64::NEG_INFINITY {
                    continue;
                }
                let mut l = 0.0;
                for &(j, x) in &logits {
                    let p = (x - mx).exp();
                    if p == 0.0 {
                        continue;
                    }
                    l += p;
                    let vr = &v[((bi * h_kv + h / g) * s_kv + j) * d..][..d];
                    for (y, vv) in row.iter_mut().zip(vr) {
                        *y += p * vv.f64();
                    }
                }
                row.iter_mut().for_each(|y| *y /= l);
            }
        }
    }
    out
}

/// The bound on one output: the dtype's rounding of the result, plus the
/// f32 error of the logits (a dot of `d` terms of at most 1, times the
/// scale) and of the exponentials and sums, relative to `max |v|`, plus the
/// rounding of the probabilities to the dtype before they multiply the
/// values, which every path does (FlashAttention's second product): each
/// weight off by half an ulp of the dtype relative, so the weighted mean of
/// the values by that much of `max |v|`.
fn attn_bound<T: Float>(want: f64, d: usize, vmax: f64) -> f64 {
    T::ulp(want) + 64.0 * (d as f64).sqrt() * U32 * vmax + T::ulp(1.0) / 2.0 * vmax
}

/// The options of a case on tensors of `T`.
fn attn_opts<'a, T: WithDType>(
    c: &AttnCase,
    mask: Option<&'a Tensor<T>>,
) -> ferrocm::AttentionOptions<'a, T> {
    let mut o = ferrocm::AttentionOptions::new();
    o.causal = c.causal;
    o.window = c.window;
    o.softcap = c.softcap;
    o.mask = mask;
    o
}

/// Runs `c` on `dev` with random inputs (and a mask with some -inf, and
/// a fully hidden row when it has one) against the reference.
fn attn_case<T: Float>(dev: &Device, c: &AttnCase, seed: u64) {
    let [b, h_q, h_kv, s_q, s_kv, d] = c.dims;
    let mut rng = Rng(seed);
    let q: Vec<T> = rng.vec(b * h_q * s_q * d, 1.0, 0.0);
    let k: Vec<T> = rng.vec(b * h_kv * s_kv * d, 1.0, 0.0);
    let v: Vec<T> = rng.vec(b * h_kv * s_kv * d, 1.0, 0.0);
    let mask: Option<Vec<T>> = c.mask.as_ref().map(|shape| {
        let n: usize = shape.iter().product();
        let mut m: Vec<T> = rng.vec(n, 2.0, 0.0);
        for (i, x) in m.iter_mut().enumerate() {
            if i % 7 == 3 {
                *x = T::of(f64::NEG_INFINITY);
            }
        }
        // The first row of keys hidden whole.
        let last = *shape.last().unwrap();
        m[..last]
            .iter_mut()
            .for_each(|x| *x = T::of(f64::NEG_INFINITY));
        m
    });
    let scale = 1.0 / (d as f32).sqrt();
    let want = attn_reference(c, &q, &k, &v, mask.as_deref(), scale as f64);
    let t = |x: &[T], s: &[usize]| Tensor::from_slice(x, s, dev).unwrap();
    let (qt, kt, vt) = (
        t(&q, &[b, h_q, s_q, d]),
        t(&k, &[b, h_kv, s_kv, d]),
        t(&v, &[b, h_kv, s_kv, d]),
    );
    let mt = mask.as_ref().map(|m| t(m, c.mask.as_ref().unwrap()));
    let got = qt.attention(&kt, &vt, &attn_opts(c, mt.as_ref())).unwrap();
    assert_eq!(got.shape(), &[b, h_q, s_q, d]);
    let name = format!(
        "attention {:?} {dev:?} {:?} causal {} window {:?} softcap {:?} mask {:?}",
        T::DTYPE,
        c.dims,
        c.causal,
        c.window,
        c.softcap,
        c.mask
    );
    check(&name, &got.to_vec().unwrap(), &want, |i| {
        attn_bound::<T>(want[i], d, 1.0)
    });
}

/// The shape grid: decode (s_q 1 to 8) with GQA and MQA over caches long
/// enough to split, prefill, every head dim on both kernels (16-bit types
/// take the matrix-unit one past 16 query rows per KV head), odd head
/// counts and lengths.
fn attn_grid() -> Vec<AttnCase> {
    let case = |dims, causal, window, softcap, mask: Option<Vec<usize>>| AttnCase {
        dims,
        causal,
        window,
        softcap,
        mask,
    };
    vec![
        // Decode: one query, GQA 4:1, 300 keys (three splits on the emulator).
        case([1, 4, 1, 1, 300, 128], true, None, None, None),
        // MQA, s_q 8, a window, two batches.
        case([2, 3, 1, 8, 261, 64], true, Some(50), None, None),
        // Odd heads and lengths, no causal mask, d 80.
        case([1, 3, 3, 5, 67, 80], false, None, None, None),
        // Causal prefill with a softcap, d 96.
        case([1, 2, 1, 33, 33, 96], true, None, Some(5.0), None),
        // d 256 with a per-batch-and-row mask (a hidden row, some -inf).
        case(
            [2, 2, 2, 3, 130, 256],
            false,
            None,
            None,
            Some(vec![2, 1, 3, 130]),
        ),
        // More queries than keys, causal: the first rows see nothing.
        case([1, 1, 1, 6, 4, 64], true, None, None, Some(vec![6, 4])),
        // A mask broadcast along the keys (copied) and the heads.
        case([1, 2, 1, 2, 17, 64], false, Some(5), None, Some(vec![2, 1])),
        // Prefill on the matrix-unit kernel (more than 16 rows per KV
        // head) at d 128 and d 80, with a window and a mask.
        case([1, 2, 2, 20, 45, 128], true, Some(30), None, None),
        case(
            [1, 4, 2, 9, 70, 80],
            true,
            None,
            None,
            Some(vec![1, 4, 9, 70]),
        ),
        // Prefill on the warpgroup kernel where the device has one (the
        // emulator at wave 32; no mask or softcap, d 64 and 128): row
        // blocks of 64 across two query heads of a KV head, more keys than
        // queries, two batches; a window without the causal mask.
        case([2, 4, 2, 37, 150, 64], true, None, None, None),
        case([1, 3, 1, 50, 131, 128], false, Some(40), None, None),
    ]
}

/// Logits far apart, climbing in steps below the row kernels' rescale
/// slack (`ATTN_RESCALE_SLACK`: the running max then moves once in sixteen
/// keys), falling, and one key far above the rest: `q = [8, 0, ..]` at d 64
/// (scale 1/8) makes each logit exactly the key's first element, a
/// multiple of 0.5 up to 127.5 (exact in every float type). `s_q` 1 runs
/// the row kernels, 40 (80 rows a KV head) the matrix-unit kernel, whose
/// max moves by the same slack in base-2 units.
fn attention_far_logits<T: Float>(s_q: usize) {
    let (h_q, h_kv, s_kv, d) = (6, 3, 300, 64);
    let c = AttnCase {
        dims: [1, h_q, h_kv, s_q, s_kv, d],
        causal: true,
        window: None,
        softcap: None,
        mask: None,
    };
    // KV head 0 climbs, 1 falls, 2 is flat but for one key 100 above.
    let first = |h: usize, j: usize| match h {
        0 => 0.5 * (j % 256) as f64,
        1 => 127.5 - 0.5 * (j % 256) as f64,
        _ => {
            if j == 137 {
                100.0
            } else {
                0.0
            }
        }
    };
    let mut rng = Rng(4242);
    let noise: Vec<T> = rng.vec(h_kv * s_kv * d, 1.0, 0.0);
    let k: Vec<T> = (0..h_kv * s_kv * d)
        .map(|i| {
            let (h, j, e) = (i / (s_kv * d), i / d % s_kv, i % d);
            if e == 0 { T::of(first(h, j)) } else { noise[i] }
        })
        .collect();
    let v: Vec<T> = rng.vec(h_kv * s_kv * d, 1.0, 0.0);
    let q: Vec<T> = (0..h_q * s_q * d)
        .map(|i| T::of(if i % d == 0 { 8.0 } else { 0.0 }))
        .collect();
    let want = attn_reference(&c, &q, &k, &v, None, 0.125);
    for dev in common::devices() {
        let t = |x: &[T], s: &[usize]| Tensor::from_slice(x, s, &dev).unwrap();
        let got = t(&q, &[1, h_q, s_q, d])
            .attention(
                &t(&k, &[1, h_kv, s_kv, d]),
                &t(&v, &[1, h_kv, s_kv, d]),
                &attn_opts(&c, None),
            )
            .unwrap();
        let name = format!("attention far logits {:?} s_q {s_q} {dev:?}", T::DTYPE);
        check(&name, &got.to_vec().unwrap(), &want, |i| {
            attn_bound::<T>(want[i], d, 1.0)
        });
    }
}

/// Logits near the float limits, which the matrix-unit kernel's base-2
/// units (`s · log2 e`) would push past f32's range: rows hidden by a mask
/// of bf16's lowest value (PyTorch's usual fill; f16 takes it as -inf),
/// whole or in part (`top` None); or keys 3, 10 and 17 scoring `top²`
/// (scale 1) and the others 0: about 2.9e38 at `top` 1.7e19 (bf16 and f32
/// only), or large enough (1e9, 1e10) that the raw path's rounding of the
/// max, `2^(|m| 2^-24)`, would overflow or flush the probabilities. A row
/// whose keys all carry the fill is the mean of their values, as the
/// formula has it, not zeros. 20 query rows of one head, so f16/bf16 run
/// the matrix-unit kernel.
fn attention_near_the_float_limits<T: Float>(top: Option<f64>) {
    let huge_scores = top.is_some();
    let (s_q, s_kv, d) = (20, 45, 64);
    let fill = -3.3895313892515355e38; // bf16::MIN, also an f32
    let c = AttnCase {
        dims: [1, 1, 1, s_q, s_kv, d],
        causal: false,
        window: None,
        softcap: None,
        mask: (!huge_scores).then(|| vec![s_q, s_kv]),
    };
    let mut rng = Rng(777);
    let mut q: Vec<T> = rng.vec(s_q * d, 1.0, 0.0);
    let mut k: Vec<T> = rng.vec(s_kv * d, 1.0, 0.0);
    let v: Vec<T> = rng.vec(s_kv * d, 1.0, 0.0);
    let mask: Option<Vec<T>> = (!huge_scores).then(|| {
        let mut m: Vec<T> = rng.vec(s_q * s_kv, 2.0, 0.0);
        for (i, x) in m.iter_mut().enumerate() {
            let (row, j) = (i / s_kv, i % s_kv);
            // Row 0 hidden whole, row 1 but for two keys, row 2 in every
            // third key.
            if row == 0 || (row == 1 && j != 5 && j != 40) || (row == 2 && j % 3 == 0) {
                *x = T::of(fill);
            }
        }
        m
    });
    let scale = if let Some(top) = top {
        // q = [top, 0, ..] against keys 3, 10 and 17 = [top, 0, ..]: those
        // score top², the others 0 (in the first stage of 32 keys, which no
        // mask or causal edge touches).
        let big = T::of(top);
        for (i, x) in q.iter_mut().enumerate() {
            *x = if i % d == 0 { big } else { T::of(0.0) };
        }
        for j in [3, 10, 17] {
            k[j * d..][..d].iter_mut().for_each(|x| *x = T::of(0.0));
            k[j * d] = big;
        }
        1.0
    } else {
        0.125
    };
    let want = attn_reference(&c, &q, &k, &v, mask.as_deref(), scale as f64);
    assert!(
        want.iter().all(|x| x.is_finite()),
        "the reference is finite"
    );
    for dev in common::devices() {
        let t = |x: &[T], s: &[usize]| Tensor::from_slice(x, s, &dev).unwrap();
        let mt = mask.as_ref().map(|m| t(m, &[s_q, s_kv]));
        let mut o = attn_opts(&c, mt.as_ref());
        o.scale = Some(scale);
        let got = t(&q, &[1, 1, s_q, d])
            .attention(&t(&k, &[1, 1, s_kv, d]), &t(&v, &[1, 1, s_kv, d]), &o)
            .unwrap();
        let name = format!(
            "attention near the float limits {:?} top {top:?} {dev:?}",
            T::DTYPE
        );
        check(&name, &got.to_vec().unwrap(), &want, |i| {
            attn_bound::<T>(want[i], d, 1.0)
        });
    }
}

#[test]
fn attention_keeps_logits_near_the_float_limits_finite() {
    attention_near_the_float_limits::<f32>(None);
    attention_near_the_float_limits::<f16>(None);
    attention_near_the_float_limits::<bf16>(None);
    for top in [1.7e19, 99840.0] {
        attention_near_the_float_limits::<f32>(Some(top));
        attention_near_the_float_limits::<bf16>(Some(top));
    }
    // Exact in f16; the raw path's 2^r was 2^-38 (flushed) and 2^47.5.
    for top in [29952.0, 30000.0] {
        attention_near_the_float_limits::<f16>(Some(top));
    }
}

#[test]
fn attention_sums_stay_exact_when_logits_climb_fall_and_jump() {
    for s_q in [1, 40] {
        attention_far_logits::<f32>(s_q);
        attention_far_logits::<f16>(s_q);
        attention_far_logits::<bf16>(s_q);
    }
}

fn attention_grid<T: Float>() {
    for dev in common::devices() {
        for (n, c) in attn_grid().iter().enumerate() {
            attn_case::<T>(&dev, c, 0x9e37 + n as u64);
        }
    }
}

#[test]
fn attention_f32_matches_the_naive_formula() {
    attention_grid::<f32>();
}

#[test]
fn attention_f16_matches_the_naive_formula() {
    attention_grid::<f16>();
}

#[test]
fn attention_bf16_matches_the_naive_formula() {
    attention_grid::<bf16>();
}

/// Decode steps queued back to back, as a model runs them: each step
/// appends its keys and values to the cache (`slice_set`) and attends with
/// the last step's output as its query, nothing read back in between. On
/// an sm_90 GPU the attention kernels start early (before the kernel ahead
/// of them has finished; they wait inside), and each step's split buffer
/// reuses the memory the last step's merge read: a kernel that did not
/// wait would read a half-written query or cache row, or overwrite splits
/// still being merged. Each step is checked against the reference run on
/// the query the device itself produced.
fn attention_decode_chain<T: Float>() {
    let (h_q, h_kv, d, t0, steps, cap) = (8, 2, 128, 1500, 6, 1536);
    let mut rng = Rng(0xc4a1);
    let cache_k: Vec<T> = rng.vec(h_kv * cap * d, 1.0, 0.0);
    let cache_v: Vec<T> = rng.vec(h_kv * cap * d, 1.0, 0.0);
    let new_k: Vec<Vec<T>> = (0..steps).map(|_| rng.vec(h_kv * d, 1.0, 0.0)).collect();
    let new_v: Vec<Vec<T>> = (0..steps).map(|_| rng.vec(h_kv * d, 1.0, 0.0)).collect();
    let q0: Vec<T> = rng.vec(h_q * d, 1.0, 0.0);
    let scale = 1.0 / (d as f64).sqrt();
    for dev in common::devices() {
        let t = |x: &[T], s: &[usize]| Tensor::from_slice(x, s, &dev).unwrap();
        let mut ck = t(&cache_k, &[1, h_kv, cap, d]);
        let mut cv = t(&cache_v, &[1, h_kv, cap, d]);
        let mut q = t(&q0, &[1, h_q, 1, d]);
        let mut outs = Vec::new();
        for i in 0..steps {
            ck.slice_set(&t(&new_k[i], &[1, h_kv, 1, d]), 2, t0 + i)
                .unwrap();
            cv.slice_set(&t(&new_v[i], &[1, h_kv, 1, d]), 2, t0 + i)
                .unwrap();
            let len = t0 + i + 1;
            let o = q
                .attention(
                    &ck.narrow(2, 0, len).unwrap(),
                    &cv.narrow(2, 0, len).unwrap(),
                    &ferrocm::AttentionOptions::new(),
                )
                .unwrap();
            outs.push(o.clone());
            q = o;
        }
        let mut query = q0.clone();
        for (i, o) in outs.iter().enumerate() {
            let len = t0 + i + 1;
            // The cache as step `i` saw it, its first `len` positions.
            let at = |cache: &[T], new: &[Vec<T>], h: usize, j: usize, e: usize| {
                if j >= t0 {
                    new[j - t0][h * d + e]
                } else {
                    cache[(h * cap + j) * d + e]
                }
            };
            let k: Vec<T> = (0..h_kv * len * d)
                .map(|x| at(&cache_k, &new_k, x / (len * d), x / d % len, x % d))
                .collect();
            let v: Vec<T> = (0..h_kv * len * d)
                .map(|x| at(&cache_v, &new_v, x / (len * d), x / d % len, x % d))
                .collect();
            let c = AttnCase {
                dims: [1, h_q, h_kv, 1, len, d],
                causal: false,
                window: None,
                softcap: None,
                mask: None,
            };
            let want = attn_reference(&c, &query, &k, &v, None, scale);
            let got = o.to_vec().unwrap();
            let name = format!("decode chain {:?} {dev:?} step {i}", T::DTYPE);
            check(&name, &got, &want, |e| attn_bound::<T>(want[e], d, 1.0));
            query = got;
        }
    }
}

#[test]
fn attention_decode_steps_queued_back_to_back_see_each_others_writes() {
    attention_decode_chain::<f32>();
    attention_decode_chain::<bf16>();
}

/// A small Llama layer's decode steps queued back to back with nothing
/// read back in between: add + RMSNorm, the q/k/v projections (matrix-
/// vector products on weights stored `[n, k]`), RoPE, the cache writes,
/// attention, SwiGLU and the down projection, each kernel starting early
/// on an sm_90 GPU. A kernel that touched memory before the one ahead of it
/// finished would read a half-written operand or overwrite one still read
/// (the pool hands each step's buffers on). Every op here is checked
/// against its own f64 reference elsewhere; this test checks the order,
/// against the same steps on the Cpu.
#[test]
fn layer_steps_queued_back_to_back_match_the_cpu() {
    let (hidden, h_q, h_kv, d, ffn, t0, steps, cap) = (256, 4, 2, 64, 384, 300, 4, 320);
    let mut rng = Rng(0x1a7e);
    let mut w = |n: usize, k: usize| rng.vec::<f32>(n * k, 1.0 / (k as f64).sqrt(), 0.0);
    let (wq, wk, wv) = (w(hidden, hidden), w(h_kv * d, hidden), w(h_kv * d, hidden));
    let (wg, wu, wd) = (w(ffn, hidden), w(ffn, hidden), w(hidden, ffn));
    let norm_w: Vec<f32> = (0..hidden)
        .map(|i| 0.5 + (i % 7) as f64 as f32 * 0.1)
        .collect();
    let x0: Vec<f32> = rng.vec(hidden, 1.0, 0.0);
    let cache: Vec<f32> = rng.vec(h_kv * cap * d, 1.0, 0.0);
    let angle = |p: usize, i: usize| p as f64 / 10000f64.powf(2.0 * i as f64 / d as f64);
    let cos: Vec<f32> = (0..cap * d / 2)
        .map(|x| angle(x / (d / 2), x % (d / 2)).cos() as f32)
        .collect();
    let sin: Vec<f32> = (0..cap * d / 2)
        .map(|x| angle(x / (d / 2), x % (d / 2)).sin() as f32)
        .collect();
    let run = |dev: &Device| -> Vec<Vec<f32>> {
        let t = |x: &[f32], s: &[usize]| Tensor::from_slice(x, s, dev).unwrap();
        // Weights stored [n, k], used transposed: the GEMV kernel's layout.
        let lin = |x: &[f32], n: usize, k: usize| t(x, &[n, k]).transpose(0, 1).unwrap();
        let (wq, wk, wv) = (
            lin(&wq, hidden, hidden),
            lin(&wk, h_kv * d, hidden),
            lin(&wv, h_kv * d, hidden),
        );
        let (wg, wu, wd) = (
            lin(&wg, ffn, hidden),
            lin(&wu, ffn, hidden),
            lin(&wd, hidden, ffn),
        );
        let (norm_w, cos, sin) = (
            t(&norm_w, &[hidden]),
            t(&cos, &[cap, d / 2]),
            t(&sin, &[cap, d / 2]),
        );
        let mut ck = t(&cache, &[1, h_kv, cap, d]);
        let mut cv = t(&cache, &[1, h_kv, cap, d]);
        let mut x = t(&x0, &[1, hidden]);
        let mut delta = t(&vec![0.0; hidden], &[1, hidden]);
        let mut outs = Vec::new();
        for i in 0..steps {
            let pos = t0 + i;
            let (sum, h) = x.add_rms_norm(&delta, &norm_w, 1e-5).unwrap();
            let heads = |y: Tensor<f32>, n: usize| y.reshape(&[1, n, 1, d]).unwrap();
            let q = heads(h.matmul(&wq).unwrap(), h_q)
                .rope(&cos, &sin, pos)
                .unwrap();
            let k = heads(h.matmul(&wk).unwrap(), h_kv)
                .rope(&cos, &sin, pos)
                .unwrap();
            ck.slice_set(&k, 2, pos).unwrap();
            cv.slice_set(&heads(h.matmul(&wv).unwrap(), h_kv), 2, pos)
                .unwrap();
            let (kv_k, kv_v) = (
                ck.narrow(2, 0, pos + 1).unwrap(),
                cv.narrow(2, 0, pos + 1).unwrap(),
            );
            let a = q
                .attention(&kv_k, &kv_v, &ferrocm::AttentionOptions::new())
                .unwrap();
            let a = a.reshape(&[1, hidden]).unwrap();
            let g = a
                .matmul(&wg)
                .unwrap()
                .swiglu(&a.matmul(&wu).unwrap())
                .unwrap();
            delta = g.matmul(&wd).unwrap();
            outs.push(delta.clone());
            x = sum;
        }
        outs.iter().map(|o| o.to_vec().unwrap()).collect()
    };
    let want = run(&Device::Cpu);
    for dev in common::devices()
        .iter()
        .filter(|d| !matches!(d, Device::Cpu))
    {
        let got = run(dev);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            for (e, (a, b)) in g.iter().zip(w).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-4 * (1.0 + b.abs()),
                    "{dev:?} step {i} element {e}: {a} against the Cpu's {b}"
                );
            }
        }
    }
}

#[test]
fn attention_reads_cache_views_and_permuted_layouts() {
    // k and v are the first 70 positions of a (1, 2, 96, 64) cache; q is a
    // (b, s, h, d) tensor seen as (b, h, s, d); a view off its 16-byte
    // words is copied first. All must equal the contiguous call.
    let (h_q, h_kv, s_q, s_kv, cap, d) = (4, 2, 3, 70, 96, 64);
    let mut rng = Rng(77);
    let cache_k: Vec<bf16> = rng.vec(h_kv * cap * d, 1.0, 0.0);
    let cache_v: Vec<bf16> = rng.vec(h_kv * cap * d, 1.0, 0.0);
    let q_bshd: Vec<bf16> = rng.vec(s_q * h_q * d, 1.0, 0.0);
    // The contiguous operands, for the reference.
    let k: Vec<bf16> = (0..h_kv)
        .flat_map(|h| cache_k[h * cap * d..][..s_kv * d].to_vec())
        .collect();
    let v: Vec<bf16> = (0..h_kv)
        .flat_map(|h| cache_v[h * cap * d..][..s_kv * d].to_vec())
        .collect();
    let q: Vec<bf16> = (0..h_q)
        .flat_map(|h| (0..s_q).flat_map(move |i| (0..d).map(move |e| (h, i, e))))
        .map(|(h, i, e)| q_bshd[(i * h_q + h) * d + e])
        .collect();
    let c = AttnCase {
        dims: [1, h_q, h_kv, s_q, s_kv, d],
        causal: true,
        window: None,
        softcap: None,
        mask: None,
    };
    let want = attn_reference(&c, &q, &k, &v, None, 1.0 / 8.0);
    for dev in common::devices() {
        let ck = Tensor::from_slice(&cache_k, &[1, h_kv, cap, d], &dev).unwrap();
        let cv = Tensor::from_slice(&cache_v, &[1, h_kv, cap, d], &dev).unwrap();
        let kv = (
            ck.narrow(2, 0, s_kv).unwrap(),
            cv.narrow(2, 0, s_kv).unwrap(),
        );
        let qt = Tensor::from_slice(&q_bshd, &[1, s_q, h_q, d], &dev)
            .unwrap()
            .permute(&[0usize, 2, 1, 3][..])
            .unwrap();
        let opts = ferrocm::AttentionOptions::new().causal();
        let got = qt.attention(&kv.0, &kv.1, &opts).unwrap().to_vec().unwrap();
        check(&format!("cache views {dev:?}"), &got, &want, |i| {
            attn_bound::<bf16>(want[i], d, 1.0)
        });
        // Off the words: one element into a longer buffer.
        let mut shifted = vec![bf16::ZERO];
        shifted.extend(&k);
        let ks = Tensor::from_slice(&shifted, &[shifted.len()], &dev).unwrap();
        let ks = ks
            .narrow(0, 1, k.len())
            .unwrap()
            .reshape(&[1, h_kv, s_kv, d])
            .unwrap();
        let got = qt.attention(&ks, &kv.1, &opts).unwrap().to_vec().unwrap();
        check(&format!("unaligned k {dev:?}"), &got, &want, |i| {
            attn_bound::<bf16>(want[i], d, 1.0)
        });
    }
}

/// A prefill (more than 16 query rows a KV head: the matrix-unit kernel on
/// GPUs and the emulator) over a K that is the first keys of a longer
/// cache (heads `cap` keys apart), a V stored (b, s, h, d) and seen as
/// (b, h, s, d) (keys `h_kv * d` apart), two batches: the kernel's fetch
/// finds each key from its head's first word, and that must hold for
/// every head, batch and stride, at d 64 and 128.
#[test]
fn attention_prefill_reads_cache_views_and_permuted_kv() {
    for d in [64, 128] {
        let (b, h_q, h_kv, s_q, s_kv, cap) = (2, 4, 2, 37, 70, 96);
        let mut rng = Rng(91 + d as u64);
        let cache_k: Vec<bf16> = rng.vec(b * h_kv * cap * d, 1.0, 0.0);
        let v_bshd: Vec<bf16> = rng.vec(b * s_kv * h_kv * d, 1.0, 0.0);
        let q: Vec<bf16> = rng.vec(b * h_q * s_q * d, 1.0, 0.0);
        // The contiguous (b, h, s, d) operands, for the reference.
        let bhsd = |f: &dyn Fn(usize, usize, usize, usize) -> bf16| -> Vec<bf16> {
            let mut out = Vec::with_capacity(b * h_kv * s_kv * d);
            for bi in 0..b {
                for h in 0..h_kv {
                    for j in 0..s_kv {
                        for e in 0..d {
                            out.push(f(bi, h, j, e));
                        }
                    }
                }
            }
            out
        };
        let k = bhsd(&|bi, h, j, e| cache_k[((bi * h_kv + h) * cap + j) * d + e]);
        let v = bhsd(&|bi, h, j, e| v_bshd[((bi * s_kv + j) * h_kv + h) * d + e]);
        let c = AttnCase {
            dims: [b, h_q, h_kv, s_q, s_kv, d],
            causal: true,
            window: None,
            softcap: None,
            mask: None,
        };
        let scale = 1.0 / (d as f64).sqrt();
        let want = attn_reference(&c, &q, &k, &v, None, scale);
        for dev in common::devices() {
            let kt = Tensor::from_slice(&cache_k, &[b, h_kv, cap, d], &dev)
                .unwrap()
                .narrow(2, 0, s_kv)
                .unwrap();
            let vt = Tensor::from_slice(&v_bshd, &[b, s_kv, h_kv, d], &dev)
                .unwrap()
                .permute(&[0usize, 2, 1, 3][..])
                .unwrap();
            let qt = Tensor::from_slice(&q, &[b, h_q, s_q, d], &dev).unwrap();
            let opts = ferrocm::AttentionOptions::new().causal();
            let got = qt.attention(&kt, &vt, &opts).unwrap().to_vec().unwrap();
            check(&format!("prefill views d {d} {dev:?}"), &got, &want, |i| {
                attn_bound::<bf16>(want[i], d, 1.0)
            });
        }
    }
}

#[test]
fn attention_hides_rows_to_zero_and_shows_nan() {
    let d = 64;
    for dev in common::devices() {
        // q row 0 of 4 holds a NaN; key 3 holds a NaN, which causal rows 0
        // to 2 of a 4 x 4 prefill never see; a mask hides row 1 whole.
        let mut q = vec![0.5f32; 4 * d];
        q[5] = f32::NAN;
        let mut k = vec![0.25f32; 4 * d];
        k[3 * d + 7] = f32::NAN;
        let v: Vec<f32> = (0..4 * d).map(|i| (i / d) as f32).collect();
        let mut m = vec![0.0f32; 16];
        m[4..8].iter_mut().for_each(|x| *x = f32::NEG_INFINITY);
        let t = |x: &[f32], s: &[usize]| Tensor::from_slice(x, s, &dev).unwrap();
        let (qt, kt, vt, mt) = (
            t(&q, &[1, 1, 4, d]),
            t(&k, &[1, 1, 4, d]),
            t(&v, &[1, 1, 4, d]),
            t(&m, &[4, 4]),
        );
        let opts = ferrocm::AttentionOptions::new().causal().mask(&mt);
        let got = qt.attention(&kt, &vt, &opts).unwrap().to_vec().unwrap();
        let row = |r: usize| &got[r * d..(r + 1) * d];
        assert!(row(0).iter().all(|x| x.is_nan()), "{dev:?}: NaN query");
        assert!(
            row(1).iter().all(|&x| x == 0.0),
            "{dev:?}: hidden row {:?}",
            row(1)
        );
        // Row 2 sees keys 0..=2 with equal logits: the mean of 0, 1, 2.
        assert!(
            row(2).iter().all(|&x| (x - 1.0).abs() < 1e-6),
            "{dev:?}: {:?}",
            row(2)
        );
        assert!(row(3).iter().all(|x| x.is_nan()), "{dev:?}: NaN key");
        // Empty operands and no keys.
        let e = Tensor::<f32>::zeros(&[0, 1, 4, d], &dev).unwrap();
        assert_eq!(
            e.attention(&e, &e, &Default::default()).unwrap().shape(),
            &[0, 1, 4, d]
        );
        let nk = Tensor::<f32>::zeros(&[1, 1, 0, d], &dev).unwrap();
        let z = qt
            .attention(&nk, &nk, &Default::default())
            .unwrap()
            .to_vec()
            .unwrap();
        assert!(z.iter().all(|&x| x == 0.0));
    }
}

#[test]
fn attention_refuses_bad_inputs_with_typed_errors() {
    let dev = Device::Cpu;
    let z = |s: &[usize]| Tensor::<f32>::zeros(s, &dev).unwrap();
    let none = ferrocm::AttentionOptions::new();
    let (q, k) = (z(&[1, 4, 2, 64]), z(&[1, 2, 5, 64]));
    let bad = |r: ferrocm::Result<Tensor<f32>>, what: &str| match r {
        Err(Error::BadParameter {
            op: "attention",
            what: w,
        }) => assert!(w.contains(what), "{w}"),
        other => panic!("want BadParameter({what}), got {other:?}"),
    };
    let (q72, k72) = (z(&[1, 4, 2, 72]), z(&[1, 2, 5, 72]));
    bad(q72.attention(&k72, &k72, &none), "64, 80, 96, 128, 256");
    let k3 = z(&[1, 3, 5, 64]);
    bad(q.attention(&k3, &k3, &none), "not a multiple");
    bad(q.attention(&k, &k, &none.scale(f32::NAN)), "scale");
    bad(q.attention(&k, &k, &none.softcap(0.0)), "softcap");
    bad(q.attention(&k, &k, &none.softcap(f32::INFINITY)), "softcap");
    bad(q.attention(&k, &k, &none.window(0)), "window");
    let shape = |r: ferrocm::Result<Tensor<f32>>, op: &str| match r {
        Err(Error::ShapeMismatch { op: o, .. }) => assert_eq!(o, op),
        other => panic!("want ShapeMismatch({op}), got {other:?}"),
    };
    shape(q.attention(&z(&[1, 2, 5, 128]), &k, &none), "attention k");
    shape(q.attention(&z(&[2, 2, 5, 64]), &k, &none), "attention k");
    shape(q.attention(&k, &z(&[1, 2, 6, 64]), &none), "attention v");
    assert_eq!(
        z(&[4, 2, 64])
            .attention(&k, &k, &none)
            .unwrap_err()
            .to_string(),
        "attention: q must have rank 4 (b, heads, seq, head dim), got shape [4, 2, 64]"
    );
    let m = z(&[3, 5]);
    shape(q.attention(&k, &k, &none.mask(&m)), "attention mask");
    let m5 = z(&[1, 1, 1, 2, 5]);
    shape(q.attention(&k, &k, &none.mask(&m5)), "attention mask");
    let qi = Tensor::<u32>::zeros(&[1, 4, 2, 64], &dev).unwrap();
    let ki = Tensor::<u32>::zeros(&[1, 2, 5, 64], &dev).unwrap();
    assert!(matches!(
        qi.attention(&ki, &ki, &ferrocm::AttentionOptions::new()),
        Err(Error::UnsupportedDType {
            op: "attention",
            ..
        })
    ));
    let emu = Device::emulator(ferrocm::WaveSize::Wave32);
    let ke = Tensor::<f32>::zeros(&[1, 2, 5, 64], &emu).unwrap();
    assert!(matches!(
        q.attention(&ke, &ke, &none),
        Err(Error::DeviceMismatch {
            op: "attention",
            ..
        })
    ));
}

/// The split merge on its own, with more splits than a wave has lanes
/// (a decode step on a large GPU; the op's emulator launches take fewer):
/// partial `(m, l, o)` made up here, merged against the f64 formula
/// `sum(o_s w_s) / sum(l_s w_s)`, `w_s = exp(m_s - max m)`. Splits that saw
/// nothing (`m = -inf`, `l = 0`) add nothing; a row whose splits all saw
/// nothing is zeros; a NaN `m` makes its row NaN.
#[test]
fn attention_merge_combines_many_splits() {
    use ferrocm::host::{In, LaunchConfig, Out};
    use ferrocm::kernels::attention::{
        ATTN_MERGE_BLOCK, ATTN_STATS, attn_merge_f32, attn_merge_lds_bytes,
    };
    use ferrocm::kernels::host::KernelRef;
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed >> 11) as f64 / (1u64 << 53) as f64
    };
    for dev in common::devices()
        .into_iter()
        .filter(|d| d.wave_size().is_some())
    {
        for (rows, d, splits) in [
            (5usize, 64usize, 1usize),
            (3, 80, 33),
            (4, 256, 70),
            (2, 128, 64),
        ] {
            let slot = d + ATTN_STATS as usize;
            let mut part = vec![0f32; rows * splits * slot];
            for r in 0..rows {
                for s in 0..splits {
                    let at = (r * splits + s) * slot;
                    // Row 1: nothing seen anywhere; every third split of
                    // the others: nothing seen there.
                    let empty = r == 1 || s % 3 == 2;
                    part[at] = if empty {
                        f32::NEG_INFINITY
                    } else {
                        (rnd() * 40.0 - 20.0) as f32
                    };
                    part[at + 1] = if empty {
                        0.0
                    } else {
                        (1.0 + rnd() * 10.0) as f32
                    };
                    for e in 0..d {
                        part[at + 2 + e] = if empty {
                            0.0
                        } else {
                            (rnd() * 8.0 - 4.0) as f32
                        };
                    }
                }
            }
            if rows > 3 {
                part[(3 * splits + splits - 1) * slot] = f32::NAN;
            }
            let buf = dev.upload(&part).unwrap();
            let out = dev.alloc::<f32>(rows * d).unwrap();
            let wave = dev.wave_size().unwrap_or(32);
            dev.launch_typed(
                KernelRef::of::<attn_merge_f32>(),
                LaunchConfig::rows(
                    rows as u64,
                    ATTN_MERGE_BLOCK,
                    attn_merge_lds_bytes(wave, d as u32),
                ),
                (
                    Out::new(&out),
                    In::new(&buf),
                    rows as u64,
                    d as u32,
                    splits as u32,
                ),
            )
            .unwrap();
            let got = out.download().unwrap();
            for r in 0..rows {
                let slots: Vec<&[f32]> = (0..splits)
                    .map(|s| &part[(r * splits + s) * slot..][..slot])
                    .collect();
                let mt = slots
                    .iter()
                    .map(|p| p[0] as f64)
                    .fold(f64::NEG_INFINITY, |a, m| {
                        if a.is_nan() || m.is_nan() {
                            f64::NAN
                        } else {
                            a.max(m)
                        }
                    });
                let w: Vec<f64> = slots
                    .iter()
                    .map(|p| {
                        if p[0] == f32::NEG_INFINITY {
                            0.0
                        } else {
                            (p[0] as f64 - mt).exp()
                        }
                    })
                    .collect();
                let l: f64 = slots.iter().zip(&w).map(|(p, w)| p[1] as f64 * w).sum();
                for e in 0..d {
                    let o: f64 = slots.iter().zip(&w).map(|(p, w)| p[2 + e] as f64 * w).sum();
                    let g = got[r * d + e] as f64;
                    let label =
                        format!("{dev:?} rows {rows} d {d} splits {splits}: row {r} col {e}");
                    if r == 3 {
                        assert!(g.is_nan(), "{label}: {g}, not NaN");
                    } else if r == 1 {
                        assert_eq!(g, 0.0, "{label}");
                    } else {
                        let want = o / l;
                        // Each term's weight and product in f32: a few
                        // roundings of the largest term, over the sum.
                        let big: f64 = slots
                            .iter()
                            .zip(&w)
                            .map(|(p, w)| (p[2 + e] as f64 * w).abs())
                            .sum();
                        let bound = 16.0 * U32 * (big / l + want.abs()) + 1e-30;
                        assert!(
                            (g - want).abs() <= bound,
                            "{label}: {g} vs {want} (bound {bound})"
                        );
                    }
                }
            }
        }
    }
}

/// For f16 and bf16 every path rounds each probability to the dtype where
/// it multiplies V (FlashAttention's second product: the probability
/// relative to the running max of its tile of keys) and sums the unrounded
/// ones: with keys of logits 0 and -0.1 (bf16: -0.10009766) in one tile (62
/// more keys masked out with -inf), V rows 0 and 1, the output is
/// `bf16(p1) / (1 + p1)` rounded, 0.4765625, where unrounded weights give
/// 0.4746094. Checked on the Cpu (one query and 32) and on the
/// matrix-unit kernel (32 query rows) of every kernel device. (The row
/// kernels of decode split a row's keys among lane groups, each with its
/// own running max, whose merge weights are f32: there the rounding is
/// relative to the group's max, bounded in `attn_case` and not tied to
/// this exact value.)
#[test]
fn attention_rounds_the_probabilities_as_flashattention_on_every_path() {
    for dev in common::devices() {
        for s_q in [1, 32] {
            if s_q == 1 && dev.runs_kernels() {
                continue;
            }
            let (d, s_kv) = (64, 64);
            let mut q = vec![bf16::ZERO; s_q * d];
            for r in 0..s_q {
                q[r * d] = bf16::ONE;
            }
            let mut k = vec![bf16::ZERO; s_kv * d];
            k[d] = bf16::from_f32(-0.1);
            let mut v = vec![bf16::ZERO; s_kv * d];
            v[d..2 * d].iter_mut().for_each(|x| *x = bf16::ONE);
            let mut mask = vec![bf16::NEG_INFINITY; s_kv];
            mask[..2].iter_mut().for_each(|x| *x = bf16::ZERO);
            let t = |x: &[bf16], s: &[usize]| Tensor::from_slice(x, s, &dev).unwrap();
            let m = t(&mask, &[s_kv]);
            let out = t(&q, &[1, 1, s_q, d])
                .attention(
                    &t(&k, &[1, 1, s_kv, d]),
                    &t(&v, &[1, 1, s_kv, d]),
                    &ferrocm::AttentionOptions::new().scale(1.0).mask(&m),
                )
                .unwrap()
                .to_vec()
                .unwrap();
            let p1 = (-0.10009765625f64).exp();
            let want = bf16::from_f64(bf16::from_f64(p1).to_f64() / (1.0 + p1));
            assert_eq!(want.to_f32(), 0.4765625);
            for (i, y) in out.iter().enumerate() {
                assert_eq!(*y, want, "{dev} s_q {s_q} element {i}");
            }
        }
    }
}
