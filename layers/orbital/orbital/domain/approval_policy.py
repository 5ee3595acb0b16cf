"""The tool-approval policy (config `toolApproval`) and the answers a user types to a paused run.

Wire-compatible with GSV's protocol-1 policy (spec gsv-protocol-late.md §4.2, §4.5): the same rule shape, the same
matching, the same strings. Everything here is pure: `evaluate` reads a policy value as stored (unvalidated, so a
malformed policy is tolerated the way GSV tolerates it), `parse_answer` reads a chat message, and the prompt and
reply texts are built from plain values.

* `defaultDecision`: "allow" | "ask" | "deny"; anything else is "allow".
* `rules`: tried in order, the first match wins; a rule without a string `tool` is skipped; a `when` that is not a
  list means no conditions; a matching rule with an invalid `decision` gives the default decision.
* Tool patterns are trimmed; an empty one never matches; `*` alone matches every tool; without `*` the match is exact
  and case-sensitive; with `*` the pattern is an anchored glob in which only `*` is special.
* Condition paths are dot paths into the call's arguments (empty segments dropped, integer segments index arrays).
* `equals` is JavaScript's strict equality (`"1"` is not `1`, `true` is not `1`, objects never equal); `contains`,
  `startsWith` and `regex` need a string on both sides; a regex is JavaScript source with JavaScript flags
  (`i`, `m`, `s`, and the flags that do not change a single test: `g`, `u`, `d`, `v`; `y` anchors the match at the
  start); an unknown or repeated flag, or a pattern that does not compile, makes the condition false.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

DEFAULT_TIMEOUT_MS = 600_000
"""How long an approval waits for an answer by default (`toolApproval.timeoutMs`): ten minutes."""
MIN_TIMEOUT_MS = 1_000
MAX_TIMEOUT_MS = 7 * 86_400_000
"""An approval waits at most a week (the agent_turn execution's own limit is eight days)."""

Decision = Literal["allow", "ask", "deny"]
Answer = Literal["approve", "deny"]

DECISIONS: tuple[str, ...] = ("allow", "ask", "deny")
OPERATORS: tuple[str, ...] = ("equals", "contains", "startsWith", "regex")
REGEX_FLAGS = "dgimsuvy"

APPROVE_WORDS = frozenset({"yes", "y", "approve", "approved", "ok", "okay"})
DENY_WORDS = frozenset({"no", "n", "deny", "denied", "reject", "rejected"})

ARGS_PREVIEW_CHARS = 400
"""The prompt's `Args:` line: the arguments' JSON, cut to 397 characters and "..." when longer than 400."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the policy says about one call: the decision, and the matching rule's `id` and `reason` (strings or
    None)."""

    decision: Decision
    rule_id: str | None = None
    reason: str | None = None


class _Missing:
    """JavaScript's `undefined`: a path that leads nowhere (not the same as an explicit null)."""

    _instance: _Missing | None = None

    def __new__(cls) -> _Missing:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


def default_decision(policy: Any) -> Decision:
    value = policy.get("defaultDecision") if isinstance(policy, Mapping) else None
    return value if value in DECISIONS else "allow"


def evaluate(policy: Any, tool: str, args: Any) -> Verdict:
    """The verdict for a call of `tool` (the name the model called: `gsv__ReadFile`, `{nodeId}__Bash`) with
    `args`, under `policy` (the `toolApproval` value; None or a non-object is the default: allow everything)."""
    default = default_decision(policy)
    rules = policy.get("rules") if isinstance(policy, Mapping) else None
    if not isinstance(rules, list):
        return Verdict(default)
    for rule in rules:
        if not isinstance(rule, Mapping) or not isinstance(rule.get("tool"), str):
            continue
        if not matches_tool(rule["tool"], tool):
            continue
        conditions = rule.get("when")
        if isinstance(conditions, list) and not all(condition_matches(c, args) for c in conditions):
            continue
        decision = rule.get("decision")
        rule_id = rule.get("id")
        reason = rule.get("reason")
        return Verdict(
            decision if decision in DECISIONS else default,
            rule_id if isinstance(rule_id, str) else None,
            reason if isinstance(reason, str) else None,
        )
    return Verdict(default)


def matches_tool(pattern: str, tool: str) -> bool:
    """A tool name pattern as `toolApproval` rules read it (also the taint settings' patterns): trimmed, `*` alone
    matches every name, without `*` the name exactly, else an anchored glob where only `*` is special."""
    pattern = pattern.strip()
    if not pattern:
        return False
    if pattern == "*":
        return True
    if "*" not in pattern:
        return pattern == tool
    regex = "".join(".*" if part == "*" else re.escape(part) for part in re.split(r"(\*)", pattern))
    return re.fullmatch(regex, tool, re.DOTALL) is not None


def _index(segment: str) -> int | None:
    """JavaScript's `parseInt(segment, 10)` for an array step: leading digits (after an optional sign), or None."""
    match = re.match(r"\s*([+-]?\d+)", segment)
    return int(match.group(1)) if match else None


def resolve_path(args: Any, path: Any) -> Any:
    """The value at a dot path in the arguments, or MISSING (a step through a non-object, an empty path)."""
    if not isinstance(path, str):
        return MISSING
    segments = [s for s in path.strip().split(".") if s]
    if not segments:
        return MISSING
    current = args
    for segment in segments:
        if isinstance(current, list):
            index = _index(segment)
            if index is None or not 0 <= index < len(current):
                return MISSING
            current = current[index]
        elif isinstance(current, Mapping):
            current = current.get(segment, MISSING)
        else:
            return MISSING
        if current is MISSING:
            return MISSING
    return current


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def strict_equals(a: Any, b: Any) -> bool:
    """JavaScript's `===` between two JSON values (a condition's value and an argument)."""
    if a is MISSING or b is MISSING:
        return a is b
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if _is_number(a) and _is_number(b):
        return bool(a == b)
    if isinstance(a, str) and isinstance(b, str):
        return a == b
    return False  # objects and arrays compare by identity in JavaScript: a config value is never an argument


_JS_NAMED_GROUP = re.compile(r"(?<!\\)\(\?<(?![=!])")
_JS_BACKREF = re.compile(r"\\k<([A-Za-z_][A-Za-z0-9_]*)>")


def compile_regex(source: Any, flags: Any = None) -> re.Pattern[str] | None:
    """A JavaScript regex (`new RegExp(source, flags)`) as a Python pattern, or None when JavaScript would throw
    (or when Python cannot read a construct JavaScript accepts: the condition is then false, as an invalid regex
    is)."""
    if not isinstance(source, str):
        return None
    if flags is None or flags is MISSING:
        flags = ""
    if not isinstance(flags, str) or any(f not in REGEX_FLAGS for f in flags) or len(set(flags)) != len(flags):
        return None
    py_flags = 0
    if "i" in flags:
        py_flags |= re.IGNORECASE
    if "m" in flags:
        py_flags |= re.MULTILINE
    if "s" in flags:
        py_flags |= re.DOTALL
    translated = _JS_BACKREF.sub(r"(?P=\1)", _JS_NAMED_GROUP.sub("(?P<", source))
    if "y" in flags:
        translated = f"(?:{translated})"
    try:
        return re.compile(translated, py_flags)
    except (re.error, RecursionError, OverflowError):
        return None


def regex_test(source: Any, flags: Any, text: Any) -> bool:
    if not isinstance(text, str):
        return False
    pattern = compile_regex(source, flags)
    if pattern is None:
        return False
    sticky = isinstance(flags, str) and "y" in flags
    return (pattern.match(text) if sticky else pattern.search(text)) is not None


def condition_matches(condition: Any, args: Any) -> bool:
    if not isinstance(condition, Mapping):
        return False
    actual = resolve_path(args, condition.get("path"))
    expected = condition.get("value", MISSING)
    op = condition.get("op")
    if op == "equals":
        return strict_equals(actual, expected)
    if op == "contains":
        return isinstance(actual, str) and isinstance(expected, str) and expected in actual
    if op == "startsWith":
        return isinstance(actual, str) and isinstance(expected, str) and actual.startswith(expected)
    if op == "regex":
        return isinstance(expected, str) and regex_test(expected, condition.get("flags"), actual)
    return False


def regex_error(source: Any, flags: Any = None) -> str | None:
    """Why a rule's regex would never match (for the config schema to refuse it at `config.set`), or None."""
    if not isinstance(source, str):
        return "a regex condition's value must be a string"
    if flags is not None and not isinstance(flags, str):
        return "regex flags must be a string"
    if isinstance(flags, str):
        bad = sorted({f for f in flags if f not in REGEX_FLAGS})
        if bad:
            return f"unknown regex flag(s): {''.join(bad)} (allowed: {REGEX_FLAGS})"
        if len(set(flags)) != len(flags):
            return "a regex flag is repeated"
    if compile_regex(source, flags) is None:
        return f"invalid regex: {source!r}"
    return None


# --- answers typed into a paused session (§4.5) ------------------------------------------------------------------

_ENVELOPE = re.compile(r"^\[[^\]]*\]\s*")


def parse_answer(text: Any) -> tuple[Answer | None, str | None]:
    """A message read as an answer to a pending approval: `(decision, approval_id)`. The first word decides
    ("yes", "y", "approve", "approved", "ok", "okay" / "no", "n", "deny", "denied", "reject", "rejected", any case,
    after one leading `[...]` envelope); the second word, when there is one, names the approval. Anything else is
    `(None, None)`: not an answer (the caller reminds the user)."""
    if not isinstance(text, str):
        return None, None
    body = _ENVELOPE.sub("", text.lower().strip(), count=1)
    tokens = body.split()
    if not tokens:
        return None, None
    first = tokens[0]
    decision: Answer | None = "approve" if first in APPROVE_WORDS else "deny" if first in DENY_WORDS else None
    if decision is None:
        return None, None
    return decision, tokens[1] if len(tokens) > 1 else None


# --- texts (exact: GSV clients show and match them) --------------------------------------------------------------

REPLY_HINT = 'Reply with "yes" to approve or "no" to deny.'


def args_preview(args: Any) -> str:
    try:
        text = json.dumps(args, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        return "{}"
    if len(text) > ARGS_PREVIEW_CHARS:
        return text[: ARGS_PREVIEW_CHARS - 3] + "..."
    return text


def prompt_text(tool: str, args: Any, rule_id: str | None, reason: str | None) -> str:
    """The `paused` event's text (and what a channel peer is sent)."""
    lines = ["Run paused: tool approval required.", f"Tool: {tool}", f"Args: {args_preview(args)}"]
    if rule_id:
        lines.append(f"Policy rule: {rule_id}")
    if reason:
        lines.append(f"Reason: {reason}")
    lines.append(REPLY_HINT)
    return "\n".join(lines)


def reminder_text(approval_id: str, tool: str) -> str:
    return f"Run is paused waiting for tool approval ({approval_id}) for {tool}.\n{REPLY_HINT}"


def unknown_id_text(given_id: str, approval_id: str, tool: str) -> str:
    return f"Unknown approval id: {given_id}. " + reminder_text(approval_id, tool)


def approved_text(tool: str) -> str:
    return f"Approved {tool}. Continuing run."


def denied_text(tool: str) -> str:
    return f"Denied {tool}. Continuing run without executing it."


NO_PENDING_CALL_TEXT = "No pending tool call found for approval. You can continue normally."
NO_ACTIVE_RUN_TEXT = "No active run is waiting for approval anymore. You can continue normally."

DENIED_BY_USER = "Tool execution denied by user"


def denied_by_policy(verdict: Verdict) -> str:
    """The error a denied call completes with (the model sees `Error: ` + this, `isError: true`)."""
    if verdict.reason:
        return f"Tool execution denied by policy: {verdict.reason}"
    if verdict.rule_id:
        return f"Tool execution denied by policy: rule {verdict.rule_id}"
    return "Tool execution denied by policy"


def timed_out_text(timeout_ms: int) -> str:
    minutes = timeout_ms / 60_000
    span = f"{minutes:g} minute{'s' if minutes != 1 else ''}" if timeout_ms >= 60_000 else f"{timeout_ms / 1000:g} s"
    return f"Tool execution denied: no answer to the approval request within {span}"
