"""Device tokens through the Lambda entry points, against moto: `$connect` checks a device token with one read of its
record, and revoking it closes its sockets through API Gateway's management API (`DeleteConnection`)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from functions.ws_connect.ws_connect import lambda_handler as connect_handler
from functions.ws_message.ws_message import lambda_handler as message_handler
from tests.conftest import load_event
from tests.functional.test_handlers import FakeLambdaContext

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish")


@pytest.fixture
def deleted(aws: None, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every connection deleted through the management API (recorded, then done by moto as usual)."""
    from moto.apigatewaymanagementapi.models import ApiGatewayManagementApiBackend

    records: list[str] = []
    original = ApiGatewayManagementApiBackend.delete_connection

    def record(self: Any, connection_id: str) -> None:
        records.append(connection_id)
        original(self, connection_id)

    monkeypatch.setattr(ApiGatewayManagementApiBackend, "delete_connection", record)
    return records


def _upgrade(cid: str, bearer: str | None = None) -> dict[str, Any]:
    event = load_event("connect.json")
    event["requestContext"]["connectionId"] = cid
    if bearer is not None:
        event["headers"]["Authorization"] = f"Bearer {bearer}"
    return connect_handler(event, FakeLambdaContext("WsConnectFunction"))


def _request(cid: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    event = load_event("req-config-get.json")
    event["requestContext"]["connectionId"] = cid
    event["body"] = json.dumps({"type": "req", "id": f"{cid}-{method}", "method": method, "params": params})
    answer = message_handler(event, FakeLambdaContext("WsMessageFunction"))
    return json.loads(answer["body"])


def _connect(cid: str, token: str, mode: str = "client") -> dict[str, Any]:
    return _request(cid, "connect", {"minProtocol": 1, "client": {"mode": mode, "id": cid}, "auth": {"token": token}})


def test_connect_with_a_device_token_and_revoke_through_the_management_api(token: str, deleted: list[str]) -> None:
    assert _upgrade("owner")["statusCode"] == 200
    assert _connect("owner", token)["ok"]
    made = _request("owner", "device.token.create", {"name": "phone", "role": "client"})["payload"]

    # the bearer at the upgrade, then the same token in connect
    assert _upgrade("phone", made["token"])["statusCode"] == 200
    hello = _connect("phone", made["token"])
    assert hello["ok"], hello
    assert _request("phone", "config.get", {})["ok"]
    refused = _request("phone", "device.token.list", {})
    assert refused["error"]["code"] == 403

    revoked = _request("owner", "device.token.revoke", {"tokenId": made["tokenId"]})["payload"]
    assert revoked == {"tokenId": made["tokenId"], "revoked": True, "closed": 1}
    assert deleted == ["phone"]  # closed through API Gateway's management API
    assert _upgrade("phone-again", made["token"])["statusCode"] == 401  # and refused at the upgrade at once


def test_a_node_token_at_the_upgrade_still_registers_only_as_a_node(token: str, deleted: list[str]) -> None:
    assert _upgrade("owner")["statusCode"] == 200
    assert _connect("owner", token)["ok"]
    made = _request("owner", "device.token.create", {"name": "box", "role": "node"})["payload"]
    assert _upgrade("box", made["token"])["statusCode"] == 200
    as_client = _connect("box", made["token"], "client")
    assert as_client["error"]["code"] == 403
