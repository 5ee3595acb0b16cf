"""The repositories over the table port (`orbital.store`: pairings, heartbeat state, last-active contexts, cron jobs
and runs, deferred calls, transfers), each test run against every table the contract suite knows (SQLite and
DynamoDB on plain moto, `conftest.py`): what each repository promises holds whichever store is behind it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from orbital.errors import ConflictError
from orbital.store import keys
from orbital.store.calls import DONE, INLINE_OUTCOME_BYTES, PENDING, CallRepo, PendingCall
from orbital.store.cron_jobs import CronRepo
from orbital.store.heartbeats import HeartbeatRepo
from orbital.store.last_active import LastActiveRepo
from orbital.store.pairs import PairingRepo
from orbital.store.table import Record, Table
from orbital.store.transfers import Endpoint, Transfer, TransferRepo
from orbital.store.workspace import Workspace


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[Workspace]:
    from orbital.store.backends.files import FileWorkspace

    opened = FileWorkspace(tmp_path / "workspace")
    try:
        yield opened
    finally:
        opened.close()


# --- pairings ---------------------------------------------------------------------------------------------------------


def _pair(sender: str, text: str = "hello") -> dict[str, Any]:
    return {"channel": "whatsapp", "senderId": sender, "requestedAt": 1, "firstMessage": text}


def test_a_pairing_is_kept_as_first_asked_and_removed_once(table: Table) -> None:
    pairs = PairingRepo(table)
    assert pairs.put(_pair("+31"))
    assert not pairs.put(_pair("+31", "again"))  # a repeat is silent
    assert pairs.get("whatsapp", "+31") == _pair("+31")
    assert pairs.put(_pair("+31", "again"), only_if_new=False)
    pairs.put(_pair("+49"))
    assert set(pairs.all()) == {"whatsapp:+31", "whatsapp:+49"}
    assert pairs.delete("whatsapp", "+31") == _pair("+31", "again")
    assert pairs.delete("whatsapp", "+31") is None  # only one caller wins
    assert pairs.get("whatsapp", "+31") is None


# --- heartbeat state and last-active contexts ---------------------------------------------------------------------


def test_heartbeat_state_is_written_by_version(table: Table) -> None:
    states = HeartbeatRepo(table)
    stored = states.put("main", {"nextHeartbeatAt": 10, "unknown": 1}, create=True)
    assert stored == {
        "agentId": "main",
        "nextHeartbeatAt": 10,
        "lastHeartbeatAt": None,
        "lastHeartbeatText": None,
        "lastHeartbeatSentAt": None,
    }
    with pytest.raises(ConflictError):
        states.put("main", {}, create=True)
    assert states.get_versioned("main") == (stored, 1)
    states.put("main", {"nextHeartbeatAt": 20}, expect_version=1)
    with pytest.raises(ConflictError):  # someone wrote it since version 1 was read
        states.put("main", {"nextHeartbeatAt": 30}, expect_version=1)
    states.put("main", {"nextHeartbeatAt": 40})  # last writer wins, one version on
    assert states.get_versioned("main") == ({**stored, "nextHeartbeatAt": 40}, 3)


def test_heartbeat_state_written_before_versions_is_version_zero(table: Table) -> None:
    table.put(keys.heartbeat("old"), {"agentId": "old", "lastHeartbeatText": "kept"})
    states = HeartbeatRepo(table)
    state, version = states.get_versioned("old") or ({}, -1)
    assert version == 0 and state["lastHeartbeatText"] == "kept" and state["nextHeartbeatAt"] is None
    states.put("old", {"nextHeartbeatAt": 5}, expect_version=0)
    with pytest.raises(ConflictError):
        states.put("old", {"nextHeartbeatAt": 6}, expect_version=0)
    states.put("zeta", {})
    assert list(states.all()) == ["old", "zeta"]
    states.delete("old")
    assert states.get("old") is None and list(states.all()) == ["zeta"]


def test_last_active_contexts(table: Table) -> None:
    contexts = LastActiveRepo(table)
    contexts.put("ops", {"channel": "telegram", "accountId": "default", "agentId": "someone-else"})
    contexts.put("main", {"channel": "whatsapp", "accountId": "default"})
    assert contexts.get("ops") == {"channel": "telegram", "accountId": "default", "agentId": "ops"}
    assert list(contexts.all()) == ["main", "ops"]
    contexts.delete("ops")
    assert contexts.get("ops") is None and list(contexts.all()) == ["main"]


# --- cron jobs and runs -------------------------------------------------------------------------------------------


def _job(job_id: str, *, agent: str = "main", next_run: int | None = None, **extra: Any) -> dict[str, Any]:
    state = {} if next_run is None else {"nextRunAtMs": next_run}
    return {"id": job_id, "agentId": agent, "createdAtMs": 1, "enabled": True, "state": state, **extra}


def test_cron_jobs_are_due_by_their_index_and_counted(table: Table) -> None:
    cron = CronRepo(table)
    assert cron.put_job(_job("a", next_run=1000), create=True) == 1
    cron.put_job(_job("b", agent="ops", next_run=500), create=True)
    cron.put_job(_job("off", next_run=100, enabled=False), create=True)
    cron.put_job(_job("busy", next_run=200, state={"nextRunAtMs": 200, "runningAtMs": 150}), create=True)
    cron.put_job(_job("later", next_run=9000), create=True)
    assert [j["id"] for j in cron.due_jobs(1000)] == ["b", "a"]
    assert [j["id"] for j in cron.due_jobs(1000, include_running=True)] == ["busy", "b", "a"]
    assert cron.status(1000) == {"count": 5, "dueCount": 2, "runningCount": 1, "nextRunAtMs": 200}
    assert cron.status(1000, agent_id="ops") == {"count": 1, "dueCount": 1, "runningCount": 0, "nextRunAtMs": 500}
    assert cron.status(1000, agent_id="nobody") == {"count": 0, "dueCount": 0, "runningCount": 0}
    page, total = cron.list_jobs(include_disabled=False, limit=2, offset=1)
    assert ([j["id"] for j in page], total) == (["b", "a"], 4)
    stored, version = cron.get_job_versioned("a") or ({}, 0)
    with pytest.raises(ConflictError):
        cron.put_job({**stored, "enabled": False}, expect_version=version + 1)
    cron.put_job({**stored, "enabled": False}, expect_version=version)
    assert [j["id"] for j in cron.due_jobs(1000)] == ["b"]  # a disabled job leaves the index


def test_cron_runs_are_kept_newest_first_and_trimmed(table: Table) -> None:
    cron = CronRepo(table)
    cron.put_job(_job("a"), create=True)
    first = cron.append_run({"jobId": "a", "ts": 1000, "status": "ok"})
    cron.append_run({"jobId": "b", "ts": 1500, "status": "error"})
    cron.append_run({"jobId": "a", "ts": 2000, "status": "ok"}, keep=1)
    assert first["id"] == 1
    assert [(r["ts"], r["id"]) for r in cron.list_runs(job_id="a")[0]] == [(2000, 3)]
    assert [r["id"] for r in cron.list_runs()[0]] == [3, 2]
    assert cron.delete_job("a") and not cron.delete_job("a")
    assert cron.list_runs(job_id="a") == ([], 0)


# --- deferred calls -------------------------------------------------------------------------------------------------


def _call(call_id: str, *, node: str = "laptop", kind: str = "tool") -> PendingCall:
    return PendingCall(
        call_id=call_id,
        kind=kind,
        node_id=node,
        node_connection_id="conn-1",
        timeout_ms=30_000,
        created_at=1,
        caller_connection_id="caller",
        frame_id="f1",
        extra={"group": "g1"},
    )


def _record(table: Table, call_id: str) -> Record:
    rec = table.get(keys.pending_call(call_id))
    assert rec is not None
    return rec


def test_a_call_is_claimed_once_and_leaves_its_nodes_index(table: Table, workspace: Workspace) -> None:
    calls = CallRepo(table, lambda: workspace)
    calls.create(_call("c1"))
    calls.create(_call("c2"))
    with pytest.raises(ConflictError):
        calls.create(_call("c1"))
    assert [c.call_id for c in calls.pending_on_node("laptop")] == ["c1", "c2"]
    assert calls.register_token("c1", "token-1")
    claimed = calls.claim("c1", {"result": "done"})
    assert claimed is not None and claimed[0] == _call("c1") and claimed[1] == "token-1"
    assert calls.claim("c1") is None
    assert not calls.register_token("c1", "token-2")
    assert [c.call_id for c in calls.pending_on_node("laptop")] == ["c2"]
    found = calls.get("c1")
    assert found is not None and found.state == DONE
    assert calls.outcome_of(_record(table, "c1")) == {"result": "done"}
    assert calls.get("missing") is None and calls.claim("missing") is None


def test_a_node_answer_is_claimed_only_for_its_kind_and_node(table: Table, workspace: Workspace) -> None:
    calls = CallRepo(table, lambda: workspace)
    calls.create(_call("c1"))
    other_node = calls.claim_answer("c1", "desktop", "tool")
    assert other_node.claimed is None and other_node.found is not None and other_node.found.state == PENDING
    other_kind = calls.claim_answer("c1", "laptop", "logs")
    assert other_kind.claimed is None and other_kind.found is not None
    answered = calls.claim_answer("c1", "laptop", "tool")
    assert answered.claimed is not None and answered.claimed[0].call_id == "c1"
    again = calls.claim_answer("c1", "laptop", "tool")
    assert again.claimed is None and again.found is not None and again.found.state == DONE
    missing = calls.claim_answer("nothing", "laptop", "tool")
    assert missing.claimed is None and missing.found is None


def test_calls_due_at_a_second_and_answered_before_they_existed(table: Table, workspace: Workspace) -> None:
    calls = CallRepo(table, lambda: workspace)
    for call_id in ("c1", "c2", "c3"):
        calls.create(_call(call_id))
        calls.mark_due(1_800_000_000, _call(call_id))
    calls.claim("c2")
    assert calls.pending_due(1_800_000_000) == ["c1", "c3"]
    assert calls.pending_due(1_800_000_001) == []
    assert calls.record_answered("launch-failed", {"error": "no node"}, group="g1")
    assert not calls.record_answered("launch-failed", {"error": "again"})
    found = calls.get("launch-failed")
    assert found is not None and found.state == DONE and found.call.extra == {"group": "g1"}
    assert calls.outcome_of(_record(table, "launch-failed")) == {"error": "no node"}


def test_an_outcome_too_large_for_an_item_is_kept_in_the_workspace(table: Table, workspace: Workspace) -> None:
    asked: list[int] = []

    def opened() -> Workspace:
        asked.append(1)
        return workspace

    calls = CallRepo(table, opened)
    calls.create(_call("small"))
    calls.claim("small", {"result": "x"})
    assert asked == []  # a handler that never meets a large outcome never opens the workspace
    big = {"result": "y" * (INLINE_OUTCOME_BYTES + 1)}
    calls.create(_call("big"))
    calls.claim("big", big)
    assert workspace.head(keys.call_outcome_blob("big")) is not None
    assert calls.outcome_of(_record(table, "big")) == big


# --- transfers ----------------------------------------------------------------------------------------------------


def _transfer(transfer_id: int, *, size: int | None = None) -> Transfer:
    return Transfer(
        transfer_id=transfer_id,
        source=Endpoint("laptop", "/tmp/a.bin"),
        destination=Endpoint("gsv", "files/a.bin"),
        mode="chunks",
        agent_id="main",
        call_id=f"transfer-{transfer_id}",
        source_conn="src-conn",
        dest_conn=None,
        size=size,
        mime="application/octet-stream" if size is not None else None,
    )


def test_a_transfer_counts_its_bytes_and_is_finished_once(table: Table) -> None:
    transfers = TransferRepo(table)
    first, second = transfers.next_id(), transfers.next_id()
    assert second == first + 1
    transfers.create(_transfer(first), state="meta-wait")
    loaded = transfers.load(first)
    assert loaded is not None and loaded.state == "meta-wait" and loaded.destination.is_workspace
    assert transfers.count_received(first, 10, "src-conn") is None  # not streaming yet
    transfers.set(first, xs="streaming", size=30, mime="text/plain")
    assert transfers.count_received(first, 10, "someone-else") is None  # only its source sends chunks
    received = transfers.count_received(first, 10, "src-conn")
    assert received is not None and (received.bytes, received.size, received.mime) == (10, 30, "text/plain")
    landed = transfers.count_landed(first, 10)
    assert landed is not None and landed.landed == 10
    completing = transfers.mark_completing(first)
    assert completing is not None and completing.state == "completing"
    assert transfers.mark_completing(first) is None  # not streaming any more
    assert transfers.count_received(first, 20, "src-conn") is not None  # chunks still on their way count
    assert transfers.claim_finishing(first) and not transfers.claim_finishing(first)
    assert [t.transfer_id for t in transfers.active()] == [first]
    transfers.delete(first)
    assert transfers.load(first) is None and transfers.active() == []
    transfers.set(first, xs="streaming")  # ended meanwhile: left ended
    assert transfers.count_landed(first, 1) is None and transfers.load(first) is None


def test_a_transfer_from_the_workspace_starts_with_its_size(table: Table) -> None:
    transfers = TransferRepo(table)
    transfers.create(_transfer(7, size=0), state="accept-wait")
    loaded = transfers.load(7)
    assert loaded is not None and (loaded.size, loaded.mime, loaded.bytes) == (0, "application/octet-stream", 0)
    assert loaded.to_data() == _transfer(7).to_data()
