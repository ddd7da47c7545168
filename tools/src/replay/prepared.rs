//! A parsed trace turned into what the replay loop needs: dense slots
//! instead of ids, so the timed loop indexes a vector and never hashes.

use crate::trace::{Op, Trace};
use std::collections::HashMap;

/// One event with its id replaced by a slot (the allocation's ordinal).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Alloc { slot: u32, bytes: usize, stream: u32 },
    Free { slot: u32 },
    Use { slot: u32, stream: u32 },
    Wait { stream: u32 },
}

/// A trace ready to replay any number of times.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The file name, for reports.
    pub name: String,
    pub steps: Vec<Step>,
    /// Number of allocations (slots).
    pub slots: usize,
    /// Number of trace streams.
    pub streams: usize,
    /// Live requested bytes after each step.
    pub requested: Vec<u64>,
    pub peak_requested: u64,
}

impl Prepared {
    pub fn new(name: &str, trace: &Trace) -> Prepared {
        let mut slot_of: HashMap<u64, u32> = HashMap::new();
        let mut steps = Vec::with_capacity(trace.ops.len());
        for op in &trace.ops {
            // The parser guarantees every f/u names a live id.
            let step = match *op {
                Op::Alloc { id, bytes, stream } => {
                    let slot = slot_of.len() as u32;
                    slot_of.insert(id, slot);
                    Step::Alloc { slot, bytes: bytes as usize, stream }
                }
                Op::Free { id } => Step::Free { slot: slot_of[&id] },
                Op::Use { id, stream } => Step::Use { slot: slot_of[&id], stream },
                Op::Wait { stream } => Step::Wait { stream },
            };
            steps.push(step);
        }
        let requested = trace.requested_series();
        Prepared {
            name: name.to_string(),
            slots: slot_of.len(),
            streams: trace.stream_count().max(1),
            peak_requested: requested.iter().copied().max().unwrap_or(0),
            requested,
            steps,
        }
    }
}
