"""Secrets in the configuration through the real dispatcher and a real agent run (fix F6): `config.get` whole, by
path and by a parent path, and the `gsv__ConfigGet` tool, all show "***" for an Authorization header of a provider
and a channel's bot token; writing the mask back keeps what is stored."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.agent import final_of
from tests.support.fake_llm import FakeLLM, call, error, reply

HEADER = "Bearer sk-proj-HEADERSECRET0123456789abcdef"
BOT_TOKEN = "123456789:AAHbotTOKENsecret0123456789abcdefghi"
PROVIDER = {"baseUrl": "https://llm.example.com/v1", "maxTokens": 4096, "headers": {"Authorization": HEADER}}


def configure(client: Any) -> None:
    client.call("config.set", {"path": "providers.relay", "value": PROVIDER})
    client.call("config.set", {"path": "channels.telegram.accounts.main.botToken", "value": BOT_TOKEN})


@pytest.fixture
def admin(connect: Any) -> Any:
    client = connect("client", "admin")
    configure(client)
    return client


def test_config_get_whole_masks_headers_and_channel_tokens(admin: Any) -> None:
    config = admin.call("config.get", {})["config"]
    assert config["providers"]["relay"] == {**PROVIDER, "headers": {"Authorization": "***"}}
    assert config["channels"]["telegram"]["accounts"]["main"]["botToken"] == "***"
    assert HEADER not in json.dumps(config) and BOT_TOKEN not in json.dumps(config)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("providers", {"relay": {**PROVIDER, "headers": {"Authorization": "***"}}}),
        ("providers.relay", {**PROVIDER, "headers": {"Authorization": "***"}}),
        ("providers.relay.headers", {"Authorization": "***"}),
        ("providers.relay.headers.Authorization", "***"),
        ("providers.relay.baseUrl", "https://llm.example.com/v1"),
        ("channels", None),
        ("channels.telegram", {"accounts": {"main": {"botToken": "***"}}}),
        ("channels.telegram.accounts.main.botToken", "***"),
    ],
)
def test_config_get_by_path_and_by_parent_path_masks(admin: Any, path: str, expected: Any) -> None:
    answer = admin.call("config.get", {"path": path})
    assert answer["path"] == path
    assert HEADER not in json.dumps(answer) and BOT_TOKEN not in json.dumps(answer)
    if expected is not None:
        assert answer["value"] == expected


def test_writing_the_mask_back_keeps_the_stored_secrets(admin: Any, services: Any) -> None:
    shown = admin.call("config.get", {"path": "providers.relay"})["value"]
    shown["baseUrl"] = "https://llm2.example.com/v1"
    admin.call("config.set", {"path": "providers.relay", "value": shown})  # a UI saving the form it was shown
    admin.call("config.set", {"path": "providers.relay.headers.Authorization", "value": "***"})
    telegram = admin.call("config.get", {"path": "channels.telegram"})["value"]
    admin.call("config.set", {"path": "channels.telegram", "value": telegram})
    stored = services.config.effective()
    assert stored["providers"]["relay"]["baseUrl"] == "https://llm2.example.com/v1"
    assert stored["providers"]["relay"]["headers"] == {"Authorization": HEADER}
    assert stored["channels"]["telegram"]["accounts"]["main"]["botToken"] == BOT_TOKEN
    admin.call("config.set", {"path": "providers.relay.headers.X-New", "value": "***"})  # nothing stored: not set
    assert services.config.effective()["providers"]["relay"]["headers"] == {"Authorization": HEADER}


def test_the_config_get_tool_masks_whole_and_by_path(agent: Any, sender: Any, llm: FakeLLM) -> None:
    configure(agent)
    paths = ["providers.relay.headers.Authorization", "providers", "channels.telegram.accounts.main"]
    llm.script(
        reply(tool_calls=[call("gsv__ConfigGet", {}), *[call("gsv__ConfigGet", {"path": p}) for p in paths]]),
        reply("done"),
    )
    started = agent.call("chat.send", {"sessionKey": "main", "message": "show me the config"})
    assert final_of(sender, agent.connection_id, started["runId"], timeout=30)["state"] == "final"
    whole, header, providers, account = (
        json.loads(m["content"]) for m in llm.requests[1].body["messages"] if m["role"] == "tool"
    )
    assert whole["config"]["providers"]["relay"]["headers"] == {"Authorization": "***"}
    assert whole["config"]["apiKeys"]["openai"] == "***"
    assert header == {"path": paths[0], "value": "***"}
    assert providers["value"]["relay"]["headers"] == {"Authorization": "***"}
    assert account == {"path": paths[2], "value": {"botToken": "***"}}
    sent = json.dumps([r.body for r in llm.requests])
    assert HEADER not in sent and BOT_TOKEN not in sent and "sk-test-key" not in sent


RELAY_AUTH = "Basic cmVsYXk6aHVudGVyMi1zZWNyZXQtcGFzcw=="


def test_a_failing_model_call_logs_and_sends_no_header_value(
    agent: Any, sender: Any, llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    """The provider's answer echoes the configured Authorization header: neither the log nor any frame (the run's
    `error` event) carries it."""
    agent.call("config.set", {"path": "providers.openai.headers", "value": {"Authorization": RELAY_AUTH}})
    llm.script(error(401, f"the relay refused Authorization: {RELAY_AUTH}"))
    caplog.set_level("INFO")
    started = agent.call("chat.send", {"sessionKey": "main", "message": "hello"})
    final = final_of(sender, agent.connection_id, started["runId"], timeout=30)
    assert final["state"] == "error" and "Authentication failed" in final["error"]
    assert llm.requests[0].header("authorization") == RELAY_AUTH  # the header was sent to the provider
    credentials = RELAY_AUTH.split()[1]
    assert credentials not in caplog.text
    assert credentials not in json.dumps(sender.posts, default=str)
