//! `ferrocm bench`: every kernel family timed on one device at fixed sizes,
//! as a share of that device's copy bandwidth measured in the same run, and
//! against the Cpu backend on the same machine.
//!
//! Times are GPU-event times ([`Device::time`]; the host clock on the host
//! devices) per op call: the best of five rounds of `reps` calls queued back
//! to back, after a warm-up (the method of the PyTorch anchors). The
//! bytes counted are the fewest an op must move: each input read once, each
//! output written once. The floor is that over the copy bandwidth, measured
//! here as a device-to-device copy of the largest input (bytes read plus
//! written).

use ferrocm_ops::{Device, Result, Tensor, bf16};

/// One timed op.
#[derive(Clone, Debug)]
pub struct BenchRow {
    /// Op and dtype, e.g. `softmax f32`.
    pub op: String,
    /// Input shape.
    pub shape: Vec<usize>,
    /// Bytes the op must move (inputs read once, outputs written once).
    pub bytes: u64,
    /// Device time per call in milliseconds (see the module docs).
    pub ms: f64,
    /// Bytes per second over that time, in GB/s.
    pub gbps: f64,
    /// `gbps` as a percentage of the copy bandwidth measured in the same run.
    pub pct_of_copy: f64,
    /// The Cpu backend's time for the same op, when measured.
    pub cpu_ms: Option<f64>,
    /// Why the op could not be timed (the other rows are still measured).
    pub error: Option<String>,
    /// Floating-point operations per call, for the matrix products (their
    /// rate is reported as TFLOP/s).
    pub flops: Option<u64>,
}

/// What one `ferrocm bench` run measured.
#[derive(Clone, Debug)]
pub struct BenchReport {
    /// The device timed.
    pub device: String,
    /// Device-to-device copy bandwidth (read + written), GB/s.
    pub copy_gbps: f64,
    /// One row per op and size.
    pub rows: Vec<BenchRow>,
}

/// Settings of a run.
#[derive(Clone, Copy, Debug)]
pub struct BenchConfig {
    /// Rows x cols of the large inputs (the anchors table uses 16384 x 4096).
    pub rows: usize,
    /// Columns.
    pub cols: usize,
    /// Timed repetitions per op (queued back to back; the best of five rounds' averages is reported).
    pub reps: usize,
    /// Also time the Cpu backend on the same ops (one run each).
    pub compare_cpu: bool,
    /// Only this family's rows (all when `None`).
    pub only: Option<BenchFamily>,
}

/// A group of bench rows ([`BenchConfig::only`]).
///
/// ```
/// use ferrocm_cli::bench::BenchFamily;
/// assert_eq!(BenchFamily::parse("attention"), Some(BenchFamily::Attention));
/// assert_eq!(BenchFamily::parse("conv"), Some(BenchFamily::Conv));
/// assert_eq!(BenchFamily::parse("pool"), None);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BenchFamily {
    /// Fill, copy, cast, unary, binary, where, reductions, softmax, transpose.
    Elementwise,
    /// Embedding, argsort, topk, sort.
    Indexing,
    /// RMSNorm, LayerNorm, RoPE, SwiGLU.
    Layer,
    /// GEMV, GEMM, linear.
    Matmul,
    /// Attention decode and prefill.
    Attention,
    /// Quantized weights: the linear layer at 1 and 8 rows and dequantize,
    /// every format.
    Quant,
    /// Convolution: ResNet and Stable-Diffusion shapes, depthwise.
    Conv,
    /// A Llama model of random weights: prefill 512 tokens, then decode
    /// (Llama-7B shapes on a GPU, one block of them on the Cpu, a tiny model
    /// in the emulator). Only with `--only model`: it takes minutes.
    Model,
}

impl BenchFamily {
    /// Every family's name, as [`BenchFamily::parse`] takes it.
    pub const NAMES: [&str; 8] = [
        "elementwise",
        "indexing",
        "layer",
        "matmul",
        "attention",
        "quant",
        "conv",
        "model",
    ];

    /// The family named `name` (one of [`BenchFamily::NAMES`]).
    pub fn parse(name: &str) -> Option<Self> {
        let all = [
            Self::Elementwise,
            Self::Indexing,
            Self::Layer,
            Self::Matmul,
            Self::Attention,
            Self::Quant,
            Self::Conv,
            Self::Model,
        ];
        Self::NAMES.iter().position(|&n| n == name).map(|i| all[i])
    }
}

impl Default for BenchConfig {
    fn default() -> Self {
        Self {
            rows: 16384,
            cols: 4096,
            reps: 20,
            compare_cpu: true,
            only: None,
        }
    }
}

/// Milliseconds per call of `f` on `dev`: after two warm-ups, the best of
/// five rounds, each the average of `reps` calls queued back to back in one
/// timed region (as the PyTorch anchors in `notes/gpu-anchors.md` were
/// taken: the host's launch work overlaps the device's, as in a model).
fn time_op(dev: &Device, reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    for _ in 0..2 {
        f()?;
    }
    dev.synchronize()?;
    let reps = reps.max(1);
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let mut err = None;
        let ms = dev.time(|| {
            for _ in 0..reps {
                if let Err(e) = f() {
                    err = Some(e);
                    break;
                }
            }
            Ok(())
        })?;
        if let Some(e) = err {
            return Err(e);
        }
        best = best.min(ms as f64 / reps as f64);
    }
    Ok(best)
}

/// The ops and their byte counts, run on whatever device the inputs are on.
struct Inputs {
    x: Tensor<f32>,
    y: Tensor<f32>,
    xb: Tensor<bf16>,
    yb: Tensor<bf16>,
    mask: Tensor<u8>,
}

impl Inputs {
    fn new(rows: usize, cols: usize, dev: &Device) -> Result<Self> {
        Ok(Self {
            x: Tensor::<f32>::randn(&[rows, cols], 0.0, 1.0, 1, dev)?,
            y: Tensor::<f32>::randn(&[rows, cols], 0.0, 1.0, 2, dev)?,
            xb: Tensor::<f32>::randn(&[rows, cols], 0.0, 1.0, 3, dev)?.to_dtype::<bf16>()?,
            yb: Tensor::<f32>::randn(&[rows, cols], 0.0, 1.0, 5, dev)?.to_dtype::<bf16>()?,
            mask: Tensor::<u8>::rand(&[rows, cols], 0.0, 2.0, 4, dev)?,
        })
    }
}

type OpFn = fn(&Inputs) -> Result<()>;

/// (name, bytes per element of the [rows, cols] input moved, op).
fn ops() -> Vec<(&'static str, f64, OpFn)> {
    vec![
        ("fill f32", 4.0, |i| {
            Tensor::<f32>::full(1.5, i.x.shape(), i.x.device()).map(drop)
        }),
        ("copy f32", 8.0, |i| i.x.copy().map(drop)),
        ("cast f32->bf16", 6.0, |i| i.x.to_dtype::<bf16>().map(drop)),
        ("cast bf16->f32", 6.0, |i| i.xb.to_dtype::<f32>().map(drop)),
        ("affine f32", 8.0, |i| i.x.affine(2.0, 1.0).map(drop)),
        ("exp f32", 8.0, |i| i.x.exp().map(drop)),
        ("gelu f32", 8.0, |i| i.x.gelu().map(drop)),
        ("exp bf16", 4.0, |i| i.xb.exp().map(drop)),
        ("gelu bf16", 4.0, |i| i.xb.gelu().map(drop)),
        ("copy bf16", 4.0, |i| i.xb.copy().map(drop)),
        ("add f32", 12.0, |i| i.x.add(&i.y).map(drop)),
        ("mul f32", 12.0, |i| i.x.mul(&i.y).map(drop)),
        ("add bf16", 6.0, |i| i.xb.add(&i.yb).map(drop)),
        ("where f32", 13.0, |i| {
            i.mask.where_cond(&i.x, &i.y).map(drop)
        }),
        ("where bf16", 7.0, |i| {
            i.mask.where_cond(&i.xb, &i.yb).map(drop)
        }),
        ("sum last dim f32", 4.0, |i| i.x.sum(&[1], false).map(drop)),
        ("sum first dim f32", 4.0, |i| i.x.sum(&[0], false).map(drop)),
        ("max last dim f32", 4.0, |i| i.x.max(&[1], false).map(drop)),
        ("argmax last dim f32", 4.0, |i| {
            i.x.argmax(&[1], false).map(drop)
        }),
        ("sum last dim bf16", 2.0, |i| {
            i.xb.sum(&[1], false).map(drop)
        }),
        ("max last dim bf16", 2.0, |i| {
            i.xb.max(&[1], false).map(drop)
        }),
        ("argmax last dim bf16", 2.0, |i| {
            i.xb.argmax(&[1], false).map(drop)
        }),
        ("softmax f32", 8.0, |i| i.x.softmax().map(drop)),
        ("log_softmax f32", 8.0, |i| i.x.log_softmax().map(drop)),
        ("softmax bf16", 4.0, |i| i.xb.softmax().map(drop)),
        ("log_softmax bf16", 4.0, |i| i.xb.log_softmax().map(drop)),
        ("transpose+contiguous f32", 8.0, |i| {
            i.x.transpose(0, 1)?.contiguous().map(drop)
        }),
    ]
}

