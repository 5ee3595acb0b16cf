"""The cron service over the table (spec §11.3, §11.6) and the gsv__Cron tool (§8.4): RPCs, runs with a fake
executor and a controlled clock, claims under concurrency, backoff."""

from __future__ import annotations

import itertools
import threading
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from orbital.engines import cron as engine
from orbital.engines import cron_tool
from orbital.engines.cron import CronError, RunOutcome
from orbital.errors import ConflictError

NOW = int(datetime(2026, 2, 13, 15, 30, tzinfo=UTC).timestamp() * 1000)  # Friday 3:30 PM UTC
MINUTE = 60_000
HOUR = 3_600_000


class Clock:
    """A monotonic clock (seconds) that moves only when told to."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def advance_ms(self, ms: int) -> None:
        self.t += ms / 1000


class Executor:
    """Records the jobs it was given and answers with the next scripted outcome (default ok); each run takes
    `takes_ms` on the clock."""

    def __init__(self, clock: Clock | None = None, takes_ms: int = 0, outcomes: list[Any] | None = None) -> None:
        self.clock = clock
        self.takes_ms = takes_ms
        self.outcomes = list(outcomes or [])
        self.jobs: list[dict[str, Any]] = []

    def __call__(self, job: dict[str, Any]) -> RunOutcome:
        self.jobs.append(job)
        if self.clock is not None:
            self.clock.advance_ms(self.takes_ms)
        outcome = self.outcomes.pop(0) if self.outcomes else RunOutcome("ok", summary=f"ran {job['name']}")
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    @property
    def names(self) -> list[str]:
        return [job["name"] for job in self.jobs]


@pytest.fixture
def now(services: Any) -> int:
    """Pin the gateway clock the RPCs read."""
    services.now_ms = lambda: NOW
    return NOW


def set_cron(services: Any, **values: Any) -> None:
    for key, value in values.items():
        services.config.set_path(f"cron.{key}", value)


def every(ms: int, anchor: int | None = None) -> dict[str, Any]:
    schedule: dict[str, Any] = {"kind": "every", "everyMs": ms}
    if anchor is not None:
        schedule["anchorMs"] = anchor
    return schedule


def event(text: str = "check the inbox") -> dict[str, Any]:
    return {"mode": "systemEvent", "text": text}


def task(message: str = "summarize the news", **extra: Any) -> dict[str, Any]:
    return {"mode": "task", "message": message, **extra}


def add(services: Any, name: str = "job", *, at: int = NOW, **fields: Any) -> dict[str, Any]:
    job = {"name": name, "schedule": every(HOUR), "spec": event(), **fields}
    return engine.add(services, job, at)


def make_due(services: Any, job_id: str, next_run: int = NOW) -> None:
    """Move a job's next run (as the passage of time would)."""
    job, version = services.cron.get_job_versioned(job_id)
    job["state"]["nextRunAtMs"] = next_run
    services.cron.put_job(job, expect_version=version)


def seed(services: Any, **fields: Any) -> dict[str, Any]:
    """A stored job written directly, bypassing the service's checks."""
    job = {
        "id": str(uuid.uuid4()),
        "agentId": "main",
        "name": "seeded",
        "enabled": True,
        "createdAtMs": 0,
        "updatedAtMs": 0,
        "schedule": every(HOUR),
        "spec": event(),
        "state": {"nextRunAtMs": NOW},
        **fields,
    }
    services.cron.put_job(job, create=True)
    return job


def run(services: Any, execute: Any, *, at: int = NOW, clock: Clock | None = None, **kwargs: Any) -> dict[str, Any]:
    return engine.run(services, now_ms=at, execute=execute, monotonic=clock or Clock(), **kwargs)


def stored(services: Any, job_id: str) -> dict[str, Any] | None:
    return services.cron.get_job(job_id)


# --- cron.add ----------------------------------------------------------------------------------------------------


def test_add_stores_a_clean_job(rpc: Any, services: Any, now: int) -> None:
    result = rpc.call(
        "cron.add",
        {
            "name": "  Morning brief  ",
            "description": "  what happened overnight ",
            "agentId": "Ops Team",
            "schedule": {"kind": "every", "everyMs": 15 * MINUTE, "anchorMs": NOW - 5 * MINUTE, "extra": 1},
            "spec": task("brief me", model="acme/model-large", deliver=False, junk="dropped"),
            "deleteAfterRun": False,
        },
    )
    job = result["job"]
    assert result["ok"] is True
    uuid.UUID(job["id"])
    assert job == {
        "id": job["id"],
        "agentId": "ops-team",
        "name": "Morning brief",
        "description": "what happened overnight",
        "enabled": True,
        "createdAtMs": NOW,
        "updatedAtMs": NOW,
        "schedule": {"kind": "every", "everyMs": 15 * MINUTE, "anchorMs": NOW - 5 * MINUTE},
        "spec": {"mode": "task", "message": "brief me", "model": "acme/model-large", "deliver": False},
        "state": {"nextRunAtMs": NOW + 10 * MINUTE},
    }
    assert stored(services, job["id"]) == job
    assert rpc.call("cron.list")["jobs"] == [job]


