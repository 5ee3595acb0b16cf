"""The Lambda entry points, driven by the sample API Gateway events in events/ against moto.

Each test calls the real `lambda_handler` of a function in functions/ (Powertools decorators included) with a
Lambda-shaped context, the way API Gateway would invoke it, and checks what the socket or HTTP client would get.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pytest

from functions.channel_webhook.channel_webhook import lambda_handler as webhook_handler
from functions.rest_api.rest_api import lambda_handler as rest_handler
from functions.ws_connect.ws_connect import lambda_handler as connect_handler
from functions.ws_disconnect.ws_disconnect import lambda_handler as disconnect_handler
from functions.ws_message.ws_message import lambda_handler as message_handler
from tests.conftest import BUCKET, EVENTS, NODE_RUNTIME, NODE_TOOLS, load_event, reset_caches

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish")

CONNECTION_ID = "test-conn-1"
SAMPLE_TOKEN = "sample-token-0123456789"  # the token carried by events/req-connect.json
REQUEST_EVENTS = sorted(p.name for p in EVENTS.glob("req-*.json") if p.name != "req-connect.json")


@dataclass
class FakeLambdaContext:
    function_name: str
    memory_limit_in_mb: int = 512
    invoked_function_arn: str = ""
    aws_request_id: str = "5f0c6c1e-0000-4000-8000-000000000001"

    def __post_init__(self) -> None:
        if not self.invoked_function_arn:
            self.invoked_function_arn = f"arn:aws:lambda:us-east-1:123456789012:function:{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        return 29_000


@pytest.fixture(autouse=True)
def _deployment_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ORBITAL_REQUIRE_TOKEN", raising=False)
    reset_caches()


@pytest.fixture
def posted(aws: None, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    """Every frame posted through the management API, one entry per post (moto itself concatenates them)."""
    from moto.apigatewaymanagementapi.models import ApiGatewayManagementApiBackend

    records: list[tuple[str, Any]] = []
    original = ApiGatewayManagementApiBackend.post_to_connection

    def record(self: Any, data: bytes, connection_id: str) -> None:
        records.append((connection_id, json.loads(data)))
        original(self, data, connection_id)

    monkeypatch.setattr(ApiGatewayManagementApiBackend, "post_to_connection", record)
    return records


def ws_connect(name: str = "connect.json") -> dict[str, Any]:
    return connect_handler(load_event(name), FakeLambdaContext("WsConnectFunction"))


def ws_disconnect(name: str = "disconnect.json") -> dict[str, Any]:
    return disconnect_handler(load_event(name), FakeLambdaContext("WsDisconnectFunction"))


def ws_message(event: dict[str, Any]) -> dict[str, Any]:
    return message_handler(event, FakeLambdaContext("WsMessageFunction"))


def send(name: str) -> dict[str, Any]:
    return ws_message(load_event(name))


def send_request(frame_id: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """A request of our own on the sample socket (same connection and request context as the samples)."""
    event = load_event("req-config-get.json")
    event["body"] = json.dumps({"type": "req", "id": frame_id, "method": method, "params": params})
    return ws_message(event)


def reply(response: dict[str, Any]) -> dict[str, Any]:
    """The frame a two-way route sends back to the socket."""
    assert response["statusCode"] == 200
    assert "body" in response, f"no route response: {response}"
    return json.loads(response["body"])


def connection_record() -> Any:
    from orbital.runtime.services import get_services

    return get_services().connections.get(CONNECTION_ID)


def open_socket() -> dict[str, Any]:
    """$connect, then the connect RPC: the hello-ok payload."""
    assert ws_connect()["statusCode"] == 200
    res = reply(send("req-connect.json"))
    assert res["ok"], res
    return res["payload"]


# --- every sample event is well-formed ---------------------------------------------------------------------------


def test_every_sample_event_targets_the_test_socket() -> None:
    names = {p.name for p in EVENTS.glob("*.json")}
    expected_routes = {"connect.json": "$connect", "disconnect.json": "$disconnect", "bin.json": "bin"}
    expected_routes["malformed.json"] = "$default"
    assert set(expected_routes) <= names
    assert len(REQUEST_EVENTS) >= 9
    http = {name for name in names if name.startswith("http-")}
    assert {"http-health.json", "http-admin-config-get.json", "http-media.json", "http-telegram-webhook.json"} <= http
    for name in sorted(http):  # API Gateway HTTP API, payload format 2.0, on the template's routes
        event = load_event(name)
        assert event["version"] == "2.0" and event["rawPath"] == event["requestContext"]["http"]["path"], name
        assert event["routeKey"] in {"ANY /{proxy+}", "POST /channels/{proxy+}"}, name
    for name in sorted(names - http):
        rc = load_event(name)["requestContext"]
        assert rc["connectionId"] == CONNECTION_ID, name
        assert rc["domainName"] == "abc123.execute-api.us-east-1.amazonaws.com", name
        assert rc["stage"] == "test", name
        assert rc["routeKey"] == expected_routes.get(name, "req"), name
    for name in ["req-connect.json", *REQUEST_EVENTS]:
        frame = json.loads(load_event(name)["body"])
        assert frame["type"] == "req" and frame["id"] and frame["method"], name


# --- $connect ----------------------------------------------------------------------------------------------------


def test_connect_event_accepts_the_socket(aws: None) -> None:
    assert ws_connect() == {"statusCode": 200}


def test_connect_is_refused_when_a_token_is_required_but_none_is_configured(
    aws: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORBITAL_REQUIRE_TOKEN", "true")
    monkeypatch.delenv("ORBITAL_AUTH_TOKEN", raising=False)
    reset_caches()
    response = ws_connect()
    assert response["statusCode"] == 403
    assert "token" in response["body"].lower()


def test_connect_is_accepted_when_the_required_token_is_configured(aws: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORBITAL_REQUIRE_TOKEN", "true")
    monkeypatch.setenv("ORBITAL_AUTH_TOKEN", SAMPLE_TOKEN)
    reset_caches()
    assert ws_connect() == {"statusCode": 200}


# --- req ---------------------------------------------------------------------------------------------------------


def test_connect_request_answers_hello_ok_on_the_route_response(aws: None) -> None:
    assert ws_connect()["statusCode"] == 200
    res = reply(send("req-connect.json"))
    assert res["type"] == "res"
    assert res["id"] == "c1"
    assert res["ok"] is True
    hello = res["payload"]
    assert hello["type"] == "hello-ok"
    assert hello["protocol"] == 1
    assert hello["server"]["connectionId"] == CONNECTION_ID
    assert "config.get" in hello["features"]["methods"]
    # API Gateway's caps, the same the local gateway enforces
    assert hello["features"]["limits"] == {"maxMessageBytes": 131072, "maxFrameBytes": 32768}
    assert hello["features"]["transferModes"] == ["text", "presigned"]
    record = connection_record()
    assert record is not None
    assert (record.mode, record.client_id) == ("client", "cli-test")


def test_request_before_connect_is_refused_with_101(aws: None) -> None:
    res = reply(send("req-config-get.json"))
    assert res["id"] == "c2"
    assert res["ok"] is False
    assert res["error"]["code"] == 101
    assert res["error"]["message"] == "Not connected"


def test_config_get_after_connect_returns_the_effective_config(aws: None) -> None:
    open_socket()
    res = reply(send("req-config-get.json"))
    assert res["id"] == "c2"
    assert res["ok"] is True, res
    config = res["payload"]["config"]
    assert isinstance(config, dict)
    assert config["userTimezone"] == "UTC"


def test_config_set_then_get_round_trips_through_the_handlers(aws: None) -> None:
    open_socket()
    res = reply(send("req-config-set.json"))
    assert res == {"type": "res", "id": "c3", "ok": True, "payload": {"ok": True, "path": "userTimezone"}}
    config = reply(send("req-config-get.json"))["payload"]["config"]
    assert config["userTimezone"] == "Europe/Berlin"


@pytest.mark.parametrize("name", REQUEST_EVENTS)
def test_every_sample_request_is_answered_ok_after_connect(aws: None, name: str) -> None:
    open_socket()
    event = load_event(name)
    frame = json.loads(event["body"])
    content = "# Soul\nBe kind and brief.\n"
    if frame["method"] == "workspace.read":
        written = reply(send_request("w1", "workspace.write", {"path": frame["params"]["path"], "content": content}))
        assert written["ok"], written
    res = reply(ws_message(event))
    assert res["type"] == "res"
    assert res["id"] == frame["id"]
    assert res["ok"] is True, f"{frame['method']}: {res.get('error')}"
    assert isinstance(res.get("payload"), dict)
    if frame["method"] == "workspace.read":
        assert res["payload"]["content"] == content


def test_wrong_token_is_answered_401_and_the_socket_is_closed(
    posted: list[tuple[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORBITAL_AUTH_TOKEN", "a-different-token-0123456789")
    reset_caches()
    assert ws_connect()["statusCode"] == 200
    response = send("req-connect.json")
    # the error must reach the socket before it closes, so it goes through the management API, not the route
    assert response == {"statusCode": 200}
    assert len(posted) == 2
    cid, frame = posted[0]
    assert cid == CONNECTION_ID
    assert frame["id"] == "c1"
    assert frame["error"]["code"] == 401
    assert posted[1] == (
        CONNECTION_ID,
        {"type": "evt", "event": "connection.closing", "payload": {"code": 4001, "reason": "Unauthorized"}},
    )
    assert connection_record() is None


def test_right_token_is_accepted(aws: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORBITAL_AUTH_TOKEN", SAMPLE_TOKEN)
    reset_caches()
    assert open_socket()["type"] == "hello-ok"


def test_the_token_is_read_from_its_secret_once_per_container(
    posted: list[tuple[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """As deployed: the functions know the secret's ARN, never the token (it is not in their environment)."""
    import boto3
    from orbital.aws import clients

    arn = boto3.client("secretsmanager", region_name="us-east-1").create_secret(
        Name="orbital-test/gateway-token", SecretString=SAMPLE_TOKEN
    )["ARN"]
    monkeypatch.setenv("ORBITAL_REQUIRE_TOKEN", "true")
    monkeypatch.setenv("ORBITAL_AUTH_TOKEN_SECRET", arn)
    reset_caches()
    before = clients.calls.get("secrets-manager.GetSecretValue", 0)
    assert ws_connect() == {"statusCode": 200}  # a token is configured: $connect needs no read
    assert open_socket()["type"] == "hello-ok"  # the sample connect frame carries SAMPLE_TOKEN
    assert open_socket()["type"] == "hello-ok"
    assert clients.calls.get("secrets-manager.GetSecretValue", 0) - before == 1
    send_request("c2", "connect", {"minProtocol": 1, "client": {"mode": "client"}, "auth": {"token": "wrong-token"}})
    assert [frame["error"]["code"] for _, frame in posted if frame.get("type") == "res"] == [401]


