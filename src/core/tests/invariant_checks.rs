//! The invariant check recounts what the shards keep count of: a free
//! index whose byte count drifted from its blocks is caught.

use super::support::{allocator, emu_lock, finish, MIB};
use crate::runtime::Stream;

#[test]
fn a_free_index_byte_count_that_drifted_is_caught() {
    let _g = emu_lock();
    for config in ["expandable_segments:false", ""] {
        let a = allocator(config);
        let big = a.malloc(3 * MIB, Stream::DEFAULT).unwrap();
        let small = a.malloc(4096, Stream::DEFAULT).unwrap();
        a.free(small).unwrap();
        a.check_invariants().unwrap_or_else(|e| panic!("{config}: {e}"));
        for by in [512, -512] {
            a.skew_free_bytes(by);
            let got = a.check_invariants();
            a.skew_free_bytes(-by);
            match got {
                Err(e) => assert!(e.to_string().contains("free index counts"), "{config}, {by}: {e}"),
                Ok(()) => panic!("{config}: a free index {by} bytes off passed the check"),
            }
        }
        a.check_invariants().unwrap_or_else(|e| panic!("{config}: {e}"));
        a.free(big).unwrap();
        finish(a);
    }
}
