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
