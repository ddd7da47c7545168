//! The route stacks of `pool_begin` / `pool_end`: per stream (shared by every thread) and per thread (in a
//! thread-local). A request is served by the newest route that applies (by sequence number: its stream's
//! innermost or its thread's). While no route is active, a malloc does one relaxed load here (`any`).
//! A thread that exits inside thread routes hands them to the allocator's `Exits` (shared, so it outlives
//! whichever goes first); the next cold route call ends them (`reap`), so the pool can be destroyed.

use crate::runtime::Stream;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Route {
    pool: u64,
    seq: u64,
}

/// Routes of threads that exited inside them, for their allocator.
#[derive(Default)]
struct Exits {
    /// Routes handed over and not yet reaped (read without the lock).
    count: AtomicUsize,
    /// Their pools.
    pools: Mutex<Vec<u64>>,
}

/// One thread's routes, each with its allocator's `Exits` (which tells allocators apart too).
struct ThreadRoutes(Vec<(Arc<Exits>, Route)>);

impl Drop for ThreadRoutes {
    fn drop(&mut self) {
        for (exits, route) in self.0.drain(..) {
            let mut pools = exits.pools.lock().unwrap_or_else(|e| e.into_inner());
            pools.push(route.pool);
            exits.count.fetch_add(1, Ordering::Release);
        }
    }
}

thread_local! {
    static THREAD_ROUTES: RefCell<ThreadRoutes> = const { RefCell::new(ThreadRoutes(Vec::new())) };
}

#[derive(Default)]
pub(crate) struct Routes {
    /// Routes active now, over every stream and thread.
    active: AtomicUsize,
    /// Numbers routes in the order they begin (only compared with each other).
    seq: AtomicU64,
    /// Routes of exited threads (also this allocator's mark in `THREAD_ROUTES`).
    exits: Arc<Exits>,
    /// Each routed stream's stack, innermost last.
    streams: Mutex<Vec<(Stream, Vec<Route>)>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    Popped,
    NotInnermost,
    ThreadGone,
}

/// Which route stack a `pool_begin` / `pool_end` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    Stream(Stream),
    Thread,
}

impl Routes {
    /// True if any route is active (the hot path's one check).
    #[inline(always)]
    pub fn any(&self) -> bool {
        self.active.load(Ordering::Relaxed) != 0
    }

    /// The pool serving a request on `stream` from this thread (0 when no route applies).
    #[cold]
    #[inline(never)]
    pub fn pool_for(&self, stream: Stream) -> u64 {
        let by_stream = self.innermost_route(Target::Stream(stream));
        by_stream.into_iter().chain(self.innermost_route(Target::Thread)).max_by_key(|r| r.seq).map_or(0, |r| r.pool)
    }

    fn mine(&self, exits: &Arc<Exits>) -> bool {
        Arc::ptr_eq(exits, &self.exits)
    }

    /// Ends the routes of threads that exited inside them; returns their pools (one per route).
    #[cold]
    pub fn reap(&self) -> Vec<u64> {
        if self.exits.count.load(Ordering::Acquire) == 0 {
            return Vec::new();
        }
        let mut listed = self.exits.pools.lock().unwrap_or_else(|e| e.into_inner());
        let pools = std::mem::take(&mut *listed);
        self.exits.count.fetch_sub(pools.len(), Ordering::AcqRel);
        drop(listed);
        self.active.fetch_sub(pools.len(), Ordering::Relaxed);
        pools
    }

