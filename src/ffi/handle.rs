//! The opaque allocator handle C sees, and the Rust object behind it.
//!
//! `npualloc_allocator *` is a `Box<Allocator>` made by `npualloc_create` and
//! released by `npualloc_destroy`. A magic word lets every call refuse a
//! handle that is not (or no longer) an allocator instead of trusting it.

use crate::core::DeviceAllocator;
use crate::error::{Error, Result};
use crate::runtime::Stream;
use std::collections::HashMap;
use std::sync::Mutex;

/// Opaque allocator handle (C sees only a pointer to it).
// No #[repr(C)]: cbindgen then declares an incomplete struct type
// (`typedef struct npualloc_allocator npualloc_allocator;`) instead of a
// zero-length array, which -pedantic C rejects.
#[allow(non_camel_case_types)]
pub struct npualloc_allocator {
    _private: [u8; 0],
}

const LIVE: u64 = 0x6e70_7561_6c6c_6f63; // "npualloc"
const DEAD: u64 = 0xdead_dead_dead_dead;

/// One stream's registration: its desc and the binding the callbacks get.
pub(crate) struct Registration {
    pub desc: usize,
    pub binding: *mut super::desc::Binding,
}

// SAFETY: the binding pointer is owned by the registration and only touched
// under the registrations lock or by the runtime's callbacks.
unsafe impl Send for Registration {}

pub(crate) struct Allocator {
    magic: u64,
    pub core: DeviceAllocator,
    pub registrations: Mutex<HashMap<Stream, Registration>>,
}

impl Allocator {
    pub fn new(core: DeviceAllocator) -> Box<Allocator> {
        Box::new(Allocator { magic: LIVE, core, registrations: Mutex::new(HashMap::new()) })
    }

    pub fn into_raw(self: Box<Self>) -> *mut npualloc_allocator {
        Box::into_raw(self).cast()
    }

    /// Borrows the allocator behind a handle, refusing NULL and non-allocators.
    ///
    /// # Safety
    /// A non-NULL `a` must be readable for an `Allocator` (a handle from
    /// `npualloc_create` not yet destroyed, or at worst a recently destroyed one).
    #[inline]
    pub unsafe fn from_handle<'a>(a: *const npualloc_allocator) -> Result<&'a Allocator> {
        if a.is_null() {
            return Err(Error::InvalidArgument("allocator handle must not be NULL".into()));
        }
        let ptr = a.cast::<Allocator>();
        if !ptr.is_aligned() {
            return Err(Error::InvalidArgument(format!("{a:p} is not an npualloc allocator handle")));
        }
        // SAFETY: non-NULL and aligned; the caller's contract covers validity.
        let this = unsafe { &*ptr };
        if this.magic != LIVE {
            return Err(Error::InvalidArgument(format!("{a:p} is not a live npualloc allocator handle")));
        }
        Ok(this)
    }

    /// Takes back ownership for destruction.
    ///
    /// # Safety
    /// As `from_handle`, and no other thread may use the handle any more.
    pub unsafe fn take(a: *mut npualloc_allocator) -> Result<Box<Allocator>> {
        // SAFETY: forwarded.
        unsafe { Self::from_handle(a) }?;
        // SAFETY: a came from Box::into_raw in `into_raw` and is live (magic checked).
        let mut boxed = unsafe { Box::from_raw(a.cast::<Allocator>()) };
        boxed.magic = DEAD;
        Ok(boxed)
    }
}

impl Drop for Allocator {
    fn drop(&mut self) {
        self.magic = DEAD;
    }
}
