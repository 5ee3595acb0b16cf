"""Token budgets (ADR 0026): their limits in the configuration, their periods, and how a refusal reads.

Three scopes, in tokens (a model call's `usage.totalTokens`):

| scope     | limit                                                                           | used            |
|-----------|---------------------------------------------------------------------------------|-----------------|
| `session` | the session's own `budget.maxTokens` (`session.patch`), else `budgets.session`, | the session's   |
|           | else `session.defaultBudget.maxTokens`; an explicit null/0 in the session's own | `totalTokens`   |
|           | `budget` turns the configured one off for that session                          |                 |
| `daily`   | `budgets.daily`: every session of the gateway, per UTC calendar day             | a table counter |
| `monthly` | `budgets.monthly`: every session of the gateway, per UTC calendar month         | a table counter |

A limit that is not a positive number is unset, and unset means no limit. Pure functions: the time is passed in.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from orbital.errors import RpcError

SESSION = "session"
DAILY = "daily"
MONTHLY = "monthly"
SCOPES = (SESSION, DAILY, MONTHLY)
GATEWAY_SCOPES = (DAILY, MONTHLY)

EXPIRY_MARGIN_S = 2 * 86400
"""How long a period's counters outlive the period (DynamoDB's TTL then deletes them)."""

NOTE_REASON = "token-budget"
"""The `model` of the note a run ends with when a budget stops it (`agent.turn.note_message`)."""


# --- limits ---------------------------------------------------------------------------------------------------------


def _positive(value: Any) -> int | None:
    """A whole number of tokens, at least 1; anything else (null, 0, junk) is no limit."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return int(value) if value >= 1 else None


def _section(config: Any, name: str) -> dict[str, Any]:
    value = config.get(name) if isinstance(config, dict) else None
    return value if isinstance(value, dict) else {}


def session_limit(config: dict[str, Any], meta: dict[str, Any]) -> int | None:
    """The session's own `budget.maxTokens`, else `budgets.session`, else `session.defaultBudget.maxTokens`."""
    own = meta.get("budget")
    if isinstance(own, dict):
        value = _positive(own.get("maxTokens"))
        if value is not None:
            return value
        if "maxTokens" in own:  # an explicit null/0 turns the configured budget off for this session
            return None
    configured = _positive(_section(config, "budgets").get(SESSION))
    if configured is not None:
        return configured
    return _positive(_section(_section(config, "session"), "defaultBudget").get("maxTokens"))


def gateway_limit(config: dict[str, Any], scope: str) -> int | None:
    """`budgets.daily` or `budgets.monthly`."""
    return _positive(_section(config, "budgets").get(scope))


@dataclass(frozen=True)
class Limits:
    session: int | None = None
    daily: int | None = None
    monthly: int | None = None

    def of(self, scope: str) -> int | None:
        value: int | None = getattr(self, scope)
        return value

    @property
    def gateway(self) -> bool:
        """Whether a gateway-wide limit (daily or monthly) is set."""
        return self.daily is not None or self.monthly is not None

    @property
    def any(self) -> bool:
        return self.session is not None or self.gateway


def limits(config: dict[str, Any], meta: dict[str, Any] | None = None) -> Limits:
    return Limits(
        session=session_limit(config, meta or {}),
        daily=gateway_limit(config, DAILY),
        monthly=gateway_limit(config, MONTHLY),
    )


# --- periods --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Period:
    """The UTC day and month of a moment: `month` "2025-01", `day` 1..31, `expires_at` (epoch seconds) a little
    after the month ends, when its counters may go."""

    month: str
    day: int
    expires_at: int

    @property
    def day_name(self) -> str:
        """The day as "2025-01-31"."""
        return f"{self.month}-{self.day:02d}"

    def name(self, scope: str) -> str:
        return self.day_name if scope == DAILY else self.month


def period_of(now_ms: int) -> Period:
    moment = datetime.fromtimestamp(now_ms / 1000, UTC)
    year, month = (moment.year + 1, 1) if moment.month == 12 else (moment.year, moment.month + 1)
    month_end = int(datetime(year, month, 1, tzinfo=UTC).timestamp())
    return Period(month=f"{moment.year:04d}-{moment.month:02d}", day=moment.day, expires_at=month_end + EXPIRY_MARGIN_S)


