"""What a run's events say, as `orbital chat` shows it: a message's text and tool calls, a paused run's
approval (its tool, arguments, rule, taint and time left) and how it was decided."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Protocol


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
