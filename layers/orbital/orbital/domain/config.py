"""Configuration: defaults (spec §9.1), deep merge of user overrides, dotted paths, secret masking (fix F6)."""

from __future__ import annotations

import copy
import re
from typing import Any

from orbital.domain.ids import normalize_agent_id

MASK = "***"

DEFAULT_HEARTBEAT_PROMPT = (
    "Read HEARTBEAT.md if it exists in your workspace. Follow it strictly. Do not infer or repeat old tasks from "
    "prior chats. If nothing needs attention, reply HEARTBEAT_OK."
)


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
            "discord": {"dmPolicy": "open", "allowFrom": []},
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
    """`value` when it is an object, else an empty one (configuration and session meta are unvalidated JSON)."""
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

_CREDENTIAL_KEY = re.compile(r"(token|secret|password|apikey|api_key|privatekey|credential)", re.IGNORECASE)


def _mask_value(value: Any) -> Any:
    if value is None or value == "" or value is False:
        return value
    if isinstance(value, dict):
        return {k: _mask_value(v) for k, v in value.items()}
    return MASK


def _mask_credentials(node: Any) -> Any:
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for key, value in node.items():
            out[key] = _mask_value(value) if _CREDENTIAL_KEY.search(key) else _mask_credentials(value)
        return out
    if isinstance(node, list):
        return [_mask_credentials(v) for v in node]
    return node


def masked(config: dict[str, Any]) -> dict[str, Any]:
    """A copy with every secret replaced by "***": apiKeys.*, auth.token, and channel credentials."""
    out = copy.deepcopy(config)
    keys = out.get("apiKeys")
    if isinstance(keys, dict):
        out["apiKeys"] = {k: (MASK if v else v) for k, v in keys.items()}
    auth = out.get("auth")
    if isinstance(auth, dict) and auth.get("token"):
        auth["token"] = MASK
    channels = out.get("channels")
    if isinstance(channels, dict):
        out["channels"] = _mask_credentials(channels)
    return out


def is_secret_path(path: str) -> bool:
    segs = split_path(path)
    if segs[0] == "apiKeys" and len(segs) >= 2:
        return True
    if segs[:2] == ["auth", "token"]:
        return True
    return segs[0] == "channels" and any(_CREDENTIAL_KEY.search(s) for s in segs[1:])


def contains_mask(value: Any) -> bool:
    if value == MASK:
        return True
    if isinstance(value, dict):
        return any(contains_mask(v) for v in value.values())
    return False


def restore_masked(new: Any, old: Any) -> Any:
    """Keep the stored secret wherever a client wrote back the mask it was shown (e.g. a UI field on blur)."""
    if new == MASK:
        return old
    if isinstance(new, dict) and isinstance(old, dict):
        return {k: restore_masked(v, old.get(k)) for k, v in new.items()}
    return new


def default_agent_id(config: dict[str, Any]) -> str:
    agents = config.get("agents", {}).get("list") or []
    if isinstance(agents, list):
        for entry in agents:
            if isinstance(entry, dict) and entry.get("default") is True and entry.get("id"):
                return normalize_agent_id(str(entry["id"]))
    return "main"
