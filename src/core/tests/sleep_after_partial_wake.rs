//! A sleep after a partial wake (`wake_with`) that left some pools asleep
//! is refused, changing nothing: it would have only the woken pools to put
//! to sleep, and returning OK left them on the device.

use super::support::{allocator, budget, check_fill, emu_lock, fill, new_stream, Baseline, GIB, MIB};
use crate::core::pools::config::PoolConfig;
use crate::core::*;
use crate::error::Error;

/// Two offload pools asleep, one woken by name: sleep and sleep_with are
/// INVALID_ARGUMENT saying what to do, the woken pool's pages stay mapped
/// and its block readable, the other still sleeps; once every pool is
/// awake, sleep works again (and is OK when already fully asleep).
#[test]
fn sleep_after_a_partial_wake_is_refused_until_every_pool_is_awake() {
    let _g = emu_lock();
    let base = Baseline::take();
    budget(GIB);
    let a = allocator("expandable_segments:true");
    let s = new_stream();
    let offload = PoolConfig { sleep: SleepMode::Offload, ..PoolConfig::default() };
    let (woken, sleeping) = (a.pool_create(offload).unwrap(), a.pool_create(offload).unwrap());
    let mut blocks = Vec::new();
    for (pool, byte) in [(woken, 0x51), (sleeping, 0x52)] {
        a.pool_begin(pool, Some(s)).unwrap();
        let addr = a.malloc(6 * MIB, s).unwrap();
        a.pool_end(pool, Some(s)).unwrap();
        fill(addr, 6 * MIB, byte);
        blocks.push((addr, byte));
    }
    a.sleep_pools().unwrap();
    assert_eq!(a.sleep_pools().unwrap(), 0, "asleep already: OK, nothing to give back");
    a.wake_with(&[woken]).unwrap();
    let mapped = base.vmm().physical_bytes;
    for refused in [a.sleep_pools(), a.sleep_with(&[woken], &[])] {
        match refused {
            Err(Error::InvalidArgument(m)) => assert!(m.contains("wake them first"), "{m}"),
            other => panic!("a sleep after a partial wake gave {other:?}"),
        }
    }
    assert_eq!(base.vmm().physical_bytes, mapped, "the refused sleep changed what is mapped");
    assert!(a.is_asleep() && check_fill(blocks[0].0, 6 * MIB, blocks[0].1));
    a.wake_with(&[sleeping]).unwrap();
    assert!(!a.is_asleep() && check_fill(blocks[1].0, 6 * MIB, blocks[1].1));
    assert!(a.sleep_pools().unwrap() > 0, "awake again: sleep gives memory back");
    a.wake().unwrap();
    for (addr, byte) in blocks {
        assert!(check_fill(addr, 6 * MIB, byte));
        a.free(addr).unwrap();
    }
    super::support::teardown_clean(a, &base);
    super::support::drop_stream(s);
}
