//! [`DynTensor`]: a tensor whose element type is known only at run time.
//!
//! It views the same [`Storage`] as [`Tensor<T>`]: converting either way is an
//! `Arc` clone plus a dtype check. Ops dispatch on the dtype inside this file
//! (one `match` here), so code that learns dtypes from a file (a model
//! loader) calls them without a match of its own. Storage holding blocks of
//! a quantized format is a `DynTensor` too; elementwise ops refuse it with
//! [`Error::FormatMismatch`] until the quantized ops land.

use crate::dim::{Dim, Dims, resolve};
use crate::dtype::{DType, WithDType};
use crate::error::{Error, Result};
use crate::layout::{Layout, checked_count};
use crate::storage::{BlockFormat, Format, Storage};
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

/// Runs `$body` with `$t` bound to the typed tensor of `$self`'s dtype.
macro_rules! with_dtype {
    ($self:expr, $op:expr, |$t:ident| $body:expr) => {{
        let d = $self;
        match d.dtype_for($op)? {
            DType::F32 => {
                let $t = d.typed_unchecked::<f32>()?;
                $body
            }
            DType::F16 => {
                let $t = d.typed_unchecked::<f16>()?;
                $body
            }
            DType::BF16 => {
                let $t = d.typed_unchecked::<bf16>()?;
                $body
            }
            DType::U8 => {
                let $t = d.typed_unchecked::<u8>()?;
                $body
            }
            DType::U32 => {
                let $t = d.typed_unchecked::<u32>()?;
                $body
            }
            DType::I64 => {
                let $t = d.typed_unchecked::<i64>()?;
                $body
            }
        }
    }};
}

impl DynTensor {
    /// Raw blocks of a quantized `format` holding `shape`'s elements
    /// (GGML weights, later): `bytes` must be exactly the blocks' bytes.
    ///
    /// ```
    /// use ferrocm_ops::{BlockFormat, Device, DynTensor, Format};
    /// let q8_0 = BlockFormat { name: "q8_0", block_elems: 32, block_bytes: 34 };
    /// let w = DynTensor::from_blocks(&[0u8; 68], q8_0, &[2, 32], &Device::Cpu)?;
    /// assert_eq!(w.format(), Format::Blocks(q8_0));
    /// assert!(w.unary(ferrocm_ops::Unary::Exp, 0.0).is_err()); // no elementwise ops on blocks
    /// assert!(DynTensor::from_blocks(&[0u8; 67], q8_0, &[2, 32], &Device::Cpu).is_err());
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    pub fn from_blocks(
        bytes: &[u8],
        format: BlockFormat,
        shape: &[usize],
        device: &Device,
    ) -> Result<Self> {
        let n = checked_count("from_blocks", shape, 1)?;
        let want = format.bytes_for(n).ok_or(Error::TooLarge {
            op: "from_blocks",
            shape: shape.to_vec(),
        })?;
        if want != bytes.len() {
            return Err(Error::DataLength {
                op: "from_blocks",
                shape: shape.to_vec(),
                got: bytes.len(),
            });
        }
        let buffer = device.upload(bytes)?.into_raw();
        Ok(Self {
            storage: Arc::new(Storage::blocks(buffer, format)),
            layout: Layout::contiguous(shape),
        })
    }

    /// The format of the storage.
    pub fn format(&self) -> Format {
        self.storage.format()
    }

    /// The dtype, or an error for block-quantized storage.
    pub fn dtype(&self) -> Result<DType> {
        self.dtype_for("dtype")
    }

