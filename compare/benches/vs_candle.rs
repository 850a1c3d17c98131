//! ferrocm's Cpu backend against candle-core's CPU backend on the same inputs
//! in one process: each op's median time on both, the ratio (candle time /
//! ferrocm time, above 1 = ferrocm faster), ferrocm's bandwidth as a share of
//! this machine's memcpy bandwidth measured in the same run, and the geometric
//! mean per dtype.
//!
//! ```text
//! CARGO_TARGET_DIR=target cargo bench --manifest-path compare/Cargo.toml
//! VS_CANDLE_N=2048 VS_CANDLE_REPS=5 VS_CANDLE_FILTER=softmax ...   # smaller, fewer, some
//! ```

use candle_core::{D, DType as CDType, Device as CDevice, Tensor as CTensor};
use ferrocm::{Device, Tensor, bf16};
use std::time::Instant;

/// One op on both sides: its name, its family, bytes moved (read + written),
/// and the two closures.
struct Case<'a> {
    name: &'static str,
    bytes: usize,
    ferrocm: Box<dyn Fn() + 'a>,
    candle: Box<dyn Fn() + 'a>,
}

fn median_ms(reps: usize, f: &dyn Fn()) -> f64 {
    f(); // warm up: caches, the allocator, rayon's threads
    let mut t: Vec<f64> = (0..reps)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    t.sort_by(|a, b| a.total_cmp(b));
    t[reps / 2]
}

/// memcpy bandwidth (bytes read + written per second) of a 64 MiB copy, the
/// better of one thread and all threads in parallel.
fn memcpy_gbs(reps: usize) -> (f64, f64) {
    let n = 16 << 20;
    let src = vec![1.0f32; n];
    let dst = vec![0.0f32; n];
    let one = median_ms(reps, &|| {
        // SAFETY: dst is a distinct allocation of n elements.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst.as_ptr() as *mut f32, n) };
        std::hint::black_box(&dst);
    });
    // All threads: rayon's pool, 1 MiB pieces (as the ops' own loops).
    let mut dst2 = vec![0.0f32; n];
    let cell = std::cell::RefCell::new(&mut dst2);
    let all = median_ms(reps, &|| {
        use rayon::prelude::*;
        let mut d = cell.borrow_mut();
        d.par_chunks_mut(1 << 18)
            .zip(src.par_chunks(1 << 18))
            .for_each(|(d, s)| d.copy_from_slice(s));
    });
    let gbs = |ms: f64| (2 * n * 4) as f64 / ms / 1e6;
    (gbs(one), gbs(all))
}

