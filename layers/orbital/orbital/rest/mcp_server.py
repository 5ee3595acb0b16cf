"""Orbital as an MCP server: `POST /mcp`, the Model Context Protocol's streamable HTTP transport on the gateway's own
HTTP app (locally on its port, on AWS through the `rest_api` Lambda and Mangum), so another agent (a desktop
assistant, an IDE, a script with an MCP SDK) can talk to the user's agent and read what it holds.

- **Stateless, JSON responses**: every POST is answered on its own with one JSON body (no `Mcp-Session-Id`, no SSE
  stream, no GET), which is what a Lambda behind API Gateway can serve; a client of the handshake era (`initialize`
  first) and one of the 2026 revision (no handshake) are both served. DNS rebinding is the local front door's
  business, as for every route of the app.
- **Who**: `Authorization: Bearer` with the gateway token or a device token whose role holds `read` (ADR 0042:
  `viewer` and above), judged as every `/api` route judges it (`rest.auth`), before the body is read
  (`admin.BEARER_FIRST`, locally and on Lambda): 401 (with `WWW-Authenticate: Bearer`) without one or with a wrong
  one, 403 for a token of another kind or role. Each tool is the client method it stands for, called as that device
  (`rest.admin.call`), so the method's scope is checked as on a socket; the tools a role may not call are left out
  of its list and refused by name.
- **Tools**: `send_message {text, sessionKey?, waitSeconds?}` (`chat.send` into the given session, or `main`; scope
  `chat`) starts a turn and waits for its end, at most `SEND_WAIT_SECONDS` (25 s: API Gateway ends an HTTP request
  at 29 s; on Lambda also the invocation's remaining time less a margin), and returns the reply and the run id; a
  turn still running then, or paused on a tool approval (answered as soon as it pauses), is answered
  `status: "running"` with its run id, to read later with `read_session`.
  `list_sessions`, `read_session {sessionKey, limit?}`, `list_files {path?}` and `read_file {path}` (scope `read`)
  read sessions and the default agent's workspace.
- **Resources**: the workspace's files as `orbital://workspace/{path}` (listed up to `RESOURCE_FILES` files).

The reply of a turn is awaited the way a session-to-session send awaits it (`agent.notify`): a pending call of its
own (`REPLY_KIND`, no node) that the run settles with its reply when it ends, polled here with the bound above. The
MCP SDK is imported at the first `/mcp` request, not with the app.
"""

from __future__ import annotations

import contextvars
import functools
import json
import logging
import mimetypes
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

from fastapi import HTTPException
from starlette.concurrency import run_in_threadpool
from starlette.requests import HTTPConnection
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from orbital import __version__
from orbital.agent import approvals
from orbital.domain import roles
from orbital.domain.messages import text_of
from orbital.domain.session_keys import canonicalize_with_config
from orbital.engines import deferred
from orbital.rest import admin
from orbital.rest.auth import Caller, gateway_with
from orbital.rest.deps import services_for
from orbital.store import keys

if TYPE_CHECKING:
    import mcp_types as types
    from mcp.server.lowlevel import Server

    from orbital.ports.services import Services

log = logging.getLogger("orbital.rest.mcp")

PATH = "/mcp"
SEND_WAIT_SECONDS = 25.0
"""The longest `send_message` waits for a turn's end (API Gateway's HTTP integration ends a request at 29 s)."""
LAMBDA_MARGIN_SECONDS = admin.LAMBDA_MARGIN_SECONDS
REPLY_KIND = "mcp-reply"
"""Kind of the pending call a turn started by `send_message` settles with its reply (`agent.notify`)."""
FIRST_POLL_SECONDS = 0.05
LONGEST_POLL_SECONDS = 0.5
READ_SESSION_DEFAULT = 20
READ_SESSION_MAX = 200
MESSAGE_CHARS = 8_000
"""The most of one message `read_session` shows (the rest is cut with a note)."""
RESOURCE_FILES = 500
RESOURCE_DIRECTORIES = 50
RESOURCE_READS = 8
"""A resource is read in at most this many `workspace.read` pieces (96 KB each)."""
URI_PREFIX = "orbital://workspace/"
TEXT_LIMIT = 200


