"""`backup.status` and `backup.run` through the one dispatcher: on the AWS path (moto) there are no local backups and
both say what to use instead; with the local engine handed to Services they answer from it (409 while one runs)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from orbital.local import backup
from orbital.local.store import LocalStore

from tests.conftest import Rpc


def test_on_aws_status_says_unavailable_and_run_refuses(rpc: Rpc) -> None:
    status = rpc.call("backup.status", {})
    assert status["available"] is False and status["last"] is None and status["next"] is None
    assert "point-in-time recovery" in status["reason"] and "orbital export --stack" in status["reason"]
    error = rpc.error("backup.run", {})
    assert error["code"] == 400
    assert "point-in-time recovery" in error["message"] and "object versions" in error["message"]


@pytest.fixture
def local(tmp_path: Path) -> Iterator[LocalStore]:
    store = LocalStore.open(tmp_path / "data")
    try:
        yield store
    finally:
        store.close()


def test_with_the_local_engine_status_and_run_answer(services: Any, connect: Any, local: LocalStore) -> None:
    data_dir = local.root
    local.workspace.put("agents/main/MEMORY.md", b"remember")
    engine = backup.LocalBackups(local, data_dir, lambda: {"backup": {"every": "6h", "keep": 3}})
    services.backups = engine
    rpc = connect("client", "backup-admin")
    assert rpc.call("backup.status", {})["last"] is None
    last = rpc.call("backup.run", {})
    assert last["verified"] is True and last["objects"] == 1 and last["sizeBytes"] > 0
    status = rpc.call("backup.status", {})
    assert status["available"] is True and status["last"] == last and status["count"] == 1
    assert status["every"] == "6h" and status["keep"] == 3 and status["next"] == last["at"] + 6 * 3_600_000
    engine._running.acquire()
    try:
        error = rpc.error("backup.run", {})
        assert error["code"] == 409 and "already running" in error["message"]
        assert rpc.call("backup.status", {})["running"] is True
    finally:
        engine._running.release()
    # a backup that cannot be taken says why, in one line
    (data_dir / "not-a-dir").write_text("x")
    engine.config = lambda: {"backup": {"dir": str(data_dir / "not-a-dir" / "backups")}}
    error = rpc.error("backup.run", {})
    assert error["code"] == 500 and error["message"].startswith("the backup failed:")
