"""Node logging: JSON lines to a rotating file (served by `logs.get`) and short lines on stderr."""

from __future__ import annotations

import json
import logging
import logging.handlers
import sys
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

LOGGER_NAME = "orbital.node"
MAX_BYTES = 10 * 1024 * 1024
BACKUP_COUNT = 5
DEFAULT_LINES = 100
MAX_LINES = 5000

log = logging.getLogger(LOGGER_NAME)


def default_log_file() -> Path:
    return Path.home() / ".orbital" / "node" / "node.log"


class JsonLineFormatter(logging.Formatter):
    """One JSON object per line: ts, level, msg and the record's `fields` (never secrets: callers pass names only)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            for key, value in fields.items():
                entry.setdefault(key, value)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


class ConsoleFilter(logging.Filter):
    """Quiet stderr: warnings and errors, plus info lines marked `console` (connected, reconnecting, stopped)."""

    def __init__(self, verbose: bool) -> None:
        super().__init__()
        self.verbose = verbose

    def filter(self, record: logging.LogRecord) -> bool:
        return self.verbose or record.levelno >= logging.WARNING or bool(getattr(record, "console", False))


def configure_logging(log_file: Path | None, *, verbose: bool = False) -> Callable[[], None]:
    """Attach the file and stderr handlers to the node logger; returns a function that removes them again."""
    handlers: list[logging.Handler] = []
    console = logging.StreamHandler(sys.stderr)
    console.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S"))
    console.addFilter(ConsoleFilter(verbose))
    handlers.append(console)
    file_error: str | None = None
    if log_file is not None:
        try:
            log_file.parent.mkdir(parents=True, exist_ok=True)
            file_handler = logging.handlers.RotatingFileHandler(
                log_file, maxBytes=MAX_BYTES, backupCount=BACKUP_COUNT, encoding="utf-8"
            )
        except OSError as exc:
            file_error = f"cannot open log file {log_file}: {exc.strerror or exc}"
        else:
            file_handler.setFormatter(JsonLineFormatter())
            handlers.append(file_handler)
    previous_level = log.level
    previous_propagate = log.propagate
    log.setLevel(logging.DEBUG if verbose else logging.INFO)
    log.propagate = False
    for handler in handlers:
        log.addHandler(handler)
    if file_error:
        log.warning(file_error)

    def undo() -> None:
        for handler in handlers:
            log.removeHandler(handler)
            handler.close()
        log.setLevel(previous_level)
        log.propagate = previous_propagate

    return undo


def clamp_lines(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        return DEFAULT_LINES
    if value in (float("inf"), float("-inf")):
        return MAX_LINES if value > 0 else 1
    return min(max(int(value), 1), MAX_LINES)


def tail_lines(path: Path, count: int) -> tuple[list[str], bool]:
    """The last `count` lines of a file and whether it had more. Raises OSError when it cannot be read."""
    last: deque[str] = deque(maxlen=count)
    total = 0
    with path.open("r", encoding="utf-8", errors="replace", newline="") as fh:
        for line in fh:
            total += 1
            last.append(line.rstrip("\r\n"))
    return list(last), total > count
