//! Device memory shared between processes of one host, as ACL shares it:
//! aclrtMalloc allocations by key (`key`), physical handles by shareable
//! handle (`shareable`), each with the pid checks the runtime offers.
//!
//! Every device's memory is one memfd (`vmm::take_file_range`), so the same
//! bytes can be mapped in two processes: an export publishes the range in
//! the exporter's table (`table`), and an importer opens the exporter's
//! table and memory file through `/proc/<pid>/fd` and maps the range.
//!
//! Lifetime (docs/runtime-behaviour.md, "Sharing memory between
//! processes"): an importer holds what it imported until it closes it or
//! exits; memory the exporter frees while a process holds it stays charged
//! to the exporter's device and is given back (`reap`) once no process
//! holds it; an importer's mapping outlives its exporter.
//!
//! Events are shared the same way (`event`): an IPC event's records and
//! waits read a slot of its creator's event file.

pub(crate) mod event;
mod key;
mod shareable;
mod table;

pub(crate) use key::imported_covers;
pub use key::{aclrtIpcMemClose, aclrtIpcMemGetExportKey, aclrtIpcMemImportByKey, aclrtIpcMemSetImportPid};
pub(crate) use shareable::Imported;
pub use shareable::{
    aclrtDeviceGetBareTgid, aclrtMemExportToShareableHandle, aclrtMemImportFromShareableHandle,
    aclrtMemSetPidToShareableHandle,
};

use crate::error::{
    AclResult, ACL_ERROR_RT_DRV_INTERNAL_ERROR, ACL_ERROR_RT_NO_PERMISSION, ACL_ERROR_RT_OVER_LIMIT,
    ACL_ERROR_RT_RESOURCE_ALLOC_FAIL,
};
use crate::ffi::lock;
use std::collections::HashMap;
use std::fs::File;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LazyLock, Mutex};
use table::{Entry, Kind, Table, CAPACITY, GONE, LIVE, MAX_PIDS};

/// Gives memory freed while imported back, once no process holds it.
pub type Release = Box<dyn FnOnce() + Send>;

/// This process's exports.
struct Exports {
    /// Made at the first export.
    table: Option<Table>,
    /// Each used index's entry as last written.
    entries: HashMap<usize, Entry>,
    free: Vec<usize>,
    next: usize,
    /// Exports by (device, offset in its memory file); an index stays here
    /// until its memory was freed and no process holds it.
    by_range: HashMap<(i32, u64), Vec<usize>>,
    /// Exports that ended while a process may hold them.
    waiting: Vec<Wait>,
}

/// Exports that ended: `indices` are freed once no process holds any of
/// them, and then `release` gives their memory back. Without a release
/// (an export closed, its memory not freed) the index also waits for the
/// memory's free, which looks it up by range.
struct Wait {
    indices: Vec<usize>,
    release: Option<Release>,
}

static EXPORTS: LazyLock<Mutex<Exports>> = LazyLock::new(|| {
    Mutex::new(Exports {
        table: None,
        entries: HashMap::new(),
        free: Vec::new(),
        next: 0,
        by_range: HashMap::new(),
        waiting: Vec::new(),
    })
});

/// An export's name: the exporter's pid, its table index and generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Name {
    pub pid: i32,
    pub index: usize,
    pub generation: u32,
}

fn own_pid() -> i32 {
    std::process::id() as i32
}

