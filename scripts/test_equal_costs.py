"""Checks of scripts/equal_costs.py (run by scripts/test.sh):
python3 scripts/test_equal_costs.py"""

import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import equal_costs  # noqa: E402

# The call lines of one replay_torch run (expandable segments, made up).
PEER_OUT = """ops replayed     1000
stream events    uses 4 (unknown 0), waits 2
cudaMalloc calls 0 (segments 0, cudaFree 1, failed cudaMalloc 1)
cuMemCreate      10 (map 12, unmap 3, release 2, failed 1, VA reserve 2)
runtime calls    cudaEventRecord 4, cudaEventQuery 4, cudaEventCreate 1, stream/device synchronize 5
"""


class EqualCosts(unittest.TestCase):
    def test_cost_table(self):
        t = equal_costs.parse_cost("aclrtMalloc=20us, aclrtFree=1.5ms,aclrtMapMem=700ns")
        self.assertEqual(t, {"aclrtMalloc": 20000, "aclrtFree": 1500000, "aclrtMapMem": 700})
        with self.assertRaises(ValueError):
            equal_costs.parse_cost("aclrtMalloc=20")
        eq = equal_costs.parse_cost(equal_costs.EQUAL_ACL)
        self.assertEqual((eq["aclrtMapMem"], eq["aclrtSynchronizeStream"]), (20000, 50000))

    def test_peer_calls_are_charged_as_the_acl_calls_they_stand_for(self):
        c = equal_costs.peer_calls(PEER_OUT)
        self.assertEqual((c["creates"], c["maps"], c["unmaps"], c["releases"]), (10, 12, 3, 2))
        self.assertEqual((c["failed_mallocs"], c["failed_creates"], c["reserves"]), (1, 1, 2))
        self.assertEqual((c["frees"], c["syncs"], c["waits"], c["ops"]), (1, 5, 2, 1000))
        cost = equal_costs.parse_cost(equal_costs.EQUAL_ACL)
        # 1 failed malloc + 1 free + 11 creates + 2 releases + 12 maps + 3
        # unmaps + 2 reserves = 32 calls at 20 us; 5 syncs less 2 waits at 50 us.
        self.assertAlmostEqual(equal_costs.peer_ns_per_op(c, cost), (32 * 20000 + 3 * 50000) / 1000)

    def test_npualloc_calls_less_the_traces_waits(self):
        cost = equal_costs.parse_cost(equal_costs.EQUAL_ACL)
        row = {"ops": 100, "acl_calls": {"aclrtMapMem": 3, "aclrtMallocPhysical": 3, "aclrtGetMemInfo": 7,
                                         "aclrtReserveMemAddress": 1, "aclrtSynchronizeStream": 4}}
        # GetMemInfo is not in the table; 2 of the 4 syncs are the trace's.
        self.assertAlmostEqual(equal_costs.npu_ns_per_op(row, cost, 2), (7 * 20000 + 2 * 50000) / 100)
        self.assertIsNone(equal_costs.npu_ns_per_op({"ops": 1, "acl_calls": {}}, cost, 0))

    def test_trace_waits(self):
        with tempfile.NamedTemporaryFile("w", suffix=".trace", delete=False) as f:
            f.write("# acl-trace v1\na 0 64 0\nw 0\nu 0 1\nw 1\nf 0\n")
        try:
            self.assertEqual(equal_costs.trace_waits(f.name), 2)
        finally:
            os.unlink(f.name)


if __name__ == "__main__":
    unittest.main()
