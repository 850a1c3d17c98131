//! cuBLAS for CUDA devices (the backend's [`Blas`]), opened at run time
//! (`dlopen`), like the driver.
//!
//! Why not cudarc's own loader: it looks for the library names of the CUDA
//! version it was built for (`libcublas.so.12`) and panics when none loads;
//! CUDA 13 installs `libcublas.so.13` (PyTorch's wheels ship it under
//! `site-packages/nvidia/cu13/lib`). Here the names of every supported major
//! version are tried, `FERROCM_CUBLAS` may name the file, and absence is a
//! reason string, never a panic: the op then runs ferrocm's kernel.
//!
//! Types are cudarc's (its bindings of the cuBLAS headers), and each
//! function pointer's type is checked at compile time against cudarc's
//! binding of the same function. Functions used: `cublasCreate_v2`,
//! `cublasDestroy_v2`, `cublasSetStream_v2`, `cublasSetMathMode`,
//! `cublasGemmStridedBatchedEx`, `cublasGetStatusString`; every status is
//! checked (success, else `Error::Cuda` with cuBLAS's own message).

use super::driver::Handle;
use crate::blas::{Gemm, GemmType};
use crate::error::{Error, Result};
use crate::gpu::Blas;
use cudarc::cublas::sys as cb;
use cudarc::driver::{result as cu, sys};
use libloading::Library;
use std::ffi::{c_char, c_int, c_longlong, c_void};
use std::sync::{Mutex, OnceLock};

type Create = unsafe extern "C" fn(*mut cb::cublasHandle_t) -> cb::cublasStatus_t;
type Destroy = unsafe extern "C" fn(cb::cublasHandle_t) -> cb::cublasStatus_t;
type SetStream = unsafe extern "C" fn(cb::cublasHandle_t, cb::cudaStream_t) -> cb::cublasStatus_t;
type StatusString = unsafe extern "C" fn(cb::cublasStatus_t) -> *const c_char;
type SetMathMode = unsafe extern "C" fn(cb::cublasHandle_t, cb::cublasMath_t) -> cb::cublasStatus_t;
type GemmStridedBatchedEx = unsafe extern "C" fn(
    cb::cublasHandle_t,
    cb::cublasOperation_t,
    cb::cublasOperation_t,
    c_int,
    c_int,
    c_int,
    *const c_void,
    *const c_void,
    cb::cudaDataType,
    c_int,
    c_longlong,
    *const c_void,
    cb::cudaDataType,
    c_int,
    c_longlong,
    *const c_void,
    *mut c_void,
    cb::cudaDataType,
    c_int,
    c_longlong,
    c_int,
    cb::cublasComputeType_t,
    cb::cublasGemmAlgo_t,
) -> cb::cublasStatus_t;

/// The same signatures as cudarc's bindings (its wrappers are plain
/// `unsafe fn`s of the C argument types): a mismatch fails to compile.
macro_rules! same_signature {
    ($($f:ident: ($($t:ty),*) -> $r:ty;)*) => { $(
        const _: unsafe fn($($t),*) -> $r = cb::$f;
    )* };
}
same_signature! {
    cublasCreate_v2: (*mut cb::cublasHandle_t) -> cb::cublasStatus_t;
    cublasDestroy_v2: (cb::cublasHandle_t) -> cb::cublasStatus_t;
    cublasSetStream_v2: (cb::cublasHandle_t, cb::cudaStream_t) -> cb::cublasStatus_t;
    cublasGetStatusString: (cb::cublasStatus_t) -> *const c_char;
    cublasSetMathMode: (cb::cublasHandle_t, cb::cublasMath_t) -> cb::cublasStatus_t;
    cublasGemmStridedBatchedEx: (cb::cublasHandle_t, cb::cublasOperation_t, cb::cublasOperation_t, c_int, c_int, c_int,
        *const c_void, *const c_void, cb::cudaDataType, c_int, c_longlong, *const c_void, cb::cudaDataType, c_int,
        c_longlong, *const c_void, *mut c_void, cb::cudaDataType, c_int, c_longlong, c_int, cb::cublasComputeType_t,
        cb::cublasGemmAlgo_t) -> cb::cublasStatus_t;
}

