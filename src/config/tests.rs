use std::ffi::OsString;
use std::path::PathBuf;

use proptest::prelude::*;

use super::size::{KIB, MIB};
use super::*;

fn ok(s: &str) -> Config {
    Config::parse(s).unwrap_or_else(|e| panic!("{s:?} should parse, got: {e}"))
}

/// Parses `s`, expects a BadConfig for `key`, returns the reason.
fn bad(s: &str, key: &str) -> String {
    match Config::parse(s) {
        Err(Error::BadConfig { key: k, reason }) => {
            assert_eq!(k, key, "{s:?}: wrong key in error ({reason})");
            reason
        }
        Err(other) => panic!("{s:?}: expected BadConfig, got {other:?}"),
        Ok(c) => panic!("{s:?}: expected an error, parsed to {c:?}"),
    }
}

// ---- the grammar ----

#[test]
fn empty_strings_give_the_defaults() {
    for s in ["", " ", ",", " , ,\t,", "\n"] {
        assert_eq!(ok(s), Config::default(), "{s:?}");
    }
}

#[test]
fn defaults() {
    let c = Config::default();
    assert_eq!(c.expandable_segments, None);
    assert_eq!(c.max_split_size, None);
    assert_eq!(c.garbage_collection_threshold, None);
    assert!(c.roundup_power2_divisions.is_none());
    assert_eq!(c.per_process_memory_fraction, None);
    assert_eq!(c.page_size, PageSize::Mib2);
    assert_eq!(c.page_size.bytes(), 2 * MIB);
    assert_eq!(c.release_threshold, None);
    assert_eq!(c.trace, None);
    assert_eq!(c.acl_library, None);
    assert_eq!((c.reuse_cache, c.reuse_cache_bytes()), (None, 64 * MIB));
    assert_eq!(c.reserved_headroom, None);
}

#[test]
fn whitespace_around_keys_and_values_is_ignored() {
    let c = ok("  release_threshold_mb \t:  64 ,\n page_size : 2m , ");
    assert_eq!(c.release_threshold, Some(64 * MIB));
    assert_eq!(c.page_size, PageSize::Mib2);
}

#[test]
fn several_keys() {
    let c = ok("expandable_segments:True,garbage_collection_threshold:0.6,\
                roundup_power2_divisions:4,per_process_memory_fraction:0.9,page_size:1g,\
                release_threshold_mb:1024,trace:/tmp/t.trace,acl_library:/opt/lib/libascendcl.so");
    assert_eq!(c.expandable_segments, Some(true));
    assert_eq!(c.garbage_collection_threshold, Some(0.6));
    assert_eq!(c.roundup_power2_divisions.divisions_for(1 << 30), 4);
    assert_eq!(c.per_process_memory_fraction, Some(0.9));
    assert_eq!(c.page_size, PageSize::Gib1);
    assert_eq!(c.release_threshold, Some(1024 * MIB));
    assert_eq!(c.trace, Some(PathBuf::from("/tmp/t.trace")));
    assert_eq!(c.acl_library.as_deref(), Some("/opt/lib/libascendcl.so"));
}

#[test]
fn missing_colon_names_the_entry() {
    let reason = bad("page_size:2m, expandable_segments", "expandable_segments");
    assert!(reason.contains("no ':'"), "{reason}");
    bad("garbage", "garbage");
}

#[test]
fn empty_key_names_the_entry() {
    let reason = bad("page_size:2m, : 5", ": 5");
    assert!(reason.contains("no key"), "{reason}");
}

#[test]
fn unknown_key_lists_the_valid_keys() {
    let reason = bad("max_split_size:64", "max_split_size");
    assert!(reason.contains("unknown key"), "{reason}");
    for spec in KEYS {
        assert!(reason.contains(spec.name), "{reason}");
    }
    // Keys are case-sensitive, like PyTorch's.
    bad("Page_Size:2m", "Page_Size");
}

