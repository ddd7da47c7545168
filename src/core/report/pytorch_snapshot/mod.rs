//! The allocator's state and memory history in the format of PyTorch's `torch.cuda.memory._snapshot()`;
//! this module is the format alone (`Device::pytorch_snapshot`, in `snapshot`, fills the views below).
//! - A segment is memory backed by the device: a fixed segment whole, or each mapped run of an expandable
//!   range (as PyTorch shows its own), so `total_size` adds up to the reserved bytes minus cached unmapped
//!   pages (and a fixed segment's alignment slack, `backing::fixed`).
//! - `inactive` blocks are free or held for exact-size reuse: either way no user holds them.
//! - `device_traces` has one list per device index up to this device; only its own is filled. An `oom`
//!   entry carries `device_free` instead of `addr`, as PyTorch's does. `frames` are always empty.
//! - `segment_pool_id` and `pool_id` are `(0, pool)`: `(0, 0)` is PyTorch's id of the default pool
//!   (Note [pools]).

mod pickle;
mod value;

pub use pickle::to_pickle;
pub use value::Value;

use super::history::{Action, Event};

/// What a block in a snapshot is doing (in JSON: its name in kebab-case).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BlockSnapshotState {
    /// Allocated to a caller.
    Active,
    /// Free memory kept by the allocator.
    Cached,
    /// Freed by the caller, waiting for other streams' work.
    PendingFree,
}

