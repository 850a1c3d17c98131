//! Elementwise ops: [`unary`] (the unary maps and `affine`), [`binary`]
//! (arithmetic with broadcasting, comparisons), [`ternary`] (`where_cond`),
//! [`cast`] (`to_dtype`), [`fill`] (creation, `contiguous`, `copy2d`,
//! transpose copies).

pub mod binary;
pub mod cast;
pub mod fill;
pub mod ternary;
pub mod unary;
