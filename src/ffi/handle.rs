//! The objects C holds by pointer, and the one check every use makes.
//!
//! A handle is a `Box<Checked<T>>` turned into a raw pointer: a magic word
//! that names the kind, then the value. Every call refuses NULL, a pointer
//! to something else (another kind, foreign memory) and a destroyed handle
//! with `NPUALLOC_ERR_INVALID_ARGUMENT` and a message naming the kind,
//! instead of trusting the pointer. The kinds are the allocator
//! (`npualloc_allocator *`, made by `npualloc_create`) and the binding
//! behind a desc's `obj` (`super::desc::Binding`).
//!
//! Destroying a handle drops its value but keeps its memory, the magic word
//! saying "destroyed", for the process's life (`SHELLS`): no later handle
//! gets its address, so a destroyed handle is refused however late it comes
//! back (a second destroy, a free after destroy, a binding that outlived
//! its allocator), never read as another allocator created since. A shell
//! is the size of its kind (about 600 bytes for an allocator).

use crate::core::DeviceAllocator;
use crate::error::{Error, Result};
use crate::runtime::Stream;
use std::collections::HashMap;
use std::sync::Mutex;

/// A kind of object C holds by pointer.
pub(crate) trait HandleKind {
    /// The magic word of a live object of this kind; unique per kind.
    const LIVE: u64;
    /// What messages call a handle of this kind, e.g. "allocator handle".
    const NOUN: &'static str;
}

/// The word a destroyed handle of any kind carries.
const DESTROYED: u64 = 0xdead_dead_dead_dead;

/// The addresses of destroyed handles' memory, kept so that it is never
/// handed out again (and stays reachable: a leak checker sees it in use).
static SHELLS: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// A value of kind `T` as C holds it. The magic word is read on its own
/// before anything else of the object is trusted. It comes first (`repr(C)`
/// fixes the order) so the check reads the same 8 bytes whatever the kind:
/// a handle of a smaller kind passed where a larger one is expected is
/// refused without reading past its end.
#[repr(C)]
pub(crate) struct Checked<T: HandleKind> {
    magic: u64,
    value: T,
}

impl<T: HandleKind> Checked<T> {
    /// Boxes `value` as a live handle; C owns the result until it is destroyed.
    pub fn into_raw(value: T) -> *mut Checked<T> {
        Box::into_raw(Box::new(Checked { magic: T::LIVE, value }))
    }

    /// Borrows the value behind a handle, refusing NULL, misaligned
    /// pointers, objects of another kind and destroyed handles.
    ///
    /// # Safety
    /// A non-NULL, aligned `p` must be readable for a `Checked<T>`: a handle
    /// of this kind, live or destroyed (its memory stays), as the C contract
    /// requires.
    #[inline]
    pub unsafe fn borrow<'a, P>(p: *const P) -> Result<&'a T> {
        let ptr = p.cast::<Checked<T>>();
        if ptr.is_null() {
            return Err(refused_null::<T>());
        }
        if !ptr.is_aligned() {
            return Err(refused::<T>(p.cast(), 0));
        }
        // SAFETY: non-NULL and aligned; the caller guarantees the memory is
        // readable for a Checked<T>. Only the magic word is read.
        let magic = unsafe { std::ptr::addr_of!((*ptr).magic).read() };
        if magic != T::LIVE {
            return Err(refused::<T>(p.cast(), magic));
        }
        // SAFETY: the magic word says this is a live Checked<T>, made by
        // `into_raw` and not yet destroyed.
        Ok(unsafe { &(*ptr).value })
    }

    /// Takes the object back from C for destruction (its value drops, in
    /// place, when the result drops); from now on the handle reads as
    /// destroyed, and its memory is never reused.
    ///
    /// # Safety
    /// As [`borrow`](Self::borrow), and no other thread may use the handle
    /// any more.
    pub unsafe fn destroy<P>(p: *mut P) -> Result<Owned<T>> {
        // SAFETY: forwarded to the caller.
        unsafe { Self::borrow(p.cast_const()) }?;
        let ptr = p.cast::<Checked<T>>();
        // SAFETY: live (checked above), so it came from Box::into_raw in
        // `into_raw`; the caller gives up every other use.
        unsafe { (*ptr).magic = DESTROYED };
        Ok(Owned(ptr))
    }

    /// Marks a handle destroyed without freeing it (tests use this to check
    /// the destroyed-handle message without reading freed memory).
    #[cfg(test)]
    pub fn mark_destroyed(&mut self) {
        self.magic = DESTROYED;
    }
}

// Why a handle was refused, out of line: the checks on the hot path (every
// malloc and free) stay a few instructions.

#[cold]
#[inline(never)]
fn refused_null<T: HandleKind>() -> Error {
    Error::InvalidArgument(format!("{} must not be NULL", T::NOUN))
}

/// `magic` is what the handle's magic word holds (0 if it was not read).
#[cold]
#[inline(never)]
fn refused<T: HandleKind>(p: *const (), magic: u64) -> Error {
    Error::InvalidArgument(match magic {
        DESTROYED => format!("{p:p} is a destroyed npualloc {}", T::NOUN),
        _ => format!("{p:p} is not an npualloc {}", T::NOUN),
    })
}

