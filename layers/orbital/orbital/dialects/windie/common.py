"""What every part of the WindieOS dialect shares: its router, its limits and its refusal."""

from __future__ import annotations

import json
import logging
import re
from datetime import UTC, datetime
from typing import Any

from orbital.agent import client_tools
from orbital.protocol.registry import Router

log = logging.getLogger("orbital.dialects.windie")

router = Router("windie")

CLOSE_CODE = 1008


REMOVED_FIELDS = ("available_tools", "available_coordinate_methods", "requested_agent_policy")
"""Top-level handshake fields WindieOS removed: a handshake with one is refused."""
ENVELOPE_KEYS = frozenset(
    {"id", "type", "payload", "user_id", "session_id", "conversation_ref", "turn_ref", "timestamp"}
)
CAPABILITIES = frozenset({"ocr", "vision", "embeddings", "web_search", "browser"})
MODES = frozenset(client_tools.MODES)
MAX_ACTIVE_QUERIES = 50
MAX_MANIFEST_TOOLS = 128
MAX_MANIFEST_BYTES = 256 * 1024
MAX_NAMES = 256
MAX_REF_CHARS = 256
MAX_SCREENSHOTS = 16
MAX_REHYDRATE_MESSAGES = 2000
COMPACTION_AWS_S = 25.0
"""The longest `compact-history` may take on AWS (API Gateway ends a WebSocket integration at 29 s)."""
LAMBDA_MARGIN_S = 2.0
"""Kept free of the Lambda invocation's remaining time, to answer before it is cut off."""
MIN_COMPACTION_S = 1.0
HOLD_MARGIN_S = 30.0
"""How much longer than the compaction may take it holds its session: a holder that died is freed after this."""
MAX_TOOL_IMAGE_BYTES = 3_932_160
"""The largest screenshot a tool result keeps (3.75 MiB: its base64, 5 MiB, is what model providers take)."""
MAX_EVENT_BYTES = 96 * 1024
"""Optional parts of an event (`final_response`, `assistant-message-full`, a tool's output) are left out or cut
above this, so every event fits one WebSocket message on API Gateway (128 KB)."""
ENVELOPE_BYTES = 2048
"""What a turn's correlation fields add to an event's payload, at most."""
RESERVED = "reserved backend tool names cannot be overridden"
BACKEND_SEPARATOR = "__"
"""What the backend's tool names have (`gsv__*`, `{nodeId}__{tool}`): a guest may declare no such name."""
GREETING = "Hello! I'm listening."
STOPPED = "Run cancelled by user"
SETTING_DEFAULTS: dict[str, Any] = {
    "model_mode": "online",
    "interaction_mode": "agent",  # what a query does: it offers its tools
    "speech_mode_enabled": False,
    "wakeword_enabled": False,
    "wakeword_stt_enabled": False,
    "browser_automation_enabled": False,
    "include_query_screenshot": True,
}
SETTING_CHOICES = {"model_mode": frozenset({"online", "local"}), "interaction_mode": frozenset({"chat", "agent"})}
SETTING_FLAGS = frozenset(k for k, v in SETTING_DEFAULTS.items() if isinstance(v, bool))
MODEL_KEYS = ("model_provider", "selected_model_id")
IGNORED_SETTINGS = frozenset({"tools", "agent_definition", "client_version"})
"""What the SDKs send with their settings that is not a setting here (taken from the handshake instead)."""
PROVIDER_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,40}$")
_SLUG = re.compile(r"[^A-Za-z0-9_.:-]")


class _InvalidFrameError(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _size(frame: Any) -> int:
    return len(json.dumps(frame, separators=(",", ":"), ensure_ascii=False).encode())
