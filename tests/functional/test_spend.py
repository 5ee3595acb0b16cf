"""Spend caps in USD (ADR 0044) over moto and the local table: a run refused before any model call, a run stopped
between model calls, settling to the provider's reported usage (cache reads and writes at their own prices), every
kind of model call counted (chat, cron, compaction, embeddings), `spend.status`, the alert, and N parallel callers
against one small limit never spending more than it."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from orbital.agent import budgets, compaction, context, embeddings
from orbital.agent import spend as caps
from orbital.domain import spend as rules
from orbital.store import keys

from tests.conftest import wait_for
from tests.functional.test_windie_rest import FakeEmbeddings
from tests.support.agent import chat_events, final_of
from tests.support.fake_llm import FakeLLM, call, hang, reply

PRICE = {"inputPerMTok": 1000, "outputPerMTok": 2000, "cacheReadPerMTok": 100, "cacheWritePerMTok": 1250}
"""$0.001 per input token, $0.002 per output token: a call's dollars are easy to count."""


def priced(agent: Any, *, max_tokens: int = 100) -> None:
    agent.call("config.set", {"path": "spend.prices", "value": {"openai/gpt-test": PRICE}})
    agent.call("config.set", {"path": "providers.openai.maxTokens", "value": max_tokens})


def day(services: Any, scope: str = "global") -> rules.Window:
    return rules.window(rules.DAILY, services.now_ms(), rules.zone(services.config.effective()))


def used(services: Any, scope: str = "global", period: str = rules.DAILY) -> float:
    win = rules.window(period, services.now_ms(), rules.zone(services.config.effective()))
    return rules.to_usd(services.spend.read(period, win.key, scope).used)


def run(agent: Any, sender: Any, llm: FakeLLM, usage: dict[str, int], key: str = "agent:main:spender") -> dict:
    llm.script(reply("spent", usage=usage))
    started = agent.call("chat.send", {"sessionKey": key, "message": "spend"})
    final = final_of(sender, agent.connection_id, started["runId"])
    assert final["state"] == "final"
    return final


# --- before a run and between model calls --------------------------------------------------------------------------


def test_chat_send_is_refused_before_any_model_call_with_the_gsv_sentence(
    agent: Any, sender: Any, llm: FakeLLM
) -> None:
    priced(agent)
    agent.call("config.set", {"path": "spend.limits.daily", "value": 5})
    win = day(agent.services)
    agent.services.spend.add("daily", win.key, "global", rules.to_micro(4.98), 0, expires_at=win.expires_at)
    before = len(chat_events(sender, agent.connection_id))
    error = agent.error("chat.send", {"sessionKey": "main", "message": "one more"})
    assert error["code"] == 429
    assert error["message"] == "spend limit reached (daily: $4.98 / $5.00)"
    assert error["retryable"] is False
    assert error["details"]["spend"] == {"period": "daily", "scope": "global", "usedUsd": 4.98, "limitUsd": 5.0}
    assert llm.requests == []  # no model call
    assert len(chat_events(sender, agent.connection_id)) == before
    assert agent.services.sessions.load_meta("agent:main:main") is None


def test_a_model_without_a_price_is_refused_under_a_limit_naming_the_override(agent: Any, llm: FakeLLM) -> None:
    agent.call("config.set", {"path": "spend.limits.monthly", "value": 5})
    error = agent.error("chat.send", {"sessionKey": "main", "message": "hi"})
    assert error["code"] == 400
    assert 'spend.prices["openai/gpt-test"]' in error["message"]
    assert llm.requests == []
    agent.call("config.set", {"path": "spend.unpricedModels", "value": "allow"})
    assert agent.call("chat.send", {"sessionKey": "main", "message": "hi"})["runId"]


def test_a_run_reaching_a_limit_mid_loop_ends_with_a_note(agent: Any, sender: Any, llm: FakeLLM) -> None:
    priced(agent)
    agent.call("config.set", {"path": "spend.limits.daily", "value": 20})
    llm.script(
        reply(tool_calls=[call("gsv__ListFiles", {})], usage={"input": 19_000, "output": 0}),  # $19.00
        reply("never asked for"),
    )
    started = agent.call("chat.send", {"sessionKey": "main", "message": "look around"})
    final = final_of(sender, agent.connection_id, started["runId"])
    text = final["message"]["content"][0]["text"]
    assert text.startswith("Spend limit reached (daily: $19.00 / $20.00)"), text
    assert final["message"]["model"] == rules.NOTE_REASON
    found = budgets.exceeded_of(final["message"])
    assert found is not None and found.exoclaw_message == "spend limit exceeded (daily: $19.00/$20.00)"
    assert len(llm.requests) == 1
    assert used(agent.services) == pytest.approx(19.0)  # the refused call reserved nothing


