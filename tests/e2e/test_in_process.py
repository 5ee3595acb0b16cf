"""The local gateway answers its own AWS and management API calls without the loopback HTTP hop, and the moto server
still serves everyone else (presigned URLs, tooling). Runs `LocalGateway` in this process to look inside it."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from orbital.client import GatewayClient, RpcFailed
from orbital.local.server import LocalGateway

from tests.conftest import wait_for
from tests.e2e.conftest import in_process_gateway


def _started(tmp: Path, *, in_process: bool) -> Iterator[LocalGateway]:
    yield from in_process_gateway(tmp, persist=False, in_process_aws=in_process)


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[LocalGateway]:
    # function scope: it must start after the autouse fixture that clears the environment of every test
    yield from _started(tmp_path, in_process=True)


def _moto_http(gw: LocalGateway, service: str, key: tuple[str, str] | None = None) -> Any:
    """A client of the moto server that goes over HTTP (not one of the gateway's own), with this start's access key
    (what `runtime.json` tells tooling) unless `key` is given."""
    key_id, secret = key or gw.stack.credentials.pair()
    return boto3.client(
        service,
        endpoint_url=gw.stack.endpoint,
        region_name="us-east-1",
        aws_access_key_id=key_id,
        aws_secret_access_key=secret,
    )


def test_the_moto_port_answers_only_this_starts_key(gateway: LocalGateway) -> None:
    """Another local user can reach a loopback port, but not the data behind it: every request must present the
    access key drawn at this start (kept in the process and in the owner-only runtime.json)."""
    from botocore.exceptions import ClientError

    runtime = json.loads(gateway.runtime_file.read_text())
    assert runtime["awsAccessKey"] == list(gateway.stack.credentials.pair())
    assert _moto_http(gateway, "dynamodb").list_tables()["TableNames"]
    for key in (("local", "local"), ("testing", "testing"), (gateway.stack.credentials.key_id[:-1] + "X", "x")):
        for service, call in (
            ("dynamodb", "list_tables"),
            ("s3", "list_buckets"),
            ("stepfunctions", "list_state_machines"),
        ):
            with pytest.raises(ClientError) as refused:
                getattr(_moto_http(gateway, service, key), call)()
            assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403, (service, key)
    for path in ("/moto-api/data.json", "/moto-api/reset", "/"):
        request = urllib.request.Request(gateway.stack.endpoint + path, method="POST" if "reset" in path else "GET")
        with pytest.raises(urllib.error.HTTPError) as denied:
            urllib.request.urlopen(request, timeout=10)
        assert denied.value.code == 403
    assert _moto_http(gateway, "dynamodb").list_tables()["TableNames"]  # nothing was reset


def test_state_methods_are_served_in_process(gateway: LocalGateway) -> None:
    before = gateway.stack.in_process.served
    with GatewayClient(gateway.ws_url) as c:
        c.connect("client")
        c.call("config.set", {"path": "agents.defaultHeartbeat.every", "value": "45m"})
        assert c.call("config.get", {"path": "agents.defaultHeartbeat.every"})["value"] == "45m"
        c.call("workspace.write", {"path": "notes/inproc.md", "content": "in process"})
        assert c.call("workspace.read", {"path": "notes/inproc.md"})["content"] == "in process"
        with pytest.raises(RpcFailed) as err:
            c.call("workspace.read", {"path": "notes/missing.md"})
        assert err.value.code == 404
    assert gateway.stack.in_process.served > before
    # the same state through moto's HTTP server: one store, whichever way it is reached
    table = gateway.stack.table
    items = _moto_http(gateway, "dynamodb").scan(TableName=table)["Items"]
    assert any("45m" in json.dumps(item) for item in items)


def test_presigned_urls_still_point_at_the_moto_server(gateway: LocalGateway) -> None:
    from orbital.runtime.services import get_services

    workspace = get_services().workspace
    workspace.client.put_object(Bucket=workspace.bucket, Key="agents/main/presigned.txt", Body=b"over http")
    url = workspace.presign_get("agents/main/presigned.txt")
    assert url.startswith(gateway.stack.endpoint)
    with urllib.request.urlopen(url, timeout=10) as resp:
        assert resp.read() == b"over http"
    put = workspace.presign_put("agents/main/uploaded.txt")
    req = urllib.request.Request(
        put, data=b"uploaded", method="PUT", headers={"Content-Type": "application/octet-stream"}
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200
    body = workspace.client.get_object(Bucket=workspace.bucket, Key="agents/main/uploaded.txt")["Body"].read()
    assert body == b"uploaded"


def test_management_api_in_process_posts_closes_and_reports_gone(gateway: LocalGateway) -> None:
    from orbital.runtime.services import get_services

    sender = get_services().sender
    with GatewayClient(gateway.ws_url) as c:
        hello = c.connect("client", "mgmt-test")
        cid = hello["server"]["connectionId"]
        before = gateway.stack.in_process.served
        assert sender.post(cid, {"type": "evt", "event": "hello.there", "payload": {"n": 1}}) is True
        assert c.next_event("hello.there", timeout=10)["payload"] == {"n": 1}
        assert sender.post("NOSUCHCONNECTION", {"type": "evt", "event": "x"}) is False
        sender.close(cid, 4001, "go away")
        wait_for(lambda: c.ws.close_code is not None or _closed(c))
        assert c.ws.close_code == 4001
        assert gateway.stack.in_process.served >= before + 3


def test_posting_a_message_over_128_kb_is_refused_as_on_aws(gateway: LocalGateway) -> None:
    """Through the gateway's own management client (the only one there is): 413 PayloadTooLargeException for a
    message over 128 KB, and the socket stays open."""
    from orbital.aws import clients

    api = clients.management(os.environ["ORBITAL_WS_MGMT_ENDPOINT"])
    with GatewayClient(gateway.ws_url) as client:
        cid = client.connect("client")["server"]["connectionId"]
        api.post_to_connection(ConnectionId=cid, Data=json.dumps({"type": "evt", "event": "x", "payload": "a" * 1000}))
        with pytest.raises(api.exceptions.PayloadTooLargeException):
            api.post_to_connection(
                ConnectionId=cid, Data=json.dumps({"type": "evt", "event": "x", "payload": "a" * 140_000})
            )
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


def test_only_our_exact_origins_are_served() -> None:
    from orbital.local.inprocess import InProcessAws

    hook = InProcessAws("http://127.0.0.1:5000")
    hook.serve_management("http://127.0.0.1:6000/local")

    def made(service: str, endpoint: str) -> Any:
        return boto3.client(
            service, endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="a", aws_secret_access_key="b"
        )

    assert hook.attach(made("dynamodb", "http://127.0.0.1:5000"))
    assert hook.attach(made("s3", "http://localhost:5000"))
    assert not hook.attach(made("dynamodb", "http://127.0.0.1:50001"))  # a prefix of the port is not the port
    assert not hook.attach(made("dynamodb", "https://127.0.0.1:5000"))
    assert not hook.attach(made("sqs", "http://127.0.0.1:5000"))  # not a service the gateway uses
    assert hook.attach(made("apigatewaymanagementapi", "http://127.0.0.1:6000/local"))
    assert not hook.attach(made("apigatewaymanagementapi", "http://127.0.0.1:5000/local"))


def test_after_stop_clients_fail_like_a_closed_port(tmp_path: Path) -> None:
    from botocore.exceptions import EndpointConnectionError
    from orbital.runtime.services import get_services

    for gw in _started(tmp_path, in_process=True):
        services = get_services()
        with GatewayClient(gw.ws_url) as c:
            cid = c.connect("client")["server"]["connectionId"]
            assert services.sender.post(cid, {"type": "evt", "event": "ping"}) is True
        gw.stop()
        assert gw.stack is None
        with pytest.raises(EndpointConnectionError):
            services.sender.post(cid, {"type": "evt", "event": "ping"})
        with pytest.raises(EndpointConnectionError):
            services.table.client.get_item(TableName="orbital-local", Key={"PK": {"S": "x"}, "SK": {"S": "y"}})


def test_bridge_manage_without_a_running_loop() -> None:
    import asyncio

    from orbital.local.bridge import Bridge, BridgeUnavailable

    bridge = Bridge(lambda *_: None, {})
    status, headers, _ = bridge.manage("POST", "never-connected", b"{}", {})
    assert (status, headers["x-amzn-ErrorType"]) == (410, "GoneException")
    loop = asyncio.new_event_loop()
    loop.close()
    bridge.loop = loop
    with pytest.raises(BridgeUnavailable):
        bridge.manage("POST", "any", b"{}", {})


@pytest.mark.parametrize("in_process", [True, False], ids=["in-process", "over-http"])
def test_tool_calls_run_on_the_loop_only_when_their_posts_are_in_process(tmp_path: Path, in_process: bool) -> None:
    """`tool.invoke` and `tool.result` post to sockets: run on the bridge's loop when the management API and the
    AWS calls are answered in this process, else on handler threads (a post over HTTP to the bridge would wait for
    the loop it runs on). The call is answered either way."""
    from tests.e2e.conftest import NODE_RUNTIME

    for gw in _started(tmp_path, in_process=in_process):
        assert gw.bridge is not None
        quick = {"tool.invoke", "tool.result"} & gw.bridge.inline_methods
        assert quick == ({"tool.invoke", "tool.result"} if in_process else set())
        assert "config.get" in gw.bridge.inline_methods
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
    items = _moto_http(gateway, "dynamodb").scan(TableName=gateway.stack.table)["Items"]
    assert [i["PK"]["S"] for i in items if i["PK"]["S"].startswith("TTLTEST#")] == ["TTLTEST#live"]


def test_over_http_the_management_api_has_its_own_port_and_secret(tmp_path: Path) -> None:
    """With in-process AWS off (a way to measure it), boto3 reaches the management API over HTTP: on a loopback port
    of its own under a stage only this process knows, never on the gateway's public port."""
    from orbital.runtime.services import get_services

    for gw in _started(tmp_path, in_process=False):
        endpoint = os.environ["ORBITAL_WS_MGMT_ENDPOINT"]
        assert gw.management is not None and endpoint == gw.management.endpoint
        assert f":{gw.port}/" not in endpoint
        stage = endpoint.rsplit("/", 1)[1]
        assert len(stage) >= 32
        with GatewayClient(gw.ws_url) as c:
            cid = c.connect("client")["server"]["connectionId"]
            assert get_services().sender.post(cid, {"type": "evt", "event": "over.http", "payload": 1}) is True
            assert c.next_event("over.http", timeout=10)["payload"] == 1
            base = endpoint.rsplit("/", 1)[0]
            for guess in ("local", "prod", stage[:-1] + ("A" if stage[-1] != "A" else "B")):
                request = urllib.request.Request(f"{base}/{guess}/@connections/{cid}", data=b'{"x":1}', method="POST")
                with pytest.raises(urllib.error.HTTPError) as denied:
                    urllib.request.urlopen(request, timeout=10)
                assert denied.value.code == 403
            assert c.call("tools.list")["tools"] is not None
            assert not [frame for frame in c.events if frame.get("event") != "over.http"]
