//! where_cond: API, Cpu implementation, GPU dispatch.

use crate::binary::nary_layout;
use crate::dtype::WithDType;
use crate::error::Result;
use crate::layout::broadcast_shape;
use crate::tensor::{BLOCK, Tensor};
use ferrocm_host::{Arg, LaunchConfig};
use ferrocm_kernels::elem::Elem;

/// A type that can be a mask: u8, u32 or i64 (non-zero selects `on_true`).
pub trait MaskType: WithDType {}
impl MaskType for u8 {}
impl MaskType for u32 {}
impl MaskType for i64 {}

impl<M: MaskType> Tensor<M> {
    /// `mask != 0 ? on_true : on_false` elementwise, all three broadcast to one shape.
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let dev = Device::emulator(64);
    /// let m = Tensor::from_slice(&[1u8, 0, 1], &[3], &dev)?;
    /// let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3], &dev)?;
    /// let b = Tensor::from_slice(&[-1.0f32], &[1], &dev)?;
    /// assert_eq!(m.where_cond(&a, &b)?.to_vec()?, vec![1.0, -1.0, 3.0]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    pub fn where_cond<T: WithDType>(
        &self,
        on_true: &Tensor<T>,
        on_false: &Tensor<T>,
    ) -> Result<Tensor<T>> {
        self.same_device("where_cond", on_true)?;
        self.same_device("where_cond", on_false)?;
        let shape = broadcast_shape("where_cond", self.shape(), on_true.shape())?;
        let shape = broadcast_shape("where_cond", &shape, on_false.shape())?;
        let (m, t, f) = (
            self.broadcast_as(&shape)?,
            on_true.broadcast_as(&shape)?,
            on_false.broadcast_as(&shape)?,
        );
        let n = shape.iter().product::<usize>();
        let dev = self.device().clone();
        let mut out = dev.alloc::<T>(n)?;
        if dev.runs_kernels() {
            if n > 0 {
                let (ndim, lb) = nary_layout(&dev, &shape, &[&m.layout, &t.layout, &f.layout])?;
                dev.launch(
                    &format!("where_{}_{}", M::DTYPE, T::DTYPE),
                    LaunchConfig::linear(n as u64, BLOCK),
                    &[
                        Arg::output(&out),
                        Arg::input_at(&m.storage, m.layout.offset()),
                        Arg::input_at(&t.storage, t.layout.offset()),
                        Arg::input_at(&f.storage, f.layout.offset()),
                        Arg::U64(n as u64),
                        Arg::U32(ndim),
                        lb.as_ref().map(Arg::input).unwrap_or(Arg::Null),
                    ],
                )?;
            }
        } else {
            let (sm, st, sf) = (
                crate::cpu::host(&m.storage),
                crate::cpu::host(&t.storage),
                crate::cpu::host(&f.storage),
            );
            crate::cpu::map_strided_n(
                out.as_mut_slice().unwrap_or_default(),
                [&m.layout, &t.layout, &f.layout],
                |[i, j, k]| {
                    if sm[i].to_kernel().eq(M::Kernel::ZERO) {
                        sf[k]
                    } else {
                        st[j]
                    }
                },
            );
        }
        Ok(Tensor::from_parts(out, &shape))
    }
}
