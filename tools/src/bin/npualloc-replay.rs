//! npualloc-replay: replays acl-trace v1 files through npualloc
//! configurations and baselines on the ACL emulator, and reports memory,
//! device calls and allocator time. See `--help`.

use npualloc::config::Config;
use npualloc::runtime::loader::ACL_LIBRARY_ENV;
use npualloc_tools::replay::svg::{self, Figure};
use npualloc_tools::replay::{self, table, Emulator, Options, Prepared, Report, Target};
use std::fs::{File, OpenOptions};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

const USAGE: &str = "\
usage: npualloc-replay [options] TRACE...

Replays acl-trace v1 files (.trace or .trace.gz) on the ACL emulator and
prints one row per (trace, configuration).

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
  --json              print one JSON document instead of the table (the
                      same numbers, sizes in bytes)
  --svg FILE          write charts of requested vs reserved bytes and the
                      first configuration's segments at its peak
  --snapshot DIR      write DIR/NAME.pickle for each trace NAME.trace.gz: the
                      first configuration's state at the trace's peak of
                      reserved memory with the history of every event
                      before it, in PyTorch's snapshot format (open it with
                      torch/cuda/_memory_viz.py or pytorch.org/memory_viz)
  --progress          show progress on stderr even when it is not a terminal
  -h, --help          this text

Every argument is checked before anything is replayed: each config is parsed
and an allocator created with it once, every trace is read, and the --svg
file is opened for writing.

