"""What a model call of a run is made of besides its history: the model, thinking level, tools on offer and system
prompt. One place, used both by the turn that makes the call (`orbital.agent.turn`) and by the budget check before
a run starts (`orbital.agent.budgets.check_before_run`), so both estimate the same request: a run that cannot fit
its budget is refused before it starts, not by its first model call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from orbital.agent import client_tools, context
from orbital.domain.session_keys import session_agent_id

if TYPE_CHECKING:
    from orbital.ports.services import Services


@dataclass
class Parts:
    model: dict[str, str]
    thinking: str | None
    tool_defs: list[dict[str, Any]]
    system: str


def parts(
    services: Services,
    config: dict[str, Any],
    session_key: str,
    meta: dict[str, Any],
    overrides: dict[str, Any],
    client: client_tools.ClientTools | None,
) -> Parts:
    """The model and thinking level (the message's overrides, the session's, the configured), the tools on offer
    (narrowed for a socket with tools of its own: `client`), and the system prompt (a guest's has nothing of the
    workspace)."""
    model = context.effective_model(config, meta, overrides)
    nodes = services.connections.nodes()
    tool_defs = context.model_tools(services, nodes)
    hosts = nodes
    if client is not None:  # a run of a socket with tools of its own (and a policy narrowing the list)
        tool_defs = client.offer(tool_defs)
        hosts = client_tools.reachable_nodes(nodes, client.policy)
    if client is not None and client_tools.is_guest(client.policy):  # nothing of the owner's workspace
        system = context.guest_system_prompt(tool_defs, model)
    else:
        agent_id = session_agent_id(session_key)
        system = context.system_prompt(services, config, meta, session_key, agent_id, tool_defs, model, hosts)
    return Parts(model, context.effective_thinking(meta, overrides), tool_defs, system)


def system_prompt_tokens(
    services: Services,
    config: dict[str, Any],
    session_key: str,
    meta: dict[str, Any],
    *,
    overrides: dict[str, Any] | None = None,
    origin: dict[str, Any] | None = None,
) -> int:
    """The estimated tokens of the system prompt a run of this session would be sent with (`origin`: where its
    message comes from, which decides a socket's own tools and a guest's prompt)."""
    client = client_tools.for_run(services, {"origin": origin}) if isinstance(origin, dict) else None
    found = parts(services, config, session_key, meta, overrides or {}, client)
    return context.estimate_request_tokens(found.system, [])
