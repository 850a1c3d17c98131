//! Llama-family models end to end on random weights: the Cpu's logits at
//! every position against the f64 forward pass in `reference`, the
//! emulator (wave 32 and 64, sanitizer on) against the Cpu, the KV cache
//! against a whole-prompt forward, and bad input.

mod reference;

use ferrocm_models::synthetic::SyntheticModel;
use ferrocm_models::{
    Arch, Error, Generation, Llama, LoadOptions, Logits, SamplingOptions, StepGraphs,
};
use ferrocm_ops::quant::gguf::Gguf;
use ferrocm_ops::{DType, Device, QuantFormat, Tensor, WaveSize, WithDType};

const PROMPT: [u32; 16] = [
    1, 17, 300, 42, 42, 7, 383, 0, 99, 250, 3, 128, 64, 5, 201, 11,
];

fn file(m: &SyntheticModel) -> Gguf {
    Gguf::from_bytes(m.to_gguf().unwrap().to_bytes().unwrap()).unwrap()
}

/// `m` (f32) rewritten as llama-quantize's Q4_K_M: attn_v and ffn_down in
/// Q6_K beside Q4_K q/k/gate/up, so q/k/v cannot share one matrix.
fn q4_k_m(m: &SyntheticModel) -> Gguf {
    use ferrocm_ops::quant::requantize::{QuantMix, quantize_gguf};
    let w = quantize_gguf(&file(m), QuantMix::Q4KM, |_, _| {}).unwrap();
    let g = Gguf::from_bytes(w.to_bytes().unwrap()).unwrap();
    // Block 1 (the last eighth) gets the bits; block 0 stays uniform, so both paths run.
    let v = g.tensor_info("blk.1.attn_v.weight").unwrap().ggml_type;
    assert_ne!(
        v,
        g.tensor_info("blk.1.attn_q.weight").unwrap().ggml_type,
        "a mixed file"
    );
    g
}

/// Whether the Cpu's quantized products round a prompt's rows to 8 bits
/// (the integer products of a CPU with AVX-512 VNNI), as they round one
/// decode row everywhere.
fn cpu_rounds_the_prompt() -> bool {
    let w = Tensor::from_slice(&[0.5f32; 64], &[2, 32], &Device::Cpu).unwrap();
    ferrocm_ops::QTensor::quantize(&w, QuantFormat::Q8_0)
        .unwrap()
        .rounds_x_to_8_bits(PROMPT.len())
}

fn rows<T: WithDType>(t: &Tensor<T>) -> Vec<Vec<f64>> {
    let v: Vec<f64> = t.to_vec().unwrap().iter().map(|v| v.to_f64()).collect();
    v.chunks(*t.shape().last().unwrap())
        .map(|r| r.to_vec())
        .collect()
}

/// The largest `|got - want|` over every logit, and the largest `|want|`.
fn worst(got: &[Vec<f64>], want: &[Vec<f64>]) -> (f64, f64) {
    assert_eq!(got.len(), want.len());
    let mut err: f64 = 0.0;
    let mut scale: f64 = 0.0;
    for (g, w) in got.iter().zip(want) {
        assert_eq!(g.len(), w.len());
        for (a, b) in g.iter().zip(w) {
            assert!(a.is_finite(), "logit {a}");
            err = err.max((a - b).abs());
            scale = scale.max(b.abs());
        }
    }
    (err, scale)
}

/// Every architecture, tied or not, in the formats models ship.
fn models() -> Vec<SyntheticModel> {
    let mut v = Vec::new();
    for arch in Arch::ALL {
        v.push(SyntheticModel::new(arch));
        v.push(SyntheticModel {
            tied: true,
            dense: DType::F16,
            seed: 2,
            ..SyntheticModel::new(arch)
        });
    }
    for format in [
        QuantFormat::Q4_0,
        QuantFormat::Q8_0,
        QuantFormat::Q4K,
        QuantFormat::Q6K,
    ] {
        v.push(SyntheticModel {
            format: Some(format),
            seed: 3,
            ..SyntheticModel::new(Arch::Llama)
        });
    }
    v.push(SyntheticModel {
        format: Some(QuantFormat::Q5K),
        ..SyntheticModel::new(Arch::Qwen3)
    });
    // Gemma 2's caps and window and Gemma 3's two rotations through the
    // quantized decode path.
    v.push(SyntheticModel {
        format: Some(QuantFormat::Q8_0),
        seed: 4,
        ..SyntheticModel::new(Arch::Gemma2)
    });
    v.push(SyntheticModel {
        format: Some(QuantFormat::Q4K),
        seed: 5,
        ..SyntheticModel::new(Arch::Gemma3)
    });
    v
}

