//! A model's hyper-parameters, read from GGUF metadata under the keys
//! llama.cpp writes (`{arch}.embedding_length`, `{arch}.attention.head_count`, ...).

use crate::error::{Error, Result};
use ferrocm_ops::quant::gguf::{Gguf, GgufValue};

/// A supported architecture (`general.architecture`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arch {
    /// Llama 2 and 3.x, Mistral, TinyLlama: GGUF's `llama`.
    Llama,
    /// Qwen 2 and 2.5: biases on the q, k and v projections.
    Qwen2,
    /// Qwen 3 (dense): RMSNorm of each q and k head before the rotation.
    Qwen3,
    /// Gemma (1): the embedding scaled by `sqrt(hidden)`, a GELU-gated
    /// feed-forward, the output tied to the embedding.
    Gemma,
    /// Gemma 2: Gemma's, plus norms after the attention and the
    /// feed-forward, logit softcaps (attention and final) and a sliding
    /// window on every other block.
    Gemma2,
    /// Gemma 3 (text): Gemma 2's without the softcaps, plus q/k RMSNorm,
    /// five sliding-window blocks to a global one, with their own rotary
    /// base.
    Gemma3,
}

impl Arch {
    /// Every supported architecture.
    pub const ALL: [Arch; 6] = [
        Arch::Llama,
        Arch::Qwen2,
        Arch::Qwen3,
        Arch::Gemma,
        Arch::Gemma2,
        Arch::Gemma3,
    ];

    /// The name GGUF files use.
    ///
    /// ```
    /// assert_eq!(ferrocm_models::Arch::Qwen2.name(), "qwen2");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Gemma => "gemma",
            Arch::Gemma2 => "gemma2",
            Arch::Gemma3 => "gemma3",
        }
    }

    /// The architecture GGUF calls `name`.
    ///
    /// ```
    /// use ferrocm_models::Arch;
    /// assert_eq!(Arch::from_name("qwen3"), Some(Arch::Qwen3));
    /// assert_eq!(Arch::from_name("gpt2"), None);
    /// ```
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.name() == name)
    }

    /// Whether rotary pairs are adjacent dims `(2i, 2i + 1)`: GGML's normal
    /// mode, which `llama` GGUFs use (the converter permutes q and k rows so
    /// that it equals Hugging Face's halves); Qwen uses halves `(i, i + d/2)`
    /// (GGML's NeoX mode).
    pub fn rope_interleaved(self) -> bool {
        matches!(self, Arch::Llama)
    }

    /// Whether this is a Gemma (1, 2 or 3): the embedding scaled by
    /// `sqrt(hidden)`, GELU (tanh) gating the feed-forward, and the output
    /// always the embedding table (as llama.cpp builds them).
    pub fn is_gemma(self) -> bool {
        matches!(self, Arch::Gemma | Arch::Gemma2 | Arch::Gemma3)
    }

    /// Whether blocks norm the attention's and the feed-forward's outputs
    /// before each residual add (`post_attention_norm`,
    /// `post_ffw_norm`): Gemma 2 and 3.
    pub fn post_norms(self) -> bool {
        matches!(self, Arch::Gemma2 | Arch::Gemma3)
    }

    /// Whether each q and k head is RMS-normed before the rotation.
    pub fn qk_norm(self) -> bool {
        matches!(self, Arch::Qwen3 | Arch::Gemma3)
    }
}

/// The rotary embedding's frequency scaling.
#[derive(Clone, Debug, PartialEq)]
pub enum RopeScaling {
    /// Positions as they are.
    None,
    /// Positions divided by a factor (`rope.scaling.type = linear`).
    Linear(f32),
}

