"""Agent and account ids as they appear in session keys and configuration (spec §5.1).

Kept apart from both `session_keys` (routing reads the configuration) and `config` (the default agent is a
normalized id), so that neither has to import the other from inside a function.
"""

from __future__ import annotations

import re

DEFAULT_AGENT_ID = "main"
DEFAULT_ACCOUNT_ID = "default"

_VALID_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$", re.IGNORECASE)
_INVALID_ID_CHARS = re.compile(r"[^a-z0-9_-]+")


def _normalize_id(raw: str | None, fallback: str) -> str:
    text = (raw or "").strip()
    if not text:
        return fallback
    if _VALID_ID.match(text):
        return text.lower()
    cleaned = _INVALID_ID_CHARS.sub("-", text.lower()).strip("-")[:64]
    return cleaned or fallback


def normalize_agent_id(raw: str | None) -> str:
    return _normalize_id(raw, DEFAULT_AGENT_ID)


def normalize_account_id(raw: str | None) -> str:
    return _normalize_id(raw, DEFAULT_ACCOUNT_ID)
