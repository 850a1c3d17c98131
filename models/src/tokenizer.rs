//! The GGUF's own tokenizer, built with the `tokenizers` crate from the
//! vocabulary the file carries, and its chat template rendered with
//! `minijinja`.
//!
//! llama.cpp defines what a GGUF's tokenizer means, so this follows it:
//! - `tokenizer.ggml.model = "llama"` (SentencePiece): a space is put in
//!   front of each run of text (`tokenizer.ggml.add_space_prefix`, default
//!   true), spaces become `▁`, adjacent pieces merge highest score first,
//!   and a character outside the vocabulary becomes its UTF-8 bytes
//!   (`<0x..>` tokens). Here that is a BPE whose merge ranks are the
//!   vocabulary's scores (every split of a token into two tokens is a merge,
//!   ranked by the joined token's score) with byte fallback.
//! - `"gpt2"`: byte-level BPE with the file's merges, the text first split
//!   by the regular expressions of `tokenizer.ggml.pre` (`default`,
//!   `llama3`/`llama-bpe`, `qwen2`, `gpt-2`, `smaug-bpe`, `smollm` and
//!   `starcoder`, `tekken`, `deepseek-coder`, with llama.cpp's aliases);
//!   Llama 3's and Tekken's also take a whole word that is a token before
//!   any merge.
//! - Control, unknown and user-defined tokens written in the text are
//!   matched as themselves before anything else (control and unknown ones
//!   only when special tokens are parsed); `add_bos_token`/`add_eos_token`
//!   as the file says, with llama.cpp's defaults.
//!
//! Verified against llama.cpp's `llama-tokenize` on vocabularies of both
//! kinds and each pre-tokenizer (`tests/tokenizer.rs`).
//!
//! ```
//! use ferrocm_models::{synthetic::SyntheticModel, Arch, Tokenizer};
//! use ferrocm_ops::quant::gguf::Gguf;
//! let file = Gguf::from_bytes(SyntheticModel::new(Arch::Llama).to_gguf()?.to_bytes()?)?;
//! let tokenizer = Tokenizer::from_gguf(&file)?;
//! let ids = tokenizer.encode("Hello, world")?;
//! assert_eq!(ids[0], tokenizer.bos().unwrap()); // the file asks for BOS
//! assert_eq!(tokenizer.decode(&ids[1..]), " Hello, world"); // the added space prefix
//! # Ok::<(), ferrocm_models::Error>(())
//! ```

use crate::error::{Error, Result};
use ferrocm_ops::quant::gguf::{Gguf, GgufValue};
use std::collections::HashMap;
use std::sync::OnceLock;
use tokenizers::models::bpe::BPE;
use tokenizers::normalizers::{Prepend, Replace};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence as PreSequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, NormalizerWrapper, PreTokenizerWrapper, SplitDelimiterBehavior};

/// GGUF's token types (`tokenizer.ggml.token_type`, llama.cpp's `llama_token_type`).
mod token_type {
    pub const NORMAL: i32 = 1;
    pub const UNKNOWN: i32 = 2;
    pub const CONTROL: i32 = 3;
    pub const USER_DEFINED: i32 = 4;
    pub const BYTE: i32 = 6;
}

/// The text splitting before a byte-level BPE (`tokenizer.ggml.pre`), as
/// llama.cpp defines each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PreTokenizer {
    /// `default` (or none named): GPT-2's split with llama.cpp's punctuation
    /// and digit refinements.
    Default,
    /// Llama 3 (`llama3`, `llama-bpe`, `llama-v3`, `falcon3`, `pixtral`):
    /// digits in groups of up to three; a word in the vocabulary is one token.
    Llama3,
    /// Smaug (`smaug-bpe`): Llama 3's split, merges always applied.
    Smaug,
    /// Qwen 2 (`qwen2`, `deepseek-r1-qwen`): digits one at a time.
    Qwen2,
    /// GPT-2's own split (`gpt-2`, `phi-2`, `mpt`, `olmo`, `jais`).
    Gpt2,
    /// GPT-2's split after digits apart (`smollm`, `starcoder`, `refact`,
    /// `command-r`, `codeshell`, `exaone`, `minerva`).
    StarCoder,
    /// Mistral's Tekken (`tekken`: Mistral NeMo): case runs kept apart; a
    /// word in the vocabulary is one token; BOS by default.
    Tekken,
    /// DeepSeek Coder (`deepseek-coder`).
    DeepSeekCoder,
}

