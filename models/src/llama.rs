//! The Llama-family decoder (`llama`, `qwen2`, `qwen3`, `gemma`, `gemma2`,
//! `gemma3`): loading from GGUF,
//! the KV cache, and the forward pass, every step an op of `ferrocm-ops`.
//!
//! One block, as llama.cpp's `llm_build_llama` and Hugging Face's
//! `LlamaDecoderLayer` compute it:
//!
//! ```text
//! h = rms_norm(x) · attn_norm
//! q, k, v = h·Wqᵀ (+ bq), h·Wkᵀ (+ bk), h·Wvᵀ (+ bv)      biases: qwen2
//! q, k = rms_norm per head (· q_norm, k_norm)             qwen3
//! q, k = rope(q, pos), rope(k, pos); cache[pos..] = k, v      one op
//! x = x + attention(q, cache k, cache v, causal) · Woᵀ
//! h = rms_norm(x) · ffn_norm
//! x = x + (silu(h·Wgᵀ) * h·Wuᵀ) · Wdᵀ
//! ```
//!
//! and the logits `rms_norm(x) · output_norm · Woutᵀ` (`Wout` the embedding
//! table when the file has no `output.weight`).
//!
//! The Gemmas (llama.cpp's `gemma`, `gemma2`, `gemma3` graphs) change it
//! here and there: `x` starts as the embedding times `sqrt(hidden)`; the
//! gate is `gelu` (tanh form); Gemma 2 and 3 norm the attention's and the
//! feed-forward's outputs before each residual add (`post_attention_norm`,
//! `post_ffw_norm`) and let some blocks' queries see only the last
//! `sliding_window` keys (Gemma 3's such blocks with their own rotary
//! base); Gemma 2 softcaps the attention logits and the output
//! (`cap · tanh(logit / cap)`); Gemma 3 norms q and k heads as qwen3.
//!
//! Each residual add is fused with the next norm ([`Tensor::add_rms_norm`];
//! a Gemma's post-norms stay ops of their own). `Wq`, `Wk`, `Wv` (and `Wg`,
//! `Wu`) are stacked into one matrix at load when the file stores them in
//! one type, so decode rounds x once and launches one product for them
//! (the Q4_K_M mix keeps `Wv` apart where it gives it Q6_K). In decode,
//! a norm or gated unit whose output feeds only quantized products stores it
//! in their 8-bit form ([`Tensor::add_rms_norm_q8`],
//! [`Tensor::glu_halves_q8`]): the same bits as rounding it in the
//! product, without a pass of its own.

use crate::config::{Arch, Config, RopeScaling};
use crate::error::{Error, Result};
use ferrocm_ops::quant::gguf::{GgmlType, Gguf};
use ferrocm_ops::quant::matvec::QMATVEC_MAX_M;
use ferrocm_ops::quant::{Q8Activations, Weight};
use ferrocm_ops::rope::RopeMode;
use ferrocm_ops::{
    Activation, AttentionOptions, DType, Device, Graph, GraphStats, QTensor, Tensor, WithDType,
    bf16, f16,
};

/// How a model is loaded.
#[derive(Clone, Debug, Default)]
pub struct LoadOptions {
    /// Positions to prepare the rotary tables (and so caches) for, at most
    /// the model's context; `None` takes the model's context, at most
    /// [`DEFAULT_CONTEXT`] (as llama.cpp's tools default to 4096).
    pub context: Option<usize>,
}

/// The context a model runs with when [`LoadOptions::context`] is `None`
/// and the model's own is longer.
pub const DEFAULT_CONTEXT: usize = 4096;

/// Which positions' logits [`Llama::forward`] returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logits {
    /// The last position's (generation).
    Last,
    /// Every position's (scoring, tests).
    All,
}

/// One transformer block's weights.
#[derive(Debug)]
struct Block<T: WithDType> {
    attn_norm: Tensor<T>,
    /// q, k and v.
    qkv: Stacked<T>,
    wo: Weight<T>,
    /// q, k, v biases back to back (qwen2).
    qkv_bias: Option<Tensor<T>>,
    /// q and k per-head norms (qwen3, gemma3).
    qk_norm: Option<[Tensor<T>; 2]>,
    /// The attention's and the feed-forward's output norms (gemma2,
    /// gemma3).
    post_norms: Option<[Tensor<T>; 2]>,
    /// Keys each query sees, for a sliding-window block.
    window: Option<usize>,
    ffn_norm: Tensor<T>,
    /// gate and up.
    gate_up: Stacked<T>,
    down: Weight<T>,
}

/// A projection's input: dense, or in the 8-bit form of the quantized
/// products when every weight it feeds is quantized and it has at most
/// [`QMATVEC_MAX_M`] rows (decode).
enum Input<T: WithDType> {
    Dense(Tensor<T>),
    Q8(Q8Activations),
}

impl<T: WithDType> Input<T> {
    fn rank(&self) -> usize {
        match self {
            Input::Dense(x) => x.rank(),
            Input::Q8(x) => x.shape().len(),
        }
    }
}

/// `x · Wᵀ` of either form of `x` (an 8-bit `x` goes only to quantized
/// weights: see [`Input`]).
fn project<T: WithDType>(w: &Weight<T>, x: &Input<T>) -> Result<Tensor<T>> {
    Ok(match (w, x) {
        (_, Input::Dense(x)) => w.forward(x)?,
        (Weight::Quantized(w), Input::Q8(x)) => w.forward_q8(x)?,
        (Weight::Dense(_) | Weight::Mixed(_), Input::Q8(_)) => {
            return Err(Error::BadRequest {
                op: "Llama::forward",
                what: "an 8-bit input for a dense weight".into(),
            });
        }
    })
}

