//! A process's export table: a memfd that every other process of the host
//! can open through `/proc/<pid>/fd` and read, one fixed-size entry per
//! export.
//!
//! Only the exporting process writes its table (under `ipc`'s lock);
//! importers read entries with `pread`. An entry is published by writing
//! its fields first and `state` LIVE last, and retired by writing `state`
//! GONE before its `generation` and fields change for a new export; an
//! importer reads the entry, takes its hold, and reads it again, using it
//! only if both reads show it LIVE at the generation its key names.
//!
//! An importer's hold is an open-file-description read lock on byte
//! `index` of the table file, taken on the importer's own descriptor of the
//! file: the kernel drops it when that descriptor is closed or the importer
//! dies, in whatever PID namespace either process runs, so the exporter
//! learns that no process holds an entry by testing for a conflicting
//! write lock (`F_OFD_GETLK`), never by comparing pids.

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::FileExt;

/// Entries of one process's table.
pub const CAPACITY: usize = 1 << 16;
/// Pids one export may admit (`aclrtIpcMemSetImportPid`). The driver
/// admits tens of thousands; the emulator's table keeps this many.
pub const MAX_PIDS: usize = 64;
const NAME: &str = "aclemu-ipc-exports";

/// `Entry::state`: unused.
pub const FREE: u32 = 0;
/// Importable.
pub const LIVE: u32 = 1;
/// No longer importable (closed, or its memory freed); imports made before
/// keep their memory.
pub const GONE: u32 = 2;

/// What an entry exports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Kind {
    /// An aclrtMalloc allocation, by key.
    Key = 1,
    /// A physical handle, by shareable handle.
    Shareable = 2,
}

/// One export as the exporter wrote it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Entry {
    pub state: u32,
    pub generation: u32,
    pub kind: u32,
    pub device: i32,
    /// The exporter's descriptor of the device's memory file.
    pub file_fd: i32,
    /// Whether only `pids` may import.
    pub validate: u32,
    /// The exported memory: a range of the device's memory file.
    pub offset: u64,
    pub size: u64,
    /// The page size it maps at (physical handles).
    pub granularity: u64,
    pub pid_count: u32,
    pub pids: [i32; MAX_PIDS],
    /// Keeps the struct free of padding (it is written as bytes).
    pub reserved: u32,
}

const ENTRY: usize = std::mem::size_of::<Entry>();

impl Entry {
    pub const EMPTY: Entry = Entry {
        state: FREE,
        generation: 0,
        kind: 0,
        device: 0,
        file_fd: -1,
        validate: 0,
        offset: 0,
        size: 0,
        granularity: 0,
        pid_count: 0,
        pids: [0; MAX_PIDS],
        reserved: 0,
    };

    /// Whether `pid` may import: validation off, or `pid` admitted.
    pub fn admits(&self, pid: i32) -> bool {
        self.validate == 0 || self.pids[..(self.pid_count as usize).min(MAX_PIDS)].contains(&pid)
    }

    fn to_bytes(self) -> [u8; ENTRY] {
        // SAFETY: `Entry` is repr(C) plain integers without padding
        // (checked by `entry_has_no_padding`).
        unsafe { std::mem::transmute::<Entry, [u8; ENTRY]>(self) }
    }

    fn from_bytes(b: [u8; ENTRY]) -> Entry {
        // SAFETY: every bit pattern is a valid `Entry` (plain integers).
        unsafe { std::mem::transmute::<[u8; ENTRY], Entry>(b) }
    }
}

/// A process's table file: this process's own, or another's opened through
/// `/proc`.
pub struct Table {
    file: File,
}

impl Table {
    /// Makes this process's table (a sparse memfd); `None` if the host
    /// refuses.
    pub fn create() -> Option<Table> {
        let name = std::ffi::CString::new(super::memfd_name(NAME, std::process::id() as i32)).ok()?;
        // SAFETY: `name` is a valid C string; the new fd is owned below.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return None;
        }
        // SAFETY: memfd_create returned a fresh descriptor we now own.
        let file = unsafe { File::from_raw_fd(fd) };
        file.set_len((CAPACITY * ENTRY) as u64).ok()?;
        Some(Table { file })
    }

    /// Opens process `pid`'s table: `None` if it has none (it exported
    /// nothing, or exited) or this process may not read its descriptors.
    pub fn open(pid: i32) -> Option<Table> {
        super::open_memfds(NAME, pid).into_iter().next().map(|file| Table { file })
    }

    /// Entry `index` as it reads now.
    pub fn read(&self, index: usize) -> Option<Entry> {
        if index >= CAPACITY {
            return None;
        }
        let mut b = [0u8; ENTRY];
        self.file.read_exact_at(&mut b, (index * ENTRY) as u64).ok()?;
        Some(Entry::from_bytes(b))
    }

    /// Writes entry `index`: every field but `state`, then `state` (see the
    /// module comment).
    pub fn write(&self, index: usize, e: &Entry) {
        let b = e.to_bytes();
        let at = (index * ENTRY) as u64;
        let ok = self.file.write_all_at(&b[4..], at + 4).and_then(|()| self.file.write_all_at(&b[..4], at));
        debug_assert!(ok.is_ok(), "writing the export table failed");
    }

    /// Sets entry `index`'s state alone.
    pub fn set_state(&self, index: usize, state: u32) {
        let ok = self.file.write_all_at(&state.to_ne_bytes(), (index * ENTRY) as u64);
        debug_assert!(ok.is_ok(), "writing the export table failed");
    }

    /// Takes a hold on entry `index` through this descriptor; false if the
    /// host refuses.
    pub fn hold(&self, index: usize) -> bool {
        self.lock(index, libc::F_RDLCK as i16, libc::F_OFD_SETLK)
    }

    /// Whether any process holds entry `index` (asked through the
    /// exporter's own descriptor, which takes no hold); a failed test
    /// counts as held.
    pub fn held(&self, index: usize) -> bool {
        let mut fl = flock(index, libc::F_WRLCK as i16);
        // SAFETY: plain fcntl on our descriptor with a valid flock.
        let rc = unsafe { libc::fcntl(self.file.as_raw_fd(), libc::F_OFD_GETLK, &mut fl) };
        rc != 0 || fl.l_type != libc::F_UNLCK as i16
    }

    fn lock(&self, index: usize, kind: i16, cmd: libc::c_int) -> bool {
        let fl = flock(index, kind);
        // SAFETY: plain fcntl on our descriptor with a valid flock.
        unsafe { libc::fcntl(self.file.as_raw_fd(), cmd, &fl) == 0 }
    }
}

fn flock(index: usize, kind: i16) -> libc::flock {
    // SAFETY: flock is plain data; all-zero is a valid value.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind;
    fl.l_whence = libc::SEEK_SET as i16;
    fl.l_start = index as libc::off_t;
    fl.l_len = 1;
    fl
}

#[cfg(test)]
mod tests {
    #[test]
    fn entry_has_no_padding() {
        use super::{Entry, MAX_PIDS};
        assert_eq!(std::mem::size_of::<Entry>(), 6 * 4 + 3 * 8 + 4 + MAX_PIDS * 4 + 4);
    }
}
