//! Fill and copy: `fill_{dtype}` (every element set to a value given as its
//! bits), `copy_{dtype}` (strided or broadcast input gathered into a
//! contiguous output), `copy2d_{dtype}` (rows × cols between two row
//! strides) and `transpose_{dtype}` (batched matrices transposed through LDS
//! tiles: the copy of a transposed view), for f32, f16, bf16, u8, u32, i64.

use crate::device::*;
use crate::elem::*;
use crate::kernels;
use rocm_kernel_macros::{amdgpu_device, amdgpu_global};

/// Fill body: `out[i] = T::from_bits64(bits)`.
#[amdgpu_device]
#[inline(always)]
pub fn fill_body<T: Elem>(out: *mut T, n: u64, bits: u64) {
    let v = T::from_bits64(bits);
    // A chunk of 4- or 8-byte elements is two or four stores with a 32-byte
    // stride between workitems: a fill (nothing but stores) ran at half the
    // copy bandwidth that way, against 100% one element per store.
    if size_of::<T>() <= 2 && chunk_aligned(out) {
        grid_stride_chunks(
            n,
            false,
            |_| (),
            |c, ()| unsafe { store_chunk(out, c, [v; CHUNK as usize]) },
            |i| unsafe { store(out, i as usize, v) },
        );
        return;
    }
    grid_stride_batched(n, true, |_| v, |i, v| unsafe { store(out, i as usize, v) });
}

/// Copy body: `out[i] = inp[offset(i)]`.
#[amdgpu_device]
#[inline(always)]
pub fn copy_body<T: Elem>(out: *mut T, inp: *const T, n: u64, strides: Strides<1>) {
    if strides.is_contiguous() && chunk_aligned(out) && chunk_aligned(inp) {
        grid_stride_chunks(
            n,
            chunk_pairs::<T>(),
            |c| unsafe { load_chunk(inp, c) },
            |c, x| unsafe { store_chunk(out, c, x) },
            |i| unsafe { store(out, i as usize, load(inp, i as usize)) },
        );
        return;
    }
    grid_stride_batched(
        n,
        strides.is_contiguous(),
        |i| unsafe { load(inp, strides.offset(i, 0)) },
        |i, x| unsafe { store(out, i as usize, x) },
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
            store(
                out,
                (r * dst_stride + c) as usize,
                load(inp, (r * src_stride + c) as usize),
            )
        };
    });
}

/// Side of the square tile [`transpose_body`] moves through LDS.
#[amdgpu_device]
pub const TRANSPOSE_TILE: u32 = 32;

/// LDS a transpose launch of element type `T` needs: one tile with a padded
/// row (`TILE + 1`), so a column read hits 32 different banks.
#[amdgpu_device]
pub const fn transpose_lds_bytes(elem_bytes: u32) -> u32 {
    TRANSPOSE_TILE * (TRANSPOSE_TILE + 1) * elem_bytes
}

/// Transpose body: `inp` is `batch` contiguous `rows × cols` matrices, `out`
/// gets each one transposed (`cols × rows`). One workgroup per
/// [`TRANSPOSE_TILE`]² tile (looping when there are more tiles than
/// workgroups): coalesced reads of the tile's rows into LDS, a barrier,
/// coalesced writes of its columns. Any workgroup size that is a multiple of
/// the tile side; LDS as [`transpose_lds_bytes`].
#[amdgpu_device]
#[inline(always)]
pub fn transpose_body<T: Elem>(out: *mut T, inp: *const T, batch: u64, rows: u64, cols: u64) {
    let tile = lds::<T>();
    let side = TRANSPOSE_TILE as u64;
    let pitch = TRANSPOSE_TILE + 1;
    let tiles_r = rows.div_ceil(side);
    let tiles_c = cols.div_ceil(side);
    let per_matrix = tiles_r * tiles_c;
    let tid = workitem_id_x();
    let tx = tid % TRANSPOSE_TILE;
    let ty = tid / TRANSPOSE_TILE;
    let step = workgroup_size_x() / TRANSPOSE_TILE;
    let mut t = workgroup_id_x() as u64;
    while t < batch * per_matrix {
        let b = t / per_matrix;
        let (r0, c0) = ((t % per_matrix) / tiles_c * side, t % tiles_c * side);
        let matrix = b * rows * cols;
        let mut y = ty;
        while y < TRANSPOSE_TILE {
            let (r, c) = (r0 + y as u64, c0 + tx as u64);
            if r < rows && c < cols {
                tile.store(y * pitch + tx, unsafe {
                    load(inp, (matrix + r * cols + c) as usize)
                });
            }
            y += step;
        }
        barrier();
        y = ty;
        while y < TRANSPOSE_TILE {
            // Output row = input column c0 + y, output column = input row r0 + tx.
            let (c, r) = (c0 + y as u64, r0 + tx as u64);
            if r < rows && c < cols {
                unsafe {
                    store(
                        out,
                        (matrix + c * rows + r) as usize,
                        tile.load(tx * pitch + y),
                    )
                };
            }
            y += step;
        }
        // The tile is reused by the next iteration.
        barrier();
        t += num_workgroups_x() as u64;
    }
}

#[cfg(not(ferrocm_device))]
use crate::host::KernelRef;

/// The fill, copy and copy2d kernels of an element type (host side).
#[cfg(not(ferrocm_device))]
pub trait FillKernels: Sized + 'static {
    /// `fill_{T}(out, n, bits)`.
    const FILL: KernelRef<(*mut Self, u64, u64)>;
    /// `copy_{T}(out, inp, n, ndim, layout)`.
    const COPY: KernelRef<crate::elementwise::cast::CastArgs<Self, Self>>;
    /// `copy2d_{T}(out, inp, rows, cols, src_stride, dst_stride)`.
    const COPY2D: KernelRef<(*mut Self, *const Self, u64, u64, u64, u64)>;
    /// `transpose_{T}(out, inp, batch, rows, cols)`.
    const TRANSPOSE: KernelRef<(*mut Self, *const Self, u64, u64, u64)>;
}

macro_rules! fill_kernels {
    ($($t:ty => $fill:ident, $copy:ident, $copy2d:ident, $transpose:ident;)*) => {
        $(
            #[cfg(not(ferrocm_device))]
            impl FillKernels for $t {
                const FILL: KernelRef<(*mut Self, u64, u64)> = KernelRef::of::<$fill>();
                const COPY: KernelRef<crate::elementwise::cast::CastArgs<Self, Self>> = KernelRef::of::<$copy>();
                const COPY2D: KernelRef<(*mut Self, *const Self, u64, u64, u64, u64)> = KernelRef::of::<$copy2d>();
                const TRANSPOSE: KernelRef<(*mut Self, *const Self, u64, u64, u64)> = KernelRef::of::<$transpose>();
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
            fn $transpose(out: *mut $t, inp: *const $t, batch: u64, rows: u64, cols: u64) {
                transpose_body::<$t>(out, inp, batch, rows, cols)
            }
        )*}
    };
}

fill_kernels! {
    f32 => fill_f32, copy_f32, copy2d_f32, transpose_f32;
    F16 => fill_f16, copy_f16, copy2d_f16, transpose_f16;
    Bf16 => fill_bf16, copy_bf16, copy2d_bf16, transpose_bf16;
    u8 => fill_u8, copy_u8, copy2d_u8, transpose_u8;
    u32 => fill_u32, copy_u32, copy2d_u32, transpose_u32;
    i64 => fill_i64, copy_i64, copy2d_i64, transpose_i64;
}
