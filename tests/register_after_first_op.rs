//! `npualloc_register` on a stream that already has work queued succeeds but
//! warns in the last error: GE keeps its own allocator for a stream that ran
//! an op before anything was registered (docs/runtime-behaviour.md "How GE
//! uses a registered allocator"), so the registration may do nothing. On an
//! idle stream it leaves no message.

mod common;

use common::*;
use npualloc::ffi::desc::{npualloc_register, npualloc_unregister};
use npualloc::ffi::last_error::last_error_message;
use npualloc::ffi::memcpy::npualloc_memcpy2d_async;
use npualloc::ffi::npualloc_status::*;

#[test]
fn registering_a_busy_stream_warns() {
    let emu = emu();
    let a = create("", 0).expect("create");
    let idle = emu.create_stream(0);
    let busy = emu.create_stream(0);
    // Work queued on `busy`: a copy out of one of the allocator's blocks,
    // held so it stays queued.
    let p = malloc(a, 4096, busy).expect("malloc");
    let mut host = vec![0u8; 4096];
    emu.hold(busy);
    // SAFETY: a live handle, a block of 4096 bytes and a host buffer that
    // outlives the stream's work (released and synchronized below).
    unsafe {
        let st =
            npualloc_memcpy2d_async(a, host.as_mut_ptr().cast(), 4096, p as *const _, 4096, 4096, 1, 2, busy.raw());
        assert_eq!(st, NPUALLOC_OK, "{}", last_error_message());

        assert_eq!(npualloc_register(a, idle.raw()), NPUALLOC_OK);
        assert_eq!(last_error_message(), "", "an idle stream gives no warning");

        assert_eq!(npualloc_register(a, busy.raw()), NPUALLOC_OK);
        let msg = last_error_message();
        assert!(msg.starts_with("warning:"), "{msg}");
        assert!(msg.contains("register before the first op on the stream"), "{msg}");

        assert_eq!(npualloc_unregister(a, busy.raw()), NPUALLOC_OK);
        assert_eq!(npualloc_unregister(a, idle.raw()), NPUALLOC_OK);
    }
    emu.release(busy);
    assert_eq!(free(a, p), NPUALLOC_OK);
    assert_eq!(destroy(a), NPUALLOC_OK);
    emu.destroy_stream(0, busy);
    emu.destroy_stream(0, idle);
}
