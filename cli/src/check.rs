//! `ferrocm check`: every op × dtype on a device against the Cpu backend.
//!
//! This is ferrocm's self-test (what the CLI's `check` and `bench` run), public
//! so that tools and a GPU machine's test run can call it; it is not part of
//! the op API a model uses, and its case list and report format may change
//! with any release.
//!
//! The same seeded inputs are built on both devices; each op's result is
//! compared element by element with a per-dtype tolerance. The test suite runs
//! the same cases over many layouts ([`InputLayout`]) on the emulator.

use ferrocm_ops::Result;
use ferrocm_ops::conv::{ConvOptions, PoolOptions, Resize};
use ferrocm_ops::quant::Q8Activations;
use ferrocm_ops::rope::RopeMode;
use ferrocm_ops::{Activation, Binary, Cmp, Device, Reduce, Tensor, Unary, bf16, f16};
use ferrocm_ops::{DType, QTensor, QuantFormat, WithDType};

/// How an input is laid out in memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum InputLayout {
    /// Dense row-major.
    Contiguous,
    /// A transposed view of a dense `[cols, rows]` tensor.
    Transposed,
    /// A narrowed view (offset, row stride larger than the row).
    Narrowed,
    /// A `[1, cols]` row broadcast to every row (stride 0).
    Broadcast,
}

impl InputLayout {
    /// Every layout.
    pub const ALL: [InputLayout; 4] = [
        InputLayout::Contiguous,
        InputLayout::Transposed,
        InputLayout::Narrowed,
        InputLayout::Broadcast,
    ];
}

/// Tolerance of a comparison: `|got - want| <= abs + rel * |want|`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    /// Absolute part.
    pub abs: f64,
    /// Relative part.
    pub rel: f64,
}

/// The tolerance of a dtype: f32 allows a few ulp (GPU intrinsics vs libm,
/// summation order), f16/bf16 one or two ulp of the type, integers none.
pub fn tolerance(dtype: DType) -> Tolerance {
    match dtype {
        DType::F32 => Tolerance {
            abs: 1e-5,
            rel: 1e-4,
        },
        DType::F16 => Tolerance {
            abs: 1e-3,
            rel: 2e-3,
        },
        DType::BF16 => Tolerance {
            abs: 1e-2,
            rel: 1.6e-2,
        },
        // Integers (and any dtype added later) compare exactly.
        _ => Tolerance { abs: 0.0, rel: 0.0 },
    }
}

/// One compared case.
#[derive(Clone, Debug, PartialEq)]
pub struct CaseResult {
    /// Op name (with its variant, e.g. `sum[1]`).
    pub op: String,
    /// Input dtype.
    pub dtype: DType,
    /// Device checked.
    pub device: String,
    /// Input layout.
    pub layout: String,
    /// Largest absolute error.
    pub max_abs_err: f64,
    /// Largest relative error.
    pub max_rel_err: f64,
    /// Within tolerance (and both sides succeeded).
    pub passed: bool,
    /// What went wrong, if anything.
    pub error: Option<String>,
}

/// Compares two results: max abs and rel error, and whether all are within `tol`.
/// NaN matches NaN; infinities must match exactly.
///
/// ```
/// use ferrocm_cli::check::{compare, Tolerance};
/// let (abs, _, ok) = compare(&[1.0f32, f32::NAN], &[1.0, f32::NAN], Tolerance { abs: 0.0, rel: 0.0 });
/// assert!(ok && abs == 0.0);
/// ```
/// # use ferrocm_ops::WaveSize;
pub fn compare<T: WithDType>(got: &[T], want: &[T], tol: Tolerance) -> (f64, f64, bool) {
    if got.len() != want.len() {
        return (f64::INFINITY, f64::INFINITY, false);
    }
    let (mut max_abs, mut max_rel, mut ok) = (0.0f64, 0.0f64, true);
    for (g, w) in got.iter().zip(want) {
        let (g, w) = (g.to_f64(), w.to_f64());
        if g.is_nan() || w.is_nan() {
            ok &= g.is_nan() && w.is_nan();
            continue;
        }
        if g.is_infinite() || w.is_infinite() {
            ok &= g == w;
            continue;
        }
        let abs = (g - w).abs();
        let rel = if w != 0.0 { abs / w.abs() } else { abs };
        max_abs = max_abs.max(abs);
        max_rel = max_rel.max(rel);
        ok &= abs <= tol.abs + tol.rel * w.abs();
    }
    (max_abs, max_rel, ok)
}

/// Builds the check's inputs on any device from a seed.
#[derive(Clone, Copy, Debug)]
pub struct Inputs {
    /// Logical shape `[rows, cols]` of every input.
    pub rows: usize,
    /// See `rows`.
    pub cols: usize,
    /// Memory layout.
    pub layout: InputLayout,
}

