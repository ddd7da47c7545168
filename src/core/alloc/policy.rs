//! Sizing policy: how requests round, which pool serves them, how large a new segment is, and when a free
//! block is split. The defaults are PyTorch's caching-allocator policy (torch_npu's too), which users
//! already reason about; a different policy is a change to this file alone.

use crate::config::{Config, RoundupDivisions};

/// Every block size is a multiple of this, and no block is smaller.
pub const MIN_BLOCK_SIZE: usize = 512;
/// Largest request served from the small pool.
pub const SMALL_SIZE: usize = 1 << 20;
/// Segment size of the small pool.
pub const SMALL_BUFFER: usize = 2 << 20;
/// Requests below this (and above `SMALL_SIZE`) share `LARGE_BUFFER` segments.
pub const MIN_LARGE_ALLOC: usize = 10 << 20;
/// Segment size for mid-sized requests; also the slack an oversize request may waste.
pub const LARGE_BUFFER: usize = 20 << 20;
/// Large segments are rounded up to a multiple of this.
pub const ROUND_LARGE: usize = 2 << 20;
/// Requests at or above this are refused outright: no device has that much.
pub const MAX_REQUEST: usize = 1 << 60;

/// Small blocks and large blocks never share a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PoolKind {
    Small = 0,
    Large = 1,
}

impl PoolKind {
    pub fn name(self) -> &'static str {
        match self {
            PoolKind::Small => "small",
            PoolKind::Large => "large",
        }
    }
}

/// The largest `alignment` a pool may ask for: the device page, which ranges and handles are aligned to.
pub const MAX_POOL_ALIGNMENT: usize = 2 << 20;

/// What a private pool's config asks of its blocks beyond the policy; the default pool's is `Shape::PLAIN`.
/// Invariant: every block size is a multiple of `align`, so a block split off another, or placed after one,
/// starts on the boundary too once its segment or range does. (Two bytes, to fit beside a shard's fields.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// log2 of `align()`.
    pub shift: u8,
    /// Every block is 2 MiB-aligned memory of its own, never cut from a cached piece: a segment or whole
    /// cached block, or whole handles no other block touches (`place_unshared`).
    pub no_split: bool,
}

impl Shape {
    pub const PLAIN: Shape = Shape { shift: MIN_BLOCK_SIZE.trailing_zeros() as u8, no_split: false };

    /// The shape of a pool config's `alignment` (a power of two; 0 for none) and `no_split`.
    pub fn new(alignment: usize, no_split: bool) -> Shape {
        let align = if no_split { MAX_POOL_ALIGNMENT } else { alignment.max(MIN_BLOCK_SIZE) };
        Shape { shift: align.trailing_zeros() as u8, no_split }
    }

    /// Every block starts on this boundary (512 to `MAX_POOL_ALIGNMENT`) and its size is a multiple of it.
    pub fn align(self) -> usize {
        1 << self.shift
    }

    /// The block size a request the policy rounded to `rounded` gets.
    pub fn round(self, rounded: usize) -> usize {
        rounded.next_multiple_of(self.align())
    }
}

/// The policy an allocator was created with (immutable).
#[derive(Debug, Clone)]
pub struct Policy {
    divisions: RoundupDivisions,
    /// Blocks at least this large are never split (`max_split_size_mb`).
    pub max_split_size: usize,
}

impl Policy {
    pub fn new(config: &Config) -> Self {
        Policy {
            divisions: config.roundup_power2_divisions.clone(),
            max_split_size: config.max_split_size.unwrap_or(usize::MAX),
        }
    }

    /// The block size a request of `size` bytes gets (`size` is 1..MAX_REQUEST).
    #[inline]
    pub fn round(&self, size: usize) -> usize {
        let rounded = if size <= MIN_BLOCK_SIZE { MIN_BLOCK_SIZE } else { self.divisions.round(size) };
        rounded.div_ceil(MIN_BLOCK_SIZE) * MIN_BLOCK_SIZE
    }

    #[inline]
    pub fn pool_for(&self, rounded: usize) -> PoolKind {
        if rounded <= SMALL_SIZE {
            PoolKind::Small
        } else {
            PoolKind::Large
        }
    }

    /// Size of a new fixed segment that will serve a block of `rounded` bytes.
    pub fn segment_size(&self, rounded: usize) -> usize {
        if rounded <= SMALL_SIZE {
            SMALL_BUFFER
        } else if rounded < MIN_LARGE_ALLOC {
            LARGE_BUFFER
        } else {
            rounded.div_ceil(ROUND_LARGE) * ROUND_LARGE
        }
    }

    /// Whether a free block of `block` bytes may serve `rounded` under the no-split rule: oversize blocks go
    /// only to requests that would waste less than `LARGE_BUFFER` of them.
    #[inline]
    pub fn may_use(&self, block: usize, rounded: usize) -> bool {
        if self.max_split_size == usize::MAX {
            return true;
        }
        if rounded < self.max_split_size {
            block < self.max_split_size
        } else {
            block < rounded.saturating_add(LARGE_BUFFER)
        }
    }

    /// Whether a block of `block` bytes handed to a request of `rounded` bytes is split.
    #[inline]
    pub fn should_split(&self, kind: PoolKind, block: usize, rounded: usize) -> bool {
        let remaining = block - rounded;
        match kind {
            PoolKind::Small => remaining >= MIN_BLOCK_SIZE,
            PoolKind::Large => rounded < self.max_split_size && remaining > SMALL_SIZE,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Policy {
        Policy::new(&Config::default())
    }

    #[test]
    fn rounds_to_512_multiples() {
        let p = policy();
        assert_eq!(p.round(1), 512);
        assert_eq!(p.round(512), 512);
        assert_eq!(p.round(513), 1024);
        assert_eq!(p.round(3 << 20), 3 << 20);
    }

    #[test]
    fn pools_and_segment_sizes() {
        let p = policy();
        assert_eq!(p.pool_for(SMALL_SIZE), PoolKind::Small);
        assert_eq!(p.pool_for(SMALL_SIZE + 512), PoolKind::Large);
        assert_eq!(p.segment_size(512), SMALL_BUFFER);
        assert_eq!(p.segment_size(SMALL_SIZE + 512), LARGE_BUFFER);
        assert_eq!(p.segment_size(MIN_LARGE_ALLOC - 512), LARGE_BUFFER);
        assert_eq!(p.segment_size(MIN_LARGE_ALLOC + 512), MIN_LARGE_ALLOC + ROUND_LARGE);
    }

    #[test]
    fn split_rules() {
        let p = policy();
        assert!(p.should_split(PoolKind::Small, 2048, 1536));
        assert!(!p.should_split(PoolKind::Small, 2048, 2048));
        assert!(!p.should_split(PoolKind::Large, 3 << 20, 2 << 20));
        assert!(p.should_split(PoolKind::Large, (3 << 20) + 512, 2 << 20));
    }

    #[test]
    fn oversize_rule() {
        let mut p = policy();
        assert!(p.may_use(1 << 40, 512));
        p.max_split_size = 64 << 20;
        assert!(!p.may_use(64 << 20, 32 << 20));
        assert!(p.may_use(63 << 20, 32 << 20));
        assert!(p.may_use(80 << 20, 64 << 20));
        assert!(!p.may_use(84 << 20, 64 << 20));
        assert!(!p.should_split(PoolKind::Large, 128 << 20, 64 << 20));
    }
}
