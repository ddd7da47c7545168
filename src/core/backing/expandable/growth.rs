//! How large a fresh physical handle is (mapped whole, never split): from the device's free memory and this
//! allocator's peak of allocated bytes, never its reserved bytes (docs/design.md, Note [sizing a fresh handle]).

use crate::core::backing::lock;
use std::sync::Mutex;

/// Fresh handles one answer of `aclrtGetMemInfo` may size while the device is roomy.
pub const REFRESH_EVERY: u32 = 8;

/// Requests per fresh handle over the stream's life (both pools) below which a fresh handle maps ahead; a burst
/// maps ahead too (docs/design.md, Note [mapping ahead while growth is frequent]).
pub const AHEAD_WHILE_REQUESTS_PER_HANDLE: u64 = 1000;

/// Whether a fresh handle made now may map ahead, the stream having made `fresh` of them and served `requests`.
pub fn growth_is_frequent(requests: u64, fresh: u64) -> bool {
    fresh.saturating_add(1).saturating_mul(AHEAD_WHILE_REQUESTS_PER_HANDLE) > requests
}

/// Fresh handles, this one included, that make a burst within `BURST_REQUESTS` requests of the stream.
pub const BURST_HANDLES: usize = 5;

/// The window of a burst: `BURST_HANDLES` handles within it are the lifetime bound's rate.
pub const BURST_REQUESTS: u64 = BURST_HANDLES as u64 * AHEAD_WHILE_REQUESTS_PER_HANDLE;

/// The stream's request count at a shard's last `BURST_HANDLES - 1` fresh handles, oldest first (`None`: not yet).
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

/// Whether a fresh handle made when the stream has served `requests` completes a burst: at least `BURST_HANDLES - 1`
/// of the stream's fresh handles at `recent` (each pool's last few) came within the last `BURST_REQUESTS` requests.
/// A count above `requests` (from before counts were taken out) is not recent.
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
    /// Free bytes to size a fresh handle with, this allocator holding `reserved`: the last answer less what was
    /// reserved since, while that is at least twice `binds_below` and fewer than `REFRESH_EVERY` handles used it;
    /// else what `ask` reports now (run without the lock held).
    pub fn get(&self, reserved: usize, binds_below: usize, ask: impl FnOnce() -> usize) -> usize {
        {
            let mut seen = lock(&self.seen);
            if let Some(s) = seen.as_mut() {
                let left = s.free.saturating_sub(reserved.saturating_sub(s.reserved));
                if s.uses < REFRESH_EVERY && left >= binds_below.saturating_mul(2) {
                    s.uses += 1;
                    return left;
                }
            }
        }
        let free = ask();
        *lock(&self.seen) = Some(Seen { free, reserved, uses: 1 });
        free
    }

    /// The next fresh handle asks again (the last answer was too kind).
    pub fn forget(&self) {
        *lock(&self.seen) = None;
    }
}

/// What a growth knows when it sizes a fresh handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrowthView {
    /// Free bytes the device reports (`aclrtGetMemInfo`), within what is left of a memory fraction's limit.
    pub free: usize,
    /// The peak of bytes this allocator has had allocated, all shards.
    pub allocated_peak: usize,
}

/// How big a fresh physical handle is (Note [sizing a fresh handle]): `1/growth` of the allocator's peak of
/// allocated bytes between `start` and `near_cap`, within `1/share` of the device's free memory; from `far_from`
/// allocated, `1/far_growth` of it if more, within `1/far_share` of free memory; never above `ceiling` nor below
/// `floor`. With `ahead`, a fresh handle maps that much even past the request; without, only what a placement lacks.
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
    /// The default rule; BENCHMARKS.md, "Models of placement and growth", says how the constants were chosen. Past
    /// `far_from` a handle is a fixed fraction of what is live and of what is left, so the count of handles grows
    /// with the logarithm of the allocated peak; the 1 GiB ceiling bounds what one live block pins. With
    /// `reserved_headroom`, 4 MiB and nothing ahead: moving pages is that mode's point, and large pieces rarely fit.
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

    /// Free bytes below which `share` shrinks a handle for `allocated_peak` (0 when free memory plays no part).
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
