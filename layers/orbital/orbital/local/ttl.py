"""Items whose `ttl` has passed are deleted, as DynamoDB's TTL process deletes them on AWS.

Locally nothing else would: reads already treat expired items as absent (the table port's contract), but a
long-lived local gateway would keep every answered call, due item and closed connection. The ticker of
`orbital dev` calls `sweep` once a minute: the table deletes up to `MAX_PER_SWEEP` expired items
(`Table.delete_expired`; an item written again meanwhile with a later `ttl` is kept), and they leave its read cache.
For the DynamoDB table on moto (this process) the expired keys are listed from moto's items directly, not by a scan
through the API.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from orbital.store.dynamo_table import DynamoTable

if TYPE_CHECKING:
    from orbital.store.table import Table

log = logging.getLogger("orbital.local")

SWEEP_EVERY_S = 60.0
MAX_PER_SWEEP = 5000
"""Deletes of one sweep at most (the ticker runs the scheduled functions too); the rest waits for the next one."""

TTL_ATTRIBUTE = "ttl"
"""The expiry attribute of the table port (the template's `TimeToLiveSpecification` names the same)."""


def expired_keys(table_name: str, ttl_attribute: str, now: float) -> list[tuple[str, str]]:
    """The keys of the items of `table_name` (moto, this process) whose `ttl_attribute` is a number before `now`."""
    from moto.dynamodb.models import dynamodb_backends

    from orbital.local.stack import ACCOUNT, MOTO_LOCKS, REGION

    with MOTO_LOCKS["dynamodb"]:
        items = dynamodb_backends[ACCOUNT][REGION].get_table(table_name).all_items()
    keys = []
    for item in items:
        ttl = item.attrs.get(ttl_attribute)
        if ttl is None or ttl.type != "N" or float(ttl.value) >= now:
            continue
        pk, sk = item.attrs.get("PK"), item.attrs.get("SK")
        if pk is not None and sk is not None:
            keys.append((str(pk.value), str(sk.value)))
    return keys


def sweep(table: Table, ttl_attribute: str, now: float) -> int:
    """Delete the expired items of `table`. Returns how many were deleted."""
    if ttl_attribute != TTL_ATTRIBUTE:
        raise ValueError(f"the table expires items by {TTL_ATTRIBUTE!r}, not {ttl_attribute!r}")
    if isinstance(table, DynamoTable):
        candidates = expired_keys(table.name, ttl_attribute, now)
        deleted = table.delete_expired(now, limit=MAX_PER_SWEEP, candidates=candidates)
        if deleted:
            _drop_empty_partitions(table.name)
    else:
        deleted = table.delete_expired(now, limit=MAX_PER_SWEEP)
    if deleted:
        log.debug("deleted %d expired items", deleted)
    return deleted


def _drop_empty_partitions(table_name: str) -> None:
    """moto keeps a partition's (empty) map after its last item is deleted: one per answered call, otherwise."""
    from moto.dynamodb.models import dynamodb_backends

    from orbital.local.stack import ACCOUNT, MOTO_LOCKS, REGION

    with MOTO_LOCKS["dynamodb"]:
        moto_table = dynamodb_backends[ACCOUNT][REGION].get_table(table_name)
        if moto_table.range_key_attr:
            for hash_key in [h for h, partition in moto_table.items.items() if not partition]:
                del moto_table.items[hash_key]
