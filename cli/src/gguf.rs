//! `ferrocm gguf FILE`: a GGUF file's metadata (long arrays summarised) and
//! its tensor table (name, type, shape, bytes).

use ferrocm_ops::quant::gguf::Gguf;
use std::fmt::Write;

/// The report `ferrocm gguf` prints.
///
/// ```
/// use ferrocm_ops::quant::gguf::{Gguf, GgufValue, GgufWriter};
/// let mut w = GgufWriter::new();
/// w.metadata("general.name", GgufValue::String("tiny".into()));
/// let g = Gguf::from_bytes(w.to_bytes()?)?;
/// let text = ferrocm_cli::gguf::describe(&g);
/// assert!(text.contains("general.name = \"tiny\""));
/// assert!(text.contains("0 tensors"));
/// # Ok::<(), ferrocm_ops::Error>(())
/// ```
pub fn describe(g: &Gguf) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "GGUF v{}, {} metadata, {} tensors, alignment {}",
        g.version(),
        g.metadata().len(),
        g.tensors().len(),
        g.alignment()
    );
    for (k, v) in g.metadata() {
        let _ = writeln!(s, "  {k} = {v}");
    }
    if !g.tensors().is_empty() {
        let width = g
            .tensors()
            .iter()
            .map(|t| t.name.len())
            .max()
            .unwrap_or(4)
            .max(4);
        let _ = writeln!(
            s,
            "  {:<width$}  {:<7}  {:<24}  {:>12}",
            "name", "type", "shape", "bytes"
        );
        let mut total = 0u64;
        for t in g.tensors() {
            total += t.bytes;
            let shape = format!("{:?}", t.shape);
            let _ = writeln!(
                s,
                "  {:<width$}  {:<7}  {:<24}  {:>12}",
                t.name,
                t.ggml_type.to_string(),
                shape,
                t.bytes
            );
        }
        let _ = writeln!(
            s,
            "  {} tensors, {:.2} MiB",
            g.tensors().len(),
            total as f64 / (1u64 << 20) as f64
        );
    }
    s
}

/// What `ferrocm quantize` prints when done: how many tensors went to each
/// type and the data size before and after.
///
/// ```
/// use ferrocm_ops::quant::gguf::{Gguf, GgufWriter};
/// use ferrocm_ops::quant::requantize::{quantize_gguf, QuantMix};
/// use ferrocm_ops::{Device, QuantFormat, Tensor};
/// let w = Tensor::from_slice(&vec![0.25f32; 4 * 256], &[4, 256], &Device::Cpu)?;
/// let mut file = GgufWriter::new();
/// file.tensor("blk.0.attn_q.weight", &w.into())?;
/// let g = Gguf::from_bytes(file.to_bytes()?)?;
/// let out = Gguf::from_bytes(quantize_gguf(&g, QuantMix::Uniform(QuantFormat::Q8_0), |_, _| {})?.to_bytes()?)?;
/// let text = ferrocm_cli::gguf::quantize_summary(&g, &out, 4096, 4 * 272);
/// assert!(text.contains("1 q8_0"), "{text}");
/// # Ok::<(), ferrocm_ops::Error>(())
/// ```
pub fn quantize_summary(input: &Gguf, output: &Gguf, bytes_in: u64, bytes_out: u64) -> String {
    let mut counts: Vec<(String, usize)> = Vec::new();
    for t in output.tensors() {
        let name = t.ggml_type.to_string();
        match counts.iter_mut().find(|(n, _)| *n == name) {
            Some(c) => c.1 += 1,
            None => counts.push((name, 1)),
        }
    }
    let types: Vec<String> = counts.iter().map(|(n, c)| format!("{c} {n}")).collect();
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    format!(
        "{} tensors ({}): {:.2} MiB -> {:.2} MiB ({:.2} bits per weight of the input's {} elements)",
        input.tensors().len(),
        types.join(", "),
        mib(bytes_in),
        mib(bytes_out),
        8.0 * bytes_out as f64
            / input
                .tensors()
                .iter()
                .map(|t| t.shape.iter().product::<usize>() as f64)
                .sum::<f64>()
                .max(1.0),
        input
            .tensors()
            .iter()
            .map(|t| t.shape.iter().product::<usize>())
            .sum::<usize>()
    )
}
