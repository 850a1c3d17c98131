//! Dim arguments: a dim counted from the front (`0`, `1`, ...) or, with a
//! negative signed integer, from the back (`-1` is the last dim), as in
//! PyTorch and NumPy.
//!
//! Every method that takes a dim takes `impl Dim`, and every method that
//! takes a list of dims takes `impl Dims` (a reference to an array, a slice
//! or a `Vec` of dims), so `t.sum(&[-1], false)`, `t.sum(&[0, 2], false)`
//! and `t.sum(&dims, false)` with `dims: Vec<usize>` all work. A dim outside `-rank..rank` is [`Error::DimOutOfRange`], naming
//! the dim as given.
//!
//! ```
//! use ferrocm_ops::{Device, Tensor};
//! let x = Tensor::<f32>::ones(&[2, 3, 4], &Device::Cpu)?;
//! assert_eq!(x.sum(&[-1], false)?.shape(), &[2, 3]);
//! assert_eq!(x.transpose(0, -1)?.shape(), &[4, 3, 2]);
//! assert_eq!(x.narrow(-2, 1, 2)?.shape(), &[2, 2, 4]);
//! let err = x.sum(&[3], false).unwrap_err();
//! assert_eq!(err.to_string(), "sum: dim 3 out of range for a rank-3 tensor of shape [2, 3, 4]");
//! assert!(x.sum(&[-4], false).is_err());
//! # Ok::<(), ferrocm_ops::Error>(())
//! ```

use crate::core::error::{Error, Result};

/// One dim: unsigned integers count from the front, signed ones from the
/// back when negative (`-1` is the last dim).
///
/// ```
/// use ferrocm_ops::Dim;
/// assert_eq!(2usize.index(3), Some(2));
/// assert_eq!((-1i32).index(3), Some(2));
/// assert_eq!((-4i64).index(3), None);
/// assert_eq!(3u32.index(3), None);
/// ```
pub trait Dim: Copy {
    /// The dim this names in a tensor of `rank` dims, or `None` when it is
    /// outside `-rank..rank`.
    fn index(self, rank: usize) -> Option<usize>;
    /// The dim as given (for messages); exact for every integer type.
    fn given(self) -> i128;
}

macro_rules! unsigned_dim {
    ($($t:ty),*) => {$(
        impl Dim for $t {
            fn index(self, rank: usize) -> Option<usize> {
                usize::try_from(self).ok().filter(|&d| d < rank)
            }
            fn given(self) -> i128 {
                self as i128
            }
        }
    )*};
}
unsigned_dim!(usize, u8, u16, u32, u64);

macro_rules! signed_dim {
    ($($t:ty),*) => {$(
        impl Dim for $t {
            fn index(self, rank: usize) -> Option<usize> {
                let d = self as i128;
                let d = if d < 0 { d + rank as i128 } else { d };
                (0..rank as i128).contains(&d).then_some(d as usize)
            }
            fn given(self) -> i128 {
                self as i128
            }
        }
    )*};
}
signed_dim!(isize, i8, i16, i32, i64);

/// A list of dims (each a [`Dim`]): a reference to an array, a slice or a
/// `Vec`.
///
/// ```
/// use ferrocm_ops::Dims;
/// let shape = [2, 3, 4];
/// assert_eq!((&[-1, 0]).resolve("sum", &shape).unwrap(), vec![2, 0]);
/// assert_eq!((&vec![1usize]).resolve("sum", &shape).unwrap(), vec![1]);
/// assert!((&[5]).resolve("sum", &shape).is_err());
/// ```
pub trait Dims {
    /// Each dim as an index into `shape`, in the order given.
    ///
    /// # Errors
    /// [`Error::DimOutOfRange`] for the first dim outside `-rank..rank`.
    fn resolve(&self, op: &'static str, shape: &[usize]) -> Result<Vec<usize>>;
}

fn resolve_all<D: Dim>(op: &'static str, dims: &[D], shape: &[usize]) -> Result<Vec<usize>> {
    dims.iter().map(|&d| resolve(op, d, shape)).collect()
}

// Only references: `t.sum(&[0], false)` as before, and clippy's
// needless-borrow lint has no by-value impl to suggest in users' code.
impl<D: Dim> Dims for &[D] {
    fn resolve(&self, op: &'static str, shape: &[usize]) -> Result<Vec<usize>> {
        resolve_all(op, self, shape)
    }
}

impl<D: Dim, const N: usize> Dims for &[D; N] {
    fn resolve(&self, op: &'static str, shape: &[usize]) -> Result<Vec<usize>> {
        resolve_all(op, *self, shape)
    }
}

impl<D: Dim> Dims for &Vec<D> {
    fn resolve(&self, op: &'static str, shape: &[usize]) -> Result<Vec<usize>> {
        resolve_all(op, self, shape)
    }
}

/// `dim` as an index into `shape`.
///
/// # Errors
/// [`Error::DimOutOfRange`] when it is outside `-rank..rank`.
pub(crate) fn resolve(op: &'static str, dim: impl Dim, shape: &[usize]) -> Result<usize> {
    dim.index(shape.len()).ok_or_else(|| Error::DimOutOfRange {
        op,
        dim: dim.given(),
        rank: shape.len(),
        shape: shape.to_vec(),
    })
}
