//! `ferrocm run`, `chat` and `tokenize`: a Llama-family model from a GGUF
//! file (or a synthetic one), a prompt in, text streamed out, and where the
//! time went.

use ferrocm_models::chat::{check_vocabularies, encode_prompt};
use ferrocm_models::synthetic::SyntheticModel;
use ferrocm_models::{
    Chat, Generation, Llama, LoadOptions, SamplingOptions, StopStrings, Tokenizer,
};
use ferrocm_ops::quant::gguf::{Gguf, GgufWriter};
use ferrocm_ops::{DType, Device, QuantFormat, WithDType, bf16, f16};
use std::io::Write;

/// A prompt.
#[derive(Clone, Debug)]
pub enum Prompt {
    /// Token ids as given.
    Ids(Vec<u32>),
    /// Text, through the file's tokenizer (BOS as the file asks; special
    /// tokens written in it parsed).
    Text(String),
}

/// What to run.
pub struct RunRequest {
    /// A GGUF path, or `synthetic:7b:FORMAT` / `synthetic:tiny:FORMAT[:ARCH]`
    /// (FORMAT a GGML type name such as q4_0, q4_k, q8_0, or f16, bf16, f32;
    /// ARCH llama by default, or qwen2, qwen3, gemma, gemma2, gemma3).
    pub model: String,
    /// The prompt.
    pub prompt: Prompt,
    /// Tokens to generate.
    pub max_tokens: usize,
    /// Positions to prepare (default: the model's, at most 4096).
    pub context: Option<usize>,
    /// The activations' dtype.
    pub dtype: DType,
    /// How tokens are chosen.
    pub sampling: SamplingOptions,
    /// Print the text (a text prompt) or the ids as they come.
    pub stream: bool,
    /// Text that ends the generation (not printed).
    pub stop: Vec<String>,
    /// Go on past end-of-sequence/end-of-turn tokens.
    pub ignore_eos: bool,
    /// Never choose end-of-sequence/end-of-turn tokens (with `ignore_eos`,
    /// llama.cpp's `--ignore-eos`: the tokens' logits set to -inf).
    pub ban_eos: bool,
    /// Blocks a graph of a decode step, where the device records graphs
    /// ([`Generation::record_graphs`]; 0: none; `None`: the default).
    pub graph_blocks: Option<usize>,
    /// Whether decode may be pipelined ([`Generation::pipeline`]).
    pub pipeline: bool,
}

/// What a run measured.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// The device.
    pub device: String,
    /// Seconds to read the file (or make the synthetic one) and upload it.
    pub load_s: f64,
    /// Seconds of the warm-up run (a GPU compiling or loading the kernels
    /// the prompt and decode use; none on the Cpu and the emulator).
    pub warmup_s: f64,
    /// Prompt tokens and their tokens/s (first token chosen included).
    pub prompt_tokens: usize,
    /// Prompt tokens per second.
    pub prefill_tps: f64,
    /// Seconds from the start of the prompt's forward to the first token.
    pub first_token_s: f64,
    /// Decode steps timed and their tokens/s.
    pub decode_tokens: usize,
    /// Decoded tokens per second.
    pub decode_tps: f64,
    /// Share of the decode time the host spent queueing the forward passes
    /// (near 1: bound by launches on the host).
    pub decode_queueing_share: f64,
    /// Weight bytes on the device.
    pub weight_bytes: usize,
    /// KV cache bytes.
    pub cache_bytes: usize,
    /// Weight bytes read per decoded token per second (GB/s).
    pub weight_gbps: f64,
    /// The most bytes the device held (weights, cache, activations).
    pub peak_bytes: u64,
    /// Kernel and library launches per decode step (sampling's included).
    pub launches_per_token: f64,
    /// Decode steps launched as one graph each.
    pub decode_graphs: usize,
    /// Why decode steps stopped being recorded as graphs, if they did.
    pub graphs_off: Option<String>,
    /// Whether decode was pipelined.
    pub pipelined: bool,
    /// The generated ids.
    pub tokens: Vec<u32>,
    /// Their text (when the file has a tokenizer), cut at a stop string.
    pub text: Option<String>,
}

