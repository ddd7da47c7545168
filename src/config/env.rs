//! Where the environment's config comes from: `NPUALLOC_CONF`, or, when it
//! is unset, `PYTORCH_NPU_ALLOC_CONF`, where torch_npu users keep their
//! allocator tuning.
//!
//! The two share the grammar (the module doc of `config`). Read from
//! `PYTORCH_NPU_ALLOC_CONF`, a key only torch_npu has ([`TORCH_NPU_ONLY_KEYS`])
//! is left out and listed as ignored, since it tunes torch_npu's own
//! allocator; any other key npualloc lacks is refused as in `NPUALLOC_CONF`.
//! `max_split_size_mb` there without `expandable_segments` means fixed
//! segments, torch_npu's default, which the logged line says.
//! When `PYTORCH_NPU_ALLOC_CONF` is involved (read, or set but shadowed by
//! `NPUALLOC_CONF`), one line on stderr, once per process, says which
//! variable was used. `NPUALLOC_CONF` set to the empty string counts as set:
//! the defaults, and `PYTORCH_NPU_ALLOC_CONF` is not read.

use std::ffi::OsString;

use super::{parse, Config, ENV_VAR};
use crate::error::Error;

/// torch_npu's config variable, read when [`ENV_VAR`] is unset.
pub const TORCH_NPU_ENV_VAR: &str = "PYTORCH_NPU_ALLOC_CONF";

/// Keys torch_npu's allocator takes that npualloc does not: torch_npu's own
/// keys (`NPUAllocatorConfig::getKeys`, `NPUAllocatorConfig.h`) and the
/// PyTorch keys it accepts (`kNPUSupportAccKeys`, `NPUAllocatorConfig.cpp`),
/// less the keys both allocators take (docs/anchors.md §b).
pub const TORCH_NPU_ONLY_KEYS: &[&str] = &[
    "base_addr_aligned_kb",
    "large_segment_size_mb",
    "max_non_split_rounding_mb",
    "multi_stream_lazy_reclaim",
    "pin_memory_expandable_segments",
    "pinned_max_cached_size_mb",
    "pinned_max_round_threshold_mb",
    "pinned_mem_register",
    "pinned_reserve_segment_size_mb",
    "pinned_use_background_threads",
    "release_lock_on_npumalloc",
    "segment_size_mb",
    "throw_on_npumalloc_oom",
];

/// The config of the environment, and the line to log about its source
/// (`None`: nothing to say, `PYTORCH_NPU_ALLOC_CONF` is not set).
pub(super) fn choose(ours: Option<OsString>, torch_npu: Option<OsString>) -> Result<(Config, Option<String>), Error> {
    if ours.is_some() {
        let config = super::from_env_value(ours)?;
        let log = torch_npu
            .map(|_| format!("npualloc: config from {ENV_VAR}; {TORCH_NPU_ENV_VAR} is set too and is not read"));
        return Ok((config, log));
    }
    let Some(value) = torch_npu else {
        return Ok((Config::default(), None));
    };
    let where_ = format!("in {TORCH_NPU_ENV_VAR}, read because {ENV_VAR} is unset");
    let Ok(value) = value.into_string() else {
        return Err(Error::bad_config(TORCH_NPU_ENV_VAR, format!("the variable is not valid UTF-8 ({where_})")));
    };
    let (config, ignored, fixed_by_default) =
        parse::parse_torch_npu(&value, TORCH_NPU_ONLY_KEYS).map_err(|e| match e {
            Error::BadConfig { key, reason } => Error::BadConfig { key, reason: format!("{reason} ({where_})") },
            other => other,
        })?;
    let mut log = format!("npualloc: {ENV_VAR} is unset; config from {TORCH_NPU_ENV_VAR}='{value}'");
    if fixed_by_default {
        log += "; fixed segments (expandable_segments:false), as torch_npu reads max_split_size_mb \
                 without expandable_segments";
    }
    if !ignored.is_empty() {
        log += &format!("; ignored torch_npu-only keys: {}", ignored.join(", "));
    }
    Ok((config, Some(log)))
}

