"""The transfer engine: files between nodes and the agent workspace (spec §4, fixes F10 and F13).

No Lambda holds a stream between frames. State lives in one table item per transfer (`orbital.store.transfers`:
static description in the JSON payload; state, size, mime and byte counters as flat attributes updated
atomically), bytes live on the wire or in S3:

- node → node, chunks: each chunk frame is relayed to the destination as it arrives. Binary frames (local gateway)
  get their offset from the byte counter; `{"type":"bin","transferId","offset","data"}` text frames (API Gateway)
  carry it, so a destination can write chunks processed out of order.
- node → workspace, chunks: each chunk becomes an S3 part object keyed by offset; `transfer.complete` assembles
  them, checks the size, writes the final object and removes the parts.
- workspace → node, chunks: the gateway reads the object in ranges and posts them, then `transfer.end`.
- presigned: the node PUTs to / GETs from a presigned S3 URL (a staging object for uploads, copied into place after
  the size check); the socket carries only metadata.
On AWS the frames of one socket run in parallel Lambdas, so `transfer.complete` can be handled while chunks sent
before it are still on their way: two counters tell them apart, `b` (bytes received, counted as a chunk arrives)
and `l` (bytes landed: stored as a part, or relayed to the destination). `transfer.complete` only marks the transfer
`completing`; whoever sees every announced byte landed — the complete itself, or the handler of the last chunk —
claims `finishing` with a conditional write and assembles the upload or tells the destination `transfer.end`. A
source that never sends the announced bytes is ended by the transfer's timeout.
Every transfer has a deferred call (kind "transfer") whose execution owns the timeout. Failure, timeout or the loss
of either node aborts both sides (`transfer.abort`), removes staging objects and answers the caller; the `transfer`
method family hooks these reactions in. A destination writes to a temporary file and renames it only after the last
byte, so no partial file looks complete.
"""

from __future__ import annotations

import base64
import logging
import time
from typing import TYPE_CHECKING, Any

from orbital.domain.workspace_paths import content_type_for, normalize_relative_path
from orbital.engines import deferred
from orbital.errors import BadRequestError, ForbiddenError, UnavailableError
from orbital.protocol.frames import event_frame, pack_chunk
from orbital.store import keys
from orbital.store.transfers import GSV as GSV  # the transfer items' names, as the engine's callers know them
from orbital.store.transfers import Endpoint as Endpoint
from orbital.store.transfers import Transfer as Transfer

if TYPE_CHECKING:
    from orbital.ports.services import Services
    from orbital.store.connections import Connection, NodeEntry
    from orbital.store.workspace import ObjectInfo

log = logging.getLogger("orbital.transfer")

CALL_KIND = "transfer"
CHUNK_BYTES = 64 * 1024
"""Data per `bin` text frame (~87 KB encoded, inside API Gateway's 128 KB message limit)."""
BINARY_CHUNK_BYTES = 256 * 1024
"""Data per binary frame on the local gateway (GSV's chunk size)."""
DEFAULT_TIMEOUT_MS = 600_000
MODES = ("chunks", "presigned")


def parse_endpoint(raw: str) -> Endpoint:
    idx = raw.find(":")
    if idx <= 0:
        raise BadRequestError(f'Invalid transfer endpoint "{raw}": expected format nodeId:/path or gsv:path')
    node, path = raw[:idx], raw[idx + 1 :]
    if not path:
        raise BadRequestError(f'Invalid transfer endpoint "{raw}": path cannot be empty')
    if node == GSV:
        path = normalize_relative_path(path)
        if not path:
            raise BadRequestError(f'Invalid transfer endpoint "{raw}": path cannot be empty')
    return Endpoint(node, path)


def timeout_ms(config: dict[str, Any]) -> int:
    value = (config.get("timeouts") or {}).get("transferMs")
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return max(1000, int(value))
    return DEFAULT_TIMEOUT_MS


# --- store ---------------------------------------------------------------------------------------------------


def load(services: Services, transfer_id: int) -> Transfer | None:
    return services.transfers.load(transfer_id)


def _set(services: Services, transfer_id: int, **attrs: Any) -> None:
    services.transfers.set(transfer_id, **attrs)


def active(services: Services) -> list[Transfer]:
    return services.transfers.active()


