"""Store-level state methods: channels.list, pair.*, heartbeat.status, cron.status, cron.list (spec §10-§12),
on an empty store and on stores populated through the repositories."""

from __future__ import annotations

import time

import pytest
from orbital.errors import ConflictError
from orbital.methods import registry
from orbital.ports.lifecycle import disconnect
from orbital.store import keys

FUTURE = int(time.time() * 1000) + 10 * 24 * 3600 * 1000
CONFIRMATION = "You're now connected! Feel free to send me a message."


def valid(method: str, payload: dict) -> dict:
    """The payload, after checking it against the method's documented result shape."""
    spec = registry().get(method)
    assert spec is not None and spec.result is not None
    spec.result.model_validate(payload)
    return payload


def job(
    job_id: str,
    *,
    agent: str = "main",
    enabled: bool = True,
    next_run: int | None = None,
    created: int = 0,
    running: int | None = None,
) -> dict:
    state: dict = {}
    if next_run is not None:
        state["nextRunAtMs"] = next_run
    if running is not None:
        state["runningAtMs"] = running
    return {
        "id": job_id,
        "agentId": agent,
        "name": f"job {job_id}",
        "enabled": enabled,
        "createdAtMs": created,
        "updatedAtMs": created,
        "schedule": {"kind": "every", "everyMs": 60000},
        "spec": {"mode": "systemEvent", "text": "check the inbox"},
        "state": state,
    }


def pending(channel: str, sender_id: str, name: str | None = "Ann", text: str = "hello there") -> dict:
    pair = {"channel": channel, "senderId": sender_id, "requestedAt": 1700000000000, "firstMessage": text}
    if name is not None:
        pair["senderName"] = name
    return pair


def outbound(sender, connection_id: str) -> list[dict]:
    return [f for f in sender.frames_to(connection_id) if f.get("event") == "channel.outbound"]


def all_outbound(sender) -> list[tuple[str, dict]]:
    return [(cid, f) for cid, f in sender.posts if f.get("event") == "channel.outbound"]


# --- empty store ------------------------------------------------------------------------------------------------


def test_every_method_on_an_empty_store(rpc):
    assert valid("channels.list", rpc.call("channels.list")) == {"channels": [], "count": 0}
    assert valid("pair.list", rpc.call("pair.list")) == {"pairs": {}}
    assert valid("heartbeat.status", rpc.call("heartbeat.status")) == {"agents": {}}
    assert valid("cron.status", rpc.call("cron.status")) == {
        "enabled": True,
        "count": 0,
        "dueCount": 0,
        "runningCount": 0,
        "maxJobs": 200,
        "maxConcurrentRuns": 4,
    }
    assert valid("cron.list", rpc.call("cron.list")) == {"jobs": [], "count": 0}
    assert rpc.error("pair.approve", {"channel": "whatsapp", "senderId": "31628552611"}) == {
        "code": 404,
        "message": "No pending pairing for whatsapp:+31628552611",
    }
    assert rpc.error("pair.reject", {"channel": "whatsapp", "senderId": "31628552611"}) == {
        "code": 404,
        "message": "No pending pairing for whatsapp:+31628552611",
    }


def test_pair_decisions_require_channel_and_sender(rpc):
    cases = [
        None,
        {},
        {"channel": "whatsapp"},
        {"senderId": "31628552611"},
        {"channel": "", "senderId": "1"},
        {"channel": "whatsapp", "senderId": ""},
        {"channel": 5, "senderId": "1"},
    ]
    for method in ("pair.approve", "pair.reject"):
        for params in cases:
            assert rpc.error(method, params) == {"code": 400, "message": "channel and senderId required"}, params


# --- pairing ----------------------------------------------------------------------------------------------------


