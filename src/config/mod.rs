//! Allocator configuration, parsed once into an immutable value; the allocator receives a `&Config` and never
//! reads the environment afterwards. The keys, their defaults and units are listed once, in [`keys::KEYS`]; see
//! [`keys::help_text`].
//!
//! A config string has the grammar users of `PYTORCH_NPU_ALLOC_CONF` know:
//! ```text
//! config  = entry *( "," entry )
//! entry   = key ":" value | ""            ; empty entries are skipped
//! ```
//! - Whitespace around keys and values is ignored; an empty string, or one of only commas and whitespace, gives
//!   the defaults.
//! - An entry is split at its first `:`, so paths (`trace`, `acl_library`) may contain `:` but not `,`; their
//!   leading and trailing whitespace is dropped.
//! - A value that starts with `[` runs to the matching `]`, commas included (`roundup_power2_divisions:[256:1,>:4]`).
//! - Each key may appear once. Key names are case-sensitive.
//! - Every problem is an [`Error::BadConfig`] naming the key (or the keyless entry), what is allowed and what
//!   was given. A key with no effect in the configuration given is refused, and no key changes another's default.

mod env;
pub mod keys;
mod parse;
pub mod roundup;
mod size;

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;

use crate::error::Error;

pub use env::{set_read_pytorch_alloc_conf, PYTORCH_ENV_VAR, TORCH_NPU_ENV_VAR, TORCH_NPU_ONLY_KEYS};
pub use keys::{Key, KeySpec, ValueKind, KEYS};
pub use roundup::{DivisionsError, RoundupDivisions};

/// The environment variable read when no config string is given.
pub const ENV_VAR: &str = "NPUALLOC_CONF";

/// The mapping unit of the large pool's expandable segments.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum PageSize {
    /// 2 MiB (`page_size:2m`): the runtime's huge page; the default.
    #[default]
    Mib2,
    /// 20 MiB (`page_size:20m`): PyTorch's large-segment size.
    Mib20,
    /// 1 GiB (`page_size:1g`): needs the runtime's 1 GiB huge pages.
    Gib1,
}

impl PageSize {
    #[inline]
    pub fn bytes(self) -> usize {
        match self {
            PageSize::Mib2 => 2 << 20,
            PageSize::Mib20 => 20 << 20,
            PageSize::Gib1 => 1 << 30,
        }
    }

    /// The spelling used in config strings.
    pub fn as_str(self) -> &'static str {
        match self {
            PageSize::Mib2 => "2m",
            PageSize::Mib20 => "20m",
            PageSize::Gib1 => "1g",
        }
    }

    /// Reads `2m`, `20m` or `1g` in any letter case.
    pub fn from_name(s: &str) -> Option<PageSize> {
        [PageSize::Mib2, PageSize::Mib20, PageSize::Gib1].into_iter().find(|p| p.as_str().eq_ignore_ascii_case(s))
    }
}

impl fmt::Display for PageSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The allocator's configuration; `Default` is what an empty string gives. Fields are public for reading; a value
/// built by hand skips validation, and its `Display` form parses back only when every field holds a value the
/// parser could have produced (paths without `,`, valid numbers).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Config {
    /// `expandable_segments`. `None`: on when the runtime has the virtual-memory API, off otherwise.
    pub expandable_segments: Option<bool>,
    /// `max_split_size_mb`, in bytes (at least 20 MiB): cached blocks this large are not split. `None`: no limit.
    pub max_split_size: Option<usize>,
    /// `garbage_collection_threshold`, strictly between 0 and 1. `None`: off.
    pub garbage_collection_threshold: Option<f64>,
    /// `roundup_power2_divisions`. Default: no rounding.
    pub roundup_power2_divisions: RoundupDivisions,
    /// `per_process_memory_fraction`, in (0, 1]. `None`: the whole device.
    pub per_process_memory_fraction: Option<f64>,
    /// `page_size`: the large pool's mapping unit for expandable segments.
    pub page_size: PageSize,
    /// `release_threshold_mb`, in bytes: cache above it is released eagerly. `None`: kept until `empty_cache` or OOM.
    pub release_threshold: Option<usize>,
    /// `trace`: where to record an allocation trace. `None`: no trace.
    pub trace: Option<PathBuf>,
    /// `acl_library`: the ACL runtime library to load. `None`: the default search.
    pub acl_library: Option<String>,
    /// `reuse_cache_mb`, in bytes. `None`: the default, 64 MiB.
    pub reuse_cache: Option<usize>,
    /// `reserved_headroom`, at least 0. `None`: off.
    pub reserved_headroom: Option<f64>,
    /// `map_ahead`. `None`: on.
    pub map_ahead: Option<bool>,
    /// `handle_moves`. `None`: on.
    pub handle_moves: Option<bool>,
    /// `max_handle_mb`, in bytes: no large-pool handle crosses a multiple of it from its range's start.
    /// `None`: no bound.
    pub max_handle: Option<usize>,
    /// `oom_snapshot`: where to write a PyTorch-format snapshot when a request fails for lack of memory.
    pub oom_snapshot: Option<PathBuf>,
}

