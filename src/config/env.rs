//! Where the environment's config comes from: `NPUALLOC_CONF` (set but empty: the defaults); when unset,
//! `PYTORCH_NPU_ALLOC_CONF` (where torch_npu users keep their allocator tuning); when both are unset and the host
//! said its torch_npu reads it ([`set_read_pytorch_alloc_conf`]), `PYTORCH_ALLOC_CONF`, as torch_npu 2.12 and
//! later do (`NPUAllocatorConfig::instance`, `NPUAllocatorConfig.cpp`). Only such a host may turn that on: C hosts
//! and older torch_npu releases never read it, and a value written for CUDA's allocator must not change what they get.
//!
//! From a torch_npu variable, a torch_npu-only key ([`TORCH_NPU_ONLY_KEYS`], which tunes torch_npu's own
//! allocator) is ignored and listed; any other key npualloc lacks is refused. There `max_split_size_mb` without
//! `expandable_segments` means fixed segments, torch_npu's default. Reading or shadowing a torch_npu variable
//! logs one stderr line per process naming the variable used.

use std::ffi::OsString;
use std::sync::atomic::{AtomicBool, Ordering};

use super::{parse, Config, ENV_VAR};
use crate::error::Error;

/// torch_npu's config variable, read when [`ENV_VAR`] is unset.
pub const TORCH_NPU_ENV_VAR: &str = "PYTORCH_NPU_ALLOC_CONF";

/// PyTorch's device-generic config variable; read only when told to ([`set_read_pytorch_alloc_conf`]).
pub const PYTORCH_ENV_VAR: &str = "PYTORCH_ALLOC_CONF";

/// Whether [`PYTORCH_ENV_VAR`] is read: the process's host reads it.
static READ_PYTORCH_ENV_VAR: AtomicBool = AtomicBool::new(false);

/// Whether the environment's config may come from [`PYTORCH_ENV_VAR`] from now on; returns the previous
/// setting. Process-wide, as the environment is.
pub fn set_read_pytorch_alloc_conf(on: bool) -> bool {
    READ_PYTORCH_ENV_VAR.swap(on, Ordering::AcqRel)
}

/// Keys torch_npu's allocator takes that npualloc does not: its own (`NPUAllocatorConfig::getKeys`,
/// `NPUAllocatorConfig.h`) and the PyTorch keys it accepts (`kNPUSupportAccKeys`, `NPUAllocatorConfig.cpp`),
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

/// The environment's config and the line to log about its source (`None`: no torch_npu variable is set).
/// `torch_npu` is the first torch_npu variable set, by name; `shadowed` another one set but not read.
pub(super) fn choose(
    ours: Option<OsString>,
    torch_npu: Option<(&str, OsString)>,
    shadowed: Option<&str>,
) -> Result<(Config, Option<String>), Error> {
    if ours.is_some() {
        let config = super::from_env_value(ours)?;
        let log = torch_npu.map(|(name, _)| match shadowed {
            None => format!("npualloc: config from {ENV_VAR}; {name} is set too and is not read"),
            Some(other) => format!("npualloc: config from {ENV_VAR}; {name} and {other} are set too and are not read"),
        });
        return Ok((config, log));
    }
    let Some((name, value)) = torch_npu else {
        return Ok((Config::default(), None));
    };
    let unset = if name == TORCH_NPU_ENV_VAR {
        format!("{ENV_VAR} is unset")
    } else {
        format!("{ENV_VAR} and {TORCH_NPU_ENV_VAR} are unset")
    };
    let where_ = format!("in {name}, read because {unset}");
    let Ok(value) = value.into_string() else {
        return Err(Error::bad_config(name, format!("the variable is not valid UTF-8 ({where_})")));
    };
    let (config, ignored, fixed_by_default) =
        parse::parse_torch_npu(&value, TORCH_NPU_ONLY_KEYS).map_err(|e| super::noted(e, &where_))?;
    let mut log = format!("npualloc: {unset}; config from {name}='{value}'");
    if let Some(other) = shadowed {
        log += &format!(" ({other} is set too and is not read)");
    }
    if fixed_by_default {
        log += "; fixed segments (expandable_segments:false), as torch_npu reads max_split_size_mb \
                 without expandable_segments";
    }
    if !ignored.is_empty() {
        log += &format!("; ignored torch_npu-only keys: {}", ignored.join(", "));
    }
    Ok((config, Some(log)))
}

