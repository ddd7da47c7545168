//! The lock around one device allocator's state.
//!
//! Every allocator call takes it once, so its cost is on the hot path. A
//! `std::sync::Mutex` costs two atomic read-modify-writes per call (take, and
//! release checking for sleepers); each drains the store buffer and they were
//! the largest single cost of a replay (10% of its samples). This lock takes
//! with one compare-exchange and releases with a plain store.
//!
//! Waiting: spin briefly, then yield, then nap 50 µs at a time. Naps matter
//! because a holder may be waiting on the device (a stream synchronization
//! before memory is released runs under the lock); no waiter burns a core
//! for that long.
//!
//! Poisoning as in std: a panic while the lock is held marks it, and every
//! later `lock` returns `Err` with the guard inside.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LockResult, PoisonError};
use std::time::Duration;

/// Spins before yielding, and yields before napping.
const SPINS: u32 = 64;
const YIELDS: u32 = 256;
const NAP: Duration = Duration::from_micros(50);

pub struct StateLock<T> {
    locked: AtomicBool,
    poisoned: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the value is only reached through a guard, and at most one guard
// exists at a time (`locked`), so sharing the lock shares no `T` between
// threads at once; `T: Send` lets the value move to whichever thread locks.
unsafe impl<T: Send> Sync for StateLock<T> {}

impl<T> StateLock<T> {
    pub fn new(value: T) -> Self {
        StateLock { locked: AtomicBool::new(false), poisoned: AtomicBool::new(false), value: UnsafeCell::new(value) }
    }

    #[inline]
    pub fn lock(&self) -> LockResult<StateGuard<'_, T>> {
        if self.locked.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            self.wait();
        }
        let guard = StateGuard { lock: self, panicking: std::thread::panicking() };
        if self.poisoned.load(Ordering::Relaxed) {
            Err(PoisonError::new(guard))
        } else {
            Ok(guard)
        }
    }

    #[cold]
    #[inline(never)]
    fn wait(&self) {
        let mut rounds = 0u32;
        loop {
            while self.locked.load(Ordering::Relaxed) {
                if rounds < SPINS {
                    std::hint::spin_loop();
                } else if rounds < SPINS + YIELDS {
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(NAP);
                }
                rounds = rounds.saturating_add(1);
            }
            if self.locked.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                return;
            }
        }
    }
}

/// Access to the locked value; releases the lock when dropped.
pub struct StateGuard<'a, T> {
    lock: &'a StateLock<T>,
    /// The thread was already panicking when it took the lock.
    panicking: bool,
}

impl<T> Deref for StateGuard<'_, T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: this guard is the only one (the lock is held until it drops).
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for StateGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`, and `&mut self` makes the access unique.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for StateGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        if !self.panicking && std::thread::panicking() {
            self.lock.poisoned.store(true, Ordering::Relaxed);
        }
        self.lock.locked.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn threads_take_turns() {
        let lock = Arc::new(StateLock::new(0u64));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let lock = lock.clone();
                std::thread::spawn(move || {
                    for _ in 0..100_000 {
                        *lock.lock().unwrap() += 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*lock.lock().unwrap(), 400_000);
    }

    #[test]
    fn a_panic_while_held_poisons_it() {
        let lock = Arc::new(StateLock::new(1u32));
        let l = lock.clone();
        let r = std::thread::spawn(move || {
            let _g = l.lock().unwrap();
            panic!("while holding the lock");
        })
        .join();
        assert!(r.is_err());
        let e = lock.lock().err().expect("poisoned");
        assert_eq!(*e.into_inner(), 1, "the value is still reachable");
    }

    #[test]
    fn a_waiter_gets_the_lock_after_a_long_hold() {
        let lock = Arc::new(StateLock::new(()));
        let g = lock.lock().unwrap();
        let l = lock.clone();
        let t = std::thread::spawn(move || drop(l.lock().unwrap()));
        std::thread::sleep(Duration::from_millis(20));
        drop(g);
        t.join().unwrap();
    }
}
