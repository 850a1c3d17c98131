//! The vendor libraries behind one checked entry each: the BLAS GEMM
//! ([`Device::blas_gemm`]), the DNN library's convolution
//! ([`Device::dnn_conv`]), pooling ([`Device::dnn_pool`]) and batch norm
//! ([`Device::dnn_batch_norm`]), and its handle ([`Device::dnn`]).

use super::Device;
use super::buffer::DeviceBuffer;
use crate::blas::{Gemm, GemmOperand};
use crate::dnn::{
    BatchNormAddresses, BatchNormProblem, ConvAddresses, ConvProblem, Dnn, DnnConv, DnnType,
    PoolProblem,
};
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
    /// Runs the convolution `p` (or its transposed convolution) with the device's DNN library (MIOpen,
    /// cuDNN) on its stream, reading the input from element `x_offset` of
    /// `x`, the filter from element `w_offset` of `w` and writing `y` from
    /// its start, and with `bias` (its buffer and first element; exactly when
    /// `p.bias`) offered to the library to add:
    /// [`DnnConv::Declined`] without running anything when the device has no such
    /// library, the library has no algorithm for `p`, or its workspace does
    /// not fit in the device's memory; the caller then uses its own kernels.
    /// [`DnnConv::Ran`] says whether the bias was added too.
    ///
    /// ```
    /// use ferrocm_host::{Device, WaveSize};
    /// use ferrocm_host::dnn::{ConvProblem, DnnConv, DnnType};
    /// let dev = Device::emulator(WaveSize::Wave32);
    /// let p = ConvProblem {
    ///     dtype: DnnType::F32, batch: 1, in_channels: 1, out_channels: 1, groups: 1,
    ///     input: vec![3], kernel: vec![2], output: vec![2], stride: vec![1],
    ///     padding: vec![0], dilation: vec![1], channels_last: false, transposed: false,
    ///     bias: false,
    /// };
    /// let x = dev.upload(&[1.0f32, 2.0, 3.0]).unwrap();
    /// let w = dev.upload(&[1.0f32, 1.0]).unwrap();
    /// let y = dev.alloc::<f32>(2).unwrap();
    /// // No DNN library here.
    /// assert_eq!(dev.dnn_conv(&p, &x, 0, &w, 0, &y, None).unwrap(), DnnConv::Declined);
    /// ```
    ///
    /// # Errors
    /// [`Error::BadDnnCall`] when `p` is not a valid problem, its element
    /// type is not `T`'s size, a tensor reaches past its buffer, or a
    /// buffer is on another device, or the bias is missing, unasked for,
    /// short or not 16-byte aligned; the library's status otherwise.
    #[allow(clippy::too_many_arguments)] // each tensor a buffer and an offset
    pub fn dnn_conv<T: bytemuck::Pod>(
        &self,
        p: &ConvProblem,
        x: &DeviceBuffer<T>,
        x_offset: usize,
        w: &DeviceBuffer<T>,
        w_offset: usize,
        y: &DeviceBuffer<T>,
        bias: Option<(&DeviceBuffer<T>, usize)>,
    ) -> Result<DnnConv> {
        let bad = |why: String| Error::BadDnnCall {
            device: self.to_string(),
            why,
        };
        if [x.device(), w.device(), y.device()]
            .iter()
            .any(|d| !d.same_device(self))
            || bias.is_some_and(|(b, _)| !b.device().same_device(self))
        {
            return Err(bad("a buffer of another device".into()));
        }
        match bias {
            Some((b, offset)) => {
                if !p.bias {
                    return Err(bad("a bias for a problem without one".into()));
                }
                if b.len().saturating_sub(offset) < p.out_channels || offset > b.len() {
                    return Err(bad(format!(
                        "a bias of {} elements from element {offset} for {} channels",
                        b.len(),
                        p.out_channels
                    )));
                }
                if !(offset * size_of::<T>()).is_multiple_of(16) {
                    return Err(bad(format!(
                        "a bias from element {offset}: not 16-byte aligned"
                    )));
                }
            }
            None if p.bias => return Err(bad("a problem with a bias but none given".into())),
            None => {}
        }
        p.validate().map_err(bad)?;
        if p.dtype.size() != size_of::<T>() {
            return Err(bad(format!(
                "{:?} elements in buffers of {}-byte elements",
                p.dtype,
                size_of::<T>()
            )));
        }
        let [nx, nw, ny] = p.extents();
        let lens = [
            x.len().saturating_sub(x_offset),
            w.len().saturating_sub(w_offset),
            y.len(),
        ];
        if lens
            .iter()
            .zip([nx, nw, ny])
            .any(|(&have, need)| have < need)
            || x_offset > x.len()
            || w_offset > w.len()
        {
            return Err(bad(format!(
                "input, filter and output need {:?} elements; the buffers hold {:?} (input from element {x_offset}, filter from {w_offset})",
                [nx, nw, ny],
                [x.len(), w.len(), y.len()]
            )));
        }
        let Some(dnn) = self.dnn() else {
            return Ok(DnnConv::Declined);
        };
        let Some(bytes) = dnn.conv_workspace(p)? else {
            return Ok(DnnConv::Declined);
        };
        // The workspace from the caching allocator; a GPU too full for it
        // runs our kernels instead (they need none).
        let workspace = match self.alloc::<u8>(bytes.max(1)) {
            Ok(ws) => ws,
            Err(Error::OutOfMemory { .. }) => return Ok(DnnConv::Declined),
            Err(e) => return Err(e),
        };
        let at = ConvAddresses {
            x: x.device_ptr() + (x_offset * size_of::<T>()) as u64,
            w: w.device_ptr() + (w_offset * size_of::<T>()) as u64,
            y: y.device_ptr(),
            workspace: workspace.device_ptr(),
            workspace_bytes: bytes,
            bias: bias.map(|(b, offset)| b.device_ptr() + (offset * size_of::<T>()) as u64),
        };
        let _turn = self.turn();
        // SAFETY: `validate` and the length checks proved the three tensors
        // inside their buffers (this device's, borrowed for the call) and
        // the workspace is as large as the library asked. The workspace
        // goes back to the cache when this returns, for work queued later.
        unsafe { dnn.conv(p, at) }.map(|bias_added| DnnConv::Ran { bias_added })
    }
}

