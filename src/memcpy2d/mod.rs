//! Pure validation of 2D copies (`aclrtMemcpy2d` / `aclrtMemcpy2dAsync`), with no FFI and no runtime, so the C
//! shims, the emulator tests and the benches share it; the success path allocates nothing. A copy moves `height`
//! rows of `width` bytes; row `i` starts at `dst + i*dpitch` and `src + i*spitch`. Two layers of checks:
//! 1. [`check_rules`]: the runtime's documented rules (each cites its source,
//!    docs/acl-api.md §5 "aclrtMemcpy2d / aclrtMemcpy2dAsync", or says it is our own choice). Needs no allocator.
//! 2. [`check_within_block`]: each device-side pointer, and the copy's last byte `p + (height-1)*pitch + width - 1`,
//!    must lie in one block the allocator owns. [`check_copy`] runs both with a caller-supplied block lookup.

use crate::error::Error;

// aclrtMemcpyKind values (docs/acl-api.md §3, "aclrtMemcpyKind"; append-only): only `runtime` may use `sys`.
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
    /// ACL_MEMCPY_DEFAULT: the runtime resolves the direction from the addresses; we check the ends in our blocks.
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

    #[inline]
    pub fn region(&self, side: Side) -> DeviceRegion {
        match side {
            Side::Dst => DeviceRegion { addr: self.dst, pitch: self.dpitch, side },
            Side::Src => DeviceRegion { addr: self.src, pitch: self.spitch, side },
        }
    }

    /// The device-side ends, as the kind says (DEFAULT: both, as candidates; those an allocator owns are device
    /// memory). Empty for any other kind, so call it after [`check_rules`] accepted the copy.
    #[inline]
    pub fn device_regions(&self) -> impl Iterator<Item = DeviceRegion> {
        let sides = DeviceSides::for_kind(self.kind);
        let dst = sides.filter(|s| s.includes(Side::Dst)).map(|_| self.region(Side::Dst));
        let src = sides.filter(|s| s.includes(Side::Src)).map(|_| self.region(Side::Src));
        dst.into_iter().chain(src)
    }
}

/// Checks the runtime's rules for a 2D copy in the runtime's order (ACL layer, then runtime layer), so the
/// first broken rule is the one reported.
#[inline]
pub fn check_rules(c: &Copy2d) -> Result<Checked, Error> {
    // docs/acl-api.md §5, ACL layer (CheckMemcpy2dParam): a zero width or height is a no-op, before pointer checks.
    if c.width == 0 || c.height == 0 {
        return Ok(Checked::NoOp);
    }
    // docs/acl-api.md §5, ACL layer: NULL dst or src is ACL_ERROR_INVALID_PARAM.
    if let Some(side) = [Side::Dst, Side::Src].into_iter().find(|&side| c.region(side).addr == 0) {
        return Err(null_pointer(c, side));
    }
    // docs/acl-api.md §5, ACL and runtime layers: width <= each pitch (so, as width > 0, pitches are non-zero).
    if let Some(side) = [Side::Dst, Side::Src].into_iter().find(|&side| c.width > c.region(side).pitch) {
        return Err(width_over_pitch(c, side));
    }
    // docs/runtime-behaviour.md "2D copies", ACL layer (`CheckMemcpy2dParam`):
    // a kind other than H2D, D2H, D2D and DEFAULT is ACL_ERROR_INVALID_PARAM.
    let Some(device_sides) = DeviceSides::for_kind(c.kind) else {
        return Err(bad_kind(c));
    };
    // docs/runtime-behaviour.md "2D copies", runtime layer (`MemCopy2DCheckParam`): the size limits, for both
    // calls, before the direction is looked at.
    if c.height > MAX_HEIGHT {
        return Err(over_limit(c, "height", c.height, MAX_HEIGHT));
    }
    if c.width > MAX_WIDTH {
        return Err(over_limit(c, "width", c.width, MAX_WIDTH));
    }
    // docs/runtime-behaviour.md "2D copies" (`MemCopy2DSync`): only then does the sync call refuse D2D (207000).
    if device_sides == DeviceSides::Both && !c.is_async {
        return Err(sync_d2d(c));
    }
    Ok(Checked::Copy { device_sides })
}

/// Offset of the last byte a copy touches from its first: `(height-1)*pitch + width - 1`. `None` when the copy
/// touches nothing (zero width or height) or the offset does not fit in `usize`.
#[inline]
pub fn last_byte_offset(pitch: usize, width: usize, height: usize) -> Option<usize> {
    let last_row = height.checked_sub(1)?;
    let last_col = width.checked_sub(1)?;
    last_row.checked_mul(pitch)?.checked_add(last_col)
}

/// Checks that every byte of `region`'s side of a `width` x `height` copy lies in the block
/// `[block_start, block_start + block_size)`. Our own rule (docs/runtime-behaviour.md "2D copies"): the runtime cannot see allocation
/// boundaries, so an overrun would silently corrupt a neighbouring block. Offsets from `block_start` use checked
/// arithmetic, so sizes near `usize::MAX` cannot wrap. A copy touching no byte is accepted.
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
    let offsets = region.addr.checked_sub(block_start).zip(last_byte_offset(region.pitch, width, height));
    match offsets.and_then(|(offset, last)| offset.checked_add(last)) {
        Some(end) if end < block_size => Ok(()),
        _ => Err(out_of_bounds(region, width, height, block_start, block_size)),
    }
}

/// [`check_rules`], then each device side against the block that owns its first byte. `find_block(addr)` returns
/// that block's `(start, size)`, or `None` when the allocator does not own `addr` (`Error::UnknownPointer`).
#[inline]
pub fn check_copy(c: &Copy2d, mut find_block: impl FnMut(usize) -> Option<(usize, usize)>) -> Result<Checked, Error> {
    let checked = check_rules(c)?;
    if let Checked::Copy { device_sides } = checked {
        let mut owned = 0;
        for region in c.device_regions() {
            let Some((start, size)) = find_block(region.addr) else {
                // DEFAULT: an end outside our blocks is host memory or another allocator's; the runtime resolves it.
                if device_sides == DeviceSides::ByAddress {
                    continue;
                }
                // H2D or D2H whose host side is ours and device side is not: the kind is the mistake, not the pointer.
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
        // docs/runtime-behaviour.md "2D copies" (`MemcpyKindAutoCorrect`): a synchronous DEFAULT copy between two
        // device buffers resolves to D2D, which the runtime refuses as an invalid value (107000).
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
mod tests;
