//! The convolution network's ops: [`convolution`] (`conv1d`, `conv2d`,
//! `conv3d`: stride, padding, dilation, groups; NCHW and channels-last),
//! [`pool`] (max, average and adaptive pooling in 1 to 3 dims, max's
//! indices) and [`resample`] (nearest and bilinear upsampling).
//!
//! The group, instance and batch norms of these networks are in
//! [`crate::nn::channel_norm`].

pub mod convolution;
pub mod pool;
pub mod resample;

pub use convolution::{ConvOptions, set_vendor_dnn, vendor_dnn};
pub use pool::PoolOptions;
pub use resample::Resize;

use crate::core::dtype::WithDType;
use crate::core::error::{Error, Result};
use crate::core::tensor::Tensor;
use crate::engine;
use ferrocm_host::DeviceBuffer;
use ferrocm_kernels::elem::Elem;
use rayon::prelude::*;

/// Broadcasts a per-dim parameter list to `n` dims.
pub(crate) fn per_dim<V: Copy + std::fmt::Debug>(
    op: &'static str,
    name: &str,
    v: &[V],
    n: usize,
) -> Result<Vec<V>> {
    match v.len() {
        1 => Ok(vec![v[0]; n]),
        l if l == n => Ok(v.to_vec()),
        _ => Err(Error::BadParameter {
            op,
            what: format!("{name} {v:?} must have 1 or {n} entries (one per spatial dim)"),
        }),
    }
}

/// A contiguous tensor's elements on the Cpu.
pub(crate) fn elems<T: WithDType>(t: &Tensor<T>) -> &[T] {
    let off = t.layout().offset();
    &engine::cpu::host(t.buf())[off..off + t.elem_count()]
}

pub(crate) fn widen<T: WithDType>(v: T) -> f32 {
    v.to_kernel().to_f32()
}

pub(crate) fn narrow<T: WithDType>(v: f32) -> T {
    T::from_kernel(T::Kernel::from_f32(v))
}

/// Whether a `(N, C, spatial..)` input is channels-last memory (an NCHW
/// view of NHWC): its outputs then come back in the same form.
pub(crate) fn is_channels_last<T: WithDType>(x: &Tensor<T>) -> bool {
    x.shape()[1] > 1 && x.layout().strides()[1] == 1 && !x.is_contiguous()
}

/// The element strides `(n, c, spatial..)` of an output of `shape`
/// (`(N, C, spatial..)`): contiguous, or NHWC memory when `channels_last`.
pub(crate) fn out_strides(shape: &[usize], channels_last: bool) -> Vec<usize> {
    let r = shape.len();
    let mut st = vec![0; r];
    if channels_last {
        let mut acc = shape[1];
        st[1] = 1;
        for d in (2..r).rev() {
            st[d] = acc;
            acc *= shape[d];
        }
        st[0] = acc;
    } else {
        let mut acc = 1;
        for d in (0..r).rev() {
            st[d] = acc;
            acc *= shape[d];
        }
    }
    st
}

/// The tensor over `buf` holding an output of `shape` (`(N, C,
/// spatial..)`) laid out as [`out_strides`] says.
pub(crate) fn spatial_output<T: WithDType>(
    buf: DeviceBuffer<T>,
    shape: &[usize],
    channels_last: bool,
) -> Result<Tensor<T>> {
    if !channels_last {
        return Ok(Tensor::from_parts(buf, shape));
    }
    let r = shape.len();
    let mut nhwc = vec![shape[0]];
    nhwc.extend_from_slice(&shape[2..]);
    nhwc.push(shape[1]);
    let mut perm = vec![0, r - 1];
    perm.extend(1..r - 1);
    Tensor::from_parts(buf, &nhwc).permute(&perm)
}

/// Stores the Cpu's rows `(n, c)` of `positions` each (NC-major) into an
/// output buffer laid out as [`out_strides`] says.
pub(crate) fn store_rows<T: WithDType>(
    out: &mut [T],
    rows: &[T],
    channels: usize,
    positions: usize,
    channels_last: bool,
) {
    if !channels_last {
        out.copy_from_slice(rows);
        return;
    }
    let image = channels * positions;
    if image == 0 {
        return;
    }
    // Image by image, [C, positions] -> [positions, C].
    out.par_chunks_mut(image)
        .zip(rows.par_chunks(image))
        .for_each(|(o, s)| {
            for (q, orow) in o.chunks_mut(channels).enumerate() {
                for (c, v) in orow.iter_mut().enumerate() {
                    *v = s[c * positions + q];
                }
            }
        });
}

impl<T: WithDType> Tensor<T> {
    /// `(C, spatial..)` viewed as `(1, C, spatial..)`.
    pub(crate) fn reshape_view_batched(&self) -> Result<Self> {
        let mut shape = vec![1];
        shape.extend_from_slice(self.shape());
        let mut strides = vec![self.elem_count().max(1)];
        strides.extend_from_slice(self.layout().strides());
        let layout = crate::Layout::new(shape, strides, self.layout().offset())?;
        Tensor::from_storage(self.shared_storage().clone(), layout)
    }

    /// `(1, C, spatial..)` viewed as `(C, spatial..)`.
    pub(crate) fn squeeze_batch(&self) -> Result<Self> {
        let layout = crate::Layout::new(
            self.shape()[1..].to_vec(),
            self.layout().strides()[1..].to_vec(),
            self.layout().offset(),
        )?;
        Tensor::from_storage(self.shared_storage().clone(), layout)
    }
}

/// Workgroups along y for a kernel of `blocks` position blocks (x) that
/// loops over `rows` images x channels (y): about eight rows per workitem,
/// which reads the geometry and its window table once for all of them, yet
/// at least 1024 workgroups in all where the rows allow (a wave of them on
/// a large GPU), and within the grid's y limit.
pub(crate) fn row_groups(rows: usize, blocks: usize) -> u32 {
    row_groups_by(rows, blocks, 1)
}

/// [`row_groups`] for a kernel that takes its rows `at_once` at a time
/// (the pools: `POOL_ROWS_AT_ONCE`): no fewer than that many rows a workitem
/// where there are enough, so that a workitem's group is not mostly rows
/// past the last.
pub(crate) fn row_groups_by(rows: usize, blocks: usize, at_once: usize) -> u32 {
    let wanted = rows.div_ceil(8).max(1024usize.div_ceil(blocks.max(1)));
    wanted
        .min(rows.div_ceil(at_once.max(1)))
        .min(ferrocm_host::launch::MAX_GRID_YZ as usize) as u32
}
