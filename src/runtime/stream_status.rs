//! Whether a stream still has queued work (`aclrtStreamQuery`).

use super::{check, AclCallError, Runtime, Stream};
use crate::sys;

impl Runtime {
    /// `Some(true)` if work on `stream` is unfinished, `Some(false)` if idle, `None` if the runtime lacks
    /// `aclrtStreamQuery` or the stream is capturing (the runtime refuses to query it: Note [capture]). Does not wait.
    pub fn stream_busy(&self, stream: Stream) -> Result<Option<bool>, AclCallError> {
        let Some(query) = self.api.aclrtStreamQuery else { return Ok(None) };
        if self.is_capturing(stream).unwrap_or(false) {
            return Ok(None);
        }
        let mut status: sys::aclrtStreamStatus = sys::ACL_STREAM_STATUS_COMPLETE;
        // SAFETY: the runtime validates the handle; status is a valid out-pointer.
        check("aclrtStreamQuery", unsafe { query(stream.raw(), &mut status) })?;
        Ok(Some(status == sys::ACL_STREAM_STATUS_NOT_READY))
    }
}
