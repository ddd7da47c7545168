//! The emulated device's work queues: one per stream, plus the events that
//! mark positions in them. Streams and events share one lock because every
//! event operation reads a stream's progress.
//!
//! Model: each unit of work on a stream gets the next sequence number
//! (`submitted`); `completed` is the highest number finished. Work runs at
//! once when the stream is not held and nothing is queued before it;
//! otherwise it waits in `queue` until `aclemu_stream_release` or a
//! synchronize call. An event records `(stream, seq)` and is complete when
//! that stream's `completed >= seq`, so record and query are O(1) and make no
//! syscalls. `aclrtStreamWaitEvent` queues a `Wait` that blocks later work on
//! the waiting stream until the event's stream gets that far.
//!
//! Synchronize calls force work through even on held streams (the device
//! finishes queued work; the hold applies again to later work) and force the
//! streams a forced `Wait` depends on, instead of hanging as a real device
//! would if a test never released them.
//!
//! Queued ops and copies pin the device ranges they use until they run
//! (Note [pins] in `violation`); this module answers which pins are pending
//! and whether one piece of work is ordered after another, and keeps each
//! stream's "a violation involved me" flag.

use crate::capture::Captures;
use crate::copy::Copy2d;
use crate::device;
use crate::error::{AclResult, ACL_ERROR_RT_INVALID_HANDLE};
use crate::ffi::{handle_id, lock, Kind};
use crate::ipc::event::{EventSlot, SlotRef};
use crate::memcpy::Fill;
use crate::violation::{self, Span};
use std::collections::{HashMap, VecDeque};
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard};

/// One unit of stream work.
#[derive(Clone)]
pub enum Work {
    /// Nothing to do but occupy a slot (event records).
    Marker,
    /// An op of `aclemu_run_op`, using (pinning) the device ranges `spans`.
    Op { spans: Vec<Span> },
    /// A queued copy (2D, or 1D as one row), performed when the work runs;
    /// `pins` are its device-side extents.
    Copy { copy: Copy2d, pins: Vec<Span> },
    /// A queued memset, performed when the work runs; `pins` is its range
    /// when that is device memory.
    Fill { fill: Fill, pins: Vec<Span> },
    /// Later work waits until `stream` completed `seq`.
    Wait { stream: u64, seq: u64 },
    /// An event record made during capture (only in a captured model:
    /// each execute turns it into a `Marker` the event is recorded at).
    Record { event: u64 },
    /// A record of an IPC event: running it completes record `n`, in
    /// every process that holds the event.
    Signal { slot: SlotRef, n: u64 },
    /// Later work waits until record `n` of an IPC event finished, on
    /// whatever stream of whatever process made it.
    RemoteWait { slot: SlotRef, n: u64 },
}

impl Work {
    /// The device ranges this work uses while it is queued.
    pub fn pins(&self) -> &[Span] {
        match self {
            Work::Op { spans } => spans,
            Work::Copy { pins, .. } | Work::Fill { pins, .. } => pins,
            _ => &[],
        }
    }
}

/// Queued pieces of work that pin ranges, process-wide; read without the
/// engine lock so frees and unmaps skip the pin check when nothing is queued.
static PINNED: AtomicUsize = AtomicUsize::new(0);

/// True if some queued work may pin device memory.
pub fn any_pinned() -> bool {
    PINNED.load(Ordering::Acquire) > 0
}

struct StreamQ {
    device: i32,
    held: bool,
    /// A violation involved this stream since its last synchronize/release.
    faulted: bool,
    submitted: u64,
    completed: u64,
    queue: VecDeque<(u64, Work)>,
}

/// An event: the device current at creation, its flags, whether it came
/// from `aclrtCreateEventExWithFlag` (`ex`: complete until first recorded,
/// not counted against the SYNC limit), whether streams can wait for it,
/// the last record, and how many more queries report NOT_READY after its
/// work completed.
pub struct EventRec {
    pub device: i32,
    pub flags: u32,
    pub ex: bool,
    pub waitable: bool,
    pub at: Option<(u64, u64)>,
    pub lag_left: u32,
    /// An IPC event's shared slot, and the number of the record `at` made.
    pub ipc: Option<(EventSlot, u64)>,
}

/// Streams keyed by id (default streams use `device + 1`, created streams
/// start at `FIRST_CREATED`), events keyed by id.
pub struct Engine {
    streams: HashMap<u64, StreamQ>,
    events: HashMap<u64, EventRec>,
    /// Live SYNC events per device (they count against a limit).
    sync_events: HashMap<i32, usize>,
    next_stream: u64,
    next_event: u64,
    /// Queued `RemoteWait`s: while there are any, another process may let
    /// work run, so queries settle first (`poll_remote`).
    remote_waits: usize,
    /// Streams capturing and captured models (`capture`).
    pub capture: Captures,
}

