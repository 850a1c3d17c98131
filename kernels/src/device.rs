//! The device layer: the only code that knows it runs on a GPU.
//!
//! Kernels call these functions and nothing lower: workitem and workgroup ids
//! and sizes, the workgroup barrier, launch-sized LDS, wave operations. Every
//! function has two bodies: the device body (compiled for `amdgpu`) uses the
//! AMDGPU intrinsics, the host body reads the CPU emulator's per-workitem
//! context (see [`crate::host::emu`]), so the very same kernel function runs in
//! the emulator, one coroutine per workitem, workgroups in parallel threads.
//!
//! Wave size is a runtime value ([`wave_size`]): 64 on CDNA (gfx9), 32 on RDNA
//! (gfx10+) and on NVIDIA GPUs (a warp). Kernels must be right for both.
//!
//! Three bodies, chosen by cfg: `target_arch = "amdgpu"` (AMDGPU intrinsics),
//! `target_arch = "nvptx64"` (the same kernels compiled to PTX for NVIDIA
//! GPUs: PTX special registers, `bar.sync`, `shfl.sync`) and, without
//! `ferrocm_device` (the host build), the emulator. build.rs sets
//! `--cfg ferrocm_device` for both GPU builds; kernel files test only that.

/// `$body` for `$i` = 0, 1, 2, 3 while `$i < $n` (`$n` a constant), written
/// out: array indices stay constants whatever the body's size. A `for`
/// loop the compiler declines to unroll (NVPTX's limits are lower than
/// AMDGPU's) indexes its arrays by a variable, which puts them in local
/// memory.
#[doc(hidden)]
#[macro_export]
macro_rules! unroll4 {
    ($i:ident < $n:expr => $body:block) => {{
        if 0 < $n {
            let $i = 0usize;
            $body
        }
        if 1 < $n {
            let $i = 1usize;
            $body
        }
        if 2 < $n {
            let $i = 2usize;
            $body
        }
        if 3 < $n {
            let $i = 3usize;
            $body
        }
    }};
}

/// `$body` for `$i` = 0..64, written out (see [`unroll4!`]): a warpgroup
/// accumulator's elements.
#[doc(hidden)]
#[macro_export]
macro_rules! unroll64 {
    ($i:ident => $body:block) => {{
        $crate::unroll4!(top < 4 => {
            $crate::unroll16!(low => {
                let $i = top * 16 + low;
                $body
            })
        })
    }};
}

/// `$body` for `$i` = 0..8 while `$i < $n` (`$n` a constant), written out
/// (see [`unroll4!`]).
#[doc(hidden)]
#[macro_export]
macro_rules! unroll8 {
    ($i:ident < $n:expr => $body:block) => {{
        $crate::unroll4!(hi < 2 => {
            $crate::unroll4!(lo < 4 => {
                let $i = hi * 4 + lo;
                if $i < $n $body
            })
        })
    }};
}

/// `$body` for `$i` = 0..16, written out (see [`unroll4!`]): for the 16
/// values of a quantized group, whose per-value work (an f16 conversion) is
/// more than NVPTX unrolls by itself.
#[doc(hidden)]
#[macro_export]
macro_rules! unroll16 {
    ($i:ident => $body:block) => {{
        $crate::unroll4!(hi < 4 => {
            $crate::unroll4!(lo < 4 => {
                let $i = hi * 4 + lo;
                $body
            })
        })
    }};
}

use rocm_kernel_macros::amdgpu_device;

#[cfg(not(ferrocm_device))]
use crate::host::emu;

/// NVPTX warp intrinsics (LLVM's NVVM names). Every warp operation names the
/// lanes taking part: every lane of the warp the block has, as the device
/// layer's contract says (all lanes of the wave call a wave op together).
#[amdgpu_device]
#[cfg(target_arch = "nvptx64")]
mod nv {
    /// The lanes of this warp that exist in the block (all 32 but in a last,
    /// partial warp). `shfl.sync`/`vote.sync` wait for every lane the mask
    /// names: with the lanes merely converged at this instant
    /// (`activemask`), lanes that left a divergent loop late would be missed
    /// and their values read as garbage (Volta's independent scheduling).
    #[inline(always)]
    pub fn warp_mask() -> u32 {
        use core::arch::nvptx::*;
        unsafe {
            let tid = _thread_idx_x() + _thread_idx_y() * _block_dim_x();
            let size = _block_dim_x() * _block_dim_y();
            let left = size - (tid & !31);
            if left >= 32 { !0 } else { (1u32 << left) - 1 }
        }
    }

    unsafe extern "C" {
        #[link_name = "llvm.nvvm.shfl.sync.bfly.i32"]
        pub fn shfl_bfly(member_mask: u32, v: u32, lane_mask: u32, clamp: u32) -> u32;
        #[link_name = "llvm.nvvm.shfl.sync.idx.i32"]
        pub fn shfl_idx(member_mask: u32, v: u32, src_lane: u32, clamp: u32) -> u32;
        #[link_name = "llvm.nvvm.vote.ballot.sync"]
        pub fn ballot(member_mask: u32, pred: bool) -> u32;
        #[link_name = "llvm.nvvm.read.ptx.sreg.laneid"]
        pub fn laneid() -> u32;
    }
}

/// Offsets in the HSA kernel dispatch packet (hsa_kernel_dispatch_packet_t).
#[amdgpu_device]
const DISPATCH_WORKGROUP_SIZE_X: usize = 4;

/// Workitem id inside its workgroup, x dimension.
///
/// ```
/// # use ferrocm_kernels::device::workitem_id_x;
/// // Only meaningful inside a kernel running on a GPU or in the emulator.
/// let _f: fn() -> u32 = workitem_id_x;
/// ```
#[amdgpu_device]
#[inline(always)]
pub fn workitem_id_x() -> u32 {
    #[cfg(target_arch = "amdgpu")]
    return core::arch::amdgpu::workitem_id_x();
    #[cfg(target_arch = "nvptx64")]
    return unsafe { core::arch::nvptx::_thread_idx_x() };
    #[cfg(not(ferrocm_device))]
    return emu::with(|c| c.workitem_id[0]);
}

/// Workitem id inside its workgroup, y dimension.
#[amdgpu_device]
#[inline(always)]
pub fn workitem_id_y() -> u32 {
    #[cfg(target_arch = "amdgpu")]
    return core::arch::amdgpu::workitem_id_y();
    #[cfg(target_arch = "nvptx64")]
    return unsafe { core::arch::nvptx::_thread_idx_y() };
    #[cfg(not(ferrocm_device))]
    return emu::with(|c| c.workitem_id[1]);
}

/// Workgroup id in the grid, x dimension.
#[amdgpu_device]
#[inline(always)]
pub fn workgroup_id_x() -> u32 {
    #[cfg(target_arch = "amdgpu")]
    return core::arch::amdgpu::workgroup_id_x();
    #[cfg(target_arch = "nvptx64")]
    return unsafe { core::arch::nvptx::_block_idx_x() };
    #[cfg(not(ferrocm_device))]
    return emu::with(|c| c.workgroup_id[0]);
}

/// [`workgroup_id_x`] read anew: for a value needed only after a long
/// loop, so the compiler recomputes it there instead of holding it (or
/// spilling it) across the loop. On NVPTX the special register is read
/// again (an asm the compiler cannot merge with the first read); AMDGPU
/// keeps the id in a scalar register anyway.
#[amdgpu_device]
#[inline(always)]
pub fn workgroup_id_x_again() -> u32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let id: u32;
        // SAFETY: reads a special register; not `pure`, so not merged.
        unsafe {
            core::arch::asm!("mov.u32 {0}, %ctaid.x;", out(reg32) id, options(nomem, nostack))
        };
        return id;
    }
    #[allow(unreachable_code)]
    workgroup_id_x()
}

/// Workgroup id in the grid, y dimension.
#[amdgpu_device]
#[inline(always)]
pub fn workgroup_id_y() -> u32 {
    #[cfg(target_arch = "amdgpu")]
    return core::arch::amdgpu::workgroup_id_y();
    #[cfg(target_arch = "nvptx64")]
    return unsafe { core::arch::nvptx::_block_idx_y() };
    #[cfg(not(ferrocm_device))]
    return emu::with(|c| c.workgroup_id[1]);
}

