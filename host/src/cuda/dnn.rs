//! cuDNN for CUDA devices (the backend's [`Dnn`]), opened at run time
//! (`dlopen`) like cuBLAS: `FERROCM_CUDNN` if set, else the sonames of
//! cuDNN 9 and 8 (PyTorch's wheels ship `libcudnn.so.9` under
//! `site-packages/nvidia/cudnn/lib`; put that folder on `LD_LIBRARY_PATH`
//! or name the file). Absent, the convolution runs ferrocm's kernels.
//!
//! Each problem is planned on the backend (graph) API first (`graph`:
//! an operation graph of the one convolution and, ungrouped with a bias,
//! the bias add; cuDNN's heuristics; up to four execution plans, or
//! `FERROCM_CUDNN_CANDIDATES`, timed on the first call, the fastest kept;
//! a graph plan that fails to run is dropped and the shape runs our kernels
//! from then on), which offers
//! the engines PyTorch runs; where it declines (or with
//! `FERROCM_CUDNN_API=legacy`), on the legacy API. `FERROCM_CUDNN_VERBOSE=1`
//! says on stderr which and, for the graph path, the candidates' times.
//!
//! The legacy convolution API, which cuDNN 9 still ships and which maps
//! one-to-one to MIOpen's: a tensor descriptor each for input and output
//! (`cudnnSetTensorNdDescriptor`, strides for NCHW or NHWC), a filter
//! descriptor (`cudnnSetFilterNdDescriptor`, KCRS or KRSC), a convolution
//! descriptor (`cudnnSetConvolutionNdDescriptor` in cross-correlation mode
//! with an f32 compute type, `cudnnSetConvolutionGroupCount`,
//! `cudnnSetConvolutionMathType`); the output dims cuDNN derives
//! (`cudnnGetConvolutionNdForwardOutputDim`) are checked against ours; the
//! algorithm from cuDNN's heuristics (`cudnnGetConvolutionForwardAlgorithm_v7`,
//! as PyTorch does without `benchmark`), the first that succeeds, computes
//! the direct sum of products (implicit GEMM, GEMM or direct: FFT and
//! Winograd transform the operands and round differently from the f32 sum
//! the op promises) and, for f32, uses FMA math only (no TF32); its
//! workspace from `cudnnGetConvolutionForwardWorkspaceSize`; then
//! `cudnnConvolutionForward`. A transposed convolution is the same
//! convolution's backward data (`cudnnGetConvolutionBackwardDataAlgorithm_v7`,
//! `..BackwardDataWorkspaceSize`, `cudnnConvolutionBackwardData`; algorithms
//! 0 and 1), our input its dy and our output its dx, the output padding
//! implied by dx's size. Descriptors and algorithm are kept per
//! problem for the process. Other calls: `cudnnCreate`, `cudnnSetStream`,
//! `cudnnDestroy`, `cudnnGetVersion`, `cudnnGetErrorString` and the
//! descriptors' create/destroy.
//!
//! Statuses: every call's is checked. Any failure while planning (BAD_PARAM
//! and NOT_SUPPORTED, cuDNN 9's 2000 and 3000 families and 8's 3 and 9,
//! above all; also a sub-library that does not load) declines the problem
//! (remembered, a failure said once on stderr; our kernels run); a failure
//! of the convolution call itself is `Error::Cuda` with cuDNN's message and
//! the status number. A transposed convolution may take backward-data
//! algorithm 0, which adds with atomics: its last bits may vary between
//! runs (as PyTorch's default allows).
//!
//! The declarations below are cuDNN's C signatures with enums as `c_int`
//! (a status or enum value a newer cuDNN adds must not be undefined
//! behaviour in a Rust enum); the perf struct's layout is checked against
//! cudarc's binding of it at compile time.

use super::driver::{Handle, describe};
use crate::dnn::{
    BatchNormAddresses, BatchNormProblem, ConvAddresses, ConvProblem, Dnn, DnnGuard, DnnType,
    PlanStop as Stop, PoolMode, PoolProblem, plan_once, planned,
};
use crate::error::{Error, Result};
use cudarc::cudnn::sys as cudnn_sys;
use cudarc::driver::{result as cu, sys};
use libloading::Library;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void};
use std::ptr::null_mut;
use std::sync::{Mutex, OnceLock};

#[path = "dnn_graph.rs"]
mod graph;
use graph::GraphPlans;

type Ptr = *mut c_void;
type Status = c_int;

/// `cudnnConvolutionFwdAlgoPerf_t` with its enums as `c_int`.
#[repr(C)]
#[derive(Clone, Copy)]
struct FwdPerf {
    algo: c_int,
    status: Status,
    time: f32,
    memory: usize,
    determinism: c_int,
    math_type: c_int,
    reserved: [c_int; 3],
}
// The backward-data perf struct has the same fields (read as `FwdPerf`).
const _: () = assert!(
    size_of::<FwdPerf>() == size_of::<cudarc::cudnn::sys::cudnnConvolutionBwdDataAlgoPerf_t>()
);
const _: () = assert!(
    size_of::<FwdPerf>() == size_of::<cudarc::cudnn::sys::cudnnConvolutionFwdAlgoPerf_t>()
        && align_of::<FwdPerf>() == align_of::<cudarc::cudnn::sys::cudnnConvolutionFwdAlgoPerf_t>()
);

