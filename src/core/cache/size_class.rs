//! Size classes of the free-block index, two-level segregated fit: in 512-byte units, below 16 units every
//! size has its own class; above, each power of two is cut into 16 equal classes (sizes within 1/16).

/// Sub-classes per power of two (log2).
const SL_BITS: u32 = 4;
const SL_COUNT: usize = 1 << SL_BITS;
const UNIT_SHIFT: u32 = 9;

/// Number of classes: enough for any size below 2^64.
pub const CLASS_COUNT: usize = ((64 - UNIT_SHIFT - SL_BITS + 1) as usize) * SL_COUNT;

/// The class holding blocks of `size` bytes (`size` ≥ 512).
#[inline]
pub fn class_of(size: usize) -> usize {
    let units = size >> UNIT_SHIFT;
    if units < SL_COUNT {
        return units;
    }
    let fl = usize::BITS - 1 - units.leading_zeros();
    let sl = (units >> (fl - SL_BITS)) & (SL_COUNT - 1);
    ((fl - SL_BITS + 1) as usize) * SL_COUNT + sl
}

/// The smallest size that falls in `class`.
#[cfg(test)]
pub fn class_floor(class: usize) -> usize {
    if class < SL_COUNT {
        return class << UNIT_SHIFT;
    }
    let fl = (class / SL_COUNT) as u32 + SL_BITS - 1;
    let sl = class % SL_COUNT;
    ((1usize << fl) + (sl << (fl - SL_BITS))) << UNIT_SHIFT
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_are_monotonic_and_bounded() {
        let mut last = 0;
        let mut size = 512;
        while size < (1usize << 50) {
            let c = class_of(size);
            assert!(c >= last, "class went down at {size}");
            assert!(c < CLASS_COUNT);
            assert!(class_floor(c) <= size, "floor of class {c} above {size}");
            if c + 1 < CLASS_COUNT {
                assert!(class_floor(c + 1) > size);
            }
            last = c;
            size += size / 7 + 512;
        }
        assert!(class_of(usize::MAX & !511) < CLASS_COUNT);
    }

    #[test]
    fn small_sizes_are_exact() {
        for units in 1..16 {
            assert_eq!(class_of(units * 512), units);
            assert_eq!(class_floor(units), units * 512);
        }
        assert_eq!(class_of(16 * 512), 16);
        assert_eq!(class_of(17 * 512), 17);
        assert_eq!(class_of(32 * 512), 32);
        assert_eq!(class_of(34 * 512), 33);
    }
}
