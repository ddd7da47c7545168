//! Records what a live allocator serves as an acl-trace v1 file.
//!
//! The recorder names each live address with a fresh id (ids are never
//! reused, addresses are) and each runtime stream with a small number in order
//! of first appearance. Lines are buffered in memory and written when the
//! buffer passes [`FLUSH_AT`], on [`TraceRecorder::flush`] and on drop, so the
//! hot path costs a hash-map update and a few digits of formatting.

use super::format::HEADER;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::runtime::Stream;
use std::collections::HashMap;
use std::fs::File;
use std::hash::{BuildHasherDefault, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Buffered bytes that trigger a write to the file.
pub const FLUSH_AT: usize = 64 * 1024;

/// Writes one allocator's events to a trace file.
pub struct TraceRecorder {
    path: PathBuf,
    file: File,
    buf: Vec<u8>,
    ids: HashMap<usize, u64, BuildHasherDefault<AddrHasher>>,
    next_id: u64,
    /// Index = the stream's number in the trace.
    streams: Vec<Stream>,
    /// The first write error; later events are dropped and `flush` reports it.
    failed: Option<String>,
}

impl std::fmt::Debug for TraceRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceRecorder").field("path", &self.path).field("live", &self.ids.len()).finish()
    }
}

impl TraceRecorder {
    /// Creates (truncates) `path` and writes the header. A file that cannot be
    /// created is a `BadConfig` naming the `trace` key.
    pub fn create(path: &Path, device: i32, config: &Config) -> Result<Self> {
        let file = File::create(path)
            .map_err(|e| Error::bad_config("trace", format!("cannot create '{}': {e}", path.display())))?;
        // The trace's own path says nothing about the run; leave it out.
        let config = Config { trace: None, ..config.clone() };
        let mut rec = TraceRecorder {
            path: path.to_path_buf(),
            file,
            buf: Vec::with_capacity(FLUSH_AT + 256),
            ids: HashMap::default(),
            next_id: 0,
            streams: Vec::new(),
            failed: None,
        };
        let source = format!(
            "{HEADER}\n# source: npualloc {} device {device} config {}\n",
            env!("CARGO_PKG_VERSION"),
            if config == Config::default() { "(default)".to_string() } else { config.to_string() },
        );
        rec.buf.extend_from_slice(source.as_bytes());
        rec.flush()?;
        Ok(rec)
    }

    /// The file being written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `a <id> <bytes> <stream>` for a block just served at `addr`.
    #[inline]
    pub fn alloc(&mut self, addr: usize, bytes: usize, stream: Stream) {
        let id = self.next_id;
        self.next_id += 1;
        self.ids.insert(addr, id);
        let s = self.stream_number(stream);
        self.buf.extend_from_slice(b"a ");
        push_u64(&mut self.buf, id);
        self.buf.push(b' ');
        push_u64(&mut self.buf, bytes as u64);
        self.buf.push(b' ');
        push_u64(&mut self.buf, s as u64);
        self.end_line();
    }

    /// `f <id>` for the block at `addr`; unknown addresses are ignored.
    #[inline]
    pub fn free(&mut self, addr: usize) {
        let Some(id) = self.ids.remove(&addr) else { return };
        self.buf.extend_from_slice(b"f ");
        push_u64(&mut self.buf, id);
        self.end_line();
    }

    /// `u <id> <stream>`: work on `stream` uses the block at `addr`.
    pub fn record_stream(&mut self, addr: usize, stream: Stream) {
        let Some(&id) = self.ids.get(&addr) else { return };
        let s = self.stream_number(stream);
        self.buf.extend_from_slice(b"u ");
        push_u64(&mut self.buf, id);
        self.buf.push(b' ');
        push_u64(&mut self.buf, s as u64);
        self.end_line();
    }

    /// `w <stream>`: the host waited for `stream`.
    pub fn wait(&mut self, stream: Stream) {
        let s = self.stream_number(stream);
        self.buf.extend_from_slice(b"w ");
        push_u64(&mut self.buf, s as u64);
        self.end_line();
    }

    /// Writes everything buffered to the file.
    pub fn flush(&mut self) -> Result<()> {
        if self.failed.is_none() && !self.buf.is_empty() {
            if let Err(e) = self.file.write_all(&self.buf) {
                self.failed = Some(format!("writing '{}': {e}", self.path.display()));
            }
        }
        self.buf.clear();
        match &self.failed {
            Some(why) => Err(Error::bad_config("trace", why.clone())),
            None => Ok(()),
        }
    }

    #[inline]
    fn end_line(&mut self) {
        self.buf.push(b'\n');
        if self.buf.len() >= FLUSH_AT {
            // An error is kept in `failed` and reported by the next `flush`.
            let _ = self.flush();
        }
    }

    #[inline]
    fn stream_number(&mut self, stream: Stream) -> usize {
        // A handful of streams: a linear scan beats hashing.
        match self.streams.iter().position(|&s| s == stream) {
            Some(n) => n,
            None => {
                self.streams.push(stream);
                self.streams.len() - 1
            }
        }
    }
}

impl Drop for TraceRecorder {
    fn drop(&mut self) {
        let _ = self.flush();
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
        let on_disk = std::fs::metadata(&path).unwrap().len() as usize;
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
