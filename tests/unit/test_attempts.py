"""Failed credential attempts per peer: the 10th failure within a minute refuses the peer for a minute, logged once
(the real gateway in tests/e2e/test_frontdoor.py, the HTTP routes in tests/functional/test_rest_auth_attempts.py)."""

from __future__ import annotations

import logging

import pytest
from orbital.runtime.attempts import Attempts


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_ten_failures_in_a_minute_block_the_peer_for_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    attempts = Attempts(clock=clock)
    caplog.set_level(logging.WARNING, logger="orbital.auth")
    for _ in range(9):
        attempts.failed("203.0.113.7")
        clock.now += 1
    assert not attempts.blocked("203.0.113.7")
    attempts.failed("203.0.113.7")
    assert attempts.blocked("203.0.113.7")
    assert not attempts.blocked("198.51.100.1")  # another peer is not held back
    for _ in range(20):  # failures during the block: one log line for the whole burst
        attempts.failed("203.0.113.7")
    assert len([r for r in caplog.records if "203.0.113.7" in r.getMessage()]) == 1
    clock.now += 60
    assert not attempts.blocked("203.0.113.7")


def test_failures_spread_over_more_than_a_minute_never_block() -> None:
    clock = Clock()
    attempts = Attempts(clock=clock)
    for _ in range(50):
        attempts.failed("203.0.113.7")
        clock.now += 7  # 9 within any 60 s
    assert not attempts.blocked("203.0.113.7")


def test_no_peer_is_never_blocked() -> None:
    attempts = Attempts(limit=1)
    attempts.failed(None)
    assert not attempts.blocked(None)


def test_a_local_peer_is_its_address_and_its_os_user() -> None:
    from orbital.runtime.attempts import PEER_UID, peer_key
    from orbital.runtime.gateway import _peer

    attempts = Attempts(limit=2)
    for _ in range(2):
        attempts.failed(peer_key("127.0.0.1", 65534))
    assert attempts.blocked(peer_key("127.0.0.1", 65534))
    assert not attempts.blocked(peer_key("127.0.0.1", 1000))  # another user on the same address
    assert peer_key("127.0.0.1", None) == "127.0.0.1" and peer_key("127.0.0.1", True) == "127.0.0.1"
    assert peer_key(None, 1000) is None
    # a socket's events carry the user as the local front door found it; on AWS there is none
    local = {"requestContext": {"identity": {"sourceIp": "127.0.0.1", PEER_UID: 1000}}}
    assert _peer(local) == peer_key("127.0.0.1", 1000)
    assert _peer({"requestContext": {"identity": {"sourceIp": "203.0.113.7"}}}) == "203.0.113.7"
