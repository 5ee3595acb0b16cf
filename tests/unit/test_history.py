"""The in-process history of a session (`orbital.store.history`): snapshots, their memo, the cache's bound."""

from __future__ import annotations

from typing import Any

from orbital.domain.compaction import estimate_context_tokens
from orbital.store.history import History, HistoryCache, MessageMemo, rewrites_of


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def history(*texts: str, next_seq: int | None = None) -> History:
    messages = [user(t) for t in texts]
    return History.of("s1", 0, len(messages) if next_seq is None else next_seq, messages)


def test_an_extended_history_is_a_new_snapshot_with_the_running_estimate() -> None:
    first = history("a", "b")
    second = first.extended([user("c")], 3)
    assert [m["content"] for m in first.messages] == ["a", "b"]
    assert [m["content"] for m in second.messages] == ["a", "b", "c"]
    assert second.messages[0] is first.messages[0]
    assert (first.next_seq, second.next_seq) == (2, 3)
    assert first.tokens == estimate_context_tokens(first.messages)
    assert second.tokens == estimate_context_tokens(second.messages)
    assert second.memo is first.memo


def test_a_history_fits_a_meta_of_its_session_id_and_rewrites() -> None:
    kept = History.of("s1", 2, 0, [])
    assert kept.fits({"sessionId": "s1", "rewrites": 2})
    assert not kept.fits({"sessionId": "s1", "rewrites": 3})
    assert not kept.fits({"sessionId": "s2", "rewrites": 2})
    assert History.of("s1", 0, 0, []).fits({"sessionId": "s1"})
    assert rewrites_of({"rewrites": True}) == 0 and rewrites_of({}) == 0


def test_the_memo_makes_once_per_kind_and_only_for_its_own_messages() -> None:
    memo = MessageMemo()
    owned, stranger = user("mine"), user("mine")
    memo.own([owned])
    made: list[str] = []

    def make(message: dict[str, Any]) -> str:
        made.append(message["content"])
        return f"wire:{message['content']}"

    assert memo.get("x", owned, make) == "wire:mine"
    assert memo.get("x", owned, make) == "wire:mine"
    assert memo.get("y", owned, make) == "wire:mine"
    assert memo.get("x", stranger, make) == "wire:mine"
    assert memo.get("x", stranger, make) == "wire:mine"
    assert made == ["mine", "mine", "mine", "mine"]  # x and y once for the owned message; the stranger each time


def test_the_cache_keeps_the_recently_used_within_its_bound() -> None:
    one, two, three = history("a" * 400), history("b" * 400), history("c" * 400)
    cache = HistoryCache(limit=one.tokens * 2)
    cache.put("k1", one)
    cache.put("k2", two)
    assert cache.get("k1") is one  # k1 is now the most recently used
    cache.put("k3", three)
    assert cache.get("k2") is None
    assert cache.get("k1") is one and cache.get("k3") is three
    huge = History.of("s1", 0, 1, [user("x" * 4000)])
    cache.put("k1", huge)
    assert cache.get("k1") is None  # larger than the whole bound: not kept (and the older one is gone)
    cache.forget("k3")
    assert cache.get("k3") is None


def test_a_reader_does_not_put_back_a_history_a_writer_replaced() -> None:
    cache = HistoryCache()
    first = history("a")
    cache.put("k", first)
    written = first.extended([user("b")], 2)
    cache.put("k", written, replacing=first)
    stale = first.extended([user("other")], 2)
    cache.put("k", stale, replacing=first)
    assert cache.get("k") is written
