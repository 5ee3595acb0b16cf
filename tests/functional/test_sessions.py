"""Session methods through the real dispatcher, against moto DynamoDB and S3 (spec §2.3, §5, fix F11)."""

from __future__ import annotations

import gzip
import json
from typing import Any

import boto3
import pytest
from orbital.store import keys

from tests.conftest import BUCKET

MAIN = "agent:main:main"
T0 = 1_760_000_000_000


class Clock:
    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> int:
        self.now += ms
        return self.now


@pytest.fixture
def clock(services: Any) -> Clock:
    """The gateway's clock, set by the test (no sleeps, exact timestamps)."""
    fixed = Clock(T0)
    services.now_ms = fixed
    return fixed


@pytest.fixture
def s3() -> Any:
    return boto3.client("s3", region_name="us-east-1")


def user(text: str, **extra: Any) -> dict[str, Any]:
    return {"role": "user", "content": text, **extra}


def append(services: Any, key: str, count: int, *, start: int = 0, now: int = T0) -> None:
    services.sessions.append_messages(key, [user(f"m{i}") for i in range(start, start + count)], now=now)


def texts(messages: list[dict[str, Any]]) -> list[str]:
    return [m["content"] for m in messages]


def read_archive(s3: Any, key: str) -> tuple[str, dict[str, Any]]:
    obj = s3.get_object(Bucket=BUCKET, Key=key)
    return gzip.decompress(obj["Body"].read()).decode("utf-8"), obj


# --- first touch (F11) -----------------------------------------------------------------------------------------


def test_get_persists_session_id_and_created_at_at_first_touch(rpc, services, clock):
    first = rpc.call("session.get", {"sessionKey": "main"})
    clock.advance(5_000)
    second = rpc.call("session.get", {"sessionKey": "main"})

    assert second["sessionId"] == first["sessionId"]
    assert second["createdAt"] == first["createdAt"] == T0
    assert second["updatedAt"] == T0
    stored = services.sessions.load_meta(MAIN)
    assert stored is not None and stored["sessionId"] == first["sessionId"]
    assert first == {
        "sessionId": first["sessionId"],
        "sessionKey": "",
        "createdAt": T0,
        "updatedAt": T0,
        "messageCount": 0,
        "tokens": {"input": 0, "output": 0, "total": 0},
        "settings": {},
        "resetPolicy": {"mode": "daily", "atHour": 4},
        "previousSessionIds": [],
    }


@pytest.mark.parametrize(
    ("method", "params", "id_field"),
    [
        ("session.stats", {}, "sessionId"),
        ("session.history", {}, "currentSessionId"),
        ("session.preview", {"limit": 3}, "sessionId"),
        ("session.patch", {"label": "x"}, None),
        ("session.compact", {}, None),
        ("session.reset", {}, "newSessionId"),
    ],
)
def test_every_session_method_persists_the_session_at_first_touch(rpc, services, clock, method, params, id_field):
    assert services.sessions.load_meta("fresh") is None
    result = rpc.call(method, {"sessionKey": "fresh", **params})
    clock.advance(1_000)
    got = rpc.call("session.get", {"sessionKey": "fresh"})
    if id_field:
        assert got["sessionId"] == result[id_field]
    assert got["createdAt"] == T0
    assert rpc.call("session.get", {"sessionKey": "fresh"})["sessionId"] == got["sessionId"]


def test_session_key_is_empty_until_a_chat_marks_it(rpc, services):
    assert rpc.call("session.get", {"sessionKey": "main"})["sessionKey"] == ""
    services.sessions.mark_chatted(MAIN)
    assert rpc.call("session.get", {"sessionKey": "main"})["sessionKey"] == MAIN
    assert rpc.call("session.history", {"sessionKey": "main"})["sessionKey"] == MAIN
    assert rpc.call("session.stats", {"sessionKey": "main"})["sessionKey"] == MAIN


