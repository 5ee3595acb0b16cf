"""Device tokens (ADR 0043) on the AWS code path (moto's DynamoDB): created, listed and revoked by an admin, stored
only as a keyed hash, bound to a role and an identity at `connect`, accepted as the HTTP bearer and by the other
gateways' dialects, swapped for a one-time pairing code, and revoked with the sockets that used them closed."""

from __future__ import annotations

import itertools
import json
from typing import Any

import boto3
import pytest
from orbital.engines import device_auth
from orbital.runtime import gateway
from orbital.runtime.attempts import ATTEMPTS, LIMIT
from orbital.store import devices

from tests.conftest import NODE_RUNTIME, NODE_TOOLS, TABLE, Rpc

_ids = itertools.count(1)


def _connect(services: Any, token: str, mode: str = "client", **client: Any) -> tuple[Rpc, dict[str, Any]]:
    rpc = Rpc(services, f"dev-conn-{next(_ids)}")
    params: dict[str, Any] = {"minProtocol": 1, "client": {"mode": mode, **client}, "auth": {"token": token}}
    if mode == "node":
        params["tools"] = NODE_TOOLS
        params["nodeRuntime"] = NODE_RUNTIME
    answer = rpc.frame("connect", params)
    assert answer is not None
    return rpc, answer


def _create(admin: Rpc, **params: Any) -> dict[str, Any]:
    return admin.call("device.token.create", {"name": "a device", **params})


def _raw_items() -> str:
    """Every item of the table as DynamoDB holds it (what a stolen copy of it would show)."""
    ddb = boto3.client("dynamodb", region_name="us-east-1")
    return json.dumps(ddb.scan(TableName=TABLE)["Items"])


def _closes(sender: Any, cid: str) -> list[tuple[int, str]]:
    return [(code, reason) for closed, code, reason in sender.closes if closed == cid]


def test_create_list_revoke_and_only_a_keyed_hash_is_stored(token: str, connect: Any, services: Any) -> None:
    admin = connect("client", "owner")
    made = _create(admin, name="laptop", role="node", nodeId="laptop", expiresInDays=30)
    assert made["token"].startswith("orb_dev_" + made["tokenId"] + "_")
    assert made["role"] == "node" and made["binding"] == {"nodeId": "laptop"} and made["name"] == "laptop"
    assert made["expiresAt"] == made["createdAt"] + 30 * 86_400_000
    listed = admin.call("device.token.list")["tokens"]
    assert listed == [
        {
            "tokenId": made["tokenId"],
            "name": "laptop",
            "role": "node",
            "binding": {"nodeId": "laptop"},
            "createdAt": made["createdAt"],
            "lastUsedAt": None,
            "expiresAt": made["expiresAt"],
            "revoked": False,
        }
    ]
    secret = made["token"].rsplit("_", 1)[1]
    raw = _raw_items()
    assert made["tokenId"] in raw  # the record is there, keyed by its id
    assert made["token"] not in raw and secret not in raw  # but nothing of the secret
    assert made["token"] not in json.dumps(listed)

    node, answer = _connect(services, made["token"], "node", id="laptop")
    assert answer["ok"], answer
    conn = services.connections.get(node.connection_id)
    assert conn.extra["role"] == "node" and conn.extra["deviceId"] == made["tokenId"]
    assert admin.call("device.token.list")["tokens"][0]["lastUsedAt"] is not None

    revoked = admin.call("device.token.revoke", {"tokenId": made["tokenId"]})
    assert revoked == {"tokenId": made["tokenId"], "revoked": True, "closed": 1}
    assert admin.call("device.token.list")["tokens"][0]["revoked"] is True
    _, again = _connect(services, made["token"], "node", id="laptop")
    assert again["error"]["code"] == 401  # refused at once
    assert admin.error("device.token.revoke", {"tokenId": "0123456789abcdef"})["code"] == 404
    assert admin.error("device.token.revoke", {})["code"] == 400


def test_bad_params_get_clear_errors(token: str, connect: Any) -> None:
    admin = connect("client", "owner")
    assert "role required" in admin.error("device.token.create", {"name": "x"})["message"]
    assert "role must be one of" in admin.error("device.token.create", {"name": "x", "role": "root"})["message"]
    assert "name required" in admin.error("device.token.create", {"role": "client"})["message"]
    wrong = admin.error("device.token.create", {"name": "x", "role": "client", "nodeId": "n"})
    assert wrong["code"] == 400 and "nodeId binds only a node token" in wrong["message"]
    days = admin.error("device.token.create", {"name": "x", "role": "client", "expiresInDays": 0})
    assert "expiresInDays" in days["message"]


