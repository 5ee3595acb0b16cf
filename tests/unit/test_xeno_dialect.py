"""The parts of the xeno dialect that no socket shows deterministically: the pacing of partial streams, which
attachment paths a gateway reads and as what, and which sockets count as this machine's."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from orbital.dialects import xeno
from orbital.ports.capabilities import ON_AWS, on_own_machine
from orbital.runtime import gateway
from orbital.settings import Settings
from orbital.store.connections import Connection
from orbital.store.subscriptions import Subscription


def services(config: dict[str, Any] | None = None, *, local: bool = False, **settings: Any) -> Any:
    """Services as the local gateway's root (`local`) or the AWS root gives them."""
    return SimpleNamespace(
        settings=Settings(local=local, **settings),
        capabilities=on_own_machine(None) if local else ON_AWS,
        config=SimpleNamespace(effective=lambda: config or {}),
        now_ms=lambda: 0,
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


def test_a_path_is_refused_unless_the_socket_is_the_local_gateways_unix_socket(tmp_path: Path) -> None:
    picture = tmp_path / "dot.png"
    picture.write_bytes(b"\x89PNG\r\n\x1a\n")
    on_unix = Connection("conn-1", "client", 0, dialect="xeno", extra={"bearer": True, "local": True})
    over_ws = Connection("conn-2", "client", 0, dialect="xeno", extra={"bearer": True})
    attachments = [{"type": "image", "path": str(picture)}]
    for where, conn in (
        (services(local=False), on_unix),  # a deployment never reads a path
        (services(local=True, auth_token="t"), over_ws),  # a local gateway: only for its Unix socket
        (services(local=True), over_ws),  # with or without a token
    ):
        with pytest.raises(xeno._UnreadableError) as refused:
            xeno._media(where, conn, attachments)
        assert str(picture) in str(refused.value) and "Unix socket" in str(refused.value)


def test_a_local_socket_reads_paths(tmp_path: Path) -> None:
    picture = tmp_path / "dot"
    picture.write_bytes(b"\x89PNG\r\n\x1a\nrest")
    conn = Connection("conn-1", "client", 0, dialect="xeno", extra={"local": True})
    (entry,) = xeno._media(services(local=True), conn, [{"type": "sticker", "path": str(picture)}])
    data = "iVBORw0KGgpyZXN0"  # the file's bytes
    assert entry == {"type": "image", "filename": "dot", "mimeType": "image/png", "size": 12, "data": data}


def test_the_type_stored_is_what_the_bytes_are(tmp_path: Path) -> None:
    conn = Connection("conn-1", "client", 0, dialect="xeno", extra={"local": True})
    text = tmp_path / "notes"
    text.write_bytes(b"root:x:0:0")
    gif = tmp_path / "said-png.png"
    gif.write_bytes(b"GIF89a....")
    attachments = [
        {"type": "image", "path": str(text), "mimeType": "image/png"},
        {"type": "image", "path": str(gif), "mimeType": "image/png"},
    ]
    stored, real = xeno._media(services(local=True), conn, attachments)
    assert (stored["type"], stored["mimeType"]) == ("document", "application/octet-stream")
    assert (real["type"], real["mimeType"]) == ("image", "image/gif")


def test_a_path_into_the_data_directory_is_refused(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "token").write_text("secret")
    (tmp_path / "link").symlink_to(data_dir / "token")
    conn = Connection("conn-1", "client", 0, dialect="xeno", extra={"local": True})
    where = services(local=True, data_dir=str(data_dir))
    for path in (data_dir / "token", tmp_path / "link", tmp_path / "data" / ".." / "data" / "token"):
        with pytest.raises(xeno._UnreadableError, match="data directory"):
            xeno._media(where, conn, [{"type": "document", "path": str(path)}])


def test_which_upgrades_come_from_this_machine() -> None:
    def event(source: str, **headers: str) -> dict[str, Any]:
        return {"requestContext": {"identity": {"sourceIp": source}}, "headers": headers}

    assert gateway._on_this_machine(event("unix"))  # the Unix socket: its peers are the gateway's user
    assert not gateway._on_this_machine(event("127.0.0.1", host="127.0.0.1:8765"))  # any user of the machine
    assert not gateway._on_this_machine(event("::1"))
    assert not gateway._on_this_machine(event("203.0.113.7"))
    assert not gateway._on_this_machine(event("unix", **{"X-Forwarded-For": "203.0.113.7"}))
    assert not gateway._on_this_machine({"requestContext": {}})


def test_a_first_frame_of_several_lines_is_detected_by_its_first() -> None:
    body = '\n{"jsonrpc":"2.0","id":1,"method":"gateway.initialize"}\n{"jsonrpc":"2.0","id":2,"method":"x"}\n'
    assert gateway._first_line(body) == {"jsonrpc": "2.0", "id": 1, "method": "gateway.initialize"}
    assert gateway._first_line("not json\n{}") is None
