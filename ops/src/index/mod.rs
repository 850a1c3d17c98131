//! Indexing ([`indexing`]: `index_select`, `embedding`, `gather`,
//! `scatter`, `scatter_add`, `index_add`, `slice_set`) and sorting
//! ([`sort`]: `sort`, `argsort`, `topk`).

pub mod indexing;
pub mod sort;

pub use indexing::*;
