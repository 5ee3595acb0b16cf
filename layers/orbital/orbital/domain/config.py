"""Configuration: defaults (spec §9.1), deep merge of user overrides, dotted paths, secret masking (fix F6). The
types and ranges of the keys are in `orbital.domain.config_schema`."""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Sequence
from typing import Any

from orbital.domain.ids import normalize_agent_id

MASK = "***"

DEFAULT_HEARTBEAT_PROMPT = (
    "Read HEARTBEAT.md if it exists in your workspace. Follow it strictly. Do not infer or repeat old tasks from "
    "prior chats. If nothing needs attention, reply HEARTBEAT_OK."
)


DEFAULT_UNTRUSTED_TOOLS = ("*__WebFetch", "*__WebSearch", "mcp__*", "*__mcp__*")
"""Tools whose results taint a run unless configured otherwise (`toolApproval.untrustedTools`): web content and MCP
servers (a tool named with an `mcp` segment, `mcp__{server}__{tool}` or `{nodeId}__mcp__{tool}`)."""


def defaults() -> dict[str, Any]:
    """A fresh copy of the default configuration."""
    return {
        "model": {"provider": "anthropic", "id": "claude-sonnet-4-20250514"},
        "apiKeys": {},
        "timeouts": {"llmMs": 300000, "toolMs": 60000, "skillProbeMaxAgeMs": 600000},
        "auth": {},
        "transcription": {"provider": "workers-ai"},
        "channels": {
            "whatsapp": {"dmPolicy": "pairing", "allowFrom": []},
            "discord": {"dmPolicy": "pairing", "allowFrom": []},
        },
        "session": {
            "defaultResetPolicy": {"mode": "daily", "atHour": 4},
            "mainKey": "main",
            "dmScope": "main",
            "identityLinks": {},
        },
        "skills": {"entries": {}},
        "agents": {
            "list": [],
            "bindings": [],
            "defaultHeartbeat": {
                "every": "30m",
                "prompt": DEFAULT_HEARTBEAT_PROMPT,
                "target": "last",
                "activeHours": {"start": "08:00", "end": "23:00"},
            },
        },
        "compaction": {"enabled": True, "reserveTokens": 20000, "keepRecentTokens": 20000, "extractMemories": True},
        "cron": {"enabled": True, "maxJobs": 200, "maxRunsPerJobHistory": 200, "maxConcurrentRuns": 4},
        "userTimezone": "UTC",
        "windie": {"registration": False},
        "toolApproval": {
            "defaultDecision": "allow",
            "rules": [],
            "timeoutMs": 600000,
            "whenTainted": "ask",
            "untrustedTools": list(DEFAULT_UNTRUSTED_TOOLS),
            "safeTools": [],
        },
        "owners": [],
    }


def deep_merge(base: Any, override: Any) -> Any:
    """Objects merge recursively; arrays and primitives replace; None replaces nested values."""
    if override is None:
        return copy.deepcopy(base)
    if isinstance(base, dict) and isinstance(override, dict):
        merged = {k: copy.deepcopy(v) for k, v in base.items()}
        for key, value in override.items():
            if key in merged and isinstance(merged[key], dict) and isinstance(value, dict):
                merged[key] = deep_merge(merged[key], value)
            else:
                merged[key] = copy.deepcopy(value)
        return merged
    return copy.deepcopy(override)


def defaults_with_model(model: str | None) -> dict[str, Any]:
    """The defaults, with `model` (`provider/model-id`, e.g. the deployment's Bedrock default) as the model."""
    base = defaults()
    if model and "/" in model:
        provider, model_id = model.split("/", 1)
        if provider.strip() and model_id.strip():
            base["model"] = {"provider": provider.strip().lower(), "id": model_id.strip()}
    return base


def effective(overrides: dict[str, Any], base: dict[str, Any] | None = None) -> dict[str, Any]:
    result = deep_merge(base if base is not None else defaults(), overrides)
    assert isinstance(result, dict)
    return result


