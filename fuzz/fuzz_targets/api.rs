//! Fuzzes the public API: a program of creations, views and ops with
//! arbitrary shapes, strides, dims (negative and huge), dtypes and
//! parameters, run step by step on the Cpu and on the emulator (sanitizer
//! on: every global read and write checked). Built with overflow checks and
//! debug assertions on. A crash is any panic — a failed check inside
//! ferrocm, an overflow, a sanitizer report that escaped as a panic — or the
//! two devices disagreeing about whether a step is valid (one refuses what
//! the other accepts, apart from the documented differences below).

#![no_main]

use arbitrary::Arbitrary;
use ferrocm::host::Error as HostError;
use ferrocm::ops::{Binary, Cmp, DType, DynTensor, Error, Reduce, Unary, WithDType};
use ferrocm::{Activation, Device, Tensor, WaveSize, bf16, f16};
use libfuzzer_sys::fuzz_target;

/// Most bytes a device may hold (live and cached): large inputs are refused
/// as out of memory instead of slowing the fuzzer down.
const MEMORY_LIMIT: u64 = 8 << 10;
/// Most elements a reduction may read: a broadcast view needs no memory,
/// so the memory limit does not bound the work of reducing it (a scalar
/// broadcast to 67M elements took the emulator 9 s).
const WORK_LIMIT: usize = 1 << 16;
const MAX_STEPS: usize = 12;
const MAX_TENSORS: usize = 8;

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Dt {
    F32,
    F16,
    Bf16,
    U8,
    U32,
    I64,
}

impl Dt {
    fn dtype(self) -> DType {
        match self {
            Dt::F32 => DType::F32,
            Dt::F16 => DType::F16,
            Dt::Bf16 => DType::BF16,
            Dt::U8 => DType::U8,
            Dt::U32 => DType::U32,
            Dt::I64 => DType::I64,
        }
    }
}

/// A small shape: each byte a dim of 0 to 8, at most 5 dims.
#[derive(Arbitrary, Debug, Clone)]
struct Small(Vec<u8>);

impl Small {
    fn dims(&self) -> Vec<usize> {
        self.0.iter().take(5).map(|&b| (b % 9) as usize).collect()
    }
}

