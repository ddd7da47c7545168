//! `aclemu_host_usage`: live aclrtMallocHost memory of the process, in
//! host pages, counted up by each allocation and down by each free; NULL
//! out-pointers are refused. (One test in its own binary: the count is
//! process-wide.)

use ascendcl::*;
use std::ptr::null_mut;

fn host() -> (u64, u64) {
    let (mut bytes, mut count) = (u64::MAX, u64::MAX);
    // SAFETY: valid out-pointers.
    assert_eq!(unsafe { aclemu_host_usage(&mut bytes, &mut count) }, 0);
    (bytes, count)
}

#[test]
fn host_usage_follows_malloc_host_and_free_host() {
    // SAFETY: a valid page-size query.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64;
    assert_eq!(host(), (0, 0));
    let (mut a, mut b) = (null_mut(), null_mut());
    // SAFETY: valid out-pointers; the blocks are freed once.
    unsafe {
        assert_eq!(aclrtMallocHost(&mut a, 1000), 0);
        assert_eq!(host(), (page, 1), "one block, one page");
        assert_eq!(aclrtMallocHost(&mut b, 3 * page as usize + 1), 0);
        assert_eq!(host(), (5 * page, 2));
        assert_eq!(aclrtFreeHost(a), 0);
        assert_eq!(host(), (4 * page, 1));
        assert_eq!(aclrtFreeHost(b), 0);
    }
    assert_eq!(host(), (0, 0));
    let mut n = 0u64;
    // SAFETY: NULL is refused before anything is written.
    unsafe {
        assert_eq!(aclemu_host_usage(null_mut(), &mut n), 100000);
        assert_eq!(aclemu_host_usage(&mut n, null_mut()), 100000);
    }
}
