//! The cost model: how long each ACL call takes, so a benchmark on the
//! emulator shows what an allocator's device calls would cost on a card.
//!
//! Every exported ACL function has a latency in nanoseconds, 0 unless set.
//! A call spends it as a sleep after its work, once the emulator's own locks
//! are released (`acl_entry!` calls `spend` outside the body), so calls on
//! different threads and streams overlap as they would on a card, where the
//! time goes to the driver and the device, not to a lock in the runtime.
//! A synchronize call first finishes the queued work (at once, as always)
//! and then sleeps its cost, which stands for waiting on queued kernels.
//!
//! Set by `ACLEMU_COST` (read at the first ACL call) and by
//! `aclemu_set_cost`. Grammar: comma-separated items applied left to right,
//! each a profile name (`device`) or `function=duration` with the unit `ns`,
//! `us`, `ms` or `s`; e.g. `device,aclrtMalloc=1ms`. A variable that does
//! not parse stops the process with a message naming the bad item: a
//! benchmark must not run silently with costs other than the ones asked for.
//!
//! Changing a cost applies to calls already sleeping (they wake and measure
//! again), which lets a test keep a call inside its cost for as long as it
//! needs without relying on timing.

use crate::api::{Api, COUNT};
use crate::ffi::lock;
use std::ffi::c_char;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, Once, OnceLock};
use std::time::{Duration, Instant};

/// The environment variable read at the first call.
pub const ENV: &str = "ACLEMU_COST";

/// Nanoseconds per call, per function.
static COSTS: [AtomicU64; COUNT] = [const { AtomicU64::new(0) }; COUNT];
static FROM_ENV: Once = Once::new();

/// Sleepers wait on `WAKE` (with a timeout) so that a cost change can
/// shorten their sleep; `SLEEP` guards nothing but that handshake.
static SLEEP: Mutex<()> = Mutex::new(());
static WAKE: Condvar = Condvar::new();

const US: u64 = 1_000;
const MS: u64 = 1_000_000;

/// The `device` profile: orders of magnitude of a card, not measurements.
/// The sources (docs/runtime-behaviour.md, "Costs") give ranges; each
/// value sits inside its range, and `emu/README.md` explains each choice.
const DEVICE_PROFILE: &[(Api, u64)] = &[
    // A driver call into the kernel that sets up device page tables; CUDA's
    // equivalent costs tens of microseconds to milliseconds.
    (Api::Malloc, 100 * US),
    (Api::MallocAlign32, 100 * US),
    // A kernel call that tears the mapping down (no synchronization).
    (Api::Free, 50 * US),
    // Kernel calls per physical handle: page allocation and release.
    (Api::MallocPhysical, 50 * US),
    (Api::FreePhysical, 20 * US),
    // Kernel calls per handle, "microseconds to tens of microseconds".
    (Api::MapMem, 20 * US),
    (Api::UnmapMem, 20 * US),
    // Address space only: a kernel call that touches no page.
    (Api::ReserveMemAddress, 10 * US),
    (Api::ReleaseMemAddress, 10 * US),
    // Waiting for queued kernels, "up to milliseconds in inference": a
    // device-wide wait is the longest, an event wait the shortest.
    (Api::SynchronizeDevice, MS),
    (Api::SynchronizeDeviceWithTimeout, MS),
    (Api::SynchronizeStream, 500 * US),
    (Api::SynchronizeStreamWithTimeout, 500 * US),
    (Api::SynchronizeEvent, 200 * US),
    // Host-side: a task written to the stream's queue, no kernel call.
    (Api::RecordEvent, 2 * US),
    (Api::StreamWaitEvent, 2 * US),
    (Api::Memcpy2dAsync, 5 * US),
    (Api::MemcpyAsync, 5 * US),
    (Api::MemsetAsync, 5 * US),
    // Host-side: the status comes from the record state kept on the host.
    (Api::QueryEventStatus, US),
    (Api::StreamQuery, US),
    // Driver resources: an event id or a stream from the kernel module.
    (Api::CreateEvent, 10 * US),
    (Api::CreateEventWithFlag, 10 * US),
    (Api::CreateEventExWithFlag, 10 * US),
    (Api::DestroyEvent, 10 * US),
    (Api::CreateStream, 100 * US),
    (Api::CreateStreamWithConfig, 100 * US),
    (Api::DestroyStream, 100 * US),
    (Api::DestroyStreamForce, 100 * US),
    // A driver query of the memory pools.
    (Api::GetMemInfo, 10 * US),
];

