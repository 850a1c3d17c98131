//! The op library's error type.

use crate::DType;

/// Everything an op can refuse. Messages name the op and the shapes, dtypes
/// or devices involved.
///
/// ```
/// use ferrocm_ops::{Device, Error, Tensor};
/// let a = Tensor::<f32>::zeros(&[2, 3], &Device::Cpu)?;
/// let b = Tensor::<f32>::zeros(&[4], &Device::Cpu)?;
/// match a.add(&b) {
///     Err(Error::BroadcastIncompatible { op, lhs, rhs }) => {
///         assert_eq!((op, lhs, rhs), ("add", vec![2, 3], vec![4]));
///     }
///     other => panic!("{other:?}"),
/// }
/// # Ok::<(), ferrocm_ops::Error>(())
/// ```
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum Error {
    /// Shapes that must be equal are not.
    #[error("{op}: shape mismatch {lhs:?} vs {rhs:?}")]
    ShapeMismatch {
        /// Op.
        op: &'static str,
        /// First shape.
        lhs: Vec<usize>,
        /// Second shape.
        rhs: Vec<usize>,
    },
    /// Shapes that cannot broadcast together.
    #[error("{op}: shapes {lhs:?} and {rhs:?} do not broadcast")]
    BroadcastIncompatible {
        /// Op.
        op: &'static str,
        /// First shape.
        lhs: Vec<usize>,
        /// Second shape.
        rhs: Vec<usize>,
    },
    /// Operands on different devices.
    #[error("{op}: operands on different devices ({lhs} and {rhs})")]
    DeviceMismatch {
        /// Op.
        op: &'static str,
        /// First device.
        lhs: String,
        /// Second device.
        rhs: String,
    },
    /// A dim index past the rank.
    #[error("{op}: dim {dim} out of range for a rank-{rank} tensor of shape {shape:?}")]
    DimOutOfRange {
        /// Op.
        op: &'static str,
        /// The dim as given (negative counts from the end).
        dim: i128,
        /// The rank.
        rank: usize,
        /// The shape.
        shape: Vec<usize>,
    },
    /// A dim listed twice.
    #[error("{op}: dim {dim} given twice in {dims:?}")]
    DuplicateDim {
        /// Op.
        op: &'static str,
        /// The repeated dim.
        dim: usize,
        /// All dims given.
        dims: Vec<usize>,
    },
    /// max/min/argmax/argmin over an empty dim.
    #[error("{op}: reduction over an empty dim (shape {shape:?}, dims {dims:?}) has no value")]
    EmptyReduction {
        /// Op.
        op: &'static str,
        /// Shape.
        shape: Vec<usize>,
        /// Reduced dims.
        dims: Vec<usize>,
    },
    /// A reshape that changes the element count.
    #[error("{op}: cannot view shape {from:?} ({from_count} elements) as {to:?} ({to_count} elements)", from_count = from.iter().product::<usize>(), to_count = to.iter().product::<usize>())]
    ReshapeIncompatible {
        /// Op.
        op: &'static str,
        /// Current shape.
        from: Vec<usize>,
        /// Requested shape.
        to: Vec<usize>,
    },
    /// A narrow past the end of a dim.
    // The end is printed as start + len only when that does not overflow.
    #[error("{op}: range {start}..{} out of bounds for dim {dim} of size {size}", start.checked_add(*len).map_or_else(|| format!("{start} + {len} (overflows)"), |e| e.to_string()))]
    NarrowOutOfRange {
        /// Op.
        op: &'static str,
        /// Dim.
        dim: usize,
        /// Start.
        start: usize,
        /// Length.
        len: usize,
        /// The dim's size.
        size: usize,
    },
    /// A permutation that is not one.
    #[error("{op}: {perm:?} is not a permutation of 0..{rank}")]
    BadPermutation {
        /// Op.
        op: &'static str,
        /// Given permutation.
        perm: Vec<usize>,
        /// Rank.
        rank: usize,
    },
    /// An op not defined for a dtype.
    #[error("{op}: not supported for dtype {dtype}")]
    UnsupportedDType {
        /// Op.
        op: &'static str,
        /// The dtype.
        dtype: DType,
    },
    /// Data of the wrong length for a shape.
    #[error("{op}: {got} elements given for shape {shape:?}")]
    DataLength {
        /// Op.
        op: &'static str,
        /// Shape.
        shape: Vec<usize>,
        /// Elements given.
        got: usize,
    },
    /// A shape whose element count or byte size overflows.
    #[error("{op}: shape {shape:?} is too large")]
    TooLarge {
        /// Op.
        op: &'static str,
        /// Shape.
        shape: Vec<usize>,
    },
    /// A storage or tensor of another format than the one asked for.
    #[error("{op}: expected {expected}, got {got}")]
    FormatMismatch {
        /// Op.
        op: &'static str,
        /// Format asked for.
        expected: crate::Format,
        /// Format held.
        got: crate::Format,
    },
    /// A parameter outside its domain (`rand` with `lo > hi`, `randn` with a
    /// negative or NaN std).
    #[error("{op}: {what}")]
    BadParameter {
        /// The op.
        op: &'static str,
        /// What is wrong, with the values.
        what: String,
    },
    /// Operands whose dtypes must match do not (run-time typed tensors).
    #[error("{op}: dtype mismatch {lhs} vs {rhs}")]
    DTypeMismatch {
        /// Op.
        op: &'static str,
        /// First dtype.
        lhs: DType,
        /// Second dtype.
        rhs: DType,
    },
    /// A GGUF file that is truncated or corrupt: what is wrong, and where.
    #[error("gguf: {what} (at byte {offset})")]
    Gguf {
        /// What is wrong, with the values read.
        what: String,
        /// Byte offset in the file.
        offset: u64,
    },
    /// A file that cannot be opened, mapped or written.
    #[error("{path}: {message}")]
    Io {
        /// The path as given.
        path: String,
        /// The operating system's message.
        message: String,
    },
    /// Anything the host layer reports (allocation, launch, sanitizer, GPU).
    #[error(transparent)]
    Host(#[from] ferrocm_host::Error),
}

/// `Result` with the ops [`Error`].
///
/// ```
/// fn twice(t: &ferrocm_ops::Tensor<f32>) -> ferrocm_ops::Result<ferrocm_ops::Tensor<f32>> {
///     t.affine(2.0, 0.0)
/// }
/// let t = ferrocm_ops::Tensor::from_slice(&[1.5f32], &[1], &ferrocm_ops::Device::Cpu)?;
/// assert_eq!(twice(&t)?.to_vec()?, vec![3.0]);
/// # Ok::<(), ferrocm_ops::Error>(())
/// ```
pub type Result<T, E = Error> = std::result::Result<T, E>;
