"""Optimistic versions of items: a version attribute `v` that each write conditional on it bumps.

Heartbeat states (`store.heartbeats`) and cron jobs (`store.cron_jobs`) are read with their version and written back
only if nobody wrote them since; an item written before versions existed has none (version 0).
"""

from __future__ import annotations

from orbital.store import conditions as cond
from orbital.store.table import Record, Table

VERSION_ATTR = "v"


def version_of(rec: Record) -> int:
    """The version of a stored item (0 for one written before versions existed)."""
    return int(rec.attrs.get(VERSION_ATTR, 0))


def next_version(
    table: Table, key: tuple[str, str], *, create: bool, expect_version: int | None
) -> tuple[int, cond.Condition | None]:
    """The version a versioned put stores and the condition it needs: `create` (the item must not exist),
    `expect_version` (the stored version must be that one; 0 is an item written before versions existed), or
    neither (last writer wins, one past what is stored)."""
    if create:
        return 1, cond.not_exists("PK")
    if expect_version == 0:
        return 1, cond.exists("PK") & cond.not_exists(VERSION_ATTR)
    if expect_version is not None:
        return expect_version + 1, cond.eq(VERSION_ATTR, expect_version)
    current = table.get(key)
    return (version_of(current) + 1 if current else 1), None
