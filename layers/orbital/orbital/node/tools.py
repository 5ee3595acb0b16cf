"""The node's tools (spec §17.2): Bash, Process, Read, Write, Edit, Glob, Grep."""

from __future__ import annotations

import base64
import fnmatch
import glob
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from orbital.domain.sniff import IMAGE_MIMES, guess_mime, human_size, sniff_mime
from orbital.node.process import CommandError, ProcessManager

IMAGE_MAX_BYTES = 10 * 1024 * 1024
GLOB_MAX_RESULTS = 1000
GLOB_MAX_SCANNED = 50_000
GREP_MAX_MATCHES = 100
GREP_MAX_LINE_CHARS = 200
GREP_MAX_FILE_BYTES = 10 * 1024 * 1024
GREP_SKIP_DIRS = frozenset({".git", ".hg", ".svn"})


class NodeToolError(Exception):
    """A tool failure reported to the gateway as `tool.result {callId, error}`."""


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required}


TOOL_DEFINITIONS: list[dict[str, Any]] = [
    {
        "name": "Bash",
        "description": (
            "Run a shell command on this machine ($SHELL -lc, else /bin/sh). stdout and stderr are merged. "
            "Use background:true (or yieldMs) for long-running commands and manage them with the Process tool."
        ),
        "inputSchema": _schema(
            {
                "command": {"type": "string", "description": "Shell command to run."},
                "workdir": {
                    "type": "string",
                    "description": "Working directory (relative paths are under the node workspace).",
                },
                "timeout": {
                    "type": "number",
                    "description": "Timeout in milliseconds (default 300000; 0 disables). Applies to background "
                    "sessions too.",
                },
                "background": {
                    "type": "boolean",
                    "description": "Start in the background and return a sessionId at once.",
                },
                "yieldMs": {
                    "type": "number",
                    "description": "Wait this many milliseconds (10-120000), then background the command if it is "
                    "still running.",
                },
            },
            ["command"],
        ),
    },
    {
        "name": "Process",
        "description": (
            "Manage background sessions started by Bash: list, poll, log (offset/limit in lines), write/submit "
            "to stdin (submit adds a newline), kill."
        ),
        "inputSchema": _schema(
            {
                "action": {"type": "string", "enum": ["list", "poll", "log", "write", "submit", "kill"]},
                "sessionId": {"type": "string", "description": "Session id returned by Bash."},
                "data": {"type": "string", "description": "Text for write/submit."},
                "offset": {"type": "number", "description": "First log line (0-based, default 0)."},
                "limit": {"type": "number", "description": "Number of log lines (default 200)."},
            },
            ["action"],
        ),
    },
    {
        "name": "Read",
        "description": (
            "Read a file. Text comes back with line numbers; images (png, jpeg, gif, webp up to 10 MB) come back as "
            "images."
        ),
        "inputSchema": _schema(
            {
                "path": {"type": "string", "description": "File path (relative paths are under the node workspace)."},
                "offset": {"type": "number", "description": "First line to read (0-based)."},
                "limit": {"type": "number", "description": "Maximum number of lines."},
            },
            ["path"],
        ),
    },
    {
        "name": "Write",
        "description": "Write a file (creating parent directories), replacing any existing content.",
        "inputSchema": _schema(
            {
                "path": {"type": "string", "description": "File path."},
                "content": {"type": "string", "description": "Full file content."},
            },
            ["path", "content"],
        ),
    },
    {
        "name": "Edit",
        "description": (
            "Replace an exact string in a file. oldString must match exactly once unless replaceAll is true. "
            "The replacement is literal."
        ),
        "inputSchema": _schema(
            {
                "path": {"type": "string", "description": "File path."},
                "oldString": {"type": "string", "description": "Exact text to find."},
                "newString": {"type": "string", "description": "Replacement text."},
                "replaceAll": {"type": "boolean", "description": "Replace every occurrence."},
            },
            ["path", "oldString", "newString"],
        ),
    },
    {
        "name": "Glob",
        "description": "Find files by glob pattern (e.g. **/*.py); absolute paths, newest first.",
        "inputSchema": _schema(
            {
                "pattern": {"type": "string", "description": "Glob pattern; ** matches any depth, {a,b} alternatives."},
                "path": {"type": "string", "description": "Directory to search (default: the node workspace)."},
            },
            ["pattern"],
        ),
    },
    {
        "name": "Grep",
        "description": "Search file contents with a regular expression; returns up to 100 matching lines.",
        "inputSchema": _schema(
            {
                "pattern": {"type": "string", "description": "Regular expression."},
                "path": {"type": "string", "description": "File or directory (default: the node workspace)."},
                "include": {"type": "string", "description": "File name glob, e.g. *.py or *.{ts,tsx}."},
            },
            ["pattern"],
        ),
    },
]

TOOL_NAMES = [d["name"] for d in TOOL_DEFINITIONS]


# -- argument helpers ---------------------------------------------------------------------------------------------
def _required_str(args: dict[str, Any], key: str) -> str:
    value = args.get(key)
    if not isinstance(value, str):
        raise NodeToolError(f"{key} is required")
    return value


