//! Reductions: sum, mean, max, min, argmax and argmin over rows (and over
//! the leading dims of a contiguous input), softmax and log_softmax, and the
//! workgroup-wide folds other families build on (the norms use
//! [`block_reduce`]).

pub mod reductions;

pub use reductions::*;
