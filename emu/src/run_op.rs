//! `aclemu_run_op`: plays the graph engine running one op on a stream whose
//! allocator is registered (docs/acl-api.md §6.3).
//!
//! For each size: `block = alloc(obj, size)` (NULL fails the op with 207001
//! after freeing what it got) and `addr = get_addr(block)` once. Then it
//! checks that no two live blocks overlap (507000), writes a per-block
//! pattern over every byte and reads it back (507000 on a mismatch, e.g. two
//! blocks aliasing the same physical memory), queues the op as stream work
//! (pending on a held stream), and frees every block with its original
//! handle, as GE does right after launching. No emulator lock is held while
//! the callbacks run: they may call aclrt* functions.
//!
//! The queued op pins its blocks until it runs (Note [pins]); writing them
//! at launch while another stream's queued work pins them is a violation,
//! unless this stream waits for that work.
//!
//! `aclemu_launch` queues such an op for ranges the caller names, without
//! an allocator: what a library's kernel on a stream (an emulated
//! collective) does to the memory it uses.
//!
//! GE's registration rules (RB "How GE uses a registered allocator"): a
//! stream that ran an op while nothing was registered keeps GE's built-in
//! allocator for good, and a NULL stream always uses it; the built-in
//! allocator is modelled as host scratch memory outside the device budget.
//! A registration without an alloc-advise callback is refused (100000),
//! where GE would deadlock.

use crate::allocator_desc::{registration, Fields};
use crate::error::{require, AclResult, ACL_ERROR_RT_INTERNAL_ERROR, ACL_ERROR_RT_MEMORY_ALLOCATION};
use crate::ffi::{emu_entry, lock};
use crate::queue::{engine, Work};
use crate::violation::Span;
use std::collections::HashSet;
use std::ffi::c_void;
use std::sync::Mutex;

/// Streams that ran an op with GE's built-in allocator.
static BUILT_IN: Mutex<Option<HashSet<usize>>> = Mutex::new(None);

/// One allocation of the op.
struct Live {
    block: *mut c_void,
    addr: usize,
    size: usize,
}

const CHUNK: usize = 4096;

