//! npualloc-interleave: merges acl-trace v1 files into one, as if their
//! programs shared a device. See `--help` and `npualloc_tools::interleave`.

use clap::Parser;
use npualloc_tools::interleave::{interleave, Input};
use npualloc_tools::trace::parse_file;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

const AFTER_HELP: &str = "\
How: the trace with the most events runs once; each other trace is repeated
as many times as its events still fit in that count (at least once), what it
never frees (its weights) allocated in the first repetition only. Trace k's
streams follow the previous traces' (one stream each: trace k on stream k).
The next event always comes from the trace that has done the smallest share
of its events, the earlier trace on a tie, so all start and end together.
Ids are numbered afresh in the order of the merged allocations.

  npualloc-interleave -o traces/bench/serve-bert-gpt2.trace.gz \\
      traces/bert-encode-varbatch.trace.gz traces/bench/gpt2-generate.trace.gz

exit status: 0 when the trace was written; 1 when a file cannot be read or
written; 2 for a bad command line.
";

/// Interleaves acl-trace v1 files (.trace or .trace.gz) into one trace, as if
/// their programs ran side by side on one device.
#[derive(Parser, Debug)]
#[command(name = "npualloc-interleave", version, after_help = AFTER_HELP)]
struct Args {
    /// The trace to write; gzip-compressed when the name ends in .gz.
    #[arg(short, long, value_name = "FILE")]
    output: PathBuf,
    /// The traces to interleave, in stream order.
    #[arg(value_name = "TRACE", required = true)]
    traces: Vec<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let mut traces = Vec::new();
    for path in &args.traces {
        match parse_file(path) {
            Ok(t) => traces.push(t),
            Err(e) => {
                eprintln!("npualloc-interleave: {e}");
                return ExitCode::from(1);
            }
        }
    }
    let names: Vec<String> = args
        .traces
        .iter()
        .map(|p| p.file_name().map_or_else(|| p.display().to_string(), |n| n.to_string_lossy().into_owned()))
        .collect();
    let inputs: Vec<Input<'_>> = names.iter().zip(&traces).map(|(name, trace)| Input { name, trace }).collect();
    let text = interleave(&inputs).to_text();
    let written = std::fs::File::create(&args.output).and_then(|file| {
        if args.output.extension().is_some_and(|e| e == "gz") {
            let mut gz = flate2::write::GzEncoder::new(file, flate2::Compression::best());
            gz.write_all(text.as_bytes())?;
            gz.finish()?.sync_all()
        } else {
            let mut file = file;
            file.write_all(text.as_bytes())?;
            file.sync_all()
        }
    });
    if let Err(e) = written {
        eprintln!("npualloc-interleave: cannot write '{}': {e}", args.output.display());
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}
