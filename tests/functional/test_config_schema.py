"""Settings that say when they are wrong, through the real dispatcher: `config.set` refuses a wrong type, a value
out of range and a model of an unknown provider with a 400 naming the path, what it expected and what it got, and
stores nothing; a key the gateway does not read is stored with a `warning`; `config.get` of an empty path says
`exists: false`; `/model` refuses an unknown provider."""

from __future__ import annotations

import json
from typing import Any

import pytest
from orbital.domain import config_sections


@pytest.fixture
def admin(connect: Any) -> Any:
    return connect("client", "admin")


def refused(client: Any, params: dict[str, Any]) -> dict[str, Any]:
    res = client.frame("config.set", params)
    assert res is not None and res["ok"] is False, res
    error: dict[str, Any] = res["error"]
    assert error["code"] == 400
    return error


@pytest.mark.parametrize(
    ("path", "value", "expected", "got"),
    [
        ("timeouts.toolMs", "fast", "integer ≥ 1000", '"fast"'),
        ("timeouts.toolMs", -5, "integer ≥ 1000", "-5"),
        ("timeouts.llmMs", True, "integer ≥ 1000", "true"),
        ("session.dmScope", "everyone", "one of `main`", '"everyone"'),
        ("session.defaultResetPolicy.atHour", 24, "integer from 0 to 23", "24"),
        ("userTimezone", "Mars/Olympus", "IANA time zone", '"Mars/Olympus"'),
        ("budgets.daily", -1, "integer ≥ 0", "-1"),
        ("compaction.enabled", "yes", "boolean", '"yes"'),
        ("agents.defaultHeartbeat.every", "1d", "duration", '"1d"'),
        ("channels.whatsapp.dmPolicy", "anyone", "one of `open`, `allowlist`, `pairing`", '"anyone"'),
        ("model", "bogus", "`provider/model-id` or {provider, id}", '"bogus"'),
        ("model", {"provider": "nosuchprovider", "id": "foo"}, "a known provider", '"nosuchprovider"'),
        ("model", "nosuchprovider/foo", "a known provider", '"nosuchprovider"'),
        ("model.provider", "nosuchprovider", "a known provider", '"nosuchprovider"'),
        ("model.id", 5, "string", "5"),
    ],
)
def test_a_wrong_value_is_refused_naming_path_expectation_and_value_and_nothing_is_stored(
    admin: Any, services: Any, path: str, value: Any, expected: str, got: str
) -> None:
    before = services.config.overrides()
    error = refused(admin, {"path": path, "value": value})
    [problem] = error["details"]["problems"]
    assert problem["path"].startswith(path.split(".")[0])
    assert expected in problem["expected"] and problem["got"] == got
    assert problem["path"] in error["message"] and expected in error["message"] and got in error["message"]
    assert services.config.overrides() == before
    assert admin.call("config.get", {"path": path}) != {"path": path, "value": value}


def test_a_whole_subtree_is_checked_key_by_key(admin: Any, services: Any) -> None:
    error = refused(admin, {"path": "timeouts", "value": {"toolMs": "fast", "llmMs": 500, "logsMs": 2000}})
    assert {p["path"] for p in error["details"]["problems"]} == {"timeouts.toolMs", "timeouts.llmMs"}
    assert "timeouts" not in services.config.overrides()
    assert admin.call("config.get", {"path": "timeouts.toolMs"})["value"] == 60000


def test_valid_values_are_stored_and_a_model_in_provider_slash_id_form_becomes_an_object(admin: Any) -> None:
    assert admin.call("config.set", {"path": "timeouts.toolMs", "value": 5000}) == {
        "ok": True,
        "path": "timeouts.toolMs",
    }
    assert admin.call("config.set", {"path": "model", "value": "openai/gpt-5"}) == {"ok": True, "path": "model"}
    assert admin.call("config.get", {"path": "model"})["value"] == {"provider": "openai", "id": "gpt-5"}
    # a provider of its own is a known one once its endpoint is configured
    refused(admin, {"path": "model", "value": "relay/some-model"})
    admin.call("config.set", {"path": "providers.relay.baseUrl", "value": "https://llm.example.com/v1"})
    admin.call("config.set", {"path": "model", "value": "relay/some-model"})
    assert admin.call("config.get", {"path": "model"})["value"] == {"provider": "relay", "id": "some-model"}
    # the defaults themselves pass, and so does deleting back to them
    admin.call("config.set", {"path": "model"})
    assert admin.call("config.get", {"path": "model.provider"})["value"] == "anthropic"


def test_a_value_stored_before_elsewhere_does_not_refuse_an_unrelated_write(admin: Any, services: Any) -> None:
    services.config.save({"timeouts": {"toolMs": "fast"}}, 0)  # written before the schema existed
    assert admin.call("config.set", {"path": "budgets.daily", "value": 1000})["ok"] is True
    refused(admin, {"path": "timeouts.llmMs", "value": "slow"})


def test_a_secret_given_with_the_wrong_type_is_not_echoed(admin: Any) -> None:
    error = refused(admin, {"path": "apiKeys.openai", "value": 123456789})
    assert "123456789" not in json.dumps(error)
    assert error["details"]["problems"] == [{"path": "apiKeys.openai", "expected": "string", "got": "a number"}]


