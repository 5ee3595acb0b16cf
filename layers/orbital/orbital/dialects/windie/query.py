"""`query` (a turn: a run in the conversation's session, or an answer to its tool approval) and `stop-query`."""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any

from orbital.agent import client_tools, compaction, events, runs, taint
from orbital.dialects import approval_answers, base
from orbital.dialects.windie.common import (
    MAX_ACTIVE_QUERIES,
    MAX_REF_CHARS,
    log,
)
from orbital.dialects.windie.conversations import _run_prefix, _screenshots, label, session_key
from orbital.dialects.windie.frames import _local_events, _numbered, _plain, _ref, _WindieSocket
from orbital.dialects.windie.preview import query_preview
from orbital.dialects.windie.run_events import encode
from orbital.dialects.windie.user_settings import (
    _chosen_model,
    load_settings_item,
)
from orbital.domain import commands
from orbital.store import subscriptions
from orbital.store.sessions import message_count

if TYPE_CHECKING:
    from orbital.ports.services import Services
    from orbital.store.connections import Connection


def _query(services: Services, sock: _WindieSocket, rid: Any, payload: dict[str, Any]) -> list[Any]:
    turn = str(rid) if rid is not None else str(uuid.uuid4())
    refused = {"turn": turn, "user": sock.user}  # a turn refused at once: its one event, numbered 1
    conversation = payload.get("conversation_ref")
    if not isinstance(conversation, str) or not conversation.strip() or len(conversation) > MAX_REF_CHARS:
        return _local_events(refused, [("error", {"message": "conversation_ref is required", "turn_ref": turn})])
    refused["conv"] = conversation
    content = payload.get("content")
    text = content if isinstance(content, str) and content.strip() else payload.get("text")
    if not isinstance(text, str) or not text.strip():
        return _local_events(refused, [("error", {"message": "text is required", "turn_ref": turn})])
    conn = sock.conn
    if len(subscriptions.of_connection(services.table, conn.connection_id)) >= MAX_ACTIVE_QUERIES:
        message = f"Too many queries at once on this connection (at most {MAX_ACTIVE_QUERIES})"
        return _local_events(refused, [("error", {"message": message, "turn_ref": turn})])
    config = services.config.effective()
    key = session_key(config, sock.user, conversation)
    media = _screenshots(services, sock, payload)
    chosen = _chosen_model(config, load_settings_item(services, sock.user))
    run_id = f"{_run_prefix(turn)}{uuid.uuid4().hex[:12]}"
    ref = {
        "turn": turn,
        "conv": conversation,
        "user": sock.user,
        "session": key,
        "startedAt": services.now_ms(),
    }
    answer = approval_answers.begin(services, conn, key, ref)  # the conversation may wait for a tool approval
    sub = base.subscribe(services, conn, run_id, key, ref)
    opening: list[tuple[str, dict[str, Any]]] = [("query-accepted", {"status": "accepted"})]
    meta = services.sessions.load_meta(key)
    if meta is None or message_count(meta) == 0:  # a conversation's first turn: what the model will be given
        own = client_tools.declared(services, conn.connection_id) if sock.tool_names else []
        opening += _transparency(services, sock, conversation, config, own)
    first = _numbered(services, sub, opening)
    for frame in first:  # before the run can say anything
        if not services.push(conn.connection_id, frame):
            base.unsubscribe(services, sub)
            approval_answers.settle(services, answer, follow=False)
            return []
    if not sock.admin:
        _mark_guest(services, key, meta)
    internal: dict[str, Any] = {"label": label(sock.user, conversation)}
    if not sock.admin and _command_name(text) != "stop":  # a guest's text is the model's: no command, no directive
        internal["literal"] = True
        internal["taint"] = taint.guest_taint(sock.user, services.now_ms())
    if sock.narrows:  # else its runs are everyone's: nothing more to read at each step
        internal.update(clientTools=True, toolPolicy=sock.policy, ownTools=bool(sock.tool_names))
    if media:
        internal["media"] = media
    if chosen is not None:
        internal["model"] = chosen
    params = {"sessionKey": key, "message": text, "runId": run_id}
    sent = base.call(services, conn, "chat.send", params, internal=internal)
    if sent.ok and sent.payload.get("status") == "started":
        approval_answers.settle(services, answer, follow=False)
        return []  # the rest comes from the run
    base.unsubscribe(services, sub)  # no run follows: the rest is numbered here
    if sent.ok and sent.payload.get("status") == "paused":  # the text answered a tool approval (or was reminded)
        return _answered(services, conn, answer, ref, len(first), sent.payload)
    approval_answers.settle(services, answer, follow=False)
    if not sent.ok:
        return _local_events(ref, [("error", {"message": sent.message, "turn_ref": turn})], len(first))
    reply = str(sent.payload.get("response") or sent.payload.get("error") or "")  # a command, answered at once
    said = [("streaming-response", {"text": reply}), ("streaming-complete", {"final_response": reply})]
    return _local_events(ref, said, len(first))


