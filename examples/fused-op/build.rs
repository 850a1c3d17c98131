// Compiles src/fused.rs for every AMD arch of FERROCM_ARCHS and the PTX
// module, checks them (every kernel in every target, no spills, no local
// memory) and writes the KERNEL_MODULE that `kernel_module!` embeds.
fn main() {
    ferrocm_build::compile_kernels(&["fused"]);
}
