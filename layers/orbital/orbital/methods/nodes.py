"""Gateway ↔ node calls: tool.invoke / tool.request / tool.result, logs.get / logs.result, node.exec.event
(spec §2.1, §14.1, §14.2; fixes F1, F5), and the known nodes: node.forget (GSV's last protocol-1 release, §5)."""

from __future__ import annotations

import json
import logging
import math
import time
import uuid
from typing import TYPE_CHECKING, Any

from orbital.agent import events, runs
from orbital.agent.settings import logs_timeout_ms, tool_timeout_ms
from orbital.domain import roles
from orbital.domain.config import default_agent_id
from orbital.domain.ids import new_uuid
from orbital.engines import deferred, probes
from orbital.errors import BadRequestError, ConflictError, ForbiddenError, NotFoundError, RpcError, UnavailableError
from orbital.ports import lifecycle
from orbital.protocol.dispatch import DEFERRED
from orbital.protocol.frames import event_frame, fit
from orbital.protocol.params import GivenCount, GivenFlag, Items, Json, Number, Text, Whole
from orbital.protocol.registry import CLIENT, NODE, AckResult, Params, Result, Router
from orbital.store import conditions as cond
from orbital.store import keys
from orbital.tools import mcp_calls
from orbital.tools.catalog import find_node_for_tool

if TYPE_CHECKING:
    from orbital.ports.services import Services
    from orbital.protocol.context import CallContext
    from orbital.store.connections import Connection, NodeEntry

log = logging.getLogger("orbital.nodes")

router = Router("nodes")
AGENT_TOOL, AGENT_LOGS = deferred.AGENT_TOOL, deferred.AGENT_LOGS

EXEC_TTL_SECONDS = 24 * 3600
AWS_MCP_STEP_MS = 12_000
"""On AWS, `tool.invoke` of a remote MCP tool lists (when the list is stale) and calls within this each: the socket's
Lambda has 29 s. The agent's own calls have the server's whole `timeoutMs` (its Lambda has 900 s)."""
MAX_CALL_ID_CHARS = 256
"""A client-chosen call id (`tool.request`) is a key and data, never an execution name; this keeps it a sane key."""


def _dispatch_to_node(
    ctx: CallContext, node: NodeEntry, call: deferred.PendingCall, event: str, payload: dict[str, Any]
) -> None:
    """Record the call, post the event to the node, start the wait beside it (ADR 0003)."""
    services = ctx.services
    deferred.require_waits(services)
    deferred.create(services, call)
    if not services.sender.post(node.connection_id, event_frame(event, payload)):
        deferred.claim(services, call.call_id)
        lifecycle.disconnect(services, node.connection_id)
        raise UnavailableError("Node not connected")
    deferred.start_wait_after_send(services, call)


# --- tools ---------------------------------------------------------------------------------------------------


class ToolInvokeParams(Params):
    tool: str | None = None
    args: Json = None


class ToolInvokeResult(Result):
    result: Json = None


@router.method(
    "tool.invoke",
    params=ToolInvokeParams,
    result=ToolInvokeResult,
    deferred=True,
    modes=CLIENT,
    scope=roles.OPERATE,
    mode_error=(101, "Not connected"),
)
def tool_invoke(ctx: CallContext, params: ToolInvokeParams) -> Any:
    """Run a node tool (`{nodeId}__{tool}` or `{nodeId}:{tool}`) and answer with `{result}` when the node replies.
    Fails with 503 at once if the node disconnects and with 504 after `timeouts.toolMs` without an answer. A remote
    MCP server's tool (`mcp__{server}__{tool}`) is called at once, within the server's `timeoutMs` (on AWS at most
    12 s, in the socket's Lambda); its failure is a 500 with what went wrong."""
    if not params.tool:
        raise BadRequestError("tool required")
    if mcp_calls.is_remote_mcp(params.tool):
        return _invoke_remote_mcp(ctx, params.tool, params.args)
    found = find_node_for_tool(ctx.services, params.tool)
    if found is None:
        raise NotFoundError(f"No node provides tool: {params.tool}")
    node, bare = found
    call = deferred.PendingCall(
        call_id=new_uuid(),
        kind="tool",
        node_id=node.node_id,
        node_connection_id=node.connection_id,
        timeout_ms=tool_timeout_ms(ctx.config()),
        created_at=ctx.now_ms(),
        caller_connection_id=ctx.connection_id,
        frame_id=ctx.frame_id,
        tool=params.tool,
    )
    args = params.args if params.args is not None else {}
    _dispatch_to_node(ctx, node, call, "tool.invoke", {"callId": call.call_id, "tool": bare, "args": args})
    return DEFERRED


