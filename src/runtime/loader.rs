//! Loads libascendcl.so at run time and resolves the symbol table.
//!
//! Which library: the config key `acl_library`, else `NPUALLOC_ACL_LIBRARY`,
//! else `$ASCEND_HOME_PATH/lib64/libascendcl.so` when that file exists, else
//! the dynamic loader's own search for `libascendcl.so`. A library is opened
//! once per path and kept open for the life of the process: allocators hold
//! function pointers into it, so it must never be unloaded under them.

use super::symbols::AclApi;
use super::RuntimeError;
use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

/// Environment variable naming the ACL library, after the config key.
pub const ACL_LIBRARY_ENV: &str = "NPUALLOC_ACL_LIBRARY";
const DEFAULT_LIBRARY: &str = "libascendcl.so";

/// A loaded ACL runtime library and the table resolved from it.
pub struct LoadedLibrary {
    pub path: String,
    pub api: AclApi,
    /// Optional symbols the library lacks (features that are off).
    pub missing_optional: Vec<&'static str>,
}

impl LoadedLibrary {
    /// True when every virtual-memory function is present.
    pub fn has_vmm(&self) -> bool {
        self.api.features().vmm
    }
}

/// Where the library comes from when no path is configured.
pub fn default_library_path() -> String {
    if let Some(p) = std::env::var_os(ACL_LIBRARY_ENV).filter(|p| !p.is_empty()) {
        return p.to_string_lossy().into_owned();
    }
    if let Some(home) = std::env::var_os("ASCEND_HOME_PATH") {
        let candidate = PathBuf::from(home).join("lib64").join(DEFAULT_LIBRARY);
        if candidate.is_file() {
            return candidate.to_string_lossy().into_owned();
        }
    }
    DEFAULT_LIBRARY.to_string()
}

fn cache() -> &'static Mutex<HashMap<String, Arc<LoadedLibrary>>> {
    static CACHE: OnceLock<Mutex<HashMap<String, Arc<LoadedLibrary>>>> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// Opens (once) the library at `path`, or the default one, and resolves it.
pub fn load(path: Option<&str>) -> Result<Arc<LoadedLibrary>, RuntimeError> {
    let path = match path {
        Some(p) if !p.is_empty() => p.to_string(),
        _ => default_library_path(),
    };
    let mut cache = cache().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(lib) = cache.get(&path) {
        return Ok(lib.clone());
    }
    let lib = Arc::new(open(&path)?);
    cache.insert(path, lib.clone());
    Ok(lib)
}

fn open(path: &str) -> Result<LoadedLibrary, RuntimeError> {
    let c_path = CString::new(path).map_err(|_| RuntimeError::Unavailable {
        path: path.to_string(),
        reason: "the path contains a NUL byte".into(),
    })?;
    // SAFETY: c_path is a valid C string; dlopen has no other preconditions.
    // The handle is deliberately never closed (see the module docs).
    let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        return Err(RuntimeError::Unavailable { path: path.to_string(), reason: dl_error() });
    }
    let lookup = |name: &str| {
        let c_name = CString::new(name).expect("symbol names have no NUL");
        // SAFETY: handle is a live dlopen handle and c_name a valid C string.
        unsafe { libc::dlsym(handle, c_name.as_ptr()) }
    };
    // SAFETY: the symbols come from a library that claims to be libascendcl;
    // their signatures are the documented ACL ones the table declares.
    let api = unsafe { AclApi::resolve(lookup) }
        .map_err(|symbol| RuntimeError::MissingSymbol { path: path.to_string(), symbol })?;
    Ok(LoadedLibrary { path: path.to_string(), missing_optional: api.missing_optional(), api })
}

fn dl_error() -> String {
    // SAFETY: dlerror returns NULL or a valid C string owned by libc.
    let msg = unsafe { libc::dlerror() };
    if msg.is_null() {
        "unknown dlopen error".into()
    } else {
        // SAFETY: non-NULL, NUL-terminated, valid until the next dl* call on this thread.
        unsafe { CStr::from_ptr(msg) }.to_string_lossy().into_owned()
    }
}
