//! Rewriting a GGUF file's weight matrices in a quantized format, as
//! `llama-quantize` does without an importance matrix: `ferrocm quantize`.
//!
//! Which tensors: 2-D (or more) tensors named `*weight` held in f32, f16 or
//! bf16, except those llama-quantize keeps (the experts' router, position
//! and token-type embeddings, a few architectures' small tensors); norms, biases and
//! anything already quantized are copied unchanged. Which format: the type
//! asked for, except that the output projection (or the token embedding
//! when a model ties them) gets Q6_K unless Q8_0 was asked for (as
//! llama-quantize does; [`QuantMix::Pure`] turns that off), and the `_M`
//! mixes give more bits to some layers' `attn_v` and `ffn_down` (the first
//! and last eighth and every third in between) and to fused `attn_qkv`. A
//! tensor whose rows are not a whole number of the format's blocks falls
//! back to a format of 32-element blocks with as many bits (Q2_K/Q3_K to
//! Q4_0, Q4_K to Q5_0, Q5_K to Q5_1, Q6_K to Q8_0), and stays as it is when
//! even that does not fit.

use super::QuantFormat;
use super::gguf::{GgmlType, Gguf, GgufValue, GgufWriter};
use super::qtensor::quantize_values;
use crate::{DType, Error, Result};

/// What [`quantize_gguf`] makes of a file's weight matrices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuantMix {
    /// Every weight matrix in this format, the output projection in Q6_K
    /// (llama-quantize's plain `Q4_0`, `Q4_K`, ...).
    Uniform(QuantFormat),
    /// Every weight matrix in this format, the output projection too
    /// (llama-quantize's `--pure`).
    Pure(QuantFormat),
    /// Q4_K with Q6_K for some layers' `attn_v`/`ffn_down` and the output,
    /// Q5_K for fused `attn_qkv`.
    Q4KM,
    /// Q5_K with Q6_K for some layers' `attn_v`/`ffn_down`, fused
    /// `attn_qkv` and the output.
    Q5KM,
}

/// The formats llama-quantize writes weights in and ferrocm can quantize
/// to (Q8_1 and Q8_K are activation formats; the IQ4 formats and MXFP4
/// have no quantizer yet).
const WEIGHT_FORMATS: [QuantFormat; 10] = {
    use QuantFormat::*;
    [Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2K, Q3K, Q4K, Q5K, Q6K]
};

impl std::str::FromStr for QuantMix {
    type Err = Error;

    /// `Q4_K_M`, `Q5_K_M`, or a format name (`q4_0`, `Q6_K`; any case) for
    /// [`QuantMix::Uniform`]; `Q4_K_S`/`Q5_K_S` are taken as `Q4_K`/`Q5_K`.
    ///
    /// ```
    /// use ferrocm_ops::quant::requantize::QuantMix;
    /// use ferrocm_ops::QuantFormat;
    /// assert_eq!("q4_k_m".parse::<QuantMix>()?, QuantMix::Q4KM);
    /// assert_eq!("Q8_0".parse::<QuantMix>()?, QuantMix::Uniform(QuantFormat::Q8_0));
    /// assert!("IQ4_XS".parse::<QuantMix>().is_err());
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    fn from_str(s: &str) -> Result<Self> {
        let upper = s.to_ascii_uppercase();
        match upper.as_str() {
            "Q4_K_M" => return Ok(Self::Q4KM),
            "Q5_K_M" => return Ok(Self::Q5KM),
            "Q4_K_S" => return Ok(Self::Uniform(QuantFormat::Q4K)),
            "Q5_K_S" => return Ok(Self::Uniform(QuantFormat::Q5K)),
            _ => {}
        }
        let f: Option<QuantFormat> = upper.parse().ok();
        match f {
            Some(f) if WEIGHT_FORMATS.contains(&f) => Ok(Self::Uniform(f)),
            _ => Err(Error::BadParameter {
                op: "QuantMix::from_str",
                what: format!(
                    "{s:?} is not a type to quantize weights to (one of Q4_K_M, Q5_K_M, Q4_K_S, Q5_K_S, {})",
                    WEIGHT_FORMATS.map(|f| f.name()).join(", ")
                ),
            }),
        }
    }
}