const FIRST_CREATED: u64 = 1 << 20;
/// Bound on the recursion when a forced wait forces another stream.
const MAX_FORCE_DEPTH: u32 = 16;

static ENGINE: LazyLock<Mutex<Engine>> = LazyLock::new(|| {
    Mutex::new(Engine {
        streams: HashMap::new(),
        events: HashMap::new(),
        sync_events: HashMap::new(),
        next_stream: FIRST_CREATED,
        next_event: 1,
        remote_waits: 0,
        capture: Captures::default(),
    })
});

/// Locks the engine. Never held across user callbacks.
pub fn engine() -> MutexGuard<'static, Engine> {
    lock(&ENGINE)
}

impl Engine {
    /// The stream a C handle names: NULL is the current device's default
    /// stream (107002 without a current device); an unknown handle is 107017.
    pub fn resolve(&mut self, stream: *mut c_void) -> AclResult<u64> {
        if stream.is_null() {
            let dev = device::current()?;
            let key = dev as u64 + 1;
            self.streams.entry(key).or_insert_with(|| StreamQ::new(dev));
            return Ok(key);
        }
        handle_id(Kind::Stream, stream).filter(|id| self.streams.contains_key(id)).ok_or(ACL_ERROR_RT_INVALID_HANDLE)
    }

    /// Creates a stream on `device`; returns its id.
    pub fn create_stream(&mut self, device: i32) -> u64 {
        let id = self.next_stream;
        self.next_stream += 1;
        self.streams.insert(id, StreamQ::new(device));
        id
    }

    /// Finishes a stream's work and removes it; returns its device.
    pub fn destroy_stream(&mut self, key: u64) -> i32 {
        self.finish(key, u64::MAX);
        let device = self.streams.remove(&key).map_or(-1, |s| s.device);
        self.settle();
        device
    }

    /// Removes a stream without running its queued work (a forced destroy):
    /// the work is dropped with its pins, and streams waiting for it go on.
    /// Returns the stream's device.
    pub fn discard_stream(&mut self, key: u64) -> i32 {
        let Some(s) = self.streams.remove(&key) else {
            return -1;
        };
        let pinned = s.queue.iter().filter(|(_, w)| !w.pins().is_empty()).count();
        PINNED.fetch_sub(pinned, Ordering::AcqRel);
        self.remote_waits -= s.queue.iter().filter(|(_, w)| matches!(w, Work::RemoteWait { .. })).count();
        // A dropped record counts as finished, so nobody waits for it.
        for (_, w) in &s.queue {
            if let Work::Signal { slot, n } = w {
                slot.complete(*n);
            }
        }
        self.settle();
        s.device
    }

    /// Runs what may run without forcing anything; true if stream `key`
    /// then has no queued work (false: it is held, or waits for a held one).
    pub fn drains_unforced(&mut self, key: u64) -> bool {
        self.settle();
        self.is_idle(key)
    }

    /// As `drains_unforced`, for every stream of `device`.
    pub fn device_drains_unforced(&mut self, device: i32) -> bool {
        self.settle();
        self.streams.values().all(|s| s.device != device || s.queue.is_empty())
    }

    /// The device a stream belongs to.
    pub fn device_of(&self, key: u64) -> i32 {
        self.streams.get(&key).map_or(-1, |s| s.device)
    }

    /// True if `key` has no queued work.
    pub fn is_idle(&self, key: u64) -> bool {
        self.streams.get(&key).is_none_or(|s| s.completed >= s.submitted)
    }

    /// True if `key` finished work `seq` (a destroyed stream finished all).
    pub fn is_done(&self, key: u64, seq: u64) -> bool {
        self.streams.get(&key).is_none_or(|s| s.completed >= seq)
    }

    /// Appends work to a stream; runs it at once when nothing holds it back.
    /// Returns the work's sequence number; 0 when a capture on the stream
    /// recorded the work instead.
    pub fn submit(&mut self, key: u64, mut work: Work) -> u64 {
        if self.capture.any() {
            match self.capture.record(key, work) {
                None => return 0,
                Some(w) => work = w,
            }
        }
        let ready = match &work {
            Work::Wait { stream, seq } => self.is_done(*stream, *seq),
            Work::RemoteWait { slot, n } => slot.reached(*n),
            _ => true,
        };
        let s = self.streams.get_mut(&key).expect("stream resolved by the caller");
        s.submitted += 1;
        let seq = s.submitted;
        if ready && !s.held && s.queue.is_empty() {
            s.completed = seq;
            self.run(key, seq, work);
        } else {
            if !work.pins().is_empty() {
                PINNED.fetch_add(1, Ordering::AcqRel);
            }
            if matches!(work, Work::RemoteWait { .. }) {
                self.remote_waits += 1;
            }
            s.queue.push_back((seq, work));
        }
        seq
    }