@dataclass(frozen=True)
class _McpRequest:
    caller: Caller
    wait_seconds: float
    services: Services


_REQUEST: contextvars.ContextVar[_McpRequest] = contextvars.ContextVar("orbital_mcp_request")
"""The request a handler serves (set by `Endpoint` around the SDK's handling of it; its tasks inherit it)."""


class ToolRefusedError(Exception):
    """A tool call that fails with its message as the result (`isError`), not as a protocol error."""


# --- the route ----------------------------------------------------------------------------------------------------

_judge = gateway_with(roles.READ)


class McpEndpoint:
    """The ASGI app of `POST /mcp`: the caller is judged first, then the SDK serves the request, statelessly."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # pragma: no cover - a route of the HTTP app only
            return
        try:
            caller = await run_in_threadpool(_judge, HTTPConnection(scope))
        except HTTPException as exc:
            refused = admin.error_response(exc.status_code, str(exc.detail), headers=exc.headers)
            await refused(scope, receive, send)
            return
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager  # lazy: the first /mcp request

        token = _REQUEST.set(_McpRequest(caller, _wait_seconds(scope), services_for(scope)))
        try:
            # one manager per request: stateless serving keeps nothing between requests, and a manager's task group
            # belongs to the event loop that runs it (Mangum's, or the local server's)
            manager = StreamableHTTPSessionManager(_server(), json_response=True, stateless=True)
            async with manager.run():
                await manager.handle_request(scope, receive, send)
        finally:
            _REQUEST.reset(token)


def route() -> Route:
    """`POST /mcp` (Starlette's route: the SDK answers in its own shapes; FastAPI does not document it)."""
    return Route(PATH, McpEndpoint(), methods=["POST"], name="mcp", include_in_schema=False)


def _wait_seconds(scope: Scope) -> float:
    context = scope.get("aws.context")
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    if callable(remaining):
        return max(0.0, min(SEND_WAIT_SECONDS, remaining() / 1000 - LAMBDA_MARGIN_SECONDS))
    return SEND_WAIT_SECONDS


# --- the server ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Tool:
    name: str
    scope: str
    description: str
    schema: dict[str, Any]
    run: Callable[[Services, Caller, dict[str, Any], float], tuple[str, dict[str, Any]]]
    read_only: bool = True


def _string(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


def _schema(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = required
    return schema


@functools.cache
def _server() -> Server[Any]:
    # lazy: the MCP SDK loads at the first /mcp request, not with the app (the rest_api Lambda's cold start)
    import mcp_types as types
    from mcp.server.lowlevel import Server

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        role = _REQUEST.get().caller.role
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name=tool.name,
                    description=tool.description,
                    input_schema=tool.schema,
                    annotations=types.ToolAnnotations(read_only_hint=tool.read_only, open_world_hint=False),
                )
                for tool in TOOLS.values()
                if roles.allows(role, tool.scope)
            ]
        )

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        request = _REQUEST.get()
        try:
            text, structured = await run_in_threadpool(_call_tool, request, params.name, params.arguments or {})
        except ToolRefusedError as refused:
            return types.CallToolResult(content=[types.TextContent(text=str(refused))], is_error=True)
        failed = structured.get("status") == "error"
        return types.CallToolResult(
            content=[types.TextContent(text=text)], structured_content=structured, is_error=failed
        )

    async def list_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
        request = _REQUEST.get()
        paths = await run_in_threadpool(_workspace_files, request.services, request.caller)
        return types.ListResourcesResult(
            resources=[types.Resource(name=path, uri=resource_uri(path), mime_type=_mime_type(path)) for path in paths]
        )

    async def list_templates(ctx: Any, params: Any) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(
            resource_templates=[
                types.ResourceTemplate(
                    name="workspace-file",
                    uri_template=URI_PREFIX + "{path}",
                    description="A file of the agent's workspace, by its path (e.g. memory/notes.md)",
                )
            ]
        )

    async def read_resource(ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        from mcp.shared.exceptions import MCPError  # lazy: as the SDK above

        request = _REQUEST.get()
        path = path_of(str(params.uri))
        if path is None:
            raise MCPError(types.INVALID_PARAMS, f"Not a workspace resource: {_short(str(params.uri))}")
        try:
            text = await run_in_threadpool(_read_whole, request.services, request.caller, path)
        except ToolRefusedError as refused:
            raise MCPError(types.INVALID_PARAMS, str(refused)) from None
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=str(params.uri), text=text, mime_type=_mime_type(path))]
        )

    return Server(
        "orbital",
        version=__version__,
        title="Orbital",
        instructions="The user's Orbital agent: send it a message (send_message), read its sessions and the files "
        "of its workspace.",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_templates,
        on_read_resource=read_resource,
    )


