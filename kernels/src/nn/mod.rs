//! The transformer layer's own kernels: [`norm`] (RMSNorm, LayerNorm and
//! their fused residual adds), [`glu`] (SwiGLU, GeGLU, ReGLU), [`rope`]
//! (rotary embeddings in their three layouts) and [`attention`] (decode and
//! prefill, on the row kernels and on the matrix units); and the
//! convolution network's [`channel_norm`] (group, instance and batch norm).

pub mod attention;
pub mod channel_norm;
pub mod glu;
pub mod norm;
pub mod rope;