impl Device {
    /// Runs the pooling `p` with the device's DNN library (MIOpen, cuDNN) on
    /// its stream, from `x` (its first element at `x_offset`) into `y`:
    /// `Ok(false)` without running anything when the device has no such
    /// library or the library declines `p`; the caller then uses its own
    /// kernels.
    ///
    /// ```
    /// use ferrocm_host::{Device, WaveSize};
    /// use ferrocm_host::dnn::{DnnType, PoolMode, PoolProblem};
    /// let dev = Device::emulator(WaveSize::Wave32);
    /// let p = PoolProblem {
    ///     dtype: DnnType::F32, mode: PoolMode::AvgIncludePad, batch: 1, channels: 1,
    ///     input: vec![4], window: vec![2], output: vec![2], stride: vec![2],
    ///     padding: vec![0], channels_last: false,
    /// };
    /// let x = dev.upload(&[1.0f32, 2.0, 3.0, 4.0]).unwrap();
    /// let y = dev.alloc::<f32>(2).unwrap();
    /// assert!(!dev.dnn_pool(&p, &x, 0, &y).unwrap()); // no DNN library here
    /// ```
    ///
    /// # Errors
    /// [`Error::BadDnnCall`] when `p` is not a valid problem, its element
    /// type is not `T`'s size, a tensor reaches past its buffer, or a
    /// buffer is on another device; the library's status otherwise.
    pub fn dnn_pool<T: bytemuck::Pod>(
        &self,
        p: &PoolProblem,
        x: &DeviceBuffer<T>,
        x_offset: usize,
        y: &DeviceBuffer<T>,
    ) -> Result<bool> {
        let bad = |why: String| Error::BadDnnCall {
            device: self.to_string(),
            why,
        };
        self.check_dnn_call::<T>([x.device(), y.device()], p.validate(), p.dtype)?;
        let [nx, ny] = p.extents();
        if x_offset > x.len() || x.len() - x_offset < nx || y.len() < ny {
            return Err(bad(format!(
                "input and output need {:?} elements; the buffers hold {:?} (input from element {x_offset})",
                [nx, ny],
                [x.len(), y.len()]
            )));
        }
        let Some(dnn) = self.dnn() else {
            return Ok(false);
        };
        let _turn = self.turn();
        // SAFETY: `validate` and the length checks proved both tensors
        // inside their buffers (this device's, borrowed for the call).
        unsafe {
            dnn.pool(
                p,
                x.device_ptr() + (x_offset * size_of::<T>()) as u64,
                y.device_ptr(),
            )
        }
    }