fn cases<'a, T: ferrocm::ops::WithDType>(
    x: &'a Tensor<T>,
    y: &'a Tensor<T>,
    mask: &'a Tensor<u8>,
    cx: &'a CTensor,
    cy: &'a CTensor,
    cmask: &'a CTensor,
    (ids, cids): (&'a Tensor<u32>, &'a CTensor),
    (gids, cgids): (&'a Tensor<u32>, &'a CTensor),
) -> Vec<Case<'a>> {
    let n = x.elem_count();
    let e = size_of::<T>();
    let (one, two, three) = (n * e, 2 * n * e, 3 * n * e);
    let cast_to = if T::DTYPE == ferrocm::DType::F32 {
        CDType::BF16
    } else {
        CDType::F32
    };
    macro_rules! case {
        ($name:expr, $bytes:expr, |$f:ident| $fe:expr, |$c:ident| $ce:expr) => {
            Case {
                name: $name,
                bytes: $bytes,
                ferrocm: Box::new(move || {
                    let $f = x;
                    std::hint::black_box($fe.unwrap());
                }),
                candle: Box::new(move || {
                    let $c = cx;
                    std::hint::black_box($ce.unwrap());
                }),
            }
        };
    }
    vec![
        case!("copy", two, |x| x.copy(), |c| c.copy()),
        case!(
            "cast",
            one + n * (6 - e),
            |x| if T::DTYPE == ferrocm::DType::F32 {
                x.to_dtype::<bf16>().map(|_| ())
            } else {
                x.to_dtype::<f32>().map(|_| ())
            },
            |c| c.to_dtype(cast_to)
        ),
        case!("affine", two, |x| x.affine(2.0, 1.0), |c| c.affine(2.0, 1.0)),
        case!("add", three, |x| x.add(y), |c| c.add(cy)),
        case!("mul", three, |x| x.mul(y), |c| c.mul(cy)),
        case!("maximum", three, |x| x.maximum(y), |c| c.maximum(cy)),
        case!("lt", two + n, |x| x.lt(y), |c| c.lt(cy)),
        case!(
            "where",
            three + n,
            |x| mask.where_cond(x, y),
            |c| cmask.where_cond(c, cy)
        ),
        case!("exp", two, |x| x.exp(), |c| c.exp()),
        case!("tanh", two, |x| x.tanh(), |c| c.tanh()),
        case!("gelu", two, |x| x.gelu(), |c| c.gelu()),
        case!("gelu_erf", two, |x| x.gelu_erf(), |c| c.gelu_erf()),
        case!("silu", two, |x| x.silu(), |c| c.silu()),
        case!("sqrt", two, |x| x.abs().and_then(|a| a.sqrt()), |c| c
            .abs()
            .and_then(|a| a.sqrt())),
        case!(
            "sum_last",
            one,
            |x| x.sum(&[1], true),
            |c| c.sum_keepdim(1)
        ),
        case!(
            "sum_first",
            one,
            |x| x.sum(&[0], true),
            |c| c.sum_keepdim(0)
        ),
        case!(
            "max_last",
            one,
            |x| x.max(&[1], true),
            |c| c.max_keepdim(1)
        ),
        case!(
            "argmax_last",
            one,
            |x| x.argmax(&[1], true),
            |c| c.argmax_keepdim(1)
        ),
        case!(
            "softmax",
            two,
            |x| x.softmax(),
            |c| candle_nn::ops::softmax_last_dim(c)
        ),
        case!(
            "log_softmax",
            two,
            |x| x.log_softmax(),
            |c| candle_nn::ops::log_softmax(c, D::Minus1)
        ),
        case!(
            "transpose",
            two,
            |x| x.transpose(0, 1).and_then(|t| t.contiguous()),
            |c| c.t().and_then(|t| t.contiguous())
        ),
        // Indexing and sorting (ids: a permutation of the rows; cols/8 ids per row).
        case!("argsort", one + n * 4, |x| x.argsort(false), |c| c.arg_sort_last_dim(true)),
        case!("index_select", two + ids.elem_count() * 4, |x| x.index_select(0, ids), |c| c
            .index_select(cids, 0)),
        case!(
            "gather",
            gids.elem_count() * (2 * e + 4),
            |x| x.gather(1, gids),
            |c| c.gather(cgids, 1)
        ),
    ]
}

