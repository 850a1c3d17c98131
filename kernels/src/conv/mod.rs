//! Convolution-network kernels: [`convolution`] (convolution in 1, 2 and 3 dims,
//! as an implicit GEMM and as a direct sum).

pub mod convolution;
