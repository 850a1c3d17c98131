//! `ferrocm run`: a Llama-family model from a GGUF file (or a synthetic
//! one), a prompt in, tokens streamed out, and where the time went.

use ferrocm_models::synthetic::SyntheticModel;
use ferrocm_models::{Generation, Llama, LoadOptions, SamplingOptions};
use ferrocm_ops::quant::gguf::Gguf;
use ferrocm_ops::{DType, Device, QuantFormat, WithDType, bf16, f16};
use std::io::Write;

/// What to run.
pub struct RunRequest {
    /// A GGUF path, or `synthetic:7b:FORMAT` / `synthetic:tiny:FORMAT`
    /// (FORMAT a GGML type name such as q4_0, q4_k, q8_0, or f16, bf16, f32).
    pub model: String,
    /// The prompt's token ids.
    pub prompt: Vec<u32>,
    /// Tokens to generate.
    pub max_tokens: usize,
    /// Positions to prepare (default: the model's, at most 4096).
    pub context: Option<usize>,
    /// The activations' dtype.
    pub dtype: DType,
    /// How tokens are chosen.
    pub sampling: SamplingOptions,
    /// Print each token id as it comes.
    pub stream: bool,
}

/// What a run measured.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// The device.
    pub device: String,
    /// Seconds to read the file (or make the synthetic one) and upload it.
    pub load_s: f64,
    /// Prompt tokens and their tokens/s (first token chosen included).
    pub prompt_tokens: usize,
    /// Prompt tokens per second.
    pub prefill_tps: f64,
    /// Decode steps timed and their tokens/s.
    pub decode_tokens: usize,
    /// Decoded tokens per second.
    pub decode_tps: f64,
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
    /// The generated ids.
    pub tokens: Vec<u32>,
}

impl RunReport {
    /// One JSON object.
    pub fn to_json(&self) -> String {
        serde_json::json!({
            "device": self.device,
            "load_s": self.load_s,
            "prompt_tokens": self.prompt_tokens,
            "prefill_tokens_per_s": self.prefill_tps,
            "decode_tokens": self.decode_tokens,
            "decode_tokens_per_s": self.decode_tps,
            "weight_bytes": self.weight_bytes,
            "cache_bytes": self.cache_bytes,
            "decode_weight_gb_per_s": self.weight_gbps,
            "peak_bytes": self.peak_bytes,
            "launches_per_token": self.launches_per_token,
            "tokens": self.tokens,
        })
        .to_string()
    }
}

/// The GGUF a `synthetic:SIZE:FORMAT` name makes.
fn synthetic(spec: &str) -> Result<Gguf, String> {
    let mut parts = spec.split(':');
    let (size, format) = (parts.next().unwrap_or(""), parts.next().unwrap_or("f16"));
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
            ..SyntheticModel::llama_7b(format)
        },
        "tiny" => SyntheticModel {
            format,
            dense,
            ..SyntheticModel::new(ferrocm_models::Arch::Llama)
        },
        other => return Err(format!("synthetic model size {other:?} (7b or tiny)")),
    };
    let bytes = m
        .to_gguf()
        .and_then(|w| Ok(w.to_bytes()?))
        .map_err(|e| e.to_string())?;
    Gguf::from_bytes(bytes).map_err(|e| e.to_string())
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
    let g = match req.model.strip_prefix("synthetic:") {
        Some(spec) => synthetic(spec)?,
        None => Gguf::open(&req.model).map_err(|e| e.to_string())?,
    };
    let opts = LoadOptions {
        context: req.context,
    };
    let model =
        Llama::<T>::load_with_progress(&g, device, &opts, progress).map_err(|e| e.to_string())?;
    drop(g);
    let load_s = start.elapsed().as_secs_f64();
    let mut generation =
        Generation::new(&model, req.sampling.clone()).map_err(|e| e.to_string())?;
    let stdout = std::io::stdout();
    let mut first_launches = None;
    let tokens = generation
        .generate(&req.prompt, req.max_tokens, |t| {
            first_launches.get_or_insert_with(|| device.memory_stats().launches);
            if req.stream {
                let mut o = stdout.lock();
                let _ = write!(o, "{t} ");
                let _ = o.flush();
            }
            true
        })
        .map_err(|e| e.to_string())?;
    if req.stream {
        let _ = writeln!(stdout.lock());
    }
    let s = generation.stats();
    let stats = device.memory_stats();
    let launches = stats.launches - first_launches.unwrap_or(stats.launches);
    let weight_bytes = model.weight_bytes();
    let read = model.decode_read_bytes() as f64;
    Ok(RunReport {
        device: device.to_string(),
        load_s,
        prompt_tokens: s.prompt_tokens,
        prefill_tps: s.prefill_tokens_per_second(),
        decode_tokens: s.decode_tokens,
        decode_tps: s.decode_tokens_per_second(),
        weight_bytes,
        cache_bytes: generation.cache().bytes(),
        weight_gbps: read * s.decode_tokens_per_second() / 1e9,
        peak_bytes: stats.peak_bytes_in_use,
        launches_per_token: launches as f64 / s.decode_tokens.max(1) as f64,
        tokens,
    })
}
