//! MIOpen on a ROCm GPU (the backend's [`Dnn`]): one handle per device,
//! created on first use on the device's stream (`miopenCreateWithStream`),
//! destroyed with it (`miopenDestroy`), statuses read with
//! `miopenGetErrorString`.
//!
//! Convolution runs in MIOpen's immediate mode, the path MIOpen documents
//! for frameworks: tensor descriptors for input, filter and output
//! (`miopenSetTensorDescriptor` with NCHW strides), a convolution
//! descriptor (`miopenInitConvolutionNdDescriptor` in convolution mode,
//! `miopenSetConvolutionGroupCount`), the output dims MIOpen derives
//! (`miopenGetConvolutionNdForwardOutputDim`) checked against ours, the
//! solutions MIOpen ranks for the problem (`miopenConvolutionForwardGetSolutionCount`,
//! `miopenConvolutionForwardGetSolution`: from its find-db, which
//! `MIOPEN_FIND_MODE` and MIOpen's user db govern, else its heuristics),
//! the fastest one that sums the products directly (GEMM, direct or
//! implicit GEMM; FFT and Winograd round differently from the f32 sum the
//! op promises) compiled once (`miopenConvolutionForwardCompileSolution`)
//! and run with its workspace (`miopenConvolutionForwardImmediate`). A
//! transposed convolution is the same convolution's backward data (the
//! `miopenConvolutionBackwardData*` counterparts of those four calls), our
//! input its dy and our output its dx.
//! Descriptors and solution are kept per problem for the process.
//!
//! Statuses: every call's is checked. Any failure while planning (BadParm,
//! InvalidValue, NotImplemented and UnsupportedOp above all) declines the
//! problem (remembered, a failure said once on stderr; our kernels run), as
//! does a problem with no such solution or a channels-last one (MIOpen's
//! NHWC support varies by release and solver; ferrocm's kernels take it); a
//! failure of the run is `Error::Rocm` with MIOpen's message.

use super::{RocmDevice, ffi, hip_check};
use crate::dnn::{
    BatchNormAddresses, BatchNormProblem, ConvAddresses, ConvProblem, Dnn, DnnGuard, DnnType,
    PlanStop as Stop, PoolMode, PoolProblem, plan_once, planned,
};
use crate::error::{Error, Result};
use rocm_rs::miopen::ffi as mf;
use std::collections::HashMap;
use std::os::raw::{c_int, c_void};
use std::ptr::null_mut;
use std::sync::Mutex;

/// `miopenConvolutionAlgoGEMM`, `..Direct` and `..ImplicitGEMM` (MIOpen's
/// header; rocm-rs does not re-export the constants): the algorithms that
/// sum the products themselves.
const DIRECT_SUM_ALGOS: [mf::miopenConvAlgorithm_t; 3] = [0, 1, 5];

/// One problem's descriptors and solution.
struct ConvPlan {
    x: mf::miopenTensorDescriptor_t,
    w: mf::miopenTensorDescriptor_t,
    y: mf::miopenTensorDescriptor_t,
    conv: mf::miopenConvolutionDescriptor_t,
    solution: u64,
    workspace: usize,
}

/// The descriptors created so far, destroyed when dropped.
struct Descriptors {
    lib: &'static ffi::Miopen,
    x: mf::miopenTensorDescriptor_t,
    w: mf::miopenTensorDescriptor_t,
    y: mf::miopenTensorDescriptor_t,
    conv: mf::miopenConvolutionDescriptor_t,
}

impl Drop for Descriptors {
    fn drop(&mut self) {
        // SAFETY: each one null or created by its create call, destroyed once.
        unsafe {
            for t in [self.x, self.w, self.y] {
                if !t.is_null() {
                    (self.lib.miopenDestroyTensorDescriptor)(t);
                }
            }
            if !self.conv.is_null() {
                (self.lib.miopenDestroyConvolutionDescriptor)(self.conv);
            }
        }
    }
}

/// An MIOpen handle created on its device's stream, destroyed with the device.
///
/// MIOpen handles must not be used by two threads at once, so the raw handle
/// is reached through [`Dnn::handle`], which locks it.
pub struct MiopenHandle {
    raw: mf::miopenHandle_t,
    lock: Mutex<()>,
    /// Per problem: its plan, or `None` when MIOpen declined it.
    plans: Mutex<HashMap<ConvProblem, Option<ConvPlan>>>,
    /// Per pooling problem: its descriptors, or `None` when declined.
    pools: Mutex<HashMap<PoolProblem, Option<PoolPlan>>>,
    /// Per batch-norm problem: its descriptors, or `None` when declined.
    norms: Mutex<HashMap<BatchNormProblem, Option<NormPlan>>>,
    lib: &'static ffi::Miopen,
    hip: &'static ffi::Hip,
    /// The device's HIP id, made current before each call.
    ordinal: c_int,
    /// The device, for messages.
    device: String,
}

