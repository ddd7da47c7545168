//! Test-only park points: a thread armed for a name stops at `hit(name)` until the test lets it go, so
//! races become sequences the test chooses, with no timing.

use std::cell::RefCell;
use std::sync::mpsc::{Receiver, Sender};

struct Armed {
    name: &'static str,
    arrived: Sender<()>,
    go: Receiver<()>,
}

thread_local! {
    static ARMED: RefCell<Option<Armed>> = const { RefCell::new(None) };
}

/// Parks this thread once at the next `hit(name)`: it sends on `arrived`, then waits for `go`. On a thread
/// whose locals are gone nothing is armed: `arrived` is dropped, so the test's wait errs instead of hanging.
pub(crate) fn arm(name: &'static str, arrived: Sender<()>, go: Receiver<()>) {
    let _ = ARMED.try_with(|a| *a.borrow_mut() = Some(Armed { name, arrived, go }));
}

/// A park point (passed through on a thread whose locals are gone).
pub(crate) fn hit(name: &'static str) {
    let armed = ARMED
        .try_with(|a| {
            let mut a = a.borrow_mut();
            if a.as_ref().is_some_and(|p| p.name == name) {
                a.take()
            } else {
                None
            }
        })
        .ok()
        .flatten();
    if let Some(p) = armed {
        let _ = p.arrived.send(());
        let _ = p.go.recv();
    }
}
