//! A Llama-family forward pass written here in f64 from the architectures'
//! definitions (llama.cpp's `llm_build_llama` / `llm_build_qwen2` /
//! `llm_build_qwen3` / `gemma`, `gemma2`, `gemma3`, Hugging Face's modeling
//! files), sharing nothing with
//! the crate but the GGUF reader and the dequantizer (both checked against
//! independent references in the workspace's own tests).
//!
//! [`forward`] multiplies by the weights exactly; [`forward_rounded`] first
//! rounds the input of every product by a quantized weight to 8 bits per
//! group of 16 (`d = amax / 127`, codes `round(v / d)`), the activation
//! format the quantized matrix-vector products are defined to take.

use ferrocm_models::Arch;
use ferrocm_ops::quant::gguf::Gguf;
use ferrocm_ops::{DType, Device, Format};

/// A tensor of the file as f64 (quantized ones dequantized).
pub fn values(g: &Gguf, name: &str) -> Vec<f64> {
    weight(g, name).values
}

/// A matrix of the file, and whether the file stores it in blocks.
#[derive(Clone)]
struct Weight {
    values: Vec<f64>,
    quantized: bool,
}

fn weight(g: &Gguf, name: &str) -> Weight {
    let t = g.tensor(name, &Device::Cpu).unwrap();
    let (t, quantized) = match t.format() {
        Format::Blocks(_) => (t.dequantize(DType::F32).unwrap(), true),
        _ => (t, false),
    };
    Weight {
        values: t.to_f64_vec().unwrap(),
        quantized,
    }
}

/// `x` rounded to 8 bits per group of 16: each value becomes
/// `round(v / d) * d` with `d` the group's largest magnitude over 127 (an
/// all-zero group stays zero).
fn round_to_8_bits(x: &[f64]) -> Vec<f64> {
    assert_eq!(x.len() % 16, 0, "groups of 16");
    x.chunks(16)
        .flat_map(|g| {
            let d = g.iter().fold(0.0f64, |m, v| m.max(v.abs())) / 127.0;
            g.iter()
                .map(move |v| if d > 0.0 { (v / d).round() * d } else { 0.0 })
        })
        .collect()
}

fn meta(g: &Gguf, key: &str) -> Option<f64> {
    g.get(key)
        .and_then(|v| v.as_f64().or(v.as_i128().map(|n| n as f64)))
}

/// `y = W x (+ b)` with `W` `[rows, x.len()]` row-major; `x` rounded to 8
/// bits first when `round` and `W` is quantized.
fn linear(w: &Weight, x: &[f64], b: Option<&[f64]>, round: bool) -> Vec<f64> {
    let rounded;
    let x = if round && w.quantized {
        rounded = round_to_8_bits(x);
        &rounded[..]
    } else {
        x
    };
    let w = &w.values;
    let n = x.len();
    (0..w.len() / n)
        .map(|r| {
            let dot: f64 = w[r * n..][..n].iter().zip(x).map(|(a, b)| a * b).sum();
            dot + b.map_or(0.0, |b| b[r])
        })
        .collect()
}

fn rms_norm(x: &[f64], w: &[f64], eps: f64) -> Vec<f64> {
    let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    let r = 1.0 / (ms + eps).sqrt();
    x.iter().zip(w).map(|(v, w)| v * r * w).collect()
}

/// Rotates one head at position `p`: pairs `(2i, 2i+1)` when `interleaved`,
/// else `(i, i + d/2)`; pair `i` turns by `p · scale · base^(-2i/d)`.
fn rope(x: &mut [f64], p: usize, base: f64, scale: f64, interleaved: bool) {
    let d = x.len();
    for i in 0..d / 2 {
        let a = p as f64 * scale * base.powf(-2.0 * i as f64 / d as f64);
        let (j0, j1) = if interleaved {
            (2 * i, 2 * i + 1)
        } else {
            (i, i + d / 2)
        };
        let (x0, x1) = (x[j0], x[j1]);
        x[j0] = x0 * a.cos() - x1 * a.sin();
        x[j1] = x0 * a.sin() + x1 * a.cos();
    }
}

