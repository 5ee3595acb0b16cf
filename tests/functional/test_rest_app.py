"""The HTTP app through FastAPI's TestClient on moto: the admin API generated from the registry (end to end through
the real handlers, mode rules, error mapping, deferred answers), who may call which route, and the OpenAPI
document. The same app through Mangum and API Gateway events: tests/functional/test_handlers.py."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from orbital.methods import registry
from orbital.rest import admin, auth
from orbital.store import installs, keys
from starlette.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from tests.conftest import wait_for
from tests.support.http_routes import WEBSOCKET, app_routes, probe_path

SECRET_KEY = "sk-live-DISTINCTIVE-0123456789abcdef"


def _client(token: str | None = None) -> TestClient:
    from orbital.rest.app import create_app

    client = TestClient(create_app())
    if token is not None:
        client.headers["Authorization"] = f"Bearer {token}"
    return client


@pytest.fixture
def gateway(token: str, services: Any) -> Iterator[Any]:
    """`services` (with the gateway token) installed for the app."""
    from orbital.runtime.services import use_services

    assert services.settings.auth_token == token
    use_services(services)
    yield services
    use_services(None)


@pytest.fixture
def http(gateway: Any, token: str) -> TestClient:
    return _client(token)


def _events(sender: Any, connection_id: str, name: str) -> list[dict[str, Any]]:
    return [f for f in sender.frames_to(connection_id) if isinstance(f, dict) and f.get("event") == name]


# --- the admin API, end to end -----------------------------------------------------------------------------------


def test_config_set_and_get_round_trip_and_secrets_stay_masked(http: TestClient) -> None:
    answer = http.post("/api/v1/config.set", json={"path": "userTimezone", "value": "Europe/Berlin"})
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"ok": True, "path": "userTimezone"}
    assert http.post("/api/v1/config.set", json={"path": "apiKeys.openai", "value": SECRET_KEY}).status_code == 200
    got = http.post("/api/v1/config.get")  # no body at all: a method's params are optional
    assert got.status_code == 200
    config = got.json()["config"]
    assert config["userTimezone"] == "Europe/Berlin"
    assert config["apiKeys"]["openai"] != SECRET_KEY
    assert SECRET_KEY not in got.text and SECRET_KEY[-8:] not in got.text
    one = http.post("/api/v1/config.get", json={"path": "apiKeys.openai"})
    assert one.status_code == 200 and SECRET_KEY not in one.text


def test_several_families_through_their_real_handlers(http: TestClient, services: Any) -> None:
    written = http.post("/api/v1/workspace.write", json={"path": "notes/today.md", "content": "# Today\n"})
    assert written.status_code == 200, written.text
    read = http.post("/api/v1/workspace.read", json={"path": "notes/today.md"})
    assert read.status_code == 200 and read.json()["content"] == "# Today\n"
    job = {"name": "tick", "schedule": {"kind": "every", "everyMs": 3_600_000}, "spec": {"mode": "task"}}
    job["spec"]["message"] = "summarize the news"
    added = http.post("/api/v1/cron.add", json=job)
    assert added.status_code == 200, added.text
    listed = http.post("/api/v1/cron.list", json={})
    assert [j["name"] for j in listed.json()["jobs"]] == ["tick"]
    assert http.post("/api/v1/sessions.list", json={}).status_code == 200
    assert http.post("/api/v1/heartbeat.status", content=b"").json()["agents"] is not None
    assert http.post("/api/v1/pair.list", json={}).json()["pairs"] == {}
    # nothing of the request's own socket is stored: no connection record, no registry entry
    assert not list(services.table.query(keys.CLIENTS_PK))


def test_errors_are_the_sockets_own_with_the_status_of_their_code(http: TestClient, connect: Any) -> None:
    socket = connect("client", "compare")
    cases = [
        ("tool.invoke", {"tool": "nobody__Bash"}),  # 404 no node provides it
        ("tool.invoke", {}),  # 400 tool required
        ("session.get", {"sessionKey": 5}),  # 400 from the params model
        ("workspace.read", {"path": "../../etc/passwd"}),
        ("pair.approve", {"channel": "telegram", "senderId": "nobody"}),  # 404
    ]
    for method, params in cases:
        expected = socket.error(method, params)
        answer = http.post(f"/api/v1/{method}", json=params)
        assert answer.status_code == admin.status_for(expected["code"]), (method, answer.text)
        assert answer.json()["detail"] == expected["message"], method
        assert answer.json()["code"] == expected["code"], method
    not_object = http.post("/api/v1/cron.add", json=[1, 2])
    assert not_object.status_code == 400
    assert not_object.json() == {"detail": "Invalid params: expected an object", "code": 400}
    form = http.post("/api/v1/cron.list", content=b"{}", headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert form.status_code == 400  # what `curl -d` sends: the answer says what to send instead
    assert "Content-Type: application/json" in form.json()["detail"]


@pytest.mark.parametrize(
    ("code", "status"),
    [
        *[(code, code) for code in (400, 401, 403, 404, 409, 413, 429, 500, 502, 503, 504)],
        *[(101, 400), (102, 400), (103, 400), (1008, 500), (0, 500)],
    ],
)
def test_gsv_codes_map_to_http_statuses(code: int, status: int) -> None:
    assert admin.status_for(code) == status


def test_methods_other_sockets_call_are_not_routed(http: TestClient) -> None:
    for method, why in [
        ("tool.result", "only node sockets"),
        ("channel.inbound", "only channel sockets"),
        ("node.probe.result", "only node sockets"),
        ("connect", "only meaningful on a WebSocket"),
        ("no.such.method", "Unknown method"),
    ]:
        answer = http.post(f"/api/v1/{method}", json={})
        assert answer.status_code == 404, method
        assert why in answer.json()["detail"], method


# --- deferred methods -------------------------------------------------------------------------------------------


def _post_in_background(client: TestClient, path: str, body: Any) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        out["answer"] = client.post(path, json=body)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def _answers_left(services: Any) -> list[Any]:
    from orbital.store import http_answers

    found = services.table.client.scan(TableName=services.settings.table_name)["Items"]
    return [i for i in found if i["PK"]["S"].startswith(keys.http_answer(http_answers.WAITER_PREFIX)[0])]


def test_a_node_tool_call_waits_for_the_nodes_answer(
    token: str, flows: Any, connect: Any, sender: Any, services: Any
) -> None:
    node = connect("node", "n1")
    thread, out = _post_in_background(_client(token), "/api/v1/tool.invoke", {"tool": "n1__Bash", "args": {"x": 1}})
    evt = wait_for(lambda: _events(sender, node.connection_id, "tool.invoke"))[0]
    assert evt["payload"]["args"] == {"x": 1}
    assert node.call("tool.result", {"callId": evt["payload"]["callId"], "result": {"output": "hi\n"}}) == {"ok": True}
    thread.join(timeout=30)
    assert out["answer"].status_code == 200, out["answer"].text
    assert out["answer"].json() == {"result": {"output": "hi\n"}}
    assert not [cid for cid, _ in sender.posts if cid.startswith("http:")]  # nothing posted to the request
    assert _answers_left(services) == []  # taken, and removed


def test_a_node_lost_while_the_request_waits_is_a_503(
    token: str, flows: Any, connect: Any, sender: Any, services: Any
) -> None:
    from orbital.ports import lifecycle

    node = connect("node", "n2")
    thread, out = _post_in_background(_client(token), "/api/v1/tool.invoke", {"tool": "n2__Bash"})
    wait_for(lambda: _events(sender, node.connection_id, "tool.invoke"))
    lifecycle.disconnect(services, node.connection_id)
    thread.join(timeout=30)
    assert out["answer"].status_code == 503
    assert out["answer"].json()["code"] == 503


def test_a_request_waits_within_its_bound_then_answers_504(
    token: str, flows: Any, connect: Any, sender: Any, services: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(admin, "WAIT_SECONDS", 0.4)
    node = connect("node", "n3")
    answer = _client(token).post("/api/v1/tool.invoke", json={"tool": "n3__Bash"})
    assert answer.status_code == 504
    body = answer.json()
    assert body["code"] == 504 and "no answer within" in body["detail"] and "WebSocket" in body["detail"]
    # the call went on: the node's late answer is accepted and kept for nobody, never posted anywhere
    (evt,) = _events(sender, node.connection_id, "tool.invoke")
    assert node.call("tool.result", {"callId": evt["payload"]["callId"], "result": "late"}) == {"ok": True}
    assert len(_answers_left(services)) == 1
    assert not [cid for cid, _ in sender.posts if cid.startswith("http:")]


def test_on_lambda_the_wait_ends_before_the_invocation_does() -> None:
    class Context:
        def __init__(self, ms: int) -> None:
            self.ms = ms

        def get_remaining_time_in_millis(self) -> int:
            return self.ms

    class Req:
        def __init__(self, scope: dict[str, Any]) -> None:
            self.scope = scope

    assert admin._wait_seconds(Req({})) == admin.WAIT_SECONDS  # type: ignore[arg-type]
    assert admin._wait_seconds(Req({"aws.context": Context(29_000)})) == admin.WAIT_SECONDS  # type: ignore[arg-type]
    short = admin._wait_seconds(Req({"aws.context": Context(10_000)}))  # type: ignore[arg-type]
    assert short == 10 - admin.LAMBDA_MARGIN_SECONDS


# --- who may call what ------------------------------------------------------------------------------------------


def test_every_route_but_the_public_ones_refuses_a_request_without_the_bearer(
    gateway: Any, token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orbital.runtime.attempts import ATTEMPTS

    monkeypatch.setattr(ATTEMPTS, "limit", 1_000_000)  # one wrong bearer per route: never held back for it here
    routes = app_routes(sockets=True)
    assert set(auth.PUBLIC) <= set(routes), "auth.PUBLIC names a route the app does not have"
    guarded = [(m, p) for m, p in routes if (m, p) not in auth.PUBLIC]
    assert len(guarded) >= len(registry().http_methods())
    anonymous, wrong = _client(), _client("not-the-gateway-token-0123456789")
    for method, path in guarded:
        for client in (anonymous, wrong):
            if method == WEBSOCKET:  # refused before it is accepted
                with pytest.raises(WebSocketDisconnect) as refused, client.websocket_connect(probe_path(path)):
                    pass
                assert refused.value.code == 1008, path
                continue
            answer = client.request(method, probe_path(path), json={})
            assert answer.status_code == 401, f"{method} {path}: {answer.status_code} without the bearer"
            assert answer.headers["www-authenticate"] == "Bearer"
    assert _client(token).post("/api/v1/config.get").status_code == 200


def test_public_routes_answer_without_a_bearer(gateway: Any) -> None:
    client = _client()
    assert client.get("/health").status_code == 200
    assert client.get("/openapi.json").status_code == 200
    assert client.get("/docs").status_code == 200
    assert client.get("/media/0123abcd-0000.txt").status_code == 404  # public, and not there


def test_an_install_token_may_not_use_the_admin_api(gateway: Any, services: Any) -> None:
    _, install_token = installs.register(
        services.table, "linux", now_ms=services.now_ms(), gateway_token=services.settings.auth_token
    )
    answer = _client(install_token).post("/api/v1/config.get")
    assert answer.status_code == 403
    assert answer.json()["detail"] == auth.FORBIDDEN


def test_without_a_gateway_token_the_admin_api_is_open(services: Any) -> None:
    """A gateway without a token only ever serves its own machine (the local front door refuses the rest)."""
    from orbital.runtime.services import use_services

    assert not services.settings.auth_token
    use_services(services)
    try:
        assert _client().post("/api/v1/config.get").status_code == 200
    finally:
        use_services(None)


def test_a_deployment_without_its_token_serves_no_admin_call(services: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from orbital.runtime.services import use_services
    from orbital.settings import get_settings, reset_settings

    monkeypatch.setenv("ORBITAL_REQUIRE_TOKEN", "true")
    reset_settings()
    object.__setattr__(services, "settings", get_settings())
    use_services(services)
    try:
        assert _client().post("/api/v1/config.get").status_code == 503
    finally:
        use_services(None)


def test_the_routes_are_handed_the_services_the_app_is_told_to_use(token: str, services: Any) -> None:
    """The routes, the bearer judged before the body (`admin.AuthFirst`) and the MCP endpoint get `Services`
    through FastAPI's `Depends` (`rest.deps`): overriding the dependency serves the app on other Services, and the
    process's own (`get_services`) is never asked."""
    from orbital.ports.capabilities import ON_AWS
    from orbital.ports.services import Lazy, Services
    from orbital.rest import deps
    from orbital.rest.app import create_app
    from orbital.runtime.services import use_services

    def unused() -> Any:
        raise AssertionError("a route looked up the process's Services")

    assert services.settings.auth_token == token
    installed = Services(
        services.settings,
        registry=registry,
        table=Lazy(unused),
        workspace=Lazy(unused),
        sender=Lazy(unused),
        workflows=Lazy(unused),
        backups=None,
        portable=unused,
        capabilities=ON_AWS,
    )
    services.config.set_path("session.mainKey", "overridden")
    app = create_app()
    app.dependency_overrides[deps.services] = lambda: services
    use_services(installed)
    try:
        client = TestClient(app)
        assert client.post("/api/v1/config.get").status_code == 401  # judged against the override's token
        client.headers["Authorization"] = f"Bearer {token}"
        answer = client.post("/api/v1/config.get", json={"path": "session.mainKey"})
        assert answer.status_code == 200, answer.text
        assert answer.json()["value"] == "overridden"
        assert client.get("/console/config.json").json()["tokenRequired"] is True
        assert client.get("/media/0123456789abcdef0123456789abcdef.png").status_code == 404
    finally:
        use_services(None)