def test_add_defaults(rpc: Any, now: int) -> None:
    job = rpc.call(
        "cron.add",
        {"name": "x", "schedule": {"kind": "cron", "expr": "0 16 * * *"}, "spec": event(), "deleteAfterRun": True},
    )["job"]
    assert job["agentId"] == "main" and job["enabled"] is True and job["deleteAfterRun"] is True
    assert "description" not in job
    assert job["schedule"] == {"kind": "cron", "expr": "0 16 * * *"}  # no timezone added on the RPC path
    assert job["state"] == {"nextRunAtMs": NOW + 30 * MINUTE}


def test_add_disabled_has_no_next_run(rpc: Any, now: int) -> None:
    job = rpc.call("cron.add", {"name": "x", "schedule": every(MINUTE), "spec": event(), "enabled": False})["job"]
    assert job["enabled"] is False and job["state"] == {}


def test_add_at_in_the_past_is_due_at_once(rpc: Any, now: int) -> None:
    job = rpc.call("cron.add", {"name": "x", "schedule": {"kind": "at", "atMs": NOW - 1}, "spec": event()})["job"]
    assert job["state"]["nextRunAtMs"] == NOW - 1
    assert rpc.call("cron.status")["dueCount"] == 1


@pytest.mark.parametrize(
    ("params", "code", "message"),
    [
        ({}, 400, "name, schedule, and spec are required"),
        ({"name": "x", "schedule": every(1)}, 400, "name, schedule, and spec are required"),
        ({"name": "", "schedule": every(1), "spec": event()}, 400, "name, schedule, and spec are required"),
        ({"name": "x", "schedule": {}, "spec": event()}, 400, "name, schedule, and spec are required"),
        ({"name": "  ", "schedule": every(1), "spec": event()}, 400, "Cron job name is required"),
        ({"name": 5, "schedule": every(1), "spec": event()}, 400, "Cron job name is required"),
        ({"name": "x", "schedule": "daily", "spec": event()}, 400, "schedule must be an object"),
        ({"name": "x", "schedule": {"kind": "at"}, "spec": event()}, 400, "schedule.atMs must be a finite number"),
        ({"name": "x", "schedule": every(0), "spec": event()}, 400, "schedule.everyMs must be a positive number"),
        (
            {"name": "x", "schedule": {"kind": "cron", "expr": "* *"}, "spec": event()},
            400,
            "cron expression must contain exactly 5 fields",
        ),
        ({"name": "x", "schedule": {"kind": "daily"}, "spec": event()}, 400, "Unsupported schedule.kind: daily"),
        ({"name": "x", "schedule": every(1), "spec": event(" ")}, 400, "systemEvent spec requires non-empty text"),
        ({"name": "x", "schedule": every(1), "spec": task("")}, 400, "task spec requires non-empty message"),
        ({"name": "x", "schedule": every(1), "spec": {"mode": "shout"}}, 400, "Unknown cron spec mode: shout"),
        ({"name": "x", "schedule": every(1), "spec": "do it"}, 400, "cron spec must be an object"),
    ],
)
def test_add_errors(rpc: Any, now: int, params: dict[str, Any], code: int, message: str) -> None:
    assert rpc.error("cron.add", params) == {"code": code, "message": message}
    assert rpc.call("cron.list")["count"] == 0


def test_max_jobs(rpc: Any, services: Any, now: int) -> None:
    set_cron(services, maxJobs=2)
    for name in ("a", "b"):
        rpc.call("cron.add", {"name": name, "schedule": every(MINUTE), "spec": event()})
    assert rpc.error("cron.add", {"name": "c", "schedule": every(MINUTE), "spec": event()}) == {
        "code": 400,
        "message": "Cron job limit reached (2)",
    }
    with pytest.raises(CronError, match=r"Cron job limit reached \(2\)"):
        add(services, "d")
    assert rpc.call("cron.status")["count"] == 2


# --- cron.update -------------------------------------------------------------------------------------------------


def test_update_applies_a_patch(rpc: Any, services: Any, now: int) -> None:
    job = add(services, "old", at=NOW - HOUR, description="d", deleteAfterRun=True)
    patched = rpc.call(
        "cron.update",
        {
            "id": job["id"],
            "patch": {
                "name": " new ",
                "description": "",
                "agentId": "Helper",
                "schedule": every(10 * MINUTE),
                "deleteAfterRun": False,
                "spec": {"text": "look again"},
            },
        },
    )
    assert patched["ok"] is True
    updated = patched["job"]
    assert updated["name"] == "new" and "description" not in updated and updated["agentId"] == "helper"
    assert "deleteAfterRun" not in updated
    assert updated["schedule"] == every(10 * MINUTE)
    assert updated["spec"] == event("look again")
    assert updated["updatedAtMs"] == NOW and updated["createdAtMs"] == NOW - HOUR
    assert updated["state"]["nextRunAtMs"] == NOW + 10 * MINUTE  # recomputed from now
    assert stored(services, job["id"]) == updated


