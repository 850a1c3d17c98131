//! Random-weight models written as GGUF files: what the tests, the benches
//! and a user without a download load, through the same reader and loader
//! as a published model.

use crate::config::Arch;
use crate::error::Result;
use ferrocm_ops::quant::gguf::{GgufValue, GgufWriter};
use ferrocm_ops::{DType, Device, DynTensor, QTensor, QuantFormat, Tensor};

/// The shapes and formats of a random-weight model. `new` gives a tiny one
/// (2 blocks, hidden 256, 4 heads of 64, 2 KV heads, a vocabulary of 384)
/// that loads and runs in milliseconds on the Cpu; [`SyntheticModel::llama_7b`]
/// Llama 2 7B's shapes with Llama 3's grouped-query heads.
#[derive(Clone, Debug)]
pub struct SyntheticModel {
    /// The architecture (qwen2 gets q/k/v biases, qwen3 q/k norms; the
    /// Gemmas their norms, and for the tiny shapes softcaps and a window
    /// small enough to bite within a 16-token prompt: see
    /// [`SyntheticModel::to_gguf`]).
    pub arch: Arch,
    /// Vocabulary size.
    pub vocab: usize,
    /// Hidden size.
    pub hidden: usize,
    /// Blocks.
    pub layers: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Dims per head.
    pub head_dim: usize,
    /// Feed-forward inner size.
    pub ffn: usize,
    /// Context length written to the metadata.
    pub context: usize,
    /// The weight matrices' format (embedding and output included); `None`
    /// stores them dense in `dense`.
    pub format: Option<QuantFormat>,
    /// The dense weights' dtype (f32, f16 or bf16).
    pub dense: DType,
    /// No `output.weight`: the embedding table is the output projection
    /// (always so for Gemma and Gemma 2, which have none).
    pub tied: bool,
    /// Seed of the weights.
    pub seed: u64,
    /// Every block's tensors are copies of block 0's bytes (each block
    /// still its own tensor, read from its own memory): a large model for
    /// timing made in the time of one block.
    pub repeat_blocks: bool,
}

impl SyntheticModel {
    /// The tiny default for `arch`, f32 weights, output untied.
    ///
    /// ```
    /// use ferrocm_models::{synthetic::SyntheticModel, Arch};
    /// let m = SyntheticModel::new(Arch::Llama);
    /// assert_eq!((m.hidden, m.heads * m.head_dim), (256, 256));
    /// ```
    pub fn new(arch: Arch) -> Self {
        Self {
            arch,
            vocab: 384,
            hidden: 256,
            layers: 2,
            heads: 4,
            kv_heads: 2,
            head_dim: 64,
            ffn: 512,
            context: 512,
            format: None,
            dense: DType::F32,
            tied: false,
            seed: 1,
            repeat_blocks: false,
        }
    }

    /// Llama-7B shapes as llama.cpp's benchmarks take them: hidden 4096, 32
    /// blocks, 32 heads, 8 KV heads, ffn 14336, vocabulary 32000.
    pub fn llama_7b(format: Option<QuantFormat>) -> Self {
        Self {
            vocab: 32_000,
            hidden: 4096,
            layers: 32,
            heads: 32,
            kv_heads: 8,
            head_dim: 128,
            ffn: 14_336,
            context: 4096,
            format,
            dense: DType::BF16,
            repeat_blocks: true,
            ..Self::new(Arch::Llama)
        }
    }

