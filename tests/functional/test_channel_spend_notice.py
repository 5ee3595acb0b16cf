"""A channel message that a USD spend limit refuses is not run: the conversation hears the limit's sentence once per
period (remembered in the table until the period ends), not once per message (channels over moto, a channel
socket, the engine's own refusal: the scripted model priced at a dollar a token under a $5 daily cap)."""

from __future__ import annotations

from typing import Any

import pytest
from orbital.domain import spend_words
from orbital.store import keys

from tests.functional.test_channels import inbound, texts
from tests.support.fake_llm import FakeLLM

BOB = {"kind": "dm", "id": "+15550002", "name": "Bob"}
SENTENCE = "spend limit reached (daily: $0.00 / $5.00)"


@pytest.fixture
def bridge(agent: Any, connect: Any) -> Any:
    agent.call("config.set", {"path": "channels.test", "value": {"dmPolicy": "open"}})
    return connect("channel", "bridge", channel="test")


@pytest.fixture
def refused(agent: Any) -> str:
    """The model at a dollar a token, a $5 daily cap: any message is refused before its first call."""
    price = {"inputPerMTok": 1_000_000, "outputPerMTok": 1_000_000}
    agent.call("config.set", {"path": "spend.prices", "value": {"openai/gpt-test": price}})
    agent.call("config.set", {"path": "spend.limits.daily", "value": 5})
    return SENTENCE


def test_the_conversation_hears_the_limit_once_per_period(
    agent: Any, bridge: Any, sender: Any, llm: FakeLLM, services: Any, refused: str
) -> None:
    for message_id in ("m1", "m2", "m3"):  # each is refused with the 429, not worth delivering again
        error = bridge.error("channel.inbound", inbound(message_id, "hello"))
        assert error["code"] == 429 and error["message"] == SENTENCE and error["retryable"] is False
    assert texts(sender, bridge) == [SENTENCE]  # the conversation is told once, not per message
    assert llm.requests == []
    period = spend_words.notice_period("daily", services.now_ms(), spend_words.time_zone(None), None)
    told = services.table.get(keys.spend_notice("agent:main:main", period.name))
    assert told is not None and told.ttl == period.ends_at_s  # forgotten when the day ends


def test_each_conversation_hears_it_and_a_new_period_is_told_again(
    agent: Any, bridge: Any, sender: Any, services: Any, refused: str
) -> None:
    agent.call("config.set", {"path": "session.dmScope", "value": "per-peer"})
    bridge.error("channel.inbound", inbound("m1", "hello"))
    bridge.error("channel.inbound", inbound("m2", "hello", peer=BOB))
    assert texts(sender, bridge) == [SENTENCE] * 2
    period = spend_words.notice_period("daily", services.now_ms(), spend_words.time_zone(None), None)
    for item in services.table.query(keys.spend_notice("agent:main:dm:+15550001", "")[0]):
        services.table.delete((item.pk, item.sk))  # what the TTL does when the day ends
    assert period.name.startswith("daily:")
    bridge.error("channel.inbound", inbound("m3", "hello"))
    assert texts(sender, bridge) == [SENTENCE] * 3
