"""The reconnect loop and backoff shared by `orbital node` and the xeno bridge (`orbital.protocol.reconnect`)."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from typing import Any

import pytest
from orbital.protocol import reconnect
from orbital.protocol.reconnect import Backoff, Ended, keep_connected


def _widest(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every draw at the top of its range: the bound itself is what is checked."""
    monkeypatch.setattr(reconnect.random, "uniform", lambda low, high: high)


def test_each_wait_in_a_row_doubles_its_bound_up_to_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    _widest(monkeypatch)
    backoff = Backoff(0.5, 5.0, 30.0)
    assert [backoff.next_delay() for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    for _ in range(100):  # the exponent stops growing: no overflow however long the gateway is away
        assert backoff.next_delay() == 5.0
    assert backoff.attempt == reconnect.MAX_DOUBLINGS


def test_a_wait_is_drawn_with_full_jitter_below_its_bound() -> None:
    backoff = Backoff(1.0, 8.0, 30.0)
    random.seed(7)
    draws = []
    for attempt in range(5):
        bound = min(8.0, 2**attempt)
        delay = backoff.next_delay()
        assert 0 <= delay <= bound
        draws.append(delay)
    assert len(set(draws)) == len(draws)  # drawn, not fixed


def test_a_connection_that_lasted_starts_the_backoff_over_and_a_short_one_does_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _widest(monkeypatch)
    backoff = Backoff(1.0, 60.0, 30.0)
    for _ in range(3):
        backoff.next_delay()
    backoff.ended(None)  # never connected
    backoff.ended(time.monotonic())  # connected, lost at once
    assert backoff.next_delay() == 8.0
    backoff.ended(time.monotonic() - 31.0)  # lasted longer than stable_after
    assert backoff.next_delay() == 1.0


def test_a_wait_ends_when_the_client_is_woken() -> None:
    async def woken() -> bool:
        wake = asyncio.Event()
        asyncio.get_running_loop().call_soon(wake.set)
        await Backoff.wait(3600.0, wake)  # would be an hour
        return wake.is_set()

    assert asyncio.run(asyncio.wait_for(woken(), 60))


def test_a_wait_ends_by_itself_after_its_delay() -> None:
    async def waited() -> bool:
        wake = asyncio.Event()
        await Backoff.wait(0.01, wake)
        return wake.is_set()

    assert asyncio.run(asyncio.wait_for(waited(), 60)) is False


def _loop(outcomes: list[Any], *, running: Callable[[], bool] | None = None) -> tuple[Any, list[tuple[str, float]]]:
    """`keep_connected` over connections that end as `outcomes` says, in order; its answer and the waits it logged."""
    waits: list[tuple[str, float]] = []
    pending = list(outcomes)

    async def connect_once() -> Any:
        return pending.pop(0)

    async def loop() -> Any:
        return await keep_connected(
            connect_once,
            Backoff(0.001, 0.002, 30.0),
            asyncio.Event(),
            running=running or (lambda: bool(pending)),
            waiting=lambda ended, delay: waits.append((ended.problem, delay)),
        )

    return asyncio.run(asyncio.wait_for(loop(), 60)), waits


def test_the_loop_connects_again_after_a_wait_until_a_connection_answers_otherwise() -> None:
    answer, waits = _loop([Ended(problem="refused by DNS"), Ended(time.monotonic(), "closed (1006)"), 2])
    assert answer == 2  # e.g. refused for good: the loop ends with it
    assert [problem for problem, _ in waits] == ["refused by DNS", "closed (1006)"]
    assert all(0 <= delay <= 0.002 for _, delay in waits)


def test_a_connection_closed_to_connect_again_is_not_waited_for() -> None:
    answer, waits = _loop([Ended(time.monotonic(), "tool list changed", at_once=True), Ended(problem="lost"), 0])
    assert answer == 0
    assert [problem for problem, _ in waits] == ["lost"]


def test_the_loop_ends_when_the_client_stops_running() -> None:
    stopped = asyncio.Event()
    calls = 0

    async def connect_once() -> Ended:
        nonlocal calls
        calls += 1
        stopped.set()  # stopped while this connection was served
        return Ended(problem="closed")

    async def loop() -> Any:
        return await keep_connected(
            connect_once,
            Backoff(3600.0, 3600.0, 30.0),  # a wait would be an hour
            stopped,
            running=lambda: not stopped.is_set(),
            waiting=lambda ended, delay: pytest.fail("no wait once stopped"),
        )

    assert asyncio.run(asyncio.wait_for(loop(), 60)) is None
    assert calls == 1