const SUCCESS: Status = 0;
const DATA_FLOAT: c_int = 0;
const DATA_HALF: c_int = 2;
const DATA_BFLOAT16: c_int = 9;
const TENSOR_NCHW: c_int = 0;
const TENSOR_NHWC: c_int = 1;
const CROSS_CORRELATION: c_int = 1;
const DEFAULT_MATH: c_int = 0;
const TENSOR_OP_MATH: c_int = 1;
const FMA_MATH: c_int = 3;
/// IMPLICIT_GEMM, IMPLICIT_PRECOMP_GEMM, GEMM, DIRECT: the forward
/// algorithms that sum the products themselves.
const DIRECT_SUM_ALGOS: [c_int; 4] = [0, 1, 2, 3];
/// BWD_DATA_ALGO_0 and _1: the backward-data ones (the rest are FFT and
/// Winograd). ALGO_0 adds with atomics, so its sums' order (and last bits)
/// may vary between runs; requiring determinism left only ALGO_1 on the
/// H200, at 1.48 ms where ALGO_0 takes 0.25 and our kernels 0.84.
const DIRECT_SUM_BWD_DATA_ALGOS: [c_int; 2] = [0, 1];
/// Pooling modes and the NaN rule, as cuDNN's header numbers them.
const POOLING_MAX: c_int = cudnn_sys::cudnnPoolingMode_t::CUDNN_POOLING_MAX as c_int;
const POOLING_AVG_INCLUDE_PAD: c_int =
    cudnn_sys::cudnnPoolingMode_t::CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING as c_int;
const POOLING_AVG_EXCLUDE_PAD: c_int =
    cudnn_sys::cudnnPoolingMode_t::CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING as c_int;
const PROPAGATE_NAN: c_int = cudnn_sys::cudnnNanPropagation_t::CUDNN_PROPAGATE_NAN as c_int;
const BATCHNORM_SPATIAL: c_int = cudnn_sys::cudnnBatchNormMode_t::CUDNN_BATCHNORM_SPATIAL as c_int;

macro_rules! cudnn_api {
    ($($field:ident = $name:literal: fn($($t:ty),*) -> $r:ty;)*) => {
        /// The resolved entry points (the library stays open for the process).
        pub(crate) struct Cudnn {
            $($field: unsafe extern "C" fn($($t),*) -> $r,)*
            /// The name or path it was opened as.
            pub(crate) found_as: String,
            /// `cudnnGetVersion()`, e.g. 91002.
            pub(crate) version: usize,
            _library: Library,
        }

        fn resolve(library: Library, found_as: String) -> std::result::Result<Cudnn, String> {
            // SAFETY: each symbol is read as the type of its C declaration.
            unsafe {
                $(
                    let $field = *library
                        .get::<unsafe extern "C" fn($($t),*) -> $r>(concat!($name, "\0").as_bytes())
                        .map_err(|e| format!("{found_as} lacks {}: {e}", $name))?;
                )*
                let get_version = *library
                    .get::<unsafe extern "C" fn() -> usize>(b"cudnnGetVersion\0")
                    .map_err(|e| format!("{found_as} lacks cudnnGetVersion: {e}"))?;
                Ok(Cudnn { $($field,)* found_as, version: get_version(), _library: library })
            }
        }
    };
}

cudnn_api! {
    create = "cudnnCreate": fn(*mut Ptr) -> Status;
    destroy = "cudnnDestroy": fn(Ptr) -> Status;
    set_stream = "cudnnSetStream": fn(Ptr, Ptr) -> Status;
    error_string = "cudnnGetErrorString": fn(Status) -> *const c_char;
    create_tensor = "cudnnCreateTensorDescriptor": fn(*mut Ptr) -> Status;
    set_tensor = "cudnnSetTensorNdDescriptor": fn(Ptr, c_int, c_int, *const c_int, *const c_int) -> Status;
    destroy_tensor = "cudnnDestroyTensorDescriptor": fn(Ptr) -> Status;
    create_filter = "cudnnCreateFilterDescriptor": fn(*mut Ptr) -> Status;
    set_filter = "cudnnSetFilterNdDescriptor": fn(Ptr, c_int, c_int, c_int, *const c_int) -> Status;
    destroy_filter = "cudnnDestroyFilterDescriptor": fn(Ptr) -> Status;
    create_conv = "cudnnCreateConvolutionDescriptor": fn(*mut Ptr) -> Status;
    set_conv = "cudnnSetConvolutionNdDescriptor":
        fn(Ptr, c_int, *const c_int, *const c_int, *const c_int, c_int, c_int) -> Status;
    set_groups = "cudnnSetConvolutionGroupCount": fn(Ptr, c_int) -> Status;
    set_math = "cudnnSetConvolutionMathType": fn(Ptr, c_int) -> Status;
    destroy_conv = "cudnnDestroyConvolutionDescriptor": fn(Ptr) -> Status;
    output_dims = "cudnnGetConvolutionNdForwardOutputDim": fn(Ptr, Ptr, Ptr, c_int, *mut c_int) -> Status;
    algo_count = "cudnnGetConvolutionForwardAlgorithmMaxCount": fn(Ptr, *mut c_int) -> Status;
    heuristics = "cudnnGetConvolutionForwardAlgorithm_v7":
        fn(Ptr, Ptr, Ptr, Ptr, Ptr, c_int, *mut c_int, *mut FwdPerf) -> Status;

    workspace_size = "cudnnGetConvolutionForwardWorkspaceSize":
        fn(Ptr, Ptr, Ptr, Ptr, Ptr, c_int, *mut usize) -> Status;
    bwd_algo_count = "cudnnGetConvolutionBackwardDataAlgorithmMaxCount": fn(Ptr, *mut c_int) -> Status;
    bwd_heuristics = "cudnnGetConvolutionBackwardDataAlgorithm_v7":
        fn(Ptr, Ptr, Ptr, Ptr, Ptr, c_int, *mut c_int, *mut FwdPerf) -> Status;
    bwd_workspace_size = "cudnnGetConvolutionBackwardDataWorkspaceSize":
        fn(Ptr, Ptr, Ptr, Ptr, Ptr, c_int, *mut usize) -> Status;
    backward_data = "cudnnConvolutionBackwardData": fn(
        Ptr, *const c_void, Ptr, *const c_void, Ptr, *const c_void, Ptr, c_int, Ptr, usize,
        *const c_void, Ptr, Ptr
    ) -> Status;
    backend_create = "cudnnBackendCreateDescriptor": fn(c_int, *mut Ptr) -> Status;
    backend_destroy = "cudnnBackendDestroyDescriptor": fn(Ptr) -> Status;
    backend_set = "cudnnBackendSetAttribute": fn(Ptr, c_int, c_int, i64, *const c_void) -> Status;
    backend_get = "cudnnBackendGetAttribute":
        fn(Ptr, c_int, c_int, i64, *mut i64, *mut c_void) -> Status;
    backend_finalize = "cudnnBackendFinalize": fn(Ptr) -> Status;
    backend_execute = "cudnnBackendExecute": fn(Ptr, Ptr, Ptr) -> Status;
    forward = "cudnnConvolutionForward": fn(
        Ptr, *const c_void, Ptr, *const c_void, Ptr, *const c_void, Ptr, c_int, Ptr, usize,
        *const c_void, Ptr, Ptr
    ) -> Status;
    create_pool = "cudnnCreatePoolingDescriptor": fn(*mut Ptr) -> Status;
    set_pool = "cudnnSetPoolingNdDescriptor":
        fn(Ptr, c_int, c_int, c_int, *const c_int, *const c_int, *const c_int) -> Status;
    pool_output_dims = "cudnnGetPoolingNdForwardOutputDim": fn(Ptr, Ptr, c_int, *mut c_int) -> Status;
    pool_forward = "cudnnPoolingForward":
        fn(Ptr, Ptr, *const c_void, Ptr, *const c_void, *const c_void, Ptr, Ptr) -> Status;
    destroy_pool = "cudnnDestroyPoolingDescriptor": fn(Ptr) -> Status;
    derive_bn = "cudnnDeriveBNTensorDescriptor": fn(Ptr, Ptr, c_int) -> Status;
    bn_inference = "cudnnBatchNormalizationForwardInference": fn(
        Ptr, c_int, *const c_void, *const c_void, Ptr, Ptr, Ptr, Ptr, Ptr, Ptr, Ptr, Ptr, Ptr, f64
    ) -> Status;
}

