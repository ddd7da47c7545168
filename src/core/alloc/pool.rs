//! One shard (one stream, one pool kind): its cache and backing part, and the transitions that need both or the
//! device's shared state. Everything here runs under the shard's lock and touches only this shard, except a
//! `reserved_headroom` move, which may take free pieces of the stream's other shard when no one holds it
//! (`Sibling`); device calls made here block only these shards.

use super::policy::{PoolKind, Shape};
use super::shared::Shared;
use crate::core::backing::{Detached, GrowContext, GrowError, Memory, Parts, Scope, What};
use crate::core::cache::block::{BlockId, BlockState, NIL};
use crate::core::cache::size_class::class_of;
use crate::core::cache::Cache;
use crate::core::report::history::Action;
use crate::core::report::stats::{Cumulative, ShardCounters};
use crate::error::{Error, Result};
use crate::runtime::Stream;
use std::sync::Arc;

/// Why a malloc left the hit path.
#[derive(Debug)]
pub(crate) enum Miss {
    /// Serving it needs device calls (growth, mapping).
    NeedsDevice,
}

/// A shard's cache and backing part, with what they share with the device's other shards.
pub(crate) struct Pool<B: Memory> {
    pub(in crate::core) sh: Arc<Shared<B>>,
    pub(in crate::core) cache: Cache,
    pub(in crate::core) backing: B::ShardState,
    /// What the pool's config asks of its blocks (set with the pool).
    shape: Shape,
    /// Whole segments detached for a give-back and not settled yet. While one is out the shard is not empty: a
    /// refused give-back brings it back, so the entry must not retire and pass to another (pool, stream) meanwhile
    /// (a destroyed pool's free gives back with no ladder lock held).
    segments_out: u32,
    #[cfg(debug_assertions)]
    transitions: u64,
}

impl<B: Memory> std::fmt::Debug for Pool<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").field("id", &self.cache.id).field("kind", &self.cache.kind).finish()
    }
}

impl<B: Memory> Pool<B> {
    pub fn new(sh: Arc<Shared<B>>, id: u32, kind: PoolKind, stream: Stream, pool: u64, shape: Shape) -> Self {
        let cache = Cache::new(id, kind, stream, pool, sh.reuse_bytes);
        Pool {
            sh,
            cache,
            backing: Default::default(),
            shape,
            segments_out: 0,
            #[cfg(debug_assertions)]
            transitions: 0,
        }
    }

    pub fn counters(&self) -> &ShardCounters {
        &self.cache.counters
    }

