//! The message of a request refused for lack of memory: the request, the device's free memory, what this allocator
//! holds and in which form, used memory it does not hold, and what the OOM ladder tried. Sizes are in MiB (two
//! decimals); the request also in exact bytes, as the caller passed it.

use super::stats::Stats;
use crate::runtime::{AclCallError, Stream};
use std::fmt::{self, Write};

/// Everything the message says, gathered after the ladder gave back what the request obtained.
#[derive(Debug)]
pub(in crate::core) struct OomReport<'a> {
    pub device: i32,
    pub stream: Stream,
    pub size: usize,
    pub rounded: usize,
    /// `aclrtGetMemInfo`: (free, total).
    pub device_memory: Result<(usize, usize), AclCallError>,
    pub stats: Stats,
    /// The largest free block of the request's own pool when its last attempt failed.
    pub largest_seen: u64,
    /// The same now (another thread may have freed one since that attempt).
    pub largest_own_now: u64,
    /// The largest free block of every other pool of the device, and where.
    pub largest_elsewhere: Option<Elsewhere>,
    /// The ladder's steps that ran, in order.
    pub tried: &'a [&'static str],
    /// Why the last attempt failed.
    pub cause: String,
}

/// A free block in a pool the request could not use.
#[derive(Debug, Clone, Copy)]
pub(in crate::core) struct Elsewhere {
    pub bytes: u64,
    pub stream: Stream,
    /// Its pool kind is the request's other one (same stream and pool).
    pub other_kind_of_own: Option<crate::core::alloc::policy::PoolKind>,
    /// Its private pool, when that is not the request's pool.
    pub other_pool: Option<u64>,
}

/// `bytes` in MiB, two decimals.
pub(in crate::core) struct Mib(pub u64);

impl fmt::Display for Mib {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.2} MiB", self.0 as f64 / (1u64 << 20) as f64)
    }
}

impl fmt::Display for OomReport<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.stats;
        write!(
            f,
            "cannot allocate {} ({} bytes, rounded to {}) on device {} for stream {:#x}. ",
            Mib(self.size as u64),
            self.size,
            self.rounded,
            self.device,
            self.stream.0
        )?;
        match self.device_memory {
            Ok((free, total)) => {
                write!(f, "Device {} reports {} free of {}. ", self.device, Mib(free as u64), Mib(total as u64))?
            }
            Err(e) => write!(f, "Device {} memory info unavailable ({e}). ", self.device)?,
        }
        let in_blocks = s.segment_bytes.saturating_sub(s.allocated_bytes + s.pending_free_bytes);
        write!(
            f,
            "This allocator holds {}: {} allocated, {} cached in free blocks, {} cached as unmapped physical handles, \
             {} freed but waiting for other streams' work. The largest free block this request could use was {} \
             at its last attempt. ",
            Mib(s.reserved_bytes),
            Mib(s.allocated_bytes),
            Mib(in_blocks),
            Mib(s.cached_handle_bytes),
            Mib(s.pending_free_bytes),
            Mib(self.largest_seen),
        )?;
        if self.largest_own_now > self.largest_seen {
            write!(
                f,
                "Its own pool's largest free block is {} now: freed after that attempt (by another thread, or a \
                 free that waited for other streams' work), so a retry may succeed. ",
                Mib(self.largest_own_now)
            )?;
        }
        if let Some(e) = self.largest_elsewhere.filter(|e| e.bytes > self.largest_seen.max(self.largest_own_now)) {
            use crate::core::alloc::policy::{PoolKind, SMALL_SIZE};
            write!(f, "The largest free block of this allocator, {}, is in ", Mib(e.bytes))?;
            let (small, stream) = (Mib(SMALL_SIZE as u64), e.stream.0);
            match (e.other_kind_of_own, e.other_pool) {
                (Some(PoolKind::Small), _) => {
                    write!(f, "this stream's small pool, which serves only requests of {small} or less. ")?
                }
                (Some(PoolKind::Large), _) => {
                    write!(f, "this stream's large pool, which serves only requests over {small}. ")?
                }
                (None, Some(0)) => {
                    write!(f, "the default pool (stream {stream:#x}), which this request's pool does not use. ")?
                }
                (None, Some(pool)) => {
                    write!(f, "private pool {pool} (stream {stream:#x}), which this request's pool does not use. ")?
                }
                (None, None) => {
                    write!(f, "the pool of stream {stream:#x}: a stream reuses only its own free blocks. ")?
                }
            }
        }
        if let Ok((free, total)) = self.device_memory {
            // Under a MiB is the runtime's own rounding, not worth a sentence.
            let used = total.saturating_sub(free) as u64;
            if used >= s.reserved_bytes + (1 << 20) {
                write!(
                    f,
                    "The device has {} in use that this allocator does not hold: it may be held by another \
                     allocator in this process or by another process on the device. ",
                    Mib(used - s.reserved_bytes)
                )?;
            }
        }
        if self.tried.is_empty() {
            write!(f, "Nothing could be released. ")?;
        } else {
            write!(f, "Tried: {}. ", self.tried.join(", then "))?;
        }
        write!(f, "Last failure: {}.", self.cause)
    }
}

