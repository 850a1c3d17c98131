//! The kernel: `out = gelu(x + bias) + residual` over rows of `cols`
//! elements, one generic body instantiated per dtype. Compiled for the
//! host (the emulator runs it) and, by build.rs, for every GPU target. It
//! uses ferrocm's device layer and nothing else.

// Kernel bodies are safe fns over raw pointers, as in ferrocm's own kernel
// files: only kernels call them, with arguments the launch checked.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

use ferrocm_kernels::prelude::*;

/// GELU, tanh form (as PyTorch's `gelu(approximate="tanh")`), in f32: the
/// scalar definition the kernel and the Cpu path share.
#[amdgpu_device]
#[inline(always)]
pub fn bias_gelu_residual(x: f32, bias: f32, residual: f32) -> f32 {
    let v = x + bias;
    0.5 * v * (1.0 + math::tanh(0.797_884_6 * (v + 0.044_715 * v * v * v))) + residual
}

/// The body: contiguous `x` and `residual` of `n` elements, `bias` of
/// `cols`, any `n` over any grid.
#[amdgpu_device]
#[inline(always)]
pub fn fused_body<T: Elem>(
    out: *mut T,
    x: *const T,
    bias: *const T,
    residual: *const T,
    n: u64,
    cols: u64,
) {
    grid_stride(n, |i| unsafe {
        let b = load(bias, (i % cols) as usize).to_f32();
        let y = bias_gelu_residual(
            load(x, i as usize).to_f32(),
            b,
            load(residual, i as usize).to_f32(),
        );
        store(out, i as usize, T::from_f32(y));
    });
}

/// The arguments of one dtype's kernel (host side).
#[cfg(not(ferrocm_device))]
pub type FusedArgs<T> = (*mut T, *const T, *const T, *const T, u64, u64);

/// Each dtype's kernel (host side): the op picks it through the type system.
#[cfg(not(ferrocm_device))]
pub trait FusedKernel: Elem {
    /// The kernel of this dtype.
    const KERNEL: ferrocm_kernels::host::KernelRef<FusedArgs<Self>>;
}

macro_rules! fused_kernels {
    ($($name:ident: $t:ty),*) => {
        $(
            #[cfg(not(ferrocm_device))]
            impl FusedKernel for $t {
                const KERNEL: ferrocm_kernels::host::KernelRef<FusedArgs<Self>> =
                    ferrocm_kernels::host::KernelRef::of::<$name>();
            }
        )*
        kernels! {$(
            fn $name(out: *mut $t, x: *const $t, bias: *const $t, residual: *const $t, n: u64, cols: u64) {
                fused_body::<$t>(out, x, bias, residual, n, cols)
            }
        )*}
    };
}
fused_kernels!(bias_gelu_residual_f32: f32, bias_gelu_residual_f16: F16, bias_gelu_residual_bf16: Bf16);
