//! The objects C holds by pointer, and the one check every use makes.
//!
//! A handle is not an address: its value names a slot of its kind's `Registry` and the slot's generation:
//!
//! ```text
//! bit   63   62..60   59..21       20..11   10..3   2..0
//!       0    kind     generation   chunk    slot    0
//! ```
//!
//! Every use compares the value with the slot's word, in the registry's own memory, and never reads through
//! the pointer C passed: NULL, any other pointer (mapped or not, or another kind's handle) and a destroyed
//! handle are refused alike with `NPUALLOC_ERR_INVALID_ARGUMENT` and a message naming the kind. The kinds are
//! the allocator (`npualloc_allocator *`) and the binding behind a desc's `obj` (`super::desc::Binding`).
//!
//! Invariants:
//! - A handle is a multiple of 8, positive as a signed `intptr_t`, and at least 2^60 (no kind is 0): above
//!   every user-space address of x86-64 and AArch64 (below 2^57), so no pointer to memory equals a live handle.
//! - A slot's word is its live handle, that value with bit 0 set once destroyed, and 1 before first use. A
//!   value with bit 0 set is refused before the look-up, so only a live handle matches a word.
//! - Each kind has a tag of its own (`Kind`): a handle of one kind never matches another's word.
//! - Slots come in chunks of 256, never moved or freed. Chunk 0 is inside the registry (a static) and freed
//!   slots are reused first, so up to 256 live handles need no pointer load to find their slot. Look-ups take no
//!   lock and write nothing; creation and destruction take the registry's lock.
//! - Destroying a handle frees its object at once; the slot's next handle gets the next generation, so a stale
//!   handle is refused however late it comes back. A slot at generation 2^39 - 1 is retired, never wrapped; a
//!   kind runs out of handles after 2^57 creations, and has at most 262,144 live (1024 chunks of 256 slots).
//!
//! A handle must not be used while another thread destroys it (`npualloc_destroy`'s contract): a look-up hands
//! out a reference to the object, which destroy frees. Once destroy has returned, every use is refused.

use crate::core::DeviceAllocator;
use crate::error::{Error, Result};
use crate::runtime::Stream;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::sync::Mutex;

const _: () = assert!(usize::BITS == 64, "handles need 64-bit pointers");

/// Bits 0..3 of a handle are 0; bit 0 marks a word that admits no handle.
const DEAD: usize = 1;
const LOW_BITS: usize = 0x7;
/// Bits 3..11: the slot within its chunk, so `h & 0x7f8` is the byte offset of its word in the chunk.
const SLOT_SHIFT: u32 = 3;
const SLOTS_PER_CHUNK: usize = 256;
/// Bits 11..21: the chunk.
const CHUNK_SHIFT: u32 = 11;
const CHUNKS: usize = 1024;
/// Bits 21..60: the generation.
const GENERATION_SHIFT: u32 = 21;
const GENERATION_MAX: usize = (1 << 39) - 1;
/// Bits 60..63: the kind; bit 63 is 0.
const KIND_SHIFT: u32 = 60;
/// The word of a slot no handle was issued from yet.
const FRESH: usize = DEAD;

const _: () = assert!(SLOTS_PER_CHUNK == 1 << (CHUNK_SHIFT - SLOT_SHIFT));
const _: () = assert!(1 << SLOT_SHIFT == size_of::<AtomicUsize>() && 1 << SLOT_SHIFT == size_of::<AtomicPtr<()>>());
const _: () = assert!(CHUNKS == 1 << (GENERATION_SHIFT - CHUNK_SHIFT));
const _: () = assert!(GENERATION_MAX == (1 << (KIND_SHIFT - GENERATION_SHIFT)) - 1);

fn generation(word: usize) -> usize {
    (word >> GENERATION_SHIFT) & GENERATION_MAX
}

/// The kinds of handle, one tag each (0 is no kind's).
#[derive(Clone, Copy)]
pub(crate) enum Kind {
    Allocator = 1,
    Binding = 2,
    #[cfg(test)]
    Probe = 3,
    #[cfg(test)]
    Other = 4,
    #[cfg(test)]
    Reused = 5,
    #[cfg(test)]
    Retired = 6,
    #[cfg(test)]
    Many = 7,
}

/// A kind of object C holds by handle.
pub(crate) trait HandleKind: Sized + Send + Sync + 'static {
    const KIND: Kind;
    /// What messages call a handle of this kind, e.g. "allocator handle".
    const NOUN: &'static str;
    /// The kind's registry (a static).
    fn registry() -> &'static Registry<Self>;
}

