"""What a WindieOS query would send the model, computed without running it: the configuration snapshot, the tools as
OpenAI function objects, the system prompt and WindieOS's prompt previews (its SDK introspection routes,
`/api/sdk/*`). Built on the agent turn's own pieces (`context.effective_model`, `context.model_tools`,
`context.system_prompt`), so what it shows is what a run of the same session would be given.

Kept apart from the HTTP layer so that the WindieOS WebSocket dialect can use the same functions for its
`system-prompt` and `tool-schemas` events. The caller names the session (`agent:{agent}:windie:group:{h}`).

Tool policy (a request's `agent_definition.tools`, as in WindieOS's handshake): `mode` `explicit` offers only the
`available_tools` named (all when none are named), `default_plus_client` the gateway's tools and the client's
manifest tools, `client_only` the manifest tools alone; `disabled_tools` are left out; a manifest tool needs a
`schema` and may not take the name of a gateway tool. `interaction_mode` `chat` offers no tools.
"""

from __future__ import annotations

import copy
import json
import re
from typing import TYPE_CHECKING, Any

from orbital.agent import context
from orbital.agent.providers import ModelError, context_window, resolve_provider
from orbital.domain.compaction import estimate_context_tokens, estimate_text_tokens
from orbital.domain.config import as_dict, default_agent_id

if TYPE_CHECKING:
    from orbital.runtime.services import Services
    from orbital.store.connections import NodeEntry

INTERACTION_MODES = ("agent", "chat")
DEFAULT_INTERACTION_MODE = "agent"
TOOL_MODES = ("explicit", "default_plus_client", "client_only")
EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}

_SYSTEM_CONTEXT = re.compile(r"<system_context>.*?</system_context>", re.DOTALL)
_ACTIVE_WINDOW = re.compile(r"<active_window>(.*?)</active_window>", re.DOTALL)
_USER_QUERY = re.compile(r"<user_query>(.*?)</user_query>", re.DOTALL)


# --- model and configuration -------------------------------------------------------------------------------------


def chosen_model(
    config: dict[str, Any], model_id: str | None = None, model_provider: str | None = None
) -> dict[str, str]:
    """The configured model, with a request's `model_id` / `model_provider` over it (as a session's own model is)."""
    overrides: dict[str, Any] = {}
    if model_id:
        overrides["model"] = {"provider": model_provider or "", "id": model_id}
    elif model_provider:
        overrides["model"] = {"provider": model_provider, "id": context.effective_model(config, {}, {})["id"]}
    return context.effective_model(config, {}, overrides)


def _is_local(config: dict[str, Any], provider: str) -> bool:
    try:
        return resolve_provider(config, provider).local
    except ModelError:
        return False


def config_snapshot(
    config: dict[str, Any], model: dict[str, str], interaction_mode: str | None = None
) -> dict[str, str]:
    """WindieOS's effective-config snapshot: `model_mode` (`local` for a model on this machine, else `online`),
    `model_provider`, `selected_model_id`, `interaction_mode`."""
    return {
        "model_mode": "local" if _is_local(config, model["provider"]) else "online",
        "model_provider": model["provider"],
        "selected_model_id": model["id"],
        "interaction_mode": interaction_mode if interaction_mode in INTERACTION_MODES else DEFAULT_INTERACTION_MODE,
    }


def model_entry(config: dict[str, Any], model: dict[str, str]) -> dict[str, Any]:
    return {
        "id": model["id"],
        "provider": model["provider"],
        "display_name": context.model_label(model),
        "context_window": context_window(config, model["provider"], model["id"]),
        "model_mode": "local" if _is_local(config, model["provider"]) else "online",
    }


def models(config: dict[str, Any]) -> list[dict[str, Any]]:
    """The models this gateway is set up to use: the configured one, then each agent's own (`agents.list[].model`)."""
    found: dict[tuple[str, str], dict[str, str]] = {}
    base = context.effective_model(config, {}, {})
    found[(base["provider"], base["id"])] = base
    for entry in as_dict(config.get("agents")).get("list") or []:
        own = entry.get("model") if isinstance(entry, dict) else None
        if isinstance(own, str) and "/" in own:
            provider, _, model_id = own.partition("/")
            own = {"provider": provider, "id": model_id}
        if isinstance(own, dict) and isinstance(own.get("id"), str) and own["id"]:
            model = {"provider": str(own.get("provider") or base["provider"]), "id": own["id"]}
            found.setdefault((model["provider"], model["id"]), model)
    return [model_entry(config, m) for m in found.values()]


