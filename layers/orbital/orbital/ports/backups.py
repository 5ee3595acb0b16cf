"""The local backups as the methods see them (`backup.status`, `backup.run`, ADR 0047).

The engine lives in the local runtime (`orbital.local.backup`), which the methods layer cannot import: the local
gateway's composition root hands it to `Services` (`orbital.local.services`). On AWS there is none, and
the methods say what to use there instead.
"""

from __future__ import annotations

from typing import Any, Protocol


class Backups(Protocol):
    def status(self) -> dict[str, Any]:
        """`backup.status`'s answer (`available` true)."""
        ...

    def run(self) -> dict[str, Any]:
        """Take a backup now and return its `last` shape; a ConflictError (409) while one is being taken."""
        ...
