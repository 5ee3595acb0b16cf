"""What `orbital node` is told: the gateway's URL, its own id and workspace, its timeouts, limits and MCP servers."""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

from orbital.node.logs import default_log_file
from orbital.node.mcp_config import StdioServer
from orbital.protocol.frames import MAX_MESSAGE_BYTES

SAVE_TIMEOUT_S = 900.0
"""The longest the node waits for the gateway to confirm a saved result (the gateway ends that transfer before the
tool call times out; this only guards against a gateway that never answers)."""


API_GATEWAY_MESSAGE_BYTES = MAX_MESSAGE_BYTES
"""The message limit of a gateway that does not advertise one (a stock GSV gateway): API Gateway's."""


def _loopback_ws(url: str) -> bool:
    parts = urllib.parse.urlsplit(url)
    return parts.scheme == "ws" and (parts.hostname or "") in ("127.0.0.1", "::1", "localhost")


@dataclass
class NodeOptions:
    url: str
    node_id: str
    workspace: Path
    token: str | None = None
    log_file: Path = field(default_factory=default_log_file)
    keepalive: float = 240.0
    binary_frames: bool | None = None
    backoff_base: float = 0.5
    backoff_cap: float = 30.0
    stable_after: float = 30.0
    handshake_timeout: float = 15.0
    keepalive_timeout: float = 10.0
    request_timeout: float = 30.0
    outbox_size: int = 256
    max_message_bytes: int | None = -1
    """-1: the gateway's own limit (`hello-ok.features.limits.maxMessageBytes`, API Gateway's 128 KB when it does not
    advertise one); a number: that limit whatever the gateway says; None: no limit."""
    flush_interval: float = 1.0
    save_timeout: float = SAVE_TIMEOUT_S
    mcp_servers: list[StdioServer] = field(default_factory=list)
    """Stdio MCP servers this node runs and whose tools it offers (`orbital.node.mcp`)."""
    mcp_backoff_base: float = 1.0

    def message_limit(self, advertised: int | None = None) -> int | None:
        if self.max_message_bytes == -1:
            return advertised if advertised is not None else API_GATEWAY_MESSAGE_BYTES
        return self.max_message_bytes

    def use_binary_frames(self) -> bool:
        return _loopback_ws(self.url) if self.binary_frames is None else self.binary_frames
