//! Hostile input over the C boundary: random sequences of calls (malloc,
//! free, record_stream, query, empty_cache, get_stats, snapshot) with random
//! and often invalid arguments (NULL handles and out-pointers, size 0, huge
//! sizes, random and interior pointers, double frees, pointers owned by a
//! second allocator, streams that do not exist, short stats structs), checked
//! call by call against a reference model of the live blocks: every valid
//! call succeeds and agrees with the model, every invalid one returns its
//! documented status and changes nothing (the stats are compared before and
//! after), no block overlaps another or loses its contents, and destroy
//! leaves nothing behind in the emulator.

mod common;

use common::{create, destroy, empty_cache, emu, free, malloc, query, record_stream, stats, Handle};
use npualloc::ffi::allocator::{npualloc_malloc, npualloc_query};
use npualloc::ffi::last_error::last_error_message;
use npualloc::ffi::npualloc_status::{self, *};
use npualloc::ffi::stats::{npualloc_get_stats, npualloc_snapshot_json, npualloc_stats, npualloc_string_free};
use npualloc::runtime::Stream;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use std::collections::BTreeMap;
use std::ffi::{c_char, c_void};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// This binary's own device.
const DEVICE: i32 = 6;
const CAPACITY: u64 = 512 << 20;

/// Which pointer an operation names.
#[derive(Debug, Clone, Copy)]
enum Target {
    /// The start of live block `i % live`.
    Live(usize),
    /// An address inside live block `i % live` (offset `o % size`, not 0).
    Interior(usize, usize),
    /// A block freed earlier (maybe since reused: the model knows).
    Freed(usize),
    /// A live block of the other allocator.
    Foreign,
    Null,
    Random(u64),
}

#[derive(Debug, Clone, Copy)]
enum StreamPick {
    Default,
    Own(usize),
    /// A handle no runtime ever made.
    Bogus(u64),
}

#[derive(Debug, Clone)]
enum Call {
    Malloc { size: usize, stream: StreamPick, null_out: bool },
    Free(Target),
    RecordStream(Target, StreamPick),
    Query(Target, bool),
    EmptyCache,
    Stats(u32),
    Snapshot(bool),
    NullHandle(u8),
}

fn target() -> impl Strategy<Value = Target> {
    prop_oneof![
        6 => any::<usize>().prop_map(Target::Live),
        2 => (any::<usize>(), 1usize..1 << 20).prop_map(|(i, o)| Target::Interior(i, o)),
        2 => any::<usize>().prop_map(Target::Freed),
        1 => Just(Target::Foreign),
        1 => Just(Target::Null),
        1 => any::<u64>().prop_map(Target::Random),
    ]
}

fn stream() -> impl Strategy<Value = StreamPick> {
    prop_oneof![
        3 => Just(StreamPick::Default),
        6 => (0usize..2).prop_map(StreamPick::Own),
        1 => prop_oneof![Just(0x51_0000_1234u64), Just(8), any::<u64>()].prop_map(StreamPick::Bogus),
    ]
}

fn size() -> impl Strategy<Value = usize> {
    prop_oneof![
        1 => Just(0usize),
        8 => 1usize..4096,
        4 => 4096usize..(6 << 20),
        1 => prop_oneof![
            Just(usize::MAX),
            Just(usize::MAX - 511),
            Just(1usize << 60),
            Just((1usize << 60) + 1),
            Just(CAPACITY as usize + 1),
            Just(1usize << 40),
        ],
    ]
}

fn call() -> impl Strategy<Value = Call> {
    prop_oneof![
        10 => (size(), stream(), prop::bool::weighted(0.05))
            .prop_map(|(size, stream, null_out)| Call::Malloc { size, stream, null_out }),
        8 => target().prop_map(Call::Free),
        3 => (target(), stream()).prop_map(|(t, s)| Call::RecordStream(t, s)),
        3 => (target(), prop::bool::weighted(0.1)).prop_map(|(t, n)| Call::Query(t, n)),
        1 => Just(Call::EmptyCache),
        1 => prop_oneof![Just(0u32), Just(4), Just(8), Just(16), Just(40), Just(1000)].prop_map(Call::Stats),
        1 => prop::bool::weighted(0.2).prop_map(Call::Snapshot),
        1 => (0u8..5).prop_map(Call::NullHandle),
    ]
}

