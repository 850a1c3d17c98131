//! Elementwise op families on 4096 x 4096 inputs: one criterion group per
//! family, each op measured on the Cpu and on every GPU that answers, side by
//! side (`target/criterion/<family>/report/index.html` plots them together).
//! Throughput is bytes read + written per second.

use criterion::{criterion_group, criterion_main};
use ferrocm::ops::Tensor;
use ferrocm::{Device, bf16, f16};

#[path = "common.rs"]
mod common;

const N: usize = 4096;

/// One device's inputs.
struct Inputs {
    dev: Device,
    x: Tensor<f32>,
    y: Tensor<f32>,
    xb: Tensor<bf16>,
    yb: Tensor<bf16>,
    mask: Tensor<u8>,
}

impl common::OnDevice for Inputs {
    fn device(&self) -> &Device {
        &self.dev
    }
}

fn elementwise(c: &mut criterion::Criterion) {
    let inputs: Vec<Inputs> = common::devices()
        .into_iter()
        .map(|dev| Inputs {
            x: Tensor::randn(&[N, N], 0.0, 1.0, 1, &dev).unwrap(),
            y: Tensor::randn(&[N, N], 0.0, 1.0, 2, &dev).unwrap(),
            xb: Tensor::randn(&[N, N], 0.0, 1.0, 1, &dev).unwrap(),
            yb: Tensor::randn(&[N, N], 0.0, 1.0, 2, &dev).unwrap(),
            mask: Tensor::rand(&[N, N], 0.0, 2.0, 3, &dev).unwrap(),
            dev,
        })
        .collect();
    let f = N * N * 4;
    let h = N * N * 2;
    let families: [common::Family<Inputs>; 7] = [
        (
            "unary",
            vec![
                ("exp_f32", 2 * f, |i| drop(i.x.exp().unwrap())),
                ("gelu_f32", 2 * f, |i| drop(i.x.gelu().unwrap())),
                ("silu_f32", 2 * f, |i| drop(i.x.silu().unwrap())),
                ("exp_bf16", 2 * h, |i| drop(i.xb.exp().unwrap())),
            ],
        ),
        (
            "affine",
            vec![
                ("affine_f32", 2 * f, |i| drop(i.x.affine(2.0, 1.0).unwrap())),
                ("affine_bf16", 2 * h, |i| {
                    drop(i.xb.affine(2.0, 1.0).unwrap())
                }),
            ],
        ),
        (
            "cast",
            vec![
                ("f32_to_f16", f + h, |i| {
                    drop(i.x.to_dtype::<f16>().unwrap())
                }),
                ("bf16_to_f32", f + h, |i| {
                    drop(i.xb.to_dtype::<f32>().unwrap())
                }),
            ],
        ),
        (
            "binary",
            vec![
                ("add_f32", 3 * f, |i| drop(i.x.add(&i.y).unwrap())),
                ("mul_bf16", 3 * h, |i| drop(i.xb.mul(&i.yb).unwrap())),
                ("lt_f32", 2 * f + N * N, |i| drop(i.x.lt(&i.y).unwrap())),
            ],
        ),
        (
            "where",
            vec![("where_u8_f32", 3 * f + N * N, |i| {
                drop(i.mask.where_cond(&i.x, &i.y).unwrap())
            })],
        ),
        (
            "copy",
            vec![
                ("copy_f32", 2 * f, |i| drop(i.x.copy().unwrap())),
                ("transpose_f32", 2 * f, |i| {
                    drop(i.x.transpose(0, 1).unwrap().contiguous().unwrap())
                }),
            ],
        ),
        (
            "fill",
            vec![("zeros_f32", f, |i| {
                drop(Tensor::<f32>::zeros(&[N, N], &i.dev).unwrap())
            })],
        ),
    ];
    common::run_families(c, &inputs, families.into());
}

criterion_group! { name = benches; config = common::criterion(); targets = elementwise }
criterion_main!(benches);
