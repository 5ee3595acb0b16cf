"""The admin API and its OpenAPI document on a real `orbital dev` with a token, over real HTTP on its own port."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.conftest import GatewayProcess

TOKEN = "http-api-token-0123456789abcdef"


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    gw = GatewayProcess(tmp_path_factory.mktemp("http-api") / "data", token=TOKEN).start()
    yield gw
    gw.stop()


def _request(gw: GatewayProcess, method: str, path: str, body: Any = None, token: str | None = None) -> tuple[int, Any]:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"{gw.http}{path}", data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=15) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def test_config_get_needs_the_token(guarded: GatewayProcess) -> None:
    status, body = _request(guarded, "POST", "/api/v1/config.get", {})
    assert (status, body) == (401, {"detail": "Not authenticated", "code": 401})
    status, _ = _request(guarded, "POST", "/api/v1/config.get", {}, token="wrong-token-0123456789")
    assert status == 401
    status, body = _request(guarded, "POST", "/api/v1/config.get", {}, token=TOKEN)
    assert status == 200 and isinstance(body["config"], dict)


def test_a_change_over_http_is_what_a_socket_reads(guarded: GatewayProcess) -> None:
    from orbital.client import GatewayClient

    body = {"path": "userTimezone", "value": "Asia/Tokyo"}
    assert _request(guarded, "POST", "/api/v1/config.set", body, token=TOKEN) == (
        200,
        {"ok": True, "path": "userTimezone"},
    )
    with GatewayClient(guarded.url, timeout=15) as client:
        client.connect("client", token=TOKEN)
        assert client.call("config.get", {"path": "userTimezone"})["value"] == "Asia/Tokyo"


def test_the_openapi_document_lists_the_admin_api(guarded: GatewayProcess) -> None:
    status, doc = _request(guarded, "GET", "/openapi.json")
    assert status == 200
    assert "/api/v1/config.get" in doc["paths"] and "/api/v1/tool.result" not in doc["paths"]
    assert doc["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"


def test_a_node_tool_call_over_http_waits_for_the_node(gateway: GatewayProcess, node_factory: Any) -> None:
    """On a gateway without a token (this machine only), a deferred method: the request is answered with the node's
    result once the node has run the tool."""
    node = node_factory("http-node")
    body = {"tool": f"{node.node_id}__Bash", "args": {"command": "echo over-http"}}
    status, answer = _request(gateway, "POST", "/api/v1/tool.invoke", body)
    assert status == 200, answer
    assert "over-http" in json.dumps(answer["result"])
    status, answer = _request(gateway, "POST", "/api/v1/tool.invoke", {"tool": "nobody__Bash"})
    assert (status, answer) == (404, {"detail": "No node provides tool: nobody__Bash", "code": 404})


def test_a_workspace_path_over_the_limit_is_a_400_not_a_500(guarded: GatewayProcess) -> None:
    """The local file workspace refuses a key over 1024 bytes: the method says so as a bad request, over HTTP and on
    the socket alike."""
    from orbital.client import GatewayClient, RpcFailedError

    long_path = "notes/" + "a" * 2000 + ".md"
    calls = [("workspace.write", {"path": long_path, "content": "x"}), ("workspace.read", {"path": long_path})]
    for method, params in calls:
        status, body = _request(guarded, "POST", f"/api/v1/{method}", params, token=TOKEN)
        assert status == 400, (method, body)
        assert body["code"] == 400 and body["detail"].startswith("Path too long"), body
    with GatewayClient(guarded.url, timeout=15) as client:
        client.connect("client", token=TOKEN)
        for method, params in calls:
            with pytest.raises(RpcFailedError) as refused:
                client.call(method, params)
            assert refused.value.code == 400 and refused.value.message.startswith("Path too long"), method