/// Workgroup id in the grid, z dimension.
#[amdgpu_device]
#[inline(always)]
pub fn workgroup_id_z() -> u32 {
    #[cfg(target_arch = "amdgpu")]
    return core::arch::amdgpu::workgroup_id_z();
    #[cfg(target_arch = "nvptx64")]
    return unsafe { core::arch::nvptx::_block_idx_z() };
    #[cfg(not(ferrocm_device))]
    return emu::with(|c| c.workgroup_id[2]);
}

/// Reads a u16 / u32 field of the dispatch packet (device only).
#[amdgpu_device]
#[cfg(target_arch = "amdgpu")]
#[inline(always)]
fn dispatch_u16(offset: usize) -> u16 {
    unsafe {
        let p = core::intrinsics::gpu::amdgpu_dispatch_ptr() as *const u8;
        *(p.add(offset) as *const u16)
    }
}

#[amdgpu_device]
#[cfg(target_arch = "amdgpu")]
#[inline(always)]
fn dispatch_u32(offset: usize) -> u32 {
    unsafe {
        let p = core::intrinsics::gpu::amdgpu_dispatch_ptr() as *const u8;
        *(p.add(offset) as *const u32)
    }
}

/// Number of workitems in a workgroup, x dimension (the launch's block size).
#[amdgpu_device]
#[inline(always)]
pub fn workgroup_size_x() -> u32 {
    #[cfg(target_arch = "amdgpu")]
    return dispatch_u16(DISPATCH_WORKGROUP_SIZE_X) as u32;
    #[cfg(target_arch = "nvptx64")]
    return unsafe { core::arch::nvptx::_block_dim_x() };
    #[cfg(not(ferrocm_device))]
    return emu::with(|c| c.workgroup_size[0]);
}

/// Number of workitems in a workgroup, y dimension.
#[amdgpu_device]
#[inline(always)]
pub fn workgroup_size_y() -> u32 {
    #[cfg(target_arch = "amdgpu")]
    return dispatch_u16(DISPATCH_WORKGROUP_SIZE_X + 2) as u32;
    #[cfg(target_arch = "nvptx64")]
    return unsafe { core::arch::nvptx::_block_dim_y() };
    #[cfg(not(ferrocm_device))]
    return emu::with(|c| c.workgroup_size[1]);
}

/// Number of workgroups in the grid, x dimension.
#[amdgpu_device]
#[inline(always)]
pub fn num_workgroups_x() -> u32 {
    // The packet holds the grid size in workitems (HIP: blocks * block size).
    #[cfg(target_arch = "amdgpu")]
    return dispatch_u32(12).div_ceil(workgroup_size_x());
    #[cfg(target_arch = "nvptx64")]
    return unsafe { core::arch::nvptx::_grid_dim_x() };
    #[cfg(not(ferrocm_device))]
    return emu::with(|c| c.num_workgroups[0]);
}

/// Number of workgroups in the grid, y dimension.
#[amdgpu_device]
#[inline(always)]
pub fn num_workgroups_y() -> u32 {
    #[cfg(target_arch = "amdgpu")]
    return dispatch_u32(16).div_ceil(workgroup_size_y());
    #[cfg(target_arch = "nvptx64")]
    return unsafe { core::arch::nvptx::_grid_dim_y() };
    #[cfg(not(ferrocm_device))]
    return emu::with(|c| c.num_workgroups[1]);
}

/// Flat workitem id in the grid, x dimension, in 64 bits (grids may pass 2^32).
#[amdgpu_device]
#[inline(always)]
pub fn global_id_x() -> u64 {
    workgroup_id_x() as u64 * workgroup_size_x() as u64 + workitem_id_x() as u64
}

/// Total number of workitems in the grid, x dimension: the stride of a grid-stride loop.
#[amdgpu_device]
#[inline(always)]
pub fn global_size_x() -> u64 {
    num_workgroups_x() as u64 * workgroup_size_x() as u64
}

/// Wave (wavefront) size: 64 on gfx9, 32 on gfx10+ (and whatever the emulator was given).
#[amdgpu_device]
#[inline(always)]
pub fn wave_size() -> u32 {
    #[cfg(target_arch = "amdgpu")]
    return core::arch::amdgpu::wavefrontsize();
    #[cfg(target_arch = "nvptx64")]
    return 32;
    #[cfg(not(ferrocm_device))]
    return emu::with(|c| c.wave_size);
}

/// Lane of this workitem in its wave, `0..wave_size()`.
#[amdgpu_device]
#[inline(always)]
pub fn lane_id() -> u32 {
    #[cfg(target_arch = "amdgpu")]
    return core::arch::amdgpu::mbcnt_hi(!0, core::arch::amdgpu::mbcnt_lo(!0, 0));
    #[cfg(target_arch = "nvptx64")]
    return unsafe { nv::laneid() };
    #[cfg(not(ferrocm_device))]
    return emu::with(|c| c.lane);
}

/// Workgroup barrier that also orders memory: every LDS and global access
/// issued before it by any workitem of the group is complete and visible to
/// every workitem of the group after it (HIP's `__syncthreads`).
///
/// `s_barrier` alone is not a fence: stores may still be in flight. The device
/// body waits for all outstanding memory counters before the barrier and, on
/// RDNA (WGP mode, per-CU L0 caches), invalidates the L0 after it.
#[amdgpu_device]
#[inline(always)]
pub fn barrier() {
    #[cfg(target_arch = "amdgpu")]
    unsafe {
        use core::sync::atomic::{Ordering, compiler_fence};
        compiler_fence(Ordering::SeqCst);
        #[cfg(ferrocm_gfx9)]
        core::arch::asm!("s_waitcnt vmcnt(0) lgkmcnt(0)");
        #[cfg(any(ferrocm_gfx10, ferrocm_gfx11))]
        core::arch::asm!("s_waitcnt vmcnt(0) lgkmcnt(0)", "s_waitcnt_vscnt null, 0x0");
        #[cfg(ferrocm_gfx12)]
        core::arch::asm!(
            "s_wait_loadcnt 0x0",
            "s_wait_storecnt 0x0",
            "s_wait_dscnt 0x0"
        );
        core::arch::amdgpu::s_barrier();
        #[cfg(any(ferrocm_gfx10, ferrocm_gfx11))]
        core::arch::asm!("buffer_gl0_inv");
        #[cfg(ferrocm_gfx12)]
        core::arch::asm!("global_inv scope:SCOPE_SE");
        compiler_fence(Ordering::SeqCst);
    }
    // bar.sync orders every shared and global access of the CTA's threads
    // before it against those after it (PTX ISA, "bar"): __syncthreads.
    #[cfg(target_arch = "nvptx64")]
    unsafe {
        core::arch::nvptx::_syncthreads()
    };
    #[cfg(not(ferrocm_device))]
    emu::barrier();
}

/// A fence for the compiler's instruction scheduler, not for memory: no
/// instruction moves across it. Bounds how far loads are hoisted ahead of
/// the math that uses them, where hoisting every load of an unrolled loop
/// would hold them all in registers at once (and spill). A no-op on NVPTX
/// (ptxas schedules on its own) and in the emulator.
#[amdgpu_device]
#[inline(always)]
pub fn schedule_barrier() {
    #[cfg(target_arch = "amdgpu")]
    // SAFETY: mask 0: nothing may be scheduled across; no effect on memory.
    unsafe {
        core::arch::amdgpu::sched_barrier::<0>()
    };
}

/// Launch-sized LDS (workgroup shared memory) viewed as `T`s, starting
/// `byte_offset` bytes into the workgroup's arena (whose size is the launch's
/// `lds_bytes`). Every workitem of a group sees the same memory.
///
/// Access goes through [`Lds::load`] / [`Lds::store`] so the emulator can
/// check every index against the launch size.
#[amdgpu_device]
#[derive(Clone, Copy)]
pub struct Lds<T> {
    base: *mut T,
    byte_offset: u32,
}

/// The launch-sized LDS of this workgroup, from its first byte.
#[amdgpu_device]
#[inline(always)]
pub fn lds<T>() -> Lds<T> {
    lds_at::<T>(0)
}

