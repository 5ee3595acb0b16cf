"""Token budgets over moto (ADR 0026): reservations in the table's day and month counters, refused before a run
(chat.send, cron, heartbeat) or between model calls (a note), parallel runs against one daily budget, the DynamoDB
calls each model call costs, and what `session.stats` shows."""

from __future__ import annotations

import json
import re
import threading
from typing import Any

import pytest
from orbital.agent import budgets, context
from orbital.domain.budgets import period_of
from orbital.store import keys
from orbital.store.usage import UsageRefusedError, day_attr

from tests.conftest import wait_for
from tests.support.agent import chat_events, final_of
from tests.support.fake_llm import FakeLLM, call, hang, reply


def counted(services: Any) -> tuple[int, int]:
    """(day, month) tokens in the table's counters now."""
    used = services.usage.read(period_of(services.now_ms()))
    return used.daily, used.monthly


def usage_calls(services: Any) -> list[str]:
    """The names of the DynamoDB operations on the usage counters from now on (botocore's before-call events)."""
    seen: list[str] = []

    def record(event_name: str, params: dict[str, Any], **_: Any) -> None:
        if _usage_key(params):
            seen.append(event_name.rsplit(".", 1)[-1])

    services.table.client.meta.events.register("before-call.dynamodb.*", record)
    return seen


def _usage_key(params: dict[str, Any]) -> bool:
    body = params.get("body") or b"{}"
    sent = json.loads(body.decode() if isinstance(body, bytes) else body)
    return sent.get("Key", {}).get("PK", {}).get("S") == keys.TOKEN_USAGE_PK


def daily(limit: int) -> dict[str, Any]:
    return {"budgets": {"daily": limit}}


# --- the counters --------------------------------------------------------------------------------------------------


def test_a_reservation_holds_the_estimate_until_it_settles_to_the_real_usage(services: Any) -> None:
    first = budgets.reserve(services, daily(100), None, 60)
    assert counted(services) == (60, 60)  # the estimate is held while the call runs
    first.settle(70)
    assert counted(services) == (70, 70)  # then replaced by the real usage
    with pytest.raises(budgets.BudgetExceededError) as refused:
        budgets.reserve(services, daily(100), None, 31)
    assert (refused.value.scope, refused.value.used, refused.value.limit) == ("daily", 70, 100)
    assert counted(services) == (70, 70)  # a refusal changes nothing
    last = budgets.reserve(services, daily(100), None, 30)  # exactly up to the limit
    assert counted(services) == (100, 100)
    last.release()  # the call failed
    last.settle(500)  # and nothing more happens to a spend that ended
    assert counted(services) == (70, 70)
    with pytest.raises(budgets.BudgetExceededError) as monthly:
        budgets.reserve(services, {"budgets": {"daily": 1000, "monthly": 80}}, None, 20)
    assert (monthly.value.scope, monthly.value.used, monthly.value.limit) == ("monthly", 70, 80)
    with pytest.raises(budgets.BudgetExceededError) as too_big:
        budgets.reserve(services, daily(100), None, 101)  # more than the whole budget
    assert (too_big.value.scope, too_big.value.used) == ("daily", 70)
    period = period_of(services.now_ms())
    item = services.table.get(keys.token_usage(period.month))
    assert item.attrs == {"m": 70, day_attr(period.day): 70}
    assert item.ttl == period.expires_at  # the counters go a little after their month


def test_dynamodb_calls_per_model_call(services: Any) -> None:
    calls = usage_calls(services)
    budgets.reserve(services, {}, None, 40).settle(55)  # no gateway limit: the usage is counted, nothing reserved
    assert calls == ["UpdateItem"]
    calls.clear()
    budgets.reserve(services, {}, None, 40).release()
    assert calls == []
    budgets.reserve(services, daily(10_000), None, 40).settle(55)  # a limit: reserved, then settled
    assert calls == ["UpdateItem", "UpdateItem"]
    calls.clear()
    budgets.reserve(services, daily(10_000), None, 40).settle(40)  # the estimate was exact: nothing to settle
    assert calls == ["UpdateItem"]
    calls.clear()
    budgets.reserve(services, daily(10_000), None, 40).release()
    assert calls == ["UpdateItem", "UpdateItem"]
    assert counted(services) == (150, 150)


