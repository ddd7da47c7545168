//! The process's export records, one `SLOT` each in a memfd an importer opens through `/proc/<pid>/fd/<fd>`,
//! and the 128-byte handle that names a record. Only this process writes its records (under `TABLE`'s
//! lock), `state` last when publishing and first when retiring; an importer reads a record, takes its hold
//! and reads it again, and uses it only if both reads show it live at the generation its handle names.
//! A hold is an open-file-description read lock on the slot's first byte, on the importer's own
//! descriptor: the kernel drops it when that descriptor closes or the importer dies, in any PID namespace,
//! so the exporter tests for a conflicting lock (`F_OFD_GETLK`), never compares pids. A thread that exits
//! ends nothing (robust mutexes would: they belong to threads).

use crate::error::{Error, Result};
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::fs::FileExt;
use std::sync::Mutex;

/// Bytes of one record: room for the handles of the largest block (128 GiB of 2 MiB pages, 16 bytes each).
/// The table is sparse: only written records take memory.
pub(crate) const SLOT: usize = 2 << 20;
/// Records of one process.
const CAPACITY: usize = 16 << 10;
const NAME: &str = "npualloc-ipc-exports";
const MAGIC: u64 = u64::from_le_bytes(*b"NPUALREC");
const HANDLE_MAGIC: [u8; 8] = *b"NPUALLOC";
const VERSION: u32 = 1;

/// `Header::state`.
const LIVE: u32 = 1;
const GONE: u32 = 2;

/// How a record's memory is shared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Memory {
    /// An `aclrtMalloc` allocation, by key; the block starts `offset` bytes into it.
    Key { key: [u8; crate::runtime::KEY_LEN], offset: usize },
    /// (shareable handle, bytes) pairs, mapped in order into one range; the block starts `offset` bytes in.
    Handles { handles: Vec<(u64, usize)>, offset: usize },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    pub device: i32,
    /// The block's usable bytes.
    pub size: usize,
    pub memory: Memory,
}

impl Record {
    /// Whether an import can map it: a block inside the whole 2 MiB pages it lists, at most 128 GiB in all.
    pub fn sane(&self) -> bool {
        const PAGE: usize = 2 << 20;
        const MOST: usize = 128 << 30;
        match &self.memory {
            Memory::Key { offset, .. } => self.size > 0 && offset.checked_add(self.size).is_some_and(|end| end <= MOST),
            Memory::Handles { handles, offset } => {
                let total = handles.iter().try_fold(0usize, |sum, &(_, n)| {
                    (n > 0 && n % PAGE == 0).then_some(())?;
                    sum.checked_add(n).filter(|&t| t <= MOST)
                });
                total.is_some_and(|t| self.size > 0 && offset.checked_add(self.size).is_some_and(|end| end <= t))
            }
        }
    }
}

