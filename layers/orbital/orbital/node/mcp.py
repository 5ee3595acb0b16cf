"""MCP servers on the node's machine: stdio servers the node starts, whose tools it offers as its own.

`orbital node --mcp NAME='command args...'` (repeatable) or `--mcp-config FILE` (`{"servers": {NAME: {command, args,
env, cwd, timeoutMs}}}`; the `mcpServers` key of the common desktop clients' files is read too) names the servers. The
node starts each one with the MCP SDK's stdio client when it starts, lists its tools and announces them in `connect` as
`mcp__{server}__{tool}` (`orbital.domain.mcp_names`, within 64 characters once the gateway puts `{nodeId}__` in front),
so the agent sees `{nodeId}__mcp__{server}__{tool}`. A `tool.invoke` of such a name is a `tools/call` on the server,
answered like any node tool (the same logs, the same large-result handling); the result is mapped by
`orbital.domain.mcp_results`, a server's `isError` result becoming the call's error.

A server that exits (or cannot be started) is started again with exponential backoff (1 s doubling to 60 s, back to
1 s once it has run a minute); while it is down its tools stay announced and their calls fail with a clear error.
When a server's tool list changes (it says so with `notifications/tools/list_changed`, or comes back with other
tools), the node announces the new list by reconnecting to the gateway once no tool call is in flight.

A server is a stranger to the gateway: its tool names are reduced to `[A-Za-z0-9_-]`, at most `MAX_TOOLS` of its tools
are offered, descriptions are cut at `MAX_DESCRIPTION_CHARS`, an input schema over `MAX_SCHEMA_BYTES` is replaced by a
plain object schema, and all of the node's MCP tool definitions together stay within `MAX_ANNOUNCED_BYTES` (the
`connect` request must fit the gateway's message limit). Starting, listing and every call are time-limited.

The servers' environment: the few variables the SDK passes by default (PATH, HOME, USER, ...), plus the server's own
`env`, whose values may name variables of the node's own environment as `${NAME}`: secrets stay on this machine, in
its environment or its config file, and never pass through the gateway. The node's own token is never passed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import anyio
import mcp_types as types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.message import SessionMessage

from orbital import __version__
from orbital.domain import mcp_names, mcp_results
from orbital.node.mcp_config import StdioServer

log = logging.getLogger("orbital.node")

NAME_LIMIT = 64
"""The longest tool name providers accept: the gateway's `{nodeId}__` prefix and the node's name share it."""
MAX_TOOLS = 128
MAX_DESCRIPTION_CHARS = 2048
MAX_SCHEMA_BYTES = 16 * 1024
MAX_ANNOUNCED_BYTES = 64 * 1024
"""All the MCP tool definitions of one node together, as JSON (the gateway accepts 128 KB in one message)."""
MAX_LIST_PAGES = 20
START_TIMEOUT_S = 30.0
"""How long a server has to start and answer `initialize` and `tools/list`."""
BACKOFF_BASE_S = 1.0
BACKOFF_CAP_S = 60.0
STABLE_AFTER_S = 60.0
STDERR_LINE_CHARS = 1000
OBJECT_SCHEMA: dict[str, Any] = {"type": "object"}


# -- tool definitions ---------------------------------------------------------------------------------------------


def tool_definitions(server: str, tools: list[types.Tool], node_id: str) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The node tool definitions for a server's tools ({name, description, inputSchema}) and {announced name: the
    server's own name}. Capped as the module says; the order is the names' order."""
    by_name = {tool.name: tool for tool in tools[:MAX_TOOLS]}
    budget = NAME_LIMIT - len(node_id) - 2
    try:
        names = mcp_names.exposed_names(server, list(by_name), budget=budget)
    except ValueError as exc:
        log.error("MCP server %s: %s", server, exc, extra={"fields": {"server": server}})
        return [], {}
    definitions = []
    for exposed, original in names.items():
        tool = by_name[original]
        definitions.append(
            {"name": exposed, "description": _description(server, tool), "inputSchema": _schema(tool.input_schema)}
        )
    return definitions, names


def _description(server: str, tool: types.Tool) -> str:
    text = (tool.description or tool.title or "").strip()
    if len(text) > MAX_DESCRIPTION_CHARS:
        text = text[:MAX_DESCRIPTION_CHARS] + " [...]"
    origin = f"(MCP server {server} on this node, tool {tool.name[:200]!r})"
    return f"{text} {origin}" if text else origin


def _schema(schema: Any) -> dict[str, Any]:
    if not isinstance(schema, dict):
        return dict(OBJECT_SCHEMA)
    try:
        size = len(json.dumps(schema))
    except (TypeError, ValueError):
        return dict(OBJECT_SCHEMA)
    if size > MAX_SCHEMA_BYTES or schema.get("type") != "object":
        return dict(OBJECT_SCHEMA)
    return schema


# -- the servers --------------------------------------------------------------------------------------------------


