//! npualloc-replay: replays acl-trace v1 files through npualloc
//! configurations and baselines on the ACL emulator, and reports memory,
//! device calls and allocator time. See `--help`.

use clap::{CommandFactory, Parser, ValueEnum};
use clap_complete::Shell;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use npualloc::config::Config;
use npualloc::core::report::pytorch_snapshot::to_pickle;
use npualloc::runtime::loader::ACL_LIBRARY_ENV;
use npualloc_tools::replay::svg::{self, Figure};
use npualloc_tools::replay::{self, table, Emulator, Options, Prepared, Report, Target};
use std::fs::{File, OpenOptions};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// What `--help` shows after the options.
const AFTER_HELP: &str = "\
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

/// Replays acl-trace v1 files (.trace or .trace.gz) on the ACL emulator and
/// prints one row per (trace, configuration).
#[derive(Parser, Debug)]
#[command(name = "npualloc-replay", version, after_help = AFTER_HELP)]
struct Args {
    /// An npualloc config ("key:value,..."); repeatable. Default: one run
    /// with npualloc's defaults.
    #[arg(long = "config", value_name = "STR")]
    configs: Vec<String>,
    /// Also replay through a baseline; repeatable.
    #[arg(long = "baseline", value_name = "NAME", value_enum)]
    baselines: Vec<Baseline>,
    /// The emulator library (default: $NPUALLOC_ACL_LIBRARY, else
    /// libascendcl.so next to this executable).
    #[arg(long = "acl-library", value_name = "PATH")]
    library: Option<PathBuf>,
    /// Timed runs per configuration, best kept.
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    repeat: u32,
    /// Skip the min-capacity bisection.
    #[arg(long)]
    no_min_capacity: bool,
    /// Time a second pass over each trace on the same allocator (what the
    /// first pass left live freed in between): the hot path without growth.
    /// Only ns/op changes; the other columns come from a first pass.
    #[arg(long)]
    warm: bool,
    /// Print one JSON document instead of the table (the table's numbers and the event calls,
    /// sizes in bytes): {"reports": [...]}, indented by two spaces, one object
    /// a row with the keys trace, label, config, ops, peak_requested, then
    /// (when the row was measured) peak_reserved, ratio, ns_per_op,
    /// device_mallocs, device_frees, maps, unmaps, physical_mallocs,
    /// physical_frees, syncs, event_records, event_queries (aclrtRecordEvent and
    /// aclrtQueryEventStatus calls), acl_calls (the calls of each ACL function the
    /// emulator's cost model may charge, by name, the trace's waits included),
    /// ooms, min_capacity (null when not measured or
    /// nothing fits), min_capacity_x or min_capacity_error, and last error
    /// (null, or why the row failed).
    #[arg(long)]
    json: bool,
    /// Write charts of requested vs reserved bytes and the first
    /// configuration's segments at its peak.
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
    /// Write DIR/NAME.pickle for each trace NAME.trace.gz: the first
    /// configuration's state at the trace's peak of reserved memory with the
    /// history of every event before it, in PyTorch's snapshot format (open
    /// it with torch/cuda/_memory_viz.py or pytorch.org/memory_viz).
    #[arg(long, value_name = "DIR")]
    snapshot: Option<PathBuf>,
    /// Show a progress bar on stderr even when it is not a terminal.
    #[arg(long)]
    progress: bool,
    /// Print a completion script for SHELL and exit.
    #[arg(long, value_name = "SHELL", value_enum, exclusive = true)]
    completions: Option<Shell>,
    /// acl-trace v1 files (.trace or .trace.gz).
    #[arg(value_name = "TRACE", required_unless_present = "completions")]
    traces: Vec<PathBuf>,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
enum Baseline {
    /// npualloc with PyTorch's policy (fixed segments)
    Pytorch,
    /// aclrtMalloc/aclrtFree per request, no cache
    Passthrough,
}

impl Baseline {
    fn target(self) -> Target {
        match self {
            Baseline::Pytorch => Target::pytorch_policy(),
            Baseline::Passthrough => Target::Passthrough,
        }
    }
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

/// A bar over `len` steps on stderr: drawn on a terminal, or anywhere with
/// `forced` (--progress); hidden otherwise.
fn progress_bar(len: u64, forced: bool) -> ProgressBar {
    let target = if std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else if forced {
        // indicatif hides its own stderr target off a terminal.
        ProgressDrawTarget::term_like(Box::new(console::Term::stderr()))
    } else {
        ProgressDrawTarget::hidden()
    };
    let style = ProgressStyle::with_template("{elapsed_precise} [{bar:20}] {pos}/{len} {msg}")
        .expect("a valid template")
        .progress_chars("=> ");
    ProgressBar::with_draw_target(Some(len), target).with_style(style)
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
    // Bad command lines exit with 2 in clap's words; --help and --version with 0.
    let args = Args::parse();
    if let Some(shell) = args.completions {
        clap_complete::generate(shell, &mut Args::command(), "npualloc-replay", &mut std::io::stdout());
        return ExitCode::SUCCESS;
    }
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
        match npualloc_tools::trace::parse_file(path) {
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
    targets.extend(args.baselines.iter().map(|b| b.target()));
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
        repeat: args.repeat as usize,
        min_capacity: !args.no_min_capacity,
        series: args.svg.is_some(),
        segment_map: args.svg.is_some(),
        warm: args.warm,
    };
    // One step a (trace, configuration), then one a trace for --snapshot.
    let runs = prepared.len() * targets.len();
    let snapshots = if args.snapshot.is_some() { prepared.len() } else { 0 };
    let bar = progress_bar((runs + snapshots) as u64, args.progress);
    let mut all: Vec<Vec<Report>> = Vec::new();
    for (i, p) in prepared.iter().enumerate() {
        let reports = replay::replay_trace(&emu, p, &targets, &opts, &mut |k, msg| {
            bar.set_position((i * targets.len() + k) as u64);
            bar.set_message(msg.to_string());
        });
        bar.set_position(((i + 1) * targets.len()) as u64);
        all.push(reports);
    }
    let flat: Vec<Report> = all.iter().flatten().cloned().collect();
    let text = if args.json { table::json_document(&flat) } else { table::text_table(&flat) };
    bar.suspend(|| print!("{text}"));
    if let Some(out) = svg_out {
        let figures: Vec<Figure<'_>> =
            prepared.iter().zip(&all).map(|(trace, reports)| Figure { trace, reports }).collect();
        if let Err(e) = out.write(svg::render(&figures).as_bytes()) {
            bar.finish_and_clear();
            eprintln!("npualloc-replay: --svg: {e}");
            return ExitCode::from(1);
        }
    }
    if let Some(dir) = &args.snapshot {
        let config = args.configs.first().map_or("", String::as_str);
        for (i, p) in prepared.iter().enumerate() {
            bar.set_message(format!("{} | snapshot at peak", p.name));
            let path = dir.join(replay::peak_snapshot::file_name(&p.name));
            let written = replay::peak_snapshot::snapshot_at_peak(&emu, p, config).and_then(|(snap, _)| {
                std::fs::write(&path, to_pickle(&snap)).map_err(|e| format!("cannot write: {e}"))
            });
            bar.set_position((runs + i + 1) as u64);
            if let Err(e) = written {
                bar.finish_and_clear();
                eprintln!("npualloc-replay: --snapshot '{}': {e}", path.display());
                return ExitCode::from(1);
            }
        }
    }
    bar.finish_and_clear();
    let failed = flat.iter().filter(|r| r.result.is_err()).count();
    if failed > 0 {
        eprintln!("npualloc-replay: {failed} of {} rows failed (see 'error:' in the output)", flat.len());
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}