impl BlockSnapshotState {
    /// The state in PyTorch's words.
    fn name(self) -> &'static str {
        match self {
            BlockSnapshotState::Active => "active_allocated",
            BlockSnapshotState::PendingFree => "active_pending_free",
            BlockSnapshotState::Cached => "inactive",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BlockView {
    pub addr: usize,
    pub size: usize,
    /// Bytes asked for (0 for an inactive block).
    pub requested: usize,
    pub state: BlockSnapshotState,
}

/// One segment as PyTorch shows it: memory backed from `addr` for `size` bytes, tiled by `blocks`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SegmentView {
    pub addr: usize,
    pub size: usize,
    /// "small" or "large".
    pub kind: &'static str,
    pub stream: usize,
    pub pool: u64,
    pub expandable: bool,
    pub blocks: Vec<BlockView>,
}

/// Cuts address-ordered `blocks` at the edges of `runs` (address-ordered, disjoint): for each run, the parts
/// of blocks inside it. Parts outside every run (unmapped pages of free blocks) are dropped.
pub(crate) fn split_into_runs(blocks: &[BlockView], runs: &[(usize, usize)]) -> Vec<Vec<BlockView>> {
    let mut out = Vec::with_capacity(runs.len());
    let mut first = 0;
    for &(start, len) in runs {
        let end = start + len;
        // Blocks wholly below this run are below every later run too.
        first += blocks[first..].iter().take_while(|b| b.addr + b.size <= start).count();
        let parts = blocks[first..].iter().take_while(|b| b.addr < end).map(|b| {
            let (from, to) = (b.addr.max(start), (b.addr + b.size).min(end));
            BlockView { addr: from, size: to - from, ..*b }
        });
        out.push(parts.collect());
    }
    out
}

fn sum(blocks: &[BlockView], pick: impl Fn(&BlockView) -> bool, field: impl Fn(&BlockView) -> usize) -> Value {
    Value::int(blocks.iter().filter(|b| pick(b)).map(field).sum::<usize>())
}

fn segment_value(device: i32, s: &SegmentView) -> Value {
    let blocks = s
        .blocks
        .iter()
        .map(|b| {
            Value::dict([
                ("address", Value::int(b.addr)),
                ("size", Value::int(b.size)),
                ("requested_size", Value::int(b.requested)),
                ("state", Value::str(b.state.name())),
                ("frames", Value::List(Vec::new())),
            ])
        })
        .collect();
    let allocated = |b: &BlockView| b.state == BlockSnapshotState::Active;
    let active = |b: &BlockView| b.state != BlockSnapshotState::Cached;
    Value::dict([
        ("device", Value::int(device)),
        ("address", Value::int(s.addr)),
        ("total_size", Value::int(s.size)),
        ("allocated_size", sum(&s.blocks, allocated, |b| b.size)),
        ("active_size", sum(&s.blocks, active, |b| b.size)),
        ("requested_size", sum(&s.blocks, allocated, |b| b.requested)),
        ("stream", Value::int(s.stream)),
        ("segment_type", Value::str(s.kind)),
        ("segment_pool_id", Value::Tuple(vec![Value::int(0u8), Value::int(s.pool)])),
        ("is_expandable", Value::Bool(s.expandable)),
        ("frames", Value::List(Vec::new())),
        ("blocks", Value::List(blocks)),
    ])
}

fn trace_entry(e: &Event) -> Value {
    let place =
        if e.action == Action::Oom { ("device_free", Value::int(e.device_free)) } else { ("addr", Value::int(e.addr)) };
    Value::dict([
        ("action", Value::str(e.action.name())),
        place,
        ("size", Value::int(e.size)),
        ("stream", Value::int(e.stream)),
        ("pool_id", Value::Tuple(vec![Value::int(0u8), Value::int(e.pool)])),
        ("time_us", Value::int(e.time_us)),
        ("frames", Value::List(Vec::new())),
    ])
}

/// The whole document for `device`.
pub(crate) fn document(device: i32, segments: &[SegmentView], events: &[Event]) -> Value {
    let mut traces: Vec<Value> = (0..device.max(0)).map(|_| Value::List(Vec::new())).collect();
    traces.push(Value::List(events.iter().map(trace_entry).collect()));
    Value::dict([
        ("segments", Value::List(segments.iter().map(|s| segment_value(device, s)).collect())),
        ("device_traces", Value::List(traces)),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use BlockSnapshotState as State;

    fn block(addr: usize, size: usize, requested: usize, state: State) -> BlockView {
        BlockView { addr, size, requested, state }
    }

    #[test]
    fn blocks_are_cut_at_run_edges_and_unbacked_parts_dropped() {
        // [0x0, 0x100) allocated, [0x100, 0x500) free across a hole at
        // [0x200, 0x400), [0x500, 0x600) pending.
        let blocks = [
            block(0x0, 0x100, 0x80, State::Active),
            block(0x100, 0x400, 0, State::Cached),
            block(0x500, 0x100, 0x100, State::PendingFree),
        ];
        let runs = [(0x0, 0x200), (0x400, 0x200)];
        let parts = split_into_runs(&blocks, &runs);
        assert_eq!(
            parts,
            [
                vec![block(0x0, 0x100, 0x80, State::Active), block(0x100, 0x100, 0, State::Cached)],
                vec![block(0x400, 0x100, 0, State::Cached), block(0x500, 0x100, 0x100, State::PendingFree)],
            ]
        );
        for (run, parts) in runs.iter().zip(&parts) {
            assert_eq!(parts.iter().map(|b| b.size).sum::<usize>(), run.1, "blocks tile the run");
        }
    }

    #[test]
    fn segment_sums_and_names() {
        let seg = SegmentView {
            addr: 0x1000,
            size: 0x400,
            kind: "large",
            stream: 7,
            pool: 0,
            expandable: true,
            blocks: vec![
                block(0x1000, 0x200, 0x1f0, State::Active),
                block(0x1200, 0x100, 0x100, State::PendingFree),
                block(0x1300, 0x100, 0, State::Cached),
            ],
        };
        let v = segment_value(2, &seg);
        let int = |k: &str| v.get(k).and_then(Value::as_int).unwrap();
        assert_eq!(int("device"), 2);
        assert_eq!(int("address"), 0x1000);
        assert_eq!(int("total_size"), 0x400);
        assert_eq!(int("allocated_size"), 0x200);
        assert_eq!(int("active_size"), 0x300);
        assert_eq!(int("requested_size"), 0x1f0);
        assert_eq!(int("stream"), 7);
        assert_eq!(v.get("segment_type").and_then(Value::as_str), Some("large"));
        assert_eq!(v.get("is_expandable"), Some(&Value::Bool(true)));
        let states: Vec<_> = v
            .get("blocks")
            .and_then(Value::as_list)
            .unwrap()
            .iter()
            .map(|b| b.get("state").and_then(Value::as_str).unwrap())
            .collect();
        assert_eq!(states, ["active_allocated", "active_pending_free", "inactive"]);
    }

    #[test]
    fn traces_sit_at_the_device_index_and_oom_has_device_free() {
        let ev =
            |action, addr, device_free| Event { action, addr, size: 64, stream: 0, pool: 2, time_us: 5, device_free };
        let doc = document(1, &[], &[ev(Action::Alloc, 0x10, 0), ev(Action::Oom, 0, 999)]);
        let traces = doc.get("device_traces").and_then(Value::as_list).unwrap();
        assert_eq!(traces.len(), 2);
        assert_eq!(traces[0].as_list().map(<[Value]>::len), Some(0));
        let mine = traces[1].as_list().unwrap();
        assert_eq!(mine[0].get("action").and_then(Value::as_str), Some("alloc"));
        assert_eq!(mine[0].get("addr").and_then(Value::as_int), Some(0x10));
        assert_eq!(mine[1].get("action").and_then(Value::as_str), Some("oom"));
        assert_eq!(mine[1].get("device_free").and_then(Value::as_int), Some(999));
        assert_eq!(mine[1].get("addr"), None);
        assert_eq!(mine[1].get("time_us").and_then(Value::as_int), Some(5));
        let pool: Vec<_> = mine[0].get("pool_id").and_then(Value::as_list).unwrap().iter().map(Value::as_int).collect();
        assert_eq!(pool, [Some(0), Some(2)]);
    }
}
