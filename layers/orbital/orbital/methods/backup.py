"""Methods of the `backup` family: the local gateway's backups of its data directory (ADR 0047).

The engine is the local runtime's (`orbital.local.backup`), handed to `Services.backups` by the local gateway. A
gateway on AWS has none: its table has point-in-time recovery and its bucket keeps object versions, and
`orbital export --stack` writes a portable archive; `backup.status` says so and `backup.run` refuses with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orbital.domain import roles
from orbital.errors import BadRequestError
from orbital.protocol.registry import CLIENT, NoParams, Result, Router

if TYPE_CHECKING:
    from orbital.protocol.context import CallContext

router = Router("backup")

ON_AWS = (
    "backups are taken by the local gateway only: on AWS, restore the table with DynamoDB point-in-time recovery "
    "and files from the bucket's object versions, and use `orbital export --stack NAME` for a portable backup"
)

NOT_PERSISTED = "this local gateway keeps no state (it was started without persistence): there is nothing to back up"


def _unavailable(ctx: CallContext) -> str:
    return NOT_PERSISTED if ctx.services.capabilities.own_machine else ON_AWS


class BackupSummary(Result):
    name: str
    """The backup's name: the UTC time it was taken (`20261128T230512Z`)."""
    at: int
    """When it was taken (epoch ms)."""
    sizeBytes: int
    """What it holds: the table and index copies, the data directory's files and every object's bytes."""
    items: int
    """Table items."""
    objects: int
    """Workspace objects."""
    verified: bool
    """It was opened and checked against its manifest (item counts by kind, object hashes) when it was taken."""


class BackupStatusResult(Result):
    available: bool
    """False on AWS (see `reason`)."""
    reason: str | None = None
    """Why there are none, and what to use instead."""
    every: str | None = None
    """`backup.every`, or `off`."""
    keep: int | None = None
    dir: str | None = None
    """Where the backups are kept."""
    running: bool = False
    """A backup is being taken now."""
    last: BackupSummary | None = None
    next: int | None = None
    """When the next automatic backup is due (epoch ms); null when they are off."""
    count: int = 0
    """Backups kept."""


@router.method("backup.status", params=NoParams, result=BackupStatusResult, modes=CLIENT, scope=roles.READ)
def backup_status(ctx: CallContext, params: NoParams) -> dict[str, Any]:
    """The local backups: the settings, the last backup, when the next one is due, whether one is running."""
    backups = ctx.services.backups
    if backups is None:
        return {
            "available": False,
            "reason": _unavailable(ctx),
            "running": False,
            "last": None,
            "next": None,
            "count": 0,
        }
    return backups.status()


@router.method("backup.run", params=NoParams, result=BackupSummary, modes=CLIENT, scope=roles.ADMIN)
def backup_run(ctx: CallContext, params: NoParams) -> dict[str, Any]:
    """Take a backup of the data directory now, verified, pruning the oldest beyond `backup.keep` (409 while one is
    being taken; 400 on AWS)."""
    backups = ctx.services.backups
    if backups is None:
        raise BadRequestError(_unavailable(ctx))
    return backups.run()