# --- canonical keys ---------------------------------------------------------------------------------------------


def test_client_aliases_address_the_main_session(rpc, services):
    ids = {
        rpc.call("session.get", {"sessionKey": alias})["sessionId"]
        for alias in ("agent:main:web:dm:local", "agent:main:cli:dm:main", "main", "MAIN", "agent:main:main")
    }
    assert len(ids) == 1
    assert services.sessions.load_meta(MAIN)["sessionId"] in ids
    assert services.sessions.load_meta("agent:main:web:dm:local") is None


def test_dm_scope_and_main_key_from_config(rpc, services):
    rpc.call("config.set", {"path": "session.dmScope", "value": "per-channel-peer"})
    rpc.call("config.set", {"path": "session.mainKey", "value": "Home"})
    web = rpc.call("session.get", {"sessionKey": "agent:main:web:dm:local"})
    cli = rpc.call("session.get", {"sessionKey": "agent:main:cli:dm:main"})
    home = rpc.call("session.get", {"sessionKey": "main"})
    assert len({web["sessionId"], cli["sessionId"], home["sessionId"]}) == 3
    assert services.sessions.load_meta("agent:main:web:dm:local")["sessionId"] == web["sessionId"]
    assert services.sessions.load_meta("agent:main:home")["sessionId"] == home["sessionId"]


def test_main_alias_uses_the_default_agent(rpc, services):
    rpc.call("config.set", {"path": "agents.list", "value": [{"id": "Ops", "default": True}]})
    got = rpc.call("session.get", {"sessionKey": "main"})
    assert services.sessions.load_meta("agent:ops:main")["sessionId"] == got["sessionId"]


@pytest.mark.parametrize(
    "method",
    [
        "session.get",
        "session.stats",
        "session.patch",
        "session.history",
        "session.preview",
        "session.reset",
        "session.compact",
    ],
)
def test_session_key_is_required(rpc, services, method):
    for params in (None, {}, {"sessionKey": ""}, {"sessionKey": "   "}, {"sessionKey": None}):
        assert rpc.error(method, params) == {"code": 400, "message": "sessionKey required"}
    assert services.table.query(keys.session_pk("")) == []


def test_oversized_session_key_is_rejected(rpc):
    err = rpc.error("session.get", {"sessionKey": "k" * 600})
    assert err["code"] == 400
    assert "too long" in err["message"]


# --- reset policy initialization (§5.10) ---------------------------------------------------------------------------


def test_get_and_stats_adopt_the_configured_default_policy(rpc, services):
    rpc.call("config.set", {"path": "session.defaultResetPolicy", "value": {"mode": "idle", "idleMinutes": 30}})
    rpc.call("session.stats", {"sessionKey": "s1"})
    expected = {"mode": "idle", "atHour": 4, "idleMinutes": 30}  # overrides deep-merge over the default policy
    assert services.sessions.load_meta("s1")["resetPolicy"] == expected
    assert rpc.call("session.get", {"sessionKey": "s2"})["resetPolicy"] == expected


def test_history_and_preview_do_not_initialize_the_policy(rpc, services):
    rpc.call("session.history", {"sessionKey": "s1"})
    rpc.call("session.preview", {"sessionKey": "s1"})
    assert "resetPolicy" not in services.sessions.load_meta("s1")


def test_a_patched_policy_is_not_overwritten_by_the_default(rpc):
    rpc.call("session.patch", {"sessionKey": "s1", "resetPolicy": {"idleMinutes": 5}})
    assert rpc.call("session.get", {"sessionKey": "s1"})["resetPolicy"] == {"idleMinutes": 5, "mode": "manual"}


def test_no_policy_when_the_default_has_no_mode(rpc):
    rpc.call("config.set", {"path": "session.defaultResetPolicy", "value": {"atHour": 3}})
    rpc.call("config.set", {"path": "session.defaultResetPolicy.mode", "value": None})
    assert "resetPolicy" not in rpc.call("session.get", {"sessionKey": "s1"})


