"""Token budgets for every run, whoever starts it (ADR 0026): the one interface runs, dialects and status use.

    check_before_run(services, config, session_key, meta, text)  before a run starts: raises `BudgetExceededError`
                                                                 (`runs.submit` calls it for every run it is given)
    reserve(services, config, meta, estimate) -> Spend           before every model call: raises `BudgetExceededError`
    Spend.settle(total_tokens) / Spend.release()                 after the call (its real usage / it failed)
    count_unanswered(services, session_key, session_id, usage)   a call stopped or failed after it reached its
                                                                 provider: the session's totals count it too
    status(services, config, meta)                               used and limits per scope (`session.stats`)
    exceeded_of(message)                                         the refusal behind a run's budget note, if any

Scopes and limits are `orbital.domain.budgets`'. The session scope counts the session's persisted totals
(`totalTokens`, added as each reply is stored): a session runs one run at a time (its lease), so no two model calls
of one session are ever in flight together and a check against the totals is enough; no write is added for it. The
daily and monthly scopes count every session of the gateway in table counters (`orbital.store.usage`): a model call
first reserves its estimate there with a conditional `ADD` (refused if it would take a counter past its limit), and
settles it with its real usage afterwards, so parallel runs on other Lambdas cannot spend the same tokens. Without a
daily or monthly limit nothing is reserved, and the real usage is still counted (for `status`, and for a limit set
later in the period).

DynamoDB calls per model call: no gateway limit set, one `UpdateItem` (the usage); a daily or monthly limit set, two
(the reservation, then the difference to the real usage, left out when it is 0); a failed call, the reservation and
its release.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any

from orbital.agent import call_parts, context
from orbital.agent import spend as dollars
from orbital.domain import spend as spend_rules
from orbital.domain.budgets import (
    DAILY,
    GATEWAY_SCOPES,
    MONTHLY,
    NOTE_REASON,
    SESSION,
    BudgetExceededError,
    Limits,
    Period,
    exceeded_in_note,
    limits,
    period_of,
    unanswered_usage,
    would_exceed,
)
from orbital.domain.compaction import estimate_context_tokens
from orbital.domain.messages import text_of
from orbital.domain.reset_policy import initial_policy, should_auto_reset
from orbital.store.usage import UsageRefusedError

if TYPE_CHECKING:
    from orbital.ports.services import Services

__all__ = [
    "DAILY",
    "MONTHLY",
    "NOTE_REASON",
    "SESSION",
    "BudgetExceededError",
    "Limits",
    "Reservation",
    "SpendExceededError",
    "check_before_run",
    "count_unanswered",
    "exceeded_of",
    "limits",
    "reserve",
    "status",
    "unanswered_usage",
]

log = logging.getLogger("orbital.agent.budgets")

SpendExceededError = spend_rules.SpendExceededError


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def _session_used(meta: dict[str, Any]) -> int:
    return _int(meta.get("totalTokens"))


# --- before a run ---------------------------------------------------------------------------------------------------


def check_before_run(
    services: Services,
    config: dict[str, Any],
    session_key: str,
    meta: dict[str, Any] | None,
    text: str,
    *,
    now_ms: int | None = None,
    origin: dict[str, Any] | None = None,
    overrides: dict[str, Any] | None = None,
) -> None:
    """Refuse a run whose first model call would go past a budget: raises `BudgetExceededError` for the first scope
    (session, daily, monthly) where what is used plus the call's estimate exceeds the limit. The estimate is the one
    `reserve` is given for that call (`first_call_estimate`): the system prompt the run would be sent with (`origin`,
    `overrides`: the run's), the session's history (none for a session that is new or whose reset policy resets it
    before this run) and the message. So a request that cannot fit is refused here, before any run or stream, and a
    run that starts gets at least its first model call. Reads the day's counters when a daily or monthly limit is
    set (one GetItem); writes nothing. Each model call of the run is checked again (`reserve`)."""
    meta = meta or {}
    found = limits(config, meta)
    dollars_capped = spend_rules.any_limit(config) or _cron_job_of(origin) is not None
    if found.session is None and not found.gateway and not dollars_capped:
        return
    now = now_ms if now_ms is not None else services.now_ms()
    policy = meta.get("resetPolicy") or initial_policy(config)
    fresh = not meta or should_auto_reset(policy, _int(meta.get("updatedAt")) or now, now)
    estimate = first_call_estimate(
        services, config, session_key, meta, text, fresh=fresh, now_ms=now, origin=origin, overrides=overrides
    )
    if dollars_capped:  # the spend caps in USD (ADR 0044), beside the token budgets
        model = context.effective_model(config, meta, overrides or {})
        call = dollars.call_of(config, model, estimate, session_key=session_key, meta=meta, origin=origin)
        dollars.check_before_run(
            services, config, dataclasses.replace(call, session_id=None if fresh else call.session_id), now_ms=now
        )
    if found.session is not None:
        used = 0 if fresh else _session_used(meta)
        if would_exceed(used, estimate, found.session):
            log.info("run for %s refused: session budget %s/%s", session_key, used, found.session)
            raise BudgetExceededError(SESSION, used, found.session, estimate=estimate)
    if found.gateway:
        counted = services.usage.read(period_of(now))
        for scope in GATEWAY_SCOPES:
            limit = found.of(scope)
            if limit is not None and would_exceed(counted.of(scope), estimate, limit):
                log.info("run for %s refused: %s budget %s/%s", session_key, scope, counted.of(scope), limit)
                raise BudgetExceededError(scope, counted.of(scope), limit, estimate=estimate)


def _cron_job_of(origin: dict[str, Any] | None) -> str | None:
    if isinstance(origin, dict) and origin.get("kind") == "cron" and isinstance(origin.get("jobId"), str):
        return origin["jobId"]
    return None


def first_call_estimate(
    services: Services,
    config: dict[str, Any],
    session_key: str,
    meta: dict[str, Any],
    text: str,
    *,
    fresh: bool,
    now_ms: int,
    origin: dict[str, Any] | None = None,
    overrides: dict[str, Any] | None = None,
) -> int:
    """What `reserve` will be given for a run's first model call, estimated before the run: its system prompt
    (`call_parts`, as the turn builds it), the session's stored history (none when `fresh`) and the run's message."""
    message = {"role": "user", "content": text or "[Empty message]", "timestamp": now_ms}  # as the turn stores it
    history = 0
    if not fresh and meta.get("sessionId"):
        history = services.sessions.history(session_key, meta).tokens
    system = call_parts.system_prompt_tokens(services, config, session_key, meta, overrides=overrides, origin=origin)
    return max(1, system + history + estimate_context_tokens([message]))


# --- around each model call ---------------------------------------------------------------------------------------


class Reservation:
    """The tokens one model call reserved in the gateway's counters, until it settles or releases them."""

    def __init__(self, services: Services, period: Period, reserved: int, hold: dollars.Hold | None = None) -> None:
        self.services = services
        self.period = period
        self.reserved = reserved
        self.hold = hold
        self.done = False

    def settle(self, total_tokens: int, usage: dict[str, Any] | None = None) -> None:
        """The call answered with `total_tokens` of usage (`usage`: the provider's `{input, output, cacheRead,
        cacheWrite}`, for its price): count them (what was reserved is replaced)."""
        self._add(int(total_tokens) - self.reserved)
        if self.hold is not None:
            self.hold.settle(usage if usage is not None else {"input": int(total_tokens)})

    def release(self) -> None:
        """The call failed or never ran: take the reservation back."""
        self._add(-self.reserved)
        if self.hold is not None:
            self.hold.release()

    def _add(self, amount: int) -> None:
        if self.done:
            return
        self.done = True
        try:
            self.services.usage.add(self.period, amount)
        except Exception:  # the reply matters more than the count; a lost settle leaves the estimate counted
            log.exception("could not count %s tokens of usage for %s", amount, self.period.day_name)


def reserve(
    services: Services,
    config: dict[str, Any],
    meta: dict[str, Any] | None,
    estimate: int,
    *,
    now_ms: int | None = None,
    call: dollars.ModelCall | None = None,
) -> Reservation:
    """Before a model call whose request is estimated at `estimate` tokens: refuse it (`BudgetExceededError`) if the
    session's totals plus the estimate exceed its budget (`meta` None: a call outside any session's usage, such as
    a summary, is not held to one), or if the daily or monthly counter could not take the estimate within its limit;
    otherwise the estimate is reserved there (one conditional UpdateItem, none without a gateway limit). The caller
    must `settle` or `release` what it gets.

    With `call` (the model and where the call counts) the spend caps in USD are held to as well
    (`orbital.agent.spend.reserve`, after the token budgets): `SpendExceededError` / `UnpricedModelError` when one
    refuses, the token reservation taken back."""
    estimate = max(0, int(estimate))
    found = limits(config, meta or {})
    if meta is not None and found.session is not None:
        used = _session_used(meta)
        if would_exceed(used, estimate, found.session):
            raise BudgetExceededError(SESSION, used, found.session, estimate=estimate)
    now = now_ms if now_ms is not None else services.now_ms()
    period = period_of(now)
    reserved = 0
    if found.gateway:
        try:
            services.usage.reserve(period, estimate, daily=found.daily, monthly=found.monthly)
        except UsageRefusedError as refused:
            limit = found.of(refused.scope)
            assert limit is not None
            raise BudgetExceededError(refused.scope, refused.used, limit, estimate=estimate) from None
        reserved = estimate
    spend = Reservation(services, period, reserved)
    if call is not None:
        try:
            spend.hold = dollars.reserve(services, config, call, now_ms=now)
        except BaseException:
            spend.release()
            raise
    return spend


def count_unanswered(services: Services, session_key: str, session_id: Any, usage: dict[str, int]) -> None:
    """Add the usage of a model call that reached its provider but gave no reply (`unanswered_usage`: a `/stop`, a
    stream that broke off) to the session's totals, as a stored reply's usage is: stopping a run does not make what
    it spent free. Only while the session is still `session_id` (a reset meanwhile started a new count)."""
    total = _int(usage.get("totalTokens"))
    if total <= 0:
        return

    def add(meta: dict[str, Any]) -> bool:
        if meta.get("sessionId") != session_id:
            return False
        meta["inputTokens"] = _int(meta.get("inputTokens")) + _int(usage.get("input"))
        meta["outputTokens"] = _int(meta.get("outputTokens")) + _int(usage.get("output"))
        meta["totalTokens"] = _session_used(meta) + total
        return True

    try:
        services.sessions.update_meta(session_key, add)
    except Exception:  # the run's end matters more than the count
        log.exception("could not count %s tokens of an unanswered call for %s", total, session_key)


# --- what is used ---------------------------------------------------------------------------------------------------


def status(
    services: Services, config: dict[str, Any], meta: dict[str, Any] | None = None, *, now_ms: int | None = None
) -> dict[str, Any]:
    """Used and limit per scope (a limit of None: no limit): `{session: {used, limit}, daily: {used, limit,
    period: "YYYY-MM-DD"}, monthly: {used, limit, period: "YYYY-MM"}}`, periods in UTC; `session` only with a
    session's `meta`. The daily and monthly counts include the estimates of model calls in flight. One GetItem."""
    found = limits(config, meta or {})
    period = period_of(now_ms if now_ms is not None else services.now_ms())
    counted = services.usage.read(period)
    result: dict[str, Any] = {}
    if meta is not None:
        result[SESSION] = {"used": _session_used(meta), "limit": found.session}
    for scope in GATEWAY_SCOPES:
        result[scope] = {"used": counted.of(scope), "limit": found.of(scope), "period": period.name(scope)}
    return result


def exceeded_of(message: dict[str, Any] | None) -> BudgetExceededError | None:
    """The refusal a run's ending note stands for (a run a budget stopped between model calls), else None: a
    dialect turns it into its own words (`exoclaw_message`)."""
    if not isinstance(message, dict):
        return None
    if message.get("model") == spend_rules.NOTE_REASON:
        return spend_rules.exceeded_in_note(text_of(message))
    if message.get("model") != NOTE_REASON:
        return None
    return exceeded_in_note(text_of(message))
