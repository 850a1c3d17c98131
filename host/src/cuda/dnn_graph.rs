//! One convolution through cuDNN's backend (graph) API, the engines
//! PyTorch's cuDNN path runs (runtime-compiled kernels included) where the
//! legacy API's heuristics offer fewer: on the H200 the legacy API ran the
//! bf16 Stable-Diffusion-shaped convolution at 2.5-3.5x PyTorch's time.
//!
//! A plan is built once per problem: tensor descriptors for our input,
//! filter and output (`CUDNN_BACKEND_TENSOR_DESCRIPTOR`: type, NC.. dims with
//! the stored layout's strides, a unique id, 16-byte alignment), a
//! convolution descriptor (cross-correlation, f32 compute type, dilations,
//! strides, paddings before and after), one operation (convolution forward;
//! for a transposed convolution the backward data of the forward
//! convolution from our output to our input), an operation graph on our
//! handle, and cuDNN's heuristics (`CUDNN_HEUR_MODE_A`). With a bias the
//! convolution's output is a virtual f32 tensor that a pointwise add
//! (`CUDNN_POINTWISE_ADD`, f32 math) of the bias `(1, C, 1, 1)` turns into
//! the output: one rounding, no second pass over the output; where no
//! engine takes that graph, the convolution alone is planned and the caller
//! adds the bias. Of the engine
//! configurations the heuristics return, up to [`CANDIDATES`] (or
//! `FERROCM_CUDNN_CANDIDATES`) become
//! execution plans: those whose engine computes the direct sum in f32 (no
//! Winograd or FFT, no reduced-precision reduction; for f32 no down-converted
//! inputs and no tensor cores, i.e. no TF32) and that finalize. The first
//! `Dnn::conv` on real buffers (outside a stream capture)
//! times each candidate on the stream (as `torch.backends.cudnn.benchmark`
//! does) and keeps the fastest. Any planning failure declines the graph
//! path and the legacy API is tried next.
//!
//! Library functions: `cudnnBackendCreateDescriptor`,
//! `cudnnBackendSetAttribute`, `cudnnBackendGetAttribute`,
//! `cudnnBackendFinalize`, `cudnnBackendExecute`,
//! `cudnnBackendDestroyDescriptor`. Enum values come from cudarc's binding of
//! cuDNN's headers.

use super::{Cudnn, Ptr, SUCCESS, Status};
use crate::dnn::{ConvAddresses, ConvProblem, DnnType};
use cudarc::cudnn::sys::{
    cudnnBackendAttributeName_t as A, cudnnBackendAttributeType_t as T,
    cudnnBackendDescriptorType_t as D, cudnnBackendHeurMode_t as Heur,
    cudnnBackendNumericalNote_t as Note,
};
use std::ffi::{c_int, c_void};
use std::ptr::null_mut;

/// Most execution plans built (and timed) per problem by default.
pub(super) const CANDIDATES: usize = 4;

/// Most execution plans built (and timed) per problem: `FERROCM_CUDNN_CANDIDATES`
/// (1 to 64) if set, else [`CANDIDATES`]. More find faster engines for some
/// shapes at the cost of a longer first call (each plan compiles).
fn most_candidates() -> usize {
    static N: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *N.get_or_init(|| {
        std::env::var("FERROCM_CUDNN_CANDIDATES")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|n| (1..=64).contains(n))
            .unwrap_or(CANDIDATES)
    })
}

/// Largest workspace a candidate may ask for (larger ones are skipped).
const MAX_WORKSPACE: usize = 1 << 30;

/// Unique ids of the tensors in the variant pack (and of the virtual
/// f32 sums between the convolution and the bias add).
const UID_IN: i64 = 1;
const UID_W: i64 = 2;
const UID_OUT: i64 = 3;
const UID_BIAS: i64 = 4;
const UID_SUMS: i64 = 5;

const DATA_FLOAT: c_int = 0;
const CROSS_CORRELATION: c_int = 1;
const POINTWISE_ADD: c_int = 0;

/// A backend descriptor, destroyed when dropped.
pub(super) struct Desc {
    lib: &'static Cudnn,
    raw: Ptr,
}