/// Times every op family on `dev` (and, with `compare_cpu`, on the Cpu).
///
/// ```no_run
/// # use ferrocm_ops::WaveSize;
/// use ferrocm_ops::Device;
/// use ferrocm_cli::bench;
/// let cfg = bench::BenchConfig { rows: 256, cols: 256, reps: 3, compare_cpu: false, only: None };
/// let report = bench::run(&Device::emulator(WaveSize::Wave32), cfg).unwrap();
/// assert!(report.rows.iter().all(|r| r.ms > 0.0));
/// ```
///
/// # Errors
/// The first op that fails on `dev` (allocation, a launch, a fault), as its
/// [`ferrocm_ops::Error`].
pub fn run(dev: &Device, cfg: BenchConfig) -> Result<BenchReport> {
    let elems = (cfg.rows * cfg.cols) as u64;
    let model_only = cfg.only == Some(BenchFamily::Model);
    // Copy bandwidth: a device-to-device copy of one f32 input (256 MiB for
    // the model rows, whose weights are far past any cache).
    let copy_elems = if model_only { 1 << 26 } else { elems };
    let src = dev.alloc_zeroed::<f32>(copy_elems as usize)?;
    let mut dst = dev.alloc::<f32>(copy_elems as usize)?;
    let copy_ms = time_op(dev, cfg.reps, || Ok(dst.copy_from(&src)?))?;
    drop((src, dst));
    let copy_gbps = (2 * copy_elems * 4) as f64 / (copy_ms * 1e-3) / 1e9;

    let wants = |f: BenchFamily| cfg.only.is_none_or(|o| o == f);
    let mut rows = Vec::new();
    if wants(BenchFamily::Elementwise) {
        let inputs = Inputs::new(cfg.rows, cfg.cols, dev)?;
        let cpu_inputs = if cfg.compare_cpu && dev.runs_kernels() {
            Some(Inputs::new(cfg.rows, cfg.cols, &Device::Cpu)?)
        } else {
            None
        };
        rows.extend(elementwise_rows(
            dev,
            cfg,
            copy_gbps,
            &inputs,
            cpu_inputs.as_ref(),
        )?);
    }
    if wants(BenchFamily::Indexing) {
        rows.extend(llm_rows(dev, cfg, copy_gbps)?);
    }
    if wants(BenchFamily::Layer) {
        rows.extend(layer_rows(dev, cfg, copy_gbps)?);
    }
    if wants(BenchFamily::Matmul) {
        rows.extend(matmul_rows(dev, cfg, copy_gbps)?);
    }
    if wants(BenchFamily::Attention) {
        rows.extend(attention_rows(dev, cfg, copy_gbps)?);
    }
    if wants(BenchFamily::Quant) {
        rows.extend(quant_rows(dev, cfg, copy_gbps)?);
    }
    if wants(BenchFamily::Conv) {
        rows.extend(conv_rows(dev, cfg, copy_gbps)?);
    }
    if model_only {
        rows.extend(model_rows(dev, copy_gbps));
    }
    Ok(BenchReport {
        device: dev.to_string(),
        copy_gbps,
        rows,
    })
}

/// The elementwise rows over `inputs` (`rows x cols`).
fn elementwise_rows(
    dev: &Device,
    cfg: BenchConfig,
    copy_gbps: f64,
    inputs: &Inputs,
    cpu_inputs: Option<&Inputs>,
) -> Result<Vec<BenchRow>> {
    let elems = (cfg.rows * cfg.cols) as u64;
    let mut rows = Vec::new();
    for (name, bytes_per_elem, op) in ops() {
        let bytes = (bytes_per_elem * elems as f64) as u64;
        let shape = vec![cfg.rows, cfg.cols];
        let timed = Timed {
            dev,
            reps: cfg.reps,
            copy_gbps,
        };
        rows.push(timed.row(name, shape, bytes, inputs, cpu_inputs, op)?);
    }
    Ok(rows)
}

/// Times rows on one device against its copy bandwidth.
struct Timed<'a> {
    dev: &'a Device,
    reps: usize,
    copy_gbps: f64,
}

impl Timed<'_> {
    /// One row: `op` on `inputs` (an error is the row's, not the run's), and
    /// on the Cpu's inputs when given.
    fn row<I>(
        &self,
        name: &str,
        shape: Vec<usize>,
        bytes: u64,
        inputs: &I,
        cpu_inputs: Option<&I>,
        op: fn(&I) -> Result<()>,
    ) -> Result<BenchRow> {
        let (ms, error) = match time_op(self.dev, self.reps, || op(inputs)) {
            Ok(ms) => (ms, None),
            Err(e) => (f64::NAN, Some(e.to_string())),
        };
        let cpu_ms = match cpu_inputs {
            Some(ci) if error.is_none() => Some(time_op(&Device::Cpu, 1, || op(ci))?),
            _ => None,
        };
        let gbps = bytes as f64 / (ms * 1e-3) / 1e9;
        Ok(BenchRow {
            op: name.into(),
            shape,
            bytes,
            ms,
            gbps,
            pct_of_copy: 100.0 * gbps / self.copy_gbps,
            cpu_ms,
            error,
            flops: None,
        })
    }
}

/// The indexing and sorting an LLM worker does, at the sizes of one (for the
/// default 16384 x 4096 config; smaller configs scale them down): the
/// embedding of 4096 ids in a 32000 x 4096 bf16 table, argsort of 4096 x
/// 32000 f32, top-50 of 32 x 128000 f32 and a full sort of the same rows.
fn llm_rows(dev: &Device, cfg: BenchConfig, copy_gbps: f64) -> Result<Vec<BenchRow>> {
    let hidden = cfg.cols;
    let vocab = (8 * cfg.cols).min(32000);
    let batch = cfg.rows.min(4096);
    let wide = (32 * cfg.cols).min(128_000);
    let build = |d: &Device| -> Result<_> {
        Ok((
            Tensor::<bf16>::randn(&[vocab, hidden], 0.0, 1.0, 5, d)?,
            Tensor::<u32>::rand(&[batch], 0.0, vocab as f64, 6, d)?,
            Tensor::<f32>::randn(&[batch, vocab], 0.0, 1.0, 7, d)?,
            Tensor::<f32>::randn(&[32, wide], 0.0, 1.0, 8, d)?,
        ))
    };
    type Llm = (Tensor<bf16>, Tensor<u32>, Tensor<f32>, Tensor<f32>);
    type LlmOp = fn(&Llm) -> Result<()>;
    let ops: [(&str, [usize; 2], u64, LlmOp); 4] = [
        (
            "embedding bf16",
            [batch, hidden],
            (2 * batch * hidden * 2) as u64,
            |i| i.0.embedding(&i.1).map(drop),
        ),
        (
            "argsort f32",
            [batch, vocab],
            (batch * vocab * 8) as u64,
            |i| i.2.argsort(true).map(drop),
        ),
        ("topk50 f32", [32, wide], (32 * wide * 4) as u64, |i| {
            i.3.topk(50, true).map(drop)
        }),
        ("sort f32", [32, wide], (32 * wide * 12) as u64, |i| {
            i.3.sort(true).map(drop)
        }),
    ];
    let inputs = build(dev)?;
    let cpu_inputs = match cfg.compare_cpu && dev.runs_kernels() {
        true => Some(build(&Device::Cpu)?),
        false => None,
    };
    let timed = Timed {
        dev,
        reps: cfg.reps,
        copy_gbps,
    };
    let mut rows = Vec::new();
    for (name, shape, bytes, op) in ops {
        rows.push(timed.row(
            name,
            shape.to_vec(),
            bytes,
            &inputs,
            cpu_inputs.as_ref(),
            op,
        )?);
    }
    Ok(rows)
}

