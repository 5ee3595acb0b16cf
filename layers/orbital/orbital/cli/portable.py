"""`orbital export` and `orbital import`: move an agent's state (configuration, sessions, schedules, workspace) between
a local data directory and a deployed stack, or keep a backup of either.

    orbital export [--data-dir DIR] [--out FILE]            a local data directory (default ~/.orbital)
    orbital export --stack NAME [--region R] [--profile P]   a deployed stack (or --table T --bucket B)
    orbital import FILE --stack NAME | --table T --bucket B | --data-dir DIR

    orbital export --agent ID [FILE] [--data-dir DIR | --stack NAME | ...]   one agent alone
    orbital import FILE [--agent NEWID] [--replace] --data-dir DIR | --stack NAME | ...

With `--agent`, export writes the archive of one agent (`orbital.store.agent_archive`: its sessions, workspace,
cron jobs, heartbeat, usage history, no secret), and import brings such an archive in under its own id or NEWID
(refused if that agent exists, unless `--replace`). An agent archive is recognised by its manifest, so `orbital
import` needs no `--agent` for it.

A local data directory is opened in this process (`orbital.local.server.local_state`: its table and workspace,
`orbital.local.portable`): taken for the time of the command when no gateway runs on it, else, for an export,
read beside the gateway that runs there (named by the `runtime.json` it wrote, whose process is alive). An import
into a data directory is refused while a gateway runs on it. A stack's table and bucket are its outputs
`StateTableName` and `WorkspaceBucketName`, read with your usual AWS credentials (or `--profile`) through
`orbital.store.portable_aws`. The archive format and what is left out are described in `orbital.store.portable`.
Progress goes to stderr, a summary to stdout (`--json` for scripts); any error is one line on stderr and exit
status 1.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orbital.store.portable import Items, Objects

DATA_DIR_ENV = "ORBITAL_DATA_DIR"
DEFAULT_DATA_DIR = "~/.orbital"
RUNTIME_FILE = "runtime.json"
"""Written by a running local gateway into its data directory (readable by its owner only): its pid and URLs."""


class PortableCommandError(Exception):
    """An error told to the user in one line."""


@dataclass
class Store:
    """Where state is read from or written to."""

    items: Items
    objects: Objects
    label: str


def add_parser(subparsers: Any) -> None:
    """Register the `export` and `import` subcommands on an argparse subparsers object."""
    export = subparsers.add_parser(
        "export",
        help="write the agent's state (memory, sessions, config, workspace) to one archive file",
        description=(
            "Write everything that belongs to the agent into one archive: configuration with its secrets, sessions "
            "and messages, pairings, cron jobs and runs, heartbeats, skills and workspace files. The source is a "
            "local data directory (read beside its gateway if one is running), or a deployed stack. The file is "
            "created readable by you only: it holds your API keys. With --agent, only that agent goes (its sessions, "
            "workspace, cron jobs, heartbeat and usage history), and no secret."
        ),
    )
    source = export.add_mutually_exclusive_group()
    source.add_argument(
        "--data-dir",
        default=None,
        metavar="DIR",
        help=f"local data directory (env {DATA_DIR_ENV}; default {DEFAULT_DATA_DIR})",
    )
    source.add_argument("--stack", default=None, metavar="NAME", help="a deployed stack (its table and bucket outputs)")
    source.add_argument("--table", default=None, metavar="T", help="a DynamoDB table (with --bucket)")
    export.add_argument("--bucket", default=None, metavar="B", help="the S3 workspace bucket (with --table)")
    export.add_argument(
        "--agent",
        default=None,
        metavar="ID",
        help="export this one agent alone (its sessions, workspace, cron jobs; never a secret)",
    )
    export.add_argument("file", nargs="?", default=None, metavar="FILE", help="archive to write (same as --out)")
    export.add_argument(
        "-o",
        "--out",
        default=None,
        metavar="FILE",
        help="archive to write, or a directory for it (default ./orbital-export-YYYYmmdd-HHMMSS.zip)",
    )
    _common(export)
    export.set_defaults(func=_cmd_export)

    imp = subparsers.add_parser(
        "import",
        help="write an archive made by `orbital export` into a stack or a local data directory",
        description=(
            "Write the items and files of an archive made by `orbital export` into a deployed stack, an explicit "
            "table and bucket, or a local data directory (not while a gateway runs on it). Items and files with "
            "the same key are replaced, nothing else is touched; what the target already holds unchanged is not "
            "written again, so running it twice is harmless. An archive of one agent (`orbital export --agent`) "
            "is imported under its own id, or the one given with --agent; an agent that already has that id is "
            "refused unless --replace, and nothing of another agent is touched."
        ),
    )
    imp.add_argument("archive", metavar="FILE", help="an archive written by `orbital export`")
    target = imp.add_mutually_exclusive_group(required=True)
    target.add_argument("--stack", default=None, metavar="NAME", help="a deployed stack (its table and bucket outputs)")
    target.add_argument("--table", default=None, metavar="T", help="a DynamoDB table (with --bucket)")
    target.add_argument("--data-dir", default=None, metavar="DIR", help="a local data directory (created if needed)")
    imp.add_argument("--bucket", default=None, metavar="B", help="the S3 workspace bucket (with --table)")
    imp.add_argument(
        "--agent",
        default=None,
        metavar="ID",
        help="import an agent archive under this id (default: the id it was exported with)",
    )
    imp.add_argument("--replace", action="store_true", help="replace an agent that already has that id")
    _common(imp)
    imp.set_defaults(func=_cmd_import)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--region", default=None, metavar="R", help="AWS region of the stack, table and bucket")
    parser.add_argument("--profile", default=None, metavar="P", help="AWS profile to use (default: the usual chain)")
    parser.add_argument(
        "--endpoint-url", default=None, metavar="URL", help="AWS endpoint (an S3/DynamoDB stand-in, for testing)"
    )
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")


# --- commands -------------------------------------------------------------------------------------------------------


def _cmd_export(args: argparse.Namespace) -> int:
    # lazy: only this command needs it (boto3, the archive, the local store)
    from orbital.store.portable import export_state

    if args.file and args.out:
        print("orbital export: give the archive as FILE or as --out, not both", file=sys.stderr)
        return 1
    if args.agent is not None:
        return _cmd_export_agent(args)
    out = _archive_path(args, f"orbital-export-{time.strftime('%Y%m%d-%H%M%S')}.zip")
    done = _export(args, lambda store, bar: export_state(store.items, store.objects, out, bar))
    if isinstance(done, int):
        return done
    manifest, store = done
    if args.json:
        return _print_summary(out, manifest.to_json())
    items = sum(manifest.item_counts.values())
    files = len(manifest.objects)
    print(
        f"Exported {items} items and {files} files ({_bytes(manifest.object_bytes)}) from {store.label} to {out}",
        flush=True,
    )
    print(f"  items     {_kinds(manifest.item_counts)}")
    print(f"  files     {_kinds(manifest.object_counts)}")
    skipped = dict(manifest.skipped_items)
    expired = skipped.pop("expired", 0)
    left_out = [f"{expired} expired items"] if expired else []
    if skipped:
        left_out.append(f"live state {_kinds(skipped)}")
    if manifest.skipped_objects:
        left_out.append(f"files in flight {_kinds(manifest.skipped_objects)}")
    if left_out:
        print(f"  left out  {'; '.join(left_out)}")
    print("The archive holds your API keys and tokens: keep it private (it is readable by you only).")
    return 0


def _archive_path(args: argparse.Namespace, name: str) -> Path:
    """Where `orbital export` writes: FILE or --out (a directory gets `name` in it), else `name` here."""
    given = args.file or args.out
    out = Path(given).expanduser() if given else Path.cwd() / name
    return out / name if out.is_dir() else out


def _export(args: argparse.Namespace, write: Callable[[Store, _Bar], Any]) -> tuple[Any, Store] | int:
    """`write(store, bar)` the archive from the source the arguments name: its manifest and the store, or the exit
    status after saying on stderr why nothing was written."""
    try:
        _check_args(args)
        with _source(args) as store, _Bar(enabled=not args.json) as bar:
            return write(store, bar), store
    except KeyboardInterrupt:
        print("orbital export: interrupted (no archive written)", file=sys.stderr)
        return 130
    except Exception as exc:
        print(f"orbital export: {_describe(exc)}", file=sys.stderr)
        return 1


def _print_summary(out: Path, manifest: dict[str, Any]) -> int:
    summary = {k: v for k, v in manifest.items() if k != "objects"}
    print(json.dumps({"archive": str(out), **summary}, indent=2))
    return 0


def _cmd_export_agent(args: argparse.Namespace) -> int:
    # lazy: only this command needs it (boto3, the archive, the local store)
    from orbital.store.agent_archive import check_agent_id, export_agent

    out = _archive_path(args, f"orbital-agent-{args.agent}-{time.strftime('%Y%m%d-%H%M%S')}.zip")
    try:
        agent = check_agent_id(args.agent)
    except Exception as exc:
        print(f"orbital export: {_describe(exc)}", file=sys.stderr)
        return 1
    done = _export(args, lambda store, bar: export_agent(store.items, store.objects, agent, out, progress=bar))
    if isinstance(done, int):
        return done
    manifest, store = done
    if args.json:
        return _print_summary(out, manifest.to_json())
    items = sum(manifest.item_counts.values())
    print(
        f"Exported agent {agent}: {items} items and {len(manifest.objects)} files ({_bytes(manifest.object_bytes)}) "
        f"from {store.label} to {out}",
        flush=True,
    )
    print(f"  items     {_kinds(manifest.item_counts)}")
    print(f"  files     {_kinds(manifest.object_counts)}")
    _print_expects(manifest.expects)
    print("The archive holds no API key or token; it holds the agent's memory and conversations: keep it private.")
    return 0


def _print_expects(expects: dict[str, Any]) -> None:
    secrets = expects.get("secrets") or []
    bindings = expects.get("bindings") or []
    if secrets:
        print(f"  expects   {', '.join(secrets)} (set them where the agent goes: they are not in the archive)")
    if bindings:
        print(f"  bindings  {len(bindings)} listed in the archive, not made active by an import")


def _cmd_import_agent(args: argparse.Namespace, archive: Path) -> int:
    # lazy: only this command needs it (boto3, the archive, the local store)
    from orbital.store.agent_archive import check_agent_id, import_agent, read_agent_manifest

    try:
        _check_args(args)
        manifest = read_agent_manifest(archive)  # a foreign file is refused before any target is opened
        agent = check_agent_id(args.agent) if args.agent is not None else manifest.agent_id
        with _target(args) as store, _Bar(enabled=not args.json) as bar:
            report = import_agent(store.items, store.objects, archive, agent, replace=args.replace, progress=bar)
    except KeyboardInterrupt:
        print("orbital import: interrupted (run it again with --replace to finish)", file=sys.stderr)
        return 130
    except Exception as exc:
        print(f"orbital import: {_describe(exc)}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"archive": str(archive), "target": store.label, **report.to_json()}, indent=2))
        return 0
    as_what = f" as {agent}" if agent != manifest.agent_id else ""
    print(f"Imported agent {manifest.agent_id}{as_what} from {archive} into {store.label}", flush=True)
    print(f"  {report.items} items ({report.sessions} sessions, {report.cron_jobs} cron jobs), {report.objects} files")
    if report.replaced_items or report.replaced_objects:
        print(f"  replaced  {report.replaced_items} items and {report.replaced_objects} files of the former {agent}")
    _print_expects(report.expects)
    return 0


def _cmd_import(args: argparse.Namespace) -> int:
    # lazy: only this command needs it (boto3, the archive, the local store)
    from orbital.store.agent_archive import is_agent_archive
    from orbital.store.portable import read_manifest
    from orbital.store.portable_import import import_state

    archive = Path(args.archive)
    if is_agent_archive(archive):
        return _cmd_import_agent(args, archive)
    if args.agent is not None or args.replace:
        print(
            f"orbital import: {archive} is not one agent's archive (--agent and --replace apply to archives written "
            "by `orbital export --agent`)",
            file=sys.stderr,
        )
        return 1
    try:
        _check_args(args)
        manifest = read_manifest(archive)  # a foreign file is refused before any target is opened
        with _target(args) as store, _Bar(enabled=not args.json) as bar:
            report = import_state(store.items, store.objects, archive, bar)
    except KeyboardInterrupt:
        print("orbital import: interrupted (what was written is complete; run it again to finish)", file=sys.stderr)
        return 130
    except Exception as exc:
        print(f"orbital import: {_describe(exc)}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"archive": str(archive), "target": store.label, **report.to_json()}, indent=2))
        return 0
    made = f"exported {manifest.created_at}" + (
        f" by Orbital {manifest.orbital_version}" if manifest.orbital_version else ""
    )
    print(f"Imported {archive} ({made}) into {store.label}", flush=True)
    items = f"{report.items_written} written, {report.items_unchanged} unchanged"
    if report.items_kept:
        items += f", {report.items_kept} counters kept (the target's were ahead)"
    if report.items_expired:
        items += f", {report.items_expired} expired since the export"
    print(f"  items  {items}")
    print(f"  files  {report.objects_written} written, {report.objects_unchanged} unchanged")
    return 0


def _check_args(args: argparse.Namespace) -> None:
    if bool(args.table) != bool(args.bucket):
        raise PortableCommandError("--table and --bucket go together")
    if not (args.stack or args.table) and (args.region or args.profile or args.endpoint_url):
        raise PortableCommandError("--region, --profile and --endpoint-url apply to --stack or --table")


# --- sources and targets ---------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _source(args: argparse.Namespace) -> Iterator[Store]:
    if args.stack or args.table:
        yield _aws_store(args)
        return
    data_dir = Path(args.data_dir or os.environ.get(DATA_DIR_ENV) or DEFAULT_DATA_DIR).expanduser()
    if not data_dir.is_dir():
        raise PortableCommandError(f"{data_dir}: no such data directory")
    with _local(data_dir, writing=False) as store:
        yield store


@contextlib.contextmanager
def _target(args: argparse.Namespace) -> Iterator[Store]:
    if args.stack or args.table:
        yield _aws_store(args)
        return
    with _local(Path(args.data_dir).expanduser(), writing=True) as store:
        yield store


def _aws_store(args: argparse.Namespace) -> Store:
    # lazy: only this command needs it (boto3, the archive, the local store)
    from orbital.aws.clients import explicit_client
    from orbital.store.portable_aws import DynamoItems, S3Objects, stack_resources

    def make(service: str) -> Any:
        return explicit_client(service, endpoint_url=args.endpoint_url, region=args.region, profile=args.profile)

    if args.stack:
        table, bucket = stack_resources(make("cloudformation"), args.stack)
        label = f"stack {args.stack} (table {table}, bucket {bucket})"
    else:
        table, bucket = args.table, args.bucket
        label = f"table {table} and bucket {bucket}"
    return Store(DynamoItems(make("dynamodb"), table), S3Objects(make("s3"), bucket), label)


@contextlib.contextmanager
def _local(data_dir: Path, *, writing: bool) -> Iterator[Store]:
    """A local data directory: taken by this process while no gateway runs on it; else, to read, opened beside the
    gateway (which goes on serving)."""
    # lazy: only this command needs it (boto3, the archive, the local store)
    from orbital.local.portable import TableItems, WorkspaceObjects
    from orbital.local.server import StartupError, local_state

    running = running_gateway(data_dir)
    with contextlib.ExitStack() as stack:
        if running is None:
            try:
                state = stack.enter_context(local_state(data_dir))
            except StartupError as exc:  # a gateway (or another tool) holds the directory
                running = running_gateway(data_dir)
                if running is None:
                    raise PortableCommandError(f"cannot open {data_dir}: {exc}") from None
            else:
                label = f"the data directory {data_dir}"
        if running is not None:
            if writing:
                raise PortableCommandError(
                    f"a gateway is running on {data_dir} (pid {running.get('pid')}): stop it first (Ctrl-C where it "
                    "runs), then import again"
                )
            state = stack.enter_context(local_state(data_dir, exclusive=False))
            label = f"the data directory {data_dir}, beside the gateway running on it (pid {running.get('pid')})"
        yield Store(TableItems(state.table), WorkspaceObjects(state.workspace), label)


def running_gateway(data_dir: Path) -> dict[str, Any] | None:
    """What the gateway running on `data_dir` wrote about itself, or None when none runs there (no runtime.json, or
    its process is gone)."""
    try:
        info = json.loads((data_dir / RUNTIME_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict):
        return None
    pid = info.get("pid")
    return info if isinstance(pid, int) and _alive(pid) else None


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    except OSError:
        return False
    return True


# --- output -----------------------------------------------------------------------------------------------------------


class _Bar:
    """Progress on stderr while it is a terminal: one bar per phase (`verify`, `items`, `objects`)."""

    LABELS = {"verify": "checking archive", "items": "table items", "objects": "files"}

    def __init__(self, *, enabled: bool) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        console = Console(stderr=True)
        self._progress = Progress(
            TextColumn("{task.description:<16}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
            disable=not (enabled and console.is_terminal),
        )
        self._tasks: dict[str, Any] = {}

    def __enter__(self) -> _Bar:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def __call__(self, kind: str, done: int, total: int | None) -> None:
        task = self._tasks.get(kind)
        if task is None:
            task = self._tasks[kind] = self._progress.add_task(self.LABELS.get(kind, kind), total=total)
        self._progress.update(task, completed=done, total=total)


def _kinds(counts: dict[str, int]) -> str:
    return ", ".join(f"{kind} {n}" for kind, n in sorted(counts.items())) or "none"


def _bytes(n: int) -> str:
    size = float(n)
    for unit in ("bytes", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{int(size)} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} bytes"


def _describe(exc: BaseException) -> str:
    """One line for the user: the AWS error code and message, or the error itself (never any state)."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict) and isinstance(response.get("Error"), dict):
        error = response["Error"]
        operation = getattr(exc, "operation_name", None)
        where = f" ({operation})" if operation else ""
        return f"{error.get('Code', 'Error')}: {error.get('Message', '')}{where}".strip()
    from botocore.exceptions import BotoCoreError, NoCredentialsError

    # lazy: only this command needs it (boto3, the archive, the local store)
    from orbital.store.portable import PortableError

    if isinstance(exc, NoCredentialsError):
        return "no AWS credentials found: configure them (aws configure, AWS_PROFILE) or pass --profile"
    if isinstance(exc, PortableCommandError | PortableError | BotoCoreError | ValueError | OSError):
        return str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {exc}"
