"""Shell commands for the Bash and Process tools: foreground runs, background sessions, timeouts, exec events."""

from __future__ import annotations

import codecs
import contextlib
import os
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orbital.node.runtime import HIDDEN_ENV

OUTPUT_CAP = 200_000
TAIL_CHARS = 4_000
DEFAULT_TIMEOUT_MS = 300_000
KILL_GRACE_S = 0.25
FINISHED_TTL_S = 30 * 60
YIELD_MIN_MS = 10
YIELD_MAX_MS = 120_000
LOG_DEFAULT_LIMIT = 200
READER_JOIN_S = 1.0

POSIX = os.name == "posix"

ExecEventSink = Callable[[dict[str, Any]], None]


class CommandError(Exception):
    """A Bash call that cannot start (reported as a tool error)."""


def now_ms() -> int:
    return int(time.time() * 1000)


def resolve_shell() -> str:
    """$SHELL when it is an absolute path to an executable, else /bin/sh."""
    shell = os.environ.get("SHELL", "")
    if shell and Path(shell).is_absolute() and Path(shell).is_file() and os.access(shell, os.X_OK):
        return shell
    return "/bin/sh"


def command_env() -> dict[str, str]:
    """The node's environment minus its own secrets (a command must not be able to print the gateway token)."""
    return {k: v for k, v in os.environ.items() if k not in HIDDEN_ENV}


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value) if value == value else None
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return value is True


class OutputBuffer:
    """Merged stdout+stderr of one command, keeping at most OUTPUT_CAP characters (the tail)."""

    def __init__(self, cap: int = OUTPUT_CAP) -> None:
        self._cap = cap
        self._text = ""
        self._lock = threading.Lock()
        self.truncated = False

    def append(self, chunk: str) -> None:
        if not chunk:
            return
        with self._lock:
            text = self._text + chunk
            if len(text) > self._cap:
                text = text[-self._cap :]
                self.truncated = True
            self._text = text

    def text(self) -> str:
        with self._lock:
            return self._text

    def tail(self, chars: int = TAIL_CHARS) -> str:
        with self._lock:
            return self._text[-chars:]


@dataclass
class ExecSession:
    session_id: str
    command: str
    workdir: str
    proc: subprocess.Popen[bytes]
    started_at: int
    timeout_ms: int
    call_id: str | None
    output: OutputBuffer = field(default_factory=OutputBuffer)
    ended_at: int | None = None
    exit_code: int | None = None
    signal: str | None = None
    timed_out: bool = False
    finished: bool = False
    backgrounded: bool = False
    finished_mono: float | None = None
    done: threading.Event = field(default_factory=threading.Event)
    stdin_lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def status(self) -> str:
        if not self.finished:
            return "running"
        return "completed" if self.exit_code == 0 and not self.timed_out else "failed"

    @property
    def event(self) -> str:
        if self.timed_out:
            return "timed_out"
        return "finished" if self.exit_code == 0 else "failed"


