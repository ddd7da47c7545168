//! Stream ordering of a shard's frees: a block other streams used waits here for their events, polled by
//! frees and misses, never on a cache hit (docs/design.md, Note [stream-ordered reuse]).

use super::block::BlockId;
use crate::core::report::stats::DeviceCounters;
use crate::error::{Error, Result};
use crate::runtime::{Event, Runtime, Stream};
use std::collections::HashMap;

/// Poll pending frees at any free once this many wait.
pub(crate) const POLL_THRESHOLD: usize = 64;

/// The most frees between two polls while frees wait and none completes.
pub(crate) const MAX_POLL_GAP: u8 = 64;

/// When a free that finds frees waiting polls them: at the first such free after a deferral or a poll that
/// reaped something, then after 2, 4, ... up to `MAX_POLL_GAP` more while polls find nothing done. Two
/// bytes, so it fits in the pool's padding (a bigger shard costs the hot path instructions).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct PollClock {
    countdown: u8,
    gap: u8,
}

impl PollClock {
    /// Counts one free that found frees waiting; true when it should poll.
    pub fn due(&mut self) -> bool {
        self.countdown = self.countdown.saturating_sub(1);
        self.countdown == 0
    }

    /// After a deferral: the next free that finds frees waiting polls.
    pub fn poll_at_next_free(&mut self) {
        *self = PollClock { countdown: 1, gap: 1 };
    }

    /// After a free's poll that reaped `reaped` frees: back off while nothing completes.
    pub fn polled(&mut self, reaped: usize) {
        let gap = if reaped == 0 { self.gap.saturating_mul(2).clamp(1, MAX_POLL_GAP) } else { 1 };
        *self = PollClock { countdown: gap, gap };
    }
}

#[derive(Debug)]
struct PendingFree {
    block: BlockId,
    events: Vec<Event>,
    size: usize,
    /// The export record other processes hold it by (`sharing`): it waits until none does.
    hold: Option<u32>,
}

impl PendingFree {
    fn done(&self, rt: &Runtime) -> bool {
        self.events.iter().all(|&ev| rt.event_complete(ev).unwrap_or(false))
            && self.hold.is_none_or(|slot| !crate::core::sharing::table::held(slot))
    }
}

/// The runtime calls stream ordering makes, on one device.
pub(crate) struct DeviceCalls<'a> {
    pub rt: &'a Runtime,
    pub device: i32,
    pub counters: &'a DeviceCounters,
}

#[derive(Debug, Default)]
pub(crate) struct StreamOrder {
    /// Streams other than the owner recorded on allocated blocks.
    uses: HashMap<BlockId, Vec<Stream>>,
    pending: Vec<PendingFree>,
    pending_bytes: usize,
    /// Events kept for reuse (creating one costs a runtime call).
    event_pool: Vec<Event>,
    /// Allocated blocks a graph stream used (Note [capture]).
    graph_uses: Vec<BlockId>,
    /// Freed blocks never to be reused (Note [capture]), and their bytes.
    quarantined: Vec<BlockId>,
    quarantined_bytes: usize,
    /// Allocated blocks exported to other processes, and their records.
    exports: HashMap<BlockId, crate::core::sharing::table::Name>,
    /// How many of `pending` wait for other processes; they may wait long, so not counted for `POLL_THRESHOLD`.
    held: usize,
}

impl StreamOrder {
    /// Notes that `stream` (not the owner) uses `block`; false if already noted.
    pub fn note_use(&mut self, block: BlockId, stream: Stream) -> bool {
        let uses = self.uses.entry(block).or_default();
        if uses.contains(&stream) {
            return false;
        }
        uses.push(stream);
        true
    }

    /// Notes that a graph stream uses `block` (Note [capture]).
    pub fn note_graph_use(&mut self, block: BlockId) {
        if !self.graph_uses.contains(&block) {
            self.graph_uses.push(block);
        }
    }

    pub fn graph_used(&self, block: BlockId) -> bool {
        !self.graph_uses.is_empty() && self.graph_uses.contains(&block)
    }

    /// The streams other than the owner noted as using `block`.
    pub fn uses_of(&self, block: BlockId) -> &[Stream] {
        self.uses.get(&block).map_or(&[], |u| u.as_slice())
    }

