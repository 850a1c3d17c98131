//! ferrocm-build: compiles kernels written in Rust against ferrocm's device
//! layer into one AMDGPU code object per arch and one PTX module, from a
//! build script, and checks what it built.
//!
//! ferrocm-kernels builds its own kernels with it; a crate outside ferrocm
//! builds its kernels the same way, with one line in its `build.rs`:
//!
//! ```no_run
//! // build.rs of a crate whose kernels are in src/fused.rs (a `kernels!`
//! // file that uses `ferrocm_kernels::prelude::*`): its `main` is this line.
//! ferrocm_build::compile_kernels(&["fused"]);
//! ```
//!
//! and `ferrocm_kernels::kernel_module!();` in its `lib.rs`, which embeds
//! the result as the crate's `KERNEL_MODULE` (the module every kernel the
//! crate declares is launched from). See ferrocm's `docs/adding-a-kernel.md`,
//! "An op in your own crate".
//!
//! What a build does:
//! 1. reads the kernel modules (a module may be a folder: `src/quant/mod.rs`
//!    declaring `src/quant/q4_k.rs`) and fails on a `.rs` file in them that
//!    no module declares (it would be compiled for no target);
//! 2. writes a `no_std` device crate of those files, rewritten as
//!    rocm_kernel_macros would (`#[amdgpu_global]` becomes an exported
//!    `extern "gpu-kernel"` fn) with every line kept in place, beside the
//!    device layer (`device`, `elem`, `math`, `mma`, `prelude`);
//! 3. builds it for every arch of `FERROCM_ARCHS` (default
//!    [`archs::DEFAULT_ARCHS`]) and the PTX target of `FERROCM_PTX` (default
//!    sm_80, `off` for none), `FERROCM_KERNEL_JOBS` (default 2) at a time,
//!    under `target/ferrocm-device/`;
//! 4. checks the results: every target holds the same kernels, no AMDGPU
//!    kernel spills or uses scratch, no PTX function uses local memory;
//!    any finding fails the build and names the kernel and the target;
//! 5. writes `$OUT_DIR/ferrocm_kernel_module.rs`, the
//!    `ferrocm_kernels::KernelModule` that embeds the objects.
//!
//! It also reads what it built, for ferrocm-host too: [`codeobject`] (the
//! AMDGPU metadata: registers, LDS, scratch, spills, argument layout,
//! occupancy) and [`ptx`] (entries and their parameters, local memory).

pub mod archs;
pub mod codeobject;
mod compile;
pub mod ptx;
mod rewrite;
mod source;
mod toolchain;

pub use compile::{KernelBuild, MODULE_FILE};
pub use toolchain::PINNED_NIGHTLY;

/// Builds the kernels of `modules` (top-level modules of the calling
/// crate's `src/`) for every target: [`KernelBuild::new`]`(modules).compile()`.
/// Call it from `build.rs`; a failure stops the build with the reason.
pub fn compile_kernels(modules: &[&str]) {
    KernelBuild::new(modules).compile()
}

/// Stops the build script: cargo shows a failed build script's stderr, and
/// the first lines go out as `cargo::error`s.
pub(crate) fn fail(msg: &str) -> ! {
    eprintln!("{msg}");
    for line in msg.lines().filter(|l| !l.trim().is_empty()).take(3) {
        println!("cargo::error={line}");
    }
    std::process::exit(1);
}
