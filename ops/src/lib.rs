//! ferrocm-ops: the typed op library.
//!
//! [`Tensor<T>`] for T in f32, f16, bf16 (the `half` crate's types), u8, u32,
//! i64, on any [`Device`]: the `Cpu` backend runs native Rust (rayon), the
//! `Emulator` and ROCm GPUs run the kernels of `ferrocm-kernels`. Every op
//! file holds the op's API, its CPU implementation and its GPU dispatch.
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

pub mod attention;
mod backend;
pub mod bench;
pub mod binary;
pub mod cast;
pub mod check;
mod cpu;
pub mod dim;
pub mod dtype;
pub mod dyn_tensor;
pub mod error;
pub mod fill;
pub mod glu;
mod gpu;
pub mod index;
pub mod layout;
pub mod matmul;
pub mod norm;
pub mod reduce;
pub mod rope;
pub mod sort;
pub mod storage;
pub mod tensor;
pub mod ternary;
pub mod unary;

pub use attention::AttentionOptions;
pub use binary::{Binary, Cmp};
pub use dim::{Dim, Dims};
pub use dtype::{DType, WithDType};
pub use dyn_tensor::DynTensor;
pub use error::{Error, Result};
pub use ferrocm_host::{Device, EmulatorConfig, Error as HostError, WaveSize};
pub use half::{bf16, f16};
pub use index::IdType;
pub use layout::Layout;
pub use matmul::Activation;
pub use reduce::Reduce;
pub use storage::{BlockFormat, Format, Storage};
pub use tensor::Tensor;
pub use ternary::MaskType;
pub use unary::Unary;
