//! The shared side of IPC events (`aclrtCreateEventExWithFlag` with
//! ACL_EVENT_IPC, `aclrtIpcGetEventHandle`, `aclrtIpcOpenEventHandle`):
//! the state a record, wait or query of such an event reads in any process.
//!
//! The runtime builds an IPC event on a small piece of memory shared
//! between the processes (RT `IpcEvent::Setup`, `IpcOpenEventHandle`): a
//! record takes a new slot, which the device sets when the recording
//! stream gets there (`IpcEventRecord`); a wait, query or synchronize looks
//! only at the latest record, and an event never recorded, or whose latest
//! record finished, is complete (`IpcEventWait`, `IpcEventQuery`,
//! `IpcEventSync`). Any process holding the event may record it.
//!
//! The emulator keeps one slot per event in a memfd of the creating
//! process (named with its pid), which other processes map through
//! `/proc/<pid>/fd`: `records` counts the records made so far (the latest
//! one's number), and a ring of `RING` words holds the numbers of finished
//! records, each at its number modulo `RING`; a wait for record n is met
//! once its word holds n or a later number (a record `RING` numbers later
//! finishing first also releases it: more records outstanding at once than
//! that is beyond what the emulator tells apart).
//!
//! `refs` counts the references to a slot in every process: each event
//! bound to it and each piece of queued work that records or waits for it
//! (`SlotRef` counts itself). A slot is reused for a new event only once
//! its event is destroyed and nothing refers to it; its generation changes
//! then, so a handle of the old event no longer opens. A process that
//! exits without destroying what it opened keeps its references, and the
//! slot is not reused (the creator's table has room for many).

use crate::error::{AclResult, ACL_ERROR_RT_DRV_INTERNAL_ERROR, ACL_ERROR_RT_RESOURCE_ALLOC_FAIL};
use crate::ffi::lock;
use std::collections::HashMap;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, Weak};

/// The size of `aclrtIpcEventHandle` (`ACL_IPC_EVENT_HANDLE_SIZE`).
pub const HANDLE_SIZE: usize = 64;
const NAME: &str = "aclemu-ipc-events";
const SLOTS: usize = 1 << 14;
/// Finished records a slot tells apart.
const RING: usize = 32;
/// The file's header: a magic number and the table's random id.
const HEADER: usize = 64;
const LEN: usize = HEADER + SLOTS * std::mem::size_of::<Slot>();
const MAGIC: u64 = u64::from_le_bytes(*b"aclemuEV");
const HANDLE_MAGIC: u32 = u32::from_le_bytes(*b"IPCE");

/// `Slot::state`.
const LIVE: u32 = 1;
const GONE: u32 = 2;

#[repr(C)]
struct Slot {
    state: AtomicU32,
    generation: AtomicU32,
    /// References in every process (module comment).
    refs: AtomicU32,
    _pad: u32,
    records: AtomicU64,
    finished: [AtomicU64; RING],
}

/// A process's event file, mapped into this one.
struct Mapped {
    base: *mut u8,
    table_id: u64,
    _file: File,
}

// SAFETY: the mapping is only reached through atomics (`Slot`, and the
// header written once before the table is shared).
unsafe impl Send for Mapped {}
// SAFETY: as above.
unsafe impl Sync for Mapped {}

impl Mapped {
    fn map(file: File) -> Option<Mapped> {
        // SAFETY: a fresh shared mapping of a file at least LEN long (the
        // creator sizes it before mapping; an opener checks the length).
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                LEN,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return None;
        }
        Some(Mapped { base: base.cast(), table_id: 0, _file: file })
    }

    fn header(&self) -> &[AtomicU64; 2] {
        // SAFETY: the header is the first 16 bytes of the mapping, aligned.
        unsafe { &*self.base.cast::<[AtomicU64; 2]>() }
    }

    fn slot(&self, index: usize) -> &Slot {
        assert!(index < SLOTS);
        // SAFETY: in bounds (checked) and aligned (HEADER and Slot are
        // multiples of 8); the mapping lives as long as `self`; a Slot is
        // atomics only, any bit pattern valid.
        unsafe { &*self.base.add(HEADER).cast::<Slot>().add(index) }
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: unmaps the mapping `map` made; nothing refers to it now.
        unsafe { libc::munmap(self.base.cast(), LEN) };
    }
}