#[test]
fn foreign_keys_are_recognised_as_such() {
    let reason = bad("large_segment_size_mb:40", "large_segment_size_mb");
    assert!(reason.contains("PyTorch/torch_npu"), "{reason}");
    bad("backend:native", "backend");
}

#[test]
fn repeated_key_is_refused() {
    let reason = bad("page_size:2m,page_size:2m", "page_size");
    assert!(reason.contains("more than once"), "{reason}");
    bad("trace:/a, release_threshold_mb:1 , trace : /b", "trace");
}

#[test]
fn first_error_wins() {
    bad("nope:1,page_size:3m", "nope");
    bad("page_size:3m,nope:1", "page_size");
}

// ---- expandable_segments ----

#[test]
fn expandable_segments_values() {
    for (s, v) in [("True", true), ("true", true), ("TRUE", true), ("1", true)] {
        assert_eq!(ok(&format!("expandable_segments:{s}")).expandable_segments, Some(v));
    }
    for s in ["False", "false", "0"] {
        assert_eq!(ok(&format!("expandable_segments:{s}")).expandable_segments, Some(false));
    }
    for s in ["yes", "", "2", "on", "truee", "t"] {
        let reason = bad(&format!("expandable_segments:{s}"), "expandable_segments");
        assert!(reason.contains(&format!("got '{s}'")), "{reason}");
        assert!(reason.contains("true or false"), "{reason}");
    }
}

// ---- max_split_size_mb ----

#[test]
fn max_split_size_boundaries() {
    assert_eq!(ok("expandable_segments:false,max_split_size_mb:20").max_split_size, Some(20 * MIB));
    assert_eq!(ok("expandable_segments:false,max_split_size_mb:21").max_split_size, Some(21 * MIB));
    assert_eq!(ok("expandable_segments:false,max_split_size_mb:1g").max_split_size, Some(1 << 30));
    assert_eq!(ok("expandable_segments:false,max_split_size_mb:20480k").max_split_size, Some(20 * MIB));
    for s in ["19", "0", "20479k", "20971519b"] {
        let reason = bad(&format!("max_split_size_mb:{s}"), "max_split_size_mb");
        assert!(reason.contains("at least 20"), "{reason}");
        assert!(reason.contains(&format!("got '{s}'")), "{reason}");
    }
}

#[test]
fn max_split_size_syntax_and_overflow() {
    for s in ["", "-1", "64.5", "lots", "0x40", "64 m"] {
        let reason = bad(&format!("max_split_size_mb:{s}"), "max_split_size_mb");
        assert!(reason.contains("whole number"), "{s:?}: {reason}");
    }
    for s in ["99999999999999999999", "17592186044416", "99999999t"] {
        let reason = bad(&format!("max_split_size_mb:{s}"), "max_split_size_mb");
        assert!(reason.contains("too large"), "{s:?}: {reason}");
    }
}

// ---- garbage_collection_threshold ----

#[test]
fn garbage_collection_threshold_boundaries() {
    assert_eq!(ok("garbage_collection_threshold:0.5").garbage_collection_threshold, Some(0.5));
    assert_eq!(ok("garbage_collection_threshold:0.000001").garbage_collection_threshold, Some(1e-6));
    assert_eq!(ok("garbage_collection_threshold:.999").garbage_collection_threshold, Some(0.999));
    for s in ["0", "1", "0.0", "1.0", "1.5", "-0.5", "NaN", "inf", "", "half", "0;5"] {
        let reason = bad(&format!("garbage_collection_threshold:{s}"), "garbage_collection_threshold");
        assert!(reason.contains("between 0 and 1 (exclusive)"), "{reason}");
        assert!(reason.contains(&format!("got '{s}'")), "{reason}");
    }
    let e = Config::parse("garbage_collection_threshold:1.5").unwrap_err();
    assert_eq!(
        e.to_string(),
        "bad config entry 'garbage_collection_threshold': garbage_collection_threshold must be a number \
         between 0 and 1 (exclusive), got '1.5'"
    );
}

// ---- per_process_memory_fraction ----