    /// The model as a GGUF file: metadata as llama.cpp's converter writes
    /// it, weights drawn from N(0, 1/in) (so activations stay near 1; the
    /// embedding from N(0, 1), a Gemma's from N(0, 1/hidden)), norms from
    /// 1 ± 0.2, biases from ± 0.2; a Gemma's output projections and post-norms
    /// 6 times larger (its tied output would otherwise repeat one token from
    /// the start).
    ///
    /// # Errors
    /// [`Error::Op`](crate::Error::Op) when the format cannot hold a row
    /// (rows not a multiple of its block) or quantizing fails.
    pub fn to_gguf(&self) -> Result<GgufWriter> {
        let mut w = GgufWriter::new();
        let arch = self.arch.name();
        let k = |s: &str| format!("{arch}.{s}");
        let u = |v: usize| GgufValue::U32(v as u32);
        w.metadata("general.architecture", GgufValue::String(arch.into()))
            .metadata(
                "general.name",
                GgufValue::String(format!("synthetic {arch}")),
            )
            .metadata(&k("context_length"), u(self.context))
            .metadata(&k("embedding_length"), u(self.hidden))
            .metadata(&k("block_count"), u(self.layers))
            .metadata(&k("feed_forward_length"), u(self.ffn))
            .metadata(&k("attention.head_count"), u(self.heads))
            .metadata(&k("attention.head_count_kv"), u(self.kv_heads))
            .metadata(&k("attention.key_length"), u(self.head_dim))
            .metadata(&k("attention.value_length"), u(self.head_dim))
            .metadata(&k("attention.layer_norm_rms_epsilon"), GgufValue::F32(1e-5))
            .metadata(&k("rope.freq_base"), GgufValue::F32(10_000.0));
        // The Gemmas' own hyper-parameters, at values that change a tiny
        // model's logits: caps near its logits' size (Gemma 2 ships 50 and
        // 30), a window of 5 keys (Gemma ships 512 to 4096), the global
        // blocks every other one (Gemma 3 ships one in six), and Gemma 3's
        // global base and linear scaling (4B and up).
        match self.arch {
            Arch::Gemma2 => {
                w.metadata(&k("attn_logit_softcapping"), GgufValue::F32(4.0))
                    .metadata(&k("final_logit_softcapping"), GgufValue::F32(8.0))
                    .metadata(&k("attention.sliding_window"), u(5));
            }
            Arch::Gemma3 => {
                w.metadata(&k("attention.sliding_window"), u(5))
                    .metadata(&k("attention.sliding_window_pattern"), u(2))
                    .metadata(&k("rope.freq_base"), GgufValue::F32(1_000_000.0))
                    .metadata(&k("rope.scaling.type"), GgufValue::String("linear".into()))
                    .metadata(&k("rope.scaling.factor"), GgufValue::F32(8.0));
            }
            _ => {}
        }
        synthetic_vocabulary(&mut w, self.vocab);
        let mut rng = Normal(self.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let (h, q, kv) = (
            self.hidden,
            self.heads * self.head_dim,
            self.kv_heads * self.head_dim,
        );
        let mut matrix =
            |w: &mut GgufWriter, name: &str, rows: usize, cols: usize, std: f64| -> Result<()> {
                let v: Vec<f32> = (0..rows * cols)
                    .map(|_| (rng.next() * std) as f32)
                    .collect();
                let t = Tensor::from_vec(v, &[rows, cols], &Device::Cpu)?;
                match self.format {
                    Some(f) => w.qtensor(name, &QTensor::quantize(&t, f)?)?,
                    None => w.tensor(name, &DynTensor::from(t).to_dtype(self.dense)?)?,
                };
                Ok(())
            };
        // A Gemma multiplies its embedding by sqrt(hidden) (and ties the
        // output to it): drawn from N(0, 1/hidden), x starts near 1 and the
        // logits stay near the untied models' size, as in Gemma's weights.
        let embed_std = match self.arch.is_gemma() {
            true => 1.0 / (h as f64).sqrt(),
            false => 1.0,
        };
        matrix(&mut w, "token_embd.weight", self.vocab, h, embed_std)?;
        let mut uniform = Normal(self.seed.wrapping_add(17) | 1);
        let mut vector = |w: &mut GgufWriter, name: &str, len: usize, base: f32| -> Result<()> {
            let v: Vec<f32> = (0..len)
                .map(|_| base + 0.2 * uniform.uniform() as f32)
                .collect();
            w.tensor(name, &Tensor::from_vec(v, &[len], &Device::Cpu)?.into())?;
            Ok(())
        };
        let inv = |n: usize| 1.0 / (n as f64).sqrt();
        // A Gemma's output is its embedding table, so a token's own
        // embedding, still in the residual stream at the end, would win the
        // argmax at every step (random text repeats one token): its blocks
        // add 6 times more to the stream (the output projections, or the
        // post-norms that rescale them), so that the first tokens vary
        // (later ones still fall into runs of one token).
        let gain = match self.arch.is_gemma() {
            true => 6.0,
            false => 1.0,
        };
        let blocks = if self.repeat_blocks {
            self.layers.min(1)
        } else {
            self.layers
        };
        for l in 0..blocks {
            let n = |s: &str| format!("blk.{l}.{s}");
            vector(&mut w, &n("attn_norm.weight"), h, 1.0)?;
            matrix(&mut w, &n("attn_q.weight"), q, h, inv(h))?;
            matrix(&mut w, &n("attn_k.weight"), kv, h, inv(h))?;
            matrix(&mut w, &n("attn_v.weight"), kv, h, inv(h))?;
            if self.arch == Arch::Qwen2 {
                vector(&mut w, &n("attn_q.bias"), q, 0.0)?;
                vector(&mut w, &n("attn_k.bias"), kv, 0.0)?;
                vector(&mut w, &n("attn_v.bias"), kv, 0.0)?;
            }
            if self.arch.qk_norm() {
                vector(&mut w, &n("attn_q_norm.weight"), self.head_dim, 1.0)?;
                vector(&mut w, &n("attn_k_norm.weight"), self.head_dim, 1.0)?;
            }
            matrix(&mut w, &n("attn_output.weight"), h, q, gain * inv(q))?;
            if self.arch.post_norms() {
                vector(&mut w, &n("post_attention_norm.weight"), h, gain as f32)?;
            }
            vector(&mut w, &n("ffn_norm.weight"), h, 1.0)?;
            matrix(&mut w, &n("ffn_gate.weight"), self.ffn, h, inv(h))?;
            matrix(&mut w, &n("ffn_up.weight"), self.ffn, h, inv(h))?;
            let down_std = gain * inv(self.ffn);
            matrix(&mut w, &n("ffn_down.weight"), h, self.ffn, down_std)?;
            if self.arch.post_norms() {
                vector(&mut w, &n("post_ffw_norm.weight"), h, gain as f32)?;
            }
        }
        if blocks < self.layers {
            let first = w.to_bytes()?;
            let first = ferrocm_ops::quant::gguf::Gguf::from_bytes(first)?;
            for t in first
                .tensors()
                .iter()
                .filter(|t| t.name.starts_with("blk.0."))
            {
                let data = first.tensor_bytes(&t.name)?;
                for l in 1..self.layers {
                    let name = t.name.replacen("blk.0.", &format!("blk.{l}."), 1);
                    w.raw(&name, &t.shape, t.ggml_type, data.to_vec())?;
                }
            }
        }
        vector(&mut w, "output_norm.weight", h, 1.0)?;
        if !self.tied && !matches!(self.arch, Arch::Gemma | Arch::Gemma2) {
            matrix(&mut w, "output.weight", self.vocab, h, inv(h))?;
        }
        Ok(w)
    }
}

/// Common English words: the synthetic vocabulary's pieces (with every
/// prefix, so each is reachable by merges).
const WORDS: &[&str] = &[
    "the", "of", "and", "to", "in", "is", "that", "it", "was", "for", "on", "are", "as", "with",
    "he", "she", "they", "at", "be", "this", "have", "from", "or", "one", "had", "by", "word",
    "but", "not", "what", "all", "were", "we", "when", "your", "can", "said", "there", "use", "an",
    "each", "which", "do", "how", "their", "if", "will", "up", "other", "about", "out", "many",
    "then", "them", "these", "so", "some", "her", "would", "make", "like", "him", "into", "time",
    "has", "look", "two", "more", "write", "go", "see", "number", "no", "way", "could", "people",
    "my", "than", "first", "water", "been", "call", "who", "oil", "its", "now", "find", "long",
    "down", "day", "did", "get", "come", "made", "may", "part", "once", "upon", "hello", "world",
    "model", "token", "story", "little", "girl", "boy", "cat", "dog",
];

/// A SentencePiece ("llama") vocabulary of exactly `size` tokens: `<unk>`,
/// `<s>`, `</s>`, the chat markers `<|im_start|>`/`<|im_end|>`, the 256
/// byte tokens, printable ASCII, then `▁`-led words and their prefixes
/// (scores falling with the id, as a trained vocabulary's), padded with
/// numbered pieces; and a ChatML template. Random weights make the text
/// meaningless, but a prompt tokenizes, generates and streams as a real
/// model's does.
fn synthetic_vocabulary(w: &mut GgufWriter, size: usize) {
    // (text, type): 1 normal, 2 unknown, 3 control, 6 byte.
    let mut tokens: Vec<(String, i32)> = vec![
        ("<unk>".into(), 2),
        ("<s>".into(), 3),
        ("</s>".into(), 3),
        ("<|im_start|>".into(), 3),
        ("<|im_end|>".into(), 3),
    ];
    tokens.extend((0..=255u8).map(|b| (format!("<0x{b:02X}>"), 6)));
    tokens.push(("▁".into(), 1));
    tokens.extend(
        (b' '..=b'~')
            .filter(|&c| c != b' ')
            .map(|c| ((c as char).to_string(), 1)),
    );
    let mut seen: std::collections::HashSet<String> =
        tokens.iter().map(|(t, _)| t.clone()).collect();
    for word in WORDS {
        for end in 1..=word.len() {
            let piece = format!("▁{}", &word[..end]);
            if seen.insert(piece.clone()) {
                tokens.push((piece, 1));
            }
        }
    }
    let mut n = 0;
    while tokens.len() < size {
        tokens.push((format!("▁piece{n}"), 1));
        n += 1;
    }
    tokens.truncate(size);
    let strings = tokens
        .iter()
        .map(|(t, _)| GgufValue::String(t.clone()))
        .collect();
    let scores = (0..tokens.len())
        .map(|i| GgufValue::F32(-(i as f32)))
        .collect();
    let types = tokens.iter().map(|(_, t)| GgufValue::I32(*t)).collect();
    let id = |v: u32| GgufValue::U32(v.min(size.saturating_sub(1) as u32));
    w.metadata("tokenizer.ggml.model", GgufValue::String("llama".into()))
        .metadata(
            "tokenizer.ggml.tokens",
            GgufValue::Array {
                item_type: 8,
                items: strings,
            },
        )
        .metadata(
            "tokenizer.ggml.scores",
            GgufValue::Array {
                item_type: 6,
                items: scores,
            },
        )
        .metadata(
            "tokenizer.ggml.token_type",
            GgufValue::Array {
                item_type: 5,
                items: types,
            },
        )
        .metadata("tokenizer.ggml.bos_token_id", id(1))
        .metadata("tokenizer.ggml.eos_token_id", id(2))
        .metadata("tokenizer.ggml.unknown_token_id", id(0))
        .metadata("tokenizer.ggml.add_bos_token", GgufValue::Bool(true))
        .metadata(
            "tokenizer.chat_template",
            GgufValue::String(
                "{% for message in messages %}<|im_start|>{{ message['role'] }}\n\
                 {{ message['content'] }}<|im_end|>\n{% endfor %}\
                 {% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
                    .into(),
            ),
        );
}

/// A small deterministic generator (xorshift64*, Box-Muller): the same
/// weights for a seed on every machine and crate version.
struct Normal(u64);

impl Normal {
    /// Uniform in [-1, 1).
    fn uniform(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let r = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D);
        (r >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }

    /// Standard normal.
    fn next(&mut self) -> f64 {
        let u1 = (self.uniform() + 1.0) / 2.0;
        let u2 = (self.uniform() + 1.0) / 2.0;
        (-2.0 * (1.0 - u1).ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}
