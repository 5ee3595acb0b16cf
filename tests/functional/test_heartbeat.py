"""Heartbeats over moto (spec §10, fix F8): the schedule, due runs with a controlled clock and every skip reason,
claims that hold under racing ticks, manual triggers that really run the agent, delivery targets and the delivery
filter with its 24 h dedupe."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

import pytest
from orbital.agent import heartbeat_runs, runs
from orbital.agent.seed import template
from orbital.domain.config import DEFAULT_HEARTBEAT_PROMPT
from orbital.engines import heartbeat as engine
from orbital.methods import registry
from orbital.store import keys

from tests.conftest import wait_for
from tests.support.fake_llm import FakeLLM, reply

MINUTE = 60_000
EVERY = 30 * MINUTE
HB_KEY = "agent:main:heartbeat:system:internal"
CHECKLIST = "# Checks\n- Look at the disk usage of the backup box and tell me when it passes 90%.\n"
PEER = {"kind": "dm", "id": "+31600000000", "name": "Ann"}


def at(text: str) -> int:
    """Epoch milliseconds of a UTC wall-clock time `YYYY-MM-DD HH:MM`."""
    return int(datetime.strptime(text, "%Y-%m-%d %H:%M").replace(tzinfo=UTC).timestamp() * 1000)


NOON = at("2026-03-10 12:00")  # inside the default active hours (08:00-23:00 UTC)
T0 = NOON - EVERY  # scheduled at T0, due at NOON


def valid(method: str, payload: dict[str, Any]) -> dict[str, Any]:
    spec = registry().get(method)
    assert spec is not None and spec.result is not None
    spec.result.model_validate(payload)
    return payload


def write_file(services: Any, text: str, agent_id: str = "main") -> None:
    services.workspace.put(keys.workspace_object(agent_id, "HEARTBEAT.md"), text.encode(), content_type="text/markdown")


def set_config(services: Any, path: str, value: Any) -> None:
    services.config.set_path(path, value)


def last_active(services: Any, channel: str = "whatsapp", session_key: str = "agent:main:main") -> None:
    services.last_active.put(
        "main",
        {"channel": channel, "accountId": "default", "peer": PEER, "sessionKey": session_key, "timestamp": 1},
    )


class Submits:
    """Stands in for `runs.submit`: records each call (thread-safe) and answers as an idle session would."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def __call__(self, services: Any, session_key: str, data: dict[str, Any], **kwargs: Any) -> runs.Submitted:
        with self.lock:
            self.calls.append({"sessionKey": session_key, "data": data, **kwargs})
            return runs.Submitted(run_id=f"run-{len(self.calls)}", queued=False)


@pytest.fixture
def submits(monkeypatch: pytest.MonkeyPatch) -> Submits:
    recorder = Submits()
    monkeypatch.setattr(runs, "submit", recorder)
    return recorder


def live_run(run_id: str, services: Any) -> dict[str, Any]:
    """A run that holds its session right now (young, leased)."""
    now = services.now_ms()
    return {"runId": run_id, "startedAt": now, "leaseUntil": now + 10 * MINUTE}


def state(services: Any, agent_id: str = "main") -> dict[str, Any]:
    found = services.heartbeats.get(agent_id)
    assert found is not None
    return found


# --- schedule / heartbeat.start ---------------------------------------------------------------------------------------


def test_schedule_plans_every_configured_agent_and_drops_the_rest(services: Any) -> None:
    set_config(
        services,
        "agents.list",
        [{"id": "main"}, {"id": "ops", "heartbeat": {"every": "5m"}}, {"id": "quiet", "heartbeat": {"every": "0"}}],
    )
    services.heartbeats.put("gone", {"nextHeartbeatAt": 1})
    services.heartbeats.put("main", {"lastHeartbeatText": "kept", "lastHeartbeatSentAt": 5})
    agents = engine.schedule(services, T0)
    assert set(agents) == {"main", "ops", "quiet"}
    assert agents["main"] == {
        "agentId": "main",
        "nextHeartbeatAt": T0 + EVERY,
        "lastHeartbeatAt": None,
        "lastHeartbeatText": "kept",
        "lastHeartbeatSentAt": 5,
    }
    assert agents["ops"]["nextHeartbeatAt"] == T0 + 5 * MINUTE
    assert agents["quiet"]["nextHeartbeatAt"] is None
    assert services.heartbeats.get("gone") is None