#[test]
fn per_process_memory_fraction_boundaries() {
    assert_eq!(ok("per_process_memory_fraction:1").per_process_memory_fraction, Some(1.0));
    assert_eq!(ok("per_process_memory_fraction:1.0").per_process_memory_fraction, Some(1.0));
    assert_eq!(ok("per_process_memory_fraction:0.25").per_process_memory_fraction, Some(0.25));
    assert_eq!(ok("per_process_memory_fraction:1e-3").per_process_memory_fraction, Some(0.001));
    for s in ["0", "0.0", "-0", "1.0000001", "2", "-1", "nan", "", "most"] {
        let reason = bad(&format!("per_process_memory_fraction:{s}"), "per_process_memory_fraction");
        assert!(reason.contains("greater than 0 and at most 1"), "{reason}");
    }
}

// ---- page_size ----

#[test]
fn page_size_values() {
    for (s, p) in [
        ("2m", PageSize::Mib2),
        ("2M", PageSize::Mib2),
        ("20m", PageSize::Mib20),
        ("1g", PageSize::Gib1),
        ("1G", PageSize::Gib1),
    ] {
        assert_eq!(ok(&format!("page_size:{s}")).page_size, p, "{s}");
    }
    assert_eq!(PageSize::Mib2.bytes(), 2 * MIB);
    assert_eq!(PageSize::Gib1.bytes(), 1024 * MIB);
    for s in ["4m", "2", "2mb", "1024m", "", "huge"] {
        let reason = bad(&format!("page_size:{s}"), "page_size");
        assert!(reason.contains("one of 2m, 20m, 1g"), "{reason}");
    }
}

// ---- release_threshold_mb ----

#[test]
fn release_threshold_values() {
    assert_eq!(ok("release_threshold_mb:0").release_threshold, Some(0));
    assert_eq!(ok("release_threshold_mb:512").release_threshold, Some(512 * MIB));
    assert_eq!(ok("release_threshold_mb:1536k").release_threshold, Some(1536 * KIB));
    assert_eq!(ok("release_threshold_mb:2G").release_threshold, Some(2 << 30));
    for s in ["-1", "1.5", "", "lots"] {
        bad(&format!("release_threshold_mb:{s}"), "release_threshold_mb");
    }
    let reason = bad("release_threshold_mb:99999999999999999999", "release_threshold_mb");
    assert!(reason.contains("too large"), "{reason}");
}

// ---- paths ----

#[test]
fn paths_may_contain_colons() {
    let c = ok("trace:C:/traces/run:1.trace , acl_library: /opt/a:b/libascendcl.so");
    assert_eq!(c.trace, Some(PathBuf::from("C:/traces/run:1.trace")));
    assert_eq!(c.acl_library.as_deref(), Some("/opt/a:b/libascendcl.so"));
    // Brackets inside a path do not swallow the next entry.
    let c = ok("trace:/tmp/run[1.trace,page_size:2m");
    assert_eq!(c.trace, Some(PathBuf::from("/tmp/run[1.trace")));
    assert_eq!(c.page_size, PageSize::Mib2);
    // Nor does one at the start of a path: only roundup_power2_divisions
    // takes a bracketed list.
    let c = ok("trace:[run1,expandable_segments:false");
    assert_eq!(c.trace, Some(PathBuf::from("[run1")));
    assert_eq!(c.expandable_segments, Some(false));
    let c = ok("acl_library: [x]/lib.so,page_size:20m");
    assert_eq!(c.acl_library.as_deref(), Some("[x]/lib.so"));
    assert_eq!(c.page_size, PageSize::Mib20);
}

#[test]
fn empty_paths_are_refused() {
    let reason = bad("trace:", "trace");
    assert!(reason.contains("needs a path"), "{reason}");
    bad("acl_library:  ", "acl_library");
}

// ---- roundup_power2_divisions ----

