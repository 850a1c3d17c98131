//! The vendor GEMM behind one checked call: rocBLAS on ROCm GPUs, cuBLAS on
//! CUDA GPUs, both opened at run time.
//!
//! [`Gemm`] is a strided-batched GEMM in BLAS's own terms (column-major
//! matrices, transpose flags, leading dimensions), over buffers of one
//! device. [`Device::blas_gemm`](crate::Device::blas_gemm) proves every element the call can touch
//! lies inside its buffer (as a kernel launch's arguments are proved) and
//! that the leading dimensions are ones the libraries accept, then calls the
//! library on the device's stream: `Ok(true)` when it ran, `Ok(false)` when
//! the device has no such library (the caller runs its own kernel), an error
//! when the library refused or failed (every status is checked).

/// The element type of a GEMM: inputs and output in it, f32 accumulation
/// and f32 `alpha` / `beta` for all three.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum GemmType {
    /// f32.
    F32,
    /// IEEE half.
    F16,
    /// bfloat16.
    Bf16,
}

impl GemmType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            GemmType::F32 => 4,
            GemmType::F16 | GemmType::Bf16 => 2,
        }
    }
}

/// One operand: where it starts (in elements of its buffer), its leading
/// dimension and the distance between batches (0: every batch shares it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemmOperand {
    /// First element, in elements from the buffer's start.
    pub offset: usize,
    /// Leading dimension: elements between columns of the stored
    /// (column-major) matrix.
    pub ld: usize,
    /// Elements between batches.
    pub stride: usize,
}

/// `C = op(A) · op(B)` for `batch` matrices, column-major, as BLAS states
/// it: `op(A)` is `m x k`, `op(B)` is `k x n`, C is `m x n`; `trans_a`
/// means A is stored `k x m` (and used transposed).
///
/// A row-major product `[m, k] x [k, n]` is the column-major `Cᵀ = Bᵀ Aᵀ`:
/// the caller swaps the operands and m with n.
///
/// ```
/// use ferrocm_host::blas::{Gemm, GemmOperand, GemmType};
/// let g = Gemm {
///     dtype: GemmType::F32,
///     c_type: GemmType::F32,
///     trans_a: false,
///     trans_b: false,
///     m: 2, n: 3, k: 4, batch: 1,
///     a: GemmOperand { offset: 0, ld: 2, stride: 0 },
///     b: GemmOperand { offset: 0, ld: 4, stride: 0 },
///     c: GemmOperand { offset: 0, ld: 2, stride: 6 },
/// };
/// assert_eq!(g.extent(&g.a, g.m, g.k, false), 8); // A is 2 x 4
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gemm {
    /// Element type of A and B.
    pub dtype: GemmType,
    /// Element type of C: `dtype`, or f32 (the unrounded sums of f16/bf16
    /// inputs, for an epilogue that rounds once).
    pub c_type: GemmType,
    /// A stored `k x m`.
    pub trans_a: bool,
    /// B stored `n x k`.
    pub trans_b: bool,
    /// Rows of C.
    pub m: usize,
    /// Columns of C.
    pub n: usize,
    /// The inner dimension.
    pub k: usize,
    /// Number of products.
    pub batch: usize,
    /// A.
    pub a: GemmOperand,
    /// B.
    pub b: GemmOperand,
    /// C (written; its batches must not overlap).
    pub c: GemmOperand,
}

impl Gemm {
    /// Elements from `op.offset` an operand stored `rows x cols` (before
    /// `trans`) spans over all batches: the highest element touched + 1.
    pub fn extent(&self, op: &GemmOperand, rows: usize, cols: usize, trans: bool) -> usize {
        let (r, c) = if trans { (cols, rows) } else { (rows, cols) };
        if r == 0 || c == 0 || self.batch == 0 {
            return 0;
        }
        (self.batch - 1) * op.stride + (c - 1) * op.ld + r
    }