/// Whether every weight of `ws` takes an 8-bit input.
/// Whether an input of `t` positions to the weights `ws` is stored in
/// their 8-bit form: every one quantized, and few enough positions for the
/// matrix-vector products.
fn q8<T: WithDType>(t: usize, ws: &[&Weight<T>]) -> bool {
    t <= QMATVEC_MAX_M as usize && all_quantized(ws)
}

fn all_quantized<T: WithDType>(ws: &[&Weight<T>]) -> bool {
    ws.iter().all(|w| matches!(w, Weight::Quantized(_)))
}

/// Projections of one input (q, k, v; gate, up): one matrix of their rows
/// back to back when the file stores them alike (in decode one rounding of
/// x and one product instead of one each), else each its own.
#[derive(Debug)]
enum Stacked<T: WithDType> {
    One(Weight<T>, Vec<usize>),
    Parts(Vec<Weight<T>>),
}

impl<T: WithDType> Stacked<T> {
    /// `x · Wᵢᵀ (+ bias's rows of part i)` for each part: views into one
    /// product's output when stacked.
    fn forward(&self, x: &Input<T>, bias: Option<&Tensor<T>>) -> Result<Vec<Tensor<T>>> {
        let last = x.rank() - 1;
        match self {
            Stacked::One(w, rows) => {
                let mut y = project(w, x)?;
                if let Some(b) = bias {
                    y = y.add(b)?;
                }
                let mut at = 0;
                rows.iter()
                    .map(|&r| {
                        at += r;
                        Ok(y.narrow(last, at - r, r)?)
                    })
                    .collect()
            }
            Stacked::Parts(ws) => {
                let mut at = 0;
                ws.iter()
                    .map(|w| {
                        let y = project(w, x)?;
                        let r = w.shape()[0];
                        at += r;
                        Ok(match bias {
                            Some(b) => y.add(&b.narrow(0, at - r, r)?)?,
                            None => y,
                        })
                    })
                    .collect()
            }
        }
    }

    fn weights(&self) -> Vec<&Weight<T>> {
        match self {
            Stacked::One(w, _) => vec![w],
            Stacked::Parts(ws) => ws.iter().collect(),
        }
    }
}

/// A Llama-family model on a device, activations and cache in `T` (f32,
/// f16 or bf16); weights as the file stores them (quantized formats stay
/// quantized, dense ones are converted to `T`).
///
/// ```
/// use ferrocm_models::{synthetic::SyntheticModel, Arch, Llama, Logits};
/// use ferrocm_ops::{quant::gguf::Gguf, Device};
/// let file = Gguf::from_bytes(SyntheticModel::new(Arch::Qwen2).to_gguf()?.to_bytes()?)?;
/// let model = Llama::<f32>::load(&file, &Device::Cpu, &Default::default())?;
/// let mut cache = model.new_cache(32)?;
/// let logits = model.forward(&[3, 1, 4], &mut cache, Logits::All)?;
/// assert_eq!(logits.shape(), &[3, model.config().vocab]);
/// assert_eq!(cache.len(), 3);
/// # Ok::<(), ferrocm_models::Error>(())
/// ```
#[derive(Debug)]
pub struct Llama<T: WithDType> {
    config: Config,
    device: Device,
    context: usize,
    embed: Weight<T>,
    blocks: Vec<Block<T>>,
    norm: Tensor<T>,
    output: Weight<T>,
    /// `output` is `embed`.
    tied: bool,
    /// Rotary tables `[context, rope_dims / 2]`.
    cos: Tensor<T>,
    sin: Tensor<T>,
    /// The sliding-window blocks' tables, where their rotation differs
    /// (Gemma 3's base).
    rope_swa: Option<(Tensor<T>, Tensor<T>)>,
}

/// The keys and values of every block for one sequence, preallocated on
/// the model's device: `[1, kv_heads, capacity, head_dim]` per block,
/// written in place as tokens arrive.
#[derive(Debug)]
pub struct KvCache<T: WithDType> {
    k: Vec<Tensor<T>>,
    v: Vec<Tensor<T>>,
    len: usize,
    capacity: usize,
}

impl<T: WithDType> KvCache<T> {
    /// Positions filled.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no position is filled.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Positions it holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Forgets every position (the memory stays allocated).
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Keeps the first `len` positions (fewer than filled): a rewind.
    ///
    /// # Errors
    /// [`Error::BadRequest`] when `len` is past the positions filled.
    pub fn truncate(&mut self, len: usize) -> Result<()> {
        if len > self.len {
            return Err(Error::BadRequest {
                op: "KvCache::truncate",
                what: format!("{len} positions asked, {} filled", self.len),
            });
        }
        self.len = len;
        Ok(())
    }

    /// Bytes on the device.
    pub fn bytes(&self) -> usize {
        self.k
            .iter()
            .chain(&self.v)
            .map(|t| t.elem_count() * size_of::<T>())
            .sum()
    }
}

/// Tensor `name`'s info, checked to exist.
/// The graphs a model's pass is recorded into, one per block
/// ([`Llama::forward_graph`]); made once per sequence and kept, so that
/// each step updates the graphs the last one instantiated.
#[derive(Debug)]
pub struct StepGraphs {
    graphs: Vec<Graph>,
    blocks_per_graph: usize,
    blocks: usize,
}

impl StepGraphs {
    /// Blocks a graph by default: on an H100 decoding a 7B model, graphs
    /// of 1 or 2 blocks were 2% faster than no graphs, of 4 as fast, and of
    /// 32 (the whole step: the GPU idles while the host records) 20%
    /// slower (docs/h100-bench.md). That is when the host reads each token
    /// before it records the next step; pipelined decode records a step
    /// while the GPU runs the last, and takes whole steps
    /// ([`Generation::pipelines`](crate::Generation::pipelines)).
    pub const DEFAULT_BLOCKS: usize = 2;

