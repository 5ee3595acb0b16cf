"""Where each agent was last talked to: `{agentId, channel, accountId, peer, sessionKey, timestamp}`, one item per
agent, written by the inbound channel path and read wherever a reply goes "to the last place" (heartbeat delivery, a
cron run's delivery, the message tool's default target).
"""

from __future__ import annotations

from typing import Any

from orbital.store import keys
from orbital.store.table import Table


class LastActiveRepo:
    def __init__(self, table: Table) -> None:
        self.table = table

    def put(self, agent_id: str, context: dict[str, Any]) -> None:
        """Remember where an agent was last talked to."""
        self.table.put(keys.last_active(agent_id), {**context, "agentId": agent_id})

    def get(self, agent_id: str) -> dict[str, Any] | None:
        rec = self.table.get(keys.last_active(agent_id))
        return rec.data if rec else None

    def all(self) -> dict[str, dict[str, Any]]:
        """Every agent's last-active context, by agent id (in agent id order)."""
        return {str(rec.data.get("agentId") or rec.sk): rec.data for rec in self.table.query(keys.LAST_ACTIVE_PK)}

    def delete(self, agent_id: str) -> None:
        self.table.delete(keys.last_active(agent_id))
