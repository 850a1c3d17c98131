//! The device rewrite rocm_kernel_macros applies, done on the source text so
//! every line stays where it was (rustc's errors for a GPU target then point
//! at the right line of the original file): `#[amdgpu_device]` is dropped,
//! `#[amdgpu_global]` becomes `#[unsafe(no_mangle)]` and the function `pub
//! extern "gpu-kernel"`, and `use rocm_kernel_macros::...;` is removed. It
//! applies inside `macro_rules!` bodies too, so kernels instantiated by a
//! macro (`kernels!`) are kernels on the device.
//!
//! Why not the project rocm_kernel_macros generates: its `items.json` is a
//! flat map keyed by item kind and name (two trait impls for one type
//! collide, `use` and `macro_rules!` items are lost), and every concurrent
//! rustc of the crate (cargo compiles a lib and its test harness in
//! parallel) deletes and rewrites it, so its content depends on timing.
//! Reading the source files is deterministic.

use proc_macro2::{Delimiter, TokenStream, TokenTree};
use std::str::FromStr;

/// One edit of the source text: replace `[start, end)` (byte offsets).
struct Edit {
    start: usize,
    end: usize,
    with: String,
}

/// Applies rocm_kernel_macros' device rewrite to a source file, in place:
/// `#[amdgpu_device]` is dropped, `#[amdgpu_global]` becomes
/// `#[unsafe(no_mangle)]` and the function `pub extern "gpu-kernel"`, and the
/// `use rocm_kernel_macros::...;` import is removed. Also applies inside
/// `macro_rules!` bodies, so macro-instantiated kernels work.
pub(crate) fn rewrite_for_device(text: &str) -> Result<String, String> {
    let tokens = TokenStream::from_str(text).map_err(|e| format!("does not tokenize: {e}"))?;
    let offsets = LineOffsets::new(text);
    let mut edits = Vec::new();
    collect_edits(tokens, &offsets, &mut edits)?;
    edits.sort_by_key(|e| e.start);
    let mut out = String::with_capacity(text.len() + edits.len() * 32);
    let mut pos = 0;
    for e in edits {
        out.push_str(&text[pos..e.start]);
        out.push_str(&e.with);
        pos = e.end;
    }
    out.push_str(&text[pos..]);
    Ok(out)
}

struct LineOffsets<'a> {
    text: &'a str,
    starts: Vec<usize>,
}

impl<'a> LineOffsets<'a> {
    fn new(text: &'a str) -> Self {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        Self { text, starts }
    }
    fn byte(&self, lc: proc_macro2::LineColumn) -> usize {
        let line_start = self.starts[lc.line - 1];
        let line = &self.text[line_start..];
        line_start
            + line
                .char_indices()
                .nth(lc.column)
                .map(|(i, _)| i)
                .unwrap_or(line.len())
    }
    fn span(&self, t: &TokenTree) -> (usize, usize) {
        (self.byte(t.span().start()), self.byte(t.span().end()))
    }
}

fn is_ident(t: &TokenTree, s: &str) -> bool {
    matches!(t, TokenTree::Ident(i) if i == s)
}

fn is_punct(t: &TokenTree, c: char) -> bool {
    matches!(t, TokenTree::Punct(p) if p.as_char() == c)
}

/// `#` `[name]` or `#` `[name(...)]` → Some(name).
fn attr_name(hash: &TokenTree, group: Option<&TokenTree>) -> Option<String> {
    if !is_punct(hash, '#') {
        return None;
    }
    let TokenTree::Group(g) = group? else {
        return None;
    };
    if g.delimiter() != Delimiter::Bracket {
        return None;
    }
    let mut inner = g.stream().into_iter();
    match inner.next()? {
        TokenTree::Ident(i) => Some(i.to_string()),
        _ => None,
    }
}

