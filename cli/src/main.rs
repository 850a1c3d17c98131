//! The `ferrocm` command: `check`, `bench`, `kernels`, `info`, `gguf`,
//! `quantize`.
//!
//! Exit codes: 0 when the command did what it was asked and everything it
//! checked passed; 1 when something it ran failed (a check case, a bench
//! op, a kernel with local memory, an unreadable code object); 2 for a
//! usage error (an unknown flag or subcommand, a value that does not parse,
//! a device that does not answer).

use clap::{Args, Parser, Subcommand, ValueEnum};
use ferrocm_cli::{bench, check};
use ferrocm_host::{Device, WaveSize};
use ferrocm_ops::DType;
use std::io::Write;
use std::process::ExitCode;

/// `println!` that ignores a closed pipe (`ferrocm kernels | head`).
macro_rules! outln {
    ($($t:tt)*) => {{
        let _ = writeln!(std::io::stdout(), $($t)*);
    }};
}

/// ferrocm: Rust GPU kernels for AMD (and NVIDIA) GPUs, checked against the
/// CPU.
#[derive(Parser)]
#[command(
    name = "ferrocm",
    version,
    after_help = "Exit codes: 0 success; 1 a case, op or check failed; 2 usage error (bad flag or value, a device that does not answer).\nDevices: cpu, emulator (wave 32 and 64), emulator:32, emulator:64, emulator:64:nosan, rocm[:N], cuda[:N]."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Room for `run MODEL`, `serve`: one variant and one function
// each.
#[derive(Subcommand)]
enum Command {
    /// Run every op x dtype on the device against the Cpu backend; prints a
    /// table (or JSON) and fails when a case fails.
    Check(CheckArgs),
    /// Time every kernel family (or one) on the device as a share of its
    /// copy bandwidth, beside the Cpu backend.
    Bench(BenchArgs),
    /// Registers, LDS, scratch, spills and occupancy of every kernel per AMD
    /// arch; with a CUDA device, what the driver's compile of the PTX uses
    /// there (fails if a kernel not in kernels/ptxas-local-memory.txt uses
    /// local memory).
    Kernels(KernelsArgs),
    /// Devices found (name, arch, compute units, memory, wave size, LDS),
    /// code objects and PTX embedded, the libraries each GPU uses.
    Info,
    /// A GGUF file's metadata (long arrays summarised) and tensor table
    /// (name, type, shape, bytes).
    Gguf {
        /// The file.
        file: std::path::PathBuf,
    },
    /// Rewrite a GGUF file's f32/f16/bf16 weight matrices in a quantized
    /// format with GGML's reference quantizers (norms, biases and quantized
    /// tensors are copied; the output projection gets Q6_K unless --pure).
    Quantize {
        /// The GGUF file to read.
        input: std::path::PathBuf,
        /// The GGUF file to write.
        output: std::path::PathBuf,
        /// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, or
        /// the mixes Q4_K_M, Q5_K_M (Q4_K_S, Q5_K_S: Q4_K, Q5_K).
        r#type: String,
        /// Every weight matrix in TYPE, the output projection included.
        #[arg(long)]
        pure: bool,
    },
    /// Generate from a Llama-family GGUF model (llama, qwen2, qwen3): the
    /// text as it comes, then prefill and decode tokens/s.
    Run(RunArgs),
    /// An interactive chat through the model's chat template: a message a
    /// line on stdin (`/exit` or end of input ends it), replies streamed.
    Chat(ChatArgs),
    /// A text's token ids through a GGUF's tokenizer, with each token's piece.
    Tokenize(TokenizeArgs),
    /// Write a random-weight model as a GGUF file (the one `run
    /// synthetic:SIZE:FORMAT` makes in memory), for llama.cpp or ferrocm.
    Synthesize {
        /// tiny:FORMAT[:ARCH] or 7b:FORMAT[:ARCH] (FORMAT q4_0, q4_k, q8_0, ...,
        /// f16, bf16, f32; ARCH llama, qwen2, qwen3, gemma, gemma2, gemma3).
        spec: String,
        /// The GGUF file to write.
        output: std::path::PathBuf,
    },
}

