"""WindieOS's backend protocol over `/ws`: a `handshake` first, then enveloped messages (`{id, type, payload, ...}`).

- **Handshake** `{type: "handshake", user_id, agent_definition?}`, validated (a removed top-level field, bad JSON or
  a bad shape: an `error` `Invalid handshake: ...` and the socket closed with 1008; on API Gateway, which chooses
  its own close code, the same error and then `DeleteConnection`). A top-level string `operating_system` (the shipped
  Python SDK's) is folded into `runtime`. Who the socket is: an install's token at the upgrade (`$connect` checked
  it) makes it that install's user, whatever it claims; it may speak WindieOS only, and it is a guest of the
  owner's gateway: its runs get its own tools and no backend tool, a system prompt without any of the agent's
  workspace files, and its conversations never feed the agent's memory files; its query text is the model's (no
  slash command but `/stop`, no directive), and it may choose only a model `list-models` offers (as may everyone).
  The gateway's token as a bearer, or a loopback gateway without a token, trusts the claimed `user_id` (a
  single-owner gateway). A socket of a gateway with a token that showed neither is refused after its handshake.
- **Client tools**: `agent_definition.tools.client_manifest.tools` are answered with `client-tool-manifest`
  (`accepted`, `rejected` with why: a backend tool's name, or for an install any name of the backend's form, no
  schema, a bad name, twice). Accepted ones run on this socket, for the runs it starts (`orbital.agent.client_tools`):
  `tool-call` out, `tool-result` back. The policy (`mode`, `available_tools`, `disabled_tools`,
  `disabled_capabilities`) narrows each run's tools.
- **query** → a run in the conversation's session `agent:{agentId}:windie:group:{h(user_id, conversation_ref)}`
  (labelled `windie:{user_id}:{conversation_ref}`), streaming `query-accepted`, on a conversation's first turn
  `system-prompt` and `tool-schemas`, then `streaming-response` deltas, `tool-call` (this socket's tools),
  `tool-output` (tools that ran elsewhere), `token-count`, `llm-thought`, `assistant-message-full` and
  `streaming-complete`, or `error`. Every event of a turn carries `id` = `turn_ref` = the query's id,
  `conversation_ref`, a unique `event_id`, its `sequence` (1, 2, 3 ... in the turn, nothing skipped, whichever
  process sends it: the SDK refuses a turn with a gap), `session_id` (the session key) and `user_id`.
- **Tool approvals**: a run that pauses for one completes its turn with the prompt (`streaming-response` and
  `streaming-complete`). The next query of the conversation answers it: `yes` / `no` streams the engine's answer
  first and then follows the run (its tools, text and `streaming-complete`, numbered on in the same turn); anything
  else completes with the reminder (`orbital.dialects.approval_answers`). A guest's yes is no owner's: reminded.
- **stop-query**, **rehydrate-conversation**, **compact-history**, **load-settings** / **update-settings**,
  **list-models**, **wakeword-detected** (greeting only: no voice), **tool-bundle-result** (accepted, unused). Replies
  to them carry the request's `id`. An unknown envelope key or type is an `error`; the socket stays open.
- **What a query would get** (`query_preview`: its model, tools and system prompt; `config_snapshot`): computed once,
  here, for the first turn's events and for the HTTP API's `/api/sdk/*` previews (`rest.windie`), so that a preview
  by a caller reports what a query by that caller over `/ws` is given.
"""