/// One live block as the model sees it.
#[derive(Debug, Clone, Copy)]
struct Live {
    requested: usize,
    size: usize,
    fill: u8,
}

static CALLS: AtomicUsize = AtomicUsize::new(0);
static BAD_CALLS: AtomicUsize = AtomicUsize::new(0);

/// Writes `fill` over the first and last 64 bytes of a block (the emulator's
/// device memory is host memory).
fn stamp(addr: usize, len: usize, fill: u8) {
    let n = len.min(64);
    // SAFETY: the block is live and at least `len` bytes.
    unsafe {
        std::ptr::write_bytes(addr as *mut u8, fill, n);
        std::ptr::write_bytes((addr + len - n) as *mut u8, fill, n);
    }
}

fn stamped(addr: usize, len: usize, fill: u8) -> bool {
    let n = len.min(64);
    // SAFETY: as in `stamp`.
    let (head, tail) = unsafe {
        (std::slice::from_raw_parts(addr as *const u8, n), std::slice::from_raw_parts((addr + len - n) as *const u8, n))
    };
    head.iter().chain(tail).all(|&b| b == fill)
}

struct World {
    a: Handle,
    other: Handle,
    other_block: usize,
    streams: [Stream; 2],
    live: BTreeMap<usize, Live>,
    freed: Vec<usize>,
    next_fill: u8,
    /// A bogus stream was accepted (malloc or record_stream): `empty_cache`
    /// may then fail synchronizing it, with RUNTIME.
    bogus_accepted: bool,
}

impl World {
    fn stream(&self, s: StreamPick) -> Stream {
        match s {
            StreamPick::Default => Stream::DEFAULT,
            StreamPick::Own(i) => self.streams[i],
            StreamPick::Bogus(raw) => Stream::from_raw(raw as usize as *mut c_void),
        }
    }

    /// The live block containing `addr`, if any.
    fn containing(&self, addr: usize) -> Option<(usize, Live)> {
        self.live.range(..=addr).next_back().filter(|(&start, b)| addr < start + b.size).map(|(&s, &b)| (s, b))
    }

    fn pointer(&self, t: Target) -> usize {
        let nth = |i: usize| self.live.keys().nth(i % self.live.len()).copied();
        match t {
            Target::Live(i) if !self.live.is_empty() => nth(i).unwrap(),
            Target::Interior(i, o) if !self.live.is_empty() => {
                let start = nth(i).unwrap();
                let size = self.live[&start].requested;
                if size > 1 {
                    start + 1 + o % (size - 1)
                } else {
                    start + 1
                }
            }
            Target::Freed(i) if !self.freed.is_empty() => self.freed[i % self.freed.len()],
            Target::Foreign => self.other_block,
            Target::Null => 0,
            Target::Random(r) => r as usize,
            // Nothing live or freed yet: a random-looking pointer.
            Target::Live(i) | Target::Interior(i, _) | Target::Freed(i) => i | 0x1000,
        }
    }
}

/// Asserts `st` is `want`, and if it is a refusal that nothing changed.
fn refused(
    st: npualloc_status,
    want: &[npualloc_status],
    before: &npualloc_stats,
    a: Handle,
    what: &str,
) -> Result<(), TestCaseError> {
    BAD_CALLS.fetch_add(1, Relaxed);
    prop_assert!(want.contains(&st), "{}: got {:?}, expected one of {:?} ({})", what, st, want, last_error_message());
    prop_assert!(!last_error_message().is_empty(), "{}: a refusal without a message", what);
    if st != NPUALLOC_ERR_OUT_OF_MEMORY {
        let after = stats(a);
        prop_assert_eq!(format!("{before:?}"), format!("{after:?}"), "{} changed the stats", what);
    }
    Ok(())
}

