//! What each embedded AMDGPU code object holds, read without any ROCm tool:
//! per kernel its registers, LDS, scratch, spills, argument layout and the
//! occupancy those allow.
//!
//! The source is the code object itself: an ELF64 file (`e_machine` =
//! `EM_AMDGPU`) whose `e_flags` name the target and whose `NT_AMDGPU_METADATA`
//! note (owner `AMDGPU`, type 32) is a MessagePack map with one entry per
//! kernel under `amdhsa.kernels` (code object v3 and later; rustc writes v5).
//! `llvm-readobj --notes` prints the same note as YAML.
//!
//! ```
//! use ferrocm_host::codeobject;
//!
//! let rows = codeobject::report(ferrocm_kernels::CODE_OBJECTS).unwrap();
//! println!("{}", codeobject::format_table(&rows));
//! for k in ferrocm_kernels::kernels() {
//!     codeobject::check_args(&rows, k).unwrap();
//! }
//! ```

use ferrocm_kernels::host::{ArgKind, KernelInfo};
use object::Endianness;
use object::elf::{ELFCLASS32, EM_AMDGPU, FileHeader64};
use object::read::elf::{FileHeader, NoteIterator, ProgramHeader, SectionHeader};
use rmpv::Value;
use serde_json::json;

/// `EF_AMDGPU_MACH` (the low byte of `e_flags`) of every arch ferrocm can build.
///
/// Values from LLVM's `llvm/include/llvm/BinaryFormat/ELF.h` and the
/// "AMDGPU `EF_AMDGPU_MACH` Values" table of AMDGPUUsage; every entry was
/// checked against the `e_flags` LLVM 23 (the `llc` of the pinned
/// nightly-2026-10-15) writes for that `-mcpu`, and gfx942, gfx1100, gfx1201
/// against objects rustc built through `kernels/build.rs`.
///
/// ```
/// use ferrocm_host::codeobject::ARCH_MACH;
/// assert!(ARCH_MACH.contains(&("gfx942", 0x4c)));
/// ```
pub const ARCH_MACH: &[(&str, u32)] = &[
    ("gfx900", 0x02c),
    ("gfx906", 0x02f),
    ("gfx908", 0x030),
    ("gfx90a", 0x03f),
    ("gfx942", 0x04c),
    ("gfx950", 0x04f),
    ("gfx1010", 0x033),
    ("gfx1011", 0x034),
    ("gfx1012", 0x035),
    ("gfx1030", 0x036),
    ("gfx1031", 0x037),
    ("gfx1032", 0x038),
    ("gfx1034", 0x03e),
    ("gfx1035", 0x03d),
    ("gfx1036", 0x045),
    ("gfx1100", 0x041),
    ("gfx1101", 0x046),
    ("gfx1102", 0x047),
    ("gfx1103", 0x044),
    ("gfx1150", 0x043),
    ("gfx1151", 0x04a),
    ("gfx1152", 0x055),
    ("gfx1200", 0x048),
    ("gfx1201", 0x04e),
    ("gfx9-generic", 0x051),
    ("gfx9-4-generic", 0x05f),
    ("gfx10-1-generic", 0x052),
    ("gfx10-3-generic", 0x053),
    ("gfx11-generic", 0x054),
    ("gfx12-generic", 0x059),
];

/// The workgroup size [`report`] and [`parse_code_object`] compute occupancy
/// for (capped by each kernel's `.max_flat_workgroup_size`).
///
/// ```
/// assert_eq!(ferrocm_host::codeobject::REPORT_WORKGROUP_SIZE, 256);
/// ```
pub const REPORT_WORKGROUP_SIZE: u32 = 256;

/// `EF_AMDGPU_MACH`: the processor field of `e_flags`.
const EF_AMDGPU_MACH: u32 = 0xff;
/// `NT_AMDGPU_METADATA`: note type of the MessagePack metadata (owner `AMDGPU`).
const NT_AMDGPU_METADATA: u32 = 32;
/// The metadata is about five levels deep; a bound keeps hostile input from
/// recursing deeply in the decoder.
const MAX_METADATA_DEPTH: usize = 16;