#[test]
fn divisions_single_value() {
    for d in [0usize, 1, 2, 4, 8, 16, 1024] {
        let c = ok(&format!("roundup_power2_divisions:{d}"));
        assert_eq!(c.roundup_power2_divisions, RoundupDivisions::uniform(d).unwrap());
    }
    assert_eq!(ok("roundup_power2_divisions:4").roundup_power2_divisions.round(1200), 1280);
    for s in ["3", "6", "-2", "", "four", "2.0", "99999999999999999999"] {
        let reason = bad(&format!("roundup_power2_divisions:{s}"), "roundup_power2_divisions");
        assert!(reason.contains("power of two"), "{reason}");
    }
}

#[test]
fn divisions_list_with_commas() {
    let c = ok("page_size:2m, roundup_power2_divisions:[256:1,512:2,1024:4,>:8], expandable_segments:true");
    let d = &c.roundup_power2_divisions;
    assert_eq!(d.divisions_for(100 * MIB), 1);
    assert_eq!(d.divisions_for(300 * MIB), 2);
    assert_eq!(d.divisions_for(700 * MIB), 4);
    assert_eq!(d.divisions_for(4096 * MIB), 8);
    assert_eq!(c.page_size, PageSize::Mib2);
    assert_eq!(c.expandable_segments, Some(true));
    // Spaces inside the brackets.
    let c2 = ok("roundup_power2_divisions: [ 256 : 1 , 512:2, 1024 :4 , > : 8 ]");
    assert_eq!(c2.roundup_power2_divisions, *d);
    // '>' alone, and no '>'.
    assert_eq!(ok("roundup_power2_divisions:[>:4]").roundup_power2_divisions, RoundupDivisions::uniform(4).unwrap());
    assert_eq!(ok("roundup_power2_divisions:[64:2]").roundup_power2_divisions.divisions_for(64 * MIB), 0);
}

#[test]
fn divisions_list_errors() {
    let cases = [
        ("[256:1,512:2", "closing"),
        ("[]", "empty entry"),
        ("[256:1,,512:2]", "empty entry"),
        ("[256]", "not 'size_mb:divisions'"),
        ("[300:1]", "not a power of two"),
        ("[0:1]", "not a power of two"),
        ("[256:3]", "power of two, got 3"),
        ("[512:1,256:2]", "larger than the previous"),
        ("[256:1,256:2]", "larger than the previous"),
        ("[>:8,256:1]", "must be last"),
        ("[>:8,>:4]", "must be last"),
        ("[256:1]x", "closing"),
        ("[a:1]", "not a whole number"),
        ("[-256:1]", "not a whole number"),
        ("[256:1,>:3]", "power of two, got 3"),
        ("[17592186044416:1]", "too large"),
    ];
    for (value, expect) in cases {
        let reason = bad(&format!("roundup_power2_divisions:{value}"), "roundup_power2_divisions");
        assert!(reason.contains(expect), "{value}: {reason}");
    }
}

// ---- the conflict rule ----

#[test]
fn expandable_segments_with_max_split_size_is_refused() {
    for s in [
        "expandable_segments:true,max_split_size_mb:64",
        "max_split_size_mb:64,expandable_segments:True",
        "expandable_segments:1, max_split_size_mb:20",
    ] {
        let reason = bad(s, "max_split_size_mb");
        assert!(reason.contains("expandable_segments:true"), "{reason}");
        assert!(reason.contains("without bound"), "{reason}");
        assert!(reason.contains("123548"), "{reason}");
    }
    assert_eq!(ok("expandable_segments:false,max_split_size_mb:64").max_split_size, Some(64 * MIB));
}

#[test]
fn max_split_size_needs_fixed_segments_given() {
    // Alone it must not switch the allocator to fixed segments silently:
    // it is refused, and the reason names what it needs.
    for s in ["max_split_size_mb:128", "page_size:2m,max_split_size_mb:20"] {
        let reason = bad(s, "max_split_size_mb");
        assert!(reason.contains("expandable_segments:false"), "{reason}");
        assert!(reason.contains("fixed segments"), "{reason}");
    }
    let c = ok("max_split_size_mb:128,expandable_segments:false");
    assert_eq!((c.expandable_segments, c.max_split_size), (Some(false), Some(128 * MIB)));
}