fn step(w: &mut World, call: &Call) -> Result<(), TestCaseError> {
    CALLS.fetch_add(1, Relaxed);
    let a = w.a;
    let before = stats(a);
    match *call {
        Call::Malloc { size, stream, null_out } => {
            let s = w.stream(stream);
            if null_out {
                // SAFETY: a live handle; NULL out-pointer on purpose.
                let st = unsafe { npualloc_malloc(a, size.max(1), s.raw(), std::ptr::null_mut()) };
                return refused(st, &[NPUALLOC_ERR_INVALID_ARGUMENT], &before, a, "malloc with NULL out_ptr");
            }
            let result = malloc(a, size, s);
            if size == 0 || size > 1 << 60 {
                let st = result.err().map_or(NPUALLOC_OK, |e| e.0);
                return refused(st, &[NPUALLOC_ERR_INVALID_ARGUMENT], &before, a, &format!("malloc({size})"));
            }
            if size as u64 > CAPACITY {
                let st = result.err().map_or(NPUALLOC_OK, |e| e.0);
                return refused(
                    st,
                    &[NPUALLOC_ERR_OUT_OF_MEMORY, NPUALLOC_ERR_INVALID_ARGUMENT],
                    &before,
                    a,
                    &format!("malloc({size})"),
                );
            }
            match result {
                Ok(p) => {
                    prop_assert!(p % 512 == 0, "malloc({}) returned {:#x}", size, p);
                    let info =
                        query(a, p).map_err(|st| TestCaseError::fail(format!("query of a new block: {st:?}")))?;
                    prop_assert!(info.size as usize >= size && info.requested as usize == size, "{:?}", info);
                    let end = p + info.size as usize;
                    prop_assert!(
                        w.containing(p).is_none() && w.live.range(p..end).next().is_none(),
                        "block {:#x}+{} overlaps a live one",
                        p,
                        info.size
                    );
                    w.next_fill = w.next_fill.wrapping_add(1).max(1);
                    stamp(p, size, w.next_fill);
                    w.live.insert(p, Live { requested: size, size: info.size as usize, fill: w.next_fill });
                    // Accepted: the allocator does not validate streams; the
                    // runtime refuses the bad one only when it is used.
                    w.bogus_accepted |= matches!(stream, StreamPick::Bogus(_));
                }
                Err((st, msg)) => {
                    // Legitimate only when the device is really full, or the stream is bad.
                    let bogus = matches!(stream, StreamPick::Bogus(_));
                    prop_assert!(
                        st == NPUALLOC_ERR_OUT_OF_MEMORY
                            || (bogus && matches!(st, NPUALLOC_ERR_RUNTIME | NPUALLOC_ERR_INVALID_ARGUMENT)),
                        "malloc({}) on {:?} failed: {:?} {}",
                        size,
                        stream,
                        st,
                        msg
                    );
                    BAD_CALLS.fetch_add(1, Relaxed);
                }
            }
        }
        Call::Free(t) => {
            let p = w.pointer(t);
            let st = free(a, p);
            match w.live.get(&p).copied() {
                Some(b) => {
                    prop_assert_eq!(st, NPUALLOC_OK, "free of live {:#x}: {}", p, last_error_message());
                    prop_assert!(stamped(p, b.requested, b.fill), "block {:#x} lost its contents", p);
                    w.live.remove(&p);
                    w.freed.push(p);
                }
                // Freeing NULL is a no-op, as with C's free.
                None if p == 0 => {
                    prop_assert_eq!(st, NPUALLOC_OK, "free(NULL): {}", last_error_message());
                    prop_assert_eq!(last_error_message(), "", "free(NULL) left a message");
                    prop_assert_eq!(format!("{before:?}"), format!("{:?}", stats(a)), "free(NULL) changed the stats");
                }
                None => refused(st, &[NPUALLOC_ERR_UNKNOWN_POINTER], &before, a, &format!("free({p:#x}) [{t:?}]"))?,
            }
        }
        Call::RecordStream(t, s) => {
            let p = w.pointer(t);
            let st = record_stream(a, p, w.stream(s));
            if !w.live.contains_key(&p) {
                refused(st, &[NPUALLOC_ERR_UNKNOWN_POINTER], &before, a, &format!("record_stream({p:#x}) [{t:?}]"))?;
            } else if matches!(s, StreamPick::Bogus(_)) {
                if st == NPUALLOC_OK {
                    w.bogus_accepted = true;
                } else {
                    refused(
                        st,
                        &[NPUALLOC_ERR_INVALID_ARGUMENT, NPUALLOC_ERR_RUNTIME],
                        &before,
                        a,
                        "record_stream on a bogus stream",
                    )?;
                }
            } else {
                prop_assert_eq!(st, NPUALLOC_OK, "record_stream of live {:#x}: {}", p, last_error_message());
            }
        }
        Call::Query(t, null_out) => {
            let p = w.pointer(t);
            if null_out {
                // SAFETY: a live handle; NULL out on purpose.
                let st = unsafe { npualloc_query(a, p as *const c_void, std::ptr::null_mut()) };
                return refused(st, &[NPUALLOC_ERR_INVALID_ARGUMENT], &before, a, "query with NULL out");
            }
            match (query(a, p), w.containing(p)) {
                (Ok(info), Some((start, b))) => {
                    prop_assert_eq!(
                        (info.addr as usize, info.requested as usize, info.size as usize),
                        (start, b.requested, b.size)
                    );
                }
                (Err(st), None) => refused(st, &[NPUALLOC_ERR_UNKNOWN_POINTER], &before, a, &format!("query({p:#x})"))?,
                (got, want) => prop_assert!(
                    false,
                    "query({:#x}) [{:?}]: got {:?}, model has {:?}",
                    p,
                    t,
                    got.map(|i| i.addr),
                    want
                ),
            }
        }
        Call::EmptyCache => {
            let st = empty_cache(a);
            if !(w.bogus_accepted && st == NPUALLOC_ERR_RUNTIME) {
                prop_assert_eq!(st, NPUALLOC_OK, "{}", last_error_message());
            }
        }
        Call::Stats(struct_size) => {
            // A buffer bigger than any stats struct, poisoned, to see what is written.
            let mut buf = [0xa5u8; 1024];
            buf[..4].copy_from_slice(&struct_size.to_ne_bytes());
            let mut words = [0u64; 128];
            // SAFETY: plain bytes into an aligned buffer.
            unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr(), words.as_mut_ptr().cast::<u8>(), buf.len()) };
            // SAFETY: 1024 writable, aligned bytes.
            let st = unsafe { npualloc_get_stats(a, words.as_mut_ptr().cast::<npualloc_stats>()) };
            // SAFETY: reading back the same buffer.
            let bytes: &[u8] = unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), 1024) };
            let full = std::mem::size_of::<npualloc_stats>();
            if struct_size < 8 {
                refused(
                    st,
                    &[NPUALLOC_ERR_INVALID_ARGUMENT],
                    &before,
                    a,
                    &format!("get_stats(struct_size {struct_size})"),
                )?;
                prop_assert!(bytes[4..].iter().all(|&b| b == 0xa5), "a refused get_stats wrote to the struct");
            } else {
                prop_assert_eq!(st, NPUALLOC_OK);
                let written = (struct_size as usize).min(full);
                prop_assert!(
                    bytes[written..].iter().all(|&b| b == 0xa5),
                    "get_stats wrote past struct_size {}",
                    struct_size
                );
            }
        }
        Call::Snapshot(null_out) => {
            if null_out {
                // SAFETY: a live handle; NULL out on purpose.
                let st = unsafe { npualloc_snapshot_json(a, std::ptr::null_mut()) };
                return refused(st, &[NPUALLOC_ERR_INVALID_ARGUMENT], &before, a, "snapshot with NULL out");
            }
            let mut json: *mut c_char = std::ptr::null_mut();
            // SAFETY: a live handle and a valid out-pointer.
            prop_assert_eq!(unsafe { npualloc_snapshot_json(a, &mut json) }, NPUALLOC_OK);
            // SAFETY: a NUL-terminated string from the library, freed once.
            let text = unsafe { std::ffi::CStr::from_ptr(json) }.to_string_lossy().into_owned();
            // SAFETY: as above; json is not used after this.
            unsafe { npualloc_string_free(json) };
            prop_assert!(
                text.starts_with('{') && text.ends_with('}'),
                "snapshot is not a JSON object: {}",
                &text[..text.len().min(80)]
            );
        }
        Call::NullHandle(which) => {
            let null: Handle = std::ptr::null_mut();
            let st = match which {
                0 => malloc(null, 64, Stream::DEFAULT).err().map_or(NPUALLOC_OK, |e| e.0),
                1 => free(null, w.pointer(Target::Live(0))),
                2 => record_stream(null, w.pointer(Target::Live(0)), Stream::DEFAULT),
                3 => empty_cache(null),
                // SAFETY: NULL handle on purpose; the out-pointer is valid.
                _ => unsafe {
                    npualloc_get_stats(null, &mut npualloc_stats { struct_size: 200, ..Default::default() })
                },
            };
            refused(st, &[NPUALLOC_ERR_INVALID_ARGUMENT], &before, a, &format!("call {which} with a NULL handle"))?;
        }
    }
    // The model and the stats agree after every call.
    let s = stats(a);
    let requested: usize = w.live.values().map(|b| b.requested).sum();
    let sizes: usize = w.live.values().map(|b| b.size).sum();
    prop_assert_eq!(
        (s.active_blocks, s.requested_bytes, s.allocated_bytes),
        (w.live.len() as u64, requested as u64, sizes as u64),
        "stats disagree with the model after {:?}",
        call
    );
    Ok(())
}

