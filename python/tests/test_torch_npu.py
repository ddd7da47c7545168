"""npualloc.torch_npu where torch_npu is absent: the one case the real
torch_npu's tests (python/tests_torch_npu/, in the torch_npu venv) cannot
show, since torch_npu is installed there."""

import importlib.util
import os

import pytest

import npualloc.torch_npu as nt


@pytest.mark.skipif(importlib.util.find_spec("torch_npu") is not None, reason="torch_npu is installed here")
def test_without_torch_npu_enable_says_what_is_missing_and_changes_nothing(monkeypatch):
    monkeypatch.setenv("NPUALLOC_CONF", "expandable_segments:false")
    with pytest.raises(ImportError, match="needs torch_npu") as e:
        nt.enable(config="expandable_segments:true")
    assert e.value.name == "torch_npu"
    assert os.environ["NPUALLOC_CONF"] == "expandable_segments:false"
    assert not nt.is_enabled()
