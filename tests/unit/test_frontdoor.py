"""The front door of a local gateway without a token: who may come in (unit level; the real server in
tests/e2e/test_frontdoor.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from orbital.local.frontdoor import REFUSAL, guard, refusal

LOOPBACK = ("127.0.0.1", 50000)


def _headers(**named: str) -> list[tuple[bytes, bytes]]:
    return [(name.replace("_", "-").lower().encode(), value.encode()) for name, value in named.items()]


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1:8765", "localhost:8765", "localhost", "LOCALHOST.", "app.localhost:1", "[::1]:8765", "127.9.9.9"],
)
def test_this_machine_talking_directly_comes_in(host: str) -> None:
    assert refusal(LOOPBACK, _headers(host=host, user_agent="orbital")) is None
    assert refusal(("::1", 5), _headers(host=host)) is None
    assert refusal(("::ffff:127.0.0.1", 5), _headers(host=host)) is None


@pytest.mark.parametrize(
    ("client", "headers", "why"),
    [
        (("192.168.1.20", 40000), {"host": "127.0.0.1:8765"}, "not from this machine"),
        (("10.0.0.1", 1), {"host": "localhost"}, "not from this machine"),
        (None, {"host": "localhost"}, "not from this machine"),
        (LOOPBACK, {"host": "abc.ngrok-free.app"}, "addressed to"),
        (LOOPBACK, {"host": "rebind.attacker.example:8765"}, "addressed to"),
        (LOOPBACK, {"host": "localhost.attacker.example"}, "addressed to"),
        (LOOPBACK, {}, "no Host header"),
        (LOOPBACK, {"host": "localhost:8765", "x_forwarded_for": "203.0.113.9"}, "proxy"),
        (LOOPBACK, {"host": "localhost:8765", "x_forwarded_proto": "https"}, "proxy"),
        (LOOPBACK, {"host": "localhost:8765", "forwarded": "for=203.0.113.9"}, "proxy"),
        (LOOPBACK, {"host": "localhost:8765", "x_real_ip": "203.0.113.9"}, "proxy"),
        (LOOPBACK, {"host": "localhost:8765", "cf_connecting_ip": "203.0.113.9"}, "proxy"),
        (LOOPBACK, {"host": "localhost:8765", "via": "1.1 tunnel"}, "proxy"),
        (LOOPBACK, {"host": "localhost:8765", "origin": "https://evil.example"}, "web page"),
        (LOOPBACK, {"host": "localhost:8765", "origin": "null"}, "web page"),
    ],
)
def test_everything_else_is_refused(client: Any, headers: dict[str, str], why: str) -> None:
    found = refusal(client, _headers(**headers))
    assert found is not None and why in found


def test_a_page_served_from_this_machine_may_connect() -> None:
    assert refusal(LOOPBACK, _headers(host="localhost:8765", origin="http://localhost:5173")) is None
    assert refusal(LOOPBACK, _headers(host="127.0.0.1:8765", origin="http://127.0.0.1:8765")) is None


def _run(app: Any, scope: dict[str, Any]) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []
    incoming = [{"type": "websocket.connect"}] if scope["type"] == "websocket" else [{"type": "http.request"}]

    async def receive() -> dict[str, Any]:
        return incoming.pop(0)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    return sent


async def _inner(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "reached"})


def test_the_guard_answers_403_with_the_sentence_and_never_reaches_the_app() -> None:
    refused: list[str] = []
    app = guard(_inner, token_set=False, on_refused=refused.append)
    headers = _headers(host="abc.trycloudflare.com")
    http = _run(app, {"type": "http", "client": LOOPBACK, "headers": headers})
    assert http[0] == {"type": "http.response.start", "status": 403, "headers": http[0]["headers"]}
    assert "TOKEN" in http[1]["body"].decode()
    scope = {"type": "websocket", "client": LOOPBACK, "headers": headers, "extensions": {"websocket.http.response": {}}}
    ws = _run(app, scope)
    assert [m["type"] for m in ws] == ["websocket.http.response.start", "websocket.http.response.body"]
    assert ws[0]["status"] == 403 and ws[1]["body"].decode().strip() == REFUSAL
    assert len(refused) == 2
    ok = _run(app, {"type": "http", "client": LOOPBACK, "headers": _headers(host="localhost:1")})
    assert ok == [{"type": "reached"}]


def test_with_a_token_the_door_is_the_app_itself() -> None:
    assert guard(_inner, token_set=True) is _inner
