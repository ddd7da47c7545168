//! Note [one reservation per stream]
//!
//! A stream's two pools (small and large, one stream entry) share one
//! `aclrtReserveMemAddress`: every runtime call costs tens of microseconds
//! on a card, and a stream that only warms up makes few of them (resnet-like
//! inference: 2 reservations of its 30 calls).
//!
//! - The first of the entry's pools to need a range reserves one region for
//!   both: the large pool's part first, at the alignment its page needs,
//!   then the small pool's, each the size a range of that pool gets on its
//!   own (`range_bytes`), so a stream whose two pools grow uses the address
//!   space it did with two reservations. Its range is its part; the other
//!   pool's first range is the other part, with no call.
//! - Only while address space is plentiful: when the budget's share
//!   (`budget::share`) cannot hold both parts at their usual size, or the
//!   two pass the per-reservation cap (`reserved_headroom` on a 64 GiB
//!   device), or the request does not fit its part, ranges are reserved
//!   one by one as before, and an address-space refusal of the shared
//!   region falls back to one range alone. A stream that only ever uses one
//!   pool holds the other part reserved too (address space only, no
//!   memory); that is why a tight budget reserves ranges one by one.
//! - A part leaves its pool as a range does (`empty_cache`, the OOM ladder,
//!   `forget_stream`, teardown) but goes back to the runtime only with the
//!   other: the region is released, once, when neither part is in a pool.
//!   Until then an emptied part waits for its pool's next range. So a
//!   ladder that empties one pool of a stream whose other pool holds memory
//!   frees no address space there (two reservations would have).
//! - The record (`Joints`, one per device, a few entries) is locked only
//!   when a range is made or given back, never on a malloc or free; a
//!   reserve or release of a shared region runs under it, so the entry's
//!   other pool cannot take its part meanwhile.
//!
//! The driver allows it: a device handle's page type is the huge one for
//! 2 MiB and 1 GiB pages alike, a reservation of 2 MiB or more is a
//! huge-page heap, and the page type and the alignment of address and size
//! are checked per mapping, not per reservation (docs/runtime-behaviour.md,
//! "Virtual memory", one reservation for handles of two page sizes).

use super::{budget, ExpandableRanges, RangePool, SMALL_BUFFER};
use crate::core::backing::GrowError;
use crate::core::directory::ADDRESS_LIMIT;
use crate::core::policy::PoolKind;
use crate::core::shared::Shared;
use crate::runtime::AclCallError;
use crate::sys;
use std::sync::{Mutex, MutexGuard};

/// One region reserved for both pools of a stream entry.
#[derive(Debug)]
struct Joint {
    /// The stream entry (a shard's id halved).
    entry: u32,
    /// What `aclrtReserveMemAddress` returned, and the bytes reserved there
    /// (padding included), charged to the budget once.
    reserved_at: usize,
    reserved_len: usize,
    /// Each pool kind's part: (start, bytes).
    parts: [(usize, usize); 2],
    /// Whether a range of that pool covers its part now.
    taken: [bool; 2],
}

/// The shared regions of one device's stream entries, one at most each.
#[derive(Debug, Default)]
pub(crate) struct Joints(Mutex<Vec<Joint>>);

impl Joints {
    fn lock(&self) -> MutexGuard<'_, Vec<Joint>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Shared regions reserved now (tests).
    #[cfg(test)]
    pub(crate) fn count(&self) -> usize {
        self.lock().len()
    }

    /// A range at `base` of the reservation at `reserved_at` leaves its pool.
    /// None when it is no part of a shared region (a range of its own).
    /// Otherwise its part is free again, and when the other part is free
    /// too the region goes back to the runtime; a refused release leaves
    /// the part taken, its range to go back to its pool, unless `forget`
    /// (teardown: the range is gone either way, and so is the record).
    fn release_part(
        &self,
        sh: &Shared<ExpandableRanges>,
        reserved_at: usize,
        base: usize,
        forget: bool,
    ) -> Option<Result<(), AclCallError>> {
        let mut joints = self.lock();
        let i = joints.iter().position(|j| j.reserved_at == reserved_at)?;
        let kind = joints[i].parts.iter().position(|&(at, _)| at == base)?;
        if joints[i].taken[kind ^ 1] {
            joints[i].taken[kind] = false;
            return Some(Ok(()));
        }
        match sh.rt.on_device(sh.device, || sh.rt.release(reserved_at)) {
            Ok(()) => {
                budget::give(joints.swap_remove(i).reserved_len);
                Some(Ok(()))
            }
            Err(e) => {
                if forget {
                    joints.swap_remove(i);
                }
                Some(Err(e))
            }
        }
    }
}

