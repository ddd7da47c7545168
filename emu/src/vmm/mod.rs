//! The VMM family: reserved address ranges, physical handles and mappings
//! between them, on host memory.
//!
//! - A reservation is a PROT_NONE, MAP_NORESERVE anonymous range, 2 MiB
//!   aligned (1 GiB-aligned and a 1 GiB multiple above 512 MiB), taking the
//!   process's address window; it needs no current device, and counts in
//!   the usage of the device current at reserve time, if any.
//! - A physical handle is a range of its device's memfd (`pool`).
//! - A mapping is a MAP_SHARED|MAP_FIXED view of a handle's range placed over
//!   a reservation, so two mappings of one handle see the same bytes.
//!   Unmapping puts PROT_NONE anonymous memory back, keeping the reservation.
//!
//! Freeing a still-mapped handle is accepted and postponed (as documented):
//! the handle keeps counting as live (`physical_count`, capacity) until its
//! last mapping goes; freeing it again meanwhile gives 107000. Error codes
//! follow the layer a check lives in (RB "How errors reach the caller"):
//! ACL-layer argument checks give 100000, the driver library's argument
//! checks 107000 (reserve alignment, `prop.reserve`, map offset and flags,
//! releasing a reservation that still has mappings), and the kernel's
//! checks 507899 (a physical size off the 2 MiB granularity; map or unmap
//! at an unaligned, out-of-range, overlapping or unknown address, of the
//! wrong size, or of another device's memory); unknown handles give 107017.
//! The first map fixes a reservation's device for good.

mod address;
mod map;
mod physical;
mod pool;

pub use address::{aclemu_misalign_reservations, aclrtReleaseMemAddress, aclrtReserveMemAddress};
pub use map::{aclrtMapMem, aclrtUnmapMem};
pub use physical::{
    aclrtFreePhysical, aclrtMallocPhysical, aclrtMemGetAllocationGranularity, aclrtMemLocation, aclrtPhysicalMemProp,
};

use crate::ffi::lock;
use pool::Pool;
use std::collections::{BTreeMap, HashMap};
use std::sync::{LazyLock, Mutex, MutexGuard};

/// The VMM granularity for huge and normal HBM; HUGE1G uses 1 GiB.
pub const GRANULARITY: u64 = 2 << 20;
pub const GRANULARITY_1G: u64 = 1 << 30;

struct Phys {
    device: i32,
    /// The page pool charged for it.
    pool: crate::device::PagePool,
    offset: u64,
    size: u64,
    /// The memAttr's granularity: the handle maps only at addresses aligned
    /// to it.
    granularity: u64,
    mappings: u32,
    /// aclrtFreePhysical was called while mapped.
    freed: bool,
}

struct Mapping {
    len: usize,
    handle: u64,
}

struct Reservation {
    len: usize,
    /// The device current at reserve time, whose usage counts the range
    /// (None: reserved with no context current).
    owner: Option<i32>,
    /// The device of the first handle mapped here; never cleared.
    mapped_device: Option<i32>,
    mappings: BTreeMap<usize, Mapping>,
}

struct Vmm {
    pools: HashMap<i32, Pool>,
    handles: HashMap<u64, Phys>,
    reservations: BTreeMap<usize, Reservation>,
    next_handle: u64,
}

static VMM: LazyLock<Mutex<Vmm>> = LazyLock::new(|| {
    Mutex::new(Vmm { pools: HashMap::new(), handles: HashMap::new(), reservations: BTreeMap::new(), next_handle: 1 })
});

fn vmm() -> MutexGuard<'static, Vmm> {
    lock(&VMM)
}

impl Vmm {
    /// The reservation holding `[addr, addr + len)`, by start address.
    fn reservation_of(&self, addr: usize, len: usize) -> Option<usize> {
        let (&start, r) = self.reservations.range(..=addr).next_back()?;
        let end = addr.checked_add(len)?;
        (end <= start + r.len).then_some(start)
    }

    /// Drops a handle for good: its range, its charge, its counters.
    fn release_handle(&mut self, id: u64) {
        let Some(p) = self.handles.remove(&id) else {
            return;
        };
        if let Some(pool) = self.pools.get_mut(&p.device) {
            pool.release(p.offset, p.size);
        }
        if let Ok(dev) = crate::device::get(p.device) {
            dev.uncharge(p.size, p.pool);
        }
        let counters = crate::usage::of(p.device);
        crate::usage::sub(&counters.physical_bytes, p.size);
        crate::usage::sub(&counters.physical_count, 1);
    }
}

/// True if `addr` lies inside a live mapping (device memory for 2D copies).
pub fn is_mapped(addr: usize) -> bool {
    mapped_covers((addr, addr + 1))
}

/// True if every byte of `[start, end)` lies in live mappings of one
/// reservation (neighbouring mappings may cover it together).
pub fn mapped_covers((start, end): (usize, usize)) -> bool {
    let v = vmm();
    let Some(res) = v.reservation_of(start, end.saturating_sub(start).max(1)) else {
        return false;
    };
    let mut at = start;
    for (&m, mapping) in v.reservations[&res].mappings.range(..end) {
        if m + mapping.len <= at {
            continue;
        }
        if m > at {
            return false;
        }
        at = m + mapping.len;
        if at >= end {
            return true;
        }
    }
    false
}