/// The torch_npu variable to read, of `PYTORCH_NPU_ALLOC_CONF`'s value `npu` and `PYTORCH_ALLOC_CONF`'s
/// `generic` (None when not read), and the name of one set but not read. torch_npu refuses the two together;
/// npualloc reads torch_npu's own, as earlier releases did, and says so.
fn torch_npu_source(
    npu: Option<OsString>,
    generic: Option<OsString>,
) -> (Option<(&'static str, OsString)>, Option<&'static str>) {
    match (npu, generic) {
        (Some(v), generic) => (Some((TORCH_NPU_ENV_VAR, v)), generic.map(|_| PYTORCH_ENV_VAR)),
        (None, generic) => (generic.map(|v| (PYTORCH_ENV_VAR, v)), None),
    }
}

/// [`choose`] over the process environment, logging its line once.
pub(super) fn from_process_env() -> Result<Config, Error> {
    static LOGGED: std::sync::Once = std::sync::Once::new();
    let generic = READ_PYTORCH_ENV_VAR.load(Ordering::Acquire).then(|| std::env::var_os(PYTORCH_ENV_VAR)).flatten();
    let (torch_npu, shadowed) = torch_npu_source(std::env::var_os(TORCH_NPU_ENV_VAR), generic);
    let (config, log) = choose(std::env::var_os(ENV_VAR), torch_npu, shadowed)?;
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

    fn npu(s: &str) -> Option<(&'static str, OsString)> {
        Some((TORCH_NPU_ENV_VAR, s.into()))
    }

    fn generic(s: &str) -> Option<(&'static str, OsString)> {
        Some((PYTORCH_ENV_VAR, s.into()))
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
        let (c, log) = choose(some("page_size:1g"), npu("page_size:20m"), None).unwrap();
        assert_eq!(c.page_size, PageSize::Gib1);
        assert_eq!(
            log.as_deref(),
            Some("npualloc: config from NPUALLOC_CONF; PYTORCH_NPU_ALLOC_CONF is set too and is not read")
        );
        // Set but empty is set: the defaults, not the other variable.
        let (c, _) = choose(some(""), npu("page_size:20m"), None).unwrap();
        assert_eq!(c, Config::default());
        // Alone, nothing is logged.
        let (c, log) = choose(some("page_size:20m"), None, None).unwrap();
        assert_eq!((c.page_size, log), (PageSize::Mib20, None));
        assert_eq!(choose(None, None, None).unwrap(), (Config::default(), None));
    }

    #[test]
    fn torch_npu_variable_is_read_when_ours_is_unset() {
        let (c, log) = choose(None, npu("expandable_segments:True,base_addr_aligned_kb:16"), None).unwrap();
        assert_eq!(c.expandable_segments, Some(true));
        assert_eq!(
            log.as_deref(),
            Some(
                "npualloc: NPUALLOC_CONF is unset; config from \
                 PYTORCH_NPU_ALLOC_CONF='expandable_segments:True,base_addr_aligned_kb:16'; \
                 ignored torch_npu-only keys: base_addr_aligned_kb"
            )
        );
        let (c, log) = choose(None, npu("garbage_collection_threshold:0.6,roundup_power2_divisions:4"), None).unwrap();
        assert_eq!(c.garbage_collection_threshold, Some(0.6));
        assert!(!log.unwrap().contains("ignored"));
    }

    #[test]
    fn torch_npu_variable_errors_say_where_they_come_from() {
        // A key npualloc lacks that is not torch_npu's is refused, as usual.
        match choose(None, npu("bogus_key:1"), None) {
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
        let e = choose(None, npu("expandable_segments:True,max_split_size_mb:64"), None).unwrap_err();
        assert!(matches!(&e, Error::BadConfig { key, .. } if key == "max_split_size_mb"), "{e}");
        // A bad value of a shared key, too.
        let e = choose(None, npu("page_size:3m,segment_size_mb:8"), None).unwrap_err();
        assert!(matches!(&e, Error::BadConfig { key, .. } if key == "page_size"), "{e}");
    }

    #[test]
    fn pytorch_variable_is_read_as_torch_npu_reads_it() {
        let (c, log) = choose(None, generic("max_split_size_mb:128,segment_size_mb:8"), None).unwrap();
        assert_eq!((c.expandable_segments, c.max_split_size), (Some(false), Some(128 << 20)));
        assert_eq!(
            log.as_deref(),
            Some(
                "npualloc: NPUALLOC_CONF and PYTORCH_NPU_ALLOC_CONF are unset; config from \
                 PYTORCH_ALLOC_CONF='max_split_size_mb:128,segment_size_mb:8'; fixed segments \
                 (expandable_segments:false), as torch_npu reads max_split_size_mb without \
                 expandable_segments; ignored torch_npu-only keys: segment_size_mb"
            )
        );
        match choose(None, generic("expandable_segments:True,max_split_size_mb:128"), None) {
            Err(Error::BadConfig { key, reason }) => {
                assert_eq!(key, "max_split_size_mb");
                assert!(
                    reason.ends_with(
                        "(in PYTORCH_ALLOC_CONF, read because NPUALLOC_CONF and PYTORCH_NPU_ALLOC_CONF are unset)"
                    ),
                    "{reason}"
                );
            }
            other => panic!("{other:?}"),
        }
        // Ours still wins, and the line names both it shadows.
        let (c, log) = choose(some("page_size:1g"), npu("page_size:20m"), Some(PYTORCH_ENV_VAR)).unwrap();
        assert_eq!(c.page_size, PageSize::Gib1);
        assert_eq!(
            log.as_deref(),
            Some(
                "npualloc: config from NPUALLOC_CONF; PYTORCH_NPU_ALLOC_CONF and PYTORCH_ALLOC_CONF \
                 are set too and are not read"
            )
        );
    }

    #[test]
    fn torch_npus_own_variable_comes_before_pytorchs() {
        let v = |s: &str| Some(OsString::from(s));
        assert_eq!(torch_npu_source(None, None), (None, None));
        assert_eq!(torch_npu_source(v("a:1"), None), (Some((TORCH_NPU_ENV_VAR, "a:1".into())), None));
        assert_eq!(torch_npu_source(None, v("b:2")), (Some((PYTORCH_ENV_VAR, "b:2".into())), None));
        assert_eq!(
            torch_npu_source(v("a:1"), v("b:2")),
            (Some((TORCH_NPU_ENV_VAR, "a:1".into())), Some(PYTORCH_ENV_VAR))
        );
        let (_, log) = choose(None, npu("page_size:20m"), Some(PYTORCH_ENV_VAR)).unwrap();
        assert_eq!(
            log.as_deref(),
            Some(
                "npualloc: NPUALLOC_CONF is unset; config from PYTORCH_NPU_ALLOC_CONF='page_size:20m' \
                 (PYTORCH_ALLOC_CONF is set too and is not read)"
            )
        );
    }

    #[test]
    fn torch_npu_variable_split_limit_alone_means_fixed_segments() {
        // torch_npu's default is fixed segments: its users set max_split_size_mb alone.
        let (c, log) = choose(None, npu("max_split_size_mb:128"), None).unwrap();
        assert_eq!((c.expandable_segments, c.max_split_size), (Some(false), Some(128 << 20)));
        assert!(log.unwrap().contains("; fixed segments (expandable_segments:false), as torch_npu reads"));
        // Said outright, either way, it is taken as given.
        let (c, log) = choose(None, npu("expandable_segments:False,max_split_size_mb:128"), None).unwrap();
        assert_eq!(c.expandable_segments, Some(false));
        assert!(!log.unwrap().contains("fixed segments"));
        assert!(choose(None, npu("expandable_segments:True,max_split_size_mb:128"), None).is_err());
        // Without a split limit npualloc's own default stays.
        let (c, _) = choose(None, npu("page_size:1g"), None).unwrap();
        assert_eq!(c.expandable_segments, None);
        // A key of expandable segments beside it says why segments are fixed.
        match choose(None, npu("max_split_size_mb:128,page_size:1g"), None) {
            Err(Error::BadConfig { key, reason }) => {
                assert_eq!(key, "page_size");
                assert!(reason.contains("segments are fixed here because max_split_size_mb is given"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        // NPUALLOC_CONF keeps npualloc's rule: the key alone is refused there.
        assert!(choose(some("max_split_size_mb:128"), None, None).is_err());
    }
}
