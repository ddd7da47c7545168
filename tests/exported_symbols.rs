//! libnpualloc.so exports the npualloc C API and nothing else: no `acl*`
//! symbol (the runtime's functions are looked up with dlsym, never provided),
//! and no Rust internals; and every export is declared in
//! `include/npualloc.h` and reachable through the plugin table
//! (`npualloc_api`, `src/ffi/plugin.rs`), `npualloc_get_api` itself aside.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The cdylib this test run was built with: `cargo test` writes it next to
/// the test binaries in `target/<profile>/deps/` (the copy one level up is
/// refreshed only by `cargo build`).
fn shared_library() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("target/<profile>/deps");
    let fresh = deps.join("libnpualloc.so");
    if fresh.is_file() {
        return fresh;
    }
    deps.parent().expect("target/<profile>").join("libnpualloc.so")
}

/// `(kind, name)` of every code and data symbol the library defines and exports.
fn exported_symbols(lib: &Path) -> Vec<(String, String)> {
    assert!(lib.is_file(), "{} is not built; run `cargo build --workspace`", lib.display());
    let output = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(lib)
        .output()
        .unwrap_or_else(|e| panic!("cannot run nm (binutils): {e}"));
    assert!(output.status.success(), "nm failed: {}", String::from_utf8_lossy(&output.stderr));
    let listing = String::from_utf8_lossy(&output.stdout);
    let mut symbols = Vec::new();
    for line in listing.lines() {
        // "<address> <type> <name>"; only code and data symbols matter.
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [_, kind, name] = fields.as_slice() else { continue };
        if matches!(*kind, "T" | "D" | "B" | "R" | "W" | "V" | "i") {
            symbols.push((kind.to_string(), name.to_string()));
        }
    }
    symbols
}

#[test]
fn shared_library_exports_only_npualloc_symbols() {
    let lib = shared_library();
    let mut exported = Vec::new();
    let mut foreign = Vec::new();
    for (kind, name) in exported_symbols(&lib) {
        if name.starts_with("npualloc_") {
            exported.push(name);
        } else {
            foreign.push(format!("{kind} {name}"));
        }
    }
    for required in ["npualloc_last_error", "npualloc_status_name", "npualloc_version", "npualloc_abi_version"] {
        assert!(exported.iter().any(|e| e == required), "{required} is not exported by {}", lib.display());
    }
    assert!(foreign.is_empty(), "{} exports symbols outside the npualloc API: {foreign:?}", lib.display());
}

/// The functions the plugin table `API_V1` in `src/ffi/plugin.rs` points to,
/// by the last segment of each initializer path (`super::x::npualloc_y`;
/// constants such as `NPUALLOC_ABI_VERSION` are not functions and are skipped).
fn plugin_table_functions() -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/ffi/plugin.rs");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let file = syn::parse_file(&text).unwrap_or_else(|e| panic!("parse {}: {e}", path.display()));
    let table = file
        .items
        .iter()
        .find_map(|item| match item {
            syn::Item::Static(s) if s.ident == "API_V1" => Some(s),
            _ => None,
        })
        .expect("src/ffi/plugin.rs has no `static API_V1`");
    let syn::Expr::Struct(init) = &*table.expr else { panic!("API_V1 is not initialised by a struct expression") };
    init.fields
        .iter()
        .filter_map(|field| match &field.expr {
            syn::Expr::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()),
            _ => None,
        })
        .filter(|name| name.starts_with("npualloc_"))
        .collect()
}

#[test]
fn every_export_is_declared_in_the_header_and_listed_in_the_plugin_table() {
    let lib = shared_library();
    let header_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("include/npualloc.h");
    let header = std::fs::read_to_string(&header_path).unwrap_or_else(|e| panic!("read {}: {e}", header_path.display()));
    let table = plugin_table_functions();
    assert!(table.len() > 10, "the plugin table lists only {table:?}");

    let declared = |name: &str| {
        // A prototype: the name as a whole word, then "(" (spaces allowed).
        header.match_indices(name).any(|(at, _)| {
            let before = header[..at].chars().next_back();
            let after = header[at + name.len()..].trim_start();
            !before.is_some_and(|c| c.is_alphanumeric() || c == '_') && after.starts_with('(')
        })
    };
    let mut problems = Vec::new();
    let mut checked = 0;
    for (_, name) in exported_symbols(&lib).into_iter().filter(|(_, n)| n.starts_with("npualloc_")) {
        checked += 1;
        if !declared(&name) {
            problems.push(format!("{name} is exported but not declared in include/npualloc.h"));
        }
        if name != "npualloc_get_api" && !table.contains(&name) {
            problems.push(format!("{name} is exported but has no field in npualloc_api (src/ffi/plugin.rs)"));
        }
    }
    for name in &table {
        if !declared(name) {
            problems.push(format!("the plugin table points to {name}, which the header does not declare"));
        }
    }
    assert!(checked > 10, "only {checked} npualloc_ exports found in {}", lib.display());
    assert!(problems.is_empty(), "export audit:\n  {}", problems.join("\n  "));
}