# --- patch (§5.6) ---------------------------------------------------------------------------------------------


def test_patch_merges_settings_label_and_policy(rpc, clock):
    rpc.call("session.get", {"sessionKey": "main"})
    clock.advance(60_000)
    assert rpc.call(
        "session.patch",
        {
            "sessionKey": "main",
            "settings": {"model": {"provider": "openai", "id": "gpt-x"}, "thinkingLevel": "low"},
            "label": "Inbox",
        },
    ) == {"ok": True}
    clock.advance(60_000)
    rpc.call(
        "session.patch",
        {"sessionKey": "main", "settings": {"model": {"id": "gpt-y"}, "maxTokens": 100}, "resetPolicy": {"atHour": 6}},
    )
    got = rpc.call("session.get", {"sessionKey": "main"})
    assert got["settings"] == {"model": {"provider": "openai", "id": "gpt-y"}, "thinkingLevel": "low", "maxTokens": 100}
    assert got["label"] == "Inbox"
    assert got["resetPolicy"] == {"mode": "daily", "atHour": 6}
    assert got["updatedAt"] == T0 + 120_000
    assert got["createdAt"] == T0


def test_patch_replaces_and_clears_the_label_and_defaults_policy_mode(rpc, clock):
    rpc.call("session.patch", {"sessionKey": "s", "label": "one"})
    rpc.call("session.patch", {"sessionKey": "s", "label": "two"})
    assert rpc.call("session.get", {"sessionKey": "s"})["label"] == "two"
    rpc.call("session.patch", {"sessionKey": "s", "settings": {"systemPrompt": "hi"}})
    assert rpc.call("session.get", {"sessionKey": "s"})["label"] == "two"
    rpc.call("session.patch", {"sessionKey": "s", "label": None})
    got = rpc.call("session.get", {"sessionKey": "s"})
    assert "label" not in got
    rpc.call("session.patch", {"sessionKey": "s2", "resetPolicy": {"mode": ""}})
    assert rpc.call("session.get", {"sessionKey": "s2"})["resetPolicy"] == {"mode": "manual"}


def test_an_empty_patch_only_moves_updated_at(rpc, clock):
    before = rpc.call("session.get", {"sessionKey": "main"})
    clock.advance(7)
    rpc.call("session.patch", {"sessionKey": "main"})
    after = rpc.call("session.get", {"sessionKey": "main"})
    assert after["updatedAt"] == before["updatedAt"] + 7
    assert {k: v for k, v in after.items() if k != "updatedAt"} == {k: v for k, v in before.items() if k != "updatedAt"}


# --- messages, preview and stats ---------------------------------------------------------------------------------


def test_preview_limits(rpc, services):
    append(services, MAIN, 5)
    preview = lambda **p: rpc.call("session.preview", {"sessionKey": "main", **p})  # noqa: E731
    assert texts(preview()["messages"]) == ["m0", "m1", "m2", "m3", "m4"]
    assert texts(preview(limit=0)["messages"]) == ["m0", "m1", "m2", "m3", "m4"]
    assert texts(preview(limit=2)["messages"]) == ["m3", "m4"]
    assert texts(preview(limit=1)["messages"]) == ["m4"]
    assert texts(preview(limit=10)["messages"]) == ["m0", "m1", "m2", "m3", "m4"]
    assert texts(preview(limit=-2)["messages"]) == ["m2", "m3", "m4"]
    assert all(p["messageCount"] == 5 for p in (preview(), preview(limit=2)))
    assert preview()["sessionId"] == rpc.call("session.get", {"sessionKey": "main"})["sessionId"]


