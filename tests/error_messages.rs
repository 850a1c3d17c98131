//! One bad input per op family, with the message it gives asserted whole:
//! it names the op, the operand as the caller passed it (not an internal
//! reshape or a placeholder) and the offending values. Among them, each
//! case the issue of November 2026 found naming the wrong thing.

use ferrocm::ops::attention::AttentionOptions;
use ferrocm::ops::{DynTensor, QTensor, QuantFormat};
use ferrocm::{Device, Tensor};

fn z(shape: &[usize]) -> Tensor<f32> {
    Tensor::<f32>::zeros(shape, &Device::Cpu).unwrap()
}

/// A broadcast view of any size (no memory behind it).
fn huge(shape: &[usize]) -> Tensor<f32> {
    z(&[1])
        .reshape(&vec![1; shape.len()])
        .unwrap()
        .broadcast_as(shape)
        .unwrap()
}

fn msg<T>(r: ferrocm::Result<T>) -> String {
    match r {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn elementwise() {
    assert_eq!(
        msg(z(&[2, 3]).add(&z(&[4]))),
        "add: shapes [2, 3] and [4] do not broadcast"
    );
    let u = Tensor::<u8>::zeros(&[2], &Device::Cpu).unwrap();
    assert_eq!(msg(u.exp()), "exp: not supported for dtype u8");
    assert_eq!(
        msg(z(&[1]).allclose(&z(&[1]), -1.0, 0.0)),
        "allclose: rtol must be a non-negative number, got -1"
    );
    assert_eq!(
        msg(z(&[3]).to_scalar()),
        "to_scalar: a tensor of shape [3] holds 3 elements, not one"
    );
}

#[test]
fn reductions() {
    assert_eq!(
        msg(z(&[2, 3]).sum(&[2], false)),
        "sum: dim 2 out of range for a rank-2 tensor of shape [2, 3]"
    );
}

#[test]
fn indexing_and_sorting() {
    let ids = Tensor::from_slice(&[0u32, 1, 0, 1, 0, 1], &[2, 3], &Device::Cpu).unwrap();
    // 2-D ids: the ids' shape, not "[2, 3] vs [2, 3]".
    assert_eq!(
        msg(z(&[4, 3]).index_add(0, &ids, &z(&[6, 3]))),
        "index_add: ids must be 1-D, got shape [2, 3]"
    );
    let ids1 = Tensor::from_slice(&[0u32, 1], &[2], &Device::Cpu).unwrap();
    assert_eq!(
        msg(z(&[4, 3]).index_add(0, &ids1, &z(&[2, 4]))),
        "index_add: src must have shape [2, 3] (self's [4, 3] with dim 0 the 2 ids), got [2, 4]"
    );
    assert_eq!(
        msg(z(&[4, 3]).index_select(0, &ids)),
        "index_select: ids must be 1-D, got shape [2, 3]"
    );
    // A rank-3 table: its own shape, not an invented [24, 1].
    assert_eq!(
        msg(z(&[2, 3, 4]).embedding(&ids1)),
        "embedding: the table must be 2-D (vocab, hidden), got shape [2, 3, 4]"
    );
    let big = huge(&[1, 1 << 33]);
    assert_eq!(
        msg(big.argsort(false)),
        format!("argsort: shape [1, {}] is too large", 1u64 << 33)
    );
}

#[test]
fn matrix_products() {
    // k = 2^61: the left operand that holds it, not the small [2, 2] output.
    let k = 1usize << 61;
    let (a, b) = (huge(&[2, k]), huge(&[k, 2]));
    assert_eq!(
        msg(a.matmul(&b)),
        format!("matmul: shape [2, {k}] is too large")
    );
    // matvec names the vector as passed ([5]), not its [5, 1] reshape.
    assert_eq!(
        msg(z(&[3, 4]).matvec(&z(&[5]))),
        "matvec: shape mismatch [3, 4] vs [5]"
    );
    // The broadcast error names both operands, not only their batch dims.
    assert_eq!(
        msg(z(&[2, 3, 4]).matmul(&z(&[3, 4, 5]))),
        "matmul: shapes [2, 3, 4] and [3, 4, 5] do not broadcast"
    );
    assert_eq!(
        msg(z(&[2, 3]).matmul(&z(&[4, 5]))),
        "matmul: shape mismatch [2, 3] vs [4, 5]"
    );
    assert_eq!(
        msg(z(&[2, 3]).linear(&z(&[5, 4]), None, None)),
        "linear: shape mismatch [2, 3] vs [5, 4]"
    );
}

#[test]
fn transformer_layer_ops() {
    let w4 = z(&[4]);
    assert_eq!(
        msg(z(&[2, 3]).rms_norm(&w4, 1e-6)),
        "rms_norm: weight must have shape [3] (the last dim of x [2, 3]), got [4]"
    );
    assert_eq!(
        msg(z(&[2, 3]).swiglu(&z(&[2, 4]))),
        "swiglu: shapes [2, 3] and [2, 4] do not broadcast"
    );
    // rope's size check is checked arithmetic: an x of 2^60 batches (a
    // broadcast view) against a [32, 2] table is an error, not a panic.
    let x = huge(&[1 << 60, 1, 1, 4]);
    let t = z(&[32, 2]);
    assert!(x.rope(&t, &t, 0).is_err());
    let none = AttentionOptions::new();
    let k = z(&[1, 2, 5, 64]);
    // A rank-3 q: its shape, not a [0, 0, 0, 0] placeholder.
    assert_eq!(
        msg(z(&[4, 2, 64]).attention(&k, &k, &none)),
        "attention: q must have rank 4 (b, heads, seq, head dim), got shape [4, 2, 64]"
    );
    // s_kv = 2^33: k's shape is named, not q's.
    let s_kv = 1usize << 33;
    let kb = huge(&[1, 2, s_kv, 64]);
    assert_eq!(
        msg(z(&[1, 4, 2, 64]).attention(&kb, &kb, &none)),
        format!("attention: shape [1, 2, {s_kv}, 64] is too large")
    );
}

#[test]
fn block_storage() {
    let q8_0 = QuantFormat::Q8_0;
    // 67 bytes: bytes, not "67 elements".
    assert_eq!(
        msg(DynTensor::from_blocks(
            &[0u8; 67],
            q8_0,
            &[2, 32],
            &Device::Cpu
        )),
        "from_blocks: 67 bytes given; shape [2, 32] in q8_0 blocks takes 68"
    );
    // Rows must be whole blocks even when the total is.
    assert_eq!(
        msg(DynTensor::from_blocks(
            &[0u8; 68],
            q8_0,
            &[4, 16],
            &Device::Cpu
        )),
        "from_blocks: shape [4, 16]: rows of 16 elements are not a whole number of q8_0 blocks of 32"
    );
    assert_eq!(
        msg(QTensor::from_bytes(
            &[],
            QuantFormat::Q4K,
            &[],
            &Device::Cpu
        )),
        "QTensor::from_bytes: a q4_K tensor needs at least one dim (shape [])"
    );
    assert_eq!(
        msg("q4_3".parse::<QuantFormat>()),
        "QuantFormat::from_str: \"q4_3\" is not a quantized format (one of q4_0, q4_1, q5_0, q5_1, q8_0, q8_1, q2_K, q3_K, q4_K, q5_K, q6_K, q8_K, iq4_nl, iq4_xs, mxfp4)"
    );
    let dense = Tensor::<f32>::zeros(&[32], &Device::Cpu).unwrap().to_dyn();
    assert_eq!(
        msg(dense.dequantize(ferrocm::DType::F32)),
        "QTensor::from_dyn: f32 storage holds no quantized blocks"
    );
}

#[test]
fn devices_parse_strictly() {
    for bad in ["emulator:64:nosan:junk", "cuda:0:1", "cpu:0", "emulator:48"] {
        assert!(bad.parse::<Device>().is_err(), "{bad} parsed");
    }
    assert_eq!(
        "emulator:64:nosan:junk"
            .parse::<Device>()
            .unwrap_err()
            .to_string(),
        "unknown device `emulator:64:nosan:junk`: too many `:` parts: expected cpu, emulator[:32|:64][:nosan], rocm[:N] or cuda[:N]"
    );
}