# --- tools -------------------------------------------------------------------------------------------------------


def function_object(tool: dict[str, Any]) -> dict[str, Any]:
    """A tool definition (`{name, description, inputSchema}`) as an OpenAI function object."""
    schema = tool.get("inputSchema")
    return {
        "type": "function",
        "name": str(tool.get("name") or ""),
        "description": str(tool.get("description") or ""),
        "parameters": copy.deepcopy(schema) if isinstance(schema, dict) else dict(EMPTY_PARAMETERS),
    }


def _names(value: Any) -> set[str] | None:
    if not isinstance(value, list):
        return None
    return {v for v in value if isinstance(v, str)}


def manifest_tools(agent_definition: dict[str, Any] | None, reserved: set[str]) -> list[dict[str, Any]]:
    """The client's manifest tools that could be offered: a name, a `schema` object, no clash with a gateway tool."""
    tools = as_dict(as_dict(agent_definition).get("tools"))
    manifest = as_dict(tools.get("client_manifest")).get("tools")
    offered: list[dict[str, Any]] = []
    seen: set[str] = set()
    for entry in manifest if isinstance(manifest, list) else []:
        if not isinstance(entry, dict):
            continue
        name, schema = entry.get("name"), entry.get("schema")
        if not isinstance(name, str) or not name or name in reserved or name in seen or not isinstance(schema, dict):
            continue
        seen.add(name)
        offered.append({"name": name, "description": str(entry.get("description") or ""), "inputSchema": schema})
    return offered


def offered_tools(
    gateway_tools: list[dict[str, Any]], agent_definition: dict[str, Any] | None, interaction_mode: str | None = None
) -> list[dict[str, Any]]:
    """The tools a run would offer the model under the request's tool policy (module docstring)."""
    if interaction_mode == "chat":
        return []
    tools = as_dict(as_dict(agent_definition).get("tools"))
    mode = tools.get("mode") if tools.get("mode") in TOOL_MODES else "default_plus_client"
    reserved = {str(t.get("name")) for t in gateway_tools}
    client = manifest_tools(agent_definition, reserved)
    available = _names(tools.get("available_tools"))
    disabled = _names(tools.get("disabled_tools")) or set()
    if mode == "client_only":
        chosen = client
    elif mode == "explicit" and available is not None:
        chosen = [t for t in [*gateway_tools, *client] if t.get("name") in available]
    else:
        chosen = [*gateway_tools, *client]
    return [t for t in chosen if t.get("name") not in disabled]


def capability(name: str, nodes: list[NodeEntry], tools: list[dict[str, Any]]) -> dict[str, Any] | None:
    """What the gateway knows about one of its tools: where it runs and, for a node's tool, the node's declared
    capabilities for it. None for a name it does not have."""
    tool = next((t for t in tools if t.get("name") == name), None)
    if tool is None:
        return None
    info: dict[str, Any] = {
        "name": name,
        "description": str(tool.get("description") or ""),
        "execution_target": "backend",
        "source": "native",
        "capabilities": [],
    }
    for node in nodes:
        prefix = f"{node.node_id}__"
        if name.startswith(prefix):
            own = name[len(prefix) :]
            declared = as_dict(as_dict(node.runtime).get("toolCapabilities")).get(own)
            info.update(
                execution_target="node",
                source="node",
                node_id=node.node_id,
                host_role=as_dict(node.runtime).get("hostRole"),
                capabilities=[c for c in declared if isinstance(c, str)] if isinstance(declared, list) else [],
            )
            break
    return info


# --- prompts -----------------------------------------------------------------------------------------------------


def agent_id(config: dict[str, Any]) -> str:
    return default_agent_id(config)