/// GPT-2's pattern.
const GPT2_SPLIT: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
/// Llama 3's pattern (llama.cpp spells the case-insensitive contractions out).
const LLAMA3_SPLIT: &str = concat!(
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])",
    r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);

impl PreTokenizer {
    /// The pre-tokenizer a `tokenizer.ggml.pre` name means, if supported.
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "default" => Self::Default,
            "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "pixtral" => Self::Llama3,
            "smaug-bpe" => Self::Smaug,
            "qwen2" | "deepseek-r1-qwen" => Self::Qwen2,
            "gpt-2" | "phi-2" | "mpt" | "olmo" | "jais" => Self::Gpt2,
            "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" | "exaone"
            | "minerva" => Self::StarCoder,
            "tekken" => Self::Tekken,
            "deepseek-coder" => Self::DeepSeekCoder,
            _ => return None,
        })
    }

    /// Whether a word that is a token is taken whole before any merge.
    fn ignores_merges(self) -> bool {
        matches!(self, Self::Llama3 | Self::Tekken)
    }

    /// Whether BOS is added when the file does not say.
    fn adds_bos(self) -> bool {
        matches!(self, Self::Llama3 | Self::Tekken)
    }

    /// The regular expressions applied one after another (each splits the
    /// pieces the previous left), as llama.cpp's `llm_tokenizer_bpe` has them.
    fn regexes(self) -> &'static [&'static str] {
        match self {
            Self::Default => &[
                r"[\p{P}\$\+<=>\^~\|]+",
                GPT2_SPLIT,
                r"\p{N}+",
                r"[0-9][0-9][0-9]",
            ],
            Self::Llama3 | Self::Smaug => &[LLAMA3_SPLIT],
            Self::Qwen2 => &[concat!(
                "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])",
                r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
            )],
            Self::Gpt2 => &[GPT2_SPLIT],
            Self::StarCoder => &[r"\p{N}", GPT2_SPLIT],
            Self::Tekken => &[concat!(
                r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+",
                r"|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*",
                r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
            )],
            Self::DeepSeekCoder => &[
                r"[\r\n]",
                r"\s?\p{L}+",
                r"\s?\p{P}+",
                "[\u{4E00}-\u{9FA5}\u{0800}-\u{4E00}\u{AC00}-\u{D7FF}]+",
                r"\p{N}",
            ],
        }
    }
}

/// The kind of vocabulary (`tokenizer.ggml.model`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TokenizerKind {
    /// `llama`: SentencePiece pieces with scores and byte fallback.
    SentencePiece,
    /// `gpt2`: byte-level BPE with merges.
    ByteLevelBpe(PreTokenizer),
}

/// One message of a chat, as chat templates take it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ChatMessage {
    /// `system`, `user` or `assistant` (or what the template knows).
    pub role: String,
    /// The text.
    pub content: String,
}

impl ChatMessage {
    /// A message from `role`.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// A GGUF's tokenizer: text to token ids and back, its special tokens, the
/// tokens that end a generation, and its chat template.
pub struct Tokenizer {
    /// Special tokens written in the text are matched (llama.cpp's `parse_special`).
    parsing: tokenizers::Tokenizer,
    /// The same with control tokens left as text, made on first use.
    literal: OnceLock<tokenizers::Tokenizer>,
    kind: TokenizerKind,
    tokens: Vec<String>,
    types: Vec<i32>,
    /// Each token's bytes in the text (empty for control tokens).
    pieces: Vec<Vec<u8>>,
    bos: Option<u32>,
    eos: Option<u32>,
    add_bos: bool,
    add_eos: bool,
    end_of_generation: Vec<u32>,
    chat_template: Option<String>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("kind", &self.kind)
            .field("vocab", &self.tokens.len())
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .field("add_bos", &self.add_bos)
            .field("add_eos", &self.add_eos)
            .field("end_of_generation", &self.end_of_generation)
            .finish_non_exhaustive()
    }
}

fn bad(key: &str, found: impl Into<String>, expected: impl Into<String>) -> Error {
    Error::BadMetadata {
        key: key.into(),
        found: found.into(),
        expected: expected.into(),
    }
}

