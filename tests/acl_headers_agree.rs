//! Our own ACL declarations (`src/sys/acl_decls.h`) and the real ACL headers
//! must give the same bindings for every item the project uses.
//!
//! build.rs generates `sys` from the real headers when it finds them and from
//! our declarations otherwise, so a build without a CANN install is only as
//! right as `acl_decls.h`. This test runs bindgen over both with the settings
//! build.rs uses and the one item list both share (`src/sys/acl_items.rs`),
//! splits each output into items with `syn`, and compares them item by item:
//! type definitions, struct fields and their types (hence layouts), enum
//! constant values, constants and function prototypes. Parameter names are
//! ignored (the real headers and ours may name them differently; only types
//! reach the ABI).
//!
//! Real headers are looked for in build.rs's order: `NPUALLOC_ACL_INCLUDE_DIR`,
//! `$ASCEND_HOME_PATH/include`, `$ASCEND_TOOLKIT_HOME/include`, then
//! `third_party/acl-headers/include` (see `scripts/fetch-acl-headers.sh`).
//! Without them the test skips, unless `NPUALLOC_REQUIRE_REAL_HEADERS=1`
//! (scripts/test.sh sets it after fetching), in which case it fails.

use quote::ToTokens;
use std::collections::BTreeMap;
use std::env;
use std::path::{Path, PathBuf};

mod items {
    #![allow(dead_code)]
    include!("../src/sys/acl_items.rs");
}
use items::{FUNCTIONS, TYPES, VARS};

const REQUIRE_ENV: &str = "NPUALLOC_REQUIRE_REAL_HEADERS";

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn real_headers_required() -> bool {
    env::var(REQUIRE_ENV).is_ok_and(|v| v == "1")
}

/// The first directory holding `acl/acl.h`, in build.rs's search order.
fn find_real_headers() -> Option<PathBuf> {
    let mut candidates = Vec::new();
    if let Ok(dir) = env::var("NPUALLOC_ACL_INCLUDE_DIR") {
        candidates.push(PathBuf::from(dir));
    }
    for var in ["ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"] {
        if let Ok(home) = env::var(var) {
            candidates.push(PathBuf::from(home).join("include"));
        }
    }
    candidates.push(manifest_dir().join("third_party/acl-headers/include"));
    candidates.into_iter().find(|dir| dir.join("acl/acl.h").is_file())
}

/// Returns the real header directory, or None after explaining the skip.
fn real_headers_or_skip(test: &str) -> Option<PathBuf> {
    match find_real_headers() {
        Some(dir) => Some(dir),
        None if real_headers_required() => panic!(
            "{REQUIRE_ENV}=1 but no real ACL headers were found (looked in NPUALLOC_ACL_INCLUDE_DIR, \
             $ASCEND_HOME_PATH/include, $ASCEND_TOOLKIT_HOME/include, third_party/acl-headers/include); \
             run scripts/fetch-acl-headers.sh"
        ),
        None => {
            eprintln!(
                "{test}: skipped: no real ACL headers found; run scripts/fetch-acl-headers.sh \
                 (set {REQUIRE_ENV}=1 to make this a failure)"
            );
            None
        }
    }
}

/// bindgen with exactly build.rs's settings (keep the two in step).
fn generate(header: &Path, include_dir: Option<&Path>) -> String {
    let mut builder = bindgen::Builder::default()
        .header(header.to_string_lossy())
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .default_macro_constant_type(bindgen::MacroTypeVariation::Signed)
        .layout_tests(false)
        .generate_comments(false)
        .merge_extern_blocks(true)
        .sort_semantically(true);
    if let Some(dir) = include_dir {
        builder = builder.clang_arg(format!("-I{}", dir.display()));
    }
    for item in TYPES {
        builder = builder.allowlist_type(format!("^{item}$"));
    }
    for item in VARS {
        builder = builder.allowlist_var(format!("^{item}$"));
    }
    for item in FUNCTIONS {
        builder = builder.allowlist_function(format!("^{item}$"));
    }
    builder.generate().unwrap_or_else(|e| panic!("bindgen failed on {}: {e}", header.display())).to_string()
}