/// Opens cuDNN once per process: `FERROCM_CUDNN` if set, else the sonames
/// of cuDNN 9 and 8 and the unversioned development link.
pub(crate) fn cudnn() -> std::result::Result<&'static Cudnn, &'static str> {
    static LIB: OnceLock<std::result::Result<Cudnn, String>> = OnceLock::new();
    LIB.get_or_init(|| {
        let mut names: Vec<String> = std::env::var("FERROCM_CUDNN").into_iter().collect();
        names.extend(["libcudnn.so.9", "libcudnn.so.8", "libcudnn.so"].map(String::from));
        let mut why = Vec::new();
        for name in &names {
            // SAFETY: loading cuDNN runs its initialisers, which only set up
            // the library itself.
            match unsafe { Library::new(name) } {
                Ok(library) => return resolve(library, name.clone()),
                Err(e) => why.push(format!("{name}: {e}")),
            }
        }
        Err(format!(
            "cuDNN not found ({}); set FERROCM_CUDNN to its path",
            why.join("; ")
        ))
    })
    .as_ref()
    .map_err(|s| s.as_str())
}

/// Whether a planning status means "not this problem" rather than a
/// failure: BAD_PARAM or NOT_SUPPORTED (and their cuDNN 9 sub-codes).
fn declines(status: Status) -> bool {
    matches!(status, 3 | 9) || (2000..4000).contains(&status)
}

/// How a problem runs: an operation graph's execution plans (the backend
/// API) or the legacy API's descriptors and algorithm.
enum Plan {
    Graph(GraphPlans),
    Legacy(ConvPlan),
}

impl Plan {
    fn workspace(&self) -> usize {
        match self {
            Plan::Graph(g) => g.workspace(),
            Plan::Legacy(l) => l.workspace,
        }
    }
}

/// Whether `FERROCM_CUDNN_API=legacy` asks for the legacy API only (to
/// compare the two; the backend API is tried first otherwise).
fn legacy_only() -> bool {
    static LEGACY: OnceLock<bool> = OnceLock::new();
    *LEGACY.get_or_init(|| {
        std::env::var("FERROCM_CUDNN_API").is_ok_and(|v| v.eq_ignore_ascii_case("legacy"))
    })
}

/// Whether `FERROCM_CUDNN_VERBOSE=1` asks for each problem's planning on
/// stderr (which API, the graph path's candidates and their times).
fn verbose() -> bool {
    static VERBOSE: OnceLock<bool> = OnceLock::new();
    *VERBOSE.get_or_init(|| std::env::var("FERROCM_CUDNN_VERBOSE").is_ok_and(|v| v == "1"))
}

/// One problem's descriptors and algorithm (the legacy API).
struct ConvPlan {
    x: Ptr,
    w: Ptr,
    y: Ptr,
    conv: Ptr,
    algo: c_int,
    workspace: usize,
}

/// The descriptors created so far for a plan, destroyed when dropped
/// unless handed over.
struct Descriptors<'a> {
    lib: &'a Cudnn,
    x: Ptr,
    w: Ptr,
    y: Ptr,
    conv: Ptr,
}

impl Drop for Descriptors<'_> {
    fn drop(&mut self) {
        // SAFETY: each one null or created by its create call, destroyed once.
        unsafe {
            for t in [self.x, self.y] {
                if !t.is_null() {
                    (self.lib.destroy_tensor)(t);
                }
            }
            if !self.w.is_null() {
                (self.lib.destroy_filter)(self.w);
            }
            if !self.conv.is_null() {
                (self.lib.destroy_conv)(self.conv);
            }
        }
    }
}

