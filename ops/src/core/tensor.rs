//! `Tensor<T>`: a strided view of a buffer on a device.

use crate::core::dim::{Dim, Dims, resolve};
use crate::core::dtype::WithDType;
use crate::core::error::{Error, Result};
use crate::core::layout::{Layout, checked_count};
use crate::core::storage::Storage;
use crate::engine::kernels::map1;
use crate::engine::{self, Op};
use ferrocm_host::{Device, DeviceBuffer, In, LaunchConfig, Out};
use ferrocm_kernels::fill::FillKernels;
use rand::{Rng, SeedableRng};
use std::marker::PhantomData;
use std::sync::Arc;

/// Workitems per workgroup of elementwise and reduction launches (a multiple
/// of both wave sizes).
///
/// ```
/// assert_eq!(ferrocm_ops::tensor::BLOCK % 64, 0);
/// ```
pub const BLOCK: u32 = 256;

/// An n-dimensional array of `T` on a [`Device`]: the typed view of a shared
/// [`Storage`] (see [`DynTensor`](crate::DynTensor) for the run-time typed
/// one). Cloning is cheap (the storage is shared); views (transpose, narrow,
/// broadcast, reshape of contiguous data) copy nothing. Ops never modify
/// their inputs.
///
/// ```
/// # use ferrocm_ops::WaveSize;
/// use ferrocm_ops::{Device, Tensor};
/// let dev = Device::emulator(WaveSize::Wave64);
/// let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3], &dev)?;
/// let b = a.transpose(0, 1)?;          // [3, 2] view, no copy
/// assert_eq!(b.to_vec()?, vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
/// let s = a.sum(&[1], false)?;         // runs reduce_sum_f32 in the emulator
/// assert_eq!(s.to_vec()?, vec![6.0, 15.0]);
/// # Ok::<(), ferrocm_ops::Error>(())
/// ```
pub struct Tensor<T: WithDType> {
    /// Always `Format::Dense(T::DTYPE)`, a whole number of `T`s.
    pub(crate) storage: Arc<Storage>,
    pub(crate) layout: Layout,
    _t: PhantomData<T>,
}

impl<T: WithDType> Clone for Tensor<T> {
    fn clone(&self) -> Self {
        Self {
            storage: self.storage.clone(),
            layout: self.layout.clone(),
            _t: PhantomData,
        }
    }
}

impl<T: WithDType> std::fmt::Debug for Tensor<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Tensor<{}>{:?} on {}",
            T::DTYPE,
            self.shape(),
            self.device()
        )
    }
}

impl<T: WithDType> Tensor<T> {
    pub(crate) fn from_parts(storage: DeviceBuffer<T>, shape: &[usize]) -> Self {
        Self {
            storage: Arc::new(Storage::dense(storage)),
            layout: Layout::contiguous(shape),
            _t: PhantomData,
        }
    }

    /// The tensor's elements as a buffer of their own, in row-major order:
    /// its storage itself when the tensor is its only user and covers it
    /// all, contiguous from its start (a freshly computed result), else a
    /// copy.
    pub(crate) fn into_buffer(self) -> Result<DeviceBuffer<T>> {
        let whole = self.is_contiguous()
            && self.layout.offset() == 0
            && self.elem_count() == self.buf().len();
        if whole && Arc::strong_count(&self.storage) == 1 {
            // The only owner (checked above, and `self` is owned): the
            // storage is ours, dense `T`s (the field's invariant, as `buf`).
            let storage = Arc::try_unwrap(self.storage).expect("the only owner");
            return Ok(storage
                .into_raw()
                .into_typed::<T>()
                .expect("dense T storage"));
        }
        let copy = self.copy()?;
        copy.into_buffer()
    }

    /// A typed view of `storage` (checked: it must hold dense `T`s covering `layout`).
    pub(crate) fn from_storage(storage: Arc<Storage>, layout: Layout) -> Result<Self> {
        let len = storage.typed::<T>()?.len();
        if layout.elem_count() > 0 && layout.storage_end() > len {
            return Err(Error::TooLarge {
                op: "typed view",
                shape: layout.shape().to_vec(),
            });
        }
        Ok(Self {
            storage,
            layout,
            _t: PhantomData,
        })
    }

    /// The storage as `T`s.
    pub(crate) fn buf(&self) -> &DeviceBuffer<T> {
        // The invariant of the field: dense T's, a whole number of them.
        self.storage
            .raw()
            .typed::<T>()
            .expect("a Tensor<T>'s storage holds T's")
    }

    /// The storage as the kernels' element type (same bits).
    pub(crate) fn kbuf(&self) -> &DeviceBuffer<T::Kernel> {
        self.buf()
            .view_as::<T::Kernel>()
            .expect("WithDType::Kernel has the size of the dtype")
    }

