//! Hostile input for the trace parser (`npualloc_tools::trace`): arbitrary bytes
//! and near-miss trace text never make it panic; every rejection of text
//! names the 1-based line of the first problem, and the lines before it are
//! a valid trace; what it accepts prints back to itself.

use npualloc_tools::trace::{parse_file, parse_reader, parse_str, ParseError};
use proptest::prelude::*;

/// The number of lines `read_line` sees in `bytes` (a last line without "\n" counts).
fn line_count(bytes: &[u8]) -> usize {
    bytes.split_inclusive(|&b| b == b'\n').count()
}

/// Checks what the parser said about `bytes`; returns the rejected line, if any.
fn check_outcome(
    bytes: &[u8],
    result: Result<npualloc_tools::trace::Trace, ParseError>,
) -> Result<Option<usize>, TestCaseError> {
    match result {
        Ok(trace) => {
            let again =
                parse_str(&trace.to_text(), "again").map_err(|e| TestCaseError::fail(format!("re-parse: {e}")))?;
            prop_assert_eq!(again.ops, trace.ops, "printed trace does not parse back to itself");
            Ok(None)
        }
        Err(e) => {
            let shown = e.to_string();
            let Some(line) = e.line() else {
                return Err(TestCaseError::fail(format!("an error without a line number: {shown}")));
            };
            prop_assert!(line >= 1 && line <= line_count(bytes), "line {} of {}: {}", line, line_count(bytes), shown);
            let prefix = format!("fuzz:{line}: ");
            prop_assert!(shown.starts_with(&prefix), "message does not name the line: {}", shown);
            Ok(Some(line))
        }
    }
}

/// Bytes that are mostly trace-shaped: op letters, digits, spaces, newlines,
/// '#', signs, and now and then anything at all (including invalid UTF-8).
fn trace_ish_bytes() -> impl Strategy<Value = Vec<u8>> {
    let byte = prop_oneof![
        4 => prop::sample::select(b"afuw0123456789 \n#-+\r\t".to_vec()),
        1 => any::<u8>(),
    ];
    prop::collection::vec(byte, 0..400)
}

/// Whole lines from the grammar plus near misses (wrong arity, big numbers,
/// reused and unknown ids, stray tokens).
fn trace_ish_line() -> impl Strategy<Value = String> {
    let id = prop_oneof![0u64..6, Just(u64::MAX)];
    let num = prop_oneof![
        (0u64..5000).prop_map(|n| n.to_string()),
        Just("18446744073709551616".to_string()),
        Just("65536".to_string()),
        Just("-1".to_string()),
        Just("+3".to_string()),
        Just("1e3".to_string()),
        Just("".to_string()),
    ];
    prop_oneof![
        (id.clone(), num.clone(), 0u32..4).prop_map(|(i, b, s)| format!("a {i} {b} {s}")),
        id.clone().prop_map(|i| format!("f {i}")),
        (id, num.clone()).prop_map(|(i, s)| format!("u {i} {s}")),
        num.clone().prop_map(|s| format!("w {s}")),
        Just("# acl-trace v1".to_string()),
        Just("# acl-trace v2".to_string()),
        Just("".to_string()),
        (prop::sample::select(vec!["a", "f", "u", "w", "x", "aa", "A"]), prop::collection::vec(num, 0..5))
            .prop_map(|(op, rest)| format!("{op} {}", rest.join(" "))),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic_and_errors_name_the_line(bytes in trace_ish_bytes()) {
        check_outcome(&bytes, parse_reader(&bytes[..], "fuzz"))?;
    }

    #[test]
    fn fully_random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        check_outcome(&bytes, parse_reader(&bytes[..], "fuzz"))?;
    }

    #[test]
    fn near_miss_traces_fail_at_the_first_bad_line(lines in prop::collection::vec(trace_ish_line(), 0..40)) {
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        if let Some(bad) = check_outcome(text.as_bytes(), parse_str(&text, "fuzz"))? {
            // Everything before the reported line is a valid trace on its own.
            let before: String = lines[..bad - 1].iter().map(|l| format!("{l}\n")).collect();
            prop_assert!(parse_str(&before, "prefix").is_ok(), "line {} was reported, but an earlier line is bad", bad);
        }
    }
}

#[test]
fn corrupt_gzip_is_an_error_not_a_panic() {
    use std::io::Write;
    let dir = std::env::temp_dir().join(format!("npualloc-trace-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(b"# acl-trace v1\na 0 10 0\nf 0\n").unwrap();
    let good = gz.finish().unwrap();
    let mut tried = 0;
    for cut in [3, 10, good.len() / 2, good.len() - 1] {
        for flip in [None, Some(cut.saturating_sub(1))] {
            let mut bytes = good[..cut].to_vec();
            if let Some(i) = flip {
                bytes[i] ^= 0x5a;
            }
            let path = dir.join(format!("bad-{cut}-{}.trace.gz", flip.is_some()));
            std::fs::write(&path, &bytes).unwrap();
            // Decoding problems are I/O errors naming the file; either way, no panic.
            if let Err(e) = parse_file(&path) {
                assert!(e.to_string().contains("bad-"), "{e}");
            }
            tried += 1;
        }
    }
    assert_eq!(tried, 8);
    std::fs::remove_dir_all(&dir).unwrap();
}
