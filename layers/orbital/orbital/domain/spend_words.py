"""How a USD spend refusal is said to each client (pure).

The engine refuses a model call that a spend limit would go past with a 429 whose message is
`spend limit reached ({period}: ${used:.2f} / ${limit:.2f})` (GSV's words), and ends a run that reaches a limit
between model calls with a note carrying the same sentence. Every other client hears it from that sentence:

- `refusal_in(text)` finds it in an error message or a note (None for any other text);
- `SpendRefusal.exoclaw_message`: Exoclaw's `spend limit exceeded (daily: $4.98/$5.00)`;
- `SpendRefusal.sentence`: GSV's sentence (what xeno, WindieOS and the channels show);
- `notice_period(period, now_ms, tz, session_id)`: the period a channel conversation is told about once, and when
  that period ends (the reminder's TTL).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

PERIODS = ("session", "daily", "monthly")

_SENTENCE = re.compile(
    r"spend limit reached \((session|daily|monthly): \$(\d+(?:\.\d+)?) / \$(\d+(?:\.\d+)?)\)", re.IGNORECASE
)

SESSION_NOTICE_TTL_S = 30 * 24 * 3600
"""A session limit has no end in time: the conversation is told again after this long (or in its next session)."""


@dataclass(frozen=True)
class SpendRefusal:
    """A spend limit's refusal: its `period` (`session`, `daily` or `monthly`), `used` and `limit` in USD."""

    period: str
    used: float
    limit: float

    @property
    def sentence(self) -> str:
        return f"spend limit reached ({self.period}: ${self.used:.2f} / ${self.limit:.2f})"

    @property
    def exoclaw_message(self) -> str:
        return f"spend limit exceeded ({self.period}: ${self.used:.2f}/${self.limit:.2f})"


def refusal_in(text: Any) -> SpendRefusal | None:
    """The spend refusal an error message or a run's note carries, or None."""
    if not isinstance(text, str):
        return None
    found = _SENTENCE.search(text)
    if found is None:
        return None
    return SpendRefusal(found[1].lower(), float(found[2]), float(found[3]))


def refusal_of(error: BaseException) -> SpendRefusal | None:
    """The spend refusal an exception stands for: its `period`, `used` and `limit` attributes when it has them (the
    engine's `SpendExceededError`), else its message."""
    period, used, limit = (getattr(error, name, None) for name in ("period", "used", "limit"))
    if period in PERIODS and isinstance(used, int | float) and isinstance(limit, int | float):
        return SpendRefusal(str(period), float(used), float(limit))
    return refusal_in(getattr(error, "message", None) or str(error))


def time_zone(name: Any) -> tzinfo:
    """The configured time zone of the spend periods (`spend.timeZone`), UTC when unset or unknown."""
    if isinstance(name, str) and name.strip():
        try:
            return ZoneInfo(name.strip())
        except (ZoneInfoNotFoundError, ValueError):
            return UTC
    return UTC


@dataclass(frozen=True)
class NoticePeriod:
    name: str
    """`daily:2026-11-28`, `monthly:2026-11`, `session:{sessionId}`."""
    ends_at_s: int
    """Epoch seconds when the period ends (the reminder's TTL)."""


def notice_period(period: str, now_ms: int, tz: tzinfo, session_id: str | None) -> NoticePeriod:
    """The period a refusal of `period` belongs to at `now_ms` in `tz`, and when it ends."""
    now = datetime.fromtimestamp(now_ms / 1000, tz)
    if period == "daily":
        start = now.replace(hour=0, minute=0, second=0, microsecond=0)
        end = (start + timedelta(days=1, hours=2)).replace(hour=0)  # DST-safe next midnight
        return NoticePeriod(f"daily:{now:%Y-%m-%d}", int(end.timestamp()))
    if period == "monthly":
        year, month = (now.year + 1, 1) if now.month == 12 else (now.year, now.month + 1)
        end = datetime(year, month, 1, tzinfo=tz)
        return NoticePeriod(f"monthly:{now:%Y-%m}", int(end.timestamp()))
    return NoticePeriod(f"session:{session_id or '-'}", now_ms // 1000 + SESSION_NOTICE_TTL_S)


_PERIOD_WORDS = {"session": "this session", "daily": "today", "monthly": "this month"}


def _usd(value: Any) -> str:
    return f"${float(value):.2f}"


def status_line(status: Any) -> str | None:
    """One line of `spend.status` for `/status`: what this session, today and this month spent (gateway-wide), each
    with its limit when one is set: `Spend: $0.12 this session · $1.40 / $5.00 today · $3.10 this month`. None when
    the answer has nothing to show."""
    periods = status.get("periods") if isinstance(status, dict) else None
    if not isinstance(periods, list):
        return None
    parts: list[str] = []
    for period in PERIODS:
        wanted = "global" if period != "session" else None
        found = next(
            (
                p
                for p in periods
                if isinstance(p, dict)
                and p.get("period") == period
                and (p.get("scope") == wanted if wanted else str(p.get("scope") or "").startswith("session:"))
            ),
            None,
        )
        if found is None or not isinstance(found.get("usedUsd"), int | float):
            continue
        used = float(found["usedUsd"]) + float(found.get("reservedUsd") or 0)
        limit = found.get("limitUsd")
        shown = f"{_usd(used)} / {_usd(limit)}" if isinstance(limit, int | float) else _usd(used)
        parts.append(f"{shown} {_PERIOD_WORDS[period]}")
    return f"Spend: {' · '.join(parts)}" if parts else None


def with_status_line(response: str, line: str) -> str:
    """`/status`'s text with the spend line right after its tokens line (at the end when it has none)."""
    lines = response.split("\n")
    at = next((i + 1 for i, text in enumerate(lines) if "Tokens:" in text), len(lines))
    return "\n".join([*lines[:at], line, *lines[at:]])