#[test]
fn expandable_only_keys_are_refused_with_fixed_segments() {
    for (s, key) in [
        ("expandable_segments:false,reserved_headroom:0.02", "reserved_headroom"),
        ("reserved_headroom:0,expandable_segments:False", "reserved_headroom"),
        ("expandable_segments:false,page_size:20m", "page_size"),
        // Given, even at its default value, it does nothing.
        ("expandable_segments:0,page_size:2m", "page_size"),
        ("expandable_segments:false,map_ahead:true", "map_ahead"),
        ("map_ahead:false,expandable_segments:false,max_split_size_mb:64", "map_ahead"),
        ("expandable_segments:false,handle_moves:false", "handle_moves"),
    ] {
        let reason = bad(s, key);
        assert!(reason.contains("no effect with expandable_segments:false"), "{s}: {reason}");
    }
    // With expandable segments (given or by default) they are fine.
    for s in ["expandable_segments:true,reserved_headroom:0.02,page_size:20m", "page_size:1g,map_ahead:false"] {
        ok(s);
    }
}

#[test]
fn map_ahead_is_refused_with_reserved_headroom() {
    for s in [
        "map_ahead:true,reserved_headroom:0.02",
        "reserved_headroom:0.05,map_ahead:false",
        "expandable_segments:true,reserved_headroom:0,map_ahead:True",
    ] {
        let reason = bad(s, "map_ahead");
        assert!(reason.contains("no effect with reserved_headroom"), "{s}: {reason}");
    }
}

#[test]
fn size_suffixes_as_pytorch_users_write_them() {
    for s in ["20m", "20M", "20MB", "20MiB", "20mb", "20"] {
        let c = ok(&format!("expandable_segments:false,max_split_size_mb:{s}"));
        assert_eq!(c.max_split_size, Some(20 * MIB), "{s}");
        assert_eq!(ok(&format!("release_threshold_mb:{s}")).release_threshold, Some(20 * MIB), "{s}");
        assert_eq!(ok(&format!("reuse_cache_mb:{s}")).reuse_cache, Some(20 * MIB), "{s}");
    }
}

// ---- Display ----

#[test]
fn display_is_canonical() {
    assert_eq!(Config::default().to_string(), "");
    // Values equal to the default are not written.
    assert_eq!(ok(" page_size : 2m , roundup_power2_divisions:0").to_string(), "");
    // Equal configs display the same, whatever the spelling.
    assert_eq!(ok("expandable_segments:1").to_string(), ok("expandable_segments:True").to_string());
    assert_eq!(
        ok("expandable_segments:false,max_split_size_mb:1g").to_string(),
        ok("expandable_segments:false,max_split_size_mb:1024").to_string()
    );
    assert_eq!(ok("roundup_power2_divisions:[>:4]").to_string(), "roundup_power2_divisions:4");
}

#[test]
fn display_round_trips() {
    let inputs = [
        "",
        "expandable_segments:True",
        "expandable_segments:0",
        "expandable_segments:false,max_split_size_mb:20",
        "expandable_segments:false,max_split_size_mb:20481k",
        "expandable_segments:false,max_split_size_mb:20971521b",
        "garbage_collection_threshold:0.1",
        "garbage_collection_threshold:0.30000000000000004",
        "garbage_collection_threshold:1e-300",
        "roundup_power2_divisions:0",
        "roundup_power2_divisions:1",
        "roundup_power2_divisions:16",
        "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]",
        "roundup_power2_divisions:[1:0,2:1,4:2]",
        "roundup_power2_divisions:[256:1,>:0]",
        "per_process_memory_fraction:1",
        "per_process_memory_fraction:0.3333333333333333",
        "page_size:2m",
        "page_size:1G",
        "release_threshold_mb:0",
        "release_threshold_mb:7k",
        "trace:/tmp/x:y[1].trace",
        "acl_library: C:\\acl\\libascendcl.so ",
        "expandable_segments:false,max_split_size_mb:100,garbage_collection_threshold:0.7,\
         roundup_power2_divisions:[128:2,>:4],per_process_memory_fraction:0.5,\
         release_threshold_mb:3g,trace:/t,acl_library:/l",
    ];
    for s in inputs {
        let c = ok(s);
        let shown = c.to_string();
        assert_eq!(ok(&shown), c, "{s:?} displayed as {shown:?}");
        assert_eq!(ok(&shown).to_string(), shown, "{s:?}: display is not a fixed point");
    }
}

