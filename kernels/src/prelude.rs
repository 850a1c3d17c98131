//! What a kernel file needs, in one import: the device layer ([`device`]'s
//! ids, loops, strides, barriers, LDS and wave operations, [`elem`]'s element
//! types, [`math`], [`mma`]) and the `kernels!` declaration macro; on the
//! host, rocm_kernel_macros' `#[amdgpu_device]` and `#[amdgpu_global]`
//! attributes too.
//!
//! ```
//! use ferrocm_kernels::prelude::*;
//! assert_eq!(f32::from_f32(1.5).to_f32(), 1.5);
//! ```
//!
//! [`device`]: crate::device
//! [`elem`]: crate::elem

pub use crate::device::*;
pub use crate::elem::*;
pub use crate::kernels;
pub use crate::math;
pub use crate::mma;
// Host only: the device build removes this line (its attributes are
// rewritten there before they would be resolved).
pub use rocm_kernel_macros::{amdgpu_device, amdgpu_global};
