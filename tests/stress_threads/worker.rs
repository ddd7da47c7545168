//! One thread's work: its mallocs, frees, hand-overs, record_stream calls,
//! empty_cache calls and copy rounds on a held stream.

use super::blocks::{fill, holds, Block, Rng, CHUNK};
use super::common::{empty_cache, emu, free, malloc, record_stream, stats, Handle};
use super::report::{Counts, Problems};
use super::{COPY_EVERY, DEVICE, ITERATIONS, LARGEST, MAX_LIVE, SMALLEST, THREADS};
use npualloc::ffi::last_error::last_error_message;
use npualloc::ffi::memcpy::npualloc_memcpy2d_async;
use npualloc::ffi::npualloc_status::{self, NPUALLOC_ERR_OUT_OF_MEMORY, NPUALLOC_OK};
use npualloc::memcpy2d::{ACL_MEMCPY_DEVICE_TO_DEVICE, ACL_MEMCPY_DEVICE_TO_HOST};
use npualloc::runtime::Stream;
use std::ffi::c_void;
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, TrySendError};
use std::sync::Mutex;

/// The handle, shared by the threads (the C API is thread-safe).
#[derive(Clone, Copy)]
pub(crate) struct Shared(pub(crate) Handle);
// SAFETY: npualloc's functions are thread-safe; the handle outlives the threads.
unsafe impl Send for Shared {}
// SAFETY: as for Send: every function the threads call through it is thread-safe.
unsafe impl Sync for Shared {}

/// A copy round in flight on a held stream.
pub(crate) struct CopyRound {
    pub(crate) src_tag: u64,
    /// Allocated on the held stream; receives the device-to-device copy.
    pub(crate) dst: Block,
    /// Receives the device-to-host copy of `dst`, queued after it.
    pub(crate) host: Vec<u8>,
    pub(crate) rows: usize,
}

pub(crate) struct Streams {
    pub(crate) own: Vec<Stream>,
    pub(crate) held: Vec<Stream>,
    pub(crate) shared: Stream,
}

impl Streams {
    /// Any stream of the test (for record_stream): own, held, shared or default.
    pub(crate) fn any(&self, rng: &mut Rng) -> Stream {
        match rng.below(10) {
            0..=3 => self.own[rng.below(THREADS as u64) as usize],
            4..=5 => self.held[rng.below(THREADS as u64) as usize],
            6..=8 => self.shared,
            _ => Stream::DEFAULT,
        }
    }
}

pub(crate) struct Worker<'a> {
    pub(crate) a: Handle,
    pub(crate) t: usize,
    pub(crate) rng: Rng,
    pub(crate) streams: &'a Streams,
    pub(crate) problems: &'a Mutex<Problems>,
    pub(crate) live: Vec<Block>,
    pub(crate) next_tag: u64,
    pub(crate) c: Counts,
}

