//! Quantized weights: GGML's block formats defined once for every target
//! ([`blocks`]), and their kernels: dequantize ([`dequant`]) and the
//! matrix-vector product ([`matvec`]).

pub mod blocks;
pub mod dequant;
pub mod matvec;

pub use blocks::*;
#[cfg(not(ferrocm_device))]
pub use dequant::{DequantArgs, DequantKernels};
