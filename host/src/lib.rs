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
//! The modules, each using only those above it in this list:
//! [`error`]; [`memory`] (the caching allocator's pool, host blocks with red
//! zones); [`launch`] (what a launch is); [`blas`] and [`dnn`] (the library
//! hooks' call descriptions); [`gpu`] (the trait a GPU backend implements);
//! [`graph`] (recording queued work and launching it as one graph);
//! [`emulator`]; [`codeobject`] and [`ptx`] (reading the compiled kernels);
//! `rocm` and `cuda` (the two backends, each a folder split by concern);
//! [`device`] (`Device` and everything it owns: buffers, kernel arguments,
//! the one launch check, fault words, the checked library entries).
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
pub mod codeobject;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod device;
pub mod dnn;
pub mod emulator;
pub mod error;
pub mod gpu;
pub mod graph;
pub mod launch;
pub mod memory;
pub mod ptx;
#[cfg(feature = "rocm")]
pub mod rocm;

pub use device::args::{Arg, In, Out, Param, Params};
pub use device::buffer::{DeviceBuffer, QueuedDownload, RawBuffer};
pub use device::fault::{FAULT_WORDS, FaultChannel, ID_OUT_OF_RANGE};
pub use device::{Device, devices, gpus};
pub use emulator::{EmulatorConfig, WaveSize};
pub use error::{Error, Result};
pub use gpu::{GpuBackend, GpuInfo, QueuedRead};
pub use graph::{Graph, GraphLaunch, GraphStats};
pub use launch::LaunchConfig;
pub use memory::{MemoryStats, POISON, RED_ZONE};