fn label(m: &SyntheticModel) -> String {
    format!(
        "{} {:?} {:?} tied={}",
        m.arch.name(),
        m.format,
        m.dense,
        m.tied
    )
}

/// The files of [`models`], labelled and whether quantized, and two
/// Q4_K_M mixes (llama; qwen2 with its biases), whose q/k/v stay separate
/// matrices where the uniform files' are stacked into one.
fn cases() -> Vec<(String, Gguf, bool)> {
    let mut v: Vec<_> = models()
        .iter()
        .map(|m| (label(m), file(m), m.format.is_some()))
        .collect();
    for arch in [Arch::Llama, Arch::Qwen2] {
        let g = q4_k_m(&SyntheticModel::new(arch));
        v.push((format!("{} Q4_K_M", arch.name()), g, true));
    }
    v
}

/// (a) The Cpu's f32 logits at all 16 positions of one prompt forward
/// against the f64 reference on the same (dequantized) weights. A prompt of
/// 16 rows takes the dense products (weights dequantized exactly), so the
/// only error is f32 arithmetic: sums of up to 512 products, softmax and
/// norms, about 1e-7 relative at each step (measured: at most 7e-7 of the
/// largest logit); 1e-5 of the largest logit bounds that with room. Where
/// the Cpu's quantized products round the prompt to 8 bits
/// ([`cpu_rounds_the_prompt`]), quantized models are held to the rounded
/// reference as decode is (2%, see
/// `cpu_decode_through_the_cache_matches_the_reference`).
#[test]
fn cpu_prefill_logits_match_the_f64_reference() {
    let rounds = cpu_rounds_the_prompt();
    for (name, g, quantized) in cases() {
        let rounded = quantized && rounds;
        let want = if rounded {
            reference::forward_rounded(&g, &PROMPT)
        } else {
            reference::forward(&g, &PROMPT)
        };
        let model = Llama::<f32>::load(&g, &Device::Cpu, &LoadOptions::default()).unwrap();
        let mut cache = model.new_cache(64).unwrap();
        let got = rows(&model.forward(&PROMPT, &mut cache, Logits::All).unwrap());
        let (err, scale) = worst(&got, &want);
        eprintln!(
            "{}: prefill max error {err:.3e} of logits up to {scale:.3}",
            name
        );
        let bound = if rounded { 2e-2 } else { 1e-5 };
        assert!(
            err <= bound * scale,
            "{}: error {err} against logits up to {scale}",
            name
        );
    }
}

/// Decode, one token per forward through the cache, against the f64
/// reference whose quantized products round their input to 8 bits per
/// group of 16 as the products are defined to (`reference::forward_rounded`;
/// that rounding alone moves these models' logits by 0.9 to 2.1% of the
/// largest). Dense weights: as the prompt path (1e-5). Quantized weights:
/// where f32 and f64 put no element on different sides of a rounding
/// boundary the logits agree to about 1e-6 of the largest (measured: Q8_0,
/// Q6_K and Gemma 3's Q4_K); where one element flips, its product moves by
/// a step of the 8-bit grid and the flips multiply through the blocks
/// (measured up to 0.64% of the largest, and which models flip moves
/// with the products' summation order); 2% bounds that. A cache that
/// mixed up positions or heads would be off by the logits' own size.
#[test]
fn cpu_decode_through_the_cache_matches_the_reference() {
    for (name, g, quantized) in cases() {
        let want = reference::forward_rounded(&g, &PROMPT);
        let model = Llama::<f32>::load(&g, &Device::Cpu, &LoadOptions::default()).unwrap();
        let mut cache = model.new_cache(PROMPT.len()).unwrap();
        let mut got = Vec::new();
        for &t in &PROMPT {
            got.extend(rows(
                &model.forward(&[t], &mut cache, Logits::Last).unwrap(),
            ));
        }
        let (err, scale) = worst(&got, &want);
        eprintln!(
            "{}: decode max error {err:.3e} of logits up to {scale:.3}",
            name
        );
        let bound = if quantized { 2e-2 } else { 1e-5 };
        assert!(
            err <= bound * scale,
            "{}: error {err} against logits up to {scale}",
            name
        );
        // The cache is full: one more position is an error, and leaves it as it was.
        let e = model.forward(&[1], &mut cache, Logits::Last).unwrap_err();
        assert!(
            matches!(
                e,
                Error::ContextOverflow {
                    needed: 17,
                    context: 16
                }
            ),
            "{e}"
        );
        assert_eq!(cache.len(), 16);
    }
}

