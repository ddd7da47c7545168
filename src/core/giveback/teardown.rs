//! Teardown: every stream the allocator used is synchronized, and all its memory and events go back to the
//! runtime; graph streams are never synchronized and their memory is left to the runtime (Note [capture]).

use crate::core::alloc::device::Device;
use crate::core::alloc::pool::Pool;
use crate::core::backing::Memory;
use crate::core::TeardownReport;
use crate::error::Result;
use crate::runtime::Stream;
use std::sync::atomic::Ordering;
use std::sync::MutexGuard;

impl<B: Memory> Device<B> {
    /// Releases everything (see the module comment); the allocator refuses further work afterwards. A second
    /// call does nothing (it would free a fixed segment's allocation a second time).
    pub fn teardown(&self) -> Result<TeardownReport> {
        self.sh.hooks.before_release(self.sh.device);
        let _ladder = self.ladder.lock().unwrap_or_else(|e| e.into_inner());
        if self.broken.load(Ordering::Relaxed) {
            return Ok(TeardownReport::default());
        }
        // Every shard at once: nothing else may run during teardown.
        let mut pools: Vec<MutexGuard<'_, Pool<B>>> = self.streams.shards().map(|s| s.lock_anyway()).collect();
        let mut report = TeardownReport::default();
        let mut streams: Vec<Stream> = Vec::new();
        for pool in &mut pools {
            // Blocks other processes hold imported stay where they are (`sharing`).
            pool.cache.end_all_exports(true);
            let (blocks, bytes) = pool.cache.live();
            report.live_blocks += blocks as usize;
            report.live_bytes += bytes as usize;
            report.held_blocks += pool.cache.order.held_blocks().count();
            report.held_bytes += pool.cache.order.held_bytes();
            for s in pool.cache.all_streams() {
                if !streams.contains(&s) {
                    streams.push(s);
                }
            }
        }
        // Memory of streams that may still have work queued (`busy`) is left to the runtime rather than freed
        // under that work. Graph streams are not waited for: a graph may still replay on their memory.
        let (graph, others): (Vec<Stream>, Vec<Stream>) =
            streams.into_iter().partition(|&s| self.streams.find(s).is_some_and(|e| e.is_graph()));
        let (mut busy, mut first_error) =
            self.synchronize(&others, "synchronizing a stream at teardown (the memory it used is left allocated)");
        busy.extend(graph);
        let (rt, device) = (&self.sh.rt, self.sh.device);
        for pool in &mut pools {
            for ev in pool.cache.take_all_events() {
                let _ = rt.on_device(device, || rt.destroy_event(ev));
            }
        }
        // Each call runs; the first error is kept.
        for pool in &mut pools {
            first_error = first_error.or(B::teardown(pool.parts(), &busy).err());
        }
        first_error = first_error.or(B::free_cached(&self.sh).err());
        first_error = first_error.or(self.flush_trace().err());
        self.broken.store(true, Ordering::Relaxed);
        first_error.map_or(Ok(report), Err)
    }

    /// Writes the buffered trace events to the `trace` file (no-op without one).
    pub fn flush_trace(&self) -> Result<()> {
        self.sh.trace.as_ref().map_or(Ok(()), |t| t.lock().unwrap_or_else(|e| e.into_inner()).flush())
    }
}
