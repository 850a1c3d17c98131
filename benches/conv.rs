//! Convolution at issue 31's shapes (f32, padding keeping the size, bias):
//! conv2d (1, 64, 56, 56) 3x3 64->64, the ResNet stem (1, 3, 224, 224) 7x7
//! stride 2 -> 64, (32, 256, 14, 14) 3x3 256->256, a depthwise 3x3 on (8,
//! 512, 28, 28) and a Stable-Diffusion (2, 320, 64, 64) 3x3 320->320; on the
//! Cpu and every GPU that answers (the emulator is timed by `ferrocm bench
//! --device emulator --only conv` at small sizes). Throughput counts
//! floating-point operations as elements (criterion's elements/s is
//! FLOP/s; `ferrocm bench --only conv` prints TFLOP/s).
//!
//! `FERROCM_BENCH_BIG=0` leaves out the two largest (the (32, 256, 14, 14)
//! and Stable-Diffusion shapes: about 0.15 and 0.25 s each on the Cpu of a
//! 2-core machine).

use criterion::{criterion_group, criterion_main};
use ferrocm::Device;
use ferrocm::ops::Tensor;
use ferrocm::ops::conv::ConvOptions;

#[path = "common.rs"]
mod common;

/// One shape on one device: input, weight, bias and options.
struct Case {
    dev: Device,
    x: Tensor<f32>,
    w: Tensor<f32>,
    b: Tensor<f32>,
    o: ConvOptions,
}

impl common::OnDevice for Case {
    fn device(&self) -> &Device {
        &self.dev
    }
}

fn conv(c: &mut criterion::Criterion) {
    let big = std::env::var("FERROCM_BENCH_BIG").map_or(true, |v| v != "0");
    // (name, batch, cin, cout, size, kernel, stride, groups)
    let mut shapes = vec![
        ("conv2d_3x3_64x56x56_f32", 1, 64, 64, 56, 3, 1, 1),
        ("conv2d_stem_7x7s2_3x224x224_f32", 1, 3, 64, 224, 7, 2, 1),
        (
            "conv2d_depthwise_3x3_8x512x28x28_f32",
            8,
            512,
            512,
            28,
            3,
            1,
            512,
        ),
    ];
    if big {
        shapes.push(("conv2d_3x3_32x256x14x14_f32", 32, 256, 256, 14, 3, 1, 1));
        shapes.push(("conv2d_3x3_2x320x64x64_f32", 2, 320, 320, 64, 3, 1, 1));
    }
    for (name, n, cin, cout, size, k, stride, groups) in shapes {
        let out = (size + 2 * (k / 2) - k) / stride + 1;
        let flops = 2 * n * cout * out * out * (cin / groups) * k * k;
        let cases: Vec<Case> = common::devices()
            .into_iter()
            .map(|dev| {
                let r =
                    |s: &[usize], sd, seed| Tensor::<f32>::randn(s, 0.0, sd, seed, &dev).unwrap();
                Case {
                    x: r(&[n, cin, size, size], 1.0, 1),
                    w: r(&[cout, cin / groups, k, k], 0.1, 2),
                    b: r(&[cout], 0.1, 3),
                    o: ConvOptions::new()
                        .stride(&[stride])
                        .padding(&[k / 2])
                        .groups(groups),
                    dev,
                }
            })
            .collect();
        let family: common::Family<Case> = (
            "conv",
            vec![(name, flops, |i: &Case| {
                drop(i.x.conv2d(&i.w, Some(&i.b), &i.o).unwrap())
            })],
        );
        common::run_families_as(c, &cases, vec![family], |n| {
            criterion::Throughput::Elements(n as u64)
        });
    }
}

criterion_group! { name = benches; config = common::criterion(); targets = conv }
criterion_main!(benches);
