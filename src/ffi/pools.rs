//! Private pools (Note [pools] in the core): create, begin, end, destroy, get_stats, empty_cache, and listing
//! and restoring their live blocks (Note [pool checkpoints]).

use super::handle::npualloc_allocator;
use super::stats::npualloc_stats;
use super::status::npualloc_status;
use crate::core::pools::checkpoint::LiveBlock;
use crate::core::pools::config::PoolConfig;
use crate::error::Error;
use crate::runtime::Stream;
use crate::sys::aclrtStream;
use std::ffi::{c_char, c_void};

/// Creates a private pool and writes its id (never 0, the default pool, and never reused) to `*out_pool`.
/// `config` is `"key:value,..."`, or NULL for the defaults:
/// - `sleep` = `keep` (default) | `offload` | `discard`: what `npualloc_sleep` does to the pool's live blocks.
/// - `use_on_oom` (default false): when a request of the default pool runs out of memory, a free block of the
///   pool on the request's stream serves it first, with no device call, as the pool's block (torch_npu's
///   `MemPool(use_on_oom=True)`); failing that, any request outside the pool may take the pool's cached memory.
///   Otherwise a pool keeps its cached memory until `npualloc_pool_destroy` (`npualloc_empty_cache` leaves it).
/// - For libraries that register the pool's blocks (HCCL, ADXL): `alignment` (`2m`, `64k` or bytes, a power of
///   two up to 2 MiB; default 512) makes every block start on that boundary and its size a multiple of it;
///   `no_split` (default false) makes every block 2 MiB-aligned memory of its own, never cut from cached
///   memory: with fixed segments a segment of its own or a whole cached one; in an expandable range whole
///   physical handles no other block touches (missing pages get handles covering exactly them; freed neighbours
///   coalesce, and a later request takes only the handles it needs). In fixed mode an aligned segment the
///   runtime places off the boundary costs one more `aclrtMalloc`, one unit larger.
///
/// Returns NPUALLOC_ERR_BAD_CONFIG naming the key for an unknown key or a bad value.
///
/// # Safety
/// `a` is NULL or a live handle; `config` is NULL or a NUL-terminated string; `out_pool` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_pool_create(
    a: *mut npualloc_allocator,
    config: *const c_char,
    out_pool: *mut u64,
) -> npualloc_status {
    ffi_boundary!(status "npualloc_pool_create", {
        let allocator = try_live!(a);
        let out = try_out!(out_pool, "out_pool");
        let text = if config.is_null() { None } else { Some(try_str!(config, "config")) };
        let id = allocator.core.pool_create(PoolConfig::parse(text)?)?;
        // SAFETY: out was checked non-NULL and aligned.
        unsafe { out.write(id) };
        Ok(())
    })
}

/// Until the matching `npualloc_pool_end`, every allocation on `stream` (from any thread, through every entry
/// point: direct, desc, pluggable) is served from `pool`; `stream` NULL routes instead every allocation the
/// calling thread makes, on any stream (PyTorch's `use_mem_pool`). Routes nest: the newest wins. Frees always go
/// to the block's own pool. A stream in graph capture may be routed; it is never queried or synchronized.
/// Returns NPUALLOC_ERR_INVALID_ARGUMENT, changing nothing, for a pool never created or destroyed, an unknown
/// stream, or a thread route asked for from a thread-local destructor once the thread's own state is gone (it
/// could never end).
///
/// # Safety
/// `a` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_pool_begin(
    a: *mut npualloc_allocator,
    pool: u64,
    stream: aclrtStream,
) -> npualloc_status {
    ffi_boundary!(status "npualloc_pool_begin", {
        try_live!(a).core.pool_begin(pool, (!stream.is_null()).then(|| Stream::from_raw(stream)))
    })
}

