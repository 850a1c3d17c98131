//! A Llama-family forward pass written here in f64 from the architectures'
//! definitions (llama.cpp's `llm_build_llama` / `llm_build_qwen2` /
//! `llm_build_qwen3`, Hugging Face's modeling files), sharing nothing with
//! the crate but the GGUF reader and the dequantizer (both checked against
//! independent references in the workspace's own tests).

use ferrocm_models::Arch;
use ferrocm_ops::quant::gguf::Gguf;
use ferrocm_ops::{DType, Device, Format};

/// A tensor of the file as f64 (quantized ones dequantized).
pub fn values(g: &Gguf, name: &str) -> Vec<f64> {
    let t = g.tensor(name, &Device::Cpu).unwrap();
    let t = match t.format() {
        Format::Blocks(_) => t.dequantize(DType::F32).unwrap(),
        _ => t,
    };
    t.to_f64_vec().unwrap()
}

fn meta(g: &Gguf, key: &str) -> Option<f64> {
    g.get(key)
        .and_then(|v| v.as_f64().or(v.as_i128().map(|n| n as f64)))
}

/// `y = W x (+ b)` with `W` `[rows, x.len()]` row-major.
fn linear(w: &[f64], x: &[f64], b: Option<&[f64]>) -> Vec<f64> {
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
/// else `(i, i + d/2)`; pair `i` turns by `p · base^(-2i/d)`.
fn rope(x: &mut [f64], p: usize, base: f64, interleaved: bool) {
    let d = x.len();
    for i in 0..d / 2 {
        let a = p as f64 * base.powf(-2.0 * i as f64 / d as f64);
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
    let embed = values(g, "token_embd.weight");
    let output = match g.tensor_info("output.weight") {
        Some(_) => values(g, "output.weight"),
        None => embed.clone(),
    };
    let n = tokens.len();
    let mut x: Vec<Vec<f64>> = tokens
        .iter()
        .map(|&t| embed[t as usize * hidden..][..hidden].to_vec())
        .collect();
    for l in 0..layers {
        let w = |s: &str| values(g, &format!("blk.{l}.{s}"));
        let has = |s: &str| g.tensor_info(&format!("blk.{l}.{s}")).is_some();
        let (wq, wk, wv, wo) = (
            w("attn_q.weight"),
            w("attn_k.weight"),
            w("attn_v.weight"),
            w("attn_output.weight"),
        );
        let bias =
            has("attn_q.bias").then(|| [w("attn_q.bias"), w("attn_k.bias"), w("attn_v.bias")]);
        let qk_norm =
            has("attn_q_norm.weight").then(|| [w("attn_q_norm.weight"), w("attn_k_norm.weight")]);
        let attn_norm = w("attn_norm.weight");
        let (mut q, mut k, mut v) = (Vec::new(), Vec::new(), Vec::new());
        for (p, xp) in x.iter().enumerate() {
            let h = rms_norm(xp, &attn_norm, eps);
            let mut qp = linear(&wq, &h, bias.as_ref().map(|b| &b[0][..]));
            let mut kp = linear(&wk, &h, bias.as_ref().map(|b| &b[1][..]));
            let vp = linear(&wv, &h, bias.as_ref().map(|b| &b[2][..]));
            for (t, nh, which) in [(&mut qp, heads, 0), (&mut kp, kv_heads, 1)] {
                for head in 0..nh {
                    let s = &mut t[head * d..][..d];
                    if let Some(norms) = &qk_norm {
                        let y = rms_norm(s, &norms[which], eps);
                        s.copy_from_slice(&y);
                    }
                    rope(s, p, base, arch == Arch::Llama);
                }
            }
            q.push(qp);
            k.push(kp);
            v.push(vp);
        }
        let (ffn_norm, gate, up, down) = (
            w("ffn_norm.weight"),
            w("ffn_gate.weight"),
            w("ffn_up.weight"),
            w("ffn_down.weight"),
        );
        for i in 0..n {
            let mut o = vec![0.0; heads * d];
            for hq in 0..heads {
                let hk = hq / (heads / kv_heads);
                let qi = &q[i][hq * d..][..d];
                let s: Vec<f64> = (0..=i)
                    .map(|j| {
                        qi.iter()
                            .zip(&k[j][hk * d..][..d])
                            .map(|(a, b)| a * b)
                            .sum::<f64>()
                            / (d as f64).sqrt()
                    })
                    .collect();
                let max = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = s.iter().map(|v| (v - max).exp()).collect();
                let sum: f64 = e.iter().sum();
                for (j, ej) in e.iter().enumerate() {
                    for c in 0..d {
                        o[hq * d + c] += ej / sum * v[j][hk * d + c];
                    }
                }
            }
            let attn = linear(&wo, &o, None);
            for (xv, a) in x[i].iter_mut().zip(attn) {
                *xv += a;
            }
            let h = rms_norm(&x[i], &ffn_norm, eps);
            let (g_, u) = (linear(&gate, &h, None), linear(&up, &h, None));
            let act: Vec<f64> = g_
                .iter()
                .zip(&u)
                .map(|(g, u)| g / (1.0 + (-g).exp()) * u)
                .collect();
            for (xv, f) in x[i].iter_mut().zip(linear(&down, &act, None)) {
                *xv += f;
            }
        }
    }
    let norm = values(g, "output_norm.weight");
    x.iter()
        .map(|xp| linear(&output, &rms_norm(xp, &norm, eps), None))
        .collect()
}