/// What is wrong with an `ACLEMU_COST` value.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum CostError {
    #[error("`{0}` names no ACL function or profile the emulator knows")]
    UnknownName(String),
    #[error("`{0}` is not a duration (a whole number and ns, us, ms or s)")]
    BadDuration(String),
}

/// Parses an `ACLEMU_COST` value into (function, nanoseconds) settings, in
/// the order they apply. Empty items are skipped.
pub fn parse(text: &str) -> Result<Vec<(Api, u64)>, CostError> {
    let mut settings = Vec::new();
    for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        match item.split_once('=') {
            None if item == "device" => settings.extend_from_slice(DEVICE_PROFILE),
            None => return Err(CostError::UnknownName(item.to_string())),
            Some((name, duration)) => {
                let name = name.trim();
                let api = Api::by_name(name).ok_or_else(|| CostError::UnknownName(name.to_string()))?;
                settings.push((api, parse_duration(duration.trim())?));
            }
        }
    }
    Ok(settings)
}

/// `50us`, `2ms`, `700ns`, `1s` in nanoseconds.
fn parse_duration(text: &str) -> Result<u64, CostError> {
    let bad = || CostError::BadDuration(text.to_string());
    let split = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (digits, unit) = text.split_at(split);
    let scale = match unit.trim() {
        "ns" => 1,
        "us" => US,
        "ms" => MS,
        "s" => 1_000 * MS,
        _ => return Err(bad()),
    };
    let n: u64 = digits.parse().map_err(|_| bad())?;
    n.checked_mul(scale).ok_or_else(bad)
}

/// Applies `ACLEMU_COST` once, before any cost is read or set.
fn load_env() {
    FROM_ENV.call_once(|| {
        let Ok(text) = std::env::var(ENV) else {
            return;
        };
        match parse(&text) {
            Ok(settings) => {
                for (api, ns) in settings {
                    COSTS[api as usize].store(ns, Ordering::Relaxed);
                }
            }
            Err(err) => {
                eprintln!("acl-emu: {ENV}={text:?}: {err}");
                std::process::abort();
            }
        }
    });
}

/// The current cost of `api` in nanoseconds.
pub fn of(api: Api) -> u64 {
    load_env();
    COSTS[api as usize].load(Ordering::Acquire)
}

/// Sets the cost of `api` and wakes sleepers so they measure again.
pub fn set(api: Api, ns: u64) {
    load_env();
    COSTS[api as usize].store(ns, Ordering::Release);
    // Notify under the lock: a sleeper holds it from reading the cost until
    // it waits, so it cannot miss the change.
    let _guard = lock(&SLEEP);
    WAKE.notify_all();
}

/// The environment variable that asks for the last stretch of every cost
/// to be spun, not slept (a duration, e.g. `200us`; default none). A timed
/// wait wakes tens of microseconds late (timer slack, scheduling), so a
/// short cost slept whole takes several times what it is charged:
/// comparisons with a runtime that busy-waits its costs (the PyTorch
/// baseline's fake CUDA) set it. Off by
/// default because a spinning call takes a core from the threads doing real
/// work, where a card's runtime would block in the kernel.
pub const SPIN_ENV: &str = "ACLEMU_COST_SPIN";

fn spin_tail() -> Duration {
    static TAIL: OnceLock<Duration> = OnceLock::new();
    *TAIL.get_or_init(|| {
        let Ok(text) = std::env::var(SPIN_ENV) else { return Duration::ZERO };
        match parse_duration(text.trim()) {
            Ok(ns) => Duration::from_nanos(ns),
            Err(err) => {
                eprintln!("acl-emu: {SPIN_ENV}={text:?}: {err}");
                std::process::abort();
            }
        }
    })
}

