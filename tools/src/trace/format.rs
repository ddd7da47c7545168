//! The events of an acl-trace v1 file (the format is defined where the allocator writes it: `npualloc::trace`) and
//! the summary a replay needs.

pub use npualloc::trace::HEADER;
use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Alloc { id: u64, bytes: u64, stream: u32 },
    Free { id: u64 },
    Use { id: u64, stream: u32 },
    Wait { stream: u32 },
}

impl Op {
    /// The op letter that starts the line.
    pub fn letter(&self) -> char {
        match self {
            Op::Alloc { .. } => 'a',
            Op::Free { .. } => 'f',
            Op::Use { .. } => 'u',
            Op::Wait { .. } => 'w',
        }
    }
}

/// The line for this event, without the newline.
impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Op::Alloc { id, bytes, stream } => write!(f, "a {id} {bytes} {stream}"),
            Op::Free { id } => write!(f, "f {id}"),
            Op::Use { id, stream } => write!(f, "u {id} {stream}"),
            Op::Wait { stream } => write!(f, "w {stream}"),
        }
    }
}

/// A parsed trace: its comment lines (without `#`) and its events.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trace {
    pub comments: Vec<String>,
    pub ops: Vec<Op>,
}

impl Trace {
    /// The `# source:` comment, if any.
    pub fn source(&self) -> Option<&str> {
        self.comments.iter().find_map(|c| c.trim_start().strip_prefix("source:")).map(str::trim)
    }

    /// The largest sum of live requested bytes at any point.
    pub fn peak_requested(&self) -> u64 {
        self.requested_series().into_iter().max().unwrap_or(0)
    }

    /// Live requested bytes after each event (one entry per op).
    pub fn requested_series(&self) -> Vec<u64> {
        let mut live = std::collections::HashMap::new();
        // Wide: a trace built by hand may hold more than 2^64 bytes live.
        let mut sum = 0u128;
        let mut out = Vec::with_capacity(self.ops.len());
        for op in &self.ops {
            match *op {
                Op::Alloc { id, bytes, .. } => {
                    live.insert(id, bytes);
                    sum += bytes as u128;
                }
                Op::Free { id } => sum -= live.remove(&id).unwrap_or(0) as u128,
                Op::Use { .. } | Op::Wait { .. } => {}
            }
            out.push(u64::try_from(sum).unwrap_or(u64::MAX));
        }
        out
    }

    /// How many stream numbers the trace uses (highest number + 1).
    pub fn stream_count(&self) -> usize {
        self.ops
            .iter()
            .filter_map(|op| match *op {
                Op::Alloc { stream, .. } | Op::Use { stream, .. } | Op::Wait { stream } => Some(stream as usize + 1),
                Op::Free { .. } => None,
            })
            .max()
            .unwrap_or(0)
    }

    /// The whole trace as acl-trace v1 text (header first, then comments).
    pub fn to_text(&self) -> String {
        let mut out = String::with_capacity(16 * self.ops.len() + 64);
        out.push_str(HEADER);
        out.push('\n');
        for c in self.comments.iter().filter(|c| format!("#{c}") != HEADER) {
            out.push('#');
            out.push_str(c);
            out.push('\n');
        }
        for op in &self.ops {
            out.push_str(&op.to_string());
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_peak() {
        let t = Trace {
            comments: vec![],
            ops: vec![
                Op::Alloc { id: 0, bytes: 100, stream: 0 },
                Op::Alloc { id: 1, bytes: 50, stream: 1 },
                Op::Use { id: 0, stream: 1 },
                Op::Free { id: 0 },
                Op::Alloc { id: 2, bytes: 120, stream: 0 },
                Op::Wait { stream: 1 },
            ],
        };
        assert_eq!(t.ops[0].to_string(), "a 0 100 0");
        assert_eq!(t.ops[2].to_string(), "u 0 1");
        assert_eq!(t.ops[3].to_string(), "f 0");
        assert_eq!(t.ops[5].to_string(), "w 1");
        assert_eq!(t.requested_series(), vec![100, 150, 150, 50, 170, 170]);
        assert_eq!(t.peak_requested(), 170);
        assert_eq!(t.stream_count(), 2);
        assert!(t.to_text().starts_with("# acl-trace v1\na 0 100 0\n"));
    }
}