/// A Llama-family model's hyper-parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// The architecture.
    pub arch: Arch,
    /// Vocabulary size (rows of `token_embd.weight`).
    pub vocab: usize,
    /// Hidden size (`embedding_length`).
    pub hidden: usize,
    /// Transformer blocks (`block_count`).
    pub layers: usize,
    /// Query heads (`attention.head_count`).
    pub heads: usize,
    /// Key/value heads (`attention.head_count_kv`, default `heads`).
    pub kv_heads: usize,
    /// Dims per head (`attention.key_length`, default `hidden / heads`).
    pub head_dim: usize,
    /// The feed-forward's inner size (`feed_forward_length`).
    pub ffn: usize,
    /// The context the model was trained for (`context_length`).
    pub context: usize,
    /// RMSNorm's epsilon (`attention.layer_norm_rms_epsilon`).
    pub rms_eps: f32,
    /// The rotary base (`rope.freq_base`, default 10000).
    pub rope_base: f32,
    /// Rotated dims per head (`rope.dimension_count`, default `head_dim`).
    pub rope_dims: usize,
    /// Frequency scaling (`rope.scaling.*`).
    pub rope_scaling: RopeScaling,
    /// What multiplies `q · k` (`None`: `1 / sqrt(head_dim)`). Gemma 2 and
    /// 3 at 27B take `1 / sqrt(hidden / heads)`, recognised, as llama.cpp
    /// does, by their block counts (46 and 62).
    pub attn_scale: Option<f32>,
    /// Attention logits become `cap · tanh(logit / cap)`
    /// (`attn_logit_softcapping`, Gemma 2: default 50).
    pub attn_softcap: Option<f32>,
    /// The output logits become `cap · tanh(logit / cap)`
    /// (`final_logit_softcapping`, Gemma 2: default 30).
    pub final_softcap: Option<f32>,
    /// Keys a sliding-window block's query sees: itself and the
    /// `window - 1` before it (`attention.sliding_window`; Gemma 2's
    /// default 4096).
    pub sliding_window: Option<usize>,
    /// Which blocks use the window (`attention.sliding_window_pattern`, a
    /// count `n`: blocks `l % n < n - 1`, or one flag a block; default
    /// every other block for Gemma 2, five of six for Gemma 3). Empty
    /// without a window.
    pub swa_layers: Vec<bool>,
    /// The rotary base of sliding-window blocks (`rope.freq_base_swa`;
    /// default Gemma 3's 10000, Gemma 2's `rope_base`).
    pub rope_base_swa: f32,
    /// The frequency scaling of sliding-window blocks (Gemma 3's are not
    /// scaled, Gemma 2's as the others).
    pub rope_scaling_swa: RopeScaling,
}

/// Metadata `key` as an unsigned count.
fn count(g: &Gguf, key: &str) -> Result<Option<usize>> {
    match g.get(key) {
        None => Ok(None),
        Some(v) => match v.as_i128().and_then(|n| usize::try_from(n).ok()) {
            Some(n) => Ok(Some(n)),
            None => Err(bad(key, v, "an unsigned integer")),
        },
    }
}

fn float(g: &Gguf, key: &str) -> Result<Option<f32>> {
    match g.get(key) {
        None => Ok(None),
        Some(v) => match v.as_f64() {
            Some(x) if x.is_finite() => Ok(Some(x as f32)),
            _ => Err(bad(key, v, "a finite number")),
        },
    }
}

fn bad(key: &str, v: &GgufValue, expected: &str) -> Error {
    Error::BadMetadata {
        key: key.into(),
        found: v.to_string(),
        expected: expected.into(),
    }
}

/// Which of `layers` blocks use the sliding window: `key` as a count `n`
/// (blocks `l % n < n - 1`; 0: every block) or as one flag a block, else
/// the architecture's `default` count (llama.cpp's `set_swa_pattern`).
fn swa_pattern(g: &Gguf, key: &str, default: usize, layers: usize) -> Result<Vec<bool>> {
    let every = |n: usize| (0..layers).map(|l| n == 0 || l % n < n - 1).collect();
    match g.get(key) {
        None => Ok(every(default)),
        Some(GgufValue::Array { items, .. }) => {
            let flags: Option<Vec<bool>> = items
                .iter()
                .map(|v| match v {
                    GgufValue::Bool(b) => Some(*b),
                    _ => None,
                })
                .collect();
            match flags {
                Some(f) if f.len() == layers => Ok(f),
                _ => Err(bad(
                    key,
                    g.get(key).expect("matched"),
                    &format!("a count or {layers} flags"),
                )),
            }
        }
        Some(_) => Ok(every(required(key, count(g, key)?)?)),
    }
}