/// The model and where it runs (`run`, `chat`).
#[derive(Args)]
struct ModelArgs {
    /// A GGUF file, or synthetic:7b:FORMAT[:ARCH] / synthetic:tiny:FORMAT[:ARCH]
    /// for random weights made in memory (Llama-7B shapes or a tiny model,
    /// with a small SentencePiece vocabulary and a ChatML template; FORMAT
    /// q4_0, q4_k, q8_0, ..., f16, bf16, f32; ARCH llama by default, qwen2,
    /// qwen3, gemma, gemma2, gemma3).
    model: String,
    /// Device: cpu, emulator:32, emulator:64, rocm[:N], cuda[:N]. Default:
    /// the first GPU that answers, else the Cpu.
    #[arg(long, value_name = "D", value_parser = parse_device)]
    device: Option<Device>,
    /// The activations' and cache's dtype: f32, f16, bf16. Default: bf16 on
    /// a GPU, f32 elsewhere.
    #[arg(long)]
    dtype: Option<String>,
    /// Positions to prepare (default: the model's context, at most 4096).
    #[arg(long, value_name = "N")]
    ctx: Option<usize>,
    /// Tokens to generate (per reply in a chat).
    #[arg(long, default_value_t = 128)]
    max_tokens: usize,
}

/// How tokens are chosen (llama.cpp's defaults).
#[derive(Args)]
struct SamplingArgs {
    /// 0 takes the most likely token every time.
    #[arg(long, default_value_t = 0.8)]
    temperature: f32,
    /// Keep the K most likely tokens (0: all).
    #[arg(long, default_value_t = 40)]
    top_k: usize,
    /// Keep the most likely tokens summing to P.
    #[arg(long, default_value_t = 0.95)]
    top_p: f32,
    /// Keep tokens at least M times as likely as the best.
    #[arg(long, default_value_t = 0.05)]
    min_p: f32,
    /// Divide recent tokens' logits by this (1: off).
    #[arg(long, default_value_t = 1.0)]
    repeat_penalty: f32,
    /// The sampler's seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

impl SamplingArgs {
    fn options(&self) -> ferrocm_models::SamplingOptions {
        ferrocm_models::SamplingOptions {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            repeat_last_n: 64,
            seed: self.seed,
            banned: Vec::new(),
        }
    }
}

#[derive(Args)]
struct RunArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// The prompt as text, through the file's tokenizer (BOS as the file
    /// asks; special tokens such as <|eot_id|> written in it are parsed).
    #[arg(short, long, conflicts_with_all = ["prompt_ids", "random_prompt"])]
    prompt: Option<String>,
    /// The prompt as token ids, comma-separated.
    #[arg(long, value_delimiter = ',', value_name = "ID,ID,...")]
    prompt_ids: Vec<u32>,
    /// A prompt of N random token ids (seeded by --seed) for timing: implies
    /// --ignore-eos.
    #[arg(long, value_name = "N", conflicts_with = "prompt_ids")]
    random_prompt: Option<usize>,
    /// Stop when the generated text contains this (repeatable; not printed).
    #[arg(long, value_name = "TEXT")]
    stop: Vec<String>,
    /// Never choose end-of-sequence and end-of-turn tokens (their logits
    /// set to -inf, as llama.cpp's --ignore-eos): generate --max-tokens.
    #[arg(long)]
    ignore_eos: bool,
    /// Blocks recorded into each graph of a decode step on a GPU (CUDA or
    /// HIP graphs; the same tokens): 0 queues every kernel one by one.
    /// Default: the whole step when decode is pipelined, 2 otherwise.
    #[arg(long, value_name = "N")]
    graph_blocks: Option<usize>,
    /// Read each decode step's token before queueing the next step (by
    /// default, with greedy sampling on a GPU, the next step is queued
    /// first, from the token on the device; the same tokens).
    #[arg(long)]
    no_pipeline: bool,
    #[command(flatten)]
    sampling: SamplingArgs,
    /// One JSON object at the end instead of the streamed text and summary.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct ChatArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// A system message to start with.
    #[arg(long, value_name = "TEXT")]
    system: Option<String>,
    #[command(flatten)]
    sampling: SamplingArgs,
}

