"""Channels over moto with real agent runs: a channel-mode socket sends `channel.inbound`, the reply comes back as
`channel.outbound` (spec §12, fixes F7 and F16); unknown senders pair first; repeated deliveries run once; slash
commands and directives are answered on the channel; control calls round-trip through the channel's socket."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from orbital.store import keys

from tests.conftest import wait_for
from tests.support.fake_llm import FakeLLM, error, reply

ANN = {"kind": "dm", "id": "+15550001", "name": "Ann"}


def inbound(message_id: str, text: str, peer: dict[str, Any] = ANN, **extra: Any) -> dict[str, Any]:
    return {
        "channel": "test",
        "accountId": "bridge",
        "peer": peer,
        "sender": {"id": peer["id"], "name": peer.get("name")},
        "message": {"id": message_id, "text": text},
        **extra,
    }


def outbound(sender: Any, socket: Any) -> list[dict[str, Any]]:
    return [f["payload"] for f in sender.frames_to(socket.connection_id) if f.get("event") == "channel.outbound"]


def texts(sender: Any, socket: Any) -> list[str]:
    return [p["message"]["text"] for p in outbound(sender, socket)]


@pytest.fixture
def bridge(agent: Any, connect: Any) -> Any:
    """A channel socket ("test", account "bridge") whose senders are allowed."""
    agent.call("config.set", {"path": "channels.test", "value": {"dmPolicy": "open"}})
    return connect("channel", "bridge", channel="test")


def test_a_message_is_answered_on_the_channel(agent: Any, bridge: Any, sender: Any, llm: FakeLLM) -> None:
    llm.script(reply("Hi Ann!"))
    started = bridge.call("channel.inbound", inbound("m1", "hello"))
    assert started["status"] == "started" and started["sessionKey"] == "agent:main:main"
    sent = wait_for(lambda: outbound(sender, bridge))
    assert sent == [
        {
            "channel": "test",
            "accountId": "bridge",
            "peer": ANN,
            "sessionKey": "agent:main:main",
            "message": {"text": "Hi Ann!", "replyToId": "m1"},
        }
    ]
    typing = [f["payload"] for f in sender.frames_to(bridge.connection_id) if f.get("event") == "channel.typing"]
    assert typing[0]["typing"] is True and typing[-1]["typing"] is False
    prompt = llm.requests[0].body["messages"][-1]["content"]
    assert prompt.startswith("[test · ") and prompt.endswith("hello")
    last = agent.call("channels.list", {})["channels"]
    assert last[0]["channel"] == "test" and last[0].get("lastMessageAt")


def test_an_unknown_sender_pairs_first(agent: Any, connect: Any, sender: Any, llm: FakeLLM) -> None:
    socket = connect("channel", "bridge", channel="test")  # no dmPolicy: pairing (F7)
    pending = socket.call("channel.inbound", inbound("m1", "hi, it's Ann"))
    assert pending == {"status": "pending_pairing", "senderId": "+15550001"}
    again = socket.call("channel.inbound", inbound("m2", "hello?"))
    assert again["status"] == "pending_pairing"
    assert texts(sender, socket) == ["Your message has been received. Awaiting approval from the owner."]
    assert llm.requests == []
    (pair,) = agent.call("pair.list", {})["pairs"].values()
    assert pair["senderId"] == "+15550001" and pair["firstMessage"] == "hi, it's Ann"

    agent.call("pair.approve", {"channel": "test", "senderId": "+15550001"})
    wait_for(lambda: "You're now connected! Feel free to send me a message." in texts(sender, socket))
    llm.script(reply("Welcome, Ann."))
    assert socket.call("channel.inbound", inbound("m3", "hello again"))["status"] == "started"
    wait_for(lambda: "Welcome, Ann." in texts(sender, socket))


@pytest.mark.parametrize("channel", ["discord", "telegram", "whatsapp", "some-new-messenger"])
def test_an_unknown_sender_never_reaches_the_agent_by_default(
    agent: Any, connect: Any, sender: Any, llm: FakeLLM, services: Any, channel: str
) -> None:
    """No channel is open by default (fix F7), whatever its name: the sender is held as a pairing request."""
    socket = connect("channel", "bridge", channel=channel)
    held = socket.call("channel.inbound", {**inbound("m1", "let me in"), "channel": channel})
    assert held == {"status": "pending_pairing", "senderId": "+15550001"}
    assert llm.requests == [] and services.sessions.list_registry() == []
    (pair,) = agent.call("pair.list", {})["pairs"].values()
    assert (pair["channel"], pair["firstMessage"]) == (channel, "let me in")


@pytest.mark.parametrize("channel", ["discord", "some-new-messenger"])
def test_an_owner_opened_channel_lets_unknown_senders_in(
    agent: Any, connect: Any, sender: Any, llm: FakeLLM, channel: str
) -> None:
    agent.call("config.set", {"path": f"channels.{channel}.dmPolicy", "value": "open"})
    socket = connect("channel", "bridge", channel=channel)
    llm.script(reply("hello stranger"))
    assert socket.call("channel.inbound", {**inbound("m1", "hi"), "channel": channel})["status"] == "started"
    wait_for(lambda: "hello stranger" in texts(sender, socket))


@pytest.mark.atomic_table
def test_a_repeated_delivery_runs_once(agent: Any, bridge: Any, sender: Any, llm: FakeLLM) -> None:
    llm.script(reply("once"))
    results: list[dict[str, Any]] = []
    barrier = threading.Barrier(3)

    def deliver() -> None:
        barrier.wait()
        results.append(bridge.call("channel.inbound", inbound("same-id", "hello")))

    threads = [threading.Thread(target=deliver) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(r["status"] for r in results) == ["duplicate", "duplicate", "started"]
    wait_for(lambda: texts(sender, bridge) == ["once"])
    assert len(llm.requests) == 1


def test_a_message_that_could_not_be_processed_can_be_delivered_again(
    agent: Any, bridge: Any, sender: Any, llm: FakeLLM, services: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orbital.agent import runs

    real_submit = runs.submit

    def unavailable(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the table is throttled")

    monkeypatch.setattr(runs, "submit", unavailable)
    failed = bridge.frame("channel.inbound", inbound("m1", "hello"))
    assert failed is not None and not failed["ok"]
    assert services.table.get(keys.inbound_seen("test", "bridge", "m1")) is None  # not marked as received
    assert texts(sender, bridge) == ["Sorry, I couldn't start on that: the table is throttled"]
    monkeypatch.setattr(runs, "submit", real_submit)
    llm.script(reply("got it this time"))
    assert bridge.call("channel.inbound", inbound("m1", "hello"))["status"] == "started"
    wait_for(lambda: "got it this time" in texts(sender, bridge))


def test_a_failed_run_tells_the_sender(agent: Any, bridge: Any, sender: Any, llm: FakeLLM) -> None:
    llm.script(error(401, "invalid x-api-key"))
    bridge.call("channel.inbound", inbound("m1", "hello"))
    sent = wait_for(lambda: texts(sender, bridge))
    assert sent[0].startswith("Sorry, I couldn't finish that: ")  # F16: never left waiting


def test_slash_commands_and_directives_are_answered_on_the_channel(
    agent: Any, bridge: Any, sender: Any, llm: FakeLLM
) -> None:
    status = bridge.call("channel.inbound", inbound("c1", "/status"))
    assert status["sessionKey"] == "agent:main:main"
    wait_for(lambda: texts(sender, bridge))
    assert "gpt-test" in texts(sender, bridge)[0]
    bridge.call("channel.inbound", inbound("c2", "/think high"))
    wait_for(lambda: len(texts(sender, bridge)) == 2)
    assert "high" in texts(sender, bridge)[1].lower()
    assert llm.requests == []  # neither reached the model
    llm.script(reply("thinking hard"))
    assert bridge.call("channel.inbound", inbound("c3", "what is 2+2"))["status"] == "started"
    wait_for(lambda: "thinking hard" in texts(sender, bridge))


def test_groups_can_require_a_mention(agent: Any, bridge: Any, sender: Any, llm: FakeLLM) -> None:
    agent.call("config.set", {"path": "channels.test", "value": {"dmPolicy": "open", "requireMention": True}})
    group = {"kind": "group", "id": "family"}
    ignored = bridge.call("channel.inbound", inbound("g1", "dinner at 7", peer=group))
    assert ignored == {"status": "ignored", "reason": "not mentioned"}
    llm.script(reply("Noted."))
    started = bridge.call("channel.inbound", inbound("g2", "@bot remind me", peer=group, wasMentioned=True))
    assert started["status"] == "started" and started["sessionKey"] != "agent:main:main"
    wait_for(lambda: "Noted." in texts(sender, bridge))


def test_bad_inbound_params_get_a_clear_error(bridge: Any) -> None:
    err = bridge.error("channel.inbound", {"channel": "test", "accountId": "bridge", "peer": {"kind": "dm"}})
    assert err["code"] == 400 and err["message"] == "channel, accountId, peer, and message required"


def test_control_goes_through_the_channel_socket(agent: Any, bridge: Any, sender: Any) -> None:
    pending = agent.frame("channel.login", {"channel": "test", "accountId": "bridge", "force": True})
    assert pending is None  # answered when the channel answers
    control = wait_for(
        lambda: [f["payload"] for f in sender.frames_to(bridge.connection_id) if f.get("event") == "channel.control"]
    )[0]
    assert control["action"] == "login" and control["force"] is True
    bridge.call(
        "channel.control.result", {"callId": control["callId"], "ok": True, "result": {"message": "scan the code"}}
    )
    answer = wait_for(
        lambda: [f for f in sender.frames_to(agent.connection_id) if f.get("type") == "res" and f.get("payload")]
    )[-1]
    assert answer["ok"] and answer["payload"]["message"] == "scan the code"
    assert answer["payload"]["channel"] == "test"


def test_start_config_reaches_only_its_bridge_and_is_never_logged(
    agent: Any, bridge: Any, connect: Any, sender: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """`channel.start {config}` carries the bridge's own settings (its credentials too): the owner gives them for that
    bridge, so they go to that socket's `channel.control` event, and nowhere else: no other socket, no log record."""
    token = "xoxb-bridge-TOKEN-0123456789abcdef"
    connect("channel", "other", channel="elsewhere")
    caplog.set_level("DEBUG")
    pending = agent.frame("channel.start", {"channel": "test", "accountId": "bridge", "config": {"botToken": token}})
    assert pending is None
    control = wait_for(
        lambda: [f["payload"] for f in sender.frames_to(bridge.connection_id) if f.get("event") == "channel.control"]
    )[0]
    assert control["action"] == "start" and control["config"] == {"botToken": token}
    bridge.call("channel.control.result", {"callId": control["callId"], "ok": True, "result": {}})
    wait_for(lambda: [f for f in sender.frames_to(agent.connection_id) if f.get("type") == "res"])
    elsewhere = [frame for conn, frame in sender.posts if conn != bridge.connection_id]
    assert elsewhere and token not in json.dumps(elsewhere)
    assert token not in caplog.text
    assert all(token not in str(record.args) for record in caplog.records)


