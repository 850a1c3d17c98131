//! The per-token ops of a transformer layer at Llama sizes: RMSNorm (and its
//! fused residual add) and LayerNorm over 4096 x 4096, RoPE on q of
//! (1, 32, 2048, 128), SwiGLU over 4096 x 14336; f32 and bf16, on the Cpu
//! and on every GPU that answers, side by side. Throughput is the bytes the
//! op must move (inputs read once, outputs written once).

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
    let families: [common::Family<Inputs>; 3] = [
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
    ];
    common::run_families(c, &inputs, families.into());
}

criterion_group! { name = benches; config = common::criterion(); targets = llm }
criterion_main!(benches);
