//! The lock around one device allocator's state.
//!
//! Every allocator call takes it once, so its cost is on the hot path. A
//! `std::sync::Mutex` costs two atomic read-modify-writes per call (take, and
//! release checking for sleepers); each drains the store buffer, which in a
//! profile of a replay is the largest single cost of a call. This lock
//! takes with one compare-exchange, and until some thread has had to wait
//! for it a release is a plain load and a plain store: a host that calls
//! from one thread never pays for the others.
//!
//! The state word is 0 (free), 1 (held) or 2 (held, someone may sleep on the
//! word, a futex). A waiter spins briefly, then marks the word 2 and sleeps;
//! a release that finds 2 wakes one sleeper. The first waiter that has to
//! sleep also sets `contended`, and from then on every release swaps the
//! word (a read-modify-write that cannot miss a mark), as std's mutex does.
//! A release that read `contended` before it was set may still overwrite
//! a mark with its plain store and wake nobody, however late that store
//! lands (its thread may be descheduled in between). Once the thread that
//! set `contended` has taken the lock, every later holder is ordered after
//! that set and swaps; until then that thread alone sleeps in naps (`NAP`),
//! every time it sleeps, so a lost wake costs at most a nap: it then takes
//! the lock marked and its release wakes the next sleeper. Other sleeps are
//! unbounded: a futex wait with a timeout arms a kernel timer each time,
//! which two busy threads would pay on every wait.
//! Releases stay swaps for good: switching back and forth would put the
//! switch's own atomics on every call of two busy threads.
//!
//! Poisoning as in std: a panic while the lock is held marks it, and every
//! later `lock` returns `Err` with the guard inside.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{LockResult, PoisonError};
use std::time::Duration;

const FREE: u32 = 0;
const HELD: u32 = 1;
const CONTENDED: u32 = 2;

/// Spins before sleeping.
const SPINS: u32 = 100;
/// The first sleeper's longest sleep between looks at the lock.
const NAP: Duration = Duration::from_millis(1);

pub struct StateLock<T> {
    state: AtomicU32,
    /// Set once a waiter has slept: releases swap from then on.
    contended: AtomicBool,
    poisoned: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the value is only reached through a guard, and at most one guard
// exists at a time (the thread that moved `state` off FREE), so sharing the
// lock shares no `T` between threads at once; `T: Send` lets the value move
// to whichever thread locks.
unsafe impl<T: Send> Sync for StateLock<T> {}

impl<T> StateLock<T> {
    pub fn new(value: T) -> Self {
        StateLock {
            state: AtomicU32::new(FREE),
            contended: AtomicBool::new(false),
            poisoned: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    #[inline]
    pub fn lock(&self) -> LockResult<StateGuard<'_, T>> {
        if self.state.compare_exchange_weak(FREE, HELD, Ordering::Acquire, Ordering::Relaxed).is_err() {
            self.wait();
        }
        let guard = StateGuard { lock: self, panicking: std::thread::panicking() };
        if self.poisoned.load(Ordering::Relaxed) {
            Err(PoisonError::new(guard))
        } else {
            Ok(guard)
        }
    }

    /// `lock` for the hot path: the guard, and whether the lock is
    /// poisoned, as a flag (no guard moves through a wrapping result).
    #[inline(always)]
    pub fn lock_flagged(&self) -> (StateGuard<'_, T>, bool) {
        if self.state.compare_exchange_weak(FREE, HELD, Ordering::Acquire, Ordering::Relaxed).is_err() {
            self.wait();
        }
        let guard = StateGuard { lock: self, panicking: std::thread::panicking() };
        (guard, self.poisoned.load(Ordering::Relaxed))
    }

    /// The lock if it is free now (never waits); None if held or poisoned.
    pub fn try_lock(&self) -> Option<StateGuard<'_, T>> {
        if self.state.compare_exchange(FREE, HELD, Ordering::Acquire, Ordering::Relaxed).is_err() {
            return None;
        }
        let guard = StateGuard { lock: self, panicking: std::thread::panicking() };
        (!self.poisoned.load(Ordering::Relaxed)).then_some(guard)
    }

    #[cold]
    #[inline(never)]
    fn wait(&self) {
        let mut state = self.spin();
        if state == FREE && self.state.compare_exchange(FREE, HELD, Ordering::Acquire, Ordering::Relaxed).is_ok() {
            return;
        }
        // Whether this thread set `contended`: it then sleeps in naps until
        // it has the lock, however many times it wakes (see the module
        // comment).
        let mut first = false;
        loop {
            // Taken as CONTENDED: this thread cannot tell whether others
            // sleep, so its own release must wake one.
            if state != CONTENDED && self.state.swap(CONTENDED, Ordering::SeqCst) == FREE {
                return;
            }
            // Releases were plain stores until now: one may overwrite the
            // mark unseen (see the module comment).
            first = first || !self.contended.swap(true, Ordering::SeqCst);
            sleep_while(&self.state, CONTENDED, first.then_some(NAP));
            state = self.spin();
        }
    }

