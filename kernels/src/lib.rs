//! ferrocm-kernels: the device code of ferrocm.
//!
//! Every kernel is Rust marked `#[amdgpu_global]` (rocm_kernel_macros), one
//! file per op family, on one device layer ([`device`], [`elem`], [`math`]).
//! The same functions are compiled twice:
//! - for the host, as plain Rust: the CPU SIMT emulator of `ferrocm-host` runs
//!   them per workitem ([`host::KernelInfo::entry`]);
//! - by `build.rs`, for every AMDGPU arch in `FERROCM_ARCHS`, into code objects
//!   embedded here ([`CODE_OBJECTS`]), and for NVIDIA GPUs into one PTX module
//!   ([`PTX_MODULE`], target `FERROCM_PTX`, default sm_80).
//!
//! ```
//! let names: Vec<&str> = ferrocm_kernels::kernels().map(|k| k.name).collect();
//! assert!(names.contains(&"unary_exp_f32"));
//! assert!(!ferrocm_kernels::CODE_OBJECTS.is_empty());
//! ```

// Kernel bodies are safe fns over raw pointers: the GPU ABI gives them raw
// pointers, and only kernels call them, with arguments the launch API checked
// (count, kinds, element sizes, devices) before the launch.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

// rocm_kernel_macros' attributes write the project they generate under
// `kernel_sources/` and need it to exist; ferrocm builds the device code from
// these sources itself (see build.rs), so this project is not used further.
#[allow(dead_code, unused_imports)]
mod rocm_kernel_macros_project {
    rocm_kernel_macros::amdgpu_kernel_init!();
}

pub mod host;

pub mod device;
pub mod elem;
pub mod math;
pub mod mma;

pub mod affine;
pub mod attention;
pub mod binary;
pub mod cast;
pub mod fill;
pub mod glu;
pub mod index;
pub mod matmul;
pub mod norm;
pub mod reduce;
pub mod rope;
pub mod sort;
pub mod ternary;
pub mod unary;

/// Every kernel family's per-dtype table, for one element type: the single
/// bound the op library puts on a dtype's device type. A new family adds its
/// table trait here.
pub trait ElemKernels:
    elem::Elem
    + unary::UnaryKernels
    + binary::BinaryKernels
    + ternary::WhereValue
    + cast::CastSource
    + cast::CastTarget
    + fill::FillKernels
    + affine::AffineKernels
    + reduce::ReduceKernels
    + sort::SortKernels
    + index::ScatterKernels
    + matmul::MatmulKernels
    + norm::NormKernels
    + glu::GluKernels
    + rope::RopeKernels
    + attention::AttnKernels
{
}

impl<T> ElemKernels for T where
    T: elem::Elem
        + unary::UnaryKernels
        + binary::BinaryKernels
        + ternary::WhereValue
        + cast::CastSource
        + cast::CastTarget
        + fill::FillKernels
        + affine::AffineKernels
        + reduce::ReduceKernels
        + sort::SortKernels
        + index::ScatterKernels
        + matmul::MatmulKernels
        + norm::NormKernels
        + glu::GluKernels
        + rope::RopeKernels
        + attention::AttnKernels
{
}

/// One embedded AMDGPU code object.
#[derive(Clone, Copy, Debug)]
pub struct CodeObject {
    /// Target name as rustc and the ROCm runtime spell it (`gfx942`, `gfx11-generic`).
    pub arch: &'static str,
    /// The ELF bytes, loadable with hipModuleLoadData.
    pub bytes: &'static [u8],
}

/// The embedded PTX module: every kernel compiled for `nvptx64-nvidia-cuda`
/// from the same sources, for NVIDIA GPUs (the driver compiles it for the GPU
/// it meets).
#[derive(Clone, Copy, Debug)]
pub struct PtxModule {
    /// The PTX `.target` (`sm_80`): the oldest GPU it runs on.
    pub target: &'static str,
    /// The PTX text, loadable with cuModuleLoadData (NUL-terminate it first).
    pub text: &'static str,
}

include!(concat!(env!("OUT_DIR"), "/code_objects.rs"));

/// The code object built for `arch`, if any.
///
/// ```
/// assert!(ferrocm_kernels::code_object("gfx000").is_none());
/// ```
pub fn code_object(arch: &str) -> Option<&'static CodeObject> {
    CODE_OBJECTS.iter().find(|c| c.arch == arch)
}

/// Every kernel this crate declares, across all op families.
pub fn kernels() -> impl Iterator<Item = &'static host::KernelInfo> {
    [
        unary::KERNELS,
        binary::KERNELS,
        binary::CMP_KERNELS,
        ternary::KERNELS,
        cast::KERNELS,
        fill::KERNELS,
        affine::KERNELS,
        reduce::KERNELS,
        reduce::COL_KERNELS,
        reduce::ARG_KERNELS,
        reduce::SOFTMAX_KERNELS,
        index::KERNELS,
        index::COPY_INTO_KERNELS,
        index::SCATTER_KERNELS,
        sort::KERNELS,
        matmul::KERNELS,
        matmul::MMA_KERNELS,
        norm::KERNELS,
        glu::KERNELS,
        rope::KERNELS,
        attention::KERNELS,
    ]
    .into_iter()
    .flatten()
    .copied()
}

/// The kernel named `name`, if declared.
///
/// ```
/// assert!(ferrocm_kernels::kernel("unary_exp_f32").is_some());
/// ```
pub fn kernel(name: &str) -> Option<&'static host::KernelInfo> {
    kernels().find(|k| k.name == name)
}
