//! Note [sizing a fresh handle]
//!
//! A fresh physical handle is mapped whole and never split, so its size
//! trades runtime calls (fewer, larger handles) against memory held ahead
//! of use and pinned by one live block. Two things decide it:
//!
//! - What the device reports free (`aclrtGetMemInfo`, which counts every
//!   user of the device: this allocator, other allocators of the process,
//!   other processes). A handle is at most a `share`-th of it, so a device
//!   that fills, whoever fills it, gets handles small enough to move, and a
//!   card shared with a trainer or a second server is not taken from them
//!   in large steps. The query is made only when a fresh handle is about to
//!   be created (the request already pays a physical allocation and a map),
//!   never on a cache hit or when a cached handle serves the growth; and
//!   while the answer is far from mattering (free memory at least twice
//!   what would make the share bind) one answer, less what this allocator
//!   reserved since, sizes up to `REFRESH_EVERY` fresh handles
//!   (`FreeMemory`). Near where it binds, and after a refused handle, every
//!   fresh handle asks.
//! - How much this allocator has used: a handle is `1/growth` of the peak
//!   of allocated bytes between `start` and `near_cap`, and from `far_from`
//!   allocated `1/far_growth` of it, bounded by `1/far_share` of free
//!   memory instead of `1/share`: at the scale of 7B-class models the
//!   handle is a fixed fraction of what is live and of what is left, so
//!   calls grow with the logarithm of the allocated peak. Growth is
//!   geometric in what the allocator itself uses, not in the card's size: a user of a few hundred MiB gets 32 to 48 MiB
//!   handles on a 64 GiB card as on an 8 GiB one, and one of tens of GiB
//!   few calls. Growth follows allocated bytes, not reserved ones: reserved
//!   bytes count the memory mapped ahead, so mapping ahead would feed the
//!   next handle's size. Below `start` handles do not shrink with the
//!   allocator: a program whose first requests are large would pay for
//!   small first handles in calls.
//!
//! Under a memory fraction, what is left of the limit bounds "free" as well.

use std::sync::Mutex;

/// Fresh handles one answer of `aclrtGetMemInfo` may size while the device
/// is roomy.
pub const REFRESH_EVERY: u32 = 8;

/// Note [mapping ahead while growth is frequent]
///
/// Mapping a fresh handle ahead of the request saves the calls of the next
/// growths and costs the memory it maps past the request until blocks use
/// it: on a roomy device up to one handle (48 MiB on the small traces) per
/// range at the peak. While a stream grows often (a warm-up, a short
/// program) the saved calls are worth it: each fresh handle is a physical
/// allocation and a map, 40 us on a card. Once the stream has served
/// `AHEAD_WHILE_REQUESTS_PER_HANDLE` requests or more per fresh handle it
/// made (both pools of the stream counted), another growth's calls are
/// spread over so many operations (at most 40 ns each at 20 us a call)
/// that memory matters more: a fresh handle then maps only what the request
/// lacks (up to the usual size). The bound is on calls, not on memory: a
/// bound on what is mapped ahead costs calls where the holes between live
/// blocks, not the handles, hold the memory, and a bound on calls holds its
/// effect over a wide range of its value (BENCHMARKS.md, "Models of
/// placement and growth").
/// The counts are the stream's whole life, so a stream that served many
/// requests and then starts a new growth phase would map only what each
/// request lacks until the phase's handles caught up with its requests
/// (after 100,000 hits, 64 growths of 3 MiB would take 64 handles where a
/// new stream takes 5). So a fresh handle also maps ahead when the stream is in
/// a burst: it is at least the `BURST_HANDLES`-th (5th) fresh handle of the
/// stream (both pools) within its last `BURST_REQUESTS` requests. The
/// window is five times the lifetime bound: a burst is the same rate, one
/// fresh handle per 1000 requests or more, measured over the last five
/// handles instead of the whole life. That phase then takes 9 handles: its
/// first four map what each request lacks (8 calls more than a new stream,
/// once per phase however long it is), the rest map ahead, and what they
/// hold ahead is at most one handle, as on a new stream. Five, not fewer:
/// a short late phase (a generation's decoding, a few growths some way
/// apart) should map its own pages, since a handle mapped ahead for it is
/// one the phase never uses; a count below five, or a rule of the recent
/// rate alone (map ahead while the previous fresh handle came fewer than
/// 1000 requests ago), lets such a phase map ahead (BENCHMARKS.md, "Models
/// of placement and growth"). Each pool keeps the stream's request count at
/// its last four fresh handles (`RecentHandles`), written only when it
/// makes one and read only when a fresh handle is about to be made: nothing
/// on a cache hit. While the stream's other pool is locked by another
/// thread, the growing pool decides by the lifetime rule alone (its own
/// request count would make the other pool's handles look recent). A
/// stream taking over a retired entry starts with no fresh handles, as
/// with no requests (`counts_taken`).
pub const AHEAD_WHILE_REQUESTS_PER_HANDLE: u64 = 1000;

