"""Remote MCP servers' tools as tools of the gateway (ADR 0045): what the model and `tools.list` are offered, and one
call of `mcp__{server}__{tool}` made now, from the caller's thread (the agent's turn step, a method's worker thread).

The catalog lists every enabled server's allowed tools from the cache (`mcp_client.list_tools`: a fresh list is read
from the table; a stale one is listed again, bounded by the server's `timeoutMs`, a dead server at most once a minute),
the servers side by side so one slow server does not add to another's wait.

A call answers `{"result": …}` or `{"error": …}` as a node's `tool.result` would, never raises for the server's
failures (unreachable, timed out, dropped, protocol errors, needing a login: the error names the server and what
went wrong), and marks an outcome that carries the server's words (`taints`): an `isError` result or a failure the
server described is untrusted text as much as a result is. A result larger than `RESULT_LIMIT_BYTES` (without its
images, which the agent stores apart) is saved whole in the agent workspace at `tool-results/{callId}.txt` and
answered with a preview that says where it is, as a node does with its results (`orbital.domain.tool_results`).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from orbital.domain import mcp_names
from orbital.domain.tool_results import Saved, fit_tool_result, full_output
from orbital.domain.workspace_paths import tool_result_path
from orbital.protocol.frames import MAX_MESSAGE_BYTES
from orbital.store import keys
from orbital.tools import mcp_client

if TYPE_CHECKING:
    from orbital.ports.services import Services

log = logging.getLogger("orbital.tools.mcp")

RESULT_LIMIT_BYTES = MAX_MESSAGE_BYTES
"""The most of a result (its text and structured parts; images are stored apart) the model is given whole: the
128 KB a node's result may have."""
MAX_PARALLEL = 8
REQUEST_LIST_MS = 5_000
"""How long a tool list read while answering a request (`tools.list`, a WindieOS manifest) waits for a server: the
caller is waiting too (a node's keepalive gives up after 10 s, API Gateway after 29 s). The agent's turn reads with
the server's whole `timeoutMs`."""
"""At most this many servers listed, or calls made, at once by one caller."""
OPEN_SCHEMA: dict[str, Any] = {"type": "object"}
CONTENT_TYPES = {"txt": "text/plain; charset=utf-8", "json": "application/json"}


def is_remote_mcp(name: str) -> bool:
    """Whether `name` is a remote MCP server's tool (`mcp__{server}__{tool}`)."""
    return mcp_names.split(name) is not None


# --- the catalog -----------------------------------------------------------------------------------------------


def _definition(server: str, tool: dict[str, Any]) -> dict[str, Any] | None:
    name = tool.get("name")
    if not isinstance(name, str) or not tool.get("allowed", True):
        return None
    description = tool.get("description")  # capped, as the schema is, when the list was read (`mcp_client`)
    text = description if isinstance(description, str) else ""
    schema = tool.get("inputSchema")
    if not isinstance(schema, dict):
        schema = dict(OPEN_SCHEMA)
    own = tool.get("tool") if isinstance(tool.get("tool"), str) else name
    label = f"[MCP server {server}: {own}]"
    return {"name": name, "description": f"{label} {text}".strip(), "inputSchema": schema}


def _listed(services: Services, spec: mcp_client.ServerSpec) -> list[dict[str, Any]]:
    try:
        listing = mcp_client.list_tools(services, spec)
    except Exception:  # a listing must never break the tool list of the others
        log.exception("listing the tools of MCP server %s failed", spec.name)
        return []
    found = (_definition(spec.name, t) for t in listing.tools if isinstance(t, dict))
    return [d for d in found if d is not None]


def remote_tools(
    services: Services, config: dict[str, Any] | None = None, *, cap_ms: int | None = None
) -> list[dict[str, Any]]:
    """Every enabled remote server's allowed tools, in the order the servers are configured, each
    `{name, description, inputSchema}` (the description labelled with its server). A list read again (stale, or
    never read) waits for its server at most `cap_ms` when given, else the server's whole `timeoutMs`."""
    specs = mcp_client.specs(config if config is not None else services.config.effective())
    if cap_ms is not None:
        specs = [replace(spec, timeout_ms=min(spec.timeout_ms, cap_ms)) for spec in specs]
    if not specs:
        return []
    if len(specs) == 1:
        return _listed(services, specs[0])
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(specs)), thread_name_prefix="mcp-list") as pool:
        lists = list(pool.map(lambda s: _listed(services, s), specs))
    return [tool for found in lists for tool in found]


def timeout_ms(config: dict[str, Any], names: Iterable[str]) -> int:
    """The longest `timeoutMs` of the servers whose tools `names` holds (0 when it names none)."""
    longest = 0
    for name in names:
        parts = mcp_names.split(name)
        spec = mcp_client.spec(config, parts[0]) if parts is not None else None
        if spec is not None:
            longest = max(longest, spec.timeout_ms)
    return longest


# --- calls -----------------------------------------------------------------------------------------------------


