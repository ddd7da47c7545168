//! The plugin table: every function of the C API behind one `dlsym` (`npualloc_get_api`), for a host that loads the
//! library with `dlopen`. The fields follow the order of the API contract; a later library may append fields, never
//! reorder them, so a host reads `struct_size` before using a field past the ones it knows.

use super::allocator::npualloc_block_info;
use super::handle::npualloc_allocator;
use super::hooks::npualloc_segment_hook;
use super::ipc::npualloc_ipc_handle;
use super::stats::npualloc_stats;
use super::status::{npualloc_status, npualloc_status_raw};
use super::version::NPUALLOC_ABI_VERSION;
use crate::error::Error;
use crate::sys::aclrtStream;
use std::ffi::{c_char, c_int, c_void};

/// The function table of one ABI version (see `npualloc_get_api`). Each field points to the function of the same name
/// without the `npualloc_` prefix, except two in C: `register_` is `npualloc_register` (`register` is a C keyword),
/// and `abi_version_fn` is `npualloc_abi_version` (the field `abi_version` holds the table's version).
#[repr(C)]
pub struct npualloc_api {
    /// `sizeof(npualloc_api)` in the library that made the table.
    pub struct_size: u32,
    /// The ABI version the table follows.
    pub abi_version: u32,
    pub status_name: extern "C" fn(npualloc_status_raw) -> *const c_char,
    pub last_error: extern "C" fn() -> *const c_char,
    pub create: unsafe extern "C" fn(*const c_char, i32, *mut *mut npualloc_allocator) -> npualloc_status,
    pub destroy: unsafe extern "C" fn(*mut npualloc_allocator) -> npualloc_status,
    pub register: unsafe extern "C" fn(*mut npualloc_allocator, aclrtStream) -> npualloc_status,
    pub unregister: unsafe extern "C" fn(*mut npualloc_allocator, aclrtStream) -> npualloc_status,
    pub desc_alloc: unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void,
    pub desc_free: unsafe extern "C" fn(*mut c_void, *mut c_void),
    pub desc_alloc_advise: unsafe extern "C" fn(*mut c_void, usize, *mut c_void) -> *mut c_void,
    pub desc_get_addr: extern "C" fn(*mut c_void) -> *mut c_void,
    pub binding_create: unsafe extern "C" fn(*mut npualloc_allocator, aclrtStream, *mut *mut c_void) -> npualloc_status,
    pub binding_destroy: unsafe extern "C" fn(*mut c_void) -> npualloc_status,
    pub malloc: unsafe extern "C" fn(*mut npualloc_allocator, usize, aclrtStream, *mut *mut c_void) -> npualloc_status,
    pub free: unsafe extern "C" fn(*mut npualloc_allocator, *mut c_void) -> npualloc_status,
    pub record_stream: unsafe extern "C" fn(*mut npualloc_allocator, *mut c_void, aclrtStream) -> npualloc_status,
    pub empty_cache: unsafe extern "C" fn(*mut npualloc_allocator) -> npualloc_status,
    pub set_memory_fraction: unsafe extern "C" fn(*mut npualloc_allocator, f64) -> npualloc_status,
    pub query:
        unsafe extern "C" fn(*const npualloc_allocator, *const c_void, *mut npualloc_block_info) -> npualloc_status,
    pub get_stats: unsafe extern "C" fn(*const npualloc_allocator, *mut npualloc_stats) -> npualloc_status,
    pub reset_peak_stats: unsafe extern "C" fn(*mut npualloc_allocator) -> npualloc_status,
    pub snapshot_json: unsafe extern "C" fn(*const npualloc_allocator, *mut *mut c_char) -> npualloc_status,
    pub string_free: unsafe extern "C" fn(*mut c_char),
    pub check_memcpy2d: unsafe extern "C" fn(
        *const npualloc_allocator,
        *const c_void,
        usize,
        *const c_void,
        usize,
        usize,
        usize,
        i32,
        i32,
    ) -> npualloc_status,
    pub memcpy2d: unsafe extern "C" fn(
        *const npualloc_allocator,
        *mut c_void,
        usize,
        *const c_void,
        usize,
        usize,
        usize,
        i32,
    ) -> npualloc_status,
    pub memcpy2d_async: unsafe extern "C" fn(
        *const npualloc_allocator,
        *mut c_void,
        usize,
        *const c_void,
        usize,
        usize,
        usize,
        i32,
        aclrtStream,
    ) -> npualloc_status,
    pub pluggable_malloc: unsafe extern "C" fn(usize, c_int, aclrtStream) -> *mut c_void,
    pub pluggable_free: unsafe extern "C" fn(*mut c_void, usize, c_int, aclrtStream),
    pub pluggable_init: extern "C" fn(c_int),
    pub pluggable_empty_cache: extern "C" fn(bool),
    pub pluggable_set_memory_fraction: extern "C" fn(f64, c_int),
    pub pluggable_base_alloc: unsafe extern "C" fn(*mut c_void, *mut usize) -> *mut c_void,
    pub pluggable_reset_peak_stats: extern "C" fn(c_int),
    pub abi_version_fn: extern "C" fn() -> u32,
    pub version: extern "C" fn() -> *const c_char,
    // Appended after the first release of ABI 1: present when `struct_size` reaches past them.
    pub record_history: unsafe extern "C" fn(*mut npualloc_allocator, usize) -> npualloc_status,
    pub snapshot_pytorch_json: unsafe extern "C" fn(*const npualloc_allocator, *mut *mut c_char) -> npualloc_status,
    pub pluggable_record_history: extern "C" fn(c_int, usize) -> npualloc_status,
    pub pluggable_snapshot_pytorch_json: unsafe extern "C" fn(c_int, *mut *mut c_char) -> npualloc_status,
    pub forget_stream: unsafe extern "C" fn(*mut npualloc_allocator, aclrtStream) -> npualloc_status,
    pub pluggable_forget_stream: extern "C" fn(c_int, aclrtStream) -> npualloc_status,
    // API 0.3 from here on.
    pub erase_stream: unsafe extern "C" fn(*mut npualloc_allocator, *mut c_void, aclrtStream) -> npualloc_status,
    pub pluggable_allocator: unsafe extern "C" fn(c_int, *mut *mut npualloc_allocator) -> npualloc_status,
    pub set_before_release: unsafe extern "C" fn(
        *mut npualloc_allocator,
        super::hooks::npualloc_release_hook,
        *mut c_void,
    ) -> npualloc_status,
    pub set_oom_observer:
        unsafe extern "C" fn(*mut npualloc_allocator, super::hooks::npualloc_oom_hook, *mut c_void) -> npualloc_status,
    pub pool_create: unsafe extern "C" fn(*mut npualloc_allocator, *const c_char, *mut u64) -> npualloc_status,
    pub pool_begin: unsafe extern "C" fn(*mut npualloc_allocator, u64, aclrtStream) -> npualloc_status,
    pub pool_end: unsafe extern "C" fn(*mut npualloc_allocator, u64, aclrtStream) -> npualloc_status,
    pub pool_destroy: unsafe extern "C" fn(*mut npualloc_allocator, u64) -> npualloc_status,
    pub pool_get_stats: unsafe extern "C" fn(*const npualloc_allocator, u64, *mut npualloc_stats) -> npualloc_status,
    pub sleep: unsafe extern "C" fn(*mut npualloc_allocator) -> npualloc_status,
    pub wake: unsafe extern "C" fn(*mut npualloc_allocator) -> npualloc_status,
    pub sleep_with:
        unsafe extern "C" fn(*mut npualloc_allocator, *const u64, usize, *const u64, usize) -> npualloc_status,
    pub wake_with: unsafe extern "C" fn(*mut npualloc_allocator, *const u64, usize) -> npualloc_status,
    pub pool_empty_cache: unsafe extern "C" fn(*mut npualloc_allocator, u64) -> npualloc_status,
    // API 0.4 from here on.
    pub get_kind_stats: unsafe extern "C" fn(*const npualloc_allocator, i32, *mut npualloc_stats) -> npualloc_status,
    pub pool_set_use_on_oom: unsafe extern "C" fn(*mut npualloc_allocator, u64, i32) -> npualloc_status,
    pub empty_cache_with: unsafe extern "C" fn(*mut npualloc_allocator, u32) -> npualloc_status,
    pub set_segment_observer:
        unsafe extern "C" fn(*mut npualloc_allocator, npualloc_segment_hook, *mut c_void) -> npualloc_status,
    pub for_each_segment:
        unsafe extern "C" fn(*const npualloc_allocator, npualloc_segment_hook, *mut c_void) -> npualloc_status,
    pub ipc_export:
        unsafe extern "C" fn(*mut npualloc_allocator, *mut c_void, *mut npualloc_ipc_handle) -> npualloc_status,
    pub ipc_import:
        unsafe extern "C" fn(*const npualloc_ipc_handle, i32, *mut *mut c_void, *mut usize) -> npualloc_status,
    pub ipc_close: unsafe extern "C" fn(*mut c_void) -> npualloc_status,
    pub pool_live_blocks: unsafe extern "C" fn(
        *const npualloc_allocator,
        u64,
        super::pools::npualloc_live_block_fn,
        *mut c_void,
    ) -> npualloc_status,
    pub pool_restore: unsafe extern "C" fn(
        *mut npualloc_allocator,
        u64,
        *const super::pools::npualloc_live_block,
        usize,
    ) -> npualloc_status,
    pub read_pytorch_alloc_conf: unsafe extern "C" fn(i32, *mut i32) -> npualloc_status,
}