fn main() {
    let env = |k: &str, d: usize| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d);
    let n = env("VS_CANDLE_N", 4096);
    let reps = env("VS_CANDLE_REPS", 9);
    let filter = std::env::var("VS_CANDLE_FILTER").unwrap_or_default();
    let dev = Device::Cpu;
    let cdev = CDevice::Cpu;
    let (one, all) = memcpy_gbs(reps);
    let memcpy = one.max(all);
    println!(
        "{n}x{n}, median of {reps}, {} threads; memcpy {one:.1} GB/s on one thread, {all:.1} GB/s on all (read + written bytes)",
        rayon_threads()
    );
    let xs = Tensor::<f32>::randn(&[n, n], 0.0, 1.0, 1, &dev).unwrap();
    let ys = Tensor::<f32>::randn(&[n, n], 0.0, 1.0, 2, &dev).unwrap();
    let mask = Tensor::<u8>::rand(&[n, n], 0.0, 2.0, 3, &dev).unwrap();
    let c = |t: &Tensor<f32>| CTensor::from_vec(t.to_vec().unwrap(), (n, n), &cdev).unwrap();
    let cmask = CTensor::from_vec(mask.to_vec().unwrap(), (n, n), &cdev).unwrap();
    let (cx, cy) = (c(&xs), c(&ys));
    let (xb, yb) = (xs.to_dtype::<bf16>().unwrap(), ys.to_dtype::<bf16>().unwrap());
    let (cxb, cyb) = (cx.to_dtype(CDType::BF16).unwrap(), cy.to_dtype(CDType::BF16).unwrap());
    // A permutation of the rows, and n/8 column ids per row.
    let perm = Tensor::<f32>::rand(&[n], 0.0, 1.0, 4, &dev).unwrap().argsort(false).unwrap();
    let cperm = CTensor::from_vec(perm.to_vec().unwrap(), n, &cdev).unwrap();
    let gids = Tensor::<u32>::rand(&[n, n / 8], 0.0, n as f64, 5, &dev).unwrap();
    let cgids = CTensor::from_vec(gids.to_vec().unwrap(), (n, n / 8), &cdev).unwrap();
    let mut all_ratios = vec![];
    for (dtype, list) in [
        ("f32", cases(&xs, &ys, &mask, &cx, &cy, &cmask, (&perm, &cperm), (&gids, &cgids))),
        ("bf16", cases(&xb, &yb, &mask, &cxb, &cyb, &cmask, (&perm, &cperm), (&gids, &cgids))),
    ] {
        println!("\n{dtype:<5} {:<12} {:>10} {:>10} {:>7} {:>9} {:>8}", "op", "candle ms", "ferrocm ms", "ratio", "GB/s", "% memcpy");
        let mut ratios = vec![];
        for case in list.iter().filter(|c| c.name.contains(&filter)) {
            let tc = median_ms(reps, &*case.candle);
            let tf = median_ms(reps, &*case.ferrocm);
            let gbs = case.bytes as f64 / tf / 1e6;
            ratios.push(tc / tf);
            println!(
                "{dtype:<5} {:<12} {tc:>10.2} {tf:>10.2} {:>6.2}x {gbs:>9.1} {:>7.0}%",
                case.name,
                tc / tf,
                100.0 * gbs / memcpy
            );
        }
        println!("{dtype:<5} geometric mean {:.2}x over {} ops, lowest {:.2}x", geomean(&ratios), ratios.len(), ratios.iter().cloned().fold(f64::INFINITY, f64::min));
        all_ratios.extend(ratios);
    }
    println!("\nall   geometric mean {:.2}x over {} ops", geomean(&all_ratios), all_ratios.len());
    // The argsort of issue 11's bench: rows of a 32000-token vocabulary
    // (VS_CANDLE_VOCAB_ROWS rows, default 4096; 0 skips it).
    let vrows = env("VS_CANDLE_VOCAB_ROWS", 4096);
    if vrows > 0 && "argsort".contains(&filter) {
        let v = Tensor::<f32>::randn(&[vrows, 32000], 0.0, 1.0, 6, &dev).unwrap();
        let cv = CTensor::from_vec(v.to_vec().unwrap(), (vrows, 32000), &cdev).unwrap();
        let tc = median_ms(reps, &|| drop(cv.arg_sort_last_dim(true).unwrap()));
        let tf = median_ms(reps, &|| drop(v.argsort(false).unwrap()));
        println!("\nf32   argsort {vrows}x32000: candle {tc:.1} ms, ferrocm {tf:.1} ms, {:.2}x", tc / tf);
    }
    llm_cases(n, reps, &filter, memcpy);
    attention_cases(reps, &filter, memcpy);
    quant_cases(reps, &filter, memcpy);
    conv_cases(reps, &filter);
    // Issue 10's Cpu targets: GEMM 1024^3 and 4096^3 f32 (and f16) at least
    // candle's speed; matvec 4096 x 4096 at 50% of memcpy in weight bytes
    // (VS_CANDLE_MATMUL_BIG=0 leaves out the 4096^3 GEMM).
    if "matmul".contains(&filter) {
        println!("\n{:<26} {:>10} {:>10} {:>7} {:>9}", "matmul", "candle ms", "ferrocm ms", "ratio", "GFLOP/s");
        let mut sizes = vec![1024];
        if env("VS_CANDLE_MATMUL_BIG", 1) != 0 {
            sizes.push(4096);
        }
        for s in sizes {
            let a = Tensor::<f32>::randn(&[s, s], 0.0, 1.0, 7, &dev).unwrap();
            let ca = CTensor::from_vec(a.to_vec().unwrap(), (s, s), &cdev).unwrap();
            let (ah, cah) = (a.to_dtype::<ferrocm::f16>().unwrap(), ca.to_dtype(CDType::F16).unwrap());
            let flops = 2.0 * (s as f64).powi(3);
            let f32_case = (median_ms(reps, &|| drop(ca.matmul(&ca).unwrap())), median_ms(reps, &|| drop(a.matmul(&a).unwrap())));
            let f16_case = (median_ms(reps, &|| drop(cah.matmul(&cah).unwrap())), median_ms(reps, &|| drop(ah.matmul(&ah).unwrap())));
            for (name, (tc, tf)) in [("f32", f32_case), ("f16", f16_case)] {
                println!("{:<26} {tc:>10.2} {tf:>10.2} {:>6.2}x {:>9.1}", format!("gemm {s}^3 {name}"), tc / tf, flops / tf / 1e6);
            }
        }
        let w = Tensor::<f32>::randn(&[4096, 4096], 0.0, 1.0, 8, &dev).unwrap();
        let v = Tensor::<f32>::randn(&[4096], 0.0, 1.0, 9, &dev).unwrap();
        let cw = CTensor::from_vec(w.to_vec().unwrap(), (4096, 4096), &cdev).unwrap();
        let cv = CTensor::from_vec(v.to_vec().unwrap(), (4096, 1), &cdev).unwrap();
        let tc = median_ms(reps, &|| drop(cw.matmul(&cv).unwrap()));
        let tf = median_ms(reps, &|| drop(w.matvec(&v).unwrap()));
        // memcpy counts read + written bytes; a matvec reads the weight once.
        let gbs = (4096.0 * 4096.0 * 4.0) / tf / 1e6;
        println!(
            "{:<26} {tc:>10.2} {tf:>10.2} {:>6.2}x   {gbs:.1} GB/s of weight = {:.0}% of memcpy",
            "matvec 4096x4096 f32",
            tc / tf,
            100.0 * gbs / memcpy
        );
    }
}