/// Spends the cost of `api`: sleeps all but its last `ACLEMU_COST_SPIN`,
/// then spins. Called with no emulator lock held. The cost is read again
/// while waiting, so a change applies to calls already inside it.
pub fn spend(api: Api) {
    if of(api) == 0 {
        return;
    }
    let (start, tail) = (Instant::now(), spin_tail());
    let left = || Duration::from_nanos(of(api)).saturating_sub(start.elapsed());
    loop {
        {
            let mut guard = lock(&SLEEP);
            // `left()` read once per wait: read again, it may have fallen
            // below `tail`, and the subtraction would panic outside every
            // entry's panic boundary (spend runs after it).
            loop {
                let now_left = left();
                if now_left <= tail {
                    break;
                }
                guard = WAKE.wait_timeout(guard, now_left - tail).unwrap_or_else(|e| e.into_inner()).0;
            }
        }
        // Spin the tail; a cost raised meanwhile sends the call back to sleep.
        while !left().is_zero() && left() <= tail {
            std::hint::spin_loop();
        }
        if left().is_zero() {
            return;
        }
    }
}

/// Sets the cost in nanoseconds of every later (and every sleeping) call of
/// the ACL function named `function`. 0, or -1 for an unknown or NULL name.
///
/// # Safety
/// `function` must be NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclemu_set_cost(function: *const c_char, nanoseconds: u64) -> i32 {
    let run = || {
        // SAFETY: NULL or NUL-terminated per the contract above.
        match unsafe { Api::by_c_name(function) } {
            Some(api) => {
                set(api, nanoseconds);
                0
            }
            None => -1,
        }
    };
    std::panic::catch_unwind(run).unwrap_or(-1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("700ns"), Ok(700));
        assert_eq!(parse_duration("50us"), Ok(50_000));
        assert_eq!(parse_duration("2ms"), Ok(2_000_000));
        assert_eq!(parse_duration("1s"), Ok(1_000_000_000));
        assert_eq!(parse_duration("0us"), Ok(0));
        for bad in ["", "50", "us", "5 0us", "-1us", "1.5ms", "50mus", "99999999999999999999ns"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert!(parse_duration("18446744073709551615ms").is_err());
    }

    #[test]
    fn the_issue_example_parses_in_order() {
        let got = parse("aclrtMalloc=50us,aclrtMapMem=20us,aclrtSynchronizeStream=2ms").unwrap();
        assert_eq!(got, vec![(Api::Malloc, 50 * US), (Api::MapMem, 20 * US), (Api::SynchronizeStream, 2 * MS)]);
    }

    #[test]
    fn profile_then_override() {
        let got = parse(" device , aclrtMalloc = 1ms ,").unwrap();
        assert_eq!(&got[..DEVICE_PROFILE.len()], DEVICE_PROFILE);
        assert_eq!(got.last(), Some(&(Api::Malloc, MS)));
        assert_eq!(parse(""), Ok(vec![]));
    }

    #[test]
    fn errors_name_the_item() {
        assert_eq!(parse("aclrtMaloc=1us"), Err(CostError::UnknownName("aclrtMaloc".into())));
        assert_eq!(parse("gpu"), Err(CostError::UnknownName("gpu".into())));
        assert_eq!(parse("aclrtFree=fast"), Err(CostError::BadDuration("fast".into())));
    }

    #[test]
    fn the_device_profile_covers_the_calls_an_allocator_makes() {
        for api in [
            Api::Malloc,
            Api::Free,
            Api::MallocPhysical,
            Api::FreePhysical,
            Api::MapMem,
            Api::UnmapMem,
            Api::ReserveMemAddress,
            Api::SynchronizeStream,
            Api::SynchronizeEvent,
            Api::SynchronizeDevice,
            Api::RecordEvent,
            Api::QueryEventStatus,
        ] {
            let ns = DEVICE_PROFILE.iter().find(|(a, _)| *a == api).map(|p| p.1);
            assert!(ns.is_some_and(|ns| ns > 0), "{}", api.name());
        }
    }
}
