//! Helpers of the GPU dispatch paths (Emulator and ROCm).

use crate::dtype::WithDType;
use crate::error::Result;
use crate::layout::Layout;
use crate::tensor::{BLOCK, Tensor};
use ferrocm_host::{Arg, Device, DeviceBuffer, LaunchConfig};
use ferrocm_kernels::reduce::REDUCE_LDS_BYTES;

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

/// Launches a one-input elementwise kernel with the signature
/// `(out, inp, n, ndim, layout, extra...)` over the elements of `input`:
/// the contiguous fast path (ndim 0, null layout) when `input` is dense.
pub(crate) fn launch_map<T: WithDType, R: WithDType>(
    input: &Tensor<T>,
    kernel: &str,
    out: &DeviceBuffer<R>,
    extra: &[Arg],
) -> Result<()> {
    let n = input.elem_count();
    if n == 0 {
        return Ok(());
    }
    let dev = input.device();
    let lb = strided_layout(input)?;
    let mut args = vec![
        Arg::output(out),
        Arg::input_at(&input.storage, input.layout.offset()),
        Arg::U64(n as u64),
        Arg::U32(if lb.is_some() { input.rank() as u32 } else { 0 }),
        lb.as_ref().map(Arg::input).unwrap_or(Arg::Null),
    ];
    args.extend_from_slice(extra);
    Ok(dev.launch(kernel, LaunchConfig::linear(n as u64, BLOCK), &args)?)
}

/// Launches a row kernel `(out, inp, rows, cols, ndim, layout)` with one
/// workgroup per row over `view` (logically `rows × cols`).
pub(crate) fn launch_rows<T: WithDType, R: WithDType>(
    view: &Tensor<T>,
    kernel: &str,
    out: &DeviceBuffer<R>,
    rows: usize,
    cols: usize,
) -> Result<()> {
    if rows == 0 {
        return Ok(());
    }
    let lb = strided_layout(view)?;
    let args = [
        Arg::output(out),
        Arg::input_at(&view.storage, view.layout.offset()),
        Arg::U64(rows as u64),
        Arg::U64(cols as u64),
        Arg::U32(if lb.is_some() { view.rank() as u32 } else { 0 }),
        lb.as_ref().map(Arg::input).unwrap_or(Arg::Null),
    ];
    let cfg = LaunchConfig::rows(rows as u64, BLOCK, REDUCE_LDS_BYTES);
    Ok(view.device().launch(kernel, cfg, &args)?)
}

/// The layout buffer of a non-contiguous tensor, None for a dense one.
fn strided_layout<T: WithDType>(t: &Tensor<T>) -> Result<Option<DeviceBuffer<u64>>> {
    if t.is_contiguous() {
        Ok(None)
    } else {
        Ok(Some(layout_buffer(t.device(), &t.layout)?))
    }
}
