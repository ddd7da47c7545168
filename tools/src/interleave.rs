//! Interleaves acl-trace v1 traces into one, as if their programs shared a
//! device (the `npualloc-interleave` command; `traces/bench/serve-bert-gpt2`
//! was made with it from `bert-encode-varbatch` and `gpt2-generate`).
//!
//! - The trace with the most events runs once. Each other trace is repeated
//!   as many times as its events still fit in the longest's count (at least
//!   once); what it allocates and never frees (a model's weights) is
//!   allocated in its first repetition only and shared by the later ones.
//! - Trace k's streams follow the previous traces' streams: with one stream
//!   each, trace k runs on stream k.
//! - Events are merged in proportion to each trace's progress: the next event
//!   comes from the trace that has done the smallest share of its (repeated)
//!   events, compared exactly, the earlier trace on a tie. So all of them
//!   start together and end together.
//! - Ids are numbered afresh from 0 in the order of the merged allocations.

use crate::trace::{Op, Trace};
use std::collections::{HashMap, HashSet};

/// One input trace and the name its `# source:` line gives it.
pub struct Input<'a> {
    pub name: &'a str,
    pub trace: &'a Trace,
}

/// A trace's events over its repetitions.
struct Cursor<'a> {
    ops: &'a [Op],
    /// Allocated and never freed: allocated in the first repetition only.
    once: HashSet<u64>,
    reps: u64,
    /// Events over all repetitions.
    len: u64,
    rep: u64,
    pos: usize,
    done: u64,
    /// Added to each stream number.
    stream_base: u32,
}

impl<'a> Cursor<'a> {
    fn new(trace: &'a Trace, longest: u64, stream_base: u32) -> Self {
        let freed: HashSet<u64> =
            trace.ops.iter().filter_map(|op| if let Op::Free { id } = *op { Some(id) } else { None }).collect();
        let once: HashSet<u64> = trace
            .ops
            .iter()
            .filter_map(|op| match *op {
                Op::Alloc { id, .. } if !freed.contains(&id) => Some(id),
                _ => None,
            })
            .collect();
        let first = trace.ops.len() as u64;
        let later = first - once.len() as u64;
        let reps = if later == 0 || first >= longest { 1 } else { 1 + (longest - first) / later };
        Cursor { ops: &trace.ops, once, reps, len: first + (reps - 1) * later, rep: 0, pos: 0, done: 0, stream_base }
    }

    /// The next event and the repetition its ids belong to.
    fn next(&mut self) -> Option<(Op, u64)> {
        loop {
            if self.pos == self.ops.len() {
                self.rep += 1;
                self.pos = 0;
            }
            if self.rep == self.reps {
                return None;
            }
            let op = self.ops[self.pos];
            self.pos += 1;
            let id = match op {
                Op::Alloc { id, .. } | Op::Free { id } | Op::Use { id, .. } => Some(id),
                Op::Wait { .. } => None,
            };
            let shared = id.is_some_and(|id| self.once.contains(&id));
            if shared && self.rep > 0 && matches!(op, Op::Alloc { .. }) {
                continue; // allocated once, in the first repetition
            }
            self.done += 1;
            return Some((op, if shared { 0 } else { self.rep }));
        }
    }
}

