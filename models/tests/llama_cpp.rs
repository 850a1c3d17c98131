//! End to end against llama.cpp: the synthetic tiny Llama written as a GGUF
//! file, loaded by llama.cpp's `llama-completion` and run greedily from a
//! text prompt, printed the bytes in tests/fixtures/llama_cpp/greedy.json
//! (make_greedy.py says how). The same model made in memory must print the
//! same bytes here: llama.cpp's GGUF reader, tokenizer, forward pass and
//! detokenizer against ferrocm's, in f32, f16, Q8_0 and Q4_0 (the K-quants
//! round activations differently from llama.cpp's CPU: make_greedy.py).

use ferrocm_models::synthetic::SyntheticModel;
use ferrocm_models::{Arch, Generation, Llama, LoadOptions, SamplingOptions, Tokenizer};
use ferrocm_ops::quant::gguf::Gguf;
use ferrocm_ops::{DType, Device, QuantFormat};

#[test]
fn greedy_text_is_llama_cpps() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/llama_cpp/greedy.json"
    );
    let fixture: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let prompt = fixture["prompt"].as_str().unwrap();
    let n = fixture["tokens"].as_u64().unwrap() as usize;
    let cases = fixture["bytes"].as_object().unwrap();
    assert_eq!(cases.len(), 4);
    for (format, bytes) in cases {
        let want: Vec<u8> = bytes
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b.as_u64().unwrap() as u8)
            .collect();
        // `ferrocm synthesize tiny:FORMAT`: quantized matrices from f32, or dense in FORMAT.
        let (quant, dense) = match format.as_str() {
            "f32" => (None, DType::F32),
            "f16" => (None, DType::F16),
            other => (Some(other.parse::<QuantFormat>().unwrap()), DType::F32),
        };
        let m = SyntheticModel {
            format: quant,
            dense,
            ..SyntheticModel::new(Arch::Llama)
        };
        let g = Gguf::from_bytes(m.to_gguf().unwrap().to_bytes().unwrap()).unwrap();
        let tokenizer = Tokenizer::from_gguf(&g).unwrap();
        let model = Llama::<f32>::load(&g, &Device::Cpu, &LoadOptions::default()).unwrap();
        let mut generation = Generation::new(&model, SamplingOptions::greedy()).unwrap();
        generation.stop_at(tokenizer.end_of_generation());
        let ids = tokenizer.encode(prompt).unwrap();
        let out = generation.generate(&ids, n, |_| true).unwrap();
        // llama.cpp masked end-of-generation tokens; none is the argmax here.
        assert_eq!(
            out.len(),
            n,
            "{format}: stopped at an end-of-generation token"
        );
        let got: Vec<u8> = out
            .iter()
            .flat_map(|&id| tokenizer.piece(id))
            .copied()
            .collect();
        assert_eq!(
            got,
            want,
            "{format}: ours {:?}, llama.cpp {:?}",
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&want)
        );
    }
}
