//! One device's allocator over one backing: its streams' shards, the shared part, and the calls that route to a shard.
//!
//! Locks, and what each guards:
//! - a shard's lock: that shard's pool. A cache hit (malloc or free) takes it and nothing else; growth runs under
//!   it, blocking only that stream's pool of that kind.
//! - `ladder`: serializes the OOM ladder, garbage collection, `empty_cache` and teardown. Held across device calls
//!   (and the segment observer's calls); no hit takes it, a free only tries it (release threshold). Taken before any
//!   shard lock, never after. A peer allocator (`peers`) takes it on its own thread holding no lock of its own: no
//!   thread holds two allocators' ladder locks, or waits for one while holding another.
//! - short locks no one holds across a call: the pools' records, then the stream table's `adding` (a private pool's
//!   entry is made under both), then a stream's shard locks (reviving or retiring an entry takes them under
//!   `adding`); and the leaf locks: the handle cache, the peaks, the trace.
//!
//! A thread waits for at most one shard lock at a time, holding no other, so shard locks cannot deadlock. Excepted:
//! teardown and a pool's restore (`pools::checkpoint`), which hold the ladder, and retiring an entry; each takes
//! shards in table order, an entry's small one before its large one. A growth may take its stream's other shard,
//! but only with `try_lock` (to return that pool's held blocks, and for `reserved_headroom` moves).

use super::policy::{PoolKind, Shape, MAX_REQUEST};
use super::pool::Pool;
use super::shard::Shard;
use super::shared::Shared;
use super::streams::{StreamEntry, StreamTable};
use crate::core::backing::{GrowContext, GrowError, Memory};
use crate::core::pools::routing::Routes;
use crate::core::pools::state::Pools;
use crate::core::report::history::Action;
use crate::core::report::stats::Peaks;
use crate::core::sleep::state::SleepState;
use crate::error::{Error, Result};
use crate::runtime::Stream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

pub(crate) struct Device<B: Memory> {
    pub(in crate::core) sh: Arc<Shared<B>>,
    pub(in crate::core) streams: StreamTable<B>,
    pub(in crate::core) peaks: Peaks,
    pub(in crate::core) ladder: Mutex<()>,
    /// Set once torn down: every call is refused.
    pub(in crate::core) broken: AtomicBool,
    /// A free over the release threshold found `ladder` held: the next one that takes it gives back what is over
    /// the threshold anywhere (`release_over_threshold`).
    pub(in crate::core) release_owed: AtomicBool,
    /// Private pools and the routes to them (Note [pools]).
    pub(in crate::core) pools: Pools,
    pub(in crate::core) routes: Routes,
    /// Asleep or awake (Note [sleep]).
    pub(in crate::core) sleep: SleepState,
}

impl<B: Memory> Device<B> {
    pub fn new(sh: Shared<B>, max_streams: usize) -> Self {
        Device {
            sh: Arc::new(sh),
            streams: StreamTable::with_capacity(max_streams),
            peaks: Peaks::default(),
            ladder: Mutex::new(()),
            broken: AtomicBool::new(false),
            release_owed: AtomicBool::new(false),
            pools: Pools::default(),
            routes: Routes::default(),
            sleep: SleepState::default(),
        }
    }

    /// Refuses every call once torn down.
    #[inline(always)]
    pub(in crate::core) fn check_usable(&self) -> Result<()> {
        if self.broken.load(Ordering::Relaxed) {
            return Err(Error::Internal("the allocator is unusable: it was destroyed".into()));
        }
        Ok(())
    }

    /// The shards of `stream`; a new stream is checked with the runtime first, so a bad handle fails here, changing
    /// nothing, rather than in a later synchronization.
    #[inline(always)]
    pub fn stream_entry(&self, stream: Stream) -> Result<&StreamEntry<B>> {
        match self.streams.find(stream) {
            Some(e) => Ok(e),
            None => self.add_stream(stream),
        }
    }

    #[cold]
    #[inline(never)]
    fn add_stream(&self, stream: Stream) -> Result<&StreamEntry<B>> {
        self.add_entry(stream, 0)
    }

