"""Methods of the `cron` family: scheduled jobs (spec §11).

`cron.status` summarizes every job against the `cron.*` settings; `cron.list` pages through jobs with the ones that
run next first; `cron.add` / `cron.update` / `cron.remove` / `cron.runs` go through the cron service
(`orbital.engines.cron`), which owns the rules. `cron.run` runs jobs now: each run is an agent run
(`orbital.agent.cron_runs`), recorded when it ends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from pydantic import WithJsonSchema

from orbital.agent import cron_runs as job_runs  # `cron_runs` is the `cron.runs` handler below
from orbital.domain import roles
from orbital.engines import cron as engine
from orbital.engines.cron import int_param
from orbital.errors import RpcError
from orbital.protocol.frames import fit
from orbital.protocol.params import Count, Flag, GivenCount, GivenFlag, GivenObject, GivenText, Text
from orbital.protocol.registry import CLIENT, NoParams, Params, Result, Router

if TYPE_CHECKING:
    from orbital.protocol.context import CallContext

router = Router("cron")
router.on_run_ended(job_runs.run_ended)  # a job's run is recorded when it ends
router.native_tool("gsv__Cron")(job_runs.tool)


class CronStatusResult(Result):
    enabled: bool
    count: int
    dueCount: int
    runningCount: int
    nextRunAtMs: int | float | None = None
    maxJobs: int
    maxConcurrentRuns: int


class CronListParams(Params):
    # lenient: out-of-range or malformed values fall back to the defaults instead of failing the call
    agentId: Text = None
    includeDisabled: Flag = None
    limit: Count = None
    offset: Count = None


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
    spendLimitUsd: float | None = None
    """What the job may spend in USD per day (ADR 0044)."""
    createdAtMs: int | float
    updatedAtMs: int | float
    schedule: dict[str, Any]
    spec: dict[str, Any]
    state: CronJobState


class CronListResult(Result):
    jobs: list[CronJob]
    count: int
    truncated: bool | None = None


@router.method("cron.status", params=NoParams, result=CronStatusResult, modes=CLIENT, scope=roles.READ)
def cron_status(ctx: CallContext, params: NoParams) -> dict[str, Any]:
    """Scheduler summary: whether cron is enabled, how many jobs exist, are due and are running, the earliest next
    run of an enabled job, and the `maxJobs` / `maxConcurrentRuns` limits."""
    return engine.status(ctx.services, ctx.now_ms())


@router.method("cron.list", params=CronListParams, result=CronListResult, modes=CLIENT, scope=roles.READ)
def cron_list(ctx: CallContext, params: CronListParams) -> dict[str, Any]:
    """Jobs, those with a next run first (earliest first, then oldest), the rest last. Filters: `agentId` (exact),
    `includeDisabled` (default true). Paging: `limit` 1-500 (default 200), `offset`. `count` is the filtered
    total. A page that would not fit one WebSocket message (96 KB of JSON) is cut short with `truncated: true`: ask
    for the next page from `offset` + the number returned."""
    listed = engine.list_jobs(
        ctx.services,
        agent_id=params.agentId or None,
        include_disabled=params.includeDisabled,
        limit=params.limit,
        offset=params.offset,
    )
    return _page(listed, "jobs")


def _page(result: dict[str, Any], field: str) -> dict[str, Any]:
    """`result` with its list `field` cut to what fits one WebSocket message, marked `truncated`."""
    items, truncated = fit(result[field])
    if truncated:
        return {**result, field: items, "truncated": True}
    return result


# --- job changes and run history (the cron service) ---------------------------------------------------------------


def _service_error(exc: engine.CronError) -> RpcError:
    return RpcError(exc.message, code=exc.code)


class CronAddParams(Params):
    # passed on as given: the service checks each field and answers with GSV's message
    name: GivenText = None
    description: GivenText = None
    agentId: GivenText = None
    enabled: GivenFlag = None
    deleteAfterRun: GivenFlag = None
    spendLimitUsd: Annotated[Any, WithJsonSchema({"type": "number"})] = None
    schedule: GivenObject = None
    spec: GivenObject = None


class CronUpdateParams(Params):
    id: GivenText = None
    patch: GivenObject = None


class CronRemoveParams(Params):
    id: GivenText = None


class CronRunsParams(Params):
    jobId: GivenText = None
    limit: GivenCount = None
    offset: GivenCount = None


class CronJobResult(Result):
    ok: bool
    job: CronJob


class CronRemoveResult(Result):
    ok: bool
    removed: bool


class CronRun(Result):
    id: int
    jobId: str
    ts: int | float
    status: str
    error: str | None = None
    summary: str | None = None
    sessionKey: str | None = None
    durationMs: int | float | None = None
    nextRunAtMs: int | float | None = None


class CronRunsResult(Result):
    runs: list[CronRun]
    count: int
    truncated: bool | None = None


@router.method("cron.add", params=CronAddParams, result=CronJobResult, modes=CLIENT, scope=roles.OPERATE)
def cron_add(ctx: CallContext, params: CronAddParams) -> dict[str, Any]:
    """Create a job from `{name, schedule, spec, description?, agentId?, enabled?, deleteAfterRun?}`. The schedule is
    stored as given: `{kind:"at", atMs}`, `{kind:"every", everyMs, anchorMs?}` or `{kind:"cron", expr, tz?}`."""
    if not params.name or not params.schedule or not params.spec:
        raise RpcError("name, schedule, and spec are required", code=400)
    job_input = {name: getattr(params, name) for name in params.model_fields_set}
    try:
        return {"ok": True, "job": engine.add(ctx.services, job_input, ctx.now_ms())}
    except engine.CronError as exc:
        raise _service_error(exc) from None


@router.method("cron.update", params=CronUpdateParams, result=CronJobResult, modes=CLIENT, scope=roles.OPERATE)
def cron_update(ctx: CallContext, params: CronUpdateParams) -> dict[str, Any]:
    """Apply `patch` (any job fields; a spec of the same mode is merged field by field) to job `id`; the next run
    is recomputed from now."""
    if not params.id or not params.patch:
        raise RpcError("id and patch are required", code=400)
    try:
        return {"ok": True, "job": engine.update(ctx.services, params.id, params.patch, ctx.now_ms())}
    except engine.CronError as exc:
        raise _service_error(exc) from None


@router.method("cron.remove", params=CronRemoveParams, result=CronRemoveResult, modes=CLIENT, scope=roles.OPERATE)
def cron_remove(ctx: CallContext, params: CronRemoveParams) -> dict[str, Any]:
    """Delete job `id` and its run history; `removed` says whether it existed."""
    if not params.id:
        raise RpcError("id is required", code=400)
    return {"ok": True, "removed": engine.remove(ctx.services, params.id)}


@router.method("cron.runs", params=CronRunsParams, result=CronRunsResult, modes=CLIENT, scope=roles.READ)
def cron_runs(ctx: CallContext, params: CronRunsParams) -> dict[str, Any]:
    """Run records, newest first, optionally of one `jobId`. Paging: `limit` 1-2000 (default 200), `offset`. A page
    that would not fit one WebSocket message is cut short with `truncated: true`, like `cron.list`. A run of the
    agent names the session it ran in (`sessionKey`, Orbital)."""
    return _page(engine.runs(ctx.services, job_id=params.jobId, limit=params.limit, offset=params.offset), "runs")


class CronPreviewParams(Params):
    schedule: GivenObject = None
    count: GivenCount = None


class CronPreviewResult(Result):
    nextRunsMs: list[int]


@router.method(
    "cron.preview", params=CronPreviewParams, result=CronPreviewResult, reads_only=True, modes=CLIENT, scope=roles.READ
)
def cron_preview(ctx: CallContext, params: CronPreviewParams) -> dict[str, Any]:
    """When a job with `schedule` would run (Orbital; a schedule builder's preview): its next `count` run times
    (1-20, default 5) from now, in ms, as `cron.add` would compute them. An `at` schedule gives its one instant (none
    once it has passed); a cron pattern with no match within 366 days gives none. A schedule `cron.add` would refuse
    fails with the same message (400)."""
    if params.schedule is None:
        raise RpcError("schedule is required", code=400)
    count = int_param(params.count, engine.PREVIEW_DEFAULT, 1, engine.PREVIEW_MAX)
    try:
        return {"nextRunsMs": engine.preview(params.schedule, ctx.now_ms(), count)}
    except engine.CronError as exc:
        raise _service_error(exc) from None


class CronRunParams(Params):
    id: GivenText = None
    mode: Annotated[Any, WithJsonSchema({"type": "string", "enum": ["due", "force"]})] = None


class CronRunResultItem(Result):
    jobId: str
    status: str
    error: str | None = None
    summary: str | None = None
    durationMs: int | float | None = None
    startedAtMs: int | float | None = None
    nextRunAtMs: int | float | None = None


class CronRunResult(Result):
    ok: bool
    ran: int
    results: list[CronRunResultItem]


@router.method("cron.run", params=CronRunParams, result=CronRunResult, modes=CLIENT, scope=roles.OPERATE)
def cron_run(ctx: CallContext, params: CronRunParams) -> dict[str, Any]:
    """Run the due jobs now (`mode:"due"`, the default; at most `cron.maxConcurrentRuns`), or job `id` if due, or
    whatever its state with `mode:"force"`. A job whose agent run started answers `status:"ok"` as in GSV, with the
    time it took to start it (`durationMs`) and `startedAtMs`; its record (`cron.runs`) carries the run's real outcome
    (`ok`, `error` or `skipped`, with its duration) once it ends."""
    now = ctx.now_ms()
    try:
        out = engine.run(
            ctx.services,
            job_id=params.id,
            mode=params.mode or "due",
            now_ms=now,
            execute=job_runs.executor(ctx.services, now),
        )
    except engine.CronError as exc:
        raise _service_error(exc) from None
    return {"ok": True, **out}
