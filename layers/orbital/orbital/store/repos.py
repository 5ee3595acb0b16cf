"""Gateway-wide state kept in the single table: pending pairings, heartbeat state, last-active contexts, cron jobs
and cron run history.

Items hold the wire-shaped dicts the methods return (`PendingPair`, heartbeat state, `CronJob`, `CronRun`), so a
read is a plain load. Ids passed to this repository are already normalized by the caller.

Heartbeat states and cron jobs carry a version attribute `v` for optimistic updates. Cron jobs also sit on GSI1
(`CRONDUE`, ordered by next run) while they are enabled and have a next run, so due jobs are found without reading
every job.
"""

from __future__ import annotations

import math
from typing import Any

from orbital.domain.pairing import pair_key
from orbital.errors import ConflictError
from orbital.store import conditions as cond
from orbital.store import keys
from orbital.store.table import Record, Table

HEARTBEAT_STATE_FIELDS = ("nextHeartbeatAt", "lastHeartbeatAt", "lastHeartbeatText", "lastHeartbeatSentAt")
"""Fields of a heartbeat state besides `agentId`; each is null until first set."""

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


class GatewayRepo:
    def __init__(self, table: Table) -> None:
        self.table = table

    # --- pending pairings ---------------------------------------------------------------------------------------

    def put_pair(self, pair: dict[str, Any], *, only_if_new: bool = True) -> bool:
        """Store a pending pairing `{channel, senderId, senderName?, requestedAt, firstMessage}`.

        With `only_if_new` an existing request is kept as it is and False is returned (repeats are silent)."""
        key = keys.pair(str(pair["channel"]), str(pair["senderId"]))
        try:
            self.table.put(key, pair, condition=cond.not_exists("PK") if only_if_new else None)
        except ConflictError:
            return False
        return True

    def get_pair(self, channel: str, sender_id: str) -> dict[str, Any] | None:
        rec = self.table.get(keys.pair(channel, sender_id))
        return rec.data if rec else None

    def pairs(self) -> dict[str, dict[str, Any]]:
        """Every pending pairing by `{channel}:{senderId}`."""
        out: dict[str, dict[str, Any]] = {}
        for rec in self.table.query(keys.PAIRS_PK):
            data = rec.data
            out[pair_key(str(data.get("channel", "")), data.get("senderId", ""))] = data
        return out

    def delete_pair(self, channel: str, sender_id: str) -> dict[str, Any] | None:
        """Remove a pending pairing; returns it, or None when there was none (so only one caller wins)."""
        old = self.table.delete(keys.pair(channel, sender_id), return_old=True)
        return old.data if old else None

    # --- heartbeat state ----------------------------------------------------------------------------------------

    @staticmethod
    def empty_heartbeat_state(agent_id: str) -> dict[str, Any]:
        return {"agentId": agent_id, **dict.fromkeys(HEARTBEAT_STATE_FIELDS)}

    def heartbeat_state(self, agent_id: str) -> dict[str, Any] | None:
        rec = self.table.get(keys.heartbeat(agent_id))
        return self._heartbeat_from(rec) if rec else None

    def heartbeat_states(self) -> dict[str, dict[str, Any]]:
        """Every agent's heartbeat state, by agent id (in agent id order)."""
        states = (self._heartbeat_from(rec) for rec in self.table.query(keys.HEARTBEAT_PK))
        return {state["agentId"]: state for state in states}

    def heartbeat_state_versioned(self, agent_id: str) -> tuple[dict[str, Any], int] | None:
        """An agent's state and its version (0 for an item written before versions existed), or None."""
        rec = self.table.get(keys.heartbeat(agent_id))
        return (self._heartbeat_from(rec), int(rec.attrs.get("v", 0))) if rec else None

    def put_heartbeat_state(
        self, agent_id: str, state: dict[str, Any], *, create: bool = False, expect_version: int | None = None
    ) -> dict[str, Any]:
        """Store an agent's state; missing fields are stored as null. Returns what was stored.

        `create` fails with ConflictError if the agent has state; `expect_version` fails with ConflictError if the
        stored version differs (someone else wrote the state since it was read)."""
        full = self.empty_heartbeat_state(agent_id)
        full.update({k: state[k] for k in HEARTBEAT_STATE_FIELDS if k in state})
        key = keys.heartbeat(agent_id)
        version, condition = self._next_version(key, create, expect_version)
        self.table.put(key, full, attrs={"v": version}, condition=condition)
        return full

    def _next_version(
        self, key: tuple[str, str], create: bool, expect_version: int | None
    ) -> tuple[int, cond.Condition | None]:
        """The version a versioned put stores and the condition it needs: `create` (the item must not exist),
        `expect_version` (the stored version must be that one; 0 is an item written before versions existed), or
        neither (last writer wins, one past what is stored)."""
        if create:
            return 1, cond.not_exists("PK")
        if expect_version == 0:
            return 1, cond.exists("PK") & cond.not_exists("v")
        if expect_version is not None:
            return expect_version + 1, cond.eq("v", expect_version)
        current = self.table.get(key)
        return (int(current.attrs.get("v", 0)) + 1 if current else 1), None

    def delete_heartbeat_state(self, agent_id: str) -> None:
        self.table.delete(keys.heartbeat(agent_id))

    def _heartbeat_from(self, rec: Record) -> dict[str, Any]:
        state = self.empty_heartbeat_state(str(rec.data.get("agentId") or rec.sk))
        state.update({k: rec.data[k] for k in HEARTBEAT_STATE_FIELDS if k in rec.data})
        return state

    # --- last-active contexts -----------------------------------------------------------------------------------

    def put_last_active(self, agent_id: str, context: dict[str, Any]) -> None:
        """Remember where an agent was last talked to: `{agentId, channel, accountId, peer, sessionKey, timestamp}`."""
        self.table.put(keys.last_active(agent_id), {**context, "agentId": agent_id})

    def last_active(self, agent_id: str) -> dict[str, Any] | None:
        rec = self.table.get(keys.last_active(agent_id))
        return rec.data if rec else None

    def last_active_contexts(self) -> dict[str, dict[str, Any]]:
        """Every agent's last-active context, by agent id (in agent id order)."""
        return {str(rec.data.get("agentId") or rec.sk): rec.data for rec in self.table.query(keys.LAST_ACTIVE_PK)}

    def delete_last_active(self, agent_id: str) -> None:
        self.table.delete(keys.last_active(agent_id))

    # --- cron jobs ----------------------------------------------------------------------------------------------

    def put_cron_job(self, job: dict[str, Any], *, create: bool = False, expect_version: int | None = None) -> int:
        """Store a `CronJob` and return its new version.

        `create` fails with ConflictError if the id exists; `expect_version` fails with ConflictError if the stored
        version differs (someone else changed the job since it was read)."""
        job_id = str(job["id"])
        key = keys.cron_job(job_id)
        version, condition = self._next_version(key, create, expect_version)
        next_run = cron_next_run(job)
        gsi = None
        if cron_job_enabled(job) and next_run is not None:
            gsi = keys.cron_due(max(0, math.floor(next_run)), job_id)
        self.table.put(key, job, gsi=gsi, attrs={"v": version}, condition=condition)
        return version

    def get_cron_job(self, job_id: str) -> dict[str, Any] | None:
        found = self.get_cron_job_versioned(job_id)
        return found[0] if found else None

    def get_cron_job_versioned(self, job_id: str) -> tuple[dict[str, Any], int] | None:
        rec = self.table.get(keys.cron_job(job_id))
        return (rec.data, int(rec.attrs.get("v", 0))) if rec else None

    def delete_cron_job(self, job_id: str, *, with_runs: bool = True) -> bool:
        """Remove a job (and, by default, its run history). Returns whether it existed."""
        old = self.table.delete(keys.cron_job(job_id), return_old=True)
        if with_runs:
            self.delete_cron_runs(job_id)
        return old is not None

    def cron_jobs(self) -> list[dict[str, Any]]:
        """Every cron job, unordered."""
        return [r.data for r in self.table.query(keys.CRON_PK) if r.sk.startswith(keys.CRON_JOB_PREFIX)]

    def count_cron_jobs(self) -> int:
        return len(self.cron_jobs())

    def list_cron_jobs(
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
            for job in self.cron_jobs()
            if (include_disabled or cron_job_enabled(job)) and (agent_id is None or job.get("agentId") == agent_id)
        ]
        jobs.sort(key=cron_order_key)
        start = clamp(offset, 0, CRON_OFFSET_MAX)
        size = clamp(limit, 1, CRON_LIST_MAX)
        return jobs[start : start + size], len(jobs)

    def due_cron_jobs(
        self, now_ms: int, *, limit: int | None = None, include_running: bool = False
    ) -> list[dict[str, Any]]:
        """Enabled jobs whose next run has come and that are not running, earliest first (then oldest).
        `include_running` keeps running ones too, for a caller that judges whether a running marker is stale."""
        # the index is sorted by next run time: read only the jobs whose time has come
        due = [r.data for r in self.table.query_index(keys.CRON_DUE_GSI_PK, sk_max=keys.cron_due_until(now_ms))]
        check = cron_next_run_reached if include_running else cron_is_due
        due = [job for job in due if check(job, now_ms)]
        due.sort(key=cron_order_key)
        return due if limit is None else due[: max(0, limit)]

    def cron_status(self, now_ms: int) -> dict[str, Any]:
        """Counts over every job: `{count, dueCount, runningCount, nextRunAtMs?}` (earliest next run of an enabled
        job, whether or not the scheduler is enabled)."""
        jobs = self.cron_jobs()
        next_runs = [n for n in (cron_next_run(j) for j in jobs if cron_job_enabled(j)) if n is not None]
        status: dict[str, Any] = {
            "count": len(jobs),
            "dueCount": sum(1 for j in jobs if cron_is_due(j, now_ms)),
            "runningCount": sum(1 for j in jobs if cron_running_since(j) is not None),
        }
        if next_runs:
            status["nextRunAtMs"] = min(next_runs)
        return status

    # --- cron run history ---------------------------------------------------------------------------------------

    def next_cron_run_id(self) -> int:
        """A gateway-wide increasing run id."""
        return self.table.next_counter(keys.gateway_flag(keys.CRON_RUN_SEQ_FLAG))  # one atomic ADD, never a race

    def append_cron_run(self, run: dict[str, Any], *, keep: int | None = None) -> dict[str, Any]:
        """Record a `CronRun` `{jobId, ts, status, error?, summary?, sessionKey?, durationMs?, nextRunAtMs?}`;
        assigns its `id`. With `keep`, the job's history is trimmed to its `keep` newest runs."""
        job_id = str(run["jobId"])
        ts = int(run["ts"])
        run_id = self.next_cron_run_id()
        stored = {**run, "id": run_id, "jobId": job_id, "ts": ts}
        self.table.put(keys.cron_run(job_id, ts, run_id), stored, gsi=keys.cron_run_index(ts, run_id))
        if keep is not None:
            self.trim_cron_runs(job_id, keep)
        return stored

    def trim_cron_runs(self, job_id: str, keep: int) -> int:
        """Delete all but the `keep` newest runs of a job; returns how many were deleted."""
        recs = self.table.query(keys.cron_runs_pk(job_id), forward=False)
        doomed = recs[max(0, keep) :]
        if doomed:
            self.table.write_batch(deletes=[(r.pk, r.sk) for r in doomed])
        return len(doomed)

    def delete_cron_runs(self, job_id: str) -> None:
        recs = self.table.query(keys.cron_runs_pk(job_id))
        if recs:
            self.table.write_batch(deletes=[(r.pk, r.sk) for r in recs])

    def list_cron_runs(
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