def test_heartbeat_start_answers_with_the_status(rpc: Any, services: Any) -> None:
    last_active(services)
    before = services.now_ms()
    payload = valid("heartbeat.start", rpc.call("heartbeat.start"))
    assert payload["message"] == "Heartbeat scheduler started"
    main = payload["agents"]["main"]
    assert before + EVERY <= main["nextHeartbeatAt"] <= services.now_ms() + EVERY
    assert main["lastActive"] == {"channel": "whatsapp", "accountId": "default", "peer": PEER, "timestamp": 1}
    assert valid("heartbeat.status", rpc.call("heartbeat.status"))["agents"] == payload["agents"]


# --- run_due: the checks ----------------------------------------------------------------------------------------------


def test_nothing_runs_before_it_is_due(services: Any, submits: Submits) -> None:
    write_file(services, CHECKLIST)
    engine.schedule(services, T0)
    assert heartbeat_runs.run_due(services, NOON - 1) == []
    assert submits.calls == []
    assert state(services)["nextHeartbeatAt"] == NOON


def test_a_due_heartbeat_runs_and_is_rescheduled(services: Any, submits: Submits) -> None:
    write_file(services, CHECKLIST)
    engine.schedule(services, T0)
    [outcome] = heartbeat_runs.run_due(services, NOON + 5)
    assert outcome["status"] == "ran"
    assert outcome["sessionKey"] == HB_KEY
    assert outcome["nextHeartbeatAt"] == NOON + 5 + EVERY
    assert outcome["deliver"] is None  # nobody talked to the agent yet
    [call] = submits.calls
    assert call["sessionKey"] == HB_KEY
    assert call["data"] == {"text": DEFAULT_HEARTBEAT_PROMPT}
    assert call["extra"] == {"origin": {"kind": "heartbeat", "agentId": "main", "reason": "interval"}}
    assert callable(call["emit_error"])
    after = state(services)
    assert (after["lastHeartbeatAt"], after["nextHeartbeatAt"]) == (NOON + 5, NOON + 5 + EVERY)
    assert heartbeat_runs.run_due(services, NOON + 6) == []  # not due again until the next interval
    assert services.sessions.registry_entry(HB_KEY) is not None


def test_outside_active_hours_only_reschedules(services: Any, submits: Submits) -> None:
    write_file(services, CHECKLIST)
    night = at("2026-03-10 03:00")
    engine.schedule(services, night - EVERY)
    [outcome] = heartbeat_runs.run_due(services, night)
    assert (outcome["status"], outcome["skipReason"]) == ("skipped", "outside_active_hours")
    after = state(services)
    assert after["nextHeartbeatAt"] == night + EVERY
    assert after["lastHeartbeatAt"] is None  # as GSV: nothing was attempted
    assert submits.calls == []


def test_active_hours_in_the_users_timezone(services: Any, submits: Submits) -> None:
    write_file(services, CHECKLIST)
    set_config(services, "userTimezone", "Asia/Tokyo")  # 12:00 UTC is 21:00 in Tokyo
    set_config(services, "agents.defaultHeartbeat.activeHours", {"start": "07:00", "end": "20:00", "timezone": "user"})
    engine.schedule(services, T0)
    [outcome] = heartbeat_runs.run_due(services, NOON)
    assert outcome["skipReason"] == "outside_active_hours"
    set_config(services, "userTimezone", "Europe/Amsterdam")  # 13:00 there
    [outcome] = heartbeat_runs.run_due(services, NOON + EVERY)
    assert outcome["status"] == "ran"


