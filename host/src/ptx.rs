//! Reading the embedded PTX module: its kernels (`.entry`) with their
//! parameter sizes, and whether any function uses local memory; and the
//! module made for an sm_90 or newer GPU ([`specialise_for_sm90`]), or for
//! the sm_90a one whose kernels use the warpgroup product
//! ([`specialise_for_sm90a`]).
//!
//! The CUDA device checks each kernel's parameters here against its
//! [`KernelInfo`] before its first launch (`cuLaunchKernel` reads one value
//! of the parameter's size per pointer it is given, so a mismatch would be a
//! silent wrong argument). The tests check every declared kernel against the
//! module and that nothing spills to local memory.

pub use ferrocm_build::ptx::{PtxEntry, entries, local_memory_users};
use ferrocm_kernels::host::{ArgKind, KernelInfo};

/// The parameter sizes a kernel's [`KernelInfo`] implies: 8 bytes per
/// pointer and 64-bit scalar, 4 per 32-bit scalar.
pub fn expected_param_bytes(kernel: &KernelInfo) -> Vec<u32> {
    kernel
        .args
        .iter()
        .map(|a: &ArgKind| a.size() as u32)
        .collect()
}

/// Checks `kernel` against its `.entry` in `ptx`: Err names what differs.
///
/// # Errors
/// A message naming the kernel when it is missing from the module or its
/// parameter sizes differ.
pub fn check_entry(entries: &[PtxEntry], kernel: &KernelInfo) -> Result<(), String> {
    let entry = entries
        .iter()
        .find(|e| e.name == kernel.name)
        .ok_or_else(|| format!("`{}` is not in the PTX module", kernel.name))?;
    let want = expected_param_bytes(kernel);
    if entry.param_bytes != want {
        return Err(format!(
            "`{}`: the PTX declares parameters of {:?} bytes, the kernel's signature {:?}",
            kernel.name, entry.param_bytes, want
        ));
    }
    Ok(())
}

/// The PTX ISA version that first has `griddepcontrol` (sm_90).
const SM90_PTX_VERSION: (u32, u32) = (7, 8);

/// The PTX ISA version that first has `wgmma` (sm_90a).
const SM90A_PTX_VERSION: (u32, u32) = (8, 0);

/// `ptx` (built for sm_80 or another target) as a module for an sm_90 or
/// newer GPU: `.target` raised to sm_90, `.version` to at least 7.8, and
/// every instruction the device layer wrote behind
/// [`SM90_ONLY`](ferrocm_kernels::host::SM90_ONLY) uncommented, so
/// `wait_prior_grids` and `release_dependent_grids` do their work there.
/// PTX of an older target is valid PTX of a newer one, and the driver
/// compiles the module for the GPU it meets either way: the code is the
/// same but for those instructions. `None` when the text has no marker (no
/// kernel uses one: nothing to do) or no `.version` / `.target` line.
///
/// ```
/// use ferrocm_host::ptx::specialise_for_sm90;
/// let ptx = ".version 7.0\n.target sm_80\n.address_size 64\n\t// ferrocm-sm90: griddepcontrol.wait;\n";
/// let s = specialise_for_sm90(ptx).unwrap();
/// assert_eq!(s, ".version 7.8\n.target sm_90\n.address_size 64\n\tgriddepcontrol.wait;\n");
/// assert!(specialise_for_sm90(".version 7.0\n.target sm_80\n").is_none());
/// ```
pub fn specialise_for_sm90(ptx: &str) -> Option<String> {
    use ferrocm_kernels::host::SM90_ONLY;
    if !ptx.contains(SM90_ONLY) {
        return None;
    }
    rewrite(
        ptx,
        SM90_PTX_VERSION,
        |sm, rest| format!("sm_{}{rest}", sm.max(90)),
        &[SM90_ONLY],
    )
}

