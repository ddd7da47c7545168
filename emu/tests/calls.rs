//! `aclemu_call_count` / `aclemu_thread_call_count`: counts only grow, every
//! call is counted (a failed or fault-refused one too), a thread sees only
//! its own calls while another thread calls the same function, and arming
//! or reading fault injection leaves the counts alone.

use ascendcl::*;
use std::ffi::CStr;
use std::ptr::null;
use std::sync::Barrier;

fn total(name: &CStr) -> i64 {
    // SAFETY: a valid C string.
    unsafe { aclemu_call_count(name.as_ptr()) }
}

fn mine(name: &CStr) -> i64 {
    // SAFETY: a valid C string.
    unsafe { aclemu_thread_call_count(name.as_ptr()) }
}

fn get_device() -> i32 {
    let mut id = -1;
    // SAFETY: a live out-pointer.
    unsafe { aclrtGetDevice(&mut id) }
}

#[test]
fn unknown_names_are_refused() {
    // SAFETY: NULL and valid C strings.
    unsafe {
        assert_eq!(aclemu_call_count(null()), -1);
        assert_eq!(aclemu_thread_call_count(null()), -1);
        assert_eq!(aclemu_call_count(c"aclrtNope".as_ptr()), -1);
        assert_eq!(aclemu_thread_call_count(c"aclemu_run_op".as_ptr()), -1);
    }
}

#[test]
fn a_thread_counts_its_own_calls_while_another_calls_too() {
    // aclrtGetDevice fails with no current context on a fresh thread, and is
    // counted all the same; no other test of this binary calls it.
    let name = c"aclrtGetDevice";
    let start = Barrier::new(2);
    let total_before = total(name);
    std::thread::scope(|s| {
        let other = s.spawn(|| {
            start.wait();
            for _ in 0..500 {
                get_device();
            }
            mine(name)
        });
        start.wait();
        let before = mine(name);
        for _ in 0..300 {
            get_device();
        }
        assert_eq!(mine(name) - before, 300);
        assert_eq!(other.join().unwrap(), 500);
    });
    assert_eq!(total(name) - total_before, 800);
}

#[test]
fn fault_injection_does_not_touch_the_counts() {
    // No other test of this binary calls aclrtGetMemInfo.
    let name = c"aclrtGetMemInfo";
    let (mut free, mut all) = (0usize, 0usize);
    let before = mine(name);
    // SAFETY: valid C strings and live out-pointers.
    unsafe {
        assert_eq!(aclemu_fail_nth(name.as_ptr(), 2), 0);
        aclrtGetMemInfo(0, &mut free, &mut all);
        assert_eq!(aclemu_fault_pending(name.as_ptr()), 1);
        // The refused call is counted as well.
        assert_ne!(aclrtGetMemInfo(0, &mut free, &mut all), 0);
        assert_eq!(aclemu_fail_nth(name.as_ptr(), 0), 0);
    }
    assert_eq!(mine(name) - before, 2);
    assert!(total(name) >= 2);
}

#[test]
fn the_calls_outside_the_entry_macro_are_counted() {
    let before = [c"aclrtGetSocName", c"aclrtAllocatorCreateDesc", c"aclrtPeekAtLastError"].map(mine);
    // SAFETY: no arguments, or plain values; the desc is destroyed.
    unsafe {
        aclrtGetSocName();
        let desc = aclrtAllocatorCreateDesc();
        assert!(!desc.is_null());
        assert_eq!(aclrtAllocatorDestroyDesc(desc), 0);
        aclrtPeekAtLastError(0);
    }
    let after = [c"aclrtGetSocName", c"aclrtAllocatorCreateDesc", c"aclrtPeekAtLastError"].map(mine);
    assert_eq!([after[0] - before[0], after[1] - before[1], after[2] - before[2]], [1, 1, 1]);
}