/// A handle's value as C holds it; never dereferenced.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Handle(usize);

impl Handle {
    /// The handle C passed as a pointer (only its value is used).
    #[inline]
    pub fn of<P>(p: *const P) -> Handle {
        Handle(p.addr())
    }

    /// The handle as C holds it: a pointer without provenance, which nothing may read through.
    pub fn as_ptr<P>(self) -> *mut P {
        std::ptr::without_provenance_mut(self.0)
    }
}

impl fmt::Pointer for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Pointer::fmt(&self.as_ptr::<()>(), f)
    }
}

/// Slots of a registry: a word and a value at the same index (apart, so a look-up addresses both without a sum).
struct Chunk<T> {
    /// The handle last issued from each slot, `DEAD` set once it was destroyed; `FRESH` before the first.
    words: [AtomicUsize; SLOTS_PER_CHUNK],
    /// While the word is a live handle: its object, from `Box::into_raw`; NULL otherwise.
    values: [AtomicPtr<T>; SLOTS_PER_CHUNK],
}

impl<T> Chunk<T> {
    const fn fresh() -> Self {
        Chunk {
            words: [const { AtomicUsize::new(FRESH) }; SLOTS_PER_CHUNK],
            values: [const { AtomicPtr::new(std::ptr::null_mut()) }; SLOTS_PER_CHUNK],
        }
    }

    /// The slot a value's slot bits name (whatever the other bits hold).
    #[inline]
    fn slot(&self, h: usize) -> Slot<'_, T> {
        let offset = h & ((SLOTS_PER_CHUNK - 1) << SLOT_SHIFT);
        // SAFETY: `offset` is a multiple of 8 below 8 * SLOTS_PER_CHUNK, the size of either array.
        unsafe { Slot { word: &*self.words.as_ptr().byte_add(offset), value: &*self.values.as_ptr().byte_add(offset) } }
    }
}

struct Slot<'c, T> {
    word: &'c AtomicUsize,
    value: &'c AtomicPtr<T>,
}

impl<T> Slot<'_, T> {
    /// The object of the live handle this slot's word was seen to be.
    ///
    /// # Safety
    /// The word was read (Acquire) as a live handle, which is not destroyed while the result is in use.
    #[inline]
    unsafe fn object<'a>(&self) -> &'a T {
        // SAFETY: while the word is a live handle, `value` is its object from Box::into_raw, set before the word
        // was published (Release) and freed only by `remove`, which the caller rules out.
        unsafe { &*self.value.load(Ordering::Relaxed) }
    }
}

/// Entry `i` is chunk `i` (entry 0 is unused: chunk 0 is `Registry::first`).
type Table<T> = [AtomicPtr<Chunk<T>>; CHUNKS];

/// The live handles of one kind, and the slots that issue new ones.
pub(crate) struct Registry<T> {
    /// Chunk 0, in place: looking up the first 256 live handles of a kind reads no pointer.
    first: Chunk<T>,
    /// The table of the other chunks: NULL until a slot past chunk 0 is needed, then set once, as is each entry
    /// when its chunk is first needed. Neither a table nor a chunk is ever freed or moved.
    rest: AtomicPtr<Table<T>>,
    /// The slots to issue from; held while creating or destroying.
    spare: Mutex<Spare>,
}

struct Spare {
    /// Slots given back by destroy, reused last in, first out: the slots in use stay as few as the peak.
    free: Vec<usize>,
    /// Slots from this one on were never used.
    fresh: usize,
}

impl<T: HandleKind> Registry<T> {
    pub const fn new() -> Self {
        Registry {
            first: Chunk::fresh(),
            rest: AtomicPtr::new(std::ptr::null_mut()),
            spare: Mutex::new(Spare { free: Vec::new(), fresh: 0 }),
        }
    }

    fn table(&self) -> Option<&Table<T>> {
        // SAFETY: a non-NULL `rest` is `insert`'s table from Box::into_raw, published (Release), never freed.
        unsafe { self.rest.load(Ordering::Acquire).as_ref() }
    }

    fn chunk(&self, c: usize) -> Option<&Chunk<T>> {
        if c == 0 {
            return Some(&self.first);
        }
        let table = self.table()?;
        // SAFETY: a non-NULL entry is `insert`'s chunk from Box::into_raw, published (Release), never freed.
        unsafe { table[c].load(Ordering::Acquire).as_ref() }
    }