# --- $default and bin --------------------------------------------------------------------------------------------


def test_malformed_frame_gets_no_response_and_keeps_the_socket(posted: list[tuple[str, Any]]) -> None:
    open_socket()
    response = send("malformed.json")
    assert response == {"statusCode": 200}
    assert posted == []
    assert connection_record() is not None
    assert reply(send("req-config-get.json"))["ok"] is True


def test_bin_chunk_for_an_unknown_transfer_is_dropped(posted: list[tuple[str, Any]]) -> None:
    open_socket()
    event = load_event("bin.json")
    frame = json.loads(event["body"])
    assert frame["type"] == "bin" and frame["transferId"] == 1
    assert base64.b64decode(frame["data"]) == b"hello from a node\n"
    response = ws_message(event)
    assert response["statusCode"] == 200
    assert "body" not in response
    assert posted == []
    assert connection_record() is not None


# --- $disconnect -------------------------------------------------------------------------------------------------


def test_disconnect_removes_the_connection(aws: None) -> None:
    open_socket()
    assert connection_record() is not None
    assert ws_disconnect() == {"statusCode": 200}
    assert connection_record() is None
    # the socket is gone: a late frame on its id is treated as never connected
    assert reply(send("req-config-get.json"))["error"]["code"] == 101


def test_disconnect_of_an_unknown_socket_is_harmless(aws: None) -> None:
    assert ws_disconnect() == {"statusCode": 200}
    assert connection_record() is None


