//! The transformer layer's ops: [`norm`] (`rms_norm`, `layer_norm` and the
//! fused residual adds), [`glu`] (SwiGLU, GeGLU, ReGLU), [`rope`] (rotary
//! embeddings), [`attention`] (scaled dot-product attention) and [`loss`]
//! (the common losses, PyTorch's conventions); and the convolution
//! network's [`channel_norm`] (`group_norm`, `instance_norm`, `batch_norm`).

pub mod attention;
pub mod channel_norm;
pub mod glu;
pub mod loss;
pub mod norm;
pub mod rope;