    /// The slot a value's chunk and slot bits name, if that chunk exists (whatever the other bits hold).
    fn slot(&self, h: usize) -> Option<Slot<'_, T>> {
        let chunk = self.chunk((h >> CHUNK_SHIFT) & (CHUNKS - 1))?;
        Some(chunk.slot(h))
    }

    /// The slot of `h` if it is a live handle here; Acquire on the word: the object stored before it is seen.
    fn live(&self, h: usize) -> Option<Slot<'_, T>> {
        if h & DEAD != 0 {
            return None;
        }
        self.slot(h).filter(|slot| slot.word.load(Ordering::Acquire) == h)
    }

    /// The object of `h` if `h` is a live handle of this registry.
    ///
    /// # Safety
    /// As [`borrow`].
    #[inline]
    unsafe fn get<'a>(&self, h: usize) -> Result<&'a T> {
        // One test sends everything but a value of chunk 0 without bit 0 out of line.
        if h & (DEAD | ((CHUNKS - 1) << CHUNK_SHIFT)) != 0 {
            // SAFETY: forwarded to the caller.
            return unsafe { self.get_past_first(h) };
        }
        let slot = self.first.slot(h);
        if slot.word.load(Ordering::Acquire) != h {
            return Err(refused::<T>(Handle(h)));
        }
        // SAFETY: the word is the live handle `h`; forwarded to the caller.
        Ok(unsafe { slot.object() })
    }

    /// [`get`](Self::get) for the values it does not decide inline.
    ///
    /// # Safety
    /// As [`borrow`].
    #[inline(never)]
    unsafe fn get_past_first<'a>(&self, h: usize) -> Result<&'a T> {
        match self.live(h) {
            // SAFETY: the word is the live handle `h`; forwarded to the caller.
            Some(slot) => Ok(unsafe { slot.object() }),
            None => Err(refused::<T>(Handle(h))),
        }
    }

    /// Whether `h` was issued by this registry (it may be live or destroyed).
    fn issued(&self, h: usize) -> bool {
        if h & LOW_BITS != 0 || h >> KIND_SHIFT != T::KIND as usize {
            return false;
        }
        self.slot(h).is_some_and(|slot| {
            let word = slot.word.load(Ordering::Acquire);
            word != FRESH && generation(h) <= generation(word)
        })
    }

    fn insert(&self, value: T) -> Result<Handle> {
        let mut spare = self.spare.lock().unwrap_or_else(|e| e.into_inner());
        let index = match spare.free.pop() {
            Some(index) => index,
            None if spare.fresh == CHUNKS * SLOTS_PER_CHUNK => {
                return Err(Error::Unsupported(format!(
                    "no npualloc {} left to issue: {} are live at once at most, and a slot is retired after \
                     2^39 handles",
                    T::NOUN,
                    CHUNKS * SLOTS_PER_CHUNK
                )));
            }
            None => {
                let index = spare.fresh;
                let c = index / SLOTS_PER_CHUNK;
                if c > 0 && index % SLOTS_PER_CHUNK == 0 {
                    if self.table().is_none() {
                        let table: Box<Table<T>> = Box::new([const { AtomicPtr::new(std::ptr::null_mut()) }; CHUNKS]);
                        self.rest.store(Box::into_raw(table), Ordering::Release);
                    }
                    let chunk = Box::into_raw(Box::new(Chunk::fresh()));
                    self.table().expect("the table was just published")[c].store(chunk, Ordering::Release);
                }
                spare.fresh += 1;
                index
            }
        };
        let slot = self.slot(index << SLOT_SHIFT).expect("a spare slot's chunk exists");
        let last = slot.word.load(Ordering::Relaxed);
        let generation = if last == FRESH { 0 } else { generation(last) + 1 };
        let h = ((T::KIND as usize) << KIND_SHIFT) | (generation << GENERATION_SHIFT) | (index << SLOT_SHIFT);
        slot.value.store(Box::into_raw(Box::new(value)), Ordering::Relaxed);
        // Release: a look-up that sees the word sees the object.
        slot.word.store(h, Ordering::Release);
        Ok(Handle(h))
    }

    /// Unregisters a live handle and returns its object; `None` if `h` is not a live handle here.
    ///
    /// # Safety
    /// No reference to the object from an earlier look-up is used any more.
    unsafe fn remove(&self, h: usize) -> Option<Box<T>> {
        let mut spare = self.spare.lock().unwrap_or_else(|e| e.into_inner());
        // Under the lock: no other destroy can take the same slot.
        let slot = self.live(h)?;
        slot.word.store(h | DEAD, Ordering::Release);
        let value = slot.value.swap(std::ptr::null_mut(), Ordering::Relaxed);
        if generation(h) < GENERATION_MAX {
            spare.free.push((h >> SLOT_SHIFT) & (CHUNKS * SLOTS_PER_CHUNK - 1));
        }
        drop(spare);
        // SAFETY: the word was this live handle's, so `value` came from `insert`'s Box::into_raw and only the swap
        // above (under the lock) takes it; no look-up matches the word now, and the caller gives up earlier ones.
        Some(unsafe { Box::from_raw(value) })
    }
}

