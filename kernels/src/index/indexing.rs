//! Indexing: moves of whole elements chosen by ids. Each kernel copies
//! elements as opaque words of their width (`w8`, `w16`, `w32`, `w64`, and
//! `w128` = 16-byte vectors), so one kernel serves every dtype of that width:
//! - `index_select_{w}_{ids}`: rows of `inner` words picked along a dim
//!   (`index_select`, `embedding`), one row per group of workitems;
//! - `gather_{w}_{ids}`: one element per id, along any dim of a strided source;
//! - `copy_into_{w}`: a strided source written into a strided destination
//!   (`slice_set`, the one in-place op);
//! - `check_ids_{ids}`: proves ids inside `0..size` (the scatter ops, whose
//!   main kernels only visit ids that are in range).
//!
//! Ids are u8, u32 or i64. An id outside `0..size` is never used as an
//! offset: the kernel reports it through the device's fault words
//! ([`Fault::raise_id`]: position, id, size), writes zeros where the element
//! would have gone, and the host returns `IdOutOfRange` at its next wait.

use crate::device::*;
use crate::elem::*;
use crate::kernels;
use rocm_kernel_macros::{amdgpu_device, amdgpu_global};

pub use crate::elem::{W128, Word};

/// Whether `id` indexes a dim of `size` (negative ids never do).
#[amdgpu_device]
#[inline(always)]
pub fn id_in_range(id: i64, size: u64) -> bool {
    id >= 0 && (id as u64) < size
}

/// The body of `index_select_*`: `out` is `[outer, n_ids, inner]` and
/// `out[o, i, :] = src[o, ids[i], :]` with `src` a contiguous `[outer, size,
/// inner]` (all in words). Rows shorter than the workgroup share it (a
/// group takes `block / inner` rows), longer ones take a group each.
#[amdgpu_device]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub fn index_select_body<W: Word, I: Elem>(
    out: *mut W,
    src: *const W,
    ids: *const I,
    outer: u64,
    n_ids: u64,
    size: u64,
    inner: u64,
    fault: Fault,
) {
    // Launched with `early_start`: nothing global is touched before this.
    wait_prior_grids();
    release_dependent_grids();
    let rows = outer * n_ids;
    let bs = workgroup_size_x() as u64;
    let tid = workitem_id_x() as u64;
    // Rows per group, this workitem's row in the group, its first word and
    // the step between its words.
    let (per_group, sub, first, step) = if inner < bs {
        (bs / inner, tid / inner, tid % inner, inner)
    } else {
        (1, 0, tid, bs)
    };
    if sub >= per_group {
        return;
    }
    let mut row = workgroup_id_x() as u64 * per_group + sub;
    let row_step = num_workgroups_x() as u64 * per_group;
    while row < rows {
        let i = row % n_ids;
        let id = unsafe { load(ids, i as usize) }.to_i64();
        let dst = row * inner;
        let mut j = first;
        if id_in_range(id, size) {
            let from = ((row / n_ids) * size + id as u64) * inner;
            // (Four loads batched before their stores kept four 16-byte
            // words on the stack: scratch on gfx942, local memory on sm_90.)
            while j < inner {
                unsafe { store(out, (dst + j) as usize, load(src, (from + j) as usize)) };
                j += step;
            }
        } else {
            if first == 0 {
                fault.raise_id(i, id, size);
            }
            while j < inner {
                unsafe { store(out, (dst + j) as usize, W::ZERO) };
                j += step;
            }
        }
        row += row_step;
    }
}

/// The body of `gather_*`: for each of the `n` positions `e` of the ids
/// (logical order), `out[e] = src[base(e) + ids[e] * dim_stride]`. The
/// layout in memory has the ids' shape and two sets of strides: input 0 is
/// the source's with the gathered dim's stride set to 0 (so `base(e)` is
/// the source element at `e`'s other coordinates), input 1 the ids'.
#[amdgpu_device]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub fn gather_body<W: Word, I: Elem>(
    out: *mut W,
    src: *const W,
    ids: *const I,
    n: u64,
    size: u64,
    dim_stride: u64,
    strides: Strides<2>,
    fault: Fault,
) {
    grid_stride(n, |e| {
        let at = strides.coords(e);
        let id = unsafe { load(ids, strides.at(at, 1)) }.to_i64();
        let v = if id_in_range(id, size) {
            unsafe { load(src, strides.at(at, 0) + (id as u64 * dim_stride) as usize) }
        } else {
            fault.raise_id(e, id, size);
            W::ZERO
        };
        unsafe { store(out, e as usize, v) };
    });
}

