//! [`DynTensor`]: a tensor whose element type is known only at run time.
//!
//! It views the same [`Storage`] as [`Tensor<T>`]: converting either way is an
//! `Arc` clone plus a dtype check. Ops dispatch on the dtype inside this file
//! (one `match` here), so code that learns dtypes from a file (a model
//! loader) calls them without a match of its own. Storage holding blocks of
//! a quantized format is a `DynTensor` too; elementwise ops refuse it with
//! [`Error::FormatMismatch`] until the quantized ops land.

use crate::core::dim::{Dim, Dims, resolve};
use crate::core::dtype::{DType, WithDType};
use crate::core::error::{Error, Result};
use crate::core::layout::Layout;
use crate::core::storage::{Format, Storage};
use crate::quant::QuantFormat;
use crate::{Binary, Cmp, Reduce, Tensor, Unary, bf16, f16};
use ferrocm_host::Device;
use std::sync::Arc;

/// A strided view of a [`Storage`] whose format is known at run time.
///
/// ```
/// # use ferrocm_ops::WaveSize;
/// use ferrocm_ops::{DType, Device, DynTensor, Tensor, Unary};
/// let dev = Device::emulator(WaveSize::Wave32);
/// let t = Tensor::from_slice(&[1.0f32, 4.0, 9.0], &[3], &dev)?;
/// let d: DynTensor = t.into();                      // free: same storage
/// assert_eq!(d.dtype()?, DType::F32);
/// let r = d.unary(Unary::Sqrt, 0.0)?.to_dtype(DType::BF16)?;
/// assert_eq!(r.dtype()?, DType::BF16);
/// let back: Tensor<half::bf16> = r.typed()?;        // checked
/// assert_eq!(back.to_vec()?[2].to_f32(), 3.0);
/// assert!(d.typed::<u8>().is_err());
/// # Ok::<(), ferrocm_ops::Error>(())
/// ```
#[derive(Clone)]
pub struct DynTensor {
    storage: Arc<Storage>,
    layout: Layout,
}

impl std::fmt::Debug for DynTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "DynTensor<{}>{:?} on {}",
            self.storage.format(),
            self.layout.shape(),
            self.storage.device()
        )
    }
}

impl<T: WithDType> From<Tensor<T>> for DynTensor {
    fn from(t: Tensor<T>) -> Self {
        Self {
            storage: t.storage,
            layout: t.layout,
        }
    }
}

impl<T: WithDType> TryFrom<DynTensor> for Tensor<T> {
    type Error = Error;
    fn try_from(d: DynTensor) -> Result<Self> {
        Tensor::from_storage(d.storage, d.layout)
    }
}

/// Runs `$body` with `$t` bound to the typed tensor of `$self`'s dtype: the
/// one `match` on the dtype behind each `DynTensor` op (the families' files
/// use it for their `DynTensor` entries).
macro_rules! with_dtype {
    ($self:expr, $op:expr, |$t:ident| $body:expr) => {{
        let d = $self;
        match d.dtype_for($op)? {
            $crate::DType::F32 => {
                let $t = d.typed_unchecked::<f32>()?;
                $body
            }
            $crate::DType::F16 => {
                let $t = d.typed_unchecked::<$crate::f16>()?;
                $body
            }
            $crate::DType::BF16 => {
                let $t = d.typed_unchecked::<$crate::bf16>()?;
                $body
            }
            $crate::DType::U8 => {
                let $t = d.typed_unchecked::<u8>()?;
                $body
            }
            $crate::DType::U32 => {
                let $t = d.typed_unchecked::<u32>()?;
                $body
            }
            $crate::DType::I64 => {
                let $t = d.typed_unchecked::<i64>()?;
                $body
            }
        }
    }};
}

pub(crate) use with_dtype;

/// Runs `$body` with `$i` bound to the typed ids of `$ids` (u8, u32, i64):
/// the one `match` on the id type behind each indexing op of `DynTensor`.
macro_rules! with_ids {
    ($ids:expr, $op:expr, |$i:ident| $body:expr) => {{
        let ids = $ids;
        match ids.dtype_for($op)? {
            $crate::DType::U8 => {
                let $i = ids.typed::<u8>()?;
                $body
            }
            $crate::DType::U32 => {
                let $i = ids.typed::<u32>()?;
                $body
            }
            $crate::DType::I64 => {
                let $i = ids.typed::<i64>()?;
                $body
            }
            dtype => Err($crate::Error::UnsupportedDType {
                op: concat!($op, " (ids)"),
                dtype,
            }),
        }
    }};
}
pub(crate) use with_ids;

