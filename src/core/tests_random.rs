//! Random operation sequences checked against a model, through the emulator.
//!
//! Each seed picks a device capacity and a config, then runs random mallocs,
//! frees, record_stream calls, stream holds and releases, device-to-host
//! copies queued on held streams and empty_cache calls over three streams,
//! with or without injected runtime faults. After every step the allocator's
//! invariants hold; a block handed out overlaps neither a live block nor a
//! copy another stream still has queued; data written into a block reads back
//! until its free. Seeds are fixed, so a failure replays.

use super::tests::{allocator, check_fill, emu_lock, fail_nth, fill, new_stream, set_capacity, usage, Rng, DEV};
use super::*;
use crate::runtime::{AclCallError, Event};
use ascendcl::{aclemu_stream_hold, aclemu_stream_release};

const STREAMS: usize = 3;
const STEPS: usize = 500;
const SEEDS: u64 = 64;
/// Bytes at the start of each block filled with its pattern.
const FILLED: usize = 4096;
/// Bytes each queued copy reads.
const COPY_LEN: usize = 512;
/// Tries of the test's own runtime calls: an armed fault fires once, so the
/// second try succeeds.
const TRIES: usize = 2;

const FAULTS: [&str; 13] = [
    "aclrtSynchronizeStream",
    "aclrtSynchronizeEvent",
    "aclrtReserveMemAddress",
    "aclrtReleaseMemAddress",
    "aclrtMalloc",
    "aclrtFree",
    "aclrtRecordEvent",
    "aclrtMallocPhysical",
    "aclrtMapMem",
    "aclrtUnmapMem",
    "aclrtCreateEventWithFlag",
    "aclrtFreePhysical",
    "aclrtQueryEventStatus",
];

const CONFIGS: [&str; 8] = [
    "expandable_segments:false",
    "expandable_segments:false,release_threshold_mb:0",
    "expandable_segments:false,garbage_collection_threshold:0.6,per_process_memory_fraction:0.9",
    "expandable_segments:false,max_split_size_mb:24",
    "expandable_segments:true",
    "expandable_segments:true,reserved_headroom:0",
    "expandable_segments:true,reserved_headroom:0.1,page_size:20m",
    "expandable_segments:true,per_process_memory_fraction:0.8",
];

/// A request size from each pool: small, up to 1 MiB, mid-size, large.
fn random_size(rng: &mut Rng) -> usize {
    match rng.below(4) {
        0 => 1 + rng.below(4096) as usize,
        1 => 1 + rng.below(1 << 20) as usize,
        2 => (1 << 20) + rng.below(9 << 20) as usize,
        _ => (10 << 20) + rng.below(30 << 20) as usize,
    }
}

/// One time in `one_in`, arms a fault of a random runtime function one to
/// three calls ahead.
fn maybe_arm_fault(rng: &mut Rng, one_in: u64) {
    if rng.below(one_in) == 0 {
        let function = FAULTS[rng.index(FAULTS.len())];
        fail_nth(function, 1 + rng.below(3) as i32);
    }
}

fn disarm_faults() {
    for function in FAULTS {
        fail_nth(function, 0);
    }
}

/// A block the test holds.
struct Live {
    addr: usize,
    size: usize,
    /// The stream (index) it was allocated on.
    owner: usize,
    /// Streams whose work may read it: the owner and every stream recorded.
    users: Vec<usize>,
    /// The pattern its first bytes hold.
    byte: u8,
}

/// Two device-to-host copies of a block queued on a held stream, kept until
/// their event completes.
struct QueuedCopies {
    stream: usize,
    event: Event,
    /// The device ranges read (start, len): the block's head and its tail,
    /// which may lie in another segment page.
    reads: [(usize, usize); 2],
    /// Where the copies write; dropped only once they ran.
    _buffers: [Vec<u8>; 2],
}

fn overlaps(a: usize, a_len: usize, b: usize, b_len: usize) -> bool {
    a < b + b_len && b < a + a_len
}

