//! `npualloc_sleep` / `npualloc_wake`: give back an allocator's device memory while every address it handed out stays
//! valid, and bring it back (Note [sleep] in `core::sleep`).

use super::boundary::slice_arg;
use super::handle::npualloc_allocator;
use super::status::npualloc_status;

/// Sleeps: synchronizes every stream that used memory, gives back all cached memory, copies the live blocks of
/// `sleep=offload` pools to host memory and gives their device memory back, gives back those of `sleep=discard` pools
/// without a copy, and leaves those of `sleep=keep` pools (the default pool keeps). Virtual addresses stay reserved:
/// every pointer is valid again after `npualloc_wake`. While asleep, allocations routed to offload or discard pools are
/// INVALID_ARGUMENT; any block may be freed. Statuses: OK, also when asleep already (nothing changes); INVALID_ARGUMENT
/// after an `npualloc_wake_with` that left some pools asleep (wake the rest first); UNSUPPORTED when an offload or
/// discard pool has live blocks and the allocator uses fixed segments (`expandable_segments:false`), both changing
/// nothing; the runtime's failure otherwise (what was taken is brought back first).
///
/// # Safety
/// `a` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_sleep(a: *mut npualloc_allocator) -> npualloc_status {
    ffi_boundary!(status "npualloc_sleep", {
        try_live!(a).core.sleep_pools().map(|_| ())
    })
}

/// Wakes: maps device memory under every sleeping block again at the same address and restores offloaded contents
/// (discarded ones read as undefined). All or nothing: when the handles do not fit, the cached memory of the pools
/// awake is given back (as the out-of-memory ladder gives it; a graph pool keeps its own) and the wake tried again; a
/// physical allocation, map or copy refused part-way is undone whole, every block staying asleep with its host copy.
/// Statuses: OK, also when awake already; OUT_OF_MEMORY when the device cannot hold the sleeping blocks or a map is
/// refused (a later call may succeed); the runtime's failure of a copy back. A refused wake changes nothing.
///
/// # Safety
/// `a` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_wake(a: *mut npualloc_allocator) -> npualloc_status {
    ffi_boundary!(status "npualloc_wake", {
        try_live!(a).core.wake()
    })
}

/// Sleeps as `npualloc_sleep` does, with the mode of some pools chosen now: the `n_offload` pools at `offload_pools`
/// offload, the `n_discard` pools at `discard_pools` discard, and every other pool sleeps in its own `sleep` config
/// (the default pool, 0, keeps unless listed): vLLM's `sleep(offload_tags=...)` with one pool per tag. A list may be
/// NULL when its count is 0; a pool may appear twice in one list. Statuses: those of `npualloc_sleep`, and
/// INVALID_ARGUMENT, changing nothing, for a NULL list with a count above 0, a count too large for memory, a
/// misaligned list, a pool that does not exist or was destroyed, or a pool in both lists. Asleep already: OK, nothing
/// changes (the lists are still checked).
///
/// # Safety
/// `a` is NULL or a live handle; a non-NULL list points to its count of readable `uint64_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_sleep_with(
    a: *mut npualloc_allocator,
    offload_pools: *const u64,
    n_offload: usize,
    discard_pools: *const u64,
    n_discard: usize,
) -> npualloc_status {
    ffi_boundary!(status "npualloc_sleep_with", {
        let allocator = try_live!(a);
        // SAFETY: the caller's contract for each list; pointer and count are checked first.
        let offload = unsafe { slice_arg(offload_pools, n_offload, "offload_pools", "pools") }?;
        // SAFETY: as above.
        let discard = unsafe { slice_arg(discard_pools, n_discard, "discard_pools", "pools") }?;
        allocator.core.sleep_with(offload, discard).map(|_| ())
    })
}

/// Wakes only the sleeping blocks of the `n` pools at `pools`, by the rules of `npualloc_wake`; the others stay asleep
/// (their allocations still INVALID_ARGUMENT) and the allocator counts as asleep until every pool is awake: vLLM's
/// `wake_up(tags=[...])` with one pool per tag, e.g. the weights before the KV cache. A pool not asleep is OK and
/// changes nothing; a destroyed pool may be listed (its sleeping live blocks wake). `pools` may be NULL when `n` is 0
/// (then only an allocator with no pool left asleep becomes awake). Statuses: those of `npualloc_wake`, and
/// INVALID_ARGUMENT, changing nothing, for a NULL list with `n` above 0, a count too large for memory, a misaligned
/// list, or a pool that was never created. Awake already: OK (the list is still checked).
///
/// # Safety
/// `a` is NULL or a live handle; a non-NULL `pools` points to `n` readable `uint64_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_wake_with(
    a: *mut npualloc_allocator,
    pools: *const u64,
    n: usize,
) -> npualloc_status {
    ffi_boundary!(status "npualloc_wake_with", {
        let allocator = try_live!(a);
        // SAFETY: the caller's contract for the list; pointer and count are checked first.
        let pools = unsafe { slice_arg(pools, n, "pools", "pools") }?;
        allocator.core.wake_with(pools)
    })
}
