"""The cron service (spec §11.3) over the gateway table (`store.cron_jobs`): jobs and their runs.

What a run *does* is not decided here: `run` takes an `execute(job) -> RunOutcome` callable (the agent loop) and does
the bookkeeping around it, so the outcome recorded is the real one (fix F9), with its duration.

Running a job:

1. Claim it: re-read the job with its version, check it is still due (or, forced, not running), and write the
   running marker `state.runningAtMs` with a conditional write on that version. Of two concurrent `run` calls only
   one can win the write, so a job is never executed twice at once; the loser leaves it alone.
2. Skip without executing when GSV does (`job disabled`, `cron scheduler disabled`, empty text or message), else
   call `execute(job)`; an exception is an `error` outcome with its message.
3. Finish on a fresh read (the job may have been edited meanwhile), again with a versioned write: clear the marker,
   set `lastRunAtMs` (the start), `lastStatus`, `lastError`, `lastDurationMs`; an `at` job is disabled, or deleted
   when it succeeded and has `deleteAfterRun` (its run history stays); `every` / `cron` jobs get their next run
   computed from the end of this one. A run record is appended and the job's history trimmed to
   `cron.maxRunsPerJobHistory`.

Orbital behaviour beyond GSV:

* Backoff: `state.consecutiveFailures` counts `error` outcomes in a row (reset by `ok` or any update of the job;
  `skipped` leaves it). After n of them the next run of an `every` / `cron` job is pushed back by
  min(1 h, 30 s * 2^(n-1)) beyond its normal next time, so a broken job does not hammer a model or a channel.
* A running marker older than `RUNNING_STALE_MS` (or twice the task's `timeoutSeconds`, if longer) is presumed left
  by a crashed run: the job is due again and may be claimed. A run that is seen alive (`touch_running`, from the
  scheduler's watch over agent runs) renews it, so a long run is never claimed twice.
* An executor may answer `running` (an agent run, which ends later): `complete` then records the real outcome
  (fix F9), and `cron.maxConcurrentRuns` counts the runs still going, not only those started by one call. The
  answer of `run` stays GSV's for such a run: `status: "ok"` (the run started), `durationMs` the time it took to
  start it, plus `startedAtMs` (the claim); no `nextRunAtMs`, which is computed when the run ends.
* A forced run of a job that is running reports `skipped` with `job is already running` and changes nothing.
* A job removed while it ran gets no run record (its history went with it).
* Input errors raise `CronError` carrying a status code (400, or 404 for an unknown job id); GSV answers 500 for
  these, but its clients only show the message, which is GSV's exact text.

The gsv__Cron tool over this service is `orbital.engines.cron_tool`.
"""

from __future__ import annotations

import copy
import functools
import math
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, ParamSpec, TypeVar

from orbital.domain.ids import normalize_agent_id
from orbital.domain.schedule import ScheduleError, compute_next_run_ms, validate_schedule
from orbital.errors import ConflictError
from orbital.store.contention import retrying
from orbital.store.cron_jobs import (
    CRON_LIST_DEFAULT,
    CRON_LIST_MAX,
    CRON_OFFSET_MAX,
    CRON_RUNS_LIST_MAX,
    CronRepo,
    cron_job_enabled,
    cron_next_run_reached,
    cron_running_since,
)

if TYPE_CHECKING:
    from orbital.ports.services import Services

DEFAULT_MAX_JOBS = 200
DEFAULT_MAX_RUNS_PER_JOB_HISTORY = 200
DEFAULT_MAX_CONCURRENT_RUNS = 4

RUNNING_STALE_MS = 60 * 60 * 1000
"""A running marker this old (no Lambda lives that long) is presumed left behind by a run that crashed."""
BACKOFF_BASE_MS = 30_000
BACKOFF_MAX_MS = 60 * 60 * 1000
MAX_JOB_ID_LENGTH = 200
"""Longer ids cannot name a job (ours are UUIDs); they are unknown without asking the table."""
_WRITE_ATTEMPTS = 8

