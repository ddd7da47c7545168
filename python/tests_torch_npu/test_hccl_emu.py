"""The harness's emulated HCCL (tools/torch_npu/hccl_emu.c, built into the venv's libhccl.so by
scripts/setup-torch-npu.sh), driven through ctypes in two real processes, each on its own
emulated device: every collective's results for several types and reduce ops (in place, and in
chunks larger than a staging slot), the stream order (a collective waits for its stream's queued
work, then is queued there itself), the zero-copy registration rules and their codes, the
zero-copy / staged counts, refused root info, ranks and configs, timeouts and a peer that left,
and nothing left in /dev/shm. Then torch.distributed with backend "hccl" on it, with torch_npu's
own allocator, without and with torch_npu's zero copy. The emulator runs no operators: tensors
are made on the host and moved."""

import socket

import pytest

# Both workers of a run: the library torch_npu loaded (its libhccl.so), its ctypes signatures,
# and the emulator's test controls through the wrapper libascendcl.so.
COMMON = r'''
import ctypes as C
import glob
import os
import time
import torch.multiprocessing as mp

HCCL = {"int8": 0, "int16": 1, "int32": 2, "float16": 3, "float32": 4, "int64": 5, "uint8": 7,
        "float64": 10, "bfloat16": 11}
SUM, PROD, MAX, MIN = 0, 1, 2, 3
E_PARA, E_PTR, E_NOT_SUPPORT, E_TIMEOUT, E_REMOTE = 1, 2, 5, 9, 21


def loaded(name):
    for line in open("/proc/self/maps"):
        path = line.split()[-1]
        if path.endswith("/" + name):
            return C.CDLL(path)
    raise RuntimeError(f"no {name} loaded")


def hccl():
    lib = loaded("libhccl.so")
    vp, u32, u64, i32, sz = C.c_void_p, C.c_uint32, C.c_uint64, C.c_int, C.c_size_t
    signatures = {
        "HcclGetRootInfo": [vp], "HcclCommInitRootInfo": [u32, vp, u32, C.POINTER(vp)],
        "HcclCommInitRootInfoConfig": [u32, vp, u32, vp, C.POINTER(vp)],
        "HcclAllReduce": [vp, vp, u64, i32, i32, vp, vp], "HcclBroadcast": [vp, u64, i32, u32, vp, vp],
        "HcclAllGather": [vp, vp, u64, i32, vp, vp], "HcclReduceScatter": [vp, vp, u64, i32, i32, vp, vp],
        "HcclSend": [vp, u64, i32, u32, vp, vp], "HcclRecv": [vp, u64, i32, u32, vp, vp],
        "HcclBarrier": [vp, vp], "HcclCommDestroy": [vp],
        "HcclGetRankSize": [vp, C.POINTER(u32)], "HcclGetRankId": [vp, C.POINTER(u32)],
        "HcclGetCommName": [vp, C.c_char_p], "HcclGetCommAsyncError": [vp, C.POINTER(i32)],
        "HcclCommSetMemoryRange": [vp, vp, sz, sz, u64], "HcclCommUnsetMemoryRange": [vp, vp],
        "HcclCommActivateCommMemory": [vp, vp, sz, sz, vp, u64], "HcclCommDeactivateCommMemory": [vp, vp],
        "HcclCommRegister": [vp, vp, u64, C.POINTER(vp), u32], "HcclCommDeregister": [vp, vp],
        "hcclemu_counts": [C.POINTER(u64), C.POINTER(u64)], "hcclemu_active_bytes": [C.POINTER(u64)],
    }
    for name, args in signatures.items():
        getattr(lib, name).argtypes = args
        getattr(lib, name).restype = i32
    lib.HcclGetCommConfigCapability.restype = u32
    lib.HcclGetErrorString.argtypes = [i32]
    lib.HcclGetErrorString.restype = C.c_char_p
    return lib


def emulator():
    emu = loaded("libascendcl.so")
    for name in ("aclemu_stream_hold", "aclemu_stream_release", "aclrtSynchronizeStream"):
        getattr(emu, name).argtypes = [C.c_void_p]
    emu.aclrtStreamQuery.argtypes = [C.c_void_p, C.POINTER(C.c_uint32)]
    emu.aclrtMemcpyAsync.argtypes = [C.c_void_p, C.c_size_t, C.c_void_p, C.c_size_t, C.c_int, C.c_void_p]
    return emu


def root_info(lib):
    buf = C.create_string_buffer(4108)
    assert lib.HcclGetRootInfo(buf) == 0
    return buf.raw


def config(name=b"", size=2232, magic=0xF0F0F0F0, version=10):
    # HcclCommConfig as HcclCommConfigInit leaves it: {size, magic, version, 0}, then the fields;
    # hcclCommName[128] at offset 32.
    buf = C.create_string_buffer(2232)
    C.memmove(buf, C.byref(C.c_size_t(size)), 8)
    C.memmove(C.addressof(buf) + 8, C.byref(C.c_uint32(magic)), 4)
    C.memmove(C.addressof(buf) + 12, C.byref(C.c_uint32(version)), 4)
    C.memmove(C.addressof(buf) + 32, name, len(name))
    return buf


def init(lib, n, root, rank, cfg=None):
    comm = C.c_void_p()
    if cfg is None:
        rc = lib.HcclCommInitRootInfo(n, root, rank, C.byref(comm))
    else:
        rc = lib.HcclCommInitRootInfoConfig(n, root, rank, cfg, C.byref(comm))
    return rc, comm


def counts(lib):
    z, s = C.c_uint64(), C.c_uint64()
    lib.hcclemu_counts(C.byref(z), C.byref(s))
    return z.value, s.value


def active_bytes(lib):
    b = C.c_uint64()
    lib.hcclemu_active_bytes(C.byref(b))
    return b.value


def leftovers(pids):
    # Shared objects are named /hcclemu.<pid of the HcclGetRootInfo caller>.<seq>.<token>.
    return sorted(p for pid in pids for p in glob.glob(f"/dev/shm/hcclemu.{pid}.*"))


def entry(rank, inbox, results, *args):
    # A worker reports its exception instead of leaving the parent waiting.
    try:
        results.put((rank, worker(rank, inbox, *args)))
    except BaseException:
        import traceback
        results.put((rank, {"error": traceback.format_exc()}))


def start(*args):
    """Runs worker(rank, inbox, *args) in two spawned processes; their results by rank."""
    ctx = mp.get_context("spawn")
    inbox = [ctx.Queue(), ctx.Queue()]
    results = ctx.Queue()
    procs = [ctx.Process(target=entry, args=(r, inbox, results) + args, daemon=True) for r in range(2)]
    for p in procs:
        p.start()
    got = {}
    for _ in range(2):
        rank, value = results.get(timeout=400)
        got[rank] = value
    for p in procs:
        p.join(timeout=60)
    return got, [p.exitcode for p in procs], [p.pid for p in procs]
'''