/// The body of `copy_into_*`: `dst[offset(i, 0)] = src[offset(i, 1)]` for the
/// `n` elements of a shape both layouts share (by value or in memory, as
/// the elementwise kernels take them).
#[amdgpu_device]
#[inline(always)]
pub fn copy_into_body<W: Word>(dst: *mut W, src: *const W, n: u64, strides: Strides<2>) {
    // Launched with `early_start`: nothing global is touched before this.
    wait_prior_grids();
    release_dependent_grids();
    grid_stride(n, |i| {
        let at = strides.coords(i);
        unsafe { store(dst, strides.at(at, 0), load(src, strides.at(at, 1))) };
    });
}

/// The body of `check_ids_*`: reports the ids of a contiguous array of `n`
/// outside `0..size`.
#[amdgpu_device]
#[inline(always)]
pub fn check_ids_body<I: Elem>(ids: *const I, n: u64, size: u64, fault: Fault) {
    grid_stride(n, |e| {
        let id = unsafe { load(ids, e as usize) }.to_i64();
        if !id_in_range(id, size) {
            fault.raise_id(e, id, size);
        }
    });
}

/// `index_select_*` parameters: `(out, src, ids, outer, n_ids, size, inner,
/// status, tag)`.
#[cfg(not(ferrocm_device))]
pub type IndexSelectArgs<W, I> = (
    *mut W,
    *const W,
    *const I,
    u64,
    u64,
    u64,
    u64,
    *mut u32,
    u32,
);

/// `gather_*` parameters: `(out, src, ids, n, size, dim_stride, ndim,
/// layout, status, tag)`.
#[cfg(not(ferrocm_device))]
pub type GatherArgs<W, I> = (
    *mut W,
    *const W,
    *const I,
    u64,
    u64,
    u64,
    u32,
    *const u64,
    *mut u32,
    u32,
);

/// `copy_into_*` parameters: `(dst, src, n, ndim, layout, dims 2 words,
/// dst strides 2 words, src strides 2 words)`.
#[cfg(not(ferrocm_device))]
pub type CopyIntoArgs<W> = (
    *mut W,
    *const W,
    u64,
    u32,
    *const u64,
    u64,
    u64,
    u64,
    u64,
    u64,
    u64,
);

/// `check_ids_*` parameters: `(ids, n, size, status, tag)`.
#[cfg(not(ferrocm_device))]
pub type CheckIdsArgs<I> = (*const I, u64, u64, *mut u32, u32);

#[cfg(not(ferrocm_device))]
use crate::host::KernelRef;

/// The indexing kernels of one id type, per word width (host side).
#[cfg(not(ferrocm_device))]
pub trait IdKernels: Sized + 'static {
    /// `index_select_w8_{ids}` .. `index_select_w128_{ids}`.
    const SELECT_W8: KernelRef<IndexSelectArgs<u8, Self>>;
    #[allow(missing_docs)]
    const SELECT_W16: KernelRef<IndexSelectArgs<u16, Self>>;
    #[allow(missing_docs)]
    const SELECT_W32: KernelRef<IndexSelectArgs<u32, Self>>;
    #[allow(missing_docs)]
    const SELECT_W64: KernelRef<IndexSelectArgs<u64, Self>>;
    #[allow(missing_docs)]
    const SELECT_W128: KernelRef<IndexSelectArgs<W128, Self>>;
    /// `gather_w8_{ids}` .. `gather_w64_{ids}`.
    const GATHER_W8: KernelRef<GatherArgs<u8, Self>>;
    #[allow(missing_docs)]
    const GATHER_W16: KernelRef<GatherArgs<u16, Self>>;
    #[allow(missing_docs)]
    const GATHER_W32: KernelRef<GatherArgs<u32, Self>>;
    #[allow(missing_docs)]
    const GATHER_W64: KernelRef<GatherArgs<u64, Self>>;
    /// `check_ids_{ids}`.
    const CHECK: KernelRef<CheckIdsArgs<Self>>;
}