def test_missing_and_empty_heartbeat_files_skip(services: Any, submits: Submits) -> None:
    engine.schedule(services, T0)
    [outcome] = heartbeat_runs.run_due(services, NOON)
    assert (outcome["status"], outcome["skipReason"]) == ("skipped", "no_heartbeat_file")
    assert state(services)["lastHeartbeatAt"] == NOON  # skipped after the attempt, as GSV
    write_file(services, template("HEARTBEAT.md"))  # the shipped template asks for nothing
    [outcome] = heartbeat_runs.run_due(services, NOON + EVERY)
    assert outcome["skipReason"] == "empty_heartbeat_file"
    write_file(services, "<!-- later -->\n#\n---\n\n## ---\n===\n")
    [outcome] = heartbeat_runs.run_due(services, NOON + 2 * EVERY)
    assert outcome["skipReason"] == "empty_heartbeat_file"
    assert submits.calls == []
    assert state(services)["nextHeartbeatAt"] == NOON + 3 * EVERY


def test_a_busy_conversation_skips(services: Any, submits: Submits) -> None:
    write_file(services, CHECKLIST)
    last_active(services, session_key="agent:main:main")
    engine.schedule(services, T0)

    def running(meta: dict[str, Any]) -> bool:
        meta["currentRun"] = live_run("user-run", services)
        return True

    services.sessions.update_meta("agent:main:main", running)
    [outcome] = heartbeat_runs.run_due(services, NOON)
    assert outcome["skipReason"] == "session_busy"

    def queued(meta: dict[str, Any]) -> bool:
        meta.pop("currentRun", None)
        meta["queue"] = [{"runId": "next", "inputId": "i", "queuedAt": NOON}]
        return True

    services.sessions.update_meta("agent:main:main", queued)
    [outcome] = heartbeat_runs.run_due(services, NOON + EVERY)
    assert outcome["skipReason"] == "session_busy"

    def idle(meta: dict[str, Any]) -> bool:
        meta["queue"] = []
        return True

    services.sessions.update_meta("agent:main:main", idle)
    [outcome] = heartbeat_runs.run_due(services, NOON + 2 * EVERY)
    assert outcome["status"] == "ran"
    assert len(submits.calls) == 1


def test_a_heartbeat_still_running_is_not_queued_behind(services: Any, submits: Submits) -> None:
    write_file(services, CHECKLIST)
    engine.schedule(services, T0)

    def running(meta: dict[str, Any]) -> bool:
        meta["currentRun"] = live_run("previous-heartbeat", services)
        return True

    services.sessions.update_meta(HB_KEY, running)
    [outcome] = heartbeat_runs.run_due(services, NOON)
    assert outcome["skipReason"] == "heartbeat_in_progress"
    assert submits.calls == []


def test_runs_that_died_without_releasing_their_session_do_not_block(services: Any, submits: Submits) -> None:
    write_file(services, CHECKLIST)
    last_active(services, session_key="agent:main:main")
    engine.schedule(services, T0)
    dead = {"runId": "dead", "startedAt": services.now_ms() - 10 * MINUTE, "leaseUntil": services.now_ms() - MINUTE}
    for key in ("agent:main:main", HB_KEY):
        services.sessions.update_meta(key, lambda m: m.update(currentRun=dict(dead)) or True)
    [outcome] = heartbeat_runs.run_due(services, NOON)
    assert outcome["status"] == "ran"  # the submit takes the heartbeat session over
    assert len(submits.calls) == 1


def test_an_interval_turned_off_after_scheduling_stops_the_heartbeats(services: Any, submits: Submits) -> None:
    write_file(services, CHECKLIST)
    engine.schedule(services, T0)
    set_config(services, "agents.defaultHeartbeat.every", "0")
    [outcome] = heartbeat_runs.run_due(services, NOON)
    assert (outcome["skipReason"], outcome["nextHeartbeatAt"]) == ("disabled", None)
    assert heartbeat_runs.run_due(services, NOON + 10 * EVERY) == []
    assert submits.calls == []


