//! Which files are device code: the module tree a kernel crate declares, and
//! the check that no kernel file is left out of it.
//!
//! A kernel file may live in a folder (`src/quant/q4_k.rs`): the folder's
//! module file (`src/quant/mod.rs`, or `src/quant.rs`) declares it with
//! `mod q4_k;`, as for any Rust module. The device build copies exactly
//! the files the declarations reach, so a file that nothing declares would
//! be compiled for no GPU target and for the host neither; the build stops
//! and names it instead.

use proc_macro2::{TokenStream, TokenTree};
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// `mod NAME;` declarations at the top level of a source file, in order
/// (with or without `pub`, attributes included). Inline modules
/// (`mod x { .. }`) are part of their file and not listed.
///
/// # Errors
/// When the text does not tokenize, or a declaration carries a `#[path]`
/// attribute (the build would not know where that file is).
pub(crate) fn declared_modules(text: &str) -> Result<Vec<String>, String> {
    let tokens = TokenStream::from_str(text).map_err(|e| format!("does not tokenize: {e}"))?;
    let toks: Vec<TokenTree> = tokens.into_iter().collect();
    let mut out = Vec::new();
    let mut path_attr = false;
    for i in 0..toks.len() {
        if let TokenTree::Group(g) = &toks[i]
            && i > 0
            && matches!(&toks[i - 1], TokenTree::Punct(p) if p.as_char() == '#')
            && g.stream()
                .into_iter()
                .next()
                .is_some_and(|t| matches!(&t, TokenTree::Ident(id) if id == "path"))
        {
            path_attr = true;
        }
        let is_mod = matches!(&toks[i], TokenTree::Ident(id) if id == "mod");
        if !is_mod {
            if matches!(&toks[i], TokenTree::Punct(p) if p.as_char() == ';')
                || matches!(&toks[i], TokenTree::Group(g) if g.delimiter() == proc_macro2::Delimiter::Brace)
            {
                path_attr = false;
            }
            continue;
        }
        if let (Some(TokenTree::Ident(name)), Some(TokenTree::Punct(semi))) =
            (toks.get(i + 1), toks.get(i + 2))
            && semi.as_char() == ';'
        {
            if path_attr {
                return Err(format!(
                    "`mod {name};` has a #[path] attribute: kernel modules must live where Rust looks for them by default"
                ));
            }
            out.push(name.to_string());
        }
        path_attr = false;
    }
    Ok(out)
}

/// One source file of the device build: its path relative to `src/` and
/// its text.
pub(crate) struct SourceFile {
    pub(crate) rel: PathBuf,
    pub(crate) text: String,
}

/// The files of module `name`, declared in `dir` (relative to `src`):
/// `dir/name.rs` or `dir/name/mod.rs`, then recursively the modules that
/// file declares, whose files live in `dir/name/`. Every `.rs` file and
/// folder in `dir/name/` must be declared.
pub(crate) fn collect_module(
    src: &Path,
    dir: &Path,
    name: &str,
    out: &mut Vec<SourceFile>,
) -> Result<(), String> {
    let flat = dir.join(format!("{name}.rs"));
    let nested = dir.join(name).join("mod.rs");
    let rel = match (src.join(&flat).is_file(), src.join(&nested).is_file()) {
        (true, true) => {
            return Err(format!(
                "both src/{} and src/{} exist for module `{name}`",
                flat.display(),
                nested.display()
            ));
        }
        (true, false) => flat,
        (false, true) => nested,
        (false, false) => {
            return Err(format!(
                "module `{name}` is declared but neither src/{} nor src/{} exists",
                flat.display(),
                nested.display()
            ));
        }
    };
    let text = std::fs::read_to_string(src.join(&rel))
        .map_err(|e| format!("src/{}: {e}", rel.display()))?;
    let children = declared_modules(&text).map_err(|e| format!("src/{}: {e}", rel.display()))?;
    out.push(SourceFile {
        rel: rel.clone(),
        text,
    });
    let folder = dir.join(name);
    check_folder_declared(src, &folder, &rel, &children)?;
    for child in &children {
        collect_module(src, &folder, child, out)?;
    }
    Ok(())
}

