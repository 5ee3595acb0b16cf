"""A device token on this machine: pairing with a gateway (`orbital login --pair CODE`, `orbital node --pair CODE`)
and the file the token is kept in.

The one-time code a gateway's admin made (`orbital devices add`, the console's "Add device") is exchanged at
`POST {http}/api/v1/pair/exchange {code, name}` for a device token, which is saved in `devices.json` in the user's
config directory (`$XDG_CONFIG_HOME/orbital/`, else `~/.config/orbital/`; the directory 0700, the file 0600), under
the gateway's WebSocket URL and the token's kind: a `node` token is what `orbital node` presents, a `channel` token is
kept for a channel bridge, any other role's token is what every other `orbital` command presents. A token is only
ever sent to the gateway it was saved for, and never printed.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

CONFIG_HOME_ENV = "XDG_CONFIG_HOME"
FILE_NAME = "devices.json"
EXCHANGE_PATH = "/api/v1/pair/exchange"
KINDS = ("client", "node", "channel")


class PairingFailedError(Exception):
    """The code could not be exchanged (refused, expired, unreachable gateway, or a gateway without pairing)."""


class DeviceFileError(Exception):
    """The device token file cannot be written."""


@dataclass(frozen=True)
class Paired:
    token: str
    token_id: str
    role: str
    url: str
    """The gateway's WebSocket URL the token is saved under."""
    node_id: str | None = None


def config_dir() -> Path:
    """`$XDG_CONFIG_HOME/orbital`, else `~/.config/orbital` (expanded, not resolved)."""
    base = os.environ.get(CONFIG_HOME_ENV, "").strip()
    return (Path(base) if base else Path("~/.config")).expanduser() / "orbital"


def store_path() -> Path:
    return config_dir() / FILE_NAME


def kind_of(role: str) -> str:
    """The slot a token of `role` is kept in: `node`, `channel`, or `client` for any other role."""
    return role if role in ("node", "channel") else "client"


def gateway_key(url: str) -> str:
    """`url` as the key its tokens are kept under: scheme and host in lower case, a default port dropped, no query,
    fragment, user or trailing slash (`ws://127.0.0.1:8765/ws/?dialect=x` and `WS://127.0.0.1:8765/ws` are one)."""
    try:
        parts = urlsplit(url.strip())
        host = (parts.hostname or "").lower()
        port = parts.port
    except ValueError:
        return url.strip()
    scheme = parts.scheme.lower()
    if ":" in host:
        host = f"[{host}]"
    default = {"ws": 80, "http": 80, "wss": 443, "https": 443}.get(scheme)
    netloc = host if port is None or port == default else f"{host}:{port}"
    return urlunsplit((scheme, netloc, parts.path.rstrip("/"), "", ""))


def _load(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def find(url: str, kind: str = "client") -> dict[str, Any] | None:
    """The saved record (`token`, `tokenId`, `role`, `name`, `nodeId?`, `savedAt`) of `kind` for the gateway at `url`,
    or None. `orbital node` asks for `node`, then `client`; every other command for `client` only."""
    gateways = _load(store_path()).get("gateways")
    if not isinstance(gateways, dict):
        return None
    entry = gateways.get(gateway_key(url))
    if not isinstance(entry, dict):
        return None
    record = entry.get(kind)
    if isinstance(record, dict) and isinstance(record.get("token"), str) and record["token"].strip():
        return record
    return None


def find_token(url: str, kinds: tuple[str, ...] = ("client",)) -> str | None:
    for kind in kinds:
        record = find(url, kind)
        if record:
            return str(record["token"]).strip()
    return None


def save(paired: Paired, *, name: str | None = None) -> Path:
    """Keep `paired`'s token under its URL and kind (replacing the one kept there), written atomically, 0600 in a 0700
    directory. DeviceFileError when it cannot be written."""
    directory = config_dir()
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        if stat.S_IMODE(directory.stat().st_mode) & 0o077:
            directory.chmod(0o700)
    except OSError as exc:
        raise DeviceFileError(f"cannot create {directory}: {exc.strerror or exc}") from None
    path = directory / FILE_NAME
    data = _load(path)
    kept = data.get("gateways")
    gateways: dict[str, Any] = kept if isinstance(kept, dict) else {}
    key = gateway_key(paired.url)
    found = gateways.get(key)
    entry: dict[str, Any] = found if isinstance(found, dict) else {}
    record: dict[str, Any] = {
        "token": paired.token,
        "tokenId": paired.token_id,
        "role": paired.role,
        "name": name or "",
        "savedAt": int(time.time() * 1000),
    }
    if paired.node_id:
        record["nodeId"] = paired.node_id
    entry[kind_of(paired.role)] = record
    gateways[key] = entry
    text = json.dumps({"version": 1, "gateways": gateways}, indent=2) + "\n"
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".devices-", suffix=".tmp")
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, text.encode())
        finally:
            os.close(fd)
        Path(tmp).replace(path)
    except OSError as exc:
        with contextlib.suppress(OSError, UnboundLocalError):
            Path(tmp).unlink()
        raise DeviceFileError(f"cannot write {path}: {exc.strerror or exc}") from None
    return path