def as_dict(value: Any) -> dict[str, Any]:
    """`value` when it is an object, else an empty one (session meta is unvalidated JSON, and configuration stored
    before `config.set` checked it may hold anything)."""
    return value if isinstance(value, dict) else {}


_MISSING = object()


def split_path(path: str) -> list[str]:
    return path.split(".")


def get_path(root: Any, path: str) -> Any:
    """Walk a dotted path; list segments index arrays. Missing → `_MISSING`."""
    node = root
    for seg in split_path(path):
        if isinstance(node, dict):
            if seg not in node:
                return _MISSING
            node = node[seg]
        elif isinstance(node, list):
            if not seg.isdigit() or int(seg) >= len(node):
                return _MISSING
            node = node[int(seg)]
        else:
            return _MISSING
    return node


def is_missing(value: Any) -> bool:
    return value is _MISSING


def set_path(overrides: dict[str, Any], path: str, value: Any, *, delete: bool = False) -> dict[str, Any]:
    """Return new overrides with `value` at `path` (spec §9.3 semantics: intermediates become objects)."""
    result = copy.deepcopy(overrides)
    segs = split_path(path)
    if len(segs) == 1:
        if delete:
            result.pop(segs[0], None)
        else:
            result[segs[0]] = copy.deepcopy(value)
        return result
    top = result.get(segs[0])
    top = copy.deepcopy(top) if isinstance(top, dict) else {}
    node = top
    for seg in segs[1:-1]:
        child = node.get(seg)
        if not isinstance(child, dict):
            child = {}
            node[seg] = child
        node = child
    if delete:
        node.pop(segs[-1], None)
    else:
        node[segs[-1]] = copy.deepcopy(value)
    result[segs[0]] = top
    result.pop(path, None)  # a legacy flat key literally named with dots
    return result


# --- secrets ----------------------------------------------------------------------------------------------------

# A key names a credential when its last word is one of these (words split at camelCase humps, `_`, `-` and digits,
# compared in lower case; a last word that merely ends with one, as in `bottoken`, counts too), or when it ends with
# "key" after a word that makes it one (`apiKey`, `API_KEY`, `privateKey`, `secretAccessKey`). Plural counters
# ("tokens": `maxTokens`, `reserveTokens`) and words that only start with one (`tokenBudget`) do not.
_CREDENTIAL_WORDS = (
    "token",
    "secret",
    "secrets",
    "password",
    "passwd",
    "passphrase",
    "credential",
    "credentials",
    "cookie",
    "cookies",
    "authorization",
    "apikey",
    "privatekey",
    "secretkey",
    "accesskey",
)
_KEY_QUALIFIERS = frozenset({"api", "private", "secret", "access", "signing", "encryption"})
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
# Where a segment is a name the owner chose (a skill, provider, channel, account, linked person), not a setting's
# key: the skill "1password" is no password. What is configured under such a name is judged as usual.
_NAME_SLOTS = (
    ("skills", "entries"),
    ("providers",),
    ("channels",),
    ("channels", "*", "accounts"),
    ("session", "identityLinks"),
    ("mcp", "servers"),
)


@functools.lru_cache(maxsize=4096)
def _names_a_credential(key: str) -> bool:
    words = [word.lower() for word in _WORD.findall(key)]
    if not words:
        return False
    if words[-1].endswith(_CREDENTIAL_WORDS):
        return True
    return len(words) >= 2 and words[-1] == "key" and words[-2] in _KEY_QUALIFIERS


def _is_name(parents: Sequence[str]) -> bool:
    return any(
        len(parents) == len(slot) and all(want in ("*", seg) for want, seg in zip(slot, parents, strict=True))
        for slot in _NAME_SLOTS
    )


