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
    /// Another process's memory (`ipc`): mapped from its memory file, and
    /// charged to its device, not this one's.
    imported: Option<crate::ipc::Imported>,
}

impl Phys {
    /// The memory file and offset it maps from.
    fn file(&self, pools: &HashMap<i32, Pool>) -> (std::os::fd::RawFd, u64) {
        match &self.imported {
            Some(i) => (i.fd(), i.range().0),
            None => (pools[&self.device].raw_fd(), self.offset),
        }
    }
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
    /// Whether the first handle mapped here was imported: a range binds
    /// handles of one origin only, allocated or imported (docs 11-04).
    mapped_imported: Option<bool>,
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

    /// Drops a handle for good: its range, its charge, its counters; an
    /// imported handle drops its hold on the exporter's memory, and an
    /// exported one that another process holds is given back once no
    /// process holds it (`ipc::reap`).
    fn release_handle(&mut self, id: u64) {
        let Some(p) = self.handles.remove(&id) else {
            return;
        };
        if p.imported.is_some() {
            return;
        }
        let (device, offset, size, pool) = (p.device, p.offset, p.size, p.pool);
        let later = || -> crate::ipc::Release { Box::new(move || give_back(&mut vmm(), device, offset, size, pool)) };
        if crate::ipc::freed(device, offset, later) {
            give_back(self, device, offset, size, pool);
        }
    }
}

/// Gives a released handle's memory back: its range of the file, its
/// charge, its counters.
fn give_back(v: &mut Vmm, device: i32, offset: u64, size: u64, pool: crate::device::PagePool) {
    if let Some(file) = v.pools.get_mut(&device) {
        file.release(offset, size);
    }
    if let Ok(dev) = crate::device::get(device) {
        dev.uncharge(size, pool);
    }
    let counters = crate::usage::of(device);
    crate::usage::sub(&counters.physical_bytes, size);
    crate::usage::sub(&counters.physical_count, 1);
}

/// Exports physical handle `h` through `export` (device, memory file,
/// offset, bytes, page size): 107017 for an unknown handle, 507899 for an
/// imported one (a process does not export what it imported).
pub fn export_handle<T>(
    h: *mut std::ffi::c_void,
    export: impl FnOnce(i32, std::os::fd::RawFd, u64, u64, u64) -> crate::error::AclResult<T>,
) -> crate::error::AclResult<T> {
    use crate::error::{ACL_ERROR_RT_DRV_INTERNAL_ERROR, ACL_ERROR_RT_INVALID_HANDLE};
    let v = vmm();
    let id = crate::ffi::handle_id(crate::ffi::Kind::Physical, h).ok_or(ACL_ERROR_RT_INVALID_HANDLE)?;
    let p = v.handles.get(&id).ok_or(ACL_ERROR_RT_INVALID_HANDLE)?;
    if p.imported.is_some() || p.freed {
        return Err(ACL_ERROR_RT_DRV_INTERNAL_ERROR);
    }
    export(p.device, v.pools[&p.device].raw_fd(), p.offset, p.size, p.granularity)
}

/// Makes a physical handle of `device` for memory imported from another
/// process.
pub fn import_handle(device: i32, imported: crate::ipc::Imported) -> *mut std::ffi::c_void {
    let (_, size, granularity) = imported.range();
    let mut v = vmm();
    let id = v.next_handle;
    v.next_handle += 1;
    let phys = Phys {
        device,
        pool: crate::device::PagePool::Huge,
        offset: 0,
        size,
        granularity,
        mappings: 0,
        freed: false,
        imported: Some(imported),
    };
    v.handles.insert(id, phys);
    crate::ffi::handle(crate::ffi::Kind::Physical, id)
}

/// Takes `len` bytes (a multiple of the host page) of `device`'s memory
/// file, making the file if needed: (its descriptor, the offset). Device
/// memory of every kind lives in that one file, so that another process
/// can map what this one exports (`ipc`).
pub fn take_file_range(device: i32, len: u64) -> Option<(std::os::fd::RawFd, u64)> {
    let mut v = vmm();
    let pool = match v.pools.entry(device) {
        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
        std::collections::hash_map::Entry::Vacant(e) => e.insert(Pool::new(device)?),
    };
    Some((pool.raw_fd(), pool.alloc(len)?))
}

/// `device`'s memory file, if it has one yet.
pub fn file_of(device: i32) -> Option<std::os::fd::RawFd> {
    vmm().pools.get(&device).map(Pool::raw_fd)
}

/// Gives back a range `take_file_range` took, dropping its pages.
pub fn return_file_range(device: i32, offset: u64, len: u64) {
    if let Some(pool) = vmm().pools.get_mut(&device) {
        pool.release(offset, len);
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