/// The launch-sized LDS of this workgroup, from `byte_offset` (a multiple of
/// `align_of::<T>()`), to hold several arrays in one arena.
#[amdgpu_device]
#[inline(always)]
pub fn lds_at<T>(byte_offset: u32) -> Lds<T> {
    #[cfg(ferrocm_device)]
    let arena = core::intrinsics::gpu::gpu_launch_sized_workgroup_mem::<u8>();
    #[cfg(not(ferrocm_device))]
    let arena = emu::with(|c| c.lds);
    Lds {
        base: unsafe { arena.add(byte_offset as usize) } as *mut T,
        byte_offset,
    }
}

#[amdgpu_device]
impl<T: Copy> Lds<T> {
    /// Reads element `i`.
    #[inline(always)]
    pub fn load(self, i: u32) -> T {
        #[cfg(not(ferrocm_device))]
        emu::check_lds::<T>(self.byte_offset, i);
        unsafe { *self.base.add(i as usize) }
    }

    /// Writes element `i`.
    #[inline(always)]
    pub fn store(self, i: u32, v: T) {
        #[cfg(not(ferrocm_device))]
        emu::check_lds::<T>(self.byte_offset, i);
        unsafe { *self.base.add(i as usize) = v }
    }
}

#[amdgpu_device]
impl<T> Lds<T> {
    /// The same LDS seen as elements of `U` (the byte offset kept: a
    /// multiple of `align_of::<U>()`), e.g. a tile of words as halves.
    #[inline(always)]
    pub fn cast<U>(self) -> Lds<U> {
        Lds {
            base: self.base as *mut U,
            byte_offset: self.byte_offset,
        }
    }

    /// The 32-bit shared-window address of element `i`, for device-layer
    /// inline assembly that reads LDS itself (`ldmatrix`). NVPTX builds only
    /// (the emulator checks every access through [`Lds::load`] /
    /// [`Lds::store`]). 32-bit, not a generic pointer, so that offsets the
    /// compiler knows fold into the instructions' immediates.
    #[cfg(all(ferrocm_device, target_arch = "nvptx64"))]
    #[inline(always)]
    pub fn shared_address(self, i: u32) -> u32 {
        let arena = core::intrinsics::gpu::gpu_launch_sized_workgroup_mem::<u8>();
        let window: u32;
        // SAFETY: an address conversion, no memory access.
        unsafe {
            core::arch::asm!(
                "{{ .reg .u64 s; cvta.to.shared.u64 s, {p}; cvt.u32.u64 {w}, s; }}",
                p = in(reg64) arena,
                w = out(reg32) window,
                options(pure, nomem, nostack),
            )
        };
        window + self.byte_offset + i * core::mem::size_of::<T>() as u32
    }
}

#[amdgpu_device]
impl Lds<u32> {
    /// Adds `v` to element `i` atomically (against the other workitems of
    /// the group); returns the old value. For LDS histograms.
    #[inline(always)]
    pub fn atomic_add(self, i: u32, v: u32) -> u32 {
        #[cfg(not(ferrocm_device))]
        emu::check_lds::<u32>(self.byte_offset, i);
        // SAFETY: the element lies in the launch's LDS (checked in the
        // emulator); a flat (generic) atomic reaches LDS on every target.
        let word = unsafe { core::sync::atomic::AtomicU32::from_ptr(self.base.add(i as usize)) };
        word.fetch_add(v, core::sync::atomic::Ordering::Relaxed)
    }
}

/// Reads element `i` of a global buffer argument: a plain load on a GPU;
/// in the emulator with the sanitizer on, first checked against the ranges
/// the launch proved inside their buffers, so a read out of bounds is an
/// error naming the kernel instead of garbage. Every kernel reads global
/// memory through this (and writes through [`store`]).
///
/// # Safety
/// `p + i` must lie in a buffer argument of the running launch.
#[amdgpu_device]
#[inline(always)]
pub unsafe fn load<T: Copy>(p: *const T, i: usize) -> T {
    #[cfg(not(ferrocm_device))]
    emu::check_global(p.wrapping_add(i) as usize, size_of::<T>(), false);
    unsafe { *p.add(i) }
}

/// Element `i` of a global buffer argument, borrowed in place: a kernel
/// that reads a few fields of a large element (a quantized block) loads only
/// those. The emulator's sanitizer checks the whole element against the
/// launch's ranges, as [`load`] does.
///
/// # Safety
/// As [`load`]; the buffer must not be written while the borrow lives.
#[amdgpu_device]
#[inline(always)]
pub unsafe fn global_ref<'a, T>(p: *const T, i: usize) -> &'a T {
    #[cfg(not(ferrocm_device))]
    emu::check_global(p.wrapping_add(i) as usize, size_of::<T>(), false);
    unsafe { &*p.add(i) }
}

/// Copies the 16-byte element `src[i]` of a global buffer argument into
/// element `j` of `dst` in LDS, or zeros when `!keep` (`src[i]` is then
/// not read). On NVIDIA (`cp.async`, sm_80+) the copy runs on without the
/// workitem waiting or holding registers, so a kernel can fetch its next
/// stage while it computes on this one; elsewhere it is a load and a store
/// done before this returns. Either way the copy counts as done only after
/// [`lds_copy_commit`] closed its group, [`lds_copy_wait`] waited for the
/// group, and a [`barrier`] (for the other workitems' copies).
///
/// # Safety
/// When `keep`, `src + i` must lie in a buffer argument of the running
/// launch ([`load`]'s contract).
#[amdgpu_device]
#[inline(always)]
pub unsafe fn lds_copy_async<T: Copy>(dst: Lds<T>, j: u32, src: *const T, i: usize, keep: bool) {
    const { assert!(size_of::<T>() == 16) };
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: `dst[j]` is in the launch's LDS; `src + i` is read only when
    // `keep` (a source size of 0 zero-fills).
    unsafe {
        core::arch::asm!(
            "cp.async.cg.shared.global [{d}], [{s}], 16, {n};",
            d = in(reg32) dst.shared_address(j),
            s = in(reg64) src.wrapping_add(i),
            n = in(reg32) if keep { 16u32 } else { 0 },
            options(nostack),
        );
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        // A store in each arm: a value chosen under a branch went through
        // scratch on AMD.
        if keep {
            // SAFETY: the caller's contract.
            dst.store(j, unsafe { load(src, i) });
        } else {
            // SAFETY: T is 16 bytes of plain data (the kernels' words).
            dst.store(j, unsafe { core::mem::transmute_copy(&[0u32; 4]) });
        }
    }
}

/// Whether kernels build their copy-staged loops (several K steps of
/// [`lds_copy_async`] in flight, no registers holding them): on NVIDIA,
/// where the copies run on while the workitem computes, and in the
/// emulator, which checks those loops' logic. AMD builds leave them out:
/// there each copy is a load and a store before the next instruction, and
/// the register-staged loops overlap the loads with the multiply instead.
#[amdgpu_device]
pub const COPY_STAGED_LOOPS: bool = cfg!(any(target_arch = "nvptx64", not(ferrocm_device)));

/// Rows of `x` the quantized matrix-vector kernels' widest pass holds
/// (`qmatvec8_*`): eight on NVIDIA (up to 128 registers under its launch
/// bound) and in the emulator, which checks that pass's logic; four on AMD,
/// where the fifth to eighth rows' sums spilled VGPRs on gfx942, so its
/// 8-row kernels make two passes of four.
#[amdgpu_device]
pub const QMATVEC_WIDE_PASS: usize = if cfg!(any(target_arch = "nvptx64", not(ferrocm_device))) {
    QMATVEC_WIDE_PASS_NVIDIA
} else {
    QMATVEC_WIDE_PASS_AMD
};

/// [`QMATVEC_WIDE_PASS`] in AMD's code objects, for the host that sizes
/// their grids.
#[amdgpu_device]
pub const QMATVEC_WIDE_PASS_AMD: usize = 4;

/// [`QMATVEC_WIDE_PASS`] in the PTX module and the emulator, for the host
/// that sizes their grids.
#[amdgpu_device]
pub const QMATVEC_WIDE_PASS_NVIDIA: usize = 8;

/// Closes the group of this workitem's [`lds_copy_async`] copies issued
/// since the last one (a no-op where the copies are synchronous).
#[amdgpu_device]
#[inline(always)]
pub fn lds_copy_commit() {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: no operands; orders this workitem's async copies.
    unsafe {
        core::arch::asm!("cp.async.commit_group;", options(nostack))
    };
}

