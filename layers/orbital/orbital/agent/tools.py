"""Running the tool calls of one model reply (spec §7.4, §8; fix F14).

`dispatch` goes through the calls in the model's order. Native tools that answer at once run here; calls that wait
for someone else are launched as deferred calls in one wait group (`engines/waitgroup.py`):

- `{nodeId}__{tool}` (kind `agent`): answered by the node's `tool.result`, or its loss; on timeout
  "Tool execution timed out".
- `gsv__LogsGet` (kind `agent-logs`): answered by the node's `logs.result`; on timeout "logs.get timed out ...".
- `gsv__SessionSend` (kind `agent-session`): answered by the end of the run it started in the other session; on
  timeout `{status: "timeout", ...}`.
- `gsv__Transfer` (kind `transfer`): answered by the transfer engine (done, failed, timed out).

A remote MCP server's tool (`mcp__{server}__{tool}`, ADR 0045) is neither: it is called from this step itself, after
the walk, the reply's MCP calls side by side, each bounded by its server's `timeoutMs` (`orbital.tools.mcp_calls`);
a server's failure is that call's error, never the run's.

Every call first goes through the approval gate (`approvals.decide`, ADR 0040): `deny` answers it at once with the
policy's error; `ask` makes it an approval, one more call of the wait group (kind `approval`, answered by the
decision), and stops the walk: the calls after it stay queued in the plan.

The execution then waits (AwaitTools) until every call of the group is answered or the group's deadline passes, and
the next turn step `resume`s: every answer — or the timeout outcome of a call nobody answered, claimed so a late
answer is dropped — and the approval's decision are recorded in the plan. While calls are left (an approved one,
those queued behind it) the plan goes on in a new round of the same group; once every call has its outcome they
become `toolResult` messages, in the model's call order, whatever order answers came in.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import math
import mimetypes
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from orbital.agent import approvals, budgets, client_tools, events, runs, settings, taint
from orbital.agent.waits import group_id, load_plan
from orbital.domain import approval_policy
from orbital.domain.config import as_dict
from orbital.domain.session_keys import canonicalize_with_config
from orbital.engines import deferred, waitgroup
from orbital.errors import RpcError
from orbital.protocol.frames import event_frame
from orbital.store import artifacts, keys
from orbital.tools import mcp_calls, native
from orbital.tools.catalog import find_node_for_tool
from orbital.tools.definitions import NATIVE_PREFIX

if TYPE_CHECKING:
    from orbital.ports.services import Services

log = logging.getLogger("orbital.agent.tools")

TIMED_OUT = "Tool execution timed out"
GROUP_INLINE_BYTES = 200 * 1024
"""A plan larger than this (big native results) is kept in S3 and referenced from the wait group."""
WAIT_MARGIN_S = 2
TRANSFER_MARGIN_MS = 30_000


@dataclass
class Iteration:
    """One model reply's tool calls: which run, which execution, which turn."""

    services: Services
    config: dict[str, Any]
    session_key: str
    agent_id: str
    run_id: str
    execution: str
    iteration: int
    now_ms: int
    client: client_tools.ClientTools | None = None
    """The tools of the socket that started the run, if it declared any (`agent.client_tools`)."""
    run: dict[str, Any] | None = None
    """The session's current run as the step read it (its taint, for the gate)."""

    @property
    def group_id(self) -> str:
        return group_id(self.execution, self.iteration)


@dataclass
class Launch:
    """An asynchronous call, prepared (validated) but not yet started."""

    call_id: str
    deadline_ms: int
    start: Callable[[], None]
    on_client: bool = False
    """A call of a tool of the socket that started the run (its result is the socket's already)."""


class _ImmediateError(Exception):
    """A call answered while being prepared (validation errors, fire-and-forget sends)."""

    def __init__(self, outcome: dict[str, Any]) -> None:
        super().__init__("immediate")
        self.outcome = outcome


def _error(message: str) -> _ImmediateError:
    return _ImmediateError({"error": message})


# --- dispatch --------------------------------------------------------------------------------------------------


def lease_ms(config: dict[str, Any], calls: list[dict[str, Any]]) -> int:
    """How long the tool calls of a reply may hold the run: `timeouts.toolMs`, or longer when it calls a remote MCP
    server whose `timeoutMs` is (its tools may be listed again, then called: twice its timeout)."""
    names = [str(block.get("name") or "") for block in calls]
    return max(settings.tool_timeout_ms(config), 2 * mcp_calls.timeout_ms(config, names))