def _invoke_remote_mcp(ctx: CallContext, tool: str, args: Any) -> dict[str, Any]:
    config = ctx.config()
    if args is not None and not isinstance(args, dict):
        raise BadRequestError("args must be an object for an MCP tool")
    one = mcp_calls.Call(tool, args or {}, default_agent_id(config))
    cap = AWS_MCP_STEP_MS if ctx.services.capabilities.bounded_requests else None  # within the socket Lambda's 29 s
    outcome = mcp_calls.call(ctx.services, config, one, cap_ms=cap)
    if "error" in outcome:
        raise RpcError(str(outcome["error"]), code=500)
    return {"result": outcome.get("result")}


class ToolRequestParams(Params):
    callId: str | None = None
    tool: str | None = None
    args: Json = None
    sessionKey: str | None = None


class ToolRequestResult(Result):
    status: str


@router.method("tool.request", params=ToolRequestParams, result=ToolRequestResult, modes=CLIENT, scope=roles.OPERATE)
def tool_request(ctx: CallContext, params: ToolRequestParams) -> dict[str, Any]:
    """Send a session-routed tool call to its node; the result is kept on the call for the session's agent turn."""
    if not params.callId or not params.tool or not params.sessionKey:
        raise BadRequestError("callId, tool, and sessionKey required")
    if len(params.callId) > MAX_CALL_ID_CHARS:
        raise BadRequestError(f"callId too long (at most {MAX_CALL_ID_CHARS} characters)")
    if deferred.get(ctx.services, params.callId) is not None:
        raise ConflictError(f"callId already in use: {params.callId}")
    found = find_node_for_tool(ctx.services, params.tool)
    if found is None:
        raise NotFoundError(f"No node provides tool: {params.tool}")
    node, bare = found
    call = deferred.PendingCall(
        call_id=params.callId,
        kind="session",
        node_id=node.node_id,
        node_connection_id=node.connection_id,
        timeout_ms=tool_timeout_ms(ctx.config()),
        created_at=ctx.now_ms(),
        tool=params.tool,
        extra={"sessionKey": params.sessionKey},
    )
    args = params.args if params.args is not None else {}
    _dispatch_to_node(ctx, node, call, "tool.invoke", {"callId": call.call_id, "tool": bare, "args": args})
    return {"status": "sent"}


class ToolResultParams(Params):
    callId: str | None = None
    result: Json = None
    error: Json = None
    """A message, or any JSON value (sent on as its JSON text)."""


def _error_text(error: Any) -> str:
    return error if isinstance(error, str) else json.dumps(error)


def _authorize_node_answer(ctx: CallContext, call: deferred.PendingCall) -> None:
    conn = ctx.conn
    if conn is None or conn.mode != "node" or conn.node_id != call.node_id:
        raise ForbiddenError("Node not authorized for this call")


@router.method(
    "tool.result",
    params=ToolResultParams,
    result=AckResult,
    posts_without_waiting=True,
    modes=NODE,
    scope=roles.NODE,
    mode_error=(403, "Node not authorized for this call"),
)
def tool_result(ctx: CallContext, params: ToolResultParams) -> dict[str, Any]:
    """A node's answer to `tool.invoke`. Late or orphaned answers are acknowledged with `dropped: true`."""
    if not params.callId:
        raise BadRequestError("callId required")
    failed = params.error is not None and params.error != ""
    outcome = {"error": _error_text(params.error)} if failed else {"result": params.result}
    conn = ctx.conn
    assert conn is not None and conn.node_id is not None  # node mode only (the registry's rule)
    # a client's tool.invoke, the common answer, is claimed in one write; any other call is read by it
    tried = deferred.claim_answer(ctx.services, params.callId, conn.node_id, "tool")
    if tried.claimed is not None:
        return _delivered(ctx, tried.claimed, params.result, outcome)
    found = tried.found
    if found is None or found.call.kind not in deferred.TOOL_CALL_KINDS:
        raise NotFoundError("Unknown callId")
    _authorize_node_answer(ctx, found.call)
    if found.state != deferred.PENDING:
        return {"ok": True, "dropped": True}
    kind = found.call.kind
    if kind == AGENT_TOOL:  # an agent run waits for it: store the answer and count it done in the run's wait group
        claimed = deferred.settle(ctx.services, params.callId, outcome)
    else:
        claimed = deferred.claim(ctx.services, params.callId, outcome if kind == "session" else None)
    if claimed is None:
        return {"ok": True, "dropped": True}
    return _delivered(ctx, claimed, params.result, outcome)


