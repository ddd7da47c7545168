//! Reads acl-trace v1 text (plain or gzip) and checks it line by line ([`LineError`]); the first problem stops
//! the read with its 1-based line number. A missing `# acl-trace v1` header is accepted; a header naming another
//! version is not, wherever it stands.

use super::format::{Op, Trace, HEADER};
use std::collections::HashSet;
use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::Path;

/// What is wrong with one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LineError {
    #[error("unknown op '{0}' (expected a, f, u or w)")]
    UnknownOp(String),
    #[error("'{op}' takes {expected} fields after the op, found {found}")]
    FieldCount { op: char, expected: usize, found: usize },
    #[error("{field} '{value}' is not a non-negative integer")]
    NotANumber { field: &'static str, value: String },
    #[error("allocation {0} has size 0")]
    ZeroSize(u64),
    #[error("allocation {id} asks for {bytes} bytes, more than any device holds (at most {MAX_BYTES})")]
    SizeTooLarge { id: u64, bytes: u64 },
    #[error("'{op}' names id {id}, which is not live")]
    UnknownId { op: char, id: u64 },
    #[error("id {0} is allocated a second time (ids are never reused)")]
    ReusedId(u64),
    #[error("stream {0} is too large (streams are small integers)")]
    StreamTooLarge(u64),
    #[error("unsupported format '{0}' (expected '{HEADER}')")]
    Version(String),
    #[error("the line is not UTF-8 text (invalid byte at column {column})")]
    NotUtf8 { column: usize },
}

/// Why a trace could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// The file could not be opened (missing, a directory, no permission).
    #[error("cannot open {name}: {source}")]
    Open { name: String, source: io::Error },
    /// Reading failed part-way (an I/O error, or a corrupt gzip stream).
    #[error("cannot read {name}: {source}")]
    Io { name: String, source: io::Error },
    #[error("{name}:{line}: {error}")]
    Line { name: String, line: usize, error: LineError },
}

impl ParseError {
    /// The 1-based line number of a malformed line.
    pub fn line(&self) -> Option<usize> {
        match self {
            ParseError::Line { line, .. } => Some(*line),
            ParseError::Open { .. } | ParseError::Io { .. } => None,
        }
    }

    /// The problem with the line, if it was a line.
    pub fn line_error(&self) -> Option<&LineError> {
        match self {
            ParseError::Line { error, .. } => Some(error),
            ParseError::Open { .. } | ParseError::Io { .. } => None,
        }
    }

    /// True when the file could not be opened at all (not a read error or a malformed line).
    pub fn is_open_error(&self) -> bool {
        matches!(self, ParseError::Open { .. })
    }
}

/// Bounds the table of runtime streams a replay creates (one per number up to the highest).
const MAX_STREAM: u64 = 1 << 10;
/// The largest allocation a trace may ask for: the allocator's own limit; it keeps sums of live bytes from overflow.
pub const MAX_BYTES: u64 = 1 << 60;

/// Reads a `.trace` or `.trace.gz` file (gzip is recognised by its magic bytes).
pub fn parse_file(path: &Path) -> Result<Trace, ParseError> {
    let name = path.display().to_string();
    let file = File::open(path).map_err(|source| ParseError::Open { name: name.clone(), source })?;
    // Opening a directory succeeds on Linux; reading it does not.
    if file.metadata().is_ok_and(|m| m.is_dir()) {
        return Err(ParseError::Open { name, source: io::Error::other("it is a directory") });
    }
    let io_err = |source| ParseError::Io { name: name.clone(), source };
    let mut file = BufReader::new(file);
    let gz = file.fill_buf().map_err(io_err)?.starts_with(&[0x1f, 0x8b]);
    if gz {
        parse_reader(BufReader::new(flate2::bufread::MultiGzDecoder::new(file)), &name)
    } else {
        parse_reader(file, &name)
    }
}

/// Reads trace text from `reader`; `name` labels errors.
pub fn parse_reader<R: BufRead>(mut reader: R, name: &str) -> Result<Trace, ParseError> {
    let mut parser = Parser::default();
    let mut buf = Vec::new();
    let mut line_no = 0usize;
    loop {
        buf.clear();
        // Bytes, not `read_line`: text that is not UTF-8 is one line's problem, reported with its number.
        let n =
            reader.read_until(b'\n', &mut buf).map_err(|source| ParseError::Io { name: name.to_string(), source })?;
        if n == 0 {
            break;
        }
        line_no += 1;
        let line_err = |error| ParseError::Line { name: name.to_string(), line: line_no, error };
        let text =
            std::str::from_utf8(&buf).map_err(|e| line_err(LineError::NotUtf8 { column: e.valid_up_to() + 1 }))?;
        parser.line(text.trim_end_matches(['\n', '\r'])).map_err(line_err)?;
    }
    Ok(parser.trace)
}

