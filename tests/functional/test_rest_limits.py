"""Request bodies on the HTTP routes are capped before they are read into memory: 413, locally (from Content-Length,
or while a chunked body streams in) as on Lambda (before the event's body is decoded)."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest
from orbital.rest import app as rest

BIG = rest.MAX_BODY_BYTES + 1


@pytest.fixture
def handled(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, int]]:
    """What reached the routes (method, path, body size)."""
    seen: list[tuple[str, str, int]] = []

    def record(method: str, path: str, headers: Any, body: bytes) -> rest.Answer:
        seen.append((method, path, len(body)))
        return rest.Answer(200, {"ok": True})

    monkeypatch.setattr(rest, "handle", record)
    return seen


def test_a_body_over_the_cap_is_refused_from_its_length(handled: list[Any]) -> None:
    from starlette.testclient import TestClient

    with TestClient(rest.create_app()) as http:
        answer = http.post("/channels/telegram/main/webhook", content=b"x" * BIG)
        assert answer.status_code == 413
        assert answer.json() == {"error": f"Request body too large (at most {rest.MAX_BODY_BYTES} bytes)"}
        assert http.post("/channels/telegram/main/webhook", content=b"x" * rest.MAX_BODY_BYTES).status_code == 200
    assert handled == [("POST", "/channels/telegram/main/webhook", rest.MAX_BODY_BYTES)]


def test_a_streamed_body_is_refused_once_it_passes_the_cap(handled: list[Any]) -> None:
    from starlette.testclient import TestClient

    def chunks() -> Iterator[bytes]:  # no Content-Length: chunked
        for _ in range(64):
            yield b"y" * (64 * 1024)

    with TestClient(rest.create_app()) as http:
        answer = http.post("/channels/telegram/main/webhook", content=chunks())
    assert answer.status_code == 413
    assert handled == []


def test_on_lambda_the_body_is_measured_before_it_is_decoded(handled: list[Any]) -> None:
    serve = rest.lambda_adapter()

    def event(body: str, encoded: bool) -> dict[str, Any]:
        return {
            "rawPath": "/channels/telegram/main/webhook",
            "requestContext": {"http": {"method": "POST", "path": "/channels/telegram/main/webhook"}},
            "headers": {"content-type": "application/json"},
            "body": body,
            "isBase64Encoded": encoded,
        }

    assert serve(event("x" * BIG, False), None)["statusCode"] == 413
    assert serve(event(base64.b64encode(b"x" * BIG).decode(), True), None)["statusCode"] == 413
    assert serve(event(base64.b64encode(b'{"update_id":1}').decode(), True), None)["statusCode"] == 200
    assert handled == [("POST", "/channels/telegram/main/webhook", 15)]
