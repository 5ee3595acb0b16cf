"""Channels and schedules end to end: `orbital dev` in a subprocess (its scheduler ticking every second), a
channel-mode WebSocket client standing in for a messenger bridge, and the scripted model server on loopback."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from orbital.client import GatewayClient

from tests.conftest import wait_for
from tests.support.agent import configure_fake_model
from tests.support.fake_llm import FakeLLM, reply

PEER = {"kind": "dm", "id": "+15550009", "name": "Sam"}


def last_user_text(request: Any) -> str:
    users = [m for m in request.body["messages"] if m["role"] == "user"]
    content = users[-1]["content"] if users else ""
    return content if isinstance(content, str) else str(content)


@pytest.fixture(scope="module")
def llm(gateway: Any) -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        server.responder = lambda request: reply(f"echo: {last_user_text(request)[-60:]}")
        with GatewayClient(gateway.url, timeout=15) as admin:
            admin.connect("client", "e2e-admin")
            configure_fake_model(admin, server.base_url)
            admin.call("config.set", {"path": "channels.bridge", "value": {"dmPolicy": "open"}})
        yield server


@pytest.fixture
def admin(gateway: Any, llm: FakeLLM) -> Iterator[GatewayClient]:
    with GatewayClient(gateway.url, timeout=20) as c:
        c.connect("client", "e2e-admin-2")
        yield c


@pytest.fixture
def phone(gateway: Any, llm: FakeLLM) -> Iterator[GatewayClient]:
    with GatewayClient(gateway.url, timeout=20) as c:
        c.connect("channel", "phone", client={"channel": "bridge"})
        yield c


def outbound(client: GatewayClient, timeout: float = 20) -> dict[str, Any]:
    return dict(client.next_event("channel.outbound", timeout=timeout)["payload"])


def test_a_bridge_message_is_answered_and_a_cron_job_follows_up(
    admin: GatewayClient, phone: GatewayClient, llm: FakeLLM
) -> None:
    started = phone.call(
        "channel.inbound",
        {"channel": "bridge", "accountId": "phone", "peer": PEER, "message": {"id": "w1", "text": "hi there"}},
    )
    assert started["status"] == "started"
    answer = outbound(phone)
    assert answer["peer"] == PEER and answer["message"]["replyToId"] == "w1"
    assert answer["message"]["text"].startswith("echo: [bridge · ") and answer["message"]["text"].endswith("hi there")

    due = int(time.time() * 1000) + 1500
    job = admin.call(
        "cron.add",
        {
            "name": "stretch",
            "schedule": {"kind": "at", "atMs": due},
            "spec": {"mode": "systemEvent", "text": "remind Sam to stretch"},
        },
    )["job"]
    reminder = outbound(phone, timeout=30)  # the local scheduler ticks every second
    assert reminder["peer"] == PEER and reminder["message"]["replyToId"].startswith(f"cron:{job['id']}:")
    (prompt,) = [last_user_text(r) for r in llm.requests if "remind Sam to stretch" in last_user_text(r)]
    assert prompt.startswith("[cron · ")
    assert "[Your response will be delivered automatically to bridge:+15550009" in prompt
    record = wait_for(lambda: admin.call("cron.runs", {"jobId": job["id"]})["runs"], timeout=20)[0]
    assert record["status"] == "ok" and record["summary"].startswith("echo: ")
    assert record["ts"] >= due


def test_a_repeated_delivery_over_the_socket_is_processed_once(phone: GatewayClient, llm: FakeLLM) -> None:
    params = {"channel": "bridge", "accountId": "phone", "peer": PEER, "message": {"id": "w2", "text": "once"}}
    first = phone.call("channel.inbound", params)
    second = phone.call("channel.inbound", params)
    assert first["status"] == "started" and second == {"status": "duplicate", "messageId": "w2"}
    assert outbound(phone)["message"]["text"].endswith("once")
    # the repeat was refused before anything started: one model request, one reply
    assert sum(last_user_text(r).endswith("once") for r in llm.requests) == 1


def test_bad_inbound_params_get_an_error_frame(phone: GatewayClient) -> None:
    res = phone.request("channel.inbound", {"channel": "bridge", "message": "not an object"})
    assert res["ok"] is False
    assert res["error"]["code"] == 400 and res["error"]["message"] == "channel, accountId, peer, and message required"
