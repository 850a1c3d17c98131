//! rocBLAS on a ROCm GPU (the backend's [`Blas`]): one handle per device,
//! created on first use and bound to the device's stream, used by one thread
//! at a time. Functions used: `rocblas_create_handle`, `rocblas_set_stream`,
//! `rocblas_sgemm_strided_batched`, `rocblas_gemm_strided_batched_ex`,
//! `rocblas_destroy_handle`, `rocblas_status_to_string`; every status is
//! checked.

use super::{RocmDevice, ffi, hip_check};
use crate::blas::{Gemm, GemmType};
use crate::error::{Error, Result};
use crate::gpu::Blas;
use std::os::raw::{c_int, c_void};
use std::ptr::null_mut;
use std::sync::{Mutex, MutexGuard};

/// Whether rocBLAS loads on this machine: where it was found, or why not.
pub fn rocblas_found() -> std::result::Result<String, String> {
    ffi::rocblas()
        .map(|l| format!("rocBLAS ({})", l.found_as))
        .map_err(String::from)
}

/// A raw rocBLAS handle (a pointer), movable between threads: rocBLAS handles
/// may be used from any thread, one at a time.
struct RawRocblas(rocm_rs::rocblas::ffi::rocblas_handle);

// SAFETY: see above; the mutex in RocblasHandle provides the "one at a time".
unsafe impl Send for RawRocblas {}

/// A rocBLAS handle bound to its device's stream, destroyed with the device.
///
/// rocBLAS handles must not be used by two threads at once, so the raw handle
/// is reached through [`RocblasHandle::lock`].
pub struct RocblasHandle {
    raw: Mutex<RawRocblas>,
    lib: &'static ffi::Rocblas,
    hip: &'static ffi::Hip,
    /// The device's HIP id, made current before each call.
    ordinal: c_int,
    /// The device, for messages.
    device: String,
}

/// Exclusive use of a [`RocblasHandle`] until dropped.
pub struct RocblasGuard<'a> {
    guard: MutexGuard<'a, RawRocblas>,
}

impl RocblasGuard<'_> {
    /// The `rocblas_handle` for rocBLAS calls (already on the device's stream).
    pub fn raw(&self) -> rocm_rs::rocblas::ffi::rocblas_handle {
        self.guard.0
    }
}

fn rocblas_check(
    lib: &ffi::Rocblas,
    status: rocm_rs::rocblas::ffi::rocblas_status,
    call: &str,
    device: &str,
) -> Result<()> {
    if status == rocm_rs::rocblas::ffi::rocblas_status__rocblas_status_success {
        return Ok(());
    }
    // SAFETY: returns a static string (or null).
    let text = unsafe { ffi::c_text((lib.rocblas_status_to_string)(status)) }.unwrap_or_default();
    Err(Error::Rocm {
        call: call.into(),
        device: device.into(),
        message: format!("{text} ({status})"),
    })
}

impl RocblasHandle {
    pub(super) fn new(dev: &RocmDevice) -> Result<Self> {
        let lib = ffi::rocblas().map_err(|why| Error::Rocm {
            call: "loading rocBLAS".into(),
            device: dev.label.clone(),
            message: why.into(),
        })?;
        dev.set_device()?;
        let mut raw = null_mut();
        // SAFETY: writes one handle (for the current device, just set).
        let status = unsafe { (lib.rocblas_create_handle)(&mut raw) };
        rocblas_check(lib, status, "rocblas_create_handle", &dev.label)?;
        let handle = RocblasHandle {
            raw: Mutex::new(RawRocblas(raw)),
            lib,
            hip: dev.hip,
            ordinal: dev.ordinal as c_int,
            device: dev.label.clone(),
        };
        // SAFETY: our handle and stream (rocm-rs's rocBLAS bindings declare
        // their own, identical, hipStream_t type).
        let status = unsafe { (lib.rocblas_set_stream)(raw, dev.stream.raw.cast()) };
        rocblas_check(lib, status, "rocblas_set_stream", &dev.label)?;
        Ok(handle)
    }

