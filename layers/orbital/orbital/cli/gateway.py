"""What the `orbital` commands that call the gateway's methods share (`approvals`, `devices`, `mcp`, `backup`): a
client socket connected with this user's token, and the same few lines on stderr when that fails."""

from __future__ import annotations

import argparse
import contextlib
import sys
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from orbital import __version__
from orbital.protocol import local_token

if TYPE_CHECKING:
    from orbital.client import GatewayClient


def error(prog: str, text: str) -> None:
    print(f"{prog}: {text}", file=sys.stderr, flush=True)


def describe(exc: BaseException) -> str:
    """An exception as one line: its type, and its text when it has one."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def refusal(code: int, message: str) -> str:
    """The default line for a method the gateway refused."""
    return f"{message} ({code})"


@contextlib.contextmanager
def connected(url: str, token: str | None, name: str, timeout: float) -> Iterator[GatewayClient]:
    """A client socket to `url`, connected as the command `name` (`cli-{name}-…`)."""
    # lazy: only the commands that call the gateway need it (every `orbital` command builds their parsers)
    from orbital.client import GatewayClient

    with GatewayClient(url, timeout=timeout, open_timeout=timeout) as client:
        client.connect(
            "client",
            f"cli-{name}-{uuid.uuid4().hex[:8]}",
            token=token,
            client={"platform": "cli", "version": __version__},
        )
        yield client


def run(
    prog: str,
    args: argparse.Namespace,
    name: str,
    act: Callable[[Any, str], int],
    refused: Callable[[int, str], str] = refusal,
) -> int:
    """Connect with the URL and token of `args` (`local_token.from_arguments`), run `act(client, url)` and return its
    exit status; 1 with a line on stderr when the token file, the connection or a method fails (`refused` words a
    method's refusal)."""
    try:
        url, token = local_token.from_arguments(prog, args)
    except local_token.TokenFileError as exc:
        error(prog, str(exc))
        return 1
    # lazy: only the commands that call the gateway need it (every `orbital` command builds their parsers)
    from orbital.client import RpcFailedError

    where = local_token.redact_url(url)
    try:
        with connected(url, token, name, args.timeout) as client:
            return act(client, url)
    except RpcFailedError as exc:
        error(prog, refused(exc.code, exc.message))
        return 1
    except (OSError, TimeoutError) as exc:
        error(prog, f"cannot reach the gateway at {where}: {describe(exc)}")
        return 1
    except Exception as exc:  # closed by the gateway during the handshake (a wrong token), protocol errors
        error(prog, f"{where}: {describe(exc)}")
        return 1
