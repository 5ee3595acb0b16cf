"""`orbital xeno-bridge`: serve xeno's Unix socket on this machine for an Orbital gateway elsewhere
(`orbital.xeno.bridge`, loaded when the command runs: other commands never load the socket libraries)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import stat
import sys
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orbital.protocol import device_token, local_token
from orbital.protocol.local_token import redact_url

DEFAULT_KEEPALIVE = 240.0

DESCRIPTION = """\
Serve xeno's gateway socket (DIR/.xeno/gateway.sock, JSON-RPC 2.0, one message a line) on this machine and relay it
to an Orbital gateway's WebSocket API: a deployed stack (wss://…/ws) or any gateway (ws:// for a local one). Then
`xeno console --home DIR` talks to that gateway.

Each line a client writes goes to the gateway as one text frame (the upgrade carries ?dialect=xeno and the token as
an Authorization: Bearer header), and each frame the gateway sends back comes out as one line to that client. Every
client gets a WebSocket of its own. Messages over 30,000 bytes are sent in fragments (API Gateway takes 32 KB a
frame); a message over 128 KB is refused here with a JSON-RPC error. The bridge reconnects with backoff and keeps
the socket up meanwhile; a request it cannot relay gets a JSON-RPC error (-32000), never silence.

The token comes from --token-file (read again at each reconnection) or the ORBITAL_TOKEN environment variable,
never from the command line, and is never logged.

Attachments: each attachments[].path of a query is uploaded to the gateway's HTTP API (POST /api/artifacts/, with
the token) and rewritten to artifact:{id}, so a deployed gateway gets the file too. The HTTP API is --http-url (the
stack's HttpApiUrl output; env ORBITAL_HTTP_URL), or the WebSocket URL's own host for a ws:// gateway or a /ws
path. A file that cannot be uploaded keeps its path, and the bridge logs why.

Ctrl-C or SIGTERM stops the bridge and removes the socket."""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the `xeno-bridge` subcommand on an argparse subparsers object."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "xeno-bridge",
        help="serve xeno's Unix socket on this machine for a gateway elsewhere (a deployed stack)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--home", required=True, metavar="DIR", help="xeno home: the socket is DIR/.xeno/gateway.sock")
    parser.add_argument(
        "--url", default=None, metavar="URL", help="the gateway's WebSocket URL, wss://…/ws or ws://… (env ORBITAL_URL)"
    )
    parser.add_argument(
        "--http-url",
        default=None,
        metavar="URL",
        help="the gateway's HTTP API, https://… (for attachments; env ORBITAL_HTTP_URL; default: from --url if it can)",
    )
    parser.add_argument(
        "--token-file",
        default=None,
        metavar="FILE",
        help="file holding the gateway token (default: env ORBITAL_TOKEN, else for a gateway at a loopback URL the "
        "data directory's token file)",
    )
    parser.add_argument(
        "--data-dir",
        default=None,
        metavar="DIR",
        help=f"a local gateway's data directory, where its token is kept (env {local_token.DATA_DIR_ENV}; default "
        f"{local_token.DEFAULT_DATA_DIR})",
    )
    parser.add_argument(
        "--keepalive",
        type=float,
        default=DEFAULT_KEEPALIVE,
        metavar="SECONDS",
        help=f"check each connection this often (default {DEFAULT_KEEPALIVE:g}; API Gateway drops a connection idle "
        "for 10 minutes; 0 disables)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log more")
    parser.set_defaults(func=run)
    return parser


def token_source(token_file: str | None, *, url: str = "", data_dir: str | None = None) -> Callable[[], str | None]:
    """Where the token comes from: the file (read now, to fail early, and at every connection attempt),
    ORBITAL_TOKEN, a device token saved for `url` (`orbital login --pair`), or for a gateway at a loopback `url` the
    data directory's token file (read at every connection attempt: the gateway may draw it after the bridge
    started)."""
    from orbital.xeno.bridge import TokenUnavailableError  # lazy: the bridge (websockets, httpx) for this command only

    if not token_file:
        # the order of every `orbital` command (local_token): the environment, a device token saved for the URL
        token = os.environ.get(local_token.TOKEN_ENV) or device_token.find_token(url) or None
        if token or not local_token.local_url(url):
            return lambda: token
        kept = local_token.data_dir(data_dir) / local_token.TOKEN_FILE

        def read_kept() -> str | None:
            try:
                return local_token.read_token_file(kept)
            except local_token.TokenFileError:
                return None

        return read_kept
    path = Path(token_file).expanduser()

    def read() -> str:
        try:
            text = path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
            raise TokenUnavailableError(f"cannot read the token file {path}: {reason}") from None
        if not text or any(c.isspace() for c in text):
            raise TokenUnavailableError(f"the token file {path} must hold the token alone, on one line")
        return text

    read()
    with contextlib.suppress(OSError):
        if stat.S_IMODE(path.stat().st_mode) & 0o077:
            logging.getLogger("orbital.xeno.bridge").warning(
                "the token file %s can be read by others (chmod 600 it)", path
            )
    return read


def _loopback(url: str) -> bool:
    with contextlib.suppress(ValueError):
        return (urllib.parse.urlsplit(url).hostname or "") in ("127.0.0.1", "::1", "localhost")
    return False


def run(args: argparse.Namespace) -> int:
    """Serve until Ctrl-C/SIGTERM (exit 0); 2 when it cannot start."""
    # lazy: the bridge (websockets, httpx) for this command only
    from orbital.xeno.bridge import BridgeOptions, XenoBridge
    from orbital.xeno.unix_socket import XenoSocketInUseError

    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO, format="orbital xeno-bridge: %(levelname)s %(message)s"
    )
    logging.getLogger("websockets").setLevel(logging.WARNING)  # its debug log holds the upgrade's headers
    url = args.url or os.environ.get("ORBITAL_URL") or ""
    if not url:
        print("orbital xeno-bridge: give the gateway's WebSocket URL with --url (or ORBITAL_URL)", file=sys.stderr)
        return 2
    if args.keepalive < 0:
        print("orbital xeno-bridge: --keepalive must be >= 0", file=sys.stderr)
        return 2
    try:
        token = token_source(args.token_file, url=url, data_dir=args.data_dir)
        options = BridgeOptions(
            home=Path(args.home).expanduser().resolve(),
            url=url,
            token=token,
            display_url=redact_url(url),
            http_url=args.http_url or os.environ.get("ORBITAL_HTTP_URL") or None,
            keepalive=float(args.keepalive),
        )
        bridge = XenoBridge(options)
    except ValueError as exc:  # TokenUnavailableError included
        print(f"orbital xeno-bridge: {exc}", file=sys.stderr)
        return 2
    if url.startswith("ws://") and not _loopback(url) and (args.token_file or os.environ.get("ORBITAL_TOKEN")):
        logging.getLogger("orbital.xeno.bridge").warning("ws:// sends the token unencrypted: use wss://")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, bridge.request_stop)
        await bridge.run()

    try:
        asyncio.run(main())
    except XenoSocketInUseError as exc:
        print(f"orbital xeno-bridge: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"orbital xeno-bridge: cannot serve {bridge.path}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        pass
    return 0