def is_secret(path: Sequence[str]) -> bool:
    """Whether the configuration value at `path` (its segments; list indexes as digits) is a secret. The one rule
    behind every masked read (`config.get`, `gsv__ConfigGet`) and every write of the mask (`restore_masked`):

    - every entry of `apiKeys` (`apiKeys.<provider>`);
    - every value of a `headers` object (`providers.<name>.headers.<Header>`, `mcp.servers.<name>.headers.<Header>`:
      where provider and MCP server credentials go);
    - anything at or under a key that names a credential, anywhere: `auth.token`, `botToken`, `webhookSecret`,
      `clientSecret`, `accessToken`, `apiKey` / `api_key` / `API-Key`, `password`, `privateKey`, `credentials`,
      `Authorization`, `cookie`… — but not counters such as `maxTokens`, `reserveTokens`, `tokenBudget`.

    `apiKeys` and `headers` themselves are not secrets: their keys (provider and header names) stay readable, and
    so do the names of skills, providers, channels, accounts, linked people and MCP servers
    (`skills.entries.1password`, `mcp.servers.my-token`).
    """
    if len(path) >= 2 and path[0] == "apiKeys":
        return True
    last = len(path) - 1
    for index, segment in enumerate(path):
        if index < last and segment.lower() == "headers":
            return True
        if _names_a_credential(segment) and not _is_name(path[:index]):
            return True
    return False


def _mask(value: Any) -> Any:
    """The mask for a set secret of any type; None, "", empty objects and lists, and flags stay as they are
    (nothing to hide, and a UI can tell that it is unset)."""
    if value is None or isinstance(value, bool) or (isinstance(value, str | dict | list) and not value):
        return value
    return MASK


def masked_at(value: Any, path: Sequence[str]) -> Any:
    """`value`, found at `path`, with every secret in it (by `is_secret`) replaced by "***". A new object."""
    if is_secret(path):
        return _mask(value)
    if isinstance(value, dict):
        return {key: masked_at(item, [*path, str(key)]) for key, item in value.items()}
    if isinstance(value, list):
        return [masked_at(item, [*path, str(index)]) for index, item in enumerate(value)]
    return value


def masked(config: dict[str, Any]) -> dict[str, Any]:
    """A copy of the whole configuration with every secret replaced by "***" (fix F6)."""
    result = masked_at(config, [])
    assert isinstance(result, dict)
    return result


def masked_get(config: dict[str, Any], path: str) -> Any:
    """The value at a dotted `path`, masked as in `masked(config)` (also inside a secret object); `_MISSING` when
    there is none."""
    value = get_path(config, path)
    return value if is_missing(value) else masked_at(value, split_path(path))


def restore_masked(new: Any, old: Any, path: Sequence[str]) -> Any:
    """`new`, about to be stored at `path` where `old` is stored (`_MISSING` when nothing is), with the stored secret
    kept wherever a client wrote back the mask it was shown (a UI saving a form), in nested objects and lists too.
    The mask at a secret path where nothing is stored means "not set": it becomes `_MISSING` (left out of objects,
    None in lists). At a path that is not secret, "***" is an ordinary value."""
    if isinstance(new, str) and new == MASK and is_secret(path):
        return old
    if isinstance(new, dict):
        before = old if isinstance(old, dict) else {}
        kept = {key: restore_masked(item, before.get(key, _MISSING), [*path, str(key)]) for key, item in new.items()}
        return {key: item for key, item in kept.items() if not is_missing(item)}
    if isinstance(new, list):
        prior = old if isinstance(old, list) else []
        items = [
            restore_masked(item, prior[index] if index < len(prior) else _MISSING, [*path, str(index)])
            for index, item in enumerate(new)
        ]
        return [None if is_missing(item) else item for item in items]
    return new


def default_agent_id(config: dict[str, Any]) -> str:
    agents = config.get("agents", {}).get("list") or []
    if isinstance(agents, list):
        for entry in agents:
            if isinstance(entry, dict) and entry.get("default") is True and entry.get("id"):
                return normalize_agent_id(str(entry["id"]))
    return "main"
