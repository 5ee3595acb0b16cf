"""The scheduler tick over moto with a controlled clock: due cron jobs start real agent runs (the agent turn state
machine executed by moto, the scripted model over HTTP), their replies reach the channel, their records carry the
real outcome once the run ends (fix F9), racing ticks run a job once, and `timeoutSeconds` stops a task run."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from orbital.agent import cron_runs, runs
from orbital.engines import cron
from orbital.runtime import scheduler
from orbital.store import keys

from tests.conftest import ROOT, wait_for
from tests.support.agent import node_events
from tests.support.fake_llm import FakeLLM, call, error, reply

MINUTE = 60_000
T = 1_900_000_000_000  # a fixed "now" for the schedule; runs themselves use the real clock
PEER = {"kind": "dm", "id": "+15550001"}


def add_job(services: Any, spec: dict[str, Any], at_ms: int = T, name: str = "job") -> str:
    job = cron.add(services, {"name": name, "schedule": {"kind": "at", "atMs": at_ms}, "spec": spec}, at_ms - MINUTE)
    return str(job["id"])


def records(agent: Any, job_id: str) -> list[dict[str, Any]]:
    return list(agent.call("cron.runs", {"jobId": job_id})["runs"])


def finished_record(agent: Any, job_id: str, timeout: float = 30.0) -> dict[str, Any]:
    return dict(wait_for(lambda: records(agent, job_id), timeout=timeout)[0])


def outbound(sender: Any, channel: Any) -> list[dict[str, Any]]:
    return [f["payload"] for f in sender.frames_to(channel.connection_id) if f.get("event") == "channel.outbound"]


def user_texts(llm: FakeLLM) -> list[str]:
    out = []
    for request in llm.requests:
        users = [m for m in request.body["messages"] if m["role"] == "user"]
        content = users[-1]["content"] if users else ""
        out.append(content if isinstance(content, str) else str(content))
    return out


def test_a_due_system_event_runs_in_the_main_session_and_is_delivered(
    agent: Any, connect: Any, sender: Any, services: Any, llm: FakeLLM
) -> None:
    channel = connect("channel", "bridge", channel="test")
    services.last_active.put(
        "main", {"channel": "test", "accountId": "bridge", "peer": PEER, "sessionKey": "agent:main:main"}
    )
    now = services.now_ms()  # the real clock, so the record's duration is the run's
    job_id = add_job(services, {"mode": "systemEvent", "text": "water the plants"}, at_ms=now)
    llm.script(reply("Time to water the plants.", chunks=3, delay_per_chunk=0.1))
    assert scheduler.tick(services, now_ms=now - 1)["cron"] == []  # not due yet

    out = scheduler.tick(services, now_ms=now)
    assert [(r["jobId"], r["status"]) for r in out["cron"]] == [(job_id, "ok")]  # started (GSV's answer)
    assert "agent:main:main" in out["cron"][0]["summary"]
    assert "delivering to test:+15550001" in out["cron"][0]["summary"]

    record = finished_record(agent, job_id)
    assert record["status"] == "ok" and record["summary"] == "Time to water the plants."
    assert record["durationMs"] >= 200  # the whole run (the reply alone streamed for 0.2 s), not the start
    (prompt,) = user_texts(llm)
    assert prompt.startswith("[cron · ") and "water the plants" in prompt
    assert "delivered automatically to test:+15550001" in prompt
    sent = wait_for(lambda: outbound(sender, channel), timeout=30)
    assert sent[0]["peer"] == PEER and sent[0]["message"]["text"] == "Time to water the plants."
    assert sent[0]["message"]["replyToId"].startswith(f"cron:{job_id}:")
    history = agent.call("session.preview", {"sessionKey": "agent:main:main"})["messages"]
    assert [m["role"] for m in history] == ["user", "assistant"]
    job = services.cron.get_job(job_id)
    assert job["enabled"] is False and job["state"]["lastStatus"] == "ok"  # an `at` job is done after its run


def test_a_task_runs_in_a_fresh_session_each_time_with_its_model(agent: Any, services: Any, llm: FakeLLM) -> None:
    job = cron.add(
        services,
        {
            "name": "digest",
            "schedule": {"kind": "every", "everyMs": 10 * MINUTE, "anchorMs": T - 10 * MINUTE},
            "spec": {"mode": "task", "message": "summarize the news", "model": "openai/gpt-other", "deliver": False},
        },
        T - MINUTE,
    )
    job_id = str(job["id"])
    llm.script(reply("digest one"), reply("digest two"))
    first = scheduler.tick(services, now_ms=T)["cron"]
    wait_for(lambda: len(records(agent, job_id)) == 1, timeout=30)
    second = scheduler.tick(services, now_ms=T + 10 * MINUTE + 5)["cron"]
    wait_for(lambda: len(records(agent, job_id)) == 2, timeout=30)
    keys_used = [r["summary"].removeprefix("running in ") for r in first + second]
    assert len(set(keys_used)) == 2 and all(k.startswith(f"agent:main:cron:{job_id}:") for k in keys_used)
    assert [r["status"] for r in records(agent, job_id)] == ["ok", "ok"]
    assert sorted(r["sessionKey"] for r in records(agent, job_id)) == sorted(keys_used)  # each links its transcript
    assert {r.body["model"] for r in llm.requests} == {"gpt-other"}
    for key in keys_used:  # each run's session holds only its own exchange
        history = agent.call("session.preview", {"sessionKey": key})["messages"]
        assert [m["role"] for m in history] == ["user", "assistant"]


def test_a_failed_run_is_recorded_as_an_error_and_the_channel_is_told(
    agent: Any, connect: Any, sender: Any, services: Any, llm: FakeLLM
) -> None:
    channel = connect("channel", "bridge", channel="test")
    services.last_active.put("main", {"channel": "test", "accountId": "bridge", "peer": PEER})
    job_id = add_job(services, {"mode": "task", "message": "check the backups"})
    llm.script(error(400, "model not found"))
    scheduler.tick(services, now_ms=T)
    record = finished_record(agent, job_id)
    assert record["status"] == "error" and record["error"] == "Model not found: openai/gpt-test"
    sent = wait_for(lambda: outbound(sender, channel), timeout=30)
    assert sent[-1]["message"]["text"].startswith("Sorry, I couldn't finish that:")


def test_cron_run_answers_ok_for_a_run_it_started_and_the_record_keeps_the_outcome(
    agent: Any, services: Any, llm: FakeLLM
) -> None:
    """F9: `cron.run` answers as GSV does, `status: "ok"` for a run it started (a forced `task`, a due
    `systemEvent`), with the time it took to start it; the run's record in `cron.runs` carries its real outcome
    once it ends. A job that is not due is left alone by `mode: "due"`, as in GSV."""
    from orbital.methods import registry

    spec = registry().get("cron.run")
    assert spec is not None and spec.result is not None
    task = add_job(services, {"mode": "task", "message": "check the backups", "deliver": False})  # due at T: later
    llm.script(error(400, "model not found"), reply("Plants watered."))

    assert agent.call("cron.run", {"id": task, "mode": "due"}) == {"ok": True, "ran": 0, "results": []}
    forced = agent.call("cron.run", {"id": task, "mode": "force"})
    spec.result.model_validate(forced)
    assert forced["ok"] is True and forced["ran"] == 1
    (started,) = forced["results"]
    assert (started["jobId"], started["status"]) == (task, "ok")
    assert f"agent:main:cron:{task}:" in started["summary"]
    assert isinstance(started["durationMs"], int) and started["durationMs"] >= 0
    record = finished_record(agent, task)
    assert record["status"] == "error" and record["error"] == "Model not found: openai/gpt-test"

    now = services.now_ms()
    event = add_job(services, {"mode": "systemEvent", "text": "water the plants", "deliver": False}, at_ms=now)
    due = agent.call("cron.run", {})
    spec.result.model_validate(due)
    assert [(r["jobId"], r["status"]) for r in due["results"]] == [(event, "ok")]
    assert "agent:main:main" in due["results"][0]["summary"]
    record = finished_record(agent, event)
    assert record["status"] == "ok" and record["summary"] == "Plants watered."


@pytest.mark.atomic_table
def test_racing_ticks_run_a_job_once(agent: Any, services: Any, llm: FakeLLM) -> None:
    job_id = add_job(services, {"mode": "task", "message": "once only", "deliver": False})
    llm.script(reply("done"))
    results: list[dict[str, Any]] = []
    barrier = threading.Barrier(4)

    def tick() -> None:
        barrier.wait()
        results.append(scheduler.tick(services, now_ms=T + 1))

    threads = [threading.Thread(target=tick) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(results) == 4  # every tick finished
    assert sum(len(r.get("cron") or []) for r in results) == 1
    finished_record(agent, job_id)
    assert len(records(agent, job_id)) == 1
    assert sum("once only" in text for text in user_texts(llm)) == 1


def test_timeout_seconds_stops_a_task_run(agent: Any, connect: Any, sender: Any, services: Any, llm: FakeLLM) -> None:
    node = connect("node", "box")
    job_id = add_job(services, {"mode": "task", "message": "run the long job", "timeoutSeconds": 30, "deliver": False})
    llm.script(reply(tool_calls=[call("box__Bash", {"command": "sleep 3600"})]))
    out = scheduler.tick(services, now_ms=T)
    session_key = out["cron"][0]["summary"].removeprefix("running in ")
    wait_for(lambda: node_events(sender, node, "tool.invoke"), timeout=30)  # the run now waits for the node

    assert scheduler.tick(services, now_ms=T + 29_000).get("cronEnded") == 0
    assert runs.current_run(services, session_key) is not None
    assert scheduler.tick(services, now_ms=T + 31_000)["cronEnded"] == 1
    record = finished_record(agent, job_id)
    assert record["status"] == "error" and record["error"] == "Cron run timed out after 30s"
    assert runs.current_run(services, session_key) is None
    assert list(services.table.query(keys.cron_active_pk(job_id))) == []
    assert scheduler.tick(services, now_ms=T + 90_000)["cronEnded"] == 0  # nothing left to stop


# its reads of the run's record race the run's own writes from the executions' threads: plain moto's table is not safe
# for that (a query can fail with "dictionary changed size during iteration"), DynamoDB's and the local one are
@pytest.mark.atomic_table
def test_a_long_run_is_watched_and_never_claimed_twice(
    agent: Any, connect: Any, sender: Any, services: Any, llm: FakeLLM
) -> None:
    node = connect("node", "box")
    job = cron.add(
        services,
        {
            "name": "long",
            "schedule": {"kind": "every", "everyMs": MINUTE, "anchorMs": T - MINUTE},
            "spec": {"mode": "task", "message": "the long job", "deliver": False},
        },
        T - MINUTE,
    )
    job_id = str(job["id"])
    llm.script(reply(tool_calls=[call("box__Bash", {"command": "make world"})]), reply("built"))
    (started,) = scheduler.tick(services, now_ms=T)["cron"]
    event = wait_for(lambda: node_events(sender, node, "tool.invoke"), timeout=30)[0]
    assert scheduler.tick(services, now_ms=T + 2 * MINUTE)["cron"] == []  # still running: not again
    scheduler.tick(services, now_ms=T + 6 * MINUTE)  # the watch sees it alive and renews the marker
    # an hour past the start the marker would be stale, but the run was seen alive since
    assert scheduler.tick(services, now_ms=T + 65 * MINUTE)["cron"] == []
    state = services.cron.get_job(job_id)["state"]
    assert state["runningAtMs"] == started["startedAtMs"] and state["runningCheckedAtMs"] == T + 65 * MINUTE
    assert sum("the long job" in text for text in user_texts(llm)) == 1
    node.call("tool.result", {"callId": event["callId"], "result": "done"})
    record = finished_record(agent, job_id)
    assert record["status"] == "ok" and record["summary"] == "built"
    state = services.cron.get_job(job_id)["state"]
    assert "runningAtMs" not in state and "runningCheckedAtMs" not in state
    assert list(services.table.query(keys.cron_active_pk(job_id))) == []


def test_a_run_that_never_started_is_recorded_as_failed(
    agent: Any, services: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = add_job(services, {"mode": "systemEvent", "text": "lost in the post"})
    # the run's start is lost without an error (what a crash right after the executor looks like)
    monkeypatch.setattr(runs, "submit", lambda *args, **kwargs: runs.Submitted(run_id="x", queued=False))
    (started,) = scheduler.tick(services, now_ms=T)["cron"]
    assert started["status"] == "ok"  # started, as far as the tick can tell
    assert scheduler.tick(services, now_ms=T + 4 * MINUTE)["cronEnded"] == 0  # not looked at yet
    assert scheduler.tick(services, now_ms=T + 6 * MINUTE)["cronEnded"] == 1
    (record,) = records(agent, job_id)
    assert record["status"] == "error" and record["error"] == cron_runs.VANISHED
    assert record["sessionKey"] == "agent:main:main"  # a systemEvent runs in the main session
    assert "runningAtMs" not in services.cron.get_job(job_id)["state"]


@pytest.mark.atomic_table  # a node answers at once: its answer races the turn's wait registering its token
def test_max_concurrent_runs_counts_the_runs_still_going(
    agent: Any, connect: Any, sender: Any, services: Any, llm: FakeLLM
) -> None:
    node = connect("node", "box")
    services.config.set_path("cron.maxConcurrentRuns", 1)
    first = add_job(services, {"mode": "task", "message": "first job", "deliver": False}, name="first")
    second = add_job(services, {"mode": "task", "message": "second job", "deliver": False}, at_ms=T + 1, name="2nd")

    def respond(request: Any) -> Any:
        text = user_texts_of(request)
        if "first job" in text and not any(m["role"] == "tool" for m in request.body["messages"]):
            return reply(tool_calls=[call("box__Bash", {"command": "sleep 5"})])
        return reply("done")

    llm.responder = respond
    assert [r["jobId"] for r in scheduler.tick(services, now_ms=T + 1)["cron"]] == [first]
    event = wait_for(lambda: node_events(sender, node, "tool.invoke"), timeout=30)[0]
    assert scheduler.tick(services, now_ms=T + 2)["cron"] == []  # the one slot is taken
    node.call("tool.result", {"callId": event["callId"], "result": "slept"})
    finished_record(agent, first)
    assert [r["jobId"] for r in scheduler.tick(services, now_ms=T + 3)["cron"]] == [second]
    assert finished_record(agent, second)["status"] == "ok"


def user_texts_of(request: Any) -> str:
    users = [m for m in request.body["messages"] if m["role"] == "user"]
    content = users[-1]["content"] if users else ""
    return content if isinstance(content, str) else str(content)


def test_a_run_that_vanished_is_recorded_once_when_its_time_is_up(agent: Any, services: Any) -> None:
    job_id = add_job(services, {"mode": "task", "message": "x", "timeoutSeconds": 10})
    deadline = T + 10_000
    services.table.put(
        keys.cron_active(job_id, "lost-run"),
        {
            "jobId": job_id,
            "sessionKey": f"agent:main:cron:{job_id}:lost-run",
            "runId": "lost-run",
            "deadline": deadline,
            "seconds": 10,
        },
        gsi=keys.cron_active_index(deadline, job_id),
    )
    assert cron_runs.expire(services, deadline + 1) == 1
    assert cron_runs.expire(services, deadline + 2) == 0
    (record,) = records(agent, job_id)
    assert record["status"] == "error" and record["error"] == "Cron run timed out after 10s"
    # the run's own end, should it still come, does not write a second record
    cron_runs.finished(
        services, {"jobId": job_id, "runId": "lost-run", "timed": True, "startedAt": T}, reply="late", error=None
    )
    assert len(records(agent, job_id)) == 1


def test_the_template_function_ticks(agent: Any, services: Any, llm: FakeLLM, monkeypatch: Any) -> None:
    from orbital.local import stack
    from orbital.local.template import load_template

    host = stack.FunctionHost(ROOT, load_template(ROOT / "template.yaml"))
    job_id = add_job(services, {"mode": "task", "message": "from the schedule", "deliver": False}, at_ms=T)
    monkeypatch.setattr(services, "now_ms", lambda: T + 1)  # the function reads the clock through the services
    llm.script(reply("ticked"))
    summary = host.invoke("SchedulerTickFunction", {"source": "aws.scheduler", "detail": {}})
    assert summary["cron"] == 1 and summary["cronEnded"] == 0
    assert finished_record(agent, job_id)["status"] == "ok"


def test_the_tick_schedules_heartbeats_of_new_agents_once(services: Any) -> None:
    assert scheduler.tick(services, now_ms=T)["heartbeats"] == []
    first = services.heartbeats.get("main")
    assert first["nextHeartbeatAt"] == T + 30 * MINUTE  # the default interval
    services.config.set_path("agents.list", [{"id": "main"}, {"id": "ops", "heartbeat": {"every": "1h"}}])
    scheduler.tick(services, now_ms=T + MINUTE)
    assert services.heartbeats.get("main") == first  # existing state is left alone
    assert services.heartbeats.get("ops")["nextHeartbeatAt"] == T + MINUTE + 60 * MINUTE


def test_a_due_heartbeat_with_a_checklist_runs_the_agent(agent: Any, services: Any, llm: FakeLLM) -> None:
    checklist = b"# Checks\n- Tell me if the backup box is over 90% full.\n"
    services.workspace.put(keys.workspace_object("main", "HEARTBEAT.md"), checklist, content_type="text/markdown")
    noon = 1_900_000_000_000 - 1_900_000_000_000 % (24 * 60 * MINUTE) + 12 * 60 * MINUTE  # inside 08:00-23:00 UTC
    scheduler.tick(services, now_ms=noon)
    llm.script(reply("HEARTBEAT_OK"))
    (ran,) = scheduler.tick(services, now_ms=noon + 30 * MINUTE)["heartbeats"]
    assert ran["status"] == "ran" and ran["sessionKey"] == "agent:main:heartbeat:system:internal"
    history = wait_for(
        lambda: [
            m
            for m in agent.call("session.preview", {"sessionKey": ran["sessionKey"]})["messages"]
            if m["role"] == "assistant"
        ]
    )
    assert "HEARTBEAT_OK" in str(history[0]["content"])
    (prompt,) = user_texts(llm)
    assert prompt == services.config.effective()["agents"]["defaultHeartbeat"]["prompt"]
    assert "backup box is over 90% full" in llm.requests[0].body["messages"][0]["content"]  # the checklist, in context
    assert scheduler.tick(services, now_ms=noon + 30 * MINUTE + 1)["heartbeats"] == []  # claimed: not again
