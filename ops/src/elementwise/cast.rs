//! Casts between the six dtypes: API, Cpu implementation, kernel path.

use crate::core::dtype::WithDType;
use crate::core::error::Result;
use crate::core::tensor::Tensor;
use crate::engine::kernels::map1;
use crate::engine::{self, Op};
use ferrocm_host::{Device, DeviceBuffer};
use ferrocm_kernels::cast::CastSource;
use ferrocm_kernels::elem::Elem;

impl<T: WithDType> Tensor<T> {
    /// Converts to dtype `D` with Rust's `as` semantics (float to int
    /// saturates, NaN to 0; int to int wraps; to f16/bf16 rounds to nearest even).
    ///
    /// ```
    /// # use ferrocm_ops::WaveSize;
    /// use ferrocm_ops::{Device, Tensor};
    /// let x = Tensor::from_slice(&[1.7f32, -3.2, 300.0], &[3], &Device::emulator(WaveSize::Wave32))?;
    /// assert_eq!(x.to_dtype::<u8>()?.to_vec()?, vec![1, 0, 255]);
    /// assert_eq!(x.to_dtype::<i64>()?.to_vec()?, vec![1, -3, 300]); // truncates toward zero
    /// let big = Tensor::from_slice(&[300u32, 7], &[2], &Device::Cpu)?;
    /// assert_eq!(big.to_dtype::<u8>()?.to_vec()?, vec![44, 7]); // int to int wraps
    /// assert_eq!(big.to_dtype::<f32>()?.to_vec()?, vec![300.0, 7.0]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Host`](crate::Error::Host) when allocation or the launch fails
    /// (every pair of dtypes converts).
    pub fn to_dtype<D: WithDType>(&self) -> Result<Tensor<D>> {
        let dev = self.device();
        let op = Cast {
            x: self,
            out: dev.alloc::<D>(self.elem_count())?,
        };
        Ok(Tensor::from_parts(engine::run(dev, op)?, self.shape()))
    }
}

struct Cast<'a, T: WithDType, D: WithDType> {
    x: &'a Tensor<T>,
    out: DeviceBuffer<D>,
}

impl<T: WithDType, D: WithDType> Op for Cast<'_, T, D> {
    type Output = DeviceBuffer<D>;

    fn cpu(mut self) -> Result<DeviceBuffer<D>> {
        let src = crate::engine::cpu::host(self.x.buf());
        let f = CastFn::<T, D>(std::marker::PhantomData);
        crate::engine::cpu::map1(
            crate::engine::cpu::host_mut(&mut self.out),
            src,
            &self.x.layout,
            &f,
        );
        Ok(self.out)
    }

    fn kernels(self, dev: &Device) -> Result<DeviceBuffer<D>> {
        // T == D picks the copy kernel (same signature).
        map1(dev, self.x, &self.out, |cfg, args| {
            dev.launch_typed(T::Kernel::kernel::<D::Kernel>(), cfg, args)
        })?;
        Ok(self.out)
    }
}

/// The Cpu's per-element conversion (Rust's `as`, round to nearest even for f16/bf16).
struct CastFn<T, D>(std::marker::PhantomData<fn() -> (T, D)>);

impl<T: WithDType, D: WithDType> crate::engine::cpu::Func1<T, D> for CastFn<T, D> {
    #[inline(always)]
    fn call(&self, x: T) -> D {
        D::from_kernel(x.to_kernel().convert::<D::Kernel>())
    }
}
