//! Importing blocks other processes exported: process-wide, with no allocator of this process needed.
//! The runtime wants one import of a shareable handle per process, and a key's close ends its oldest
//! import, so imports are counted: a key is imported once and its mapping shared; a physical handle is
//! imported once and mapped into each range that needs it. A record is held once, through one descriptor
//! of each exporter's table.

use super::table::{Memory, Name, Peer, Record, HANDLE_SIZE};
use crate::error::{Error, Result};
use crate::runtime::{DeviceHold, PhysicalHandle, Runtime, KEY_LEN};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// An exporter's table, as (pid, descriptor number there, the table's random number: a later process with
/// the same pid is another exporter).
type PeerId = (i32, i32, u64);
/// An exporting process, as (pid, its table's random number).
type Exporter = (i32, u64);

/// One exporter's table and this process's holds on its records.
struct PeerHolds {
    peer: Peer,
    /// How many imports of this process hold each slot.
    holds: HashMap<u32, u32>,
}

/// What a pointer handed out by `import` maps.
enum Mapped {
    /// A block of an allocation imported by key (its mapping shared).
    Key { key: [u8; KEY_LEN] },
    /// A range reserved for the block's handles, mapped in order.
    Range { reserved: usize, maps: Vec<(usize, u64)> },
}

struct Import {
    name: Name,
    count: u32,
    mapped: Mapped,
    /// Keeps the device (and so the imported memory) open.
    _device: DeviceHold,
}

#[derive(Default)]
struct Imports {
    peers: HashMap<PeerId, PeerHolds>,
    /// Keys imported: (exporter, key) to (address, imports).
    keys: HashMap<(Exporter, [u8; KEY_LEN]), (usize, u32)>,
    /// Physical handles imported: (exporter, shareable) to (handle, maps).
    handles: HashMap<(Exporter, u64), (PhysicalHandle, u32)>,
    /// Pointers handed out.
    at: HashMap<usize, Import>,
}

static IMPORTS: Mutex<Option<Imports>> = Mutex::new(None);

fn invalid(msg: String) -> Error {
    Error::InvalidArgument(msg)
}

/// Maps the block `handle` names on `device`; returns its first byte and usable size here.
pub(crate) fn import(handle: &[u8; HANDLE_SIZE], device: i32) -> Result<(usize, usize)> {
    let name = Name::parse(handle).ok_or_else(|| {
        invalid(
            "the handle's bytes are not an npualloc IPC handle (copy all 128 bytes of npualloc_ipc_export's)".into(),
        )
    })?;
    if name.pid == std::process::id() as i32 {
        return Err(invalid(
            "the handle was exported by this process: use the block's pointer itself, not an import".into(),
        ));
    }
    let rt = Runtime::load(None)?;
    let hold = rt.hold_device(device).map_err(|e| Error::runtime(e, "opening the device to import onto"))?;
    let mut guard = IMPORTS.lock().unwrap_or_else(|e| e.into_inner());
    let im = guard.get_or_insert_with(Imports::default);
    let record = im.take_hold(&name)?;
    let (ptr, mapped) = im.map(&rt, device, &name, &record).inspect_err(|_| im.release_hold(&name))?;
    match im.at.get_mut(&ptr) {
        // A second import of a key's block: the same address, counted.
        Some(existing) => {
            existing.count += 1;
            im.release_hold(&name);
        }
        None => {
            im.at.insert(ptr, Import { name, count: 1, mapped, _device: hold });
        }
    }
    Ok((ptr, record.size))
}

/// Ends one import of the block at `ptr`.
pub(crate) fn close(ptr: usize) -> Result<()> {
    let rt = Runtime::load(None)?;
    let mut guard = IMPORTS.lock().unwrap_or_else(|e| e.into_inner());
    let im = guard.get_or_insert_with(Imports::default);
    let Some(import) = im.at.get_mut(&ptr) else {
        return Err(Error::UnknownPointer(format!(
            "{ptr:#x} is not a pointer npualloc_ipc_import returned (or it was closed as often as imported)"
        )));
    };
    import.count -= 1;
    if import.count > 0 {
        return Ok(());
    }
    let import = im.at.remove(&ptr).expect("found above");
    let result = im.unmap(&rt, import.name.device, (import.name.pid, import.name.nonce), &import.mapped);
    im.release_hold(&import.name);
    result
}

impl Imports {
    /// Reads `name`'s record and holds it (counted): the record read again under the hold must be the same,
    /// or the exporter retired it meanwhile.
    fn take_hold(&mut self, name: &Name) -> Result<Record> {
        let id = (name.pid, name.fd, name.nonce);
        if let std::collections::hash_map::Entry::Vacant(slot) = self.peers.entry(id) {
            let peer = Peer::open(name).ok_or_else(|| {
                invalid(format!(
                    "the exporting process {} has exited, or this process may not open its descriptors \
                     (/proc/{}/fd: the same user, and no PR_SET_DUMPABLE 0)",
                    name.pid, name.pid
                ))
            })?;
            slot.insert(PeerHolds { peer, holds: HashMap::new() });
        }
        let p = self.peers.get_mut(&id).expect("inserted above");
        let gone = || invalid("the block is no longer exported (it was freed, or its allocator destroyed)".into());
        let Some(first) = p.peer.read(name) else {
            self.drop_peer_if_idle(id);
            return Err(gone());
        };
        let count = p.holds.entry(name.slot).or_insert(0);
        if *count == 0 && !p.peer.hold(name.slot) {
            p.holds.remove(&name.slot);
            self.drop_peer_if_idle(id);
            return Err(Error::Unsupported("taking a hold on the export record failed".into()));
        }
        *count += 1;
        if p.peer.read(name).as_ref() != Some(&first) {
            self.release_hold(name);
            return Err(gone());
        }
        Ok(first)
    }