/// Registers `value` as a new handle of its kind; C owns it until it is destroyed.
pub(crate) fn register<T: HandleKind>(value: T) -> Result<Handle> {
    T::registry().insert(value)
}

/// Borrows the object behind a handle, refusing NULL, values that are not a live handle of this kind and
/// destroyed handles. Only the value of `h` is used.
///
/// # Safety
/// The handle is not destroyed while the result is in use (`npualloc_destroy`'s contract).
#[inline]
pub(crate) unsafe fn borrow<'a, T: HandleKind>(h: Handle) -> Result<&'a T> {
    // SAFETY: forwarded to the caller.
    unsafe { T::registry().get(h.0) }
}

/// Takes a live handle's object back for destruction; from now on the handle is refused as destroyed.
///
/// # Safety
/// No other thread uses the handle any more, and no earlier borrow of it is in use.
pub(crate) unsafe fn destroy<T: HandleKind>(h: Handle) -> Result<Box<T>> {
    // SAFETY: forwarded to the caller.
    unsafe { T::registry().remove(h.0) }.ok_or_else(|| refused::<T>(h))
}

// Out of line, so that the check on every malloc and free stays a few instructions.
#[cold]
#[inline(never)]
fn refused<T: HandleKind>(h: Handle) -> Error {
    Error::InvalidArgument(if h.0 == 0 {
        format!("{} must not be NULL", T::NOUN)
    } else if T::registry().issued(h.0) {
        format!("{h:p} is a destroyed npualloc {}", T::NOUN)
    } else {
        format!("{h:p} is not an npualloc {}", T::NOUN)
    })
}

/// Opaque allocator handle: its value names a registered allocator and is not an address. npualloc never reads
/// through it and refuses NULL, any other value and a destroyed handle with NPUALLOC_ERR_INVALID_ARGUMENT.
// No #[repr(C)]: cbindgen then declares an incomplete struct type, not a zero-length array (-pedantic C rejects it).
#[allow(non_camel_case_types)]
pub struct npualloc_allocator {
    _private: [u8; 0],
}

/// One stream's registration: its desc and the binding the callbacks get.
pub(crate) struct Registration {
    pub desc: usize,
    pub binding: Handle,
}

/// What an `npualloc_allocator *` names (registered in [`ALLOCATORS`]).
pub(crate) struct Allocator {
    pub core: DeviceAllocator,
    pub registrations: Mutex<HashMap<Stream, Registration>>,
    /// A pluggable entry point's allocator: it lives until the process exits; `npualloc_destroy` refuses it.
    pub process_wide: bool,
}

static ALLOCATORS: Registry<Allocator> = Registry::new();

impl HandleKind for Allocator {
    const KIND: Kind = Kind::Allocator;
    const NOUN: &'static str = "allocator handle";
    #[inline]
    fn registry() -> &'static Registry<Self> {
        &ALLOCATORS
    }
}

impl Allocator {
    /// A new allocator as C holds it.
    pub fn into_raw(core: DeviceAllocator) -> Result<*mut npualloc_allocator> {
        let h = register(Allocator { core, registrations: Mutex::new(HashMap::new()), process_wide: false })?;
        // SAFETY: the handle was just made and no other thread has it yet.
        let allocator: &Allocator = unsafe { borrow(h) }?;
        // SAFETY: the registry keeps it boxed until destroy, which leaves its peers before dropping it.
        unsafe { allocator.core.join_peers() };
        Ok(h.as_ptr())
    }

