//! Records what a live allocator serves as an acl-trace v1 file.
//!
//! The allocator calls the recorder under its state lock, so the hot path
//! only appends a 32-byte event to a batch. A full batch (64 KiB) goes to a
//! writer thread, which names each live address with a fresh id (ids are
//! never reused, addresses are), numbers streams in order of first
//! appearance, formats the lines and writes them once its text passes
//! [`FLUSH_AT`]. `flush` waits until everything so far is in the file; drop
//! flushes and stops the writer.

use super::format::HEADER;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::runtime::Stream;
use std::collections::HashMap;
use std::fs::File;
use std::hash::{BuildHasherDefault, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread::JoinHandle;

/// Buffered bytes that trigger a hand-off (events) or a write (text).
pub const FLUSH_AT: usize = 64 * 1024;
const BATCH: usize = FLUSH_AT / std::mem::size_of::<Event>();

#[derive(Debug, Clone, Copy)]
enum Kind {
    Alloc,
    Free,
    Use,
    Wait,
}

#[derive(Debug, Clone, Copy)]
struct Event {
    kind: Kind,
    addr: usize,
    bytes: usize,
    stream: Stream,
}

enum Msg {
    Batch(Vec<Event>),
    /// Write everything received so far, then answer.
    Flush(Sender<Result<(), String>>),
}

/// Writes one allocator's events to a trace file.
pub struct TraceRecorder {
    path: PathBuf,
    events: Vec<Event>,
    tx: Option<Sender<Msg>>,
    writer: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for TraceRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceRecorder").field("path", &self.path).finish()
    }
}

impl TraceRecorder {
    /// Creates (truncates) `path`, writes the header and starts the writer.
    /// A file that cannot be created is a `BadConfig` naming the `trace` key.
    pub fn create(path: &Path, device: i32, config: &Config) -> Result<Self> {
        let bad = |why: String| Error::bad_config("trace", why);
        let mut file = File::create(path).map_err(|e| bad(format!("cannot create '{}': {e}", path.display())))?;
        // The trace's own path says nothing about the run; leave it out.
        let config = Config { trace: None, ..config.clone() };
        let header = format!(
            "{HEADER}\n# source: npualloc {} device {device} config {}\n",
            env!("CARGO_PKG_VERSION"),
            if config == Config::default() { "(default)".to_string() } else { config.to_string() },
        );
        file.write_all(header.as_bytes()).map_err(|e| bad(format!("writing '{}': {e}", path.display())))?;
        let (tx, rx) = mpsc::channel();
        let mut w = Writer::new(file, path);
        let writer = std::thread::Builder::new()
            .name("npualloc-trace".into())
            .spawn(move || w.run(rx))
            .map_err(|e| bad(format!("cannot start the trace writer thread: {e}")))?;
        Ok(TraceRecorder {
            path: path.to_path_buf(),
            events: Vec::with_capacity(BATCH),
            tx: Some(tx),
            writer: Some(writer),
        })
    }

    /// The file being written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `a <id> <bytes> <stream>` for a block just served at `addr`.
    #[inline]
    pub fn alloc(&mut self, addr: usize, bytes: usize, stream: Stream) {
        self.push(Event { kind: Kind::Alloc, addr, bytes, stream });
    }

    /// `f <id>` for the block at `addr`; unknown addresses are ignored.
    #[inline]
    pub fn free(&mut self, addr: usize) {
        self.push(Event { kind: Kind::Free, addr, bytes: 0, stream: Stream::DEFAULT });
    }

    /// `u <id> <stream>`: work on `stream` uses the block at `addr`.
    #[inline]
    pub fn record_stream(&mut self, addr: usize, stream: Stream) {
        self.push(Event { kind: Kind::Use, addr, bytes: 0, stream });
    }

    /// `w <stream>`: the host waited for `stream`.
    #[inline]
    pub fn wait(&mut self, stream: Stream) {
        self.push(Event { kind: Kind::Wait, addr: 0, bytes: 0, stream });
    }

    /// Returns once everything recorded so far is in the file.
    pub fn flush(&mut self) -> Result<()> {
        self.hand_off();
        let (reply_tx, reply) = mpsc::channel();
        let answer = self
            .tx
            .as_ref()
            .and_then(|tx| tx.send(Msg::Flush(reply_tx)).ok())
            .and_then(|()| reply.recv().ok())
            .unwrap_or_else(|| Err("the trace writer thread has stopped".into()));
        answer.map_err(|why| Error::bad_config("trace", why))
    }

    #[inline]
    fn push(&mut self, e: Event) {
        self.events.push(e);
        if self.events.len() >= BATCH {
            self.hand_off();
        }
    }

    #[cold]
    fn hand_off(&mut self) {
        if self.events.is_empty() {
            return;
        }
        // A fresh buffer, not one recycled from the writer: reusing memory the
        // other core just read costs a cache-line transfer per event (measured:
        // about 4x the overhead of a new allocation).
        let full = std::mem::replace(&mut self.events, Vec::with_capacity(BATCH));
        if let Some(tx) = &self.tx {
            // A stopped writer has kept its error; `flush` reports it.
            let _ = tx.send(Msg::Batch(full));
        }
    }
}

impl Drop for TraceRecorder {
    fn drop(&mut self) {
        self.hand_off();
        drop(self.tx.take()); // the writer drains the channel, writes, and ends
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
    }
}

/// The writer thread's state: ids, stream numbers, text, the file.
struct Writer {
    file: File,
    path: PathBuf,
    text: Vec<u8>,
    ids: HashMap<usize, u64, BuildHasherDefault<AddrHasher>>,
    next_id: u64,
    /// Index = the stream's number in the trace.
    streams: Vec<Stream>,
    /// The first write error; later text is dropped.
    failed: Option<String>,
}