/// Bytes of freed small blocks held for exact-size reuse by default.
pub const DEFAULT_REUSE_CACHE: usize = 64 << 20;

impl Config {
    /// Parses a config string (grammar in the module doc).
    pub fn parse(s: &str) -> Result<Config, Error> {
        let (config, seen, _) = parse::entries(s, &[])?;
        parse::check_conflicts(&config, seen)?;
        Ok(config)
    }

    pub fn reuse_cache_bytes(&self) -> usize {
        self.reuse_cache.unwrap_or(DEFAULT_REUSE_CACHE)
    }

    /// Reads [`ENV_VAR`], else [`TORCH_NPU_ENV_VAR`] (or [`PYTORCH_ENV_VAR`], when a host turned that on) without
    /// torch_npu-only keys, saying so once on stderr (see `env`). Empty or none set gives the defaults.
    pub fn from_env() -> Result<Config, Error> {
        env::from_process_env()
    }

    /// The config for `npualloc_create`: the given string, or the environment when there is none (NULL). An
    /// empty string gives the defaults without looking at the environment.
    pub fn from_c(config: Option<&str>) -> Result<Config, Error> {
        config.map_or_else(Config::from_env, Config::parse)
    }
}

/// `from_env` with the variable's value passed in (testable without touching the process environment).
fn from_env_value(value: Option<OsString>) -> Result<Config, Error> {
    let Some(value) = value else {
        return Ok(Config::default());
    };
    let Ok(value) = value.into_string() else {
        return Err(Error::bad_config(ENV_VAR, "the variable is not valid UTF-8"));
    };
    Config::parse(&value).map_err(|e| noted(e, &format!("in {ENV_VAR}")))
}

/// `e` with ` ({note})` after its reason, when it is a `BadConfig`.
fn noted(e: Error, note: &str) -> Error {
    match e {
        Error::BadConfig { key, reason } => Error::BadConfig { key, reason: format!("{reason} ({note})") },
        other => other,
    }
}

/// The canonical string: `key:value,...` for the keys that differ from the default, in table order (the default
/// config is the empty string). `Config::parse` reads it back to an equal value.
impl fmt::Display for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mib = |bytes: Option<usize>| bytes.map(size::format_mib);
        let divisions = &self.roundup_power2_divisions;
        let entries = [
            (Key::ExpandableSegments, self.expandable_segments.map(|v| v.to_string())),
            (Key::MaxSplitSizeMb, mib(self.max_split_size)),
            (Key::GarbageCollectionThreshold, self.garbage_collection_threshold.map(|v| v.to_string())),
            (Key::RoundupPower2Divisions, (*divisions != RoundupDivisions::none()).then(|| divisions.to_string())),
            (Key::PerProcessMemoryFraction, self.per_process_memory_fraction.map(|v| v.to_string())),
            (Key::PageSize, (self.page_size != PageSize::default()).then(|| self.page_size.to_string())),
            (Key::ReleaseThresholdMb, mib(self.release_threshold)),
            (Key::Trace, self.trace.as_ref().map(|p| p.display().to_string())),
            (Key::AclLibrary, self.acl_library.clone()),
            (Key::ReuseCacheMb, mib(self.reuse_cache)),
            (Key::ReservedHeadroom, self.reserved_headroom.map(|v| v.to_string())),
            (Key::MapAhead, self.map_ahead.map(|v| v.to_string())),
            (Key::OomSnapshot, self.oom_snapshot.as_ref().map(|p| p.display().to_string())),
            (Key::HandleMoves, self.handle_moves.map(|v| v.to_string())),
            (Key::MaxHandleMb, mib(self.max_handle)),
        ];
        let mut sep = "";
        for (key, value) in entries.into_iter().filter_map(|(key, v)| Some((key, v?))) {
            write!(f, "{sep}{}:{value}", key.name())?;
            sep = ",";
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