def test_update_spec_merge_and_mode_change(rpc: Any, services: Any, now: int) -> None:
    job = add(services, spec=task("first", model="a/b", timeoutSeconds=60))
    merged = rpc.call("cron.update", {"id": job["id"], "patch": {"spec": {"mode": "task", "model": "c/d"}}})["job"]
    assert merged["spec"] == task("first", model="c/d", timeoutSeconds=60)
    assert rpc.error("cron.update", {"id": job["id"], "patch": {"spec": {"mode": "systemEvent"}}}) == {
        "code": 400,
        "message": 'cron spec mode="systemEvent" requires text',
    }
    switched = rpc.call("cron.update", {"id": job["id"], "patch": {"spec": event("hello")}})["job"]
    assert switched["spec"] == event("hello")
    assert rpc.error("cron.update", {"id": job["id"], "patch": {"spec": {"mode": "task"}}})["message"] == (
        'cron spec mode="task" requires message'
    )
    assert rpc.error("cron.update", {"id": job["id"], "patch": {"spec": {"text": " "}}})["message"] == (
        "systemEvent spec requires non-empty text"
    )
    assert rpc.error("cron.update", {"id": job["id"], "patch": {"spec": {"mode": "nap"}}})["message"] == (
        "Unknown cron spec mode: nap"
    )


def test_update_disable_and_enable(rpc: Any, services: Any, now: int) -> None:
    job = seed(services, state={"nextRunAtMs": NOW, "runningAtMs": NOW - 5})
    off = rpc.call("cron.update", {"id": job["id"], "patch": {"enabled": False}})["job"]
    assert off["enabled"] is False and off["state"] == {}
    on = rpc.call("cron.update", {"id": job["id"], "patch": {"enabled": True}})["job"]
    assert on["enabled"] is True and on["state"] == {"nextRunAtMs": NOW + HOUR}


@pytest.mark.parametrize(
    ("params", "code", "message"),
    [
        ({}, 400, "id and patch are required"),
        ({"id": "x"}, 400, "id and patch are required"),
        ({"id": "x", "patch": {}}, 400, "id and patch are required"),
        ({"patch": {"name": "x"}}, 400, "id and patch are required"),
        ({"id": "nope", "patch": {"name": "x"}}, 404, "Unknown cron job id: nope"),
        ({"id": "a" * 5000, "patch": {"name": "x"}}, 404, f"Unknown cron job id: {'a' * 5000}"),
    ],
)
def test_update_errors(rpc: Any, now: int, params: dict[str, Any], code: int, message: str) -> None:
    assert rpc.error("cron.update", params) == {"code": code, "message": message}


def test_update_validates_before_writing(rpc: Any, services: Any, now: int) -> None:
    job = add(services)
    for patch, message in [
        ({"schedule": every(-1)}, "schedule.everyMs must be a positive number"),
        ({"name": " "}, "Cron job name is required"),
        ("rename", "patch must be an object"),
    ]:
        assert rpc.error("cron.update", {"id": job["id"], "patch": patch})["message"] == message
    assert stored(services, job["id"]) == job


# --- cron.remove / cron.runs ----------------------------------------------------------------------------------------


def test_remove_deletes_the_job_and_its_history(rpc: Any, services: Any, now: int) -> None:
    job = add(services)
    other = add(services, "other")
    run(services, Executor(), job_id=job["id"], mode="force")
    run(services, Executor(), job_id=other["id"], mode="force")
    assert rpc.call("cron.runs")["count"] == 2
    assert rpc.call("cron.remove", {"id": job["id"]}) == {"ok": True, "removed": True}
    assert rpc.call("cron.remove", {"id": job["id"]}) == {"ok": True, "removed": False}
    assert stored(services, job["id"]) is None
    assert [r["jobId"] for r in rpc.call("cron.runs")["runs"]] == [other["id"]]
    assert rpc.error("cron.remove", {}) == {"code": 400, "message": "id is required"}
    assert rpc.call("cron.remove", {"id": "x" * 5000}) == {"ok": True, "removed": False}


def test_runs_lists_newest_first_with_paging(rpc: Any, services: Any, now: int) -> None:
    a, b = add(services, "a"), add(services, "b")
    for i, job in enumerate([a, b, a, a]):
        run(services, Executor(), job_id=job["id"], mode="force", at=NOW + i * MINUTE)
    runs = rpc.call("cron.runs")
    assert runs["count"] == 4
    assert [(r["jobId"], r["ts"]) for r in runs["runs"]] == [
        (a["id"], NOW + 3 * MINUTE),
        (a["id"], NOW + 2 * MINUTE),
        (b["id"], NOW + MINUTE),
        (a["id"], NOW),
    ]
    only_a = rpc.call("cron.runs", {"jobId": a["id"], "limit": 2, "offset": 1})
    assert only_a["count"] == 3 and [r["ts"] for r in only_a["runs"]] == [NOW + 2 * MINUTE, NOW]
    assert rpc.call("cron.runs", {"jobId": "missing"}) == {"runs": [], "count": 0}
    assert rpc.call("cron.runs", {"limit": 0})["runs"][0]["ts"] == NOW + 3 * MINUTE
    assert len(rpc.call("cron.runs", {"limit": "all"})["runs"]) == 4


def test_cron_rpcs_answer_hostile_params_cleanly(rpc: Any, now: int) -> None:
    junk: list[Any] = [-1, True, "", "../../etc/passwd\x00", "a" * 5000, ["x"], {"a": {"b": 1}}, None]
    fields = {
        "cron.add": ["name", "description", "agentId", "enabled", "deleteAfterRun", "schedule", "spec"],
        "cron.update": ["id", "patch"],
        "cron.remove": ["id"],
        "cron.runs": ["jobId", "limit", "offset"],
    }
    for method, names in fields.items():
        cases = [dict.fromkeys(names, j) for j in junk] + [{n: j} for n in names for j in junk]
        for params in cases:
            res = rpc.frame(method, params)
            assert res is not None
            if not res["ok"]:
                assert res["error"]["code"] != 500 and res["error"]["message"], (method, params, res)


