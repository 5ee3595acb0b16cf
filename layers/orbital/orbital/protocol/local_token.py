"""Where a command on this machine finds the gateway and its token, and where `orbital dev` keeps the token it made.

A local gateway started without a token of its own draws one at its first start and keeps it in
`<data-dir>/token` (0600, in the 0700 data directory); later starts reuse it. Every `orbital` command run by the same
user finds it there by itself. In order, the token is:

1. the file named by `--token-file`;
2. the environment variable `ORBITAL_TOKEN`;
3. a device token saved for this gateway's URL by `orbital login --pair CODE` or `orbital node --pair CODE`, in
   `devices.json` in the user's config directory (`$XDG_CONFIG_HOME/orbital/`, else `~/.config/orbital/`; see
   `device_token`): `orbital node` presents the node token saved there (else the client one), every other command
   the client one;
4. the data directory's `token` file (the data directory from `--data-dir`, `ORBITAL_DATA_DIR`, default
   `~/.orbital`), only for a gateway on this machine (a loopback URL): a local token is never sent elsewhere.

The URL is `--url`, else `ORBITAL_URL`, else `ws://127.0.0.1:8765/ws`. A token is never taken from a command line:
process lists show command lines to every user of the machine.
"""

from __future__ import annotations

import os
import secrets
import stat
import sys
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from orbital.protocol import device_token
from orbital.protocol.peers import loopback_address

if TYPE_CHECKING:
    import argparse

DEFAULT_URL = "ws://127.0.0.1:8765/ws"
DEFAULT_DATA_DIR = "~/.orbital"
TOKEN_ENV = "ORBITAL_TOKEN"
URL_ENV = "ORBITAL_URL"
DATA_DIR_ENV = "ORBITAL_DATA_DIR"
TOKEN_FILE = "token"
MIN_TOKEN_LENGTH = 16
"""A gateway token shorter than this is refused at start (locally and on AWS)."""

TOKEN_ON_COMMAND_LINE = (
    "--token VALUE is deprecated: a command line is visible to every user of this machine. Use "
    f"{TOKEN_ENV}=… or --token-file FILE (a local gateway's own token is found in its data directory)."
)


class TokenFileError(Exception):
    """A token file that cannot be used (missing, unreadable, empty or more than one line)."""


def data_dir(given: str | None = None) -> Path:
    """The data directory: `given`, else `ORBITAL_DATA_DIR`, else `~/.orbital` (expanded, not resolved)."""
    return Path(given or os.environ.get(DATA_DIR_ENV) or DEFAULT_DATA_DIR).expanduser()


def url(given: str | None = None) -> str:
    return given or os.environ.get(URL_ENV) or DEFAULT_URL


def redact_url(url: str) -> str:
    """The URL without credentials, query string or fragment (they may carry a secret), to show or log."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "<invalid URL>"
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{port}" if port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def read_token_file(path: Path) -> str:
    """The token held in `path` (one line, surrounding whitespace ignored). TokenFileError when it cannot be used."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TokenFileError(f"cannot read the token file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise TokenFileError(f"the token file {path} is not text") from None
    token = text.strip()
    if not token or "\n" in token:
        raise TokenFileError(f"the token file {path} must hold the token alone, on one line")
    return token


def local_url(gateway_url: str) -> bool:
    """`gateway_url` names a gateway on this machine (a loopback host)."""
    try:
        host = urlsplit(gateway_url).hostname
    except ValueError:
        return False
    return host == "localhost" or loopback_address(host)