static API_V1: npualloc_api = npualloc_api {
    struct_size: std::mem::size_of::<npualloc_api>() as u32,
    abi_version: NPUALLOC_ABI_VERSION,
    status_name: super::status::npualloc_status_name,
    last_error: super::last_error::npualloc_last_error,
    create: super::allocator::npualloc_create,
    destroy: super::allocator::npualloc_destroy,
    register: super::desc::npualloc_register,
    unregister: super::desc::npualloc_unregister,
    desc_alloc: super::desc::npualloc_desc_alloc,
    desc_free: super::desc::npualloc_desc_free,
    desc_alloc_advise: super::desc::npualloc_desc_alloc_advise,
    desc_get_addr: super::desc::npualloc_desc_get_addr,
    binding_create: super::desc::npualloc_binding_create,
    binding_destroy: super::desc::npualloc_binding_destroy,
    malloc: super::allocator::npualloc_malloc,
    free: super::allocator::npualloc_free,
    record_stream: super::allocator::npualloc_record_stream,
    empty_cache: super::allocator::npualloc_empty_cache,
    set_memory_fraction: super::allocator::npualloc_set_memory_fraction,
    query: super::allocator::npualloc_query,
    get_stats: super::stats::npualloc_get_stats,
    reset_peak_stats: super::stats::npualloc_reset_peak_stats,
    snapshot_json: super::stats::npualloc_snapshot_json,
    string_free: super::stats::npualloc_string_free,
    check_memcpy2d: super::memcpy::npualloc_check_memcpy2d,
    memcpy2d: super::memcpy::npualloc_memcpy2d,
    memcpy2d_async: super::memcpy::npualloc_memcpy2d_async,
    pluggable_malloc: super::pluggable::npualloc_pluggable_malloc,
    pluggable_free: super::pluggable::npualloc_pluggable_free,
    pluggable_init: super::pluggable::npualloc_pluggable_init,
    pluggable_empty_cache: super::pluggable::npualloc_pluggable_empty_cache,
    pluggable_set_memory_fraction: super::pluggable::npualloc_pluggable_set_memory_fraction,
    pluggable_base_alloc: super::pluggable::npualloc_pluggable_base_alloc,
    pluggable_reset_peak_stats: super::pluggable::npualloc_pluggable_reset_peak_stats,
    abi_version_fn: super::version::npualloc_abi_version,
    version: super::version::npualloc_version,
    record_history: super::history::npualloc_record_history,
    snapshot_pytorch_json: super::history::npualloc_snapshot_pytorch_json,
    pluggable_record_history: super::history::npualloc_pluggable_record_history,
    pluggable_snapshot_pytorch_json: super::history::npualloc_pluggable_snapshot_pytorch_json,
    forget_stream: super::forget::npualloc_forget_stream,
    pluggable_forget_stream: super::forget::npualloc_pluggable_forget_stream,
    erase_stream: super::allocator::npualloc_erase_stream,
    pluggable_allocator: super::pluggable::npualloc_pluggable_allocator,
    set_before_release: super::hooks::npualloc_set_before_release,
    set_oom_observer: super::hooks::npualloc_set_oom_observer,
    pool_create: super::pools::npualloc_pool_create,
    pool_begin: super::pools::npualloc_pool_begin,
    pool_end: super::pools::npualloc_pool_end,
    pool_destroy: super::pools::npualloc_pool_destroy,
    pool_get_stats: super::pools::npualloc_pool_get_stats,
    sleep: super::sleep::npualloc_sleep,
    wake: super::sleep::npualloc_wake,
    sleep_with: super::sleep::npualloc_sleep_with,
    wake_with: super::sleep::npualloc_wake_with,
    pool_empty_cache: super::pools::npualloc_pool_empty_cache,
    get_kind_stats: super::stats::npualloc_get_kind_stats,
    pool_set_use_on_oom: super::pools::npualloc_pool_set_use_on_oom,
    empty_cache_with: super::allocator::npualloc_empty_cache_with,
    set_segment_observer: super::hooks::npualloc_set_segment_observer,
    for_each_segment: super::hooks::npualloc_for_each_segment,
    ipc_export: super::ipc::npualloc_ipc_export,
    ipc_import: super::ipc::npualloc_ipc_import,
    ipc_close: super::ipc::npualloc_ipc_close,
    pool_live_blocks: super::pools::npualloc_pool_live_blocks,
    pool_restore: super::pools::npualloc_pool_restore,
    read_pytorch_alloc_conf: super::allocator::npualloc_read_pytorch_alloc_conf,
};

