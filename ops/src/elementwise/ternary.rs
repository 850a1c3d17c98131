//! where_cond: API, Cpu implementation, kernel path.

use crate::core::dtype::WithDType;
use crate::core::error::Result;
use crate::core::layout::broadcast_shape;
use crate::core::tensor::{BLOCK, Tensor};
use crate::engine::kernels::Strided;
use crate::engine::{self, Op};
use ferrocm_host::{Device, DeviceBuffer, LaunchConfig, Out};
use ferrocm_kernels::elem::Elem;
use ferrocm_kernels::ternary::WhereMask;

/// A type that can be a mask: u8, u32 or i64 (non-zero selects `on_true`).
pub trait MaskType: WithDType<Kernel: WhereMask> {}
impl MaskType for u8 {}
impl MaskType for u32 {}
impl MaskType for i64 {}

impl<M: MaskType> Tensor<M> {
    /// `mask != 0 ? on_true : on_false` elementwise, all three broadcast to one shape.
    ///
    /// ```
    /// # use ferrocm_ops::WaveSize;
    /// use ferrocm_ops::{Device, Tensor};
    /// let dev = Device::emulator(WaveSize::Wave64);
    /// let m = Tensor::from_slice(&[1u8, 0, 1], &[3], &dev)?;
    /// let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3], &dev)?;
    /// let b = Tensor::from_slice(&[-1.0f32], &[1], &dev)?;
    /// assert_eq!(m.where_cond(&a, &b)?.to_vec()?, vec![1.0, -1.0, 3.0]);
    /// // A [2, 1] i64 mask against [3] values: the result is [2, 3].
    /// let rows = Tensor::from_slice(&[0i64, 7], &[2, 1], &Device::Cpu)?;
    /// let on = Tensor::from_slice(&[1u32, 2, 3], &[3], &Device::Cpu)?;
    /// let off = Tensor::from_slice(&[0u32], &[1], &Device::Cpu)?;
    /// let r = rows.where_cond(&on, &off)?;
    /// assert_eq!(r.shape(), &[2, 3]);
    /// assert_eq!(r.to_vec()?, vec![0, 0, 0, 1, 2, 3]);
    /// assert!(m.where_cond(&on.to_device(&dev)?, &Tensor::zeros(&[2], &dev)?).is_err()); // [3] and [2]
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::DeviceMismatch`](crate::Error::DeviceMismatch) when the three
    /// are not on one device;
    /// [`Error::BroadcastIncompatible`](crate::Error::BroadcastIncompatible)
    /// when their shapes do not broadcast; [`Error::TooLarge`](crate::Error::TooLarge)
    /// when the broadcast element count overflows;
    /// [`Error::Host`](crate::Error::Host) when allocation or the launch fails.
    pub fn where_cond<T: WithDType>(
        &self,
        on_true: &Tensor<T>,
        on_false: &Tensor<T>,
    ) -> Result<Tensor<T>> {
        self.same_device("where_cond", on_true)?;
        self.same_device("where_cond", on_false)?;
        let shape = broadcast_shape("where_cond", self.shape(), on_true.shape())?;
        let shape = broadcast_shape("where_cond", &shape, on_false.shape())?;
        let op = Where {
            mask: &self.broadcast_as(&shape)?,
            on_true: &on_true.broadcast_as(&shape)?,
            on_false: &on_false.broadcast_as(&shape)?,
            out: self.device().alloc::<T>(shape.iter().product())?,
        };
        Ok(Tensor::from_parts(engine::run(self.device(), op)?, &shape))
    }
}

struct Where<'a, M: MaskType, T: WithDType> {
    mask: &'a Tensor<M>,
    on_true: &'a Tensor<T>,
    on_false: &'a Tensor<T>,
    out: DeviceBuffer<T>,
}

impl<M: MaskType, T: WithDType> Op for Where<'_, M, T> {
    type Output = DeviceBuffer<T>;

    fn cpu(mut self) -> Result<DeviceBuffer<T>> {
        let (sm, st, sf) = (
            crate::engine::cpu::host(self.mask.buf()),
            crate::engine::cpu::host(self.on_true.buf()),
            crate::engine::cpu::host(self.on_false.buf()),
        );
        crate::engine::cpu::map3(
            crate::engine::cpu::host_mut(&mut self.out),
            (sm, &self.mask.layout),
            (st, &self.on_true.layout),
            (sf, &self.on_false.layout),
            &Select,
        );
        Ok(self.out)
    }

    fn kernels(self, dev: &Device) -> Result<DeviceBuffer<T>> {
        let n = self.out.len() as u64;
        if n > 0 {
            let s = Strided::new(
                dev,
                self.mask.shape(),
                [
                    &self.mask.layout,
                    &self.on_true.layout,
                    &self.on_false.layout,
                ],
            )?;
            let [d0, d1] = s.dims();
            let ([m0, m1], [t0, t1], [f0, f1]) = (s.strides(0), s.strides(1), s.strides(2));
            let out = self.out.view_as::<T::Kernel>().expect("same size");
            dev.launch_typed(
                M::Kernel::kernel::<T::Kernel>(),
                LaunchConfig::chunked(n, BLOCK),
                (
                    Out::new(out),
                    self.mask.input(),
                    self.on_true.input(),
                    self.on_false.input(),
                    n,
                    s.ndim(),
                    s.arg(),
                    d0,
                    d1,
                    m0,
                    m1,
                    t0,
                    t1,
                    f0,
                    f1,
                ),
            )?;
        }
        Ok(self.out)
    }
}

/// `where` per element: `t` where the mask is nonzero, else `f`.
struct Select;

impl<M: WithDType, T: Copy> crate::engine::cpu::Func3<M, T, T, T> for Select {
    #[inline(always)]
    fn call(&self, m: M, t: T, f: T) -> T {
        if m.to_kernel().eq(M::Kernel::ZERO) {
            f
        } else {
            t
        }
    }
}
