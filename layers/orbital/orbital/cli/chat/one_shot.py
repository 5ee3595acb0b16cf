"""One message (`-m`, stdin): sent, its run followed to the end, the reply printed (or its JSON)."""

from __future__ import annotations

import json
import sys
from typing import Any

from orbital.cli.chat.connection import (
    ChatConnection,
    ChatError,
)
from orbital.cli.chat.driver import ChatDriver, RunView
from orbital.cli.chat.messages import (
    PAUSED_FALLBACK,
)
from orbital.cli.chat.terminal import (
    TerminalApprover,
    _err,
    interrupt_flag,
)
from orbital.cli.chat.views import PlainView, QuietView, RichView


def resumes_run(result: dict[str, Any]) -> bool:
    """Whether a `chat.send` answer says the message decided a paused run's approval (the run goes on, and its
    events follow under its own id), as opposed to a reminder that the session is paused (the message was dropped)."""
    if result.get("status") != "paused" or result.get("approvalId") or not result.get("runId"):
        return False
    return str(result.get("response") or "").startswith(("Approved ", "Denied "))


def _command_text(result: dict[str, Any]) -> tuple[str | None, str | None]:
    response = result.get("response")
    error = result.get("error")
    return (str(response) if response else None, str(error) if error else None)


def one_shot(
    url: str, token: str | None, session: str, message: str, *, as_json: bool, timeout: float, plain: bool
) -> int:
    """Send one message and report its outcome: 0 when the run ends with `final` (or a command succeeds)."""
    try:
        conn = ChatConnection(url, token=token, keepalive=0)
    except ChatError as exc:
        _err(str(exc))
        return 1
    try:
        driver = ChatDriver(conn, session)
        with interrupt_flag() as interrupted:
            try:
                sent = driver.send(message)
            except (ChatError, TimeoutError) as exc:
                _err(str(exc))
                return 1
            resumed = resumes_run(sent.result)
            if sent.status == "paused" and not resumed:  # a reminder: the message was not taken
                if as_json:
                    print(json.dumps({"sessionKey": session, **sent.result}, ensure_ascii=False))
                _err(str(sent.result.get("response") or PAUSED_FALLBACK))
                return 1
            if sent.status != "started" and not resumed:
                response, error = _command_text(sent.result)
                if as_json:
                    print(json.dumps({"sessionKey": session, **sent.result}, ensure_ascii=False))
                elif response:
                    print(response)
                if error:
                    _err(error)
                return 1 if error else 0
            if resumed and not as_json:
                print(str(sent.result.get("response")), file=sys.stderr, flush=True)
            view: RunView
            if as_json:
                view = QuietView()
            elif sys.stdout.isatty() and not plain:
                from rich.console import Console

                view = RichView(Console(), Console(stderr=True))
            else:
                view = PlainView(sys.stdout, sys.stderr)
            approver = None if as_json or not TerminalApprover.available() else TerminalApprover(conn, interrupted)
            result = driver.follow(sent, view, timeout=timeout, interrupt=interrupted, approver=approver)
        if as_json:
            print(json.dumps(result.as_json(), ensure_ascii=False, default=str))
            if not result.ok:
                _err(str(result.error))
        if result.ok:
            return 0
        return 130 if result.stop_requested else 1
    finally:
        conn.close()
