"""`workspace.list` / `workspace.read` / `workspace.write` / `workspace.delete` (spec §2.6).

Each works on `agents/{agentId}/`, where a missing `agentId` means the configured default agent. Unlike GSV the
agent id is validated (no `/`, `\\` or `..`), and path traversal is a 400, since it is the caller's mistake. The
work itself is done by `orbital.store.workspace_ops`, which the native file tools share.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pydantic import Field

from orbital.domain import roles
from orbital.domain.config import default_agent_id
from orbital.domain.session_keys import DEFAULT_AGENT_ID
from orbital.domain.workspace_paths import validate_agent_id
from orbital.errors import BadRequestError
from orbital.protocol.frames import REPLY_BUDGET_BYTES, fit
from orbital.protocol.params import GivenText, Text
from orbital.protocol.registry import CLIENT, Params, Result, Router
from orbital.store import workspace_ops

if TYPE_CHECKING:
    from orbital.protocol.context import CallContext

router = Router("workspace")

READ_LIMIT_BYTES = 96_000
"""The most `workspace.read` returns at once: with JSON escaping, the reply stays inside API Gateway's 128 KB."""


class WorkspaceParams(Params):
    # passed on as given: the workspace checks them with its own messages ("path must be a string", ...)
    path: GivenText = None
    agentId: GivenText = None


class WorkspaceWriteParams(WorkspaceParams):
    content: GivenText = None
    ifMatch: Text = None
    ifNoneMatch: Text = None


class WorkspaceReadParams(WorkspaceParams):
    offset: int = Field(default=0, ge=0)
    limit: int = Field(default=READ_LIMIT_BYTES, ge=1, le=READ_LIMIT_BYTES)


class WorkspaceListResult(Result):
    path: str
    files: list[str]
    directories: list[str]
    truncated: bool | None = None


class WorkspaceReadResult(Result):
    path: str
    content: str
    size: int
    etag: str
    lastModified: str | None = None
    resolvedPath: str | None = None
    resolvedSource: str | None = None
    truncated: bool | None = None
    nextOffset: int | None = None


class WorkspaceWriteResult(Result):
    path: str
    size: int
    written: bool
    etag: str


class WorkspaceDeleteResult(Result):
    path: str
    deleted: bool


def _agent(ctx: CallContext, params: WorkspaceParams) -> str:
    if params.agentId is None or (isinstance(params.agentId, str) and not params.agentId.strip()):
        return default_agent_id(ctx.config())
    return validate_agent_id(params.agentId, DEFAULT_AGENT_ID)


def _list_path(raw: Any) -> str | None:
    if raw is None or isinstance(raw, str):
        return raw
    raise BadRequestError("path must be a string")


@router.method("workspace.list", params=WorkspaceParams, result=WorkspaceListResult, modes=CLIENT, scope=roles.READ)
def workspace_list(ctx: CallContext, params: WorkspaceParams) -> dict[str, Any]:
    """One directory of an agent's workspace: `files` like `memory/x.md` and `directories` like `memory/`, relative
    to the agent root. `skills/` merges the agent's skill overrides with the global skills. A directory too large
    for one WebSocket message (96 KB of JSON) lists what fits, directories first, with `truncated: true`."""
    agent_id = _agent(ctx, params)
    listing = workspace_ops.list_files(ctx.services.workspace, agent_id, _list_path(params.path))
    directories, cut_dirs = fit(listing["directories"])
    used = len(json.dumps(directories, ensure_ascii=False).encode())
    files, cut_files = fit(listing["files"], budget=max(REPLY_BUDGET_BYTES - used, 1))
    if cut_dirs or cut_files:
        return {**listing, "files": files if not cut_dirs else [], "directories": directories, "truncated": True}
    return listing


@router.method("workspace.read", params=WorkspaceReadParams, result=WorkspaceReadResult, modes=CLIENT, scope=roles.READ)
def workspace_read(ctx: CallContext, params: WorkspaceReadParams) -> dict[str, Any]:
    """Read a file (`size` in bytes). `skills/...` paths read the agent's override, else the global skill, and say
    which in `resolvedPath` / `resolvedSource`; `etag` is the whole file's version (Orbital: see `workspace.write`).
    At most `limit` bytes (default and cap 96,000, so the reply fits a WebSocket message) from byte `offset`
    (default 0) come back; a longer file is cut at a character boundary with `truncated: true` and `nextOffset`,
    where the next read goes on."""
    agent_id = _agent(ctx, params)
    return workspace_ops.read_file(
        ctx.services.workspace, agent_id, params.path, offset=params.offset, limit=params.limit
    )


@router.method(
    "workspace.write", params=WorkspaceWriteParams, result=WorkspaceWriteResult, modes=CLIENT, scope=roles.OPERATE
)
def workspace_write(ctx: CallContext, params: WorkspaceWriteParams) -> dict[str, Any]:
    """Create or replace a file (`size` = characters written; `etag` = its new version). `skills/...` paths write
    the agent's own override. Orbital: `ifMatch` (an `etag` from `workspace.read`) writes only if the file is still
    that version, `ifNoneMatch: "*"` only if it does not exist; otherwise `409 File changed since it was read: …`
    (or `File already exists: …`) and nothing is written."""
    agent_id = _agent(ctx, params)
    if params.ifNoneMatch is not None and params.ifNoneMatch != "*":
        raise BadRequestError('ifNoneMatch must be "*"')
    return workspace_ops.write_file(
        ctx.services.workspace,
        agent_id,
        params.path,
        params.content,
        if_match=params.ifMatch,
        if_none_match=params.ifNoneMatch == "*",
    )


@router.method(
    "workspace.delete", params=WorkspaceParams, result=WorkspaceDeleteResult, modes=CLIENT, scope=roles.OPERATE
)
def workspace_delete(ctx: CallContext, params: WorkspaceParams) -> dict[str, Any]:
    """Delete a file of the agent's own workspace (404 when it does not exist)."""
    agent_id = _agent(ctx, params)
    return workspace_ops.delete_file(ctx.services.workspace, agent_id, params.path)