def test_messages_are_stored_verbatim_with_a_timestamp(rpc, services):
    assistant = {
        "role": "assistant",
        "content": [{"type": "text", "text": "héllo"}],
        "usage": {"input": 3},
        "timestamp": 42,
    }
    services.sessions.append_messages(MAIN, [user("hi"), assistant], now=T0 + 9)
    messages = rpc.call("session.preview", {"sessionKey": "main"})["messages"]
    assert messages == [{"role": "user", "content": "hi", "timestamp": T0 + 9}, assistant]


def test_sequence_numbers_increase_across_appends(services):
    append(services, MAIN, 3)
    append(services, MAIN, 2, start=3)
    meta = services.sessions.load_meta(MAIN)
    records = services.table.query(keys.session_pk(MAIN), sk_prefix=keys.message_prefix(meta["sessionId"]))
    assert [r.sk for r in records] == [keys.message(MAIN, meta["sessionId"], i)[1] for i in range(5)]
    assert texts([r.data for r in records]) == ["m0", "m1", "m2", "m3", "m4"]
    assert meta["messageCount"] == 5
    assert texts(services.sessions.messages(MAIN, 2)) == ["m3", "m4"]


def test_stats(rpc, services, clock):
    rpc.call("session.get", {"sessionKey": "main"})
    append(services, MAIN, 4)
    services.sessions.update_meta(MAIN, lambda m: m.update(inputTokens=10, outputTokens=4, totalTokens=14))
    clock.advance(90_000)
    stats = rpc.call("session.stats", {"sessionKey": "main"})
    assert stats == {
        "sessionKey": "",
        "sessionId": stats["sessionId"],
        "messageCount": 4,
        "tokens": {"input": 10, "output": 4, "total": 14},
        "createdAt": T0,
        "updatedAt": T0,
        "uptime": 90_000,
        "isProcessing": False,
        "queueSize": 0,
        "queue": [],
        "budget": {  # no budget configured: what is used, without limits (ADR 0026)
            "session": {"used": 14, "limit": None},
            "daily": {"used": 0, "limit": None, "period": "2025-10-09"},
            "monthly": {"used": 0, "limit": None, "period": "2025-10"},
        },
    }
    queued = {"runId": "q1", "queuedAt": T0}
    services.sessions.update_meta(MAIN, lambda m: m.update(currentRun={"runId": "r1"}, queue=[queued]))
    stats = rpc.call("session.stats", {"sessionKey": "main"})
    assert stats["isProcessing"] is True
    assert stats["queueSize"] == 1
    assert stats["currentRunId"] == "r1"
    assert stats["queue"] == [queued]


# --- reset (§5.7) -------------------------------------------------------------------------------------------------