/// One kernel of one code object, as its metadata describes it.
///
/// ```
/// use ferrocm_host::codeobject::parse_code_object;
///
/// let co = &ferrocm_kernels::CODE_OBJECTS[0];
/// let rows = parse_code_object(co.arch, co.bytes).unwrap();
/// let k = &rows[0];
/// assert_eq!(k.arch, co.arch);
/// assert!(k.wave_size == 32 || k.wave_size == 64);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct KernelResources {
    /// Target the object was built for (`gfx942`).
    pub arch: String,
    /// Kernel symbol name (`.name`, or `.symbol` without `.kd`).
    pub kernel: String,
    /// `.vgpr_count`, as LLVM writes it: on gfx90a/gfx942/gfx950 (one register
    /// file for VGPRs and AGPRs) that already includes the AGPRs, i.e. the
    /// architectural VGPRs rounded up to 4 plus `agpr`; on gfx908 it is the
    /// larger of the two counts.
    pub vgpr: u32,
    /// `.agpr_count` (accumulation VGPRs, CDNA only); 0 when absent.
    pub agpr: u32,
    /// `.sgpr_count`, including VCC, FLAT_SCRATCH and XNACK_MASK where used.
    pub sgpr: u32,
    /// `.group_segment_fixed_size`: static LDS per workgroup, in bytes
    /// (launch-sized LDS comes on top).
    pub lds_bytes: u32,
    /// `.private_segment_fixed_size`: scratch per work-item, in bytes.
    pub scratch_bytes: u32,
    /// `.vgpr_spill_count`; 0 when absent.
    pub vgpr_spills: u32,
    /// `.sgpr_spill_count`; 0 when absent.
    pub sgpr_spills: u32,
    /// `.wavefront_size` (32 or 64).
    pub wave_size: u32,
    /// `.max_flat_workgroup_size`.
    pub max_workgroup_size: u32,
    /// Waves per SIMD ([`occupancy`]) for workgroups of
    /// [`REPORT_WORKGROUP_SIZE`] (or the kernel's maximum, if smaller).
    pub occupancy: u32,
    /// `.kernarg_segment_size` in bytes, hidden arguments included.
    pub kernarg_size: u32,
    /// `.args`, in order, hidden ones included.
    pub args: Vec<ArgMeta>,
}

/// One kernel argument as the code object's metadata lays it out.
///
/// ```
/// use ferrocm_host::codeobject::ArgMeta;
/// let a = ArgMeta { offset: 8, size: 8, value_kind: "global_buffer".into() };
/// assert!(!a.value_kind.starts_with("hidden_"));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ArgMeta {
    /// `.offset` in the kernarg segment, in bytes.
    pub offset: u32,
    /// `.size` in bytes.
    pub size: u32,
    /// `.value_kind`: `global_buffer`, `by_value`, `hidden_*`, ...
    pub value_kind: String,
}

/// Why a code object could not be read.
///
/// ```
/// use ferrocm_host::codeobject::{parse_code_object, CodeObjectError};
/// let err = parse_code_object("gfx942", b"not an elf").unwrap_err();
/// assert!(matches!(err, CodeObjectError::NotElf { .. }));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CodeObjectError {
    /// The bytes are not a (well-formed) ELF64 file.
    #[error("{arch}: not a readable ELF64 code object: {message}")]
    NotElf {
        /// Arch the object was expected to be built for.
        arch: String,
        /// What is wrong.
        message: String,
    },
    /// An ELF file, but not an AMDGPU one.
    #[error("{arch}: not an AMDGPU code object: {message}")]
    WrongMachine {
        /// Arch the object was expected to be built for.
        arch: String,
        /// What is wrong.
        message: String,
    },
    /// An AMDGPU code object built for another target than `arch`.
    #[error("code object expected for {arch} targets {} (e_flags {found_flags:#x})", target_name(.found_flags))]
    ArchMismatch {
        /// Arch the object was expected to be built for.
        arch: String,
        /// The object's `e_flags`.
        found_flags: u32,
    },
    /// No `NT_AMDGPU_METADATA` note (e.g. a code object v2, or stripped notes).
    #[error("{arch}: {message}")]
    NoMetadata {
        /// Arch the object was expected to be built for.
        arch: String,
        /// What is missing.
        message: String,
    },
    /// The metadata note is not the MessagePack map expected (arch included).
    #[error("bad AMDGPU metadata: {0}")]
    BadMetadata(String),
}

