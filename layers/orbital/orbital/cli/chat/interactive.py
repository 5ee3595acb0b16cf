"""The interactive prompt: a connection opened again when lost, each message sent and its run shown."""

from __future__ import annotations

import contextlib
import random
import sys
import threading
import uuid
from typing import TYPE_CHECKING, Any

from orbital.cli.chat.connection import (
    CallFailedError,
    ChatConnection,
    ChatError,
    ChatRefusedError,
    NotSentError,
    UnreachableError,
)
from orbital.cli.chat.driver import ChatDriver, RunView, Sent
from orbital.cli.chat.one_shot import _command_text, resumes_run
from orbital.cli.chat.terminal import (
    TerminalApprover,
    _err,
    history_path,
    interrupt_flag,
    keys_not_echoed,
)
from orbital.cli.chat.views import PlainView, RichView, _gear, keep_line_breaks
from orbital.protocol.local_token import redact_url

if TYPE_CHECKING:
    from rich.console import Console


RECONNECT_BASE_S = 0.5
RECONNECT_CAP_S = 10.0
"""Reconnecting after a lost connection: exponential backoff with full jitter (a wait drawn from 0 to
min(cap, base * 2**attempt)), as `orbital node` does, with a lower cap: someone is waiting at the prompt."""
EXIT_WORDS = {"exit", "quit", "/exit", "/quit"}

BANNER = (
    "Enter sends · Alt-Enter (or Esc, Enter) adds a line · /help lists commands · Ctrl-C stops a reply · "
    "exit or Ctrl-D quits"
)
TOOLBAR = "Enter send · Alt-Enter new line · Ctrl-C stop · Ctrl-D quit"


class _Session:
    """The interactive loop's state: the connection and the console. A connection found lost is opened again, with
    the same client id and session, retrying with backoff while the gateway is away (a restart)."""

    def __init__(self, url: str, token: str | None, session: str, console: Console, plain: bool) -> None:
        self.url = url
        self.token = token
        self.session = session
        self.console = console
        self.plain = plain
        self.conn: ChatConnection | None = None
        self.lost: str | None = None
        """Why the last connection was lost, until a new one is open."""
        self.client_id = f"chat-{uuid.uuid4().hex[:8]}"

    def _connect(self) -> ChatConnection:
        return ChatConnection(self.url, token=self.token, client_id=self.client_id)

    def driver(self, stop: threading.Event | None = None) -> ChatDriver:
        """The driver of a live connection: `ChatRefusedError` when the gateway will not take this client,
        `GaveUpError` when Ctrl-C ended the retries (a KeyboardInterrupt, or `stop` set where Ctrl-C sets it
        instead)."""
        if self.conn is not None and self.conn.is_lost:
            self.lost = self.conn.lost or "the connection closed"
            self.conn.close()
            self.conn = None
        if self.conn is None and self.lost is not None:
            self._note(f"Connection lost ({self.lost}). Reconnecting… (Ctrl-C stops trying)")
            self.conn = self._reconnect(stop)
            self.lost = None
            self._note(f"Reconnected to {redact_url(self.url)} · session {self.session}")
        if self.conn is None:
            self.conn = self._connect()
        return ChatDriver(self.conn, self.session)

    def _reconnect(self, stop: threading.Event | None) -> ChatConnection:
        """Connect again with backoff until it works, or Ctrl-C: `stop` is set by it where the caller already turned
        Ctrl-C into an event; otherwise Ctrl-C sets one of this loop's own for as long as it runs, so it is seen
        whatever the loop is doing when it comes (an attempt, a note, the wait), not only where a KeyboardInterrupt
        would surface."""
        gave_up = GaveUpError("stopped reconnecting; the next message tries again")
        with contextlib.ExitStack() as scope:
            stopped = stop if stop is not None else scope.enter_context(interrupt_flag())
            attempt = 0
            try:
                while not stopped.is_set():
                    try:
                        return self._connect()
                    except UnreachableError as exc:
                        delay = random.uniform(0, min(RECONNECT_CAP_S, RECONNECT_BASE_S * 2**attempt))
                        attempt += 1
                        self._note(f"{exc}; next try in {delay:.1f} s")
                    if stopped.wait(delay):
                        break
            except KeyboardInterrupt:  # off the main thread, Ctrl-C is not turned into the event
                raise gave_up from None
            stopped.clear()
            raise gave_up

    def _note(self, text: str) -> None:
        from rich.text import Text

        self.console.print(Text(text, style="dim"))

    def view(self) -> RunView:
        if self.plain:
            return PlainView(sys.stdout, sys.stdout)
        return RichView(self.console)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


class GaveUpError(ChatError):
    """Ctrl-C while reconnecting: back to the prompt, nothing sent."""