impl Drop for Desc {
    fn drop(&mut self) {
        if !self.raw.is_null() {
            // SAFETY: created by cudnnBackendCreateDescriptor, destroyed once.
            unsafe { (self.lib.backend_destroy)(self.raw) };
        }
    }
}

/// Planning stopped at `call` with `status`.
pub(super) struct Declined {
    pub(super) call: &'static str,
    pub(super) status: Status,
}

type Step<T> = std::result::Result<T, Declined>;

fn ok(status: Status, call: &'static str) -> Step<()> {
    if status == SUCCESS {
        Ok(())
    } else {
        Err(Declined { call, status })
    }
}

impl Desc {
    fn new(lib: &'static Cudnn, ty: D) -> Step<Desc> {
        let mut raw = null_mut();
        // SAFETY: writes one descriptor of type `ty`.
        ok(
            unsafe { (lib.backend_create)(ty as c_int, &mut raw) },
            "cudnnBackendCreateDescriptor",
        )?;
        Ok(Desc { lib, raw })
    }

    /// Sets attribute `a` to the `n` elements of type `t` at `v`.
    ///
    /// # Safety
    /// `v` points to `n` values of the C type `t` names.
    unsafe fn set_raw(&self, a: A, t: T, n: usize, v: *const c_void) -> Step<()> {
        // SAFETY: the caller's.
        let status =
            unsafe { (self.lib.backend_set)(self.raw, a as c_int, t as c_int, n as i64, v) };
        ok(status, "cudnnBackendSetAttribute")
    }

    fn set_i64s(&self, a: A, v: &[i64]) -> Step<()> {
        // SAFETY: `v.len()` int64 values.
        unsafe { self.set_raw(a, T::CUDNN_TYPE_INT64, v.len(), v.as_ptr().cast()) }
    }

    /// An enum-valued attribute (data type, mode, ...), passed as a C int.
    fn set_enum(&self, a: A, t: T, v: c_int) -> Step<()> {
        // SAFETY: one C enum value.
        unsafe { self.set_raw(a, t, 1, (&v as *const c_int).cast()) }
    }

    fn set_f32(&self, a: A, v: f32) -> Step<()> {
        // SAFETY: one float.
        unsafe { self.set_raw(a, T::CUDNN_TYPE_FLOAT, 1, (&v as *const f32).cast()) }
    }

    fn set_descs(&self, a: A, v: &[&Desc]) -> Step<()> {
        let raws: Vec<Ptr> = v.iter().map(|d| d.raw).collect();
        // SAFETY: `raws.len()` descriptors (cudnnBackendDescriptor_t values).
        unsafe {
            self.set_raw(
                a,
                T::CUDNN_TYPE_BACKEND_DESCRIPTOR,
                raws.len(),
                raws.as_ptr().cast(),
            )
        }
    }

    fn set_handle(&self, a: A, handle: Ptr) -> Step<()> {
        // SAFETY: one cudnnHandle_t.
        unsafe { self.set_raw(a, T::CUDNN_TYPE_HANDLE, 1, (&handle as *const Ptr).cast()) }
    }

    fn finalize(self) -> Step<Desc> {
        // SAFETY: our descriptor, its attributes set.
        ok(
            unsafe { (self.lib.backend_finalize)(self.raw) },
            "cudnnBackendFinalize",
        )?;
        Ok(self)
    }

    /// Reads up to `into.len()` descriptors of attribute `a` into the
    /// (created) descriptors `into`; how many were written.
    fn get_descs(&self, a: A, into: &mut [Desc]) -> Step<usize> {
        let mut raws: Vec<Ptr> = into.iter().map(|d| d.raw).collect();
        let mut n = 0i64;
        // SAFETY: `raws` holds `raws.len()` created descriptors of the type
        // the attribute holds; cuDNN fills them in place.
        let status = unsafe {
            (self.lib.backend_get)(
                self.raw,
                a as c_int,
                T::CUDNN_TYPE_BACKEND_DESCRIPTOR as c_int,
                raws.len() as i64,
                &mut n,
                raws.as_mut_ptr().cast(),
            )
        };
        ok(status, "cudnnBackendGetAttribute")?;
        Ok((n.max(0) as usize).min(raws.len()))
    }

