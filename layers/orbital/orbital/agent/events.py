"""`chat` events to clients (spec §3.1, fixes F2 and F3).

Every connected client-mode socket receives a session's `chat` events (GSV has no subscriptions; clients filter).
A client that sent `chat.send` with an alias of the session's key (e.g. `agent:main:web:dm:local` for
`agent:main:main`) gets the events under the key it used (F2), recorded per client id by `remember_alias` (so it
survives the client's reconnects); everyone else sees the canonical key. Nodes and channel sockets never receive
`chat` events.

States: `delta` (streamed text, coalesced), `partial` (an assistant message with text that precedes tool calls),
`tool` (Orbital's: the tool calls about to run, `tools: [{id, name, arguments}]`, whether or not text came with
them), `final`, `error`. GSV clients ignore states they do not know. Each event is one PostToConnection per client on
AWS, so deltas are coalesced: at most one frame per `DELTA_INTERVAL_S` per run (about 10 per second), carrying the
text that arrived meanwhile.

A run's `final` or `error` is its last event: `Audience.send` drops anything of the run that comes after it (a delta
still in flight when `/stop` answered), for GSV clients and every dialect's subscribers alike (`RunEnds`). Within one
process (the local gateway, where the steps run beside the socket handlers) that is exact, and publishing the end
closes the run's model stream at once; across Lambdas the step learns of the end at its next ownership check
(`orbital.agent.turn._Watch`) and sends nothing of the run from then on.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from orbital.protocol.frames import event_frame
from orbital.store import keys, subscriptions
from orbital.store.subscriptions import Subscription, is_subscription

if TYPE_CHECKING:
    from orbital.ports.services import Services

log = logging.getLogger("orbital.agent.events")

CHAT_STATES: tuple[tuple[str, str], ...] = (
    ("delta", "`text`: the next piece of the reply as the model streams it (coalesced, about 10 per second at most)"),
    ("tool", "`tools: [{id, name, arguments}]`: the tool calls about to run (Orbital; GSV clients ignore it)"),
    ("partial", "`message`: an assistant message whose text came before tool calls, sent once before they run"),
    (
        "paused",
        "`message`: the run waits for a tool approval (the prompt as an assistant text: GSV's shape), `approval`: "
        "the approval (Orbital's); answer with `yes` / `no` or `approval.resolve`",
    ),
    ("final", "`message`: the assistant message that ends the run (its last event)"),
    (
        "error",
        '`error`: why the run ended without a reply (model errors, "Run cancelled by user", ...); its last event',
    ),
)
"""The states of a `chat` event (`{runId, sessionKey, state, ...}`), as docs/protocol.md lists them."""

GSV_STATES = frozenset(state for state, _ in CHAT_STATES)
"""What GSV clients are sent. The other states of a run's events (`toolResult`: a tool call's result, `usage`: one
model call's usage) go only to the dialect sockets subscribed to the run (`orbital.store.subscriptions`)."""
RUN_ENDS = frozenset({"final", "error"})
SUBSCRIBER_FIELDS = ("cause",)
"""Fields of an event that only the dialect sockets subscribed to its run are sent: `cause` of an `error`
(`PROVIDER_FAILED`: the model provider failed the call, which some dialects word in their own way)."""
PROVIDER_FAILED = "provider"

DELTA_INTERVAL_S = 0.1
DELTA_MAX_CHARS = 16_000
ALIAS_TTL_SECONDS = 3 * 3600
"""An alias lives as long as a socket can (2 h on API Gateway), with margin."""


ENDED_KEPT = 4096
"""How many ended runs this process remembers (`RunEnds`): far more than can be streaming at once."""
LOCK_STRIPES = 64