macro_rules! index_kernels {
    ($($i:ty => $check:ident, [$($sw:ident: $sn:ident),*], [$($gw:ident: $gn:ident),*];)*) => {
        kernels! { $(
            fn $check(ids: *const $i, n: u64, size: u64, status: *mut u32, tag: u32) {
                check_ids_body::<$i>(ids, n, size, Fault { status, tag })
            }
            $(
                fn $sn(out: *mut $sw, src: *const $sw, ids: *const $i, outer: u64, n_ids: u64, size: u64, inner: u64, status: *mut u32, tag: u32) {
                    index_select_body::<$sw, $i>(out, src, ids, outer, n_ids, size, inner, Fault { status, tag })
                }
            )*
            $(
                fn $gn(out: *mut $gw, src: *const $gw, ids: *const $i, n: u64, size: u64, dim_stride: u64, ndim: u32, layout: *const u64, status: *mut u32, tag: u32) {
                    gather_body::<$gw, $i>(out, src, ids, n, size, dim_stride, Strides::in_memory(ndim, layout), Fault { status, tag })
                }
            )*
        )* }

        #[cfg(not(ferrocm_device))]
        const _: () = { $(
            impl IdKernels for $i {
                const SELECT_W8: KernelRef<IndexSelectArgs<u8, Self>> = index_kernels!(@pick u8; $($sw: $sn),*);
                const SELECT_W16: KernelRef<IndexSelectArgs<u16, Self>> = index_kernels!(@pick u16; $($sw: $sn),*);
                const SELECT_W32: KernelRef<IndexSelectArgs<u32, Self>> = index_kernels!(@pick u32; $($sw: $sn),*);
                const SELECT_W64: KernelRef<IndexSelectArgs<u64, Self>> = index_kernels!(@pick u64; $($sw: $sn),*);
                const SELECT_W128: KernelRef<IndexSelectArgs<W128, Self>> = index_kernels!(@pick W128; $($sw: $sn),*);
                const GATHER_W8: KernelRef<GatherArgs<u8, Self>> = index_kernels!(@pick u8; $($gw: $gn),*);
                const GATHER_W16: KernelRef<GatherArgs<u16, Self>> = index_kernels!(@pick u16; $($gw: $gn),*);
                const GATHER_W32: KernelRef<GatherArgs<u32, Self>> = index_kernels!(@pick u32; $($gw: $gn),*);
                const GATHER_W64: KernelRef<GatherArgs<u64, Self>> = index_kernels!(@pick u64; $($gw: $gn),*);
                const CHECK: KernelRef<CheckIdsArgs<Self>> = KernelRef::of::<$check>();
            }
        )* };
    };
    (@pick $w:ident; $($sw:ident: $sn:ident),*) => {
        index_kernels!(@find $w; $($sw $sn)*)
    };
    (@find u8; u8 $n:ident $($rest:tt)*) => { KernelRef::of::<$n>() };
    (@find u16; u16 $n:ident $($rest:tt)*) => { KernelRef::of::<$n>() };
    (@find u32; u32 $n:ident $($rest:tt)*) => { KernelRef::of::<$n>() };
    (@find u64; u64 $n:ident $($rest:tt)*) => { KernelRef::of::<$n>() };
    (@find W128; W128 $n:ident $($rest:tt)*) => { KernelRef::of::<$n>() };
    (@find $w:ident; $other:ident $n:ident $($rest:tt)*) => { index_kernels!(@find $w; $($rest)*) };
}