def _delivered(
    ctx: CallContext, claimed: tuple[deferred.PendingCall, str | None], result: Any, outcome: dict[str, Any]
) -> dict[str, Any]:
    """After the claim of a node's answer: the answer to the client that asked (a client's tool.invoke), an exec
    session for a backgrounded command, and the acknowledgement for the node."""
    call, token = claimed
    delivered = True
    if call.kind == "tool":
        if "error" in outcome:
            delivered = deferred.answer(ctx.services, call, error={"code": 500, "message": outcome["error"]})
        else:
            delivered = deferred.answer(ctx.services, call, payload={"result": result})
    _maybe_register_exec_session(ctx, call, result)
    deferred.close_execution(ctx.services, token)
    return {"ok": True} if delivered else {"ok": True, "dropped": True}


def _maybe_register_exec_session(ctx: CallContext, call: deferred.PendingCall, result: Any) -> None:
    """A backgrounded command (`status: "running"` + `sessionId`) gets an async exec session for its events."""
    if not isinstance(result, dict):
        return
    status, session_id = result.get("status"), result.get("sessionId")
    if not (isinstance(status, str) and status.strip() == "running" and isinstance(session_id, str) and session_id):
        return
    now = ctx.now_ms()
    ctx.services.table.put(
        keys.exec_session(call.node_id, session_id),
        {
            "nodeId": call.node_id,
            "sessionId": session_id,
            "sessionKey": call.extra.get("sessionKey"),
            "callId": call.call_id,
            "createdAt": now,
            "updatedAt": now,
            "expiresAt": now + EXEC_TTL_SECONDS * 1000,
        },
        ttl=int(time.time()) + EXEC_TTL_SECONDS,
    )


@router.on_call_timeout("tool")
def _tool_timeout(services: Services, call: deferred.PendingCall) -> None:
    # GSV's text (its last protocol-1 release times these out too), then how long and which tool
    message = f"Tool request timed out after {call.timeout_ms}ms: {call.tool}"
    deferred.answer(services, call, error={"code": 504, "message": message, "retryable": True})


@router.on_call_timeout("session")
def _session_timeout(services: Services, call: deferred.PendingCall) -> None:
    services.table.update(
        keys.pending_call(call.call_id), set_attrs={"out": json.dumps({"error": "Tool execution timed out"})}
    )


@router.on_call_node_lost("session")
def _session_node_lost(services: Services, call: deferred.PendingCall, reason: str) -> None:
    services.table.update(keys.pending_call(call.call_id), set_attrs={"out": json.dumps({"error": reason})})


# --- logs ----------------------------------------------------------------------------------------------------


class LogsGetParams(Params):
    nodeId: str | None = None
    lines: GivenCount = None
    """1-5000 (default 100); anything but a positive number is refused with 400."""


class LogsGetResult(Result):
    nodeId: str
    lines: list[str]
    count: int
    truncated: bool


def parse_lines(value: Any) -> int:
    if value is None:
        return 100
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 1:
        raise BadRequestError("lines must be a positive number")
    return min(5000, int(value))


def pick_log_node(services: Services, node_id: str | None) -> NodeEntry:
    if node_id:
        node = services.connections.node(node_id)
        if node is None:
            raise UnavailableError(f"Node not connected: {node_id}")
        return node
    nodes = services.connections.nodes()
    if not nodes:
        raise UnavailableError("No nodes connected")
    if len(nodes) > 1:
        raise BadRequestError("nodeId required when multiple nodes are connected")
    return nodes[0]