/// A cuDNN handle bound to one device's stream, used by one thread at a
/// time, with the plans of the problems it has seen.
pub struct CudnnHandle {
    raw: Ptr,
    lock: Mutex<()>,
    /// Per problem: its plan, or `None` when cuDNN declined it.
    plans: Mutex<HashMap<ConvProblem, Option<Plan>>>,
    /// Per pooling problem: its descriptors, or `None` when declined.
    pools: Mutex<HashMap<PoolProblem, Option<PoolPlan>>>,
    /// Per batch-norm problem: its descriptors, or `None` when declined.
    norms: Mutex<HashMap<BatchNormProblem, Option<NormPlan>>>,
    lib: &'static Cudnn,
    /// The stream the handle runs on (timing the graph path's candidates).
    stream: Handle<sys::CUstream>,
    ctx: Handle<sys::CUcontext>,
    device: String,
}

// SAFETY: cuDNN handles and descriptors may be used from any thread, one
// at a time: every use goes through `lock` (the handle) and `plans`.
unsafe impl Send for CudnnHandle {}
// SAFETY: as above.
unsafe impl Sync for CudnnHandle {}

impl CudnnHandle {
    /// A handle for the context `ctx` (current on this thread), on `stream`.
    pub(crate) fn new(stream: Ptr, ctx: Handle<sys::CUcontext>, device: &str) -> Result<Self> {
        let lib = cudnn().map_err(|why| Error::Cuda {
            call: "loading cuDNN".into(),
            device: device.into(),
            message: why.into(),
        })?;
        let mut raw = null_mut();
        // SAFETY: writes one handle for the current context.
        check(
            lib,
            unsafe { (lib.create)(&mut raw) },
            "cudnnCreate",
            device,
        )?;
        let handle = Self {
            raw,
            lock: Mutex::new(()),
            plans: Mutex::new(HashMap::new()),
            pools: Mutex::new(HashMap::new()),
            norms: Mutex::new(HashMap::new()),
            lib,
            stream: Handle(stream.cast()),
            ctx,
            device: device.into(),
        };
        // SAFETY: our handle and the device's stream (a driver CUstream is
        // the runtime's cudaStream_t).
        let status = unsafe { (lib.set_stream)(raw, stream) };
        check(lib, status, "cudnnSetStream", device)?;
        Ok(handle)
    }

    fn current(&self) -> Result<()> {
        // SAFETY: the device's retained context.
        unsafe { cu::ctx::set_current(self.ctx.0) }.map_err(|e| Error::Cuda {
            call: "cuCtxSetCurrent".into(),
            device: self.device.clone(),
            message: describe(&e),
        })
    }

