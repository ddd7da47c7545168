//! Statistics and snapshots.

use super::handle::npualloc_allocator;
use super::status::npualloc_status;
use crate::error::{Error, Result};
use std::ffi::{c_char, CString};

/// Version of the `npualloc_stats` layout this library fills (the field docs say which version added each field).
pub const NPUALLOC_STATS_VERSION: u32 = 7;

/// Allocator statistics in PyTorch `memory_stats()` vocabulary; the names are also the snapshot's "stats" keys. The
/// caller sets `struct_size` to `sizeof(npualloc_stats)`; fields past it are not written, so callers built against an
/// older, smaller struct keep working (fields are only ever added at the end). The cached part of the segments is
/// segment_bytes - allocated_bytes - pending_free_bytes.
// Mirrors `stats_table!` in core/stats.rs: a missing or extra field does not compile, and a test checks the order.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct npualloc_stats {
    pub struct_size: u32,
    /// Filled by the library: NPUALLOC_STATS_VERSION.
    pub version: u32,
    /// Bytes of live blocks, as rounded.
    pub allocated_bytes: u64,
    /// The most `allocated_bytes` at once: exact while one stream allocates; with several, the highest total seen when
    /// some stream reached a new high of its own (kept without a counter every stream writes; a peak that streams each
    /// below their own high make together can be missed). Likewise `requested_bytes_peak`.
    pub allocated_bytes_peak: u64,
    /// Bytes of live blocks, as asked.
    pub requested_bytes: u64,
    /// The most `requested_bytes` at once.
    pub requested_bytes_peak: u64,
    /// Device memory held: `segment_bytes` plus `cached_handle_bytes`.
    pub reserved_bytes: u64,
    /// The most `reserved_bytes` at once.
    pub reserved_bytes_peak: u64,
    /// Live blocks.
    pub active_blocks: u64,
    /// Fixed segments plus expandable ranges.
    pub segments: u64,
    /// Allocations served.
    pub num_allocs: u64,
    /// Frees (pending ones included).
    pub num_frees: u64,
    /// aclrtMalloc calls that succeeded.
    pub num_device_mallocs: u64,
    /// aclrtFree calls that succeeded.
    pub num_device_frees: u64,
    /// aclrtMapMem calls that succeeded.
    pub num_maps: u64,
    /// aclrtUnmapMem calls that succeeded.
    pub num_unmaps: u64,
    /// Requests that went through the out-of-memory ladder.
    pub num_alloc_retries: u64,
    /// Requests refused for lack of memory.
    pub num_ooms: u64,
    /// Stream synchronizations made to give memory back.
    pub num_syncs: u64,
    /// Largest block a request could get without a device call.
    pub largest_free_block: u64,
    /// aclrtMallocPhysical calls that succeeded. (Version 2 from here on.)
    pub num_physical_mallocs: u64,
    /// aclrtFreePhysical calls that succeeded.
    pub num_physical_frees: u64,
    /// Bytes freed by the caller and waiting for work on other streams (record_stream) to complete.
    pub pending_free_bytes: u64,
    /// Device memory held by segments: whole fixed segments, and the mapped
    /// pages of expandable ranges. The snapshot's segment sizes add up to it.
    pub segment_bytes: u64,
    /// Physical handles unmapped and kept for reuse (expandable segments); 0 with fixed segments.
    pub cached_handle_bytes: u64,
    /// Address space of all segments: with expandable segments their reserved virtual ranges; with fixed segments the
    /// part of each that blocks tile (`segment_bytes` less any alignment slack).
    pub address_space_bytes: u64,
    /// The most `segments` at once. (Version 3 from here on.)
    pub segments_peak: u64,
    /// Segments made: fixed segments obtained with aclrtMalloc plus expandable ranges reserved.
    pub num_segments_created: u64,
    /// Segments given back; `num_segments_created - num_segments_released` is `segments`.
    pub num_segments_released: u64,
    /// Wholly free physical handles mapped a second time where an expandable range grew, in place of a fresh handle
    /// (each also counts in `num_maps`; its old address is unmapped later). (Version 4 from here on.)
    pub num_handle_moves: u64,
    /// Bytes of the blocks handed out since the allocator was made, as rounded: `allocated_bytes_total -
    /// allocated_bytes` bytes were freed. (Version 5 from here on.)
    pub allocated_bytes_total: u64,
    /// Device memory obtained since the allocator was made (fixed segments and physical handles):
    /// `reserved_bytes_total - reserved_bytes` bytes were given back.
    pub reserved_bytes_total: u64,
    /// Blocks freed by the caller and waiting for work on other streams (their bytes are `pending_free_bytes`).
    pub pending_free_blocks: u64,
    /// Free blocks of fixed segments that hold other blocks too: cached
    /// pieces of a split segment (none with expandable segments).
    pub inactive_split_blocks: u64,
    /// Bytes of those blocks.
    pub inactive_split_bytes: u64,
    /// Blocks of at least this many bytes are never split (`max_split_size_mb`); `UINT64_MAX` when no limit is set
    /// (PyTorch's -1, read as a signed number).
    pub max_split_size: u64,
    /// Live blocks exported to other processes (`npualloc_ipc_export`). (Version 6 from here on.)
    pub exported_blocks: u64,
    /// Bytes of freed blocks that other processes still hold imported: neither handed out nor given back until the last
    /// of them lets go (counted in `pending_free_bytes` too).
    pub held_for_importers_bytes: u64,
    /// The most device memory this allocator may reserve (`per_process_memory_fraction`,
    /// `npualloc_set_memory_fraction`) in bytes; `UINT64_MAX` when there is no limit. (Version 7 from here on.)
    pub memory_limit: u64,
}