// SAFETY: MIOpen handles and descriptors may be used from any thread, one at
// a time: every use goes through `lock` (the handle) and `plans`.
unsafe impl Send for MiopenHandle {}
// SAFETY: as above.
unsafe impl Sync for MiopenHandle {}

/// One pooling problem's descriptors (input, output, pooling), destroyed
/// when dropped.
struct PoolPlan {
    lib: &'static ffi::Miopen,
    x: mf::miopenTensorDescriptor_t,
    y: mf::miopenTensorDescriptor_t,
    pool: mf::miopenPoolingDescriptor_t,
}

impl Drop for PoolPlan {
    fn drop(&mut self) {
        // SAFETY: each one null or created by its create call, destroyed once.
        unsafe {
            for t in [self.x, self.y] {
                if !t.is_null() {
                    (self.lib.miopenDestroyTensorDescriptor)(t);
                }
            }
            if !self.pool.is_null() {
                (self.lib.miopenDestroyPoolingDescriptor)(self.pool);
            }
        }
    }
}

/// One batch-norm problem's descriptors: input, output and the
/// per-channel vectors' (derived from the input's), destroyed when dropped.
struct NormPlan {
    lib: &'static ffi::Miopen,
    x: mf::miopenTensorDescriptor_t,
    y: mf::miopenTensorDescriptor_t,
    vectors: mf::miopenTensorDescriptor_t,
}

impl Drop for NormPlan {
    fn drop(&mut self) {
        // SAFETY: each one null or created by its create call, destroyed once.
        unsafe {
            for t in [self.x, self.y, self.vectors] {
                if !t.is_null() {
                    (self.lib.miopenDestroyTensorDescriptor)(t);
                }
            }
        }
    }
}

/// MIOpen's data type for ours.
fn data_type(t: DnnType) -> mf::miopenDataType_t {
    match t {
        DnnType::F32 => mf::miopenDataType_t_miopenFloat,
        DnnType::F16 => mf::miopenDataType_t_miopenHalf,
        DnnType::Bf16 => mf::miopenDataType_t_miopenBFloat16,
    }
}

fn status_error(lib: &ffi::Miopen, status: mf::miopenStatus_t, call: &str, device: &str) -> Error {
    // SAFETY: returns a static string (or null).
    let text = unsafe { ffi::c_text((lib.miopenGetErrorString)(status)) }.unwrap_or_default();
    Error::Rocm {
        call: call.into(),
        device: device.into(),
        message: format!("{text} ({status})"),
    }
}

/// Whether a planning status means "not this problem" rather than a failure.
fn declines(status: mf::miopenStatus_t) -> bool {
    [
        mf::miopenStatus_t_miopenStatusBadParm,
        mf::miopenStatus_t_miopenStatusInvalidValue,
        mf::miopenStatus_t_miopenStatusNotImplemented,
        mf::miopenStatus_t_miopenStatusUnsupportedOp,
    ]
    .contains(&status)
}

impl MiopenHandle {
    pub(super) fn new(dev: &RocmDevice) -> Result<Self> {
        let lib = ffi::miopen().map_err(|why| Error::Rocm {
            call: "loading MIOpen".into(),
            device: dev.label.clone(),
            message: why.into(),
        })?;
        dev.set_device()?;
        let mut raw = null_mut();
        // SAFETY: writes one handle, on our stream.
        let status = unsafe { (lib.miopenCreateWithStream)(&mut raw, dev.stream.raw.cast()) };
        if status != mf::miopenStatus_t_miopenStatusSuccess {
            return Err(status_error(
                lib,
                status,
                "miopenCreateWithStream",
                &dev.label,
            ));
        }
        Ok(MiopenHandle {
            raw,
            lock: Mutex::new(()),
            plans: Mutex::new(HashMap::new()),
            pools: Mutex::new(HashMap::new()),
            norms: Mutex::new(HashMap::new()),
            lib,
            hip: dev.hip,
            ordinal: dev.ordinal as c_int,
            device: dev.label.clone(),
        })
    }