fn required<T>(key: &str, v: Option<T>) -> Result<T> {
    v.ok_or_else(|| Error::MissingMetadata { key: key.into() })
}

impl Config {
    /// The hyper-parameters of the model in `gguf`.
    ///
    /// ```
    /// use ferrocm_models::{synthetic::SyntheticModel, Arch, Config};
    /// use ferrocm_ops::quant::gguf::Gguf;
    /// let file = Gguf::from_bytes(SyntheticModel::new(Arch::Qwen3).to_gguf()?.to_bytes()?)?;
    /// let c = Config::from_gguf(&file)?;
    /// assert_eq!((c.arch, c.heads, c.kv_heads, c.head_dim), (Arch::Qwen3, 4, 2, 64));
    /// # Ok::<(), ferrocm_models::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::MissingMetadata`] / [`Error::BadMetadata`] for a key that
    /// is absent or of the wrong type or value (heads not dividing, a head
    /// dim the attention kernels lack, an odd rotary dim count),
    /// [`Error::UnsupportedArchitecture`], [`Error::Unsupported`] for a
    /// rope scaling other than linear or Llama 3's frequency factors,
    /// [`Error::MissingTensor`] without `token_embd.weight`.
    pub fn from_gguf(g: &Gguf) -> Result<Self> {
        let key = "general.architecture";
        let name = required(key, g.get(key))?;
        let name = name.as_str().ok_or_else(|| bad(key, name, "a string"))?;
        let arch =
            Arch::from_name(name).ok_or_else(|| Error::UnsupportedArchitecture(name.into()))?;
        let k = |s: &str| format!("{name}.{s}");
        let need = |s: &str| -> Result<usize> {
            let key = k(s);
            let v = required(&key, count(g, &key)?)?;
            match v {
                0 => Err(bad(&key, g.get(&key).expect("read above"), "at least 1")),
                v => Ok(v),
            }
        };
        let hidden = need("embedding_length")?;
        let layers = need("block_count")?;
        let heads = need("attention.head_count")?;
        let kv_heads = count(g, &k("attention.head_count_kv"))?.unwrap_or(heads);
        let ffn = need("feed_forward_length")?;
        let context = need("context_length")?;
        let head_dim = match count(g, &k("attention.key_length"))? {
            Some(d) => d,
            None if hidden % heads == 0 => hidden / heads,
            None => {
                return Err(Error::BadMetadata {
                    key: k("attention.head_count"),
                    found: heads.to_string(),
                    expected: format!("a divisor of embedding_length {hidden}"),
                });
            }
        };
        if let Some(v) = count(g, &k("attention.value_length"))?
            && v != head_dim
        {
            return Err(Error::Unsupported {
                what: format!("{} = {v}", k("attention.value_length")),
                why: format!("value heads must have the key heads' {head_dim} dims"),
            });
        }
        if kv_heads == 0 || heads % kv_heads != 0 {
            return Err(Error::BadMetadata {
                key: k("attention.head_count_kv"),
                found: kv_heads.to_string(),
                expected: format!("a divisor of attention.head_count {heads}"),
            });
        }
        if ![64, 80, 96, 128, 256].contains(&head_dim) {
            return Err(Error::Unsupported {
                what: format!("a head dim of {head_dim}"),
                why: "the attention kernels take 64, 80, 96, 128 or 256".into(),
            });
        }
        let rope_dims = count(g, &k("rope.dimension_count"))?.unwrap_or(head_dim);
        if rope_dims % 2 != 0 || rope_dims > head_dim {
            return Err(Error::BadMetadata {
                key: k("rope.dimension_count"),
                found: rope_dims.to_string(),
                expected: format!("an even count up to the head dim {head_dim}"),
            });
        }
        let rope_scaling = match g.get(&k("rope.scaling.type")).map(|v| v.as_str()) {
            None | Some(Some("none")) => RopeScaling::None,
            Some(Some("linear")) => {
                let f = float(g, &k("rope.scaling.factor"))?.unwrap_or(1.0);
                if f <= 0.0 {
                    return Err(Error::BadMetadata {
                        key: k("rope.scaling.factor"),
                        found: f.to_string(),
                        expected: "a positive factor".into(),
                    });
                }
                RopeScaling::Linear(f)
            }
            Some(other) => {
                return Err(Error::Unsupported {
                    what: format!("rope scaling {:?}", other.unwrap_or("(not a string)")),
                    why: "linear scaling and Llama 3's rope_freqs.weight are supported".into(),
                });
            }
        };
        let vocab = match g.tensor_info("token_embd.weight") {
            Some(t) if t.shape.len() == 2 => t.shape[0],
            Some(t) => {
                return Err(Error::TensorShape {
                    name: "token_embd.weight".into(),
                    found: t.shape.clone(),
                    expected: vec![0, hidden],
                });
            }
            None => {
                return Err(Error::MissingTensor {
                    name: "token_embd.weight".into(),
                });
            }
        };
        let rope_base = float(g, &k("rope.freq_base"))?.unwrap_or(10_000.0);
        let softcap = |key: &str, default: Option<f32>| -> Result<Option<f32>> {
            Ok(match float(g, &k(key))?.or(default) {
                // llama.cpp reads 0 as "none".
                Some(0.0) => None,
                Some(c) if c < 0.0 => {
                    return Err(Error::BadMetadata {
                        key: k(key),
                        found: c.to_string(),
                        expected: "a positive cap (or 0 for none)".into(),
                    });
                }
                c => c,
            })
        };
        let (attn_softcap, final_softcap) = match arch {
            Arch::Gemma2 => (
                softcap("attn_logit_softcapping", Some(50.0))?,
                softcap("final_logit_softcapping", Some(30.0))?,
            ),
            Arch::Gemma3 => (None, softcap("final_logit_softcapping", None)?),
            _ => (None, None),
        };
        let window = count(g, &k("attention.sliding_window"))?;
        let (sliding_window, pattern) = match arch {
            Arch::Gemma2 => (Some(window.unwrap_or(4096)), 2),
            Arch::Gemma3 => (window.filter(|&w| w > 0), 6),
            _ => (None, 0),
        };
        let swa_layers = match sliding_window {
            None => Vec::new(),
            Some(0) => {
                return Err(bad(
                    &k("attention.sliding_window"),
                    g.get(&k("attention.sliding_window")).expect("read above"),
                    "at least 1 key",
                ));
            }
            Some(_) => swa_pattern(g, &k("attention.sliding_window_pattern"), pattern, layers)?,
        };
        let rope_base_swa = float(g, &k("rope.freq_base_swa"))?.unwrap_or(match arch {
            Arch::Gemma3 => 10_000.0,
            _ => rope_base,
        });
        let rope_scaling_swa = match arch {
            Arch::Gemma3 => RopeScaling::None,
            _ => rope_scaling.clone(),
        };
        // Gemma 2 and 3 at 27B scale q by the model width per head (Gemma's
        // `query_pre_attn_scalar`), which GGUF does not store.
        let attn_scale = match (arch, layers) {
            (Arch::Gemma2, 46) | (Arch::Gemma3, 62) => Some(1.0 / ((hidden / heads) as f32).sqrt()),
            _ => None,
        };
        Ok(Config {
            arch,
            vocab,
            hidden,
            layers,
            heads,
            kv_heads,
            head_dim,
            ffn,
            context,
            rms_eps: float(g, &k("attention.layer_norm_rms_epsilon"))?.unwrap_or(1e-5),
            rope_base,
            rope_dims,
            rope_scaling,
            attn_scale,
            attn_softcap,
            final_softcap,
            sliding_window,
            swa_layers,
            rope_base_swa,
            rope_scaling_swa,
        })
    }

    /// Whether block `l` attends through the sliding window.
    pub fn is_swa(&self, l: usize) -> bool {
        self.swa_layers.get(l).copied().unwrap_or(false)
    }

    /// Weight elements a decode step reads (every matrix once, the
    /// output's included, the embedding's single row left out): times the
    /// bytes per weight, the numerator of the bandwidth floor.
    pub fn decode_weight_elems(&self) -> usize {
        let (h, d) = (self.hidden, self.head_dim);
        let attn = h * self.heads * d * 2 + h * self.kv_heads * d * 2;
        let ffn = 3 * h * self.ffn;
        self.layers * (attn + ffn) + self.vocab * h
    }
}