# --- settling and what counts -----------------------------------------------------------------------------------------


def test_a_call_settles_to_the_reported_usage_with_cache_reads_at_their_price(
    agent: Any, sender: Any, llm: FakeLLM
) -> None:
    priced(agent)
    agent.call("config.set", {"path": "spend.limits.daily", "value": 100})
    agent.call("config.set", {"path": "spend.limits.session", "value": 50})
    run(agent, sender, llm, {"input": 1000, "output": 500, "cacheRead": 2000}, key="main")
    expected = 1000 * 0.001 + 500 * 0.002 + 2000 * 0.0001  # $2.20
    assert used(agent.services) == pytest.approx(expected)
    assert used(agent.services, period=rules.MONTHLY) == pytest.approx(expected)
    status = agent.call("spend.status", {"sessionKey": "main"})
    rows = {(p["scope"], p["period"]): p for p in status["periods"]}
    assert rows[("global", "daily")]["usedUsd"] == pytest.approx(expected)
    assert rows[("global", "daily")]["reservedUsd"] == 0
    assert rows[("global", "daily")]["limitUsd"] == 100
    assert rows[("global", "daily")]["resetsAt"] == day(agent.services).resets_at_ms
    assert rows[("session:agent:main:main", "session")]["usedUsd"] == pytest.approx(expected)
    assert rows[("session:agent:main:main", "session")]["limitUsd"] == 50
    assert status["top"]["sessions"][0] == {"sessionKey": "agent:main:main", "usedUsd": pytest.approx(expected)}
    assert (status["currency"], status["timeZone"], status["alertAt"]) == ("USD", "UTC", 0.8)


def test_cache_writes_are_priced_as_such(services: Any) -> None:
    config = {"spend": {"prices": {"anthropic/claude-x": PRICE}, "limits": {"daily": 10}}}
    hold = caps.reserve(services, config, caps.ModelCall("anthropic", "claude-x", 100, max_output=100))
    assert used(services) == pytest.approx(100 * 0.001 + 100 * 0.002)  # the worst case, while the call runs
    hold.settle({"input": 10, "output": 10, "cacheRead": 1000, "cacheWrite": 1000})
    assert used(services) == pytest.approx(0.01 + 0.02 + 0.1 + 1.25)
    win = day(services)
    assert services.spend.read("daily", win.key, "global").reserved == 0


def test_cron_runs_count_and_a_jobs_own_limit_refuses_it(agent: Any, sender: Any, llm: FakeLLM) -> None:
    priced(agent)
    agent.call("config.set", {"path": "spend.limits.monthly", "value": 1000})
    schedule, spec = {"kind": "every", "everyMs": 3_600_000}, {"mode": "task", "message": "x"}
    job = agent.call("cron.add", {"name": "digest", "schedule": schedule, "spec": spec, "spendLimitUsd": 1000})["job"]
    assert job["spendLimitUsd"] == 1000
    llm.script(reply("done", usage={"input": 1000, "output": 0}))
    agent.call("cron.run", {"id": job["id"], "mode": "force"})
    wait_for(lambda: [r for r in agent.call("cron.runs", {"jobId": job["id"]})["runs"] if r["status"] == "ok"])
    assert used(agent.services, f"cron:{job['id']}") == pytest.approx(1.0)
    assert agent.call("spend.status", {})["top"]["jobs"] == [{"jobId": job["id"], "usedUsd": pytest.approx(1.0)}]
    agent.call("cron.update", {"id": job["id"], "patch": {"spendLimitUsd": 1.05}})  # less than a worst case left
    agent.call("cron.run", {"id": job["id"], "mode": "force"})
    failed = wait_for(
        lambda: [r for r in agent.call("cron.runs", {"jobId": job["id"]})["runs"] if r["status"] == "error"]
    )
    assert failed[0]["error"] == "spend limit reached (daily: $1.00 / $1.05)"
    assert len(llm.requests) == 1