fn tokenizer_error(op: &'static str, e: impl std::fmt::Display) -> Error {
    Error::Tokenizer {
        op,
        what: e.to_string(),
    }
}

/// A metadata array's items, checked to be `len` long when given.
fn array<'g>(g: &'g Gguf, key: &str, len: Option<usize>) -> Result<Option<&'g [GgufValue]>> {
    let Some(v) = g.get(key) else {
        return Ok(None);
    };
    let items = v
        .as_array()
        .ok_or_else(|| bad(key, format!("a {}", type_name(v)), "an array"))?;
    if let Some(n) = len
        && items.len() != n
    {
        return Err(bad(
            key,
            format!("{} items", items.len()),
            format!("{n}, one per token"),
        ));
    }
    Ok(Some(items))
}

/// A metadata array of one value per token (`n`), each converted by `item`
/// (`None` for a value of the wrong type: `expected` names the right one).
fn per_token<T>(
    g: &Gguf,
    key: &str,
    n: usize,
    expected: &str,
    item: impl Fn(&GgufValue) -> Option<T>,
) -> Result<Option<Vec<T>>> {
    let Some(items) = array(g, key, Some(n))? else {
        return Ok(None);
    };
    items
        .iter()
        .map(|v| item(v).ok_or_else(|| bad(key, format!("a {}", type_name(v)), expected)))
        .collect::<Result<_>>()
        .map(Some)
}

fn type_name(v: &GgufValue) -> &'static str {
    match v {
        GgufValue::String(_) => "string",
        GgufValue::Array { .. } => "array",
        GgufValue::Bool(_) => "bool",
        GgufValue::F32(_) | GgufValue::F64(_) => "float",
        _ => "integer",
    }
}

fn token_id(g: &Gguf, key: &str, vocab: usize) -> Result<Option<u32>> {
    let Some(v) = g.get(key) else {
        return Ok(None);
    };
    match v.as_i128() {
        Some(id) if (0..vocab as i128).contains(&id) => Ok(Some(id as u32)),
        // llama.cpp writes -1 (as an unsigned integer too) for "none".
        Some(-1) | Some(0xffff_ffff) => Ok(None),
        Some(id) => Err(bad(
            key,
            id.to_string(),
            format!("a token id below {vocab}"),
        )),
        None => Err(bad(key, format!("a {}", type_name(v)), "an integer")),
    }
}

fn flag(g: &Gguf, key: &str) -> Result<Option<bool>> {
    match g.get(key) {
        None => Ok(None),
        Some(GgufValue::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(bad(key, format!("a {}", type_name(v)), "a bool")),
    }
}

/// Texts llama.cpp takes as ending a turn when the file names no such token.
const END_OF_TURN_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|eom_id|>",
    "<|end_of_text|>",
    "<EOT>",
];