#[test]
fn display_examples() {
    let c = ok("acl_library:/x/lib.so,page_size:1G,expandable_segments:True,roundup_power2_divisions:[256:1,>:4],\
                release_threshold_mb:1536k,garbage_collection_threshold:0.8,per_process_memory_fraction:1,trace:/tmp/a:b");
    assert_eq!(
        c.to_string(),
        "expandable_segments:true,garbage_collection_threshold:0.8,roundup_power2_divisions:[256:1,>:4],\
         per_process_memory_fraction:1,page_size:1g,release_threshold_mb:1536k,trace:/tmp/a:b,acl_library:/x/lib.so"
    );
    assert_eq!(
        ok("max_split_size_mb:2g,expandable_segments:false").to_string(),
        "expandable_segments:false,max_split_size_mb:2048"
    );
}

// ---- sources: environment and C ----

#[test]
fn env_value() {
    assert_eq!(from_env_value(None).unwrap(), Config::default());
    assert_eq!(from_env_value(Some(OsString::new())).unwrap(), Config::default());
    assert_eq!(from_env_value(Some("page_size:2m".into())).unwrap().page_size, PageSize::Mib2);
    match from_env_value(Some("page_size:3m".into())) {
        Err(Error::BadConfig { key, reason }) => {
            assert_eq!(key, "page_size");
            assert!(reason.ends_with("(in NPUALLOC_CONF)"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStringExt;
        match from_env_value(Some(OsString::from_vec(vec![b'p', 0xff]))) {
            Err(Error::BadConfig { key, .. }) => assert_eq!(key, ENV_VAR),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn from_c_uses_the_string_when_given() {
    assert_eq!(Config::from_c(Some("page_size:1g")).unwrap().page_size, PageSize::Gib1);
    assert_eq!(Config::from_c(Some("")).unwrap(), Config::default());
    assert!(matches!(Config::from_c(Some("bogus:1")), Err(Error::BadConfig { .. })));
}

// ---- property: any input either parses or names a key or an entry ----

fn config_like() -> impl Strategy<Value = String> {
    let atoms = prop_oneof![
        Just("expandable_segments".to_string()),
        Just("max_split_size_mb".to_string()),
        Just("garbage_collection_threshold".to_string()),
        Just("roundup_power2_divisions".to_string()),
        Just("per_process_memory_fraction".to_string()),
        Just("page_size".to_string()),
        Just("release_threshold_mb".to_string()),
        Just("trace".to_string()),
        Just("acl_library".to_string()),
        Just(":".to_string()),
        Just(",".to_string()),
        Just("[".to_string()),
        Just("]".to_string()),
        Just(">".to_string()),
        Just(" ".to_string()),
        Just("true".to_string()),
        Just("2m".to_string()),
        Just("0.5".to_string()),
        "[0-9]{1,22}".prop_map(|s| s),
        "[a-zA-Z_./:]{1,6}".prop_map(|s| s),
    ];
    prop::collection::vec(atoms, 0..24).prop_map(|v| v.concat())
}

fn check_outcome(input: &str) {
    match Config::parse(input) {
        Ok(c) => {
            // Whatever parsed, displays to something that parses back equal.
            let shown = c.to_string();
            assert_eq!(Config::parse(&shown).ok(), Some(c), "{input:?} -> {shown:?}");
        }
        Err(Error::BadConfig { key, reason }) => {
            assert!(!key.is_empty(), "{input:?}: empty key in error ({reason})");
            assert!(!reason.is_empty());
            assert!(
                Key::from_name(&key).is_some() || input.contains(key.as_str()),
                "{input:?}: error names neither a key nor an entry: {key:?} ({reason})"
            );
        }
        Err(other) => panic!("{input:?}: unexpected error kind {other:?}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_strings_never_panic(input in any::<String>()) {
        check_outcome(&input);
    }

    #[test]
    fn config_like_strings_never_panic(input in config_like()) {
        check_outcome(&input);
    }
}

// ---- reuse_cache_mb, reserved_headroom ----

#[test]
fn reuse_cache_mb_values() {
    assert_eq!(ok("reuse_cache_mb:0").reuse_cache_bytes(), 0);
    assert_eq!(ok("reuse_cache_mb:16").reuse_cache_bytes(), 16 * MIB);
    assert_eq!(ok("reuse_cache_mb:512k").reuse_cache_bytes(), 512 * KIB);
    for s in ["-1", "x", "", "1.5"] {
        bad(&format!("reuse_cache_mb:{s}"), "reuse_cache_mb");
    }
}

#[test]
fn map_ahead_values() {
    assert_eq!(ok("").map_ahead, None);
    assert_eq!(ok("map_ahead:false").map_ahead, Some(false));
    assert_eq!(ok("map_ahead:True").map_ahead, Some(true));
    assert_eq!(ok("map_ahead:false").to_string(), "map_ahead:false");
    let reason = bad("map_ahead:maybe", "map_ahead");
    assert!(reason.contains("maybe"), "{reason}");
}

#[test]
fn handle_moves_values() {
    assert_eq!(ok("").handle_moves, None);
    assert_eq!(ok("handle_moves:false").handle_moves, Some(false));
    assert_eq!(ok("handle_moves:1").handle_moves, Some(true));
    assert_eq!(ok("handle_moves:false").to_string(), "handle_moves:false");
    // No effect with reserved_headroom, which moves free pieces itself:
    // refused in either form, naming both keys.
    for value in ["true", "false"] {
        let reason = bad(&format!("reserved_headroom:0.02,handle_moves:{value}"), "handle_moves");
        assert!(reason.contains("reserved_headroom"), "{reason}");
    }
    let reason = bad("handle_moves:often", "handle_moves");
    assert!(reason.contains("often"), "{reason}");
}

#[test]
fn reserved_headroom_values() {
    assert_eq!(ok("reserved_headroom:0").reserved_headroom, Some(0.0));
    assert_eq!(ok("reserved_headroom:0.02").reserved_headroom, Some(0.02));
    assert_eq!(ok("reserved_headroom:3").reserved_headroom, Some(3.0));
    for s in ["-0.01", "nan", "inf", "", "some"] {
        let reason = bad(&format!("reserved_headroom:{s}"), "reserved_headroom");
        assert!(reason.contains("at least 0"), "{reason}");
    }
}

#[test]
fn new_keys_round_trip_through_display() {
    let c = ok("reuse_cache_mb:8,reserved_headroom:0.05");
    assert_eq!(c.to_string(), "reuse_cache_mb:8,reserved_headroom:0.05");
    assert_eq!(ok(&c.to_string()), c);
}

#[test]
fn max_handle_values() {
    assert_eq!(ok("").max_handle, None);
    assert_eq!(ok("max_handle_mb:20").max_handle, Some(20 << 20));
    assert_eq!(ok("max_handle_mb:2").to_string(), "max_handle_mb:2");
    assert_eq!(ok("page_size:1g,max_handle_mb:2g").max_handle, Some(2 << 30));
    // A whole number of the large pool's pages.
    for (s, page) in [("max_handle_mb:3", "2m"), ("max_handle_mb:0", "2m"), ("page_size:20m,max_handle_mb:30", "20m")] {
        let reason = bad(s, "max_handle_mb");
        assert!(reason.contains(&format!("whole number of pages of page_size:{page}")), "{s}: {reason}");
    }
    let reason = bad("expandable_segments:false,max_handle_mb:4", "max_handle_mb");
    assert!(reason.contains("applies to expandable segments only"), "{reason}");
}
