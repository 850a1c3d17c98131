//! Sampling against probabilities computed here: the draws' frequencies
//! match softmax(logits / T) over the candidates each filter leaves, a
//! seed repeats its sequence, and the device paths (argmax, top-k, the
//! penalty's gather/scatter) agree with the Cpu's.

use ferrocm_models::{Sampler, SamplingOptions};
use ferrocm_ops::{Device, Tensor, WaveSize};

const LOGITS: [f32; 6] = [1.0, 2.0, 0.5, 3.0, -1.0, 2.5];

fn freqs(opts: SamplingOptions, dev: &Device, draws: usize) -> Vec<f64> {
    let logits = Tensor::from_slice(&LOGITS, &[1, 6], dev).unwrap();
    let mut s = Sampler::new(opts).unwrap();
    let mut n = [0usize; 6];
    for _ in 0..draws {
        n[s.sample(&logits, &[]).unwrap() as usize] += 1;
    }
    n.iter().map(|&c| c as f64 / draws as f64).collect()
}

/// softmax of `LOGITS / t` over `keep` (others 0).
fn expected(t: f64, keep: &[usize]) -> Vec<f64> {
    let e: Vec<f64> = (0..6)
        .map(|i| {
            if keep.contains(&i) {
                (LOGITS[i] as f64 / t).exp()
            } else {
                0.0
            }
        })
        .collect();
    let s: f64 = e.iter().sum();
    e.iter().map(|v| v / s).collect()
}

/// 20000 draws: each frequency within 0.015 of its probability (over four
/// standard deviations, sqrt(0.25 / 20000) = 0.0035).
fn close(got: &[f64], want: &[f64]) {
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() < 0.015, "{got:?} against {want:?}");
    }
}

#[test]
fn draws_follow_the_filtered_softmax() {
    let plain = SamplingOptions {
        temperature: 1.0,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        ..Default::default()
    };
    close(
        &freqs(plain.clone(), &Device::Cpu, 20_000),
        &expected(1.0, &[0, 1, 2, 3, 4, 5]),
    );
    // Temperature 2 flattens.
    let hot = SamplingOptions {
        temperature: 2.0,
        ..plain.clone()
    };
    close(
        &freqs(hot, &Device::Cpu, 20_000),
        &expected(2.0, &[0, 1, 2, 3, 4, 5]),
    );
    // top-k 3 keeps 3, 5, 1.
    let k3 = SamplingOptions {
        top_k: 3,
        ..plain.clone()
    };
    let want = expected(1.0, &[1, 3, 5]);
    close(&freqs(k3.clone(), &Device::Cpu, 20_000), &want);
    close(
        &freqs(k3, &Device::emulator(WaveSize::Wave32), 20_000),
        &want,
    );
    // top-p 0.6: the sorted probabilities are 0.43, 0.26, 0.16, ...: 3 and 5 reach it.
    let p = SamplingOptions {
        top_p: 0.6,
        ..plain.clone()
    };
    close(&freqs(p, &Device::Cpu, 20_000), &expected(1.0, &[3, 5]));
    // min-p 0.3: p >= 0.3 * 0.43 = 0.13 keeps 3, 5, 1.
    let m = SamplingOptions {
        min_p: 0.3,
        ..plain
    };
    close(&freqs(m, &Device::Cpu, 20_000), &expected(1.0, &[1, 3, 5]));
}

#[test]
fn a_seed_repeats_its_draws_and_devices_agree() {
    let opts = SamplingOptions {
        seed: 7,
        ..Default::default()
    };
    let run = |dev: &Device| {
        let logits = Tensor::from_slice(&LOGITS, &[6], dev).unwrap();
        let mut s = Sampler::new(opts.clone()).unwrap();
        (0..50)
            .map(|_| s.sample(&logits, &[]).unwrap())
            .collect::<Vec<u32>>()
    };
    let cpu = run(&Device::Cpu);
    assert_eq!(cpu, run(&Device::Cpu));
    assert_eq!(cpu, run(&Device::emulator(WaveSize::Wave64)));
    let other = SamplingOptions {
        seed: 8,
        ..opts.clone()
    };
    let logits = Tensor::from_slice(&LOGITS, &[6], &Device::Cpu).unwrap();
    let mut s = Sampler::new(other).unwrap();
    let draws: Vec<u32> = (0..50).map(|_| s.sample(&logits, &[]).unwrap()).collect();
    assert_ne!(draws, cpu, "another seed, another sequence");
    // Greedy with the penalty: on every device, token 3 (3.0 / 2 = 1.5) falls behind 5 (2.5), then 5 too.
    for dev in [Device::Cpu, Device::emulator(WaveSize::Wave32)] {
        let logits = Tensor::from_slice(&LOGITS, &[1, 6], &dev).unwrap();
        let mut g = Sampler::new(SamplingOptions {
            repeat_penalty: 2.0,
            ..SamplingOptions::greedy()
        })
        .unwrap();
        assert_eq!(g.sample(&logits, &[]).unwrap(), 3);
        assert_eq!(g.sample(&logits, &[3]).unwrap(), 5);
        assert_eq!(g.sample(&logits, &[3, 5]).unwrap(), 1);
        // Negative logits are multiplied: -1 * 2 stays last.
        assert_eq!(g.sample(&logits, &[4]).unwrap(), 3);
    }
}

#[test]
fn bad_options_and_logits_are_typed_errors() {
    for bad in [
        SamplingOptions {
            temperature: -1.0,
            ..Default::default()
        },
        SamplingOptions {
            temperature: f32::NAN,
            ..Default::default()
        },
        SamplingOptions {
            top_p: 1.5,
            ..Default::default()
        },
        SamplingOptions {
            min_p: -0.1,
            ..Default::default()
        },
        SamplingOptions {
            repeat_penalty: 0.0,
            ..Default::default()
        },
    ] {
        assert!(Sampler::new(bad).is_err());
    }
    let two_rows = Tensor::from_slice(&[0.0f32; 4], &[2, 2], &Device::Cpu).unwrap();
    assert!(
        Sampler::new(SamplingOptions::greedy())
            .unwrap()
            .sample(&two_rows, &[])
            .is_err()
    );
    let nan = Tensor::from_slice(&[0.0f32, f32::NAN], &[2], &Device::Cpu).unwrap();
    assert!(
        Sampler::new(SamplingOptions::default())
            .unwrap()
            .sample(&nan, &[])
            .is_err()
    );
}

/// Banned tokens (llama.cpp's `--ignore-eos` on the end-of-generation
/// ids) are never drawn: greedy takes the best of the rest, a draw follows
/// the softmax over the rest, ids past the vocabulary are ignored; on the
/// Cpu and the emulator.
#[test]
fn banned_tokens_are_never_chosen() {
    for dev in [Device::Cpu, Device::emulator(WaveSize::Wave32)] {
        let logits = Tensor::from_slice(&LOGITS, &[1, 6], &dev).unwrap();
        let greedy = SamplingOptions {
            banned: vec![3, 99, 3],
            ..SamplingOptions::greedy()
        };
        assert_eq!(
            Sampler::new(greedy).unwrap().sample(&logits, &[]).unwrap(),
            5
        );
        let hot = SamplingOptions {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            banned: vec![3, 5],
            ..SamplingOptions::default()
        };
        close(&freqs(hot, &dev, 20_000), &expected(1.0, &[0, 1, 2, 4]));
    }
}