    /// Graphs of [`StepGraphs::DEFAULT_BLOCKS`] blocks each for `model`,
    /// on its device.
    pub fn new<T: WithDType>(model: &Llama<T>) -> Self {
        Self::with_blocks_per_graph(model, Self::DEFAULT_BLOCKS)
    }

    /// Graphs of `per` blocks each (at least 1) for `model`: fewer blocks
    /// a graph start the GPU sooner, more pay fewer graph launches.
    pub fn with_blocks_per_graph<T: WithDType>(model: &Llama<T>, per: usize) -> Self {
        let (blocks, per) = (model.blocks.len(), per.max(1));
        Self {
            graphs: (0..blocks.div_ceil(per))
                .map(|_| Graph::new(&model.device))
                .collect(),
            blocks_per_graph: per,
            blocks,
        }
    }

    /// How many graphs a pass is recorded into.
    pub fn len(&self) -> usize {
        self.graphs.len()
    }

    /// Whether there are none (never: a model has at least one block).
    pub fn is_empty(&self) -> bool {
        self.graphs.is_empty()
    }

    /// Whether the device records graphs (otherwise the pass runs as
    /// queued).
    pub fn records(&self) -> bool {
        self.graphs.first().is_some_and(Graph::records)
    }

    /// The counts of every block's graph, summed.
    pub fn stats(&self) -> GraphStats {
        self.graphs.iter().fold(GraphStats::default(), |a, g| {
            let s = g.stats();
            GraphStats {
                launched: a.launched + s.launched,
                updated: a.updated + s.updated,
                instantiated: a.instantiated + s.instantiated,
            }
        })
    }
}

fn info<'g>(g: &'g Gguf, name: &str) -> Result<&'g ferrocm_ops::quant::gguf::GgufTensorInfo> {
    g.tensor_info(name)
        .ok_or_else(|| Error::MissingTensor { name: name.into() })
}

fn check_shape(name: &str, found: &[usize], expected: &[usize]) -> Result<()> {
    if found != expected {
        return Err(Error::TensorShape {
            name: name.into(),
            found: found.to_vec(),
            expected: expected.to_vec(),
        });
    }
    Ok(())
}

/// A dense tensor of the file as `T`.
fn dense<T: WithDType>(g: &Gguf, name: &str, shape: &[usize], dev: &Device) -> Result<Tensor<T>> {
    let t = info(g, name)?;
    check_shape(name, &t.shape, shape)?;
    if !matches!(t.ggml_type, GgmlType::Dense(_)) {
        return Err(Error::Unsupported {
            what: format!("tensor {name:?} in {}", t.ggml_type),
            why: "norms and biases must be f32, f16 or bf16".into(),
        });
    }
    Ok(g.tensor(name, dev)?.to_dtype(T::DTYPE)?.typed::<T>()?)
}

/// Whether a dense weight stored as `stored` is kept so under activations
/// `T` on `dev` ([`Weight::Mixed`]): on the Cpu, f16 and bf16 under f32.
/// The products read it at its own width (half an f32 copy's bytes; a
/// TinyLlama-shaped f16 file decoded 15 tokens/s with f32 copies, 23 as
/// stored) and loading makes no copy in another dtype.
fn kept_as_stored<T: WithDType>(stored: DType, dev: &Device) -> bool {
    matches!(dev, Device::Cpu)
        && T::DTYPE == DType::F32
        && matches!(stored, DType::F16 | DType::BF16)
}

/// A weight `[out, in]` of the file: quantized as stored, dense as stored
/// where [`kept_as_stored`], else dense as `T`.
fn weight<T: WithDType>(
    g: &Gguf,
    name: &str,
    shape: [usize; 2],
    dev: &Device,
) -> Result<Weight<T>> {
    let t = info(g, name)?;
    check_shape(name, &t.shape, &shape)?;
    Ok(match t.ggml_type {
        GgmlType::Quant(_) => Weight::Quantized(g.qtensor(name, dev)?),
        GgmlType::Dense(d) if kept_as_stored::<T>(d, dev) => Weight::Mixed(g.tensor(name, dev)?),
        _ => Weight::Dense(dense(g, name, &shape, dev)?),
    })
}

/// Matrices `names` (`rows[i]` x `cols` each, read by `part`) as one, their
/// rows back to back.
fn stack_rows<W: WithDType>(
    names: &[&str],
    rows: &[usize],
    cols: usize,
    dev: &Device,
    part: impl Fn(&str, usize) -> Result<Tensor<W>>,
) -> Result<Tensor<W>> {
    let mut all = Tensor::zeros(&[rows.iter().sum(), cols], dev)?;
    let mut at = 0;
    for (name, &r) in names.iter().zip(rows) {
        all.slice_set(&part(name, r)?, 0, at)?;
        at += r;
    }
    Ok(all)
}