def test_reset_archives_clears_and_starts_a_new_session(rpc, services, s3, clock):
    services.sessions.mark_chatted(MAIN, now=T0)
    rpc.call("session.patch", {"sessionKey": "main", "label": "L", "settings": {"thinkingLevel": "high"}})
    rpc.call("session.get", {"sessionKey": "main"})
    messages = [user("first"), {"role": "assistant", "content": [{"type": "text", "text": "ünïcode\nline"}]}]
    services.sessions.append_messages(MAIN, messages, now=T0 + 1)
    services.sessions.update_meta(
        MAIN, lambda m: m.update(inputTokens=100, outputTokens=20, totalTokens=120, lastInputTokens=100)
    )
    s3.put_object(Bucket=BUCKET, Key=f"{keys.session_media_prefix(MAIN)}a.png", Body=b"x")
    s3.put_object(Bucket=BUCKET, Key=f"{keys.session_media_prefix(MAIN)}b.ogg", Body=b"y")
    s3.put_object(Bucket=BUCKET, Key=f"{keys.session_media_prefix('agent:main:other')}c.png", Body=b"z")
    old = rpc.call("session.get", {"sessionKey": "main"})
    now = clock.advance(3_600_000)

    result = rpc.call("session.reset", {"sessionKey": "agent:main:web:dm:local"})

    archive_key = keys.session_archive("main", old["sessionId"])
    assert result == {
        "ok": True,
        "sessionKey": MAIN,
        "oldSessionId": old["sessionId"],
        "newSessionId": result["newSessionId"],
        "archivedMessages": 2,
        "archivedTo": archive_key,
        "tokensCleared": {"input": 100, "output": 20, "total": 120},
        "mediaDeleted": 2,
    }
    assert result["newSessionId"] != old["sessionId"]

    text, obj = read_archive(s3, archive_key)
    assert not text.endswith("\n")
    lines = text.split("\n")
    assert [json.loads(line) for line in lines] == [
        {**messages[0], "timestamp": T0 + 1},
        {**messages[1], "timestamp": T0 + 1},
    ]
    assert obj["ContentType"] == "application/x-ndjson"
    assert "ContentEncoding" not in obj
    assert obj["Metadata"] == {
        "sessionkey": MAIN,
        "sessionid": old["sessionId"],
        "agentid": "main",
        "messagecount": "2",
        "archivedat": str(now),
        "inputtokens": "100",
        "outputtokens": "20",
        "totaltokens": "120",
    }

    media = s3.list_objects_v2(Bucket=BUCKET, Prefix="media/").get("Contents", [])
    assert [o["Key"] for o in media] == [f"{keys.session_media_prefix('agent:main:other')}c.png"]

    got = rpc.call("session.get", {"sessionKey": "main"})
    assert got["sessionId"] == result["newSessionId"]
    assert got["previousSessionIds"] == [old["sessionId"]]
    assert got["messageCount"] == 0
    assert got["tokens"] == {"input": 0, "output": 0, "total": 0}
    assert got["lastResetAt"] == got["updatedAt"] == now
    assert got["createdAt"] == T0
    assert got["label"] == "L"
    assert got["settings"] == {"thinkingLevel": "high"}
    assert got["resetPolicy"] == {"mode": "daily", "atHour": 4}
    assert "lastInputTokens" not in services.sessions.load_meta(MAIN)
    assert rpc.call("session.preview", {"sessionKey": "main"})["messages"] == []
    remaining = services.table.query(keys.session_pk(MAIN))
    assert [r.sk for r in remaining] == ["META"]


def test_reset_of_an_empty_session_archives_nothing(rpc, s3):
    result = rpc.call("session.reset", {"sessionKey": "main"})
    assert result["archivedMessages"] == 0
    assert "archivedTo" not in result
    assert result["mediaDeleted"] == 0
    assert result["sessionKey"] == ""
    assert s3.list_objects_v2(Bucket=BUCKET, Prefix="agents/").get("KeyCount", 0) == 0
    history = rpc.call("session.history", {"sessionKey": "main"})
    assert history["previousSessionIds"] == [result["oldSessionId"]]
    assert history["currentSessionId"] == result["newSessionId"]


def test_reset_keeps_queued_messages(rpc, services):
    queued = [{"id": "q1", "text": "later"}]
    services.sessions.update_meta(MAIN, lambda m: m.update(queue=queued))
    append(services, MAIN, 1)
    rpc.call("session.reset", {"sessionKey": "main"})
    assert services.sessions.load_meta(MAIN)["queue"] == queued
    assert rpc.call("session.stats", {"sessionKey": "main"})["queueSize"] == 1


def test_reset_archives_under_the_sessions_agent(rpc, services, s3):
    key = "agent:ops:cron:job-1"
    append(services, key, 2)
    result = rpc.call("session.reset", {"sessionKey": key})
    assert result["archivedTo"] == keys.session_archive("ops", result["oldSessionId"])
    text, obj = read_archive(s3, result["archivedTo"])
    assert texts([json.loads(line) for line in text.split("\n")]) == ["m0", "m1"]
    assert obj["Metadata"]["agentid"] == "ops"
    assert obj["Metadata"]["sessionkey"] == key