def _call_tool(request: _McpRequest, name: str, arguments: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    tool = TOOLS.get(name)
    if tool is None:
        raise ToolRefusedError(f"Unknown tool: {_short(name)}")
    caller = request.caller
    if not roles.allows(caller.role, tool.scope):
        raise ToolRefusedError(f"{name} needs scope {tool.scope}; this device's role is {caller.role}")
    return tool.run(request.services, caller, arguments, request.wait_seconds)


# --- calling the gateway's methods --------------------------------------------------------------------------------


def _method(
    services: Services, caller: Caller, method: str, params: dict[str, Any], internal: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The payload of one client method called as `caller`; its error as `ToolRefusedError`."""
    frame = admin.call(services, method, params, 0.0, caller=caller, internal=internal)
    if frame is None:  # none of the methods used here is deferred
        raise ToolRefusedError(f"{method}: no answer")
    if not frame.get("ok"):
        error = frame.get("error") or {}
        raise ToolRefusedError(str(error.get("message") or f"{method} failed"))
    payload = frame.get("payload")
    return payload if isinstance(payload, dict) else {}


def _text_arg(arguments: dict[str, Any], name: str, *, required: bool = False) -> str | None:
    value = arguments.get(name)
    if value is None or (isinstance(value, str) and not value.strip() and not required):
        if required:
            raise ToolRefusedError(f"{name} is required")
        return None
    if not isinstance(value, str) or not value.strip():
        raise ToolRefusedError(f"{name} must be a non-empty string" if required else f"{name} must be a string")
    return value


def _int_arg(arguments: dict[str, Any], name: str, default: int, low: int, high: int) -> int:
    value = arguments.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise ToolRefusedError(f"{name} must be a number")
    return max(low, min(high, int(value)))


# --- send_message -------------------------------------------------------------------------------------------------


def send_message(
    services: Services, caller: Caller, arguments: dict[str, Any], wait_seconds: float
) -> tuple[str, dict[str, Any]]:
    text = _text_arg(arguments, "text", required=True)
    key = _text_arg(arguments, "sessionKey") or "main"
    wait = min(wait_seconds, float(_int_arg(arguments, "waitSeconds", int(SEND_WAIT_SECONDS), 0, 300)))
    call_id = f"mcp-{uuid.uuid4().hex}"
    # the pending call is there before the run can end; it lives as long as a run may (its ttl: an hour past this)
    pending = deferred.PendingCall(
        call_id=call_id,
        kind=REPLY_KIND,
        node_id="",
        node_connection_id="",
        timeout_ms=int(SEND_WAIT_SECONDS * 1000),
        created_at=services.now_ms(),
    )
    deferred.create(services, pending)
    try:
        sent = _method(
            services, caller, "chat.send", {"sessionKey": key, "message": text}, {"notify": {"callId": call_id}}
        )
    except ToolRefusedError:
        services.table.delete(keys.pending_call(call_id))
        raise
    status = str(sent.get("status") or "")
    run_id = sent.get("runId") if isinstance(sent.get("runId"), str) else None
    if status != "started":  # a slash command, directives only, the answer to a paused run: answered at once
        services.table.delete(keys.pending_call(call_id))
        answer = str(sent.get("response") or sent.get("error") or status)
        result = {"status": status, "sessionKey": key, "runId": run_id, "reply": answer}
        return answer, result
    outcome = _await_reply(services, call_id, wait, lambda: _paused(services, key, run_id))
    if outcome is None:
        return _still_running(services, key, run_id, queued=bool(sent.get("queued")))
    services.table.delete(keys.pending_call(call_id))
    found = outcome.get("result")
    ended: dict[str, Any] = found if isinstance(found, dict) else {}
    if ended.get("status") == "ok":
        reply = str(ended.get("reply") or "")
        return reply or "(the agent replied with no text)", {
            "status": "final",
            "sessionKey": str(ended.get("sessionKey") or key),
            "runId": run_id,
            "reply": reply,
        }
    error = str(ended.get("error") or outcome.get("error") or "The run failed")
    return f"The run failed: {error}", {"status": "error", "sessionKey": key, "runId": run_id, "error": error}


def _still_running(services: Services, key: str, run_id: str | None, *, queued: bool) -> tuple[str, dict[str, Any]]:
    """The answer for a turn that has not ended within the wait: its run id, and whether it waits for a tool
    approval (someone must answer it: the console, `orbital approvals`, or a yes / no sent to the session)."""
    canonical = canonicalize_with_config(key, services.config.effective())
    paused = _paused(services, canonical, run_id)
    doing = "waits for a tool approval" if paused else "is still working on it"
    note = f'The agent {doing} (run {run_id}); read the reply later with read_session {{"sessionKey": "{canonical}"}}.'
    result: dict[str, Any] = {"status": "running", "sessionKey": canonical, "runId": run_id, "queued": queued}
    if paused:
        result["approvalPending"] = True
    return note, result


def _paused(services: Services, key: str, run_id: str | None) -> bool:
    """Whether the session's run `run_id` is paused on a tool approval (only someone's answer moves it on)."""
    canonical = canonicalize_with_config(key, services.config.effective())
    meta = services.sessions.load_meta(canonical) or {}
    run = meta.get("currentRun")
    return isinstance(run, dict) and run.get("runId") == run_id and approvals.waits_for_answer(meta)


def _await_reply(services: Services, call_id: str, seconds: float, paused: Callable[[], bool]) -> dict[str, Any] | None:
    """The outcome the run settled its pending call with, polled for at most `seconds`; None if it has not ended, or
    as soon as the run is `paused` on a tool approval (waiting on would only run the caller's clock down)."""
    deadline = time.monotonic() + seconds
    pause = FIRST_POLL_SECONDS
    while True:
        try:
            rec = services.table.get(keys.pending_call(call_id))
        except Exception as exc:  # a passing failure of the table: the next poll tries again, within the bound
            log.warning("waiting for a turn's reply: %s", type(exc).__name__)
            rec = None
        if rec is not None and rec.attrs.get("st") == deferred.DONE:
            return deferred.outcome_of(services, rec)
        left = deadline - time.monotonic()
        if left <= 0 or paused():
            return None
        time.sleep(min(pause, left))
        pause = min(pause * 1.5, LONGEST_POLL_SECONDS)


# --- sessions -----------------------------------------------------------------------------------------------------


def list_sessions(
    services: Services, caller: Caller, arguments: dict[str, Any], wait_seconds: float
) -> tuple[str, dict[str, Any]]:
    limit = _int_arg(arguments, "limit", 50, 1, 500)
    listed = _method(services, caller, "sessions.list", {"limit": limit})
    sessions = [s for s in listed.get("sessions") or [] if isinstance(s, dict)]
    lines = [
        f"{s.get('sessionKey')}" + (f" ({s['label']})" if s.get("label") else "") + f" last active {_when(s)}"
        for s in sessions
    ]
    text = "\n".join(lines) if lines else "No sessions yet."
    return text, {"sessions": sessions, "count": listed.get("count", len(sessions))}


def read_session(
    services: Services, caller: Caller, arguments: dict[str, Any], wait_seconds: float
) -> tuple[str, dict[str, Any]]:
    key = _text_arg(arguments, "sessionKey", required=True)
    limit = _int_arg(arguments, "limit", READ_SESSION_DEFAULT, 1, READ_SESSION_MAX)
    preview = _method(services, caller, "session.preview", {"sessionKey": key, "limit": limit})
    messages = [m for m in preview.get("messages") or [] if isinstance(m, dict)]
    shown = [{"role": str(m.get("role") or "?"), "text": _message_text(m)} for m in messages]
    total = int(preview.get("messageCount") or len(messages))
    head = f"Session {preview.get('sessionKey') or key}: the last {len(shown)} of {total} messages."
    text = "\n\n".join([head, *(f"[{m['role']}] {m['text']}" for m in shown)])
    result: dict[str, Any] = {
        "sessionKey": preview.get("sessionKey") or key,
        "messageCount": total,
        "messages": shown,
    }
    if preview.get("taint"):
        result["taint"] = preview["taint"]
    return text, result


def _when(entry: dict[str, Any]) -> str:
    at = entry.get("lastActiveAt")
    if not isinstance(at, int):
        return "?"
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(at / 1000))


def _message_text(message: dict[str, Any]) -> str:
    """One stored message as a line of text: its text, its tool calls named, a tool result's tool named."""
    parts = []
    text = text_of(message)
    if message.get("role") == "toolResult":
        parts.append(f"({message.get('toolName') or 'tool'} result{', error' if message.get('isError') else ''})")
    if text:
        parts.append(text)
    content = message.get("content")
    if isinstance(content, list):
        for block in content:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "toolCall":
                arguments = json.dumps(block.get("arguments"), ensure_ascii=False)
                parts.append(f"(calls {block.get('name')} {_short(arguments)})")
            elif block.get("type") == "image":
                parts.append("(an image)")
    if not text and message.get("errorMessage"):
        parts.append(str(message["errorMessage"]))
    joined = " ".join(parts)
    if len(joined) > MESSAGE_CHARS:
        joined = joined[:MESSAGE_CHARS] + f" … ({len(joined) - MESSAGE_CHARS} more characters)"
    return joined


# --- the workspace ------------------------------------------------------------------------------------------------


def list_files(
    services: Services, caller: Caller, arguments: dict[str, Any], wait_seconds: float
) -> tuple[str, dict[str, Any]]:
    path = _text_arg(arguments, "path")
    listed = _method(services, caller, "workspace.list", {"path": path} if path else {})
    directories = [d for d in listed.get("directories") or [] if isinstance(d, str)]
    files = [f for f in listed.get("files") or [] if isinstance(f, str)]
    lines = [*directories, *files] or ["(empty)"]
    if listed.get("truncated"):
        lines.append("(more entries than fit: list a subdirectory)")
    result = {"path": listed.get("path", path or ""), "directories": directories, "files": files}
    if listed.get("truncated"):
        result["truncated"] = True
    return "\n".join(lines), result


def read_file(
    services: Services, caller: Caller, arguments: dict[str, Any], wait_seconds: float
) -> tuple[str, dict[str, Any]]:
    path = _text_arg(arguments, "path", required=True)
    read = _method(services, caller, "workspace.read", {"path": path})
    content = str(read.get("content") or "")
    result = {k: read[k] for k in ("path", "size", "truncated", "nextOffset") if read.get(k) is not None}
    text = content
    if read.get("truncated"):
        text += f"\n\n(the file is longer: {read.get('size')} bytes; this is its first part)"
    return text, result


def _workspace_files(services: Services, caller: Caller) -> list[str]:
    """The workspace's files, directory by directory from its root, at most `RESOURCE_FILES` of them."""
    found: list[str] = []
    pending: list[str | None] = [None]
    visited = 0
    while pending and len(found) < RESOURCE_FILES and visited < RESOURCE_DIRECTORIES:
        path = pending.pop(0)
        visited += 1
        try:
            listed = _method(services, caller, "workspace.list", {"path": path} if path else {})
        except ToolRefusedError:
            continue
        found += [f for f in listed.get("files") or [] if isinstance(f, str)]
        pending += [d for d in listed.get("directories") or [] if isinstance(d, str)]
    return found[:RESOURCE_FILES]


def _read_whole(services: Services, caller: Caller, path: str) -> str:
    pieces = []
    offset = 0
    for _ in range(RESOURCE_READS):
        read = _method(services, caller, "workspace.read", {"path": path, "offset": offset})
        pieces.append(str(read.get("content") or ""))
        next_offset = read.get("nextOffset")
        if not read.get("truncated") or not isinstance(next_offset, int) or next_offset <= offset:
            return "".join(pieces)
        offset = next_offset
    pieces.append(f"\n\n(cut here: the file is {read.get('size')} bytes; read the rest with read_file)")
    return "".join(pieces)


def resource_uri(path: str) -> str:
    return URI_PREFIX + quote(path, safe="/")


def path_of(uri: str) -> str | None:
    """The workspace path a resource URI names; None for any other URI."""
    if not uri.startswith(URI_PREFIX):
        return None
    path = unquote(uri[len(URI_PREFIX) :])
    return path or None


def _mime_type(path: str) -> str:
    guessed, _ = mimetypes.guess_type(path)
    if path.endswith(".md"):
        return "text/markdown"
    return guessed or "text/plain"


def _short(text: str) -> str:
    return text if len(text) <= TEXT_LIMIT else text[:TEXT_LIMIT] + "…"


TOOLS: dict[str, _Tool] = {
    tool.name: tool
    for tool in (
        _Tool(
            "send_message",
            roles.CHAT,
            "Send a message to the user's Orbital agent and get its reply. It runs a turn in the given session "
            "(default: the main session) and waits for it, at most about 25 seconds: a turn still running then "
            'is answered with status "running" and its runId; read the reply later with read_session.',
            _schema(
                {
                    "text": _string("The message"),
                    "sessionKey": _string("The session to send it to (default: main)"),
                    "waitSeconds": {
                        "type": "integer",
                        "minimum": 0,
                        "maximum": int(SEND_WAIT_SECONDS),
                        "description": "How long to wait for the reply (default and most: 25)",
                    },
                },
                ["text"],
            ),
            send_message,
            read_only=False,
        ),
        _Tool(
            "list_sessions",
            roles.READ,
            "The agent's sessions, most recently active first.",
            _schema({"limit": {"type": "integer", "minimum": 1, "maximum": 500, "description": "At most (50)"}}),
            list_sessions,
        ),
        _Tool(
            "read_session",
            roles.READ,
            "The last messages of a session, oldest first.",
            _schema(
                {
                    "sessionKey": _string("The session (see list_sessions; main is the main session)"),
                    "limit": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": READ_SESSION_MAX,
                        "description": f"How many of the last messages ({READ_SESSION_DEFAULT})",
                    },
                },
                ["sessionKey"],
            ),
            read_session,
        ),
        _Tool(
            "list_files",
            roles.READ,
            "One directory of the agent's workspace: its subdirectories (ending in /) and files.",
            _schema({"path": _string("The directory, relative to the workspace (default: its root)")}),
            list_files,
        ),
        _Tool(
            "read_file",
            roles.READ,
            "A file of the agent's workspace (at most its first 96 KB).",
            _schema({"path": _string("The file's path, relative to the workspace")}, ["path"]),
            read_file,
        ),
    )
}
