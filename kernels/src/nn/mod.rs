//! The transformer layer's own kernels: [`norm`] (RMSNorm, LayerNorm and
//! their fused residual adds), [`glu`] (SwiGLU, GeGLU, ReGLU), [`rope`]
//! (rotary embeddings in their three layouts) and [`attention`] (decode and
//! prefill, on the row kernels and on the matrix units).

pub mod attention;
pub mod glu;
pub mod norm;
pub mod rope;