impl Tokenizer {
    /// The tokenizer a GGUF file describes (`tokenizer.ggml.*` and
    /// `tokenizer.chat_template`).
    ///
    /// # Errors
    /// [`Error::MissingMetadata`] without `tokenizer.ggml.model` or
    /// `tokens` (or `merges` for `gpt2`); [`Error::BadMetadata`] for values
    /// of the wrong type, arrays whose length is not the vocabulary's, ids
    /// past it, or merges of unknown tokens; [`Error::Unsupported`] for
    /// another tokenizer model or pre-tokenizer.
    pub fn from_gguf(g: &Gguf) -> Result<Self> {
        let key = "tokenizer.ggml.model";
        let model = g
            .get(key)
            .ok_or_else(|| Error::MissingMetadata { key: key.into() })?;
        let model = model
            .as_str()
            .ok_or_else(|| bad(key, format!("a {}", type_name(model)), "a string"))?;
        let key = "tokenizer.ggml.tokens";
        let tokens: Vec<String> = array(g, key, None)?
            .ok_or_else(|| Error::MissingMetadata { key: key.into() })?
            .iter()
            .enumerate()
            .map(|(i, v)| {
                v.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| bad(key, format!("item {i} a {}", type_name(v)), "strings"))
            })
            .collect::<Result<_>>()?;
        let n = tokens.len();
        if n == 0 || n > u32::MAX as usize {
            return Err(bad(key, format!("{n} tokens"), "1 to 2^32-1 tokens"));
        }
        let types = per_token(g, "tokenizer.ggml.token_type", n, "integers", |v| {
            v.as_i128().map(|t| t as i32)
        })?
        .unwrap_or_else(|| vec![token_type::NORMAL; n]);
        let pre_name = match g.get("tokenizer.ggml.pre") {
            None => None,
            Some(v) => Some(
                v.as_str()
                    .ok_or_else(|| bad("tokenizer.ggml.pre", type_name(v), "a string"))?,
            ),
        };
        let (kind, bpe) = match model {
            "llama" => (
                TokenizerKind::SentencePiece,
                sentencepiece_bpe(g, &tokens, &types)?,
            ),
            "gpt2" => {
                let pre = match pre_name {
                    None => PreTokenizer::Default,
                    Some(name) => PreTokenizer::from_name(name).ok_or_else(|| Error::Unsupported {
                        what: format!("pre-tokenizer {name:?}"),
                        why: "supported: default, llama3 (llama-bpe, llama-v3, falcon3, pixtral), smaug-bpe, \
                              qwen2 (deepseek-r1-qwen), gpt-2 (phi-2, mpt, olmo, jais), smollm (starcoder, \
                              refact, command-r, codeshell, exaone, minerva), tekken, deepseek-coder"
                            .into(),
                    })?,
                };
                (
                    TokenizerKind::ByteLevelBpe(pre),
                    byte_level_bpe(g, &tokens, pre)?,
                )
            }
            other => {
                return Err(Error::Unsupported {
                    what: format!("tokenizer model {other:?}"),
                    why: "supported: llama (SentencePiece) and gpt2 (byte-level BPE)".into(),
                });
            }
        };
        let mut parsing = tokenizers::Tokenizer::new(bpe);
        match kind {
            TokenizerKind::SentencePiece => {
                let space_prefix = flag(g, "tokenizer.ggml.add_space_prefix")?.unwrap_or(true);
                let mut normalizers = Vec::new();
                if space_prefix {
                    normalizers.push(NormalizerWrapper::Prepend(Prepend::new("▁".into())));
                }
                normalizers.push(NormalizerWrapper::Replace(
                    Replace::new(" ", "▁")
                        .map_err(|e| tokenizer_error("Tokenizer::from_gguf", e))?,
                ));
                parsing
                    .with_normalizer(Some(NormalizerWrapper::Sequence(
                        tokenizers::normalizers::Sequence::new(normalizers),
                    )))
                    .map_err(|e| tokenizer_error("Tokenizer::from_gguf", e))?;
            }
            TokenizerKind::ByteLevelBpe(pre) => {
                let mut steps = Vec::new();
                for r in pre.regexes() {
                    let split = Split::new(
                        SplitPattern::Regex((*r).into()),
                        SplitDelimiterBehavior::Isolated,
                        false,
                    )
                    .map_err(|e| tokenizer_error("Tokenizer::from_gguf", e))?;
                    steps.push(PreTokenizerWrapper::Split(split));
                }
                steps.push(PreTokenizerWrapper::ByteLevel(ByteLevel::new(
                    false, false, false,
                )));
                parsing.with_pre_tokenizer(Some(PreTokenizerWrapper::Sequence(PreSequence::new(
                    steps,
                ))));
            }
        }
        // Tokens matched in the text as themselves, before any splitting.
        let mut special = Vec::new();
        let mut user = Vec::new();
        for (text, &t) in tokens.iter().zip(&types) {
            if text.is_empty() {
                continue;
            }
            match t {
                token_type::CONTROL | token_type::UNKNOWN => {
                    special.push(AddedToken::from(text.clone(), true).normalized(false))
                }
                token_type::USER_DEFINED => {
                    user.push(AddedToken::from(text.clone(), false).normalized(false))
                }
                _ => {}
            }
        }
        parsing
            .add_special_tokens(special)
            .map_err(|e| tokenizer_error("Tokenizer::from_gguf", e))?;
        parsing
            .add_tokens(user)
            .map_err(|e| tokenizer_error("Tokenizer::from_gguf", e))?;