/// The emulator at wave 32 and 64, and every GPU that answers (reported
/// and skipped when none does).
fn devices() -> Vec<Device> {
    let mut v = vec![
        Device::emulator(WaveSize::Wave32),
        Device::emulator(WaveSize::Wave64),
    ];
    for (name, dev) in [("cuda:0", Device::cuda(0)), ("rocm:0", Device::rocm(0))] {
        match dev {
            Ok(d) => v.push(d),
            Err(e) => eprintln!("skipping {name}: {e}"),
        }
    }
    v
}

/// (b) The emulator (wave 32 and 64) and any GPU against the Cpu: the same
/// greedy tokens for 16 generated after the prompt, and the prompt's
/// logits within 1e-4 of the largest (both f32; only summation order
/// differs). Where the Cpu rounds a quantized model's prompt to 8 bits
/// and the other devices do not ([`cpu_rounds_the_prompt`]), their
/// prompt logits are held to the f64 reference instead, as (a) holds the
/// dense prompt (1e-5); the tokens still agree on these models (the
/// rounding moves the logits by about 1%, no greedy pick is that close).
#[test]
fn devices_generate_the_cpus_tokens() {
    let rounds = cpu_rounds_the_prompt();
    for m in [
        SyntheticModel::new(Arch::Llama),
        SyntheticModel {
            format: Some(QuantFormat::Q4K),
            ..SyntheticModel::new(Arch::Qwen3)
        },
        SyntheticModel {
            format: Some(QuantFormat::Q8_0),
            tied: true,
            ..SyntheticModel::new(Arch::Qwen2)
        },
        SyntheticModel {
            format: Some(QuantFormat::Q4_0),
            ..SyntheticModel::new(Arch::Gemma2)
        },
        SyntheticModel::new(Arch::Gemma3),
    ] {
        let g = file(&m);
        let cpu = Llama::<f32>::load(&g, &Device::Cpu, &LoadOptions::default()).unwrap();
        let mut gen_cpu = Generation::with_capacity(&cpu, SamplingOptions::greedy(), 64).unwrap();
        let want = gen_cpu.generate(&PROMPT, 16, |_| true).unwrap();
        let (want_logits, bound) = if rounds && m.format.is_some() {
            (reference::forward(&g, &PROMPT), 1e-5)
        } else {
            let cpu_logits = cpu.forward(&PROMPT, &mut cpu.new_cache(16).unwrap(), Logits::All);
            (rows(&cpu_logits.unwrap()), 1e-4)
        };
        for dev in devices() {
            let wave = &dev;
            let emu = Llama::<f32>::load(&g, &dev, &LoadOptions::default()).unwrap();
            let mut gen_emu =
                Generation::with_capacity(&emu, SamplingOptions::greedy(), 64).unwrap();
            let got = gen_emu.generate(&PROMPT, 16, |_| true).unwrap();
            assert_eq!(got, want, "{} on {wave}", label(&m));
            let logits = rows(
                &emu.forward(&PROMPT, &mut emu.new_cache(16).unwrap(), Logits::All)
                    .unwrap(),
            );
            let (err, scale) = worst(&logits, &want_logits);
            assert!(
                err <= bound * scale,
                "{} on {wave}: {err} of {scale}",
                label(&m)
            );
        }
    }
}

