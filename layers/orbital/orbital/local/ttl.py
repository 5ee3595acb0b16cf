"""Items whose `ttl` has passed are deleted, as DynamoDB's TTL process deletes them on AWS.

moto keeps expired items for ever: reads already treat them as absent (`orbital.store.table`), but a long-lived local
gateway would keep every answered call, due item and closed connection in memory. The ticker of `orbital dev` calls
`sweep` once a minute: each expired item is deleted through the gateway's own client, on the condition that its
`ttl` is still past (an item written again meanwhile is kept), so the delete is journaled like any other write, and
it leaves the gateway's read cache.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from orbital.local.moto_shared import ACCOUNT, MOTO_LOCKS, REGION

if TYPE_CHECKING:
    from orbital.store.table import Table

log = logging.getLogger("orbital.local")

SWEEP_EVERY_S = 60.0
MAX_PER_SWEEP = 5000
"""Deletes of one sweep at most (the ticker runs the scheduled functions too); the rest waits for the next one."""


def expired_keys(table_name: str, ttl_attribute: str, now: float) -> list[tuple[str, str]]:
    """The keys of the items of `table_name` (moto, this process) whose `ttl_attribute` is a number before `now`."""
    from moto.dynamodb.models import dynamodb_backends

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
    deleted = 0
    for pk, sk in expired_keys(table.name, ttl_attribute, now)[:MAX_PER_SWEEP]:
        try:
            table.client.delete_item(
                TableName=table.name,
                Key={"PK": {"S": pk}, "SK": {"S": sk}},
                ConditionExpression="#ttl < :now",
                ExpressionAttributeNames={"#ttl": ttl_attribute},
                ExpressionAttributeValues={":now": {"N": str(int(now))}},
            )
        except table.client.exceptions.ConditionalCheckFailedException:
            continue  # written again with a later ttl since it was listed
        finally:
            table.forget((pk, sk))
        deleted += 1
    if deleted:
        _drop_empty_partitions(table.name)
        log.debug("deleted %d expired items", deleted)
    return deleted


def _drop_empty_partitions(table_name: str) -> None:
    """moto keeps a partition's (empty) map after its last item is deleted: one per answered call, otherwise."""
    from moto.dynamodb.models import dynamodb_backends

    with MOTO_LOCKS["dynamodb"]:
        moto_table = dynamodb_backends[ACCOUNT][REGION].get_table(table_name)
        if moto_table.range_key_attr:
            for hash_key in [h for h, partition in moto_table.items.items() if not partition]:
                del moto_table.items[hash_key]
