//! Tests of the 2D-copy checks: every rule, in the runtime's order.
use proptest::prelude::*;

use super::*;

const DST: usize = 0x1_0000_0000;
const SRC: usize = 0x2_0000_0000;

/// A typical valid copy: 16 rows of 4000 bytes, pitches 4096, H2D.
fn copy() -> Copy2d {
    Copy2d {
        dst: DST,
        dpitch: 4096,
        src: SRC,
        spitch: 4096,
        width: 4000,
        height: 16,
        kind: ACL_MEMCPY_HOST_TO_DEVICE,
        is_async: false,
    }
}

fn with(f: impl FnOnce(&mut Copy2d)) -> Copy2d {
    let mut c = copy();
    f(&mut c);
    c
}

#[derive(Debug)]
enum Want {
    NoOp,
    Copy(DeviceSides),
    /// InvalidArgument whose message contains the text.
    Invalid(&'static str),
}

fn expect(name: &str, c: &Copy2d, want: &Want) {
    let got = check_rules(c);
    match (want, &got) {
        (Want::NoOp, Ok(Checked::NoOp)) => {}
        (Want::Copy(s), Ok(Checked::Copy { device_sides })) if s == device_sides => {}
        (Want::Invalid(text), Err(Error::InvalidArgument(msg))) if msg.contains(text) => {}
        _ => panic!("{name}: {c:?}\n  wanted {want:?}\n  got    {got:?}"),
    }
}

#[test]
fn validation_matrix() {
    use Want::*;
    let rows: Vec<(&str, Copy2d, Want)> = vec![
        ("typical", copy(), Copy(DeviceSides::Dst)),
        // No-op before pointer checks.
        ("width 0", with(|c| c.width = 0), NoOp),
        ("height 0", with(|c| c.height = 0), NoOp),
        (
            "width 0, NULL dst",
            with(|c| {
                c.width = 0;
                c.dst = 0
            }),
            NoOp,
        ),
        (
            "height 0, NULL src",
            with(|c| {
                c.height = 0;
                c.src = 0
            }),
            NoOp,
        ),
        (
            "width 0, both NULL, bad kind",
            with(|c| {
                c.width = 0;
                c.dst = 0;
                c.src = 0;
                c.kind = 9
            }),
            NoOp,
        ),
        (
            "height 0, width over pitch",
            with(|c| {
                c.height = 0;
                c.width = 9000
            }),
            NoOp,
        ),
        // NULL pointers.
        ("NULL dst", with(|c| c.dst = 0), Invalid("dst is NULL")),
        ("NULL src", with(|c| c.src = 0), Invalid("src is NULL")),
        (
            "NULL both",
            with(|c| {
                c.dst = 0;
                c.src = 0
            }),
            Invalid("dst is NULL"),
        ),
        (
            "NULL dst, D2H",
            with(|c| {
                c.dst = 0;
                c.kind = ACL_MEMCPY_DEVICE_TO_HOST
            }),
            Invalid("dst is NULL"),
        ),
        // Pitches, both sides of each boundary.
        ("width == dpitch", with(|c| c.width = 4096), Copy(DeviceSides::Dst)),
        (
            "width == dpitch + 1",
            with(|c| {
                c.width = 4097;
                c.spitch = 8192
            }),
            Invalid("width 4097 > dpitch 4096"),
        ),
        (
            "width == spitch + 1",
            with(|c| {
                c.width = 4097;
                c.dpitch = 8192
            }),
            Invalid("width 4097 > spitch 4096"),
        ),
        (
            "width > dpitch (doc example)",
            with(|c| {
                c.width = 4096;
                c.dpitch = 4000
            }),
            Invalid("width 4096 > dpitch 4000"),
        ),
        (
            "width == spitch",
            with(|c| {
                c.width = 100;
                c.spitch = 100
            }),
            Copy(DeviceSides::Dst),
        ),
        ("dpitch 0", with(|c| c.dpitch = 0), Invalid("> dpitch 0")),
        ("spitch 0", with(|c| c.spitch = 0), Invalid("> spitch 0")),
        (
            "width 1, pitches 1",
            with(|c| {
                c.width = 1;
                c.dpitch = 1;
                c.spitch = 1
            }),
            Copy(DeviceSides::Dst),
        ),
        // Height limit.
        ("height 5242880", with(|c| c.height = MAX_HEIGHT), Copy(DeviceSides::Dst)),
        ("height 5242881", with(|c| c.height = MAX_HEIGHT + 1), Invalid("height 5242881 > 5242880")),
        ("height usize::MAX", with(|c| c.height = usize::MAX), Invalid("height")),
        (
            "height limit, async",
            with(|c| {
                c.height = MAX_HEIGHT + 1;
                c.is_async = true
            }),
            Invalid("height 5242881 > 5242880"),
        ),
        // Width limit.
        (
            "width 5000000",
            with(|c| {
                c.width = MAX_WIDTH;
                c.dpitch = MAX_WIDTH;
                c.spitch = MAX_WIDTH
            }),
            Copy(DeviceSides::Dst),
        ),
        (
            "width 5000001",
            with(|c| {
                c.width = MAX_WIDTH + 1;
                c.dpitch = 1 << 23;
                c.spitch = 1 << 23
            }),
            Invalid("width 5000001 > 5000000"),
        ),
        (
            "width limit, async",
            with(|c| {
                c.width = MAX_WIDTH + 1;
                c.dpitch = 1 << 23;
                c.spitch = 1 << 23;
                c.is_async = true
            }),
            Invalid("width 5000001 > 5000000"),
        ),
        (
            "width usize::MAX",
            with(|c| {
                c.width = usize::MAX;
                c.dpitch = usize::MAX;
                c.spitch = usize::MAX
            }),
            Invalid("width"),
        ),
        // Rule order: pitch before kind before limits.
        (
            "pitch before kind",
            with(|c| {
                c.width = 5000;
                c.kind = 0
            }),
            Invalid("dpitch"),
        ),
        (
            "kind before limits",
            with(|c| {
                c.height = MAX_HEIGHT + 1;
                c.kind = 0
            }),
            Invalid("kind 0"),
        ),
        ("sync message", with(|c| c.dst = 0), Invalid("aclrtMemcpy2d: ")),
        (
            "async message",
            with(|c| {
                c.dst = 0;
                c.is_async = true
            }),
            Invalid("aclrtMemcpy2dAsync: "),
        ),
    ];
    for (name, c, want) in &rows {
        expect(name, c, want);
    }
}

#[test]
fn every_kind_for_sync_and_async() {
    let kinds = [-1, 0, 1, 2, 3, 4, 5, 6, 7, 8, i32::MIN, i32::MAX];
    for is_async in [false, true] {
        for kind in kinds {
            let c = with(|c| {
                c.kind = kind;
                c.is_async = is_async;
            });
            let want = match (kind, is_async) {
                (1, _) => Want::Copy(DeviceSides::Dst),
                (2, _) => Want::Copy(DeviceSides::Src),
                (3, true) => Want::Copy(DeviceSides::Both),
                (4, _) => Want::Copy(DeviceSides::ByAddress),
                (3, false) => {
                    assert!(matches!(check_rules(&c), Err(Error::Unsupported(m)) if m.contains("207000")));
                    continue;
                }
                _ => Want::Invalid("is not supported"),
            };
            expect(&format!("kind {kind} async {is_async}"), &c, &want);
            if let Err(Error::InvalidArgument(msg)) = check_rules(&c) {
                assert!(msg.contains(&format!("kind {kind} (")), "{msg}");
                assert!(msg.contains("ACL_MEMCPY_HOST_TO_DEVICE (1)"), "{msg}");
                assert!(msg.contains("ACL_MEMCPY_DEFAULT (4)"), "{msg}");
                if let Some(name) = kind_name(kind) {
                    assert!(msg.contains(name), "{msg}");
                } else {
                    assert!(msg.contains("not an aclrtMemcpyKind"), "{msg}");
                }
            }
        }
    }
}

#[test]
fn device_regions_follow_the_kind() {
    let regions = |kind| with(|c| c.kind = kind).device_regions().collect::<Vec<_>>();
    let dst = DeviceRegion { addr: DST, pitch: 4096, side: Side::Dst };
    let src = DeviceRegion { addr: SRC, pitch: 4096, side: Side::Src };
    assert_eq!(regions(ACL_MEMCPY_HOST_TO_DEVICE), vec![dst]);
    assert_eq!(regions(ACL_MEMCPY_DEVICE_TO_HOST), vec![src]);
    assert_eq!(regions(ACL_MEMCPY_DEVICE_TO_DEVICE), vec![dst, src]);
    assert_eq!(regions(ACL_MEMCPY_DEFAULT), vec![dst, src]);
    assert_eq!(regions(-1), vec![]);
}

#[test]
fn last_byte_offset_values() {
    assert_eq!(last_byte_offset(4096, 4000, 16), Some(15 * 4096 + 3999));
    assert_eq!(last_byte_offset(4096, 1, 1), Some(0));
    assert_eq!(last_byte_offset(0, 1, 1000), Some(0));
    assert_eq!(last_byte_offset(4096, 0, 16), None);
    assert_eq!(last_byte_offset(4096, 16, 0), None);
    assert_eq!(last_byte_offset(usize::MAX, usize::MAX, 1), Some(usize::MAX - 1));
    assert_eq!(last_byte_offset(usize::MAX, 1, 2), Some(usize::MAX));
    assert_eq!(last_byte_offset(usize::MAX, 2, 2), None);
    assert_eq!(last_byte_offset(usize::MAX, 1, 3), None);
    assert_eq!(last_byte_offset(usize::MAX / 2 + 1, 1, 3), None);
}

fn region(addr: usize, pitch: usize) -> DeviceRegion {
    DeviceRegion { addr, pitch, side: Side::Dst }
}

fn oob(r: Result<(), Error>) -> String {
    match r {
        Err(Error::CopyOutOfBounds(msg)) => msg,
        other => panic!("expected CopyOutOfBounds, got {other:?}"),
    }
}

#[test]
fn bounds_at_the_last_byte() {
    let (start, size) = (0x10000, 16 * 4096);
    // Last byte = start + 15*4096 + 4095 = the block's last byte.
    assert!(check_within_block(&region(start, 4096), 4096, 16, start, size).is_ok());
    // One more byte of width, or one more row: one past the end.
    let msg = oob(check_within_block(&region(start, 4096), 4097, 16, start, size));
    assert_eq!(
        msg,
        format!(
            "copy touches bytes up to offset {} of a block of {size} bytes (dst pitch 4096, width 4097, height 16)",
            size
        )
    );
    oob(check_within_block(&region(start, 4096), 4096, 17, start, size));
    // Interior pointer: room for exactly the rest of the block.
    assert!(check_within_block(&region(start + 100, 4096), 3996, 16, start, size).is_ok());
    assert!(check_within_block(&region(start + 100, 4096), 3997, 16, start, size).is_err());
    assert!(check_within_block(&region(start + size - 1, 4096), 1, 1, start, size).is_ok());
    oob(check_within_block(&region(start + size, 4096), 1, 1, start, size));
    // A pointer before the block.
    let msg = oob(check_within_block(&region(start - 1, 4096), 1, 1, start, size));
    assert!(msg.contains("before the start"), "{msg}");
    // Nothing touched, nothing to check.
    assert!(check_within_block(&region(start + size + 5, 4096), 0, 16, start, size).is_ok());
    assert!(check_within_block(&region(start + size + 5, 4096), 16, 0, start, size).is_ok());
}

#[test]
fn bounds_near_usize_max() {
    let top = usize::MAX;
    // A block ending at the top of the address space.
    let (start, size) = (top - 4095, 4096);
    assert!(check_within_block(&region(start, 1), 4096, 1, start, size).is_ok());
    oob(check_within_block(&region(start, 1), 4097, 1, start, size));
    // Products that would wrap.
    let msg = oob(check_within_block(&region(start, usize::MAX), 2, 2, start, size));
    assert!(msg.contains(&format!("{}", (u128::from(u64::MAX) + 1))), "{msg}");
    oob(check_within_block(&region(0, usize::MAX), usize::MAX, usize::MAX, 0, usize::MAX));
    oob(check_within_block(&region(usize::MAX, usize::MAX), usize::MAX, usize::MAX, 0, usize::MAX));
    // The whole address space as one block.
    assert!(check_within_block(&region(0, 1), usize::MAX, 1, 0, usize::MAX).is_ok());
    assert!(check_within_block(&region(1, 1), usize::MAX, 1, 0, usize::MAX).is_err());
}

#[test]
fn check_copy_uses_the_owning_block() {
    // One block per side: [DST, DST + 64 KiB) and [SRC, SRC + 64 KiB).
    let blocks = |addr: usize| -> Option<(usize, usize)> {
        [(DST, 1 << 16), (SRC, 1 << 16)].into_iter().find(|&(start, size)| addr >= start && addr - start < size)
    };
    assert_eq!(check_copy(&copy(), blocks).unwrap(), Checked::Copy { device_sides: DeviceSides::Dst });
    // 17 rows do not fit.
    let c = with(|c| c.height = 17);
    assert!(matches!(check_copy(&c, blocks), Err(Error::CopyOutOfBounds(_))));
    // D2H checks src with spitch.
    let c = with(|c| {
        c.kind = ACL_MEMCPY_DEVICE_TO_HOST;
        c.spitch = 8192;
        c.dpitch = 1 << 20
    });
    match check_copy(&c, blocks) {
        Err(Error::CopyOutOfBounds(msg)) => assert!(msg.contains("src pitch 8192"), "{msg}"),
        other => panic!("{other:?}"),
    }
    // D2D checks both; an unknown device pointer is UnknownPointer.
    let c = with(|c| {
        c.kind = ACL_MEMCPY_DEVICE_TO_DEVICE;
        c.is_async = true;
        c.src = 0x3_0000_0000
    });
    match check_copy(&c, blocks) {
        Err(Error::UnknownPointer(msg)) => assert!(msg.contains("src 0x300000000"), "{msg}"),
        other => panic!("{other:?}"),
    }
    // The host side of H2D is not looked up.
    let c = with(|c| c.src = 0x3_0000_0000);
    assert!(check_copy(&c, blocks).is_ok());
    // H2D from one of our blocks to memory we do not own: the kind is
    // blamed (reversed), not the pointer; likewise D2H.
    let c = with(|c| c.dst = 0x3_0000_0000);
    match check_copy(&c, blocks) {
        Err(Error::InvalidArgument(msg)) => {
            assert!(msg.contains("kind ACL_MEMCPY_HOST_TO_DEVICE (1) says dst 0x300000000"), "{msg}");
            assert!(msg.contains("src 0x200000000 is; is the kind reversed"), "{msg}");
            assert!(msg.contains("ACL_MEMCPY_DEVICE_TO_HOST (2)"), "{msg}");
        }
        other => panic!("{other:?}"),
    }
    let c = with(|c| {
        c.kind = ACL_MEMCPY_DEVICE_TO_HOST;
        c.src = 0x3_0000_0000
    });
    match check_copy(&c, blocks) {
        Err(Error::InvalidArgument(msg)) => {
            assert!(msg.contains("kind ACL_MEMCPY_DEVICE_TO_HOST (2) says src 0x300000000"), "{msg}")
        }
        other => panic!("{other:?}"),
    }
    // Neither end ours: still the pointer.
    let c = with(|c| {
        c.dst = 0x3_0000_0000;
        c.src = 0x4_0000_0000
    });
    assert!(matches!(check_copy(&c, blocks), Err(Error::UnknownPointer(_))));
    // No-ops and rule failures never reach the lookup.
    let mut calls = 0;
    let _ = check_copy(&with(|c| c.width = 0), |_| {
        calls += 1;
        None
    });
    let _ = check_copy(&with(|c| c.kind = 0), |_| {
        calls += 1;
        None
    });
    assert_eq!(calls, 0);
}

/// Reference: does [addr, addr + (h-1)*pitch + w) lie in [start, start + size)?
fn inside(addr: usize, pitch: usize, width: usize, height: usize, start: usize, size: usize) -> bool {
    if width == 0 || height == 0 {
        return true;
    }
    let (addr, pitch, width, height, start, size) =
        (addr as u128, pitch as u128, width as u128, height as u128, start as u128, size as u128);
    addr >= start && addr + (height - 1) * pitch + width <= start + size
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn bounds_match_the_reference_near_a_block(
        start in 4096usize..1 << 40,
        size in 1usize..1 << 20,
        offset in -64i64..(1 << 20) + 64,
        pitch in 0usize..8192,
        width in 0usize..8192,
        height in 0usize..300,
    ) {
        let addr = (start as i64 + offset) as usize;
        let got = check_within_block(&region(addr, pitch), width, height, start, size);
        prop_assert_eq!(got.is_ok(), inside(addr, pitch, width, height, start, size));
        if let Err(e) = got {
            prop_assert!(matches!(e, Error::CopyOutOfBounds(_)));
        }
    }

    #[test]
    fn bounds_match_the_reference_anywhere(
        start in any::<usize>(),
        size in any::<usize>(),
        addr in any::<usize>(),
        pitch in prop_oneof![any::<usize>(), 0usize..4096],
        width in prop_oneof![any::<usize>(), 0usize..4096],
        height in prop_oneof![any::<usize>(), 0usize..64],
    ) {
        let got = check_within_block(&region(addr, pitch), width, height, start, size);
        prop_assert_eq!(got.is_ok(), inside(addr, pitch, width, height, start, size));
    }

    #[test]
    fn an_accepted_copy_has_its_last_byte_in_the_block(
        offset in 0usize..1 << 16,
        pitch in 1usize..4096,
        width in 1usize..4096,
        height in 1usize..64,
    ) {
        let (start, size) = (1usize << 32, 1usize << 16);
        if check_within_block(&region(start + offset, pitch), width, height, start, size).is_ok() {
            let last = last_byte_offset(pitch, width, height).unwrap();
            prop_assert!(offset + last < size);
        }
    }
}