@router.method(
    "logs.get",
    params=LogsGetParams,
    result=LogsGetResult,
    deferred=True,
    modes=CLIENT,
    scope=roles.OPERATE,
    mode_error=(101, "Not connected"),
)
def logs_get(ctx: CallContext, params: LogsGetParams) -> Any:
    """Fetch the last `lines` (default 100, max 5000) of a node's own log. Answered when the node replies, with 503
    if it disconnects and 504 after `timeouts.logsMs` (20 s). Lines that would not fit one WebSocket message (96 KB
    of JSON) are left out, oldest first, with `truncated: true`."""
    lines = parse_lines(params.lines)
    node = pick_log_node(ctx.services, params.nodeId)
    call = deferred.PendingCall(
        call_id=str(uuid.uuid4()),
        kind="logs",
        node_id=node.node_id,
        node_connection_id=node.connection_id,
        timeout_ms=logs_timeout_ms(ctx.config()),
        created_at=ctx.now_ms(),
        caller_connection_id=ctx.connection_id,
        frame_id=ctx.frame_id,
        extra={"lines": lines},
    )
    _dispatch_to_node(ctx, node, call, "logs.get", {"callId": call.call_id, "lines": lines})
    return DEFERRED


class LogsResultParams(Params):
    callId: str | None = None
    lines: Items = None
    truncated: GivenFlag = None
    error: Json = None


@router.method(
    "logs.result",
    params=LogsResultParams,
    result=AckResult,
    modes=NODE,
    scope=roles.NODE,
    mode_error=(403, "Node not authorized for this call"),
)
def logs_result(ctx: CallContext, params: LogsResultParams) -> dict[str, Any]:
    """A node's answer to `logs.get`."""
    if not params.callId:
        raise BadRequestError("callId required")
    found = deferred.get(ctx.services, params.callId)
    if found is None or found.call.kind not in {"logs", AGENT_LOGS}:
        raise NotFoundError("Unknown callId")
    _authorize_node_answer(ctx, found.call)
    if found.call.kind == AGENT_LOGS:
        return _agent_logs_result(ctx, found.call, params)
    claimed = deferred.claim(ctx.services, params.callId)
    if claimed is None:
        return {"ok": True, "dropped": True}
    call, token = claimed
    if params.error is not None and params.error != "":
        delivered = deferred.answer(ctx.services, call, error={"code": 500, "message": _error_text(params.error)})
    else:
        lines, cut = fit([str(x) for x in params.lines or []], newest_last=True)
        truncated = bool(params.truncated) or cut
        payload = {"nodeId": call.node_id, "lines": lines, "count": len(lines), "truncated": truncated}
        delivered = deferred.answer(ctx.services, call, payload=payload)
    deferred.close_execution(ctx.services, token)
    return {"ok": True} if delivered else {"ok": True, "dropped": True}


def _agent_logs_result(ctx: CallContext, call: deferred.PendingCall, params: LogsResultParams) -> dict[str, Any]:
    """`logs.result` for a gsv__LogsGet of an agent run: the answer goes to the run's wait group."""
    if params.error is not None and params.error != "":
        outcome: dict[str, Any] = {"error": _error_text(params.error)}
    else:
        lines, cut = fit([str(x) for x in params.lines or []], newest_last=True)
        truncated = bool(params.truncated) or cut
        outcome = {"result": {"nodeId": call.node_id, "lines": lines, "count": len(lines), "truncated": truncated}}
    if deferred.settle(ctx.services, call.call_id, outcome) is None:
        return {"ok": True, "dropped": True}
    return {"ok": True}


@router.on_call_timeout("logs")
def _logs_timeout(services: Services, call: deferred.PendingCall) -> None:
    message = f"logs.get timed out after {call.timeout_ms}ms (node {call.node_id})"  # GSV's text, then the node
    deferred.answer(services, call, error={"code": 504, "message": message, "retryable": True})


# --- exec events -----------------------------------------------------------------------------------------------

EXEC_EVENTS = {"started", "finished", "failed", "timed_out"}


class ExecEventParams(Params):
    # lenient: an event it cannot use is acknowledged with `dropped: true`, never refused
    eventId: Text = None
    sessionId: Text = None
    event: Text = None
    callId: Text = None
    exitCode: Whole = None
    signal: Text = None
    outputTail: Text = None
    startedAt: Number = None
    endedAt: Number = None