def endpoints(url: str, http_url: str | None = None) -> tuple[str, str]:
    """The gateway's WebSocket URL and HTTP base for `url`, which is either the WebSocket URL (`ws://HOST:PORT/ws`,
    `wss://…`) or the HTTP base (`http://…`, `https://…`). `http_url` names the HTTP API when its host differs from
    the WebSocket API's (a stack on AWS without a domain of its own). ValueError when one cannot be told."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    if not parts.hostname or scheme not in ("ws", "wss", "http", "https"):
        raise ValueError(f"not a gateway URL: {url!r} (ws://HOST:PORT/ws, wss://… or https://…)")
    path = parts.path.rstrip("/")
    if scheme in ("http", "https"):
        base = urlunsplit((scheme, parts.netloc, path, "", ""))
        ws = urlunsplit(({"http": "ws", "https": "wss"}[scheme], parts.netloc, path + "/ws", "", ""))
        return ws, (http_url or base).rstrip("/")
    if http_url:
        given = urlsplit(http_url)
        if given.scheme not in ("http", "https") or not given.hostname:
            raise ValueError("the HTTP URL must be http://HOST… or https://HOST… (the gateway's HTTP API)")
        return url.strip(), http_url.rstrip("/")
    if scheme == "ws" or path.endswith("/ws"):
        http_scheme = {"ws": "http", "wss": "https"}[scheme]
        base_path = path[: -len("/ws")] if path.endswith("/ws") else ""
        return url.strip(), urlunsplit((http_scheme, parts.netloc, base_path, "", ""))
    raise ValueError(
        f"cannot tell the gateway's HTTP API from {url!r}: give it with --http-url (the stack's HttpApiUrl output)"
    )


def _refusal(body: bytes) -> str:
    try:
        data = json.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace").strip()[:200]
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        for key in ("message", "detail", "error"):
            if isinstance(data.get(key), str):
                return str(data[key])
    return str(data)[:200]


def exchange(
    code: str, *, url: str, name: str | None = None, http_url: str | None = None, timeout: float = 30.0
) -> Paired:
    """Trade a one-time pairing `code` for a device token at the gateway `url` (see `endpoints`); `name` renames the
    device (else it keeps the name the code was made with). PairingFailedError with the gateway's reason when it is
    refused or the gateway cannot be reached."""
    code = "".join(code.split())
    if not code:
        raise PairingFailedError("the pairing code is empty")
    try:
        ws_url, base = endpoints(url, http_url)
    except ValueError as exc:
        raise PairingFailedError(str(exc)) from None
    request = urllib.request.Request(
        base + EXCHANGE_PATH,
        data=json.dumps({"code": code, **({"name": name} if name else {})}).encode(),
        headers={"Content-Type": "application/json", "Accept": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:
        reason = _refusal(exc.read() or b"")
        if exc.code == 404 and not reason.strip("{} "):
            reason = "this gateway does not pair devices (no pairing endpoint)"
        raise PairingFailedError(f"the gateway refused the code ({exc.code}): {reason or exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        why = getattr(exc, "reason", None) or exc
        raise PairingFailedError(f"cannot reach {base}: {why}") from None
    try:
        data = json.loads(body)
    except ValueError:
        raise PairingFailedError("the gateway's answer is not JSON") from None
    token = data.get("token") if isinstance(data, dict) else None
    if not isinstance(token, str) or not token.strip():
        raise PairingFailedError("the gateway's answer holds no token")
    binding = data.get("binding") if isinstance(data.get("binding"), dict) else {}
    node_id = data.get("nodeId") or (binding or {}).get("nodeId")
    answered_url = data.get("url")
    if isinstance(answered_url, str) and urlsplit(answered_url).scheme in ("ws", "wss") and not url.startswith("ws"):
        ws_url = answered_url  # given the HTTP base: the gateway names its WebSocket URL
    return Paired(
        token=token.strip(),
        token_id=str(data.get("tokenId") or ""),
        role=str(data.get("role") or "client"),
        url=ws_url,
        node_id=str(node_id) if isinstance(node_id, str) and node_id else None,
    )