    /// Runs the batch normalisation `p` (inference form, `epsilon`) with the
    /// device's DNN library on its stream, from `x` (its first element at
    /// `x_offset`) into `y`, with the per-channel f32 `scale`, `bias`,
    /// `mean` and `var` (each a buffer and its first element): `Ok(false)`
    /// without running anything when the device has no such library or the
    /// library declines `p`.
    ///
    /// ```
    /// use ferrocm_host::{Device, WaveSize};
    /// use ferrocm_host::dnn::{BatchNormProblem, DnnType};
    /// let dev = Device::emulator(WaveSize::Wave32);
    /// let p = BatchNormProblem {
    ///     dtype: DnnType::F32, batch: 1, channels: 2, positions: 3, channels_last: false,
    /// };
    /// let x = dev.upload(&[1.0f32; 6]).unwrap();
    /// let y = dev.alloc::<f32>(6).unwrap();
    /// let v = dev.upload(&[1.0f32, 1.0]).unwrap();
    /// let s = [(&v, 0), (&v, 0), (&v, 0), (&v, 0)];
    /// assert!(!dev.dnn_batch_norm(&p, &x, 0, &y, s, 1e-5).unwrap()); // no DNN library here
    /// ```
    ///
    /// # Errors
    /// [`Error::BadDnnCall`] when `p` is not a valid problem, its element
    /// type is not `T`'s size, a tensor or vector reaches past its buffer,
    /// a buffer is on another device, or `epsilon` is negative or not
    /// finite; the library's status otherwise.
    pub fn dnn_batch_norm<T: bytemuck::Pod>(
        &self,
        p: &BatchNormProblem,
        x: &DeviceBuffer<T>,
        x_offset: usize,
        y: &DeviceBuffer<T>,
        [scale, bias, mean, var]: [(&DeviceBuffer<f32>, usize); 4],
        epsilon: f64,
    ) -> Result<bool> {
        let bad = |why: String| Error::BadDnnCall {
            device: self.to_string(),
            why,
        };
        let vectors = [scale, bias, mean, var];
        let devices = [x.device(), y.device()]
            .into_iter()
            .chain(vectors.iter().map(|(b, _)| b.device()));
        self.check_dnn_call::<T>(devices, p.validate(), p.dtype)?;
        if !(epsilon.is_finite() && epsilon >= 0.0) {
            return Err(bad(format!("epsilon {epsilon}")));
        }
        let n = p.elements();
        if x_offset > x.len() || x.len() - x_offset < n || y.len() < n {
            return Err(bad(format!(
                "input and output need {n} elements; the buffers hold {:?} (input from element {x_offset})",
                [x.len(), y.len()]
            )));
        }
        for (name, (b, offset)) in ["scale", "bias", "mean", "var"].iter().zip(vectors) {
            if offset > b.len() || b.len() - offset < p.channels {
                return Err(bad(format!(
                    "the {name} needs {} elements; its buffer holds {} (from element {offset})",
                    p.channels,
                    b.len()
                )));
            }
        }
        let Some(dnn) = self.dnn() else {
            return Ok(false);
        };
        let at = |b: &DeviceBuffer<f32>, offset: usize| b.device_ptr() + (offset * 4) as u64;
        let addresses = BatchNormAddresses {
            x: x.device_ptr() + (x_offset * size_of::<T>()) as u64,
            y: y.device_ptr(),
            scale: at(scale.0, scale.1),
            bias: at(bias.0, bias.1),
            mean: at(mean.0, mean.1),
            var: at(var.0, var.1),
        };
        let _turn = self.turn();
        // SAFETY: `validate` and the length checks proved every tensor and
        // vector inside its buffer (this device's, borrowed for the call).
        unsafe { dnn.batch_norm(p, addresses, epsilon) }
    }

    /// The checks the pooling and batch-norm entries make first, in order:
    /// every buffer this device's, the problem valid (`valid`, its
    /// `validate()`), its element type `T`'s size.
    fn check_dnn_call<'d, T>(
        &self,
        devices: impl IntoIterator<Item = &'d Device>,
        valid: std::result::Result<(), String>,
        dtype: DnnType,
    ) -> Result<()> {
        let bad = |why: String| Error::BadDnnCall {
            device: self.to_string(),
            why,
        };
        if devices.into_iter().any(|d| !d.same_device(self)) {
            return Err(bad("a buffer of another device".into()));
        }
        valid.map_err(bad)?;
        if dtype.size() != size_of::<T>() {
            return Err(bad(format!(
                "{dtype:?} elements in buffers of {}-byte elements",
                size_of::<T>()
            )));
        }
        Ok(())
    }

    /// The device's DNN library (MIOpen on ROCm, cuDNN on CUDA), bound to its stream, when
    /// it loads; `None` on the Cpu, the emulator and a GPU without one.
    ///
    /// ```
    /// assert!(ferrocm_host::Device::Cpu.dnn().is_none());
    /// ```
    pub fn dnn(&self) -> Option<&dyn Dnn> {
        self.gpu().and_then(|gpu| gpu.dnn())
    }
}