def dispatch(it: Iteration, calls: list[dict[str, Any]]) -> tuple[list[dict[str, Any]] | None, int]:
    """Gate, then run or launch every tool call, in the model's order. Returns (toolResult messages, 0) when all
    answered at once, else (None, seconds to wait) with a wait group open for the execution to wait on."""
    plan: list[dict[str, Any]] = []
    for index, block in enumerate(calls):
        plan.append(
            {
                "toolCallId": block.get("id"),
                "name": str(block.get("name") or ""),
                "arguments": as_dict(block.get("arguments")),
                "index": index,
            }
        )
    return _advance(it, plan, 0)


def resume(it: Iteration, on_client: set[str] | None = None) -> tuple[list[dict[str, Any]] | None, int]:
    """After a wait: every call of the group gets its answer (or its timeout outcome), an approval its decision;
    then the plan goes on where it stopped (an approved call is launched, the calls queued behind it are gated in
    turn) in a new round of the same wait group. Returns (the toolResult messages in the model's call order, 0)
    once every call has its outcome, (None, seconds to wait) while some are still to come, (None, 0) when there is
    no such group (handled by an earlier attempt of this step)."""
    services = it.services
    rec = waitgroup.load(services, it.group_id)
    if rec is None:
        return None, 0
    deadline = int(as_dict(rec.data).get("deadlineMs") or 0)
    if int(rec.attrs.get("n") or 0) > 0 and it.now_ms < deadline:
        # calls outstanding and time left: not the end of this round's wait but a retried step that started it
        return None, max(1, math.ceil((deadline - it.now_ms) / 1000) + WAIT_MARGIN_S)
    plan = load_plan(services, rec.data)
    round_ = waitgroup.round_of(rec)
    call_ids = [str(e["callId"]) for e in plan if e.get("callId") and not e.get("approvalId") and "outcome" not in e]
    found = services.table.get_many(keys.pending_call(cid) for cid in call_ids)
    for entry in plan:
        if "outcome" in entry or not entry.get("callId"):
            continue
        if entry.get("approvalId"):
            outcome = approvals.conclude(services, str(entry["approvalId"]))
            entry.pop("callId", None)
            entry["decided"] = entry.pop("approvalId")
            if outcome is None:
                entry["approved"] = True
            else:
                entry["outcome"] = outcome
                entry.pop("arguments", None)
            continue
        entry["outcome"] = _answer_of(services, entry, found.get(keys.pending_call(str(entry.get("callId")))))
    if all("outcome" in e for e in plan):
        return _messages(it, plan, on_client), 0
    results, wait_s = _advance(it, plan, round_ + 1)
    if results is not None:
        _note_on_client(plan, on_client)
    return results, wait_s


def _note_on_client(plan: list[dict[str, Any]], on_client: set[str] | None) -> None:
    if on_client is not None:
        on_client.update(str(e.get("toolCallId")) for e in plan if e.get("onClient"))


def _messages(it: Iteration, plan: list[dict[str, Any]], on_client: set[str] | None) -> list[dict[str, Any]]:
    _note_on_client(plan, on_client)
    return [tool_result_message(it.services, it.session_key, e, e["outcome"]) for e in plan]


def _remembered(it: Iteration, verdict: approvals.Verdict, name: str, args: dict[str, Any], cache: list[Any]) -> bool:
    if not cache:
        cache.append(it.services.sessions.load_meta(it.session_key) or {})
    return approvals.remembered(cache[0], verdict, name, args)


