//! Indexing and sorting: moves of whole elements by id (`index_select`,
//! `gather`, `scatter`, `scatter_add`, `index_add`, the strided copy into a
//! region behind `slice_set`) in [`indexing`], and the row sort and top-k in
//! [`sort`].

pub mod indexing;
pub mod sort;

pub use indexing::*;
