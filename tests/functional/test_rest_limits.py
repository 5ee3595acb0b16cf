"""Request bodies on the HTTP routes are capped before they are read into memory: 413, locally (from Content-Length,
or while a chunked body streams in) as on Lambda (before the event's body is decoded)."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import Request
from orbital.rest import app as rest
from orbital.rest import limits

BIG = limits.MAX_BODY_BYTES + 1


@pytest.fixture
def handled(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, int]]:
    """The app with one more route that records what reached it (method, path, body size)."""
    seen: list[tuple[str, str, int]] = []
    build = rest.create_app

    def create_app() -> Any:
        app = build()

        @app.post("/echo")
        async def echo(request: Request) -> dict[str, bool]:
            seen.append((request.method, request.url.path, len(await request.body())))
            return {"ok": True}

        return app

    monkeypatch.setattr(rest, "create_app", create_app)
    rest.lambda_handler.cache_clear()
    yield seen
    rest.lambda_handler.cache_clear()


def test_a_body_over_the_cap_is_refused_from_its_length(handled: list[Any]) -> None:
    from starlette.testclient import TestClient

    with TestClient(rest.create_app()) as http:
        answer = http.post("/echo", content=b"x" * BIG)
        assert answer.status_code == 413
        assert answer.json() == {
            "detail": f"Request body too large (at most {limits.MAX_BODY_BYTES} bytes)",
            "code": 413,
        }
        assert http.post("/echo", content=b"x" * limits.MAX_BODY_BYTES).status_code == 200
    assert handled == [("POST", "/echo", limits.MAX_BODY_BYTES)]


def test_a_streamed_body_is_refused_once_it_passes_the_cap(handled: list[Any]) -> None:
    from starlette.testclient import TestClient

    def chunks() -> Iterator[bytes]:  # no Content-Length: chunked
        for _ in range(64):
            yield b"y" * (64 * 1024)

    with TestClient(rest.create_app()) as http:
        answer = http.post("/echo", content=chunks())
    assert answer.status_code == 413
    assert handled == []


def test_on_lambda_the_body_is_measured_before_it_is_decoded(handled: list[Any]) -> None:
    serve = rest.lambda_handler()

    def event(body: str, encoded: bool) -> dict[str, Any]:
        return {
            "version": "2.0",
            "routeKey": "$default",
            "rawPath": "/echo",
            "rawQueryString": "",
            "requestContext": {
                "http": {"method": "POST", "path": "/echo", "sourceIp": "192.0.2.1", "protocol": "HTTP/1.1"},
                "stage": "$default",
            },
            "headers": {"content-type": "application/octet-stream", "host": "example.com"},
            "body": body,
            "isBase64Encoded": encoded,
        }

    assert serve(event("x" * BIG, False), None)["statusCode"] == 413
    assert serve(event(base64.b64encode(b"x" * BIG).decode(), True), None)["statusCode"] == 413
    exact = base64.b64encode(b"x" * limits.MAX_BODY_BYTES).decode()
    assert serve(event(exact, True), None)["statusCode"] == 200
    assert serve(event(base64.b64encode(b'{"update_id":1}').decode(), True), None)["statusCode"] == 200
    assert handled == [("POST", "/echo", limits.MAX_BODY_BYTES), ("POST", "/echo", 15)]