    /// The number of elements attribute `a` holds.
    fn count(&self, a: A, t: T) -> Step<usize> {
        let mut n = 0i64;
        // SAFETY: a count query (no elements requested or written).
        let status = unsafe {
            (self.lib.backend_get)(self.raw, a as c_int, t as c_int, 0, &mut n, null_mut())
        };
        ok(status, "cudnnBackendGetAttribute")?;
        Ok(n.max(0) as usize)
    }

    /// Reads up to `into.len()` C ints (enum values) of attribute `a`.
    fn get_ints(&self, a: A, t: T, into: &mut [c_int]) -> Step<usize> {
        let mut n = 0i64;
        // SAFETY: room for `into.len()` C ints.
        let status = unsafe {
            (self.lib.backend_get)(
                self.raw,
                a as c_int,
                t as c_int,
                into.len() as i64,
                &mut n,
                into.as_mut_ptr().cast(),
            )
        };
        ok(status, "cudnnBackendGetAttribute")?;
        Ok((n.max(0) as usize).min(into.len()))
    }

    fn get_i64(&self, a: A) -> Step<i64> {
        let (mut v, mut n) = (0i64, 0i64);
        // SAFETY: room for one int64.
        let status = unsafe {
            (self.lib.backend_get)(
                self.raw,
                a as c_int,
                T::CUDNN_TYPE_INT64 as c_int,
                1,
                &mut n,
                (&mut v as *mut i64).cast(),
            )
        };
        ok(status, "cudnnBackendGetAttribute")?;
        Ok(v)
    }
}

/// One execution plan and the workspace it needs.
pub(super) struct Candidate {
    plan: Desc,
    workspace: usize,
}

/// A problem's execution plans (the fastest first once timed) and the
/// descriptors they were built from.
pub(super) struct GraphPlans {
    pub(super) candidates: Vec<Candidate>,
    /// Whether `candidates[0]` is the fastest (timed on the device).
    pub(super) tuned: bool,
    /// Whether the plans add the bias.
    pub(super) fused_bias: bool,
    /// The graph's descriptors, kept as long as its plans.
    _built: Vec<Desc>,
}

impl GraphPlans {
    /// The workspace the largest candidate needs.
    pub(super) fn workspace(&self) -> usize {
        self.candidates
            .iter()
            .map(|c| c.workspace)
            .max()
            .unwrap_or(0)
    }

    /// Each candidate's workspace, in the order tried.
    pub(super) fn workspaces(&self) -> Vec<usize> {
        self.candidates.iter().map(|c| c.workspace).collect()
    }