    /// Appends work that runs at once, even on a held stream whose queue is
    /// empty (a copy the runtime performs synchronously).
    pub fn submit_now(&mut self, key: u64, work: Work) {
        let s = self.streams.get_mut(&key).expect("stream resolved by the caller");
        debug_assert!(s.queue.is_empty(), "the stream was finished first");
        s.submitted += 1;
        s.completed = s.submitted;
        let seq = s.submitted;
        self.run(key, seq, work);
    }

    /// Performs work `seq` of stream `key`, which has just left the queue
    /// (or never entered it): checks its memory, then runs a copy.
    fn run(&mut self, key: u64, seq: u64, work: Work) {
        if !work.pins().is_empty() && !violation::still_device_memory(work.pins()) {
            let what = "queued work ran on memory no longer allocated or mapped";
            self.violation(&[key], what);
            // A copy into unmapped memory would fault the host: skip it.
            return;
        }
        let written = match &work {
            Work::Copy { copy, .. } => copy.dst_span(),
            Work::Fill { fill, .. } => fill.span(),
            Work::Signal { slot, n } => return slot.complete(*n),
            _ => return,
        };
        // Fine when the pinning work waits for this write.
        let mut involved =
            self.conflicts(key, written, |eng, pin_stream, pin_seq| eng.waits_for(pin_stream, pin_seq, key, seq, 0));
        if !involved.is_empty() {
            involved.push(key);
            let what = "a copy or memset wrote into memory another stream's queued work uses";
            self.violation(&involved, what);
        }
        // SAFETY: the copy or memset was validated when queued and its
        // device extents are still allocated or mapped (checked above); the
        // caller of the async call keeps host buffers alive until the
        // stream finishes it.
        unsafe {
            match work {
                Work::Copy { copy, .. } => copy.run(),
                Work::Fill { fill, .. } => fill.run(),
                _ => {}
            }
        }
    }

    /// Records a violation involving `streams`: each one's next synchronize
    /// or release reports it.
    pub fn violation(&mut self, streams: &[u64], what: &str) {
        for key in streams {
            if let Some(s) = self.streams.get_mut(key) {
                s.faulted = true;
            }
        }
        violation::record(what);
    }

    /// Clears and returns `key`'s violation flag.
    pub fn take_fault(&mut self, key: u64) -> bool {
        self.streams.get_mut(&key).is_some_and(|s| std::mem::take(&mut s.faulted))
    }

    /// Clears the violation flags of every stream of `device`; true if any
    /// was set.
    pub fn take_device_faults(&mut self, device: i32) -> bool {
        let mut any = false;
        for s in self.streams.values_mut().filter(|s| s.device == device) {
            any |= std::mem::take(&mut s.faulted);
        }
        any
    }

    /// The streams other than `writer` whose queued work pins memory inside
    /// `span`, leaving out pins for which `ordered(engine, stream, seq)`
    /// holds.
    pub fn conflicts(&self, writer: u64, span: Span, ordered: impl Fn(&Engine, u64, u64) -> bool) -> Vec<u64> {
        let mut hit = Vec::new();
        if !any_pinned() {
            return hit;
        }
        for (&key, s) in self.streams.iter().filter(|(&k, _)| k != writer) {
            let clash = s
                .queue
                .iter()
                .any(|(seq, w)| w.pins().iter().any(|p| violation::overlap(*p, span)) && !ordered(self, key, *seq));
            if clash {
                hit.push(key);
            }
        }
        hit
    }

    /// A write done at once (a synchronous copy or memset) into `span`: a
    /// violation if queued work of any stream pins memory in it.
    pub fn write_now(&mut self, span: Span) {
        let involved = self.pinned_by(span);
        if !involved.is_empty() {
            self.violation(&involved, "a synchronous copy or memset wrote into memory queued work uses");
        }
    }

    /// The streams whose queued work pins memory inside `span` (memory
    /// being freed or unmapped).
    pub fn pinned_by(&self, span: Span) -> Vec<u64> {
        self.conflicts(0, span, |_, _, _| false)
    }