    /// Quarantines `block` (of `size` bytes) for good; forgets its uses.
    pub fn quarantine(&mut self, block: BlockId, size: usize) {
        self.uses.remove(&block);
        self.graph_uses.retain(|&b| b != block);
        self.quarantined.push(block);
        self.quarantined_bytes += size;
    }

    pub fn quarantined_bytes(&self) -> usize {
        self.quarantined_bytes
    }

    /// Forgets that `stream` uses `block` (torch_npu's `eraseStream`); true when no other stream uses it now.
    pub fn forget_use(&mut self, block: BlockId, stream: Stream) -> bool {
        let Some(uses) = self.uses.get_mut(&block) else { return true };
        uses.retain(|&s| s != stream);
        if uses.is_empty() {
            self.uses.remove(&block);
            return true;
        }
        false
    }

    /// An event recorded on each other stream that used `block`. A stream no event can be recorded on is
    /// synchronized instead; if that fails too, nothing changes (the caller keeps the block allocated).
    #[cold]
    #[inline(never)]
    pub fn free_events(&mut self, calls: &DeviceCalls<'_>, block: BlockId) -> Result<Vec<Event>> {
        let others = self.uses.get(&block).cloned().unwrap_or_default();
        let mut events = Vec::with_capacity(others.len());
        for stream in others {
            if let Ok(ev) = self.record_on(calls, stream) {
                events.push(ev);
                continue;
            }
            match calls.rt.on_device(calls.device, || calls.rt.synchronize_stream(stream)) {
                Ok(()) => calls.counters.synced(),
                // A destroyed stream has no work left.
                Err(e) if e.is_invalid_handle() => {}
                Err(e) => {
                    self.event_pool.extend(events);
                    return Err(Error::runtime(
                        e,
                        "waiting for another stream's work on the block (no event could be recorded); it stays allocated",
                    ));
                }
            }
        }
        Ok(events)
    }

    /// Frees `block` (forgetting its uses) once `events` complete and no process holds `hold`; true if it waits.
    pub fn defer(&mut self, block: BlockId, events: Vec<Event>, size: usize, hold: Option<u32>) -> bool {
        self.uses.remove(&block);
        self.graph_uses.retain(|&b| b != block);
        if events.is_empty() && hold.is_none() {
            return false;
        }
        self.pending_bytes += size;
        self.held += usize::from(hold.is_some());
        self.pending.push(PendingFree { block, events, size, hold });
        true
    }

    fn record_on(&mut self, calls: &DeviceCalls<'_>, stream: Stream) -> Result<Event, crate::runtime::AclCallError> {
        let rt = calls.rt;
        let pooled = self.event_pool.pop();
        let recorded = rt.on_device(calls.device, || {
            let ev = match pooled {
                Some(ev) => ev,
                None => rt.create_event()?,
            };
            Ok(rt.record_event(ev, stream).map(|()| ev).map_err(|e| (e, ev)))
        })?;
        recorded.map_err(|(e, ev)| {
            // Never recorded: as good as new. Pooled rather than destroyed here, which could fail and leak it.
            self.event_pool.push(ev);
            e
        })
    }

    /// Whether a free should consult its `PollClock`: frees wait.
    pub fn should_poll(&self) -> bool {
        !self.pending.is_empty()
    }

    pub fn over_threshold(&self) -> bool {
        self.pending.len() - self.held > POLL_THRESHOLD
    }

    pub fn pending_bytes(&self) -> usize {
        self.pending_bytes
    }

    /// Whether `block` waits here (quarantined blocks wait for good).
    pub fn is_pending(&self, block: BlockId) -> bool {
        self.pending.iter().any(|p| p.block == block) || self.quarantined.contains(&block)
    }

    /// Blocks waiting here, quarantined ones included.
    pub fn pending_count(&self) -> usize {
        self.pending.len() + self.quarantined.len()
    }