def _answered(
    services: Services,
    conn: Connection,
    answer: approval_answers.Answer | None,
    ref: dict[str, Any],
    opened: int,
    result: dict[str, Any],
) -> list[Any]:
    """A query that answered a paused run: the engine's response is the turn's first text; when the run goes on,
    the turn follows it (numbered on the run's subscription, where `query-accepted` was numbered too: its text,
    tools and `streaming-complete` come from the run), else the turn completes with the response."""
    response = str(result.get("response") or "")
    if answer is None or not approval_answers.resumed(result):
        approval_answers.settle(services, answer, follow=False)
        done = [("streaming-response", {"text": response}), ("streaming-complete", {"final_response": response})]
        return _local_events(ref, done, opened)
    # the run's subscription numbers the rest of the turn, after what this turn's own subscription numbered
    if subscriptions.count_events(services.table, answer.run_id, conn.connection_id, opened) is None:
        # the run ended meanwhile (a /stop): the turn completes with the response
        approval_answers.settle(services, answer, follow=False)
        done = [("streaming-response", {"text": response}), ("streaming-complete", {"final_response": response})]
        return _local_events(ref, done, opened)
    for frame in _numbered(services, answer.sub, [("streaming-response", {"text": response + "\n\n"})]):
        services.push(conn.connection_id, frame)
    frames: list[Any] = []
    for payload in approval_answers.settle(services, answer, follow=True):
        frames += encode(services, answer.sub, payload)
    return frames


def _command_name(text: str) -> str | None:
    command = commands.parse_command(text)
    return command.name if command is not None else None


def _transparency(
    services: Services,
    sock: _WindieSocket,
    conversation: str,
    config: dict[str, Any],
    own: list[dict[str, Any]],
) -> list[tuple[str, dict[str, Any]]]:
    """`system-prompt` and `tool-schemas` of a conversation's first turn (each only when it fits one message)."""
    try:
        preview = query_preview(
            services,
            user_id=sock.user,
            conversation_ref=conversation,
            policy=sock.policy,
            client_tool_defs=own,
            config=config,
        )
    except Exception:  # the turn goes on without them
        log.exception("could not build the system prompt preview")
        return []
    return preview.first_turn_events()


def _mark_guest(services: Services, key: str, meta: dict[str, Any] | None) -> dict[str, Any]:
    """Mark a conversation a guest (an install) takes part in: nothing found in it goes into the agent's memory
    files, whoever resets or compacts it later (`compaction.keeps_memories`). One write, the first time only."""
    if meta is not None and meta.get(compaction.GUEST):
        return meta

    def mark(current: dict[str, Any]) -> bool:
        if current.get(compaction.GUEST):
            return False
        current[compaction.GUEST] = True
        return True

    return services.sessions.update_meta(key, mark)


def _turn_runs(services: Services, key: str, user: str, conversation: str, turn: str) -> list[str]:
    """The runs of one turn of this user's conversation that are still followed (running or queued), found by the
    turn's id exactly as the client sent it (the subscriptions keep it)."""
    found = set()
    for sub in subscriptions.every(services.table):
        if sub.session_key != key:
            continue
        if sub.ref.get("turn") == turn and sub.ref.get("conv") == conversation and sub.ref.get("user") == user:
            found.add(sub.run_id)
    return sorted(found)


STOP_GRACE_S = 2.0
"""How long `stop-query` waits for a turn it was named that is accepted but not yet queued."""


def _stop_run(services: Services, key: str, run_id: str) -> bool:
    """Take the run out of the session's queue, or stop it if it runs. A turn is acknowledged (`query-accepted`)
    before it is queued, and frames may be handled in any order (API Gateway's parallel invocations), so a turn
    that is neither yet is waited for a moment; one that ended meanwhile is not found, and nothing is stopped."""
    deadline = time.monotonic() + STOP_GRACE_S
    while True:
        if runs.unqueue(services, key, run_id):  # not started yet: it never will
            return True
        if runs.stop(services, key, emit_error=events.error_emitter(services), only=run_id).was_running:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def _stop(services: Services, sock: _WindieSocket, rid: Any, payload: dict[str, Any]) -> list[Any]:
    """Stop the conversation's running turn, or the turn `turn_ref` names, running or still queued. `stopped`:
    whether a turn was stopped (or taken out of the queue) by this request. The end of a stopped turn never follows
    the acknowledgement: its subscriptions go first (so no "Run cancelled by user" error either), and a step still
    streaming finds its subscription gone as it numbers its next event (`_numbered`), and sends nothing more."""
    conversation = _ref(payload)
    given = payload.get("turn_ref")  # a query's id may be a number: its turn is kept as text
    turn = str(given) if isinstance(given, str | int) and not isinstance(given, bool) else None
    key = session_key(services.config.effective(), sock.user, conversation)
    if turn is None:
        run = runs.current_run(services, key)
        targets = [str(run["runId"])] if run and run.get("runId") else []
    else:
        targets = _turn_runs(services, key, sock.user, conversation, turn)
    stopped = False
    for run_id in targets:
        for sub in subscriptions.of_run(services.table, run_id):
            subscriptions.drop(services.table, sub)
        stopped = _stop_run(services, key, run_id) or stopped
    body: dict[str, Any] = {"conversation_ref": conversation, "stopped": stopped}
    if turn is not None:
        body["turn_ref"] = turn
    return [_plain("stop-query-ack", body, rid, user=sock.user, conversation=conversation)]