class ProcessManager:
    """Starts commands and keeps backgrounded ones (finished sessions stay listed for 30 minutes)."""

    def __init__(self, workspace: Path, on_event: ExecEventSink | None = None) -> None:
        self.workspace = workspace
        self.on_event = on_event
        self._sessions: dict[str, ExecSession] = {}
        self._running: dict[str, ExecSession] = {}
        self._lock = threading.Lock()
        self._closed = False

    # -- Bash -------------------------------------------------------------------------------------------------
    def bash(self, args: dict[str, Any], call_id: str | None = None) -> dict[str, Any]:
        command = args.get("command")
        if not isinstance(command, str) or not command.strip():
            raise CommandError("command must not be empty")
        workdir = self._workdir(args.get("workdir"))
        timeout = _number(args.get("timeout"))
        timeout_ms = DEFAULT_TIMEOUT_MS if timeout is None or timeout < 0 else int(timeout)
        background = _truthy(args.get("background"))
        yield_raw = _number(args.get("yieldMs"))
        yield_ms = None if yield_raw is None else int(min(max(yield_raw, YIELD_MIN_MS), YIELD_MAX_MS))
        interactive = background or yield_ms is not None
        if self._closed:
            raise CommandError("node is shutting down")
        self._prune()
        try:
            proc = subprocess.Popen(
                [resolve_shell(), "-lc", command],
                cwd=workdir,
                stdin=subprocess.PIPE if interactive else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=POSIX,
                env=command_env(),
            )
        except OSError as exc:
            raise CommandError(f"Failed to start command: {exc.strerror or exc}") from None
        session = ExecSession(
            session_id=uuid.uuid4().hex[:12],
            command=command,
            workdir=workdir,
            proc=proc,
            started_at=now_ms(),
            timeout_ms=timeout_ms,
            call_id=call_id,
        )
        with self._lock:
            self._running[session.session_id] = session
        reader = threading.Thread(target=self._read_output, args=(session,), name="orbital-exec-out", daemon=True)
        reader.start()
        threading.Thread(target=self._watch, args=(session, reader), name="orbital-exec-wait", daemon=True).start()
        if background:
            self._background(session, always=True)
            return self._running_result(session)
        if yield_ms is not None and not session.done.wait(yield_ms / 1000) and self._background(session):
            return self._running_result(session)
        session.done.wait()
        return self._completed_result(session)

    def _workdir(self, raw: Any) -> str:
        if raw is None or (isinstance(raw, str) and not raw.strip()):
            path = self.workspace
        elif isinstance(raw, str):
            candidate = Path(raw.strip()).expanduser()
            path = candidate if candidate.is_absolute() else self.workspace / candidate
        else:
            raise CommandError("workdir must be a string")
        path = Path(os.path.normpath(path))
        if not path.is_dir():
            raise CommandError(f"workdir does not exist: {path}")
        return str(path)

    def _background(self, session: ExecSession, *, always: bool = False) -> bool:
        """Register a session as backgrounded. A session that already finished is registered only with `always`
        (background:true promised a sessionId); its end event follows the started event at once."""
        with self._lock:
            if session.finished and not always:
                return False
            session.backgrounded = True
            self._sessions[session.session_id] = session
            self._emit(session, "started")
            if session.finished:
                self._emit(session, session.event)
        return True

    def _read_output(self, session: ExecSession) -> None:
        stream = session.proc.stdout
        if stream is None:
            return
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        fd = stream.fileno()
        try:
            while True:
                data = os.read(fd, 65536)
                if not data:
                    break
                session.output.append(decoder.decode(data))
        except OSError:
            pass
        session.output.append(decoder.decode(b"", final=True))
        with contextlib.suppress(OSError):
            stream.close()

    def _watch(self, session: ExecSession, reader: threading.Thread) -> None:
        proc = session.proc
        try:
            code = proc.wait(timeout=session.timeout_ms / 1000 if session.timeout_ms > 0 else None)
        except subprocess.TimeoutExpired:
            session.timed_out = True
            terminate(proc)
            code = proc.wait()
        # a command that leaves a background child behind keeps the pipe open; do not wait for it forever
        reader.join(READER_JOIN_S)
        if code < 0:
            session.exit_code, session.signal = None, f"SIG{-code}"
        else:
            session.exit_code = code
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        with self._lock:
            session.ended_at = now_ms()
            session.finished = True
            session.finished_mono = time.monotonic()
            self._running.pop(session.session_id, None)
            if session.backgrounded:
                self._emit(session, session.event)
        session.done.set()

    def _emit(self, session: ExecSession, event: str) -> None:
        if self.on_event is None:
            return
        terminal = event != "started"
        payload: dict[str, Any] = {
            "eventId": str(uuid.uuid4()),
            "sessionId": session.session_id,
            "event": event,
            "callId": session.call_id,
            "exitCode": session.exit_code if terminal else None,
            "signal": session.signal if terminal else None,
            "outputTail": session.output.tail(),
            "startedAt": session.started_at,
            "endedAt": session.ended_at if terminal else None,
        }
        self.on_event({k: v for k, v in payload.items() if v is not None or k == "exitCode"})

    @staticmethod
    def _running_result(session: ExecSession) -> dict[str, Any]:
        return {
            "status": "running",
            "sessionId": session.session_id,
            "pid": session.pid,
            "startedAt": session.started_at,
            "tail": session.output.tail(),
            "workdir": session.workdir,
        }

    @staticmethod
    def _completed_result(session: ExecSession) -> dict[str, Any]:
        ended = session.ended_at or now_ms()
        return {
            "status": session.status,
            "sessionId": session.session_id,
            "exitCode": session.exit_code,
            "signal": session.signal,
            "timedOut": session.timed_out,
            "startedAt": session.started_at,
            "endedAt": ended,
            "durationMs": ended - session.started_at,
            "output": session.output.text(),
            "tail": session.output.tail(),
            "truncated": session.output.truncated,
            "workdir": session.workdir,
        }

    # -- Process ----------------------------------------------------------------------------------------------
    def process(self, args: dict[str, Any]) -> dict[str, Any]:
        action = args.get("action")
        self._prune()
        if action == "list":
            return self._list()
        if action not in ("poll", "log", "write", "submit", "kill"):
            return _failed(f"Unknown action: {action}" if action else "action is required")
        session_id = args.get("sessionId")
        if not isinstance(session_id, str) or not session_id.strip():
            return _failed("sessionId is required")
        with self._lock:
            session = self._sessions.get(session_id.strip())
        if session is None:
            return _failed(f"No session found: {session_id}")
        if action == "poll":
            return {
                "status": session.status,
                "sessionId": session.session_id,
                "exitCode": session.exit_code,
                "signal": session.signal,
                "timedOut": session.timed_out,
                "tail": session.output.tail(),
                "running": not session.finished,
            }
        if action == "log":
            return self._log(session, args)
        if action in ("write", "submit"):
            return self._write(session, args.get("data"), newline=action == "submit")
        return self._kill(session)

    def _list(self) -> dict[str, Any]:
        with self._lock:
            sessions = sorted(self._sessions.values(), key=lambda s: s.started_at)
        items = []
        lines = []
        for s in sessions:
            item: dict[str, Any] = {
                "sessionId": s.session_id,
                "status": s.status,
                "running": not s.finished,
                "pid": s.pid,
                "command": s.command,
                "workdir": s.workdir,
                "startedAt": s.started_at,
                "exitCode": s.exit_code,
            }
            if s.ended_at is not None:
                item["endedAt"] = s.ended_at
            items.append(item)
            command = s.command if len(s.command) <= 80 else s.command[:77] + "..."
            exit_text = "" if not s.finished else f" exit={s.exit_code if s.signal is None else s.signal}"
            lines.append(f"{s.session_id} {s.status} pid={s.pid}{exit_text} {command}")
        text = "\n".join(lines) if lines else "No background sessions."
        return {"status": "completed", "sessions": items, "text": text}

    @staticmethod
    def _log(session: ExecSession, args: dict[str, Any]) -> dict[str, Any]:
        text = session.output.text()
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        offset_raw = _number(args.get("offset"))
        limit_raw = _number(args.get("limit"))
        offset = max(0, int(offset_raw)) if offset_raw is not None else 0
        limit = max(1, int(limit_raw)) if limit_raw is not None else LOG_DEFAULT_LIMIT
        window = lines[offset : offset + limit]
        result: dict[str, Any] = {
            "status": session.status,
            "sessionId": session.session_id,
            "log": "\n".join(window),
            "totalLines": len(lines),
            "totalChars": len(text),
            "truncated": session.output.truncated or offset + limit < len(lines),
        }
        if session.finished:
            result["exitCode"] = session.exit_code
            result["signal"] = session.signal
        return result

    @staticmethod
    def _write(session: ExecSession, data: Any, *, newline: bool) -> dict[str, Any]:
        if data is None and newline:
            data = ""
        if not isinstance(data, str):
            return _failed("data is required")
        if session.finished:
            return _failed(f"Session {session.session_id} is not running")
        stdin = session.proc.stdin
        if stdin is None:
            return _failed(f"Session {session.session_id} has no writable stdin")
        payload = (data + "\n" if newline else data).encode()
        try:
            with session.stdin_lock:
                stdin.write(payload)
                stdin.flush()
        except (OSError, ValueError) as exc:
            return _failed(f"Failed to write to session {session.session_id}: {exc}")
        return {"status": "running", "sessionId": session.session_id, "bytesWritten": len(payload)}

    @staticmethod
    def _kill(session: ExecSession) -> dict[str, Any]:
        if session.finished:
            return _failed(f"Session {session.session_id} is not running")
        send_signal(session.proc, signal.SIGKILL if POSIX else signal.SIGTERM)
        return {"status": "running", "sessionId": session.session_id, "message": "Kill signal sent"}

    def _prune(self) -> None:
        cutoff = time.monotonic() - FINISHED_TTL_S
        with self._lock:
            expired = [s.session_id for s in self._sessions.values() if (s.finished_mono or cutoff) < cutoff]
            for sid in expired:
                del self._sessions[sid]

    # -- lifecycle --------------------------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Kill every command this node started that is still running (background or not)."""
        self._closed = True
        self.on_event = None
        with self._lock:
            sessions = list(self._running.values())
        for s in sessions:
            send_signal(s.proc, signal.SIGKILL if POSIX else signal.SIGTERM)


def _failed(error: str) -> dict[str, Any]:
    return {"status": "failed", "error": error}


def send_signal(proc: subprocess.Popen[bytes], sig: int, *, force: bool = False) -> None:
    """Signal the command's whole process group (it runs in its own session), falling back to the process.

    `force` signals the group even when the shell itself has already exited (children it left behind)."""
    if proc.poll() is not None and not (force and POSIX):
        return
    try:
        if POSIX:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
    except ProcessLookupError:
        pass
    except OSError:
        with contextlib.suppress(OSError):
            proc.send_signal(sig)


def terminate(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL if the command is still there after KILL_GRACE_S."""
    send_signal(proc, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=KILL_GRACE_S)
    send_signal(proc, signal.SIGKILL if POSIX else signal.SIGTERM, force=True)
