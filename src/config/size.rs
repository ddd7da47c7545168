//! Byte sizes in config values: decimal digits, then an optional unit suffix (letter case ignored):
//! - none: the key's unit, MiB for every `_mb` key (the PyTorch meaning);
//! - `b`: bytes;
//! - `k`, `kb`, `kib`: KiB; `m`, `mb`, `mib`: MiB; `g`, `gb`, `gib`: GiB; `t`, `tb`, `tib`: TiB.
//!
//! All units are binary. No sign, no fraction, no space before the suffix. A value that does not fit in `usize`
//! is an error, never a wrapped number.

pub(crate) const KIB: usize = 1 << 10;
pub(crate) const MIB: usize = 1 << 20;

/// Why a size string was refused (the caller names the key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SizeError {
    /// Not digits followed by a known suffix.
    Syntax,
    /// The number or the byte count does not fit in `usize`.
    TooLarge,
}

/// Parses `s` as a size whose bare numbers are MiB; returns bytes.
pub(crate) fn parse_mib(s: &str) -> Result<usize, SizeError> {
    let digits_end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, suffix) = s.split_at(digits_end);
    if digits.is_empty() {
        return Err(SizeError::Syntax);
    }
    let unit: u64 = match suffix.to_ascii_lowercase().as_str() {
        "" => MIB as u64,
        "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => return Err(SizeError::Syntax),
    };
    // Only digits remain, so the one way to fail is overflow.
    let number: u64 = digits.parse().map_err(|_| SizeError::TooLarge)?;
    let bytes = number.checked_mul(unit).ok_or(SizeError::TooLarge)?;
    usize::try_from(bytes).map_err(|_| SizeError::TooLarge)
}

/// `bytes` as `parse_mib` reads it back exactly: a bare MiB count when possible, else KiB with `k`, else `b`.
pub(crate) fn format_mib(bytes: usize) -> String {
    if bytes % MIB == 0 {
        format!("{}", bytes / MIB)
    } else if bytes % KIB == 0 {
        format!("{}k", bytes / KIB)
    } else {
        format!("{bytes}b")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_numbers_are_mib() {
        assert_eq!(parse_mib("0"), Ok(0));
        assert_eq!(parse_mib("20"), Ok(20 * MIB));
        assert_eq!(parse_mib("007"), Ok(7 * MIB));
    }

    #[test]
    fn suffixes() {
        assert_eq!(parse_mib("512b"), Ok(512));
        assert_eq!(parse_mib("512k"), Ok(512 * KIB));
        assert_eq!(parse_mib("512KiB"), Ok(512 * KIB));
        assert_eq!(parse_mib("3M"), Ok(3 * MIB));
        assert_eq!(parse_mib("3mb"), Ok(3 * MIB));
        assert_eq!(parse_mib("2g"), Ok(2 << 30));
        assert_eq!(parse_mib("2GB"), Ok(2 << 30));
        assert_eq!(parse_mib("1t"), Ok(1 << 40));
    }

    #[test]
    fn syntax_errors() {
        for s in ["", "k", "-1", "+1", "1.5", "1 m", "1x", "1mm", "0x10", " 1", "1e3"] {
            assert_eq!(parse_mib(s), Err(SizeError::Syntax), "{s:?}");
        }
    }

    #[test]
    #[cfg(target_pointer_width = "64")]
    fn overflow_is_an_error() {
        assert_eq!(parse_mib("99999999999999999999"), Err(SizeError::TooLarge));
        // 2^44 MiB = 2^64 bytes: one past the largest u64.
        assert_eq!(parse_mib("17592186044416"), Err(SizeError::TooLarge));
        assert_eq!(parse_mib("17592186044415"), Ok(17592186044415 * MIB));
        assert_eq!(parse_mib("18446744073709551615b"), Ok(usize::MAX));
        assert_eq!(parse_mib("18446744073709551616b"), Err(SizeError::TooLarge));
        assert_eq!(parse_mib("16777216t"), Err(SizeError::TooLarge));
    }

    #[test]
    fn format_round_trips() {
        for bytes in [0, 1, 511, 512, KIB, 1536 * KIB, MIB, 20 * MIB, usize::MAX, usize::MAX - MIB + 1] {
            assert_eq!(parse_mib(&format_mib(bytes)), Ok(bytes), "{bytes}");
        }
        assert_eq!(format_mib(20 * MIB), "20");
        assert_eq!(format_mib(1536 * KIB), "1536k");
        assert_eq!(format_mib(100), "100b");
    }
}