index_kernels! {
    u8 => check_ids_u8,
        [u8: index_select_w8_u8, u16: index_select_w16_u8, u32: index_select_w32_u8, u64: index_select_w64_u8, W128: index_select_w128_u8],
        [u8: gather_w8_u8, u16: gather_w16_u8, u32: gather_w32_u8, u64: gather_w64_u8];
    u32 => check_ids_u32,
        [u8: index_select_w8_u32, u16: index_select_w16_u32, u32: index_select_w32_u32, u64: index_select_w64_u32, W128: index_select_w128_u32],
        [u8: gather_w8_u32, u16: gather_w16_u32, u32: gather_w32_u32, u64: gather_w64_u32];
    i64 => check_ids_i64,
        [u8: index_select_w8_i64, u16: index_select_w16_i64, u32: index_select_w32_i64, u64: index_select_w64_i64, W128: index_select_w128_i64],
        [u8: gather_w8_i64, u16: gather_w16_i64, u32: gather_w32_i64, u64: gather_w64_i64];
}

macro_rules! copy_into_kernels {
    ($($w:ty => $name:ident;)*) => {
        kernels! { table COPY_INTO_KERNELS; $(
            fn $name(dst: *mut $w, src: *const $w, n: u64, ndim: u32, layout: *const u64, d0: u64, d1: u64, a0: u64, a1: u64, b0: u64, b1: u64) {
                copy_into_body::<$w>(dst, src, n, Strides::new(ndim, layout, [d0, d1], [[a0, a1], [b0, b1]]))
            }
        )* }

        /// `copy_into_{w}` for each word width (host side).
        #[cfg(not(ferrocm_device))]
        pub trait CopyIntoKernel: Sized + 'static {
            /// The kernel.
            const COPY_INTO: KernelRef<CopyIntoArgs<Self>>;
        }
        #[cfg(not(ferrocm_device))]
        const _: () = { $(
            impl CopyIntoKernel for $w {
                const COPY_INTO: KernelRef<CopyIntoArgs<Self>> = KernelRef::of::<$name>();
            }
        )* };
    };
}

copy_into_kernels! {
    u8 => copy_into_w8;
    u16 => copy_into_w16;
    u32 => copy_into_w32;
    u64 => copy_into_w64;
}

/// The body of `scatter_{dtype}_{ids}`: `scatter` (`add == false`: the last
/// source element sent to an output replaces it), `scatter_add` and
/// `index_add` (`add`: the output is its old value plus every source
/// element sent to it, in order), deterministic: each workitem computes one
/// output element from the ids sorted per column (stable, so equal ids keep
/// their order), never with atomics.
///
/// `out` is contiguous (a copy of the input) of `ndim` dims; `layout` holds
/// per dim its size, the extent of the ids (outputs beyond it in a dim other
/// than `dim` are not written to), the stride of the ids' columns in
/// `sorted`/`perm`, and the source's stride. `sorted` holds each column's
/// `k` ids in ascending order and `perm[j]` the position along `dim` of the
/// `j`-th, so the source element is `src[base + perm[j] * src_stride(dim)]`.
/// Ids outside `0..size` never match an output (the op checks them apart).
#[amdgpu_device]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub fn scatter_body<T: Elem, I: Elem>(
    out: *mut T,
    src: *const T,
    sorted: *const I,
    perm: *const u32,
    n: u64,
    k: u64,
    dim: u32,
    ndim: u32,
    layout: *const u64,
    add: bool,
) {
    grid_stride(n, |e| {
        let (mut rem, mut col, mut base, mut target) = (e, 0u64, 0u64, 0u64);
        let mut inside = true;
        let mut src_step = 0u64;
        let mut d = ndim;
        while d > 0 {
            d -= 1;
            let w = |j: u32| unsafe { load(layout, (4 * d + j) as usize) };
            let (size, extent, col_stride, src_stride) = (w(0), w(1), w(2), w(3));
            let c = rem % size;
            rem /= size;
            if d == dim {
                target = c;
                src_step = src_stride;
            } else {
                inside &= c < extent;
                col += c * col_stride;
                base += c * src_stride;
            }
        }
        if !inside || k == 0 {
            return;
        }
        // The first sorted id not below the target, then the run equal to it.
        let id = |j: u64| unsafe { load(sorted, (col + j) as usize) }.to_i64();
        let t = target as i64;
        let (mut lo, mut hi) = (0u64, k);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if id(mid) < t {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        if lo == k || id(lo) != t {
            return;
        }
        let elem = |j: u64| {
            let at = unsafe { load(perm, (col + j) as usize) } as u64;
            unsafe { load(src, (base + at * src_step) as usize) }
        };
        if add {
            let mut acc = unsafe { load(out, e as usize) }.convert::<T::Acc>();
            let mut j = lo;
            while j < k && id(j) == t {
                acc = acc.add(elem(j).convert::<T::Acc>());
                j += 1;
            }
            unsafe { store(out, e as usize, acc.convert::<T>()) };
        } else {
            let mut j = lo;
            while j + 1 < k && id(j + 1) == t {
                j += 1;
            }
            unsafe { store(out, e as usize, elem(j)) };
        }
    });
}

/// `scatter_*` parameters: `(out, src, sorted, perm, n, k, dim, ndim,
/// layout, add)`.
#[cfg(not(ferrocm_device))]
pub type ScatterArgs<T, I> = (
    *mut T,
    *const T,
    *const I,
    *const u32,
    u64,
    u64,
    u32,
    u32,
    *const u64,
    u32,
);

/// The `scatter_{T}_{ids}` kernels of a value type, per id type (host side).
#[cfg(not(ferrocm_device))]
pub trait ScatterKernels: Sized + 'static {
    /// With u8 ids.
    const SCATTER_U8: KernelRef<ScatterArgs<Self, u8>>;
    /// With u32 ids.
    const SCATTER_U32: KernelRef<ScatterArgs<Self, u32>>;
    /// With i64 ids.
    const SCATTER_I64: KernelRef<ScatterArgs<Self, i64>>;
}

