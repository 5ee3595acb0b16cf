"""Mode gating is deny-by-default: every method names the connection modes that may call it, and a socket of any
other mode is refused before the handler runs (nothing it asked for happens)."""

from __future__ import annotations

from typing import Any

import pytest
from orbital.methods import registry
from orbital.protocol.registry import CLIENT, EVERY_MODE, NODE, Router

CHANNEL_FORBIDDEN = [
    ("config.get", {}),
    ("config.set", {"path": "userTimezone", "value": "Europe/Paris"}),
    ("pair.approve", {"channel": "test", "senderId": "42"}),
    ("pair.list", {}),
    ("tool.invoke", {"tool": "laptop__Bash", "args": {"command": "id"}}),
    ("tool.request", {"callId": "c1", "tool": "laptop__Bash", "args": {}, "sessionKey": "agent:main:main"}),
    ("tool.result", {"callId": "c1", "result": "x"}),
    ("logs.get", {}),
    ("node.exec.event", {"sessionId": "s", "event": "finished"}),
    ("node.probe.result", {"probeId": "p", "ok": True}),
    ("transfer.request", {"source": "laptop:a.txt", "destination": "gsv:a.txt"}),
    ("workspace.write", {"path": "SOUL.md", "content": "owned"}),
    ("workspace.read", {"path": "SOUL.md"}),
    ("chat.send", {"sessionKey": "agent:main:main", "message": "hi"}),
    ("cron.add", {"name": "x", "schedule": {"kind": "every", "everyMs": 60000}, "spec": {"mode": "task"}}),
    ("session.reset", {"sessionKey": "agent:main:main"}),
    ("channel.start", {"channel": "test"}),
]


def test_every_method_names_the_modes_that_may_call_it() -> None:
    for spec in registry():
        assert spec.modes, f"{spec.name} names no mode"
        assert spec.modes <= EVERY_MODE, f"{spec.name}: unknown modes {sorted(spec.modes - EVERY_MODE)}"


def test_a_method_cannot_be_registered_without_modes() -> None:
    router = Router("x")
    with pytest.raises(TypeError):
        router.method("x.open")(lambda ctx, params: None)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="modes"):
        router.method("x.none", modes=frozenset(), scope="read")
    with pytest.raises(ValueError, match="modes"):
        router.method("x.odd", modes=frozenset({"admin"}), scope="read")


def test_the_rules_that_matter_most() -> None:
    reg = registry()

    def modes(name: str) -> frozenset[str]:
        spec = reg.get(name)
        assert spec is not None, name
        return spec.modes

    for name in ("config.get", "config.set", "pair.approve", "tool.invoke", "tool.request"):
        assert modes(name) == CLIENT, name
    # a node may ask for one thing: to save the whole result of a call it is answering (test_transfer.py)
    assert modes("transfer.request") == CLIENT | NODE
    for name in ("workspace.write", "workspace.delete", "chat.send", "cron.add", "session.patch"):
        assert modes(name) == CLIENT, name
    for name in ("tool.result", "logs.result", "node.probe.result", "node.exec.event", "transfer.meta"):
        assert modes(name) == NODE, name
    channel_may = sorted(spec.name for spec in reg if "channel" in spec.modes)
    assert channel_may == ["channel.control.result", "channel.inbound", "connect", "tools.list"]


@pytest.mark.parametrize(("method", "params"), CHANNEL_FORBIDDEN, ids=[m for m, _ in CHANNEL_FORBIDDEN])
def test_a_channel_socket_is_refused_what_a_bridge_must_not_do(connect: Any, method: str, params: Any) -> None:
    admin = connect("client", "admin")
    before = admin.call("config.get")
    bridge = connect("channel", "bridge")
    error = bridge.error(method, params)
    assert error["code"] in (101, 403), error
    # GSV's late sentence first, then the specific one (GSV's clients of either release match on one of them)
    assert error["message"].startswith(f"Method {method} not allowed for mode channel: "), error
    assert error["message"].split(": ", 1)[1] in (
        "only client connections may call it",
        "only client or node connections may call it",
        "Not connected",
        "Node not authorized for this call",
        "Only node clients can submit exec events",
        "Only node clients can submit probe results",
    )
    assert admin.call("config.get") == before
    soul = admin.frame("workspace.read", {"path": "SOUL.md"})
    assert soul is not None
    assert not soul["ok"] or soul["payload"]["content"] != "owned"


def test_a_node_may_answer_calls_but_not_drive_the_gateway(connect: Any) -> None:
    node = connect("node", "laptop")
    for method, params in (
        ("config.set", {"path": "userTimezone", "value": "Europe/Paris"}),
        ("chat.send", {"sessionKey": "agent:main:main", "message": "hi"}),
        ("tool.invoke", {"tool": "laptop__Bash", "args": {}}),
        ("tool.request", {"callId": "c2", "tool": "laptop__Bash", "args": {}, "sessionKey": "agent:main:main"}),
        ("channel.inbound", {"channel": "test", "senderId": "1", "text": "hi"}),
        ("pair.approve", {"channel": "test", "senderId": "1"}),
    ):
        error = node.error(method, params)
        assert error["code"] in (101, 403), (method, error)
    assert node.call("tools.list")["tools"]  # its keepalive


@pytest.mark.parametrize("node_id", ["mcp", "MCP"])
def test_a_node_may_not_take_the_id_of_mcp_tools(connect: Any, node_id: str) -> None:
    """`mcp__{server}__{tool}` names a remote MCP server's tool (ADR 0045): a node called `mcp` would shadow them."""
    with pytest.raises(AssertionError, match="'mcp' is reserved for the tools of MCP servers"):
        connect("node", node_id)
    assert connect("node", "mcp-box").call("tools.list")["tools"]  # a longer id is a node like any other


def test_a_client_may_not_answer_a_node_call(connect: Any) -> None:
    client = connect("client", "ui")
    assert client.error("tool.result", {"callId": "nope", "result": 1}) == {
        "code": 403,
        "message": "Method tool.result not allowed for mode client: Node not authorized for this call",
    }
    assert client.error("channel.inbound", {"channel": "test", "senderId": "1", "text": "hi"})["code"] == 403