    /// True if queued work before `before` on stream `key` waits, directly
    /// or through other streams' queued waits, for `target` to complete
    /// `target_seq`: then the later work runs after `target`'s work.
    pub fn waits_for(&self, key: u64, before: u64, target: u64, target_seq: u64, depth: u32) -> bool {
        let Some(s) = self.streams.get(&key) else {
            return false;
        };
        s.queue.iter().take_while(|(seq, _)| *seq < before).any(|(_, w)| match *w {
            Work::Wait { stream, seq } => {
                (stream == target && seq >= target_seq)
                    || (depth < MAX_FORCE_DEPTH && self.waits_for(stream, seq + 1, target, target_seq, depth + 1))
            }
            _ => false,
        })
    }

    /// Holds or releases a stream; releasing runs what may now run.
    pub fn set_held(&mut self, key: u64, held: bool) {
        if let Some(s) = self.streams.get_mut(&key) {
            s.held = held;
        }
        if !held {
            self.pump(key, None, 0);
            self.settle();
        }
    }

    /// Finishes a stream's work up to `seq` (all of it for `u64::MAX`),
    /// held or not, as a synchronize call does.
    pub fn finish(&mut self, key: u64, seq: u64) {
        self.pump(key, Some(seq), 0);
        self.settle();
    }

    /// Finishes the queued work of every stream of `device`.
    pub fn finish_device(&mut self, device: i32) {
        let keys: Vec<u64> =
            self.streams.iter().filter(|(_, s)| s.device == device && !s.queue.is_empty()).map(|(&k, _)| k).collect();
        for key in keys {
            self.pump(key, Some(u64::MAX), 0);
        }
        self.settle();
    }

    /// Runs queued work from the front of `key`'s queue: unforced work only
    /// while the stream is not held and its waits are met, forced work (seq
    /// <= `force`) regardless. Returns true if anything ran.
    fn pump(&mut self, key: u64, force: Option<u64>, depth: u32) -> bool {
        let mut progressed = false;
        while let Some(s) = self.streams.get(&key) {
            let Some((seq, work)) = s.queue.front().cloned() else {
                break;
            };
            let forced = force.is_some_and(|limit| seq <= limit);
            if s.held && !forced {
                break;
            }
            match &work {
                Work::Wait { stream, seq: wanted } if !self.is_done(*stream, *wanted) => {
                    if !forced {
                        break;
                    }
                    if depth < MAX_FORCE_DEPTH {
                        self.pump(*stream, Some(*wanted), depth + 1);
                    }
                }
                Work::RemoteWait { slot, n } if !slot.reached(*n) => {
                    if !forced {
                        break;
                    }
                    // Another process finishes the record: wait for it, as
                    // the device would, but not forever; this process's
                    // other streams go on meanwhile (the record may wait
                    // for one of them). The engine stays locked: other
                    // threads of this process wait too.
                    let (slot, n) = (slot.clone(), *n);
                    if wait_remote(&slot, n, || self.settle()) {
                        // `settle` may have run this wait and more after it:
                        // look at the front again.
                        continue;
                    }
                    // Still unmet, so still at the front: dropped below.
                    self.violation(&[key], "a synchronize waited for an IPC event record that never finished");
                }
                _ => {}
            }
            let s = self.streams.get_mut(&key).expect("checked above");
            s.queue.pop_front();
            s.completed = seq;
            if !work.pins().is_empty() {
                PINNED.fetch_sub(1, Ordering::AcqRel);
            }
            if matches!(work, Work::RemoteWait { .. }) {
                self.remote_waits -= 1;
            }
            self.run(key, seq, work);
            progressed = true;
        }
        progressed
    }

    /// Lets queued work run that another process's IPC event records now
    /// allow (cheap when no stream waits for one).
    pub fn poll_remote(&mut self) {
        if self.remote_waits > 0 {
            self.settle();
        }
    }

    /// Lets every unheld stream run what its waits now allow, until nothing
    /// changes (one stream finishing can unblock another).
    fn settle(&mut self) {
        loop {
            let keys: Vec<u64> =
                self.streams.iter().filter(|(_, s)| !s.held && !s.queue.is_empty()).map(|(&k, _)| k).collect();
            let mut progressed = false;
            for key in keys {
                progressed |= self.pump(key, None, 0);
            }
            if !progressed {
                break;
            }
        }
    }