impl Writer {
    fn new(file: File, path: &Path) -> Writer {
        Writer {
            file,
            path: path.to_path_buf(),
            text: Vec::with_capacity(2 * FLUSH_AT),
            ids: HashMap::default(),
            next_id: 0,
            streams: Vec::new(),
            failed: None,
        }
    }

    fn run(&mut self, rx: Receiver<Msg>) {
        for msg in rx {
            match msg {
                Msg::Batch(batch) => {
                    for e in &batch {
                        self.line(e);
                    }
                    if self.text.len() >= FLUSH_AT {
                        self.write();
                    }
                }
                Msg::Flush(reply) => {
                    self.write();
                    let _ = reply.send(self.failed.clone().map_or(Ok(()), Err));
                }
            }
        }
        self.write();
    }

    fn line(&mut self, e: &Event) {
        let t = &mut self.text;
        match e.kind {
            Kind::Alloc => {
                let id = self.next_id;
                self.next_id += 1;
                self.ids.insert(e.addr, id);
                let s = stream_number(&mut self.streams, e.stream);
                t.extend_from_slice(b"a ");
                push_u64(t, id);
                t.push(b' ');
                push_u64(t, e.bytes as u64);
                t.push(b' ');
                push_u64(t, s as u64);
            }
            Kind::Free => {
                let Some(id) = self.ids.remove(&e.addr) else { return };
                t.extend_from_slice(b"f ");
                push_u64(t, id);
            }
            Kind::Use => {
                let Some(&id) = self.ids.get(&e.addr) else { return };
                let s = stream_number(&mut self.streams, e.stream);
                t.extend_from_slice(b"u ");
                push_u64(t, id);
                t.push(b' ');
                push_u64(t, s as u64);
            }
            Kind::Wait => {
                let s = stream_number(&mut self.streams, e.stream);
                t.extend_from_slice(b"w ");
                push_u64(t, s as u64);
            }
        }
        t.push(b'\n');
    }

    fn write(&mut self) {
        if self.failed.is_none() && !self.text.is_empty() {
            if let Err(e) = self.file.write_all(&self.text) {
                self.failed = Some(format!("writing '{}': {e}", self.path.display()));
            }
        }
        self.text.clear();
    }
}

/// The stream's number in the trace, assigned in order of first appearance.
fn stream_number(streams: &mut Vec<Stream>, stream: Stream) -> usize {
    // A handful of streams: a linear scan beats hashing.
    match streams.iter().position(|&s| s == stream) {
        Some(n) => n,
        None => {
            streams.push(stream);
            streams.len() - 1
        }
    }
}

/// Appends the decimal digits of `v`.
#[inline]
fn push_u64(buf: &mut Vec<u8>, mut v: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    buf.extend_from_slice(&digits[i..]);
}

/// Block addresses are distinct, aligned integers: one multiply mixes them
/// well enough, and SipHash would dominate the recorder's cost.
#[derive(Default)]
pub struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_usize(&mut self, v: usize) {
        let x = (v as u64) ^ ((v as u64) >> 29);
        self.0 = x.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(26);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{parse_file, Op};

    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("npualloc-record-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join(name)
    }

    #[test]
    fn digits() {
        for v in [0u64, 7, 10, 512, 1 << 40, u64::MAX] {
            let mut b = Vec::new();
            push_u64(&mut b, v);
            assert_eq!(String::from_utf8(b).unwrap(), v.to_string());
        }
    }

    #[test]
    fn writes_a_trace_that_parses_back() {
        let path = temp("rec.trace");
        let cfg = Config::parse("max_split_size_mb:64").unwrap();
        let (s1, s2) = (Stream(0x1000), Stream(0x2000));
        {
            let mut r = TraceRecorder::create(&path, 3, &cfg).unwrap();
            r.alloc(0x10_0000, 100, s2);
            r.alloc(0x20_0000, 200, s1);
            r.record_stream(0x10_0000, s1);
            r.free(0x10_0000);
            r.alloc(0x10_0000, 300, s2); // address reused: new id
            r.wait(s1);
            r.free(0x999); // unknown: ignored
        } // drop flushes
        let t = parse_file(&path).unwrap();
        assert_eq!(
            t.ops,
            vec![
                Op::Alloc { id: 0, bytes: 100, stream: 0 },
                Op::Alloc { id: 1, bytes: 200, stream: 1 },
                Op::Use { id: 0, stream: 1 },
                Op::Free { id: 0 },
                Op::Alloc { id: 2, bytes: 300, stream: 0 },
                Op::Wait { stream: 1 },
            ]
        );
        let source = t.source().unwrap();
        assert!(source.starts_with("npualloc ") && source.contains("device 3 config max_split_size_mb:64"), "{source}");
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn flushes_when_the_buffer_fills() {
        let path = temp("big.trace");
        let mut r = TraceRecorder::create(&path, 0, &Config::default()).unwrap();
        for i in 0..10_000usize {
            r.alloc(i * 512 + 512, 512, Stream(0));
        }
        // Full batches reach the file without a flush (the writer is asynchronous).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut on_disk = 0;
        while on_disk < FLUSH_AT && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
            on_disk = std::fs::metadata(&path).unwrap().len() as usize;
        }
        assert!(on_disk >= FLUSH_AT, "only {on_disk} bytes written before flush");
        r.flush().unwrap();
        assert_eq!(parse_file(&path).unwrap().ops.len(), 10_000);
        drop(r);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn uncreatable_file_is_a_config_error() {
        let e = TraceRecorder::create(Path::new("/nonexistent-dir/x.trace"), 0, &Config::default()).unwrap_err();
        assert!(matches!(&e, Error::BadConfig { key, .. } if key == "trace"), "{e}");
    }
}
