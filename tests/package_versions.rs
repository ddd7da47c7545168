//! One version everywhere: the Python package's version (python/pyproject.toml)
//! is the library's (Cargo.toml's, which npualloc_version(), the header, the
//! CMake package, pkg-config and the installed file's name carry).

#[test]
fn the_python_package_has_the_library_version() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/python/pyproject.toml");
    let text = std::fs::read_to_string(path).unwrap();
    let versions: Vec<&str> =
        text.lines().filter_map(|l| l.trim().strip_prefix("version = ")).map(|v| v.trim().trim_matches('"')).collect();
    assert_eq!(versions, [env!("CARGO_PKG_VERSION")], "python/pyproject.toml's version line");
}
