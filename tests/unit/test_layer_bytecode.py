"""The layer ships bytecode for the files the entry points import; the list of them must be current."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(sys.version_info[:2] != (3, 13), reason="the layer is built for the Lambda runtime's Python 3.13")
def test_the_hot_module_list_is_current() -> None:
    found = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "layer_hot_modules.py")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=ROOT,
    ).stdout.split()
    listed = (ROOT / "layers" / "orbital" / "hot-modules.txt").read_text().split()
    assert found == listed, "layers/orbital/hot-modules.txt is out of date: run 'make hot-modules'"
    assert "orbital/runtime/gateway.py" in listed and any(name.startswith("pydantic/") for name in listed)