        let bos = token_id(g, "tokenizer.ggml.bos_token_id", n)?;
        let eos = token_id(g, "tokenizer.ggml.eos_token_id", n)?;
        let default_bos = match kind {
            TokenizerKind::SentencePiece => true,
            TokenizerKind::ByteLevelBpe(pre) => pre.adds_bos(),
        };
        let add_bos = flag(g, "tokenizer.ggml.add_bos_token")?.unwrap_or(default_bos);
        let add_eos = flag(g, "tokenizer.ggml.add_eos_token")?.unwrap_or(false);
        if add_bos && bos.is_none() {
            return Err(Error::MissingMetadata {
                key: "tokenizer.ggml.bos_token_id (add_bos_token is true)".into(),
            });
        }
        if add_eos && eos.is_none() {
            return Err(Error::MissingMetadata {
                key: "tokenizer.ggml.eos_token_id (add_eos_token is true)".into(),
            });
        }
        let mut end_of_generation: Vec<u32> = [
            eos,
            token_id(g, "tokenizer.ggml.eot_token_id", n)?,
            token_id(g, "tokenizer.ggml.eom_token_id", n)?,
        ]
        .into_iter()
        .flatten()
        .collect();
        for (id, text) in tokens.iter().enumerate() {
            if END_OF_TURN_TEXTS.contains(&text.as_str()) {
                end_of_generation.push(id as u32);
            }
        }
        end_of_generation.sort_unstable();
        end_of_generation.dedup();
        let chat_template = match g.get("tokenizer.chat_template") {
            None => None,
            Some(v) => Some(
                v.as_str()
                    .ok_or_else(|| bad("tokenizer.chat_template", type_name(v), "a string"))?
                    .to_owned(),
            ),
        };
        let pieces = tokens
            .iter()
            .zip(&types)
            .map(|(text, &t)| piece_bytes(kind, text, t))
            .collect();
        Ok(Self {
            parsing,
            literal: OnceLock::new(),
            kind,
            tokens,
            types,
            pieces,
            bos,
            eos,
            add_bos,
            add_eos,
            end_of_generation,
            chat_template,
        })
    }

    /// The token ids of `text` with the file's BOS/EOS added and special
    /// tokens written in the text (`<|eot_id|>`, `<s>`) parsed as tokens,
    /// as llama.cpp tokenizes a prompt.
    ///
    /// # Errors
    /// [`Error::Tokenizer`] if the tokenizer fails (not expected for any
    /// UTF-8 text).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        self.encode_with(text, true, true)
    }

    /// The token ids of `text`: BOS/EOS added when `add_special` and the
    /// file asks for them; control tokens written in the text matched as
    /// tokens only when `parse_special` (leave it false for text from
    /// someone who must not inject them). User-defined tokens are always
    /// matched, as in llama.cpp.
    ///
    /// # Errors
    /// As [`Tokenizer::encode`].
    pub fn encode_with(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<u32>> {
        let tokenizer = if parse_special {
            &self.parsing
        } else {
            self.literal.get_or_init(|| {
                let mut t = self.parsing.clone();
                t.set_encode_special_tokens(true);
                t
            })
        };
        let mut ids = Vec::with_capacity(text.len() / 3 + 2);
        if add_special && self.add_bos {
            ids.extend(self.bos);
        }
        if !text.is_empty() {
            let encoding = tokenizer
                .encode_fast(text, false)
                .map_err(|e| tokenizer_error("Tokenizer::encode", e))?;
            ids.extend_from_slice(encoding.get_ids());
        }
        if add_special && self.add_eos {
            ids.extend(self.eos);
        }
        Ok(ids)
    }

    /// The text of `ids`, control and unknown tokens left out, bytes joined into UTF-8
    /// (an invalid sequence becomes U+FFFD). Ids past the vocabulary are
    /// skipped. Pieces are llama.cpp's `token_to_piece`: SentencePiece's
    /// `▁` is a space (the one put first included), byte tokens their byte.
    pub fn decode(&self, ids: &[u32]) -> String {
        let bytes: Vec<u8> = ids.iter().flat_map(|&id| self.piece(id)).copied().collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// A token's bytes in the text (empty for control and unknown tokens
    /// and ids past the vocabulary; one byte of a character for a byte
    /// token).
    pub fn piece(&self, id: u32) -> &[u8] {
        self.pieces.get(id as usize).map_or(&[], Vec::as_slice)
    }

    /// A decoder for a stream of generated tokens: each [`TextStream::push`]
    /// returns the text that became complete (a character split over
    /// several byte tokens comes out whole).
    pub fn stream(&self) -> TextStream<'_> {
        TextStream {
            tokenizer: self,
            pending: Vec::new(),
        }
    }

    /// The vocabulary's size.
    pub fn vocab_size(&self) -> usize {
        self.tokens.len()
    }

    /// The kind of vocabulary.
    pub fn kind(&self) -> TokenizerKind {
        self.kind
    }

    /// A token's text as the vocabulary stores it (`▁` for a SentencePiece
    /// space, `Ġ` for a byte-level one).
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize).map(String::as_str)
    }

    /// The id of a token written exactly as the vocabulary stores it.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.parsing.token_to_id(text)
    }

    /// Whether `id` is a control token (BOS, EOS, a chat marker).
    pub fn is_control(&self, id: u32) -> bool {
        self.types.get(id as usize) == Some(&token_type::CONTROL)
    }

    /// Whether the token is one of the 256 byte tokens (`<0x0A>`).
    pub fn is_byte(&self, id: u32) -> bool {
        self.types.get(id as usize) == Some(&token_type::BYTE)
    }

    /// The beginning-of-sequence token.
    pub fn bos(&self) -> Option<u32> {
        self.bos
    }

    /// The end-of-sequence token.
    pub fn eos(&self) -> Option<u32> {
        self.eos
    }

    /// Whether [`Tokenizer::encode`] puts BOS first.
    pub fn adds_bos(&self) -> bool {
        self.add_bos
    }

    /// The tokens that end a generation: EOS, end of turn (`eot_token_id`,
    /// `<|eot_id|>`, `<|im_end|>`, ...) and end of message.
    pub fn end_of_generation(&self) -> &[u32] {
        &self.end_of_generation
    }

    /// The file's chat template (`tokenizer.chat_template`), Jinja source.
    pub fn chat_template(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }

    /// `messages` rendered with the file's chat template, as Hugging Face's
    /// `apply_chat_template` renders it (`trim_blocks`, `lstrip_blocks`;
    /// `bos_token`, `eos_token`, `add_generation_prompt`, `tools = none`;
    /// `raise_exception`; Python's string methods). A template without a
    /// system role (Gemma 1 and 2, Mistral's first) gets a leading system
    /// message as llama.cpp gives it: in front of the next message's text,
    /// a newline between (see [`render_chat_template`]).
    ///
    /// # Errors
    /// [`Error::Unsupported`] when the file has no template;
    /// [`Error::ChatTemplate`] when it does not parse or raises.
    pub fn apply_chat_template(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String> {
        let template = self.chat_template().ok_or_else(|| Error::Unsupported {
            what: "a chat".into(),
            why: "the file has no tokenizer.chat_template".into(),
        })?;
        render_chat_template(
            template,
            messages,
            add_generation_prompt,
            self.bos.and_then(|id| self.token_text(id)).unwrap_or(""),
            self.eos.and_then(|id| self.token_text(id)).unwrap_or(""),
        )
    }
}

