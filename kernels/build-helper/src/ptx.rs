//! Reading a PTX module: its kernels (`.entry`) with their parameter sizes,
//! and which functions use local memory (a stack frame: spilled or
//! address-taken values). The build checks every module it makes with it;
//! `ferrocm-host` checks each kernel's parameters against its signature
//! before the first launch on a CUDA GPU.

/// One `.entry` of a PTX module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PtxEntry {
    /// The kernel's name.
    pub name: String,
    /// Size in bytes of each `.param`, in order.
    pub param_bytes: Vec<u32>,
}

/// Every `.entry` of `ptx`, in order.
///
/// ```
/// let ptx = ".visible .entry k(\n\t.param .u64 .ptr .align 1 k_param_0,\n\t.param .f32 k_param_1\n)\n{\n\tret;\n}\n";
/// let e = ferrocm_build::ptx::entries(ptx);
/// assert_eq!(e[0].name, "k");
/// assert_eq!(e[0].param_bytes, vec![8, 4]);
/// ```
pub fn entries(ptx: &str) -> Vec<PtxEntry> {
    let mut out = Vec::new();
    let mut rest = ptx;
    while let Some(at) = rest.find(".entry ") {
        let after = &rest[at + ".entry ".len()..];
        let name_end = after
            .find(|c: char| c == '(' || c.is_whitespace())
            .unwrap_or(after.len());
        let name = after[..name_end].to_string();
        let params_text = match (after.find('('), after.find(')')) {
            (Some(open), Some(close)) if open < close => &after[open + 1..close],
            _ => "",
        };
        let param_bytes = params_text
            .split(',')
            .filter_map(|p| {
                let p = p.trim();
                let ty = p.strip_prefix(".param")?.split_whitespace().next()?;
                Some(match ty {
                    ".u8" | ".s8" | ".b8" => 1,
                    ".u16" | ".s16" | ".b16" | ".f16" => 2,
                    ".u32" | ".s32" | ".b32" | ".f32" => 4,
                    _ => 8,
                })
            })
            .collect();
        out.push(PtxEntry { name, param_bytes });
        rest = &after[name_end..];
    }
    out
}

/// Names of the functions (kernels or not) that declare or access local
/// memory (`.local`: a stack frame, i.e. spilled or address-taken values).
///
/// ```
/// assert!(ferrocm_build::ptx::local_memory_users(".visible .entry k()\n{\n\tret;\n}\n").is_empty());
/// ```
pub fn local_memory_users(ptx: &str) -> Vec<String> {
    let mut users = Vec::new();
    let mut current = String::new();
    for line in ptx.lines() {
        let t = line.trim();
        for kw in [".entry ", ".func "] {
            if let Some(at) = t.find(kw) {
                let name = &t[at + kw.len()..];
                let end = name
                    .find(|c: char| c == '(' || c.is_whitespace())
                    .unwrap_or(name.len());
                current = name[..end].to_string();
            }
        }
        if (t.contains(".local") || t.contains("__local_depot"))
            && !t.starts_with("//")
            && !users.contains(&current)
        {
            users.push(current.clone());
        }
    }
    users
}