/// The per-token ops of a transformer layer at Llama sizes (for the default
/// config; smaller configs scale them down): RMSNorm and its fused residual
/// add over 16384 x 4096 (the PyTorch anchors' size), LayerNorm, RoPE on q of (1, 32, 2048, 128) with a
/// (2048, 64) table, SwiGLU on 4096 x 14336. Bytes: every input read once
/// (weights and tables included), every output written once.
fn layer_rows(dev: &Device, cfg: BenchConfig, copy_gbps: f64) -> Result<Vec<BenchRow>> {
    let h = cfg.cols.min(4096);
    // The norms at the size of the PyTorch anchors (16384 x 4096 by
    // default); SwiGLU over 4096 tokens.
    let rows = cfg.rows;
    let tokens = cfg.rows.min(4096);
    let ffn = h * 7 / 2;
    let (heads, seq, hd) = (32.min(h / 128).max(1), tokens.min(2048), 128.min(h));
    let build = |d: &Device| -> Result<_> {
        let f = |shape: &[usize], seed| Tensor::<f32>::randn(shape, 0.0, 1.0, seed, d);
        let q = f(&[1, heads, seq, hd], 34)?;
        let angles = f(&[seq, hd / 2], 35)?;
        Ok((
            f(&[rows, h], 30)?,
            f(&[rows, h], 31)?,
            f(&[h], 32)?,
            (
                q.to_dtype::<bf16>()?,
                angles.cos()?.to_dtype::<bf16>()?,
                angles.sin()?.to_dtype::<bf16>()?,
            ),
            (
                f(&[tokens, ffn], 36)?.to_dtype::<bf16>()?,
                f(&[tokens, ffn], 37)?.to_dtype::<bf16>()?,
            ),
            (q, angles.cos()?, angles.sin()?),
            (
                f(&[rows, h], 30)?.to_dtype::<bf16>()?,
                f(&[rows, h], 31)?.to_dtype::<bf16>()?,
                f(&[h], 32)?.to_dtype::<bf16>()?,
            ),
        ))
    };
    type Bf = Tensor<bf16>;
    type F = Tensor<f32>;
    type Layer = (F, F, F, (Bf, Bf, Bf), (Bf, Bf), (F, F, F), (Bf, Bf, Bf));
    type LayerOp = fn(&Layer) -> Result<()>;
    let n = rows * h;
    let (q, table) = (heads * seq * hd, seq * hd / 2);
    let ops: Vec<(&str, Vec<usize>, u64, LayerOp)> = vec![
        // The copy kernel at the sizes below: the rope's 34 MB pay a
        // launch's fixed cost that the 268 MB copy the percentages are of
        // does not.
        (
            "copy bf16 (norm size)",
            vec![rows, h],
            (4 * n) as u64,
            |i| i.6.0.copy().map(drop),
        ),
        (
            "copy bf16 (rope size)",
            vec![1, heads, seq, hd],
            (4 * q) as u64,
            |i| i.3.0.copy().map(drop),
        ),
        ("rms_norm f32", vec![rows, h], (8 * n + 4 * h) as u64, |i| {
            i.0.rms_norm(&i.2, 1e-5).map(drop)
        }),
        (
            "rms_norm bf16",
            vec![rows, h],
            (4 * n + 2 * h) as u64,
            |i| i.6.0.rms_norm(&i.6.2, 1e-5).map(drop),
        ),
        (
            "add_rms_norm bf16",
            vec![rows, h],
            (8 * n + 2 * h) as u64,
            |i| i.6.0.add_rms_norm(&i.6.1, &i.6.2, 1e-5).map(drop),
        ),
        (
            "add_rms_norm f32",
            vec![rows, h],
            (16 * n + 4 * h) as u64,
            |i| i.0.add_rms_norm(&i.1, &i.2, 1e-5).map(drop),
        ),
        (
            "layer_norm f32",
            vec![rows, h],
            (8 * n + 8 * h) as u64,
            |i| i.0.layer_norm(&i.2, Some(&i.2), 1e-5).map(drop),
        ),
        (
            "rope bf16",
            vec![1, heads, seq, hd],
            (4 * q + 4 * table) as u64,
            |i| i.3.0.rope(&i.3.1, &i.3.2, 0).map(drop),
        ),
        (
            "rope_i bf16",
            vec![1, heads, seq, hd],
            (4 * q + 4 * table) as u64,
            |i| i.3.0.rope_i(&i.3.1, &i.3.2, 0).map(drop),
        ),
        (
            "rope f32",
            vec![1, heads, seq, hd],
            (8 * q + 8 * table) as u64,
            |i| i.5.0.rope(&i.5.1, &i.5.2, 0).map(drop),
        ),
        (
            "swiglu bf16",
            vec![tokens, ffn],
            (6 * tokens * ffn) as u64,
            |i| i.4.0.swiglu(&i.4.1).map(drop),
        ),
    ];
    let inputs = build(dev)?;
    let cpu_inputs = match cfg.compare_cpu && dev.runs_kernels() {
        true => Some(build(&Device::Cpu)?),
        false => None,
    };
    let timed = Timed {
        dev,
        reps: cfg.reps,
        copy_gbps,
    };
    let mut out = Vec::new();
    for (name, shape, bytes, op) in ops {
        out.push(timed.row(name, shape, bytes, &inputs, cpu_inputs.as_ref(), op)?);
    }
    Ok(out)
}