    /// The shards of `stream` in the pool a route names (Note [pools]), else pool 0; with the block size and kind
    /// in that pool's shape (`alignment`, `no_split`).
    #[cold]
    #[inline(never)]
    fn routed_entry(&self, stream: Stream, rounded: usize) -> Result<(&StreamEntry<B>, usize, PoolKind)> {
        self.reap_routes();
        let entry = match self.routes.pool_for(stream) {
            0 => self.stream_entry(stream)?,
            pool => match self.streams.find_in(pool, stream) {
                Some(e) => {
                    self.note_routed_capture(e, pool, stream);
                    e
                }
                None => self.add_entry(stream, pool)?,
            },
        };
        let rounded = entry.shape().round(rounded);
        Ok((entry, rounded, self.sh.policy.pool_for(rounded)))
    }

    /// Makes the entry of `stream` in `pool`, checking the stream first.
    fn add_entry(&self, stream: Stream, pool: u64) -> Result<&StreamEntry<B>> {
        let capturing = check_live_stream(&self.sh.rt, self.sh.device, stream)?;
        let sh = &self.sh;
        // Read with the pool's record below, before either closure runs.
        let shape = std::cell::Cell::new(Shape::PLAIN);
        let make = |slot: usize| {
            let shard = |kind: PoolKind| {
                Shard::new(Pool::new(sh.clone(), (2 * slot + kind as usize) as u32, kind, stream, pool, shape.get()))
            };
            [shard(PoolKind::Small), shard(PoolKind::Large)]
        };
        // A retired entry's shards are empty and become this stream's. Their allocs and frees stay with the pool
        // they served (its tally), so pool and device figures count each once.
        let revive = |e: &StreamEntry<B>| {
            let old = self.pools.tally(e.pool());
            for (kind, shard) in e.shards.iter().enumerate() {
                let mut p = shard.lock_anyway();
                let left = p.take_cumulative();
                if let Some(t) = &old {
                    t.keep(kind, left);
                }
                p.set_owner(stream, pool);
                p.set_shape(shape.get());
            }
        };
        // Made or taken over under the pools lock (before `adding`), so a racing pool_destroy marks it, and never
        // one that changes pools meanwhile (Note [pools]).
        let made = self
            .pools
            .with_live(pool, |c| {
                let use_on_oom = pool != 0 && c.use_on_oom;
                shape.set(c.shape());
                self.streams.get_or_add((stream, pool, use_on_oom, shape.get()), make, revive)
            })
            .ok_or_else(|| Error::InvalidArgument(format!("pool {pool} was destroyed")))?;
        if let Some(entry) = made {
            // A routed capture keeps its memory by the pool's rules; only an unrouted one needs the quarantine
            // (Note [capture]).
            if capturing && pool == 0 {
                entry.mark_graph();
            } else if capturing {
                // Its cached memory stays through sleep (Note [sleep]).
                entry.note_capture();
                self.pools.mark_captured(pool);
            }
        }
        made.ok_or_else(|| {
            Error::Unsupported(format!(
                "this allocator serves {} streams on device {}, its most; call forget_stream for a stream \
                 before destroying it, so that another can take its place",
                self.streams.len(),
                self.sh.device
            ))
        })
    }

    #[inline(always)]
    pub fn malloc(&self, size: usize, stream: Stream) -> Result<usize> {
        self.check_usable()?;
        // 0 wraps to the largest value: one compare.
        if size.wrapping_sub(1) >= MAX_REQUEST - 1 {
            return Err(bad_size(size));
        }
        let rounded = self.sh.policy.round(size);
        let kind = self.sh.policy.pool_for(rounded);
        // The one branch pools add to a malloc (Note [pools]).
        let (entry, rounded, kind) = if self.routes.any() {
            self.routed_entry(stream, rounded)?
        } else {
            (self.stream_entry(stream)?, rounded, kind)
        };
        // The one branch sleep adds to a malloc (Note [sleep]).
        if self.sleep.refusing() {
            self.sleep.check(entry)?;
        }
        #[cfg(test)]
        crate::core::testpoint::hit("malloc: before the shard lock");
        let shard = &entry.shards[kind as usize];
        let mut pool = shard.lock()?;
        // The entry may have been retired and taken over by another stream since the look-up
        // (`StreamTable::retire`). A live pool's retired entry never goes to the stream it served in another pool
        // (`get_or_add`): finding our stream here means the pool looked up, or the one it is routed to now.
        if pool.stream() != stream {
            drop(pool);
            return self.malloc_again(size, stream);
        }
        // A sleep may have begun while this request waited for the lock.
        if self.sleep.refusing() {
            self.sleep.check(entry)?;
        }
        let addr = match pool.malloc_cached(size, rounded) {
            Ok(addr) => addr,
            Err(_) => match self.grow(shard, &mut pool, size, rounded, true) {
                Ok(addr) => addr,
                Err(e) => {
                    drop(pool);
                    return self.ladder_or_refuse(shard, stream, size, rounded, e);
                }
            },
        };
        self.published(entry, kind as usize, &pool);
        self.sh.trace_alloc(addr, size, stream);
        if self.sh.history.is_on() {
            self.sh.history.record(Action::Alloc, addr, size, stream, pool.pool_id());
        }
        Ok(addr)
    }

