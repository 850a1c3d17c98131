//! GGUF: files written by llama.cpp's own writers (gguf-py, see
//! tests/fixtures/gguf/make_fixture.py; gguf.cpp, see
//! make_llama_cpp_fixture.cpp) read back value for value and tensor for
//! tensor; round trips through ferrocm's writer; and corrupt
//! files (every truncation of a valid one, bad magic, versions, counts,
//! types, offsets, alignment, duplicates, non-UTF-8) refused with a typed
//! error naming the byte offset, never a panic.

mod common;
use common::devices;
use ferrocm::ops::quant::gguf::{GgmlType, Gguf, GgufValue, GgufWriter};
use ferrocm::ops::{DType, Error, QTensor, QuantFormat};
use ferrocm::{Device, Tensor};

/// The fixture's path: under the source tree this test was built in, else
/// relative to the working directory (a test binary run from a copy of the
/// repository's root).
fn fixture() -> std::path::PathBuf {
    fixture_at("tests/fixtures/gguf/tiny.gguf")
}

fn fixture_at(rel: &str) -> std::path::PathBuf {
    let built = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    if built.exists() { built } else { rel.into() }
}

#[test]
fn reads_a_file_written_by_gguf_py() {
    let g = Gguf::open(fixture()).unwrap();
    assert_eq!((g.version(), g.alignment()), (3, 64));
    let v = |k: &str| g.get(k).unwrap_or_else(|| panic!("no {k}")).clone();
    assert_eq!(v("general.architecture"), GgufValue::String("llama".into()));
    assert_eq!(v("t.u8"), GgufValue::U8(200));
    assert_eq!(v("t.i8"), GgufValue::I8(-100));
    assert_eq!(v("t.u16"), GgufValue::U16(60000));
    assert_eq!(v("t.i16"), GgufValue::I16(-30000));
    assert_eq!(v("t.u32"), GgufValue::U32(4_000_000_000));
    assert_eq!(v("t.i32"), GgufValue::I32(-2_000_000_000));
    assert_eq!(v("t.f32"), GgufValue::F32(1.5));
    assert_eq!(v("t.bool"), GgufValue::Bool(true));
    assert_eq!(v("t.str"), GgufValue::String("héllo ✓".into()));
    assert_eq!(v("t.u64"), GgufValue::U64((1 << 63) + 5));
    assert_eq!(v("t.i64"), GgufValue::I64(-(1 << 62)));
    assert_eq!(v("t.f64"), GgufValue::F64(-0.25));
    let ints = |xs: &[i32]| GgufValue::Array {
        item_type: 5,
        items: xs.iter().map(|&x| GgufValue::I32(x)).collect(),
    };
    assert_eq!(v("t.arr_i32"), ints(&[1, -2, 3]));
    let strs = ["a", "", "ccc"]
        .map(|s| GgufValue::String(s.into()))
        .to_vec();
    assert_eq!(
        v("t.arr_str"),
        GgufValue::Array {
            item_type: 8,
            items: strs
        }
    );
    assert_eq!(
        v("t.arr_arr"),
        GgufValue::Array {
            item_type: 9,
            items: vec![ints(&[1, 2]), ints(&[3])]
        }
    );

    let names: Vec<_> = g
        .tensors()
        .iter()
        .map(|t| (t.name.as_str(), t.shape.clone(), t.ggml_type))
        .collect();
    assert_eq!(
        names,
        vec![
            ("f32", vec![2, 64], GgmlType::Dense(DType::F32)),
            ("f16", vec![2, 64], GgmlType::Dense(DType::F16)),
            ("bf16", vec![2, 64], GgmlType::Dense(DType::BF16)),
            ("q8_0", vec![2, 64], GgmlType::Quant(QuantFormat::Q8_0)),
            (
                "q4_0.3d",
                vec![3, 2, 64],
                GgmlType::Quant(QuantFormat::Q4_0)
            ),
        ]
    );
    // x = i / 8 - 4 for i in 0..128: exact in f32, f16 and bf16.
    let x: Vec<f64> = (0..128).map(|i| i as f64 / 8.0 - 4.0).collect();
    for dev in devices() {
        for name in ["f32", "f16", "bf16"] {
            assert_eq!(
                g.tensor(name, &dev).unwrap().to_f64_vec().unwrap(),
                x,
                "{name} on {dev}"
            );
        }
        // Quantized: within half a step (and the f16 scale's rounding) of x,
        // the step being the block's largest magnitude over 127 (Q8_0) or 8 (Q4_0).
        let near = |got: &[f32], levels: f64| {
            got.chunks(32).zip(x.chunks(32)).all(|(g, w)| {
                let amax = w.iter().fold(0f64, |m, v| m.max(v.abs()));
                g.iter()
                    .zip(w)
                    .all(|(a, b)| (*a as f64 - b).abs() <= 0.5 * amax / levels + 1e-3 * amax)
            })
        };
        let q8 = g
            .qtensor("q8_0", &dev)
            .unwrap()
            .dequantize::<f32>()
            .unwrap()
            .to_vec()
            .unwrap();
        assert!(near(&q8, 127.0), "q8_0 on {dev}");
        let q4 = g.qtensor("q4_0.3d", &dev).unwrap();
        assert_eq!(q4.shape(), &[3, 2, 64]);
        let q4 = q4.dequantize::<f32>().unwrap().to_vec().unwrap();
        assert!(q4.chunks(128).all(|c| near(c, 8.0)), "q4_0 on {dev}");
        // ferrocm's quantizer gives gguf-py's bytes.
        let xt = Tensor::from_slice(
            &x.iter().map(|&v| v as f32).collect::<Vec<_>>(),
            &[2, 64],
            &dev,
        )
        .unwrap();
        assert_eq!(
            QTensor::quantize(&xt, QuantFormat::Q8_0)
                .unwrap()
                .to_bytes()
                .unwrap(),
            g.tensor_bytes("q8_0").unwrap()
        );
    }
    assert!(g.qtensor("f32", &Device::Cpu).is_err());
    assert!(g.tensor("nope", &Device::Cpu).is_err());
}

