"""A stop stops (`/stop` on the real `orbital dev`): the model's stream is closed at once, nothing of the stopped run
reaches a client after its terminal event, its tokens are counted, and the transcript says it was stopped."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from orbital.client import GatewayClient

from tests.conftest import wait_for
from tests.support.agent import configure_fake_model, follow_run
from tests.support.fake_llm import FakeLLM, reply

WORDS = " ".join(f"word{i}" for i in range(40))


@pytest.fixture(scope="module")
def llm(gateway: Any) -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        with GatewayClient(gateway.url, timeout=15) as admin:
            admin.connect("client", "stop-admin")
            configure_fake_model(admin, server.base_url)
        yield server


@pytest.fixture
def fake(llm: FakeLLM) -> Iterator[FakeLLM]:
    llm.reset()
    yield llm
    llm.reset()


@pytest.fixture
def user(gateway: Any, fake: FakeLLM) -> Iterator[GatewayClient]:
    with GatewayClient(gateway.url, timeout=20) as c:
        c.connect("client", f"stopper-{uuid.uuid4().hex[:6]}")
        yield c


def first_delta(client: GatewayClient, run_id: str) -> dict[str, Any]:
    while True:
        payload = client.next_event("chat").get("payload") or {}
        if payload.get("runId") == run_id:
            assert payload["state"] == "delta", payload
            return payload


def test_a_stop_closes_the_model_stream_and_nothing_of_the_run_follows_its_end(
    user: GatewayClient, fake: FakeLLM
) -> None:
    key = f"agent:main:stop-{uuid.uuid4().hex[:8]}"
    # the model streams one chunk, then holds the rest until the test lets it go on
    fake.script(reply(WORDS, chunks=20, hold_after=1), reply("after the stop"))
    started = user.call("chat.send", {"sessionKey": key, "message": "write a lot"})
    run_id = started["runId"]
    first_delta(user, run_id)
    stopped = user.call("chat.send", {"sessionKey": key, "message": "/stop"})
    assert stopped["response"] == f"Stopped run {run_id}."
    ended = follow_run(user, run_id)
    assert ended[-1] == {"runId": run_id, "sessionKey": key, "state": "error", "error": "Run cancelled by user"}

    request = fake.requests[0]
    assert request.ended.wait(15), "the model's stream was not closed by the stop"  # it holds it 30 s otherwise
    assert request.disconnected and request.frames_sent < request.frames_total

    # the session goes on; everything the socket got meanwhile is in order, so a late event of the stopped run
    # would have come before the next run's end
    again = user.call("chat.send", {"sessionKey": key, "message": "next"})
    late = []
    while True:
        payload = user.next_event("chat").get("payload") or {}
        if payload.get("runId") == run_id:
            late.append(payload)
        if payload.get("runId") == again["runId"] and payload.get("state") in ("final", "error"):
            assert payload["state"] == "final"
            break
    assert late == []
    assert len(fake.requests) == 2


def budget(client: GatewayClient, key: str) -> dict[str, Any]:
    return dict(client.call("session.stats", {"sessionKey": key})["budget"])


def test_a_stopped_run_counts_what_it_spent(user: GatewayClient, fake: FakeLLM) -> None:
    key = f"agent:main:stop-{uuid.uuid4().hex[:8]}"
    day_before = budget(user, key)["daily"]["used"]
    fake.script(reply(WORDS, chunks=20, hold_after=4))
    started = user.call("chat.send", {"sessionKey": key, "message": "spend, then stop"})
    first_delta(user, started["runId"])
    user.call("chat.send", {"sessionKey": key, "message": "/stop"})
    assert follow_run(user, started["runId"])[-1]["error"] == "Run cancelled by user"
    fake.release()
    assert fake.requests[0].ended.wait(15)
    # the request's input (its system prompt alone is hundreds of tokens) and the text streamed before the stop
    spent = wait_for(lambda: budget(user, key)["session"]["used"] or None)
    assert spent > 100
    assert budget(user, key)["daily"]["used"] - day_before >= spent


def test_a_stream_that_fails_midway_counts_what_it_spent(user: GatewayClient, fake: FakeLLM) -> None:
    key = f"agent:main:stop-{uuid.uuid4().hex[:8]}"
    day_before = budget(user, key)["daily"]["used"]
    fake.script(reply(WORDS, chunks=5, end="error"))
    started = user.call("chat.send", {"sessionKey": key, "message": "spend, then fail"})
    assert follow_run(user, started["runId"])[-1]["state"] == "error"
    spent = budget(user, key)["session"]["used"]
    assert spent > 100
    assert budget(user, key)["daily"]["used"] - day_before >= spent


def test_a_stopped_and_a_failed_run_leave_a_trace_the_model_sees_as_a_turn(user: GatewayClient, fake: FakeLLM) -> None:
    key = f"agent:main:stop-{uuid.uuid4().hex[:8]}"
    fake.script(reply(WORDS, chunks=20, hold_after=1), reply(WORDS, chunks=5, end="error"), reply("at last"))
    started = user.call("chat.send", {"sessionKey": key, "message": "first"})
    first_delta(user, started["runId"])
    user.call("chat.send", {"sessionKey": key, "message": "/stop"})
    follow_run(user, started["runId"])
    fake.release()
    failing = user.call("chat.send", {"sessionKey": key, "message": "second"})
    failed = follow_run(user, failing["runId"])[-1]
    assert failed["state"] == "error"
    answered = user.call("chat.send", {"sessionKey": key, "message": "third"})
    assert follow_run(user, answered["runId"])[-1]["state"] == "final"

    stored = user.call("session.preview", {"sessionKey": key})["messages"]
    assert [(m["role"], m.get("stopReason")) for m in stored] == [
        ("user", None),
        ("assistant", "aborted"),
        ("user", None),
        ("assistant", "error"),
        ("user", None),
        ("assistant", "stop"),
    ]
    assert stored[1]["errorMessage"] == "Run cancelled by user" and stored[1]["runId"] == started["runId"]
    assert stored[3]["errorMessage"] == failed["error"] and stored[3]["runId"] == failing["runId"]
    # the model is shown user and assistant turns in alternation, the traces as short assistant texts
    sent = fake.requests[-1].body["messages"][1:]
    assert [m["role"] for m in sent] == ["user", "assistant", "user", "assistant", "user"]
    assert sent[1]["content"] == "[No reply to this message: Run cancelled by user]"
    assert sent[3]["content"] == f"[No reply to this message: {failed['error']}]"