/// Waits until at most `PENDING` of this workitem's closed copy groups are
/// still running (the newest ones): `lds_copy_wait::<0>()` waits for all.
/// A no-op where the copies are synchronous. Other workitems' copies need
/// a [`barrier`] after it.
#[amdgpu_device]
#[inline(always)]
pub fn lds_copy_wait<const PENDING: u32>() {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: waits on this workitem's async copies; a memory clobber, so
    // no LDS access moves across it.
    unsafe {
        core::arch::asm!("cp.async.wait_group {n};", n = const PENDING, options(nostack))
    };
}

/// A PTX instruction of sm_90 and newer, written commented out behind the
/// marker the CUDA device looks for (`ferrocm_kernels::host::SM90_ONLY`):
/// the module is built for sm_80 (it must load on an A100), and the device
/// uncomments these lines when it loads the module for an sm_90 GPU
/// (`ferrocm_host::ptx::specialise_for_sm90`). Elsewhere they stay
/// comments, so the instruction is skipped.
#[cfg(target_arch = "nvptx64")]
macro_rules! sm90_only {
    ($ins:literal) => {
        concat!("// ferrocm-sm90: ", $ins)
    };
}

/// Waits until the kernels queued before this one on the stream have
/// finished and their writes are visible. A kernel that calls this before
/// it touches global memory may be launched with
/// `LaunchConfig::early_start` (ferrocm-host), which lets the CUDA device
/// start it while the previous kernel drains (programmatic dependent
/// launch, `griddepcontrol.wait` on sm_90 and newer). Without that launch,
/// and on AMD, it returns at once: stream order already holds. The
/// emulator checks the promise: with `early_start`, a global access before
/// this call, or a return without it, is a kernel panic. Call it on every
/// path: a kernel that ended without waiting could let the next kernel
/// start before the one ahead of it finished.
#[amdgpu_device]
#[inline(always)]
pub fn wait_prior_grids() {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: no operands; a memory clobber, so no access moves above it.
    unsafe {
        core::arch::asm!(sm90_only!("griddepcontrol.wait;"), options(nostack))
    };
    #[cfg(not(ferrocm_device))]
    emu::waited_prior_grids();
}

/// Lets the kernel queued after this one (when launched with
/// `early_start`) be scheduled now, into room this grid leaves, to wait
/// in [`wait_prior_grids`] instead of being launched after this grid ends
/// (`griddepcontrol.launch_dependents`, sm_90 and newer). A hint: it never
/// lets the next kernel see this one's writes early. A no-op elsewhere.
#[amdgpu_device]
#[inline(always)]
pub fn release_dependent_grids() {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: no operands; schedules work, reads and writes nothing.
    unsafe {
        core::arch::asm!(
            sm90_only!("griddepcontrol.launch_dependents;"),
            options(nostack, nomem)
        )
    };
}

/// Writes element `i` of a global buffer argument, checked as [`load`].
///
/// # Safety
/// `p + i` must lie in a `*mut` buffer argument of the running launch.
#[amdgpu_device]
#[inline(always)]
pub unsafe fn store<T>(p: *mut T, i: usize, v: T) {
    #[cfg(not(ferrocm_device))]
    emu::check_global(p.wrapping_add(i) as usize, size_of::<T>(), true);
    unsafe { *p.add(i) = v }
}

/// Where a kernel reports an error found on the device (an integer division
/// by zero, an id past its dim): the device's status words and the tag the
/// host gave this launch. The first report since the host last looked wins
/// (compare-and-swap of the tag into word 0; the winner writes the element
/// index into words 1 and 2). The host reads the words at its next wait
/// (`to_vec`, `synchronize`) and turns a tag into an error naming the op,
/// so no launch waits and no fault goes unseen. A null `status` is a launch
/// that cannot fault; `raise` is then never called.
#[amdgpu_device]
#[derive(Clone, Copy)]
pub struct Fault {
    /// [`FAULT_WORDS`] u32 words: tag, index (2), id (2), size (2).
    pub status: *mut u32,
    /// This launch's tag (non-zero).
    pub tag: u32,
}

#[amdgpu_device]
impl Fault {
    /// Reports a fault at element `index`; whether this report was the
    /// first (the one the host will see).
    #[inline(never)]
    pub fn raise(self, index: u64) -> bool {
        #[cfg(not(ferrocm_device))]
        emu::check_global(self.status as usize, FAULT_WORDS * size_of::<u32>(), true);
        // SAFETY: `status` is the launch's status words (checked in the
        // emulator; the op layer passes them with every launch that can fault).
        let word = unsafe { core::sync::atomic::AtomicU32::from_ptr(self.status) };
        let first = word
            .compare_exchange(
                0,
                self.tag,
                core::sync::atomic::Ordering::Relaxed,
                core::sync::atomic::Ordering::Relaxed,
            )
            .is_ok();
        if first {
            unsafe {
                store(self.status, 1, index as u32);
                store(self.status, 2, (index >> 32) as u32);
            }
        }
        first
    }

    /// Reports `id` at position `index` of an indexing op's ids: outside
    /// `0..size`. The host turns it into `IdOutOfRange` naming all three.
    #[inline(never)]
    pub fn raise_id(self, index: u64, id: i64, size: u64) {
        if self.raise(index) {
            unsafe {
                store(self.status, 3, id as u32);
                store(self.status, 4, (id as u64 >> 32) as u32);
                store(self.status, 5, size as u32);
                store(self.status, 6, (size >> 32) as u32);
            }
        }
    }
}

/// The u32 status words [`Fault::status`] points to: tag, index (2 words),
/// id (2), size (2), one unused.
#[amdgpu_device]
pub const FAULT_WORDS: usize = 8;

/// `acc + Σ a_i b_i` over the four signed bytes `a_i`, `b_i` of `a` and `b`
/// (little-endian), wrapping: one instruction where the target has one
/// (`dp4a` on NVIDIA sm_61+, `v_dot4` on AMD archs with the dot
/// instructions, `cfg(ferrocm_dot4)`), four multiply-adds elsewhere.
///
/// ```
/// use ferrocm_kernels::device::dot4_i8;
/// let a = u32::from_le_bytes([1, 2, 3, (-4i8) as u8]);
/// let b = u32::from_le_bytes([5, (-6i8) as u8, 7, 8]);
/// assert_eq!(dot4_i8(a, b, 100), 100 + 5 - 12 + 21 - 32);
/// ```
#[amdgpu_device]
#[inline(always)]
pub fn dot4_i8(a: u32, b: u32, acc: i32) -> i32 {
    #[cfg(all(target_arch = "amdgpu", ferrocm_dot4))]
    {
        unsafe extern "C" {
            #[link_name = "llvm.amdgcn.sdot4"]
            fn sdot4(a: i32, b: i32, c: i32, clamp: bool) -> i32;
        }
        unsafe { sdot4(a as i32, b as i32, acc, false) }
    }
    #[cfg(target_arch = "nvptx64")]
    {
        let r: i32;
        unsafe {
            core::arch::asm!(
                "dp4a.s32.s32 {r}, {a}, {b}, {c};",
                r = out(reg32) r,
                a = in(reg32) a,
                b = in(reg32) b,
                c = in(reg32) acc,
                options(pure, nomem, nostack)
            )
        };
        r
    }
    #[cfg(not(any(all(target_arch = "amdgpu", ferrocm_dot4), target_arch = "nvptx64")))]
    {
        let mut s = acc;
        let mut i = 0;
        while i < 4 {
            let x = (a >> (8 * i)) as u8 as i8 as i32;
            let y = (b >> (8 * i)) as u8 as i8 as i32;
            s = s.wrapping_add(x * y);
            i += 1;
        }
        s
    }
}