/// Ends the message with where the `oom_snapshot` file was written, or why it could not be.
pub(in crate::core) fn add_snapshot_sentence(report: &mut String, path: &std::path::Path, written: Result<(), String>) {
    if !report.ends_with('.') {
        report.push('.');
    }
    match written {
        Ok(()) => write!(report, " A memory snapshot (oom_snapshot) was written to {}.", path.display()),
        Err(why) => {
            write!(report, " The memory snapshot (oom_snapshot) could not be written to {}: {why}.", path.display())
        }
    }
    .expect("writing to a String cannot fail");
}

/// The message of a request refused because no address space was left for another expandable range.
#[derive(Debug)]
pub(in crate::core) struct AddressSpaceReport<'a> {
    pub device: i32,
    pub stream: Stream,
    pub size: usize,
    /// The range that could not be reserved.
    pub range: usize,
    pub device_memory: Result<(usize, usize), AclCallError>,
    pub stats: Stats,
    pub tried: &'a [&'static str],
    pub cause: String,
}

/// `bytes` in GiB, two decimals; in MiB below a GiB.
pub(in crate::core) struct Gib(pub u64);

impl fmt::Display for Gib {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 < 1 << 30 {
            return Mib(self.0).fmt(f);
        }
        write!(f, "{:.2} GiB", self.0 as f64 / (1u64 << 30) as f64)
    }
}