fn run_case(calls: &[Call], streams: [Stream; 2]) -> Result<(), TestCaseError> {
    let e = emu();
    let a = create("", DEVICE).map_err(|e| TestCaseError::fail(format!("create: {e:?}")))?;
    let other =
        create("expandable_segments:false", DEVICE).map_err(|e| TestCaseError::fail(format!("create: {e:?}")))?;
    let other_block = malloc(other, 4096, Stream::DEFAULT).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
    let mut w = World {
        a,
        other,
        other_block,
        streams,
        live: BTreeMap::new(),
        freed: Vec::new(),
        next_fill: 0,
        bogus_accepted: false,
    };
    let result = calls.iter().try_for_each(|c| step(&mut w, c));
    // Whatever happened, tear down and check that nothing is left behind.
    for (&p, b) in &w.live {
        if result.is_ok() {
            prop_assert!(stamped(p, b.requested, b.fill), "block {:#x} lost its contents", p);
        }
    }
    let other_stats = stats(w.other);
    let leftover = w.live.len();
    let st_a = destroy(w.a);
    let destroy_msg = last_error_message();
    prop_assert_eq!(free(w.other, w.other_block), NPUALLOC_OK, "the other allocator's block was disturbed");
    prop_assert_eq!(other_stats.active_blocks, 1);
    let st_b = destroy(w.other);
    result?;
    prop_assert_eq!((st_a, st_b), (NPUALLOC_OK, NPUALLOC_OK));
    if leftover > 0 {
        prop_assert!(destroy_msg.contains(&format!("{leftover} live block")), "{}", destroy_msg);
    }
    let u = e.usage(DEVICE);
    prop_assert!(
        u.malloc_count == 0 && u.physical_count == 0 && u.mapped_bytes == 0 && u.reserved_ranges == 0 && u.events == 0,
        "the emulator still holds resources: {:?}",
        u
    );
    Ok(())
}