#[derive(Arbitrary, Debug)]
enum Step {
    Zeros {
        dt: Dt,
        shape: Small,
    },
    Full {
        dt: Dt,
        shape: Small,
        value: f64,
    },
    Arange {
        dt: Dt,
        start: i64,
        end: i64,
    },
    Rand {
        dt: Dt,
        shape: Small,
        lo: f64,
        hi: f64,
        seed: u64,
    },
    Randn {
        dt: Dt,
        shape: Small,
        mean: f64,
        std: f64,
        seed: u64,
    },
    FromBytes {
        dt: Dt,
        shape: Small,
        data: Vec<u8>,
    },
    Transpose {
        src: u8,
        d0: i64,
        d1: i64,
    },
    Permute {
        src: u8,
        perm: Vec<i64>,
    },
    Narrow {
        src: u8,
        dim: i64,
        start: usize,
        len: usize,
    },
    NarrowSmall {
        src: u8,
        dim: i8,
        start: u8,
        len: u8,
    },
    Broadcast {
        src: u8,
        shape: Vec<usize>,
    },
    BroadcastSmall {
        src: u8,
        shape: Small,
    },
    Reshape {
        src: u8,
        shape: Vec<usize>,
    },
    ReshapeSmall {
        src: u8,
        shape: Small,
    },
    Unary {
        src: u8,
        op: u8,
        p: f32,
    },
    Affine {
        src: u8,
        mul: f32,
        add: f32,
    },
    Binary {
        a: u8,
        b: u8,
        op: u8,
    },
    Cmp {
        a: u8,
        b: u8,
        op: u8,
    },
    Scalar {
        src: u8,
        op: u8,
        value: f64,
    },
    Where {
        mask: u8,
        a: u8,
        b: u8,
    },
    Cast {
        src: u8,
        dt: Dt,
    },
    Reduce {
        src: u8,
        op: u8,
        dims: Vec<i8>,
        keepdim: bool,
    },
    ReduceHuge {
        src: u8,
        dims: Vec<i64>,
    },
    Arg {
        src: u8,
        min: bool,
        dims: Vec<i8>,
        keepdim: bool,
    },
    Softmax {
        src: u8,
        dim: i64,
        log: bool,
    },
    Copy2d {
        src: u8,
        rows: usize,
        cols: usize,
        stride: usize,
        offset: usize,
    },
    Copy2dSmall {
        src: u8,
        rows: u8,
        cols: u8,
        stride: u8,
        offset: u8,
    },
    Contiguous {
        src: u8,
    },
    Read {
        src: u8,
    },
    Allclose {
        a: u8,
        b: u8,
        rtol: f64,
        atol: f64,
    },
    Sync,
    IndexSelect {
        src: u8,
        dim: i8,
        ids: u8,
    },
    Embedding {
        src: u8,
        ids: u8,
    },
    Gather {
        src: u8,
        dim: i8,
        ids: u8,
    },
    Scatter {
        dst: u8,
        dim: i8,
        ids: u8,
        src: u8,
        mode: u8,
    },
    SliceSet {
        dst: u8,
        src: u8,
        dim: i8,
        start: u16,
    },
    Sort {
        src: u8,
        descending: bool,
        indices_only: bool,
    },
    TopK {
        src: u8,
        k: u16,
        largest: bool,
    },
    Matmul {
        a: u8,
        b: u8,
    },
    /// linear with one of five activations, or (`act % 9` from 5)
    /// linear_glu with one of four (`bias` then unused).
    Linear {
        x: u8,
        w: u8,
        bias: bool,
        act: u8,
    },
    /// rms_norm, or add_rms_norm with a residual.
    RmsNorm {
        x: u8,
        w: u8,
        residual: Option<u8>,
        eps: f32,
    },
    /// layer_norm, or add_layer_norm with a residual.
    LayerNorm {
        x: u8,
        w: u8,
        bias: Option<u8>,
        residual: Option<u8>,
        eps: f32,
    },
    /// rope, rope_i or rope_thd by `layout`.
    Rope {
        x: u8,
        cos: u8,
        sin: u8,
        offset: u16,
        layout: u8,
    },
    /// glu(gate, up, act), or glu_halves of `gate` when `up` is None.
    Glu {
        gate: u8,
        up: Option<u8>,
        act: u8,
    },
    /// Attention on tensors of the pool (mostly the errors: shapes rarely fit).
    Attention {
        q: u8,
        k: u8,
        v: u8,
        mask: Option<u8>,
        opts: AttnOpts,
    },
    /// Attention on fresh inputs of a supported head dim, small enough for
    /// the emulator: `(b, h_kv * group, s_q, d)` queries over `s_kv` keys.
    AttentionRandn {
        dt: Dt,
        dims: [u8; 5],
        head_dim: u8,
        seed: u64,
        opts: AttnOpts,
    },
    /// `matvec` (a batch of vectors against matrices).
    Matvec {
        m: u8,
        v: u8,
    },
    /// An op through `DynTensor`'s own entry (one `match` on the run-time
    /// dtype and id type), on tensors of the program: the norms, the gated
    /// activations, RoPE, attention, the products, indexing, sorting and
    /// `slice_set`, mostly with mismatched operands.
    Dyn {
        op: u8,
        a: u8,
        b: u8,
        c: u8,
        dim: i8,
        k: u16,
        eps: f32,
        flag: bool,
    },
    /// A device name, parsed strictly (never opened here when it is a GPU
    /// that is absent: the parse errors first or reports its absence).
    ParseDevice {
        text: String,
    },
}

/// The options of an attention step.
#[derive(Arbitrary, Debug, Clone, Copy)]
struct AttnOpts {
    scale: Option<f32>,
    causal: bool,
    window: Option<u16>,
    softcap: Option<f32>,
}

impl AttnOpts {
    fn apply<'a, T: WithDType>(
        &self,
        mask: Option<&'a Tensor<T>>,
    ) -> ferrocm::AttentionOptions<'a, T> {
        let mut o = ferrocm::AttentionOptions::new();
        if let Some(s) = self.scale {
            o = o.scale(s);
        }
        if self.causal {
            o = o.causal();
        }
        if let Some(w) = self.window {
            o = o.window(w as usize);
        }
        if let Some(c) = self.softcap {
            o = o.softcap(c);
        }
        if let Some(m) = mask {
            o = o.mask(m);
        }
        o
    }
}

#[derive(Arbitrary, Debug)]
struct Program {
    wave64: bool,
    steps: Vec<Step>,
}

