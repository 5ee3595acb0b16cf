"""The handshake: its frame parsed and validated, the client manifest checked, the socket accepted (or refused)
as the caller it showed itself to be."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from orbital.agent import client_tools
from orbital.aws import secrets
from orbital.dialects import base
from orbital.dialects.detect import WINDIE, WINDIE_TYPES
from orbital.dialects.windie.common import (
    BACKEND_SEPARATOR,
    CAPABILITIES,
    CLOSE_CODE,
    MAX_MANIFEST_BYTES,
    MAX_MANIFEST_TOOLS,
    MAX_NAMES,
    MAX_REF_CHARS,
    MODES,
    REMOVED_FIELDS,
    RESERVED,
    _InvalidFrameError,
    _size,
)
from orbital.dialects.windie.frames import _plain
from orbital.engines import socket_gate
from orbital.protocol.registry import DialectClose, DialectInbound
from orbital.tools import mcp_calls
from orbital.tools.catalog import all_tools
from orbital.tools.definitions import NATIVE_PREFIX

if TYPE_CHECKING:
    from orbital.ports.services import Services
    from orbital.store.connections import Connection


HANDSHAKE_GRACE_S = 2.0
"""How long a message that arrived before its socket's handshake was accepted waits for it."""


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
