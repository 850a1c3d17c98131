//! Reductions over any set of dims (`sum`, `mean`, `max`, `min`, `argmax`,
//! `argmin`) and `softmax` / `log_softmax`, in [`reductions`].

pub mod reductions;

pub use reductions::*;
