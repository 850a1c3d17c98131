//! Fill and copy: `fill_{dtype}` (every element set to a value given as its
//! bits), `copy_{dtype}` (strided or broadcast input gathered into a
//! contiguous output) and `copy2d_{dtype}` (rows × cols between two row
//! strides), for f32, f16, bf16, u8, u32, i64.

use crate::device::*;
use crate::elem::*;
use crate::kernels;
use rocm_kernel_macros::{amdgpu_device, amdgpu_global};

/// Fill body: `out[i] = T::from_bits64(bits)`.
#[amdgpu_device]
#[inline(always)]
pub fn fill_body<T: Elem>(out: *mut T, n: u64, bits: u64) {
    let v = T::from_bits64(bits);
    grid_stride_batched(n, true, |_| v, |i, v| unsafe { *out.add(i as usize) = v });
}

/// Copy body: `out[i] = inp[offset(i)]`.
#[amdgpu_device]
#[inline(always)]
pub fn copy_body<T: Elem>(out: *mut T, inp: *const T, n: u64, strides: Strides<1>) {
    grid_stride_batched(
        n,
        strides.is_contiguous(),
        |i| unsafe { *inp.add(strides.offset(i, 0)) },
        |i, x| unsafe { *out.add(i as usize) = x },
    );
}

/// copy2d body: `out[r * dst_stride + c] = inp[r * src_stride + c]`.
#[amdgpu_device]
#[inline(always)]
pub fn copy2d_body<T: Elem>(
    out: *mut T,
    inp: *const T,
    rows: u64,
    cols: u64,
    src_stride: u64,
    dst_stride: u64,
) {
    grid_stride(rows * cols, |i| {
        let (r, c) = (i / cols, i % cols);
        unsafe {
            *out.add((r * dst_stride + c) as usize) = *inp.add((r * src_stride + c) as usize)
        };
    });
}

#[cfg(not(ferrocm_device))]
use crate::host::KernelRef;

/// The fill, copy and copy2d kernels of an element type (host side).
#[cfg(not(ferrocm_device))]
pub trait FillKernels: Sized + 'static {
    /// `fill_{T}(out, n, bits)`.
    const FILL: KernelRef<(*mut Self, u64, u64)>;
    /// `copy_{T}(out, inp, n, ndim, layout)`.
    const COPY: KernelRef<crate::cast::CastArgs<Self, Self>>;
    /// `copy2d_{T}(out, inp, rows, cols, src_stride, dst_stride)`.
    const COPY2D: KernelRef<(*mut Self, *const Self, u64, u64, u64, u64)>;
}

macro_rules! fill_kernels {
    ($($t:ty => $fill:ident, $copy:ident, $copy2d:ident;)*) => {
        $(
            #[cfg(not(ferrocm_device))]
            impl FillKernels for $t {
                const FILL: KernelRef<(*mut Self, u64, u64)> = KernelRef::of::<$fill>();
                const COPY: KernelRef<crate::cast::CastArgs<Self, Self>> = KernelRef::of::<$copy>();
                const COPY2D: KernelRef<(*mut Self, *const Self, u64, u64, u64, u64)> = KernelRef::of::<$copy2d>();
            }
        )*
        kernels! {$(
            fn $fill(out: *mut $t, n: u64, bits: u64) {
                fill_body::<$t>(out, n, bits)
            }
            fn $copy(out: *mut $t, inp: *const $t, n: u64, ndim: u32, layout: *const u64, l0: u64, l1: u64, l2: u64, l3: u64) {
                copy_body::<$t>(out, inp, n, Strides::new(ndim, layout, [l0, l1], [[l2, l3]]))
            }
            fn $copy2d(out: *mut $t, inp: *const $t, rows: u64, cols: u64, src_stride: u64, dst_stride: u64) {
                copy2d_body::<$t>(out, inp, rows, cols, src_stride, dst_stride)
            }
        )*}
    };
}

fill_kernels! {
    f32 => fill_f32, copy_f32, copy2d_f32;
    F16 => fill_f16, copy_f16, copy2d_f16;
    Bf16 => fill_bf16, copy_bf16, copy2d_bf16;
    u8 => fill_u8, copy_u8, copy2d_u8;
    u32 => fill_u32, copy_u32, copy2d_u32;
    i64 => fill_i64, copy_i64, copy2d_i64;
}
