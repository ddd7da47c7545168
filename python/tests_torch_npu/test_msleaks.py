"""msleaks (CANN's memory-leak checker) sees npualloc's blocks as it sees torch_npu's own
allocator's: the same mstx memory calls in the same order, each with the allocator's own block
size and reserved bytes (bridge leaks.cpp; torch_npu's NPUCachingAllocator.cpp and mstx_mgr.cpp).

msleaks is played by a stand-in: a library preloaded under msleaks' hook name that defines the
mstx functions and logs each call, and a CANN directory whose lib64/libms_tools_ext.so is that
library, as torch_npu requires before it makes the calls."""

import os
import subprocess

import pytest

MSTX = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct range { uint32_t device; const void* ptr; uint64_t size; };
struct heap_desc { int usage; int type; const void* desc; };
struct regions { void* heap; int type; size_t count; const void* descs; void** out; };
struct ref { int type; const void* ptr; };
struct unregions { size_t count; const struct ref* refs; };

static FILE* log_file(void) {
  static FILE* f;
  if (f == NULL && getenv("MSTX_LOG") != NULL) {
    f = fopen(getenv("MSTX_LOG"), "a");
    if (f != NULL) setvbuf(f, NULL, _IONBF, 0);
  }
  return f;
}
#define LOG(...) do { if (log_file() != NULL) fprintf(log_file(), __VA_ARGS__); } while (0)

/* A domain per name: its handle is its slot. */
static char names[16][64];
static int domain_count;
static int domain_of(void* d) { return (int)((char (*)[64])d - names); }

void* mstxDomainCreateA(const char* name) {
  for (int i = 0; i < domain_count; ++i) if (strcmp(names[i], name) == 0) return names[i];
  if (domain_count == 16) return NULL;
  snprintf(names[domain_count], sizeof names[0], "%s", name);
  return names[domain_count++];
}
void mstxDomainDestroy(void* d) { (void)d; }
void* mstxMemHeapRegister(void* d, const struct heap_desc* h) {
  const struct range* r = h->desc;
  LOG("%s heap %u %p %llu\n", names[domain_of(d)], r->device, r->ptr, (unsigned long long)r->size);
  return (void*)r->ptr;
}
void mstxMemHeapUnregister(void* d, void* heap) { LOG("%s unheap %p\n", names[domain_of(d)], heap); }
void mstxMemRegionsRegister(void* d, const struct regions* b) {
  const struct range* r = b->descs;
  for (size_t i = 0; i < b->count; ++i)
    LOG("%s region %u %p %llu\n", names[domain_of(d)], r[i].device, r[i].ptr, (unsigned long long)r[i].size);
}
void mstxMemRegionsUnregister(void* d, const struct unregions* b) {
  for (size_t i = 0; i < b->count; ++i) LOG("%s unregion %p\n", names[domain_of(d)], b->refs[i].ptr);
}
void mstxMarkA(const char* m, void* s) { (void)m; (void)s; }
uint64_t mstxRangeStartA(const char* m, void* s) { (void)m; (void)s; return 1; }
void mstxRangeEnd(uint64_t id) { (void)id; }
void mstxDomainMarkA(void* d, const char* m, void* s) { (void)d; (void)m; (void)s; }
uint64_t mstxDomainRangeStartA(void* d, const char* m, void* s) { (void)d; (void)m; (void)s; return 1; }
void mstxDomainRangeEnd(void* d, uint64_t id) { (void)d; (void)id; }
"""

WORKLOAD = """
    import os
    out = {}
    def step(name, tensor=None):
        out[name] = {"reserved": torch.npu.memory_reserved(), "allocated": torch.npu.memory_allocated(),
                     "ptr": hex(tensor.data_ptr()) if tensor is not None else None}
    a = torch.empty(1000, device="npu")
    step("a", a)
    b = torch.empty(1 << 20, device="npu")
    step("b", b)
    out["a_ptr"] = hex(a.data_ptr())
    del a
    step("free_a")
    out["b_ptr"] = hex(b.data_ptr())
    del b
    step("free_b")
    report(out)
"""


@pytest.fixture(scope="module")
def msleaks(tmp_path_factory):
    """(preload path, CANN directory): the stand-in built once."""
    root = tmp_path_factory.mktemp("msleaks")
    src, lib = root / "mstx.c", root / "libascend_kernel_hook.so"
    src.write_text(MSTX)
    cc = os.environ.get("CC") or "cc"
    done = subprocess.run([cc, "-shared", "-fPIC", "-O1", str(src), "-o", str(lib)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    # With ASCEND_HOME_PATH set, importing torch_npu also asks for these directories
    # (registry_manager.py, _cann_package_check).
    cann = root / "cann"
    for d in ("lib64", "opp", "runtime", "compiler"):
        (cann / d).mkdir(parents=True)
    (cann / "lib64" / "libms_tools_ext.so").symlink_to(lib)
    return lib, cann


def cann_env(cann, log):
    return {"ASCEND_HOME_PATH": str(cann), "ASCEND_OPP_PATH": str(cann / "opp"), "MSTX_LOG": str(log),
            "LD_LIBRARY_PATH": f"{cann / 'lib64'}:{os.environ.get('LD_LIBRARY_PATH', '')}"}


def events(log, domain="ptaCaching"):
    lines = log.read_text().splitlines() if log.exists() else []
    return [line.split()[1:] for line in lines if line.split()[0] == domain]


@pytest.mark.parametrize("allocator", ["own", "npualloc"])
def test_msleaks_sees_each_block_with_its_size_and_the_reserved_bytes(run_npu, msleaks, tmp_path, allocator):
    lib, cann = msleaks
    log = tmp_path / f"mstx-{allocator}.log"
    env = dict(cann_env(cann, log), LD_PRELOAD=str(lib))
    r = run_npu(WORKLOAD, allocator, env=env).result
    a, b = r["a_ptr"], r["b_ptr"]
    size_a = r["a"]["allocated"]
    size_b = r["b"]["allocated"] - size_a
    # As torch_npu's own allocator calls them: a heap of the reserved bytes at the block and its
    # region at each allocation; at each free the heap with the reserved bytes then, and the
    # region unregistered.
    assert events(log) == [
        ["heap", "0", a, str(r["a"]["reserved"])], ["region", "0", a, str(size_a)],
        ["heap", "0", b, str(r["b"]["reserved"])], ["region", "0", b, str(size_b)],
        ["heap", "0", a, str(r["free_a"]["reserved"])], ["unregion", a],
        ["heap", "0", b, str(r["free_b"]["reserved"])], ["unregion", b],
    ], (allocator, r, log.read_text())


def test_without_msleaks_nothing_is_reported(run_npu, msleaks, tmp_path):
    # The same library and CANN directory, not preloaded: torch_npu's rule says msleaks is off.
    lib, cann = msleaks
    log = tmp_path / "mstx.log"
    env = cann_env(cann, log)
    for allocator in ("own", "npualloc"):
        run_npu(WORKLOAD, allocator, env=env)
    assert events(log) == []
