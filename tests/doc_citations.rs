//! Every citation of `docs/<file>.md` in the repository points at a file
//! that exists, and at a section in it that exists: `§N` (or `§N.M`, `§b`)
//! must be a heading's number, and a quoted title right after the path or
//! section must be text of that file. Citations of the documents' old
//! location outside the repository are refused.
//!
//! Citations of `BENCHMARKS.md` are held to its headings: a quoted title
//! right after it (`BENCHMARKS.md, "X"`, `BENCHMARKS.md "X"`, `BENCHMARKS
//! "X"`, `(BENCHMARKS.md, "X")`, and further titles joined by `,` or `and`)
//! must be exactly the text of one of its headings, at any level. Outside
//! Markdown a citation must name a section: figures move between runs and
//! the report is rewritten, so only a heading is a stable place to point at.
//!
//! Citations of the core's design notes, `Note [title]` (the title may wrap
//! across lines of a comment), are held to docs/design.md: each title must be
//! the title of a `## Note [title]` heading there, and each such heading must
//! be cited from code (a file that is not Markdown) at least once. The few
//! notes that are not the core's are listed in `NOTES_ELSEWHERE`.
//!
//! The two documents a newcomer reads first stay short: README.md (for a
//! first-time user) and BENCHMARKS.md (a report) within 300 lines each;
//! longer material goes to python/README.md and docs/. (Here, because this
//! file is the one the citation scan skips.)

use std::path::{Path, PathBuf};

const SCANNED: &[&str] = &["rs", "md", "h", "hpp", "c", "cpp", "py", "sh", "toml", "txt", "cmake", "in"];
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
        let title = after.strip_prefix('"').and_then(|t| t.split_once('"')).map(|(t, _)| folded_title(t));
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

/// Comment leaders a quoted title may cross when it continues on the next
/// line of a comment.
fn is_comment_marker(token: &str) -> bool {
    !token.is_empty() && token.chars().all(|c| matches!(c, '/' | '!' | '#' | '*' | '-'))
}

/// A quoted title with its line breaks, indentation and comment leaders
/// folded into single spaces.
fn folded_title(raw: &str) -> String {
    let mut words = Vec::new();
    for (i, line) in raw.lines().enumerate() {
        let mut tokens = line.split_whitespace().peekable();
        // A comment leader only where a continued line starts ("/" inside a title stays).
        if i > 0 && tokens.peek().is_some_and(|t| is_comment_marker(t)) {
            tokens.next();
        }
        words.extend(tokens);
    }
    words.join(" ")
}

/// `text` with leading spaces, commas and line breaks skipped, and the
/// comment leader of each line crossed.
fn skip_gap(mut text: &str) -> &str {
    loop {
        let trimmed = text.trim_start_matches([' ', '\t', ',']);
        let Some(next_line) = trimmed.strip_prefix('\n').or_else(|| trimmed.strip_prefix("\r\n")) else {
            return trimmed;
        };
        let body = next_line.trim_start_matches([' ', '\t']);
        let leader = body.split_whitespace().next().filter(|t| is_comment_marker(t)).map_or(0, str::len);
        text = &body[leader..];
    }
}

/// One citation of BENCHMARKS.md: the quoted titles that follow it (none,
/// or one and more joined by `,` or `and`).
#[derive(Debug)]
struct BenchCitation {
    titles: Vec<String>,
    line: usize,
}

/// The citations of BENCHMARKS.md (or `BENCHMARKS` alone) in `text`.
fn bench_citations(text: &str) -> Vec<BenchCitation> {
    const NAME: &str = "BENCHMARKS";
    let mut found = Vec::new();
    for (at, _) in text.match_indices(NAME) {
        if text[..at].chars().next_back().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let mut rest = &text[at + NAME.len()..];
        if let Some(r) = rest.strip_prefix(".md") {
            rest = r;
        }
        // BENCHMARKS.mdx, BENCHMARKS_DIR, BENCHMARKS/x, BENCHMARKS.txt: another name.
        let mut next = rest.chars();
        let another = match next.next() {
            Some('.') => next.next().is_some_and(|c| c.is_ascii_alphanumeric()),
            Some(c) => c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '/'),
            None => false,
        };
        if another {
            continue;
        }
        let mut after = skip_gap(rest.trim_start_matches(['`', ')', ']']));
        let mut titles = Vec::new();
        while let Some((title, tail)) = after.strip_prefix('"').and_then(|t| t.split_once('"')) {
            titles.push(folded_title(title));
            let tail = skip_gap(tail);
            after = skip_gap(tail.strip_prefix("and").unwrap_or(tail));
        }
        let line = text[..at].matches('\n').count() + 1;
        found.push(BenchCitation { titles, line });
    }
    found
}

/// The headings of a Markdown document, the text after the `#`s, outside
/// fenced code blocks.
fn headings(doc: &str) -> Vec<String> {
    let mut fenced = false;
    let mut found = Vec::new();
    for line in doc.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            found.push(line.trim_start_matches('#').trim().to_string());
        }
    }
    found
}

