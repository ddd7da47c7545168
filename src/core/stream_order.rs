//! Note [stream-ordered reuse]
//!
//! Every block belongs to the stream it was allocated on. Work on one stream
//! runs in order, so a block freed by the host is safe for *later* work on
//! the same stream at once: it goes straight back to that stream's pool.
//! Other streams may still be using it if the caller said so with
//! `record_stream`; then the free records an event on each of those streams
//! and the block waits here until all of them complete. Completion is polled
//! lazily — on an allocation miss, or when more than
//! `POLL_THRESHOLD` frees wait — never on every malloc.

use super::block::BlockId;
use crate::runtime::{Event, Stream};
use std::collections::HashMap;

/// Poll pending frees once this many wait, even without a miss.
pub const POLL_THRESHOLD: usize = 64;

#[derive(Debug)]
pub struct PendingFree {
    pub block: BlockId,
    pub events: Vec<Event>,
}

#[derive(Debug, Default)]
pub struct StreamOrder {
    /// Streams other than the owner recorded on allocated blocks.
    other_streams: HashMap<BlockId, Vec<Stream>>,
    pending: Vec<PendingFree>,
    pub pending_bytes: usize,
    /// Completed events kept for reuse (creating one costs a runtime call).
    event_pool: Vec<Event>,
}

impl StreamOrder {
    /// Notes that `stream` uses `block`. Returns false if already noted.
    pub fn add_use(&mut self, block: BlockId, stream: Stream) -> bool {
        let uses = self.other_streams.entry(block).or_default();
        if uses.contains(&stream) {
            return false;
        }
        uses.push(stream);
        true
    }

    /// Takes the other-stream list of a block being freed.
    pub fn take_uses(&mut self, block: BlockId) -> Vec<Stream> {
        self.other_streams.remove(&block).unwrap_or_default()
    }

    pub fn uses(&self, block: BlockId) -> &[Stream] {
        self.other_streams.get(&block).map(Vec::as_slice).unwrap_or(&[])
    }

    pub fn pooled_event(&mut self) -> Option<Event> {
        self.event_pool.pop()
    }

    pub fn return_event(&mut self, event: Event) {
        self.event_pool.push(event);
    }

    pub fn push_pending(&mut self, pending: PendingFree, size: usize) {
        self.pending_bytes += size;
        self.pending.push(pending);
    }

    pub fn pending(&self) -> &[PendingFree] {
        &self.pending
    }

    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    pub fn should_poll(&self) -> bool {
        self.pending.len() > POLL_THRESHOLD
    }

    /// Removes and returns the pending frees for which `done` is true.
    pub fn drain_completed(&mut self, mut done: impl FnMut(&PendingFree) -> bool) -> Vec<PendingFree> {
        let mut completed = Vec::new();
        let mut i = 0;
        while i < self.pending.len() {
            if done(&self.pending[i]) {
                completed.push(self.pending.swap_remove(i));
            } else {
                i += 1;
            }
        }
        completed
    }

    pub fn settle_bytes(&mut self, size: usize) {
        self.pending_bytes -= size;
    }

    /// Every event this allocator owns (pending and pooled), for teardown.
    pub fn take_all_events(&mut self) -> Vec<Event> {
        let mut all: Vec<Event> = self.event_pool.drain(..).collect();
        for p in self.pending.drain(..) {
            all.extend(p.events);
        }
        self.pending_bytes = 0;
        all
    }

    /// Number of blocks with other-stream uses (invariant checks).
    pub fn blocks_with_uses(&self) -> impl Iterator<Item = BlockId> + '_ {
        self.other_streams.keys().copied()
    }
}