/// `ptx` as a module for a GPU of compute capability 9.0 (H100, H200)
/// that runs the warpgroup product: `.target sm_90a` (whose code runs on
/// that GPU alone), `.version` at least 8.0, the lines behind
/// [`SM90A_ONLY`](ferrocm_kernels::host::SM90A_ONLY) uncommented, and,
/// with `early`, those behind [`SM90_ONLY`](ferrocm_kernels::host::SM90_ONLY)
/// too ([`specialise_for_sm90`]). `None` when the text has no sm_90a line,
/// its target is newer than sm_90, or it lacks a `.version` / `.target`
/// line.
///
/// ```
/// use ferrocm_host::ptx::specialise_for_sm90a;
/// let ptx = ".version 7.0\n.target sm_80\n// ferrocm-sm90a: wgmma.fence.sync.aligned;\n// ferrocm-sm90: griddepcontrol.wait;\n";
/// let s = specialise_for_sm90a(ptx, false).unwrap();
/// assert_eq!(s, ".version 8.0\n.target sm_90a\nwgmma.fence.sync.aligned;\n// ferrocm-sm90: griddepcontrol.wait;\n");
/// assert!(specialise_for_sm90a(ptx, true).unwrap().ends_with("\ngriddepcontrol.wait;\n"));
/// assert!(specialise_for_sm90a(".version 7.0\n.target sm_80\n", true).is_none());
/// ```
pub fn specialise_for_sm90a(ptx: &str, early: bool) -> Option<String> {
    use ferrocm_kernels::host::{SM90_ONLY, SM90A_ONLY};
    if !ptx.contains(SM90A_ONLY) {
        return None;
    }
    let markers: &[&str] = if early {
        &[SM90A_ONLY, SM90_ONLY]
    } else {
        &[SM90A_ONLY]
    };
    let mut newer = false;
    let s = rewrite(
        ptx,
        SM90A_PTX_VERSION,
        |sm, rest| {
            newer = sm > 90;
            // `.target sm_80, debug`: the options after the name stay.
            let options = rest.trim_start_matches(|c: char| c.is_ascii_alphabetic());
            format!("sm_90a{options}")
        },
        markers,
    )?;
    (!newer).then_some(s)
}

/// The `.entry` kernels of `ptx` whose bodies hold a line with `marker`
/// (the device layer inlines everything into the entries, so a kernel's
/// marked lines are in its own body).
///
/// ```
/// use ferrocm_host::ptx::entries_marked;
/// let ptx = ".visible .entry a(\n)\n{\n\tret;\n}\n.visible .entry b(\n)\n{\n\t// ferrocm-sm90a: wgmma.fence.sync.aligned;\n}\n";
/// assert_eq!(entries_marked(ptx, "// ferrocm-sm90a: "), ["b"]);
/// ```
pub fn entries_marked<'a>(ptx: &'a str, marker: &str) -> Vec<&'a str> {
    let mut out = Vec::new();
    let mut current: Option<&'a str> = None;
    for line in ptx.lines() {
        if let Some(at) = line.find(".entry ") {
            let after = &line[at + ".entry ".len()..];
            let end = after
                .find(|c: char| c == '(' || c.is_whitespace())
                .unwrap_or(after.len());
            current = Some(&after[..end]);
        } else if line.contains(marker)
            && let Some(name) = current.take()
        {
            out.push(name);
        }
    }
    out
}

/// `ptx` with its first `.version` raised to at least `version`, its
/// first `.target sm_N...` replaced by `target(N, what follows N)`, and
/// `markers` removed from every other line; `None` without both header
/// lines.
fn rewrite(
    ptx: &str,
    version: (u32, u32),
    mut target: impl FnMut(u32, &str) -> String,
    markers: &[&str],
) -> Option<String> {
    let (mut seen_version, mut seen_target) = (false, false);
    let mut out = String::with_capacity(ptx.len());
    for line in ptx.split_inclusive('\n') {
        let body = line.trim_end_matches(['\n', '\r']);
        let end = &line[body.len()..];
        if let Some(v) = body.strip_prefix(".version ").filter(|_| !seen_version) {
            let (major, minor) = v.trim().split_once('.')?;
            let have = (major.parse::<u32>().ok()?, minor.parse::<u32>().ok()?);
            let (major, minor) = have.max(version);
            out.push_str(&format!(".version {major}.{minor}{end}"));
            seen_version = true;
        } else if let Some(t) = body.strip_prefix(".target sm_").filter(|_| !seen_target) {
            // `.target sm_80` or `.target sm_80, debug`: the number, then
            // whatever follows it.
            let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
            let sm = t[..digits].parse::<u32>().ok()?;
            out.push_str(&format!(".target {}{end}", target(sm, &t[digits..])));
            seen_target = true;
        } else {
            let mut l = line.to_string();
            for m in markers {
                l = l.replace(m, "");
            }
            out.push_str(&l);
        }
    }
    (seen_version && seen_target).then_some(out)
}

