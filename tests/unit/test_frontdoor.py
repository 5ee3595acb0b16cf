"""The front door of a local gateway: who may come in without a token (same-user mode), which pages may come in
in every mode (unit level; the real server in tests/e2e/test_frontdoor.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from orbital.local.frontdoor import FOREIGN_PAGE, OTHER_USER, REFUSAL, foreign_origin, guard, refusal

LOOPBACK = ("127.0.0.1", 50000)
SERVER = ("127.0.0.1", 8765)


def _headers(**named: str) -> list[tuple[bytes, bytes]]:
    return [(name.replace("_", "-").lower().encode(), value.encode()) for name, value in named.items()]


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1:8765", "localhost:8765", "localhost", "LOCALHOST.", "[::1]:8765", "127.9.9.9"],
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
        (LOOPBACK, {"host": "app.localhost:8765"}, "addressed to"),
        (LOOPBACK, {}, "no Host header"),
        (LOOPBACK, {"host": "localhost:8765", "x_forwarded_for": "203.0.113.9"}, "proxy"),
        (LOOPBACK, {"host": "localhost:8765", "x_forwarded_proto": "https"}, "proxy"),
        (LOOPBACK, {"host": "localhost:8765", "forwarded": "for=203.0.113.9"}, "proxy"),
        (LOOPBACK, {"host": "localhost:8765", "x_real_ip": "203.0.113.9"}, "proxy"),
        (LOOPBACK, {"host": "localhost:8765", "cf_connecting_ip": "203.0.113.9"}, "proxy"),
        (LOOPBACK, {"host": "localhost:8765", "via": "1.1 tunnel"}, "proxy"),
        (LOOPBACK, {"host": "localhost:8765", "origin": "https://evil.example"}, "web page"),
        (LOOPBACK, {"host": "localhost:8765", "origin": "null"}, "web page"),
        (LOOPBACK, {"host": "localhost:8765", "origin": "http://localhost:5173"}, "web page"),
        (LOOPBACK, {"host": "localhost:8765", "origin": "http://foo.localhost:8765"}, "web page"),
    ],
)
def test_everything_else_is_refused(client: Any, headers: dict[str, str], why: str) -> None:
    found = refusal(client, _headers(**headers), 8765)
    assert found is not None and why in found


def test_only_the_gateways_own_pages_may_connect() -> None:
    assert refusal(LOOPBACK, _headers(host="127.0.0.1:8765", origin="http://127.0.0.1:8765"), 8765) is None
    assert refusal(LOOPBACK, _headers(host="127.0.0.1:8765", origin="http://localhost:8765"), 8765) is None


@pytest.mark.parametrize(
    ("origin", "host", "foreign"),
    [
        ("http://127.0.0.1:8765", "127.0.0.1:8765", False),
        ("http://localhost:8765", "127.0.0.1:8765", False),  # a loopback origin on the gateway's port
        ("http://[::1]:8765", "127.0.0.1:8765", False),
        ("https://gw.example.com", "gw.example.com", False),  # the gateway's own origin behind a name
        ("http://192.168.1.5:8765", "192.168.1.5:8765", False),
        ("http://localhost:5173", "127.0.0.1:8765", True),  # another port
        ("http://foo.localhost:8765", "127.0.0.1:8765", True),  # *.localhost: any local program
        ("https://evil.example", "127.0.0.1:8765", True),
        ("http://127.0.0.1:8765", "gw.example.com", False),
        ("http://evil.example:8765", "127.0.0.1:8765", True),
        ("null", "127.0.0.1:8765", True),
        ("chrome-extension://abc", "127.0.0.1:8765", True),
    ],
)
def test_the_origin_rule(origin: str, host: str, foreign: bool) -> None:
    assert foreign_origin(origin, host, 8765) is foreign


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


def _owned_by(uid: int | None) -> Any:
    asked: list[tuple[Any, Any]] = []

    def owner(peer: tuple[str, int], ours: tuple[str, int]) -> int | None:
        asked.append((peer, ours))
        return uid

    owner.asked = asked  # type: ignore[attr-defined]
    return owner


def test_the_guard_answers_403_with_the_sentence_and_never_reaches_the_app() -> None:
    refused: list[str] = []
    app = guard(_inner, mode="same-user", on_refused=refused.append, owner=_owned_by(1000), uid=1000)
    headers = _headers(host="abc.trycloudflare.com")
    http = _run(app, {"type": "http", "client": LOOPBACK, "server": SERVER, "headers": headers})
    assert http[0] == {"type": "http.response.start", "status": 403, "headers": http[0]["headers"]}
    assert "AUTH=same-user" in http[1]["body"].decode()
    scope = {
        "type": "websocket",
        "client": LOOPBACK,
        "server": SERVER,
        "headers": headers,
        "extensions": {"websocket.http.response": {}},
    }
    ws = _run(app, scope)
    assert [m["type"] for m in ws] == ["websocket.http.response.start", "websocket.http.response.body"]
    assert ws[0]["status"] == 403 and ws[1]["body"].decode().strip() == REFUSAL
    assert len(refused) == 2
    ok = _run(app, {"type": "http", "client": LOOPBACK, "server": SERVER, "headers": _headers(host="localhost:1")})
    assert ok == [{"type": "reached"}]


def test_same_user_lets_in_only_the_gateways_own_user() -> None:
    owner = _owned_by(1001)
    app = guard(_inner, mode="same-user", owner=owner, uid=1000)
    scope = {"type": "http", "client": LOOPBACK, "server": SERVER, "headers": _headers(host="127.0.0.1:8765")}
    answer = _run(app, scope)
    assert answer[0]["status"] == 403 and answer[1]["body"].decode().strip() == OTHER_USER
    # the peer's socket is looked up with the two ends as they are: its address, then ours
    assert owner.asked == [(LOOPBACK, SERVER)]
    assert _run(guard(_inner, mode="same-user", owner=_owned_by(None), uid=1000), scope)[0]["status"] == 403
    assert _run(guard(_inner, mode="same-user", owner=_owned_by(1000), uid=1000), scope) == [{"type": "reached"}]


def test_with_a_token_only_the_origin_is_checked() -> None:
    app = guard(_inner, mode="token", owner=_owned_by(None), uid=1000)
    tunnel = {"type": "http", "client": ("203.0.113.9", 1), "server": SERVER, "headers": _headers(host="gw.example")}
    assert _run(app, tunnel) == [{"type": "reached"}]
    page = _headers(host="127.0.0.1:8765", origin="http://foo.localhost:8765")
    answer = _run(app, {"type": "http", "client": LOOPBACK, "server": SERVER, "headers": page})
    assert answer[0]["status"] == 403 and answer[1]["body"].decode().strip() == FOREIGN_PAGE
    own = _headers(host="127.0.0.1:8765", origin="http://127.0.0.1:8765")
    assert _run(app, {"type": "http", "client": LOOPBACK, "server": SERVER, "headers": own}) == [{"type": "reached"}]