    /// The first element of the view, as a kernel input.
    pub(crate) fn input(&self) -> In<'_, T::Kernel> {
        In::range(self.kbuf(), self.layout.offset(), self.layout.extent())
    }

    /// A tensor of `shape` (contiguous) over `buffer`, which holds exactly
    /// its elements: how an op written against [`crate::engine`] returns
    /// the buffer it filled.
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let b = Device::Cpu.upload(&[1.0f32, 2.0, 3.0, 4.0]).unwrap();
    /// let t = Tensor::from_buffer(b, &[2, 2])?;
    /// assert_eq!(t.shape(), &[2, 2]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::TooLarge`] when the shape's element count overflows;
    /// [`Error::DataLength`] when the buffer does not hold exactly the
    /// shape's elements.
    pub fn from_buffer(buffer: DeviceBuffer<T>, shape: &[usize]) -> Result<Self> {
        let n = crate::core::layout::checked_count("Tensor::from_buffer", shape, size_of::<T>())?;
        if n != buffer.len() {
            return Err(Error::DataLength {
                op: "Tensor::from_buffer",
                shape: shape.to_vec(),
                got: buffer.len(),
            });
        }
        Ok(Self::from_parts(buffer, shape))
    }

    /// The tensor's view as a kernel's `*const T` argument: its storage,
    /// from the view's first element, limited to the elements the view
    /// reaches (the launch proves that range inside the buffer, and the
    /// emulator's sanitizer holds the kernel to it). Kernels read it
    /// through the view's strides ([`crate::engine::kernels::Strided`]).
    pub fn kernel_input(&self) -> In<'_, T::Kernel> {
        self.input()
    }

    /// Dims.
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let t = Tensor::<f32>::zeros(&[2, 3], &Device::Cpu)?;
    /// assert_eq!(t.shape(), &[2, 3]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    pub fn shape(&self) -> &[usize] {
        self.layout.shape()
    }

    /// Alias of [`Tensor::shape`].
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let t = Tensor::<u8>::zeros(&[4, 1], &Device::Cpu)?;
    /// assert_eq!(t.dims(), &[4, 1]);
    /// assert_eq!(t.dims(), t.shape());
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    pub fn dims(&self) -> &[usize] {
        self.layout.shape()
    }

    /// Number of dims.
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// assert_eq!(Tensor::<f32>::zeros(&[2, 3, 4], &Device::Cpu)?.rank(), 3);
    /// assert_eq!(Tensor::full(1u8, &[], &Device::Cpu)?.rank(), 0); // a scalar
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    pub fn rank(&self) -> usize {
        self.layout.rank()
    }

    /// Number of elements.
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// assert_eq!(Tensor::<f32>::zeros(&[2, 3], &Device::Cpu)?.elem_count(), 6);
    /// assert_eq!(Tensor::<f32>::zeros(&[2, 0], &Device::Cpu)?.elem_count(), 0);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    pub fn elem_count(&self) -> usize {
        self.layout.elem_count()
    }

    /// The layout (shape, strides, offset).
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let t = Tensor::<f32>::zeros(&[2, 3], &Device::Cpu)?;
    /// assert_eq!(t.layout().strides(), &[3, 1]);
    /// assert_eq!(t.transpose(0, 1)?.layout().strides(), &[1, 3]);
    /// assert_eq!(t.narrow(-1, 1, 2)?.layout().offset(), 1);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The dtype.
    ///
    /// ```
    /// use ferrocm_ops::{DType, Device, Tensor, bf16};
    /// assert_eq!(Tensor::<u32>::zeros(&[1], &Device::Cpu)?.dtype(), DType::U32);
    /// assert_eq!(Tensor::<bf16>::zeros(&[1], &Device::Cpu)?.dtype(), DType::BF16);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    pub fn dtype(&self) -> crate::DType {
        T::DTYPE
    }

    /// The device.
    ///
    /// ```
    /// # use ferrocm_ops::WaveSize;
    /// use ferrocm_ops::{Device, Tensor};
    /// let dev = Device::emulator(WaveSize::Wave32);
    /// assert!(Tensor::<f32>::zeros(&[2], &dev)?.device() == &dev);
    /// assert_eq!(Tensor::<f32>::zeros(&[2], &Device::Cpu)?.device().to_string(), "cpu");
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    pub fn device(&self) -> &Device {
        self.storage.device()
    }

    /// Whether the data is dense row-major.
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let t = Tensor::<f32>::zeros(&[2, 3], &Device::Cpu)?;
    /// assert!(t.is_contiguous());
    /// assert!(!t.transpose(0, 1)?.is_contiguous());
    /// assert!(t.transpose(0, 1)?.contiguous()?.is_contiguous());
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    pub fn is_contiguous(&self) -> bool {
        self.layout.is_contiguous()
    }

    /// The underlying buffer.
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let t = Tensor::from_slice(&[1u8, 2, 3, 4], &[4], &Device::Cpu)?;
    /// let v = t.narrow(0, 1, 2)?;
    /// assert_eq!(v.storage().len(), 4); // the whole buffer, not only the view
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    pub fn storage(&self) -> &DeviceBuffer<T> {
        self.buf()
    }

    /// The shared storage this tensor views (run-time format, untyped memory).
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let t = Tensor::from_slice(&[1.0f32, 2.0], &[2], &Device::Cpu)?;
    /// let v = t.reshape(&[1, 2])?; // a view
    /// assert!(std::sync::Arc::ptr_eq(t.shared_storage(), v.shared_storage()));
    /// assert_eq!(t.shared_storage().len_bytes(), 8);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    pub fn shared_storage(&self) -> &Arc<Storage> {
        &self.storage
    }

    /// A tensor of `shape` filled with `value`.
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let t = Tensor::full(7u32, &[2, 2], &Device::Cpu)?;
    /// assert_eq!(t.to_vec()?, vec![7; 4]);
    /// assert!(Tensor::full(0u8, &[usize::MAX, 2], &Device::Cpu).is_err()); // too large
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::TooLarge`] when the shape's element or byte count overflows;
    /// [`Error::Host`] when allocation or the fill fails.
    pub fn full(value: T, shape: &[usize], device: &Device) -> Result<Self> {
        let n = checked_count("full", shape, size_of::<T>())?;
        let out = device.alloc::<T>(n)?;
        let out = engine::run(device, FillOp { value, out })?;
        Ok(Self::from_parts(out, shape))
    }

    /// Zeros.
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let t = Tensor::<i64>::zeros(&[2, 2], &Device::Cpu)?;
    /// assert_eq!(t.to_vec()?, vec![0; 4]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Tensor::full`]: [`Error::TooLarge`], [`Error::Host`].
    pub fn zeros(shape: &[usize], device: &Device) -> Result<Self> {
        Self::full(T::from_f64(0.0), shape, device)
    }

    /// Ones.
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let t = Tensor::<f32>::ones(&[3], &Device::Cpu)?;
    /// assert_eq!(t.to_vec()?, vec![1.0; 3]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Tensor::full`]: [`Error::TooLarge`], [`Error::Host`].
    pub fn ones(shape: &[usize], device: &Device) -> Result<Self> {
        Self::full(T::from_f64(1.0), shape, device)
    }

    /// A tensor holding a copy of `data` (row-major) with `shape`.
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let t = Tensor::from_slice(&[1u8, 2, 3, 4], &[2, 2], &Device::Cpu)?;
    /// assert_eq!(t.shape(), &[2, 2]);
    /// assert_eq!(t.to_vec()?, vec![1, 2, 3, 4]);
    /// assert!(Tensor::from_slice(&[1u8, 2, 3], &[2, 2], &Device::Cpu).is_err());
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::DataLength`] when `data` does not hold exactly the shape's
    /// element count; [`Error::TooLarge`] when that count overflows;
    /// [`Error::Host`] when the upload fails.
    pub fn from_slice(data: &[T], shape: &[usize], device: &Device) -> Result<Self> {
        let n = checked_count("from_slice", shape, size_of::<T>())?;
        if n != data.len() {
            return Err(Error::DataLength {
                op: "from_slice",
                shape: shape.to_vec(),
                got: data.len(),
            });
        }
        Ok(Self::from_parts(device.upload(data)?, shape))
    }

    /// Alias of [`Tensor::from_slice`] taking a `Vec`.
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let t = Tensor::from_vec(vec![1i64, -2, 3], &[3, 1], &Device::Cpu)?;
    /// assert_eq!(t.shape(), &[3, 1]);
    /// assert_eq!(t.to_vec()?, vec![1, -2, 3]);
    /// assert!(Tensor::from_vec(vec![1i64, 2], &[3], &Device::Cpu).is_err());
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Tensor::from_slice`]: [`Error::DataLength`], [`Error::TooLarge`],
    /// [`Error::Host`].
    pub fn from_vec(data: Vec<T>, shape: &[usize], device: &Device) -> Result<Self> {
        Self::from_slice(&data, shape, device)
    }

    /// `[start, start + 1, ...]` up to (excluding) `end`, as a 1-D tensor.
    /// Values convert from i64 exactly for i64, wrapping for u8 and u32 (as
    /// Rust's `as`), rounded to nearest for the float types.
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// assert_eq!(Tensor::<i64>::arange(2, 5, &Device::Cpu)?.to_vec()?, vec![2, 3, 4]);
    /// assert_eq!(Tensor::<f32>::arange(-1, 2, &Device::Cpu)?.to_vec()?, vec![-1.0, 0.0, 1.0]);
    /// assert_eq!(Tensor::<u32>::arange(5, 2, &Device::Cpu)?.shape(), &[0]); // end <= start: empty
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::TooLarge`] when the range has more elements than a tensor
    /// may; [`Error::Host`] when the allocation (out of memory, checked
    /// before any host memory is used) or the upload fails.
    pub fn arange(start: i64, end: i64, device: &Device) -> Result<Self> {
        // The length first (i64::MIN..i64::MAX holds 2^64 - 1 values), then
        // the device buffer, so a huge range is an error, never a host
        // allocation of that size.
        let n = (end as i128 - start as i128).max(0);
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        checked_count("arange", &[n], size_of::<T>())?;
        let mut out = device.alloc::<T>(n)?;
        // Every value lies in start..end, so start + i never overflows.
        let data: Vec<T> = (0..n as i64)
            .map(|i| {
                let v = start + i;
                if T::DTYPE.is_float() {
                    T::from_f64(v as f64)
                } else {
                    // Exact for i64; u8 and u32 wrap, as Rust's `as`.
                    T::from_kernel(ferrocm_kernels::elem::Elem::from_i64(v))
                }
            })
            .collect();
        out.write(&data)?;
        Ok(Self::from_parts(out, &[n]))
    }

    /// Uniform values in `[lo, hi)` from a seeded generator (the same seed
    /// gives the same tensor on every device); `lo == hi` gives `lo`.
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let x = Tensor::<f32>::rand(&[1000], -1.0, 1.0, 7, &Device::Cpu)?;
    /// assert!(x.to_vec()?.iter().all(|v| (-1.0..1.0).contains(v)));
    /// assert!(Tensor::<f32>::rand(&[2], 1.0, 0.0, 7, &Device::Cpu).is_err()); // lo > hi
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::BadParameter`] when `lo` or `hi` is not finite or `lo > hi`;
    /// [`Error::TooLarge`] when the shape does not fit in memory;
    /// [`Error::Host`] when the upload fails.
    pub fn rand(shape: &[usize], lo: f64, hi: f64, seed: u64, device: &Device) -> Result<Self> {
        if !(lo.is_finite() && hi.is_finite() && lo <= hi) {
            return Err(Error::BadParameter {
                op: "rand",
                what: format!("needs finite lo <= hi, got lo = {lo}, hi = {hi}"),
            });
        }
        let n = checked_count("rand", shape, size_of::<T>())?;
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let data: Vec<T> = (0..n)
            .map(|_| {
                T::from_f64(if lo == hi {
                    lo
                } else {
                    rng.random_range(lo..hi)
                })
            })
            .collect();
        Self::from_slice(&data, shape, device)
    }

    /// Normal values with `mean` and `std` from a seeded generator.
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let x = Tensor::<f32>::randn(&[4], 0.0, 1.0, 7, &Device::Cpu)?;
    /// assert_eq!(x.shape(), &[4]);
    /// assert!(Tensor::<f32>::randn(&[4], 0.0, -1.0, 7, &Device::Cpu).is_err());
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::BadParameter`] when `mean` is not finite or `std` is negative,
    /// NaN or infinite; [`Error::TooLarge`] when the shape does not fit;
    /// [`Error::Host`] when the upload fails.
    pub fn randn(shape: &[usize], mean: f64, std: f64, seed: u64, device: &Device) -> Result<Self> {
        use rand_distr::Distribution;
        if !(mean.is_finite() && std.is_finite() && std >= 0.0) {
            return Err(Error::BadParameter {
                op: "randn",
                what: format!(
                    "needs a finite mean and a finite std >= 0, got mean = {mean}, std = {std}"
                ),
            });
        }
        let n = checked_count("randn", shape, size_of::<T>())?;
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let normal = rand_distr::Normal::new(mean, std).map_err(|e| Error::BadParameter {
            op: "randn",
            what: e.to_string(),
        })?;
        let data: Vec<T> = (0..n)
            .map(|_| T::from_f64(normal.sample(&mut rng)))
            .collect();
        Self::from_slice(&data, shape, device)
    }

    /// The elements in row-major order (waits for the device).
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let t = Tensor::from_slice(&[1u32, 2, 3, 4, 5, 6], &[2, 3], &Device::Cpu)?;
    /// assert_eq!(t.to_vec()?, vec![1, 2, 3, 4, 5, 6]);
    /// assert_eq!(t.transpose(0, -1)?.to_vec()?, vec![1, 4, 2, 5, 3, 6]); // the view's order
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Host`] when the copy of a strided view or the read-back
    /// fails, or with `Fault` when a kernel on this device reported an error
    /// (an integer division by zero) since the last wait: the read-back is
    /// where device errors surface (see `ferrocm_host::fault`).
    pub fn to_vec(&self) -> Result<Vec<T>> {
        let t = self.contiguous()?;
        let n = t.elem_count();
        if t.layout.offset() == 0 && t.buf().len() == n {
            return Ok(t.buf().download()?);
        }
        let all = t.buf().download()?;
        Ok(all[t.layout.offset()..t.layout.offset() + n].to_vec())
    }

    /// Queues a copy of the elements to the host behind the work queued so
    /// far and returns without waiting ([`QueuedVec::wait`] waits for that
    /// copy only): a decode loop reads step `i`'s token while step `i + 1`
    /// already runs. On the Cpu and the emulator the copy is done at once.
    /// Unlike [`Tensor::to_vec`], a kernel fault is not reported by the
    /// wait but by the device's next wait ([`Device::synchronize`]).
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let t = Tensor::from_slice(&[3u32, 1, 2], &[3], &Device::Cpu)?;
    /// let queued = t.argmax(&[0], false)?.to_vec_queued()?;
    /// // ... more work queued here runs meanwhile on a GPU ...
    /// assert_eq!(queued.wait()?, vec![0]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Host`] when the copy of a strided view or queueing the read
    /// fails (inside a graph recording, for one).
    pub fn to_vec_queued(&self) -> Result<QueuedVec<T>> {
        let t = self.contiguous()?;
        let start = t.layout.offset();
        Ok(QueuedVec {
            read: t.buf().download_queued()?,
            range: start..start + t.elem_count(),
        })
    }

    /// A copy on `device`.
    ///
    /// ```
    /// # use ferrocm_ops::WaveSize;
    /// use ferrocm_ops::{Device, Tensor};
    /// let emu = Device::emulator(WaveSize::Wave32);
    /// let x = Tensor::from_slice(&[1.0f32, 2.0], &[2], &Device::Cpu)?;
    /// let y = x.to_device(&emu)?;
    /// assert!(y.device() == &emu);
    /// assert_eq!(y.to_vec()?, vec![1.0, 2.0]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Host`] when reading back, allocating or uploading fails.
    pub fn to_device(&self, device: &Device) -> Result<Self> {
        let data = self.to_vec()?;
        Self::from_slice(&data, self.shape(), device)
    }

    /// This tensor if contiguous, else a contiguous copy (the `copy_{dtype}` kernel on GPUs).
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let t = Tensor::from_slice(&[1u8, 2, 3, 4, 5, 6], &[2, 3], &Device::Cpu)?;
    /// let c = t.transpose(0, 1)?.contiguous()?;
    /// assert!(c.is_contiguous());
    /// assert_eq!(c.layout().strides(), &[2, 1]);
    /// assert_eq!(c.to_vec()?, vec![1, 4, 2, 5, 3, 6]);
    /// // Already contiguous: the same storage, no copy.
    /// assert!(std::sync::Arc::ptr_eq(t.contiguous()?.shared_storage(), t.shared_storage()));
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Host`] when allocation or the copy fails.
    pub fn contiguous(&self) -> Result<Self> {
        if self.is_contiguous() {
            return Ok(self.clone());
        }
        let dev = self.device();
        let out = dev.alloc::<T>(self.elem_count())?;
        let out = engine::run(dev, CopyOp { x: self, out })?;
        Ok(Self::from_parts(out, self.shape()))
    }

    /// A contiguous copy in new memory, whatever the layout (the `copy_{dtype}`
    /// kernel on GPUs).
    ///
    /// ```
    /// # use ferrocm_ops::WaveSize;
    /// use ferrocm_ops::{Device, Tensor};
    /// let t = Tensor::from_slice(&[1u8, 2, 3], &[3], &Device::emulator(WaveSize::Wave32))?;
    /// let c = t.copy()?;
    /// assert_eq!(c.to_vec()?, vec![1, 2, 3]);
    /// assert!(!std::sync::Arc::ptr_eq(c.shared_storage(), t.shared_storage()));
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Host`] when allocation or the copy fails.
    pub fn copy(&self) -> Result<Self> {
        let dev = self.device();
        let out = dev.alloc::<T>(self.elem_count())?;
        let out = engine::run(dev, CopyOp { x: self, out })?;
        Ok(Self::from_parts(out, self.shape()))
    }

    /// The same elements with another shape: a view when contiguous, or when
    /// the dims it merges or splits are contiguous among themselves (the rule
    /// of `torch.view`: a narrowed column, a split of one transposed dim,
    /// dims of size 1 added or dropped), else a copy.
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let t = Tensor::<f32>::zeros(&[2, 3], &Device::Cpu)?;
    /// assert_eq!(t.reshape(&[3, 2])?.shape(), &[3, 2]);
    /// assert!(t.reshape(&[4]).is_err());
    /// // Merging a transposed view's dims copies: the values come in its row-major order.
    /// let u = Tensor::<f32>::arange(0, 6, &Device::Cpu)?.reshape(&[2, 3])?.transpose(0, 1)?;
    /// assert_eq!(u.reshape(&[6])?.to_vec()?, vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::ReshapeIncompatible`] when the element counts differ;
    /// [`Error::TooLarge`] when `shape`'s count overflows; [`Error::Host`]
    /// when the copy of a non-contiguous tensor fails.
    pub fn reshape(&self, shape: &[usize]) -> Result<Self> {
        let n = checked_count("reshape", shape, size_of::<T>())?;
        if n != self.elem_count() {
            return Err(Error::ReshapeIncompatible {
                op: "reshape",
                from: self.shape().to_vec(),
                to: shape.to_vec(),
            });
        }
        if let Some(layout) = self.layout.reshaped(shape) {
            return Ok(self.with_layout(layout));
        }
        self.contiguous()?.reshape(shape)
    }

    fn with_layout(&self, layout: Layout) -> Self {
        Self {
            storage: self.storage.clone(),
            layout,
            _t: PhantomData,
        }
    }

    /// Swaps two dims (a view); negative dims count from the end.
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let t = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3], &Device::Cpu)?;
    /// let u = t.transpose(0, -1)?; // -1: the last dim
    /// assert_eq!(u.shape(), &[3, 2]);
    /// assert_eq!(u.to_vec()?, vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    /// assert!(t.transpose(0, 2).is_err()); // rank 2
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::DimOutOfRange`] when a dim is outside `-rank..rank`.
    pub fn transpose(&self, d0: impl Dim, d1: impl Dim) -> Result<Self> {
        let (d0, d1) = (
            resolve("transpose", d0, self.shape())?,
            resolve("transpose", d1, self.shape())?,
        );
        Ok(self.with_layout(self.layout.transpose(d0, d1)?))
    }

    /// Reorders dims (a view): dim `k` of the result is dim `perm[k]`.
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let t = Tensor::<f32>::zeros(&[2, 3, 4], &Device::Cpu)?;
    /// assert_eq!(t.permute(&[2, 0, 1])?.shape(), &[4, 2, 3]);
    /// assert_eq!(t.permute(&[-1, 0, 1])?.shape(), &[4, 2, 3]);
    /// assert!(t.permute(&[0, 0, 1]).is_err()); // not a permutation
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::DimOutOfRange`] when a dim is outside `-rank..rank`;
    /// [`Error::BadPermutation`] when `perm` does not name each dim once.
    pub fn permute(&self, perm: impl Dims) -> Result<Self> {
        Ok(self.with_layout(
            self.layout
                .permute(&perm.resolve("permute", self.shape())?)?,
        ))
    }

    /// Elements `start..start + len` along `dim` (a view; a negative dim
    /// counts from the end).
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let t = Tensor::from_slice(&[1u32, 2, 3, 4, 5, 6], &[2, 3], &Device::Cpu)?;
    /// assert_eq!(t.narrow(-1, 1, 2)?.to_vec()?, vec![2, 3, 5, 6]);
    /// assert_eq!(t.narrow(0, 1, 1)?.to_vec()?, vec![4, 5, 6]);
    /// assert!(t.narrow(1, 2, 2).is_err()); // 2..4 is past the end of a dim of 3
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::DimOutOfRange`] when `dim` is outside `-rank..rank`;
    /// [`Error::NarrowOutOfRange`] when `start + len` exceeds the dim.
    pub fn narrow(&self, dim: impl Dim, start: usize, len: usize) -> Result<Self> {
        let dim = resolve("narrow", dim, self.shape())?;
        Ok(self.with_layout(self.layout.narrow(dim, start, len)?))
    }

    /// Broadcasts to `shape` (a view with stride-0 dims).
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let t = Tensor::from_slice(&[1i64, 2], &[2, 1], &Device::Cpu)?;
    /// let b = t.broadcast_as(&[3, 2, 2])?;
    /// assert_eq!(b.layout().strides(), &[0, 1, 0]);
    /// assert_eq!(b.to_vec()?, vec![1, 1, 2, 2, 1, 1, 2, 2, 1, 1, 2, 2]);
    /// assert!(t.broadcast_as(&[3, 1]).is_err()); // 2 does not stretch to 3
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::BroadcastIncompatible`] when `shape` is not a broadcast of
    /// this shape; [`Error::TooLarge`] when its element count overflows.
    pub fn broadcast_as(&self, shape: &[usize]) -> Result<Self> {
        Ok(self.with_layout(self.layout.broadcast_as(shape)?))
    }

    pub(crate) fn same_device<U: WithDType>(
        &self,
        op: &'static str,
        other: &Tensor<U>,
    ) -> Result<()> {
        if !self.device().same_device(other.device()) {
            return Err(Error::DeviceMismatch {
                op,
                lhs: self.device().to_string(),
                rhs: other.device().to_string(),
            });
        }
        Ok(())
    }
}

