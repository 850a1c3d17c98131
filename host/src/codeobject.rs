//! What each embedded AMDGPU code object holds, read without any ROCm tool:
//! per kernel its registers, LDS, scratch, spills, argument layout and the
//! occupancy those allow (the reading itself is ferrocm-build's, which
//! checks every object it builds with it), as the `ferrocm kernels` report,
//! and each kernel's argument layout against the host's packing.
//!
//! ```
//! use ferrocm_host::codeobject;
//!
//! let rows = codeobject::report(ferrocm_kernels::CODE_OBJECTS).unwrap();
//! for k in ferrocm_kernels::kernels() {
//!     codeobject::check_args(&rows, k).unwrap();
//! }
//! ```

pub use ferrocm_build::archs::ARCHS;
pub use ferrocm_build::codeobject::{
    ArgMeta, CodeObjectError, KernelResources, REPORT_WORKGROUP_SIZE, occupancy, parse_code_object,
};
use ferrocm_kernels::host::{ArgKind, KernelInfo};

/// Resources of every kernel in `objects` (normally
/// [`ferrocm_kernels::CODE_OBJECTS`]), object by object, each sorted by
/// kernel name, with occupancy for workgroups of [`REPORT_WORKGROUP_SIZE`].
///
/// ```
/// let rows = ferrocm_host::codeobject::report(ferrocm_kernels::CODE_OBJECTS).unwrap();
/// assert!(rows.iter().any(|r| r.kernel == "unary_exp_f32"));
/// ```
pub fn report(
    objects: &[ferrocm_kernels::CodeObject],
) -> Result<Vec<KernelResources>, CodeObjectError> {
    let mut rows = Vec::new();
    for co in objects {
        rows.extend(parse_code_object(co.arch, co.bytes)?);
    }
    Ok(rows)
}

/// Checks that, in every row for `kernel.name`, the non-hidden arguments are
/// exactly the host's: argument `i` at the previous one's end rounded up to
/// its size, of [`ArgKind::size`] bytes, `global_buffer` for a pointer and
/// `by_value` for a scalar. `Err` lists every mismatch (or says the kernel is
/// absent).
///
/// ```
/// use ferrocm_host::codeobject::{check_args, report};
/// let rows = report(ferrocm_kernels::CODE_OBJECTS).unwrap();
/// let k = ferrocm_kernels::kernel("unary_exp_f32").unwrap();
/// assert_eq!(check_args(&rows, k), Ok(()));
/// ```
pub fn check_args(rows: &[KernelResources], kernel: &KernelInfo) -> Result<(), String> {
    let mut problems = Vec::new();
    let mut found = false;
    for row in rows.iter().filter(|r| r.kernel == kernel.name) {
        found = true;
        let meta: Vec<&ArgMeta> = row
            .args
            .iter()
            .filter(|a| !a.value_kind.starts_with("hidden_"))
            .collect();
        let mut end = 0u32;
        for (i, kind) in kernel.args.iter().enumerate() {
            let size = u32::try_from(kind.size()).unwrap_or(u32::MAX);
            let offset = end.checked_next_multiple_of(size).unwrap_or(u32::MAX);
            end = offset.saturating_add(size);
            let value_kind = match kind {
                ArgKind::Ptr { .. } => "global_buffer",
                _ => "by_value",
            };
            let want = format!("{value_kind} of {size} bytes at offset {offset}");
            match meta.get(i) {
                Some(m) if m.offset == offset && m.size == size && m.value_kind == value_kind => {}
                Some(m) => problems.push(format!(
                    "{}: argument {i} ({}): host packs {want}, code object has {} of {} bytes at offset {}",
                    row.arch,
                    kind.describe(),
                    m.value_kind,
                    m.size,
                    m.offset
                )),
                None => problems.push(format!(
                    "{}: argument {i} ({}): host packs {want}, code object has no such argument",
                    row.arch,
                    kind.describe()
                )),
            }
        }
        if meta.len() > kernel.args.len() {
            problems.push(format!(
                "{}: code object has {} arguments, host passes {}",
                row.arch,
                meta.len(),
                kernel.args.len()
            ));
        }
        if row.kernarg_size < end {
            problems.push(format!(
                "{}: kernarg segment is {} bytes, host packs {end}",
                row.arch, row.kernarg_size
            ));
        }
    }
    match (found, problems.is_empty()) {
        (false, _) => Err(format!("{}: not in any code object", kernel.name)),
        (true, true) => Ok(()),
        (true, false) => Err(format!("{}: {}", kernel.name, problems.join("; "))),
    }
}

