//! The ROCm entry points ferrocm uses, resolved from the shared libraries at
//! run time (`dlopen` through `libloading`).
//!
//! Why not link: rocm-rs built with `SKIP_BINDGEN=1` (the only way to build it
//! without a ROCm installation) emits no link flags, so a binary calling its
//! functions does not link, and one that linked against ROCm would not start
//! on a machine without it. Resolving the few functions below at run time lets
//! a `--features rocm` binary start anywhere, report that ROCm is absent and
//! fall back to the CPU.
//!
//! Where the declarations come from: every type is rocm-rs's (its bindings
//! were generated from the ROCm 7.0 headers), and every function signature
//! declared here is checked at compile time against rocm-rs's binding of the
//! same function (`const _: <our fn type> = rocm_rs::...::<name>;` fails to
//! compile if the two differ). That check takes only the function's type, not
//! its address at run time, so it adds no link-time reference.
//!
//! The libraries are opened once per process and never closed (they live in
//! `static`s): the function pointers copied out of them stay valid for the
//! life of the process.

use libloading::Library;
use rocm_rs::hip::bindings as hb;
use rocm_rs::miopen::ffi as mf;
use rocm_rs::rocblas::ffi as rf;
use std::os::raw::{c_char, c_int, c_uint, c_void};
use std::path::PathBuf;
use std::sync::OnceLock;

