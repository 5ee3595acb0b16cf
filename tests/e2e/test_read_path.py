"""What a `config.get` costs the local gateway's database: after the first, nothing until something is committed
(its two point reads, the socket's record and the configuration, are answered from the rows read before), and a
change is seen at once. Runs `LocalGateway` in this process to count the SQL its connections run."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from orbital.client import GatewayClient
from orbital.local.server import LocalGateway
from orbital.store.backends.database import Database

from tests.e2e.conftest import in_process_gateway


class Selects:
    def __init__(self) -> None:
        self.seen: list[str] = []
        self.lock = threading.Lock()

    def trace(self, sql: str) -> None:
        if sql.lstrip().upper().startswith("SELECT"):
            with self.lock:
                self.seen.append(sql)

    def count(self) -> int:
        with self.lock:
            return len(self.seen)


@pytest.fixture
def selects(monkeypatch: pytest.MonkeyPatch) -> Selects:
    traced = Selects()
    connect = Database._connect

    def tracing(self: Database) -> sqlite3.Connection:
        conn = connect(self)
        conn.set_trace_callback(traced.trace)
        return conn

    monkeypatch.setattr(Database, "_connect", tracing)
    return traced


@pytest.fixture
def gateway(tmp_path: Path, selects: Selects) -> Iterator[LocalGateway]:
    yield from in_process_gateway(tmp_path / "data")


def test_config_get_reads_nothing_from_the_database_between_commits(gateway: LocalGateway, selects: Selects) -> None:
    with GatewayClient(gateway.ws_url) as c:
        c.connect("client")
        c.call("config.get", {"path": "model"})
        before = selects.count()
        for _ in range(50):
            c.call("config.get", {"path": "model"})
        assert selects.count() == before, selects.seen[before:]


def test_config_get_sees_a_change_made_on_another_socket_at_once(gateway: LocalGateway, selects: Selects) -> None:
    with GatewayClient(gateway.ws_url) as reader, GatewayClient(gateway.ws_url) as writer:
        reader.connect("client")
        writer.connect("client")
        for minutes in (5, 6, 7):
            assert reader.call("config.get", {"path": "agents.defaultHeartbeat.every"})["value"] != f"{minutes}m"
            writer.call("config.set", {"path": "agents.defaultHeartbeat.every", "value": f"{minutes}m"})
            assert reader.call("config.get", {"path": "agents.defaultHeartbeat.every"})["value"] == f"{minutes}m"
        assert selects.count() > 0  # the connections were traced (the first test's zero means something)


def test_config_get_sees_a_change_written_beside_the_gateway(gateway: LocalGateway) -> None:
    from orbital.local.store import LocalStore
    from orbital.store.config_repo import ConfigRepo

    with GatewayClient(gateway.ws_url) as c:
        c.connect("client")
        assert c.call("config.get", {"path": "agents.defaultHeartbeat.every"})["value"] != "50m"
        beside = LocalStore.open(gateway.store.root, exclusive=False)  # a tool with the data directory open
        try:
            ConfigRepo(beside.table).set_path("agents.defaultHeartbeat.every", "50m")
        finally:
            beside.close()
        assert c.call("config.get", {"path": "agents.defaultHeartbeat.every"})["value"] == "50m"