# --- status -----------------------------------------------------------------------------------------------------


def test_status_counts(services: Any) -> None:
    seed(services, agentId="main")
    seed(services, agentId="ops", state={"nextRunAtMs": NOW - 5, "runningAtMs": NOW - 1})
    seed(services, agentId="ops", state={"nextRunAtMs": NOW + HOUR})
    assert engine.status(services, NOW) == {
        "enabled": True,
        "count": 3,
        "dueCount": 1,
        "runningCount": 1,
        "nextRunAtMs": NOW - 5,
        "maxJobs": 200,
        "maxConcurrentRuns": 4,
    }
    assert engine.status(services, NOW, agent_id="ops") == {
        "enabled": True,
        "count": 2,
        "dueCount": 0,
        "runningCount": 1,
        "nextRunAtMs": NOW - 5,
        "maxJobs": 200,
        "maxConcurrentRuns": 4,
    }


# --- run: due selection ----------------------------------------------------------------------------------------


def test_due_run_executes_due_jobs_only(services: Any) -> None:
    due = add(services, "due", at=NOW - HOUR)  # next run NOW
    later = add(services, "later", at=NOW)  # next run NOW + 1h
    off = add(services, "off", at=NOW - 2 * HOUR, enabled=False)
    clock = Clock()
    execute = Executor(clock, takes_ms=2500)
    result = run(services, execute, clock=clock)
    assert execute.names == ["due"]
    assert execute.jobs[0]["state"]["runningAtMs"] == NOW  # the executor sees the claimed job
    assert result == {
        "ran": 1,
        "results": [
            {
                "jobId": due["id"],
                "status": "ok",
                "summary": "ran due",
                "durationMs": 2500,
                "nextRunAtMs": NOW + 2500 + HOUR,  # from the end of the run (no anchor)
            }
        ],
    }
    job = stored(services, due["id"])
    assert job["state"] == {
        "nextRunAtMs": NOW + 2500 + HOUR,
        "lastRunAtMs": NOW,
        "lastStatus": "ok",
        "lastDurationMs": 2500,
    }
    runs, count = services.cron.list_runs(job_id=due["id"])
    assert count == 1
    assert runs[0] == {
        "jobId": due["id"],
        "status": "ok",
        "summary": "ran due",
        "durationMs": 2500,
        "nextRunAtMs": NOW + 2500 + HOUR,
        "ts": NOW,
        "id": runs[0]["id"],
    }
    assert stored(services, later["id"])["state"] == {"nextRunAtMs": NOW + HOUR}
    assert stored(services, off["id"])["state"] == {}
    assert run(services, execute, clock=clock) == {"ran": 0, "results": []}


def test_anchored_every_stays_on_its_grid(services: Any) -> None:
    job = add(services, schedule=every(10 * MINUTE, anchor=NOW - 25 * MINUTE), at=NOW - 6 * MINUTE)
    assert job["state"]["nextRunAtMs"] == NOW - 5 * MINUTE
    clock = Clock()
    result = run(services, Executor(clock, takes_ms=90_000), clock=clock)
    assert result["results"][0]["nextRunAtMs"] == NOW + 5 * MINUTE


def test_cron_job_next_run_after_the_end(services: Any) -> None:
    job = add(services, schedule={"kind": "cron", "expr": "*/15 * * * *", "tz": "UTC"}, at=NOW - MINUTE)
    assert job["state"]["nextRunAtMs"] == NOW
    clock = Clock()
    result = run(services, Executor(clock, takes_ms=16 * MINUTE), clock=clock)
    assert result["results"][0]["nextRunAtMs"] == NOW + 30 * MINUTE  # 15:46 ends the run: next is 16:00


def test_due_runs_are_capped_and_ordered(services: Any) -> None:
    set_cron(services, maxConcurrentRuns=2)
    jobs = [seed(services, name=f"j{i}", createdAtMs=i, state={"nextRunAtMs": NOW - 10 + (i % 2)}) for i in range(3)]
    clock = Clock()
    execute = Executor(clock, takes_ms=1000)
    first = run(services, execute, clock=clock)
    assert execute.names == ["j0", "j2"]  # next run NOW-10 (created 0, 2), then NOW-9
    assert first["ran"] == 2
    runs, _ = services.cron.list_runs()
    assert sorted(r["ts"] for r in runs) == [NOW, NOW + 1000]  # the second started when the first ended
    second = run(services, execute, clock=clock)
    assert [r["jobId"] for r in second["results"]] == [jobs[1]["id"]]


def test_scheduler_disabled(services: Any) -> None:
    set_cron(services, enabled=False)
    job = add(services, at=NOW - HOUR)
    execute = Executor()
    assert run(services, execute) == {"ran": 0, "results": []}
    result = run(services, execute, job_id=job["id"])  # a due job named explicitly is recorded as skipped
    assert result["results"][0]["status"] == "skipped"
    assert result["results"][0]["error"] == "cron scheduler disabled"
    assert execute.jobs == []
    state = stored(services, job["id"])["state"]
    assert state["lastStatus"] == "skipped" and state["lastError"] == "cron scheduler disabled"
    assert state["nextRunAtMs"] == NOW + HOUR
    forced = run(services, execute, job_id=job["id"], mode="force")
    assert forced["results"][0]["status"] == "ok" and execute.names == ["job"]