impl RunReport {
    /// One JSON object.
    pub fn to_json(&self) -> String {
        serde_json::json!({
            "device": self.device,
            "load_s": self.load_s,
            "warmup_s": self.warmup_s,
            "prompt_tokens": self.prompt_tokens,
            "prefill_tokens_per_s": self.prefill_tps,
            "first_token_s": self.first_token_s,
            "decode_tokens": self.decode_tokens,
            "decode_tokens_per_s": self.decode_tps,
            "decode_queueing_share": self.decode_queueing_share,
            "weight_bytes": self.weight_bytes,
            "cache_bytes": self.cache_bytes,
            "decode_weight_gb_per_s": self.weight_gbps,
            "peak_bytes": self.peak_bytes,
            "launches_per_token": self.launches_per_token,
            "decode_graphs": self.decode_graphs,
            "graphs_off": self.graphs_off,
            "decode_pipelined": self.pipelined,
            "tokens": self.tokens,
            "text": self.text,
        })
        .to_string()
    }
}

/// The GGUF a `synthetic:SIZE:FORMAT` name makes.
fn synthetic_file(spec: &str) -> Result<Gguf, String> {
    let bytes = synthetic_writer(spec)?
        .to_bytes()
        .map_err(|e| e.to_string())?;
    Gguf::from_bytes(bytes).map_err(|e| e.to_string())
}

/// The GGUF writer of a `SIZE:FORMAT` synthetic model (see
/// [`RunRequest::model`]): `ferrocm synthesize` writes it to a file that
/// llama.cpp loads too.
///
/// # Errors
/// An unknown size or format, or a format that cannot hold the shapes.
pub fn synthetic_writer(spec: &str) -> Result<GgufWriter, String> {
    let mut parts = spec.split(':');
    let (size, format) = (parts.next().unwrap_or(""), parts.next().unwrap_or("f16"));
    let arch = match parts.next() {
        None => ferrocm_models::Arch::Llama,
        Some(name) => ferrocm_models::Arch::from_name(name)
            .ok_or_else(|| format!("synthetic model architecture {name:?}"))?,
    };
    if let Some(rest) = parts.next() {
        return Err(format!("synthetic model {spec:?}: unexpected {rest:?}"));
    }
    let (format, dense) = match format.to_ascii_lowercase().as_str() {
        "f32" => (None, DType::F32),
        "f16" => (None, DType::F16),
        "bf16" => (None, DType::BF16),
        other => match other.parse::<QuantFormat>() {
            Ok(f) => (Some(f), DType::F32),
            Err(e) => return Err(format!("synthetic model format {other:?}: {e}")),
        },
    };
    let m = match size {
        "7b" => SyntheticModel {
            dense,
            arch,
            ..SyntheticModel::llama_7b(format)
        },
        "tiny" => SyntheticModel {
            format,
            dense,
            ..SyntheticModel::new(arch)
        },
        other => return Err(format!("synthetic model size {other:?} (7b or tiny)")),
    };
    m.to_gguf().map_err(|e| e.to_string())
}

/// A GGUF path or a `synthetic:SIZE:FORMAT` name, opened.
///
/// # Errors
/// The file's or the name's problem, as a message.
pub fn open_model_file(spec: &str) -> Result<Gguf, String> {
    match spec.strip_prefix("synthetic:") {
        Some(spec) => synthetic_file(spec),
        None => Gguf::open(spec).map_err(|e| e.to_string()),
    }
}

/// The file's tokenizer, if it has one (`tokenizer.ggml.model`).
///
/// # Errors
/// A tokenizer the file describes badly, as a message.
pub fn file_tokenizer(g: &Gguf) -> Result<Option<Tokenizer>, String> {
    if g.get("tokenizer.ggml.model").is_none() {
        return Ok(None);
    }
    Tokenizer::from_gguf(g).map(Some).map_err(|e| e.to_string())
}

/// Loads and runs `req` on `device`.
///
/// # Errors
/// A message naming what failed (the file, the model, a request past the
/// context, the device).
pub fn run(
    req: &RunRequest,
    device: &Device,
    progress: impl FnMut(u64, u64),
) -> Result<RunReport, String> {
    match req.dtype {
        DType::F32 => run_typed::<f32>(req, device, progress),
        DType::F16 => run_typed::<f16>(req, device, progress),
        DType::BF16 => run_typed::<bf16>(req, device, progress),
        other => Err(format!("activations in {other:?}: f32, f16 or bf16")),
    }
}

