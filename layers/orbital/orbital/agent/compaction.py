"""Automatic context compaction (spec §7.6): when a session's context nears the model's window, its older messages
are summarized by the model, archived, and replaced by one summary message; memories found on the way go to the
daily memory file.

Proactive before a model call when `should_compact` says so; reactive once per run when the provider reports a
context overflow. Summarization degrades in three tiers: every chunk in full, then with oversized chunks replaced by
a note, then a plain note without any summary — so compaction itself never leaves the session stuck.

A guest's session (`GUEST` in its meta: a conversation a client without the gateway's credential took part in, e.g. a
WindieOS install's) is summarized like any other, but what it yields never goes into the agent's memory files: they
are the owner's, and read into the owner's runs.

A compaction asked for inside a request (WindieOS's `compact-history`) has a `deadline`: every model call gets only
the time left before it, and when one runs out of it the compaction stops with `OutOfTimeError` (the session unchanged)
instead of degrading to a summary-less note.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from orbital.agent import budgets, settings
from orbital.agent import spend as spend_caps
from orbital.agent.providers import ModelRequest, complete, context_window, has_credentials
from orbital.domain import compaction as rules
from orbital.domain.config import as_dict
from orbital.domain.messages import text_of
from orbital.domain.session_keys import session_agent_id
from orbital.store import keys

if TYPE_CHECKING:
    from orbital.ports.services import Services

log = logging.getLogger("orbital.agent.compaction")

GUEST = "guest"
"""In a session's meta: a guest took part in it (`keeps_memories`)."""
SUMMARIZER_SYSTEM = (
    "You condense conversations into faithful, compact notes. You never add facts that are not in the text."
)


DEADLINE_SLACK_S = 0.25
"""A model call that failed this close to a compaction's deadline failed for want of time."""


class OutOfTimeError(Exception):
    """A compaction with a deadline could not finish before it (nothing was changed)."""


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else deadline - time.monotonic()


def keeps_memories(meta: dict[str, Any] | None) -> bool:
    """Whether memories found in this session may go to the agent's memory files: not a guest's session's."""
    return not (meta or {}).get(GUEST)


def enabled(config: dict[str, Any]) -> bool:
    return rules.compaction_settings(config).enabled


def ask(
    services: Services, config: dict[str, Any], model: dict[str, str], prompt: str, *, deadline: float | None = None
) -> str:
    """One plain model call (no tools, no streaming), for summaries and memories. Not counted in session usage, but
    held to the gateway's daily and monthly budgets and counted there (raises `BudgetExceededError` when one refuses);
    what it reserved there is settled or released whatever happens. `deadline` (`time.monotonic()`): the call gets
    at most the time left before it, and raises `OutOfTimeError` when that runs out."""
    timeout_s = settings.llm_timeout_ms(config) / 1000
    left = _left(deadline)
    if left is not None:
        if left <= DEADLINE_SLACK_S:
            raise OutOfTimeError
        timeout_s = min(timeout_s, left)
    request = ModelRequest(
        provider=model["provider"],
        model=model["id"],
        system=SUMMARIZER_SYSTEM,
        messages=[{"role": "user", "content": prompt, "timestamp": int(time.time() * 1000)}],
        tools=[],
        timeout_s=timeout_s,
        config=config,
    )
    estimate = rules.estimate_text_tokens(SUMMARIZER_SYSTEM + prompt)
    spend = budgets.reserve(services, config, None, estimate, call=spend_caps.call_of(config, model, estimate))
    try:
        reply = complete(request)
    except BaseException as exc:
        spend.release()
        left = _left(deadline)
        if isinstance(exc, Exception) and left is not None and left <= DEADLINE_SLACK_S:
            raise OutOfTimeError from exc
        raise
    spend.settle(int(as_dict(reply.get("usage")).get("totalTokens") or 0), as_dict(reply.get("usage")))
    return text_of(reply)