@pytest.mark.parametrize(
    ("path", "value", "warning"),
    [
        ("modle", "openai/gpt-5", "unknown key `modle` — did you mean `model`?"),
        ("timeouts.toolMS", 5000, "unknown key `timeouts.toolMS` — did you mean `timeouts.toolMs`?"),
        ("timeouts", {"toolMs": 5000, "llmMS": 9000}, "unknown key `timeouts.llmMS` — did you mean `timeouts.llmMs`?"),
        ("myClient.theme", "dark", "unknown key `myClient` (stored; this gateway does not read it)"),
    ],
)
def test_an_unknown_key_is_stored_with_a_warning_naming_the_nearest_known_key(
    admin: Any, path: str, value: Any, warning: str
) -> None:
    answer = admin.call("config.set", {"path": path, "value": value})
    assert answer == {"ok": True, "path": path, "warning": warning}
    stored = admin.call("config.get", {"path": path})["value"]
    assert stored == value if not isinstance(value, dict) else value.items() <= stored.items()


def test_known_keys_answer_without_a_warning(admin: Any) -> None:
    for path, value in [
        ("apiKeys.myprovider", "sk-x"),
        ("channels.telegram.accounts.main.botToken", "123:abc"),
        ("skills.entries.gh.enabled", False),
        ("agents.list", [{"id": "ops", "heartbeat": {"every": "1h"}}]),
        ("session.identityLinks", {"ana": ["telegram:1", "discord:2"]}),
    ]:
        assert "warning" not in admin.call("config.set", {"path": path, "value": value}), path


def test_config_get_of_a_path_that_holds_nothing_says_so(admin: Any) -> None:
    assert admin.call("config.get", {"path": "timeouts.nothingHere"}) == {
        "path": "timeouts.nothingHere",
        "exists": False,
    }
    assert admin.call("config.get", {"path": "timeouts.toolMs"}) == {"path": "timeouts.toolMs", "value": 60000}
    admin.call("config.set", {"path": "systemPrompt", "value": None})
    assert admin.call("config.get", {"path": "systemPrompt"}) == {"path": "systemPrompt", "value": None}


def test_slash_model_refuses_an_unknown_provider_and_keeps_the_model(admin: Any) -> None:
    answer = admin.call("chat.send", {"sessionKey": "main", "message": "/model nosuchprovider/foo"})
    assert answer["status"] == "command"
    assert "model.provider" in answer["error"] and "nosuchprovider" in answer["error"]
    assert "a known provider" in answer["error"]
    status = admin.call("chat.send", {"sessionKey": "main", "message": "/model"})
    assert "anthropic/claude-sonnet-4-20250514" in status["response"]
    chosen = admin.call("chat.send", {"sessionKey": "main", "message": "/model openai/gpt-5"})
    assert "error" not in chosen and "openai/gpt-5" in chosen["response"]


def test_the_schema_knows_every_built_in_provider_the_agent_resolves() -> None:
    from orbital.agent.providers import _resolve

    assert set(config_sections.BUILT_IN_PROVIDERS) == set(_resolve.NATIVE) | set(_resolve.COMPATIBLE_DEFAULTS)
    assert config_sections.PROVIDER_ALIASES == _resolve.ALIASES


def test_config_schema_lists_each_key_with_its_range_default_and_meaning(admin: Any) -> None:
    fields = {f["path"]: f for f in admin.call("config.schema", {})["fields"]}
    assert fields["timeouts.toolMs"] == {
        "path": "timeouts.toolMs",
        "type": "integer ≥ 1000",
        "kind": "int",
        "description": "A tool call on a node (ms).",
        "secret": False,
        "default": 60000,
        "min": 1000,
    }
    assert fields["session.dmScope"]["options"] == ["main", "per-peer", "per-channel-peer", "per-account-channel-peer"]
    assert fields["apiKeys"]["secret"] is True and fields["auth.token"]["secret"] is True
    assert "channels.<name>.accounts.<name>.botToken" in fields


def test_an_inline_model_directive_of_an_unknown_provider_is_an_invalid_selector(admin: Any) -> None:
    only = admin.call("chat.send", {"sessionKey": "main", "message": "/m:nosuchprovider/foo"})
    assert only["status"] == "directive-only"
    assert only["directives"] == {"thinkLevel": None, "model": None}
    assert only["response"].startswith("_Invalid model selector: nosuchprovider/foo")


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("apiKeys", "sk-live-SECRETVALUE"),
        ("providers.relay.headers", "Bearer SECRETVALUE"),
        ("auth", "SECRETVALUE-token"),
        ("channels", [{"botToken": "SECRETVALUE"}]),
        ("channels.telegram.accounts", {"main": {"botToken": "SECRETVALUE", "webhookUrl": 5}}),
    ],
)
def test_a_refusal_never_echoes_a_secret_given_in_the_wrong_place(admin: Any, path: str, value: Any) -> None:
    error = refused(admin, {"path": path, "value": value})
    assert "SECRETVALUE" not in json.dumps(error), error