def test_control_fails_when_the_channel_socket_leaves(agent: Any, bridge: Any, sender: Any, services: Any) -> None:
    from orbital.ports import lifecycle

    agent.frame("channel.stop", {"channel": "test", "accountId": "bridge"})
    wait_for(lambda: [f for f in sender.frames_to(bridge.connection_id) if f.get("event") == "channel.control"])
    lifecycle.disconnect(services, bridge.connection_id)  # what $disconnect does
    answer = wait_for(
        lambda: [f for f in sender.frames_to(agent.connection_id) if f.get("type") == "res" and not f.get("ok")],
        timeout=15,
    )[-1]
    assert answer["error"]["code"] == 503 and "Channel disconnected: test:bridge" in answer["error"]["message"]


def test_control_of_an_unknown_channel(agent: Any) -> None:
    err = agent.error("channel.start", {"channel": "nowhere"})
    assert err["code"] == 404 and err["message"] == "Unknown channel: nowhere"


def test_a_delivery_cut_off_half_way_is_processed_when_it_comes_again(
    agent: Any, bridge: Any, sender: Any, llm: FakeLLM, services: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orbital.channels import inbound as pipeline

    # a first delivery took the message and was killed before it finished (a Lambda timeout): its lease stands
    assert pipeline._claim(services, "test", "bridge", "m9") is None
    mark = services.table.get(keys.inbound_seen("test", "bridge", "m9"))
    lease_until = mark.attrs["lu"]
    repeat = bridge.call("channel.inbound", inbound("m9", "are you there?"))
    assert repeat == {"status": "duplicate", "messageId": "m9", "processing": True}
    assert llm.requests == []
    # once the lease has run out, the platform's next retry gets through, and only then is the mark final
    monkeypatch.setattr(services, "now_ms", lambda: lease_until + 1)
    llm.script(reply("yes, here"))
    assert bridge.call("channel.inbound", inbound("m9", "are you there?"))["status"] == "started"
    wait_for(lambda: "yes, here" in texts(sender, bridge), timeout=30)
    assert bridge.call("channel.inbound", inbound("m9", "are you there?")) == {"status": "duplicate", "messageId": "m9"}


def test_stop_from_the_channel_answers_once(agent: Any, bridge: Any, sender: Any, llm: FakeLLM) -> None:
    from tests.support.fake_llm import hang

    llm.script(hang(max_s=20))
    bridge.call("channel.inbound", inbound("s1", "write me an essay"))
    llm.wait_for_requests(1)
    bridge.call("channel.inbound", inbound("s2", "/stop"))
    wait_for(lambda: texts(sender, bridge), timeout=30)
    llm.release()
    (answer,) = texts(sender, bridge)
    assert "stop" in answer.lower() and not answer.startswith("Sorry")


def test_internal_errors_are_not_shown_to_the_sender(agent: Any, bridge: Any, sender: Any, llm: FakeLLM) -> None:
    llm.script(error(400, "AccessDenied for arn:aws:iam::123456789012:role/orbital-agent"))
    bridge.call("channel.inbound", inbound("e1", "hello"))
    (note,) = wait_for(lambda: texts(sender, bridge), timeout=30)
    assert note == "Sorry, I couldn't finish that: something went wrong on the gateway"


def test_a_run_that_died_is_reported_to_its_sender_when_the_session_is_taken_over(
    agent: Any, bridge: Any, sender: Any, llm: FakeLLM, services: Any
) -> None:
    key = "agent:main:main"
    dead = {
        "runId": "dead-run",
        "execution": "never-started",
        "startedAt": 0,  # claimed long ago
        "leaseUntil": 0,
        "deliver": {"kind": "chat", "channel": "test", "accountId": "bridge", "peer": ANN, "replyToId": "old"},
    }

    def plant(meta: dict[str, Any]) -> bool:
        meta["currentRun"] = dead
        return True

    services.sessions.update_meta(key, plant, now=services.now_ms())
    llm.script(reply("fresh answer"))
    assert bridge.call("channel.inbound", inbound("d1", "hello again"))["status"] == "started"
    wait_for(lambda: "fresh answer" in texts(sender, bridge), timeout=30)
    assert "Sorry, I couldn't finish that: Run ended unexpectedly" in texts(sender, bridge)