    /// The entry `malloc` looked up was retired before it took the shard's lock: look it up again.
    #[cold]
    #[inline(never)]
    pub(in crate::core) fn malloc_again(&self, size: usize, stream: Stream) -> Result<usize> {
        self.malloc(size, stream)
    }

    /// The growth failed: the ladder, then on refusal `refused`. Out of line to keep `malloc` small.
    #[cold]
    #[inline(never)]
    fn ladder_or_refuse(
        &self,
        shard: &Shard<B>,
        stream: Stream,
        size: usize,
        rounded: usize,
        e: GrowError,
    ) -> Result<usize> {
        match self.ladder(shard, stream, size, rounded, e) {
            // No lock held, everything the request took given back.
            Err(Error::OutOfMemory(report)) => Err(Error::OutOfMemory(self.refused(size, report))),
            other => other,
        }
    }

    /// A request was refused for lack of memory: writes the `oom_snapshot` file first (so the observer may read it),
    /// then runs the observer. The returned message says where the file went or why it was not written. No lock held.
    #[cold]
    #[inline(never)]
    fn refused(&self, size: usize, mut report: String) -> String {
        if let Some(path) = &self.sh.oom_snapshot {
            // A failed write leaves the file as it was.
            let written = match self.pytorch_snapshot() {
                Ok(doc) => write_replacing(path, &crate::core::report::pytorch_snapshot::to_pickle(&doc))
                    .map_err(|e| e.to_string()),
                Err(e) => Err(format!("the snapshot could not be taken ({e})")),
            };
            crate::core::report::oom::add_snapshot_sentence(&mut report, path, written);
        }
        self.sh.hooks.out_of_memory(self.sh.device, size, &report);
        report
    }

    /// The miss path under the shard's lock; an out-of-memory failure is for the ladder (the caller drops the lock).
    #[cold]
    #[inline(never)]
    pub(in crate::core) fn grow(
        &self,
        shard: &Shard<B>,
        pool: &mut Pool<B>,
        size: usize,
        rounded: usize,
        first: bool,
    ) -> Result<usize, GrowError> {
        let may_borrow = first && self.streams.len() > 1;
        let ctx = GrowContext { may_borrow, may_collect: first, ..self.grow_context(shard, pool) };
        // The stream's held blocks go back before it grows, in both its pools (the other pool's free memory may
        // then move here), unless another thread is using that pool.
        if let Some(sibling) = ctx.sibling {
            sibling.try_with(&mut |mut other| {
                other.drain_reuse();
            });
        }
        // The device calls of the growth are the pool's (Note [pools]).
        let tally = self.tally_of(pool);
        let grown = {
            let _pool_calls = crate::core::report::stats::count_for(&tally.calls);
            pool.grow(size, rounded, &ctx)
        };
        if grown.is_ok() {
            self.pool_grew(pool, &tally);
        }
        grown
    }