fn target_name(flags: &u32) -> String {
    let mach = flags & EF_AMDGPU_MACH;
    match ARCH_MACH.iter().find(|(_, m)| *m == mach) {
        Some((name, _)) => (*name).to_string(),
        None => format!("EF_AMDGPU_MACH {mach:#04x}"),
    }
}

/// Reads the resources of every kernel in one code object built for `arch`,
/// sorted by kernel name. Checks that `bytes` is an AMDGPU ELF whose
/// `EF_AMDGPU_MACH` is `arch`'s; never panics, whatever the bytes.
///
/// ```
/// use ferrocm_host::codeobject::{parse_code_object, CodeObjectError};
///
/// let co = ferrocm_kernels::CODE_OBJECTS[0];
/// let rows = parse_code_object(co.arch, co.bytes).unwrap();
/// assert!(rows.windows(2).all(|w| w[0].kernel <= w[1].kernel));
/// let other = if co.arch == "gfx900" { "gfx906" } else { "gfx900" };
/// assert!(matches!(
///     parse_code_object(other, co.bytes),
///     Err(CodeObjectError::ArchMismatch { .. })
/// ));
/// ```
///
/// # Errors
/// A [`CodeObjectError`] when the bytes are not an AMDGPU ELF for `arch` or its
/// metadata note cannot be read.
pub fn parse_code_object(
    arch: &str,
    bytes: &[u8],
) -> Result<Vec<KernelResources>, CodeObjectError> {
    let not_elf = |message: String| CodeObjectError::NotElf {
        arch: arch.to_string(),
        message,
    };
    let header = FileHeader64::<Endianness>::parse(bytes).map_err(|e| {
        if bytes.starts_with(b"\x7fELF") && bytes.get(4) == Some(&ELFCLASS32) {
            CodeObjectError::WrongMachine {
                arch: arch.to_string(),
                message: "32-bit ELF (AMDGPU HSA code objects are ELF64)".into(),
            }
        } else {
            not_elf(e.to_string())
        }
    })?;
    let endian = header.endian().map_err(|e| not_elf(e.to_string()))?;
    let machine = header.e_machine(endian);
    if machine != EM_AMDGPU {
        return Err(CodeObjectError::WrongMachine {
            arch: arch.to_string(),
            message: format!("e_machine is {machine}, not EM_AMDGPU ({EM_AMDGPU})"),
        });
    }
    let flags = header.e_flags(endian);
    let expected = ARCH_MACH.iter().find(|(a, _)| *a == arch).map(|(_, m)| *m);
    if expected != Some(flags & EF_AMDGPU_MACH) {
        return Err(CodeObjectError::ArchMismatch {
            arch: arch.to_string(),
            found_flags: flags,
        });
    }
    let note = metadata_note(header, endian, bytes)
        .map_err(|e| not_elf(format!("malformed notes: {e}")))?
        .ok_or_else(|| CodeObjectError::NoMetadata {
            arch: arch.to_string(),
            message: "no NT_AMDGPU_METADATA note (owner \"AMDGPU\", type 32)".into(),
        })?;
    let bad = |msg: String| CodeObjectError::BadMetadata(format!("{arch}: {msg}"));
    let doc = rmpv::decode::read_value_with_max_depth(&mut &note[..], MAX_METADATA_DEPTH)
        .map_err(|e| bad(format!("not MessagePack: {e}")))?;
    let kernels = field(&doc, "amdhsa.kernels")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("no `amdhsa.kernels` array".into()))?;
    let mut rows = kernels
        .iter()
        .map(|k| kernel_resources(arch, k))
        .collect::<Result<Vec<_>, _>>()
        .map_err(bad)?;
    rows.sort_by(|a, b| a.kernel.cmp(&b.kernel));
    Ok(rows)
}

