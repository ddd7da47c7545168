//! Once the segment kind is known (`expandable_segments`, or whether the runtime has the virtual-memory API),
//! a key that has no effect with that kind is refused. The parser refuses what the string alone shows
//! (src/config/parse.rs, `check_conflicts`); this catches the rest, and a `Config` built by hand.

use crate::config::{Config, PageSize};
use crate::error::{Error, Result};

/// Checks `config` against the segment kind chosen; `source` names the runtime for the message.
pub(super) fn check(config: &Config, expandable: bool, source: &str) -> Result<()> {
    if expandable {
        if config.max_split_size.is_some() {
            return Err(Error::bad_config(
                "max_split_size_mb",
                "applies to fixed segments only and segments are expandable here; add expandable_segments:false",
            ));
        }
        return Ok(());
    }
    let why = match config.expandable_segments {
        Some(false) => "with expandable_segments:false".to_string(),
        _ => format!("with fixed segments ({source} lacks the ACL virtual-memory API)"),
    };
    let unused = [
        ("page_size", config.page_size != PageSize::default()),
        ("reserved_headroom", config.reserved_headroom.is_some()),
        ("map_ahead", config.map_ahead.is_some()),
        ("handle_moves", config.handle_moves.is_some()),
        ("max_handle_mb", config.max_handle.is_some()),
    ];
    unused.into_iter().find(|&(_, given)| given).map_or(Ok(()), |(key, _)| {
        Err(Error::bad_config(key, format!("has no effect {why}: {key} applies to expandable segments only")))
    })
}
