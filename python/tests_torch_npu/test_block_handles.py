"""torch_npu's public C++ block handles (NPUBlockHandle.h: MallocBlock, GetBlockPtr,
GetBlockSize, FreeBlock, which torchair calls) under both allocators in the real torch_npu.
They call torch_npu's own allocator directly, whichever allocator serves tensors; with npualloc
enabled it is made ready at init, and torch.npu.empty_cache() (and the out-of-memory retry)
empties it too, as it empties torch_npu's op-workspace allocator."""

import pytest

from test_bridge import run

HANDLES = """
import ctypes, os
lib = ctypes.CDLL(os.path.join(os.path.dirname(torch_npu.__file__), "lib", "libtorch_npu.so"))
malloc_block = lib._ZN7c10_npu19NPUCachingAllocator11MallocBlockEmPvi
malloc_block.restype, malloc_block.argtypes = ctypes.c_void_p, [ctypes.c_size_t, ctypes.c_void_p, ctypes.c_int]
block_ptr = lib._ZN7c10_npu19NPUCachingAllocator11GetBlockPtrEPKv
block_ptr.restype, block_ptr.argtypes = ctypes.c_void_p, [ctypes.c_void_p]
block_size = lib._ZN7c10_npu19NPUCachingAllocator12GetBlockSizeEPKv
block_size.restype, block_size.argtypes = ctypes.c_size_t, [ctypes.c_void_p]
free_block = lib._ZN7c10_npu19NPUCachingAllocator9FreeBlockEPv
free_block.restype, free_block.argtypes = None, [ctypes.c_void_p]

x = torch.zeros(4, device="npu")                   # torch_npu initializes its allocator here
stream = torch.npu.current_stream().npu_stream
start_free = torch.npu.mem_get_info()[0]
handle = malloc_block(64 << 20, stream, 0)
ptr, size = block_ptr(handle), block_size(handle)
held_free = torch.npu.mem_get_info()[0]
free_block(handle)
cached_free = torch.npu.mem_get_info()[0]
torch.npu.empty_cache()
report({"ptr": ptr, "size": size, "held": start_free - held_free, "cached": start_free - cached_free,
        "after_empty": start_free - torch.npu.mem_get_info()[0], "x": x.cpu().tolist()})
"""


@pytest.mark.parametrize("allocator", ["own", "npualloc"])
def test_malloc_block_serves_and_empty_cache_gives_it_back(run_npu, allocator):
    r = run(run_npu, HANDLES, allocator).result
    assert r["ptr"] and r["size"] >= 64 << 20, r
    # The block's memory came from the device, stayed cached after FreeBlock, and went back.
    assert r["held"] >= 64 << 20 and r["cached"] >= 64 << 20, r
    assert r["after_empty"] <= 0, r
    assert r["x"] == [0.0] * 4