    /// Checks the call against BLAS's rules and the buffers' lengths
    /// (in elements), for inputs of `elem` and outputs of `c_elem` bytes.
    pub(crate) fn validate(
        &self,
        lens: [usize; 3],
        elem: usize,
        c_elem: usize,
    ) -> std::result::Result<(), String> {
        if elem != self.dtype.size() || c_elem != self.c_type.size() {
            return Err(format!(
                "buffers of {elem}-byte inputs and {c_elem}-byte outputs for a {:?} -> {:?} GEMM",
                self.dtype, self.c_type
            ));
        }
        if self.c_type != self.dtype && self.c_type != GemmType::F32 {
            return Err(format!("{:?} inputs into {:?}", self.dtype, self.c_type));
        }
        let limit = i32::MAX as usize;
        if [self.m, self.n, self.k, self.batch]
            .iter()
            .any(|&d| d > limit)
        {
            return Err(format!(
                "dims {}x{}x{} x {} past i32",
                self.m, self.n, self.k, self.batch
            ));
        }
        let ops = [
            ("A", &self.a, self.m, self.k, self.trans_a, lens[0]),
            ("B", &self.b, self.k, self.n, self.trans_b, lens[1]),
            ("C", &self.c, self.m, self.n, false, lens[2]),
        ];
        for (name, op, rows, cols, trans, len) in ops {
            let stored_rows = if trans { cols } else { rows };
            if op.ld < stored_rows.max(1) || op.ld > limit {
                return Err(format!(
                    "{name}: leading dimension {} for {stored_rows} stored rows",
                    op.ld
                ));
            }
            let end = op.offset.checked_add(self.extent(op, rows, cols, trans));
            if end.is_none_or(|e| e > len) {
                return Err(format!(
                    "{name}: elements {}.. past the buffer's {len}",
                    op.offset
                ));
            }
        }
        // C's batches are written: they must not overlap one another.
        if self.batch > 1 && self.c.stride < self.c.ld * (self.n.max(1) - 1) + self.m {
            return Err(format!("C: batch stride {} overlaps", self.c.stride));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gemm(m: usize, n: usize, k: usize) -> Gemm {
        Gemm {
            dtype: GemmType::F32,
            c_type: GemmType::F32,
            trans_a: false,
            trans_b: false,
            m,
            n,
            k,
            batch: 2,
            a: GemmOperand {
                offset: 0,
                ld: m,
                stride: m * k,
            },
            b: GemmOperand {
                offset: 0,
                ld: k,
                stride: 0,
            },
            c: GemmOperand {
                offset: 0,
                ld: m,
                stride: m * n,
            },
        }
    }

    #[test]
    fn validation_proves_ranges_and_leading_dims() {
        let g = gemm(3, 4, 5);
        assert_eq!(g.validate([30, 20, 24], 4, 4), Ok(()));
        assert!(g.validate([29, 20, 24], 4, 4).unwrap_err().contains("A"));
        assert!(g.validate([30, 19, 24], 4, 4).unwrap_err().contains("B"));
        assert!(g.validate([30, 20, 23], 4, 4).unwrap_err().contains("C"));
        assert!(g.validate([30, 20, 24], 2, 2).is_err()); // f16 buffers for an f32 call
        let mut half = g;
        half.dtype = GemmType::Bf16;
        assert_eq!(half.validate([30, 20, 24], 2, 4), Ok(())); // bf16 into f32 sums
        half.c_type = GemmType::F16;
        assert!(half.validate([30, 20, 24], 2, 2).is_err()); // bf16 into f16
        let mut t = g;
        t.trans_a = true; // A stored 5 x 3: ld 3 < 5 rows
        assert!(
            t.validate([30, 20, 24], 4, 4)
                .unwrap_err()
                .contains("leading")
        );
        let mut o = g;
        o.c.stride = 5; // C batches overlap
        assert!(
            o.validate([30, 20, 24], 4, 4)
                .unwrap_err()
                .contains("overlaps")
        );
        let mut huge = g;
        huge.a.offset = usize::MAX;
        assert!(huge.validate([30, 20, 24], 4, 4).is_err()); // no overflow
    }
}
