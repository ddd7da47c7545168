//! aclrtMalloc / aclrtFree (device memory) and aclrtMallocHost /
//! aclrtFreeHost (pinned host memory), on anonymous host mappings.
//!
//! Device blocks are charged their ACL "actual size" against the current
//! device's capacity (reference/acl-api.md §5): round up to 32 and add 32,
//! with no padding for the HUGE1G policies. Addresses are page aligned, which
//! satisfies the documented 64-byte alignment.
//!
//! Freeing a pointer that these calls did not return gives 107000.

use crate::device;
use crate::error::{
    require, AclResult, ACL_ERROR_RT_MEMORY_ALLOCATION, ACL_ERROR_RT_PARAM_INVALID,
};
use crate::faults::Api;
use crate::ffi::{acl_entry, lock, write_out};
use crate::host_map;
use crate::usage;
use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::Mutex;

const HUGE1G_ONLY: u32 = 6;
const HUGE1G_ONLY_P2P: u32 = 7;

/// A live block: its mapping length, the bytes charged, and the owner device
/// (-1 for host memory).
#[derive(Clone, Copy)]
struct Block {
    len: usize,
    charged: u64,
    device: i32,
}

/// Live device blocks and host blocks, keyed by start address.
struct Blocks {
    device: BTreeMap<usize, Block>,
    host: BTreeMap<usize, Block>,
}

static BLOCKS: Mutex<Blocks> = Mutex::new(Blocks {
    device: BTreeMap::new(),
    host: BTreeMap::new(),
});

/// The size ACL charges for an aclrtMalloc of `size` under `policy`.
pub fn charged_size(size: usize, policy: u32) -> Option<u64> {
    let size = size as u64;
    let rounded = size.checked_add(31)? & !31;
    match policy {
        HUGE1G_ONLY | HUGE1G_ONLY_P2P => Some(rounded),
        _ => rounded.checked_add(32),
    }
}

/// True if `addr` lies inside a live aclrtMalloc block.
pub fn is_device_block(addr: usize) -> bool {
    let blocks = lock(&BLOCKS);
    blocks
        .device
        .range(..=addr)
        .next_back()
        .is_some_and(|(&start, b)| addr < start + b.len)
}

unsafe fn malloc(dev_ptr: *mut *mut c_void, size: usize, policy: u32) -> AclResult<()> {
    require(!dev_ptr.is_null() && size != 0)?;
    let id = device::current()?;
    let dev = device::get(id)?;
    let charged = charged_size(size, policy).ok_or(ACL_ERROR_RT_MEMORY_ALLOCATION)?;
    let len = usize::try_from(charged)
        .ok()
        .and_then(host_map::page_round)
        .ok_or(ACL_ERROR_RT_MEMORY_ALLOCATION)?;
    dev.charge(charged)?;
    let Some(ptr) = host_map::map_rw(len) else {
        dev.uncharge(charged);
        return Err(ACL_ERROR_RT_MEMORY_ALLOCATION);
    };
    lock(&BLOCKS).device.insert(
        ptr as usize,
        Block {
            len,
            charged,
            device: id,
        },
    );
    let counters = usage::of(id);
    usage::add(&counters.malloc_bytes, charged);
    usage::add(&counters.malloc_count, 1);
    // SAFETY: dev_ptr checked non-NULL; the caller promises it is writable.
    unsafe { write_out(dev_ptr, ptr) }
}

fn free(ptr: *mut c_void) -> AclResult<()> {
    require(!ptr.is_null())?;
    let block = lock(&BLOCKS)
        .device
        .remove(&(ptr as usize))
        .ok_or(ACL_ERROR_RT_PARAM_INVALID)?;
    // SAFETY: the block was ours and is now out of the registry; aclrtFree
    // does not wait for queued work, as on a device.
    unsafe { host_map::unmap(ptr, block.len) };
    device::get(block.device)?.uncharge(block.charged);
    let counters = usage::of(block.device);
    usage::sub(&counters.malloc_bytes, block.charged);
    usage::sub(&counters.malloc_count, 1);
    Ok(())
}

unsafe fn malloc_host(host_ptr: *mut *mut c_void, size: usize) -> AclResult<()> {
    require(!host_ptr.is_null() && size != 0)?;
    let len = host_map::page_round(size).ok_or(ACL_ERROR_RT_MEMORY_ALLOCATION)?;
    let ptr = host_map::map_rw(len).ok_or(ACL_ERROR_RT_MEMORY_ALLOCATION)?;
    lock(&BLOCKS).host.insert(
        ptr as usize,
        Block {
            len,
            charged: 0,
            device: -1,
        },
    );
    // SAFETY: host_ptr checked non-NULL; the caller promises it is writable.
    unsafe { write_out(host_ptr, ptr) }
}

fn free_host(ptr: *mut c_void) -> AclResult<()> {
    require(!ptr.is_null())?;
    let block = lock(&BLOCKS)
        .host
        .remove(&(ptr as usize))
        .ok_or(ACL_ERROR_RT_PARAM_INVALID)?;
    // SAFETY: the block was ours and is now out of the registry.
    unsafe { host_map::unmap(ptr, block.len) };
    Ok(())
}

/// Allocates `size` bytes of device memory on the current device.
///
/// # Safety
/// `dev_ptr` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMalloc(
    dev_ptr: *mut *mut c_void,
    size: usize,
    policy: u32,
) -> crate::aclError {
    // SAFETY: forwarded caller contract.
    acl_entry!(Api::Malloc, { unsafe { malloc(dev_ptr, size, policy) } })
}

/// Frees device memory from aclrtMalloc at once (no synchronization).
///
/// # Safety
/// Nothing may use the block afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtFree(dev_ptr: *mut c_void) -> crate::aclError {
    acl_entry!(Api::Free, { free(dev_ptr) })
}

/// Allocates pinned host memory (not charged to any device).
///
/// # Safety
/// `host_ptr` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMallocHost(
    host_ptr: *mut *mut c_void,
    size: usize,
) -> crate::aclError {
    // SAFETY: forwarded caller contract.
    acl_entry!(Api::MallocHost, { unsafe { malloc_host(host_ptr, size) } })
}

/// Frees memory from aclrtMallocHost.
///
/// # Safety
/// Nothing may use the block afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtFreeHost(host_ptr: *mut c_void) -> crate::aclError {
    acl_entry!(Api::FreeHost, { free_host(host_ptr) })
}

#[cfg(test)]
mod tests {
    use super::charged_size;

    #[test]
    fn padding_follows_acl() {
        assert_eq!(charged_size(1, 0), Some(64));
        assert_eq!(charged_size(32, 0), Some(64));
        assert_eq!(charged_size(33, 2), Some(96));
        assert_eq!(charged_size(33, HUGE1G), Some(64));
        assert_eq!(charged_size(usize::MAX, 0), None);
    }
    const HUGE1G: u32 = super::HUGE1G_ONLY;
}
