"""`orbital chat`: talk to the agent of a session, interactively in a terminal or one message at a time.

Three layers, so the protocol side can be tested without a terminal:

- `Connection`: a client-mode socket whose frames are read by a background thread. Responses resolve the call
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
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import itertools
import json
import os
import queue
import random
import shutil
import signal
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol

from orbital import __version__
from orbital.domain import spend_words
from orbital.protocol import local_token
from orbital.protocol.frames import fragments
from orbital.protocol.local_token import redact_url

if TYPE_CHECKING:
    from rich.console import Console

DEFAULT_URL = "ws://127.0.0.1:8765/ws"
DEFAULT_SESSION = "main"
DEFAULT_ONE_SHOT_TIMEOUT = 600.0
RPC_TIMEOUT = 30.0
KEEPALIVE_S = 240.0
"""Send a cheap request after this long without any outgoing frame (API Gateway drops idle sockets at 10 min)."""
STOP_GRACE_S = 10.0
"""After `/stop`, how long to wait for the gateway to end the run before giving up on it."""
POLL_S = 0.1
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


class ChatError(Exception):
    """A failure this command reports in one line: unreachable gateway, lost connection, refused call."""


class UnreachableError(ChatError):
    """The gateway could not be reached or the handshake did not complete: worth another try later."""


class ChatRefusedError(ChatError):
    """The gateway refused the connection (a wrong token, a protocol it does not speak): another try would fail too."""


class NotSentError(ChatError):
    """The socket was gone before the request was written: nothing reached the gateway."""


REFUSING_CLOSE_CODES = frozenset({1008, 4001})
"""A close during the handshake with one of these is a refusal (policy, unauthorized), not a passing failure."""


class CallFailedError(ChatError):
    """The gateway answered a request with an error frame."""

    def __init__(self, method: str, code: int, message: str) -> None:
        super().__init__(f"{method} failed ({code}): {message}")
        self.code = code
        self.message = message


# --- the socket ---------------------------------------------------------------------------------------------------


class _Waiter:
    __slots__ = ("done", "frame")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.frame: dict[str, Any] | None = None


LOST = None
"""Put on the event queue (after every event that came before) when the socket is gone."""


class ChatConnection:
    """A connected client-mode socket. `call()` may be used from any thread; `events` receives every event frame
    and, once the socket is gone, `LOST` (`lost` then says why)."""

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        timeout: float = RPC_TIMEOUT,
        keepalive: float = KEEPALIVE_S,
        client_id: str | None = None,
    ) -> None:
        self.url = url
        self.timeout = timeout
        self.events: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.lost: str | None = None
        self.hello: dict[str, Any] = {}
        self._ids = itertools.count(1)
        self._pending: dict[str, _Waiter] = {}
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._gone = threading.Event()
        self._last_send = time.monotonic()
        self._closing = False
        self.client_id = client_id or f"chat-{uuid.uuid4().hex[:8]}"
        self._ws = self._open(token, self.client_id)
        self._reader = threading.Thread(target=self._read, name="orbital-chat-reader", daemon=True)
        self._reader.start()
        self._keepalive: threading.Thread | None = None
        if keepalive > 0:
            self._keepalive = threading.Thread(
                target=self._keep_alive, args=(keepalive,), name="orbital-chat-keepalive", daemon=True
            )
            self._keepalive.start()

    def _open(self, token: str | None, client_id: str) -> Any:
        # lazy: only this command needs it (the parser of every `orbital` command imports this module)
        from orbital.client import GatewayClient, RpcFailedError

        where = redact_url(self.url)
        try:
            client = GatewayClient(self.url, timeout=self.timeout, open_timeout=self.timeout)
        except Exception as exc:  # refused, DNS, TLS, HTTP status, bad URL, timeout
            raise UnreachableError(f"cannot reach {where}: {_describe(exc)}") from None
        try:
            client.connect("client", client_id, token=token, client={"version": __version__, "platform": "cli"})
        except RpcFailedError as exc:
            client.close()
            raise ChatRefusedError(f"{where} refused the connection ({exc.code}): {exc.message}") from None
        except Exception as exc:  # closed during the handshake (e.g. a wrong token), timeout
            client.close()
            code = getattr(getattr(exc, "rcvd", None), "code", None)
            failed = ChatRefusedError if code in REFUSING_CLOSE_CODES else UnreachableError
            raise failed(f"connecting to {where} failed: {_describe(exc)}") from None
        self.hello = client.hello or {}
        while client.events:  # anything that arrived during the handshake
            frame = client.events.popleft()
            if frame.get("type") == "evt":
                self.events.put(frame)
        return client.ws

    # reader and keepalive threads

    def _read(self) -> None:
        reason = "the connection closed"
        try:
            while True:
                message = self._ws.recv()
                if isinstance(message, bytes):
                    continue
                try:
                    frame = json.loads(message)
                except ValueError:
                    continue
                if not isinstance(frame, dict):
                    continue
                if frame.get("type") == "res":
                    with self._lock:
                        waiter = self._pending.pop(str(frame.get("id")), None)
                    if waiter is not None:
                        waiter.frame = frame
                        waiter.done.set()
                elif frame.get("type") == "evt":
                    self.events.put(frame)
        except Exception as exc:
            reason = _close_reason(exc)
        finally:
            self.lost = "the connection was closed" if self._closing else reason
            self._gone.set()
            with self._lock:
                waiters = list(self._pending.values())
                self._pending.clear()
            for waiter in waiters:
                waiter.done.set()
            self.events.put(LOST)

    def _keep_alive(self, every: float) -> None:
        while not self._gone.wait(min(every / 4, 30.0)):
            if time.monotonic() - self._last_send >= every:
                with contextlib.suppress(ChatError):
                    self._send({"type": "req", "id": f"keepalive-{next(self._ids)}", "method": "tools.list"})

    # calls

    def _send(self, frame: dict[str, Any]) -> None:
        if self._gone.is_set():
            raise NotSentError(f"connection to {redact_url(self.url)} lost: {self.lost}")
        try:
            text = json.dumps(frame)
            with self._send_lock:
                self._ws.send(fragments(text))  # API Gateway refuses frames over 32 KB: one message, in fragments
                self._last_send = time.monotonic()
        except Exception as exc:
            raise ChatError(f"connection to {redact_url(self.url)} lost: {_close_reason(exc)}") from None

    def call(self, method: str, params: Any = None, *, timeout: float | None = None) -> Any:
        """Send one request and return its payload; `CallFailedError` for an error answer, `ChatError` when the
        socket goes away, `TimeoutError` when no answer comes in time."""
        frame_id = f"c{next(self._ids)}"
        waiter = _Waiter()
        with self._lock:
            self._pending[frame_id] = waiter
        frame: dict[str, Any] = {"type": "req", "id": frame_id, "method": method}
        if params is not None:
            frame["params"] = params
        try:
            self._send(frame)
            if not waiter.done.wait(self.timeout if timeout is None else timeout):
                raise TimeoutError(f"no answer to {method} within {self.timeout if timeout is None else timeout:g} s")
        finally:
            with self._lock:
                self._pending.pop(frame_id, None)
        res = waiter.frame
        if res is None:
            raise ChatError(f"connection to {redact_url(self.url)} lost: {self.lost}")
        if not res.get("ok"):
            err = res.get("error")
            if not isinstance(err, dict):
                err = {}
            raise CallFailedError(method, int(err.get("code") or 0), str(err.get("message") or "unknown error"))
        return res.get("payload")

    @property
    def is_lost(self) -> bool:
        return self._gone.is_set()

    def close(self) -> None:
        self._closing = True
        with contextlib.suppress(Exception):
            self._ws.close()
        self._reader.join(timeout=2.0)


def _close_reason(exc: BaseException) -> str:
    rcvd = getattr(exc, "rcvd", None)
    if rcvd is not None:
        code = getattr(rcvd, "code", None)
        why = getattr(rcvd, "reason", "") or ""
        return f"closed by the gateway (code {code}{': ' + why if why else ''})"
    if type(exc).__name__.startswith("ConnectionClosed"):
        return "the connection dropped"
    return _describe(exc)


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# --- messages -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: Any

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}

    def line(self) -> str:
        args = json.dumps(self.arguments, ensure_ascii=False, separators=(",", ":"), default=str)
        return f"{self.name} {args}"


def text_of(message: Any) -> str:
    """The text blocks of a stored message, joined (a plain string content is its own text)."""
    if not isinstance(message, dict):
        return ""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "".join(str(b.get("text") or "") for b in content if isinstance(b, dict) and b.get("type") == "text")


def tool_calls_of(message: Any) -> list[ToolCall]:
    if not isinstance(message, dict) or not isinstance(message.get("content"), list):
        return []
    return [
        ToolCall(str(b.get("id") or ""), str(b.get("name") or "?"), b.get("arguments"))
        for b in message["content"]
        if isinstance(b, dict) and b.get("type") == "toolCall"
    ]


def unshown(streamed: str, full: str) -> str | None:
    """What of `full` is not on screen yet once `streamed` is; None when the two diverged."""
    return full[len(streamed) :] if full.startswith(streamed) else None


# --- approvals ----------------------------------------------------------------------------------------------------

PAUSED_FALLBACK = "Run is paused waiting for tool approval. Reply yes/no."
"""What a paused run says when its event carries no text (GSV's clients print the same)."""
STAYS_PAUSED = (
    "The run stays paused: answer yes or no here, in the console, or with `orbital approvals approve|deny ID`."
)
DECIDED = {"approve": "Approved", "deny": "Denied", "timeout": "Timed out (denied)", "cancel": "Cancelled"}


def approval_of(payload: Any) -> dict[str, Any] | None:
    """The approval a `paused` chat event carries (Orbital adds it to GSV's event), if any."""
    approval = payload.get("approval") if isinstance(payload, dict) else None
    if isinstance(approval, dict) and isinstance(approval.get("approvalId"), str) and approval["approvalId"]:
        return approval
    return None


def args_line(args: Any, limit: int = 400) -> str:
    """A call's arguments (masked by the gateway) on one line, cut at `limit` characters."""
    try:
        text = json.dumps(args if args is not None else {}, ensure_ascii=False, separators=(",", ":"), default=str)
    except (TypeError, ValueError):
        text = "{}"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def time_left(expires_at: Any, now_ms: float) -> str:
    """The time left before `expiresAt` (ms since the epoch), as in "expires in 9m 12s"."""
    if not isinstance(expires_at, (int, float)) or isinstance(expires_at, bool):
        return "no expiry"
    left = int((expires_at - now_ms) // 1000)
    if left <= 0:
        return "expiring now"
    hours, rest = divmod(left, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"expires in {hours}h {minutes:02d}m"
    if minutes:
        return f"expires in {minutes}m {seconds:02d}s"
    return f"expires in {seconds}s"


def taint_lines(taint: Any) -> list[str]:
    """Where a tainted run's foreign content came from, one line a source (nothing for an untainted run)."""
    if not isinstance(taint, dict) or not taint.get("tainted"):
        return []
    sources = [s for s in taint.get("sources") or [] if isinstance(s, dict)]
    if not sources:
        return ["content from someone other than the owner"]
    lines = []
    for source in sources:
        kind = str(source.get("kind") or "unknown")
        detail = " ".join(str(source.get("detail") or "").split())
        lines.append(f"{kind}: {detail}" if detail else kind)
    return lines


def approval_lines(approval: dict[str, Any], now_ms: float, *, head: str | None = None) -> list[str]:
    """A pending approval in a few lines: the tool (and its id, session, time left), its masked arguments, the
    rule and reason that asked, and the run's taint."""
    if head is None:
        head = (
            f"{approval.get('approvalId', '?')}  {approval.get('tool', '?')}  session {approval.get('sessionKey', '?')}"
            f"  {time_left(approval.get('expiresAt'), now_ms)}"
        )
    lines = [head, f"  args:   {args_line(approval.get('args'))}"]
    rule, reason = approval.get("ruleId"), approval.get("reason")
    if rule or reason:
        lines.append("  rule:   " + " · ".join(str(x) for x in (rule, reason) if x))
    taint = taint_lines(approval.get("taint"))
    if taint:
        lines.append(f"  taint:  {taint[0]}")
        lines.extend(f"          {line}" for line in taint[1:])
    return lines


def paused_text(payload: dict[str, Any], now_ms: float) -> str:
    """What a `paused` event shows: the approval's lines when the gateway sent it, else the event's own text."""
    approval = approval_of(payload)
    if approval is None:
        return text_of(payload.get("message")).strip() or PAUSED_FALLBACK
    head = (
        f"Approval needed: {approval.get('tool', '?')} ({approval['approvalId']}) · "
        f"{time_left(approval.get('expiresAt'), now_ms)}"
    )
    return "\n".join(approval_lines(approval, now_ms, head=head))


def decided_text(resolution: dict[str, Any]) -> str:
    """An `approval.resolved` event in one line: what was decided, by whom, from where."""
    decision = str(resolution.get("decision") or "?")
    tool = str(resolution.get("tool") or "the call")
    if decision == "timeout":
        return f"Nobody answered in time: {tool} was denied."
    if decision == "cancel":
        return f"Cancelled {tool}: the run was stopped."
    by = resolution.get("by")
    if not isinstance(by, dict):
        by = {}
    who = str(by.get("label") or by.get("id") or "").strip()
    via = str(resolution.get("via") or "").strip()
    line = f"{DECIDED.get(decision, decision)} {resolution.get('tool') or ''}".rstrip()
    if who:
        line += f" by {who}"
    if via:
        line += f" (via {via})"
    return line + "."


@dataclass
class TerminalDecision:
    """What the person at the terminal said to a paused run: a decision (`approve`/`deny`, `remember` for the rest
    of the session), or none because it was decided elsewhere meanwhile, or `leave` (Ctrl-C, Ctrl-D): the run stays
    paused and this client stops waiting for it. `held` are the events read while asking, in order."""

    decision: str | None = None
    remember: bool = False
    leave: bool = False
    held: list[dict[str, Any] | None] = field(default_factory=list)


class Approver(Protocol):
    """Asks whoever is at the terminal about a paused run (given the `paused` payload and the run's id)."""

    def __call__(self, payload: dict[str, Any], run_id: str) -> TerminalDecision: ...


# --- the driver ---------------------------------------------------------------------------------------------------


@dataclass
class Sent:
    """The answer to one `chat.send`."""

    text: str
    session_key: str
    run_id: str
    result: dict[str, Any]

    @property
    def status(self) -> str:
        return str(self.result.get("status") or "")


@dataclass
class RunResult:
    """How a run ended. `state` is the gateway's `final`/`error`; `cause` tells this client's side of it:
    `run` (the gateway ended it), `timeout`, `disconnected` or `stopped` (a stop the gateway never confirmed)."""

    run_id: str
    session_key: str
    state: str
    text: str = ""
    message: dict[str, Any] | None = None
    error: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    streamed: str = ""
    cause: str = "run"
    stop_requested: bool = False

    @property
    def ok(self) -> bool:
        return self.state == "final"

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "runId": self.run_id,
            "sessionKey": self.session_key,
            "state": self.state,
            "text": self.text,
        }
        if self.state == "final":
            out["message"] = self.message
        else:
            out["error"] = self.error
        out["toolCalls"] = [c.as_dict() for c in self.tool_calls]
        return out


class RunView(Protocol):
    """What a renderer is told about one run, in order, on the thread that follows the run."""

    def started(self, sent: Sent) -> None: ...

    def text(self, piece: str) -> None: ...

    def segment(self, text: str, streamed: str, calls: list[ToolCall]) -> None:
        """An assistant message that precedes tool calls: its text (`streamed` is what deltas showed of it)."""

    def tools(self, calls: list[ToolCall]) -> None:
        """Tool calls learned without a message of their own (read back from the transcript)."""

    def stopping(self, response: str | None) -> None: ...

    def paused(self, text: str) -> None:
        """The run waits for an approval: what it asks (`paused_text`)."""

    def note(self, line: str) -> None:
        """A line about the run that is not its text (who decided an approval, the answer's outcome)."""

    def resumed(self) -> None:
        """Asking is over; the run goes on."""

    def finished(self, result: RunResult, streamed: str) -> None:
        """The end; `streamed` is what deltas showed since the last segment."""


class ChatDriver:
    """Sends messages to one session and follows their runs to the end."""

    def __init__(self, conn: ChatConnection, session_key: str, *, rpc_timeout: float = RPC_TIMEOUT) -> None:
        self.conn = conn
        self.session_key = session_key
        self.rpc_timeout = rpc_timeout

    def send(self, text: str) -> Sent:
        self._drain()
        run_id = str(uuid.uuid4())
        params = {"sessionKey": self.session_key, "message": text, "runId": run_id}
        result = self.conn.call("chat.send", params, timeout=self.rpc_timeout)
        if not isinstance(result, dict):
            raise ChatError(f"chat.send answered {result!r}")
        if result.get("command") == "status" and isinstance(result.get("response"), str):
            result = self._with_spend(result)
        return Sent(text, self.session_key, str(result.get("runId") or run_id), result)

    def _with_spend(self, result: dict[str, Any]) -> dict[str, Any]:
        """`/status` with dollars beside its tokens: this session's, today's and this month's spend from
        `spend.status` (each with its limit when one is set). Unchanged when the gateway has no `spend.status` or
        this token may not read it."""
        try:
            status = self.conn.call("spend.status", {"sessionKey": self.session_key}, timeout=self.rpc_timeout)
        except (CallFailedError, TimeoutError):
            return result
        line = spend_words.status_line(status)
        if line is None:
            return result
        return {**result, "response": spend_words.with_status_line(str(result["response"]), line)}

    def stop(self) -> str | None:
        """`/stop` for this session; the gateway's response line."""
        params = {"sessionKey": self.session_key, "message": "/stop"}
        result = self.conn.call("chat.send", params, timeout=STOP_GRACE_S)
        if isinstance(result, dict):
            return str(result.get("response") or result.get("error") or "") or None
        return None

    def answer(self, payload: dict[str, Any], decision: str, *, remember: bool = False) -> str:
        """Answer the approval a `paused` event asks for; the outcome in one line. With the approval's id (Orbital's
        event carries it), `approval.resolve`: it decides exactly that approval, or says who already did, and never
        lands in the session as a message. Without it (a gateway that sends GSV's bare event), `yes` / `no` as a
        message, which the gateway takes as the answer."""
        approval = approval_of(payload)
        if approval is None:
            message = "yes" if decision == "approve" else "no"
            result = self.conn.call("chat.send", {"sessionKey": self.session_key, "message": message})
            return str(result.get("response") or "") if isinstance(result, dict) else ""
        params: dict[str, Any] = {"approvalId": approval["approvalId"], "decision": decision, "via": "cli"}
        if remember:
            params["remember"] = "session"
        result = self.conn.call("approval.resolve", params, timeout=self.rpc_timeout)
        if not isinstance(result, dict):
            return f"approval.resolve answered {result!r}"
        if not result.get("resolved"):
            return str(result.get("message") or f"Already decided: {result.get('decision', '?')}.")
        tool = approval.get("tool") or "the call"
        if decision != "approve":
            return f"Denied {tool}."
        if remember:
            return f"Approved {tool}, and calls like it for the rest of this session."
        return f"Approved {tool}."

    def _drain(self) -> None:
        """Drop the events that came in since the last run (every client hears every session): none of them can
        belong to a run not sent yet."""
        while True:
            try:
                frame = self.conn.events.get_nowait()
            except queue.Empty:
                return
            if frame is LOST:
                self.conn.events.put(LOST)
                return

    def _ours(self, frame: dict[str, Any], run_id: str) -> dict[str, Any] | None:
        if frame.get("event") == "approval.resolved":
            payload = frame.get("payload")
            if isinstance(payload, dict) and payload.get("runId") == run_id:
                return {**payload, "state": "approval.resolved"}
            return None
        if frame.get("event") != "chat":
            return None
        payload = frame.get("payload")
        if not isinstance(payload, dict) or payload.get("runId") != run_id:
            return None
        if payload.get("sessionKey") != self.session_key:
            return None
        return payload

    def follow(
        self,
        sent: Sent,
        view: RunView,
        *,
        timeout: float | None = None,
        interrupt: threading.Event | None = None,
        approver: Approver | None = None,
    ) -> RunResult:
        """Follow the run `sent` started until it is over, telling `view` as it goes.

        Over means: a `final` or `error` event of this run; the connection lost; `timeout` seconds passed; or,
        after `interrupt` was set (which sends `/stop` once), the gateway did not end the run within
        `STOP_GRACE_S` or `interrupt` was set a second time. When the run pauses for an approval, `approver` (if
        any) asks at the terminal and its answer is sent; an answer given elsewhere is shown as it comes. Leaving
        the question (Ctrl-C) ends the wait with state `paused`: the run stays paused."""
        run_id = sent.run_id
        result = RunResult(run_id, sent.session_key, "error")
        seen: set[str] = set()
        segment = ""
        backlog: collections.deque[dict[str, Any] | None] = collections.deque()
        answered: set[str] = set()  # approvals this client decided: their `approval.resolved` says nothing new
        deadline = None if timeout is None else time.monotonic() + timeout
        stop_deadline: float | None = None
        view.started(sent)

        def end(state: str, **fields: Any) -> RunResult:
            result.state = state
            for name, value in fields.items():
                setattr(result, name, value)
            view.finished(result, segment)
            return result

        def fresh(calls: list[ToolCall]) -> list[ToolCall]:
            new = [c for c in calls if not c.id or c.id not in seen]
            seen.update(c.id for c in new if c.id)
            result.tool_calls.extend(new)
            return new

        while True:
            if interrupt is not None and interrupt.is_set():
                interrupt.clear()
                if stop_deadline is not None:
                    return end("error", error="stopped waiting for the run", cause="stopped", text=segment)
                result.stop_requested = True
                try:
                    view.stopping(self.stop())
                except TimeoutError as exc:
                    view.stopping(f"/stop: {exc}")
                except ChatError as exc:
                    if self.conn.is_lost:
                        return end("error", error=str(exc), cause="disconnected", text=segment)
                    view.stopping(str(exc))
                stop_deadline = time.monotonic() + STOP_GRACE_S
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return end("error", error=f"no end of run {run_id} within {timeout:g} s", cause="timeout", text=segment)
            if stop_deadline is not None and now >= stop_deadline:
                return end("error", error="the gateway did not confirm the stop", cause="stopped", text=segment)
            try:
                frame = backlog.popleft() if backlog else self.conn.events.get(timeout=POLL_S)
            except queue.Empty:
                continue
            if frame is LOST:
                self.conn.events.put(LOST)  # every later wait sees it too
                error = f"connection to {redact_url(self.conn.url)} lost: {self.conn.lost}"
                return end("error", error=error, cause="disconnected", text=segment)
            payload = self._ours(frame, run_id)
            if payload is None:
                continue
            state = payload.get("state")
            if state == "delta":
                piece = payload.get("text")
                if isinstance(piece, str) and piece:
                    segment += piece
                    result.streamed += piece
                    view.text(piece)
            elif state == "partial":
                message = payload.get("message")
                view.segment(text_of(message), segment, fresh(tool_calls_of(message)))
                segment = ""
            elif state == "tool":
                calls = fresh(
                    tool_calls_of(
                        {
                            "content": [
                                {"type": "toolCall", **t} for t in payload.get("tools") or [] if isinstance(t, dict)
                            ]
                        }
                    )
                )
                if calls:
                    view.tools(calls)
            elif state == "final":
                message = payload.get("message") if isinstance(payload.get("message"), dict) else {}
                calls = fresh(tool_calls_of(message))
                if calls:
                    view.tools(calls)
                return end("final", message=message, text=text_of(message))
            elif state == "error":
                return end("error", error=str(payload.get("error") or "unknown error"), text=segment)
            elif state == "approval.resolved":
                by = payload.get("by")
                who = by.get("id") if isinstance(by, dict) else None
                mine = who is not None and who == getattr(self.conn, "client_id", None)
                if payload.get("approvalId") not in answered and not mine:  # this client's answer was shown
                    view.note(decided_text(payload))
            elif state == "paused":
                view.paused(paused_text(payload, time.time() * 1000))
                if approver is None:
                    approval = approval_of(payload)
                    if approval is not None:
                        answer_with = f"`orbital approvals approve|deny {approval['approvalId']}`"
                        view.note(f"Waiting for an answer: {answer_with}, or the console.")
                    continue
                answer = approver(payload, run_id)
                backlog.extend(answer.held)
                if answer.leave:
                    return end("paused", error="the run is still waiting for an approval", cause="paused", text=segment)
                if answer.decision:
                    approval = approval_of(payload)
                    try:
                        view.note(self.answer(payload, answer.decision, remember=answer.remember))
                        if approval is not None:
                            answered.add(approval["approvalId"])
                    except CallFailedError as exc:
                        view.note(f"Error: {exc.message}")
                    except (ChatError, TimeoutError) as exc:
                        view.note(f"Error: {exc}")
                view.resumed()


# --- views --------------------------------------------------------------------------------------------------------


def _gear(stream: IO[str]) -> str:
    encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "")
    return "⚙" if encoding.startswith("utf") else "*"


def keep_line_breaks(text: str) -> str:
    """Markdown joins consecutive lines into one paragraph; chat text means its line breaks (`/status` is one
    fact a line, a model's list of steps too), so each one outside code fences becomes a hard break."""
    lines = text.split("\n")
    fence: str | None = None
    for i, line in enumerate(lines):
        stripped = line.lstrip()
        if fence is not None:
            if stripped.startswith(fence):
                fence = None
        elif stripped.startswith(("```", "~~~")):
            fence = stripped[:3]
        elif line.strip() and i + 1 < len(lines) and lines[i + 1].strip() and not line.endswith(("  ", "\\")):
            lines[i] = line + "  "
    return "\n".join(lines)


def _fit(line: str, width: int) -> str:
    line = " ".join(line.split())
    return line if len(line) <= width else line[: max(1, width - 1)] + "…"


def _width(stream: IO[str]) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns or 80
    except (OSError, ValueError, AttributeError):
        return shutil.get_terminal_size((80, 24)).columns or 80


class QuietView:
    """Shows nothing (`--json`)."""

    def started(self, sent: Sent) -> None:
        pass

    def text(self, piece: str) -> None:
        pass

    def segment(self, text: str, streamed: str, calls: list[ToolCall]) -> None:
        pass

    def tools(self, calls: list[ToolCall]) -> None:
        pass

    def stopping(self, response: str | None) -> None:
        pass

    def paused(self, text: str) -> None:
        pass

    def note(self, line: str) -> None:
        pass

    def resumed(self) -> None:
        pass

    def finished(self, result: RunResult, streamed: str) -> None:
        pass


class PlainView:
    """Raw text to `out` as it arrives; tool lines, notes and errors to `progress`."""

    def __init__(self, out: IO[str], progress: IO[str]) -> None:
        self.out = out
        self.progress = progress
        self._at_line_start = True

    def _write(self, text: str) -> None:
        if text:
            self.out.write(text)
            self.out.flush()
            self._at_line_start = text.endswith("\n")

    def _end_line(self) -> None:
        if not self._at_line_start:
            self._write("\n")

    def _note(self, line: str) -> None:
        if self.progress is self.out:
            self._end_line()
        else:
            self.out.flush()
        self.progress.write(line + "\n")
        self.progress.flush()

    def _shown(self, streamed: str, full: str) -> None:
        rest = unshown(streamed, full)
        if rest is None:
            self._end_line()
            self._write(full)
        else:
            self._write(rest)

    def started(self, sent: Sent) -> None:
        if sent.result.get("queued"):
            self._note(f"(queued behind the current run, position {sent.result.get('queuePosition', '?')})")

    def text(self, piece: str) -> None:
        self._write(piece)

    def segment(self, text: str, streamed: str, calls: list[ToolCall]) -> None:
        self._shown(streamed, text)
        self._end_line()
        self.tools(calls)

    def tools(self, calls: list[ToolCall]) -> None:
        width = _width(self.progress)
        for c in calls:
            self._note(_fit(f"{_gear(self.progress)} {c.line()}", width))

    def stopping(self, response: str | None) -> None:
        self._note(response or "stopping…")

    def paused(self, text: str) -> None:
        self._end_line()
        for line in text.splitlines():
            self._note(line)

    def note(self, line: str) -> None:
        self._note(line)

    def resumed(self) -> None:
        pass

    def finished(self, result: RunResult, streamed: str) -> None:
        if result.state == "final":
            self._shown(streamed, result.text)
            self._end_line()
        elif result.state == "paused":
            self._end_line()
            self._note(STAYS_PAUSED)
        else:
            self._end_line()
            self._note(f"Error: {result.error}")


class RichView:
    """A spinner until the first text, then the tail of the streamed text in a live area; once a message is
    complete the live area is replaced by the message rendered as markdown, so each text appears once."""

    def __init__(self, console: Console, errors: Console | None = None, *, markdown: bool = True) -> None:
        self.console = console
        self.errors = errors or console
        self.markdown = markdown
        self._live: Any = None
        self._spinner: Any = None
        self._segment = ""

    def _start(self, status: str) -> None:
        from rich.live import Live
        from rich.spinner import Spinner

        self._stop()
        self._segment = ""
        self._spinner = Spinner("dots", text=status, style="cyan")
        self._live = Live(
            _Pane(self),
            console=self.console,
            transient=True,
            refresh_per_second=12,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._live.start()

    def _stop(self) -> None:
        if self._live is not None:
            live, self._live = self._live, None
            live.stop()

    def _render_text(self, text: str) -> None:
        if not text.strip():
            return
        if self.markdown:
            from rich.markdown import Markdown

            self.console.print(Markdown(keep_line_breaks(text)))
        else:
            from rich.text import Text

            self.console.print(Text(text))

    def _tool_lines(self, calls: list[ToolCall]) -> None:
        from rich.text import Text

        width = self.console.width
        for c in calls:
            self.console.print(Text(_fit(f"{_gear(self.console.file)} {c.line()}", width), style="dim cyan"))

    def started(self, sent: Sent) -> None:
        if sent.result.get("queued"):
            position = sent.result.get("queuePosition", "?")
            self._start(f"queued behind the current run (position {position})…")
        else:
            self._start("thinking…")

    def text(self, piece: str) -> None:
        self._segment += piece
        if self._live is not None:
            self._live.refresh()

    def segment(self, text: str, streamed: str, calls: list[ToolCall]) -> None:
        self._stop()
        self._render_text(text or streamed)
        self._tool_lines(calls)
        self._start("working…")

    def tools(self, calls: list[ToolCall]) -> None:
        self._stop()
        self._tool_lines(calls)

    def stopping(self, response: str | None) -> None:
        from rich.text import Text

        self.console.print(Text(response or "stopping…", style="yellow"))
        if self._spinner is not None:
            self._spinner.update(text="stopping…")

    def paused(self, text: str) -> None:
        from rich.text import Text

        self._stop()
        self._segment = ""
        first, _, rest = text.partition("\n")
        self.console.print(Text(first, style="bold yellow"))
        if rest:
            self.console.print(Text(rest, style="yellow"))

    def note(self, line: str) -> None:
        from rich.text import Text

        self.console.print(Text(line, style="bold red" if line.startswith("Error:") else "cyan"))

    def resumed(self) -> None:
        self._start("working…")

    def finished(self, result: RunResult, streamed: str) -> None:
        from rich.text import Text

        self._stop()
        if result.state == "paused":
            self.console.print(Text(STAYS_PAUSED, style="yellow"))
            return
        if result.state == "final":
            self._render_text(result.text or streamed)
            if not (result.text or streamed).strip() and not result.tool_calls:
                self.console.print(Text("(the reply has no text)", style="dim"))
        else:
            if streamed.strip():
                self.console.print(Text(streamed))
            cancelled = result.stop_requested and result.cause == "run"
            style = "yellow" if cancelled else "bold red"
            self.errors.print(Text(("⏹ " if cancelled else "Error: ") + str(result.error), style=style))


class _Pane:
    """The live area of `RichView`: the spinner, or the last lines of the text streamed so far."""

    def __init__(self, view: RichView) -> None:
        self.view = view

    def __rich_console__(self, console: Console, options: Any) -> Iterator[Any]:
        from rich.text import Text

        if not self.view._segment:
            yield self.view._spinner
            return
        lines = Text(self.view._segment).wrap(console, max(1, options.max_width))
        keep = max(1, (options.height or console.height) - 2)
        yield Text("\n").join(lines[-keep:])


# --- the command --------------------------------------------------------------------------------------------------


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
def keys_not_echoed() -> Iterator[None]:
    """While a reply streams, keys typed on the terminal are not echoed (they would tear the live area); Ctrl-C
    still sends SIGINT and typed-ahead text waits for the next prompt."""
    try:
        import termios

        fd = sys.stdin.fileno()
        if not os.isatty(fd):
            raise OSError("not a terminal")
        saved = termios.tcgetattr(fd)
        quiet = list(saved)
        quiet[3] &= ~(termios.ECHO | getattr(termios, "ECHOCTL", 0))
        termios.tcsetattr(fd, termios.TCSANOW, quiet)
    except Exception:  # no termios (Windows), no terminal, a pseudo-file as stdin
        yield
        return
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            termios.tcsetattr(fd, termios.TCSANOW, saved)


@contextlib.contextmanager
def line_input(fd: int) -> Iterator[None]:
    """While inside, the terminal echoes keys and hands over whole lines (an answer typed at a question), whatever
    `keys_not_echoed` set around it."""
    try:
        import termios

        saved = termios.tcgetattr(fd)
        typing = list(saved)
        typing[3] |= termios.ECHO | termios.ICANON
        termios.tcsetattr(fd, termios.TCSANOW, typing)
    except Exception:  # not a terminal
        yield
        return
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            termios.tcsetattr(fd, termios.TCSANOW, saved)


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


# --- interactive --------------------------------------------------------------------------------------------------


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
        `GaveUpError` when
        Ctrl-C ended the retries (a KeyboardInterrupt, or `stop` set where Ctrl-C sets it instead)."""
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
