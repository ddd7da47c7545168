//! Source checks of the export rule in src/ffi/boundary.rs: every exported
//! function lives under `src/ffi/`, is `extern "C"`, carries a doc comment
//! (cbindgen copies it into the header), and its whole body is one
//! `ffi_boundary!` call (at most preceded by `let _ = param;`), so no panic
//! can unwind into C.

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn is_no_mangle(attr: &syn::Attribute) -> bool {
    if attr.path().is_ident("no_mangle") {
        return true;
    }
    // #[unsafe(no_mangle)]
    attr.path().is_ident("unsafe") && attr.parse_args::<syn::Path>().is_ok_and(|p| p.is_ident("no_mangle"))
}

fn has_doc(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| a.path().is_ident("doc"))
}

/// `let _ = param;`: discarding an unused parameter cannot panic, so it may
/// precede the boundary.
fn is_discard(stmt: &syn::Stmt) -> bool {
    matches!(stmt, syn::Stmt::Local(syn::Local { pat: syn::Pat::Wild(_), init: Some(init), .. })
        if matches!(&*init.expr, syn::Expr::Path(p) if p.path.get_ident().is_some()))
}

fn is_boundary_call(body: &syn::Block) -> bool {
    let Some((stmt, before)) = body.stmts.split_last() else { return false };
    if !before.iter().all(is_discard) {
        return false;
    }
    let mac = match stmt {
        syn::Stmt::Macro(m) => &m.mac,
        syn::Stmt::Expr(syn::Expr::Macro(m), None) => &m.mac,
        _ => return false,
    };
    mac.path.segments.last().is_some_and(|s| s.ident == "ffi_boundary")
}

/// Every function with a no_mangle attribute, anywhere in the file.
fn exported_fns(file: &syn::File) -> Vec<&syn::ItemFn> {
    fn walk<'a>(items: &'a [syn::Item], out: &mut Vec<&'a syn::ItemFn>) {
        for item in items {
            match item {
                syn::Item::Fn(f) if f.attrs.iter().any(is_no_mangle) => out.push(f),
                syn::Item::Mod(m) => {
                    if let Some((_, items)) = &m.content {
                        walk(items, out);
                    }
                }
                _ => {}
            }
        }
    }
    let mut out = Vec::new();
    walk(&file.items, &mut out);
    out
}

#[test]
fn every_export_is_inside_the_boundary() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();

    let mut problems = Vec::new();
    let mut exports = 0;
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap();
        let file = syn::parse_file(&text).unwrap_or_else(|e| panic!("parse {}: {e}", path.display()));
        let shown = path.strip_prefix(&src).unwrap().display().to_string();
        let in_ffi = path.starts_with(src.join("ffi"));
        for f in exported_fns(&file) {
            exports += 1;
            let name = f.sig.ident.to_string();
            if !in_ffi {
                problems.push(format!("src/{shown}: {name} is exported outside src/ffi/"));
            }
            if !name.starts_with("npualloc_") {
                problems.push(format!("src/{shown}: exported {name} lacks the npualloc_ prefix"));
            }
            let is_c_abi = f.sig.abi.as_ref().and_then(|abi| abi.name.as_ref()).is_some_and(|n| n.value() == "C");
            if !is_c_abi {
                problems.push(format!("src/{shown}: {name} is not extern \"C\""));
            }
            if !has_doc(&f.attrs) {
                problems.push(format!("src/{shown}: {name} has no doc comment (the header needs one)"));
            }
            if !is_boundary_call(&f.block) {
                problems.push(format!("src/{shown}: the body of {name} is not a single ffi_boundary! call"));
            }
        }
    }
    assert!(exports > 0, "no exported functions found under src/");
    assert!(problems.is_empty(), "export rule broken:\n  {}", problems.join("\n  "));
}