/// Whether a fresh handle, made now, may map ahead: its stream has made
/// `fresh` fresh handles so far and served `requests` requests (Note
/// [mapping ahead while growth is frequent]).
pub fn growth_is_frequent(requests: u64, fresh: u64) -> bool {
    fresh.saturating_add(1).saturating_mul(AHEAD_WHILE_REQUESTS_PER_HANDLE) > requests
}

/// Fresh handles, this one included, that make a burst within
/// `BURST_REQUESTS` requests of the stream (Note [mapping ahead while
/// growth is frequent]).
pub const BURST_HANDLES: usize = 5;

/// The window of a burst: `BURST_HANDLES` handles within it are the
/// lifetime bound's rate, one fresh handle per
/// `AHEAD_WHILE_REQUESTS_PER_HANDLE` requests.
pub const BURST_REQUESTS: u64 = BURST_HANDLES as u64 * AHEAD_WHILE_REQUESTS_PER_HANDLE;

/// The stream's request count at each of a shard's last `BURST_HANDLES - 1`
/// fresh handles, oldest first (`None`: not made yet). Written only when a
/// fresh handle is made.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RecentHandles {
    at: [Option<u64>; BURST_HANDLES - 1],
}

impl RecentHandles {
    /// A fresh handle was made when the stream had served `requests`.
    pub fn push(&mut self, requests: u64) {
        self.at.rotate_left(1);
        self.at[BURST_HANDLES - 2] = Some(requests);
    }

    /// The request counts kept.
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.at.iter().flatten().copied()
    }
}

/// Whether a fresh handle, made when the stream has served `requests`,
/// completes a burst: the stream's fresh handles at the request counts
/// `recent` (each pool's last `BURST_HANDLES - 1`) include at least
/// `BURST_HANDLES - 1` made within the last `BURST_REQUESTS` requests. A
/// count above `requests` (from before counts were taken out) is not
/// recent.
pub fn in_burst(requests: u64, recent: impl IntoIterator<Item = u64>) -> bool {
    let within = recent.into_iter().filter(|&at| requests.checked_sub(at).is_some_and(|d| d < BURST_REQUESTS)).count();
    within + 1 >= BURST_HANDLES
}

/// The device's free memory as last reported (Note [sizing a fresh handle]).
#[derive(Debug, Default)]
pub(crate) struct FreeMemory {
    seen: Mutex<Option<Seen>>,
}

#[derive(Debug, Clone, Copy)]
struct Seen {
    /// Free bytes reported, and this allocator's reserved bytes then.
    free: usize,
    reserved: usize,
    /// Fresh handles sized from this answer.
    uses: u32,
}

impl FreeMemory {
    /// Free bytes to size a fresh handle with, this allocator holding
    /// `reserved` bytes: the last answer less what was reserved since,
    /// while that is at least twice `binds_below` (where the rule's share
    /// starts to shrink handles) and fewer than `REFRESH_EVERY` handles used
    /// it; else what `ask` reports now. `ask` runs without the lock held.
    pub fn get(&self, reserved: usize, binds_below: usize, ask: impl FnOnce() -> usize) -> usize {
        {
            let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(s) = seen.as_mut() {
                let left = s.free.saturating_sub(reserved.saturating_sub(s.reserved));
                if s.uses < REFRESH_EVERY && left >= binds_below.saturating_mul(2) {
                    s.uses += 1;
                    return left;
                }
            }
        }
        let free = ask();
        *self.seen.lock().unwrap_or_else(|e| e.into_inner()) = Some(Seen { free, reserved, uses: 1 });
        free
    }