def _optional_int(args: dict[str, Any], key: str, *, minimum: int) -> int | None:
    value = args.get(key)
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise NodeToolError(f"{key} must be a number") from None
    if not isinstance(value, int | float) or value != value:
        raise NodeToolError(f"{key} must be a number")
    return max(minimum, int(value))


def resolve_path(workspace: Path, raw: str) -> Path:
    """Absolute paths pass through; relative ones are under the workspace; `~` expands. Symlinks are kept."""
    path = Path(raw).expanduser()
    if not path.is_absolute():
        path = workspace / path
    return Path(os.path.normpath(path))


def expand_braces(pattern: str) -> list[str]:
    """`*.{ts,tsx}` -> [`*.ts`, `*.tsx`] (nested braces expand too; unbalanced braces stay literal)."""
    start = pattern.find("{")
    while start != -1:
        depth = 0
        for end in range(start, len(pattern)):
            ch = pattern[end]
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    break
        else:
            return [pattern]
        body = pattern[start + 1 : end]
        parts, depth, last = [], 0, 0
        for i, ch in enumerate(body):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == "," and depth == 0:
                parts.append(body[last:i])
                last = i + 1
        parts.append(body[last:])
        if len(parts) > 1:
            head, tail = pattern[:start], pattern[end + 1 :]
            out: list[str] = []
            for part in parts:
                for expanded in expand_braces(head + part + tail):
                    if expanded not in out:
                        out.append(expanded)
            return out
        start = pattern.find("{", end + 1)
    return [pattern]


def _errtext(exc: OSError) -> str:
    return exc.strerror or str(exc)


