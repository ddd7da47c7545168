//! A snapshot of segments and blocks as JSON (an explicitly expensive call:
//! it locks each shard in turn).

use super::backing::Backing;
use super::block::{BlockState, NIL};
use super::device::Device;
use std::fmt::Write;

impl<B: Backing> Device<B> {
    pub fn snapshot_json(&self) -> crate::error::Result<String> {
        let s = self.stats()?;
        let mut out = String::with_capacity(1024);
        let _ = write!(
            out,
            "{{\"device\":{},\"stats\":{{\"allocated_bytes\":{},\"allocated_bytes_peak\":{},\"requested_bytes\":{},\
             \"requested_bytes_peak\":{},\"reserved_bytes\":{},\"reserved_bytes_peak\":{},\"active_blocks\":{},\
             \"segments\":{},\"num_allocs\":{},\"num_frees\":{},\"num_device_mallocs\":{},\"num_device_frees\":{},\
             \"num_maps\":{},\"num_unmaps\":{},\"num_alloc_retries\":{},\"num_ooms\":{},\"num_syncs\":{},\
             \"num_physical_mallocs\":{},\"num_physical_frees\":{},\"largest_free_block\":{},\"pending_free_bytes\":{}}},\"segments\":[",
            self.sh.device,
            s.allocated_bytes,
            s.allocated_bytes_peak,
            s.requested_bytes,
            s.requested_bytes_peak,
            s.reserved_bytes,
            s.reserved_bytes_peak,
            s.active_blocks,
            s.segments,
            s.num_allocs,
            s.num_frees,
            s.num_device_mallocs,
            s.num_device_frees,
            s.num_maps,
            s.num_unmaps,
            s.num_alloc_retries,
            s.num_ooms,
            s.num_syncs,
            s.num_physical_mallocs,
            s.num_physical_frees,
            s.largest_free_block,
            self.pending_bytes(),
        );
        let mut first_segment = true;
        for shard in self.streams.shards() {
            let pool = shard.lock_anyway();
            let stream = pool.stream().0;
            for seg_id in pool.segments.ids() {
                let seg = pool.segments.get(seg_id);
                let (expandable, mapped) = B::describe(seg);
                let _ = write!(
                    out,
                    "{}{{\"address\":{},\"size\":{},\"pool\":\"{}\",\"stream\":{stream},\"expandable\":{expandable},\"mapped_bytes\":{mapped},\"blocks\":[",
                    if first_segment { "" } else { "," },
                    seg.base,
                    seg.size,
                    pool.kind.name(),
                );
                first_segment = false;
                let mut id = seg.first;
                let mut first = true;
                while id != NIL {
                    let b = pool.blocks.get(id);
                    let state = match b.state {
                        BlockState::Allocated => "active",
                        BlockState::Free | BlockState::Held | BlockState::Reclaiming => "cached",
                        BlockState::Pending => "pending-free",
                    };
                    let _ = write!(
                        out,
                        "{}{{\"address\":{},\"size\":{},\"requested\":{},\"state\":\"{state}\",\"stream\":{stream}}}",
                        if first { "" } else { "," },
                        b.addr,
                        b.size,
                        b.requested,
                    );
                    first = false;
                    id = b.next;
                }
                out.push_str("]}");
            }
        }
        out.push_str("]}");
        Ok(out)
    }
}
