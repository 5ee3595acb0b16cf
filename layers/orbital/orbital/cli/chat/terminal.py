"""The terminal: Ctrl-C as an event, keys not echoed while a run streams, the approval question
(`TerminalApprover`), the input history's file."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from orbital.cli.chat.connection import ChatConnection
from orbital.cli.chat.driver import POLL_S
from orbital.cli.chat.messages import TerminalDecision, approval_of


def _err(text: str) -> None:
    print(f"orbital chat: {text}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def interrupt_flag() -> Iterator[threading.Event]:
    """While inside, Ctrl-C (SIGINT) sets the event instead of raising KeyboardInterrupt (main thread only)."""
    flag = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return
    previous = signal.signal(signal.SIGINT, lambda *_: flag.set())
    try:
        yield flag
    finally:
        signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def _local_modes(fd: int, *, on: int = 0, off: int = 0) -> Iterator[None]:
    """While inside, the terminal on `fd` has the local modes `on` set and `off` cleared, as they were after; where
    there is no terminal (no termios on Windows, a pipe or a pseudo-file as stdin) nothing changes."""
    try:
        import termios

        if not os.isatty(fd):
            raise OSError("not a terminal")
        saved = termios.tcgetattr(fd)
        changed = list(saved)
        changed[3] = (changed[3] | on) & ~off
        termios.tcsetattr(fd, termios.TCSANOW, changed)
    except Exception:
        yield
        return
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            termios.tcsetattr(fd, termios.TCSANOW, saved)


@contextlib.contextmanager
def keys_not_echoed() -> Iterator[None]:
    """While a reply streams, keys typed on the terminal are not echoed (they would tear the live area); Ctrl-C
    still sends SIGINT and typed-ahead text waits for the next prompt."""
    try:
        import termios

        fd = sys.stdin.fileno()
        off = termios.ECHO | getattr(termios, "ECHOCTL", 0)
    except Exception:  # no termios (Windows), a pseudo-file as stdin
        yield
        return
    with _local_modes(fd, off=off):
        yield


@contextlib.contextmanager
def line_input(fd: int) -> Iterator[None]:
    """While inside, the terminal echoes keys and hands over whole lines (an answer typed at a question), whatever
    `keys_not_echoed` set around it."""
    try:
        import termios

        on = termios.ECHO | termios.ICANON
    except Exception:  # no termios (Windows)
        yield
        return
    with _local_modes(fd, on=on):
        yield


APPROVE_ANSWERS = frozenset({"y", "yes", "approve", "ok"})
DENY_ANSWERS = frozenset({"n", "no", "deny"})
SESSION_ANSWERS = frozenset({"s", "session"})


class TerminalApprover:
    """Asks at the terminal whether a paused run's tool call may run: y (approve), n (deny), s (approve, and calls
    like it for the rest of the session; only when the gateway named the approval). While it waits for a line it
    keeps reading the connection's events, so an answer given elsewhere (the console, another terminal, a chat)
    or the run's end ends the question; those events are handed back to be shown in order. Ctrl-C or Ctrl-D
    leaves the question and the run paused. POSIX terminals only (`available()`)."""

    def __init__(self, conn: ChatConnection, interrupt: threading.Event, out: IO[str] | None = None) -> None:
        self.conn = conn
        self.interrupt = interrupt
        self.out = out or sys.stdout

    @staticmethod
    def available() -> bool:
        try:
            return os.name == "posix" and sys.stdin.isatty() and sys.stdout.isatty()
        except (AttributeError, ValueError):
            return False

    def _write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()

    @staticmethod
    def _settles(frame: dict[str, Any] | None, run_id: str, approval_id: str | None) -> bool:
        """Whether `frame` ends the question: the approval decided, or the run over."""
        if frame is None:
            return True
        payload = frame.get("payload")
        if not isinstance(payload, dict):
            return False
        if frame.get("event") == "approval.resolved":
            return payload.get("approvalId") == approval_id if approval_id else payload.get("runId") == run_id
        return (
            frame.get("event") == "chat"
            and payload.get("runId") == run_id
            and payload.get("state") in ("final", "error")
        )

    def __call__(self, payload: dict[str, Any], run_id: str) -> TerminalDecision:
        import select

        approval = approval_of(payload)
        approval_id = approval["approvalId"] if approval else None
        choices = (
            "[y]es / [n]o / [s]ession (yes, and to calls like it for the rest of this session)"
            if approval
            else "[y]es / [n]o"
        )
        question = f"Approve? {choices}: "
        held: list[dict[str, Any] | None] = []
        fd = sys.stdin.fileno()
        typed = b""
        self._write(question)
        with line_input(fd):
            while True:
                if self.interrupt.is_set():
                    self.interrupt.clear()
                    self._write("\n")
                    return TerminalDecision(leave=True, held=held)
                while True:
                    try:
                        frame = self.conn.events.get_nowait()
                    except queue.Empty:
                        break
                    held.append(frame)
                    if self._settles(frame, run_id, approval_id):
                        self._write("\n")
                        return TerminalDecision(held=held)
                ready, _, _ = select.select([fd], [], [], POLL_S)
                if not ready:
                    continue
                data = os.read(fd, 1024)
                if not data:  # Ctrl-D
                    self._write("\n")
                    return TerminalDecision(leave=True, held=held)
                typed += data
                if b"\n" not in typed and b"\r" not in typed:
                    continue
                word = typed.decode("utf-8", "replace").strip().lower()
                typed = b""
                if word in APPROVE_ANSWERS:
                    return TerminalDecision(decision="approve", held=held)
                if word in DENY_ANSWERS:
                    return TerminalDecision(decision="deny", held=held)
                if word in SESSION_ANSWERS and approval:
                    return TerminalDecision(decision="approve", remember=True, held=held)
                self._write(f"Answer y or n{', or s' if approval else ''}. {question}")


def history_path() -> Path:
    home = os.environ.get("ORBITAL_HOME")
    return (Path(home).expanduser() if home else Path.home() / ".orbital") / "chat_history"
