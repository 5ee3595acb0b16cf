"""Agent and account ids as they appear in session keys and configuration (spec §5.1), sender ids in phone-number
form (§12.1), and names of Step Functions executions.

Kept apart from both `session_keys` (routing reads the configuration) and `config` (the default agent is a
normalized id), so that neither has to import the other from inside a function.
"""

from __future__ import annotations

import os
import re
import uuid
from typing import Any

DEFAULT_AGENT_ID = "main"
DEFAULT_ACCOUNT_ID = "default"

_EXECUTION_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]+")
_WHATSAPP_SUFFIX = re.compile(r"(@s\.whatsapp\.net|@c\.us)$")
_DEVICE_SUFFIX = re.compile(r":\d+$")
_NON_DIGITS = re.compile(r"\D+")


def execution_name(label: str) -> str:
    """A Step Functions execution name for something labelled `label` (a run id, a call id): at most 80 characters
    of [A-Za-z0-9_-], unique per call (names are unique per state machine for 90 days). A label a client chose is
    kept as data and only shown here, shortened and cleaned, to make executions easy to find."""
    slug = _EXECUTION_NAME_CHARS.sub("-", label).strip("-")[:48] or "x"
    return f"{slug}-{uuid.uuid4().hex[:24]}"


def new_uuid() -> str:
    """`str(uuid.uuid4())` at a third of its cost (a tool call's id is made on the reply path): 122 random bits from
    the OS, the version nibble 4 and the RFC 4122 variant bits 10."""
    h = os.urandom(16).hex()
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{_VARIANT[int(h[16], 16)]}{h[17:20]}-{h[20:]}"


_VARIANT = "89ab" * 4
"""The hex digit holding the variant bits, by the random digit it replaces: its two top bits set to 10."""

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


def normalize_e164(raw: Any) -> str:
    """Phone-number form of a sender id: a WhatsApp JID suffix (`@s.whatsapp.net`, `@c.us`) and a trailing `:device`
    removed, digits only, `+` prefixed when the id had one or has at least 10 digits. Ids without digits (and
    anything that is not text or a number) become ""."""
    if raw is None or isinstance(raw, bool):
        return ""
    text = str(raw).strip()
    text = _DEVICE_SUFFIX.sub("", _WHATSAPP_SUFFIX.sub("", text))
    digits = _NON_DIGITS.sub("", text)
    if not digits:
        return ""
    return f"+{digits}" if text.startswith("+") or len(digits) >= 10 else digits
