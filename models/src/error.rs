//! The models crate's errors: what is wrong with a file or a request,
//! named as the caller gave it, and the op library's errors passed through.

/// A model error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A metadata key the architecture needs is not in the file.
    #[error("GGUF metadata {key:?} is missing")]
    MissingMetadata {
        /// The key.
        key: String,
    },
    /// A metadata value has the wrong type or an impossible value.
    #[error("GGUF metadata {key:?} is {found}, expected {expected}")]
    BadMetadata {
        /// The key.
        key: String,
        /// The value found, written out.
        found: String,
        /// What the model needs.
        expected: String,
    },
    /// A tensor the architecture needs is not in the file.
    #[error("tensor {name:?} is missing from the file")]
    MissingTensor {
        /// The tensor's name.
        name: String,
    },
    /// A tensor has a shape the metadata does not allow.
    #[error("tensor {name:?} has shape {found:?}, the metadata implies {expected:?}")]
    TensorShape {
        /// The tensor's name.
        name: String,
        /// Its shape in the file (row-major, `[out, in]` for a weight).
        found: Vec<usize>,
        /// The shape the metadata implies.
        expected: Vec<usize>,
    },
    /// The file's architecture is not one this crate builds.
    #[error("architecture {0:?} is not supported (llama, qwen2, qwen3)")]
    UnsupportedArchitecture(String),
    /// A feature of the model that this crate does not implement.
    #[error("{what} is not supported: {why}")]
    Unsupported {
        /// The feature.
        what: String,
        /// Why, or what is supported.
        why: String,
    },
    /// More positions than the cache (the context) holds.
    #[error("{needed} positions are needed, past the context of {context}")]
    ContextOverflow {
        /// Positions the request needs (cached + new).
        needed: usize,
        /// The context the cache was made for.
        context: usize,
    },
    /// A token id outside the vocabulary.
    #[error("token id {id} is outside the vocabulary of {vocab}")]
    BadToken {
        /// The id.
        id: u32,
        /// The vocabulary size.
        vocab: usize,
    },
    /// A request that cannot be carried out as given.
    #[error("{op}: {what}")]
    BadRequest {
        /// The call.
        op: &'static str,
        /// What is wrong, with the values as given.
        what: String,
    },
    /// The tokenizer failed on a text or a token.
    #[error("{op}: {what}")]
    Tokenizer {
        /// The call.
        op: &'static str,
        /// What failed.
        what: String,
    },
    /// A chat template that does not parse, or raised an error.
    #[error("chat template: {what}")]
    ChatTemplate {
        /// The template engine's message.
        what: String,
    },
    /// An op failed (device memory, a launch, shapes).
    #[error(transparent)]
    Op(#[from] ferrocm_ops::Error),
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<ferrocm_ops::HostError> for Error {
    /// A device error (a graph's recording or launch) as an op's.
    fn from(e: ferrocm_ops::HostError) -> Self {
        Error::Op(e.into())
    }
}