/// The matrix products of an LLM at its sizes (for the default config; smaller
/// configs scale them down): GEMV of a 14336 x 4096 bf16 weight (an FFN
/// projection at decode; bytes = the weight's), a 4096 x 4096 f32 matvec,
/// GEMM of 4096^3 bf16 and 1024^3 f32, and a linear layer with bias + silu
/// over 512 tokens. Bytes count each operand once; `flops` is 2mnk. On a
/// GPU the GEMMs are timed twice: as the op runs them (the vendor BLAS where
/// it loads) and with ferrocm's kernel (`(kernel)` rows).
fn matmul_rows(dev: &Device, cfg: BenchConfig, copy_gbps: f64) -> Result<Vec<BenchRow>> {
    use ferrocm_ops::Activation;
    let h = cfg.cols.min(4096);
    let ffn = h * 7 / 2;
    let big = h;
    let small = (h / 4).max(1);
    let tokens = (h / 8).max(1);
    let build = |d: &Device| -> Result<_> {
        let f = |shape: &[usize], seed| Tensor::<f32>::randn(shape, 0.0, 1.0, seed, d);
        Ok((
            f(&[ffn, h], 20)?.to_dtype::<bf16>()?,
            f(&[1, h], 21)?.to_dtype::<bf16>()?,
            f(&[h, h], 22)?,
            f(&[h], 23)?,
            f(&[big, big], 24)?.to_dtype::<bf16>()?,
            f(&[small, small], 25)?,
            f(&[tokens, h], 26)?.to_dtype::<bf16>()?,
            f(&[h], 27)?.to_dtype::<bf16>()?,
        ))
    };
    type Mm = (
        Tensor<bf16>,
        Tensor<bf16>,
        Tensor<f32>,
        Tensor<f32>,
        Tensor<bf16>,
        Tensor<f32>,
        Tensor<bf16>,
        Tensor<bf16>,
    );
    type MmOp = fn(&Mm) -> Result<()>;
    let mnk = |m: usize, n: usize, k: usize| (2 * m * n * k) as u64;
    let ops: [(&str, [usize; 2], u64, u64, MmOp); 5] = [
        (
            "gemv bf16 (weight bytes)",
            [ffn, h],
            (ffn * h * 2) as u64,
            mnk(1, ffn, h),
            |i| i.1.linear(&i.0, None, None).map(drop),
        ),
        (
            "matvec f32 (weight bytes)",
            [h, h],
            (h * h * 4) as u64,
            mnk(h, 1, h),
            |i| i.2.matvec(&i.3).map(drop),
        ),
        (
            "gemm bf16",
            [big, big],
            (3 * big * big * 2) as u64,
            mnk(big, big, big),
            |i| i.4.matmul(&i.4).map(drop),
        ),
        (
            "gemm f32",
            [small, small],
            (3 * small * small * 4) as u64,
            mnk(small, small, small),
            |i| i.5.matmul(&i.5).map(drop),
        ),
        (
            "linear+bias+silu bf16",
            [tokens, h],
            ((tokens * h * 2 + h * h) * 2) as u64,
            mnk(tokens, h, h),
            |i| {
                i.6.linear(
                    &i.4.narrow(0, 0, i.7.elem_count())?,
                    Some(&i.7),
                    Some(Activation::Silu),
                )
                .map(drop)
            },
        ),
    ];
    let inputs = build(dev)?;
    let cpu_inputs = match cfg.compare_cpu && dev.runs_kernels() {
        true => Some(build(&Device::Cpu)?),
        false => None,
    };
    let timed = Timed {
        dev,
        reps: cfg.reps,
        copy_gbps,
    };
    let mut rows = Vec::new();
    for (name, shape, bytes, flops, op) in ops {
        let mut row = timed.row(
            name,
            shape.to_vec(),
            bytes,
            &inputs,
            cpu_inputs.as_ref(),
            op,
        )?;
        row.flops = Some(flops);
        rows.push(row);
        if dev.is_gpu() && name.starts_with("gemm") {
            // The GEMMs above ran the vendor BLAS where it loaded: ours too,
            // in the same run, to compare.
            ferrocm_ops::matmul::set_vendor_blas(false);
            let kernel = timed.row(
                &format!("{name} (kernel)"),
                shape.to_vec(),
                bytes,
                &inputs,
                None,
                op,
            );
            ferrocm_ops::matmul::set_vendor_blas(true);
            let mut kernel = kernel?;
            kernel.flops = Some(flops);
            rows.push(kernel);
        }
    }
    Ok(rows)
}

/// The convolutions of issue 31's list (in TFLOP/s, with the Cpu time):
/// conv2d `(1, 64, 56, 56)` 3x3 64->64, the ResNet stem `(1, 3, 224, 224)`
/// 7x7 stride 2 -> 64, `(32, 256, 14, 14)` 3x3 256->256, a depthwise 3x3 on
/// `(8, 512, 28, 28)` and a Stable-Diffusion `(2, 320, 64, 64)` 3x3 320->320
/// (f32 and bf16), padding keeping the size. Configs smaller than the
/// default (the emulator's) divide channels and sizes by 8.
fn conv_rows(dev: &Device, cfg: BenchConfig, copy_gbps: f64) -> Result<Vec<BenchRow>> {
    use ferrocm_ops::conv::ConvOptions;
    let div = if cfg.cols < 4096 { 8 } else { 1 };
    let c = |v: usize| (v / div).max(1);
    // (name, batch, cin, cout, size, kernel, stride, groups)
    let shapes = [
        ("conv2d 3x3 64->64 f32", 1, 64, 64, 56, 3, 1, 1),
        ("conv2d 3x3 64->64 bf16", 1, 64, 64, 56, 3, 1, 1),
        ("conv2d stem 7x7/2 3->64 f32", 1, 3, 64, 224, 7, 2, 1),
        ("conv2d 3x3 256->256 b32 f32", 32, 256, 256, 14, 3, 1, 1),
        ("conv2d 3x3 256->256 b32 bf16", 32, 256, 256, 14, 3, 1, 1),
        (
            "conv2d depthwise 3x3 512 b8 f32",
            8,
            512,
            512,
            28,
            3,
            1,
            512,
        ),
        ("conv2d sd 3x3 320->320 b2 f32", 2, 320, 320, 64, 3, 1, 1),
        ("conv2d sd 3x3 320->320 b2 bf16", 2, 320, 320, 64, 3, 1, 1),
        (
            "conv2d sd 3x3 320->320 b2 bf16 nhwc",
            2,
            320,
            320,
            64,
            3,
            1,
            1,
        ),
    ];
    type Conv = (Tensor<f32>, Tensor<f32>, Tensor<f32>, ConvOptions);
    let mut rows = Vec::new();
    let timed = Timed {
        dev,
        reps: cfg.reps,
        copy_gbps,
    };
    for (name, n, cin, cout, size, k, stride, groups) in shapes {
        let (cin, cout, groups) = (c(cin), c(cout), c(groups));
        let (size, k) = ((size / div).max(k), k);
        let opts = ConvOptions::new()
            .stride(&[stride])
            .padding(&[k / 2])
            .groups(groups);
        let nhwc = name.ends_with("nhwc");
        let build = |d: &Device| -> Result<Conv> {
            let x = if nhwc {
                // Channels-last memory, seen as (N, C, H, W).
                Tensor::randn(&[n, size, size, cin], 0.0, 1.0, 40, d)?.permute(&[0, 3, 1, 2])?
            } else {
                Tensor::randn(&[n, cin, size, size], 0.0, 1.0, 40, d)?
            };
            Ok((
                x,
                Tensor::randn(&[cout, cin / groups, k, k], 0.0, 0.1, 41, d)?,
                Tensor::randn(&[cout], 0.0, 0.1, 42, d)?,
                opts.clone(),
            ))
        };
        let out = (size + 2 * (k / 2) - k) / stride + 1;
        let bf16_row = name.contains("bf16");
        let elem = if bf16_row { 2 } else { 4 };
        let bytes = ((n * cin * size * size + cout * cin / groups * k * k + n * cout * out * out)
            * elem) as u64;
        let flops = (2 * n * cout * out * out * (cin / groups) * k * k) as u64;
        let inputs = build(dev)?;
        let cpu_inputs = match cfg.compare_cpu && dev.runs_kernels() {
            true => Some(build(&Device::Cpu)?),
            false => None,
        };
        let shape = vec![n, cin, size, size];
        let one_row = |name: &str| -> Result<BenchRow> {
            let mut row = if bf16_row {
                let cast = |i: &Conv| -> Result<_> {
                    // Cast in memory order, so channels-last stays so.
                    let x = match nhwc {
                        true => {
                            i.0.permute(&[0, 2, 3, 1])?
                                .to_dtype::<bf16>()?
                                .permute(&[0, 3, 1, 2])?
                        }
                        false => i.0.to_dtype::<bf16>()?,
                    };
                    Ok((
                        x,
                        i.1.to_dtype::<bf16>()?,
                        i.2.to_dtype::<bf16>()?,
                        i.3.clone(),
                    ))
                };
                let cpu = cpu_inputs.as_ref().map(cast).transpose()?;
                timed.row(
                    name,
                    shape.clone(),
                    bytes,
                    &cast(&inputs)?,
                    cpu.as_ref(),
                    |i| i.0.conv2d(&i.1, Some(&i.2), &i.3).map(drop),
                )?
            } else {
                timed.row(
                    name,
                    shape.clone(),
                    bytes,
                    &inputs,
                    cpu_inputs.as_ref(),
                    |i| i.0.conv2d(&i.1, Some(&i.2), &i.3).map(drop),
                )?
            };
            row.flops = Some(flops);
            Ok(row)
        };
        rows.push(one_row(name)?);
        if dev.dnn().is_some() {
            // The rows above ran the DNN library (MIOpen, cuDNN) where it
            // took the problem: ours too, in the same run, to compare.
            ferrocm_ops::conv::set_vendor_dnn(false);
            let kernel = one_row(&format!("{name} (kernel)"));
            ferrocm_ops::conv::set_vendor_dnn(true);
            rows.push(kernel?);
        }
    }
    // A transposed convolution doubling a (2, 320, 32, 32) activation
    // (kernel 4, stride 2, padding 1), in useful TFLOP/s: each input times
    // each of its taps.
    let (n, ch, size) = (2, c(320), (32 / div).max(4));
    let build = |d: &Device| -> Result<Conv> {
        Ok((
            Tensor::randn(&[n, ch, size, size], 0.0, 1.0, 43, d)?,
            Tensor::randn(&[ch, ch, 4, 4], 0.0, 0.1, 44, d)?,
            Tensor::randn(&[ch], 0.0, 0.1, 45, d)?,
            ConvOptions::new().stride(&[2]).padding(&[1]),
        ))
    };
    let inputs = build(dev)?;
    let cpu_inputs = match cfg.compare_cpu && dev.runs_kernels() {
        true => Some(build(&Device::Cpu)?),
        false => None,
    };
    let bytes = ((n * ch * size * size * 5 + ch * ch * 16) * 4) as u64;
    let transposed_row = |name: &str| -> Result<BenchRow> {
        let mut row = timed.row(
            name,
            vec![n, ch, size, size],
            bytes,
            &inputs,
            cpu_inputs.as_ref(),
            |i| i.0.conv_transpose2d(&i.1, Some(&i.2), &i.3).map(drop),
        )?;
        row.flops = Some((2 * n * ch * size * size * ch * 16) as u64);
        Ok(row)
    };
    let name = "conv_transpose2d 4x4/2 320->320 b2 f32";
    rows.push(transposed_row(name)?);
    if dev.dnn().is_some() {
        ferrocm_ops::conv::set_vendor_dnn(false);
        let kernel = transposed_row(&format!("{name} (kernel)"));
        ferrocm_ops::conv::set_vendor_dnn(true);
        rows.push(kernel?);
    }
    rows.extend(conv_net_rows(dev, cfg, copy_gbps, 1)?);
    rows.extend(conv_net_rows(dev, cfg, copy_gbps, 16)?);
    Ok(rows)
}

