//! The transformer layer's ops: [`norm`] (`rms_norm`, `layer_norm` and the
//! fused residual adds), [`glu`] (SwiGLU, GeGLU, ReGLU), [`rope`] (rotary
//! embeddings) and [`attention`] (scaled dot-product attention).

pub mod attention;
pub mod glu;
pub mod norm;
pub mod rope;