    /// A process-wide allocator as C holds it, and the allocator: never destroyed.
    pub fn into_raw_process_wide(core: DeviceAllocator) -> Result<(Handle, &'static Allocator)> {
        let h = register(Allocator { core, registrations: Mutex::new(HashMap::new()), process_wide: true })?;
        // SAFETY: npualloc_destroy refuses process-wide handles, so this one is never destroyed.
        let allocator: &'static Allocator = unsafe { borrow(h) }?;
        // SAFETY: never destroyed, so never moved.
        unsafe { allocator.core.join_peers() };
        Ok((h, allocator))
    }

    /// Borrows the allocator behind a handle; see [`borrow`]. Only the value of `a` is used.
    ///
    /// # Safety
    /// As [`borrow`]: `a` is not destroyed while the result is in use.
    #[inline]
    pub unsafe fn from_handle<'a>(a: *const npualloc_allocator) -> Result<&'a Allocator> {
        // SAFETY: forwarded to the caller.
        unsafe { borrow(Handle::of(a)) }
    }

    /// Takes back ownership for destruction; see [`destroy`].
    ///
    /// # Safety
    /// As [`destroy`].
    pub unsafe fn take(a: *mut npualloc_allocator) -> Result<Box<Allocator>> {
        // SAFETY: forwarded to the caller.
        unsafe { destroy(Handle::of(a)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Test kinds, each with a registry of its own so that no other test
    /// moves its slots.
    macro_rules! test_kind {
        ($name:ident, $kind:ident, $noun:literal) => {
            struct $name(u32);
            impl HandleKind for $name {
                const KIND: Kind = Kind::$kind;
                const NOUN: &'static str = $noun;
                fn registry() -> &'static Registry<Self> {
                    static REGISTRY: Registry<$name> = Registry::new();
                    &REGISTRY
                }
            }
        };
    }
    test_kind!(Probe, Probe, "probe");
    test_kind!(Other, Other, "other");
    test_kind!(Reused, Reused, "reused");
    test_kind!(Retired, Retired, "retired");
    test_kind!(Many, Many, "many");

    fn message<T: HandleKind>(r: Result<&T>) -> String {
        match r {
            Err(Error::InvalidArgument(m)) => m,
            Err(e) => panic!("wrong error kind: {e}"),
            Ok(_) => panic!("accepted"),
        }
    }

    /// What `borrow` says about `h` as a handle of kind `T`.
    fn refusal<T: HandleKind>(h: usize) -> String {
        // SAFETY: nothing destroys a handle of these kinds during the call.
        message(unsafe { borrow::<T>(Handle(h)) })
    }

    fn slot_bits(h: Handle) -> usize {
        h.0 & ((CHUNKS * SLOTS_PER_CHUNK - 1) << SLOT_SHIFT)
    }

    fn with_generation(h: Handle, generation: usize) -> usize {
        (h.0 & !(GENERATION_MAX << GENERATION_SHIFT)) | (generation << GENERATION_SHIFT)
    }

    #[test]
    fn live_handles_are_accepted_and_destroyed_once() {
        let h = register(Probe(7)).unwrap();
        assert!(h.0 != 0 && h.0 % 8 == 0 && h.0 >= 1 << 60 && (h.0 as isize) > 0, "{h:p}");
        // SAFETY: h is live and destroyed only below.
        assert_eq!(unsafe { borrow::<Probe>(h) }.unwrap().0, 7);
        // SAFETY: h is used by nobody else, no borrow of it is in use.
        let owned = unsafe { destroy::<Probe>(h) }.unwrap();
        assert_eq!(owned.0, 7);
        drop(owned);
        assert_eq!(refusal::<Probe>(h.0), format!("{h:p} is a destroyed npualloc probe"));
        // SAFETY: a destroyed handle is refused before anything is freed.
        let again = unsafe { destroy::<Probe>(h) }.map(drop);
        assert!(matches!(again, Err(Error::InvalidArgument(m)) if m == format!("{h:p} is a destroyed npualloc probe")));
    }

    #[test]
    fn a_stale_handle_is_refused_after_its_slot_is_reused() {
        let first = register(Reused(1)).unwrap();
        // SAFETY: nobody else uses it.
        drop(unsafe { destroy::<Reused>(first) }.unwrap());
        let second = register(Reused(2)).unwrap();
        assert_eq!(slot_bits(second), slot_bits(first), "the slot is reused");
        assert_eq!(generation(second.0), generation(first.0) + 1);
        assert_ne!(second, first);
        assert_eq!(refusal::<Reused>(first.0), format!("{first:p} is a destroyed npualloc reused"));
        // SAFETY: first is refused, nothing is freed.
        assert!(unsafe { destroy::<Reused>(first) }.is_err());
        // SAFETY: second is live.
        assert_eq!(unsafe { borrow::<Reused>(second) }.unwrap().0, 2, "refusing the stale handle left the new one");

        // Many generations later, every earlier one is still refused; a
        // generation not issued yet is foreign.
        // SAFETY: nobody else uses it.
        drop(unsafe { destroy::<Reused>(second) }.unwrap());
        let mut last = second;
        for i in 0..1000 {
            last = register(Reused(i)).unwrap();
            assert_eq!(slot_bits(last), slot_bits(first));
            // SAFETY: nobody else uses it.
            drop(unsafe { destroy::<Reused>(last) }.unwrap());
        }
        let live = register(Reused(9)).unwrap();
        for stale in [first, second, last] {
            assert_eq!(refusal::<Reused>(stale.0), format!("{stale:p} is a destroyed npualloc reused"));
        }
        let future = with_generation(live, generation(live.0) + 1);
        assert_eq!(refusal::<Reused>(future), format!("{:p} is not an npualloc reused", Handle(future)));
        // SAFETY: nobody else uses it.
        drop(unsafe { destroy::<Reused>(live) }.unwrap());
    }

    /// A slot at the last generation is retired, not wrapped: its handles
    /// stay refused and a new handle comes from another slot.
    #[test]
    fn a_slot_at_the_last_generation_is_retired() {
        let h = register(Retired(1)).unwrap();
        // Ages the live handle's slot to the last generation.
        let last = with_generation(h, GENERATION_MAX);
        let slot = Retired::registry().slot(h.0).unwrap();
        slot.word.store(last, Ordering::Release);
        // SAFETY: the forged word is the live handle now; nobody else uses it.
        assert_eq!(unsafe { borrow::<Retired>(Handle(last)) }.unwrap().0, 1);
        assert!(refusal::<Retired>(h.0).contains("is a destroyed npualloc retired"));
        // SAFETY: as above.
        drop(unsafe { destroy::<Retired>(Handle(last)) }.unwrap());
        let next = register(Retired(2)).unwrap();
        assert_ne!(slot_bits(next), slot_bits(h), "a retired slot issues no handle");
        assert_eq!(generation(next.0), 0);
        for stale in [h.0, last] {
            assert_eq!(refusal::<Retired>(stale), format!("{:p} is a destroyed npualloc retired", Handle(stale)));
        }
        // SAFETY: nobody else uses it.
        drop(unsafe { destroy::<Retired>(next) }.unwrap());
    }

    /// Past chunk 0 handles work the same, up to the registry's capacity,
    /// where creation fails until a handle is destroyed.
    #[test]
    fn handles_past_the_first_chunk_up_to_the_capacity() {
        let capacity = CHUNKS * SLOTS_PER_CHUNK;
        let live: Vec<Handle> = (0..capacity).map(|i| register(Many(i as u32)).unwrap()).collect();
        for (i, &h) in live.iter().enumerate() {
            assert_eq!((h.0 >> SLOT_SHIFT) & (capacity - 1), i, "slots are issued in order");
            // SAFETY: h is live.
            assert_eq!(unsafe { borrow::<Many>(h) }.unwrap().0, i as u32);
        }
        let full = register(Many(0)).map(|h| h.0);
        assert!(matches!(&full, Err(Error::Unsupported(m)) if m.contains("262144")), "{full:?}");

        // One of chunk 1 and one of the last chunk, destroyed and reissued.
        for i in [SLOTS_PER_CHUNK + 3, capacity - 1] {
            let old = live[i];
            // SAFETY: nobody else uses it.
            drop(unsafe { destroy::<Many>(old) }.unwrap());
            assert_eq!(refusal::<Many>(old.0), format!("{old:p} is a destroyed npualloc many"));
            let new = register(Many(7)).unwrap();
            assert_eq!((slot_bits(new), generation(new.0)), (slot_bits(old), 1));
            assert_eq!(refusal::<Many>(old.0), format!("{old:p} is a destroyed npualloc many"));
            // SAFETY: new is live.
            assert_eq!(unsafe { borrow::<Many>(new) }.unwrap().0, 7);
            // SAFETY: nobody else uses it.
            drop(unsafe { destroy::<Many>(new) }.unwrap());
        }
        for (i, &h) in live.iter().enumerate() {
            if i != SLOTS_PER_CHUNK + 3 && i != capacity - 1 {
                // SAFETY: nobody else uses it.
                drop(unsafe { destroy::<Many>(h) }.unwrap());
            }
        }
    }

    /// A page nobody may read (PROT_NONE), and the same address once
    /// unmapped.
    struct NoAccess(*mut libc::c_void);

    impl NoAccess {
        fn new() -> NoAccess {
            // SAFETY: a fresh anonymous mapping, checked below.
            let p = unsafe {
                libc::mmap(std::ptr::null_mut(), 4096, libc::PROT_NONE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
            };
            assert_ne!(p, libc::MAP_FAILED);
            NoAccess(p)
        }
    }

    impl Drop for NoAccess {
        fn drop(&mut self) {
            // SAFETY: the mapping made in `new`, used by nobody.
            unsafe { libc::munmap(self.0, 4096) };
        }
    }

    #[test]
    fn null_and_foreign_values_are_refused_without_reading_them() {
        assert_eq!(refusal::<Probe>(0), "probe must not be NULL");

        let on_stack = [0u64; 4];
        let p = on_stack.as_ptr();
        assert_eq!(refusal::<Probe>(p.addr()), format!("{p:p} is not an npualloc probe"));

        // Reading through any of these would crash the test.
        let page = NoAccess::new();
        assert_eq!(refusal::<Probe>(page.0.addr()), format!("{:p} is not an npualloc probe", page.0));
        let unmapped = page.0;
        drop(page);
        assert_eq!(refusal::<Probe>(unmapped.addr()), format!("{unmapped:p} is not an npualloc probe"));

        // Values next to a live handle: none is it.
        let h = register(Probe(3)).unwrap();
        let near = [
            h.0 + 1,
            h.0 | 4,
            h.0 + 8,
            h.0 | (1 << 63),
            h.0 | (5 << CHUNK_SHIFT),
            with_generation(h, generation(h.0) + 1),
            (h.0 & !(7 << KIND_SHIFT)) | (Kind::Other as usize) << KIND_SHIFT,
        ];
        for v in near {
            assert_eq!(refusal::<Probe>(v), format!("{:p} is not an npualloc probe", Handle(v)));
        }
        // SAFETY: h is live.
        assert_eq!(unsafe { borrow::<Probe>(h) }.unwrap().0, 3);
        // SAFETY: nobody else uses it.
        drop(unsafe { destroy::<Probe>(h) }.unwrap());
    }

    #[test]
    fn kinds_are_not_confused() {
        let p = register(Probe(1)).unwrap();
        let o = register(Other(2)).unwrap();
        assert_eq!(refusal::<Other>(p.0), format!("{p:p} is not an npualloc other"));
        assert_eq!(refusal::<Probe>(o.0), format!("{o:p} is not an npualloc probe"));
        // SAFETY: a handle of another kind is refused, nothing is freed.
        assert!(unsafe { destroy::<Other>(p) }.is_err());
        // SAFETY: both are live.
        assert_eq!(unsafe { (borrow::<Probe>(p).unwrap().0, borrow::<Other>(o).unwrap().0) }, (1, 2));
        // SAFETY: nobody else uses them.
        unsafe {
            drop(destroy::<Probe>(p).unwrap());
            drop(destroy::<Other>(o).unwrap());
        }
        // Destroyed, each is still foreign to the other kind.
        assert_eq!(refusal::<Other>(p.0), format!("{p:p} is not an npualloc other"));
        assert_eq!(refusal::<Probe>(p.0), format!("{p:p} is a destroyed npualloc probe"));
    }

    /// Every export that takes a handle refuses a NULL, a foreign, a
    /// destroyed and another kind's handle, for each kind, with
    /// INVALID_ARGUMENT and a message naming the kind; a binding whose
    /// allocator was destroyed is refused by every callback.
    #[test]
    fn exports_refuse_bad_handles_of_every_kind() {
        use crate::config::Config;
        use crate::ffi::allocator::{npualloc_destroy, npualloc_free, npualloc_malloc};
        use crate::ffi::desc::{
            npualloc_binding_create, npualloc_binding_destroy, npualloc_desc_alloc, npualloc_desc_free,
        };
        use crate::ffi::last_error::last_error_message;
        use crate::ffi::status::npualloc_status::*;
        use crate::runtime::Runtime;
        use std::ffi::c_void;

        // Device 0 of the linked emulator; nothing is allocated on it.
        let new_allocator = || {
            let core = DeviceAllocator::with_runtime(Config::parse("").unwrap(), 0, Runtime::emulated()).unwrap();
            Allocator::into_raw(core).unwrap()
        };
        let a = new_allocator();
        let mut binding: *mut c_void = std::ptr::null_mut();
        // SAFETY: a is live; binding is a valid out-pointer.
        assert_eq!(unsafe { npualloc_binding_create(a, std::ptr::null_mut(), &mut binding) }, NPUALLOC_OK);
        let mut orphan: *mut c_void = std::ptr::null_mut();
        // SAFETY: as above.
        assert_eq!(unsafe { npualloc_binding_create(a, std::ptr::null_mut(), &mut orphan) }, NPUALLOC_OK);
        // SAFETY: binding is live and used by nobody else.
        assert_eq!(unsafe { npualloc_binding_destroy(binding) }, NPUALLOC_OK);
        // SAFETY: a is live, used by nobody else; orphan outlives it.
        assert_eq!(unsafe { npualloc_destroy(a) }, NPUALLOC_OK);
        let live = new_allocator();

        let foreign = vec![0x5a5a_5a5a_5a5a_5a5au64; 128];
        let page = NoAccess::new();
        let cases: [(*mut c_void, *mut c_void, &str); 5] = [
            (std::ptr::null_mut(), std::ptr::null_mut(), "must not be NULL"),
            (foreign.as_ptr().cast_mut().cast(), foreign.as_ptr().cast_mut().cast(), "is not an npualloc"),
            (page.0, page.0, "is not an npualloc"),
            (a.cast(), binding, "is a destroyed npualloc"),
            // Each kind's live handle as the other kind.
            (orphan, live.cast(), "is not an npualloc"),
        ];
        for (as_allocator, as_binding, what) in cases {
            let mut out: *mut c_void = std::ptr::null_mut();
            // SAFETY: refused handles are not read; out is valid.
            let st = unsafe { npualloc_malloc(as_allocator.cast(), 512, std::ptr::null_mut(), &mut out) };
            assert_eq!(st, NPUALLOC_ERR_INVALID_ARGUMENT);
            let msg = last_error_message();
            assert!(msg.contains(what) && msg.contains("allocator handle"), "{msg}");
            // SAFETY: as above.
            let st = unsafe { npualloc_free(as_allocator.cast(), std::ptr::null_mut()) };
            assert_eq!((st, last_error_message()), (NPUALLOC_ERR_INVALID_ARGUMENT, msg));

            // SAFETY: as above.
            assert!(unsafe { npualloc_desc_alloc(as_binding, 64) }.is_null());
            let msg = last_error_message();
            assert!(msg.contains(what) && msg.contains("binding"), "{msg}");
            // SAFETY: as above.
            unsafe { npualloc_desc_free(as_binding, std::ptr::null_mut()) };
            assert_eq!(last_error_message(), msg);

            if !as_allocator.is_null() {
                // Destructors accept NULL; anything else must be a live handle.
                // SAFETY: as above; refused handles are not freed.
                let st = unsafe { npualloc_destroy(as_allocator.cast()) };
                assert_eq!((st, last_error_message().contains(what)), (NPUALLOC_ERR_INVALID_ARGUMENT, true));
                // SAFETY: as above.
                let st = unsafe { npualloc_binding_destroy(as_binding) };
                assert_eq!((st, last_error_message().contains(what)), (NPUALLOC_ERR_INVALID_ARGUMENT, true));
            }
        }
        assert_eq!(foreign, vec![0x5a5a_5a5a_5a5a_5a5au64; 128], "a refused handle is left as it was");

        // The binding that outlived its allocator is refused by every
        // callback, also with another allocator live (which may have its slot).
        // SAFETY: orphan is a binding; its allocator is refused, not read.
        assert!(unsafe { npualloc_desc_alloc(orphan, 64) }.is_null());
        let msg = last_error_message();
        assert!(msg.contains(&format!("the binding's allocator {a:p} was destroyed")), "{msg}");
        // SAFETY: as above.
        unsafe { npualloc_desc_free(orphan, 0x1000 as *mut c_void) };
        assert_eq!(last_error_message(), msg);

        // SAFETY: both live, used by nobody else.
        assert_eq!(unsafe { npualloc_binding_destroy(orphan) }, NPUALLOC_OK);
        // SAFETY: as above.
        assert_eq!(unsafe { npualloc_destroy(live) }, NPUALLOC_OK);
    }
}