macro_rules! stats_from_core {
    ($($name:ident $doc:literal),* $(,)?) => {
        impl npualloc_stats {
            fn from_core(s: &crate::core::Stats, struct_size: u32) -> Self {
                npualloc_stats { struct_size, version: NPUALLOC_STATS_VERSION, $($name: s.$name),* }
            }

            /// (name, byte offset) of every statistics field.
            #[cfg(test)]
            fn offsets() -> Vec<(&'static str, usize)> {
                vec![$((stringify!($name), std::mem::offset_of!(npualloc_stats, $name))),*]
            }
        }
    };
}

crate::core::stats_table!(stats_from_core);

/// Fills `*out` up to `out->struct_size` bytes, whole fields only, and writes back in `struct_size` how many bytes it
/// filled. Returns NPUALLOC_ERR_INVALID_ARGUMENT for a NULL handle or `out`, or a `struct_size` smaller than the two
/// header fields.
///
/// # Safety
/// `a` is NULL or a live handle; `out` is NULL or points to an `npualloc_stats` whose `struct_size` bytes are writable
/// (at least its two header fields).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_get_stats(a: *const npualloc_allocator, out: *mut npualloc_stats) -> npualloc_status {
    ffi_boundary!(status "npualloc_get_stats", {
        let allocator = try_live!(a);
        // SAFETY: the caller's contract on `out`, passed on.
        unsafe { fill_stats(out, || allocator.core.stats()) }
    })
}

/// Checks `out` and its `struct_size`, then fills it from `stats()` as `npualloc_get_stats` documents.
///
/// # Safety
/// As for `out` of `npualloc_get_stats`.
pub(super) unsafe fn fill_stats(
    out: *mut npualloc_stats,
    stats: impl FnOnce() -> Result<crate::core::Stats>,
) -> Result<()> {
    let out = try_out!(out.cast::<u32>(), "out");
    // SAFETY: out is non-NULL and aligned; struct_size is its first field.
    let size = unsafe { out.read() } as usize;
    if size < 8 {
        return Err(Error::InvalidArgument(format!("out->struct_size is {size}; set it to sizeof(npualloc_stats)")));
    }
    // Whole fields only: the header, then as many 8-byte counters as fit.
    let n = 8 + (size.min(std::mem::size_of::<npualloc_stats>()) - 8) / 8 * 8;
    let full = npualloc_stats::from_core(&stats()?, n as u32);
    // SAFETY: the caller promises `size` writable bytes at out; we write at most that.
    unsafe { std::ptr::copy_nonoverlapping((&full as *const npualloc_stats).cast::<u8>(), out.cast::<u8>(), n) };
    Ok(())
}

/// Pool kind for `npualloc_get_kind_stats`: PyTorch's small pool (blocks of at most 1 MiB as rounded).
pub const NPUALLOC_SMALL_BLOCKS: i32 = 0;

/// The large pool (blocks over 1 MiB).
pub const NPUALLOC_LARGE_BLOCKS: i32 = 1;

/// Fills `*out` as `npualloc_get_stats` does, for the blocks of one pool kind (`NPUALLOC_SMALL_BLOCKS` or
/// `NPUALLOC_LARGE_BLOCKS`) over every pool: PyTorch's "small_pool" and "large_pool" figures. Reserved bytes are the
/// kind's segments' (cached unmapped handles belong to no kind); the allocated and requested peaks are the kind's sums
/// at the moments the allocator's peaks are taken, so a high of one kind while the total stays below its peak is
/// missed; the reserved and segment peaks read as their current figures; the device call counters and
/// `reserved_bytes_total` read 0. Returns NPUALLOC_ERR_INVALID_ARGUMENT for another `kind`, or as `npualloc_get_stats`.
///
/// # Safety
/// `a` is NULL or a live handle; `out` as for `npualloc_get_stats`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_get_kind_stats(
    a: *const npualloc_allocator,
    kind: i32,
    out: *mut npualloc_stats,
) -> npualloc_status {
    ffi_boundary!(status "npualloc_get_kind_stats", {
        let allocator = try_live!(a);
        let kind = match kind {
            NPUALLOC_SMALL_BLOCKS => crate::core::PoolKind::Small,
            NPUALLOC_LARGE_BLOCKS => crate::core::PoolKind::Large,
            _ => {
                return Err(Error::InvalidArgument(format!(
                    "kind is {kind}: NPUALLOC_SMALL_BLOCKS (0) or NPUALLOC_LARGE_BLOCKS (1)"
                )))
            }
        };
        // SAFETY: the caller's contract on `out`, passed on.
        unsafe { fill_stats(out, || allocator.core.kind_stats(kind)) }
    })
}

