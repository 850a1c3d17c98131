//! Helpers of the kernel path (every device that runs kernels), public for
//! ops written outside ferrocm: [`Strided`] turns the layouts of an op's
//! inputs into the device layer's `Strides` arguments (the contiguous fast
//! path, by value up to rank 4, else in memory, never a wait), and [`map1`]
//! launches a one-input map with them.

use crate::core::dtype::WithDType;
use crate::core::error::Result;
use crate::core::layout::Layout;
use crate::core::tensor::{BLOCK, Tensor};
use ferrocm_host::{Device, DeviceBuffer, In, LaunchConfig, Out};
use ferrocm_kernels::device::INLINE_RANK;
use std::sync::Arc;

/// The arguments every one-input map kernel (unary, affine, cast, copy)
/// starts with: `(out, inp, n, ndim, layout, dims 2 words, strides 2 words)`.
pub type MapArgs<'a, T, R> = (
    Out<'a, R>,
    In<'a, T>,
    u64,
    u32,
    In<'a, u64>,
    u64,
    u64,
    u64,
    u64,
);

/// The kernel path of a one-input map of `x` into `out`: nothing for an
/// empty tensor, else `launch(config, args)` with the leading arguments (the
/// layout on the fast path, by value or in memory), which the op completes
/// with its own parameters and passes to its typed kernel.
pub fn map1<T: WithDType, R: WithDType>(
    dev: &Device,
    x: &Tensor<T>,
    out: &DeviceBuffer<R>,
    launch: impl FnOnce(LaunchConfig, MapArgs<'_, T::Kernel, R::Kernel>) -> ferrocm_host::Result<()>,
) -> Result<()> {
    let n = out.len() as u64;
    if n == 0 {
        return Ok(());
    }
    let s = Strided::new(dev, x.shape(), [&x.layout])?;
    let ([d0, d1], [a0, a1]) = (s.dims(), s.strides(0));
    let out = out.view_as::<R::Kernel>().expect("same size");
    let args = (
        Out::new(out),
        x.input(),
        n,
        s.ndim(),
        s.arg(),
        d0,
        d1,
        a0,
        a1,
    );
    Ok(launch(
        LaunchConfig::chunked_for(n, size_of::<T>().max(size_of::<R>()), BLOCK),
        args,
    )?)
}

/// How elementwise and row kernels read `N` strided inputs (see the device
/// layer's `Strides`): `ndim == 0` is the contiguous fast path; a layout of
/// at most [`INLINE_RANK`] dims whose dims, strides and element count fit in
/// 32 bits travels by value in the kernel arguments; any other goes through
/// [`Device::upload_words`] (stream-ordered; on a GPU once per device and
/// layout). A strided op never waits for the device.
pub struct Strided<const N: usize> {
    ndim: u32,
    layout: Option<Arc<DeviceBuffer<u64>>>,
    dims: [u64; 2],
    strides: [[u64; 2]; N],
}

/// Two u32 halves of each of two words, from four values (outermost first).
fn pack(v: [u64; 4]) -> [u64; 2] {
    [v[0] | v[1] << 32, v[2] | v[3] << 32]
}

impl<const N: usize> Strided<N> {
    /// The layout arguments of inputs `layouts`, all of logical shape `shape`.
    pub fn new(device: &Device, shape: &[usize], layouts: [&Layout; N]) -> Result<Self> {
        Self::build(device, shape, layouts, true)
    }

    /// The same, never by value: for kernels that read the layout only
    /// from memory (the row reductions).
    pub fn in_memory(device: &Device, shape: &[usize], layouts: [&Layout; N]) -> Result<Self> {
        Self::build(device, shape, layouts, false)
    }

    fn build(
        device: &Device,
        shape: &[usize],
        layouts: [&Layout; N],
        allow_by_value: bool,
    ) -> Result<Self> {
        let mut s = Self {
            ndim: 0,
            layout: None,
            dims: [0; 2],
            strides: [[0; 2]; N],
        };
        if layouts.iter().all(|l| l.is_contiguous()) {
            return Ok(s);
        }
        s.ndim = shape.len() as u32;
        let fits = |v: usize| v <= u32::MAX as usize;
        let n = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        let by_value = allow_by_value
            && shape.len() <= INLINE_RANK as usize
            && n.is_some_and(fits)
            && shape.iter().all(|&d| fits(d))
            && layouts
                .iter()
                .all(|l| l.strides().iter().all(|&st| fits(st)));
        if by_value {
            // Left-pad to INLINE_RANK dims of size 1, stride 0.
            let pad = INLINE_RANK as usize - shape.len();
            let mut dims = [1u64; 4];
            for (k, &d) in shape.iter().enumerate() {
                dims[pad + k] = d as u64;
            }
            s.dims = pack(dims);
            for (j, l) in layouts.iter().enumerate() {
                let mut st = [0u64; 4];
                for (k, &v) in l.strides().iter().enumerate() {
                    st[pad + k] = v as u64;
                }
                s.strides[j] = pack(st);
            }
            return Ok(s);
        }
        let mut v: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
        for l in layouts {
            v.extend(l.strides().iter().map(|&st| st as u64));
        }
        s.layout = Some(device.upload_words(&v)?);
        Ok(s)
    }

    /// The `ndim` kernel argument.
    pub fn ndim(&self) -> u32 {
        self.ndim
    }

    /// The `layout` kernel argument (null unless the layout is in memory).
    pub fn arg(&self) -> In<'_, u64> {
        In::opt(self.layout.as_deref())
    }

    /// The packed dims (two words).
    pub fn dims(&self) -> [u64; 2] {
        self.dims
    }

    /// The packed strides of input `k` (two words).
    pub fn strides(&self, k: usize) -> [u64; 2] {
        self.strides[k]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrocm_host::WaveSize;

    #[test]
    fn small_layouts_travel_by_value_and_large_ones_in_memory() {
        let dev = Device::emulator(WaveSize::Wave32);
        let t = Layout::contiguous(&[3, 5]).transpose(0, 1).unwrap();
        let s = Strided::new(&dev, &[5, 3], [&t]).unwrap();
        assert_eq!((s.ndim(), s.layout.is_none()), (2, true));
        assert_eq!(s.dims(), [1 | 1 << 32, 5 | 3 << 32]);
        assert_eq!(s.strides(0), [0, 1 | 5 << 32]);
        let c = Strided::new(&dev, &[5, 3], [&Layout::contiguous(&[5, 3])]).unwrap();
        assert_eq!(c.ndim(), 0);
        let five = Layout::contiguous(&[2, 2, 2, 2, 2])
            .transpose(0, 4)
            .unwrap();
        let m = Strided::new(&dev, five.shape(), [&five]).unwrap();
        assert!(m.layout.is_some() && m.ndim() == 5);
        let wide = Layout::new(vec![2, 2], vec![1 << 33, 1], 0).unwrap();
        assert!(
            Strided::new(&dev, &[2, 2], [&wide])
                .unwrap()
                .layout
                .is_some()
        );
    }
}
