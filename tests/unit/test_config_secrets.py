"""Which configuration values are secrets (fix F6), and the masked view every read path shows."""

from __future__ import annotations

from typing import Any

import pytest
from orbital.domain import config as cfg

SECRET = [
    "apiKeys.openai",
    "apiKeys.my-llm",
    "apiKeys.openai.nested",
    "auth.token",
    "providers.x.headers.Authorization",
    "providers.x.headers.authorization",
    "providers.openai.headers.X-Team",
    "providers.x.headers.Cookie",
    "providers.x.headers.0",
    "channels.telegram.accounts.default.botToken",
    "channels.telegram.accounts.default.webhookSecret",
    "channels.discord.botToken",
    "channels.discord.token",
    "channels.slack.clientSecret",
    "channels.slack.signing_secret",
    "channels.x.accessToken",
    "channels.x.access_token",
    "channels.x.refresh-token",
    "channels.x.password",
    "channels.x.credentials",
    "channels.x.credentials.user",
    "channels.whatsapp.authDir.cookie",
    "providers.x.apiKey",
    "providers.x.api_key",
    "providers.x.API-Key",
    "providers.x.apikey",
    "providers.x.privateKey",
    "providers.x.private_key",
    "providers.x.secretAccessKey",
    "providers.x.secret",
    "providers.x.secrets",
    "skills.entries.search.apiKey",
    "skills.entries.search.env.GITHUB_TOKEN",
    "agents.list.0.apiKey",
    "transcription.apiKey",
    "anything.Authorization",
    "anything.proxyAuthorization",
    "anything.X-Api-Key",
    "anything.x_api_key",
    "anything.OPENAI_API_KEY",
    "anything.passphrase",
    "anything.passwd",
    "skills.entries.1password.apiKey",
    "skills.entries.1password.env.OP_SERVICE_ACCOUNT_TOKEN",
    "channels.telegram.accounts.bot_token.botToken",
    "providers.secret.headers.X-Id",
]

NOT_SECRET = [
    "apiKeys",
    "auth",
    "providers",
    "providers.x",
    "providers.x.headers",
    "providers.x.baseUrl",
    "providers.x.api",
    "providers.x.maxTokens",
    "providers.x.contextWindow",
    "providers.bedrock.region",
    "model.provider",
    "model.id",
    "timeouts.llmMs",
    "compaction.enabled",
    "compaction.reserveTokens",
    "compaction.keepRecentTokens",
    "compaction.extractMemories",
    "session.defaultBudget.maxTokens",
    "session.mainKey",
    "session.dmScope",
    "session.identityLinks.ann.0",
    "budget.maxTokens",
    "agents.maxIterations",
    "agents.defaultHeartbeat.prompt",
    "agents.list.0.id",
    "channels.discord.dmPolicy",
    "channels.discord.allowFrom.0",
    "channels.discord.requireMention",
    "channels.telegram.accounts.default.webhookUrl",
    "channels.telegram.accounts.default.apiBaseUrl",
    "cron.maxJobs",
    "skills.entries.search.requires.env.0",
    "skills.entries.search.requires.config.0",
    "transcription.provider",
    "transcription.model",
    "userTimezone",
    "x.tokenBudget",
    "x.tokenLimit",
    "x.tokensPerMinute",
    "x.totalTokens",
    "x.inputTokens",
    "x.max_tokens",
    "x.tokens",
    "x.passwordMinLength",
    "x.secretName",
    "x.tokenUrl",
    "x.accessKeyId",
    "x.sessionKey",
    "x.keys",
    "skills.entries.1password",
    "skills.entries.1password.enabled",
    "channels.telegram.accounts.bot_token",
    "channels.telegram.accounts.bot_token.webhookUrl",
    "channels.password-vault.dmPolicy",
    "providers.secret.baseUrl",
    "session.identityLinks.password",
]


@pytest.mark.parametrize("path", SECRET)
def test_secret_paths(path: str) -> None:
    assert cfg.is_secret(path.split("."))


@pytest.mark.parametrize("path", NOT_SECRET)
def test_paths_that_are_not_secret(path: str) -> None:
    assert not cfg.is_secret(path.split("."))