# The package, by part (the docstring above is the protocol's reference, docs/protocol.md): `handshake` (the first
# frame, the manifest, who the socket is), `frames` (replies and a turn's numbered events), `conversations`,
# `preview` (what a query would get), `query` (`query`, `stop-query`), `tool_results`, `history`
# (`rehydrate-conversation`, `compact-history`), `user_settings` (`load-settings`, `update-settings`, `list-models`,
# `wakeword-detected`) and `run_events` (a run's events as the turn's); this module dispatches a socket's frames to
# them and cleans up after a socket that went away.

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orbital.agent import client_tools
from orbital.dialects.detect import WINDIE
from orbital.dialects.windie.common import (
    CLOSE_CODE,
    ENVELOPE_KEYS,
    MAX_EVENT_BYTES,
    MAX_REF_CHARS,
    MAX_TOOL_IMAGE_BYTES,
    REMOVED_FIELDS,
    RESERVED,
    _InvalidFrameError,
    router,
)
from orbital.dialects.windie.conversations import agent_of, label, session_key
from orbital.dialects.windie.frames import _error, _WindieSocket, turn_event
from orbital.dialects.windie.handshake import (
    _after_handshake,
    _handshake,
    caller_policy,
    definition_tools,
    parse_agent_definition,
    parse_handshake,
    validate_manifest,
)
from orbital.dialects.windie.history import _compact, _rehydrate, compaction_seconds, convert_history
from orbital.dialects.windie.preview import QueryPreview, config_snapshot, query_model, query_preview
from orbital.dialects.windie.query import _query, _stop
from orbital.dialects.windie.run_events import encode
from orbital.dialects.windie.tool_results import _bundle_result, _tool_result
from orbital.dialects.windie.user_settings import (
    _list_models,
    _load_settings,
    _update_settings,
    _wakeword,
    load_settings_item,
    settings_view,
)
from orbital.engines import deferred
from orbital.protocol.registry import DialectInbound

if TYPE_CHECKING:
    from orbital.ports.services import Services
    from orbital.store.connections import Connection

__all__ = [
    "CLOSE_CODE",
    "MAX_EVENT_BYTES",
    "MAX_TOOL_IMAGE_BYTES",
    "REMOVED_FIELDS",
    "RESERVED",
    "QueryPreview",
    "agent_of",
    "caller_policy",
    "compaction_seconds",
    "config_snapshot",
    "convert_history",
    "definition_tools",
    "encode",
    "label",
    "load_settings_item",
    "parse_agent_definition",
    "parse_handshake",
    "query_model",
    "query_preview",
    "receive",
    "router",
    "session_key",
    "settings_view",
    "turn_event",
    "validate_manifest",
]


@router.dialect_frame(WINDIE)
def receive(services: Services, inbound: DialectInbound) -> list[Any]:
    conn = inbound.conn
    if conn is None or conn.pending or conn.dialect != WINDIE:
        accepted = _after_handshake(services, inbound)
        if accepted is None:
            return _handshake(services, inbound)
        conn = accepted
    return _message(services, conn, inbound.frame)


def _message(services: Services, conn: Connection, frame: Any) -> list[Any]:
    sock = _WindieSocket(conn)
    if not isinstance(frame, dict):
        return [_error(None, "Invalid message: expected a JSON object", sock.user)]
    rid = frame.get("id")
    if rid is not None and (isinstance(rid, bool) or not isinstance(rid, str | int) or len(str(rid)) > MAX_REF_CHARS):
        return [_error(None, "Invalid message: id must be a string", sock.user)]
    unknown = sorted(str(k)[:40] for k in frame if k not in ENVELOPE_KEYS)
    if unknown:
        return [_error(rid, f"Unknown envelope field(s): {', '.join(unknown[:5])}", sock.user)]
    kind = frame.get("type")
    payload = frame.get("payload")
    if payload is None:
        payload = {}
    if not isinstance(kind, str):
        return [_error(rid, "Invalid message: type is required", sock.user)]
    if not isinstance(payload, dict):
        return [_error(rid, "Invalid message: payload must be an object", sock.user)]
    handler = HANDLERS.get(kind)
    if handler is None:
        return [_error(rid, f"Unknown message type: {kind[:60]}", sock.user)]
    try:
        return handler(services, sock, rid, payload)
    except _InvalidFrameError as exc:
        return [_error(rid, exc.message, sock.user)]


HANDLERS = {
    "query": _query,
    "stop-query": _stop,
    "tool-result": _tool_result,
    "tool-bundle-result": _bundle_result,
    "rehydrate-conversation": _rehydrate,
    "compact-history": _compact,
    "load-settings": _load_settings,
    "update-settings": _update_settings,
    "list-models": _list_models,
    "wakeword-detected": _wakeword,
}


@router.on_client_gone
def _gone(services: Services, conn: Connection) -> None:
    """A WindieOS socket went away: the calls of its tools fail at once (their runs carry on), its tools go."""
    if conn.dialect != WINDIE or conn.pending:
        return
    deferred.fail_node_calls(services, client_tools.owner(conn.connection_id), "Client disconnected")
    client_tools.forget(services, conn.connection_id)
