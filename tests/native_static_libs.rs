//! CMakeLists.txt gives `npualloc::npualloc_static` the system libraries a
//! Rust staticlib needs. That list must be the one rustc reports for this
//! crate (`--print native-static-libs`), or static links break with missing
//! symbols on the next toolchain change.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

/// The libraries listed by `set(NPUALLOC_NATIVE_STATIC_LIBS ...)` in CMakeLists.txt.
fn cmake_list() -> BTreeSet<String> {
    let cmake = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("CMakeLists.txt"))
        .expect("read CMakeLists.txt");
    let start = cmake
        .find("set(NPUALLOC_NATIVE_STATIC_LIBS")
        .expect("CMakeLists.txt has no set(NPUALLOC_NATIVE_STATIC_LIBS ...)");
    let rest = &cmake[start + "set(NPUALLOC_NATIVE_STATIC_LIBS".len()..];
    let body = &rest[..rest.find(')').expect("unterminated set(")];
    body.split_whitespace().map(|lib| lib.trim_start_matches("-l").to_string()).collect()
}

/// What rustc says a static link against this crate needs.
fn rustc_list() -> BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(&cargo)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["rustc", "--locked", "--lib", "-p", "npualloc", "--crate-type", "staticlib"])
        .args(["--", "--print", "native-static-libs"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cargo}: {e}"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "cargo rustc failed:\n{stderr}");
    let line = stderr
        .lines()
        .find_map(|l| l.split_once("native-static-libs:").map(|(_, libs)| libs.to_string()))
        .unwrap_or_else(|| panic!("rustc printed no native-static-libs line:\n{stderr}"));
    line.split_whitespace()
        .map(|lib| lib.strip_prefix("-l").unwrap_or_else(|| panic!("unexpected item {lib} in: {line}")).to_string())
        .collect()
}

#[test]
fn cmake_static_libs_match_rustc() {
    let (cmake, rustc) = (cmake_list(), rustc_list());
    assert_eq!(
        cmake, rustc,
        "NPUALLOC_NATIVE_STATIC_LIBS in CMakeLists.txt differs from rustc's --print native-static-libs"
    );
}