#[test]
fn round_trips_through_the_writer() {
    let g = Gguf::open(fixture()).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in g.metadata() {
        w.metadata(k, v.clone());
    }
    for t in g.tensors() {
        w.raw(
            &t.name,
            &t.shape,
            t.ggml_type,
            g.tensor_bytes(&t.name).unwrap().to_vec(),
        )
        .unwrap();
    }
    let bytes = w.to_bytes().unwrap();
    // The same layout gguf-py wrote: byte for byte.
    assert_eq!(bytes, std::fs::read(fixture()).unwrap());
    // Tensors from devices, every dtype GGUF holds.
    for dev in devices() {
        let mut w = GgufWriter::new();
        let a = Tensor::from_slice(&[1.0f32, -2.0, 3.5], &[3], &dev).unwrap();
        let b = Tensor::from_slice(&[5i64, -6], &[2, 1], &dev).unwrap();
        let t = Tensor::<f32>::arange(0, 64, &dev)
            .unwrap()
            .reshape(&[2, 32])
            .unwrap();
        let q = QTensor::quantize(&t, QuantFormat::Q5_1).unwrap();
        w.tensor("a", &a.to_dyn()).unwrap();
        w.tensor("b", &b.to_dyn()).unwrap();
        w.tensor(
            "narrow",
            &t.narrow(1, 3, 5)
                .unwrap()
                .to_dyn()
                .to_dtype(DType::BF16)
                .unwrap(),
        )
        .unwrap();
        w.qtensor("q", &q).unwrap();
        w.metadata("general.alignment", GgufValue::U32(128));
        let path = std::env::temp_dir().join(format!(
            "ferrocm-gguf-{}-{}.gguf",
            std::process::id(),
            dev.to_string().replace(':', "_")
        ));
        w.write(&path).unwrap();
        let g = Gguf::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(g.alignment(), 128);
        assert_eq!(
            g.tensor("a", &dev).unwrap().to_f64_vec().unwrap(),
            vec![1.0, -2.0, 3.5]
        );
        assert_eq!(g.tensor("b", &dev).unwrap().shape(), &[2, 1]);
        let narrow: Vec<f64> = (0..2)
            .flat_map(|r| (3..8).map(move |c| (32 * r + c) as f64))
            .collect();
        assert_eq!(
            g.tensor("narrow", &dev).unwrap().to_f64_vec().unwrap(),
            narrow
        );
        assert_eq!(
            g.qtensor("q", &dev).unwrap().to_bytes().unwrap(),
            q.to_bytes().unwrap()
        );
        assert!(g.tensors().iter().all(|t| t.offset % 128 == 0));
    }
    let mut w = GgufWriter::new();
    let u = Tensor::from_slice(&[1u32], &[1], &Device::Cpu).unwrap();
    assert!(w.tensor("u", &u.to_dyn()).is_err());
    w.raw("x", &[32], GgmlType::Quant(QuantFormat::Q8_0), vec![0; 34])
        .unwrap();
    assert!(
        w.raw("x", &[32], GgmlType::Quant(QuantFormat::Q8_0), vec![0; 34])
            .is_err()
    ); // duplicate
    assert!(
        w.raw("y", &[32], GgmlType::Quant(QuantFormat::Q8_0), vec![0; 33])
            .is_err()
    );
    assert!(
        w.raw(
            "z",
            &[1, 1, 1, 1, 32],
            GgmlType::Quant(QuantFormat::Q8_0),
            vec![0; 34]
        )
        .is_err()
    );
    w.metadata(
        "bad",
        GgufValue::Array {
            item_type: 8,
            items: vec![GgufValue::U8(1)],
        },
    );
    assert!(w.to_bytes().is_err());
}

