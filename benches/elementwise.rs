//! Elementwise op families on a 4096 x 4096 input: Cpu and, when present, the
//! ROCm GPU. Throughput is bytes read + written per second.

use criterion::{Throughput, criterion_group, criterion_main};
use ferrocm::ops::{Tensor, Unary};
use ferrocm::{Device, f16};

#[path = "common.rs"]
mod common;

const N: usize = 4096;

fn elementwise(c: &mut criterion::Criterion) {
    for dev in common::devices() {
        let x = Tensor::<f32>::randn(&[N, N], 0.0, 1.0, 1, &dev).unwrap();
        let y = Tensor::<f32>::randn(&[N, N], 0.0, 1.0, 2, &dev).unwrap();
        let mask = Tensor::<u8>::rand(&[N, N], 0.0, 2.0, 3, &dev).unwrap();
        let bytes = (N * N * 4) as u64;
        let mut g = c.benchmark_group(format!("elementwise/{dev}"));
        let sync = |d: &Device| d.synchronize().unwrap();
        g.throughput(Throughput::Bytes(2 * bytes));
        g.bench_function("unary_exp_f32", |b| {
            b.iter(|| {
                x.exp().unwrap();
                sync(&dev)
            })
        });
        g.bench_function("unary_gelu_f32", |b| {
            b.iter(|| {
                x.unary(Unary::Gelu, 0.0).unwrap();
                sync(&dev)
            })
        });
        g.bench_function("affine_f32", |b| {
            b.iter(|| {
                x.affine(2.0, 1.0).unwrap();
                sync(&dev)
            })
        });
        g.bench_function("copy_transposed_f32", |b| {
            b.iter(|| {
                x.transpose(0, 1).unwrap().contiguous().unwrap();
                sync(&dev)
            })
        });
        g.throughput(Throughput::Bytes(bytes + bytes / 2));
        g.bench_function("cast_f32_f16", |b| {
            b.iter(|| {
                x.to_dtype::<f16>().unwrap();
                sync(&dev)
            })
        });
        g.throughput(Throughput::Bytes(3 * bytes));
        g.bench_function("binary_add_f32", |b| {
            b.iter(|| {
                x.add(&y).unwrap();
                sync(&dev)
            })
        });
        g.bench_function("cmp_lt_f32", |b| {
            b.iter(|| {
                x.lt(&y).unwrap();
                sync(&dev)
            })
        });
        g.throughput(Throughput::Bytes(3 * bytes + bytes / 4));
        g.bench_function("where_u8_f32", |b| {
            b.iter(|| {
                mask.where_cond(&x, &y).unwrap();
                sync(&dev)
            })
        });
        g.finish();
    }
}

criterion_group! { name = benches; config = common::criterion(); targets = elementwise }
criterion_main!(benches);