    /// The blocks whose frees are done, taken off the pending list.
    pub fn poll(&mut self, rt: &Runtime) -> Vec<BlockId> {
        let mut done = Vec::new();
        let mut i = 0;
        while i < self.pending.len() {
            if self.pending[i].done(rt) {
                let p = self.pending.swap_remove(i);
                self.pending_bytes -= p.size;
                self.event_pool.extend(p.events);
                if let Some(slot) = p.hold {
                    crate::core::sharing::table::reuse(slot);
                    self.held -= 1;
                }
                done.push(p.block);
            } else {
                i += 1;
            }
        }
        done
    }

    /// The events pending frees wait for (to synchronize outside the shard's lock; they stay owned here).
    pub fn pending_events(&self) -> Vec<Event> {
        self.pending.iter().flat_map(|p| p.events.iter().copied()).collect()
    }

    /// Every event this shard owns, for teardown. Frees other processes hold stay listed (`held_blocks`).
    pub fn take_all_events(&mut self) -> Vec<Event> {
        let mut all: Vec<Event> = self.event_pool.drain(..).collect();
        for p in &mut self.pending {
            all.append(&mut p.events);
        }
        self.pending.retain(|p| p.hold.is_some_and(crate::core::sharing::table::held));
        self.pending_bytes = self.pending.iter().map(|p| p.size).sum();
        self.held = self.pending.len();
        all
    }

    /// Ends every export of a live block (sleep, teardown): no import can take them from now on. With
    /// `keep_held`, a block some process holds imported waits here as if freed, so its memory stays where it
    /// is; else its record's slot is left unused (the memory is the caller's to keep or not).
    pub fn end_all_exports(&mut self, keep_held: bool, size_of: impl Fn(BlockId) -> usize) {
        use crate::core::sharing::table;
        for (block, name) in std::mem::take(&mut self.exports) {
            table::retire(name.slot);
            if !table::held(name.slot) {
                table::reuse(name.slot);
            } else if keep_held {
                let size = size_of(block);
                self.pending_bytes += size;
                self.held += 1;
                self.pending.push(PendingFree { block, events: Vec::new(), size, hold: Some(name.slot) });
            }
        }
    }

    pub fn export_of(&self, block: BlockId) -> Option<crate::core::sharing::table::Name> {
        self.exports.get(&block).copied()
    }

    pub fn set_export(&mut self, block: BlockId, name: crate::core::sharing::table::Name) {
        self.exports.insert(block, name);
    }

    pub fn exported(&self, block: BlockId) -> bool {
        self.exports.contains_key(&block)
    }

    /// Ends the export of `block`, being freed. Returns its record's slot if a process holds it (the free
    /// waits for it, `defer`); a record no one holds is free at once.
    pub fn end_export(&mut self, block: BlockId) -> Option<u32> {
        use crate::core::sharing::table;
        let name = self.exports.remove(&block)?;
        table::retire(name.slot);
        if table::held(name.slot) {
            Some(name.slot)
        } else {
            table::reuse(name.slot);
            None
        }
    }

    /// Whether `block` is exported (live) or held by importers (freed).
    pub fn shared(&self, block: BlockId) -> bool {
        self.exports.contains_key(&block) || self.pending.iter().any(|p| p.block == block && p.hold.is_some())
    }

    /// Blocks some process holds imported now, live or freed.
    pub fn imported_blocks(&self) -> impl Iterator<Item = BlockId> + '_ {
        use crate::core::sharing::table::held;
        let live = self.exports.iter().filter(|(_, n)| held(n.slot)).map(|(&b, _)| b);
        live.chain(self.pending.iter().filter(|p| p.hold.is_some_and(held)).map(|p| p.block))
    }

    pub fn exported_count(&self) -> usize {
        self.exports.len()
    }

    /// Bytes of freed blocks that wait for other processes.
    pub fn held_bytes(&self) -> usize {
        self.pending.iter().filter(|p| p.hold.is_some()).map(|p| p.size).sum()
    }

    /// Freed blocks that wait for other processes to let go of them.
    pub fn held_blocks(&self) -> impl Iterator<Item = BlockId> + '_ {
        self.pending.iter().filter(|p| p.hold.is_some()).map(|p| p.block)
    }

    /// Blocks with other-stream uses (invariant checks).
    pub fn blocks_with_uses(&self) -> impl Iterator<Item = BlockId> + '_ {
        self.uses.keys().copied()
    }
}