/// A reference to one event's slot, counted in the slot (`refs`); the
/// slot's file stays mapped while one lives.
pub struct SlotRef {
    table: Arc<Mapped>,
    index: usize,
}

impl Clone for SlotRef {
    fn clone(&self) -> Self {
        self.slot().refs.fetch_add(1, Ordering::SeqCst);
        SlotRef { table: self.table.clone(), index: self.index }
    }
}

impl Drop for SlotRef {
    fn drop(&mut self) {
        self.slot().refs.fetch_sub(1, Ordering::SeqCst);
    }
}

impl SlotRef {
    fn slot(&self) -> &Slot {
        self.table.slot(self.index)
    }

    /// Starts a record; returns its number.
    pub fn record(&self) -> u64 {
        self.slot().records.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// The latest record's number (0: never recorded).
    pub fn latest(&self) -> u64 {
        self.slot().records.load(Ordering::Acquire)
    }

    /// True once record `n` finished (0: there is none to wait for).
    pub fn reached(&self, n: u64) -> bool {
        n == 0 || self.slot().finished[n as usize % RING].load(Ordering::Acquire) >= n
    }

    /// The recording stream got past record `n` (or dropped it).
    pub fn complete(&self, n: u64) {
        self.slot().finished[n as usize % RING].fetch_max(n, Ordering::AcqRel);
    }
}

/// An IPC event's binding to its slot: made by `create` in the creating
/// process, by `open` in another.
#[derive(Clone)]
pub struct EventSlot {
    pub slot: SlotRef,
    handle: [u8; HANDLE_SIZE],
    own: bool,
}

impl EventSlot {
    /// The handle another process opens the event by.
    pub fn handle(&self) -> [u8; HANDLE_SIZE] {
        self.handle
    }
}

/// This process's event file and its slots.
struct Own {
    table: Arc<Mapped>,
    next: usize,
    /// Slots of destroyed events, reusable once no process holds them.
    retired: Vec<usize>,
}

static OWN: Mutex<Option<Own>> = Mutex::new(None);
/// Other processes' event files this process has mapped, by (pid, table
/// id); a file is unmapped when nothing here refers to it any more.
type Opened = HashMap<(i32, u64), Weak<Mapped>>;
static OPENED: LazyLock<Mutex<Opened>> = LazyLock::new(Default::default);

fn own_pid() -> i32 {
    std::process::id() as i32
}

fn new_table() -> Option<Arc<Mapped>> {
    let name = std::ffi::CString::new(super::memfd_name(NAME, own_pid())).ok()?;
    // SAFETY: `name` is a valid C string; the new fd is owned below.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    // SAFETY: memfd_create returned a fresh descriptor we now own.
    let file = unsafe { File::from_raw_fd(fd) };
    file.set_len(LEN as u64).ok()?;
    let mut mapped = Mapped::map(file)?;
    // A number no later process with this pid will pick, so a handle of
    // this process's events never opens in a successor's table.
    let id = {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64),
        );
        h.finish() | 1
    };
    mapped.header()[1].store(id, Ordering::Relaxed);
    mapped.header()[0].store(MAGIC, Ordering::Release);
    mapped.table_id = id;
    Some(Arc::new(mapped))
}

