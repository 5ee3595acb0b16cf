"""Semantic memory and titles through the configured model (WindieOS's `POST /api/semantic/summarize` and `/title`).

Both are one plain model call each (no tools, no streaming) through `compaction.ask`, so they count against the
gateway's daily and monthly token budgets like compaction's summaries do. The configured `model` is used; without
credentials for its provider the service is not configured. Each model call takes at most `timeouts.llmMs`; a whole
request at most `MAX_BATCHES` calls and, when the caller gives one, its time limit (on AWS `AWS_CALL_MS`: an HTTP API
integration ends at 29 s), each call's timeout shortened to what is left. What cannot finish in time is `TooSlowError`.

Summaries: the conversations are summarized in batches that fit a share of the model's context window, each batch
given the summary so far; the model answers a JSON object `{"summary", "facts"}` (a reply that is not one is taken
as the summary, without facts).
"""

from __future__ import annotations

import json
import re
import time
from typing import TYPE_CHECKING, Any

from orbital.agent import compaction, context
from orbital.agent.providers import context_window, has_credentials
from orbital.agent.settings import llm_timeout_ms
from orbital.domain.config import as_dict

if TYPE_CHECKING:
    from orbital.ports.services import Services

AWS_CALL_MS = 25_000
"""A request's time limit on AWS (all its model calls)."""
MAX_BATCHES = 8
"""The most model calls one summary request makes."""
MIN_CALL_MS = 2_000
"""A call with less time than this left is not started."""
MAX_FACTS = 50
MAX_FACT_CHARS = 500
MAX_TITLE_CHARS = 80
DEFAULT_TITLE = "New conversation"

SUMMARIZE_PROMPT = """Below are conversations between a user and an assistant. Extract what is worth remembering \
about the user in the long term.

Answer with one JSON object and nothing else:
{{"summary": "<a short paragraph: who the user is, what they work on, what they prefer>", "facts": ["<one durable \
fact about the user>", ...]}}
Leave out small talk and anything that only mattered in the moment. Use only what the conversations say.
{earlier}
{conversations}"""

EARLIER = """
A summary of earlier conversations of the same user (fold it into yours, keep its facts unless these conversations \
contradict them):
<earlier_summary>
{summary}
</earlier_summary>
<earlier_facts>
{facts}
</earlier_facts>
"""

TITLE_PROMPT = """Write a title of at most six words for the conversation that begins with the two messages below. \
Answer with the title only: no quotes, no punctuation at the end.

<user_message>
{user}
</user_message>
<assistant_message>
{assistant}
</assistant_message>"""


class SemanticNotConfiguredError(Exception):
    pass


def configured_model(config: dict[str, Any]) -> dict[str, str]:
    """The model these calls use: the configured one, when its provider has credentials; SemanticNotConfiguredError
    else."""
    model = context.effective_model(config, {}, {})
    if not model.get("provider") or not has_credentials(config, model["provider"]):
        raise SemanticNotConfiguredError(
            f"Semantic summarization not configured (no credentials for the model provider {model.get('provider')!r})"
        )
    return model


class TooSlowError(Exception):
    """The request could not be answered within its time limit (or its number of model calls)."""


def _bounded(config: dict[str, Any], deadline: float | None) -> dict[str, Any]:
    """The configuration with `timeouts.llmMs` lowered to the time left before `deadline` (monotonic seconds)."""
    if deadline is None:
        return config
    left_ms = int((deadline - time.monotonic()) * 1000)
    if left_ms < MIN_CALL_MS:
        raise TooSlowError("The summary could not be finished in time; send fewer or shorter conversations")
    timeouts = as_dict(config.get("timeouts"))
    return {**config, "timeouts": {**timeouts, "llmMs": min(llm_timeout_ms(config), left_ms)}}


def _deadline(time_limit_ms: int | None) -> float | None:
    return None if time_limit_ms is None else time.monotonic() + time_limit_ms / 1000


