//! Builds every kernel of this crate into one AMDGPU code object per arch
//! (`FERROCM_ARCHS`) and one PTX module (`FERROCM_PTX`), checks them, and
//! writes the `KERNEL_MODULE` that embeds them (see ferrocm-build, which
//! builds the kernels of crates outside ferrocm the same way).

fn main() {
    let mut build = ferrocm_build::KernelBuild::device_layer_crate()
        // `gemm_mma_*` runs MMA_BLOCK (256) workitems per workgroup; two
        // workgroups per SM hide each other's barrier and load waits (one
        // alone left the H100's tensor pipes idle).
        .launch_bounds("gemm_mma_", 256, 2)
        .launch_bounds("gemm_wgmma_", 256, 2)
        .launch_bounds("conv_wgmma_", 256, 2)
        // `attn_mma_*` runs 4 waves (128 workitems); three workgroups an SM
        // (up to 168 registers) keep the prefill's products fed: at 171,
        // two fit, and the causal bf16 prefill lost what its fewer
        // instructions had gained (docs/h100-bench.md).
        .launch_bounds("attn_mma_", 128, 3)
        // d 64 (half the tiles' registers): four workgroups, up to 128.
        .launch_bounds("attn_mma_f16_d64", 128, 4)
        .launch_bounds("attn_mma_bf16_d64", 128, 4)
        // The f32 gelu map (BLOCK = 256 workitems, the only size the op
        // library launches it with): held to eight workgroups an SM (32
        // registers, 100% occupancy) it ran at 92.6% of an H200's copy where
        // it ran at 89.9%. The same bound on the f32 exp map lost (89.1 ->
        // 85.4%): left out (docs/h100-bench.md).
        .launch_bounds("unary_gelu_f32", 256, 8);
    // `qmatvec4_*` (QMATVEC_BLOCK = 256 workitems, 4 rows of x a pass):
    // ptxas left alone picks 70 to 104 registers for three workgroups an
    // SM; held to two, it takes up to 128 and the 8-row product ran 4 to
    // 15% faster on an H200 for nine formats, within 2% for the others
    // (docs/h100-bench.md). Q3_K, 128 registers
    // either way, spilled and ran 4% slower: left out.
    let formats = [
        "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q8_1", "q4_k", "q5_k", "q6_k", "q8_k", "iq4_",
        "mxfp4",
    ];
    for format in formats {
        build = build.launch_bounds(&format!("qmatvec4_{format}"), 256, 2);
    }
    for format in [
        "q4_0", "q4_1", "q5_0", "q8_0", "q8_1", "q4_k", "q6_k", "iq4_nl", "mxfp4",
    ] {
        build = build.launch_bounds(&format!("qmatvec8_{format}"), 256, 2);
    }
    // Q2_K's 4-row pass under the same bound; its 8-row pass (one pass on
    // NVIDIA, about 250 registers left alone) held to one workgroup an SM
    // instead: 54.5 -> 49.8 us on an H100 (4096 x 14336), where one
    // workgroup cost the other one-pass formats 10 to 45%
    // (docs/h100-bench.md). So are the 8-row passes whose workitems take
    // four weight rows (`QuantBlock::MATVEC_ROWS_8`, the numbers there).
    build = build.launch_bounds("qmatvec4_q2_k", 256, 2);
    for format in ["q2_k", "q5_1", "q5_k", "q8_k", "iq4_xs"] {
        build = build.launch_bounds(&format!("qmatvec8_{format}"), 256, 1);
    }
    build.compile();
}
