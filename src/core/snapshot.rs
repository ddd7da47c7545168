//! A snapshot of segments and blocks as JSON (an explicitly expensive call).

use super::block::{BlockState, NIL};
use super::state::State;
use std::fmt::Write;

impl State {
    pub fn snapshot_json(&self) -> String {
        let mut out = String::with_capacity(256 + 128 * self.blocks.live());
        let s = self.stats.get();
        let _ = write!(
            out,
            "{{\"device\":{},\"stats\":{{\"allocated_bytes\":{},\"allocated_bytes_peak\":{},\"requested_bytes\":{},\
             \"requested_bytes_peak\":{},\"reserved_bytes\":{},\"reserved_bytes_peak\":{},\"active_blocks\":{},\
             \"segments\":{},\"num_allocs\":{},\"num_frees\":{},\"num_device_mallocs\":{},\"num_device_frees\":{},\
             \"num_maps\":{},\"num_unmaps\":{},\"num_alloc_retries\":{},\"num_ooms\":{},\"num_syncs\":{},\
             \"num_physical_mallocs\":{},\"num_physical_frees\":{},\"largest_free_block\":{},\"pending_free_bytes\":{}}},\"segments\":[",
            self.device,
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
            self.largest_free(),
            self.order.pending_bytes,
        );
        for (i, seg_id) in self.segments.ids().enumerate() {
            let seg = self.segments.get(seg_id);
            let _ = write!(
                out,
                "{}{{\"address\":{},\"size\":{},\"pool\":\"{}\",\"stream\":{},\"expandable\":{},\"mapped_bytes\":{},\"blocks\":[",
                if i > 0 { "," } else { "" },
                seg.base,
                seg.size,
                seg.kind.name(),
                self.streams.stream(seg.stream_slot).0,
                seg.vmm.is_some(),
                seg.vmm.as_ref().map_or(seg.size, |r| r.mapped * r.page_size),
            );
            let mut id = seg.first;
            let mut first = true;
            while id != NIL {
                let b = self.blocks.get(id);
                let state = match b.state {
                    BlockState::Allocated => "active",
                    BlockState::Free | BlockState::Held => "cached",
                    BlockState::Pending => "pending-free",
                };
                let _ = write!(
                    out,
                    "{}{{\"address\":{},\"size\":{},\"requested\":{},\"state\":\"{state}\",\"stream\":{}}}",
                    if first { "" } else { "," },
                    b.addr,
                    b.size,
                    b.requested,
                    self.streams.stream(b.stream_slot).0,
                );
                first = false;
                id = b.next;
            }
            out.push_str("]}");
        }
        out.push_str("]}");
        out
    }
}