def _advance(it: Iteration, plan: list[dict[str, Any]], round_: int) -> tuple[list[dict[str, Any]] | None, int]:
    """Go through the calls of the plan that have neither an outcome nor a launch yet, in order: each is gated
    (`approvals.decide`; an approved one is not asked about again), then answered at once or launched. A call the
    gate asks about stops the walk: it becomes the round's approval, and the calls after it stay queued."""
    env = native.ToolEnv(it.services, it.config, it.agent_id, it.session_key, it.now_ms)
    launches: list[Launch] = []
    meta_cache: list[Any] = []
    remote: list[tuple[dict[str, Any], mcp_calls.Call]] = []
    for entry in plan:
        if "outcome" in entry or entry.get("callId"):
            continue
        name = str(entry.get("name") or "")
        args = as_dict(entry.get("arguments"))
        tool_call_id = str(entry.get("toolCallId") or f"tool_call_{entry.get('index', 0)}")
        if not entry.pop("approved", False):
            verdict = approvals.decide(it.config, name, args, it.run)
            if verdict.decision == "deny":
                entry["outcome"] = {"error": approval_policy.denied_by_policy(verdict)}
                entry.pop("arguments", None)
                continue
            if verdict.decision == "ask" and not _remembered(it, verdict, name, args, meta_cache):
                launches.append(_approval(it, entry, tool_call_id, name, args, verdict))
                break
        entry.pop("arguments", None)
        if _remote_mcp(it, name):
            remote.append((entry, mcp_calls.Call(name, args, it.agent_id)))
            continue
        try:
            launch = _prepare(it, env, name, args, tool_call_id)
        except _ImmediateError as done:
            entry["outcome"] = done.outcome
        except native.ToolError as exc:
            entry["outcome"] = {"error": exc.message}
        except RpcError as exc:
            entry["outcome"] = {"error": exc.message}
        except Exception as exc:  # a tool bug becomes a tool error the model can see, not a failed run
            log.exception("tool %s failed", name)
            entry["outcome"] = {"error": str(exc) or type(exc).__name__}
        else:
            entry["callId"] = launch.call_id
            if launch.on_client:
                entry["onClient"] = True
            launches.append(launch)
    if remote:  # made here, side by side, each bounded by its server's timeoutMs
        outcomes = mcp_calls.call_many(it.services, it.config, [one for _, one in remote])
        for (entry, _), outcome in zip(remote, outcomes, strict=True):
            entry["outcome"] = outcome
    if not launches:
        return _messages(it, plan, None), 0
    deadline = max(launch.deadline_ms for launch in launches)
    wait_s = max(1, math.ceil((deadline - it.now_ms) / 1000) + WAIT_MARGIN_S)
    data = _store_plan(it, plan, deadline, round_)
    if round_ == 0:
        opened = waitgroup.open_group(it.services, it.group_id, data, len(launches))
    else:
        opened = waitgroup.reopen(it.services, it.group_id, data, len(launches), round_)
    if not opened:
        return None, _left(it)  # an earlier attempt of this step launched them: wait for those
    for launch in launches:
        try:
            launch.start()
        except Exception as exc:
            message = exc.message if isinstance(exc, RpcError) else (str(exc) or type(exc).__name__)
            log.warning("could not start tool call %s: %s", launch.call_id, message)
            _answer_failed_launch(it, launch.call_id, message)
    return None, wait_s


def _remote_mcp(it: Iteration, name: str) -> bool:
    """A call of a remote MCP server's tool, made in this step (not a tool of the socket that started the run, and
    one the model was offered)."""
    if not mcp_calls.is_remote_mcp(name):
        return False
    client = it.client
    if client is None:
        return True
    return name not in client.own and (client.offered is None or name in client.offered)


def _left(it: Iteration) -> int:
    """Seconds until the deadline of the group as an earlier attempt of this step opened it."""
    rec = waitgroup.load(it.services, it.group_id)
    deadline = int(as_dict(rec.data).get("deadlineMs") or 0) if rec is not None else 0
    return max(1, math.ceil((deadline - it.now_ms) / 1000) + WAIT_MARGIN_S)


def _approval(
    it: Iteration, entry: dict[str, Any], tool_call_id: str, name: str, args: dict[str, Any], verdict: Any
) -> Launch:
    """A call the gate asks about: the run pauses on an approval, waited for as one call of the wait group."""
    approval_id = approvals.new_id()
    run = it.run or {"runId": it.run_id, "execution": it.execution}
    approval = approvals.build(
        approval_id=approval_id,
        session_key=it.session_key,
        run=run,
        tool_call_id=tool_call_id,
        tool=name,
        args=args,
        verdict=verdict,
        wait_call_id=f"approval-{uuid.uuid4()}",
        group=it.group_id,
        iteration=it.iteration,
        now_ms=it.now_ms,
        timeout=approvals.timeout_ms(it.config),
    )
    entry["callId"] = approval["waitCallId"]
    entry["approvalId"] = approval_id

    def start() -> None:
        approvals.open_request(it.services, approval, run)

    return Launch(str(approval["waitCallId"]), int(approval["expiresAt"]), start)


