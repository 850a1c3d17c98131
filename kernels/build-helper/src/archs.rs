//! The targets ferrocm's device layer builds for: every AMDGPU arch it has
//! code for (with its ISA family and ELF machine number), the default list,
//! and the NVIDIA PTX targets.

/// One AMDGPU arch: its name as rustc and the ROCm runtime spell it, the ISA
/// family the device layer keys on (`cfg(ferrocm_gfx9)` ...), and its
/// `EF_AMDGPU_MACH` (the low byte of a code object's `e_flags`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arch {
    /// `gfx942`, `gfx11-generic`, ...
    pub name: &'static str,
    /// `gfx9`, `gfx10`, `gfx11` or `gfx12`.
    pub family: &'static str,
    /// `EF_AMDGPU_MACH` value.
    pub mach: u32,
}

const fn arch(name: &'static str, family: &'static str, mach: u32) -> Arch {
    Arch { name, family, mach }
}

/// Every arch the device layer has code for.
///
/// The machine numbers are LLVM's (`llvm/include/llvm/BinaryFormat/ELF.h`,
/// the "AMDGPU `EF_AMDGPU_MACH` Values" table of AMDGPUUsage); each was
/// checked against the `e_flags` LLVM 23 (the `llc` of the pinned
/// nightly-2026-10-15) writes for that `-mcpu`, and gfx942, gfx1100, gfx1201
/// against objects rustc built through this crate.
///
/// ```
/// use ferrocm_build::archs::{ARCHS, find};
/// assert_eq!(find("gfx942").unwrap().mach, 0x4c);
/// assert!(ARCHS.iter().all(|a| a.family.starts_with("gfx")));
/// ```
pub const ARCHS: &[Arch] = &[
    arch("gfx900", "gfx9", 0x02c),
    arch("gfx906", "gfx9", 0x02f),
    arch("gfx908", "gfx9", 0x030),
    arch("gfx90a", "gfx9", 0x03f),
    arch("gfx942", "gfx9", 0x04c),
    arch("gfx950", "gfx9", 0x04f),
    arch("gfx9-generic", "gfx9", 0x051),
    arch("gfx9-4-generic", "gfx9", 0x05f),
    arch("gfx1010", "gfx10", 0x033),
    arch("gfx1011", "gfx10", 0x034),
    arch("gfx1012", "gfx10", 0x035),
    arch("gfx1030", "gfx10", 0x036),
    arch("gfx1031", "gfx10", 0x037),
    arch("gfx1032", "gfx10", 0x038),
    arch("gfx1034", "gfx10", 0x03e),
    arch("gfx1035", "gfx10", 0x03d),
    arch("gfx1036", "gfx10", 0x045),
    arch("gfx10-1-generic", "gfx10", 0x052),
    arch("gfx10-3-generic", "gfx10", 0x053),
    arch("gfx1100", "gfx11", 0x041),
    arch("gfx1101", "gfx11", 0x046),
    arch("gfx1102", "gfx11", 0x047),
    arch("gfx1103", "gfx11", 0x044),
    arch("gfx1150", "gfx11", 0x043),
    arch("gfx1151", "gfx11", 0x04a),
    arch("gfx1152", "gfx11", 0x055),
    arch("gfx11-generic", "gfx11", 0x054),
    arch("gfx1200", "gfx12", 0x048),
    arch("gfx1201", "gfx12", 0x04e),
    arch("gfx12-generic", "gfx12", 0x059),
];

/// The arch named `name`, if the device layer has code for it.
pub fn find(name: &str) -> Option<&'static Arch> {
    ARCHS.iter().find(|a| a.name == name)
}

/// The default list: CDNA3, CDNA2, RDNA3 (the three exact chips), RDNA2 and
/// RDNA4. Exact targets load on every ROCm 6 runtime; generic ones
/// (gfx11-generic, ...) need ROCm 6.3+ and can be named in `FERROCM_ARCHS`.
pub const DEFAULT_ARCHS: &[&str] = &[
    "gfx942", "gfx90a", "gfx1100", "gfx1101", "gfx1102", "gfx1030", "gfx1200", "gfx1201",
];

/// The PTX target by default: sm_80 PTX runs on every NVIDIA GPU from the
/// A100 on (the driver compiles it for the GPU it meets, sm_90 on an H100).
pub const DEFAULT_PTX_TARGET: &str = "sm_80";