/// `full`: every element set to one value.
struct FillOp<T: WithDType> {
    value: T,
    out: DeviceBuffer<T>,
}

impl<T: WithDType> Op for FillOp<T> {
    type Output = DeviceBuffer<T>;

    fn cpu(mut self) -> Result<DeviceBuffer<T>> {
        crate::engine::cpu::host_mut(&mut self.out).fill(self.value);
        Ok(self.out)
    }

    fn kernels(self, dev: &Device) -> Result<DeviceBuffer<T>> {
        let n = self.out.len() as u64;
        if n > 0 {
            let bits = crate::elementwise::fill::bits64(self.value);
            let out = self.out.view_as::<T::Kernel>().expect("same size");
            dev.launch_typed(
                T::Kernel::FILL,
                // The kernel fills 4- and 8-byte elements one per store.
                if size_of::<T>() <= 2 {
                    LaunchConfig::chunked(n, BLOCK)
                } else {
                    LaunchConfig::elementwise(n, BLOCK)
                },
                (Out::new(out), n, bits),
            )?;
        }
        Ok(self.out)
    }
}

/// `contiguous`: a strided view gathered into dense storage.
struct CopyOp<'a, T: WithDType> {
    x: &'a Tensor<T>,
    out: DeviceBuffer<T>,
}

