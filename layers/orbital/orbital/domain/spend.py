"""Spend caps in US dollars (ADR 0044): prices, periods, limits and how a refusal reads. Pure: the time is passed in.

Prices: `spend.prices["provider/model"] = {inputPerMTok, outputPerMTok, cacheReadPerMTok, cacheWritePerMTok}` first
(for local or private models, or to correct a price), then the `genai-prices` database (imported on first use, not
at import). A usage is `{input, output, cacheRead, cacheWrite}` in tokens, `input` not counting what was read from or
written to the provider's cache (the providers' adapters report it so). A model neither knows is unpriced (None).

Amounts are counted in micro-dollars (whole numbers: the table's counters add them atomically, without rounding).

Limits and their scopes:

| scope           | periods                  | limit                                                            |
|-----------------|--------------------------|------------------------------------------------------------------|
| `global`        | daily, monthly           | `spend.limits.daily`, `spend.limits.monthly`                     |
| `agent:{id}`    | daily, monthly           | `agents.list[id].spend.limits.daily` / `.monthly`                |
| `session:{key}` | session (its sessionId)  | the smaller of `spend.limits.session` and the agent's `session`  |
| `cron:{jobId}`  | daily                    | the job's `spendLimitUsd`: what the job may spend in a day        |

Days and months are calendar ones in `spend.timeZone` (default UTC).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from orbital.domain.budgets import BudgetExceededError
from orbital.errors import RpcError

SESSION = "session"
DAILY = "daily"
MONTHLY = "monthly"
PERIODS = (SESSION, DAILY, MONTHLY)

GLOBAL = "global"
MICRO = 1_000_000
"""Micro-dollars per dollar: the unit of the counters."""

DEFAULT_ALERT_AT = 0.8
REFUSE = "refuse"
ALLOW = "allow"
NOTE_REASON = "spend-limit"
"""The `model` of the note a run ends with when a spend limit stops it."""

EXPIRY_MARGIN_S = 2 * 86400
SESSION_EXPIRY_S = 400 * 86400

# Orbital's provider names as the price database knows them.
_PROVIDER_IDS = {"anthropic": "anthropic", "openai": "openai", "google": "google", "gemini": "google", "bedrock": "aws"}


def _section(config: Any, *path: str) -> dict[str, Any]:
    value = config
    for name in path:
        value = value.get(name) if isinstance(value, dict) else None
    return value if isinstance(value, dict) else {}


def _usd(value: Any) -> float | None:
    """A positive amount of dollars; anything else (null, 0, junk) is no limit."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value) if value > 0 else None


def to_micro(usd: float) -> int:
    return math.ceil(round(usd * MICRO, 6))


def to_usd(micro: int | float) -> float:
    return round(float(micro) / MICRO, 6)


# --- prices ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Usage:
    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0

    @classmethod
    def of(cls, usage: Any) -> Usage:
        given = usage if isinstance(usage, dict) else {}

        def number(name: str) -> int:
            value = given.get(name)
            return max(0, int(value)) if isinstance(value, int | float) and not isinstance(value, bool) else 0

        return cls(number("input"), number("output"), number("cacheRead"), number("cacheWrite"))


def override_key(provider: str, model: str) -> str:
    return f"{provider}/{model}"


def override_path(provider: str, model: str) -> str:
    return f'spend.prices["{override_key(provider, model)}"]'


def _override(config: dict[str, Any], provider: str, model: str) -> dict[str, Any] | None:
    found = _section(config, "spend", "prices").get(override_key(provider, model))
    return found if isinstance(found, dict) else None