/// What is wrong with the BENCHMARKS.md citations of `text` (`code`: not a
/// Markdown file), each as "LINE: why", and how many titles were checked.
fn bench_problems(text: &str, code: bool, headings: &[String]) -> (Vec<String>, usize) {
    let mut problems = Vec::new();
    let mut checked = 0;
    for c in bench_citations(text) {
        if c.titles.is_empty() && code {
            problems.push(format!(
                "{}: BENCHMARKS.md without a section: cite a section by its heading (BENCHMARKS.md, \"Heading\")",
                c.line
            ));
        }
        for title in &c.titles {
            checked += 1;
            if !headings.iter().any(|h| h == title) {
                problems.push(format!("{}: BENCHMARKS.md has no heading \"{title}\"", c.line));
            }
        }
    }
    (problems, checked)
}

/// Notes cited by title that are not the core's, so not in docs/design.md,
/// with the file of this repository that holds each, if one does.
const NOTES_ELSEWHERE: &[(&str, Option<&str>)] = &[
    // The emulator's: it stays in the emulator's source.
    ("pins", Some("emu/src/violation.rs")),
    // PyTorch's (c10/cuda/CUDACachingAllocator.cpp), cited in docs/anchors.md.
    ("Interaction with CUDA graph capture", None),
];

/// One citation of a design note: its title, folded across line breaks and
/// comment leaders.
#[derive(Debug)]
struct NoteCitation {
    title: String,
    line: usize,
}

/// The citations `Note [title]` in `text`; the `[` may be on the next line
/// of a comment, and the title may wrap across lines.
fn note_citations(text: &str) -> Vec<NoteCitation> {
    const WORD: &str = "Note";
    let mut found = Vec::new();
    for (at, _) in text.match_indices(WORD) {
        if text[..at].chars().next_back().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let Some(rest) = skip_gap(&text[at + WORD.len()..]).strip_prefix('[') else { continue };
        let Some((raw, _)) = rest.split_once(']') else { continue };
        if raw.contains('[') {
            continue;
        }
        let line = text[..at].matches('\n').count() + 1;
        found.push(NoteCitation { title: folded_title(raw), line });
    }
    found
}

/// The titles of the `## Note [title]` headings of a Markdown document,
/// outside fenced code blocks.
fn note_headings(doc: &str) -> Vec<String> {
    let mut fenced = false;
    let mut found = Vec::new();
    for line in doc.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if let Some(title) = line.strip_prefix("## Note [").filter(|_| !fenced) {
            if let Some(title) = title.trim_end().strip_suffix(']') {
                found.push(folded(title));
            }
        }
    }
    found
}

