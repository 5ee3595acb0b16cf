"""transfer.meta / transfer.accept / transfer.complete / transfer.done (spec §2.7, §4) and `transfer.request`,
Orbital's RPC to start a transfer from a client (the agent's gsv__Transfer tool uses the same engine).

A node may call `transfer.request` for one thing only: to save the whole result of a tool call it is answering,
too large for one WebSocket message, from a file of its own to `gsv:tool-results/{callId}.{ext}` in the workspace
of the agent the call belongs to (then it answers the call with a preview and that pointer). The transfer ends in
time for the answer: before the call's own timeout."""

from __future__ import annotations

import base64
import binascii
from typing import TYPE_CHECKING, Any

from orbital.domain import roles
from orbital.domain.config import default_agent_id
from orbital.domain.session_keys import session_agent_id
from orbital.domain.workspace_paths import TOOL_RESULTS_DIR, is_tool_result_path, validate_agent_id
from orbital.engines import deferred, transfer
from orbital.errors import BadRequestError, ConflictError, ForbiddenError, NotFoundError
from orbital.protocol.dispatch import DEFERRED
from orbital.protocol.frames import unpack_chunk
from orbital.protocol.params import GivenCount, Json, Text, Whole
from orbital.protocol.registry import CLIENT, NODE, OkResult, Params, Result, Router

if TYPE_CHECKING:
    from orbital.ports.services import Services
    from orbital.protocol.context import CallContext

router = Router("transfer")


class TransferStepParams(Params):
    transferId: Whole = None
    size: GivenCount = None
    """A non-negative integer, or the transfer fails with that message."""
    mime: Text = None
    error: Json = None
    bytesWritten: Whole = None
    bytesSent: Whole = None


def _transfer_id(params: TransferStepParams) -> int:
    if params.transferId is None:
        raise BadRequestError("transferId required")
    return params.transferId


@router.method("transfer.meta", params=TransferStepParams, result=OkResult, modes=NODE, scope=roles.NODE)
def transfer_meta(ctx: CallContext, params: TransferStepParams) -> dict[str, Any]:
    """Source node: size and MIME type of the file it will send (or `error`)."""
    transfer.on_meta(ctx.services, ctx.conn, _transfer_id(params), params.size, params.mime, params.error)
    return {"ok": True}


@router.method("transfer.accept", params=TransferStepParams, result=OkResult, modes=NODE, scope=roles.NODE)
def transfer_accept(ctx: CallContext, params: TransferStepParams) -> dict[str, Any]:
    """Destination node: ready to receive (or `error`)."""
    transfer.on_accept(ctx.services, ctx.conn, _transfer_id(params), params.error)
    return {"ok": True}


@router.method("transfer.complete", params=TransferStepParams, result=OkResult, modes=NODE, scope=roles.NODE)
def transfer_complete(ctx: CallContext, params: TransferStepParams) -> dict[str, Any]:
    """Source node: every byte has been sent (or `error`: it could not send them). `bytesSent` (optional) says how
    many: fewer than announced fails the transfer at once; otherwise it finishes when every chunk has landed (chunks
    may still be on their way when this arrives)."""
    transfer.on_complete(ctx.services, ctx.conn, _transfer_id(params), params.error, params.bytesSent)
    return {"ok": True}


@router.method("transfer.done", params=TransferStepParams, result=OkResult, modes=NODE, scope=roles.NODE)
def transfer_done(ctx: CallContext, params: TransferStepParams) -> dict[str, Any]:
    """Destination node: the file is in place (`bytesWritten`), or `error`."""
    transfer.on_done(ctx.services, ctx.conn, _transfer_id(params), params.bytesWritten, params.error)
    return {"ok": True}


TOOL_RESULT_MARGIN_MS = 5_000
"""How long before a tool call's own timeout the transfer saving its result must end, so that the node's answer
(with the pointer, or the note that saving failed) still reaches the caller."""
MIN_TOOL_RESULT_TIMEOUT_MS = 1_000


class TransferRequestParams(Params):
    source: str | None = None
    destination: str | None = None
    mode: str | None = None
    agentId: str | None = None
    callId: str | None = None
    """Node mode only: the tool call whose result the file holds."""


class TransferRequestResult(Result):
    source: str
    destination: str
    bytesTransferred: int
    mime: str | None = None