/// A file may ask for any power-of-two alignment up to 2^31. Without
/// tensors there is no data section to align: the written file is the header
/// alone (the GGUF fuzzer found a 2 GiB padding written for 40 bytes), and
/// it reads back as the same metadata. With a tensor the padding is the
/// format's own: the first tensor sits at the alignment.
#[test]
fn a_file_without_tensors_is_not_padded_to_its_alignment() {
    let mut w = GgufWriter::new();
    w.metadata("general.alignment", GgufValue::U32(1 << 31));
    w.metadata("general.name", GgufValue::String("empty".into()));
    let bytes = w.to_bytes().unwrap();
    // magic, version, two counts, then two keys with their values
    let header = 4 + 4 + 8 + 8 + (8 + 17 + 4 + 4) + (8 + 12 + 4 + 8 + 5);
    assert_eq!(bytes.len(), header);
    let g = Gguf::from_bytes(bytes.clone()).unwrap();
    assert_eq!((g.alignment(), g.tensors().len()), (1 << 31, 0));
    assert_eq!(
        g.get("general.name"),
        Some(&GgufValue::String("empty".into()))
    );

    let mut w = GgufWriter::new();
    w.metadata("general.alignment", GgufValue::U32(4096));
    w.raw("x", &[32], GgmlType::Quant(QuantFormat::Q8_0), vec![7; 34])
        .unwrap();
    let bytes = w.to_bytes().unwrap();
    assert_eq!(bytes.len(), 4096 + 4096);
    let g = Gguf::from_bytes(bytes).unwrap();
    assert_eq!(g.tensor_bytes("x").unwrap(), &[7u8; 34][..]);
}

/// The error of parsing `bytes`: must be `Error::Gguf`; returns its text.
fn refused(bytes: Vec<u8>) -> String {
    match Gguf::from_bytes(bytes) {
        Err(e @ Error::Gguf { .. }) => e.to_string(),
        Err(e) => panic!("not a GGUF error: {e}"),
        Ok(g) => panic!("accepted: {g:?}"),
    }
}