/// A PTX module's top-level items, found once, so the module of one kernel
/// ([`PtxIndex::kernel_module`]) is quick to cut out: the CUDA device
/// compiles each kernel the first time it launches instead of the whole
/// module when it opens (the driver's JIT of all of ferrocm's kernels takes
/// tens of seconds on a machine whose compute cache is cold; a model uses a
/// few dozen of them).
#[derive(Debug)]
pub struct PtxIndex {
    items: Vec<Item>,
}

#[derive(Debug)]
struct Item {
    kind: ItemKind,
    /// The function's name (empty for other items).
    name: String,
    /// Byte range in the text.
    range: std::ops::Range<usize>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ItemKind {
    /// A kernel's definition.
    Entry,
    /// A device function's prototype or definition.
    Func,
    /// Anything else at the top level: the header, variables, comments.
    Other,
}

/// The code of a PTX line without its `//` comment.
fn code_of(line: &str) -> &str {
    line.find("//").map_or(line, |c| &line[..c])
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '$' | '.')
}

/// The name a `.entry`/`.func` line declares (after a `.func`'s return
/// parameter list).
fn declared_name(code: &str) -> Option<String> {
    let rest = if let Some(at) = code.find(".entry") {
        &code[at + ".entry".len()..]
    } else {
        let at = code.find(".func")?;
        let rest = code[at + ".func".len()..].trim_start();
        match rest.strip_prefix('(') {
            Some(r) => &r[r.find(')')? + 1..],
            None => rest,
        }
    };
    let rest = rest.trim_start();
    let end = rest.find(|c: char| !is_ident(c)).unwrap_or(rest.len());
    (end > 0).then(|| rest[..end].to_owned())
}

impl PtxIndex {
    /// The items of `ptx`; `None` when a function's braces do not close.
    pub fn parse(ptx: &str) -> Option<Self> {
        let mut items = Vec::new();
        let mut lines = ptx.split_inclusive('\n').peekable();
        let mut at = 0;
        while let Some(line) = lines.next() {
            let start = at;
            at += line.len();
            let code = code_of(line).trim_start();
            let words: Vec<&str> = code.split_whitespace().take(3).collect();
            let kind = if words.contains(&".entry") {
                ItemKind::Entry
            } else if words.contains(&".func") {
                ItemKind::Func
            } else {
                items.push(Item {
                    kind: ItemKind::Other,
                    name: String::new(),
                    range: start..at,
                });
                continue;
            };
            let name = declared_name(code)?;
            // To the end of the body (braces balanced) or of a prototype (`;`
            // outside parentheses before any brace).
            let (mut depth, mut parens, mut opened) = (0i64, 0i64, false);
            let mut current = line;
            loop {
                let mut done = false;
                for c in code_of(current).chars() {
                    match c {
                        '{' => {
                            depth += 1;
                            opened = true;
                        }
                        '}' => depth -= 1,
                        '(' => parens += 1,
                        ')' => parens -= 1,
                        ';' if !opened && depth == 0 && parens == 0 => done = true,
                        _ => {}
                    }
                }
                if done || (opened && depth == 0) {
                    break;
                }
                current = lines.next()?;
                at += current.len();
            }
            items.push(Item {
                kind,
                name,
                range: start..at,
            });
        }
        Some(Self { items })
    }

