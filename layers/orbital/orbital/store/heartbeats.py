"""Heartbeat state (spec §10), one item per agent: when its next heartbeat is due and what the last one said.

Items carry the version attribute `v` (`store.versions`) for optimistic updates: the scheduler and a manual
`heartbeat.trigger` may both advance an agent's state, and only one of them wins a given version.
"""

from __future__ import annotations

from typing import Any

from orbital.store import keys
from orbital.store.table import Record, Table
from orbital.store.versions import next_version, version_of

HEARTBEAT_STATE_FIELDS = ("nextHeartbeatAt", "lastHeartbeatAt", "lastHeartbeatText", "lastHeartbeatSentAt")
"""Fields of a heartbeat state besides `agentId`; each is null until first set."""


def empty_heartbeat_state(agent_id: str) -> dict[str, Any]:
    return {"agentId": agent_id, **dict.fromkeys(HEARTBEAT_STATE_FIELDS)}


class HeartbeatRepo:
    def __init__(self, table: Table) -> None:
        self.table = table

    def get(self, agent_id: str) -> dict[str, Any] | None:
        rec = self.table.get(keys.heartbeat(agent_id))
        return self._state_from(rec) if rec else None

    def all(self) -> dict[str, dict[str, Any]]:
        """Every agent's heartbeat state, by agent id (in agent id order)."""
        states = (self._state_from(rec) for rec in self.table.query(keys.HEARTBEAT_PK))
        return {state["agentId"]: state for state in states}

    def get_versioned(self, agent_id: str) -> tuple[dict[str, Any], int] | None:
        """An agent's state and its version (0 for an item written before versions existed), or None."""
        rec = self.table.get(keys.heartbeat(agent_id))
        return (self._state_from(rec), version_of(rec)) if rec else None

    def put(
        self, agent_id: str, state: dict[str, Any], *, create: bool = False, expect_version: int | None = None
    ) -> dict[str, Any]:
        """Store an agent's state; missing fields are stored as null. Returns what was stored.

        `create` fails with ConflictError if the agent has state; `expect_version` fails with ConflictError if the
        stored version differs (someone else wrote the state since it was read)."""
        full = empty_heartbeat_state(agent_id)
        full.update({k: state[k] for k in HEARTBEAT_STATE_FIELDS if k in state})
        key = keys.heartbeat(agent_id)
        version, condition = next_version(self.table, key, create=create, expect_version=expect_version)
        self.table.put(key, full, attrs={"v": version}, condition=condition)
        return full

    def delete(self, agent_id: str) -> None:
        self.table.delete(keys.heartbeat(agent_id))

    @staticmethod
    def _state_from(rec: Record) -> dict[str, Any]:
        state = empty_heartbeat_state(str(rec.data.get("agentId") or rec.sk))
        state.update({k: rec.data[k] for k in HEARTBEAT_STATE_FIELDS if k in rec.data})
        return state