fn collect_edits(ts: TokenStream, off: &LineOffsets, edits: &mut Vec<Edit>) -> Result<(), String> {
    let toks: Vec<TokenTree> = ts.into_iter().collect();
    let mut i = 0;
    while i < toks.len() {
        // use rocm_kernel_macros::...;
        if is_ident(&toks[i], "use")
            && toks
                .get(i + 1)
                .is_some_and(|t| is_ident(t, "rocm_kernel_macros"))
        {
            // A `pub use` (a re-export of the attributes) goes whole.
            let mut first = i;
            if i >= 1 && is_ident(&toks[i - 1], "pub") {
                first = i - 1;
            } else if i >= 2
                && is_ident(&toks[i - 2], "pub")
                && matches!(&toks[i - 1], TokenTree::Group(g) if g.delimiter() == Delimiter::Parenthesis)
            {
                first = i - 2;
            }
            let start = off.span(&toks[first]).0;
            let mut j = i + 1;
            while j < toks.len() && !is_punct(&toks[j], ';') {
                j += 1;
            }
            let end = off.span(toks.get(j).ok_or("unterminated use")?).1;
            edits.push(Edit {
                start,
                end,
                with: blank(&off.text[start..end]),
            });
            i = j + 1;
            continue;
        }
        match attr_name(&toks[i], toks.get(i + 1)).as_deref() {
            Some("amdgpu_device") => {
                let (start, _) = off.span(&toks[i]);
                let (_, end) = off.span(&toks[i + 1]);
                edits.push(Edit {
                    start,
                    end,
                    with: blank(&off.text[start..end]),
                });
                i += 2;
                continue;
            }
            Some("amdgpu_global") => {
                let (start, _) = off.span(&toks[i]);
                let (_, end) = off.span(&toks[i + 1]);
                edits.push(Edit {
                    start,
                    end,
                    with: "#[unsafe(no_mangle)]".into(),
                });
                // Up to `fn`: keep other attributes, drop the visibility, move `unsafe`.
                let mut j = i + 2;
                let mut is_unsafe = false;
                while j < toks.len() && !is_ident(&toks[j], "fn") {
                    if is_ident(&toks[j], "pub") {
                        let (s, mut e) = off.span(&toks[j]);
                        if let Some(TokenTree::Group(g)) = toks.get(j + 1)
                            && g.delimiter() == Delimiter::Parenthesis
                        {
                            e = off.span(&toks[j + 1]).1;
                            j += 1;
                        }
                        edits.push(Edit {
                            start: s,
                            end: e,
                            with: blank(&off.text[s..e]),
                        });
                    } else if is_ident(&toks[j], "unsafe") {
                        is_unsafe = true;
                        let (s, e) = off.span(&toks[j]);
                        edits.push(Edit {
                            start: s,
                            end: e,
                            with: blank(&off.text[s..e]),
                        });
                    } else if is_ident(&toks[j], "extern") {
                        return Err("#[amdgpu_global] functions must not declare an ABI".into());
                    }
                    j += 1;
                }
                let fn_tok = toks
                    .get(j)
                    .ok_or("#[amdgpu_global] on something that is not a fn")?;
                let (s, e) = off.span(fn_tok);
                let with = if is_unsafe {
                    "pub unsafe extern \"gpu-kernel\" fn"
                } else {
                    "pub extern \"gpu-kernel\" fn"
                };
                edits.push(Edit {
                    start: s,
                    end: e,
                    with: with.into(),
                });
                i = j + 1;
                continue;
            }
            _ => {}
        }
        if let TokenTree::Group(g) = &toks[i] {
            collect_edits(g.stream(), off, edits)?;
        }
        i += 1;
    }
    Ok(())
}

/// Spaces (newlines kept) of the same extent, so line numbers do not move.
fn blank(s: &str) -> String {
    s.chars()
        .map(|c| if c == '\n' { '\n' } else { ' ' })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_become_exported_gpu_kernels_and_lines_stay() {
        let text = "use rocm_kernel_macros::{amdgpu_device, amdgpu_global};\n#[amdgpu_device]\nfn helper() {}\n#[amdgpu_global]\npub fn k(x: *mut f32) {}\n";
        let out = rewrite_for_device(text).unwrap();
        assert_eq!(out.lines().count(), text.lines().count());
        assert!(
            out.contains("#[unsafe(no_mangle)]\n    pub extern \"gpu-kernel\" fn k("),
            "{out}"
        );
        assert!(!out.contains("amdgpu"), "{out}");
    }

    #[test]
    fn kernels_inside_macro_bodies_and_reexports() {
        let text = "macro_rules! m { ($n:ident) => { #[amdgpu_global] unsafe fn $n() {} }; }\n#[cfg(not(ferrocm_device))]\npub use rocm_kernel_macros::amdgpu_global;\n";
        let out = rewrite_for_device(text).unwrap();
        assert!(out.contains("#[unsafe(no_mangle)]"), "{out}");
        assert!(
            out.contains("pub unsafe extern \"gpu-kernel\" fn $n()"),
            "{out}"
        );
        assert!(!out.contains("pub use"), "{out}");
        assert!(rewrite_for_device("#[amdgpu_global] extern \"C\" fn k() {}").is_err());
    }
}
