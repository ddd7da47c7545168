"""``import npu_emu``: the CUDA build of torch, then the real torch_npu, on the
ACL emulator.

Installed into the harness's venv by scripts/setup-torch-npu.sh. It imports
torch, removes the allocator-config keys libc10_cuda.so registered (torch_npu
registers the same keys again and would abort; torch before 2.9 has none),
then imports torch_npu.
Torch's device-backend autoload must be off (TORCH_DEVICE_BACKEND_AUTOLOAD=0
before Python starts, or before this import), otherwise ``import torch``
loads torch_npu before the keys are gone.
"""
import ctypes
import os
import sys

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
if os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] != "0":
    raise ImportError("npu_emu needs TORCH_DEVICE_BACKEND_AUTOLOAD=0 (torch would load torch_npu too early)")
if "torch_npu" in sys.modules:
    raise ImportError("npu_emu must be imported before torch_npu")

import torch  # noqa: E402

_keys = ctypes.CDLL(os.path.join(os.path.dirname(os.path.abspath(__file__)), "libnpu_emu_cuda_keys.so"))
removed = _keys.npu_emu_reset_cuda_allocator_keys()
if removed < 0:
    raise ImportError("npu_emu: could not remove libc10_cuda's allocator-config keys")

import torch_npu  # noqa: E402,F401