fn run_typed<T: WithDType>(
    req: &RunRequest,
    device: &Device,
    progress: impl FnMut(u64, u64),
) -> Result<RunReport, String> {
    let start = std::time::Instant::now();
    let g = open_model_file(&req.model)?;
    let tokenizer = file_tokenizer(&g)?;
    let prompt = match (&req.prompt, &tokenizer) {
        (Prompt::Ids(ids), _) => ids.clone(),
        (Prompt::Text(text), Some(t)) => encode_prompt(t, text).map_err(|e| e.to_string())?,
        (Prompt::Text(_), None) => {
            return Err(format!(
                "{}: the file has no tokenizer (tokenizer.ggml.model); pass --prompt-ids",
                req.model
            ));
        }
    };
    let opts = LoadOptions {
        context: req.context,
    };
    let model =
        Llama::<T>::load_with_progress(&g, device, &opts, progress).map_err(|e| e.to_string())?;
    drop(g);
    if let Some(t) = &tokenizer {
        check_vocabularies(&model, t).map_err(|e| e.to_string())?;
    }
    let load_s = start.elapsed().as_secs_f64();
    // llama.cpp's --ignore-eos: the end-of-generation tokens are never
    // chosen (not chosen and then passed over).
    let mut sampling = req.sampling.clone();
    if let (Some(t), true) = (&tokenizer, req.ban_eos) {
        sampling.banned.extend_from_slice(t.end_of_generation());
    }
    let mut generation = Generation::new(&model, sampling).map_err(|e| e.to_string())?;
    if let (Some(t), false) = (&tokenizer, req.ignore_eos) {
        generation.stop_at(t.end_of_generation());
    }
    if !req.pipeline {
        generation.pipeline(false);
    }
    if let Some(n) = req.graph_blocks {
        generation.record_graphs(n);
    }
    // A GPU compiles (or loads) each kernel at its first launch: do that
    // for the prompt's shapes and a decode step before the clock starts.
    let mut warmup_s = 0.0;
    if device.is_gpu() && req.max_tokens > 1 {
        let warmup = std::time::Instant::now();
        generation
            .warm_up(prompt.len())
            .map_err(|e| e.to_string())?;
        warmup_s = warmup.elapsed().as_secs_f64();
    }
    // Text is shown for a text prompt; ids otherwise (a tokenizer may still
    // give the summary's text).
    let show_text = matches!(req.prompt, Prompt::Text(_));
    let mut stream = tokenizer.as_ref().map(|t| t.stream());
    let mut stop = StopStrings::new(req.stop.iter().cloned());
    let mut text = String::new();
    let stdout = std::io::stdout();
    let mut first_launches = None;
    let mut first_token_s = 0.0;
    let generated = std::time::Instant::now();
    let tokens = generation
        .generate(&prompt, req.max_tokens, |t| {
            first_launches.get_or_insert_with(|| {
                first_token_s = generated.elapsed().as_secs_f64();
                device.memory_stats().launches
            });
            let mut keep_going = true;
            let mut shown = String::new();
            if let Some(piece) = stream.as_mut().and_then(|s| s.push(t)) {
                let (out, stopped) = stop.push(&piece);
                shown = out;
                keep_going = !stopped;
            }
            text.push_str(&shown);
            if req.stream {
                let mut o = stdout.lock();
                let _ = if show_text {
                    write!(o, "{shown}")
                } else {
                    write!(o, "{t} ")
                };
                let _ = o.flush();
            }
            keep_going
        })
        .map_err(|e| e.to_string())?;
    if let Some(tail) = stream.as_mut().and_then(|s| s.finish()) {
        let (out, _) = stop.push(&tail);
        text.push_str(&out);
        if req.stream && show_text {
            let _ = write!(stdout.lock(), "{out}");
        }
    }
    let rest = stop.finish();
    text.push_str(&rest);
    if req.stream {
        let mut o = stdout.lock();
        let _ = if show_text {
            writeln!(o, "{rest}")
        } else {
            writeln!(o)
        };
    }
    let s = generation.stats();
    let stats = device.memory_stats();
    let launches = stats.launches - first_launches.unwrap_or(stats.launches);
    let weight_bytes = model.weight_bytes();
    let read = model.decode_read_bytes() as f64;
    Ok(RunReport {
        device: device.to_string(),
        load_s,
        warmup_s,
        prompt_tokens: s.prompt_tokens,
        prefill_tps: s.prefill_tokens_per_second(),
        first_token_s,
        decode_tokens: s.decode_tokens,
        decode_tps: s.decode_tokens_per_second(),
        decode_queueing_share: s.decode_queueing.as_secs_f64() / s.decode.as_secs_f64().max(1e-12),
        weight_bytes,
        cache_bytes: generation.cache().bytes(),
        weight_gbps: read * s.decode_tokens_per_second() / 1e9,
        peak_bytes: stats.peak_bytes_in_use,
        launches_per_token: launches as f64 / s.decode_tokens.max(1) as f64,
        decode_graphs: s.decode_graphs,
        graphs_off: s.graphs_off.clone(),
        pipelined: s.pipelined,
        tokens,
        text: tokenizer.as_ref().map(|_| text),
    })
}

