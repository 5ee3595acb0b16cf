"""The data directory holds API keys, bot tokens and transcripts: its owner's alone (0700, files 0600), also when an
earlier version left it open."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest
from orbital.client import GatewayClient

from tests.e2e.conftest import in_process_gateway


def _modes(root: Path) -> dict[str, int]:
    found = {".": stat.S_IMODE(root.stat().st_mode)}
    for path in root.rglob("*"):
        if not path.is_symlink():
            found[str(path.relative_to(root))] = stat.S_IMODE(path.stat().st_mode)
    return found


def _loose(modes: dict[str, int]) -> dict[str, str]:
    return {name: oct(mode) for name, mode in modes.items() if mode & 0o077}


def test_a_new_data_directory_and_everything_in_it_is_private(tmp_path: Path) -> None:
    data = tmp_path / "new" / "orbital"
    umask = os.umask(0o022)  # a usual umask: the gateway must not rely on the user's
    try:
        for gw in in_process_gateway(data):
            with GatewayClient(gw.ws_url) as c:
                c.connect("client")
                c.call("config.set", {"path": "apiKeys.openai", "value": "sk-private-0123456789"})
                c.call("workspace.write", {"path": "notes/diary.md", "content": "private"})
            modes = _modes(data)
            assert modes["."] == 0o700
            assert "runtime.json" in modes
            assert _loose(modes) == {}
        after = _modes(data)  # what stopping wrote (the checkpoint) too
        assert len(after) > 3 and _loose(after) == {}
        assert os.umask(0o022) == 0o022  # the process's own umask is back once the gateway stopped
    finally:
        os.umask(umask)


def test_an_existing_open_directory_is_tightened_at_start_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "old"
    (data / "misc").mkdir(parents=True)
    (data / "misc" / "legacy.jsonl").write_text("{}\n")
    (data / "notes.txt").write_text("left by hand")
    data.chmod(0o755)
    (data / "misc").chmod(0o775)
    (data / "misc" / "legacy.jsonl").chmod(0o644)
    (data / "notes.txt").chmod(0o666)
    with caplog.at_level(logging.WARNING, logger="orbital.local"):
        for _gw in in_process_gateway(data):
            assert _loose(_modes(data)) == {}
    assert any("made it private" in r.getMessage() and "files to 0600" in r.getMessage() for r in caplog.records)
