"""Remote MCP servers, called by the gateway (ADR 0045): their settings, their cached tool lists, and calls.

A server is configured under `mcp.servers.{name}` (`ServerSpec`). No connection outlives a call: each read of the
tool list and each tool call connects (streamable HTTP or the older HTTP+SSE), initializes, does its one request and
closes, all within the server's `timeoutMs`, so it works the same from the local gateway's turn step and from the
agent's Lambda on AWS.

- `list_tools` reads the server's tools through the table's cache (`orbital.store.mcp`): fresh for 10 minutes, read
  again when forced (`mcp.refresh`, `mcp.test`), when a `notifications/tools/list_changed` came on any connection
  to the server, or when the settings it was read with changed. A failed read keeps the last good tools with status
  `error` (or `needs-login`), and is not tried again for a minute unless forced: a dead server holds up a tool list
  at most once a minute, for at most its timeout.
- `call_tool` calls one tool; `call_exposed` calls one by the name the model used (`mcp__{server}__{tool}`), and
  `call_many` several at once. A failure of the server (unreachable, too slow, a protocol error, a refusal, a
  dropped connection) is the call's error text, never an exception.

Everything a server sends is a stranger's: tool names, descriptions and schemas are capped before they are stored,
responses are cut off past `MAX_RESPONSE_BYTES`, and results are mapped by `orbital.domain.mcp_results`. Header
values (credentials) are never logged nor put in a message.

The sync functions work from a plain thread (the agent step, a method handler) and from a thread whose event loop
is running: the connection runs on an event loop of its own, in a thread of its own.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from orbital import __version__
from orbital.domain import mcp_names, mcp_results
from orbital.domain.approval_policy import matches_tool
from orbital.domain.config import as_dict
from orbital.store import mcp as cache

if TYPE_CHECKING:
    import httpx2
    from mcp import ClientSession

    from orbital.ports.services import Services

log = logging.getLogger("orbital.tools.mcp")

T = TypeVar("T")

DEFAULT_TIMEOUT_MS = 30_000
MAX_TIMEOUT_MS = 300_000
MIN_TIMEOUT_MS = 1_000
FRESH_MS = 10 * 60 * 1000
"""How long a tool list is used without listing again."""
RETRY_MS = 60 * 1000
"""How long a server whose listing failed is not tried again when building tool lists."""
GRACE_S = 5.0
"""Beyond a server's timeout, how long a call's thread is waited for before it is given up."""
MAX_RESPONSE_BYTES = 16 * 1024 * 1024
"""The most one HTTP response from a server may carry."""
MAX_TOOLS = 200
"""The most tools kept of one server's list."""
MAX_PAGES = 20
"""The most pages of a tool list read."""
MAX_DESCRIPTION_CHARS = 2000
MAX_SCHEMA_BYTES = 16 * 1024
MAX_LIST_BYTES = 300 * 1024
"""The most a server's stored list may take (a table item holds 400 KB)."""
MAX_ERROR_CHARS = 500

_CLIENT_NAME = "orbital"


# --- settings --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServerSpec:
    """One configured server (`mcp.servers.{name}`), as read on the handler path."""

    name: str
    url: str
    transport: str = "streamable-http"
    """`streamable-http` or `sse`."""
    headers: dict[str, str] = field(default_factory=dict, hash=False, compare=False, repr=False)
    """Sent with every request. Secrets: never logged, never returned."""
    enabled: bool = True
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    trust: str = "untrusted"
    """`untrusted` (its results taint the run) or `trusted`."""
    timeout_ms: int = DEFAULT_TIMEOUT_MS
    oauth: dict[str, Any] | None = field(default=None, hash=False, compare=False, repr=False)
    """The `oauth` section when the server needs a login (`orbital.tools.mcp_oauth` gives it meaning)."""

    @property
    def timeout_s(self) -> float:
        return self.timeout_ms / 1000

    @property
    def trusted(self) -> bool:
        return self.trust == "trusted"

    def allows(self, tool: str, exposed: str | None = None) -> bool:
        """Whether `tool` (the server's name for it; `exposed`, its offered name, matches too) is offered: it matches
        an `allow` pattern (or there is none) and no `deny` pattern."""
        names = [tool] if exposed is None else [tool, exposed]
        if self.allow and not any(matches_tool(p, n) for p in self.allow for n in names):
            return False
        return not any(matches_tool(p, n) for p in self.deny for n in names)

    def fingerprint(self) -> str:
        """What the cached tool list was read with (a hash: header values are secrets)."""
        text = json.dumps(
            [self.url, self.transport, sorted(self.headers.items()), bool(self.oauth)], separators=(",", ":")
        )
        return hashlib.sha256(text.encode()).hexdigest()[:32]


