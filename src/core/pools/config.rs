//! A pool's configuration (`npualloc_pool_create`'s `"key:value,..."`): `sleep`, `use_on_oom` (whether
//! requests that run out may take its cached memory), and its blocks' `Shape` (`alignment`, `no_split`).

use crate::core::alloc::policy::{Shape, MAX_POOL_ALIGNMENT};
use crate::error::{Error, Result};

/// What sleep does to a pool's live blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SleepMode {
    /// They stay on the device.
    #[default]
    Keep,
    /// Copied to host memory, their device memory given back.
    Offload,
    /// Given back without a copy (they read as undefined after wake).
    Discard,
}

impl SleepMode {
    pub fn name(self) -> &'static str {
        match self {
            SleepMode::Keep => "keep",
            SleepMode::Offload => "offload",
            SleepMode::Discard => "discard",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolConfig {
    pub sleep: SleepMode,
    pub use_on_oom: bool,
    /// `alignment` in bytes (0: not given, the policy's 512).
    pub alignment: usize,
    pub no_split: bool,
}

fn parse_bool(key: &str, value: &str) -> Result<bool> {
    if value.eq_ignore_ascii_case("true") || value == "1" {
        Ok(true)
    } else if value.eq_ignore_ascii_case("false") || value == "0" {
        Ok(false)
    } else {
        Err(Error::bad_config(key, format!("{key} must be true or false, got '{value}'")))
    }
}

/// `alignment`: bytes, or a number with `k` or `m`; a power of two up to 2 MiB.
fn parse_alignment(value: &str) -> Result<usize> {
    let lower = value.to_ascii_lowercase();
    let (digits, unit) = [('m', 1usize << 20), ('k', 1 << 10)]
        .into_iter()
        .find_map(|(suffix, unit)| Some((lower.strip_suffix(suffix)?, unit)))
        .unwrap_or((&lower, 1));
    let bytes = digits.trim().parse::<usize>().ok().and_then(|n| n.checked_mul(unit));
    match bytes {
        Some(b) if b.is_power_of_two() && b <= MAX_POOL_ALIGNMENT => Ok(b),
        _ => Err(Error::bad_config(
            "alignment",
            format!("alignment must be a power of two of at most 2m (bytes, or with k or m), got '{value}'"),
        )),
    }
}

impl PoolConfig {
    /// Parses `"key:value,..."` (None or empty: the defaults). Unknown keys, repeated keys and bad values are
    /// BadConfig naming the key.
    pub fn parse(text: Option<&str>) -> Result<PoolConfig> {
        let mut config = PoolConfig::default();
        let mut seen: Vec<&str> = Vec::new();
        for item in text.unwrap_or("").split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let Some((key, value)) = item.split_once(':') else {
                return Err(Error::bad_config(item, format!("pool config entry '{item}' is not key:value")));
            };
            let (key, value) = (key.trim(), value.trim());
            if seen.contains(&key) {
                return Err(Error::bad_config(key, format!("{key} is given twice in the pool config")));
            }
            match key {
                "sleep" => {
                    let modes = [SleepMode::Keep, SleepMode::Offload, SleepMode::Discard];
                    config.sleep = modes.into_iter().find(|m| m.name() == value).ok_or_else(|| {
                        Error::bad_config(key, format!("sleep must be keep, offload or discard, got '{value}'"))
                    })?;
                }
                "use_on_oom" => config.use_on_oom = parse_bool(key, value)?,
                "no_split" => config.no_split = parse_bool(key, value)?,
                "alignment" => config.alignment = parse_alignment(value)?,
                _ => {
                    return Err(Error::bad_config(
                        key,
                        format!("unknown pool config key '{key}' (known: sleep, use_on_oom, alignment, no_split)"),
                    ))
                }
            }
            seen.push(key);
        }
        Ok(config)
    }

    pub fn shape(&self) -> Shape {
        Shape::new(self.alignment, self.no_split)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_config_keys_values_and_refusals() {
        assert_eq!(PoolConfig::parse(None).unwrap(), PoolConfig::default());
        assert_eq!(PoolConfig::parse(Some("")).unwrap(), PoolConfig::default());
        let c = PoolConfig::parse(Some("sleep:offload, use_on_oom:True")).unwrap();
        assert_eq!(c, PoolConfig { sleep: SleepMode::Offload, use_on_oom: true, ..Default::default() });
        assert_eq!(PoolConfig::default().shape(), Shape::PLAIN);
        for (text, align) in [("alignment:2m", 2 << 20), ("alignment:64K", 64 << 10), ("alignment:4096", 4096)] {
            let c = PoolConfig::parse(Some(text)).unwrap();
            assert_eq!((c.shape().align(), c.shape().no_split), (align, false), "{text}");
        }
        // Below the policy's 512 every block is aligned already.
        assert_eq!(PoolConfig::parse(Some("alignment:64")).unwrap().shape(), Shape::PLAIN);
        let c = PoolConfig::parse(Some("no_split:true")).unwrap();
        assert_eq!((c.shape().align(), c.shape().no_split), (2 << 20, true));
        assert_eq!(PoolConfig::parse(Some("no_split:1,alignment:64k")).unwrap().shape().align(), 2 << 20);
        assert_eq!(PoolConfig::parse(Some("sleep:discard")).unwrap().sleep, SleepMode::Discard);
        assert_eq!(PoolConfig::parse(Some("sleep:keep,use_on_oom:0")).unwrap(), PoolConfig::default());
        for (text, key) in [
            ("bogus:1", "bogus"),
            ("sleep:nap", "sleep"),
            ("use_on_oom:maybe", "use_on_oom"),
            ("sleep:keep,sleep:offload", "sleep"),
            ("sleep", "sleep"),
            ("no_split:yes", "no_split"),
            ("alignment:3000", "alignment"),
            ("alignment:4m", "alignment"),
            ("alignment:0", "alignment"),
            ("alignment:-2", "alignment"),
            ("alignment:1g", "alignment"),
            ("alignment:99999999999999999999m", "alignment"),
        ] {
            match PoolConfig::parse(Some(text)) {
                Err(Error::BadConfig { key: k, reason }) => {
                    assert_eq!(k, key, "{text}: {reason}");
                    assert!(reason.contains(key), "{text}: {reason}");
                }
                other => panic!("{text}: expected BadConfig, got {other:?}"),
            }
        }
    }
}
