"""The steps of the `agent_turn` state machine (`statemachines/agent_turn.asl.json`), run by `functions/agent_steps`.

State between steps is `{sessionKey, runId, iteration, next, waitSeconds}` — ids, never transcripts: messages live in
DynamoDB (large ones in S3), tool answers on their deferred calls.

turn      one model call and the dispatch of its tool calls. On the first turn of a run it stores the user message
          (after an automatic reset when the session's policy says so, so the message lands in the fresh session);
          after a wait it first goes on with the previous reply's calls (`tools.resume`: an approved call is launched,
          queued calls are gated; then it waits again) and, once all are answered, stores their results in the
          model's call order (`next: "resume"` is a paused run's new execution after a restart: it waits at once).
          Then it calls the model, streaming `delta` events, stores the reply and either ends the run (`final`) or
          runs the tools: answered at once → next turn; otherwise → `wait` with a wait group open.
register  AwaitTools' callback task: records the execution's token on the wait group (or lets it go at once).
fail      the catch-all: `error` event, session released, next queued input started.
memories  background job: extract memories from an archived session into the daily memory file.

Every step first checks that the run still owns the session (`/stop`, a stale lease taken over): if not, it ends
quietly — a model reply that arrives after `/stop` is dropped, not stored or shown.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from orbital.agent import (
    approvals,
    budgets,
    call_parts,
    client_tools,
    compaction,
    context,
    events,
    media,
    notify,
    runs,
    settings,
    tools,
)
from orbital.agent import spend as spend_caps
from orbital.agent.providers import Cancel, ModelError, ModelRequest, Progress, complete
from orbital.agent.waits import cancel_pending
from orbital.domain import spend as spend_rules
from orbital.domain.compaction import estimate_text_tokens
from orbital.domain.config import as_dict
from orbital.domain.messages import gateway_note, text_of
from orbital.domain.reset_policy import initial_policy, should_auto_reset
from orbital.domain.session_keys import session_agent_id
from orbital.engines import waitgroup
from orbital.store.history import History

if TYPE_CHECKING:
    from orbital.ports.services import Services

log = logging.getLogger("orbital.agent.turn")

LEASE_MARGIN_MS = 120_000
ABORT_CHECK_S = 2.0


def _now() -> int:
    return int(time.time() * 1000)


def _state(event: dict[str, Any], iteration: int, nxt: str, wait: int = 1) -> dict[str, Any]:
    return {
        "sessionKey": event["sessionKey"],
        "runId": event["runId"],
        "iteration": iteration,
        "next": nxt,
        "waitSeconds": max(1, int(wait)),
    }


def _owns(run: Any, run_id: str, execution: str) -> bool:
    return isinstance(run, dict) and run.get("runId") == run_id and run.get("execution") == execution


def tool_calls_of(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") == "toolCall"]


def note_message(text: str, reason: str) -> dict[str, Any]:
    """An assistant message written by the gateway itself (iteration cap, budget)."""
    return gateway_note(text, reason, _now())


def user_message(
    data: dict[str, Any], now: int, *, services: Services | None = None, config: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Spec §5.3 `buildUserMessage` (`orbital.agent.user_content`): text alone is a string ("[Empty message]" when
    empty); with media, blocks. Voice messages are transcribed with `services` and `config` (not without them)."""
    from orbital.agent.user_content import build_user_content  # lazy: media, transcription (steps' cold start)

    media_entries = data.get("media") if isinstance(data.get("media"), list) else None
    content = build_user_content(services, config, str(data.get("text") or ""), media_entries)
    return {"role": "user", "content": content, "timestamp": now}


# --- the turn --------------------------------------------------------------------------------------------------