# --- the OpenAPI document --------------------------------------------------------------------------------------


def test_the_document_is_valid_and_lists_every_admin_method(http: TestClient) -> None:
    from openapi_spec_validator import validate

    doc = http.get("/openapi.json").json()
    validate(doc)
    specs = registry().http_methods()
    admin_paths = {p for p in doc["paths"] if p.startswith(admin.PREFIX + "/") and p not in admin.UNAUTHENTICATED}
    assert admin_paths == {f"{admin.PREFIX}/{spec.name}" for spec in specs}
    assert len(specs) >= 40
    for spec in registry():
        offered = f"{admin.PREFIX}/{spec.name}" in admin_paths
        assert offered == ("client" in spec.modes and spec.name != "connect"), spec.name
    assert doc["components"]["securitySchemes"]["bearer"] == {
        "type": "http",
        "scheme": "bearer",
        "description": auth.SCHEME.model.description,
    }
    for spec in specs:
        op = doc["paths"][f"{admin.PREFIX}/{spec.name}"]["post"]
        assert op["operationId"] == spec.name
        assert op["tags"] and op["summary"]
        assert op["security"] == [{"bearer": []}]
        body = op["requestBody"]["content"]["application/json"]["schema"]
        assert any("$ref" in s for s in body.get("anyOf", [body])), spec.name
        assert not op["requestBody"].get("required"), spec.name  # an empty body is {}
        ok = op["responses"]["200"]["content"]["application/json"]["schema"]
        if spec.result is not None:
            assert "$ref" in ok, spec.name
        for status in ("400", "401", "403", "404", "500", "503", "504"):
            assert op["responses"][status]["content"]["application/json"]["schema"] == {
                "$ref": "#/components/schemas/ApiError"
            }
        assert "422" not in op["responses"]  # invalid params are a 400
    assert set(doc["components"]["schemas"]["ApiError"]["properties"]) == {"detail", "code", "details", "retryable"}
    assert doc["paths"]["/health"]["get"].get("security") is None  # public routes ask for nothing


