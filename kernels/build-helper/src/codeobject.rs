//! What an AMDGPU code object holds, read without any ROCm tool: per
//! kernel its registers, LDS, scratch, spills, argument layout and the
//! occupancy those allow.
//!
//! The source is the code object itself: an ELF64 file (`e_machine` =
//! `EM_AMDGPU`) whose `e_flags` name the target and whose `NT_AMDGPU_METADATA`
//! note (owner `AMDGPU`, type 32) is a MessagePack map with one entry per
//! kernel under `amdhsa.kernels` (code object v3 and later; rustc writes v5).
//! `llvm-readobj --notes` prints the same note as YAML.
//!
//! The build checks every object it makes with it (no spills, no scratch,
//! the same kernels in every target); `ferrocm-host` reports and checks the
//! embedded objects with it at run time (`ferrocm kernels`, each kernel's
//! argument layout before its first launch on ROCm).

use crate::archs::ARCHS;
use object::Endianness;
use object::elf::{ELFCLASS32, EM_AMDGPU, FileHeader64};
use object::read::elf::{FileHeader, NoteIterator, ProgramHeader, SectionHeader};
use rmpv::Value;

/// The workgroup size [`parse_code_object`] computes occupancy
/// for (capped by each kernel's `.max_flat_workgroup_size`).
///
/// ```
/// assert_eq!(ferrocm_build::codeobject::REPORT_WORKGROUP_SIZE, 256);
/// ```
pub const REPORT_WORKGROUP_SIZE: u32 = 256;

/// `EF_AMDGPU_MACH`: the processor field of `e_flags`.
const EF_AMDGPU_MACH: u32 = 0xff;
/// `NT_AMDGPU_METADATA`: note type of the MessagePack metadata (owner `AMDGPU`).
const NT_AMDGPU_METADATA: u32 = 32;
/// The metadata is about five levels deep; a bound keeps hostile input from
/// recursing deeply in the decoder.
const MAX_METADATA_DEPTH: usize = 16;

/// One kernel of one code object, as its metadata describes it
/// (`ferrocm-host`'s tests read every embedded object with it).
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
/// use ferrocm_build::codeobject::ArgMeta;
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
/// use ferrocm_build::codeobject::{parse_code_object, CodeObjectError};
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
    match ARCHS.iter().find(|a| a.mach == mach) {
        Some(a) => a.name.to_string(),
        None => format!("EF_AMDGPU_MACH {mach:#04x}"),
    }
}

/// Reads the resources of every kernel in one code object built for `arch`,
/// sorted by kernel name. Checks that `bytes` is an AMDGPU ELF whose
/// `EF_AMDGPU_MACH` is `arch`'s; never panics, whatever the bytes.
///
/// ```
/// use ferrocm_build::codeobject::{parse_code_object, CodeObjectError};
/// assert!(matches!(parse_code_object("gfx942", b"\x7fELF"), Err(CodeObjectError::NotElf { .. })));
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
    let expected = crate::archs::find(arch).map(|a| a.mach);
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
/// `amdgpu-flat-work-group-size` on every arch of [`ARCHS`], both wave
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
/// use ferrocm_build::codeobject::occupancy;
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