def test_pair_list_shows_pending_requests_with_message(rpc, services):
    assert services.pairs.put(pending("whatsapp", "+31628552611", text="hi, it's Ann"))
    assert services.pairs.put(pending("test", "alice", name=None, text="let me in"))
    assert not services.pairs.put(pending("whatsapp", "+31628552611", text="second message"))
    pairs = valid("pair.list", rpc.call("pair.list"))["pairs"]
    assert set(pairs) == {"whatsapp:+31628552611", "test:alice"}
    ann = pairs["whatsapp:+31628552611"]
    assert ann == {
        "channel": "whatsapp",
        "senderId": "+31628552611",
        "senderName": "Ann",
        "requestedAt": 1700000000000,
        "firstMessage": "hi, it's Ann",
        "message": "hi, it's Ann",
    }
    assert "senderName" not in pairs["test:alice"]
    assert pairs["test:alice"]["message"] == "let me in"


def test_approve_adds_sender_to_allow_from_and_confirms_through_channel_socket(connect, services, sender):
    admin = connect("client", "admin")
    other = connect("channel", "bot", channel="discord")
    whatsapp = connect("channel", "default", channel="whatsapp")
    services.pairs.put(pending("whatsapp", "+31628552611"))
    services.pairs.put(pending("whatsapp", "+4915112345678", name="Ben"))

    result = admin.call("pair.approve", {"channel": "whatsapp", "senderId": "31628552611:2@s.whatsapp.net"})
    assert valid("pair.approve", result) == {"approved": True, "senderId": "+31628552611", "senderName": "Ann"}

    allow = admin.call("config.get", {"path": "channels.whatsapp.allowFrom"})
    assert allow == {"path": "channels.whatsapp.allowFrom", "value": ["+31628552611"]}
    assert admin.call("config.get", {"path": "channels.whatsapp.dmPolicy"})["value"] == "pairing"
    assert list(admin.call("pair.list")["pairs"]) == ["whatsapp:+4915112345678"]

    frames = outbound(sender, whatsapp.connection_id)
    assert frames == [
        {
            "type": "evt",
            "event": "channel.outbound",
            "payload": {
                "channel": "whatsapp",
                "accountId": "default",
                "peer": {"kind": "dm", "id": "+31628552611"},
                "sessionKey": "",
                "message": {"text": CONFIRMATION},
            },
        }
    ]
    assert outbound(sender, other.connection_id) == []
    assert admin.error("pair.approve", {"channel": "whatsapp", "senderId": "+31628552611"})["code"] == 404

    admin.call("pair.approve", {"channel": "whatsapp", "senderId": "4915112345678"})
    allow = admin.call("config.get", {"path": "channels.whatsapp.allowFrom"})["value"]
    assert allow == ["+31628552611", "+4915112345678"]
    assert admin.call("pair.list") == {"pairs": {}}


def test_approve_does_not_duplicate_an_allowed_sender(rpc, services):
    rpc.call("config.set", {"path": "channels.whatsapp.allowFrom", "value": ["+31628552611"]})
    services.pairs.put(pending("whatsapp", "+31628552611"))
    rpc.call("pair.approve", {"channel": "whatsapp", "senderId": "+31628552611"})
    assert rpc.call("config.get", {"path": "channels.whatsapp.allowFrom"})["value"] == ["+31628552611"]
    assert rpc.call("pair.list") == {"pairs": {}}


def test_approve_on_unconfigured_channel_creates_the_allow_list(rpc, services, sender):
    services.pairs.put(pending("test", "alice", name=None))
    result = rpc.call("pair.approve", {"channel": "test", "senderId": " alice "})
    assert result == {"approved": True, "senderId": "alice"}
    assert rpc.call("config.get", {"path": "channels.test"})["value"] == {"allowFrom": ["alice"]}
    assert all_outbound(sender) == []


def test_confirmation_skips_a_gone_channel_socket(connect, services, sender):
    admin = connect("client", "admin")
    first = connect("channel", "acct-a", channel="whatsapp")
    second = connect("channel", "acct-b", channel="whatsapp")
    sender.gone.add(first.connection_id)
    services.pairs.put(pending("whatsapp", "+31628552611"))
    admin.call("pair.approve", {"channel": "whatsapp", "senderId": "+31628552611"})
    frames = outbound(sender, second.connection_id)
    assert [f["payload"]["accountId"] for f in frames] == ["acct-b"]
    assert services.connections.get(first.connection_id) is None  # the gone socket was cleaned up