def _store_plan(it: Iteration, plan: list[dict[str, Any]], deadline: int, round_: int = 0) -> dict[str, Any]:
    text = json.dumps(plan, separators=(",", ":"), ensure_ascii=False)
    if len(text.encode()) <= GROUP_INLINE_BYTES:
        return {"calls": plan, "deadlineMs": deadline}
    name = f"plan-{it.iteration}.json" if round_ == 0 else f"plan-{it.iteration}-{round_}.json"
    key = keys.run_blob(it.execution, name)
    it.services.workspace.put(key, text.encode(), content_type="application/json")
    return {"callsRef": key, "deadlineMs": deadline}


def _answer_failed_launch(it: Iteration, call_id: str, message: str) -> None:
    """A launch that failed to start: answer its call with the error (creating the record if need be)."""
    if deferred.settle(it.services, call_id, {"error": message}) is None:
        deferred.record_answered(it.services, call_id, {"error": message}, group=it.group_id)


def _pending(
    it: Iteration,
    kind: str,
    timeout_ms: int,
    *,
    node_id: str = "",
    node_connection_id: str = "",
    tool: str | None = None,
    on_timeout: dict[str, Any],
    extra: dict[str, Any] | None = None,
) -> deferred.PendingCall:
    return deferred.PendingCall(
        call_id=str(uuid.uuid4()),
        kind=kind,
        node_id=node_id,
        node_connection_id=node_connection_id,
        timeout_ms=timeout_ms,
        created_at=it.now_ms,
        tool=tool,
        extra={
            "sessionKey": it.session_key,
            "runId": it.run_id,
            "group": it.group_id,
            "onTimeout": on_timeout,
            **(extra or {}),
        },
    )


def _prepare(it: Iteration, env: native.ToolEnv, name: str, args: dict[str, Any], tool_call_id: str) -> Launch:
    """Validate one call. Raises _ImmediateError / ToolError when it is answered at once; returns its Launch
    otherwise."""
    if it.client is not None and it.client.offered is not None and name not in it.client.offered:
        raise _error(f"Tool not available in this conversation: {name}")
    if it.client is not None and name in it.client.own:  # never a backend tool's name, even one of the socket's
        return _client_tool(it, it.client, name, args, tool_call_id)
    if name == "gsv__LogsGet":
        return _logs(it, args)
    if name == "gsv__SessionSend":
        return _session_send(it, args)
    if name == "gsv__Transfer":
        return _transfer(it, args)
    if name.startswith(NATIVE_PREFIX):
        raise _ImmediateError({"result": native.run_sync(env, name, args)})
    return _node_tool(it, name, args)


def _node_tool(it: Iteration, name: str, args: dict[str, Any]) -> Launch:
    found = find_node_for_tool(it.services, name)
    if found is None:
        raise _error(f"No node provides tool: {name}")
    node, bare = found
    call = _pending(
        it,
        deferred.AGENT_TOOL,
        settings.tool_timeout_ms(it.config),
        node_id=node.node_id,
        node_connection_id=node.connection_id,
        tool=name,
        on_timeout={"error": TIMED_OUT},
    )

    def start() -> None:
        deferred.create(it.services, call)
        frame = event_frame("tool.invoke", {"callId": call.call_id, "tool": bare, "args": args})
        if not it.services.push(node.connection_id, frame):
            _answer_failed_launch(it, call.call_id, "Node not connected")

    return Launch(call.call_id, it.now_ms + call.timeout_ms, start)


def _client_tool(
    it: Iteration, client: client_tools.ClientTools, name: str, args: dict[str, Any], tool_call_id: str
) -> Launch:
    """A tool of the socket that started the run: asked of that socket alone, as a node is asked for its tools
    (the same pending call, wait group and deadline); the socket's loss fails it at once."""
    call = _pending(
        it,
        deferred.CLIENT_TOOL,
        settings.tool_timeout_ms(it.config),
        node_id=client.owner,
        node_connection_id=client.connection_id,
        tool=name,
        on_timeout={"error": TIMED_OUT},
    )

    def start() -> None:
        deferred.create(it.services, call)
        if not client_tools.send_call(it.services, client, it.run_id, call.call_id, name, args, tool_call_id):
            _answer_failed_launch(it, call.call_id, "Client not connected")

    return Launch(call.call_id, it.now_ms + call.timeout_ms, start, on_client=True)


