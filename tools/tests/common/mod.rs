//! What the tools' integration tests share: where the emulator's
//! `libascendcl.so` is and where the repository's files are.

#![allow(dead_code)]

use npualloc_tools::replay::Emulator;
use std::path::{Path, PathBuf};

/// `target/<profile>`: integration tests run from `target/<profile>/deps/`.
pub fn target_profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent().and_then(Path::parent).expect("target/<profile>/deps/<test>").to_path_buf()
}

/// The emulator `cargo build --workspace` put next to this profile's
/// binaries; fails saying how to build it when it is missing.
pub fn emulator_path() -> PathBuf {
    let path = target_profile_dir().join("libascendcl.so");
    assert!(
        path.is_file(),
        "the ACL emulator {} is not built; run `cargo build --workspace` (add --release for release tests) \
         before `cargo test`",
        path.display()
    );
    path
}

pub fn load_emulator() -> Emulator {
    Emulator::load(&emulator_path()).expect("load the emulator")
}

/// A file of the repository (this crate lives in `tools/`).
pub fn repo_file(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel)
}
