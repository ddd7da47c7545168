"""The documented commands for this venv (docs/testing.md) run as written."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

# Nothing here depends on the torch_npu release (conftest.py, the `once` marker).
pytestmark = pytest.mark.once

DOC = Path(__file__).resolve().parents[2] / "docs" / "testing.md"


def test_the_documented_command_that_builds_the_bridge_prints_its_path():
    text = DOC.read_text()
    found = re.findall(r'`DIR/venv/bin/python -c "([^"`]*torch_npu_bridge[^"`]*)"`', text)
    assert len(found) == 1, f"docs/testing.md: expected one bridge-building command for the venv, found {found}"
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    done = subprocess.run([sys.executable, "-c", found[0]], capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    path = Path(done.stdout.strip().splitlines()[-1])
    assert path.is_file() and path.name.endswith(".so"), done.stdout
