"""`orbital node`: run this machine as a tool host for an Orbital gateway."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import socket
import sys
from pathlib import Path
from typing import Any

from orbital.node.logs import configure_logging, default_log_file, log
from orbital.node.mcp_config import StdioServer, combine, load_config, parse_flag
from orbital.node.options import NodeOptions
from orbital.protocol import device_token, local_token

DEFAULT_URL = local_token.DEFAULT_URL
DEFAULT_KEEPALIVE = 240.0


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the `node` subcommand on an argparse subparsers object."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "node",
        help="run this machine as a tool host (Bash, Read, Write, ... for the agent)",
        description=(
            "Connect to an Orbital gateway in node mode and run its tool calls on this machine. "
            "Reconnects automatically; Ctrl-C stops it and the commands it started. With --pair CODE (a code "
            "from `orbital devices add --role node` or the console's Devices view) it first trades the code for a "
            "token of its own, saved 0600 in the config directory for the URL, which later starts find by "
            "themselves."
        ),
    )
    local_token.add_arguments(parser)
    parser.add_argument(
        "--pair",
        default=None,
        metavar="CODE",
        help="trade this one-time pairing code for a device token (saved for --url), then run",
    )
    parser.add_argument(
        "--http-url",
        default=None,
        metavar="URL",
        help="with --pair: the gateway's HTTP API when its host differs from --url's (a stack on AWS)",
    )
    parser.add_argument("--id", dest="node_id", default=None, metavar="NAME", help="node id (default node-{hostname})")
    parser.add_argument(
        "--workspace", default=None, metavar="DIR", help="directory for relative paths and commands (default: cwd)"
    )
    parser.add_argument(
        "--log-file",
        default=None,
        metavar="PATH",
        help=f"JSON-lines log, rotated at 10 MB x 5 (default {default_log_file()})",
    )
    parser.add_argument(
        "--keepalive",
        type=float,
        default=DEFAULT_KEEPALIVE,
        metavar="SECONDS",
        help=f"send tools.list this often to keep the socket alive (default {DEFAULT_KEEPALIVE:g}; 0 disables)",
    )
    parser.add_argument(
        "--binary-frames",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="send transfer chunks as binary frames (default: on for ws:// to loopback, off otherwise, e.g. AWS)",
    )
    parser.add_argument(
        "--mcp",
        action="append",
        default=[],
        metavar="NAME='COMMAND ARGS...'",
        help=(
            "run a stdio MCP server on this machine and offer its tools as this node's (mcp__NAME__TOOL); "
            "repeatable. NAME: letters, digits and dashes"
        ),
    )
    parser.add_argument(
        "--mcp-config",
        default=None,
        metavar="FILE",
        help=(
            "JSON or YAML file of stdio MCP servers: {servers: {NAME: {command, args, env, cwd, timeoutMs}}} "
            "(a desktop client's mcpServers key is read too); env values may name the node's own variables as ${VAR}"
        ),
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr and in the log file")
    parser.set_defaults(func=run)
    return parser


def pair(args: argparse.Namespace) -> device_token.Paired:
    """`--pair CODE`: trade the code for a device token and save it for the URL. ValueError when that fails."""
    gateway_url = local_token.url(getattr(args, "url", None))
    try:
        paired = device_token.exchange(args.pair, url=gateway_url, http_url=getattr(args, "http_url", None) or None)
        path = device_token.save(paired)
    except (device_token.PairingFailedError, device_token.DeviceFileError) as exc:
        raise ValueError(f"pairing failed: {exc}") from None
    if paired.role != "node":
        print(
            f"orbital node: warning: the code was for a {paired.role} device, not a node", file=sys.stderr, flush=True
        )
    print(
        f"Paired with {local_token.redact_url(paired.url)} as a {paired.role} device (token {paired.token_id or '?'}); "
        f"the token is saved in {path}.",
        flush=True,
    )
    return paired


def _options(args: argparse.Namespace, paired: device_token.Paired | None = None) -> NodeOptions:
    token: str | None
    if paired is not None:
        url, token = paired.url, paired.token
        args.url = url
    else:
        try:
            url, token = local_token.from_arguments("orbital node", args, kinds=("node", "client"))
        except local_token.TokenFileError as exc:
            raise ValueError(str(exc)) from None
    saved = device_token.find(url, "node") or {}
    bound = paired.node_id if paired is not None else (saved.get("nodeId") if saved.get("token") == token else None)
    node_id = (
        (args.node_id or "").strip() or (bound if isinstance(bound, str) else "") or f"node-{socket.gethostname()}"
    )
    workspace = Path(args.workspace).expanduser() if args.workspace else Path.cwd()
    workspace = workspace.resolve()
    log_file = Path(args.log_file).expanduser() if args.log_file else default_log_file()
    if not workspace.is_dir():
        raise ValueError(f"workspace is not a directory: {workspace}")
    if args.keepalive < 0:
        raise ValueError("--keepalive must be >= 0")
    mcp_servers = mcp_servers_of(args)
    return NodeOptions(
        url=url,
        node_id=node_id,
        workspace=workspace,
        token=token,
        log_file=log_file.resolve(),
        keepalive=float(args.keepalive),
        binary_frames=args.binary_frames,
        mcp_servers=mcp_servers,
    )


def mcp_servers_of(args: argparse.Namespace) -> list[StdioServer]:
    """The MCP servers of `--mcp` and `--mcp-config` (McpConfigError, a ValueError, for a bad one)."""
    flags = [parse_flag(value) for value in getattr(args, "mcp", None) or []]
    config = getattr(args, "mcp_config", None)
    from_file = load_config(Path(config).expanduser()) if config else []
    return combine(from_file, flags)


def run(args: argparse.Namespace) -> int:
    """Run the node until Ctrl-C/SIGTERM (exit 0) or until the gateway refuses it for good (exit 2)."""
    # lazy: `orbital node` only; the node's agent loads the MCP SDK (0.4 s), and every `orbital` command builds this
    # module's parser
    from orbital.node.agent import NodeAgent

    try:
        paired = pair(args) if getattr(args, "pair", None) else None
        options = _options(args, paired)
    except ValueError as exc:
        print(f"orbital node: {exc}", file=sys.stderr)
        return 2
    undo_logging = configure_logging(options.log_file, verbose=bool(getattr(args, "verbose", False)))
    try:
        agent = NodeAgent(options)
        log.info(
            "node %s starting (gateway %s, workspace %s)",
            options.node_id,
            local_token.redact_url(options.url),
            options.workspace,
            extra={"console": True, "fields": {"nodeId": options.node_id, "logFile": str(options.log_file)}},
        )

        async def main() -> int:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                    loop.add_signal_handler(sig, agent.request_stop)
            return await agent.run()

        try:
            return asyncio.run(main())
        except KeyboardInterrupt:
            agent.processes.shutdown()
            return 0
    finally:
        undo_logging()