    /// The next fresh handle asks again (the last answer was too kind).
    pub fn forget(&self) {
        *self.seen.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

/// What a growth knows when it sizes a fresh handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrowthView {
    /// Free bytes the device reports (`aclrtGetMemInfo`), within what is
    /// left of a memory fraction's limit.
    pub free: usize,
    /// The peak of bytes this allocator has had allocated, all shards.
    pub allocated_peak: usize,
}

/// How big a fresh physical handle is (Note [sizing a fresh handle]):
/// `1/growth` of the allocator's peak of allocated bytes between `start`
/// and `near_cap`, within `1/share` of the device's free memory; from
/// `far_from` allocated, `1/far_growth` of it if that is more, within
/// `1/far_share` of free memory; never above `ceiling` nor below `floor`.
/// With `ahead`, a fresh handle maps that much even past the request, into
/// the free block's unmapped pages; without it, never more than the pages
/// a placement lacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PieceRule {
    pub floor: usize,
    /// 0: always `floor` (and free memory is never asked for).
    pub share: usize,
    pub start: usize,
    /// 0: no term in allocated bytes below `near_cap`.
    pub growth: usize,
    pub near_cap: usize,
    /// Allocated bytes from which `far_growth` and `far_share` apply.
    pub far_from: usize,
    /// 0: no term in allocated bytes past `far_from`.
    pub far_growth: usize,
    /// 0: `share` past `far_from` too.
    pub far_share: usize,
    pub ceiling: usize,
    pub ahead: bool,
}

impl PieceRule {
    /// On a roomy device a fresh handle is half the peak of allocated bytes,
    /// from 32 MiB to 48 MiB, mapped ahead of demand; as the device fills,
    /// whoever fills it, handles shrink to a 128th of what it reports free,
    /// down to 4 MiB, so a nearly full device still gets pieces small
    /// enough to move (a larger share pins pages a nearly full device needs).
    /// Growing with allocated bytes, not with what is reserved, keeps
    /// memory mapped ahead from feeding the next handle's size; the 48 MiB
    /// step bounds what one handle holds ahead on the small and mid-sized
    /// traces. Past 3.5 GiB allocated (above the mid-sized traces' 3.1 GiB:
    /// a model whose weights alone are GBs) a handle is a 32nd of the
    /// allocated peak and at most a 32nd of what is free, up to 1 GiB: what
    /// one handle may hold ahead is then a fixed fraction of what is live
    /// (3%) and of what is left, and the count of handles grows with the
    /// logarithm of the allocated peak (a 128th of free memory there would
    /// keep handles small on a nearly full card and make the count grow
    /// linearly). The 1 GiB cap bounds what one live block pins against
    /// `empty_cache`. BENCHMARKS.md, "Models of placement and growth", says
    /// how the constants were chosen. `map_ahead:false` maps
    /// only what requests lack. With `reserved_headroom`, always 4 MiB and
    /// nothing ahead: moving pages to stay within the headroom is that
    /// mode's point, and large pieces rarely fit the place they would move
    /// to.
    pub fn for_config(config: &crate::config::Config) -> Self {
        if config.reserved_headroom.is_some() {
            return PieceRule::fixed(4 << 20);
        }
        let ahead = config.map_ahead.unwrap_or(true);
        PieceRule {
            floor: 4 << 20,
            share: 128,
            start: 32 << 20,
            growth: 2,
            near_cap: 48 << 20,
            far_from: 7 << 29,
            far_growth: 32,
            far_share: 32,
            ceiling: 1 << 30,
            ahead,
        }
    }