/// Decode steps recorded and launched as graphs, one per block (a GPU's;
/// the host devices run them as queued), give the plain steps' logits bit
/// for bit at each position, the kept graphs updated from step to step; a
/// generation with graphs gives the tokens of one without, every decode
/// step recorded; graphs of another model are refused.
#[test]
fn decode_graphs_match_the_plain_steps() {
    // Five blocks: graphs of 3 leave a shorter last one.
    let m = SyntheticModel {
        format: Some(QuantFormat::Q8_0),
        layers: 5,
        ..SyntheticModel::new(Arch::Qwen3)
    };
    let g = file(&m);
    for dev in devices() {
        let model = Llama::<f32>::load(&g, &dev, &LoadOptions::default()).unwrap();
        for per in [1, 3, 64] {
            let mut graph = StepGraphs::with_blocks_per_graph(&model, per);
            assert_eq!(graph.len(), model.config().layers.div_ceil(per));
            let mut plain = model.new_cache(32).unwrap();
            let mut recorded = model.new_cache(32).unwrap();
            model.forward(&PROMPT, &mut plain, Logits::Last).unwrap();
            model.forward(&PROMPT, &mut recorded, Logits::Last).unwrap();
            let bits = |t: Tensor<f32>| -> Vec<u32> {
                t.to_vec().unwrap().iter().map(|v| v.to_bits()).collect()
            };
            for (step, &token) in [5u32, 250, 77].iter().enumerate() {
                let want = bits(model.forward(&[token], &mut plain, Logits::Last).unwrap());
                let got = model
                    .forward_graph(&[token], &mut recorded, Logits::Last, &mut graph)
                    .unwrap();
                assert_eq!(bits(got), want, "{dev}: {per} blocks a graph, step {step}");
                assert_eq!(recorded.len(), plain.len(), "{dev}");
            }
            let (s, n) = (graph.stats(), graph.len() as u64);
            match graph.records() {
                true => assert_eq!((s.launched, s.updated), (3 * n, 2 * n), "{dev}"),
                false => assert_eq!(s.launched, 0, "{dev}"),
            }
        }
        let mut recorded = model.new_cache(32).unwrap();
        let other = file(&SyntheticModel {
            layers: m.layers + 1,
            ..m.clone()
        });
        let other = Llama::<f32>::load(&other, &dev, &LoadOptions::default()).unwrap();
        let e = model
            .forward_graph(
                &[1],
                &mut recorded,
                Logits::Last,
                &mut StepGraphs::new(&other),
            )
            .unwrap_err();
        assert!(matches!(e, Error::BadRequest { .. }), "{e}");
        let mut on = Generation::with_capacity(&model, SamplingOptions::greedy(), 64).unwrap();
        let mut off = Generation::with_capacity(&model, SamplingOptions::greedy(), 64).unwrap();
        on.record_graphs(3);
        off.record_graphs(0);
        assert_eq!(on.records_graphs(), dev.is_gpu(), "{dev}");
        assert!(!off.records_graphs());
        let want = off.generate(&PROMPT, 8, |_| true).unwrap();
        assert_eq!(on.generate(&PROMPT, 8, |_| true).unwrap(), want, "{dev}");
        let graphs = if dev.is_gpu() { 7 } else { 0 };
        assert_eq!(
            on.stats().decode_graphs,
            graphs,
            "{dev}: {:?}",
            on.stats().graphs_off
        );
        assert_eq!(off.stats().decode_graphs, 0);
    }
}

fn load_err(g: &Gguf) -> Error {
    Llama::<f32>::load(g, &Device::Cpu, &LoadOptions::default()).unwrap_err()
}

/// Rewrites the tiny llama's file with `edit` applied to its writer.
fn edited(edit: impl FnOnce(&mut ferrocm_ops::quant::gguf::GgufWriter)) -> Gguf {
    let mut w = SyntheticModel::new(Arch::Llama).to_gguf().unwrap();
    edit(&mut w);
    Gguf::from_bytes(w.to_bytes().unwrap()).unwrap()
}