impl Worker<'_> {
    pub(crate) fn tag(&mut self) -> u64 {
        self.next_tag += 1;
        ((self.t as u64 + 1) << 56) | self.next_tag
    }

    pub(crate) fn problem(&self, corruption: bool, what: String) {
        let mut p = self.problems.lock().unwrap();
        if corruption {
            p.corruptions += 1;
        } else {
            p.bad_statuses += 1;
        }
        p.note(format!("thread {}: {what}", self.t));
    }

    /// A status that must be OK.
    pub(crate) fn ok(&self, st: npualloc_status, what: &str) -> bool {
        if st != NPUALLOC_OK {
            self.problem(false, format!("{what} returned {st:?}: {}", last_error_message()));
        }
        st == NPUALLOC_OK
    }

    /// malloc + fill; None on out of memory (counted) or a bad status (a problem).
    pub(crate) fn alloc(&mut self, len: usize, stream: Stream) -> Option<Block> {
        match malloc(self.a, len, stream) {
            Ok(ptr) => {
                if ptr % 512 != 0 {
                    self.problem(false, format!("malloc({len}) returned {ptr:#x}, not 512-byte aligned"));
                }
                let b = Block { ptr, len, tag: self.tag() };
                fill(b.ptr, b.len, b.tag);
                self.c.mallocs += 1;
                Some(b)
            }
            Err((NPUALLOC_ERR_OUT_OF_MEMORY, _)) => {
                self.c.ooms += 1;
                None
            }
            Err((st, msg)) => {
                self.problem(false, format!("malloc({len}) returned {st:?}: {msg}"));
                None
            }
        }
    }

    pub(crate) fn check(&mut self, b: &Block, what: &str) {
        if !holds(b.ptr, b.len, b.tag) {
            self.problem(
                true,
                format!("{what}: block {:#x} ({} bytes, tag {:#x}) was overwritten", b.ptr, b.len, b.tag),
            );
        }
        self.c.bytes_checked += b.len as u64;
    }

    pub(crate) fn check_and_free(&mut self, b: Block) {
        self.check(&b, "before free");
        if self.ok(free(self.a, b.ptr), "free") {
            self.c.frees += 1;
        }
    }

    /// Holds this thread's copy stream and queues the copies; None if memory
    /// ran out (nothing left queued or held).
    pub(crate) fn start_copy_round(&mut self) -> Option<CopyRound> {
        let own = self.streams.own[self.t];
        let held = self.streams.held[self.t];
        let rows = self.rng.log_uniform(1, 256);
        let len = rows * CHUNK;
        emu().hold(held);
        let src = self.alloc(len, own);
        let dst = src.and_then(|_| self.alloc(len, held));
        let (Some(src), Some(dst)) = (src, dst) else {
            if let Some(src) = src {
                self.check_and_free(src);
            }
            emu().release(held);
            self.c.copy_rounds_skipped += 1;
            return None;
        };
        let mut host = vec![0u8; len];
        // The source is read by the held stream: recorded there, then freed
        // while the copy is still queued. Its memory must not be handed out
        // again before the held stream has run the copy.
        let recorded = self.ok(record_stream(self.a, src.ptr, held), "record_stream(src, held)");
        // SAFETY: both blocks are live for the whole copy (src through its
        // recorded use, dst until the round ends); the host buffer is kept in
        // the round until then.
        let d2d = unsafe {
            npualloc_memcpy2d_async(
                self.a,
                dst.ptr as *mut c_void,
                CHUNK,
                src.ptr as *const c_void,
                CHUNK,
                CHUNK,
                rows,
                ACL_MEMCPY_DEVICE_TO_DEVICE,
                held.raw(),
            )
        };
        let d2d = self.ok(d2d, "memcpy2d_async(device to device)");
        // SAFETY: as above.
        let d2h = unsafe {
            npualloc_memcpy2d_async(
                self.a,
                host.as_mut_ptr() as *mut c_void,
                CHUNK,
                dst.ptr as *const c_void,
                CHUNK,
                CHUNK,
                rows,
                ACL_MEMCPY_DEVICE_TO_HOST,
                held.raw(),
            )
        };
        let d2h = self.ok(d2h, "memcpy2d_async(device to host)");
        if !(recorded && d2d && d2h) {
            // Already reported; finish the round without its data checks.
            emu().release(held);
            self.check_and_free(src);
            self.check_and_free(dst);
            return None;
        }
        self.check(&src, "source before the queued copy");
        if self.ok(free(self.a, src.ptr), "free(src with a queued use)") {
            self.c.frees += 1;
        }
        Some(CopyRound { src_tag: src.tag, dst, host, rows })
    }

    /// Releases the held stream, waits for it, and checks what the copies wrote.
    pub(crate) fn end_copy_round(&mut self, r: CopyRound) {
        let held = self.streams.held[self.t];
        let e = emu();
        e.release(held);
        if let Err(err) = e.rt.on_device(DEVICE, || e.rt.synchronize_stream(held)) {
            // 507000 here is a violation the emulator saw on this stream.
            self.problem(true, format!("copy round: synchronizing the held stream failed: {err}"));
        }
        let len = r.rows * CHUNK;
        if !holds(r.dst.ptr, len, r.src_tag) {
            self.problem(
                true,
                format!("copy round: the device copy ({len} bytes) did not read back the source's data"),
            );
        }
        if !holds(r.host.as_ptr() as usize, len, r.src_tag) {
            self.problem(true, format!("copy round: the host copy ({len} bytes) did not read back the source's data"));
        }
        self.c.bytes_checked += 2 * len as u64;
        if self.ok(free(self.a, r.dst.ptr), "free(dst)") {
            self.c.frees += 1;
        }
        self.c.copy_rounds += 1;
    }

    pub(crate) fn run(&mut self, next: &SyncSender<Block>, prev: &Receiver<Block>) {
        let mut round: Option<CopyRound> = None;
        for i in 0..ITERATIONS {
            // Blocks from the previous thread: check, then free or keep.
            match prev.try_recv() {
                Ok(b) => {
                    if self.live.len() < MAX_LIVE && self.rng.below(3) == 0 {
                        self.check(&b, "received");
                        self.live.push(b);
                        self.c.received_kept += 1;
                    } else {
                        self.check_and_free(b);
                        self.c.frees_of_received += 1;
                    }
                }
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => {}
            }
            if i % COPY_EVERY == 0 {
                if let Some(r) = round.take() {
                    self.end_copy_round(r);
                }
                round = self.start_copy_round();
            } else if i % COPY_EVERY == COPY_EVERY / 2 {
                if let Some(r) = round.take() {
                    self.end_copy_round(r);
                }
            }
            match self.rng.below(1000) {
                0..=429 if self.live.len() < MAX_LIVE => {
                    let len = self.rng.log_uniform(SMALLEST, LARGEST);
                    let stream = match self.rng.below(10) {
                        0..=5 => self.streams.own[self.t],
                        6..=8 => self.streams.shared,
                        _ => Stream::DEFAULT,
                    };
                    if let Some(b) = self.alloc(len, stream) {
                        self.live.push(b);
                    }
                }
                0..=799 if !self.live.is_empty() => {
                    let k = self.rng.below(self.live.len() as u64) as usize;
                    let b = self.live.swap_remove(k);
                    self.check_and_free(b);
                }
                800..=889 if !self.live.is_empty() => {
                    let k = self.rng.below(self.live.len() as u64) as usize;
                    let b = self.live.swap_remove(k);
                    self.check(&b, "before sending");
                    match next.try_send(b) {
                        Ok(()) => self.c.sent += 1,
                        Err(TrySendError::Full(b) | TrySendError::Disconnected(b)) => self.check_and_free(b),
                    }
                }
                890..=979 if !self.live.is_empty() => {
                    let b = self.live[self.rng.below(self.live.len() as u64) as usize];
                    let s = self.streams.any(&mut self.rng);
                    if self.ok(record_stream(self.a, b.ptr, s), "record_stream") {
                        self.c.records += 1;
                    }
                }
                980..=989 if self.t % 2 == 0 => {
                    if self.ok(empty_cache(self.a), "empty_cache") {
                        self.c.empties += 1;
                    }
                }
                _ => {
                    let s = stats(self.a);
                    if !(s.reserved_bytes >= s.allocated_bytes && s.allocated_bytes >= s.requested_bytes) {
                        self.problem(false, format!("inconsistent stats {s:?}"));
                    }
                }
            }
        }
        if let Some(r) = round.take() {
            self.end_copy_round(r);
        }
        while let Some(b) = self.live.pop() {
            self.check_and_free(b);
        }
    }
}