    /// Every fresh handle `bytes` long, none mapped ahead.
    pub fn fixed(bytes: usize) -> Self {
        PieceRule {
            floor: bytes,
            share: 0,
            start: bytes,
            growth: 0,
            near_cap: bytes,
            far_from: usize::MAX,
            far_growth: 0,
            far_share: 0,
            ceiling: bytes,
            ahead: false,
        }
    }

    /// Whether the size depends on free memory (else no query is needed).
    pub fn reads_free_memory(&self) -> bool {
        self.share != 0
    }

    /// Free bytes below which `share` shrinks a handle for `allocated_peak`
    /// (0 when free memory plays no part).
    pub fn binds_below(&self, allocated_peak: usize) -> usize {
        let unbounded = self.fresh_bytes(GrowthView { free: usize::MAX, allocated_peak });
        unbounded.saturating_mul(self.share_at(allocated_peak))
    }

    /// Bytes of a fresh handle (before rounding to pages).
    pub fn fresh_bytes(&self, view: GrowthView) -> usize {
        if self.share == 0 {
            return self.floor;
        }
        let used = view.allocated_peak;
        let near = self.start.max(used.checked_div(self.growth).unwrap_or(0)).min(self.near_cap);
        let far = if used >= self.far_from { used.checked_div(self.far_growth).unwrap_or(0) } else { 0 };
        near.max(far).min(self.ceiling).min(view.free / self.share_at(used)).max(self.floor)
    }

    /// The share of free memory a handle may take with `allocated_peak`.
    fn share_at(&self, allocated_peak: usize) -> usize {
        if allocated_peak >= self.far_from && self.far_share != 0 {
            self.far_share
        } else {
            self.share
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{GrowthView, PieceRule};
    const MIB: usize = 1 << 20;
    const GIB: usize = 1 << 30;

    fn bytes(free: usize, allocated_peak: usize) -> usize {
        PieceRule::for_config(&crate::config::Config::default()).fresh_bytes(GrowthView { free, allocated_peak })
    }

    #[test]
    fn past_3_5_gib_allocated_a_handle_is_a_32nd_of_allocated_and_of_free() {
        let roomy = 512 * GIB;
        // Up to 3.5 GiB the 48 MiB step holds (the mid-sized traces, 3.1 GiB
        // allocated, keep 48 MiB handles).
        assert_eq!(bytes(roomy, 3 * GIB + 100 * MIB), 48 * MIB);
        assert_eq!(bytes(roomy, 3 * GIB + 511 * MIB), 48 * MIB);
        // From 3.5 GiB, a 32nd of the allocated peak.
        assert_eq!(bytes(roomy, 3 * GIB + 512 * MIB), 112 * MIB);
        assert_eq!(bytes(roomy, 4 * GIB), 128 * MIB);
        assert_eq!(bytes(roomy, 10 * GIB), 320 * MIB);
        // 50 GiB allocated: 1.56 GiB, held to the 1 GiB ceiling.
        assert_eq!(bytes(roomy, 50 * GIB), GIB);
        // A 32nd of free memory bounds it (a 128th below 3.5 GiB): 10 GiB
        // allocated on a 64 GiB card, 54 GiB free: the 320 MiB stand...
        assert_eq!(bytes(54 * GIB, 10 * GIB), 320 * MIB);
        // ...50 GiB on it with 14 GiB free: 448 MiB, not the 112 MiB a
        // 128th of free would give; 2 GiB free: 64 MiB.
        assert_eq!(bytes(14 * GIB, 50 * GIB), 448 * MIB);
        assert_eq!(bytes(2 * GIB, 50 * GIB), 64 * MIB);
        // Nearly full: down to the 4 MiB floor.
        assert_eq!(bytes(64 * MIB, 50 * GIB), 4 * MIB);
        // Below 3.5 GiB the 128th still binds: 3 GiB allocated, 2 GiB free.
        assert_eq!(bytes(2 * GIB, 3 * GIB), 16 * MIB);
        // binds_below follows the share that applies.
        let rule = PieceRule::for_config(&crate::config::Config::default());
        assert_eq!(rule.binds_below(10 * GIB), 320 * MIB * 32);
        assert_eq!(rule.binds_below(GIB), 48 * MIB * 128);
    }
}
