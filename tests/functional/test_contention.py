"""Many writers of one item at once, as parallel Lambdas are on AWS: each socket has its own Services (its own
container), all start together. Writers of different parts of the item must all succeed.

The items are in the local runtime's SQLite table, one table object per Services over one database: its
conditional writes are atomic, as DynamoDB's are (plain moto's are not, and would lose updates here)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Rpc

WRITERS = 60


def _together(count: int, work: Any) -> list[Any]:
    """Run work(i) in `count` threads released at the same moment; returns each result (or the exception)."""
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count

    def run(i: int) -> None:
        barrier.wait(timeout=30)
        try:
            results[i] = work(i)
        except Exception as exc:  # reported by the assertions below
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads)
    return results


@pytest.fixture
def database(tmp_path: Path) -> Iterator[Any]:
    from orbital.store.backends.database import Database

    with Database(tmp_path / "contention.sqlite3") as db:
        yield db


def _sockets(database: Any, sender: Any, count: int) -> list[Rpc]:
    from orbital.runtime.services import build_services
    from orbital.settings import get_settings
    from orbital.store.backends.sqlite import SqliteTable

    sockets = []
    for i in range(count):
        services = build_services(get_settings(), sender=sender, table=SqliteTable(database))
        rpc = Rpc(services, f"conn-contention-{i}")
        rpc.call("connect", {"minProtocol": 1, "client": {"mode": "client", "id": f"writer-{i}"}})
        sockets.append(rpc)
    return sockets


def test_writers_of_different_config_paths_all_succeed(database: Any, aws: None, sender: Any) -> None:
    sockets = _sockets(database, sender, WRITERS)
    results = _together(WRITERS, lambda i: sockets[i].frame("config.set", {"path": f"team.p{i}", "value": i}))
    failed = [r for r in results if not (isinstance(r, dict) and r.get("ok"))]
    assert failed == []
    stored = sockets[0].call("config.get", {"path": "team"})
    assert stored["value"] == {f"p{i}": i for i in range(WRITERS)}


def test_writers_of_one_session_all_succeed(database: Any, aws: None, sender: Any) -> None:
    sockets = _sockets(database, sender, WRITERS)
    key = "agent:main:shared"
    sockets[0].call("session.patch", {"sessionKey": key, "label": "start"})
    results = _together(
        WRITERS, lambda i: sockets[i].frame("session.patch", {"sessionKey": key, "label": f"writer {i}"})
    )
    failed = [r for r in results if not (isinstance(r, dict) and r.get("ok"))]
    assert failed == []
    info = sockets[0].call("session.get", {"sessionKey": key})
    assert info["label"] in {f"writer {i}" for i in range(WRITERS)}  # the last writer's, whichever came last