/// Publishes an export of `size` bytes at `offset` of `device`'s memory
/// file `fd`; refused (507899) when that range is exported and live
/// already: the runtime keeps one export per allocation or handle.
pub fn export(
    kind: Kind,
    device: i32,
    fd: RawFd,
    offset: u64,
    size: u64,
    granularity: u64,
    validate: bool,
) -> AclResult<Name> {
    let mut ex = lock(&EXPORTS);
    let live = |ex: &Exports, i: &usize| ex.entries.get(i).is_some_and(|e| e.state == LIVE);
    if ex.by_range.get(&(device, offset)).is_some_and(|v| v.iter().any(|i| live(&ex, i))) {
        return Err(ACL_ERROR_RT_DRV_INTERNAL_ERROR);
    }
    if ex.table.is_none() {
        ex.table = Some(Table::create().ok_or(ACL_ERROR_RT_RESOURCE_ALLOC_FAIL)?);
    }
    let index = match ex.free.pop() {
        Some(i) => i,
        None if ex.next < CAPACITY => {
            ex.next += 1;
            ex.next - 1
        }
        None => return Err(ACL_ERROR_RT_RESOURCE_ALLOC_FAIL),
    };
    let table = ex.table.as_ref().expect("made above");
    // 16 bits of generation travel in a shareable handle; 0 is never one.
    let generation = table.read(index).map_or(1, |e| e.generation % 0xFFFF + 1);
    let entry = Entry {
        state: LIVE,
        generation,
        kind: kind as u32,
        device,
        file_fd: fd,
        validate: validate as u32,
        offset,
        size,
        granularity,
        ..Entry::EMPTY
    };
    table.write(index, &entry);
    ex.entries.insert(index, entry);
    ex.by_range.entry((device, offset)).or_default().push(index);
    Ok(Name { pid: own_pid(), index, generation })
}

/// The live export `name` of this process, of `kind`.
fn own_live(ex: &Exports, name: Name, kind: Kind) -> Option<Entry> {
    let e = ex.entries.get(&name.index)?;
    (name.pid == own_pid() && e.state == LIVE && e.generation == name.generation && e.kind == kind as u32).then_some(*e)
}

/// Admits `pids` to import live export `name` (validation on): 207006 if
/// the export was made without validation, 207012 past `MAX_PIDS`, 507899
/// if `name` is not a live export of this process.
pub fn admit(name: Name, kind: Kind, pids: &[i32]) -> AclResult<()> {
    let mut ex = lock(&EXPORTS);
    let mut e = own_live(&ex, name, kind).ok_or(ACL_ERROR_RT_DRV_INTERNAL_ERROR)?;
    if e.validate == 0 {
        return Err(ACL_ERROR_RT_NO_PERMISSION);
    }
    let n = e.pid_count as usize;
    if n + pids.len() > MAX_PIDS {
        return Err(ACL_ERROR_RT_OVER_LIMIT);
    }
    e.pids[n..n + pids.len()].copy_from_slice(pids);
    e.pid_count = (n + pids.len()) as u32;
    ex.table.as_ref().expect("an export made it").write(name.index, &e);
    ex.entries.insert(name.index, e);
    Ok(())
}

/// Ends live export `name` in the exporter (no new imports; imports made
/// stay). False if it is not one.
pub fn withdraw(name: Name, kind: Kind) -> bool {
    let mut ex = lock(&EXPORTS);
    if own_live(&ex, name, kind).is_none() {
        return false;
    }
    retire(&mut ex, name.index);
    ex.waiting.push(Wait { indices: vec![name.index], release: None });
    WAITING.store(true, Ordering::Release);
    drop(ex);
    reap();
    true
}

fn retire(ex: &mut Exports, index: usize) {
    ex.table.as_ref().expect("an export made it").set_state(index, GONE);
    if let Some(e) = ex.entries.get_mut(&index) {
        e.state = GONE;
    }
}

/// The exporter freed memory at `offset` of `device`'s memory file. Returns
/// true if it may go back now; otherwise a process holds an export of it,
/// and `release` gives it back later (`reap`).
pub fn freed(device: i32, offset: u64, release: impl FnOnce() -> Release) -> bool {
    let mut ex = lock(&EXPORTS);
    let Some(indices) = ex.by_range.remove(&(device, offset)) else {
        return true;
    };
    let table = ex.table.as_ref().expect("an export made it");
    let held: Vec<usize> = indices.iter().copied().filter(|&i| table.held(i)).collect();
    for &i in &indices {
        retire(&mut ex, i);
    }
    // Indices a withdraw left waiting belong to this free now.
    ex.waiting.retain(|w| w.release.is_some() || !w.indices.iter().any(|i| indices.contains(i)));
    for &i in indices.iter().filter(|i| !held.contains(i)) {
        ex.entries.remove(&i);
        ex.free.push(i);
    }
    if held.is_empty() {
        return true;
    }
    // The memory goes back once none of them is held.
    ex.waiting.push(Wait { indices: held, release: Some(release()) });
    WAITING.store(true, Ordering::Release);
    false
}