def _patterns(value: Any) -> tuple[str, ...]:
    return tuple(p for p in value if isinstance(p, str) and p.strip()) if isinstance(value, list) else ()


def _timeout(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return DEFAULT_TIMEOUT_MS
    return int(min(MAX_TIMEOUT_MS, max(MIN_TIMEOUT_MS, value)))


def _spec(name: str, raw: Any) -> ServerSpec | None:
    """The server `name` of the configuration, None when its entry is unusable (a bad name or URL)."""
    entry = as_dict(raw)
    url = entry.get("url")
    if not mcp_names.valid_server_name(name) or not isinstance(url, str):
        return None
    url = url.strip()
    if not url.lower().startswith(("http://", "https://")):
        return None
    headers = {str(k): str(v) for k, v in as_dict(entry.get("headers")).items() if isinstance(v, str | int | float)}
    tools = as_dict(entry.get("tools"))
    oauth = entry.get("oauth")
    return ServerSpec(
        name=name,
        url=url,
        transport="sse" if entry.get("transport") == "sse" else "streamable-http",
        headers=headers,
        enabled=entry.get("enabled") is not False,
        allow=_patterns(tools.get("allow")),
        deny=_patterns(tools.get("deny")),
        trust="trusted" if entry.get("trust") == "trusted" else "untrusted",
        timeout_ms=_timeout(entry.get("timeoutMs")),
        oauth=dict(oauth) if isinstance(oauth, dict) else None,
    )


def all_specs(config: dict[str, Any]) -> list[ServerSpec]:
    """Every usable configured server, enabled or not, by name."""
    servers = as_dict(as_dict(config.get("mcp")).get("servers"))
    found = (_spec(str(name), raw) for name, raw in sorted(servers.items()))
    return [spec for spec in found if spec is not None]


def specs(config: dict[str, Any]) -> list[ServerSpec]:
    """The enabled servers, by name."""
    return [spec for spec in all_specs(config) if spec.enabled]


def spec(config: dict[str, Any], name: str) -> ServerSpec | None:
    """The server `name` (enabled or not), None when it is not configured (or unusable)."""
    servers = as_dict(as_dict(config.get("mcp")).get("servers"))
    return _spec(name, servers[name]) if name in servers else None


# --- failures --------------------------------------------------------------------------------------------------


class McpFailureError(Exception):
    """A server could not be used: `status` (`error` or `needs-login`) and a message for people and the model."""

    def __init__(self, message: str, status: str = "error") -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def _one_line(text: Any, limit: int = MAX_ERROR_CHARS) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


@dataclass
class _Guard:
    """What one connection saw: the HTTP statuses, and the first failure of its transport (which ends the wait for
    an answer at once rather than at the timeout)."""

    statuses: list[int] = field(default_factory=list)
    posted: list[int] = field(default_factory=list)
    """The statuses of the POSTs (the requests themselves; a GET stream a server does not offer is no failure)."""
    failure: BaseException | None = None
    cancel: Callable[[], None] | None = None

    def fail(self, exc: BaseException) -> None:
        if self.failure is None:
            self.failure = exc
            if self.cancel is not None:
                self.cancel()


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _refused(spec: ServerSpec, status: int) -> McpFailureError:
    if spec.oauth is not None:
        return McpFailureError(
            f"the server needs a login (HTTP {status}): run `orbital mcp login {spec.name}`", status="needs-login"
        )
    return McpFailureError(
        f"the server refused the request (HTTP {status}): check mcp.servers.{spec.name}.headers"
        + (" (its credentials)" if spec.headers else "")
    )


def _failure(spec: ServerSpec, exc: BaseException, guard: _Guard) -> McpFailureError:
    """What went wrong, in words that name no credential (no header, no URL with its query)."""
    import httpx2
    from mcp.shared.exceptions import MCPError
    from mcp_types.jsonrpc import CONNECTION_CLOSED, REQUEST_TIMEOUT

    from orbital.tools import mcp_oauth  # lazy, as the SDK: it loads with a connection, not at the cold start

    refused = next((s for s in guard.statuses if s in (401, 403)), None)
    if refused is not None:
        return _refused(spec, refused)
    status = next((s for s in guard.posted if s >= 400), None)
    if status is not None:
        return McpFailureError(f"the server answered HTTP {status}")
    for leaf in [*([guard.failure] if guard.failure is not None else []), *_leaves(exc)]:
        if isinstance(leaf, McpFailureError):
            return leaf
        if isinstance(leaf, mcp_oauth.NeedsLoginError):
            return McpFailureError(str(leaf), status="needs-login")
        if isinstance(leaf, httpx2.HTTPStatusError):
            status = leaf.response.status_code
            if status in (401, 403):
                return _refused(spec, status)
            return McpFailureError(f"the server answered HTTP {status}")
        if isinstance(leaf, httpx2.ConnectError | ConnectionError):
            return McpFailureError("the server is unreachable (could not connect)")
        if isinstance(leaf, httpx2.TimeoutException | TimeoutError):
            return McpFailureError(f"no answer within {spec.timeout_ms} ms")
        if isinstance(leaf, httpx2.RemoteProtocolError | httpx2.ReadError):
            return McpFailureError("the server closed the connection before answering")
        if isinstance(leaf, MCPError) and leaf.code == CONNECTION_CLOSED:
            return McpFailureError(f"the connection ended before the answer ({_one_line(leaf.error.message, 200)})")
        if isinstance(leaf, MCPError) and leaf.code == REQUEST_TIMEOUT:
            return McpFailureError(f"no answer within {spec.timeout_ms} ms")
        if isinstance(leaf, MCPError):
            return McpFailureError(f"the server answered with an error: {_one_line(leaf.error.message)}")
    first = _leaves(exc)[0]
    return McpFailureError(f"the call failed ({type(first).__name__}: {_one_line(first, 200)})")


# --- connecting ------------------------------------------------------------------------------------------------


def _guarded_transport(guard: _Guard, *, refusal_ends: bool = True) -> httpx2.AsyncBaseTransport:
    import httpx2

    class _Capped(httpx2.AsyncByteStream):
        def __init__(self, inner: Any) -> None:
            self._inner = inner
            self._seen = 0

        async def __aiter__(self) -> AsyncIterator[bytes]:
            async for chunk in self._inner:
                self._seen += len(chunk)
                if self._seen > MAX_RESPONSE_BYTES:
                    failure = McpFailureError(f"the server sent more than {MAX_RESPONSE_BYTES} bytes in one response")
                    guard.fail(failure)
                    raise httpx2.ReadError("response too large")
                yield chunk

        async def aclose(self) -> None:
            close = getattr(self._inner, "aclose", None)
            if close is not None:
                await close()

    class _Guarded(httpx2.AsyncBaseTransport):
        def __init__(self) -> None:
            self._inner = httpx2.AsyncHTTPTransport()

        async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
            try:
                response = await self._inner.handle_async_request(request)
            except httpx2.TransportError as exc:
                guard.fail(exc)
                raise
            guard.statuses.append(response.status_code)
            if request.method == "POST":
                guard.posted.append(response.status_code)
            if response.status_code in (401, 403) and refusal_ends:  # a login's auth refreshes and retries first
                guard.fail(_refused_marker(response.status_code))
            return httpx2.Response(
                status_code=response.status_code,
                headers=response.headers,
                stream=_Capped(response.stream),
                extensions=response.extensions,
                request=request,
            )

        async def aclose(self) -> None:
            await self._inner.aclose()

    return _Guarded()


class _RefusedMarkerError(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status


def _refused_marker(status: int) -> _RefusedMarkerError:
    return _RefusedMarkerError(status)


def _http_client(
    spec: ServerSpec, guard: _Guard, auth: httpx2.Auth | None, headers: dict[str, Any] | None = None
) -> httpx2.AsyncClient:
    import httpx2

    return httpx2.AsyncClient(
        headers={**spec.headers, **(headers or {})},
        auth=auth,
        timeout=httpx2.Timeout(spec.timeout_s),
        transport=_guarded_transport(guard, refusal_ends=auth is None),
    )


@contextlib.asynccontextmanager
async def connect(
    spec: ServerSpec,
    auth: httpx2.Auth | None = None,
    *,
    guard: _Guard | None = None,
    on_tools_changed: Callable[[], None] | None = None,
) -> AsyncIterator[ClientSession]:
    """An initialized SDK session with the server, over its transport, with its headers (and `auth`, an httpx2 auth
    that adds a login's bearer). The caller bounds the time (`_within`); `on_tools_changed` is called when the
    server says its tool list changed."""
    import mcp_types as types  # lazy, as every SDK import here: loaded when a server is used, off the cold start
    from mcp import ClientSession
    from mcp.client.sse import sse_client
    from mcp.client.streamable_http import streamable_http_client

    guard = guard if guard is not None else _Guard()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            if on_tools_changed is not None:
                on_tools_changed()
        elif isinstance(message, Exception):
            guard.fail(message)

    async with contextlib.AsyncExitStack() as stack:
        if spec.transport == "sse":

            def factory(
                headers: dict[str, Any] | None = None,
                timeout: httpx2.Timeout | None = None,
                auth: httpx2.Auth | None = None,
            ) -> httpx2.AsyncClient:
                return _http_client(spec, guard, auth, headers)

            read, write = await stack.enter_async_context(
                sse_client(
                    spec.url,
                    timeout=spec.timeout_s,
                    sse_read_timeout=spec.timeout_s,
                    httpx_client_factory=factory,
                    auth=auth,
                )
            )
        else:
            client = await stack.enter_async_context(_http_client(spec, guard, auth))
            read, write = await stack.enter_async_context(streamable_http_client(spec.url, http_client=client))
        session = await stack.enter_async_context(
            ClientSession(
                read,
                write,
                read_timeout_seconds=spec.timeout_s,
                message_handler=on_message,
                client_info=types.Implementation(name=_CLIENT_NAME, version=__version__),
            )
        )
        await session.initialize()
        yield session


def _auth_for(services: Services, spec: ServerSpec) -> httpx2.Auth | None:
    """The httpx2 auth of a server that needs a login (`mcp_oauth`: its bearer, refreshed); None for the others (a
    server's own headers carry its credentials)."""
    from orbital.tools import mcp_oauth  # lazy, as the SDK: it loads with a connection, not at the cold start

    return mcp_oauth.auth_for(services, spec)


async def _within(
    services: Services, spec: ServerSpec, op: Callable[[ClientSession], Awaitable[T]], auth: httpx2.Auth | None
) -> T:
    """Connect, run `op` on the session, close: all within the server's timeout; any failure as `McpFailureError`."""
    import anyio

    from orbital.tools import mcp_oauth  # lazy, as the SDK: it loads with a connection, not at the cold start

    if spec.oauth is not None and mcp_oauth.auth_state(services, spec) != "ok":
        raise McpFailureError(mcp_oauth.needs_login_message(spec.name), status="needs-login")
    guard = _Guard()

    def changed() -> None:
        try:
            cache.mark_stale(services.table, spec.name)
        except Exception:
            log.warning("could not mark the tools of MCP server %s stale", spec.name, exc_info=True)

    done: list[T] = []
    try:
        with anyio.fail_after(spec.timeout_s):
            with anyio.CancelScope() as scope:
                guard.cancel = scope.cancel
                async with connect(spec, auth, guard=guard, on_tools_changed=changed) as session:
                    value = await op(session)
                    guard.cancel = None  # closing the connection may fail: the answer is in
                    done.append(value)
    except McpFailureError:
        if done:
            return done[0]
        raise
    except TimeoutError as exc:
        if done:
            return done[0]
        if guard.failure is not None or any(s in (401, 403) for s in guard.statuses):
            raise _failure(spec, exc, guard) from None
        raise McpFailureError(f"no answer within {spec.timeout_ms} ms") from None
    except Exception as exc:
        if done:
            return done[0]
        raise _failure(spec, exc, guard) from None
    if done:
        return done[0]
    raise _failure(spec, guard.failure or McpFailureError("the connection failed"), guard)


def _run(spec: ServerSpec, make: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine on an event loop of its own, in a thread of its own (the caller's thread may run a loop
    already), waiting at most the server's timeout and a grace."""
    import anyio

    box: dict[str, Any] = {}

    async def main() -> None:
        box["value"] = await make()

    def target() -> None:
        try:
            anyio.run(main)
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, name=f"mcp-{spec.name}", daemon=True)
    thread.start()
    thread.join(spec.timeout_s + GRACE_S)
    if thread.is_alive():
        log.warning("MCP server %s: the call's thread did not end within its timeout; left behind", spec.name)
        raise McpFailureError(f"no answer within {spec.timeout_ms} ms")
    if "error" in box:
        error = box["error"]
        if isinstance(error, McpFailureError):
            raise error
        raise McpFailureError(f"the call failed ({type(error).__name__})")
    return box["value"]


# --- tool lists ------------------------------------------------------------------------------------------------


@dataclass
class ToolList:
    """A server's tools as offered: `tools` are `{name (exposed), tool (the server's), description, inputSchema,
    allowed}`; `status` is `ok`, `error`, `needs-login` or `unknown` (never read)."""

    tools: list[dict[str, Any]]
    status: str
    error: str | None
    fetched_at: int | None
    checked_at: int | None = None

    @property
    def allowed(self) -> list[dict[str, Any]]:
        return [tool for tool in self.tools if tool.get("allowed")]


def _schema(value: Any) -> dict[str, Any]:
    schema = dict(value) if isinstance(value, dict) else {}
    if schema.get("type") != "object":
        schema = {"type": "object", "properties": {}} if not schema else {**schema, "type": "object"}
    if len(json.dumps(schema, ensure_ascii=False, default=str)) > MAX_SCHEMA_BYTES:
        return {"type": "object", "description": "(the server's input schema is too large to show)"}
    return schema


def _stored_tool(tool: Any) -> dict[str, Any] | None:
    """A listed tool as stored: its name, its description (capped) and its input schema (capped)."""
    data = mcp_results.wire(tool)
    name = data.get("name")
    if not isinstance(name, str) or not name or len(name) > 256:
        return None
    description = data.get("description")
    text = description if isinstance(description, str) else ""
    if len(text) > MAX_DESCRIPTION_CHARS:
        text = text[: MAX_DESCRIPTION_CHARS - 1] + "…"
    return {"name": name, "description": text, "inputSchema": _schema(data.get("inputSchema"))}


async def _list(session: ClientSession) -> tuple[list[dict[str, Any]], str | None]:
    """The server's tools (every page, capped), and a note when some were left out."""
    from mcp_types import PaginatedRequestParams

    tools: list[dict[str, Any]] = []
    size = 0
    cursor: str | None = None
    note: str | None = None
    for _ in range(MAX_PAGES):
        page = await session.list_tools(params=PaginatedRequestParams(cursor=cursor) if cursor else None)
        for tool in page.tools:
            stored = _stored_tool(tool)
            if stored is None:
                continue
            size += len(json.dumps(stored, ensure_ascii=False))
            if len(tools) >= MAX_TOOLS or size > MAX_LIST_BYTES:
                note = f"the server lists more tools than are kept (the first {len(tools)})"
                return tools, note
            tools.append(stored)
        cursor = page.next_cursor
        if not cursor:
            return tools, note
    return tools, f"the server's tool list has more than {MAX_PAGES} pages (the first {MAX_PAGES} are kept)"


def _view(spec: ServerSpec, cached: cache.CachedTools | None) -> ToolList:
    if cached is None:
        return ToolList([], "unknown", None, None)
    try:
        names = mcp_names.exposed_names(spec.name, [t["name"] for t in cached.tools])
    except ValueError as exc:
        return ToolList([], "error", str(exc), cached.fetched_at, cached.checked_at)
    by_tool = {t["name"]: t for t in cached.tools}
    tools = [
        {
            "name": exposed,
            "tool": original,
            "description": by_tool[original].get("description") or "",
            "inputSchema": by_tool[original].get("inputSchema") or {"type": "object", "properties": {}},
            "allowed": spec.allows(original, exposed),
        }
        for exposed, original in names.items()
    ]
    return ToolList(tools, cached.status, cached.last_error, cached.fetched_at, cached.checked_at)


def cached_tools(services: Services, spec: ServerSpec) -> ToolList:
    """The server's tools as last read, without connecting (`mcp.list`)."""
    cached = cache.load(services.table, spec.name)
    if cached is not None and cached.fingerprint != spec.fingerprint():
        cached = None
    return _view(spec, cached)


def _fresh(cached: cache.CachedTools | None, spec: ServerSpec, now_ms: int) -> bool:
    """Whether the cached list is used as it is: read with these settings, not marked stale, and either read less
    than 10 minutes ago, or failed less than a minute ago."""
    if cached is None or cached.fingerprint != spec.fingerprint() or cached.stale:
        return False
    if cached.status == "ok":
        return cached.fetched_at is not None and now_ms - cached.fetched_at < FRESH_MS
    return cached.checked_at is not None and now_ms - cached.checked_at < RETRY_MS


def list_tools(services: Services, spec: ServerSpec, *, force: bool = False) -> ToolList:
    """The server's tools, from the cache when it is fresh (see the module), else read now and cached."""
    table = services.table
    cached = cache.load(table, spec.name)
    now = services.now_ms()
    if not force and _fresh(cached, spec, now):
        return _view(spec, cached)
    same = cached if cached is not None and cached.fingerprint == spec.fingerprint() else None
    try:
        tools, note = _run(spec, lambda: _within(services, spec, _list, _auth_for(services, spec)))
    except McpFailureError as failure:
        log.info("MCP server %s: listing its tools failed: %s", spec.name, failure.message)
        updated = cache.CachedTools(
            server=spec.name,
            tools=same.tools if same is not None else [],
            fetched_at=same.fetched_at if same is not None else None,
            checked_at=services.now_ms(),
            status=failure.status,
            last_error=failure.message,
            fingerprint=spec.fingerprint(),
        )
    else:
        now = services.now_ms()
        updated = cache.CachedTools(
            server=spec.name,
            tools=tools,
            fetched_at=now,
            checked_at=now,
            status="ok",
            last_error=note,
            fingerprint=spec.fingerprint(),
        )
    cache.save(table, updated)
    return _view(spec, updated)


# --- calls -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CallOutcome:
    """A tool call's outcome as a node's `tool.result` has it: `result` (`{content, structuredContent?}`) or
    `error` (text)."""

    result: dict[str, Any] | None = None
    error: str | None = None


def _note_needs_login(services: Services, spec: ServerSpec, failure: McpFailureError) -> None:
    if failure.status != "needs-login":
        return
    try:
        cached = cache.load(services.table, spec.name) or cache.CachedTools(server=spec.name)
        cached.status = failure.status
        cached.last_error = failure.message
        cached.checked_at = services.now_ms()
        cached.fingerprint = spec.fingerprint()
        cache.save(services.table, cached)
    except Exception:
        log.warning("could not record that MCP server %s needs a login", spec.name, exc_info=True)


def call_tool(services: Services, spec: ServerSpec, tool: str, args: dict[str, Any]) -> CallOutcome:
    """Call the server's tool `tool` (its own name) with `args`. Every failure is the outcome's `error`."""
    import mcp_types as types

    if not isinstance(args, dict):
        return CallOutcome(error="the arguments must be an object")

    async def op(session: ClientSession) -> Any:
        request = types.CallToolRequest(params=types.CallToolRequestParams(name=tool, arguments=args))
        return await session.send_request(request, types.CallToolResult)

    try:
        raw = _run(spec, lambda: _within(services, spec, op, _auth_for(services, spec)))
    except McpFailureError as failure:
        log.info("MCP server %s: calling %s failed: %s", spec.name, _one_line(tool, 100), failure.message)
        _note_needs_login(services, spec, failure)
        return CallOutcome(error=f"MCP server {spec.name}: {failure.message}")
    result, error = mcp_results.convert(raw)
    return CallOutcome(result=result) if error is None else CallOutcome(error=error)


def resolve(services: Services, config: dict[str, Any], name: str) -> tuple[ServerSpec, str] | str:
    """The server and its own tool name behind an offered name (`mcp__{server}__{tool}`), or why there is none."""
    parts = mcp_names.split(name)
    if parts is None:
        return f"not an MCP tool name: {_one_line(name, 100)}"
    server = spec(config, parts[0])
    if server is None:
        return f"no MCP server named {parts[0]} is configured"
    if not server.enabled:
        return f"the MCP server {server.name} is disabled"
    listed = list_tools(services, server)
    found = next((t for t in listed.tools if t["name"] == name), None)
    if found is None:
        why = f" ({listed.error})" if listed.error else ""
        return f"the MCP server {server.name} has no tool {_one_line(name, 100)}{why}"
    if not found["allowed"]:
        return f"the tool {name} is not allowed by mcp.servers.{server.name}.tools"
    return server, str(found["tool"])


def call_exposed(services: Services, config: dict[str, Any], name: str, args: dict[str, Any]) -> CallOutcome:
    """Call a tool by the name the model used (`mcp__{server}__{tool}`): the server configured, enabled and listing
    it, the tool allowed."""
    found = resolve(services, config, name)
    if isinstance(found, str):
        return CallOutcome(error=found)
    return call_tool(services, found[0], found[1], args)


def call_many(
    services: Services, config: dict[str, Any], calls: Sequence[tuple[str, dict[str, Any]]]
) -> list[CallOutcome]:
    """Several calls by offered name (`call_exposed`), at once; the outcomes in the calls' order."""
    if not calls:
        return []
    if len(calls) == 1:
        return [call_exposed(services, config, calls[0][0], calls[0][1])]
    with ThreadPoolExecutor(max_workers=min(8, len(calls)), thread_name_prefix="mcp-calls") as pool:
        futures = [pool.submit(call_exposed, services, config, name, args) for name, args in calls]
        return [future.result() for future in futures]
