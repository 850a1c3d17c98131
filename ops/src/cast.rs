//! Casts between the six dtypes: API, Cpu implementation, GPU dispatch.

use crate::dtype::WithDType;
use crate::error::Result;
use crate::tensor::Tensor;
use ferrocm_kernels::elem::Elem;

impl<T: WithDType> Tensor<T> {
    /// Converts to dtype `D` with Rust's `as` semantics (float to int
    /// saturates, NaN to 0; int to int wraps; to f16/bf16 rounds to nearest even).
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let x = Tensor::from_slice(&[1.7f32, -3.2, 300.0], &[3], &Device::emulator(32))?;
    /// assert_eq!(x.to_dtype::<u8>()?.to_vec()?, vec![1, 0, 255]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    pub fn to_dtype<D: WithDType>(&self) -> Result<Tensor<D>> {
        let n = self.elem_count();
        let dev = self.device().clone();
        let mut out = dev.alloc::<D>(n)?;
        if dev.runs_kernels() {
            // The identity cast is a copy (same signature).
            let kernel = if T::DTYPE == D::DTYPE {
                format!("copy_{}", T::DTYPE)
            } else {
                format!("cast_{}_{}", T::DTYPE, D::DTYPE)
            };
            crate::gpu::launch_map(self, &kernel, &out, &[])?;
        } else {
            let src = crate::cpu::host(&self.storage);
            crate::cpu::map_strided(out.as_mut_slice().unwrap_or_default(), &self.layout, |o| {
                D::from_kernel(src[o].to_kernel().convert::<D::Kernel>())
            });
        }
        Ok(Tensor::from_parts(out, self.shape()))
    }
}