    /// Builds `p`'s graph (with the bias add when `fuse_bias`) and its
    /// candidate plans on `handle`.
    pub(super) fn new(
        lib: &'static Cudnn,
        handle: Ptr,
        p: &ConvProblem,
        fuse_bias: bool,
    ) -> Step<GraphPlans> {
        let p = p.at_least_2d();
        let nd = p.input.len() + 2;
        let dtype = match p.dtype {
            DnnType::F32 => super::DATA_FLOAT,
            DnnType::F16 => super::DATA_HALF,
            DnnType::Bf16 => super::DATA_BFLOAT16,
        };
        let i64s = |v: &[i32]| v.iter().map(|&x| x as i64).collect::<Vec<_>>();
        // A tensor of `p`'s type, or (virtual) the f32 sums.
        let tensor_of = |uid: i64, dims: &[i64], strides: &[i64], sums: bool| -> Step<Desc> {
            let t = Desc::new(lib, D::CUDNN_BACKEND_TENSOR_DESCRIPTOR)?;
            let ty = if sums { DATA_FLOAT } else { dtype };
            t.set_enum(A::CUDNN_ATTR_TENSOR_DATA_TYPE, T::CUDNN_TYPE_DATA_TYPE, ty)?;
            t.set_i64s(A::CUDNN_ATTR_TENSOR_DIMENSIONS, dims)?;
            t.set_i64s(A::CUDNN_ATTR_TENSOR_STRIDES, strides)?;
            t.set_i64s(A::CUDNN_ATTR_TENSOR_UNIQUE_ID, &[uid])?;
            t.set_i64s(A::CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, &[16])?;
            if sums {
                let virtual_ = true;
                // SAFETY: one C bool.
                unsafe {
                    t.set_raw(
                        A::CUDNN_ATTR_TENSOR_IS_VIRTUAL,
                        T::CUDNN_TYPE_BOOLEAN,
                        1,
                        (&virtual_ as *const bool).cast(),
                    )?;
                }
            }
            t.finalize()
        };
        let tensor = |uid: i64, dims: &[i64], strides: &[i64]| tensor_of(uid, dims, strides, false);
        let (xd, xs) = p.tensor_dims(p.in_channels, &p.input);
        let input = tensor(UID_IN, &i64s(&xd), &i64s(&xs))?;
        let (yd, ys) = p.tensor_dims(p.out_channels, &p.output);
        let output = tensor(UID_OUT, &i64s(&yd), &i64s(&ys))?;
        // With a bias the convolution writes the virtual sums, which the
        // pointwise add of the bias turns into the output.
        let sums = match fuse_bias {
            true => Some(tensor_of(UID_SUMS, &i64s(&yd), &i64s(&ys), true)?),
            false => None,
        };
        let conv_out = sums.as_ref().unwrap_or(&output);
        // The filter of the forward convolution: (K, C / groups, kernel..)
        // where K is its output's channels (ours; our input's when
        // transposed), KCRS or KRSC memory.
        let (k, c) = match p.transposed {
            false => (p.out_channels, p.in_channels / p.groups),
            true => (p.in_channels, p.out_channels / p.groups),
        };
        let mut wd = vec![k as i64, c as i64];
        wd.extend(p.kernel.iter().map(|&x| x as i64));
        let order: Vec<usize> = if p.channels_last {
            [0].into_iter().chain(2..nd).chain([1]).collect()
        } else {
            (0..nd).collect()
        };
        let mut ws = vec![0i64; nd];
        let mut step = 1i64;
        for &d in order.iter().rev() {
            ws[d] = step;
            step = step.saturating_mul(wd[d]);
        }
        let filter = tensor(UID_W, &wd, &ws)?;
        let conv = Desc::new(lib, D::CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR)?;
        let spatial = |v: &[usize]| v.iter().map(|&x| x as i64).collect::<Vec<_>>();
        conv.set_i64s(A::CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, &[nd as i64 - 2])?;
        conv.set_enum(
            A::CUDNN_ATTR_CONVOLUTION_COMP_TYPE,
            T::CUDNN_TYPE_DATA_TYPE,
            DATA_FLOAT,
        )?;
        conv.set_enum(
            A::CUDNN_ATTR_CONVOLUTION_CONV_MODE,
            T::CUDNN_TYPE_CONVOLUTION_MODE,
            CROSS_CORRELATION,
        )?;
        conv.set_i64s(A::CUDNN_ATTR_CONVOLUTION_DILATIONS, &spatial(&p.dilation))?;
        conv.set_i64s(
            A::CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES,
            &spatial(&p.stride),
        )?;
        conv.set_i64s(A::CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, &spatial(&p.padding))?;
        conv.set_i64s(
            A::CUDNN_ATTR_CONVOLUTION_POST_PADDINGS,
            &spatial(&p.padding),
        )?;
        let conv = conv.finalize()?;
        let op = if p.transposed {
            let op = Desc::new(
                lib,
                D::CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
            )?;
            op.set_descs(A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, &[&input])?;
            op.set_descs(A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, &[&filter])?;
            op.set_descs(A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, &[conv_out])?;
            op.set_descs(
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
                &[&conv],
            )?;
            op.set_f32(A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, 1.0)?;
            op.set_f32(A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA, 0.0)?;
            op
        } else {
            let op = Desc::new(
                lib,
                D::CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
            )?;
            op.set_descs(A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, &[&input])?;
            op.set_descs(A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, &[&filter])?;
            op.set_descs(A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, &[conv_out])?;
            op.set_descs(
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                &[&conv],
            )?;
            op.set_f32(A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, 1.0)?;
            op.set_f32(A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, 0.0)?;
            op
        };
        let op = op.finalize()?;
        let mut ops = vec![op];
        let mut built = Vec::new();
        if let Some(sums) = &sums {
            // The bias `(1, C, 1, ..)`, contiguous.
            let c = p.out_channels as i64;
            let mut bd = vec![1i64; nd];
            bd[1] = c;
            let mut bs = vec![1i64; nd];
            bs[0] = c;
            let bias = tensor(UID_BIAS, &bd, &bs)?;
            let add = Desc::new(lib, D::CUDNN_BACKEND_POINTWISE_DESCRIPTOR)?;
            add.set_enum(
                A::CUDNN_ATTR_POINTWISE_MODE,
                T::CUDNN_TYPE_POINTWISE_MODE,
                POINTWISE_ADD,
            )?;
            add.set_enum(
                A::CUDNN_ATTR_POINTWISE_MATH_PREC,
                T::CUDNN_TYPE_DATA_TYPE,
                DATA_FLOAT,
            )?;
            let add = add.finalize()?;
            let op = Desc::new(lib, D::CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR)?;
            op.set_descs(A::CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, &[&add])?;
            op.set_descs(A::CUDNN_ATTR_OPERATION_POINTWISE_XDESC, &[sums])?;
            op.set_descs(A::CUDNN_ATTR_OPERATION_POINTWISE_BDESC, &[&bias])?;
            op.set_descs(A::CUDNN_ATTR_OPERATION_POINTWISE_YDESC, &[&output])?;
            ops.push(op.finalize()?);
            built.extend([bias, add]);
        }
        let graph = Desc::new(lib, D::CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR)?;
        graph.set_handle(A::CUDNN_ATTR_OPERATIONGRAPH_HANDLE, handle)?;
        graph.set_descs(
            A::CUDNN_ATTR_OPERATIONGRAPH_OPS,
            &ops.iter().collect::<Vec<_>>(),
        )?;
        let graph = graph.finalize()?;
        let heur = Desc::new(lib, D::CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR)?;
        heur.set_descs(A::CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, &[&graph])?;
        heur.set_enum(
            A::CUDNN_ATTR_ENGINEHEUR_MODE,
            T::CUDNN_TYPE_HEUR_MODE,
            Heur::CUDNN_HEUR_MODE_A as c_int,
        )?;
        let heur = heur.finalize()?;
        let n = heur.count(
            A::CUDNN_ATTR_ENGINEHEUR_RESULTS,
            T::CUDNN_TYPE_BACKEND_DESCRIPTOR,
        )?;
        let mut configs = (0..n)
            .map(|_| Desc::new(lib, D::CUDNN_BACKEND_ENGINECFG_DESCRIPTOR))
            .collect::<Step<Vec<_>>>()?;
        let got = heur.get_descs(A::CUDNN_ATTR_ENGINEHEUR_RESULTS, &mut configs)?;
        configs.truncate(got);
        let mut candidates = Vec::new();
        let mut kept = Vec::new();
        for config in configs {
            if candidates.len() == most_candidates() {
                break;
            }
            // A configuration cuDNN cannot describe or plan is skipped.
            let Ok(true) = sums_directly(lib, &config, p.dtype) else {
                continue;
            };
            let Ok(candidate) = plan(lib, handle, &config) else {
                continue;
            };
            if candidate.workspace <= MAX_WORKSPACE {
                candidates.push(candidate);
                kept.push(config);
            }
        }
        if candidates.is_empty() {
            return Err(Declined {
                call: "cudnnBackendFinalize (no engine the heuristics offer sums directly)",
                status: 0,
            });
        }
        kept.extend([input, output, filter, conv, graph, heur]);
        kept.extend(ops);
        kept.extend(built);
        kept.extend(sums);
        Ok(GraphPlans {
            fused_bias: fuse_bias,
            tuned: candidates.len() == 1,
            candidates,
            _built: kept,
        })
    }