impl<T: WithDType> Op for CopyOp<'_, T> {
    type Output = DeviceBuffer<T>;

    fn cpu(mut self) -> Result<DeviceBuffer<T>> {
        let src = crate::engine::cpu::host(self.x.buf());
        if let Some((batch, rows, cols)) = transposed_matrices(&self.x.layout) {
            // Tiles, as the kernel does: the gather reads one element per
            // cache line (4096² f32: 60 ms gathered).
            let off = self.x.layout.offset();
            let src = &src[off..off + batch * rows * cols];
            crate::engine::cpu::transpose(
                crate::engine::cpu::host_mut(&mut self.out),
                src,
                rows,
                cols,
            );
            return Ok(self.out);
        }
        let out = crate::engine::cpu::host_mut(&mut self.out);
        crate::engine::cpu::map1(out, src, &self.x.layout, &Same);
        Ok(self.out)
    }

    fn kernels(self, dev: &Device) -> Result<DeviceBuffer<T>> {
        if let Some((batch, rows, cols)) = transposed_matrices(&self.x.layout) {
            // A transposed view of contiguous matrices: the tiled transpose
            // reads and writes whole rows (the gather kernel would read one
            // element per 4-byte column stride).
            let tiles = (batch * rows.div_ceil(32) * cols.div_ceil(32)) as u64;
            let cfg = LaunchConfig {
                grid: [tiles.clamp(1, 65536) as u32, 1, 1],
                block: [BLOCK, 1, 1],
                lds_bytes: ferrocm_kernels::fill::transpose_lds_bytes(size_of::<T>() as u32),
                early_start: false,
            };
            let out = self.out.view_as::<T::Kernel>().expect("same size");
            dev.launch_typed(
                T::Kernel::TRANSPOSE,
                cfg,
                (
                    Out::new(out),
                    self.x.input(),
                    batch as u64,
                    rows as u64,
                    cols as u64,
                ),
            )?;
            return Ok(self.out);
        }
        map1(dev, self.x, &self.out, |cfg, args| {
            dev.launch_typed(T::Kernel::COPY, cfg, args)
        })?;
        Ok(self.out)
    }
}

