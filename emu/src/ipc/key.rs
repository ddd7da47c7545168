//! aclrtIpcMemGetExportKey / aclrtIpcMemImportByKey / aclrtIpcMemClose /
//! aclrtIpcMemSetImportPid: aclrtMalloc allocations shared by a 64-character
//! key (docs/runtime-behaviour.md, "Sharing memory between processes").
//!
//! The key is `aclemu-ipc:<pid>:<index>:<generation>`, NUL-terminated in a
//! buffer of at least 65 bytes. An import maps the allocation's pages at a
//! new address of the importer; imports of one key in one process are kept
//! in order, and a close in the importer ends the oldest (the runtime's
//! `vaList.front()`), in the exporter it ends the export.

use super::table::Kind;
use super::{Import, Name};
use crate::error::{
    require, AclResult, ACL_ERROR_INVALID_PARAM, ACL_ERROR_RT_DRV_INTERNAL_ERROR, ACL_ERROR_RT_MEMORY_ALLOCATION,
    ACL_ERROR_RT_PARAM_INVALID,
};
use crate::faults::Api;
use crate::ffi::{acl_entry, lock, write_out};
use std::collections::{BTreeMap, HashMap};
use std::ffi::{c_char, c_void, CStr};
use std::sync::Mutex;

/// The key buffer the runtime wants: 64 characters and the NUL.
const KEY_LEN: usize = 65;
const PREFIX: &str = "aclemu-ipc";

/// This process's imports by key: addresses per key, oldest first, and
/// what each address holds.
#[derive(Default)]
struct Imports {
    by_key: HashMap<Name, Vec<usize>>,
    at: BTreeMap<usize, (usize, Import)>,
}

static IMPORTS: Mutex<Option<Imports>> = Mutex::new(None);

fn format_key(name: Name) -> String {
    format!("{PREFIX}:{}:{}:{}", name.pid, name.index, name.generation)
}

fn parse_key(key: &str) -> Option<Name> {
    let mut parts = key.strip_prefix(PREFIX)?.strip_prefix(':')?.split(':');
    let name = Name {
        pid: parts.next()?.parse().ok()?,
        index: parts.next()?.parse().ok()?,
        generation: parts.next()?.parse().ok()?,
    };
    parts.next().is_none().then_some(name)
}

/// Reads a key argument: 507899 (the driver finds no such share) when it
/// is not one of the emulator's keys.
///
/// # Safety
/// `key` must be NULL or NUL-terminated.
unsafe fn read_key(key: *const c_char) -> AclResult<Name> {
    require(!key.is_null())?;
    // SAFETY: checked non-NULL; the caller promises a C string.
    let key = unsafe { CStr::from_ptr(key) };
    key.to_str().ok().and_then(parse_key).ok_or(ACL_ERROR_RT_DRV_INTERNAL_ERROR)
}

/// True if `[start, end)` lies inside one memory imported by key.
pub fn imported_covers((start, end): (usize, usize)) -> bool {
    let imports = lock(&IMPORTS);
    let Some(im) = imports.as_ref() else { return false };
    im.at.range(..=start).next_back().is_some_and(|(&at, (len, _))| end <= at + len)
}

unsafe fn export_key(ptr: *mut c_void, size: usize, key: *mut c_char, len: usize, flags: u64) -> AclResult<()> {
    if ptr.is_null() || key.is_null() {
        return Err(ACL_ERROR_INVALID_PARAM);
    }
    if size == 0 || len == 0 || flags > 1 {
        return Err(ACL_ERROR_RT_PARAM_INVALID);
    }
    // The driver writes 64 characters and the NUL.
    if len < KEY_LEN {
        return Err(ACL_ERROR_RT_PARAM_INVALID);
    }
    let (device, fd, offset, usable) =
        crate::memory::shareable_range(ptr as usize).ok_or(ACL_ERROR_RT_PARAM_INVALID)?;
    // The start of an allocation, page aligned (a block that does not start
    // on a page is refused), and no more than it holds.
    if !(ptr as usize).is_multiple_of(4096) || size > usable {
        return Err(ACL_ERROR_RT_PARAM_INVALID);
    }
    let name = super::export(Kind::Key, device, fd, offset, size as u64, 4096, flags == 0)?;
    let text = format_key(name);
    debug_assert!(text.len() < KEY_LEN);
    // SAFETY: `key` holds at least KEY_LEN bytes (the caller's `len`).
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), key as *mut u8, text.len());
        key.add(text.len()).write(0);
    }
    Ok(())
}

unsafe fn import_key(out: *mut *mut c_void, key: *const c_char, flags: u64) -> AclResult<()> {
    if out.is_null() || key.is_null() {
        return Err(ACL_ERROR_INVALID_PARAM);
    }
    if flags > 1 {
        return Err(ACL_ERROR_RT_PARAM_INVALID);
    }
    crate::device::current()?;
    // SAFETY: forwarded caller contract.
    let name = unsafe { read_key(key) }?;
    let import = Import::take(name, Kind::Key)?;
    let len = import.entry.size as usize;
    let ptr = crate::host_map::map_file(import.fd(), import.entry.offset, len).ok_or(ACL_ERROR_RT_MEMORY_ALLOCATION)?;
    let mut imports = lock(&IMPORTS);
    let im = imports.get_or_insert_with(Imports::default);
    im.by_key.entry(name).or_default().push(ptr as usize);
    im.at.insert(ptr as usize, (len, import));
    drop(imports);
    // SAFETY: checked non-NULL; the caller promises it is writable.
    unsafe { write_out(out, ptr) }
}

