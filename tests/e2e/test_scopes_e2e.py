"""Roles with a real `orbital dev` (ADR 0042): devices connected over real WebSockets and HTTP with their own tokens
are refused the methods their role lacks, with the scope sentence, while the gateway token keeps doing everything."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from orbital.client import GatewayClient, RpcFailedError

from tests.e2e.conftest import NODE_RUNTIME, GatewayProcess

NODE_TOOLS = [{"name": "Echo", "description": "Echo the input", "inputSchema": {"type": "object"}}]


@pytest.fixture
def gateway_with_token(tmp_path: Path) -> Iterator[GatewayProcess]:
    gw = GatewayProcess(tmp_path / "data", auth="token").start()
    yield gw
    gw.stop()


def _refused(client: GatewayClient, method: str, params: dict[str, object]) -> tuple[int, str]:
    with pytest.raises(RpcFailedError) as caught:
        client.call(method, params)
    return caught.value.code, caught.value.message


def _post(gw: GatewayProcess, method: str, token: str, body: dict[str, object]) -> tuple[int, dict[str, object]]:
    request = urllib.request.Request(
        f"{gw.http}/api/v1/{method}",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=15) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_devices_are_held_to_their_roles(gateway_with_token: GatewayProcess) -> None:
    gw = gateway_with_token
    with GatewayClient(gw.url, timeout=15) as owner:
        owner.connect("client", "owner", token=gw.token)
        owner.call("config.set", {"path": "apiKeys.openai", "value": "sk-e2e-secret"})
        tokens = {
            role: owner.call("device.token.create", {"name": role, "role": role})["token"]
            for role in ("client", "viewer", "operator")
        }
        node_token = owner.call("device.token.create", {"name": "box", "role": "node", "nodeId": "box"})["token"]

        with GatewayClient(gw.url, timeout=15) as viewer:
            viewer.connect("client", "dashboard", token=tokens["viewer"])
            assert viewer.call("sessions.list", {})["sessions"] is not None
            assert _refused(viewer, "config.set", {"path": "userTimezone", "value": "UTC"}) == (
                403,
                "Method config.set needs scope operate; this device's role is viewer",
            )
        with GatewayClient(gw.url, timeout=15) as phone:
            phone.connect("client", "phone", token=tokens["client"])
            assert phone.call("config.get", {"path": "apiKeys.openai"})["value"] == "***"
            assert _refused(phone, "device.token.create", {"name": "mine", "role": "admin"}) == (
                403,
                "Method device.token.create needs scope admin; this device's role is client",
            )
        with GatewayClient(gw.url, timeout=15) as ops:
            ops.connect("client", "ops", token=tokens["operator"])
            assert ops.call("config.set", {"path": "userTimezone", "value": "UTC"})["ok"] is True
            code, message = _refused(ops, "config.set", {"path": "apiKeys.openai", "value": "sk-other"})
            assert code == 403 and "needs scope admin" in message
        with GatewayClient(gw.url, timeout=15) as box:
            box.connect("node", "box", token=node_token, tools=NODE_TOOLS, nodeRuntime=NODE_RUNTIME)
            for method in ("chat.send", "config.get", "device.token.list"):
                code, message = _refused(box, method, {})
                assert code in (101, 403) and message.startswith(f"Method {method} not allowed for mode node"), message

        status, body = _post(gw, "config.set", tokens["viewer"], {"path": "userTimezone", "value": "Europe/Paris"})
        assert (status, body["detail"]) == (403, "Method config.set needs scope operate; this device's role is viewer")
        assert owner.call("config.get", {"path": "userTimezone"})["value"] == "UTC"
        assert owner.call("config.get", {"path": "apiKeys.openai"})["value"] == "***"