impl DynTensor {
    /// Raw blocks of a quantized `format` holding `shape`'s elements (a
    /// GGUF tensor's data): `bytes` must be exactly the blocks' bytes, and
    /// each row (the last dim) a whole number of blocks. [`QTensor`](crate::QTensor)
    /// is the quantized tensor type with the quantized ops; this is the same
    /// storage as a `DynTensor`, e.g. for a loader that holds every tensor
    /// of a file in one type.
    ///
    /// ```
    /// use ferrocm_ops::{Device, DynTensor, Format, QuantFormat};
    /// let q8_0 = QuantFormat::Q8_0;
    /// let w = DynTensor::from_blocks(&[0u8; 68], q8_0, &[2, 32], &Device::Cpu)?;
    /// assert_eq!(w.format(), Format::Blocks(q8_0));
    /// assert!(w.unary(ferrocm_ops::Unary::Exp, 0.0).is_err()); // no elementwise ops on blocks
    /// assert!(DynTensor::from_blocks(&[0u8; 67], q8_0, &[2, 32], &Device::Cpu).is_err());
    /// assert_eq!(w.shape(), &[2, 32]);
    /// assert!(DynTensor::from_blocks(&[0u8; 68], q8_0, &[4, 16], &Device::Cpu).is_err()); // rows not whole blocks
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::TooLarge`] when the element count or the byte size
    /// overflows; [`Error::BadParameter`] naming the values when a row is
    /// not a whole number of blocks, the shape has no dim, or `bytes` is not
    /// exactly the blocks' size; [`Error::Host`] when the upload fails.
    pub fn from_blocks(
        bytes: &[u8],
        format: QuantFormat,
        shape: &[usize],
        device: &Device,
    ) -> Result<Self> {
        let op = "from_blocks";
        let want = crate::quant::qtensor::block_bytes_of(op, format, shape)?;
        if want != bytes.len() {
            return Err(Error::BadParameter {
                op,
                what: format!(
                    "{} bytes given; shape {shape:?} in {format} blocks takes {want}",
                    bytes.len()
                ),
            });
        }
        let buffer = device.upload(bytes)?.into_raw();
        Ok(Self::from_block_storage(
            Arc::new(Storage::blocks(buffer, format)),
            shape,
        ))
    }

    /// A contiguous view of block storage (its size checked by the caller).
    pub(crate) fn from_block_storage(storage: Arc<Storage>, shape: &[usize]) -> Self {
        Self {
            storage,
            layout: Layout::contiguous(shape),
        }
    }

    /// Block-quantized storage dequantized to `dtype` (f32, f16, bf16);
    /// see [`QTensor::dequantize`](crate::QTensor::dequantize).
    ///
    /// ```
    /// use ferrocm_ops::{DType, Device, DynTensor, QuantFormat};
    /// let w = DynTensor::from_blocks(&[0u8; 18], QuantFormat::Q4_0, &[32], &Device::Cpu)?;
    /// assert_eq!(w.dequantize(DType::F16)?.dtype()?, DType::F16);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// The errors of [`QTensor::from_dyn`](crate::QTensor::from_dyn) and
    /// [`QTensor::dequantize`](crate::QTensor::dequantize).
    pub fn dequantize(&self, dtype: DType) -> Result<Self> {
        crate::QTensor::from_dyn(self)?.dequantize_to(dtype)
    }

    /// The format of the storage.
    ///
    /// ```
    /// use ferrocm_ops::{DType, Device, Format, Tensor};
    /// let d = Tensor::from_slice(&[1u8, 2], &[2], &Device::Cpu)?.to_dyn();
    /// assert_eq!(d.format(), Format::Dense(DType::U8));
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    pub fn format(&self) -> Format {
        self.storage.format()
    }