def _logs(it: Iteration, args: dict[str, Any]) -> Launch:
    lines = args.get("lines", 100)
    if lines is None:
        lines = 100
    if isinstance(lines, bool) or not isinstance(lines, int | float) or not math.isfinite(lines) or lines < 1:
        raise _error("lines must be a positive number")
    count = min(5000, math.floor(lines))
    node_id = args.get("nodeId") if isinstance(args.get("nodeId"), str) and args.get("nodeId") else None
    repo = it.services.connections
    if node_id:
        node = repo.node(node_id)
        if node is None:
            raise _error(f"Node not connected: {node_id}")
    else:
        nodes = repo.nodes()
        if not nodes:
            raise _error("No nodes connected")
        if len(nodes) > 1:
            raise _error("nodeId required when multiple nodes are connected")
        node = nodes[0]
    timeout = settings.agent_logs_timeout_ms(it.config)
    call = _pending(
        it,
        deferred.AGENT_LOGS,
        timeout,
        node_id=node.node_id,
        node_connection_id=node.connection_id,
        on_timeout={"error": f"logs.get timed out for node {node.node_id} after {timeout}ms"},
        extra={"lines": count},
    )

    def start() -> None:
        deferred.create(it.services, call)
        if not it.services.push(node.connection_id, event_frame("logs.get", {"callId": call.call_id, "lines": count})):
            _answer_failed_launch(it, call.call_id, f"Node not connected: {node.node_id}")

    return Launch(call.call_id, it.now_ms + timeout, start)


def _session_send(it: Iteration, args: dict[str, Any]) -> Launch:
    raw_key = args.get("sessionKey")
    text = args.get("message")
    if not isinstance(raw_key, str) or not raw_key.strip():
        raise _error("sessionKey is required")
    if not isinstance(text, str) or not text.strip():
        raise _error("message is required")
    wait = args.get("waitSeconds", 30)
    if isinstance(wait, bool) or not isinstance(wait, int | float) or not math.isfinite(wait):
        wait = 30
    wait_s = max(0, min(120, math.floor(wait)))
    target = canonicalize_with_config(raw_key.strip(), it.config)
    run_id = str(uuid.uuid4())
    data = {"text": text, "origin": {"kind": "session-send", "from": it.session_key}}
    if wait_s == 0 or target == it.session_key:
        sent = _inject(it, target, data, run_id, None)
        result: dict[str, Any] = {"status": "accepted", "runId": run_id, "sessionKey": target, "queued": sent.queued}
        if wait_s and target == it.session_key:
            result["note"] = (
                "This is the session of the current run: the message runs after it, so no reply is awaited."
            )
        raise _ImmediateError({"result": result})
    timeout = wait_s * 1000
    call = _pending(
        it,
        deferred.AGENT_SESSION,
        timeout,
        on_timeout={"result": {"status": "timeout", "runId": run_id, "sessionKey": target, "waitedSeconds": wait_s}},
        extra={"target": target, "targetRunId": run_id},
    )

    def start() -> None:
        deferred.create(it.services, call)
        _inject(it, target, data, run_id, {"callId": call.call_id})

    return Launch(call.call_id, it.now_ms + timeout, start)


def _inject(
    it: Iteration, target: str, data: dict[str, Any], run_id: str, notify: dict[str, Any] | None
) -> runs.Submitted:
    try:
        return runs.submit(
            it.services,
            target,
            data,
            run_id=run_id,
            extra={"notify": notify, "origin": data["origin"]},
            emit_error=events.error_emitter(it.services),
        )
    except budgets.BudgetExceededError as exc:  # the target's budget (or the gateway's) refuses it: say which
        raise native.ToolError(exc.message) from None
    except RpcError:
        raise native.ToolError("Failed to inject message into session") from None


def _transfer(it: Iteration, args: dict[str, Any]) -> Launch:
    from orbital.engines import transfer  # lazy: only gsv__Transfer needs it (kept off the steps' cold start)

    source, destination = args.get("source"), args.get("destination")
    if not isinstance(source, str) or not source or not isinstance(destination, str) or not destination:
        raise _error("source and destination are required")
    mode = it.services.capabilities.default_transfer_mode
    timeout = transfer.timeout_ms(it.config) + TRANSFER_MARGIN_MS
    call_id = f"transfer-{uuid.uuid4()}"
    # validated by the engine as it starts: a bad endpoint or a missing node answers the call at once
    transfer.parse_endpoint(source)
    transfer.parse_endpoint(destination)

    def start() -> None:
        transfer.start(
            it.services,
            source,
            destination,
            agent_id=it.agent_id,
            mode=mode,
            session_key=it.session_key,
            call_id=call_id,
            extra={"group": it.group_id, "runId": it.run_id, "onTimeout": {"error": "Transfer timed out"}},
        )

    return Launch(call_id, it.now_ms + timeout, start)


