//! `forget_stream`: the host is done with a stream (about to destroy it).
//! Its shards' cached memory goes back to the device: held blocks and
//! completed cross-stream frees return to their pools, free pieces are
//! unmapped (after synchronizing the streams that used them), ranges that
//! then hold nothing are released, and cached handles are freed. Its live
//! blocks stay valid and are freed as usual (their range stays until they
//! are); a later use of the stream starts from empty shards.
//!
//! When nothing is left in its shards (no live block, no range or segment,
//! no pending free), the stream's entry retires and the next new stream
//! takes it over (`streams`); otherwise it stays, and a stream handle the
//! runtime hands out again finds it.

use super::backing::{Backing, Scope};
use super::device::Device;
use super::shard::Shard;
use crate::error::{Error, Result};
use crate::runtime::Stream;
use std::sync::atomic::Ordering;

impl<B: Backing> Device<B> {
    /// Gives back what `stream`'s shards cache (see the module comment).
    /// An unknown stream is no error. Returns the bytes the device got back.
    pub fn forget_stream(&self, stream: Stream) -> Result<usize> {
        if self.broken.load(Ordering::Relaxed) {
            return Err(Error::Internal("the allocator is unusable: it was destroyed".into()));
        }
        if self.streams.find(stream).is_none() {
            return Ok(0);
        }
        let _ladder = self.ladder.lock().unwrap_or_else(|e| e.into_inner());
        // Looked up again under the ladder lock: another forget_stream of
        // the same stream may have retired its entry meanwhile, and a new
        // stream taken it over.
        let Some(entry) = self.streams.find(stream) else { return Ok(0) };
        let mut released = 0;
        let mut first_error = None;
        // The second pass releases the ranges the first one emptied.
        for _pass in 0..2 {
            let mut taken: Vec<(&Shard<B>, _)> = Vec::new();
            for shard in &entry.shards {
                let mut pool = shard.lock_anyway();
                pool.drain_reuse();
                pool.reap_pending();
                let detached = B::detach(&mut pool, Scope::All);
                pool.after_transition();
                if !detached.is_empty() {
                    taken.push((shard, detached));
                }
            }
            match self.give_back_all(taken) {
                Ok(n) => released += n,
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match B::free_cached(&self.sh) {
            Ok(n) => released += n,
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
        let mut empty = true;
        for (kind, shard) in entry.shards.iter().enumerate() {
            let pool = shard.lock_anyway();
            self.published(entry, kind, &pool);
            empty &= pool.holds_nothing();
        }
        // Not under a shard lock: `adding` is taken before them. `retire`
        // checks again under the shard locks (a malloc may have come in).
        if empty {
            self.streams.retire(entry, stream);
        }
        first_error.map_or(Ok(released), Err)
    }
}
