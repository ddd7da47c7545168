//! Pure validation of 2D copies (`aclrtMemcpy2d` / `aclrtMemcpy2dAsync`).
//!
//! No FFI and no runtime here: the functions take numbers and return a typed
//! result, so the C shims, the emulator tests and the benches share them.
//!
//! A copy moves `height` rows of `width` bytes; row `i` starts at
//! `dst + i*dpitch` and `src + i*spitch`. Two layers of checks:
//!
//! 1. [`check_rules`]: the runtime's documented rules (each cites its source,
//!    docs/acl-api.md §5 "aclrtMemcpy2d / aclrtMemcpy2dAsync", or says it
//!    is our own choice). Needs no allocator.
//! 2. [`check_within_block`]: when an allocator is given, each device-side
//!    pointer must lie in a block it owns and the copy's last byte,
//!    `p + (height-1)*pitch + width - 1`, must lie inside that same block.
//!    [`check_copy`] runs both with a caller-supplied block lookup.
//!
//! The success path allocates nothing; error messages are built only on
//! failure, in `#[cold]` functions.

use crate::error::Error;

// aclrtMemcpyKind values (docs/acl-api.md §3, "aclrtMemcpyKind"; the
// values are append-only). Kept here rather than taken from `sys`, which only
// `runtime` may use.
pub const ACL_MEMCPY_HOST_TO_HOST: i32 = 0;
pub const ACL_MEMCPY_HOST_TO_DEVICE: i32 = 1;
pub const ACL_MEMCPY_DEVICE_TO_HOST: i32 = 2;
pub const ACL_MEMCPY_DEVICE_TO_DEVICE: i32 = 3;
pub const ACL_MEMCPY_DEFAULT: i32 = 4;
pub const ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE: i32 = 5;
pub const ACL_MEMCPY_INNER_DEVICE_TO_DEVICE: i32 = 6;
pub const ACL_MEMCPY_INTER_DEVICE_TO_DEVICE: i32 = 7;

/// Largest `height` (5 * 1024 * 1024 rows). docs/acl-api.md §5: documented on the
/// async page, enforced by the runtime's `MemCopy2DCheckParam` for both calls.
pub const MAX_HEIGHT: usize = 5_242_880;
/// Largest `width` in bytes; same source and scope as [`MAX_HEIGHT`].
pub const MAX_WIDTH: usize = 5_000_000;

/// The arguments of one 2D copy. Pointers are addresses (0 is NULL).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Copy2d {
    pub dst: usize,
    pub dpitch: usize,
    pub src: usize,
    pub spitch: usize,
    pub width: usize,
    pub height: usize,
    /// An `aclrtMemcpyKind`, taken as the raw integer C passed.
    pub kind: i32,
    /// `aclrtMemcpy2dAsync` rather than `aclrtMemcpy2d`.
    pub is_async: bool,
}

/// One end of a copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Dst,
    Src,
}

impl Side {
    pub fn name(self) -> &'static str {
        match self {
            Side::Dst => "dst",
            Side::Src => "src",
        }
    }
}

/// Which ends of a copy are device memory, as the kind says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceSides {
    /// Host to device.
    Dst,
    /// Device to host.
    Src,
    /// Device to device (the sync call answers it with "not supported").
    Both,
    /// ACL_MEMCPY_DEFAULT: the runtime resolves the direction from the
    /// addresses; npualloc checks the ends that lie in its own blocks.
    ByAddress,
}

impl DeviceSides {
    /// The device sides of the kinds a 2D copy may use; `None` for others.
    #[inline]
    pub fn for_kind(kind: i32) -> Option<DeviceSides> {
        match kind {
            ACL_MEMCPY_HOST_TO_DEVICE => Some(DeviceSides::Dst),
            ACL_MEMCPY_DEVICE_TO_HOST => Some(DeviceSides::Src),
            ACL_MEMCPY_DEVICE_TO_DEVICE => Some(DeviceSides::Both),
            ACL_MEMCPY_DEFAULT => Some(DeviceSides::ByAddress),
            _ => None,
        }
    }

    #[inline]
    pub fn includes(self, side: Side) -> bool {
        matches!(
            (self, side),
            (DeviceSides::Both | DeviceSides::ByAddress, _)
                | (DeviceSides::Dst, Side::Dst)
                | (DeviceSides::Src, Side::Src)
        )
    }
}