    /// Runs a graph plan on `at`; the first run outside a stream capture
    /// times every candidate (a warm-up and three runs each, on the
    /// stream) and keeps the fastest.
    ///
    /// # Safety
    /// As [`Dnn::conv`]: `at` holds the problem's tensors in live device
    /// memory and a workspace of `g.workspace()` bytes.
    unsafe fn run_graph(&self, g: &mut GraphPlans, at: &ConvAddresses) -> Result<bool> {
        let failed = |e: graph::Declined| match e.status {
            // Not a cuDNN status: a call ours refused.
            SUCCESS => Error::BadDnnCall {
                device: self.device.clone(),
                why: e.call.into(),
            },
            status => status_error(self.lib, status, e.call, &self.device),
        };
        // SAFETY: our stream.
        let capturing = unsafe { cu::stream::is_capturing(self.stream.0) }
            .map(|s| s != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
            .unwrap_or(true);
        if !g.tuned && !capturing {
            let mut times = Vec::with_capacity(g.candidates.len());
            for i in 0..g.candidates.len() {
                // SAFETY: the caller's; every candidate's workspace fits.
                times.push(unsafe { self.time_candidate(g, i, at) });
            }
            if verbose() {
                eprintln!("ferrocm: cuDNN graph candidates' times (ms, 3 runs): {times:?}");
            }
            g.keep_fastest(&times);
        }
        // SAFETY: the caller's.
        unsafe { g.execute(self.raw, 0, at) }
            .map(|()| g.fused_bias)
            .map_err(failed)
    }

    /// Candidate `i`'s time for three runs after a warm-up, `None` when it
    /// fails to run.
    ///
    /// # Safety
    /// As [`CudnnHandle::run_graph`].
    unsafe fn time_candidate(&self, g: &GraphPlans, i: usize, at: &ConvAddresses) -> Option<f32> {
        let flags = sys::CUevent_flags::CU_EVENT_DEFAULT;
        let start = super::driver::Event(cu::event::create(flags).ok()?);
        let stop = super::driver::Event(cu::event::create(flags).ok()?);
        // SAFETY: the caller's; our events and stream.
        unsafe {
            g.execute(self.raw, i, at).ok()?;
            cu::event::record(start.0, self.stream.0).ok()?;
            for _ in 0..3 {
                g.execute(self.raw, i, at).ok()?;
            }
            cu::event::record(stop.0, self.stream.0).ok()?;
            cu::event::synchronize(stop.0).ok()?;
            cu::event::elapsed(start.0, stop.0).ok()
        }
    }

    /// Builds `p`'s descriptors and picks its algorithm.
    fn plan(&self, p: &ConvProblem) -> std::result::Result<ConvPlan, Stop> {
        let lib = self.lib;
        let step = |status: Status, call: &str| -> std::result::Result<(), Stop> {
            match status {
                SUCCESS => Ok(()),
                s if declines(s) => Err(Stop::Declined),
                s => Err(Stop::Failed(status_error(lib, s, call, &self.device))),
            }
        };
        let p = p.at_least_2d();
        let nd = p.input.len() as c_int + 2;
        let dtype = data_type(p.dtype);
        let ints = |v: &[usize]| v.iter().map(|&x| x as c_int).collect::<Vec<_>>();
        let mut d = Descriptors {
            lib,
            x: null_mut(),
            w: null_mut(),
            y: null_mut(),
            conv: null_mut(),
        };
        // SAFETY: each call gets a descriptor it created (or writes one),
        // and arrays of `nd` (or `nd - 2`) ints that outlive it.
        unsafe {
            step((lib.create_tensor)(&mut d.x), "cudnnCreateTensorDescriptor")?;
            step((lib.create_tensor)(&mut d.y), "cudnnCreateTensorDescriptor")?;
            step((lib.create_filter)(&mut d.w), "cudnnCreateFilterDescriptor")?;
            step(
                (lib.create_conv)(&mut d.conv),
                "cudnnCreateConvolutionDescriptor",
            )?;
            let (xd, xs) = p.tensor_dims(p.in_channels, &p.input);
            step(
                (lib.set_tensor)(d.x, dtype, nd, xd.as_ptr(), xs.as_ptr()),
                "cudnnSetTensorNdDescriptor",
            )?;
            let (yd, ys) = p.tensor_dims(p.out_channels, &p.output);
            step(
                (lib.set_tensor)(d.y, dtype, nd, yd.as_ptr(), ys.as_ptr()),
                "cudnnSetTensorNdDescriptor",
            )?;
            let mut wd = match p.transposed {
                false => ints(&[p.out_channels, p.in_channels / p.groups]),
                true => ints(&[p.in_channels, p.out_channels / p.groups]),
            };
            wd.extend(ints(&p.kernel));
            let format = if p.channels_last {
                TENSOR_NHWC
            } else {
                TENSOR_NCHW
            };
            step(
                (lib.set_filter)(d.w, dtype, format, nd, wd.as_ptr()),
                "cudnnSetFilterNdDescriptor",
            )?;
            let (pad, stride, dil) = (ints(&p.padding), ints(&p.stride), ints(&p.dilation));
            step(
                (lib.set_conv)(
                    d.conv,
                    nd - 2,
                    pad.as_ptr(),
                    stride.as_ptr(),
                    dil.as_ptr(),
                    CROSS_CORRELATION,
                    DATA_FLOAT,
                ),
                "cudnnSetConvolutionNdDescriptor",
            )?;
            step(
                (lib.set_groups)(d.conv, p.groups as c_int),
                "cudnnSetConvolutionGroupCount",
            )?;
            let math = if p.dtype == DnnType::F32 {
                FMA_MATH
            } else {
                TENSOR_OP_MATH
            };
            step((lib.set_math)(d.conv, math), "cudnnSetConvolutionMathType")?;
            let mut out = vec![0 as c_int; nd as usize];
            step(
                // The forward convolution's output: ours, or our input
                // when transposed (the backward data's dy).
                (lib.output_dims)(
                    d.conv,
                    if p.transposed { d.y } else { d.x },
                    d.w,
                    nd,
                    out.as_mut_ptr(),
                ),
                "cudnnGetConvolutionNdForwardOutputDim",
            )?;
            let fwd_out = if p.transposed { &xd } else { &yd };
            if out != *fwd_out {
                return Err(Stop::Failed(Error::Cuda {
                    call: "cudnnGetConvolutionNdForwardOutputDim".into(),
                    device: self.device.clone(),
                    message: format!("cuDNN derives output dims {out:?}, ferrocm {fwd_out:?}"),
                }));
            }
            let mut count = 0;
            step(
                if p.transposed {
                    (lib.bwd_algo_count)(self.raw, &mut count)
                } else {
                    (lib.algo_count)(self.raw, &mut count)
                },
                if p.transposed {
                    "cudnnGetConvolutionBackwardDataAlgorithmMaxCount"
                } else {
                    "cudnnGetConvolutionForwardAlgorithmMaxCount"
                },
            )?;
            let mut perf = vec![
                FwdPerf {
                    algo: 0,
                    status: -1,
                    time: 0.0,
                    memory: 0,
                    determinism: 0,
                    math_type: 0,
                    reserved: [0; 3],
                };
                count.max(1) as usize
            ];
            let mut returned = 0;
            let status = if p.transposed {
                (lib.bwd_heuristics)(
                    self.raw,
                    d.w,
                    d.x,
                    d.conv,
                    d.y,
                    perf.len() as c_int,
                    &mut returned,
                    perf.as_mut_ptr(),
                )
            } else {
                (lib.heuristics)(
                    self.raw,
                    d.x,
                    d.w,
                    d.conv,
                    d.y,
                    perf.len() as c_int,
                    &mut returned,
                    perf.as_mut_ptr(),
                )
            };
            step(
                status,
                if p.transposed {
                    "cudnnGetConvolutionBackwardDataAlgorithm_v7"
                } else {
                    "cudnnGetConvolutionForwardAlgorithm_v7"
                },
            )?;
            let direct: &[c_int] = match p.transposed {
                false => &DIRECT_SUM_ALGOS,
                true => &DIRECT_SUM_BWD_DATA_ALGOS,
            };
            let returned = (returned.max(0) as usize).min(perf.len());
            let allowed = |r: &FwdPerf| {
                r.status == SUCCESS
                    && direct.contains(&r.algo)
                    && (p.dtype != DnnType::F32 || matches!(r.math_type, FMA_MATH | DEFAULT_MATH))
            };
            let Some(best) = perf[..returned].iter().find(|r| allowed(r)) else {
                return Err(Stop::Declined);
            };
            // The descriptor runs in the math the heuristics rated; f32
            // stays on FMA (DEFAULT would permit TF32 on Ampere and later).
            if p.dtype != DnnType::F32 {
                step(
                    (lib.set_math)(d.conv, best.math_type),
                    "cudnnSetConvolutionMathType",
                )?;
            }
            let mut workspace = 0usize;
            let status = if p.transposed {
                (lib.bwd_workspace_size)(self.raw, d.w, d.x, d.conv, d.y, best.algo, &mut workspace)
            } else {
                (lib.workspace_size)(self.raw, d.x, d.w, d.conv, d.y, best.algo, &mut workspace)
            };
            step(
                status,
                if p.transposed {
                    "cudnnGetConvolutionBackwardDataWorkspaceSize"
                } else {
                    "cudnnGetConvolutionForwardWorkspaceSize"
                },
            )?;
            let plan = ConvPlan {
                x: d.x,
                w: d.w,
                y: d.y,
                conv: d.conv,
                algo: best.algo,
                workspace,
            };
            // Handed over to the plan.
            std::mem::forget(d);
            Ok(plan)
        }
    }
}

/// One pooling problem's descriptors (input, output, pooling), destroyed
/// when dropped.
struct PoolPlan {
    lib: &'static Cudnn,
    x: Ptr,
    y: Ptr,
    pool: Ptr,
}

impl Drop for PoolPlan {
    fn drop(&mut self) {
        // SAFETY: each one null or created by its create call, destroyed once.
        unsafe {
            for t in [self.x, self.y] {
                if !t.is_null() {
                    (self.lib.destroy_tensor)(t);
                }
            }
            if !self.pool.is_null() {
                (self.lib.destroy_pool)(self.pool);
            }
        }
    }
}

impl CudnnHandle {
    /// Builds the pooling `p`'s descriptors: tensors at their layout's
    /// strides, the window, padding and stride, max pooling with NaN
    /// propagated (PyTorch's rule); cuDNN's output dims checked against
    /// ours.
    fn plan_pool(&self, p: &PoolProblem) -> std::result::Result<PoolPlan, Stop> {
        let lib = self.lib;
        let step = |status: Status, call: &str| -> std::result::Result<(), Stop> {
            match status {
                SUCCESS => Ok(()),
                s if declines(s) => Err(Stop::Declined),
                s => Err(Stop::Failed(status_error(lib, s, call, &self.device))),
            }
        };
        let p = p.at_least_2d();
        let nd = p.input.len() as c_int + 2;
        let ints = |v: &[usize]| v.iter().map(|&x| x as c_int).collect::<Vec<_>>();
        let mode = match p.mode {
            PoolMode::Max => POOLING_MAX,
            PoolMode::AvgIncludePad => POOLING_AVG_INCLUDE_PAD,
            PoolMode::AvgExcludePad => POOLING_AVG_EXCLUDE_PAD,
        };
        let mut plan = PoolPlan {
            lib,
            x: null_mut(),
            y: null_mut(),
            pool: null_mut(),
        };
        let (xd, xs) = p.tensor_dims(&p.input);
        let (yd, ys) = p.tensor_dims(&p.output);
        let (window, pad, stride) = (ints(&p.window), ints(&p.padding), ints(&p.stride));
        let mut out = vec![0 as c_int; nd as usize];
        // SAFETY: each call gets a descriptor it created (or writes one),
        // and arrays of `nd` (or `nd - 2`) ints that outlive it.
        unsafe {
            step(
                (lib.create_tensor)(&mut plan.x),
                "cudnnCreateTensorDescriptor",
            )?;
            step(
                (lib.create_tensor)(&mut plan.y),
                "cudnnCreateTensorDescriptor",
            )?;
            step(
                (lib.create_pool)(&mut plan.pool),
                "cudnnCreatePoolingDescriptor",
            )?;
            let dtype = data_type(p.dtype);
            step(
                (lib.set_tensor)(plan.x, dtype, nd, xd.as_ptr(), xs.as_ptr()),
                "cudnnSetTensorNdDescriptor",
            )?;
            step(
                (lib.set_tensor)(plan.y, dtype, nd, yd.as_ptr(), ys.as_ptr()),
                "cudnnSetTensorNdDescriptor",
            )?;
            step(
                (lib.set_pool)(
                    plan.pool,
                    mode,
                    PROPAGATE_NAN,
                    nd - 2,
                    window.as_ptr(),
                    pad.as_ptr(),
                    stride.as_ptr(),
                ),
                "cudnnSetPoolingNdDescriptor",
            )?;
            step(
                (lib.pool_output_dims)(plan.pool, plan.x, nd, out.as_mut_ptr()),
                "cudnnGetPoolingNdForwardOutputDim",
            )?;
        }
        if out != yd {
            return Err(Stop::Failed(Error::Cuda {
                call: "cudnnGetPoolingNdForwardOutputDim".into(),
                device: self.device.clone(),
                message: format!("cuDNN derives output dims {out:?}, ferrocm {yd:?}"),
            }));
        }
        Ok(plan)
    }
}

/// One batch-norm problem's descriptors: input, output and the
/// per-channel vectors' (derived from the input's), destroyed when dropped.
struct NormPlan {
    lib: &'static Cudnn,
    x: Ptr,
    y: Ptr,
    vectors: Ptr,
}

impl Drop for NormPlan {
    fn drop(&mut self) {
        // SAFETY: each one null or created by its create call, destroyed once.
        unsafe {
            for t in [self.x, self.y, self.vectors] {
                if !t.is_null() {
                    (self.lib.destroy_tensor)(t);
                }
            }
        }
    }
}

impl CudnnHandle {
    /// Builds the batch norm `p`'s descriptors: 4-d `(N, C, positions, 1)`
    /// tensors at their layout's strides, the vectors' derived for spatial
    /// mode (f32 for every input type).
    fn plan_norm(&self, p: &BatchNormProblem) -> std::result::Result<NormPlan, Stop> {
        let lib = self.lib;
        let step = |status: Status, call: &str| -> std::result::Result<(), Stop> {
            match status {
                SUCCESS => Ok(()),
                s if declines(s) => Err(Stop::Declined),
                s => Err(Stop::Failed(status_error(lib, s, call, &self.device))),
            }
        };
        let mut plan = NormPlan {
            lib,
            x: null_mut(),
            y: null_mut(),
            vectors: null_mut(),
        };
        let (dims, strides) = p.tensor_dims();
        // SAFETY: each call gets a descriptor it created (or writes one),
        // and arrays of 4 ints that outlive it.
        unsafe {
            for t in [&mut plan.x, &mut plan.y, &mut plan.vectors] {
                step((lib.create_tensor)(t), "cudnnCreateTensorDescriptor")?;
            }
            for t in [plan.x, plan.y] {
                step(
                    (lib.set_tensor)(t, data_type(p.dtype), 4, dims.as_ptr(), strides.as_ptr()),
                    "cudnnSetTensorNdDescriptor",
                )?;
            }
            step(
                (lib.derive_bn)(plan.vectors, plan.x, BATCHNORM_SPATIAL),
                "cudnnDeriveBNTensorDescriptor",
            )?;
        }
        Ok(plan)
    }
}

/// cuDNN's data type for ours.
fn data_type(t: DnnType) -> c_int {
    match t {
        DnnType::F32 => DATA_FLOAT,
        DnnType::F16 => DATA_HALF,
        DnnType::Bf16 => DATA_BFLOAT16,
    }
}

fn status_error(lib: &Cudnn, status: Status, call: &str, device: &str) -> Error {
    // SAFETY: returns a static string (or null).
    let text = unsafe {
        let p = (lib.error_string)(status);
        if p.is_null() {
            String::new()
        } else {
            std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    };
    Error::Cuda {
        call: call.into(),
        device: device.into(),
        message: format!("{text} (status {status})"),
    }
}

fn check(lib: &Cudnn, status: Status, call: &str, device: &str) -> Result<()> {
    if status == SUCCESS {
        Ok(())
    } else {
        Err(status_error(lib, status, call, device))
    }
}

impl Dnn for CudnnHandle {
    fn name(&self) -> &'static str {
        "cuDNN"
    }

    fn handle(&self) -> DnnGuard<'_> {
        DnnGuard::new(
            self.raw,
            self.lock.lock().unwrap_or_else(|e| e.into_inner()),
        )
    }