impl fmt::Display for AddressSpaceReport<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use crate::core::backing::expandable::budget;
        let s = &self.stats;
        write!(
            f,
            "address space exhausted: {} ranges of {} reserved by this allocator on device {}, {} by every allocator \
             of this process (its budget is {}); another range of {} for {} ({} bytes) on stream {:#x} could not be \
             reserved. ",
            s.segments,
            Gib(s.address_space_bytes),
            self.device,
            Gib(budget::reserved() as u64),
            Gib(budget::limit() as u64),
            Gib(self.range as u64),
            Mib(self.size as u64),
            self.size,
            self.stream.0
        )?;
        if let Ok((free, total)) = self.device_memory {
            write!(f, "Device {} reports {} free of {}. ", self.device, Mib(free as u64), Mib(total as u64))?;
        }
        write!(
            f,
            "This allocator holds {} of device memory. Streams the program no longer uses give their ranges back \
             with forget_stream; empty_cache releases ranges that hold nothing. ",
            Mib(s.reserved_bytes)
        )?;
        if !self.tried.is_empty() {
            write!(f, "Tried: {}. ", self.tried.join(", then "))?;
        }
        write!(f, "Last failure: {}.", self.cause)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mib_has_two_decimals() {
        assert_eq!(Mib(0).to_string(), "0.00 MiB");
        assert_eq!(Mib(1000).to_string(), "0.00 MiB");
        assert_eq!(Mib(40 << 20).to_string(), "40.00 MiB");
        assert_eq!(Mib((3 << 20) / 2).to_string(), "1.50 MiB");
    }

    #[test]
    fn names_what_is_held_where_and_who_else_holds_memory() {
        let stats = Stats {
            allocated_bytes: 30 << 20,
            pending_free_bytes: 2 << 20,
            segment_bytes: 36 << 20,
            cached_handle_bytes: 4 << 20,
            reserved_bytes: 40 << 20,
            largest_free_block: 4 << 20,
            ..Stats::default()
        };
        let report = OomReport {
            device: 0,
            stream: Stream(0x10),
            size: 40 << 20,
            rounded: 40 << 20,
            device_memory: Ok((8 << 20, 64 << 20)),
            stats,
            largest_seen: 4 << 20,
            largest_own_now: 4 << 20,
            largest_elsewhere: None,
            tried: &["releasing cached memory", "freeing cached physical handles"],
            cause: "aclrtMallocPhysical failed with ACL_ERROR_RT_MEMORY_ALLOCATION (207001)".into(),
        };
        let m = report.to_string();
        for part in [
            "cannot allocate 40.00 MiB (41943040 bytes, rounded to 41943040) on device 0 for stream 0x10.",
            "Device 0 reports 8.00 MiB free of 64.00 MiB.",
            "This allocator holds 40.00 MiB: 30.00 MiB allocated, 4.00 MiB cached in free blocks, \
             4.00 MiB cached as unmapped physical handles, 2.00 MiB freed but waiting for other streams' work",
            "The device has 16.00 MiB in use that this allocator does not hold",
            "Tried: releasing cached memory, then freeing cached physical handles.",
            "Last failure: aclrtMallocPhysical failed with ACL_ERROR_RT_MEMORY_ALLOCATION (207001).",
        ] {
            assert!(m.contains(part), "missing {part:?} in: {m}");
        }
        assert!(m.contains("The largest free block this request could use was 4.00 MiB at its last attempt."), "{m}");
        assert!(!m.contains(" now:") && !m.contains("is in "), "the figure did not change: {m}");
        let alone = OomReport { device_memory: Ok((24 << 20, 64 << 20)), tried: &[], ..report };
        let m = alone.to_string();
        assert!(!m.contains("does not hold"), "all used memory is this allocator's: {m}");
        assert!(m.contains("Nothing could be released."), "{m}");
    }

    #[test]
    fn the_snapshot_sentence_names_the_file_or_why_it_is_missing() {
        let path = std::path::Path::new("/tmp/oom.pickle");
        let mut m = String::from("cannot allocate 1.00 MiB. Last failure: aclrtMalloc failed.");
        add_snapshot_sentence(&mut m, path, Ok(()));
        assert_eq!(
            m,
            "cannot allocate 1.00 MiB. Last failure: aclrtMalloc failed. A memory snapshot (oom_snapshot) was \
             written to /tmp/oom.pickle."
        );
        let mut m = String::from("cannot allocate 4096 bytes: no range fits");
        add_snapshot_sentence(&mut m, path, Err("Permission denied (os error 13)".into()));
        assert_eq!(
            m,
            "cannot allocate 4096 bytes: no range fits. The memory snapshot (oom_snapshot) could not be written to \
             /tmp/oom.pickle: Permission denied (os error 13)."
        );
    }

    /// The concurrent case: by the time the report is gathered, another
    /// thread freed a block larger than the request in the request's own
    /// pool. The message keeps the figure the failing request saw and says
    /// what changed since.
    #[test]
    fn a_block_freed_after_the_failure_does_not_contradict_it() {
        let stats = Stats { reserved_bytes: 1 << 30, largest_free_block: 654 << 20, ..Stats::default() };
        let report = OomReport {
            device: 0,
            stream: Stream(0x10),
            size: 300 << 20,
            rounded: 300 << 20,
            device_memory: Ok((0, 1 << 30)),
            stats,
            largest_seen: 12 << 20,
            largest_own_now: 654 << 20,
            largest_elsewhere: Some(Elsewhere {
                bytes: 2 << 20,
                stream: Stream(0x20),
                other_kind_of_own: None,
                other_pool: None,
            }),
            tried: &["releasing cached memory"],
            cause: "aclrtMalloc failed".into(),
        };
        let m = report.to_string();
        assert!(m.contains("cannot allocate 300.00 MiB"), "{m}");
        assert!(m.contains("The largest free block this request could use was 12.00 MiB at its last attempt."), "{m}");
        assert!(m.contains("Its own pool's largest free block is 654.00 MiB now: freed after that attempt"), "{m}");
        // A smaller block elsewhere is not worth naming.
        assert!(!m.contains("stream 0x20") && !m.contains("is in "), "{m}");
    }

    /// Each place a larger free block can be that the request cannot use is
    /// named for what it is, and no other cause is offered.
    #[test]
    fn a_larger_block_the_request_cannot_use_is_named_where_it_is() {
        use crate::core::alloc::policy::PoolKind;
        let at = |other_kind_of_own, other_pool| {
            OomReport {
                device: 0,
                stream: Stream(0x10),
                size: 300 << 20,
                rounded: 300 << 20,
                device_memory: Ok((0, 1 << 30)),
                stats: Stats { reserved_bytes: 1 << 30, largest_free_block: 18 << 20, ..Stats::default() },
                largest_seen: 0,
                largest_own_now: 0,
                largest_elsewhere: Some(Elsewhere {
                    bytes: 18 << 20,
                    stream: Stream(0x20),
                    other_kind_of_own,
                    other_pool,
                }),
                tried: &[],
                cause: "aclrtMalloc failed".into(),
            }
            .to_string()
        };
        for (m, says) in [
            (
                at(Some(PoolKind::Small), None),
                "is in this stream's small pool, which serves only requests of 1.00 MiB or less.",
            ),
            (
                at(Some(PoolKind::Large), None),
                "is in this stream's large pool, which serves only requests over 1.00 MiB.",
            ),
            (at(None, None), "is in the pool of stream 0x20: a stream reuses only its own free blocks."),
            (at(None, Some(3)), "is in private pool 3 (stream 0x20), which this request's pool does not use."),
            (at(None, Some(0)), "is in the default pool (stream 0x20), which this request's pool does not use."),
        ] {
            assert!(m.contains(&format!("The largest free block of this allocator, 18.00 MiB, {says}")), "{m}");
            assert!(!m.contains("another thread") && !m.contains("retry"), "{m}");
        }
    }
}