def test_due_mode_with_id(services: Any) -> None:
    job = add(services)
    execute = Executor()
    assert run(services, execute, job_id=job["id"]) == {"ran": 0, "results": []}
    assert run(services, execute, job_id=job["id"], mode="sideways") == {"ran": 0, "results": []}
    make_due(services, job["id"])
    assert run(services, execute, job_id=job["id"], mode="sideways")["ran"] == 1
    with pytest.raises(CronError, match="Unknown cron job id: nope"):
        run(services, execute, job_id="nope")


def test_force(services: Any) -> None:
    job = add(services, enabled=False)
    execute = Executor()
    result = run(services, execute, job_id=job["id"], mode="force")
    assert result["ran"] == 1 and result["results"][0]["status"] == "ok"
    assert execute.names == ["job"]
    state = stored(services, job["id"])["state"]
    assert state["lastStatus"] == "ok" and "nextRunAtMs" not in state  # still disabled
    with pytest.raises(CronError, match=r"cron\.run with mode=force requires id"):
        run(services, execute, mode="force")
    with pytest.raises(CronError, match="Unknown cron job id: gone"):
        run(services, execute, job_id="gone", mode="force")


# --- run: skips and outcomes -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ({"mode": "systemEvent", "text": "  "}, "systemEvent spec text is empty"),
        ({"mode": "task", "message": ""}, "task spec message is empty"),
        ({"mode": "task"}, "task spec message is empty"),
    ],
)
def test_blank_specs_are_skipped(services: Any, spec: dict[str, Any], reason: str) -> None:
    job = seed(services, spec=spec)
    execute = Executor()
    result = run(services, execute)
    assert result["results"][0] == {
        "jobId": job["id"],
        "status": "skipped",
        "error": reason,
        "durationMs": 0,
        "nextRunAtMs": NOW + HOUR,
    }
    assert execute.jobs == []
    assert services.cron.list_runs(job_id=job["id"])[0][0]["status"] == "skipped"


def test_disabled_job_reason() -> None:
    settings = engine.cron_settings({})
    job = {"enabled": False, "spec": event()}
    assert engine._skip_reason(job, forced=False, settings=settings) == "job disabled"
    assert engine._skip_reason(job, forced=True, settings=settings) is None


def test_unknown_stored_spec_mode_is_an_error(services: Any) -> None:
    seed(services, spec={"mode": "dance"})
    result = run(services, Executor())
    assert result["results"][0]["status"] == "error"
    assert result["results"][0]["error"] == "Unknown cron spec mode: dance"


def test_executor_exception_is_an_error(services: Any) -> None:
    job = seed(services)
    result = run(services, Executor(outcomes=[RuntimeError("model unavailable")]))
    assert result["results"][0]["status"] == "error"
    assert result["results"][0]["error"] == "model unavailable"
    state = stored(services, job["id"])["state"]
    assert state["lastStatus"] == "error" and state["lastError"] == "model unavailable"
    assert state["consecutiveFailures"] == 1
    assert "runningAtMs" not in state


def test_executor_without_a_valid_outcome(services: Any) -> None:
    seed(services)
    result = run(services, Executor(outcomes=[RunOutcome("maybe")]))  # type: ignore[arg-type]
    assert result["results"][0]["error"] == "cron executor returned no valid outcome"


def test_reported_outcomes_are_recorded(services: Any) -> None:
    job = seed(services)
    outcome = RunOutcome("skipped", error="busy elsewhere", summary="not now")
    result = run(services, Executor(outcomes=[outcome]))
    assert result["results"][0]["status"] == "skipped"
    assert result["results"][0]["error"] == "busy elsewhere" and result["results"][0]["summary"] == "not now"
    assert stored(services, job["id"])["state"]["lastError"] == "busy elsewhere"


# --- run: one-shot jobs and history ------------------------------------------------------------------------------


def test_at_job_deleted_after_a_successful_run(rpc: Any, services: Any, now: int) -> None:
    job = add(services, schedule={"kind": "at", "atMs": NOW - 1}, deleteAfterRun=True)
    result = run(services, Executor())
    assert result["results"][0]["status"] == "ok" and "nextRunAtMs" not in result["results"][0]
    assert stored(services, job["id"]) is None
    runs = rpc.call("cron.runs", {"jobId": job["id"]})
    assert runs["count"] == 1 and runs["runs"][0]["status"] == "ok"  # history kept


def test_at_job_disabled_after_a_run(services: Any) -> None:
    kept = add(services, "kept", schedule={"kind": "at", "atMs": NOW - 2})
    failed = add(services, "failed", schedule={"kind": "at", "atMs": NOW - 1}, deleteAfterRun=True)
    run(services, Executor(outcomes=[RunOutcome("ok"), RunOutcome("error", "boom")]))
    for job_id, status in ((kept["id"], "ok"), (failed["id"], "error")):
        job = stored(services, job_id)
        assert job is not None and job["enabled"] is False
        assert "nextRunAtMs" not in job["state"] and job["state"]["lastStatus"] == status
    assert run(services, Executor()) == {"ran": 0, "results": []}


def test_history_is_trimmed(services: Any) -> None:
    set_cron(services, maxRunsPerJobHistory=3)
    job = add(services)
    for i in range(5):
        run(services, Executor(), job_id=job["id"], mode="force", at=NOW + i)
    runs, count = services.cron.list_runs(job_id=job["id"])
    assert count == 3 and [r["ts"] for r in runs] == [NOW + 4, NOW + 3, NOW + 2]