    /// Allocated bytes over all shards (this one's exact) and their peak.
    fn grow_context<'a>(&'a self, shard: &Shard<B>, pool: &Pool<B>) -> GrowContext<'a, B> {
        let others: u64 = self.streams.shards().filter(|s| !std::ptr::eq(*s, shard)).map(|s| s.lane.allocated()).sum();
        let entry = self.streams.entry_of(pool.cache.id);
        GrowContext {
            allocated: others + pool.counters().allocated,
            allocated_peak: self.peaks.allocated(),
            may_borrow: false,
            // A private pool's memory may be a graph's, which replays on the old addresses: no moves.
            may_move: entry.pool() == 0 && !entry.is_graph(),
            may_collect: false,
            sibling: Some(&entry.shards[(pool.cache.kind as usize + 1) % 2]),
        }
    }

    /// Publishes `pool`'s counters to its lane and raises the peaks when its stream passed its high-water mark
    /// (Note [peaks without a shared counter]).
    #[inline(always)]
    pub(in crate::core) fn published(&self, entry: &StreamEntry<B>, kind: usize, pool: &Pool<B>) {
        let c = pool.counters();
        entry.shards[kind].lane.publish(c);
        let sibling = &entry.shards[kind ^ 1].lane;
        let totals = (c.allocated + sibling.allocated(), c.requested + sibling.requested());
        if entry.high.passed(totals) {
            self.raise_peaks(entry, totals);
        }
    }

    /// `entry`'s stream passed its high-water mark: raises the device's peaks and its pool's (Note [pools]).
    #[cold]
    #[inline(never)]
    fn raise_peaks(&self, entry: &StreamEntry<B>, totals: (u64, u64)) {
        let lanes = self.streams.iter().map(|e| [&e.shards[0].lane, &e.shards[1].lane]);
        self.peaks.raise(&entry.high, totals, lanes);
        self.raise_pool_peaks(entry);
    }

    #[inline(always)]
    pub fn free(&self, addr: usize) -> Result<()> {
        self.check_usable()?;
        let (entry, kind) = self.owner_entry(addr, "free")?;
        let shard = &entry.shards[kind];
        let mut pool = shard.lock()?;
        // The one branch capture and pools add to a free: a graph stream's block goes to quarantine
        // (Note [capture]), a destroyed pool's segment back to the device once free (Note [pools]).
        let flags = entry.flags();
        if flags != 0 {
            return self.free_flagged(entry, kind, pool, addr, flags);
        }
        pool.free(addr)?;
        // A free cannot pass the high-water mark (Note [peaks without a shared counter]).
        shard.lane.publish(pool.counters());
        // Tracing and `release_threshold`, fixed at creation: one predictable branch for both.
        if self.sh.after_free {
            self.after_free(shard, pool, addr);
        }
        Ok(())
    }

    #[cold]
    #[inline(never)]
    fn after_free(&self, shard: &Shard<B>, pool: std::sync::MutexGuard<'_, Pool<B>>, addr: usize) {
        self.sh.trace(move |t| t.free(addr));
        if self.sh.release_threshold.is_some() {
            self.release_over_threshold(shard, pool, addr);
        }
    }

    /// A free on a graph stream or in a destroyed pool.
    #[cold]
    #[inline(never)]
    fn free_flagged(
        &self,
        entry: &StreamEntry<B>,
        kind: usize,
        mut pool: std::sync::MutexGuard<'_, Pool<B>>,
        addr: usize,
        flags: u8,
    ) -> Result<()> {
        if flags & super::streams::GRAPH != 0 {
            pool.free_quarantined(addr)?;
            self.published(entry, kind, &pool);
            self.sh.trace(move |t| t.free(addr));
            return Ok(());
        }
        pool.free(addr)?;
        self.published(entry, kind, &pool);
        self.sh.trace(move |t| t.free(addr));
        let detached = pool.detach_whole_segments();
        let (live, _) = pool.cache.live();
        // Once the lock is dropped the entry may retire and be taken over by another (pool, stream).
        let (stream, pool_id) = (pool.stream(), entry.pool());
        drop(pool);
        let released = !detached.is_empty();
        if released {
            self.sh.hooks.before_release(self.sh.device);
            let _ = self.give_back_all(vec![(&entry.shards[kind], detached)]);
        }
        // The pool's last block on this stream: the entry goes back and its slot is freed (Note [pools]); if a ladder
        // holds the lock, the next pool_destroy, empty_cache or forget_stream does it. Only if still the destroyed
        // pool's on the same stream: the hook or another thread may have emptied it and another pool taken it over.
        if live == 0 && entry.shards[kind ^ 1].lock_anyway().cache.live().0 == 0 {
            if !released {
                self.sh.hooks.before_release(self.sh.device);
            }
            if let Ok(_ladder) = self.ladder.try_lock() {
                let same = entry.pool() == pool_id && entry.stream_now() == stream;
                if same && entry.flags() & super::streams::DESTROYED != 0 {
                    let _ = self.forget_entry(entry, stream);
                    let _ = B::free_cached(&self.sh);
                }
            }
        }
        Ok(())
    }

    /// The shard owning `addr`, or the error for a pointer no shard owns.
    #[inline(always)]
    pub(in crate::core) fn owner(&self, addr: usize, what: &'static str) -> Result<&Shard<B>> {
        self.owner_entry(addr, what).map(|(e, kind)| &e.shards[kind])
    }

    /// The stream entry and pool kind of the shard owning `addr`.
    #[inline(always)]
    fn owner_entry(&self, addr: usize, what: &'static str) -> Result<(&StreamEntry<B>, usize)> {
        match self.sh.directory.owner(addr).and_then(|id| self.streams.entry_by_id(id)) {
            Some(found) => Ok(found),
            None => Err(self.not_ours(addr, what)),
        }
    }

    /// The error for a pointer no shard owns (built off the hot path).
    #[cold]
    #[inline(never)]
    fn not_ours(&self, addr: usize, what: &str) -> Error {
        Error::UnknownPointer(format!(
            "{what} of {addr:#x} on device {}: this allocator did not allocate it",
            self.sh.device
        ))
    }

    pub fn record_stream(&self, addr: usize, stream: Stream) -> Result<()> {
        self.check_usable()?;
        let shard = self.owner(addr, "record_stream")?;
        // A new stream is checked (and gets its shards) before the block's shard is locked.
        let user = match self.stream_entry(stream) {
            Ok(user) => user,
            Err(e) => {
                // A bad pointer is the first thing to report.
                let owner = shard_stream(shard);
                shard.lock()?.record_stream(addr, owner)?;
                return Err(e);
            }
        };
        // A stream capturing now becomes a graph stream (Note [capture]).
        if !user.is_graph() && crate::core::capture::capturing_now(&self.sh.rt, self.sh.device, stream) {
            user.mark_graph();
        }
        let mut pool = shard.lock()?;
        pool.record_stream(addr, stream)?;
        if user.is_graph() && pool.stream() != stream {
            pool.note_graph_use(addr);
        }
        self.sh.trace(|t| t.record_stream(addr, stream));
        Ok(())
    }

    /// Undoes `record_stream(addr, stream)`. The stream is not checked with the runtime: one never recorded on the
    /// block changes nothing.
    pub fn erase_stream(&self, addr: usize, stream: Stream) -> Result<()> {
        self.check_usable()?;
        let shard = self.owner(addr, "erase_stream")?;
        shard.lock()?.erase_stream(addr, stream)
    }
}