    fn dtype_for(&self, op: &'static str) -> Result<DType> {
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
    pub fn shape(&self) -> &[usize] {
        self.layout.shape()
    }

    /// Number of dims.
    pub fn rank(&self) -> usize {
        self.layout.rank()
    }

    /// Number of elements.
    pub fn elem_count(&self) -> usize {
        self.layout.elem_count()
    }

    /// The layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The device.
    pub fn device(&self) -> &Device {
        self.storage.device()
    }

    /// The shared storage.
    pub fn shared_storage(&self) -> &Arc<Storage> {
        &self.storage
    }

    /// The typed view (an `Arc` clone), or an error naming both formats.
    pub fn typed<T: WithDType>(&self) -> Result<Tensor<T>> {
        Tensor::from_storage(self.storage.clone(), self.layout.clone())
    }

    fn typed_unchecked<T: WithDType>(&self) -> Result<Tensor<T>> {
        self.typed()
    }

    /// Elementwise `op` (float dtypes), see [`Tensor::unary`].
    pub fn unary(&self, op: Unary, p: f32) -> Result<Self> {
        with_dtype!(self, op.name(), |t| Ok(t.unary(op, p)?.into()))
    }

    /// `x * mul + add`, see [`Tensor::affine`].
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
    pub fn binary(&self, rhs: &Self, op: Binary) -> Result<Self> {
        self.same_dtype(op.name(), rhs)?;
        with_dtype!(self, op.name(), |t| Ok(t.binary(&rhs.typed()?, op)?.into()))
    }

    /// Comparison with broadcasting, giving u8 0/1; both of one dtype.
    pub fn cmp(&self, rhs: &Self, op: Cmp) -> Result<Self> {
        self.same_dtype(op.name(), rhs)?;
        with_dtype!(self, op.name(), |t| Ok(t.cmp(&rhs.typed()?, op)?.into()))
    }

    /// `self != 0 ? on_true : on_false` (mask u8, u32 or i64; values of one dtype).
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
    pub fn reduce(&self, op: Reduce, dims: impl Dims, keepdim: bool) -> Result<Self> {
        with_dtype!(self, op.name(), |t| Ok(t
            .reduce(op, &dims, keepdim)?
            .into()))
    }

    /// Index (u32) of the first maximum over `dims`.
    pub fn argmax(&self, dims: impl Dims, keepdim: bool) -> Result<Self> {
        with_dtype!(self, "argmax", |t| Ok(t.argmax(&dims, keepdim)?.into()))
    }

    /// Index (u32) of the first minimum over `dims`.
    pub fn argmin(&self, dims: impl Dims, keepdim: bool) -> Result<Self> {
        with_dtype!(self, "argmin", |t| Ok(t.argmin(&dims, keepdim)?.into()))
    }

    /// Softmax over the last dim (float dtypes).
    pub fn softmax(&self) -> Result<Self> {
        with_dtype!(self, "softmax", |t| Ok(t.softmax()?.into()))
    }

    /// Log-softmax over the last dim (float dtypes).
    pub fn log_softmax(&self) -> Result<Self> {
        with_dtype!(self, "log_softmax", |t| Ok(t.log_softmax()?.into()))
    }

    /// This tensor if contiguous, else a contiguous copy.
    pub fn contiguous(&self) -> Result<Self> {
        with_dtype!(self, "contiguous", |t| Ok(t.contiguous()?.into()))
    }

    /// A copy on `device` (block storage is copied byte for byte).
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
    pub fn to_f64_vec(&self) -> Result<Vec<f64>> {
        with_dtype!(self, "to_f64_vec", |t| Ok(t
            .to_vec()?
            .into_iter()
            .map(|v| v.to_f64())
            .collect()))
    }

    /// Swaps two dims (a view).
    pub fn transpose(&self, d0: impl Dim, d1: impl Dim) -> Result<Self> {
        let (d0, d1) = (
            resolve("transpose", d0, self.shape())?,
            resolve("transpose", d1, self.shape())?,
        );
        self.dense_view("transpose", self.layout.transpose(d0, d1))
    }

    /// Reorders dims (a view).
    pub fn permute(&self, perm: impl Dims) -> Result<Self> {
        let perm = perm.resolve("permute", self.shape())?;
        self.dense_view("permute", self.layout.permute(&perm))
    }

    /// Elements `start..start + len` along `dim` (a view).
    pub fn narrow(&self, dim: impl Dim, start: usize, len: usize) -> Result<Self> {
        let dim = resolve("narrow", dim, self.shape())?;
        self.dense_view("narrow", self.layout.narrow(dim, start, len))
    }

    /// Broadcasts to `shape` (a view).
    pub fn broadcast_as(&self, shape: &[usize]) -> Result<Self> {
        self.dense_view("broadcast_as", self.layout.broadcast_as(shape))
    }

    /// The same elements with another shape (a view when contiguous, else a copy).
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

    fn same_dtype(&self, op: &'static str, other: &Self) -> Result<()> {
        let (a, b) = (self.dtype_for(op)?, other.dtype_for(op)?);
        if a != b {
            return Err(Error::DTypeMismatch { op, lhs: a, rhs: b });
        }
        Ok(())
    }
}

impl<T: WithDType> Tensor<T> {
    /// The run-time typed view of this tensor (an `Arc` clone).
    pub fn to_dyn(&self) -> DynTensor {
        self.clone().into()
    }
}