# --- run: backoff ----------------------------------------------------------------------------------------------------


def test_backoff_after_consecutive_failures(services: Any) -> None:
    job = seed(services)
    failing = Executor(outcomes=[RunOutcome("error", "down")] * 9)
    at = NOW
    pushes = []
    for n in range(1, 10):
        result = run(services, failing, job_id=job["id"], at=at)
        state = stored(services, job["id"])["state"]
        assert state["consecutiveFailures"] == n
        pushes.append(result["results"][0]["nextRunAtMs"] - (at + HOUR))
        at = result["results"][0]["nextRunAtMs"]
    assert pushes == [30_000, 60_000, 120_000, 240_000, 480_000, 960_000, 1_920_000, HOUR, HOUR]
    result = run(services, Executor(), job_id=job["id"], at=at)
    assert result["results"][0]["nextRunAtMs"] == at + HOUR
    assert "consecutiveFailures" not in stored(services, job["id"])["state"]


def test_skips_keep_the_failure_streak_and_updates_reset_it(services: Any) -> None:
    job = seed(services)
    run(services, Executor(outcomes=[RunOutcome("error", "x")]), job_id=job["id"])
    make_due(services, job["id"])
    run(services, Executor(outcomes=[RunOutcome("skipped", "later")]), job_id=job["id"])
    assert stored(services, job["id"])["state"]["consecutiveFailures"] == 1
    engine.update(services, job["id"], {"name": "fixed"}, NOW)
    assert "consecutiveFailures" not in stored(services, job["id"])["state"]


def test_backoff_values() -> None:
    assert [engine.backoff_ms(n) for n in (0, 1, 2, 7, 8, 100)] == [0, 30_000, 60_000, 1_920_000, HOUR, HOUR]


# --- run: claims ----------------------------------------------------------------------------------------------------


def test_running_jobs_are_not_run_again(services: Any) -> None:
    job = seed(services, state={"nextRunAtMs": NOW, "runningAtMs": NOW - MINUTE})
    execute = Executor()
    assert run(services, execute) == {"ran": 0, "results": []}
    assert run(services, execute, job_id=job["id"]) == {"ran": 0, "results": []}
    forced = run(services, execute, job_id=job["id"], mode="force")
    assert forced == {
        "ran": 1,
        "results": [{"jobId": job["id"], "status": "skipped", "error": "job is already running", "durationMs": 0}],
    }
    assert execute.jobs == []
    assert stored(services, job["id"]) == job  # untouched
    assert services.cron.list_runs()[1] == 0


def test_a_stale_running_marker_does_not_block(services: Any) -> None:
    job = seed(services, state={"nextRunAtMs": NOW, "runningAtMs": NOW - 2 * HOUR})
    long_task = seed(
        services, spec=task(timeoutSeconds=3 * 3600), state={"nextRunAtMs": NOW, "runningAtMs": NOW - 2 * HOUR}
    )
    execute = Executor()
    result = run(services, execute)
    assert [r["jobId"] for r in result["results"]] == [job["id"]]  # the 3 h task may still be going
    assert "runningAtMs" not in stored(services, job["id"])["state"]
    assert stored(services, long_task["id"])["state"]["runningAtMs"] == NOW - 2 * HOUR