    fn conv_workspace(&self, p: &ConvProblem) -> Result<Option<usize>> {
        p.validate().map_err(|why| Error::BadDnnCall {
            device: self.device.clone(),
            why,
        })?;
        let _handle = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let mut plans = self.plans.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(plan) = plans.get(p) {
            return Ok(plan.as_ref().map(Plan::workspace));
        }
        self.current()?;
        // The backend API first; where it declines, the legacy API.
        if !legacy_only() {
            // With the bias fused where an engine takes it, else without.
            // Grouped convolutions keep the bias out: the one engine cuDNN
            // 9.14 offered the depthwise bench row with the add fused took
            // 0.063 ms on the H200, the convolution alone 0.042 with ours.
            let fuse = p.bias && p.groups == 1;
            let graph = GraphPlans::new(self.lib, self.raw, p, fuse).or_else(|e| match fuse {
                true => GraphPlans::new(self.lib, self.raw, p, false),
                false => Err(e),
            });
            match graph {
                Ok(g) => {
                    if verbose() {
                        eprintln!(
                            "ferrocm: cuDNN graph plans for {p:?} (bias fused: {}): workspaces {:?}",
                            g.fused_bias,
                            g.workspaces()
                        );
                    }
                    let workspace = g.workspace();
                    plans.insert(p.clone(), Some(Plan::Graph(g)));
                    return Ok(Some(workspace));
                }
                Err(e) if verbose() => eprintln!(
                    "ferrocm: cuDNN's graph API declines {p:?} at {} (status {}); the legacy API next",
                    e.call, e.status
                ),
                Err(_) => {}
            }
        }
        let plan = planned(self.plan(p), "cuDNN", p).map(Plan::Legacy);
        let workspace = plan.as_ref().map(Plan::workspace);
        plans.insert(p.clone(), plan);
        Ok(workspace)
    }

