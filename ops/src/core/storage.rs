//! Storage with a run-time element type: the memory every tensor views.
//!
//! A [`Storage`] is untyped device memory ([`RawBuffer`]) plus its
//! [`Format`]: dense elements of a [`DType`], or blocks of a quantized format
//! (GGML's Q4_0, Q4_K, ...: [`QuantFormat`]) that are no element type. [`Tensor<T>`](crate::Tensor)
//! is the typed view of a dense storage; [`DynTensor`](crate::DynTensor) the
//! untyped one. Both share the same `Arc<Storage>`: converting is free.

use crate::core::dtype::DType;
use crate::core::error::{Error, Result};
use crate::quant::QuantFormat;
use ferrocm_host::{Device, DeviceBuffer, RawBuffer};

/// What a storage holds.
///
/// ```
/// use ferrocm_ops::{DType, Format};
/// assert_eq!(Format::Dense(DType::BF16).to_string(), "bf16");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Format {
    /// Elements of a dtype.
    Dense(DType),
    /// Blocks of a quantized format.
    Blocks(QuantFormat),
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Format::Dense(d) => write!(f, "{d}"),
            Format::Blocks(b) => write!(f, "{b}"),
        }
    }
}

/// Device memory and its format, shared (through an `Arc`) by every tensor
/// that views it.
///
/// ```
/// use ferrocm_ops::{DType, Device, Format, Tensor};
/// let t = Tensor::from_slice(&[1u32, 2, 3], &[3], &Device::Cpu)?;
/// let s = t.shared_storage();
/// assert_eq!(s.format(), Format::Dense(DType::U32));
/// assert_eq!(s.len_bytes(), 12);
/// # Ok::<(), ferrocm_ops::Error>(())
/// ```
pub struct Storage {
    buffer: RawBuffer,
    format: Format,
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Storage({}, {:?})", self.format, self.buffer)
    }
}

impl Storage {
    /// Dense storage of `T`s.
    pub(crate) fn dense<T: crate::WithDType>(buffer: DeviceBuffer<T>) -> Self {
        Self {
            buffer: buffer.into_raw(),
            format: Format::Dense(T::DTYPE),
        }
    }

    /// The memory, given up.
    pub(crate) fn into_raw(self) -> RawBuffer {
        self.buffer
    }

    /// Raw blocks of `format` (the byte count is checked by the caller).
    pub(crate) fn blocks(buffer: RawBuffer, format: QuantFormat) -> Self {
        Self {
            buffer,
            format: Format::Blocks(format),
        }
    }

    /// The format (example: [`Storage`]).
    pub fn format(&self) -> Format {
        self.format
    }

    /// The device.
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let t = Tensor::from_slice(&[1u8, 2], &[2], &Device::Cpu)?;
    /// let s = t.shared_storage();
    /// assert_eq!(s.device(), &Device::Cpu);
    /// assert_eq!(s.raw().len_bytes(), s.len_bytes());
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    pub fn device(&self) -> &Device {
        self.buffer.device()
    }

    /// Size in bytes (example: [`Storage`]).
    pub fn len_bytes(&self) -> usize {
        self.buffer.len_bytes()
    }

    /// The untyped memory (example: [`Storage::device`]).
    pub fn raw(&self) -> &RawBuffer {
        &self.buffer
    }

    /// The memory, mutable (for the one in-place op, `slice_set`, on a
    /// storage no other tensor shares).
    pub(crate) fn raw_mut(&mut self) -> &mut RawBuffer {
        &mut self.buffer
    }

    /// The memory as `T`s, when it holds dense `T`s.
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let t = Tensor::from_slice(&[1i64], &[1], &Device::Cpu)?;
    /// assert!(t.shared_storage().typed::<i64>().is_ok());
    /// assert!(t.shared_storage().typed::<u32>().is_err());
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`crate::Error::FormatMismatch`] when the storage holds another dtype or
    /// blocks of a quantized format.
    pub fn typed<T: crate::WithDType>(&self) -> Result<&DeviceBuffer<T>> {
        match (self.format, self.buffer.typed::<T>()) {
            (Format::Dense(d), Some(b)) if d == T::DTYPE => Ok(b),
            _ => Err(Error::FormatMismatch {
                op: "typed view",
                expected: Format::Dense(T::DTYPE),
                got: self.format,
            }),
        }
    }
}