def test_a_node_token_connects_only_as_its_node(token: str, connect: Any, services: Any) -> None:
    admin = connect("client", "owner")
    bound = _create(admin, role="node", nodeId="laptop")["token"]
    _, as_client = _connect(services, bound, "client", id="sneaky")
    assert as_client["error"]["code"] == 403 and "only in node mode" in as_client["error"]["message"]
    _, as_other = _connect(services, bound, "node", id="server")
    assert as_other["error"]["code"] == 403 and "only as node 'laptop'" in as_other["error"]["message"]
    node, unnamed = _connect(services, bound, "node")  # no id given: it is its bound node
    assert unnamed["ok"], unnamed
    assert services.connections.get(node.connection_id).node_id == "laptop"
    # a node socket may not call a client's methods (whatever its token)
    assert node.error("config.get", {})["code"] in (403, 101)
    unbound = _create(admin, role="node")["token"]
    _, any_node = _connect(services, unbound, "node", id="anything")
    assert any_node["ok"], any_node


def test_a_channel_token_connects_only_as_its_channel_and_account(token: str, connect: Any, services: Any) -> None:
    admin = connect("client", "owner")
    bridge = _create(admin, role="channel", channel="telegram", accountId="main")["token"]
    _, as_client = _connect(services, bridge, "client")
    assert as_client["error"]["code"] == 403
    _, other_channel = _connect(services, bridge, "channel", channel="discord")
    assert other_channel["error"]["code"] == 403 and "'telegram'" in other_channel["error"]["message"]
    _, other_account = _connect(services, bridge, "channel", channel="telegram", accountId="work")
    assert other_account["error"]["code"] == 403 and "'main'" in other_account["error"]["message"]
    sock, answer = _connect(services, bridge, "channel", channel="telegram")
    assert answer["ok"], answer
    conn = services.connections.get(sock.connection_id)
    assert (conn.channel, conn.account_id, conn.extra["role"]) == ("telegram", "main", "channel")


def test_a_client_or_viewer_token_is_a_client_and_only_an_admin_manages_tokens(
    token: str, connect: Any, services: Any
) -> None:
    admin = connect("client", "owner")
    for role in ("client", "viewer"):
        made = _create(admin, role=role)["token"]
        _, as_node = _connect(services, made, "node", id="n1")
        assert as_node["error"]["code"] == 403
        sock, answer = _connect(services, made, "client", id=f"phone-{role}")
        assert answer["ok"], answer
        refused = sock.error("device.token.create", {"name": "mine", "role": "admin"})
        assert refused["code"] == 403 and "admin" in refused["message"]
        assert sock.error("device.pair.create", {"role": "admin"})["code"] == 403
    device_admin = _create(admin, role="admin")["token"]
    sock, answer = _connect(services, device_admin, "client", id="second-owner")
    assert answer["ok"]
    assert sock.call("device.token.list")["tokens"]


def test_a_wrong_device_token_counts_as_a_failed_attempt(token: str, services: Any) -> None:
    fake = "orb_dev_0123456789abcdef_" + "x" * 43
    for _ in range(LIMIT):
        event = {
            "requestContext": {
                "connectionId": "guess",
                "routeKey": "$connect",
                "identity": {"sourceIp": "203.0.113.9"},
            },
            "headers": {"Authorization": f"Bearer {fake}"},
        }
        assert gateway.handle_connect(event)["statusCode"] == 401
    assert ATTEMPTS.blocked("203.0.113.9")


def test_revoking_closes_the_open_sockets_that_used_the_token(
    token: str, connect: Any, services: Any, sender: Any
) -> None:
    admin = connect("client", "owner")
    made = _create(admin, role="client")
    first, _ = _connect(services, made["token"], "client", id="phone-1")
    second, _ = _connect(services, made["token"], "client", id="phone-2")
    other = _create(admin, role="client")
    untouched, _ = _connect(services, other["token"], "client", id="tablet")
    assert admin.call("device.token.revoke", {"tokenId": made["tokenId"]})["closed"] == 2
    assert _closes(sender, first.connection_id) == [device_auth.REVOKED_CLOSE]
    assert _closes(sender, second.connection_id) == [device_auth.REVOKED_CLOSE]
    assert _closes(sender, untouched.connection_id) == []
    assert devices.sockets(services.table, made["tokenId"]) == []