def test_reject_drops_the_request_without_touching_config(connect, services, sender):
    admin = connect("client", "admin")
    connect("channel", "default", channel="whatsapp")
    services.pairs.put(pending("whatsapp", "+31628552611"))
    result = admin.call("pair.reject", {"channel": "whatsapp", "senderId": "31628552611"})
    assert valid("pair.reject", result) == {"rejected": True, "senderId": "+31628552611"}
    assert admin.call("pair.list") == {"pairs": {}}
    assert admin.call("config.get", {"path": "channels.whatsapp.allowFrom"})["value"] == []
    assert all_outbound(sender) == []
    assert admin.error("pair.reject", {"channel": "whatsapp", "senderId": "31628552611"}) == {
        "code": 404,
        "message": "No pending pairing for whatsapp:+31628552611",
    }


# --- channels ---------------------------------------------------------------------------------------------------


def test_channels_list_keeps_entries_after_disconnect(connect, services):
    admin = connect("client", "admin")
    before = int(time.time() * 1000)
    bot = connect("channel", "main", channel="discord")
    listed = valid("channels.list", admin.call("channels.list"))
    assert listed["count"] == 1
    [entry] = listed["channels"]
    assert (entry["channel"], entry["accountId"]) == ("discord", "main")
    assert entry["connectedAt"] >= before
    assert "lastMessageAt" not in entry

    disconnect(services, bot.connection_id)
    assert services.connections.channel_sockets() == {}
    assert admin.call("channels.list") == listed


def test_channels_list_shows_last_message_time(rpc, services):
    services.connections.register_channel("whatsapp", "default")
    stored = services.table.get(keys.channel_entry("whatsapp", "default"))
    services.table.put(keys.channel_entry("whatsapp", "default"), {**stored.data, "lastMessageAt": 1700000000123})
    services.connections.register_channel("discord", "default")
    listed = valid("channels.list", rpc.call("channels.list"))
    assert listed["count"] == 2
    by_channel = {c["channel"]: c for c in listed["channels"]}
    assert by_channel["whatsapp"]["lastMessageAt"] == 1700000000123
    assert "lastMessageAt" not in by_channel["discord"]


# --- heartbeat --------------------------------------------------------------------------------------------------


def test_heartbeat_status_with_state_and_last_active_only_agent(rpc, services):
    services.heartbeats.put("main", {"nextHeartbeatAt": 1700000600000, "lastHeartbeatAt": 1700000000000})
    services.heartbeats.put("idle", {})
    peer = {"kind": "dm", "id": "+31628552611", "name": "Ann"}
    context = {
        "channel": "whatsapp",
        "accountId": "default",
        "peer": peer,
        "sessionKey": "agent:main:main",
        "timestamp": 1700000000500,
    }
    services.last_active.put("main", context)
    services.last_active.put("ops", {**context, "sessionKey": "agent:ops:main", "timestamp": 1700000000900})

    agents = valid("heartbeat.status", rpc.call("heartbeat.status"))["agents"]
    assert set(agents) == {"main", "idle", "ops"}
    last_main = {"channel": "whatsapp", "accountId": "default", "peer": peer, "timestamp": 1700000000500}
    assert agents["main"] == {
        "agentId": "main",
        "nextHeartbeatAt": 1700000600000,
        "lastHeartbeatAt": 1700000000000,
        "lastHeartbeatText": None,
        "lastHeartbeatSentAt": None,
        "lastActive": last_main,
    }
    assert agents["idle"] == {
        "agentId": "idle",
        "nextHeartbeatAt": None,
        "lastHeartbeatAt": None,
        "lastHeartbeatText": None,
        "lastHeartbeatSentAt": None,
    }
    assert agents["ops"] == {
        "agentId": "ops",
        "nextHeartbeatAt": None,
        "lastHeartbeatAt": None,
        "lastHeartbeatText": None,
        "lastHeartbeatSentAt": None,
        "lastActive": {**last_main, "timestamp": 1700000000900},
    }


# --- cron -------------------------------------------------------------------------------------------------------


