//! Gated activations: `glu_{f32,f16,bf16}` computes `act(gate) * up`
//! elementwise (f32 arithmetic, one rounding), with broadcasting: SwiGLU
//! (`act` = silu: Llama, Mistral, Qwen), GeGLU (gelu, tanh or erf: Gemma,
//! T5 v1.1), ReGLU (relu). One kernel per dtype serves every activation:
//! `act` is one of the [`crate::elementwise::unary`] `ACT_*` codes, uniform over the
//! launch, so the branch on it costs nothing per element.
//!
//! The arguments are those of the binary kernels (`layout`, when `ndim >
//! 0`, holds the output dims, then the gate's strides, then up's), plus
//! `act`: a gate and an up that are two halves of one `[.., 2d]` tensor run
//! in place as strided views.
//!
//! `glu_q8_{f32,f16,bf16}` store the result only in the 8-bit form the
//! quantized products take (a decode step's down projection input).

use crate::device::*;
use crate::elem::W128;
use crate::elem::*;
use crate::elementwise::unary::activation;
use crate::kernels;
use crate::quant::matvec::{X8Out, store_x_lanes};
use rocm_kernel_macros::{amdgpu_device, amdgpu_global};

/// `act(gate) * up` in f32, rounded once: the scalar definition the kernels
/// and the Cpu backend share.
///
/// ```
/// use ferrocm_kernels::nn::glu::glu_apply;
/// use ferrocm_kernels::elementwise::unary::{ACT_RELU, ACT_SILU};
/// assert_eq!(glu_apply(-1.0f32, 3.0, ACT_RELU), 0.0);
/// assert_eq!(glu_apply(0.0f32, 3.0, ACT_SILU), 0.0);
/// ```
#[amdgpu_device]
#[inline(always)]
pub fn glu_apply<T: Elem>(gate: T, up: T, act: u32) -> T {
    T::from_f32(activation::<T>(gate.to_f32(), act) * up.to_f32())
}

/// [`glu_apply`] on each element of a 16-byte word (a named function: a
/// closure here was outlined on sm_90, its words passed through local
/// memory).
#[amdgpu_device]
#[inline(always)]
fn glu_word<T: Elem>(gate: W128, up: W128, act: u32) -> W128 {
    word_map3_f32::<T>(gate, up, up, |_, g, u, _| {
        activation::<T>(g.to_f32(), act) * u.to_f32()
    })
}

/// The body of `glu_*`.
#[amdgpu_device]
#[inline(always)]
pub fn glu_body<T: Elem>(
    out: *mut T,
    gate: *const T,
    up: *const T,
    n: u64,
    strides: Strides<2>,
    act: u32,
) {
    // Launched with `early_start`: nothing global is touched before this.
    wait_prior_grids();
    release_dependent_grids();
    // Contiguous operands that start on 16-byte words: a word (4 f32, 8
    // f16/bf16) per load (2-byte loads held bf16 SwiGLU to 47% of the
    // H100's copy bandwidth); the tail past the last whole word an element
    // at a time.
    let on_word = |p: usize| p.is_multiple_of(16);
    if strides.is_contiguous()
        && size_of::<T>() <= 4
        && on_word(out as usize)
        && on_word(gate as usize)
        && on_word(up as usize)
    {
        let per = per_word::<T>() as u64;
        let (ow, gw, uw) = (out as *mut W128, gate as *const W128, up as *const W128);
        let words = n / per;
        // One word of each input per iteration: two in flight put 16 B
        // of f16 words in scratch on gfx90a.
        let (step, mut i) = (global_size_x(), global_id_x());
        while i < words {
            let j = i as usize;
            unsafe { store(ow, j, glu_word::<T>(load(gw, j), load(uw, j), act)) };
            i += step;
        }
        let i = words * per + global_id_x();
        if i < n {
            unsafe {
                store(
                    out,
                    i as usize,
                    glu_apply(load(gate, i as usize), load(up, i as usize), act),
                )
            };
        }
        return;
    }
    grid_stride_batched(
        n,
        strides.is_contiguous(),
        |i| unsafe {
            let at = strides.coords(i);
            (load(gate, strides.at(at, 0)), load(up, strides.at(at, 1)))
        },
        |i, (g, u)| unsafe { store(out, i as usize, glu_apply(g, u, act)) },
    );
}

