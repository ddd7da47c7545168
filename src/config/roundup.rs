//! `roundup_power2_divisions`: rounding request sizes to power-of-two divisions.
//!
//! PyTorch's rule (docs/source/notes/cuda.md, "Optimizing memory usage with PYTORCH_CUDA_ALLOC_CONF"): a size
//! with 2^k <= size < 2^(k+1) and `d` divisions is rounded up to a multiple of 2^k / d (d = 4: 1200 becomes 1280);
//! ours exactly: [`RoundupDivisions::round`]. Rounding to the 512-byte block granularity, and PyTorch's skipping
//! of division rounding above `max_split_size`, belong to the allocator's size classes. In a list such as
//! `[256:1,512:2,1024:4,>:8]`, `B:d` applies to sizes below B MiB and at or above the previous bound; the first
//! entry also covers every smaller size (as PyTorch's table, starting at 1 MiB, does); `>:d` applies from the
//! last bound on (without it those sizes are not rounded). Unlike PyTorch's fixed 16 intervals (1 MiB..64 GiB),
//! any power-of-two bound is honoured exactly.

use std::fmt;

use super::size::MIB;

/// Divisions for each size range. Built only through the validating constructors, so every division count is
/// 0 or a power of two and the bounds are increasing powers of two.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RoundupDivisions {
    /// `(bound_bytes, divisions)`: `divisions` for sizes below `bound_bytes` (and at or above the previous bound).
    below: Vec<(usize, usize)>,
    /// Divisions for sizes at or above the last bound; for every size when `below` is empty.
    rest: usize,
}

/// Why a divisions value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DivisionsError {
    #[error("the number of divisions must be 0 or a power of two, got {0}")]
    DivisionsNotPowerOfTwo(usize),
    #[error("size bound {0} MiB is not a power of two")]
    BoundNotPowerOfTwo(usize),
    #[error("size bound {0} MiB is too large")]
    BoundTooLarge(usize),
    #[error("size bound {bound} MiB must be larger than the previous bound {previous} MiB")]
    BoundsNotIncreasing { bound: usize, previous: usize },
}

fn check_divisions(divisions: usize) -> Result<usize, DivisionsError> {
    // PyTorch requires a power of two; 0, meaning "none", lets the default be written down (our own choice).
    if divisions == 0 || divisions.is_power_of_two() {
        Ok(divisions)
    } else {
        Err(DivisionsError::DivisionsNotPowerOfTwo(divisions))
    }
}

impl RoundupDivisions {
    /// No rounding for any size (the default).
    pub fn none() -> Self {
        Self::default()
    }

    /// The same number of divisions for every size.
    pub fn uniform(divisions: usize) -> Result<Self, DivisionsError> {
        Ok(Self { below: Vec::new(), rest: check_divisions(divisions)? })
    }

    /// A list: each `(bound_mib, divisions)` gives the divisions for sizes below `bound_mib` MiB; `rest` (the `>`
    /// entry, 0 when absent) covers the sizes at or above the last bound.
    pub fn from_list(entries: &[(usize, usize)], rest: usize) -> Result<Self, DivisionsError> {
        let mut below = Vec::with_capacity(entries.len());
        for (i, &(bound_mib, divisions)) in entries.iter().enumerate() {
            if !bound_mib.is_power_of_two() {
                return Err(DivisionsError::BoundNotPowerOfTwo(bound_mib));
            }
            if let Some(&(previous, _)) = entries[..i].last().filter(|&&(previous, _)| bound_mib <= previous) {
                return Err(DivisionsError::BoundsNotIncreasing { bound: bound_mib, previous });
            }
            let bound = bound_mib.checked_mul(MIB).ok_or(DivisionsError::BoundTooLarge(bound_mib))?;
            below.push((bound, check_divisions(divisions)?));
        }
        Ok(Self { below, rest: check_divisions(rest)? })
    }

    /// The number of divisions for a request of `size` bytes (0 or 1: none). On the hot path: a plain loop
    /// compiles to fewer instructions here than `find` with `map_or`.
    #[inline]
    pub fn divisions_for(&self, size: usize) -> usize {
        for &(bound, divisions) in &self.below {
            if size < bound {
                return divisions;
            }
        }
        self.rest
    }

    /// `size` rounded up to a multiple of 2^k / d (module doc). Unchanged: sizes <= 512 bytes (the block
    /// granularity), d <= 1, a step of 1 byte or less, and a result that would not fit in `usize` (no real
    /// request is that large, and the allocator rejects it anyway).
    #[inline]
    pub fn round(&self, size: usize) -> usize {
        if size <= 512 {
            return size;
        }
        let divisions = self.divisions_for(size);
        if divisions <= 1 {
            return size;
        }
        let floor = 1usize << (usize::BITS - 1 - size.leading_zeros());
        // Both are powers of two, so the step is one too (or 0).
        let step = floor / divisions;
        if step <= 1 {
            return size;
        }
        match size.checked_add(step - 1) {
            Some(padded) => padded & !(step - 1),
            None => size,
        }
    }
}

/// The config-string form: `n` or `[bound:n,...,>:n]`, read back unchanged by the parser.
impl fmt::Display for RoundupDivisions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.below.is_empty() {
            return write!(f, "{}", self.rest);
        }
        let entries: Vec<String> =
            self.below.iter().map(|&(bound, divisions)| format!("{}:{divisions}", bound / MIB)).collect();
        write!(f, "[{}", entries.join(","))?;
        if self.rest != 0 {
            write!(f, ",>:{}", self.rest)?;
        }
        f.write_str("]")
    }
}

