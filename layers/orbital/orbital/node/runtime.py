"""The tool list's capabilities and the `nodeRuntime` sent in `connect` (spec §1.3, §17.2)."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Mapping
from typing import Any

TOOL_CAPABILITIES: dict[str, list[str]] = {
    "Bash": ["shell.exec"],
    "Process": ["shell.exec"],
    "Read": ["filesystem.read"],
    "Write": ["filesystem.write"],
    "Edit": ["filesystem.edit", "filesystem.read", "filesystem.write"],
    "Glob": ["filesystem.list"],
    "Grep": ["filesystem.read", "text.search"],
}
HIDDEN_ENV = frozenset({"ORBITAL_TOKEN"})
"""Variables of the node itself that commands never see (and that hostEnv does not list)."""
EXECUTION_BASELINE = ("filesystem.list", "filesystem.read", "filesystem.write", "shell.exec")
MCP_TOOL_CAPABILITIES = ["shell.exec"]
"""What a tool of an MCP server on the node declares: the server is a program of its own on this machine (the
protocol's capability list has nothing closer)."""


def host_os(platform: str | None = None) -> str:
    """`linux`, `macos`, `windows`, or the platform name without its version digits."""
    name = (platform or sys.platform).lower()
    if name.startswith("linux"):
        return "linux"
    if name == "darwin":
        return "macos"
    if name in ("win32", "cygwin", "msys"):
        return "windows"
    return re.sub(r"\d+$", "", name) or name


def env_names(environ: Mapping[str, str] | None = None) -> list[str]:
    """Sorted unique environment variable names. Values are never read."""
    source = os.environ if environ is None else environ
    return sorted({name.strip() for name in source if name.strip() and name not in HIDDEN_ENV})


def node_runtime(
    tool_names: Iterable[str],
    *,
    environ: Mapping[str, str] | None = None,
    platform: str | None = None,
    mcp_tool_names: Iterable[str] = (),
) -> dict[str, Any]:
    names = list(tool_names)
    tool_caps = {name: sorted(set(TOOL_CAPABILITIES[name])) for name in names}
    tool_caps.update({name: list(MCP_TOOL_CAPABILITIES) for name in mcp_tool_names})
    host_caps: set[str] = set(EXECUTION_BASELINE)
    for caps in tool_caps.values():
        host_caps.update(caps)
    runtime: dict[str, Any] = {
        "hostRole": "execution",
        "hostCapabilities": sorted(host_caps),
        "toolCapabilities": tool_caps,
        "hostOs": host_os(platform),
    }
    names_in_env = env_names(environ)
    if names_in_env:
        runtime["hostEnv"] = names_in_env
    return runtime
