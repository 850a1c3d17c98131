//! The core types every op uses: [`Tensor<T>`](tensor::Tensor) and
//! [`DynTensor`](dyn_tensor::DynTensor) (typed and run-time-typed views of a
//! [`Storage`](storage::Storage)), [`Layout`](layout::Layout) (shape,
//! strides, offset), dims ([`dim`]), dtypes ([`dtype`]) and the error type
//! ([`error`]).

pub mod dim;
pub mod dtype;
pub mod dyn_tensor;
pub mod error;
pub mod layout;
pub mod storage;
pub mod tensor;
