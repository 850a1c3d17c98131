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

// Generated module files name the crate `ferrocm_kernels::...`, as they do
// in a kernel crate outside ferrocm; here that is this crate.
extern crate self as ferrocm_kernels;

pub mod host;

// The device layer: what every kernel file uses, and all a kernel file may
// use that is target-specific.
pub mod device;
pub mod elem;
pub mod math;
pub mod mma;
pub mod prelude;

// The op families, by area: one file per family.
pub mod conv;
pub mod elementwise;
pub mod index;
pub mod matmul;
pub mod nn;
pub mod quant;
pub mod reduce;

// The families at the flat paths of earlier versions
// (`ferrocm_kernels::unary` is `ferrocm_kernels::elementwise::unary`).
pub use elementwise::{affine, binary, cast, fill, ternary, unary};
pub use index::sort;
pub use nn::{attention, glu, norm, rope};

/// Declares [`ElemKernels`] from one list of the families' per-dtype table
/// traits: the trait and its blanket implementation.
macro_rules! elem_kernels {
    ($($table:path),* $(,)?) => {
        /// Every kernel family's per-dtype table, for one element type: the
        /// single bound the op library puts on a dtype's device type. A new
        /// family adds its table trait to the list in `lib.rs`, once.
        pub trait ElemKernels: elem::Elem $(+ $table)* {}

        impl<T> ElemKernels for T where T: elem::Elem $(+ $table)* {}
    };
}

elem_kernels!(
    unary::UnaryKernels,
    binary::BinaryKernels,
    ternary::WhereValue,
    cast::CastSource,
    cast::CastTarget,
    fill::FillKernels,
    affine::AffineKernels,
    reduce::ReduceKernels,
    sort::SortKernels,
    index::ScatterKernels,
    matmul::MatmulKernels,
    norm::NormKernels,
    glu::GluKernels,
    rope::RopeKernels,
    attention::AttnKernels,
    conv::convolution::ConvKernels,
    conv::pool::PoolKernels,
    conv::resample::ResampleKernels,
    nn::channel_norm::ChannelNormKernels,
);

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

/// One crate's device code: its kernels compiled for every AMDGPU arch of
/// the build and for NVIDIA's PTX (ferrocm-build writes it; a crate embeds
/// its own with [`kernel_module!`]). Every kernel's [`KernelInfo`](host::KernelInfo)
/// names the module it is in, and a GPU device loads a module the first
/// time one of its kernels launches.
///
/// ```
/// let m = &ferrocm_kernels::KERNEL_MODULE;
/// assert_eq!(m.name, "ferrocm-kernels");
/// assert!(m.code_object("gfx000").is_none());
/// ```
#[derive(Debug)]
pub struct KernelModule {
    /// The crate the kernels come from (its package name).
    pub name: &'static str,
    /// One code object per AMDGPU arch built.
    pub code_objects: &'static [CodeObject],
    /// The PTX module (None when built with `FERROCM_PTX=off`).
    pub ptx: Option<PtxModule>,
}

impl KernelModule {
    /// The code object built for `arch`, if any.
    pub fn code_object(&self, arch: &str) -> Option<&'static CodeObject> {
        self.code_objects.iter().find(|c| c.arch == arch)
    }

    /// The archs of the code objects, in build order.
    pub fn archs(&self) -> Vec<&'static str> {
        self.code_objects.iter().map(|c| c.arch).collect()
    }
}

/// ferrocm's own kernels: every kernel this crate declares, built by
/// `build.rs` for every arch in `FERROCM_ARCHS` and the PTX target.
pub static KERNEL_MODULE: KernelModule =
    include!(concat!(env!("OUT_DIR"), "/ferrocm_kernel_module.rs"));

/// The embedded code objects, one per arch ([`KERNEL_MODULE`]'s).
pub static CODE_OBJECTS: &[CodeObject] = KERNEL_MODULE.code_objects;

/// The embedded PTX module ([`KERNEL_MODULE`]'s; None when built with
/// `FERROCM_PTX=off`).
pub static PTX_MODULE: Option<PtxModule> = KERNEL_MODULE.ptx;

/// The code object built for `arch`, if any.
///
/// ```
/// assert!(ferrocm_kernels::code_object("gfx000").is_none());
/// ```
pub fn code_object(arch: &str) -> Option<&'static CodeObject> {
    KERNEL_MODULE.code_object(arch)
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
        index::indexing::KERNELS,
        index::COPY_INTO_KERNELS,
        index::SCATTER_KERNELS,
        sort::KERNELS,
        matmul::KERNELS,
        matmul::MMA_KERNELS,
        matmul::WIDE_KERNELS,
        norm::KERNELS,
        norm::Q8_KERNELS,
        glu::KERNELS,
        rope::KERNELS,
        rope::CACHE_KERNELS,
        attention::KERNELS,
        conv::convolution::KERNELS,
        conv::pool::KERNELS,
        conv::resample::KERNELS,
        nn::channel_norm::KERNELS,
        quant::dequant::KERNELS,
        quant::matvec::KERNELS,
        quant::matvec::QUANTIZE_X_KERNELS,
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

/// The kernels that use local memory on sm_90 under the launch bounds that
/// measured fastest (`kernels/ptxas-local-memory.txt`: NVIDIA's ptxas 12.9,
/// which CI runs through `scripts/ptxas-report.py`). `ferrocm kernels
/// --device cuda` reports these and fails only on others.
///
/// ```
/// assert!(ferrocm_kernels::spills_on_sm90("unary_gelu_f32"));
/// assert!(!ferrocm_kernels::spills_on_sm90("unary_exp_f32"));
/// ```
pub fn spills_on_sm90(name: &str) -> bool {
    include_str!("../ptxas-local-memory.txt")
        .lines()
        .filter_map(|l| l.split('#').next()?.split_whitespace().next())
        .any(|k| k == name)
}

/// Embeds a kernel crate's device code: put it once in the `lib.rs` of a
/// crate whose `build.rs` calls `ferrocm_build::compile_kernels`. It
/// defines `pub static KERNEL_MODULE: ferrocm_kernels::KernelModule` at the
/// crate root (the `kernels!` declarations of the crate name it) and sets
/// up rocm_kernel_macros' attributes for the host compile.
///
/// ```ignore
/// // lib.rs of a crate with its kernels in src/fused.rs
/// ferrocm_kernels::kernel_module!();
/// pub mod fused;
/// ```
#[macro_export]
macro_rules! kernel_module {
    () => {
        // rocm_kernel_macros' `#[amdgpu_global]` / `#[amdgpu_device]` write
        // a copy of each item under `kernel_sources/` in the host compile,
        // which this creates (ferrocm builds the device code itself).
        #[allow(dead_code, unused_imports)]
        mod __ferrocm_kernel_sources {
            $crate::__rocm_kernel_macros::amdgpu_kernel_init!();
        }

        /// This crate's device code: its kernels for every AMDGPU arch of
        /// the build and the PTX module (`ferrocm_build::compile_kernels`).
        pub static KERNEL_MODULE: $crate::KernelModule = {
            // The generated file names `ferrocm_kernels::...`.
            use $crate as ferrocm_kernels;
            include!(concat!(env!("OUT_DIR"), "/ferrocm_kernel_module.rs"))
        };
    };
}

#[doc(hidden)]
pub use rocm_kernel_macros as __rocm_kernel_macros;
