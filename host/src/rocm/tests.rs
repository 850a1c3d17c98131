//! Unit tests of the ROCm backend that need no GPU: the kernarg packing
//! (against every kernel signature and the embedded code objects' metadata)
//! and discovery. What needs a GPU, through `Device`, is in
//! `host/tests/gpu_backends.rs`.

use super::*;
use crate::codeobject::parse_code_object;

const PTR: ArgKind = ArgKind::Ptr {
    mutable: false,
    elem_size: 4,
};
const PTR_MUT: ArgKind = ArgKind::Ptr {
    mutable: true,
    elem_size: 4,
};

#[test]
fn pack_args_mixed_signature() {
    let kinds = [PTR_MUT, ArgKind::U32, PTR, ArgKind::F32, ArgKind::U64];
    let raw = [
        0x1122_3344_5566_7788,
        7,
        0xdead_beef_0000_1000,
        1.5f32.to_bits() as u64,
        u64::MAX - 1,
    ];
    let (bytes, offsets) = pack_args(&kinds, &raw);
    // u32 at 8, the next pointer rounds 12 up to 16, f32 at 24, u64 at 32.
    assert_eq!(offsets, vec![0, 8, 16, 24, 32]);
    assert_eq!(bytes.len(), 40);
    assert_eq!(&bytes[0..8], &0x1122_3344_5566_7788u64.to_le_bytes());
    assert_eq!(&bytes[8..12], &7u32.to_le_bytes());
    assert_eq!(&bytes[12..16], &[0; 4]);
    assert_eq!(&bytes[16..24], &0xdead_beef_0000_1000u64.to_le_bytes());
    assert_eq!(&bytes[24..28], &1.5f32.to_le_bytes());
    assert_eq!(&bytes[28..32], &[0; 4]);
    assert_eq!(&bytes[32..40], &(u64::MAX - 1).to_le_bytes());
}

#[test]
fn pack_args_packs_4_byte_runs_and_pads_the_end() {
    let kinds = [ArgKind::U32, ArgKind::I32, PTR, ArgKind::F32];
    let raw = [1, (-2i32) as u32 as u64, 0x10, 0.25f32.to_bits() as u64];
    let (bytes, offsets) = pack_args(&kinds, &raw);
    assert_eq!(offsets, vec![0, 4, 8, 16]);
    assert_eq!(bytes.len(), 24);
    assert_eq!(&bytes[4..8], &(-2i32).to_le_bytes());
    assert_eq!(&bytes[16..20], &0.25f32.to_le_bytes());
    assert_eq!(&bytes[20..24], &[0; 4]);
}

#[test]
fn pack_args_takes_the_low_bytes_and_tolerates_a_short_slice() {
    let (bytes, offsets) = pack_args(&[ArgKind::U32, ArgKind::I64], &[0xffff_ffff_0000_0005]);
    assert_eq!(offsets, vec![0, 8]);
    assert_eq!(&bytes[0..4], &5u32.to_le_bytes());
    assert_eq!(&bytes[8..16], &[0; 8]);
    assert_eq!(pack_args(&[], &[1, 2]), (vec![], vec![]));
}

#[test]
fn pack_args_matches_every_kernel_signature() {
    for k in ferrocm_kernels::kernels() {
        let raw: Vec<u64> = (0..k.args.len() as u64).collect();
        let (bytes, offsets) = pack_args(k.args, &raw);
        for (i, (kind, off)) in k.args.iter().zip(&offsets).enumerate() {
            assert_eq!(off % kind.size(), 0, "{}: argument {i} misaligned", k.name);
            assert_eq!(bytes[*off], i as u8, "{}: argument {i}", k.name);
        }
        assert_eq!(bytes.len() % 8, 0);
    }
}

/// The layout `pack_args` produces is the one the compiler chose: checked
/// against the metadata of every embedded code object (real compiler
/// output, no GPU needed).
#[test]
fn pack_args_matches_the_compiled_code_objects() {
    assert!(!ferrocm_kernels::CODE_OBJECTS.is_empty());
    for co in ferrocm_kernels::CODE_OBJECTS {
        let rows = parse_code_object(co.arch, co.bytes).unwrap();
        for k in ferrocm_kernels::kernels() {
            let row = rows
                .iter()
                .find(|r| r.kernel == k.name)
                .unwrap_or_else(|| panic!("{}: {} missing", co.arch, k.name));
            let explicit: Vec<_> = row
                .args
                .iter()
                .filter(|a| !a.value_kind.starts_with("hidden_"))
                .collect();
            let (_, offsets) = pack_args(k.args, &vec![0; k.args.len()]);
            assert_eq!(explicit.len(), k.args.len(), "{}: {}", co.arch, k.name);
            for (i, ((meta, offset), kind)) in explicit.iter().zip(&offsets).zip(k.args).enumerate()
            {
                assert_eq!(
                    (meta.offset as usize, meta.size as usize),
                    (*offset, kind.size()),
                    "{}: {} argument {i}",
                    co.arch,
                    k.name
                );
            }
        }
    }
}

#[test]
fn an_ordinal_past_the_last_device_is_no_gpu() {
    assert!(matches!(
        RocmDevice::new(usize::MAX),
        Err(Error::NoGpu { .. })
    ));
    assert!(matches!(
        RocmDevice::new(device_count()),
        Err(Error::NoGpu { .. })
    ));
}
