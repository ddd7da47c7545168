//! A physical handle has one shareable handle for its life: the runtime exports a handle once
//! (docs/runtime-behaviour.md, `aclrtMemExportToShareableHandle`). When the runtime refuses to free an exported
//! handle, the handle stays cached with its shareable handle, and a block mapped on it later is exported under that
//! one again.

use super::support::{allocator, check_accounting, drop_stream, emu_lock, fail_nth, fault_pending, finish, new_stream};
use super::support::{Baseline, MIB};

#[test]
fn a_handle_whose_free_was_refused_is_exported_again_under_its_shareable_handle() {
    let _g = emu_lock();
    let base = Baseline::take();
    let a = allocator("");
    let s = new_stream();
    let size = 20 * MIB;
    let p = a.malloc(size, s).unwrap();
    a.ipc_export(p).unwrap();
    a.free(p).unwrap();
    let handles = a.stats().unwrap().num_physical_mallocs;
    fail_nth("aclrtFreePhysical", 1);
    let got = a.empty_cache();
    let pending = fault_pending("aclrtFreePhysical");
    fail_nth("aclrtFreePhysical", 0);
    assert_eq!(pending, 0, "the refusal fired");
    assert!(got.is_err(), "empty_cache reports the refused free: {got:?}");
    check_accounting(&a, &base, None, "after the refused free");
    // The first handle under the block (how many there are depends on the device's free memory).
    let kept = a.own_accounting().1;
    assert!(kept > 0, "the handle that could not be freed is cached");
    let q = a.malloc(kept, s).unwrap();
    assert_eq!(a.stats().unwrap().num_physical_mallocs, handles, "the block is mapped on the cached handle");
    a.ipc_export(q).expect("exported under the cached handle's shareable handle");
    a.free(q).unwrap();
    check_accounting(&a, &base, None, "at the end");
    finish(a);
    drop_stream(s);
}