/// Issue 12's inputs on one side: x (n x n) with its weight and bias, q
/// (1, 32, 2048, 128) with (2048, 64) tables, a fused gate-up (n/4 x 2·14336).
struct Llm<X> {
    x: X,
    w: X,
    b: X,
    q: X,
    cos: X,
    sin: X,
    gu: X,
}

impl Llm<Tensor<f32>> {
    fn new(n: usize) -> Self {
        let dev = Device::Cpu;
        let r = |s: &[usize], m, sd, seed| Tensor::<f32>::randn(s, m, sd, seed, &dev).unwrap();
        let angles = r(&[2048, 64], 0.0, 1.0, 14);
        Self {
            x: r(&[n, n], 0.0, 1.0, 10),
            w: r(&[n], 1.0, 0.1, 11),
            b: r(&[n], 0.0, 0.1, 12),
            q: r(&[1, 32, 2048, 128], 0.0, 1.0, 13),
            cos: angles.cos().unwrap(),
            sin: angles.sin().unwrap(),
            gu: r(&[n / 4, 2 * 14336], 0.0, 1.0, 15),
        }
    }

    fn map<Y>(&self, f: impl Fn(&Tensor<f32>) -> Y) -> Llm<Y> {
        Llm { x: f(&self.x), w: f(&self.w), b: f(&self.b), q: f(&self.q), cos: f(&self.cos), sin: f(&self.sin), gu: f(&self.gu) }
    }
}

/// Issue 12's ops against candle-nn's on the Cpu: RMSNorm and LayerNorm
/// (n x n), RoPE in both pair layouts, SwiGLU of a fused gate-up; f32 and bf16.
fn llm_cases(n: usize, reps: usize, filter: &str, memcpy: f64) {
    let cdev = CDevice::Cpu;
    println!("\n{:<26} {:>10} {:>10} {:>7} {:>9} {:>8}", "llm", "candle ms", "ferrocm ms", "ratio", "GB/s", "% memcpy");
    let f32s = Llm::new(n);
    let candle = f32s.map(|t| CTensor::from_vec(t.to_vec().unwrap(), t.shape(), &cdev).unwrap());
    llm_rows("f32", &f32s, &candle, reps, filter, memcpy);
    let bf16s = f32s.map(|t| t.to_dtype::<bf16>().unwrap());
    let cbf16 = candle.map_c(|t| t.to_dtype(CDType::BF16).unwrap());
    llm_rows("bf16", &bf16s, &cbf16, reps, filter, memcpy);
}

impl Llm<CTensor> {
    fn map_c(&self, f: impl Fn(&CTensor) -> CTensor) -> Self {
        Llm { x: f(&self.x), w: f(&self.w), b: f(&self.b), q: f(&self.q), cos: f(&self.cos), sin: f(&self.sin), gu: f(&self.gu) }
    }
}