/// Makes a slot for a new IPC event of this process.
pub fn create() -> AclResult<EventSlot> {
    let mut own = lock(&OWN);
    if own.is_none() {
        let table = new_table().ok_or(ACL_ERROR_RT_RESOURCE_ALLOC_FAIL)?;
        *own = Some(Own { table, next: 0, retired: Vec::new() });
    }
    let own = own.as_mut().expect("made above");
    let free = own.retired.iter().position(|&i| own.table.slot(i).refs.load(Ordering::SeqCst) == 0);
    let index = match free {
        Some(at) => own.retired.swap_remove(at),
        None if own.next < SLOTS => {
            own.next += 1;
            own.next - 1
        }
        None => return Err(ACL_ERROR_RT_RESOURCE_ALLOC_FAIL),
    };
    let slot = own.table.slot(index);
    // Nothing refers to the slot (an open that raced the destroy took its
    // reference and let go, seeing the state GONE). The generation changes
    // first, so such an open sees a mismatch; the slot becomes LIVE last.
    slot.refs.fetch_add(1, Ordering::SeqCst);
    let generation = slot.generation.load(Ordering::SeqCst).wrapping_add(1).max(1);
    slot.generation.store(generation, Ordering::SeqCst);
    slot.records.store(0, Ordering::SeqCst);
    for word in &slot.finished {
        word.store(0, Ordering::SeqCst);
    }
    slot.state.store(LIVE, Ordering::SeqCst);
    let mut handle = [0u8; HANDLE_SIZE];
    handle[0..4].copy_from_slice(&HANDLE_MAGIC.to_ne_bytes());
    handle[4..8].copy_from_slice(&own_pid().to_ne_bytes());
    handle[8..12].copy_from_slice(&(index as u32).to_ne_bytes());
    handle[12..16].copy_from_slice(&generation.to_ne_bytes());
    handle[16..24].copy_from_slice(&own.table.table_id.to_ne_bytes());
    Ok(EventSlot { slot: SlotRef { table: own.table.clone(), index }, handle, own: true })
}

/// Maps process `pid`'s event file with id `table_id`, or finds it mapped.
fn map_remote(pid: i32, table_id: u64) -> Option<Arc<Mapped>> {
    let mut opened = lock(&OPENED);
    if let Some(table) = opened.get(&(pid, table_id)).and_then(Weak::upgrade) {
        return Some(table);
    }
    for file in super::open_memfds(NAME, pid) {
        if file.metadata().map_or(true, |m| m.len() < LEN as u64) {
            continue;
        }
        let Some(mut mapped) = Mapped::map(file) else { continue };
        let [magic, id] = mapped.header();
        if magic.load(Ordering::Acquire) != MAGIC || id.load(Ordering::Acquire) != table_id {
            continue;
        }
        mapped.table_id = table_id;
        let table = Arc::new(mapped);
        opened.retain(|_, t| t.strong_count() > 0);
        opened.insert((pid, table_id), Arc::downgrade(&table));
        return Some(table);
    }
    None
}

/// Opens another process's IPC event by its handle. 507899 when the handle
/// names no live event of a process this one can reach, or one of this
/// process (the driver's import of the event's shared memory refuses
/// these, as for shareable handles; the code is a guess).
pub fn open(handle: &[u8; HANDLE_SIZE]) -> AclResult<EventSlot> {
    let word = |at: usize| u32::from_ne_bytes(handle[at..at + 4].try_into().expect("4 bytes"));
    let pid = word(4) as i32;
    let index = word(8) as usize;
    let generation = word(12);
    let table_id = u64::from_ne_bytes(handle[16..24].try_into().expect("8 bytes"));
    if word(0) != HANDLE_MAGIC || pid == own_pid() || pid <= 0 || index >= SLOTS || generation == 0 {
        return Err(ACL_ERROR_RT_DRV_INTERNAL_ERROR);
    }
    let table = map_remote(pid, table_id).ok_or(ACL_ERROR_RT_DRV_INTERNAL_ERROR)?;
    let usable = |s: &Slot| s.state.load(Ordering::SeqCst) == LIVE && s.generation.load(Ordering::SeqCst) == generation;
    if !usable(table.slot(index)) {
        return Err(ACL_ERROR_RT_DRV_INTERNAL_ERROR);
    }
    table.slot(index).refs.fetch_add(1, Ordering::SeqCst);
    let slot = SlotRef { table, index };
    // Again under the reference: the creator may have destroyed the event
    // and reused its slot in between (the reference goes with `slot`).
    if !usable(slot.slot()) {
        return Err(ACL_ERROR_RT_DRV_INTERNAL_ERROR);
    }
    Ok(EventSlot { slot, handle: *handle, own: false })
}

/// The event is destroyed in this process: its reference goes (queued
/// work keeps its own); the creator's event no longer opens by its handle,
/// and its slot waits for reuse until nothing refers to it.
pub fn release(ev: EventSlot) {
    if ev.own {
        ev.slot.slot().state.store(GONE, Ordering::SeqCst);
        if let Some(own) = lock(&OWN).as_mut() {
            own.retired.push(ev.slot.index);
        }
    }
}
