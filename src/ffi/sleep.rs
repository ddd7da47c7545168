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
/// block is allowed. Asleep already: OK, nothing changes.
///
/// Statuses: OK; INVALID_ARGUMENT for a NULL or destroyed `a`; UNSUPPORTED
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
/// undefined). Awake already: OK.
///
/// Statuses: OK; INVALID_ARGUMENT for a NULL or destroyed `a`;
/// OUT_OF_MEMORY when the device cannot hold the sleeping blocks: nothing
/// changed, the allocator is still asleep, and a later call may succeed.
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
