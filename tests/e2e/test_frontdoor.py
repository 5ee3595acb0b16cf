"""Who may reach a real `orbital dev`: by default a token it keeps in its data directory; token-less (`--auth
same-user`) only its own OS user on this machine talking to it directly (no other user, tunnel, proxy, other host or
web page); with a token anyone who presents it, but never another site's page; an unauthenticated socket is closed
after 8 requests. Raw HTTP over a socket, so the tests choose every header a tunnel or a browser would send."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
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
    assert gateway.auth == "same-user"
    what_to_do = "own address" if "Origin" in extra else "token"
    status, body = _upgrade(gateway.port, host, extra)
    assert status == 403
    assert what_to_do in body
    status, body = _get(gateway.port, "/health", host, extra)
    assert status == 403 and what_to_do in body


def test_without_a_token_this_user_talking_directly_comes_in(gateway: Any) -> None:
    for host in (f"127.0.0.1:{gateway.port}", f"localhost:{gateway.port}"):
        assert _upgrade(gateway.port, host)[0] == 101
        status, body = _get(gateway.port, "/health", host)
        assert status == 200 and json.loads(body) == {"status": "healthy"}
    # the gateway's own pages may connect
    assert _upgrade(gateway.port, f"127.0.0.1:{gateway.port}", f"Origin: http://127.0.0.1:{gateway.port}\r\n")[0] == 101
    with GatewayClient(gateway.url) as c:
        assert c.connect("client")["type"] == "hello-ok"


@pytest.mark.parametrize("origin", ["http://localhost:5173", "http://foo.localhost:{port}", "null"])
def test_a_page_of_another_port_or_a_localhost_name_is_foreign(gateway: Any, origin: str) -> None:
    extra = f"Origin: {origin.format(port=gateway.port)}\r\n"
    for host in (f"127.0.0.1:{gateway.port}", f"foo.localhost:{gateway.port}"):
        assert _upgrade(gateway.port, host, extra)[0] == 403
    assert _upgrade(gateway.port, f"foo.localhost:{gateway.port}")[0] == 403


NOBODY = 65534
RAW_CLIENT = """
import socket, sys
port = int(sys.argv[1])
with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
    s.sendall(sys.argv[2].encode().replace(b"|", b"\\r\\n"))
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
        if b"\\r\\n\\r\\n" in data and len(data.partition(b"\\r\\n\\r\\n")[2]) > 20:
            break