#[test]
fn corrupt_files_are_typed_errors() {
    let good = std::fs::read(fixture()).unwrap();
    // Every truncation inside the header, the metadata and the tensor infos,
    // and inside the data.
    for n in (0..good.len())
        .step_by(1)
        .filter(|&n| n < 832 || n % 61 == 0)
    {
        let e = refused(good[..n].to_vec());
        assert!(e.contains("at byte"), "{n}: {e}");
    }
    let mut bad = good.clone();
    bad[0] = b'X';
    assert_eq!(
        refused(bad),
        "gguf: bad magic (not a GGUF file) (at byte 0)"
    );
    for version in [0u32, 1, 4, 0x0300_0000] {
        let mut bad = good.clone();
        bad[4..8].copy_from_slice(&version.to_le_bytes());
        assert!(refused(bad).contains(&format!("version {version}")));
    }
    // Counts that cannot fit the file, up to u64::MAX.
    for (at, count) in [(8, u64::MAX), (8, 1 << 40), (16, u64::MAX), (16, 1 << 33)] {
        let mut bad = good.clone();
        bad[at..at + 8].copy_from_slice(&count.to_le_bytes());
        assert!(refused(bad).contains("exceeds what"));
    }
    // Locate fields by their bytes.
    let find = |pat: &[u8]| good.windows(pat.len()).position(|w| w == pat).unwrap();
    // A string length past the end.
    let arch = find(b"general.architecture") - 8;
    let mut bad = good.clone();
    bad[arch..arch + 8].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(refused(bad).contains("truncated"));
    // An unknown value type.
    let ty = find(b"t.u8") + 4;
    let mut bad = good.clone();
    bad[ty..ty + 4].copy_from_slice(&13u32.to_le_bytes());
    assert!(refused(bad).contains("unknown value type 13"));
    // A bool that is neither 0 nor 1.
    let b = find(b"t.bool") + 6 + 4;
    let mut bad = good.clone();
    bad[b] = 2;
    assert!(refused(bad).contains("bool byte 2"));
    // Not UTF-8.
    let s = find("héllo".as_bytes());
    let mut bad = good.clone();
    bad[s + 1] = 0xff;
    assert!(refused(bad).contains("not UTF-8"));
    // Duplicate keys and names.
    let mut bad = good.clone();
    let k = find(b"t.i8");
    bad[k..k + 4].copy_from_slice(b"t.u8");
    assert!(refused(bad).contains("duplicate metadata key \"t.u8\""));
    let mut bad = good.clone();
    let n = find(b"\x03\x00\x00\x00\x00\x00\x00\x00f16") + 8;
    bad[n..n + 3].copy_from_slice(b"f32");
    assert!(refused(bad).contains("duplicate tensor name \"f32\""));
    // Tensor infos: dims, type, offset (the f32 tensor's info follows its name).
    let info = find(b"\x03\x00\x00\x00\x00\x00\x00\x00f32") + 11;
    let patch = |at: usize, bytes: &[u8]| {
        let mut bad = good.clone();
        bad[at..at + bytes.len()].copy_from_slice(bytes);
        refused(bad)
    };
    assert!(patch(info, &0u32.to_le_bytes()).contains("has 0 dims"));
    assert!(patch(info, &5u32.to_le_bytes()).contains("has 5 dims"));
    assert!(patch(info + 4, &u64::MAX.to_le_bytes()).contains("overflows"));
    assert!(patch(info + 4, &(1u64 << 40).to_le_bytes()).contains("run past the end"));
    assert!(patch(info + 20, &99u32.to_le_bytes()).contains("unknown GGML type 99"));
    assert!(patch(info + 24, &32u64.to_le_bytes()).contains("not a multiple of the alignment 64"));
    assert!(patch(info + 24, &(1u64 << 62).to_le_bytes()).contains("run past the end"));
    // Q8_0 rows of 64 are whole blocks; of 48 they are not.
    let q = find(b"\x04\x00\x00\x00\x00\x00\x00\x00q8_0") + 12;
    assert!(patch(q + 4, &48u64.to_le_bytes()).contains("not whole q8_0 blocks of 32"));
    // The alignment: not a power of two, or of another type.
    let a = find(b"general.alignment") + 17;
    assert!(patch(a + 4, &48u32.to_le_bytes()).contains("power of two"));
    assert!(patch(a, &5u32.to_le_bytes()).contains("power of two"));
}

