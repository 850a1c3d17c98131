//! Reductions and softmax on 4096 x 4096 inputs: one criterion group per
//! family, each op on the Cpu and on every GPU that answers, side by side
//! (`target/criterion/<family>/report/index.html`). Throughput is bytes read
//! per second.

use criterion::{criterion_group, criterion_main};
use ferrocm::ops::Tensor;
use ferrocm::{Device, bf16};

#[path = "common.rs"]
mod common;

const N: usize = 4096;

struct Inputs {
    dev: Device,
    x: Tensor<f32>,
    xb: Tensor<bf16>,
}

impl common::OnDevice for Inputs {
    fn device(&self) -> &Device {
        &self.dev
    }
}

fn reduce(c: &mut criterion::Criterion) {
    let inputs: Vec<Inputs> = common::devices()
        .into_iter()
        .map(|dev| Inputs {
            x: Tensor::randn(&[N, N], 0.0, 1.0, 1, &dev).unwrap(),
            xb: Tensor::randn(&[N, N], 0.0, 1.0, 1, &dev).unwrap(),
            dev,
        })
        .collect();
    let (f, h) = (N * N * 4, N * N * 2);
    let families: [common::Family<Inputs>; 2] = [
        (
            "reduce",
            vec![
                ("sum_last_dim_f32", f, |i| {
                    drop(i.x.sum(&[1], false).unwrap())
                }),
                ("sum_first_dim_f32", f, |i| {
                    drop(i.x.sum(&[0], false).unwrap())
                }),
                ("sum_last_dim_bf16", h, |i| {
                    drop(i.xb.sum(&[1], false).unwrap())
                }),
                ("max_last_dim_f32", f, |i| {
                    drop(i.x.max(&[1], false).unwrap())
                }),
                ("argmax_last_dim_f32", f, |i| {
                    drop(i.x.argmax(&[1], false).unwrap())
                }),
            ],
        ),
        (
            "softmax",
            vec![
                ("softmax_f32", 2 * f, |i| drop(i.x.softmax().unwrap())),
                ("log_softmax_f32", 2 * f, |i| {
                    drop(i.x.log_softmax().unwrap())
                }),
                ("softmax_bf16", 2 * h, |i| drop(i.xb.softmax().unwrap())),
            ],
        ),
    ];
    common::run_families(c, &inputs, families.into());
}

criterion_group! { name = benches; config = common::criterion(); targets = reduce }
criterion_main!(benches);
