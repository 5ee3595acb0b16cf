"""The management API over HTTP, for a local gateway whose own AWS calls do not go in process.

Normally the gateway's posts and closes never leave the process (`orbital.local.inprocess`), so nothing listens for
them. When in-process AWS is off (only to measure what it saves), boto3's `apigatewaymanagementapi` client needs an
HTTP endpoint: this one listens on a loopback port of its own, never on the gateway's public port, and answers only
under a stage named by a secret drawn at each start (`http://127.0.0.1:PORT/<secret>/@connections/{id}`), which only
this process knows. Anyone else (another local user, a page in a browser, a tunnel) gets 403 and can neither inject
a frame into a socket nor close one.
"""

from __future__ import annotations

import hmac
import logging
import re
import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from orbital.local.bridge import MANAGE_TIMEOUT_S, BridgeUnavailable

if TYPE_CHECKING:
    from orbital.local.bridge import Bridge

log = logging.getLogger("orbital.local")

MAX_BODY_BYTES = 256 * 1024
"""Bodies are read up to this (a post over 128 KB is answered 413 by the bridge, as API Gateway does)."""

_PATH = re.compile(r"^/(?P<stage>[^/]+)/@connections/(?P<cid>[^/?]+)$")


class ManagementListener:
    def __init__(self) -> None:
        self.secret = secrets.token_urlsafe(24)
        self.bridge: Bridge | None = None
        listener = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                listener._answer(self, "POST")

            def do_GET(self) -> None:
                listener._answer(self, "GET")

            def do_DELETE(self) -> None:
                listener._answer(self, "DELETE")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="orbital-management", daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/{self.secret}"

    def serve(self, bridge: Bridge) -> None:
        self.bridge = bridge

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _answer(self, request: BaseHTTPRequestHandler, method: str) -> None:
        match = _PATH.match(request.path)
        if match is None or not hmac.compare_digest(match["stage"].encode(), self.secret.encode()):
            self._reply(request, 403, {}, b'{"message":"Forbidden"}')
            return
        length = int(request.headers.get("content-length") or 0)
        if length > MAX_BODY_BYTES:
            self._reply(request, 413, {"x-amzn-ErrorType": "PayloadTooLargeException"}, b'{"message":"Too large"}')
            return
        data = request.rfile.read(length) if length > 0 else b""
        bridge = self.bridge
        if bridge is None:
            self._reply(request, 503, {}, b'{"message":"Not serving yet"}')
            return
        headers = {k.lower(): v for k, v in request.headers.items()}
        try:
            status, answer_headers, body = bridge.manage(method, match["cid"], data, headers, timeout=MANAGE_TIMEOUT_S)
        except (BridgeUnavailable, TimeoutError) as exc:
            log.warning("management call failed: %s", exc)
            self._reply(request, 503, {}, b'{"message":"Unavailable"}')
            return
        self._reply(request, status, answer_headers, body)

    @staticmethod
    def _reply(request: BaseHTTPRequestHandler, status: int, headers: dict[str, str], body: bytes) -> None:
        request.send_response(status)
        for name, value in headers.items():
            request.send_header(name, value)
        if not any(name.lower() == "content-type" for name in headers):
            request.send_header("content-type", "application/json")
        request.send_header("content-length", str(len(body)))
        request.end_headers()
        request.wfile.write(body)
