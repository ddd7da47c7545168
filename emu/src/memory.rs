//! aclrtMalloc / aclrtFree (device memory) and aclrtMallocHost /
//! aclrtFreeHost (pinned host memory). Device blocks are shared mappings of
//! a range of their device's memory file (`vmm::take_file_range`), so that
//! another process can map an exported block (`ipc`); host blocks are
//! anonymous mappings.
//!
//! Device blocks are charged their ACL "actual size" against the current
//! device's capacity (docs/acl-api.md §5): round up to 32 and add 32,
//! with no padding for the HUGE1G policies, in the page pool the policy
//! selects (RB: HUGE_FIRST above 1 MiB uses huge pages). Their host mapping
//! also takes device address space (`device`). Addresses are page aligned,
//! which satisfies the documented 64-byte alignment; with
//! `ACLEMU_MALLOC_ALIGN=random` (or `random:<seed>`) each block starts a
//! random multiple of 64 bytes (1 to 63 of them) past a page boundary, so an
//! allocator that assumes more than the documented alignment shows it.
//!
//! Freeing a pointer that these calls did not return gives 107000; freeing
//! memory that queued work still uses is a violation (`violation`).

use crate::device::{self, PagePool};
use crate::error::{require, AclResult, ACL_ERROR_RT_MEMORY_ALLOCATION, ACL_ERROR_RT_PARAM_INVALID};
use crate::faults::Api;
use crate::ffi::{acl_entry, lock, write_out};
use crate::host_map;
use crate::usage;
use crate::violation;
use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex};

const HUGE1G_ONLY: u32 = 6;
const HUGE1G_ONLY_P2P: u32 = 7;

/// A live block: its host mapping (`base`, `map_len`; the block starts
/// `map_len - len` bytes into it), the bytes usable from its start, the
/// bytes charged, the page pool, and the owner device (-1 for host memory).
#[derive(Clone, Copy)]
struct Block {
    base: usize,
    map_len: usize,
    /// Where the mapping lies in the device's memory file (device blocks).
    file_offset: u64,
    len: usize,
    charged: u64,
    pool: PagePool,
    device: i32,
}

/// Live device blocks and host blocks, keyed by start address.
struct Blocks {
    device: BTreeMap<usize, Block>,
    host: BTreeMap<usize, Block>,
}

static BLOCKS: Mutex<Blocks> = Mutex::new(Blocks { device: BTreeMap::new(), host: BTreeMap::new() });

/// The size ACL charges for an aclrtMalloc of `size` under `policy`;
/// `padded` is false for aclrtMallocAlign32, which only rounds up to 32
/// (`GetAlignedAndPaddingSize` with `isPadding` false, `aclrtMallocAlign32Impl`
/// in src/acl/aclrt_impl/memory.cpp).
pub fn charged_size(size: usize, policy: u32, padded: bool) -> Option<u64> {
    let size = size as u64;
    let rounded = size.checked_add(31)? & !31;
    match policy {
        HUGE1G_ONLY | HUGE1G_ONLY_P2P => Some(rounded),
        _ if !padded => Some(rounded),
        _ => rounded.checked_add(32),
    }
}

/// True if `addr` lies inside a live aclrtMalloc block (or memory
/// imported by key).
pub fn is_device_block(addr: usize) -> bool {
    covers((addr, addr + 1))
}

/// True if `[start, end)` lies inside one live aclrtMalloc block, or one
/// memory imported by key.
pub fn covers((start, end): violation::Span) -> bool {
    let blocks = lock(&BLOCKS);
    blocks.device.range(..=start).next_back().is_some_and(|(&block, b)| end <= block + b.len)
        || crate::ipc::imported_covers((start, end))
}

/// The live aclrtMalloc block starting at `ptr`, for an export: (device,
/// its memory file, the offset of `ptr` in it, the bytes usable).
pub fn shareable_range(ptr: usize) -> Option<(i32, std::os::fd::RawFd, u64, usize)> {
    let b = *lock(&BLOCKS).device.get(&ptr)?;
    let fd = crate::vmm::file_of(b.device)?;
    Some((b.device, fd, b.file_offset + (ptr - b.base) as u64, b.len))
}

/// Live aclrtMallocHost memory, process-wide: bytes asked for and blocks.
pub fn host_usage() -> (u64, u64) {
    let blocks = lock(&BLOCKS);
    (blocks.host.values().map(|b| b.len as u64).sum(), blocks.host.len() as u64)
}

/// True if `addr` lies inside a live aclrtMallocHost block (pinned memory).
pub fn is_host_block(addr: usize) -> bool {
    let blocks = lock(&BLOCKS);
    blocks.host.range(..=addr).next_back().is_some_and(|(&start, b)| addr < start + b.len)
}

