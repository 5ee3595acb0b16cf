"""Presigned uploads from a node always carry a content type (urllib's default would make the body a form)."""

from __future__ import annotations

import http.server
import threading
from pathlib import Path
from typing import Any

import pytest
from orbital.node.transfer import http_put_file


@pytest.fixture
def put_server() -> Any:
    seen: dict[str, Any] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_PUT(self) -> None:
            seen["type"] = self.headers.get("Content-Type")
            seen["body"] = self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/bucket/key", seen
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


@pytest.mark.parametrize(("mime", "expected"), [(None, "application/octet-stream"), ("image/png", "image/png")])
def test_upload_names_a_content_type(put_server: Any, tmp_path: Path, mime: str | None, expected: str) -> None:
    url, seen = put_server
    path = tmp_path / "blob"
    path.write_bytes(b"a=1&b=2 raw bytes")
    assert http_put_file(url, path, path.stat().st_size, mime) == path.stat().st_size
    assert seen == {"type": expected, "body": b"a=1&b=2 raw bytes"}