    /// Runs candidate `i` on `at`'s buffers.
    ///
    /// # Safety
    /// `at` holds the problem's tensors in live device memory and a
    /// workspace of at least `self.workspace()` bytes (or candidate `i`'s).
    pub(super) unsafe fn execute(&self, handle: Ptr, i: usize, at: &ConvAddresses) -> Step<()> {
        let lib = self.candidates[i].plan.lib;
        let pack = Desc::new(lib, D::CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR)?;
        let addr = |a: u64| a as usize as *mut c_void;
        let mut uids = vec![UID_IN, UID_W, UID_OUT];
        let mut pointers = vec![addr(at.x), addr(at.w), addr(at.y)];
        if self.fused_bias {
            let Some(bias) = at.bias else {
                return Err(Declined {
                    call: "cudnnBackendExecute (a plan with a bias, called without one)",
                    status: 0,
                });
            };
            uids.push(UID_BIAS);
            pointers.push(addr(bias));
        }
        pack.set_i64s(A::CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, &uids)?;
        // SAFETY: a device pointer per unique id, then one.
        unsafe {
            pack.set_raw(
                A::CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                T::CUDNN_TYPE_VOID_PTR,
                pointers.len(),
                pointers.as_ptr().cast(),
            )?;
            let workspace = addr(at.workspace);
            pack.set_raw(
                A::CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
                T::CUDNN_TYPE_VOID_PTR,
                1,
                (&workspace as *const *mut c_void).cast(),
            )?;
        }
        let pack = pack.finalize()?;
        // SAFETY: a finalized plan and variant pack on our handle.
        let status =
            unsafe { (lib.backend_execute)(handle, self.candidates[i].plan.raw, pack.raw) };
        ok(status, "cudnnBackendExecute")
    }