/// The pattern word of block `i` (splitmix64, so neighbours differ).
fn pattern_word(i: usize) -> u64 {
    let mut z = (i as u64).wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Byte `a` of a block holds byte `a % 8` of the word, `a` being the
/// absolute address; a chunk template is copied at the block's phase.
fn template(word: u64) -> Vec<u8> {
    word.to_le_bytes().iter().copied().cycle().take(CHUNK + 8).collect()
}

/// Writes block `i`'s pattern.
///
/// # Safety
/// `[addr, addr + size)` must be writable.
unsafe fn fill(b: &Live, i: usize) {
    let tpl = template(pattern_word(i));
    let phase = b.addr % 8;
    let mut off = 0;
    while off < b.size {
        let n = CHUNK.min(b.size - off);
        // SAFETY: inside the block per the caller; the template is long enough.
        unsafe { std::ptr::copy_nonoverlapping(tpl[phase..].as_ptr(), (b.addr + off) as *mut u8, n) };
        off += n;
    }
}

/// True if block `i` still holds its pattern.
///
/// # Safety
/// `[addr, addr + size)` must be readable.
unsafe fn holds_pattern(b: &Live, i: usize) -> bool {
    let tpl = template(pattern_word(i));
    let phase = b.addr % 8;
    let mut off = 0;
    while off < b.size {
        let n = CHUNK.min(b.size - off);
        // SAFETY: inside the block per the caller.
        let got = unsafe { std::slice::from_raw_parts((b.addr + off) as *const u8, n) };
        if got != &tpl[phase..phase + n] {
            return false;
        }
        off += n;
    }
    true
}

/// True if two non-empty blocks share a byte.
fn any_overlap(blocks: &[Live]) -> bool {
    let mut spans: Vec<(usize, usize)> =
        blocks.iter().filter(|b| b.size > 0).map(|b| (b.addr, b.addr.saturating_add(b.size))).collect();
    spans.sort_unstable();
    spans.windows(2).any(|w| w[0].1 > w[1].0)
}

fn free_all(fields: &Fields, blocks: &[Live]) {
    let free = fields.free.expect("checked at registration");
    for b in blocks {
        // SAFETY: the registered callback, given a block its alloc returned.
        unsafe { free(fields.obj as *mut c_void, b.block) };
    }
}

/// Allocates the op's blocks, checks and touches them; frees nothing.
fn use_blocks(fields: &Fields, sizes: &[usize], blocks: &mut Vec<Live>) -> AclResult<()> {
    let alloc = fields.alloc.expect("checked at registration");
    let get_addr = fields.get_addr.expect("checked at registration");
    for &size in sizes {
        // SAFETY: the registered callbacks, called as GE calls them.
        let block = unsafe { alloc(fields.obj as *mut c_void, size) };
        if block.is_null() {
            return Err(ACL_ERROR_RT_MEMORY_ALLOCATION);
        }
        // SAFETY: as above, once per block.
        let addr = unsafe { get_addr(block) } as usize;
        blocks.push(Live { block, addr, size });
        if addr == 0 && size > 0 {
            return Err(ACL_ERROR_RT_INTERNAL_ERROR);
        }
    }
    if any_overlap(blocks) {
        return Err(ACL_ERROR_RT_INTERNAL_ERROR);
    }
    for (i, b) in blocks.iter().enumerate() {
        // SAFETY: the allocator handed out `size` bytes at `addr`.
        unsafe { fill(b, i) };
    }
    for (i, b) in blocks.iter().enumerate() {
        // SAFETY: as above.
        if !unsafe { holds_pattern(b, i) } {
            return Err(ACL_ERROR_RT_INTERNAL_ERROR);
        }
    }
    Ok(())
}

/// Runs the op with GE's built-in allocator: scratch memory the op fills
/// and checks, queued as work that pins nothing.
fn run_built_in(stream: *mut c_void, sizes: &[usize]) -> AclResult<()> {
    let scratch: Vec<Vec<u8>> = sizes.iter().map(|&size| vec![0u8; size]).collect();
    let blocks: Vec<Live> = scratch
        .iter()
        .map(|b| Live { block: std::ptr::null_mut(), addr: b.as_ptr() as usize, size: b.len() })
        .collect();
    for (i, b) in blocks.iter().enumerate() {
        // SAFETY: `b` describes a live buffer of `scratch`.
        unsafe { fill(b, i) };
    }
    let mut eng = engine();
    let key = eng.resolve(stream)?;
    eng.submit(key, Work::Marker);
    Ok(())
}

/// Queues the op on `stream`, after checking its writes against other
/// streams' queued work.
fn launch(stream: *mut c_void, blocks: &[Live]) -> AclResult<()> {
    let spans: Vec<Span> = blocks.iter().filter(|b| b.size > 0).map(|b| (b.addr, b.addr + b.size)).collect();
    let mut eng = engine();
    let key = eng.resolve(stream)?;
    let mut involved = Vec::new();
    for &span in &spans {
        // Fine when this stream's queue waits for the pinning work.
        for other in
            eng.conflicts(key, span, |eng, pin_stream, pin_seq| eng.waits_for(key, u64::MAX, pin_stream, pin_seq, 0))
        {
            if !involved.contains(&other) {
                involved.push(other);
            }
        }
    }
    if !involved.is_empty() {
        involved.push(key);
        let what = "an op wrote into memory another stream's queued work uses";
        eng.violation(&involved, what);
    }
    eng.submit(key, Work::Op { spans });
    Ok(())
}

/// True if `stream` keeps GE's built-in allocator: NULL, or it ran an op
/// while nothing was registered (`remember` records that).
fn uses_built_in(stream: *mut c_void, registered: bool) -> bool {
    if stream.is_null() {
        return true;
    }
    let mut set = lock(&BUILT_IN);
    let set = set.get_or_insert_with(HashSet::new);
    if !registered {
        set.insert(stream as usize);
    }
    set.contains(&(stream as usize))
}

unsafe fn run_op(stream: *mut c_void, sizes: *const usize, n: usize) -> AclResult<()> {
    require(n == 0 || !sizes.is_null())?;
    // Registrations outlive streams; running on a destroyed one is an error.
    engine().resolve(stream)?;
    let sizes = if n == 0 {
        &[][..]
    } else {
        // SAFETY: non-NULL, and the caller promises `n` readable sizes.
        unsafe { std::slice::from_raw_parts(sizes, n) }
    };
    let reg = registration(stream);
    if uses_built_in(stream, reg.is_some()) {
        return run_built_in(stream, sizes);
    }
    let reg = reg.expect("registered: checked above");
    require(reg.fields.advise.is_some())?;
    let mut blocks = Vec::with_capacity(n);
    let result = use_blocks(&reg.fields, sizes, &mut blocks).and_then(|()| launch(stream, &blocks));
    free_all(&reg.fields, &blocks);
    result
}

/// Runs one op on `stream` through its registered allocator, allocating
/// `sizes[0..n]`, or through GE's built-in allocator (NULL stream, or a
/// stream that ran an op before anything was registered for it). 0 on
/// success; 100000 if the registration lacks alloc-advise; 107017 for a
/// destroyed stream; 207001 if alloc returned NULL; 507000 if blocks
/// overlap, an address is NULL or a pattern did not read back.
///
/// # Safety
/// `sizes` must be NULL or point to `n` readable values; the registered
/// callbacks must honour the ACL allocator contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclemu_run_op(stream: *mut c_void, sizes: *const usize, n: usize) -> crate::aclError {
    // SAFETY: forwarded caller contract.
    emu_entry!({ unsafe { run_op(stream, sizes, n) } })
}