def test_the_docs_page_loads_only_its_own_files_under_the_consoles_policy(http: TestClient) -> None:
    """`/docs` works offline: Swagger UI comes from the gateway itself (never a CDN), under the console's CSP."""
    import re

    from orbital.rest import console
    from orbital.runtime.services import get_services

    page = http.get("/docs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    policy = page.headers["content-security-policy"]
    assert policy == console.headers(get_services())["Content-Security-Policy"]
    assert "script-src 'self';" in policy and "frame-ancestors 'none'" in policy and "default-src 'none'" in policy
    assert page.headers["x-frame-options"] == "DENY"
    loaded = re.findall(r'<(?:script|link)[^>]*(?:src|href)="([^"]+)"', page.text)
    assert any(src.endswith("swagger-ui-bundle.js") for src in loaded) and "<script>" not in page.text
    for src in loaded:
        assert "//" not in src and ":" not in src, src  # relative: this origin only
        asset = http.get("/" + src)
        assert asset.status_code == 200 and asset.content, src
        assert asset.headers["content-security-policy"] == policy
    started = http.get("/console/docs/start.js").text
    assert "openapi.json" in started and "validatorUrl: null" in started  # no badge fetched from elsewhere
    assert http.get("/console/docs/swagger-ui/swagger-ui-bundle.js.map").status_code == 404
    assert http.get("/docs/oauth2-redirect").status_code == 404


def test_a_private_object_is_no_public_media(gateway: Any, token: str) -> None:
    """What a client's tool returned (a screenshot) is kept for the run, never published at `/media/{name}`."""
    from orbital.store import artifacts

    kept = artifacts.save(gateway.workspace, b"\x89PNG\r\n\x1a\n", owner=artifacts.PRIVATE_OWNER, mime_type="image/png")
    shown = artifacts.save(gateway.workspace, b"GIF89a", owner=artifacts.GATEWAY_OWNER, mime_type="image/gif")
    assert _client().get(f"/media/{kept.artifact_id}").status_code == 404
    assert _client(token).get(f"/media/{kept.artifact_id}").status_code == 200
    assert _client().get(f"/media/{shown.artifact_id}").status_code == 200  # GSV media: public by its name


def test_a_tools_image_in_a_session_is_served_with_the_gateway_token_only(
    gateway: Any, services: Any, token: str
) -> None:
    session = "agent:main:web:dm:local"
    name = "0b7e4c6a-5d1f-4e1a-9c3b-2f6d8a9e0c11.png"
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(64))
    services.workspace.put(keys.session_media(session, name), png, content_type="image/png")
    services.workspace.put(keys.session_media(session, "1b7e4c6a.png"), b"<svg/>", content_type="image/svg+xml")
    services.workspace.put(keys.message_body(session, "s1", 1), b"{}", content_type="application/json")
    path = f"/api/session-media/{session}/{name}"
    assert _client().get(path).status_code == 401
    assert _client("not-the-gateway-token-0123456789").get(path).status_code == 401
    answer = _client(token).get(path)
    assert answer.status_code == 200 and answer.content == png
    assert answer.headers["content-type"] == "image/png"
    assert answer.headers["content-security-policy"] == "sandbox"  # never run as a page of the gateway's origin
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert answer.headers["cache-control"] == "private, max-age=3600"
    for other in (
        f"/api/session-media/{session}/1b7e4c6a.png",  # never SVG, whatever the name says
        f"/api/session-media/{session}/1b7e4c6a.svg",
        f"/api/session-media/{session}/messages/s1/000000000001.json",  # the session's own records are no media
        f"/api/session-media/agent:main:other/{name}",  # another session's name
        f"/api/session-media/{name}",
    ):
        assert _client(token).get(other).status_code == 404, other


