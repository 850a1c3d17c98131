//! The DNN-library hook of a GPU backend: MIOpen on ROCm (cuDNN on CUDA
//! comes with the convolution family), opened at run time like the BLAS
//! libraries, bound to the device's stream, reached by the op layer through
//! [`GpuBackend::dnn`](crate::gpu::GpuBackend::dnn) and absent without
//! error where the library does not load (our kernels run then).
//!
//! What a DNN op will find here: the library's handle behind a lock (a
//! handle is used by one thread at a time), so descriptors, the algorithm
//! search (cached per shape for the process) and the workspace (drawn from
//! the device's caching allocator) are written once per op family against
//! this trait, on every backend that has such a library.

/// A DNN library bound to a device's stream.
pub trait Dnn: Send + Sync {
    /// `MIOpen` or `cuDNN`.
    fn name(&self) -> &'static str;

    /// The library's handle (`miopenHandle_t`, `cudnnHandle_t`) as an
    /// address, locked for the caller until the guard drops; the handle is
    /// already bound to the device's stream.
    fn handle(&self) -> DnnGuard<'_>;
}

/// Exclusive use of a DNN handle until dropped.
pub struct DnnGuard<'a> {
    raw: *mut std::ffi::c_void,
    _lock: std::sync::MutexGuard<'a, ()>,
}

impl<'a> DnnGuard<'a> {
    /// A guard over `raw`, held while `lock` is.
    pub fn new(raw: *mut std::ffi::c_void, lock: std::sync::MutexGuard<'a, ()>) -> Self {
        Self { raw, _lock: lock }
    }

    /// The raw handle, for the library's calls.
    pub fn raw(&self) -> *mut std::ffi::c_void {
        self.raw
    }
}