def system_prompt(
    services: Services,
    config: dict[str, Any],
    session_key: str,
    model: dict[str, str],
    tools: list[dict[str, Any]],
    nodes: list[NodeEntry],
) -> str:
    """The system prompt an agent turn of `session_key` would get with these tools (a session without settings of
    its own but the model)."""
    meta = {"settings": {"model": dict(model)}}
    return context.system_prompt(services, config, meta, session_key, agent_id(config), tools, model, nodes)


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text") or "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def prompt_messages(messages: list[dict[str, Any]], user_query_raw: str | None) -> list[dict[str, Any]]:
    """The request's messages as the model would see them (role and content), ending with the query when the
    messages do not already end with a user message."""
    shaped = [
        {"role": m["role"], "content": m.get("content") if isinstance(m.get("content"), str | list) else ""}
        for m in messages
        if isinstance(m, dict) and m.get("role") in ("user", "assistant", "system", "tool")
    ]
    if user_query_raw and (not shaped or shaped[-1]["role"] != "user"):
        shaped.append({"role": "user", "content": user_query_raw})
    return shaped


def user_message_full(messages: list[dict[str, Any]], user_query_raw: str | None) -> dict[str, Any] | None:
    """WindieOS's `user-message-full` transparency payload for the last user message: its content and what was
    injected around the query (`<system_context>`, the active window)."""
    last = next((m for m in reversed(messages) if m.get("role") == "user"), None)
    if last is None:
        return None
    content = _text_of(last.get("content"))
    injected = _SYSTEM_CONTEXT.search(content)
    window = _ACTIVE_WINDOW.search(content)
    query = _USER_QUERY.search(content)
    original = user_query_raw or (query.group(1).strip() if query else content)
    return {
        "content": content,
        "metadata": {
            "original_query": original,
            "context_type": "initial",
            "injected_context": injected.group(0) if injected else "",
            "active_window": window.group(1).strip() if window else "",
        },
    }


def preview(
    services: Services,
    config: dict[str, Any],
    *,
    session_key: str,
    model: dict[str, str],
    interaction_mode: str | None,
    include_tools: bool,
    messages: list[dict[str, Any]],
    user_query_raw: str | None,
    agent_definition: dict[str, Any] | None,
) -> dict[str, Any]:
    """WindieOS's `prompt-preview` answer: config, system prompt, prompt messages, canonical and offered tool
    schemas, the user message's transparency payload and an estimate of the prompt's tokens."""
    nodes = services.connections.nodes()
    gateway_tools = context.model_tools(services, nodes)
    offered = offered_tools(gateway_tools, agent_definition, interaction_mode) if include_tools else []
    system = system_prompt(services, config, session_key, model, offered, nodes)
    shaped = prompt_messages(messages, user_query_raw)
    provider_schemas = [function_object(t) for t in offered]
    count: int | None
    error: str | None = None
    try:
        count = estimate_text_tokens(system) + estimate_context_tokens(shaped)
        count += estimate_text_tokens(json.dumps(provider_schemas, separators=(",", ":")))
    except Exception as exc:  # an estimate only: say why there is none
        count, error = None, f"token estimate failed: {type(exc).__name__}"
    return {
        "config": config_snapshot(config, model, interaction_mode),
        "system_prompt": system,
        "prompt_messages": shaped,
        "canonical_tool_schemas": [function_object(t) for t in gateway_tools],
        "provider_tool_schemas": provider_schemas,
        "user_message_full": user_message_full(shaped, user_query_raw),
        "prompt_token_count": count,
        "token_count_error": error,
    }


def query_plan(
    preview_result: dict[str, Any],
    *,
    user_query_raw: str | None,
    conversation_ref: str | None,
    workspace_path: str | None,
) -> dict[str, Any]:
    """WindieOS's `query-plan` answer: the preview, the `query` message a client would send, and the first turn's
    transparency events in the order a run posts them."""
    payload: dict[str, Any] = {"text": user_query_raw or ""}
    if conversation_ref:
        payload["conversation_ref"] = conversation_ref
    if workspace_path:
        payload["workspace_path"] = workspace_path
    events: list[dict[str, Any]] = [{"type": "system-prompt", "payload": {"content": preview_result["system_prompt"]}}]
    if preview_result.get("user_message_full") is not None:
        events.append({"type": "user-message-full", "payload": preview_result["user_message_full"]})
    events.append({"type": "tool-schemas", "payload": {"tool_schemas": preview_result["provider_tool_schemas"]}})
    return {
        "config": preview_result["config"],
        "query_message": {"type": "query", "payload": payload},
        "transparency_events": events,
        **{k: v for k, v in preview_result.items() if k != "config"},
    }
