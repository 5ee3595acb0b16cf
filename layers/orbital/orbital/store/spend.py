"""The gateway's spend counters in micro-dollars (ADR 0044), one item per scope and period (`keys.spend_counter`).

Attribute `u` is what is counted (settled usage plus the reservations of calls in flight), `r` the part of it that
is reserved. A reservation adds its amount to `u` and `r` in one conditional `UpdateItem` that fails when `u` would
go past the limit (checked by DynamoDB in the same write, and by the local table under its lock), so parallel runs
on different Lambdas cannot both take the last cents. A settle moves the difference to the real price into `u` and
takes the reservation out of `r`.
"""

from __future__ import annotations

from dataclasses import dataclass

from orbital.store import conditions as cond
from orbital.store import keys
from orbital.store.table import ConditionFailedError, Record, Table

USED = "u"
RESERVED = "r"


@dataclass(frozen=True)
class Counted:
    used: int = 0
    reserved: int = 0


class SpendRefusedError(Exception):
    """A reservation that would take the counter past its limit; `used` is the counter as it stood (micro-USD)."""

    def __init__(self, used: int) -> None:
        super().__init__(f"spend limit: {used} used")
        self.used = used


def _counted(rec: Record | None) -> Counted:
    if rec is None:
        return Counted()
    return Counted(int(rec.attrs.get(USED) or 0), int(rec.attrs.get(RESERVED) or 0))


class SpendRepo:
    def __init__(self, table: Table) -> None:
        self.table = table

    def read(self, period: str, period_key: str, scope: str) -> Counted:
        return _counted(self.table.get(keys.spend_counter(period, period_key, scope)))

    def of_period(self, period: str, period_key: str, *, prefix: str) -> dict[str, Counted]:
        """Every counter of one period whose scope starts with `prefix` (one Query)."""
        return {
            rec.sk: _counted(rec) for rec in self.table.query(keys.spend_period(period, period_key), sk_prefix=prefix)
        }

    def reserve(self, period: str, period_key: str, scope: str, amount: int, limit: int, *, expires_at: int) -> Counted:
        """Add `amount` if the counter stays within `limit` (one conditional UpdateItem); raises `SpendRefusedError`."""
        amount = max(0, int(amount))
        if amount > limit:
            raise SpendRefusedError(self.read(period, period_key, scope).used)
        try:
            rec = self.table.update(
                keys.spend_counter(period, period_key, scope),
                add={USED: amount, RESERVED: amount},
                condition=cond.not_exists(USED) | cond.le(USED, limit - amount),
                ttl=expires_at,
                current_on_conflict=True,
            )
        except ConditionFailedError as exc:
            raise SpendRefusedError(_counted(exc.current).used) from None
        return _counted(rec)

    def add(self, period: str, period_key: str, scope: str, used: int, reserved: int, *, expires_at: int) -> Counted:
        """Add `used` to what is counted and `reserved` to the reserved part (negative to take back): one
        UpdateItem, none when both are 0."""
        changes = {name: int(value) for name, value in ((USED, used), (RESERVED, reserved)) if int(value) != 0}
        if not changes:
            return Counted()
        rec = self.table.update(keys.spend_counter(period, period_key, scope), add=changes, ttl=expires_at)
        return _counted(rec)