def test_compaction_summaries_count(agent: Any, llm: FakeLLM) -> None:
    priced(agent)
    llm.script(reply("a summary", usage={"input": 3000, "output": 100}))
    config = agent.services.config.effective()
    assert compaction.ask(agent.services, config, {"provider": "openai", "id": "gpt-test"}, "summarize") == "a summary"
    assert used(agent.services) == pytest.approx(3.0 + 0.2)


def test_embeddings_count_at_the_providers_token_count_and_are_refused_past_a_limit(services: Any) -> None:
    with FakeEmbeddings() as server:
        config = {
            "providers": {"embedder": {"baseUrl": f"{server.base_url}/v1"}},
            "apiKeys": {"embedder": "sk-embed-key"},
            "embeddings": {"provider": "embedder", "model": "emb-1"},
            "spend": {"prices": {"embedder/emb-1": {"inputPerMTok": 10_000}}, "limits": {"daily": 1}},
        }
        embeddings.embed(config, "hello world", services=services)
        assert used(services) == pytest.approx(3 * 0.01)  # the provider counted 3 tokens
        win = day(services)
        services.spend.add("daily", win.key, "global", rules.to_micro(0.99), 0, expires_at=win.expires_at)
        with pytest.raises(rules.SpendExceededError) as refused:
            embeddings.embed(config, "hello world", services=services)
        assert refused.value.message == "spend limit reached (daily: $1.02 / $1.00)"
        assert len(server.requests) == 1


# --- the alert ------------------------------------------------------------------------------------------------------


def test_crossing_alert_at_tells_clients_and_the_main_session_once(agent: Any, sender: Any, llm: FakeLLM) -> None:
    priced(agent)
    agent.call("config.set", {"path": "spend.limits.daily", "value": 10})
    run(agent, sender, llm, {"input": 5000, "output": 0})  # $5: below 80 %
    run(agent, sender, llm, {"input": 3500, "output": 0})  # $8.50: crosses it
    config = agent.services.config.effective()
    later = caps.reserve(agent.services, config, caps.ModelCall("openai", "gpt-test", 10, max_output=10))
    later.settle({"input": 100, "output": 0})  # still past it: no second alert

    def alerts() -> list[dict[str, Any]]:
        frames = sender.frames_to(agent.connection_id)
        return [f["payload"] for f in frames if f.get("event") == caps.ALERT_EVENT]

    found = alerts()
    assert found == [
        {"scope": "global", "period": "daily", "usedUsd": pytest.approx(8.5), "limitUsd": 10.0, "alertAt": 0.8}
    ]
    notes = [
        m
        for m in agent.call("session.preview", {"sessionKey": "main"})["messages"]
        if m.get("model") == caps.ALERT_REASON
    ]
    assert len(notes) == 1 and "$8.50" in notes[0]["content"][0]["text"]


# --- the barrier ------------------------------------------------------------------------------------------------------


def _serialize_updates(services: Any) -> None:
    """Moto evaluates a condition correctly but two racing updates may both pass it; DynamoDB applies the writes of
    one item one at a time. A lock around the table port's `update` gives moto that property (the update is still
    moto's, condition and all)."""
    lock = threading.Lock()
    update = services.table.update

    def one_at_a_time(key: tuple[str, str], **kwargs: Any) -> Any:
        with lock:
            return update(key, **kwargs)

    services.table.update = one_at_a_time


@pytest.mark.parametrize("table", [pytest.param("local", marks=pytest.mark.atomic_table), "moto"])
def test_parallel_callers_never_spend_more_than_one_small_limit(services: Any, table: str) -> None:
    """Eight threads reserve and settle against one $1 daily limit until it refuses them: the counter never passes
    the limit and the settled total stays within it."""
    if table == "moto":
        _serialize_updates(services)
    limit, threads = 1.0, 8
    config = {"spend": {"prices": {"openai/gpt-test": PRICE}, "limits": {"daily": limit}}}
    start = threading.Barrier(threads)
    lock = threading.Lock()
    settled: list[float] = []
    refusals: list[rules.SpendExceededError] = []
    failures: list[BaseException] = []

    def worker(index: int) -> None:
        try:
            start.wait()
            n = 0
            while True:
                try:
                    hold = caps.reserve(services, config, caps.ModelCall("openai", "gpt-test", 20, max_output=20))
                except rules.SpendExceededError as exc:  # worst case $0.06
                    with lock:
                        refusals.append(exc)
                    return
                usage = {"input": 20, "output": 10 + (index + n) % 10}
                hold.settle(usage)
                with lock:
                    settled.append(0.02 + usage["output"] * 0.002)
                n += 1
        except BaseException as exc:  # pragma: no cover - reported below
            failures.append(exc)

    workers = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join(60)
    assert not failures and not any(t.is_alive() for t in workers)
    assert len(refusals) == threads
    assert all(r.used + 0.06 > limit for r in refusals)
    assert used(services) == pytest.approx(sum(settled))
    assert sum(settled) <= limit
    assert len(settled) >= int(limit / 0.06)


