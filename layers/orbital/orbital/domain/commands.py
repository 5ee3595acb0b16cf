"""Slash commands and inline directives (spec §6.1, §6.2).

A *command* is a whole message such as `/model openai/gpt-4.1`: it changes the session (or reports on it) and never
reaches the model. A *directive* is a token inside a normal message such as `/t:high` or `/m:claude-opus-4-6`: it
applies to that one message only and is removed from the text the model sees. Callers check for a command first (on
the raw text), then parse directives.

Everything here is pure: the handlers in `chat.send` and the channel inbound path do the session work and use the
formatters below for the exact user-visible answers. The chat variant of an answer separates lines with `\\n`; the
channel variant uses `\\n\\n` in the model/think answers and a bulleted `/status`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# --- thinking levels and model selectors --------------------------------------------------------------------------

THINK_LEVEL_NAMES = ("none", "minimal", "low", "medium", "high", "xhigh")
_THINK_ALIASES = {
    "off": "none",
    "none": "none",
    "0": "none",
    "minimal": "minimal",
    "min": "minimal",
    "1": "minimal",
    "low": "low",
    "2": "low",
    "medium": "medium",
    "med": "medium",
    "3": "medium",
    "high": "high",
    "4": "high",
    "xhigh": "xhigh",
    "max": "xhigh",
    "5": "xhigh",
}

THINK_LEVELS = "Levels: off, minimal, low, medium, high, xhigh"
MODEL_HELP = "Use provider/model-id, or model-id to keep the current provider."


def normalize_think_level(raw: str | None) -> str | None:
    """The stored thinking level for a user-typed one (`off` → `none`, `max` → `xhigh`, digits 0-5), or None."""
    if raw is None:
        return None
    return _THINK_ALIASES.get(raw.strip().lower())


def parse_model_selection(raw: str | None, fallback_provider: str | None = None) -> dict[str, str] | None:
    """`provider/model-id` (split at the first `/`, provider lowercased) or a bare `model-id` that keeps the fallback
    provider. None when empty, containing whitespace, or missing a part."""
    text = (raw or "").strip()
    if not text or re.search(r"\s", text):
        return None
    if "/" not in text:
        provider = (fallback_provider or "").strip().lower()
        return {"provider": provider, "id": text} if provider else None
    provider, model_id = text.split("/", 1)
    provider = provider.lower()
    if not provider or not model_id:
        return None
    return {"provider": provider, "id": model_id}


def format_model(model: Mapping[str, Any] | str) -> str:
    """`provider/id` for a `{provider, id}` mapping; strings are taken as already formatted."""
    if isinstance(model, str):
        return model
    return f"{model.get('provider')}/{model.get('id')}"


# --- commands ------------------------------------------------------------------------------------------------------

COMMAND_ALIASES = {
    "new": "reset",
    "reset": "reset",
    "compact": "compact",
    "stop": "stop",
    "status": "status",
    "model": "model",
    "think": "think",
    "thinking": "think",
    "t": "think",
    "help": "help",
    "?": "help",  # listed for completeness: `?` is not a word character, so `/?` never parses as a command
}

# `/`, a name of ASCII word characters, then whitespace or the end: `/t:high` (a directive) and `/?` are not commands
_COMMAND = re.compile(r"^/((?a:\w)+)(?:\s+(.*))?$", re.DOTALL)


@dataclass
class Command:
    name: str
    """The canonical name: reset, compact, stop, status, model, think or help."""
    args: str
    """The rest of the message, trimmed (`""` when absent). reset, stop, status and help ignore it."""


def parse_command(text: str | None) -> Command | None:
    """The command a whole message spells, or None (unknown names are ordinary messages for the model).

    `/t:high hello` is not a command: the `:` right after the name makes it a directive instead."""
    match = _COMMAND.match((text or "").strip())
    if match is None:
        return None
    name = COMMAND_ALIASES.get(match.group(1).lower())
    if name is None:
        return None
    return Command(name=name, args=(match.group(2) or "").strip())


@dataclass
class CommandReply:
    """The outcome of a command that needs no session I/O to decide: exactly one of `response` / `error`, and the
    session settings to patch when the command changes them."""

    response: str | None = None
    error: str | None = None
    settings_patch: dict[str, Any] | None = None


NO_RUN = "No run in progress."
COMMAND_EXECUTED = "Command executed"
"""What a channel is sent when a command produced neither a response nor an error."""
COMPACT_USAGE = "Invalid count. Usage: /compact [N]"
DEFAULT_COMPACT_KEEP = 20


def command_failed(error: object) -> str:
    return f"Command failed: {error}"


def reset_response(archived_messages: int) -> str:
    return f"Session reset. Archived {archived_messages} messages."


def _parse_leading_int(text: str) -> int | None:
    """The integer prefix of `text` after leading whitespace (`"10 more"` → 10, `"3.5"` → 3), like a lenient
    integer parse; None when there is none."""
    match = re.match(r"\s*([+-]?\d+)", text)
    return int(match.group(1)) if match else None


def compact_count(args: str) -> int | None:
    """How many messages `/compact [N]` keeps: 20 without args; None when N is not a number ≥ 1."""
    if not args:
        return DEFAULT_COMPACT_KEEP
    count = _parse_leading_int(args)
    return count if count is not None and count >= 1 else None


def compact_response(kept: int, trimmed: int) -> str:
    return f"Compacted session. Kept {kept} messages, archived {trimmed}."


def format_stop(run_id: str | None, cancelled: int = 0, channel: bool = False) -> str:
    """The `/stop` answer; `run_id` None means nothing was running."""
    if run_id is None:
        return NO_RUN
    shown = f"`{run_id}`" if channel else run_id
    tail = f", cancelled {cancelled} pending tool(s)" if cancelled > 0 else ""
    return f"Stopped run {shown}{tail}."


def _number(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def format_status(
    session_key: str,
    message_count: int,
    tokens_in: int,
    tokens_out: int,
    model: Mapping[str, Any] | str,
    thinking: str | None,
    reset_mode: str | None,
    channel: bool = False,
    extra_lines: list[str] | None = None,
) -> str:
    """The `/status` answer. `model` is the session's effective model (fix F15), not the global default."""
    lines = [
        f"Session: `{session_key}`" if channel else f"Session: {session_key}",
        f"Messages: {_number(message_count)}",
        f"Tokens: {_number(tokens_in)} in / {_number(tokens_out)} out",
        f"Model: {format_model(model)}",
    ]
    if thinking:
        lines.append(f"Thinking: {thinking}")
    if reset_mode:
        lines.append(f"Reset: {reset_mode}")
    lines.extend(extra_lines or [])
    if channel:
        return "\n".join(["**Session Status**", *(f"• {line}" for line in lines)])
    return "\n".join(lines)