/// `Some((batch, rows, cols))` when `layout` views `batch` contiguous
/// `rows × cols` matrices with their last two dims swapped (a transpose of
/// the last two dims of a contiguous tensor): its contiguous copy is those
/// matrices transposed.
///
/// ```ignore
/// // [3, 2] viewing a contiguous [2, 3] through transpose(0, 1): strides [1, 3].
/// assert_eq!(transposed_matrices(&t.transpose(0, 1)?.layout), Some((1, 2, 3)));
/// ```
fn transposed_matrices(layout: &Layout) -> Option<(usize, usize, usize)> {
    let (shape, strides) = (layout.shape(), layout.strides());
    let n = shape.len();
    if n < 2 {
        return None;
    }
    let (a, b) = (shape[n - 2], shape[n - 1]);
    if a < 2 || b < 2 || strides[n - 2] != 1 || strides[n - 1] != a {
        return None;
    }
    let mut expected = a * b;
    let mut batch = 1;
    for d in (0..n - 2).rev() {
        if shape[d] != 1 && strides[d] != expected {
            return None;
        }
        expected *= shape[d];
        batch *= shape[d];
    }
    Some((batch, b, a))
}

/// The identity, per element (the Cpu's gather of `contiguous`).
struct Same;

impl<T: Copy> crate::engine::cpu::Func1<T, T> for Same {
    #[inline(always)]
    fn call(&self, x: T) -> T {
        x
    }
}

