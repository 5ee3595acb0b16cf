"""Methods of the `cron` family: scheduled jobs (spec §11).

`cron.status` summarizes every job against the `cron.*` settings; `cron.list` pages through jobs with the ones that
run next first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import Field

from orbital.protocol.registry import NoParams, Params, Result, Router
from orbital.store.repos import CRON_LIST_DEFAULT, CRON_LIST_MAX, CRON_OFFSET_MAX

if TYPE_CHECKING:
    from orbital.protocol.context import CallContext

router = Router("cron")

DEFAULT_MAX_JOBS = 200
DEFAULT_MAX_RUNS_PER_JOB_HISTORY = 200
DEFAULT_MAX_CONCURRENT_RUNS = 4


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


def cron_settings(config: dict[str, Any]) -> CronSettings:
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


class CronStatusResult(Result):
    enabled: bool
    count: int
    dueCount: int
    runningCount: int
    nextRunAtMs: int | float | None = None
    maxJobs: int
    maxConcurrentRuns: int


class CronListParams(Params):
    # loosely typed: out-of-range or malformed values fall back to the defaults instead of failing the call
    agentId: Any = Field(default=None, json_schema_extra={"type": "string"})
    includeDisabled: Any = Field(default=None, json_schema_extra={"type": "boolean"})
    limit: Any = Field(default=None, json_schema_extra={"type": "integer"})
    offset: Any = Field(default=None, json_schema_extra={"type": "integer"})


class CronJobState(Result):
    nextRunAtMs: int | float | None = None
    runningAtMs: int | float | None = None
    lastRunAtMs: int | float | None = None
    lastStatus: str | None = None
    lastError: str | None = None
    lastDurationMs: int | float | None = None


class CronJob(Result):
    id: str
    agentId: str
    name: str
    description: str | None = None
    enabled: bool
    deleteAfterRun: bool | None = None
    createdAtMs: int | float
    updatedAtMs: int | float
    schedule: dict[str, Any]
    spec: dict[str, Any]
    state: CronJobState


class CronListResult(Result):
    jobs: list[CronJob]
    count: int


@router.method("cron.status", params=NoParams, result=CronStatusResult)
def cron_status(ctx: CallContext, params: NoParams) -> dict[str, Any]:
    """Scheduler summary: whether cron is enabled, how many jobs exist, are due and are running, the earliest next
    run of an enabled job, and the `maxJobs` / `maxConcurrentRuns` limits."""
    settings = cron_settings(ctx.config())
    counts = ctx.services.gateway.cron_status(ctx.now_ms())
    status: dict[str, Any] = {
        "enabled": settings.enabled,
        "count": counts["count"],
        "dueCount": counts["dueCount"],
        "runningCount": counts["runningCount"],
    }
    if "nextRunAtMs" in counts:
        status["nextRunAtMs"] = counts["nextRunAtMs"]
    status["maxJobs"] = settings.max_jobs
    status["maxConcurrentRuns"] = settings.max_concurrent_runs
    return status


@router.method("cron.list", params=CronListParams, result=CronListResult)
def cron_list(ctx: CallContext, params: CronListParams) -> dict[str, Any]:
    """Jobs, those with a next run first (earliest first, then oldest), the rest last. Filters: `agentId` (exact),
    `includeDisabled` (default true). Paging: `limit` 1-500 (default 200), `offset`. `count` is the filtered
    total."""
    agent_id = params.agentId if isinstance(params.agentId, str) and params.agentId else None
    jobs, count = ctx.services.gateway.list_cron_jobs(
        agent_id=agent_id,
        include_disabled=params.includeDisabled is not False,
        limit=int_param(params.limit, CRON_LIST_DEFAULT, 1, CRON_LIST_MAX),
        offset=int_param(params.offset, 0, 0, CRON_OFFSET_MAX),
    )
    return {"jobs": jobs, "count": count}