    /// Puts the fastest of the timed candidates first (`times[i]`: candidate
    /// `i`'s time, `None` when it failed to run) and keeps only it.
    pub(super) fn keep_fastest(&mut self, times: &[Option<f32>]) {
        let best = (0..self.candidates.len())
            .filter_map(|i| times.get(i).copied().flatten().map(|t| (i, t)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map_or(0, |(i, _)| i);
        let chosen = self.candidates.swap_remove(best);
        self.candidates = vec![chosen];
        self.tuned = true;
    }
}

/// Whether `config`'s engine sums the products in f32 as the op promises:
/// no Winograd or FFT transforms, no reduced-precision reduction or
/// down-converted inputs, and for f32 no tensor cores (TF32).
fn sums_directly(lib: &'static Cudnn, config: &Desc, dtype: DnnType) -> Step<bool> {
    let mut engine = [Desc::new(lib, D::CUDNN_BACKEND_ENGINE_DESCRIPTOR)?];
    if config.get_descs(A::CUDNN_ATTR_ENGINECFG_ENGINE, &mut engine)? != 1 {
        return Ok(false);
    }
    let mut notes = [0 as c_int; 2 * Note::CUDNN_NUMERICAL_NOTE_TYPE_COUNT as usize];
    let n = engine[0].get_ints(
        A::CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
        T::CUDNN_TYPE_NUMERICAL_NOTE,
        &mut notes,
    )?;
    let refused = |note: c_int| {
        // Down-converted inputs would round the fused graph's f32 sums to
        // the element type before the bias add (PyTorch refuses them too).
        let always = [
            Note::CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS,
            Note::CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION,
            Note::CUDNN_NUMERICAL_NOTE_FFT,
            Note::CUDNN_NUMERICAL_NOTE_WINOGRAD,
            Note::CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_4x4,
            Note::CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_6x6,
            Note::CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_13x13,
        ];
        let f32_only = [Note::CUDNN_NUMERICAL_NOTE_TENSOR_CORE];
        always.iter().any(|&r| r as c_int == note)
            || (dtype == DnnType::F32 && f32_only.iter().any(|&r| r as c_int == note))
    };
    Ok(!notes[..n].iter().any(|&note| refused(note)))
}

/// An execution plan of `config` on `handle`, and its workspace.
fn plan(lib: &'static Cudnn, handle: Ptr, config: &Desc) -> Step<Candidate> {
    let plan = Desc::new(lib, D::CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR)?;
    plan.set_handle(A::CUDNN_ATTR_EXECUTION_PLAN_HANDLE, handle)?;
    plan.set_descs(A::CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, &[config])?;
    let plan = plan.finalize()?;
    let workspace = plan.get_i64(A::CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE)?;
    Ok(Candidate {
        plan,
        workspace: usize::try_from(workspace).unwrap_or(usize::MAX),
    })
}
