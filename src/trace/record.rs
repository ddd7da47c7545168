//! Records what a live allocator serves as an acl-trace v1 file.
//!
//! The allocator calls the recorder under its state lock, so an event only appends 16 bytes (address; size with
//! the op in its top bits) to a buffer reserved up front, plus a stream event when the stream changes (rare: most
//! programs allocate on one or two streams). Text is made on the calling thread by [`TraceRecorder::flush`]
//! (`DeviceAllocator::flush_trace`, teardown), on drop, and when the buffer holds [`EVENT_BOUND`] events (a rare
//! pause under the allocator's lock; its write error is reported by the next `flush`): each live address gets a
//! fresh id (ids are never reused, addresses are), streams are numbered by first appearance. The buffer costs
//! `EVENT_BOUND * 16` bytes of address space (16 MiB) per recording allocator, touched as events arrive.

use super::HEADER;
use crate::addr_hash::AddrMap;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::runtime::Stream;
use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Events buffered before the recording call converts and writes them.
pub const EVENT_BOUND: usize = 1 << 20;

/// Text bytes gathered before each write while converting.
const WRITE_AT: usize = 1 << 20;

/// The op, in the top three bits of [`Event::word`].
const KIND_SHIFT: u32 = 61;
const BYTES_MASK: u64 = (1 << KIND_SHIFT) - 1;
const ALLOC: u64 = 0;
const FREE: u64 = 1;
const USE: u64 = 2;
const WAIT: u64 = 3;
/// The following allocs, uses and waits are on the stream in `addr`.
const STREAM: u64 = 4;

/// One recorded call, as the allocator saw it.
#[derive(Debug, Clone, Copy)]
struct Event {
    addr: u64,
    /// The op (top three bits) and, for an allocation, its size in bytes.
    word: u64,
}

const _: () = assert!(std::mem::size_of::<Event>() == 16);

impl Event {
    #[inline]
    fn new(kind: u64, addr: u64, bytes: usize) -> Event {
        Event { addr, word: (kind << KIND_SHIFT) | (bytes as u64 & BYTES_MASK) }
    }

    fn kind(&self) -> u64 {
        self.word >> KIND_SHIFT
    }

    fn bytes(&self) -> u64 {
        self.word & BYTES_MASK
    }
}

/// Writes one allocator's events to a trace file.
pub struct TraceRecorder {
    /// Reserved for `bound` events; never grows.
    events: Vec<Event>,
    bound: usize,
    /// The stream of the last stream event buffered or converted.
    stream: Option<u64>,
    text: Text,
}

impl std::fmt::Debug for TraceRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceRecorder").field("path", &self.text.path).field("buffered", &self.events.len()).finish()
    }
}

impl TraceRecorder {
    /// Creates (truncates) `path` and writes the header; failure is a `BadConfig` naming the `trace` key.
    pub fn create(path: &Path, device: i32, config: &Config) -> Result<Self> {
        Self::with_bound(path, device, config, EVENT_BOUND)
    }

    fn with_bound(path: &Path, device: i32, config: &Config, bound: usize) -> Result<Self> {
        let bad = |why: String| Error::bad_config("trace", why);
        let mut file = File::create(path).map_err(|e| bad(format!("cannot create '{}': {e}", path.display())))?;
        // The trace's own path says nothing about the run; leave it out.
        let config = Config { trace: None, ..config.clone() };
        let header = format!(
            "{HEADER}\n# source: npualloc {} device {device} config {}\n",
            env!("CARGO_PKG_VERSION"),
            if config == Config::default() { "(default)".to_string() } else { one_line(&config.to_string()) },
        );
        file.write_all(header.as_bytes()).map_err(|e| bad(format!("writing '{}': {e}", path.display())))?;
        let bound = bound.max(1);
        let text = Text {
            file,
            path: path.to_path_buf(),
            buf: Vec::new(),
            ids: HashMap::default(),
            next_id: 0,
            streams: Vec::new(),
            stream: 0,
            failed: None,
        };
        Ok(TraceRecorder { events: Vec::with_capacity(bound), bound, stream: None, text })
    }

    /// `a <id> <bytes> <stream>` for a block just served at `addr`.
    #[inline]
    pub fn alloc(&mut self, addr: usize, bytes: usize, stream: Stream) {
        self.on_stream(stream);
        self.push(Event::new(ALLOC, addr as u64, bytes));
    }

    /// `f <id>` for the block at `addr`; unknown addresses are ignored.
    #[inline]
    pub fn free(&mut self, addr: usize) {
        self.push(Event::new(FREE, addr as u64, 0));
    }

    /// `u <id> <stream>`: work on `stream` uses the block at `addr`.
    #[inline]
    pub fn record_stream(&mut self, addr: usize, stream: Stream) {
        self.on_stream(stream);
        self.push(Event::new(USE, addr as u64, 0));
    }