fn llm_rows<T: ferrocm::ops::WithDType>(dt: &str, f: &Llm<Tensor<T>>, c: &Llm<CTensor>, reps: usize, filter: &str, memcpy: f64) {
    let e = size_of::<T>();
    let (nn, q, t, gu) = (f.x.elem_count(), f.q.elem_count(), f.cos.elem_count(), f.gu.elem_count());
    type Run<'a> = Box<dyn Fn() + 'a>;
    let cases: Vec<(&str, usize, Run, Run)> = vec![
        ("rms_norm", 2 * nn * e, Box::new(|| drop(f.x.rms_norm(&f.w, 1e-5).unwrap())), Box::new(|| drop(candle_nn::ops::rms_norm(&c.x, &c.w, 1e-5).unwrap()))),
        ("layer_norm", 2 * nn * e, Box::new(|| drop(f.x.layer_norm(&f.w, Some(&f.b), 1e-5).unwrap())), Box::new(|| drop(candle_nn::ops::layer_norm(&c.x, &c.w, &c.b, 1e-5).unwrap()))),
        ("rope", (2 * q + 2 * t) * e, Box::new(|| drop(f.q.rope(&f.cos, &f.sin, 0).unwrap())), Box::new(|| drop(candle_nn::rotary_emb::rope(&c.q, &c.cos, &c.sin).unwrap()))),
        ("rope_i", (2 * q + 2 * t) * e, Box::new(|| drop(f.q.rope_i(&f.cos, &f.sin, 0).unwrap())), Box::new(|| drop(candle_nn::rotary_emb::rope_i(&c.q, &c.cos, &c.sin).unwrap()))),
        ("swiglu", gu / 2 * 3 * e, Box::new(|| drop(f.gu.glu_halves(ferrocm::Activation::Silu).unwrap())), Box::new(|| drop(candle_nn::ops::swiglu(&c.gu).unwrap()))),
    ];
    for (name, bytes, fe, ce) in cases.iter().filter(|c| c.0.contains(filter) || "llm".contains(filter)) {
        let tc = median_ms(reps, &**ce);
        let tf = median_ms(reps, &**fe);
        let gbs = *bytes as f64 / tf / 1e6;
        println!("{:<26} {tc:>10.2} {tf:>10.2} {:>6.2}x {gbs:>9.1} {:>7.0}%", format!("{name} {dt}"), tc / tf, 100.0 * gbs / memcpy);
    }
}