/// Reads trace text held in memory.
pub fn parse_str(text: &str, name: &str) -> Result<Trace, ParseError> {
    parse_reader(text.as_bytes(), name)
}

#[derive(Default)]
struct Parser {
    trace: Trace,
    live: HashSet<u64>,
    seen: HashSet<u64>,
}

impl Parser {
    fn line(&mut self, line: &str) -> Result<(), LineError> {
        if let Some(comment) = line.strip_prefix('#') {
            // Wherever it stands (blank lines may come first).
            check_header(line)?;
            self.trace.comments.push(comment.to_string());
            return Ok(());
        }
        let mut fields = line.split_ascii_whitespace();
        let Some(op) = fields.next() else {
            return Ok(()); // blank line
        };
        let rest: Vec<&str> = fields.collect();
        let arity = |op: char, expected: usize| {
            if rest.len() == expected {
                Ok(())
            } else {
                Err(LineError::FieldCount { op, expected, found: rest.len() })
            }
        };
        let op = match op {
            "a" => {
                arity('a', 3)?;
                let id = number("id", rest[0])?;
                let bytes = number("size", rest[1])?;
                let stream = stream(rest[2])?;
                if bytes == 0 {
                    return Err(LineError::ZeroSize(id));
                }
                if bytes >= MAX_BYTES {
                    return Err(LineError::SizeTooLarge { id, bytes });
                }
                if !self.seen.insert(id) {
                    return Err(LineError::ReusedId(id));
                }
                self.live.insert(id);
                Op::Alloc { id, bytes, stream }
            }
            "f" => {
                arity('f', 1)?;
                let id = number("id", rest[0])?;
                if !self.live.remove(&id) {
                    return Err(LineError::UnknownId { op: 'f', id });
                }
                Op::Free { id }
            }
            "u" => {
                arity('u', 2)?;
                let id = number("id", rest[0])?;
                let stream = stream(rest[1])?;
                if !self.live.contains(&id) {
                    return Err(LineError::UnknownId { op: 'u', id });
                }
                Op::Use { id, stream }
            }
            "w" => {
                arity('w', 1)?;
                Op::Wait { stream: stream(rest[0])? }
            }
            other => return Err(LineError::UnknownOp(other.to_string())),
        };
        self.trace.ops.push(op);
        Ok(())
    }
}

fn check_header(line: &str) -> Result<(), LineError> {
    let words: Vec<&str> = line.trim_start_matches('#').split_ascii_whitespace().collect();
    match words.as_slice() {
        ["acl-trace", "v1", ..] => Ok(()),
        ["acl-trace", ..] => Err(LineError::Version(line.to_string())),
        _ => Ok(()), // some other comment: no header
    }
}

fn number(field: &'static str, s: &str) -> Result<u64, LineError> {
    // `parse` alone would accept a leading '+'.
    if s.bytes().all(|b| b.is_ascii_digit()) {
        if let Ok(v) = s.parse() {
            return Ok(v);
        }
    }
    Err(LineError::NotANumber { field, value: s.to_string() })
}