class RunEnds:
    """The runs whose terminal event (`final`, `error`) this process has published, and what waits for that end.

    Every event of a run goes out through `Audience.send`, which holds the run's lock while it checks this record
    and posts: once the terminal event is out, any later event of that run (a delta a model stream still had in
    flight, a timer's flush, a `usage`) is dropped, for GSV clients and for every dialect's subscribers alike. A
    model call in progress registers a `threading.Event` (`watch`) that is set the moment its run's end is
    published here (`/stop`, a reset), so the provider's stream is closed at once rather than at the next poll of
    the session. Ends published by another process (a Lambda that handled `/stop` on AWS) reach a running call by
    that poll (`orbital.agent.turn._Watch`)."""

    def __init__(self, kept: int = ENDED_KEPT) -> None:
        self._kept = kept
        self._guard = threading.Lock()
        self._ended: OrderedDict[str, None] = OrderedDict()
        self._watchers: dict[str, list[threading.Event]] = {}
        self._locks = [threading.RLock() for _ in range(LOCK_STRIPES)]

    def lock(self, run_id: str) -> threading.RLock:
        """The lock held while an event of `run_id` is checked and posted (striped: runs may share one)."""
        return self._locks[hash(run_id) % LOCK_STRIPES]

    def ended(self, run_id: str) -> bool:
        with self._guard:
            return run_id in self._ended

    def end(self, run_id: str) -> None:
        """Record the end of `run_id` and wake whatever watches it."""
        with self._guard:
            self._ended[run_id] = None
            self._ended.move_to_end(run_id)
            while len(self._ended) > self._kept:
                self._ended.popitem(last=False)
            watchers = self._watchers.pop(run_id, [])
        for watcher in watchers:
            watcher.set()

    def watch(self, run_id: str, event: threading.Event) -> None:
        """Set `event` when `run_id` ends (at once if it has ended already). `unwatch` it when done."""
        with self._guard:
            if run_id not in self._ended:
                self._watchers.setdefault(run_id, []).append(event)
                return
        event.set()

    def forget(self, run_id: str) -> None:
        """A run of this id starts (a client may choose its run ids, and use one again): it has not ended."""
        with self._guard:
            self._ended.pop(run_id, None)

    def unwatch(self, run_id: str, event: threading.Event) -> None:
        with self._guard:
            watchers = self._watchers.get(run_id)
            if watchers and event in watchers:
                watchers.remove(event)
                if not watchers:
                    del self._watchers[run_id]


_RUN_ENDS: weakref.WeakKeyDictionary[Any, RunEnds] = weakref.WeakKeyDictionary()
_RUN_ENDS_GUARD = threading.Lock()


def run_ends(services: Services) -> RunEnds:
    """The record of ended runs of this process's gateway: one per table (every Services of the local gateway shares
    its table, whichever handler built it), so every event of a run it publishes passes through it."""
    table = services.table
    with _RUN_ENDS_GUARD:
        found = _RUN_ENDS.get(table)
        if found is None:
            found = _RUN_ENDS[table] = RunEnds()
        return found


def remember_alias(services: Services, session_key: str, client_id: str, used_key: str) -> None:
    """Record that this client addresses `session_key` as `used_key` (only when they differ)."""
    if used_key == session_key:
        return
    services.table.put(
        keys.client_alias(client_id, session_key),
        {"clientId": client_id, "sessionKey": session_key, "key": used_key},
        ttl=int(time.time()) + ALIAS_TTL_SECONDS,
    )


