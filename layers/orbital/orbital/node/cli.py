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

from orbital.node.agent import NodeAgent, NodeOptions, redact_url
from orbital.node.logs import configure_logging, default_log_file, log
from orbital.protocol import local_token

DEFAULT_URL = local_token.DEFAULT_URL
DEFAULT_KEEPALIVE = 240.0


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the `node` subcommand on an argparse subparsers object."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "node",
        help="run this machine as a tool host (Bash, Read, Write, ... for the agent)",
        description=(
            "Connect to an Orbital gateway in node mode and run its tool calls on this machine. "
            "Reconnects automatically; Ctrl-C stops it and the commands it started."
        ),
    )
    local_token.add_arguments(parser)
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
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr and in the log file")
    parser.set_defaults(func=run)
    return parser


def _options(args: argparse.Namespace) -> Any:
    try:
        url, token = local_token.from_arguments("orbital node", args)
    except local_token.TokenFileError as exc:
        raise ValueError(str(exc)) from None
    node_id = (args.node_id or "").strip() or f"node-{socket.gethostname()}"
    workspace = Path(args.workspace).expanduser() if args.workspace else Path.cwd()
    workspace = workspace.resolve()
    log_file = Path(args.log_file).expanduser() if args.log_file else default_log_file()
    if not workspace.is_dir():
        raise ValueError(f"workspace is not a directory: {workspace}")
    if args.keepalive < 0:
        raise ValueError("--keepalive must be >= 0")
    return NodeOptions(
        url=url,
        node_id=node_id,
        workspace=workspace,
        token=token,
        log_file=log_file.resolve(),
        keepalive=float(args.keepalive),
        binary_frames=args.binary_frames,
    )


def run(args: argparse.Namespace) -> int:
    """Run the node until Ctrl-C/SIGTERM (exit 0) or until the gateway refuses it for good (exit 2)."""
    try:
        options = _options(args)
    except ValueError as exc:
        print(f"orbital node: {exc}", file=sys.stderr)
        return 2
    undo_logging = configure_logging(options.log_file, verbose=bool(getattr(args, "verbose", False)))
    try:
        agent = NodeAgent(options)
        log.info(
            "node %s starting (gateway %s, workspace %s)",
            options.node_id,
            redact_url(options.url),
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