def _paths(node: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            out += _paths(value, (*prefix, str(index)))
    return out


def test_nothing_in_the_default_configuration_is_secret() -> None:
    defaults = cfg.defaults()
    assert [p for p in _paths(defaults) if cfg.is_secret(p)] == []
    assert cfg.masked(defaults) == defaults


STORED = {
    "apiKeys": {"openai": "sk-live-1234567890", "empty": "", "unset": None},
    "auth": {"token": "local-gateway-token"},
    "providers": {
        "x": {
            "baseUrl": "https://llm.example.com/v1",
            "maxTokens": 4096,
            "headers": {"Authorization": "Bearer sk-header-secret", "X-Team": "team-7", "X-Empty": ""},
        }
    },
    "channels": {
        "telegram": {"accounts": {"main": {"botToken": "123:ABC", "webhookUrl": "https://h/w", "webhookSecret": 42}}},
        "x": {"dmPolicy": "pairing", "credentials": {"user": "u", "pass": "p"}, "tokens": ["t"], "password": ["a"]},
    },
    "compaction": {"reserveTokens": 20000},
    "secret": True,
}


def test_masked_replaces_every_set_secret_and_keeps_unset_ones() -> None:
    shown = cfg.masked(STORED)
    assert shown["apiKeys"] == {"openai": "***", "empty": "", "unset": None}
    assert shown["auth"] == {"token": "***"}
    assert shown["providers"]["x"] == {
        "baseUrl": "https://llm.example.com/v1",
        "maxTokens": 4096,
        "headers": {"Authorization": "***", "X-Team": "***", "X-Empty": ""},
    }
    account = shown["channels"]["telegram"]["accounts"]["main"]
    assert account == {"botToken": "***", "webhookUrl": "https://h/w", "webhookSecret": "***"}
    assert shown["channels"]["x"] == {"dmPolicy": "pairing", "credentials": "***", "tokens": ["t"], "password": "***"}
    assert shown["compaction"] == {"reserveTokens": 20000}
    assert shown["secret"] is True  # a flag hides nothing
    assert STORED["apiKeys"]["openai"] == "sk-live-1234567890"  # the stored config is not touched


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("apiKeys", {"openai": "***", "empty": "", "unset": None}),
        ("apiKeys.openai", "***"),
        ("providers", {"x": cfg.masked(STORED)["providers"]["x"]}),
        ("providers.x.headers", {"Authorization": "***", "X-Team": "***", "X-Empty": ""}),
        ("providers.x.headers.Authorization", "***"),
        ("providers.x.baseUrl", "https://llm.example.com/v1"),
        ("channels.telegram.accounts.main.botToken", "***"),
        ("channels.x.credentials", "***"),
        ("channels.x.credentials.user", "***"),
        ("channels.x.password.0", "***"),
        ("compaction.reserveTokens", 20000),
    ],
)
def test_masked_get_masks_a_path_read_as_the_whole_view(path: str, expected: Any) -> None:
    assert cfg.masked_get(STORED, path) == expected


def test_masked_get_of_a_missing_path_is_missing() -> None:
    assert cfg.is_missing(cfg.masked_get(STORED, "providers.y.headers"))
    assert cfg.is_missing(cfg.masked_get(STORED, "providers.x.headers.Authorization.deeper"))


def test_writing_the_mask_back_keeps_the_stored_secret() -> None:
    old = STORED["providers"]["x"]
    new = {
        "baseUrl": "https://other.example.com/v1",
        "headers": {"Authorization": "***", "X-Team": "team-8", "X-New": "***"},
    }
    restored = cfg.restore_masked(new, old, ["providers", "x"])
    assert restored == {
        "baseUrl": "https://other.example.com/v1",
        "headers": {"Authorization": "Bearer sk-header-secret", "X-Team": "team-8"},  # no stored X-New: left out
    }
    assert cfg.restore_masked("***", "sk-live-1234567890", ["apiKeys", "openai"]) == "sk-live-1234567890"
    assert cfg.is_missing(cfg.restore_masked("***", cfg.get_path(STORED, "apiKeys.nope"), ["apiKeys", "nope"]))
    whole = cfg.restore_masked(cfg.masked(STORED), STORED, [])
    assert whole == STORED
    channels = cfg.restore_masked({"x": {"credentials": "***", "password": "***"}}, STORED["channels"], ["channels"])
    assert channels == {"x": {"credentials": {"user": "u", "pass": "p"}, "password": ["a"]}}


def test_the_mask_is_an_ordinary_value_where_nothing_is_secret() -> None:
    prompt = ["agents", "defaultHeartbeat", "prompt"]
    assert cfg.restore_masked("***", "Read HEARTBEAT.md", prompt) == "***"
    assert cfg.restore_masked({"baseUrl": "***"}, {"baseUrl": "https://a"}, ["providers", "x"]) == {"baseUrl": "***"}
