//! Helpers of the kernel path (every device that runs kernels).

use crate::error::Result;
use crate::layout::Layout;
use ferrocm_host::{Device, DeviceBuffer, In};

/// How elementwise and row kernels read strided inputs: `ndim == 0` is the
/// contiguous fast path (null layout); otherwise `layout` holds the dims,
/// then each input's strides. The layout reaches the device without a
/// blocking copy ([`Device::upload_async`]: stream-ordered, from the
/// device's cache), so a strided op never stalls the GPU.
pub(crate) struct Strided {
    ndim: u32,
    layout: Option<DeviceBuffer<u64>>,
}

impl Strided {
    /// The layout argument of inputs `layouts` (all of logical shape `shape`):
    /// the fast path when every one is contiguous.
    pub(crate) fn new(device: &Device, shape: &[usize], layouts: &[&Layout]) -> Result<Self> {
        if layouts.iter().all(|l| l.is_contiguous()) {
            return Ok(Self {
                ndim: 0,
                layout: None,
            });
        }
        let mut v: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
        for l in layouts {
            v.extend(l.strides().iter().map(|&s| s as u64));
        }
        Ok(Self {
            ndim: shape.len() as u32,
            layout: Some(device.upload_async(&v)?),
        })
    }

    /// The `ndim` kernel argument.
    pub(crate) fn ndim(&self) -> u32 {
        self.ndim
    }

    /// The `layout` kernel argument.
    pub(crate) fn arg(&self) -> In<'_, u64> {
        In::opt(self.layout.as_ref())
    }
}