#[derive(Args)]
struct TokenizeArgs {
    /// A GGUF file (or a synthetic name).
    model: String,
    /// The text.
    #[arg(short, long)]
    prompt: String,
    /// Leave out BOS/EOS even where the file asks for them.
    #[arg(long)]
    no_bos: bool,
    /// Take control tokens written in the text as plain text.
    #[arg(long)]
    no_parse_special: bool,
    /// Only the ids, as one JSON array (llama-tokenize --ids prints the same).
    #[arg(long)]
    ids: bool,
}

/// Where `check` and `bench` run.
#[derive(Args)]
struct DeviceArg {
    /// Device: cpu, emulator (both wave sizes), emulator:32, emulator:64,
    /// emulator:64:nosan, rocm[:N], cuda[:N]. Default: FERROCM_DEVICE if
    /// set, else the first GPU that answers (ROCm, then CUDA), else the
    /// emulator at wave 32 and 64.
    #[arg(long, value_name = "D", env = "FERROCM_DEVICE", value_parser = parse_devices)]
    device: Option<Devices>,
}

#[derive(Args)]
struct CheckArgs {
    #[command(flatten)]
    device: DeviceArg,
    /// One JSON array of {op, dtype, device, layout, max_abs_err,
    /// max_rel_err, passed, error} instead of the table.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct BenchArgs {
    #[command(flatten)]
    device: DeviceArg,
    /// JSON instead of the table.
    #[arg(long)]
    json: bool,
    /// Rows x cols of the large inputs. Default: 16384x4096 on a GPU,
    /// 1024x1024 on the Cpu and the emulator.
    #[arg(long, value_name = "ROWSxCOLS", value_parser = parse_size)]
    size: Option<(usize, usize)>,
    /// Timed calls per op, queued back to back (the best of five rounds'
    /// averages is reported). Default: 20 on a GPU, 5 elsewhere.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    reps: Option<u32>,
    /// Do not time the Cpu backend beside the device.
    #[arg(long)]
    no_cpu: bool,
    /// Only this family's rows.
    #[arg(long, value_enum, value_name = "FAMILY")]
    only: Option<Family>,
}

#[derive(Args)]
struct KernelsArgs {
    /// Only the code object of this AMD arch (gfx942, gfx1100, ...).
    #[arg(long, value_name = "ARCH", conflicts_with = "device")]
    arch: Option<String>,
    /// A CUDA device (cuda or cuda:N): report what the driver's compile of
    /// the PTX uses there instead of the AMD code objects.
    #[arg(long, value_name = "cuda[:N]", value_parser = parse_device)]
    device: Option<Device>,
    /// JSON instead of the table.
    #[arg(long)]
    json: bool,
}

/// `bench --only`.
#[derive(Clone, Copy, ValueEnum)]
enum Family {
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
    /// Quantized weights: the linear layer at 1 and 8 rows, dequantize.
    Quant,
    /// Convolution: ResNet and Stable-Diffusion conv2d shapes, depthwise.
    Conv,
    /// A random-weight Llama (7B shapes on a GPU, one block of them on the
    /// Cpu, tiny in the emulator): prefill 512 tokens, decode. Only when
    /// named: it takes minutes.
    Model,
}

impl From<Family> for bench::BenchFamily {
    fn from(f: Family) -> Self {
        match f {
            Family::Elementwise => bench::BenchFamily::Elementwise,
            Family::Indexing => bench::BenchFamily::Indexing,
            Family::Layer => bench::BenchFamily::Layer,
            Family::Matmul => bench::BenchFamily::Matmul,
            Family::Attention => bench::BenchFamily::Attention,
            Family::Quant => bench::BenchFamily::Quant,
            Family::Conv => bench::BenchFamily::Conv,
            Family::Model => bench::BenchFamily::Model,
        }
    }
}