    /// The dtype, or an error for block-quantized storage.
    ///
    /// ```
    /// use ferrocm_ops::{DType, Device, DynTensor, QuantFormat, Tensor};
    /// assert_eq!(Tensor::<f32>::zeros(&[2], &Device::Cpu)?.to_dyn().dtype()?, DType::F32);
    /// let q8_0 = QuantFormat::Q8_0;
    /// assert!(DynTensor::from_blocks(&[0u8; 34], q8_0, &[32], &Device::Cpu)?.dtype().is_err());
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::FormatMismatch`] for block-quantized storage.
    pub fn dtype(&self) -> Result<DType> {
        self.dtype_for("dtype")
    }

    pub(crate) fn dtype_for(&self, op: &'static str) -> Result<DType> {
        match self.storage.format() {
            Format::Dense(d) => Ok(d),
            got => Err(Error::FormatMismatch {
                op,
                expected: Format::Dense(DType::F32),
                got,
            }),
        }
    }

    /// Dims.
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let d = Tensor::<u32>::zeros(&[2, 3], &Device::Cpu)?.to_dyn();
    /// assert_eq!(d.shape(), &[2, 3]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    pub fn shape(&self) -> &[usize] {
        self.layout.shape()
    }

    /// Number of dims.
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// assert_eq!(Tensor::<u32>::zeros(&[2, 3, 1], &Device::Cpu)?.to_dyn().rank(), 3);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    pub fn rank(&self) -> usize {
        self.layout.rank()
    }

    /// Number of elements.
    ///
    /// ```
    /// use ferrocm_ops::{Device, DynTensor, QuantFormat};
    /// let q8_0 = QuantFormat::Q8_0;
    /// let w = DynTensor::from_blocks(&[0u8; 68], q8_0, &[2, 32], &Device::Cpu)?;
    /// assert_eq!(w.elem_count(), 64); // logical elements, not bytes
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    pub fn elem_count(&self) -> usize {
        self.layout.elem_count()
    }

