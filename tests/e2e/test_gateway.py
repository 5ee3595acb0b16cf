"""The local gateway over real sockets: handshake in every mode, auth, errors, config, persistence."""

from __future__ import annotations

import json
import signal
import urllib.error
import urllib.request

import pytest
from orbital.client import GatewayClient, RpcFailedError
from websockets.exceptions import ConnectionClosed

from tests.conftest import NODE_RUNTIME, NODE_TOOLS, wait_for
from tests.e2e.conftest import GatewayProcess


def test_health_and_unknown_paths(gateway):
    with urllib.request.urlopen(f"{gateway.http}/health") as resp:
        assert resp.status == 200
        assert json.loads(resp.read()) == {"status": "healthy"}
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"{gateway.http}/nothing-here")
    assert err.value.code == 404


def test_client_connect_hello_ok_lists_every_method(gateway):
    with GatewayClient(gateway.url) as c:
        hello = c.connect("client", "web-1")
    assert hello["type"] == "hello-ok"
    assert hello["protocol"] == 1
    assert hello["server"]["connectionId"]
    methods = hello["features"]["methods"]
    for name in (
        "connect",
        "config.get",
        "config.set",
        "tools.list",
        "sessions.list",
        "workspace.read",
        "pair.approve",
        "cron.list",
        "heartbeat.status",
        "channels.list",
    ):
        assert name in methods
    assert len(methods) == len(set(methods))
    assert "chat" in hello["features"]["events"]
    assert {"approval.requested", "approval.resolved"} <= set(hello["features"]["events"])
    assert hello["features"]["transferModes"] == ["binary", "text", "presigned"]
    # the caps the local gateway enforces, as API Gateway does: a node fits its results to them
    assert hello["features"]["limits"] == {"maxMessageBytes": 128 * 1024, "maxFrameBytes": 32 * 1024}


def test_minimal_connect_params_are_accepted(gateway):
    with GatewayClient(gateway.url) as c:
        payload = c.call("connect", {"minProtocol": 1, "client": {"mode": "client", "id": "bare"}})
        assert payload["type"] == "hello-ok"


def test_methods_before_connect_get_101_and_unknown_methods_404(gateway):
    with GatewayClient(gateway.url) as c:
        res = c.request("config.get")
        assert res["error"] == {"code": 101, "message": "Not connected"}
        c.connect("client")
        res = c.request("no.such.method")
        assert res["error"] == {"code": 404, "message": "Unknown method: no.such.method"}


def test_protocol_and_mode_validation(gateway):
    with GatewayClient(gateway.url) as c:
        assert c.request("connect", {"minProtocol": 2, "client": {"mode": "client"}})["error"] == {
            "code": 102,
            "message": "Unsupported protocol version",
        }
        assert c.request("connect", {"minProtocol": 1, "client": {"mode": "robot"}})["error"] == {
            "code": 103,
            "message": "Invalid client mode",
        }
        assert c.request("connect", {"minProtocol": 1, "client": {"mode": "channel", "id": "x"}})["error"] == {
            "code": 103,
            "message": "Channel mode requires channel field",
        }


def test_node_validation_errors(gateway):
    with GatewayClient(gateway.url) as c:
        res = c.request("connect", {"minProtocol": 1, "client": {"mode": "node", "id": "n1"}})
        assert res["error"] == {"code": 103, "message": "Node mode requires tools"}
        res = c.request("connect", {"minProtocol": 1, "client": {"mode": "node", "id": "n1"}, "tools": NODE_TOOLS})
        assert res["error"] == {"code": 103, "message": "Invalid nodeRuntime: nodeRuntime for n1 is required"}
        bad = dict(
            NODE_RUNTIME,
            hostCapabilities=["filesystem.read"],
            toolCapabilities={"Bash": ["filesystem.read"], "Read": ["filesystem.read"]},
        )
        res = c.request(
            "connect",
            {"minProtocol": 1, "client": {"mode": "node", "id": "n1"}, "tools": NODE_TOOLS, "nodeRuntime": bad},
        )
        assert res["error"]["code"] == 103
        assert "missing execution baseline" in res["error"]["message"]
        missing = dict(NODE_RUNTIME, toolCapabilities={"Bash": ["shell.exec"]})
        res = c.request(
            "connect",
            {"minProtocol": 1, "client": {"mode": "node", "id": "n1"}, "tools": NODE_TOOLS, "nodeRuntime": missing},
        )
        assert (
            res["error"]["message"]
            == "Invalid nodeRuntime: nodeRuntime for n1 toolCapabilities missing entry for tool: Read"
        )