def test_a_run_that_cannot_start_is_reported_and_rescheduled(services: Any) -> None:
    write_file(services, CHECKLIST)
    engine.schedule(services, T0)
    [outcome] = heartbeat_runs.run_due(services, NOON)  # no agent state machine configured here
    assert outcome["status"] == "failed"
    assert "ORBITAL_AGENT_TURN_ARN" in outcome["error"]
    assert state(services)["nextHeartbeatAt"] == NOON + EVERY


# --- run_due: racing ticks --------------------------------------------------------------------------------------------


def _rendezvous(monkeypatch: pytest.MonkeyPatch, services: Any, parties: int) -> None:
    """Make the first state read of each thread wait for the others, so every thread reads the same version before
    any of them writes: all but one of their writes must then fail."""
    repo = services.heartbeats
    original = repo.get_versioned
    barrier = threading.Barrier(parties, timeout=10)
    seen: set[int] = set()

    def read(agent_id: str) -> Any:
        found = original(agent_id)
        me = threading.get_ident()
        if me not in seen:
            seen.add(me)
            barrier.wait()
        return found

    monkeypatch.setattr(repo, "get_versioned", read)


def _parallel(*works: Any) -> list[Any]:
    """Run each callable in its own thread; their results in order."""
    results: list[Any] = [None] * len(works)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            results[i] = works[i]()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(works))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    return results