    fn set_device(&self) -> Result<()> {
        // SAFETY: plain call.
        let code = unsafe { (self.hip.hipSetDevice)(self.ordinal) };
        hip_check(self.hip, code, "hipSetDevice", &self.device)
    }

    /// Builds the pooling `p`'s descriptors (NCHW tensors, the window,
    /// padding and stride) and checks MIOpen's output dims against ours.
    /// Declined: max pooling (MIOpen documents no NaN rule, and PyTorch's,
    /// which ours keeps, lets a NaN win) and channels-last memory (as for
    /// convolutions).
    fn plan_pool(&self, p: &PoolProblem) -> std::result::Result<PoolPlan, Stop> {
        let lib = self.lib;
        let step = |status: mf::miopenStatus_t, call: &str| -> std::result::Result<(), Stop> {
            if status == mf::miopenStatus_t_miopenStatusSuccess {
                Ok(())
            } else if declines(status) {
                Err(Stop::Declined)
            } else {
                Err(Stop::Failed(status_error(lib, status, call, &self.device)))
            }
        };
        let mode = match p.mode {
            PoolMode::Max => return Err(Stop::Declined),
            PoolMode::AvgIncludePad => mf::miopenPoolingMode_t_miopenPoolingAverageInclusive,
            PoolMode::AvgExcludePad => mf::miopenPoolingMode_t_miopenPoolingAverage,
        };
        if p.channels_last {
            return Err(Stop::Declined);
        }
        let p = p.at_least_2d();
        let nd = p.input.len() as c_int + 2;
        let ints = |v: &[usize]| v.iter().map(|&x| x as c_int).collect::<Vec<_>>();
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
                (lib.miopenCreateTensorDescriptor)(&mut plan.x),
                "miopenCreateTensorDescriptor",
            )?;
            step(
                (lib.miopenCreateTensorDescriptor)(&mut plan.y),
                "miopenCreateTensorDescriptor",
            )?;
            step(
                (lib.miopenCreatePoolingDescriptor)(&mut plan.pool),
                "miopenCreatePoolingDescriptor",
            )?;
            let dtype = data_type(p.dtype);
            for (t, dims, strides) in [(plan.x, &xd, &xs), (plan.y, &yd, &ys)] {
                step(
                    (lib.miopenSetTensorDescriptor)(t, dtype, nd, dims.as_ptr(), strides.as_ptr()),
                    "miopenSetTensorDescriptor",
                )?;
            }
            step(
                (lib.miopenSetNdPoolingDescriptor)(
                    plan.pool,
                    mode,
                    nd - 2,
                    window.as_ptr(),
                    pad.as_ptr(),
                    stride.as_ptr(),
                ),
                "miopenSetNdPoolingDescriptor",
            )?;
            step(
                (lib.miopenGetPoolingNdForwardOutputDim)(plan.pool, plan.x, nd, out.as_mut_ptr()),
                "miopenGetPoolingNdForwardOutputDim",
            )?;
        }
        if out != yd {
            return Err(Stop::Failed(Error::Rocm {
                call: "miopenGetPoolingNdForwardOutputDim".into(),
                device: self.device.clone(),
                message: format!("MIOpen derives output dims {out:?}, ferrocm {yd:?}"),
            }));
        }
        Ok(plan)
    }

    /// Builds the batch norm `p`'s descriptors: 4-d `(N, C, positions, 1)`
    /// NCHW tensors, the vectors' derived for spatial mode (f32 for every
    /// input type). Channels-last memory is declined (as for convolutions).
    fn plan_norm(&self, p: &BatchNormProblem) -> std::result::Result<NormPlan, Stop> {
        let lib = self.lib;
        let step = |status: mf::miopenStatus_t, call: &str| -> std::result::Result<(), Stop> {
            if status == mf::miopenStatus_t_miopenStatusSuccess {
                Ok(())
            } else if declines(status) {
                Err(Stop::Declined)
            } else {
                Err(Stop::Failed(status_error(lib, status, call, &self.device)))
            }
        };
        if p.channels_last {
            return Err(Stop::Declined);
        }
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
                step(
                    (lib.miopenCreateTensorDescriptor)(t),
                    "miopenCreateTensorDescriptor",
                )?;
            }
            for t in [plan.x, plan.y] {
                step(
                    (lib.miopenSetTensorDescriptor)(
                        t,
                        data_type(p.dtype),
                        4,
                        dims.as_ptr(),
                        strides.as_ptr(),
                    ),
                    "miopenSetTensorDescriptor",
                )?;
            }
            step(
                (lib.miopenDeriveBNTensorDescriptor)(
                    plan.vectors,
                    plan.x,
                    mf::miopenBatchNormMode_t_miopenBNSpatial,
                ),
                "miopenDeriveBNTensorDescriptor",
            )?;
        }
        Ok(plan)
    }

    /// Builds `p`'s descriptors and picks its solution.
    fn plan(&self, p: &ConvProblem) -> std::result::Result<ConvPlan, Stop> {
        let lib = self.lib;
        let step = |status: mf::miopenStatus_t, call: &str| -> std::result::Result<(), Stop> {
            if status == mf::miopenStatus_t_miopenStatusSuccess {
                Ok(())
            } else if declines(status) {
                Err(Stop::Declined)
            } else {
                Err(Stop::Failed(status_error(lib, status, call, &self.device)))
            }
        };
        if p.channels_last {
            return Err(Stop::Declined);
        }
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
        let (xd, xs) = p.tensor_dims(p.in_channels, &p.input);
        let (yd, ys) = p.tensor_dims(p.out_channels, &p.output);
        // The filter as an NCHW tensor (C_out, C_in / groups, kernel..), or
        // (C_in, C_out / groups, kernel..) transposed.
        let mut wd = match p.transposed {
            false => ints(&[p.out_channels, p.in_channels / p.groups]),
            true => ints(&[p.in_channels, p.out_channels / p.groups]),
        };
        wd.extend(ints(&p.kernel));
        let mut ws = vec![1 as c_int; wd.len()];
        for i in (0..wd.len() - 1).rev() {
            ws[i] = ws[i + 1] * wd[i + 1];
        }
        let (pad, stride, dil) = (ints(&p.padding), ints(&p.stride), ints(&p.dilation));
        // SAFETY: each call gets descriptors it created (or writes one), and
        // arrays of the lengths it is told that outlive it.
        unsafe {
            step(
                (lib.miopenCreateTensorDescriptor)(&mut d.x),
                "miopenCreateTensorDescriptor",
            )?;
            step(
                (lib.miopenCreateTensorDescriptor)(&mut d.w),
                "miopenCreateTensorDescriptor",
            )?;
            step(
                (lib.miopenCreateTensorDescriptor)(&mut d.y),
                "miopenCreateTensorDescriptor",
            )?;
            step(
                (lib.miopenCreateConvolutionDescriptor)(&mut d.conv),
                "miopenCreateConvolutionDescriptor",
            )?;
            for (desc, dims, strides) in [(d.x, &xd, &xs), (d.w, &wd, &ws), (d.y, &yd, &ys)] {
                step(
                    (lib.miopenSetTensorDescriptor)(
                        desc,
                        dtype,
                        nd,
                        dims.as_ptr(),
                        strides.as_ptr(),
                    ),
                    "miopenSetTensorDescriptor",
                )?;
            }
            step(
                (lib.miopenInitConvolutionNdDescriptor)(
                    d.conv,
                    nd - 2,
                    pad.as_ptr(),
                    stride.as_ptr(),
                    dil.as_ptr(),
                    mf::miopenConvolutionMode_t_miopenConvolution,
                ),
                "miopenInitConvolutionNdDescriptor",
            )?;
            step(
                (lib.miopenSetConvolutionGroupCount)(d.conv, p.groups as c_int),
                "miopenSetConvolutionGroupCount",
            )?;
            let mut out_nd = nd;
            let mut out = vec![0 as c_int; nd as usize];
            step(
                // The forward convolution's output: ours, or our input when
                // transposed (the backward data's dy).
                (lib.miopenGetConvolutionNdForwardOutputDim)(
                    d.conv,
                    if p.transposed { d.y } else { d.x },
                    d.w,
                    &mut out_nd,
                    out.as_mut_ptr(),
                ),
                "miopenGetConvolutionNdForwardOutputDim",
            )?;
            let fwd_out = if p.transposed { &xd } else { &yd };
            if out_nd != nd || out != *fwd_out {
                return Err(Stop::Failed(Error::Rocm {
                    call: "miopenGetConvolutionNdForwardOutputDim".into(),
                    device: self.device.clone(),
                    message: format!("MIOpen derives output dims {out:?}, ferrocm {fwd_out:?}"),
                }));
            }
            let mut count = 0usize;
            // Transposed: the backward data, our input its dy, our output its dx.
            let (status, call) = match p.transposed {
                false => (
                    (lib.miopenConvolutionForwardGetSolutionCount)(
                        self.raw, d.w, d.x, d.conv, d.y, &mut count,
                    ),
                    "miopenConvolutionForwardGetSolutionCount",
                ),
                true => (
                    (lib.miopenConvolutionBackwardDataGetSolutionCount)(
                        self.raw, d.x, d.w, d.conv, d.y, &mut count,
                    ),
                    "miopenConvolutionBackwardDataGetSolutionCount",
                ),
            };
            step(status, call)?;
            if count == 0 {
                return Err(Stop::Declined);
            }
            let mut solutions = vec![
                mf::miopenConvSolution_t {
                    time: 0.0,
                    workspace_size: 0,
                    solution_id: 0,
                    algorithm: 0,
                };
                count
            ];
            let mut returned = 0usize;
            let (status, call) = match p.transposed {
                false => (
                    (lib.miopenConvolutionForwardGetSolution)(
                        self.raw,
                        d.w,
                        d.x,
                        d.conv,
                        d.y,
                        count,
                        &mut returned,
                        solutions.as_mut_ptr(),
                    ),
                    "miopenConvolutionForwardGetSolution",
                ),
                true => (
                    (lib.miopenConvolutionBackwardDataGetSolution)(
                        self.raw,
                        d.x,
                        d.w,
                        d.conv,
                        d.y,
                        count,
                        &mut returned,
                        solutions.as_mut_ptr(),
                    ),
                    "miopenConvolutionBackwardDataGetSolution",
                ),
            };
            step(status, call)?;
            // Ranked fastest first (by MIOpen's find-db time, or its estimate).
            let Some(best) = solutions[..returned.min(count)]
                .iter()
                .find(|s| DIRECT_SUM_ALGOS.contains(&s.algorithm))
                .copied()
            else {
                return Err(Stop::Declined);
            };
            let (status, call) = match p.transposed {
                false => (
                    (lib.miopenConvolutionForwardCompileSolution)(
                        self.raw,
                        d.w,
                        d.x,
                        d.conv,
                        d.y,
                        best.solution_id,
                    ),
                    "miopenConvolutionForwardCompileSolution",
                ),
                true => (
                    (lib.miopenConvolutionBackwardDataCompileSolution)(
                        self.raw,
                        d.x,
                        d.w,
                        d.conv,
                        d.y,
                        best.solution_id,
                    ),
                    "miopenConvolutionBackwardDataCompileSolution",
                ),
            };
            step(status, call)?;
            let plan = ConvPlan {
                x: d.x,
                w: d.w,
                y: d.y,
                conv: d.conv,
                solution: best.solution_id,
                workspace: best.workspace_size,
            };
            // Handed over to the plan.
            std::mem::forget(d);
            Ok(plan)
        }
    }
}

