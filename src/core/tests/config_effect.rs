//! Keys without effect for the segment kind the allocator ends up with are
//! refused at creation, naming the key: on a runtime without the ACL
//! virtual-memory API segments are fixed by default, so the expandable-only
//! keys do nothing there.

use super::support::*;
use crate::config::Config;
use crate::core::DeviceAllocator;
use crate::error::Error;
use crate::runtime::symbols::AclApi;
use crate::runtime::Runtime;

fn without_vmm() -> std::sync::Arc<Runtime> {
    let mut api = AclApi::linked();
    api.aclrtMapMem = None;
    Runtime::from_api(api, "a runtime without aclrtMapMem")
}

fn refused(config: &str) -> (String, String) {
    match DeviceAllocator::with_runtime(Config::parse(config).unwrap(), DEV, without_vmm()) {
        Err(Error::BadConfig { key, reason }) => (key, reason),
        Err(other) => panic!("{config:?}: expected BadConfig, got {other}"),
        Ok(_) => panic!("{config:?}: expected BadConfig, the allocator was created"),
    }
}

#[test]
fn expandable_only_keys_are_refused_where_segments_are_fixed_by_default() {
    let _g = emu_lock();
    for (config, key) in [
        ("page_size:20m", "page_size"),
        ("reserved_headroom:0.02", "reserved_headroom"),
        ("map_ahead:false", "map_ahead"),
        ("handle_moves:false", "handle_moves"),
    ] {
        let (k, reason) = refused(config);
        assert_eq!(k, key, "{config}: {reason}");
        assert!(reason.contains("lacks the ACL virtual-memory API"), "{reason}");
    }
    // Keys that apply to fixed segments are fine there.
    let a = DeviceAllocator::with_runtime(Config::parse("reuse_cache_mb:8").unwrap(), DEV, without_vmm()).unwrap();
    finish(a);
    // And the same keys are fine where segments are expandable.
    finish(allocator("page_size:20m,map_ahead:false"));
}

#[test]
fn a_hand_built_split_limit_never_switches_segment_kinds() {
    let _g = emu_lock();
    let config = Config { max_split_size: Some(64 << 20), ..Config::default() };
    match DeviceAllocator::with_runtime(config, DEV, Runtime::emulated()) {
        Err(Error::BadConfig { key, reason }) => {
            assert_eq!(key, "max_split_size_mb");
            assert!(reason.contains("expandable_segments:false"), "{reason}");
        }
        Err(other) => panic!("expected BadConfig, got {other}"),
        Ok(_) => panic!("a split limit switched the allocator to fixed segments"),
    }
}