/// The page pool an aclrtMalloc policy draws from (the bandwidth bits
/// above the low byte do not change it).
fn pool_of(size: usize, policy: u32) -> PagePool {
    const HUGE_PAGE_THRESHOLD: usize = 1 << 20;
    match policy & 0xFF {
        1 | 4 => PagePool::Huge,
        2 | 5 => PagePool::Normal,
        HUGE1G_ONLY | HUGE1G_ONLY_P2P => PagePool::Giant,
        _ if size > HUGE_PAGE_THRESHOLD => PagePool::Huge,
        _ => PagePool::Normal,
    }
}

/// Where blocks start inside their mapping: at the page (the default) or a
/// random multiple of 64 bytes past it (`ACLEMU_MALLOC_ALIGN=random`).
static RANDOM_ALIGN: LazyLock<Option<AtomicU64>> = LazyLock::new(|| {
    let value = std::env::var("ACLEMU_MALLOC_ALIGN").ok()?;
    let seed = match value.trim() {
        "random" => std::process::id() as u64 ^ (&RANDOM_ALIGN as *const _ as u64),
        other => other.strip_prefix("random:")?.trim().parse().ok()?,
    };
    Some(AtomicU64::new(seed | 1))
});

/// The block's offset into its mapping: 0, or 64 to 4032 bytes.
fn start_offset() -> usize {
    let Some(state) = RANDOM_ALIGN.as_ref() else {
        return 0;
    };
    // xorshift64; a lost update between threads only repeats an offset.
    let mut x = state.load(Ordering::Relaxed);
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    state.store(x, Ordering::Relaxed);
    64 * (1 + (x % 63) as usize)
}

unsafe fn malloc(dev_ptr: *mut *mut c_void, size: usize, policy: u32, padded: bool) -> AclResult<()> {
    require(!dev_ptr.is_null() && size != 0)?;
    crate::ipc::reap();
    let id = device::current()?;
    let dev = device::get(id)?;
    let charged = charged_size(size, policy, padded).ok_or(ACL_ERROR_RT_MEMORY_ALLOCATION)?;
    let offset = start_offset();
    let map_len = usize::try_from(charged)
        .ok()
        .and_then(|n| n.checked_add(offset))
        .and_then(host_map::page_round)
        .ok_or(ACL_ERROR_RT_MEMORY_ALLOCATION)?;
    let pool = pool_of(size, policy);
    dev.charge(charged, pool)?;
    if let Err(e) = device::take_address(map_len as u64) {
        dev.uncharge(charged, pool);
        return Err(e);
    }
    let mapped = crate::vmm::take_file_range(id, map_len as u64).and_then(|(fd, at)| {
        let base = host_map::map_file(fd, at, map_len);
        if base.is_none() {
            crate::vmm::return_file_range(id, at, map_len as u64);
        }
        Some((base?, at))
    });
    let Some((base, file_offset)) = mapped else {
        dev.uncharge(charged, pool);
        device::return_address(map_len as u64);
        return Err(ACL_ERROR_RT_MEMORY_ALLOCATION);
    };
    let ptr = (base as usize + offset) as *mut c_void;
    let block = Block { base: base as usize, map_len, file_offset, len: map_len - offset, charged, pool, device: id };
    lock(&BLOCKS).device.insert(ptr as usize, block);
    let counters = usage::of(id);
    usage::add(&counters.malloc_bytes, charged);
    usage::add(&counters.malloc_count, 1);
    // SAFETY: dev_ptr checked non-NULL; the caller promises it is writable.
    unsafe { write_out(dev_ptr, ptr) }
}

fn free(ptr: *mut c_void) -> AclResult<()> {
    require(!ptr.is_null())?;
    let block = lock(&BLOCKS).device.remove(&(ptr as usize)).ok_or(ACL_ERROR_RT_PARAM_INVALID)?;
    let start = ptr as usize;
    violation::check_release((start, start + block.len), "aclrtFree");
    // SAFETY: the block was ours and is now out of the registry; aclrtFree
    // does not wait for queued work, as on a device (queued work that runs
    // later finds the memory gone and skips it).
    unsafe { drop_block(start, block) };
    Ok(())
}

/// Unmaps a block taken out of the registry and gives its memory back, or,
/// while another process holds it imported, once none does.
///
/// # Safety
/// Nothing may use the block's mapping afterwards.
unsafe fn drop_block(start: usize, block: Block) {
    // SAFETY: the caller gives the mapping up.
    unsafe { host_map::unmap(block.base as *mut c_void, block.map_len) };
    device::return_address(block.map_len as u64);
    let exported_at = block.file_offset + (start - block.base) as u64;
    let later = || -> crate::ipc::Release { Box::new(move || give_back(&block)) };
    if crate::ipc::freed(block.device, exported_at, later) {
        give_back(&block);
    }
}

