"""A session's history as the agent turn reads it, kept in the process so that a turn reads only what is new
(ADR 0035).

A `History` is the messages of one sessionId below the meta's `nextSeq`, oldest first, with the running estimate of
their tokens and a memo of what was made of each message (a provider's wire form). It is a snapshot: nobody changes
it, its messages are shared by every reader and must not be changed either.

`HistoryCache` keeps the last History of each session (least recently used first out, bounded by the estimated
tokens it holds). A History is valid for a meta with the same `sessionId` and the same `rewrites` (bumped by every
change that removes or replaces stored messages: compaction, `session.compact`); a reset changes the `sessionId`.
Reading a session's history then costs:

- nothing, when the meta's `nextSeq` is the one the History was completed for (the turn's own appends are written
  through: `appended`);
- one Query of the messages from the History's `nextSeq` on, otherwise;
- one Query of every message (the cold path: a new process, a rewrite, or a History whose message count disagrees
  with the meta's, e.g. after an append that failed half-way).

Only the meta decides: it is read (or written) by the caller anyway, so messages changed by another process are seen
as soon as their meta is.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from orbital.domain.compaction import estimate_message_tokens

T = TypeVar("T")

CACHE_TOKENS = 2_000_000
"""What the cache may hold in all, in estimated tokens (`estimate_message_tokens`: about 3.3 characters of message
JSON each): some ten sessions whose history fills a 200k-token context window."""

REWRITES = "rewrites"
"""Meta field: how many times stored messages of the current sessionId were removed or replaced."""


class MessageMemo:
    """What callers made of a history's messages, one value per (kind, message), e.g. a provider's wire form of
    it, and what they made of its leading messages as a whole (`prefix`: e.g. the wire form of everything up to the
    last turn). Only messages of the history are remembered (it holds them, so their ids stay theirs); anything else
    is made afresh each time. The values are shared: nobody may change them.

    The histories that share a memo are extensions of one another (`History.extended`), so a list of their messages
    that holds a kept prefix's last message at the same place holds the whole prefix."""

    def __init__(self) -> None:
        self._owned: dict[int, Mapping[str, Any]] = {}
        self._made: dict[tuple[str, int], Any] = {}
        self._prefixes: dict[str, tuple[int, Mapping[str, Any], Any]] = {}

    def own(self, messages: Iterable[Mapping[str, Any]]) -> None:
        for message in messages:
            self._owned[id(message)] = message

    def owns(self, message: Mapping[str, Any]) -> bool:
        """Whether `message` is one of the history's own messages (not a copy of one)."""
        return self._owned.get(id(message)) is message

    def prefix(self, kind: str, messages: Sequence[Mapping[str, Any]]) -> tuple[int, Any]:
        """`(count, state)` kept for `kind` (`keep_prefix`) when `messages` begins with the `count` messages it was
        kept for; else `(0, None)`."""
        kept = self._prefixes.get(kind)
        if kept is None:
            return 0, None
        count, last, state = kept
        if count <= len(messages) and messages[count - 1] is last:
            return count, state
        return 0, None

    def keep_prefix(self, kind: str, messages: Sequence[Mapping[str, Any]], count: int, state: Any) -> None:
        """Keep `state`, what was made of `messages[:count]`, for the next call's `prefix` (the history's own
        messages only)."""
        if 0 < count <= len(messages) and all(self.owns(m) for m in messages[count - 1 : count]):
            self._prefixes[kind] = (count, messages[count - 1], state)

    def get(self, kind: str, message: Mapping[str, Any], make: Callable[[Any], T]) -> T:
        """`make(message)`, made once per `kind` for a message of the history."""
        if self._owned.get(id(message)) is not message:
            return make(message)
        key = (kind, id(message))
        try:
            made: T = self._made[key]
        except KeyError:
            made = make(message)
            self._made[key] = made
        return made


@dataclass(frozen=True)
class History:
    session_id: str
    rewrites: int
    next_seq: int
    """Every message stored below this sequence number (and not removed) is in `messages`."""
    messages: list[dict[str, Any]]
    tokens: int
    """`orbital.domain.compaction.estimate_context_tokens(messages)`, kept as messages are added."""
    memo: MessageMemo = field(default_factory=MessageMemo, compare=False)

    @classmethod
    def of(cls, session_id: str, rewrites: int, next_seq: int, messages: list[dict[str, Any]]) -> History:
        memo = MessageMemo()
        memo.own(messages)
        tokens = sum(estimate_message_tokens(m) for m in messages)
        return cls(session_id, rewrites, next_seq, messages, tokens, memo)

    def extended(self, messages: list[dict[str, Any]], next_seq: int) -> History:
        """This history with `messages` (stored from `self.next_seq` on, below `next_seq`) after it."""
        self.memo.own(messages)
        tokens = self.tokens + sum(estimate_message_tokens(m) for m in messages)
        return History(self.session_id, self.rewrites, next_seq, [*self.messages, *messages], tokens, self.memo)

    def fits(self, meta: Mapping[str, Any]) -> bool:
        """Whether this history is of the meta's sessionId and no message was removed or replaced since."""
        return self.session_id == str(meta.get("sessionId")) and self.rewrites == rewrites_of(meta)


def rewrites_of(meta: Mapping[str, Any]) -> int:
    value = meta.get(REWRITES)
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else 0


class HistoryCache:
    """The last History of each session key, bounded by `limit` estimated tokens in all (least recently used out;
    a history larger than the whole bound is not kept)."""

    def __init__(self, limit: int = CACHE_TOKENS) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._items: OrderedDict[str, History] = OrderedDict()
        self._tokens = 0

    def get(self, session_key: str) -> History | None:
        with self._lock:
            found = self._items.get(session_key)
            if found is not None:
                self._items.move_to_end(session_key)
            return found

    def put(self, session_key: str, history: History, *, replacing: History | None = None) -> None:
        """Keep `history` for the session; with `replacing`, only if that is still the one kept (a reader that
        raced a writer does not put back an older history)."""
        with self._lock:
            current = self._items.get(session_key)
            if replacing is not None and current is not replacing:
                return
            if current is not None:
                self._tokens -= current.tokens
                del self._items[session_key]
            if history.tokens > self.limit:
                return
            self._items[session_key] = history
            self._tokens += history.tokens
            while self._tokens > self.limit and self._items:
                _, dropped = self._items.popitem(last=False)
                self._tokens -= dropped.tokens

    def forget(self, session_key: str) -> None:
        with self._lock:
            dropped = self._items.pop(session_key, None)
            if dropped is not None:
                self._tokens -= dropped.tokens

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._tokens = 0
