"""transfer.meta / transfer.accept / transfer.complete / transfer.done (spec §2.7, §4) and `transfer.request`,
Orbital's RPC to start a transfer from a client (the agent's gsv__Transfer tool uses the same engine)."""

from __future__ import annotations

import base64
import binascii
from typing import TYPE_CHECKING, Any

from orbital.domain.config import default_agent_id
from orbital.domain.workspace_paths import validate_agent_id
from orbital.engines import transfer
from orbital.errors import BadRequestError
from orbital.protocol.dispatch import DEFERRED
from orbital.protocol.frames import unpack_chunk
from orbital.protocol.params import GivenCount, Json, Text, Whole
from orbital.protocol.registry import CLIENT, NODE, Params, Result, Router

if TYPE_CHECKING:
    from orbital.protocol.context import CallContext
    from orbital.runtime.services import Services

router = Router("transfer")


class TransferStepParams(Params):
    transferId: Whole = None
    size: GivenCount = None
    """A non-negative integer, or the transfer fails with that message."""
    mime: Text = None
    error: Json = None
    bytesWritten: Whole = None
    bytesSent: Whole = None


class OkResult(Result):
    ok: bool


def _transfer_id(params: TransferStepParams) -> int:
    if params.transferId is None:
        raise BadRequestError("transferId required")
    return params.transferId


@router.method("transfer.meta", params=TransferStepParams, result=OkResult, modes=NODE)
def transfer_meta(ctx: CallContext, params: TransferStepParams) -> dict[str, Any]:
    """Source node: size and MIME type of the file it will send (or `error`)."""
    transfer.on_meta(ctx.services, ctx.conn, _transfer_id(params), params.size, params.mime, params.error)
    return {"ok": True}


@router.method("transfer.accept", params=TransferStepParams, result=OkResult, modes=NODE)
def transfer_accept(ctx: CallContext, params: TransferStepParams) -> dict[str, Any]:
    """Destination node: ready to receive (or `error`)."""
    transfer.on_accept(ctx.services, ctx.conn, _transfer_id(params), params.error)
    return {"ok": True}


@router.method("transfer.complete", params=TransferStepParams, result=OkResult, modes=NODE)
def transfer_complete(ctx: CallContext, params: TransferStepParams) -> dict[str, Any]:
    """Source node: every byte has been sent (or `error`: it could not send them). `bytesSent` (optional) says how
    many: fewer than announced fails the transfer at once; otherwise it finishes when every chunk has landed (chunks
    may still be on their way when this arrives)."""
    transfer.on_complete(ctx.services, ctx.conn, _transfer_id(params), params.error, params.bytesSent)
    return {"ok": True}


@router.method("transfer.done", params=TransferStepParams, result=OkResult, modes=NODE)
def transfer_done(ctx: CallContext, params: TransferStepParams) -> dict[str, Any]:
    """Destination node: the file is in place (`bytesWritten`), or `error`."""
    transfer.on_done(ctx.services, ctx.conn, _transfer_id(params), params.bytesWritten, params.error)
    return {"ok": True}


class TransferRequestParams(Params):
    source: str | None = None
    destination: str | None = None
    mode: str | None = None
    agentId: str | None = None


class TransferRequestResult(Result):
    source: str
    destination: str
    bytesTransferred: int
    mime: str | None = None


@router.method(
    "transfer.request", params=TransferRequestParams, result=TransferRequestResult, deferred=True, modes=CLIENT
)
def transfer_request(ctx: CallContext, params: TransferRequestParams) -> Any:
    """Copy a file `{nodeId}:{path}` or `gsv:{path}` (the agent workspace) to another endpoint. `mode` is
    "chunks" (over the socket) or "presigned" (S3 URLs; the default on AWS). Answered when the copy is complete."""
    if not params.source or not params.destination:
        raise BadRequestError("source and destination required")
    agent = validate_agent_id(params.agentId, default_agent_id(ctx.config()))
    mode = params.mode or ("chunks" if ctx.services.settings.local else "presigned")
    transfer.start(
        ctx.services,
        params.source,
        params.destination,
        agent_id=agent,
        mode=mode,
        caller_connection_id=ctx.connection_id,
        frame_id=ctx.frame_id,
    )
    return DEFERRED


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