# --- start -----------------------------------------------------------------------------------------------------


def _connected_node(services: Services, endpoint: Endpoint, role: str) -> NodeEntry | None:
    """The node of a node endpoint, which must be connected; None for the workspace."""
    if endpoint.is_workspace:
        return None
    node = services.connections.node(endpoint.node)
    if node is None:
        raise UnavailableError(f"{role} node not connected: {endpoint.node}")
    return node


def _workspace_source(services: Services, agent_id: str, source: Endpoint, destination: Endpoint) -> ObjectInfo | None:
    """The object a workspace source names (which must exist, and go to a node); None for a node source."""
    if not source.is_workspace:
        return None
    info = services.workspace.head(keys.workspace_object(agent_id, source.path))
    if info is None:
        raise BadRequestError(f"Workspace file not found: {source.path}")
    if destination.is_workspace:
        raise BadRequestError("Cannot transfer from gsv to gsv")
    return info


def _announce(services: Services, xfer: Transfer) -> bool:
    """Tell the node that begins: the destination what it receives (a workspace source), else the source what to
    send. False when that node is gone."""
    if xfer.source.is_workspace:
        assert xfer.dest_conn is not None
        payload: dict[str, Any] = {
            "transferId": xfer.transfer_id,
            "path": xfer.destination.path,
            "size": xfer.size,
            "mode": xfer.mode,
        }
        if xfer.mime:
            payload["mime"] = xfer.mime
        return services.push(xfer.dest_conn, event_frame("transfer.receive", payload))
    assert xfer.source_conn is not None
    send = {"transferId": xfer.transfer_id, "path": xfer.source.path, "mode": xfer.mode}
    return services.push(xfer.source_conn, event_frame("transfer.send", send))


def start(
    services: Services,
    source_raw: str,
    destination_raw: str,
    *,
    agent_id: str,
    mode: str = "chunks",
    caller_connection_id: str | None = None,
    frame_id: Any = None,
    session_key: str | None = None,
    call_id: str | None = None,
    extra: dict[str, Any] | None = None,
    timeout: int | None = None,
) -> Transfer:
    """Begin a transfer; the caller is answered (or the session's call resolved) when it finishes or fails, or when
    `timeout` ms (default `timeouts.transferMs`) have passed."""
    if mode not in MODES:
        raise BadRequestError(f"Unsupported transfer mode: {mode}")
    source, destination = parse_endpoint(source_raw), parse_endpoint(destination_raw)
    source_node = _connected_node(services, source, "Source")
    dest_node = _connected_node(services, destination, "Destination")
    info = _workspace_source(services, agent_id, source, destination)
    transfer_id = services.transfers.next_id()
    xfer = Transfer(
        transfer_id=transfer_id,
        source=source,
        destination=destination,
        mode=mode,
        agent_id=agent_id,
        call_id=call_id or f"transfer-{transfer_id}-{int(time.time() * 1000)}",
        source_conn=source_node.connection_id if source_node else None,
        dest_conn=dest_node.connection_id if dest_node else None,
    )
    if info is not None:
        xfer.size, xfer.mime = info.size, info.content_type
    party = source_node or dest_node
    assert party is not None
    call = deferred.PendingCall(
        call_id=xfer.call_id,
        kind=CALL_KIND,
        node_id=party.node_id,
        node_connection_id=party.connection_id,
        timeout_ms=timeout if timeout is not None else timeout_ms(services.config.effective()),
        created_at=services.now_ms(),
        caller_connection_id=caller_connection_id,
        frame_id=frame_id,
        extra={**(extra or {}), "transferId": transfer_id, "sessionKey": session_key},
    )
    deferred.create(services, call)
    services.transfers.create(xfer, state="accept-wait" if source.is_workspace else "meta-wait")
    if not _announce(services, xfer):
        fail(services, transfer_id, "Node disconnected before the transfer started")
        return xfer
    try:
        deferred.start_wait(services, call)
    except Exception:
        fail(services, transfer_id, "Could not schedule the transfer")
    return xfer


# --- protocol steps (called by the transfer.* RPCs and chunk frames) -------------------------------------------


def _require_party(xfer: Transfer, conn: Connection | None, role: str) -> None:
    want = xfer.source_conn if role == "source" else xfer.dest_conn
    if conn is None or want is None or conn.connection_id != want:
        raise ForbiddenError(f"Not the {role} of transfer {xfer.transfer_id}")