/// Runs `body` with `T` the Rust type of `dt`.
macro_rules! typed {
    ($dt:expr, $T:ident => $body:expr) => {
        match $dt {
            DType::F32 => {
                type $T = f32;
                $body
            }
            DType::F16 => {
                type $T = f16;
                $body
            }
            DType::BF16 => {
                type $T = bf16;
                $body
            }
            DType::U8 => {
                type $T = u8;
                $body
            }
            DType::U32 => {
                type $T = u32;
                $body
            }
            DType::I64 => {
                type $T = i64;
                $body
            }
            other => unreachable!("no such dtype in the fuzzer: {other}"),
        }
    };
}

/// Runs `body` with `I` the id type of `dt` (u8, u32 or i64; the caller
/// has checked it is one).
macro_rules! with_ids {
    ($dt:expr, $I:ident => $body:expr) => {
        match $dt {
            DType::U8 => {
                type $I = u8;
                $body
            }
            DType::U32 => {
                type $I = u32;
                $body
            }
            DType::I64 => {
                type $I = i64;
                $body
            }
            other => unreachable!("not an id dtype: {other}"),
        }
    };
}

/// A tensor of ids (an id dtype, at most the work limit) and its dtype.
fn pick_ids(ts: &[DynTensor], i: u8) -> Option<(&DynTensor, DType)> {
    let t = pick_small(ts, i)?;
    let d = t.dtype().ok()?;
    matches!(d, DType::U8 | DType::U32 | DType::I64).then_some((t, d))
}

/// The value a data byte stands for: the specials floats break on, else a
/// small number.
fn value_of(b: u8) -> f64 {
    match b {
        255 => f64::NAN,
        254 => f64::INFINITY,
        253 => f64::NEG_INFINITY,
        252 => -0.0,
        251 => 1e-40, // a subnormal in f32
        _ => b as f64 - 100.0,
    }
}

fn pick<'a>(ts: &'a [DynTensor], i: u8) -> Option<&'a DynTensor> {
    (!ts.is_empty()).then(|| &ts[i as usize % ts.len()])
}

/// `pick` of an optional operand: `Some(None)` when the step has none,
/// `None` (skip the step) when it has one and there is no tensor.
fn pick_opt<'a>(ts: &'a [DynTensor], i: Option<u8>) -> Option<Option<&'a DynTensor>> {
    match i {
        Some(i) => pick(ts, i).map(Some),
        None => Some(None),
    }
}

/// `pick`, for a step whose work is the input's size and not bounded by the
/// memory limit (a reduction to a small output).
fn pick_small<'a>(ts: &'a [DynTensor], i: u8) -> Option<&'a DynTensor> {
    pick(ts, i).filter(|t| t.elem_count() <= WORK_LIMIT)
}

/// Most multiply-adds a matmul may cost the emulator, counted over whole
/// workgroup tiles: one tile step of `gemm_mma` (128x128x32) took the
/// instrumented emulator about 0.2 s, so even a 3x3 product over a batch of
/// 96 took 20 s and timed the fuzzer out.
const MATMUL_WORK_LIMIT: usize = 1 << 20;

/// The multiply-adds of `a @ b` counted over whole workgroup tiles (the
/// tiles of the kernel the dtype takes: the matrix-unit kernel for f16 and
/// bf16, the FMA-tiled one otherwise), with every batch dim of both sides
/// multiplied in: an upper bound, whatever they broadcast to.
fn matmul_work(dtype: DType, a: &[usize], b: &[usize]) -> usize {
    let (bm, bn, bk) = match dtype {
        DType::F16 | DType::BF16 => (128, 128, 32),
        _ => (64, 64, 16),
    };
    let last = |s: &[usize], back: usize| s.len().checked_sub(back).map_or(1, |i| s[i]);
    let product = |s: &[usize]| s.iter().fold(1usize, |p, &d| p.saturating_mul(d));
    let batch = |s: &[usize]| product(&s[..s.len().saturating_sub(2)]);
    let (m, k, n) = (last(a, 2), last(a, 1), last(b, 1));
    // Dims rounded up to whole tiles (saturating: a broadcast view's dims
    // may be near usize::MAX).
    let tiles = |d: usize, t: usize| d.div_ceil(t).saturating_mul(t);
    [
        batch(a),
        batch(b),
        tiles(m, bm),
        tiles(n, bn),
        tiles(k.max(1), bk),
    ]
    .iter()
    .fold(1usize, |w, &d| w.saturating_mul(d.max(1)))
}