@dataclass
class Call:
    """One call of a remote MCP tool: the name the model (or a client) called, its arguments, and the agent whose
    workspace keeps a result too large to give whole."""

    name: str
    args: dict[str, Any]
    agent_id: str


def _resolve(
    services: Services, config: dict[str, Any], name: str, cap_ms: int | None
) -> tuple[mcp_client.ServerSpec, str] | str:
    """The server (its timeout cut to `cap_ms`, when given) and its own tool name behind `name`, or why not."""
    if cap_ms is None:
        return mcp_client.resolve(services, config, name)
    parts = mcp_names.split(name)
    found = mcp_client.spec(config, parts[0]) if parts is not None else None
    if found is None or not found.enabled:
        return mcp_client.resolve(services, config, name)  # its words for what is missing or disabled
    spec = replace(found, timeout_ms=min(found.timeout_ms, cap_ms))
    listed = mcp_client.list_tools(services, spec)
    tool = next((t for t in listed.tools if t.get("name") == name), None)
    if tool is None or not tool.get("allowed"):
        return mcp_client.resolve(services, config, name)  # from the cache just written: no second connection
    return spec, str(tool["tool"])


def call(services: Services, config: dict[str, Any], one: Call, *, cap_ms: int | None = None) -> dict[str, Any]:
    """Make the call now: `{"result": …}`, or `{"error": …}` (with `taints: true` when the server answered or failed
    after it was reached: its text may be the server's). `cap_ms` cuts the server's `timeoutMs` for the listing and
    the call each (a caller with less time than that: `tool.invoke` in a 29 s Lambda)."""
    found = _resolve(services, config, one.name, cap_ms)
    if isinstance(found, str):  # the gateway's own words: not configured, disabled, no such tool, not allowed
        return {"error": found[:1].upper() + found[1:]}
    spec, tool = found
    outcome = mcp_client.call_tool(services, spec, tool, one.args)
    if outcome.error is not None:
        return {"error": outcome.error, "taints": True}
    return {"result": fitted(services, one.agent_id, outcome.result)}


def call_many(services: Services, config: dict[str, Any], calls: list[Call]) -> list[dict[str, Any]]:
    """`call` for each, side by side (the outcomes in the order of `calls`); a bug in one is that call's error."""

    def safe(one: Call) -> dict[str, Any]:
        try:
            return call(services, config, one)
        except Exception as exc:
            log.exception("MCP tool %s failed", one.name)
            return {"error": f"MCP call failed: {type(exc).__name__}"}

    if len(calls) <= 1:
        return [safe(one) for one in calls]
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(calls)), thread_name_prefix="mcp-call") as pool:
        return list(pool.map(safe, calls))


# --- large results ---------------------------------------------------------------------------------------------


def _is_image(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") == "image" and isinstance(block.get("data"), str)


def _without_images(result: Any) -> Any:
    if isinstance(result, dict) and isinstance(result.get("content"), list):
        return {**result, "content": [b for b in result["content"] if not _is_image(b)]}
    return result


def _text_of(result: Any) -> str:
    """The whole of a result as text: its text blocks (and structured content), else its JSON."""
    if isinstance(result, str):
        return result
    if isinstance(result, dict) and isinstance(result.get("content"), list):
        texts = [
            str(b.get("text")) for b in result["content"] if isinstance(b, dict) and isinstance(b.get("text"), str)
        ]
        structured = result.get("structuredContent")
        if structured is not None and not texts:
            texts.append(json.dumps(structured, ensure_ascii=False, indent=1))
        if texts:
            return "\n".join(texts)
    return json.dumps(result, ensure_ascii=False, indent=1, default=str)


def _size(result: Any) -> int:
    return len(json.dumps(result, default=str))


def fitted(services: Services, agent_id: str, result: Any) -> Any:
    """`result` as it is when it fits `RESULT_LIMIT_BYTES` (images not counted: they are stored apart), else its
    text saved whole in the agent workspace and a preview of it that says where it is, beside its images."""
    if _size(_without_images(result)) <= RESULT_LIMIT_BYTES:
        return result
    call_id = f"mcp-{uuid.uuid4()}"
    output = full_output(_text_of(result))
    path = tool_result_path(call_id, output.extension)
    try:
        services.workspace.put(
            keys.workspace_object(agent_id, path),
            output.data,
            content_type=CONTENT_TYPES.get(output.extension, "application/octet-stream"),
        )
        saved = Saved(output, path=f"gsv:{path}")
    except Exception as exc:
        log.warning("saving a large MCP result failed: %s", type(exc).__name__)
        saved = Saved(output, error="the workspace did not take it")
    preview = fit_tool_result({"callId": call_id, "result": _text_of(result)}, RESULT_LIMIT_BYTES, saved)
    text = preview.get("result") if isinstance(preview.get("result"), str) else str(preview.get("error") or "")
    images = [b for b in result.get("content") or [] if _is_image(b)] if isinstance(result, dict) else []
    return {"content": [{"type": "text", "text": text}, *images]}