def _show_command(console: Console, sent: Sent, plain: bool) -> None:
    from rich.markdown import Markdown
    from rich.text import Text

    response, error = _command_text(sent.result)
    if response:
        console.print(Text(response) if plain else Markdown(keep_line_breaks(response)))
    if error:
        console.print(Text(error, style="bold red"))
    if not response and not error:
        console.print(Text(f"({sent.result.get('command') or sent.status}: done)", style="dim"))


def send_and_show(state: _Session, text: str, *, timeout: float | None) -> tuple[bool, bool]:
    """One message from the prompt. Returns (interrupted: a Ctrl-C stopped the reply, fatal: quit)."""
    from rich.text import Text

    console = state.console
    try:
        driver = state.driver()
    except GaveUpError as exc:
        console.print(Text(str(exc), style="bold yellow"))
        return False, False
    except ChatError as exc:
        console.print(Text(f"Error: {exc}", style="bold red"))
        return False, True
    with interrupt_flag() as interrupted:
        try:
            try:
                sent = driver.send(text)
            except NotSentError:  # lost just now, before the message went out: reconnect and send it
                driver = state.driver(interrupted)
                sent = driver.send(text)
        except GaveUpError as exc:
            console.print(Text(str(exc), style="bold yellow"))
            return False, False
        except ChatRefusedError as exc:
            console.print(Text(f"Error: {exc}", style="bold red"))
            return False, True
        except CallFailedError as exc:
            console.print(Text(f"Error: {exc.message}", style="bold red"))
            return False, False
        except (ChatError, TimeoutError) as exc:
            console.print(Text(f"Error: {exc}", style="bold red"))
            return False, False
        resumed = resumes_run(sent.result)
        if sent.status != "started":
            _show_command(console, sent, state.plain)
            if not resumed:
                return False, False
        directives = sent.result.get("directives")
        if isinstance(directives, dict) and any(directives.values()):
            shown = " | ".join(f"{k}: {_directive_value(v)}" for k, v in directives.items() if v)
            console.print(Text(shown, style="dim italic"))
        approver = TerminalApprover(driver.conn, interrupted) if TerminalApprover.available() else None
        with keys_not_echoed():
            result = driver.follow(sent, state.view(), timeout=timeout, interrupt=interrupted, approver=approver)
    return result.stop_requested, False


def _directive_value(value: Any) -> str:
    if isinstance(value, dict) and "provider" in value:
        return f"{value.get('provider')}/{value.get('id')}"
    return str(value)


def _key_bindings() -> Any:
    from prompt_toolkit.key_binding import KeyBindings

    kb = KeyBindings()

    @kb.add("enter")
    def _submit(event: Any) -> None:
        event.current_buffer.validate_and_handle()

    @kb.add("escape", "enter")
    def _newline(event: Any) -> None:
        event.current_buffer.insert_text("\n")

    @kb.add("c-c")
    def _interrupt(event: Any) -> None:
        if event.current_buffer.text:
            event.current_buffer.reset()
        else:
            event.app.exit(exception=KeyboardInterrupt())

    return kb


def _history() -> Any:
    from prompt_toolkit.history import FileHistory, InMemoryHistory

    path = history_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        path.touch(mode=0o600, exist_ok=True)
        return FileHistory(str(path))
    except OSError:
        return InMemoryHistory()


def interactive(url: str, token: str | None, session: str, *, timeout: float | None, plain: bool) -> int:
    from prompt_toolkit import PromptSession
    from prompt_toolkit.formatted_text import HTML
    from rich.console import Console
    from rich.text import Text

    console = Console(highlight=False)
    state = _Session(url, token, session, console, plain)
    try:
        state.driver()
    except ChatError as exc:
        _err(str(exc))
        return 1
    console.print(Text.assemble(("Orbital chat", "bold"), f" · session {session} · {redact_url(url)}"))
    console.print(Text(BANNER, style="dim"))
    prompt_text = "\u203a " if _gear(sys.stdout) == "⚙" else "> "
    toolbar = f" {session} │ {TOOLBAR}"

    def continuation(width: int, line_number: int, is_soft_wrap: int) -> str:
        return "·".rjust(max(1, width - 1)) + " " if not is_soft_wrap else " " * width

    prompt: Any = PromptSession(
        history=_history(),
        key_bindings=_key_bindings(),
        multiline=True,
        bottom_toolbar=toolbar,
        prompt_continuation=continuation,
        enable_history_search=False,
    )
    armed = False  # the last thing was a Ctrl-C: one more at the prompt quits
    code = 0
    try:
        while True:
            try:
                text = prompt.prompt(HTML(f"<b>{prompt_text}</b>"))
            except KeyboardInterrupt:
                if armed:
                    break
                armed = True
                console.print(Text("(Ctrl-C again, Ctrl-D or exit to quit)", style="dim"))
                continue
            except EOFError:
                break
            armed = False
            if not text.strip():
                continue
            if text.strip().lower() in EXIT_WORDS:
                break
            interrupted, fatal = send_and_show(state, text, timeout=timeout)
            if fatal:
                code = 1
                break
            armed = interrupted
    finally:
        state.close()
    return code
