//! Generates the raw ACL types and prototypes with bindgen, and gives the
//! shared library its SONAME.
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
//!
//! Cargo reruns this script (and so recompiles the crate) when a path it was
//! told to watch changes, and always when such a path does not exist. So
//! only existing paths are watched: the headers in use, and for each
//! directory searched before them, the deepest existing directory on the way
//! to its `acl/acl.h`, whose contents change when the header appears (a
//! directory's watch covers every file and directory below it). Nothing
//! above the directory a variable names is watched, and in the repository
//! nothing above `third_party/` (committed, holding only a README until
//! headers are fetched): a watch on the repository root would see `target/`
//! change on every build. `scripts/check-noop-build.sh` checks that a second build
//! compiles nothing.

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
    watch(&own);
    watch(&manifest.join("src/sys/wrapper.h"));
    watch(&manifest.join("src/sys/acl_items.rs"));
    let fetched = manifest.join("third_party/acl-headers/include");

    // (directory searched, the highest directory that may be watched for it)
    let mut candidates: Vec<(PathBuf, PathBuf)> = Vec::new();
    if let Ok(dir) = env::var("NPUALLOC_ACL_INCLUDE_DIR") {
        let dir = PathBuf::from(dir);
        candidates.push((dir.clone(), dir));
    }
    for var in ["ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"] {
        if let Ok(home) = env::var(var) {
            let home = PathBuf::from(home);
            candidates.push((home.join("include"), home));
        }
    }
    candidates.push((fetched, manifest.join("third_party")));

    let mut real = None;
    for (dir, limit) in &candidates {
        if dir.join("acl/acl.h").is_file() {
            // In use: every header under acl/ (wrapper.h includes several).
            watch(&dir.join("acl"));
            real = Some(dir.clone());
            break;
        }
        // Searched first and missing: watch where the header would appear.
        if let Some(existing) = deepest_existing(&dir.join("acl"), limit) {
            watch(&existing);
        }
    }

    let (source, bindings) = match real {
        Some(dir) => {
            let b = generate(&manifest.join("src/sys/wrapper.h"), Some(&dir));
            (format!("real headers in {}", dir.display()), b)
        }
        None => ("own declarations (src/sys/acl_decls.h)".to_string(), generate(&own, None)),
    };
    std::fs::write(out.join("acl_bindings.rs"), bindings).expect("write acl_bindings.rs");
    println!("cargo:rustc-env=NPUALLOC_ACL_BINDINGS_SOURCE={source}");

    if env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        let version_rs = manifest.join("src/ffi/version.rs");
        watch(&version_rs);
        let soname = format!("libnpualloc.so.{}", abi_version(&version_rs));
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{soname}");
        link_soname_in_output_dir(&out, &soname);
    }
}

/// `NPUALLOC_ABI_VERSION` as `src/ffi/version.rs` defines it: the one place
/// the ABI version is written (the header and CMake's install names take it
/// from there too).
fn abi_version(version_rs: &Path) -> u32 {
    let text = std::fs::read_to_string(version_rs).expect("read src/ffi/version.rs");
    text.lines()
        .find_map(|line| line.trim().strip_prefix("pub const NPUALLOC_ABI_VERSION: u32 ="))
        .and_then(|rest| rest.trim().strip_suffix(';'))
        .and_then(|n| n.trim().parse().ok())
        .expect("src/ffi/version.rs has no `pub const NPUALLOC_ABI_VERSION: u32 = N;` line")
}

/// A program linked against `target/<profile>/libnpualloc.so` asks the
/// dynamic loader for the SONAME, so the output directory carries that name
/// too, as a link to the library cargo writes there. The only file this
/// script writes outside OUT_DIR (`target/<profile>/build/<pkg>/out`).
#[cfg(unix)]
fn link_soname_in_output_dir(out: &Path, soname: &str) {
    // Only in cargo's own layout; another build system (or a separate
    // build directory) places the library itself.
    let mut up = out.ancestors();
    let (Some(build), Some(profile_dir)) = (up.nth(2), up.next()) else { return };
    if build.file_name() != Some(std::ffi::OsStr::new("build")) {
        return;
    }
    let link = profile_dir.join(soname);
    if std::fs::read_link(&link).is_ok_and(|to| to == Path::new("libnpualloc.so")) {
        return;
    }
    let _ = std::fs::remove_file(&link);
    match std::os::unix::fs::symlink("libnpualloc.so", &link) {
        // A concurrent build made it first.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => println!("cargo:warning=cannot link {} to libnpualloc.so: {e}", link.display()),
        Ok(()) => {}
    }
}

#[cfg(not(unix))]
fn link_soname_in_output_dir(_out: &Path, _soname: &str) {}

/// Asks cargo to rerun this script when `path` (a file, or anything below a
/// directory) changes. Only called for paths that exist: cargo treats a
/// missing one as changed on every build.
fn watch(path: &Path) {
    debug_assert!(path.exists(), "{} does not exist", path.display());
    println!("cargo:rerun-if-changed={}", path.display());
}

/// The deepest existing directory among `path` and its ancestors, not above
/// `limit`; `None` when even `limit` does not exist (or `path` is not below it).
fn deepest_existing(path: &Path, limit: &Path) -> Option<PathBuf> {
    path.ancestors().take_while(|p| p.starts_with(limit)).find(|p| p.is_dir()).map(Path::to_path_buf)
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
    builder.generate().unwrap_or_else(|e| panic!("bindgen failed on {}: {e}", header.display())).to_string()
}