@router.method(
    "transfer.request",
    params=TransferRequestParams,
    result=TransferRequestResult,
    modes=CLIENT | NODE,
    scope={"client": roles.OPERATE, "node": roles.NODE},
    deferred=True,
)
def transfer_request(ctx: CallContext, params: TransferRequestParams) -> Any:
    """Copy a file `{nodeId}:{path}` or `gsv:{path}` (the agent workspace) to another endpoint. `mode` is
    "chunks" (over the socket) or "presigned" (S3 URLs; the default on AWS). Answered when the copy is complete.

    A node may only save the whole result of a tool call it has not answered yet (`callId`), too large for one
    message: from its own file to `gsv:tool-results/{callId}.{ext}` (ext: txt, json, png, jpg, gif or webp; a call
    id with characters other than letters, digits, `_` and `-` has them replaced and a hash of it appended) in the
    workspace of the call's agent (its session's, else the default agent); anything else is refused (403; 404 for a
    call it does not hold, 409 for one already answered). That transfer fails with 504 five seconds before the
    call's own timeout, if it is not done by then."""
    if not params.source or not params.destination:
        raise BadRequestError("source and destination required")
    timeout: int | None = None
    if ctx.conn is not None and ctx.conn.mode == "node":
        agent, timeout = _tool_result_upload(ctx, params)
    else:
        agent = validate_agent_id(params.agentId, default_agent_id(ctx.config()))
    mode = params.mode or ctx.services.capabilities.default_transfer_mode
    transfer.start(
        ctx.services,
        params.source,
        params.destination,
        agent_id=agent,
        mode=mode,
        caller_connection_id=ctx.connection_id,
        frame_id=ctx.frame_id,
        timeout=timeout,
    )
    return DEFERRED


def _tool_result_upload(ctx: CallContext, params: TransferRequestParams) -> tuple[str, int]:
    """Check a node's transfer.request (see `transfer_request`): the agent whose workspace receives the result, and
    how long the transfer may take."""
    assert ctx.conn is not None and params.source is not None and params.destination is not None
    node_id = ctx.conn.node_id
    if not params.callId:
        raise BadRequestError("callId required")
    source, destination = transfer.parse_endpoint(params.source), transfer.parse_endpoint(params.destination)
    if source.node != node_id:
        raise ForbiddenError("A node may only send its own files")
    if not destination.is_workspace or not is_tool_result_path(destination.path, params.callId):
        raise ForbiddenError(f"A node may only save a tool result, to gsv:{TOOL_RESULTS_DIR}/{{callId}}.{{ext}}")
    found = deferred.get(ctx.services, params.callId)
    if found is None or found.call.kind not in deferred.TOOL_CALL_KINDS or found.call.node_id != node_id:
        raise NotFoundError("Unknown callId")
    if found.state != deferred.PENDING:
        raise ConflictError("Call already answered")
    call = found.call
    session_key = call.extra.get("sessionKey")
    if isinstance(session_key, str) and session_key:
        agent = session_agent_id(session_key)
    else:
        agent = default_agent_id(ctx.config())
    left = call.created_at + call.timeout_ms - ctx.now_ms() - TOOL_RESULT_MARGIN_MS
    limit = transfer.timeout_ms(ctx.config())
    return agent, max(MIN_TOOL_RESULT_TIMEOUT_MS, min(limit, left))


# --- chunk frames ----------------------------------------------------------------------------------------------


@router.on_binary_frame
def _binary_chunk(services: Services, connection_id: str, payload: bytes) -> None:
    unpacked = unpack_chunk(payload)
    if unpacked is not None:
        transfer.on_chunk(services, connection_id, unpacked[0], unpacked[1], None)


@router.on_bin_frame
def _text_chunk(services: Services, connection_id: str, frame: dict[str, Any]) -> dict[str, Any] | None:
    tid, data, offset = frame.get("transferId"), frame.get("data"), frame.get("offset")
    if not isinstance(tid, int) or not isinstance(data, str):
        return None
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None
    transfer.on_chunk(services, connection_id, tid, raw, offset if isinstance(offset, int) and offset >= 0 else None)
    return None


# --- the engine's reactions to timeouts and node loss ----------------------------------------------------------

router.on_call_timeout(transfer.CALL_KIND)(transfer.on_call_timeout)
router.on_call_node_lost(transfer.CALL_KIND)(transfer.on_call_node_lost)
router.on_node_gone(transfer.on_node_gone)
