//! ferrocm-ops: the typed op library.
//!
//! [`Tensor<T>`] for T in f32, f16, bf16 (the `half` crate's types), u8, u32,
//! i64, on any [`Device`]: the `Cpu` backend runs native Rust (rayon), the
//! `Emulator` and ROCm and CUDA GPUs run the kernels of `ferrocm-kernels`,
//! and GPUs run vendor libraries where an op has one.
//!
//! Folders by area: [`core`] (the tensor types, layouts, dtypes, errors),
//! [`engine`] (the seam every op runs through: [`engine::Op`],
//! [`engine::run`], the Cpu engine and the kernel-path helpers; public, so
//! a crate outside ferrocm adds fused ops the same way), and the op areas
//! [`elementwise`], [`reduce`], [`index`], [`matmul`], [`nn`], [`quant`]. Each family
//! is one file holding its API, its Cpu implementation and its kernel
//! dispatch.
//!
//! ```
//! # use ferrocm_ops::WaveSize;
//! use ferrocm_ops::{Device, Tensor};
//! let dev = Device::emulator(WaveSize::Wave64);
//! let x = Tensor::<f32>::randn(&[4, 8], 0.0, 1.0, 42, &dev)?;
//! let y = x.exp()?.sum(&[1], false)?;
//! let cpu = x.to_device(&Device::Cpu)?.exp()?.sum(&[1], false)?;
//! for (a, b) in y.to_vec()?.iter().zip(cpu.to_vec()?) {
//!     assert!((a - b).abs() < 1e-4 * b.abs());
//! }
//! # Ok::<(), ferrocm_ops::Error>(())
//! ```

pub mod conv;
pub mod core;
pub mod elementwise;
pub mod engine;
pub mod index;
pub mod matmul;
pub mod nn;
pub mod quant;
pub mod reduce;

// The modules at the flat paths of earlier versions
// (`ferrocm_ops::unary` is `ferrocm_ops::elementwise::unary`).
pub use crate::core::{dim, dtype, dyn_tensor, error, layout, storage, tensor};
pub use elementwise::{binary, cast, fill, ternary, unary};
pub use index::sort;
pub use nn::{attention, glu, loss, norm, rope};

pub use attention::AttentionOptions;
pub use binary::{Binary, Cmp};
pub use dim::{Dim, Dims};
pub use dtype::{DType, WithDType};
pub use dyn_tensor::DynTensor;
pub use error::{Error, Result};
pub use ferrocm_host::{Device, EmulatorConfig, Error as HostError, Graph, GraphStats, WaveSize};
pub use half::{bf16, f16};
pub use index::IdType;
pub use layout::Layout;
pub use matmul::Activation;
pub use quant::{QTensor, QuantFormat};
pub use reduce::Reduce;
pub use storage::{Format, Storage};
pub use tensor::{QueuedVec, Tensor};
pub use ternary::MaskType;
pub use unary::Unary;