#[test]
fn bad_files_are_typed_errors() {
    use ferrocm_ops::quant::gguf::GgufValue;
    // An architecture this crate does not build.
    let g = edited(|w| {
        w.metadata("general.architecture", GgufValue::String("gpt2".into()));
    });
    assert!(matches!(load_err(&g), Error::UnsupportedArchitecture(a) if a == "gpt2"));
    // A missing key, a key of the wrong type, heads that do not divide.
    let g = Gguf::from_bytes({
        let mut w = ferrocm_ops::quant::gguf::GgufWriter::new();
        w.metadata("general.architecture", GgufValue::String("llama".into()));
        w.to_bytes().unwrap()
    })
    .unwrap();
    assert!(
        matches!(load_err(&g), Error::MissingMetadata { key } if key == "llama.embedding_length")
    );
    let g = edited(|w| {
        w.metadata("llama.block_count", GgufValue::String("two".into()));
    });
    let e = load_err(&g);
    assert!(
        matches!(&e, Error::BadMetadata { key, .. } if key == "llama.block_count"),
        "{e}"
    );
    let g = edited(|w| {
        w.metadata("llama.attention.head_count_kv", GgufValue::U32(3));
    });
    let e = load_err(&g);
    assert!(
        e.to_string().contains("head_count_kv") && e.to_string().contains('3'),
        "{e}"
    );
    // A head dim the attention kernels do not have.
    let g = edited(|w| {
        w.metadata("llama.attention.key_length", GgufValue::U32(32));
    });
    assert!(matches!(load_err(&g), Error::Unsupported { .. }));
    // A block count past the tensors the file has.
    let g = edited(|w| {
        w.metadata("llama.block_count", GgufValue::U32(3));
    });
    assert!(matches!(load_err(&g), Error::MissingTensor { name } if name == "blk.2.attn_q.weight"));
    // A feed-forward size the tensors do not have.
    let g = edited(|w| {
        w.metadata("llama.feed_forward_length", GgufValue::U32(768));
    });
    let e = load_err(&g);
    assert!(
        matches!(&e, Error::TensorShape { name, found, expected }
            if name == "blk.0.ffn_gate.weight" && found == &[512, 256] && expected == &[768, 256]),
        "{e}"
    );
}

/// A Gemma's own metadata read as llama.cpp reads it: the 27B query scale
/// by block count, the defaults of Gemma 2's caps and window, a flag per
/// block for the window; bad values as typed errors.
#[test]
fn gemma_metadata() {
    use ferrocm_models::{Config, RopeScaling};
    use ferrocm_ops::quant::gguf::GgufValue;
    let gemma = |arch: Arch, edit: &dyn Fn(&mut ferrocm_ops::quant::gguf::GgufWriter)| {
        let mut w = SyntheticModel::new(arch).to_gguf().unwrap();
        edit(&mut w);
        Config::from_gguf(&Gguf::from_bytes(w.to_bytes().unwrap()).unwrap())
    };
    let c = gemma(Arch::Gemma3, &|_| {}).unwrap();
    assert_eq!(c.swa_layers, [true, false]);
    assert_eq!((c.sliding_window, c.attn_scale), (Some(5), None));
    assert_eq!((c.rope_base, c.rope_base_swa), (1e6, 1e4));
    assert_eq!(
        (c.rope_scaling, c.rope_scaling_swa),
        (RopeScaling::Linear(8.0), RopeScaling::None)
    );
    assert_eq!((c.attn_softcap, c.final_softcap), (None, None));
    // 62 blocks is Gemma 3 27B: q scaled by 1 / sqrt(hidden / heads) = 1/8.
    let c = gemma(Arch::Gemma3, &|w| {
        w.metadata("gemma3.block_count", GgufValue::U32(62))
            .metadata("gemma3.attention.head_count", GgufValue::U32(4))
            .metadata("gemma3.attention.sliding_window_pattern", GgufValue::U32(6));
    })
    .unwrap();
    assert_eq!(c.attn_scale, Some(0.125));
    // Global blocks l % 6 == 5: 5, 11, .., 59.
    assert_eq!(c.swa_layers.iter().filter(|&&s| !s).count(), 10);
    assert!(!c.is_swa(5) && c.is_swa(60) && c.is_swa(61) && !c.is_swa(59));
    // Gemma 2 without its keys: caps 50 and 30, a window of 4096 on even blocks.
    let c = gemma(Arch::Gemma2, &|w| {
        for key in [
            "attn_logit_softcapping",
            "final_logit_softcapping",
            "attention.sliding_window",
        ] {
            w.metadata(&format!("gemma2.{key}"), GgufValue::F32(0.0));
        }
        w.metadata("gemma2.attention.sliding_window", GgufValue::U32(4096));
    })
    .unwrap();
    assert_eq!((c.attn_softcap, c.final_softcap), (None, None)); // 0 is none
    assert_eq!(
        (c.sliding_window, c.swa_layers.clone()),
        (Some(4096), vec![true, false])
    );
    // One flag a block.
    let flags = |n: usize| GgufValue::Array {
        item_type: 7,
        items: (0..n).map(|i| GgufValue::Bool(i == 1)).collect(),
    };
    let c = gemma(Arch::Gemma3, &|w| {
        w.metadata("gemma3.attention.sliding_window_pattern", flags(2));
    })
    .unwrap();
    assert_eq!(c.swa_layers, [false, true]);
    // Wrong flag count, a negative cap, a window of 0.
    let e = gemma(Arch::Gemma3, &|w| {
        w.metadata("gemma3.attention.sliding_window_pattern", flags(3));
    })
    .unwrap_err();
    assert!(
        matches!(&e, Error::BadMetadata { key, .. } if key == "gemma3.attention.sliding_window_pattern"),
        "{e}"
    );
    let e = gemma(Arch::Gemma2, &|w| {
        w.metadata("gemma2.attn_logit_softcapping", GgufValue::F32(-1.0));
    })
    .unwrap_err();
    assert!(
        matches!(&e, Error::BadMetadata { key, .. } if key == "gemma2.attn_logit_softcapping"),
        "{e}"
    );
    let e = gemma(Arch::Gemma2, &|w| {
        w.metadata("gemma2.attention.sliding_window", GgufValue::U32(0));
    })
    .unwrap_err();
    assert!(
        matches!(&e, Error::BadMetadata { key, .. } if key == "gemma2.attention.sliding_window"),
        "{e}"
    );
    // A Gemma 2 file without its post-norms is a missing tensor.
    let g = file(&SyntheticModel::new(Arch::Gemma2));
    let mut stripped = ferrocm_ops::quant::gguf::GgufWriter::new();
    for (k, v) in g.metadata() {
        stripped.metadata(k, v.clone());
    }
    for t in g.tensors() {
        if t.name != "blk.1.post_ffw_norm.weight" {
            stripped
                .raw(
                    &t.name,
                    &t.shape,
                    t.ggml_type,
                    g.tensor_bytes(&t.name).unwrap().to_vec(),
                )
                .unwrap();
        }
    }
    let g = Gguf::from_bytes(stripped.to_bytes().unwrap()).unwrap();
    assert!(
        matches!(load_err(&g), Error::MissingTensor { name } if name == "blk.1.post_ffw_norm.weight")
    );
}

