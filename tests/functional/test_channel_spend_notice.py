"""A channel message that a USD spend limit refuses is not run: the conversation hears the limit's sentence once per
period (remembered in the table until the period ends), not once per message (channels over moto, a channel
socket). The refusal is the engine's 429 `spend limit reached ({period}: ${used} / ${limit})`."""

from __future__ import annotations

from typing import Any

import pytest
from orbital.agent import runs
from orbital.domain import spend_words
from orbital.errors import RpcError
from orbital.store import keys

from tests.functional.test_channels import inbound, texts
from tests.support.fake_llm import FakeLLM

BOB = {"kind": "dm", "id": "+15550002", "name": "Bob"}


class _Refused(RpcError):
    """The engine's refusal as the contract has it: a 429 with `period`, `used` and `limit`."""

    code = 429

    def __init__(self, period: str, used: float, limit: float) -> None:
        self.period, self.used, self.limit = period, used, limit
        super().__init__(f"spend limit reached ({period}: ${used:.2f} / ${limit:.2f})", retryable=False)


@pytest.fixture
def bridge(agent: Any, connect: Any) -> Any:
    agent.call("config.set", {"path": "channels.test", "value": {"dmPolicy": "open"}})
    return connect("channel", "bridge", channel="test")


@pytest.fixture
def refused(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []

    def refuse(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        raise _Refused("daily", 4.98, 5.0)

    monkeypatch.setattr(runs, "submit", refuse)
    return calls


def test_the_conversation_hears_the_limit_once_per_period(
    agent: Any, bridge: Any, sender: Any, llm: FakeLLM, services: Any, refused: list[int]
) -> None:
    first = bridge.call("channel.inbound", inbound("m1", "hello"))
    second = bridge.call("channel.inbound", inbound("m2", "hello again"))
    assert first == {
        "sessionKey": "agent:main:main",
        "status": "refused",
        "error": "spend limit reached (daily: $4.98 / $5.00)",
        "notified": True,
    }
    assert second["status"] == "refused" and second["notified"] is False
    assert texts(sender, bridge) == ["spend limit reached (daily: $4.98 / $5.00)"]  # once, not per message
    assert len(refused) == 2 and llm.requests == []
    assert services.table.get(keys.inbound_seen("test", "bridge", "m2")) is not None  # handled: not delivered again
    period = spend_words.notice_period("daily", services.now_ms(), spend_words.time_zone(None), None)
    told = services.table.get(keys.spend_notice("agent:main:main", period.name))
    assert told is not None and told.ttl == period.ends_at_s  # forgotten when the day ends


def test_each_conversation_hears_it_and_a_new_period_is_told_again(
    agent: Any, bridge: Any, sender: Any, services: Any, refused: list[int]
) -> None:
    agent.call("config.set", {"path": "session.dmScope", "value": "per-peer"})
    bridge.call("channel.inbound", inbound("m1", "hello"))
    bridge.call("channel.inbound", inbound("m2", "hello", peer=BOB))
    assert texts(sender, bridge) == ["spend limit reached (daily: $4.98 / $5.00)"] * 2
    period = spend_words.notice_period("daily", services.now_ms(), spend_words.time_zone(None), None)
    for item in services.table.query(keys.spend_notice("agent:main:dm:+15550001", "")[0]):
        services.table.delete((item.pk, item.sk))  # what the TTL does when the day ends
    assert period.name.startswith("daily:")
    bridge.call("channel.inbound", inbound("m3", "hello"))
    assert texts(sender, bridge) == ["spend limit reached (daily: $4.98 / $5.00)"] * 3