def summarize(
    services: Services,
    config: dict[str, Any],
    model: dict[str, str],
    plan: rules.CompactionPlan,
    window: int,
    *,
    deadline: float | None = None,
    strict: bool = False,
) -> tuple[str, str]:
    """(summary, memories) of the plan's old messages, by the first tier that works (`OutOfTimeError` when the deadline
    runs out first). When no model call works, a note of what was left out stands in, unless `strict` (a compaction
    someone asked for): then `SummaryFailedError`, and the history stays as it is."""
    for partial in (False, True):
        try:
            summary, memories = "", list[str]()
            for chunk in plan.chunks:
                text = ask(
                    services,
                    config,
                    model,
                    rules.summarize_prompt(
                        rules.chunk_text(chunk, window, partial), summary, rules.join_memories(memories)
                    ),
                    deadline=deadline,
                )
                summary, found = rules.parse_summary_reply(text)
                if found:
                    memories.append(found)
            if summary:
                return summary, rules.join_memories(memories)
        except OutOfTimeError:
            raise
        except Exception as exc:
            log.warning("summarizing (%s) failed: %s", "partial" if partial else "full", exc)
    if strict:
        raise SummaryFailedError("The model could not summarize the history")
    return rules.plaintext_summary(len(plan.old), plan.image_count), ""


class SummaryFailedError(Exception):
    """No model call made a summary (a `strict` compaction leaves the history as it is)."""


def append_daily_memories(services: Services, agent_id: str, memories: str, when: datetime, source: str) -> None:
    if not memories.strip():
        return
    key = keys.workspace_object(agent_id, f"memory/{rules.memory_file_date(when)}.md")
    found = services.workspace.get(key)
    existing = found[0].decode("utf-8", "replace") if found is not None else None
    updated = rules.append_memories(existing, memories, when, source)
    services.workspace.put(key, updated.encode("utf-8"), content_type="text/markdown")


def maybe_compact(
    services: Services,
    config: dict[str, Any],
    session_key: str,
    meta: dict[str, Any],
    messages: list[dict[str, Any]],
    model: dict[str, str],
    system: str,
    *,
    force: bool = False,
    deadline: float | None = None,
    strict: bool = False,
    messages_estimate: int | None = None,
) -> list[dict[str, Any]] | None:
    """Compact when due (or `force`d after an overflow). Returns the new message list, or None when nothing was
    done (disabled, no credentials for the model, nothing old enough to summarize). `deadline`
    (`time.monotonic()`): raises `OutOfTimeError`, the session unchanged, when the summary cannot be made before it.
    `messages_estimate`: the messages' estimated tokens when the caller keeps them (else they are counted)."""
    rule_settings = rules.compaction_settings(config)
    if not rule_settings.enabled or not has_credentials(config, model["provider"]):
        return None
    window = context_window(config, model["provider"], model["id"])
    if not force:
        last = meta.get("lastInputTokens")
        due = rules.should_compact(
            messages,
            window,
            rule_settings,
            int(last) if isinstance(last, int | float) else None,
            rules.estimate_text_tokens(system),
            messages_estimate,
        )
        if not due:
            return None
    plan = rules.plan_compaction(messages, window, rule_settings)
    if plan is None:
        return None
    summary, memories = summarize(services, config, model, plan, window, deadline=deadline, strict=strict)
    now = datetime.now(UTC)
    try:
        if keeps_memories(meta):
            append_daily_memories(services, session_agent_id(session_key), memories, now, "context compaction")
    except Exception:
        log.exception("writing memories from compaction failed")
    message = rules.summary_message(summary, plan.image_count, int(now.timestamp() * 1000))
    made_of = str(meta["sessionId"]) if meta.get("sessionId") else None
    done = services.sessions.replace_oldest(
        session_key, len(plan.old), message, now=int(now.timestamp() * 1000), session_id=made_of
    )
    if not done.get("replaced"):  # the session was reset meanwhile: its new history is left as it is
        return None
    after = services.sessions.load_meta(session_key)
    return services.sessions.history(session_key, after).messages if after is not None else []