RunStatus = Literal["ok", "error", "skipped", "running"]
_STATUSES = ("ok", "error", "skipped", "running")
"""`running`: the executor started something that ends later (an agent run); it reports the real outcome with
`complete` when it ends (fix F9: a record is never "ok" for a run that was only queued). `run` answers such a run
with GSV's `ok`."""
_TASK_SPEC_FIELDS = ("model", "thinking", "timeoutSeconds", "deliver", "channel", "to", "bestEffortDeliver")


# --- settings ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CronSettings:
    enabled: bool
    max_jobs: int
    max_runs_per_job_history: int
    max_concurrent_runs: int


def _limit_setting(value: Any, default: int) -> int:
    """A numeric setting floored, at least 1; anything that is not a finite number uses the default."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return default
    return max(1, math.floor(value))


def cron_settings(config: Mapping[str, Any]) -> CronSettings:
    section = config.get("cron")
    cron = section if isinstance(section, dict) else {}
    return CronSettings(
        enabled=cron.get("enabled", True) is not False,
        max_jobs=_limit_setting(cron.get("maxJobs"), DEFAULT_MAX_JOBS),
        max_runs_per_job_history=_limit_setting(cron.get("maxRunsPerJobHistory"), DEFAULT_MAX_RUNS_PER_JOB_HISTORY),
        max_concurrent_runs=_limit_setting(cron.get("maxConcurrentRuns"), DEFAULT_MAX_CONCURRENT_RUNS),
    )


def int_param(value: Any, default: int, low: int, high: int) -> int:
    """A paging param floored into [low, high]; a missing or non-numeric value uses the default."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return default
    return max(low, min(high, math.floor(value)))


def _settings(services: Services) -> CronSettings:
    return cron_settings(services.config.effective())


# --- errors and outcomes -------------------------------------------------------------------------------------