impl Inputs {
    /// A tensor of `[rows, cols]` in this layout, values uniform in `[lo, hi)`.
    pub fn make<T: WithDType>(
        &self,
        seed: u64,
        lo: f64,
        hi: f64,
        dev: &Device,
    ) -> Result<Tensor<T>> {
        let (r, c) = (self.rows, self.cols);
        match self.layout {
            InputLayout::Contiguous => Tensor::rand(&[r, c], lo, hi, seed, dev),
            InputLayout::Transposed => Tensor::rand(&[c, r], lo, hi, seed, dev)?.transpose(0, 1),
            InputLayout::Narrowed => Tensor::rand(&[r + 3, c + 5], lo, hi, seed, dev)?
                .narrow(0, 2, r)?
                .narrow(1, 3, c),
            InputLayout::Broadcast => {
                Tensor::rand(&[1, c], lo, hi, seed, dev)?.broadcast_as(&[r, c])
            }
        }
    }
}

/// The outcome of a case whose outputs cannot be compared: a failed run
/// (the device's or the Cpu's), or shapes that differ.
fn unmatched(
    got: Result<Vec<usize>>,
    want: Result<Vec<usize>>,
) -> (f64, f64, bool, Option<String>) {
    let why = match (got, want) {
        (Err(e), _) => e.to_string(),
        (_, Err(e)) => format!("Cpu: {e}"),
        (Ok(gs), Ok(ws)) => format!("shape {gs:?} vs Cpu {ws:?}"),
    };
    (f64::INFINITY, f64::INFINITY, false, Some(why))
}

struct Runner<'a> {
    device: &'a Device,
    inputs: Inputs,
    results: Vec<CaseResult>,
}