def _open_step(
    services: Services, conn: Connection | None, transfer_id: int, role: str, error: Any = None
) -> Transfer | None:
    """Load a transfer for a protocol step from `role`'s socket; a reported error fails it. None: nothing to do."""
    xfer = load(services, transfer_id)
    if xfer is None:
        return None
    _require_party(xfer, conn, role)
    if error:
        fail(services, transfer_id, str(error))
        return None
    return xfer


def _tell(services: Services, xfer: Transfer, role: str, event: str, payload: dict[str, Any]) -> bool:
    """Send an event to the source or destination node; a gone node fails the transfer."""
    conn, node = (xfer.source_conn, xfer.source.node) if role == "source" else (xfer.dest_conn, xfer.destination.node)
    assert conn is not None
    if services.push(conn, event_frame(event, payload)):
        return True
    fail(services, xfer.transfer_id, f"Node disconnected: {node}")
    return False


def on_meta(services: Services, conn: Connection | None, transfer_id: int, size: Any, mime: Any, error: Any) -> None:
    xfer = _open_step(services, conn, transfer_id, "source", error)
    if xfer is None:
        return
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        fail(services, transfer_id, "transfer.meta needs a non-negative integer size")
        return
    mime_text = mime if isinstance(mime, str) and mime else ""
    xfer.size, xfer.mime = size, mime_text or None
    if xfer.destination.is_workspace:
        _set(services, transfer_id, xs="streaming", size=size, mime=mime_text)
        start_payload: dict[str, Any] = {"transferId": transfer_id}
        if xfer.mode == "presigned":
            start_payload["uploadUrl"] = services.workspace.presign_put(keys.transfer_staging(transfer_id))
        _tell(services, xfer, "source", "transfer.start", start_payload)
        return
    _set(services, transfer_id, xs="accept-wait", size=size, mime=mime_text)
    receive: dict[str, Any] = {
        "transferId": transfer_id,
        "path": xfer.destination.path,
        "size": size,
        "mode": xfer.mode,
    }
    if mime_text:
        receive["mime"] = mime_text
    _tell(services, xfer, "destination", "transfer.receive", receive)


def on_accept(services: Services, conn: Connection | None, transfer_id: int, error: Any) -> None:
    xfer = _open_step(services, conn, transfer_id, "destination", error)
    if xfer is None:
        return
    if xfer.source.is_workspace:
        _set(services, transfer_id, xs="completing")
        _send_workspace_object(services, xfer)
        return
    _set(services, transfer_id, xs="streaming")
    payload: dict[str, Any] = {"transferId": transfer_id}
    if xfer.mode == "presigned":
        payload["uploadUrl"] = services.workspace.presign_put(keys.transfer_staging(transfer_id))
    _tell(services, xfer, "source", "transfer.start", payload)


def _send_workspace_object(services: Services, xfer: Transfer) -> None:
    assert xfer.dest_conn is not None
    key = xfer.workspace_key(xfer.source)
    if xfer.mode == "presigned":
        end = {"transferId": xfer.transfer_id, "downloadUrl": services.workspace.presign_get(key)}
        _tell(services, xfer, "destination", "transfer.end", end)
        return
    size = xfer.size or 0
    offset = 0
    piece_size = BINARY_CHUNK_BYTES if services.capabilities.binary_frames else CHUNK_BYTES
    while offset < size:
        try:
            body = services.workspace.read_range(key, offset, min(size, offset + piece_size * 8))
        except Exception as exc:
            fail(services, xfer.transfer_id, f"Workspace read error: {type(exc).__name__}")
            return
        if not body:
            fail(services, xfer.transfer_id, f"Workspace file changed during transfer: {xfer.source.path}")
            return
        for start in range(0, len(body), piece_size):
            piece = body[start : start + piece_size]
            if not _post_chunk(services, xfer.dest_conn, xfer.transfer_id, offset + start, piece):
                fail(services, xfer.transfer_id, f"Node disconnected: {xfer.destination.node}")
                return
        offset += len(body)
    _tell(services, xfer, "destination", "transfer.end", {"transferId": xfer.transfer_id})