/// Each byte of `idx` (an index below 16) replaced by that byte of the
/// 16-byte table `t` (entries `4 i..4 i + 4` in `t[i]`, little-endian): a
/// lookup of four 4-bit codes in registers, two byte permutes and a select
/// (`v_perm_b32` on AMD, `prmt` on NVIDIA) where an indexed constant array
/// would go to memory.
///
/// ```
/// use ferrocm_kernels::device::byte_table16;
/// let t = [0x0604_0200, 0x0e0c_0a08, 0x1614_1210, 0x1e1c_1a18]; // entry i = 2 i
/// assert_eq!(byte_table16(t, u32::from_le_bytes([0, 15, 8, 7])), u32::from_le_bytes([0, 30, 16, 14]));
/// ```
#[amdgpu_device]
#[inline(always)]
pub fn byte_table16(t: [u32; 4], idx: u32) -> u32 {
    // Bit 3 of each index picks the upper half of the table.
    let upper = ((idx >> 3) & 0x0101_0101).wrapping_mul(0xFF);
    #[cfg(target_arch = "amdgpu")]
    let (lo, hi) = {
        // v_perm_b32: selector byte values 0..4 pick src1's bytes, 4..8
        // src0's.
        let sel = idx & 0x0707_0707;
        unsafe {
            (
                core::arch::amdgpu::perm(t[1], t[0], sel),
                core::arch::amdgpu::perm(t[3], t[2], sel),
            )
        }
    };
    #[cfg(target_arch = "nvptx64")]
    let (lo, hi) = {
        // prmt: nibble i of the selector picks byte i (0..4 from the
        // first source, 4..8 from the second).
        let s = idx & 0x0707_0707;
        let sel = (s & 0xF) | ((s >> 4) & 0xF0) | ((s >> 8) & 0xF00) | ((s >> 12) & 0xF000);
        let (lo, hi): (u32, u32);
        unsafe {
            core::arch::asm!(
                "prmt.b32 {lo}, {t0}, {t1}, {sel};",
                "prmt.b32 {hi}, {t2}, {t3}, {sel};",
                lo = out(reg32) lo,
                hi = out(reg32) hi,
                t0 = in(reg32) t[0],
                t1 = in(reg32) t[1],
                t2 = in(reg32) t[2],
                t3 = in(reg32) t[3],
                sel = in(reg32) sel,
                options(pure, nomem, nostack)
            )
        };
        (lo, hi)
    };
    #[cfg(not(ferrocm_device))]
    let (lo, hi) = {
        let pick = |a: u32, b: u32| {
            let mut r = 0u32;
            for i in 0..4 {
                let j = (idx >> (8 * i)) & 7;
                let w = if j < 4 { a } else { b };
                r |= ((w >> (8 * (j & 3))) & 0xFF) << (8 * i);
            }
            r
        };
        (pick(t[0], t[1]), pick(t[2], t[3]))
    };
    (lo & !upper) | (hi & upper)
}

/// Both 4-bit codes of each byte of `w` looked up in the 16-byte table `t`
/// (as [`byte_table16`]): the low nibbles' entries (byte `i` of the first
/// word from byte `i`'s low nibble) and the high nibbles'. The packing of
/// GGML's 4-bit blocks, decoded in one call: on NVIDIA `prmt` reads the
/// eight nibbles as selectors directly (six permutes for eight codes, where
/// splitting the nibbles into bytes first costs about three times the
/// instructions); elsewhere [`byte_table16`] of each half.
///
/// ```
/// use ferrocm_kernels::device::nibble_table16;
/// let t = [0x0604_0200, 0x0e0c_0a08, 0x1614_1210, 0x1e1c_1a18]; // entry i = 2 i
/// let (lo, hi) = nibble_table16(t, u32::from_le_bytes([0xF0, 0x18, 0x97, 0x3C]));
/// assert_eq!(lo, u32::from_le_bytes([0, 16, 14, 24]));
/// assert_eq!(hi, u32::from_le_bytes([30, 2, 18, 6]));
/// ```
#[amdgpu_device]
#[inline(always)]
pub fn nibble_table16(t: [u32; 4], w: u32) -> (u32, u32) {
    #[cfg(target_arch = "nvptx64")]
    {
        // Selector nibble j = the code of result byte j; its bit 3 (prmt's
        // sign-replicate flag) is cleared for the two table-half lookups and
        // then, moved to bit 2, picks the upper half's byte. Bytes come out
        // as (lo0, hi0, lo1, hi1) and (lo2, hi2, lo3, hi3), then unzipped.
        let idx = w & 0x7777_7777;
        let pick = ((w >> 1) & 0x4444_4444) | 0x3210_3210;
        let (lo, hi): (u32, u32);
        unsafe {
            core::arch::asm!(
                "{{",
                ".reg .b32 i1, p1, a0, b0, a1, b1, r0, r1;",
                "shr.b32 i1, {idx}, 16;",
                "shr.b32 p1, {pick}, 16;",
                "prmt.b32 a0, {t0}, {t1}, {idx};",
                "prmt.b32 b0, {t2}, {t3}, {idx};",
                "prmt.b32 a1, {t0}, {t1}, i1;",
                "prmt.b32 b1, {t2}, {t3}, i1;",
                "prmt.b32 r0, a0, b0, {pick};",
                "prmt.b32 r1, a1, b1, p1;",
                "prmt.b32 {lo}, r0, r1, 0x6420;",
                "prmt.b32 {hi}, r0, r1, 0x7531;",
                "}}",
                lo = out(reg32) lo,
                hi = out(reg32) hi,
                t0 = in(reg32) t[0],
                t1 = in(reg32) t[1],
                t2 = in(reg32) t[2],
                t3 = in(reg32) t[3],
                idx = in(reg32) idx,
                pick = in(reg32) pick,
                options(pure, nomem, nostack)
            )
        };
        (lo, hi)
    }
    #[cfg(not(target_arch = "nvptx64"))]
    (
        byte_table16(t, w & 0x0F0F_0F0F),
        byte_table16(t, (w >> 4) & 0x0F0F_0F0F),
    )
}

/// The value of `v` held by lane `lane_id() ^ mask` (butterfly exchange).
/// `mask` must be below [`wave_size`]. All active lanes must call it together.
#[amdgpu_device]
#[inline(always)]
pub fn wave_shfl_xor(v: u32, mask: u32) -> u32 {
    #[cfg(target_arch = "amdgpu")]
    return unsafe { core::arch::amdgpu::ds_bpermute((lane_id() ^ mask) << 2, v) };
    #[cfg(target_arch = "nvptx64")]
    return unsafe { nv::shfl_bfly(nv::warp_mask(), v, mask, 0x1f) };
    #[cfg(not(ferrocm_device))]
    return emu::wave_op(emu::WaveOp::ShflXor(mask), v as u64) as u32;
}

/// The value of `v` held by lane `src` (the same `src` in every lane).
#[amdgpu_device]
#[inline(always)]
pub fn wave_broadcast(v: u32, src: u32) -> u32 {
    #[cfg(target_arch = "amdgpu")]
    return unsafe { core::arch::amdgpu::ds_bpermute(src << 2, v) };
    #[cfg(target_arch = "nvptx64")]
    return unsafe { nv::shfl_idx(nv::warp_mask(), v, src, 0x1f) };
    #[cfg(not(ferrocm_device))]
    return emu::wave_op(emu::WaveOp::Broadcast(src), v as u64) as u32;
}

/// The value of `v` held by lane `src`, each lane naming its own `src`
/// (below [`wave_size`]; an inactive lane reads 0 on AMD and in the
/// emulator). All active lanes must call it together.
#[amdgpu_device]
#[inline(always)]
pub fn wave_shfl(v: u32, src: u32) -> u32 {
    #[cfg(target_arch = "amdgpu")]
    return unsafe { core::arch::amdgpu::ds_bpermute(src << 2, v) };
    #[cfg(target_arch = "nvptx64")]
    return unsafe { nv::shfl_idx(nv::warp_mask(), v, src, 0x1f) };
    #[cfg(not(ferrocm_device))]
    return emu::wave_op(emu::WaveOp::Gather, (src as u64) << 32 | v as u64) as u32;
}

/// `f32` gather, see [`wave_shfl`].
#[amdgpu_device]
#[inline(always)]
pub fn wave_shfl_f32(v: f32, src: u32) -> f32 {
    f32::from_bits(wave_shfl(v.to_bits(), src))
}

/// Bit `l` set for every active lane `l` whose `pred` is true.
#[amdgpu_device]
#[inline(always)]
pub fn wave_ballot(pred: bool) -> u64 {
    #[cfg(target_arch = "amdgpu")]
    return core::arch::amdgpu::ballot(pred);
    #[cfg(target_arch = "nvptx64")]
    return unsafe { nv::ballot(nv::warp_mask(), pred) } as u64;
    #[cfg(not(ferrocm_device))]
    return emu::wave_op(emu::WaveOp::Ballot, pred as u64);
}