macro_rules! scatter_kernels {
    ($($t:ty => $u8:ident, $u32:ident, $i64:ident;)*) => {
        kernels! { table SCATTER_KERNELS; $(
            fn $u8(out: *mut $t, src: *const $t, sorted: *const u8, perm: *const u32, n: u64, k: u64, dim: u32, ndim: u32, layout: *const u64, add: u32) {
                scatter_body::<$t, u8>(out, src, sorted, perm, n, k, dim, ndim, layout, add != 0)
            }
            fn $u32(out: *mut $t, src: *const $t, sorted: *const u32, perm: *const u32, n: u64, k: u64, dim: u32, ndim: u32, layout: *const u64, add: u32) {
                scatter_body::<$t, u32>(out, src, sorted, perm, n, k, dim, ndim, layout, add != 0)
            }
            fn $i64(out: *mut $t, src: *const $t, sorted: *const i64, perm: *const u32, n: u64, k: u64, dim: u32, ndim: u32, layout: *const u64, add: u32) {
                scatter_body::<$t, i64>(out, src, sorted, perm, n, k, dim, ndim, layout, add != 0)
            }
        )* }

        #[cfg(not(ferrocm_device))]
        const _: () = { $(
            impl ScatterKernels for $t {
                const SCATTER_U8: KernelRef<ScatterArgs<Self, u8>> = KernelRef::of::<$u8>();
                const SCATTER_U32: KernelRef<ScatterArgs<Self, u32>> = KernelRef::of::<$u32>();
                const SCATTER_I64: KernelRef<ScatterArgs<Self, i64>> = KernelRef::of::<$i64>();
            }
        )* };
    };
}

scatter_kernels! {
    f32 => scatter_f32_u8, scatter_f32_u32, scatter_f32_i64;
    F16 => scatter_f16_u8, scatter_f16_u32, scatter_f16_i64;
    Bf16 => scatter_bf16_u8, scatter_bf16_u32, scatter_bf16_i64;
    u8 => scatter_u8_u8, scatter_u8_u32, scatter_u8_i64;
    u32 => scatter_u32_u8, scatter_u32_u32, scatter_u32_i64;
    i64 => scatter_i64_u8, scatter_i64_u32, scatter_i64_i64;
}