/// `messages` through a Jinja chat template (see
/// [`Tokenizer::apply_chat_template`]). Whether the template has a system
/// role is found as llama.cpp finds it: a system message and a user one
/// rendered, the system text must come out; where it does not (the
/// template raises, or leaves it out), a leading system message is merged
/// into the next message (`system + "\n" + content`), or dropped when it
/// is the only one.
///
/// ```
/// use ferrocm_models::tokenizer::{render_chat_template, ChatMessage};
/// let chatml = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}\
///               {% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
/// let text = render_chat_template(chatml, &[ChatMessage::new("user", "Hi")], true, "", "")?;
/// assert_eq!(text, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
/// # Ok::<(), ferrocm_models::Error>(())
/// ```
///
/// # Errors
/// [`Error::ChatTemplate`] when the template does not parse or raises.
pub fn render_chat_template(
    template: &str,
    messages: &[ChatMessage],
    add_generation_prompt: bool,
    bos_token: &str,
    eos_token: &str,
) -> Result<String> {
    let mut env = minijinja::Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function(
        "raise_exception",
        |message: String| -> std::result::Result<String, minijinja::Error> {
            Err(minijinja::Error::new(
                minijinja::ErrorKind::InvalidOperation,
                message,
            ))
        },
    );
    let error = |e: minijinja::Error| Error::ChatTemplate {
        what: match e.detail() {
            Some(detail) => format!("{} ({detail})", e.kind()),
            None => e.to_string(),
        },
    };
    let template = env.template_from_str(template).map_err(error)?;
    let render = |messages: &[ChatMessage]| {
        template.render(minijinja::context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => bos_token,
            eos_token => eos_token,
            tools => (),
            documents => (),
        })
    };
    let mut merged;
    let mut messages = messages;
    if messages.first().is_some_and(|m| m.role == "system") {
        let needle = "<ferrocm system probe>";
        let probe = [
            ChatMessage::new("system", needle),
            ChatMessage::new("user", "User message"),
        ];
        let has_system_role = render(&probe).is_ok_and(|text| text.contains(needle));
        if !has_system_role {
            merged = messages[1..].to_vec();
            if let Some(next) = merged.first_mut() {
                next.content = format!("{}\n{}", messages[0].content, next.content);
            }
            messages = &merged;
        }
    }
    render(messages).map_err(error)
}