# --- one error shape ---------------------------------------------------------------------------------------------


def _one_shape(answer: Any, status: int) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert set(body) >= {"detail", "code"}, body
    assert isinstance(body["detail"], str) and body["detail"], body
    assert body["code"] == status, body
    return dict(body)


def test_a_401_has_the_one_error_shape_and_says_bearer(gateway: Any) -> None:
    for client in (_client(), _client("not-the-gateway-token-0123456789")):
        for method, path in [("POST", "/api/v1/config.get"), ("GET", "/api/install/me"), ("GET", "/api/artifacts/x")]:
            answer = client.request(method, path)
            assert _one_shape(answer, 401)["detail"] == auth.UNAUTHORIZED, path
            assert answer.headers["www-authenticate"] == "Bearer", path


def test_framework_errors_have_the_one_error_shape(http: TestClient) -> None:
    assert _one_shape(http.get("/no/such/route"), 404)["detail"] == "Not Found"
    assert _one_shape(http.get("/api/v1/config.get"), 405)["detail"] == "Method Not Allowed"
    too_big = _one_shape(http.post("/api/v1/config.get", content=b"x" * (2 * 1024 * 1024)), 413)
    assert "too large" in too_big["detail"]


def test_a_routes_own_validation_error_is_a_sentence_not_a_list(http: TestClient) -> None:
    # a query parameter of the wrong type on a non-admin route: FastAPI's own validation, not a method's params
    from orbital.rest.app import create_app

    app = create_app()

    @app.get("/probe-validation")
    def probe(count: int) -> dict[str, int]:
        return {"count": count}

    client = TestClient(app)
    client.headers.update(http.headers)
    body = _one_shape(client.get("/probe-validation", params={"count": "many"}), 422)
    assert "count" in body["detail"], body