/// The rest of a convolution network's ops, in % of copy (each input read
/// once and each output written once is the floor): group_norm(32) on a
/// Stable-Diffusion activation `(2, 320, 64, 64)` (f32, bf16), max_pool 3x3
/// stride 2 pad 1 on the ResNet stem's output `(1, 64, 112, 112)`, and
/// nearest and bilinear 2x upsampling of `(2, 320, 32, 32)` (bf16, as a
/// diffusion decoder does). Smaller configs divide channels and sizes by 8.
///
/// `batch_times` multiplies each batch (the stem's 1 becomes 2 first, so
/// every tensor grows alike): at 1 the tensors are 3-10 MB and a call is
/// mostly its launch, for PyTorch too; at 16 (batch 32, 50-170 MB, past
/// the L2) the rows measure the kernels against the copy floor.
fn conv_net_rows(
    dev: &Device,
    cfg: BenchConfig,
    copy_gbps: f64,
    batch_times: usize,
) -> Result<Vec<BenchRow>> {
    use ferrocm_ops::conv::{PoolOptions, Resize};
    let div = if cfg.cols < 4096 { 8 } else { 1 };
    let c = |v: usize| (v / div).max(1);
    let batch = 2 * batch_times;
    let stem_batch = if batch_times == 1 { 1 } else { batch };
    // The original rows keep their names; larger batches name theirs
    // before the dtype.
    let tag = |name: &str, b: usize| match name.rsplit_once(' ') {
        Some((op, dtype)) if batch_times > 1 => format!("{op} b{b} {dtype}"),
        _ => name.to_string(),
    };
    let timed = Timed {
        dev,
        reps: cfg.reps,
        copy_gbps,
    };
    let cpu = cfg.compare_cpu && dev.runs_kernels();
    let mut rows = Vec::new();
    let sd = [batch, c(320), c(64), c(64)];
    let elems = |s: &[usize]| s.iter().product::<usize>();
    for bf in [false, true] {
        let name = &format!(
            "group_norm(32) sd b{batch} {}",
            if bf { "bf16" } else { "f32" }
        );
        let build = |d: &Device| -> Result<(Tensor<f32>, Tensor<f32>, Tensor<f32>)> {
            Ok((
                Tensor::randn(&sd, 0.0, 1.0, 43, d)?,
                Tensor::randn(&[sd[1]], 1.0, 0.1, 44, d)?,
                Tensor::randn(&[sd[1]], 0.0, 0.1, 45, d)?,
            ))
        };
        let bytes = (2 * elems(&sd) * if bf { 2 } else { 4 }) as u64;
        let cpu_in = if cpu {
            Some(build(&Device::Cpu)?)
        } else {
            None
        };
        let row = if bf {
            let cast = |i: &(Tensor<f32>, Tensor<f32>, Tensor<f32>)| -> Result<_> {
                Ok((
                    i.0.to_dtype::<bf16>()?,
                    i.1.to_dtype::<bf16>()?,
                    i.2.to_dtype::<bf16>()?,
                ))
            };
            let c_in = cpu_in.as_ref().map(cast).transpose()?;
            timed.row(
                name,
                sd.to_vec(),
                bytes,
                &cast(&build(dev)?)?,
                c_in.as_ref(),
                |i| {
                    i.0.group_norm(sd_groups(i.0.shape()[1]), Some(&i.1), Some(&i.2), 1e-5)
                        .map(drop)
                },
            )?
        } else {
            timed.row(
                name,
                sd.to_vec(),
                bytes,
                &build(dev)?,
                cpu_in.as_ref(),
                |i| {
                    i.0.group_norm(sd_groups(i.0.shape()[1]), Some(&i.1), Some(&i.2), 1e-5)
                        .map(drop)
                },
            )?
        };
        rows.push(row);
    }
    // Batch norm (inference) on the same activation, bf16.
    let build = |d: &Device| -> Result<[Tensor<bf16>; 5]> {
        let v = |seed, mean| Tensor::<f32>::randn(&[sd[1]], mean, 0.1, seed, d)?.to_dtype::<bf16>();
        Ok([
            Tensor::<f32>::randn(&sd, 0.0, 1.0, 49, d)?.to_dtype::<bf16>()?,
            v(50, 0.0)?,
            v(51, 1.0)?,
            v(52, 1.0)?,
            v(53, 0.0)?,
        ])
    };
    let cpu_in = if cpu {
        Some(build(&Device::Cpu)?)
    } else {
        None
    };
    let inputs = build(dev)?;
    let batch_norm = |name: &str| {
        let bytes = (2 * elems(&sd) * 2) as u64;
        timed.row(name, sd.to_vec(), bytes, &inputs, cpu_in.as_ref(), |i| {
            i[0].batch_norm(&i[1], &i[2], Some(&i[3]), Some(&i[4]), 1e-5)
                .map(drop)
        })
    };
    let name = format!("batch_norm sd b{batch} bf16");
    rows.extend(with_kernel_twin(dev, &name, batch_norm)?);
    let stem = [stem_batch, c(64), c(112), c(112)];
    let out = (stem[2] + 2 - 3) / 2 + 1;
    let bytes = ((elems(&stem) + stem[0] * stem[1] * out * out) * 4) as u64;
    let build = |d: &Device| Tensor::<f32>::randn(&stem, 0.0, 1.0, 46, d);
    let cpu_in = if cpu {
        Some(build(&Device::Cpu)?)
    } else {
        None
    };
    let x = build(dev)?;
    let max_pool = |name: &str| {
        timed.row(name, stem.to_vec(), bytes, &x, cpu_in.as_ref(), |x| {
            x.max_pool2d(&PoolOptions::new(&[3]).stride(&[2]).padding(&[1]))
                .map(drop)
        })
    };
    let name = tag("max_pool 3x3/2 stem f32", stem_batch);
    rows.extend(with_kernel_twin(dev, &name, max_pool)?);
    // A 2x2 average (a downsampling layer) on the Stable-Diffusion
    // activation, bf16.
    let bytes = (elems(&sd) * 5 / 4 * 2) as u64;
    let build = |d: &Device| Tensor::<f32>::randn(&sd, 0.0, 1.0, 48, d)?.to_dtype::<bf16>();
    let cpu_in = if cpu {
        Some(build(&Device::Cpu)?)
    } else {
        None
    };
    let x = build(dev)?;
    let avg_pool = |name: &str| {
        timed.row(name, sd.to_vec(), bytes, &x, cpu_in.as_ref(), |x| {
            x.avg_pool2d(&PoolOptions::new(&[2])).map(drop)
        })
    };
    let name = format!("avg_pool 2x2/2 sd b{batch} bf16");
    rows.extend(with_kernel_twin(dev, &name, avg_pool)?);
    let small = [batch, c(320), c(32), c(32)];
    let bytes = (5 * elems(&small) * 2) as u64;
    let build = |d: &Device| Tensor::<f32>::randn(&small, 0.0, 1.0, 47, d)?.to_dtype::<bf16>();
    let cpu_in = if cpu {
        Some(build(&Device::Cpu)?)
    } else {
        None
    };
    let x = build(dev)?;
    rows.push(timed.row(
        &tag("upsample nearest 2x bf16", batch),
        small.to_vec(),
        bytes,
        &x,
        cpu_in.as_ref(),
        |x| x.upsample_nearest2d(Resize::Scale([2.0, 2.0])).map(drop),
    )?);
    rows.push(timed.row(
        &tag("upsample bilinear 2x bf16", batch),
        small.to_vec(),
        bytes,
        &x,
        cpu_in.as_ref(),
        |x| {
            x.upsample_bilinear2d(Resize::Scale([2.0, 2.0]), false)
                .map(drop)
        },
    )?);
    Ok(rows)
}