/// The PTX targets `FERROCM_PTX` may name.
pub const PTX_TARGETS: &[&str] = &["sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90"];

/// RDNA3 parts with the smaller register file (1024 VGPRs per SIMD, not
/// 1536): 128 VGPRs per workitem at the default 1024-workitem bound
/// (`cfg(ferrocm_vgprs128)`).
pub fn has_128_vgprs(arch: &str) -> bool {
    matches!(arch, "gfx1102" | "gfx1103" | "gfx1150" | "gfx1152")
}

/// Archs with a signed 4 x 8-bit dot product (`llvm.amdgcn.sdot4`:
/// `v_dot4_i32_i8`/`v_dot4c_i32_i8` on gfx906+ and gfx1011+ RDNA2,
/// `v_dot4_i32_iu8` on RDNA3/4), `cfg(ferrocm_dot4)`; the rest (gfx900,
/// gfx1010 and the generic targets that cover them) multiply bytes. Found by
/// compiling the intrinsic with the pinned nightly's `llc` for every arch of
/// [`ARCHS`].
///
/// ```
/// use ferrocm_build::archs::has_dot4;
/// assert!(has_dot4("gfx942") && has_dot4("gfx1100") && !has_dot4("gfx900"));
/// ```
pub fn has_dot4(arch: &str) -> bool {
    !matches!(
        arch,
        "gfx900" | "gfx9-generic" | "gfx1010" | "gfx10-1-generic"
    ) && find(arch).is_some()
}

/// `FERROCM_ARCHS`: unset or empty for [`DEFAULT_ARCHS`], else a list
/// separated by commas or spaces; an unknown name is an error listing the
/// valid ones.
///
/// ```
/// use ferrocm_build::archs::parse_archs;
/// assert_eq!(parse_archs(Some("gfx942, gfx1100")).unwrap(), ["gfx942", "gfx1100"]);
/// assert!(parse_archs(Some("gfx000")).unwrap_err().contains("gfx942"));
/// assert_eq!(parse_archs(None).unwrap().len(), 8);
/// ```
///
/// # Errors
/// A message naming the unknown arch and the valid ones, or saying the list
/// is empty.
pub fn parse_archs(list: Option<&str>) -> Result<Vec<String>, String> {
    let Some(list) = list.filter(|l| !l.trim().is_empty()) else {
        return Ok(DEFAULT_ARCHS.iter().map(|s| s.to_string()).collect());
    };
    let mut archs: Vec<String> = Vec::new();
    for name in list.split(|c: char| c == ',' || c.is_whitespace()) {
        let name = name.trim();
        if name.is_empty() {
            continue;
        }
        if find(name).is_none() {
            let valid: Vec<&str> = ARCHS.iter().map(|a| a.name).collect();
            return Err(format!(
                "FERROCM_ARCHS: unknown arch `{name}`; valid names: {}",
                valid.join(", ")
            ));
        }
        if !archs.iter().any(|a| a == name) {
            archs.push(name.to_string());
        }
    }
    if archs.is_empty() {
        return Err("FERROCM_ARCHS is set but names no arch".into());
    }
    Ok(archs)
}

/// `FERROCM_PTX`: unset or empty for [`DEFAULT_PTX_TARGET`], `off` (or `0`,
/// `none`) for no PTX module, or one of [`PTX_TARGETS`].
///
/// ```
/// use ferrocm_build::archs::parse_ptx;
/// assert_eq!(parse_ptx(None).unwrap().as_deref(), Some("sm_80"));
/// assert_eq!(parse_ptx(Some("off")).unwrap(), None);
/// assert!(parse_ptx(Some("sm_1")).is_err());
/// ```
///
/// # Errors
/// A message naming the unknown target and the valid ones.
pub fn parse_ptx(v: Option<&str>) -> Result<Option<String>, String> {
    match v.map(str::trim) {
        None | Some("") => Ok(Some(DEFAULT_PTX_TARGET.into())),
        Some("off" | "0" | "none") => Ok(None),
        Some(sm) if PTX_TARGETS.contains(&sm) => Ok(Some(sm.into())),
        Some(other) => Err(format!(
            "FERROCM_PTX: unknown target `{other}`; valid: {}, or `off`",
            PTX_TARGETS.join(", ")
        )),
    }
}

// `matrix_unit_of(arch)`: the one list of which arch gets which matrix
// instruction, shared with ferrocm-kernels' host side (which includes the
// same file).
include!("../../src/host/matrix_unit.rs");