/// What [`check_rules`] concluded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Checked {
    /// Nothing to copy; the call succeeds without touching the runtime.
    NoOp,
    /// A valid copy; `device_sides` must be checked against the allocator.
    Copy { device_sides: DeviceSides },
}

/// A device-side end of a copy: its first byte and the distance between rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceRegion {
    pub addr: usize,
    pub pitch: usize,
    pub side: Side,
}

impl Copy2d {
    /// The ACL function this copy stands for, for messages.
    pub fn call_name(&self) -> &'static str {
        if self.is_async {
            "aclrtMemcpy2dAsync"
        } else {
            "aclrtMemcpy2d"
        }
    }

    /// One end of the copy.
    #[inline]
    pub fn region(&self, side: Side) -> DeviceRegion {
        match side {
            Side::Dst => DeviceRegion { addr: self.dst, pitch: self.dpitch, side },
            Side::Src => DeviceRegion { addr: self.src, pitch: self.spitch, side },
        }
    }

    /// The device-side ends, as the kind says: H2D gives dst, D2H gives src,
    /// D2D gives dst then src, DEFAULT gives both as candidates (the ones an
    /// allocator owns are device memory). Empty for any other kind, so call
    /// it after [`check_rules`] accepted the copy.
    #[inline]
    pub fn device_regions(&self) -> impl Iterator<Item = DeviceRegion> {
        let sides = DeviceSides::for_kind(self.kind);
        let dst = sides.filter(|s| s.includes(Side::Dst)).map(|_| self.region(Side::Dst));
        let src = sides.filter(|s| s.includes(Side::Src)).map(|_| self.region(Side::Src));
        dst.into_iter().chain(src)
    }
}

/// Checks the runtime's rules for a 2D copy, in the order the runtime applies
/// them (ACL layer, then runtime layer), so the first broken rule is the one
/// reported.
#[inline]
pub fn check_rules(c: &Copy2d) -> Result<Checked, Error> {
    // docs/acl-api.md §5, ACL layer (CheckMemcpy2dParam): a zero width or height is
    // a successful no-op, decided before any pointer check.
    if c.width == 0 || c.height == 0 {
        return Ok(Checked::NoOp);
    }
    // docs/acl-api.md §5, ACL layer: NULL dst or src is ACL_ERROR_INVALID_PARAM.
    if c.dst == 0 {
        return Err(null_pointer(c, Side::Dst));
    }
    if c.src == 0 {
        return Err(null_pointer(c, Side::Src));
    }
    // docs/acl-api.md §5, ACL layer and runtime layer: width <= dpitch and
    // width <= spitch. With width > 0 this also gives the runtime's
    // "pitches must be non-zero".
    if c.width > c.dpitch {
        return Err(width_over_pitch(c, Side::Dst));
    }
    if c.width > c.spitch {
        return Err(width_over_pitch(c, Side::Src));
    }
    // docs/runtime-behaviour.md "2D copies", ACL layer (`CheckMemcpy2dParam`):
    // a kind other than H2D, D2H, D2D and DEFAULT is ACL_ERROR_INVALID_PARAM.
    let Some(device_sides) = DeviceSides::for_kind(c.kind) else {
        return Err(bad_kind(c));
    };
    // docs/runtime-behaviour.md "2D copies", runtime layer
    // (`MemCopy2DCheckParam`): height <= 5242880 and width <= 5000000, for
    // both calls, before the direction is looked at.
    if c.height > MAX_HEIGHT {
        return Err(over_limit(c, "height", c.height, MAX_HEIGHT));
    }
    if c.width > MAX_WIDTH {
        return Err(over_limit(c, "width", c.width, MAX_WIDTH));
    }
    // docs/runtime-behaviour.md "2D copies" (`MemCopy2DSync`): only then does
    // the synchronous call refuse a D2D kind, as a feature it does not
    // support (207000).
    if device_sides == DeviceSides::Both && !c.is_async {
        return Err(sync_d2d(c));
    }
    Ok(Checked::Copy { device_sides })
}

/// Offset of the last byte a copy touches from its first byte:
/// `(height-1)*pitch + width - 1`. `None` when the copy touches nothing
/// (zero width or height) or the offset does not fit in `usize`.
#[inline]
pub fn last_byte_offset(pitch: usize, width: usize, height: usize) -> Option<usize> {
    let last_row = height.checked_sub(1)?;
    let last_col = width.checked_sub(1)?;
    last_row.checked_mul(pitch)?.checked_add(last_col)
}

