"""The `orbital` command."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from orbital.cli.approvals import add_parser as add_approvals_parser
from orbital.cli.backup import add_parser as add_backup_parser
from orbital.cli.channel import add_parser as add_channel_parser
from orbital.cli.chat import add_parser as add_chat_parser
from orbital.cli.devices import add_login_parser
from orbital.cli.devices import add_parser as add_devices_parser
from orbital.cli.mcp import add_parser as add_mcp_parser
from orbital.cli.portable import add_parser as add_portable_parser
from orbital.cli.xeno_bridge import add_parser as add_xeno_bridge_parser
from orbital.node.cli import add_parser as add_node_parser
from orbital.protocol import local_token

DEFAULT_URL = local_token.DEFAULT_URL


def _cmd_dev(args: argparse.Namespace) -> int:
    import logging

    # before the gateway's modules are imported: the service's logger (Powertools, made at import) then logs once
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    from orbital.local.server import GatewayOptions, LocalGateway, StartupError  # lazy: `orbital dev` only

    local_token.warn_token_argument("orbital dev", args.token)
    try:
        token = args.token or _dev_token(args.token_file)
    except local_token.TokenFileError as exc:
        print(f"orbital dev: {exc}", file=sys.stderr)
        return 2
    if token and args.auth == "same-user":
        print("orbital dev: AUTH=same-user is token-less: start it without a token, or without AUTH", file=sys.stderr)
        return 2
    options = GatewayOptions(
        host=args.host,
        port=args.port,
        data_dir=Path(args.data_dir),
        token=token,
        auth=args.auth,
        project=Path(args.project) if args.project else None,
        concurrent_frames=args.concurrent_frames,
        frame_jitter_ms=args.frame_jitter_ms,
        step_functions_process=not args.step_functions_in_process,
        xeno=not args.no_xeno,
        xeno_home=Path(args.xeno_home).expanduser() if args.xeno_home else None,
    )
    try:
        gateway = LocalGateway(options)
        gateway.serve_forever()
    except StartupError as exc:
        print(f"orbital dev: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        pass
    print("Orbital gateway stopped; state saved.", flush=True)
    return 0


def _dev_token(token_file: str | None) -> str | None:
    """The gateway's token given by `--token-file` or `ORBITAL_TOKEN` (None: the data directory's own)."""
    if token_file:
        return local_token.read_token_file(Path(token_file).expanduser())
    return os.environ.get(local_token.TOKEN_ENV, "").strip() or None


def _parse_json_arg(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        raise SystemExit(f"orbital call: params must be JSON (got {text!r})") from None


def _cmd_call(args: argparse.Namespace) -> int:
    from orbital.client import GatewayClient, RpcFailedError  # lazy: `orbital call` only

    params = _parse_json_arg(args.params)
    try:
        url, token = local_token.from_arguments("orbital call", args)
    except local_token.TokenFileError as exc:
        print(f"orbital call: {exc}", file=sys.stderr)
        return 1
    args.url = url
    try:
        with GatewayClient(url, timeout=args.timeout) as client:
            client.connect("client", args.client_id, token=token)
            payload = client.hello if args.method == "connect" else client.call(args.method, params)
    except RpcFailedError as exc:
        print(json.dumps({"code": exc.code, "message": exc.message}), file=sys.stderr)
        return 1
    except (OSError, TimeoutError) as exc:
        print(f"orbital call: cannot reach {args.url}: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # connection closed by the gateway (e.g. bad token), protocol errors
        print(f"orbital call: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(payload, indent=2, ensure_ascii=False) if payload is not None else "null")
    if isinstance(payload, dict) and isinstance(payload.get("warning"), str):  # e.g. config.set of an unknown key
        print(f"orbital call: warning: {payload['warning']}", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="orbital", description="Orbital: a personal AI-agent gateway (GSV).")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_dev_parser(sub)
    _add_call_parser(sub)
    for add in (
        add_node_parser,
        add_chat_parser,
        add_approvals_parser,
        add_devices_parser,
        add_login_parser,
        add_mcp_parser,
        add_channel_parser,
        add_portable_parser,
        add_backup_parser,
        add_xeno_bridge_parser,
    ):
        add(sub)
    return parser


def _add_dev_parser(sub: Any) -> None:
    """`orbital dev`: the whole gateway on this machine."""
    dev = sub.add_parser(
        "dev",
        help="run the whole gateway locally (no AWS account, no Docker)",
        description=(
            "Run the whole gateway on this machine. Clients present a token: the one given by --token-file or "
            f"{local_token.TOKEN_ENV}, else the data directory's own (drawn at the first start, kept in "
            "DATA_DIR/token, 0600); `orbital` commands run by the same user find it there by themselves. "
            "--auth same-user serves token-less, to this OS user on this machine only."
        ),
    )
    dev.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    dev.add_argument("--port", type=int, default=8765, help="port for ws://HOST:PORT/ws and HTTP (default 8765)")
    dev.add_argument(
        "--data-dir",
        default=os.environ.get(local_token.DATA_DIR_ENV, local_token.DEFAULT_DATA_DIR),
        metavar="DIR",
        help=f"state directory: sessions, config, workspace, the token (env {local_token.DATA_DIR_ENV}; default "
        f"{local_token.DEFAULT_DATA_DIR})",
    )
    dev.add_argument(
        "--auth",
        choices=["token", "same-user"],
        default="token",
        help="token (default): clients present the gateway's token; same-user: no token, only this OS user's "
        "connections from this machine (for clients that cannot send one)",
    )
    dev.add_argument(
        "--token-file",
        default=None,
        metavar="FILE",
        help=f"file holding the token to require (default: env {local_token.TOKEN_ENV}, else the data directory's own)",
    )
    dev.add_argument("--token", default=None, help=argparse.SUPPRESS)  # deprecated: visible in the process list
    dev.add_argument("--project", default=None, help="Orbital checkout holding template.yaml (default: search cwd)")
    dev.add_argument("-v", "--verbose", action="store_true", help="log more")
    dev.add_argument(
        "--concurrent-frames",
        action="store_true",
        help="handle one socket's text frames concurrently, in any order, as API Gateway's parallel Lambdas do",
    )
    dev.add_argument(
        "--frame-jitter-ms",
        type=float,
        default=0.0,
        metavar="MS",
        help="with --concurrent-frames: delay each frame randomly by up to MS milliseconds (shuffles them)",
    )
    dev.add_argument(
        "--step-functions-in-process",
        action="store_true",
        help="interpret the state machines in the gateway's process, not a child process (slower; to compare)",
    )
    dev.add_argument(
        "--xeno-home",
        default=None,
        metavar="DIR",
        help="serve xeno's Unix socket at DIR/.xeno/gateway.sock (default: the data directory)",
    )
    dev.add_argument("--no-xeno", action="store_true", help="do not serve xeno's Unix socket")
    dev.set_defaults(func=_cmd_dev)


def _add_call_parser(sub: Any) -> None:
    """`orbital call`: one RPC, its payload printed."""
    call = sub.add_parser(
        "call",
        help="send one RPC and print its payload (exit 1 on error)",
        description=(
            "Connect as a client, send one request and print its payload as JSON (the error on stderr, exit status "
            "1). The token is found by itself: --token-file, env ORBITAL_TOKEN, else the local gateway's data "
            "directory."
        ),
    )
    call.add_argument("method", help="the method to call, e.g. config.get (`connect` prints the hello)")
    call.add_argument("params", nargs="?", default=None, help='the params as one JSON value, e.g. \'{"path":"model"}\'')
    local_token.add_arguments(call)
    call.add_argument("--client-id", default=None, metavar="ID", help="the client id to connect with (default: random)")
    call.add_argument(
        "--timeout", type=float, default=30.0, metavar="S", help="give up after S seconds with no answer (default 30)"
    )
    call.set_defaults(func=_cmd_call)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
