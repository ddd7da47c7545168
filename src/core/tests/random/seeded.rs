//! One seed's sequence: random mallocs, frees, record_stream calls, stream
//! holds and releases, device-to-host copies queued on held streams and
//! empty_cache calls over three streams, with or without injected runtime
//! faults, checked against a model after every step.

use super::super::support::{
    allocator, assert_emulator_empty, check_fill, drop_stream, fill, new_stream, queue_copy_out, set_capacity, usage,
    Rng, DEV,
};
use super::ops::{disarm_faults, maybe_arm_fault, overlaps, random_size, retried, set_held, COPY_LEN, FILLED};
use crate::core::*;
use crate::runtime::Event;

const STREAMS: usize = 3;
const STEPS: usize = 500;
pub(super) const SEEDS: u64 = 64;

const CONFIGS: [&str; 11] = [
    "expandable_segments:false",
    "expandable_segments:false,release_threshold_mb:0",
    "expandable_segments:false,garbage_collection_threshold:0.6,per_process_memory_fraction:0.9",
    "expandable_segments:false,max_split_size_mb:24",
    "expandable_segments:true",
    "expandable_segments:true,reserved_headroom:0",
    "expandable_segments:true,reserved_headroom:0.1,page_size:20m",
    "expandable_segments:true,per_process_memory_fraction:0.8",
    // Every growth may move a wholly free handle (on a roomy device: 8 GiB).
    "expandable_segments:true,map_ahead:false",
    "expandable_segments:true,release_threshold_mb:0",
    "expandable_segments:true,garbage_collection_threshold:0.6,per_process_memory_fraction:0.9",
];

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

/// What the test expects of the allocator.
struct Model {
    streams: Vec<Stream>,
    held: [bool; STREAMS],
    live: Vec<Live>,
    queued: Vec<QueuedCopies>,
}

impl Model {
    fn new() -> Self {
        let streams = (0..STREAMS).map(|_| new_stream()).collect();
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

pub(super) fn run_seed(seed: u64, faults: bool) {
    run_seed_as(seed, faults, None);
}

/// `run_seed` with the config and capacity given, not drawn.
pub(super) fn run_seed_as(seed: u64, faults: bool, setup: Option<(&str, u64)>) {
    // A fault another test left armed would fire here.
    disarm_faults();
    let mut rng = Rng::new(seed);
    let capacity = [64u64 << 20, 128 << 20, 1 << 30, 8 << 30][rng.index(4)];
    let drawn = CONFIGS[rng.index(CONFIGS.len())];
    let (config, capacity) = setup.unwrap_or((drawn, capacity));
    set_capacity(capacity);
    let a = allocator(config);
    let mut m = Model::new();
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
                let device_before = usage(DEV);
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
                        // Nothing the refused request obtained stays with the
                        // allocator (the ladder may have given memory back).
                        // An injected failure to free can keep a handle.
                        let u = usage(DEV);
                        let held = |u: &ascendcl::aclemu_usage| (u.malloc_bytes, u.physical_bytes, u.mapped_bytes);
                        let (was, now) = (held(&device_before), held(&u));
                        assert!(
                            faults || (now.0 <= was.0 && now.1 <= was.1 && now.2 <= was.2),
                            "{at}: a refused request kept device memory: (malloc, physical, mapped) {was:?} -> {now:?}"
                        );
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
    for s in m.streams {
        drop_stream(s);
    }
    assert_emulator_empty(&format!("seed {seed} ({config})"));
}
