"""The gsv__Cron tool (spec §8.4) over the cron service (`orbital.engines.cron`).

Its entry point is `execute_tool`; it returns the tool's result object and raises `CronError` with the text the model
should read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orbital.domain import cron_input, timefmt
from orbital.domain.ids import normalize_agent_id
from orbital.engines.cron import CronError, Executor, add, cron_errors, list_jobs, remove, run, runs, status, update

if TYPE_CHECKING:
    from orbital.ports.services import Services


def _with_human_times(job: dict[str, Any], tz: str) -> dict[str, Any]:
    out = {**job, "scheduleHuman": timefmt.schedule_human(job.get("schedule") or {}, tz)}
    state = job.get("state")
    state = state if isinstance(state, dict) else {}
    if state.get("nextRunAtMs") is not None:
        out["nextRunHuman"] = timefmt.format_time_full(state["nextRunAtMs"], tz)
    if state.get("lastRunAtMs") is not None:
        out["lastRunHuman"] = timefmt.format_time_full(state["lastRunAtMs"], tz)
    return out


def _text(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


@cron_errors
def execute_tool(
    services: Services,
    args: Any,
    *,
    agent_id: str,
    user_tz: Any,
    now_ms: int,
    execute: Executor,
) -> dict[str, Any]:
    """The gsv__Cron tool (§8.4): `action` status | list | add | update | remove | run | runs (default status).

    Returns the tool's result object; raises CronError with the message the model reads. Times in results and in
    the schedule input are in `user_tz`. A job added without an `agentId` belongs to the calling agent."""
    params = args if isinstance(args, dict) else {}
    action = str(params.get("action") or "status").strip().lower()
    tz = timefmt.resolve_timezone(user_tz)
    current = timefmt.format_time_full(now_ms, tz)
    filter_agent = _text(params.get("agentId"))
    if action == "status":
        agent = normalize_agent_id(filter_agent) if filter_agent else None
        return {**status(services, now_ms, agent_id=agent), "currentTime": current, "timezone": tz}
    if action == "list":
        listed = list_jobs(
            services,
            agent_id=normalize_agent_id(filter_agent) if filter_agent else None,
            include_disabled=params.get("includeDisabled"),
            limit=params.get("limit"),
            offset=params.get("offset"),
        )
        jobs = [_with_human_times(job, tz) for job in listed["jobs"]]
        return {"jobs": jobs, "count": listed["count"], "timezone": tz, "currentTime": current}
    if action == "add":
        raw = params["job"] if isinstance(params.get("job"), dict) else params
        job_input = cron_input.normalize_job_input(raw, tz, now_ms)
        job_input.pop("spendLimitUsd", None)  # a job's spend limit is the owner's to set (cron.add), not the model's
        if not _text(job_input.get("agentId")):
            job_input["agentId"] = filter_agent or agent_id
        return {"ok": True, "job": add(services, job_input, now_ms)}
    if action == "update":
        job_id = _text(params.get("id"))
        if job_id is None:
            raise CronError("cron update requires id")
        patch = cron_input.normalize_patch_input(params.get("patch"), tz, now_ms)
        patch.pop("spendLimitUsd", None)  # nor may the model lift or change it (cron.update is the owner's)
        return {"ok": True, "job": update(services, job_id, patch, now_ms)}
    if action == "remove":
        job_id = _text(params.get("id"))
        if job_id is None:
            raise CronError("cron remove requires id")
        return {"ok": True, "removed": remove(services, job_id)}
    if action == "run":
        mode = "force" if str(params.get("mode") or "").strip().lower() == "force" else "due"
        ran = run(services, job_id=_text(params.get("id")), mode=mode, now_ms=now_ms, execute=execute)
        return {"ok": True, **ran}
    if action == "runs":
        return runs(services, job_id=_text(params.get("jobId")), limit=params.get("limit"), offset=params.get("offset"))
    raise CronError(f"Unknown cron action: {action}")
