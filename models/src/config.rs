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
}

impl Arch {
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
        [Arch::Llama, Arch::Qwen2, Arch::Qwen3]
            .into_iter()
            .find(|a| a.name() == name)
    }

    /// Whether rotary pairs are adjacent dims `(2i, 2i + 1)`: GGML's normal
    /// mode, which `llama` GGUFs use (the converter permutes q and k rows so
    /// that it equals Hugging Face's halves); Qwen uses halves `(i, i + d/2)`
    /// (GGML's NeoX mode).
    pub fn rope_interleaved(self) -> bool {
        matches!(self, Arch::Llama)
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
            rope_base: float(g, &k("rope.freq_base"))?.unwrap_or(10_000.0),
            rope_dims,
            rope_scaling,
        })
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