/// The desc of the first `AMDGPU`/`NT_AMDGPU_METADATA` note, looked up in the
/// note sections, then (for objects without section headers) in `PT_NOTE`s.
fn metadata_note<'d>(
    header: &FileHeader64<Endianness>,
    endian: Endianness,
    data: &'d [u8],
) -> object::read::Result<Option<&'d [u8]>> {
    fn find<'d>(
        endian: Endianness,
        notes: Option<NoteIterator<'d, FileHeader64<Endianness>>>,
    ) -> object::read::Result<Option<&'d [u8]>> {
        let Some(mut notes) = notes else {
            return Ok(None);
        };
        while let Some(note) = notes.next()? {
            if note.name() == b"AMDGPU" && note.n_type(endian) == NT_AMDGPU_METADATA {
                return Ok(Some(note.desc()));
            }
        }
        Ok(None)
    }
    for section in header.section_headers(endian, data)? {
        if let Some(desc) = find(endian, section.notes(endian, data)?)? {
            return Ok(Some(desc));
        }
    }
    for segment in header.program_headers(endian, data)? {
        if let Some(desc) = find(endian, segment.notes(endian, data)?)? {
            return Ok(Some(desc));
        }
    }
    Ok(None)
}

/// `map[key]` for a MessagePack map with string keys.
fn field<'v>(map: &'v Value, key: &str) -> Option<&'v Value> {
    map.as_map()?
        .iter()
        .find(|(k, _)| k.as_str() == Some(key))
        .map(|(_, v)| v)
}

/// `map[key]` as a u32; `default` when absent (`None`: the key is required).
fn uint(map: &Value, key: &str, default: Option<u32>, what: &str) -> Result<u32, String> {
    match (field(map, key), default) {
        (None, Some(d)) => Ok(d),
        (None, None) => Err(format!("{what}: `{key}` missing")),
        (Some(v), _) => v
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| format!("{what}: `{key}` is {v}, not a 32-bit unsigned integer")),
    }
}

fn kernel_resources(arch: &str, k: &Value) -> Result<KernelResources, String> {
    let kernel = match field(k, ".name").and_then(Value::as_str) {
        Some(name) => name.to_string(),
        None => field(k, ".symbol")
            .and_then(Value::as_str)
            .map(|s| s.strip_suffix(".kd").unwrap_or(s).to_string())
            .ok_or("a kernel has neither `.name` nor `.symbol`")?,
    };
    let what = kernel.as_str();
    let args = match field(k, ".args") {
        None => Vec::new(),
        Some(list) => list
            .as_array()
            .ok_or_else(|| format!("{what}: `.args` is not an array"))?
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let what = format!("{what} argument {i}");
                Ok(ArgMeta {
                    offset: uint(a, ".offset", None, &what)?,
                    size: uint(a, ".size", None, &what)?,
                    value_kind: field(a, ".value_kind")
                        .and_then(Value::as_str)
                        .ok_or_else(|| format!("{what}: `.value_kind` missing or not a string"))?
                        .to_string(),
                })
            })
            .collect::<Result<_, String>>()?,
    };
    let mut row = KernelResources {
        arch: arch.to_string(),
        vgpr: uint(k, ".vgpr_count", None, what)?,
        agpr: uint(k, ".agpr_count", Some(0), what)?,
        sgpr: uint(k, ".sgpr_count", None, what)?,
        lds_bytes: uint(k, ".group_segment_fixed_size", None, what)?,
        scratch_bytes: uint(k, ".private_segment_fixed_size", None, what)?,
        vgpr_spills: uint(k, ".vgpr_spill_count", Some(0), what)?,
        sgpr_spills: uint(k, ".sgpr_spill_count", Some(0), what)?,
        wave_size: uint(k, ".wavefront_size", None, what)?,
        max_workgroup_size: uint(k, ".max_flat_workgroup_size", None, what)?,
        occupancy: 0,
        kernarg_size: uint(k, ".kernarg_segment_size", None, what)?,
        args,
        kernel,
    };
    // `occupancy` takes architectural VGPRs; `.vgpr_count` of a unified
    // register file already holds the AGPRs (rounded-up VGPRs + AGPRs).
    let arch_vgprs = match limits(arch, row.wave_size) {
        Some(l) if l.unified_agprs && row.agpr > 0 => row.vgpr.saturating_sub(row.agpr),
        _ => row.vgpr,
    };
    let workgroup = REPORT_WORKGROUP_SIZE.min(row.max_workgroup_size.max(1));
    row.occupancy = occupancy(
        arch,
        arch_vgprs,
        row.agpr,
        row.sgpr,
        row.lds_bytes,
        row.wave_size,
        workgroup,
    );
    Ok(row)
}