class _Run:
    """One turn step's view of its run."""

    def __init__(self, services: Services, event: dict[str, Any]) -> None:
        self.services = services
        self.event = event
        self.key = str(event["sessionKey"])
        self.run_id = str(event["runId"])
        self.execution = str(event.get("execution") or "")
        self.iteration = int(event.get("iteration") or 0)
        self.config = services.config.effective()
        self.audience = events.Audience(services, self.key)
        self.agent_id = session_agent_id(self.key)
        self.model_replied = False
        """A model call of this step answered (its text, if any, went out as `delta` events)."""
        self.client: client_tools.ClientTools | None = None
        """The tools of the socket that started the run, when it has its own (read once per step)."""
        self._client_read = False

    def own_tools(self, run: dict[str, Any]) -> client_tools.ClientTools | None:
        if not self._client_read:
            self.client = client_tools.for_run(self.services, run)
            self._client_read = True
        return self.client

    # -- lease-guarded meta updates --

    def _guard(self, change: Any, owned: dict[str, Any]) -> Any:
        def guard(meta: dict[str, Any]) -> bool:
            owned.clear()
            run = meta.get("currentRun")
            if not _owns(run, self.run_id, self.execution):
                return False
            if change is not None and change(meta, run) is False:
                return False
            owned["run"] = run
            return True

        return guard

    def append(self, messages: list[dict[str, Any]], change: Any = None) -> dict[str, Any] | None:
        """Store messages while this run owns the session (and `change` agrees); None if it does not."""
        owned: dict[str, Any] = {}
        meta = self.services.sessions.append_messages(self.key, messages, guard=self._guard(change, owned))
        return meta if owned else None

    def reset_with(
        self, messages: list[dict[str, Any]], change: Any, now: int
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """Reset the session with `messages` the first of the new one, in one write (no reader sees the new session
        without them), while this run owns it (and `change` agrees): (the meta after, the ResetResult); (None, None)
        if it does not, and then nothing was reset."""
        owned: dict[str, Any] = {}
        result, meta = self.services.sessions.reset_with(self.key, messages, now=now, guard=self._guard(change, owned))
        return (meta, result) if owned and result is not None else (None, None)

    def lease(self, run: dict[str, Any], extra_ms: int = 0) -> None:
        run["leaseUntil"] = _now() + settings.llm_timeout_ms(self.config) + extra_ms + LEASE_MARGIN_MS

    # -- endings --

    def end(
        self,
        state: str,
        *,
        message: dict[str, Any] | None = None,
        error: str | None = None,
        released: dict[str, Any] | None = None,
        cause: str | None = None,
    ) -> dict[str, Any]:
        """Free the session (starting the next queued input), then tell clients: a client that reacts to `final`
        at once finds the session idle. `released` is the outcome of a `runs.release` already stored. A final
        message no model call of this step streamed (a note of the gateway's: the iteration cap, a budget) goes out
        as `delta` text first, so a client that shows only deltas (a dialect's text frames) has it too. `cause`:
        what an error came from (`events.PROVIDER_FAILED`), for the dialects that say so (GSV clients are not
        sent it)."""
        emit_error = events.error_emitter(self.services)
        if released is not None:
            done = runs.released(self.services, self.key, released, emit_error=emit_error)
        else:
            failure = (error or "The agent run failed") if state != "final" else None
            done = runs.finish(
                self.services, self.key, self.run_id, self.execution, emit_error=emit_error, failure=failure
            )
        if done is None:  # the run lost the session meanwhile (stopped, taken over): it was reported then
            return _state(self.event, self.iteration, "done")
        self.audience.refresh()  # a step can last minutes: clients may have come and gone
        if state == "final":
            if message is not None and not self.model_replied:
                stream = events.DeltaStream(self.audience, self.run_id)
                stream.text(text_of(message))
                stream.close()
            self.audience.send(events.chat_payload(self.run_id, "final", message=message))
        else:
            self.audience.send(events.chat_payload(self.run_id, "error", error=error, cause=cause))
        notify.run_ended(self.services, self.key, done, reply=text_of(message) if message else None, error=error)
        return _state(self.event, self.iteration, "done")


def turn(services: Services, event: dict[str, Any]) -> dict[str, Any]:
    r = _Run(services, event)
    meta = services.sessions.load_meta(r.key) or {}
    run = meta.get("currentRun")
    if not _owns(run, r.run_id, r.execution):
        return _state(event, r.iteration, "done")
    assert isinstance(run, dict)

    if event.get("next") == "resume":  # a new execution of a paused run (the local gateway restarted)
        group = waitgroup.load(services, tools.group_id(r.execution, r.iteration))
        left = int(as_dict(group.data).get("deadlineMs") or 0) - _now() if group is not None else 0
        return _state(event, r.iteration, "wait", max(1, left // 1000 + tools.WAIT_MARGIN_S))
    if event.get("next") == "wait":
        on_client: set[str] = set()
        collected, wait_s = tools.resume(_iteration(r, run), on_client)
        if collected is None and wait_s:  # a round of the same reply's calls (an approved call, queued calls)
            return _state(event, r.iteration, "wait", wait_s)
        waitgroup.close(services, tools.group_id(r.execution, r.iteration))
        r.iteration += 1
        if collected:
            stored_for = r.iteration

            def mark(meta: dict[str, Any], run: dict[str, Any]) -> bool:
                if int(run.get("resultsFor") or -1) >= stored_for:
                    return False  # stored already (a retried step)
                run["resultsFor"] = stored_for
                run["iteration"] = stored_for
                r.lease(run)
                return True

            stored = r.append(collected, mark)
            if stored is not None:
                meta = stored
                _announce_results(r, collected, on_client)
            else:  # stored already by an earlier attempt of this step, or the run lost the session
                meta = services.sessions.load_meta(r.key) or {}
                if not _owns(meta.get("currentRun"), r.run_id, r.execution):
                    return _state(event, r.iteration, "done")
    elif r.iteration == 0 and not run.get("userStored"):
        stored = _store_user_message(r, meta, run)
        if stored is None:
            return _state(event, r.iteration, "done")
        meta = stored

    return _model_turn(r, meta)


def _reset_due(meta: dict[str, Any], run: dict[str, Any], policy: dict[str, Any] | None, now: int) -> bool:
    """Spec §5.10: whether the session's policy calls for an automatic reset before this run's message is stored,
    judged by its last activity (`updatedAt`: the last message stored, `session.patch`, a reset or a compaction).
    A session without messages is no exception (GSV resets it too: idle 0 right after a patch). A session reset
    since this run started is fresh: an attempt of this step that is tried again after the reset does not reset
    it a second time."""
    last_reset = meta.get("lastResetAt")
    if isinstance(last_reset, int | float) and last_reset >= int(run.get("startedAt") or 0):
        return False
    return should_auto_reset(policy, int(meta.get("updatedAt") or now), now)


def _store_user_message(r: _Run, meta: dict[str, Any], run: dict[str, Any]) -> dict[str, Any] | None:
    """Store the run's message (after an automatic reset when due). The meta after, or None if the run lost the
    session."""
    services = r.services
    data = runs.load_input(services, r.key, run)
    now = _now()
    policy = meta.get("resetPolicy") or initial_policy(r.config)
    guest = client_tools.is_guest(client_tools.policy_of_run(run) or {})
    message = user_message(data, now, services=services, config=r.config)

    def start(meta: dict[str, Any], run: dict[str, Any]) -> bool:
        if run.get("userStored"):
            return False
        run["userStored"] = True
        if guest:
            meta[compaction.GUEST] = True
        if data.get("overrides"):
            run["overrides"] = data["overrides"]
        run.pop("input", None)  # the message is stored now; keep the meta small
        r.lease(run)
        meta["updatedAt"] = now
        if not meta.get("resetPolicy") and policy:
            meta["resetPolicy"] = policy
        return True

    if not _reset_due(meta, run, policy, now):
        return r.append([message], start)
    stored, result = r.reset_with([message], start, now)  # the new session and its first message: one write
    if result is not None and not guest:  # a guest's conversation never goes into the owner's memory files
        from orbital.agent import memories  # lazy: only a reset extracts memories (steps' cold start)

        memories.schedule(services, r.key, result)
    return stored


def _resume(r: _Run, meta: dict[str, Any], run: dict[str, Any]) -> dict[str, Any]:
    """This turn's reply was stored by an earlier attempt of the step (a retried Lambda): carry on from it without
    calling the model again. A reply without tool calls ended the run in the same write, so this one has them."""
    stored = [m for m in r.services.sessions.messages(r.key, 20, meta=meta) if m.get("role") == "assistant"]
    reply = stored[-1] if stored else None
    calls = tool_calls_of(reply) if reply else []
    if reply is None or not calls:
        return r.end("error", error="The agent run was interrupted; send your message again")
    group = waitgroup.load(r.services, tools.group_id(r.execution, r.iteration))
    if group is not None:  # the tools were launched too: wait for what is left
        left = int(as_dict(group.data).get("deadlineMs") or 0) - _now()
        return _state(r.event, r.iteration, "wait", max(1, left // 1000 + tools.WAIT_MARGIN_S))
    return _run_tools(r, run, reply, calls)


@dataclass
class _Call:
    """What one model call of a turn is made of besides the run: the session's history (a shared snapshot, read
    only what is new since the last call: `orbital.store.history`), the model, thinking level, tools and prompt."""

    history: History
    model: dict[str, str]
    thinking: str | None
    tool_defs: list[dict[str, Any]]
    system: str

    def estimate(self) -> int:
        return context.estimate_request_tokens(self.system, self.history)


def _model_turn(r: _Run, meta: dict[str, Any]) -> dict[str, Any]:
    """One model call of the run, within its budgets, then its reply stored (`_store_reply`)."""
    services, config = r.services, r.config
    run = meta.get("currentRun") or {}
    if run.get("replyFor") == r.iteration:
        return _resume(r, meta, run)
    cap = settings.max_iterations(config)
    if r.iteration >= cap:
        return _end_with_note(
            r,
            note_message(
                f"Stopped after {cap} rounds of tool calls, the limit for one run (agents.maxIterations). "
                "Send another message to continue from here.",
                "iteration-cap",
            ),
        )
    call = _prepare_call(r, meta, run)
    estimate = call.estimate()
    try:
        spend = budgets.reserve(
            services,
            config,
            meta,
            estimate if budgets.limits(config, meta).any else 0,
            call=spend_caps.call_of(config, call.model, estimate, session_key=r.key, meta=meta),
        )
    except budgets.BudgetExceededError as exc:
        return _end_with_note(r, note_message(exc.note(), _note_reason(exc)))
    progress = Progress()
    try:
        reply, failure, cause = _call_model(r, meta, call, progress)
    except BaseException:
        _count_unanswered(r, meta, spend, estimate, progress, stopped=False)
        raise
    if reply is None:  # no reply: the call failed (the run ends with `failure`) or the run was stopped
        _count_unanswered(r, meta, spend, estimate, progress, stopped=failure is None)
        if failure is None:
            return _state(r.event, r.iteration, "done")
        return r.end("error", error=failure, cause=cause)
    spend.settle(int(as_dict(reply.get("usage")).get("totalTokens") or 0), as_dict(reply.get("usage")))
    return _store_reply(r, run, reply)


def _note_reason(exc: budgets.BudgetExceededError) -> str:
    """The `model` of the note a refusal ends a run with: a spend limit's, else a token budget's."""
    return (
        spend_rules.NOTE_REASON
        if isinstance(exc, spend_rules.SpendExceededError | spend_rules.UnpricedModelError)
        else (budgets.NOTE_REASON)
    )


def _count_unanswered(
    r: _Run, meta: dict[str, Any], spend: budgets.Reservation, estimate: int, progress: Progress, *, stopped: bool
) -> None:
    """A model call that gave no reply: what it spent is counted once its request reached the provider (a stopped
    call: it was sent; a failed one: the provider had begun its stream), in the gateway's counters and the
    session's totals (`budgets.unanswered_usage`); otherwise the reservation is released."""
    if not (progress.sent if stopped else progress.reached):
        spend.release()
        return
    usage = budgets.unanswered_usage(estimate, estimate_text_tokens(progress.streamed_text()), progress.usage)
    given = progress.usage if isinstance(progress.usage, dict) else {}
    reported = any(given.get(name) for name in ("input", "cacheRead", "cacheWrite"))  # the provider's own counts
    priced = {**given, "output": usage["output"]} if reported else {"input": usage["input"], "output": usage["output"]}
    spend.settle(usage["totalTokens"], priced)
    budgets.count_unanswered(r.services, r.key, meta.get("sessionId"), usage)


def _end_with_note(r: _Run, note: dict[str, Any]) -> dict[str, Any]:
    """End the run with a note of the gateway's (stored first) instead of a model call."""
    stored = r.append([note])
    return r.end("final", message=note) if stored is not None else _state(r.event, r.iteration, "done")


def _prepare_call(r: _Run, meta: dict[str, Any], run: dict[str, Any]) -> _Call:
    """The model and thinking level (the message's overrides, the session's, the configured), the tools on offer
    (narrowed for a socket with tools of its own), the system prompt (a guest's has nothing of the workspace) and
    the session's history as of `meta`."""
    found = call_parts.parts(r.services, r.config, r.key, meta, run.get("overrides") or {}, r.own_tools(run))
    history = r.services.sessions.history(r.key, meta)
    return _Call(history, found.model, found.thinking, found.tool_defs, found.system)


def _store_reply(r: _Run, run: dict[str, Any], reply: dict[str, Any]) -> dict[str, Any]:
    """Store the model's reply with the call's token accounting; then end the run (no tool calls: the session is
    released in the same write) or run the tools."""
    services, config = r.services, r.config
    calls = tool_calls_of(reply)
    usage = as_dict(reply.get("usage"))
    freed: dict[str, Any] = {}

    def account(meta: dict[str, Any], run: dict[str, Any]) -> bool:
        freed.clear()
        if run.get("replyFor") == r.iteration:
            return False  # an earlier attempt of this step stored its reply already
        run["replyFor"] = r.iteration
        meta["inputTokens"] = int(meta.get("inputTokens") or 0) + int(usage.get("input") or 0)
        meta["outputTokens"] = int(meta.get("outputTokens") or 0) + int(usage.get("output") or 0)
        meta["totalTokens"] = int(meta.get("totalTokens") or 0) + int(usage.get("totalTokens") or 0)
        if int(usage.get("input") or 0) > 0:
            meta["lastInputTokens"] = int(usage["input"])
        meta["updatedAt"] = _now()
        run["iteration"] = r.iteration
        r.lease(run, tools.lease_ms(config, calls) if calls else 0)
        if not calls:  # the run ends with this reply: free the session in the same write
            freed.update(runs.release(meta, r.run_id, r.execution, _now()) or {})
        return True

    try:
        stored = r.append([reply], account)
    except Exception:
        if not freed:
            raise  # the catch-all reports it and frees the session
        # the session was already handed on in the meta write; the reply itself could not be stored
        log.exception("storing the final reply of run %s failed", r.run_id)
        return r.end("error", error="The reply could not be stored; try again", released=freed)
    if stored is None:
        meta = services.sessions.load_meta(r.key) or {}
        run = meta.get("currentRun") or {}
        if _owns(run, r.run_id, r.execution) and run.get("replyFor") == r.iteration:
            return _resume(r, meta, run)  # another attempt of this step stored its reply first
        return _state(r.event, r.iteration, "done")  # stopped meanwhile: the reply is dropped

    r.audience.send(events.chat_payload(r.run_id, "usage", usage=usage))  # for subscribed dialect sockets only
    if not calls:
        return r.end("final", message=reply, released=freed or None)
    return _run_tools(r, run, reply, calls)


def _call_model(
    r: _Run, meta: dict[str, Any], call: _Call, progress: Progress
) -> tuple[dict[str, Any] | None, str | None, str | None]:
    """Compact when due, then call the model, streaming `delta` events (a reply a provider did not stream is sent as
    one delta after the call); after a context overflow, compact once and call again. `(reply, None, None)`; without
    a reply, `(None, the error the run ends with, its cause)`, or `(None, None, None)` when the run was stopped
    meanwhile."""
    services, config = r.services, r.config
    model, system = call.model, call.system
    history = call.history
    compacted = compaction.maybe_compact(
        services, config, r.key, meta, history.messages, model, system, messages_estimate=history.tokens
    )
    if compacted is not None:
        history = _history_now(r, compacted)

    reply = None
    attempt_overflow = True
    while reply is None:
        stream = events.DeltaStream(r.audience, r.run_id)
        watch = _Watch(r)
        request = ModelRequest(
            provider=model["provider"],
            model=model["id"],
            system=system,
            messages=media.hydrate(services, history.messages, history.memo),
            tools=[
                {"name": t["name"], "description": t.get("description"), "inputSchema": t.get("inputSchema")}
                for t in call.tool_defs
            ],
            thinking=call.thinking,
            timeout_s=settings.llm_timeout_ms(config) / 1000,
            config=config,
            cancel=watch.cancel,
            progress=progress,
            memo=history.memo,
        )
        try:
            with watch:
                reply = complete(request, stream)
            if not stream.text_seen and not watch.cancel.is_set():
                stream.text(text_of(reply))  # a provider that streamed nothing: clients still get its text as deltas
            r.model_replied = True
        except ModelError as exc:
            if exc.kind == "cancelled" or watch.cancel.is_set():
                return None, None, None
            if exc.kind == "overflow" and attempt_overflow and compaction.enabled(config):
                attempt_overflow = False
                try:
                    forced = compaction.maybe_compact(
                        services, config, r.key, meta, history.messages, model, system, force=True
                    )
                except Exception:
                    log.exception("compaction after a context overflow failed")
                    failed = "Context window exceeded and automatic compaction failed."
                    return None, f"{failed} Try resetting the session with /reset.", None
                if forced is not None:
                    history = _history_now(r, forced)
                    continue
                return None, exc.message, events.PROVIDER_FAILED
            if exc.kind == "overflow" and not attempt_overflow:
                exceeded = "Context window exceeded even after compaction. Try resetting the session with /reset."
                return None, exceeded, events.PROVIDER_FAILED
            return None, _explained(exc, model), events.PROVIDER_FAILED
        finally:
            stream.close()

    assert reply is not None
    return reply, None, None


def _history_now(r: _Run, compacted: list[dict[str, Any]]) -> History:
    """The session's history after a compaction (kept by the store, so this reads only the meta), or the
    compacted messages as they came when the meta is gone."""
    meta = r.services.sessions.load_meta(r.key)
    if meta is None:
        return History.of("", 0, 0, compacted)
    return r.services.sessions.history(r.key, meta)


def _run_tools(r: _Run, run: dict[str, Any], reply: dict[str, Any], calls: list[dict[str, Any]]) -> dict[str, Any]:
    """Announce the tool calls of a stored reply and run them: answered at once → the results are stored and the
    next turn follows; otherwise → wait for the wait group."""
    services = r.services
    if text_of(reply).strip():
        r.audience.send(events.chat_payload(r.run_id, "partial", message=reply))
        notify.deliver(services, r.key, run, "partial", text_of(reply))
    r.audience.send(events.chat_payload(r.run_id, "tool", tools=[_call_summary(c) for c in calls]))
    if not _owns(runs.current_run(services, r.key), r.run_id, r.execution):
        return _state(r.event, r.iteration, "done")  # stopped while announcing: launch nothing
    results, wait_s = tools.dispatch(_iteration(r, run), calls)
    if results is None:
        return _state(r.event, r.iteration, "wait", wait_s)
    nxt = r.iteration + 1

    def mark(meta: dict[str, Any], run: dict[str, Any]) -> bool:
        if int(run.get("resultsFor") or -1) >= nxt:
            return False
        run["resultsFor"] = nxt
        run["iteration"] = nxt
        r.lease(run)
        return True

    if r.append(results, mark) is None:
        if not _owns(runs.current_run(services, r.key), r.run_id, r.execution):
            return _state(r.event, r.iteration, "done")
        return _state(r.event, nxt, "turn")  # an earlier attempt of this step stored (and announced) them
    _announce_results(r, results)
    return _state(r.event, nxt, "turn")


def _iteration(r: _Run, run: dict[str, Any]) -> tools.Iteration:
    """The tool calls' view of this step (with the run's own client tools, offered as the model was offered them)."""
    services = r.services
    client = r.own_tools(run)
    if client is not None and client.offered is None:  # a step that resumes a stored reply: offered as then
        client.offer(context.model_tools(services, services.connections.nodes()))
    return tools.Iteration(
        services, r.config, r.key, r.agent_id, r.run_id, r.execution, r.iteration, _now(), client, run=run
    )


def _announce_results(r: _Run, results: list[dict[str, Any]], on_client: set[str] | None = None) -> None:
    """Each stored tool result, as a `toolResult` event: only dialect sockets subscribed to the run get it (GSV
    clients read results from the transcript). `onClient`: the call went to the run's client socket, which has its
    result already."""
    for result in results:
        extra = {"onClient": True} if on_client and str(result.get("toolCallId")) in on_client else {}
        r.audience.send(
            events.chat_payload(
                r.run_id,
                "toolResult",
                toolCallId=result.get("toolCallId"),
                toolName=result.get("toolName"),
                isError=bool(result.get("isError")),
                content=text_of(result),
                **extra,
            )
        )


def _explained(exc: ModelError, model: dict[str, str]) -> str:
    """A model error as clients see it; a missing key says how to configure one."""
    if exc.kind == "auth" and exc.message.startswith("API key not configured"):
        return (
            f"{exc.message}. Set it with config.set apiKeys.{model['provider']} (or the provider's usual environment "
            "variable), or pick another model with /model provider/model-id."
        )
    return exc.message


def _call_summary(block: dict[str, Any]) -> dict[str, Any]:
    return {"id": block.get("id"), "name": block.get("name"), "arguments": block.get("arguments")}


class _Watch:
    """While a model call runs, cancel it as soon as its run has ended, so a stopped run stops paying for tokens and
    the provider's stream is closed: at once when the end is published in this process (`/stop` or a reset handled
    by this gateway: `events.RunEnds.watch`), else when a check, every few seconds, finds that the run no longer owns
    its session (a `/stop` handled by another Lambda, a lease taken over)."""

    def __init__(self, r: _Run) -> None:
        self.r = r
        self.cancel = Cancel()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="orbital-run-watch", daemon=True)

    def __enter__(self) -> _Watch:
        events.run_ends(self.r.services).watch(self.r.run_id, self.cancel)
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._done.set()
        events.run_ends(self.r.services).unwatch(self.r.run_id, self.cancel)

    def _run(self) -> None:
        while not self._done.wait(ABORT_CHECK_S):
            if self.cancel.is_set():
                return
            try:
                owned = _owns(runs.current_run(self.r.services, self.r.key), self.r.run_id, self.r.execution)
            except Exception:  # a failed check must not cancel a healthy run
                continue
            if not owned:  # ended elsewhere: nothing more of it goes out from here either (`events.RunEnds`)
                events.run_ends(self.r.services).end(self.r.run_id)
                self.cancel.set()
                return


# --- the other steps -------------------------------------------------------------------------------------------


def register(services: Services, event: dict[str, Any]) -> dict[str, Any]:
    gid = tools.group_id(str(event.get("execution") or ""), int(event.get("iteration") or 0))
    token = str(event["taskToken"])
    if not waitgroup.register(services, gid, token):
        waitgroup.release(services, token)  # everything was answered before the execution got here
        return {"registered": False}
    return {"registered": True}


def _failure_text(error: Any) -> str:
    if not isinstance(error, dict):
        return "The agent run failed"
    name = str(error.get("Error") or "error")
    cause = error.get("Cause")
    detail = None
    if isinstance(cause, str) and cause:
        try:
            parsed = json.loads(cause)
        except ValueError:
            parsed = None
        detail = (parsed.get("errorMessage") or parsed.get("errorType")) if isinstance(parsed, dict) else cause[:300]
    if name == "States.Timeout":
        return "The agent run timed out"
    return f"The agent run failed: {detail or name}"


def fail(services: Services, event: dict[str, Any]) -> dict[str, Any]:
    """Report a failed execution and free its session (only if it still owns it)."""
    key, run_id = str(event["sessionKey"]), str(event["runId"])
    execution = str(event.get("execution") or "")
    message = _failure_text(event.get("error"))
    log.warning("run %s of %s failed: %s", run_id, key, event.get("error"))
    done = runs.finish(services, key, run_id, execution, emit_error=events.error_emitter(services), failure=message)
    if done is None:  # stopped or taken over meanwhile, and reported then
        return {"reported": False}
    events.emit(services, key, run_id, "error", error=message)
    notify.run_ended(services, key, done, error=message)
    approvals.cancel_run(services, done)
    cancel_pending(services, execution, int(done.get("iteration") or 0))
    return {"reported": True}


def memories_step(services: Services, event: dict[str, Any]) -> dict[str, Any]:
    from orbital.agent import memories  # lazy: a step of its own (kept off the other steps' cold start)

    return memories.extract(services, str(event["sessionKey"]), event.get("archive") or {})


STEPS = {"turn": turn, "register": register, "fail": fail, "memories": memories_step}