/// Splits bindgen output into items keyed by name, each rendered as a
/// normalised token string (function parameter names replaced by `_`).
fn split_items(source: &str, what: &str) -> BTreeMap<String, String> {
    let file = syn::parse_file(source).unwrap_or_else(|e| panic!("cannot parse bindings from {what}: {e}"));
    let mut out = BTreeMap::new();
    let mut add = |name: String, text: String| {
        if let Some(previous) = out.insert(name.clone(), text.clone()) {
            assert_eq!(previous, text, "{what}: item {name} generated twice, differently");
        }
    };
    for item in file.items {
        match item {
            syn::Item::Type(t) => add(t.ident.to_string(), t.to_token_stream().to_string()),
            syn::Item::Struct(s) => add(s.ident.to_string(), s.to_token_stream().to_string()),
            syn::Item::Union(u) => add(u.ident.to_string(), u.to_token_stream().to_string()),
            syn::Item::Enum(e) => add(e.ident.to_string(), e.to_token_stream().to_string()),
            syn::Item::Const(c) => add(c.ident.to_string(), c.to_token_stream().to_string()),
            syn::Item::Static(s) => add(s.ident.to_string(), s.to_token_stream().to_string()),
            syn::Item::ForeignMod(block) => {
                for foreign in block.items {
                    match foreign {
                        syn::ForeignItem::Fn(mut f) => {
                            for input in f.sig.inputs.iter_mut() {
                                if let syn::FnArg::Typed(arg) = input {
                                    *arg.pat = syn::parse_quote!(_);
                                }
                            }
                            add(f.sig.ident.to_string(), f.to_token_stream().to_string());
                        }
                        syn::ForeignItem::Static(s) => add(s.ident.to_string(), s.to_token_stream().to_string()),
                        other => panic!("{what}: unexpected foreign item {}", other.to_token_stream()),
                    }
                }
            }
            // Trait impls bindgen may derive by hand (Default, Debug) follow the
            // struct they belong to; the struct itself is compared.
            syn::Item::Impl(_) => {}
            other => panic!("{what}: unexpected item {}", other.to_token_stream()),
        }
    }
    out
}

#[test]
fn own_declarations_agree_with_real_headers() {
    let Some(real_dir) = real_headers_or_skip("own_declarations_agree_with_real_headers") else {
        return;
    };
    let sys = manifest_dir().join("src/sys");
    let own = split_items(&generate(&sys.join("acl_decls.h"), None), "src/sys/acl_decls.h");
    let real = split_items(
        &generate(&sys.join("wrapper.h"), Some(&real_dir)),
        &format!("the real headers in {}", real_dir.display()),
    );

    let mut problems = Vec::new();
    for name in TYPES.iter().chain(VARS).chain(FUNCTIONS) {
        for (side, items) in [("src/sys/acl_decls.h", &own), ("the real headers", &real)] {
            if !items.contains_key(*name) {
                problems.push(format!("{name}: listed in src/sys/acl_items.rs but missing from {side}"));
            }
        }
    }
    // Every item either side produced (the listed ones plus the enum constants
    // they bring along) must be produced identically by the other.
    let names: std::collections::BTreeSet<&String> = own.keys().chain(real.keys()).collect();
    for name in names {
        match (own.get(name), real.get(name)) {
            (Some(a), Some(b)) if a != b => problems.push(format!("{name} differs:\n    ours: {a}\n    real: {b}")),
            (Some(a), None) => problems.push(format!("{name} only in src/sys/acl_decls.h: {a}")),
            (None, Some(b)) => problems.push(format!("{name} only in the real headers: {b}")),
            _ => {}
        }
    }
    assert!(
        problems.is_empty(),
        "src/sys/acl_decls.h disagrees with the real ACL headers in {} ({} problem(s)):\n  {}",
        real_dir.display(),
        problems.len(),
        problems.join("\n  ")
    );
    let listed = TYPES.len() + VARS.len() + FUNCTIONS.len();
    eprintln!("checked {listed} listed items ({} generated items) against {}", own.len(), real_dir.display());
}

#[test]
fn bindings_come_from_real_headers_when_fetched() {
    if !real_headers_required() {
        eprintln!(
            "bindings_come_from_real_headers_when_fetched: skipped: only checked under {REQUIRE_ENV}=1 \
             (currently built from: {})",
            npualloc::sys::BINDINGS_SOURCE
        );
        return;
    }
    assert!(
        npualloc::sys::BINDINGS_SOURCE.starts_with("real headers"),
        "{REQUIRE_ENV}=1 but the crate was built from {}; build.rs did not find the fetched headers",
        npualloc::sys::BINDINGS_SOURCE
    );
}