/// Checks that every byte of `region`'s side of a `width` x `height` copy lies
/// in the block `[block_start, block_start + block_size)`: the first byte is
/// not before the block and `p + (height-1)*pitch + width - 1` is before its
/// end. Our own rule (api.md "2D copies"): the runtime cannot see allocation
/// boundaries, so an overrun would silently corrupt a neighbouring block.
/// Computed as offsets from `block_start` with checked arithmetic, so sizes
/// near `usize::MAX` cannot wrap. A copy touching no byte is accepted.
#[inline]
pub fn check_within_block(
    region: &DeviceRegion,
    width: usize,
    height: usize,
    block_start: usize,
    block_size: usize,
) -> Result<(), Error> {
    if width == 0 || height == 0 {
        return Ok(());
    }
    let end = match (region.addr.checked_sub(block_start), last_byte_offset(region.pitch, width, height)) {
        (Some(offset), Some(last)) => offset.checked_add(last),
        _ => None,
    };
    match end {
        Some(end) if end < block_size => Ok(()),
        _ => Err(out_of_bounds(region, width, height, block_start, block_size)),
    }
}

/// [`check_rules`], then each device side against the block that owns its
/// first byte. `find_block(addr)` returns that block's `(start, size)`, or
/// `None` when the allocator does not own `addr` (`Error::UnknownPointer`).
#[inline]
pub fn check_copy(c: &Copy2d, mut find_block: impl FnMut(usize) -> Option<(usize, usize)>) -> Result<Checked, Error> {
    let checked = check_rules(c)?;
    if let Checked::Copy { device_sides } = checked {
        let mut owned = 0;
        for region in c.device_regions() {
            let Some((start, size)) = find_block(region.addr) else {
                // DEFAULT: an end outside our blocks is host memory or
                // another allocator's; the runtime resolves it.
                if device_sides == DeviceSides::ByAddress {
                    continue;
                }
                // H2D or D2H whose host side is ours and whose device side
                // is not: the kind is the mistake, not the pointer.
                let other = match region.side {
                    Side::Dst => Side::Src,
                    Side::Src => Side::Dst,
                };
                if !device_sides.includes(other) && find_block(c.region(other).addr).is_some() {
                    return Err(reversed_kind(c, &region, other));
                }
                return Err(unknown_pointer(c, &region));
            };
            check_within_block(&region, c.width, c.height, start, size)?;
            owned += 1;
        }
        // docs/runtime-behaviour.md "2D copies" (`MemcpyKindAutoCorrect`): a
        // synchronous DEFAULT copy whose ends are both device memory resolves
        // to D2D, which the runtime refuses as an invalid value (107000).
        if device_sides == DeviceSides::ByAddress && owned == 2 && !c.is_async {
            return Err(sync_default_d2d(c));
        }
    }
    Ok(checked)
}

/// The name of an `aclrtMemcpyKind` value.
pub fn kind_name(kind: i32) -> Option<&'static str> {
    Some(match kind {
        ACL_MEMCPY_HOST_TO_HOST => "ACL_MEMCPY_HOST_TO_HOST",
        ACL_MEMCPY_HOST_TO_DEVICE => "ACL_MEMCPY_HOST_TO_DEVICE",
        ACL_MEMCPY_DEVICE_TO_HOST => "ACL_MEMCPY_DEVICE_TO_HOST",
        ACL_MEMCPY_DEVICE_TO_DEVICE => "ACL_MEMCPY_DEVICE_TO_DEVICE",
        ACL_MEMCPY_DEFAULT => "ACL_MEMCPY_DEFAULT",
        ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE => "ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE",
        ACL_MEMCPY_INNER_DEVICE_TO_DEVICE => "ACL_MEMCPY_INNER_DEVICE_TO_DEVICE",
        ACL_MEMCPY_INTER_DEVICE_TO_DEVICE => "ACL_MEMCPY_INTER_DEVICE_TO_DEVICE",
        _ => return None,
    })
}

// ---- error messages (cold: only built on failure) ----

#[cold]
#[inline(never)]
fn null_pointer(c: &Copy2d, side: Side) -> Error {
    Error::InvalidArgument(format!(
        "{}: {} is NULL (width {}, height {})",
        c.call_name(),
        side.name(),
        c.width,
        c.height
    ))
}