/// Gives back the reservation of the range at `base` (made at
/// `reserved_at`, `reserved_len` bytes charged), or its part of a shared
/// one (`Joints::release_part`).
pub(super) fn release(
    sh: &Shared<ExpandableRanges>,
    reserved_at: usize,
    reserved_len: usize,
    base: usize,
    forget: bool,
) -> Result<(), AclCallError> {
    match sh.backing.joints.release_part(sh, reserved_at, base, forget) {
        Some(done) => done,
        None => sh.rt.on_device(sh.device, || sh.rt.release(reserved_at)).map(|()| budget::give(reserved_len)),
    }
}

/// Where a new shared region's parts go.
struct Layout {
    /// Bytes of each kind's part.
    parts: [usize; 2],
    /// The alignment of its start (the large pool's page needs).
    align: usize,
}

impl RangePool {
    /// A range for this shard from its stream's shared region: its part if
    /// the region exists, its part is free and holds `need` bytes, else a
    /// new region (Note [one reservation per stream]). Returns (address to
    /// release, start, bytes); None when this range is to be reserved on
    /// its own. Fails, changing nothing, only as reserving a range would.
    pub(super) fn joint_part(&mut self, need: usize) -> Result<Option<(usize, usize, usize)>, GrowError> {
        let sh = self.sh.clone();
        let (entry, kind) = (self.id / 2, self.kind as usize);
        let mut joints = sh.backing.joints.lock();
        if let Some(j) = joints.iter_mut().find(|j| j.entry == entry) {
            let (at, len) = j.parts[kind];
            if j.taken[kind] || len < need {
                return Ok(None);
            }
            j.taken[kind] = true;
            return Ok(Some((j.reserved_at, at, len)));
        }
        let Some(layout) = self.joint_layout(need) else { return Ok(None) };
        let [small, large] = layout.parts;
        let (reserved_at, base, reserved_len) = match self.reserve_aligned(small + large, layout.align) {
            Ok(r) => r,
            // One range alone may still fit.
            Err(GrowError::AddressSpace { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        if base + small + large > ADDRESS_LIMIT {
            // A range alone is refused the same way, with its own message.
            let _ = sh.rt.on_device(sh.device, || sh.rt.release(reserved_at));
            budget::give(reserved_len);
            return Ok(None);
        }
        let mut taken = [false; 2];
        taken[kind] = true;
        let parts = [(base + large, small), (base, large)];
        joints.push(Joint { entry, reserved_at, reserved_len, parts, taken });
        Ok(Some((reserved_at, parts[kind].0, parts[kind].1)))
    }

    /// The parts of a shared region for this shard's stream, if address
    /// space is plentiful: both parts at their usual size within the
    /// budget's share and, with the alignment padding, the per-reservation
    /// cap, and `need` bytes within this shard's part.
    fn joint_layout(&self, need: usize) -> Option<Layout> {
        let large = self.sh.backing.large_page;
        let align = if large.attr == sys::ACL_HBM_MEM_HUGE1G { large.size } else { SMALL_BUFFER };
        let small_len = self.usual_bytes(PoolKind::Small).div_ceil(SMALL_BUFFER).max(1) * SMALL_BUFFER;
        let large_len = self.usual_bytes(PoolKind::Large).div_ceil(large.size).max(1) * large.size;
        let parts = [small_len, large_len];
        let len = small_len + large_len;
        let fits = need <= parts[self.kind as usize]
            && len <= budget::share()
            && len.checked_add(align).is_some_and(|n| n <= budget::MAX_RESERVATION);
        fits.then_some(Layout { parts, align })
    }
}