def model_current(model: Mapping[str, Any] | str, channel: bool = False) -> str:
    sep = "\n\n" if channel else "\n"
    return f"Current model: {format_model(model)}{sep}{MODEL_HELP}"


def model_invalid(args: str) -> str:
    return f"Invalid model selector: {args}\n{MODEL_HELP}"


def model_set(model: Mapping[str, Any] | str) -> str:
    return f"Model set to {format_model(model)}"


def model_unknown(problem: Any) -> str:
    """`problem`: the schema's `Problem` with the model."""
    return f"Invalid model: {problem.message()}\n{MODEL_HELP}"


def model_command(
    args: str, effective_model: Mapping[str, Any], channel: bool = False, *, config: dict[str, Any] | None = None
) -> CommandReply:
    """`/model [selector]`: report the effective model, or select one for the session (bare ids keep the current
    provider). With `config`, a provider it does not know (neither built in nor with `providers.<name>.baseUrl`) is
    refused as `config.set` refuses it; whether the model id exists at the provider is not checked here."""
    if not args:
        return CommandReply(response=model_current(effective_model, channel))
    selected = parse_model_selection(args, str(effective_model.get("provider") or ""))
    if selected is None:
        return CommandReply(error=model_invalid(args))
    # lazy: the schema's models take tens of ms to build; only config writes and model choices need them
    from orbital.domain import config_schema

    problem = config_schema.model_problem(config, selected) if config is not None else None
    if problem is not None:
        return CommandReply(error=model_unknown(problem))
    return CommandReply(response=model_set(selected), settings_patch={"model": selected})


def think_current(level: str | None, channel: bool = False) -> str:
    sep = "\n\n" if channel else "\n"
    return f"Thinking level: {level or 'off'}{sep}{THINK_LEVELS}"


def think_invalid(args: str) -> str:
    return f"Invalid level: {args}\n{THINK_LEVELS}"


def think_set(level: str) -> str:
    return f"Thinking level set to {level}"


def think_command(args: str, current_level: str | None, channel: bool = False) -> CommandReply:
    """`/think [level]`: report the session's level, or set it (`off` is stored and echoed as `none`)."""
    if not args:
        return CommandReply(response=think_current(current_level, channel))
    level = normalize_think_level(args)
    if level is None:
        return CommandReply(error=think_invalid(args))
    return CommandReply(response=think_set(level), settings_patch={"thinkingLevel": level})