impl<T: WithDType> Tensor<T> {
    /// The value of a one-element tensor (any rank: `[]`, `[1]`, `[1, 1]`...).
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3], &Device::Cpu)?;
    /// assert_eq!(x.sum(&[0], false)?.to_scalar()?, 6.0);
    /// assert!(x.to_scalar().is_err()); // three elements
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::BadParameter`] when the tensor does not hold exactly one
    /// element; device errors from reading it back ([`Error::Host`]).
    pub fn to_scalar(&self) -> Result<T> {
        if self.elem_count() != 1 {
            return Err(Error::BadParameter {
                op: "to_scalar",
                what: format!(
                    "a tensor of shape {:?} holds {} elements, not one",
                    self.shape(),
                    self.elem_count()
                ),
            });
        }
        Ok(self.to_vec()?[0])
    }

    /// Whether `self` and `other` (broadcast to one shape) are elementwise
    /// close: `|a - b| <= atol + rtol * |b|`, as `torch.allclose` (NaN is
    /// never close to anything, infinities only to themselves). Compared in
    /// f64 on the host after reading both back.
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let a = Tensor::from_slice(&[1.0f32, 2.0], &[2], &Device::Cpu)?;
    /// let b = Tensor::from_slice(&[1.0f32, 2.000_001], &[2], &Device::Cpu)?;
    /// assert!(a.allclose(&b, 1e-5, 1e-8)?);
    /// assert!(!a.allclose(&b.affine(1.0, 1.0)?, 1e-5, 1e-8)?);
    /// assert!(a.allclose(&b, -1.0, 0.0).is_err()); // a negative tolerance is refused
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::BadParameter`] when `rtol` or `atol` is negative or NaN (as
    /// PyTorch refuses them); [`Error::BroadcastIncompatible`] when the
    /// shapes do not broadcast, [`Error::DeviceMismatch`] across devices,
    /// [`Error::TooLarge`] when the broadcast element count overflows,
    /// device errors on read-back ([`Error::Host`]).
    pub fn allclose(&self, other: &Self, rtol: f64, atol: f64) -> Result<bool> {
        for (name, v) in [("rtol", rtol), ("atol", atol)] {
            if v.is_nan() || v < 0.0 {
                return Err(Error::BadParameter {
                    op: "allclose",
                    what: format!("{name} must be a non-negative number, got {v}"),
                });
            }
        }
        let (_, a, b) = crate::elementwise::binary::broadcast_pair("allclose", self, other)?;
        let (a, b) = (a.to_vec()?, b.to_vec()?);
        Ok(a.iter().zip(&b).all(|(x, y)| {
            let (x, y) = (x.to_f64(), y.to_f64());
            x == y || (x - y).abs() <= atol + rtol * y.abs()
        }))
    }
}

