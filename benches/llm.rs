//! The per-token ops of a transformer layer at Llama sizes: RMSNorm (and its
//! fused residual add) and LayerNorm over 4096 x 4096, RoPE on q of
//! (1, 32, 2048, 128), SwiGLU over 4096 x 14336, attention (a decode step
//! of 32 query heads over 4096 cached keys of 8 KV heads, and a causal
//! prefill of 2048 tokens, d 128, bf16); f32 and bf16, on the Cpu and on
//! every GPU that answers, side by side. Throughput is the bytes the op
//! must move (inputs read once, outputs written once; the prefill's, though
//! it is bound by its 2 s² d h FLOPs: 34 GFLOP).

use criterion::{criterion_group, criterion_main};
use ferrocm::ops::Tensor;
use ferrocm::{Device, bf16};

#[path = "common.rs"]
mod common;

const N: usize = 4096;
const FFN: usize = 14336;
const HEADS: usize = 32;
const SEQ: usize = 2048;
const HEAD_DIM: usize = 128;
const KV_HEADS: usize = 8;
const CACHE: usize = 4096;

struct Inputs {
    dev: Device,
    x: Tensor<f32>,
    r: Tensor<f32>,
    w: Tensor<f32>,
    xb: Tensor<bf16>,
    rb: Tensor<bf16>,
    wb: Tensor<bf16>,
    q: Tensor<f32>,
    qb: Tensor<bf16>,
    cos: Tensor<f32>,
    sin: Tensor<f32>,
    cosb: Tensor<bf16>,
    sinb: Tensor<bf16>,
    gate: Tensor<bf16>,
    up: Tensor<bf16>,
    /// Decode: q (1, 32, 1, 128), k and v (1, 8, 4096, 128).
    decode: [Tensor<bf16>; 3],
    /// Prefill: q, k, v (1, 32, 2048, 128).
    prefill: [Tensor<bf16>; 3],
}

impl common::OnDevice for Inputs {
    fn device(&self) -> &Device {
        &self.dev
    }
}

fn inputs(dev: Device) -> Inputs {
    let f = |shape: &[usize], seed| Tensor::<f32>::randn(shape, 0.0, 1.0, seed, &dev).unwrap();
    let b = |t: &Tensor<f32>| t.to_dtype::<bf16>().unwrap();
    let (x, r, w) = (f(&[N, N], 1), f(&[N, N], 2), f(&[N], 3));
    let q = f(&[1, HEADS, SEQ, HEAD_DIM], 4);
    let angles = f(&[SEQ, HEAD_DIM / 2], 5);
    let (cos, sin) = (angles.cos().unwrap(), angles.sin().unwrap());
    Inputs {
        xb: b(&x),
        rb: b(&r),
        wb: b(&w),
        qb: b(&q),
        cosb: b(&cos),
        sinb: b(&sin),
        gate: b(&f(&[N, FFN], 6)),
        up: b(&f(&[N, FFN], 7)),
        decode: [
            b(&f(&[1, HEADS, 1, HEAD_DIM], 8)),
            b(&f(&[1, KV_HEADS, CACHE, HEAD_DIM], 9)),
            b(&f(&[1, KV_HEADS, CACHE, HEAD_DIM], 10)),
        ],
        prefill: [11, 12, 13].map(|seed| b(&f(&[1, HEADS, SEQ, HEAD_DIM], seed))),
        x,
        r,
        w,
        q,
        cos,
        sin,
        dev,
    }
}

fn llm(c: &mut criterion::Criterion) {
    let inputs: Vec<Inputs> = common::devices().into_iter().map(inputs).collect();
    let (n, q, t) = (N * N, HEADS * SEQ * HEAD_DIM, SEQ * HEAD_DIM / 2);
    let kv = 2 * KV_HEADS * CACHE * HEAD_DIM;
    let families: [common::Family<Inputs>; 4] = [
        (
            "norm",
            vec![
                ("rms_norm_f32", 8 * n, |i| {
                    drop(i.x.rms_norm(&i.w, 1e-5).unwrap())
                }),
                ("rms_norm_bf16", 4 * n, |i| {
                    drop(i.xb.rms_norm(&i.wb, 1e-5).unwrap())
                }),
                ("add_rms_norm_f32", 16 * n, |i| {
                    drop(i.x.add_rms_norm(&i.r, &i.w, 1e-5).unwrap())
                }),
                ("add_rms_norm_bf16", 8 * n, |i| {
                    drop(i.xb.add_rms_norm(&i.rb, &i.wb, 1e-5).unwrap())
                }),
                ("layer_norm_f32", 8 * n, |i| {
                    drop(i.x.layer_norm(&i.w, Some(&i.w), 1e-5).unwrap())
                }),
            ],
        ),
        (
            "rope",
            vec![
                ("rope_f32", 8 * q + 8 * t, |i| {
                    drop(i.q.rope(&i.cos, &i.sin, 0).unwrap())
                }),
                ("rope_bf16", 4 * q + 4 * t, |i| {
                    drop(i.qb.rope(&i.cosb, &i.sinb, 0).unwrap())
                }),
                ("rope_i_bf16", 4 * q + 4 * t, |i| {
                    drop(i.qb.rope_i(&i.cosb, &i.sinb, 0).unwrap())
                }),
            ],
        ),
        (
            "glu",
            vec![("swiglu_bf16", 6 * N * FFN, |i| {
                drop(i.gate.swiglu(&i.up).unwrap())
            })],
        ),
        (
            "attention",
            vec![
                ("decode_bf16", 2 * (kv + 2 * HEADS * HEAD_DIM), |i| {
                    let [q, k, v] = &i.decode;
                    let opts = ferrocm::AttentionOptions::new().causal();
                    drop(q.attention(k, v, &opts).unwrap())
                }),
                ("prefill_causal_bf16", 2 * 4 * q, |i| {
                    let [q, k, v] = &i.prefill;
                    let opts = ferrocm::AttentionOptions::new().causal();
                    drop(q.attention(k, v, &opts).unwrap())
                }),
            ],
        ),
    ];
    common::run_families(c, &inputs, families.into());
}

criterion_group! { name = benches; config = common::criterion(); targets = llm }
criterion_main!(benches);
