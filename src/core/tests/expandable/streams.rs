//! Expandable segments beside other streams' work: a neighbour's growth keeps
//! data in place, a held stream's pages are unmapped only after its sync, and
//! empty_cache syncs only the streams whose pages it unmaps.

use super::*;

#[test]
fn data_survives_a_neighbours_growth() {
    let _g = emu_lock();
    let base = Baseline::take();
    budget(GIB);
    for config in [EXP_2M, "expandable_segments:true,page_size:20m"] {
        let a = allocator(config);
        // Large pool: a ends inside a page that b's growth shares.
        let a_size = 3 * MIB + 4096;
        let pa = a.malloc(a_size, Stream::DEFAULT).unwrap();
        fill(pa, a_size, 0xA1);
        let maps = a.stats().unwrap().num_maps;
        let pb = a.malloc(40 * MIB, Stream::DEFAULT).unwrap();
        assert_eq!(pb, pa + a_size, "{config}: b follows a directly");
        assert!(a.stats().unwrap().num_maps > maps, "{config}: b needed new pages");
        assert!(check_fill(pa, a_size, 0xA1), "{config}: a's data changed when b grew the range");
        fill(pb, 40 * MIB, 0xB2);
        assert!(check_fill(pa, a_size, 0xA1), "{config}: writing b changed a");

        // Small pool: two 1 MiB blocks fill page 0, a third maps page 1.
        let s1 = a.malloc(MIB, Stream::DEFAULT).unwrap();
        fill(s1, MIB, 0xC1);
        let s2 = a.malloc(MIB - 512, Stream::DEFAULT).unwrap();
        fill(s2, MIB - 512, 0xC2);
        let s3 = a.malloc(MIB, Stream::DEFAULT).unwrap();
        fill(s3, MIB, 0xC3);
        assert!(check_fill(s1, MIB, 0xC1) && check_fill(s2, MIB - 512, 0xC2), "{config}: small blocks corrupted");

        // Freeing and reclaiming the neighbours keeps the survivors intact.
        a.free(pa).unwrap();
        a.free(s2).unwrap();
        a.empty_cache().unwrap();
        assert!(check_fill(pb, 40 * MIB, 0xB2), "{config}: b lost data when a's pages were unmapped");
        assert!(check_fill(s1, MIB, 0xC1) && check_fill(s3, MIB, 0xC3), "{config}");
        for p in [pb, s1, s3] {
            a.free(p).unwrap();
        }
        teardown_clean(a, &base);
    }
    set_capacity(1 << 30);
}

#[test]
fn held_stream_pages_are_unmapped_only_after_its_sync() {
    let _g = emu_lock();
    let base = Baseline::take();
    budget(GIB);
    let a = paged(EXP_2M);
    let s = new_stream();
    let s2 = new_stream();
    // s2's memory is live; s's will be freed while work on s is held.
    let other = a.malloc(4 * MIB, s2).unwrap();
    let p = a.malloc(6 * MIB, s).unwrap();
    let q = a.malloc(4096, s).unwrap();
    fill(p, 6 * MIB, 0x5E);
    let mut out = vec![0u8; 64 << 10];
    hold_stream(s);
    let tail = p + 6 * MIB - out.len();
    queue_copy_out(&a, &mut out, tail, s);
    assert!(out.iter().all(|&b| b == 0), "the held copy ran early");
    a.free(p).unwrap();
    a.free(q).unwrap();
    let pages_of_s = 3 + 1;

    // Growth elsewhere must not take s's pages while s has work queued.
    let maps_before = a.stats().unwrap();
    let g = a.malloc(6 * MIB, s2).unwrap();
    let s_now = a.stats().unwrap();
    assert_eq!(s_now.num_unmaps, maps_before.num_unmaps, "pages of a busy stream were unmapped without a sync");
    assert_eq!(base.syncs(), 0, "nothing needed a sync yet");
    assert!(out.iter().all(|&b| b == 0));

    // A failed synchronize: nothing is unmapped in that pass; the next pass
    // synchronizes s (its held copy completes, reading pages that are still
    // mapped) and only s (s2's memory is all live), then unmaps them, and
    // the failure is reported.
    let syncs = base.syncs();
    fail_nth("aclrtSynchronizeStream", 1);
    assert!(a.empty_cache().is_err(), "empty_cache must report the failed synchronize");
    fail_nth("aclrtSynchronizeStream", 0);
    assert!(out.iter().all(|&b| b == 0x5E), "the held copy did not run before its pages were unmapped");
    // The refused synchronize is not counted by the emulator: the next
    // pass synchronizes s once, and nothing else.
    assert_eq!(base.syncs() - syncs, 1, "empty_cache synchronized other than s, once");
    let s_after = a.stats().unwrap();
    assert_eq!(s_after.num_unmaps - s_now.num_unmaps, pages_of_s as u64);
    // s2: `other` [0, 4) MiB and g [4, 10) MiB: five pages stay.
    assert_eq!(s_after.reserved_bytes as usize, 5 * PAGE);
    assert_eq!(base.vmm().mapped_bytes, (5 * PAGE) as i64);
    check_accounting(&a, &base, Some(PAGE), "after empty_cache");

    release_stream(s);
    a.free(other).unwrap();
    a.free(g).unwrap();
    teardown_clean(a, &base);
    drop_stream(s);
    drop_stream(s2);
    set_capacity(1 << 30);
}

#[test]
fn empty_cache_syncs_only_the_streams_whose_pages_it_unmaps() {
    let _g = emu_lock();
    let base = Baseline::take();
    budget(GIB);
    let a = paged(EXP_2M);
    let s1 = new_stream();
    let s2 = new_stream();
    let p = a.malloc(6 * MIB, s1).unwrap();
    let ps = a.malloc(512, s1).unwrap();
    let q = a.malloc(6 * MIB, s2).unwrap();
    a.free(p).unwrap();
    a.free(ps).unwrap();
    let syncs = base.syncs();
    a.empty_cache().unwrap();
    assert_eq!(base.syncs() - syncs, 1, "two ranges of s1 need one sync of s1, and s2 none");
    assert_eq!(a.stats().unwrap().reserved_bytes as usize, 3 * PAGE, "only q's pages stay");
    a.free(q).unwrap();
    let syncs = base.syncs();
    a.empty_cache().unwrap();
    assert_eq!(base.syncs() - syncs, 1, "now s2, once");
    assert_eq!(a.stats().unwrap().reserved_bytes, 0);
    teardown_clean(a, &base);
    drop_stream(s1);
    drop_stream(s2);
    set_capacity(1 << 30);
}