def test_history_lists_every_replaced_session_in_order(rpc):
    first = rpc.call("session.reset", {"sessionKey": "main"})
    second = rpc.call("session.reset", {"sessionKey": "main"})
    history = rpc.call("session.history", {"sessionKey": "main"})
    assert history == {
        "sessionKey": "",
        "currentSessionId": second["newSessionId"],
        "previousSessionIds": [first["oldSessionId"], second["oldSessionId"]],
    }
    assert second["oldSessionId"] == first["newSessionId"]


def test_messages_after_a_reset_belong_to_the_new_session(rpc, services):
    append(services, MAIN, 3)
    rpc.call("session.reset", {"sessionKey": "main"})
    append(services, MAIN, 1, start=10)
    preview = rpc.call("session.preview", {"sessionKey": "main"})
    assert texts(preview["messages"]) == ["m10"]
    assert preview["messageCount"] == 1


# --- compact (§5.8) -----------------------------------------------------------------------------------------------


def test_compact_archives_older_messages_to_a_part(rpc, services, s3, clock):
    append(services, MAIN, 25)
    sid = rpc.call("session.get", {"sessionKey": "main"})["sessionId"]
    now = clock.advance(1_000)

    result = rpc.call("session.compact", {"sessionKey": "main"})

    part_key = keys.session_archive_part("main", sid, now)
    assert result == {"ok": True, "trimmedMessages": 5, "keptMessages": 20, "archivedTo": part_key}
    text, obj = read_archive(s3, part_key)
    assert not text.endswith("\n")
    assert texts([json.loads(line) for line in text.split("\n")]) == [f"m{i}" for i in range(5)]
    assert obj["ContentType"] == "application/x-ndjson"
    assert obj["Metadata"] == {
        "sessionkey": MAIN,
        "sessionid": sid,
        "agentid": "main",
        "partnumber": str(now),
        "messagecount": "5",
        "archivedat": str(now),
    }
    preview = rpc.call("session.preview", {"sessionKey": "main"})
    assert texts(preview["messages"]) == [f"m{i}" for i in range(5, 25)]
    assert preview["messageCount"] == 20
    got = rpc.call("session.get", {"sessionKey": "main"})
    assert got["sessionId"] == sid
    assert got["updatedAt"] == now

    append(services, MAIN, 1, start=25)
    assert texts(rpc.call("session.preview", {"sessionKey": "main", "limit": 2})["messages"]) == ["m24", "m25"]


def test_compact_with_few_messages_changes_nothing(rpc, services, s3, clock):
    append(services, MAIN, 3)
    clock.advance(1_000)
    assert rpc.call("session.compact", {"sessionKey": "main", "keepMessages": 3}) == {
        "ok": True,
        "trimmedMessages": 0,
        "keptMessages": 3,
    }
    assert rpc.call("session.get", {"sessionKey": "main"})["updatedAt"] == T0
    assert s3.list_objects_v2(Bucket=BUCKET, Prefix="agents/").get("KeyCount", 0) == 0


def test_compact_to_a_custom_count_and_to_zero(rpc, services):
    append(services, MAIN, 6)
    assert rpc.call("session.compact", {"sessionKey": "main", "keepMessages": 2})["trimmedMessages"] == 4
    assert texts(rpc.call("session.preview", {"sessionKey": "main"})["messages"]) == ["m4", "m5"]
    result = rpc.call("session.compact", {"sessionKey": "main", "keepMessages": 0})
    assert result["trimmedMessages"] == 2
    assert result["keptMessages"] == 0
    assert rpc.call("session.preview", {"sessionKey": "main"})["messageCount"] == 0


# --- sessions.list (§2.3) -----------------------------------------------------------------------------------------


