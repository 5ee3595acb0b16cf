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

from __future__ import annotations

import base64
import binascii
import json
import logging
import re
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from orbital.agent import client_tools, compaction, context, events, model_catalog, runs, settings, taint
from orbital.aws import secrets
from orbital.dialects import approval_answers, base
from orbital.dialects.detect import WINDIE, WINDIE_TYPES
from orbital.domain import commands, sniff
from orbital.domain.config import as_dict
from orbital.domain.messages import text_of
from orbital.domain.session_keys import resolve_agent_by_specificity
from orbital.engines import deferred, socket_gate
from orbital.errors import ConflictError
from orbital.ports import invocation
from orbital.protocol.registry import DialectClose, DialectInbound, Router
from orbital.store import artifacts, keys, subscriptions
from orbital.store import conditions as cond
from orbital.store.sessions import message_count
from orbital.store.subscriptions import Subscription
from orbital.tools import mcp_calls
from orbital.tools.catalog import all_tools
from orbital.tools.definitions import NATIVE_PREFIX

if TYPE_CHECKING:
    from orbital.ports.services import Services
    from orbital.store.connections import Connection, NodeEntry

log = logging.getLogger("orbital.dialects.windie")

router = Router("windie")

CLOSE_CODE = 1008
HANDSHAKE_GRACE_S = 2.0
"""How long a message that arrived before its socket's handshake was accepted waits for it."""
REMOVED_FIELDS = ("available_tools", "available_coordinate_methods", "requested_agent_policy")
"""Top-level handshake fields WindieOS removed: a handshake with one is refused."""
ENVELOPE_KEYS = frozenset(
    {"id", "type", "payload", "user_id", "session_id", "conversation_ref", "turn_ref", "timestamp"}
)
CAPABILITIES = frozenset({"ocr", "vision", "embeddings", "web_search", "browser"})
MODES = frozenset(client_tools.MODES)
MAX_ACTIVE_QUERIES = 50
MAX_MANIFEST_TOOLS = 128
MAX_MANIFEST_BYTES = 256 * 1024
MAX_NAMES = 256
MAX_REF_CHARS = 256
MAX_SCREENSHOTS = 16
MAX_REHYDRATE_MESSAGES = 2000
COMPACTION_AWS_S = 25.0
"""The longest `compact-history` may take on AWS (API Gateway ends a WebSocket integration at 29 s)."""
LAMBDA_MARGIN_S = 2.0
"""Kept free of the Lambda invocation's remaining time, to answer before it is cut off."""
MIN_COMPACTION_S = 1.0
HOLD_MARGIN_S = 30.0
"""How much longer than the compaction may take it holds its session: a holder that died is freed after this."""
MAX_TOOL_IMAGE_BYTES = 3_932_160
"""The largest screenshot a tool result keeps (3.75 MiB: its base64, 5 MiB, is what model providers take)."""
MAX_EVENT_BYTES = 96 * 1024
"""Optional parts of an event (`final_response`, `assistant-message-full`, a tool's output) are left out or cut
above this, so every event fits one WebSocket message on API Gateway (128 KB)."""
ENVELOPE_BYTES = 2048
"""What a turn's correlation fields add to an event's payload, at most."""
RESERVED = "reserved backend tool names cannot be overridden"
BACKEND_SEPARATOR = "__"
"""What the backend's tool names have (`gsv__*`, `{nodeId}__{tool}`): a guest may declare no such name."""
GREETING = "Hello! I'm listening."
STOPPED = "Run cancelled by user"
SETTING_DEFAULTS: dict[str, Any] = {
    "model_mode": "online",
    "interaction_mode": "agent",  # what a query does: it offers its tools
    "speech_mode_enabled": False,
    "wakeword_enabled": False,
    "wakeword_stt_enabled": False,
    "browser_automation_enabled": False,
    "include_query_screenshot": True,
}
SETTING_CHOICES = {"model_mode": frozenset({"online", "local"}), "interaction_mode": frozenset({"chat", "agent"})}
SETTING_FLAGS = frozenset(k for k, v in SETTING_DEFAULTS.items() if isinstance(v, bool))
MODEL_KEYS = ("model_provider", "selected_model_id")
IGNORED_SETTINGS = frozenset({"tools", "agent_definition", "client_version"})
"""What the SDKs send with their settings that is not a setting here (taken from the handshake instead)."""
PROVIDER_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,40}$")
_SLUG = re.compile(r"[^A-Za-z0-9_.:-]")


