"""Cron jobs and their run history (spec §11.3) in the single table.

Items hold the wire-shaped dicts the methods return (`CronJob`, `CronRun`), so a read is a plain load. Ids passed
here are already normalized by the caller; the rules of running a job are the cron service's
(`orbital.engines.cron`).

Jobs carry the version attribute `v` (`store.versions`) for optimistic updates, and sit on GSI1 (`CRONDUE`, ordered
by next run) while they are enabled and have a next run, so due jobs are found without reading every job. Runs are
kept per job (newest first by time, then id) and on GSI1 (`CRONRUNS`) for the gateway-wide history.
"""

from __future__ import annotations

import math
from typing import Any

from orbital.store import keys
from orbital.store.table import Table
from orbital.store.versions import next_version, version_of

CRON_LIST_MAX = 500
CRON_LIST_DEFAULT = 200
CRON_OFFSET_MAX = 1_000_000
CRON_RUNS_LIST_MAX = 2000


def _number(value: Any) -> float | int | None:
    """A finite number, or None (booleans and non-numbers are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def clamp(value: int, low: int, high: int) -> int:
    return max(low, min(high, value))


# --- cron job helpers (pure) ----------------------------------------------------------------------------------


def cron_job_enabled(job: dict[str, Any]) -> bool:
    return job.get("enabled") is not False


def cron_next_run(job: dict[str, Any]) -> float | int | None:
    state = job.get("state")
    return _number(state.get("nextRunAtMs")) if isinstance(state, dict) else None


def cron_running_since(job: dict[str, Any]) -> float | int | None:
    state = job.get("state")
    return _number(state.get("runningAtMs")) if isinstance(state, dict) else None


def cron_order_key(job: dict[str, Any]) -> tuple[int, float, float, str]:
    """Jobs with a next run first (earliest first, then oldest), jobs without one last (oldest first)."""
    next_run = cron_next_run(job)
    created = _number(job.get("createdAtMs")) or 0
    job_id = str(job.get("id", ""))
    if next_run is None:
        return (1, 0, created, job_id)
    return (0, next_run, created, job_id)


def cron_next_run_reached(job: dict[str, Any], now_ms: int) -> bool:
    """Enabled and its next run has come (whether or not it is running)."""
    next_run = cron_next_run(job)
    return cron_job_enabled(job) and next_run is not None and next_run <= now_ms


def cron_is_due(job: dict[str, Any], now_ms: int) -> bool:
    """Enabled, next run reached, not running."""
    next_run = cron_next_run(job)
    return cron_job_enabled(job) and next_run is not None and next_run <= now_ms and cron_running_since(job) is None


def cron_counts(jobs: list[dict[str, Any]], now_ms: int) -> dict[str, Any]:
    """Counts over `jobs`: `{count, dueCount, runningCount, nextRunAtMs?}` (earliest next run of an enabled job)."""
    next_runs = [n for n in (cron_next_run(j) for j in jobs if cron_job_enabled(j)) if n is not None]
    counts: dict[str, Any] = {
        "count": len(jobs),
        "dueCount": sum(1 for j in jobs if cron_is_due(j, now_ms)),
        "runningCount": sum(1 for j in jobs if cron_running_since(j) is not None),
    }
    if next_runs:
        counts["nextRunAtMs"] = min(next_runs)
    return counts


class CronRepo:
    def __init__(self, table: Table) -> None:
        self.table = table

    # --- jobs ---------------------------------------------------------------------------------------------------

    def put_job(self, job: dict[str, Any], *, create: bool = False, expect_version: int | None = None) -> int:
        """Store a `CronJob` and return its new version.

        `create` fails with ConflictError if the id exists; `expect_version` fails with ConflictError if the stored
        version differs (someone else changed the job since it was read)."""
        job_id = str(job["id"])
        key = keys.cron_job(job_id)
        version, condition = next_version(self.table, key, create=create, expect_version=expect_version)
        next_run = cron_next_run(job)
        gsi = None
        if cron_job_enabled(job) and next_run is not None:
            gsi = keys.cron_due(max(0, math.floor(next_run)), job_id)
        self.table.put(key, job, gsi=gsi, attrs={"v": version}, condition=condition)
        return version

    def get_job(self, job_id: str) -> dict[str, Any] | None:
        found = self.get_job_versioned(job_id)
        return found[0] if found else None

    def get_job_versioned(self, job_id: str) -> tuple[dict[str, Any], int] | None:
        rec = self.table.get(keys.cron_job(job_id))
        return (rec.data, version_of(rec)) if rec else None

    def delete_job(self, job_id: str, *, with_runs: bool = True) -> bool:
        """Remove a job (and, by default, its run history). Returns whether it existed."""
        old = self.table.delete(keys.cron_job(job_id), return_old=True)
        if with_runs:
            self.delete_runs(job_id)
        return old is not None

    def jobs(self) -> list[dict[str, Any]]:
        """Every cron job, unordered."""
        return [r.data for r in self.table.query(keys.CRON_PK) if r.sk.startswith(keys.CRON_JOB_PREFIX)]

    def count_jobs(self) -> int:
        return len(self.jobs())

    def list_jobs(
        self,
        *,
        agent_id: str | None = None,
        include_disabled: bool = True,
        limit: int = CRON_LIST_DEFAULT,
        offset: int = 0,
    ) -> tuple[list[dict[str, Any]], int]:
        """One page of jobs in listing order, and how many jobs match the filters in total."""
        jobs = [
            job
            for job in self.jobs()
            if (include_disabled or cron_job_enabled(job)) and (agent_id is None or job.get("agentId") == agent_id)
        ]
        jobs.sort(key=cron_order_key)
        start = clamp(offset, 0, CRON_OFFSET_MAX)
        size = clamp(limit, 1, CRON_LIST_MAX)
        return jobs[start : start + size], len(jobs)

    def due_jobs(self, now_ms: int, *, limit: int | None = None, include_running: bool = False) -> list[dict[str, Any]]:
        """Enabled jobs whose next run has come and that are not running, earliest first (then oldest).
        `include_running` keeps running ones too, for a caller that judges whether a running marker is stale."""
        # the index is sorted by next run time: read only the jobs whose time has come
        due = [r.data for r in self.table.query_index(keys.CRON_DUE_GSI_PK, sk_max=keys.cron_due_until(now_ms))]
        check = cron_next_run_reached if include_running else cron_is_due
        due = [job for job in due if check(job, now_ms)]
        due.sort(key=cron_order_key)
        return due if limit is None else due[: max(0, limit)]

    def status(self, now_ms: int, *, agent_id: str | None = None) -> dict[str, Any]:
        """Counts over every job, or over one agent's jobs (`cron_counts`); the next run is the earliest of an
        enabled job, whether or not the scheduler is enabled."""
        jobs = self.jobs()
        if agent_id is not None:
            jobs = [j for j in jobs if j.get("agentId") == agent_id]
        return cron_counts(jobs, now_ms)

    # --- run history --------------------------------------------------------------------------------------------

    def next_run_id(self) -> int:
        """A gateway-wide increasing run id."""
        return self.table.next_counter(keys.gateway_flag(keys.CRON_RUN_SEQ_FLAG))  # one atomic ADD, never a race

    def append_run(self, run: dict[str, Any], *, keep: int | None = None) -> dict[str, Any]:
        """Record a `CronRun` `{jobId, ts, status, error?, summary?, sessionKey?, durationMs?, nextRunAtMs?}`;
        assigns its `id`. With `keep`, the job's history is trimmed to its `keep` newest runs."""
        job_id = str(run["jobId"])
        ts = int(run["ts"])
        run_id = self.next_run_id()
        stored = {**run, "id": run_id, "jobId": job_id, "ts": ts}
        self.table.put(keys.cron_run(job_id, ts, run_id), stored, gsi=keys.cron_run_index(ts, run_id))
        if keep is not None:
            self.trim_runs(job_id, keep)
        return stored

    def trim_runs(self, job_id: str, keep: int) -> int:
        """Delete all but the `keep` newest runs of a job; returns how many were deleted."""
        recs = self.table.query(keys.cron_runs_pk(job_id), forward=False)
        doomed = recs[max(0, keep) :]
        if doomed:
            self.table.write_batch(deletes=[(r.pk, r.sk) for r in doomed])
        return len(doomed)

    def delete_runs(self, job_id: str) -> None:
        recs = self.table.query(keys.cron_runs_pk(job_id))
        if recs:
            self.table.write_batch(deletes=[(r.pk, r.sk) for r in recs])

    def list_runs(
        self, *, job_id: str | None = None, limit: int = CRON_LIST_DEFAULT, offset: int = 0
    ) -> tuple[list[dict[str, Any]], int]:
        """Runs newest first (by time, then id), one page of them, and the total."""
        if job_id is not None:
            runs = [r.data for r in self.table.query(keys.cron_runs_pk(job_id), forward=False)]
        else:
            runs = [r.data for r in self.table.query_index(keys.CRON_RUNS_GSI_PK)][::-1]
        start = clamp(offset, 0, CRON_OFFSET_MAX)
        size = clamp(limit, 1, CRON_RUNS_LIST_MAX)
        return runs[start : start + size], len(runs)