fn stream(s: &str) -> Result<u32, LineError> {
    let v = number("stream", s)?;
    if v >= MAX_STREAM {
        return Err(LineError::StreamTooLarge(v));
    }
    Ok(v as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> (usize, LineError) {
        let e = parse_str(text, "t").unwrap_err();
        (e.line().unwrap(), e.line_error().unwrap().clone())
    }

    #[test]
    fn reads_all_ops_and_comments() {
        let t = parse_str("# acl-trace v1\n# source: test\na 0 10 0\n\nu 0 1\nw 1\nf 0\na 1 5 1\n", "t").unwrap();
        assert_eq!(t.source(), Some("test"));
        assert_eq!(
            t.ops,
            vec![
                Op::Alloc { id: 0, bytes: 10, stream: 0 },
                Op::Use { id: 0, stream: 1 },
                Op::Wait { stream: 1 },
                Op::Free { id: 0 },
                Op::Alloc { id: 1, bytes: 5, stream: 1 },
            ]
        );
    }

    #[test]
    fn text_round_trips() {
        let t = parse_str("# acl-trace v1\n# source: x\na 3 10 0\nu 3 2\nf 3\nw 0\n", "t").unwrap();
        assert_eq!(parse_str(&t.to_text(), "t").unwrap(), t);
    }

    #[test]
    fn rejects_malformed_lines_with_their_number() {
        let h = "# acl-trace v1\na 0 10 0\n";
        assert_eq!(err(&format!("{h}x 1 2\n")), (3, LineError::UnknownOp("x".into())));
        assert_eq!(err(&format!("{h}f 7\n")), (3, LineError::UnknownId { op: 'f', id: 7 }));
        assert_eq!(err(&format!("{h}u 7 0\n")), (3, LineError::UnknownId { op: 'u', id: 7 }));
        assert_eq!(err(&format!("{h}f 0\nf 0\n")), (4, LineError::UnknownId { op: 'f', id: 0 }));
        assert_eq!(err(&format!("{h}f 0\na 0 5 0\n")), (4, LineError::ReusedId(0)));
        assert_eq!(err(&format!("{h}a 1 5 0\na 1 5 0\n")), (4, LineError::ReusedId(1)));
        assert_eq!(err(&format!("{h}a 1 0 0\n")), (3, LineError::ZeroSize(1)));
        assert_eq!(err(&format!("{h}a 1 5\n")), (3, LineError::FieldCount { op: 'a', expected: 3, found: 2 }));
        assert_eq!(err(&format!("{h}f 0 1\n")), (3, LineError::FieldCount { op: 'f', expected: 1, found: 2 }));
        assert_eq!(err(&format!("{h}w\n")), (3, LineError::FieldCount { op: 'w', expected: 1, found: 0 }));
        assert_eq!(err(&format!("{h}a 1 1k 0\n")), (3, LineError::NotANumber { field: "size", value: "1k".into() }));
        assert_eq!(err(&format!("{h}a -1 5 0\n")), (3, LineError::NotANumber { field: "id", value: "-1".into() }));
        assert_eq!(err(&format!("{h}a +1 5 0\n")).1, LineError::NotANumber { field: "id", value: "+1".into() });
        assert_eq!(err(&format!("{h}w 99999999\n")), (3, LineError::StreamTooLarge(99999999)));
        assert_eq!(err(&format!("{h}w 1024\n")), (3, LineError::StreamTooLarge(1024)));
        let huge = MAX_BYTES;
        assert_eq!(err(&format!("{h}a 1 {huge} 0\n")), (3, LineError::SizeTooLarge { id: 1, bytes: huge }));
        assert_eq!(err(&format!("{h}a 1 {} 0\n", u64::MAX)).0, 3);
        assert!(matches!(err("# acl-trace v2\n").1, LineError::Version(_)));
        assert_eq!(err("\n# acl-trace v2\na 0 1 0\n").0, 2, "a header after a blank line counts");
        let bad_utf8 = parse_reader(&b"# acl-trace v1\na 0 10 0\nf \xff0\n"[..], "t").unwrap_err();
        assert_eq!((bad_utf8.line(), bad_utf8.line_error()), (Some(3), Some(&LineError::NotUtf8 { column: 3 })));
    }

    #[test]
    fn live_bytes_past_2_to_the_64_do_not_wrap() {
        // 17 allocations just under the limit hold more than u64::MAX.
        let text: String = (0..17).map(|i| format!("a {i} {} 0\n", MAX_BYTES - 1)).collect();
        let t = parse_str(&text, "t").unwrap();
        let series = t.requested_series();
        assert_eq!(series[15], 16 * (MAX_BYTES - 1));
        assert_eq!((series[16], t.peak_requested()), (u64::MAX, u64::MAX), "clamped, not wrapped");
    }

    #[test]
    fn error_message_names_file_and_line() {
        let e = parse_str("# acl-trace v1\nq\n", "my.trace").unwrap_err();
        assert_eq!(e.to_string(), "my.trace:2: unknown op 'q' (expected a, f, u or w)");
    }

    #[test]
    fn reads_gzip_files() {
        use std::io::Write;
        let dir = std::env::temp_dir().join(format!("npualloc-parse-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.trace.gz");
        let mut gz = flate2::write::GzEncoder::new(File::create(&path).unwrap(), flate2::Compression::fast());
        gz.write_all(b"# acl-trace v1\na 0 10 0\nf 0\n").unwrap();
        gz.finish().unwrap();
        let t = parse_file(&path).unwrap();
        assert_eq!(t.ops.len(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
