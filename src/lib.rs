//! ferrocm: pure-Rust GPU kernels for AMD GPUs.
//!
//! This facade re-exports the three layers:
//! - [`kernels`] (ferrocm-kernels): every kernel as `#[amdgpu_global]` Rust,
//!   embedded as one AMDGPU code object per arch;
//! - [`host`] (ferrocm-host): devices, buffers, the launch path, the SIMT
//!   emulator and its sanitizer, the ROCm backend (feature `rocm`);
//! - [`ops`] (ferrocm-ops): `Tensor<T>` and the op families.
//!
//! ```
//! use ferrocm::{Device, Tensor};
//! let dev = Device::best(); // a ROCm GPU if one answers, else the CPU
//! let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3], &dev)?;
//! assert_eq!(x.affine(2.0, 1.0)?.to_vec()?, vec![3.0, 5.0, 7.0]);
//! # Ok::<(), ferrocm::Error>(())
//! ```

pub use ferrocm_host as host;
pub use ferrocm_host::{EmulatorConfig, Error as HostError, WaveSize};
pub use ferrocm_kernels as kernels;
pub use ferrocm_ops as ops;
pub use ferrocm_ops::{
    Activation, AttentionOptions, Binary, Cmp, DType, Device, Dim, Dims, DynTensor, Error, IdType,
    Reduce, Result, Tensor, Unary, WithDType, bf16, f16,
};