/// Ends the newest route of `stream` (NULL: of the calling thread), which must go to `pool`. Returns
/// NPUALLOC_ERR_INVALID_ARGUMENT, changing nothing, when that route goes to another pool, there is none, or the
/// pool does not exist. For the calling thread from a thread-local destructor once the thread's own state is
/// gone, returns NPUALLOC_OK: its routes ended with that state.
///
/// # Safety
/// `a` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_pool_end(
    a: *mut npualloc_allocator,
    pool: u64,
    stream: aclrtStream,
) -> npualloc_status {
    ffi_boundary!(status "npualloc_pool_end", {
        try_live!(a).core.pool_end(pool, (!stream.is_null()).then(|| Stream::from_raw(stream)))
    })
}

/// Destroys `pool`: it takes no more routes, its cached memory goes back to the device now (after synchronizing
/// the streams that used it), and its live blocks stay valid, their memory going back when freed. Returns
/// NPUALLOC_ERR_INVALID_ARGUMENT, changing nothing, for pool 0, a pool never created or already destroyed, or
/// a pool with an active route.
///
/// # Safety
/// `a` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_pool_destroy(a: *mut npualloc_allocator, pool: u64) -> npualloc_status {
    ffi_boundary!(status "npualloc_pool_destroy", {
        try_live!(a).core.pool_destroy(pool)
    })
}

/// Sets `pool`'s `use_on_oom` from now on: nonzero `on` lets requests of other pools that run out of memory
/// take its cached memory, 0 stops it (torch_npu's `MemPool` sets it at any time; its destructor clears it).
/// Returns NPUALLOC_ERR_INVALID_ARGUMENT, changing nothing, for pool 0 (the default pool's cache always serves
/// such requests) or a pool never created or destroyed.
///
/// # Safety
/// `a` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_pool_set_use_on_oom(
    a: *mut npualloc_allocator,
    pool: u64,
    on: i32,
) -> npualloc_status {
    ffi_boundary!(status "npualloc_pool_set_use_on_oom", {
        try_live!(a).core.pool_set_use_on_oom(pool, on != 0)
    })
}

/// Fills `*out` as `npualloc_get_stats` does, for one pool (0: the default pool; a destroyed pool's live blocks
/// still count). Counters of device calls, retries and OOMs count those made for the pool's memory and requests
/// (sleep, wake and freeing unmapped handles cached for any pool count only in the allocator's); reserved bytes
/// are the pool's segments; the peaks are the pool's own (allocated and requested as `npualloc_get_stats` keeps
/// them, over the pool's streams; reserved the most its segments held). Returns NPUALLOC_ERR_INVALID_ARGUMENT
/// for a pool never created or a `struct_size` below the header.
///
/// # Safety
/// `a` is NULL or a live handle; `out` as for `npualloc_get_stats`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_pool_get_stats(
    a: *const npualloc_allocator,
    pool: u64,
    out: *mut npualloc_stats,
) -> npualloc_status {
    ffi_boundary!(status "npualloc_pool_get_stats", {
        let allocator = try_live!(a);
        // SAFETY: the caller's contract on `out`, passed on.
        unsafe { super::stats::fill_stats(out, || allocator.core.pool_stats(pool)) }
    })
}

/// Gives back the cached memory of `pool` (0: the default pool's; a destroyed pool's remainder too) after
/// synchronizing only the streams that used it; live blocks are untouched. A pool that served a graph capture
/// and is not destroyed keeps its memory (the graph may replay until `npualloc_pool_destroy`): NPUALLOC_OK,
/// nothing given back. The before-release hook runs first, as for `npualloc_empty_cache`. Returns
/// NPUALLOC_ERR_INVALID_ARGUMENT, changing nothing, for a pool never created.
///
/// # Safety
/// `a` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_pool_empty_cache(a: *mut npualloc_allocator, pool: u64) -> npualloc_status {
    ffi_boundary!(status "npualloc_pool_empty_cache", {
        try_live!(a).core.pool_empty_cache(pool).map(|_| ())
    })
}

/// A live block of a pool, as `npualloc_pool_live_blocks` reports it and `npualloc_pool_restore` takes it back.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
#[allow(non_camel_case_types)]
pub struct npualloc_live_block {
    /// The block's address (what `npualloc_malloc` returned).
    pub ptr: *mut c_void,
    /// Its bytes: the request rounded as the pool rounds it.
    pub size: usize,
    /// The bytes its caller asked for.
    pub requested: usize,
    /// The stream it was allocated on.
    pub stream: aclrtStream,
}