/// `quantize_gguf` (what `ferrocm quantize` runs) on a small Llama-shaped
/// file of 16 layers: which tensor gets which type under Q4_K_M, Q5_K_M, a
/// plain type and `--pure` (llama-quantize's rules, written out here), the
/// quantized bytes equal to `QTensor::quantize` of the same values, the
/// rest copied byte for byte, and the metadata kept with the file type set.
#[test]
fn quantize_gguf_follows_llama_quantize_rules() {
    use ferrocm::ops::quant::requantize::{QuantMix, quantize_gguf, quantize_plan};
    let (layers, hidden, ffn, vocab) = (16usize, 256usize, 512usize, 96usize);
    let mut seed = 7u64;
    let mut values = |n: usize| -> Vec<f32> {
        (0..n)
            .map(|_| {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((seed >> 40) as f32 / (1u64 << 24) as f32) - 0.5
            })
            .collect()
    };
    let dev = Device::Cpu;
    let mut w = GgufWriter::new();
    w.metadata("general.architecture", GgufValue::String("llama".into()));
    let mut add = |w: &mut GgufWriter, name: &str, shape: &[usize], as_f16: bool| {
        let t = Tensor::from_slice(&values(shape.iter().product()), shape, &dev).unwrap();
        let t: ferrocm::ops::DynTensor = if as_f16 {
            t.to_dtype::<half::f16>().unwrap().into()
        } else {
            t.into()
        };
        w.tensor(name, &t).unwrap();
    };
    add(&mut w, "token_embd.weight", &[vocab, hidden], true);
    for l in 0..layers {
        let p = format!("blk.{l}.");
        add(&mut w, &(p.clone() + "attn_norm.weight"), &[hidden], false);
        add(
            &mut w,
            &(p.clone() + "attn_q.weight"),
            &[hidden, hidden],
            true,
        );
        add(
            &mut w,
            &(p.clone() + "attn_v.weight"),
            &[hidden / 4, hidden],
            true,
        );
        add(
            &mut w,
            &(p.clone() + "ffn_down.weight"),
            &[hidden, ffn],
            true,
        );
        // A row of 96: no K-quant block fits, Q5_0's 32 do.
        add(&mut w, &(p.clone() + "ffn_gate.weight"), &[4, 96], false);
    }
    // A 2-D router stays as it is (llama-quantize keeps it).
    add(&mut w, "blk.0.ffn_gate_inp.weight", &[8, hidden], false);
    add(&mut w, "output_norm.weight", &[hidden], false);
    add(&mut w, "output.weight", &[vocab, hidden], true);
    let g = Gguf::from_bytes(w.to_bytes().unwrap()).unwrap();

    // llama.cpp's more-bits layers for 16: 0, 1 (first eighth), 14, 15
    // (last eighth), and 2 + 3k + 2 = 4, 7, 10, 13 in between.
    let more = [0, 1, 4, 7, 10, 13, 14, 15];
    let ty = |f: QuantFormat| GgmlType::Quant(f);
    use QuantFormat::*;
    let want = |mix: QuantMix, name: &str| -> GgmlType {
        let layer: Option<usize> = name
            .strip_prefix("blk.")
            .map(|r| r.split('.').next().unwrap().parse().unwrap());
        let m = matches!(mix, QuantMix::Q4KM | QuantMix::Q5KM);
        let output = name == "output.weight" && !matches!(mix, QuantMix::Pure(_));
        let more_bits = m
            && (name.ends_with("attn_v.weight") || name.ends_with("ffn_down.weight"))
            && more.contains(&layer.unwrap());
        if name.contains("norm") || name.contains("ffn_gate_inp") {
            GgmlType::Dense(DType::F32)
        } else if output || more_bits {
            ty(Q6K)
        } else if name.ends_with("ffn_gate.weight") {
            ty(match mix.base() {
                Q4K => Q5_0,
                Q5K => Q5_1,
                Q6K => Q8_0,
                f => f,
            })
        } else {
            ty(mix.base())
        }
    };
    for mix in [
        QuantMix::Q4KM,
        QuantMix::Q5KM,
        QuantMix::Uniform(Q4_0),
        QuantMix::Pure(Q6K),
    ] {
        let plan = quantize_plan(&g, mix).unwrap();
        for p in &plan {
            assert_eq!(p.to, want(mix, &p.name), "{mix:?}: {}", p.name);
        }
        let mut calls = 0;
        let out = quantize_gguf(&g, mix, |done, total| {
            calls += 1;
            assert!(done <= total);
        })
        .unwrap();
        assert_eq!(calls, g.tensors().len());
        let out = Gguf::from_bytes(out.to_bytes().unwrap()).unwrap();
        assert_eq!(
            out.get("general.architecture"),
            g.get("general.architecture")
        );
        let file_type = match mix {
            QuantMix::Q4KM => 15,
            QuantMix::Q5KM => 17,
            QuantMix::Uniform(_) => 2,
            _ => 18,
        };
        assert_eq!(
            out.get("general.file_type"),
            Some(&GgufValue::U32(file_type))
        );
        assert_eq!(
            out.get("general.quantization_version"),
            Some(&GgufValue::U32(2))
        );
        for (p, t) in plan.iter().zip(out.tensors()) {
            assert_eq!(
                (&t.name, t.ggml_type, &t.shape),
                (&p.name, p.to, &g.tensor_info(&p.name).unwrap().shape)
            );
            let got = out.tensor_bytes(&t.name).unwrap();
            match p.to {
                GgmlType::Quant(f) => {
                    let x = g
                        .tensor(&p.name, &dev)
                        .unwrap()
                        .to_dtype(DType::F32)
                        .unwrap();
                    let x: Tensor<f32> = x.try_into().unwrap();
                    let q = QTensor::quantize(&x, f).unwrap().to_bytes().unwrap();
                    assert!(
                        got == &q[..],
                        "{mix:?}: {} differs from QTensor::quantize",
                        p.name
                    );
                }
                _ => assert_eq!(got, g.tensor_bytes(&p.name).unwrap(), "{}", p.name),
            }
        }
    }
    // Tied embeddings: without output.weight the token embedding is the
    // output projection and gets Q6_K.
    let mut tied = GgufWriter::new();
    add(&mut tied, "token_embd.weight", &[vocab, hidden], false);
    let tied = Gguf::from_bytes(tied.to_bytes().unwrap()).unwrap();
    assert_eq!(quantize_plan(&tied, QuantMix::Q4KM).unwrap()[0].to, ty(Q6K));
    assert_eq!(
        quantize_plan(&tied, QuantMix::Uniform(Q8_0)).unwrap()[0].to,
        ty(Q8_0)
    );
    // Types that are not weight formats are refused by name.
    for bad in ["IQ4_XS", "Q8_K", "q8_1", "f16", ""] {
        let e = bad.parse::<QuantMix>().unwrap_err().to_string();
        assert!(e.contains(&format!("{bad:?}")), "{e}");
    }
    assert!(quantize_plan(&g, QuantMix::Pure(Iq4Xs)).is_err());
}