sys.stdout.write(data.decode("utf-8", "replace"))
"""


def _as_nobody(port: int, request: str) -> str:
    """`request` (lines joined with |) sent by a process of the user `nobody`; what came back."""
    # the system's Python: the project's virtual environment may be out of that user's reach
    python = next((p for p in ("/usr/bin/python3", shutil.which("python3")) if p and os.path.exists(p)), None)
    assert python, "a python3 the user nobody can run"
    done = subprocess.run(
        [python, "-c", RAW_CLIENT, str(port), request],
        user=NOBODY,
        group=NOBODY,
        extra_groups=[],
        cwd="/",
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to run a client as another user")
def test_without_a_token_another_user_of_this_machine_is_refused(gateway: Any) -> None:
    host = f"127.0.0.1:{gateway.port}"
    answer = _as_nobody(gateway.port, f"GET /health HTTP/1.1|Host: {host}|Connection: close||")
    assert answer.startswith("HTTP/1.1 403") and "serves only the user who started it" in answer
    upgrade = f"GET /ws HTTP/1.1|Host: {host}|{UPGRADE.replace(chr(13) + chr(10), '|')}|"
    answer = _as_nobody(gateway.port, upgrade)
    assert answer.startswith("HTTP/1.1 403") and "serves only the user who started it" in answer
    config = f"GET /api/v1/config.get HTTP/1.1|Host: {host}|Connection: close||"
    assert _as_nobody(gateway.port, config).startswith("HTTP/1.1 403")
    # the gateway's own user, the same request: in
    assert _get(gateway.port, "/health", host)[0] == 200


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
        if "Origin" in extra:  # another site's page: refused with a token too
            assert _upgrade(guarded.port, host, extra)[0] == 403, host
            continue
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


def _post(port: int, path: str, bearer: str, body: str = "{}") -> tuple[int, str]:
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {bearer}\r\n"
    head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    return _exchange(port, (head + body).encode())


def test_ten_wrong_tokens_in_a_minute_hold_the_peer_back_for_a_minute(tmp_path: Any) -> None:
    gw = GatewayProcess(tmp_path / "data", token=TOKEN).start()
    try:
        for n in range(10):
            with ws_connect(gw.url) as ws:
                hello = {"minProtocol": 1, "maxProtocol": 1, "auth": {"token": f"guess-{n:02d}-0123456789"}}
                ws.send(json.dumps({"type": "req", "id": "1", "method": "connect", "params": hello}))
                assert json.loads(ws.recv(timeout=10))["error"]["code"] == 401
        # the right token too, from that address: 429 at the upgrade and on HTTP, before the token is looked at
        status, body = _upgrade(gw.port, f"127.0.0.1:{gw.port}")
        assert status == 429 and "try again in a minute" in body
        status, body = _post(gw.port, "/api/v1/config.get", TOKEN, '{"path":"model"}')
        assert status == 429 and "try again in a minute" in body
    finally:
        gw.stop()
    assert gw.output.count("failed attempts with a wrong token") == 1  # one line for the burst
    assert "guess-" not in gw.output  # no token tried is logged


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to run a client as another user")
def test_another_users_wrong_tokens_hold_back_that_user_not_the_owner(tmp_path: Any) -> None:
    gw = GatewayProcess(tmp_path / "data", token=TOKEN).start()
    try:
        host = f"127.0.0.1:{gw.port}"

        def post_as_nobody(bearer: str) -> str:
            head = f"POST /api/v1/config.get HTTP/1.1|Host: {host}|Authorization: Bearer {bearer}|"
            return _as_nobody(gw.port, head + "Content-Type: application/json|Content-Length: 2|Connection: close||{}")

        for n in range(10):
            answer = post_as_nobody(f"guess-{n:02d}-0123456789")
            assert answer.startswith("HTTP/1.1 401"), answer[:80]
        assert post_as_nobody(TOKEN).startswith("HTTP/1.1 429")  # that user, even with the right token
        # the owner, from the same loopback address: not held back, over HTTP and at the WebSocket upgrade
        assert _post(gw.port, "/api/v1/config.get", TOKEN, '{"path":"model"}')[0] == 200
        assert _upgrade(gw.port, host, f"Authorization: Bearer {TOKEN}\r\n")[0] == 101
    finally:
        gw.stop()
    assert "guess-" not in gw.output


def test_ten_wrong_exoclaw_tokens_hold_the_peer_back_too(tmp_path: Any) -> None:
    gw = GatewayProcess(tmp_path / "data", token=TOKEN).start()
    try:
        for n in range(10):
            with ws_connect(gw.url) as ws:
                ws.send(json.dumps({"token": f"guess-{n:02d}-0123456789"}))  # Exoclaw's first frame
                assert "error" in json.loads(ws.recv(timeout=10))
        status, body = _upgrade(gw.port, f"127.0.0.1:{gw.port}")
        assert status == 429 and "try again in a minute" in body
    finally:
        gw.stop()
    assert "guess-" not in gw.output


def test_ten_wrong_bearers_on_http_hold_the_peer_back(tmp_path: Any) -> None:
    gw = GatewayProcess(tmp_path / "data", token=TOKEN).start()
    try:
        for n in range(10):
            assert _post(gw.port, "/api/v1/config.get", f"guess-{n:02d}-0123456789")[0] == 401
        assert _post(gw.port, "/api/v1/config.get", TOKEN, '{"path":"model"}')[0] == 429
        assert _upgrade(gw.port, f"127.0.0.1:{gw.port}", f"Authorization: Bearer {TOKEN}\r\n")[0] == 429
    finally:
        gw.stop()
