"""A dialect turn that answers a paused run: which engine answers let the run go on, and the order of what the
socket gets (the turn's own response first, then the run's events, wherever they were emitted)."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest
from orbital.dialects import approval_answers as aa
from orbital.store.subscriptions import Subscription


@pytest.fixture
def answering(monkeypatch: pytest.MonkeyPatch) -> Any:
    """`begin` on a session whose run `run-1` is paused, without a table (the subscription is only built)."""
    monkeypatch.setattr(aa, "paused_run", lambda services, key: "run-1")
    monkeypatch.setattr(
        aa.base,
        "subscribe",
        lambda services, conn, run_id, key, ref: Subscription(run_id, conn.connection_id, "x", key, ref),
    )
    dropped: list[Subscription] = []
    monkeypatch.setattr(aa.base, "unsubscribe", lambda services, sub: dropped.append(sub))
    conn = SimpleNamespace(connection_id="conn-1")

    def begin() -> aa.Answer:
        found = aa.begin(None, conn, "key", {"requestId": "r2"})  # type: ignore[arg-type]
        assert found is not None
        return found

    begin.dropped = dropped  # type: ignore[attr-defined]
    return begin


def test_only_a_decision_lets_the_run_go_on() -> None:
    assert aa.resumed({"status": "paused", "runId": "R", "response": "Approved n1__Bash. Continuing run."})
    denied = "Denied n1__Bash. Continuing run without executing it."
    assert aa.resumed({"status": "paused", "runId": "R", "response": denied})
    reminder = 'Run is paused waiting for tool approval (1a2b3c4d) for n1__Bash.\nReply with "yes" to approve or "no".'
    assert not aa.resumed({"status": "paused", "runId": "R", "response": reminder, "approvalId": "1a2b3c4d"})
    gone = "No active run is waiting for approval anymore. You can continue normally."
    assert not aa.resumed({"status": "paused", "runId": "R", "response": gone})
    assert not aa.resumed({"status": "started", "runId": "R"})
    assert not aa.resumed(None)


def test_events_emitted_while_answering_on_the_same_thread_are_kept_for_after_the_response(answering: Any) -> None:
    answer = answering()
    event = {"state": "toolResult", "runId": "run-1"}
    assert aa.held(answer.sub, event) is True  # kept, not sent now
    assert aa.settle(None, answer, follow=True) == [event]  # type: ignore[arg-type]
    assert aa.held(answer.sub, {"state": "final"}) is False  # released: sent as usual
    assert answering.dropped == []


def test_an_event_from_another_thread_waits_for_the_response(answering: Any) -> None:
    answer = answering()
    order: list[str] = []
    waiting = threading.Event()
    released = answer._hold.released
    real_wait = released.wait

    def wait(timeout: float | None = None) -> bool:
        waiting.set()
        return real_wait(timeout)

    released.wait = wait  # type: ignore[method-assign]

    def run_step() -> None:
        assert aa.held(answer.sub, {"state": "final"}) is False
        order.append("run's event")

    step = threading.Thread(target=run_step)
    step.start()
    assert waiting.wait(10), "the run's event did not wait"
    order.append("response")
    aa.settle(None, answer, follow=True)  # type: ignore[arg-type]
    step.join(10)
    assert order == ["response", "run's event"]


def test_a_turn_that_does_not_follow_drops_its_subscription(answering: Any) -> None:
    answer = answering()
    assert aa.settle(None, answer, follow=False) == []  # type: ignore[arg-type]
    assert answering.dropped == [answer.sub]
    assert aa.held(answer.sub, {"state": "final"}) is False