/// The devices a `--device` value names: `emulator` is both wave sizes; an
/// empty value (`FERROCM_DEVICE=`) names none, which means the default.
#[derive(Clone)]
struct Devices(Vec<Device>);

fn parse_devices(s: &str) -> Result<Devices, String> {
    Ok(Devices(match s.trim() {
        "" => Vec::new(),
        "emulator" | "emu" => vec![
            Device::emulator(WaveSize::Wave32),
            Device::emulator(WaveSize::Wave64),
        ],
        // Spellings of earlier versions.
        "emulator32" => vec![Device::emulator(WaveSize::Wave32)],
        "emulator64" => vec![Device::emulator(WaveSize::Wave64)],
        other => vec![parse_device(other)?],
    }))
}

fn parse_device(s: &str) -> Result<Device, String> {
    s.parse::<Device>().map_err(|e| e.to_string())
}

fn parse_size(s: &str) -> Result<(usize, usize), String> {
    match s.split_once('x').map(|(r, c)| (r.parse(), c.parse())) {
        Some((Ok(r), Ok(c))) if r > 0 && c > 0 => Ok((r, c)),
        _ => Err(format!("takes ROWSxCOLS, e.g. 16384x4096; got `{s}`")),
    }
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Check(a) => run_check(a),
        Command::Bench(a) => run_bench(a),
        Command::Kernels(a) => match a.device {
            Some(d) => run_kernels_on(&d, a.json),
            None => run_kernels(a.arch.as_deref(), a.json),
        },
        Command::Info => run_info(),
        Command::Gguf { file } => match ferrocm_ops::quant::gguf::Gguf::open(&file) {
            Ok(g) => {
                let _ = write!(std::io::stdout(), "{}", ferrocm_cli::gguf::describe(&g));
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("ferrocm gguf: {e}");
                ExitCode::from(1)
            }
        },
        Command::Quantize {
            input,
            output,
            r#type,
            pure,
        } => run_quantize(&input, &output, &r#type, pure),
        Command::Run(a) => run_model(a),
        Command::Chat(a) => run_chat(a),
        Command::Tokenize(a) => run_tokenize(a),
        Command::Synthesize { spec, output } => {
            let spec = spec.strip_prefix("synthetic:").unwrap_or(&spec);
            match ferrocm_cli::run::synthetic_writer(spec)
                .and_then(|w| w.write(&output).map_err(|e| e.to_string()))
            {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("ferrocm synthesize: {e}");
                    ExitCode::from(1)
                }
            }
        }
    }
}

/// The device and activation dtype `run` and `chat` use.
fn device_and_dtype(m: &ModelArgs, command: &str) -> Result<(Device, DType), ExitCode> {
    let device = m
        .device
        .clone()
        .unwrap_or_else(|| match Device::best_or_err() {
            Ok(d) if d.is_gpu() => d,
            _ => Device::Cpu,
        });
    let dtype = match m.dtype.as_deref() {
        None if device.is_gpu() => DType::BF16,
        None => DType::F32,
        Some("f32") => DType::F32,
        Some("f16") => DType::F16,
        Some("bf16") => DType::BF16,
        Some(other) => {
            eprintln!("ferrocm {command}: --dtype {other}: f32, f16 or bf16");
            return Err(ExitCode::from(2));
        }
    };
    Ok((device, dtype))
}

/// The load progress bar (bytes of weights uploaded).
fn load_bar() -> indicatif::ProgressBar {
    indicatif::ProgressBar::new(0).with_style(
        indicatif::ProgressStyle::with_template(
            "loading {bar:40} {binary_bytes}/{binary_total_bytes}",
        )
        .expect("a valid template"),
    )
}