impl Runner<'_> {
    fn case<R: WithDType>(
        &mut self,
        op: String,
        dtype: DType,
        f: impl Fn(&Device) -> Result<Tensor<R>>,
    ) {
        self.case_scaled(op, dtype, false, f)
    }

    /// As [`Runner::case`]; with `long_sums`, the absolute tolerance also
    /// scales with the largest output: outputs that are long sums of terms
    /// with both signs differ by summation order in proportion to their
    /// terms, not to their own (possibly cancelled) value.
    fn case_scaled<R: WithDType>(
        &mut self,
        op: String,
        dtype: DType,
        long_sums: bool,
        f: impl Fn(&Device) -> Result<Tensor<R>>,
    ) {
        let mut tol = tolerance(R::DTYPE);
        let want = f(&Device::Cpu).and_then(|t| Ok((t.shape().to_vec(), t.to_vec()?)));
        let got = f(self.device).and_then(|t| Ok((t.shape().to_vec(), t.to_vec()?)));
        let outcome = match (got, want) {
            (Ok((gs, g)), Ok((ws, w))) if gs == ws => {
                if long_sums {
                    let largest = w.iter().map(|v| v.to_f64().abs()).filter(|v| v.is_finite());
                    tol.abs += tol.rel * largest.fold(0.0, f64::max);
                }
                let (a, r, p) = compare(&g, &w, tol);
                (a, r, p, None)
            }
            (got, want) => unmatched(got.map(|g| g.0), want.map(|w| w.0)),
        };
        self.record(op, dtype, outcome);
    }

    /// Adds a case's `(max abs, max rel, passed, error)` to the results.
    fn record(&mut self, op: String, dtype: DType, outcome: (f64, f64, bool, Option<String>)) {
        let (max_abs_err, max_rel_err, passed, error) = outcome;
        self.results.push(CaseResult {
            op,
            dtype,
            device: self.device.to_string(),
            layout: format!(
                "{:?} {}x{}",
                self.inputs.layout, self.inputs.rows, self.inputs.cols
            ),
            max_abs_err,
            max_rel_err,
            passed,
            error,
        });
    }

    /// A case whose output is in the 8-bit form ([`Q8Activations`]): the
    /// values `code * scale` of the device against the Cpu's. The two
    /// compute the rounded values in different orders, so a value next to
    /// a rounding boundary may take the neighbouring code: it passes when
    /// every value is within one code step (its group's scale), the scales
    /// agree to the dtype's tolerance, and at most 1% of the codes differ.
    fn case_q8(&mut self, op: String, dtype: DType, f: impl Fn(&Device) -> Result<Q8Activations>) {
        let tol = tolerance(dtype);
        let want = f(&Device::Cpu).and_then(|q| Ok((q.shape().to_vec(), q.to_host()?)));
        let got = f(self.device).and_then(|q| Ok((q.shape().to_vec(), q.to_host()?)));
        let outcome = match (got, want) {
            (Ok((gs, (gc, gd))), Ok((ws, (wc, wd)))) if gs == ws && gc.len() == wc.len() => {
                let (mut abs, mut rel, mut ok, mut flips) = (0.0f64, 0.0f64, true, 0usize);
                for (g, (&gd, &wd)) in gd.iter().zip(&wd).enumerate() {
                    let (gd, wd) = (gd as f64, wd as f64);
                    let r = (gd - wd).abs() / wd.abs().max(f64::MIN_POSITIVE);
                    rel = rel.max(if gd == wd { 0.0 } else { r });
                    ok &= gd == wd || r <= tol.rel;
                    for i in g * 16..(g + 1) * 16 {
                        let e = (gc[i] as f64 * gd - wc[i] as f64 * wd).abs();
                        abs = abs.max(e);
                        flips += usize::from(gc[i] != wc[i]);
                        ok &= e <= 1.01 * gd.abs().max(wd.abs());
                    }
                }
                ok &= flips * 100 <= wc.len();
                (abs, rel, ok, None)
            }
            (got, want) => unmatched(got.map(|g| g.0), want.map(|w| w.0)),
        };
        self.record(op, dtype, outcome);
    }

    fn dtype<T: WithDType>(&mut self) {
        let d = T::DTYPE;
        let inp = self.inputs;
        let (lo, hi) = if d.is_float() {
            (-3.0, 3.0)
        } else {
            (0.0, 100.0)
        };
        let x = move |dev: &Device| inp.make::<T>(1, lo, hi, dev);
        let pos = move |dev: &Device| inp.make::<T>(2, 0.1, 3.0, dev);
        let y = move |dev: &Device| inp.make::<T>(3, if d.is_float() { lo } else { 1.0 }, hi, dev);
        if d.is_float() {
            for &op in Unary::ALL {
                let needs_pos = matches!(op, Unary::Sqrt | Unary::Rsqrt | Unary::Log | Unary::Powf);
                let p = match op {
                    Unary::Powf => 1.7,
                    Unary::LeakyRelu => 0.1,
                    _ => 1.0,
                };
                self.case(op.name().into(), d, move |dev| {
                    (if needs_pos { pos(dev) } else { x(dev) })?.unary(op, p)
                });
            }
            self.case("softmax".into(), d, move |dev| x(dev)?.softmax());
            self.case("log_softmax".into(), d, move |dev| x(dev)?.log_softmax());
            // Products: values scaled so each sum's magnitude is about 1
            // (the dtype tolerances are absolute near zero).
            let s = 2.0 / (inp.cols.max(1) as f64).sqrt();
            let a = move |dev: &Device| inp.make::<T>(11, -s, s, dev);
            let b = move |dev: &Device| inp.make::<T>(12, -s, s, dev);
            let r = inp.rows;
            // [r, c] x [c, r] (the GEMM), and a matrix-vector product.
            self.case("matmul".into(), d, move |dev| {
                a(dev)?.matmul(&b(dev)?.transpose(0, 1)?)
            });
            self.case("matvec".into(), d, move |dev| {
                let v = b(dev)?
                    .narrow(0, 0, r.min(1))?
                    .reshape(&[inp.cols * r.min(1)])?;
                if r == 0 {
                    a(dev)?.matmul(&b(dev)?.transpose(0, 1)?)
                } else {
                    a(dev)?.matvec(&v)
                }
            });
            // linear with bias: up to 8 rows (the GEMV kernel), all rows (the GEMM).
            for (name, rows, act) in [
                ("linear_gelu[rows<=8]", r.min(8), Activation::Gelu),
                ("linear_silu", r, Activation::Silu),
            ] {
                self.case(name.into(), d, move |dev| {
                    let bias = Tensor::<T>::rand(&[r], -1.0, 1.0, 13, dev)?;
                    a(dev)?
                        .narrow(0, 0, rows)?
                        .linear(&b(dev)?, Some(&bias), Some(act))
                });
            }
            // The gated unit fused into the product (1 and 2 rows: the
            // fused kernels), the weight's rows split into gate and up.
            for (name, rows) in [("linear_glu[rows=1]", 1), ("linear_glu[rows<=2]", 2)] {
                self.case(name.into(), d, move |dev| {
                    a(dev)?
                        .narrow(0, 0, r.min(rows))?
                        .linear_glu(&b(dev)?.narrow(0, 0, 2 * (r / 2))?, Activation::Silu)
                });
            }
            // A weight of another float dtype (an f16/bf16 model's weights
            // kept as stored under f32 activations): one row (the Cpu's
            // matrix-vector path) and all rows (its blocked product).
            for wd in [DType::F32, DType::F16, DType::BF16] {
                if wd == d {
                    continue;
                }
                for (tag, rows) in [(", rows=1", r.min(1)), ("", r)] {
                    self.case(format!("linear_mixed[w={wd}{tag}]"), d, move |dev| {
                        let w = b(dev)?.to_dyn().to_dtype(wd)?;
                        a(dev)?.narrow(0, 0, rows)?.linear_mixed(&w)
                    });
                }
            }
            // The LLM ops: norms over the rows (weights and bias from their
            // own seeds), the fused adds (both outputs), gated activations,
            // rotary embeddings of the rows as positions (the first
            // 2 * (cols / 2) dims rotate: all of them, or all but one).
            let (rows, cols) = (inp.rows, inp.cols);
            let w = move |dev: &Device| Tensor::<T>::rand(&[cols], 0.5, 1.5, 21, dev);
            let bias = move |dev: &Device| Tensor::<T>::rand(&[cols], -1.0, 1.0, 22, dev);
            self.case("rms_norm".into(), d, move |dev| {
                x(dev)?.rms_norm(&w(dev)?, 1e-5)
            });
            self.case("layer_norm".into(), d, move |dev| {
                x(dev)?.layer_norm(&w(dev)?, Some(&bias(dev)?), 1e-5)
            });
            for (name, layer, sum) in [
                ("add_rms_norm", false, false),
                ("add_rms_norm[sum]", false, true),
                ("add_layer_norm", true, false),
                ("add_layer_norm[sum]", true, true),
            ] {
                self.case(name.into(), d, move |dev| {
                    let (x, r, w) = (x(dev)?, y(dev)?, w(dev)?);
                    let (s, n) = match layer {
                        true => x.add_layer_norm(&r, &w, None, 1e-5)?,
                        false => x.add_rms_norm(&r, &w, 1e-5)?,
                    };
                    Ok(if sum { s } else { n })
                });
            }
            self.case("swiglu".into(), d, move |dev| x(dev)?.swiglu(&y(dev)?));
            self.case("glu_gelu".into(), d, move |dev| {
                x(dev)?.glu(&y(dev)?, Activation::Gelu)
            });
            // Convolution: the input's rows as channels (conv1d through the
            // implicit GEMM), as one image (conv2d, strided and dilated),
            // and as a depthwise stack (the direct kernel).
            let conv_w = move |dev: &Device, shape: &[usize], seed| {
                let fan_in: usize = shape[1..].iter().product();
                let s = 1.0 / (fan_in.max(1) as f64).sqrt();
                Tensor::<T>::rand(shape, -s, s, seed, dev)
            };
            let conv_b = move |dev: &Device, n| Tensor::<T>::rand(&[n], -1.0, 1.0, 27, dev);
            // (Shapes the convolutions cannot take, as PyTorch cannot, are
            // left out: a kernel past the padded input, 0 depthwise groups.)
            if cols >= 1 {
                self.case_scaled("conv1d".into(), d, true, move |dev| {
                    let x = x(dev)?.reshape(&[1, rows, cols])?;
                    let o = ConvOptions::new().padding(&[1]);
                    x.conv1d(
                        &conv_w(dev, &[32, rows, 3], 25)?,
                        Some(&conv_b(dev, 32)?),
                        &o,
                    )
                });
            }
            if rows >= 1 && cols >= 3 {
                self.case_scaled("conv2d".into(), d, true, move |dev| {
                    let x = x(dev)?.reshape(&[1, 1, rows, cols])?;
                    let o = ConvOptions::new()
                        .stride(&[2])
                        .padding(&[1])
                        .dilation(&[1, 2]);
                    x.conv2d(&conv_w(dev, &[16, 1, 3, 3], 26)?, None, &o)
                });
            }
            // A multiple of 8 of the rows as channels into 16: f16/bf16 take
            // the matrix-unit implicit GEMM there (`conv_mma_*`).
            let rows8 = rows / 8 * 8;
            if rows8 >= 8 && cols >= 1 {
                self.case_scaled("conv2d_channels8".into(), d, true, move |dev| {
                    let x = x(dev)?.reshape(&[1, rows, 1, cols])?.narrow(1, 0, rows8)?;
                    let o = ConvOptions::new().padding(&[0, 1]);
                    x.conv2d(
                        &conv_w(dev, &[16, rows8, 1, 3], 31)?,
                        Some(&conv_b(dev, 16)?),
                        &o,
                    )
                });
            }
            if rows >= 1 && cols >= 1 {
                self.case_scaled("conv2d_depthwise".into(), d, true, move |dev| {
                    let x = x(dev)?.reshape(&[1, rows, 1, cols])?;
                    let o = ConvOptions::new().padding(&[0, 2]).groups(rows);
                    x.conv2d(
                        &conv_w(dev, &[rows, 1, 1, 5], 28)?,
                        Some(&conv_b(dev, rows)?),
                        &o,
                    )
                });
            }
            // Transposed: the rows as channels into 16 (the implicit
            // GEMM), spread out along the columns; and depthwise (direct).
            if rows >= 1 && cols >= 1 {
                self.case_scaled("conv_transpose2d".into(), d, true, move |dev| {
                    let x = x(dev)?.reshape(&[1, rows, 1, cols])?;
                    let o = ConvOptions::new()
                        .stride(&[1, 2])
                        .padding(&[0, 1])
                        .output_padding(&[0, 1]);
                    x.conv_transpose2d(
                        &conv_w(dev, &[rows, 16, 1, 3], 29)?,
                        Some(&conv_b(dev, 16)?),
                        &o,
                    )
                });
                self.case_scaled("conv_transpose1d_depthwise".into(), d, true, move |dev| {
                    let x = x(dev)?.reshape(&[1, rows, cols])?;
                    let o = ConvOptions::new().stride(&[2]).padding(&[1]).groups(rows);
                    x.conv_transpose1d(&conv_w(dev, &[rows, 1, 4], 30)?, None, &o)
                });
            }
            // Pools and resizing on the input as one image (a max pool's
            // indices too), and as rows of channels (1 x cols images).
            if rows >= 1 && cols >= 1 {
                let image = move |dev: &Device| x(dev)?.reshape(&[1, 1, rows, cols]);
                let pool = PoolOptions::new(&[3]).stride(&[2]).padding(&[1]);
                let p = pool.clone();
                self.case("max_pool2d".into(), d, move |dev| {
                    image(dev)?.max_pool2d(&p)
                });
                let p = pool.clone();
                self.case("max_pool2d[indices]".into(), d, move |dev| {
                    Ok(image(dev)?.max_pool_with_indices(2, &p)?.1)
                });
                let p = PoolOptions::new(&[1, 3])
                    .stride(&[1, 2])
                    .padding(&[0, 1])
                    .ceil_mode(true)
                    .count_include_pad(false);
                self.case_scaled("avg_pool2d".into(), d, true, move |dev| {
                    x(dev)?.reshape(&[1, rows, 1, cols])?.avg_pool2d(&p)
                });
                self.case_scaled("adaptive_avg_pool2d".into(), d, true, move |dev| {
                    image(dev)?.adaptive_avg_pool2d([3, 5])
                });
                self.case("adaptive_max_pool2d".into(), d, move |dev| {
                    Ok(image(dev)?.adaptive_max_pool2d([3, 5])?.0)
                });
                self.case("upsample_nearest2d".into(), d, move |dev| {
                    image(dev)?.upsample_nearest2d(Resize::Scale([2.0, 2.0]))
                });
                self.case("upsample_bilinear2d".into(), d, move |dev| {
                    image(dev)?.upsample_bilinear2d(Resize::Size([rows + 3, 2 * cols + 1]), false)
                });
            }
            // Channel norms: the rows as channels of one image (group and
            // instance norm), and as a batch of `cols` channels.
            let groups = if rows.is_multiple_of(2) { 2 } else { 1 };
            let chan = move |dev: &Device, n, seed| Tensor::<T>::rand(&[n], 0.5, 1.5, seed, dev);
            self.case_scaled("group_norm".into(), d, true, move |dev| {
                x(dev)?.reshape(&[1, rows, cols])?.group_norm(
                    groups,
                    Some(&chan(dev, rows, 29)?),
                    Some(&chan(dev, rows, 30)?),
                    1e-5,
                )
            });
            if cols >= 2 {
                self.case_scaled("instance_norm".into(), d, true, move |dev| {
                    x(dev)?
                        .reshape(&[1, rows, cols])?
                        .instance_norm(None, None, 1e-5)
                });
            }
            self.case("batch_norm".into(), d, move |dev| {
                let (m, v) = (chan(dev, cols, 31)?, chan(dev, cols, 32)?);
                x(dev)?.batch_norm(&m, &v, Some(&chan(dev, cols, 33)?), None, 1e-5)
            });
            let half = cols / 2;
            let table =
                move |dev: &Device, seed| Tensor::<T>::rand(&[rows, half], -1.0, 1.0, seed, dev);
            for (name, layout) in [("rope", 0), ("rope_i", 1), ("rope_thd", 2)] {
                self.case(name.into(), d, move |dev| {
                    let (cos, sin) = (table(dev, 23)?, table(dev, 24)?);
                    let shape = match layout {
                        2 => [1, rows, 1, cols],
                        _ => [1, 1, rows, cols],
                    };
                    let x = x(dev)?.reshape(&shape)?;
                    match layout {
                        0 => x.rope(&cos, &sin, 0),
                        1 => x.rope_i(&cos, &sin, 0),
                        _ => x.rope_thd(&cos, &sin, 0),
                    }
                });
            }
            // The decode step's fused ops: norms and the gated unit stored
            // in 8-bit form (on the first multiple of 16 columns: a narrowed
            // view when cols is not one), and RoPE of q and k with the
            // K/V cache writes (`rows` tokens at position 3 of a cache of
            // `rows + 5`, head dim the even part of cols).
            let rnd = move |dev: &Device, shape: &[usize], seed| {
                Tensor::<T>::rand(shape, -1.0, 1.0, seed, dev)
            };
            let c16 = cols / 16 * 16;
            let x16 = move |dev: &Device| x(dev)?.narrow(1, 0, c16);
            let w16 = move |dev: &Device| Tensor::<T>::rand(&[c16], 0.5, 1.5, 21, dev);
            if c16 > 0 {
                self.case_q8("rms_norm_q8".into(), d, move |dev| {
                    x16(dev)?.rms_norm_q8(&w16(dev)?, 1e-5)
                });
                self.case_q8("add_rms_norm_q8".into(), d, move |dev| {
                    let r = y(dev)?.narrow(1, 0, c16)?;
                    Ok(x16(dev)?.add_rms_norm_q8(&r, &w16(dev)?, 1e-5)?.1)
                });
                self.case("add_rms_norm_q8[sum]".into(), d, move |dev| {
                    let r = y(dev)?.narrow(1, 0, c16)?;
                    Ok(x16(dev)?.add_rms_norm_q8(&r, &w16(dev)?, 1e-5)?.0)
                });
            }
            let c32 = cols / 32 * 32;
            if c32 > 0 {
                self.case_q8("glu_halves_q8".into(), d, move |dev| {
                    x(dev)?.narrow(1, 0, c32)?.glu_halves_q8(Activation::Silu)
                });
            }
            let hd = cols / 2 * 2;
            if hd > 0 {
                for (name, mode, part) in [
                    ("rope_into_cache[q]", RopeMode::Halves, 0),
                    ("rope_into_cache[k cache]", RopeMode::Halves, 1),
                    ("rope_i_into_cache[v cache]", RopeMode::Interleaved, 2),
                ] {
                    self.case(name.into(), d, move |dev| {
                        let cap = rows + 5;
                        let (q, k, v) = (
                            rnd(dev, &[1, rows, 4, hd], 51)?,
                            rnd(dev, &[1, rows, 2, hd], 52)?,
                            rnd(dev, &[1, rows, 2, hd], 53)?,
                        );
                        let (cos, sin) =
                            (rnd(dev, &[cap, hd / 2], 54)?, rnd(dev, &[cap, hd / 2], 55)?);
                        let mut kc = rnd(dev, &[1, 2, cap, hd], 56)?;
                        let mut vc = rnd(dev, &[1, 2, cap, hd], 57)?;
                        let q = q.rope_into_cache(&k, &v, &cos, &sin, 3, mode, &mut kc, &mut vc)?;
                        Ok([q, kc, vc][part].clone())
                    });
                }
            }
            // Attention over `cols` keys: GQA decode steps, `rows` causal
            // queries with a window (aligned to the end), and the input as
            // an additive mask with a softcap at head dim 256.
            self.case("attention[decode,gqa]".into(), d, move |dev| {
                let (q, k, v) = (
                    rnd(dev, &[1, 8, 1, 128], 31)?,
                    rnd(dev, &[1, 2, cols, 128], 32)?,
                    rnd(dev, &[1, 2, cols, 128], 33)?,
                );
                q.attention(&k, &v, &ferrocm_ops::AttentionOptions::new().causal())
            });
            // Head dim 64, a decode step: the 8-lane row kernels of the
            // 16-bit types.
            self.case("attention[decode,d64]".into(), d, move |dev| {
                let (q, k, v) = (
                    rnd(dev, &[1, 4, 1, 64], 40)?,
                    rnd(dev, &[1, 2, cols, 64], 41)?,
                    rnd(dev, &[1, 2, cols, 64], 42)?,
                );
                q.attention(&k, &v, &ferrocm_ops::AttentionOptions::new().causal())
            });
            self.case("attention[causal,window]".into(), d, move |dev| {
                let (q, k, v) = (
                    rnd(dev, &[1, 4, rows, 64], 34)?,
                    rnd(dev, &[1, 4, cols, 64], 35)?,
                    rnd(dev, &[1, 4, cols, 64], 36)?,
                );
                q.attention(
                    &k,
                    &v,
                    &ferrocm_ops::AttentionOptions::new().causal().window(100),
                )
            });
            self.case("attention[mask,softcap]".into(), d, move |dev| {
                let (q, k, v) = (
                    rnd(dev, &[1, 2, rows, 256], 37)?,
                    rnd(dev, &[1, 1, cols, 256], 38)?,
                    rnd(dev, &[1, 1, cols, 256], 39)?,
                );
                let m = x(dev)?;
                q.attention(
                    &k,
                    &v,
                    &ferrocm_ops::AttentionOptions::new().mask(&m).softcap(30.0),
                )
            });
        }
        self.case("affine".into(), d, move |dev| {
            x(dev)?.affine(if d.is_float() { 1.5 } else { 3.0 }, 2.0)
        });
        self.case("copy".into(), d, move |dev| x(dev)?.contiguous());
        self.case("fill".into(), d, move |dev| {
            Tensor::<T>::full(T::from_f64(7.0), &[inp.rows, inp.cols], dev)
        });
        self.case("copy2d".into(), d, move |dev| {
            let t = x(dev)?;
            t.copy2d(
                inp.rows.saturating_sub(1),
                inp.cols.saturating_sub(1),
                inp.cols,
                1,
            )
        });
        for &op in Binary::ALL {
            self.case(op.name().into(), d, move |dev| x(dev)?.binary(&y(dev)?, op));
            // Broadcast against one row.
            self.case(format!("{}[bcast]", op.name()), d, move |dev| {
                x(dev)?.binary(&y(dev)?.narrow(0, 0, inp.rows.min(1))?, op)
            });
        }
        for &op in Cmp::ALL {
            self.case(op.name().into(), d, move |dev| x(dev)?.cmp(&y(dev)?, op));
        }
        self.case("where_u8".into(), d, move |dev| {
            inp.make::<u8>(4, 0.0, 2.0, dev)?
                .where_cond(&x(dev)?, &y(dev)?)
        });
        self.case("where_u32".into(), d, move |dev| {
            inp.make::<u32>(5, 0.0, 2.0, dev)?
                .where_cond(&x(dev)?, &y(dev)?)
        });
        self.case("where_i64".into(), d, move |dev| {
            inp.make::<i64>(6, 0.0, 2.0, dev)?
                .where_cond(&x(dev)?, &y(dev)?)
        });
        self.case("cast_f32".into(), d, move |dev| x(dev)?.to_dtype::<f32>());
        self.case("cast_f16".into(), d, move |dev| x(dev)?.to_dtype::<f16>());
        self.case("cast_bf16".into(), d, move |dev| x(dev)?.to_dtype::<bf16>());
        self.case("cast_u8".into(), d, move |dev| x(dev)?.to_dtype::<u8>());
        self.case("cast_u32".into(), d, move |dev| x(dev)?.to_dtype::<u32>());
        self.case("cast_i64".into(), d, move |dev| x(dev)?.to_dtype::<i64>());
        let empty = inp.rows == 0 || inp.cols == 0;
        for &op in Reduce::ALL {
            if op == Reduce::Mean && !d.is_float() {
                continue;
            }
            if empty && matches!(op, Reduce::Max | Reduce::Min) {
                continue;
            }
            for dims in [&[1usize][..], &[0], &[0, 1]] {
                self.case(format!("{}{dims:?}", op.name()), d, move |dev| {
                    x(dev)?.reduce(op, dims, false)
                });
            }
        }
        // Indexing: ids drawn in range (u32, then cast for the other id types).
        let (rows, cols) = (inp.rows, inp.cols);
        let ids = move |n: usize, size: usize, seed: u64, dev: &Device| {
            let n = if size == 0 { 0 } else { n };
            Tensor::<u32>::rand(&[n], 0.0, size as f64, seed, dev)
        };
        self.case("index_select[0]".into(), d, move |dev| {
            x(dev)?.index_select(0, &ids(rows + 2, rows, 7, dev)?)
        });
        self.case("index_select[1]_i64".into(), d, move |dev| {
            x(dev)?.index_select(1, &ids(5, cols, 8, dev)?.to_dtype::<i64>()?)
        });
        self.case("embedding_u8".into(), d, move |dev| {
            let i = ids(6, rows.min(255), 9, dev)?.to_dtype::<u8>()?;
            x(dev)?.embedding(&i.reshape(&[2, i.elem_count() / 2])?)
        });
        self.case("gather[1]".into(), d, move |dev| {
            let k = if cols == 0 { 0 } else { 3 };
            let i = ids(rows * k, cols, 10, dev)?.reshape(&[rows, k])?;
            x(dev)?.gather(1, &i)
        });
        // Scatters into x along dim 1 (ids repeat: the rule for repeats is
        // part of what is checked), index_add along dim 0 with i64 ids.
        for add in [false, true] {
            let name = if add { "scatter_add[1]" } else { "scatter[1]" };
            self.case(name.into(), d, move |dev| {
                let k = if cols == 0 { 0 } else { 3 };
                let i = ids(rows * k, cols, 11, dev)?.reshape(&[rows, k])?;
                let src = x(dev)?.narrow(1, 0, k.min(cols))?;
                let i = i.narrow(1, 0, k.min(cols))?;
                if add {
                    x(dev)?.scatter_add(1, &i, &src)
                } else {
                    x(dev)?.scatter(1, &i, &src)
                }
            });
        }
        self.case("index_add[0]_i64".into(), d, move |dev| {
            let i = ids(rows + 3, rows, 12, dev)?.to_dtype::<i64>()?;
            let src = x(dev)?.index_select(0, &ids(i.elem_count(), rows, 13, dev)?)?;
            x(dev)?.index_add(0, &i, &src)
        });
        self.case("slice_set".into(), d, move |dev| {
            let mut t = Tensor::<T>::zeros(&[rows, cols + 4], dev)?;
            t.slice_set(&x(dev)?, 1, 3)?;
            Ok(t)
        });
        for desc in [false, true] {
            self.case(format!("sort[desc={desc}]"), d, move |dev| {
                Ok(x(dev)?.sort(desc)?.0)
            });
            self.case(format!("argsort[desc={desc}]"), d, move |dev| {
                x(dev)?.argsort(desc)
            });
        }
        if cols >= 5 {
            self.case("topk[5]".into(), d, move |dev| Ok(x(dev)?.topk(5, true)?.0));
            self.case("topk[5]_idx".into(), d, move |dev| {
                Ok(x(dev)?.topk(5, true)?.1)
            });
            self.case("bottomk[5]_idx".into(), d, move |dev| {
                Ok(x(dev)?.topk(5, false)?.1)
            });
        }
        if !empty {
            for dims in [&[1usize][..], &[0], &[0, 1]] {
                self.case(format!("argmax{dims:?}"), d, move |dev| {
                    x(dev)?.argmax(dims, false)
                });
                self.case(format!("argmin{dims:?}"), d, move |dev| {
                    x(dev)?.argmin(dims, true)
                });
            }
        }
    }
}

