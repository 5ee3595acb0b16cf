"""A channel message that a USD spend limit refuses is not run: the conversation hears the limit's sentence once per
period (remembered in the table until the period ends), not once per message (channels over moto, a channel
socket, the engine's own refusal: the scripted model priced at a dollar a token under a $5 daily cap)."""

from __future__ import annotations

import json
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


def test_a_telegram_chat_hears_it_once_and_the_webhook_does_not_ask_again(
    agent: Any, refused: str, services: Any, llm: FakeLLM
) -> None:
    """Through the real webhook and the fake Bot API: three messages over the cap, one reply; each update is
    answered 200 (Telegram must not deliver a refused message again)."""
    from orbital.channels import telegram
    from orbital.rest.app import create_app
    from orbital.runtime.services import use_services
    from starlette.testclient import TestClient

    from tests.functional.test_telegram_webhook import HEADER, HOOK, SECRET
    from tests.support import fake_telegram as ft
    from tests.support.fake_telegram import TOKEN, FakeTelegram

    with FakeTelegram() as tg:
        telegram._bot_users.clear()
        services.config.set_path("channels.telegram.apiBaseUrl", tg.base_url)
        services.config.set_path("channels.telegram.accounts.main", {"botToken": TOKEN, "webhookSecret": SECRET})
        services.config.set_path("channels.telegram.dmPolicy", "open")
        use_services(services)
        try:
            with TestClient(create_app()) as http:
                for message_id in (51, 52, 53):
                    update = json.dumps(ft.private_text("hello", message_id=message_id)).encode()
                    answered = http.post(
                        HOOK, content=update, headers={"Content-Type": "application/json", HEADER: SECRET}
                    )
                    assert answered.status_code == 200
        finally:
            use_services(None)
        replies = tg.calls_to("sendMessage")
    assert [(c.params["chat_id"], c.params["text"]) for c in replies] == [(1111, SENTENCE)]
    assert replies[0].params["reply_parameters"]["message_id"] == 51
    assert llm.requests == []