@pytest.fixture
def cron_jobs(services):
    jobs = [
        job("a", next_run=FUTURE + 3000, created=2),
        job("b", next_run=FUTURE + 1000, created=5, agent="ops"),
        job("c", next_run=FUTURE + 1000, created=1),
        job("d", enabled=False, created=0),
        job("e", created=3),
    ]
    for j in jobs:
        services.cron.put_job(j, create=True)
    return jobs


def ids(payload: dict) -> list[str]:
    return [j["id"] for j in payload["jobs"]]


def test_cron_list_orders_by_next_run_then_creation(rpc, cron_jobs):
    listed = valid("cron.list", rpc.call("cron.list"))
    assert ids(listed) == ["c", "b", "a", "d", "e"]
    assert listed["count"] == 5
    assert listed["jobs"][0] == cron_jobs[2]


def test_cron_list_filters(rpc, cron_jobs):
    enabled = rpc.call("cron.list", {"includeDisabled": False})
    assert (ids(enabled), enabled["count"]) == (["c", "b", "a", "e"], 4)
    main = rpc.call("cron.list", {"agentId": "main"})
    assert (ids(main), main["count"]) == (["c", "a", "d", "e"], 4)
    ops = rpc.call("cron.list", {"agentId": "ops", "includeDisabled": False})
    assert (ids(ops), ops["count"]) == (["b"], 1)
    assert rpc.call("cron.list", {"agentId": "nobody"}) == {"jobs": [], "count": 0}


def test_cron_list_paging(rpc, cron_jobs):
    page = rpc.call("cron.list", {"limit": 2, "offset": 1})
    assert (ids(page), page["count"]) == (["b", "a"], 5)
    assert ids(rpc.call("cron.list", {"limit": 2, "offset": 4})) == ["e"]
    assert rpc.call("cron.list", {"offset": 50}) == {"jobs": [], "count": 5}
    assert ids(rpc.call("cron.list", {"limit": 0})) == ["c"]
    assert ids(rpc.call("cron.list", {"limit": 1.9, "offset": -3})) == ["c"]
    assert ids(rpc.call("cron.list", {"limit": "lots"})) == ["c", "b", "a", "d", "e"]


def test_cron_list_limit_is_capped_at_500(services):
    services.table.write_batch(puts=[(keys.cron_job(f"j{n:03d}"), job(f"j{n:03d}", created=n)) for n in range(503)])
    jobs, count = services.cron.list_jobs(limit=10_000)
    assert (len(jobs), count) == (500, 503)
    assert jobs[0]["id"] == "j000"


def test_cron_status_counts_due_and_running_jobs(rpc, services):
    services.cron.put_job(job("due-1", next_run=1000, created=1), create=True)
    services.cron.put_job(job("due-2", next_run=2000, created=2), create=True)
    services.cron.put_job(job("running", next_run=500, running=int(time.time() * 1000)), create=True)
    services.cron.put_job(job("off", enabled=False, next_run=100), create=True)
    services.cron.put_job(job("later", next_run=FUTURE), create=True)
    status = valid("cron.status", rpc.call("cron.status"))
    assert status == {
        "enabled": True,
        "count": 5,
        "dueCount": 2,
        "runningCount": 1,
        "nextRunAtMs": 500,
        "maxJobs": 200,
        "maxConcurrentRuns": 4,
    }
    assert [j["id"] for j in services.cron.due_jobs(int(time.time() * 1000))] == ["due-1", "due-2"]
    assert [j["id"] for j in services.cron.due_jobs(int(time.time() * 1000), limit=1)] == ["due-1"]


def test_cron_status_reflects_settings(rpc, services):
    # values config.set refuses (stored before it checked them) still read as GSV reads them: floored, at least 1
    assert rpc.frame("config.set", {"path": "cron.maxJobs", "value": 7.9})["error"]["code"] == 400
    services.config.set_path("cron", {"enabled": False, "maxJobs": 7.9, "maxConcurrentRuns": 0})
    services.cron.put_job(job("later", next_run=FUTURE), create=True)
    status = rpc.call("cron.status")
    assert status == {
        "enabled": False,
        "count": 1,
        "dueCount": 0,
        "runningCount": 0,
        "nextRunAtMs": FUTURE,
        "maxJobs": 7,
        "maxConcurrentRuns": 1,
    }
    services.config.set_path("cron.maxJobs", "many")
    assert rpc.call("cron.status")["maxJobs"] == 200


