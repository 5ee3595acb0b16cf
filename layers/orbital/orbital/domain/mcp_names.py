"""The names under which MCP servers' tools are offered to the model (ADR 0045).

A remote server's tool is `mcp__{server}__{tool}`; a tool of a server a node hosts is announced by the node as
`mcp__{server}__{tool}` and offered as `{nodeId}__mcp__{server}__{tool}`, as any node tool. Server names match
`SERVER_NAME` (letters, digits and dashes: no `_`, so `__` splits a name unambiguously).

Providers accept tool names of at most 64 characters made of `[A-Za-z0-9_-]`. A server's tool name keeps its own
spelling when it fits; otherwise every other character becomes `_`, and a name that is still too long, or that two
of the server's tools would share, is cut and ends in `_` and the first 6 hex digits of the SHA-256 of the server's
own tool name. The same tool list gives the same names on every gateway and after every restart.

Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

PREFIX = "mcp__"
SEPARATOR = "__"
MAX_NAME = 64
"""The longest tool name providers accept."""
SERVER_NAME = re.compile(r"^[A-Za-z0-9-]{1,32}$")
SERVER_NAME_TEXT = "1 to 32 letters, digits and dashes"
HASH_HEX = 6
_OUTSIDE = re.compile(r"[^A-Za-z0-9_-]")
_MIN_ROOM = HASH_HEX + 2
"""The least room a tool's part of the name needs: one character, `_` and the hash."""


def valid_server_name(name: str) -> bool:
    return isinstance(name, str) and SERVER_NAME.match(name) is not None


def tool_prefix(server: str) -> str:
    """`mcp__{server}__`: what every exposed name of the server starts with."""
    return f"{PREFIX}{server}{SEPARATOR}"


def sanitize(tool: str) -> str:
    """`tool` with every character outside `[A-Za-z0-9_-]` replaced by `_`."""
    return _OUTSIDE.sub("_", tool)


def _digest(tool: str, hex_chars: int = HASH_HEX) -> str:
    return hashlib.sha256(tool.encode("utf-8")).hexdigest()[:hex_chars]


def _hashed(tool: str, room: int, hex_chars: int = HASH_HEX) -> str:
    return sanitize(tool)[: room - hex_chars - 1] + "_" + _digest(tool, hex_chars)


def exposed_names(server: str, tool_names: Iterable[str], budget: int = MAX_NAME) -> dict[str, str]:
    """Each of the server's tools under the name the model sees, `mcp__{server}__{tool}`: {exposed: the server's own
    name}. `budget` is the longest name allowed (64; on a node, 64 minus the node id and its `__`).

    A name that is already valid and fits keeps its spelling; one with other characters has them replaced by `_`;
    one that is too long, or that another tool's name would also become, is cut and ends in `_` + 6 hex of the
    SHA-256 of the tool's own name (longer in the astronomically rare case that this too collides). The result
    depends only on the set of names, not their order. Raises ValueError for a server name that is not valid, or
    when `budget` leaves no room for a tool's name after `mcp__{server}__`."""
    if not valid_server_name(server):
        raise ValueError(f"an MCP server name is {SERVER_NAME_TEXT}, not {server!r}")
    prefix = tool_prefix(server)
    room = budget - len(prefix)
    if room < _MIN_ROOM:
        raise ValueError(
            f"no room for tool names after {prefix!r} within {budget} characters: use a shorter server name"
        )
    originals = sorted({name for name in tool_names if isinstance(name, str)})
    kept = [name for name in originals if sanitize(name) == name and 0 < len(name) <= room]
    taken = set(kept)
    rest = [name for name in originals if name not in taken]
    wanted: dict[str, int] = {}
    for name in rest:
        clean = sanitize(name)
        if 0 < len(clean) <= room:
            wanted[clean] = wanted.get(clean, 0) + 1
    chosen: dict[str, str] = {name: name for name in kept}
    hashed: list[str] = []
    for name in rest:
        clean = sanitize(name)
        if 0 < len(clean) <= room and wanted[clean] == 1 and clean not in taken:
            chosen[clean] = name
            taken.add(clean)
        else:
            hashed.append(name)
    for name in hashed:
        hex_chars = HASH_HEX
        candidate = _hashed(name, room, hex_chars)
        while candidate in taken and hex_chars < 64 and room - hex_chars - 1 > 0:
            hex_chars += 2
            candidate = _hashed(name, room, hex_chars)
        if candidate in taken:  # pragma: no cover - a SHA-256 collision within the server's own tools
            continue
        chosen[candidate] = name
        taken.add(candidate)
    return {prefix + short: chosen[short] for short in sorted(chosen)}


def split(name: str) -> tuple[str, str] | None:
    """`mcp__{server}__{tool}` as (server, the tool's part of the exposed name); None for any other name."""
    if not isinstance(name, str) or not name.startswith(PREFIX):
        return None
    rest = name[len(PREFIX) :]
    server, sep, tool = rest.partition(SEPARATOR)
    if not sep or not tool or not valid_server_name(server):
        return None
    return server, tool