/// The values, as PyTorch prints them: nested brackets, floats with four
/// decimals (scientific notation for very large or small magnitudes), and
/// tensors of more than 1000 elements summarised (the first and last three
/// of each long dim around `...`). Reads the values back from the device
/// (waits for it); a device error is printed in place of the values.
///
/// ```
/// use ferrocm_ops::{Device, Tensor};
/// let x = Tensor::from_slice(&[1.0f32, -2.5, 3.0, 4.0], &[2, 2], &Device::Cpu)?;
/// assert_eq!(x.to_string(), "tensor([[ 1.0000, -2.5000],\n        [ 3.0000,  4.0000]], dtype=f32, device=cpu)");
/// # Ok::<(), ferrocm_ops::Error>(())
/// ```
impl<T: WithDType> std::fmt::Display for Tensor<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let values = match self.to_vec() {
            Ok(v) => v,
            Err(e) => {
                return write!(
                    f,
                    "tensor(<{e}>, dtype={}, device={})",
                    T::DTYPE,
                    self.device()
                );
            }
        };
        let text: Vec<String> = values
            .iter()
            .map(|v| {
                let x = v.to_f64();
                if !T::DTYPE.is_float() {
                    format!("{x}")
                } else if x.is_finite() && x != 0.0 && (x.abs() >= 1e8 || x.abs() < 1e-4) {
                    format!("{x:.4e}")
                } else {
                    format!("{x:.4}")
                }
            })
            .collect();
        if values.is_empty() {
            // No values to lay out (and a dim of an empty tensor may be huge).
            return write!(
                f,
                "tensor([], shape={:?}, dtype={}, device={})",
                self.shape(),
                T::DTYPE,
                self.device()
            );
        }
        let width = text.iter().map(|s| s.len()).max().unwrap_or(0);
        let summarise = values.len() > 1000;
        write!(f, "tensor(")?;
        display_dim(f, &text, self.shape(), 0, 0, width, summarise)?;
        write!(f, ", dtype={}, device={})", T::DTYPE, self.device())
    }
}