    /// The backing's view of this shard (see `Parts`).
    #[inline]
    pub fn parts(&mut self) -> Parts<'_, B> {
        Parts { sh: &self.sh, cache: &mut self.cache, backing: &mut self.backing, shape: self.shape }
    }

    /// Hands this empty shard to another stream of pool `pool` (a retired entry taken over).
    pub fn set_owner(&mut self, stream: Stream, pool: u64) {
        debug_assert!(self.cache.segments.ids().next().is_none(), "a shard with segments changes stream");
        self.cache.stream = stream;
        self.cache.pool = pool;
    }

    /// The shape of the pool this empty shard now serves.
    pub fn set_shape(&mut self, shape: Shape) {
        debug_assert!(self.cache.segments.ids().next().is_none(), "a shard with segments changes shape");
        self.shape = shape;
    }

    pub fn stream(&self) -> Stream {
        self.cache.stream
    }

    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// The pool the shard serves (see `Cache::pool`).
    pub fn pool_id(&self) -> u64 {
        self.cache.pool
    }

    /// Takes out the empty shard's cumulative figures (its entry goes to another stream); the backing part restarts.
    pub fn take_cumulative(&mut self) -> Cumulative {
        debug_assert!(self.cache.segments.ids().next().is_none(), "a shard with segments is taken over");
        self.backing = Default::default();
        self.cache.counters.take_cumulative()
    }

    /// Serves `size` bytes from this shard's cache with no device call: a held block of that size, or a ready free
    /// block.
    #[inline(always)]
    pub fn malloc_cached(&mut self, size: usize, rounded: usize) -> Result<usize, Miss> {
        let class = class_of(rounded);
        let c = &mut self.cache;
        if let Some(id) = c.reuse.pop(&c.blocks, rounded, class) {
            let addr = c.reuse_block(id, size);
            self.after_transition();
            return Ok(addr);
        }
        let policy = &self.sh.policy;
        let found = c.index.find_in_class(&c.blocks, rounded, class, |b| policy.may_use(b, rounded));
        match found.and_then(|id| Some((id, B::ready(c, &self.backing, self.shape, id, rounded)?))) {
            Some((id, taken)) => Ok(self.take_block(id, taken, size)),
            None => Err(Miss::NeedsDevice),
        }
    }

    /// The miss path: held blocks go back first (they may coalesce into a fit), completed cross-stream frees are
    /// reaped, then the backing places the request or grows.
    pub fn grow(&mut self, size: usize, rounded: usize, ctx: &GrowContext<'_, B>) -> Result<usize, GrowError> {
        let drained = self.drain_reuse();
        if self.cache.order.should_poll() {
            self.reap_pending();
        }
        let best_fit = self.cache.find_free(&self.sh.policy, rounded);
        let ready = best_fit.and_then(|id| Some((id, B::ready(&self.cache, &self.backing, self.shape, id, rounded)?)));
        if let Some((id, taken)) = ready {
            // Held blocks alone kept the request from a fit.
            if drained != 0 {
                self.cache.reuse.weigh(drained, &self.sh.counters);
            }
            return Ok(self.take_block(id, taken, size));
        }
        let (id, taken) = B::obtain(self.parts(), rounded, best_fit, ctx)?;
        Ok(self.take_block(id, taken, size))
    }

    /// Returns the held blocks to the free blocks; returns how many (only `grow` weighs them:
    /// Note [resting reuse lists]).
    pub fn drain_reuse(&mut self) -> usize {
        if !self.cache.reuse.holds() {
            return 0;
        }
        let drained = self.cache.drain_reuse();
        self.after_transition();
        drained
    }

    /// Moves a free block to allocated, splitting off what it does not need.
    #[inline(never)]
    pub fn take_block(&mut self, id: BlockId, rounded: usize, requested: usize) -> usize {
        let (sh, shape) = (&self.sh, self.shape);
        let addr = self.cache.take(id, rounded, requested, |kind, size| B::splits(sh, shape, kind, size, rounded));
        self.after_transition();
        addr
    }

    pub fn unknown_pointer(&self, addr: usize, what: &str) -> Error {
        self.cache.unknown_pointer(self.sh.device, addr, what)
    }

    /// Frees the block at `addr` (its exact start address).
    #[inline]
    pub fn free(&mut self, addr: usize) -> Result<()> {
        let c = &mut self.cache;
        // One look-up: a held block keeps its entry, any other leaves.
        let Some(found) = c.registry.find(addr) else {
            return Err(self.unknown_pointer(addr, "free"));
        };
        let id = found.id;
        let b = c.blocks.get(id);
        if b.state != BlockState::Allocated {
            return Err(self.unknown_pointer(addr, "free"));
        }
        let (size, requested, other) = (b.size, b.requested, b.has_other_streams);
        if other {
            return self.free_used_elsewhere(id, addr);
        }
        c.counters.block_freed(size, requested);
        if self.sh.history.is_on() {
            self.sh.history.freed(addr, requested, c.stream, c.pool, true);
        }
        if c.reuse.push(&mut c.blocks, id, size) {
            let b = c.blocks.get_mut(id);
            b.state = BlockState::Held;
            b.requested = 0;
            self.after_transition();
            return Ok(());
        }
        c.registry.remove_found(found);
        c.return_block(id);
        // One predictable branch: nothing waits in most programs.
        if c.order.should_poll() {
            self.poll_on_free();
        }
        self.after_transition();
        Ok(())
    }

    /// The free of a block other streams used waits for their work (Note [stream-ordered reuse]). Fails before
    /// anything changes.
    #[cold]
    #[inline(never)]
    fn free_used_elsewhere(&mut self, id: BlockId, addr: usize) -> Result<()> {
        if self.used_by_graph(id) {
            self.quarantine(id, addr);
            return Ok(());
        }
        let sh = self.sh.clone();
        let c = &mut self.cache;
        let events = c.order.free_events(&sh.calls(), id)?;
        let hold = c.order.end_export(id);
        c.registry.remove(&addr);
        let (size, requested) = {
            let b = c.blocks.get(id);
            (b.size, b.requested)
        };
        c.counters.block_freed(size, requested);
        let deferred = c.order.defer(id, events, size, hold);
        sh.history.freed(addr, requested, c.stream, c.pool, !deferred);
        if deferred {
            c.blocks.get_mut(id).state = BlockState::Pending;
        } else {
            c.return_block(id);
        }
        // Other streams' work may be done already; if not, the next free asks again.
        self.reap_pending();
        self.cache.poll.poll_at_next_free();
        self.after_transition();
        Ok(())
    }

    /// Detaches the whole free fixed segments a destroyed pool's free gives back (with no lock held).
    pub fn detach_whole_segments(&mut self) -> Vec<Detached> {
        self.detach(Scope::WholeSegments)
    }

    /// Whether the shard holds nothing: no segment, live block or pending free, and none out for a give-back.
    pub fn holds_nothing(&self) -> bool {
        self.segments_out == 0 && self.cache.holds_nothing()
    }

    /// Takes out of the cache what the backing says `scope` gives back, in the backing's order.
    pub fn detach(&mut self, scope: Scope) -> Vec<Detached> {
        let gives = B::unused(self.parts(), scope);
        let c = &mut self.cache;
        // Pieces come in address order: the free block left after one usually holds the next.
        let mut after = NIL;
        let mut out = Vec::with_capacity(gives.len());
        for give in gives {
            let seg = give.segment;
            let serial = c.segments.get(seg).serial;
            let streams = if give.sync { c.streams_of(seg) } else { Vec::new() };
            let block = match give.what {
                What::Segment => {
                    c.remove_segment(seg);
                    self.segments_out += 1;
                    NIL
                }
                What::Piece => {
                    let holds = |b: &crate::core::cache::block::Block| {
                        b.state == BlockState::Free && b.addr <= give.addr && give.addr < b.addr + b.size
                    };
                    let holder = match after {
                        id if id != NIL && c.blocks.get(id).segment == seg && holds(c.blocks.get(id)) => id,
                        _ => c.block_containing(seg, give.addr).expect("a piece to give back lies in its segment"),
                    };
                    let block = c.carve(holder, give.addr, give.size);
                    after = c.blocks.get(block).next;
                    block
                }
                What::Retired => c.block_containing(seg, give.addr).expect("a retired span is a block of its own"),
            };
            out.push(Detached { give, block, serial, streams, pool: c.pool });
        }
        out
    }

    /// After `give_back`: what went back is forgotten; what did not returns to the pool with its age and streams.
    pub fn settle(&mut self, d: Detached, given_back: bool) {
        if d.what == What::Segment {
            self.segments_out -= 1;
        }
        let readded = (d.what == What::Segment && !given_back).then(|| {
            let mut p = self.parts();
            let (seg, _) = p.add_segment(d.addr, d.size, d.claim.then_some(d.device));
            let owner = p.cache.stream;
            let s = p.cache.segments.get_mut(seg);
            s.serial = d.serial;
            s.other_streams = d.streams.iter().copied().filter(|&st| st != owner).collect();
            seg
        });
        if B::settle(self.parts(), &d.give, given_back, readded) && d.block != NIL {
            self.cache.return_block(d.block);
        }
    }

    /// Polls the frees waiting for other streams when due.
    #[cold]
    #[inline(never)]
    fn poll_on_free(&mut self) {
        if self.cache.poll.due() || self.cache.order.over_threshold() {
            let reaped = self.reap_pending();
            self.cache.poll.polled(reaped);
        }
    }

    /// Returns to the free blocks the pending frees whose events completed.
    pub fn reap_pending(&mut self) -> usize {
        let c = &mut self.cache;
        if !c.order.should_poll() {
            return 0;
        }
        let done = c.order.poll(&self.sh.rt);
        let n = done.len();
        for id in done {
            let b = c.blocks.get(id);
            self.sh.history.record(Action::FreeCompleted, b.addr, b.requested, c.stream, c.pool);
            c.return_block(id);
        }
        n
    }

    /// Marks that `stream` (checked by the caller) uses the allocated block at `addr`.
    pub fn record_stream(&mut self, addr: usize, stream: Stream) -> Result<()> {
        let c = &mut self.cache;
        let id = match c.registry.get(&addr) {
            Some(&id) if c.blocks.get(id).state == BlockState::Allocated => id,
            _ => return Err(self.unknown_pointer(addr, "record_stream")),
        };
        if c.stream == stream {
            return Ok(());
        }
        if c.order.note_use(id, stream) {
            let seg = c.blocks.get(id).segment;
            c.blocks.get_mut(id).has_other_streams = true;
            let others = &mut c.segments.get_mut(seg).other_streams;
            if !others.contains(&stream) {
                others.push(stream);
            }
        }
        Ok(())
    }

    /// Undoes `record_stream(addr, stream)`; a stream never recorded on it changes nothing. The segment's list of
    /// streams is kept: releasing it still synchronizes them, which is only conservative.
    pub fn erase_stream(&mut self, addr: usize, stream: Stream) -> Result<()> {
        let c = &mut self.cache;
        let id = match c.registry.get(&addr) {
            Some(&id) if c.blocks.get(id).state == BlockState::Allocated => id,
            _ => return Err(self.unknown_pointer(addr, "erase_stream")),
        };
        if c.order.forget_use(id, stream) {
            // An exported block's free still takes the slow path.
            c.blocks.get_mut(id).has_other_streams = c.order.exported(id);
        }
        Ok(())
    }

    #[inline]
    pub fn after_transition(&mut self) {
        #[cfg(debug_assertions)]
        {
            // Full checks are O(blocks): every transition while small, periodically once large.
            self.transitions += 1;
            if self.cache.blocks.live() < 512 || self.transitions % 1024 == 0 {
                if let Err(e) = self.check_invariants() {
                    panic!("allocator invariant broken: {e}");
                }
            }
        }
    }
}