def test_node_tools_listed_then_removed_on_disconnect(gateway, client):
    with GatewayClient(gateway.url) as node:
        node.connect("node", "laptop", tools=NODE_TOOLS, nodeRuntime=NODE_RUNTIME)
        names = [t["name"] for t in client.call("tools.list")["tools"]]
        assert names[:12][0] == "gsv__ListFiles"
        assert "laptop__Bash" in names and "laptop__Read" in names

    def gone() -> bool:
        return "laptop__Bash" not in [t["name"] for t in client.call("tools.list")["tools"]]

    wait_for(gone, 10, what="the node's tools gone after it disconnected")


def test_channel_mode_registers_channel(gateway, client):
    with GatewayClient(gateway.url) as ch:
        ch.connect("channel", "bot-1", client={"channel": "discord", "accountId": "main"})
        channels = client.call("channels.list")
    entries = [c for c in channels["channels"] if c["channel"] == "discord"]
    assert channels["count"] == len(channels["channels"])
    assert [(c["channel"], c["accountId"]) for c in entries] == [("discord", "main")]
    assert isinstance(entries[0]["connectedAt"], int)


def test_newer_client_replaces_older_socket(gateway):
    old = GatewayClient(gateway.url)
    old.connect("client", "same-id")
    with GatewayClient(gateway.url) as new:
        new.connect("client", "same-id")
        notice = json.loads(old.ws.recv(timeout=10))  # why, ahead of a close that on AWS carries no reason
        assert notice == {
            "type": "evt",
            "event": "connection.closing",
            "payload": {"code": 1000, "reason": "Replaced by newer client connection"},
        }
        with pytest.raises(ConnectionClosed) as closed:
            old.ws.recv(timeout=10)
        assert closed.value.rcvd.code == 1000
        assert closed.value.rcvd.reason == "Replaced by newer client connection"
        assert new.call("config.get", {"path": "userTimezone"})["value"] == "UTC"
    old.close()


def test_malformed_json_gets_no_reply_and_socket_survives(client):
    client.send_raw("{this is not json")
    client.send_raw('{"type":"weird","id":"1"}')
    client.send_raw('{"type":"res","id":"2","ok":true}')
    assert client.call("config.get", {"path": "model.provider"})["value"] == "anthropic"
    assert not [e for e in client.events if e.get("type") == "res"]


def test_a_message_over_128_kb_closes_the_socket_as_api_gateway_does(gateway, client):
    """API Gateway closes a socket that sends a message over 128 KB with 1009; the local gateway does the same, so
    nothing that only works locally ships. Nothing from the message is applied."""
    big = json.dumps(
        {"type": "req", "id": "big-1", "method": "config.set", "params": {"path": "notes", "value": "x" * 200_000}}
    )
    client.send_raw(big)  # sent as fragments of 30,000 characters: one message all the same
    with pytest.raises(ConnectionClosed) as closed:
        client.wait_response("big-1", timeout=10)
    assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (1009, "Message too big")
    with GatewayClient(gateway.url) as fresh:
        fresh.connect("client")
        assert fresh.call("config.get", {"path": "notes"}) == {"path": "notes", "exists": False}
        medium = "y" * 100_000  # under the cap, over a frame: fragmented, accepted
        fresh.call("config.set", {"path": "notes", "value": medium})
        assert fresh.call("config.get", {"path": "notes"})["value"] == medium
        fresh.call("config.set", {"path": "notes"})


def test_a_frame_over_32_kb_closes_the_socket_as_api_gateway_does(gateway):
    """API Gateway caps one frame at 32 KB: a stock client sending 40 KB in one frame is closed with 1009 and nothing
    of the message is applied; the same message in fragments goes through."""
    from websockets.sync.client import connect

    value = "z" * 40_000
    frame = {"type": "req", "id": "f-1", "method": "config.set", "params": {"path": "notes", "value": value}}
    with connect(gateway.url, open_timeout=10) as ws:
        hello = {"minProtocol": 1, "client": {"mode": "client", "id": "stock"}}
        ws.send(json.dumps({"type": "req", "id": "c", "method": "connect", "params": hello}))
        assert json.loads(ws.recv(timeout=10))["ok"]
        ws.send(json.dumps(frame))
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (1009, "Frame too big")
    with GatewayClient(gateway.url) as fresh:  # fragments of at most 30,000 bytes
        fresh.connect("client")
        assert fresh.call("config.get", {"path": "notes"}) == {"path": "notes", "exists": False}
        fresh.call("config.set", {"path": "notes", "value": value})
        assert fresh.call("config.get", {"path": "notes"})["value"] == value
        fresh.call("config.set", {"path": "notes"})


