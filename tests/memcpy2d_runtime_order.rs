//! 2D copies follow the runtime's order of checks and its answers
//! (docs/runtime-behaviour.md "2D copies"): the height and width limits come
//! before the synchronous call refuses a device-to-device copy, that refusal
//! is "not supported" (the runtime's 207000), and ACL_MEMCPY_DEFAULT is a
//! kind the runtime accepts. The bounds check against the owning block stays.

use npualloc::error::Error;
use npualloc::memcpy2d::{
    check_copy, check_rules, Checked, Copy2d, DeviceSides, ACL_MEMCPY_DEFAULT, ACL_MEMCPY_DEVICE_TO_DEVICE,
    ACL_MEMCPY_HOST_TO_DEVICE, MAX_HEIGHT, MAX_WIDTH,
};

const DST: usize = 0x1_0000_0000;
const SRC: usize = 0x2_0000_0000;
const HOST: usize = 0x7f00_0000_0000;
const BLOCK: usize = 1 << 20;

fn copy(kind: i32, is_async: bool) -> Copy2d {
    Copy2d { dst: DST, dpitch: 4096, src: SRC, spitch: 4096, width: 4000, height: 16, kind, is_async }
}

/// Two blocks of 1 MiB, at DST and at SRC.
fn blocks(addr: usize) -> Option<(usize, usize)> {
    [(DST, BLOCK), (SRC, BLOCK)].into_iter().find(|&(start, size)| addr >= start && addr - start < size)
}

#[test]
fn sync_d2d_is_unsupported_after_the_limits() {
    let c = copy(ACL_MEMCPY_DEVICE_TO_DEVICE, false);
    match check_rules(&c) {
        Err(Error::Unsupported(msg)) => assert!(msg.contains("207000"), "{msg}"),
        other => panic!("sync D2D: {other:?}"),
    }
    // Over a limit, the limit is what the runtime reports first.
    let tall = Copy2d { height: MAX_HEIGHT + 1, dpitch: 4096, ..c };
    match check_rules(&tall) {
        Err(Error::InvalidArgument(msg)) => assert!(msg.contains("height"), "{msg}"),
        other => panic!("sync D2D over the height limit: {other:?}"),
    }
    let wide = Copy2d { width: MAX_WIDTH + 1, dpitch: MAX_WIDTH + 1, spitch: MAX_WIDTH + 1, height: 1, ..c };
    match check_rules(&wide) {
        Err(Error::InvalidArgument(msg)) => assert!(msg.contains("width"), "{msg}"),
        other => panic!("sync D2D over the width limit: {other:?}"),
    }
    // The async call does D2D.
    assert_eq!(
        check_rules(&copy(ACL_MEMCPY_DEVICE_TO_DEVICE, true)).unwrap(),
        Checked::Copy { device_sides: DeviceSides::Both }
    );
}

#[test]
fn default_kind_is_accepted_and_bounds_checked() {
    for is_async in [false, true] {
        // DEFAULT from host memory into a block: the block's end is checked.
        let h2d = Copy2d { src: HOST, ..copy(ACL_MEMCPY_DEFAULT, is_async) };
        assert_eq!(check_rules(&h2d).unwrap(), Checked::Copy { device_sides: DeviceSides::ByAddress });
        assert!(check_copy(&h2d, blocks).is_ok(), "DEFAULT H2D async={is_async}");
        let over = Copy2d { height: BLOCK / 4096 + 1, ..h2d };
        assert!(
            matches!(check_copy(&over, blocks), Err(Error::CopyOutOfBounds(_))),
            "DEFAULT past the block's end, async={is_async}: {:?}",
            check_copy(&over, blocks)
        );
        // Neither end ours: the runtime decides.
        let foreign = Copy2d { dst: HOST, src: HOST + BLOCK, ..h2d };
        assert!(check_copy(&foreign, blocks).is_ok());
    }
    // Both ends in blocks: the runtime resolves D2D; the sync call refuses
    // it as an invalid value, the async call copies.
    let d2d = copy(ACL_MEMCPY_DEFAULT, false);
    match check_copy(&d2d, blocks) {
        Err(Error::InvalidArgument(msg)) => assert!(msg.contains("107000"), "{msg}"),
        other => panic!("sync DEFAULT between two blocks: {other:?}"),
    }
    assert!(check_copy(&copy(ACL_MEMCPY_DEFAULT, true), blocks).is_ok());
}

#[test]
fn explicit_kinds_still_need_an_owned_device_side() {
    // The host side is one of our blocks: the kind is reversed, and it is
    // the kind the message blames.
    let c = Copy2d { dst: HOST, ..copy(ACL_MEMCPY_HOST_TO_DEVICE, false) };
    assert!(
        matches!(check_copy(&c, blocks), Err(Error::InvalidArgument(ref m)) if m.contains("is the kind reversed")),
        "{:?}",
        check_copy(&c, blocks)
    );
    // Neither side ours: the device-side pointer is unknown.
    let c = Copy2d { dst: HOST, src: HOST + BLOCK, ..copy(ACL_MEMCPY_HOST_TO_DEVICE, false) };
    assert!(matches!(check_copy(&c, blocks), Err(Error::UnknownPointer(_))));
}