# --- HTTP API ----------------------------------------------------------------------------------------------------


def test_http_health(aws: None) -> None:
    response = rest_handler(load_event("http-health.json"), FakeLambdaContext("RestApiFunction"))
    assert response["statusCode"] == 200
    assert json.loads(response["body"]) == {"status": "healthy"}
    assert response["headers"]["content-type"].startswith("application/json")


def test_http_unknown_path_is_404(aws: None) -> None:
    event = load_event("http-health.json")
    event["rawPath"] = event["requestContext"]["http"]["path"] = "/nope"
    event["pathParameters"] = {"proxy": "nope"}
    response = rest_handler(event, FakeLambdaContext("RestApiFunction"))
    assert response["statusCode"] == 404


def test_a_reply_with_work_to_follow_is_sent_before_that_work(posted: list[tuple[str, Any]]) -> None:
    """API Gateway sends the route response only when the handler returns: a reply whose method has work to do after
    it (here closing the socket this one replaces) is posted first, so the peer reads it before anything else."""

    def node_connect(connection_id: str) -> dict[str, Any]:
        event = load_event("req-config-get.json")
        event["requestContext"]["connectionId"] = connection_id
        params = {
            "minProtocol": 1,
            "client": {"mode": "node", "id": "n1"},
            "tools": NODE_TOOLS,
            "nodeRuntime": NODE_RUNTIME,
        }
        event["body"] = json.dumps({"type": "req", "id": f"c-{connection_id}", "method": "connect", "params": params})
        return ws_message(event)

    for socket in ("firstSocket", "secondSocket"):  # a node's connect resumes its probes after the reply
        assert node_connect(socket) == {"statusCode": 200}  # nothing left for the route response
        to_socket = [frame for cid, frame in posted if cid == socket]
        assert to_socket[0]["id"] == f"c-{socket}" and to_socket[0]["payload"]["type"] == "hello-ok"
    # the replaced socket is told why before it is closed (a close through the management API carries no reason)
    assert [frame for cid, frame in posted if cid == "firstSocket"][-1] == {
        "type": "evt",
        "event": "connection.closing",
        "payload": {"code": 1000, "reason": "Replaced by newer node connection"},
    }