/// The register and LDS budget of one arch at one wave size.
struct Limits {
    /// Wave slots per SIMD (LLVM `getMaxWavesPerEU`).
    max_waves: u32,
    /// VGPRs per SIMD lane for this wave size (`getTotalNumVGPRs`).
    vgpr_file: u32,
    /// VGPR allocation granule (`getVGPRAllocGranule`).
    vgpr_granule: u32,
    /// VGPRs and AGPRs share one file, AGPRs after the VGPRs rounded to 4
    /// (`getTotalNumVGPRs(has90AInsts, AGPRs, VGPRs)`); otherwise the larger
    /// of the two counts is what is allocated.
    unified_agprs: bool,
    /// SGPRs limit occupancy (gfx9 only: `isSGPROccupancyLimited` is Major < 10).
    sgpr_limited: bool,
    /// LDS a workgroup's CU (gfx9) or WGP (gfx10+) holds (`getLocalMemorySize`).
    lds_bytes: u32,
    /// LDS allocation granule in bytes (`getLdsDwGranularity` x 4).
    lds_granule: u32,
    /// SIMDs sharing that LDS (`getEUsPerCU`).
    simds: u32,
    /// Workgroups with barriers per CU/WGP (`getMaxWorkGroupsPerCU`).
    max_barriers: u32,
}

/// The limits LLVM's AMDGPU backend (AMDGPUBaseInfo.cpp `IsaInfo`,
/// AMDGPUSubtarget.cpp, LLVM 23 as shipped in nightly-2026-10-15) uses for its
/// occupancy estimate, for `arch` at `wave_size`; `None` for an unknown arch
/// or a wave size it does not run.
///
/// Cross-checked: `occupancy` equals the `; Occupancy:` that `llc -mcpu=<arch>`
/// prints for kernels with known VGPR/AGPR/SGPR/LDS use and
/// `amdgpu-flat-work-group-size` on every arch of [`ARCH_MACH`], both wave
/// sizes on gfx10+ (about 3000 cases).
fn limits(arch: &str, wave_size: u32) -> Option<Limits> {
    const KIB: u32 = 1024;
    let gfx9 = |max_waves, vgpr_file, vgpr_granule, unified_agprs, lds_bytes, lds_granule| Limits {
        max_waves,
        vgpr_file,
        vgpr_granule,
        unified_agprs,
        sgpr_limited: true,
        lds_bytes,
        lds_granule,
        simds: 4,
        max_barriers: 16,
    };
    match arch {
        // GCN5 and CDNA1: 256 VGPRs per lane, granule 4, 10 waves per SIMD,
        // 64 KiB LDS per CU of 4 SIMDs in 512-byte granules. gfx908's 256
        // AGPRs are a second file.
        "gfx900" | "gfx906" | "gfx908" | "gfx9-generic" if wave_size == 64 => {
            Some(gfx9(10, 256, 4, false, 64 * KIB, 512))
        }
        // CDNA2/3 (FeatureGFX90AInsts): 512 unified VGPR+AGPR per lane,
        // granule 8, 8 waves per SIMD, 64 KiB LDS per CU.
        "gfx90a" | "gfx942" | "gfx9-4-generic" if wave_size == 64 => {
            Some(gfx9(8, 512, 8, true, 64 * KIB, 512))
        }
        // CDNA4: as CDNA3 but 160 KiB LDS per CU in 1280-byte granules
        // (FeatureAddressableLocalMemorySize163840).
        "gfx950" if wave_size == 64 => Some(gfx9(8, 512, 8, true, 160 * KIB, 1280)),
        _ if wave_size == 32 || wave_size == 64 => {
            // RDNA, figures for wave32; wave64 halves the per-lane file and
            // the granule. Max waves per SIMD: 20 on gfx10.1, 16 from gfx10.3.
            let (file, granule, max_waves) = match arch {
                "gfx1010" | "gfx1011" | "gfx1012" | "gfx10-1-generic" => (1024, 8, 20),
                "gfx1030" | "gfx1031" | "gfx1032" | "gfx1034" | "gfx1035" | "gfx1036"
                | "gfx10-3-generic" | "gfx1102" | "gfx1103" | "gfx1150" | "gfx1152"
                | "gfx11-generic" => (1024, 16, 16),
                // 1.5x VGPRs (Feature1_5xVGPRs): 1536 per lane, granule 24.
                "gfx1100" | "gfx1101" | "gfx1151" | "gfx1200" | "gfx1201" | "gfx12-generic" => {
                    (1536, 24, 16)
                }
                _ => return None,
            };
            let halve = if wave_size == 64 { 2 } else { 1 };
            // WGP mode (rustc's and LLVM's default, no `cumode`): a workgroup
            // may use the WGP's 4 SIMDs and 2 x 64 KiB LDS (512-byte granules,
            // at most 64 KiB per workgroup), 32 barriers.
            Some(Limits {
                max_waves,
                vgpr_file: file / halve,
                vgpr_granule: granule / halve,
                unified_agprs: false,
                sgpr_limited: false,
                lds_bytes: 128 * KIB,
                lds_granule: 512,
                simds: 4,
                max_barriers: 32,
            })
        }
        _ => None,
    }
}

