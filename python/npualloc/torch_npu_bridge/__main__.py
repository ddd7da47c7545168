"""``python -m npualloc.torch_npu_bridge``: builds (or finds) the cached
bridge for the installed torch_npu and prints its path."""

import sys

from . import BridgeBuildError, library

try:
    import torch  # noqa: F401
    import torch_npu  # noqa: F401
except ImportError as e:
    sys.exit(f"npualloc: the torch_npu bridge needs torch and torch_npu: {e}")
try:
    print(library())
except BridgeBuildError as e:
    sys.exit(f"npualloc: {e}")
