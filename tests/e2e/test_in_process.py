"""The local gateway answers its own Step Functions and management API calls in process (the local backends of the
Workflows and Sender ports), keeps its table and workspace in the data directory, and serves presigned-style URLs for
nodes on its own port. Runs `LocalGateway` in this process to look inside it."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from orbital.client import GatewayClient, RpcFailedError
from orbital.local.server import LocalGateway

from tests.conftest import wait_for
from tests.e2e.conftest import in_process_gateway


def _started(tmp: Path) -> Iterator[LocalGateway]:
    yield from in_process_gateway(tmp, persist=False)


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[LocalGateway]:
    # function scope: it must start after the autouse fixture that clears the environment of every test
    yield from _started(tmp_path)


def test_state_methods_are_served_in_process(gateway: LocalGateway) -> None:
    with GatewayClient(gateway.ws_url) as c:
        c.connect("client")
        c.call("config.set", {"path": "agents.defaultHeartbeat.every", "value": "45m"})
        assert c.call("config.get", {"path": "agents.defaultHeartbeat.every"})["value"] == "45m"
        c.call("workspace.write", {"path": "notes/inproc.md", "content": "in process"})
        assert c.call("workspace.read", {"path": "notes/inproc.md"})["content"] == "in process"
        with pytest.raises(RpcFailedError) as err:
            c.call("workspace.read", {"path": "notes/missing.md"})
        assert err.value.code == 404
    # the same state in the data directory's database, read beside the gateway
    from orbital.local.store import LocalStore

    beside = LocalStore.open(gateway.store.root, exclusive=False)
    try:
        assert any("45m" in json.dumps(item) for item in beside.table.scan_items())
    finally:
        beside.close()


def test_presigned_urls_point_at_the_gateways_own_port(gateway: LocalGateway) -> None:
    from orbital.runtime.services import get_services

    workspace = get_services().workspace
    workspace.put("agents/main/presigned.txt", b"over http", content_type="text/plain")
    url = workspace.presign_get("agents/main/presigned.txt")
    assert url.startswith(f"{gateway.http_url}/_objects/")
    with urllib.request.urlopen(url, timeout=10) as resp:
        assert resp.read() == b"over http"
    put = workspace.presign_put("agents/main/uploaded.txt")
    req = urllib.request.Request(
        put, data=b"uploaded", method="PUT", headers={"Content-Type": "application/octet-stream"}
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200
    got = workspace.get("agents/main/uploaded.txt")
    assert got is not None and got[0] == b"uploaded"
    forged = url.rsplit("signature=", 1)[0] + "signature=" + "0" * 64
    with pytest.raises(urllib.error.HTTPError) as denied:
        urllib.request.urlopen(forged, timeout=10)
    assert denied.value.code == 403


def test_management_api_in_process_posts_closes_and_reports_gone(gateway: LocalGateway) -> None:
    from orbital.aws import clients
    from orbital.runtime.services import get_services

    sender = get_services().sender
    with GatewayClient(gateway.ws_url) as c:
        hello = c.connect("client", "mgmt-test")
        cid = hello["server"]["connectionId"]
        clients.reset_call_counts()
        assert sender.post(cid, {"type": "evt", "event": "hello.there", "payload": {"n": 1}}) is True
        assert c.next_event("hello.there", timeout=10)["payload"] == {"n": 1}
        assert sender.post("NOSUCHCONNECTION", {"type": "evt", "event": "x"}) is False
        sender.close(cid, 4001, "go away")
        wait_for(lambda: c.ws.close_code is not None or _closed(c))
        assert c.ws.close_code == 4001
        counts = clients.call_counts()
        assert counts.get("apigatewaymanagementapi.PostToConnection", 0) >= 3  # the close's notice too
        assert counts.get("apigatewaymanagementapi.DeleteConnection", 0) >= 1


def test_posting_a_message_over_128_kb_is_refused_as_on_aws(gateway: LocalGateway) -> None:
    """Through the gateway's own Sender (the only one there is): 413 PayloadTooLargeException for a message over
    128 KB, and the socket stays open."""
    from orbital.local.sender import SendRefusedError
    from orbital.runtime.services import get_services

    sender = get_services().sender
    with GatewayClient(gateway.ws_url) as client:
        cid = client.connect("client")["server"]["connectionId"]
        assert sender.post(cid, {"type": "evt", "event": "x", "payload": "a" * 1000}) is True
        with pytest.raises(SendRefusedError) as refused:
            sender.post(cid, {"type": "evt", "event": "x", "payload": "a" * 140_000})
        assert (refused.value.status, refused.value.error_code) == (413, "PayloadTooLargeException")
        assert client.next_event("x")["payload"] == "a" * 1000
        assert client.call("config.get", {"path": "userTimezone"})["value"] == "UTC"  # the socket is still open


def _closed(c: GatewayClient) -> bool:
    try:
        c.ws.recv(timeout=0.05)
    except TimeoutError:
        return False
    except Exception:
        return True
    return False


def test_no_aws_client_is_answered_in_process(gateway: LocalGateway) -> None:
    """Nothing intercepts botocore any more: a boto3 client of the gateway's settings is a plain one (not a wrapper
    answering some operations itself), pointed at the discard port (so a call no local backend answers fails instead
    of reaching AWS)."""
    from botocore.client import BaseClient
    from orbital.aws import clients

    made = clients.stepfunctions()
    assert isinstance(made, BaseClient) and made.meta.endpoint_url == gateway.stack.endpoint


def test_after_stop_the_ports_fail_like_a_closed_port(tmp_path: Path) -> None:
    from orbital.local.bridge import BridgeUnavailableError
    from orbital.local.sfn_worker import WorkerRefusedError
    from orbital.runtime.services import get_services

    for gw in _started(tmp_path):
        services = get_services()
        with GatewayClient(gw.ws_url) as c:
            cid = c.connect("client")["server"]["connectionId"]
            assert services.sender.post(cid, {"type": "evt", "event": "ping"}) is True
        gw.stop()
        assert gw.stack is None
        with pytest.raises(BridgeUnavailableError):
            services.sender.post(cid, {"type": "evt", "event": "ping"})
        assert services.registry is not None  # the services themselves are still there
        with pytest.raises(WorkerRefusedError) as refused:
            services.workflows.status("arn:aws:states:us-east-1:1:execution:x:y")
        assert refused.value.error_code == "ServiceUnavailable"


def test_bridge_manage_without_a_running_loop() -> None:
    import asyncio

    from orbital.local.bridge import Bridge, BridgeUnavailableError

    bridge = Bridge(lambda *_: None, {})
    status, headers, _ = bridge.manage("POST", "never-connected", b"{}", {})
    assert (status, headers["x-amzn-ErrorType"]) == (410, "GoneException")
    loop = asyncio.new_event_loop()
    loop.close()
    bridge.loop = loop
    with pytest.raises(BridgeUnavailableError):
        bridge.manage("POST", "any", b"{}", {})


def test_tool_results_run_on_the_loop_and_tool_invoke_on_a_worker(tmp_path: Path) -> None:
    """`tool.result` posts to sockets: it runs on the bridge's loop, since the management API and the Step Functions
    calls are answered in this process. `tool.invoke` runs on a worker thread: for a remote MCP server's tool it waits
    for the server (ADR 0045). The call is answered."""
    from tests.e2e.conftest import NODE_RUNTIME

    for gw in _started(tmp_path):
        assert gw.bridge is not None
        assert {"tool.result", "config.get"} <= gw.bridge.inline_methods
        assert "tool.invoke" not in gw.bridge.inline_methods
        with GatewayClient(gw.ws_url) as node, GatewayClient(gw.ws_url) as caller:
            node.connect("node", "loop-node", tools=[{"name": "Echo", "inputSchema": {}}], nodeRuntime=NODE_RUNTIME)
            caller.connect("client")
            wait_for(lambda: any(t["name"] == "loop-node__Echo" for t in caller.call("tools.list")["tools"]))
            for n in range(3):
                frame = {"type": "req", "id": f"t{n}", "method": "tool.invoke"}
                frame["params"] = {"tool": "loop-node__Echo", "args": {"n": n}}
                caller.send_raw(json.dumps(frame))
                evt = node.next_event("tool.invoke", timeout=10)["payload"]
                assert node.call("tool.result", {"callId": evt["callId"], "result": evt["args"]}) == {"ok": True}
                assert caller.wait_response(f"t{n}", timeout=10)["payload"] == {"result": {"n": n}}


def test_the_gateway_deletes_expired_items_of_its_table(gateway: LocalGateway) -> None:
    """What its ticker runs once a minute (`orbital.local.ttl`): expired items leave the table, live ones stay."""
    import time

    from orbital.runtime.services import get_services

    table = get_services().table
    table.put(("TTLTEST#gone", "x"), {"n": 1}, ttl=int(time.time()) - 5)
    table.put(("TTLTEST#live", "x"), {"n": 2}, ttl=int(time.time()) + 600)
    assert gateway.ticker is not None and gateway.ticker.housekeeping is not None
    assert gateway._delete_expired() >= 1
    items = table.scan_items()  # expired ones included, if any were left
    assert [i["PK"]["S"] for i in items if i["PK"]["S"].startswith("TTLTEST#")] == ["TTLTEST#live"]
