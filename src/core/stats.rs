//! Statistics, with exactly one writer: the allocator state calls these
//! methods at its transitions (block allocate/free, segment add/remove, page
//! obtain/map/unmap/free, sync, retry, OOM) and nothing else touches the
//! counters.

/// Counters in PyTorch's `memory_stats()` vocabulary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub allocated_bytes: u64,
    pub allocated_bytes_peak: u64,
    pub requested_bytes: u64,
    pub requested_bytes_peak: u64,
    pub reserved_bytes: u64,
    pub reserved_bytes_peak: u64,
    pub active_blocks: u64,
    pub segments: u64,
    pub num_allocs: u64,
    pub num_frees: u64,
    pub num_device_mallocs: u64,
    pub num_device_frees: u64,
    pub num_maps: u64,
    pub num_unmaps: u64,
    pub num_alloc_retries: u64,
    pub num_ooms: u64,
    pub num_syncs: u64,
    pub num_physical_mallocs: u64,
    pub num_physical_frees: u64,
    /// Filled on read (not a counter).
    pub largest_free_block: u64,
}

#[derive(Debug, Default)]
pub struct StatsRecorder {
    s: Stats,
}

impl StatsRecorder {
    #[inline]
    pub fn block_allocated(&mut self, size: usize, requested: usize) {
        let s = &mut self.s;
        s.allocated_bytes += size as u64;
        s.requested_bytes += requested as u64;
        s.active_blocks += 1;
        s.num_allocs += 1;
        s.allocated_bytes_peak = s.allocated_bytes_peak.max(s.allocated_bytes);
        s.requested_bytes_peak = s.requested_bytes_peak.max(s.requested_bytes);
    }

    #[inline]
    pub fn block_freed(&mut self, size: usize, requested: usize) {
        let s = &mut self.s;
        s.allocated_bytes -= size as u64;
        s.requested_bytes -= requested as u64;
        s.active_blocks -= 1;
        s.num_frees += 1;
    }

    /// A fixed segment obtained with `aclrtMalloc`.
    pub fn segment_added(&mut self, size: usize) {
        let s = &mut self.s;
        s.reserved_bytes += size as u64;
        s.reserved_bytes_peak = s.reserved_bytes_peak.max(s.reserved_bytes);
        s.segments += 1;
        s.num_device_mallocs += 1;
    }

    /// A fixed segment returned with `aclrtFree`.
    pub fn segment_removed(&mut self, size: usize) {
        let s = &mut self.s;
        s.reserved_bytes -= size as u64;
        s.segments -= 1;
        s.num_device_frees += 1;
    }

    /// An expandable segment (address range) was created; it holds no memory yet.
    pub fn range_added(&mut self) {
        self.s.segments += 1;
    }

    pub fn range_removed(&mut self) {
        self.s.segments -= 1;
    }

    /// A physical page was obtained: it is reserved until freed.
    pub fn physical_allocated(&mut self, size: usize) {
        let s = &mut self.s;
        s.reserved_bytes += size as u64;
        s.reserved_bytes_peak = s.reserved_bytes_peak.max(s.reserved_bytes);
        s.num_physical_mallocs += 1;
    }

    pub fn physical_freed(&mut self, size: usize) {
        self.s.reserved_bytes -= size as u64;
        self.s.num_physical_frees += 1;
    }

    pub fn page_mapped(&mut self) {
        self.s.num_maps += 1;
    }

    pub fn page_unmapped(&mut self) {
        self.s.num_unmaps += 1;
    }

    pub fn synced(&mut self) {
        self.s.num_syncs += 1;
    }

    pub fn retried(&mut self) {
        self.s.num_alloc_retries += 1;
    }

    pub fn oom(&mut self) {
        self.s.num_ooms += 1;
    }

    pub fn reset_peaks(&mut self) {
        let s = &mut self.s;
        s.allocated_bytes_peak = s.allocated_bytes;
        s.requested_bytes_peak = s.requested_bytes;
        s.reserved_bytes_peak = s.reserved_bytes;
    }

    pub fn get(&self) -> &Stats {
        &self.s
    }
}