@router.method(
    "node.exec.event",
    params=ExecEventParams,
    result=AckResult,
    mode_error=(403, "Only node clients can submit exec events"),
    modes=NODE,
    scope=roles.NODE,
)
def node_exec_event(ctx: CallContext, params: ExecEventParams) -> dict[str, Any]:
    """Lifecycle of a backgrounded command. Terminal events are stored for the session that started it."""
    assert ctx.conn is not None and ctx.conn.node_id is not None
    node_id = ctx.conn.node_id
    session_id = (params.sessionId or "").strip()
    if not session_id or params.event not in EXEC_EVENTS:
        return {"ok": True, "dropped": True}
    event_id = (params.eventId or "").strip()
    if not event_id:
        parts = [
            node_id,
            session_id,
            params.event,
            params.callId,
            params.startedAt,
            params.endedAt,
            params.exitCode,
            params.signal,
        ]
        event_id = ":".join(str(p) for p in parts if p is not None and p != "")
    table = ctx.services.table
    stored = table.get(keys.exec_event(node_id, session_id, event_id)) if params.event != "started" else None
    if stored is not None:  # a repeat: acknowledged, not run again; delivered now if the first try could not
        if stored.attrs.get("delivered") is not True and not _inject_completion(ctx.services, stored.data):
            raise UnavailableError("Could not deliver the event to its session; try again", retryable=True)
        return {"ok": True}
    mapping = table.get(keys.exec_session(node_id, session_id))
    if mapping is None:
        return {"ok": True, "dropped": True}
    now = ctx.now_ms()
    if params.event == "started":
        data = dict(mapping.data, updatedAt=now, expiresAt=now + EXEC_TTL_SECONDS * 1000)
        table.put(keys.exec_session(node_id, session_id), data, ttl=int(time.time()) + EXEC_TTL_SECONDS)
        return {"ok": True}
    tail = params.outputTail.strip()[-4000:] if params.outputTail is not None else None
    record = {
        "eventId": event_id,
        "nodeId": node_id,
        "sessionId": session_id,
        "sessionKey": mapping.data.get("sessionKey"),
        "callId": mapping.data.get("callId"),
        "event": params.event,
        "exitCode": params.exitCode,
        "signal": params.signal.strip() if params.signal is not None else None,
        "outputTail": tail,
        "startedAt": params.startedAt,
        "endedAt": params.endedAt,
        "receivedAt": now,
        "delivered": False,
    }
    try:
        table.put(
            keys.exec_event(node_id, session_id, event_id),
            record,
            ttl=int(time.time()) + EXEC_TTL_SECONDS,
            condition=cond.not_exists("PK"),
        )
    except ConflictError:
        return {"ok": True}  # already stored: duplicates are acknowledged, not repeated
    table.delete(keys.exec_session(node_id, session_id))
    if not _inject_completion(ctx.services, record):
        # stored but not delivered: the node keeps it and sends it again, which delivers it then
        raise UnavailableError("Could not deliver the event to its session; try again", retryable=True)
    return {"ok": True}


def _claim_delivery(services: Services, record: dict[str, Any], claim: int) -> bool:
    """Exactly one delivery attempt at a time (a repeat can arrive in a parallel Lambda): `dl` holds the attempt's
    time while it runs, 0 after a failed one."""
    key = keys.exec_event(str(record["nodeId"]), str(record["sessionId"]), str(record["eventId"]))
    try:
        services.table.update(
            key,
            set_attrs={"dl": claim},
            condition=cond.not_exists("dl") | cond.eq("dl", 0),
            return_values="NONE",
        )
    except ConflictError:
        return False
    return True