class _InvalidFrameError(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _size(frame: Any) -> int:
    return len(json.dumps(frame, separators=(",", ":"), ensure_ascii=False).encode())


# --- the handshake ------------------------------------------------------------------------------------------------


def _names(value: Any, where: str) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or len(value) > MAX_NAMES or not all(isinstance(v, str) for v in value):
        raise _InvalidFrameError(f"{where} must be a list of strings")
    return list(value)


def parse_agent_definition(value: Any) -> tuple[dict[str, Any], dict[str, Any], list[Any]]:
    """An `agent_definition` as (tool policy, runtime, manifest entries); raises _InvalidFrameError for a bad
    shape. Unknown keys are ignored."""
    if value is None:
        return {"mode": "default_plus_client"}, {}, []
    if not isinstance(value, dict):
        raise _InvalidFrameError("agent_definition must be an object")
    version = value.get("version", 1)
    if version != 1 or isinstance(version, bool):
        raise _InvalidFrameError("agent_definition.version must be 1")
    tools = value.get("tools")
    if tools is None:
        tools = {}
    if not isinstance(tools, dict):
        raise _InvalidFrameError("agent_definition.tools must be an object")
    mode = tools.get("mode", "default_plus_client")
    if mode not in MODES:
        raise _InvalidFrameError(f"agent_definition.tools.mode must be one of {', '.join(sorted(MODES))}")
    policy: dict[str, Any] = {"mode": mode}
    available = _names(tools.get("available_tools"), "available_tools")
    if available is not None:
        policy["available"] = available
    disabled = _names(tools.get("disabled_tools"), "disabled_tools")
    if disabled:
        policy["disabled"] = disabled
    capabilities = _names(tools.get("disabled_capabilities"), "disabled_capabilities")
    if capabilities:
        unknown = sorted(set(capabilities) - CAPABILITIES)
        if unknown:
            raise _InvalidFrameError(f"unknown capability {unknown[0][:40]!r} in disabled_capabilities")
        policy["capabilities"] = sorted(set(capabilities))
    manifest = tools.get("client_manifest")
    entries: list[Any] = []
    if manifest is not None:
        if not isinstance(manifest, dict) or not isinstance(manifest.get("tools", []), list):
            raise _InvalidFrameError("client_manifest must be an object with a list of tools")
        entries = list(manifest.get("tools") or [])
        if len(entries) > MAX_MANIFEST_TOOLS or _size(entries) > MAX_MANIFEST_BYTES:
            raise _InvalidFrameError(f"client_manifest is too large (at most {MAX_MANIFEST_TOOLS} tools, 256 KB)")
        if not all(isinstance(e, dict) for e in entries):
            raise _InvalidFrameError("every client_manifest tool must be an object")
    runtime = value.get("runtime")
    if runtime is None:
        runtime = {}
    if not isinstance(runtime, dict):
        raise _InvalidFrameError("agent_definition.runtime must be an object")
    kept: dict[str, Any] = {}
    system = runtime.get("operating_system")
    if system is not None:
        if not isinstance(system, str):
            raise _InvalidFrameError("runtime.operating_system must be a string")
        kept["operating_system"] = system[:64]
    methods = _names(runtime.get("coordinate_methods"), "runtime.coordinate_methods")
    if methods is not None:
        kept["coordinate_methods"] = methods
    return policy, kept, entries


def parse_handshake(frame: Any) -> dict[str, Any]:
    """A handshake frame as `{user_id, policy, runtime, manifest}`; raises _InvalidFrameError saying what is wrong."""
    if not isinstance(frame, dict):
        raise _InvalidFrameError("not a JSON object")
    if frame.get("type") != "handshake":
        raise _InvalidFrameError("the first message must be the handshake")
    removed = [name for name in REMOVED_FIELDS if name in frame]
    if removed:
        raise _InvalidFrameError(f"{removed[0]} is no longer accepted at the top level: send agent_definition")
    user = frame.get("user_id")
    if user is not None and (not isinstance(user, str) or len(user) > MAX_REF_CHARS):
        raise _InvalidFrameError("user_id must be a string")
    policy, runtime, manifest = parse_agent_definition(frame.get("agent_definition"))
    system = frame.get("operating_system")
    if system is not None:  # the shipped Python SDK sends it at the top level: tolerated as the runtime's
        if not isinstance(system, str):
            raise _InvalidFrameError("operating_system must be a string")
        runtime.setdefault("operating_system", system[:64])
    return {"user_id": user or None, "policy": policy, "runtime": runtime, "manifest": manifest}


def _reserved_names(services: Services) -> set[str]:
    return {str(t.get("name")) for t in all_tools(services, cap_ms=mcp_calls.REQUEST_LIST_MS)}


def validate_manifest(
    services: Services, entries: list[Any], *, guest: bool = False
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """(tool definitions for the model, `accepted`, `rejected`) of a client manifest. A `guest`'s (an install's)
    names of the backend's form (`gsv__*`, `{nodeId}__{tool}`) are all refused for the same reason, whether such a
    tool exists or not: its manifest must not tell it which nodes and tools the owner has."""
    reserved = _reserved_names(services) if entries and not guest else set()
    tools: list[dict[str, Any]] = []
    accepted: list[dict[str, Any]] = []
    rejected: list[dict[str, Any]] = []
    seen: set[str] = set()
    for entry in entries:
        name = entry.get("name")
        shown = name[:128] if isinstance(name, str) else ""
        reason = None
        if not isinstance(name, str) or not client_tools.NAME.match(name):
            reason = "tool names must be 1-64 letters, digits, '_' or '-'"
        elif name in reserved or name.startswith(NATIVE_PREFIX) or (guest and BACKEND_SEPARATOR in name):
            reason = RESERVED
        elif not isinstance(entry.get("schema"), dict):
            reason = "a tool needs a JSON schema"
        elif name in seen:
            reason = "declared twice"
        if reason is not None:
            rejected.append({"name": shown, "reason": reason})
            continue
        seen.add(name)
        description = entry.get("description") if isinstance(entry.get("description"), str) else ""
        target = entry.get("execution_target") if isinstance(entry.get("execution_target"), str) else "local_runtime"
        tools.append({"name": name, "description": description, "inputSchema": entry["schema"]})
        accepted.append({"name": name, "description": description, "execution_target": target})
    return tools, accepted, rejected


@router.dialect_frame(WINDIE)
def receive(services: Services, inbound: DialectInbound) -> list[Any]:
    conn = inbound.conn
    if conn is None or conn.pending or conn.dialect != WINDIE:
        accepted = _after_handshake(services, inbound)
        if accepted is None:
            return _handshake(services, inbound)
        conn = accepted
    return _message(services, conn, inbound.frame)


def _after_handshake(services: Services, inbound: DialectInbound) -> Connection | None:
    """A message sent right after the handshake may be handled before it (API Gateway runs a socket's frames
    concurrently, and so does the local gateway with `--concurrent-frames`): wait a moment for the handshake to be
    accepted. None: it was not (the message was the first frame, and is refused as such). Only a socket whose
    handshake could be accepted waits (a bearer or an install's token at the upgrade, or a gateway without a token);
    any other is refused at once, so that it cannot hold a handler for the wait."""
    frame = inbound.frame
    kind = frame.get("type") if isinstance(frame, dict) else None
    if not isinstance(kind, str) or kind not in WINDIE_TYPES:  # (a handshake is none of them)
        return None
    if not _may_become_windie(services, inbound.conn):
        return None
    deadline = time.monotonic() + HANDSHAKE_GRACE_S
    while time.monotonic() < deadline:
        time.sleep(0.05)
        conn = services.connections.get(inbound.connection_id)
        if conn is not None and not conn.pending and conn.dialect == WINDIE:
            return conn
        if conn is None and inbound.conn is not None:
            return None  # closed meanwhile
    return None


def _may_become_windie(services: Services, conn: Connection | None) -> bool:
    """Whether a handshake of this socket could be accepted: it showed a credential at the upgrade (its pending
    record says so), or the gateway has no token."""
    if not secrets.token_configured(services.settings):
        return True
    extra = conn.extra if conn is not None else {}
    return bool(extra.get("bearer")) or isinstance(extra.get("install"), dict)


def _refused(reason: str) -> list[Any]:
    """An error saying why, then the socket closed with 1008 (API Gateway: deleted, with its own code)."""
    return [_plain("error", {"message": reason}), DialectClose(CLOSE_CODE, reason[:120])]


def _handshake(services: Services, inbound: DialectInbound) -> list[Any]:
    try:
        given = parse_handshake(inbound.frame)
    except _InvalidFrameError as exc:
        return _refused(f"Invalid handshake: {exc.message}")
    extra = inbound.conn.extra if inbound.conn is not None else {}
    install = extra.get("install") if isinstance(extra.get("install"), dict) else None
    bearer = bool(extra.get("bearer"))
    if install is not None:
        user, admin = str(install.get("user") or ""), False  # the token's user, whoever the client says it is
    elif secrets.token_configured(services.settings) and not bearer:
        return _refused("Unauthorized: connect with Authorization: Bearer <token> at the upgrade")
    else:
        user, admin = given["user_id"] or "", True
    if not user:
        return _refused("Invalid handshake: user_id is required")
    tools, accepted, rejected = validate_manifest(services, given["manifest"], guest=not admin)
    if socket_gate.applies(services) and not bearer:
        socket_gate.settle(services, inbound.connection_id)  # an install's socket, authenticated by its token
    policy = caller_policy(given["policy"], admin=admin)
    state = {"user": user, "admin": admin, "policy": policy, "runtime": given["runtime"]}
    if tools:
        state["tools"] = [t["name"] for t in tools]  # their definitions are kept beside the record
    base.accept(services, inbound.conn, inbound.connection_id, WINDIE, windie=state)
    if tools:
        client_tools.save(services, inbound.connection_id, tools)
    if not given["manifest"] and not _declared_manifest(inbound.frame):
        return []
    return [_plain("client-tool-manifest", {"accepted": accepted, "rejected": rejected}, user=user)]


def _declared_manifest(frame: Any) -> bool:
    definition = frame.get("agent_definition") if isinstance(frame, dict) else None
    tools = definition.get("tools") if isinstance(definition, dict) else None
    return isinstance(tools, dict) and tools.get("client_manifest") is not None


# --- frames -------------------------------------------------------------------------------------------------------


def _plain(
    kind: str, payload: dict[str, Any], rid: Any = None, *, user: str | None = None, conversation: str | None = None
) -> dict[str, Any]:
    """A reply that is no turn's event: the request's id (a new one when there is none)."""
    frame: dict[str, Any] = {"id": rid if rid is not None else str(uuid.uuid4()), "type": kind, "payload": payload}
    if conversation is not None:
        frame["conversation_ref"] = conversation
    if user:
        frame["user_id"] = user
    frame["timestamp"] = _now_iso()
    return frame


def turn_event(ref: dict[str, Any], kind: str, payload: dict[str, Any], sequence: int) -> dict[str, Any]:
    """An event of a turn, with every correlation field a WindieOS client expects; `sequence` is its number in the
    turn (see `_numbered`)."""
    turn = str(ref.get("turn"))
    return {
        "id": turn,
        "type": kind,
        "payload": payload,
        "turn_ref": turn,
        "conversation_ref": ref.get("conv"),
        "event_id": f"{turn}-evt-{sequence:06d}-{kind}",
        "sequence": sequence,
        "session_id": ref.get("session"),
        "user_id": ref.get("user"),
        "timestamp": _now_iso(),
    }


def _local_events(ref: dict[str, Any], events: list[tuple[str, dict[str, Any]]], after: int = 0) -> list[Any]:
    """Events of a turn numbered here, after `after` (no run follows the turn: no other writer numbers it)."""
    return [turn_event(ref, kind, body, after + i) for i, (kind, body) in enumerate(events, start=1)]


def _numbered(services: Services, sub: Subscription, events: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    """The next events of a followed turn, numbered 1, 2, 3 ... across the whole turn, whichever step, process or
    Lambda sends them: the numbers are taken from a counter on the socket's subscription to the run, in one
    atomic addition for the lot (the SDK keys sequences by `turn_ref` and refuses a gap or a repeat). Nothing when
    the subscription is gone (`stop-query` dropped it, the run ended): nothing more of the turn is sent then, and
    no number is taken (a socket gets only its own turns' events, so no other socket's event takes one either)."""
    if not events:
        return []
    try:
        rec = services.table.update(
            keys.run_subscription(sub.run_id, sub.connection_id),
            add={SEQUENCE: len(events)},
            condition=cond.exists("PK"),
        )
    except ConflictError:
        sub.scratch["stopped"] = True
        return []
    last = int(rec.attrs.get(SEQUENCE) or 0) if rec is not None else 0
    return _local_events(sub.ref, events, last - len(events))


def _error(rid: Any, message: str, user: str, *, turn: str | None = None, conversation: str | None = None) -> Any:
    payload: dict[str, Any] = {"message": message}
    if turn is not None:
        payload["turn_ref"] = turn
    frame = _plain("error", payload, rid, user=user, conversation=conversation)
    if turn is not None:
        frame["turn_ref"] = turn
    return frame


class _WindieSocket:
    """What the handshake established about a socket."""

    def __init__(self, conn: Connection) -> None:
        state = as_dict(conn.extra.get("windie"))
        self.conn = conn
        self.user = str(state.get("user") or "")
        self.admin = bool(state.get("admin"))
        self.policy: dict[str, Any] = as_dict(state.get("policy"))
        self.runtime: dict[str, Any] = as_dict(state.get("runtime"))
        names = state.get("tools")
        self.tool_names: list[str] = [n for n in names if isinstance(n, str)] if isinstance(names, list) else []

    @property
    def narrows(self) -> bool:
        """Its runs' tools differ from everyone's: tools of its own, or a policy that narrows the list."""
        return bool(self.tool_names) or self.policy != {"mode": "default_plus_client"}

    @property
    def reader(self) -> str | None:
        """Whose artifacts it may use: an install's user its own; the gateway's credential every one."""
        return None if self.admin else self.user


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


def _ref(payload: dict[str, Any], name: str = "conversation_ref") -> str:
    value = payload.get(name)
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_REF_CHARS:
        raise _InvalidFrameError(f"{name} is required")
    return value


# --- conversations ------------------------------------------------------------------------------------------------


def agent_of(config: dict[str, Any], user_id: str, conversation_ref: str) -> str:
    return resolve_agent_by_specificity(config, channel=WINDIE, account_id=user_id, peer_id=conversation_ref)


def session_key(config: dict[str, Any], user_id: str, conversation_ref: str) -> str:
    """The session of a conversation: `agent:{agentId}:windie:group:{h(user_id, conversation_ref)}`."""
    return base.conversation_key(agent_of(config, user_id, conversation_ref), WINDIE, user_id, conversation_ref)


def label(user_id: str, conversation_ref: str) -> str:
    return f"{WINDIE}:{user_id}:{conversation_ref}"


def _run_prefix(turn: str) -> str:
    return f"{_SLUG.sub('-', turn)[:100]}#"


def _image_entry(services: Services, artifact_id: Any, reader: str | None) -> dict[str, Any] | None:
    """An artifact as a run's image (a reference: the bytes stay where they are); None, with a warning, when it is
    missing, not an image or not the reader's."""
    if not isinstance(artifact_id, str):
        return None
    found = artifacts.head(services.workspace, artifact_id)
    if found is None or not found.readable_by(reader):
        log.warning("screenshot %s is not available; going on without it", artifact_id[:80])
        return None
    if not found.content_type.startswith("image/"):
        log.warning("artifact %s is not an image; going on without it", artifact_id[:80])
        return None
    return {"type": "image", "mimeType": found.content_type, "r2Key": keys.media_object(found.artifact_id)}


def _screenshots(services: Services, sock: _WindieSocket, payload: dict[str, Any]) -> list[dict[str, Any]]:
    wanted: list[Any] = []
    if payload.get("screenshot_ref") is not None:
        wanted.append(payload["screenshot_ref"])
    refs = payload.get("screenshot_refs")
    if isinstance(refs, list):
        wanted += refs
    media = []
    for artifact_id in dict.fromkeys(a for a in wanted[:MAX_SCREENSHOTS] if isinstance(a, str)):
        entry = _image_entry(services, artifact_id, sock.reader)
        if entry is not None:
            media.append(entry)
    return media


# --- what a query would get (also what the HTTP API's `/api/sdk/*` previews report) --------------------------------


def caller_policy(policy: dict[str, Any], *, admin: bool) -> dict[str, Any]:
    """A socket's (or an HTTP caller's) tool policy: as asked, and `restricted` for a caller without the gateway's
    credential (an install, a guest: its own tools only, no backend tool, no workspace file in its prompt)."""
    return policy if admin else {**policy, "restricted": True}


def definition_tools(
    services: Services, agent_definition: Any, *, admin: bool
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The tool policy and the client tools a handshake with this `agent_definition` gives a socket of this caller;
    raises ValueError saying what is wrong (the handshake would be refused)."""
    try:
        policy, _, manifest = parse_agent_definition(agent_definition)
    except _InvalidFrameError as exc:
        raise ValueError(exc.message) from None
    return caller_policy(policy, admin=admin), validate_manifest(services, manifest, guest=not admin)[0]


def query_model(
    config: dict[str, Any],
    meta: dict[str, Any],
    stored: dict[str, Any],
    model_id: str | None = None,
    model_provider: str | None = None,
) -> dict[str, str]:
    """The model a query calls: the user's choice (`update-settings`, its variant suffix dropped) over the session's
    and the configured one. `model_id` / `model_provider`: a preview's what-if over all of them (a query has none)."""
    chosen = _chosen_model(config, stored)
    model = context.effective_model(config, meta, {"model": chosen} if chosen else {})
    wanted = model_catalog.runtime_model_id(model_id) if model_id else ""
    if wanted:
        return {"provider": model_provider or model["provider"], "id": wanted}
    if model_provider:
        return {"provider": model_provider, "id": model["id"]}
    return model


def config_snapshot(model: dict[str, str], interaction_mode: str | None = None) -> dict[str, str]:
    """WindieOS's effective-config snapshot of a query's model: `model_mode` (`local` as `list-models` files it),
    `model_provider`, `selected_model_id` (the id the model is called with), `interaction_mode` (`agent` unless a
    preview asks for `chat`: a query offers its tools)."""
    return {
        "model_mode": "local" if model_catalog.is_local(model["provider"]) else "online",
        "model_provider": model["provider"],
        "selected_model_id": model["id"],
        "interaction_mode": interaction_mode if interaction_mode in ("agent", "chat") else "agent",
    }


@dataclass
class QueryPreview:
    """What a query of one user in one conversation would be given now."""

    session_key: str
    model: dict[str, str]
    backend: list[dict[str, Any]]
    """The backend tools this caller's runs may be offered at all (before its policy narrows them)."""
    tools: list[dict[str, Any]]
    """The tools the model is offered: the backend's and the caller's own, under its policy."""
    nodes: list[NodeEntry]
    """The connected nodes this caller's runs are told about (none for a restricted one)."""
    system_prompt: str

    def tool_schemas(self) -> list[dict[str, Any]]:
        """`tool-schemas`' list: the offered tools as OpenAI function objects."""
        return client_tools.openai_schemas(self.tools)

    def first_turn_events(self) -> list[tuple[str, dict[str, Any]]]:
        """The transparency events of a conversation's first turn, in order, each only when it fits one message."""
        events: list[tuple[str, dict[str, Any]]] = [
            ("system-prompt", {"content": self.system_prompt}),
            ("tool-schemas", {"tool_schemas": self.tool_schemas()}),
        ]
        return [(kind, body) for kind, body in events if _size(body) <= MAX_EVENT_BYTES - ENVELOPE_BYTES]


def query_preview(
    services: Services,
    *,
    user_id: str,
    conversation_ref: str,
    policy: dict[str, Any],
    client_tool_defs: list[dict[str, Any]],
    config: dict[str, Any] | None = None,
    model_id: str | None = None,
    model_provider: str | None = None,
    offered: bool = True,
    with_prompt: bool = True,
) -> QueryPreview:
    """What a query of this user in this conversation, from a socket with this (already validated) policy and client
    tools, would be given now: its model, its tools and its system prompt, computed as the agent turn computes them.
    The first turn's `system-prompt` and `tool-schemas` come from it, and so do the HTTP API's `/api/sdk/*` previews
    (`model_id` / `model_provider`: their what-if; `offered` false: no tools, as in their `chat` mode;
    `with_prompt` false: no system prompt, which reads the agent's workspace files)."""
    config = config if config is not None else services.config.effective()
    key = session_key(config, user_id, conversation_ref)
    meta = services.sessions.load_meta(key) or {}
    model = query_model(config, meta, load_settings_item(services, user_id), model_id, model_provider)
    nodes = services.connections.nodes()
    backend = context.model_tools(services, nodes)
    tools = client_tools.narrowed(backend, client_tool_defs, policy) if offered else []
    hosts = client_tools.reachable_nodes(nodes, policy)
    system = ""
    if with_prompt and client_tools.is_guest(policy):  # as the run builds it: nothing of the owner's workspace
        system = context.guest_system_prompt(tools, model)
    elif with_prompt:
        agent = agent_of(config, user_id, conversation_ref)
        system = context.system_prompt(services, config, meta, key, agent, tools, model, hosts)
    return QueryPreview(key, model, client_tools.reachable(backend, policy), tools, hosts, system)


def _query(services: Services, sock: _WindieSocket, rid: Any, payload: dict[str, Any]) -> list[Any]:
    turn = str(rid) if rid is not None else str(uuid.uuid4())
    refused = {"turn": turn, "user": sock.user}  # a turn refused at once: its one event, numbered 1
    conversation = payload.get("conversation_ref")
    if not isinstance(conversation, str) or not conversation.strip() or len(conversation) > MAX_REF_CHARS:
        return _local_events(refused, [("error", {"message": "conversation_ref is required", "turn_ref": turn})])
    refused["conv"] = conversation
    content = payload.get("content")
    text = content if isinstance(content, str) and content.strip() else payload.get("text")
    if not isinstance(text, str) or not text.strip():
        return _local_events(refused, [("error", {"message": "text is required", "turn_ref": turn})])
    conn = sock.conn
    if len(subscriptions.of_connection(services.table, conn.connection_id)) >= MAX_ACTIVE_QUERIES:
        message = f"Too many queries at once on this connection (at most {MAX_ACTIVE_QUERIES})"
        return _local_events(refused, [("error", {"message": message, "turn_ref": turn})])
    config = services.config.effective()
    key = session_key(config, sock.user, conversation)
    media = _screenshots(services, sock, payload)
    chosen = _chosen_model(config, load_settings_item(services, sock.user))
    run_id = f"{_run_prefix(turn)}{uuid.uuid4().hex[:12]}"
    ref = {
        "turn": turn,
        "conv": conversation,
        "user": sock.user,
        "session": key,
        "startedAt": services.now_ms(),
    }
    answer = approval_answers.begin(services, conn, key, ref)  # the conversation may wait for a tool approval
    sub = base.subscribe(services, conn, run_id, key, ref)
    opening: list[tuple[str, dict[str, Any]]] = [("query-accepted", {"status": "accepted"})]
    meta = services.sessions.load_meta(key)
    if meta is None or message_count(meta) == 0:  # a conversation's first turn: what the model will be given
        own = client_tools.declared(services, conn.connection_id) if sock.tool_names else []
        opening += _transparency(services, sock, conversation, config, own)
    first = _numbered(services, sub, opening)
    for frame in first:  # before the run can say anything
        if not services.push(conn.connection_id, frame):
            base.unsubscribe(services, sub)
            approval_answers.settle(services, answer, follow=False)
            return []
    if not sock.admin:
        _mark_guest(services, key, meta)
    internal: dict[str, Any] = {"label": label(sock.user, conversation)}
    if not sock.admin and _command_name(text) != "stop":  # a guest's text is the model's: no command, no directive
        internal["literal"] = True
        internal["taint"] = taint.guest_taint(sock.user, services.now_ms())
    if sock.narrows:  # else its runs are everyone's: nothing more to read at each step
        internal.update(clientTools=True, toolPolicy=sock.policy, ownTools=bool(sock.tool_names))
    if media:
        internal["media"] = media
    if chosen is not None:
        internal["model"] = chosen
    params = {"sessionKey": key, "message": text, "runId": run_id}
    sent = base.call(services, conn, "chat.send", params, internal=internal)
    if sent.ok and sent.payload.get("status") == "started":
        approval_answers.settle(services, answer, follow=False)
        return []  # the rest comes from the run
    base.unsubscribe(services, sub)  # no run follows: the rest is numbered here
    if sent.ok and sent.payload.get("status") == "paused":  # the text answered a tool approval (or was reminded)
        return _answered(services, conn, answer, ref, len(first), sent.payload)
    approval_answers.settle(services, answer, follow=False)
    if not sent.ok:
        return _local_events(ref, [("error", {"message": sent.message, "turn_ref": turn})], len(first))
    reply = str(sent.payload.get("response") or sent.payload.get("error") or "")  # a command, answered at once
    said = [("streaming-response", {"text": reply}), ("streaming-complete", {"final_response": reply})]
    return _local_events(ref, said, len(first))


def _answered(
    services: Services,
    conn: Connection,
    answer: approval_answers.Answer | None,
    ref: dict[str, Any],
    opened: int,
    result: dict[str, Any],
) -> list[Any]:
    """A query that answered a paused run: the engine's response is the turn's first text; when the run goes on,
    the turn follows it (numbered on the run's subscription, where `query-accepted` was numbered too: its text,
    tools and `streaming-complete` come from the run), else the turn completes with the response."""
    response = str(result.get("response") or "")
    if answer is None or not approval_answers.resumed(result):
        approval_answers.settle(services, answer, follow=False)
        done = [("streaming-response", {"text": response}), ("streaming-complete", {"final_response": response})]
        return _local_events(ref, done, opened)
    # the run's subscription numbers the rest of the turn, after what this turn's own subscription numbered
    try:
        key = keys.run_subscription(answer.run_id, conn.connection_id)
        services.table.update(key, add={SEQUENCE: opened}, condition=cond.exists("PK"))
    except ConflictError:  # the run ended meanwhile (a /stop): the turn completes with the response
        approval_answers.settle(services, answer, follow=False)
        done = [("streaming-response", {"text": response}), ("streaming-complete", {"final_response": response})]
        return _local_events(ref, done, opened)
    for frame in _numbered(services, answer.sub, [("streaming-response", {"text": response + "\n\n"})]):
        services.push(conn.connection_id, frame)
    frames: list[Any] = []
    for payload in approval_answers.settle(services, answer, follow=True):
        frames += encode(services, answer.sub, payload)
    return frames


def _command_name(text: str) -> str | None:
    command = commands.parse_command(text)
    return command.name if command is not None else None


def _transparency(
    services: Services,
    sock: _WindieSocket,
    conversation: str,
    config: dict[str, Any],
    own: list[dict[str, Any]],
) -> list[tuple[str, dict[str, Any]]]:
    """`system-prompt` and `tool-schemas` of a conversation's first turn (each only when it fits one message)."""
    try:
        preview = query_preview(
            services,
            user_id=sock.user,
            conversation_ref=conversation,
            policy=sock.policy,
            client_tool_defs=own,
            config=config,
        )
    except Exception:  # the turn goes on without them
        log.exception("could not build the system prompt preview")
        return []
    return preview.first_turn_events()


def _mark_guest(services: Services, key: str, meta: dict[str, Any] | None) -> dict[str, Any]:
    """Mark a conversation a guest (an install) takes part in: nothing found in it goes into the agent's memory
    files, whoever resets or compacts it later (`compaction.keeps_memories`). One write, the first time only."""
    if meta is not None and meta.get(compaction.GUEST):
        return meta

    def mark(current: dict[str, Any]) -> bool:
        if current.get(compaction.GUEST):
            return False
        current[compaction.GUEST] = True
        return True

    return services.sessions.update_meta(key, mark)


def _turn_runs(services: Services, key: str, user: str, conversation: str, turn: str) -> list[str]:
    """The runs of one turn of this user's conversation that are still followed (running or queued), found by the
    turn's id exactly as the client sent it (the subscriptions keep it)."""
    found = set()
    for rec in services.table.query(keys.CLIENTS_PK, sk_prefix=keys.RUN_SUBSCRIPTION_PREFIX):
        sub = Subscription.from_record(rec)
        if sub is None or sub.session_key != key:
            continue
        if sub.ref.get("turn") == turn and sub.ref.get("conv") == conversation and sub.ref.get("user") == user:
            found.add(sub.run_id)
    return sorted(found)


STOP_GRACE_S = 2.0
"""How long `stop-query` waits for a turn it was named that is accepted but not yet queued."""


def _stop_run(services: Services, key: str, run_id: str) -> bool:
    """Take the run out of the session's queue, or stop it if it runs. A turn is acknowledged (`query-accepted`)
    before it is queued, and frames may be handled in any order (API Gateway's parallel invocations), so a turn
    that is neither yet is waited for a moment; one that ended meanwhile is not found, and nothing is stopped."""
    deadline = time.monotonic() + STOP_GRACE_S
    while True:
        if runs.unqueue(services, key, run_id):  # not started yet: it never will
            return True
        if runs.stop(services, key, emit_error=events.error_emitter(services), only=run_id).was_running:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def _stop(services: Services, sock: _WindieSocket, rid: Any, payload: dict[str, Any]) -> list[Any]:
    """Stop the conversation's running turn, or the turn `turn_ref` names, running or still queued. `stopped`:
    whether a turn was stopped (or taken out of the queue) by this request. The end of a stopped turn never follows
    the acknowledgement: its subscriptions go first (so no "Run cancelled by user" error either), and a step still
    streaming finds its subscription gone as it numbers its next event (`_numbered`), and sends nothing more."""
    conversation = _ref(payload)
    given = payload.get("turn_ref")  # a query's id may be a number: its turn is kept as text
    turn = str(given) if isinstance(given, str | int) and not isinstance(given, bool) else None
    key = session_key(services.config.effective(), sock.user, conversation)
    if turn is None:
        run = runs.current_run(services, key)
        targets = [str(run["runId"])] if run and run.get("runId") else []
    else:
        targets = _turn_runs(services, key, sock.user, conversation, turn)
    stopped = False
    for run_id in targets:
        for rec in services.table.query(keys.CLIENTS_PK, sk_prefix=f"{keys.RUN_SUBSCRIPTION_PREFIX}{run_id}~"):
            sub = Subscription.from_record(rec)
            if sub is not None and sub.run_id == run_id:
                subscriptions.drop(services.table, sub)
        stopped = _stop_run(services, key, run_id) or stopped
    body: dict[str, Any] = {"conversation_ref": conversation, "stopped": stopped}
    if turn is not None:
        body["turn_ref"] = turn
    return [_plain("stop-query-ack", body, rid, user=sock.user, conversation=conversation)]


# --- client tools -------------------------------------------------------------------------------------------------


def _tool_result(services: Services, sock: _WindieSocket, rid: Any, payload: dict[str, Any]) -> list[Any]:
    request_id = payload.get("request_id")
    if not isinstance(request_id, str) or not request_id or len(request_id) > MAX_REF_CHARS:
        raise _InvalidFrameError("request_id is required")
    found = deferred.get(services, request_id)
    owner = client_tools.owner(sock.conn.connection_id)
    if found is None or found.call.kind != deferred.CLIENT_TOOL or found.call.node_id != owner:
        raise _InvalidFrameError("Unknown request_id")
    if found.state != deferred.PENDING:
        return []  # late (timed out, stopped): dropped
    deferred.settle(services, request_id, _outcome(services, sock, payload))
    return []


def _outcome(services: Services, sock: _WindieSocket, payload: dict[str, Any]) -> dict[str, Any]:
    """A `tool-result` as a tool call's outcome: its output text, with the screenshot (an artifact, or inline, kept
    as one) as a reference to that artifact; `success: false` as an error."""
    data = as_dict(payload.get("data"))
    output = data.get("output")
    text = output if isinstance(output, str) else ("" if output is None else json.dumps(output, ensure_ascii=False))
    if payload.get("success") is not True:
        error = payload.get("error")
        message = error if isinstance(error, str) and error else text or "The tool failed on the client"
        return {"error": message}
    text = text or "(no output)"
    image, note = _result_image(services, sock, data)
    if note:
        text = f"{text}\n[{note}]"
    if image is None:
        return {"result": text}
    return {"result": {"content": [{"type": "text", "text": text}, image]}}


def _too_large(size: int) -> str:
    return f"screenshot left out: {size} bytes, over the {MAX_TOOL_IMAGE_BYTES} a model takes"


def _result_image(services: Services, sock: _WindieSocket, data: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """A tool result's screenshot as an image referencing an artifact (an inline one is stored as one first, owned
    by the socket's user), never its bytes: a tool result is stored with the session and sent with every later
    model call. (None, why) when there is none, or it is not usable: missing, not the user's, not an image, over
    `MAX_TOOL_IMAGE_BYTES`."""
    ref = data.get("screenshot_ref")
    if isinstance(ref, str):
        head = artifacts.head(services.workspace, ref)
        if head is not None and head.readable_by(sock.reader) and head.content_type.startswith("image/"):
            if head.size_bytes > MAX_TOOL_IMAGE_BYTES:
                return None, _too_large(head.size_bytes)
            return {"type": "image", "r2Key": keys.media_object(head.artifact_id), "mimeType": head.content_type}, ""
        log.warning("tool screenshot %s is not available; going on without it", ref[:80])
    inline = data.get("screenshot")
    if isinstance(inline, str) and inline:
        encoded = inline.split(",", 1)[-1] if inline.startswith("data:") else inline
        if len(encoded) > (MAX_TOOL_IMAGE_BYTES * 4) // 3 + 4:  # too large, without decoding it
            return None, _too_large(len(encoded) * 3 // 4)
        try:
            raw = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            log.warning("an inline tool screenshot was not base64; going on without it")
            return None, ""
        mime = sniff.sniff_mime(raw) or "image/png"
        if not mime.startswith("image/") or not raw:
            return None, ""
        if len(raw) > MAX_TOOL_IMAGE_BYTES:
            return None, _too_large(len(raw))
        owner = sock.reader or artifacts.PRIVATE_OWNER  # never public media: the client did not upload it
        saved = artifacts.save(services.workspace, raw, owner=owner, mime_type=mime, filename="tool-screenshot")
        return {"type": "image", "r2Key": keys.media_object(saved.artifact_id), "mimeType": saved.content_type}, ""
    return None, ""


def _bundle_result(services: Services, sock: _WindieSocket, rid: Any, payload: dict[str, Any]) -> list[Any]:
    return []  # bundles are never sent, so their results answer nothing


# --- history ------------------------------------------------------------------------------------------------------


def _timestamp(value: Any, default: int) -> int:
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return int(value if value > 10**11 else value * 1000)
    if isinstance(value, str) and value:
        try:
            return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)
        except ValueError:
            return default
    return default


def _calls_of(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """An assistant entry's `tool_calls` (OpenAI's shape or a flat one) as stored tool-call blocks."""
    blocks = []
    for n, call in enumerate(entry.get("tool_calls") or []):
        if not isinstance(call, dict):
            continue
        function = as_dict(call.get("function")) or call
        name = function.get("name")
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                arguments = {}
        if not isinstance(name, str):
            continue
        call_id = call.get("id") if isinstance(call.get("id"), str) else f"tool_call_{n}"
        blocks.append(
            {
                "type": "toolCall",
                "id": call_id,
                "name": name,
                "arguments": arguments if isinstance(arguments, dict) else {},
            }
        )
    return blocks


def convert_history(
    services: Services, session: str, entries: list[Any], reader: str | None, now: int
) -> list[dict[str, Any]]:
    """WindieOS conversation entries as stored messages: users' text (and screenshot), assistants' text and tool
    calls, tool outputs as the results of those calls (as a user's note when no call of theirs precedes them)."""
    messages: list[dict[str, Any]] = []
    open_calls: dict[str, str] = {}
    for n, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise _InvalidFrameError(f"messages[{n}] must be an object")
        role = entry.get("role")
        content = entry.get("content")
        if content is None:
            content = ""
        if not isinstance(content, str):
            content = json.dumps(content, ensure_ascii=False)
        stamp = _timestamp(entry.get("timestamp"), now + n)
        if role == "user":
            image = _image_entry(services, entry.get("screenshot_ref"), reader) if entry.get("screenshot_ref") else None
            if image is None:
                messages.append({"role": "user", "content": content, "timestamp": stamp})
            else:
                block = {"type": "image", "r2Key": image["r2Key"], "mimeType": image["mimeType"]}
                messages.append(
                    {"role": "user", "content": [{"type": "text", "text": content}, block], "timestamp": stamp}
                )
        elif role == "assistant":
            calls = _calls_of(entry)
            blocks: list[dict[str, Any]] = [{"type": "text", "text": content}] if content else []
            blocks += calls
            open_calls = {str(c["id"]): str(c["name"]) for c in calls}
            messages.append(
                {
                    "role": "assistant",
                    "content": blocks,
                    "api": "windie",
                    "provider": "windie",
                    "model": "rehydrated",
                    "usage": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 0, "cost": {}},
                    "stopReason": "toolUse" if calls else "stop",
                    "timestamp": stamp,
                }
            )
        elif role == "tool":
            call_id = entry.get("tool_call_id") or entry.get("correlation_id")
            name = entry.get("tool_name") if isinstance(entry.get("tool_name"), str) else "tool"
            if isinstance(call_id, str) and call_id in open_calls:
                result = {
                    "role": "toolResult",
                    "toolCallId": call_id,
                    "toolName": open_calls.pop(call_id),
                    "content": [{"type": "text", "text": content}],
                    "isError": False,
                    "timestamp": stamp,
                }
                messages.append(result)
            else:
                messages.append({"role": "user", "content": f"[output of {name}]\n{content}", "timestamp": stamp})
        else:
            raise _InvalidFrameError(f"messages[{n}].role must be user, assistant or tool")
    return messages


def _rehydrate(services: Services, sock: _WindieSocket, rid: Any, payload: dict[str, Any]) -> list[Any]:
    conversation = _ref(payload)
    mode = payload.get("rehydrate_mode", "replace")
    if mode != "replace":
        raise _InvalidFrameError('rehydrate_mode must be "replace"')
    entries = payload.get("messages")
    if not isinstance(entries, list) or len(entries) > MAX_REHYDRATE_MESSAGES:
        raise _InvalidFrameError(f"messages must be a list (at most {MAX_REHYDRATE_MESSAGES})")
    key = session_key(services.config.effective(), sock.user, conversation)
    if runs.current_run(services, key) is not None:
        return [
            _error(rid, "A query is running in this conversation: stop it first", sock.user, conversation=conversation)
        ]
    now = services.now_ms()
    if not sock.admin:  # before the reset: what it archives is a guest's, and no memory is taken from it
        _mark_guest(services, key, services.sessions.load_meta(key))
    reset = base.call(services, sock.conn, "session.reset", {"sessionKey": key})  # archived, as a reset archives
    if not reset.ok:
        return [_error(rid, f"Could not replace the history: {reset.message}", sock.user, conversation=conversation)]
    messages = convert_history(services, key, entries, sock.reader, now)
    if messages:
        services.sessions.append_messages(key, messages, updated_at=now)
    services.sessions.touch_registry(key, now=now, default_label=label(sock.user, conversation))
    return []


def compaction_seconds(services: Services, config: dict[str, Any]) -> float:
    """How long `compact-history` may take: `timeouts.llmMs` locally; on AWS, where it runs inside the frame's
    Lambda invocation, what that invocation has left less a margin, and never over `COMPACTION_AWS_S`."""
    longest = settings.llm_timeout_ms(config) / 1000
    if services.settings.local:
        return longest
    left = invocation.remaining_seconds()
    bound = COMPACTION_AWS_S if left is None else left - LAMBDA_MARGIN_S
    return max(0.0, min(longest, COMPACTION_AWS_S, bound))


def _compact(services: Services, sock: _WindieSocket, rid: Any, payload: dict[str, Any]) -> list[Any]:
    """Summarize a conversation's older messages now, within what this request may take (on AWS, its Lambda
    invocation's remaining time), holding the session as a run does meanwhile: a query sent meanwhile queues."""
    conversation = _ref(payload)
    config = services.config.effective()
    key = session_key(config, sock.user, conversation)
    # its events are numbered as a turn's are (the SDK checks the sequence of every event that names a
    # conversation), the request's id their turn: 1 started, 2 completed or failed (1 when it never started)
    ref = {"turn": str(rid) if rid is not None else str(uuid.uuid4()), "conv": conversation, "user": sock.user}
    ref["session"] = key
    sent = 0

    def failed(message: str) -> list[Any]:
        body = {"conversation_ref": conversation, "message": message}
        return _local_events(ref, [("context-compaction-failed", body)], sent)

    seconds = compaction_seconds(services, config)
    if seconds < MIN_COMPACTION_S:
        return failed("Compaction needs more time than this request has left; try again")
    hold = f"compact-{uuid.uuid4().hex}"
    if not runs.hold(services, key, hold, int((seconds + HOLD_MARGIN_S) * 1000), kind="compaction"):
        return failed("A query is running in this conversation")
    try:
        (started,) = _local_events(ref, [("context-compaction-started", {"conversation_ref": conversation})])
        if not services.push(sock.conn.connection_id, started):
            return []
        sent = 1
        deadline = time.monotonic() + seconds
        meta = services.sessions.load_meta(key) or {}
        if not sock.admin:
            meta = _mark_guest(services, key, meta)
        messages = services.sessions.messages(key, meta=meta)
        model = query_model(config, meta, load_settings_item(services, sock.user))
        force = payload.get("force") is not False
        done = compaction.maybe_compact(
            services, config, key, meta, messages, model, "", force=force, deadline=deadline, strict=True
        )
    except compaction.SummaryFailedError:
        return failed("The model could not summarize the history; history unchanged")
    except compaction.OutOfTimeError:
        log.warning("compacting %s did not finish within %.1fs", key, seconds)
        return failed(f"Compaction could not finish within {seconds:.0f}s (this request's limit); history unchanged")
    except Exception:
        log.exception("compacting %s failed", key)
        return failed("Compaction failed")
    finally:
        runs.finish(services, key, hold, None, emit_error=events.error_emitter(services))
    body = {
        "conversation_ref": conversation,
        "compacted": done is not None,
        "message_count": len(done) if done is not None else len(messages),
    }
    return _local_events(ref, [("context-compaction-completed", body)], sent)


# --- settings -----------------------------------------------------------------------------------------------------


def load_settings_item(services: Services, user_id: str) -> dict[str, Any]:
    """A user's stored settings (what they changed; nothing secret)."""
    rec = services.table.get(keys.windie_settings(user_id))
    return dict(rec.data) if rec is not None else {}


def _chosen_model(config: dict[str, Any], stored: dict[str, Any]) -> dict[str, str] | None:
    """The model a user chose (`update-settings`), while the configured providers still offer it (else none: the
    gateway's model)."""
    provider, choice = stored.get("model_provider"), stored.get("selected_model_id")
    if isinstance(provider, str) and provider and isinstance(choice, str) and choice:
        model_id = model_catalog.runtime_model_id(choice)
        if model_id and model_catalog.is_offered(config, provider, model_id):
            return {"provider": provider, "id": model_id}
    return None


def _check_model_choice(config: dict[str, Any], stored: dict[str, Any], changes: dict[str, Any]) -> None:
    """Refuse a model choice the configured providers do not offer (`list-models`): a client picks among the
    owner's models, it does not name one to call (and pay for)."""
    model = as_dict(config.get("model"))
    provider = changes.get("model_provider") or stored.get("model_provider") or model.get("provider") or "anthropic"
    choice = changes.get("selected_model_id") or stored.get("selected_model_id") or model.get("id") or ""
    model_id = model_catalog.runtime_model_id(str(choice))
    if not model_id or not model_catalog.is_offered(config, str(provider), model_id):
        raise _InvalidFrameError(
            f"Model not offered by this gateway: {str(provider)[:60]}/{model_id[:100]} (see list-models)"
        )


def settings_view(services: Services, user_id: str) -> dict[str, Any]:
    """`settings-loaded`'s config: the user's settings over the defaults, the gateway's model when they chose none,
    and the providers with every `api_key` blank."""
    config = services.config.effective()
    stored = load_settings_item(services, user_id)
    view = {name: stored.get(name, default) for name, default in SETTING_DEFAULTS.items()}
    model = as_dict(config.get("model"))
    view["model_provider"] = str(stored.get("model_provider") or model.get("provider") or "anthropic")
    view["selected_model_id"] = str(stored.get("selected_model_id") or model.get("id") or "")
    enabled = as_dict(stored.get("provider_enabled"))
    names = list(dict.fromkeys([*model_catalog.providers(config), *enabled]))
    view["provider_api_keys"] = {name: {"enabled": bool(enabled.get(name, True)), "api_key": ""} for name in names}
    return view


def _load_settings(services: Services, sock: _WindieSocket, rid: Any, payload: dict[str, Any]) -> list[Any]:
    return [_plain("settings-loaded", {"config": settings_view(services, sock.user)}, rid, user=sock.user)]


def _provider_keys(value: Any) -> tuple[dict[str, bool], dict[str, str]]:
    """`provider_api_keys` as (enabled flags, keys to set); a blank `api_key` (what `settings-loaded` shows) keeps
    the key there is."""
    if not isinstance(value, dict):
        raise _InvalidFrameError("provider_api_keys must be an object")
    enabled: dict[str, bool] = {}
    secrets_given: dict[str, str] = {}
    for name, entry in value.items():
        if not isinstance(name, str) or not PROVIDER_NAME.match(name) or not isinstance(entry, dict):
            raise _InvalidFrameError("provider_api_keys entries are {provider: {enabled, api_key}}")
        if "enabled" in entry:
            if not isinstance(entry["enabled"], bool):
                raise _InvalidFrameError(f"provider_api_keys.{name}.enabled must be true or false")
            enabled[name] = entry["enabled"]
        key = entry.get("api_key")
        if key is not None and not isinstance(key, str):
            raise _InvalidFrameError(f"provider_api_keys.{name}.api_key must be a string")
        if key and key.strip():
            secrets_given[name] = key.strip()
    return enabled, secrets_given


def _update_settings(services: Services, sock: _WindieSocket, rid: Any, payload: dict[str, Any]) -> list[Any]:
    changes: dict[str, Any] = {}
    updated: list[str] = []
    enabled: dict[str, bool] = {}
    provider_keys: dict[str, str] = {}
    for name, value in payload.items():
        if name in IGNORED_SETTINGS:
            continue
        if name in SETTING_FLAGS:
            if not isinstance(value, bool):
                raise _InvalidFrameError(f"{name} must be true or false")
            changes[name] = value
        elif name in SETTING_CHOICES:
            if value not in SETTING_CHOICES[name]:
                raise _InvalidFrameError(f"{name} must be one of {', '.join(sorted(SETTING_CHOICES[name]))}")
            changes[name] = value
        elif name in MODEL_KEYS:
            if not isinstance(value, str) or not value.strip() or len(value) > 200:
                raise _InvalidFrameError(f"{name} must be a non-empty string")
            changes[name] = value.strip()
        elif name == "provider_api_keys":
            enabled, provider_keys = _provider_keys(value)
        else:
            raise _InvalidFrameError(f"Unknown setting: {str(name)[:60]}")
        updated.append(name)
    if provider_keys and not sock.admin:
        raise _InvalidFrameError("Provider API keys can be set only with the gateway's own token")
    for provider, secret in provider_keys.items():  # through config.set: its rules, its masking, its audit
        done = base.call(services, sock.conn, "config.set", {"path": f"apiKeys.{provider}", "value": secret})
        if not done.ok:
            raise _InvalidFrameError(f"Could not set the key of {provider}: {done.message}")
    stored = load_settings_item(services, sock.user)
    if any(name in changes for name in MODEL_KEYS):  # (with the keys just set: a provider they make usable counts)
        _check_model_choice(services.config.effective(), stored, changes)
    if changes or enabled:
        stored.update(changes)
        if enabled:
            stored["provider_enabled"] = {**(stored.get("provider_enabled") or {}), **enabled}
        stored["updatedAt"] = services.now_ms()
        services.table.put(keys.windie_settings(sock.user), stored)
    return [_plain("settings-updated", {"updated_keys": updated}, rid, user=sock.user)]


def _list_models(services: Services, sock: _WindieSocket, rid: Any, payload: dict[str, Any]) -> list[Any]:
    return [_plain("models-listed", model_catalog.catalog(services.config.effective()), rid, user=sock.user)]


def _wakeword(services: Services, sock: _WindieSocket, rid: Any, payload: dict[str, Any]) -> list[Any]:
    speech = bool(settings_view(services, sock.user).get("speech_mode_enabled"))
    activated = {"speech_mode_enabled": speech, "greeting": GREETING, "status": "listening"}
    return [
        _plain("wakeword-activated", activated, rid, user=sock.user),
        _plain("wakeword-greeting", {"text": GREETING}, rid, user=sock.user),
    ]


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


# --- the run's events ---------------------------------------------------------------------------------------------


def _cut(text: str, limit: int) -> str:
    data = text.encode()
    if len(data) <= limit:
        return text
    return data[:limit].decode("utf-8", "ignore") + " [truncated: the whole of it is in the session's transcript]"


def _thinking_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if not isinstance(content, list):
        return ""
    return "".join(str(b.get("thinking") or "") for b in content if isinstance(b, dict) and b.get("type") == "thinking")


SEQUENCE = "seq"
"""The attribute of a subscription that counts the events its turn was sent (`_numbered`)."""


@router.run_events(WINDIE)
def encode(services: Services, sub: Subscription, payload: dict[str, Any]) -> list[Any]:
    """WindieOS's events for one event of a run (see the module docstring). Once `stop-query` dropped the
    subscription, nothing more: numbering an event finds it gone (`_numbered`)."""
    if sub.scratch.get("stopped") or sub.scratch.get("closed") or approval_answers.held(sub, payload):
        return []
    if payload.get("state") == "paused":  # the prompt is the turn's reply: it completes; the next query answers it
        prompt = approval_answers.prompt_of(payload)
        frames = _numbered(
            services,
            sub,
            [("streaming-response", {"text": prompt}), ("streaming-complete", {"final_response": prompt})],
        )
        approval_answers.end_turn(services, sub)
        return frames
    return _numbered(services, sub, _events_of(sub.ref, payload))


def _events_of(ref: dict[str, Any], payload: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    state = payload.get("state")
    if state == "delta":
        return [("streaming-response", {"text": str(payload.get("text") or "")})]
    if state == client_tools.CALL_STATE:
        body = {
            "tool_name": payload.get("toolName"),
            "parameters": as_dict(payload.get("arguments")),
            "request_id": payload.get("callId"),
            "metadata": {"tool_call_id": payload.get("toolCallId")},
        }
        return [("tool-call", body)]
    if state == "toolResult":
        if payload.get("onClient"):
            return []  # the client ran it: it has the result (a backend tool of the same name is reported)
        failed = bool(payload.get("isError"))
        output = _cut(str(payload.get("content") or ""), MAX_EVENT_BYTES // 2)
        body = {
            "tool_name": payload.get("toolName"),
            "success": not failed,
            "execution_time": 0,
            "output": output,
            "error": output if failed else None,
            "metadata": {"tool_call_id": payload.get("toolCallId")},
        }
        return [("tool-output", body)]
    if state == "usage":
        usage = as_dict(payload.get("usage"))
        prompt = int(usage.get("input") or 0) + int(usage.get("cacheRead") or 0) + int(usage.get("cacheWrite") or 0)
        output_tokens = int(usage.get("output") or 0)
        body = {
            "prompt_tokens": prompt,
            "visible_output_tokens": output_tokens,
            "thinking_tokens": None,
            "output_tokens_total": output_tokens,
            "total_tokens": int(usage.get("totalTokens") or prompt + output_tokens),
            "conversation_tokens": prompt + output_tokens,
            "usage_source": "provider",
        }
        return [("token-count", body)]
    if state == "final":
        message = as_dict(payload.get("message"))
        text = text_of(message)
        events: list[tuple[str, dict[str, Any]]] = []
        thinking = _thinking_of(message)
        if thinking:
            events.append(("llm-thought", {"status": _cut(thinking, MAX_EVENT_BYTES // 2)}))
        fits = len(text.encode()) <= MAX_EVENT_BYTES - 4096
        if fits:
            events.append(("assistant-message-full", {"content": text}))
        events.append(("streaming-complete", {"final_response": text} if fits else {}))
        return events
    if state == "error":
        reason = str(payload.get("error") or "The run failed")
        return [("error", {"message": _cut(reason, 4096), "turn_ref": ref.get("turn")})]
    return []


# --- the socket's end ---------------------------------------------------------------------------------------------


@router.on_client_gone
def _gone(services: Services, conn: Connection) -> None:
    """A WindieOS socket went away: the calls of its tools fail at once (their runs carry on), its tools go."""
    if conn.dialect != WINDIE or conn.pending:
        return
    deferred.fail_node_calls(services, client_tools.owner(conn.connection_id), "Client disconnected")
    client_tools.forget(services, conn.connection_id)