/// A file written by llama.cpp's C++ writer (gguf.cpp) with tensors from
/// GGML's reference quantizers: every metadata value, the tensor table
/// (GGUF's dims reversed), the dense values, and the quantized tensors
/// byte for byte equal to ferrocm's quantizers on the same f32 values,
/// loaded on every device.
#[test]
fn reads_a_file_written_by_llama_cpp() {
    let g = Gguf::open(fixture_at("tests/fixtures/gguf/llama_cpp.gguf")).unwrap();
    assert_eq!((g.version(), g.alignment()), (3, 32));
    let v = |k: &str| g.get(k).unwrap_or_else(|| panic!("no {k}")).clone();
    assert_eq!(v("general.architecture"), GgufValue::String("llama".into()));
    assert_eq!(v("t.u8"), GgufValue::U8(250));
    assert_eq!(v("t.i8"), GgufValue::I8(-7));
    assert_eq!(v("t.u16"), GgufValue::U16(65000));
    assert_eq!(v("t.i16"), GgufValue::I16(-32000));
    assert_eq!(v("t.u32"), GgufValue::U32(4_000_000_001));
    assert_eq!(v("t.i32"), GgufValue::I32(-2_000_000_001));
    assert_eq!(v("t.f32"), GgufValue::F32(0.15625));
    assert_eq!(v("t.u64"), GgufValue::U64(18_000_000_000_000_000_000));
    assert_eq!(v("t.i64"), GgufValue::I64(-9_000_000_000_000_000_000));
    assert_eq!(v("t.f64"), GgufValue::F64(std::f64::consts::E));
    assert_eq!(v("t.bool"), GgufValue::Bool(false));
    assert_eq!(v("t.str"), GgufValue::String("ünïcødé ✓".into()));
    let items = |k: &str| v(k).as_array().unwrap().to_vec();
    assert_eq!(
        items("t.arr_i32"),
        [1, -2, 3, -4, i32::MAX].map(GgufValue::I32).to_vec()
    );
    assert_eq!(
        items("t.arr_f32"),
        [0.5, -1.25, 1e30].map(GgufValue::F32).to_vec()
    );
    assert_eq!(
        items("t.arr_str"),
        ["<s>", "</s>", ""]
            .map(|s| GgufValue::String(s.into()))
            .to_vec()
    );
    let table: Vec<(&str, GgmlType, &[usize])> = g
        .tensors()
        .iter()
        .map(|t| (t.name.as_str(), t.ggml_type, t.shape.as_slice()))
        .collect();
    use QuantFormat::*;
    assert_eq!(
        table,
        [
            ("norm.weight", GgmlType::Dense(DType::F32), &[32usize][..]),
            ("f16.weight", GgmlType::Dense(DType::F16), &[3, 64]),
            ("src", GgmlType::Dense(DType::F32), &[2, 256]),
            ("blk.0.q4k.weight", GgmlType::Quant(Q4K), &[2, 256]),
            ("blk.0.q6k.weight", GgmlType::Quant(Q6K), &[2, 256]),
            ("blk.0.q8_0.weight", GgmlType::Quant(Q8_0), &[2, 256]),
        ]
    );
    // The generator's values: norm 1 + i/64, f16 (i - 96)/8 (exact in f16).
    for dev in devices() {
        let norm: Tensor<f32> = g.tensor("norm.weight", &dev).unwrap().try_into().unwrap();
        let want: Vec<f32> = (0..32).map(|i| 1.0 + i as f32 / 64.0).collect();
        assert_eq!(norm.to_vec().unwrap(), want);
        let h: Tensor<half::f16> = g.tensor("f16.weight", &dev).unwrap().try_into().unwrap();
        let want: Vec<f32> = (0..192).map(|i| (i as f32 - 96.0) / 8.0).collect();
        let got: Vec<f32> = h.to_vec().unwrap().iter().map(|v| v.to_f32()).collect();
        assert_eq!(got, want);
        let src: Tensor<f32> = g.tensor("src", &dev).unwrap().try_into().unwrap();
        for (name, f) in [
            ("blk.0.q4k.weight", Q4K),
            ("blk.0.q6k.weight", Q6K),
            ("blk.0.q8_0.weight", Q8_0),
        ] {
            let q = g.qtensor(name, &dev).unwrap();
            assert_eq!(
                (q.format(), q.shape(), q.device()),
                (f, &[2usize, 256][..], &dev)
            );
            let ours = QTensor::quantize(&src, f).unwrap().to_bytes().unwrap();
            assert!(
                q.to_bytes().unwrap() == ours,
                "{name} on {dev}: GGML's blocks differ from ferrocm's"
            );
        }
    }
}
