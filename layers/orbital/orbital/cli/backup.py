"""`orbital backup now|list|restore NAME`: the local backups of a data directory (ADR 0047).

    orbital backup now [--data-dir DIR]            take one: the running gateway does (`backup.run`), else this
                                                   process, with the data directory taken for the time of it
    orbital backup list [--data-dir DIR] [--verify] the backups kept, newest last (`--verify`: read back and hash all)
    orbital backup restore NAME [--data-dir DIR]   put one in place of the data directory (not while a gateway
                                                   runs on it); the replaced one is kept as DIR.replaced-<UTC time>

The backups are where the data directory's configuration says (`backup.dir`, default `<data dir>/backups`), or
`--dir`. Exit status: 0 done, 1 an error (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from orbital.cli import gateway
from orbital.protocol import local_token

PROG = "orbital backup"
ACTIONS = ("now", "list", "restore")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the `backup` subcommand on an argparse subparsers object."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "backup",
        help="take, list or restore local backups of the data directory",
        description=(
            "`now`: take a backup (asks the running gateway, else opens the data directory itself); `list`: the "
            "backups kept; `restore NAME`: replace the data directory with a backup, verified first (refused while "
            "a gateway runs on it; the replaced directory is kept beside it as DIR.replaced-<UTC time>). Backups "
            "hold everything, secrets included, and are readable by you only."
        ),
    )
    parser.add_argument("action", choices=ACTIONS, help="now, list or restore")
    parser.add_argument("name", nargs="?", default=None, metavar="NAME", help="restore: the backup (from `list`)")
    parser.add_argument(
        "--data-dir",
        default=None,
        metavar="DIR",
        help=f"the local data directory (env {local_token.DATA_DIR_ENV}; default {local_token.DEFAULT_DATA_DIR})",
    )
    parser.add_argument(
        "--dir", default=None, metavar="DIR", help="the backup directory (default: backup.dir of its configuration)"
    )
    parser.add_argument("--verify", action="store_true", help="list: read every backup back and hash its files")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--timeout", type=float, default=600.0, metavar="S", help="now: wait this long at most")
    parser.set_defaults(func=run)
    return parser


class BackupCommandError(Exception):
    """Told to the user in one line."""


def run(args: argparse.Namespace) -> int:
    # lazy: only this command needs the local runtime
    from orbital.local.backup import BackupError

    data_dir = local_token.data_dir(args.data_dir)
    try:
        if args.action == "restore":
            if not args.name:
                raise BackupCommandError("restore needs the NAME of a backup (see `orbital backup list`)")
            return _restore(args, data_dir)
        if args.name:
            raise BackupCommandError(f"{args.action} takes no NAME")
        if args.action == "list":
            return _list(args, data_dir)
        return _now(args, data_dir)
    except (BackupCommandError, BackupError, OSError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1


def _directory(args: argparse.Namespace, data_dir: Path) -> Path:
    # lazy: the parser of every `orbital` command imports this module; only this one needs these
    from orbital.local.backup import settings_of, stored_config

    if args.dir:
        return Path(args.dir).expanduser()
    return settings_of(stored_config(data_dir), data_dir).dir


def _now(args: argparse.Namespace, data_dir: Path) -> int:
    # lazy: the parser of every `orbital` command imports this module; only this one needs these
    from orbital.cli.portable import running_gateway

    running = running_gateway(data_dir)
    if running is not None:
        if args.dir:
            raise BackupCommandError("--dir cannot be used while a gateway runs: it backs up to its backup.dir")
        summary = _ask_gateway(running, data_dir, args.timeout)
        where = f"by the gateway running on {data_dir} (pid {running.get('pid')})"
    else:
        summary, where = _take_here(args, data_dir)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(
            f"Backup {summary['name']} taken {where}: {summary['items']} items, {summary['objects']} files, "
            f"{_bytes(int(summary['sizeBytes']))}, verified"
        )
    return 0


def _ask_gateway(running: dict[str, Any], data_dir: Path, timeout: float) -> dict[str, Any]:
    # lazy: the parser of every `orbital` command imports this module; only this one needs it
    from orbital.client import RpcFailedError

    url = str(running.get("wsUrl") or local_token.DEFAULT_URL)
    token = local_token.resolve_token(data_dir_arg=str(data_dir), gateway_url=url)
    try:
        with gateway.connected(url, token, "backup", timeout) as client:
            result = client.call("backup.run", {})
    except RpcFailedError as exc:
        raise BackupCommandError(f"{exc.message} ({exc.code})") from None
    except (OSError, TimeoutError) as exc:
        raise BackupCommandError(f"cannot reach the gateway at {url}: {exc}") from None
    if not isinstance(result, dict):
        raise BackupCommandError("the gateway's answer is not a backup")
    return result


def _take_here(args: argparse.Namespace, data_dir: Path) -> tuple[dict[str, Any], str]:
    # lazy: the parser of every `orbital` command imports this module; only this one needs these
    from orbital.local.backup import settings_of, take
    from orbital.local.server import StartupError, local_state

    if not data_dir.is_dir():
        raise BackupCommandError(f"{data_dir}: no such data directory")
    try:
        with local_state(data_dir) as store:
            settings = settings_of(stored_config(data_dir), data_dir)
            directory = Path(args.dir).expanduser() if args.dir else settings.dir
            taken = take(store, data_dir.expanduser(), directory, keep=settings.keep)
    except StartupError as exc:
        raise BackupCommandError(str(exc)) from None
    return taken.info.to_json(), f"of {data_dir} into {directory}"


def stored_config(data_dir: Path) -> dict[str, Any]:
    # lazy: the parser of every `orbital` command imports this module; only this one needs these
    from orbital.local.backup import stored_config as read

    return read(data_dir)


def _list(args: argparse.Namespace, data_dir: Path) -> int:
    # lazy: the parser of every `orbital` command imports this module; only this one needs these
    from orbital.local.backup import BackupError, list_backups, verify

    directory = _directory(args, data_dir)
    rows = []
    for info in list_backups(directory):
        row = info.to_json()
        if args.verify:
            try:
                verify(directory, info.path, deep=True)
            except BackupError as exc:
                row["verified"] = False
                row["error"] = str(exc)
        rows.append(row)
    if args.json:
        print(json.dumps({"dir": str(directory), "backups": rows}, indent=2))
        return 0 if all(row["verified"] for row in rows) else 1
    if not rows:
        print(f"No backups in {directory}")
        return 0
    print(f"Backups in {directory}:")
    for row in rows:
        state = "verified" if row["verified"] else f"DAMAGED: {row.get('error')}"
        size = _bytes(row["sizeBytes"])
        print(f"  {row['name']}  {row['items']:>7} items  {row['objects']:>6} files  {size:>10}  {state}")
    return 0 if all(row["verified"] for row in rows) else 1


def _restore(args: argparse.Namespace, data_dir: Path) -> int:
    # lazy: the parser of every `orbital` command imports this module; only this one needs these
    from orbital.cli.portable import running_gateway
    from orbital.local.backup import restore

    running = running_gateway(data_dir)
    if running is not None:
        raise BackupCommandError(
            f"a gateway is running on {data_dir} (pid {running.get('pid')}): stop it first (Ctrl-C where it runs), "
            "then restore"
        )
    directory = _directory(args, data_dir)
    aside = restore(data_dir, directory, args.name)
    if args.json:
        replaced = str(aside) if aside else None
        print(json.dumps({"restored": args.name, "dataDir": str(data_dir), "replaced": replaced}, indent=2))
    elif aside is None:
        print(f"Restored backup {args.name} into {data_dir} (there was no data directory)")
    else:
        print(f"Restored backup {args.name} into {data_dir}; the replaced data directory is kept as {aside}")
    return 0


def _bytes(n: int) -> str:
    size = float(n)
    for unit in ("bytes", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{int(size)} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} bytes"
