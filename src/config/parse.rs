//! The config-string grammar (described in the module doc of `config`) and the value parser of each key.

use std::path::PathBuf;

use super::keys::{self, Key, FOREIGN_KEYS};
use super::roundup::RoundupDivisions;
use super::size::{self, SizeError, MIB};
use super::{Config, PageSize};
use crate::error::Error;

/// The smallest `max_split_size_mb`: PyTorch requires it to exceed the 20 MiB large-segment size (kLargeBuffer;
/// docs/anchors.md §b); we accept 20 itself, since a split limit equal to the segment size is well defined.
const MIN_MAX_SPLIT_SIZE: usize = 20 * MIB;

/// `Config::parse` of a `PYTORCH_NPU_ALLOC_CONF` value, leaving out (unread) entries whose key is in `skip` and
/// returning their names, in order. Read as torch_npu reads it: its segments are fixed unless
/// `expandable_segments:True` (`NPUAllocatorConfig`), so `max_split_size_mb` without `expandable_segments` asks
/// for fixed segments. The `bool` says that default was taken.
pub(super) fn parse_torch_npu<'s>(s: &'s str, skip: &[&str]) -> Result<(Config, Vec<&'s str>, bool), Error> {
    let (mut config, seen, skipped) = entries(s, skip)?;
    let fixed_by_default = config.expandable_segments.is_none() && config.max_split_size.is_some();
    if fixed_by_default {
        config.expandable_segments = Some(false);
    }
    check_conflicts(&config, seen).map_err(|e| {
        let why = "segments are fixed here because max_split_size_mb is given without expandable_segments, \
                   as torch_npu reads it";
        if fixed_by_default {
            super::noted(e, why)
        } else {
            e
        }
    })?;
    Ok((config, skipped, fixed_by_default))
}

/// The entries of `s` applied to the defaults, before cross-key checks: config, bits of keys given, keys left out.
pub(super) fn entries<'s>(s: &'s str, skip: &[&str]) -> Result<(Config, u32, Vec<&'s str>), Error> {
    let mut skipped = Vec::new();
    let mut config = Config::default();
    let mut seen = 0u32;
    for entry in split_entries(s) {
        let entry = entry.trim();
        if entry.is_empty() {
            continue;
        }
        let Some((name, value)) = entry.split_once(':') else {
            return Err(Error::bad_config(
                entry,
                format!("expected 'key:value', got '{entry}' (no ':'); valid keys: {}", keys::key_list()),
            ));
        };
        let (name, value) = (name.trim(), value.trim());
        if name.is_empty() {
            return Err(Error::bad_config(entry, format!("entry '{entry}' has no key before ':'")));
        }
        if skip.contains(&name) {
            skipped.push(name);
            continue;
        }
        let key = Key::from_name(name).ok_or_else(|| unknown_key(name))?;
        if seen & key.bit() != 0 {
            return Err(Error::bad_config(name, "given more than once; each key may appear only once"));
        }
        seen |= key.bit();
        apply(&mut config, key, value)?;
    }
    Ok((config, seen, skipped))
}

fn unknown_key(name: &str) -> Error {
    let what = if FOREIGN_KEYS.contains(&name) {
        "a PyTorch/torch_npu allocator key that npualloc does not support"
    } else {
        "unknown key"
    };
    Error::bad_config(name, format!("{what}; valid keys: {}", keys::key_list()))
}

/// Keys that are valid alone but not together: a key with no effect in the configuration given is refused, and
/// no key changes another key's default (`seen`: the bits of the keys given). `reserved_headroom` moves free pieces
/// itself, never a whole handle, so `handle_moves` does nothing there (Note [moves of wholly free handles]).
pub(super) fn check_conflicts(config: &Config, seen: u32) -> Result<(), Error> {
    let given = |key: Key| seen & key.bit() != 0;
    if config.max_split_size.is_some() && config.expandable_segments != Some(false) {
        let reason = if config.expandable_segments == Some(true) {
            "cannot be combined with expandable_segments:true: expandable segments rely on splitting \
             to reuse mapped pages, so a split limit makes reserved memory grow without bound \
             (PyTorch issue #123548; torch_npu refuses this combination too)"
        } else {
            "applies to fixed segments only, and segments are expandable by default where the runtime \
             has the virtual-memory API; add expandable_segments:false to use it (npualloc does not \
             switch segment kinds because of another key)"
        };
        return Err(Error::bad_config(Key::MaxSplitSizeMb.name(), reason));
    }
    if config.expandable_segments == Some(false) {
        for key in [Key::PageSize, Key::ReservedHeadroom, Key::MapAhead, Key::HandleMoves, Key::MaxHandleMb] {
            if given(key) {
                return Err(Error::bad_config(
                    key.name(),
                    format!(
                        "has no effect with expandable_segments:false: {} applies to expandable segments only",
                        key.name()
                    ),
                ));
            }
        }
    }
    if given(Key::HandleMoves) && config.reserved_headroom.is_some() {
        return Err(Error::bad_config(
            Key::HandleMoves.name(),
            "has no effect with reserved_headroom: that mode moves free pieces itself, synchronizing, \
             to hold reserved memory within its bound, and never moves a handle this way; \
             drop handle_moves or reserved_headroom",
        ));
    }
    if let Some(bytes) = config.max_handle {
        let page = config.page_size.bytes();
        if bytes == 0 || bytes % page != 0 {
            return Err(Error::bad_config(
                Key::MaxHandleMb.name(),
                format!(
                    "must be a whole number of pages of page_size:{} ({} MiB), got {}",
                    config.page_size,
                    page >> 20,
                    size::format_mib(bytes)
                ),
            ));
        }
    }
    if given(Key::MapAhead) && config.reserved_headroom.is_some() {
        return Err(Error::bad_config(
            Key::MapAhead.name(),
            "has no effect with reserved_headroom: that mode maps 4 MiB handles and nothing ahead, \
             so its pages can move; drop map_ahead or reserved_headroom",
        ));
    }
    Ok(())
}