    /// The kernels (`.entry` names) in the module.
    pub fn entries(&self) -> impl Iterator<Item = &str> {
        self.items
            .iter()
            .filter(|i| i.kind == ItemKind::Entry)
            .map(|i| i.name.as_str())
    }

    /// A module of `ptx` (the text this index was made from) holding only
    /// kernel `entry`: the header and module variables, the device
    /// functions it calls (directly or not), and the kernel. `None` when
    /// the module has no such kernel.
    pub fn kernel_module(&self, ptx: &str, entry: &str) -> Option<String> {
        let kernel = self
            .items
            .iter()
            .find(|i| i.kind == ItemKind::Entry && i.name == entry)?;
        // The device functions reachable from the kernel's body.
        let mut wanted: Vec<&str> = Vec::new();
        let mut bodies = vec![&ptx[kernel.range.clone()]];
        while let Some(body) = bodies.pop() {
            for f in self.items.iter().filter(|i| i.kind == ItemKind::Func) {
                if !wanted.contains(&f.name.as_str()) && mentions(body, &f.name) {
                    wanted.push(&f.name);
                    bodies.extend(
                        self.items
                            .iter()
                            .filter(|g| g.kind == ItemKind::Func && g.name == f.name)
                            .map(|g| &ptx[g.range.clone()]),
                    );
                }
            }
        }
        let mut out = String::new();
        for item in &self.items {
            let keep = match item.kind {
                ItemKind::Other => true,
                ItemKind::Func => wanted.contains(&item.name.as_str()),
                ItemKind::Entry => std::ptr::eq(item, kernel),
            };
            if keep {
                out.push_str(&ptx[item.range.clone()]);
            }
        }
        Some(out)
    }
}