# --- answers ------------------------------------------------------------------------------------------------


def _answer_of(services: Services, entry: dict[str, Any], rec: Any) -> dict[str, Any]:
    call_id = str(entry.get("callId"))
    if rec is None:
        return {"error": TIMED_OUT}
    if rec.attrs.get("st") == deferred.DONE and rec.attrs.get("out"):
        return deferred.outcome_of(services, rec)
    call = deferred.PendingCall.from_data(rec.data)
    given = call.extra.get("onTimeout")
    on_timeout: dict[str, Any] = given if isinstance(given, dict) else {"error": TIMED_OUT}
    claimed = deferred.claim(services, call_id, on_timeout)
    if claimed is None:  # answered just now
        again = services.table.get(keys.pending_call(call_id))
        return deferred.outcome_of(services, again) if again is not None else on_timeout
    return dict(on_timeout)


# --- results as messages ---------------------------------------------------------------------------------------


def _artifact_image(block: dict[str, Any]) -> bool:
    """An image block referencing an uploaded artifact (`media/{id}`; a dialect's client tool result), not its
    bytes. Nothing else in the bucket may be referenced so."""
    key = block.get("r2Key")
    prefix = keys.media_object("")
    return isinstance(key, str) and key.startswith(prefix) and bool(artifacts.NAME.match(key[len(prefix) :]))


def _is_block(block: Any) -> bool:
    if not isinstance(block, dict):
        return False
    if block.get("type") == "text":
        return isinstance(block.get("text"), str)
    if block.get("type") == "image":
        if not isinstance(block.get("mimeType"), str):
            return False
        return isinstance(block.get("data"), str) or ("data" not in block and _artifact_image(block))
    return False


def _structured(result: Any) -> bool:
    content = result.get("content") if isinstance(result, dict) else None
    return isinstance(content, list) and bool(content) and all(_is_block(b) for b in content)


def _store_image(services: Services, session_key: str, block: dict[str, Any]) -> dict[str, Any]:
    mime = str(block["mimeType"])
    try:
        body = base64.b64decode(block["data"], validate=True)
        ext = (mimetypes.guess_extension(mime) or ".bin").lstrip(".")
        key = keys.session_media(session_key, f"{uuid.uuid4()}.{ext}")
        services.workspace.put(key, body, content_type=mime)
    except (binascii.Error, ValueError, Exception) as exc:
        log.warning("storing a tool image failed: %s", type(exc).__name__)
        return {"type": "text", "text": f"[Image storage failed: {mime}]"}
    return {"type": "image", "r2Key": key, "mimeType": mime}


def tool_result_message(
    services: Services, session_key: str, entry: dict[str, Any], outcome: dict[str, Any]
) -> dict[str, Any]:
    """An outcome as a stored `toolResult` message (spec §7.4): errors as "Error: …"; structured results keep their
    text blocks and have their images stored in S3 and referenced (an image that references an uploaded artifact
    already is kept so); strings as they are; anything else as JSON."""
    message: dict[str, Any] = {
        "role": "toolResult",
        "toolCallId": entry.get("toolCallId"),
        "toolName": entry.get("name"),
        "isError": False,
        "timestamp": int(time.time() * 1000),
    }
    if "error" in outcome:
        message["content"] = [{"type": "text", "text": f"Error: {outcome['error']}"}]
        message["isError"] = True
        if outcome.get("taints"):  # the error is the tool's own words (an MCP server's), not the gateway's
            taint.record_tool_result(services, session_key, str(entry.get("name") or ""), message["timestamp"])
        return message
    taint.record_tool_result(services, session_key, str(entry.get("name") or ""), message["timestamp"])
    result = outcome.get("result")
    if isinstance(result, dict) and _structured(result):
        blocks = []
        for block in result["content"]:
            if block["type"] == "text":
                blocks.append(dict(block))
            elif "data" not in block:  # a reference to an artifact already stored
                blocks.append({"type": "image", "r2Key": block["r2Key"], "mimeType": block["mimeType"]})
            else:
                blocks.append(_store_image(services, session_key, block))
        message["content"] = blocks
    elif isinstance(result, str):
        message["content"] = [{"type": "text", "text": result}]
    else:
        message["content"] = [{"type": "text", "text": json.dumps(result, separators=(",", ":"), ensure_ascii=False)}]
    return message
