//! What a launch is: its grid, workgroup size, LDS and whether it may start
//! early ([`LaunchConfig`]), and the limits every device holds it to. How a
//! device launches (the argument checks, the backends) is in
//! [`crate::device`]'s `launch`.

/// Most workitems in one workgroup (HIP's limit on every AMD GPU).
pub const MAX_BLOCK_SIZE: u32 = 1024;
/// Largest grid dimension in workgroups we launch along x.
pub const MAX_GRID_X: u32 = (1 << 31) - 1;
/// Largest grid dimension along y and z.
pub const MAX_GRID_YZ: u32 = 65535;

/// Grid (in workgroups), block (workitems per workgroup) and dynamic LDS of a launch.
///
/// ```
/// use ferrocm_host::LaunchConfig;
/// let cfg = LaunchConfig::linear(1000, 256);
/// assert_eq!(cfg.grid, [4, 1, 1]);
/// assert_eq!(cfg.block, [256, 1, 1]);
/// assert!(!cfg.early_start);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchConfig {
    /// Workgroups in x, y, z.
    pub grid: [u32; 3],
    /// Workitems per workgroup in x, y, z.
    pub block: [u32; 3],
    /// Launch-sized LDS in bytes.
    pub lds_bytes: u32,
    /// The kernel calls
    /// [`wait_prior_grids`](ferrocm_kernels::device::wait_prior_grids)
    /// before it touches global memory, so the device may start it before
    /// the kernel queued ahead of it has finished. On an sm_90 or newer
    /// CUDA GPU it is then launched as a programmatic dependent launch:
    /// its workgroups are scheduled while the previous kernel drains (and,
    /// when that kernel called
    /// [`release_dependent_grids`](ferrocm_kernels::device::release_dependent_grids),
    /// as soon as its workgroups are all running) and wait in the kernel,
    /// which saves the gap between two launches (1-2 us on an H100).
    /// Elsewhere the flag changes nothing. The emulator holds the kernel to
    /// the promise: a global access before the wait, or a return without
    /// it, is a kernel panic.
    pub early_start: bool,
}

impl LaunchConfig {
    /// Workgroups covering `n` elements with one workitem each, capped at
    /// 65536 workgroups: kernels use grid-stride loops, so any `n` is covered.
    pub fn linear(n: u64, block: u32) -> Self {
        let groups = n.div_ceil(block.max(1) as u64).clamp(1, 65536) as u32;
        Self {
            grid: [groups, 1, 1],
            block: [block, 1, 1],
            lds_bytes: 0,
            early_start: false,
        }
    }

    /// Workgroups for an elementwise kernel over `n` elements that loops
    /// with [`grid_stride_batched`](ferrocm_kernels::device::grid_stride_batched):
    /// one workitem per [`GRID_STRIDE_BATCH`](ferrocm_kernels::device::GRID_STRIDE_BATCH)
    /// elements, capped at 65536 workgroups.
    ///
    /// ```
    /// use ferrocm_host::LaunchConfig;
    /// assert_eq!(LaunchConfig::elementwise(4096, 256).grid, [4, 1, 1]);
    /// ```
    pub fn elementwise(n: u64, block: u32) -> Self {
        Self::linear(
            n.div_ceil(ferrocm_kernels::device::GRID_STRIDE_BATCH),
            block,
        )
    }

    /// Workgroups for an elementwise kernel over `n` elements that takes
    /// [`grid_stride_chunks`](ferrocm_kernels::device::grid_stride_chunks)
    /// when its buffers are contiguous and aligned (and
    /// [`grid_stride_batched`](ferrocm_kernels::device::grid_stride_batched)
    /// otherwise): one workitem per [`CHUNK`](ferrocm_kernels::device::CHUNK)
    /// elements, capped at 65536 workgroups.
    ///
    /// ```
    /// use ferrocm_host::LaunchConfig;
    /// assert_eq!(LaunchConfig::chunked(4096, 256).grid, [2, 1, 1]);
    /// ```
    pub fn chunked(n: u64, block: u32) -> Self {
        Self::linear(n.div_ceil(ferrocm_kernels::device::CHUNK), block)
    }

    /// [`chunked`](Self::chunked) for a map whose widest element (input or
    /// output) has `elem_bytes`: [`chunks_per_workitem`] chunks a workitem
    /// (two for f16/bf16 and u8, so each has 32 bytes in flight as an f32
    /// map's).
    ///
    /// [`chunks_per_workitem`]: ferrocm_kernels::device::chunks_per_workitem
    ///
    /// ```
    /// use ferrocm_host::LaunchConfig;
    /// assert_eq!(LaunchConfig::chunked_for(8192, 2, 256).grid, [2, 1, 1]);
    /// assert_eq!(LaunchConfig::chunked_for(8192, 4, 256).grid, [4, 1, 1]);
    /// ```
    pub fn chunked_for(n: u64, elem_bytes: usize, block: u32) -> Self {
        use ferrocm_kernels::device::{CHUNK, chunks_per_workitem};
        Self::linear(n.div_ceil(CHUNK * chunks_per_workitem(elem_bytes)), block)
    }

    /// One workgroup per row (capped at 65536: kernels loop over rows), with
    /// `lds_bytes` of LDS.
    pub fn rows(rows: u64, block: u32, lds_bytes: u32) -> Self {
        let groups = rows.clamp(1, 65536) as u32;
        Self {
            grid: [groups, 1, 1],
            block: [block, 1, 1],
            lds_bytes,
            early_start: false,
        }
    }

    /// This launch with [`early_start`](Self::early_start) set: for a
    /// kernel that calls
    /// [`wait_prior_grids`](ferrocm_kernels::device::wait_prior_grids)
    /// before any global access.
    ///
    /// ```
    /// use ferrocm_host::LaunchConfig;
    /// assert!(LaunchConfig::rows(32, 256, 0).starting_early().early_start);
    /// ```
    pub const fn starting_early(mut self) -> Self {
        self.early_start = true;
        self
    }

    /// Workitems per workgroup.
    pub fn block_size(&self) -> u64 {
        self.block.iter().map(|&b| b as u64).product()
    }

    /// Number of workgroups.
    pub fn num_groups(&self) -> u64 {
        self.grid.iter().map(|&g| g as u64).product()
    }
}
