"""Who owns the other end of a loopback connection, read from `/proc/net/tcp{,6}` text (the real tables in
tests/e2e/test_frontdoor.py, with a client run as another user)."""

from __future__ import annotations

import ipaddress
import socket
import sys
from pathlib import Path

import pytest
from orbital.local import peer_uid

# the gateway listens on 127.0.0.1:8765 (223D); a client of uid 1000 connected from 127.0.0.1:50000 (C350), and the
# gateway's accepted socket (uid 0) lists the same pair the other way round
TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:223D 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 101 1 0 100 0 0 10 0
   1: 0100007F:223D 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 102 1 0 20 4 30 10 -1
   2: 0100007F:C350 0100007F:223D 01 00000000:00000000 00:00000000 00000000  1000        0 103 1 0 20 4 30 10 -1
   3: 0100007F:C351 0100007F:223E 01 00000000:00000000 00:00000000 00000000  1002        0 104 1 0 20 4 30 10 -1
"""

# IPv6: ::1 is 00000000000000000000000001000000 on a little-endian machine; ::ffff:127.0.0.1 maps to IPv4
TCP6 = """\
  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when
   0: 00000000000000000000000001000000:C352 00000000000000000000000001000000:223D 01 0:0 00:0 0  1001  0 105
   1: 0000000000000000FFFF00000100007F:C353 0000000000000000FFFF00000100007F:223D 01 0:0 00:0 0  1003  0 106
"""

LITTLE = sys.byteorder == "little"


def _addr(host: str, port: int) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]:
    return ipaddress.ip_address(host), port


@pytest.mark.skipif(not LITTLE, reason="the sample tables are a little-endian machine's")
def test_the_peer_is_the_line_whose_local_end_is_the_peer_and_remote_end_is_us() -> None:
    assert peer_uid.owner_in(TCP, _addr("127.0.0.1", 50000), _addr("127.0.0.1", 8765)) == 1000
    # the gateway's own accepted socket has the ends the other way round: never taken for the peer
    assert peer_uid.owner_in(TCP, _addr("127.0.0.1", 8765), _addr("127.0.0.1", 50000)) == 0
    assert peer_uid.owner_in(TCP, _addr("127.0.0.1", 50001), _addr("127.0.0.1", 8765)) is None
    assert peer_uid.owner_in(TCP, _addr("127.0.0.2", 50000), _addr("127.0.0.1", 8765)) is None


@pytest.mark.skipif(not LITTLE, reason="the sample tables are a little-endian machine's")
def test_ipv6_and_ipv4_mapped_addresses() -> None:
    assert peer_uid.owner_in(TCP6, _addr("::1", 50002), _addr("::1", 8765)) == 1001
    assert peer_uid.owner_in(TCP6, _addr("127.0.0.1", 50003), _addr("127.0.0.1", 8765)) == 1003


@pytest.mark.skipif(not LITTLE, reason="the sample tables are a little-endian machine's")
def test_owner_reads_the_tables_and_normalises_addresses(tmp_path: Path) -> None:
    (tmp_path / "tcp").write_text(TCP)
    (tmp_path / "tcp6").write_text(TCP6)
    tables = (tmp_path / "tcp", tmp_path / "tcp6")
    assert peer_uid.owner(("127.0.0.1", 50000), ("127.0.0.1", 8765), tables) == 1000
    assert peer_uid.owner(("::ffff:127.0.0.1", 50003), ("127.0.0.1", 8765), tables) == 1003
    assert peer_uid.owner(("[::1]", 50002), ("::1", 8765), tables) == 1001
    assert peer_uid.owner(("not an address", 1), ("127.0.0.1", 8765), tables) is None
    assert peer_uid.owner(("127.0.0.1", 50000), ("127.0.0.1", 8765), (tmp_path / "missing",)) is None


def test_garbage_lines_are_skipped() -> None:
    text = "header\n0: zz:zz yy:yy 01 x x x notanumber\nshort line\n"
    assert peer_uid.owner_in(text, _addr("127.0.0.1", 1), _addr("127.0.0.1", 2)) is None


def test_without_the_tables_the_platform_cannot_tell(tmp_path: Path) -> None:
    assert peer_uid.unsupported((tmp_path / "tcp", tmp_path / "tcp6")) is not None


def test_a_real_connection_of_this_process_is_its_own() -> None:
    assert peer_uid.unsupported() is None  # Linux with /proc: the same-user mode's platform
    with socket.create_server(("127.0.0.1", 0)) as server:
        ours = server.getsockname()
        with socket.create_connection(ours) as client:
            accepted, peer = server.accept()
            with accepted:
                assert peer == client.getsockname()
                import os

                assert peer_uid.owner(peer, ours) == os.getuid()


def test_the_kernels_answer_and_the_tables_agree_on_another_users_socket() -> None:
    """The one-socket question to the kernel and the tables name the same owner: this user, and `nobody` for a
    connection made by a process running as `nobody`; a socket that does not exist has none."""
    import os
    import subprocess

    with socket.create_server(("127.0.0.1", 0)) as server:
        ours = server.getsockname()
        with socket.create_connection(ours):
            accepted, peer = server.accept()
            with accepted:
                found = peer_uid._normal(*peer), peer_uid._normal(*ours)
                assert found[0] is not None and found[1] is not None
                assert peer_uid._asked(found[0], found[1]) == os.getuid()
                assert peer_uid.owner(peer, ours, tables=tuple(peer_uid.TABLES)) == os.getuid()  # the tables only
        script = f"import socket, sys; c = socket.create_connection(('127.0.0.1', {ours[1]})); sys.stdin.read()"
        child = subprocess.Popen(["/usr/bin/python3", "-c", script], user=65534, stdin=subprocess.PIPE)
        try:
            server.settimeout(30)
            accepted, peer = server.accept()
            with accepted:
                assert peer_uid.owner(peer, ours) == 65534
                assert peer_uid.owner(peer, ours, tables=tuple(peer_uid.TABLES)) == 65534
        finally:
            assert child.stdin is not None
            child.stdin.close()
            child.wait(timeout=30)
        assert peer_uid.owner(("127.0.0.1", 1), ours) is None


def test_same_user_mode_refuses_to_start_where_the_platform_cannot_tell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orbital.local.server import GatewayOptions, LocalGateway, StartupError

    root = Path(__file__).resolve().parents[2]
    monkeypatch.setattr(peer_uid, "TABLES", (tmp_path / "tcp", tmp_path / "tcp6"))
    gateway = LocalGateway(GatewayOptions(port=0, data_dir=tmp_path / "data", project=root, auth="same-user"))
    with pytest.raises(StartupError, match=r"AUTH=same-user cannot start here: .*/proc/net/tcp"):
        gateway.check()
    assert not (tmp_path / "data").exists()
    # with a token the same platform is fine: nothing needs telling users apart
    LocalGateway(GatewayOptions(port=0, data_dir=tmp_path / "data", project=root, auth="token")).check()