/// `f32` butterfly exchange, see [`wave_shfl_xor`].
#[amdgpu_device]
#[inline(always)]
pub fn wave_shfl_xor_f32(v: f32, mask: u32) -> f32 {
    f32::from_bits(wave_shfl_xor(v.to_bits(), mask))
}

/// A promise that every wave of the workgroup is whole (the workgroup's size
/// is a multiple of [`wave_size`]), which lets exchanges skip the lane mask:
/// on NVIDIA `shfl.sync` then takes the constant full mask, and ptxas no
/// longer wraps each exchange in the convergence checks (`MATCH.ANY`,
/// `VOTEU.ANY`, `BRA.DIV`) a computed mask needs. Elsewhere the exchanges
/// are [`wave_shfl_xor_f32`] and [`wave_shfl_f32`].
#[amdgpu_device]
#[derive(Clone, Copy)]
pub struct FullWaves(());

#[amdgpu_device]
impl FullWaves {
    /// The promise, for a kernel the op layer launches with a workgroup size
    /// that is a multiple of the wave size (the emulator checks it).
    ///
    /// # Safety
    /// On a GPU, a partial wave would exchange with lanes that do not
    /// exist: undefined behaviour on NVIDIA.
    #[inline(always)]
    pub unsafe fn assume() -> Self {
        #[cfg(not(ferrocm_device))]
        {
            let size = emu::with(|c| c.workgroup_size.iter().product::<u32>());
            assert!(
                size % wave_size() == 0,
                "FullWaves::assume: a workgroup of {size} workitems has a partial wave of {}",
                wave_size()
            );
        }
        FullWaves(())
    }

    /// [`wave_shfl_xor_f32`] over whole waves.
    #[inline(always)]
    pub fn shfl_xor_f32(self, v: f32, mask: u32) -> f32 {
        #[cfg(target_arch = "nvptx64")]
        return f32::from_bits(unsafe { nv::shfl_bfly(!0, v.to_bits(), mask, 0x1f) });
        #[cfg(not(target_arch = "nvptx64"))]
        return wave_shfl_xor_f32(v, mask);
    }

    /// Whether `pred` holds in some lane of the wave ([`wave_ballot`] over
    /// whole waves): the same in every lane, so a branch on it is uniform.
    #[inline(always)]
    pub fn any(self, pred: bool) -> bool {
        #[cfg(target_arch = "nvptx64")]
        return unsafe { nv::ballot(!0, pred) } != 0;
        #[cfg(not(target_arch = "nvptx64"))]
        return wave_ballot(pred) != 0;
    }

    /// [`wave_shfl_f32`] over whole waves.
    #[inline(always)]
    pub fn shfl_f32(self, v: f32, src: u32) -> f32 {
        #[cfg(target_arch = "nvptx64")]
        return f32::from_bits(unsafe { nv::shfl_idx(!0, v.to_bits(), src, 0x1f) });
        #[cfg(not(target_arch = "nvptx64"))]
        return wave_shfl_f32(v, src);
    }
}

/// Sum of `v` over the wave, in every lane. The summation order is the same
/// butterfly on the GPU and in the emulator, so results match bit for bit.
#[amdgpu_device]
#[inline(always)]
pub fn wave_sum_f32(v: f32) -> f32 {
    let mut acc = v;
    let mut offset = wave_size() / 2;
    while offset > 0 {
        acc += wave_shfl_xor_f32(acc, offset);
        offset /= 2;
    }
    acc
}

/// Maximum of `v` over the wave (NaN if any lane holds one, as [`Elem::max`]), in every lane.
#[amdgpu_device]
#[inline(always)]
pub fn wave_max_f32(v: f32) -> f32 {
    let mut acc = v;
    let mut offset = wave_size() / 2;
    while offset > 0 {
        acc = crate::elem::Elem::max(acc, wave_shfl_xor_f32(acc, offset));
        offset /= 2;
    }
    acc
}

/// Minimum of `v` over the wave (NaN if any lane holds one), in every lane.
#[amdgpu_device]
#[inline(always)]
pub fn wave_min_f32(v: f32) -> f32 {
    let mut acc = v;
    let mut offset = wave_size() / 2;
    while offset > 0 {
        acc = crate::elem::Elem::min(acc, wave_shfl_xor_f32(acc, offset));
        offset /= 2;
    }
    acc
}

/// 64-bit butterfly exchange (two 32-bit exchanges).
#[amdgpu_device]
#[inline(always)]
pub fn wave_shfl_xor_u64(v: u64, mask: u32) -> u64 {
    let lo = wave_shfl_xor(v as u32, mask) as u64;
    let hi = wave_shfl_xor((v >> 32) as u32, mask) as u64;
    lo | (hi << 32)
}

/// Butterfly exchange of any element type (one 32-bit exchange for types up
/// to 4 bytes, two for 8-byte types).
#[amdgpu_device]
#[inline(always)]
pub fn wave_shfl_xor_elem<A: crate::elem::Elem>(v: A, mask: u32) -> A {
    if size_of::<A>() <= 4 {
        A::from_bits64(wave_shfl_xor(v.to_bits64() as u32, mask) as u64)
    } else {
        A::from_bits64(wave_shfl_xor_u64(v.to_bits64(), mask))
    }
}

/// Index of this workitem's wave in its (1-D) workgroup.
#[amdgpu_device]
#[inline(always)]
pub fn wave_id() -> u32 {
    workitem_id_x() / wave_size()
}

/// Number of waves in a (1-D) workgroup.
#[amdgpu_device]
#[inline(always)]
pub fn num_waves() -> u32 {
    workgroup_size_x().div_ceil(wave_size())
}

/// Calls `f(i)` for every `i < n` this workitem owns in a grid-stride loop
/// (any `n`, any grid size; 64-bit indices).
#[amdgpu_device]
#[inline(always)]
pub fn grid_stride(n: u64, mut f: impl FnMut(u64)) {
    let mut i = global_id_x();
    let step = global_size_x();
    while i < n {
        f(i);
        i += step;
    }
}

/// Elements each workitem loads before it stores any, in
/// [`grid_stride_batched`]: the memory-level parallelism a bandwidth-bound
/// kernel needs (a GPU keeps ~14 KB of loads in flight per SM/CU at full
/// bandwidth; one 4-byte load per workitem is a quarter of that). Launches
/// size their grid by `n / GRID_STRIDE_BATCH` workitems.
#[amdgpu_device]
pub const GRID_STRIDE_BATCH: u64 = 4;

/// [`grid_stride`] in batches: each workitem loads the values of
/// [`GRID_STRIDE_BATCH`] of its indices (`i`, `i + step`, ...; coalesced
/// across the wave) with `load`, and only then computes and stores them with
/// `store`, so the loads are in flight together. Any `n`, any grid.
///
/// `load` must only read and `store` only write the output at its index:
/// the reordering is then invisible. With `batch` false (pass
/// `strides.is_contiguous()`), one element per iteration: a strided input's
/// index arithmetic already holds the registers (batching it made gfx942
/// spill SGPRs), and LLVM specialises `load` for each branch.
#[amdgpu_device]
#[inline(always)]
pub fn grid_stride_batched<V: Copy>(
    n: u64,
    batch: bool,
    load: impl Fn(u64) -> V,
    mut store: impl FnMut(u64, V),
) {
    let step = global_size_x();
    let mut i = global_id_x();
    while batch && i + 3 * step < n {
        let v0 = load(i);
        let v1 = load(i + step);
        let v2 = load(i + 2 * step);
        let v3 = load(i + 3 * step);
        store(i, v0);
        store(i + step, v1);
        store(i + 2 * step, v2);
        store(i + 3 * step, v3);
        i += 4 * step;
    }
    while i < n {
        let v = load(i);
        store(i, v);
        i += step;
    }
}

/// Elements in one chunk of the contiguous elementwise kernels: each
/// workitem step of [`grid_stride_chunks`] loads eight consecutive elements
/// with the widest loads their bytes allow ([`load_chunk`]: one 16-byte
/// load for f16/bf16, two for f32, an 8-byte one for u8). Element-sized
/// loads left bf16 maps at 44-79% of the H100's copy bandwidth. Launches of
/// these kernels size their grid by `n / CHUNK` workitems.
#[amdgpu_device]
pub const CHUNK: u64 = 8;

