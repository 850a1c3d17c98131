//! Builds every kernel of this crate into one AMDGPU code object per arch
//! (`FERROCM_ARCHS`) and one PTX module (`FERROCM_PTX`), checks them, and
//! writes the `KERNEL_MODULE` that embeds them (see ferrocm-build, which
//! builds the kernels of crates outside ferrocm the same way).

fn main() {
    ferrocm_build::KernelBuild::device_layer_crate()
        // `gemm_mma_*` runs MMA_BLOCK (256) workitems per workgroup; two
        // workgroups per SM hide each other's barrier and load waits (one
        // alone left the H100's tensor pipes idle).
        .launch_bounds("gemm_mma_", 256, 2)
        .compile();
}
