//! Fill, copy and copy2d (fill and copy back `Tensor::full` and
//! `Tensor::contiguous`; copy2d is the strided 2-D block copy of candle).

use crate::dtype::WithDType;
use crate::error::{Error, Result};
use crate::tensor::{BLOCK, Tensor};
use ferrocm_host::{Arg, LaunchConfig};
use ferrocm_kernels::elem::Elem;

/// The bits of a value as the fill kernels take them.
pub(crate) fn bits64<T: WithDType>(v: T) -> u64 {
    v.to_kernel().to_bits64()
}

impl<T: WithDType> Tensor<T> {
    /// Copies a `rows × cols` block of this 2-D contiguous-rows tensor
    /// (row stride `src_stride` elements, starting at element `src_offset`)
    /// into a new contiguous `rows × cols` tensor (`copy2d_{dtype}` on GPUs).
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let t = Tensor::<f32>::arange(0, 12, &Device::Cpu)?;
    /// let b = t.copy2d(2, 3, 4, 1)?; // rows 0..2, cols 1..4 of a 3x4 matrix
    /// assert_eq!(b.to_vec()?, vec![1.0, 2.0, 3.0, 5.0, 6.0, 7.0]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    pub fn copy2d(
        &self,
        rows: usize,
        cols: usize,
        src_stride: usize,
        src_offset: usize,
    ) -> Result<Tensor<T>> {
        let src = self.contiguous()?;
        let need = if rows == 0 || cols == 0 {
            0
        } else {
            src_offset + (rows - 1) * src_stride + cols
        };
        if need > src.elem_count() || (rows > 1 && cols > src_stride) {
            return Err(Error::NarrowOutOfRange {
                op: "copy2d",
                dim: 0,
                start: src_offset,
                len: need.saturating_sub(src_offset),
                size: src.elem_count(),
            });
        }
        let dev = src.device().clone();
        let n = rows * cols;
        let mut out = dev.alloc::<T>(n)?;
        if n > 0 {
            let base = src.layout.offset() + src_offset;
            if dev.runs_kernels() {
                dev.launch(
                    &format!("copy2d_{}", T::DTYPE),
                    LaunchConfig::linear(n as u64, BLOCK),
                    &[
                        Arg::output(&out),
                        Arg::input_at(&src.storage, base),
                        Arg::U64(rows as u64),
                        Arg::U64(cols as u64),
                        Arg::U64(src_stride as u64),
                        Arg::U64(cols as u64),
                    ],
                )?;
            } else {
                let s = crate::cpu::host(&src.storage);
                let d = out.as_mut_slice().unwrap_or_default();
                for r in 0..rows {
                    d[r * cols..(r + 1) * cols]
                        .copy_from_slice(&s[base + r * src_stride..base + r * src_stride + cols]);
                }
            }
        }
        Ok(Tensor::from_parts(out, &[rows, cols]))
    }
}