#[test]
fn bad_requests_are_typed_errors() {
    let g = file(&SyntheticModel::new(Arch::Llama));
    let model = Llama::<f32>::load(&g, &Device::Cpu, &LoadOptions { context: Some(32) }).unwrap();
    assert!(matches!(
        model.new_cache(33),
        Err(Error::ContextOverflow {
            needed: 33,
            context: 32
        })
    ));
    // A context past the model's own (512) is refused at load.
    let long = Llama::<f32>::load(&g, &Device::Cpu, &LoadOptions { context: Some(513) });
    assert!(matches!(
        long,
        Err(Error::ContextOverflow {
            needed: 513,
            context: 512
        })
    ));
    let mut cache = model.new_cache(8).unwrap();
    assert!(matches!(
        model.forward(&[], &mut cache, Logits::Last),
        Err(Error::BadRequest { .. })
    ));
    assert!(matches!(
        model.forward(&[1, 384], &mut cache, Logits::Last),
        Err(Error::BadToken {
            id: 384,
            vocab: 384
        })
    ));
    assert!(matches!(
        model.forward(&[1; 9], &mut cache, Logits::Last),
        Err(Error::ContextOverflow {
            needed: 9,
            context: 8
        })
    ));
    assert!(
        cache.is_empty(),
        "a refused forward leaves the cache as it was"
    );
    // Generation checks the whole request before running anything.
    let mut g = Generation::with_capacity(&model, SamplingOptions::greedy(), 8).unwrap();
    let e = g.generate(&[1, 2, 3], 7, |_| true).unwrap_err();
    assert!(
        matches!(
            e,
            Error::ContextOverflow {
                needed: 9,
                context: 8
            }
        ),
        "{e}"
    );
    assert!(g.tokens().is_empty() && g.cache().is_empty());
    assert!(matches!(
        g.generate(&[], 1, |_| true),
        Err(Error::BadRequest { .. })
    ));
    // Exactly full: 3 prompt tokens and 6 generated use 8 positions (the last is never run).
    assert_eq!(g.generate(&[1, 2, 3], 6, |_| true).unwrap().len(), 6);
    assert_eq!(g.cache().len(), 8);
    // A prompt with an id past the vocabulary is refused and leaves the
    // sequence as it was: the next request runs as on a fresh one.
    g.reset();
    let fresh = g.generate(&[1, 2], 3, |_| true).unwrap();
    g.reset();
    assert!(matches!(
        g.generate(&[1, 384], 3, |_| true),
        Err(Error::BadToken { id: 384, .. })
    ));
    assert!(g.tokens().is_empty() && g.cache().is_empty());
    assert_eq!(g.generate(&[1, 2], 3, |_| true).unwrap(), fresh);
    let bad = SamplingOptions {
        top_p: 0.0,
        ..Default::default()
    };
    assert!(matches!(
        Generation::new(&model, bad),
        Err(Error::BadRequest { .. })
    ));
    assert!(Llama::<u32>::load(&g_file(), &Device::Cpu, &LoadOptions::default()).is_err());
}