/// What a chat session needs.
pub struct ChatRequest {
    /// A GGUF path or a synthetic name (see [`RunRequest::model`]).
    pub model: String,
    /// Tokens per reply at most.
    pub max_tokens: usize,
    /// Positions to prepare.
    pub context: Option<usize>,
    /// The activations' dtype.
    pub dtype: DType,
    /// How tokens are chosen.
    pub sampling: SamplingOptions,
    /// A system message first.
    pub system: Option<String>,
}

/// A chat over `input`'s lines (one message a line; `/exit` or the end
/// ends it), each reply streamed to `output` as it is generated. Returns
/// the turns and the decode speed over all replies.
///
/// # Errors
/// A message naming what failed (the file, its template, the context).
pub fn chat(
    req: &ChatRequest,
    device: &Device,
    input: impl std::io::BufRead,
    output: impl Write,
    prompt_marker: bool,
    progress: impl FnMut(u64, u64),
) -> Result<(usize, f64), String> {
    match req.dtype {
        DType::F32 => chat_typed::<f32>(req, device, input, output, prompt_marker, progress),
        DType::F16 => chat_typed::<f16>(req, device, input, output, prompt_marker, progress),
        DType::BF16 => chat_typed::<bf16>(req, device, input, output, prompt_marker, progress),
        other => Err(format!("activations in {other:?}: f32, f16 or bf16")),
    }
}

fn chat_typed<T: WithDType>(
    req: &ChatRequest,
    device: &Device,
    input: impl std::io::BufRead,
    mut output: impl Write,
    prompt_marker: bool,
    progress: impl FnMut(u64, u64),
) -> Result<(usize, f64), String> {
    let g = open_model_file(&req.model)?;
    let tokenizer = file_tokenizer(&g)?.ok_or_else(|| {
        format!(
            "{}: the file has no tokenizer (tokenizer.ggml.model)",
            req.model
        )
    })?;
    let opts = LoadOptions {
        context: req.context,
    };
    let model =
        Llama::<T>::load_with_progress(&g, device, &opts, progress).map_err(|e| e.to_string())?;
    drop(g);
    let mut chat =
        Chat::new(&model, &tokenizer, req.sampling.clone()).map_err(|e| e.to_string())?;
    if let Some(system) = &req.system {
        chat = chat.with_system(system.clone());
    }
    let (mut turns, mut decoded, mut seconds) = (0, 0, 0.0);
    let mut lines = input.lines();
    loop {
        if prompt_marker {
            let _ = write!(output, "> ");
            let _ = output.flush();
        }
        let Some(line) = lines.next() else { break };
        let line = line.map_err(|e| format!("reading the input: {e}"))?;
        let line = line.trim_end_matches('\r');
        if line == "/exit" {
            break;
        }
        if line.trim().is_empty() {
            continue;
        }
        chat.send(line, req.max_tokens, |piece| {
            let _ = write!(output, "{piece}");
            let _ = output.flush();
            true
        })
        .map_err(|e| e.to_string())?;
        let _ = writeln!(output);
        let s = chat.generation().stats();
        turns += 1;
        decoded += s.decode_tokens;
        seconds += s.decode.as_secs_f64();
    }
    Ok((turns, decoded as f64 / seconds.max(1e-12)))
}

/// `text`'s ids through a file's tokenizer and each id's piece as the
/// vocabulary writes it.
///
/// # Errors
/// The file without a tokenizer, or the tokenizer's error, as a message.
pub fn tokenize(
    model: &str,
    text: &str,
    add_special: bool,
    parse_special: bool,
) -> Result<Vec<(u32, String)>, String> {
    let g = open_model_file(model)?;
    let t = file_tokenizer(&g)?
        .ok_or_else(|| format!("{model}: the file has no tokenizer (tokenizer.ggml.model)"))?;
    let ids = t
        .encode_with(text, add_special, parse_special)
        .map_err(|e| e.to_string())?;
    Ok(ids
        .into_iter()
        .map(|id| (id, t.token_text(id).unwrap_or("").to_owned()))
        .collect())
}
