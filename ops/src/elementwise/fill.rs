//! Fill, copy and copy2d (fill and copy back `Tensor::full` and
//! `Tensor::contiguous`; copy2d is the strided 2-D block copy of candle).

use crate::core::dtype::WithDType;
use crate::core::error::{Error, Result};
use crate::core::tensor::{BLOCK, Tensor};
use crate::engine::{self, Op};
use ferrocm_host::{Device, DeviceBuffer, In, LaunchConfig, Out};
use ferrocm_kernels::elem::Elem;
use ferrocm_kernels::fill::FillKernels;

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
    /// assert_eq!(b.shape(), &[2, 3]);
    /// assert!(t.copy2d(3, 4, 4, 1).is_err()); // needs 13 elements, the source has 12
    /// assert!(t.copy2d(2, 5, 4, 0).is_err()); // rows of 5 overlap at a stride of 4
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::BadParameter`] when rows overlap (`cols > src_stride`, two or
    /// more rows), the sizes overflow or the block reaches past the source's
    /// end;
    /// [`Error::Host`] when allocation, the copy of a strided source or the
    /// launch fails.
    pub fn copy2d(
        &self,
        rows: usize,
        cols: usize,
        src_stride: usize,
        src_offset: usize,
    ) -> Result<Tensor<T>> {
        let src = self.contiguous()?;
        // Checked: a huge stride or offset is an error, not a wrapped index.
        let need = if rows == 0 || cols == 0 {
            Some(0)
        } else {
            (rows - 1)
                .checked_mul(src_stride)
                .and_then(|v| v.checked_add(src_offset))
                .and_then(|v| v.checked_add(cols))
        };
        let size = src.elem_count();
        let what = if rows > 1 && cols > src_stride {
            Some(format!(
                "rows of {cols} elements overlap at a stride of {src_stride}"
            ))
        } else if rows.checked_mul(cols).is_none() {
            Some(format!("{rows} x {cols} elements overflow"))
        } else {
            match need {
                None => Some(format!(
                    "{rows} rows at stride {src_stride} from offset {src_offset} overflow the index range"
                )),
                Some(n) if n > size => Some(format!(
                    "{rows} rows of {cols} at stride {src_stride} from offset {src_offset} need {n} elements, the source has {size}"
                )),
                Some(_) => None,
            }
        };
        if let Some(what) = what {
            return Err(Error::BadParameter { op: "copy2d", what });
        }
        let dev = src.device();
        let op = Copy2d {
            src: &src,
            rows,
            cols,
            src_stride,
            src_offset,
            out: dev.alloc::<T>(rows * cols)?,
        };
        Ok(Tensor::from_parts(engine::run(dev, op)?, &[rows, cols]))
    }
}

struct Copy2d<'a, T: WithDType> {
    src: &'a Tensor<T>,
    rows: usize,
    cols: usize,
    src_stride: usize,
    src_offset: usize,
    out: DeviceBuffer<T>,
}

impl<T: WithDType> Op for Copy2d<'_, T> {
    type Output = DeviceBuffer<T>;

    fn cpu(mut self) -> Result<DeviceBuffer<T>> {
        let (rows, cols, stride) = (self.rows, self.cols, self.src_stride);
        if rows * cols == 0 {
            return Ok(self.out);
        }
        let base = self.src.layout.offset() + self.src_offset;
        let s = crate::engine::cpu::host(self.src.buf());
        let d = crate::engine::cpu::host_mut(&mut self.out);
        for r in 0..rows {
            d[r * cols..(r + 1) * cols]
                .copy_from_slice(&s[base + r * stride..base + r * stride + cols]);
        }
        Ok(self.out)
    }

    fn kernels(self, dev: &Device) -> Result<DeviceBuffer<T>> {
        if self.rows * self.cols > 0 {
            let base = self.src.layout.offset() + self.src_offset;
            let out = self.out.view_as::<T::Kernel>().expect("same size");
            dev.launch_typed(
                T::Kernel::COPY2D,
                LaunchConfig::linear((self.rows * self.cols) as u64, BLOCK),
                (
                    Out::new(out),
                    // What it reads: rows - 1 strides and one row (checked in copy2d).
                    In::range(
                        self.src.kbuf(),
                        base,
                        (self.rows - 1) * self.src_stride + self.cols,
                    ),
                    self.rows as u64,
                    self.cols as u64,
                    self.src_stride as u64,
                    self.cols as u64,
                ),
            )?;
        }
        Ok(self.out)
    }
}