/// The row `row(name)` and, where the device has a DNN library (which the
/// op may run), the same timed on ferrocm's kernels, named `name
/// (kernel)`.
fn with_kernel_twin(
    dev: &Device,
    name: &str,
    row: impl Fn(&str) -> Result<BenchRow>,
) -> Result<Vec<BenchRow>> {
    let mut rows = vec![row(name)?];
    if dev.dnn().is_some() {
        ferrocm_ops::conv::set_vendor_dnn(false);
        let kernel = row(&format!("{name} (kernel)"));
        ferrocm_ops::conv::set_vendor_dnn(true);
        rows.push(kernel?);
    }
    Ok(rows)
}

/// Stable Diffusion's 32 groups, or 8 for the emulator's channels (40).
fn sd_groups(channels: usize) -> usize {
    if channels.is_multiple_of(32) { 32 } else { 8 }
}

/// The report as a table.
pub fn format_table(r: &BenchReport) -> String {
    let mut s = format!(
        "device: {}\ncopy (device to device, read + write): {:.0} GB/s\n{:<26} {:>12} {:>10} {:>9} {:>8} {:>11} {:>9} {:>8}\n",
        r.device,
        r.copy_gbps,
        "op",
        "shape",
        "ms",
        "GB/s",
        "% copy",
        "cpu ms",
        "speedup",
        "TFLOP/s"
    );
    for row in &r.rows {
        let shape = row
            .shape
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join("x");
        let (cpu, speedup) = match row.cpu_ms {
            Some(c) => (format!("{c:.2}"), format!("{:.1}x", c / row.ms)),
            None => ("-".into(), "-".into()),
        };
        if let Some(e) = &row.error {
            s += &format!("{:<26} {:>12} failed: {e}\n", row.op, shape);
            continue;
        }
        let tflops = match row.flops {
            Some(f) => format!("{:.2}", f as f64 / (row.ms * 1e-3) / 1e12),
            None => "-".into(),
        };
        s += &format!(
            "{:<26} {:>12} {:>10.4} {:>9.0} {:>8.1} {:>11} {:>9} {:>8}\n",
            row.op, shape, row.ms, row.gbps, row.pct_of_copy, cpu, speedup, tflops
        );
    }
    s
}

/// The report as JSON: `{device, copy_gbps, rows: [{op, shape, bytes, ms,
/// gbps, pct_of_copy, cpu_ms, error, flops}]}` (`ms` of a failed op is null;
/// `flops` only for the matrix products).
pub fn to_json(r: &BenchReport) -> String {
    let rows: Vec<_> = r
        .rows
        .iter()
        .map(|row| {
            serde_json::json!({
                "op": row.op, "shape": row.shape, "bytes": row.bytes, "ms": row.ms,
                "gbps": row.gbps, "pct_of_copy": row.pct_of_copy, "cpu_ms": row.cpu_ms,
                "error": row.error, "flops": row.flops,
            })
        })
        .collect();
    serde_json::json!({"device": r.device, "copy_gbps": r.copy_gbps, "rows": rows}).to_string()
}