fn g_file() -> Gguf {
    file(&SyntheticModel::new(Arch::Llama))
}

/// Generation continues a sequence across calls exactly as one call would,
/// stops at a stop token without returning it, and stops when the callback
/// says so.
#[test]
fn generation_continues_and_stops() {
    let g = file(&SyntheticModel::new(Arch::Qwen2));
    let model = Llama::<f32>::load(&g, &Device::Cpu, &LoadOptions::default()).unwrap();
    let mut one = Generation::with_capacity(&model, SamplingOptions::greedy(), 64).unwrap();
    let all = one.generate(&PROMPT, 12, |_| true).unwrap();
    let mut two = Generation::with_capacity(&model, SamplingOptions::greedy(), 64).unwrap();
    let mut parts = two.generate(&PROMPT, 5, |_| true).unwrap();
    parts.extend(two.generate(&[], 7, |_| true).unwrap());
    assert_eq!(parts, all);
    let mut stopped = Generation::with_capacity(&model, SamplingOptions::greedy(), 64).unwrap();
    stopped.stop_at(&[all[4]]);
    let first = all.iter().position(|&t| t == all[4]).unwrap();
    assert_eq!(
        stopped.generate(&PROMPT, 12, |_| true).unwrap(),
        all[..first]
    );
    // A warm-up leaves nothing behind: the same tokens after it.
    let mut warmed = Generation::with_capacity(&model, SamplingOptions::greedy(), 64).unwrap();
    warmed.warm_up(PROMPT.len()).unwrap();
    assert!(warmed.tokens().is_empty() && warmed.cache().is_empty());
    assert_eq!(warmed.generate(&PROMPT, 12, |_| true).unwrap(), all);
    assert!(matches!(warmed.warm_up(4), Err(Error::BadRequest { .. })));
    let mut small = Generation::with_capacity(&model, SamplingOptions::greedy(), 8).unwrap();
    assert!(matches!(
        small.warm_up(8),
        Err(Error::ContextOverflow {
            needed: 9,
            context: 8
        })
    ));
    let mut n = 0;
    let mut cut = Generation::with_capacity(&model, SamplingOptions::greedy(), 64).unwrap();
    assert_eq!(
        cut.generate(&PROMPT, 12, |_| {
            n += 1;
            n < 3
        })
        .unwrap(),
        all[..3]
    );
}

