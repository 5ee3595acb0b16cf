"""WindieOS's artifact routes as the `rest_api` Lambda serves them: API Gateway HTTP API events (payload format 2.0,
shaped like `events/http-health.json`) through `lambda_handler()`, on moto. An upload arrives base64 encoded in the
event; a download is a 302 to a presigned S3 URL; an upload that could not fit in an event is 413."""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
from orbital.rest import app as rest
from orbital.rest import limits

from tests.conftest import GATEWAY_TOKEN, load_event

BOUNDARY = "----windieSdkBoundary7MA4YWxkTrZu0gW"


@pytest.fixture
def serve(services: Any) -> Iterator[Any]:
    from orbital.runtime.services import use_services

    object.__setattr__(services, "settings", services.settings.model_copy(update={"auth_token": GATEWAY_TOKEN}))
    assert not services.settings.local
    use_services(services)
    rest.lambda_handler.cache_clear()
    yield rest.lambda_handler()
    rest.lambda_handler.cache_clear()
    use_services(None)


def event(method: str, path: str, *, body: bytes = b"", headers: dict[str, str] | None = None) -> dict[str, Any]:
    made = copy.deepcopy(load_event("http-health.json"))
    made["rawPath"] = path
    made["requestContext"]["http"].update(method=method, path=path)
    made["pathParameters"] = {"proxy": path.lstrip("/")}
    made["headers"] = {**made["headers"], "content-length": str(len(body)), **(headers or {})}
    if body:
        made["body"] = base64.b64encode(body).decode()
        made["isBase64Encoded"] = True
    return made


def multipart(data: bytes, filename: str, kind: str) -> tuple[bytes, str]:
    """The body a browser's FormData (the TypeScript SDK) or aiohttp (the Python SDK) sends for field `file`."""
    head = (
        f"--{BOUNDARY}\r\n"
        f'Content-Disposition: form-data; name="file"; filename="{filename}"\r\n'
        f"Content-Type: {kind}\r\n\r\n"
    ).encode()
    return head + data + f"\r\n--{BOUNDARY}--\r\n".encode(), f"multipart/form-data; boundary={BOUNDARY}"


def auth() -> dict[str, str]:
    return {"authorization": f"Bearer {GATEWAY_TOKEN}"}


def test_upload_and_presigned_download_through_the_lambda_handler(serve: Any) -> None:
    import requests

    data = os.urandom(2 * 1024 * 1024 + 3)
    body, kind = multipart(data, "snap.png", "image/png")
    answer = serve(event("POST", "/api/artifacts/", body=body, headers={**auth(), "content-type": kind}), None)
    assert answer["statusCode"] == 200, answer["body"]
    made = json.loads(answer["body"])
    assert made["sha256"] == hashlib.sha256(data).hexdigest() and made["size_bytes"] == len(data)
    host = load_event("http-health.json")["headers"]["host"]
    assert made["url"] == f"https://{host}/api/artifacts/{made['artifact_id']}"

    got = serve(event("GET", f"/api/artifacts/{made['artifact_id']}", headers=auth()), None)
    assert got["statusCode"] == 302
    location = got["headers"]["location"]
    assert f"media/{made['artifact_id']}" in location
    fetched = requests.get(location, timeout=10)  # what fetch and aiohttp do: follow it, without the bearer
    assert fetched.status_code == 200 and fetched.content == data

    assert serve(event("GET", f"/api/artifacts/{made['artifact_id']}"), None)["statusCode"] == 401


def test_an_upload_larger_than_an_event_carries_is_413(serve: Any) -> None:
    data = b"\0" * (limits.LAMBDA_BODY_BYTES + 1)
    body, kind = multipart(data, "big.bin", "application/octet-stream")
    answer = serve(event("POST", "/api/artifacts/", body=body, headers={**auth(), "content-type": kind}), None)
    assert answer["statusCode"] == 413
    assert json.loads(answer["body"]) == limits.too_large(limits.LAMBDA_BODY_BYTES)


def test_embeddings_and_runs_answer_503_through_the_lambda_handler(serve: Any) -> None:
    body = json.dumps({"text": "hello", "model_name": "default"}).encode()
    headers = {**auth(), "content-type": "application/json"}
    answer = serve(event("POST", "/api/embeddings/", body=body, headers=headers), None)
    assert answer["statusCode"] == 503 and "not configured" in json.loads(answer["body"])["detail"]
    runs = serve(event("POST", "/api/runs/", body=b"{}", headers=headers), None)
    assert runs["statusCode"] == 503
