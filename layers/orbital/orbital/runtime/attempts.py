"""Failed credential attempts, counted per peer address: after `LIMIT` failures within `WINDOW_S` seconds, the peer
is refused for `BLOCK_S` seconds (429 at the upgrade or on the HTTP route, before its credential is looked at), and
the burst is logged once. A failure is a wrong bearer at the WebSocket upgrade or on an HTTP route, or a `connect`
whose token is wrong.

Counted in this process's memory (ADR 0025): locally that is the whole gateway; on AWS each Lambda container counts
its own, so a peer spread over N containers gets up to N x `LIMIT` tries a minute. Locally every client on the
machine shares the loopback address: there a peer is the address and the OS user whose socket it is (the local front
door looks it up, `PEER_UID`), so another user of the machine guessing tokens holds back only that user, never the
owner. Where the user cannot be told (another platform, a tunnel), the address alone is the peer. Sockets already
open are never touched.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

log = logging.getLogger("orbital.auth")

LIMIT = 10
WINDOW_S = 60.0
BLOCK_S = 60.0
MAX_PEERS = 4096
"""Peers remembered at most (the oldest are forgotten first), so a flood of addresses cannot fill memory."""

PEER_UID = "orbital.peer_uid"
"""The OS user of a connection's peer on this machine, where the local front door could tell it: a key of the
request's ASGI scope, and of the `identity` of a socket's events."""

TOO_MANY = "Too many failed attempts with a wrong token from this address: try again in a minute"


def peer_key(address: str | None, uid: Any) -> str | None:
    """Who is counted: the address, and the OS user behind it where known (`PEER_UID`)."""
    if not address:
        return None
    return f"{address} uid {uid}" if isinstance(uid, int) and not isinstance(uid, bool) else address


class Attempts:
    def __init__(
        self,
        *,
        limit: int = LIMIT,
        window_s: float = WINDOW_S,
        block_s: float = BLOCK_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit = limit
        self.window_s = window_s
        self.block_s = block_s
        self.clock = clock
        self._failures: dict[str, deque[float]] = {}
        self._blocked_until: dict[str, float] = {}
        self._lock = threading.Lock()

    def blocked(self, peer: str | None) -> bool:
        """`peer` is being refused for failing too often."""
        if not peer:
            return False
        with self._lock:
            until = self._blocked_until.get(peer)
            if until is None:
                return False
            if self.clock() < until:
                return True
            del self._blocked_until[peer]
            return False

    def failed(self, peer: str | None) -> None:
        """`peer` presented a wrong credential."""
        if not peer:
            return
        now = self.clock()
        with self._lock:
            times = self._failures.pop(peer, None) or deque(maxlen=self.limit)
            while times and now - times[0] > self.window_s:
                times.popleft()
            times.append(now)
            self._failures[peer] = times  # most recent last: the oldest peers are forgotten first
            if len(times) >= self.limit and self._blocked_until.get(peer, 0.0) <= now:
                self._blocked_until[peer] = now + self.block_s
                times.clear()
                log.warning(
                    "%d failed attempts with a wrong token from %s within %.0f s: refusing it for %.0f s",
                    self.limit,
                    peer,
                    self.window_s,
                    self.block_s,
                )
            while len(self._failures) > MAX_PEERS:
                self._failures.pop(next(iter(self._failures)))
            while len(self._blocked_until) > MAX_PEERS:
                self._blocked_until.pop(next(iter(self._blocked_until)))

    def reset(self) -> None:
        with self._lock:
            self._failures.clear()
            self._blocked_until.clear()


ATTEMPTS = Attempts()
"""This process's count."""