    fn release_hold(&mut self, name: &Name) {
        let id = (name.pid, name.fd, name.nonce);
        let Some(p) = self.peers.get_mut(&id) else { return };
        if let Some(count) = p.holds.get_mut(&name.slot) {
            *count -= 1;
            if *count == 0 {
                p.holds.remove(&name.slot);
                p.peer.release(name.slot);
            }
        }
        self.drop_peer_if_idle(id);
    }

    fn drop_peer_if_idle(&mut self, id: PeerId) {
        if self.peers.get(&id).is_some_and(|p| p.holds.is_empty()) {
            self.peers.remove(&id);
        }
    }

    /// Maps `record`'s memory on `device`: its block's address here.
    fn map(&mut self, rt: &Arc<Runtime>, device: i32, name: &Name, record: &Record) -> Result<(usize, Mapped)> {
        match &record.memory {
            Memory::Key { key, offset } => {
                // The key's count is of pointers handed out: a block imported again shares its pointer.
                let base = match self.keys.get_mut(&((name.pid, name.nonce), *key)) {
                    Some((base, n)) => {
                        if !self.at.contains_key(&(*base + offset)) {
                            *n += 1;
                        }
                        *base
                    }
                    None => {
                        let base = rt
                            .on_device(device, || rt.import_key(key))
                            .map_err(|e| Error::runtime(e, "importing another process's segment"))?;
                        self.keys.insert(((name.pid, name.nonce), *key), (base, 1));
                        base
                    }
                };
                Ok((base + offset, Mapped::Key { key: *key }))
            }
            Memory::Handles { handles, offset } => {
                let (start, mapped) = self.map_range(rt, device, (name.pid, name.nonce), handles)?;
                Ok((start + offset, mapped))
            }
        }
    }

    /// Imports (or reuses) each handle and maps them in order into a new range; on a refusal, undoes it all.
    fn map_range(
        &mut self,
        rt: &Arc<Runtime>,
        device: i32,
        pid: Exporter,
        handles: &[(u64, usize)],
    ) -> Result<(usize, Mapped)> {
        let total: usize = handles.iter().map(|h| h.1).sum();
        // 1 GiB pages map only at 1 GiB boundaries.
        let align = if handles.iter().all(|h| h.1 % (1 << 30) == 0) { 1 << 30 } else { 2 << 20 };
        let len = total + align - (2 << 20);
        let reserved = rt
            .on_device(device, || rt.reserve(len))
            .map_err(|e| Error::runtime(e, "reserving address space for an import"))?;
        let start = reserved.next_multiple_of(align);
        let mut maps: Vec<(usize, u64)> = Vec::with_capacity(handles.len());
        let mut at = start;
        for &(shareable, bytes) in handles {
            let step = self.take_handle(rt, device, pid, shareable).and_then(|h| {
                rt.on_device(device, || rt.map(at, bytes, h)).map_err(|e| {
                    self.drop_handle(rt, device, pid, shareable);
                    Error::runtime(e, "mapping an imported physical handle")
                })
            });
            if let Err(e) = step {
                let partial = Mapped::Range { reserved, maps };
                let _ = self.unmap(rt, device, pid, &partial);
                return Err(e);
            }
            maps.push((at, shareable));
            at += bytes;
        }
        Ok((start, Mapped::Range { reserved, maps }))
    }

    fn take_handle(&mut self, rt: &Arc<Runtime>, device: i32, pid: Exporter, shareable: u64) -> Result<PhysicalHandle> {
        if let Some((h, n)) = self.handles.get_mut(&(pid, shareable)) {
            *n += 1;
            return Ok(*h);
        }
        let h = rt
            .on_device(device, || rt.import_handle(shareable, device))
            .map_err(|e| Error::runtime(e, "importing another process's physical handle"))?;
        self.handles.insert((pid, shareable), (h, 1));
        Ok(h)
    }

    /// Gives back one use of an imported handle; the last frees it.
    fn drop_handle(&mut self, rt: &Arc<Runtime>, device: i32, pid: Exporter, shareable: u64) {
        let Some((h, n)) = self.handles.get_mut(&(pid, shareable)) else { return };
        *n -= 1;
        if *n == 0 {
            let h = *h;
            self.handles.remove(&(pid, shareable));
            let _ = rt.on_device(device, || rt.free_physical(h));
        }
    }

    /// Undoes a mapping; the first error after trying everything.
    fn unmap(&mut self, rt: &Arc<Runtime>, device: i32, pid: Exporter, mapped: &Mapped) -> Result<()> {
        let mut first = None;
        match mapped {
            Mapped::Key { key } => {
                if let Some((_, n)) = self.keys.get_mut(&(pid, *key)) {
                    *n -= 1;
                    if *n == 0 {
                        self.keys.remove(&(pid, *key));
                        if let Err(e) = rt.on_device(device, || rt.close_key(key)) {
                            first = Some(Error::runtime(e, "closing an imported segment"));
                        }
                    }
                }
            }
            Mapped::Range { reserved, maps, .. } => {
                for &(at, shareable) in maps {
                    if let Err(e) = rt.on_device(device, || rt.unmap(at)) {
                        first.get_or_insert(Error::runtime(e, "unmapping an imported physical handle"));
                    }
                    self.drop_handle(rt, device, pid, shareable);
                }
                if let Err(e) = rt.on_device(device, || rt.release(*reserved)) {
                    first.get_or_insert(Error::runtime(e, "releasing an import's address range"));
                }
            }
        }
        first.map_or(Ok(()), Err)
    }
}