# --- the HTTP API through Mangum (API Gateway HTTP API events, payload format 2.0) -------------------------------

MEDIA_NAME = "0b7e4c6a-5d1f-4e1a-9c3b-2f6d8a9e0c11.png"  # events/http-media.json
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256))


def http(event: dict[str, Any]) -> dict[str, Any]:
    return rest_handler(event, FakeLambdaContext("RestApiFunction"))


def http_event(name: str, method: str, path: str, *, body: Any = None, headers: dict[str, str] | None = None) -> Any:
    """One of the sample events pointed at another route."""
    event = load_event(name)
    event["rawPath"] = event["requestContext"]["http"]["path"] = path
    event["requestContext"]["http"]["method"] = method
    event["pathParameters"] = {"proxy": path.lstrip("/")}
    if body is not None:
        event["body"] = json.dumps(body)
        event["headers"]["content-length"] = str(len(event["body"]))
    event["headers"].update(headers or {})
    return event


def body_of(response: dict[str, Any]) -> bytes:
    raw = response.get("body") or ""
    return base64.b64decode(raw) if response.get("isBase64Encoded") else raw.encode()


@pytest.fixture
def workspace(aws: None) -> Any:
    from orbital.runtime.services import get_services

    return get_services().workspace


def test_http_media_is_served_with_its_type_and_cache_headers(workspace: Any) -> None:
    from orbital.store import keys

    workspace.put(keys.media_object(MEDIA_NAME), PNG, content_type="image/png")
    response = http(load_event("http-media.json"))
    assert response["statusCode"] == 200
    assert body_of(response) == PNG
    headers = response["headers"]
    assert headers["content-type"] == "image/png"
    assert headers["cache-control"] == "private, max-age=3600"
    assert headers["access-control-allow-origin"] == "*"
    # never run as a page of the gateway's origin
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["content-security-policy"] == "sandbox"