/// The interleaving of `inputs` (see the module comment).
pub fn interleave(inputs: &[Input<'_>]) -> Trace {
    let longest = inputs.iter().map(|i| i.trace.ops.len() as u64).max().unwrap_or(0);
    let mut base = 0u32;
    let mut cursors: Vec<Cursor<'_>> = inputs
        .iter()
        .map(|i| {
            let c = Cursor::new(i.trace, longest, base);
            base += (i.trace.stream_count() as u32).max(1);
            c
        })
        .collect();
    let one_stream_each = inputs.iter().all(|i| i.trace.stream_count() <= 1);
    let names: Vec<&str> = inputs.iter().map(|i| i.name).collect();
    let streams = if one_stream_each {
        "trace k on stream k"
    } else {
        "each trace's streams numbered after the previous trace's"
    };
    let mut out = Trace {
        comments: vec![format!(" source: npualloc-interleave of {} ({streams})", names.join(", "))],
        ops: Vec::with_capacity(cursors.iter().map(|c| c.len as usize).sum()),
    };
    let mut ids: HashMap<(usize, u64, u64), u64> = HashMap::new();
    let mut next_id = 0u64;
    // The trace with the smallest share done: done_k / len_k < done_j / len_j
    // exactly as done_k * len_j < done_j * len_k (both below 2^64, so the
    // product fits u128).
    while let Some(k) = (0..cursors.len()).filter(|&k| cursors[k].done < cursors[k].len).reduce(|best, k| {
        let (b, c) = (&cursors[best], &cursors[k]);
        if (c.done as u128) * (b.len as u128) < (b.done as u128) * (c.len as u128) {
            k
        } else {
            best
        }
    }) {
        let c = &mut cursors[k];
        let Some((op, rep)) = c.next() else { break };
        let stream = |s: u32| s + c.stream_base;
        let id = |id: u64| ids.get(&(k, rep, id)).copied().expect("the parser checked every id is live");
        out.ops.push(match op {
            Op::Alloc { id: old, bytes, stream: s } => {
                ids.insert((k, rep, old), next_id);
                next_id += 1;
                Op::Alloc { id: next_id - 1, bytes, stream: stream(s) }
            }
            Op::Free { id: old } => Op::Free { id: id(old) },
            Op::Use { id: old, stream: s } => Op::Use { id: id(old), stream: stream(s) },
            Op::Wait { stream: s } => Op::Wait { stream: stream(s) },
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::parse_str;

    fn trace(text: &str) -> Trace {
        parse_str(&format!("# acl-trace v1\n{text}"), "test").unwrap()
    }

    fn lines(t: &Trace) -> Vec<String> {
        t.ops.iter().map(Op::to_string).collect()
    }

    #[test]
    fn the_shorter_repeats_without_its_weights_and_both_end_together() {
        // 2 events a repetition after the first (weights 0 once); 8 events long.
        let short = trace("a 0 100 0\na 1 10 0\nf 1\n");
        let long = trace("a 0 1 0\nf 0\na 1 2 0\nf 1\na 2 3 0\nf 2\na 3 4 0\nf 3\n");
        let t = interleave(&[Input { name: "s", trace: &short }, Input { name: "l", trace: &long }]);
        // 3 + 2 + 2 = 7 <= 8 events, a fourth repetition would make 9.
        assert_eq!(
            lines(&t),
            [
                "a 0 100 0",
                "a 1 1 1",
                "f 1",
                "a 2 10 0",
                "a 3 2 1",
                "f 2",
                "f 3",
                "a 4 10 0",
                "a 5 3 1",
                "f 4",
                "f 5",
                "a 6 10 0",
                "a 7 4 1",
                "f 6",
                "f 7"
            ]
        );
        assert_eq!(t.comments, [" source: npualloc-interleave of s, l (trace k on stream k)"]);
        // The weights stay live; every other allocation is freed.
        assert_eq!(t.peak_requested(), 100 + 10 + 4);
        assert_eq!(*t.requested_series().last().unwrap(), 100);
    }

    #[test]
    fn uses_and_waits_follow_their_trace_and_streams_are_numbered_after_the_previous_traces() {
        let a = trace("a 0 8 1\nu 0 0\nw 1\nf 0\n");
        let b = trace("a 5 4 0\nu 5 1\nf 5\nw 0\n");
        let t = interleave(&[Input { name: "a", trace: &a }, Input { name: "b", trace: &b }]);
        assert_eq!(lines(&t), ["a 0 8 1", "a 1 4 2", "u 0 0", "u 1 3", "w 1", "f 1", "f 0", "w 2"]);
        assert!(t.comments[0].ends_with("(each trace's streams numbered after the previous trace's)"));
        // What the replay reads back is a valid trace.
        assert_eq!(parse_str(&t.to_text(), "out").unwrap().ops, t.ops);
    }

    #[test]
    fn a_trace_of_weights_only_runs_once_and_uses_of_weights_repeat() {
        let weights = trace("a 0 64 0\n");
        let reused = trace("a 0 64 0\na 1 8 0\nu 0 1\nf 1\n");
        let long = trace("a 0 1 0\nf 0\na 1 1 0\nf 1\na 2 1 0\nf 2\na 3 1 0\nf 3\na 4 1 0\nf 4\n");
        let t = interleave(&[
            Input { name: "w", trace: &weights },
            Input { name: "r", trace: &reused },
            Input { name: "l", trace: &long },
        ]);
        let allocs =
            |stream: u32| t.ops.iter().filter(|op| matches!(op, Op::Alloc { stream: s, .. } if *s == stream)).count();
        assert_eq!(allocs(0), 1, "weights alone: one repetition");
        // r: 4 events, then 3 a repetition: 4 + 3 + 3 = 10 <= 10.
        assert_eq!(allocs(1), 1 + 3, "r's weights once, its other allocation each repetition");
        let uses: Vec<u64> =
            t.ops.iter().filter_map(|op| if let Op::Use { id, .. } = op { Some(*id) } else { None }).collect();
        assert_eq!(uses.len(), 3);
        assert!(uses.iter().all(|&id| id == uses[0]), "every repetition uses the one weights block: {uses:?}");
        assert_eq!(t.ops.len(), 1 + 10 + 10);
    }
}
