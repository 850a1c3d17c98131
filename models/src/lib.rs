//! Models on ferrocm's op library: Llama-family decoder-only transformers
//! built from a GGUF file's metadata and tensors, their KV cache, sampling
//! and generation.
//!
//! The arrows point one way: this crate uses `ferrocm-ops` (and through it
//! the host and the kernels); nothing below knows models exist. Every
//! computation is an op of that library, so a model runs on every device it
//! runs on: the Cpu, the emulator, ROCm and CUDA.
//!
//! ```
//! use ferrocm_models::{synthetic::SyntheticModel, Arch, Generation, Llama, SamplingOptions};
//! use ferrocm_ops::{Device, quant::gguf::Gguf};
//! // A tiny random-weight model written with the GGUF writer, then loaded as a user would.
//! let file = SyntheticModel::new(Arch::Llama).to_gguf()?.to_bytes()?;
//! let model = Llama::<f32>::load(&Gguf::from_bytes(file)?, &Device::Cpu, &Default::default())?;
//! let mut generation = Generation::new(&model, SamplingOptions::greedy())?;
//! let tokens = generation.generate(&[1, 7, 42], 4, |_token| true)?;
//! assert_eq!(tokens.len(), 4);
//! # Ok::<(), ferrocm_models::Error>(())
//! ```

pub mod chat;
pub mod config;
pub mod error;
pub mod generate;
pub mod llama;
pub mod sampling;
pub mod synthetic;
pub mod tokenizer;

pub use chat::{Chat, StopStrings};
pub use config::{Arch, Config, RopeScaling};
pub use error::{Error, Result};
pub use generate::{Generation, GenerationStats};
pub use llama::{KvCache, Llama, LoadOptions, Logits, StepGraphs};
pub use sampling::{Sampler, SamplingOptions};
pub use tokenizer::{ChatMessage, Tokenizer};
