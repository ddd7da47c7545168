"""The fake-tensor recorder against the profiler's record of real CPU runs.

Tiny configs of the same architectures as the shipped traces, so the whole
file runs in well under a minute. Needs torch and transformers.
"""

import gzip
import os
import sys
import warnings

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from acl_record import scenarios  # noqa: E402
from acl_record.trace import TraceEvents  # noqa: E402
from acl_record.tracker import fake_recording  # noqa: E402
from acl_record.validate import compare  # noqa: E402

warnings.simplefilter("ignore")


def test_serving_matches_the_profiler_event_for_event():
    # Prefill and decode with a growing DynamicCache, two requests.
    r = compare(lambda tr: scenarios.serve(tr, "tiny-llama", [(1, 40, 4), (2, 17, 3)]))
    assert r["compared_events"] > 1000
    assert r["same_sequence"], r
    assert r["fake_peak"] == r["profiled_peak"], r


def test_gpt2_serving_matches_the_profiler_event_for_event():
    r = compare(lambda tr: scenarios.serve(tr, "gpt2-tiny", [(1, 24, 3), (2, 9, 2)]))
    assert r["same_sequence"], r
    assert r["fake_peak"] == r["profiled_peak"], r


def test_training_matches_the_profiler_event_for_event():
    # Gradient checkpointing (recomputation in backward), AdamW, gradient
    # buckets, the engine's gradient accumulation.
    r = compare(lambda tr: scenarios.train(tr, "tiny-llama", 2, 2, 32, dtype=None, bucket_mib=1))
    assert r["compared_events"] > 1000
    assert r["same_sequence"], r
    assert r["fake_peak"] == r["profiled_peak"], r


def test_gradient_accumulation_is_in_place_as_on_plain_tensors():
    # Two uses of x: the engine adds the two gradients. On plain tensors it
    # adds into the first (it holds the only reference), so the sum takes no
    # memory of its own; the recording must show the same.
    def work(tr):
        x = torch.ones(4, 4, requires_grad=True)
        y = (x * 2) + (x * 3)
        y.sum().backward()
        return x

    r = compare(work)
    assert r["same_sequence"], r
    with fake_recording() as tr:
        work(tr)
    assert sum(1 for line in tr.events.lines if line.startswith("a ") and line.split()[2] == "64") == 6


def test_streams_of_the_training_recording():
    with fake_recording() as tr:
        model, _, buckets = scenarios.train(tr, "tiny-llama", 2, 1, 16, dtype=None, bucket_mib=1)
    lines = tr.events.lines
    uses = [line for line in lines if line[0] == "u"]
    # The batches: two tensors per step, allocated on the copy stream and
    # recorded on the compute stream.
    copy_allocs = {line.split()[1] for line in lines if line[0] == "a" and line.split()[3] == "1"}
    assert len(copy_allocs) == 4
    assert {u.split()[1] for u in uses if u.split()[2] == "0"} == copy_allocs
    # Every bucket recorded on the communication stream, one wait per step.
    comm_uses = [u for u in uses if u.split()[2] == "2"]
    assert len(comm_uses) == buckets >= 2
    assert [line for line in lines if line[0] == "w"] == ["w 2", "w 2"]
    # Each recorded bucket is freed after its use and before the step's wait.
    for u in comm_uses:
        i = lines.index(u)
        free = lines.index("f " + u.split()[1], i)
        assert free < lines.index("w 2", i)


def test_resize_gives_a_new_allocation():
    with fake_recording() as tr:
        x = torch.empty(10)
        x.resize_(1000)
        del x
    assert tr.events.lines == ["a 0 40 0", "a 1 4000 0", "f 0", "f 1"]


def test_written_file_is_acl_trace_v1(tmp_path):
    ev = TraceEvents()
    a = ev.alloc(512, 0)
    ev.use(a, 1)
    ev.free(a)
    ev.wait(1)
    path = tmp_path / "t.trace.gz"
    ev.write(path, "a check")
    text = gzip.open(path, "rt").read()
    assert text == "# acl-trace v1\n# source: a check\na 0 512 0\nu 0 1\nf 0\nw 1\n"
    assert ev.peak == 512 and ev.live == 0
