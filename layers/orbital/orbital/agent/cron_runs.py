"""Executing a cron job is starting an agent run (spec §11.4, fix F9).

- `systemEvent` jobs inject their text into the agent's main session; `task` jobs run in a fresh session of their
  own for every run (`agent:{agentId}:cron:{jobId}:{runId}`), with the job's `model` and `thinking` overrides.
- The message is prefixed `[cron · {time}]`; when the reply is to be delivered (unless `deliver` is false), a line
  tells the agent where it goes.
- Delivery goes to the job's explicit `channel`/`to` (on the last active account) or the agent's last active
  channel and peer; with neither, nothing is delivered. Unlike GSV, a cron run does not overwrite the agent's last
  active context.
- The job's run record is written when the run ends, with its real status (`ok` / `error`), duration and error
  (`finished`, through `run_ended`: the cron family hooks it on every run's end).
- `tool` is the gsv__Cron tool, which the cron family registers with the native tools.
- Every run is watched: a record indexed by its next check time (`CRONACTIVE`). The scheduler tick (`expire`) looks
  at the due ones: a task past its `timeoutSeconds` is stopped (its end records the timeout); a run still going
  renews the job's running marker and is looked at again later; a run that vanished without reporting its end is
  recorded as failed. Whoever deletes the watch record first (the run's end or the tick) writes the one record.
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
from orbital.engines import cron, cron_tool
from orbital.errors import RpcError
from orbital.store import keys
from orbital.tools.native import ToolEnv, ToolError

if TYPE_CHECKING:
    from orbital.ports.services import Services

log = logging.getLogger("orbital.agent.cron_runs")

SUMMARY_CHARS = 200
TIMED_OUT = "Cron run timed out after {seconds}s"
VANISHED = "The run ended without reporting a result"
CHECK_EVERY_MS = 5 * 60_000
"""How often the tick looks at a run still going (renewing the job's running marker)."""


def _target(services: Services, job: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any] | None:
    if spec.get("deliver") is False:
        return None
    agent_id = str(job.get("agentId") or "main")
    last = services.last_active.get(agent_id) or {}
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
        marker: dict[str, Any] = {
            "jobId": job_id,
            "startedAt": started,
            "runId": run_id,
            "watched": True,
            "sessionKey": key,
        }
        watch: dict[str, Any] = {"jobId": job_id, "sessionKey": key, "runId": run_id, "startedAt": started}
        if timed:
            assert isinstance(timeout, int | float)
            watch.update(deadline=started + int(timeout * 1000), seconds=timeout)
        _arm(services, watch, now_ms)
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
            services.table.delete(keys.cron_active(job_id, run_id))  # the executor's error is the record
            raise
        summary = f"running in {key}" + (
            f" (delivering to {target['channel']}:{target['peer']['id']})" if target else ""
        )
        return cron.RunOutcome("running", summary=summary)

    return execute


def tool(env: ToolEnv, args: dict[str, Any]) -> dict[str, Any]:
    """The gsv__Cron tool (spec §8.4) over the cron service. Times are read and shown in `userTimezone`; `run`
    starts the job's agent run (its record is written when that run ends). The cron family registers it
    (`Hooks.native_tools`)."""
    try:
        return cron_tool.execute_tool(
            env.services,
            args,
            agent_id=env.agent_id,
            user_tz=env.config.get("userTimezone"),
            now_ms=env.now_ms,
            execute=executor(env.services, env.now_ms),
        )
    except cron.CronError as exc:
        raise ToolError(exc.message) from None
    except RpcError as exc:
        raise ToolError(exc.message) from None


def _arm(services: Services, watch: dict[str, Any], now_ms: int) -> None:
    """Store the watch record, due for a look at the run's deadline or in `CHECK_EVERY_MS`, whichever is first."""
    check = now_ms + CHECK_EVERY_MS
    deadline = watch.get("deadline")
    if isinstance(deadline, int):
        check = min(check, deadline)
    job_id = str(watch["jobId"])
    services.table.put(
        keys.cron_active(job_id, str(watch["runId"])),
        {**watch, "checkAt": check},
        gsi=keys.cron_active_index(check, job_id),
        ttl=int(check / 1000) + 7 * 86400,
    )


def finished(services: Services, marker: dict[str, Any], *, reply: str | None, error: str | None) -> None:
    """A job's run ended: record it (status, duration, error, the start of the reply as its summary), unless the
    tick already recorded it as vanished (it took the watch record first)."""
    job_id = str(marker["jobId"])
    watched = (marker.get("watched") or marker.get("timed")) and marker.get("runId")
    if watched and services.table.delete(keys.cron_active(job_id, str(marker["runId"])), return_old=True) is None:
        return
    summary = " ".join((reply or "").split())[:SUMMARY_CHARS] or None
    session = marker.get("sessionKey") if isinstance(marker.get("sessionKey"), str) else None
    if error is not None:
        outcome = cron.RunOutcome("error", error=error, session_key=session)
    else:
        outcome = cron.RunOutcome("ok", summary=summary, session_key=session)
    _record(services, job_id, outcome, int(marker.get("startedAt") or services.now_ms()))


def run_ended(services: Services, session_key: str, run: dict[str, Any], reply: str | None, error: str | None) -> None:
    """A run ended (`Hooks.on_run_ended`, registered by the cron family): a cron job's run is recorded."""
    notify = run.get("notify")
    job = notify.get("cron") if isinstance(notify, dict) else None
    if isinstance(job, dict) and job.get("jobId"):
        finished(services, job, reply=reply, error=error)


def _record(services: Services, job_id: str, outcome: cron.RunOutcome, started_ms: int) -> None:
    try:
        cron.complete(services, job_id, outcome, started_ms=started_ms, ended_ms=services.now_ms())
    except Exception:
        log.exception("could not record the run of cron job %s", job_id)


def _queued(services: Services, session_key: str, run_id: str) -> bool:
    meta = services.sessions.load_meta(session_key) or {}
    return any(isinstance(e, dict) and e.get("runId") == run_id for e in meta.get("queue") or [])


def expire(services: Services, now_ms: int) -> int:
    """Look at the watched runs that are due: stop task runs past their `timeoutSeconds`, renew the running marker
    of runs still going, record runs that vanished. Returns how many runs were stopped or recorded."""
    ended = 0
    due = keys.cron_active_index(now_ms, "\uffff")[1]
    for rec in services.table.query_index(keys.CRON_ACTIVE_GSI_PK, sk_max=due):
        watch = rec.data
        key, run_id, job_id = str(watch.get("sessionKey")), str(watch.get("runId")), str(watch.get("jobId"))
        deadline = watch.get("deadline")
        late = isinstance(deadline, int) and now_ms >= deadline
        reason = TIMED_OUT.format(seconds=watch.get("seconds")) if late else VANISHED
        current = runs.current_run(services, key)
        ours = current is not None and current.get("runId") == run_id
        alive = ours and current is not None and not runs.is_stale(services, current, _wall_ms())
        if alive and late:
            # stopping it: the run's end (`finished`, through the run's notify) records the timeout
            if runs.stop(services, key, emit_error=events.error_emitter(services), reason=reason).was_running:
                ended += 1
                continue
        elif alive or _queued(services, key, run_id):
            started = watch.get("startedAt")
            if isinstance(started, int):
                cron.touch_running(services, job_id, started, now_ms)
            _arm(services, watch, now_ms)
            continue
        if services.table.delete((rec.pk, rec.sk), return_old=True) is not None:
            # gone without reporting (it never started, or its end was lost): record it as failed
            started_at = watch.get("startedAt")
            if not isinstance(started_at, int):  # a record written before runs carried their start
                started_at = int(deadline or now_ms) - int(float(watch.get("seconds") or 0) * 1000)
            _record(services, job_id, cron.RunOutcome("error", error=reason, session_key=key), started_at)
            ended += 1
    return ended


def _wall_ms() -> int:
    return int(time.time() * 1000)
