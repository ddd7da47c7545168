//! README.md is for a first-time user and BENCHMARKS.md is a report: each
//! stays within 300 lines (longer material goes to python/README.md and
//! docs/).

const LIMIT: usize = 300;

#[test]
fn readme_and_benchmarks_stay_within_their_length() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut over = Vec::new();
    for name in ["README.md", "BENCHMARKS.md"] {
        let text = std::fs::read_to_string(root.join(name)).unwrap_or_else(|e| panic!("read {name}: {e}"));
        let lines = text.lines().count();
        if lines > LIMIT {
            over.push(format!("{name} has {lines} lines, over {LIMIT}"));
        }
    }
    assert!(over.is_empty(), "{}", over.join("; "));
}