/// What is wrong with the note citations of `text`, each as "LINE: why",
/// given the titles of design.md's notes.
fn note_problems(text: &str, notes: &[String]) -> Vec<String> {
    let mut problems = Vec::new();
    for c in note_citations(text) {
        if !notes.contains(&c.title) && !NOTES_ELSEWHERE.iter().any(|(title, _)| *title == c.title) {
            problems.push(format!("{}: docs/design.md has no heading \"## Note [{}]\"", c.line, c.title));
        }
    }
    problems
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
    let benchmarks = std::fs::read_to_string(root.join("BENCHMARKS.md")).expect("BENCHMARKS.md");
    let bench_headings = headings(&benchmarks);
    let design = std::fs::read_to_string(root.join("docs/design.md")).expect("docs/design.md");
    let notes = note_headings(&design);
    let mut problems = Vec::new();
    let mut cited_from_code = std::collections::HashSet::new();
    let mut notes_checked = 0;
    let mut checked = 0;
    let mut bench_checked = 0;
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
        let code = path.extension().and_then(|e| e.to_str()) != Some("md");
        let (bench, titles) = bench_problems(&text, code, &bench_headings);
        bench_checked += titles;
        problems.extend(bench.into_iter().map(|p| format!("{shown}:{p}")));
        let cited = note_citations(&text);
        notes_checked += cited.len();
        if code {
            cited_from_code.extend(cited.into_iter().map(|c| c.title));
        }
        problems.extend(note_problems(&text, &notes).into_iter().map(|p| format!("{shown}:{p}")));
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
    for (i, title) in notes.iter().enumerate() {
        if notes[..i].contains(title) {
            problems.push(format!("docs/design.md: two headings \"## Note [{title}]\""));
        }
        if !cited_from_code.contains(title) {
            problems.push(format!("docs/design.md: Note [{title}] is cited from no code"));
        }
    }
    for (title, home) in NOTES_ELSEWHERE {
        if let Some(home) = home {
            let text = std::fs::read_to_string(root.join(home)).unwrap_or_default();
            if !text.contains(&format!("Note [{title}]")) {
                problems.push(format!("{home} does not hold Note [{title}]"));
            }
        }
    }
    assert!(problems.is_empty(), "{} broken citation(s):\n{}", problems.len(), problems.join("\n"));
    assert!(notes.len() >= 10, "only {} notes in docs/design.md: is it still read?", notes.len());
    assert!(notes_checked >= 40, "only {notes_checked} note citations found: is the scan still reading the sources?");
    assert!(checked >= 20, "only {checked} citations found: is the scan still reading the sources?");
    assert!(
        bench_checked >= 10,
        "only {bench_checked} BENCHMARKS.md sections cited: is the scan still reading the sources?"
    );
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

#[test]
fn the_benchmarks_reader_holds_citations_to_headings() {
    let text = "see BENCHMARKS.md, \"Sleep and wake\" and (BENCHMARKS.md, \"Commands\"); \
                `BENCHMARKS.md`, \"Caveats\"; BENCHMARKS \"Method\"; BENCHMARKS.md's order; \
                BENCHMARKS.md, \"Memory against peers\" and \"Commands\".\n\
                //! (BENCHMARKS.md,\n//! \"Speed under\n//! equal costs\"). NPUALLOC_BENCHMARKS, BENCHMARKS.mdx";
    let got: Vec<_> = bench_citations(text).into_iter().map(|c| c.titles).collect();
    let want: [&[&str]; 7] = [
        &["Sleep and wake"],
        &["Commands"],
        &["Caveats"],
        &["Method"],
        &[],
        &["Memory against peers", "Commands"],
        &["Speed under equal costs"],
    ];
    assert_eq!(got, want.map(|w| w.iter().map(|t| t.to_string()).collect::<Vec<_>>()));

    let doc = "# Benchmarks\n## Method\n## Speed under equal costs\n### Two allocators on one device\n\
               ```sh\n# Not a heading\n```\n## Commands\n";
    let h = headings(doc);
    assert_eq!(h, ["Benchmarks", "Method", "Speed under equal costs", "Two allocators on one device", "Commands"]);
    // Headings of any level pass, exactly.
    let (problems, checked) = bench_problems("(BENCHMARKS.md, \"Two allocators on one device\")", true, &h);
    assert!(problems.is_empty() && checked == 1, "{problems:?}");
    // A title that is not a heading, or only part of one, is refused.
    for wrong in
        ["BENCHMARKS.md, \"What the rule costs\"", "BENCHMARKS \"Speed under\"", "BENCHMARKS.md \"Not a heading\""]
    {
        let (problems, _) = bench_problems(wrong, false, &h);
        assert_eq!(problems.len(), 1, "{wrong}: {problems:?}");
    }
    // A second title of a list is checked too.
    assert_eq!(bench_problems("BENCHMARKS.md, \"Method\" and \"Results\"", true, &h).0.len(), 1);
    // In code a bare citation is refused; in Markdown it is prose.
    let bare = "// the numbers in BENCHMARKS.md.";
    assert!(bench_problems(bare, true, &h).0[0].contains("cite a section by its heading"));
    assert!(bench_problems(bare, false, &h).0.is_empty());
}

#[test]
fn the_note_reader_holds_citations_to_design_headings() {
    let text = "see Note [the top block] and (Note [moves of\n//! wholly free handles]); (Note\n    /// [pools]).\n\
                # Note [capture], Notes [x], FootNote [y], a Note: [z]\n// (docs/design.md, Note [a registry for\n\
                // aligned addresses])";
    let got: Vec<_> = note_citations(text).into_iter().map(|c| (c.title, c.line)).collect();
    let want = [
        ("the top block", 1),
        ("moves of wholly free handles", 1),
        ("pools", 2),
        ("capture", 4),
        ("a registry for aligned addresses", 5),
    ];
    assert_eq!(got, want.map(|(t, l)| (t.to_string(), l)));

    let doc = "# Design\n## Note [the top block]\n## Note [moves of wholly free handles]\n### Note [deeper]\n\
               ```md\n## Note [fenced]\n```\n## Note [pools]\n## Note [capture]\n\
               ## Note [a registry for aligned addresses]\n## Pools\n";
    let notes = note_headings(doc);
    assert_eq!(
        notes,
        ["the top block", "moves of wholly free handles", "pools", "capture", "a registry for aligned addresses"]
    );
    assert!(note_problems(text, &notes).is_empty(), "{:?}", note_problems(text, &notes));
    // A note with no heading is refused, as is a heading only at another level.
    for wrong in ["// (Note [a note nobody wrote])", "see Note [deeper]", "Note [the top\n//! blocks]"] {
        assert_eq!(note_problems(wrong, &notes).len(), 1, "{wrong}");
    }
    // The notes kept elsewhere pass.
    assert!(note_problems("(Note [pins] in `violation`)", &notes).is_empty());
}

#[test]
fn readme_and_benchmarks_stay_within_300_lines() {
    const LIMIT: usize = 300;
    let mut over = Vec::new();
    for name in ["README.md", "BENCHMARKS.md"] {
        let text = std::fs::read_to_string(root().join(name)).unwrap_or_else(|e| panic!("read {name}: {e}"));
        let lines = text.lines().count();
        if lines > LIMIT {
            over.push(format!("{name} has {lines} lines, over {LIMIT}"));
        }
    }
    assert!(over.is_empty(), "{}", over.join("; "));
}