/// The resolved entry points (the library stays open for the process).
pub(crate) struct Cublas {
    create: Create,
    destroy: Destroy,
    set_stream: SetStream,
    status_string: StatusString,
    set_math_mode: SetMathMode,
    gemm: GemmStridedBatchedEx,
    /// The name or path it was opened as.
    pub(crate) found_as: String,
    _library: Library,
}

/// Opens cuBLAS once per process: `FERROCM_CUBLAS` if set, else the sonames
/// of CUDA 13, 12 and the unversioned development link.
pub(crate) fn cublas() -> std::result::Result<&'static Cublas, &'static str> {
    static LIB: OnceLock<std::result::Result<Cublas, String>> = OnceLock::new();
    LIB.get_or_init(|| {
        let mut names: Vec<String> = std::env::var("FERROCM_CUBLAS").into_iter().collect();
        names.extend(["libcublas.so.13", "libcublas.so.12", "libcublas.so"].map(String::from));
        let mut why = Vec::new();
        for name in &names {
            // SAFETY: loading cuBLAS runs its initialisers, which only set up
            // the library itself.
            match unsafe { Library::new(name) } {
                Ok(library) => return resolve(library, name.clone()),
                Err(e) => why.push(format!("{name}: {e}")),
            }
        }
        Err(format!(
            "cuBLAS not found ({}); set FERROCM_CUBLAS to its path",
            why.join("; ")
        ))
    })
    .as_ref()
    .map_err(|s| s.as_str())
}

fn resolve(library: Library, found_as: String) -> std::result::Result<Cublas, String> {
    // SAFETY: each symbol is read as the type of its C declaration (the
    // types checked against cudarc's bindings above).
    unsafe {
        let get = |name: &str| -> std::result::Result<*const c_void, String> {
            library
                .get::<*const c_void>(name.as_bytes())
                .map(|s| *s)
                .map_err(|e| format!("{found_as} lacks {name}: {e}"))
        };
        let create = std::mem::transmute::<*const c_void, Create>(get("cublasCreate_v2")?);
        let destroy = std::mem::transmute::<*const c_void, Destroy>(get("cublasDestroy_v2")?);
        let set_stream =
            std::mem::transmute::<*const c_void, SetStream>(get("cublasSetStream_v2")?);
        let status_string =
            std::mem::transmute::<*const c_void, StatusString>(get("cublasGetStatusString")?);
        let set_math_mode =
            std::mem::transmute::<*const c_void, SetMathMode>(get("cublasSetMathMode")?);
        let gemm = std::mem::transmute::<*const c_void, GemmStridedBatchedEx>(get(
            "cublasGemmStridedBatchedEx",
        )?);
        Ok(Cublas {
            create,
            destroy,
            set_stream,
            status_string,
            set_math_mode,
            gemm,
            found_as,
            _library: library,
        })
    }
}

/// A cuBLAS handle bound to one device's stream, used by one thread at a time.
pub struct CublasHandle {
    raw: Mutex<Raw>,
    lib: &'static Cublas,
    /// The device's context, made current before each call.
    ctx: Handle<sys::CUcontext>,
    /// The device, for messages.
    device: String,
}

struct Raw(cb::cublasHandle_t);
// SAFETY: cuBLAS handles may move between threads; the mutex keeps use single.
unsafe impl Send for Raw {}

fn check(lib: &Cublas, status: cb::cublasStatus_t, call: &str, device: &str) -> Result<()> {
    if status == cb::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        return Ok(());
    }
    // SAFETY: returns a static string.
    let text = unsafe {
        let p = (lib.status_string)(status);
        if p.is_null() {
            String::new()
        } else {
            std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    };
    Err(Error::Cuda {
        call: call.into(),
        device: device.into(),
        message: format!("{text} ({status:?})"),
    })
}