/// Block bytes for `format` whose scales are finite and below 2 in
/// magnitude: bit 6 of every byte is cleared, which caps the exponent of any
/// f16 or f32 read from them (MXFP4's exponent byte is set near 1.0).
pub(crate) fn finite_blocks(format: QuantFormat, blocks: usize, seed: u64) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut bytes: Vec<u8> = (0..blocks * format.block_bytes())
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8 & !0x40
        })
        .collect();
    if format == QuantFormat::Mxfp4 {
        for b in bytes.chunks_mut(format.block_bytes()) {
            b[0] = 124 + b[0] % 8;
        }
    }
    bytes
}

impl Runner<'_> {
    /// Every quantized format: dequantize to f32, f16 and bf16, the
    /// embedding lookup (7 ids with repeats) to f32, and the
    /// linear layer with 1, 3 and 8 rows of f32 and bf16 activations (the
    /// matrix-vector kernels taking 1, 4 with one repeated, and 8 rows of x
    /// per pass), on `[37, 512]` weights.
    fn quant(&mut self) {
        let (n, k) = (37usize, 512usize);
        for (i, format) in QuantFormat::ALL.into_iter().enumerate() {
            let bytes = finite_blocks(format, n * k / format.block_elems(), i as u64 + 1);
            let w = move |dev: &Device| QTensor::from_bytes(&bytes, format, &[n, k], dev);
            let w2 = w.clone();
            self.case(format!("dequantize[{format}]"), DType::F32, move |dev| {
                w2(dev)?.dequantize::<f32>()
            });
            let w2 = w.clone();
            self.case(format!("dequantize[{format}]"), DType::F16, move |dev| {
                w2(dev)?.dequantize::<f16>()
            });
            let w2 = w.clone();
            self.case(format!("dequantize[{format}]"), DType::BF16, move |dev| {
                w2(dev)?.dequantize::<bf16>()
            });
            let w2 = w.clone();
            self.case(format!("qembedding[{format}]"), DType::F32, move |dev| {
                let ids = [36u32, 0, 5, 5, 17, 36, 2];
                w2(dev)?.embedding::<f32, u32>(&Tensor::from_slice(&ids, &[7], dev)?)
            });
            for m in [1usize, 3, 8] {
                let w2 = w.clone();
                self.case_scaled(
                    format!("qlinear[{format}, m={m}]"),
                    DType::F32,
                    true,
                    move |dev| w2(dev)?.forward(&Tensor::<f32>::rand(&[m, k], -3.0, 3.0, 7, dev)?),
                );
                let w2 = w.clone();
                self.case_scaled(
                    format!("qlinear_q8[{format}, m={m}]"),
                    DType::F32,
                    true,
                    move |dev| {
                        let x = Tensor::<f32>::rand(&[m, k], -3.0, 3.0, 7, dev)?;
                        w2(dev)?.forward_q8::<f32>(&Q8Activations::quantize(&x)?)
                    },
                );
                let w2 = w.clone();
                self.case_scaled(
                    format!("qlinear[{format}, m={m}]"),
                    DType::BF16,
                    true,
                    move |dev| w2(dev)?.forward(&Tensor::<bf16>::rand(&[m, k], -3.0, 3.0, 7, dev)?),
                );
            }
        }
    }
}

