//! npualloc-replay: replays acl-trace v1 files through npualloc
//! configurations and baselines on the ACL emulator, and reports memory,
//! device calls and allocator time. See `--help`.

use npualloc::replay::svg::{self, Figure};
use npualloc::replay::{table, Emulator, Options, Prepared, Report, Target};
use npualloc::runtime::loader::ACL_LIBRARY_ENV;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "\
usage: npualloc-replay [options] TRACE...

Replays acl-trace v1 files (.trace or .trace.gz) on the ACL emulator.

options:
  --config STR        an npualloc config (\"key:value,...\"); repeatable.
                      Default: one run with npualloc's defaults.
  --baseline NAME     also replay through a baseline; repeatable:
                        pytorch      npualloc with PyTorch's policy (fixed segments)
                        passthrough  aclrtMalloc/aclrtFree per request, no cache
  --acl-library PATH  the emulator library (default: $NPUALLOC_ACL_LIBRARY,
                      else libascendcl.so next to this executable)
  --repeat N          timed runs per configuration, best kept (default 3)
  --no-min-capacity   skip the min-capacity bisection
  --warm              time a second pass over each trace on the same
                      allocator (what the first pass left live freed in
                      between): the hot path without growth. Only ns/op
                      changes; the other columns come from a first pass
  --json              print one JSON document instead of the table
  --svg FILE          write charts of requested vs reserved bytes and the
                      first configuration's segments at its peak
  --progress          show progress on stderr even when it is not a terminal
  -h, --help          this text
";

struct Args {
    configs: Vec<String>,
    baselines: Vec<Target>,
    library: Option<PathBuf>,
    repeat: usize,
    min_capacity: bool,
    warm: bool,
    json: bool,
    svg: Option<PathBuf>,
    progress: bool,
    traces: Vec<PathBuf>,
}

fn parse_args(mut it: impl Iterator<Item = String>) -> Result<Option<Args>, String> {
    let mut a = Args {
        configs: Vec::new(),
        baselines: Vec::new(),
        library: None,
        repeat: 3,
        min_capacity: true,
        warm: false,
        json: false,
        svg: None,
        progress: false,
        traces: Vec::new(),
    };
    while let Some(arg) = it.next() {
        // `--key=value` and `--key value` both work.
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut value = |name: &str| inline.clone().or_else(|| it.next()).ok_or(format!("{name} needs a value"));
        match flag.as_str() {
            "-h" | "--help" => return Ok(None),
            "--config" => a.configs.push(value("--config")?),
            "--baseline" => a.baselines.push(match value("--baseline")?.as_str() {
                "pytorch" => Target::pytorch_policy(),
                "passthrough" => Target::Passthrough,
                other => return Err(format!("unknown baseline '{other}' (expected pytorch or passthrough)")),
            }),
            "--acl-library" => a.library = Some(PathBuf::from(value("--acl-library")?)),
            "--repeat" => {
                let v = value("--repeat")?;
                a.repeat = v.parse().ok().filter(|&n| n >= 1).ok_or(format!("--repeat needs a positive integer, got '{v}'"))?;
            }
            "--no-min-capacity" => a.min_capacity = false,
            "--warm" => a.warm = true,
            "--json" => a.json = true,
            "--svg" => a.svg = Some(PathBuf::from(value("--svg")?)),
            "--progress" => a.progress = true,
            f if f.starts_with('-') && f.len() > 1 => return Err(format!("unknown option '{f}'")),
            _ => a.traces.push(PathBuf::from(arg)),
        }
    }
    if a.traces.is_empty() {
        return Err("no trace given".into());
    }
    Ok(Some(a))
}

fn default_library() -> PathBuf {
    if let Some(p) = std::env::var_os(ACL_LIBRARY_ENV).filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join("libascendcl.so")))
        .unwrap_or_else(|| PathBuf::from("libascendcl.so"))
}

/// `\r`-redrawn status line on stderr.
struct Progress {
    on: bool,
    width: usize,
}

impl Progress {
    fn show(&mut self, msg: &str) {
        if !self.on {
            return;
        }
        let line: String = msg.chars().take(110).collect();
        let pad = self.width.saturating_sub(line.chars().count());
        self.width = line.chars().count();
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r{line}{}", " ".repeat(pad));
        let _ = err.flush();
    }
    fn clear(&mut self) {
        if self.on && self.width > 0 {
            let _ = write!(std::io::stderr(), "\r{}\r", " ".repeat(self.width));
            self.width = 0;
        }
    }
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(Some(a)) => a,
        Ok(None) => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("npualloc-replay: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let library = args.library.clone().unwrap_or_else(default_library);
    if !library.exists() {
        eprintln!(
            "npualloc-replay: the ACL emulator library '{}' does not exist; build it with `cargo build --workspace` \
             (or pass --acl-library / set {ACL_LIBRARY_ENV})",
            library.display()
        );
        return ExitCode::from(1);
    }
    let emu = match Emulator::load(&library) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("npualloc-replay: {e}");
            return ExitCode::from(1);
        }
    };
    // Every trace is read and checked before anything runs.
    let mut prepared = Vec::new();
    for path in &args.traces {
        match npualloc::trace::parse_file(path) {
            Ok(t) => {
                let name = path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
                prepared.push(Prepared::new(&name, &t));
            }
            Err(e) => {
                eprintln!("npualloc-replay: malformed trace: {e}");
                return ExitCode::from(1);
            }
        }
    }
    let mut targets: Vec<Target> = if args.configs.is_empty() {
        vec![Target::npualloc("")]
    } else {
        args.configs.iter().map(|c| Target::npualloc(c)).collect()
    };
    targets.extend(args.baselines.iter().cloned());
    let opts = Options {
        repeat: args.repeat,
        min_capacity: args.min_capacity,
        series: args.svg.is_some(),
        segment_map: args.svg.is_some(),
        warm: args.warm,
    };
    let mut progress = Progress { on: args.progress || std::io::stderr().is_terminal(), width: 0 };
    let mut all: Vec<Vec<Report>> = Vec::new();
    let total = prepared.len();
    for (i, p) in prepared.iter().enumerate() {
        let reports = npualloc::replay::replay_trace(&emu, p, &targets, &opts, &mut |msg| {
            progress.show(&format!("[{}/{total}] {msg}", i + 1))
        });
        all.push(reports);
    }
    progress.clear();
    let flat: Vec<Report> = all.iter().flatten().cloned().collect();
    if args.json {
        print!("{}", table::json_document(&flat));
    } else {
        print!("{}", table::text_table(&flat));
    }
    if let Some(path) = &args.svg {
        let figures: Vec<Figure<'_>> = prepared.iter().zip(&all).map(|(trace, reports)| Figure { trace, reports }).collect();
        if let Err(e) = std::fs::write(path, svg::render(&figures)) {
            eprintln!("npualloc-replay: cannot write '{}': {e}", path.display());
            return ExitCode::from(1);
        }
    }
    ExitCode::SUCCESS
}