impl CublasHandle {
    /// A handle for the context `ctx` (current on this thread), on `stream`.
    pub(crate) fn new(
        stream: *mut c_void,
        ctx: Handle<sys::CUcontext>,
        device: &str,
    ) -> Result<Self> {
        let lib = cublas().map_err(|why| Error::Cuda {
            call: "loading cuBLAS".into(),
            device: device.into(),
            message: why.into(),
        })?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: writes one handle for the current context.
        check(
            lib,
            unsafe { (lib.create)(&mut raw) },
            "cublasCreate_v2",
            device,
        )?;
        let handle = Self {
            raw: Mutex::new(Raw(raw)),
            lib,
            ctx,
            device: device.into(),
        };
        // SAFETY: our handle and the device's stream (a driver CUstream is
        // the runtime's cudaStream_t).
        let status = unsafe { (lib.set_stream)(raw, stream.cast()) };
        check(lib, status, "cublasSetStream_v2", device)?;
        // f16/bf16 products accumulate in f32 to the end, as ferrocm
        // promises: by default cuBLAS may reduce split-K partial sums in the
        // output type (bf16: a few ulp off on short K; found on the H100).
        let mode = cb::cublasMath_t::CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
        // SAFETY: our handle; the mode is the default math plus that flag.
        check(
            lib,
            unsafe { (lib.set_math_mode)(raw, mode) },
            "cublasSetMathMode",
            device,
        )?;
        Ok(handle)
    }

    /// Queues `g` on the handle's stream (the context must be current).
    /// `ptrs` are A, B and C's first elements; the caller validated `g`.
    fn gemm_current(&self, g: &Gemm, ptrs: [u64; 3]) -> Result<()> {
        let device = self.device.as_str();
        let data_type = |t: GemmType| match t {
            GemmType::F32 => cb::cudaDataType::CUDA_R_32F,
            GemmType::F16 => cb::cudaDataType::CUDA_R_16F,
            GemmType::Bf16 => cb::cudaDataType::CUDA_R_16BF,
        };
        let (ty, c_ty) = (data_type(g.dtype), data_type(g.c_type));
        let op = |t: bool| match t {
            true => cb::cublasOperation_t::CUBLAS_OP_T,
            false => cb::cublasOperation_t::CUBLAS_OP_N,
        };
        let (alpha, beta) = (1.0f32, 0.0f32);
        let raw = self.raw.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: validated dims, leading dims and ranges inside live
        // buffers of this device; alpha/beta are host f32 (the default
        // pointer mode) matching the f32 compute type.
        let status = unsafe {
            (self.lib.gemm)(
                raw.0,
                op(g.trans_a),
                op(g.trans_b),
                g.m as c_int,
                g.n as c_int,
                g.k as c_int,
                (&alpha as *const f32).cast(),
                g_ptr(ptrs[0]),
                ty,
                g.a.ld as c_int,
                g.a.stride as c_longlong,
                g_ptr(ptrs[1]),
                ty,
                g.b.ld as c_int,
                g.b.stride as c_longlong,
                (&beta as *const f32).cast(),
                ptrs[2] as usize as *mut c_void,
                c_ty,
                g.c.ld as c_int,
                g.c.stride as c_longlong,
                g.batch as c_int,
                cb::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                cb::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        };
        check(self.lib, status, "cublasGemmStridedBatchedEx", device)
    }
}

impl Blas for CublasHandle {
    fn name(&self) -> &'static str {
        "cuBLAS"
    }

    unsafe fn gemm(&self, g: &Gemm, ptrs: [u64; 3]) -> Result<()> {
        // SAFETY: the device's retained context.
        unsafe { cu::ctx::set_current(self.ctx.0) }.map_err(|e| Error::Cuda {
            call: "cuCtxSetCurrent".into(),
            device: self.device.clone(),
            message: super::driver::describe(&e),
        })?;
        self.gemm_current(g, ptrs)
    }
}

fn g_ptr(p: u64) -> *const c_void {
    p as usize as *const c_void
}

impl Drop for CublasHandle {
    fn drop(&mut self) {
        let raw = self.raw.get_mut().unwrap_or_else(|e| e.into_inner()).0;
        // SAFETY: created by cublasCreate_v2, destroyed once; errors ignored.
        unsafe { (self.lib.destroy)(raw) };
    }
}
