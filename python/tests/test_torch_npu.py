"""npualloc.torch_npu.enable() against a stand-in torch_npu (tests/fake_torch_npu)
that records what it is given and calls the hooks as torch_npu would."""

import ctypes
import os
import sys
from pathlib import Path

import pytest

import npualloc
import npualloc.torch_npu as nt
from npualloc import _lib

FAKE = Path(__file__).resolve().parent / "fake_torch_npu"

PLUGGABLE_HOOKS = [
    ("set_init_fn", "npualloc_pluggable_init"),
    ("set_reset_fn", "npualloc_pluggable_empty_cache"),
    ("set_memory_fraction_fn", "npualloc_pluggable_set_memory_fraction"),
    ("set_base_alloc_fn", "npualloc_pluggable_base_alloc"),
    ("set_reset_peak_status_fn", "npualloc_pluggable_reset_peak_stats"),
]


def _forget_torch_npu():
    for name in [m for m in sys.modules if m == "torch_npu" or m.startswith("torch_npu.")]:
        del sys.modules[name]


@pytest.fixture
def fresh(monkeypatch):
    """A process in which npualloc has not been enabled; NPUALLOC_CONF as
    it was is restored afterwards."""
    saved = os.environ.get("NPUALLOC_CONF")
    monkeypatch.setattr(nt, "_installed", None)
    _forget_torch_npu()
    yield
    _forget_torch_npu()
    if saved is None:
        os.environ.pop("NPUALLOC_CONF", None)
    else:
        os.environ["NPUALLOC_CONF"] = saved


@pytest.fixture
def torch_npu(fresh, monkeypatch):
    monkeypatch.syspath_prepend(str(FAKE))
    import torch_npu

    torch_npu._C._reset()
    return torch_npu


def _address(name):
    lib = ctypes.CDLL(str(npualloc.find_library()))
    return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value


def test_enable_installs_the_packaged_library_with_its_hooks(torch_npu):
    allocator = nt.enable()

    library = str(npualloc.find_library())
    inner = allocator.allocator()
    assert torch_npu._C.calls == [
        ("NPUPluggableAllocator", (library, "npualloc_pluggable_malloc", "npualloc_pluggable_free")),
        ("_npu_customAllocator", (_address("npualloc_pluggable_malloc"), _address("npualloc_pluggable_free"))),
        *[(setter, _address(symbol)) for setter, symbol in PLUGGABLE_HOOKS],
        ("_npu_changeCurrentAllocator", inner),
    ]
    assert isinstance(allocator, torch_npu.npu.memory.NPUPluggableAllocator)
    assert torch_npu.npu.memory._get_current_allocator().allocator() is inner
    assert set(inner.hooks) == {"init", "reset", "memory_fraction", "base_alloc", "reset_peak_status"}
    assert nt.is_enabled()
    assert nt._installed.hooks == tuple(setter for setter, _ in PLUGGABLE_HOOKS)


def test_torch_npu_reaches_npualloc_through_what_it_was_given(torch_npu, emu):
    nt.enable()
    C = torch_npu._C

    ptr = C.raw_alloc((3 << 20) + 5)
    assert ("_npu_init", 1) in C.calls  # the init hook ran at torch_npu's lazy init
    assert torch_npu.npu.is_initialized()
    assert ptr % 512 == 0

    size = ctypes.c_size_t(0)
    base = C.hook("base_alloc")(ptr, ctypes.byref(size))
    assert base is not None and base <= ptr and ptr + (3 << 20) + 5 <= base + size.value

    C.hook("memory_fraction")(1.5, 0)
    assert "fraction" in _lib.last_error()
    C.hook("memory_fraction")(1.0, 0)
    assert _lib.last_error() == ""
    C.hook("reset_peak_status")(0)
    assert _lib.last_error() == ""

    C.raw_delete(ptr)
    assert _lib.last_error() == ""
    C.hook("reset")(True)
    assert _lib.last_error() == ""
    assert C.hook("base_alloc")(ptr, ctypes.byref(size)) is None
    assert "not inside a live block" in _lib.last_error()


def test_hooks_this_torch_npu_lacks_are_skipped(torch_npu, monkeypatch):
    # An older torch_npu: no reset-peak setter.
    monkeypatch.delattr(torch_npu._C._NPUPluggableAllocator, "set_reset_peak_status_fn")
    allocator = nt.enable()
    assert "reset_peak_status" not in allocator.allocator().hooks
    assert "set_reset_peak_status_fn" not in [what for what, _ in torch_npu._C.calls]
    assert set(allocator.allocator().hooks) == {"init", "reset", "memory_fraction", "base_alloc"}
    assert torch_npu._C._npu_getAllocator() is allocator.allocator()


