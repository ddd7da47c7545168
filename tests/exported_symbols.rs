//! libnpualloc.so exports the npualloc C API and nothing else: no `acl*`
//! symbol (the runtime's functions are looked up with dlsym, never provided),
//! and no Rust internals.

use std::path::PathBuf;
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

#[test]
fn shared_library_exports_only_npualloc_symbols() {
    let lib = shared_library();
    assert!(lib.is_file(), "{} is not built; run `cargo build --workspace`", lib.display());
    let output = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&lib)
        .output()
        .unwrap_or_else(|e| panic!("cannot run nm (binutils): {e}"));
    assert!(output.status.success(), "nm failed: {}", String::from_utf8_lossy(&output.stderr));
    let listing = String::from_utf8_lossy(&output.stdout);

    let mut exported = Vec::new();
    let mut foreign = Vec::new();
    for line in listing.lines() {
        // "<address> <type> <name>"; only code and data symbols matter.
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [_, kind, name] = fields.as_slice() else { continue };
        if !matches!(*kind, "T" | "D" | "B" | "R" | "W" | "V" | "i") {
            continue;
        }
        if name.starts_with("npualloc_") {
            exported.push(*name);
        } else {
            foreign.push(format!("{kind} {name}"));
        }
    }
    for required in ["npualloc_last_error", "npualloc_status_name", "npualloc_version", "npualloc_abi_version"] {
        assert!(exported.contains(&required), "{required} is not exported by {}", lib.display());
    }
    assert!(foreign.is_empty(), "{} exports symbols outside the npualloc API: {foreign:?}", lib.display());
}