/// A handle's object taken back from C, still at the address C knew (other
/// handles may point into it until it drops). Dropping it drops the value
/// and keeps the memory, marked destroyed, in `SHELLS`.
pub(crate) struct Owned<T: HandleKind>(*mut Checked<T>);

impl<T: HandleKind> std::ops::Deref for Owned<T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the value is live until this drops (`destroy`).
        unsafe { &(*self.0).value }
    }
}

impl<T: HandleKind> Drop for Owned<T> {
    fn drop(&mut self) {
        // SAFETY: from Box::into_raw, marked destroyed, its value dropped
        // only here; the memory stays allocated (never freed) and only its
        // magic word is read from now on.
        unsafe { std::ptr::drop_in_place(std::ptr::addr_of_mut!((*self.0).value)) };
        SHELLS.lock().unwrap_or_else(|e| e.into_inner()).push(self.0 as usize);
    }
}

/// Opaque allocator handle (C sees only a pointer to it).
// No #[repr(C)]: cbindgen then declares an incomplete struct type
// (`typedef struct npualloc_allocator npualloc_allocator;`) instead of a
// zero-length array, which -pedantic C rejects.
#[allow(non_camel_case_types)]
pub struct npualloc_allocator {
    _private: [u8; 0],
}

/// One stream's registration: its desc and the binding the callbacks get.
pub(crate) struct Registration {
    pub desc: usize,
    pub binding: *mut Checked<super::desc::Binding>,
}

// SAFETY: the binding pointer is owned by the registration and only touched
// under the registrations lock or by the runtime's callbacks.
unsafe impl Send for Registration {}

/// What an `npualloc_allocator *` points to (inside its [`Checked`] box).
pub(crate) struct Allocator {
    pub core: DeviceAllocator,
    pub registrations: Mutex<HashMap<Stream, Registration>>,
    /// One of the pluggable entry points' allocators (see
    /// `npualloc_pluggable_allocator`): it lives until the process exits and
    /// `npualloc_destroy` refuses it.
    pub process_wide: bool,
}

impl HandleKind for Allocator {
    const LIVE: u64 = 0x6e70_7561_6c6c_6f63; // "npualloc"
    const NOUN: &'static str = "allocator handle";
}

impl Allocator {
    /// A new allocator as C holds it.
    pub fn into_raw(core: DeviceAllocator) -> *mut npualloc_allocator {
        Checked::into_raw(Allocator { core, registrations: Mutex::new(HashMap::new()), process_wide: false }).cast()
    }

    /// A process-wide allocator as C holds it: never destroyed.
    pub fn into_raw_process_wide(core: DeviceAllocator) -> *mut npualloc_allocator {
        Checked::into_raw(Allocator { core, registrations: Mutex::new(HashMap::new()), process_wide: true }).cast()
    }

    /// Borrows the allocator behind a handle; see [`Checked::borrow`].
    ///
    /// # Safety
    /// As [`Checked::borrow`]: a non-NULL `a` comes from `npualloc_create`.
    #[inline]
    pub unsafe fn from_handle<'a>(a: *const npualloc_allocator) -> Result<&'a Allocator> {
        // SAFETY: forwarded to the caller.
        unsafe { Checked::borrow(a) }
    }

    /// Takes back ownership for destruction; see [`Checked::destroy`].
    ///
    /// # Safety
    /// As [`Checked::destroy`].
    pub unsafe fn take(a: *mut npualloc_allocator) -> Result<Owned<Allocator>> {
        // SAFETY: forwarded to the caller.
        unsafe { Checked::destroy(a) }
    }
}

#[cfg(test)]
mod tests {
    use super::super::desc::Binding;
    use super::*;

    struct Probe(u32);
    impl HandleKind for Probe {
        const LIVE: u64 = 0x7072_6f62_6521_2121;
        const NOUN: &'static str = "probe";
    }

    fn message(r: Result<&Probe>) -> String {
        match r {
            Err(Error::InvalidArgument(m)) => m,
            Err(e) => panic!("wrong error kind: {e}"),
            Ok(p) => panic!("accepted, value {}", p.0),
        }
    }

    #[test]
    fn live_handles_are_accepted_and_destroyed_once() {
        let h = Checked::into_raw(Probe(7));
        // SAFETY: h is live.
        assert_eq!(unsafe { Checked::<Probe>::borrow(h) }.unwrap().0, 7);
        // SAFETY: h is live and used by nobody else.
        let owned = unsafe { Checked::<Probe>::destroy(h) }.unwrap();
        assert_eq!((*owned).0, 7);
        drop(owned);
        // The memory stays: the handle is refused as destroyed, and a new
        // handle does not get its address.
        // SAFETY: h was destroyed, its memory kept.
        let m = message(unsafe { Checked::<Probe>::borrow(h) });
        assert_eq!(m, format!("{h:p} is a destroyed npualloc probe"));
        let fresh: Vec<*mut Checked<Probe>> = (0..64).map(|i| Checked::into_raw(Probe(i))).collect();
        assert!(!fresh.contains(&h), "a new handle got a destroyed one's address");
        for f in fresh {
            // SAFETY: each is live and used by nobody else.
            drop(unsafe { Checked::<Probe>::destroy(f) }.unwrap());
        }
    }

