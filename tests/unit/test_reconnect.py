"""The reconnect backoff shared by `orbital node` and the xeno bridge (`orbital.protocol.reconnect`)."""

from __future__ import annotations

import asyncio
import random
import time

import pytest
from orbital.protocol import reconnect
from orbital.protocol.reconnect import Backoff


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