/// Whether anything waits for `reap` (so that allocating costs no lock
/// while nothing is shared).
static WAITING: AtomicBool = AtomicBool::new(false);

/// Gives back what waits for holds that have ended, and frees their
/// indices. Called where the exporter allocates or reports memory, with no
/// lock held.
pub fn reap() {
    if !WAITING.load(Ordering::Acquire) {
        return;
    }
    let mut ready = Vec::new();
    {
        let mut ex = lock(&EXPORTS);
        let table = ex.table.take().expect("an export made it");
        let waiting = std::mem::take(&mut ex.waiting);
        for w in waiting {
            let in_range = |i: &usize| ex.by_range.values().any(|v| v.contains(i));
            if w.indices.iter().any(|&i| table.held(i)) || (w.release.is_none() && w.indices.iter().any(in_range)) {
                ex.waiting.push(w);
                continue;
            }
            for i in w.indices {
                ex.entries.remove(&i);
                ex.free.push(i);
            }
            ready.extend(w.release);
        }
        ex.table = Some(table);
        WAITING.store(!ex.waiting.is_empty(), Ordering::Release);
    }
    for release in ready {
        release();
    }
}

/// An import of another process's export: holds it while it lives.
pub struct Import {
    /// The exporter's table, through which the hold is taken.
    _table: Table,
    /// The exporter's device memory file.
    file: File,
    pub entry: Entry,
}

impl Import {
    /// Imports export `name` of `kind` as this process (its pid `me`):
    /// 507899 if it is not a live export of another process this process
    /// can reach, 207006 if the exporter did not admit `me`.
    pub fn take(name: Name, kind: Kind) -> AclResult<Import> {
        let me = own_pid();
        if name.pid == me {
            return Err(ACL_ERROR_RT_DRV_INTERNAL_ERROR);
        }
        let table = Table::open(name.pid).ok_or(ACL_ERROR_RT_DRV_INTERNAL_ERROR)?;
        let usable = |e: &Entry| e.state == LIVE && e.generation == name.generation && e.kind == kind as u32;
        let first = table.read(name.index).filter(usable).ok_or(ACL_ERROR_RT_DRV_INTERNAL_ERROR)?;
        if !first.admits(me) {
            return Err(ACL_ERROR_RT_NO_PERMISSION);
        }
        let path = format!("/proc/{}/fd/{}", name.pid, first.file_fd);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|_| ACL_ERROR_RT_DRV_INTERNAL_ERROR)?;
        if !table.hold(name.index) {
            return Err(ACL_ERROR_RT_DRV_INTERNAL_ERROR);
        }
        // Read again under the hold: the exporter may have retired the
        // entry (and reused its memory) between the first read and the hold.
        let entry = table.read(name.index).filter(usable).ok_or(ACL_ERROR_RT_DRV_INTERNAL_ERROR)?;
        if (entry.offset, entry.size, entry.file_fd) != (first.offset, first.size, first.file_fd) {
            return Err(ACL_ERROR_RT_DRV_INTERNAL_ERROR);
        }
        Ok(Import { _table: table, file, entry })
    }

    pub fn fd(&self) -> RawFd {
        use std::os::fd::AsRawFd;
        self.file.as_raw_fd()
    }
}

/// The name of process `pid`'s memfd of kind `base`: a process also holds
/// other processes' files (what it imported or opened), so the pid in the
/// name tells its own apart.
fn memfd_name(base: &str, pid: i32) -> String {
    format!("{base}-{pid}")
}

/// Process `pid`'s own memfds of kind `base`, opened for reading and
/// writing through `/proc/<pid>/fd` (none if it has none, has exited, or
/// this process may not open its descriptors).
fn open_memfds(base: &str, pid: i32) -> Vec<File> {
    let wanted = format!("/memfd:{}", memfd_name(base, pid));
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return Vec::new() };
    dir.flatten()
        .filter(|entry| {
            std::fs::read_link(entry.path()).is_ok_and(|target| {
                let target = target.to_string_lossy();
                target.strip_suffix(" (deleted)").unwrap_or(&target) == wanted
            })
        })
        .filter_map(|entry| std::fs::OpenOptions::new().read(true).write(true).open(entry.path()).ok())
        .collect()
}