    #[test]
    fn null_foreign_misaligned_and_destroyed_handles_are_refused() {
        // SAFETY: NULL is not read.
        let null = message(unsafe { Checked::<Probe>::borrow(std::ptr::null::<u8>()) });
        assert_eq!(null, "probe must not be NULL");

        let foreign = [0u64; 4];
        // SAFETY: 32 readable bytes, more than a Checked<Probe>.
        let m = message(unsafe { Checked::<Probe>::borrow(foreign.as_ptr()) });
        assert_eq!(m, format!("{:p} is not an npualloc probe", foreign.as_ptr()));

        let misaligned = foreign.as_ptr().cast::<u8>().wrapping_add(1);
        // SAFETY: a misaligned pointer is not read.
        let m = message(unsafe { Checked::<Probe>::borrow(misaligned) });
        assert_eq!(m, format!("{misaligned:p} is not an npualloc probe"));

        let mut dead = Checked { value: Probe(1), magic: Probe::LIVE };
        dead.mark_destroyed();
        let p: *const Checked<Probe> = &dead;
        // SAFETY: p points at a live Checked<Probe>.
        let m = message(unsafe { Checked::<Probe>::borrow(p) });
        assert_eq!(m, format!("{p:p} is a destroyed npualloc probe"));
    }

    #[test]
    fn a_handle_of_another_kind_is_foreign() {
        // The same layout as Checked<Probe>, so its magic word is readable.
        struct Other(#[allow(dead_code)] u32);
        impl HandleKind for Other {
            const LIVE: u64 = 0x6f74_6865_7221_2121;
            const NOUN: &'static str = "other";
        }
        let other = Checked { value: Other(0), magic: Other::LIVE };
        let p: *const Checked<Other> = &other;
        // SAFETY: p points at a live, readable Checked<Other>.
        let m = message(unsafe { Checked::<Probe>::borrow(p) });
        assert_eq!(m, format!("{p:p} is not an npualloc probe"));
    }

    /// Every export that takes a handle refuses a NULL, a foreign and a
    /// destroyed one of each kind with INVALID_ARGUMENT and a message naming
    /// the kind. A destroyed handle is shown by its magic word on memory that
    /// stays allocated, as a destroyed handle reads.
    #[test]
    fn exports_refuse_bad_handles_of_every_kind() {
        use crate::ffi::allocator::{npualloc_destroy, npualloc_free};
        use crate::ffi::desc::{npualloc_binding_destroy, npualloc_desc_alloc};
        use crate::ffi::last_error::last_error_message;
        use crate::ffi::status::npualloc_status::*;
        use std::ffi::c_void;

        let words = 1 + std::mem::size_of::<Checked<Allocator>>().max(std::mem::size_of::<Checked<Binding>>()) / 8;
        let foreign = vec![0x5a5a_5a5a_5a5a_5a5au64; words];
        // Every word, so the magic word of either kind reads DESTROYED.
        let mut destroyed = vec![DESTROYED; words];
        let cases: [(*mut c_void, &str); 3] = [
            (std::ptr::null_mut(), "must not be NULL"),
            (foreign.as_ptr().cast_mut().cast(), "is not an npualloc"),
            (destroyed.as_mut_ptr().cast(), "is a destroyed npualloc"),
        ];
        for (p, what) in cases {
            // SAFETY: each pointer is NULL or readable for a handle of either kind.
            let st = unsafe { npualloc_free(p.cast(), std::ptr::null_mut()) };
            assert_eq!(st, NPUALLOC_ERR_INVALID_ARGUMENT);
            let msg = last_error_message();
            assert!(msg.contains(what) && msg.contains("allocator handle"), "{msg}");

            // SAFETY: as above.
            let block = unsafe { npualloc_desc_alloc(p, 64) };
            assert!(block.is_null());
            let msg = last_error_message();
            assert!(msg.contains(what) && msg.contains("binding"), "{msg}");

            if !p.is_null() {
                // Destructors accept NULL; anything else must be a live handle.
                // SAFETY: as above; refused handles are not freed.
                let st = unsafe { npualloc_destroy(p.cast()) };
                assert_eq!((st, last_error_message().contains(what)), (NPUALLOC_ERR_INVALID_ARGUMENT, true));
                // SAFETY: as above.
                let st = unsafe { npualloc_binding_destroy(p) };
                assert_eq!((st, last_error_message().contains(what)), (NPUALLOC_ERR_INVALID_ARGUMENT, true));
            }
        }
        assert_eq!(foreign, vec![0x5a5a_5a5a_5a5a_5a5au64; words], "a refused handle is left as it was");
        assert_eq!(destroyed, vec![DESTROYED; words]);
    }
}