unsafe fn close_key(key: *const c_char) -> AclResult<()> {
    // SAFETY: forwarded caller contract.
    let name = unsafe { read_key(key) }?;
    let taken = {
        let mut imports = lock(&IMPORTS);
        let im = imports.get_or_insert_with(Imports::default);
        match im.by_key.get_mut(&name) {
            Some(addrs) => {
                let at = addrs.remove(0);
                if addrs.is_empty() {
                    im.by_key.remove(&name);
                }
                im.at.remove(&at).map(|(len, import)| (at, len, import))
            }
            None => None,
        }
    };
    if let Some((at, len, import)) = taken {
        // SAFETY: the mapping was made by `import_key` and is out of the
        // registry; the caller gives it up by closing.
        unsafe { crate::host_map::unmap(at as *mut c_void, len) };
        drop(import);
        return Ok(());
    }
    if super::withdraw(name, Kind::Key) {
        Ok(())
    } else {
        Err(ACL_ERROR_RT_DRV_INTERNAL_ERROR)
    }
}

unsafe fn set_import_pid(key: *const c_char, pid: *const i32, num: usize) -> AclResult<()> {
    if key.is_null() || pid.is_null() {
        return Err(ACL_ERROR_INVALID_PARAM);
    }
    let num = i32::try_from(num).unwrap_or(-1);
    if num <= 0 {
        return Err(ACL_ERROR_RT_PARAM_INVALID);
    }
    // SAFETY: forwarded caller contract.
    let name = unsafe { read_key(key) }?;
    // SAFETY: the caller promises `num` readable pids.
    let pids = unsafe { std::slice::from_raw_parts(pid, num as usize) };
    super::admit(name, Kind::Key, pids)
}

/// Exports the aclrtMalloc allocation at `devPtr` (its first `size` bytes)
/// and writes its key to `key` (`len` >= 65). flags: 0 (only pids admitted
/// with aclrtIpcMemSetImportPid may import) or 1 (no pid check).
///
/// # Safety
/// `key` must be NULL or hold `len` writable bytes.
#[unsafe(no_mangle)]
#[allow(non_snake_case)]
pub unsafe extern "C" fn aclrtIpcMemGetExportKey(
    devPtr: *mut c_void,
    size: usize,
    key: *mut c_char,
    len: usize,
    flags: u64,
) -> crate::aclError {
    // SAFETY: forwarded caller contract.
    acl_entry!(Api::IpcMemGetExportKey, { unsafe { export_key(devPtr, size, key, len, flags) } })
}

/// Maps the memory another process exported under `key` and writes its
/// address to `devPtr`. flags: 0 or 1 (peer access).
///
/// # Safety
/// `devPtr` must be NULL or writable, `key` NULL or NUL-terminated.
#[unsafe(no_mangle)]
#[allow(non_snake_case)]
pub unsafe extern "C" fn aclrtIpcMemImportByKey(
    devPtr: *mut *mut c_void,
    key: *const c_char,
    flags: u64,
) -> crate::aclError {
    // SAFETY: forwarded caller contract.
    acl_entry!(Api::IpcMemImportByKey, { unsafe { import_key(devPtr, key, flags) } })
}

/// In an importer, unmaps its oldest import of `key`; in the exporter, ends
/// the export (imports made stay valid).
///
/// # Safety
/// `key` must be NULL or NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtIpcMemClose(key: *const c_char) -> crate::aclError {
    // SAFETY: forwarded caller contract.
    acl_entry!(Api::IpcMemClose, { unsafe { close_key(key) } })
}

/// Admits `num` pids (from aclrtDeviceGetBareTgid) to import `key`, an
/// export made with flags 0.
///
/// # Safety
/// `key` must be NULL or NUL-terminated, `pid` NULL or `num` readable pids.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtIpcMemSetImportPid(key: *const c_char, pid: *mut i32, num: usize) -> crate::aclError {
    // SAFETY: forwarded caller contract.
    acl_entry!(Api::IpcMemSetImportPid, { unsafe { set_import_pid(key, pid, num) } })
}

#[cfg(test)]
mod tests {
    use super::{format_key, parse_key, Name, KEY_LEN};

    #[test]
    fn keys_round_trip_and_fit() {
        let name = Name { pid: i32::MAX, index: 65535, generation: 65535 };
        assert_eq!(parse_key(&format_key(name)), Some(name));
        assert!(format_key(name).len() < KEY_LEN);
        assert_eq!(parse_key("aclemu-ipc:1:2"), None);
        assert_eq!(parse_key("aclemu-ipc:1:2:3:4"), None);
        assert_eq!(parse_key("other:1:2:3"), None);
    }
}
