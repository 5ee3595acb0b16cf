"""The one dispatcher: a raw text frame in, at most one response frame out. No I/O of its own beyond the ports.

Rules (spec §1.2): malformed JSON → no response; unknown `type` → ignored; `res`/`evt` from peers → ignored;
anything but `connect` before a successful connect → 101; unknown method → 404; a method the socket's mode may not
call → `Method {method} not allowed for mode {mode}: …` (`MethodSpec.refusal`), before its params are read; a
method whose scope the connection's role lacks (ADR 0042) → 403 `Method {method} needs scope {scope}; this device's
role is {role}`, after the mode and before the params; oversized frame → 413.
Unexpected exceptions become a 500 with a reference id, never a stack trace.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from orbital.domain import roles
from orbital.errors import RpcError
from orbital.protocol.context import CallContext
from orbital.protocol.frames import error_frame, ok_frame

if TYPE_CHECKING:
    from orbital.ports.services import Services
    from orbital.protocol.registry import Registry
    from orbital.store.connections import Connection

log = logging.getLogger("orbital.dispatch")

DEFERRED = object()
"""Returned by a handler whose response will be sent later with the original frame id."""


@dataclass
class Outcome:
    response: dict[str, Any] | None
    close: tuple[int, str] | None = None
    context: CallContext | None = None

    def has_after_reply(self) -> bool:
        return bool(self.context and self.context.after_reply)

    def run_after_reply(self) -> None:
        if self.context:
            for action in self.context.after_reply:
                try:
                    action()
                except Exception:
                    log.exception("post-reply action failed")


def describe_validation(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        loc = ".".join(str(p) for p in err.get("loc", ())) or "params"
        parts.append(f"{loc}: {err.get('msg', 'invalid')}")
    return "; ".join(parts)


def _find_id(raw: str) -> Any:
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    return data.get("id") if isinstance(data, dict) else None


DIALECT_ONLY = "dialectOnly"
"""On a connection record's `extra`: the socket authenticated with a credential of one dialect only (a WindieOS install
token), so its GSV requests are refused; its translator still calls methods on its behalf (`dialects.base.call`)."""


class Dispatcher:
    def __init__(self, registry: Registry) -> None:
        self.registry = registry

    def dispatch_text(self, services: Services, connection_id: str, raw: str | bytes) -> Outcome:
        size = len(raw)
        limit = services.settings.max_frame_bytes
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        if size > limit:
            msg = f"Frame too large: {size} bytes (limit {limit})"
            return Outcome(error_frame(_find_id(text), {"code": 413, "message": msg}))
        try:
            frame = json.loads(text)
        except ValueError:
            log.debug("malformed JSON from %s", connection_id)
            return Outcome(None)
        if not isinstance(frame, dict) or frame.get("type") != "req":
            return Outcome(None)
        return self.dispatch(services, connection_id, frame)

    def dispatch(
        self,
        services: Services,
        connection_id: str,
        frame: dict[str, Any],
        *,
        conn: Connection | None = None,
        internal: dict[str, Any] | None = None,
    ) -> Outcome:
        """Answer one request frame. `conn`: the socket's record when the caller has just read it (a dialect's
        translator), saving the read; `internal`: what that caller passes beside the params
        (`CallContext.internal`)."""
        frame_id = frame.get("id")
        method = frame.get("method")
        if not isinstance(method, str) or not isinstance(frame_id, str | int) or isinstance(frame_id, bool):
            err = {"code": 400, "message": "Invalid request frame: id and method are required"}
            return Outcome(error_frame(frame_id, err))
        ctx = CallContext(services=services, connection_id=connection_id, frame_id=frame_id, internal=internal or {})
        try:
            if method != "connect":
                ctx.conn = conn if conn is not None else services.connections.get(connection_id)
                if ctx.conn is not None and ctx.conn.pending:
                    ctx.conn = None
                if ctx.conn is None:
                    raise RpcError("Not connected", code=101)
                if conn is None and ctx.conn.extra.get(DIALECT_ONLY):
                    raise RpcError("This socket may speak only its own dialect", code=403)
            spec = self.registry.get(method)
            if spec is None:
                raise RpcError(f"Unknown method: {method}", code=404)
            if ctx.conn is not None and ctx.conn.mode not in spec.modes:
                code, message = spec.refusal(ctx.conn.mode)
                raise RpcError(message, code=code)
            if ctx.conn is not None:
                scope = spec.scope_for(ctx.conn.mode)
                role = roles.role_of(ctx.conn.extra)
                if not roles.allows(role, scope):
                    raise RpcError(roles.refusal(method, scope, role), code=403)
            raw_params = frame.get("params")
            if raw_params is None:
                raw_params = {}
            if not isinstance(raw_params, dict):
                raise RpcError("Invalid params: expected an object", code=400)
            try:
                params = spec.params.model_validate(raw_params)
            except ValidationError as exc:
                raise RpcError(f"Invalid params for {method}: {describe_validation(exc)}", code=400) from None
            result = spec.handler(ctx, params)
        except RpcError as exc:
            return Outcome(error_frame(frame_id, exc.to_wire()), close=ctx.close_after, context=ctx)
        except ValidationError as exc:
            return Outcome(error_frame(frame_id, {"code": 400, "message": describe_validation(exc)}), context=ctx)
        except Exception:
            ref = uuid.uuid4().hex[:12]
            log.exception("method %s failed (ref %s)", method, ref)
            err = {"code": 500, "message": f"Internal error (ref {ref})"}
            return Outcome(error_frame(frame_id, err), context=ctx)
        if result is DEFERRED:
            return Outcome(None, context=ctx)
        return Outcome(ok_frame(frame_id, result), close=ctx.close_after, context=ctx)