    /// Pushes a route to `pool` on `target`. False, changing nothing, for a thread route on a thread whose
    /// locals are gone: it could never be ended.
    pub fn begin(&self, pool: u64, target: Target) -> bool {
        let route = Route { pool, seq: self.seq.fetch_add(1, Ordering::Relaxed) };
        match target {
            Target::Stream(stream) => {
                let mut streams = self.streams.lock().unwrap_or_else(|e| e.into_inner());
                match streams.iter_mut().find(|(s, _)| *s == stream) {
                    Some((_, stack)) => stack.push(route),
                    None => streams.push((stream, vec![route])),
                }
            }
            Target::Thread => {
                if THREAD_ROUTES.try_with(|t| t.borrow_mut().0.push((self.exits.clone(), route))).is_err() {
                    return false;
                }
            }
        }
        self.active.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// The pool of `target`'s innermost route, if it has one.
    pub fn innermost(&self, target: Target) -> Option<u64> {
        self.innermost_route(target).map(|r| r.pool)
    }

    fn innermost_route(&self, target: Target) -> Option<Route> {
        match target {
            Target::Stream(stream) => {
                let streams = self.streams.lock().unwrap_or_else(|e| e.into_inner());
                streams.iter().find(|(s, _)| *s == stream).and_then(|(_, stack)| stack.last().copied())
            }
            // Gone at thread exit: the thread's routes were handed over, none applies.
            Target::Thread => THREAD_ROUTES
                .try_with(|t| t.borrow().0.iter().rev().find(|(o, _)| self.mine(o)).map(|&(_, r)| r))
                .ok()
                .flatten(),
        }
    }

    /// Pops `target`'s innermost route if it goes to `pool` (`Popped`); `NotInnermost`, changing nothing,
    /// otherwise. `ThreadGone` on a thread whose locals are gone: its routes were handed over already.
    pub fn end(&self, pool: u64, target: Target) -> Ended {
        let popped = match target {
            Target::Stream(stream) => {
                let mut streams = self.streams.lock().unwrap_or_else(|e| e.into_inner());
                let Some(i) = streams.iter().position(|(s, _)| *s == stream) else { return Ended::NotInnermost };
                if streams[i].1.last().map(|r| r.pool) != Some(pool) {
                    return Ended::NotInnermost;
                }
                streams[i].1.pop();
                if streams[i].1.is_empty() {
                    streams.swap_remove(i);
                }
                true
            }
            Target::Thread => {
                let popped = THREAD_ROUTES.try_with(|t| {
                    let t = &mut t.borrow_mut().0;
                    let Some(i) = t.iter().rposition(|(o, _)| self.mine(o)) else { return false };
                    if t[i].1.pool != pool {
                        return false;
                    }
                    t.remove(i);
                    true
                });
                match popped {
                    Ok(popped) => popped,
                    Err(_) => return Ended::ThreadGone,
                }
            }
        };
        if popped {
            self.active.fetch_sub(1, Ordering::Relaxed);
            Ended::Popped
        } else {
            Ended::NotInnermost
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn innermost_route_wins_and_end_must_name_it() {
        let r = Routes::default();
        let (s1, s2) = (Stream(0x10), Stream(0x20));
        assert!(!r.any());
        assert_eq!(r.pool_for(s1), 0);
        assert!(r.begin(1, Target::Stream(s1)));
        assert!(r.begin(2, Target::Thread));
        assert!(r.any());
        // The thread route is newer than s1's.
        assert_eq!((r.pool_for(s1), r.pool_for(s2)), (2, 2));
        assert!(r.begin(3, Target::Stream(s1)));
        assert_eq!((r.pool_for(s1), r.pool_for(s2)), (3, 2));
        // Not the innermost: nothing changes.
        assert_eq!(r.end(1, Target::Stream(s1)), Ended::NotInnermost);
        assert_eq!(r.end(3, Target::Thread), Ended::NotInnermost);
        assert_eq!(r.end(1, Target::Stream(s2)), Ended::NotInnermost);
        assert_eq!(r.pool_for(s1), 3);
        assert_eq!(r.end(3, Target::Stream(s1)), Ended::Popped);
        assert_eq!(r.pool_for(s1), 2);
        assert_eq!(r.end(2, Target::Thread), Ended::Popped);
        assert_eq!((r.pool_for(s1), r.pool_for(s2)), (1, 0));
        // Another allocator's thread routes are not this one's.
        let other = Routes::default();
        assert!(other.begin(9, Target::Thread));
        assert_eq!(r.pool_for(s2), 0);
        assert_eq!(r.end(9, Target::Thread), Ended::NotInnermost);
        assert_eq!(other.end(9, Target::Thread), Ended::Popped);
        assert_eq!(r.end(1, Target::Stream(s1)), Ended::Popped);
        assert!(!r.any());
    }

    #[test]
    fn thread_routes_belong_to_their_thread() {
        let r = Routes::default();
        assert!(r.begin(4, Target::Thread));
        std::thread::scope(|s| {
            s.spawn(|| {
                assert_eq!(r.pool_for(Stream(0x10)), 0);
                assert_eq!(r.end(4, Target::Thread), Ended::NotInnermost);
            });
        });
        assert_eq!(r.pool_for(Stream(0x10)), 4);
        assert_eq!(r.end(4, Target::Thread), Ended::Popped);
    }
}