    /// Appends a copy of `model`'s recorded work to stream `key`, where it
    /// runs like work launched there; captured event records become
    /// markers the events are recorded at.
    pub fn execute(&mut self, model: u64, key: u64) -> AclResult<()> {
        if self.capture.is_capturing(key) {
            return Err(crate::capture::ACL_ERROR_RT_STREAM_CAPTURED);
        }
        for work in self.capture.replay(model)? {
            match work {
                Work::Record { event } => {
                    let seq = self.submit(key, Work::Marker);
                    if let Some(rec) = self.events.get_mut(&event) {
                        rec.at = Some((key, seq));
                        rec.lag_left = crate::event::lag();
                    }
                }
                Work::Op { spans } => {
                    // An op writes its blocks when it starts, as at launch
                    // (`run_op`): fine when this stream waits for the pinning work.
                    let mut involved = Vec::new();
                    for &span in &spans {
                        for other in self.conflicts(key, span, |eng, s, seq| eng.waits_for(key, u64::MAX, s, seq, 0)) {
                            if !involved.contains(&other) {
                                involved.push(other);
                            }
                        }
                    }
                    if !involved.is_empty() {
                        involved.push(key);
                        self.violation(&involved, "a replayed op wrote into memory another stream's queued work uses");
                    }
                    self.submit(key, Work::Op { spans });
                }
                other => {
                    self.submit(key, other);
                }
            }
        }
        Ok(())
    }

    /// Creates an event; returns its id.
    pub fn create_event(&mut self, device: i32, flags: u32, ex: bool, waitable: bool) -> u64 {
        let id = self.next_event;
        self.next_event += 1;
        if counts_as_sync(flags, ex) {
            *self.sync_events.entry(device).or_default() += 1;
        }
        self.events.insert(id, EventRec { device, flags, ex, waitable, at: None, lag_left: 0, ipc: None });
        id
    }

    /// The event a C handle names, or 107017.
    pub fn event_id(&self, event: *mut c_void) -> AclResult<u64> {
        handle_id(Kind::Event, event).filter(|id| self.events.contains_key(id)).ok_or(ACL_ERROR_RT_INVALID_HANDLE)
    }

    pub fn event(&self, id: u64) -> &EventRec {
        &self.events[&id]
    }

    pub fn event_mut(&mut self, id: u64) -> &mut EventRec {
        self.events.get_mut(&id).expect("event resolved by the caller")
    }

    pub fn remove_event(&mut self, id: u64) -> Option<EventRec> {
        let rec = self.events.remove(&id)?;
        if counts_as_sync(rec.flags, rec.ex) {
            if let Some(n) = self.sync_events.get_mut(&rec.device) {
                *n -= 1;
            }
        }
        Some(rec)
    }

    /// Live events of `device` with the SYNC flag.
    pub fn sync_events(&self, device: i32) -> usize {
        self.sync_events.get(&device).copied().unwrap_or(0)
    }

    /// Ends the reporting lag of events recorded on streams `on` selects:
    /// after a synchronization the host knows their work finished.
    pub fn clear_lag(&mut self, on: impl Fn(&Engine, u64) -> bool) {
        let keys: Vec<u64> = self
            .events
            .iter()
            .filter(|(_, e)| e.lag_left > 0 && e.at.is_some_and(|(s, _)| on(self, s)))
            .map(|(&id, _)| id)
            .collect();
        for id in keys {
            self.event_mut(id).lag_left = 0;
        }
    }
}

/// How long a synchronize waits for another process to finish an IPC
/// event record before it reports a violation and goes on
/// (`ACLEMU_IPC_WAIT_SECS`, default 60): a peer that never runs its stream
/// would hang a real device; a test should fail instead.
pub fn remote_wait_limit() -> std::time::Duration {
    static SECS: LazyLock<u64> =
        LazyLock::new(|| std::env::var("ACLEMU_IPC_WAIT_SECS").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(60));
    std::time::Duration::from_secs(*SECS)
}

/// Waits (sleeping, and calling `progress` between looks) until record
/// `n` finished; false after the limit.
pub fn wait_remote(slot: &SlotRef, n: u64, mut progress: impl FnMut()) -> bool {
    let start = std::time::Instant::now();
    loop {
        progress();
        if slot.reached(n) {
            return true;
        }
        if start.elapsed() > remote_wait_limit() {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_micros(100));
    }
}

/// True for the events the per-device SYNC limit counts.
fn counts_as_sync(flags: u32, ex: bool) -> bool {
    !ex && flags & crate::event::ACL_EVENT_SYNC != 0
}

impl StreamQ {
    fn new(device: i32) -> Self {
        StreamQ { device, held: false, faulted: false, submitted: 0, completed: 0, queue: VecDeque::new() }
    }
}
