//! The run-time loader of libascendcl (`npualloc::runtime::loader`), tried on
//! a path that does not exist, on libraries that lack required functions, and
//! on the emulator's `libascendcl.so` (built by `cargo build --workspace`).

use npualloc::runtime::loader;
use npualloc::runtime::symbols::REQUIRED_SYMBOLS;
use npualloc::runtime::{Runtime, RuntimeError};
use npualloc::sys;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `target/<profile>`: integration tests run from `target/<profile>/deps/`.
fn target_profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("test binary has a directory");
    deps.parent().expect("deps has a parent").to_path_buf()
}

/// The emulator's shared library, or a failure telling how to build it.
fn emulator_path() -> PathBuf {
    let path = target_profile_dir().join("libascendcl.so");
    assert!(
        path.is_file(),
        "the ACL emulator {} is not built; run `cargo build --workspace` (add --release for release \
         tests) before `cargo test`",
        path.display()
    );
    path
}

/// A scratch directory for this test process.
fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("npualloc-loader-test-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// Compiles `source` into a shared library in a scratch directory.
fn compile_shared_library(name: &str, source: &str) -> PathBuf {
    let dir = scratch_dir(name);
    let c_file = dir.join(format!("{name}.c"));
    let so_file = dir.join(format!("lib{name}.so"));
    std::fs::write(&c_file, source).expect("write C source");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let output = Command::new(&cc)
        .args(["-shared", "-fPIC", "-o"])
        .arg(&so_file)
        .arg(&c_file)
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C compiler '{cc}': {e}"));
    assert!(
        output.status.success(),
        "compiling {} failed:\n{}",
        c_file.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    so_file
}

fn load_error(path: &Path) -> RuntimeError {
    match loader::load(Some(path.to_str().expect("UTF-8 path"))) {
        Ok(lib) => panic!("loading {} succeeded (from {}), expected an error", path.display(), lib.path),
        Err(e) => e,
    }
}

#[test]
fn missing_library_is_unavailable_and_names_the_path() {
    let path = scratch_dir("missing").join("no-such-libascendcl.so");
    let err = load_error(&path);
    let shown = err.to_string();
    match &err {
        RuntimeError::Unavailable { path: p, reason, origin } => {
            assert_eq!(p, path.to_str().unwrap());
            assert!(!reason.is_empty());
            assert_eq!(*origin, loader::LibrarySource::Given);
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert!(shown.contains(path.to_str().unwrap()), "message does not name the path: {shown}");
    // ... and says where the path came from, so the user knows what to change.
    assert!(shown.contains("config key acl_library"), "message does not say what to change: {shown}");

    // The same failure through Runtime::load and the crate error type.
    let err = Runtime::load(Some(path.to_str().unwrap())).unwrap_err();
    let as_crate_error = npualloc::error::Error::from(err);
    assert_eq!(
        npualloc::ffi::npualloc_status::from(&as_crate_error),
        npualloc::ffi::npualloc_status::NPUALLOC_ERR_RUNTIME_UNAVAILABLE
    );
}

#[test]
fn library_without_acl_symbols_names_the_first_missing_function() {
    // libc is loadable but exports no ACL function at all.
    let err = load_error(Path::new("libc.so.6"));
    match &err {
        RuntimeError::MissingSymbol { path, symbol } => {
            assert_eq!(path, "libc.so.6");
            assert_eq!(*symbol, REQUIRED_SYMBOLS[0]);
        }
        other => panic!("expected MissingSymbol, got {other:?}"),
    }
    let shown = err.to_string();
    assert!(shown.contains("libc.so.6") && shown.contains(REQUIRED_SYMBOLS[0]), "{shown}");
}

#[test]
fn library_with_only_acl_init_names_the_next_required_function() {
    assert_eq!(REQUIRED_SYMBOLS[0], "aclInit", "the symbol list's first entry changed; update this test");
    let so =
        compile_shared_library("aclinit_only", "int aclInit(const char *configPath) { (void)configPath; return 0; }\n");
    let err = load_error(&so);
    match &err {
        RuntimeError::MissingSymbol { path, symbol } => {
            assert_eq!(path, so.to_str().unwrap());
            assert_eq!(*symbol, REQUIRED_SYMBOLS[1], "the first missing required function");
        }
        other => panic!("expected MissingSymbol, got {other:?}"),
    }
    assert!(err.to_string().contains(REQUIRED_SYMBOLS[1]), "{err}");
    let _ = std::fs::remove_dir_all(so.parent().unwrap());
}

#[test]
fn emulator_loads_with_vmm_and_its_functions_work() {
    let path = emulator_path();
    let path_str = path.to_str().expect("UTF-8 path");

    let lib = loader::load(Some(path_str)).unwrap_or_else(|e| panic!("loading the emulator failed: {e}"));
    assert_eq!(lib.path, path_str);
    assert!(lib.has_vmm(), "the emulator lacks VMM functions: {:?}", lib.missing_optional);
    // A second load of the same path is the same, cached library.
    let again = loader::load(Some(path_str)).unwrap();
    assert!(std::sync::Arc::ptr_eq(&lib, &again));

    let rt = Runtime::load(Some(path_str)).unwrap();
    assert!(rt.has_vmm());
    assert_eq!(rt.source(), path_str);
    let api = rt.api();
    // SAFETY: the table was resolved from the emulator, whose functions have
    // the ACL signatures; every pointer passed is valid for the call.
    unsafe {
        let init = (api.aclInit)(std::ptr::null());
        assert!(init == sys::ACL_SUCCESS || init == sys::ACL_ERROR_REPEAT_INITIALIZE, "aclInit failed with {init}");
        assert_eq!((api.aclrtSetDevice)(0), sys::ACL_SUCCESS);
        let mut device = -1;
        assert_eq!((api.aclrtGetDevice)(&mut device), sys::ACL_SUCCESS);
        assert_eq!(device, 0);

        let (mut free, mut total) = (0usize, 0usize);
        assert_eq!((api.aclrtGetMemInfo)(sys::ACL_HBM_MEM, &mut free, &mut total), sys::ACL_SUCCESS);
        assert!(total > 0 && free <= total, "free {free}, total {total}");

        let mut ptr = std::ptr::null_mut();
        assert_eq!((api.aclrtMalloc)(&mut ptr, 1 << 20, sys::ACL_MEM_MALLOC_HUGE_FIRST), sys::ACL_SUCCESS);
        assert!(!ptr.is_null());
        assert_eq!((api.aclrtFree)(ptr), sys::ACL_SUCCESS);
    }
}
