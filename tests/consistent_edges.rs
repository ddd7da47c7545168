//! The same edge behaves the same at every entry point, on the ACL emulator
//! (built by `cargo build --workspace`):
//! - a stream the runtime does not know is INVALID_ARGUMENT for
//!   `npualloc_register` and `npualloc_binding_create` as for
//!   `npualloc_malloc`, and nothing is created or registered;
//! - freeing NULL is a successful no-op for `npualloc_free`, the desc's free
//!   callback and `npualloc_pluggable_free`, with no message left behind.

mod common;

use common::*;
use npualloc::ffi::desc::*;
use npualloc::ffi::last_error::last_error_message;
use npualloc::ffi::npualloc_status::{self, *};
use npualloc::ffi::pluggable::{npualloc_pluggable_free, npualloc_pluggable_malloc};
use npualloc::runtime::Stream;
use std::ffi::c_void;
use std::ptr::null_mut;

const DEVICE: i32 = 0;

/// The emulator's usage counters are per device: one test at a time.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn register(a: Handle, s: Stream) -> npualloc_status {
    // SAFETY: a live handle; the stream is only passed through.
    unsafe { npualloc_register(a, s.raw()) }
}

fn unregister(a: Handle, s: Stream) -> npualloc_status {
    // SAFETY: as in `register`.
    unsafe { npualloc_unregister(a, s.raw()) }
}

/// Stream handles the runtime does not know: a made-up value (the issue's
/// 0x1234) and a stream that was destroyed.
fn unknown_streams() -> [Stream; 2] {
    let e = emu();
    let gone = e.create_stream(DEVICE);
    e.destroy_stream(DEVICE, gone);
    [Stream::from_raw(0x1234 as *mut c_void), gone]
}

#[test]
fn register_refuses_a_stream_the_runtime_does_not_know_as_malloc_does() {
    let _g = serial();
    let e = emu();
    let a = create("", DEVICE).unwrap();
    for bad in unknown_streams() {
        let (st, msg) = malloc(a, 4096, bad).unwrap_err();
        assert_eq!(st, NPUALLOC_ERR_INVALID_ARGUMENT, "malloc: {msg}");
        // The header: the message names the call that refused the stream.
        assert!(
            ["aclmdlRICaptureGetInfo failed with", "aclrtStreamQuery failed with"].iter().any(|c| msg.contains(c)),
            "malloc on an unknown stream: {msg}"
        );

        let before = (format!("{:?}", stats(a)), e.usage(DEVICE));
        let st = register(a, bad);
        assert_eq!(st, NPUALLOC_ERR_INVALID_ARGUMENT, "register on {:#x}", bad.raw() as usize);
        let msg = last_error_message();
        assert!(msg.contains("not a live stream"), "{msg}");
        assert_eq!((format!("{:?}", stats(a)), e.usage(DEVICE)), before, "a refused register changed something");

        // Nothing was registered: unregistering it is the unknown-stream no-op.
        assert_eq!(unregister(a, bad), NPUALLOC_OK);
        assert_eq!(e.usage(DEVICE).descs, before.1.descs);

        // The same check for a host-built binding; the out-parameter is untouched.
        let sentinel = 0x5a5a_5000usize as *mut c_void;
        let mut binding = sentinel;
        // SAFETY: a live handle and a valid out-pointer.
        let st = unsafe { npualloc_binding_create(a, bad.raw(), &mut binding) };
        assert_eq!(st, NPUALLOC_ERR_INVALID_ARGUMENT);
        assert!(last_error_message().contains("not a live stream"), "{}", last_error_message());
        assert_eq!(binding, sentinel);
    }

    // A live stream still registers (once), serves, and unregisters.
    let s = e.create_stream(DEVICE);
    let descs = e.usage(DEVICE).descs;
    assert_eq!(register(a, s), NPUALLOC_OK, "{}", last_error_message());
    assert_eq!(register(a, s), NPUALLOC_OK);
    assert_eq!(e.usage(DEVICE).descs, descs + 1);
    assert_eq!(unregister(a, s), NPUALLOC_OK);
    assert_eq!(e.usage(DEVICE).descs, descs);
    // A NULL stream stays refused (the runtime cannot apply an allocator to it).
    assert_eq!(register(a, Stream::DEFAULT), NPUALLOC_ERR_INVALID_ARGUMENT);
    assert_eq!(destroy(a), NPUALLOC_OK);
    e.destroy_stream(DEVICE, s);
}

#[test]
fn freeing_null_is_a_no_op_at_every_entry_point() {
    let _g = serial();
    let a = create("", DEVICE).unwrap();
    let p = malloc(a, 4096, Stream::DEFAULT).unwrap();
    let before = format!("{:?}", stats(a));

    // Direct.
    assert_eq!(free(a, 0), NPUALLOC_OK, "{}", last_error_message());
    assert_eq!(last_error_message(), "");
    // A NULL or dead handle is still refused, NULL pointer or not.
    assert_eq!(free(null_mut(), 0), NPUALLOC_ERR_INVALID_ARGUMENT);
    assert!(!last_error_message().is_empty());

    // The desc's free callback (through a binding, as the runtime calls it).
    let mut binding: *mut c_void = null_mut();
    // SAFETY: a live handle, the default stream, a valid out-pointer.
    assert_eq!(unsafe { npualloc_binding_create(a, null_mut(), &mut binding) }, NPUALLOC_OK);
    // SAFETY: a live binding; NULL block on purpose.
    unsafe { npualloc_desc_free(binding, null_mut()) };
    assert_eq!(last_error_message(), "", "desc free of NULL left a message");
    // The binding is checked all the same.
    // SAFETY: NULL binding on purpose (refused before any use).
    unsafe { npualloc_desc_free(null_mut(), null_mut()) };
    assert!(last_error_message().contains("binding"), "{}", last_error_message());
    assert_eq!(format!("{:?}", stats(a)), before, "a NULL free changed the statistics");

    // The desc path still refuses what is not a block, and frees what is.
    // SAFETY: a live binding; the size is valid.
    let block = unsafe { npualloc_desc_alloc(binding, 512) };
    assert!(!block.is_null(), "{}", last_error_message());
    // SAFETY: as above; an interior address on purpose.
    unsafe { npualloc_desc_free(binding, block.cast::<u8>().add(1).cast()) };
    assert!(!last_error_message().is_empty(), "an interior pointer is refused");
    // SAFETY: as above.
    unsafe { npualloc_desc_free(binding, block) };
    assert_eq!(last_error_message(), "");
    // SAFETY: made by npualloc_binding_create, no block of it is live.
    assert_eq!(unsafe { npualloc_binding_destroy(binding) }, NPUALLOC_OK);

    // The pluggable hook, for any device number (NULL is not looked up).
    // SAFETY: arguments as torch_npu passes them.
    unsafe {
        let q = npualloc_pluggable_malloc(4096, DEVICE, null_mut());
        assert!(!q.is_null(), "{}", last_error_message());
        for device in [DEVICE, 1] {
            npualloc_pluggable_free(null_mut(), 0, device, null_mut());
            assert_eq!(last_error_message(), "", "pluggable free of NULL on device {device}");
        }
        npualloc_pluggable_free(q, 4096, DEVICE, null_mut());
        assert_eq!(last_error_message(), "");
    }

    assert_eq!(free(a, p), NPUALLOC_OK);
    // A pointer that is not NULL and not live is refused as before.
    assert_eq!(free(a, p), NPUALLOC_ERR_UNKNOWN_POINTER);
    assert_eq!(destroy(a), NPUALLOC_OK);
}