    unsafe fn conv(&self, p: &ConvProblem, at: ConvAddresses) -> Result<bool> {
        let _handle = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let mut plans = self.plans.lock().unwrap_or_else(|e| e.into_inner());
        let Some(Some(plan)) = plans.get_mut(p) else {
            return Err(Error::BadDnnCall {
                device: self.device.clone(),
                why: format!("no cuDNN plan for {p:?} (conv_workspace first)"),
            });
        };
        if at.workspace_bytes < plan.workspace() {
            return Err(Error::BadDnnCall {
                device: self.device.clone(),
                why: format!(
                    "a workspace of {} bytes where the algorithm needs {}",
                    at.workspace_bytes,
                    plan.workspace()
                ),
            });
        }
        self.current()?;
        let plan = match plan {
            Plan::Legacy(plan) => plan,
            Plan::Graph(g) => {
                // SAFETY: the caller's proof; the workspace checked above.
                let ran = unsafe { self.run_graph(g, &at) };
                if ran.is_err() {
                    // Not again: later calls of the shape run our kernels.
                    plans.insert(p.clone(), None);
                }
                return ran;
            }
        };
        let (alpha, beta) = (1.0f32, 0.0f32);
        let addr = |a: u64| a as usize as Ptr;
        let alpha: *const c_void = (&alpha as *const f32).cast();
        let beta: *const c_void = (&beta as *const f32).cast();
        // SAFETY: the plan's descriptors describe `p`, whose tensors the
        // caller proved inside live buffers at `at`; alpha and beta are
        // host f32 (the scaling type of an f32 compute type). Transposed,
        // our input is the backward data's dy and our output its dx.
        let (status, call) = unsafe {
            if p.transposed {
                let status = (self.lib.backward_data)(
                    self.raw,
                    alpha,
                    plan.w,
                    addr(at.w),
                    plan.x,
                    addr(at.x),
                    plan.conv,
                    plan.algo,
                    addr(at.workspace),
                    at.workspace_bytes,
                    beta,
                    plan.y,
                    addr(at.y),
                );
                (status, "cudnnConvolutionBackwardData")
            } else {
                let status = (self.lib.forward)(
                    self.raw,
                    alpha,
                    plan.x,
                    addr(at.x),
                    plan.w,
                    addr(at.w),
                    plan.conv,
                    plan.algo,
                    addr(at.workspace),
                    at.workspace_bytes,
                    beta,
                    plan.y,
                    addr(at.y),
                );
                (status, "cudnnConvolutionForward")
            }
        };
        // The legacy API adds no bias: the caller does.
        check(self.lib, status, call, &self.device).map(|()| false)
    }