_HELP_SECTIONS: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    (
        "Session",
        (
            ("/new or /reset", "archive this conversation and start a fresh one"),
            ("/compact [N]", "keep only the last N messages (default 20) and archive the rest"),
            ("/stop", "cancel the run in progress"),
            ("/status", "show the session, message and token counts, model and settings"),
        ),
    ),
    (
        "Settings",
        (
            ("/model [provider/model-id|model-id]", "show the model, or pick one for this session"),
            ("/think [level]", "show or set the thinking level: off, minimal, low, medium, high, xhigh"),
        ),
    ),
    (
        "Inline Directives (this message only)",
        (
            ("/t:high message", "think harder about just this message"),
            ("/m:model-id message", "answer with another model of the current provider"),
            ("/m:provider/model-id message", "answer with a model of another provider"),
        ),
    ),
    ("Info", (("/help", "show this list"),)),
)


def help_sections() -> tuple[tuple[str, tuple[tuple[str, str], ...]], ...]:
    """The commands and directives `/help` lists: (group title, ((usage, what it does), ...)), in order."""
    return _HELP_SECTIONS


def help_text(channel: bool = False) -> str:
    """The `/help` answer: every command and directive, grouped. Channels get plain bullets instead of code
    spans, since not every chat app renders them."""
    out = ["**Orbital commands**"]
    for title, rows in _HELP_SECTIONS:
        out.append("")
        out.append(f"*{title}*")
        for usage, what in rows:
            out.append(f"• {usage}: {what}" if channel else f"- `{usage}`: {what}")
    return "\n".join(out)


# --- directives ----------------------------------------------------------------------------------------------------


def _directive_pattern(names: str) -> re.Pattern[str]:
    # start-of-text or one whitespace char, `/name`, optional `:value`, then whitespace or end of text
    return re.compile(rf"(?:^|\s)/(?:{names})(?::(\S+))?(?=\s|$)", re.IGNORECASE)


_THINK_DIRECTIVE = _directive_pattern("thinking|think|t")
_MODEL_DIRECTIVE = _directive_pattern("model|m")
_STATUS_DIRECTIVE = _directive_pattern("status")


def _extract(pattern: re.Pattern[str], text: str) -> tuple[bool, str | None, str]:
    """Remove the first occurrence of a directive: (found, value, text). Removing one rejoins the halves with a
    space and collapses whitespace; text without the directive is returned untouched."""
    match = pattern.search(text)
    if match is None:
        return False, None, text
    joined = text[: match.start()] + " " + text[match.end() :]
    return True, match.group(1), re.sub(r"\s+", " ", joined).strip()


@dataclass
class Directives:
    think_level: str | None
    """The normalized level; None when absent or invalid."""
    has_think: bool
    """True whenever a think directive was present, even with an invalid level."""
    model: dict[str, str] | None
    has_model: bool
    raw_model: str | None
    """The selector as typed, for the invalid-selector acknowledgement."""
    has_status: bool
    """`/status` inside a message is only stripped; it adds nothing."""
    cleaned: str
    """The message without the directives, which is what the model sees."""

    @property
    def any(self) -> bool:
        return self.has_think or self.has_model or self.has_status


def literal_text(text: str) -> Directives:
    """A message read as having no directive at all: all of it is for the model."""
    return Directives(None, False, None, False, None, False, text)


def parse_directives(text: str, fallback_provider: str | None = None) -> Directives:
    """Extract the first think, model and status directive (in that order); later repeats stay in the text."""
    has_think, think_raw, rest = _extract(_THINK_DIRECTIVE, text or "")
    has_model, model_raw, rest = _extract(_MODEL_DIRECTIVE, rest)
    has_status, _, rest = _extract(_STATUS_DIRECTIVE, rest)
    return Directives(
        think_level=normalize_think_level(think_raw) if has_think else None,
        has_think=has_think,
        model=parse_model_selection(model_raw, fallback_provider) if model_raw is not None else None,
        has_model=has_model,
        raw_model=model_raw,
        has_status=has_status,
        cleaned=rest,
    )


def format_directive_ack(d: Directives) -> str | None:
    """`_Thinking: high | Model: anthropic/claude-opus-4-6_`; None when there is nothing to acknowledge."""
    parts: list[str] = []
    if d.think_level:
        parts.append(f"Thinking: {d.think_level}")
    if d.model is not None:
        parts.append(f"Model: {format_model(d.model)}")
    elif d.has_model and d.raw_model is not None:
        parts.append(f"Invalid model selector: {d.raw_model} ({MODEL_HELP})")
    if not parts:
        return None
    return "_" + " | ".join(parts) + "_"
