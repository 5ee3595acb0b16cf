"""`agents.clone` and `agents.list` through the dispatcher, on both stores a gateway runs on: the local runtime's
(a data directory's SQLite table and file workspace, given to Services as the local gateway's composition root gives
them) and the AWS path (moto's DynamoDB table and S3 bucket, the default). An agent filled the way the gateway fills
it (its memory, sessions, a cron job with a run, heartbeat state) is cloned; the clone holds the same under its own
id, the original and every other agent are left exactly as they were, item by item and object by object."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from orbital.local.portable import TableItems, WorkspaceObjects
from orbital.local.server import local_state
from orbital.store import keys, portable

from tests.conftest import FakeSender, Rpc, reset_caches

MEMORY = b"# Memory\n\n- the user's cat is called Pixel\n"
SECRET = "sk-clone-secret-456"


@contextlib.contextmanager
def _saved_environ() -> Iterator[None]:
    """An in-process gateway configures this process's environment: put it back afterwards."""
    saved = dict(os.environ)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)
        reset_caches()


@pytest.fixture(params=["local", "aws"])
def gateway(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """Services of a gateway on the local runtime's stores, or on moto's DynamoDB and S3."""
    from orbital.runtime.services import build_services
    from orbital.settings import get_settings

    if request.param == "aws":
        request.getfixturevalue("aws")
        yield build_services(get_settings(), sender=FakeSender())
        return
    with _saved_environ(), local_state(tmp_path / "data") as store:
        table, workspace = store.table, store.workspace
        yield build_services(
            get_settings(),
            sender=FakeSender(),
            table=table,
            workspace=workspace,
            portable=lambda: (TableItems(table), WorkspaceObjects(workspace)),
        )


def admin(services: Any, name: str = "admin") -> Rpc:
    rpc = Rpc(services, f"conn-{name}")
    rpc.call("connect", {"minProtocol": 1, "client": {"mode": "client", "id": name}})
    return rpc


def populate(services: Any) -> str:
    """`main` with memory, two sessions (one reset: an archive), a cron job with a run and heartbeat state; `other`
    with a file and a session of its own; an API key. Returns main's cron job id."""
    rpc = admin(services, "populate")
    rpc.call("config.set", {"path": "apiKeys.anthropic", "value": SECRET})
    rpc.call("workspace.write", {"path": "MEMORY.md", "content": MEMORY.decode()})
    rpc.call("workspace.write", {"path": "notes/trip.md", "content": "Lisbon in May\n"})
    rpc.call("workspace.write", {"path": "MEMORY.md", "content": "other's memory\n", "agentId": "other"})
    job = rpc.call(
        "cron.add",
        {
            "name": "morning",
            "agentId": "main",
            "schedule": {"kind": "cron", "expr": "0 8 * * *", "tz": "UTC"},
            "spec": {"mode": "task", "message": "Say good morning."},
        },
    )
    job_id = str(job["job"]["id"])
    sessions = services.sessions
    for key, text in (("agent:main:main", "What is my cat called?"), ("agent:other:main", "hello other")):
        sessions.get_or_create_meta(key)
        sessions.append_messages(
            key,
            [
                {"role": "user", "content": [{"type": "text", "text": text}]},
                {"role": "assistant", "content": [{"type": "text", "text": "Noted."}]},
            ],
        )
        sessions.touch_registry(key)
    work = "agent:main:work"
    sessions.get_or_create_meta(work)
    sessions.append_messages(work, [{"role": "user", "content": [{"type": "text", "text": "old work"}]}])
    sessions.reset(work)  # its messages go to a session archive in the workspace
    sessions.append_messages(work, [{"role": "user", "content": [{"type": "text", "text": "new work"}]}])
    sessions.touch_registry(work, default_label="Work")
    services.heartbeats.put("main", {"lastRunAt": 1_700_000_000_000}, create=True)
    services.cron.append_run({"jobId": job_id, "ts": 1_700_000_000_000, "status": "ok", "durationMs": 5})
    return job_id


def snapshot(services: Any) -> tuple[dict[Any, Any], dict[str, bytes]]:
    """Every item by key, every object's bytes by key, through the gateway's own portable stores."""
    items, objects = services.portable_stores()
    got_items = {portable.item_key(i): i for i in items.scan()}
    got_objects: dict[str, bytes] = {}
    for key in objects.list_keys():
        opened = objects.read(key)
        assert opened is not None
        stream, _ = opened
        try:
            got_objects[key] = stream.read()
        finally:
            stream.close()
    return got_items, got_objects


def belongs_to(agent: str, key: Any) -> bool:
    text = "#".join(key) if isinstance(key, tuple) else str(key)
    return f"agent:{agent}:" in text or f"agents/{agent}/" in text or text.endswith(f"#{agent}") or f"#{agent}#" in text


def text_of(history: dict[str, Any]) -> list[str]:
    return [b.get("text") for m in history["messages"] for b in m.get("content") or [] if isinstance(b, dict)]


def test_a_clone_holds_what_the_original_holds_and_the_original_is_unchanged(gateway: Any) -> None:
    job_id = populate(gateway)
    rpc = admin(gateway)
    before_items, before_objects = snapshot(gateway)

    res = rpc.call("agents.clone", {"from": "main", "to": "twin"})

    assert res["from"] == "main" and res["to"] == "twin"
    assert res["sessions"] == 2
    assert res["cronJobs"] == 1
    assert res["objects"] >= 3  # MEMORY.md, notes/trip.md, the work session's archive
    assert res["items"] > res["sessions"]
    # the twin remembers what main remembers
    memory = rpc.call("workspace.read", {"path": "MEMORY.md", "agentId": "twin"})
    assert memory["content"] == MEMORY.decode()
    assert rpc.call("workspace.read", {"path": "notes/trip.md", "agentId": "twin"})["content"] == "Lisbon in May\n"
    history = rpc.call("session.preview", {"sessionKey": "agent:twin:main"})
    assert text_of(history) == ["What is my cat called?", "Noted."]
    assert text_of(rpc.call("session.preview", {"sessionKey": "agent:twin:work"})) == ["new work"]
    # its own cron job: a new id, its agent the twin
    jobs = rpc.call("cron.list", {"agentId": "twin", "includeDisabled": True})["jobs"]
    assert [j["name"] for j in jobs] == ["morning"]
    assert jobs[0]["id"] != job_id
    assert [j["id"] for j in rpc.call("cron.list", {"agentId": "main", "includeDisabled": True})["jobs"]] == [job_id]
    # configured beside main, which keeps its heartbeat
    listed = rpc.call("config.get", {"path": "agents.list"})
    assert [e["id"] for e in listed["value"]] == ["main", "twin"]
    assert gateway.config.effective()["apiKeys"]["anthropic"] == SECRET  # the secret stays where it was

    after_items, after_objects = snapshot(gateway)
    # nothing of main or other changed, item by item and object by object; everything new is the twin's
    for key, item in before_items.items():
        if key == keys.CONFIG:
            continue
        assert after_items.get(key) == item, key
    for key, body in before_objects.items():
        assert after_objects.get(key) == body, key
    new_items = [k for k in after_items if k not in before_items]
    new_objects = [k for k in after_objects if k not in before_objects]
    assert new_items and new_objects
    twin_job = jobs[0]["id"]
    assert not [k for k in new_items if not belongs_to("twin", k) and twin_job not in "#".join(k)], new_items
    assert all(k.startswith("agents/twin/") or "agent:twin:" in k for k in new_objects), new_objects


def test_agents_are_listed_with_their_sessions(gateway: Any) -> None:
    populate(gateway)
    rpc = admin(gateway)
    listed = {a["id"]: a for a in rpc.call("agents.list")["agents"]}
    assert set(listed) == {"main", "other"}
    assert listed["main"]["default"] is True and listed["other"]["default"] is False
    assert listed["main"]["sessions"] == 2 and listed["other"]["sessions"] == 1
    assert isinstance(listed["main"]["lastActiveAt"], int)

    rpc.call("agents.clone", {"from": "main", "to": "twin"})
    after = {a["id"]: a for a in rpc.call("agents.list")["agents"]}
    assert list(after)[:2] == ["main", "twin"]  # the default first, then the configured ones
    assert after["twin"]["sessions"] == 2 and after["twin"]["default"] is False


def test_refusals(gateway: Any) -> None:
    populate(gateway)
    rpc = admin(gateway)
    assert rpc.error("agents.clone", {"from": "nobody", "to": "twin"})["code"] == 404
    for bad in ({"from": "main"}, {"to": "twin"}, {"from": "main", "to": "../etc"}, {"from": "main", "to": "Tw in"}):
        assert rpc.error("agents.clone", bad)["code"] == 400, bad
    assert rpc.error("agents.clone", {"from": "main", "to": "main"})["code"] == 400
    err = rpc.error("agents.clone", {"from": "main", "to": "other"})
    assert err["code"] == 409 and "other" in err["message"]
    assert rpc.call("workspace.read", {"path": "MEMORY.md", "agentId": "other"})["content"] == "other's memory\n"


def test_replace_puts_a_fresh_copy_in_place_of_the_agent(gateway: Any) -> None:
    populate(gateway)
    rpc = admin(gateway)
    rpc.call("agents.clone", {"from": "main", "to": "twin"})
    rpc.call("workspace.write", {"path": "scratch.md", "content": "the twin's own\n", "agentId": "twin"})
    assert rpc.error("agents.clone", {"from": "main", "to": "twin"})["code"] == 409

    res = rpc.call("agents.clone", {"from": "main", "to": "twin", "replace": True})

    assert res["to"] == "twin" and res["sessions"] == 2
    files = rpc.call("workspace.list", {"agentId": "twin"})
    assert "scratch.md" not in str(files)
    assert rpc.call("workspace.read", {"path": "MEMORY.md", "agentId": "twin"})["content"] == MEMORY.decode()
    assert [e["id"] for e in rpc.call("config.get", {"path": "agents.list"})["value"]] == ["main", "twin"]
    assert len(rpc.call("cron.list", {"agentId": "twin", "includeDisabled": True})["jobs"]) == 1


def test_a_clone_on_aws_stays_within_the_dispatchers_actions(services: Any) -> None:
    """Every DynamoDB and S3 call of a clone and of a clone that replaces (deletes) is one the template grants the
    functions that dispatch methods (the socket's and the HTTP API's)."""
    from tests.functional.test_function_actions import granted, recorded

    populate(services)
    rpc = admin(services)
    with recorded(services) as made:
        rpc.call("agents.clone", {"from": "main", "to": "twin"})
        rpc.call("agents.clone", {"from": "main", "to": "twin", "replace": True})
        rpc.call("agents.list")
    assert {"dynamodb:Scan", "dynamodb:BatchWriteItem", "s3:PutObject", "s3:DeleteObject"} <= made, made
    for function in ("WsMessageFunction", "RestApiFunction"):
        assert made <= granted(function), made - granted(function)


def test_the_clone_gets_the_originals_settings_but_not_its_bindings(gateway: Any) -> None:
    populate(gateway)
    rpc = admin(gateway)
    entry = {"id": "other", "default": False, "heartbeat": {"every": "2h"}, "spend": {"limits": {"daily": 3}}}
    rpc.call("config.set", {"path": "agents.list", "value": [{"id": "main", "default": True}, entry]})
    bindings = [{"agentId": "other", "match": {"channel": "telegram", "accountId": "default"}}]
    rpc.call("config.set", {"path": "agents.bindings", "value": bindings})

    rpc.call("agents.clone", {"from": "other", "to": "copy"})

    listed = rpc.call("config.get", {"path": "agents.list"})["value"]
    assert listed == [
        {"id": "main", "default": True},
        entry,
        {"id": "copy", "heartbeat": {"every": "2h"}, "spend": {"limits": {"daily": 3}}},
    ]
    assert rpc.call("config.get", {"path": "agents.bindings"})["value"] == bindings  # no traffic moves to the copy
    assert rpc.call("workspace.read", {"path": "MEMORY.md", "agentId": "copy"})["content"] == "other's memory\n"


def test_replacing_the_default_agent_keeps_it_the_default(gateway: Any) -> None:
    populate(gateway)
    rpc = admin(gateway)
    rpc.call("config.set", {"path": "agents.list", "value": [{"id": "other"}, {"id": "main", "default": True}]})

    rpc.call("agents.clone", {"from": "other", "to": "main", "replace": True})

    assert rpc.call("config.get", {"path": "agents.list"})["value"] == [
        {"id": "other"},
        {"id": "main", "default": True},
    ]
    assert rpc.call("workspace.read", {"path": "MEMORY.md", "agentId": "main"})["content"] == "other's memory\n"
    listed = {a["id"]: a for a in rpc.call("agents.list")["agents"]}
    assert listed["main"]["default"] is True and listed["main"]["sessions"] == 1
