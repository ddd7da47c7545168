//! npualloc called from a host's thread-local destructor at thread exit,
//! after npualloc's own thread-locals on that thread are gone (they were
//! first used after the host's, so their destructors run first): malloc
//! (through a route check and a device call), free, a thread route's end
//! and a hook's removal all succeed, a thread route's begin is refused
//! (it could never end), and nothing is lost: the allocator's
//! counts balance, the pool's route count is back to 0, and the device's
//! physical memory is what the allocator counts as reserved.

mod common;
use common::*;
use npualloc::ffi::hooks::npualloc_set_before_release;
use npualloc::ffi::last_error::last_error_message;
use npualloc::ffi::npualloc_status;
use npualloc::ffi::pools::{npualloc_pool_begin, npualloc_pool_create, npualloc_pool_destroy, npualloc_pool_end};
use npualloc::runtime::Stream;
use std::cell::RefCell;
use std::ffi::c_void;
use std::ptr::{null, null_mut};
use std::sync::mpsc::{channel, Sender};

const MIB: usize = 1 << 20;
const OK: npualloc_status = npualloc_status::NPUALLOC_OK;
/// A device no other test of this binary uses.
const DEV: i32 = 5;

unsafe extern "C" fn hook(_user: *mut c_void, _device: i32) {}

/// What the host's destructor does, and where it reports.
struct AtExit {
    a: usize,
    pool: u64,
    /// A block the thread allocated, freed at exit.
    block: usize,
    report: Sender<(&'static str, npualloc_status, String)>,
}

impl Drop for AtExit {
    fn drop(&mut self) {
        let a = self.a as Handle;
        let say = |what, st: npualloc_status| {
            let _ = self.report.send((what, st, if st == OK { String::new() } else { last_error_message() }));
        };
        // A fresh 64 MiB: a device call, and a route check (a route is
        // active until the exited thread's are reaped).
        match malloc(a, 64 * MIB, Stream::DEFAULT) {
            Ok(p) => {
                say("malloc", OK);
                say("free of the new block", free(a, p));
            }
            Err((st, _)) => say("malloc", st),
        }
        say("free", free(a, self.block));
        // SAFETY: a live handle; NULL: the calling thread's route.
        say("pool_end", unsafe { npualloc_pool_end(a, self.pool, null_mut()) });
        // A thread route cannot begin now (it could never end): refused,
        // changing nothing.
        // SAFETY: a live handle and pool; NULL: the calling thread.
        say("pool_begin", unsafe { npualloc_pool_begin(a, self.pool, null_mut()) });
        // SAFETY: a live handle; removing the hook.
        say("set_before_release", unsafe { npualloc_set_before_release(a, None, null_mut()) });
    }
}

thread_local! {
    static HOST: RefCell<Option<AtExit>> = const { RefCell::new(None) };
}

#[test]
fn calls_from_a_thread_local_destructor_succeed_and_lose_nothing() {
    let base = emu().usage(DEV);
    let a = create("", DEV).expect("create");
    let mut pool = 0u64;
    // SAFETY: a live handle, NULL config (the defaults), a valid out-pointer.
    assert_eq!(unsafe { npualloc_pool_create(a, null(), &mut pool) }, OK, "{}", last_error_message());
    let (tx, rx) = channel();
    let handle = a as usize;
    std::thread::spawn(move || {
        let a = handle as Handle;
        // The host's thread-local first: its destructor runs last.
        HOST.with(|h| *h.borrow_mut() = Some(AtExit { a: handle, pool, block: 0, report: tx }));
        // Then npualloc's, each used once: the thread route, the hook
        // call counter, the device-call attribution of a growth.
        // SAFETY: a live handle and pool; NULL: the calling thread.
        assert_eq!(unsafe { npualloc_pool_begin(a, pool, null_mut()) }, OK);
        // Installed, then replaced (a replacement asks whether this thread
        // is inside a hook call).
        for _ in 0..2 {
            // SAFETY: a live handle and a hook that does nothing.
            assert_eq!(unsafe { npualloc_set_before_release(a, Some(hook), null_mut()) }, OK);
        }
        let block = malloc(a, 8 * MIB, Stream::DEFAULT).expect("a routed malloc");
        HOST.with(|h| h.borrow_mut().as_mut().unwrap().block = block);
        // Exits inside its route.
    })
    .join()
    .unwrap();
    let got: Vec<_> = rx.iter().collect();
    for (what, st, msg) in &got {
        let want = if *what == "pool_begin" { npualloc_status::NPUALLOC_ERR_INVALID_ARGUMENT } else { OK };
        assert_eq!(*st, want, "{what} from a thread-local destructor: {msg}");
    }
    let names: Vec<&str> = got.iter().map(|g| g.0).collect();
    assert_eq!(names, ["malloc", "free of the new block", "free", "pool_end", "pool_begin", "set_before_release"]);
    let s = stats(a);
    assert_eq!((s.allocated_bytes, s.active_blocks), (0, 0), "every block was freed");
    assert_eq!(s.num_allocs, s.num_frees, "allocs and frees balance");
    let u = emu().usage(DEV);
    assert_eq!(u.physical_bytes - base.physical_bytes, s.reserved_bytes, "the device holds what npualloc counts");
    // The route ended with the thread: the pool can go.
    // SAFETY: a live handle and pool.
    assert_eq!(unsafe { npualloc_pool_destroy(a, pool) }, OK, "{}", last_error_message());
    assert_eq!(destroy(a), OK, "{}", last_error_message());
    assert!(emu().usage(DEV).physical_bytes == base.physical_bytes, "nothing left on the device");
}