/// Attention on both sides, GQA 32:8, d 128: a decode step over 4096
/// cached keys and a causal prefill of 512 tokens. candle has no fused
/// attention on the CPU; its side is what candle-transformers' Llama runs:
/// `repeat_kv` (concatenated copies), `q kᵀ · scale`, the causal mask
/// added (prefill), `softmax_last_dim`, `· v`, in f32. Bytes: decode's K and V
/// once (q and the output are 0.2% of them); none for the prefill.
fn attention_cases(reps: usize, filter: &str, memcpy: f64) {
    if !"attention".contains(filter) && !filter.contains("attention") {
        return;
    }
    let (dev, cdev) = (Device::Cpu, CDevice::Cpu);
    let (h, h_kv, d, cache, s) = (32usize, 8usize, 128usize, 4096usize, 512usize);
    let scale = 1.0 / (d as f64).sqrt();
    let r = |shape: &[usize], seed| Tensor::<f32>::randn(shape, 0.0, 1.0, seed, &dev).unwrap();
    let c = |t: &Tensor<f32>, dt: CDType| {
        CTensor::from_vec(t.to_vec().unwrap(), t.shape(), &cdev).unwrap().to_dtype(dt).unwrap()
    };
    let repeat_kv = |x: &CTensor| {
        let (b, hk, sk, dk) = x.dims4().unwrap();
        CTensor::cat(&vec![x; h / h_kv], 2).unwrap().reshape((b, hk * (h / h_kv), sk, dk)).unwrap()
    };
    // (candle's CPU matmul takes no bf16: bf16 goes through f32 and back,
    // as candle-transformers' Llama does for its attention.)
    let candle_sdpa = |q: &CTensor, k: &CTensor, v: &CTensor, mask: Option<&CTensor>| {
        let dt = q.dtype();
        let f = |x: &CTensor| x.to_dtype(CDType::F32).unwrap();
        let (q, k, v) = (f(q), repeat_kv(&f(k)), repeat_kv(&f(v)));
        let att = (q.matmul(&k.t().unwrap()).unwrap() * scale).unwrap();
        let att = match mask {
            Some(m) => att.broadcast_add(m).unwrap(),
            None => att,
        };
        let out = candle_nn::ops::softmax_last_dim(&att).unwrap().matmul(&v).unwrap();
        out.to_dtype(dt).unwrap()
    };
    // The causal mask of the prefill: 0 on and below the diagonal, -inf above.
    let mask: Vec<f32> = (0..s * s)
        .map(|i| if i % s > i / s { f32::NEG_INFINITY } else { 0.0 })
        .collect();
    let (dq, dk, dv) = (r(&[1, h, 1, d], 20), r(&[1, h_kv, cache, d], 21), r(&[1, h_kv, cache, d], 22));
    let (pq, pk, pv) = (r(&[1, h, s, d], 23), r(&[1, h_kv, s, d], 24), r(&[1, h_kv, s, d], 25));
    println!("\n{:<26} {:>10} {:>10} {:>7} {:>9} {:>8}", "attention", "candle ms", "ferrocm ms", "ratio", "GB/s", "% memcpy");
    for (dt, cdt, e) in [("f32", CDType::F32, 4usize), ("bf16", CDType::BF16, 2)] {
        let cmask = CTensor::from_vec(mask.clone(), (s, s), &cdev).unwrap();
        let (cdq, cdk, cdv) = (c(&dq, cdt), c(&dk, cdt), c(&dv, cdt));
        let (cpq, cpk, cpv) = (c(&pq, cdt), c(&pk, cdt), c(&pv, cdt));
        macro_rules! side {
            ($ty:ty) => {{
                let t = |x: &Tensor<f32>| x.to_dtype::<$ty>().unwrap();
                let (fdq, fdk, fdv) = (t(&dq), t(&dk), t(&dv));
                let (fpq, fpk, fpv) = (t(&pq), t(&pk), t(&pv));
                let o = ferrocm::AttentionOptions::<$ty>::new().causal();
                let td = median_ms(reps, &|| drop(fdq.attention(&fdk, &fdv, &o).unwrap()));
                let tp = median_ms(reps, &|| drop(fpq.attention(&fpk, &fpv, &o).unwrap()));
                (td, tp)
            }};
        }
        let (td, tp) = if dt == "f32" { side!(f32) } else { side!(bf16) };
        let cd = median_ms(reps, &|| drop(candle_sdpa(&cdq, &cdk, &cdv, None)));
        let cp = median_ms(reps, &|| drop(candle_sdpa(&cpq, &cpk, &cpv, Some(&cmask))));
        let gbs = (2 * h_kv * cache * d * e) as f64 / td / 1e6;
        println!("{:<26} {cd:>10.2} {td:>10.2} {:>6.2}x {gbs:>9.1} {:>7.0}%", format!("decode 4096 keys {dt}"), cd / td, 100.0 * gbs / memcpy);
        println!("{:<26} {cp:>10.2} {tp:>10.2} {:>6.2}x {:>9} {:>8}", format!("prefill 512 causal {dt}"), cp / tp, "-", "-");
    }
}

/// Issue 33's Cpu targets: the quantized matrix-vector product on a
/// 4096 x 14336 weight (llama.cpp's test-backend-ops shape) with 1 and 8
/// rows of f32 activations, on the same blocks on both sides (candle's
/// quantizer makes them, ferrocm reads its bytes). Bytes: the weight's.
/// candle's CPU dot products use AVX only when built with it
/// (`#[cfg(target_feature = "avx")]`): run this with `RUSTFLAGS="-C
/// target-cpu=native"` to give candle its SIMD paths (ferrocm picks AVX2
/// at run time either way).
fn quant_cases(reps: usize, filter: &str, memcpy: f64) {
    use candle_core::Module;
    use candle_core::quantized::{GgmlDType, QMatMul, QTensor as CQTensor};
    use ferrocm::ops::{QTensor, QuantFormat};
    if !"quant".contains(filter) && !filter.contains("quant") {
        return;
    }
    let (dev, cdev) = (Device::Cpu, CDevice::Cpu);
    let (n, k) = (4096usize, 14336usize);
    println!("\n{:<26} {:>10} {:>10} {:>7} {:>9} {:>8}", "quant (4096x14336)", "candle ms", "ferrocm ms", "ratio", "GB/s", "% memcpy");
    let w = Tensor::<f32>::randn(&[n, k], 0.0, 0.02, 30, &dev).unwrap();
    let cw = CTensor::from_vec(w.to_vec().unwrap(), (n, k), &cdev).unwrap();
    for (cf, f) in [
        (GgmlDType::Q4_0, QuantFormat::Q4_0),
        (GgmlDType::Q8_0, QuantFormat::Q8_0),
        (GgmlDType::Q4K, QuantFormat::Q4K),
        (GgmlDType::Q5K, QuantFormat::Q5K),
        (GgmlDType::Q6K, QuantFormat::Q6K),
    ] {
        let cq = CQTensor::quantize(&cw, cf).unwrap();
        let bytes = cq.data().unwrap().to_vec();
        let fq = QTensor::from_bytes(&bytes, f, &[n, k], &dev).unwrap();
        let cmm = QMatMul::from_qtensor(cq).unwrap();
        for m in [1usize, 8] {
            let x = Tensor::<f32>::randn(&[m, k], 0.0, 1.0, 31, &dev).unwrap();
            let cx = CTensor::from_vec(x.to_vec().unwrap(), (m, k), &cdev).unwrap();
            let tc = median_ms(reps, &|| drop(cmm.forward(&cx).unwrap()));
            let tf = median_ms(reps, &|| drop(fq.forward(&x).unwrap()));
            let gbs = bytes.len() as f64 / tf / 1e6;
            println!("{:<26} {tc:>10.2} {tf:>10.2} {:>6.2}x {gbs:>9.1} {:>7.0}%", format!("qmatmul {f} x{m}"), tc / tf, 100.0 * gbs / memcpy);
        }
    }
}

