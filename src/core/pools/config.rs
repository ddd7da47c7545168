//! A pool's configuration (`npualloc_pool_create`'s `"key:value,..."`):
//! `sleep` (what `npualloc_sleep` does to the pool's live blocks) and
//! `use_on_oom` (whether other requests may take its cached memory when
//! they run out).

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

/// A pool's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolConfig {
    pub sleep: SleepMode,
    pub use_on_oom: bool,
}

impl PoolConfig {
    /// Parses `"key:value,..."` (None or empty: the defaults). Unknown keys,
    /// repeated keys and bad values are BadConfig naming the key.
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
                    config.sleep = match value {
                        "keep" => SleepMode::Keep,
                        "offload" => SleepMode::Offload,
                        "discard" => SleepMode::Discard,
                        _ => {
                            return Err(Error::bad_config(
                                key,
                                format!("sleep must be keep, offload or discard, got '{value}'"),
                            ))
                        }
                    }
                }
                "use_on_oom" => {
                    config.use_on_oom = if value.eq_ignore_ascii_case("true") || value == "1" {
                        true
                    } else if value.eq_ignore_ascii_case("false") || value == "0" {
                        false
                    } else {
                        return Err(Error::bad_config(key, format!("use_on_oom must be true or false, got '{value}'")));
                    }
                }
                _ => {
                    return Err(Error::bad_config(
                        key,
                        format!("unknown pool config key '{key}' (known: sleep, use_on_oom)"),
                    ))
                }
            }
            seen.push(key);
        }
        Ok(config)
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
        assert_eq!(c, PoolConfig { sleep: SleepMode::Offload, use_on_oom: true });
        assert_eq!(PoolConfig::parse(Some("sleep:discard")).unwrap().sleep, SleepMode::Discard);
        assert_eq!(PoolConfig::parse(Some("sleep:keep,use_on_oom:0")).unwrap(), PoolConfig::default());
        for (text, key) in [
            ("bogus:1", "bogus"),
            ("sleep:nap", "sleep"),
            ("use_on_oom:maybe", "use_on_oom"),
            ("sleep:keep,sleep:offload", "sleep"),
            ("sleep", "sleep"),
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