@pytest.mark.atomic_table
def test_parallel_runs_against_one_small_limit(
    agent: Any, sender: Any, llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four sessions start at once against a limit that fits two worst cases: two calls reach the model, two runs
    end with the note before calling it, and what is settled stays within the limit."""
    monkeypatch.setattr(context, "estimate_request_tokens", lambda system, messages: 100)
    priced(agent, max_tokens=100)  # worst case: 100 * $0.001 + 100 * $0.002 = $0.30
    agent.call("config.set", {"path": "spend.limits.daily", "value": 0.65})
    llm.responder = lambda request: hang(30, then=reply("done", usage={"input": 100, "output": 90}))
    keys_ = [f"agent:main:parallel-{i}" for i in range(4)]
    answers: dict[str, Any] = {}
    start = threading.Barrier(len(keys_))

    def send(key: str) -> None:
        start.wait()
        answers[key] = agent.frame("chat.send", {"sessionKey": key, "message": "go"})

    senders = [threading.Thread(target=send, args=(k,)) for k in keys_]
    for thread in senders:
        thread.start()
    for thread in senders:
        thread.join(30)
    runs = {a["payload"]["runId"] for a in answers.values() if a["ok"]}
    refused = [a["error"] for a in answers.values() if not a["ok"]]
    assert all(e["code"] == 429 and e["message"].startswith("spend limit reached (daily: $0.") for e in refused)

    def ended() -> list[dict[str, Any]]:
        events = [e for e in chat_events(sender, agent.connection_id) if e.get("state") == "final"]
        return [e for e in events if e["runId"] in runs]

    # each run that started either holds one of the two worst cases at the model or ended with the note
    wait_for(lambda: len(llm.requests) + len(ended()) >= len(runs), timeout=30)
    llm.wait_for_requests(2, timeout=30)
    assert len(llm.requests) == 2
    notes = ended()
    assert all(e["message"]["model"] == rules.NOTE_REASON for e in notes)
    assert len(notes) + len(refused) == 2
    llm.release()
    wait_for(lambda: len(ended()) == len(runs), timeout=30)
    assert used(agent.services) == pytest.approx(2 * (0.1 + 0.18))
    assert used(agent.services) <= 0.65
    win = day(agent.services)
    assert agent.services.spend.read("daily", win.key, "global").reserved == 0
    assert keys.spend_counter("daily", win.key, "global")[0].startswith(keys.SPEND_PREFIX)


# --- scopes and kinds of run ------------------------------------------------------------------------------------------


def test_an_agents_limit_holds_its_sessions_only(agent: Any, sender: Any, llm: FakeLLM) -> None:
    priced(agent)
    agent.call("config.set", {"path": "agents.list", "value": [{"id": "work", "spend": {"limits": {"daily": 3}}}]})
    run(agent, sender, llm, {"input": 2900, "output": 0}, key="agent:work:main")  # $2.90 of the agent's $3
    assert used(agent.services, "agent:work") == pytest.approx(2.9)
    error = agent.error("chat.send", {"sessionKey": "agent:work:main", "message": "more"})
    assert error["message"] == "spend limit reached (daily: $2.90 / $3.00)"
    assert error["details"]["spend"]["scope"] == "agent:work"
    run(agent, sender, llm, {"input": 10, "output": 0}, key="agent:main:other")  # another agent is not held to it
    rows = {(p["scope"], p["period"]): p for p in agent.call("spend.status", {"agentId": "work"})["periods"]}
    assert rows[("agent:work", "daily")]["limitUsd"] == 3 and rows[("agent:work", "monthly")]["limitUsd"] is None


def test_heartbeats_and_channel_messages_are_refused_before_they_start(
    agent: Any, connect: Any, sender: Any, llm: FakeLLM
) -> None:
    priced(agent)
    agent.call("config.set", {"path": "spend.limits.monthly", "value": 1})
    win = rules.window(rules.MONTHLY, agent.services.now_ms(), rules.zone(agent.services.config.effective()))
    agent.services.spend.add("monthly", win.key, "global", rules.to_micro(1), 0, expires_at=win.expires_at)
    beat = agent.call("heartbeat.trigger", {"agentId": "main"})
    assert beat["ok"] is False and "spend limit reached (monthly: $1.00 / $1.00)" in beat["message"]
    agent.call("config.set", {"path": "channels.test", "value": {"dmPolicy": "open"}})
    bridge = connect("channel", "bridge", channel="test")
    peer = {"kind": "dm", "id": "+15550001", "name": "Ann"}
    inbound = {"channel": "test", "accountId": "bridge", "peer": peer, "sender": {"id": peer["id"]}}
    error = bridge.error("channel.inbound", {**inbound, "message": {"id": "m1", "text": "hi"}})
    assert error["code"] == 429 and error["message"] == "spend limit reached (monthly: $1.00 / $1.00)"
    assert llm.requests == []


def test_the_model_cannot_set_or_lift_a_jobs_spend_limit(services: Any) -> None:
    from orbital.engines import cron, cron_tool

    def tool(args: dict[str, Any]) -> dict[str, Any]:
        return cron_tool.execute_tool(
            services, args, agent_id="main", user_tz="UTC", now_ms=services.now_ms(), execute=lambda job: None
        )

    schedule, spec = {"kind": "every", "everyMs": 3_600_000}, {"mode": "task", "message": "x"}
    added = tool({"action": "add", "job": {"name": "j", "schedule": schedule, "spec": spec, "spendLimitUsd": 100}})
    assert "spendLimitUsd" not in added["job"]
    owned = cron.add(services, {"name": "k", "schedule": schedule, "spec": spec, "spendLimitUsd": 0.5}, 0)
    tool({"action": "update", "id": owned["id"], "patch": {"spendLimitUsd": None, "name": "renamed"}})
    stored = services.cron.get_job(owned["id"])
    assert stored["spendLimitUsd"] == 0.5 and stored["name"] == "renamed"
    with pytest.raises(cron.CronError):
        cron.add(services, {"name": "bad", "schedule": schedule, "spec": spec, "spendLimitUsd": -1}, 0)


def test_a_stream_that_breaks_off_is_priced_and_its_reservation_settled(agent: Any, sender: Any, llm: FakeLLM) -> None:
    priced(agent)
    agent.call("config.set", {"path": "spend.limits.daily", "value": 100})
    llm.script(reply("word " * 40, chunks=5, end="error"))
    started = agent.call("chat.send", {"sessionKey": "main", "message": "spend, then fail"})
    assert final_of(sender, agent.connection_id, started["runId"])["state"] == "error"
    win = day(agent.services)
    counted = agent.services.spend.read("daily", win.key, "global")
    assert counted.reserved == 0
    assert rules.to_usd(counted.used) > 0.1  # the system prompt alone is well over 100 tokens


def test_transcriptions_count_and_are_refused_past_a_limit(services: Any, llm: FakeLLM) -> None:
    from orbital.agent import transcribe

    from tests.functional.test_media import openai_config, stored_audio

    audio = stored_audio(services)
    config = {
        **openai_config(llm, model="transcribe-test"),
        "spend": {"prices": {"openai/transcribe-test": {"inputPerMTok": 10_000, "outputPerMTok": 20_000}}},
    }
    config["spend"]["limits"] = {"daily": 1}
    llm.script(reply("Remember to buy milk."))
    assert transcribe.transcribe(services, config, audio["r2Key"], "audio/ogg") == "Remember to buy milk."
    first = used(services)
    assert first > 0  # the audio's estimate and the transcript's tokens, at the configured price
    win = day(services)
    assert services.spend.read("daily", win.key, "global").reserved == 0
    services.spend.add(
        "daily", win.key, "global", rules.to_micro(1) - rules.to_micro(first), 0, expires_at=win.expires_at
    )
    assert transcribe.transcribe(services, config, audio["r2Key"], "audio/ogg") is None  # refused: not transcribed
    assert len(llm.requests) == 1