def batches(conversations: list[str], budget_chars: int) -> list[list[str]]:
    """The conversations in order, grouped so that each group's text stays within `budget_chars` (a conversation
    longer than that forms a group of its own)."""
    groups: list[list[str]] = []
    current: list[str] = []
    size = 0
    for text in conversations:
        if current and size + len(text) > budget_chars:
            groups.append(current)
            current, size = [], 0
        current.append(text)
        size += len(text)
    if current:
        groups.append(current)
    return groups


def parse_summary(reply: str) -> tuple[str, list[str]]:
    """(summary, facts) from the model's reply: its JSON object when it answered one, else its text."""
    text = reply.strip()
    start, end = text.find("{"), text.rfind("}")
    if start != -1 and end > start:
        try:
            found = json.loads(text[start : end + 1])
        except ValueError:
            found = None
        if isinstance(found, dict) and isinstance(found.get("summary"), str):
            raw = found.get("facts")
            facts = (
                [f.strip()[:MAX_FACT_CHARS] for f in raw if isinstance(f, str) and f.strip()]
                if isinstance(raw, list)
                else []
            )
            return found["summary"].strip(), facts[:MAX_FACTS]
    return text, []


def summarize(
    services: Services, config: dict[str, Any], conversations: list[str], *, time_limit_ms: int | None = None
) -> tuple[str, list[str]]:
    """(summary, facts) of the conversations. Raises SemanticNotConfiguredError, TooSlowError, `ModelError`,
    `BudgetExceededError`."""
    model = configured_model(config)
    deadline = _deadline(time_limit_ms)
    budget = max(8_000, context_window(config, model["provider"], model["id"]) * 2)  # ~half the window in chars
    groups = batches([c for c in conversations if c.strip()], budget)
    if len(groups) > MAX_BATCHES:
        raise TooSlowError(
            f"Too much to summarize at once (more than {MAX_BATCHES} model calls); send fewer conversations"
        )
    summary, facts = "", list[str]()
    for group in groups:
        earlier = EARLIER.format(summary=summary, facts="\n".join(f"- {f}" for f in facts)) if summary else ""
        body = "\n".join(f"<conversation>\n{text}\n</conversation>" for text in group)
        prompt = SUMMARIZE_PROMPT.format(earlier=earlier, conversations=body)
        reply = compaction.ask(services, _bounded(config, deadline), model, prompt)
        summary, found = parse_summary(reply)
        facts = list(dict.fromkeys([*found, *facts]))[:MAX_FACTS]
    return summary, facts


_QUOTES = "\"'`\u201c\u201d\u2018\u2019\u00ab\u00bb"


def clean_title(reply: str) -> str:
    """The first line of the reply, without quotes, heading marks, a `Title:` label or a final full stop."""
    line = next((ln.strip() for ln in reply.splitlines() if ln.strip()), "")
    line = re.sub(r"^(?:#+\s*|title\s*:\s*)+", "", line, flags=re.IGNORECASE).strip().strip(_QUOTES).strip()
    line = line.rstrip(".").strip()
    if len(line) > MAX_TITLE_CHARS:
        line = line[:MAX_TITLE_CHARS].rsplit(" ", 1)[0].rstrip() or line[:MAX_TITLE_CHARS]
    return line or DEFAULT_TITLE


def title(
    services: Services,
    config: dict[str, Any],
    user_message: str,
    assistant_message: str,
    *,
    time_limit_ms: int | None = None,
) -> str:
    """A short title for a conversation from its first exchange. Raises SemanticNotConfiguredError, `ModelError`,
    `BudgetExceededError`."""
    model = configured_model(config)
    prompt = TITLE_PROMPT.format(user=user_message.strip(), assistant=assistant_message.strip())
    return clean_title(compaction.ask(services, _bounded(config, _deadline(time_limit_ms)), model, prompt))