COLLECTIVES = COMMON + r'''
N = 10007  # elements: several 4 KiB staging chunks for every type (HCCLEMU_CHUNK_BYTES below)
DTYPES = ["float32", "float16", "bfloat16", "float64", "int8", "int16", "int32", "int64", "uint8"]


def values(rank, dtype, n=N):
    # Small integers: exact in every type, products of two fit in int8.
    i = torch.arange(n, dtype=torch.int64)
    v = (i * 7 + rank * 3) % 11
    return (v if dtype == "uint8" else v - 5).to(getattr(torch, dtype))


def expected(op, a, b):
    return {SUM: a + b, PROD: a * b, MAX: torch.maximum(a, b), MIN: torch.minimum(a, b)}[op]


def worker(rank, inbox, stream_checks):
    checks = {}

    def check(name, got, want):
        checks[name] = [got, want]

    torch.npu.set_device(rank)
    lib, emu = hccl(), emulator()
    stream = torch.npu.current_stream().npu_stream
    peer = 1 - rank
    if rank == 0:
        roots = [root_info(lib), root_info(lib)]
        inbox[1].put(roots)
    else:
        roots = inbox[1].get(timeout=120)

    # Two comms in one process: one with a config (its name kept), one without (a made-up name,
    # the same on both ranks).
    rc, world = init(lib, 2, roots[0], rank, config(b"emu_world"))
    check("init_config", rc, 0)
    rc, other = init(lib, 2, roots[1], rank)
    check("init_plain", rc, 0)
    name = C.create_string_buffer(128)
    lib.HcclGetCommName(world, name)
    check("name_from_config", name.value.decode(), "emu_world")
    lib.HcclGetCommName(other, name)
    other_name = name.value.decode()
    size, rid = C.c_uint32(), C.c_uint32()
    lib.HcclGetRankSize(world, C.byref(size))
    lib.HcclGetRankId(world, C.byref(rid))
    check("rank_size_id", [size.value, rid.value], [2, rank])
    check("capability_has_comm_name", lib.HcclGetCommConfigCapability() > 2, True)
    err = C.c_int(-1)
    check("async_error", [lib.HcclGetCommAsyncError(world, C.byref(err)), err.value], [0, 0])
    check("error_string", lib.HcclGetErrorString(E_TIMEOUT).decode(), "timeout")

    def dev(t):
        return t.to("npu")

    # all-reduce: every type and op, out of place and in place.
    z0, s0 = counts(lib)
    for dtype in DTYPES:
        mine, theirs = values(rank, dtype), values(peer, dtype)
        for op in (SUM, PROD, MAX, MIN):
            want = expected(op, mine, theirs)
            src, dst = dev(mine), torch.empty(N, dtype=mine.dtype, device="npu")
            rc = lib.HcclAllReduce(src.data_ptr(), dst.data_ptr(), N, HCCL[dtype], op, world, stream)
            check(f"allreduce_{dtype}_{op}", [rc, bool(torch.equal(dst.cpu(), want))], [0, True])
        inplace = dev(mine)
        rc = lib.HcclAllReduce(inplace.data_ptr(), inplace.data_ptr(), N, HCCL[dtype], SUM, other, stream)
        check(f"allreduce_inplace_{dtype}", [rc, bool(torch.equal(inplace.cpu(), mine + theirs))], [0, True])
    z1, s1 = counts(lib)
    check("plain_memory_is_staged", [z1 - z0, s1 - s0], [0, len(DTYPES) * 5])

    # broadcast from rank 1, all-gather (in place too), reduce-scatter, send/recv, barrier.
    for dtype in ("float32", "bfloat16", "int64"):
        mine, theirs = values(rank, dtype), values(peer, dtype)
        t = dev(mine)
        rc = lib.HcclBroadcast(t.data_ptr(), N, HCCL[dtype], 1, world, stream)
        check(f"broadcast_{dtype}", [rc, bool(torch.equal(t.cpu(), values(1, dtype)))], [0, True])
        src, out = dev(mine), torch.empty(2 * N, dtype=mine.dtype, device="npu")
        rc = lib.HcclAllGather(src.data_ptr(), out.data_ptr(), N, HCCL[dtype], world, stream)
        both = torch.cat([values(0, dtype), values(1, dtype)])
        check(f"allgather_{dtype}", [rc, bool(torch.equal(out.cpu(), both))], [0, True])
        whole = torch.zeros(2 * N, dtype=mine.dtype)
        whole[rank * N:(rank + 1) * N] = mine
        whole = dev(whole)  # in place: the send buffer is this rank's part of the output
        part = whole.data_ptr() + rank * N * mine.element_size()
        rc = lib.HcclAllGather(part, whole.data_ptr(), N, HCCL[dtype], world, stream)
        check(f"allgather_inplace_{dtype}", [rc, bool(torch.equal(whole.cpu(), both))], [0, True])
        for op in (SUM, MAX):
            src = dev(torch.cat([values(rank, dtype), values(rank + 2, dtype)]))
            out = torch.empty(N, dtype=mine.dtype, device="npu")
            rc = lib.HcclReduceScatter(src.data_ptr(), out.data_ptr(), N, HCCL[dtype], op, world, stream)
            # rank r gets part r of every rank's input: rank 0 values(0), values(1); rank 1
            # values(2), values(3).
            want = expected(op, values(2 * rank, dtype), values(2 * rank + 1, dtype))
            check(f"reducescatter_{dtype}_{op}", [rc, bool(torch.equal(out.cpu(), want))], [0, True])
    t = dev(values(0, "float32")) if rank == 0 else torch.empty(N, device="npu")
    rc = lib.HcclSend(t.data_ptr(), N, HCCL["float32"], 1, world, stream) if rank == 0 else \
        lib.HcclRecv(t.data_ptr(), N, HCCL["float32"], 0, world, stream)
    check("send_recv", [rc, bool(torch.equal(t.cpu(), values(0, "float32")))], [0, True])
    check("barrier", lib.HcclBarrier(world, stream), 0)
    check("count_0", lib.HcclAllReduce(None, None, 0, HCCL["float32"], SUM, world, stream), 0)

    # Refused before any data moves (the same on both ranks, so nothing waits).
    scratch = torch.empty(64, device="npu")
    buf = scratch.data_ptr()
    check("unsupported_op", lib.HcclAllReduce(buf, buf, 4, HCCL["float32"], 4, world, stream), E_NOT_SUPPORT)
    check("int128_reduce", lib.HcclAllReduce(buf, buf, 4, 12, SUM, world, stream), E_NOT_SUPPORT)
    check("fp8_reduce", lib.HcclAllReduce(buf, buf, 4, 15, SUM, world, stream), E_NOT_SUPPORT)
    check("unknown_dtype", lib.HcclBroadcast(buf, 4, 99, 0, world, stream), E_NOT_SUPPORT)
    check("bad_root", lib.HcclBroadcast(buf, 4, HCCL["float32"], 2, world, stream), E_PARA)
    check("send_to_self", lib.HcclSend(buf, 4, HCCL["float32"], rank, world, stream), E_PARA)
    check("null_buffer", lib.HcclAllReduce(None, buf, 4, HCCL["float32"], SUM, world, stream), E_PTR)
    check("null_comm", lib.HcclAllReduce(buf, buf, 4, HCCL["float32"], SUM, None, stream), E_PTR)

    # Stream order: a copy queued on a held stream lands before the collective reads, and the
    # collective itself is then queued there (when the emulator has aclemu_launch).
    if stream_checks:
        x = dev(torch.zeros(N))
        y = dev(torch.full((N,), float(rank + 5)))
        torch.npu.synchronize()
        assert emu.aclemu_stream_hold(stream) == 0
        assert emu.aclrtMemcpyAsync(x.data_ptr(), 4 * N, y.data_ptr(), 4 * N, 3, stream) == 0  # D2D
        status = C.c_uint32()
        emu.aclrtStreamQuery(stream, C.byref(status))
        check("copy_queued", status.value, 1)
        rc = lib.HcclAllReduce(x.data_ptr(), x.data_ptr(), N, HCCL["float32"], SUM, world, stream)
        emu.aclrtStreamQuery(stream, C.byref(status))
        queued = status.value
        check("release", emu.aclemu_stream_release(stream), 0)
        check("after_stream_work", [rc, bool((x.cpu() == 11.0).all())], [0, True])
        launch = getattr(emu, "aclemu_launch", None) is not None
        check("collective_queued_on_its_stream", queued, 1 if launch else 0)

    # Zero copy: the process-wide table (each rank its own), checked against the rules.
    big = torch.empty(2 << 20, dtype=torch.float32, device="npu")  # 8 MiB
    base, MiB, h = big.data_ptr(), 1 << 20, C.c_void_p(0x1234)
    set_range, unset = lib.HcclCommSetMemoryRange, lib.HcclCommUnsetMemoryRange
    act, deact = lib.HcclCommActivateCommMemory, lib.HcclCommDeactivateCommMemory
    check("set_null", set_range(world, None, MiB, 0, 1), E_PTR)
    check("set_size_0", set_range(world, base, 0, 0, 1), E_PARA)
    check("set", set_range(world, base, 4 * MiB, 0, 1), 0)  # torch_npu passes flags 1
    check("set_again", set_range(world, base, 4 * MiB, 0, 1), E_PARA)
    check("set_overlap", set_range(other, base + 2 * MiB, 4 * MiB, 0, 1), E_PARA)
    check("act_outside", act(world, base + 4 * MiB, MiB, 0, h, 0), E_PARA)
    check("act_past_end", act(world, base + 3 * MiB, 2 * MiB, 0, h, 0), E_PARA)
    check("act_offset", act(world, base, MiB, 1, h, 0), E_PARA)
    check("act_flags", act(world, base, MiB, 0, h, 1), E_PARA)
    check("act_size_0", act(world, base, 0, 0, h, 0), E_PARA)
    check("act_null_handle", act(world, base, MiB, 0, None, 0), E_PTR)
    check("act_null_va", act(world, None, MiB, 0, h, 0), E_PTR)
    check("act_null_comm", act(None, base, MiB, 0, h, 0), E_PTR)
    check("act_1", act(world, base, MiB, 0, h, 0), 0)
    check("act_2_other_comm", act(other, base + MiB, MiB, 0, h, 0), 0)  # one table per process
    check("act_overlap", act(world, base + MiB // 2, MiB, 0, h, 0), E_PARA)
    check("active_bytes", active_bytes(lib), 2 * MiB)

    def allreduce_counts(offset, size):
        z, s = counts(lib)
        p = base + offset
        rc = lib.HcclAllReduce(p, p, size // 4, HCCL["float32"], SUM, world, stream)
        z2, s2 = counts(lib)
        return [rc, z2 - z, s2 - s]

    check("zero_copy_inside", allreduce_counts(4096, MiB // 2), [0, 1, 0])
    check("zero_copy_across_activations", allreduce_counts(MiB // 2, MiB), [0, 1, 0])
    check("staged_partly_outside", allreduce_counts(3 * MiB // 2, MiB), [0, 0, 1])
    outside = torch.empty(4096, device="npu")
    out = outside.data_ptr()
    z, s = counts(lib)
    lib.HcclAllReduce(base, out, 4096, HCCL["float32"], SUM, world, stream)  # output not activated
    check("staged_output_outside", [c - b for c, b in zip(counts(lib), (z, s))], [0, 1])
    check("deact_not_start", deact(world, base + 4096), E_PARA)
    check("deact_unknown", deact(world, base + 3 * MiB), E_PARA)
    check("unset_with_active", unset(world, base), E_PARA)
    check("deact_1", deact(world, base), 0)
    check("deact_1_again", deact(world, base), E_PARA)
    check("deact_2", deact(world, base + MiB), 0)
    check("unset_unknown", unset(world, base + MiB), E_PARA)
    check("unset", unset(world, base), 0)
    check("unset_again", unset(world, base), E_PARA)
    check("active_bytes_after", active_bytes(lib), 0)

    # Register / deregister: a plain table of handles.
    handle = C.c_void_p()
    check("register", lib.HcclCommRegister(world, base, MiB, C.byref(handle), 0), 0)
    check("deregister_other_comm", lib.HcclCommDeregister(other, handle), E_PARA)
    check("deregister", lib.HcclCommDeregister(world, handle), 0)
    check("deregister_again", lib.HcclCommDeregister(world, handle), E_PARA)
    check("register_size_0", lib.HcclCommRegister(world, base, 0, C.byref(handle), 0), E_PARA)
    check("register_null", lib.HcclCommRegister(world, None, MiB, C.byref(handle), 0), E_PTR)

    # A single-rank comm's memory calls succeed and record nothing.
    rc, alone = init(lib, 1, root_info(lib), 0)
    check("single_rank_init", rc, 0)
    check("single_rank_act", act(alone, base + 7 * MiB, MiB, 5, h, 9), 0)
    check("single_rank_records_nothing", active_bytes(lib), 0)
    check("single_rank_allreduce", lib.HcclAllReduce(base, out, 16, HCCL["float32"], SUM, alone, stream), 0)
    check("single_rank_destroy", lib.HcclCommDestroy(alone), 0)

    # The table goes with the last comm of more than one rank.
    check("set_before_destroy", set_range(world, base, 4 * MiB, 0, 1), 0)
    check("act_before_destroy", act(world, base, MiB, 0, h, 0), 0)
    check("destroy_world", lib.HcclCommDestroy(world), 0)
    check("table_kept_while_a_comm_lives", active_bytes(lib), MiB)
    check("destroy_other", lib.HcclCommDestroy(other), 0)
    check("table_dropped", active_bytes(lib), 0)
    check("destroy_again", lib.HcclCommDestroy(other), E_PARA)
    check("destroy_null", lib.HcclCommDestroy(None), E_PTR)
    check("destroyed_comm", lib.HcclGetRankSize(world, C.byref(size)), E_PARA)
    torch.npu.synchronize()
    return {"checks": checks, "other_name": other_name}


if __name__ == "__main__":
    os.environ["HCCLEMU_CHUNK_BYTES"] = "4096"
    got, codes, pids = start(STREAM_CHECKS)
    report({"got": got, "exitcodes": codes, "left": leftovers([os.getpid()] + pids)})
'''


