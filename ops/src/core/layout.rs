//! Shapes, strides and offsets: how a tensor's logical elements map onto its storage.

use crate::core::error::{Error, Result};

/// A strided view: element `[i0, i1, ...]` is at `offset + Σ ik * strides[k]`
/// (in elements). A broadcast dim has stride 0.
///
/// ```
/// use ferrocm_ops::Layout;
/// let l = Layout::contiguous(&[2, 3]);
/// assert_eq!(l.strides(), &[3, 1]);
/// let t = l.transpose(0, 1).unwrap();
/// assert_eq!(t.shape(), &[3, 2]);
/// assert!(!t.is_contiguous());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    shape: Vec<usize>,
    strides: Vec<usize>,
    offset: usize,
}

impl Layout {
    /// Row-major layout of `shape` at offset 0. For a shape whose element
    /// count overflows (which no tensor can have: every constructor checks
    /// it) the strides saturate, and [`Layout::storage_end`] says `usize::MAX`.
    ///
    /// ```
    /// use ferrocm_ops::Layout;
    /// assert_eq!(Layout::contiguous(&[2, 3, 4]).strides(), &[12, 4, 1]);
    /// assert_eq!(Layout::contiguous(&[usize::MAX, 2]).storage_end(), usize::MAX);
    /// ```
    pub fn contiguous(shape: &[usize]) -> Self {
        let mut strides = vec![0; shape.len()];
        let mut s = 1usize;
        for d in (0..shape.len()).rev() {
            strides[d] = s;
            s = s.saturating_mul(shape[d]);
        }
        Self {
            shape: shape.to_vec(),
            strides,
            offset: 0,
        }
    }

    /// A layout from parts (checked here, not against any storage).
    ///
    /// ```
    /// use ferrocm_ops::Layout;
    /// let l = Layout::new(vec![2, 2], vec![1, 2], 0)?;
    /// assert_eq!(l.storage_end(), 4);
    /// assert!(Layout::new(vec![2], vec![1, 1], 0).is_err());
    /// assert!(Layout::new(vec![3], vec![usize::MAX], 0).is_err());
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::BadParameter`] when `shape` and `strides` differ in length;
    /// [`Error::TooLarge`] when the element count or the largest offset
    /// reached overflows.
    pub fn new(shape: Vec<usize>, strides: Vec<usize>, offset: usize) -> Result<Self> {
        if shape.len() != strides.len() {
            return Err(Error::BadParameter {
                op: "layout",
                what: format!("{} dims but {} strides", shape.len(), strides.len()),
            });
        }
        checked_count("layout", &shape, 1)?;
        let l = Self {
            shape,
            strides,
            offset,
        };
        match l.checked_storage_end() {
            Some(_) => Ok(l),
            None => Err(Error::TooLarge {
                op: "layout",
                shape: l.shape,
            }),
        }
    }

    /// Dims.
    ///
    /// ```
    /// use ferrocm_ops::Layout;
    /// let l = Layout::new(vec![2, 3], vec![1, 2], 4)?; // a transposed [3, 2] from element 4
    /// assert_eq!((l.shape(), l.strides(), l.offset(), l.rank()), (&[2, 3][..], &[1, 2][..], 4, 2));
    /// assert!(!l.is_contiguous());
    /// assert!(Layout::contiguous(&[2, 1, 3]).is_contiguous());
    /// assert_eq!(l.dims_and_strides(), vec![2, 3, 1, 2]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Strides in elements (example: [`Layout::shape`]).
    pub fn strides(&self) -> &[usize] {
        &self.strides
    }