def _post_chunk(
    services: Services, connection_id: str, transfer_id: int, offset: int, data: bytes, *, binary: bool = True
) -> bool:
    """Binary GSV frames on the local gateway (unless the source used text frames: relays keep the framing);
    `bin` text frames, with the offset, through API Gateway."""
    if services.capabilities.binary_frames and binary:
        return services.sender.post(connection_id, pack_chunk(transfer_id, data))
    frame = {"type": "bin", "transferId": transfer_id, "offset": offset, "data": base64.b64encode(data).decode()}
    return services.sender.post(connection_id, frame)


def on_chunk(services: Services, connection_id: str, transfer_id: int, data: bytes, offset: int | None) -> None:
    """A chunk from the source (binary frame: offset None, taken from the byte counter).

    One conditional update both checks the chunk (known transfer, streaming, sent by its source socket — F13) and
    counts it, returning the whole transfer; anything else is dropped."""
    xfer = services.transfers.count_received(transfer_id, len(data), connection_id)
    if xfer is None:
        return
    total = xfer.bytes
    binary_frame = offset is None
    if offset is None:
        offset = total - len(data)
    if xfer.size is not None and offset + len(data) > xfer.size:
        fail(services, transfer_id, f"Source sent more than the announced {xfer.size} bytes")
        return
    if xfer.destination.is_workspace:
        services.workspace.put(keys.transfer_part(transfer_id, offset), data)
    else:
        assert xfer.dest_conn is not None
        if not _post_chunk(services, xfer.dest_conn, transfer_id, offset, data, binary=binary_frame):
            fail(services, transfer_id, f"Node disconnected: {xfer.destination.node}")
            return
    landed = services.transfers.count_landed(transfer_id, len(data))
    if landed is not None:  # else ended meanwhile
        _complete_when_landed(services, landed)


def on_complete(
    services: Services, conn: Connection | None, transfer_id: int, error: Any = None, bytes_sent: Any = None
) -> None:
    xfer = _open_step(services, conn, transfer_id, "source", error)
    if xfer is None:
        return
    sent = bytes_sent if isinstance(bytes_sent, int) and not isinstance(bytes_sent, bool) else None
    if xfer.mode == "chunks" and sent is not None and xfer.size is not None and sent != xfer.size:
        fail(services, transfer_id, f"Upload incomplete: expected {xfer.size} bytes, got {sent}")
        return
    if xfer.mode == "presigned":  # the bytes are in S3 already
        if xfer.destination.is_workspace:
            _finish_upload(services, xfer)
            return
        _set(services, transfer_id, xs="completing")
        end = {
            "transferId": transfer_id,
            "downloadUrl": services.workspace.presign_get(keys.transfer_staging(transfer_id)),
        }
        _tell(services, xfer, "destination", "transfer.end", end)
        return
    completing = services.transfers.mark_completing(transfer_id)
    if completing is not None:  # else not streaming (already completing, or ended)
        _complete_when_landed(services, completing)


def _complete_when_landed(services: Services, xfer: Transfer) -> None:
    """Finish a completing chunked transfer once every announced byte has landed (claimed by one handler only)."""
    if xfer.state != "completing":
        return
    expected = xfer.size if xfer.size is not None else xfer.bytes
    if xfer.landed < expected:
        return  # chunks still on their way: the handler of the last one finishes
    if not services.transfers.claim_finishing(xfer.transfer_id):
        return  # another handler finishes it
    if xfer.destination.is_workspace:
        _finish_upload(services, xfer)
    else:
        _tell(services, xfer, "destination", "transfer.end", {"transferId": xfer.transfer_id})