/// Resets the peak counters to the current values.
///
/// # Safety
/// `a` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_reset_peak_stats(a: *mut npualloc_allocator) -> npualloc_status {
    ffi_boundary!(status "npualloc_reset_peak_stats", {
        try_live!(a).core.reset_peak_stats()
    })
}

/// Writes a JSON snapshot (segments, their blocks with address, size, state — active / cached / pending-free — and
/// stream, and the stats) to `*out_json`; free it with `npualloc_string_free`. Costs O(blocks).
///
/// # Safety
/// `a` is NULL or a live handle; `out_json` is NULL or valid for writing one pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_snapshot_json(
    a: *const npualloc_allocator,
    out_json: *mut *mut c_char,
) -> npualloc_status {
    ffi_boundary!(status "npualloc_snapshot_json", {
        let allocator = try_live!(a);
        // SAFETY: the caller's contract on `out_json`, passed on.
        unsafe { write_json(out_json, || allocator.core.snapshot_json()) }
    })
}

/// Checks `out_json`, then writes to it the text `json()` makes, as a string for `npualloc_string_free`.
///
/// # Safety
/// `out_json` is NULL or valid for writing one pointer.
pub(super) unsafe fn write_json(out_json: *mut *mut c_char, json: impl FnOnce() -> Result<String>) -> Result<()> {
    let out = try_out!(out_json, "out_json");
    let c = CString::new(json()?).map_err(|_| Error::Internal("snapshot contains a NUL byte".into()))?;
    // SAFETY: out was checked non-NULL and aligned.
    unsafe { out.write(c.into_raw()) };
    Ok(())
}

/// Frees a string returned by npualloc. NULL is a no-op.
///
/// # Safety
/// `s` is NULL or a string returned by npualloc and not yet freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_string_free(s: *mut c_char) {
    ffi_boundary!("npualloc_string_free", (), {
        if !s.is_null() {
            // SAFETY: s came from CString::into_raw in this library (the caller's contract).
            drop(unsafe { CString::from_raw(s) });
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The C struct holds the table's fields in the table's order, each a
    /// u64 right after the previous one (so `struct_size` cuts cleanly).
    #[test]
    fn c_struct_follows_the_table() {
        let offsets = npualloc_stats::offsets();
        let names: Vec<&str> = offsets.iter().map(|&(n, _)| n).collect();
        assert_eq!(names, crate::core::Stats::FIELDS);
        for (i, &(name, at)) in offsets.iter().enumerate() {
            assert_eq!(at, 8 + 8 * i, "{name} is at byte {at}");
        }
        assert_eq!(std::mem::size_of::<npualloc_stats>(), 8 + 8 * offsets.len(), "no field outside the table");
    }

    fn repo_file(path: &str) -> String {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    fn words(text: &str) -> String {
        text.split_whitespace().collect::<Vec<_>>().join(" ")
    }

    /// The header's comment on each statistics field is the table's text.
    #[test]
    fn header_comments_are_the_tables() {
        let header = repo_file("include/npualloc.h");
        let start = header.find("typedef struct npualloc_stats {").expect("npualloc_stats in the header");
        let body = &header[start..start + header[start..].find("} npualloc_stats;").expect("its end")];
        let mut comments = Vec::new();
        let mut rest = body;
        while let Some(open) = rest.find("/**") {
            let close = rest[open..].find("*/").expect("closed comment") + open;
            let text: Vec<&str> =
                rest[open + 3..close].lines().map(|l| l.trim().trim_start_matches('*').trim()).collect();
            let field = rest[close + 2..].split(';').next().unwrap_or("").split_whitespace().last().unwrap_or("");
            comments.push((field.to_string(), words(&text.join(" "))));
            rest = &rest[close + 2..];
        }
        let want: Vec<(String, String)> = crate::core::Stats::FIELDS
            .iter()
            .zip(crate::core::Stats::DOCS)
            .map(|(n, d)| (n.to_string(), words(d)))
            .collect();
        // The first comment is `version`'s.
        assert_eq!(
            &comments[1..],
            &want[..],
            "edit the table in core/stats.rs and the struct together, then run scripts/update-header.sh"
        );
    }

    /// The Python binding's `Stats` lists the table's fields in order.
    #[test]
    fn python_field_list_is_the_tables() {
        let py = repo_file("python/npualloc/_lib.py");
        let start = py.find("class Stats(ctypes.Structure):").expect("class Stats in _lib.py");
        let list = &py[start..];
        let list = &list[list.find("for name in (").expect("its name list") + 13..];
        let list = &list[..list.find(')').expect("end of the name list")];
        let names: Vec<&str> = list.split(',').map(|n| n.trim().trim_matches('"')).filter(|n| !n.is_empty()).collect();
        assert_eq!(names, crate::core::Stats::FIELDS, "python/npualloc/_lib.py's Stats fields");
    }
}