    /// Offset of the first element (example: [`Layout::shape`]).
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Number of dims (example: [`Layout::shape`]).
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Number of elements (`usize::MAX` for a shape whose count overflows,
    /// see [`Layout::contiguous`]).
    ///
    /// ```
    /// use ferrocm_ops::Layout;
    /// assert_eq!(Layout::contiguous(&[2, 3]).elem_count(), 6);
    /// assert_eq!(Layout::contiguous(&[usize::MAX, 0, 2]).elem_count(), 0);
    /// ```
    pub fn elem_count(&self) -> usize {
        if self.shape.contains(&0) {
            return 0;
        }
        self.shape
            .iter()
            .try_fold(1usize, |n, &d| n.checked_mul(d))
            .unwrap_or(usize::MAX)
    }

    /// Whether the elements are row-major and dense from `offset` (dims of
    /// size 1 ignored; example: [`Layout::shape`]).
    pub fn is_contiguous(&self) -> bool {
        let mut expected = 1usize;
        for d in (0..self.rank()).rev() {
            if self.shape[d] != 1 && self.strides[d] != expected {
                return false;
            }
            expected = expected.saturating_mul(self.shape[d]);
        }
        true
    }

    /// Storage offset of the logical element number `i` (row-major order;
    /// saturating, which only a layout of no tensor can reach).
    ///
    /// ```
    /// use ferrocm_ops::Layout;
    /// let t = Layout::contiguous(&[2, 3]).transpose(0, 1).unwrap(); // [3, 2]
    /// assert_eq!((0..6).map(|i| t.offset_of(i)).collect::<Vec<_>>(), vec![0, 3, 1, 4, 2, 5]);
    /// ```
    pub fn offset_of(&self, mut i: usize) -> usize {
        let mut off = self.offset;
        for d in (0..self.rank()).rev() {
            let dim = self.shape[d].max(1);
            off = off.saturating_add((i % dim).saturating_mul(self.strides[d]));
            i /= dim;
        }
        off
    }

    /// Largest storage index touched plus one (`offset` when empty), or
    /// `None` when that overflows (no tensor's layout does).
    ///
    /// ```
    /// use ferrocm_ops::Layout;
    /// assert_eq!(Layout::contiguous(&[2, 3]).checked_storage_end(), Some(6));
    /// assert_eq!(Layout::contiguous(&[usize::MAX, 2]).checked_storage_end(), None);
    /// ```
    pub fn checked_storage_end(&self) -> Option<usize> {
        if self.elem_count() == 0 {
            return Some(self.offset);
        }
        self.shape
            .iter()
            .zip(&self.strides)
            .try_fold(self.offset, |end, (&d, &s)| {
                end.checked_add((d - 1).checked_mul(s)?)
            })?
            .checked_add(1)
    }

    /// Largest storage index touched plus one (`offset` when empty).
    ///
    /// ```
    /// use ferrocm_ops::Layout;
    /// let l = Layout::contiguous(&[2, 3]).narrow(1, 1, 2).unwrap();
    /// assert_eq!((l.offset(), l.storage_end()), (1, 6));
    /// ```
    pub fn storage_end(&self) -> usize {
        // Saturating: an overflowing reach is beyond any buffer.
        self.checked_storage_end().unwrap_or(usize::MAX)
    }

    /// Elements of storage from `offset` a kernel reading this view may
    /// touch: what its launch declares and proves in bounds.
    pub(crate) fn extent(&self) -> usize {
        self.storage_end() - self.offset
    }

    /// Dims then strides, as 64-bit values: what strided kernels read
    /// (example: [`Layout::shape`]).
    pub fn dims_and_strides(&self) -> Vec<u64> {
        self.shape
            .iter()
            .chain(&self.strides)
            .map(|&v| v as u64)
            .collect()
    }

    fn check_dim(&self, op: &'static str, dim: usize) -> Result<()> {
        if dim >= self.rank() {
            return Err(Error::DimOutOfRange {
                op,
                dim: dim as i128,
                rank: self.rank(),
                shape: self.shape.clone(),
            });
        }
        Ok(())
    }

    /// Swaps two dims (a view).
    ///
    /// ```
    /// use ferrocm_ops::Layout;
    /// let t = Layout::contiguous(&[2, 3]).transpose(0, 1)?;
    /// assert_eq!((t.shape(), t.strides()), (&[3, 2][..], &[1, 3][..]));
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::DimOutOfRange`] when a dim is not below the rank.
    pub fn transpose(&self, d0: usize, d1: usize) -> Result<Layout> {
        self.check_dim("transpose", d0)?;
        self.check_dim("transpose", d1)?;
        let mut l = self.clone();
        l.shape.swap(d0, d1);
        l.strides.swap(d0, d1);
        Ok(l)
    }

    /// Reorders dims: dim `k` of the result is dim `perm[k]` of this layout.
    ///
    /// ```
    /// use ferrocm_ops::Layout;
    /// assert_eq!(Layout::contiguous(&[2, 3, 4]).permute(&[2, 0, 1])?.shape(), &[4, 2, 3]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::BadPermutation`] when `perm` is not a permutation of `0..rank`.
    pub fn permute(&self, perm: &[usize]) -> Result<Layout> {
        let mut seen = vec![false; self.rank()];
        if perm.len() != self.rank()
            || perm
                .iter()
                .any(|&p| p >= self.rank() || std::mem::replace(&mut seen[p], true))
        {
            return Err(Error::BadPermutation {
                op: "permute",
                perm: perm.to_vec(),
                rank: self.rank(),
            });
        }
        Ok(Layout {
            shape: perm.iter().map(|&p| self.shape[p]).collect(),
            strides: perm.iter().map(|&p| self.strides[p]).collect(),
            offset: self.offset,
        })
    }

    /// Whether two positions of this layout share a memory element (a
    /// broadcast view, stride 0 on a dim of size > 1, or strides that
    /// interleave): such a view cannot be written in place.
    ///
    /// ```
    /// use ferrocm_ops::Layout;
    /// assert!(!Layout::contiguous(&[2, 3]).transpose(0, 1)?.overlaps());
    /// assert!(Layout::contiguous(&[1, 3]).broadcast_as(&[2, 3])?.overlaps());
    /// assert!(Layout::new(vec![3, 2], vec![1, 1], 0)?.overlaps());
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    pub fn overlaps(&self) -> bool {
        let mut dims: Vec<(usize, usize)> = self
            .shape()
            .iter()
            .zip(self.strides())
            .filter(|(d, _)| **d > 1)
            .map(|(&d, &s)| (s, d))
            .collect();
        dims.sort_unstable();
        // Sorted by stride, each dim must step past everything the inner
        // dims reach.
        let mut reach = 0usize;
        for (stride, size) in dims {
            if stride <= reach {
                return true;
            }
            reach = reach.saturating_add(stride.saturating_mul(size - 1));
        }
        false
    }

    /// Elements `start..start + len` of `dim` (a view).
    ///
    /// ```
    /// use ferrocm_ops::Layout;
    /// let n = Layout::contiguous(&[4, 5]).narrow(1, 2, 3)?;
    /// assert_eq!((n.shape(), n.offset()), (&[4, 3][..], 2));
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::DimOutOfRange`] for a dim not below the rank;
    /// [`Error::NarrowOutOfRange`] when the range passes the dim's end;
    /// [`Error::TooLarge`] when the new offset overflows (a layout of no
    /// tensor).
    pub fn narrow(&self, dim: usize, start: usize, len: usize) -> Result<Layout> {
        self.check_dim("narrow", dim)?;
        let size = self.shape[dim];
        if start.checked_add(len).is_none_or(|e| e > size) {
            return Err(Error::NarrowOutOfRange {
                op: "narrow",
                dim,
                start,
                len,
                size,
            });
        }
        let mut l = self.clone();
        l.shape[dim] = len;
        if len > 0 {
            l.offset = start
                .checked_mul(self.strides[dim])
                .and_then(|o| o.checked_add(self.offset))
                .ok_or_else(|| Error::TooLarge {
                    op: "narrow",
                    shape: self.shape.clone(),
                })?;
        }
        Ok(l)
    }

    /// Broadcasts to `shape` (numpy rules: leading dims added, size-1 dims stretched with stride 0).
    ///
    /// ```
    /// use ferrocm_ops::Layout;
    /// let b = Layout::contiguous(&[3, 1]).broadcast_as(&[2, 3, 4])?;
    /// assert_eq!(b.strides(), &[0, 1, 0]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::BroadcastIncompatible`] when the shapes do not broadcast;
    /// [`Error::TooLarge`] when `shape`'s element count overflows.
    pub fn broadcast_as(&self, shape: &[usize]) -> Result<Layout> {
        let err = || Error::BroadcastIncompatible {
            op: "broadcast_as",
            lhs: self.shape.clone(),
            rhs: shape.to_vec(),
        };
        if shape.len() < self.rank() {
            return Err(err());
        }
        // A shape whose element count overflows is no view at all.
        checked_count("broadcast_as", shape, 1)?;
        let lead = shape.len() - self.rank();
        let mut strides = vec![0; shape.len()];
        for (k, &target) in shape.iter().enumerate().skip(lead) {
            let (d, s) = (self.shape[k - lead], self.strides[k - lead]);
            strides[k] = if d == target {
                s
            } else if d == 1 {
                0
            } else {
                return Err(err());
            };
        }
        Ok(Layout {
            shape: shape.to_vec(),
            strides,
            offset: self.offset,
        })
    }

    /// The same elements in the same order with another shape, as a view:
    /// always for a contiguous layout; for a strided one when each run of
    /// dims that the new shape merges or splits is itself contiguous
    /// (PyTorch's `view` rule; dropping or adding dims of size 1 always
    /// qualifies). `None` when the elements need a copy. The caller has
    /// checked that the element counts agree.
    pub(crate) fn reshaped(&self, shape: &[usize]) -> Option<Layout> {
        if self.is_contiguous() || self.shape.contains(&0) {
            let mut l = Layout::contiguous(shape);
            l.offset = self.offset;
            return Some(l);
        }
        // Walk the old dims from the last, in chunks whose dims are laid out
        // contiguously relative to each other; each chunk must be exactly
        // covered by a run of new dims, which get strides within it.
        let (old, old_strides) = (&self.shape, &self.strides);
        let mut strides = vec![0usize; shape.len()];
        let mut view_d = shape.len();
        let mut base = *old_strides.last()?;
        let (mut chunk, mut covered) = (1usize, 1usize);
        for d in (0..old.len()).rev() {
            chunk = chunk.checked_mul(old[d])?;
            let ends_chunk =
                d == 0 || (old[d - 1] != 1 && Some(old_strides[d - 1]) != chunk.checked_mul(base));
            if ends_chunk {
                while view_d > 0 && (covered < chunk || shape[view_d - 1] == 1) {
                    view_d -= 1;
                    strides[view_d] = covered.checked_mul(base)?;
                    covered = covered.checked_mul(shape[view_d])?;
                }
                if covered != chunk {
                    return None;
                }
                if d > 0 {
                    base = old_strides[d - 1];
                    (chunk, covered) = (1, 1);
                }
            }
        }
        if view_d != 0 {
            return None;
        }
        Some(Layout {
            shape: shape.to_vec(),
            strides,
            offset: self.offset,
        })
    }
}

/// The broadcast shape of two shapes (numpy rules).
///
/// ```
/// use ferrocm_ops::layout::broadcast_shape;
/// assert_eq!(broadcast_shape("add", &[2, 1, 3], &[4, 1]).unwrap(), vec![2, 4, 3]);
/// assert!(broadcast_shape("add", &[2], &[3]).is_err());
/// ```
///
/// # Errors
/// [`Error::BroadcastIncompatible`] naming `op` and both shapes when a dim
/// differs and neither is 1.
pub fn broadcast_shape(op: &'static str, a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for k in 0..n {
        let da = if k + a.len() >= n {
            a[k + a.len() - n]
        } else {
            1
        };
        let db = if k + b.len() >= n {
            b[k + b.len() - n]
        } else {
            1
        };
        out[k] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => {
                return Err(Error::BroadcastIncompatible {
                    op,
                    lhs: a.to_vec(),
                    rhs: b.to_vec(),
                });
            }
        };
    }
    Ok(out)
}

/// Checked element count of a shape.
pub(crate) fn checked_count(op: &'static str, shape: &[usize], elem_size: usize) -> Result<usize> {
    let n = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    match n {
        Some(n)
            if n.checked_mul(elem_size)
                .is_some_and(|b| b <= isize::MAX as usize) =>
        {
            Ok(n)
        }
        _ => Err(Error::TooLarge {
            op,
            shape: shape.to_vec(),
        }),
    }
}
