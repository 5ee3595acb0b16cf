"""WindieOS users' settings (`load-settings` / `update-settings`): what each user changed, nothing secret (a provider
key goes through `config.set`). One item per user (`keys.windie_settings`)."""

from __future__ import annotations

from typing import Any

from orbital.store import keys
from orbital.store.table import Table


class WindieSettingsRepo:
    """A WindieOS user's stored settings, over the table port."""

    def __init__(self, table: Table) -> None:
        self.table = table

    def load(self, user_id: str) -> dict[str, Any]:
        """What the user changed (empty when nothing: the defaults apply)."""
        rec = self.table.get(keys.windie_settings(user_id))
        return dict(rec.data) if rec is not None else {}

    def save(self, user_id: str, stored: dict[str, Any]) -> None:
        """Replace the user's settings with `stored`."""
        self.table.put(keys.windie_settings(user_id), stored)
