//! The transformer layer's ops: [`norm`] (`rms_norm`, `layer_norm` and the
//! fused residual adds), [`glu`] (SwiGLU, GeGLU, ReGLU), [`rope`] (rotary
//! embeddings), [`attention`] (scaled dot-product attention) and [`loss`]
//! (the common losses, PyTorch's conventions).

pub mod attention;
pub mod glu;
pub mod loss;
pub mod norm;
pub mod rope;