/// The body of `glu_q8_*`: the gated unit of `rows × cols` (`cols` a
/// multiple of 16; row `r` of the gate at `gate + r * gate_stride`, of up at
/// `up + r * up_stride`, every row on a 16-byte word) rounded to `T` as
/// [`glu_apply`] rounds it, then stored only in the 8-bit form the quantized
/// products take ([`crate::quant::matvec::store_x_lanes`]: each group of 16
/// spread over the lanes that computed it). A decode step's MLP feeds its
/// down projection this way, without a pass of its own to round it.
#[amdgpu_device]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub fn glu_q8_body<T: Elem>(
    codes: *mut u32,
    meta: *mut u64,
    gate: *const T,
    up: *const T,
    rows: u64,
    cols: u64,
    gate_stride: u64,
    up_stride: u64,
    act: u32,
) {
    // Launched with `early_start`: nothing global is touched before this.
    wait_prior_grids();
    release_dependent_grids();
    let out = X8Out::new(codes, meta, (rows * cols) as usize, cols as usize);
    let per = per_word::<T>() as u64;
    let (gw, uw) = (gate as *const W128, up as *const W128);
    let per_row = cols / per;
    let words = rows * per_row;
    // Whole waves run every round together (the exchanges).
    let (stride, mut i) = (global_size_x(), global_id_x());
    let rounds = words.div_ceil(stride);
    let mut round = 0;
    while round < rounds {
        let live = i < words;
        let mut v = [0.0f32; 8];
        let (r, c) = (i / per_row, i % per_row);
        if live {
            let (g, u) = unsafe {
                (
                    load(gw, (r * gate_stride / per + c) as usize),
                    load(uw, (r * up_stride / per + c) as usize),
                )
            };
            word_for_each::<T>(glu_word::<T>(g, u, act), |k, y| v[k as usize] = y.to_f32());
        }
        let (row, col) = (r as usize, (c * per) as usize);
        if per == 8 {
            store_x_lanes::<8>(out, row, col, v, live);
        } else {
            store_x_lanes::<4>(out, row, col, [v[0], v[1], v[2], v[3]], live);
        }
        i += stride;
        round += 1;
    }
}

/// The parameter types of `glu_q8_{T}`: `(codes, meta, gate, up, rows,
/// cols, gate_stride, up_stride, act)`.
#[cfg(not(ferrocm_device))]
pub type GluQ8Args<T> = (
    *mut u32,
    *mut u64,
    *const T,
    *const T,
    u64,
    u64,
    u64,
    u64,
    u32,
);

/// The parameter types of `glu_{T}`: those of the binary kernels without
/// the fault channel, then the activation code.
#[cfg(not(ferrocm_device))]
pub type GluArgs<T> = (
    *mut T,
    *const T,
    *const T,
    u64,
    u32,
    *const u64,
    u64,
    u64,
    u64,
    u64,
    u64,
    u64,
    u32,
);

#[cfg(not(ferrocm_device))]
use crate::host::KernelRef;

/// The gated-activation kernel of an element type (float types; host side).
#[cfg(not(ferrocm_device))]
pub trait GluKernels: Sized + 'static {
    /// `glu_{T}`, if the type has one.
    const GLU: Option<KernelRef<GluArgs<Self>>>;
    /// `glu_q8_{T}`, if the type has one.
    const GLU_Q8: Option<KernelRef<GluQ8Args<Self>>>;
}

macro_rules! glu_kernels {
    ($($name:ident, $q8:ident: $t:ty),*; none: $($n:ty),*) => {
        $(
            #[cfg(not(ferrocm_device))]
            impl GluKernels for $t {
                const GLU: Option<KernelRef<GluArgs<Self>>> = Some(KernelRef::of::<$name>());
                const GLU_Q8: Option<KernelRef<GluQ8Args<Self>>> = Some(KernelRef::of::<$q8>());
            }
        )*
        $(
            #[cfg(not(ferrocm_device))]
            impl GluKernels for $n {
                const GLU: Option<KernelRef<GluArgs<Self>>> = None;
                const GLU_Q8: Option<KernelRef<GluQ8Args<Self>>> = None;
            }
        )*
        kernels! {$(
            fn $name(out: *mut $t, gate: *const $t, up: *const $t, n: u64, ndim: u32, layout: *const u64,
                     l0: u64, l1: u64, a0: u64, a1: u64, b0: u64, b1: u64, act: u32) {
                glu_body::<$t>(out, gate, up, n, Strides::new(ndim, layout, [l0, l1], [[a0, a1], [b0, b1]]), act)
            }
            fn $q8(codes: *mut u32, meta: *mut u64, gate: *const $t, up: *const $t, rows: u64, cols: u64,
                   gate_stride: u64, up_stride: u64, act: u32) {
                glu_q8_body::<$t>(codes, meta, gate, up, rows, cols, gate_stride, up_stride, act)
            }
        )*}
    };
}

glu_kernels!(glu_f32, glu_q8_f32: f32, glu_f16, glu_q8_f16: F16, glu_bf16, glu_q8_bf16: Bf16; none: u8, u32, i64);