/// Pipelined decode (each step queued from the last one's token on the
/// device, before the host reads it) gives the plain loop's tokens, stats
/// and cache in every way a generation ends: the token limit, a stop token
/// (the step queued after it dropped from the cache), the callback, a
/// banned token, continued calls; on the Cpu, the emulator and any GPU.
#[test]
fn pipelined_decode_matches_the_plain_loop() {
    let g = file(&SyntheticModel::new(Arch::Qwen2));
    let mut devs = vec![Device::Cpu];
    devs.extend(
        devices()
            .into_iter()
            .filter(|d| !matches!(d, Device::Emulator(c) if c.wave_size == WaveSize::Wave64)),
    );
    for dev in devs {
        let model = Llama::<f32>::load(&g, &dev, &LoadOptions::default()).unwrap();
        let new = |pipelined: bool, opts: SamplingOptions| {
            let mut g = Generation::with_capacity(&model, opts, 64).unwrap();
            g.pipeline(pipelined);
            assert_eq!(g.pipelines(), pipelined, "{dev}");
            g
        };
        let greedy = SamplingOptions::greedy;
        // Each case: a generation's calls (prompt, limit), a stop token, a
        // callback limit.
        let all = new(false, greedy())
            .generate(&PROMPT, 12, |_| true)
            .unwrap();
        type Case<'a> = (&'a [(&'a [u32], usize)], Option<u32>, usize);
        let cases: [Case; 6] = [
            (&[(&PROMPT, 12)], None, usize::MAX),
            (&[(&PROMPT, 1), (&[], 2), (&[9, 4], 5)], None, usize::MAX),
            (&[(&PROMPT, 12), (&[7, 8], 6)], Some(all[4]), usize::MAX),
            (&[(&PROMPT, 12), (&[], 4)], None, 3),
            (&[(&PROMPT, 2), (&[], 12)], Some(all[7]), usize::MAX),
            (&[(&PROMPT, 12), (&[], 5)], Some(all[0]), usize::MAX),
        ];
        for (i, (calls, stop, cut)) in cases.into_iter().enumerate() {
            let mut runs = Vec::new();
            for pipelined in [false, true] {
                let mut g = new(pipelined, greedy());
                if let Some(t) = stop {
                    g.stop_at(&[t]);
                }
                let mut seen = Vec::new();
                for (c, &(prompt, limit)) in calls.iter().enumerate() {
                    let mut n = 0;
                    let out = g
                        .generate(prompt, limit, |_| {
                            n += 1;
                            n < cut
                        })
                        .unwrap();
                    let s = g.stats();
                    let steps = s.decode_tokens;
                    if c == 0 {
                        assert_eq!(s.pipelined, pipelined, "{dev} case {i}");
                    }
                    seen.push((out, steps, g.cache().len(), g.tokens().to_vec()));
                }
                runs.push(seen);
            }
            assert_eq!(runs[1], runs[0], "{dev} case {i}: pipelined against plain");
        }
        // A banned token (the first the plain loop picks) is never chosen.
        let banned = || SamplingOptions {
            banned: vec![all[0], all[2]],
            ..greedy()
        };
        let want = new(false, banned())
            .generate(&PROMPT, 10, |_| true)
            .unwrap();
        assert!(!want.contains(&all[0]) && !want.contains(&all[2]), "{dev}");
        assert_eq!(
            new(true, banned()).generate(&PROMPT, 10, |_| true).unwrap(),
            want,
            "{dev}"
        );
        // A sampler that needs the host never pipelines.
        let mut drawn = new(false, SamplingOptions::default());
        drawn.pipeline(true);
        assert!(!drawn.pipelines());
    }
}

/// A rewound cache (`truncate`) runs a different continuation exactly as a
/// cache that never saw the first one: the positions past the new length
/// are overwritten, not read.
#[test]
fn a_truncated_cache_continues_as_a_fresh_one() {
    let g = g_file();
    let model = Llama::<f32>::load(&g, &Device::Cpu, &LoadOptions::default()).unwrap();
    let mut cache = model.new_cache(32).unwrap();
    model.forward(&PROMPT, &mut cache, Logits::Last).unwrap();
    model.forward(&[7, 8, 9], &mut cache, Logits::Last).unwrap();
    cache.truncate(PROMPT.len()).unwrap();
    assert_eq!(cache.len(), PROMPT.len());
    let rewound = model
        .forward(&[11, 12], &mut cache, Logits::All)
        .unwrap()
        .to_vec()
        .unwrap();
    let mut fresh = model.new_cache(32).unwrap();
    model.forward(&PROMPT, &mut fresh, Logits::Last).unwrap();
    let want = model
        .forward(&[11, 12], &mut fresh, Logits::All)
        .unwrap()
        .to_vec()
        .unwrap();
    assert_eq!(rewound, want);
    assert!(matches!(
        cache.truncate(cache.len() + 1),
        Err(Error::BadRequest {
            op: "KvCache::truncate",
            ..
        })
    ));
}