def test_the_console_is_served_on_aws_and_told_the_websocket_apis_url(token: str, workspace: Any) -> None:
    """`HttpApiUrl` opens the console: the page and its files need no bearer, and it learns the WebSocket API's
    `wss://` URL (the HTTP API is another host), which its policy lets it connect to and nothing else."""
    page = http(http_event("http-media.json", "GET", "/"))
    assert page["statusCode"] == 200 and page["headers"]["content-type"].startswith("text/html")
    assert b'<meta name="viewport"' in body_of(page)
    policy = page["headers"]["content-security-policy"]
    assert "connect-src 'self' wss://abc123.execute-api.us-east-1.amazonaws.com;" in policy
    # large media redirect to the bucket's presigned URLs: its own origin, not every host of AWS
    images = next(part for part in policy.split("; ") if part.startswith("img-src "))
    assert "*" not in images and "https://*.amazonaws.com" not in policy
    presigned = urlsplit(workspace.presign_get("media/some-object.png"))
    assert f"{presigned.scheme}://{presigned.netloc}" in images.split(), (presigned, images)
    assert images.split()[:4] == ["img-src", "'self'", "data:", "blob:"]
    assert all(BUCKET in origin for origin in images.split()[4:]), images
    assert "script-src 'self';" in policy and "default-src 'none'" in policy
    script = http(http_event("http-media.json", "GET", "/console/app.js"))
    assert script["statusCode"] == 200 and script["headers"]["content-type"].startswith("text/javascript")
    tag = script["headers"]["etag"]
    again = http(http_event("http-media.json", "GET", "/console/app.js", headers={"if-none-match": tag}))
    assert again["statusCode"] == 304 and not body_of(again)
    config = json.loads(body_of(http(http_event("http-media.json", "GET", "/console/config.json"))))
    assert config["wsUrl"] == "wss://abc123.execute-api.us-east-1.amazonaws.com/test"
    assert config["tokenRequired"] is True  # a deployment always has its token
    for path in ("/console/nothing.js", "/console/../template.yaml", "/console/%2e%2e/README.md"):
        assert http(http_event("http-media.json", "GET", path))["statusCode"] == 404, path


@pytest.mark.parametrize("name", ["nothing-here", "0b7e4c6a.PNG.exe", "..%2Fsecret.txt", "ab_cd.png"])
def test_http_media_with_a_name_out_of_pattern_is_404(workspace: Any, name: str) -> None:
    response = http(http_event("http-media.json", "GET", f"/media/{name}"))
    assert response["statusCode"] == 404


def test_http_media_missing_is_404(workspace: Any) -> None:
    response = http(load_event("http-media.json"))
    assert (response["statusCode"], body_of(response)) == (404, b"Not Found")


def test_http_media_past_its_expiry_is_410_and_deleted(workspace: Any) -> None:
    from orbital.store import keys

    key = keys.media_object(MEDIA_NAME)
    workspace.put(key, PNG, content_type="image/png", metadata={"expires-at": "1000"})
    response = http(load_event("http-media.json"))
    assert (response["statusCode"], body_of(response)) == (410, b"Expired")
    assert workspace.head(key) is None
    assert http(load_event("http-media.json"))["statusCode"] == 404


