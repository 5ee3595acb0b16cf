"""`orbital devices list|add|revoke` and `orbital login --pair CODE`: the devices that hold a token of their own.

- `orbital devices [list]`: every device token (`device.token.list`): id, name, role, what it is bound to, when it
  was last used and when it expires; never the secret.
- `orbital devices add --role ROLE [--name N] [--node-id ID] [--channel C --account A]`: a one-time pairing code
  (`device.pair.create`: 8 characters, 10 minutes, single use) and the command to run on the new machine, which
  trades it for a token of its own (`orbital node --pair CODE` for a node, `orbital login --pair CODE` otherwise),
  so no secret is copied. With `--token` the token is made here instead (`device.token.create`) and printed once.
- `orbital devices revoke ID`: `device.token.revoke`; the gateway refuses the token from then on and closes the
  sockets that use it.
- `orbital login --pair CODE [--url URL]`: the other end of a pairing, for a client: the token is saved 0600 in
  the user's config directory for the URL, where every `orbital` command finds it (`protocol/local_token.py`).

Exit status: 0 done, 1 an error (the gateway unreachable or refusing), 2 a usage error.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from typing import Any

from orbital.cli import gateway
from orbital.protocol import device_token, local_token

PROG = "orbital devices"
ROLES = ("node", "client", "operator", "viewer", "channel", "admin")
ACTIONS = ("list", "add", "revoke")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the `devices` subcommand on an argparse subparsers object."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "devices",
        help="list, add (pair) or revoke the devices that hold a token of their own",
        description=(
            "Without an action (or with `list`): the device tokens, with their role, binding, last use and expiry. "
            "`add --role ROLE`: a one-time pairing code (10 minutes, single use) and the command to run on the new "
            "machine (`orbital node --pair CODE` or `orbital login --pair CODE`); with --token, the token itself, "
            "shown once. `revoke ID`: the gateway refuses that token from now on and closes its open connections. "
            "Roles: node (tools host; --node-id binds it to one node id), client (chat, sessions, its own "
            "approvals), operator (all but tokens and secret values), viewer (read only), channel (a channel "
            "bridge; --channel and --account bind it), admin (everything)."
        ),
    )
    parser.add_argument("action", nargs="?", default="list", choices=ACTIONS, help="list (default), add or revoke")
    parser.add_argument("token_id", nargs="?", default=None, metavar="ID", help="revoke: the token's id")
    parser.add_argument("--role", default=None, choices=ROLES, help="add: the device's role")
    parser.add_argument("--name", default=None, metavar="NAME", help="add: a name to know the device by")
    parser.add_argument("--node-id", default=None, metavar="ID", help="add --role node: the only node id it may use")
    parser.add_argument("--channel", default=None, metavar="C", help="add --role channel: the channel, e.g. telegram")
    parser.add_argument("--account", default=None, metavar="A", help="add --role channel: the channel's account id")
    parser.add_argument(
        "--token",
        dest="direct",
        action="store_true",
        help="add: make the token now and print it once, instead of a pairing code",
    )
    parser.add_argument(
        "--expires-in-days", type=int, default=None, metavar="N", help="add --token: the token expires after N days"
    )
    parser.add_argument(
        "--http-url",
        default=None,
        metavar="URL",
        help="add: the gateway's HTTP API, for the printed command, when its host differs from --url's (AWS)",
    )
    parser.add_argument("--json", action="store_true", help="print the gateway's answer as JSON")
    _connection_arguments(parser)
    parser.set_defaults(func=run)
    return parser


def _connection_arguments(parser: argparse.ArgumentParser) -> None:
    local_token.add_arguments(parser, token_argument=False)  # `--token` is add's: make the token, not give one
    parser.add_argument("--timeout", type=float, default=30.0, metavar="S", help="RPC timeout (default 30)")


def add_login_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the `login` subcommand."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "login",
        help="pair this machine with a gateway: trade a one-time code for a device token of its own",
        description=(
            "Trade a pairing code (from `orbital devices add` or the console's Devices view, on a machine that "
            "already has access) for a device token of this machine's own. The token is saved, never shown, in "
            "devices.json in the config directory ($XDG_CONFIG_HOME/orbital, else ~/.config/orbital; 0600) for "
            "the gateway's URL; every `orbital` command to that URL then presents it (unless --token-file or "
            "ORBITAL_TOKEN says otherwise)."
        ),
    )
    parser.add_argument("--pair", required=True, metavar="CODE", help="the one-time pairing code")
    parser.add_argument(
        "--url",
        default=None,
        metavar="URL",
        help=f"the gateway's WebSocket URL (env {local_token.URL_ENV}; default {local_token.DEFAULT_URL}), or its "
        "HTTP base https://…",
    )
    parser.add_argument(
        "--http-url", default=None, metavar="URL", help="the gateway's HTTP API when its host differs from --url's"
    )
    parser.add_argument(
        "--name", default=None, metavar="NAME", help="rename this device (default: the name the code was made with)"
    )
    parser.add_argument("--timeout", type=float, default=30.0, metavar="S", help="HTTP timeout (default 30)")
    parser.set_defaults(func=run_login)
    return parser


# --- login ------------------------------------------------------------------------------------------------------


def run_login(args: argparse.Namespace) -> int:
    gateway_url = local_token.url(args.url)
    name = (args.name or "").strip() or None
    try:
        paired = device_token.exchange(
            args.pair, url=gateway_url, name=name, http_url=args.http_url or None, timeout=args.timeout
        )
        path = device_token.save(paired, name=name)
    except (device_token.PairingFailedError, device_token.DeviceFileError) as exc:
        gateway.error("orbital login", str(exc))
        return 1
    print(f"Paired with {local_token.redact_url(paired.url)}: a {paired.role} device (token {paired.token_id or '?'}).")
    print(f"The token is saved in {path}.")
    if paired.role == "node":
        print(f"This is a node token: run `orbital node{_url_flag(paired.url)}` to serve tools with it.")
    elif paired.role == "channel":
        print("This is a channel token: a channel bridge on this machine presents it.")
    else:
        example = f"orbital call{_url_flag(paired.url)} connect"
        print(f"`orbital` commands to this gateway use it by themselves, e.g. `{example}`.")
    return 0


def _url_flag(url: str) -> str:
    return "" if device_token.gateway_key(url) == device_token.gateway_key(local_token.DEFAULT_URL) else f" --url {url}"


# --- devices ----------------------------------------------------------------------------------------------------


def _usage(args: argparse.Namespace) -> str | None:
    adding = ("--role", "--name", "--node-id", "--channel", "--account", "--token", "--expires-in-days", "--http-url")
    given = [
        flag
        for flag, value in zip(
            adding,
            (
                args.role,
                args.name,
                args.node_id,
                args.channel,
                args.account,
                args.direct or None,
                args.expires_in_days,
                args.http_url,
            ),
            strict=True,
        )
        if value is not None
    ]
    if args.action != "add" and given:
        return f"{', '.join(given)} go with add"
    if args.action == "revoke":
        if not (args.token_id or "").strip():
            return f"revoke needs the token's ID (`{PROG}` lists them)"
        return None
    if args.token_id is not None:
        return f"{args.action} takes no ID (got {args.token_id!r})"
    if args.action != "add":
        return None
    if not args.role:
        return f"add needs --role ({', '.join(ROLES)})"
    if args.node_id is not None and args.role != "node":
        return "--node-id goes with --role node"
    if (args.channel is not None or args.account is not None) and args.role != "channel":
        return "--channel and --account go with --role channel"
    if args.role == "channel" and not (args.channel or "").strip():
        return "--role channel needs --channel (and --account, default: every account of it)"
    if args.expires_in_days is not None and (not args.direct or args.expires_in_days < 1):
        return "--expires-in-days goes with --token, and is at least 1"
    if args.http_url is not None and args.direct:
        return "--http-url goes with a pairing code (not with --token)"
    for flag, value in (("--name", args.name), ("--node-id", args.node_id), ("--account", args.account)):
        if value is not None and not value.strip():
            return f"{flag} must not be empty"
    return None


def run(args: argparse.Namespace) -> int:
    problem = _usage(args)
    if problem:
        gateway.error(PROG, problem)
        return 2
    return gateway.run(PROG, args, "devices", lambda client, url: _act(client, args, url), _refusal)


def _act(client: Any, args: argparse.Namespace, url: str) -> int:
    if args.action == "list":
        return _list(client, args)
    if args.action == "revoke":
        return _revoke(client, args)
    return _add(client, args, url)


def _refusal(code: int, message: str) -> str:
    hint = " (managing devices needs an admin token)" if code in (401, 403) else ""
    return f"{message} ({code}){hint}"


def when(value: Any, *, never: str = "never") -> str:
    """A time from the gateway (epoch milliseconds, or seconds, or ISO text) as local `YYYY-MM-DD HH:MM`."""
    if value is None or value == "":
        return never
    if isinstance(value, str):
        return value
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return "?"
    seconds = value / 1000 if value > 1e11 else value
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(seconds))


def binding_text(binding: Any) -> str:
    """What a token is bound to: `node X`, `telegram/default`, or `-`."""
    if not isinstance(binding, dict) or not binding:
        return "-"
    if binding.get("nodeId"):
        return f"node {binding['nodeId']}"
    if binding.get("channel"):
        account = binding.get("accountId")
        return f"{binding['channel']}/{account}" if account else f"{binding['channel']}/*"
    return ", ".join(f"{k}={v}" for k, v in sorted(binding.items()))


def _list(client: Any, args: argparse.Namespace) -> int:
    payload = client.call("device.token.list", {})
    tokens = payload.get("tokens") if isinstance(payload, dict) else None
    tokens = [t for t in tokens if isinstance(t, dict)] if isinstance(tokens, list) else []
    if args.json:
        print(json.dumps({"tokens": tokens}, indent=2, ensure_ascii=False))
        return 0
    if not tokens:
        print(f"No device tokens. `{PROG} add --role node` pairs a node, `--role client` a client.")
        return 0
    rows = [("ID", "NAME", "ROLE", "BINDING", "LAST SEEN", "EXPIRES")]
    for t in tokens:
        role = str(t.get("role") or "?") + (" (revoked)" if t.get("revoked") else "")
        rows.append(
            (
                str(t.get("tokenId") or "?"),
                str(t.get("name") or ""),
                role,
                binding_text(t.get("binding")),
                when(t.get("lastUsedAt")),
                when(t.get("expiresAt")),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    return 0


def _revoke(client: Any, args: argparse.Namespace) -> int:
    token_id = args.token_id.strip()
    result = client.call("device.token.revoke", {"tokenId": token_id})
    if args.json:
        print(json.dumps(result, indent=2, ensure_ascii=False))
        return 0
    closed = result.get("closed") if isinstance(result, dict) else None
    tail = f"; {closed} open connection{'s' if closed != 1 else ''} closed" if isinstance(closed, int) else ""
    print(f"Revoked {token_id}: the gateway refuses it from now on{tail}.")
    return 0


def _add_params(args: argparse.Namespace) -> dict[str, Any]:
    params: dict[str, Any] = {"role": args.role}
    name = (args.name or "").strip() or (args.node_id or "").strip()
    if name:
        params["name"] = name
    if args.node_id:
        params["nodeId"] = args.node_id.strip()
    if args.channel:
        params["channel"] = args.channel.strip()
    if args.account:
        params["accountId"] = args.account.strip()
    return params


def pair_command(role: str, code: str, url: str, *, node_id: str | None = None, http_url: str | None = None) -> str:
    """The command the new machine runs to trade `code` for its token."""
    words = ["orbital", "node" if role == "node" else "login", "--pair", code]
    if device_token.gateway_key(url) != device_token.gateway_key(local_token.DEFAULT_URL):
        words += ["--url", url]
    if http_url:
        words += ["--http-url", http_url]
    if role == "node" and node_id:
        words += ["--id", node_id]
    return shlex.join(words)


def _add(client: Any, args: argparse.Namespace, url: str) -> int:
    params = _add_params(args)
    if args.direct:
        params.setdefault("name", args.role)
        if args.expires_in_days is not None:
            params["expiresInDays"] = args.expires_in_days
        made = client.call("device.token.create", params)
        if args.json:
            print(json.dumps(made, indent=2, ensure_ascii=False))
            return 0
        made = made if isinstance(made, dict) else {}
        print(
            f"Token {made.get('tokenId', '?')} for {made.get('name', params['name'])!r} ({made.get('role', args.role)}"
            f", {binding_text(made.get('binding'))}, expires {when(made.get('expiresAt'))}). Shown this once:",
            file=sys.stderr,
        )
        print(str(made.get("token", "")))
        print(
            "Keep it in a file only its user can read (chmod 600) and give it with --token-file FILE or "
            f"{local_token.TOKEN_ENV}; never on a command line.",
            file=sys.stderr,
        )
        return 0
    made = client.call("device.pair.create", params)
    if args.json:
        print(json.dumps(made, indent=2, ensure_ascii=False))
        return 0
    made = made if isinstance(made, dict) else {}
    code = str(made.get("code") or "")
    if not code:
        gateway.error(PROG, "the gateway's answer holds no code")
        return 1
    command = pair_command(args.role, code, url, node_id=params.get("nodeId"), http_url=args.http_url)
    print(f"Pairing code: {code}  (one use, until {when(made.get('expiresAt'), never='?')})")
    print("On the new machine, run:")
    print(f"  {command}")
    if local_token.local_url(url):
        where = local_token.redact_url(url)
        print(f"(The gateway listens on {where}: another machine needs an address that reaches it as --url.)")
    try:
        device_token.endpoints(url, args.http_url)
    except ValueError:
        print("(Its HTTP API cannot be told from this URL: add --http-url with the stack's HttpApiUrl output.)")
    return 0
