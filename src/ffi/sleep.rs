//! `npualloc_sleep` / `npualloc_wake`: give back an allocator's device
//! memory while every address it handed out stays valid, and bring it back
//! (Note [sleep] in `core::sleep`).

use super::handle::{npualloc_allocator, Allocator};
use super::status::npualloc_status;

/// Sleeps: synchronizes every stream that used memory, gives back all cached
/// memory of every pool, copies the live blocks of `sleep=offload` pools to
/// host memory and gives their device memory back, gives back those of
/// `sleep=discard` pools without a copy, and leaves `sleep=keep` pools' live
/// blocks (the default pool keeps). Virtual addresses stay reserved: every
/// pointer is valid again after `npualloc_wake`. While asleep, allocations
/// routed to offload or discard pools are INVALID_ARGUMENT; freeing any
/// block is allowed. Asleep already: OK, nothing changes; but after an
/// `npualloc_wake_with` that woke some pools and left others asleep:
/// INVALID_ARGUMENT, nothing changed (wake the rest first).
///
/// Statuses: OK; INVALID_ARGUMENT for a NULL or destroyed `a`, or after a
/// partial wake (above); UNSUPPORTED
/// (nothing changed) when an offload or discard pool has live blocks and
/// the allocator uses fixed segments (`expandable_segments:false`); the
/// runtime's failure otherwise (what was taken is brought back first).
///
/// # Safety
/// `a` is NULL or a handle from `npualloc_create` not yet destroyed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_sleep(a: *mut npualloc_allocator) -> npualloc_status {
    ffi_boundary!(status "npualloc_sleep", {
        // SAFETY: as in npualloc_malloc.
        let allocator = unsafe { Allocator::from_handle(a) }?;
        allocator.core.sleep_pools().map(|_| ())
    })
}

/// Wakes: maps device memory under every sleeping block again at the same
/// address and restores offloaded contents (discarded ones read as
/// undefined). All or nothing: when the handles do not fit, the cached
/// memory of the pools awake is given back first (as the out-of-memory
/// ladder gives it; a graph pool keeps its own) and the wake tried again; a
/// physical allocation, map or copy refused part-way is undone whole, every
/// block staying asleep with its host copy. Awake already: OK.
///
/// Statuses: OK; INVALID_ARGUMENT for a NULL or destroyed `a`;
/// OUT_OF_MEMORY when the device cannot hold the sleeping blocks or a map
/// is refused: nothing changed, the allocator is still asleep, and a later
/// call may succeed; the runtime's failure of a copy back, also changing
/// nothing.
///
/// # Safety
/// `a` is NULL or a handle from `npualloc_create` not yet destroyed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_wake(a: *mut npualloc_allocator) -> npualloc_status {
    ffi_boundary!(status "npualloc_wake", {
        // SAFETY: as in npualloc_malloc.
        let allocator = unsafe { Allocator::from_handle(a) }?;
        allocator.core.wake()
    })
}

/// Sleeps as `npualloc_sleep` does, with the sleep mode of some pools
/// chosen now instead of at `npualloc_pool_create`: the `n_offload` pools
/// at `offload_pools` offload (their live blocks are copied to host memory
/// and restored by `npualloc_wake`), the `n_discard` pools at
/// `discard_pools` discard (they read as undefined after wake), and every
/// other pool sleeps in its own `sleep` config (the default pool, 0,
/// keeps unless listed). This is vLLM's `sleep(offload_tags=...)` with one
/// pool per tag. A list may be NULL when its count is 0; a pool may appear
/// twice in one list. Wake with `npualloc_wake`.
///
/// Statuses: those of `npualloc_sleep`, and INVALID_ARGUMENT, changing
/// nothing, for a NULL or destroyed `a`, a NULL list with a count above 0,
/// a count too large for memory, a misaligned list, a pool that does not
/// exist or was destroyed, or a pool in both lists. Asleep already: OK,
/// nothing changes (the lists are still checked); after a partial wake,
/// INVALID_ARGUMENT as for `npualloc_sleep`.
///
/// # Safety
/// `a` is NULL or a live handle; a non-NULL list points to its count of
/// readable `uint64_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_sleep_with(
    a: *mut npualloc_allocator,
    offload_pools: *const u64,
    n_offload: usize,
    discard_pools: *const u64,
    n_discard: usize,
) -> npualloc_status {
    ffi_boundary!(status "npualloc_sleep_with", {
        // SAFETY: as in npualloc_malloc.
        let allocator = unsafe { Allocator::from_handle(a) }?;
        // SAFETY: the caller's contract for each list; pointer and count are checked first.
        let offload = unsafe { pool_list(offload_pools, n_offload, "offload_pools") }?;
        // SAFETY: as above.
        let discard = unsafe { pool_list(discard_pools, n_discard, "discard_pools") }?;
        allocator.core.sleep_with(offload, discard).map(|_| ())
    })
}

/// Wakes only the sleeping blocks of the `n` pools at `pools`, by the rules
/// of `npualloc_wake`: all or nothing (OUT_OF_MEMORY changes nothing, the
/// pools stay asleep), and the awake pools' cached memory is given back
/// before giving up. The other pools stay asleep (their allocations still
/// INVALID_ARGUMENT), and the allocator counts as asleep until every pool is
/// awake. This is vLLM's `wake_up(tags=[...])` with one pool per tag, e.g.
/// the weights before the KV cache. A pool not asleep (a `keep` pool, or
/// one woken already) is OK and changes nothing; a destroyed pool may be
/// listed (its sleeping live blocks wake); `npualloc_wake` wakes every pool.
/// `pools` may be NULL when `n` is 0 (then only an allocator with no pool
/// left asleep becomes awake).
///
/// Statuses: those of `npualloc_wake`, and INVALID_ARGUMENT, changing
/// nothing, for a NULL or destroyed `a`, a NULL list with `n` above 0, a
/// count too large for memory, a misaligned list, or a pool that was never
/// created. Awake already: OK (the list is still checked).
///
/// # Safety
/// `a` is NULL or a live handle; a non-NULL `pools` points to `n` readable
/// `uint64_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_wake_with(
    a: *mut npualloc_allocator,
    pools: *const u64,
    n: usize,
) -> npualloc_status {
    ffi_boundary!(status "npualloc_wake_with", {
        // SAFETY: as in npualloc_malloc.
        let allocator = unsafe { Allocator::from_handle(a) }?;
        // SAFETY: the caller's contract for the list; pointer and count are checked first.
        let pools = unsafe { pool_list(pools, n, "pools") }?;
        allocator.core.wake_with(pools)
    })
}

/// The `n` pool ids at `ptr` (NULL allowed when `n` is 0).
///
/// # Safety
/// A non-NULL `ptr` points to `n` readable `u64`.
unsafe fn pool_list<'a>(ptr: *const u64, n: usize, param: &str) -> crate::error::Result<&'a [u64]> {
    if n == 0 {
        return Ok(&[]);
    }
    super::boundary::check_ptr(ptr, param)?;
    if n > isize::MAX as usize / std::mem::size_of::<u64>() {
        return Err(crate::error::Error::InvalidArgument(format!("{param}: {n} pools is more than memory can hold")));
    }
    // SAFETY: non-NULL, aligned and of a size memory can hold (checked above); readable by the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(ptr, n) })
}
