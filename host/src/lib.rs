//! ferrocm-host: devices, buffers and one launch path for every device.
//!
//! - [`Device::Cpu`]: host memory; the op library runs native CPU code on it.
//! - [`Device::Emulator`]: the CPU SIMT emulator runs the very kernels that are
//!   compiled for AMD GPUs, with a sanitizer (red zones, poisoned outputs, LDS
//!   bounds, deadlock detection). This is how kernels are tested without a GPU.
//! - `Device::Rocm` (feature `rocm`): HIP through rocm-rs, the embedded code
//!   object matching the GPU's arch, rocBLAS and MIOpen handles.
//! - `Device::Cuda` (feature `cuda`): NVIDIA GPUs through the CUDA driver API
//!   (cudarc, loaded at run time), running the same kernels compiled to PTX.
//!
//! ```
//! # use ferrocm_host::WaveSize;
//! use ferrocm_host::{Arg, Device, LaunchConfig};
//! let dev = Device::emulator(WaveSize::Wave32);
//! let x = dev.upload(&[1.0f32, 4.0, 9.0]).unwrap();
//! let y = dev.alloc::<f32>(3).unwrap();
//! dev.launch("unary_sqrt_f32", LaunchConfig::linear(3, 64),
//!     &[Arg::output(&y), Arg::input(&x), Arg::U64(3), Arg::U32(0), Arg::Null,
//!       Arg::U64(0), Arg::U64(0), Arg::U64(0), Arg::U64(0), Arg::F32(0.0)]).unwrap();
//! assert_eq!(y.download().unwrap(), vec![1.0, 2.0, 3.0]);
//! ```

pub mod blas;
pub mod buffer;
pub mod codeobject;
#[cfg(feature = "cuda")]
mod cublas;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod device;
mod emulator;
pub mod error;
pub mod fault;
pub mod launch;
pub mod memory;
pub mod ptx;
#[cfg(feature = "rocm")]
pub mod rocm;

pub use buffer::{DeviceBuffer, RawBuffer};
pub use device::{Device, EmulatorConfig, GpuInfo, WaveSize};
pub use error::{Error, Result};
pub use fault::{FAULT_WORDS, FaultChannel, ID_OUT_OF_RANGE};
pub use launch::{Arg, In, LaunchConfig, Out, Param, Params};
pub use memory::MemoryStats;
