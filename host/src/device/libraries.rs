//! The vendor libraries behind one checked entry each: the BLAS GEMM
//! ([`Device::blas_gemm`]) and the DNN library's handle ([`Device::dnn`]).

use super::Device;
use super::buffer::DeviceBuffer;
use crate::blas::{Gemm, GemmOperand};
use crate::dnn::Dnn;
use crate::error::{Error, Result};

impl Device {
    /// Runs `g` with the device's vendor BLAS (rocBLAS, cuBLAS) on its
    /// stream: `Ok(false)` without running anything when the device has no
    /// such library (the Cpu, the emulator, a GPU whose library did not
    /// load); the caller then uses its own kernel.
    ///
    /// ```
    /// use ferrocm_host::{Device, WaveSize};
    /// use ferrocm_host::blas::{Gemm, GemmOperand, GemmType};
    /// let dev = Device::emulator(WaveSize::Wave32);
    /// let a = dev.upload(&[1.0f32; 4]).unwrap();
    /// let op = GemmOperand { offset: 0, ld: 2, stride: 0 };
    /// let g = Gemm { dtype: GemmType::F32, c_type: GemmType::F32, trans_a: false, trans_b: false,
    ///     m: 2, n: 2, k: 2, batch: 1, a: op, b: op, c: op };
    /// assert!(!dev.blas_gemm(&g, &a, &a, &a).unwrap()); // no BLAS here
    /// ```
    ///
    /// # Errors
    /// [`Error::BadBlasCall`] when an operand reaches past its buffer, a
    /// leading dimension is below the stored rows, a dim is past `i32`, or
    /// the buffers are on another device; the library's status otherwise.
    pub fn blas_gemm<T: bytemuck::Pod, U: bytemuck::Pod>(
        &self,
        g: &Gemm,
        a: &DeviceBuffer<T>,
        b: &DeviceBuffer<T>,
        c: &DeviceBuffer<U>,
    ) -> Result<bool> {
        let bad = |why: String| Error::BadBlasCall {
            device: self.to_string(),
            why,
        };
        if [a.device(), b.device(), c.device()]
            .iter()
            .any(|d| !d.same_device(self))
        {
            return Err(bad("a buffer of another device".into()));
        }
        g.validate([a.len(), b.len(), c.len()], size_of::<T>(), size_of::<U>())
            .map_err(bad)?;
        if g.m == 0 || g.n == 0 || g.batch == 0 {
            return Ok(true);
        }
        let ptr = |base: u64, op: &GemmOperand, size: usize| base + (op.offset * size) as u64;
        let ptrs = [
            ptr(a.device_ptr(), &g.a, size_of::<T>()),
            ptr(b.device_ptr(), &g.b, size_of::<T>()),
            ptr(c.device_ptr(), &g.c, size_of::<U>()),
        ];
        let Some(blas) = self.gpu().and_then(|gpu| gpu.blas()) else {
            return Ok(false);
        };
        let _turn = self.turn();
        // SAFETY: `validate` proved every element the call touches inside
        // the three buffers, which are this device's and borrowed for it.
        unsafe { blas.gemm(g, ptrs) }.map(|()| true)
    }
}

impl Device {
    /// The device's DNN library (MIOpen on ROCm), bound to its stream, when
    /// it loads; `None` on the Cpu, the emulator and a GPU without one.
    ///
    /// ```
    /// assert!(ferrocm_host::Device::Cpu.dnn().is_none());
    /// ```
    pub fn dnn(&self) -> Option<&dyn Dnn> {
        self.gpu().and_then(|gpu| gpu.dnn())
    }
}
