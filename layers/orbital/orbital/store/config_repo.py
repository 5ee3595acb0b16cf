"""User configuration overrides: one item, written with an optimistic version check."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from orbital.domain import config as cfg
from orbital.store import conditions as cond
from orbital.store import keys
from orbital.store.contention import retrying
from orbital.store.table import Table


class ConfigRepo:
    """Effective and masked views are memoized per stored version; treat returned dicts as read-only."""

    def __init__(self, table: Table, *, default_model: str | None = None) -> None:
        self.table = table
        self.base = cfg.defaults_with_model(default_model)
        self._memo: tuple[int, dict[str, Any], dict[str, Any]] | None = None

    def load(self) -> tuple[dict[str, Any], int]:
        rec = self.table.get(keys.CONFIG)
        if rec is None:
            return {}, 0
        return rec.data, int(rec.attrs.get("v", 0))

    def overrides(self) -> dict[str, Any]:
        return self.load()[0]

    def _views(self) -> tuple[dict[str, Any], dict[str, Any]]:
        overrides, version = self.load()
        memo = self._memo
        if memo is None or memo[0] != version:
            full = cfg.effective(overrides, self.base)
            memo = (version, full, cfg.masked(full))
            self._memo = memo
        return memo[1], memo[2]

    def effective(self) -> dict[str, Any]:
        return self._views()[0]

    def masked(self) -> dict[str, Any]:
        """The whole configuration as every reader sees it: secrets (`cfg.is_secret`) shown as "***"."""
        return self._views()[1]

    def masked_get(self, path: str) -> Any:
        """The masked value at a dotted path (`cfg.is_missing` when there is none)."""
        return cfg.masked_get(self.effective(), path)

    def save(self, overrides: dict[str, Any], version: int) -> None:
        if version == 0:
            self.table.put(keys.CONFIG, overrides, attrs={"v": 1}, condition=cond.not_exists("PK"))
        else:
            self.table.put(keys.CONFIG, overrides, attrs={"v": version + 1}, condition=cond.eq("v", version))

    def set_path(
        self, path: str, value: Any, *, delete: bool = False, check: Callable[[dict[str, Any]], None] | None = None
    ) -> None:
        """Set (or delete) one path; writers of other paths at the same time are retried onto each other's result.
        `check` is given the effective configuration the write would make, before it is stored: what it raises
        refuses the write (nothing is stored)."""

        def attempt() -> None:
            current, version = self.load()
            # the mask written back keeps the stored secret (with none stored, the key is not set)
            wanted = None if delete else cfg.restore_masked(value, cfg.get_path(current, path), cfg.split_path(path))
            gone = delete or cfg.is_missing(wanted)
            updated = cfg.set_path(current, path, None if gone else wanted, delete=gone)
            if check is not None:
                check(cfg.effective(updated, self.base))
            self.save(updated, version)

        retrying("config", attempt)