def resolve_token(
    *,
    token_file: str | None = None,
    data_dir_arg: str | None = None,
    gateway_url: str = DEFAULT_URL,
    given: str | None = None,
    kinds: tuple[str, ...] = ("client",),
) -> str | None:
    """The token a command run by this user presents: `given` (a deprecated `--token`), `--token-file`,
    `ORBITAL_TOKEN`, a device token saved for `gateway_url` (of the first of `kinds` saved), the data directory's
    `token` file (for a gateway at a loopback URL only), in that order; None when there is none (a gateway in
    `same-user` mode needs none). TokenFileError for a `--token-file` that cannot be used."""
    if given:
        return given
    if token_file:
        return read_token_file(Path(token_file).expanduser())
    from_env = os.environ.get(TOKEN_ENV, "").strip()
    if from_env:
        return from_env
    paired = device_token.find_token(gateway_url, kinds)
    if paired:
        return paired
    if not local_url(gateway_url):
        return None
    kept = data_dir(data_dir_arg) / TOKEN_FILE
    try:
        return read_token_file(kept)
    except TokenFileError:
        return None


def warn_token_argument(command: str, given: str | None) -> None:
    """`--token VALUE` was given: say on stderr that it is ignored and what to use instead."""
    if given:
        print(f"{command}: {TOKEN_ON_COMMAND_LINE}", file=sys.stderr, flush=True)


def too_short(token: str) -> str | None:
    """Why `token` is refused as a gateway token, or None."""
    if len(token) < MIN_TOKEN_LENGTH:
        return f"the gateway token is {len(token)} characters long: use at least {MIN_TOKEN_LENGTH}"
    return None


def ensure_token(directory: Path) -> tuple[str, bool]:
    """The token kept in `directory` (which must exist, private to its owner), drawn and written (0600) when there is
    none yet. Returns the token and whether it was made now. A kept file readable by others is tightened first."""
    path = directory / TOKEN_FILE
    if path.exists():
        if stat.S_IMODE(path.stat().st_mode) & 0o077:
            path.chmod(0o600)
        token = read_token_file(path)
        why = too_short(token)
        if why:
            raise TokenFileError(f"{path}: {why} (delete the file to have a new one drawn)")
        return token, False
    token = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, (token + "\n").encode())
    finally:
        os.close(fd)
    return token, True


def add_arguments(parser: argparse.ArgumentParser, *, url: bool = True, token_argument: bool = True) -> None:
    """`--url`, `--token-file`, `--data-dir` and the deprecated `--token` of a command that talks to a gateway
    (`token_argument=False`: a new command, which never took a token on its command line)."""
    import argparse  # lazy: the handlers on Lambda import this module for MIN_TOKEN_LENGTH, not for a command line

    if url:
        parser.add_argument(
            "--url", default=None, metavar="URL", help=f"gateway WebSocket URL (env {URL_ENV}; default {DEFAULT_URL})"
        )
    parser.add_argument(
        "--token-file",
        default=None,
        metavar="FILE",
        help=f"file holding the token (default: env {TOKEN_ENV}, else the device token saved for the URL by "
        "`--pair`, else the data directory's token file)",
    )
    parser.add_argument(
        "--data-dir",
        default=None,
        metavar="DIR",
        help=f"the local gateway's data directory, where its token is kept (env {DATA_DIR_ENV}; default "
        f"{DEFAULT_DATA_DIR}); used for a gateway at a loopback URL only",
    )
    if token_argument:
        parser.add_argument("--token", default=None, metavar="TOKEN", help=argparse.SUPPRESS)
    else:
        parser.set_defaults(token=None)


def from_arguments(
    command: str, args: argparse.Namespace, *, kinds: tuple[str, ...] = ("client",)
) -> tuple[str, str | None]:
    """The URL and token of a command's parsed `add_arguments` options (a deprecated `--token` warns on stderr);
    `kinds`: the saved device tokens the command may present, in order. TokenFileError for a `--token-file` that
    cannot be used."""
    warn_token_argument(command, getattr(args, "token", None))
    gateway_url = url(getattr(args, "url", None))
    token = resolve_token(
        token_file=args.token_file,
        data_dir_arg=args.data_dir,
        gateway_url=gateway_url,
        given=args.token,
        kinds=kinds,
    )
    return gateway_url, token