/// Gives a freed block's memory back: its range of the file, its charge,
/// its counters.
fn give_back(block: &Block) {
    crate::vmm::return_file_range(block.device, block.file_offset, block.map_len as u64);
    if let Ok(dev) = device::get(block.device) {
        dev.uncharge(block.charged, block.pool);
    }
    let counters = usage::of(block.device);
    usage::sub(&counters.malloc_bytes, block.charged);
    usage::sub(&counters.malloc_count, 1);
}

/// Releases every aclrtMalloc block of `device` (nothing holds the device
/// any more, `device_refs`): unmapped and uncharged, as a device release
/// frees the process's device memory.
pub fn release_device(device: i32) {
    let gone: Vec<(usize, Block)> = {
        let mut blocks = lock(&BLOCKS);
        let keys: Vec<usize> = blocks.device.iter().filter(|(_, b)| b.device == device).map(|(&k, _)| k).collect();
        keys.iter().filter_map(|&k| blocks.device.remove(&k).map(|b| (k, b))).collect()
    };
    for (start, block) in gone {
        // SAFETY: the block was ours and is now out of the registry; the
        // device's work was finished before its release.
        unsafe { drop_block(start, block) };
    }
}

unsafe fn malloc_host(host_ptr: *mut *mut c_void, size: usize) -> AclResult<()> {
    require(!host_ptr.is_null() && size != 0)?;
    let len = host_map::page_round(size).ok_or(ACL_ERROR_RT_MEMORY_ALLOCATION)?;
    let ptr = host_map::map_rw(len).ok_or(ACL_ERROR_RT_MEMORY_ALLOCATION)?;
    lock(&BLOCKS).host.insert(
        ptr as usize,
        Block { base: ptr as usize, map_len: len, file_offset: 0, len, charged: 0, pool: PagePool::Normal, device: -1 },
    );
    // SAFETY: host_ptr checked non-NULL; the caller promises it is writable.
    unsafe { write_out(host_ptr, ptr) }
}

fn free_host(ptr: *mut c_void) -> AclResult<()> {
    require(!ptr.is_null())?;
    let block = lock(&BLOCKS).host.remove(&(ptr as usize)).ok_or(ACL_ERROR_RT_PARAM_INVALID)?;
    // SAFETY: the block was ours and is now out of the registry.
    unsafe { host_map::unmap(ptr, block.map_len) };
    Ok(())
}

/// Allocates `size` bytes of device memory on the current device.
///
/// # Safety
/// `dev_ptr` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMalloc(dev_ptr: *mut *mut c_void, size: usize, policy: u32) -> crate::aclError {
    // SAFETY: forwarded caller contract.
    acl_entry!(Api::Malloc, { unsafe { malloc(dev_ptr, size, policy, true) } })
}

/// aclrtMalloc without the 32-byte padding: charged `size` rounded up to 32.
///
/// # Safety
/// `dev_ptr` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMallocAlign32(dev_ptr: *mut *mut c_void, size: usize, policy: u32) -> crate::aclError {
    // SAFETY: forwarded caller contract.
    acl_entry!(Api::MallocAlign32, { unsafe { malloc(dev_ptr, size, policy, false) } })
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
pub unsafe extern "C" fn aclrtMallocHost(host_ptr: *mut *mut c_void, size: usize) -> crate::aclError {
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
    fn pools_follow_the_policy() {
        use super::{pool_of, PagePool};
        assert_eq!(pool_of(2 << 20, 0), PagePool::Huge);
        assert_eq!(pool_of(1 << 20, 0), PagePool::Normal);
        assert_eq!(pool_of(64, 1), PagePool::Huge);
        assert_eq!(pool_of(64 << 20, 2), PagePool::Normal);
        assert_eq!(pool_of(64, 6), PagePool::Giant);
        assert_eq!(pool_of(64 << 20, 0x1000 | 2), PagePool::Normal);
    }

    #[test]
    fn padding_follows_acl() {
        assert_eq!(charged_size(1, 0, true), Some(64));
        assert_eq!(charged_size(32, 0, true), Some(64));
        assert_eq!(charged_size(33, 2, true), Some(96));
        assert_eq!(charged_size(33, HUGE1G, true), Some(64));
        assert_eq!(charged_size(usize::MAX, 0, true), None);
        // aclrtMallocAlign32: rounded, not padded.
        assert_eq!(charged_size(1, 0, false), Some(32));
        assert_eq!(charged_size(33, 2, false), Some(64));
        assert_eq!(charged_size(64, 0, false), Some(64));
    }
    const HUGE1G: u32 = super::HUGE1G_ONLY;
}
