"""xeno's Unix socket on disk: `<home>/.xeno/gateway.sock`, its owner's alone (0600, in a 0700 directory), with
xeno's check before serving (an existing socket file is probed: a live one means another process serves it, refuse
to start; a stale one is removed) and its removal at stop. Used by the local gateway (`orbital.local.xeno_socket`)
and by `orbital xeno-bridge` (`orbital.xeno.bridge`).

Only the socket's own user may use it: beside the file's modes, each accepted connection's peer (`SO_PEERCRED`) must
be the serving process's user (`same_user`), else it is closed at once (root passes the modes, not this check). On a
platform that cannot tell a peer's user, nobody is let in.

AF_UNIX paths are limited to about 108 bytes: a longer one is reached through its directory's descriptor
(`/proc/self/fd/N/gateway.sock`), where there is a /proc.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SOCKET_NAME = "gateway.sock"
PROBE_TIMEOUT_S = 0.25
"""How long xeno's probe waits for a socket file to answer before it counts as stale."""
_SHORT_PATH = 100


class XenoSocketInUseError(RuntimeError):
    pass


def socket_path(home: Path) -> Path:
    return home / ".xeno" / SOCKET_NAME


@contextlib.contextmanager
def address(path: Path) -> Iterator[str]:
    """An address `bind`/`connect` accept for `path` while the block runs (a long path goes through its directory's
    descriptor, closed afterwards)."""
    if len(os.fsencode(path)) < _SHORT_PATH or not Path("/proc/self/fd").is_dir():
        yield str(path)
        return
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


def probe(path: Path) -> bool:
    """Whether something answers at `path` (xeno's check before it serves)."""
    try:
        with address(path) as where, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe_socket:
            probe_socket.settimeout(PROBE_TIMEOUT_S)
            probe_socket.connect(where)
            return True
    except OSError:
        return False


def claim(path: Path) -> None:
    """Before serving at `path`: refuse a socket another process serves; remove a stale one."""
    if not (path.exists() or path.is_symlink()):
        return
    if probe(path):
        raise XenoSocketInUseError(f"Gateway RPC socket already in use at {path}. Is another serve process running?")
    path.unlink(missing_ok=True)


def listener(path: Path) -> socket.socket:
    """A socket bound at `path`, ready for `asyncio.start_unix_server(sock=...)`: its directory made (0700), the
    path claimed (`claim`), the socket file made its owner's alone (0600)."""
    directory = path.parent
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    directory.chmod(0o700)
    claim(path)
    bound = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with address(path) as where:
            bound.bind(where)
        path.chmod(0o600)
    except BaseException:
        bound.close()
        raise
    return bound


def peer_uid(sock: Any) -> int | None:
    """The user id of the process at the other end of a connected Unix socket (`SO_PEERCRED`, Linux), None where the
    platform cannot tell."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return None
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i"))
    except OSError:
        return None
    _pid, uid, _gid = struct.unpack("3i", raw)
    return uid


def same_user(sock: Any, uid: int | None = None) -> bool:
    """Whether the peer of `sock` (a socket, or the transport's socket of an asyncio stream) runs as `uid` (by default
    this process's user)."""
    if sock is None:
        return False
    found = peer_uid(sock)
    return found is not None and found == (os.getuid() if uid is None else uid)


def remove(path: Path) -> None:
    """Remove the socket file at `path` (at stop), if a socket is what is there."""
    with contextlib.suppress(OSError):
        if stat.S_ISSOCK(path.lstat().st_mode):
            path.unlink()
