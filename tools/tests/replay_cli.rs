//! `npualloc-replay`'s command line: clap's errors and exit codes, every
//! option in `--help`, shell completions, and the progress bar only where
//! it is asked for.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn replay(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_npualloc-replay")).args(args).output().expect("run npualloc-replay")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The emulator next to the tool (`cargo build --workspace` puts it there).
fn emulator() -> PathBuf {
    let tool = Path::new(env!("CARGO_BIN_EXE_npualloc-replay"));
    tool.with_file_name("libascendcl.so")
}

const OPTIONS: [&str; 12] = [
    "--config",
    "--baseline",
    "--acl-library",
    "--repeat",
    "--no-min-capacity",
    "--warm",
    "--json",
    "--svg",
    "--snapshot",
    "--progress",
    "--completions",
    "--help",
];

#[test]
fn a_bad_command_line_is_a_clap_error_with_status_2() {
    for (args, says) in [
        (&["--bogus", "t.trace"][..], "unexpected argument '--bogus'"),
        (&["--repeat", "0", "t.trace"][..], "invalid value '0' for '--repeat <N>'"),
        (&["--repeat", "many", "t.trace"][..], "invalid value 'many' for '--repeat <N>'"),
        (&["--baseline", "cuda", "t.trace"][..], "[possible values: pytorch, passthrough]"),
        (&["--svg"][..], "a value is required for '--svg <FILE>'"),
        (&[][..], "the following required arguments were not provided"),
    ] {
        let out = replay(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(err.starts_with("error: ") && err.contains(says), "{args:?}: {err}");
        assert!(err.contains("For more information, try '--help'."), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn help_and_version_name_every_option_and_exit_0() {
    let out = replay(&["--help"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let help = String::from_utf8_lossy(&out.stdout);
    for option in OPTIONS {
        assert!(help.contains(option), "--help lacks {option}:\n{help}");
    }
    assert!(help.contains("pytorch:") && help.contains("passthrough:"), "{help}");
    let short = replay(&["-h"]);
    assert_eq!(short.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&short.stdout).contains("exit status"));
    let version = replay(&["--version"]);
    assert_eq!(version.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&version.stdout).trim(), concat!("npualloc-replay ", env!("CARGO_PKG_VERSION")));
}

#[test]
fn completions_cover_every_option() {
    for shell in ["bash", "zsh", "fish"] {
        let out = replay(&["--completions", shell]);
        assert_eq!(out.status.code(), Some(0), "{shell}: {}", stderr(&out));
        let script = String::from_utf8_lossy(&out.stdout);
        for option in OPTIONS {
            // fish names long options without their dashes.
            let name = option.trim_start_matches('-');
            assert!(script.contains(name), "{shell} completion lacks {option}");
        }
    }
    // Completions take no trace and no other option.
    let out = replay(&["--completions", "bash", "t.trace"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

#[test]
fn progress_goes_to_stderr_only_when_asked_off_a_terminal() {
    let trace = std::env::temp_dir().join(format!("npualloc-replay-cli-{}.trace", std::process::id()));
    std::fs::write(&trace, "# acl-trace v1\na 0 4096 0\na 1 1048576 0\nf 0\nf 1\n").unwrap();
    let lib = emulator();
    let trace_arg = trace.to_str().unwrap();
    let base = ["--acl-library", lib.to_str().unwrap(), "--repeat", "1", "--baseline", "passthrough"];
    // Output captured (not a terminal): nothing on stderr.
    let quiet = replay(&[&base[..], &[trace_arg]].concat());
    assert_eq!(quiet.status.code(), Some(0), "{}", stderr(&quiet));
    assert_eq!(stderr(&quiet), "");
    // --progress: the bar over two (trace, configuration) runs, with what runs.
    let shown = replay(&[&base[..], &["--progress", trace_arg]].concat());
    std::fs::remove_file(&trace).unwrap();
    assert_eq!(shown.status.code(), Some(0), "{}", stderr(&shown));
    let err = stderr(&shown);
    assert!(err.contains("0/2") && err.contains("1/2"), "{err}");
    assert!(err.contains("npualloc | min capacity probe 1:"), "{err}");
    assert!(err.contains("passthrough | observed run"), "{err}");
    // The table itself is unchanged by the bar.
    assert_eq!(shown.stdout.split(|&b| b == b'\n').count(), quiet.stdout.split(|&b| b == b'\n').count());
}
