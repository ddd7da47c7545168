//! The emulated device a replay runs on: the ACL runtime loaded by path,
//! plus the emulator's own control functions from the same library.

use crate::runtime::{Runtime, Stream};
use std::ffi::{c_char, CStr, CString};
use std::os::raw::c_void;
use std::path::Path;
use std::sync::Arc;

/// The device every replay uses.
pub const DEVICE: i32 = 0;

/// Capacity for unconstrained replays: the emulator's default device size.
pub const DEFAULT_CAPACITY: u64 = 64 << 30;

/// Why the emulator cannot be used.
#[derive(Debug, Clone, thiserror::Error)]
pub enum EmulatorError {
    #[error(transparent)]
    Load(#[from] crate::runtime::RuntimeError),
    #[error("'{path}' is not the ACL emulator: it lacks {symbol} (replays need the emulator's capacity controls)")]
    NotEmulator { path: String, symbol: &'static str },
    #[error("emulator call {call} failed with {code}")]
    Control { call: &'static str, code: i32 },
    #[error("{0}")]
    Runtime(#[from] crate::runtime::AclCallError),
}

/// `aclemu_usage` from the emulator's header.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Usage {
    pub malloc_bytes: u64,
    pub malloc_count: u64,
    pub physical_bytes: u64,
    pub physical_count: u64,
    pub mapped_bytes: u64,
    pub reserved_ranges: u64,
    pub streams: u64,
    pub events: u64,
    pub descs: u64,
    pub syncs: u64,
}

type SetMemoryFn = unsafe extern "C" fn(i32, u64) -> i32;
type GetUsageFn = unsafe extern "C" fn(i32, *mut Usage) -> i32;
type HostUsageFn = unsafe extern "C" fn(*mut u64, *mut u64) -> i32;
type CallCountFn = unsafe extern "C" fn(*const c_char) -> i64;

/// The loaded emulator. Its capacity is process-wide: replays at different
/// capacities run one at a time; call counts are per thread.
pub struct Emulator {
    rt: Arc<Runtime>,
    set_memory: SetMemoryFn,
    get_usage: GetUsageFn,
    /// `aclemu_host_usage`, absent from older emulators.
    host_usage: Option<HostUsageFn>,
    /// `aclemu_thread_call_count`, absent from older emulators.
    thread_calls: Option<CallCountFn>,
}

impl std::fmt::Debug for Emulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Emulator").field("source", &self.rt.source()).finish()
    }
}

impl Emulator {
    /// Loads the emulator at `path` (the same instance the allocator uses).
    pub fn load(path: &Path) -> Result<Emulator, EmulatorError> {
        let path_str = path.to_string_lossy().into_owned();
        let rt = Runtime::load(Some(&path_str))?;
        let c_path = CString::new(path_str.clone())
            .map_err(|_| EmulatorError::NotEmulator { path: path_str.clone(), symbol: "a path without NUL bytes" })?;
        // SAFETY: c_path is a valid C string. RTLD_NOLOAD hands back the copy
        // `Runtime::load` opened (one emulator instance, one device table).
        let mut handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
        if handle.is_null() {
            // SAFETY: as above.
            handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW) };
        }
        let sym = |name: &'static CStr| -> Result<*mut c_void, EmulatorError> {
            // SAFETY: handle is NULL-checked below by dlsym's contract (NULL handle
            // is RTLD_DEFAULT, which would still search loaded objects only).
            let p = unsafe { libc::dlsym(handle, name.as_ptr()) };
            if handle.is_null() || p.is_null() {
                Err(EmulatorError::NotEmulator { path: path_str.clone(), symbol: name.to_str().unwrap_or("?") })
            } else {
                Ok(p)
            }
        };
        let set = sym(c"aclemu_set_device_memory")?;
        let get = sym(c"aclemu_get_usage")?;
        // SAFETY: the emulator's header declares these signatures.
        let (set_memory, get_usage) = unsafe {
            (std::mem::transmute::<*mut c_void, SetMemoryFn>(set), std::mem::transmute::<*mut c_void, GetUsageFn>(get))
        };
        // SAFETY: the emulator's header declares this signature.
        let host_usage =
            sym(c"aclemu_host_usage").ok().map(|p| unsafe { std::mem::transmute::<*mut c_void, HostUsageFn>(p) });
        let thread_calls = sym(c"aclemu_thread_call_count")
            .ok()
            // SAFETY: the emulator's header declares this signature.
            .map(|p| unsafe { std::mem::transmute::<*mut c_void, CallCountFn>(p) });
        rt.set_device(DEVICE)?;
        Ok(Emulator { rt, set_memory, get_usage, host_usage, thread_calls })
    }

    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.rt
    }

    /// Sets the emulated device's capacity.
    pub fn set_capacity(&self, bytes: u64) -> Result<(), EmulatorError> {
        // SAFETY: plain values.
        match unsafe { (self.set_memory)(DEVICE, bytes) } {
            0 => Ok(()),
            code => Err(EmulatorError::Control { call: "aclemu_set_device_memory", code }),
        }
    }

    /// The device's usage counters.
    #[inline]
    pub fn usage(&self) -> Usage {
        let mut u = Usage::default();
        // SAFETY: u is a valid out-pointer of the declared layout.
        unsafe { (self.get_usage)(DEVICE, &mut u) };
        u
    }

    /// Live pinned host memory (aclrtMallocHost) of the process: (bytes,
    /// blocks); None with an emulator that does not count it.
    pub fn host_usage(&self) -> Option<(u64, u64)> {
        let f = self.host_usage?;
        let (mut bytes, mut count) = (0u64, 0u64);
        // SAFETY: both are valid out-pointers.
        (unsafe { f(&mut bytes, &mut count) } == 0).then_some((bytes, count))
    }

    /// How many times this thread has called the ACL function `name` so far
    /// (a count that only grows: measure with differences). None with an
    /// emulator that does not count calls, or for a name it does not know.
    pub fn thread_calls(&self, name: &CStr) -> Option<u64> {
        let f = self.thread_calls?;
        // SAFETY: name is a NUL-terminated string.
        u64::try_from(unsafe { f(name.as_ptr()) }).ok()
    }

    /// `n` fresh streams on the replay device (trace stream i = element i).
    pub fn create_streams(&self, n: usize) -> Result<Vec<Stream>, EmulatorError> {
        let rt = &self.rt;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            match rt.on_device(DEVICE, || rt.create_stream()) {
                Ok(s) => out.push(s),
                Err(e) => {
                    self.destroy_streams(&out);
                    return Err(e.into());
                }
            }
        }
        Ok(out)
    }

    pub fn destroy_streams(&self, streams: &[Stream]) {
        let rt = &self.rt;
        for &s in streams {
            let _ = rt.on_device(DEVICE, || rt.destroy_stream(s));
        }
    }
}
