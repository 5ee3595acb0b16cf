"""Heartbeats (spec §10 with fix F8): the state per agent, the schedule, delivery targets and the delivery filter.
Running a due heartbeat starts an agent run: that is the agent's (`orbital.agent.heartbeat_runs`).

The rules live in `orbital.domain.heartbeat`; this module owns the state (`store.heartbeats` items, one per
agent: `{agentId, nextHeartbeatAt, lastHeartbeatAt, lastHeartbeatText, lastHeartbeatSentAt}` plus the item's
version), always written with a versioned write (`update_state`).

* `schedule` (`heartbeat.start`): state of agents no longer configured is dropped; every configured agent is due
  one interval from now (never, when its interval is 0).
* `ensure_scheduled` (the scheduler tick): every configured agent without state is scheduled one interval on.
* `delivery_target`: where a heartbeat run's reply goes (`deliver: {kind: "heartbeat", agentId, channel,
  accountId, peer}`), from the agent's last active conversation.
* `filter_delivery` is what channel delivery sends for such runs (partial and final texts alike): acknowledgements
  are dropped (F8), and an alert already delivered in the last 24 hours is not sent again. Recording the delivered
  alert is a versioned write too, so of two deliveries of the same alert racing, one goes out.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from orbital.domain import heartbeat as rules
from orbital.domain.ids import normalize_agent_id
from orbital.errors import ConflictError
from orbital.store.contention import retrying
from orbital.store.heartbeats import empty_heartbeat_state

if TYPE_CHECKING:
    from orbital.ports.services import Services

log = logging.getLogger("orbital.engines.heartbeat")


# --- state ------------------------------------------------------------------------------------------------------------


def _number(value: Any) -> float | int | None:
    """`value` when it is a number (not a boolean), else None."""
    return value if not isinstance(value, bool) and isinstance(value, int | float) else None


def update_state(services: Services, agent_id: str, mutate: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
    """Apply `mutate` to the agent's state (an empty one when it has none) and store it with a versioned write,
    re-reading and retrying when someone else wrote meanwhile. `mutate` returns False to leave the state alone; it
    may run more than once. Returns the stored state, or None when nothing was written."""
    repo = services.heartbeats

    def attempt() -> dict[str, Any] | None:
        found = repo.get_versioned(agent_id)
        state = dict(found[0]) if found else empty_heartbeat_state(agent_id)
        if not mutate(state):
            return None
        if found is None:
            return repo.put(agent_id, state, create=True)
        return repo.put(agent_id, state, expect_version=found[1])

    return retrying("heartbeat state", attempt)


def status(services: Services) -> dict[str, dict[str, Any]]:
    """Every agent with heartbeat state, then every agent that only has a last-active context (null state); each
    with `lastActive: {channel, accountId, peer, timestamp}` when it has one."""
    contexts = services.last_active.all()
    agents: dict[str, dict[str, Any]] = dict(services.heartbeats.all())
    for agent_id in contexts:
        if agent_id not in agents:
            agents[agent_id] = empty_heartbeat_state(agent_id)
    for agent_id, entry in agents.items():
        context = contexts.get(agent_id)
        if context is not None:
            entry["lastActive"] = {k: context.get(k) for k in ("channel", "accountId", "peer", "timestamp")}
    return agents


# --- schedule ---------------------------------------------------------------------------------------------------------


def schedule(services: Services, now_ms: int) -> dict[str, dict[str, Any]]:
    """`heartbeat.start`: drop the state of agents that are no longer configured, make every configured agent due
    one interval from now (`nextHeartbeatAt` null when its interval is 0), and return the status."""
    config = services.config.effective()
    ids = rules.agent_ids(config)
    repo = services.heartbeats
    for agent_id in repo.all():
        if agent_id not in ids:
            repo.delete(agent_id)
    for agent_id in ids:
        nxt = rules.next_heartbeat_at(now_ms, rules.effective_settings(config, agent_id).every_ms)

        def plan(state: dict[str, Any], nxt: int | None = nxt) -> bool:
            state["nextHeartbeatAt"] = nxt
            return True

        update_state(services, agent_id, plan)
    return status(services)


def ensure_scheduled(services: Services, now_ms: int) -> list[str]:
    """The scheduler tick: every configured agent without heartbeat state (a new gateway, an agent added to
    `agents.list`) is scheduled one interval from now. Returns the agents scheduled. State that exists is left
    alone, so `heartbeat.start` and the running schedule decide everything else."""
    config = services.config.effective()
    known = services.heartbeats.all()
    added: list[str] = []
    for agent_id in rules.agent_ids(config):
        if agent_id in known:
            continue
        state = {
            "nextHeartbeatAt": rules.next_heartbeat_at(now_ms, rules.effective_settings(config, agent_id).every_ms)
        }
        try:
            services.heartbeats.put(agent_id, state, create=True)
        except ConflictError:  # another tick scheduled it first
            continue
        added.append(agent_id)
    return added


# --- targets, due -----------------------------------------------------------------------------------------------------


def last_active(services: Services, agent_id: str) -> dict[str, Any] | None:
    """Where the agent was last talked to (stored under the id as configured, or as routing normalizes it)."""
    repo = services.last_active
    found = repo.get(agent_id)
    normalized = normalize_agent_id(agent_id)
    if found is None and normalized != agent_id:
        found = repo.get(normalized)
    return found


def delivery_target(services: Services, agent_id: str, target: str) -> dict[str, Any] | None:
    """The `deliver` of a heartbeat run for `target` (`last`, `none` or a channel), or None (nothing is sent)."""
    return rules.resolve_delivery(target, last_active(services, agent_id), agent_id)


def is_due(state: Mapping[str, Any], now_ms: int) -> bool:
    nxt = _number(state.get("nextHeartbeatAt"))
    return nxt is not None and nxt <= now_ms


# --- delivery ---------------------------------------------------------------------------------------------------------


def filter_delivery(services: Services, agent_id: str, text: str | None, now_ms: int) -> str | None:
    """The text channel delivery sends for a heartbeat run's reply (partial or final), or None to send nothing:
    acknowledgements are dropped (F8), and so is the alert delivered last if that was less than 24 hours ago.
    Returning text records it as delivered (`lastHeartbeatText`, `lastHeartbeatSentAt`)."""
    cleaned = rules.filter_reply(text)
    if cleaned is None:
        return None

    def record(state: dict[str, Any]) -> bool:
        if rules.is_duplicate(cleaned, state.get("lastHeartbeatText"), state.get("lastHeartbeatSentAt"), now_ms):
            return False
        state["lastHeartbeatText"] = cleaned
        state["lastHeartbeatSentAt"] = now_ms
        return True

    try:
        stored = update_state(services, agent_id, record)
    except ConflictError:
        log.warning("heartbeat alert of %s delivered without recording it (state kept changing)", agent_id)
        return cleaned
    return cleaned if stored is not None else None
