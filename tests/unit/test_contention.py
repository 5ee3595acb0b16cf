from __future__ import annotations

import pytest
from orbital.errors import ConflictError
from orbital.store import contention


def test_a_lost_race_is_retried_until_the_write_lands(monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[float] = []
    monkeypatch.setattr(contention.time, "sleep", waits.append)
    calls = []

    def attempt() -> str:
        calls.append(1)
        if len(calls) < 4:
            raise ConflictError("lost")
        return "written"

    assert contention.retrying("config", attempt) == "written"
    assert len(calls) == 4 and len(waits) == 3
    assert all(0 <= w <= contention.MAX_WAIT_S for w in waits)


def test_a_writer_that_keeps_losing_gives_up_with_a_clear_error() -> None:
    calls = []

    def attempt() -> None:
        calls.append(1)
        raise ConflictError("lost")

    with pytest.raises(ConflictError) as caught:
        contention.retrying("session", attempt, budget_s=0.05)
    assert str(caught.value) == "session changed concurrently; try again"
    assert caught.value.code == 409 and len(calls) >= contention.MIN_ATTEMPTS


def test_other_errors_are_not_retried() -> None:
    calls = []

    def attempt() -> None:
        calls.append(1)
        raise ValueError("bad")

    with pytest.raises(ValueError):
        contention.retrying("config", attempt)
    assert len(calls) == 1


def test_backoff_grows_and_is_capped() -> None:
    assert max(contention.backoff(1) for _ in range(200)) <= contention.FIRST_WAIT_S * 2
    assert max(contention.backoff(30) for _ in range(200)) <= contention.MAX_WAIT_S


def test_without_budget_a_writer_gets_its_minimum_attempts_and_no_more() -> None:
    waits: list[float] = []
    calls = []

    def attempt() -> None:
        calls.append(1)
        raise ConflictError("lost")

    with pytest.raises(ConflictError) as caught:
        contention.retrying("cron job", attempt, budget_s=0, message="could not record the run", sleep=waits.append)
    assert str(caught.value) == "could not record the run" and caught.value.retryable
    assert len(calls) == contention.MIN_ATTEMPTS
    assert len(waits) == contention.MIN_ATTEMPTS - 1
    assert all(0 <= w <= contention.FIRST_WAIT_S * 2**n for n, w in enumerate(waits, start=1))