/// Attention at Llama 3 8B's sizes (for the default config; smaller configs
/// scale them down): a decode step, one query of 32 heads over 4096 cached
/// keys of 8 KV heads, d 128 (bytes: K and V read once, q and the output),
/// in bf16 and f32; and a causal bf16 prefill of 2048 tokens (`flops`: 2 s²
/// d h, the causal half of the two products, as the PyTorch anchor counts).
/// On GPUs the decode step also over caches rotated past the device's caches
/// ([`ROTATED_BYTES`]), one per call, as a model's layers read theirs, and
/// the prefill at 8192 tokens and at head dim 64 too.
fn attention_rows(dev: &Device, cfg: BenchConfig, copy_gbps: f64) -> Result<Vec<BenchRow>> {
    let d = 128.min(cfg.cols).max(64);
    let heads = (cfg.cols / 128).clamp(1, 32);
    let kv_heads = (heads / 4).max(1);
    let (s_kv, seq) = (cfg.rows.min(4096), cfg.rows.min(2048));
    let build = |dev: &Device| -> Result<_> {
        let f = |shape: &[usize], seed| Tensor::<f32>::randn(shape, 0.0, 1.0, seed, dev);
        let (q, k, v) = (
            f(&[1, heads, 1, d], 40)?,
            f(&[1, kv_heads, s_kv, d], 41)?,
            f(&[1, kv_heads, s_kv, d], 42)?,
        );
        let p = |seed| f(&[1, heads, seq, d], seed)?.to_dtype::<bf16>();
        Ok((
            (
                q.to_dtype::<bf16>()?,
                k.to_dtype::<bf16>()?,
                v.to_dtype::<bf16>()?,
            ),
            (q, k, v),
            (p(43)?, p(44)?, p(45)?),
        ))
    };
    type Bf = Tensor<bf16>;
    type F = Tensor<f32>;
    type Attn = ((Bf, Bf, Bf), (F, F, F), (Bf, Bf, Bf));
    type AttnOp = fn(&Attn) -> Result<()>;
    /// Name, shape, bytes, FLOPs (the prefill), the op.
    type AttnRow = (&'static str, Vec<usize>, u64, Option<u64>, AttnOp);
    let kv = 2 * kv_heads * s_kv * d;
    let io = 2 * heads * d;
    let ops: [AttnRow; 3] = [
        (
            "attention decode bf16",
            vec![1, heads, kv_heads, s_kv, d],
            (2 * (kv + io)) as u64,
            None,
            |i| {
                i.0.0
                    .attention(
                        &i.0.1,
                        &i.0.2,
                        &ferrocm_ops::AttentionOptions::new().causal(),
                    )
                    .map(drop)
            },
        ),
        (
            "attention decode f32",
            vec![1, heads, kv_heads, s_kv, d],
            (4 * (kv + io)) as u64,
            None,
            |i| {
                i.1.0
                    .attention(
                        &i.1.1,
                        &i.1.2,
                        &ferrocm_ops::AttentionOptions::new().causal(),
                    )
                    .map(drop)
            },
        ),
        (
            "attention prefill bf16",
            vec![1, heads, seq, d],
            (2 * 4 * heads * seq * d) as u64,
            Some((2 * seq * seq * d * heads) as u64),
            |i| {
                i.2.0
                    .attention(
                        &i.2.1,
                        &i.2.2,
                        &ferrocm_ops::AttentionOptions::new().causal(),
                    )
                    .map(drop)
            },
        ),
    ];
    let inputs = build(dev)?;
    let cpu_inputs = match cfg.compare_cpu && dev.runs_kernels() {
        true => Some(build(&Device::Cpu)?),
        false => None,
    };
    let timed = Timed {
        dev,
        reps: cfg.reps,
        copy_gbps,
    };
    let mut rows = Vec::new();
    for (name, shape, bytes, flops, op) in ops {
        let mut row = timed.row(name, shape, bytes, &inputs, cpu_inputs.as_ref(), op)?;
        row.flops = flops;
        rows.push(row);
    }
    if dev.is_gpu() {
        // Decode as a model's layers meet it: a cache of its own per layer,
        // together past every GPU cache (the rows above read K and V from
        // the L2 after the first call), a different one each call.
        let rotated = |size: usize| (ROTATED_BYTES / (kv * size)).max(2);
        let decode_inputs = |n: usize| -> Result<_> {
            let f = |shape: &[usize], seed| Tensor::<f32>::randn(shape, 0.0, 1.0, seed, dev);
            let q = f(&[1, heads, 1, d], 40)?;
            let kvs = (0..n as u64)
                .map(|i| {
                    let k = f(&[1, kv_heads, s_kv, d], 50 + 2 * i)?;
                    let v = f(&[1, kv_heads, s_kv, d], 51 + 2 * i)?;
                    Ok((k, v))
                })
                .collect::<Result<Vec<_>>>()?;
            Ok((q, kvs, std::cell::Cell::new(0usize)))
        };
        type Rotated<T> = (
            Tensor<T>,
            Vec<(Tensor<T>, Tensor<T>)>,
            std::cell::Cell<usize>,
        );
        fn step<T: ferrocm_ops::WithDType>(i: &Rotated<T>) -> Result<()> {
            let (q, kvs, next) = i;
            let n = next.get();
            next.set((n + 1) % kvs.len());
            let (k, v) = &kvs[n];
            q.attention(k, v, &ferrocm_ops::AttentionOptions::new().causal())
                .map(drop)
        }
        let n = rotated(2);
        let (q, kvs, next) = decode_inputs(n)?;
        let to_bf16 = |t: &Tensor<f32>| t.to_dtype::<bf16>();
        let bf: Rotated<bf16> = (
            to_bf16(&q)?,
            kvs.iter()
                .map(|(k, v)| Ok((to_bf16(k)?, to_bf16(v)?)))
                .collect::<Result<_>>()?,
            next,
        );
        drop(kvs);
        rows.push(timed.row(
            &format!("attention decode bf16, {n} caches rotated"),
            vec![1, heads, kv_heads, s_kv, d],
            (2 * (kv + io)) as u64,
            &bf,
            None,
            step::<bf16>,
        )?);
        drop(bf);
        let n = rotated(4);
        let f: Rotated<f32> = decode_inputs(n)?;
        rows.push(timed.row(
            &format!("attention decode f32, {n} caches rotated"),
            vec![1, heads, kv_heads, s_kv, d],
            (4 * (kv + io)) as u64,
            &f,
            None,
            step::<f32>,
        )?);
        drop(f);
        // The prefill at the other lengths and head dims of issue 32's
        // target (s 2048 and 8192, d 64 and 128), the heads as above; big
        // shapes, so GPUs only.
        for (s, d) in [(8192, 128), (2048, 64), (8192, 64)] {
            let p = |seed| {
                Tensor::<f32>::randn(&[1, heads, s, d], 0.0, 1.0, seed, dev)?.to_dtype::<bf16>()
            };
            let qkv = (p(46)?, p(47)?, p(48)?);
            let mut row = timed.row(
                &format!("attention prefill bf16 s{s} d{d}"),
                vec![1, heads, s, d],
                (2 * 4 * heads * s * d) as u64,
                &qkv,
                None,
                |i: &(Bf, Bf, Bf)| {
                    i.0.attention(&i.1, &i.2, &ferrocm_ops::AttentionOptions::new().causal())
                        .map(drop)
                },
            )?;
            row.flops = Some((2 * s * s * d * heads) as u64);
            rows.push(row);
        }
    }
    Ok(rows)
}

/// Bytes of weight copies the rotated quantized rows cycle through: past
/// an H100's 50 MiB L2 and MI300's 256 MiB Infinity Cache.
const ROTATED_BYTES: usize = 512 << 20;

/// Quantized weights, every format, on a `[n, k]` weight (4096 x 14336 at
/// the default config, llama.cpp's test-backend-ops shape: m = 4096 output
/// rows, k = 14336): the linear layer with 1 and 8 rows of f32 activations
/// (bytes: the weight's), and dequantize to bf16 (bytes: the weight's and
/// the output's); on GPUs also 1 row against weights rotated past the
/// caches and the batched product with 512 rows of bf16 (TFLOP/s), on the
/// Cpu the product with 128 rows of f32 (a prompt).
fn quant_rows(dev: &Device, cfg: BenchConfig, copy_gbps: f64) -> Result<Vec<BenchRow>> {
    use ferrocm_ops::{QTensor, QuantFormat};
    let n = cfg.cols;
    let k = (cfg.rows * 7 / 8 / 256).max(1) * 256;
    let timed = Timed {
        dev,
        reps: cfg.reps,
        copy_gbps,
    };
    let compare = cfg.compare_cpu && dev.runs_kernels();
    let mut rows = Vec::new();
    // `FERROCM_BENCH_QUANT_FORMATS=q4_0,q6_K`: only those formats (GGML's
    // names, any case); unset or empty: every format.
    let only_formats = std::env::var("FERROCM_BENCH_QUANT_FORMATS").unwrap_or_default();
    for (i, format) in QuantFormat::ALL.into_iter().enumerate() {
        if !only_formats.is_empty()
            && !only_formats
                .split(',')
                .any(|f| f.eq_ignore_ascii_case(format.name()))
        {
            continue;
        }
        let bytes =
            crate::check::finite_blocks(format, n * k / format.block_elems(), 100 + i as u64);
        let w = QTensor::from_bytes(&bytes, format, &[n, k], dev)?;
        let cpu_w = if compare {
            Some(QTensor::from_bytes(&bytes, format, &[n, k], &Device::Cpu)?)
        } else {
            None
        };
        let wbytes = bytes.len() as u64;
        for m in [1usize, 2, 4, 8] {
            let x = Tensor::<f32>::rand(&[m, k], -1.0, 1.0, 3, dev)?;
            let cpu = cpu_w
                .as_ref()
                .map(|w| Ok::<_, ferrocm_ops::Error>((w.clone(), x.to_device(&Device::Cpu)?)))
                .transpose()?;
            let mut row = timed.row(
                &format!("qlinear {format} x{m} f32 (weight bytes)"),
                vec![n, k],
                wbytes,
                &(w.clone(), x),
                cpu.as_ref(),
                |(w, x)| w.forward(x).map(drop),
            )?;
            row.flops = Some((2 * m * n * k) as u64);
            rows.push(row);
        }
        if dev.is_gpu() {
            // The weights as a model's layers meet them: copies past every
            // GPU cache (L2, MI300's 256 MiB Infinity Cache), a different
            // one each call.
            let copies = (ROTATED_BYTES / wbytes as usize).max(2);
            let ws = (0..copies)
                .map(|_| QTensor::from_bytes(&bytes, format, &[n, k], dev))
                .collect::<ferrocm_ops::Result<Vec<_>>>()?;
            let x = Tensor::<f32>::rand(&[1, k], -1.0, 1.0, 3, dev)?;
            let mut row = timed.row(
                &format!("qlinear {format} x1 f32, {copies} weights rotated (weight bytes)"),
                vec![n, k],
                wbytes,
                &(ws, x, std::cell::Cell::new(0usize)),
                None,
                |(ws, x, next)| {
                    let i = next.get();
                    next.set((i + 1) % ws.len());
                    ws[i].forward(x).map(drop)
                },
            )?;
            row.flops = Some((2 * n * k) as u64);
            rows.push(row);
            // The batched product (prefill): 512 rows of bf16 activations.
            let x = Tensor::<bf16>::rand(&[512, k], -1.0, 1.0, 3, dev)?;
            let mut row = timed.row(
                &format!("qlinear {format} x512 bf16 (weight bytes)"),
                vec![n, k],
                wbytes,
                &(w.clone(), x),
                None,
                |(w, x)| w.forward(x).map(drop),
            )?;
            row.flops = Some((2 * 512 * n * k) as u64);
            rows.push(row);
        }
        if *dev == Device::Cpu {
            // A prompt's product on the Cpu: 128 rows of f32 activations.
            let x = Tensor::<f32>::rand(&[128, k], -1.0, 1.0, 3, dev)?;
            let mut row = timed.row(
                &format!("qlinear {format} x128 f32 (weight bytes)"),
                vec![n, k],
                wbytes,
                &(w.clone(), x),
                None,
                |(w, x)| w.forward(x).map(drop),
            )?;
            row.flops = Some((2 * 128 * n * k) as u64);
            rows.push(row);
        }
        let out_bytes = (n * k * 2) as u64;
        let cpu = cpu_w.map(|w| (w, ()));
        rows.push(timed.row(
            &format!("dequantize {format} to bf16"),
            vec![n, k],
            wbytes + out_bytes,
            &(w, ()),
            cpu.as_ref(),
            |(w, ())| w.dequantize::<bf16>().map(drop),
        )?);
    }
    Ok(rows)
}

/// Rows of [`BenchFamily::Model`]: per weight format, the prompt's forward
/// (512 tokens; TFLOP/s over the blocks' 2 · weights · tokens and the
/// output's 2 · weights for the last token) and
/// a decode step (the weights read once a token: GB/s and % of copy are the
/// share of the weight-bandwidth limit; tokens/s = 1000 / ms). A GPU runs
/// Llama-7B shapes (bf16 activations), the Cpu one block of them (f32), the
/// emulator the tiny model; greedy decoding of 128 tokens (32 on the Cpu,
/// 8 in the emulator).
fn model_rows(dev: &Device, copy_gbps: f64) -> Vec<BenchRow> {
    use ferrocm_models::synthetic::SyntheticModel;
    use ferrocm_ops::QuantFormat;
    let mut rows = Vec::new();
    let formats = [
        ("q4_0", Some(QuantFormat::Q4_0)),
        ("q4_k", Some(QuantFormat::Q4K)),
        ("q8_0", Some(QuantFormat::Q8_0)),
        ("bf16", None),
    ];
    for (name, format) in formats {
        let (label, spec, prompt, decode) = if dev.is_gpu() {
            ("llama-7b", SyntheticModel::llama_7b(format), 512, 128)
        } else if dev.runs_kernels() {
            let tiny = ferrocm_models::synthetic::SyntheticModel::new(ferrocm_models::Arch::Llama);
            let dense = ferrocm_ops::DType::BF16;
            (
                "tiny",
                SyntheticModel {
                    format,
                    dense,
                    ..tiny
                },
                64,
                8,
            )
        } else {
            let one = SyntheticModel {
                layers: 1,
                ..SyntheticModel::llama_7b(format)
            };
            ("llama-7b 1 block", one, 512, 32)
        };
        let hidden = spec.hidden;
        let measured = if dev.is_gpu() {
            time_model::<ferrocm_ops::bf16>(&spec, dev, prompt, decode)
        } else {
            time_model::<f32>(&spec, dev, prompt, decode)
        };
        let row = |op: String, ms: f64, bytes: u64, flops: Option<u64>, error: Option<String>| {
            let gbps = bytes as f64 / (ms * 1e-3) / 1e9;
            BenchRow {
                op,
                shape: vec![prompt, hidden],
                bytes,
                ms,
                gbps,
                pct_of_copy: 100.0 * gbps / copy_gbps,
                cpu_ms: None,
                error,
                flops,
            }
        };
        match measured {
            Ok(m) => {
                // Every position through the blocks, the last one through the output.
                let flops = 2 * (m.block_weights * prompt as u64 + m.output_weights);
                rows.push(row(
                    format!("{label} {name} prefill {prompt}"),
                    m.prefill_ms,
                    m.read_bytes,
                    Some(flops),
                    None,
                ));
                rows.push(row(
                    format!("{label} {name} decode (per token)"),
                    m.decode_ms,
                    m.read_bytes,
                    None,
                    None,
                ));
            }
            Err(e) => rows.push(row(format!("{label} {name}"), f64::NAN, 0, None, Some(e))),
        }
    }
    rows
}

/// One model's prefill and decode times.
struct ModelTimes {
    prefill_ms: f64,
    decode_ms: f64,
    /// Weight bytes a decode step reads ([`ferrocm_models::Llama::decode_read_bytes`]).
    read_bytes: u64,
    /// Weights of the blocks' matrix products.
    block_weights: u64,
    /// Weights of the output projection.
    output_weights: u64,
}

fn time_model<T: ferrocm_ops::WithDType>(
    spec: &ferrocm_models::synthetic::SyntheticModel,
    dev: &Device,
    prompt: usize,
    decode: usize,
) -> std::result::Result<ModelTimes, String> {
    use ferrocm_models::{Generation, Llama, LoadOptions, SamplingOptions};
    let err = |e: ferrocm_models::Error| e.to_string();
    let bytes = spec
        .to_gguf()
        .and_then(|w| Ok(w.to_bytes()?))
        .map_err(err)?;
    let g = ferrocm_ops::quant::gguf::Gguf::from_bytes(bytes).map_err(|e| e.to_string())?;
    let opts = LoadOptions {
        context: Some(prompt + decode),
    };
    let model = Llama::<T>::load(&g, dev, &opts).map_err(err)?;
    drop(g);
    let c = model.config();
    let ids: Vec<u32> = (0..prompt as u32)
        .map(|i| (i * 7919 + 13) % c.vocab as u32)
        .collect();
    let mut generation = Generation::new(&model, SamplingOptions::greedy()).map_err(err)?;
    // A first run of the same shapes warms the device (module loads, the
    // allocator's blocks, the BLAS's plans); the second is timed.
    generation.generate(&ids, 2, |_| true).map_err(err)?;
    generation.reset();
    generation.generate(&ids, decode, |_| true).map_err(err)?;
    let s = generation.stats();
    Ok(ModelTimes {
        prefill_ms: s.prefill.as_secs_f64() * 1e3,
        decode_ms: s.decode.as_secs_f64() * 1e3 / s.decode_tokens.max(1) as f64,
        read_bytes: model.decode_read_bytes() as u64,
        block_weights: (c.decode_weight_elems() - c.vocab * c.hidden) as u64,
        output_weights: (c.vocab * c.hidden) as u64,
    })
}