/// Every `.rs` file (other than `mod.rs`) and folder in `folder` is one of
/// `declared`, the modules the file `declared_in` declares.
pub(crate) fn check_folder_declared(
    src: &Path,
    folder: &Path,
    declared_in: &Path,
    declared: &[String],
) -> Result<(), String> {
    check_entries_declared(src, folder, declared_in, declared, &[])
}

/// As [`check_folder_declared`], leaving the entries named in `skip` out
/// (`lib.rs` and the host-only `host/` of the kernel crate itself).
pub(crate) fn check_entries_declared(
    src: &Path,
    folder: &Path,
    declared_in: &Path,
    declared: &[String],
    skip: &[&str],
) -> Result<(), String> {
    let Ok(entries) = std::fs::read_dir(src.join(folder)) else {
        return Ok(());
    };
    let mut missing = Vec::new();
    let mut names: Vec<PathBuf> = entries.filter_map(|e| e.ok()).map(|e| e.path()).collect();
    names.sort();
    for path in names {
        let Some(file) = path.file_name().and_then(|f| f.to_str()) else {
            continue;
        };
        if skip.contains(&file) || file == "mod.rs" || file.starts_with('.') {
            continue;
        }
        let module = if path.is_dir() {
            file.to_string()
        } else if let Some(stem) = file.strip_suffix(".rs") {
            stem.to_string()
        } else {
            continue;
        };
        if !declared.contains(&module) {
            missing.push(format!(
                "src/{} is not declared in src/{} (`mod {module};`): it would be compiled for no GPU target",
                folder.join(file).display(),
                declared_in.display()
            ));
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(missing.join("\n"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_file_modules_not_inline_ones() {
        let text = "pub mod a;\nmod b;\n#[cfg(test)]\nmod c;\nmod inline { mod nested; }\npub(crate) mod d;\nfn mod_like() {}\n";
        assert_eq!(declared_modules(text).unwrap(), ["a", "b", "c", "d"]);
        assert!(declared_modules("#[path = \"x.rs\"]\nmod y;").is_err());
        assert_eq!(declared_modules("#[cfg(x)]\nmod y;").unwrap(), ["y"]);
    }

    #[test]
    fn a_file_no_module_declares_is_named() {
        let dir = std::env::temp_dir().join(format!("ferrocm-build-source-{}", std::process::id()));
        let src = dir.join("src");
        std::fs::create_dir_all(src.join("quant")).unwrap();
        std::fs::write(src.join("quant/mod.rs"), "pub mod q4_0;\n").unwrap();
        std::fs::write(src.join("quant/q4_0.rs"), "pub fn a() {}\n").unwrap();
        std::fs::write(src.join("quant/q4_k.rs"), "pub fn b() {}\n").unwrap();
        let mut out = Vec::new();
        let err = collect_module(&src, Path::new(""), "quant", &mut out).unwrap_err();
        assert!(
            err.contains("src/quant/q4_k.rs is not declared in src/quant/mod.rs"),
            "{err}"
        );
        std::fs::write(src.join("quant/mod.rs"), "pub mod q4_0;\npub mod q4_k;\n").unwrap();
        let mut out = Vec::new();
        collect_module(&src, Path::new(""), "quant", &mut out).unwrap();
        let files: Vec<_> = out.iter().map(|f| f.rel.display().to_string()).collect();
        assert_eq!(files, ["quant/mod.rs", "quant/q4_0.rs", "quant/q4_k.rs"]);
        let err = collect_module(&src, Path::new(""), "absent", &mut Vec::new()).unwrap_err();
        assert!(err.contains("neither"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