def test_the_admin_api_checks_the_bearer_before_it_reads_the_body(gateway: Any) -> None:
    anonymous = _client()
    cases: list[dict[str, Any]] = [
        {"content": b"{not json", "headers": {"Content-Type": "application/json"}},
        {"content": b"[1, 2]", "headers": {"Content-Type": "application/json"}},
        {"content": b"a=b", "headers": {"Content-Type": "application/x-www-form-urlencoded"}},
        {"content": b"{" + b" " * (2 * 1024 * 1024) + b"}", "headers": {"Content-Type": "application/json"}},
    ]
    for path in ("/api/v1/config.get", "/api/v1/no.such.method"):
        for case in cases:
            answer = anonymous.post(path, **case)
            assert _one_shape(answer, 401)["detail"] == auth.UNAUTHORIZED, (path, answer.text[:200])
            assert answer.headers["www-authenticate"] == "Bearer"


def test_a_workspace_path_over_the_limit_is_a_400_over_http_and_on_the_socket(http: TestClient, connect: Any) -> None:
    socket = connect("client", "long-path")
    long_path = "notes/" + "a" * 2000 + ".md"
    for method, params in [
        ("workspace.read", {"path": long_path}),
        ("workspace.write", {"path": long_path, "content": "x"}),
        ("workspace.list", {"path": long_path + "/"}),
        ("workspace.delete", {"path": long_path}),
    ]:
        expected = socket.error(method, params)
        assert expected["code"] == 400, (method, expected)
        answer = http.post(f"/api/v1/{method}", json=params)
        body = _one_shape(answer, 400)
        assert body["detail"] == expected["message"], method
        assert body["detail"].startswith("Path too long"), body


