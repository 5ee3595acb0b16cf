"""What a query would get: its model, tools and system prompt (also what the HTTP API's `/api/sdk/*` previews
report)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from orbital.agent import client_tools, context, model_catalog
from orbital.dialects.windie.common import (
    ENVELOPE_BYTES,
    MAX_EVENT_BYTES,
    _size,
)
from orbital.dialects.windie.conversations import agent_of, session_key
from orbital.dialects.windie.user_settings import (
    _chosen_model,
    load_settings_item,
)

if TYPE_CHECKING:
    from orbital.ports.services import Services
    from orbital.store.connections import NodeEntry


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
