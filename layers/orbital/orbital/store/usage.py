"""The gateway's token usage per UTC day and month, for the daily and monthly budgets (ADR 0026).

One item per UTC month (`keys.token_usage`): attribute `m` counts the month's tokens, `d01`..`d31` each day's, so
one `UpdateItem` moves a day and its month together. Every change is an atomic `ADD`; a reservation adds a model
call's estimate only if the counters stay within their limits after it (a condition on the stored values, checked
by DynamoDB in the same write), so parallel runs on different Lambdas cannot both take the last tokens. After the
call the difference to its real usage is added (negative when the estimate was high), or the whole estimate taken
back when the call failed. The item's `ttl` is set in every write: `Period.expires_at`, a little after the month.

The counters include the estimates of calls in flight.
"""

from __future__ import annotations

from dataclasses import dataclass

from orbital.domain.budgets import DAILY, MONTHLY, Period
from orbital.store import conditions as cond
from orbital.store import keys
from orbital.store.table import ConditionFailedError, Record, Table

MONTH_ATTR = "m"


def day_attr(day: int) -> str:
    return f"d{day:02d}"


@dataclass(frozen=True)
class Used:
    """Tokens counted for a period's day and month."""

    daily: int = 0
    monthly: int = 0

    def of(self, scope: str) -> int:
        return self.daily if scope == DAILY else self.monthly


class UsageRefusedError(Exception):
    """A reservation that would take `scope`'s counter past its limit; `used` is the counter as it stood."""

    def __init__(self, scope: str, used: int) -> None:
        super().__init__(f"{scope} budget: {used} used")
        self.scope = scope
        self.used = used


def _used(rec: Record | None, period: Period) -> Used:
    if rec is None:
        return Used()
    return Used(daily=int(rec.attrs.get(day_attr(period.day)) or 0), monthly=int(rec.attrs.get(MONTH_ATTR) or 0))


def _over(used: Used, amount: int, daily: int | None, monthly: int | None) -> str | None:
    """The scope a reservation of `amount` would take past its limit (the day first), or None."""
    if daily is not None and used.daily + amount > daily:
        return DAILY
    if monthly is not None and used.monthly + amount > monthly:
        return MONTHLY
    return None


class UsageRepo:
    def __init__(self, table: Table) -> None:
        self.table = table

    def read(self, period: Period) -> Used:
        """The counters of the period's day and month (one GetItem)."""
        return _used(self.table.get(keys.token_usage(period.month)), period)

    def reserve(self, period: Period, amount: int, *, daily: int | None, monthly: int | None) -> Used:
        """Add `amount` to the day and the month if neither goes past its limit (None: no limit); one conditional
        UpdateItem. Returns the counters after it; raises `UsageRefusedError` (with the counter as it stood)
        otherwise."""
        amount = max(0, int(amount))
        limits = ((DAILY, daily), (MONTHLY, monthly))
        too_big = next((scope for scope, limit in limits if limit is not None and amount > limit), None)
        if too_big is not None:  # more than the whole budget: no counter could let it through (a read, no write)
            raise UsageRefusedError(too_big, self.read(period).of(too_big))
        within = [
            cond.not_exists(attr) | cond.le(attr, limit - amount)
            for attr, limit in ((day_attr(period.day), daily), (MONTH_ATTR, monthly))
            if limit is not None
        ]
        try:
            rec = self.table.update(
                keys.token_usage(period.month),
                add={day_attr(period.day): amount, MONTH_ATTR: amount},
                condition=cond.all_of(*within),
                ttl=period.expires_at,
                current_on_conflict=True,
            )
        except ConditionFailedError as exc:
            used = _used(exc.current, period)
            scope = _over(used, amount, daily, monthly) or (DAILY if daily is not None else MONTHLY)
            raise UsageRefusedError(scope, used.of(scope)) from None
        return _used(rec, period)

    def add(self, period: Period, amount: int) -> Used | None:
        """Add `amount` (negative to take some back) to the day and the month: one UpdateItem, none for 0."""
        amount = int(amount)
        if amount == 0:
            return None
        rec = self.table.update(
            keys.token_usage(period.month),
            add={day_attr(period.day): amount, MONTH_ATTR: amount},
            ttl=period.expires_at,
        )
        return _used(rec, period)
