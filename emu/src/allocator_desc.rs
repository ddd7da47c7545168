//! The aclrtAllocator* family: descriptors, setters, and the per-stream
//! registration map, with the runtime's checks (docs/acl-api.md §6.1).
//!
//! - Every setter rejects a NULL desc or value (100000).
//! - Register checks stream, desc, obj, alloc, free and getAddr (not
//!   advise), then copies the fields: last registration wins; later setters
//!   and DestroyDesc do not touch it; GetByStream then reports the stale desc.
//! - Unregister(NULL) is 100000, otherwise idempotent.
//! - Destroyed or unknown descs give 100000 (the runtime would read freed
//!   memory). A desc is counted on the device current at creation (device 0
//!   if none).

use crate::device;
use crate::error::{require, AclResult, ACL_ERROR_INVALID_PARAM};
use crate::faults::{self, Api};
use crate::ffi::{acl_entry, handle, handle_id, lock, write_opt, write_out, Kind};
use crate::usage;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{LazyLock, Mutex};

#[allow(non_camel_case_types)]
pub type aclrtAllocatorAllocFunc = Option<unsafe extern "C" fn(allocator: *mut c_void, size: usize) -> *mut c_void>;
#[allow(non_camel_case_types)]
pub type aclrtAllocatorFreeFunc = Option<unsafe extern "C" fn(allocator: *mut c_void, block: *mut c_void)>;
#[allow(non_camel_case_types)]
pub type aclrtAllocatorAllocAdviseFunc =
    Option<unsafe extern "C" fn(allocator: *mut c_void, size: usize, addr: *mut c_void) -> *mut c_void>;
#[allow(non_camel_case_types)]
pub type aclrtAllocatorGetAddrFromBlockFunc = Option<unsafe extern "C" fn(block: *mut c_void) -> *mut c_void>;

/// The five fields of a desc. Unset callbacks are NULL here (indeterminate
/// in the runtime).
#[derive(Clone, Copy, Default)]
pub struct Fields {
    pub obj: usize,
    pub alloc: aclrtAllocatorAllocFunc,
    pub free: aclrtAllocatorFreeFunc,
    pub advise: aclrtAllocatorAllocAdviseFunc,
    pub get_addr: aclrtAllocatorGetAddrFromBlockFunc,
}

struct Desc {
    device: i32,
    fields: Fields,
}

/// A registration: the desc handle as given and a copy of its fields.
#[derive(Clone, Copy)]
pub struct Registration {
    pub desc: usize,
    pub fields: Fields,
}

struct Registry {
    descs: HashMap<u64, Desc>,
    by_stream: HashMap<usize, Registration>,
    next: u64,
}

static REGISTRY: LazyLock<Mutex<Registry>> =
    LazyLock::new(|| Mutex::new(Registry { descs: HashMap::new(), by_stream: HashMap::new(), next: 1 }));

/// The registration for `stream`, copied out so no lock is held while the
/// caller runs the callbacks.
pub fn registration(stream: *mut c_void) -> Option<Registration> {
    lock(&REGISTRY).by_stream.get(&(stream as usize)).copied()
}

fn create() -> *mut c_void {
    let dev = device::current_or(0);
    let mut reg = lock(&REGISTRY);
    let id = reg.next;
    reg.next += 1;
    reg.descs.insert(id, Desc { device: dev, fields: Fields::default() });
    usage::add(&usage::of(dev).descs, 1);
    handle(Kind::Desc, id)
}

fn destroy(desc: *mut c_void) -> AclResult<()> {
    require(!desc.is_null())?;
    let id = handle_id(Kind::Desc, desc).ok_or(ACL_ERROR_INVALID_PARAM)?;
    let d = lock(&REGISTRY).descs.remove(&id).ok_or(ACL_ERROR_INVALID_PARAM)?;
    usage::sub(&usage::of(d.device).descs, 1);
    Ok(())
}

/// Applies `set` to a live desc after the setters' NULL checks.
fn set(desc: *mut c_void, value_is_null: bool, set: impl FnOnce(&mut Fields)) -> AclResult<()> {
    require(!desc.is_null() && !value_is_null)?;
    let id = handle_id(Kind::Desc, desc).ok_or(ACL_ERROR_INVALID_PARAM)?;
    let mut reg = lock(&REGISTRY);
    let d = reg.descs.get_mut(&id).ok_or(ACL_ERROR_INVALID_PARAM)?;
    set(&mut d.fields);
    Ok(())
}

fn register(stream: *mut c_void, desc: *mut c_void) -> AclResult<()> {
    require(!stream.is_null() && !desc.is_null())?;
    let id = handle_id(Kind::Desc, desc).ok_or(ACL_ERROR_INVALID_PARAM)?;
    let mut reg = lock(&REGISTRY);
    let fields = reg.descs.get(&id).ok_or(ACL_ERROR_INVALID_PARAM)?.fields;
    // The advise callback is deliberately not checked, as in the runtime.
    require(fields.obj != 0 && fields.alloc.is_some() && fields.free.is_some() && fields.get_addr.is_some())?;
    reg.by_stream.insert(stream as usize, Registration { desc: desc as usize, fields });
    Ok(())
}

fn unregister(stream: *mut c_void) -> AclResult<()> {
    require(!stream.is_null())?;
    lock(&REGISTRY).by_stream.remove(&(stream as usize));
    Ok(())
}

struct Outs {
    desc: *mut *mut c_void,
    obj: *mut *mut c_void,
    alloc: *mut aclrtAllocatorAllocFunc,
    free: *mut aclrtAllocatorFreeFunc,
    advise: *mut aclrtAllocatorAllocAdviseFunc,
    get_addr: *mut aclrtAllocatorGetAddrFromBlockFunc,
}

