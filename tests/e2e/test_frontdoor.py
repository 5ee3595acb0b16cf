"""Who may reach a real `orbital dev`: without a token only this machine talking to it directly (no tunnel, proxy,
other host or web page), with a token anyone who presents it; an unauthenticated socket is closed after 8 requests.
Raw HTTP over a socket, so the tests choose every header a tunnel or a browser would send."""

from __future__ import annotations

import json
import socket
from typing import Any

import pytest
from orbital.client import GatewayClient
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect as ws_connect

from tests.e2e.conftest import GatewayProcess

TOKEN = "front-door-token-0123456789"
UPGRADE = "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
UPGRADE += "Sec-WebSocket-Version: 13\r\n"


def _exchange(port: int, request: bytes) -> tuple[int, str]:
    """Send one raw HTTP request; the status and the body (or what came after the headers)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        if status != 101:
            length = next(
                (
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                ),
                0,
            )
            while len(body) < length:
                chunk = s.recv(65536)
                if not chunk:
                    break
                body += chunk
        return status, body.decode("utf-8", "replace")


def _upgrade(port: int, host: str, extra: str = "") -> tuple[int, str]:
    return _exchange(port, f"GET /ws HTTP/1.1\r\nHost: {host}\r\n{UPGRADE}{extra}\r\n".encode())


def _get(port: int, path: str, host: str, extra: str = "") -> tuple[int, str]:
    return _exchange(port, f"GET {path} HTTP/1.1\r\nHost: {host}\r\n{extra}Connection: close\r\n\r\n".encode())


TUNNELS = [
    ("abc123.ngrok-free.app", ""),
    ("localhost:8765", "X-Forwarded-For: 203.0.113.7\r\nX-Forwarded-Proto: https\r\n"),
    ("my-gateway.trycloudflare.com", "Cf-Connecting-Ip: 203.0.113.7\r\n"),
    ("rebind.attacker.example:8765", ""),
    ("127.0.0.1", "Origin: https://evil.example\r\n"),
]


@pytest.mark.parametrize(("host", "extra"), TUNNELS, ids=["tunnel-host", "forwarded", "cloudflare", "rebind", "page"])
def test_without_a_token_a_tunnel_proxy_or_page_is_refused_with_403(gateway: Any, host: str, extra: str) -> None:
    status, body = _upgrade(gateway.port, host, extra)
    assert status == 403
    assert "TOKEN" in body and "token" in body
    status, body = _get(gateway.port, "/health", host, extra)
    assert status == 403 and "TOKEN" in body


def test_without_a_token_this_machine_talking_directly_comes_in(gateway: Any) -> None:
    for host in (f"127.0.0.1:{gateway.port}", f"localhost:{gateway.port}"):
        assert _upgrade(gateway.port, host)[0] == 101
        status, body = _get(gateway.port, "/health", host)
        assert status == 200 and json.loads(body) == {"status": "healthy"}
    # a page this machine serves (a local UI under development) may connect
    assert _upgrade(gateway.port, f"127.0.0.1:{gateway.port}", "Origin: http://localhost:5173\r\n")[0] == 101
    with GatewayClient(gateway.url) as c:
        assert c.connect("client")["type"] == "hello-ok"


def test_a_request_body_over_the_cap_is_refused_before_it_is_read(gateway: Any) -> None:
    from orbital.rest.limits import MAX_BODY_BYTES

    host = f"127.0.0.1:{gateway.port}"
    # only the headers are sent: the answer comes from the declared length, before any of the body
    head = f"POST /channels/telegram/default/webhook HTTP/1.1\r\nHost: {host}\r\n"
    status, body = _exchange(gateway.port, f"{head}Content-Length: {MAX_BODY_BYTES + 1}\r\n\r\n".encode())
    assert status == 413 and "too large" in body


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Any:
    gw = GatewayProcess(tmp_path_factory.mktemp("guarded") / "data", token=TOKEN).start()
    yield gw
    gw.stop()


def test_with_a_token_a_tunnel_comes_in_and_connect_asks_for_the_token(guarded: Any) -> None:
    for host, extra in TUNNELS:
        assert _upgrade(guarded.port, host, extra)[0] == 101, host
    with GatewayClient(guarded.url) as c:
        assert c.connect("client", token=TOKEN)["type"] == "hello-ok"
    with ws_connect(guarded.url, additional_headers={"X-Forwarded-For": "203.0.113.7"}) as ws:
        ws.send(json.dumps({"type": "req", "id": "1", "method": "connect", "params": {"minProtocol": 1}}))
        frames = []
        with pytest.raises(ConnectionClosed):
            while True:
                frames.append(json.loads(ws.recv(timeout=10)))
        assert ws.close_code == 4001
    assert {"code": 4001, "reason": "Unauthorized"} in [f.get("payload") for f in frames]


def test_with_a_token_an_unauthenticated_socket_is_closed_after_8_requests(guarded: Any) -> None:
    with ws_connect(guarded.url) as ws:
        for junk in ("not json", "[1]", '{"type":"evt"}'):  # ignored, and the socket stays open
            ws.send(junk)
        answers = []
        for n in range(1, 9):
            ws.send(json.dumps({"type": "req", "id": str(n), "method": "tools.list"}))
            answers.append(json.loads(ws.recv(timeout=10)))
        assert [a["error"] for a in answers] == [{"code": 101, "message": "Not connected"}] * 8
        closing = json.loads(ws.recv(timeout=10))
        assert closing["event"] == "connection.closing" and closing["payload"]["code"] == 1008
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=10)
        assert ws.close_code == 1008
