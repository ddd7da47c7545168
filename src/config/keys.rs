//! The one table of configuration keys, read by the parser, error messages and `help_text`. Adding a key means:
//! a row in `keys!` (its `Key` variant and `KEYS` row), a field in `Config`, and a value parser in `parse.rs`.

impl Key {
    /// The key as users write it.
    #[inline]
    pub fn name(self) -> &'static str {
        KEYS[self as usize].name
    }

    /// Looks a key up by its exact (case-sensitive) name.
    pub fn from_name(name: &str) -> Option<Key> {
        KEYS.iter().find(|spec| spec.name == name).map(|spec| spec.key)
    }

    /// A bit unique to this key, for "seen" sets.
    #[inline]
    pub(crate) fn bit(self) -> u32 {
        1 << (self as u32)
    }
}

/// The shape of a key's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueKind {
    /// `true`/`false` in any letter case, or `1`/`0`.
    Bool,
    /// An integer in MiB, or an integer with a unit suffix (see `size.rs`).
    SizeMib,
    /// A decimal number in a range stated by the key's doc.
    Number,
    Divisions,
    PageSize,
    /// A file path (may contain `:`, may not contain `,`).
    Path,
}

impl ValueKind {
    /// How the value is written, for help text.
    pub fn syntax(self) -> &'static str {
        match self {
            ValueKind::Bool => "true|false",
            ValueKind::SizeMib => "integer[k|m|g|t]",
            ValueKind::Number => "number",
            ValueKind::Divisions => "n | [size_mb:n,...,>:n]",
            ValueKind::PageSize => "2m|20m|1g",
            ValueKind::Path => "path",
        }
    }
}

#[derive(Debug)]
pub struct KeySpec {
    pub key: Key,
    pub name: &'static str,
    pub kind: ValueKind,
    /// The default as written in a config string, or a word for the behaviour when the key is absent.
    pub default: &'static str,
    pub doc: &'static str,
}

/// States [`Key`] and [`KEYS`] from one list, so a variant and its row cannot drift apart.
macro_rules! keys {
    ($($key:ident: $name:literal, $kind:ident, default $default:literal, $doc:literal;)*) => {
        /// A configuration key. The discriminant is the key's row in [`KEYS`].
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Key {
            $($key,)*
        }

        /// Every key npualloc accepts, in `Key` order.
        pub const KEYS: &[KeySpec] = &[
            $(KeySpec { key: Key::$key, name: $name, kind: ValueKind::$kind, default: $default, doc: $doc },)*
        ];
    };
}