/// Runs one of the test's own runtime calls, which an armed fault may hit.
fn retried<T>(what: &str, call: impl Fn() -> Result<T, AclCallError>) -> T {
    let mut result = call();
    for _ in 1..TRIES {
        result = result.or_else(|_| call());
    }
    result.unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// Holds (or releases) a stream's later work in the emulator.
fn set_held(stream: Stream, held: bool) {
    // SAFETY: the stream is a live emulator stream the test created.
    let code = unsafe {
        if held {
            aclemu_stream_hold(stream.raw())
        } else {
            aclemu_stream_release(stream.raw())
        }
    };
    assert_eq!(code, 0);
}

/// What the test expects of the allocator.
struct Model {
    streams: Vec<Stream>,
    held: [bool; STREAMS],
    live: Vec<Live>,
    queued: Vec<QueuedCopies>,
}

impl Model {
    fn new(a: &DeviceAllocator) -> Self {
        let streams = (0..STREAMS).map(|_| new_stream(a)).collect();
        Model { streams, held: [false; STREAMS], live: Vec::new(), queued: Vec::new() }
    }

    /// Forgets the copies that ran: their buffers go, their events too.
    fn forget_finished(&mut self, a: &DeviceAllocator) {
        let rt = a.runtime().clone();
        self.queued.retain(|q| {
            let done = retried("querying a test event", || rt.on_device(DEV, || rt.event_complete(q.event)));
            if done {
                rt.on_device(DEV, || rt.destroy_event(q.event)).unwrap();
            }
            !done
        });
    }

    /// A new block on stream `si` may overlap no live block, and no copy
    /// another stream has queued (that stream would read the new owner's data).
    fn check_new_block(&self, addr: usize, size: usize, si: usize, at: &str) {
        for b in &self.live {
            assert!(
                !overlaps(addr, size, b.addr, b.size),
                "{at}: {addr:#x}+{size} overlaps the live block {:#x}+{}",
                b.addr,
                b.size
            );
        }
        for q in self.queued.iter().filter(|q| q.stream != si) {
            for &(start, len) in &q.reads {
                assert!(
                    !overlaps(addr, size, start, len),
                    "{at}: {addr:#x}+{size} on stream {si} overlaps a copy of {start:#x}+{len} queued on stream {}",
                    q.stream
                );
            }
        }
    }

    /// Queues copies of live block `i`'s head and tail on held stream `t`.
    fn queue_copies(&mut self, a: &DeviceAllocator, i: usize, t: usize) {
        let (addr, size) = (self.live[i].addr, self.live[i].size);
        let len = size.min(COPY_LEN);
        let reads = [(addr, len), (addr + size - len, len)];
        let stream = self.streams[t];
        let rt = a.runtime().clone();
        let event = retried("creating a test event", || rt.on_device(DEV, || rt.create_event()));
        let mut buffers = [vec![0u8; len], vec![0u8; len]];
        for (buffer, &(src, _)) in buffers.iter_mut().zip(&reads) {
            queue_copy_out(a, buffer, src, stream);
        }
        retried("recording a test event", || rt.on_device(DEV, || rt.record_event(event, stream)));
        self.queued.push(QueuedCopies { stream: t, event, reads, _buffers: buffers });
    }
}

/// Queues a device-to-host copy of `dst.len()` bytes at `src` on `stream`.
fn queue_copy_out(a: &DeviceAllocator, dst: &mut [u8], src: usize, stream: Stream) {
    let rt = a.runtime().clone();
    let kind = crate::memcpy2d::ACL_MEMCPY_DEVICE_TO_HOST as u32;
    let len = dst.len();
    // SAFETY: dst's heap buffer lives in the model until the copy's event
    // completed; src is a live block of at least len bytes.
    rt.on_device(DEV, || unsafe {
        rt.memcpy2d_async(dst.as_mut_ptr().cast(), len, src as *const _, len, len, 1, kind, stream)
    })
    .unwrap();
}

fn run_seed(seed: u64, faults: bool) {
    // A fault another test left armed would fire here.
    disarm_faults();
    let mut rng = Rng::new(seed);
    set_capacity([64u64 << 20, 128 << 20, 1 << 30][rng.index(3)]);
    let config = CONFIGS[rng.index(CONFIGS.len())];
    let a = allocator(config);
    let mut m = Model::new(&a);
    for step in 0..STEPS {
        // Out of 14: malloc 5, free 2, record_stream 1, queued copies 2,
        // hold or release 2, empty_cache 1, nothing 1.
        let op = rng.below(14);
        let at = format!("seed {seed} ({config}) step {step} op {op}");
        match op {
            0..=4 => {
                let size = random_size(&mut rng);
                if faults {
                    maybe_arm_fault(&mut rng, 10);
                }
                let si = rng.index(STREAMS);
                let before = a.stats().unwrap();
                match a.malloc(size, m.streams[si]) {
                    Ok(addr) => {
                        // Only copies still queued constrain the placement.
                        m.forget_finished(&a);
                        m.check_new_block(addr, size, si, &at);
                        let byte = (step % 251) as u8;
                        fill(addr, size.min(FILLED), byte);
                        m.live.push(Live { addr, size, owner: si, users: vec![si], byte });
                    }
                    // Out of memory, or an injected failure: nothing was allocated.
                    Err(e @ (Error::OutOfMemory(_) | Error::Runtime { .. })) => {
                        assert!(faults || matches!(e, Error::OutOfMemory(_)), "{at}: {e}");
                        let after = a.stats().unwrap();
                        assert_eq!(after.allocated_bytes, before.allocated_bytes, "{at}");
                        assert_eq!(after.active_blocks, before.active_blocks, "{at}");
                    }
                    Err(e) => panic!("{at}: unexpected {e}"),
                }
            }
            5 | 6 if !m.live.is_empty() => {
                let i = rng.index(m.live.len());
                let b = &m.live[i];
                assert!(check_fill(b.addr, b.size.min(FILLED), b.byte), "{at}: data of {:#x} corrupted", b.addr);
                match a.free(b.addr) {
                    Ok(()) => {
                        m.live.swap_remove(i);
                    }
                    // Another stream used the block and neither an event nor a
                    // wait was possible: it stays live, to be freed again later.
                    Err(e @ Error::Runtime { .. }) if faults && e.to_string().contains("stays allocated") => {
                        assert_ne!(b.users, [b.owner], "{at}: a block only its owner used failed to free: {e}");
                        assert_eq!(a.query(b.addr).unwrap().addr, b.addr, "{at}");
                    }
                    Err(e) => panic!("{at}: free of {:#x}: {e}", b.addr),
                }
            }
            7 if !m.live.is_empty() => {
                let i = rng.index(m.live.len());
                let j = rng.index(STREAMS);
                a.record_stream(m.live[i].addr, m.streams[j]).unwrap_or_else(|e| panic!("{at}: {e}"));
                if !m.live[i].users.contains(&j) {
                    m.live[i].users.push(j);
                }
            }
            8 | 9 if !m.live.is_empty() => {
                let i = rng.index(m.live.len());
                let t = m.live[i].users[rng.index(m.live[i].users.len())];
                // Work on a free-running stream runs at once; only held work stays queued.
                if m.held[t] {
                    m.queue_copies(&a, i, t);
                }
            }
            10 | 11 => {
                let t = rng.index(STREAMS);
                m.held[t] = !m.held[t];
                set_held(m.streams[t], m.held[t]);
            }
            12 => {
                if faults {
                    maybe_arm_fault(&mut rng, 4);
                }
                match a.empty_cache() {
                    Ok(_) => {}
                    Err(Error::Runtime { .. }) if faults => {}
                    Err(e) => panic!("{at}: empty_cache: {e}"),
                }
            }
            _ => {}
        }
        m.forget_finished(&a);
        a.check_invariants().unwrap_or_else(|e| panic!("{at}: {e}"));
        let s = a.stats().unwrap();
        assert_eq!(s.active_blocks, m.live.len() as u64, "{at}");
        assert_eq!(s.requested_bytes, m.live.iter().map(|b| b.size as u64).sum::<u64>(), "{at}");
    }

    // Wind down with the runtime answering again.
    disarm_faults();
    for t in 0..STREAMS {
        if m.held[t] {
            set_held(m.streams[t], false);
        }
    }
    m.forget_finished(&a);
    assert!(m.queued.is_empty(), "seed {seed}: copies still queued after every stream was released");
    for b in m.live.drain(..) {
        assert!(check_fill(b.addr, b.size.min(FILLED), b.byte), "seed {seed}: data of {:#x} corrupted", b.addr);
        a.free(b.addr).unwrap_or_else(|e| panic!("seed {seed}: final free of {:#x}: {e}", b.addr));
    }
    a.check_invariants().unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    let report = a.teardown().unwrap_or_else(|e| panic!("seed {seed}: teardown: {e}"));
    assert_eq!(report, TeardownReport::default(), "seed {seed}");
    let rt = a.runtime().clone();
    for s in m.streams {
        rt.on_device(DEV, || rt.destroy_stream(s)).unwrap();
    }
    let u = usage(DEV);
    assert_eq!(
        (u.malloc_count, u.events, u.physical_count, u.mapped_bytes, u.reserved_ranges),
        (0, 0, 0, 0, 0),
        "seed {seed} ({config}): the emulator reports leaks"
    );
}

#[test]
fn random_operations_keep_the_invariants() {
    let _g = emu_lock();
    for seed in 1..=SEEDS {
        run_seed(seed, false);
    }
    set_capacity(1 << 30);
}

#[test]
fn random_operations_with_injected_faults_keep_the_invariants() {
    let _g = emu_lock();
    for seed in 1..=SEEDS {
        run_seed(seed, true);
    }
    set_capacity(1 << 30);
}
