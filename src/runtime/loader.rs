//! Loads libascendcl.so at run time and resolves the symbol table. Which library: the config key `acl_library`,
//! else `NPUALLOC_ACL_LIBRARY`, else `$ASCEND_HOME_PATH/lib64/libascendcl.so` if it exists, else the dynamic
//! loader's search. Each path is opened once and never unloaded: allocators hold function pointers into it.

use super::symbols::AclApi;
use super::RuntimeError;
use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, LazyLock, Mutex};

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

/// Where the ACL library's path came from. A failed load shows it with what to change (`Display`), since the
/// loader's own message only says that a file could not be opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LibrarySource {
    /// A path given by the caller: the config key `acl_library` (or a tool's `--acl-library`).
    Given,
    /// The environment variable `NPUALLOC_ACL_LIBRARY`.
    Env,
    /// `$ASCEND_HOME_PATH/lib64/libascendcl.so` (a CANN install).
    AscendHome,
    /// No path anywhere: the dynamic loader's search for `libascendcl.so`.
    Search,
}

impl fmt::Display for LibrarySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LibrarySource::Given => {
                "the path was given by the program that loads npualloc (the config key acl_library, \
                 or a tool's --acl-library and the defaults the tool applies): name a libascendcl.so \
                 that loads; without the config key npualloc falls back to NPUALLOC_ACL_LIBRARY or \
                 the CANN install"
            }
            LibrarySource::Env => {
                "the path was given with NPUALLOC_ACL_LIBRARY: set it to a libascendcl.so that loads, \
                 or unset it to use the CANN install"
            }
            LibrarySource::AscendHome => {
                "the library is the CANN install's ($ASCEND_HOME_PATH/lib64): source CANN's set_env.sh \
                 so that the libraries it needs are found, or set NPUALLOC_ACL_LIBRARY to another libascendcl.so"
            }
            LibrarySource::Search => {
                "no path was configured and the dynamic loader found none: source CANN's set_env.sh \
                 (it sets ASCEND_HOME_PATH), or set NPUALLOC_ACL_LIBRARY (or the config key acl_library) \
                 to the path of libascendcl.so; without an NPU, to the emulator's \
                 (target/<profile>/libascendcl.so after `cargo build -p acl-emu`)"
            }
        })
    }
}

/// The library path and where it came from, in the module docs' order; empty strings count as unset.
fn choose(given: Option<&str>, env: Option<String>, ascend_home: Option<PathBuf>) -> (String, LibrarySource) {
    if let Some(p) = given.filter(|p| !p.is_empty()) {
        return (p.to_string(), LibrarySource::Given);
    }
    if let Some(p) = env.filter(|p| !p.is_empty()) {
        return (p, LibrarySource::Env);
    }
    if let Some(candidate) = ascend_home.map(|home| home.join("lib64").join(DEFAULT_LIBRARY)) {
        if candidate.is_file() {
            return (candidate.to_string_lossy().into_owned(), LibrarySource::AscendHome);
        }
    }
    (DEFAULT_LIBRARY.to_string(), LibrarySource::Search)
}

static CACHE: LazyLock<Mutex<HashMap<String, Arc<LoadedLibrary>>>> = LazyLock::new(Default::default);

/// Opens (once) the library at `path`, or the default one, and resolves it.
pub fn load(path: Option<&str>) -> Result<Arc<LoadedLibrary>, RuntimeError> {
    let (path, source) = choose(
        path,
        std::env::var_os(ACL_LIBRARY_ENV).map(|p| p.to_string_lossy().into_owned()),
        std::env::var_os("ASCEND_HOME_PATH").map(PathBuf::from),
    );
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(lib) = cache.get(&path) {
        return Ok(lib.clone());
    }
    let lib = Arc::new(open(&path, source)?);
    cache.insert(path, lib.clone());
    Ok(lib)
}