/// Runs every op × dtype with inputs of `[rows, cols]` in `layout` on `device`.
pub fn run(device: &Device, inputs: Inputs) -> Vec<CaseResult> {
    let mut r = Runner {
        device,
        inputs,
        results: Vec::new(),
    };
    r.dtype::<f32>();
    r.dtype::<f16>();
    r.dtype::<bf16>();
    r.dtype::<u8>();
    r.dtype::<u32>();
    r.dtype::<i64>();
    r.results
}

/// The `ferrocm check` set: `[37, 300]` contiguous (odd rows, rows longer than
/// a workgroup), a transposed `[13, 1031]` (prime sizes, strided input), and
/// every quantized format on a `[37, 512]` weight.
///
/// ```no_run
/// use ferrocm_ops::{Device, WaveSize};
/// let results = ferrocm_cli::check::run_default(&Device::emulator(WaveSize::Wave64));
/// assert!(results.iter().all(|r| r.passed));
/// ```
pub fn run_default(device: &Device) -> Vec<CaseResult> {
    let mut v = run(
        device,
        Inputs {
            rows: 37,
            cols: 300,
            layout: InputLayout::Contiguous,
        },
    );
    v.extend(run(
        device,
        Inputs {
            rows: 13,
            cols: 1031,
            layout: InputLayout::Transposed,
        },
    ));
    let mut r = Runner {
        device,
        inputs: Inputs {
            rows: 37,
            cols: 512,
            layout: InputLayout::Contiguous,
        },
        results: Vec::new(),
    };
    r.quant();
    v.extend(r.results);
    v
}

/// The results as one JSON array of `{op, dtype, device, layout, max_abs_err,
/// max_rel_err, passed, error}` (errors that are not finite are `null`).
pub fn to_json(results: &[CaseResult]) -> String {
    let num = |v: f64| {
        if v.is_finite() {
            serde_json::json!(v)
        } else {
            serde_json::Value::Null
        }
    };
    let items: Vec<serde_json::Value> = results
        .iter()
        .map(|r| {
            serde_json::json!({
                "op": r.op,
                "dtype": r.dtype.as_str(),
                "device": r.device,
                "layout": r.layout,
                "max_abs_err": num(r.max_abs_err),
                "max_rel_err": num(r.max_rel_err),
                "passed": r.passed,
                "error": r.error,
            })
        })
        .collect();
    serde_json::Value::Array(items).to_string()
}