# --- refusals ---------------------------------------------------------------------------------------------------------

_HOW = {
    SESSION: "Raise it with session.patch {budget: {maxTokens}}, or start a fresh session with /new.",
    DAILY: "Raise it with config.set budgets.daily, or wait for the next day (00:00 UTC).",
    MONTHLY: "Raise it with config.set budgets.monthly, or wait for the next month (UTC).",
}
_NEEDS = "the next model call would need about {estimate} more tokens"


class BudgetExceededError(RpcError):
    """A token budget refuses a model call: `scope` (`session`, `daily` or `monthly`), `used` (tokens counted so far,
    the estimate of the refused call not included), `limit`, and `estimate` (the refused call's, when known).

    On the GSV wire it is a 429 whose message names the scope, used and limit and says how to raise it; it is not
    `retryable` (the same request fails again until the budget is raised or its period ends). Dialects answer with
    `exoclaw_message`."""

    code = 429

    def __init__(self, scope: str, used: int, limit: int, *, estimate: int | None = None) -> None:
        self.scope = scope
        self.used = int(used)
        self.limit = int(limit)
        self.estimate = estimate
        needs = f" {_NEEDS.format(estimate=estimate)}." if estimate else ""
        super().__init__(
            f"Token budget exceeded ({scope}: {self.used}/{self.limit}):{needs} {_HOW[scope]}",
            retryable=False,
            details={"budget": {"scope": scope, "used": self.used, "limit": self.limit}},
        )

    @property
    def exoclaw_message(self) -> str:
        """Exoclaw's refusal: `token budget exceeded ({scope}: {used}/{limit})`."""
        return f"token budget exceeded ({self.scope}: {self.used}/{self.limit})"

    @classmethod
    def from_details(cls, details: Any) -> BudgetExceededError | None:
        """The refusal an error's `details` describe (what a dialect gets back from a method it called)."""
        budget = details.get("budget") if isinstance(details, dict) else None
        if not isinstance(budget, dict) or not isinstance(budget.get("scope"), str):
            return None
        try:
            return cls(budget["scope"], int(budget.get("used") or 0), int(budget.get("limit") or 0))
        except (KeyError, TypeError, ValueError):
            return None

    def note(self) -> str:
        """The text a run ends with when this budget stops it between model calls."""
        needs = f"; {_NEEDS.format(estimate=self.estimate)}" if self.estimate else ""
        return f"Token budget reached ({self.scope}: {self.used}/{self.limit}){needs}. {_HOW[self.scope]}"


_NOTE = re.compile(r"^Token budget reached \((session|daily|monthly): (\d+)/(\d+)\)")


def exceeded_in_note(text: str) -> BudgetExceededError | None:
    """The refusal a budget note (`BudgetExceededError.note`) was written for, or None for any other text."""
    found = _NOTE.match(text)
    return BudgetExceededError(found[1], int(found[2]), int(found[3])) if found else None


def would_exceed(used: int, estimate: int, limit: int | None) -> bool:
    """Exoclaw's rule: a call is refused when what is used plus its estimate goes past the limit."""
    return limit is not None and used + estimate > limit


# --- a call without a reply -------------------------------------------------------------------------------------------


def unanswered_usage(input_estimate: int, streamed_tokens: int, provider: dict[str, Any] | None) -> dict[str, int]:
    """What a model call that reached its provider but gave no reply (stopped, or failed mid-stream) is counted as:
    its input, the provider's own count when it sent one (with what it read from its cache), else the request's
    estimate; its output, the larger of the provider's count and the estimate of what was streamed (a provider
    counts the output at the end of a stream, which a stopped call never reaches).
    `{input, output, totalTokens}`."""
    given = provider if isinstance(provider, dict) else {}

    def number(name: str) -> int:
        value = given.get(name)
        return max(0, int(value)) if isinstance(value, int | float) and not isinstance(value, bool) else 0

    counted_input = number("input") + number("cacheRead") + number("cacheWrite")
    input_tokens = counted_input if counted_input > 0 else max(0, int(input_estimate))
    output_tokens = max(number("output"), max(0, int(streamed_tokens)))
    return {"input": input_tokens, "output": output_tokens, "totalTokens": input_tokens + output_tokens}