keys! {
    ExpandableSegments: "expandable_segments", Bool, default "auto",
        "Grow segments by mapping physical pages into a reserved virtual range instead of \
         allocating new segments. Absent: on when the runtime has the virtual-memory API. \
         Cannot be combined with max_split_size_mb.";
    MaxSplitSizeMb: "max_split_size_mb", SizeMib, default "unlimited",
        "Cached blocks at least this large are never split for a smaller request. \
         At least 20 (the large-segment size). Fixed segments only: needs \
         expandable_segments:false.";
    GarbageCollectionThreshold: "garbage_collection_threshold", Number, default "off",
        "When reserved memory exceeds this fraction of the allowed memory (a memory fraction \
         below 1), free cached blocks that were not reused recently. Strictly between 0 and 1.";
    RoundupPower2Divisions: "roundup_power2_divisions", Divisions, default "0",
        "Round a request in [2^k, 2^(k+1)) up to a multiple of 2^k/n. One n for all sizes, \
         or a list [256:1,512:2,>:4]: each entry gives n for sizes below that many MiB, \
         '>' for all larger sizes. Sizes and n must be powers of two; 0 or 1 means no rounding.";
    PerProcessMemoryFraction: "per_process_memory_fraction", Number, default "1",
        "Largest share of the device memory this allocator may reserve. Greater than 0, at most 1; 1 is no limit.";
    PageSize: "page_size", PageSize, default "2m",
        "Mapping unit of the large pool's expandable segments: 2m, 20m or 1g (letter case ignored). \
         A growth maps physical handles of half the allocator's peak of allocated bytes, 32 to \
         48 MiB, at most a 128th of the device's free memory as aclrtGetMemInfo reports it (past \
         3.5 GiB allocated, a 32nd of the allocated peak, at most a 32nd of free memory, up to \
         1 GiB), never below 4 MiB (or one unit, if larger), ahead \
         of demand over the free pages after the block.";
    ReleaseThresholdMb: "release_threshold_mb", SizeMib, default "never",
        "Cached, unused memory above this amount is returned to the runtime eagerly.";
    Trace: "trace", Path, default "off",
        "Record an allocation trace to this file.";
    AclLibrary: "acl_library", Path, default "libascendcl.so",
        "Path of the ACL runtime library to load.";
    ReuseCacheMb: "reuse_cache_mb", SizeMib, default "64",
        "Freed small blocks (up to 1 MiB) held whole for the next request of the same size on \
         the same stream, skipping the free-block search, split and merge; at most this many \
         MiB per stream. 0 turns it off.";
    ReservedHeadroom: "reserved_headroom", Number, default "off",
        "Expandable segments: keep reserved memory within this fraction above the peak of \
         allocated bytes by moving free pages instead of mapping new ones (0.02 = 2%). Each \
         move synchronizes the streams that used the pages; physical handles stay at 4 MiB so \
         they can move. At least 0.";
    MapAhead: "map_ahead", Bool, default "true",
        "Expandable segments: a growth maps whole fresh handles past the request, over the free \
         pages after the block, so the next requests need no runtime call, while the stream grows \
         often (fewer than 1000 requests served per fresh handle). false: map only the \
         pages a request lacks (more calls, less memory held on a roomy device). Refused with \
         reserved_headroom, which never maps ahead.";
    OomSnapshot: "oom_snapshot", Path, default "off",
        "When a request is refused for lack of memory, write a PyTorch-format memory snapshot \
         (a pickle, as torch.cuda.memory._dump_snapshot writes; the memory history included \
         while it is recorded) to this file, replacing it. The request's error message then \
         ends by naming the file, or by saying why it could not be written.";
    HandleMoves: "handle_moves", Bool, default "true",
        "Expandable segments, large pool: when a growth would make a fresh physical handle, a \
         handle of the same range that lies wholly in free blocks is mapped again where the \
         request needs it (one runtime call instead of two, no synchronization); its old \
         addresses are never handed out again until the next empty_cache, OOM recovery or \
         forget_stream unmaps them. false: never move a handle this way. Refused \
         with reserved_headroom, which moves free pieces itself and never a handle this way.";
    MaxHandleMb: "max_handle_mb", SizeMib, default "off",
        "Expandable segments, large pool: no physical handle crosses a boundary of this many MiB \
         from the start of its range, so after empty_cache a live block keeps at most the \
         stretches of this size it touches. Smaller gives more back for more runtime calls: \
         20 bounds it as torch_npu's own 20 MiB handles do, 2 (with 2 MiB pages) keeps exactly \
         the pages live blocks touch. A multiple of page_size. Off: a handle may cover a whole \
         request or run ahead of it.";
}

/// PyTorch or torch_npu allocator keys npualloc does not take; the error names them so users know it is no typo.
pub(crate) const FOREIGN_KEYS: &[&str] = &[
    "backend",
    "base_addr_aligned_kb",
    "graph_capture_record_stream_reuse",
    "large_segment_size_mb",
    "max_non_split_rounding_mb",
    "multi_stream_lazy_reclaim",
    "pin_memory_expandable_segments",
    "pinned_max_cached_size_mb",
    "pinned_max_round_threshold_mb",
    "pinned_mem_register",
    "pinned_num_register_threads",
    "pinned_reserve_segment_size_mb",
    "pinned_use_background_threads",
    "pinned_use_cuda_host_register",
    "release_lock_on_cudamalloc",
    "release_lock_on_npumalloc",
    "segment_size_mb",
    "throw_on_cudamalloc_oom",
    "throw_on_npumalloc_oom",
];

pub fn key_list() -> String {
    KEYS.iter().map(|spec| spec.name).collect::<Vec<_>>().join(", ")
}

/// A plain-text table of the keys, for documentation and `--help`.
pub fn help_text() -> String {
    let mut out = String::from("npualloc configuration: \"key:value,key:value\"\n\n");
    for spec in KEYS {
        // A bare size is in MiB; other kinds have no unit.
        let unit = if spec.kind == ValueKind::SizeMib { ", unit MiB" } else { "" };
        out.push_str(&format!(
            "  {}:{}  (default {}{})\n      {}\n",
            spec.name,
            spec.kind.syntax(),
            spec.default,
            unit,
            spec.doc
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_rows_match_key_order() {
        for (i, spec) in KEYS.iter().enumerate() {
            assert_eq!(spec.key as usize, i, "row {i} ({}) is out of place", spec.name);
            assert_eq!(Key::from_name(spec.name), Some(spec.key));
            assert_eq!(spec.key.name(), spec.name);
        }
        assert!(KEYS.len() <= 32, "the seen-set is a u32");
    }

    #[test]
    fn foreign_keys_are_not_ours() {
        for name in FOREIGN_KEYS {
            assert_eq!(Key::from_name(name), None, "{name}");
        }
    }

    #[test]
    fn help_mentions_every_key() {
        let help = help_text();
        for spec in KEYS {
            assert!(help.contains(spec.name), "{}", spec.name);
        }
    }
}
