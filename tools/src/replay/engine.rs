//! The replay loop and the two things it drives: a `DeviceAllocator`, or
//! plain `aclrtMalloc`/`aclrtFree` per request (the passthrough baseline).
//!
//! The loop is generic over both and over an observer, so the timed runs
//! compile to a loop with nothing in it but the allocator calls.

use super::emulator::Emulator;
use super::prepared::Step;
use crate::core::DeviceAllocator;
use crate::error::Error;
use crate::runtime::{Runtime, Stream};
use std::time::{Duration, Instant};

/// A failed allocation: out of memory, or something a replay cannot go past.
pub(crate) enum Failure {
    Oom,
    Other(String),
}

pub(crate) trait Backend {
    fn malloc(&mut self, bytes: usize, stream: Stream) -> Result<usize, Failure>;
    fn free(&mut self, addr: usize) -> Result<(), String>;
    fn record_stream(&mut self, addr: usize, stream: Stream) -> Result<(), String>;
    fn wait(&mut self, stream: Stream) -> Result<(), String>;
    /// Device memory held right now.
    fn reserved(&mut self) -> u64;
}

pub(crate) trait Observer {
    fn after<B: Backend>(&mut self, backend: &mut B);
}

/// Observes nothing: the timed runs.
pub(crate) struct Quiet;

impl Observer for Quiet {
    #[inline(always)]
    fn after<B: Backend>(&mut self, _: &mut B) {}
}

/// Reserved bytes after every step.
pub(crate) struct Series(pub Vec<u64>);

impl Observer for Series {
    #[inline]
    fn after<B: Backend>(&mut self, backend: &mut B) {
        let r = backend.reserved();
        self.0.push(r);
    }
}

/// How a run went.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Outcome {
    /// Steps executed (all of them unless stopped at an OOM).
    pub executed: usize,
    /// Allocations that failed with out of memory.
    pub ooms: u64,
    /// False when the run stopped at its first OOM.
    pub completed: bool,
    /// The loop alone.
    pub elapsed: Duration,
}

/// Runs `steps`; `addrs[slot]` holds each live allocation (0 = none, e.g.
/// after an OOM, whose free and uses are then skipped).
#[inline(never)]
pub(crate) fn run<B: Backend, O: Observer>(
    b: &mut B,
    steps: &[Step],
    streams: &[Stream],
    addrs: &mut [usize],
    stop_on_oom: bool,
    obs: &mut O,
) -> Result<Outcome, String> {
    let mut out = Outcome { completed: true, ..Outcome::default() };
    let start = Instant::now();
    for step in steps {
        match *step {
            Step::Alloc { slot, bytes, stream } => match b.malloc(bytes, streams[stream as usize]) {
                Ok(addr) => addrs[slot as usize] = addr,
                Err(Failure::Oom) => {
                    out.ooms += 1;
                    if stop_on_oom {
                        out.completed = false;
                        out.executed += 1;
                        break;
                    }
                }
                Err(Failure::Other(e)) => return Err(e),
            },
            Step::Free { slot } => {
                let addr = std::mem::take(&mut addrs[slot as usize]);
                if addr != 0 {
                    b.free(addr)?;
                }
            }
            Step::Use { slot, stream } => {
                let addr = addrs[slot as usize];
                if addr != 0 {
                    b.record_stream(addr, streams[stream as usize])?;
                }
            }
            Step::Wait { stream } => b.wait(streams[stream as usize])?,
        }
        out.executed += 1;
        obs.after(b);
    }
    out.elapsed = start.elapsed();
    Ok(out)
}

/// npualloc, in any configuration.
pub(crate) struct Npu<'a> {
    pub alloc: &'a DeviceAllocator,
}

impl Backend for Npu<'_> {
    #[inline]
    fn malloc(&mut self, bytes: usize, stream: Stream) -> Result<usize, Failure> {
        self.alloc.malloc(bytes, stream).map_err(|e| match e {
            Error::OutOfMemory(_) => Failure::Oom,
            Error::Runtime { call, .. } if call.is_out_of_memory() => Failure::Oom,
            e => Failure::Other(e.to_string()),
        })
    }
    #[inline]
    fn free(&mut self, addr: usize) -> Result<(), String> {
        self.alloc.free(addr).map_err(|e| e.to_string())
    }
    fn record_stream(&mut self, addr: usize, stream: Stream) -> Result<(), String> {
        self.alloc.record_stream(addr, stream).map_err(|e| e.to_string())
    }
    fn wait(&mut self, stream: Stream) -> Result<(), String> {
        self.alloc.runtime().synchronize_stream(stream).map_err(|e| e.to_string())
    }
    fn reserved(&mut self) -> u64 {
        self.alloc.stats().map(|s| s.reserved_bytes).unwrap_or(0)
    }
}

/// No cache: one `aclrtMalloc`/`aclrtFree` per request.
pub(crate) struct Passthrough<'a> {
    pub rt: &'a Runtime,
    pub emu: &'a Emulator,
    /// Read the emulator's usage after every allocation (observed runs only).
    pub track_peak: bool,
    pub peak: u64,
    pub mallocs: u64,
    pub frees: u64,
}

impl Backend for Passthrough<'_> {
    #[inline]
    fn malloc(&mut self, bytes: usize, _stream: Stream) -> Result<usize, Failure> {
        let addr = self.rt.malloc(bytes).map_err(|e| {
            if e.is_out_of_memory() {
                Failure::Oom
            } else {
                Failure::Other(e.to_string())
            }
        })?;
        self.mallocs += 1;
        if self.track_peak {
            self.peak = self.peak.max(self.emu.usage().malloc_bytes);
        }
        Ok(addr)
    }
    #[inline]
    fn free(&mut self, addr: usize) -> Result<(), String> {
        self.frees += 1;
        self.rt.free(addr).map_err(|e| e.to_string())
    }
    fn record_stream(&mut self, _addr: usize, _stream: Stream) -> Result<(), String> {
        // Memory is returned at once on free; there is nothing to defer.
        Ok(())
    }
    fn wait(&mut self, stream: Stream) -> Result<(), String> {
        self.rt.synchronize_stream(stream).map_err(|e| e.to_string())
    }
    fn reserved(&mut self) -> u64 {
        self.emu.usage().malloc_bytes
    }
}