/// The function table for C ABI version `abi_version`, or NULL (last error set) when this library does not provide
/// that version. The table is static: never free it.
#[unsafe(no_mangle)]
pub extern "C" fn npualloc_get_api(abi_version: u32) -> *const npualloc_api {
    ffi_boundary!(fallible "npualloc_get_api", std::ptr::null(), {
        if abi_version != NPUALLOC_ABI_VERSION {
            return Err(Error::Unsupported(format!(
                "ABI version {abi_version} is not provided; this library implements {NPUALLOC_ABI_VERSION}"
            )));
        }
        Ok(&API_V1 as *const npualloc_api)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_for_version_1_only() {
        let api = npualloc_get_api(1);
        assert!(!api.is_null());
        // SAFETY: a non-NULL result points to the static table.
        let api = unsafe { &*api };
        assert_eq!(api.struct_size as usize, std::mem::size_of::<npualloc_api>());
        assert_eq!(api.abi_version, 1);
        assert_eq!((api.abi_version_fn)(), 1);
        assert!(npualloc_get_api(2).is_null());
        assert!(npualloc_get_api(0).is_null());
    }

    #[test]
    fn appended_fields_sit_past_the_first_release() {
        // The first ABI-1 table ended with `version`; hosts built against it
        // read no further, and newer hosts find the appended functions there.
        let first_release_end = std::mem::offset_of!(npualloc_api, version) + std::mem::size_of::<usize>();
        assert_eq!(std::mem::offset_of!(npualloc_api, record_history), first_release_end);
        assert!(std::mem::offset_of!(npualloc_api, snapshot_pytorch_json) > first_release_end);
        // SAFETY: a non-NULL result points to the static table.
        let api = unsafe { &*npualloc_get_api(1) };
        let null = std::ptr::null_mut();
        // SAFETY: a NULL handle is refused before anything is read.
        let st = unsafe { (api.record_history)(null, 8) };
        assert_eq!(st, npualloc_status::NPUALLOC_ERR_INVALID_ARGUMENT);
        // forget_stream came after the history functions.
        let history_end =
            std::mem::offset_of!(npualloc_api, pluggable_snapshot_pytorch_json) + std::mem::size_of::<usize>();
        assert_eq!(std::mem::offset_of!(npualloc_api, forget_stream), history_end);
        // SAFETY: a NULL handle is refused before anything is read.
        let st = unsafe { (api.forget_stream)(null, std::ptr::null_mut()) };
        assert_eq!(st, npualloc_status::NPUALLOC_ERR_INVALID_ARGUMENT);
    }

    #[test]
    fn host_hook_functions_follow_the_forget_functions_contiguously() {
        // API 0.3's additions come after every earlier field, in one run.
        let word = std::mem::size_of::<usize>();
        let after = std::mem::offset_of!(npualloc_api, pluggable_forget_stream) + word;
        assert_eq!(std::mem::offset_of!(npualloc_api, erase_stream), after);
        assert_eq!(std::mem::offset_of!(npualloc_api, pluggable_allocator), after + word);
        assert_eq!(std::mem::offset_of!(npualloc_api, set_before_release), after + 2 * word);
        assert_eq!(std::mem::offset_of!(npualloc_api, set_oom_observer), after + 3 * word);
        // SAFETY: a non-NULL result points to the static table.
        let api = unsafe { &*npualloc_get_api(1) };
        let null = std::ptr::null_mut();
        // SAFETY: NULL handles and out-pointers are refused before anything is read.
        unsafe {
            let none: *mut std::ffi::c_void = std::ptr::null_mut();
            assert_eq!((api.erase_stream)(null, none, none), npualloc_status::NPUALLOC_ERR_INVALID_ARGUMENT);
            assert_eq!((api.pluggable_allocator)(0, null.cast()), npualloc_status::NPUALLOC_ERR_INVALID_ARGUMENT);
            assert_eq!((api.set_before_release)(null, None, none), npualloc_status::NPUALLOC_ERR_INVALID_ARGUMENT);
            assert_eq!((api.set_oom_observer)(null, None, none), npualloc_status::NPUALLOC_ERR_INVALID_ARGUMENT);
        }
    }

    #[test]
    fn pool_functions_follow_the_host_hooks_contiguously() {
        let word = std::mem::size_of::<usize>();
        let after = std::mem::offset_of!(npualloc_api, set_oom_observer) + word;
        let offsets = [
            std::mem::offset_of!(npualloc_api, pool_create),
            std::mem::offset_of!(npualloc_api, pool_begin),
            std::mem::offset_of!(npualloc_api, pool_end),
            std::mem::offset_of!(npualloc_api, pool_destroy),
            std::mem::offset_of!(npualloc_api, pool_get_stats),
        ];
        assert_eq!(offsets, std::array::from_fn(|i| after + i * word));
        // SAFETY: a non-NULL result points to the static table.
        let api = unsafe { &*npualloc_get_api(1) };
        let null = std::ptr::null_mut();
        let mut id = 0u64;
        // SAFETY: NULL handles are refused before anything is read.
        unsafe {
            let invalid = npualloc_status::NPUALLOC_ERR_INVALID_ARGUMENT;
            assert_eq!((api.pool_create)(null, std::ptr::null(), &mut id), invalid);
            assert_eq!((api.pool_begin)(null, 1, std::ptr::null_mut()), invalid);
            assert_eq!((api.pool_end)(null, 1, std::ptr::null_mut()), invalid);
            assert_eq!((api.pool_destroy)(null, 1), invalid);
            assert_eq!((api.pool_get_stats)(null, 0, std::ptr::null_mut()), invalid);
        }
        assert_eq!(id, 0, "nothing written on failure");
    }

    #[test]
    fn the_later_additions_follow_the_pool_functions_in_order_and_end_the_table() {
        let word = std::mem::size_of::<usize>();
        let after = std::mem::offset_of!(npualloc_api, pool_get_stats) + word;
        assert_eq!(std::mem::offset_of!(npualloc_api, sleep), after);
        assert_eq!(std::mem::offset_of!(npualloc_api, wake), after + word);
        assert_eq!(std::mem::offset_of!(npualloc_api, sleep_with), after + 2 * word);
        assert_eq!(std::mem::offset_of!(npualloc_api, wake_with), after + 3 * word);
        assert_eq!(std::mem::offset_of!(npualloc_api, pool_empty_cache), after + 4 * word);
        assert_eq!(std::mem::offset_of!(npualloc_api, get_kind_stats), after + 5 * word);
        assert_eq!(std::mem::offset_of!(npualloc_api, pool_set_use_on_oom), after + 6 * word);
        assert_eq!(std::mem::offset_of!(npualloc_api, empty_cache_with), after + 7 * word);
        assert_eq!(std::mem::offset_of!(npualloc_api, set_segment_observer), after + 8 * word);
        assert_eq!(std::mem::offset_of!(npualloc_api, for_each_segment), after + 9 * word);
        assert_eq!(std::mem::offset_of!(npualloc_api, ipc_export), after + 10 * word);
        assert_eq!(std::mem::offset_of!(npualloc_api, ipc_import), after + 11 * word);
        assert_eq!(std::mem::offset_of!(npualloc_api, ipc_close), after + 12 * word);
        assert_eq!(std::mem::offset_of!(npualloc_api, pool_live_blocks), after + 13 * word);
        assert_eq!(std::mem::offset_of!(npualloc_api, pool_restore), after + 14 * word);
        assert_eq!(std::mem::offset_of!(npualloc_api, read_pytorch_alloc_conf), after + 15 * word);
        let size = std::mem::size_of::<npualloc_api>();
        assert_eq!(size, after + 16 * word, "read_pytorch_alloc_conf ends the table");
        // SAFETY: a non-NULL result points to the static table.
        let api = unsafe { &*npualloc_get_api(1) };
        // SAFETY: NULL handles are refused before anything is read.
        unsafe {
            assert_eq!((api.sleep)(std::ptr::null_mut()), npualloc_status::NPUALLOC_ERR_INVALID_ARGUMENT);
            assert_eq!((api.wake)(std::ptr::null_mut()), npualloc_status::NPUALLOC_ERR_INVALID_ARGUMENT);
            let st = (api.sleep_with)(std::ptr::null_mut(), std::ptr::null(), 0, std::ptr::null(), 0);
            assert_eq!(st, npualloc_status::NPUALLOC_ERR_INVALID_ARGUMENT);
            let st = (api.wake_with)(std::ptr::null_mut(), std::ptr::null(), 0);
            assert_eq!(st, npualloc_status::NPUALLOC_ERR_INVALID_ARGUMENT);
            let st = (api.pool_empty_cache)(std::ptr::null_mut(), 0);
            assert_eq!(st, npualloc_status::NPUALLOC_ERR_INVALID_ARGUMENT);
            let st = (api.get_kind_stats)(std::ptr::null(), 0, std::ptr::null_mut());
            assert_eq!(st, npualloc_status::NPUALLOC_ERR_INVALID_ARGUMENT);
            let st = (api.pool_set_use_on_oom)(std::ptr::null_mut(), 1, 0);
            assert_eq!(st, npualloc_status::NPUALLOC_ERR_INVALID_ARGUMENT);
            let st = (api.empty_cache_with)(std::ptr::null_mut(), 0);
            assert_eq!(st, npualloc_status::NPUALLOC_ERR_INVALID_ARGUMENT);
            let st = (api.set_segment_observer)(std::ptr::null_mut(), None, std::ptr::null_mut());
            assert_eq!(st, npualloc_status::NPUALLOC_ERR_INVALID_ARGUMENT);
            let st = (api.for_each_segment)(std::ptr::null(), None, std::ptr::null_mut());
            assert_eq!(st, npualloc_status::NPUALLOC_ERR_INVALID_ARGUMENT);
            let st = (api.ipc_export)(std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut());
            assert_eq!(st, npualloc_status::NPUALLOC_ERR_INVALID_ARGUMENT);
            let st = (api.ipc_import)(std::ptr::null(), 0, std::ptr::null_mut(), std::ptr::null_mut());
            assert_eq!(st, npualloc_status::NPUALLOC_ERR_INVALID_ARGUMENT);
            assert_eq!((api.ipc_close)(std::ptr::null_mut()), npualloc_status::NPUALLOC_ERR_UNKNOWN_POINTER);
            let st = (api.pool_live_blocks)(std::ptr::null(), 0, None, std::ptr::null_mut());
            assert_eq!(st, npualloc_status::NPUALLOC_ERR_INVALID_ARGUMENT);
            let st = (api.pool_restore)(std::ptr::null_mut(), 0, std::ptr::null(), 0);
            assert_eq!(st, npualloc_status::NPUALLOC_ERR_INVALID_ARGUMENT);
            // The switch answers what it replaces, and is put back as found.
            let (mut found, mut on) = (-1, -1);
            assert_eq!((api.read_pytorch_alloc_conf)(1, &mut found), npualloc_status::NPUALLOC_OK);
            assert_eq!((api.read_pytorch_alloc_conf)(found, &mut on), npualloc_status::NPUALLOC_OK);
            assert_eq!((found, on), (0, 1));
            assert_eq!((api.read_pytorch_alloc_conf)(0, std::ptr::null_mut()), npualloc_status::NPUALLOC_OK);
        }
    }
}
