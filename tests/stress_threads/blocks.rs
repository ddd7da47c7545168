//! Blocks with a pattern unique to each, and the seeded generator that
//! picks the threads' operations.

/// xorshift64*: a fixed seed per thread keeps the operation mix reproducible
/// (the interleaving is up to the scheduler).
pub(crate) struct Rng(pub(crate) u64);
impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// Log-uniform in [lo, hi].
    pub(crate) fn log_uniform(&mut self, lo: usize, hi: usize) -> usize {
        let (l, h) = ((lo as f64).ln(), (hi as f64).ln());
        let u = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        ((l + u * (h - l)).exp() as usize).clamp(lo, hi)
    }
}

/// A live block and the 64-bit tag its bytes repeat (unique per block).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Block {
    pub(crate) ptr: usize,
    pub(crate) len: usize,
    pub(crate) tag: u64,
}

pub(crate) const CHUNK: usize = 4096;

/// CHUNK bytes of `tag` repeated; blocks are 512-byte aligned, so the
/// pattern lines up with the block start.
fn pattern(tag: u64) -> Vec<u8> {
    tag.to_le_bytes().iter().copied().cycle().take(CHUNK).collect()
}

pub(crate) fn fill(ptr: usize, len: usize, tag: u64) {
    let chunk = pattern(tag);
    for off in (0..len).step_by(CHUNK) {
        let n = CHUNK.min(len - off);
        // SAFETY: a live block (or host buffer) of at least len bytes.
        unsafe { std::ptr::copy_nonoverlapping(chunk.as_ptr(), (ptr + off) as *mut u8, n) };
    }
}

/// Every byte checked, a chunk at a time (memcmp: fast in debug builds too).
pub(crate) fn holds(ptr: usize, len: usize, tag: u64) -> bool {
    let chunk = pattern(tag);
    // SAFETY: as in `fill`.
    let bytes = unsafe { std::slice::from_raw_parts(ptr as *const u8, len) };
    bytes.chunks(CHUNK).all(|c| c == &chunk[..c.len()])
}