def test_sessions_list_orders_by_last_activity_and_pages(rpc, services):
    repo = services.sessions
    repo.touch_registry("agent:main:a", now=T0 + 10)
    repo.touch_registry("agent:main:b", now=T0 + 30, default_label="Bee")
    repo.touch_registry("agent:main:c", now=T0 + 20)
    repo.touch_registry("agent:main:a", now=T0 + 40, default_label="Ay")

    listed = rpc.call("sessions.list")
    assert listed["count"] == 3
    assert listed["sessions"] == [
        {
            "sessionKey": "agent:main:a",
            "createdAt": T0 + 10,
            "lastActiveAt": T0 + 40,
            "label": "Ay",
        },
        {"sessionKey": "agent:main:b", "createdAt": T0 + 30, "lastActiveAt": T0 + 30, "label": "Bee"},
        {"sessionKey": "agent:main:c", "createdAt": T0 + 20, "lastActiveAt": T0 + 20},
    ]
    repo.touch_registry("agent:main:b", now=T0 + 50, default_label="Other")
    assert rpc.call("sessions.list")["sessions"][0]["label"] == "Bee"

    paged = rpc.call("sessions.list", {"offset": 1, "limit": 1})
    assert [s["sessionKey"] for s in paged["sessions"]] == ["agent:main:a"]
    assert paged["count"] == 3
    assert rpc.call("sessions.list", {"offset": 5})["sessions"] == []


def test_sessions_list_defaults_to_a_hundred(rpc, services):
    services.table.write_batch(
        puts=[
            (
                keys.session_registry(f"s{i:03d}"),
                {"sessionKey": f"s{i:03d}", "createdAt": i, "lastActiveAt": i},
            )
            for i in range(105)
        ]
    )
    listed = rpc.call("sessions.list", {})
    assert listed["count"] == 105
    assert len(listed["sessions"]) == 100
    assert listed["sessions"][0]["sessionKey"] == "s104"
    assert listed["sessions"][-1]["sessionKey"] == "s005"


def test_session_methods_do_not_register_sessions(rpc):
    rpc.call("session.get", {"sessionKey": "main"})
    rpc.call("session.patch", {"sessionKey": "main", "label": "x"})
    assert rpc.call("sessions.list") == {"sessions": [], "count": 0}


def test_results_match_their_documented_shapes(rpc, services):
    from orbital.methods import registry

    services.sessions.mark_chatted(MAIN)
    services.sessions.touch_registry(MAIN, default_label="Main")
    append(services, MAIN, 3)
    rpc.call("session.patch", {"sessionKey": "main", "label": "x", "resetPolicy": {"mode": "idle"}})
    calls = [
        ("session.get", {"sessionKey": "main"}),
        ("session.stats", {"sessionKey": "main"}),
        ("session.history", {"sessionKey": "main"}),
        ("session.preview", {"sessionKey": "main", "limit": 2}),
        ("session.compact", {"sessionKey": "main", "keepMessages": 1}),
        ("session.reset", {"sessionKey": "main"}),
        ("session.patch", {"sessionKey": "main"}),
        ("sessions.list", {}),
    ]
    for method, params in calls:
        spec = registry().get(method)
        assert spec is not None and spec.result is not None
        spec.result.model_validate(rpc.call(method, params))


def test_previews_and_listings_fit_one_websocket_message(rpc: Any, services: Any) -> None:
    key = "agent:main:long-one"
    services.sessions.mark_chatted(key)
    services.sessions.append_messages(key, [{"role": "user", "content": f"{i:03d} " + "x" * 10_000} for i in range(30)])
    preview = rpc.call("session.preview", {"sessionKey": key})
    assert preview["truncated"] is True and preview["messageCount"] == 30
    kept = [m["content"][:3] for m in preview["messages"]]
    assert 5 <= len(kept) < 30 and kept == [f"{i:03d}" for i in range(30 - len(kept), 30)]  # the newest, in order
    assert len(json.dumps(preview).encode()) < 100_000
    small = rpc.call("session.preview", {"sessionKey": key, "limit": 2})
    assert "truncated" not in small and [m["content"][:3] for m in small["messages"]] == ["028", "029"]
