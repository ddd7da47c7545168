//! The process-wide budget of device address space: every expandable range is charged here, and the charge goes
//! only with the reservation, so the budget equals what is reserved (docs/design.md, Note [address-space budget]).

use std::sync::atomic::{AtomicUsize, Ordering};

/// The most one reservation may ask for (128 GiB, see the Note).
pub(crate) const MAX_RESERVATION: usize = 128 << 30;

/// What all expandable ranges of the process may reserve together.
pub(crate) const DEFAULT_BUDGET: usize = 4 << 40;

/// A new range takes at most this fraction of the budget left.
const SHARE: usize = 16;

/// Bytes reserved by every allocator of the process.
static RESERVED: AtomicUsize = AtomicUsize::new(0);
/// The budget (changed only by tests).
static LIMIT: AtomicUsize = AtomicUsize::new(DEFAULT_BUDGET);

pub(crate) fn reserved() -> usize {
    RESERVED.load(Ordering::Relaxed)
}

/// The process-wide budget.
pub(crate) fn limit() -> usize {
    LIMIT.load(Ordering::Relaxed)
}

/// Replaces the budget; tests use it to run out of address space.
#[cfg(test)]
pub(crate) fn set_limit(bytes: usize) {
    LIMIT.store(bytes, Ordering::Relaxed);
}

/// The most a new range should take now: `1/SHARE` of what is left.
pub(crate) fn share() -> usize {
    limit().saturating_sub(reserved()) / SHARE
}

/// Charges `bytes`, or says the budget would be passed.
pub(crate) fn take(bytes: usize) -> bool {
    let limit = limit();
    RESERVED
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |cur| cur.checked_add(bytes).filter(|&n| n <= limit))
        .is_ok()
}

/// Gives back a charge (the reservation failed or was released).
pub(crate) fn give(bytes: usize) {
    RESERVED.fetch_sub(bytes, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Threads charging and refunding at once never pass the budget and
    /// leave the count where it was.
    #[test]
    fn concurrent_charges_stay_within_the_budget() {
        // No allocator of another test reserves meanwhile.
        let _g = crate::core::tests::support::emu_lock();
        let before = reserved();
        let room = limit() - before;
        let piece = room / 64 + 1;
        let taken: Vec<usize> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(move || {
                        let mut n = 0;
                        for _ in 0..32 {
                            if take(piece) {
                                n += 1;
                            }
                        }
                        n
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let n: usize = taken.iter().sum();
        // Other tests of this process may hold ranges meanwhile: at most
        // what was free fits, and at least one charge failed.
        assert!(n * piece <= room, "{n} charges of {piece} passed a room of {room}");
        assert!(n < 128, "every charge succeeded: the budget was not enforced");
        for _ in 0..n {
            give(piece);
        }
        assert!(reserved() < before + piece, "refunds left {} charged", reserved() - before);
    }
}
