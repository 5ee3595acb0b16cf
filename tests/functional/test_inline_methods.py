"""Methods the local gateway answers on its event loop must never push to a socket (the management API would be
called from the loop it runs on) and must not be deferred."""

from __future__ import annotations

from typing import Any

from orbital.methods import registry


class NoPushing:
    def post(self, connection_id: str, frame: Any) -> bool:
        raise AssertionError(f"an inline method pushed to {connection_id}: {frame}")

    def close(self, connection_id: str, code: int = 1000, reason: str = "", *, notify: bool = True) -> None:
        raise AssertionError(f"an inline method closed {connection_id}")


PARAMS: dict[str, dict[str, Any]] = {"cron.preview": {"schedule": {"kind": "every", "everyMs": 60_000}}}
"""Params for the inline methods that need some to answer."""


def test_the_inline_methods_answer_without_pushing(connect: Any, services: Any, sender: Any) -> None:
    inline = registry().event_loop_methods()
    assert "config.get" in inline
    # both may wait on a remote MCP server (ADR 0045): a worker thread answers them, never the event loop
    assert "tools.list" not in inline
    assert "tool.invoke" not in registry().event_loop_methods(posts_in_process=True)
    connect("node", "n1")  # a node, so tools.list has something of its own to list
    rpc = connect("client", "c1")
    services._sender = NoPushing()
    for name in sorted(inline):
        spec = registry().get(name)
        assert spec is not None and not spec.deferred
        rpc.call(name, PARAMS.get(name, {}))
