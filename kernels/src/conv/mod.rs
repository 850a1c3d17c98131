//! Convolution-network kernels: [`convolution`] (convolution in 1, 2 and 3
//! dims, as an implicit GEMM and as a direct sum), [`pool`] (max, average
//! and adaptive pooling) and [`resample`] (nearest and bilinear resizing).

pub mod convolution;
pub mod pool;
pub mod resample;