unsafe fn get_by_stream(stream: *mut c_void, outs: Outs) -> AclResult<()> {
    require(!stream.is_null() && !outs.desc.is_null())?;
    let r = registration(stream).ok_or(ACL_ERROR_INVALID_PARAM)?;
    // SAFETY: each out-pointer is NULL (skipped) or writable per the caller.
    unsafe {
        write_out(outs.desc, r.desc as *mut c_void)?;
        write_opt(outs.obj, r.fields.obj as *mut c_void);
        write_opt(outs.alloc, r.fields.alloc);
        write_opt(outs.free, r.fields.free);
        write_opt(outs.advise, r.fields.advise);
        write_opt(outs.get_addr, r.fields.get_addr);
    }
    Ok(())
}

/// Creates an empty desc; NULL only under an injected fault or a panic.
///
/// # Safety
/// No pointer arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtAllocatorCreateDesc() -> *mut c_void {
    crate::calls::note(Api::AllocatorCreateDesc);
    let desc = if faults::should_fail(Api::AllocatorCreateDesc) {
        std::ptr::null_mut()
    } else {
        std::panic::catch_unwind(create).unwrap_or(std::ptr::null_mut())
    };
    crate::cost::spend(Api::AllocatorCreateDesc);
    desc
}

/// Destroys a desc; a registration made from it stays.
///
/// # Safety
/// Plain handle argument; no pointer is dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtAllocatorDestroyDesc(desc: *mut c_void) -> crate::aclError {
    acl_entry!(Api::AllocatorDestroyDesc, { destroy(desc) })
}

/// Sets the allocator object (NULL rejected).
///
/// # Safety
/// Plain handle arguments; no pointer is dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtAllocatorSetObjToDesc(desc: *mut c_void, allocator: *mut c_void) -> crate::aclError {
    acl_entry!(Api::AllocatorSetObjToDesc, { set(desc, allocator.is_null(), |f| f.obj = allocator as usize) })
}

/// Sets the alloc callback (NULL rejected).
///
/// # Safety
/// `func` must be callable as documented when the desc is used.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtAllocatorSetAllocFuncToDesc(
    desc: *mut c_void,
    func: aclrtAllocatorAllocFunc,
) -> crate::aclError {
    acl_entry!(Api::AllocatorSetAllocFuncToDesc, { set(desc, func.is_none(), |f| f.alloc = func) })
}

/// Sets the free callback (NULL rejected).
///
/// # Safety
/// `func` must be callable as documented when the desc is used.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtAllocatorSetFreeFuncToDesc(
    desc: *mut c_void,
    func: aclrtAllocatorFreeFunc,
) -> crate::aclError {
    acl_entry!(Api::AllocatorSetFreeFuncToDesc, { set(desc, func.is_none(), |f| f.free = func) })
}

/// Sets the alloc-advise callback (NULL rejected).
///
/// # Safety
/// `func` must be callable as documented when the desc is used.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtAllocatorSetAllocAdviseFuncToDesc(
    desc: *mut c_void,
    func: aclrtAllocatorAllocAdviseFunc,
) -> crate::aclError {
    acl_entry!(Api::AllocatorSetAllocAdviseFuncToDesc, { set(desc, func.is_none(), |f| f.advise = func) })
}

/// Sets the block-to-address callback (NULL rejected).
///
/// # Safety
/// `func` must be callable as documented when the desc is used.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtAllocatorSetGetAddrFromBlockFuncToDesc(
    desc: *mut c_void,
    func: aclrtAllocatorGetAddrFromBlockFunc,
) -> crate::aclError {
    acl_entry!(Api::AllocatorSetGetAddrFromBlockFuncToDesc, { set(desc, func.is_none(), |f| f.get_addr = func) })
}

/// Registers a copy of the desc's fields for `stream` (not NULL).
///
/// # Safety
/// Plain handle arguments; no pointer is dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtAllocatorRegister(stream: *mut c_void, desc: *mut c_void) -> crate::aclError {
    acl_entry!(Api::AllocatorRegister, { register(stream, desc) })
}

/// Removes `stream`'s registration if any (NULL stream rejected).
///
/// # Safety
/// Plain handle argument; no pointer is dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtAllocatorUnregister(stream: *mut c_void) -> crate::aclError {
    acl_entry!(Api::AllocatorUnregister, { unregister(stream) })
}

/// Reports `stream`'s registration. `allocatorDesc` is required; the other
/// out-pointers may be NULL.
///
/// # Safety
/// Every out-pointer must be NULL or writable.
#[unsafe(no_mangle)]
#[allow(non_snake_case)]
pub unsafe extern "C" fn aclrtAllocatorGetByStream(
    stream: *mut c_void,
    allocatorDesc: *mut *mut c_void,
    allocator: *mut *mut c_void,
    allocFunc: *mut aclrtAllocatorAllocFunc,
    freeFunc: *mut aclrtAllocatorFreeFunc,
    allocAdviseFunc: *mut aclrtAllocatorAllocAdviseFunc,
    getAddrFromBlockFunc: *mut aclrtAllocatorGetAddrFromBlockFunc,
) -> crate::aclError {
    let outs = Outs {
        desc: allocatorDesc,
        obj: allocator,
        alloc: allocFunc,
        free: freeFunc,
        advise: allocAdviseFunc,
        get_addr: getAddrFromBlockFunc,
    };
    acl_entry!(Api::AllocatorGetByStream, {
        // SAFETY: forwarded caller contract.
        unsafe { get_by_stream(stream, outs) }
    })
}