/// Dim `d` of the values from element `start` (row-major), PyTorch's layout.
fn display_dim(
    f: &mut std::fmt::Formatter<'_>,
    text: &[String],
    shape: &[usize],
    d: usize,
    start: usize,
    width: usize,
    summarise: bool,
) -> std::fmt::Result {
    if d == shape.len() {
        return write!(f, "{:>width$}", text[start]);
    }
    let inner: usize = shape[d + 1..].iter().product();
    let n = shape[d];
    // Lazily: `n` is at most the number of values here, but needs no Vec.
    let cut = summarise && n > 6;
    let shown = (0..if cut { 7 } else { n }).map(|k| match (cut, k) {
        (true, 3) => None,
        (true, 4..) => Some(n - 7 + k),
        _ => Some(k),
    });
    write!(f, "[")?;
    for (k, i) in shown.enumerate() {
        if k > 0 {
            if d + 1 == shape.len() {
                write!(f, ", ")?;
            } else {
                write!(
                    f,
                    ",{}{}",
                    "\n".repeat(shape.len() - d - 1),
                    " ".repeat(d + 8)
                )?;
            }
        }
        match i {
            Some(i) => display_dim(f, text, shape, d + 1, start + i * inner, width, summarise)?,
            None => write!(f, "...")?,
        }
    }
    write!(f, "]")
}

/// A copy to the host queued by [`Tensor::to_vec_queued`]; dropping it
/// unwaited waits for the copy.
#[derive(Debug)]
pub struct QueuedVec<T> {
    read: ferrocm_host::QueuedDownload<T>,
    range: std::ops::Range<usize>,
}

impl<T: WithDType> QueuedVec<T> {
    /// Waits for the copy (not for work queued after it) and returns the
    /// elements, in the tensor's logical order.
    ///
    /// # Errors
    /// [`Error::Host`] when the wait fails.
    pub fn wait(self) -> Result<Vec<T>> {
        let all = self.read.wait()?;
        if self.range == (0..all.len()) {
            return Ok(all);
        }
        Ok(all[self.range].to_vec())
    }
}
