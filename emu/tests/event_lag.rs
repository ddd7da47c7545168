//! Completion reported late (`aclemu_set_event_lag`): process-wide, so it
//! has a test binary of its own.

mod common;
use ascendcl::*;
use common::*;

#[test]
fn completion_may_be_reported_late_until_a_synchronize() {
    let dev = Dev::take();
    let (s, e) = (stream(), event());
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        assert_eq!(aclemu_set_event_lag(2), 0);
        assert_eq!(aclrtRecordEvent(e, s), 0);
        // The work is done, but the first two queries do not know yet.
        assert_eq!(status(e), NOT_READY);
        assert_eq!(status(e), NOT_READY);
        assert_eq!(status(e), COMPLETE);
        // Each synchronize call ends the lag of what it covers.
        assert_eq!(aclrtRecordEvent(e, s), 0);
        assert_eq!(aclrtSynchronizeEvent(e), 0);
        assert_eq!(status(e), COMPLETE);
        assert_eq!(aclrtRecordEvent(e, s), 0);
        assert_eq!(aclrtSynchronizeStream(s), 0);
        assert_eq!(status(e), COMPLETE);
        assert_eq!(aclrtRecordEvent(e, s), 0);
        assert_eq!(aclrtSynchronizeDevice(), 0);
        assert_eq!(status(e), COMPLETE);
        // A lag never makes unfinished work look finished.
        assert_eq!(aclemu_stream_hold(s), 0);
        assert_eq!(aclrtRecordEvent(e, s), 0);
        assert_eq!(status(e), NOT_READY);
        assert_eq!(aclemu_stream_release(s), 0);
        assert_eq!(status(e), NOT_READY);
        assert_eq!(status(e), NOT_READY);
        assert_eq!(status(e), COMPLETE);
        assert_eq!(aclemu_set_event_lag(0), 0);
        assert_eq!(aclrtRecordEvent(e, s), 0);
        assert_eq!(status(e), COMPLETE);
        assert_eq!(aclrtDestroyEvent(e), 0);
        assert_eq!(aclrtDestroyStream(s), 0);
    }
    dev.assert_clean();
}