def test_a_socket_revoking_its_own_token_gets_the_answer_then_is_closed(
    token: str, connect: Any, services: Any, sender: Any
) -> None:
    admin = connect("client", "owner")
    made = _create(admin, role="admin")
    own, _ = _connect(services, made["token"], "client", id="own")
    assert own.call("device.token.revoke", {"tokenId": made["tokenId"]})["closed"] == 1
    assert _closes(sender, own.connection_id) == [device_auth.REVOKED_CLOSE]


def test_pairing_codes_are_single_use_expire_and_wrong_ones_are_rate_limited(token: str, connect: Any, services: Any):
    from orbital.rest.app import create_app
    from orbital.runtime.services import use_services
    from starlette.testclient import TestClient

    admin = connect("client", "owner")
    paired = admin.call("device.pair.create", {"role": "node", "nodeId": "laptop", "name": "laptop"})
    code = paired["code"]
    assert len(code) == 8 and set(code) <= set(devices.PAIR_ALPHABET)
    assert paired["expiresAt"] - services.now_ms() <= devices.PAIR_TTL_MS
    expired, _ = devices.create_pair_code(services.table, role="client", name=None, binding={}, now_ms=1)
    use_services(services)
    try:
        http = TestClient(create_app())
        got = http.post("/api/v1/pair/exchange", json={"code": code.lower()})
        assert got.status_code == 200, got.text
        body = got.json()
        assert body["role"] == "node" and body["binding"] == {"nodeId": "laptop"}
        assert body["token"].startswith("orb_dev_" + body["tokenId"])
        again = http.post("/api/v1/pair/exchange", json={"code": code})
        assert again.status_code == 401  # used once
        assert http.post("/api/v1/pair/exchange", json={"code": expired}).status_code == 401
        _, answer = _connect(services, body["token"], "node")
        assert answer["ok"], answer
        assert services.connections.get(_.connection_id).node_id == "laptop"
        assert [t["name"] for t in admin.call("device.token.list")["tokens"]] == ["laptop"]
        for _n in range(LIMIT - 2):
            assert http.post("/api/v1/pair/exchange", json={"code": "WRONG234"}).status_code == 401
        assert http.post("/api/v1/pair/exchange", json={"code": "WRONG234"}).status_code == 429
        fresh = admin.call("device.pair.create", {"role": "client"})["code"]
        assert http.post("/api/v1/pair/exchange", json={"code": fresh}).status_code == 429  # held back first
    finally:
        use_services(None)


def test_the_http_bearer_takes_device_tokens_by_role(token: str, connect: Any, services: Any) -> None:
    from orbital.rest.app import create_app
    from orbital.runtime.services import use_services
    from starlette.testclient import TestClient

    admin = connect("client", "owner")
    client = _create(admin, role="client")
    node = _create(admin, role="node")
    use_services(services)
    try:
        http = TestClient(create_app())
        mine = {"Authorization": f"Bearer {client['token']}"}
        assert http.post("/api/v1/config.get", headers=mine, json={}).status_code == 200
        refused = http.post("/api/v1/device.token.list", headers=mine, json={})
        assert refused.status_code == 403 and "admin" in refused.json()["detail"]
        node_bearer = {"Authorization": f"Bearer {node['token']}"}
        assert http.post("/api/v1/config.get", headers=node_bearer, json={}).status_code == 403
        admin.call("device.token.revoke", {"tokenId": client["tokenId"]})
        assert http.post("/api/v1/config.get", headers=mine, json={}).status_code == 401
    finally:
        use_services(None)


def _upgrade(cid: str, bearer: str | None, query: dict[str, str] | None = None) -> dict[str, Any]:
    event: dict[str, Any] = {"requestContext": {"connectionId": cid, "routeKey": "$connect"}}
    if bearer is not None:
        event["headers"] = {"Authorization": f"Bearer {bearer}"}
    if query:
        event["queryStringParameters"] = query
    return gateway.handle_connect(event)