class Audience:
    """The client sockets a session's events go to, with the key each one expects, and the dialect sockets
    subscribed to its runs. Read once per step (one query finds both)."""

    def __init__(self, services: Services, session_key: str) -> None:
        self.services = services
        self.session_key = session_key
        self._targets: list[tuple[str, str]] | None = None
        self._subscriptions: dict[str, list[Subscription]] = {}

    def targets(self) -> list[tuple[str, str]]:
        if self._targets is None:
            sockets: dict[str, str] = {}
            aliases: dict[str, str] = {}
            subscriptions: dict[str, list[Subscription]] = {}
            for rec in self.services.table.query(keys.CLIENTS_PK):
                if rec.sk.startswith(keys.CLIENT_ALIAS_PREFIX):
                    if rec.data.get("sessionKey") == self.session_key and isinstance(rec.data.get("key"), str):
                        aliases[str(rec.data.get("clientId"))] = rec.data["key"]
                elif is_subscription(rec.sk):
                    sub = Subscription.from_record(rec)
                    if sub is not None and sub.session_key == self.session_key:
                        subscriptions.setdefault(sub.run_id, []).append(sub)
                elif isinstance(rec.data.get("connectionId"), str):
                    sockets[rec.sk] = rec.data["connectionId"]
            self._targets = [(cid, aliases.get(client) or self.session_key) for client, cid in sockets.items()]
            self._subscriptions = subscriptions
        return self._targets

    def subscriptions(self, run_id: str | None) -> list[Subscription]:
        """The dialect sockets subscribed to `run_id`."""
        self.targets()
        return self._subscriptions.get(run_id or "", [])

    def refresh(self) -> None:
        """Read the clients again at the next send."""
        self._targets = None

    def send(self, payload: dict[str, Any]) -> int:
        """Post one `chat` event to every client (the states GSV knows) and to the run's subscribers (every state,
        in their dialects); returns how many GSV clients got it. A gone socket is cleaned up and not posted to
        again by this audience. Nothing of a run goes out after its terminal event (`RunEnds`): a later event of
        an ended run is dropped here, in every dialect."""
        run_id = payload.get("runId")
        if not isinstance(run_id, str) or not run_id:
            return self._deliver(payload)
        ends = run_ends(self.services)
        with ends.lock(run_id):
            if ends.ended(run_id):
                log.debug("dropped a %s event of run %s after its end", payload.get("state"), run_id)
                return 0
            if payload.get("state") in RUN_ENDS:
                ends.end(run_id)
            return self._deliver(payload)

    def _deliver(self, payload: dict[str, Any]) -> int:
        sent = 0
        if payload.get("state") in GSV_STATES:
            sent = self._send_gsv(fit_event({k: v for k, v in payload.items() if k not in SUBSCRIBER_FIELDS}))
        self._publish(payload)
        return sent

    def _publish(self, payload: dict[str, Any]) -> None:
        subs = self.subscriptions(payload.get("runId"))
        if not subs:
            return
        ended = payload.get("state") in RUN_ENDS
        for sub in list(subs):
            encode = self.services.hooks.run_event_encoders.get(sub.dialect)
            delivered = True
            try:
                for frame in encode(self.services, sub, payload) if encode is not None else []:
                    if not self.services.push(sub.connection_id, frame):
                        delivered = False
                        break
            except Exception as exc:  # one unreachable socket must not break the run
                log.warning("run event to %s failed: %s", sub.connection_id, type(exc).__name__)
            if ended or not delivered:
                subs.remove(sub)
                try:
                    subscriptions.drop(self.services.table, sub)
                except Exception as exc:
                    log.warning("could not drop the subscription of %s: %s", sub.connection_id, type(exc).__name__)

    def _send_gsv(self, payload: dict[str, Any]) -> int:
        sent = 0
        gone = []
        for connection_id, key in self.targets():
            frame = event_frame("chat", {**payload, "sessionKey": key})
            try:
                if self.services.push(connection_id, frame):
                    sent += 1
                else:
                    gone.append(connection_id)
            except Exception as exc:  # one unreachable client must not break the run
                log.warning("chat event to %s failed: %s", connection_id, type(exc).__name__)
        if gone and self._targets is not None:
            self._targets = [t for t in self._targets if t[0] not in gone]
        return sent


MAX_EVENT_BYTES = 96 * 1024
"""API Gateway refuses a message over 128 KB; events stay well below, with room for the frame around them."""
ARGUMENT_PREVIEW = 2000
TRUNCATED = "[truncated for the event; the full message is in session.preview]"


def _size(payload: Any) -> int:
    return len(json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode())


def _short(value: Any) -> Any:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else value
    return value if len(text) <= ARGUMENT_PREVIEW else f"{text[:ARGUMENT_PREVIEW]}… {TRUNCATED}"


