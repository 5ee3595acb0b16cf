"""Methods of the `heartbeat` family: per-agent heartbeat state (spec §10)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orbital.protocol.registry import NoParams, Result, Router

if TYPE_CHECKING:
    from orbital.protocol.context import CallContext
    from orbital.runtime.services import Services

router = Router("heartbeat")


class LastActive(Result):
    channel: str | None = None
    accountId: str | None = None
    peer: dict[str, Any] | None = None
    timestamp: int | None = None


class HeartbeatAgentStatus(Result):
    agentId: str
    nextHeartbeatAt: int | None
    lastHeartbeatAt: int | None
    lastHeartbeatText: str | None
    lastHeartbeatSentAt: int | None
    lastActive: LastActive | None = None


class HeartbeatStatusResult(Result):
    agents: dict[str, HeartbeatAgentStatus]


def heartbeat_status(services: Services) -> dict[str, dict[str, Any]]:
    """Every agent with heartbeat state, then every agent that only has a last-active context (null state)."""
    repo = services.gateway
    contexts = repo.last_active_contexts()
    agents: dict[str, dict[str, Any]] = dict(repo.heartbeat_states())
    for agent_id in contexts:
        if agent_id not in agents:
            agents[agent_id] = repo.empty_heartbeat_state(agent_id)
    for agent_id, status in agents.items():
        context = contexts.get(agent_id)
        if context is not None:
            status["lastActive"] = {k: context.get(k) for k in ("channel", "accountId", "peer", "timestamp")}
    return agents


@router.method("heartbeat.status", params=NoParams, result=HeartbeatStatusResult)
def heartbeat_status_method(ctx: CallContext, params: NoParams) -> dict[str, Any]:
    """Heartbeat state per agent (`nextHeartbeatAt`, `lastHeartbeatAt`, `lastHeartbeatText`, `lastHeartbeatSentAt`,
    and where the agent was last talked to as `lastActive`)."""
    return {"agents": heartbeat_status(ctx.services)}
