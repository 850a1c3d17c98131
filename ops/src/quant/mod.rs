//! Quantized weights: GGML's block formats ([`QuantFormat`]), the
//! block-quantized tensor ([`QTensor`]) and its ops: quantize,
//! dequantize, and the linear layer ([`QTensor::forward`], [`Weight`], on
//! activations rounded to 8 bits: [`Q8Activations`]);
//! and GGUF files ([`gguf`]) and their quantization ([`requantize`]).

pub mod activations;
pub mod format;
pub mod gguf;
pub mod matvec;
pub mod qtensor;
pub mod requantize;
#[cfg(target_arch = "x86_64")]
mod tiles;

pub use activations::Q8Activations;
pub use format::QuantFormat;
pub use matvec::Weight;
pub use qtensor::QTensor;
