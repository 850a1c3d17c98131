//! Quantized weights: GGML's block formats defined once for every target
//! ([`blocks`]), GGML's reference K-quant quantizers (host only,
//! [`kquantize`]), and their kernels: dequantize ([`dequant`]) and the
//! matrix-vector product ([`matvec`]).

pub mod blocks;
pub mod dequant;
#[cfg(not(ferrocm_device))]
pub mod kquantize;
pub mod matvec;

pub use blocks::*;
#[cfg(not(ferrocm_device))]
pub use dequant::{DequantArgs, DequantKernels};