    /// `w <stream>`: the host waited for `stream`.
    #[inline]
    pub fn wait(&mut self, stream: Stream) {
        self.on_stream(stream);
        self.push(Event::new(WAIT, 0, 0));
    }

    #[inline]
    fn on_stream(&mut self, stream: Stream) {
        let s = stream.0 as u64;
        if self.stream != Some(s) {
            self.stream = Some(s);
            self.push(Event::new(STREAM, s, 0));
        }
    }

    /// Converts and writes everything recorded so far; returns the first write error since creation, if any.
    pub fn flush(&mut self) -> Result<()> {
        self.spill();
        self.text.failed.as_ref().map_or(Ok(()), |why| Err(Error::bad_config("trace", why.clone())))
    }

    #[inline]
    fn push(&mut self, e: Event) {
        if self.events.len() >= self.bound {
            self.spill();
        }
        // Capacity was reserved for `bound` events: this never reallocates.
        self.events.push(e);
    }

    /// Turns the buffered events into text (written in `WRITE_AT` pieces), writes it and empties the buffer,
    /// keeping its memory.
    #[cold]
    #[inline(never)]
    fn spill(&mut self) {
        for e in &self.events {
            self.text.line(e);
        }
        self.events.clear();
        self.text.write();
    }
}

impl Drop for TraceRecorder {
    fn drop(&mut self) {
        // Nobody is left to hear about a write error.
        let _ = self.flush();
    }
}

/// The conversion's state: ids, stream numbers, pending text, the file.
struct Text {
    file: File,
    path: PathBuf,
    buf: Vec<u8>,
    ids: AddrMap<u64, u64>,
    next_id: u64,
    /// Index = the stream's number in the trace.
    streams: Vec<u64>,
    /// The number of the stream the next alloc, use or wait is on.
    stream: usize,
    /// The first write error; later text is dropped.
    failed: Option<String>,
}

impl Text {
    fn line(&mut self, e: &Event) {
        let s = self.stream as u64;
        // The op's letter, then its numbers.
        let (op, numbers, n) = match e.kind() {
            STREAM => {
                // The stream's number in the trace, by first appearance; a handful of streams: a linear scan beats
                // hashing.
                self.stream = self.streams.iter().position(|&known| known == e.addr).unwrap_or_else(|| {
                    self.streams.push(e.addr);
                    self.streams.len() - 1
                });
                return;
            }
            ALLOC => {
                let id = self.next_id;
                self.next_id += 1;
                self.ids.insert(e.addr, id);
                (b'a', [id, e.bytes(), s], 3)
            }
            FREE => {
                let Some(id) = self.ids.remove(&e.addr) else { return };
                (b'f', [id, 0, 0], 1)
            }
            USE => {
                let Some(&id) = self.ids.get(&e.addr) else { return };
                (b'u', [id, s, 0], 2)
            }
            _ => (b'w', [s, 0, 0], 1),
        };
        let t = &mut self.buf;
        t.push(op);
        for &v in &numbers[..n] {
            t.push(b' ');
            push_u64(t, v);
        }
        t.push(b'\n');
        if t.len() >= WRITE_AT {
            self.write();
        }
    }

    fn write(&mut self) {
        if self.failed.is_none() && !self.buf.is_empty() {
            if let Err(e) = self.file.write_all(&self.buf) {
                self.failed = Some(format!("writing '{}': {e}", self.path.display()));
            }
        }
        self.buf.clear();
    }
}

#[inline]
/// `s` with control characters escaped, so it stays one comment line (a config path may hold a newline).
fn one_line(s: &str) -> String {
    s.chars().map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() }).collect()
}