/// Called by `npualloc_pool_live_blocks` with its `user` and one block.
#[allow(non_camel_case_types)]
pub type npualloc_live_block_fn = Option<unsafe extern "C" fn(user: *mut c_void, block: *const npualloc_live_block)>;

/// Calls `fn` with `user` for every live block of `pool` (0: the default pool), in address order: a checkpoint
/// `npualloc_pool_restore` can set the pool back to (as PyTorch's graph trees take of a graph pool after each
/// recording). `fn` runs on the calling thread after the blocks were read, with no npualloc lock held, before
/// this returns. Returns NPUALLOC_ERR_INVALID_ARGUMENT for a NULL `fn` or a pool never created or destroyed.
///
/// # Safety
/// `a` is NULL or a live handle; `fn` is called with `user` only as said.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_pool_live_blocks(
    a: *const npualloc_allocator,
    pool: u64,
    r#fn: npualloc_live_block_fn,
    user: *mut c_void,
) -> npualloc_status {
    ffi_boundary!(status "npualloc_pool_live_blocks", {
        let allocator = try_live!(a);
        let Some(f) = r#fn else {
            return Err(Error::InvalidArgument("fn is NULL: npualloc_pool_live_blocks needs a function to call".into()));
        };
        for b in allocator.core.pool_live_blocks(pool)? {
            let block = npualloc_live_block {
                ptr: b.addr as *mut c_void,
                size: b.size,
                requested: b.requested,
                stream: b.stream.raw(),
            };
            // SAFETY: `f` and `user` come from the caller together for this call; `block` lives across it.
            unsafe { f(user, &block) };
        }
        Ok(())
    })
}

/// Sets the live blocks of `pool` to exactly the `n` blocks at `blocks` (a list from
/// `npualloc_pool_live_blocks`; `n` 0 with NULL `blocks` frees them all): the pool's other live blocks are
/// freed, and each listed block not live now is allocated again at its address and size, from the pool's free
/// memory there, on its old stream's pool (`stream` must be the one reported); one live now at the same address
/// and size stays. No device call is made. What PyTorch's graph trees do with a graph pool's checkpoint before
/// recording a new branch (torch_npu's `setCheckpointPoolState`). The caller makes sure no other thread
/// allocates in or frees into the pool meanwhile.
///
/// Returns NPUALLOC_ERR_INVALID_ARGUMENT, changing nothing, for a NULL `blocks` with `n` above 0, pool 0 (the
/// default pool's frees follow rules a restore would skip), a pool never created or destroyed, a block no
/// listing could give (a request of 0 bytes or more than its size, an address or size off the pool's alignment
/// or not whole 512-byte units, a stream other than its memory's), overlapping blocks, a block whose memory is
/// not the pool's (given back since, or another pool's), is not mapped, or will not be free once the pool's
/// other blocks are (a freed block still waiting for other streams' work), or a live block to be freed that
/// other streams used (`npualloc_record_stream`) or another process imported.
///
/// # Safety
/// `a` is NULL or a live handle; a non-NULL `blocks` points to `n` readable blocks.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_pool_restore(
    a: *mut npualloc_allocator,
    pool: u64,
    blocks: *const npualloc_live_block,
    n: usize,
) -> npualloc_status {
    ffi_boundary!(status "npualloc_pool_restore", {
        let allocator = try_live!(a);
        // SAFETY: the caller's contract for the list; pointer and count are checked first.
        let list: Vec<LiveBlock> = unsafe { super::boundary::slice_arg(blocks, n, "blocks", "blocks") }?
            .iter()
            .map(|b| LiveBlock {
                addr: b.ptr as usize,
                size: b.size,
                requested: b.requested,
                stream: Stream::from_raw(b.stream),
            })
            .collect();
        allocator.core.pool_restore(pool, &list).map(|_| ())
    })
}