def _inject_completion(services: Services, record: dict[str, Any]) -> bool:
    """Spec §14.2: a finished background command becomes a user-role system event in the session that started it,
    ahead of queued user messages (an agent turn of its own; the reply goes to clients, not to channels)."""
    session_key = record.get("sessionKey")
    if not isinstance(session_key, str) or not session_key:
        return True  # nobody to tell
    if not _claim_delivery(services, record, int(time.time() * 1000)):
        return True  # another attempt is delivering it (or did)
    fields = ("eventId", "nodeId", "sessionId", "callId", "event", "exitCode", "signal", "outputTail", "startedAt")
    body = {name: record.get(name) for name in (*fields, "endedAt")}
    text = "System event: async_exec_completion\n" + json.dumps(body, separators=(",", ":"), ensure_ascii=False)
    try:
        runs.submit(
            services,
            session_key,
            {"text": text},
            priority=True,
            extra={"origin": {"kind": "exec-event", "eventId": record.get("eventId")}},
            emit_error=events.error_emitter(services),
            check_budget=False,  # a refusal would only have the delivery retried; the run stops at the budget
        )
    except Exception:
        log.exception("could not deliver exec event %s to %s", record.get("eventId"), session_key)
        services.table.update(
            keys.exec_event(str(record["nodeId"]), str(record["sessionId"]), str(record["eventId"])),
            set_attrs={"dl": 0},
        )
        return False
    services.table.update(
        keys.exec_event(str(record["nodeId"]), str(record["sessionId"]), str(record["eventId"])),
        set_attrs={"delivered": True},
    )
    return True


# --- node loss and replacement ---------------------------------------------------------------------------------


@router.on_node_gone
def _node_gone(services: Services, conn: Connection) -> None:
    assert conn.node_id is not None
    deferred.fail_node_calls(services, conn.node_id, f"Node disconnected: {conn.node_id}")
    services.connections.node_left(conn.node_id, services.now_ms())


@router.on_node_connected
def _node_connected(ctx: CallContext, node_id: str, previous: str | None) -> None:
    if previous:
        reason = f"Node replaced during log request: {node_id}"
        deferred.fail_node_calls(ctx.services, node_id, reason, kinds={"logs", AGENT_LOGS})
        reason = f"Node replaced during tool request: {node_id}"
        deferred.fail_node_calls(ctx.services, node_id, reason, kinds=set(deferred.TOOL_CALL_KINDS))


# --- known nodes -----------------------------------------------------------------------------------------------

FORGOTTEN = "Forgotten from node registry"
"""The close reason of a node's socket that `node.forget` ends (GSV's)."""


class NodeForgetParams(Params):
    nodeId: Text = None
    force: GivenFlag = None
    """Only `true` disconnects a connected node."""


class NodeForgetResult(Result):
    ok: bool
    nodeId: str
    removed: bool
    """Whether the gateway knew the node (an unknown id is no error)."""
    disconnected: bool
    """Whether its socket was closed (`force: true` on a connected node)."""


@router.method("node.forget", params=NodeForgetParams, result=NodeForgetResult, modes=CLIENT, scope=roles.OPERATE)
def node_forget(ctx: CallContext, params: NodeForgetParams) -> dict[str, Any]:
    """Remove a node from the known nodes (they outlive their sockets; 400 `nodeId required` without one, and an
    unknown id is answered with `removed: false`). A connected node needs `force: true`
    (else 409 `Node {nodeId} is still connected (use force=true to disconnect and forget)`): its socket is then closed
    (1000 `Forgotten from node registry`), its tools leave `tools.list` at once, and whatever was pending on it
    fails with 503 `Node removed from registry: {nodeId}` (its transfers with `Node disconnected: {nodeId}`). A
    node that connects again is known again."""
    node_id = (params.nodeId or "").strip()
    if not node_id:
        raise BadRequestError("nodeId required")
    services = ctx.services
    node = services.connections.node(node_id)
    if node is not None and params.force is not True:
        raise ConflictError(f"Node {node_id} is still connected (use force=true to disconnect and forget)")
    disconnected = False
    if node is not None:
        deferred.fail_node_calls(services, node_id, f"Node removed from registry: {node_id}")
        lifecycle.disconnect(services, node.connection_id)  # the node's hooks: its transfers fail, probes wait
        sender, connection_id = services.sender, node.connection_id

        def close_socket() -> None:
            sender.close(connection_id, 1000, FORGOTTEN)

        ctx.after_reply.append(close_socket)
        disconnected = True
    removed = services.connections.forget_node(node_id) or disconnected
    for probe in probes.node_probes(services, node_id):
        probes.discard(services, probe, f"Node removed from registry: {node_id}")
    return {"ok": True, "nodeId": node_id, "removed": removed, "disconnected": disconnected}
