"""The parts of the xeno dialect that no socket shows deterministically: the pacing of partial streams, what a
gateway that is not local does with attachment paths, and which sockets count as this machine's."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from orbital.dialects import xeno
from orbital.runtime import gateway
from orbital.settings import Settings
from orbital.store.connections import Connection
from orbital.store.subscriptions import Subscription


def services(config: dict[str, Any] | None = None, **settings: Any) -> Any:
    return SimpleNamespace(
        settings=Settings(**settings), config=SimpleNamespace(effective=lambda: config or {}), now_ms=lambda: 0
    )


def subscription(kind: str = "query") -> Subscription:
    return Subscription("run-1", "conn-1", "xeno", "agent:main:main", {"kind": kind, "requestId": "r1"})


def partial(content: str) -> dict[str, Any]:
    params = {"requestId": "r1", "content": content, "isPartial": True}
    return {"jsonrpc": "2.0", "method": "gateway.stream", "params": params}


def test_partials_are_cumulative_and_at_most_every_half_second() -> None:
    sub = subscription()
    assert xeno._partial(sub, "a", 10.0) == [partial("a")]  # the first piece at once
    assert xeno._partial(sub, "b", 10.2) == []
    assert xeno._partial(sub, "c", 10.49) == []
    assert xeno._partial(sub, "d", 10.5) == [partial("abcd")]  # everything so far
    xeno._restart_partials(sub)  # the model's next message (after tool calls) starts from nothing
    assert xeno._partial(sub, "x", 10.6) == [partial("x")]


def test_partials_are_off_unless_configured() -> None:
    delta = {"runId": "run-1", "state": "delta", "text": "hello"}
    assert xeno.encode(services(), subscription(), delta) == []
    assert xeno.encode(services({"xeno": {"partials": "yes"}}), subscription(), delta) == []
    assert xeno.encode(services({"xeno": {"partials": True}}), subscription(), delta) == [partial("hello")]
    assert xeno.encode(services({"xeno": {"partials": True}}), subscription("heartbeat"), delta) == []


def test_the_subscription_scratch_is_never_stored() -> None:
    sub = subscription()
    xeno._partial(sub, "secret text", 1.0)
    assert "scratch" not in sub.to_data() and "secret text" not in repr(sub.to_data())


def test_a_gateway_that_is_not_local_does_not_read_paths(tmp_path: Path) -> None:
    picture = tmp_path / "dot.png"
    picture.write_bytes(b"\x89PNG\r\n\x1a\n")
    conn = Connection("conn-1", "client", 0, dialect="xeno", extra={"bearer": True, "local": True})
    attachments = [{"type": "image", "path": str(picture)}, {"type": "voice", "path": "/nowhere/v.ogg"}]
    for where in (services(local=False), services(local=True, auth_token="t")):
        if where.settings.local:  # a local gateway with a token: a socket not known to be on this machine
            conn = Connection("conn-2", "client", 0, dialect="xeno", extra={"bearer": True})
        media = xeno._media(where, conn, attachments)
        assert [m["type"] for m in media] == ["image", "audio"]
        assert all("data" not in m and "cannot read" in m["error"] for m in media)
        assert media[0]["filename"] == "dot.png" and media[0]["mimeType"] == "image/png"


def test_a_local_socket_reads_paths(tmp_path: Path) -> None:
    picture = tmp_path / "dot"
    picture.write_bytes(b"\x89PNG\r\n\x1a\nrest")
    conn = Connection("conn-1", "client", 0, dialect="xeno")
    (entry,) = xeno._media(services(local=True), conn, [{"type": "sticker", "path": str(picture)}])
    data = "iVBORw0KGgpyZXN0"  # the file's bytes
    assert entry == {"type": "image", "filename": "dot", "mimeType": "image/png", "size": 12, "data": data}


def test_which_upgrades_come_from_this_machine() -> None:
    def event(source: str, **headers: str) -> dict[str, Any]:
        return {"requestContext": {"identity": {"sourceIp": source}}, "headers": headers}

    assert gateway._on_this_machine(event("unix"))
    assert gateway._on_this_machine(event("127.0.0.1", host="127.0.0.1:8765"))
    assert gateway._on_this_machine(event("::1"))
    assert not gateway._on_this_machine(event("203.0.113.7"))
    assert not gateway._on_this_machine(event("127.0.0.1", **{"X-Forwarded-For": "203.0.113.7"}))
    assert not gateway._on_this_machine(event("127.0.0.1", Via="1.1 tunnel"))
    assert not gateway._on_this_machine({"requestContext": {}})


def test_a_first_frame_of_several_lines_is_detected_by_its_first() -> None:
    body = '\n{"jsonrpc":"2.0","id":1,"method":"gateway.initialize"}\n{"jsonrpc":"2.0","id":2,"method":"x"}\n'
    assert gateway._first_line(body) == {"jsonrpc": "2.0", "id": 1, "method": "gateway.initialize"}
    assert gateway._first_line("not json\n{}") is None