def _assert_checks(result):
    for rank, got in result["got"].items():
        assert "error" not in got, f"rank {rank}:\n{got['error']}"
        bad = {name: v for name, v in got["checks"].items() if v[0] != v[1]}
        assert not bad, f"rank {rank}: [got, expected] {bad}"
    assert result["exitcodes"] == [0, 0], result["exitcodes"]
    assert result["left"] == [], result["left"]


# The library's own calls through ctypes: nothing the torch_npu release changes (the `once` marker).
@pytest.mark.once
@pytest.mark.parametrize("stream_checks", [True])
def test_collectives_streams_and_zero_copy_rules(run_npu, stream_checks):
    code = COLLECTIVES.replace("STREAM_CHECKS", repr(stream_checks))
    r = run_npu(code, "own").result
    _assert_checks(r)
    names = {got["other_name"] for got in r["got"].values()}
    assert len(names) == 1, ("a comm without a config gets the same name on every rank", names)


FAILURES = COMMON + r'''
def worker(rank, inbox):
    checks = {}

    def check(name, got, want):
        checks[name] = [got, want]

    torch.npu.set_device(rank)
    lib = hccl()
    stream = torch.npu.current_stream().npu_stream
    comm = C.c_void_p()
    good = root_info(lib)
    # Refused before meeting anyone.
    check("garbage_root", lib.HcclCommInitRootInfo(2, os.urandom(4108), rank, C.byref(comm)), E_PARA)
    check("zero_root", lib.HcclCommInitRootInfo(2, bytes(4108), rank, C.byref(comm)), E_PARA)
    check("rank_too_big", lib.HcclCommInitRootInfo(2, good, 2, C.byref(comm)), E_PARA)
    check("no_ranks", lib.HcclCommInitRootInfo(0, good, 0, C.byref(comm)), E_PARA)
    check("null_root", lib.HcclCommInitRootInfo(2, None, rank, C.byref(comm)), E_PTR)
    check("null_out", lib.HcclCommInitRootInfo(2, good, rank, None), E_PTR)
    check("null_config", lib.HcclCommInitRootInfoConfig(2, good, rank, None, C.byref(comm)), E_PTR)
    check("bad_magic", init(lib, 2, good, rank, config(magic=0x12345678))[0], E_PARA)
    check("tiny_config", init(lib, 2, good, rank, config(size=8))[0], E_PARA)
    check("null_async_error", lib.HcclGetCommAsyncError(None, C.byref(C.c_int())), E_PTR)

    # Nobody else comes: HCCL_E_TIMEOUT after HCCL_CONNECT_TIMEOUT.
    os.environ["HCCL_CONNECT_TIMEOUT"] = "1"
    t0 = time.monotonic()
    check("alone_times_out", init(lib, 2, root_info(lib), rank)[0], E_TIMEOUT)
    check("after_the_timeout", time.monotonic() - t0 >= 1, True)

    if rank == 0:
        roots = [root_info(lib) for _ in range(4)]
        inbox[1].put(roots)
    else:
        roots = inbox[1].get(timeout=120)
    def meet():  # both ranks start the next step together, well within the timeout
        inbox[1 - rank].put("here")
        assert inbox[rank].get(timeout=120) == "here"

    # Ranks that disagree on the number of ranks: one is refused, the other times out.
    os.environ["HCCL_CONNECT_TIMEOUT"] = "3"
    meet()
    pairs = {"nranks_mismatch": init(lib, 2 + rank, roots[0], rank)[0]}
    # Both claim rank 0: one is refused, the other times out.
    meet()
    pairs["same_rank"] = init(lib, 2, roots[1], 0)[0]
    meet()

    # A peer that destroyed its comm: HCCL_E_REMOTE at once, and the comm's async error.
    os.environ["HCCL_CONNECT_TIMEOUT"] = "60"
    rc, c = init(lib, 2, roots[2], rank)
    check("init_left", rc, 0)
    scratch = torch.empty(1024, device="npu")
    buf = scratch.data_ptr()
    if rank == 1:
        check("destroy_early", lib.HcclCommDestroy(c), 0)
        inbox[0].put("destroyed")
    else:
        assert inbox[0].get(timeout=120) == "destroyed"
        t0 = time.monotonic()
        check("peer_left", lib.HcclAllReduce(buf, buf, 1024, HCCL["float32"], SUM, c, stream), E_REMOTE)
        check("peer_left_fast", time.monotonic() - t0 < 10, True)
        err = C.c_int()
        lib.HcclGetCommAsyncError(c, C.byref(err))
        check("async_error_remote", err.value, E_REMOTE)
        check("destroy_failed_comm", lib.HcclCommDestroy(c), 0)

    # A peer that does not call: HCCL_E_TIMEOUT after HCCL_EXEC_TIMEOUT, for it too afterwards.
    rc, c = init(lib, 2, roots[3], rank)
    check("init_exec", rc, 0)
    if rank == 0:
        os.environ["HCCL_EXEC_TIMEOUT"] = "1"
        check("exec_timeout", lib.HcclAllReduce(buf, buf, 1024, HCCL["float32"], SUM, c, stream), E_TIMEOUT)
        err = C.c_int()
        lib.HcclGetCommAsyncError(c, C.byref(err))
        check("async_error_timeout", err.value, E_TIMEOUT)
        inbox[1].put("timed out")
    else:
        assert inbox[1].get(timeout=120) == "timed out"
        check("late_peer_fails", lib.HcclBarrier(c, stream), E_TIMEOUT)
    check("destroy_exec", lib.HcclCommDestroy(c), 0)
    return {"checks": checks, "pairs": pairs}


if __name__ == "__main__":
    got, codes, pids = start()
    report({"got": got, "exitcodes": codes, "left": leftovers([os.getpid()] + pids)})
'''