/// One device range an op of `aclemu_launch` uses.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct aclemu_span {
    pub addr: *const c_void,
    pub size: usize,
}

unsafe fn launch_spans(stream: *mut c_void, spans: *const aclemu_span, n: usize) -> AclResult<()> {
    require(n == 0 || !spans.is_null())?;
    let given = if n == 0 {
        &[][..]
    } else {
        // SAFETY: non-NULL, and the caller promises `n` readable spans.
        unsafe { std::slice::from_raw_parts(spans, n) }
    };
    let mut ranges = Vec::with_capacity(n);
    for s in given.iter().filter(|s| s.size > 0) {
        let start = s.addr as usize;
        let end = start.checked_add(s.size).ok_or(crate::error::ACL_ERROR_INVALID_PARAM)?;
        ranges.push((start, end));
    }
    // A kernel that touches memory nobody allocated or mapped faults the device.
    if !crate::violation::still_device_memory(&ranges) {
        return Err(crate::error::ACL_ERROR_RT_PARAM_INVALID);
    }
    let blocks: Vec<Live> = ranges
        .iter()
        .map(|&(start, end)| Live { block: std::ptr::null_mut(), addr: start, size: end - start })
        .collect();
    launch(stream, &blocks)
}

/// Queues an op on `stream` that uses the device ranges `spans[0..n]`, as a
/// library's kernel (a collective of a communication library) would: it pins
/// them until it runs, and launching it while another stream's queued work
/// uses one of them is a violation unless this stream waits for that work.
/// The caller does the op's data movement itself. 0 on success; 100000 for
/// NULL spans with `n > 0` or a range past the address space; 107000 if a
/// range is not device memory allocated or mapped now; 107017 for an unknown
/// stream.
///
/// # Safety
/// `spans` must be NULL or point to `n` readable values.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclemu_launch(stream: *mut c_void, spans: *const aclemu_span, n: usize) -> crate::aclError {
    // SAFETY: forwarded caller contract.
    emu_entry!({ unsafe { launch_spans(stream, spans, n) } })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlap_detection() {
        let b = |addr, size| Live { block: std::ptr::null_mut(), addr, size };
        assert!(!any_overlap(&[b(0, 10), b(10, 10)]));
        assert!(any_overlap(&[b(0, 11), b(10, 10)]));
        assert!(any_overlap(&[b(100, 8), b(100, 8)]));
        assert!(!any_overlap(&[b(100, 0), b(100, 8)]));
    }

    #[test]
    fn pattern_round_trip_at_any_phase() {
        let mut buf = vec![0u8; 3 * CHUNK + 40];
        let base = buf.as_mut_ptr() as usize;
        for phase in 0..8 {
            let live = Live { block: std::ptr::null_mut(), addr: base + phase, size: 2 * CHUNK + 13 };
            // SAFETY: the block lies inside `buf`.
            unsafe { fill(&live, 3) };
            // SAFETY: as above.
            assert!(unsafe { holds_pattern(&live, 3) });
            // SAFETY: as above.
            assert!(!unsafe { holds_pattern(&live, 4) });
        }
    }
}