/// Weights `names` (`rows[i]` x `cols` each), stacked into one matrix when
/// the file stores them in one type.
fn stacked<T: WithDType, const N: usize>(
    g: &Gguf,
    names: &[String; N],
    rows: [usize; N],
    cols: usize,
    dev: &Device,
    tick: &mut impl FnMut(&str),
) -> Result<Stacked<T>> {
    let mut types = Vec::with_capacity(N);
    for (name, &r) in names.iter().zip(&rows) {
        let t = info(g, name)?;
        check_shape(name, &t.shape, &[r, cols])?;
        types.push(t.ggml_type);
    }
    let total: usize = rows.iter().sum();
    let parts: Vec<&str> = names.iter().map(String::as_str).collect();
    let one = match types[0] {
        _ if types.iter().any(|t| *t != types[0]) => None,
        GgmlType::Quant(f) => {
            // Rows are whole blocks, so the stack is the files' bytes back to back.
            let mut bytes = Vec::new();
            for name in names {
                bytes.extend_from_slice(g.tensor_bytes(name)?);
            }
            Some(Weight::Quantized(QTensor::from_bytes(
                &bytes,
                f,
                &[total, cols],
                dev,
            )?))
        }
        GgmlType::Dense(d) if kept_as_stored::<T>(d, dev) => Some(Weight::Mixed(match d {
            DType::F16 => stack_rows(&parts, &rows, cols, dev, |n, _| {
                Ok(g.tensor(n, dev)?.typed::<f16>()?)
            })?
            .into(),
            _ => stack_rows(&parts, &rows, cols, dev, |n, _| {
                Ok(g.tensor(n, dev)?.typed::<bf16>()?)
            })?
            .into(),
        })),
        GgmlType::Dense(_) => Some(Weight::Dense(stack_rows(
            &parts,
            &rows,
            cols,
            dev,
            |name, r| dense::<T>(g, name, &[r, cols], dev),
        )?)),
        GgmlType::Other(_) => None,
    };
    names.iter().for_each(|n| tick(n));
    Ok(match one {
        Some(w) => Stacked::One(w, rows.to_vec()),
        None => Stacked::Parts(
            names
                .iter()
                .zip(rows)
                .map(|(n, r)| weight(g, n, [r, cols], dev))
                .collect::<Result<_>>()?,
        ),
    })
}

impl<T: WithDType> Llama<T> {
    /// The model in `gguf`, its weights uploaded to `device`.
    ///
    /// # Errors
    /// Those of [`Config::from_gguf`]; [`Error::MissingTensor`] and
    /// [`Error::TensorShape`] for a tensor absent or of a shape the
    /// metadata does not imply; [`Error::ContextOverflow`] for a context
    /// past the model's; [`Error::Unsupported`] for a dtype `T` other
    /// than f32, f16, bf16 or a norm stored quantized; [`Error::Op`] when an
    /// upload fails (device memory: what was uploaded is freed).
    pub fn load(gguf: &Gguf, device: &Device, opts: &LoadOptions) -> Result<Self> {
        Self::load_with_progress(gguf, device, opts, |_, _| {})
    }