@pytest.mark.once
def test_refusals_timeouts_and_a_peer_that_left(run_npu):
    r = run_npu(FAILURES, "own").result
    _assert_checks(r)
    for name in ("nranks_mismatch", "same_rank"):
        codes = sorted(got["pairs"][name] for got in r["got"].values())
        assert codes == [1, 9], (name, "one rank refused (E_PARA), the other timed out (E_TIMEOUT)", codes)


# torch.distributed on the emulated HCCL, torch_npu's own allocator. With zero copy (expandable
# segments, TORCH_HCCL_ZERO_COPY=1 and the launcher's variables), torch_npu makes a separate
# local comm, registers its segments (HcclCommSetMemoryRange, HcclCommActivateCommMemory) and
# the world comm's collectives then run on activated memory.
DISTRIBUTED = COMMON + r'''
import torch.distributed as dist



def worker(rank, inbox, port, zero_copy):
    if zero_copy:  # the rest of torch_npu's zero-copy conditions come from the parent's environment
        os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank))
    torch.npu.set_device(rank)
    lib = hccl()
    dist.init_process_group("hccl", rank=rank, world_size=2, init_method=f"tcp://127.0.0.1:{port}")
    out = {"active_after_init": active_bytes(lib)}
    t = (torch.arange(1024, dtype=torch.float32) * (rank + 1)).to("npu")
    dist.all_reduce(t)
    out["all_reduce"] = bool(torch.equal(t.cpu(), torch.arange(1024, dtype=torch.float32) * 3))
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    out["all_reduce_max"] = bool(torch.equal(t.cpu(), torch.arange(1024, dtype=torch.float32) * 3))
    b = torch.full((4096,), float(rank + 10)).to("npu")
    dist.broadcast(b, src=1)
    out["broadcast"] = bool((b.cpu() == 11).all())
    x = torch.full((512,), float(rank)).to("npu")
    g = torch.empty(1024, device="npu")
    dist.all_gather_into_tensor(g, x)
    out["all_gather"] = g.cpu().tolist() == [0.0] * 512 + [1.0] * 512
    y = torch.arange(1024, dtype=torch.float32).to("npu")
    o = torch.empty(512, device="npu")
    dist.reduce_scatter_tensor(o, y)
    out["reduce_scatter"] = bool(torch.equal(o.cpu(), torch.arange(512, dtype=torch.float32) * 2 + 1024 * rank))
    torch.npu.synchronize()
    out["counts"] = counts(lib)
    out["active_at_end"] = active_bytes(lib)
    dist.destroy_process_group()
    return out


if __name__ == "__main__":
    got, codes, pids = start(PORT, ZERO_COPY)
    report({"got": got, "exitcodes": codes, "left": leftovers([os.getpid()] + pids)})
'''


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("zero_copy", [False, True], ids=["staged", "zero_copy"])
def test_torch_distributed_hccl_on_the_emulated_library(run_npu, tmp_path, zero_copy):
    log = tmp_path / "stubs.log"
    code = DISTRIBUTED.replace("PORT", str(_free_port())).replace("ZERO_COPY", repr(zero_copy))
    env = {"STUB_LOG": str(log)}
    if zero_copy:
        env.update(TORCH_HCCL_ZERO_COPY="1", PYTORCH_NPU_ALLOC_CONF="expandable_segments:True", GROUP_RANK="0",
                   LOCAL_WORLD_SIZE="2")
    r = run_npu(code, "own", env=env).result
    for rank, got in r["got"].items():
        assert "error" not in got, f"rank {rank}:\n{got['error']}"
        for op in ("all_reduce", "all_reduce_max", "broadcast", "all_gather", "reduce_scatter"):
            assert got[op], (rank, op, got)
        zero, staged = got["counts"]
        if zero_copy:
            # torch_npu activated its segments on its own comm; the world comm's collectives
            # then ran on activated memory.
            assert got["active_at_end"] > 0, got
            assert zero == 5 and staged == 0, got
        else:
            assert got["active_at_end"] == 0 and zero == 0 and staged == 5, got
    assert r["exitcodes"] == [0, 0], r["exitcodes"]
    assert r["left"] == [], r["left"]
    hits = sorted(set(log.read_text().splitlines())) if log.exists() else []
    assert not [h for h in hits if h.startswith("libhccl.so ")], hits