def test_http_media_too_large_for_a_lambda_response_is_a_presigned_redirect(workspace: Any) -> None:
    from orbital.rest.limits import LAMBDA_BODY_BYTES
    from orbital.store import keys

    workspace.put(keys.media_object(MEDIA_NAME), b"x" * (LAMBDA_BODY_BYTES + 1), content_type="image/png")
    response = http(load_event("http-media.json"))
    assert response["statusCode"] == 302
    location = response["headers"]["location"]
    assert f"/media/{MEDIA_NAME}" in location and "Signature" in location
    assert response["headers"]["cache-control"] == "private, max-age=3600"


def test_http_admin_call_with_the_token(aws: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORBITAL_AUTH_TOKEN", SAMPLE_TOKEN)  # the bearer of events/http-admin-config-get.json
    reset_caches()
    token = {"authorization": f"Bearer {SAMPLE_TOKEN}"}
    body = {"path": "userTimezone", "value": "Europe/Berlin"}
    written = http(http_event("http-admin-config-get.json", "POST", "/api/v1/config.set", body=body, headers=token))
    assert written["statusCode"] == 200, written
    assert json.loads(written["body"]) == {"ok": True, "path": "userTimezone"}
    response = http(load_event("http-admin-config-get.json"))
    assert response["statusCode"] == 200
    assert response["headers"]["content-type"] == "application/json"
    assert json.loads(response["body"])["config"]["userTimezone"] == "Europe/Berlin"


def test_http_admin_refusals(aws: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from orbital.runtime.services import get_services
    from orbital.store import installs

    monkeypatch.setenv("ORBITAL_AUTH_TOKEN", SAMPLE_TOKEN)
    reset_caches()
    event = load_event("http-admin-config-get.json")
    del event["headers"]["authorization"]
    missing = http(event)
    assert missing["statusCode"] == 401 and missing["headers"]["www-authenticate"] == "Bearer"
    event["headers"]["authorization"] = "Bearer not-the-token-0123456789"
    assert http(event)["statusCode"] == 401
    _, install_token = installs.register(get_services().table, "linux", now_ms=1, gateway_token=SAMPLE_TOKEN)
    event["headers"]["authorization"] = f"Bearer {install_token}"
    assert http(event)["statusCode"] == 403
    token = {"authorization": f"Bearer {SAMPLE_TOKEN}"}
    node_only = http(http_event("http-admin-config-get.json", "POST", "/api/v1/tool.result", body={}, headers=token))
    assert node_only["statusCode"] == 404 and "node sockets" in json.loads(node_only["body"])["detail"]
    invalid = http(http_event("http-admin-config-get.json", "POST", "/api/v1/session.get", body={"sessionKey": 1}))
    assert invalid["statusCode"] == 400
    assert json.loads(invalid["body"])["detail"].startswith("Invalid params for session.get: sessionKey")


def test_http_openapi_and_docs_need_no_token(aws: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from openapi_spec_validator import validate

    monkeypatch.setenv("ORBITAL_AUTH_TOKEN", SAMPLE_TOKEN)
    reset_caches()
    document = http(http_event("http-health.json", "GET", "/openapi.json"))
    assert document["statusCode"] == 200
    validate(json.loads(document["body"]))
    page = http(http_event("http-health.json", "GET", "/docs"))
    assert page["statusCode"] == 200 and page["headers"]["content-type"].startswith("text/html")


def test_http_telegram_webhook_checks_its_secret_before_anything(aws: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from orbital.channels import inbound

    handed: list[Any] = []
    monkeypatch.setattr(inbound, "receive", lambda services, params: handed.append(params))
    response = webhook_handler(load_event("http-telegram-webhook.json"), FakeLambdaContext("ChannelWebhookFunction"))
    assert response["statusCode"] == 401
    assert json.loads(response["body"]) == {"ok": False, "error": "unauthorized"}
    assert handed == []
