//! Elementwise kernels: one output element per input element (or per
//! broadcast position), over contiguous, strided and broadcast inputs.
//!
//! - [`unary`], the unary maps (`exp`, `gelu`, ...), one struct per formula
//!   shared with the Cpu backend;
//! - [`binary`], arithmetic with broadcasting, and the comparisons;
//! - [`ternary`], `where`;
//! - [`cast`], conversions between the six dtypes;
//! - [`fill`], fill, copy (a strided view made contiguous) and transpose;
//! - [`affine`], `x * mul + add`.

pub mod affine;
pub mod binary;
pub mod cast;
pub mod fill;
pub mod ternary;
pub mod unary;