#[test]
fn random_call_sequences_match_the_model() {
    let e = emu();
    e.set_capacity(DEVICE, CAPACITY);
    let streams = [e.create_stream(DEVICE), e.create_stream(DEVICE)];
    let cases = std::env::var("NPUALLOC_FFI_RANDOM_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256);
    let mut runner = TestRunner::new(Config { cases, failure_persistence: None, ..Config::default() });
    let result = runner.run(&prop::collection::vec(call(), 1..250), |calls| run_case(&calls, streams));
    // proptest calls a case that fails once more while shrinking; the counts
    // include those calls.
    for s in streams {
        e.destroy_stream(DEVICE, s);
    }
    eprintln!(
        "ffi_random: {cases} sequences, {} calls, {} of them refused as invalid",
        CALLS.load(Relaxed),
        BAD_CALLS.load(Relaxed)
    );
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// A stream the host destroyed after `record_stream` (a side stream torn
/// down while a tensor it used is cached) must not make the cache
/// unreturnable: a destroyed stream has no queued work, so `empty_cache`
/// treats its failed synchronize as idle.
#[test]
fn a_destroyed_stream_does_not_wedge_empty_cache() {
    const DEV: i32 = 7;
    let e = emu();
    let a = create("expandable_segments:false", DEV).unwrap();
    let side = e.create_stream(DEV);
    let p = malloc(a, 1000, Stream::DEFAULT).unwrap();
    assert_eq!(record_stream(a, p, side), NPUALLOC_OK);
    assert_eq!(free(a, p), NPUALLOC_OK, "{}", last_error_message());
    e.destroy_stream(DEV, side);
    let st = empty_cache(a);
    let msg = last_error_message();
    let reserved = stats(a).reserved_bytes;
    assert_eq!(destroy(a), NPUALLOC_OK);
    assert_eq!(st, NPUALLOC_OK, "empty_cache: {msg}");
    assert_eq!(reserved, 0, "the cached segment was not returned");
}