/// [`choose`] over the process environment, logging its line once.
pub(super) fn from_process_env() -> Result<Config, Error> {
    static LOGGED: std::sync::Once = std::sync::Once::new();
    let (config, log) = choose(std::env::var_os(ENV_VAR), std::env::var_os(TORCH_NPU_ENV_VAR))?;
    if let Some(line) = log {
        LOGGED.call_once(|| eprintln!("{line}"));
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::keys::FOREIGN_KEYS;
    use crate::config::{Key, PageSize};

    fn some(s: &str) -> Option<OsString> {
        Some(s.into())
    }

    #[test]
    fn torch_npu_only_keys_are_foreign_to_npualloc() {
        for name in TORCH_NPU_ONLY_KEYS {
            assert_eq!(Key::from_name(name), None, "{name} is one of ours");
            assert!(FOREIGN_KEYS.contains(name), "{name} is missing from FOREIGN_KEYS");
        }
    }

    #[test]
    fn ours_wins_and_says_the_other_is_not_read() {
        let (c, log) = choose(some("page_size:1g"), some("page_size:20m")).unwrap();
        assert_eq!(c.page_size, PageSize::Gib1);
        assert_eq!(
            log.as_deref(),
            Some("npualloc: config from NPUALLOC_CONF; PYTORCH_NPU_ALLOC_CONF is set too and is not read")
        );
        // Set but empty is set: the defaults, not the other variable.
        let (c, _) = choose(some(""), some("page_size:20m")).unwrap();
        assert_eq!(c, Config::default());
        // Alone, nothing is logged.
        let (c, log) = choose(some("page_size:20m"), None).unwrap();
        assert_eq!((c.page_size, log), (PageSize::Mib20, None));
        assert_eq!(choose(None, None).unwrap(), (Config::default(), None));
    }

    #[test]
    fn torch_npu_variable_is_read_when_ours_is_unset() {
        let (c, log) = choose(None, some("expandable_segments:True,base_addr_aligned_kb:16")).unwrap();
        assert_eq!(c.expandable_segments, Some(true));
        assert_eq!(
            log.as_deref(),
            Some(
                "npualloc: NPUALLOC_CONF is unset; config from \
                 PYTORCH_NPU_ALLOC_CONF='expandable_segments:True,base_addr_aligned_kb:16'; \
                 ignored torch_npu-only keys: base_addr_aligned_kb"
            )
        );
        let (c, log) = choose(None, some("garbage_collection_threshold:0.6,roundup_power2_divisions:4")).unwrap();
        assert_eq!(c.garbage_collection_threshold, Some(0.6));
        assert!(!log.unwrap().contains("ignored"));
    }

    #[test]
    fn torch_npu_variable_errors_say_where_they_come_from() {
        // A key npualloc lacks that is not torch_npu's is refused, as usual.
        match choose(None, some("bogus_key:1")) {
            Err(Error::BadConfig { key, reason }) => {
                assert_eq!(key, "bogus_key");
                assert!(
                    reason.ends_with("(in PYTORCH_NPU_ALLOC_CONF, read because NPUALLOC_CONF is unset)"),
                    "{reason}"
                );
            }
            other => panic!("{other:?}"),
        }
        // Shared keys keep their rules (max_split_size_mb with expandable segments).
        let e = choose(None, some("expandable_segments:True,max_split_size_mb:64")).unwrap_err();
        assert!(matches!(&e, Error::BadConfig { key, .. } if key == "max_split_size_mb"), "{e}");
        // A bad value of a shared key, too.
        let e = choose(None, some("page_size:3m,segment_size_mb:8")).unwrap_err();
        assert!(matches!(&e, Error::BadConfig { key, .. } if key == "page_size"), "{e}");
    }

    #[test]
    fn torch_npu_variable_split_limit_alone_means_fixed_segments() {
        // torch_npu's default is fixed segments: its users set max_split_size_mb alone.
        let (c, log) = choose(None, some("max_split_size_mb:128")).unwrap();
        assert_eq!((c.expandable_segments, c.max_split_size), (Some(false), Some(128 << 20)));
        assert!(log.unwrap().contains("; fixed segments (expandable_segments:false), as torch_npu reads"));
        // Said outright, either way, it is taken as given.
        let (c, log) = choose(None, some("expandable_segments:False,max_split_size_mb:128")).unwrap();
        assert_eq!(c.expandable_segments, Some(false));
        assert!(!log.unwrap().contains("fixed segments"));
        assert!(choose(None, some("expandable_segments:True,max_split_size_mb:128")).is_err());
        // Without a split limit npualloc's own default stays.
        let (c, _) = choose(None, some("page_size:1g")).unwrap();
        assert_eq!(c.expandable_segments, None);
        // A key of expandable segments beside it says why segments are fixed.
        match choose(None, some("max_split_size_mb:128,page_size:1g")) {
            Err(Error::BadConfig { key, reason }) => {
                assert_eq!(key, "page_size");
                assert!(reason.contains("segments are fixed here because max_split_size_mb is given"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        // NPUALLOC_CONF keeps npualloc's rule: the key alone is refused there.
        assert!(choose(some("max_split_size_mb:128"), None).is_err());
    }
}
