//! Every citation of `docs/<file>.md` in the repository points at a file
//! that exists, and at a section in it that exists: `§N` (or `§N.M`, `§b`)
//! must be a heading's number, and a quoted title right after the path or
//! section must be text of that file. Citations of the documents' old
//! location outside the repository are refused.

use std::path::{Path, PathBuf};

const SCANNED: &[&str] = &["rs", "md", "h", "c", "py", "sh", "toml", "txt", "cmake", "in"];
const SKIPPED_DIRS: &[&str] = &["target", ".git", "third_party", "node_modules", "__pycache__", ".venv"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn source_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display())) {
        let path = entry.expect("directory entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if path.is_dir() {
            // build*/ are CMake build trees.
            if !SKIPPED_DIRS.contains(&name) && !name.starts_with("build") {
                source_files(&path, out);
            }
        } else if path.extension().and_then(|e| e.to_str()).is_some_and(|e| SCANNED.contains(&e)) {
            out.push(path);
        }
    }
}

/// One citation: the cited file name, and the section and quoted title
/// that follow it, if any.
#[derive(Debug)]
struct Citation {
    file: String,
    section: Option<String>,
    title: Option<String>,
    line: usize,
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')
}

/// The citations of `docs/<name>.md` in `text`; paths below docs/ with a
/// further `/` are other projects' (e.g. PyTorch's docs/source/...).
fn citations(text: &str) -> Vec<Citation> {
    let mut found = Vec::new();
    for (at, _) in text.match_indices("docs/") {
        let rest = &text[at + 5..];
        let name: String = rest.chars().take_while(|&c| is_name_char(c)).collect();
        let name = name.trim_end_matches('.');
        if !name.ends_with(".md") || rest[name.len()..].starts_with('/') {
            continue;
        }
        let mut after = rest[name.len()..].trim_start_matches(['`', ')', ']']);
        after = after.trim_start_matches([' ', ',']);
        let mut section = None;
        if let Some(s) = after.strip_prefix('§') {
            let id: String = s.chars().take_while(|&c| c.is_ascii_alphanumeric() || c == '.').collect();
            let id = id.trim_end_matches('.').to_string();
            after = s[id.len()..].trim_start_matches(['.', ',', ' ']);
            section = Some(id);
        }
        let title = after
            .strip_prefix('"')
            .and_then(|t| t.split_once('"'))
            .map(|(t, _)| t.split_whitespace().collect::<Vec<_>>().join(" "));
        let line = text[..at].matches('\n').count() + 1;
        found.push(Citation { file: name.to_string(), section, title, line });
    }
    found
}

/// The text of a doc with line breaks and comment markers folded into single
/// spaces, so a quoted title matches across lines.
fn folded(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn has_section(doc: &str, id: &str) -> bool {
    doc.lines().filter(|l| l.starts_with('#')).any(|l| {
        let heading = l.trim_start_matches('#').trim_start();
        heading.strip_prefix(id).is_some_and(|rest| {
            let mut chars = rest.chars();
            match chars.next() {
                Some(' ') => true,
                // "5. Calls" is section 5; "6.1 Inside" is not section 6.
                Some('.') => !chars.next().is_some_and(|c| c.is_ascii_alphanumeric()),
                _ => false,
            }
        })
    })
}

#[test]
fn every_cited_doc_and_section_exists() {
    let root = root();
    let mut files = Vec::new();
    source_files(&root, &mut files);
    let mut problems = Vec::new();
    let mut checked = 0;
    for path in &files {
        let Ok(text) = std::fs::read_to_string(path) else { continue };
        let shown = path.strip_prefix(&root).unwrap_or(path).display().to_string();
        // This file's own examples are not citations.
        if shown == "tests/doc_citations.rs" {
            continue;
        }
        for old in ["acl-api.md", "anchors.md", "runtime-behaviour.md", "concurrency.md"] {
            if text.contains(&format!("reference/{old}")) {
                problems.push(format!("{shown}: cites reference/{old}; cite docs/ instead"));
            }
        }
        for c in citations(&text) {
            checked += 1;
            let doc_path = root.join("docs").join(&c.file);
            let Ok(doc) = std::fs::read_to_string(&doc_path) else {
                problems.push(format!("{shown}:{}: docs/{} does not exist", c.line, c.file));
                continue;
            };
            if let Some(id) = &c.section {
                if !has_section(&doc, id) {
                    problems.push(format!("{shown}:{}: docs/{} has no section {id}", c.line, c.file));
                }
            }
            if let Some(title) = &c.title {
                if !folded(&doc).contains(title.as_str()) {
                    problems.push(format!("{shown}:{}: docs/{} has no \"{title}\"", c.line, c.file));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{} broken citation(s):\n{}", problems.len(), problems.join("\n"));
    assert!(checked >= 20, "only {checked} citations found: is the scan still reading the sources?");
}

#[test]
fn the_citation_reader_finds_sections_and_titles() {
    let c = citations("see docs/acl-api.md §5 \"Virtual memory\": and (docs/anchors.md §b); docs/x.md.");
    let got: Vec<_> = c.iter().map(|c| (c.file.as_str(), c.section.as_deref(), c.title.as_deref())).collect();
    assert_eq!(
        got,
        [("acl-api.md", Some("5"), Some("Virtual memory")), ("anchors.md", Some("b"), None), ("x.md", None, None)]
    );
    assert!(citations("PyTorch's docs/source/notes/cuda.md").is_empty());
    let doc = "# T\n## 5. Calls\n### 6.1 Inside\n## b. Constants\n";
    assert!(has_section(doc, "5") && has_section(doc, "6.1") && has_section(doc, "b"));
    assert!(!has_section(doc, "6") && !has_section(doc, "c"));
}