/// Waves per SIMD a kernel can keep resident on `arch`, given its register
/// use, static LDS per workgroup and workgroup size: the least of what the
/// VGPR file, the SGPR file (gfx9 only) and the CU's/WGP's LDS, wave slots
/// and barriers allow. 0 for an unknown arch or unsupported wave size.
///
/// `vgpr` are architectural VGPRs; on gfx90a/gfx942/gfx950 the `agpr` are
/// allocated after them, rounded up to 4, in the same 512-entry file. The
/// rules are LLVM's (see `limits` in the source): VGPRs round up to the
/// arch's granule; on gfx9, with the trap handler the HSA ABI enables, each
/// wave takes its SGPRs rounded to 16 plus 16 from 800 per SIMD; workgroups
/// per CU are limited by LDS, by the wave slots (and 16, or 32 on a gfx10+
/// WGP, barriers when a workgroup has several waves), and their waves spread
/// over the SIMDs, rounded up (the busiest SIMD); LDS is counted in whole
/// allocation granules (512 bytes, 1280 on gfx950).
///
/// ```
/// use ferrocm_host::codeobject::occupancy;
/// assert_eq!(occupancy("gfx942", 32, 0, 16, 0, 64, 256), 8);
/// assert_eq!(occupancy("gfx942", 128, 0, 16, 0, 64, 256), 4);
/// assert_eq!(occupancy("gfx1100", 32, 0, 16, 0, 32, 256), 16);
/// assert_eq!(occupancy("gfx942", 32, 0, 16, 32 * 1024, 64, 256), 2);
/// assert_eq!(occupancy("gfx000", 32, 0, 16, 0, 64, 256), 0);
/// ```
pub fn occupancy(
    arch: &str,
    vgpr: u32,
    agpr: u32,
    sgpr: u32,
    lds_bytes: u32,
    wave_size: u32,
    workgroup_size: u32,
) -> u32 {
    let Some(l) = limits(arch, wave_size) else {
        return 0;
    };
    let round_up = |n: u32, granule: u32| n.checked_next_multiple_of(granule).unwrap_or(u32::MAX);
    let regs = if l.unified_agprs && agpr > 0 {
        round_up(vgpr, 4).saturating_add(agpr)
    } else {
        vgpr.max(agpr)
    };
    let by_vgpr = if regs < l.vgpr_granule {
        l.max_waves
    } else {
        (l.vgpr_file / round_up(regs, l.vgpr_granule)).clamp(1, l.max_waves)
    };
    let by_sgpr = if l.sgpr_limited {
        (800 / round_up(sgpr, 16).saturating_add(16)).clamp(1, l.max_waves)
    } else {
        l.max_waves
    };
    let waves_per_group = workgroup_size.max(1).div_ceil(wave_size);
    let slots = l.max_waves * l.simds;
    let groups_by_slots = if waves_per_group == 1 {
        slots
    } else {
        (slots / waves_per_group).min(l.max_barriers)
    };
    let groups_by_lds = l.lds_bytes / round_up(lds_bytes, l.lds_granule).max(1);
    let by_groups = if groups_by_lds == 0 {
        1
    } else {
        let waves = waves_per_group.saturating_mul(groups_by_slots.min(groups_by_lds));
        waves.div_ceil(l.simds).clamp(1, l.max_waves)
    };
    by_vgpr.min(by_sgpr).min(by_groups)
}

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