    /// Spins while the lock is held with nobody asleep; returns the state.
    fn spin(&self) -> u32 {
        let mut left = SPINS;
        loop {
            let state = self.state.load(Ordering::Relaxed);
            if state != HELD || left == 0 {
                return state;
            }
            std::hint::spin_loop();
            left -= 1;
        }
    }

    #[inline]
    fn release(&self) {
        self.release_with(|| ());
    }

    /// `release`, running `between` between its look at the lock and a
    /// plain store (tests stretch that window).
    #[inline]
    fn release_with(&self, between: impl FnOnce()) {
        if !self.contended.load(Ordering::Relaxed) && self.state.load(Ordering::Relaxed) == HELD {
            between();
            self.state.store(FREE, Ordering::Release);
        } else {
            self.release_contended();
        }
    }

    #[cold]
    #[inline(never)]
    fn release_contended(&self) {
        if self.state.swap(FREE, Ordering::Release) == CONTENDED {
            wake_one(&self.state);
        }
    }
}

/// Sleeps until `word` is woken, no longer holds `value`, or `nap` (if
/// any) passes.
#[cfg(target_os = "linux")]
fn sleep_while(word: &AtomicU32, value: u32, nap: Option<Duration>) {
    let ts =
        nap.map(|n| libc::timespec { tv_sec: n.as_secs() as libc::time_t, tv_nsec: n.subsec_nanos() as libc::c_long });
    let timeout = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: FUTEX_WAIT reads the u32 at `word` (a live atomic) and the
    // timespec on our stack (or none); it writes nothing. Any error (EAGAIN
    // when the value changed, EINTR, ETIMEDOUT) just means: look again.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG, value, timeout);
    }
}

/// Wakes one thread sleeping on `word`.
#[cfg(target_os = "linux")]
fn wake_one(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE only uses the address as a key; `word` is live.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG, 1);
    }
}

#[cfg(not(target_os = "linux"))]
fn sleep_while(word: &AtomicU32, value: u32, _nap: Option<Duration>) {
    if word.load(Ordering::Relaxed) == value {
        std::thread::yield_now();
    }
}

#[cfg(not(target_os = "linux"))]
fn wake_one(_word: &AtomicU32) {}

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
        // The global panic count first: it is zero unless some thread
        // panics, so a hit reads one word here.
        if std::thread::panicking() && !self.panicking {
            self.lock.poisoned.store(true, Ordering::Relaxed);
        }
        self.lock.release();
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
        // The waiter sets `contended` just before it sleeps.
        let start = std::time::Instant::now();
        while !lock.contended.load(Ordering::Relaxed) {
            assert!(start.elapsed() < Duration::from_secs(30), "the waiter never went to sleep");
            std::thread::sleep(Duration::from_millis(1));
        }
        drop(g);
        t.join().unwrap();
        drop(lock.lock().unwrap());
        assert_eq!(lock.state.load(Ordering::Relaxed), FREE);
    }

    #[test]
    fn a_plain_release_that_lands_after_the_waiter_slept_twice_loses_no_wake() {
        let lock = Arc::new(StateLock::new(()));
        std::mem::forget(lock.lock().unwrap());
        let done = Arc::new(AtomicBool::new(false));
        let (l, d) = (lock.clone(), done.clone());
        // The holder looks at the lock (no sleeper yet: a plain release),
        // then is held up past several naps before its store, which
        // overwrites the waiter's mark and wakes nobody.
        lock.release_with(|| {
            std::thread::spawn(move || {
                drop(l.lock().unwrap());
                d.store(true, Ordering::SeqCst);
            });
            let start = std::time::Instant::now();
            while !lock.contended.load(Ordering::SeqCst) {
                assert!(start.elapsed() < Duration::from_secs(30), "the waiter never went to sleep");
                std::thread::sleep(Duration::from_millis(1));
            }
            std::thread::sleep(NAP * 20);
            assert_eq!(lock.state.load(Ordering::SeqCst), CONTENDED, "the waiter is still waiting");
        });
        // The waiter must get in by itself: nothing will wake it.
        let start = std::time::Instant::now();
        while !done.load(Ordering::SeqCst) {
            assert!(start.elapsed() < Duration::from_secs(30), "the waiter slept through the lost wake");
            std::thread::sleep(Duration::from_millis(1));
        }
        drop(lock.lock().unwrap());
        assert_eq!(lock.state.load(Ordering::SeqCst), FREE);
    }

    #[test]
    fn one_thread_alone_keeps_plain_releases() {
        let lock = StateLock::new(0u32);
        for _ in 0..1000 {
            *lock.lock().unwrap() += 1;
        }
        assert!(!lock.contended.load(Ordering::Relaxed));
        assert_eq!(lock.state.load(Ordering::Relaxed), FREE);
        assert_eq!(*lock.lock().unwrap(), 1000);
    }
}
