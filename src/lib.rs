//! ferrocm: pure-Rust GPU kernels for AMD GPUs (and NVIDIA GPUs, from the
//! same sources).
//!
//! This facade re-exports the three layers:
//! - [`kernels`] (ferrocm-kernels): every kernel as `#[amdgpu_global]` Rust,
//!   embedded as one AMDGPU code object per arch and one PTX module, on the
//!   device layer a kernel crate of your own uses too;
//! - [`host`] (ferrocm-host): devices, buffers, the launch path, the SIMT
//!   emulator and its sanitizer, the ROCm and CUDA backends (features `rocm`
//!   and `cuda`) behind one [`host::GpuBackend`] trait;
//! - [`ops`] (ferrocm-ops): `Tensor<T>`, `DynTensor` and the op families, on
//!   a public seam ([`ops::engine`]) through which a crate of your own adds
//!   fused ops with their own kernels.
//!
//! The `ferrocm` command (check, bench, kernels, info) is the `ferrocm-cli`
//! package of this workspace.
//!
//! ```
//! use ferrocm::{Device, Tensor};
//! let dev = Device::best(); // a ROCm or CUDA GPU if one answers, else the CPU
//! let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3], &dev)?;
//! assert_eq!(x.affine(2.0, 1.0)?.to_vec()?, vec![3.0, 5.0, 7.0]);
//! # Ok::<(), ferrocm::Error>(())
//! ```

pub use ferrocm_host as host;
pub use ferrocm_host::{EmulatorConfig, Error as HostError, WaveSize};
pub use ferrocm_kernels as kernels;
pub use ferrocm_ops as ops;
pub use ferrocm_ops::{
    Activation, AttentionOptions, Binary, Cmp, DType, Device, Dim, Dims, DynTensor, Error, Graph,
    GraphStats, IdType, Reduce, Result, Tensor, Unary, WithDType, bf16, f16,
};