impl Dnn for MiopenHandle {
    fn name(&self) -> &'static str {
        "MIOpen"
    }

    fn handle(&self) -> DnnGuard<'_> {
        DnnGuard::new(
            self.raw.cast(),
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
        let p = &unbiased(p);
        if let Some(plan) = plans.get(p) {
            return Ok(plan.as_ref().map(|plan| plan.workspace));
        }
        self.set_device()?;
        // A failure other than "not this problem" declines too (`planned`).
        let plan = planned(self.plan(p), "MIOpen", p);
        let workspace = plan.as_ref().map(|plan| plan.workspace);
        plans.insert(p.clone(), plan);
        Ok(workspace)
    }

    unsafe fn conv(&self, p: &ConvProblem, at: ConvAddresses) -> Result<bool> {
        let _handle = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let plans = self.plans.lock().unwrap_or_else(|e| e.into_inner());
        let Some(Some(plan)) = plans.get(&unbiased(p)) else {
            return Err(Error::BadDnnCall {
                device: self.device.clone(),
                why: format!("no MIOpen plan for {p:?} (conv_workspace first)"),
            });
        };
        if at.workspace_bytes < plan.workspace {
            return Err(Error::BadDnnCall {
                device: self.device.clone(),
                why: format!(
                    "a workspace of {} bytes where the solution needs {}",
                    at.workspace_bytes, plan.workspace
                ),
            });
        }
        self.set_device()?;
        let addr = |a: u64| a as usize as *mut c_void;
        // SAFETY: the plan's descriptors describe `p`, whose tensors the
        // caller proved inside live buffers at `at`. Transposed, our input
        // is the backward data's dy and our output its dx.
        let (status, call) = unsafe {
            if p.transposed {
                let status = (self.lib.miopenConvolutionBackwardDataImmediate)(
                    self.raw,
                    plan.x,
                    addr(at.x),
                    plan.w,
                    addr(at.w),
                    plan.conv,
                    plan.y,
                    addr(at.y),
                    addr(at.workspace),
                    at.workspace_bytes,
                    plan.solution,
                );
                (status, "miopenConvolutionBackwardDataImmediate")
            } else {
                let status = (self.lib.miopenConvolutionForwardImmediate)(
                    self.raw,
                    plan.w,
                    addr(at.w),
                    plan.x,
                    addr(at.x),
                    plan.conv,
                    plan.y,
                    addr(at.y),
                    addr(at.workspace),
                    at.workspace_bytes,
                    plan.solution,
                );
                (status, "miopenConvolutionForwardImmediate")
            }
        };
        if status != mf::miopenStatus_t_miopenStatusSuccess {
            return Err(status_error(self.lib, status, call, &self.device));
        }
        // Immediate mode has no fused bias: the caller adds it.
        Ok(false)
    }

    unsafe fn pool(&self, p: &PoolProblem, x: u64, y: u64) -> Result<bool> {
        p.validate().map_err(|why| Error::BadDnnCall {
            device: self.device.clone(),
            why,
        })?;
        let _handle = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let mut pools = self.pools.lock().unwrap_or_else(|e| e.into_inner());
        self.set_device()?;
        let Some(plan) = plan_once(&mut pools, p, "MIOpen", || self.plan_pool(p)) else {
            return Ok(false);
        };
        let (alpha, beta) = (1.0f32, 0.0f32);
        let addr = |a: u64| a as usize as *mut c_void;
        // SAFETY: the plan's descriptors describe `p`, whose tensors the
        // caller proved inside live buffers at `x` and `y`; alpha and beta
        // are host f32 (MIOpen's scaling type for f32, f16 and bf16). No
        // indices are kept (`do_backward` false), so no workspace.
        let status = unsafe {
            (self.lib.miopenPoolingForward)(
                self.raw,
                plan.pool,
                (&alpha as *const f32).cast(),
                plan.x,
                addr(x),
                (&beta as *const f32).cast(),
                plan.y,
                addr(y),
                false,
                null_mut(),
                0,
            )
        };
        if status == mf::miopenStatus_t_miopenStatusSuccess {
            Ok(true)
        } else if declines(status) {
            // Refused before anything was queued (a type this MIOpen's
            // pooling does not take): ours from now on.
            pools.insert(p.clone(), None);
            Ok(false)
        } else {
            Err(status_error(
                self.lib,
                status,
                "miopenPoolingForward",
                &self.device,
            ))
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
        self.set_device()?;
        let Some(plan) = plan_once(&mut norms, p, "MIOpen", || self.plan_norm(p)) else {
            return Ok(false);
        };
        let (mut alpha, mut beta) = (1.0f32, 0.0f32);
        let addr = |a: u64| a as usize as *mut c_void;
        // SAFETY: the plan's descriptors describe `p`, whose tensors and
        // vectors the caller proved inside live buffers at `at`; alpha and
        // beta are host f32 (MIOpen reads them only).
        let status = unsafe {
            (self.lib.miopenBatchNormalizationForwardInference)(
                self.raw,
                mf::miopenBatchNormMode_t_miopenBNSpatial,
                (&mut alpha as *mut f32).cast(),
                (&mut beta as *mut f32).cast(),
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
        if status == mf::miopenStatus_t_miopenStatusSuccess {
            Ok(true)
        } else if declines(status) {
            // Refused before anything was queued: ours for this call.
            Ok(false)
        } else {
            Err(status_error(
                self.lib,
                status,
                "miopenBatchNormalizationForwardInference",
                &self.device,
            ))
        }
    }
}

/// The plan cache's key: MIOpen's plan is the same with or without a bias
/// (which the caller adds).
fn unbiased(p: &ConvProblem) -> ConvProblem {
    ConvProblem {
        bias: false,
        ..p.clone()
    }
}

impl Drop for MiopenHandle {
    fn drop(&mut self) {
        let lib = self.lib;
        for (_, plan) in self
            .plans
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
        {
            if let Some(plan) = plan {
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
        // SAFETY: created by miopenCreateWithStream, destroyed once. Errors ignored.
        unsafe { (self.lib.miopenDestroy)(self.raw) };
    }
}
