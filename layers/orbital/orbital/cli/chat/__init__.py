"""`orbital chat`: talk to the agent of a session, interactively in a terminal or one message at a time.

Three layers, so the protocol side can be tested without a terminal:

- `ChatConnection`: a client-mode socket whose frames are read by a background thread. Responses resolve the call
  waiting for them; events go to a queue; a dropped socket ends every wait with `ChatError` instead of a hang.
- `ChatDriver`: sends `chat.send` and follows one run: it keeps the `chat` events of that run (its `runId` under the
  key this client used), streams them to a view and decides when the run is over (`final` or `error` from the
  gateway, a lost connection, the deadline, or a stop request the gateway never confirmed).
- Views render a run: `RichView` (spinner, live tail of the streamed text, markdown at the end), `PlainView` (raw
  text as it arrives, for pipes and `--plain`) and `QuietView` (`--json`). They only receive callbacks.

A run that pauses for a tool approval (a `chat` event with `state: "paused"`) shows what it asks: the tool, its
arguments as the gateway masked them, the rule and reason, the run's taint, the time left. At a terminal,
`TerminalApprover` asks y / n / s (yes for the rest of the session) and the driver answers with `approval.resolve`:
it decides exactly that approval (a `yes` message could land after someone else decided and start a run of its own),
is recorded as answered from the CLI, and says who decided first when it came second. Only a gateway whose paused
event names no approval gets `yes` / `no` as a message. While it asks, the events keep being read: a decision made
elsewhere, or the run's end, ends the question. Without a terminal the run is waited for until answered elsewhere.

Interactively, a lost connection (a gateway restart) is opened again when the next message is sent, with the same
client id and session, retrying with backoff and full jitter while the gateway is away, as `orbital node` does
(Ctrl-C stops the retries; the next message starts them again). A one-shot message (`-m`, stdin) ends with exit 1.

rich and prompt_toolkit are imported inside the functions that need them: other commands never load them.

The package, by part: `connection` (the socket), `messages` (what a run's events say), `driver`, `views`, `terminal`,
`one_shot` and `interactive`; this module is the command (`add_parser`, `run`).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from orbital.cli.chat.connection import (
    LOST,
    CallFailedError,
    ChatConnection,
    ChatError,
    ChatRefusedError,
    NotSentError,
    UnreachableError,
)
from orbital.cli.chat.driver import ChatDriver, RunResult, RunView, Sent
from orbital.cli.chat.interactive import interactive
from orbital.cli.chat.messages import (
    STAYS_PAUSED,
    Approver,
    TerminalDecision,
    ToolCall,
    approval_lines,
    args_line,
    decided_text,
    paused_text,
    taint_lines,
    text_of,
    time_left,
    tool_calls_of,
    unshown,
)
from orbital.cli.chat.one_shot import one_shot, resumes_run
from orbital.cli.chat.terminal import TerminalApprover, _err, history_path
from orbital.cli.chat.views import PlainView, QuietView, RichView, keep_line_breaks
from orbital.protocol import local_token

__all__ = [
    "LOST",
    "STAYS_PAUSED",
    "Approver",
    "CallFailedError",
    "ChatConnection",
    "ChatDriver",
    "ChatError",
    "ChatRefusedError",
    "NotSentError",
    "PlainView",
    "QuietView",
    "RichView",
    "RunResult",
    "RunView",
    "Sent",
    "TerminalApprover",
    "TerminalDecision",
    "ToolCall",
    "UnreachableError",
    "add_parser",
    "approval_lines",
    "args_line",
    "decided_text",
    "history_path",
    "interactive",
    "keep_line_breaks",
    "one_shot",
    "paused_text",
    "resumes_run",
    "run",
    "taint_lines",
    "text_of",
    "time_left",
    "tool_calls_of",
    "unshown",
]

DEFAULT_URL = "ws://127.0.0.1:8765/ws"
DEFAULT_SESSION = "main"
DEFAULT_ONE_SHOT_TIMEOUT = 600.0


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the `chat` subcommand on an argparse subparsers object."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "chat",
        help="talk to the agent (interactive, or one message with -m)",
        description=(
            "Talk to the agent of a session. Without -m: an interactive prompt (Enter sends, Alt-Enter or Esc "
            "then Enter adds a line, Ctrl-C stops a reply, exit or Ctrl-D quits). With -m: send one message, "
            "stream the reply to stdout, exit 0 when it ends, 1 on any error. Slash commands (/status, /new, "
            "/stop, /model, /think, /compact, /help) go to the gateway. A run that waits for a tool approval shows "
            "the call and, at a terminal, asks y (approve), n (deny) or s (approve for the rest of the session); "
            "Ctrl-C there leaves the run paused. Without a terminal it waits for an answer given elsewhere "
            "(`orbital approvals`, the console)."
        ),
    )
    local_token.add_arguments(parser)
    parser.add_argument(
        "-s", "--session", default=DEFAULT_SESSION, metavar="KEY", help=f"session key (default {DEFAULT_SESSION})"
    )
    parser.add_argument(
        "-m",
        "--message",
        default=None,
        metavar="TEXT",
        help="send TEXT, print the reply, exit (without -m, a non-terminal stdin is the message)",
    )
    parser.add_argument("--json", action="store_true", help="with -m: print one JSON object with the outcome")
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="S",
        help=f"give up on a reply after S seconds (default {DEFAULT_ONE_SHOT_TIMEOUT:g} with -m, none otherwise)",
    )
    parser.add_argument("--plain", action="store_true", help="no markdown, no spinner: raw text as it streams")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except KeyboardInterrupt:  # Ctrl-C outside a run (connecting, reading stdin)
        return 130


def _run(args: argparse.Namespace) -> int:
    try:
        url, token = local_token.from_arguments("orbital chat", args)
    except local_token.TokenFileError as exc:
        _err(str(exc))
        return 2
    session = (args.session or "").strip()
    if not session:
        _err("--session must not be empty")
        return 2
    if args.timeout is not None and args.timeout <= 0:
        _err("--timeout must be > 0")
        return 2
    message = args.message
    if message is None and not sys.stdin.isatty():
        message = sys.stdin.read()
    if message is not None:
        if not message.strip():
            _err("the message is empty")
            return 2
        timeout = args.timeout if args.timeout is not None else DEFAULT_ONE_SHOT_TIMEOUT
        return one_shot(url, token, session, message, as_json=args.json, timeout=timeout, plain=args.plain)
    if args.json:
        _err("--json needs -m MESSAGE")
        return 2
    return interactive(url, token, session, timeout=args.timeout, plain=args.plain)
