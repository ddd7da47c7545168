//! Registering after the stream's first op
//! (docs/runtime-behaviour.md "How GE uses a registered allocator"): GE keeps its own allocator for a stream
//! that ran an op with nothing registered, so a later `npualloc_register`
//! returns OK and has no effect. The emulator models GE (`aclemu_run_op`).
//! npualloc cannot ask GE, but work still queued on the stream is a sign it
//! can see: then the call leaves a warning in the last error. On an idle
//! stream it leaves no message.

mod common;

use common::*;
use npualloc::ffi::desc::{npualloc_register, npualloc_unregister};
use npualloc::ffi::last_error::last_error_message;
use npualloc::ffi::npualloc_status::*;
use std::ffi::c_void;

type RunOp = unsafe extern "C" fn(*mut c_void, *const usize, usize) -> i32;

fn run_op() -> RunOp {
    emu();
    let path = std::ffi::CString::new(emulator_path().to_str().unwrap()).unwrap();
    // SAFETY: valid C strings; the emulator is loaded and never closed, and
    // aclemu_run_op has the signature emu/include/acl_emu.h declares.
    unsafe {
        let handle = libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD);
        assert!(!handle.is_null());
        let sym = libc::dlsym(handle, c"aclemu_run_op".as_ptr());
        assert!(!sym.is_null());
        std::mem::transmute::<*mut c_void, RunOp>(sym)
    }
}

#[test]
fn registering_after_the_first_op_warns_when_npualloc_can_tell() {
    let emu = emu();
    let run_op = run_op();
    let a = create("", 0).expect("create");
    let (idle, busy) = (emu.create_stream(0), emu.create_stream(0));
    let sizes = [4096usize, 1 << 20];
    // SAFETY: live handles and streams; `sizes` outlives the calls.
    unsafe {
        // The first op on `busy` runs with nothing registered; the stream is
        // held, so the op is still queued when npualloc registers.
        emu.hold(busy);
        assert_eq!(run_op(busy.raw(), sizes.as_ptr(), sizes.len()), 0);

        assert_eq!(npualloc_register(a, idle.raw()), NPUALLOC_OK);
        assert_eq!(last_error_message(), "", "an idle stream gives no warning");
        assert_eq!(npualloc_register(a, busy.raw()), NPUALLOC_OK);
        let msg = last_error_message();
        assert!(msg.starts_with("warning:"), "{msg}");
        assert!(msg.contains("register before the first op on the stream"), "{msg}");
        emu.release(busy);

        // The warning was right: GE keeps its own allocator for `busy`,
        // while `idle` (no op before registering) uses npualloc.
        assert_eq!(run_op(busy.raw(), sizes.as_ptr(), sizes.len()), 0);
        assert_eq!(stats(a).num_allocs, 0);
        assert_eq!(run_op(idle.raw(), sizes.as_ptr(), sizes.len()), 0);
        assert_eq!(stats(a).num_allocs, 2);

        assert_eq!(npualloc_unregister(a, busy.raw()), NPUALLOC_OK);
        assert_eq!(npualloc_unregister(a, idle.raw()), NPUALLOC_OK);
    }
    assert_eq!(destroy(a), NPUALLOC_OK);
    emu.destroy_stream(0, busy);
    emu.destroy_stream(0, idle);
}