/// Whether `text` names `name` as a whole identifier.
fn mentions(text: &str, name: &str) -> bool {
    text.match_indices(name).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + name.len()..].chars().next();
        !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO_KERNELS: &str = "\
.version 7.0\n.target sm_80\n.address_size 64\n\n\t// .globl\ta\n\
.func helper\n(\n\t.param .b64 helper_param_0\n)\n;\n\
.func  (.param .b32 func_retval0) unused\n(\n)\n;\n\
.extern .shared .align 16 .b8 smem_a[];\n\
.global .align 4 .b8 table[3] = {1, 2, 3};\n\
.visible .entry a(\n\t.param .u64 a_param_0\n)\n{\n\t{ // inner scope\n\t.reg .b64 r;\n\t}\n\
\tcall.uni helper, (r);\n\tret;\n} // -- End function\n\
.visible .entry b()\n{\n\tret;\n}\n\
.func helper(\n\t.param .b64 helper_param_0\n)\n{\n\tret;\n}\n\
.func  (.param .b32 func_retval0) unused()\n{\n\tret;\n}\n";

    #[test]
    fn a_kernel_module_keeps_the_header_variables_and_what_it_calls() {
        let index = PtxIndex::parse(TWO_KERNELS).unwrap();
        assert_eq!(index.entries().collect::<Vec<_>>(), ["a", "b"]);
        let a = index.kernel_module(TWO_KERNELS, "a").unwrap();
        assert!(a.starts_with(".version 7.0\n.target sm_80\n.address_size 64\n"));
        assert!(a.contains(".visible .entry a(") && !a.contains(".entry b"));
        assert_eq!(
            a.matches(".func helper").count(),
            2,
            "prototype and body:\n{a}"
        );
        assert!(!a.contains("unused"), "{a}");
        assert!(a.contains("smem_a") && a.contains("table[3] = {1, 2, 3};"));
        assert_eq!(a.matches('{').count(), a.matches('}').count());
        let b = index.kernel_module(TWO_KERNELS, "b").unwrap();
        assert!(
            b.contains(".visible .entry b()") && !b.contains("helper") && !b.contains("entry a")
        );
        assert!(index.kernel_module(TWO_KERNELS, "c").is_none());
        // A body that never closes is not cut.
        assert!(PtxIndex::parse(".visible .entry a()\n{\n\tret;\n").is_none());
    }

    /// Every kernel of ferrocm's module cut out alone: one `.entry`, its
    /// parameters as in the whole module, balanced braces.
    #[test]
    fn every_kernel_of_the_module_cuts_out_alone() {
        let ptx = module();
        let index = PtxIndex::parse(ptx).expect("the module parses");
        let whole = entries(ptx);
        assert_eq!(index.entries().count(), whole.len());
        for e in &whole {
            let m = index.kernel_module(ptx, &e.name).unwrap();
            let alone = entries(&m);
            assert_eq!(alone.len(), 1, "{}", e.name);
            assert_eq!(alone[0].name, e.name);
            assert_eq!(alone[0].param_bytes, e.param_bytes, "{}", e.name);
            assert!(
                m.len() < ptx.len() / 8,
                "{}: {} of {} bytes",
                e.name,
                m.len(),
                ptx.len()
            );
        }
    }

    fn module() -> &'static str {
        ferrocm_kernels::PTX_MODULE
            .expect("this build embeds no PTX module (FERROCM_PTX=off)")
            .text
    }

    /// The static check: every declared kernel is in the PTX with the
    /// parameters its signature implies, and the module holds nothing else.
    #[test]
    fn every_kernel_is_in_the_ptx_with_its_signature() {
        let entries = entries(module());
        let mut errors = Vec::new();
        for k in ferrocm_kernels::kernels() {
            if let Err(e) = check_entry(&entries, k) {
                errors.push(e);
            }
        }
        for e in &entries {
            if ferrocm_kernels::kernel(&e.name).is_none() {
                errors.push(format!("the PTX has `{}`, which no file declares", e.name));
            }
        }
        assert!(errors.is_empty(), "{}", errors.join("\n"));
        assert_eq!(entries.len(), ferrocm_kernels::kernels().count());
    }

    /// No kernel keeps a stack frame in local memory (spills, arrays indexed
    /// at run time): the GPU-side half of this check is `ferrocm kernels
    /// --device cuda`, which reads each loaded kernel's local size.
    #[test]
    fn no_kernel_uses_local_memory() {
        let users = local_memory_users(module());
        assert!(users.is_empty(), "local memory in: {users:?}");
    }

    #[test]
    fn the_module_targets_sm_80_or_newer() {
        let m = ferrocm_kernels::PTX_MODULE.unwrap();
        assert!(module().contains(&format!(".target {}", m.target)));
        assert!(module().contains(".address_size 64"));
    }

    /// The module holds the sm_90 instructions the attention kernels wait
    /// and release with, commented out, and the sm_90 module uncomments
    /// every one of them and changes nothing else.
    #[test]
    fn the_sm90_module_differs_only_in_its_header_and_marked_lines() {
        let ptx = module();
        let marked = ptx.matches(ferrocm_kernels::host::SM90_ONLY).count();
        assert!(
            ptx.contains("// ferrocm-sm90: griddepcontrol.wait;")
                && ptx.contains("// ferrocm-sm90: griddepcontrol.launch_dependents;"),
            "no marked griddepcontrol line in the module"
        );
        let s = specialise_for_sm90(ptx).expect("a marked module");
        assert!(s.contains(".target sm_9") || s.contains(".target sm_1"));
        assert!(!s.contains(ferrocm_kernels::host::SM90_ONLY));
        let changed: Vec<_> = ptx.lines().zip(s.lines()).filter(|(a, b)| a != b).collect();
        assert_eq!(ptx.lines().count(), s.lines().count());
        for (a, b) in &changed {
            let header = a.starts_with(".version ") || a.starts_with(".target ");
            assert!(
                header || a.replace(ferrocm_kernels::host::SM90_ONLY, "") == *b,
                "{a} -> {b}"
            );
        }
        assert!(changed.len() >= marked && changed.len() <= marked + 2);
    }

    /// The sm_90a form: headers and marked lines (both markers) change,
    /// nothing else; the warpgroup GEMM's and convolution's entries hold
    /// sm_90a lines, which the plain sm_90 form leaves as comments.
    #[test]
    fn the_sm90a_module_differs_only_in_its_header_and_marked_lines() {
        use ferrocm_kernels::host::{SM90_ONLY, SM90A_ONLY};
        let ptx = module();
        let index = PtxIndex::parse(ptx).expect("the module indexes");
        for name in [
            "gemm_wgmma_bf16",
            "gemm_wgmma_f16",
            "conv_wgmma_bf16",
            "conv_wgmma_f16",
        ] {
            let cut = index.kernel_module(ptx, name).expect("in the module");
            assert!(
                cut.contains(&format!("{SM90A_ONLY}{{ .reg .pred p;")),
                "{name}"
            );
        }
        assert!(specialise_for_sm90(ptx).unwrap().contains(SM90A_ONLY));
        let s = specialise_for_sm90a(ptx, true).expect("a marked module");
        assert!(s.contains(".target sm_90a") && !s.contains(SM90A_ONLY) && !s.contains(SM90_ONLY));
        let version = s.lines().find_map(|l| l.strip_prefix(".version ")).unwrap();
        let (major, minor) = version.split_once('.').unwrap();
        assert!((major.parse::<u32>().unwrap(), minor.parse::<u32>().unwrap()) >= (8, 0));
        assert_eq!(ptx.lines().count(), s.lines().count());
        for (a, b) in ptx.lines().zip(s.lines()).filter(|(a, b)| a != b) {
            let header = a.starts_with(".version ") || a.starts_with(".target ");
            assert!(
                header || a.replace(SM90A_ONLY, "").replace(SM90_ONLY, "") == *b,
                "{a} -> {b}"
            );
        }
        // Early starts off: the griddepcontrol lines stay comments.
        let s = specialise_for_sm90a(ptx, false).unwrap();
        assert!(s.contains(SM90_ONLY) && !s.contains(SM90A_ONLY));
        // A module built for a newer target gets no sm_90a form.
        let m = format!("{SM90A_ONLY}wgmma.fence.sync.aligned;\n");
        assert!(
            specialise_for_sm90a(&format!(".version 8.6\n.target sm_100a\n{m}"), true).is_none()
        );
        let s = specialise_for_sm90a(&format!(".version 7.0\n.target sm_80, debug\n{m}"), true)
            .unwrap();
        assert!(
            s.starts_with(".version 8.0\n.target sm_90a, debug\n"),
            "{s}"
        );
    }

    #[test]
    fn sm90_specialisation_keeps_newer_headers_and_refuses_odd_ones() {
        let m = "// ferrocm-sm90: griddepcontrol.wait;\n";
        let s = specialise_for_sm90(&format!(".version 8.3\n.target sm_100a\n{m}")).unwrap();
        assert_eq!(s, ".version 8.3\n.target sm_100a\ngriddepcontrol.wait;\n");
        let s = specialise_for_sm90(&format!(".version 7.0\n.target sm_80, debug\n{m}")).unwrap();
        assert!(s.starts_with(".version 7.8\n.target sm_90, debug\n"), "{s}");
        assert!(specialise_for_sm90(&format!(".target sm_80\n{m}")).is_none());
        assert!(specialise_for_sm90(&format!(".version x.y\n.target sm_80\n{m}")).is_none());
    }

    #[test]
    fn parses_params_and_locals() {
        let ptx = "\
.visible .entry a(\n\t.param .u64 .ptr .align 1 a_param_0,\n\t.param .u32 a_param_1,\n\t.param .u64 a_param_2\n)\n{\n\t.local .align 4 .b8 __local_depot0[16];\n}\n\
.visible .entry b()\n{\n\tret;\n}\n";
        let e = entries(ptx);
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].param_bytes, vec![8, 4, 8]);
        assert!(e[1].param_bytes.is_empty());
        assert_eq!(local_memory_users(ptx), vec!["a".to_string()]);
    }
}