/// One step on one device's tensors: `None` when it takes a tensor and
/// there is none.
fn run(step: &Step, ts: &[DynTensor], dev: &Device) -> Option<Result<Option<DynTensor>, Error>> {
    let new = |r: Result<DynTensor, Error>| Some(r.map(Some));
    match step {
        Step::Zeros { dt, shape } => {
            new(typed!(dt.dtype(), T => Tensor::<T>::zeros(&shape.dims(), dev).map(|t| t.to_dyn())))
        }
        Step::Full { dt, shape, value } => new(typed!(dt.dtype(), T => {
            Tensor::<T>::full(T::from_f64(*value), &shape.dims(), dev).map(|t| t.to_dyn())
        })),
        Step::Arange { dt, start, end } => {
            new(typed!(dt.dtype(), T => Tensor::<T>::arange(*start, *end, dev).map(|t| t.to_dyn())))
        }
        Step::Rand {
            dt,
            shape,
            lo,
            hi,
            seed,
        } => new(typed!(dt.dtype(), T => {
            Tensor::<T>::rand(&shape.dims(), *lo, *hi, *seed, dev).map(|t| t.to_dyn())
        })),
        Step::Randn {
            dt,
            shape,
            mean,
            std,
            seed,
        } => new(typed!(dt.dtype(), T => {
            Tensor::<T>::randn(&shape.dims(), *mean, *std, *seed, dev).map(|t| t.to_dyn())
        })),
        Step::FromBytes { dt, shape, data } => new(typed!(dt.dtype(), T => {
            let v: Vec<T> = data.iter().map(|&b| T::from_f64(value_of(b))).collect();
            Tensor::<T>::from_slice(&v, &shape.dims(), dev).map(|t| t.to_dyn())
        })),
        Step::Transpose { src, d0, d1 } => new(pick(ts, *src)?.transpose(*d0, *d1)),
        Step::Permute { src, perm } => new(pick(ts, *src)?.permute(perm)),
        Step::Narrow {
            src,
            dim,
            start,
            len,
        } => new(pick(ts, *src)?.narrow(*dim, *start, *len)),
        Step::NarrowSmall {
            src,
            dim,
            start,
            len,
        } => new(pick(ts, *src)?.narrow(*dim, *start as usize % 8, *len as usize % 8)),
        Step::Broadcast { src, shape } => new(pick(ts, *src)?.broadcast_as(shape)),
        Step::BroadcastSmall { src, shape } => new(pick(ts, *src)?.broadcast_as(&shape.dims())),
        Step::Reshape { src, shape } => new(pick(ts, *src)?.reshape(shape)),
        Step::ReshapeSmall { src, shape } => new(pick(ts, *src)?.reshape(&shape.dims())),
        Step::Unary { src, op, p } => {
            new(pick(ts, *src)?.unary(Unary::ALL[*op as usize % Unary::ALL.len()], *p))
        }
        Step::Affine { src, mul, add } => new(pick(ts, *src)?.affine(*mul, *add)),
        Step::Binary { a, b, op } => {
            new(pick(ts, *a)?.binary(pick(ts, *b)?, Binary::ALL[*op as usize % Binary::ALL.len()]))
        }
        Step::Cmp { a, b, op } => {
            new(pick(ts, *a)?.cmp(pick(ts, *b)?, Cmp::ALL[*op as usize % Cmp::ALL.len()]))
        }
        Step::Scalar { src, op, value } => {
            let t = pick(ts, *src)?;
            new(t.dtype().and_then(|d| {
                typed!(d, T => {
                    let (t, v) = (t.typed::<T>()?, T::from_f64(*value));
                    match op % 6 {
                        0 => t.add_scalar(v),
                        1 => t.sub_scalar(v),
                        2 => t.mul_scalar(v),
                        3 => t.div_scalar(v),
                        4 => t.maximum_scalar(v),
                        _ => t.minimum_scalar(v),
                    }
                    .map(|t| t.to_dyn())
                })
            }))
        }
        Step::Where { mask, a, b } => {
            new(pick(ts, *mask)?.where_cond(pick(ts, *a)?, pick(ts, *b)?))
        }
        Step::Cast { src, dt } => new(pick(ts, *src)?.to_dtype(dt.dtype())),
        Step::Reduce {
            src,
            op,
            dims,
            keepdim,
        } => new(pick_small(ts, *src)?.reduce(
            Reduce::ALL[*op as usize % Reduce::ALL.len()],
            dims,
            *keepdim,
        )),
        Step::ReduceHuge { src, dims } => {
            new(pick_small(ts, *src)?.reduce(Reduce::Sum, dims, false))
        }
        Step::Arg {
            src,
            min,
            dims,
            keepdim,
        } => {
            let t = pick_small(ts, *src)?;
            new(if *min {
                t.argmin(dims, *keepdim)
            } else {
                t.argmax(dims, *keepdim)
            })
        }
        Step::Softmax { src, dim, log } => {
            let t = pick(ts, *src)?;
            new(t.dtype().and_then(|d| {
                typed!(d, T => {
                    let t = t.typed::<T>()?;
                    if *log { t.log_softmax_dim(*dim) } else { t.softmax_dim(*dim) }.map(|t| t.to_dyn())
                })
            }))
        }
        Step::Copy2d {
            src,
            rows,
            cols,
            stride,
            offset,
        } => {
            let t = pick(ts, *src)?;
            new(t.dtype().and_then(|d| {
                typed!(d, T => t.typed::<T>()?.copy2d(*rows, *cols, *stride, *offset).map(|t| t.to_dyn()))
            }))
        }
        Step::Copy2dSmall {
            src,
            rows,
            cols,
            stride,
            offset,
        } => {
            let t = pick(ts, *src)?;
            new(t.dtype().and_then(|d| {
                typed!(d, T => t.typed::<T>()?
                    .copy2d(*rows as usize % 9, *cols as usize % 9, *stride as usize % 9, *offset as usize % 17)
                    .map(|t| t.to_dyn()))
            }))
        }
        Step::Contiguous { src } => new(pick(ts, *src)?.contiguous()),
        Step::Read { src } => {
            let t = pick(ts, *src)?;
            Some(t.dtype().and_then(|d| {
                typed!(d, T => {
                    let t = t.typed::<T>()?;
                    let v = t.to_vec()?;
                    assert_eq!(v.len(), t.elem_count(), "to_vec length");
                    let shown = t.to_string();
                    assert!(!shown.is_empty());
                    if t.elem_count() == 1 {
                        t.to_scalar()?;
                    } else {
                        assert!(t.to_scalar().is_err(), "to_scalar of {} elements", t.elem_count());
                    }
                    Ok(None)
                })
            }))
        }
        Step::Allclose { a, b, rtol, atol } => {
            let (a, b) = (pick(ts, *a)?, pick(ts, *b)?);
            Some(a.dtype().and_then(|d| {
                typed!(d, T => {
                    a.typed::<T>()?.allclose(&b.typed::<T>()?, *rtol, *atol)?;
                    Ok(None)
                })
            }))
        }
        Step::Sync => Some(dev.synchronize().map(|_| None).map_err(Error::from)),
        Step::IndexSelect { src, dim, ids } => {
            let (t, (i, idt)) = (pick_small(ts, *src)?, pick_ids(ts, *ids)?);
            new(t.dtype().and_then(|d| {
                typed!(d, T => with_ids!(idt, I => t
                    .typed::<T>()?
                    .index_select(*dim, &i.typed::<I>()?)
                    .map(|t| t.to_dyn())))
            }))
        }
        Step::Embedding { src, ids } => {
            let (t, (i, idt)) = (pick_small(ts, *src)?, pick_ids(ts, *ids)?);
            new(t.dtype().and_then(|d| {
                typed!(d, T => with_ids!(idt, I => t
                    .typed::<T>()?
                    .embedding(&i.typed::<I>()?)
                    .map(|t| t.to_dyn())))
            }))
        }
        Step::Gather { src, dim, ids } => {
            let (t, (i, idt)) = (pick_small(ts, *src)?, pick_ids(ts, *ids)?);
            new(t.dtype().and_then(|d| {
                typed!(d, T => with_ids!(idt, I => t
                    .typed::<T>()?
                    .gather(*dim, &i.typed::<I>()?)
                    .map(|t| t.to_dyn())))
            }))
        }
        Step::Scatter {
            dst,
            dim,
            ids,
            src,
            mode,
        } => {
            let (t, s) = (pick_small(ts, *dst)?, pick_small(ts, *src)?);
            let (i, idt) = pick_ids(ts, *ids)?;
            new(t.dtype().and_then(|d| {
                typed!(d, T => with_ids!(idt, I => {
                    let (t, i, s) = (t.typed::<T>()?, i.typed::<I>()?, s.typed::<T>()?);
                    match mode % 3 {
                        0 => t.scatter(*dim, &i, &s),
                        1 => t.scatter_add(*dim, &i, &s),
                        _ => t.index_add(*dim, &i, &s),
                    }
                    .map(|t| t.to_dyn())
                }))
            }))
        }
        Step::SliceSet {
            dst,
            src,
            dim,
            start,
        } => {
            let (t, s) = (pick_small(ts, *dst)?, pick_small(ts, *src)?);
            new(t.dtype().and_then(|d| {
                typed!(d, T => {
                    // `ts` still holds the destination: the write copies it first.
                    let mut t = t.typed::<T>()?;
                    t.slice_set(&s.typed::<T>()?, *dim, *start as usize)?;
                    Ok(t.to_dyn())
                })
            }))
        }
        Step::Sort {
            src,
            descending,
            indices_only,
        } => {
            let t = pick_small(ts, *src)?;
            new(t.dtype().and_then(|d| {
                typed!(d, T => {
                    let t = t.typed::<T>()?;
                    if *indices_only {
                        t.argsort(*descending).map(|i| i.to_dyn())
                    } else {
                        t.sort(*descending).map(|(v, _)| v.to_dyn())
                    }
                })
            }))
        }
        Step::TopK { src, k, largest } => {
            let t = pick_small(ts, *src)?;
            new(t.dtype().and_then(|d| {
                typed!(d, T => t.typed::<T>()?.topk(*k as usize, *largest).map(|(v, _)| v.to_dyn()))
            }))
        }
        Step::Matmul { a, b } => {
            let (a, b) = (pick_small(ts, *a)?, pick_small(ts, *b)?);
            if matmul_work(a.dtype().unwrap_or(DType::F16), a.shape(), b.shape())
                > MATMUL_WORK_LIMIT
            {
                return None;
            }
            new(a.dtype().and_then(
                |d| typed!(d, T => a.typed::<T>()?.matmul(&b.typed::<T>()?).map(|t| t.to_dyn())),
            ))
        }
        Step::Linear { x, w, bias, act } => {
            let (x, w) = (pick_small(ts, *x)?, pick_small(ts, *w)?);
            // x [.., k] @ w^T: its rows are all of x's leading dims.
            // (Saturating: a broadcast view's dims may multiply past usize.)
            let lead = &x.shape()[..x.shape().len().saturating_sub(1)];
            let rows = lead.iter().fold(1usize, |p, &d| p.saturating_mul(d));
            let k = x.shape().last().copied().unwrap_or(1);
            let n = w.shape().first().copied().unwrap_or(1);
            if matmul_work(x.dtype().unwrap_or(DType::F16), &[rows, k], &[k, n]) > MATMUL_WORK_LIMIT
            {
                return None;
            }
            let pick = *act as usize % 9;
            let act = [
                None,
                Some(Activation::Relu),
                Some(Activation::Gelu),
                Some(Activation::GeluErf),
                Some(Activation::Silu),
            ][pick.min(4)];
            let glu = [
                Activation::Relu,
                Activation::Gelu,
                Activation::GeluErf,
                Activation::Silu,
            ][pick.saturating_sub(5) % 4];
            new(x.dtype().and_then(|d| {
                typed!(d, T => {
                    let w = w.typed::<T>()?;
                    if pick >= 5 {
                        return x.typed::<T>()?.linear_glu(&w, glu).map(|t| t.to_dyn());
                    }
                    let b = match (*bias, w.shape().first()) {
                        (true, Some(&out)) => Some(Tensor::<T>::ones(&[out], dev)?),
                        _ => None,
                    };
                    x.typed::<T>()?.linear(&w, b.as_ref(), act).map(|t| t.to_dyn())
                })
            }))
        }
        Step::RmsNorm {
            x,
            w,
            residual,
            eps,
        } => {
            let (x, w) = (pick_small(ts, *x)?, pick(ts, *w)?);
            let r = pick_opt(ts, *residual)?;
            new(x.dtype().and_then(|d| {
                typed!(d, T => {
                    let (x, w) = (x.typed::<T>()?, w.typed::<T>()?);
                    match r {
                        Some(r) => x.add_rms_norm(&r.typed::<T>()?, &w, *eps).map(|(_, n)| n.to_dyn()),
                        None => x.rms_norm(&w, *eps).map(|t| t.to_dyn()),
                    }
                })
            }))
        }
        Step::LayerNorm {
            x,
            w,
            bias,
            residual,
            eps,
        } => {
            let (x, w) = (pick_small(ts, *x)?, pick(ts, *w)?);
            let b = pick_opt(ts, *bias)?;
            let r = pick_opt(ts, *residual)?;
            new(x.dtype().and_then(|d| {
                typed!(d, T => {
                    let (x, w) = (x.typed::<T>()?, w.typed::<T>()?);
                    let b = b.map(|b| b.typed::<T>()).transpose()?;
                    match r {
                        Some(r) => x
                            .add_layer_norm(&r.typed::<T>()?, &w, b.as_ref(), *eps)
                            .map(|(_, n)| n.to_dyn()),
                        None => x.layer_norm(&w, b.as_ref(), *eps).map(|t| t.to_dyn()),
                    }
                })
            }))
        }
        Step::Rope {
            x,
            cos,
            sin,
            offset,
            layout,
        } => {
            let (x, c, s) = (pick_small(ts, *x)?, pick(ts, *cos)?, pick(ts, *sin)?);
            new(x.dtype().and_then(|d| {
                typed!(d, T => {
                    let (x, c, s) = (x.typed::<T>()?, c.typed::<T>()?, s.typed::<T>()?);
                    let off = *offset as usize;
                    match layout % 3 {
                        0 => x.rope(&c, &s, off),
                        1 => x.rope_i(&c, &s, off),
                        _ => x.rope_thd(&c, &s, off),
                    }
                    .map(|t| t.to_dyn())
                })
            }))
        }
        Step::Glu { gate, up, act } => {
            let g = pick_small(ts, *gate)?;
            let u = match up {
                Some(u) => Some(pick_small(ts, *u)?),
                None => None,
            };
            let act = [
                Activation::Relu,
                Activation::Gelu,
                Activation::GeluErf,
                Activation::Silu,
            ][*act as usize % 4];
            new(g.dtype().and_then(|d| {
                typed!(d, T => {
                    let g = g.typed::<T>()?;
                    match u {
                        Some(u) => g.glu(&u.typed::<T>()?, act),
                        None => g.glu_halves(act),
                    }
                    .map(|t| t.to_dyn())
                })
            }))
        }
        Step::Attention {
            q,
            k,
            v,
            mask,
            opts,
        } => {
            let (q, k, v) = (
                pick_small(ts, *q)?,
                pick_small(ts, *k)?,
                pick_small(ts, *v)?,
            );
            let m = pick_opt(ts, *mask)?;
            // The work is q's rows times k's rows times d: bounded by the
            // three sizes.
            if q.elem_count()
                .saturating_mul(k.shape().get(2).copied().unwrap_or(1))
                > WORK_LIMIT
            {
                return None;
            }
            new(q.dtype().and_then(|d| {
                typed!(d, T => {
                    let m = m.map(|m| m.typed::<T>()).transpose()?;
                    q.typed::<T>()?
                        .attention(&k.typed::<T>()?, &v.typed::<T>()?, &opts.apply(m.as_ref()))
                        .map(|t| t.to_dyn())
                })
            }))
        }
        Step::Matvec { m, v } => {
            let (m, v) = (pick_small(ts, *m)?, pick_small(ts, *v)?);
            let mut col = v.shape().to_vec();
            col.push(1);
            if matmul_work(m.dtype().unwrap_or(DType::F16), m.shape(), &col) > MATMUL_WORK_LIMIT {
                return None;
            }
            new(m.matvec(v))
        }
        Step::Dyn {
            op,
            a,
            b,
            c,
            dim,
            k,
            eps,
            flag,
        } => {
            let (a, b, c) = (
                pick_small(ts, *a)?,
                pick_small(ts, *b)?,
                pick_small(ts, *c)?,
            );
            let (dim, k, eps) = (*dim as isize, *k as usize, *eps);
            let act = [
                Activation::Relu,
                Activation::Gelu,
                Activation::GeluErf,
                Activation::Silu,
            ][k % 4];
            new(match op % 18 {
                0 => a.rms_norm(b, eps),
                1 => a.add_rms_norm(c, b, eps).map(|(s, _)| s),
                2 => a.layer_norm(b, flag.then_some(c), eps),
                3 => a.add_layer_norm(c, b, None, eps).map(|(_, y)| y),
                4 => a.swiglu(b),
                5 => a.glu(b, act),
                6 => a.glu_halves(act),
                7 => a.rope(b, c, k % 8),
                8 => a.rope_thd(b, c, k % 8),
                9 => {
                    if a.elem_count()
                        .saturating_mul(b.shape().get(2).copied().unwrap_or(1))
                        > WORK_LIMIT
                    {
                        return None;
                    }
                    let o = ferrocm::ops::attention::DynAttentionOptions::new();
                    a.attention(b, c, &if *flag { o.causal() } else { o })
                }
                10 => {
                    if matmul_work(a.dtype().unwrap_or(DType::F16), a.shape(), b.shape())
                        > MATMUL_WORK_LIMIT
                    {
                        return None;
                    }
                    a.matmul(b)
                }
                11 => a.index_select(dim, b),
                12 => a.embedding(b),
                13 => a.gather(dim, b),
                14 => a.scatter_add(dim, b, c),
                15 => a.index_add(dim, b, c),
                16 => {
                    if *flag {
                        a.topk(k, k % 2 == 0).map(|(v, _)| v)
                    } else {
                        a.sort(k % 2 == 0).map(|(_, i)| i)
                    }
                }
                _ => {
                    // In place on a copy of the program's tensor (the
                    // program keeps its own).
                    let mut t = a.clone();
                    t.slice_set(b, dim, k).map(|()| t)
                }
            })
        }
        Step::ParseDevice { text } => {
            // Both devices parse the same text: the same answer, no panic.
            let _ = text.parse::<Device>();
            None
        }
        Step::AttentionRandn {
            dt,
            dims,
            head_dim,
            seed,
            opts,
        } => {
            // b 1-2, h_kv 1-2, group 1-3, s_q 1-8, s_kv 0-40.
            let [b, h_kv, g, s_q, s_kv] = *dims;
            let (b, h_kv, g) = (
                1 + b as usize % 2,
                1 + h_kv as usize % 2,
                1 + g as usize % 3,
            );
            let (s_q, s_kv) = (1 + s_q as usize % 8, s_kv as usize % 41);
            let d = [64, 80, 96, 128, 256][*head_dim as usize % 5];
            new(typed!(dt.dtype(), T => {
                (|| {
                    let r = |shape: &[usize], k: u64| Tensor::<T>::randn(shape, 0.0, 1.0, seed.wrapping_add(k), dev);
                    let q = r(&[b, h_kv * g, s_q, d], 0)?;
                    let (k, v) = (r(&[b, h_kv, s_kv, d], 1)?, r(&[b, h_kv, s_kv, d], 2)?);
                    q.attention(&k, &v, &opts.apply(None)).map(|t| t.to_dyn())
                })()
            }))
        }
    }
}