fn open(path: &str, source: LibrarySource) -> Result<LoadedLibrary, RuntimeError> {
    let unavailable =
        |reason: String| RuntimeError::Unavailable { path: path.to_string(), reason: reason.into(), origin: source };
    let c_path = CString::new(path).map_err(|_| unavailable("the path contains a NUL byte".into()))?;
    // SAFETY: c_path is a valid C string; dlopen has no other preconditions. Never closed (module docs).
    let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        // SAFETY: dlerror returns NULL or a valid C string owned by libc.
        let msg = unsafe { libc::dlerror() };
        return Err(unavailable(if msg.is_null() {
            "unknown dlopen error".into()
        } else {
            // SAFETY: non-NULL, NUL-terminated, valid until the next dl* call on this thread.
            unsafe { CStr::from_ptr(msg) }.to_string_lossy().into_owned()
        }));
    }
    let lookup = |name: &str| {
        let c_name = CString::new(name).expect("symbol names have no NUL");
        // SAFETY: handle is a live dlopen handle and c_name a valid C string.
        unsafe { libc::dlsym(handle, c_name.as_ptr()) }
    };
    // SAFETY: a library that claims to be libascendcl has the documented ACL signatures the table declares.
    let api = unsafe { AclApi::resolve(lookup) }
        .map_err(|symbol| RuntimeError::MissingSymbol { path: path.to_string(), symbol })?;
    Ok(LoadedLibrary { path: path.to_string(), missing_optional: api.missing_optional(), api })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_path_comes_from_the_first_source_set() {
        let home = std::env::temp_dir().join(format!("npualloc-loader-home-{}", std::process::id()));
        std::fs::create_dir_all(home.join("lib64")).expect("scratch CANN home");
        let lib = home.join("lib64").join(DEFAULT_LIBRARY);
        std::fs::write(&lib, b"").expect("scratch library file");
        let env = || Some("/env/libascendcl.so".to_string());

        assert_eq!(choose(Some("/given.so"), env(), Some(home.clone())), ("/given.so".into(), LibrarySource::Given));
        assert_eq!(choose(None, env(), Some(home.clone())), ("/env/libascendcl.so".into(), LibrarySource::Env));
        assert_eq!(choose(Some(""), Some(String::new()), Some(home.clone())).1, LibrarySource::AscendHome);
        assert_eq!(choose(None, None, Some(home.clone())).0, lib.to_string_lossy());
        // A CANN home without the library, or none: the loader's search.
        let empty = home.join("no-cann-here");
        assert_eq!(choose(None, None, Some(empty)), (DEFAULT_LIBRARY.into(), LibrarySource::Search));
        assert_eq!(choose(None, None, None), (DEFAULT_LIBRARY.into(), LibrarySource::Search));
        std::fs::remove_dir_all(&home).expect("remove the scratch CANN home");
    }

    #[test]
    fn a_failed_load_says_what_to_change_for_each_source() {
        let shown = |origin| {
            RuntimeError::Unavailable { path: "libascendcl.so".into(), reason: "cannot open".into(), origin }
                .to_string()
        };
        let search = shown(LibrarySource::Search);
        for needed in ["NPUALLOC_ACL_LIBRARY", "acl_library", "set_env.sh", "cargo build -p acl-emu"] {
            assert!(search.contains(needed), "the search failure does not mention {needed}: {search}");
        }
        assert!(shown(LibrarySource::Given).contains("config key acl_library"));
        assert!(shown(LibrarySource::Given).contains("--acl-library"), "a tool's option is named too");
        assert!(shown(LibrarySource::Env).contains("given with NPUALLOC_ACL_LIBRARY"));
        assert!(shown(LibrarySource::AscendHome).contains("$ASCEND_HOME_PATH/lib64"));
        // The loader's own reason stays in the message.
        assert!(search.starts_with("cannot load the ACL runtime library 'libascendcl.so': cannot open; "));
    }
}
