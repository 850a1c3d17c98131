//! Reductions and softmax on a 4096 x 4096 f32 input: Cpu and, when present,
//! the ROCm GPU. Throughput is bytes read per second.

use criterion::{Throughput, criterion_group, criterion_main};
use ferrocm::Device;
use ferrocm::ops::Tensor;

#[path = "common.rs"]
mod common;

const N: usize = 4096;

fn reduce(c: &mut criterion::Criterion) {
    for dev in common::devices() {
        let x = Tensor::<f32>::randn(&[N, N], 0.0, 1.0, 1, &dev).unwrap();
        let mut g = c.benchmark_group(format!("reduce/{dev}"));
        let sync = |d: &Device| d.synchronize().unwrap();
        g.throughput(Throughput::Bytes((N * N * 4) as u64));
        g.bench_function("sum_last_dim_f32", |b| {
            b.iter(|| {
                x.sum(&[1], false).unwrap();
                sync(&dev)
            })
        });
        g.bench_function("sum_first_dim_f32", |b| {
            b.iter(|| {
                x.sum(&[0], false).unwrap();
                sync(&dev)
            })
        });
        g.bench_function("max_last_dim_f32", |b| {
            b.iter(|| {
                x.max(&[1], false).unwrap();
                sync(&dev)
            })
        });
        g.bench_function("argmax_last_dim_f32", |b| {
            b.iter(|| {
                x.argmax(&[1], false).unwrap();
                sync(&dev)
            })
        });
        g.bench_function("softmax_f32", |b| {
            b.iter(|| {
                x.softmax().unwrap();
                sync(&dev)
            })
        });
        g.finish();
    }
}

criterion_group! { name = benches; config = common::criterion(); targets = reduce }
criterion_main!(benches);
