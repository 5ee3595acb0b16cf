"""The native `gsv__*` tools that answer at once (spec §8): workspace files, configuration, sessions; cron and
channel messages come from the families that own them (`run_sync`). Tools that wait for someone else (a node's
logs, another session's reply, a transfer) are dispatched by the agent turn (`orbital.agent.tools`), which owns
waiting.

Each tool takes `(env, args)` and returns its result object; a failure raises `ToolError` with the text the model
reads after "Error: ". Arguments come from a model, so every one is checked here, never trusted.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from orbital.domain import config as cfg
from orbital.errors import RpcError
from orbital.store import workspace_ops

if TYPE_CHECKING:
    from orbital.ports.services import Services


class ToolError(Exception):
    """A tool failed; the message is shown to the model as "Error: {message}"."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass
class ToolEnv:
    """What a native tool knows about the run that called it."""

    services: Services
    config: dict[str, Any]
    agent_id: str
    session_key: str
    now_ms: int


def _args(args: Any) -> dict[str, Any]:
    return args if isinstance(args, dict) else {}


def _workspace(call: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    try:
        return call()
    except RpcError as exc:
        raise ToolError(exc.message) from None


def list_files(env: ToolEnv, args: dict[str, Any]) -> dict[str, Any]:
    path = args.get("path")
    return _workspace(
        lambda: workspace_ops.list_files(env.services.workspace, env.agent_id, path if isinstance(path, str) else None)
    )


def _bytes_arg(args: dict[str, Any], key: str, minimum: int) -> int | None:
    value = args.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < minimum:
        raise ToolError(f"{key} must be a number of bytes, at least {minimum}")
    return math.floor(value)


def read_file(env: ToolEnv, args: dict[str, Any]) -> dict[str, Any]:
    """The whole file, or `limit` bytes from `offset` (cut at character boundaries, with `nextOffset` when more
    follows)."""
    offset = _bytes_arg(args, "offset", 0) or 0
    limit = _bytes_arg(args, "limit", 1)
    return _without_version(
        _workspace(
            lambda: workspace_ops.read_file(
                env.services.workspace, env.agent_id, args.get("path"), offset=offset, limit=limit
            )
        )
    )


def write_file(env: ToolEnv, args: dict[str, Any]) -> dict[str, Any]:
    return _without_version(
        _workspace(
            lambda: workspace_ops.write_file(
                env.services.workspace, env.agent_id, args.get("path"), args.get("content")
            )
        )
    )


def _without_version(result: dict[str, Any]) -> dict[str, Any]:
    """A file tool's result as GSV's tools give it: the `etag` editors use is no use to the model."""
    result.pop("etag", None)
    return result


def edit_file(env: ToolEnv, args: dict[str, Any]) -> dict[str, Any]:
    return _workspace(
        lambda: workspace_ops.edit_file(
            env.services.workspace,
            env.agent_id,
            args.get("path"),
            args.get("oldString"),
            args.get("newString"),
            args.get("replaceAll", False),
        )
    )


def delete_file(env: ToolEnv, args: dict[str, Any]) -> dict[str, Any]:
    return _workspace(lambda: workspace_ops.delete_file(env.services.workspace, env.agent_id, args.get("path")))


def config_get(env: ToolEnv, args: dict[str, Any]) -> dict[str, Any]:
    """Like `config.get`, masked on every path (F6: GSV returned raw keys to the model)."""
    path = args.get("path")
    if isinstance(path, str) and path.strip():
        value = env.services.config.masked_get(path.strip())
        return {"path": path.strip()} if cfg.is_missing(value) else {"path": path.strip(), "value": value}
    return {"config": env.services.config.masked()}


def _clamp(value: Any, default: int, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return default
    return max(low, min(high, math.floor(value)))


def sessions_list(env: ToolEnv, args: dict[str, Any]) -> dict[str, Any]:
    """Sessions by last activity, optionally with their last messages (spec §8.6)."""
    limit = _clamp(args.get("limit"), 20, 1, 100)
    offset = _clamp(args.get("offset"), 0, 0, 10**9)
    message_limit = _clamp(args.get("messageLimit"), 0, 0, 20)
    repo = env.services.sessions
    entries = repo.list_registry()
    rows = []
    for entry in entries[offset : offset + limit]:
        row: dict[str, Any] = {
            "sessionKey": entry.get("sessionKey"),
            "label": entry.get("label"),
            "lastActiveAt": entry.get("lastActiveAt"),
            "createdAt": entry.get("createdAt"),
        }
        if message_limit > 0:
            try:
                meta = repo.load_meta(str(entry.get("sessionKey")))
                row["messageCount"] = int(meta.get("messageCount") or 0) if meta else 0
                row["messages"] = repo.messages(str(entry.get("sessionKey")), message_limit, meta=meta) if meta else []
            except Exception as exc:
                row.update(messageCount=0, messages=[], previewError=str(exc) or type(exc).__name__)
        rows.append(row)
    return {"sessions": rows, "count": len(entries), "offset": offset, "limit": limit}


SYNC_TOOLS: dict[str, Callable[[ToolEnv, dict[str, Any]], Any]] = {
    "gsv__ListFiles": list_files,
    "gsv__ReadFile": read_file,
    "gsv__WriteFile": write_file,
    "gsv__EditFile": edit_file,
    "gsv__DeleteFile": delete_file,
    "gsv__ConfigGet": config_get,
    "gsv__SessionsList": sessions_list,
}


"""The native tools this layer answers itself. `gsv__Cron` (it starts agent runs) and `gsv__Message` (it sends through
a channel) are registered by their families (`Hooks.native_tools`: `orbital.agent.cron_runs.tool`,
`orbital.channels.message_tool.message`)."""


def run_sync(env: ToolEnv, name: str, args: Any) -> Any:
    """Run a native tool that answers at once. Raises ToolError (also for an unknown `gsv__` name)."""
    tool = SYNC_TOOLS.get(name) or env.services.hooks.native_tools.get(name)
    if tool is None:
        raise ToolError(f"Unknown native tool: {name}")
    return tool(env, _args(args))
