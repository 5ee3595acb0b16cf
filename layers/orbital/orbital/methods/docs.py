"""Render docs/protocol.md from the method registry (`make docs`; `make test` checks it is current)."""

from __future__ import annotations

import inspect
import sys
from typing import Any

from pydantic import BaseModel

from orbital.agent.events import CHAT_STATES
from orbital.dialects import detect
from orbital.methods import registry
from orbital.methods.connect import EVENTS
from orbital.methods.docs_late import LATE_RELEASE

HEADER = """# Orbital protocol reference

Generated from the method registry by `make docs` — do not edit by hand.

Frames are JSON text: requests `{"type":"req","id","method","params"}`, responses
`{"type":"res","id","ok":true,"payload"}` or `{"type":"res","id","ok":false,"error":{"code","message"}}`, events
`{"type":"evt","event","payload"}`. The first request on a socket must be `connect`; anything else gets
`101 Not connected`. Each method names the connection modes (`client`, `node`, `channel`) that may call it
("Modes" below); any other mode gets `403 Method … not allowed for mode …: …` (GSV's own codes and sentences where
GSV has them: see "GSV's last protocol-1 release").
On a gateway with a token (always on AWS), `connect` must carry it in `auth.token`; a socket that has not connected
is closed (`connection.closing`, code 1008) after its 8th request or 10 s after it opened.
Malformed JSON gets no reply and the socket stays open. A message over 128 KB, or a single
WebSocket frame over 32 KB, closes the socket with 1009, as API Gateway does: send longer messages as fragments.
A reply that would exceed 128 KB (API Gateway's cap for one WebSocket message) is not sent; the request gets a
`413 Reply too large to send: N bytes …` error instead, so no caller waits for a reply that cannot arrive: ask for
less (`workspace.read` of a smaller file, `limit` on listings and history).

Params are lenient, as in GSV: unknown fields are ignored, and a field of the wrong JSON type counts as missing, so
the method answers with its own message for a missing field (`400 sessionKey and message required`). Fields a
service checks itself (cron jobs, workspace paths, transfer sizes) are passed on as given and answered with that
service's message.

Over HTTP: every method a client socket may call, but `connect`, is also `POST /api/v1/{method}` on the gateway's
HTTP API (ADR 0029; "HTTP" below), with the params as the JSON body (an empty body is `{}`) and the payload as the
answer. It needs `Authorization: Bearer <gateway token>` where the gateway has one (401 without it, before the body
is read). Errors are `{"detail": message, "code": code}` with the HTTP status of the code (1xx codes are 400). A
deferred method's request waits for the answer at most 25 s, then answers 504. `/openapi.json` and `/docs` describe
them all.
"""

CODES = [
    (101, "Not connected (a method before a successful connect; `tool.invoke` / `logs.get` from a non-client)"),
    (102, "Unsupported protocol version"),
    (103, "Invalid client mode / node or channel registration errors"),
    (400, "Missing or invalid params"),
    (401, "Unauthorized: invalid or missing token (the socket is then closed with 4001)"),
    (403, "Not allowed for this socket (its mode may not call the method, or the call is not addressed to it)"),
    (404, "Unknown method / unknown item"),
    (409, "Conflicts with the current state (`node.forget` of a connected node without `force`, a `callId` in use)"),
    (413, "Frame too large, or a reply too large to send"),
    (
        429,
        "Token budget exceeded: a run refused before it started (`chat.send`, `channel.inbound`), "
        "`Token budget exceeded ({scope}: {used}/{limit}): …` with scope `session`, `daily` or `monthly`",
    ),
    (500, "Failure while handling the request (message says what; unexpected ones carry a reference id)"),
    (503, "A node or channel needed for the request is not connected"),
]


PRIMITIVES = frozenset({"string", "integer", "number", "boolean", "object", "null", "any"})
"""JSON types as the tables name them; every other name in a type column is a model with its own entry (Types)."""


def _type_of(schema: dict[str, Any], defs: dict[str, Any]) -> str:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    if "anyOf" in schema:
        parts = [_type_of(s, defs) for s in schema["anyOf"]]
        return " \\| ".join(p for p in parts if p != "null") or "null"
    kind = schema.get("type")
    if kind == "array":
        return f"{_type_of(schema.get('items', {}), defs)}[]"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        value = _type_of(schema["additionalProperties"], defs)
        return "object" if value == "any" else f"object of {value}"
    return str(kind) if kind else "any"


def _rows(schema: dict[str, Any], defs: dict[str, Any]) -> list[tuple[str, str, str]]:
    required = set(schema.get("required", []))
    rows = []
    for name, prop in (schema.get("properties") or {}).items():
        rows.append((name, _type_of(prop, defs), "yes" if name in required else ""))
    return rows


def _fields(model: type[BaseModel], types: dict[str, dict[str, Any]] | None = None) -> list[tuple[str, str, str]]:
    """The rows of a model's table; the models its fields refer to are added to `types` (name -> schema)."""
    schema = model.model_json_schema()
    defs = schema.get("$defs", {})
    if types is not None:
        for name, definition in defs.items():
            if types.setdefault(name, definition) != definition:  # two models of one name: rename one
                raise ValueError(f"two different types are named {name} in the protocol's models")
    return _rows(schema, defs)