# --- the repository beyond these methods ----------------------------------------------------------------------


def test_cron_job_versions_and_due_index(services):
    assert services.cron.put_job(job("x", next_run=1000), create=True) == 1
    with pytest.raises(ConflictError):
        services.cron.put_job(job("x", next_run=1000), create=True)
    stored, version = services.cron.get_job_versioned("x")
    assert version == 1 and stored["state"] == {"nextRunAtMs": 1000}
    disabled = {**stored, "enabled": False}
    assert services.cron.put_job(disabled, expect_version=1) == 2
    with pytest.raises(ConflictError):
        services.cron.put_job(stored, expect_version=1)
    assert services.cron.due_jobs(5000) == []
    assert services.cron.put_job({**stored, "state": {"nextRunAtMs": 4000}}) == 3
    assert [j["id"] for j in services.cron.due_jobs(5000)] == ["x"]
    assert services.cron.due_jobs(3999) == []
    assert services.cron.delete_job("x") is True
    assert services.cron.delete_job("x") is False
    assert services.cron.get_job("x") is None
    assert services.cron.due_jobs(5000) == []


def test_cron_run_history(services):
    first = services.cron.append_run({"jobId": "a", "ts": 1000, "status": "ok", "durationMs": 5})
    services.cron.append_run({"jobId": "b", "ts": 1500, "status": "error", "error": "boom"})
    services.cron.append_run({"jobId": "a", "ts": 2000, "status": "skipped"})
    services.cron.append_run({"jobId": "a", "ts": 2000, "status": "ok"})
    assert first == {"jobId": "a", "ts": 1000, "status": "ok", "durationMs": 5, "id": 1}
    runs, count = services.cron.list_runs(job_id="a")
    assert [(r["ts"], r["id"]) for r in runs] == [(2000, 4), (2000, 3), (1000, 1)]
    assert count == 3
    runs, count = services.cron.list_runs(limit=2, offset=1)
    assert ([r["id"] for r in runs], count) == ([3, 2], 4)

    assert services.cron.trim_runs("a", 2) == 1
    assert [r["id"] for r in services.cron.list_runs(job_id="a")[0]] == [4, 3]
    services.cron.append_run({"jobId": "a", "ts": 3000, "status": "ok"}, keep=1)
    assert [r["id"] for r in services.cron.list_runs(job_id="a")[0]] == [5]

    services.cron.put_job(job("a"), create=True)
    services.cron.delete_job("a")
    assert services.cron.list_runs(job_id="a") == ([], 0)
    assert [r["jobId"] for r in services.cron.list_runs()[0]] == ["b"]


def test_pairs_heartbeat_and_last_active_round_trip(services):
    services.pairs.put(pending("whatsapp", "+31628552611"))
    assert services.pairs.get("whatsapp", "+31628552611")["firstMessage"] == "hello there"
    assert services.pairs.put(pending("whatsapp", "+31628552611", text="again"), only_if_new=False)
    assert services.pairs.delete("whatsapp", "+31628552611")["firstMessage"] == "again"
    assert services.pairs.delete("whatsapp", "+31628552611") is None

    stored = services.heartbeats.put("main", {"lastHeartbeatText": "disk almost full", "ignored": 1})
    assert stored == {
        "agentId": "main",
        "nextHeartbeatAt": None,
        "lastHeartbeatAt": None,
        "lastHeartbeatText": "disk almost full",
        "lastHeartbeatSentAt": None,
    }
    assert services.heartbeats.get("main") == stored
    services.heartbeats.delete("main")
    assert services.heartbeats.get("main") is None and services.heartbeats.all() == {}

    services.last_active.put("main", {"channel": "whatsapp", "accountId": "default", "timestamp": 1})
    assert services.last_active.get("main")["agentId"] == "main"
    services.last_active.delete("main")
    assert services.last_active.all() == {}