impl QuantMix {
    /// The format of most weight matrices.
    pub fn base(self) -> QuantFormat {
        match self {
            Self::Uniform(f) | Self::Pure(f) => f,
            Self::Q4KM => QuantFormat::Q4K,
            Self::Q5KM => QuantFormat::Q5K,
        }
    }

    /// llama.cpp's `general.file_type` (`LLAMA_FTYPE_MOSTLY_*`) for files
    /// quantized with this mix.
    pub fn file_type(self) -> u32 {
        use QuantFormat::*;
        match self {
            Self::Q4KM => 15,
            Self::Q5KM => 17,
            Self::Uniform(f) | Self::Pure(f) => match f {
                Q4_0 => 2,
                Q4_1 => 3,
                Q8_0 => 7,
                Q5_0 => 8,
                Q5_1 => 9,
                Q2K => 10,
                Q3K => 11,
                Q4K => 14,
                Q5K => 16,
                _ => 18,
            },
        }
    }
}

/// One tensor of the file and what [`quantize_gguf`] writes it as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorPlan {
    /// The tensor's name.
    pub name: String,
    /// Its type in the input.
    pub from: GgmlType,
    /// Its type in the output (`from` when copied unchanged).
    pub to: GgmlType,
    /// Bytes in the input.
    pub bytes: u64,
}

/// Parts of the names of weights llama-quantize keeps as they are: norms,
/// the experts' router (`ffn_gate_inp`), position and token-type
/// embeddings, and small tensors of some architectures (Mamba's conv1d,
/// Gemma 3n's altup/laurel and per-layer projection, LFM2's short conv).
const KEEP: [&str; 9] = [
    "norm",
    "ffn_gate_inp",
    "pos_embd",
    "token_types",
    "ssm_conv1d",
    "shortconv.conv",
    "altup",
    "laurel",
    "per_layer_model_proj",
];