def _rate(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0 else 0.0


def _database_price(provider: str, model: str, usage: Usage) -> float | None:
    try:
        import genai_prices  # a large table: loaded on the first price asked for, not at import
    except ImportError:  # pragma: no cover - a dependency of the package
        return None
    provider_id = _PROVIDER_IDS.get(provider.lower(), provider.lower())
    bare = model.split("/")[-1] if provider.lower() in _PROVIDER_IDS else model
    counted = genai_prices.Usage(
        input_tokens=usage.input + usage.cache_read + usage.cache_write,
        output_tokens=usage.output,
        cache_read_tokens=usage.cache_read,
        cache_write_tokens=usage.cache_write,
    )
    try:
        found = genai_prices.calc_price(counted, bare, provider_id=provider_id)
    except (LookupError, ValueError):
        return None
    return float(found.total_price)


def price(config: dict[str, Any], provider: str, model: str, usage: Usage) -> float | None:
    """The price in USD of `usage` on `provider`/`model`: the configured override, else the price database; None when
    neither knows the model."""
    own = _override(config, provider, model)
    if own is not None:
        return (
            usage.input * _rate(own.get("inputPerMTok"))
            + usage.output * _rate(own.get("outputPerMTok"))
            + usage.cache_read * _rate(own.get("cacheReadPerMTok", own.get("inputPerMTok")))
            + usage.cache_write * _rate(own.get("cacheWritePerMTok", own.get("inputPerMTok")))
        ) / 1_000_000
    return _database_price(provider, model, usage)


def unpriced_allowed(config: dict[str, Any]) -> bool:
    return _section(config, "spend").get("unpricedModels") == ALLOW


def alert_at(config: dict[str, Any]) -> float:
    value = _section(config, "spend").get("alertAt")
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 < value <= 1:
        return float(value)
    return DEFAULT_ALERT_AT


# --- periods --------------------------------------------------------------------------------------------------------


def zone_name(config: dict[str, Any]) -> str:
    value = _section(config, "spend").get("timeZone")
    return value if isinstance(value, str) and value else "UTC"


def zone(config: dict[str, Any]) -> tzinfo:
    try:
        return ZoneInfo(zone_name(config))
    except (ZoneInfoNotFoundError, ValueError):
        return UTC


@dataclass(frozen=True)
class Window:
    """One period's counter: `period` (session, daily, monthly), `key` ("2025-01-31", "2025-01", a sessionId),
    `resets_at_ms` (None for a session: it resets with /new), `expires_at` (epoch s, when its counter may go)."""

    period: str
    key: str
    resets_at_ms: int | None
    expires_at: int


def window(period: str, now_ms: int, tz: tzinfo, *, session_id: str | None = None) -> Window:
    """The period containing `now_ms` in `tz`: its key and when it resets."""
    if period == SESSION:
        return Window(SESSION, session_id or "-", None, int(now_ms / 1000) + SESSION_EXPIRY_S)
    local = datetime.fromtimestamp(now_ms / 1000, UTC).astimezone(tz)
    if period == DAILY:
        start = datetime(local.year, local.month, local.day, tzinfo=tz)
        following = (start + timedelta(days=1, hours=3)).replace(hour=0)  # a day with a DST change is 23 or 25 h
        end = datetime(following.year, following.month, following.day, tzinfo=tz)
        key = f"{local.year:04d}-{local.month:02d}-{local.day:02d}"
    else:
        year, month = (local.year + 1, 1) if local.month == 12 else (local.year, local.month + 1)
        end = datetime(year, month, 1, tzinfo=tz)
        key = f"{local.year:04d}-{local.month:02d}"
    resets = int(end.timestamp() * 1000)
    return Window(period, key, resets, resets // 1000 + EXPIRY_MARGIN_S)


# --- limits ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cap:
    """One limit that applies to a call: `scope` ("global", "agent:main", "session:{key}", "cron:{jobId}"),
    `period`, `limit` in USD."""

    scope: str
    period: str
    limit: float


def _agent_limits(config: dict[str, Any], agent_id: str | None) -> dict[str, Any]:
    if not agent_id:
        return {}
    for entry in _section(config, "agents").get("list") or []:
        if isinstance(entry, dict) and entry.get("id") == agent_id:
            return _section(entry, "spend", "limits")
    return {}


def caps(
    config: dict[str, Any],
    *,
    agent_id: str | None = None,
    session_key: str | None = None,
    job_limit: Any = None,
    job_id: str | None = None,
) -> list[Cap]:
    """Every limit a model call of this agent, session and cron job is held to."""
    found: list[Cap] = []
    own = _section(config, "spend", "limits")
    agent = _agent_limits(config, agent_id)
    for period in (DAILY, MONTHLY):
        limit = _usd(own.get(period))
        if limit is not None:
            found.append(Cap(GLOBAL, period, limit))
        limit = _usd(agent.get(period))
        if limit is not None and agent_id:
            found.append(Cap(f"agent:{agent_id}", period, limit))
    if session_key:
        session = [x for x in (_usd(own.get(SESSION)), _usd(agent.get(SESSION))) if x is not None]
        if session:
            found.append(Cap(f"session:{session_key}", SESSION, min(session)))
    job = _usd(job_limit)
    if job is not None and job_id:
        found.append(Cap(f"cron:{job_id}", DAILY, job))
    return found


def any_limit(config: dict[str, Any]) -> bool:
    """Whether any spend limit is configured at all (a cron job's own is known only with the job)."""
    if any(_usd(v) is not None for v in _section(config, "spend", "limits").values()):
        return True
    return any(
        isinstance(entry, dict) and any(_usd(v) is not None for v in _section(entry, "spend", "limits").values())
        for entry in _section(config, "agents").get("list") or []
    )


# --- refusals -------------------------------------------------------------------------------------------------------


class UnpricedModelError(BudgetExceededError):
    """A model without a price while a spend limit applies (and `spend.unpricedModels` is not "allow"): a 400 before
    a run, a note ending a run whose next call would use it. A `BudgetExceededError`, so it takes the same paths."""

    code = 400

    def __init__(self, provider: str, model: str) -> None:
        self.provider = provider
        self.model = model
        self.scope = "spend"
        self.used = 0
        self.limit = 0
        self.estimate = None
        RpcError.__init__(
            self,
            f"No price known for {provider}/{model} while a spend limit is set: set "
            f"{override_path(provider, model)} = {{inputPerMTok, outputPerMTok}} (USD per million tokens), "
            'or spend.unpricedModels = "allow"',
            retryable=False,
        )

    @property
    def exoclaw_message(self) -> str:
        return self.message

    @classmethod
    def from_details(cls, details: Any) -> None:
        return None

    def note(self) -> str:
        return self.message


_HOW = {
    SESSION: "Raise spend.limits.session, or start a fresh session with /new.",
    DAILY: "Raise the daily limit (spend.limits.daily), or wait for the next day.",
    MONTHLY: "Raise the monthly limit (spend.limits.monthly), or wait for the next month.",
}


class SpendExceededError(BudgetExceededError):
    """A spend limit refuses a model call: `period` (session, daily, monthly), `spend_scope` (global, agent:{id},
    session:{key}, cron:{jobId}), `used` and `limit` in USD (`used` without the refused call's estimate).

    A `BudgetExceededError` (so every path that refuses or ends a run on a token budget does the same for it) and an
    `RpcError`: on the GSV wire a 429 `spend limit reached (daily: $4.98 / $5.00)`, not retryable."""

    code = 429

    def __init__(self, period: str, used: float, limit: float, *, scope: str = GLOBAL) -> None:
        self.period = period
        self.spend_scope = scope
        self.scope = period
        self.used = float(used)  # type: ignore[assignment]
        self.limit = float(limit)  # type: ignore[assignment]
        self.estimate = None
        RpcError.__init__(
            self,
            f"spend limit reached ({period}: ${self.used:.2f} / ${self.limit:.2f})",
            retryable=False,
            details={"spend": {"period": period, "scope": scope, "usedUsd": self.used, "limitUsd": self.limit}},
        )

    @property
    def exoclaw_message(self) -> str:
        """Exoclaw's refusal: `spend limit exceeded (daily: $4.98/$5.00)`."""
        return f"spend limit exceeded ({self.period}: ${self.used:.2f}/${self.limit:.2f})"

    @classmethod
    def from_details(cls, details: Any) -> SpendExceededError | None:
        """The refusal an error's `details` describe (what a dialect gets back from a method it called)."""
        spend = details.get("spend") if isinstance(details, dict) else None
        if not isinstance(spend, dict) or spend.get("period") not in PERIODS:
            return None
        try:
            used, limit = float(spend.get("usedUsd") or 0), float(spend.get("limitUsd") or 0)
        except (TypeError, ValueError):
            return None
        return cls(spend["period"], used, limit, scope=str(spend.get("scope") or GLOBAL))

    def note(self) -> str:
        """The text a run ends with when a spend limit stops it between model calls."""
        return f"Spend limit reached ({self.period}: ${self.used:.2f} / ${self.limit:.2f}). {_HOW[self.period]}"


_NOTE = re.compile(r"^Spend limit reached \((session|daily|monthly): \$(\d+\.\d\d) / \$(\d+\.\d\d)\)")


def exceeded_in_note(text: str) -> SpendExceededError | None:
    """The refusal a spend note (`SpendExceededError.note`) was written for, or None for any other text."""
    found = _NOTE.match(text)
    return SpendExceededError(found[1], float(found[2]), float(found[3])) if found else None
