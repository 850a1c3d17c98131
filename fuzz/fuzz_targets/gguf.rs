//! The GGUF reader on arbitrary bytes (see fuzz/README.md): a file either
//! parses or is `Error::Gguf`; never a panic, a read out of bounds or an
//! allocation the file's size does not justify. A file that parses is then
//! used as a model loader would: every metadata value printed, every tensor's
//! bytes read, loaded onto the Cpu and the emulator (dense, or quantized and
//! dequantized), the two devices agreeing; and written back with the writer,
//! which must parse to the same metadata and tensors.

#![no_main]

use ferrocm::ops::quant::gguf::{GgmlType, Gguf, GgufWriter};
use ferrocm::ops::{DType, Error};
use ferrocm::{Device, WaveSize};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let g = match Gguf::from_bytes(data.to_vec()) {
        Ok(g) => g,
        Err(Error::Gguf { offset, .. }) => {
            assert!(
                offset <= data.len() as u64,
                "offset {offset} past {} bytes",
                data.len()
            );
            return;
        }
        Err(e) => panic!("not a GGUF error: {e}"),
    };
    for (k, v) in g.metadata() {
        let _ = format!("{k} = {v}");
    }
    let emu = Device::emulator(WaveSize::Wave32);
    let mut w = GgufWriter::new();
    for (k, v) in g.metadata() {
        w.metadata(k, v.clone());
    }
    for t in g.tensors() {
        let bytes = g.tensor_bytes(&t.name).unwrap();
        assert_eq!(bytes.len() as u64, t.bytes);
        w.raw(&t.name, &t.shape, t.ggml_type, bytes.to_vec())
            .unwrap();
        // Keep the emulator's work small: a few thousand elements.
        let elems: usize = t.shape.iter().product();
        if elems > 4096 {
            continue;
        }
        let on = |dev: &Device| -> Option<Vec<f64>> {
            match t.ggml_type {
                GgmlType::Dense(_) => Some(g.tensor(&t.name, dev).unwrap().to_f64_vec().unwrap()),
                GgmlType::Quant(_) => {
                    let q = g.qtensor(&t.name, dev).unwrap();
                    Some(q.dequantize_to(DType::F32).unwrap().to_f64_vec().unwrap())
                }
                GgmlType::Other(_) => {
                    assert!(g.tensor(&t.name, dev).is_err());
                    None
                }
            }
        };
        let (cpu, em) = (on(&Device::Cpu), on(&emu));
        if let (Some(a), Some(b)) = (cpu, em) {
            assert_eq!(a.len(), b.len());
            for (x, y) in a.iter().zip(&b) {
                assert!(
                    x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()),
                    "{}: {x} vs {y}",
                    t.name
                );
            }
        }
    }
    // Written back, the file parses to the same content: writing that
    // parse again gives the same bytes (NaN metadata included).
    let bytes = w.to_bytes().unwrap();
    let again = Gguf::from_bytes(bytes.clone()).unwrap();
    assert_eq!(again.alignment(), g.alignment());
    assert_eq!(again.metadata().len(), g.metadata().len());
    let mut w2 = GgufWriter::new();
    for (k, v) in again.metadata() {
        w2.metadata(k, v.clone());
    }
    for (a, b) in again.tensors().iter().zip(g.tensors()) {
        assert_eq!(
            (&a.name, &a.shape, a.ggml_type, a.bytes),
            (&b.name, &b.shape, b.ggml_type, b.bytes)
        );
        let data = again.tensor_bytes(&a.name).unwrap();
        assert_eq!(data, g.tensor_bytes(&b.name).unwrap());
        w2.raw(&a.name, &a.shape, a.ggml_type, data.to_vec())
            .unwrap();
    }
    assert_eq!(w2.to_bytes().unwrap(), bytes);
});