/// Declares a struct of little-endian numbers laid out one after another, in declaration order: `le_bytes` are
/// its fields' bytes, `from_le` reads them back from the start of `b`.
macro_rules! le_fields {
    ($(#[$m:meta])* $vis:vis struct $name:ident { $($(#[$fm:meta])* $fvis:vis $f:ident: $t:ty,)* }) => {
        $(#[$m])*
        $vis struct $name { $($(#[$fm])* $fvis $f: $t,)* }

        impl $name {
            fn le_bytes(&self) -> Vec<u8> {
                [$(&self.$f.to_le_bytes()[..]),*].concat()
            }

            fn from_le(b: &[u8]) -> $name {
                let mut at = 0;
                $name {
                    $($f: {
                        at += std::mem::size_of::<$t>();
                        <$t>::from_le_bytes(b[at - std::mem::size_of::<$t>()..at].try_into().expect("in bounds"))
                    },)*
                }
            }
        }
    };
}

le_fields! {
    /// The fixed part of a record; the key or the (shareable, bytes) pairs follow it.
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Header {
        magic: u64,
        version: u32,
        state: u32,
        generation: u32,
        device: i32,
        /// 1: key, 2: handles.
        kind: u32,
        /// Handles listed (0 for a key).
        count: u32,
        size: u64,
        offset: u64,
        /// The table's own random number: a handle of another table (same pid, earlier process) never matches.
        nonce: u64,
    }
}

const HEADER: usize = std::mem::size_of::<Header>();
const KEY_AT: usize = HEADER;
const PAIRS_AT: usize = HEADER;
pub(crate) const MAX_HANDLES: usize = (SLOT - PAIRS_AT) / 16;
// Every page of the largest block (a 128 GiB reservation of 2 MiB pages).
const _: () = assert!(MAX_HANDLES >= (128 << 30) / (2 << 20));

/// The little-endian numbers at `b[i..]`.
fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"))
}

le_fields! {
    /// The 128 bytes that name an export (`npualloc_ipc_handle`): its magic, version, these fields, then zeros.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(crate) struct Name {
        pub pid: i32,
        /// The exporter's descriptor of its table.
        pub fd: RawFd,
        pub slot: u32,
        pub generation: u32,
        pub device: i32,
        pub size: u64,
        /// The exporter's table's random number (see `Header::nonce`).
        pub nonce: u64,
    }
}

pub(crate) const HANDLE_SIZE: usize = 128;

impl Name {
    pub fn to_bytes(self) -> [u8; HANDLE_SIZE] {
        let mut b = [0u8; HANDLE_SIZE];
        let fields = [&HANDLE_MAGIC[..], &VERSION.to_le_bytes(), &self.le_bytes()].concat();
        b[..fields.len()].copy_from_slice(&fields);
        b
    }

    /// The name in `b`, if `b` is one this version writes.
    pub fn parse(b: &[u8; HANDLE_SIZE]) -> Option<Name> {
        if b[..8] != HANDLE_MAGIC || u32_at(b, 8) != VERSION || b[48..].iter().any(|&x| x != 0) {
            return None;
        }
        let name = Name::from_le(&b[12..]);
        (name.pid > 0 && name.fd >= 0 && (name.slot as usize) < CAPACITY).then_some(name)
    }
}

/// This process's table: its file, the free slots and the last generation of each slot handed out so far.
struct Own {
    file: File,
    nonce: u64,
    free: Vec<u32>,
    generations: Vec<u32>,
}

static TABLE: Mutex<Option<Own>> = Mutex::new(None);

fn table() -> std::sync::MutexGuard<'static, Option<Own>> {
    TABLE.lock().unwrap_or_else(|e| e.into_inner())
}

fn io_error(what: &str, e: std::io::Error) -> Error {
    Error::Unsupported(format!("{what}: {e}"))
}

pub(crate) fn publish(record: &Record) -> Result<Name> {
    let (body, kind, count, offset) = match &record.memory {
        Memory::Key { key, offset } => (key.to_vec(), 1, 0, *offset),
        Memory::Handles { handles, offset } => {
            if handles.len() > MAX_HANDLES {
                return Err(Error::Unsupported(format!(
                    "the block lies on {} physical handles; an export lists at most {MAX_HANDLES}",
                    handles.len()
                )));
            }
            let pairs = handles.iter().flat_map(|&(h, bytes)| [h, bytes as u64]).flat_map(u64::to_le_bytes).collect();
            (pairs, 2, handles.len() as u32, *offset)
        }
    };
    let mut guard = table();
    if guard.is_none() {
        *guard = Some(create()?);
    }
    let own = guard.as_mut().expect("made above");
    let slot = match own.free.pop() {
        Some(s) => s,
        None if own.generations.len() < CAPACITY => {
            own.generations.push(0);
            own.generations.len() as u32 - 1
        }
        None => return Err(Error::Unsupported(format!("this process has {CAPACITY} exports live; close some first"))),
    };
    let generation = own.generations[slot as usize].wrapping_add(1).max(1);
    own.generations[slot as usize] = generation;
    let header = Header {
        magic: MAGIC,
        version: VERSION,
        state: LIVE,
        generation,
        device: record.device,
        kind,
        count,
        size: record.size as u64,
        offset: offset as u64,
        nonce: own.nonce,
    };
    let at = slot as u64 * SLOT as u64;
    let hb = header.le_bytes();
    // `state` last: a reader never sees a live header over an old body.
    let written = own
        .file
        .write_all_at(&body, at + HEADER as u64)
        .and_then(|()| own.file.write_all_at(&hb[16..], at + 16))
        .and_then(|()| own.file.write_all_at(&hb[..16], at));
    if let Err(e) = written {
        own.free.push(slot);
        return Err(io_error("writing an export record", e));
    }
    Ok(Name {
        pid: std::process::id() as i32,
        fd: own.file.as_raw_fd(),
        slot,
        generation,
        device: record.device,
        size: record.size as u64,
        nonce: own.nonce,
    })
}

fn create() -> Result<Own> {
    let name = std::ffi::CString::new(NAME).expect("no NUL");
    // SAFETY: `name` is a valid C string; the new descriptor is owned below.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io_error("making the export table", std::io::Error::last_os_error()));
    }
    // SAFETY: memfd_create returned a fresh descriptor we now own.
    let file = unsafe { File::from_raw_fd(fd) };
    file.set_len((CAPACITY * SLOT) as u64).map_err(|e| io_error("sizing the export table", e))?;
    Ok(Own { file, nonce: nonce(), free: Vec::new(), generations: Vec::new() })
}

/// A random number from the kernel (the clock and pid if it has none).
fn nonce() -> u64 {
    let mut n = [0u8; 8];
    // SAFETY: `n` is 8 writable bytes.
    let got = unsafe { libc::getrandom(n.as_mut_ptr().cast(), n.len(), 0) };
    if got == 8 {
        return u64::from_le_bytes(n);
    }
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    t ^ (u64::from(std::process::id()) << 32)
}

/// Retires record `slot`: no import can take it from now on.
pub(crate) fn retire(slot: u32) {
    if let Some(own) = table().as_ref() {
        let at = slot as u64 * SLOT as u64 + 12;
        let done = own.file.write_all_at(&GONE.to_le_bytes(), at);
        debug_assert!(done.is_ok(), "retiring an export record failed");
    }
}

/// Whether any process holds record `slot`.
pub(crate) fn held(slot: u32) -> bool {
    table().as_ref().is_some_and(|own| lock_test(&own.file, slot))
}

/// Makes a retired slot free for another record (none holds it).
pub(crate) fn reuse(slot: u32) {
    if let Some(own) = table().as_mut() {
        own.free.push(slot);
    }
}

fn flock(slot: u32, kind: i16) -> libc::flock {
    // SAFETY: flock is plain data; all-zero is a valid value.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind;
    fl.l_whence = libc::SEEK_SET as i16;
    fl.l_start = slot as libc::off_t * SLOT as libc::off_t;
    fl.l_len = 1;
    fl
}

/// Whether a process holds `slot`; a failed test counts as held (never reused under an importer).
fn lock_test(file: &File, slot: u32) -> bool {
    let mut fl = flock(slot, libc::F_WRLCK as i16);
    // SAFETY: a plain fcntl on our descriptor with a valid flock.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_GETLK, &mut fl) };
    rc != 0 || fl.l_type != libc::F_UNLCK as i16
}

/// Another process's table, opened by an importer.
pub(crate) struct Peer {
    file: File,
}

impl Peer {
    /// Opens the table `name` points into: None if the exporter is gone, its descriptors may not be opened,
    /// or it is not an export table (a stale or forged handle). Read only: a read lock needs no more.
    pub fn open(name: &Name) -> Option<Peer> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = format!("/proc/{}/fd/{}", name.pid, name.fd);
        let target = std::fs::read_link(&path).ok()?;
        if !target.to_string_lossy().starts_with(&format!("/memfd:{NAME}")) {
            return None;
        }
        let file =
            std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY).open(&path).ok()?;
        Some(Peer { file })
    }

    /// The record `name` names, if it is live at its generation.
    pub fn read(&self, name: &Name) -> Option<Record> {
        let at = name.slot as u64 * SLOT as u64;
        let mut hb = [0u8; HEADER];
        self.file.read_exact_at(&mut hb, at).ok()?;
        let h = Header::from_le(&hb);
        let ours = h.magic == MAGIC && h.version == VERSION && h.nonce == name.nonce;
        let named = h.generation == name.generation && h.device == name.device && h.size == name.size;
        if !ours || h.state != LIVE || !named {
            return None;
        }
        let memory = match h.kind {
            1 => {
                let mut key = [0u8; crate::runtime::KEY_LEN];
                self.file.read_exact_at(&mut key, at + KEY_AT as u64).ok()?;
                Memory::Key { key, offset: h.offset as usize }
            }
            2 if (1..=MAX_HANDLES).contains(&(h.count as usize)) => {
                let mut raw = vec![0u8; h.count as usize * 16];
                self.file.read_exact_at(&mut raw, at + PAIRS_AT as u64).ok()?;
                let handles = raw.chunks_exact(16).map(|c| (u64_at(c, 0), u64_at(c, 8) as usize)).collect();
                Memory::Handles { handles, offset: h.offset as usize }
            }
            _ => return None,
        };
        let record = Record { device: h.device, size: h.size as usize, memory };
        record.sane().then_some(record)
    }

    /// Takes a hold on record `slot` through this descriptor.
    pub fn hold(&self, slot: u32) -> bool {
        let fl = flock(slot, libc::F_RDLCK as i16);
        // SAFETY: a plain fcntl on our descriptor with a valid flock.
        unsafe { libc::fcntl(self.file.as_raw_fd(), libc::F_OFD_SETLK, &fl) == 0 }
    }

    pub fn release(&self, slot: u32) {
        let fl = flock(slot, libc::F_UNLCK as i16);
        // SAFETY: a plain fcntl on our descriptor with a valid flock.
        unsafe { libc::fcntl(self.file.as_raw_fd(), libc::F_OFD_SETLK, &fl) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_refuse_other_bytes() {
        let name = Name { pid: 4242, fd: 7, slot: 3, generation: 9, device: 1, size: 1 << 30, nonce: 0x1234_5678 };
        let b = name.to_bytes();
        assert_eq!(Name::parse(&b), Some(name));
        assert_eq!(Name::parse(&[0u8; HANDLE_SIZE]), None);
        let mut trailing = b;
        trailing[100] = 1;
        assert_eq!(Name::parse(&trailing), None);
        let mut far = name;
        far.slot = CAPACITY as u32;
        assert_eq!(Name::parse(&far.to_bytes()), None);
    }

    #[test]
    fn headers_round_trip() {
        let h = Header {
            magic: MAGIC,
            version: 1,
            state: LIVE,
            generation: 5,
            device: 3,
            kind: 2,
            count: 4,
            size: 77,
            offset: 12,
            nonce: 99,
        };
        let back = Header::from_le(&h.le_bytes());
        let got = (back.magic, back.generation, back.device, back.count, back.size, back.offset, back.nonce);
        assert_eq!(got, (MAGIC, 5, 3, 4, 77, 12, 99));
    }

    #[test]
    fn records_that_cannot_be_mapped_are_refused() {
        let handles = |v: Vec<(u64, usize)>, offset| Memory::Handles { handles: v, offset };
        let rec = |size, memory| Record { device: 0, size, memory };
        assert!(rec(4 << 20, handles(vec![(1, 2 << 20), (2, 2 << 20)], 0)).sane());
        assert!(!rec(4 << 20, handles(vec![(1, 2 << 20)], 0)).sane(), "a block past its handles");
        assert!(!rec(1, handles(vec![], 0)).sane(), "no handles");
        assert!(!rec(1, handles(vec![(1, usize::MAX)], 0)).sane(), "a size that overflows");
        assert!(!rec(1, handles(vec![(1, 3 << 20)], 0)).sane(), "not whole pages");
        assert!(!rec(1, handles(vec![(1, 2 << 20)], usize::MAX)).sane(), "an offset that overflows");
        assert!(!rec(0, Memory::Key { key: [0; crate::runtime::KEY_LEN], offset: 0 }).sane());
    }
}