def _type_entries(types: dict[str, dict[str, Any]]) -> list[str]:
    """`## Types`: one entry per model a table refers to, with its own fields (or its values)."""
    lines = [
        "## Types",
        "",
        "The objects the tables above refer to by name. Like params, they are lenient: unknown fields are ignored.",
        "",
    ]
    for name in sorted(types):
        definition = types[name]
        lines += [f"### {name}", ""]
        text = " ".join(str(definition.get("description") or "").split())
        if text:
            lines += [text, ""]
        if "enum" in definition:
            lines += ["One of: " + ", ".join(f"`{value}`" for value in definition["enum"]) + ".", ""]
        elif definition.get("properties"):
            lines += _table(_rows(definition, types), ("field", "type", "required"))
        else:
            lines += [f"A JSON {_type_of(definition, types)}.", ""]
    return lines


def _table(rows: list[tuple[str, str, str]], head: tuple[str, str, str]) -> list[str]:
    if not rows:
        return ["_none_", ""]
    out = [f"| {head[0]} | {head[1]} | {head[2]} |", "|---|---|---|"]
    out += [f"| `{a}` | {b} | {c} |" for a, b, c in rows]
    return [*out, ""]


def render() -> str:
    reg = registry()
    types: dict[str, dict[str, Any]] = {}
    lines = [HEADER, "## Methods", ""]
    families = reg.families()
    for family, names in families.items():
        lines.append(f"- **{family}**: " + ", ".join(f"[`{n}`](#{n.replace('.', '')})" for n in names))
    lines.append("")
    for family, names in families.items():
        lines += [f"## {family}", ""]
        for name in names:
            spec = reg.get(name)
            assert spec is not None
            lines += [f"### {name}", ""]
            if spec.summary:
                lines += [" ".join(spec.summary.split()), ""]
            who = ", ".join(f"`{mode}`" for mode in sorted(spec.modes))
            if name == "connect":
                who = "any socket (its first request), in any mode"
            lines += [f"Modes: {who}." + (" The response is deferred." if spec.deferred else ""), ""]
            if spec.http:
                lines += [f"HTTP: `POST /api/v1/{name}`.", ""]
            lines += ["Params:", "", *_table(_fields(spec.params, types), ("field", "type", "required"))]
            if spec.result is not None:
                lines += ["Result:", "", *_table(_fields(spec.result, types), ("field", "type", "always"))]
    lines += ["## Events", "", ", ".join(f"`{e}`" for e in EVENTS), ""]
    lines += [
        "`chat` events go to every client-mode socket as `{runId, sessionKey, state, ...}`; a client that sent",
        "`chat.send` with an alias of the session's key receives them under that key. States:",
        "",
        "| state | carries |",
        "|---|---|",
    ]
    lines += [f"| `{state}` | {what} |" for state, what in CHAT_STATES]
    lines.append("")
    lines += [
        "`connection.closing` `{code, reason}` comes right before the gateway closes a socket (replaced by a newer",
        "connection of the same client, node or channel id; unauthorized; a node forgotten with `node.forget`): on AWS",
        "the close itself carries no code or reason. `orbital node` stops when it is replaced or forgotten, instead of",
        "taking the id back.",
        "",
        "`approval.requested` (the approval, as `approval.list` returns it) and `approval.resolved` `{approvalId,",
        "sessionKey, runId, tool, decision, by, via, decidedAt}` go to every client-mode socket when a run pauses for",
        "a tool approval and when it is decided (`decision`: approve, deny, timeout, cancel).",
        "",
        "`spend.alert` `{scope, period, usedUsd, limitUsd, alertAt}` goes to every client-mode socket when a spend",
        "counter crosses `spend.alertAt` of its limit, once per counter and period (ADR 0044).",
        "",
    ]
    lines += _type_entries(types)
    lines += _dialect_pages(reg)
    lines += [LATE_RELEASE]
    lines += ["## Error codes", "", "| code | meaning |", "|---|---|"]
    lines += [f"| {code} | {text} |" for code, text in CODES]
    lines.append("")
    return "\n".join(lines)


def _dialect_pages(reg: Any) -> list[str]:
    """Other gateways' clients: how a socket's dialect is chosen, then each dialect's translator as it describes
    itself (the module of the translator the registry holds)."""
    lines = ["## Other gateways' clients (dialects)", "", inspect.cleandoc(detect.__doc__ or ""), ""]
    lines += [
        "A dialect socket receives frames only for the runs it started (run subscriptions); besides the `chat`",
        "states above, its encoder also gets `toolResult` (a tool call's result) and `usage` (one model call's",
        "usage), which GSV clients are not sent.",
        "",
    ]
    for dialect, translate in reg.hooks.dialect_frames.items():
        module = sys.modules.get(translate.__module__)
        lines += [f"### {dialect}", "", inspect.cleandoc((module.__doc__ if module else "") or ""), ""]
    return lines


def main() -> None:
    print(render(), end="")


if __name__ == "__main__":
    main()
