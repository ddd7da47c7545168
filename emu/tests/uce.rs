//! Uncorrectable memory errors (docs/runtime-behaviour.md, "Uncorrectable
//! memory errors"): an injected range is reported once by the device's next
//! synchronize, listed by aclrtGetMemUceInfo until aclrtMemUceRepair.

mod common;
use ascendcl::*;
use common::*;
use std::ptr::null_mut;

const DEVICE_MEM_ERROR: i32 = 507_053;

fn info() -> MemUceInfo {
    MemUceInfo { addr: null_mut(), len: 0, reserved: [0; 14] }
}

#[test]
fn an_error_is_reported_once_listed_and_repaired() {
    let dev = Dev::take();
    let p = malloc(1 << 20);
    let s = stream();
    // SAFETY: live locals, a stream and memory of this device; NULL where refused.
    unsafe {
        assert_eq!(aclemu_inject_uce(dev.id, p as usize + 4096, 64), 0);
        assert_eq!(aclemu_inject_uce(dev.id, p as usize, 0), INVALID_PARAM);
        assert_eq!(aclemu_inject_uce(999, p as usize, 64), INVALID_PARAM);
        // The next synchronize of the device's work reports it, once, and
        // leaves it as the thread's last error (torch_npu peeks at it).
        assert_eq!(aclrtSynchronizeStream(s), DEVICE_MEM_ERROR);
        assert_eq!(aclrtPeekAtLastError(0), DEVICE_MEM_ERROR);
        assert_eq!(aclrtGetLastError(0), DEVICE_MEM_ERROR);
        assert_eq!(aclrtSynchronizeStream(s), 0);
        assert_eq!(aclrtSynchronizeDevice(), 0);
        // Listed until repaired.
        let mut list = [info(); 4];
        let mut n = 99;
        assert_eq!(aclrtGetMemUceInfo(dev.id, list.as_mut_ptr(), 4, &mut n), 0);
        assert_eq!((n, list[0].addr as usize, list[0].len), (1, p as usize + 4096, 64));
        assert_eq!(aclrtGetMemUceInfo(dev.id, list.as_mut_ptr(), 0, &mut n), INVALID_PARAM, "array too short");
        assert_eq!(aclrtGetMemUceInfo(dev.id, null_mut(), 4, &mut n), INVALID_PARAM);
        assert_eq!(aclrtGetMemUceInfo(dev.id, list.as_mut_ptr(), 4, null_mut()), INVALID_PARAM);
        assert_eq!(aclrtGetMemUceInfo(999, list.as_mut_ptr(), 4, &mut n), RT_INVALID_DEVICEID);
        // The runtime compares the first 14 bytes of the reserved words
        // with zero, before it looks at the device.
        let mut bad = list[0];
        bad.reserved[0] = 1;
        assert_eq!(aclrtMemUceRepair(dev.id, &bad, 1), INVALID_PARAM, "reserved bytes must be 0");
        assert_eq!(aclrtMemUceRepair(999, &bad, 1), INVALID_PARAM, "reserved bytes are checked first");
        bad.reserved[0] = 0;
        bad.reserved[3] = 1;
        let many = [info(); 21];
        assert_eq!(aclrtMemUceRepair(dev.id, many.as_ptr(), 21), INVALID_PARAM, "at most 20 entries");
        assert_eq!(aclrtMemUceRepair(999, many.as_ptr(), 20), RT_INVALID_DEVICEID);
        assert_eq!(aclrtMemUceRepair(dev.id, &bad, 1), 0, "beyond the 14 bytes: not compared");
        assert_eq!(aclrtGetMemUceInfo(dev.id, list.as_mut_ptr(), 4, &mut n), 0);
        assert_eq!(n, 0, "a repair drops the device's list");
        // At most 20 ranges a device.
        for i in 0..20 {
            assert_eq!(aclemu_inject_uce(dev.id, p as usize + i * 64, 64), 0);
        }
        assert_eq!(aclemu_inject_uce(dev.id, p as usize, 64), INVALID_PARAM, "a full list");
        let mut all = [info(); 20];
        assert_eq!(aclrtGetMemUceInfo(dev.id, all.as_mut_ptr(), 20, &mut n), 0);
        assert_eq!(n, 20);
        assert_eq!(aclrtSynchronizeDevice(), DEVICE_MEM_ERROR);
        assert_eq!(aclrtMemUceRepair(dev.id, all.as_ptr(), 20), 0);
        // A device synchronize reports it too.
        assert_eq!(aclemu_inject_uce(dev.id, p as usize, 8), 0);
        assert_eq!(aclrtSynchronizeDevice(), DEVICE_MEM_ERROR);
        assert_eq!(aclrtSynchronizeDevice(), 0);
        assert_eq!(aclrtGetMemUceInfo(dev.id, list.as_mut_ptr(), 4, &mut n), 0);
        assert_eq!(aclrtMemUceRepair(dev.id, list.as_ptr(), n), 0);
        assert_eq!(aclrtDestroyStream(s), 0);
        assert_eq!(aclrtFree(p), 0);
    }
    dev.assert_clean();
}