/// Declares a table of entry points of one library. Each `fn` becomes a field
/// holding the resolved function pointer; `check(path)` names rocm-rs's
/// binding to compare the signature with at compile time.
macro_rules! entry_points {
    (@check [] $($unchecked:tt)*) => {};
    (@check [$($chk:ident)::+] fn $f:ident($($t:ty),*) -> $ret:ty) => {
        const _: unsafe extern "C" fn($($t),*) -> $ret = $($chk)::+::$f;
    };
    (
        $(#[$meta:meta])*
        pub(crate) struct $name:ident {
            $(
                $(#[check($($chk:ident)::+)])?
                fn $f:ident($($arg:ident: $t:ty),* $(,)?) -> $ret:ty;
            )*
        }
    ) => {
        $(#[$meta])*
        #[allow(non_snake_case)]
        pub(crate) struct $name {
            $(
                #[doc = concat!("`", stringify!($f), "`.")]
                pub(crate) $f: unsafe extern "C" fn($($t),*) -> $ret,
            )*
            /// The library the pointers point into; kept open for as long as
            /// the table exists (tables live in statics: forever). Also where
            /// later entry points can be resolved from.
            #[allow(dead_code)]
            pub(crate) library: Library,
            /// Where it was found (the name or path given to `dlopen`).
            #[allow(dead_code)]
            pub(crate) found_as: String,
        }

        impl $name {
            /// Resolves every entry point in `library`.
            #[allow(non_snake_case)]
            fn resolve(library: Library, found_as: String) -> Result<Self, String> {
                $(
                    // SAFETY: the type is the C declaration of this symbol
                    // (checked against rocm-rs's binding below); the pointer
                    // stays valid while `library` is open, and `library` is
                    // stored next to it.
                    let $f = unsafe {
                        *library
                            .get::<unsafe extern "C" fn($($t),*) -> $ret>(
                                concat!(stringify!($f), "\0").as_bytes(),
                            )
                            .map_err(|e| format!("{found_as} lacks `{}`: {}", stringify!($f), e.source_text()))?
                    };
                )*
                Ok(Self { $($f,)* library, found_as })
            }
        }

        $(
            entry_points!(@check [$($($chk)::+)?] fn $f($($t),*) -> $ret);
        )*
    };
}

entry_points! {
    /// HIP runtime entry points (`libamdhip64`).
    pub(crate) struct Hip {
        #[check(hb)] fn hipGetDeviceCount(count: *mut c_int) -> hb::hipError_t;
        #[check(hb)] fn hipSetDevice(device: c_int) -> hb::hipError_t;
        #[check(hb)] fn hipGetErrorName(error: hb::hipError_t) -> *const c_char;
        #[check(hb)] fn hipGetErrorString(error: hb::hipError_t) -> *const c_char;
        #[check(hb)] fn hipRuntimeGetVersion(version: *mut c_int) -> hb::hipError_t;
        #[check(hb)] fn hipMalloc(ptr: *mut *mut c_void, size: usize) -> hb::hipError_t;
        #[check(hb)] fn hipFree(ptr: *mut c_void) -> hb::hipError_t;
        #[check(hb)] fn hipMemGetInfo(free: *mut usize, total: *mut usize) -> hb::hipError_t;
        #[check(hb)]
        fn hipMemsetAsync(dst: *mut c_void, value: c_int, bytes: usize, stream: hb::hipStream_t) -> hb::hipError_t;
        #[check(hb)]
        fn hipMemcpyAsync(
            dst: *mut c_void,
            src: *const c_void,
            bytes: usize,
            kind: hb::hipMemcpyKind,
            stream: hb::hipStream_t,
        ) -> hb::hipError_t;
        #[check(hb)] fn hipStreamCreate(stream: *mut hb::hipStream_t) -> hb::hipError_t;
        #[check(hb)] fn hipStreamDestroy(stream: hb::hipStream_t) -> hb::hipError_t;
        #[check(hb)] fn hipStreamSynchronize(stream: hb::hipStream_t) -> hb::hipError_t;
        #[check(hb)] fn hipModuleLoadData(module: *mut hb::hipModule_t, image: *const c_void) -> hb::hipError_t;
        #[check(hb)] fn hipModuleUnload(module: hb::hipModule_t) -> hb::hipError_t;
        #[check(hb)]
        fn hipModuleGetFunction(
            function: *mut hb::hipFunction_t,
            module: hb::hipModule_t,
            name: *const c_char,
        ) -> hb::hipError_t;
        #[check(hb)]
        fn hipModuleLaunchKernel(
            f: hb::hipFunction_t,
            grid_x: c_uint,
            grid_y: c_uint,
            grid_z: c_uint,
            block_x: c_uint,
            block_y: c_uint,
            block_z: c_uint,
            shared_mem_bytes: c_uint,
            stream: hb::hipStream_t,
            kernel_params: *mut *mut c_void,
            extra: *mut *mut c_void,
        ) -> hb::hipError_t;
        #[check(hb)] fn hipEventCreate(event: *mut hb::hipEvent_t) -> hb::hipError_t;
        #[check(hb)] fn hipEventRecord(event: hb::hipEvent_t, stream: hb::hipStream_t) -> hb::hipError_t;
        #[check(hb)] fn hipEventSynchronize(event: hb::hipEvent_t) -> hb::hipError_t;
        #[check(hb)]
        fn hipEventElapsedTime(ms: *mut f32, start: hb::hipEvent_t, stop: hb::hipEvent_t) -> hb::hipError_t;
        #[check(hb)] fn hipEventDestroy(event: hb::hipEvent_t) -> hb::hipError_t;
        #[check(hb)] fn hipEventQuery(event: hb::hipEvent_t) -> hb::hipError_t;
        #[check(hb)] fn hipHostMalloc(ptr: *mut *mut c_void, size: usize, flags: c_uint) -> hb::hipError_t;
        #[check(hb)] fn hipHostFree(ptr: *mut c_void) -> hb::hipError_t;
    }
}

entry_points! {
    /// HIP graph entry points (`libamdhip64`): resolved apart from [`Hip`]
    /// so that a runtime without them still runs everything but graphs.
    pub(crate) struct HipGraphApi {
        #[check(hb)] fn hipStreamBeginCapture(stream: hb::hipStream_t, mode: hb::hipStreamCaptureMode) -> hb::hipError_t;
        #[check(hb)] fn hipStreamEndCapture(stream: hb::hipStream_t, graph: *mut hb::hipGraph_t) -> hb::hipError_t;
        #[check(hb)]
        fn hipGraphInstantiateWithFlags(
            exec: *mut hb::hipGraphExec_t,
            graph: hb::hipGraph_t,
            flags: std::os::raw::c_ulonglong,
        ) -> hb::hipError_t;
        #[check(hb)]
        fn hipGraphExecUpdate(
            exec: hb::hipGraphExec_t,
            graph: hb::hipGraph_t,
            error_node: *mut hb::hipGraphNode_t,
            result: *mut hb::hipGraphExecUpdateResult,
        ) -> hb::hipError_t;
        #[check(hb)] fn hipGraphLaunch(exec: hb::hipGraphExec_t, stream: hb::hipStream_t) -> hb::hipError_t;
        #[check(hb)] fn hipGraphDestroy(graph: hb::hipGraph_t) -> hb::hipError_t;
        #[check(hb)] fn hipGraphExecDestroy(exec: hb::hipGraphExec_t) -> hb::hipError_t;
    }
}

/// `hipGetDevicePropertiesR0600`: the ROCm 6.0+ name of `hipGetDeviceProperties`
/// (the header maps the plain name to it); its struct layout is the one frozen
/// under that versioned symbol. ROCm 5 runtimes do not export it.
pub(crate) type GetDevicePropertiesR0600 =
    unsafe extern "C" fn(prop: *mut hb::hipDeviceProp_tR0600, device: c_int) -> hb::hipError_t;
const _: GetDevicePropertiesR0600 = hb::hipGetDevicePropertiesR0600;

entry_points! {
    /// rocBLAS entry points (`librocblas`).
    pub(crate) struct Rocblas {
        #[check(rf)] fn rocblas_create_handle(handle: *mut rf::rocblas_handle) -> rf::rocblas_status;
        #[check(rf)] fn rocblas_destroy_handle(handle: rf::rocblas_handle) -> rf::rocblas_status;
        #[check(rf)] fn rocblas_set_stream(handle: rf::rocblas_handle, stream: rf::hipStream_t) -> rf::rocblas_status;
        #[check(rf)] fn rocblas_status_to_string(status: rf::rocblas_status) -> *const c_char;
        #[check(rf)] fn rocblas_sgemm_strided_batched(
            handle: rf::rocblas_handle, trans_a: rf::rocblas_operation, trans_b: rf::rocblas_operation,
            m: rf::rocblas_int, n: rf::rocblas_int, k: rf::rocblas_int, alpha: *const f32,
            a: *const f32, lda: rf::rocblas_int, stride_a: rf::rocblas_stride,
            b: *const f32, ldb: rf::rocblas_int, stride_b: rf::rocblas_stride, beta: *const f32,
            c: *mut f32, ldc: rf::rocblas_int, stride_c: rf::rocblas_stride, batch_count: rf::rocblas_int,
        ) -> rf::rocblas_status;
        // Not checked: rocm-rs keeps its binding of this one crate-private;
        // the declaration is that binding's, argument for argument.
        fn rocblas_gemm_strided_batched_ex(
            handle: rf::rocblas_handle, trans_a: rf::rocblas_operation, trans_b: rf::rocblas_operation,
            m: rf::rocblas_int, n: rf::rocblas_int, k: rf::rocblas_int, alpha: *const c_void,
            a: *const c_void, a_type: rf::rocblas_datatype, lda: rf::rocblas_int, stride_a: rf::rocblas_stride,
            b: *const c_void, b_type: rf::rocblas_datatype, ldb: rf::rocblas_int, stride_b: rf::rocblas_stride,
            beta: *const c_void,
            c: *const c_void, c_type: rf::rocblas_datatype, ldc: rf::rocblas_int, stride_c: rf::rocblas_stride,
            d: *mut c_void, d_type: rf::rocblas_datatype, ldd: rf::rocblas_int, stride_d: rf::rocblas_stride,
            batch_count: rf::rocblas_int, compute_type: rf::rocblas_datatype, algo: rf::rocblas_gemm_algo,
            solution_index: i32, flags: u32,
        ) -> rf::rocblas_status;
    }
}

entry_points! {
    /// MIOpen entry points (`libMIOpen`).
    pub(crate) struct Miopen {
        // Not checked: rocm-rs does not export the stream type of its MIOpen
        // bindings (`miopenAcceleratorQueue_t`, a `hipStream_t`, i.e. a pointer).
        fn miopenCreateWithStream(handle: *mut mf::miopenHandle_t, stream: *mut c_void) -> mf::miopenStatus_t;
        #[check(mf)] fn miopenDestroy(handle: mf::miopenHandle_t) -> mf::miopenStatus_t;
        #[check(mf)] fn miopenGetErrorString(status: mf::miopenStatus_t) -> *const c_char;
        #[check(mf)] fn miopenCreateTensorDescriptor(desc: *mut mf::miopenTensorDescriptor_t) -> mf::miopenStatus_t;
        #[check(mf)]
        fn miopenSetTensorDescriptor(
            desc: mf::miopenTensorDescriptor_t, data_type: mf::miopenDataType_t, dims: c_int,
            lens: *const c_int, strides: *const c_int,
        ) -> mf::miopenStatus_t;
        #[check(mf)] fn miopenDestroyTensorDescriptor(desc: mf::miopenTensorDescriptor_t) -> mf::miopenStatus_t;
        #[check(mf)]
        fn miopenCreateConvolutionDescriptor(desc: *mut mf::miopenConvolutionDescriptor_t) -> mf::miopenStatus_t;
        #[check(mf)]
        fn miopenInitConvolutionNdDescriptor(
            desc: mf::miopenConvolutionDescriptor_t, spatial_dims: c_int, pad: *const c_int,
            stride: *const c_int, dilation: *const c_int, mode: mf::miopenConvolutionMode_t,
        ) -> mf::miopenStatus_t;
        #[check(mf)]
        fn miopenSetConvolutionGroupCount(desc: mf::miopenConvolutionDescriptor_t, groups: c_int) -> mf::miopenStatus_t;
        #[check(mf)]
        fn miopenGetConvolutionNdForwardOutputDim(
            desc: mf::miopenConvolutionDescriptor_t, x: mf::miopenTensorDescriptor_t,
            w: mf::miopenTensorDescriptor_t, dims: *mut c_int, lens: *mut c_int,
        ) -> mf::miopenStatus_t;
        #[check(mf)]
        fn miopenDestroyConvolutionDescriptor(desc: mf::miopenConvolutionDescriptor_t) -> mf::miopenStatus_t;
        #[check(mf)]
        fn miopenConvolutionForwardGetSolutionCount(
            handle: mf::miopenHandle_t, w: mf::miopenTensorDescriptor_t, x: mf::miopenTensorDescriptor_t,
            conv: mf::miopenConvolutionDescriptor_t, y: mf::miopenTensorDescriptor_t, count: *mut usize,
        ) -> mf::miopenStatus_t;
        #[check(mf)]
        fn miopenConvolutionForwardGetSolution(
            handle: mf::miopenHandle_t, w: mf::miopenTensorDescriptor_t, x: mf::miopenTensorDescriptor_t,
            conv: mf::miopenConvolutionDescriptor_t, y: mf::miopenTensorDescriptor_t, max: usize,
            count: *mut usize, solutions: *mut mf::miopenConvSolution_t,
        ) -> mf::miopenStatus_t;
        // Not checked (from here on): rocm-rs keeps its bindings of these
        // private; the declarations are those bindings', argument for argument.
        fn miopenConvolutionForwardCompileSolution(
            handle: mf::miopenHandle_t, w: mf::miopenTensorDescriptor_t, x: mf::miopenTensorDescriptor_t,
            conv: mf::miopenConvolutionDescriptor_t, y: mf::miopenTensorDescriptor_t, solution: u64,
        ) -> mf::miopenStatus_t;
        fn miopenConvolutionBackwardDataGetSolutionCount(
            handle: mf::miopenHandle_t, dy: mf::miopenTensorDescriptor_t, w: mf::miopenTensorDescriptor_t,
            conv: mf::miopenConvolutionDescriptor_t, dx: mf::miopenTensorDescriptor_t, count: *mut usize,
        ) -> mf::miopenStatus_t;
        fn miopenConvolutionBackwardDataGetSolution(
            handle: mf::miopenHandle_t, dy: mf::miopenTensorDescriptor_t, w: mf::miopenTensorDescriptor_t,
            conv: mf::miopenConvolutionDescriptor_t, dx: mf::miopenTensorDescriptor_t, max: usize,
            count: *mut usize, solutions: *mut mf::miopenConvSolution_t,
        ) -> mf::miopenStatus_t;
        fn miopenConvolutionBackwardDataCompileSolution(
            handle: mf::miopenHandle_t, dy: mf::miopenTensorDescriptor_t, w: mf::miopenTensorDescriptor_t,
            conv: mf::miopenConvolutionDescriptor_t, dx: mf::miopenTensorDescriptor_t, solution: u64,
        ) -> mf::miopenStatus_t;
        fn miopenConvolutionBackwardDataImmediate(
            handle: mf::miopenHandle_t, dy_desc: mf::miopenTensorDescriptor_t, dy: *const c_void,
            w_desc: mf::miopenTensorDescriptor_t, w: *const c_void, conv: mf::miopenConvolutionDescriptor_t,
            dx_desc: mf::miopenTensorDescriptor_t, dx: *mut c_void, workspace: *mut c_void,
            workspace_bytes: usize, solution: u64,
        ) -> mf::miopenStatus_t;
        fn miopenConvolutionForwardImmediate(
            handle: mf::miopenHandle_t, w_desc: mf::miopenTensorDescriptor_t, w: *const c_void,
            x_desc: mf::miopenTensorDescriptor_t, x: *const c_void, conv: mf::miopenConvolutionDescriptor_t,
            y_desc: mf::miopenTensorDescriptor_t, y: *mut c_void, workspace: *mut c_void,
            workspace_bytes: usize, solution: u64,
        ) -> mf::miopenStatus_t;
        #[check(mf)]
        fn miopenCreatePoolingDescriptor(desc: *mut mf::miopenPoolingDescriptor_t) -> mf::miopenStatus_t;
        #[check(mf)]
        fn miopenSetNdPoolingDescriptor(
            desc: mf::miopenPoolingDescriptor_t, mode: mf::miopenPoolingMode_t, dims: c_int,
            window: *const c_int, pad: *const c_int, stride: *const c_int,
        ) -> mf::miopenStatus_t;
        #[check(mf)]
        fn miopenGetPoolingNdForwardOutputDim(
            desc: mf::miopenPoolingDescriptor_t, x: mf::miopenTensorDescriptor_t, dims: c_int,
            lens: *mut c_int,
        ) -> mf::miopenStatus_t;
        #[check(mf)]
        fn miopenPoolingForward(
            handle: mf::miopenHandle_t, desc: mf::miopenPoolingDescriptor_t, alpha: *const c_void,
            x_desc: mf::miopenTensorDescriptor_t, x: *const c_void, beta: *const c_void,
            y_desc: mf::miopenTensorDescriptor_t, y: *mut c_void, do_backward: bool,
            workspace: *mut c_void, workspace_bytes: usize,
        ) -> mf::miopenStatus_t;
        #[check(mf)]
        fn miopenDestroyPoolingDescriptor(desc: mf::miopenPoolingDescriptor_t) -> mf::miopenStatus_t;
        #[check(mf)]
        fn miopenDeriveBNTensorDescriptor(
            derived: mf::miopenTensorDescriptor_t, x: mf::miopenTensorDescriptor_t,
            mode: mf::miopenBatchNormMode_t,
        ) -> mf::miopenStatus_t;
        #[check(mf)]
        fn miopenBatchNormalizationForwardInference(
            handle: mf::miopenHandle_t, mode: mf::miopenBatchNormMode_t, alpha: *mut c_void,
            beta: *mut c_void, x_desc: mf::miopenTensorDescriptor_t, x: *const c_void,
            y_desc: mf::miopenTensorDescriptor_t, y: *mut c_void,
            vectors: mf::miopenTensorDescriptor_t, scale: *mut c_void, bias: *mut c_void,
            mean: *mut c_void, var: *mut c_void, epsilon: f64,
        ) -> mf::miopenStatus_t;
    }
}

/// The loaded HIP runtime: its entry points and the optional ones.
pub(crate) struct HipRuntime {
    /// The entry points every supported runtime has.
    pub(crate) api: Hip,
    /// `hipGetDevicePropertiesR0600`, if the runtime exports it (ROCm >= 6.0).
    pub(crate) get_device_properties: Option<GetDevicePropertiesR0600>,
    /// The graph entry points, if the runtime exports them all.
    pub(crate) graphs: Option<HipGraphApi>,
}

/// Candidate names for one library, in the order they are tried: under
/// `$ROCM_PATH/lib` when that is set, then the plain and versioned sonames
/// (the dynamic loader's search: `LD_LIBRARY_PATH`, the ld.so cache), then
/// `/opt/rocm/lib`. The same order for HIP, rocBLAS and MIOpen, so that all
/// three come from the same installation in the usual layouts.
fn candidates(stem: &str, versions: &[&str]) -> Vec<String> {
    let mut names = Vec::new();
    let file = format!("{stem}.so");
    if let Some(root) = std::env::var_os("ROCM_PATH").filter(|r| !r.is_empty()) {
        names.push(
            PathBuf::from(root)
                .join("lib")
                .join(&file)
                .to_string_lossy()
                .into_owned(),
        );
    }
    names.push(file.clone());
    names.extend(versions.iter().map(|v| format!("{file}.{v}")));
    names.push(format!("/opt/rocm/lib/{file}"));
    names
}

/// Opens the first candidate that loads; the error lists every attempt.
fn open_first(stem: &str, versions: &[&str]) -> Result<(Library, String), String> {
    let mut tried = Vec::new();
    for name in candidates(stem, versions) {
        // SAFETY: loading a ROCm library runs its initialisers, which is what
        // linking against it would do too; nothing else is assumed of it.
        match unsafe { Library::new(&name) } {
            Ok(lib) => return Ok((lib, name)),
            Err(e) => {
                // dlerror's text usually starts with the name already.
                let text = e.source_text();
                tried.push(if text.starts_with(&name) {
                    text
                } else {
                    format!("{name}: {text}")
                });
            }
        }
    }
    Err(format!("{stem} not found (tried {})", tried.join("; ")))
}

trait SourceText {
    fn source_text(&self) -> String;
}

impl SourceText for libloading::Error {
    /// The loader's own message (`libloading`'s Display is only "dlopen failed").
    fn source_text(&self) -> String {
        match std::error::Error::source(self) {
            Some(s) => s.to_string(),
            None => self.to_string(),
        }
    }
}

/// The HIP runtime, opened on first use; `Err` says why it is not available.
pub(crate) fn hip() -> Result<&'static HipRuntime, &'static str> {
    static HIP: OnceLock<Result<HipRuntime, String>> = OnceLock::new();
    HIP.get_or_init(|| {
        let (library, found_as) = open_first("libamdhip64", &["7", "6", "5"])?;
        // SAFETY: the type is the C declaration of the symbol (checked above
        // against rocm-rs); the library stays open inside `api`.
        let get_device_properties = unsafe {
            library
                .get::<GetDevicePropertiesR0600>(b"hipGetDevicePropertiesR0600\0")
                .ok()
                .map(|s| *s)
        };
        // The same library opened again (the loader counts references).
        // SAFETY: as `open_first`.
        let graphs = unsafe { Library::new(&found_as) }
            .ok()
            .and_then(|l| HipGraphApi::resolve(l, found_as.clone()).ok());
        let api = Hip::resolve(library, found_as)?;
        Ok(HipRuntime {
            api,
            get_device_properties,
            graphs,
        })
    })
    .as_ref()
    .map_err(|e| e.as_str())
}

/// rocBLAS, opened on first use.
pub(crate) fn rocblas() -> Result<&'static Rocblas, &'static str> {
    static ROCBLAS: OnceLock<Result<Rocblas, String>> = OnceLock::new();
    ROCBLAS
        .get_or_init(|| {
            let (library, found_as) = open_first("librocblas", &["5", "4", "3", "0"])?;
            Rocblas::resolve(library, found_as)
        })
        .as_ref()
        .map_err(|e| e.as_str())
}

/// MIOpen, opened on first use.
pub(crate) fn miopen() -> Result<&'static Miopen, &'static str> {
    static MIOPEN: OnceLock<Result<Miopen, String>> = OnceLock::new();
    MIOPEN
        .get_or_init(|| {
            let (library, found_as) = open_first("libMIOpen", &["1"])?;
            Miopen::resolve(library, found_as)
        })
        .as_ref()
        .map_err(|e| e.as_str())
}

/// Text of a C string owned by a library (error strings are static there).
///
/// # Safety
/// `p` is null or points to a NUL-terminated string that outlives the call.
pub(crate) unsafe fn c_text(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: by the caller.
    Some(
        unsafe { std::ffi::CStr::from_ptr(p) }
            .to_string_lossy()
            .into_owned(),
    )
}

/// The text of a fixed-size C string field (up to its first NUL, or all of it).
pub(crate) fn field_text(field: &[c_char]) -> String {
    let bytes: Vec<u8> = field
        .iter()
        .map(|&c| c as u8)
        .take_while(|&b| b != 0)
        .collect();
    String::from_utf8_lossy(&bytes).trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_search_the_loader_path_then_opt_rocm() {
        let c = candidates("libamdhip64", &["7", "6"]);
        let tail: Vec<&str> = c.iter().rev().take(4).rev().map(|s| s.as_str()).collect();
        assert_eq!(
            tail,
            [
                "libamdhip64.so",
                "libamdhip64.so.7",
                "libamdhip64.so.6",
                "/opt/rocm/lib/libamdhip64.so"
            ]
        );
    }

    #[test]
    fn field_text_stops_at_nul_and_survives_a_full_field() {
        let mut f = [0 as c_char; 8];
        for (i, b) in b"gfx942".iter().enumerate() {
            f[i] = *b as c_char;
        }
        assert_eq!(field_text(&f), "gfx942");
        let full = [b'x' as c_char; 4];
        assert_eq!(field_text(&full), "xxxx");
    }
}
