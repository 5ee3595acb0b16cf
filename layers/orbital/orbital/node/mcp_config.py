"""Which stdio MCP servers a node runs: `orbital node --mcp NAME='command args...'` (repeatable) and `--mcp-config FILE`
(`{"servers": {NAME: {command, args, env, cwd, timeoutMs}}}`, or the `mcpServers` key of the common desktop clients'
files), read before the node starts (`orbital.node.mcp` runs them). Kept apart from the servers' host so that reading
the command line does not load the MCP SDK: every `orbital` command builds this parser.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from orbital.domain import mcp_names

DEFAULT_TIMEOUT_MS = 300_000
MAX_TIMEOUT_MS = 3_600_000
NODE_SECRETS = frozenset({"ORBITAL_TOKEN"})
"""Variables of the node itself that a server's `env` may not name."""
_ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class McpConfigError(ValueError):
    """A server definition the node cannot use (reported before it connects)."""


@dataclass(frozen=True)
class StdioServer:
    """One stdio MCP server the node runs."""

    name: str
    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    timeout_ms: int = DEFAULT_TIMEOUT_MS


def _check_name(name: Any, where: str) -> str:
    if not isinstance(name, str) or not mcp_names.valid_server_name(name):
        raise McpConfigError(f"{where}: a server name is {mcp_names.SERVER_NAME_TEXT}, not {name!r}")
    return name


def parse_flag(value: str) -> StdioServer:
    """`NAME=command args...` (the command line split as a POSIX shell would, without running one)."""
    name, sep, command_line = value.partition("=")
    name = name.strip()
    if not sep:
        raise McpConfigError(f"--mcp {value!r}: expected NAME='command args...'")
    _check_name(name, "--mcp")
    try:
        words = shlex.split(command_line)
    except ValueError as exc:
        raise McpConfigError(f"--mcp {name}: cannot split the command: {exc}") from None
    if not words:
        raise McpConfigError(f"--mcp {name}: the command is empty")
    return StdioServer(name=name, command=words[0], args=tuple(words[1:]))


def expand_env(value: str, environ: Mapping[str, str], where: str) -> str:
    """`${NAME}` in a value replaced by the node's own variable NAME (which must be set, and not the node's token)."""

    def substitute(match: re.Match[str]) -> str:
        var = match.group(1)
        if var in NODE_SECRETS:
            raise McpConfigError(f"{where}: ${{{var}}} is the node's own secret and is never passed to a server")
        if var not in environ:
            raise McpConfigError(f"{where}: ${{{var}}} is not set in the node's environment")
        return environ[var]

    return _ENV_REFERENCE.sub(substitute, value)


def server_from_entry(name: Any, entry: Any, environ: Mapping[str, str], where: str) -> StdioServer:
    """One entry of a config file's `servers` (or `mcpServers`)."""
    label = f"{where}: server {name!r}"
    _check_name(name, where)
    if not isinstance(entry, dict):
        raise McpConfigError(f"{label} must be an object")
    unknown = sorted(set(entry) - {"command", "args", "env", "cwd", "timeoutMs", "type", "disabled"})
    if unknown:
        raise McpConfigError(f"{label}: unknown key(s) {', '.join(unknown)}")
    if entry.get("type", "stdio") != "stdio":
        raise McpConfigError(f"{label}: only stdio servers run on a node (remote servers go in the gateway's config)")
    command = entry.get("command")
    if not isinstance(command, str) or not command.strip():
        raise McpConfigError(f"{label}: command is required")
    args = entry.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise McpConfigError(f"{label}: args must be a list of strings")
    env_in = entry.get("env", {})
    if not isinstance(env_in, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env_in.items()):
        raise McpConfigError(f"{label}: env must map names to strings")
    env = {k: expand_env(v, environ, f"{label} env {k}") for k, v in env_in.items()}
    cwd = entry.get("cwd")
    if cwd is not None and (not isinstance(cwd, str) or not cwd.strip()):
        raise McpConfigError(f"{label}: cwd must be a path")
    timeout = entry.get("timeoutMs", DEFAULT_TIMEOUT_MS)
    if type(timeout) is not int or not 1000 <= timeout <= MAX_TIMEOUT_MS:
        raise McpConfigError(f"{label}: timeoutMs must be a whole number from 1000 to {MAX_TIMEOUT_MS}")
    return StdioServer(name=name, command=command, args=tuple(args), env=env, cwd=cwd, timeout_ms=timeout)


def load_config(path: Path, environ: Mapping[str, str] | None = None) -> list[StdioServer]:
    """The servers of a JSON or YAML file: `{servers: {...}}` or `{mcpServers: {...}}`. Entries with `disabled: true`
    are skipped."""
    source = os.environ if environ is None else environ
    where = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise McpConfigError(f"cannot read {where}: {exc.strerror or exc}") from None
    data = _parse(text, path)
    if not isinstance(data, dict):
        raise McpConfigError(f"{where}: expected an object with `servers` (or `mcpServers`)")
    servers = data.get("servers", data.get("mcpServers"))
    if "servers" in data and "mcpServers" in data:
        raise McpConfigError(f"{where}: give `servers` or `mcpServers`, not both")
    if not isinstance(servers, dict):
        raise McpConfigError(f"{where}: expected an object with `servers` (or `mcpServers`)")
    return [
        server_from_entry(name, entry, source, where)
        for name, entry in servers.items()
        if not (isinstance(entry, dict) and entry.get("disabled") is True)
    ]


def _parse(text: str, path: Path) -> Any:
    if path.suffix.lower() in (".yaml", ".yml"):
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise McpConfigError(f"{path}: not valid YAML: {exc}") from None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise McpConfigError(f"{path}: not valid JSON: {exc}") from None


def combine(*groups: list[StdioServer]) -> list[StdioServer]:
    """The servers of all sources; a name given twice is an error."""
    out: dict[str, StdioServer] = {}
    for group in groups:
        for server in group:
            if server.name in out:
                raise McpConfigError(f"MCP server {server.name!r} is defined twice")
            out[server.name] = server
    return list(out.values())
