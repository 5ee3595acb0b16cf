"""Optimistic read-modify-writes under contention.

An item shared by many writers (the configuration, a session's meta, a cron job, the heartbeat state) is written
with a version check: read it, change it, write it only if nobody wrote meanwhile, else read again. On AWS the
frames of many sockets run in parallel Lambdas, so dozens of writers of *different* parts of one item can meet;
retrying at once lets them collide again in lockstep. `retrying` (tenacity's loop) retries with exponential backoff
and full jitter within a time budget, so every writer of a different part gets through, and only a writer that keeps
losing for the whole budget hears "… changed concurrently; try again".

    def attempt() -> None:
        current, version = load()
        save(change(current), version)  # raises ConflictError when someone wrote meanwhile

    retrying("config", attempt)
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt, stop_before_delay

from orbital.errors import ConflictError

T = TypeVar("T")

BUDGET_S = 5.0
"""How long a writer keeps trying before it gives up (well inside a frame's Lambda timeout)."""
FIRST_WAIT_S = 0.004
MAX_WAIT_S = 0.2
MIN_ATTEMPTS = 3


def backoff(attempt: int) -> float:
    """Seconds to wait before retry number `attempt` (1, 2, …): full jitter over an exponentially growing cap."""
    return random.uniform(0, min(MAX_WAIT_S, FIRST_WAIT_S * 2 ** min(attempt, 16)))


def retrying(
    what: str,
    attempt: Callable[[], T],
    *,
    budget_s: float = BUDGET_S,
    message: str | None = None,
    sleep: Callable[[float], None] | None = None,
) -> T:
    """Call `attempt` until it returns; a `ConflictError` from it means "lost a race: read again". Past `budget_s`
    (and at least `MIN_ATTEMPTS` attempts) raise `ConflictError` ("{what} changed concurrently; try again", or
    `message`), marked retryable. `attempt` may run several times: no side effects beyond its conditional write.
    `sleep` waits between attempts (default `time.sleep`)."""

    def give_up(state: RetryCallState) -> T:
        raise ConflictError(message or f"{what} changed concurrently; try again", retryable=True) from None

    retry: Retrying = Retrying(
        retry=retry_if_exception_type(ConflictError),
        wait=lambda state: backoff(state.attempt_number),
        stop=stop_after_attempt(MIN_ATTEMPTS) & stop_before_delay(budget_s),
        sleep=sleep or time.sleep,
        retry_error_callback=give_up,
    )
    return retry(attempt)
