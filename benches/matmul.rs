//! Matrix products at the sizes of the issue: GEMM 1024^3 and 4096^3 (f32
//! and bf16), matvec 4096 x 4096 and 14336 x 4096 (the weight-bandwidth
//! bound of decode), and a linear layer with bias + silu over 512 tokens; on
//! the Cpu and every GPU that answers (the emulator is timed by `ferrocm
//! bench --device emulator` at small sizes: these would take hours there).
//! Throughput is bytes: the weight's for the matrix-vector products (their
//! floor is the copy bandwidth), all operands once for the GEMMs, whose
//! TFLOP/s is 2mnk / time (criterion prints bytes/s; `ferrocm bench` prints
//! TFLOP/s).
//!
//! `FERROCM_BENCH_BIG=0` leaves out the 4096^3 GEMMs (2.3 s each on the
//! Cpu of a 2-core machine).

use criterion::{criterion_group, criterion_main};
use ferrocm::ops::Tensor;
use ferrocm::{Activation, Device, bf16};

#[path = "common.rs"]
mod common;

struct Inputs {
    dev: Device,
    a1k: Tensor<f32>,
    a4k: Tensor<f32>,
    b4k: Tensor<bf16>,
    w4k: Tensor<f32>,
    v4k: Tensor<f32>,
    w14k: Tensor<bf16>,
    x1: Tensor<bf16>,
    tokens: Tensor<bf16>,
    bias: Tensor<bf16>,
}

impl common::OnDevice for Inputs {
    fn device(&self) -> &Device {
        &self.dev
    }
}

fn matmul(c: &mut criterion::Criterion) {
    let big = std::env::var("FERROCM_BENCH_BIG").map_or(true, |v| v != "0");
    let inputs: Vec<Inputs> = common::devices()
        .into_iter()
        .map(|dev| {
            let r = |s: &[usize], seed| Tensor::<f32>::randn(s, 0.0, 1.0, seed, &dev).unwrap();
            let h = |s: &[usize], seed| r(s, seed).to_dtype::<bf16>().unwrap();
            Inputs {
                a1k: r(&[1024, 1024], 1),
                a4k: r(&[4096, 4096], 2),
                b4k: h(&[4096, 4096], 3),
                w4k: r(&[4096, 4096], 4),
                v4k: r(&[4096], 5),
                w14k: h(&[14336, 4096], 6),
                x1: h(&[1, 4096], 7),
                tokens: h(&[512, 4096], 8),
                bias: h(&[4096], 9),
                dev,
            }
        })
        .collect();
    let mut gemm: common::Family<Inputs> = (
        "gemm",
        vec![("gemm_1024^3_f32", 3 * 1024 * 1024 * 4, |i| {
            drop(i.a1k.matmul(&i.a1k).unwrap())
        })],
    );
    if big {
        gemm.1.push(("gemm_4096^3_f32", 3 * 4096 * 4096 * 4, |i| {
            drop(i.a4k.matmul(&i.a4k).unwrap())
        }));
        gemm.1.push(("gemm_4096^3_bf16", 3 * 4096 * 4096 * 2, |i| {
            drop(i.b4k.matmul(&i.b4k).unwrap())
        }));
    }
    let families: [common::Family<Inputs>; 3] = [
        gemm,
        (
            "matvec",
            vec![
                ("matvec_4096x4096_f32", 4096 * 4096 * 4, |i| {
                    drop(i.w4k.matvec(&i.v4k).unwrap())
                }),
                ("gemv_14336x4096_bf16", 14336 * 4096 * 2, |i| {
                    drop(i.x1.linear(&i.w14k, None, None).unwrap())
                }),
            ],
        ),
        (
            "linear",
            vec![(
                "linear_bias_silu_512x4096x4096_bf16",
                (512 * 4096 * 2 + 4096 * 4096) * 2,
                |i| {
                    drop(
                        i.tokens
                            .linear(&i.b4k, Some(&i.bias), Some(Activation::Silu))
                            .unwrap(),
                    )
                },
            )],
        ),
    ];
    common::run_families(c, &inputs, families.into());
}

criterion_group! { name = benches; config = common::criterion(); targets = matmul }
criterion_main!(benches);