def _finish_upload(services: Services, xfer: Transfer) -> None:
    ws = services.workspace
    final_key = xfer.workspace_key(xfer.destination)
    content_type = xfer.mime or content_type_for(xfer.destination.path)
    if xfer.mode == "presigned":
        staged = ws.head(keys.transfer_staging(xfer.transfer_id))
        size = staged.size if staged else -1
        if staged is None or (xfer.size is not None and size != xfer.size):
            fail(services, xfer.transfer_id, f"Upload incomplete: expected {xfer.size} bytes, got {max(size, 0)}")
            return
        ws.copy(keys.transfer_staging(xfer.transfer_id), final_key, content_type=content_type)
        _finish(services, xfer.transfer_id, size)
        return
    parts = sorted(ws.list_all(keys.transfer_parts_prefix(xfer.transfer_id)), key=lambda p: p.key)
    chunks: list[bytes] = []
    expected = 0
    for part in parts:
        offset = int(part.key.rsplit("/", 1)[1])
        if offset != expected:
            fail(services, xfer.transfer_id, f"Upload incomplete: missing bytes at offset {expected}")
            return
        got = ws.get(part.key)
        if got is None:
            fail(services, xfer.transfer_id, f"Upload incomplete: missing bytes at offset {expected}")
            return
        chunks.append(got[0])
        expected += len(got[0])
    if xfer.size is not None and expected != xfer.size:
        fail(services, xfer.transfer_id, f"Upload incomplete: expected {xfer.size} bytes, got {expected}")
        return
    ws.put(final_key, b"".join(chunks), content_type=content_type)
    _finish(services, xfer.transfer_id, expected)


def on_done(services: Services, conn: Connection | None, transfer_id: int, bytes_written: Any, error: Any) -> None:
    xfer = _open_step(services, conn, transfer_id, "destination", error)
    if xfer is None:
        return
    written = bytes_written if isinstance(bytes_written, int) and not isinstance(bytes_written, bool) else xfer.bytes
    if xfer.size is not None and written != xfer.size:
        fail(services, transfer_id, f"Destination wrote {written} of {xfer.size} bytes")
        return
    _finish(services, transfer_id, written)


# --- endings -----------------------------------------------------------------------------------------------------


def _cleanup(services: Services, transfer_id: int) -> None:
    services.transfers.delete(transfer_id)
    try:
        services.workspace.delete_prefix(f"transfers/{transfer_id}/")
    except Exception:
        log.exception("could not remove staging objects of transfer %s", transfer_id)


def _finish(services: Services, transfer_id: int, transferred: int) -> None:
    xfer = load(services, transfer_id)
    if xfer is None:
        return
    claimed = deferred.settle(services, xfer.call_id, {"result": xfer.result(transferred)})
    _cleanup(services, transfer_id)
    if claimed is None:
        return
    call, token = claimed
    deferred.answer(services, call, payload=xfer.result(transferred))
    deferred.close_execution(services, token)


def fail(services: Services, transfer_id: int, error: str) -> None:
    """Abort a transfer: both nodes are told, staging is removed, the caller gets the error. Idempotent."""
    xfer = load(services, transfer_id)
    if xfer is None:
        return
    claimed = deferred.settle(services, xfer.call_id, {"error": error})
    _abort(services, xfer, error)
    if claimed is None:
        return
    call, token = claimed
    deferred.answer(services, call, error={"code": 500, "message": error})
    deferred.close_execution(services, token, error="TransferFailed", cause=error)


def _abort(services: Services, xfer: Transfer, error: str) -> None:
    _cleanup(services, xfer.transfer_id)
    for conn_id in {xfer.source_conn, xfer.dest_conn} - {None}:
        assert conn_id is not None
        try:
            services.sender.post(
                conn_id, event_frame("transfer.abort", {"transferId": xfer.transfer_id, "error": error})
            )
        except Exception:
            log.debug("could not notify %s of the abort", conn_id)


def on_call_timeout(services: Services, call: deferred.PendingCall) -> None:
    transfer_id = int(call.extra.get("transferId", 0))
    xfer = load(services, transfer_id)
    message = f"Transfer timed out after {call.timeout_ms}ms"
    if xfer is not None:
        _abort(services, xfer, message)
    deferred.answer(services, call, error={"code": 504, "message": message})


def on_call_node_lost(services: Services, call: deferred.PendingCall, reason: str) -> None:
    transfer_id = int(call.extra.get("transferId", 0))
    xfer = load(services, transfer_id)
    if xfer is not None:
        _abort(services, xfer, reason)
    deferred.answer(services, call, error={"code": 500, "message": reason})


def on_node_gone(services: Services, conn: Connection) -> None:
    """The other party's node may be the one that went: fail every transfer touching it."""
    for xfer in active(services):
        if conn.connection_id in (xfer.source_conn, xfer.dest_conn):
            fail(services, xfer.transfer_id, f"Node disconnected: {conn.node_id}")
