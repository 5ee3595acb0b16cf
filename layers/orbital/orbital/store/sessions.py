"""Sessions in the table: one meta item per canonical key, one item per stored message, and the session registry.

Meta (`keys.session_meta`) holds the fields of spec §5.4 — `sessionId`, `sessionKey` ("" until the first chat),
`createdAt`, `updatedAt`, `inputTokens`, `outputTokens`, `totalTokens`, `settings`, `resetPolicy?`, `lastResetAt?`,
`previousSessionIds`, `label?`, `channelContext?`, `compactionCount?`, `lastCompactedAt?`, `lastInputTokens?` —
plus bookkeeping of its own:

* `messageCount`: messages stored under the current `sessionId`;
* `nextSeq`: the next message sequence number (strictly increasing within a sessionId);
* `rewrites`: how many times stored messages of the current `sessionId` were removed or replaced (compaction), so
  a history kept in memory (`orbital.store.history`) knows it is stale;
* `currentRun` (truthy while a run is in progress) and `queue` (messages waiting for it), read by `session.stats`.

Every meta write is conditional on the item's version (`v`), so concurrent writers retry instead of losing updates.
The meta is created and persisted the first time anything touches a session, so `sessionId` and `createdAt` are
stable from then on. A reset replaces the sessionId and clears the messages but keeps every other field it does not
own (settings, label, policy, channel context, and any queued messages). An automatic reset (`reset_with`) stores
the message that caused it as the new session's first in the same conditional write: no reader ever sees the new
session without it.

Messages (`keys.message(sessionKey, sessionId, seq)`) store the message JSON verbatim, with `timestamp` added when
missing. Archives are gzip JSONL objects (one JSON document per line, no trailing newline).
"""

from __future__ import annotations

import copy
import gzip
import json
import logging
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from orbital.domain.reset_policy import merge_policy
from orbital.domain.session_keys import session_agent_id
from orbital.errors import ConflictError
from orbital.protocol.jsontext import loads
from orbital.store import conditions as cond
from orbital.store import keys
from orbital.store.contention import retrying
from orbital.store.history import REWRITES, History, HistoryCache, rewrites_of
from orbital.store.table import Record, Table

if TYPE_CHECKING:
    from orbital.store.workspace import Workspace

log = logging.getLogger("orbital.sessions")

ARCHIVE_CONTENT_TYPE = "application/x-ndjson"
INLINE_MESSAGE_BYTES = 300 * 1024
"""A message larger than this (JSON) keeps its body in S3; its item holds a reference (DynamoDB items cap at
400 KB)."""
BODY_REF = "$body"


def _now_ms() -> int:
    return int(time.time() * 1000)


def new_session_id() -> str:
    return str(uuid.uuid4())


def jsonl_gz(messages: Iterable[Mapping[str, Any]]) -> bytes:
    """Messages as gzip-compressed JSON lines, `\\n`-joined without a trailing newline."""
    text = "\n".join(json.dumps(m, separators=(",", ":"), ensure_ascii=False) for m in messages)
    return gzip.compress(text.encode("utf-8"), mtime=0)


def _metadata(values: Mapping[str, Any]) -> dict[str, str]:
    """S3 user metadata must be ASCII: non-ASCII values are percent-encoded."""
    out = {}
    for name, value in values.items():
        text = str(value)
        out[name] = text if text.isascii() else urllib.parse.quote(text, safe="")
    return out


def _json(message: Mapping[str, Any]) -> str:
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False)


def _empty_meta(now: int) -> dict[str, Any]:
    return {
        "sessionId": new_session_id(),
        "sessionKey": "",
        "createdAt": now,
        "updatedAt": now,
        "inputTokens": 0,
        "outputTokens": 0,
        "totalTokens": 0,
        "settings": {},
        "previousSessionIds": [],
        "messageCount": 0,
        "nextSeq": 0,
    }


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def tokens_of(meta: Mapping[str, Any]) -> dict[str, int]:
    return {
        "input": _int(meta.get("inputTokens")),
        "output": _int(meta.get("outputTokens")),
        "total": _int(meta.get("totalTokens")),
    }


def is_processing(meta: Mapping[str, Any]) -> bool:
    return bool(meta.get("currentRun"))


def queue_size(meta: Mapping[str, Any]) -> int:
    queue = meta.get("queue")
    return len(queue) if isinstance(queue, list) else 0


def message_count(meta: Mapping[str, Any]) -> int:
    return max(0, _int(meta.get("messageCount")))