columns (one observed run per row on a 64 GiB emulated device, unless noted):
  trace         the trace's file name
  config        npualloc (defaults), npualloc[CONFIG] for a --config,
                pytorch-policy or passthrough for a --baseline
  ops           steps in the trace: its a, f, u and w lines
  peak req MiB  the most bytes live at once, as the trace asked for them
  peak rsv MiB  the most device memory the configuration held at once
                (mapped or aclrtMalloc'ed, what PyTorch calls reserved)
  ratio         peak rsv / peak req: 1.000 would be no overhead at all
  min cap MiB   the smallest emulated device on which the whole trace
                replays without an out-of-memory failure (bisection, to
                1 MiB or 0.5%); '-' with --no-min-capacity, a reason in
                parentheses when no capacity fits
  min cap x     min cap / peak req: the device a trace needs, relative
                to what it asks for
  ns/op         host time per step of the fastest of --repeat runs,
                allocator calls only (the emulator's calls included)
  malloc/free   aclrtMalloc / aclrtFree calls (fixed segments; the
                passthrough makes one per request)
  map/unmap     aclrtMapMem / aclrtUnmapMem calls (expandable segments)
  phys m/f      aclrtMallocPhysical / aclrtFreePhysical calls: the
                physical memory handles behind expandable segments
  syncs         stream and event synchronizations the allocator made
                itself (the trace's w steps are not counted)
  OOMs          allocations refused as out of memory on the 64 GiB
                device (their frees and uses are skipped)
A configuration that fails part-way shows 'error: ...' after its name.

exit status: 0 when every row was measured; 1 when a file cannot be read
or written, the emulator cannot be loaded, or a row failed; 2 for a bad
command line or a config npualloc refuses.
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
    snapshot: Option<PathBuf>,
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
        snapshot: None,
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
                a.repeat = v
                    .parse()
                    .ok()
                    .filter(|&n| n >= 1)
                    .ok_or(format!("--repeat needs a positive integer, got '{v}'"))?;
            }
            "--no-min-capacity" => a.min_capacity = false,
            "--warm" => a.warm = true,
            "--json" => a.json = true,
            "--svg" => a.svg = Some(PathBuf::from(value("--svg")?)),
            "--snapshot" => a.snapshot = Some(PathBuf::from(value("--snapshot")?)),
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

/// The --svg file, opened before any replay so a bad path fails at once.
/// Created empty when it did not exist; removed again if nothing is written.
struct OutputFile {
    path: PathBuf,
    file: Option<File>,
    created: bool,
}

impl OutputFile {
    fn open(path: &Path) -> Result<OutputFile, String> {
        let existed = path.exists();
        // Not truncated yet: an existing file keeps its contents until the
        // replays are done.
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| format!("cannot write '{}': {e}", path.display()))?;
        Ok(OutputFile { path: path.to_path_buf(), file: Some(file), created: !existed })
    }

    fn write(mut self, bytes: &[u8]) -> Result<(), String> {
        let mut file = self.file.take().expect("written once");
        file.set_len(0)
            .and_then(|()| file.write_all(bytes))
            .and_then(|()| file.flush())
            .map_err(|e| format!("cannot write '{}': {e}", self.path.display()))
    }
}

impl Drop for OutputFile {
    fn drop(&mut self) {
        if self.file.take().is_some() && self.created {
            let _ = std::fs::remove_file(&self.path);
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
    // Config strings first: a typo is found before anything is loaded.
    for config in &args.configs {
        if let Err(e) = Config::parse(config) {
            eprintln!("npualloc-replay: bad --config '{config}': {e}");
            return ExitCode::from(2);
        }
    }
    let svg_out = match args.svg.as_deref().map(OutputFile::open).transpose() {
        Ok(out) => out,
        Err(e) => {
            eprintln!("npualloc-replay: --svg: {e}");
            return ExitCode::from(1);
        }
    };
    if let Some(dir) = &args.snapshot {
        if let Err(e) = std::fs::create_dir_all(dir) {
            eprintln!("npualloc-replay: --snapshot: cannot create '{}': {e}", dir.display());
            return ExitCode::from(1);
        }
    }
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
                let name =
                    path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
                prepared.push(Prepared::new(&name, &t));
            }
            Err(e) if e.line().is_some() => {
                eprintln!("npualloc-replay: malformed trace: {e}");
                return ExitCode::from(1);
            }
            Err(e) => {
                eprintln!("npualloc-replay: {e}");
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
    // Then every configuration is created once on the emulator: what only
    // creation finds (a trace file that cannot be created, expandable
    // segments on a runtime without them) stops the tool here too.
    for (i, target) in targets.iter().enumerate() {
        if let Err(e) = replay::check_target(&emu, target) {
            if i < args.configs.len() {
                eprintln!("npualloc-replay: bad --config '{}': {e}", target.config_text());
            } else if i < targets.len() - args.baselines.len() {
                eprintln!("npualloc-replay: npualloc's default configuration cannot run here: {e}");
            } else {
                eprintln!("npualloc-replay: the {} baseline cannot run here: {e}", target.label());
            }
            return ExitCode::from(2);
        }
    }
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
        let reports = replay::replay_trace(&emu, p, &targets, &opts, &mut |msg| {
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
    if let Some(out) = svg_out {
        let figures: Vec<Figure<'_>> =
            prepared.iter().zip(&all).map(|(trace, reports)| Figure { trace, reports }).collect();
        if let Err(e) = out.write(svg::render(&figures).as_bytes()) {
            eprintln!("npualloc-replay: --svg: {e}");
            return ExitCode::from(1);
        }
    }
    if let Some(dir) = &args.snapshot {
        let config = args.configs.first().map_or("", String::as_str);
        for p in &prepared {
            progress.show(&format!("{} | snapshot at peak", p.name));
            let path = dir.join(replay::peak_snapshot::file_name(&p.name));
            let written = replay::peak_snapshot::snapshot_at_peak(&emu, p, config).and_then(|(snap, _)| {
                std::fs::write(&path, replay::pickle::to_pickle(&snap)).map_err(|e| format!("cannot write: {e}"))
            });
            progress.clear();
            if let Err(e) = written {
                eprintln!("npualloc-replay: --snapshot '{}': {e}", path.display());
                return ExitCode::from(1);
            }
        }
    }
    let failed = flat.iter().filter(|r| r.result.is_err()).count();
    if failed > 0 {
        eprintln!("npualloc-replay: {failed} of {} rows failed (see 'error:' in the output)", flat.len());
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}
