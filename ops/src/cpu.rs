//! Helpers of the Cpu backend: strided iteration, parallel over rayon.

use crate::layout::Layout;
use ferrocm_host::DeviceBuffer;
use rayon::prelude::*;

/// Elements per rayon task.
const CHUNK: usize = 1 << 14;

/// The host slice of a buffer on the Cpu device.
pub(crate) fn host<T: bytemuck::Pod>(b: &DeviceBuffer<T>) -> &[T] {
    b.as_slice().unwrap_or_default()
}

/// The mutable host slice of a buffer on the Cpu device.
pub(crate) fn host_mut<T: bytemuck::Pod>(b: &mut DeviceBuffer<T>) -> &mut [T] {
    b.as_mut_slice().unwrap_or_default()
}

/// Storage offsets of a layout in logical order, from element `start`.
pub(crate) struct Offsets<'a> {
    layout: &'a Layout,
    index: Vec<usize>,
    offset: usize,
}

impl<'a> Offsets<'a> {
    pub(crate) fn new(layout: &'a Layout, start: usize) -> Self {
        let mut index = vec![0; layout.rank()];
        let mut rem = start;
        for d in (0..layout.rank()).rev() {
            let dim = layout.shape()[d].max(1);
            index[d] = rem % dim;
            rem /= dim;
        }
        Self {
            layout,
            index,
            offset: layout.offset_of(start),
        }
    }
}

impl Iterator for Offsets<'_> {
    type Item = usize;
    #[inline]
    fn next(&mut self) -> Option<usize> {
        let cur = self.offset;
        let (shape, strides) = (self.layout.shape(), self.layout.strides());
        for d in (0..self.index.len()).rev() {
            self.index[d] += 1;
            if self.index[d] < shape[d] {
                self.offset += strides[d];
                return Some(cur);
            }
            self.offset -= (shape[d] - 1) * strides[d];
            self.index[d] = 0;
        }
        Some(cur)
    }
}

/// `dst[i] = f(offset of element i in layout)`, in parallel, with a
/// contiguous fast path the compiler vectorises.
pub(crate) fn map_strided<T: Send, F: Fn(usize) -> T + Sync>(dst: &mut [T], layout: &Layout, f: F) {
    if layout.is_contiguous() {
        let base = layout.offset();
        dst.par_chunks_mut(CHUNK)
            .enumerate()
            .for_each(|(c, chunk)| {
                let start = base + c * CHUNK;
                for (k, d) in chunk.iter_mut().enumerate() {
                    *d = f(start + k);
                }
            });
    } else {
        dst.par_chunks_mut(CHUNK)
            .enumerate()
            .for_each(|(c, chunk)| {
                for (d, o) in chunk.iter_mut().zip(Offsets::new(layout, c * CHUNK)) {
                    *d = f(o);
                }
            });
    }
}

/// `dst[i] = f(offsets of element i in each of the layouts)`, for n-ary ops.
pub(crate) fn map_strided_n<T: Send, const N: usize, F: Fn([usize; N]) -> T + Sync>(
    dst: &mut [T],
    layouts: [&Layout; N],
    f: F,
) {
    if layouts.iter().all(|l| l.is_contiguous()) {
        let bases = layouts.map(|l| l.offset());
        dst.par_chunks_mut(CHUNK)
            .enumerate()
            .for_each(|(c, chunk)| {
                for (k, d) in chunk.iter_mut().enumerate() {
                    *d = f(bases.map(|b| b + c * CHUNK + k));
                }
            });
    } else {
        dst.par_chunks_mut(CHUNK)
            .enumerate()
            .for_each(|(c, chunk)| {
                let mut its = layouts.map(|l| Offsets::new(l, c * CHUNK));
                for d in chunk.iter_mut() {
                    *d = f(std::array::from_fn(|k| its[k].next().unwrap_or(0)));
                }
            });
    }
}