class McpCallError(Exception):
    """A call that failed: the text is the tool call's error."""


@dataclass
class _State:
    spec: StdioServer
    session: ClientSession | None = None
    definitions: list[dict[str, Any]] = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)
    status: str = "starting"
    error: str | None = None
    starts: int = 0
    listed: asyncio.Event = field(default_factory=asyncio.Event)
    relist: asyncio.Event = field(default_factory=asyncio.Event)


class McpHost:
    """The node's stdio MCP servers, supervised in the node's event loop."""

    def __init__(
        self,
        servers: list[StdioServer],
        *,
        node_id: str,
        workspace: Path,
        on_tools_changed: Callable[[], None] | None = None,
        backoff_base: float = BACKOFF_BASE_S,
        backoff_cap: float = BACKOFF_CAP_S,
        start_timeout: float = START_TIMEOUT_S,
    ) -> None:
        self.node_id = node_id
        self.workspace = workspace
        self.on_tools_changed = on_tools_changed
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.start_timeout = start_timeout
        self._states = {server.name: _State(server) for server in servers}
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False

    @property
    def servers(self) -> list[StdioServer]:
        return [state.spec for state in self._states.values()]

    def status(self) -> dict[str, dict[str, Any]]:
        return {
            name: {"status": s.status, "error": s.error, "tools": len(s.definitions), "starts": s.starts}
            for name, s in self._states.items()
        }

    async def start(self, wait: float | None = None) -> None:
        """Start every server; wait until each has listed its tools (or failed once), at most `wait` seconds (the
        start timeout by default)."""
        for state in self._states.values():
            self._tasks.append(asyncio.create_task(self._supervise(state), name=f"mcp-{state.spec.name}"))
        if not self._states:
            return
        waits = [asyncio.create_task(state.listed.wait()) for state in self._states.values()]
        try:
            await asyncio.wait(waits, timeout=self.start_timeout + 5 if wait is None else wait)
        finally:
            for task in waits:
                task.cancel()

    async def stop(self) -> None:
        self._stopping = True
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    def definitions(self) -> list[dict[str, Any]]:
        """The tools to announce: every server's, in the servers' order, within `MAX_ANNOUNCED_BYTES` together."""
        out: list[dict[str, Any]] = []
        used = 0
        for state in self._states.values():
            for definition in state.definitions:
                size = len(json.dumps(definition))
                if used + size > MAX_ANNOUNCED_BYTES:
                    log.warning(
                        "MCP tool %s not announced: the node's MCP tools would exceed %d bytes",
                        definition["name"],
                        MAX_ANNOUNCED_BYTES,
                        extra={"fields": {"server": state.spec.name}},
                    )
                    continue
                used += size
                out.append(definition)
        return out

    def owns(self, name: Any) -> bool:
        return self._find(name) is not None

    def _find(self, name: Any) -> tuple[_State, str] | None:
        split = mcp_names.split(name) if isinstance(name, str) else None
        if split is None:
            return None
        state = self._states.get(split[0])
        if state is None or name not in state.names:
            return None
        return state, state.names[name]

    async def call(self, name: str, args: Any) -> Any:
        """Call a tool by its announced name: its result as a node tool's result, or McpCallError."""
        found = self._find(name)
        if found is None:
            raise McpCallError(f"Tool not found: {name}")
        state, tool = found
        if args is None:
            args = {}
        if not isinstance(args, dict):
            raise McpCallError("args must be an object")
        session = state.session
        if session is None:
            why = f": {state.error}" if state.error else ""
            raise McpCallError(f"MCP server {state.spec.name} is not running ({state.status}{why})")
        timeout = state.spec.timeout_ms / 1000
        try:
            with anyio.fail_after(timeout):
                result = await session.call_tool(tool, args, read_timeout_seconds=timeout)
        except TimeoutError:
            raise McpCallError(
                f"MCP server {state.spec.name} did not answer {tool!r} within {state.spec.timeout_ms} ms"
            ) from None
        except Exception as exc:
            raise McpCallError(f"MCP server {state.spec.name} failed to call {tool!r}: {_describe(exc)}") from None
        answer, error = mcp_results.convert(result)
        if error is not None:
            raise McpCallError(error)
        return answer

    # -- supervision ----------------------------------------------------------------------------------------------
    async def _supervise(self, state: _State) -> None:
        attempt = 0
        name = state.spec.name
        while not self._stopping:
            started = time.monotonic()
            state.starts += 1
            try:
                await self._serve(state)
                problem = "exited"
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                problem = _describe(exc)
            finally:
                state.session = None
            state.listed.set()
            if self._stopping:
                break
            if time.monotonic() - started >= STABLE_AFTER_S:
                attempt = 0
            delay = min(self.backoff_cap, self.backoff_base * 2**attempt)
            attempt = min(attempt + 1, 30)
            state.status, state.error = "restarting", problem
            log.warning(
                "MCP server %s %s; starting it again in %.1f s",
                name,
                problem if problem == "exited" else f"failed: {problem}",
                delay,
                extra={"console": True, "fields": {"server": name, "starts": state.starts}},
            )
            await asyncio.sleep(delay)

    async def _serve(self, state: _State) -> None:
        """One run of the server: start, initialize, list, serve until its output ends."""
        spec = state.spec
        cwd = Path(spec.cwd).expanduser() if spec.cwd else self.workspace
        if not cwd.is_absolute():
            cwd = self.workspace / cwd
        if not cwd.is_dir():
            raise NotADirectoryError(f"working directory not found: {cwd}")
        params = StdioServerParameters(command=spec.command, args=list(spec.args), env=dict(spec.env), cwd=cwd)
        state.status, state.error = "starting", None
        errlog = _stderr_pipe(spec.name)
        try:
            async with stdio_client(params, errlog=errlog) as (read_stream, write_stream):
                errlog.close()  # the server has its copy: the pipe ends when the server does
                await self._session(state, read_stream, write_stream)
        finally:
            with contextlib.suppress(OSError):
                errlog.close()

    async def _session(self, state: _State, read_stream: Any, write_stream: Any) -> None:
        ended = anyio.Event()
        send, receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)

        async def forward() -> None:
            """The server's messages to the session, noting when its output ends (it exited)."""
            try:
                async with send:
                    async for item in read_stream:
                        await send.send(item)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                pass
            finally:
                ended.set()

        async def on_message(message: Any) -> None:
            if isinstance(message, types.ToolListChangedNotification):
                state.relist.set()

        async with anyio.create_task_group() as group:
            group.start_soon(forward)
            info = types.Implementation(name="orbital-node", version=__version__)
            async with ClientSession(receive, write_stream, message_handler=on_message, client_info=info) as session:
                with anyio.fail_after(self.start_timeout):
                    await session.initialize()
                    await self._list(state, session)
                state.session = session
                state.status = "ok"
                log.info(
                    "MCP server %s ready with %d tools",
                    state.spec.name,
                    len(state.definitions),
                    extra={"console": True, "fields": {"server": state.spec.name}},
                )
                state.listed.set()
                group.start_soon(self._relister, state, session)
                await ended.wait()
            group.cancel_scope.cancel()

    async def _relister(self, state: _State, session: ClientSession) -> None:
        while True:
            await state.relist.wait()
            state.relist.clear()
            try:
                with anyio.fail_after(self.start_timeout):
                    await self._list(state, session)
            except Exception as exc:
                log.warning(
                    "MCP server %s: listing its changed tools failed: %s",
                    state.spec.name,
                    _describe(exc),
                    extra={"fields": {"server": state.spec.name}},
                )

    async def _list(self, state: _State, session: ClientSession) -> None:
        tools: list[types.Tool] = []
        cursor: str | None = None
        for _ in range(MAX_LIST_PAGES):
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await session.list_tools(params=params)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor or len(tools) >= MAX_TOOLS:
                break
        if len(tools) > MAX_TOOLS:
            log.warning(
                "MCP server %s offers %d tools; the first %d are announced",
                state.spec.name,
                len(tools),
                MAX_TOOLS,
                extra={"fields": {"server": state.spec.name}},
            )
        definitions, names = tool_definitions(state.spec.name, tools, self.node_id)
        changed = definitions != state.definitions or names != state.names
        state.definitions, state.names = definitions, names
        if changed and self.on_tools_changed is not None:
            log.info(
                "MCP server %s now has %d tools",
                state.spec.name,
                len(definitions),
                extra={"console": True, "fields": {"server": state.spec.name}},
            )
            self.on_tools_changed()


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, NotADirectoryError):
        return str(exc)
    if isinstance(exc, FileNotFoundError):
        return f"command not found: {exc.filename or exc}"
    if isinstance(exc, BaseExceptionGroup):
        inner = exc.exceptions[0] if exc.exceptions else exc
        return _describe(inner) if inner is not exc else type(exc).__name__
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text[:500]}" if text else type(exc).__name__


def _log_stderr(name: str, fd: int) -> None:
    with open(fd, "rb") as stream:  # a pipe's descriptor
        for raw in stream:
            line = raw.decode("utf-8", "replace").rstrip()
            if len(line) > STDERR_LINE_CHARS:
                line = line[:STDERR_LINE_CHARS] + " [...]"
            if line:
                log.info("[mcp %s] %s", name, line, extra={"fields": {"server": name, "stream": "stderr"}})


def _stderr_pipe(name: str) -> TextIO:
    """The write end of a pipe for the server's stderr (the caller closes it once the server has its copy); a thread
    logs what comes out of the other end, line by line, each cut at `STDERR_LINE_CHARS`."""
    read_fd, write_fd = os.pipe()
    threading.Thread(target=_log_stderr, args=(name, read_fd), name=f"mcp-{name}-stderr", daemon=True).start()
    return os.fdopen(write_fd, "w")