    /// Queues `g` on the handle's stream: `rocblas_sgemm_strided_batched`
    /// for f32, `rocblas_gemm_strided_batched_ex` with f32 compute for f16
    /// and bf16, C in the inputs' type or f32 (C is also D). `ptrs` are A, B and C's first elements; the
    /// caller validated `g` ([`crate::blas`]).
    fn gemm_current(&self, g: &Gemm, ptrs: [u64; 3]) -> Result<()> {
        let device = self.device.as_str();
        use rocm_rs::rocblas::ffi as rf;
        let op = |t: bool| match t {
            true => rf::rocblas_operation__rocblas_operation_transpose,
            false => rf::rocblas_operation__rocblas_operation_none,
        };
        let (alpha, beta) = (1.0f32, 0.0f32);
        let (m, n, k, batch) = (g.m as i32, g.n as i32, g.k as i32, g.batch as i32);
        let (lda, ldb, ldc) = (g.a.ld as i32, g.b.ld as i32, g.c.ld as i32);
        let (sa, sb, sc) = (g.a.stride as i64, g.b.stride as i64, g.c.stride as i64);
        let p = |i: usize| ptrs[i] as usize as *const c_void;
        let guard = self.lock();
        let (status, call) = match g.dtype {
            // SAFETY: validated dims, leading dims and ranges inside live
            // buffers of this device; alpha/beta are host f32 (the default
            // pointer mode), matching the f32 compute type.
            GemmType::F32 => (
                unsafe {
                    (self.lib.rocblas_sgemm_strided_batched)(
                        guard.raw(),
                        op(g.trans_a),
                        op(g.trans_b),
                        m,
                        n,
                        k,
                        &alpha,
                        p(0).cast(),
                        lda,
                        sa,
                        p(1).cast(),
                        ldb,
                        sb,
                        &beta,
                        ptrs[2] as usize as *mut f32,
                        ldc,
                        sc,
                        batch,
                    )
                },
                "rocblas_sgemm_strided_batched",
            ),
            GemmType::F16 | GemmType::Bf16 => {
                let data_type = |t: GemmType| match t {
                    GemmType::F16 => rf::rocblas_datatype__rocblas_datatype_f16_r,
                    GemmType::Bf16 => rf::rocblas_datatype__rocblas_datatype_bf16_r,
                    GemmType::F32 => rf::rocblas_datatype__rocblas_datatype_f32_r,
                };
                let (ty, c_ty) = (data_type(g.dtype), data_type(g.c_type));
                let f32_r = rf::rocblas_datatype__rocblas_datatype_f32_r;
                // SAFETY: as above; C and D are the same matrix (allowed
                // with ldc == ldd).
                let status = unsafe {
                    (self.lib.rocblas_gemm_strided_batched_ex)(
                        guard.raw(),
                        op(g.trans_a),
                        op(g.trans_b),
                        m,
                        n,
                        k,
                        (&alpha as *const f32).cast(),
                        p(0),
                        ty,
                        lda,
                        sa,
                        p(1),
                        ty,
                        ldb,
                        sb,
                        (&beta as *const f32).cast(),
                        p(2),
                        c_ty,
                        ldc,
                        sc,
                        ptrs[2] as usize as *mut c_void,
                        c_ty,
                        ldc,
                        sc,
                        batch,
                        f32_r,
                        rf::rocblas_gemm_algo__rocblas_gemm_algo_standard,
                        0,
                        0,
                    )
                };
                (status, "rocblas_gemm_strided_batched_ex")
            }
        };
        rocblas_check(self.lib, status, call, device)
    }

    /// Locks the handle for a sequence of rocBLAS calls.
    pub fn lock(&self) -> RocblasGuard<'_> {
        RocblasGuard {
            guard: self.raw.lock().unwrap_or_else(|e| e.into_inner()),
        }
    }
}

impl Drop for RocblasHandle {
    fn drop(&mut self) {
        let raw = self.raw.get_mut().unwrap_or_else(|e| e.into_inner()).0;
        // SAFETY: created by rocblas_create_handle, destroyed once. Errors ignored.
        unsafe { (self.lib.rocblas_destroy_handle)(raw) };
    }
}

impl Blas for RocblasHandle {
    fn name(&self) -> &'static str {
        "rocBLAS"
    }

    unsafe fn gemm(&self, g: &Gemm, ptrs: [u64; 3]) -> Result<()> {
        // SAFETY: plain call.
        let code = unsafe { (self.hip.hipSetDevice)(self.ordinal) };
        hip_check(self.hip, code, "hipSetDevice", &self.device)?;
        self.gemm_current(g, ptrs)
    }
}