    /// [`Llama::load`], calling `progress(done, total)` in weight bytes
    /// after each tensor (a progress bar's feed).
    ///
    /// # Errors
    /// As [`Llama::load`].
    pub fn load_with_progress(
        g: &Gguf,
        dev: &Device,
        opts: &LoadOptions,
        mut progress: impl FnMut(u64, u64),
    ) -> Result<Self> {
        if !T::DTYPE.is_float() {
            return Err(Error::Unsupported {
                what: format!("activations in {:?}", T::DTYPE),
                why: "a model computes in f32, f16 or bf16".into(),
            });
        }
        let c = Config::from_gguf(g)?;
        let context = opts.context.unwrap_or(c.context.min(DEFAULT_CONTEXT));
        if context > c.context {
            return Err(Error::ContextOverflow {
                needed: context,
                context: c.context,
            });
        }
        if context == 0 {
            return Err(Error::BadRequest {
                op: "Llama::load",
                what: "a context of 0 positions".into(),
            });
        }
        let total: u64 = g.tensors().iter().map(|t| t.bytes).sum();
        let mut done = 0u64;
        let mut tick = |name: &str| {
            done += g.tensor_info(name).map_or(0, |t| t.bytes);
            progress(done, total);
        };
        let (h, d) = (c.hidden, c.head_dim);
        let (q_out, kv_out) = (c.heads * d, c.kv_heads * d);
        let embed = weight(g, "token_embd.weight", [c.vocab, h], dev)?;
        tick("token_embd.weight");
        let mut blocks = Vec::with_capacity(c.layers);
        for l in 0..c.layers {
            let n = |s: &str| format!("blk.{l}.{s}");
            let qkv = ["attn_q.weight", "attn_k.weight", "attn_v.weight"].map(n);
            let qkv = stacked(g, &qkv, [q_out, kv_out, kv_out], h, dev, &mut tick)?;
            let wo = weight(g, &n("attn_output.weight"), [h, q_out], dev)?;
            tick(&n("attn_output.weight"));
            let gate_up = ["ffn_gate.weight", "ffn_up.weight"].map(n);
            let gate_up = stacked(g, &gate_up, [c.ffn, c.ffn], h, dev, &mut tick)?;
            let down = weight(g, &n("ffn_down.weight"), [h, c.ffn], dev)?;
            tick(&n("ffn_down.weight"));
            let vec = |s: &str, len: usize| dense::<T>(g, &n(s), &[len], dev);
            let qkv_bias = match c.arch == Arch::Qwen2 || g.tensor_info(&n("attn_q.bias")).is_some()
            {
                true => {
                    let mut all = Tensor::zeros(&[q_out + 2 * kv_out], dev)?;
                    all.slice_set(&vec("attn_q.bias", q_out)?, 0, 0)?;
                    all.slice_set(&vec("attn_k.bias", kv_out)?, 0, q_out)?;
                    all.slice_set(&vec("attn_v.bias", kv_out)?, 0, q_out + kv_out)?;
                    Some(all)
                }
                false => None,
            };
            let qk_norm = match c.arch.qk_norm() {
                true => Some([vec("attn_q_norm.weight", d)?, vec("attn_k_norm.weight", d)?]),
                false => None,
            };
            let post_norms = match c.arch.post_norms() {
                true => Some([
                    vec("post_attention_norm.weight", h)?,
                    vec("post_ffw_norm.weight", h)?,
                ]),
                false => None,
            };
            blocks.push(Block {
                attn_norm: vec("attn_norm.weight", h)?,
                ffn_norm: vec("ffn_norm.weight", h)?,
                qkv,
                wo,
                qkv_bias,
                qk_norm,
                post_norms,
                window: c.sliding_window.filter(|_| c.is_swa(l)),
                gate_up,
                down,
            });
        }
        let norm = dense(g, "output_norm.weight", &[h], dev)?;
        // Gemma and Gemma 2 always project by the embedding (llama.cpp
        // ignores an `output.weight` there).
        let tied = g.tensor_info("output.weight").is_none()
            || matches!(c.arch, Arch::Gemma | Arch::Gemma2);
        let output = match tied {
            false => {
                let w = weight(g, "output.weight", [c.vocab, h], dev)?;
                tick("output.weight");
                w
            }
            true => embed.clone(), // the same storage
        };
        let (cos, sin) = rope_tables(g, &c, c.rope_base, &c.rope_scaling, context, dev)?;
        let rope_swa = match !c.swa_layers.is_empty()
            && (c.rope_base_swa != c.rope_base || c.rope_scaling_swa != c.rope_scaling)
        {
            true => Some(rope_tables(
                g,
                &c,
                c.rope_base_swa,
                &c.rope_scaling_swa,
                context,
                dev,
            )?),
            false => None,
        };
        progress(total, total);
        Ok(Llama {
            config: c,
            device: dev.clone(),
            context,
            embed,
            blocks,
            norm,
            output,
            tied,
            cos,
            sin,
            rope_swa,
        })
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The device the weights live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Positions this model was loaded to run (the most a cache holds).
    pub fn context(&self) -> usize {
        self.context
    }

    /// Bytes of weights on the device.
    pub fn weight_bytes(&self) -> usize {
        let w = |w: &Weight<T>| w.len_bytes();
        let v = |t: &Tensor<T>| t.elem_count() * size_of::<T>();
        let blocks: usize = self
            .blocks
            .iter()
            .map(|b| {
                [b.qkv.weights(), b.gate_up.weights(), vec![&b.wo, &b.down]]
                    .concat()
                    .into_iter()
                    .map(w)
                    .sum::<usize>()
                    + v(&b.attn_norm)
                    + v(&b.ffn_norm)
                    + b.qkv_bias.as_ref().map_or(0, v)
                    + b.qk_norm.as_ref().map_or(0, |b| b.iter().map(v).sum())
                    + b.post_norms.as_ref().map_or(0, |b| b.iter().map(v).sum())
            })
            .sum();
        let output = if self.tied { 0 } else { w(&self.output) };
        blocks + w(&self.embed) + v(&self.norm) + output
    }

    /// Weight bytes one decode step reads: every weight once, but of an
    /// untied embedding table only a row (the numerator of the
    /// weight-bandwidth limit).
    pub fn decode_read_bytes(&self) -> usize {
        let embed = self.embed.len_bytes();
        let row = embed / self.config.vocab;
        self.weight_bytes() - if self.tied { 0 } else { embed - row }
    }

    /// Whether the output projection is the embedding table (the file has
    /// no `output.weight`).
    pub fn tied_embeddings(&self) -> bool {
        self.tied
    }

    /// An empty cache for up to `capacity` positions, on the model's device.
    ///
    /// # Errors
    /// [`Error::ContextOverflow`] past [`Llama::context`];
    /// [`Error::Op`] when the device is out of memory.
    pub fn new_cache(&self, capacity: usize) -> Result<KvCache<T>> {
        if capacity > self.context {
            return Err(Error::ContextOverflow {
                needed: capacity,
                context: self.context,
            });
        }
        let c = &self.config;
        let shape = [1, c.kv_heads, capacity, c.head_dim];
        let mut k = Vec::with_capacity(c.layers);
        let mut v = Vec::with_capacity(c.layers);
        for _ in 0..c.layers {
            k.push(Tensor::zeros(&shape, &self.device)?);
            v.push(Tensor::zeros(&shape, &self.device)?);
        }
        Ok(KvCache {
            k,
            v,
            len: 0,
            capacity,
        })
    }

    /// Runs `tokens` at the cache's next positions, appends their keys and
    /// values to it, and returns logits `[1 or tokens.len(), vocab]`.
    ///
    /// # Errors
    /// [`Error::BadRequest`] for no tokens; [`Error::BadToken`] for an id
    /// past the vocabulary; [`Error::ContextOverflow`] when the cache has
    /// no room for them (the cache is then unchanged); [`Error::Op`] when
    /// an op fails.
    pub fn forward(
        &self,
        tokens: &[u32],
        cache: &mut KvCache<T>,
        logits: Logits,
    ) -> Result<Tensor<T>> {
        let ids = self.token_ids(tokens, cache)?;
        self.run(&ids, cache, logits, None)
    }

    /// [`Llama::forward`] with the pass's device work recorded and launched
    /// as graphs (CUDA or HIP graphs), one per block: the GPU runs a block
    /// while the host records the next, and each block's graph is kept and
    /// updated from one call to the next (a decode step's kernels are the
    /// same every time). The same logits and cache, bit for bit; where the
    /// device does not record (the Cpu, the emulator), the plain pass.
    ///
    /// ```
    /// use ferrocm_models::{synthetic::SyntheticModel, Arch, Llama, Logits, StepGraphs};
    /// use ferrocm_ops::{quant::gguf::Gguf, Device};
    /// let file = Gguf::from_bytes(SyntheticModel::new(Arch::Llama).to_gguf()?.to_bytes()?)?;
    /// let model = Llama::<f32>::load(&file, &Device::Cpu, &Default::default())?;
    /// let (mut a, mut b) = (model.new_cache(8)?, model.new_cache(8)?);
    /// let mut graphs = StepGraphs::new(&model);
    /// model.forward(&[1, 2], &mut a, Logits::Last)?;
    /// model.forward(&[1, 2], &mut b, Logits::Last)?;
    /// let plain = model.forward(&[3], &mut a, Logits::Last)?;
    /// let recorded = model.forward_graph(&[3], &mut b, Logits::Last, &mut graphs)?;
    /// assert_eq!(plain.to_vec()?, recorded.to_vec()?);
    /// # Ok::<(), ferrocm_models::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Llama::forward`]; an op that cannot be recorded (a copy to the
    /// host) is [`Error::Op`], and the cache is then unchanged. `graphs`
    /// made for another model is [`Error::BadRequest`].
    pub fn forward_graph(
        &self,
        tokens: &[u32],
        cache: &mut KvCache<T>,
        logits: Logits,
        graphs: &mut StepGraphs,
    ) -> Result<Tensor<T>> {
        self.check_graphs(graphs)?;
        // The ids go up before the recording: a graph cannot hold a copy
        // from the host.
        let ids = self.token_ids(tokens, cache)?;
        let pos = cache.len;
        let out = self.run(&ids, cache, logits, Some(graphs));
        if out.is_err() {
            cache.len = pos;
        }
        out
    }

    /// [`Llama::forward`] (with `graphs`, [`Llama::forward_graph`]) of token
    /// ids already on the model's device: a 1-D `u32` tensor, such as the
    /// token [`Sampler::choose_on_device`](crate::Sampler::choose_on_device)
    /// picked from the last step's logits, so that the step is queued
    /// before the host has read that token. An id past the vocabulary is
    /// not seen here: the embedding's lookup reports it at the device's
    /// next wait ([`ferrocm_ops::Error`]'s `IdOutOfRange`).
    ///
    /// ```
    /// use ferrocm_models::{synthetic::SyntheticModel, Arch, Llama, Logits};
    /// use ferrocm_ops::{quant::gguf::Gguf, Device, Tensor};
    /// let file = Gguf::from_bytes(SyntheticModel::new(Arch::Llama).to_gguf()?.to_bytes()?)?;
    /// let model = Llama::<f32>::load(&file, &Device::Cpu, &Default::default())?;
    /// let (mut a, mut b) = (model.new_cache(8)?, model.new_cache(8)?);
    /// let ids = Tensor::from_slice(&[1u32, 2], &[2], &Device::Cpu)?;
    /// let on_device = model.forward_ids(&ids, &mut a, Logits::Last, None)?;
    /// let from_host = model.forward(&[1, 2], &mut b, Logits::Last)?;
    /// assert_eq!(on_device.to_vec()?, from_host.to_vec()?);
    /// # Ok::<(), ferrocm_models::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::BadRequest`] for ids that are not a non-empty 1-D tensor
    /// on the model's device; otherwise as [`Llama::forward_graph`].
    pub fn forward_ids(
        &self,
        ids: &Tensor<u32>,
        cache: &mut KvCache<T>,
        logits: Logits,
        graphs: Option<&mut StepGraphs>,
    ) -> Result<Tensor<T>> {
        if ids.rank() != 1 || ids.device() != &self.device {
            return Err(Error::BadRequest {
                op: "Llama::forward_ids",
                what: format!(
                    "ids of shape {:?} on {} (1-D, on the model's {})",
                    ids.shape(),
                    ids.device(),
                    self.device
                ),
            });
        }
        self.check_pass(ids.elem_count(), cache)?;
        match graphs {
            Some(graphs) => {
                self.check_graphs(graphs)?;
                let pos = cache.len;
                let out = self.run(ids, cache, logits, Some(graphs));
                if out.is_err() {
                    cache.len = pos;
                }
                out
            }
            None => self.run(ids, cache, logits, None),
        }
    }

    /// The checked token ids of a pass, on the device.
    fn token_ids(&self, tokens: &[u32], cache: &KvCache<T>) -> Result<Tensor<u32>> {
        let c = &self.config;
        if let Some(&id) = tokens.iter().find(|&&id| id as usize >= c.vocab) {
            return Err(Error::BadToken { id, vocab: c.vocab });
        }
        self.check_pass(tokens.len(), cache)?;
        Ok(Tensor::from_slice(tokens, &[tokens.len()], &self.device)?)
    }

    /// Whether a pass of `t` tokens may run on `cache`.
    fn check_pass(&self, t: usize, cache: &KvCache<T>) -> Result<()> {
        let c = &self.config;
        if t == 0 {
            return Err(Error::BadRequest {
                op: "Llama::forward",
                what: "no tokens".into(),
            });
        }
        let pos = cache.len;
        if pos + t > cache.capacity {
            return Err(Error::ContextOverflow {
                needed: pos + t,
                context: cache.capacity,
            });
        }
        if cache.k.len() != c.layers {
            return Err(Error::BadRequest {
                op: "Llama::forward",
                what: format!(
                    "a cache of {} blocks for a model of {}",
                    cache.k.len(),
                    c.layers
                ),
            });
        }
        Ok(())
    }

    /// Whether `graphs` were made for this model.
    fn check_graphs(&self, graphs: &StepGraphs) -> Result<()> {
        if graphs.blocks != self.blocks.len() {
            return Err(Error::BadRequest {
                op: "Llama::forward_graph",
                what: format!(
                    "graphs for {} blocks, a model of {}",
                    graphs.blocks,
                    self.blocks.len()
                ),
            });
        }
        Ok(())
    }

    /// The pass of checked `ids` at the cache's next positions; with
    /// `graphs`, each block's work recorded and launched as one graph (the
    /// embedding with the first, the logits with the last), so that the
    /// GPU runs a block while the host records the next.
    fn run(
        &self,
        ids: &Tensor<u32>,
        cache: &mut KvCache<T>,
        logits: Logits,
        graphs: Option<&mut StepGraphs>,
    ) -> Result<Tensor<T>> {
        if self.device == Device::Cpu {
            // The step's ops (some 300 in a decode step) from a worker
            // thread, rather than each handing its loop to the pool.
            return ferrocm_ops::engine::cpu::on_worker(|| {
                self.run_blocks(ids, cache, logits, graphs)
            });
        }
        self.run_blocks(ids, cache, logits, graphs)
    }

    /// [`Llama::run`] on the calling thread.
    fn run_blocks(
        &self,
        ids: &Tensor<u32>,
        cache: &mut KvCache<T>,
        logits: Logits,
        mut graphs: Option<&mut StepGraphs>,
    ) -> Result<Tensor<T>> {
        let c = &self.config;
        let t = ids.shape()[0];
        let pos = cache.len;
        // The residual stream and the next block's normed input, passed
        // from block to block; the logits once the last block ran.
        let (mut x, mut h, mut out) = (None, None, None);
        let last = self.blocks.len() - 1;
        let per = graphs.as_ref().map_or(last + 1, |g| g.blocks_per_graph);
        for first in (0..=last).step_by(per) {
            let mut chunk = || -> Result<()> {
                for l in first..(first + per).min(last + 1) {
                    if l == 0 {
                        let mut x0 = self.embed.embedding(ids)?;
                        if c.arch.is_gemma() {
                            x0 = x0.affine((c.hidden as f32).sqrt(), 0.0)?;
                        }
                        let first = &self.blocks[0];
                        h = Some(match q8(t, &first.qkv.weights()) {
                            true => Input::Q8(x0.rms_norm_q8(&first.attn_norm, c.rms_eps)?),
                            false => Input::Dense(x0.rms_norm(&first.attn_norm, c.rms_eps)?),
                        });
                        x = Some(x0);
                    }
                    let (x_in, h_in) = (x.take().expect("set"), h.take().expect("set"));
                    let (x_out, h_out) = self.block(l, x_in, &h_in, cache, pos, t, logits)?;
                    if l < last {
                        (x, h) = (Some(x_out), Some(h_out));
                        continue;
                    }
                    // The logits' input when only the last of several
                    // positions is wanted stays dense: it is narrowed.
                    let h = match h_out {
                        Input::Dense(h) if logits == Logits::Last && t > 1 => {
                            Input::Dense(h.narrow(0, t - 1, 1)?)
                        }
                        h => h,
                    };
                    let logits = project(&self.output, &h)?;
                    out = Some(match c.final_softcap {
                        Some(cap) => logits.affine(1.0 / cap, 0.0)?.tanh()?.affine(cap, 0.0)?,
                        None => logits,
                    });
                }
                Ok(())
            };
            match graphs.as_deref_mut() {
                Some(g) => g.graphs[first / per].run(chunk)?,
                None => chunk()?,
            }
        }
        cache.len = pos + t;
        Ok(out.expect("the last block sets it"))
    }

    /// Block `l` on the residual stream `x` and its normed input `h` at
    /// positions `pos..pos + t`: the new residual stream, and its norm by
    /// the next block's attention norm (the final norm after the last).
    #[allow(clippy::too_many_arguments)]
    fn block(
        &self,
        l: usize,
        x: Tensor<T>,
        h: &Input<T>,
        cache: &mut KvCache<T>,
        pos: usize,
        t: usize,
        logits: Logits,
    ) -> Result<(Tensor<T>, Input<T>)> {
        let (b, eps) = (&self.blocks[l], self.config.rms_eps);
        let act_fn = self.activation();
        let mut attn = self.attention(b, h, cache, l, pos)?;
        if let Some([post, _]) = &b.post_norms {
            attn = attn.rms_norm(post, eps)?;
        }
        // Where a norm's output feeds only quantized products, it is
        // stored in their 8-bit form (decode).
        let (x, normed) = match q8(t, &b.gate_up.weights()) {
            true => {
                let (sum, normed) = attn.add_rms_norm_q8(&x, &b.ffn_norm, eps)?;
                (sum, Input::Q8(normed))
            }
            false => {
                let (sum, normed) = attn.add_rms_norm(&x, &b.ffn_norm, eps)?;
                (sum, Input::Dense(normed))
            }
        };
        let act = match &b.gate_up {
            // One [t, 2 ffn] product: the gate and up halves read in place.
            Stacked::One(w, _) => match (w, &normed, q8(t, &[&b.down])) {
                // Dense: the gated unit fused into the product (decode).
                (Weight::Dense(w), Input::Dense(x), false) => {
                    Input::Dense(x.linear_glu(w, act_fn)?)
                }
                (w, normed, down_q8) => {
                    let y = project(w, normed)?;
                    match down_q8 {
                        true => Input::Q8(y.glu_halves_q8(act_fn)?),
                        false => Input::Dense(y.glu_halves(act_fn)?),
                    }
                }
            },
            Stacked::Parts(ws) => {
                Input::Dense(project(&ws[0], &normed)?.glu(&project(&ws[1], &normed)?, act_fn)?)
            }
        };
        let mut ffn = project(&b.down, &act)?;
        if let Some([_, post]) = &b.post_norms {
            ffn = ffn.rms_norm(post, eps)?;
        }
        let (next, next_q8) = match self.blocks.get(l + 1) {
            Some(n) => (&n.attn_norm, q8(t, &n.qkv.weights())),
            None => (
                &self.norm,
                q8(t, &[&self.output]) && (t == 1 || logits == Logits::All),
            ),
        };
        Ok(match next_q8 {
            true => {
                let (sum, normed) = ffn.add_rms_norm_q8(&x, next, eps)?;
                (sum, Input::Q8(normed))
            }
            false => {
                let (sum, normed) = ffn.add_rms_norm(&x, next, eps)?;
                (sum, Input::Dense(normed))
            }
        })
    }

    /// The feed-forward's gating activation: GELU (tanh) for Gemma, SiLU
    /// for the others.
    fn activation(&self) -> Activation {
        match self.config.arch.is_gemma() {
            true => Activation::Gelu,
            false => Activation::Silu,
        }
    }

    /// The attention sublayer of block `l` for `h` `[t, hidden]` at
    /// positions `pos..pos + t`: `[t, hidden]` before the residual add.
    fn attention(
        &self,
        b: &Block<T>,
        h: &Input<T>,
        cache: &mut KvCache<T>,
        l: usize,
        pos: usize,
    ) -> Result<Tensor<T>> {
        let c = &self.config;
        let t = match h {
            Input::Dense(h) => h.shape()[0],
            Input::Q8(h) => h.shape()[0],
        };
        let d = c.head_dim;
        let [q, k, v]: [Tensor<T>; 3] = b
            .qkv
            .forward(h, b.qkv_bias.as_ref())?
            .try_into()
            .expect("three parts");
        // (t, heads, d) as the projection leaves them.
        let mut q = q.reshape(&[1, t, c.heads, d])?;
        let mut k = k.reshape(&[1, t, c.kv_heads, d])?;
        let v = v.reshape(&[1, t, c.kv_heads, d])?;
        if let Some([qn, kn]) = &b.qk_norm {
            q = q.rms_norm(qn, c.rms_eps)?;
            k = k.rms_norm(kn, c.rms_eps)?;
        }
        // q rotated to (heads, t, d) for the attention; k rotated and v
        // written into the cache at pos, in one op.
        let mode = match c.arch.rope_interleaved() {
            true => RopeMode::Interleaved,
            false => RopeMode::Halves,
        };
        let (cos, sin) = match (&self.rope_swa, b.window) {
            (Some((cos, sin)), Some(_)) => (cos, sin),
            _ => (&self.cos, &self.sin),
        };
        let q = q.rope_into_cache(
            &k,
            &v,
            cos,
            sin,
            pos,
            mode,
            &mut cache.k[l],
            &mut cache.v[l],
        )?;
        // A sliding-window block's first query (at pos) sees nothing before
        // pos + 1 - window: the keys start there (positions are relative,
        // as causal attention aligns queries to the keys' end).
        let start = b.window.map_or(0, |w| (pos + 1).saturating_sub(w));
        let keys = cache.k[l].narrow(2, start, pos + t - start)?;
        let values = cache.v[l].narrow(2, start, pos + t - start)?;
        let mut opts = AttentionOptions::new().causal();
        opts.scale = c.attn_scale;
        opts.window = b.window;
        opts.softcap = c.attn_softcap;
        let o = q.attention(&keys, &values, &opts)?;
        let o = o
            .transpose(1, 2)?
            .contiguous()?
            .reshape(&[t, c.heads * d])?;
        Ok(b.wo.forward(&o)?)
    }
}

/// The rotary tables `[context, rope_dims / 2]`: position `p`, pair `i`
/// turns by `p / linear · base^(-2i / rope_dims) / factor[i]` (llama.cpp's
/// `rope_yarn` without YaRN; `factor` from `rope_freqs.weight`, Llama 3's
/// long-context scaling, else 1).
fn rope_tables<T: WithDType>(
    g: &Gguf,
    c: &Config,
    base: f32,
    scaling: &RopeScaling,
    context: usize,
    dev: &Device,
) -> Result<(Tensor<T>, Tensor<T>)> {
    let half = c.rope_dims / 2;
    let factors = match g.tensor_info("rope_freqs.weight") {
        Some(_) => {
            let f = dense::<f32>(g, "rope_freqs.weight", &[half], &Device::Cpu)?.to_vec()?;
            if let Some(bad) = f.iter().find(|v| !(v.is_finite() && **v > 0.0)) {
                return Err(Error::Unsupported {
                    what: format!("a rope frequency factor of {bad}"),
                    why: "factors must be positive and finite".into(),
                });
            }
            f.into_iter().map(f64::from).collect()
        }
        None => vec![1.0; half],
    };
    let scale = match *scaling {
        RopeScaling::None => 1.0,
        RopeScaling::Linear(f) => 1.0 / f as f64,
    };
    let mut cos = Vec::with_capacity(context * half);
    let mut sin = Vec::with_capacity(context * half);
    for p in 0..context {
        for (i, f) in factors.iter().enumerate() {
            let theta = (base as f64).powf(-2.0 * i as f64 / c.rope_dims as f64);
            let a = p as f64 * scale * theta / f;
            cos.push(T::from_f64(a.cos()));
            sin.push(T::from_f64(a.sin()));
        }
    }
    Ok((
        Tensor::from_vec(cos, &[context, half], dev)?,
        Tensor::from_vec(sin, &[context, half], dev)?,
    ))
}
