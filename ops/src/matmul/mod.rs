//! Matrix products of dense tensors ([`dense`]: `matmul`, `matvec`,
//! `linear`), on the vendor BLAS where a GPU has one and on our kernels
//! everywhere. (Quantized weights' products will sit beside it.)

mod cpu;
pub mod dense;

pub use dense::*;
