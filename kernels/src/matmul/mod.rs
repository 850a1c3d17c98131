//! Matrix products on our own kernels: the register-tiled GEMM, the
//! matrix-unit GEMM (on the device layer's `mma` primitive) and the GEMV of
//! decode shapes, with the fused bias and activation epilogue, in
//! [`dense`]. (Quantized products will sit beside it.)

pub mod dense;

pub use dense::*;
