"""Items whose `ttl` has passed are deleted, as DynamoDB's TTL process deletes them on AWS.

Locally nothing else would: reads already treat expired items as absent (the table port's contract), but a
long-lived local gateway would keep every answered call, due item and closed connection. The ticker of
`orbital dev` calls `sweep` once a minute: the table deletes up to `MAX_PER_SWEEP` expired items
(`Table.delete_expired`; an item written again meanwhile with a later `ttl` is kept).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from orbital.store.table import Table

log = logging.getLogger("orbital.local")

SWEEP_EVERY_S = 60.0
MAX_PER_SWEEP = 5000
"""Deletes of one sweep at most (the ticker runs the scheduled functions too); the rest waits for the next one."""

TTL_ATTRIBUTE = "ttl"
"""The expiry attribute of the table port (the template's `TimeToLiveSpecification` names the same)."""


def sweep(table: Table, ttl_attribute: str, now: float) -> int:
    """Delete the expired items of `table`. Returns how many were deleted."""
    if ttl_attribute != TTL_ATTRIBUTE:
        raise ValueError(f"the table expires items by {TTL_ATTRIBUTE!r}, not {ttl_attribute!r}")
    deleted = table.delete_expired(now, limit=MAX_PER_SWEEP)
    if deleted:
        log.debug("deleted %d expired items", deleted)
    return deleted