/// Checks a crate's device code against its declared kernels (its
/// `KERNELS` tables): every kernel is in every code object of `module` with
/// the argument layout the host packs ([`check_args`]) and in its PTX with
/// its parameter sizes, and no object holds a kernel that is not declared.
/// ferrocm's tests check [`ferrocm_kernels::KERNEL_MODULE`] so; a kernel
/// crate outside ferrocm checks its own in a test.
///
/// ```
/// let all: Vec<_> = ferrocm_kernels::kernels().collect();
/// ferrocm_host::codeobject::check_module(&ferrocm_kernels::KERNEL_MODULE, &all).unwrap();
/// ```
///
/// # Errors
/// Every finding, one per line.
pub fn check_module(
    module: &ferrocm_kernels::KernelModule,
    kernels: &[&KernelInfo],
) -> Result<(), String> {
    let mut problems = Vec::new();
    let declared: std::collections::BTreeSet<&str> = kernels.iter().map(|k| k.name).collect();
    for co in module.code_objects {
        let rows = match parse_code_object(co.arch, co.bytes) {
            Ok(rows) => rows,
            Err(e) => {
                problems.push(e.to_string());
                continue;
            }
        };
        for k in kernels {
            if let Err(e) = check_args(&rows, k) {
                problems.push(format!("{}: {e}", co.arch));
            }
        }
        for r in rows
            .iter()
            .filter(|r| !declared.contains(r.kernel.as_str()))
        {
            problems.push(format!("{}: `{}` is not declared", co.arch, r.kernel));
        }
    }
    if let Some(ptx) = module.ptx {
        let entries = crate::ptx::entries(ptx.text);
        for k in kernels {
            if let Err(e) = crate::ptx::check_entry(&entries, k) {
                problems.push(format!("{}: {e}", ptx.target));
            }
        }
        for e in entries
            .iter()
            .filter(|e| !declared.contains(e.name.as_str()))
        {
            problems.push(format!("{}: `{}` is not declared", ptx.target, e.name));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!("{}: {}", module.name, problems.join("\n")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrocm_kernels::CODE_OBJECTS;
    use std::collections::BTreeSet;

    fn all_rows() -> Vec<KernelResources> {
        report(CODE_OBJECTS).expect("every embedded code object parses")
    }

    #[test]
    fn every_object_parses_for_its_arch_and_no_other() {
        assert!(!CODE_OBJECTS.is_empty());
        for co in CODE_OBJECTS {
            let rows =
                parse_code_object(co.arch, co.bytes).unwrap_or_else(|e| panic!("{}: {e}", co.arch));
            assert!(!rows.is_empty(), "{}: no kernels", co.arch);
            assert!(rows.iter().all(|r| r.arch == co.arch));
            assert!(
                rows.windows(2).all(|w| w[0].kernel < w[1].kernel),
                "{}: not sorted/unique",
                co.arch
            );
            for r in &rows {
                let wave_ok = if co.arch.starts_with("gfx9") {
                    r.wave_size == 64
                } else {
                    r.wave_size == 32
                };
                assert!(
                    wave_ok,
                    "{}/{}: wave size {}",
                    r.arch, r.kernel, r.wave_size
                );
                // The matrix-unit attention and convolution kernels are
                // empty stubs on archs without a matrix unit (the op layer
                // launches the row kernels and `conv_gemm_*` there), and
                // `gemm_wide_f32`, `conv_wgmma_*` and `attn_wgmma_*` on
                // every AMD arch (the op layer launches `gemm_f32`,
                // `conv_mma_*` or `conv_gemm_*`, and `attn_mma_*` there): no
                // registers.
                let stub = ["attn_mma_", "conv_mma_"]
                    .iter()
                    .any(|p| r.kernel.starts_with(p))
                    && ferrocm_kernels::host::matrix_unit_of(co.arch).is_none()
                    || r.kernel == "gemm_wide_f32"
                    || r.kernel.starts_with("conv_wgmma_")
                    || r.kernel.starts_with("attn_wgmma_");
                assert!(
                    r.occupancy >= 1 && (stub || r.vgpr > 0 && r.sgpr > 0),
                    "{r:?}"
                );
            }
            // The same bytes checked against every other arch are refused.
            for other in ARCHS.iter().map(|a| a.name).filter(|a| *a != co.arch) {
                assert!(matches!(
                    parse_code_object(other, co.bytes),
                    Err(CodeObjectError::ArchMismatch { .. })
                ));
            }
        }
    }

    #[test]
    fn objects_hold_exactly_the_declared_kernels() {
        let declared: BTreeSet<&str> = ferrocm_kernels::kernels().map(|k| k.name).collect();
        for co in CODE_OBJECTS {
            let rows = parse_code_object(co.arch, co.bytes).unwrap();
            let found: BTreeSet<&str> = rows.iter().map(|r| r.kernel.as_str()).collect();
            let missing: Vec<_> = declared.difference(&found).collect();
            let extra: Vec<_> = found.difference(&declared).collect();
            assert!(
                missing.is_empty() && extra.is_empty(),
                "{}: missing from the code object {missing:?}, not declared {extra:?}",
                co.arch
            );
        }
    }

    #[test]
    fn no_kernel_spills_or_uses_scratch() {
        let offenders: Vec<String> = all_rows()
            .iter()
            .filter(|r| r.scratch_bytes != 0 || r.vgpr_spills != 0 || r.sgpr_spills != 0)
            .map(|r| {
                format!(
                    "{}/{}: scratch {} B, {} VGPR spills, {} SGPR spills",
                    r.arch, r.kernel, r.scratch_bytes, r.vgpr_spills, r.sgpr_spills
                )
            })
            .collect();
        assert!(
            offenders.is_empty(),
            "kernels with scratch or spills:\n{}",
            offenders.join("\n")
        );
    }

    #[test]
    fn every_kernel_args_match_host_packing() {
        let rows = all_rows();
        let errors: Vec<String> = ferrocm_kernels::kernels()
            .filter_map(|k| check_args(&rows, k).err())
            .collect();
        assert!(errors.is_empty(), "{}", errors.join("\n"));
    }

    #[test]
    fn check_args_reports_mismatches() {
        fn entry(_: &[u64]) {}
        static ARGS: [ArgKind; 3] = [
            ArgKind::U32,
            ArgKind::Ptr {
                mutable: true,
                elem_size: 4,
            },
            ArgKind::F32,
        ];
        let kernel = KernelInfo::host_only("k", &ARGS, entry);
        let arg = |offset, size, kind: &str| ArgMeta {
            offset,
            size,
            value_kind: kind.into(),
        };
        let mut row = KernelResources {
            arch: "gfx942".into(),
            kernel: "k".into(),
            vgpr: 8,
            agpr: 0,
            sgpr: 16,
            lds_bytes: 0,
            scratch_bytes: 0,
            vgpr_spills: 0,
            sgpr_spills: 0,
            wave_size: 64,
            max_workgroup_size: 1024,
            occupancy: 8,
            kernarg_size: 20,
            args: vec![
                arg(0, 4, "by_value"),
                arg(8, 8, "global_buffer"),
                arg(16, 4, "by_value"),
                arg(24, 8, "hidden_block_count_x"),
            ],
        };
        assert_eq!(check_args(std::slice::from_ref(&row), &kernel), Ok(()));
        row.args[1].offset = 4;
        row.args[2].value_kind = "global_buffer".into();
        let err = check_args(std::slice::from_ref(&row), &kernel).unwrap_err();
        assert!(
            err.contains("argument 1") && err.contains("argument 2"),
            "{err}"
        );
        row.args.truncate(1);
        assert!(
            check_args(std::slice::from_ref(&row), &kernel)
                .unwrap_err()
                .contains("no such argument")
        );
        let other = KernelInfo {
            name: "absent",
            ..kernel
        };
        assert!(check_args(std::slice::from_ref(&row), &other).is_err());
    }

    #[test]
    fn occupancy_follows_the_arch_limits() {
        // (arch, vgpr, agpr, sgpr, lds, wave, workgroup, waves/SIMD); every
        // expected value is the `; Occupancy:` llc printed for such a kernel.
        let cases = [
            ("gfx942", 32, 0, 16, 0, 64, 256, 8),
            ("gfx942", 128, 0, 16, 0, 64, 256, 4),
            ("gfx942", 104, 0, 16, 0, 64, 256, 4),
            ("gfx942", 24, 248, 22, 0, 64, 256, 1),
            ("gfx90a", 64, 64, 22, 0, 64, 256, 4),
            // 160 KiB of LDS per CU holds one 96 KiB group: 4 waves over 4 SIMDs.
            ("gfx950", 24, 0, 22, 98304, 64, 256, 1),
            ("gfx908", 8, 128, 20, 0, 64, 256, 2),
            ("gfx906", 24, 0, 72, 0, 64, 256, 8),
            ("gfx906", 24, 0, 48, 16384, 64, 256, 4),
            ("gfx906", 24, 0, 48, 0, 64, 1024, 8),
            ("gfx900", 32, 0, 20, 0, 64, 256, 8),
            ("gfx1100", 32, 0, 16, 0, 32, 256, 16),
            ("gfx1100", 128, 0, 16, 0, 32, 256, 10),
            ("gfx1030", 128, 0, 16, 0, 32, 256, 8),
            ("gfx1030", 128, 0, 16, 0, 64, 256, 4),
            ("gfx1010", 32, 0, 16, 0, 32, 256, 20),
            ("gfx1201", 200, 0, 16, 0, 32, 256, 7),
            ("gfx1201", 200, 0, 16, 0, 64, 256, 3),
            // LDS counts in 512-byte granules (1280 on gfx950).
            ("gfx942", 24, 0, 24, 12800, 64, 64, 2),
            ("gfx942", 24, 0, 24, 12801, 64, 64, 1),
            ("gfx950", 24, 0, 24, 16384, 64, 192, 7),
            ("gfx1201", 24, 0, 16, 65536, 32, 256, 4),
        ];
        for (arch, v, a, s, lds, wave, wg, want) in cases {
            assert_eq!(
                occupancy(arch, v, a, s, lds, wave, wg),
                want,
                "{arch} v{v} a{a} s{s} lds{lds} w{wave} wg{wg}"
            );
        }
        assert_eq!(
            occupancy("gfx942", 32, 0, 16, 0, 32, 256),
            0,
            "no wave32 on gfx9"
        );
        assert_eq!(occupancy("gfx000", 32, 0, 16, 0, 64, 256), 0);
        assert_eq!(
            occupancy(
                "gfx942",
                u32::MAX,
                u32::MAX,
                u32::MAX,
                u32::MAX,
                64,
                u32::MAX
            ),
            1
        );
        assert_eq!(occupancy("gfx1100", 0, 0, 0, 0, 32, 0), 16);
        for arch in ARCHS.iter().map(|a| a.name) {
            let wave = if arch.starts_with("gfx9") { 64 } else { 32 };
            assert!(
                occupancy(arch, 32, 0, 32, 0, wave, 256) >= 8,
                "{arch} has no occupancy model"
            );
        }
    }

    #[test]
    fn arch_table_is_one_to_one() {
        let names: BTreeSet<_> = ARCHS.iter().map(|a| a.name).collect();
        let machs: BTreeSet<_> = ARCHS.iter().map(|a| a.mach).collect();
        assert_eq!(names.len(), ARCHS.len());
        assert_eq!(machs.len(), ARCHS.len());
        for co in CODE_OBJECTS {
            assert!(names.contains(co.arch), "{} missing from ARCHS", co.arch);
        }
    }

    #[test]
    fn corrupt_bytes_give_errors_not_panics() {
        let co = CODE_OBJECTS[0];
        let parse = |b: &[u8]| parse_code_object(co.arch, b);
        assert!(matches!(parse(b""), Err(CodeObjectError::NotElf { .. })));
        assert!(matches!(
            parse(b"\x7fELF garbage"),
            Err(CodeObjectError::NotElf { .. })
        ));
        assert!(matches!(
            parse(&co.bytes[..40]),
            Err(CodeObjectError::NotElf { .. })
        ));

        let mut elf32 = co.bytes.to_vec();
        elf32[4] = 1; // ELFCLASS32
        assert!(matches!(
            parse(&elf32),
            Err(CodeObjectError::WrongMachine { .. })
        ));
        let mut x86 = co.bytes.to_vec();
        x86[18..20].copy_from_slice(&62u16.to_le_bytes()); // EM_X86_64
        assert!(matches!(
            parse(&x86),
            Err(CodeObjectError::WrongMachine { .. })
        ));

        // The metadata note: n_type 32, then the name "AMDGPU\0" padded to 8.
        let at = co
            .bytes
            .windows(11)
            .position(|w| w == b"\x20\0\0\0AMDGPU\0")
            .expect("metadata note");
        let mut no_note = co.bytes.to_vec();
        no_note[at] = 33;
        assert!(matches!(
            parse(&no_note),
            Err(CodeObjectError::NoMetadata { .. })
        ));
        let mut bad_pack = co.bytes.to_vec();
        bad_pack[at + 12] = 0xc1; // a MessagePack marker that is never used
        assert!(matches!(
            parse(&bad_pack),
            Err(CodeObjectError::BadMetadata(_))
        ));
        let mut not_map = co.bytes.to_vec();
        not_map[at + 12] = 0x90; // an empty array instead of the root map
        assert!(matches!(
            parse(&not_map),
            Err(CodeObjectError::BadMetadata(_))
        ));

        // Truncations and byte flips anywhere: any result, but no panic.
        let n = co.bytes.len();
        for len in (0..n)
            .step_by((n / 97).max(1))
            .chain(n.saturating_sub(64)..n)
        {
            let _ = parse(&co.bytes[..len]);
        }
        let mut bytes = co.bytes.to_vec();
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        for _ in 0..400 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let i = (seed % n as u64) as usize;
            let old = bytes[i];
            bytes[i] = (seed >> 32) as u8;
            let _ = parse(&bytes);
            bytes[i] = old;
        }
        // Flips inside the header and the metadata, where they matter most.
        for i in (0..64).chain(at..(at + 600).min(n)) {
            for v in [0x00, 0xff, 0xc1, 0xdd] {
                let old = bytes[i];
                bytes[i] = v;
                let _ = parse(&bytes);
                bytes[i] = old;
            }
        }
    }
}