def test_a_lost_claim_is_not_executed(services: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another runner claims the job between our read and our conditional write."""
    job = seed(services)
    repo = services.cron
    real = repo.get_job_versioned
    raced = []

    def read_then_rival_claims(job_id: str) -> Any:
        found = real(job_id)
        if not raced:
            raced.append(job_id)
            rival, version = real(job_id)
            rival["state"]["runningAtMs"] = NOW
            repo.put_job(rival, expect_version=version)
        return found

    monkeypatch.setattr(repo, "get_job_versioned", read_then_rival_claims)
    execute = Executor()
    assert run(services, execute) == {"ran": 0, "results": []}
    assert execute.jobs == [] and raced == [job["id"]]
    assert stored(services, job["id"])["state"]["runningAtMs"] == NOW


@pytest.mark.atomic_table
def test_concurrent_runs_execute_a_due_job_once(services: Any) -> None:
    seed(services, name="once")
    barrier = threading.Barrier(2)
    finished = threading.Condition()
    done: list[dict[str, Any]] = []
    executed: list[str] = []

    def execute(job: dict[str, Any]) -> RunOutcome:
        executed.append(job["id"])
        with finished:  # hold the job until the other runner has given up on it
            finished.wait_for(lambda: len(done) >= 1, timeout=10)
        return RunOutcome("ok")

    def runner() -> None:
        barrier.wait(timeout=10)
        result = engine.run(services, now_ms=NOW, execute=execute)
        with finished:
            done.append(result)
            finished.notify_all()

    threads = [threading.Thread(target=runner) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    assert len(executed) == 1
    assert sorted(r["ran"] for r in done) == [0, 1]
    assert services.cron.list_runs()[1] == 1


def test_job_removed_while_running(services: Any) -> None:
    job = seed(services)

    def remove_then_finish(claimed: dict[str, Any]) -> RunOutcome:
        engine.remove(services, claimed["id"])
        return RunOutcome("ok")

    result = run(services, remove_then_finish)
    assert result["results"][0]["status"] == "ok"
    assert stored(services, job["id"]) is None
    assert services.cron.list_runs()[1] == 0


def test_job_edited_while_running(services: Any) -> None:
    job = seed(services)

    def rename_then_finish(claimed: dict[str, Any]) -> RunOutcome:
        engine.update(services, claimed["id"], {"name": "renamed"}, NOW)
        return RunOutcome("ok")

    run(services, rename_then_finish)
    finished = stored(services, job["id"])
    assert finished["name"] == "renamed"
    assert finished["state"]["lastStatus"] == "ok" and "runningAtMs" not in finished["state"]


def test_update_retries_when_a_run_wrote_first(services: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    job = seed(services)
    repo = services.cron
    real_put = repo.put_job
    calls = []

    def put_losing_once(data: dict[str, Any], **kwargs: Any) -> int:
        calls.append(kwargs)
        if len(calls) == 1:
            raise ConflictError("raced")
        return real_put(data, **kwargs)

    monkeypatch.setattr(repo, "put_job", put_losing_once)
    assert engine.update(services, job["id"], {"name": "again"}, NOW)["name"] == "again"
    assert len(calls) == 2 and all("expect_version" in c for c in calls)


# --- the gsv__Cron tool --------------------------------------------------------------------------------------------


def tool(services: Any, args: Any, *, tz: str = "America/Chicago", execute: Any = None, agent: str = "main") -> Any:
    return cron_tool.execute_tool(services, args, agent_id=agent, user_tz=tz, now_ms=NOW, execute=execute or Executor())


def test_tool_status(services: Any) -> None:
    seed(services)
    result = tool(services, {})
    assert result["currentTime"] == "Friday, February 13, 2026 — 9:30 AM CST"
    assert result["timezone"] == "America/Chicago"
    assert result["count"] == 1 and result["dueCount"] == 1 and result["enabled"] is True
    assert tool(services, {"action": " STATUS "})["count"] == 1
    assert tool(services, "not an object")["timezone"] == "America/Chicago"
    assert tool(services, {"action": "status"}, tz="Bogus/Zone")["timezone"] == "UTC"


def test_tool_add_reads_times_in_the_user_timezone(services: Any) -> None:
    result = tool(
        services,
        {
            "action": "add",
            "job": {
                "name": "standup",
                "schedule": {"kind": "at", "at": "tomorrow 9:15am"},
                "spec": {"mode": "task", "message": "prepare notes"},
                "deleteAfterRun": True,
            },
        },
        agent="helper",
    )
    assert result["ok"] is True
    job = result["job"]
    tomorrow_915_cst = int(datetime(2026, 2, 14, 15, 15, tzinfo=UTC).timestamp() * 1000)
    assert job["schedule"] == {"kind": "at", "atMs": tomorrow_915_cst}
    assert job["state"] == {"nextRunAtMs": tomorrow_915_cst}
    assert job["agentId"] == "helper"  # the calling agent by default
    assert job["deleteAfterRun"] is True


def test_tool_add_from_flat_args(services: Any) -> None:
    job = tool(
        services,
        {
            "action": "add",
            "name": "daily",
            "agentId": "Ops",
            "schedule": {"kind": "cron", "expr": "0 9 * * *"},
            "spec": event("good morning"),
        },
    )["job"]
    assert job["schedule"] == {"kind": "cron", "expr": "0 9 * * *", "tz": "America/Chicago"}
    assert job["agentId"] == "ops"
    assert job["state"]["nextRunAtMs"] == int(datetime(2026, 2, 14, 15, tzinfo=UTC).timestamp() * 1000)
    assert "action" not in job


def test_tool_list_adds_human_times(services: Any) -> None:
    job = tool(
        services,
        {"action": "add", "job": {"name": "x", "schedule": {"kind": "every", "everyMinutes": 15}, "spec": event()}},
    )["job"]
    run(services, Executor(), job_id=job["id"], mode="force")
    listed = tool(services, {"action": "list"})
    assert listed["count"] == 1 and listed["timezone"] == "America/Chicago"
    assert listed["currentTime"] == "Friday, February 13, 2026 — 9:30 AM CST"
    entry = listed["jobs"][0]
    assert entry["scheduleHuman"] == "every 15 minutes (starting from creation time)"
    assert entry["nextRunHuman"] == "Friday, February 13, 2026 — 9:45 AM CST"
    assert entry["lastRunHuman"] == "Friday, February 13, 2026 — 9:30 AM CST"
    assert tool(services, {"action": "list", "agentId": "nobody"})["count"] == 0
    assert tool(services, {"action": "list", "includeDisabled": False, "limit": 0})["count"] == 1


def test_tool_update_remove_run_runs(services: Any) -> None:
    job = add(services)
    updated = tool(
        services, {"action": "update", "id": job["id"], "patch": {"schedule": {"kind": "every", "everyHours": 6}}}
    )
    assert updated["ok"] is True and updated["job"]["schedule"] == {"kind": "every", "everyMs": 21_600_000}
    execute = Executor()
    assert tool(services, {"action": "run"}, execute=execute) == {"ok": True, "ran": 0, "results": []}
    forced = tool(services, {"action": "run", "id": job["id"], "mode": "force"}, execute=execute)
    assert forced["ok"] is True and forced["ran"] == 1 and execute.names == ["job"]
    assert tool(services, {"action": "run", "id": job["id"], "mode": "later"}, execute=execute)["ran"] == 0
    runs = tool(services, {"action": "runs", "jobId": job["id"]})
    assert runs["count"] == 1 and set(runs) == {"runs", "count"}
    assert tool(services, {"action": "remove", "id": job["id"]}) == {"ok": True, "removed": True}
    assert tool(services, {"action": "remove", "id": job["id"]}) == {"ok": True, "removed": False}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"action": "add"}, "cron add requires name, schedule, and spec"),
        ({"action": "add", "job": {"name": "x", "spec": event()}}, "cron add requires name, schedule, and spec"),
        ({"action": "update", "patch": {"name": "x"}}, "cron update requires id"),
        ({"action": "update", "id": "  ", "patch": {"name": "x"}}, "cron update requires id"),
        ({"action": "update", "id": "abc"}, "cron update requires patch object"),
        ({"action": "update", "id": "abc", "patch": "rename"}, "cron update requires patch object"),
        ({"action": "update", "id": "abc", "patch": {"name": "x"}}, "Unknown cron job id: abc"),
        ({"action": "remove"}, "cron remove requires id"),
        ({"action": "run", "mode": "force"}, "cron.run with mode=force requires id"),
        ({"action": "snooze"}, "Unknown cron action: snooze"),
        (
            {"action": "add", "job": {"name": "x", "schedule": {"kind": "at", "at": "someday"}, "spec": event()}},
            'Unable to parse datetime "someday". Use ISO datetime (recommended), "today/tomorrow", or relative '
            '"in N hours".',
        ),
        (
            {"action": "add", "job": {"name": "x", "schedule": {"kind": "cron", "expr": "* * *"}, "spec": event()}},
            "cron expression must contain exactly 5 fields",
        ),
        (
            {"action": "add", "job": {"name": "x", "schedule": {"kind": "every"}, "spec": {"mode": "task"}}},
            "schedule.every requires everyMs or everyMinutes/everyHours (positive numbers)",
        ),
    ],
)
def test_tool_errors(services: Any, args: dict[str, Any], message: str) -> None:
    with pytest.raises(CronError) as info:
        tool(services, args)
    assert info.value.message == message


def test_pages_too_large_for_one_message_are_cut_short_and_marked(rpc: Any, services: Any, now: int) -> None:
    for i in range(60):
        rpc.call(
            "cron.add",
            {
                "name": f"job {i:02d}",
                "description": "d" * 3000,
                "schedule": {"kind": "cron", "expr": "0 9 * * *"},
                "spec": event(),
            },
        )
    page = rpc.call("cron.list", {"limit": 500})
    assert page["truncated"] is True and page["count"] == 60
    assert 10 < len(page["jobs"]) < 60
    rest = rpc.call("cron.list", {"offset": len(page["jobs"]), "limit": 500})
    names = [job["name"] for job in page["jobs"] + rest.get("jobs", [])]
    assert len(set(names)) == len(names)
    assert "truncated" not in rpc.call("cron.list", {"limit": 5})


def test_preview_gives_the_next_runs_add_would_compute(rpc: Any, now: int) -> None:
    hourly = {"kind": "cron", "expr": "0 * * * *", "tz": "UTC"}
    runs = rpc.call("cron.preview", {"schedule": hourly, "count": 3})["nextRunsMs"]
    assert len(runs) == 3 and runs[0] > NOW
    assert [b - a for a, b in itertools.pairwise(runs)] == [3_600_000] * 2
    job = rpc.call("cron.add", {"name": "x", "schedule": hourly, "spec": event()})["job"]
    assert job["state"]["nextRunAtMs"] == runs[0]
    minutes = rpc.call("cron.preview", {"schedule": every(60_000)})["nextRunsMs"]
    assert minutes == [NOW + 60_000 * i for i in range(1, 6)]
    anchored = rpc.call("cron.preview", {"schedule": every(60_000, anchor=NOW - 1_000), "count": 2})["nextRunsMs"]
    assert anchored == [NOW + 59_000, NOW + 119_000]
    assert rpc.call("cron.preview", {"schedule": {"kind": "at", "atMs": NOW + 5}})["nextRunsMs"] == [NOW + 5]
    assert rpc.call("cron.preview", {"schedule": {"kind": "at", "atMs": NOW - 5}})["nextRunsMs"] == []
    assert len(rpc.call("cron.preview", {"schedule": every(1), "count": 500})["nextRunsMs"]) == engine.PREVIEW_MAX
    assert rpc.call("cron.preview", {"schedule": {"kind": "cron", "expr": "0 0 31 2 *"}})["nextRunsMs"] == []


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({}, "schedule is required"),
        ({"schedule": "daily"}, "schedule must be an object"),
        ({"schedule": {"kind": "cron", "expr": "* *"}}, "cron expression must contain exactly 5 fields"),
        ({"schedule": {"kind": "cron", "expr": "0 9 * * *", "tz": "Mars/Olympus"}}, "Invalid time zone specified"),
        ({"schedule": {"kind": "every", "everyMs": -1}}, "schedule.everyMs must be a positive number"),
    ],
)
def test_preview_refuses_what_add_refuses(rpc: Any, now: int, params: dict[str, Any], message: str) -> None:
    error = rpc.error("cron.preview", params)
    assert error["code"] == 400 and error["message"].startswith(message)
    assert rpc.call("cron.list")["count"] == 0