/// llama.cpp's choice of layers that get more bits in the `_M` mixes: the
/// first and last eighth, and every third in between.
fn more_bits(layer: usize, layers: usize) -> bool {
    let (i, n) = (layer as i64, layers as i64);
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

/// `N` of a `blk.N.` name.
fn layer_of(name: &str) -> Option<usize> {
    name.strip_prefix("blk.")?.split('.').next()?.parse().ok()
}

/// The format of 32-element blocks a K-quant falls back to for rows that
/// are not a whole number of 256-element blocks.
fn fallback(f: QuantFormat) -> QuantFormat {
    use QuantFormat::*;
    match f {
        Q2K | Q3K => Q4_0,
        Q4K => Q5_0,
        Q5K => Q5_1,
        Q6K => Q8_0,
        other => other,
    }
}

/// What [`quantize_gguf`] does with each tensor of `g`, in file order.
///
/// # Errors
/// [`Error::BadParameter`] when a mix names a format with no quantizer
/// (built by hand rather than parsed).
pub fn quantize_plan(g: &Gguf, mix: QuantMix) -> Result<Vec<TensorPlan>> {
    if !WEIGHT_FORMATS.contains(&mix.base()) {
        return Err(Error::BadParameter {
            op: "quantize_gguf",
            what: format!("{} is not a format to quantize weights to", mix.base()),
        });
    }
    let layers = g
        .tensors()
        .iter()
        .filter_map(|t| layer_of(&t.name))
        .max()
        .map_or(0, |l| l + 1);
    let has_output = g.tensors().iter().any(|t| t.name == "output.weight");
    let plan = g.tensors().iter().map(|t| {
        let dense = matches!(
            t.ggml_type,
            GgmlType::Dense(DType::F32 | DType::F16 | DType::BF16)
        );
        let quantize = dense
            && t.shape.len() >= 2
            && t.name.ends_with("weight")
            && !KEEP.iter().any(|part| t.name.contains(part));
        let to = if !quantize {
            t.ggml_type
        } else {
            let is_output =
                t.name == "output.weight" || (!has_output && t.name == "token_embd.weight");
            let layer = layer_of(&t.name).unwrap_or(0);
            let m = matches!(mix, QuantMix::Q4KM | QuantMix::Q5KM);
            let more = m
                && (t.name.ends_with("attn_v.weight") || t.name.ends_with("ffn_down.weight"))
                && more_bits(layer, layers);
            let output =
                is_output && !matches!(mix, QuantMix::Pure(_)) && mix.base() != QuantFormat::Q8_0;
            let mut f = match mix {
                _ if output || more => QuantFormat::Q6K,
                QuantMix::Q4KM if t.name.ends_with("attn_qkv.weight") => QuantFormat::Q5K,
                QuantMix::Q5KM if t.name.ends_with("attn_qkv.weight") => QuantFormat::Q6K,
                _ => mix.base(),
            };
            let row = *t.shape.last().expect("2-D or more");
            if !row.is_multiple_of(f.block_elems()) {
                f = fallback(f);
            }
            if row.is_multiple_of(f.block_elems()) {
                GgmlType::Quant(f)
            } else {
                t.ggml_type
            }
        };
        TensorPlan {
            name: t.name.clone(),
            from: t.ggml_type,
            to,
            bytes: t.bytes,
        }
    });
    Ok(plan.collect())
}

/// The f32 values of a dense f32, f16 or bf16 tensor's bytes.
fn values_of(dtype: DType, data: &[u8]) -> Vec<f32> {
    match dtype {
        DType::F16 => data
            .as_chunks::<2>()
            .0
            .iter()
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        DType::BF16 => data
            .as_chunks::<2>()
            .0
            .iter()
            .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        _ => data
            .as_chunks::<4>()
            .0
            .iter()
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    }
}

/// `g` with its weight matrices quantized as [`quantize_plan`] says
/// (GGML's reference quantizers on the host, rayon across blocks), its
/// metadata kept and `general.file_type` and `general.quantization_version`
/// set as llama-quantize sets them. `progress(done, total)` is called with
/// input bytes after each tensor.
///
/// ```
/// use ferrocm_ops::quant::gguf::{GgmlType, Gguf, GgufWriter};
/// use ferrocm_ops::quant::requantize::{quantize_gguf, QuantMix};
/// use ferrocm_ops::{DType, Device, QuantFormat, Tensor};
/// let w = Tensor::from_slice(&vec![0.5f32; 2 * 256], &[2, 256], &Device::Cpu)?;
/// let norm = Tensor::from_slice(&[1.0f32; 256], &[256], &Device::Cpu)?;
/// let mut file = GgufWriter::new();
/// file.tensor("blk.0.ffn_up.weight", &w.into())?.tensor("blk.0.ffn_norm.weight", &norm.into())?;
/// let g = Gguf::from_bytes(file.to_bytes()?)?;
/// let out = Gguf::from_bytes(quantize_gguf(&g, QuantMix::Q4KM, |_, _| {})?.to_bytes()?)?;
/// assert_eq!(out.tensors()[0].ggml_type, GgmlType::Quant(QuantFormat::Q4K));
/// assert_eq!(out.tensors()[1].ggml_type, GgmlType::Dense(DType::F32));
/// # Ok::<(), ferrocm_ops::Error>(())
/// ```
///
/// # Errors
/// As [`quantize_plan`]; [`Error::BadParameter`] from the writer (which
/// cannot happen for tensors read from one file).
pub fn quantize_gguf(
    g: &Gguf,
    mix: QuantMix,
    mut progress: impl FnMut(u64, u64),
) -> Result<GgufWriter> {
    let plan = quantize_plan(g, mix)?;
    let total: u64 = plan.iter().map(|p| p.bytes).sum();
    let mut out = GgufWriter::new();
    for (key, value) in g.metadata() {
        out.metadata(key, value.clone());
    }
    out.metadata("general.quantization_version", GgufValue::U32(2));
    out.metadata("general.file_type", GgufValue::U32(mix.file_type()));
    let mut done = 0;
    for (p, t) in plan.iter().zip(g.tensors()) {
        let data = g.tensor_bytes(&p.name)?;
        let bytes = match (p.from, p.to) {
            (GgmlType::Dense(dtype), GgmlType::Quant(f)) if p.from != p.to => {
                quantize_values("quantize_gguf", &values_of(dtype, data), f)?
            }
            _ => data.to_vec(),
        };
        out.raw(&p.name, &t.shape, p.to, bytes)?;
        done += p.bytes;
        progress(done, total);
    }
    Ok(out)
}