fn apply(config: &mut Config, key: Key, value: &str) -> Result<(), Error> {
    match key {
        Key::ExpandableSegments => config.expandable_segments = Some(parse_bool(key, value)?),
        Key::MaxSplitSizeMb => {
            let bytes = parse_size(key, value)?;
            if bytes < MIN_MAX_SPLIT_SIZE {
                return Err(Error::bad_config(
                    key.name(),
                    format!("must be at least 20 (MiB, the large-segment size), got '{value}'"),
                ));
            }
            config.max_split_size = Some(bytes);
        }
        Key::GarbageCollectionThreshold => {
            let what = "a number between 0 and 1 (exclusive)";
            config.garbage_collection_threshold = Some(parse_number(key, value, what, |t| t > 0.0 && t < 1.0)?);
        }
        Key::RoundupPower2Divisions => config.roundup_power2_divisions = parse_divisions(key, value)?,
        Key::PerProcessMemoryFraction => {
            let what = "a number greater than 0 and at most 1";
            config.per_process_memory_fraction = Some(parse_number(key, value, what, |f| f > 0.0 && f <= 1.0)?);
        }
        Key::PageSize => {
            config.page_size = PageSize::from_name(value).ok_or_else(|| bad_value(key, "one of 2m, 20m, 1g", value))?;
        }
        Key::ReleaseThresholdMb => config.release_threshold = Some(parse_size(key, value)?),
        Key::Trace => config.trace = Some(PathBuf::from(parse_path(key, value)?)),
        Key::OomSnapshot => config.oom_snapshot = Some(PathBuf::from(parse_path(key, value)?)),
        Key::AclLibrary => config.acl_library = Some(parse_path(key, value)?.to_string()),
        Key::ReuseCacheMb => config.reuse_cache = Some(parse_size(key, value)?),
        Key::ReservedHeadroom => {
            let what = "a number of at least 0 (a fraction: 0.02 = 2%)";
            config.reserved_headroom = Some(parse_number(key, value, what, |h| h >= 0.0)?);
        }
        Key::MapAhead => config.map_ahead = Some(parse_bool(key, value)?),
        Key::HandleMoves => config.handle_moves = Some(parse_bool(key, value)?),
        Key::MaxHandleMb => config.max_handle = Some(parse_size(key, value)?),
    }
    Ok(())
}

fn bad_value(key: Key, what: &str, value: &str) -> Error {
    Error::bad_config(key.name(), format!("{} must be {what}, got '{value}'", key.name()))
}

fn parse_bool(key: Key, value: &str) -> Result<bool, Error> {
    // PyTorch takes True/False; lower case and 1/0 are accepted too.
    if value.eq_ignore_ascii_case("true") || value == "1" {
        Ok(true)
    } else if value.eq_ignore_ascii_case("false") || value == "0" {
        Ok(false)
    } else {
        Err(bad_value(key, "true or false (True/False/1/0 also accepted)", value))
    }
}

fn parse_size(key: Key, value: &str) -> Result<usize, Error> {
    size::parse_mib(value).map_err(|e| match e {
        SizeError::Syntax => {
            bad_value(key, "a whole number of MiB, or a number with a unit suffix (b, k, m, g, t)", value)
        }
        SizeError::TooLarge => {
            Error::bad_config(key.name(), format!("{} is too large: '{value}' bytes overflow", key.name()))
        }
    })
}