#[cold]
#[inline(never)]
fn width_over_pitch(c: &Copy2d, side: Side) -> Error {
    let (name, pitch) = match side {
        Side::Dst => ("dpitch", c.dpitch),
        Side::Src => ("spitch", c.spitch),
    };
    Error::InvalidArgument(format!(
        "{}: width {} > {name} {pitch} (a row must fit in the {} pitch)",
        c.call_name(),
        c.width,
        side.name()
    ))
}

#[cold]
#[inline(never)]
fn bad_kind(c: &Copy2d) -> Error {
    let shown = match kind_name(c.kind) {
        Some(name) => format!("{} ({name})", c.kind),
        None => format!("{} (not an aclrtMemcpyKind)", c.kind),
    };
    let allowed = "ACL_MEMCPY_HOST_TO_DEVICE (1), ACL_MEMCPY_DEVICE_TO_HOST (2), ACL_MEMCPY_DEVICE_TO_DEVICE (3) \
                   or ACL_MEMCPY_DEFAULT (4)";
    Error::InvalidArgument(format!("{}: kind {shown} is not supported; allowed: {allowed}", c.call_name()))
}

#[cold]
#[inline(never)]
fn sync_d2d(c: &Copy2d) -> Error {
    Error::Unsupported(format!(
        "{}: ACL_MEMCPY_DEVICE_TO_DEVICE (3) is not supported by the synchronous 2D copy (the runtime answers \
         207000); use aclrtMemcpy2dAsync and synchronize the stream",
        c.call_name()
    ))
}

#[cold]
#[inline(never)]
fn sync_default_d2d(c: &Copy2d) -> Error {
    Error::InvalidArgument(format!(
        "{}: ACL_MEMCPY_DEFAULT between two device buffers resolves to device-to-device, which the synchronous \
         2D copy refuses (the runtime answers 107000); use aclrtMemcpy2dAsync",
        c.call_name()
    ))
}

#[cold]
#[inline(never)]
fn over_limit(c: &Copy2d, what: &str, value: usize, limit: usize) -> Error {
    Error::InvalidArgument(format!("{}: {what} {value} > {limit} (the runtime's largest {what})", c.call_name()))
}

#[cold]
#[inline(never)]
fn reversed_kind(c: &Copy2d, device_side: &DeviceRegion, owned: Side) -> Error {
    let (given, meant) = match device_side.side {
        Side::Dst => ("ACL_MEMCPY_HOST_TO_DEVICE (1)", "ACL_MEMCPY_DEVICE_TO_HOST (2)"),
        Side::Src => ("ACL_MEMCPY_DEVICE_TO_HOST (2)", "ACL_MEMCPY_HOST_TO_DEVICE (1)"),
    };
    Error::InvalidArgument(format!(
        "{}: kind {given} says {} {:#x} is device memory, but it is not in a block of this allocator while {} {:#x} \
         is; is the kind reversed ({meant}, or ACL_MEMCPY_DEFAULT (4) to let the runtime decide)?",
        c.call_name(),
        device_side.side.name(),
        device_side.addr,
        owned.name(),
        c.region(owned).addr
    ))
}

#[cold]
#[inline(never)]
fn unknown_pointer(c: &Copy2d, region: &DeviceRegion) -> Error {
    Error::UnknownPointer(format!(
        "{}: {} {:#x} is device memory for this copy kind but not in a block of this allocator",
        c.call_name(),
        region.side.name(),
        region.addr
    ))
}

#[cold]
#[inline(never)]
fn out_of_bounds(region: &DeviceRegion, width: usize, height: usize, block_start: usize, block_size: usize) -> Error {
    let side = region.side.name();
    let shape = format!("{side} pitch {}, width {width}, height {height}", region.pitch);
    if region.addr < block_start {
        return Error::CopyOutOfBounds(format!(
            "{side} {:#x} is before the start {block_start:#x} of its block of {block_size} bytes ({shape})",
            region.addr
        ));
    }
    // u128 holds the exact value: each factor is below 2^64.
    let offset = (region.addr - block_start) as u128;
    let last = offset + (height as u128 - 1) * region.pitch as u128 + width as u128 - 1;
    Error::CopyOutOfBounds(format!("copy touches bytes up to offset {last} of a block of {block_size} bytes ({shape})"))
}

#[cfg(test)]
mod tests {
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
}
