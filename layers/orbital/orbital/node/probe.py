"""`node.probe` kind `bins`: which executables this machine has (spec §13.4)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from orbital.node.process import command_env, resolve_shell

BIN_NAME = re.compile(r"^[A-Za-z0-9._+-]+$")
PATH_CACHE_S = 300.0
_MARKER = "__ORBITAL_PATH__="

_lock = threading.Lock()
_cached: tuple[float, str] | None = None


def login_path(timeout_s: float) -> str:
    """PATH as a login shell sees it (what Bash commands get), merged with this process's PATH. Cached 5 min."""
    global _cached
    with _lock:
        if _cached is not None and time.monotonic() - _cached[0] < PATH_CACHE_S:
            return _cached[1]
    own = os.environ.get("PATH", os.defpath)
    entries: list[str] = []
    try:
        completed = subprocess.run(
            [resolve_shell(), "-lc", f"printf '\\n{_MARKER}%s\\n' \"$PATH\""],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            env=command_env(),
            timeout=min(max(timeout_s / 2, 0.5), 10.0),
            check=False,
        )
        for line in completed.stdout.decode("utf-8", "replace").splitlines():
            if line.startswith(_MARKER):
                entries = [p for p in line[len(_MARKER) :].split(os.pathsep) if p]
    except (OSError, subprocess.SubprocessError):
        entries = []
    for part in own.split(os.pathsep):
        if part and part not in entries:
            entries.append(part)
    merged = os.pathsep.join(entries)
    with _lock:
        _cached = (time.monotonic(), merged)
    return merged


def _is_executable_file(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def probe_bins(bins: Any, timeout_ms: Any = None) -> dict[str, bool]:
    timeout = 15.0
    if isinstance(timeout_ms, int | float) and not isinstance(timeout_ms, bool) and timeout_ms == timeout_ms:
        timeout = min(max(float(timeout_ms), 1000.0), 120_000.0) / 1000
    names = [b for b in bins if isinstance(b, str)] if isinstance(bins, list) else []
    result: dict[str, bool] = {}
    search: str | None = None
    for name in names:
        if "/" in name:
            result[name] = _is_executable_file(Path(name).expanduser())
        elif BIN_NAME.match(name):
            if search is None:
                search = login_path(timeout)
            result[name] = shutil.which(name, path=search) is not None
        else:
            result[name] = False
    return result