/// Generated tokens to text as they come (see [`Tokenizer::stream`]).
///
/// ```
/// use ferrocm_models::{synthetic::SyntheticModel, Arch, Tokenizer};
/// use ferrocm_ops::quant::gguf::Gguf;
/// let t = Tokenizer::from_gguf(&Gguf::from_bytes(SyntheticModel::new(Arch::Llama).to_gguf()?.to_bytes()?)?)?;
/// let ids = t.encode_with("é", false, true)?; // "▁" then two byte tokens
/// let mut stream = t.stream();
/// let pieces: Vec<_> = ids.iter().map(|&id| stream.push(id)).collect();
/// assert_eq!(pieces, [Some(" ".to_string()), None, Some("é".to_string())]);
/// # Ok::<(), ferrocm_models::Error>(())
/// ```
pub struct TextStream<'t> {
    tokenizer: &'t Tokenizer,
    /// Bytes of a character not yet complete.
    pending: Vec<u8>,
}

impl TextStream<'_> {
    /// Takes the next token; returns the text it completes, if any. Bytes
    /// that cannot start or continue a UTF-8 character come out as U+FFFD.
    pub fn push(&mut self, id: u32) -> Option<String> {
        self.pending.extend_from_slice(self.tokenizer.piece(id));
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(text) => {
                    out.push_str(text);
                    self.pending.clear();
                    break;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    out.push_str(&String::from_utf8_lossy(&self.pending[..valid]));
                    match e.error_len() {
                        Some(bad) => {
                            out.push('\u{fffd}');
                            self.pending.drain(..valid + bad);
                        }
                        // A character's first bytes: wait for the rest.
                        None => {
                            self.pending.drain(..valid);
                            break;
                        }
                    }
                }
            }
        }
        (!out.is_empty()).then_some(out)
    }

    /// Bytes of an unfinished character at the end, as U+FFFD.
    pub fn finish(&mut self) -> Option<String> {
        if self.pending.is_empty() {
            return None;
        }
        self.pending.clear();
        Some("\u{fffd}".into())
    }
}

/// A token's bytes in the text, as llama.cpp's `token_to_piece` (special
/// tokens not rendered) gives them: control and unknown tokens print
/// nothing there (the `▅` it has for SentencePiece's unknown token is only
/// for special tokens rendered).
fn piece_bytes(kind: TokenizerKind, text: &str, ty: i32) -> Vec<u8> {
    match ty {
        token_type::CONTROL | token_type::UNKNOWN => Vec::new(),
        token_type::USER_DEFINED => text.as_bytes().to_vec(),
        token_type::BYTE => text
            .strip_prefix("<0x")
            .and_then(|h| h.strip_suffix('>'))
            .and_then(|h| u8::from_str_radix(h, 16).ok())
            .map_or_else(|| text.as_bytes().to_vec(), |b| vec![b]),
        _ => match kind {
            TokenizerKind::SentencePiece => text.replace('▁', " ").into_bytes(),
            TokenizerKind::ByteLevelBpe(_) => text
                .chars()
                .flat_map(|c| match byte_level_byte(c) {
                    Some(b) => vec![b],
                    None => c.to_string().into_bytes(),
                })
                .collect(),
        },
    }
}