/// Issue 31's conv2d shapes (f32, padding keeping the size, bias): candle's
/// CPU conv2d against ferrocm's Cpu path (im2col + GEMM, or direct loops for
/// the depthwise one).
fn conv_cases(reps: usize, filter: &str) {
    use ferrocm::ops::conv::ConvOptions;
    if !"conv".contains(filter) && !filter.contains("conv") {
        return;
    }
    let (dev, cdev) = (Device::Cpu, CDevice::Cpu);
    println!("\n{:<34} {:>10} {:>10} {:>7} {:>9}", "conv2d f32", "candle ms", "ferrocm ms", "ratio", "GFLOP/s");
    for (name, n, cin, cout, size, k, stride, groups) in [
        ("3x3 64->64 (1, 64, 56, 56)", 1, 64, 64, 56, 3, 1, 1),
        ("stem 7x7/2 3->64 (1, 3, 224, 224)", 1, 3, 64, 224, 7, 2, 1),
        ("3x3 256->256 (32, 256, 14, 14)", 32, 256, 256, 14, 3, 1, 1),
        ("depthwise 3x3 (8, 512, 28, 28)", 8, 512, 512, 28, 3, 1, 512),
        ("sd 3x3 320->320 (2, 320, 64, 64)", 2, 320, 320, 64, 3, 1, 1),
    ] {
        let x = Tensor::<f32>::randn(&[n, cin, size, size], 0.0, 1.0, 40, &dev).unwrap();
        let w = Tensor::<f32>::randn(&[cout, cin / groups, k, k], 0.0, 0.1, 41, &dev).unwrap();
        let b = Tensor::<f32>::randn(&[cout], 0.0, 0.1, 42, &dev).unwrap();
        let cx = CTensor::from_vec(x.to_vec().unwrap(), (n, cin, size, size), &cdev).unwrap();
        let cw = CTensor::from_vec(w.to_vec().unwrap(), (cout, cin / groups, k, k), &cdev).unwrap();
        let cb = CTensor::from_vec(b.to_vec().unwrap(), (1, cout, 1, 1), &cdev).unwrap();
        let o = ConvOptions::new().stride(&[stride]).padding(&[k / 2]).groups(groups);
        let out = (size + 2 * (k / 2) - k) / stride + 1;
        let flops = (2 * n * cout * out * out * (cin / groups) * k * k) as f64;
        let tc = median_ms(reps, &|| {
            drop(cx.conv2d(&cw, k / 2, stride, 1, groups).unwrap().broadcast_add(&cb).unwrap())
        });
        let tf = median_ms(reps, &|| drop(x.conv2d(&w, Some(&b), &o).unwrap()));
        println!("{:<34} {tc:>10.2} {tf:>10.2} {:>6.2}x {:>9.1}", name, tc / tf, flops / tf / 1e6);
    }
}

fn rayon_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn geomean(r: &[f64]) -> f64 {
    (r.iter().map(|r| r.ln()).sum::<f64>() / r.len().max(1) as f64).exp()
}