/// A finite number for which `valid` holds; anything else (NaN included) is refused with `what`.
fn parse_number(key: Key, value: &str, what: &str, valid: fn(f64) -> bool) -> Result<f64, Error> {
    match value.parse::<f64>() {
        Ok(x) if x.is_finite() && valid(x) => Ok(x),
        _ => Err(bad_value(key, what, value)),
    }
}

fn parse_path(key: Key, value: &str) -> Result<&str, Error> {
    if value.is_empty() {
        Err(Error::bad_config(key.name(), format!("{} needs a path, got an empty value", key.name())))
    } else {
        Ok(value)
    }
}

/// `n` or `[bound_mib:n, ..., >:n]`.
fn parse_divisions(key: Key, value: &str) -> Result<RoundupDivisions, Error> {
    let bad = |detail: String| {
        Error::bad_config(
            key.name(),
            format!("{} must be 0, a power of two, or a list like [256:1,512:2,>:4]: {detail}", key.name()),
        )
    };
    let number = |s: &str| -> Result<usize, Error> {
        let s = s.trim();
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad(format!("'{s}' is not a whole number")));
        }
        s.parse::<usize>().map_err(|_| bad(format!("'{s}' is too large")))
    };

    let Some(inner) = value.strip_prefix('[') else {
        let divisions = number(value)?;
        return RoundupDivisions::uniform(divisions).map_err(|e| bad(format!("{e} (in '{value}')")));
    };
    let Some(inner) = inner.strip_suffix(']') else {
        return Err(bad(format!("'{value}' has no closing ']'")));
    };
    let mut entries = Vec::new();
    let mut rest: Option<usize> = None;
    for item in inner.split(',') {
        let item = item.trim();
        if item.is_empty() {
            return Err(bad(format!("empty entry in '{value}'")));
        }
        let Some((bound, divisions)) = item.split_once(':') else {
            return Err(bad(format!("entry '{item}' is not 'size_mb:divisions'")));
        };
        if rest.is_some() {
            return Err(bad(format!("entry '{item}' follows the '>' entry, which must be last")));
        }
        let divisions = number(divisions)?;
        if bound.trim() == ">" {
            rest = Some(divisions);
        } else {
            entries.push((number(bound)?, divisions));
        }
    }
    RoundupDivisions::from_list(&entries, rest.unwrap_or(0)).map_err(|e| bad(format!("{e} (in '{value}')")))
}

/// Splits a config string at top-level commas; a `roundup_power2_divisions` value starting with `[` runs to the
/// next `]`, commas included (an unclosed `[` takes the rest of the string; the value parser reports it).
fn split_entries(s: &str) -> impl Iterator<Item = &str> {
    let mut rest = Some(s);
    std::iter::from_fn(move || {
        let s = rest?;
        // The entry ends at the first comma from `from`: its start, or past the `]` of a bracketed list. Only this
        // key's value is a bracketed list: a path may start with '[' and must not swallow the keys after it.
        let mut from = 0;
        if let Some((key, value)) = s.split_once(':') {
            let value = value.trim_start();
            if !key.contains(',')
                && value.starts_with('[')
                && Key::from_name(key.trim()) == Some(Key::RoundupPower2Divisions)
            {
                let open = s.len() - value.len();
                from = s[open..].find(']').map_or(s.len(), |close| open + close);
            }
        }
        let (entry, next) = match s[from..].find(',') {
            Some(i) => (&s[..from + i], Some(&s[from + i + 1..])),
            None => (s, None),
        };
        rest = next;
        Some(entry)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(s: &str) -> Vec<&str> {
        split_entries(s).collect()
    }

    #[test]
    fn entries_split_at_top_level_commas() {
        const R: &str = "roundup_power2_divisions";
        assert_eq!(split(""), vec![""]);
        assert_eq!(split("a:1,b:2"), vec!["a:1", "b:2"]);
        assert_eq!(split(",,"), vec!["", "", ""]);
        let (list, spaced) = (format!("{R}:[1:2,4:8]"), format!(" {R} : \t[1:2, >:4] "));
        assert_eq!(split(&format!("{list},p:2m")), vec![list.as_str(), "p:2m"]);
        assert_eq!(split(&format!("{spaced},p:2m")), vec![spaced.as_str(), "p:2m"]);
        // '[' only opens a bracket at the start of that key's value.
        assert_eq!(split("t:/a[1,b:2"), vec!["t:/a[1", "b:2"]);
        assert_eq!(split("t:[1,b:2"), vec!["t:[1", "b:2"]);
        assert_eq!(split("a[,b"), vec!["a[", "b"]);
        // An unclosed bracket runs to the end.
        let open = format!("{R}:[1:2,4:8");
        assert_eq!(split(&open), vec![open.as_str()]);
    }
}