@pytest.mark.atomic_table
def test_two_overlapping_ticks_run_a_heartbeat_once(
    services: Any, submits: Submits, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_file(services, CHECKLIST)
    engine.schedule(services, T0)
    _rendezvous(monkeypatch, services, 2)
    first, second = _parallel(*[lambda: heartbeat_runs.run_due(services, NOON)] * 2)
    handled = first + second
    assert [o["status"] for o in handled] == ["ran"]
    assert len(submits.calls) == 1
    assert state(services)["nextHeartbeatAt"] == NOON + EVERY


@pytest.mark.atomic_table
def test_many_ticks_without_rendezvous_still_run_it_once(services: Any, submits: Submits) -> None:
    write_file(services, CHECKLIST)
    engine.schedule(services, T0)
    results = _parallel(*[lambda: heartbeat_runs.run_due(services, NOON)] * 4)
    assert sum(len(r) for r in results) == 1
    assert len(submits.calls) == 1


# --- delivery targets -------------------------------------------------------------------------------------------------


def test_target_last_delivers_to_the_last_conversation(services: Any, submits: Submits) -> None:
    last_active(services, channel="whatsapp")
    assert heartbeat_runs.trigger(services, "main", NOON)["ok"] is True
    deliver = submits.calls[0]["extra"]["deliver"]
    assert deliver == {
        "kind": "heartbeat",
        "agentId": "main",
        "channel": "whatsapp",
        "accountId": "default",
        "peer": PEER,
    }
    meta = services.sessions.load_meta(HB_KEY)
    assert meta["channelContext"] == {"channel": "whatsapp", "accountId": "default", "peer": PEER}


def test_target_none_is_silent(services: Any, submits: Submits) -> None:
    last_active(services)
    set_config(services, "agents.defaultHeartbeat.target", "none")
    heartbeat_runs.trigger(services, "main", NOON)
    assert "deliver" not in submits.calls[0]["extra"]


def test_a_channel_target_needs_the_last_conversation_on_that_channel(services: Any, submits: Submits) -> None:
    last_active(services, channel="whatsapp")
    set_config(services, "agents.list", [{"id": "main", "heartbeat": {"target": "discord"}}])
    heartbeat_runs.trigger(services, "main", NOON)
    assert "deliver" not in submits.calls[-1]["extra"]
    last_active(services, channel="discord")
    heartbeat_runs.trigger(services, "main", NOON)
    assert submits.calls[-1]["extra"]["deliver"]["channel"] == "discord"


def test_no_conversation_yet_means_no_delivery(services: Any, submits: Submits) -> None:
    heartbeat_runs.trigger(services, "main", NOON)
    assert "deliver" not in submits.calls[0]["extra"]


# --- heartbeat.trigger ------------------------------------------------------------------------------------------------


def test_trigger_reports_a_run_that_cannot_start(rpc: Any) -> None:
    payload = valid("heartbeat.trigger", rpc.call("heartbeat.trigger", {"agentId": "ops"}))
    assert payload["ok"] is False
    assert payload["message"].startswith("Heartbeat failed for agent ops: The agent is not configured")


def test_trigger_defaults_to_main_not_the_default_agent(rpc: Any, services: Any, submits: Submits) -> None:
    set_config(services, "agents.list", [{"id": "ops", "default": True}])
    payload = valid("heartbeat.trigger", rpc.call("heartbeat.trigger", {}))
    assert payload == {
        "ok": True,
        "message": "Heartbeat triggered for agent main (session: agent:main:heartbeat:system:internal)",
        "runId": "run-1",  # what the run was given (the recorder names them run-1, run-2, ...)
    }
    assert submits.calls[0]["sessionKey"] == HB_KEY
    assert submits.calls[0]["extra"]["origin"] == {"kind": "heartbeat", "agentId": "main", "reason": "manual"}
    assert rpc.call("heartbeat.trigger", {"agentId": "  "})["message"].startswith("Heartbeat triggered for agent main")


def test_trigger_ignores_the_skip_checks(rpc: Any, services: Any, submits: Submits) -> None:
    # no HEARTBEAT.md, the conversation busy, and a night-only window: a manual run still goes
    last_active(services)
    services.sessions.update_meta("agent:main:main", lambda m: m.update(currentRun=live_run("x", services)) or True)
    set_config(services, "agents.defaultHeartbeat.activeHours", {"start": "00:00", "end": "00:01"})
    payload = rpc.call("heartbeat.trigger", {"agentId": "main"})
    assert payload["ok"] is True
    assert len(submits.calls) == 1
    assert services.heartbeats.get("main")["lastHeartbeatAt"] is not None


def test_trigger_runs_the_agent(agent: Any, services: Any, llm: FakeLLM) -> None:
    llm.script(reply("HEARTBEAT_OK"))
    payload = valid("heartbeat.trigger", agent.call("heartbeat.trigger", {"runId": "hb-run-1"}))
    assert payload == {
        "ok": True,
        "message": "Heartbeat triggered for agent main (session: agent:main:heartbeat:system:internal)",
        "runId": "hb-run-1",  # the id asked for (Orbital's), so whoever asked can follow the run
    }

    def finished() -> list[dict[str, Any]] | None:
        preview = agent.call("session.preview", {"sessionKey": HB_KEY})
        done = not agent.call("session.stats", {"sessionKey": HB_KEY})["isProcessing"]
        return preview["messages"] if done and len(preview["messages"]) == 2 else None

    messages = wait_for(finished, timeout=30)
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[0]["content"] == DEFAULT_HEARTBEAT_PROMPT
    assert llm.requests[0].body["messages"][-1] == {"role": "user", "content": DEFAULT_HEARTBEAT_PROMPT}
    # the heartbeat session is its own: the main session was never touched
    assert agent.call("session.preview", {"sessionKey": "main"})["messages"] == []


def test_a_due_heartbeat_alert_reaches_the_conversation_once(
    agent: Any, services: Any, llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orbital.channels import delivery

    sent: list[tuple[dict[str, Any], str]] = []

    def send(_services: Any, target: dict[str, Any], text: str, **_: Any) -> bool:
        sent.append((target, text))
        return True

    monkeypatch.setattr(delivery, "send", send)
    alert = "The backup box is at 93% disk usage."
    llm.script(reply(alert), reply(alert))
    write_file(services, CHECKLIST)
    last_active(services)
    engine.schedule(services, T0)
    [outcome] = heartbeat_runs.run_due(services, NOON)
    assert outcome["status"] == "ran"
    assert outcome["deliver"]["channel"] == "whatsapp"
    [(target, text)] = wait_for(lambda: list(sent), timeout=30)
    assert text == alert
    assert (target["kind"], target["channel"], target["peer"]) == ("heartbeat", "whatsapp", PEER)
    assert state(services)["lastHeartbeatText"] == alert
    system = llm.requests[0].body["messages"][0]["content"]
    assert "whatsapp" in system  # the heartbeat session knows the conversation it reports to

    # the same alert a moment later is not sent again
    second = heartbeat_runs.trigger(services, "main", NOON + MINUTE)
    assert second["ok"] is True

    def idle() -> bool:
        stats = agent.call("session.stats", {"sessionKey": HB_KEY})
        return len(llm.requests) == 2 and not stats["isProcessing"]

    wait_for(idle, timeout=30)
    assert len(sent) == 1


# --- filter_delivery --------------------------------------------------------------------------------------------------


def test_acknowledgements_are_dropped_and_leave_the_state_alone(services: Any) -> None:
    engine.schedule(services, T0)
    assert engine.filter_delivery(services, "main", "HEARTBEAT_OK", NOON) is None
    assert engine.filter_delivery(services, "main", "Nothing new. HEARTBEAT_OK", NOON) is None
    after = state(services)
    assert (after["lastHeartbeatText"], after["lastHeartbeatSentAt"]) == (None, None)


def test_alerts_are_delivered_once_a_day(services: Any) -> None:
    engine.schedule(services, T0)
    assert engine.filter_delivery(services, "main", "  Disk full!\n", NOON) == "Disk full!"  # short, still sent (F8)
    after = state(services)
    assert (after["lastHeartbeatText"], after["lastHeartbeatSentAt"]) == ("Disk full!", NOON)
    assert after["nextHeartbeatAt"] == NOON  # the schedule is untouched
    assert engine.filter_delivery(services, "main", "Disk full!", NOON + 60 * MINUTE) is None
    assert engine.filter_delivery(services, "main", "HEARTBEAT_OK: Disk full!", NOON + 60 * MINUTE) is None
    assert engine.filter_delivery(services, "main", "Printer jammed.", NOON + 61 * MINUTE) == "Printer jammed."
    assert engine.filter_delivery(services, "main", "Disk full!", NOON + 62 * MINUTE) == "Disk full!"
    day = 24 * 60 * MINUTE
    assert engine.filter_delivery(services, "main", "Disk full!", NOON + 62 * MINUTE + day - 1) is None
    assert engine.filter_delivery(services, "main", "Disk full!", NOON + 62 * MINUTE + day) == "Disk full!"


def test_an_agent_without_state_gets_one_on_its_first_alert(services: Any) -> None:
    assert engine.filter_delivery(services, "ops", "Queue stuck.", NOON) == "Queue stuck."
    assert state(services, "ops")["lastHeartbeatText"] == "Queue stuck."
    assert engine.filter_delivery(services, "ops", "Queue stuck.", NOON + 1) is None


@pytest.mark.atomic_table
def test_the_same_alert_delivered_in_parallel_goes_out_once(services: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    engine.schedule(services, T0)
    _rendezvous(monkeypatch, services, 2)
    results = _parallel(*[lambda: engine.filter_delivery(services, "main", "Disk full!", NOON)] * 2)
    assert sorted(results, key=str) == ["Disk full!", None]
    assert state(services)["lastHeartbeatText"] == "Disk full!"


@pytest.mark.atomic_table
def test_a_claim_and_a_delivery_racing_both_land(
    services: Any, submits: Submits, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_file(services, CHECKLIST)
    engine.schedule(services, T0)
    _rendezvous(monkeypatch, services, 2)
    handled, sent = _parallel(
        lambda: heartbeat_runs.run_due(services, NOON),
        lambda: engine.filter_delivery(services, "main", "Disk full!", NOON),
    )
    assert [o["status"] for o in handled] == ["ran"]
    assert sent == "Disk full!"
    after = state(services)
    assert (after["nextHeartbeatAt"], after["lastHeartbeatAt"]) == (NOON + EVERY, NOON)
    assert (after["lastHeartbeatText"], after["lastHeartbeatSentAt"]) == ("Disk full!", NOON)