    /// The layout.
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let d = Tensor::<f32>::zeros(&[2, 3], &Device::Cpu)?.to_dyn();
    /// assert_eq!(d.layout().strides(), &[3, 1]);
    /// assert_eq!(d.transpose(0, 1)?.layout().strides(), &[1, 3]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The device.
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let d = Tensor::<f32>::zeros(&[2], &Device::Cpu)?.to_dyn();
    /// assert!(d.device() == &Device::Cpu);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    pub fn device(&self) -> &Device {
        self.storage.device()
    }

    /// The shared storage.
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let t = Tensor::from_slice(&[1u32, 2, 3], &[3], &Device::Cpu)?;
    /// let d = t.to_dyn();
    /// assert!(std::sync::Arc::ptr_eq(d.shared_storage(), t.shared_storage()));
    /// assert_eq!(d.shared_storage().len_bytes(), 12);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    pub fn shared_storage(&self) -> &Arc<Storage> {
        &self.storage
    }

    /// The typed view (an `Arc` clone), or an error naming both formats.
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let d = Tensor::from_slice(&[1u32, 2], &[2], &Device::Cpu)?.to_dyn();
    /// assert_eq!(d.typed::<u32>()?.to_vec()?, vec![1, 2]);
    /// assert!(d.typed::<f32>().is_err()); // u32 storage
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::FormatMismatch`] when the storage does not hold dense `T`s.
    pub fn typed<T: WithDType>(&self) -> Result<Tensor<T>> {
        Tensor::from_storage(self.storage.clone(), self.layout.clone())
    }

    pub(crate) fn typed_unchecked<T: WithDType>(&self) -> Result<Tensor<T>> {
        self.typed()
    }

    /// Elementwise `op` (float dtypes), see [`Tensor::unary`].
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor, Unary};
    /// let d = Tensor::from_slice(&[1.0f32, 4.0], &[2], &Device::Cpu)?.to_dyn();
    /// assert_eq!(d.unary(Unary::Sqrt, 0.0)?.to_f64_vec()?, vec![1.0, 2.0]);
    /// let i = Tensor::from_slice(&[1u8], &[1], &Device::Cpu)?.to_dyn();
    /// assert!(i.unary(Unary::Exp, 0.0).is_err()); // integers
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::FormatMismatch`] for block-quantized storage;
    /// [`Error::UnsupportedDType`] for integer dtypes; [`Error::Host`] when
    /// allocation or the launch fails.
    pub fn unary(&self, op: Unary, p: f32) -> Result<Self> {
        with_dtype!(self, op.name(), |t| Ok(t.unary(op, p)?.into()))
    }

    /// `x * mul + add`, see [`Tensor::affine`].
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let d = Tensor::from_slice(&[1i64, -2], &[2], &Device::Cpu)?.to_dyn();
    /// assert_eq!(d.affine(2.0, 1.0)?.to_f64_vec()?, vec![3.0, -3.0]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::FormatMismatch`] for block-quantized storage; [`Error::Host`]
    /// when allocation or the launch fails.
    pub fn affine(&self, mul: f32, add: f32) -> Result<Self> {
        with_dtype!(self, "affine", |t| Ok(t.affine(mul, add)?.into()))
    }

    /// `op(self, rhs)` with broadcasting; both of one dtype.
    ///
    /// ```
    /// use ferrocm_ops::{Binary, Device, DynTensor, Tensor};
    /// let a: DynTensor = Tensor::from_slice(&[1u32, 2], &[2], &Device::Cpu)?.into();
    /// let b: DynTensor = Tensor::from_slice(&[1.0f32, 2.0], &[2], &Device::Cpu)?.into();
    /// assert!(a.binary(&b, Binary::Add).is_err()); // u32 vs f32
    /// assert_eq!(a.binary(&a, Binary::Add)?.typed::<u32>()?.to_vec()?, vec![2, 4]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::FormatMismatch`] for block-quantized storage;
    /// [`Error::DTypeMismatch`] when the dtypes differ;
    /// [`Error::DeviceMismatch`] across devices;
    /// [`Error::BroadcastIncompatible`] when the shapes do not broadcast;
    /// [`Error::TooLarge`] when the broadcast element count overflows;
    /// [`Error::Host`] when allocation or the launch fails.
    pub fn binary(&self, rhs: &Self, op: Binary) -> Result<Self> {
        self.same_dtype(op.name(), rhs)?;
        with_dtype!(self, op.name(), |t| Ok(t.binary(&rhs.typed()?, op)?.into()))
    }

    /// Comparison with broadcasting, giving u8 0/1; both of one dtype.
    ///
    /// ```
    /// use ferrocm_ops::{Cmp, DType, Device, Tensor};
    /// let a = Tensor::from_slice(&[1.0f32, 5.0], &[2], &Device::Cpu)?.to_dyn();
    /// let b = Tensor::from_slice(&[3.0f32], &[1], &Device::Cpu)?.to_dyn();
    /// let c = a.cmp(&b, Cmp::Gt)?;
    /// assert_eq!(c.dtype()?, DType::U8);
    /// assert_eq!(c.to_f64_vec()?, vec![0.0, 1.0]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::FormatMismatch`] for block-quantized storage;
    /// [`Error::DTypeMismatch`] when the dtypes differ;
    /// [`Error::DeviceMismatch`] across devices;
    /// [`Error::BroadcastIncompatible`] when the shapes do not broadcast;
    /// [`Error::TooLarge`] when the broadcast element count overflows;
    /// [`Error::Host`] when allocation or the launch fails.
    pub fn cmp(&self, rhs: &Self, op: Cmp) -> Result<Self> {
        self.same_dtype(op.name(), rhs)?;
        with_dtype!(self, op.name(), |t| Ok(t.cmp(&rhs.typed()?, op)?.into()))
    }

    /// `self != 0 ? on_true : on_false` (mask u8, u32 or i64; values of one dtype).
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let m = Tensor::from_slice(&[1u32, 0], &[2], &Device::Cpu)?.to_dyn();
    /// let a = Tensor::from_slice(&[1.0f32, 2.0], &[2], &Device::Cpu)?.to_dyn();
    /// let b = Tensor::from_slice(&[-1.0f32], &[1], &Device::Cpu)?.to_dyn();
    /// assert_eq!(m.where_cond(&a, &b)?.to_f64_vec()?, vec![1.0, -1.0]);
    /// assert!(a.where_cond(&a, &b).is_err()); // an f32 mask
    /// assert!(m.where_cond(&a, &m).is_err()); // f32 and u32 values
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::FormatMismatch`] for block-quantized storage;
    /// [`Error::DTypeMismatch`] when `on_true` and `on_false` differ in dtype;
    /// [`Error::UnsupportedDType`] for a mask that is not u8, u32 or i64;
    /// [`Error::DeviceMismatch`] across devices;
    /// [`Error::BroadcastIncompatible`] when the shapes do not broadcast;
    /// [`Error::TooLarge`] when the broadcast element count overflows;
    /// [`Error::Host`] when allocation or the launch fails.
    pub fn where_cond(&self, on_true: &Self, on_false: &Self) -> Result<Self> {
        on_true.same_dtype("where_cond", on_false)?;
        let mask = self.dtype_for("where_cond")?;
        macro_rules! values {
            ($m:ident) => {
                with_dtype!(on_true, "where_cond", |t| Ok($m
                    .where_cond(&t, &on_false.typed()?)?
                    .into()))
            };
        }
        match mask {
            DType::U8 => {
                let m = self.typed::<u8>()?;
                values!(m)
            }
            DType::U32 => {
                let m = self.typed::<u32>()?;
                values!(m)
            }
            DType::I64 => {
                let m = self.typed::<i64>()?;
                values!(m)
            }
            dtype => Err(Error::UnsupportedDType {
                op: "where_cond (mask)",
                dtype,
            }),
        }
    }

    /// A copy converted to `dtype`, see [`Tensor::to_dtype`].
    ///
    /// ```
    /// use ferrocm_ops::{DType, Device, Tensor};
    /// let d = Tensor::from_slice(&[1.5f32, -2.0], &[2], &Device::Cpu)?.to_dyn();
    /// let i = d.to_dtype(DType::I64)?;
    /// assert_eq!(i.dtype()?, DType::I64);
    /// assert_eq!(i.to_f64_vec()?, vec![1.0, -2.0]); // truncated toward zero
    /// assert_eq!(d.to_dtype(DType::BF16)?.to_f64_vec()?, vec![1.5, -2.0]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::FormatMismatch`] for block-quantized storage; [`Error::Host`]
    /// when allocation or the launch fails.
    pub fn to_dtype(&self, dtype: DType) -> Result<Self> {
        with_dtype!(self, "to_dtype", |t| match dtype {
            DType::F32 => Ok(t.to_dtype::<f32>()?.into()),
            DType::F16 => Ok(t.to_dtype::<f16>()?.into()),
            DType::BF16 => Ok(t.to_dtype::<bf16>()?.into()),
            DType::U8 => Ok(t.to_dtype::<u8>()?.into()),
            DType::U32 => Ok(t.to_dtype::<u32>()?.into()),
            DType::I64 => Ok(t.to_dtype::<i64>()?.into()),
        })
    }

    /// Reduces `dims` with `op`, see [`Tensor::reduce`].
    ///
    /// ```
    /// use ferrocm_ops::{DType, Device, Reduce, Tensor};
    /// let d = Tensor::from_slice(&[1u32, 2, 3, 4], &[2, 2], &Device::Cpu)?.to_dyn();
    /// let s = d.reduce(Reduce::Sum, &[-1], false)?;
    /// assert_eq!(s.dtype()?, DType::U32);
    /// assert_eq!(s.to_f64_vec()?, vec![3.0, 7.0]);
    /// assert!(d.reduce(Reduce::Mean, &[0], false).is_err()); // integer mean
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::FormatMismatch`] for block-quantized storage; as
    /// [`Tensor::reduce`]: [`Error::DimOutOfRange`], [`Error::DuplicateDim`],
    /// [`Error::UnsupportedDType`], [`Error::EmptyReduction`],
    /// [`Error::TooLarge`], [`Error::Host`].
    pub fn reduce(&self, op: Reduce, dims: impl Dims, keepdim: bool) -> Result<Self> {
        let dims = &dims.resolve(op.name(), self.shape())?[..];
        with_dtype!(self, op.name(), |t| Ok(t.reduce(op, dims, keepdim)?.into()))
    }

    /// Index (u32) of the first maximum over `dims`.
    ///
    /// ```
    /// use ferrocm_ops::{DType, Device, Tensor};
    /// let d = Tensor::from_slice(&[1.0f32, 5.0, 3.0, 4.0, 2.0, 6.0], &[2, 3], &Device::Cpu)?.to_dyn();
    /// let i = d.argmax(&[-1], false)?;
    /// assert_eq!(i.dtype()?, DType::U32);
    /// assert_eq!(i.to_f64_vec()?, vec![1.0, 2.0]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::FormatMismatch`] for block-quantized storage; as
    /// [`Tensor::argmax`]: [`Error::DimOutOfRange`], [`Error::DuplicateDim`],
    /// [`Error::EmptyReduction`], [`Error::TooLarge`], [`Error::Host`].
    pub fn argmax(&self, dims: impl Dims, keepdim: bool) -> Result<Self> {
        let dims = &dims.resolve("argmax", self.shape())?[..];
        with_dtype!(self, "argmax", |t| Ok(t.argmax(dims, keepdim)?.into()))
    }

    /// Index (u32) of the first minimum over `dims`.
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let d = Tensor::from_slice(&[1.0f32, 5.0, 3.0, 4.0, 2.0, 6.0], &[2, 3], &Device::Cpu)?.to_dyn();
    /// assert_eq!(d.argmin(&[-1], false)?.to_f64_vec()?, vec![0.0, 1.0]);
    /// assert_eq!(d.argmin(&[0], true)?.shape(), &[1, 3]);
    /// assert_eq!(d.argmin(&[0], true)?.to_f64_vec()?, vec![0.0, 1.0, 0.0]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`DynTensor::argmax`]: [`Error::FormatMismatch`],
    /// [`Error::DimOutOfRange`], [`Error::DuplicateDim`],
    /// [`Error::EmptyReduction`], [`Error::TooLarge`], [`Error::Host`].
    pub fn argmin(&self, dims: impl Dims, keepdim: bool) -> Result<Self> {
        let dims = &dims.resolve("argmin", self.shape())?[..];
        with_dtype!(self, "argmin", |t| Ok(t.argmin(dims, keepdim)?.into()))
    }

    /// Softmax over the last dim (float dtypes).
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let d = Tensor::from_slice(&[0.0f32, 0.0], &[1, 2], &Device::Cpu)?.to_dyn();
    /// assert_eq!(d.softmax()?.to_f64_vec()?, vec![0.5, 0.5]);
    /// assert!(Tensor::<u32>::zeros(&[2], &Device::Cpu)?.to_dyn().softmax().is_err());
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::FormatMismatch`] for block-quantized storage;
    /// [`Error::UnsupportedDType`] for integer dtypes; [`Error::Host`] when
    /// allocation or the launch fails.
    pub fn softmax(&self) -> Result<Self> {
        with_dtype!(self, "softmax", |t| Ok(t.softmax()?.into()))
    }

    /// Log-softmax over the last dim (float dtypes).
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let d = Tensor::from_slice(&[3.0f32, 3.0], &[1, 2], &Device::Cpu)?.to_dyn();
    /// for v in d.log_softmax()?.to_f64_vec()? {
    ///     assert!((v + std::f64::consts::LN_2).abs() < 1e-6); // ln(1/2)
    /// }
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`DynTensor::softmax`]: [`Error::FormatMismatch`],
    /// [`Error::UnsupportedDType`], [`Error::Host`].
    pub fn log_softmax(&self) -> Result<Self> {
        with_dtype!(self, "log_softmax", |t| Ok(t.log_softmax()?.into()))
    }

    /// This tensor if contiguous, else a contiguous copy.
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let d = Tensor::from_slice(&[1u8, 2, 3, 4, 5, 6], &[2, 3], &Device::Cpu)?.to_dyn();
    /// let c = d.transpose(0, 1)?.contiguous()?;
    /// assert!(c.layout().is_contiguous());
    /// assert_eq!(c.to_f64_vec()?, vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::FormatMismatch`] for block-quantized storage; [`Error::Host`]
    /// when allocation or the copy fails.
    pub fn contiguous(&self) -> Result<Self> {
        with_dtype!(self, "contiguous", |t| Ok(t.contiguous()?.into()))
    }

    /// A copy on `device` (block storage is copied byte for byte).
    ///
    /// ```
    /// # use ferrocm_ops::WaveSize;
    /// use ferrocm_ops::{Device, DynTensor, Format, QuantFormat, Tensor};
    /// let emu = Device::emulator(WaveSize::Wave32);
    /// let d = Tensor::from_slice(&[1i64, 2], &[2], &Device::Cpu)?.to_dyn().to_device(&emu)?;
    /// assert!(d.device() == &emu);
    /// assert_eq!(d.to_f64_vec()?, vec![1.0, 2.0]);
    /// let q8_0 = QuantFormat::Q8_0;
    /// let w = DynTensor::from_blocks(&[7u8; 34], q8_0, &[32], &Device::Cpu)?.to_device(&emu)?;
    /// assert_eq!(w.format(), Format::Blocks(q8_0));
    /// assert_eq!(w.shared_storage().len_bytes(), 34);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Host`] when reading back, allocating or uploading fails.
    pub fn to_device(&self, device: &Device) -> Result<Self> {
        if let Format::Blocks(_) = self.format() {
            let raw = self.storage.raw().typed::<u8>().ok_or(Error::TooLarge {
                op: "to_device",
                shape: self.shape().to_vec(),
            })?;
            let buffer = raw.to_device(device)?.into_raw();
            return Ok(Self {
                storage: Arc::new(Storage::blocks(
                    buffer,
                    match self.format() {
                        Format::Blocks(b) => b,
                        _ => unreachable!("matched above"),
                    },
                )),
                layout: self.layout.clone(),
            });
        }
        with_dtype!(self, "to_device", |t| Ok(t.to_device(device)?.into()))
    }

    /// The elements as f64, in row-major order (for inspection and tests).
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor, bf16};
    /// let d = Tensor::from_slice(&[1u8, 255], &[2], &Device::Cpu)?.to_dyn();
    /// assert_eq!(d.to_f64_vec()?, vec![1.0, 255.0]);
    /// let h = Tensor::from_slice(&[bf16::from_f32(0.5)], &[1], &Device::Cpu)?.to_dyn();
    /// assert_eq!(h.to_f64_vec()?, vec![0.5]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::FormatMismatch`] for block-quantized storage; [`Error::Host`]
    /// when the copy of a strided view or the read-back fails.
    pub fn to_f64_vec(&self) -> Result<Vec<f64>> {
        with_dtype!(self, "to_f64_vec", |t| Ok(t
            .to_vec()?
            .into_iter()
            .map(|v| v.to_f64())
            .collect()))
    }

    /// Swaps two dims (a view); negative dims count from the end.
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let d = Tensor::from_slice(&[1u32, 2, 3, 4, 5, 6], &[2, 3], &Device::Cpu)?.to_dyn();
    /// let t = d.transpose(0, -1)?;
    /// assert_eq!(t.shape(), &[3, 2]);
    /// assert_eq!(t.to_f64_vec()?, vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    /// assert!(d.transpose(0, 2).is_err());
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::DimOutOfRange`] when a dim is outside `-rank..rank`;
    /// [`Error::FormatMismatch`] for block-quantized storage.
    pub fn transpose(&self, d0: impl Dim, d1: impl Dim) -> Result<Self> {
        let (d0, d1) = (
            resolve("transpose", d0, self.shape())?,
            resolve("transpose", d1, self.shape())?,
        );
        self.dense_view("transpose", self.layout.transpose(d0, d1))
    }

    /// Reorders dims (a view): dim `k` of the result is dim `perm[k]`.
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let d = Tensor::<f32>::zeros(&[2, 3, 4], &Device::Cpu)?.to_dyn();
    /// assert_eq!(d.permute(&[-1, 0, 1])?.shape(), &[4, 2, 3]);
    /// assert!(d.permute(&[0, 1]).is_err()); // one dim short
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::DimOutOfRange`] when a dim is outside `-rank..rank`;
    /// [`Error::FormatMismatch`] for block-quantized storage;
    /// [`Error::BadPermutation`] when `perm` does not name each dim once.
    pub fn permute(&self, perm: impl Dims) -> Result<Self> {
        let perm = perm.resolve("permute", self.shape())?;
        self.dense_view("permute", self.layout.permute(&perm))
    }

    /// Elements `start..start + len` along `dim` (a view; a negative dim
    /// counts from the end).
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let d = Tensor::from_slice(&[1u32, 2, 3, 4, 5, 6], &[2, 3], &Device::Cpu)?.to_dyn();
    /// assert_eq!(d.narrow(-1, 1, 2)?.to_f64_vec()?, vec![2.0, 3.0, 5.0, 6.0]);
    /// assert!(d.narrow(0, 1, 2).is_err()); // 1..3 is past the end of a dim of 2
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::DimOutOfRange`] when `dim` is outside `-rank..rank`;
    /// [`Error::FormatMismatch`] for block-quantized storage;
    /// [`Error::NarrowOutOfRange`] when `start + len` exceeds the dim.
    pub fn narrow(&self, dim: impl Dim, start: usize, len: usize) -> Result<Self> {
        let dim = resolve("narrow", dim, self.shape())?;
        self.dense_view("narrow", self.layout.narrow(dim, start, len))
    }

    /// Broadcasts to `shape` (a view).
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let d = Tensor::from_slice(&[1i64, 2], &[2], &Device::Cpu)?.to_dyn();
    /// assert_eq!(d.broadcast_as(&[2, 2])?.to_f64_vec()?, vec![1.0, 2.0, 1.0, 2.0]);
    /// assert!(d.broadcast_as(&[3]).is_err());
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::FormatMismatch`] for block-quantized storage;
    /// [`Error::BroadcastIncompatible`] when `shape` is not a broadcast of
    /// this shape; [`Error::TooLarge`] when its element count overflows.
    pub fn broadcast_as(&self, shape: &[usize]) -> Result<Self> {
        self.dense_view("broadcast_as", self.layout.broadcast_as(shape))
    }

    /// The same elements with another shape (a view when contiguous, else a copy).
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let d = Tensor::<u32>::arange(0, 6, &Device::Cpu)?.to_dyn();
    /// let r = d.reshape(&[2, 3])?;
    /// assert_eq!(r.shape(), &[2, 3]);
    /// assert_eq!(r.transpose(0, 1)?.reshape(&[6])?.to_f64_vec()?, vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
    /// assert!(d.reshape(&[4]).is_err());
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::FormatMismatch`] for block-quantized storage;
    /// [`Error::ReshapeIncompatible`] when the element counts differ;
    /// [`Error::TooLarge`] when `shape`'s count overflows; [`Error::Host`]
    /// when the copy of a non-contiguous tensor fails.
    pub fn reshape(&self, shape: &[usize]) -> Result<Self> {
        with_dtype!(self, "reshape", |t| Ok(t.reshape(shape)?.into()))
    }

    fn dense_view(&self, op: &'static str, layout: Result<Layout>) -> Result<Self> {
        self.dtype_for(op)?;
        Ok(Self {
            storage: self.storage.clone(),
            layout: layout?,
        })
    }

    /// The storage and the layout, for an in-place op (`slice_set`).
    pub(crate) fn parts_mut(&mut self) -> (&mut Arc<Storage>, &mut Layout) {
        (&mut self.storage, &mut self.layout)
    }

    pub(crate) fn same_dtype(&self, op: &'static str, other: &Self) -> Result<()> {
        let (a, b) = (self.dtype_for(op)?, other.dtype_for(op)?);
        if a != b {
            return Err(Error::DTypeMismatch { op, lhs: a, rhs: b });
        }
        Ok(())
    }
}

impl<T: WithDType> Tensor<T> {
    /// The run-time typed view of this tensor (an `Arc` clone).
    ///
    /// ```
    /// use ferrocm_ops::{DType, Device, Tensor};
    /// let t = Tensor::from_slice(&[1.0f32, 2.0], &[2], &Device::Cpu)?;
    /// let d = t.to_dyn();
    /// assert_eq!(d.dtype()?, DType::F32);
    /// assert_eq!(d.shape(), &[2]);
    /// assert!(std::sync::Arc::ptr_eq(d.shared_storage(), t.shared_storage())); // no copy
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    pub fn to_dyn(&self) -> DynTensor {
        self.clone().into()
    }
}