/// Bytes a chunk of `T` is loaded by: its size up to 16 (the widest load).
#[amdgpu_device]
#[inline(always)]
const fn chunk_align<T>() -> usize {
    let bytes = CHUNK as usize * size_of::<T>();
    if bytes < 16 { bytes } else { 16 }
}

/// Whether a contiguous buffer starting at `p` can be read or written a
/// [`CHUNK`] at a time: `p` is aligned to the chunk's load width (a view
/// that starts a few elements into its storage may not be).
///
/// ```
/// use ferrocm_kernels::device::chunk_aligned;
/// let words = [0u64; 4];
/// let p = words.as_ptr() as *const u16;
/// assert!(chunk_aligned(p) == (p as usize % 16 == 0));
/// assert!(!chunk_aligned(p.wrapping_add(1)));
/// ```
#[amdgpu_device]
#[inline(always)]
pub fn chunk_aligned<T>(p: *const T) -> bool {
    (p as usize).is_multiple_of(chunk_align::<T>())
}

/// `[f(0), .., f(7)]`, written out so that each `k` is a constant after
/// inlining (the chunk stays in registers).
#[amdgpu_device]
#[inline(always)]
pub fn chunk_of<T>(mut f: impl FnMut(usize) -> T) -> [T; CHUNK as usize] {
    [f(0), f(1), f(2), f(3), f(4), f(5), f(6), f(7)]
}

/// Elements `first..first + 8` of a global buffer argument, by the widest
/// loads their bytes allow (8 bytes for 1-byte `T`, 16 otherwise).
///
/// # Safety
/// As [`load`] for each element; `first` is a multiple of [`CHUNK`] and
/// [`chunk_aligned`]`(p)` holds.
#[amdgpu_device]
#[inline(always)]
pub unsafe fn load_chunk<T: crate::elem::Elem>(p: *const T, first: u64) -> [T; CHUNK as usize] {
    use crate::elem::W128;
    let first = first as usize;
    let from = |b: u64| T::from_bits64(b);
    unsafe {
        match size_of::<T>() {
            1 => {
                let w = load(p as *const u64, first / 8);
                chunk_of(|k| from((w >> (8 * k)) & 0xff))
            }
            2 => {
                let w = load(p as *const W128, first / 8);
                chunk_of(|k| from(((w.0[k / 2] >> (16 * (k % 2))) & 0xffff) as u64))
            }
            4 => {
                let (a, b) = (
                    load(p as *const W128, first / 4),
                    load(p as *const W128, first / 4 + 1),
                );
                chunk_of(|k| from(if k < 4 { a.0[k] } else { b.0[k - 4] } as u64))
            }
            _ => {
                let q = p as *const W128;
                let w = [
                    load(q, first / 2),
                    load(q, first / 2 + 1),
                    load(q, first / 2 + 2),
                    load(q, first / 2 + 3),
                ];
                chunk_of(|k| {
                    let l = &w[k / 2].0;
                    from(l[2 * (k % 2)] as u64 | (l[2 * (k % 2) + 1] as u64) << 32)
                })
            }
        }
    }
}

/// Stores `v` rounded to float type `T` (f32, f16 or bf16) to elements
/// `first..first + 8` of a global buffer argument, in 16-byte stores: as
/// [`store_chunk`] of the conversions, with 16-bit types rounded in pairs
/// ([`Elem::pack2`](crate::elem::Elem::pack2): one instruction a pair on
/// NVIDIA).
///
/// # Safety
/// As [`store_chunk`].
#[amdgpu_device]
#[inline(always)]
pub unsafe fn store_chunk_f32<T: crate::elem::Elem>(
    p: *mut T,
    first: u64,
    v: [f32; CHUNK as usize],
) {
    use crate::elem::W128;
    let first = first as usize;
    unsafe {
        if size_of::<T>() == 2 {
            let lane = |l: usize| T::pack2(v[2 * l], v[2 * l + 1]);
            store(
                p as *mut W128,
                first / 8,
                W128([lane(0), lane(1), lane(2), lane(3)]),
            )
        } else {
            store_chunk(p, first as u64, chunk_of(|k| T::from_f32(v[k])))
        }
    }
}

/// Stores `v` to elements `first..first + 8` of a global buffer argument,
/// by the widest stores their bytes allow.
///
/// # Safety
/// As [`store`] for each element; `first` is a multiple of [`CHUNK`] and
/// [`chunk_aligned`]`(p)` holds.
#[amdgpu_device]
#[inline(always)]
pub unsafe fn store_chunk<T: crate::elem::Elem>(p: *mut T, first: u64, v: [T; CHUNK as usize]) {
    use crate::elem::W128;
    let first = first as usize;
    let b = |k: usize| v[k].to_bits64();
    unsafe {
        match size_of::<T>() {
            1 => {
                let mut w = 0u64;
                let mut k = 0;
                while k < 8 {
                    w |= (b(k) & 0xff) << (8 * k);
                    k += 1;
                }
                store(p as *mut u64, first / 8, w)
            }
            2 => {
                let lane =
                    |l: usize| (b(2 * l) & 0xffff) as u32 | ((b(2 * l + 1) & 0xffff) as u32) << 16;
                store(
                    p as *mut W128,
                    first / 8,
                    W128([lane(0), lane(1), lane(2), lane(3)]),
                )
            }
            4 => {
                let word = |j: usize| {
                    W128([
                        b(j) as u32,
                        b(j + 1) as u32,
                        b(j + 2) as u32,
                        b(j + 3) as u32,
                    ])
                };
                store(p as *mut W128, first / 4, word(0));
                store(p as *mut W128, first / 4 + 1, word(4));
            }
            _ => {
                let mut j = 0;
                while j < 4 {
                    let (lo, hi) = (b(2 * j), b(2 * j + 1));
                    let w = W128([lo as u32, (lo >> 32) as u32, hi as u32, (hi >> 32) as u32]);
                    store(p as *mut W128, first / 2 + j, w);
                    j += 1;
                }
            }
        }
    }
}

/// An elementwise map over `n` contiguous elements a [`CHUNK`] at a time:
/// `store(first, load(first))` for each whole chunk this workitem owns (a
/// grid-stride loop over `n / CHUNK` chunks), then `one(i)` for the last
/// `n % CHUNK` elements. For kernels whose buffers are all
/// [`chunk_aligned`]; any grid.
///
/// With `pairs` (the kernel's elements are [`chunk_pairs`]), a workitem
/// whose chunk `c` has a second one a grid step on (`c + step` below the
/// chunk count: every workitem where the grid is half the chunks,
/// [`chunks_per_workitem`]) loads both before storing either: 32 bytes in
/// flight a workitem, as the f32 maps have with one (copy bf16 92 -> 96% of an
/// H200's copy bandwidth; for f32, two chunks first measured slower on the
/// H100: exp f32 90 -> 87%).
#[amdgpu_device]
#[inline(always)]
pub fn grid_stride_chunks<V: Copy>(
    n: u64,
    pairs: bool,
    load: impl Fn(u64) -> V,
    mut store: impl FnMut(u64, V),
    mut one: impl FnMut(u64),
) {
    let step = global_size_x();
    let whole = n / CHUNK;
    let mut c = global_id_x();
    if pairs {
        while c + step < whole {
            let (a, b) = (load(c * CHUNK), load((c + step) * CHUNK));
            store(c * CHUNK, a);
            store((c + step) * CHUNK, b);
            c += 2 * step;
        }
    }
    while c < whole {
        let v = load(c * CHUNK);
        store(c * CHUNK, v);
        c += step;
    }
    let mut i = whole * CHUNK + global_id_x();
    while i < n {
        one(i);
        i += step;
    }
}

/// Whether a chunk of `T` is one load or store of 16 bytes or less (f16,
/// bf16, u8): a map whose every element type is takes two chunks a
/// workitem ([`grid_stride_chunks`]'s `pairs`).
///
/// ```
/// use ferrocm_kernels::device::chunk_pairs;
/// assert!(chunk_pairs::<u16>() && !chunk_pairs::<f32>());
/// ```
#[amdgpu_device]
#[inline(always)]
pub const fn chunk_pairs<T>() -> bool {
    size_of::<T>() as u64 * CHUNK <= 16
}

