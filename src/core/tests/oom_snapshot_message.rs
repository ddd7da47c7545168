//! The message of a request refused with `oom_snapshot:PATH` set: it ends
//! by naming the file written (or saying why it could not be written), the
//! observer gets the same text after the file is in place, and without the
//! key the message says nothing of a snapshot.

use super::support::{allocator, emu_lock, set_capacity};
use crate::core::*;
use std::ffi::{c_char, c_void, CStr};
use std::path::{Path, PathBuf};

/// What the observer saw: the report, and whether the file was there.
struct Seen {
    path: PathBuf,
    reports: Vec<(String, bool)>,
}

unsafe extern "C" fn observe(user: *mut c_void, _: i32, _: usize, report: *const c_char) {
    // SAFETY: each test passes a live, exclusive `Seen`; `report` is a C
    // string valid during the call (the hook's contract).
    let (seen, text) = unsafe { (&mut *(user as *mut Seen), CStr::from_ptr(report)) };
    seen.reports.push((text.to_string_lossy().into_owned(), seen.path.is_file()));
}

/// A 30 MiB request refused on a 64 MiB device holding 40 MiB: its
/// message, and what the observer saw.
fn refuse(config: &str, path: &Path) -> (String, Vec<(String, bool)>) {
    set_capacity(64 << 20);
    let a = allocator(&format!("expandable_segments:false{config}"));
    let mut seen = Seen { path: path.to_path_buf(), reports: vec![] };
    a.set_out_of_memory_observer(Some((observe, &mut seen as *mut Seen as *mut c_void)));
    let p = a.malloc(40 << 20, Stream::DEFAULT).unwrap();
    let err = a.malloc(30 << 20, Stream::DEFAULT).unwrap_err();
    let Error::OutOfMemory(msg) = err else { panic!("expected OOM, got {err:?}") };
    a.set_out_of_memory_observer(None);
    a.free(p).unwrap();
    a.teardown().unwrap();
    set_capacity(1 << 30);
    (msg, seen.reports)
}

#[test]
fn the_message_names_the_snapshot_file_written() {
    let _g = emu_lock();
    let path = std::env::temp_dir().join(format!("npualloc-oom-message-{}.pickle", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let (msg, reports) = refuse(&format!(",oom_snapshot:{}", path.display()), &path);
    let written = path.is_file();
    let _ = std::fs::remove_file(&path);
    assert!(written, "the snapshot was written");
    let sentence = format!(
        "Last failure: aclrtMalloc failed with ACL_ERROR_RT_MEMORY_ALLOCATION (207001). A memory snapshot \
         (oom_snapshot) was written to {}.",
        path.display()
    );
    assert!(msg.ends_with(&sentence), "{msg}");
    assert_eq!(reports, vec![(msg, true)], "the observer gets the same text, once the file is there");
}

#[test]
fn the_message_says_why_the_snapshot_could_not_be_written() {
    let _g = emu_lock();
    let dir = std::env::temp_dir().join(format!("npualloc-oom-missing-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let path = dir.join("oom.pickle");
    let (msg, reports) = refuse(&format!(",oom_snapshot:{}", path.display()), &path);
    assert!(!path.exists());
    // The directory does not exist: the write's own error (ENOENT).
    let why = std::io::Error::from_raw_os_error(2);
    let sentence =
        format!("(207001). The memory snapshot (oom_snapshot) could not be written to {}: {why}.", path.display());
    assert!(msg.ends_with(&sentence), "{msg}");
    assert_eq!(reports, vec![(msg, false)]);
}

#[test]
fn without_oom_snapshot_the_message_says_nothing_of_one() {
    let _g = emu_lock();
    let path = std::env::temp_dir().join("npualloc-oom-unset.pickle");
    let (msg, reports) = refuse("", &path);
    assert!(msg.ends_with("Last failure: aclrtMalloc failed with ACL_ERROR_RT_MEMORY_ALLOCATION (207001)."), "{msg}");
    assert!(!msg.contains("snapshot"), "{msg}");
    assert_eq!(reports, vec![(msg, false)]);
}