/// The logits `[tokens.len()][vocab]` of every position of `tokens`.
pub fn forward(g: &Gguf, tokens: &[u32]) -> Vec<Vec<f64>> {
    run(g, tokens, false)
}

/// As [`forward`], with each quantized weight's input rounded to 8 bits per
/// group of 16 first.
pub fn forward_rounded(g: &Gguf, tokens: &[u32]) -> Vec<Vec<f64>> {
    run(g, tokens, true)
}

fn run(g: &Gguf, tokens: &[u32], round: bool) -> Vec<Vec<f64>> {
    let arch = Arch::from_name(g.get("general.architecture").unwrap().as_str().unwrap()).unwrap();
    let a = arch.name();
    let m = |k: &str| meta(g, &format!("{a}.{k}")).unwrap();
    let (hidden, layers) = (m("embedding_length") as usize, m("block_count") as usize);
    let (heads, kv_heads) = (
        m("attention.head_count") as usize,
        m("attention.head_count_kv") as usize,
    );
    let d = m("attention.key_length") as usize;
    let eps = m("attention.layer_norm_rms_epsilon");
    let base = m("rope.freq_base");
    let opt = |k: &str| meta(g, &format!("{a}.{k}"));
    let gemma = a.starts_with("gemma");
    // Linear rope scaling divides positions (global blocks only in Gemma 3).
    let pos_scale = match g
        .get(&format!("{a}.rope.scaling.type"))
        .and_then(|v| v.as_str())
    {
        Some("linear") => 1.0 / opt("rope.scaling.factor").unwrap(),
        _ => 1.0,
    };
    // Gemma 2: caps default 50 and 30, window 4096 on blocks l % 2 == 0;
    // Gemma 3: no caps, a window only where the file gives one, on blocks
    // l % n < n - 1 (n default 6), their base 10000 and unscaled.
    let (attn_cap, final_cap) = match a {
        "gemma2" => (
            Some(opt("attn_logit_softcapping").unwrap_or(50.0)),
            Some(opt("final_logit_softcapping").unwrap_or(30.0)),
        ),
        "gemma3" => (None, opt("final_logit_softcapping")),
        _ => (None, None),
    };
    let window = match a {
        "gemma2" => Some(opt("attention.sliding_window").unwrap_or(4096.0) as usize),
        "gemma3" => opt("attention.sliding_window").map(|w| w as usize),
        _ => None,
    };
    let pattern = opt("attention.sliding_window_pattern")
        .map_or(if a == "gemma2" { 2 } else { 6 }, |n| n as usize);
    let swa = |l: usize| window.is_some() && l % pattern < pattern - 1;
    let embed = weight(g, "token_embd.weight");
    // Gemma and Gemma 2 always project by the embedding table.
    let output = match g.tensor_info("output.weight") {
        Some(_) if a != "gemma" && a != "gemma2" => weight(g, "output.weight"),
        _ => embed.clone(),
    };
    let embed = embed.values;
    let n = tokens.len();
    let embed_scale = if gemma { (hidden as f64).sqrt() } else { 1.0 };
    let mut x: Vec<Vec<f64>> = tokens
        .iter()
        .map(|&t| {
            embed[t as usize * hidden..][..hidden]
                .iter()
                .map(|v| v * embed_scale)
                .collect()
        })
        .collect();
    for l in 0..layers {
        let w = |s: &str| values(g, &format!("blk.{l}.{s}"));
        let m = |s: &str| weight(g, &format!("blk.{l}.{s}"));
        let has = |s: &str| g.tensor_info(&format!("blk.{l}.{s}")).is_some();
        let (wq, wk, wv, wo) = (
            m("attn_q.weight"),
            m("attn_k.weight"),
            m("attn_v.weight"),
            m("attn_output.weight"),
        );
        let bias =
            has("attn_q.bias").then(|| [w("attn_q.bias"), w("attn_k.bias"), w("attn_v.bias")]);
        let qk_norm =
            has("attn_q_norm.weight").then(|| [w("attn_q_norm.weight"), w("attn_k_norm.weight")]);
        let attn_norm = w("attn_norm.weight");
        let post = has("post_attention_norm.weight")
            .then(|| [w("post_attention_norm.weight"), w("post_ffw_norm.weight")]);
        let (base_l, scale_l) = match (a, swa(l)) {
            ("gemma3", true) => (opt("rope.freq_base_swa").unwrap_or(10_000.0), 1.0),
            (_, true) => (opt("rope.freq_base_swa").unwrap_or(base), pos_scale),
            (_, false) => (base, pos_scale),
        };
        let (mut q, mut k, mut v) = (Vec::new(), Vec::new(), Vec::new());
        for (p, xp) in x.iter().enumerate() {
            let h = rms_norm(xp, &attn_norm, eps);
            let mut qp = linear(&wq, &h, bias.as_ref().map(|b| &b[0][..]), round);
            let mut kp = linear(&wk, &h, bias.as_ref().map(|b| &b[1][..]), round);
            let vp = linear(&wv, &h, bias.as_ref().map(|b| &b[2][..]), round);
            for (t, nh, which) in [(&mut qp, heads, 0), (&mut kp, kv_heads, 1)] {
                for head in 0..nh {
                    let s = &mut t[head * d..][..d];
                    if let Some(norms) = &qk_norm {
                        let y = rms_norm(s, &norms[which], eps);
                        s.copy_from_slice(&y);
                    }
                    rope(s, p, base_l, scale_l, arch == Arch::Llama);
                }
            }
            q.push(qp);
            k.push(kp);
            v.push(vp);
        }
        let (ffn_norm, gate, up, down) = (
            w("ffn_norm.weight"),
            m("ffn_gate.weight"),
            m("ffn_up.weight"),
            m("ffn_down.weight"),
        );
        for i in 0..n {
            let mut o = vec![0.0; heads * d];
            for hq in 0..heads {
                let hk = hq / (heads / kv_heads);
                let qi = &q[i][hq * d..][..d];
                // A sliding-window block's query i sees keys j > i - window.
                let first = match (swa(l), window) {
                    (true, Some(w)) => (i + 1).saturating_sub(w),
                    _ => 0,
                };
                let s: Vec<f64> = (0..=i)
                    .map(|j| {
                        let logit = qi
                            .iter()
                            .zip(&k[j][hk * d..][..d])
                            .map(|(a, b)| a * b)
                            .sum::<f64>()
                            / (d as f64).sqrt();
                        match attn_cap {
                            Some(c) => c * (logit / c).tanh(),
                            None => logit,
                        }
                    })
                    .collect();
                let max = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = s
                    .iter()
                    .enumerate()
                    .map(|(j, v)| if j < first { 0.0 } else { (v - max).exp() })
                    .collect();
                let sum: f64 = e.iter().sum();
                for (j, ej) in e.iter().enumerate() {
                    for c in 0..d {
                        o[hq * d + c] += ej / sum * v[j][hk * d + c];
                    }
                }
            }
            let mut attn = linear(&wo, &o, None, round);
            if let Some([pa, _]) = &post {
                attn = rms_norm(&attn, pa, eps);
            }
            for (xv, a) in x[i].iter_mut().zip(attn) {
                *xv += a;
            }
            let h = rms_norm(&x[i], &ffn_norm, eps);
            let (g_, u) = (linear(&gate, &h, None, round), linear(&up, &h, None, round));
            let act: Vec<f64> = g_
                .iter()
                .zip(&u)
                .map(|(&g, u)| {
                    let act = match gemma {
                        // GELU, tanh form.
                        true => {
                            0.5 * g
                                * (1.0
                                    + ((2.0 / std::f64::consts::PI).sqrt()
                                        * (g + 0.044715 * g * g * g))
                                        .tanh())
                        }
                        false => g / (1.0 + (-g).exp()),
                    };
                    act * u
                })
                .collect();
            let mut ffn = linear(&down, &act, None, round);
            if let Some([_, pf]) = &post {
                ffn = rms_norm(&ffn, pf, eps);
            }
            for (xv, f) in x[i].iter_mut().zip(ffn) {
                *xv += f;
            }
        }
    }
    let norm = values(g, "output_norm.weight");
    x.iter()
        .map(|xp| {
            let logits = linear(&output, &rms_norm(xp, &norm, eps), None, round);
            match final_cap {
                Some(c) => logits.iter().map(|v| c * (v / c).tanh()).collect(),
                None => logits,
            }
        })
        .collect()
}