def _start_over(meta: dict[str, Any], new_id: str, message_count: int, stamp: int) -> None:
    """A reset's meta: the new session id (the old one remembered), token counts cleared, `message_count` first
    messages."""
    old_id = str(meta["sessionId"])
    meta["sessionId"] = new_id
    meta["previousSessionIds"] = [*(meta.get("previousSessionIds") or []), old_id]
    meta["inputTokens"] = meta["outputTokens"] = meta["totalTokens"] = 0
    meta.pop("lastInputTokens", None)
    meta["messageCount"] = message_count
    meta["nextSeq"] = message_count
    meta["lastResetAt"] = stamp
    meta["updatedAt"] = stamp


def _archive_meta(
    session_key: str, session_id: str, message_count: int, tokens: dict[str, int], stamp: int
) -> dict[str, Any]:
    """The meta of the archive a reset writes of the session's old messages."""
    return {
        "sessionKey": session_key,
        "sessionId": session_id,
        "agentId": session_agent_id(session_key),
        "messageCount": message_count,
        "archivedAt": stamp,
        "inputTokens": tokens["input"],
        "outputTokens": tokens["output"],
        "totalTokens": tokens["total"],
    }


class SessionRepo:
    def __init__(self, table: Table, workspace: Workspace) -> None:
        self.table = table
        self.workspace = workspace
        self.histories = HistoryCache()
        """The last history the turn read of each session (`history`), kept for the process's lifetime."""

    # --- meta ------------------------------------------------------------------------------------------------

    def load_meta(self, session_key: str) -> dict[str, Any] | None:
        """The stored meta, or None for a session nothing has touched yet (read-only; never creates)."""
        rec = self.table.get(keys.session_meta(session_key))
        return rec.data if rec else None

    def _read(self, session_key: str) -> tuple[dict[str, Any] | None, int]:
        rec = self.table.get(keys.session_meta(session_key))
        if rec is None:
            return None, 0
        return copy.deepcopy(rec.data), _int(rec.attrs.get("v"))

    def _save(self, session_key: str, meta: Mapping[str, Any], version: int) -> None:
        key = keys.session_meta(session_key)
        if version == 0:
            self.table.put(key, meta, attrs={"v": 1}, condition=cond.not_exists("PK"))
        else:
            self.table.put(key, meta, attrs={"v": version + 1}, condition=cond.eq("v", version))

    def update_meta(
        self,
        session_key: str,
        mutate: Callable[[dict[str, Any]], bool | None],
        *,
        now: int | None = None,
    ) -> dict[str, Any]:
        """Apply `mutate` to the current meta (created first if missing) and store it, retrying on a concurrent
        write. `mutate` edits the dict in place and may return False to skip the write (a new meta is always
        stored). It can run more than once, so it must not have side effects beyond the dict."""
        stamp = _now_ms() if now is None else now

        def attempt() -> dict[str, Any]:
            meta, version = self._read(session_key)
            created = meta is None
            if meta is None:
                meta = _empty_meta(stamp)
            changed = mutate(meta)
            if changed is False and not created:
                return meta
            self._save(session_key, meta, version)
            return meta

        return retrying("session", attempt)

    def get_or_create_meta(
        self,
        session_key: str,
        *,
        now: int | None = None,
        reset_policy: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The meta, created and persisted at first touch. With `reset_policy`, a session that has no policy adopts
        a copy of it (the configured default, spec §5.10)."""
        current = self.load_meta(session_key)
        if current is not None and (reset_policy is None or current.get("resetPolicy")):
            return current

        def adopt(meta: dict[str, Any]) -> bool:
            if reset_policy is not None and not meta.get("resetPolicy"):
                meta["resetPolicy"] = copy.deepcopy(dict(reset_policy))
                return True
            return False

        return self.update_meta(session_key, adopt, now=now)

    def mark_chatted(self, session_key: str, *, now: int | None = None) -> dict[str, Any]:
        """Record that a chat reached this session: `sessionKey` is set once and never changed afterwards."""

        def mark(meta: dict[str, Any]) -> bool:
            if meta.get("sessionKey"):
                return False
            meta["sessionKey"] = session_key
            return True

        return self.update_meta(session_key, mark, now=now)

    set_session_key = mark_chatted

    def patch(
        self,
        session_key: str,
        *,
        settings: Mapping[str, Any] | None = None,
        label: Any = None,
        set_label: bool = False,
        reset_policy: Mapping[str, Any] | None = None,
        set_reset_policy: bool = False,
        budget: Mapping[str, Any] | None = None,
        set_budget: bool = False,
        now: int | None = None,
    ) -> dict[str, Any]:
        """Spec §5.6: settings merge shallowly (a given `model` merges field-wise with the current one); the label
        is replaced (None clears it); the reset policy merges over the current one and defaults its mode to
        manual. `budget` (Orbital's per-session token budget, `{maxTokens}`) is replaced, or removed with null.
        `updatedAt` always moves to now."""
        stamp = _now_ms() if now is None else now

        def apply(meta: dict[str, Any]) -> bool:
            if settings:
                stored = meta.get("settings")
                current: dict[str, Any] = stored if isinstance(stored, dict) else {}
                merged = {**current, **copy.deepcopy(dict(settings))}
                model = settings.get("model")
                if model and isinstance(model, Mapping):
                    stored_model = current.get("model")
                    old_model: dict[str, Any] = stored_model if isinstance(stored_model, dict) else {}
                    merged["model"] = {**old_model, **copy.deepcopy(dict(model))}
                meta["settings"] = merged
            if set_label:
                if label is None:
                    meta.pop("label", None)
                else:
                    meta["label"] = label
            if set_reset_policy:
                meta["resetPolicy"] = merge_policy(meta.get("resetPolicy"), reset_policy)
            if set_budget:
                if budget is None:
                    meta.pop("budget", None)
                else:
                    meta["budget"] = copy.deepcopy(dict(budget))
            meta["updatedAt"] = stamp
            return True

        return self.update_meta(session_key, apply, now=stamp)

    # --- messages --------------------------------------------------------------------------------------------

    def _message_records(self, session_key: str, session_id: str) -> list[Record]:
        records = self.table.query(keys.session_pk(session_key), sk_prefix=keys.message_prefix(session_id))
        return [self._with_body(r) for r in records]

    def _with_body(self, record: Record) -> Record:
        """A record whose message body was too large for an item gets its body back from S3."""
        ref = record.data.get(BODY_REF) if isinstance(record.data, dict) else None
        if not isinstance(ref, str):
            return record
        found = self.workspace.get(ref)
        if found is None:
            body = {k: v for k, v in record.data.items() if k != BODY_REF}
            body["content"] = [{"type": "text", "text": "[Message body no longer available]"}]
        else:
            body = json.loads(found[0])
        return Record(record.pk, record.sk, body, record.attrs, record.ttl)

    def messages(
        self, session_key: str, limit: int | None = None, *, meta: Mapping[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        """The current session's messages, oldest first; with a positive `limit`, only the last `limit`."""
        current = meta if meta is not None else self.load_meta(session_key)
        if current is None:
            return []
        pk = keys.session_pk(session_key)
        prefix = keys.message_prefix(str(current["sessionId"]))
        if limit is not None and limit > 0:
            newest = self.table.query(pk, sk_prefix=prefix, forward=False, limit=limit)
            return [self._with_body(r).data for r in reversed(newest)]
        return [self._with_body(r).data for r in self.table.query(pk, sk_prefix=prefix)]

    def history(self, session_key: str, meta: Mapping[str, Any]) -> History:
        """The current session's messages as of `meta` (the meta just read or written), for a model call: a
        shared snapshot nobody may change (`orbital.store.history`). Reads nothing when the history kept from the
        last call is complete for `meta`, only the messages stored since when it is not, and everything when there
        is none or it no longer fits (another sessionId, messages removed or replaced, a count that disagrees, a
        history later than the meta)."""
        session_id = str(meta["sessionId"])
        next_seq = _int(meta.get("nextSeq"))
        kept = self.histories.get(session_key)
        if kept is not None and kept.fits(meta) and kept.next_seq <= next_seq:  # (later than the meta: read again)
            if kept.next_seq == next_seq:
                return kept
            first, last = keys.messages_from(session_key, session_id, kept.next_seq)
            added = self._messages_below(session_key, next_seq, sk_between=(first, last))
            extended = kept.extended(added, next_seq)
            if len(extended.messages) == message_count(meta):
                self.histories.put(session_key, extended, replacing=kept)
                return extended
        messages = self._messages_below(session_key, next_seq, sk_prefix=keys.message_prefix(session_id))
        fresh = History.of(session_id, rewrites_of(meta), next_seq, messages)
        if len(messages) == message_count(meta):  # else an append is under way or failed half-way: not kept
            self.histories.put(session_key, fresh)
        else:
            self.histories.forget(session_key)
        return fresh

    def _messages_below(self, session_key: str, next_seq: int, **bounds: Any) -> list[dict[str, Any]]:
        """The messages a query of the session's partition finds (`bounds`: its sort-key condition) whose sequence
        number is below `next_seq` (any later one was reserved after the meta the caller holds)."""
        records = self.table.query(keys.session_pk(session_key), **bounds)
        return [self._with_body(r).data for r in records if keys.message_seq(r.sk) < next_seq]

    def _remember_appended(
        self, session_key: str, meta: Mapping[str, Any], start: int, stored: list[dict[str, Any]]
    ) -> None:
        """Write-through: messages just stored from `start` on extend the kept history if it ends right there."""
        kept = self.histories.get(session_key)
        if kept is None:
            return
        if kept.fits(meta) and kept.next_seq == start:
            self.histories.put(session_key, kept.extended(stored, start + len(stored)), replacing=kept)
        elif not kept.fits(meta):
            self.histories.forget(session_key)

    def _item(self, session_key: str, session_id: str, seq: int, message: dict[str, Any]) -> dict[str, Any]:
        """What is stored for a message: itself, or (too large for an item) a reference to its body in S3."""
        text = _json(message)
        if len(text.encode("utf-8")) <= INLINE_MESSAGE_BYTES:
            return message
        ref = keys.message_body(session_key, session_id, seq)
        self.workspace.put(ref, text.encode("utf-8"), content_type="application/json")
        return {BODY_REF: ref, "role": message.get("role"), "timestamp": message.get("timestamp")}

    def append_messages(
        self,
        session_key: str,
        messages: Iterable[Mapping[str, Any]],
        *,
        now: int | None = None,
        updated_at: int | None = None,
        guard: Callable[[dict[str, Any]], bool] | None = None,
    ) -> dict[str, Any] | None:
        """Store messages at the end of the current session (a `timestamp` is added where missing). Sequence
        numbers are reserved in the meta first, so concurrent writers never collide. With `updated_at`, the
        session's `updatedAt` moves too. `guard` sees (and may change) the meta in the same conditional write; when
        it returns False nothing is stored and None is returned. Returns the meta after the append."""
        stamp = _now_ms() if now is None else now
        batch = []
        for message in messages:
            item = dict(message)
            if item.get("timestamp") is None:
                item["timestamp"] = stamp
            batch.append(item)
        reserved: dict[str, Any] = {}

        def reserve(meta: dict[str, Any]) -> bool:
            reserved.clear()
            if guard is not None and guard(meta) is False:
                return False
            start = _int(meta.get("nextSeq"))
            meta["nextSeq"] = start + len(batch)
            meta["messageCount"] = message_count(meta) + len(batch)
            if updated_at is not None:
                meta["updatedAt"] = updated_at
            reserved.update(start=start, sessionId=meta["sessionId"])
            return True

        meta = self.update_meta(session_key, reserve, now=stamp)
        if not reserved:
            return None
        session_id, start = str(reserved["sessionId"]), int(reserved["start"])
        try:
            puts = [
                (keys.message(session_key, session_id, start + i), self._item(session_key, session_id, start + i, m))
                for i, m in enumerate(batch)
            ]
            self.table.write_batch(puts=puts)
        except Exception:
            self.histories.forget(session_key)
            self._adjust_count(session_key, session_id, -len(batch))
            raise
        # what a read would return: the stored JSON decoded again (no object the caller keeps is shared)
        self._remember_appended(session_key, meta, start, [loads(_json(m)) for m in batch])
        return meta

    def replace_oldest(
        self,
        session_key: str,
        count: int,
        replacement: Mapping[str, Any],
        *,
        now: int | None = None,
        session_id: str | None = None,
    ) -> dict[str, Any]:
        """Automatic compaction (spec §7.6): archive the `count` oldest messages to a part archive and put
        `replacement` (the summary) in their place, before the messages kept. Returns `{archivedTo?, replaced}`.
        `session_id`: the session the summary was made of; if the session was reset (or rehydrated) since, nothing
        is replaced (`replaced: 0`), so a summary of the old history never lands in the new one."""
        stamp = _now_ms() if now is None else now
        meta = self.get_or_create_meta(session_key, now=stamp)
        if session_id is not None and str(meta["sessionId"]) != session_id:
            return {"replaced": 0}
        session_id = str(meta["sessionId"])
        records = self._message_records(session_key, session_id)
        older = records[: max(0, min(count, len(records)))]
        if not older:
            return {"replaced": 0}
        agent_id = session_agent_id(session_key)
        archived_to = self._archive(
            keys.session_archive_part(agent_id, session_id, stamp),
            [r.data for r in older],
            {
                "sessionKey": session_key,
                "sessionId": session_id,
                "agentId": agent_id,
                "partNumber": stamp,
                "messageCount": len(older),
                "archivedAt": stamp,
                "reason": "compaction",
            },
        )
        last = older[-1]
        summary = dict(replacement)
        summary.setdefault("timestamp", stamp)
        self.histories.forget(session_key)
        self.table.write_batch(puts=[((last.pk, last.sk), summary)], deletes=[(r.pk, r.sk) for r in older[:-1]])

        def shrink(current: dict[str, Any]) -> bool:
            if current.get("sessionId") == session_id:
                current["messageCount"] = max(0, message_count(current) - (len(older) - 1))
                current[REWRITES] = rewrites_of(current) + 1
            current["compactionCount"] = _int(current.get("compactionCount")) + 1
            current["lastCompactedAt"] = stamp
            current["updatedAt"] = stamp
            current.pop("lastInputTokens", None)
            return True

        self.update_meta(session_key, shrink, now=stamp)
        result: dict[str, Any] = {"replaced": len(older)}
        if archived_to:
            result["archivedTo"] = archived_to
        return result

    def _adjust_count(self, session_key: str, session_id: str, delta: int) -> None:
        def adjust(meta: dict[str, Any]) -> bool:
            if meta.get("sessionId") != session_id:
                return False
            meta["messageCount"] = max(0, message_count(meta) + delta)
            return True

        try:
            self.update_meta(session_key, adjust)
        except Exception:
            log.exception("could not correct the message count of %s", session_key)

    # --- reset and compact -----------------------------------------------------------------------------------

    def _archive(self, key: str, messages: list[dict[str, Any]], metadata: Mapping[str, Any]) -> str | None:
        try:
            self.workspace.put(key, jsonl_gz(messages), content_type=ARCHIVE_CONTENT_TYPE, metadata=_metadata(metadata))
        except Exception:
            log.exception("archiving %d messages to %s failed", len(messages), key)
            return None
        return key

    def reset(self, session_key: str, *, now: int | None = None) -> dict[str, Any]:
        """Spec §5.7: archive the messages, delete the session's media, start a new sessionId. Returns the
        ResetResult (`ok, sessionKey, oldSessionId, newSessionId, archivedMessages, archivedTo?, tokensCleared,
        mediaDeleted`). Settings, label, reset policy, channel context and queued messages are kept."""
        result, _ = self._reset(session_key, now=now)
        assert result is not None  # (no guard: always reset)
        return result

    def reset_with(
        self,
        session_key: str,
        messages: Iterable[Mapping[str, Any]],
        *,
        now: int | None = None,
        guard: Callable[[dict[str, Any]], bool] | None = None,
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """`reset`, with `messages` the first of the new session in the same conditional write (an automatic reset
        and the message that caused it): whoever reads the session sees either the old one, or the new one with
        them, never the new one without them. `guard` sees (and may change) the new meta in that write, as
        `append_messages`' does; when it returns False nothing at all is done. Returns (the ResetResult, the meta
        after), or (None, None) when the guard refused."""
        return self._reset(session_key, now=now, first=list(messages), guard=guard)

    def _reset(
        self,
        session_key: str,
        *,
        now: int | None = None,
        first: list[Mapping[str, Any]] | None = None,
        guard: Callable[[dict[str, Any]], bool] | None = None,
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        stamp = _now_ms() if now is None else now
        agent_id = session_agent_id(session_key)
        self.get_or_create_meta(session_key, now=stamp)
        new_id = new_session_id()  # the same in every attempt: what an attempt that lost wrote is written again
        batch = [{**m, "timestamp": stamp} if m.get("timestamp") is None else dict(m) for m in first or []]

        def attempt() -> tuple[dict[str, Any], str, list[Record], dict[str, int], str | None] | None:
            meta, version = self._read(session_key)
            if meta is None:  # deleted under us: start over
                self.get_or_create_meta(session_key, now=stamp)
                raise ConflictError("session deleted meanwhile")
            old_id = str(meta["sessionId"])
            tokens = tokens_of(meta)
            _start_over(meta, new_id, len(batch), stamp)
            if guard is not None and guard(meta) is False:
                return None
            records = self._message_records(session_key, old_id)
            archived_to = None
            if records:
                archived_to = self._archive(
                    keys.session_archive(agent_id, old_id),
                    [r.data for r in records],
                    _archive_meta(session_key, old_id, len(records), tokens, stamp),
                )
            if batch:  # stored under the new id before the meta names it: no reader finds them before that
                puts = [
                    (keys.message(session_key, new_id, i), self._item(session_key, new_id, i, m))
                    for i, m in enumerate(batch)
                ]
                self.table.write_batch(puts=puts)
            self._save(session_key, meta, version)
            return meta, old_id, records, tokens, archived_to

        done = retrying("session", attempt)
        self.histories.forget(session_key)
        if done is None:
            return None, None
        meta, old_id, records, tokens, archived_to = done

        media_deleted = 0
        try:
            media_deleted = self.workspace.delete_prefix(keys.session_media_prefix(session_key))
        except Exception:
            log.exception("deleting the media of %s failed", session_key)
        self.table.write_batch(deletes=[(r.pk, r.sk) for r in records])

        result: dict[str, Any] = {
            "ok": True,
            "sessionKey": meta.get("sessionKey") or "",
            "oldSessionId": old_id,
            "newSessionId": new_id,
            "archivedMessages": len(records),
            "tokensCleared": tokens,
            "mediaDeleted": media_deleted,
        }
        if archived_to:
            result["archivedTo"] = archived_to
        return result, meta

    def compact(self, session_key: str, keep: int = 20, *, now: int | None = None) -> dict[str, Any]:
        """Spec §5.8: keep the newest `keep` messages, archive the older ones to a part archive and delete them."""
        stamp = _now_ms() if now is None else now
        keep = max(0, keep)
        meta = self.get_or_create_meta(session_key, now=stamp)
        session_id = str(meta["sessionId"])
        records = self._message_records(session_key, session_id)
        total = len(records)
        if total <= keep:
            return {"ok": True, "trimmedMessages": 0, "keptMessages": total}
        older = records[: total - keep]
        agent_id = session_agent_id(session_key)
        archived_to = self._archive(
            keys.session_archive_part(agent_id, session_id, stamp),
            [r.data for r in older],
            {
                "sessionKey": session_key,
                "sessionId": session_id,
                "agentId": agent_id,
                "partNumber": stamp,
                "messageCount": len(older),
                "archivedAt": stamp,
            },
        )
        self.histories.forget(session_key)
        self.table.write_batch(deletes=[(r.pk, r.sk) for r in older])

        def shrink(current: dict[str, Any]) -> bool:
            if current.get("sessionId") == session_id:
                current["messageCount"] = max(0, message_count(current) - len(older))
                current[REWRITES] = rewrites_of(current) + 1
            current["updatedAt"] = stamp
            return True

        self.update_meta(session_key, shrink, now=stamp)
        result: dict[str, Any] = {"ok": True, "trimmedMessages": len(older), "keptMessages": total - len(older)}
        if archived_to:
            result["archivedTo"] = archived_to
        return result

    # --- registry (sessions.list) ----------------------------------------------------------------------------

    def registry_entry(self, session_key: str) -> dict[str, Any] | None:
        rec = self.table.get(keys.session_registry(session_key))
        return rec.data if rec else None

    def touch_registry(
        self, session_key: str, *, now: int | None = None, default_label: str | None = None
    ) -> dict[str, Any]:
        """Record activity for `sessions.list`: `createdAt` is kept, `lastActiveAt` moves to now, and an existing
        label is kept (else `default_label`, e.g. the channel peer's name)."""
        stamp = _now_ms() if now is None else now
        existing = self.registry_entry(session_key) or {}
        entry: dict[str, Any] = {
            "sessionKey": session_key,
            "createdAt": existing.get("createdAt", stamp),
            "lastActiveAt": stamp,
        }
        label = existing.get("label")
        if label is None:
            label = default_label
        if label is not None:
            entry["label"] = label
        self.table.put(keys.session_registry(session_key), entry)
        return entry

    def list_registry(self) -> list[dict[str, Any]]:
        """Every registry entry, most recently active first."""
        entries = [r.data for r in self.table.query(keys.SESSION_REGISTRY_PK)]
        entries.sort(key=lambda e: -_int(e.get("lastActiveAt")))
        return entries