/// Appends the decimal digits of `v`.
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

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("npualloc-record-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join(name)
    }

    /// The file's comment lines (without `#`) and its event lines. The tools' reader checks what a recording
    /// means (tools/tests/trace_replay.rs replays one); here the text is held to the format's lines.
    fn lines(path: &Path) -> (Vec<String>, Vec<String>) {
        let text = std::fs::read_to_string(path).unwrap();
        assert_eq!(text.lines().next(), Some(HEADER));
        let (comments, events): (Vec<&str>, Vec<&str>) = text.lines().partition(|l| l.starts_with('#'));
        (comments.iter().map(|c| c[1..].to_string()).collect(), events.iter().map(|e| e.to_string()).collect())
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
    fn events_pack_op_and_size() {
        let e = Event::new(USE, 0x1234, 0);
        assert_eq!((e.kind(), e.bytes(), e.addr), (USE, 0, 0x1234));
        let big = (1usize << 40) + 3;
        let e = Event::new(ALLOC, 0x10, big);
        assert_eq!((e.kind(), e.bytes()), (ALLOC, big as u64));
        assert_eq!(Event::new(WAIT, 0, 0).kind(), WAIT);
        assert_eq!(Event::new(FREE, 0, 0).kind(), FREE);
        assert_eq!(Event::new(STREAM, 7, 0).kind(), STREAM);
    }

    #[test]
    fn a_stream_event_goes_in_only_when_the_stream_changes() {
        let path = temp("streams.trace");
        let mut r = TraceRecorder::create(&path, 0, &Config::default()).unwrap();
        r.alloc(0x1000, 512, Stream(5));
        r.alloc(0x2000, 512, Stream(5));
        r.free(0x1000);
        r.record_stream(0x2000, Stream(5));
        assert_eq!(r.events.len(), 5, "one stream event, then four calls");
        r.wait(Stream(6));
        r.alloc(0x3000, 512, Stream(5));
        assert_eq!(r.events.len(), 9, "each change of stream adds one");
        r.flush().unwrap();
        assert_eq!(lines(&path).1, ["a 0 512 0", "a 1 512 0", "f 0", "u 1 0", "w 1", "a 2 512 0"]);
    }

    #[test]
    fn writes_a_trace_that_parses_back() {
        let path = temp("rec.trace");
        let cfg = Config::parse("expandable_segments:false,max_split_size_mb:64").unwrap();
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
        let (comments, events) = lines(&path);
        assert_eq!(events, ["a 0 100 0", "a 1 200 1", "u 0 1", "f 0", "a 2 300 0", "w 1"]);
        let source = comments.iter().find_map(|c| c.strip_prefix(" source: ")).unwrap();
        assert!(
            source.starts_with("npualloc ")
                && source.contains("device 3 config expandable_segments:false,max_split_size_mb:64"),
            "{source}"
        );
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_config_with_a_newline_still_makes_a_one_line_header() {
        let path = temp("newline.trace");
        let cfg = Config::parse("acl_library:/opt/lib\na 0 1 0/libascendcl.so").unwrap();
        {
            let mut r = TraceRecorder::create(&path, 0, &cfg).unwrap();
            r.alloc(0x10_0000, 100, Stream(0x1000));
        }
        let (comments, events) = lines(&path);
        assert_eq!(events, ["a 0 100 0"], "the path injected no event");
        assert!(comments.iter().any(|c| c.contains("/opt/lib\\na 0 1 0/libascendcl.so")), "{comments:?}");
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn nothing_is_written_until_a_flush() {
        let path = temp("lazy.trace");
        let mut r = TraceRecorder::create(&path, 0, &Config::default()).unwrap();
        let header = std::fs::metadata(&path).unwrap().len();
        for i in 0..1000usize {
            r.alloc(i * 512 + 512, 512, Stream(0));
        }
        assert_eq!(std::fs::metadata(&path).unwrap().len(), header);
        r.flush().unwrap();
        assert_eq!(lines(&path).1.len(), 1000);
        drop(r);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_full_buffer_is_written_by_the_call_that_fills_it() {
        let path = temp("big.trace");
        let bound = 1000;
        let mut r = TraceRecorder::with_bound(&path, 0, &Config::default(), bound).unwrap();
        let cap = r.events.capacity();
        // Ids continue across spills: the same addresses come back.
        for round in 0..5usize {
            for i in 0..bound {
                if round % 2 == 0 {
                    r.alloc(i * 512 + 512, 512, Stream(round));
                } else {
                    r.free(i * 512 + 512);
                }
            }
        }
        // 5 * bound calls plus 3 stream events (streams 0, 2, 4): five full
        // buffers were written without a flush; the rest is pending.
        assert_eq!(r.events.len(), 3);
        assert_eq!(r.events.capacity(), cap, "the buffer never grows");
        // The three stream events were written too, as no lines.
        assert_eq!(lines(&path).1.len(), 5 * bound - 3);
        r.flush().unwrap();
        let events = lines(&path).1;
        assert_eq!(events.len(), 5 * bound);
        assert_eq!(events[2 * bound], format!("a {bound} 512 1"));
        assert_eq!(events[5 * bound - 1], format!("a {} 512 2", 3 * bound - 1));
        drop(r);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn uncreatable_file_is_a_config_error() {
        let e = TraceRecorder::create(Path::new("/nonexistent-dir/x.trace"), 0, &Config::default()).unwrap_err();
        assert!(matches!(&e, Error::BadConfig { key, .. } if key == "trace"), "{e}");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn write_errors_surface_on_flush() {
        let path = temp("full.trace");
        let mut r = TraceRecorder::create(&path, 0, &Config::default()).unwrap();
        r.text.file = File::options().write(true).open("/dev/full").unwrap();
        r.alloc(0x1000, 1, Stream(0));
        let e = r.flush().unwrap_err();
        assert!(
            matches!(&e, Error::BadConfig { key, .. } if key == "trace") && e.to_string().contains("full.trace"),
            "{e}"
        );
        // The error stays: a later flush reports it too.
        assert!(r.flush().is_err());
        drop(r);
        std::fs::remove_file(&path).unwrap();
    }
}