    unsafe fn pool(&self, p: &PoolProblem, x: u64, y: u64) -> Result<bool> {
        p.validate().map_err(|why| Error::BadDnnCall {
            device: self.device.clone(),
            why,
        })?;
        let _handle = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let mut pools = self.pools.lock().unwrap_or_else(|e| e.into_inner());
        self.current()?;
        let plan = plan_once(&mut pools, p, "cuDNN", || {
            let plan = self.plan_pool(p);
            if verbose() {
                eprintln!("ferrocm: cuDNN pooling {p:?}: planned {}", plan.is_ok());
            }
            plan
        });
        let Some(plan) = plan else {
            return Ok(false);
        };
        let (alpha, beta) = (1.0f32, 0.0f32);
        let addr = |a: u64| a as usize as Ptr;
        // SAFETY: the plan's descriptors describe `p`, whose tensors the
        // caller proved inside live buffers at `x` and `y`; alpha and beta
        // are host f32 (the scaling type for f32, f16 and bf16 data).
        let status = unsafe {
            (self.lib.pool_forward)(
                self.raw,
                plan.pool,
                (&alpha as *const f32).cast(),
                plan.x,
                addr(x),
                (&beta as *const f32).cast(),
                plan.y,
                addr(y),
            )
        };
        match status {
            SUCCESS => Ok(true),
            // Refused before anything was queued (a type or layout this
            // cuDNN's pooling does not take): ours from now on.
            s if declines(s) => {
                if verbose() {
                    eprintln!("ferrocm: cuDNN declines pooling {p:?} at the call (status {s})");
                }
                pools.insert(p.clone(), None);
                Ok(false)
            }
            s => Err(status_error(
                self.lib,
                s,
                "cudnnPoolingForward",
                &self.device,
            )),
        }
    }

    unsafe fn batch_norm(
        &self,
        p: &BatchNormProblem,
        at: BatchNormAddresses,
        epsilon: f64,
    ) -> Result<bool> {
        p.validate().map_err(|why| Error::BadDnnCall {
            device: self.device.clone(),
            why,
        })?;
        let _handle = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let mut norms = self.norms.lock().unwrap_or_else(|e| e.into_inner());
        self.current()?;
        let plan = plan_once(&mut norms, p, "cuDNN", || {
            let plan = self.plan_norm(p);
            if verbose() {
                eprintln!("ferrocm: cuDNN batch norm {p:?}: planned {}", plan.is_ok());
            }
            plan
        });
        let Some(plan) = plan else {
            return Ok(false);
        };
        let (alpha, beta) = (1.0f32, 0.0f32);
        let addr = |a: u64| a as usize as Ptr;
        // SAFETY: the plan's descriptors describe `p`, whose tensors and
        // vectors the caller proved inside live buffers at `at`; alpha and
        // beta are host f32.
        let status = unsafe {
            (self.lib.bn_inference)(
                self.raw,
                BATCHNORM_SPATIAL,
                (&alpha as *const f32).cast(),
                (&beta as *const f32).cast(),
                plan.x,
                addr(at.x),
                plan.y,
                addr(at.y),
                plan.vectors,
                addr(at.scale),
                addr(at.bias),
                addr(at.mean),
                addr(at.var),
                epsilon,
            )
        };
        match status {
            SUCCESS => Ok(true),
            // Refused before anything was queued (an epsilon below
            // CUDNN_BN_MIN_EPSILON, a type it does not take): ours, for this
            // call; a later call with another epsilon may run.
            s if declines(s) => {
                if verbose() {
                    eprintln!(
                        "ferrocm: cuDNN declines batch norm {p:?}, epsilon {epsilon} (status {s})"
                    );
                }
                Ok(false)
            }
            s => Err(status_error(
                self.lib,
                s,
                "cudnnBatchNormalizationForwardInference",
                &self.device,
            )),
        }
    }
}

impl Drop for CudnnHandle {
    fn drop(&mut self) {
        let lib = self.lib;
        for (_, plan) in self
            .plans
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
        {
            if let Some(Plan::Legacy(plan)) = plan {
                drop(Descriptors {
                    lib,
                    x: plan.x,
                    w: plan.w,
                    y: plan.y,
                    conv: plan.conv,
                });
            }
        }
        self.pools
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self.norms
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        // SAFETY: created by cudnnCreate, destroyed once; errors ignored.
        unsafe { (lib.destroy)(self.raw) };
    }
}