/// Differences between the devices that are documented, not bugs: a fault
/// (or a bad id) found on the device surfaces at a later wait than on the Cpu (which
/// returns it from the op), and the emulator may need a little more memory
/// (layouts in memory, red zones) than the Cpu near the limit.
fn may_differ(e: &Error) -> bool {
    matches!(
        e,
        Error::Host(HostError::Fault { .. })
            | Error::Host(HostError::IdOutOfRange { .. })
            | Error::Host(HostError::OutOfMemory { .. })
    )
}

fn devices(wave64: bool) -> [Device; 2] {
    let wave = if wave64 {
        WaveSize::Wave64
    } else {
        WaveSize::Wave32
    };
    let devs = [Device::Cpu, Device::emulator(wave)];
    for d in &devs {
        d.set_memory_limit(Some(MEMORY_LIMIT));
    }
    devs
}

fuzz_target!(|program: Program| {
    // FERROCM_FUZZ_SHOW=1 prints each program (to read a crash's input).
    static SHOW: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *SHOW.get_or_init(|| std::env::var_os("FERROCM_FUZZ_SHOW").is_some()) {
        eprintln!("{program:#?}");
    }
    let [cpu, emu] = devices(program.wave64);
    // Start clean: a fault left over from an earlier input is reported now.
    let _ = emu.synchronize();
    let (mut on_cpu, mut on_emu): (Vec<DynTensor>, Vec<DynTensor>) = (Vec::new(), Vec::new());
    for step in program.steps.iter().take(MAX_STEPS) {
        let (Some(c), Some(e)) = (run(step, &on_cpu, &cpu), run(step, &on_emu, &emu)) else {
            continue;
        };
        match (c, e) {
            (Ok(c), Ok(e)) => {
                if let (Some(c), Some(e)) = (c, e) {
                    assert_eq!(c.shape(), e.shape(), "{step:?}");
                    assert_eq!(c.dtype().ok(), e.dtype().ok(), "{step:?}");
                    if on_cpu.len() < MAX_TENSORS {
                        on_cpu.push(c);
                        on_emu.push(e);
                    }
                }
            }
            (Err(c), Err(e)) => {
                // Both refuse; each message names something and prints.
                assert!(!c.to_string().is_empty() && !e.to_string().is_empty());
            }
            (Err(c), Ok(_)) => assert!(
                may_differ(&c),
                "{step:?}: the Cpu refused ({c}), the emulator did not"
            ),
            (Ok(_), Err(e)) => assert!(
                may_differ(&e),
                "{step:?}: the emulator refused ({e}), the Cpu did not"
            ),
        }
    }
});
