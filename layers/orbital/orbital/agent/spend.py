"""Spend caps in US dollars around every model call (ADR 0044), beside the token budgets (`orbital.agent.budgets`,
which calls this module wherever it reserves and settles, so every kind of model call is held to both).

    check_before_run(services, config, session_key, meta, model, estimate, origin)  before a run: `SpendExceededError`
    reserve(services, config, call) -> Hold                before a model call: the worst case reserved against every
                                                           limit that applies (one conditional UpdateItem each);
                                                           `SpendExceededError` / `UnpricedModelError` when one refuses
    Hold.settle(usage) / Hold.release()                    after the call: its real price / nothing
    status(services, config, session_key?, agent_id?)      `spend.status`

The worst case of a call is its input estimate and its whole output limit (`providers.<name>.maxTokens`), priced
(`orbital.domain.spend.price`). A refusal by one counter takes back what the call reserved on the others, so no
counter keeps a reservation of a call that was not made. Settling counts the call's real price (cache reads and
writes at their own prices) in every counter it touched, and in the gateway's daily and monthly counters and the
session's and cron job's counter of the day (for `spend.status` and its top lists) whether or not a limit is set.
When a counter crosses `spend.alertAt` of its limit, `spend.alert` goes to every client and one note to the main
session, once per period (a flag on the counter, set by a conditional write).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from orbital.agent import events
from orbital.agent.providers._resolve import DEFAULT_MAX_TOKENS, provider_settings
from orbital.domain import spend as rules
from orbital.domain.messages import gateway_note
from orbital.domain.session_keys import normalize_main_key, resolve_agent_main_session_key, session_agent_id
from orbital.domain.spend import SpendExceededError, UnpricedModelError
from orbital.protocol.frames import event_frame
from orbital.store import conditions as cond
from orbital.store import keys
from orbital.store.spend import SpendRefusedError

if TYPE_CHECKING:
    from orbital.ports.services import Services

__all__ = ["Hold", "ModelCall", "SpendExceededError", "UnpricedModelError", "check_before_run", "reserve", "status"]

log = logging.getLogger("orbital.agent.spend")

ALERTED = "alerted"
ALERT_EVENT = "spend.alert"
ALERT_REASON = "spend-alert"
TOP = 5


@dataclass(frozen=True)
class ModelCall:
    """What a model call is, for its price and its limits: the model, the input estimate, the session it counts in
    (`session_key`, `session_id`: none for a call outside a session's usage) and the cron job behind its run."""

    provider: str
    model: str
    estimate: int
    session_key: str | None = None
    session_id: str | None = None
    agent_id: str | None = None
    job_id: str | None = None
    max_output: int | None = None
    """The call's output limit (None: the provider's `maxTokens`; 0 for an embedding)."""


def call_of(
    config: dict[str, Any],
    model: dict[str, str],
    estimate: int,
    *,
    session_key: str | None = None,
    meta: dict[str, Any] | None = None,
    origin: dict[str, Any] | None = None,
) -> ModelCall:
    """The `Call` of a model call of a session's run (`meta`: the session's, `origin`: the run's)."""
    run = (meta or {}).get("currentRun") or {}
    if not isinstance(origin, dict):
        origin = run.get("origin") if isinstance(run.get("origin"), dict) else {}
    assert isinstance(origin, dict)
    job_id = origin.get("jobId") if origin.get("kind") == "cron" and isinstance(origin.get("jobId"), str) else None
    return ModelCall(
        provider=str(model.get("provider") or ""),
        model=str(model.get("id") or ""),
        estimate=max(0, int(estimate)),
        session_key=session_key,
        session_id=str((meta or {}).get("sessionId") or "") or None,
        agent_id=session_agent_id(session_key) if session_key else None,
        job_id=job_id,
    )


def _max_output(config: dict[str, Any], provider: str) -> int:
    value = provider_settings(config, provider).get("maxTokens")
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return DEFAULT_MAX_TOKENS


def _job_limit(services: Services, job_id: str | None) -> Any:
    if not job_id:
        return None
    job = services.cron.get_job(job_id) or {}
    return job.get("spendLimitUsd")


def _caps(services: Services, config: dict[str, Any], call: ModelCall) -> list[rules.Cap]:
    return rules.caps(
        config,
        agent_id=call.agent_id,
        session_key=call.session_key if call.session_id else None,
        job_limit=_job_limit(services, call.job_id),
        job_id=call.job_id,
    )


def _window(config: dict[str, Any], period: str, now_ms: int, session_id: str | None) -> rules.Window:
    return rules.window(period, now_ms, rules.zone(config), session_id=session_id)


def _worst(config: dict[str, Any], call: ModelCall) -> int | None:
    """The call's worst case in micro-dollars (its input estimate and its whole output limit), None: unpriced."""
    output = call.max_output if call.max_output is not None else _max_output(config, call.provider)
    found = rules.price(config, call.provider, call.model, rules.Usage(input=call.estimate, output=output))
    return None if found is None else rules.to_micro(found)


# --- before a run ---------------------------------------------------------------------------------------------------


def check_before_run(services: Services, config: dict[str, Any], call: ModelCall, *, now_ms: int) -> None:
    """Refuse a run whose first model call could not be reserved: `SpendExceededError` for the first limit where what is
    counted plus the call's worst case goes past it, `UnpricedModelError` for a model without a price under a limit.
    Reads the counters (one GetItem per limit); writes nothing."""
    caps = _caps(services, config, call)
    if not caps:
        return
    worst = _worst(config, call)
    if worst is None:
        if rules.unpriced_allowed(config):
            return
        raise UnpricedModelError(call.provider, call.model)
    for cap in caps:
        win = _window(config, cap.period, now_ms, call.session_id)
        used = services.spend.read(cap.period, win.key, cap.scope).used
        if used + worst > rules.to_micro(cap.limit):
            log.info(
                "run for %s refused: %s %s spend $%.2f/$%.2f",
                call.session_key,
                cap.scope,
                cap.period,
                rules.to_usd(used),
                cap.limit,
            )
            raise SpendExceededError(cap.period, rules.to_usd(used), cap.limit, scope=cap.scope)


# --- around each model call -----------------------------------------------------------------------------------------


@dataclass
class _Counter:
    period: str
    key: str
    scope: str
    expires_at: int
    reserved: int = 0
    limit: float | None = None


@dataclass
class Hold:
    """What one model call reserved, until it settles or releases it."""

    services: Services
    config: dict[str, Any]
    call: ModelCall
    counters: list[_Counter] = field(default_factory=list)
    done: bool = False

    def settle(self, usage: dict[str, Any] | None) -> None:
        """The call answered (or was stopped after it reached its provider) with `usage` `{input, output, cacheRead,
        cacheWrite}`: count its price everywhere (what was reserved is replaced)."""
        found = rules.price(self.config, self.call.provider, self.call.model, rules.Usage.of(usage))
        self._apply(rules.to_micro(found) if found is not None else 0)

    def release(self) -> None:
        """The call failed or never ran: take the reservations back."""
        self._apply(0, count=False)

    def _apply(self, amount: int, *, count: bool = True) -> None:
        if self.done:
            return
        self.done = True
        for counter in self.counters:
            if not count and counter.reserved == 0:
                continue
            try:
                after = self.services.spend.add(
                    counter.period,
                    counter.key,
                    counter.scope,
                    amount - counter.reserved,
                    -counter.reserved,
                    expires_at=counter.expires_at,
                )
            except Exception:  # the reply matters more than the count; a lost settle leaves the worst case counted
                log.exception("could not count spend for %s %s", counter.scope, counter.period)
                continue
            if count and counter.limit is not None:
                _maybe_alert(self.services, self.config, counter, after.used)


def _counters(config: dict[str, Any], call: ModelCall, caps: list[rules.Cap], now_ms: int) -> list[_Counter]:
    """The counters of the caps, then the ones counted without a limit: the gateway's day and month, the session's
    and the cron job's day."""
    found: dict[tuple[str, str, str], _Counter] = {}
    for cap in caps:
        win = _window(config, cap.period, now_ms, call.session_id)
        found[(cap.period, win.key, cap.scope)] = _Counter(cap.period, win.key, cap.scope, win.expires_at, 0, cap.limit)
    plain = [(rules.DAILY, rules.GLOBAL), (rules.MONTHLY, rules.GLOBAL)]
    if call.session_key:
        plain.append((rules.DAILY, f"session:{call.session_key}"))
    if call.job_id:
        plain.append((rules.DAILY, f"cron:{call.job_id}"))
    for period, scope in plain:
        win = _window(config, period, now_ms, None)
        found.setdefault((period, win.key, scope), _Counter(period, win.key, scope, win.expires_at))
    return list(found.values())


def reserve(services: Services, config: dict[str, Any], call: ModelCall, *, now_ms: int | None = None) -> Hold:
    """Before a model call: reserve its worst case on every limit that applies, one conditional UpdateItem each; a
    refusal takes back what was reserved and raises `SpendExceededError` (`UnpricedModelError`: a limit applies and the
    model has no price). The caller must `settle` or `release` the `Hold`."""
    now = now_ms if now_ms is not None else services.now_ms()
    caps = _caps(services, config, call)
    hold = Hold(services, config, call, _counters(config, call, caps, now))
    if not caps:
        return hold
    worst = _worst(config, call)
    if worst is None:
        if rules.unpriced_allowed(config):
            return hold
        raise UnpricedModelError(call.provider, call.model)
    for counter in hold.counters:
        if counter.limit is None:
            continue
        try:
            services.spend.reserve(
                counter.period,
                counter.key,
                counter.scope,
                worst,
                rules.to_micro(counter.limit),
                expires_at=counter.expires_at,
            )
        except SpendRefusedError as refused:
            hold.release()
            raise SpendExceededError(
                counter.period, rules.to_usd(refused.used), counter.limit, scope=counter.scope
            ) from None
        counter.reserved = worst
    return hold


# --- alerts ---------------------------------------------------------------------------------------------------------


def _maybe_alert(services: Services, config: dict[str, Any], counter: _Counter, used: int) -> None:
    """Once a counter has crossed `alertAt` of its limit: flag it (a conditional write, so one caller wins per
    period), then tell every client and the main session."""
    assert counter.limit is not None
    share = rules.alert_at(config)
    if used < rules.to_micro(counter.limit * share):
        return
    try:
        services.table.update(
            keys.spend_counter(counter.period, counter.key, counter.scope),
            set_attrs={ALERTED: 1},
            condition=cond.not_exists(ALERTED),
            return_values="NONE",
        )
    except Exception:  # flagged already (or the write failed): no alert from this call
        return
    payload = {
        "scope": counter.scope,
        "period": counter.period,
        "usedUsd": rules.to_usd(used),
        "limitUsd": counter.limit,
        "alertAt": share,
    }
    _broadcast(services, payload)
    text = (
        f"Spend alert: {counter.scope} has used ${rules.to_usd(used):.2f} of its {counter.period} limit of "
        f"${counter.limit:.2f} ({int(share * 100)}%)."
    )
    _note_main_session(services, config, text)


def _broadcast(services: Services, payload: dict[str, Any]) -> None:
    for connection_id, _key in events.Audience(services, "").targets():
        try:
            services.push(connection_id, event_frame(ALERT_EVENT, payload))
        except Exception as exc:
            log.warning("%s to %s failed: %s", ALERT_EVENT, connection_id, type(exc).__name__)


def _note_main_session(services: Services, config: dict[str, Any], text: str) -> None:
    session = config.get("session")
    key = resolve_agent_main_session_key(
        "main", normalize_main_key(session.get("mainKey") if isinstance(session, dict) else None)
    )
    note = gateway_note(text, ALERT_REASON, services.now_ms())
    try:
        services.sessions.get_or_create_meta(key)
        services.sessions.append_messages(key, [note])
    except Exception:
        log.exception("could not write the spend alert into %s", key)


# --- what is spent --------------------------------------------------------------------------------------------------


def status(
    services: Services,
    config: dict[str, Any],
    *,
    session_key: str | None = None,
    agent_id: str | None = None,
    now_ms: int | None = None,
) -> dict[str, Any]:
    """`spend.status`: used, reserved and limit per period and scope, and the top sessions and jobs of the day."""
    now = now_ms if now_ms is not None else services.now_ms()
    agent = agent_id or (session_agent_id(session_key) if session_key else None)
    meta = services.sessions.load_meta(session_key) if session_key else None
    session_id = str((meta or {}).get("sessionId") or "") or None
    caps = {
        (c.scope, c.period): c.limit
        for c in rules.caps(config, agent_id=agent, session_key=session_key if session_id else None)
    }
    rows: list[tuple[str, str]] = [(rules.GLOBAL, rules.DAILY), (rules.GLOBAL, rules.MONTHLY)]
    if agent:
        rows += [(f"agent:{agent}", rules.DAILY), (f"agent:{agent}", rules.MONTHLY)]
    if session_key and session_id:
        rows.append((f"session:{session_key}", rules.SESSION))
    periods = []
    for scope, period in rows:
        win = _window(config, period, now, session_id)
        counted = services.spend.read(period, win.key, scope)
        periods.append(
            {
                "period": period,
                "scope": scope,
                "usedUsd": rules.to_usd(counted.used - counted.reserved),
                "reservedUsd": rules.to_usd(counted.reserved),
                "limitUsd": caps.get((scope, period)),
                "resetsAt": win.resets_at_ms,
            }
        )
    day = _window(config, rules.DAILY, now, None)
    top: dict[str, list[dict[str, Any]]] = {}
    for name, prefix, field_name in (("sessions", "session:", "sessionKey"), ("jobs", "cron:", "jobId")):
        found = services.spend.of_period(rules.DAILY, day.key, prefix=prefix)
        ranked = sorted(found.items(), key=lambda item: item[1].used - item[1].reserved, reverse=True)[:TOP]
        top[name] = [
            {field_name: scope[len(prefix) :], "usedUsd": rules.to_usd(c.used - c.reserved)} for scope, c in ranked
        ]
    return {
        "currency": "USD",
        "timeZone": rules.zone_name(config),
        "periods": periods,
        "top": top,
        "alertAt": rules.alert_at(config),
    }