class CronError(ValueError):
    """A cron request that cannot be done; `message` is GSV's text, `code` the RPC error code to answer with."""

    def __init__(self, message: str, *, code: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def _unknown(job_id: Any) -> CronError:
    return CronError(f"Unknown cron job id: {job_id}", code=404)


_P = ParamSpec("_P")
_R = TypeVar("_R")


def cron_errors(func: Callable[_P, _R]) -> Callable[_P, _R]:
    """Schedule problems surface as CronError, so callers handle one error type."""

    @functools.wraps(func)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return func(*args, **kwargs)
        except ScheduleError as exc:
            raise CronError(str(exc)) from exc

    return wrapper


@dataclass(frozen=True)
class RunOutcome:
    """What executing a job came to, as the executor reports it."""

    status: RunStatus
    error: str | None = None
    summary: str | None = None
    session_key: str | None = None
    """The session the run's agent turn ran in (Orbital: a run's record links to its transcript)."""


Executor = Callable[[dict[str, Any]], RunOutcome]
"""Runs one job (a `CronJob` dict, already claimed) and reports the outcome; may raise (recorded as `error`)."""


# --- job fields ------------------------------------------------------------------------------------------------


def _stored_schedule(schedule: Mapping[str, Any]) -> dict[str, Any]:
    """Only the fields of the schedule's kind (the row GSV stores has no room for others)."""
    kind = schedule["kind"]
    if kind == "at":
        return {"kind": "at", "atMs": schedule["atMs"]}
    if kind == "every":
        out = {"kind": "every", "everyMs": schedule["everyMs"]}
        if schedule.get("anchorMs") is not None:
            out["anchorMs"] = schedule["anchorMs"]
        return out
    out = {"kind": "cron", "expr": schedule["expr"]}
    if schedule.get("tz"):
        out["tz"] = schedule["tz"]
    return out


def _blank(value: Any) -> bool:
    return not isinstance(value, str) or not value.strip()


def _checked_spec(spec: Any) -> dict[str, Any]:
    """The spec as stored: its mode's fields only, after GSV's checks."""
    if not isinstance(spec, Mapping):
        raise CronError("cron spec must be an object")
    mode = spec.get("mode")
    if mode == "systemEvent":
        if _blank(spec.get("text")):
            raise CronError("systemEvent spec requires non-empty text")
        return {"mode": "systemEvent", "text": spec["text"]}
    if mode == "task":
        if _blank(spec.get("message")):
            raise CronError("task spec requires non-empty message")
        out = {"mode": "task", "message": spec["message"]}
        out.update({k: spec[k] for k in _TASK_SPEC_FIELDS if spec.get(k) is not None})
        return out
    raise CronError(f"Unknown cron spec mode: {mode}")


def _merged_spec(current: Mapping[str, Any], patch: Any) -> dict[str, Any]:
    """A patch of the same mode overrides the fields it gives; a new mode needs a complete spec."""
    if not isinstance(patch, Mapping):
        raise CronError("cron spec must be an object")
    mode = patch.get("mode")
    if mode is None or mode == current.get("mode"):
        return {**current, **{k: v for k, v in patch.items() if v is not None}}
    if mode == "systemEvent" and _blank(patch.get("text")):
        raise CronError('cron spec mode="systemEvent" requires text')
    if mode == "task" and _blank(patch.get("message")):
        raise CronError('cron spec mode="task" requires message')
    return dict(patch)


def _name(value: Any) -> str:
    if _blank(value):
        raise CronError("Cron job name is required")
    return str(value).strip()


def _set_or_drop(target: dict[str, Any], key: str, value: Any) -> None:
    if value is None:
        target.pop(key, None)
    else:
        target[key] = value


def spend_limit(value: Any) -> float | None:
    """A job's `spendLimitUsd`: a positive number of dollars (its spend per day, ADR 0044); null or 0 removes it."""
    if value is None or value == 0:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise CronError("spendLimitUsd must be a positive number of US dollars (or null for none)")
    return float(value)


def _job_id(value: Any) -> str | None:
    """A usable job id, or None for anything that cannot name a job."""
    if isinstance(value, str) and 0 < len(value) <= MAX_JOB_ID_LENGTH:
        return value
    return None


# --- add / update / remove -------------------------------------------------------------------------------------


@cron_errors
def add(services: Services, job_input: Mapping[str, Any], now_ms: int) -> dict[str, Any]:
    """Create a job (§11.3 add) and return it. The schedule is taken as given (`{kind, atMs|everyMs|expr, …}`)."""
    settings = _settings(services)
    repo = services.cron
    if repo.count_jobs() >= settings.max_jobs:
        raise CronError(f"Cron job limit reached ({settings.max_jobs})")
    schedule = job_input.get("schedule")
    validate_schedule(schedule)
    assert isinstance(schedule, Mapping)
    agent_id = normalize_agent_id(job_input.get("agentId") if isinstance(job_input.get("agentId"), str) else None)
    name = _name(job_input.get("name"))
    description = job_input.get("description")
    enabled = job_input.get("enabled") is not False
    spec = _checked_spec(job_input.get("spec"))
    job: dict[str, Any] = {"id": str(uuid.uuid4()), "agentId": agent_id, "name": name}
    if not _blank(description):
        job["description"] = str(description).strip()
    job["enabled"] = enabled
    if job_input.get("deleteAfterRun") is True:
        job["deleteAfterRun"] = True
    limit = spend_limit(job_input.get("spendLimitUsd"))
    if limit is not None:
        job["spendLimitUsd"] = limit
    job.update(
        {
            "createdAtMs": now_ms,
            "updatedAtMs": now_ms,
            "schedule": _stored_schedule(schedule),
            "spec": spec,
            "state": {},
        }
    )
    if enabled:
        _set_or_drop(job["state"], "nextRunAtMs", compute_next_run_ms(job["schedule"], now_ms))
    repo.put_job(job, create=True)
    return job


PREVIEW_DEFAULT = 5
PREVIEW_MAX = 20


@cron_errors
def preview(schedule: Any, now_ms: int, count: int = PREVIEW_DEFAULT) -> list[int]:
    """The next `count` times a job with `schedule` would run, seen from `now_ms`, as `add` would compute them: an
    `at` schedule gives its one instant (none once it has passed), a cron pattern stops where it has no match within
    366 days. Raises CronError with `add`'s message for a schedule `add` refuses."""
    validate_schedule(schedule)
    stored = _stored_schedule(schedule)
    if stored["kind"] == "at":
        at = compute_next_run_ms(stored, now_ms)
        return [at] if at is not None and at > now_ms else []
    if stored["kind"] == "every" and stored.get("anchorMs") is None:
        stored["anchorMs"] = now_ms  # a job made now counts its intervals from now
    runs: list[int] = []
    after = now_ms
    while len(runs) < count:
        following = compute_next_run_ms(stored, after)
        if following is None:
            break
        runs.append(following)
        after = following
    return runs


def _apply_patch(job: dict[str, Any], patch: Mapping[str, Any], now_ms: int) -> dict[str, Any]:
    updated = copy.deepcopy(job)
    state = updated.setdefault("state", {})
    if patch.get("schedule") is not None:
        validate_schedule(patch["schedule"])
        updated["schedule"] = _stored_schedule(patch["schedule"])
    if "name" in patch and patch["name"] is not None:
        updated["name"] = _name(patch["name"])
    if "description" in patch:
        description = patch["description"]
        _set_or_drop(updated, "description", None if _blank(description) else str(description).strip())
    if isinstance(patch.get("agentId"), str):
        updated["agentId"] = normalize_agent_id(patch["agentId"])
    if patch.get("enabled") is not None:
        updated["enabled"] = bool(patch["enabled"])
        if not updated["enabled"]:
            state.pop("runningAtMs", None)
    if patch.get("deleteAfterRun") is not None:
        _set_or_drop(updated, "deleteAfterRun", True if patch["deleteAfterRun"] is True else None)
    if "spendLimitUsd" in patch:
        _set_or_drop(updated, "spendLimitUsd", spend_limit(patch["spendLimitUsd"]))
    if patch.get("spec") is not None:
        updated["spec"] = _merged_spec(updated.get("spec") or {}, patch["spec"])
    updated["spec"] = _checked_spec(updated.get("spec"))
    updated["updatedAtMs"] = now_ms
    state.pop("consecutiveFailures", None)
    next_run = compute_next_run_ms(updated["schedule"], now_ms) if cron_job_enabled(updated) else None
    _set_or_drop(state, "nextRunAtMs", next_run)
    return updated


@cron_errors
def update(services: Services, job_id: Any, patch: Any, now_ms: int) -> dict[str, Any]:
    """Apply a patch (§11.3 update) and return the job; the next run is recomputed from now."""
    repo = services.cron
    key = _job_id(job_id)

    def attempt() -> dict[str, Any]:  # a run that started or finished meanwhile: the patch goes on what it left
        found = repo.get_job_versioned(key) if key else None
        if found is None:
            raise _unknown(job_id)
        if not isinstance(patch, Mapping):
            raise CronError("patch must be an object")
        job, version = found
        updated = _apply_patch(job, patch, now_ms)
        repo.put_job(updated, expect_version=version)
        return updated

    return retrying("cron job", attempt)


def remove(services: Services, job_id: Any) -> bool:
    """Delete a job and its run history; whether it existed."""
    key = _job_id(job_id)
    return services.cron.delete_job(key) if key else False


# --- reads -------------------------------------------------------------------------------------------------------


def list_jobs(
    services: Services,
    *,
    agent_id: Any = None,
    include_disabled: Any = None,
    limit: Any = None,
    offset: Any = None,
) -> dict[str, Any]:
    """`{jobs, count}`: jobs due soonest first (§11.3 list); loosely typed params fall back to the defaults."""
    jobs, count = services.cron.list_jobs(
        agent_id=agent_id if isinstance(agent_id, str) and agent_id else None,
        include_disabled=include_disabled is not False,
        limit=int_param(limit, CRON_LIST_DEFAULT, 1, CRON_LIST_MAX),
        offset=int_param(offset, 0, 0, CRON_OFFSET_MAX),
    )
    return {"jobs": jobs, "count": count}


def runs(services: Services, *, job_id: Any = None, limit: Any = None, offset: Any = None) -> dict[str, Any]:
    """`{runs, count}`: run records newest first, optionally of one job."""
    key: str | None = None
    if isinstance(job_id, str) and job_id:
        key = _job_id(job_id)
        if key is None:
            return {"runs": [], "count": 0}
    found, count = services.cron.list_runs(
        job_id=key,
        limit=int_param(limit, CRON_LIST_DEFAULT, 1, CRON_RUNS_LIST_MAX),
        offset=int_param(offset, 0, 0, CRON_OFFSET_MAX),
    )
    return {"runs": found, "count": count}


def status(services: Services, now_ms: int, *, agent_id: str | None = None) -> dict[str, Any]:
    """The scheduler summary of `cron.status`; with `agent_id`, counted over that agent's jobs only."""
    settings = _settings(services)
    counts = services.cron.status(now_ms, agent_id=agent_id)
    out: dict[str, Any] = {
        "enabled": settings.enabled,
        "count": counts["count"],
        "dueCount": counts["dueCount"],
        "runningCount": counts["runningCount"],
    }
    if "nextRunAtMs" in counts:
        out["nextRunAtMs"] = counts["nextRunAtMs"]
    out["maxJobs"] = settings.max_jobs
    out["maxConcurrentRuns"] = settings.max_concurrent_runs
    return out


# --- running -----------------------------------------------------------------------------------------------------


def backoff_ms(consecutive_failures: int) -> int:
    """How far the next run is pushed back after n errors in a row: 30 s, 1 min, 2 min, … at most 1 h."""
    if consecutive_failures <= 0:
        return 0
    return min(BACKOFF_MAX_MS, BACKOFF_BASE_MS * 2 ** min(consecutive_failures - 1, 20))


def _stale_after_ms(job: Mapping[str, Any]) -> int:
    spec = job.get("spec")
    timeout = spec.get("timeoutSeconds") if isinstance(spec, Mapping) else None
    if not isinstance(timeout, bool) and isinstance(timeout, int | float) and math.isfinite(timeout) and timeout > 0:
        return max(RUNNING_STALE_MS, math.ceil(timeout * 2000))
    return RUNNING_STALE_MS


def _running(job: dict[str, Any], now_ms: int) -> bool:
    """Marked running by a run that may still be going: a marker too old to be live does not count, unless the run
    was seen alive since (`runningCheckedAtMs`, see `touch_running`)."""
    since = cron_running_since(job)
    if since is None:
        return False
    state = job.get("state")
    checked = state.get("runningCheckedAtMs") if isinstance(state, dict) else None
    if isinstance(checked, int | float) and not isinstance(checked, bool):
        since = max(since, checked)
    return now_ms - since < _stale_after_ms(job)


def _due(job: dict[str, Any], now_ms: int) -> bool:
    return cron_next_run_reached(job, now_ms) and not _running(job, now_ms)


def _claim(repo: CronRepo, job_id: str, start_ms: int, *, due_only: bool) -> dict[str, Any] | str | None:
    """Mark the job running with a write conditional on the version just read. Returns the claimed job; None when it
    is gone, not due (due_only), or another runner got there first; "running" when a forced run finds it busy."""
    for _ in range(_WRITE_ATTEMPTS):
        found = repo.get_job_versioned(job_id)
        if found is None:
            return None
        job, version = found
        if due_only and not _due(job, start_ms):
            return None
        if not due_only and _running(job, start_ms):
            return "running"
        claimed = copy.deepcopy(job)
        claimed.setdefault("state", {})["runningAtMs"] = start_ms
        try:
            repo.put_job(claimed, expect_version=version)
        except ConflictError:
            continue  # changed since read: look again (a rival claim shows as running, or no longer due)
        return claimed
    return None


def _skip_reason(job: dict[str, Any], *, forced: bool, settings: CronSettings) -> str | None:
    if not forced and not cron_job_enabled(job):
        return "job disabled"
    if not forced and not settings.enabled:
        return "cron scheduler disabled"
    spec = job.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    if spec.get("mode") == "systemEvent" and _blank(spec.get("text")):
        return "systemEvent spec text is empty"
    if spec.get("mode") == "task" and _blank(spec.get("message")):
        return "task spec message is empty"
    return None


def _execute(job: dict[str, Any], execute: Executor) -> RunOutcome:
    spec = job.get("spec")
    mode = spec.get("mode") if isinstance(spec, Mapping) else None
    if mode not in ("systemEvent", "task"):
        return RunOutcome("error", f"Unknown cron spec mode: {mode}")
    try:
        outcome = execute(job)
    except Exception as exc:
        return RunOutcome("error", str(exc) or type(exc).__name__)
    if not isinstance(outcome, RunOutcome) or outcome.status not in _STATUSES:
        return RunOutcome("error", "cron executor returned no valid outcome")
    return outcome


def _finished_job(
    job: dict[str, Any], outcome: RunOutcome, start_ms: int, end_ms: int, duration_ms: int, marker: int | None = None
) -> tuple[dict[str, Any] | None, int | None]:
    """The job after a run (None: delete it) and its next run. With `marker` (a run that ended later), the running
    marker is cleared only if it is still that run's: a newer claim keeps its own."""
    done = copy.deepcopy(job)
    state = done.setdefault("state", {})
    if marker is None or state.get("runningAtMs") == marker:
        state.pop("runningAtMs", None)
        state.pop("runningCheckedAtMs", None)
    state["lastRunAtMs"] = start_ms
    state["lastStatus"] = outcome.status
    _set_or_drop(state, "lastError", outcome.error)
    state["lastDurationMs"] = duration_ms
    failures = int(state.get("consecutiveFailures") or 0)
    if outcome.status == "error":
        failures += 1
    elif outcome.status == "ok":
        failures = 0
    _set_or_drop(state, "consecutiveFailures", failures or None)
    schedule = done.get("schedule")
    if isinstance(schedule, Mapping) and schedule.get("kind") == "at":
        if outcome.status == "ok" and done.get("deleteAfterRun") is True:
            return None, None
        done["enabled"] = False
        state.pop("nextRunAtMs", None)
        return done, None
    next_run: int | None = None
    if cron_job_enabled(done):
        try:
            next_run = compute_next_run_ms(schedule, end_ms)
        except ScheduleError:
            next_run = None  # a stored schedule no longer valid (edited by hand): never due again
        if next_run is not None and outcome.status == "error":
            next_run += backoff_ms(failures)
    _set_or_drop(state, "nextRunAtMs", next_run)
    return done, next_run


def _finish(
    repo: CronRepo,
    job_id: str,
    outcome: RunOutcome,
    start_ms: int,
    duration_ms: int,
    settings: CronSettings,
    marker: int | None = None,
) -> dict[str, Any]:
    end_ms = start_ms + duration_ms
    result: dict[str, Any] = {"jobId": job_id, "status": outcome.status}
    if outcome.error is not None:
        result["error"] = outcome.error
    if outcome.summary is not None:
        result["summary"] = outcome.summary
    if outcome.session_key is not None:
        result["sessionKey"] = outcome.session_key
    result["durationMs"] = duration_ms

    def attempt() -> tuple[bool, int | None]:  # edited during the run: finish on top of the edit
        found = repo.get_job_versioned(job_id)
        if found is None:
            return False, None  # removed while it ran: nothing to update, no history to add to
        job, version = found
        done, next_run = _finished_job(job, outcome, start_ms, end_ms, duration_ms, marker)
        if done is None:
            repo.delete_job(job_id, with_runs=False)
        else:
            repo.put_job(done, expect_version=version)
        return True, next_run

    recorded, next_run = retrying("cron job", attempt, message=f"could not record the run of cron job {job_id}")
    if not recorded:
        return result
    if next_run is not None:
        result["nextRunAtMs"] = next_run
    repo.append_run({**result, "ts": start_ms}, keep=settings.max_runs_per_job_history)
    return result


def _run_claimed(
    repo: CronRepo,
    job: dict[str, Any],
    start_ms: int,
    *,
    forced: bool,
    settings: CronSettings,
    execute: Executor,
    monotonic: Callable[[], float],
) -> dict[str, Any]:
    began = monotonic()
    reason = _skip_reason(job, forced=forced, settings=settings)
    outcome = RunOutcome("skipped", reason) if reason else _execute(job, execute)
    duration_ms = max(0, round((monotonic() - began) * 1000))
    if outcome.status == "running":  # recorded by `complete` when it ends; the job stays marked running
        # answered as GSV does for a run that started (F9 keeps the real outcome for the record)
        started: dict[str, Any] = {"jobId": str(job["id"]), "status": "ok", "startedAtMs": start_ms}
        if outcome.summary is not None:
            started["summary"] = outcome.summary
        started["durationMs"] = duration_ms
        return started
    return _finish(repo, str(job["id"]), outcome, start_ms, duration_ms, settings)


@cron_errors
def complete(
    services: Services,
    job_id: str,
    outcome: RunOutcome,
    *,
    started_ms: int,
    ended_ms: int,
) -> dict[str, Any]:
    """Record the end of a run the executor reported as `running`: state, history and next run, as for a run that
    ended at once (duration = ended - started). `started_ms` is the run's claim: the running marker is cleared only
    if it is still that one."""
    if outcome.status not in ("ok", "error", "skipped"):
        raise CronError(f"not a final run status: {outcome.status}")
    duration = max(0, ended_ms - started_ms)
    return _finish(services.cron, job_id, outcome, started_ms, duration, _settings(services), marker=started_ms)


def touch_running(services: Services, job_id: str, started_ms: int, now_ms: int) -> bool:
    """The run claimed at `started_ms` is still going: note it (`runningCheckedAtMs`) so the job's marker does not go
    stale however long the run takes. False when the job is gone or no longer marked by that run."""
    repo = services.cron
    for _ in range(_WRITE_ATTEMPTS):
        found = repo.get_job_versioned(job_id)
        if found is None:
            return False
        job, version = found
        state = job.get("state")
        if not isinstance(state, dict) or state.get("runningAtMs") != started_ms:
            return False
        touched = copy.deepcopy(job)
        touched["state"]["runningCheckedAtMs"] = now_ms
        try:
            repo.put_job(touched, expect_version=version)
        except ConflictError:
            continue
        return True
    return False


@cron_errors
def run(
    services: Services,
    *,
    job_id: Any = None,
    mode: Any = "due",
    now_ms: int,
    execute: Executor,
    monotonic: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """Run jobs (§11.3 run) and return `{ran, results}`.

    Without `job_id`: the due jobs (enabled, next run reached, not running), soonest first, at most
    `cron.maxConcurrentRuns` of them, one after another; nothing while the scheduler is disabled. With `job_id`:
    that job, if due, or whatever its state with `mode="force"` (any other mode means due). Each job starts at
    `now_ms` plus the time the previous ones took (measured with `monotonic`, seconds). A run the executor started
    (`running`) is answered `ok`, as GSV does; its record comes when it ends."""
    settings = _settings(services)
    repo = services.cron
    forced = mode == "force"
    began = monotonic()

    def start_ms() -> int:
        return now_ms + max(0, round((monotonic() - began) * 1000))

    results: list[dict[str, Any]] = []
    if job_id is None or job_id == "":
        if forced:
            raise CronError("cron.run with mode=force requires id")
        if not settings.enabled:
            return {"ran": 0, "results": []}
        candidates = [j for j in repo.due_jobs(now_ms, include_running=True) if _due(j, now_ms)]
        if not candidates:
            return {"ran": 0, "results": []}
        # runs outlive the call that starts them (agent runs): the limit counts the ones still going
        busy = sum(1 for j in repo.jobs() if _running(j, now_ms))
        for candidate in candidates[: max(0, settings.max_concurrent_runs - busy)]:
            start = start_ms()
            claimed = _claim(repo, str(candidate["id"]), start, due_only=True)
            if isinstance(claimed, dict):
                results.append(
                    _run_claimed(
                        repo, claimed, start, forced=False, settings=settings, execute=execute, monotonic=monotonic
                    )
                )
        return {"ran": len(results), "results": results}
    key = _job_id(job_id)
    if key is None or repo.get_job(key) is None:
        raise _unknown(job_id)
    start = start_ms()
    claimed = _claim(repo, key, start, due_only=not forced)
    if claimed == "running":
        results.append({"jobId": key, "status": "skipped", "error": "job is already running", "durationMs": 0})
    elif isinstance(claimed, dict):
        results.append(
            _run_claimed(repo, claimed, start, forced=forced, settings=settings, execute=execute, monotonic=monotonic)
        )
    return {"ran": len(results), "results": results}