/// The error for a request of 0 bytes or of `MAX_REQUEST` on.
#[cold]
#[inline(never)]
fn bad_size(size: usize) -> Error {
    if size == 0 {
        return Error::InvalidArgument("size is 0; allocations must be at least 1 byte".into());
    }
    Error::InvalidArgument(format!("size {size} exceeds the largest supported request ({MAX_REQUEST} bytes)"))
}

/// Checks that the runtime knows `stream` on `device`; returns whether it is capturing (ACL graphs), which is
/// accepted as it is (`aclrtStreamQuery` refuses it). The default stream always exists.
pub(crate) fn check_live_stream(rt: &crate::runtime::Runtime, device: i32, stream: Stream) -> Result<bool> {
    if stream == Stream::DEFAULT {
        return Ok(false);
    }
    // No runtime call names a stream's device, but calls that check it refuse a stream of another context
    // (107003): with the device's primary context current, `stream_in_current_context` asks one without side
    // effects. The other device is named by asking the contexts this process's allocators hold.
    let checked = rt.on_device(device, || {
        let capturing = match rt.is_capturing(stream) {
            Ok(true) => true,
            Err(e) if e.is_invalid_handle() => return Err(e),
            // Not capturing, or the capture query failed: the stream query decides.
            _ => {
                rt.check_stream(stream)?;
                false
            }
        };
        Ok((capturing, rt.stream_in_current_context(stream)?))
    });
    match checked {
        Ok((_, Some(false))) => {
            let other = match rt.held_device_of(stream) {
                Some(d) => format!("device {d}"),
                None => "another device (or another context)".to_string(),
            };
            Err(Error::InvalidArgument(format!(
                "stream {:#x} belongs to {other}, not to device {device} of this allocator",
                stream.raw() as usize
            )))
        }
        Ok((capturing, _)) => Ok(capturing),
        // A capture begun between the calls.
        Err(e) if e.code == crate::sys::ACL_ERROR_RT_STREAM_CAPTURED => Ok(true),
        Err(e) if e.is_invalid_handle() || e.code == crate::sys::ACL_ERROR_RT_PARAM_INVALID => {
            Err(Error::InvalidArgument(format!(
                "stream {:#x} is not a live stream of device {device} ({e})",
                stream.raw() as usize
            )))
        }
        Err(e) => Err(Error::runtime(e, "checking a stream used for the first time")),
    }
}

/// Writes `bytes` to `path` through a temporary file, so a reader never sees half a file.
fn write_replacing(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.tmp", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// The stream that owns `shard` (for error paths).
fn shard_stream<B: Memory>(shard: &Shard<B>) -> Stream {
    shard.lock_anyway().stream()
}
