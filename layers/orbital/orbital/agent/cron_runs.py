"""Executing a cron job is starting an agent run (spec §11.4, fix F9).

- `systemEvent` jobs inject their text into the agent's main session; `task` jobs run in a fresh session of their
  own for every run (`agent:{agentId}:cron:{jobId}:{runId}`), with the job's `model` and `thinking` overrides.
- The message is prefixed `[cron · {time}]`; when the reply is to be delivered (unless `deliver` is false), a line
  tells the agent where it goes.
- Delivery goes to the job's explicit `channel`/`to` (on the last active account) or the agent's last active
  channel and peer; with neither, nothing is delivered. Unlike GSV, a cron run does not overwrite the agent's last
  active context.
- The job's run record is written when the run ends, with its real status (`ok` / `error`), duration and error
  (`finished`, called from the run's end). `timeoutSeconds` stops a task run that takes longer (`expire`, from the
  scheduler tick).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from orbital.agent import events, runs
from orbital.domain import commands, timefmt
from orbital.domain.config import as_dict
from orbital.domain.session_keys import normalize_main_key, resolve_agent_main_session_key
from orbital.engines import cron
from orbital.store import keys

if TYPE_CHECKING:
    from orbital.runtime.services import Services

log = logging.getLogger("orbital.agent.cron_runs")

SUMMARY_CHARS = 200
TIMED_OUT = "Cron run timed out after {seconds}s"


def _target(services: Services, job: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any] | None:
    if spec.get("deliver") is False:
        return None
    agent_id = str(job.get("agentId") or "main")
    last = services.gateway.last_active(agent_id) or {}
    channel = spec.get("channel") if isinstance(spec.get("channel"), str) and spec.get("channel") else None
    to = spec.get("to") if isinstance(spec.get("to"), str) and spec.get("to") else None
    if to:
        peer = {"kind": "dm", "id": to}
        channel = channel or last.get("channel")
        account = last.get("accountId") if last.get("channel") == channel else "default"
    else:
        if not last.get("channel"):
            return None
        channel, account, peer = last["channel"], last.get("accountId"), as_dict(last.get("peer"))
    if not channel or not peer.get("id"):
        return None
    return {"channel": channel, "accountId": account or "default", "peer": peer}


def _overrides(spec: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    model = spec.get("model")
    if isinstance(model, str) and model.strip():
        provider = str(as_dict(config.get("model")).get("provider") or "")
        selected = commands.parse_model_selection(model.strip(), provider)
        if selected:
            out["model"] = selected
    thinking = commands.normalize_think_level(spec.get("thinking") if isinstance(spec.get("thinking"), str) else None)
    if thinking:
        out["thinkLevel"] = thinking
    return out


def executor(services: Services, now_ms: int) -> Callable[[dict[str, Any]], cron.RunOutcome]:
    """The cron service's executor: start the job's run and report `running` (the record comes when it ends)."""
    config = services.config.effective()
    tz = timefmt.resolve_timezone(config.get("userTimezone"))

    def execute(job: dict[str, Any]) -> cron.RunOutcome:
        spec = as_dict(job.get("spec"))
        job_id, agent_id = str(job["id"]), str(job.get("agentId") or "main")
        run_id = str(uuid.uuid4())
        started = int(as_dict(job.get("state")).get("runningAtMs") or now_ms)
        if spec.get("mode") == "task":
            key = f"agent:{agent_id}:cron:{job_id}:{run_id}"
            text, overrides = str(spec.get("message") or ""), _overrides(spec, config)
        else:
            main_key = normalize_main_key(as_dict(config.get("session")).get("mainKey"))
            key = resolve_agent_main_session_key(agent_id, main_key)
            text, overrides = str(spec.get("text") or ""), {}
        message = f"[cron · {timefmt.format_time_full(now_ms, tz)}] {text}"
        target = _target(services, job, spec)
        deliver = None
        if target is not None:
            message += (
                f"\n[Your response will be delivered automatically to {target['channel']}:{target['peer']['id']} — "
                "reply normally, do NOT use gsv__Message for this.]"
            )
            deliver = {**target, "kind": "cron", "jobId": job_id, "replyToId": f"cron:{job_id}:{started}"}
        data: dict[str, Any] = {"text": message}
        if overrides:
            data["overrides"] = overrides
        timeout = spec.get("timeoutSeconds") if spec.get("mode") == "task" else None
        timed = isinstance(timeout, int | float) and not isinstance(timeout, bool) and timeout > 0
        marker: dict[str, Any] = {"jobId": job_id, "startedAt": started, "runId": run_id}
        if timed:
            assert isinstance(timeout, int | float)
            marker["timed"] = True
            deadline = started + int(timeout * 1000)
            active = {"jobId": job_id, "sessionKey": key, "runId": run_id, "deadline": deadline, "seconds": timeout}
            services.table.put(
                keys.cron_active(job_id, run_id),
                active,
                gsi=keys.cron_active_index(deadline, job_id),
                ttl=int(deadline / 1000) + 86400,
            )
        try:
            runs.submit(
                services,
                key,
                data,
                run_id=run_id,
                extra={"origin": {"kind": "cron", "jobId": job_id}, "notify": {"cron": marker}, "deliver": deliver},
                emit_error=events.error_emitter(services),
            )
        except Exception:
            if timed:  # the executor's error is the record; nothing is left for `expire`
                services.table.delete(keys.cron_active(job_id, run_id))
            raise
        summary = f"running in {key}" + (
            f" (delivering to {target['channel']}:{target['peer']['id']})" if target else ""
        )
        return cron.RunOutcome("running", summary=summary)

    return execute


def finished(services: Services, marker: dict[str, Any], *, reply: str | None, error: str | None) -> None:
    """A job's run ended: record it (status, duration, error, the start of the reply as its summary).

    A run with a timeout first takes its active record away; whoever takes it (this, or `expire` for a run that
    vanished) writes the one record."""
    job_id = str(marker["jobId"])
    timed = marker.get("timed") and marker.get("runId")
    if timed and services.table.delete(keys.cron_active(job_id, str(marker["runId"])), return_old=True) is None:
        return
    summary = " ".join((reply or "").split())[:SUMMARY_CHARS] or None
    outcome = cron.RunOutcome("error", error=error) if error is not None else cron.RunOutcome("ok", summary=summary)
    _record(services, job_id, outcome, int(marker.get("startedAt") or services.now_ms()))


def _record(services: Services, job_id: str, outcome: cron.RunOutcome, started_ms: int) -> None:
    try:
        cron.complete(services, job_id, outcome, started_ms=started_ms, ended_ms=services.now_ms())
    except Exception:
        log.exception("could not record the run of cron job %s", job_id)


def expire(services: Services, now_ms: int) -> int:
    """Stop task runs past their `timeoutSeconds` (their record says so). Returns how many were stopped."""
    stopped = 0
    due = keys.cron_active_index(now_ms, "\uffff")[1]
    for rec in services.table.query_index(keys.CRON_ACTIVE_GSI_PK, sk_max=due):
        active = rec.data
        key, run_id = str(active.get("sessionKey")), str(active.get("runId"))
        current = runs.current_run(services, key)
        reason = TIMED_OUT.format(seconds=active.get("seconds"))
        ours = current is not None and current.get("runId") == run_id
        # stopping it: the run's end (`finished`, through the run's notify) records the timeout
        if ours and runs.stop(services, key, emit_error=events.error_emitter(services), reason=reason).was_running:
            stopped += 1
            continue
        if services.table.delete((rec.pk, rec.sk), return_old=True) is not None:
            # the run is gone without reporting (it never started, or its end was lost): record it as failed
            started = int(active.get("deadline") or now_ms) - int(float(active.get("seconds") or 0) * 1000)
            _record(services, str(active.get("jobId")), cron.RunOutcome("error", error=reason), started)
            stopped += 1
    return stopped


def now_ms() -> int:
    return int(time.time() * 1000)
