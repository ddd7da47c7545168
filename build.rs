//! Generates the raw ACL types and prototypes with bindgen.
//!
//! Header search order (the first that has `acl/acl.h` wins):
//! 1. `NPUALLOC_ACL_INCLUDE_DIR`
//! 2. `$ASCEND_HOME_PATH/include`, then `$ASCEND_TOOLKIT_HOME/include` (a CANN install)
//! 3. `third_party/acl-headers/include` (fetched by `scripts/fetch-acl-headers.sh`, never committed)
//! 4. `src/sys/acl_decls.h`, the project's own declarations, so a bare build works anywhere.
//!
//! No function is linked: the library loads libascendcl.so at run time. The
//! prototypes are generated only so that tests can check the loader's table
//! against them.

use std::env;
use std::path::{Path, PathBuf};

// TYPES, VARS and FUNCTIONS: every ACL item the project uses. The same lists
// are applied to the real headers and to our own declarations, so the two
// outputs are comparable (tests/acl_headers_agree.rs uses them too).
include!("src/sys/acl_items.rs");

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    for var in ["NPUALLOC_ACL_INCLUDE_DIR", "ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let own = manifest.join("src/sys/acl_decls.h");
    println!("cargo:rerun-if-changed={}", own.display());
    println!("cargo:rerun-if-changed=src/sys/wrapper.h");
    println!("cargo:rerun-if-changed=src/sys/acl_items.rs");
    let fetched = manifest.join("third_party/acl-headers/include");
    println!("cargo:rerun-if-changed={}", fetched.join("acl/acl.h").display());

    let (source, bindings) = match find_real_headers(&fetched) {
        Some(dir) => {
            let b = generate(&manifest.join("src/sys/wrapper.h"), Some(&dir));
            (format!("real headers in {}", dir.display()), b)
        }
        None => ("own declarations (src/sys/acl_decls.h)".to_string(), generate(&own, None)),
    };
    std::fs::write(out.join("acl_bindings.rs"), bindings).expect("write acl_bindings.rs");
    println!("cargo:rustc-env=NPUALLOC_ACL_BINDINGS_SOURCE={source}");
}

fn find_real_headers(fetched: &Path) -> Option<PathBuf> {
    let mut candidates = Vec::new();
    if let Ok(dir) = env::var("NPUALLOC_ACL_INCLUDE_DIR") {
        candidates.push(PathBuf::from(dir));
    }
    for var in ["ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"] {
        if let Ok(home) = env::var(var) {
            candidates.push(PathBuf::from(home).join("include"));
        }
    }
    candidates.push(fetched.to_path_buf());
    candidates.into_iter().find(|dir| dir.join("acl/acl.h").is_file())
}

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
    builder
        .generate()
        .unwrap_or_else(|e| panic!("bindgen failed on {}: {e}", header.display()))
        .to_string()
}