/// The rows as one JSON array of objects whose fields come in this order:
/// `arch`, `kernel`, `vgpr`, `agpr`, `sgpr`, `lds_bytes`, `scratch_bytes`,
/// `vgpr_spills`, `sgpr_spills`, `wave_size`, `occupancy`,
/// `max_workgroup_size`, `kernarg_size`; one object per line.
///
/// ```
/// use ferrocm_host::codeobject::{report, to_json};
/// let text = to_json(&report(ferrocm_kernels::CODE_OBJECTS).unwrap());
/// let v: serde_json::Value = serde_json::from_str(&text).unwrap();
/// assert!(v[0]["occupancy"].as_u64().is_some());
/// ```
pub fn to_json(rows: &[KernelResources]) -> String {
    let objects: Vec<String> = rows
        .iter()
        .map(|r| {
            // Written field by field: a serde_json map would reorder the keys.
            let fields = [
                ("arch", json!(r.arch)),
                ("kernel", json!(r.kernel)),
                ("vgpr", json!(r.vgpr)),
                ("agpr", json!(r.agpr)),
                ("sgpr", json!(r.sgpr)),
                ("lds_bytes", json!(r.lds_bytes)),
                ("scratch_bytes", json!(r.scratch_bytes)),
                ("vgpr_spills", json!(r.vgpr_spills)),
                ("sgpr_spills", json!(r.sgpr_spills)),
                ("wave_size", json!(r.wave_size)),
                ("occupancy", json!(r.occupancy)),
                ("max_workgroup_size", json!(r.max_workgroup_size)),
                ("kernarg_size", json!(r.kernarg_size)),
            ];
            let body: Vec<String> = fields
                .iter()
                .map(|(k, v)| format!("{}:{v}", json!(k)))
                .collect();
            format!("  {{{}}}", body.join(","))
        })
        .collect();
    if objects.is_empty() {
        "[]".into()
    } else {
        format!("[\n{}\n]", objects.join(",\n"))
    }
}

