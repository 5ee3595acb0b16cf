"""Roles and scopes over the whole registry (ADR 0042): every method, every role, every mode the method allows, a
real dispatch through the one dispatcher, and the outcome matches the table below.

The tables are written out here, not read from `orbital.domain.roles`: a method added to the registry without an
entry in `SCOPE` fails `test_every_method_has_an_expected_scope`, and a method whose declared scope differs from the
one written here fails the dispatch test for the roles the difference lets in or keeps out.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from orbital.domain import roles
from orbital.methods import registry
from orbital.protocol.dispatch import Dispatcher
from orbital.protocol.registry import MethodSpec, Registry, Router
from orbital.store.connections import Connection

# What each role may do, as issue 34 puts it: admin everything; operator everything but tokens and secret values;
# client chat, sessions, reading (config without secrets) and its own runs' approvals; viewer reading only; node
# and channel only what a tool host or a messenger bridge sends.
ROLE_SCOPES: dict[str, set[str]] = {
    "admin": {"admin", "operate", "chat", "read", "node", "channel", "connect"},
    "operator": {"operate", "chat", "read", "node", "channel", "connect"},
    "client": {"chat", "read", "connect"},
    "viewer": {"read", "connect"},
    "node": {"node", "connect"},
    "channel": {"channel", "connect"},
}

# method -> the scope it needs (a dict: per mode, where modes differ)
SCOPE: dict[str, str | dict[str, str]] = {
    "connect": "connect",
    "tools.list": "connect",
    # reading
    "config.get": "read",
    "config.schema": "read",
    "sessions.list": "read",
    "session.get": "read",
    "session.stats": "read",
    "session.history": "read",
    "session.preview": "read",
    "approval.list": "read",
    "approval.history": "read",
    "workspace.list": "read",
    "workspace.read": "read",
    "channels.list": "read",
    "channel.status": "read",
    "pair.list": "read",
    "heartbeat.status": "read",
    "cron.status": "read",
    "cron.list": "read",
    "cron.runs": "read",
    "cron.preview": "read",
    "skills.status": "read",
    "spend.status": "read",  # lands with the spend caps
    "backup.status": "read",
    "mcp.list": "read",
    # chatting
    "chat.send": "chat",
    "session.patch": "chat",
    "session.reset": "chat",
    "session.compact": "chat",
    "approval.resolve": "chat",
    # changing the gateway
    "config.set": "operate",
    "mcp.test": "operate",
    "mcp.refresh": "operate",
    "mcp.login": "admin",
    "workspace.write": "operate",
    "workspace.delete": "operate",
    "channel.start": "operate",
    "channel.stop": "operate",
    "channel.login": "operate",
    "channel.logout": "operate",
    "heartbeat.start": "operate",
    "heartbeat.trigger": "operate",
    "cron.add": "operate",
    "cron.update": "operate",
    "cron.remove": "operate",
    "cron.run": "operate",
    "skills.update": "operate",
    "tool.invoke": "operate",
    "tool.request": "operate",
    "logs.get": "operate",
    "node.forget": "operate",
    "transfer.request": {"client": "operate", "node": "node"},
    # credentials
    "installs.list": "admin",
    "installs.revoke": "admin",
    "pair.approve": "admin",
    "pair.reject": "admin",
    # what a node sends
    "tool.result": "node",
    "logs.result": "node",
    "node.exec.event": "node",
    "node.probe.result": "node",
    "transfer.meta": "node",
    "transfer.accept": "node",
    "transfer.complete": "node",
    "transfer.done": "node",
    # what a channel sends
    "channel.inbound": "channel",
    "channel.control.result": "channel",
    # device tokens
    "device.token.create": "admin",
    "device.token.list": "admin",
    "backup.run": "admin",
    "device.token.revoke": "admin",
    "device.pair.create": "admin",
}


def expected_scope(spec: MethodSpec, mode: str) -> str:
    want = SCOPE[spec.name]
    return want if isinstance(want, str) else want[mode]


def _stubbed(reg: Registry) -> Registry:
    """The registry with every handler replaced by one that only says it ran (nothing of the gateway happens)."""
    router = Router("stubbed")
    for spec in reg:
        router.methods[spec.name] = dataclasses.replace(spec, handler=lambda ctx, params: {"ran": True})
    stub = Registry()
    stub.include(router)
    return stub


DISPATCHER = Dispatcher(_stubbed(registry()))

CASES = [
    pytest.param(spec.name, mode, role, id=f"{spec.name}-{mode}-{role}")
    for spec in registry()
    if spec.name != "connect"  # a socket's first request: it has no connection (nor role) yet
    for mode in sorted(spec.modes)
    for role in ROLE_SCOPES
]


def test_the_roles_are_the_issue_s() -> None:
    assert {role: set(scopes) for role, scopes in roles.ROLES.items()} == ROLE_SCOPES
    assert set(roles.SCOPES) == set().union(*ROLE_SCOPES.values())


def test_every_method_has_an_expected_scope() -> None:
    missing = [spec.name for spec in registry() if spec.name not in SCOPE]
    assert not missing, f"methods without a scope in this test's table (add them, with the scope they need): {missing}"
    for spec in registry():
        for mode in spec.modes:
            assert spec.scope_for(mode) == expected_scope(spec, mode), (spec.name, mode)


@pytest.mark.parametrize(("method", "mode", "role"), CASES)
def test_every_method_with_every_role(method: str, mode: str, role: str) -> None:
    spec = registry().get(method)
    assert spec is not None
    scope = expected_scope(spec, mode)
    conn = Connection("conn-1", mode, 0, client_id="c", node_id="n", channel="test", account_id="a")
    conn.extra["role"] = role
    frame = {"type": "req", "id": "1", "method": method, "params": {}}
    response = DISPATCHER.dispatch(Any, "conn-1", frame, conn=conn).response  # type: ignore[arg-type]
    assert response is not None
    if scope in ROLE_SCOPES[role]:
        refusal = response.get("error", {}).get("message", "")
        assert "needs scope" not in refusal, response
        assert response["ok"] or response["error"]["code"] == 400, response  # ran, or its params were checked
    else:
        assert response == {
            "type": "res",
            "id": "1",
            "ok": False,
            "error": {"code": 403, "message": f"Method {method} needs scope {scope}; this device's role is {role}"},
        }


def test_a_connection_without_a_role_is_admin() -> None:
    assert roles.role_of({}) == "admin"
    assert roles.role_of({"role": "viewer"}) == "viewer"
    conn = Connection("conn-1", "client", 0)
    frame = {"type": "req", "id": "1", "method": "installs.revoke", "params": {}}
    response = DISPATCHER.dispatch(Any, "conn-1", frame, conn=conn).response  # type: ignore[arg-type]
    assert response is not None and "needs scope" not in str(response)


def test_an_unknown_role_may_do_nothing() -> None:
    conn = Connection("conn-1", "client", 0, extra={"role": "superuser"})
    frame = {"type": "req", "id": "1", "method": "sessions.list", "params": {}}
    response = DISPATCHER.dispatch(Any, "conn-1", frame, conn=conn).response  # type: ignore[arg-type]
    assert response is not None
    assert response["error"] == {
        "code": 403,
        "message": "Method sessions.list needs scope read; this device's role is superuser",
    }


def test_the_scope_is_checked_after_the_mode_and_before_the_params() -> None:
    # a viewer's node-mode socket calling a client method gets the mode's refusal, not the scope's
    conn = Connection("conn-1", "node", 0, node_id="n", extra={"role": "viewer"})
    frame = {"type": "req", "id": "1", "method": "config.set", "params": {}}
    response = DISPATCHER.dispatch(Any, "conn-1", frame, conn=conn).response  # type: ignore[arg-type]
    assert response is not None and response["error"]["message"].startswith("Method config.set not allowed for mode")
    # params that would be refused are not read before the scope is
    conn = Connection("conn-1", "client", 0, extra={"role": "viewer"})
    frame = {"type": "req", "id": "1", "method": "config.set", "params": "not an object"}
    response = DISPATCHER.dispatch(Any, "conn-1", frame, conn=conn).response  # type: ignore[arg-type]
    assert response is not None and response["error"]["code"] == 403


def test_a_method_cannot_be_registered_without_a_scope_for_each_mode() -> None:
    router = Router("x")
    with pytest.raises(TypeError):
        router.method("x.open", modes=frozenset({"client"}))  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="unknown scope"):
        router.method("x.odd", modes=frozenset({"client"}), scope="everything")
    with pytest.raises(ValueError, match="every mode"):
        router.method("x.half", modes=frozenset({"client", "node"}), scope={"client": "read"})
    router.method("x.both", modes=frozenset({"client", "node"}), scope={"client": "operate", "node": "node"})(
        lambda ctx, params: None
    )
    assert router.methods["x.both"].scope_text == "operate (client), node (node)"