/// Chunks a workitem of [`grid_stride_chunks`] should take in a map whose
/// widest element has `elem_bytes`: two where its chunk is one load of 16
/// bytes or less ([`chunk_pairs`]), else one (a cast from bf16 to f32 ran
/// at 61% of copy with two). The host sizes the grid by it
/// (`LaunchConfig::chunked_for`); any grid is correct.
///
/// ```
/// use ferrocm_kernels::device::chunks_per_workitem;
/// assert_eq!(chunks_per_workitem(2), 2);
/// assert_eq!(chunks_per_workitem(4), 1);
/// ```
#[amdgpu_device]
pub const fn chunks_per_workitem(elem_bytes: usize) -> u64 {
    if elem_bytes as u64 * CHUNK <= 16 {
        2
    } else {
        1
    }
}

/// Most dims a strided layout may have to travel by value, in the kernel
/// arguments (beyond it, or when a dim or stride reaches 2^32, the layout is
/// read from memory).
#[amdgpu_device]
pub const INLINE_RANK: u32 = 4;

/// A logical index and, on the by-value path, its coordinates in the
/// (padded) 4-dim shape; see [`Strides::coords`].
#[amdgpu_device]
#[derive(Clone, Copy)]
pub struct Coords {
    i: u64,
    c: [u32; 4],
}

/// How a strided kernel reads its `N` inputs, all of the output's shape:
/// - `ndim == 0`: every input is contiguous (the fast path);
/// - `ptr` not null: `ndim` dims, then each input's `ndim` strides, in memory;
/// - else by value: the shape left-padded to [`INLINE_RANK`] dims (size 1,
///   stride 0), dims and strides as u32 halves of u64 words (`dims[0]` =
///   d0 | d1 << 32, `dims[1]` = d2 | d3 << 32, the same for each input's
///   strides), with 32-bit index arithmetic: the host sends a layout by value
///   only when every dim, stride and the element count fit in 32 bits.
///
/// On the fast path and the by-value path no memory is read for the layout,
/// so a strided launch needs no upload before it.
#[amdgpu_device]
#[derive(Clone, Copy)]
pub struct Strides<const N: usize> {
    ndim: u32,
    ptr: *const u64,
    dims: [u64; 2],
    strides: [[u64; 2]; N],
}

#[amdgpu_device]
impl<const N: usize> Strides<N> {
    /// From the kernel's arguments.
    #[inline(always)]
    pub fn new(ndim: u32, ptr: *const u64, dims: [u64; 2], strides: [[u64; 2]; N]) -> Self {
        Self {
            ndim,
            ptr,
            dims,
            strides,
        }
    }

    /// A layout read from memory only (`ptr` is not null whenever `ndim > 0`):
    /// for kernels whose register budget has no room for the by-value words.
    #[inline(always)]
    pub fn in_memory(ndim: u32, ptr: *const u64) -> Self {
        Self {
            ndim,
            ptr,
            dims: [1 | 1 << 32; 2],
            strides: [[0; 2]; N],
        }
    }

    /// The logical index `i` split into its coordinates: the by-value
    /// path's divisions, done once for every input.
    #[inline(always)]
    pub fn coords(&self, i: u64) -> Coords {
        if self.ndim == 0 || !self.ptr.is_null() {
            return Coords { i, c: [0; 4] };
        }
        let [d01, d23] = self.dims;
        let mut rem = i as u32;
        let d3 = (d23 >> 32) as u32;
        let c3 = rem % d3;
        rem /= d3;
        let d2 = d23 as u32;
        let c2 = rem % d2;
        rem /= d2;
        let d1 = (d01 >> 32) as u32;
        let c1 = rem % d1;
        // The outermost dim: what is left is already below it.
        Coords {
            i,
            c: [rem / d1, c1, c2, c3],
        }
    }

    /// Offset in input number `input` of the element at `at`.
    #[inline(always)]
    pub fn at(&self, at: Coords, input: usize) -> usize {
        if self.ndim == 0 {
            return at.i as usize;
        }
        if !self.ptr.is_null() {
            return strided_offset(at.i, self.ndim, self.ptr, (input as u32 + 1) * self.ndim)
                as usize;
        }
        let [s01, s23] = self.strides[input];
        let c = at.c;
        (c[0] as u64 * (s01 & 0xffff_ffff)
            + c[1] as u64 * (s01 >> 32)
            + c[2] as u64 * (s23 & 0xffff_ffff)
            + c[3] as u64 * (s23 >> 32)) as usize
    }

    /// Whether every input is contiguous (the fast path: offset = index).
    #[inline(always)]
    pub fn is_contiguous(&self) -> bool {
        self.ndim == 0
    }

    /// Offset of logical element `i` in input number `input`.
    #[inline(always)]
    pub fn offset(&self, i: u64, input: usize) -> usize {
        self.at(self.coords(i), input)
    }
}

/// Element offset of logical index `i` in a strided layout.
///
/// `layout` holds `ndim` dims followed by `ndim` strides (in elements); a
/// broadcast dim has stride 0. 64-bit arithmetic throughout.
#[amdgpu_device]
#[inline(always)]
pub fn strided_offset(i: u64, ndim: u32, layout: *const u64, strides_at: u32) -> u64 {
    let mut rem = i;
    let mut off = 0u64;
    let mut d = ndim;
    while d > 0 {
        d -= 1;
        let (dim, stride) = unsafe {
            (
                load(layout, d as usize),
                load(layout, (strides_at + d) as usize),
            )
        };
        off += (rem % dim) * stride;
        rem /= dim;
    }
    off
}

/// Declares kernels: each `fn` becomes an `#[amdgpu_global]` kernel. On the
/// host, each also gets a typed handle: a zero-sized type of the same name
/// implementing [`crate::host::Kernel`] (its parameter types as `Args`, its
/// [`crate::host::KernelInfo`] in a `static`), and the file gets a `KERNELS`
/// table (or the name given after `table`) listing them. Kernel arguments are
/// pointers and scalars only.
///
/// The kernels belong to the device code of the crate that declares them:
/// its root's `KERNEL_MODULE` (ferrocm-kernels' own, or the one
/// [`kernel_module!`](crate::kernel_module) defines in a kernel crate
/// outside ferrocm), and `#[amdgpu_global]` must be in scope where the
/// macro is used (`use ferrocm_kernels::prelude::*;` brings it).
///
/// ```text
/// kernels! {
///     fn fill_f32(out: *mut f32, n: u64, value: f32) { ... }
/// }
/// ```
#[macro_export]
#[allow(clippy::crate_in_macro_def)] // `crate::KERNEL_MODULE`: the caller's module, on purpose
macro_rules! kernels {
    ($( fn $name:ident ( $($arg:ident : $ty:ty),* $(,)? ) $body:block )*) => {
        $crate::kernels! { table KERNELS; $( fn $name ( $($arg : $ty),* ) $body )* }
    };
    (table $table:ident; $( fn $name:ident ( $($arg:ident : $ty:ty),* $(,)? ) $body:block )*) => {
        $(
            #[amdgpu_global]
            #[allow(clippy::too_many_arguments, clippy::not_unsafe_ptr_arg_deref)]
            fn $name($($arg: $ty),*) $body

            #[cfg(not(ferrocm_device))]
            #[allow(non_camel_case_types)]
            #[doc = concat!("Typed handle of the kernel `", stringify!($name), "` (see `ferrocm_kernels::host::Kernel`).")]
            pub struct $name {}

            #[cfg(not(ferrocm_device))]
            const _: () = {
                static INFO: $crate::host::KernelInfo = $crate::host::KernelInfo {
                    name: stringify!($name),
                    args: &[$( <$ty as $crate::host::KernelArg>::KIND ),*],
                    entry: {
                        fn entry(raw: &[u64]) {
                            let mut _it = raw.iter();
                            $name($( <$ty as $crate::host::KernelArg>::from_raw(*_it.next().unwrap()) ),*)
                        }
                        entry
                    },
                    // `crate`, not `$crate`: the module of the crate that
                    // declares the kernel, which may be another than this one.
                    module: Some(&crate::KERNEL_MODULE),
                };
                impl $crate::host::Kernel for $name {
                    type Args = ($($ty,)*);
                    const INFO: &'static $crate::host::KernelInfo = &INFO;
                }
            };
        )*
        /// Kernels this file declares.
        #[cfg(not(ferrocm_device))]
        pub static $table: &[&$crate::host::KernelInfo] = &[
            $( <$name as $crate::host::Kernel>::INFO, )*
        ];
    };
}