def test_config_goes_to_npualloc_conf(torch_npu):
    nt.enable("reuse_cache_mb:0,release_threshold_mb:512")
    assert os.environ["NPUALLOC_CONF"] == "reuse_cache_mb:0,release_threshold_mb:512"


def test_a_config_npualloc_refuses_changes_nothing(torch_npu):
    os.environ["NPUALLOC_CONF"] = "page_size:2m"
    with pytest.raises(ValueError, match="no_such_key"):
        nt.enable("no_such_key:1")
    with pytest.raises(ValueError, match="NUL"):
        nt.enable("page_size:2m\0x")
    with pytest.raises(ValueError, match="must be a str"):
        nt.enable({"page_size": "2m"})
    assert os.environ["NPUALLOC_CONF"] == "page_size:2m"
    assert torch_npu._C.calls == []
    assert not nt.is_enabled()


def test_a_refused_npualloc_conf_is_reported_by_name(torch_npu):
    os.environ["NPUALLOC_CONF"] = "page_size:3x"
    with pytest.raises(ValueError, match=r"NPUALLOC_CONF='page_size:3x'.*page_size"):
        nt.enable()
    assert torch_npu._C.calls == []


def test_without_torch_npu(fresh, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_npu", None)  # import torch_npu raises ImportError
    with pytest.raises(ImportError, match=r"needs torch_npu .*pip install torch-npu") as e:
        nt.enable()
    assert e.value.name == "torch_npu"
    assert not nt.is_enabled()


def test_torch_npu_without_pluggable_allocators(torch_npu, monkeypatch):
    monkeypatch.delattr(torch_npu.npu.memory, "NPUPluggableAllocator")
    with pytest.raises(nt.TorchNpuError, match=r"\(2\.14\.0\.stand-in\) has no torch_npu\.npu\.memory\.NPUPluggableAllocator"):
        nt.enable()
    assert torch_npu._C.calls == []


def test_after_the_npu_is_initialized(torch_npu):
    torch_npu.npu._lazy_init()  # what the first tensor on an NPU does
    torch_npu._C.calls.clear()
    os.environ["NPUALLOC_CONF"] = "page_size:2m"
    with pytest.raises(nt.TorchNpuError, match=r"already initialized the NPU .* right after `import torch_npu`"):
        nt.enable("reuse_cache_mb:0")
    assert torch_npu._C.calls == []
    assert os.environ["NPUALLOC_CONF"] == "page_size:2m"
    assert not nt.is_enabled()


def test_when_torch_npu_itself_refuses_the_swap(torch_npu, monkeypatch):
    # A torch_npu whose is_initialized does not tell: its own refusal is
    # turned into the same explanation, and NPUALLOC_CONF is put back.
    torch_npu._C._npu_getAllocator().initialized = True
    monkeypatch.delattr(torch_npu.npu, "is_initialized")
    os.environ.pop("NPUALLOC_CONF", None)
    with pytest.raises(nt.TorchNpuError, match=r"already initialized the NPU .*Can't swap an already initialized allocator"):
        nt.enable("reuse_cache_mb:0")
    assert "NPUALLOC_CONF" not in os.environ
    assert not nt.is_enabled()


def test_another_pluggable_allocator_in_use(torch_npu):
    C = torch_npu._C
    C._npu_changeCurrentAllocator(C._npu_customAllocator(0x1000, 0x2000))
    C.calls.clear()
    with pytest.raises(nt.TorchNpuError, match="already uses another pluggable allocator"):
        nt.enable()
    assert C.calls == []
    assert not nt.is_enabled()


def test_enable_twice(torch_npu):
    first = nt.enable("reuse_cache_mb:0")
    count = len(torch_npu._C.calls)
    assert nt.enable("reuse_cache_mb:0") is first
    assert nt.enable() is first  # NPUALLOC_CONF now holds that config
    assert len(torch_npu._C.calls) == count
    with pytest.raises(nt.TorchNpuError, match=r"already torch_npu's allocator, with config 'reuse_cache_mb:0'"):
        nt.enable("reuse_cache_mb:64")
    assert os.environ["NPUALLOC_CONF"] == "reuse_cache_mb:0"