def _frame(cid: str, body: Any) -> dict[str, Any]:
    return gateway.handle_message(
        {"requestContext": {"connectionId": cid, "routeKey": "$default"}, "body": json.dumps(body)}
    )


@pytest.fixture
def in_use(services: Any) -> Any:
    """The fixture's services are those the WebSocket adapter's handlers use (so its sender sees their closes)."""
    from orbital.runtime.services import use_services

    use_services(services)
    yield services
    use_services(None)


def test_the_dialects_take_a_client_device_token(token: str, connect: Any, in_use: Any, sender: Any) -> None:
    services = in_use
    admin = connect("client", "owner")
    client = _create(admin, role="client")
    node = _create(admin, role="node")
    # xeno: the bearer at the upgrade
    assert _upgrade("xeno-1", client["token"]) == {"statusCode": 200}
    _frame("xeno-1", {"jsonrpc": "2.0", "id": 1, "method": "gateway.hello", "params": {}})
    conn = services.connections.get("xeno-1")
    assert conn.dialect == "xeno" and conn.extra["deviceId"] == client["tokenId"], conn
    # a node's token is no client's credential: xeno refuses the socket
    assert _upgrade("xeno-2", node["token"]) == {"statusCode": 200}
    _frame("xeno-2", {"jsonrpc": "2.0", "id": 1, "method": "gateway.hello", "params": {}})
    assert _closes(sender, "xeno-2") and _closes(sender, "xeno-2")[0][0] == 4001
    # Exoclaw: the token in its first frame
    assert _upgrade("exo-1", None) == {"statusCode": 200}
    answer = _frame("exo-1", {"token": client["token"]})
    assert json.loads(answer["body"])["ok"] is True, answer
    assert services.connections.get("exo-1").extra["role"] == "client"
    assert admin.call("device.token.revoke", {"tokenId": client["tokenId"]})["closed"] == 2
    assert _closes(sender, "xeno-1") == [device_auth.REVOKED_CLOSE]
    assert _closes(sender, "exo-1") == [device_auth.REVOKED_CLOSE]
    assert _upgrade("xeno-3", client["token"])["statusCode"] == 401


@pytest.mark.parametrize("presented", ["orb_dev_nothex0123456789_abc", "orb_dev_", "orb_dev_0123456789abcdef"])
def test_malformed_device_tokens_are_wrong(token: str, services: Any, presented: str) -> None:
    assert _upgrade("malformed", presented)["statusCode"] == 401


def test_an_expired_token_is_refused(token: str, connect: Any, services: Any) -> None:
    key = device_auth.key(services)
    assert key is not None
    now = services.now_ms()
    _, expired = devices.create(
        services.table, key=key, name="old", role="client", binding={}, now_ms=now - 10, expires_at_ms=now - 1
    )
    _, answer = _connect(services, expired, "client")
    assert answer["error"]["code"] == 401
    _, live = devices.create(
        services.table, key=key, name="new", role="client", binding={}, now_ms=now, expires_at_ms=now + 60_000
    )
    assert _connect(services, live, "client")[1]["ok"]


def test_a_token_of_another_gateway_token_is_refused(token: str, connect: Any, services: Any, monkeypatch) -> None:
    """The hash is keyed with the gateway token: a new gateway token ends every device token (ADR 0025)."""
    admin = connect("client", "owner")
    made = _create(admin, role="client")
    assert _connect(services, made["token"])[1]["ok"]
    from tests.conftest import reset_caches

    monkeypatch.setenv("ORBITAL_AUTH_TOKEN", "a-new-gateway-token-0123456789")
    reset_caches()
    assert _upgrade("after-rotation", made["token"])["statusCode"] == 401


@pytest.mark.atomic_table
def test_of_racing_exchanges_of_one_code_only_one_gets_a_token(token: str, services: Any) -> None:
    import threading

    code, _ = devices.create_pair_code(services.table, role="client", name=None, binding={}, now_ms=services.now_ms())
    start = threading.Barrier(4)
    got: list[Any] = []

    def exchange() -> None:
        start.wait()
        got.append(device_auth.exchange(services, code, None))

    threads = [threading.Thread(target=exchange) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len([g for g in got if g is not None]) == 1
    assert len(devices.listing(services.table)) == 1