# -- the tools ----------------------------------------------------------------------------------------------------
class NodeTools:
    """Runs one tool call by exact name. Blocking: the agent calls it from a worker thread."""

    def __init__(self, workspace: Path, processes: ProcessManager | None = None) -> None:
        self.workspace = workspace
        self.processes = processes or ProcessManager(workspace)
        self._handlers: dict[str, Callable[[dict[str, Any], str | None], Any]] = {
            "Bash": self._bash,
            "Process": self._process,
            "Read": self._read,
            "Write": self._write,
            "Edit": self._edit,
            "Glob": self._glob,
            "Grep": self._grep,
        }

    @staticmethod
    def definitions() -> list[dict[str, Any]]:
        return [dict(d) for d in TOOL_DEFINITIONS]

    def execute(self, name: Any, args: Any, call_id: str | None = None) -> Any:
        handler = self._handlers.get(name) if isinstance(name, str) else None
        if handler is None:
            raise NodeToolError(f"Tool not found: {name}")
        if args is None:
            args = {}
        if not isinstance(args, dict):
            raise NodeToolError("args must be an object")
        return handler(args, call_id)

    def _path(self, args: dict[str, Any], key: str = "path") -> Path:
        raw = _required_str(args, key)
        if not raw.strip():
            raise NodeToolError(f"{key} is required")
        return resolve_path(self.workspace, raw)

    # Bash / Process
    def _bash(self, args: dict[str, Any], call_id: str | None) -> Any:
        try:
            return self.processes.bash(args, call_id)
        except CommandError as exc:
            raise NodeToolError(str(exc)) from None

    def _process(self, args: dict[str, Any], call_id: str | None) -> Any:
        return self.processes.process(args)

    # Read
    def _read(self, args: dict[str, Any], call_id: str | None) -> Any:
        path = self._path(args)
        offset = _optional_int(args, "offset", minimum=0) or 0
        limit = _optional_int(args, "limit", minimum=1)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise NodeToolError(f"Failed to read '{path}': {_errtext(exc)}") from None
        size = len(data)
        magic = sniff_mime(data[:16])
        if magic in IMAGE_MIMES:
            if size > IMAGE_MAX_BYTES:
                raise NodeToolError(f"Image file too large ({magic}, {human_size(size)}) - the limit is 10 MB")
            return {
                "content": [
                    {"type": "text", "text": f"Read image file {path} [{magic}, {human_size(size)}]"},
                    {"type": "image", "data": base64.b64encode(data).decode("ascii"), "mimeType": magic},
                ]
            }
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        if text is None or "\x00" in text:
            mime = magic or guess_mime(b"", path.name)
            kind = mime or "unknown type"
            raise NodeToolError(f"Binary file ({kind}, {human_size(size)}) - not a text file")
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        end = len(lines) if limit is None else offset + limit
        window = lines[offset:end]
        content = "\n".join(f"{offset + i + 1:>6}\t{line.removesuffix(chr(13))}" for i, line in enumerate(window))
        return {"path": str(path), "content": content, "lines": len(window)}

    # Write
    def _write(self, args: dict[str, Any], call_id: str | None) -> Any:
        path = self._path(args)
        content = _required_str(args, "content")
        data = content.encode("utf-8")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise NodeToolError(f"Failed to create directory '{path.parent}': {_errtext(exc)}") from None
        try:
            path.write_bytes(data)
        except OSError as exc:
            raise NodeToolError(f"Failed to write '{path}': {_errtext(exc)}") from None
        return {"path": str(path), "bytes": len(data)}

    # Edit
    def _edit(self, args: dict[str, Any], call_id: str | None) -> Any:
        path = self._path(args)
        old = _required_str(args, "oldString")
        new = _required_str(args, "newString")
        replace_all = args.get("replaceAll") is True
        if old == "":
            raise NodeToolError("oldString must not be empty")
        try:
            text = path.read_bytes().decode("utf-8")
        except OSError as exc:
            raise NodeToolError(f"Failed to read '{path}': {_errtext(exc)}") from None
        except UnicodeDecodeError:
            raise NodeToolError(f"Failed to read '{path}': not a UTF-8 text file") from None
        count = text.count(old)
        if count == 0:
            raise NodeToolError(f"oldString not found in '{path}'")
        if count > 1 and not replace_all:
            raise NodeToolError(
                f"oldString found {count} times in '{path}'. "
                "Use replaceAll: true or provide more context to make it unique."
            )
        # str.replace is literal: `$1`, `\1` and friends are inserted as written
        updated = text.replace(old, new) if replace_all else text.replace(old, new, 1)
        try:
            path.write_bytes(updated.encode("utf-8"))
        except OSError as exc:
            raise NodeToolError(f"Failed to write '{path}': {_errtext(exc)}") from None
        return {"path": str(path), "replacements": count if replace_all else 1}

    # Glob
    def _glob(self, args: dict[str, Any], call_id: str | None) -> Any:
        pattern = _required_str(args, "pattern")
        if not pattern.strip():
            raise NodeToolError("pattern is required")
        raw_base = args.get("path")
        base = (
            resolve_path(self.workspace, raw_base)
            if isinstance(raw_base, str) and raw_base.strip()
            else (self.workspace)
        )
        if not base.is_dir():
            raise NodeToolError(f"Directory not found: {base}")
        found: dict[str, float] = {}
        scanned_all = True
        for pat in expand_braces(pattern):
            expanded = Path(pat).expanduser()
            if expanded.is_absolute():
                iterator = glob.iglob(str(expanded), recursive=True)  # noqa: PTH207 - Path.glob has no absolute form
            else:
                iterator = glob.iglob(pat, root_dir=base, recursive=True)  # noqa: PTH207 - brace-free glob semantics
            for match in iterator:
                full = os.path.normpath(base / match)
                if full in found:
                    continue
                try:
                    found[full] = Path(full).stat().st_mtime
                except OSError:
                    found[full] = 0.0
                if len(found) >= GLOB_MAX_SCANNED:
                    scanned_all = False
                    break
            if not scanned_all:
                break
        ordered = sorted(found.items(), key=lambda item: (-item[1], item[0]))
        matches = [p for p, _ in ordered[:GLOB_MAX_RESULTS]]
        result: dict[str, Any] = {"pattern": pattern, "basePath": str(base), "matches": matches, "count": len(matches)}
        if len(ordered) > GLOB_MAX_RESULTS or not scanned_all:
            result["truncated"] = True
        return result

    # Grep
    def _grep(self, args: dict[str, Any], call_id: str | None) -> Any:
        pattern = _required_str(args, "pattern")
        try:
            regex = re.compile(pattern)
        except re.error as exc:
            raise NodeToolError(f"Invalid regex pattern: {exc}") from None
        raw_base = args.get("path")
        base = (
            resolve_path(self.workspace, raw_base)
            if isinstance(raw_base, str) and raw_base.strip()
            else (self.workspace)
        )
        if not base.exists():
            raise NodeToolError(f"Path not found: {base}")
        include = args.get("include")
        includes = expand_braces(include) if isinstance(include, str) and include.strip() else None
        matches: list[dict[str, Any]] = []
        for file in _walk_files(base):
            if includes is not None and not any(fnmatch.fnmatch(file.name, inc) for inc in includes):
                continue
            text = _read_text_for_grep(file)
            if text is None:
                continue
            for number, line in enumerate(text.split("\n"), start=1):
                line = line.removesuffix("\r")
                if regex.search(line):
                    matches.append({"path": str(file), "line": number, "content": line[:GREP_MAX_LINE_CHARS]})
                    if len(matches) >= GREP_MAX_MATCHES:
                        return {"pattern": pattern, "basePath": str(base), "matches": matches, "truncated": True}
        return {"pattern": pattern, "basePath": str(base), "matches": matches, "count": len(matches)}


def _walk_files(base: Path) -> Iterator[Path]:
    """Files under base in name order, following symlinks without looping; VCS internals are skipped."""
    if base.is_file():
        yield base
        return
    seen: set[str] = set()
    for root, dirs, files in os.walk(base, followlinks=True):
        real = os.path.realpath(root)
        if real in seen:
            dirs[:] = []
            continue
        seen.add(real)
        dirs[:] = sorted(d for d in dirs if d not in GREP_SKIP_DIRS)
        for name in sorted(files):
            yield Path(root) / name


def _read_text_for_grep(file: Path) -> str | None:
    try:
        if not file.is_file() or file.stat().st_size > GREP_MAX_FILE_BYTES:
            return None
        text = file.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    return None if "\x00" in text else text
