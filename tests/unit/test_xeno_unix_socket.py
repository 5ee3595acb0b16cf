"""`orbital.xeno.unix_socket`: the rules of xeno's socket that the local gateway and the bridge share."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest
from orbital.xeno.unix_socket import (
    XenoSocketInUseError,
    address,
    claim,
    listener,
    peer_uid,
    probe,
    remove,
    same_user,
    socket_path,
)


def test_a_long_path_is_bound_probed_claimed_and_removed(tmp_path: Path) -> None:
    """Over AF_UNIX's ~108 bytes the socket is reached through its directory's descriptor."""
    path = socket_path(tmp_path / ("h" * 120))
    assert len(str(path)) > 108
    bound = listener(path)
    try:
        assert stat.S_ISSOCK(path.lstat().st_mode)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        assert not probe(path)  # bound, not listening: nobody answers
        bound.listen()
        assert probe(path)
        with pytest.raises(XenoSocketInUseError, match="already in use"):
            claim(path)
        with address(path) as where, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(where)
    finally:
        bound.close()
    claim(path)  # stale now: removed
    assert not path.exists()
    listener(path).close()
    remove(path)
    assert not path.exists()


def test_only_a_socket_is_removed(tmp_path: Path) -> None:
    path = socket_path(tmp_path)
    path.parent.mkdir()
    path.write_text("not a socket")
    remove(path)
    assert path.read_text() == "not a socket"


def test_a_peer_is_known_by_its_user() -> None:
    """`SO_PEERCRED` of a connected pair: this process's user; any other user id is not the socket's own."""
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        assert peer_uid(left) == os.getuid()
        assert same_user(left)
        assert not same_user(left, uid=os.getuid() + 1)
        assert not same_user(None)
    finally:
        left.close()
        right.close()
