//! Helpers of the GPU dispatch paths (Emulator and ROCm).

use crate::error::Result;
use crate::layout::Layout;
use ferrocm_host::{Device, DeviceBuffer};

/// Uploads dims followed by the strides of each layout (all with the same
/// shape): what strided kernels read through their `layout` argument.
pub(crate) fn layouts_buffer(
    device: &Device,
    shape: &[usize],
    layouts: &[&Layout],
) -> Result<DeviceBuffer<u64>> {
    let mut v: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
    for l in layouts {
        v.extend(l.strides().iter().map(|&s| s as u64));
    }
    Ok(device.upload(&v)?)
}

/// Dims and strides of one layout.
pub(crate) fn layout_buffer(device: &Device, layout: &Layout) -> Result<DeviceBuffer<u64>> {
    layouts_buffer(device, layout.shape(), &[layout])
}
