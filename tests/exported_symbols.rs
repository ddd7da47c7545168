//! libnpualloc.so exports the npualloc C API and nothing else: no `acl*`
//! symbol (the runtime's functions are looked up with dlsym, never provided),
//! and no Rust internals; and every export is declared in
//! `include/npualloc.h` and reachable through the plugin table
//! (`npualloc_api`, `src/ffi/plugin.rs`), `npualloc_get_api` itself aside.
//! rustc links a cdylib with a version script that exports the
//! `#[no_mangle]` functions and makes every other symbol local (Rust's
//! standard library included), so no extra linker options are needed for that.
//!
//! It holds only the allocator (the replay tool and its SVG and JSON writers
//! are in the npualloc-tools crate) and carries its ABI version in its SONAME.

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

/// `target/<profile>`: integration tests run from `target/<profile>/deps/`.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent().and_then(Path::parent).expect("target/<profile>/deps/<test>").to_path_buf()
}

fn run(program: &str, args: &[&str], file: &Path) -> String {
    let output = Command::new(program)
        .args(args)
        .arg(file)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program} (binutils): {e}"));
    assert!(output.status.success(), "{program} failed: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `(kind, name)` of every symbol the library defines and exports.
fn exported_symbols(lib: &Path) -> Vec<(String, String)> {
    assert!(lib.is_file(), "{} is not built; run `cargo build --workspace`", lib.display());
    let listing = run("nm", &["-D", "--defined-only"], lib);
    let mut symbols = Vec::new();
    for line in listing.lines() {
        // "<address> <type> <name>", of any type (code, data, absolute, ...).
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.as_slice() {
            [_, kind, name] | [kind, name] => symbols.push((kind.to_string(), name.to_string())),
            _ => panic!("unexpected nm line {line:?}"),
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
    let header =
        std::fs::read_to_string(&header_path).unwrap_or_else(|e| panic!("read {}: {e}", header_path.display()));
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

#[test]
fn shared_library_holds_no_replay_or_svg_code() {
    let lib = shared_library();
    let bytes = std::fs::read(&lib).unwrap_or_else(|e| panic!("read {}: {e}", lib.display()));
    let has = |needle: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
    // Rust symbol names spell a module path as <length><name> (8npualloc4core),
    // and debug information names each module as a string of its own. The
    // allocator's modules show both ways, so the search can find a module.
    assert!(has(b"8npualloc4core"), "{} has no npualloc::core symbol: is its symbol table stripped?", lib.display());
    let symbols = run("nm", &["-C"], &lib);
    assert!(symbols.contains("npualloc::core::"), "nm -C {} shows no npualloc::core symbol", lib.display());
    for module in ["replay", "svg"] {
        let mangled = format!("{}{module}", module.len());
        assert!(!has(mangled.as_bytes()), "{} has a symbol of a `{module}` module ({mangled})", lib.display());
        assert!(!has(format!("\0{module}\0").as_bytes()), "{} names a `{module}` module", lib.display());
        assert!(!symbols.contains(&format!("::{module}::")), "nm -C {} shows `{module}` code", lib.display());
    }
}

#[test]
fn shared_library_carries_the_abi_version_in_its_soname() {
    let soname = format!("libnpualloc.so.{}", npualloc::ffi::NPUALLOC_ABI_VERSION);
    let lib = shared_library();
    let dynamic = run("readelf", &["-d"], &lib);
    let recorded: Vec<&str> = dynamic.lines().filter(|l| l.contains("(SONAME)")).collect();
    assert_eq!(recorded.len(), 1, "{} should have one SONAME:\n{dynamic}", lib.display());
    assert!(recorded[0].ends_with(&format!("[{soname}]")), "{}: {} is not {soname}", lib.display(), recorded[0]);

    // A program linked against target/<profile>/libnpualloc.so asks for the
    // SONAME at run time, so build.rs puts a link of that name next to it.
    let link = profile_dir().join(&soname);
    let target = std::fs::read_link(&link).unwrap_or_else(|e| panic!("{} is not a link: {e}", link.display()));
    assert_eq!(target, Path::new("libnpualloc.so"), "{} points elsewhere", link.display());
}
