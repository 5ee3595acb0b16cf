"""Pending pairings (spec §7): a sender a channel does not know yet, waiting for the owner to approve or reject.

Items hold the wire-shaped `PendingPair` dicts (`{channel, senderId, senderName?, requestedAt, firstMessage}`), so a
read is a plain load. Ids passed here are already normalized by the caller.
"""

from __future__ import annotations

from typing import Any

from orbital.domain.pairing import pair_key
from orbital.errors import ConflictError
from orbital.store import conditions as cond
from orbital.store import keys
from orbital.store.table import Table


class PairingRepo:
    def __init__(self, table: Table) -> None:
        self.table = table

    def put(self, pair: dict[str, Any], *, only_if_new: bool = True) -> bool:
        """Store a pending pairing. With `only_if_new` an existing request is kept as it is and False is returned
        (repeats are silent)."""
        key = keys.pair(str(pair["channel"]), str(pair["senderId"]))
        try:
            self.table.put(key, pair, condition=cond.not_exists("PK") if only_if_new else None)
        except ConflictError:
            return False
        return True

    def get(self, channel: str, sender_id: str) -> dict[str, Any] | None:
        rec = self.table.get(keys.pair(channel, sender_id))
        return rec.data if rec else None

    def all(self) -> dict[str, dict[str, Any]]:
        """Every pending pairing by `{channel}:{senderId}`."""
        out: dict[str, dict[str, Any]] = {}
        for rec in self.table.query(keys.PAIRS_PK):
            data = rec.data
            out[pair_key(str(data.get("channel", "")), data.get("senderId", ""))] = data
        return out

    def delete(self, channel: str, sender_id: str) -> dict[str, Any] | None:
        """Remove a pending pairing; returns it, or None when there was none (so only one caller wins)."""
        old = self.table.delete(keys.pair(channel, sender_id), return_old=True)
        return old.data if old else None