#[cfg(test)]
impl RoundupDivisions {
    /// True when no size is rounded.
    pub fn is_none(&self) -> bool {
        self.rest <= 1 && self.below.iter().all(|&(_, d)| d <= 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documented_example() {
        let d = RoundupDivisions::uniform(4).unwrap();
        assert_eq!(d.round(1200), 1280);
        assert_eq!(d.round(1024), 1024);
        assert_eq!(d.round(1025), 1280);
        assert_eq!(d.round(1280), 1280);
        assert_eq!(d.round(1281), 1536);
        assert_eq!(d.round(1793), 2048);
    }

    #[test]
    fn small_sizes_and_no_rounding() {
        let d = RoundupDivisions::uniform(4).unwrap();
        for size in [0, 1, 100, 511, 512] {
            assert_eq!(d.round(size), size);
        }
        let none = RoundupDivisions::none();
        assert!(none.is_none());
        for size in [513, 1200, 3 * MIB + 7, usize::MAX] {
            assert_eq!(none.round(size), size);
            assert_eq!(RoundupDivisions::uniform(1).unwrap().round(size), size);
        }
    }

    #[test]
    fn step_of_one_byte_or_less_is_unchanged() {
        // 600 in [512, 1024): 512 / 1024 divisions = step 0.
        let d = RoundupDivisions::uniform(1024).unwrap();
        assert_eq!(d.round(600), 600);
        let d = RoundupDivisions::uniform(512).unwrap();
        assert_eq!(d.round(600), 600);
        let d = RoundupDivisions::uniform(256).unwrap();
        assert_eq!(d.round(601), 602);
    }

    #[test]
    fn near_usize_max_does_not_overflow() {
        let d = RoundupDivisions::uniform(2).unwrap();
        let top = 1usize << (usize::BITS - 1);
        assert_eq!(d.round(top), top);
        assert_eq!(d.round(top + 1), top + top / 2);
        assert_eq!(d.round(top + top / 2 + 1), top + top / 2 + 1); // would be 2^64
        assert_eq!(d.round(usize::MAX), usize::MAX);
    }

    #[test]
    fn list_lookup_follows_the_documented_ranges() {
        let d = RoundupDivisions::from_list(&[(256, 1), (512, 2), (1024, 4)], 8).unwrap();
        assert_eq!(d.divisions_for(1), 1);
        assert_eq!(d.divisions_for(256 * MIB - 1), 1);
        assert_eq!(d.divisions_for(256 * MIB), 2);
        assert_eq!(d.divisions_for(512 * MIB - 1), 2);
        assert_eq!(d.divisions_for(512 * MIB), 4);
        assert_eq!(d.divisions_for(1024 * MIB - 1), 4);
        assert_eq!(d.divisions_for(1024 * MIB), 8);
        assert_eq!(d.divisions_for(usize::MAX), 8);
        // 300 MiB with 2 divisions of [256, 512) MiB -> 384 MiB.
        assert_eq!(d.round(300 * MIB), 384 * MIB);
        // 600 MiB with 4 divisions of [512, 1024) MiB -> 640 MiB.
        assert_eq!(d.round(600 * MIB), 640 * MIB);
        // Without '>' the sizes above the last bound are not rounded.
        let d = RoundupDivisions::from_list(&[(256, 4)], 0).unwrap();
        assert_eq!(d.divisions_for(256 * MIB), 0);
        assert_eq!(d.round(300 * MIB), 300 * MIB);
        assert_eq!(d.round(3 * MIB + 1), 3 * MIB + 512 * 1024);
    }

    #[test]
    fn constructors_validate() {
        assert_eq!(RoundupDivisions::uniform(3), Err(DivisionsError::DivisionsNotPowerOfTwo(3)));
        assert!(RoundupDivisions::uniform(0).is_ok());
        assert_eq!(RoundupDivisions::from_list(&[(300, 1)], 0), Err(DivisionsError::BoundNotPowerOfTwo(300)));
        assert_eq!(RoundupDivisions::from_list(&[(0, 1)], 0), Err(DivisionsError::BoundNotPowerOfTwo(0)));
        assert_eq!(
            RoundupDivisions::from_list(&[(512, 1), (256, 2)], 0),
            Err(DivisionsError::BoundsNotIncreasing { bound: 256, previous: 512 })
        );
        assert_eq!(
            RoundupDivisions::from_list(&[(512, 1), (512, 2)], 0),
            Err(DivisionsError::BoundsNotIncreasing { bound: 512, previous: 512 })
        );
        let huge = 1usize << (usize::BITS - 1);
        assert_eq!(RoundupDivisions::from_list(&[(huge, 1)], 0), Err(DivisionsError::BoundTooLarge(huge)));
        assert_eq!(RoundupDivisions::from_list(&[(256, 6)], 0), Err(DivisionsError::DivisionsNotPowerOfTwo(6)));
        assert_eq!(RoundupDivisions::from_list(&[], 5), Err(DivisionsError::DivisionsNotPowerOfTwo(5)));
    }

    #[test]
    fn display() {
        assert_eq!(RoundupDivisions::none().to_string(), "0");
        assert_eq!(RoundupDivisions::uniform(8).unwrap().to_string(), "8");
        let d = RoundupDivisions::from_list(&[(256, 1), (512, 2), (1024, 4)], 8).unwrap();
        assert_eq!(d.to_string(), "[256:1,512:2,1024:4,>:8]");
        let d = RoundupDivisions::from_list(&[(256, 1)], 0).unwrap();
        assert_eq!(d.to_string(), "[256:1]");
        // A list with only '>' is the uniform value.
        assert_eq!(RoundupDivisions::from_list(&[], 8).unwrap(), RoundupDivisions::uniform(8).unwrap());
    }
}