/// The rows as an aligned text table, one line per kernel under a header.
///
/// ```
/// use ferrocm_host::codeobject::{format_table, report};
/// let table = format_table(&report(ferrocm_kernels::CODE_OBJECTS).unwrap());
/// assert!(table.lines().next().unwrap().starts_with("arch"));
/// ```
pub fn format_table(rows: &[KernelResources]) -> String {
    const HEADER: [&str; 13] = [
        "arch",
        "kernel",
        "vgpr",
        "agpr",
        "sgpr",
        "lds_bytes",
        "scratch_bytes",
        "vgpr_spills",
        "sgpr_spills",
        "wave_size",
        "occupancy",
        "max_wg",
        "kernarg",
    ];
    let cells: Vec<[String; 13]> = rows
        .iter()
        .map(|r| {
            let n = [
                r.vgpr,
                r.agpr,
                r.sgpr,
                r.lds_bytes,
                r.scratch_bytes,
                r.vgpr_spills,
                r.sgpr_spills,
                r.wave_size,
                r.occupancy,
                r.max_workgroup_size,
                r.kernarg_size,
            ];
            std::array::from_fn(|i| match i {
                0 => r.arch.clone(),
                1 => r.kernel.clone(),
                _ => n[i - 2].to_string(),
            })
        })
        .collect();
    let width: [usize; 13] = std::array::from_fn(|i| {
        cells
            .iter()
            .map(|c| c[i].len())
            .fold(HEADER[i].len(), usize::max)
    });
    let line = |c: [&str; 13]| {
        let text: Vec<String> = (0..13)
            .map(|i| match i {
                0 | 1 => format!("{:<w$}", c[i], w = width[i]),
                _ => format!("{:>w$}", c[i], w = width[i]),
            })
            .collect();
        text.join("  ").trim_end().to_string() + "\n"
    };
    let mut out = line(HEADER);
    for c in &cells {
        out += &line(std::array::from_fn(|i| c[i].as_str()));
    }
    out
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
                // The matrix-unit attention kernels are empty stubs on archs
                // without a matrix unit (the op layer launches the row
                // kernels there): no registers.
                let stub = r.kernel.starts_with("attn_mma_")
                    && ferrocm_kernels::host::matrix_unit_of(co.arch).is_none();
                assert!(
                    r.occupancy >= 1 && (stub || r.vgpr > 0 && r.sgpr > 0),
                    "{r:?}"
                );
            }
            // The same bytes checked against every other arch are refused.
            for (other, _) in ARCH_MACH.iter().filter(|(a, _)| *a != co.arch) {
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
        let kernel = KernelInfo {
            name: "k",
            args: &ARGS,
            entry,
        };
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
    fn json_is_one_array_with_the_fields_in_order() {
        const FIELDS: [&str; 11] = [
            "arch",
            "kernel",
            "vgpr",
            "agpr",
            "sgpr",
            "lds_bytes",
            "scratch_bytes",
            "vgpr_spills",
            "sgpr_spills",
            "wave_size",
            "occupancy",
        ];
        let rows = all_rows();
        let text = to_json(&rows);
        let value: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
        let array = value.as_array().expect("one array");
        assert_eq!(array.len(), rows.len());
        for (obj, row) in array.iter().zip(&rows) {
            assert_eq!(obj["arch"], row.arch.as_str());
            assert_eq!(obj["kernel"], row.kernel.as_str());
            for f in &FIELDS[2..] {
                assert!(obj[f].is_u64(), "{f} missing in {obj}");
            }
            assert_eq!(obj["occupancy"], row.occupancy);
        }
        let first = text.lines().nth(1).expect("an object line");
        let positions: Vec<usize> = FIELDS
            .iter()
            .map(|f| first.find(&format!("\"{f}\":")).expect("field present"))
            .collect();
        assert!(
            positions.windows(2).all(|w| w[0] < w[1]),
            "field order: {first}"
        );
        assert_eq!(to_json(&[]), "[]");
        let table = format_table(&rows);
        assert_eq!(table.lines().count(), rows.len() + 1);
        assert!(table.lines().next().unwrap().starts_with("arch"));
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
        for (arch, _) in ARCH_MACH {
            let wave = if arch.starts_with("gfx9") { 64 } else { 32 };
            assert!(
                occupancy(arch, 32, 0, 32, 0, wave, 256) >= 8,
                "{arch} has no occupancy model"
            );
        }
    }

    #[test]
    fn arch_table_is_one_to_one() {
        let names: BTreeSet<_> = ARCH_MACH.iter().map(|a| a.0).collect();
        let machs: BTreeSet<_> = ARCH_MACH.iter().map(|a| a.1).collect();
        assert_eq!(names.len(), ARCH_MACH.len());
        assert_eq!(machs.len(), ARCH_MACH.len());
        for co in CODE_OBJECTS {
            assert!(
                names.contains(co.arch),
                "{} missing from ARCH_MACH",
                co.arch
            );
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
        elf32[4] = ELFCLASS32;
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