def test_config_round_trip_and_masking(client):
    client.call("config.set", {"path": "apiKeys.openai", "value": "sk-live-123"})
    client.call("config.set", {"path": "model", "value": {"provider": "openai", "id": "gpt-4.1"}})
    client.call("config.set", {"path": "channels.discord.botToken", "value": "discord-secret"})
    full = client.call("config.get")["config"]
    assert full["apiKeys"]["openai"] == "***"
    assert full["channels"]["discord"]["botToken"] == "***"
    assert full["model"] == {"provider": "openai", "id": "gpt-4.1"}
    assert client.call("config.get", {"path": "apiKeys.openai"})["value"] == "***"
    assert client.call("config.get", {"path": "apiKeys"})["value"] == {"openai": "***"}
    assert "sk-live-123" not in json.dumps(client.call("config.get"))
    # a UI writing the mask back does not destroy the key
    client.call("config.set", {"path": "apiKeys.openai", "value": "***"})
    assert client.call("config.get", {"path": "apiKeys.openai"})["value"] == "***"
    assert client.request("config.set", {"value": 1})["error"] == {"code": 400, "message": "path required"}


def test_auth_required_when_token_set(data_dir):
    gw = GatewayProcess(data_dir, token="s3cret-token-value").start()
    try:
        with GatewayClient(gw.url) as ok:
            assert ok.connect("client", token="s3cret-token-value")["type"] == "hello-ok"
        bad = GatewayClient(gw.url)
        frame = bad.request("connect", {"minProtocol": 1, "client": {"mode": "client"}, "auth": {"token": "nope"}})
        assert frame["error"] == {"code": 401, "message": "Unauthorized: invalid or missing token"}
        notice = json.loads(bad.ws.recv(timeout=10))
        assert notice["event"] == "connection.closing" and notice["payload"] == {"code": 4001, "reason": "Unauthorized"}
        with pytest.raises(ConnectionClosed) as closed:
            bad.ws.recv(timeout=10)
        assert closed.value.rcvd.code == 4001
        assert closed.value.rcvd.reason == "Unauthorized"
        missing = GatewayClient(gw.url)
        with pytest.raises((RpcFailedError, ConnectionClosed)):
            missing.connect("client")
        missing.close()
    finally:
        gw.stop()


def test_non_loopback_without_token_is_refused(data_dir):
    gw = GatewayProcess(data_dir, extra_args=["--host", "0.0.0.0"])
    with pytest.raises(RuntimeError) as err:
        gw.start(timeout=30)
    assert "without a token" in str(err.value)


def test_state_persists_across_restart(data_dir):
    gw = GatewayProcess(data_dir).start()
    try:
        with GatewayClient(gw.url) as c:
            c.connect("client")
            c.call("config.set", {"path": "userTimezone", "value": "America/Chicago"})
            c.call("workspace.write", {"path": "notes/today.md", "content": "remember the milk"})
    finally:
        assert gw.stop(signal.SIGINT) == 0
    assert "state saved" in gw.output
    gw = GatewayProcess(data_dir).start()
    try:
        with GatewayClient(gw.url) as c:
            c.connect("client")
            assert c.call("config.get", {"path": "userTimezone"})["value"] == "America/Chicago"
            assert c.call("workspace.read", {"path": "notes/today.md"})["content"] == "remember the milk"
    finally:
        gw.stop()


def test_the_management_api_is_not_served_on_the_public_port(gateway):
    """Whoever learns a connection id must not be able to post into that socket or close it: the gateway's own
    posts never leave its process, and its public port has no `@connections` route at all (with or without a stage
    in the path, with or without credentials)."""
    import boto3

    with GatewayClient(gateway.url) as client:
        cid = client.connect("client")["server"]["connectionId"]
        api = boto3.client(
            "apigatewaymanagementapi",
            endpoint_url=gateway.http,
            region_name="us-east-1",
            aws_access_key_id="local",
            aws_secret_access_key="local",
        )
        with pytest.raises(api.exceptions.ClientError) as refused:
            api.post_to_connection(ConnectionId=cid, Data=json.dumps({"type": "evt", "event": "injected"}))
        assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
        for method in ("POST", "GET", "DELETE"):
            for path in (f"/@connections/{cid}", f"/local/@connections/{cid}", f"/prod/@connections/{cid}"):
                request = urllib.request.Request(f"{gateway.http}{path}", data=b"{}" if method == "POST" else None)
                request.method = method
                with pytest.raises(urllib.error.HTTPError) as denied:
                    urllib.request.urlopen(request, timeout=10)
                assert denied.value.code in (404, 405), (method, path)
        # the socket is still open, and nothing reached it (a frame posted before this reply would be read first)
        assert client.call("config.get", {"path": "userTimezone"})["value"] == "UTC"
        assert not [frame for frame in client.events if frame.get("event") == "injected"]