def hold_usage_updates(services: Any, parties: int) -> None:
    """Hold the next `parties` updates of the usage counters until every one of them is about to be written (the
    table port's `update`): they reach the table together, each computed from the counters as they stood before
    any of them, the worst case of parallel runs on different Lambdas. Later updates pass at once."""
    barrier = threading.Barrier(parties, timeout=30)
    lock = threading.Lock()
    arrived = [0]
    table = services.table
    update = table.update

    def held(key: tuple[str, str], **kwargs: Any) -> Any:
        if key[0] == keys.TOKEN_USAGE_PK:
            with lock:
                hold = arrived[0] < parties
                arrived[0] += 1
            if hold:
                barrier.wait()
        return update(key, **kwargs)

    table.update = held


@pytest.mark.atomic_table
def test_simultaneous_reservations_cannot_share_the_last_tokens(services: Any) -> None:
    """Eight model calls reserve at the same moment, each sent before any other has landed, against a daily budget
    that fits two: two get their tokens, six are refused, and the counter never passes the limit."""
    limit, estimate, error_per_call, threads = 250, 100, 7, 8
    hold_usage_updates(services, threads)
    spends: list[budgets.Reservation] = []
    refusals: list[budgets.BudgetExceededError] = []
    lock = threading.Lock()

    def call_model() -> None:
        try:
            spend_ = budgets.reserve(services, daily(limit), None, estimate)
        except budgets.BudgetExceededError as exc:
            with lock:
                refusals.append(exc)
            return
        with lock:
            spends.append(spend_)

    workers = [threading.Thread(target=call_model) for _ in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join(60)
    assert (len(spends), len(refusals)) == (2, 6)
    assert all((r.scope, r.used, r.limit) == ("daily", 200, limit) for r in refusals)
    assert counted(services) == (200, 200)
    for spend_ in spends:
        spend_.settle(estimate + error_per_call)  # each call used a little more than estimated
    assert counted(services)[0] == 2 * (estimate + error_per_call) <= limit + error_per_call


@pytest.mark.atomic_table
def test_parallel_reservations_never_take_a_counter_past_its_limit(services: Any) -> None:
    """Eight threads reserve and settle against one daily budget until it refuses them: no reservation ever sees
    the counter past the limit, and the counter ends at exactly what was settled."""
    limit, estimate, threads = 1000, 30, 8
    start = threading.Barrier(threads)
    lock = threading.Lock()
    highest: list[int] = []
    settled: list[int] = []
    refusals: list[UsageRefusedError] = []
    failures: list[BaseException] = []

    def worker(index: int) -> None:
        try:
            start.wait()
            n = 0
            while True:
                try:
                    after = services.usage.reserve(period_of(services.now_ms()), estimate, daily=limit, monthly=None)
                except UsageRefusedError as refused:
                    with lock:
                        refusals.append(refused)
                    return
                real = estimate - (index + n) % 3  # some calls use a little less than their estimate
                services.usage.add(period_of(services.now_ms()), real - estimate)
                with lock:
                    highest.append(after.daily)
                    settled.append(real)
                n += 1
        except BaseException as exc:  # pragma: no cover - reported below
            failures.append(exc)

    workers = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join(60)
    assert not failures and not any(t.is_alive() for t in workers)
    assert max(highest) <= limit
    assert len(refusals) == threads
    assert all(r.scope == "daily" and r.used + estimate > limit for r in refusals)
    assert counted(services)[0] == sum(settled) <= limit
    assert len(settled) >= limit // estimate


# --- runs ----------------------------------------------------------------------------------------------------------


def spend(agent: Any, sender: Any, llm: FakeLLM, tokens: int, key: str = "agent:main:spender") -> None:
    """A run whose one model call uses `tokens` (input) + 1 (output)."""
    llm.script(reply("spent", usage={"input": tokens, "output": 1}))
    started = agent.call("chat.send", {"sessionKey": key, "message": "spend"})
    assert final_of(sender, agent.connection_id, started["runId"])["state"] == "final"


def test_chat_send_is_refused_before_the_run_when_the_daily_budget_is_spent(
    agent: Any, sender: Any, llm: FakeLLM
) -> None:
    spend(agent, sender, llm, 600)
    assert counted(agent.services) == (601, 601)
    agent.call("config.set", {"path": "budgets.daily", "value": 500})
    before = len(chat_events(sender, agent.connection_id))
    error = agent.error("chat.send", {"sessionKey": "main", "message": "one more", "runId": "refused"})
    assert error["code"] == 429
    assert error["message"].startswith("Token budget exceeded (daily: 601/500): ")
    assert "budgets.daily" in error["message"]
    assert error["retryable"] is False
    # no run: no model call, no event, nothing stored or queued, not even the session's registry entry
    assert len(llm.requests) == 1
    assert len(chat_events(sender, agent.connection_id)) == before
    assert agent.services.sessions.load_meta("agent:main:main") is None
    assert "agent:main:main" not in [s["sessionKey"] for s in agent.call("sessions.list")["sessions"]]
    assert counted(agent.services) == (601, 601)


def test_a_spent_session_budget_refuses_the_next_message_of_that_session_only(
    agent: Any, sender: Any, llm: FakeLLM
) -> None:
    spend(agent, sender, llm, 40, key="main")
    agent.call("config.set", {"path": "budgets.session", "value": 30})
    error = agent.error("chat.send", {"sessionKey": "main", "message": "two"})
    assert error["code"] == 429 and error["message"].startswith("Token budget exceeded (session: 41/30): ")
    # the estimate is the first model call's: system prompt, history and message
    needs = int(re.search(r"would need about (\d+) more tokens", error["message"])[1])
    agent.call("config.set", {"path": "budgets.session", "value": needs})  # room for a call, not for what is used
    error = agent.error("chat.send", {"sessionKey": "main", "message": "two"})
    assert error["message"].startswith(f"Token budget exceeded (session: 41/{needs}): ")
    spend(agent, sender, llm, 5, key="agent:main:other")  # another session has its own budget
    agent.call("session.patch", {"sessionKey": "main", "budget": {"maxTokens": None}})  # off for this session
    spend(agent, sender, llm, 5, key="main")


@pytest.mark.parametrize("scope", ["session", "daily", "monthly"])
def test_a_run_that_crosses_a_budget_mid_loop_ends_with_a_note(
    agent: Any, sender: Any, llm: FakeLLM, scope: str
) -> None:
    limit = 50_000  # far above the first call's estimate, far below its usage
    if scope == "session":
        agent.call("session.patch", {"sessionKey": "main", "budget": {"maxTokens": limit}})
    else:
        agent.call("config.set", {"path": f"budgets.{scope}", "value": limit})
    llm.script(
        reply(tool_calls=[call("gsv__ListFiles", {})], usage={"input": 100_000, "output": 7}),
        reply("never asked for"),
    )
    started = agent.call("chat.send", {"sessionKey": "main", "message": "look around"})
    final = final_of(sender, agent.connection_id, started["runId"])
    assert final["state"] == "final"
    text = final["message"]["content"][0]["text"]
    assert text.startswith(f"Token budget reached ({scope}: 100007/{limit})"), text
    assert final["message"]["model"] == budgets.NOTE_REASON
    found = budgets.exceeded_of(final["message"])
    assert found is not None and found.exoclaw_message == f"token budget exceeded ({scope}: 100007/{limit})"
    assert len(llm.requests) == 1  # the second model call was never made
    preview = agent.call("session.preview", {"sessionKey": "main"})
    assert preview["messages"][-1]["content"][0]["text"] == text  # the note is stored as the run's last word
    assert agent.call("session.stats", {"sessionKey": "main"})["isProcessing"] is False
    assert counted(agent.services) == (100_007, 100_007)  # the refused call reserved nothing


def test_cron_and_heartbeat_runs_are_refused_before_they_start(agent: Any, sender: Any, llm: FakeLLM) -> None:
    spend(agent, sender, llm, 600)
    agent.call("config.set", {"path": "budgets.monthly", "value": 500})
    schedule, spec = {"kind": "every", "everyMs": 3_600_000}, {"mode": "task", "message": "x"}
    job = agent.call("cron.add", {"name": "digest", "schedule": schedule, "spec": spec})["job"]
    agent.call("cron.run", {"id": job["id"], "mode": "force"})
    record = wait_for(lambda: agent.call("cron.runs", {"jobId": job["id"]})["runs"])[0]
    assert record["status"] == "error"
    assert record["error"].startswith("Token budget exceeded (monthly: 601/500): ")
    beat = agent.call("heartbeat.trigger", {"agentId": "main"})
    assert beat["ok"] is False
    assert "Token budget exceeded (monthly: 601/500): " in beat["message"]
    assert agent.services.sessions.load_meta("agent:main:heartbeat:system:internal") is None
    assert len(llm.requests) == 1  # neither reached the model


def test_a_channel_message_is_refused_before_the_run_and_told_why(
    agent: Any, connect: Any, sender: Any, llm: FakeLLM
) -> None:
    spend(agent, sender, llm, 600)
    agent.call("config.set", {"path": "budgets.daily", "value": 500})
    agent.call("config.set", {"path": "channels.test", "value": {"dmPolicy": "open"}})
    bridge = connect("channel", "bridge", channel="test")
    peer = {"kind": "dm", "id": "+15550001", "name": "Ann"}
    error = bridge.error(
        "channel.inbound",
        {
            "channel": "test",
            "accountId": "bridge",
            "peer": peer,
            "sender": {"id": peer["id"]},
            "message": {"id": "m1", "text": "hi"},
        },
    )
    assert error["code"] == 429 and error["retryable"] is False  # not worth delivering again
    said = [
        f["payload"]["message"]["text"]
        for f in sender.frames_to(bridge.connection_id)
        if f.get("event") == "channel.outbound"
    ]
    assert said == ["Sorry, I couldn't start on that: " + error["message"]]
    assert error["message"].startswith("Token budget exceeded (daily: 601/500): ")
    assert len(llm.requests) == 1


@pytest.mark.atomic_table
def test_parallel_runs_share_one_daily_budget(
    agent: Any, sender: Any, llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four sessions start at once against a daily budget that fits two of their model calls, and their four
    reservations reach the table together: two calls are reserved and held at the model together, the other two
    runs end with the note before calling it, and the persisted counter ends at what the two calls used: within
    the limit plus one call's estimate error."""
    monkeypatch.setattr(context, "estimate_request_tokens", lambda system, messages: 100)
    limit, error_per_call = 250, 7
    agent.call("config.set", {"path": "budgets.daily", "value": limit})
    llm.responder = lambda request: hang(30, then=reply("done", usage={"input": 100, "output": error_per_call}))
    hold_usage_updates(agent.services, 4)  # the four reservations reach the table together
    keys_ = [f"agent:main:parallel-{i}" for i in range(4)]
    runs = {agent.call("chat.send", {"sessionKey": k, "message": "go"})["runId"]: k for k in keys_}

    def notes() -> list[dict[str, Any]]:
        ended = [e for e in chat_events(sender, agent.connection_id) if e.get("state") == "final"]
        return [e for e in ended if e["runId"] in runs]

    refused = wait_for(lambda: notes() if len(notes()) == 2 else None, timeout=30)
    llm.wait_for_requests(2, timeout=30)
    assert len(llm.requests) == 2  # only the two reserved calls reached the model
    for event in refused:
        assert event["message"]["content"][0]["text"].startswith(f"Token budget reached (daily: 200/{limit})")
    assert counted(agent.services)[0] == 200  # both estimates held while the calls run
    llm.release()
    done = wait_for(lambda: notes() if len(notes()) == 4 else None, timeout=30)
    replies = [e for e in done if e["message"]["content"][0]["text"] == "done"]
    assert len(replies) == 2
    day = counted(agent.services)[0]
    assert day == 2 * (100 + error_per_call)
    assert day <= limit + error_per_call


def test_model_calls_of_a_run_cost_two_writes_with_a_limit_and_one_without(
    agent: Any, sender: Any, llm: FakeLLM
) -> None:
    calls = usage_calls(agent.services)
    llm.script(reply(tool_calls=[call("gsv__ListFiles", {})]), reply("listed"))
    started = agent.call("chat.send", {"sessionKey": "main", "message": "look"})
    final_of(sender, agent.connection_id, started["runId"])
    assert calls == ["UpdateItem", "UpdateItem"]  # no gateway limit: one write per model call (the usage)
    calls.clear()
    agent.call("config.set", {"path": "budgets.daily", "value": 1_000_000})
    llm.script(reply(tool_calls=[call("gsv__ListFiles", {})]), reply("listed"))
    started = agent.call("chat.send", {"sessionKey": "main", "message": "look again"})
    final_of(sender, agent.connection_id, started["runId"])
    # chat.send's check reads the day once; each model call reserves, then settles to its real usage
    assert calls == ["GetItem", "UpdateItem", "UpdateItem", "UpdateItem", "UpdateItem"]


def test_session_stats_show_what_is_used_and_the_limits(agent: Any, sender: Any, llm: FakeLLM) -> None:
    spend(agent, sender, llm, 40, key="main")
    spend(agent, sender, llm, 10, key="agent:main:other")
    agent.call("config.set", {"path": "budgets", "value": {"daily": 5000, "session": 900}})
    stats = agent.call("session.stats", {"sessionKey": "main"})
    period = period_of(agent.services.now_ms())
    assert stats["budget"] == {
        "session": {"used": 41, "limit": 900},
        "daily": {"used": 52, "limit": 5000, "period": period.day_name},
        "monthly": {"used": 52, "limit": None, "period": period.month},
    }
    assert stats["tokens"] == {"input": 40, "output": 1, "total": 41}  # the existing fields are unchanged
    assert budgets.status(agent.services, agent.services.config.effective())["daily"]["used"] == 52
