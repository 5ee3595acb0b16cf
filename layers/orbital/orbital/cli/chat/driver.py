"""`ChatDriver`: sends `chat.send` and follows one run to its end, telling a view as it goes."""

from __future__ import annotations

import collections
import queue
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Protocol

from orbital.cli.chat.connection import (
    LOST,
    RPC_TIMEOUT,
    CallFailedError,
    ChatConnection,
    ChatError,
)
from orbital.cli.chat.messages import (
    Approver,
    ToolCall,
    approval_of,
    decided_text,
    paused_text,
    text_of,
    tool_calls_of,
)
from orbital.domain import spend_words
from orbital.protocol.local_token import redact_url

STOP_GRACE_S = 10.0
"""After `/stop`, how long to wait for the gateway to end the run before giving up on it."""
POLL_S = 0.1


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
        following = _Following(self, sent, view, timeout, interrupt, approver)
        view.started(sent)
        while True:
            over = following.interrupted() or following.expired()
            if over is not None:
                return over
            try:
                frame = following.backlog.popleft() if following.backlog else self.conn.events.get(timeout=POLL_S)
            except queue.Empty:
                continue
            if frame is LOST:
                self.conn.events.put(LOST)  # every later wait sees it too
                error = f"connection to {redact_url(self.conn.url)} lost: {self.conn.lost}"
                return following.end("error", error=error, cause="disconnected")
            payload = self._ours(frame, sent.run_id)
            over = following.event(payload) if payload is not None else None
            if over is not None:
                return over


class _Following:
    """One run `ChatDriver.follow` follows: what it keeps between the run's events, and what it does with each."""

    def __init__(
        self,
        driver: ChatDriver,
        sent: Sent,
        view: RunView,
        timeout: float | None,
        interrupt: threading.Event | None,
        approver: Approver | None,
    ) -> None:
        self.driver = driver
        self.view = view
        self.timeout = timeout
        self.interrupt = interrupt
        self.approver = approver
        self.run_id = sent.run_id
        self.result = RunResult(sent.run_id, sent.session_key, "error")
        self.seen: set[str] = set()
        self.segment = ""
        """The text streamed since the last message the run completed."""
        self.backlog: collections.deque[dict[str, Any] | None] = collections.deque()
        """Events read while the approver asked, handled next."""
        self.answered: set[str] = set()
        """Approvals this client decided: their `approval.resolved` says nothing new."""
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.stop_deadline: float | None = None

    def end(self, state: str, **fields: Any) -> RunResult:
        """The run is over (for this client): its result, told to the view."""
        fields.setdefault("text", self.segment)
        self.result.state = state
        for name, value in fields.items():
            setattr(self.result, name, value)
        self.view.finished(self.result, self.segment)
        return self.result

    def fresh(self, calls: list[ToolCall]) -> list[ToolCall]:
        """The tool calls not shown yet (an event may repeat those of an earlier one)."""
        new = [c for c in calls if not c.id or c.id not in self.seen]
        self.seen.update(c.id for c in new if c.id)
        self.result.tool_calls.extend(new)
        return new

    def interrupted(self) -> RunResult | None:
        """Ctrl-C: the first sends `/stop` and waits `STOP_GRACE_S` for the run to end; a second stops waiting."""
        if self.interrupt is None or not self.interrupt.is_set():
            return None
        self.interrupt.clear()
        if self.stop_deadline is not None:
            return self.end("error", error="stopped waiting for the run", cause="stopped")
        self.result.stop_requested = True
        try:
            self.view.stopping(self.driver.stop())
        except TimeoutError as exc:
            self.view.stopping(f"/stop: {exc}")
        except ChatError as exc:
            if self.driver.conn.is_lost:
                return self.end("error", error=str(exc), cause="disconnected")
            self.view.stopping(str(exc))
        self.stop_deadline = time.monotonic() + STOP_GRACE_S
        return None

    def expired(self) -> RunResult | None:
        """The run's deadline passed, or the stop's."""
        now = time.monotonic()
        if self.deadline is not None and now >= self.deadline:
            error = f"no end of run {self.run_id} within {self.timeout:g} s"
            return self.end("error", error=error, cause="timeout")
        if self.stop_deadline is not None and now >= self.stop_deadline:
            return self.end("error", error="the gateway did not confirm the stop", cause="stopped")
        return None

    def event(self, payload: dict[str, Any]) -> RunResult | None:
        """One event of the run, shown; its result when it ends the run."""
        state = payload.get("state")
        if state == "delta":
            piece = payload.get("text")
            if isinstance(piece, str) and piece:
                self.segment += piece
                self.result.streamed += piece
                self.view.text(piece)
        elif state == "partial":
            message = payload.get("message")
            self.view.segment(text_of(message), self.segment, self.fresh(tool_calls_of(message)))
            self.segment = ""
        elif state == "tool":
            tools = [{"type": "toolCall", **t} for t in payload.get("tools") or [] if isinstance(t, dict)]
            calls = self.fresh(tool_calls_of({"content": tools}))
            if calls:
                self.view.tools(calls)
        elif state == "final":
            message = payload.get("message") if isinstance(payload.get("message"), dict) else {}
            calls = self.fresh(tool_calls_of(message))
            if calls:
                self.view.tools(calls)
            return self.end("final", message=message, text=text_of(message))
        elif state == "error":
            return self.end("error", error=str(payload.get("error") or "unknown error"))
        elif state == "approval.resolved":
            by = payload.get("by")
            who = by.get("id") if isinstance(by, dict) else None
            mine = who is not None and who == getattr(self.driver.conn, "client_id", None)
            if payload.get("approvalId") not in self.answered and not mine:  # this client's answer was shown
                self.view.note(decided_text(payload))
        elif state == "paused":
            return self.paused(payload)
        return None

    def paused(self, payload: dict[str, Any]) -> RunResult | None:
        """The run waits for an approval: the approver asks (without one, where to answer is said); its answer is
        sent, or leaving the question ends the wait (the run stays paused)."""
        self.view.paused(paused_text(payload, time.time() * 1000))
        approval = approval_of(payload)
        if self.approver is None:
            if approval is not None:
                answer_with = f"`orbital approvals approve|deny {approval['approvalId']}`"
                self.view.note(f"Waiting for an answer: {answer_with}, or the console.")
            return None
        answer = self.approver(payload, self.run_id)
        self.backlog.extend(answer.held)
        if answer.leave:
            return self.end("paused", error="the run is still waiting for an approval", cause="paused")
        if answer.decision:
            try:
                self.view.note(self.driver.answer(payload, answer.decision, remember=answer.remember))
                if approval is not None:
                    self.answered.add(approval["approvalId"])
            except CallFailedError as exc:
                self.view.note(f"Error: {exc.message}")
            except (ChatError, TimeoutError) as exc:
                self.view.note(f"Error: {exc}")
        self.view.resumed()
        return None