def test_through_mangum_errors_have_the_one_shape_and_the_bearer_comes_first(gateway: Any, token: str) -> None:
    """The `rest_api` Lambda's way in: API Gateway events through `lambda_handler()` (which measures a body before
    Mangum decodes it)."""
    import base64
    import copy
    import json

    from orbital.rest import app as rest
    from orbital.rest import limits

    from tests.conftest import load_event

    def event(path: str, body: bytes, bearer: str | None) -> dict[str, Any]:
        made = copy.deepcopy(load_event("http-health.json"))
        made["rawPath"] = path
        made["requestContext"]["http"].update(method="POST", path=path)
        headers = {**made["headers"], "content-type": "application/json", "content-length": str(len(body))}
        if bearer is not None:
            headers["authorization"] = f"Bearer {bearer}"
        made["headers"] = headers
        made["body"] = base64.b64encode(body).decode()
        made["isBase64Encoded"] = True
        return made

    rest.lambda_handler.cache_clear()
    try:
        serve = rest.lambda_handler()
        huge = b"{" + b" " * (limits.MAX_BODY_BYTES + 10) + b"}"
        for body in (b"{not json", huge):
            for bearer in (None, "not-the-gateway-token-0123456789"):
                answer = serve(event("/api/v1/config.get", body, bearer), None)
                assert answer["statusCode"] == 401, answer["body"][:200]
                assert json.loads(answer["body"]) == {"detail": auth.UNAUTHORIZED, "code": 401}
                assert {k.lower(): v for k, v in answer["headers"].items()}["www-authenticate"] == "Bearer"
        too_big = serve(event("/api/v1/config.get", huge, token), None)
        assert too_big["statusCode"] == 413
        assert json.loads(too_big["body"])["code"] == 413
        malformed = serve(event("/api/v1/config.get", b"{not json", token), None)
        assert malformed["statusCode"] == 400 and json.loads(malformed["body"])["code"] == 400
        missing = serve(event("/no/such/route", b"{}", token), None)
        assert missing["statusCode"] == 404 and json.loads(missing["body"]) == {"detail": "Not Found", "code": 404}
    finally:
        rest.lambda_handler.cache_clear()
