//! Indexing and sorting at the sizes of an LLM worker: the embedding lookup
//! of 4096 ids in a 32000 x 4096 bf16 table, argsort of 4096 x 32000 f32
//! (rows of a vocabulary), top-50 of 32 x 128000 f32 (sampling) beside a
//! full sort of the same rows; on the Cpu and every GPU that answers.
//! Criterion reports elements per second: table elements copied
//! for the embedding, input elements for the sorts. `ferrocm bench` reports
//! the same ops in GB/s (bytes read and written) and as a share of copy
//! bandwidth.

use criterion::{criterion_group, criterion_main};
use ferrocm::ops::Tensor;
use ferrocm::{Device, bf16};

#[path = "common.rs"]
mod common;

struct Inputs {
    dev: Device,
    table: Tensor<bf16>,
    ids: Tensor<u32>,
    logits: Tensor<f32>,
    vocab: Tensor<f32>,
}

impl common::OnDevice for Inputs {
    fn device(&self) -> &Device {
        &self.dev
    }
}

const VOCAB: usize = 32000;
const HIDDEN: usize = 4096;
const IDS: usize = 4096;

fn indexing(c: &mut criterion::Criterion) {
    let inputs: Vec<Inputs> = common::devices()
        .into_iter()
        .map(|dev| Inputs {
            table: Tensor::randn(&[VOCAB, HIDDEN], 0.0, 1.0, 1, &dev).unwrap(),
            ids: Tensor::rand(&[IDS], 0.0, VOCAB as f64, 2, &dev).unwrap(),
            logits: Tensor::randn(&[4096, VOCAB], 0.0, 1.0, 3, &dev).unwrap(),
            vocab: Tensor::randn(&[32, 128_000], 0.0, 1.0, 4, &dev).unwrap(),
            dev,
        })
        .collect();
    let families: [common::Family<Inputs>; 2] = [
        (
            "indexing",
            vec![("embedding_4096_of_32000x4096_bf16", IDS * HIDDEN, |i| {
                drop(i.table.embedding(&i.ids).unwrap())
            })],
        ),
        (
            "sort",
            vec![
                ("argsort_4096x32000_f32", 4096 * VOCAB, |i| {
                    drop(i.logits.argsort(true).unwrap())
                }),
                ("topk50_32x128000_f32", 32 * 128_000, |i| {
                    drop(i.vocab.topk(50, true).unwrap())
                }),
                ("sort_32x128000_f32", 32 * 128_000, |i| {
                    drop(i.vocab.sort(true).unwrap())
                }),
            ],
        ),
    ];
    common::run_families_as(c, &inputs, families.into(), |n| {
        criterion::Throughput::Elements(n as u64)
    });
}

criterion_group! { name = benches; config = common::criterion(); targets = indexing }
criterion_main!(benches);