/// The byte a GPT-2 byte-level character stands for: printable bytes are
/// themselves, the other 68 are U+0100 upwards in byte order.
fn byte_level_byte(c: char) -> Option<u8> {
    let printable =
        |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
    let c = c as u32;
    if c < 256 {
        return printable(c).then_some(c as u8);
    }
    // The non-printable bytes in order: 0..=32, 127..=160, 173.
    match c - 256 {
        n @ 0..=32 => Some(n as u8),
        n @ 33..=66 => Some((127 + n - 33) as u8),
        67 => Some(173),
        _ => None,
    }
}

/// A SentencePiece vocabulary as a BPE: every split of a token into two
/// tokens is a merge, ranked by the joined token's score (highest first),
/// so merging lowest rank first is SentencePiece's highest-score-first.
fn sentencepiece_bpe(g: &Gguf, tokens: &[String], types: &[i32]) -> Result<BPE> {
    let scores = per_token(g, "tokenizer.ggml.scores", tokens.len(), "floats", |v| {
        v.as_f64().map(|s| s as f32)
    })?
    .unwrap_or_else(|| vec![0.0; tokens.len()]);
    let vocab = vocab_map(tokens);
    let mut merges: Vec<(f32, u32, &str, &str)> = Vec::new();
    for (id, text) in tokens.iter().enumerate() {
        // The id a lookup of the text finds (the last of duplicates, as llama.cpp's).
        if vocab.get(text.as_str()) != Some(&(id as u32)) || types[id] == token_type::BYTE {
            continue;
        }
        for (split, _) in text.char_indices().skip(1) {
            let (left, right) = text.split_at(split);
            if vocab.contains_key(left) && vocab.contains_key(right) {
                merges.push((scores[id], id as u32, left, right));
            }
        }
    }
    // Highest score first; equal scores by id (SentencePiece takes the
    // leftmost pair among equals: this differs only between two different
    // tokens of one score).
    merges.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let merges = merges
        .into_iter()
        .map(|(_, _, l, r)| (l.to_owned(), r.to_owned()))
        .collect();
    let unk = tokens
        .iter()
        .zip(types)
        .find(|(_, t)| **t == token_type::UNKNOWN)
        .map(|(text, _)| text.clone());
    let mut builder = BPE::builder()
        .vocab_and_merges(owned_vocab(vocab), merges)
        .byte_fallback(true);
    if let Some(unk) = unk {
        builder = builder.unk_token(unk);
    }
    builder.build().map_err(|e| {
        bad(
            "tokenizer.ggml.tokens",
            e.to_string(),
            "a SentencePiece vocabulary",
        )
    })
}

/// A byte-level BPE from the file's merges (`"left right"` strings).
fn byte_level_bpe(g: &Gguf, tokens: &[String], pre: PreTokenizer) -> Result<BPE> {
    let key = "tokenizer.ggml.merges";
    let items = array(g, key, None)?.ok_or_else(|| Error::MissingMetadata { key: key.into() })?;
    let mut merges = Vec::with_capacity(items.len());
    for (i, v) in items.iter().enumerate() {
        let s = v
            .as_str()
            .ok_or_else(|| bad(key, format!("item {i} a {}", type_name(v)), "strings"))?;
        // The separator is the first space after the first character (a
        // merge's left side may itself be a space).
        let first = s.chars().next().map_or(0, char::len_utf8);
        let Some(at) = s[first..].find(' ').map(|p| p + first) else {
            return Err(bad(key, format!("item {i} {s:?}"), "\"left right\""));
        };
        merges.push((s[..at].to_owned(), s[at + 1..].to_owned()));
    }
    let vocab = vocab_map(tokens);
    BPE::builder()
        .vocab_and_merges(owned_vocab(vocab), merges)
        .ignore_merges(pre.ignores_merges())
        .build()
        .map_err(|e| bad(key, e.to_string(), "merges of tokens in the vocabulary"))
}

fn vocab_map(tokens: &[String]) -> HashMap<&str, u32> {
    let mut vocab = HashMap::with_capacity(tokens.len());
    for (id, text) in tokens.iter().enumerate() {
        vocab.insert(text.as_str(), id as u32);
    }
    vocab
}

fn owned_vocab(vocab: HashMap<&str, u32>) -> tokenizers::models::bpe::Vocab {
    vocab.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}
