"""How a client that keeps a socket to the gateway (`orbital node`, the xeno bridge) stays connected: one loop
(`keep_connected`) that connects, serves until the connection ends and tries again after a wait.

Exponential backoff with full jitter: the n-th wait in a row is drawn from 0 to min(cap, base * 2**n), so clients
cut off together (a gateway restart) do not all come back at the same moment. A connection that lasted
`stable_after` seconds starts the backoff over; a wait ends early when the client is woken (a stop request, a
request that needs the connection now).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

MAX_DOUBLINGS = 30
"""The exponent stops growing here (the cap is reached long before; this keeps the number small)."""


class Backoff:
    """The reconnect loop's waits, for one client."""

    def __init__(self, base: float, cap: float, stable_after: float) -> None:
        self.base = base
        self.cap = cap
        self.stable_after = stable_after
        self.attempt = 0
        """How many waits in a row there have been since the last stable connection."""

    def ended(self, established_at: float | None) -> None:
        """A connection ended (`established_at`: when it was made, by `time.monotonic()`; None: it never was). One
        that lasted `stable_after` starts the backoff over."""
        if established_at is not None and time.monotonic() - established_at >= self.stable_after:
            self.attempt = 0

    def next_delay(self) -> float:
        """The wait before the next attempt, drawn with full jitter; each one widens the next, up to the cap."""
        delay = random.uniform(0, min(self.cap, self.base * 2**self.attempt))
        self.attempt = min(self.attempt + 1, MAX_DOUBLINGS)
        return delay

    @staticmethod
    async def wait(delay: float, wake: asyncio.Event) -> None:
        """Wait `delay` seconds, or less if `wake` is set meanwhile."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wake.wait(), delay)


@dataclass
class Ended:
    """How one connection ended, for the loop to know when to try again."""

    established_at: float | None = None
    """When it was made (`time.monotonic()`); None: it never was."""
    problem: str = ""
    """Why it ended (or could not be made), for the log."""
    at_once: bool = False
    """Try again without a wait (the client closed it itself, to connect again)."""


async def keep_connected(
    connect_once: Callable[[], Awaitable[Ended | T]],
    backoff: Backoff,
    wake: asyncio.Event,
    *,
    running: Callable[[], bool],
    waiting: Callable[[Ended, float], None],
) -> T | None:
    """Connect, serve and connect again while `running()`. `connect_once` makes one connection and serves it until
    it ends (an `Ended`), or answers anything else to end the loop with that answer (a refusal for good). Between
    two connections, the backoff's wait (`waiting` is told it first, to log it), cut short by `wake`. None: no
    longer `running()`."""
    while running():
        outcome = await connect_once()
        if not isinstance(outcome, Ended):
            return outcome
        if not running():
            break
        backoff.ended(outcome.established_at)
        if outcome.at_once:
            continue
        delay = backoff.next_delay()
        waiting(outcome, delay)
        await backoff.wait(delay, wake)
    return None