/// `ferrocm run`.
fn run_model(a: RunArgs) -> ExitCode {
    use ferrocm_cli::run::{Prompt, RunRequest, run};
    let (device, dtype) = match device_and_dtype(&a.model, "run") {
        Ok(x) => x,
        Err(code) => return code,
    };
    let prompt = match (a.prompt, a.random_prompt) {
        (Some(text), _) => Prompt::Text(text),
        // Ids below 256: in every vocabulary (the synthetic tiny one has 384).
        (None, Some(n)) => {
            let mut x = a.sampling.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            Prompt::Ids(
                (0..n)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        (x % 256) as u32
                    })
                    .collect(),
            )
        }
        (None, None) => Prompt::Ids(a.prompt_ids),
    };
    if matches!(&prompt, Prompt::Ids(ids) if ids.is_empty()) {
        eprintln!("ferrocm run: no prompt (--prompt, --prompt-ids or --random-prompt)");
        return ExitCode::from(2);
    }
    let req = RunRequest {
        model: a.model.model,
        prompt,
        max_tokens: a.model.max_tokens,
        context: a.model.ctx,
        dtype,
        sampling: a.sampling.options(),
        stream: !a.json,
        stop: a.stop,
        // A timing run goes on past them; --ignore-eos also never picks
        // them, as llama.cpp's does.
        ignore_eos: a.ignore_eos || a.random_prompt.is_some(),
        ban_eos: a.ignore_eos,
        graph_blocks: a.graph_blocks,
        pipeline: !a.no_pipeline,
    };
    let bar = load_bar();
    let result = run(&req, &device, |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    });
    bar.finish_and_clear();
    match result {
        Ok(r) if a.json => {
            outln!("{}", r.to_json());
            ExitCode::SUCCESS
        }
        Ok(r) => {
            eprintln!(
                "{}: loaded in {:.2} s, warm-up {:.2} s ({:.1} MiB of weights, {:.1} MiB of cache)",
                r.device,
                r.load_s,
                r.warmup_s,
                r.weight_bytes as f64 / 1048576.0,
                r.cache_bytes as f64 / 1048576.0
            );
            eprintln!(
                "prefill {} tokens: {:.1} tokens/s (first token {:.3} s); decode {} tokens: {:.1} tokens/s ({:.0} GB/s of weights, {:.0} launches a token, {:.0}% of it queueing on the host, {} steps as graphs{}); peak device memory {:.1} MiB",
                r.prompt_tokens,
                r.prefill_tps,
                r.first_token_s,
                r.decode_tokens,
                r.decode_tps,
                r.weight_gbps,
                r.launches_per_token,
                100.0 * r.decode_queueing_share,
                r.decode_graphs,
                if r.pipelined { ", pipelined" } else { "" },
                r.peak_bytes as f64 / 1048576.0
            );
            if let Some(why) = &r.graphs_off {
                eprintln!("decode steps ran without graphs: {why}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("ferrocm run: {e}");
            ExitCode::from(1)
        }
    }
}

/// `ferrocm chat`.
fn run_chat(a: ChatArgs) -> ExitCode {
    use ferrocm_cli::run::{ChatRequest, chat};
    use std::io::IsTerminal;
    let (device, dtype) = match device_and_dtype(&a.model, "chat") {
        Ok(x) => x,
        Err(code) => return code,
    };
    let req = ChatRequest {
        model: a.model.model,
        max_tokens: a.model.max_tokens,
        context: a.model.ctx,
        dtype,
        sampling: a.sampling.options(),
        system: a.system,
    };
    let interactive = std::io::stdin().is_terminal();
    let bar = load_bar();
    let result = chat(
        &req,
        &device,
        std::io::stdin().lock(),
        std::io::stdout(),
        interactive,
        |done, total| {
            bar.set_length(total);
            bar.set_position(done);
        },
    );
    bar.finish_and_clear();
    match result {
        Ok((turns, tps)) => {
            eprintln!("{turns} replies on {device}; decode {tps:.1} tokens/s");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("ferrocm chat: {e}");
            ExitCode::from(1)
        }
    }
}

/// `ferrocm tokenize`.
fn run_tokenize(a: TokenizeArgs) -> ExitCode {
    match ferrocm_cli::run::tokenize(&a.model, &a.prompt, !a.no_bos, !a.no_parse_special) {
        Ok(tokens) if a.ids => {
            let ids: Vec<u32> = tokens.iter().map(|(id, _)| *id).collect();
            outln!("{ids:?}");
            ExitCode::SUCCESS
        }
        Ok(tokens) => {
            for (id, piece) in tokens {
                outln!("{id:6} -> {piece:?}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("ferrocm tokenize: {e}");
            ExitCode::from(1)
        }
    }
}

/// `ferrocm quantize`: the plan, a progress bar over the input's bytes,
/// then the sizes before and after.
fn run_quantize(
    input: &std::path::Path,
    output: &std::path::Path,
    ty: &str,
    pure: bool,
) -> ExitCode {
    use ferrocm_ops::quant::gguf::Gguf;
    use ferrocm_ops::quant::requantize::{QuantMix, quantize_gguf};
    let mix = match ty.parse::<QuantMix>() {
        Ok(QuantMix::Uniform(f)) if pure => QuantMix::Pure(f),
        Ok(m) => m,
        Err(e) => {
            eprintln!("ferrocm quantize: {e}");
            return ExitCode::from(2);
        }
    };
    let result = Gguf::open(input).and_then(|g| {
        let total: u64 = g.tensors().iter().map(|t| t.bytes).sum();
        let bar = indicatif::ProgressBar::new(total).with_style(
            indicatif::ProgressStyle::with_template(
                "{bar:40} {binary_bytes}/{binary_total_bytes} {elapsed} (eta {eta})",
            )
            .expect("a valid template"),
        );
        let w = quantize_gguf(&g, mix, |done, _| bar.set_position(done))?;
        bar.finish_and_clear();
        w.write(output)?;
        let out = Gguf::open(output)?;
        let bytes: u64 = out.tensors().iter().map(|t| t.bytes).sum();
        Ok(ferrocm_cli::gguf::quantize_summary(&g, &out, total, bytes))
    });
    match result {
        Ok(summary) => {
            outln!("{summary}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("ferrocm quantize: {e}");
            ExitCode::from(1)
        }
    }
}

/// The named devices, else the first GPU that answers, else both emulators.
fn devices_or_default(arg: DeviceArg) -> Vec<Device> {
    if let Some(Devices(d)) = arg.device
        && !d.is_empty()
    {
        return d;
    }
    match Device::best_or_err() {
        Ok(d) if d.is_gpu() => vec![d],
        _ => {
            eprintln!(
                "no GPU answers ({}); checking the kernels in the emulator instead",
                ferrocm_host::gpus()
                    .err()
                    .map(|e| e.to_string())
                    .unwrap_or_default()
            );
            vec![
                Device::emulator(WaveSize::Wave32),
                Device::emulator(WaveSize::Wave64),
            ]
        }
    }
}

fn run_check(a: CheckArgs) -> ExitCode {
    let mut results = Vec::new();
    for d in &devices_or_default(a.device) {
        let start = std::time::Instant::now();
        let r = check::run_default(d);
        if !a.json {
            eprintln!(
                "{d}: {} cases in {:.1}s",
                r.len(),
                start.elapsed().as_secs_f64()
            );
        }
        results.extend(r);
    }
    let failed = results.iter().filter(|r| !r.passed).count();
    if a.json {
        outln!("{}", check::to_json(&results));
    } else {
        outln!(
            "{:<16} {:<5} {:<24} {:<22} {:>11} {:>11}  result",
            "op",
            "dtype",
            "device",
            "layout",
            "max_abs",
            "max_rel"
        );
        for r in &results {
            outln!(
                "{:<16} {:<5} {:<24} {:<22} {:>11.3e} {:>11.3e}  {}{}",
                r.op,
                r.dtype.as_str(),
                r.device,
                r.layout,
                r.max_abs_err,
                r.max_rel_err,
                if r.passed { "pass" } else { "FAIL" },
                r.error
                    .as_ref()
                    .map(|e| format!(" ({e})"))
                    .unwrap_or_default()
            );
        }
        outln!("{} passed, {} failed", results.len() - failed, failed);
    }
    if failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn run_bench(a: BenchArgs) -> ExitCode {
    let dev = devices_or_default(a.device).remove(0);
    let mut cfg = bench::BenchConfig {
        compare_cpu: !a.no_cpu,
        only: a.only.map(Into::into),
        ..Default::default()
    };
    if !dev.is_gpu() {
        // The host devices are far slower: a smaller default.
        cfg.rows = 1024;
        cfg.cols = 1024;
        cfg.reps = 5;
    }
    if let Some((r, c)) = a.size {
        (cfg.rows, cfg.cols) = (r, c);
    }
    if let Some(n) = a.reps {
        cfg.reps = n as usize;
    }
    match bench::run(&dev, cfg) {
        Ok(report) => {
            if a.json {
                outln!("{}", bench::to_json(&report));
            } else {
                let _ = write!(std::io::stdout(), "{}", bench::format_table(&report));
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("bench on {dev}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Per kernel, what the driver's compile uses on a CUDA GPU: registers,
/// local (spill) bytes, static shared memory. Fails when a kernel not in
/// kernels/ptxas-local-memory.txt uses local memory.
fn run_kernels_on(dev: &Device, json: bool) -> ExitCode {
    let _ = json; // used by the CUDA report only
    #[cfg(feature = "cuda")]
    if let Device::Cuda(c) = dev {
        use ferrocm_host::GpuBackend;
        let mut rows = Vec::new();
        let mut skipped = Vec::new();
        for k in ferrocm_kernels::kernels() {
            // Kernels on Hopper's warpgroup product compile for compute
            // capability 9.0 only.
            match c.runs_kernel(k) {
                Ok(true) => {}
                Ok(false) => {
                    skipped.push(k.name);
                    continue;
                }
                Err(e) => {
                    eprintln!("{}: {e}", k.name);
                    return ExitCode::FAILURE;
                }
            }
            match c.kernel_resources(k) {
                Ok(r) => rows.push((k.name, r)),
                Err(e) => {
                    eprintln!("{}: {e}", k.name);
                    return ExitCode::FAILURE;
                }
            }
        }
        let spilling: Vec<&str> = rows
            .iter()
            .filter(|(_, r)| r.local_bytes > 0)
            .map(|(n, _)| *n)
            .collect();
        // Spills known and measured (kernels/ptxas-local-memory.txt) are
        // reported; any other fails the command.
        let (known, unknown): (Vec<&str>, Vec<&str>) = spilling
            .iter()
            .partition(|n| ferrocm_kernels::spills_on_sm90(n));
        if json {
            let v: Vec<_> = rows
                .iter()
                .map(|(n, r)| {
                    serde_json::json!({"kernel": n, "arch": c.info().arch, "registers": r.registers,
                        "local_bytes": r.local_bytes, "static_shared_bytes": r.static_shared_bytes,
                        "max_threads": r.max_threads})
                })
                .collect();
            outln!("{}", serde_json::Value::Array(v));
        } else {
            outln!(
                "{:<28} {:>6} {:>5} {:>6} {:>7} {:>11}",
                "kernel",
                "arch",
                "regs",
                "local",
                "shared",
                "max_threads"
            );
            for (n, r) in &rows {
                outln!(
                    "{:<28} {:>6} {:>5} {:>6} {:>7} {:>11}",
                    n,
                    c.info().arch,
                    r.registers,
                    r.local_bytes,
                    r.static_shared_bytes,
                    r.max_threads
                );
            }
            let max_regs = rows.iter().map(|(_, r)| r.registers).max().unwrap_or(0);
            outln!(
                "{} kernels, at most {max_regs} registers, {} with local memory",
                rows.len(),
                spilling.len()
            );
        }
        if !skipped.is_empty() {
            eprintln!(
                "not compiled here ({} kernels on Hopper's warpgroup product, which need compute capability 9.0): {}",
                skipped.len(),
                skipped.join(", ")
            );
        }
        if !known.is_empty() {
            eprintln!(
                "local memory in {} kernels listed in kernels/ptxas-local-memory.txt (spills under their measured launch bounds): {}",
                known.len(),
                known.join(", ")
            );
        }
        if !unknown.is_empty() {
            eprintln!(
                "local memory (spills) in unlisted kernels: {}",
                unknown.join(", ")
            );
            return ExitCode::FAILURE;
        }
        return ExitCode::SUCCESS;
    }
    eprintln!(
        "`kernels --device` reads the driver's compile on a CUDA GPU; {dev} is not one (use --arch for AMD code objects)"
    );
    ExitCode::from(2)
}

fn run_kernels(arch: Option<&str>, json: bool) -> ExitCode {
    let objects: Vec<_> = ferrocm_kernels::CODE_OBJECTS
        .iter()
        .filter(|c| arch.is_none_or(|a| a == c.arch))
        .copied()
        .collect();
    if objects.is_empty() {
        eprintln!(
            "no code object for arch `{}`; embedded: {}",
            arch.unwrap_or("?"),
            ferrocm_kernels::KERNEL_MODULE.archs().join(", ")
        );
        return ExitCode::from(2);
    }
    match ferrocm_host::codeobject::report(&objects) {
        Ok(rows) => {
            if json {
                outln!("{}", ferrocm_cli::kernels_report::to_json(&rows));
            } else {
                let _ = write!(
                    std::io::stdout(),
                    "{}",
                    ferrocm_cli::kernels_report::format_table(&rows)
                );
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

fn run_info() -> ExitCode {
    outln!("ferrocm {}", env!("CARGO_PKG_VERSION"));
    outln!(
        "code objects embedded: {} ({} kernels each)",
        ferrocm_kernels::KERNEL_MODULE.archs().join(", "),
        ferrocm_kernels::kernels().count()
    );
    outln!(
        "cpu: {} threads (rayon)",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    outln!("emulator: wave 32 and 64, sanitizer available");
    if let Some(ptx) = ferrocm_kernels::PTX_MODULE {
        outln!(
            "PTX module embedded: {} ({} KiB) for NVIDIA GPUs",
            ptx.target,
            ptx.text.len() / 1024
        );
    }
    match ferrocm_host::gpus() {
        Ok(gpus) => {
            for g in gpus {
                let dev = format!("{}:{}", g.backend, g.ordinal).parse::<Device>();
                let mem = match dev.as_ref().map(|d| d.memory_info()) {
                    Ok(Ok(Some((free, total)))) => format!(
                        "{:.1} GiB free of {:.1} GiB",
                        free as f64 / (1u64 << 30) as f64,
                        total as f64 / (1u64 << 30) as f64
                    ),
                    _ => format!("{:.1} GiB", g.total_memory as f64 / (1u64 << 30) as f64),
                };
                outln!(
                    "{}:{} {} arch {} ({}), {} {}, {mem}, wave {}, max LDS {} KiB, code: {}",
                    g.backend,
                    g.ordinal,
                    g.name,
                    g.arch,
                    g.arch_full,
                    g.compute_units,
                    if g.backend == "cuda" { "SMs" } else { "CUs" },
                    g.wave_size,
                    g.max_lds_bytes / 1024,
                    g.code_object.as_deref().unwrap_or("none matches")
                );
                if let Ok(d) = &dev
                    && let Some(gpu) = d.gpu()
                {
                    for lib in gpu.libraries() {
                        outln!(
                            "  {}: {}",
                            lib.name,
                            lib.status.unwrap_or_else(|why| format!("not used ({why})"))
                        );
                    }
                }
            }
        }
        Err(e) => outln!("gpu: {e}"),
    }
    // Matrix products use the vendor BLAS where it loads, else our kernels.
    let blas = |found: Result<String, String>| match found {
        Ok(lib) => format!("{lib} (epilogues and matrix-vector shapes: ferrocm's kernels)"),
        Err(why) => format!("ferrocm's kernels ({why})"),
    };
    #[cfg(feature = "rocm")]
    outln!(
        "matmul on ROCm GPUs: {}",
        blas(ferrocm_host::rocm::rocblas_found())
    );
    #[cfg(feature = "cuda")]
    outln!(
        "matmul on CUDA GPUs: {}",
        blas(ferrocm_host::cuda::cublas_found())
    );
    let _ = blas;
    outln!("best device: {}", Device::best());
    ExitCode::SUCCESS
}
