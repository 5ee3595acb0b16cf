"""Roles at work (ADR 0042) on the AWS path (moto), through the real handlers: what a viewer, a client, an operator
and a node-role device may and may not do, on a socket, over HTTP and through a dialect. A connection's role is put on
its record as a device token's `connect` puts it (`extra["role"]`, `extra["deviceId"]`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from orbital.dialects import base
from orbital.rest import admin, auth
from orbital.store.connections import Connection
from starlette.testclient import TestClient

from tests.conftest import wait_for
from tests.functional.test_approvals import ASK_BASH, paused_of, policy
from tests.support.agent import final_of, node_events
from tests.support.fake_llm import FakeLLM, call, reply

SECRET = "sk-live-ROLES-0123456789abcdef"


def as_device(services: Any, rpc: Any, role: str, device_id: str | None = None) -> Any:
    """Give `rpc`'s connection the role (and device) a device token's `connect` would."""
    conn = services.connections.get(rpc.connection_id)
    assert conn is not None
    conn.extra["role"] = role
    if device_id is not None:
        conn.extra["deviceId"] = device_id
    services.connections.save(conn)
    return rpc


def refusal(method: str, scope: str, role: str) -> dict[str, Any]:
    return {"code": 403, "message": f"Method {method} needs scope {scope}; this device's role is {role}"}


def test_a_viewer_reads_but_cannot_set_the_config(services: Any, connect: Any) -> None:
    viewer = as_device(services, connect("client", "tablet"), "viewer")
    assert viewer.error("config.set", {"path": "userTimezone", "value": "Europe/Paris"}) == refusal(
        "config.set", "operate", "viewer"
    )
    assert viewer.call("config.get", {"path": "userTimezone"}).get("value") != "Europe/Paris"
    assert "sessions" in viewer.call("sessions.list", {})
    assert viewer.error("chat.send", {"sessionKey": "main", "message": "hi"}) == refusal("chat.send", "chat", "viewer")
    assert viewer.error("session.reset", {"sessionKey": "main"}) == refusal("session.reset", "chat", "viewer")


def test_a_client_sees_secrets_masked_and_cannot_touch_credentials(services: Any, connect: Any) -> None:
    owner = connect("client", "owner")
    owner.call("config.set", {"path": "apiKeys.openai", "value": SECRET})
    client = as_device(services, connect("client", "phone"), "client", "dev-phone")
    assert client.call("config.get", {"path": "apiKeys.openai"})["value"] == "***"
    assert SECRET not in str(client.call("config.get", {}))
    assert client.error("config.set", {"path": "apiKeys.openai", "value": "sk-mine"}) == refusal(
        "config.set", "operate", "client"
    )
    # WindieOS installs and pairing are credentials too: admin only
    assert client.error("installs.list", {}) == refusal("installs.list", "admin", "client")
    assert client.error("pair.approve", {"channel": "test", "senderId": "42"}) == refusal(
        "pair.approve", "admin", "client"
    )
    assert client.error("tool.invoke", {"tool": "box__Bash", "args": {"command": "id"}}) == refusal(
        "tool.invoke", "operate", "client"
    )
    assert services.config.effective()["apiKeys"]["openai"] == SECRET


def test_an_operator_changes_the_config_but_not_its_secrets(services: Any, connect: Any) -> None:
    owner = connect("client", "owner")
    owner.call("config.set", {"path": "apiKeys.openai", "value": SECRET})
    owner.call("config.set", {"path": "providers.local.headers.X-Key", "value": "hdr-secret"})
    operator = as_device(services, connect("client", "ops"), "operator")
    assert operator.call("config.set", {"path": "userTimezone", "value": "Europe/Paris"})["ok"] is True
    for path, value in (
        ("apiKeys.openai", "sk-other"),
        ("apiKeys.anthropic", "sk-new"),
        ("apiKeys", {"openai": "sk-other"}),
        ("providers.local", {"baseUrl": "http://x"}),  # written whole: the header secret would go
    ):
        error = operator.error("config.set", {"path": path, "value": value})
        assert error["code"] == 403, (path, error)
        assert error["message"].startswith(f"Setting or deleting a secret ({path}) needs scope admin"), error
    error = operator.error("config.set", {"path": "apiKeys.openai"})  # deleting it
    assert error["code"] == 403
    # the mask written back keeps the secret, and the rest of the object may change
    assert operator.call("config.set", {"path": "apiKeys.openai", "value": "***"})["ok"] is True
    written = {"baseUrl": "http://x", "headers": {"X-Key": "***"}}
    assert operator.call("config.set", {"path": "providers.local", "value": written})["ok"] is True
    effective = services.config.effective()
    assert effective["apiKeys"]["openai"] == SECRET
    assert effective["providers"]["local"] == {"baseUrl": "http://x", "headers": {"X-Key": "hdr-secret"}}
    assert effective["userTimezone"] == "Europe/Paris"
    # the gateway token's connection (admin) sets secrets as before
    assert owner.call("config.set", {"path": "apiKeys.openai", "value": "sk-rotated"})["ok"] is True
    assert services.config.effective()["apiKeys"]["openai"] == "sk-rotated"


def test_a_node_role_device_cannot_call_client_methods(services: Any, connect: Any) -> None:
    node = as_device(services, connect("node", "box"), "node")
    # in node mode the mode refuses first
    assert node.error("chat.send", {"sessionKey": "main", "message": "hi"})["message"].startswith(
        "Method chat.send not allowed for mode node"
    )
    assert node.call("tools.list", {}) is not None  # its keepalive
    # and should a node-role socket ever be in client mode, its role refuses every client method
    stray = as_device(services, connect("client", "stray"), "node")
    for method, scope in (("chat.send", "chat"), ("config.get", "read"), ("config.set", "operate")):
        assert stray.error(method, {}) == refusal(method, scope, "node")


@pytest.fixture
def http_as(services: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """http_as(role) -> a client of the HTTP app whose bearer is judged a device of `role` (as `identify` will judge
    a device token)."""
    from orbital.rest.app import create_app
    from orbital.runtime.services import use_services

    use_services(services)

    def _as(role: str) -> TestClient:
        monkeypatch.setattr(auth, "identify", lambda request, _scheme=None: auth.Caller(role=role, device_id="dev-x"))
        return TestClient(create_app())

    yield _as
    use_services(None)


def test_http_callers_are_checked_with_their_role(services: Any, http_as: Any) -> None:
    http = http_as("viewer")
    answer = http.post("/api/v1/config.set", json={"path": "userTimezone", "value": "Europe/Paris"})
    assert answer.status_code == 403, answer.text
    assert answer.json() == {
        "detail": "Method config.set needs scope operate; this device's role is viewer",
        "code": 403,
    }
    assert http.post("/api/v1/sessions.list", json={}).status_code == 200
    assert services.config.effective().get("userTimezone") != "Europe/Paris"
    # the socket the call is dispatched on carries the role; the gateway's caller is admin
    answered = admin.call(services, "config.set", {"path": "x", "value": 1}, 1.0, caller=auth.Caller(role="client"))
    assert answered is not None and answered["error"] == refusal("config.set", "operate", "client")
    answered = admin.call(services, "config.set", {"path": "userTimezone", "value": "UTC"}, 1.0, caller=auth.Caller())
    assert answered is not None and answered["ok"] is True


def test_the_other_http_routes_need_a_scope_too(http_as: Any) -> None:
    client = http_as("client")
    answer = client.post("/api/install/register", json={"operating_system": "linux"})
    assert answer.status_code == 403
    assert answer.json()["detail"] == "This route needs scope admin; this device's role is client"
    assert client.get("/api/session-media/main/a.png").status_code == 404  # `read`: let in, and nothing is there
    node = http_as("node")
    answer = node.get("/api/session-media/main/a.png")
    assert answer.status_code == 403
    assert answer.json()["detail"] == "This route needs scope read; this device's role is node"
    answer = http_as("viewer").get("/api/install/me")  # the WindieOS routes run models: `chat`
    assert answer.status_code == 403
    assert answer.json()["detail"] == "This route needs scope chat; this device's role is viewer"


def test_a_dialect_calls_with_the_device_s_role(services: Any) -> None:
    conn = Connection("dialect-1", "client", services.now_ms(), dialect="xeno", extra={"role": "viewer"})
    services.connections.save(conn)
    called = base.call(services, conn, "chat.send", {"sessionKey": "main", "message": "hi"})
    assert (called.ok, called.code, called.message) == (
        False,
        403,
        "Method chat.send needs scope chat; this device's role is viewer",
    )
    assert base.call(services, conn, "sessions.list", {}).ok


@pytest.fixture
def paused(agent: Any, connect: Any, services: Any, sender: Any, llm: FakeLLM) -> Iterator[dict[str, Any]]:
    """A run started by the client device `dev-phone` that waits for an approval of `box__Bash`."""
    node = connect("node", "box")
    policy(agent, ASK_BASH)
    phone = as_device(services, connect("client", "phone"), "client", "dev-phone")
    llm.script(reply(tool_calls=[call("box__Bash", {"command": "ls"})]), reply("listed"))
    assert phone.call("chat.send", {"sessionKey": "main", "message": "list", "runId": "run-p"})["status"] == "started"
    [event] = paused_of(sender, phone.connection_id, "run-p")
    yield {"approval": event["approval"], "phone": phone, "node": node}


def test_a_client_device_answers_only_the_approvals_of_runs_it_started(
    paused: dict[str, Any], connect: Any, services: Any, sender: Any
) -> None:
    approval_id = paused["approval"]["approvalId"]
    tablet = as_device(services, connect("client", "tablet"), "client", "dev-tablet")
    refused = tablet.error("approval.resolve", {"approvalId": approval_id, "decision": "approve"})
    assert refused == {
        "code": 403,
        "message": "A device whose role is client may answer only the tool calls of runs it started",
    }
    # a "yes" typed into the paused session from another client device answers nothing either
    error = tablet.error("chat.send", {"sessionKey": "main", "message": "yes"})
    assert error["code"] == 403
    assert node_events(sender, paused["node"], "tool.invoke") == []
    assert paused["phone"].call("approval.list", {})["approvals"][0]["state"] == "pending"
    # the device that started the run answers it
    answered = paused["phone"].call("approval.resolve", {"approvalId": approval_id, "decision": "approve"})
    assert answered == {"approvalId": approval_id, "decision": "approve", "resolved": True}
    invoke = wait_for(lambda: node_events(sender, paused["node"], "tool.invoke"))[0]
    paused["node"].call("tool.result", {"callId": invoke["callId"], "result": "a b"})
    assert final_of(sender, paused["phone"].connection_id, "run-p")["state"] == "final"


def test_an_operator_answers_any_run_s_approvals(paused: dict[str, Any], connect: Any, services: Any) -> None:
    operator = as_device(services, connect("client", "ops"), "operator", "dev-ops")
    approval_id = paused["approval"]["approvalId"]
    answered = operator.call("approval.resolve", {"approvalId": approval_id, "decision": "deny"})
    assert answered == {"approvalId": approval_id, "decision": "deny", "resolved": True}


# --- with real device tokens (ADR 0043) ------------------------------------------------------------------------------


def test_real_device_tokens_carry_their_role(token: str, connect: Any, services: Any) -> None:
    from tests.functional.test_device_tokens import _connect, _create

    owner = connect("client", "owner")
    owner.call("config.set", {"path": "apiKeys.openai", "value": SECRET})
    phone, answer = _connect(services, _create(owner, role="client")["token"], "client", id="phone")
    assert answer["ok"], answer
    assert phone.call("config.get", {"path": "apiKeys.openai"})["value"] == "***"
    assert phone.error("device.token.create", {"name": "mine", "role": "admin"}) == refusal(
        "device.token.create", "admin", "client"
    )
    assert phone.error("config.set", {"path": "userTimezone", "value": "UTC"}) == refusal(
        "config.set", "operate", "client"
    )
    dashboard, answer = _connect(services, _create(owner, role="viewer")["token"], "client", id="dash")
    assert answer["ok"], answer
    assert dashboard.error("config.set", {"path": "userTimezone", "value": "UTC"}) == refusal(
        "config.set", "operate", "viewer"
    )
    ops, answer = _connect(services, _create(owner, role="operator")["token"], "client", id="ops")
    assert answer["ok"], answer
    assert ops.call("config.set", {"path": "userTimezone", "value": "UTC"})["ok"] is True
    assert ops.error("config.set", {"path": "apiKeys.openai", "value": "sk-x"})["code"] == 403
    assert ops.error("device.token.list", {}) == refusal("device.token.list", "admin", "operator")
    box, answer = _connect(services, _create(owner, role="node", nodeId="box")["token"], "node", id="box")
    assert answer["ok"], answer
    assert box.error("config.get", {})["message"].startswith("Method config.get not allowed for mode node")
    assert box.call("tools.list", {}) is not None


def test_a_device_token_over_http_is_checked_with_its_role(token: str, connect: Any, services: Any) -> None:
    from orbital.rest.app import create_app
    from orbital.runtime.services import use_services

    from tests.functional.test_device_tokens import _create

    owner = connect("client", "owner")
    viewer = {"Authorization": f"Bearer {_create(owner, role='viewer')['token']}"}
    use_services(services)
    try:
        http = TestClient(create_app())
        answer = http.post("/api/v1/config.set", headers=viewer, json={"path": "userTimezone", "value": "UTC"})
        assert answer.status_code == 403
        assert answer.json()["detail"] == "Method config.set needs scope operate; this device's role is viewer"
        assert http.post("/api/v1/sessions.list", headers=viewer, json={}).status_code == 200
    finally:
        use_services(None)


def test_a_viewer_device_on_a_dialect_socket_cannot_start_a_run(
    token: str, connect: Any, services: Any, sender: Any
) -> None:
    import json

    from orbital.runtime.services import use_services

    from tests.functional.test_device_tokens import _create, _frame, _upgrade

    owner = connect("client", "owner")
    viewer = _create(owner, role="viewer")
    use_services(services)
    try:
        assert _upgrade("xeno-v", viewer["token"]) == {"statusCode": 200}
        _frame("xeno-v", {"jsonrpc": "2.0", "id": 1, "method": "gateway.hello", "params": {}})
        assert services.connections.get("xeno-v").extra["role"] == "viewer"
        query = {"requestId": "q1", "content": "run something", "context": {"type": "rpc"}}
        _frame("xeno-v", {"jsonrpc": "2.0", "id": 2, "method": "gateway.query", "params": query})
    finally:
        use_services(None)
    frames = [json.loads(f) if isinstance(f, str) else f for f in sender.frames_to("xeno-v")]
    errors = [f["params"] for f in frames if isinstance(f, dict) and f.get("method") == "gateway.error"]
    assert errors == [{"requestId": "q1", "error": "Method chat.send needs scope chat; this device's role is viewer"}]