def _lighter_message(message: dict[str, Any], keep_text: int | None) -> dict[str, Any]:
    blocks = []
    for block in message.get("content") or []:
        if not isinstance(block, dict) or block.get("type") == "thinking":
            continue  # reasoning stays in the stored message
        if block.get("type") == "toolCall":
            block = {**block, "arguments": _short(block.get("arguments"))}
        elif block.get("type") == "text" and keep_text is not None and len(block.get("text") or "") > keep_text:
            block = {**block, "text": f"{block['text'][:keep_text]}\n{TRUNCATED}"}
        blocks.append(block)
    return {**message, "content": blocks}


def fit_event(payload: dict[str, Any]) -> dict[str, Any]:
    """An event that fits one WebSocket message on API Gateway: first reasoning and long tool arguments are
    left out, then text is cut, with a note saying where the whole message is. Small events pass untouched."""
    if _size(payload) <= MAX_EVENT_BYTES:
        return payload
    fitted = dict(payload)
    if isinstance(payload.get("tools"), list):
        fitted["tools"] = [
            {**t, "arguments": _short(t.get("arguments"))} for t in payload["tools"] if isinstance(t, dict)
        ]
    if isinstance(payload.get("error"), str) and len(payload["error"]) > MAX_EVENT_BYTES // 4:
        fitted["error"] = payload["error"][: MAX_EVENT_BYTES // 4]
    message = payload.get("message")
    if isinstance(message, dict):
        fitted["message"] = _lighter_message(message, None)
        keep = MAX_EVENT_BYTES // 2
        while _size(fitted) > MAX_EVENT_BYTES and keep > 256:
            fitted["message"] = _lighter_message(message, keep)
            keep //= 2
    return fitted


def chat_payload(run_id: str | None, state: str, **fields: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {"runId": run_id, "state": state}
    payload.update({k: v for k, v in fields.items() if v is not None})
    return payload


def emit(services: Services, session_key: str, run_id: str | None, state: str, **fields: Any) -> None:
    Audience(services, session_key).send(chat_payload(run_id, state, **fields))


def emit_error(session_key: str, run_id: str, fields: dict[str, Any], *, services: Services) -> None:
    """`runs.Emit`-shaped (once `services` is bound: `error_emitter`): an `error` event for a run."""
    emit(services, session_key, run_id, "error", **fields)


def error_emitter(services: Services) -> Any:
    def _emit(session_key: str, run_id: str, fields: dict[str, Any]) -> None:
        emit_error(session_key, run_id, fields, services=services)

    return _emit


class DeltaStream:
    """Coalesces streamed text into `delta` events: the first piece goes out at once, later pieces at most every
    `interval` seconds (a timer sends what waited when the stream pauses). `close()` sends the rest."""

    def __init__(
        self,
        audience: Audience,
        run_id: str,
        *,
        interval: float = DELTA_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.audience = audience
        self.clock = clock
        self.run_id = run_id
        self.interval = interval
        self._pending: list[str] = []
        self._last = 0.0
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self.frames = 0
        self.text_seen = False

    def text(self, delta: str) -> None:
        if not delta:
            return
        self.text_seen = True
        with self._lock:
            self._pending.append(delta)
            due = self.clock() - self._last >= self.interval
            if not due and self._timer is None:
                wait = max(0.0, self.interval - (self.clock() - self._last))
                self._timer = threading.Timer(wait, self.flush)
                self._timer.daemon = True
                self._timer.start()
        if due:
            self.flush()

    def thinking(self, delta: str) -> None:
        """Reasoning is not streamed to clients (GSV clients have no state for it); it is stored with the reply."""

    def flush(self) -> None:
        with self._send_lock:  # one sender at a time, so pieces reach clients in order
            with self._lock:
                if self._timer is not None:
                    self._timer.cancel()
                    self._timer = None
                if not self._pending:
                    return
                text = "".join(self._pending)
                self._pending.clear()
                self._last = self.clock()
            for start in range(0, len(text), DELTA_MAX_CHARS):  # each piece fits one message on API Gateway
                self.frames += 1
                self.audience.send(chat_payload(self.run_id, "delta", text=text[start : start + DELTA_MAX_CHARS]))

    def close(self) -> None:
        self.flush()
