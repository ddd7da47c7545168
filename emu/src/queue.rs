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

use crate::copy::Copy2d;
use crate::device;
use crate::error::{AclResult, ACL_ERROR_RT_INVALID_HANDLE};
use crate::ffi::{handle_id, lock, Kind};
use std::collections::{HashMap, VecDeque};
use std::ffi::c_void;
use std::sync::{LazyLock, Mutex, MutexGuard};

/// One unit of stream work.
#[derive(Clone, Copy)]
pub enum Work {
    /// Nothing to do but occupy a slot (event records, ops of `aclemu_run_op`).
    Marker,
    /// A queued 2D copy, performed when the work runs.
    Copy(Copy2d),
    /// Later work waits until `stream` completed `seq`.
    Wait { stream: u64, seq: u64 },
}

impl Work {
    fn run(self) {
        if let Work::Copy(copy) = self {
            // SAFETY: the copy was validated when queued; the caller of the
            // async copy keeps both buffers alive until the stream finishes it.
            unsafe { copy.run() };
        }
    }
}

struct StreamQ {
    device: i32,
    held: bool,
    submitted: u64,
    completed: u64,
    queue: VecDeque<(u64, Work)>,
}

/// An event: the device current at creation, its flags, and the last record.
pub struct EventRec {
    pub device: i32,
    pub flags: u32,
    pub at: Option<(u64, u64)>,
}

/// Streams keyed by id (default streams use `device + 1`, created streams
/// start at `FIRST_CREATED`), events keyed by id.
pub struct Engine {
    streams: HashMap<u64, StreamQ>,
    events: HashMap<u64, EventRec>,
    next_stream: u64,
    next_event: u64,
}

const FIRST_CREATED: u64 = 1 << 20;
/// Bound on the recursion when a forced wait forces another stream.
const MAX_FORCE_DEPTH: u32 = 16;

static ENGINE: LazyLock<Mutex<Engine>> = LazyLock::new(|| {
    Mutex::new(Engine {
        streams: HashMap::new(),
        events: HashMap::new(),
        next_stream: FIRST_CREATED,
        next_event: 1,
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
        handle_id(Kind::Stream, stream)
            .filter(|id| self.streams.contains_key(id))
            .ok_or(ACL_ERROR_RT_INVALID_HANDLE)
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
    /// Returns the work's sequence number.
    pub fn submit(&mut self, key: u64, work: Work) -> u64 {
        let ready = match work {
            Work::Wait { stream, seq } => self.is_done(stream, seq),
            _ => true,
        };
        let s = self
            .streams
            .get_mut(&key)
            .expect("stream resolved by the caller");
        s.submitted += 1;
        let seq = s.submitted;
        if ready && !s.held && s.queue.is_empty() {
            s.completed = seq;
            work.run();
        } else {
            s.queue.push_back((seq, work));
        }
        seq
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
        let keys: Vec<u64> = self
            .streams
            .iter()
            .filter(|(_, s)| s.device == device && !s.queue.is_empty())
            .map(|(&k, _)| k)
            .collect();
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
            let Some(&(seq, work)) = s.queue.front() else {
                break;
            };
            let forced = force.is_some_and(|limit| seq <= limit);
            if s.held && !forced {
                break;
            }
            if let Work::Wait {
                stream,
                seq: wanted,
            } = work
            {
                if !self.is_done(stream, wanted) {
                    if !forced {
                        break;
                    }
                    if depth < MAX_FORCE_DEPTH {
                        self.pump(stream, Some(wanted), depth + 1);
                    }
                }
            }
            let s = self.streams.get_mut(&key).expect("checked above");
            s.queue.pop_front();
            s.completed = seq;
            work.run();
            progressed = true;
        }
        progressed
    }

    /// Lets every unheld stream run what its waits now allow, until nothing
    /// changes (one stream finishing can unblock another).
    fn settle(&mut self) {
        loop {
            let keys: Vec<u64> = self
                .streams
                .iter()
                .filter(|(_, s)| !s.held && !s.queue.is_empty())
                .map(|(&k, _)| k)
                .collect();
            let mut progressed = false;
            for key in keys {
                progressed |= self.pump(key, None, 0);
            }
            if !progressed {
                break;
            }
        }
    }

    /// Creates an event; returns its id.
    pub fn create_event(&mut self, device: i32, flags: u32) -> u64 {
        let id = self.next_event;
        self.next_event += 1;
        self.events.insert(
            id,
            EventRec {
                device,
                flags,
                at: None,
            },
        );
        id
    }

    /// The event a C handle names, or 107017.
    pub fn event_id(&self, event: *mut c_void) -> AclResult<u64> {
        handle_id(Kind::Event, event)
            .filter(|id| self.events.contains_key(id))
            .ok_or(ACL_ERROR_RT_INVALID_HANDLE)
    }

    pub fn event(&self, id: u64) -> &EventRec {
        &self.events[&id]
    }

    pub fn event_mut(&mut self, id: u64) -> &mut EventRec {
        self.events
            .get_mut(&id)
            .expect("event resolved by the caller")
    }

    pub fn remove_event(&mut self, id: u64) -> Option<EventRec> {
        self.events.remove(&id)
    }
}

impl StreamQ {
    fn new(device: i32) -> Self {
        StreamQ {
            device,
            held: false,
            submitted: 0,
            completed: 0,
            queue: VecDeque::new(),
        }
    }
}
