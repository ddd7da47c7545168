//! `npualloc-interleave` remakes `traces/bench/serve-bert-gpt2.trace.gz` from
//! its two sources, byte for byte once decompressed, and its command line
//! fails as documented.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn interleave(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_npualloc-interleave")).args(args).output().expect("run npualloc-interleave")
}

fn repo_file(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

fn gunzip(path: &Path) -> Vec<u8> {
    let mut text = Vec::new();
    flate2::read::MultiGzDecoder::new(std::fs::File::open(path).unwrap()).read_to_end(&mut text).unwrap();
    text
}

#[test]
fn remakes_serve_bert_gpt2_from_its_sources() {
    let out = std::env::temp_dir().join(format!("npualloc-interleave-{}.trace.gz", std::process::id()));
    let bert = repo_file("traces/bert-encode-varbatch.trace.gz");
    let gpt2 = repo_file("traces/bench/gpt2-generate.trace.gz");
    let run = interleave(&["-o".as_ref(), out.as_os_str(), bert.as_os_str(), gpt2.as_os_str()]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let made = gunzip(&out);
    let _ = std::fs::remove_file(&out);
    let committed = gunzip(&repo_file("traces/bench/serve-bert-gpt2.trace.gz"));
    assert_eq!(made.len(), committed.len());
    assert!(made == committed, "the remade trace differs from the committed one");
    let text = String::from_utf8(made).unwrap();
    let events = text.lines().filter(|l| !l.starts_with('#')).count();
    assert_eq!(events, 569_663, "the count traces/README.md gives");
    assert!(text.lines().nth(1).unwrap().starts_with("# source: npualloc-interleave of bert-encode-varbatch"));
}

#[test]
fn unreadable_trace_is_exit_1_and_bad_command_line_exit_2() {
    let out = std::env::temp_dir().join(format!("npualloc-interleave-bad-{}.trace", std::process::id()));
    let missing = interleave(&["-o".as_ref(), out.as_os_str(), "no/such.trace.gz".as_ref()]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no/such.trace.gz"));
    assert!(!out.exists(), "nothing is written when an input cannot be read");
    let no_traces = interleave(&["-o".as_ref(), out.as_os_str()]);
    assert_eq!(no_traces.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&no_traces.stderr).contains("required"));
    let no_output = interleave(&[repo_file("traces/resnet-like-infer.trace.gz").as_os_str()]);
    assert_eq!(no_output.status.code(), Some(2));
}
