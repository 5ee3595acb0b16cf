"""What a turn reads of a session's history, on the AWS path (moto, no table cache), counted at the DynamoDB client:
the history kept in the process is extended by the turn's own writes and by a read of only what is new, and is read
again in full when another container removed, replaced or reset messages (ADR 0035). And the reads of a whole turn,
counted per turn over a long session, do not grow with the session's length."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from orbital.store import keys
from orbital.store.sessions import INLINE_MESSAGE_BYTES, SessionRepo

from tests.conftest import wait_for
from tests.support.agent import final_of
from tests.support.fake_llm import FakeLLM, call, reply

KEY = "agent:main:main"
READS = ("GetItem", "BatchGetItem", "Query", "Scan")


class Reads:
    """DynamoDB read calls and the items they returned, counted at one boto3 client (every repository of the
    services shares it)."""

    def __init__(self, client: Any) -> None:
        self.calls: Counter[str] = Counter()
        self.items: Counter[str] = Counter()
        self._client = client
        client.meta.events.register("after-call.dynamodb.*", self._count)

    def _count(self, http_response: Any = None, parsed: Any = None, model: Any = None, **_: Any) -> None:
        name = model.name if model is not None else ""
        if name not in READS or not isinstance(parsed, dict):
            return
        self.calls[name] += 1
        if name in ("Query", "Scan"):
            self.items[name] += len(parsed.get("Items") or [])
        elif name == "GetItem":
            self.items[name] += 1 if parsed.get("Item") else 0
        else:
            self.items[name] += sum(len(found) for found in (parsed.get("Responses") or {}).values())

    def reset(self) -> None:
        self.calls.clear()
        self.items.clear()

    def close(self) -> None:
        self._client.meta.events.unregister("after-call.dynamodb.*", self._count)


@pytest.fixture
def reads(services: Any) -> Iterator[Reads]:
    counted = Reads(services.table.client)
    yield counted
    counted.close()


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def texts(messages: list[dict[str, Any]]) -> list[Any]:
    return [m["content"] for m in messages]


def other_container(services: Any) -> SessionRepo:
    """The same table and bucket as another Lambda container sees them: a repository with nothing kept."""
    return SessionRepo(services.table, services.workspace)


def test_a_history_read_once_is_extended_by_appends_without_reading_them(services: Any, reads: Reads) -> None:
    repo = services.sessions
    meta = repo.append_messages(KEY, [user(f"m{i}") for i in range(5)])
    assert meta is not None
    reads.reset()
    first = repo.history(KEY, meta)
    assert texts(first.messages) == [f"m{i}" for i in range(5)]
    assert reads.calls["Query"] == 1 and reads.items["Query"] == 5

    reads.reset()
    meta = repo.append_messages(KEY, [user("m5"), user("m6")])
    assert meta is not None
    after = repo.history(KEY, meta)
    assert texts(after.messages) == [f"m{i}" for i in range(7)]
    assert reads.calls["Query"] == 0  # the append was written through
    assert texts(first.messages) == [f"m{i}" for i in range(5)]  # a snapshot never changes
    assert after.messages == repo.messages(KEY)
    from orbital.domain.compaction import estimate_context_tokens

    assert after.tokens == estimate_context_tokens(after.messages)


def test_messages_another_container_stored_are_the_only_ones_read(services: Any, reads: Reads) -> None:
    repo = services.sessions
    meta = repo.append_messages(KEY, [user(f"m{i}") for i in range(8)])
    assert meta is not None
    repo.history(KEY, meta)
    meta = other_container(services).append_messages(KEY, [user("m8"), user("m9")])
    assert meta is not None
    reads.reset()
    history = repo.history(KEY, meta)
    assert texts(history.messages) == [f"m{i}" for i in range(10)]
    assert reads.calls["Query"] == 1 and reads.items["Query"] == 2
    reads.reset()
    assert repo.history(KEY, meta) is history
    assert reads.calls["Query"] == 0


@pytest.mark.parametrize("change", ["compact", "replace_oldest", "replace_one", "reset"])
def test_a_history_changed_by_another_container_is_read_again(services: Any, reads: Reads, change: str) -> None:
    repo, other = services.sessions, other_container(services)
    meta = repo.append_messages(KEY, [user(f"m{i}") for i in range(6)])
    assert meta is not None
    repo.history(KEY, meta)
    if change == "compact":
        other.compact(KEY, keep=2)
    elif change == "replace_oldest":
        other.replace_oldest(KEY, 4, user("summary"))
    elif change == "replace_one":  # the count does not change: only `rewrites` tells
        other.replace_oldest(KEY, 1, user("summary"))
    else:
        other.reset(KEY)
        other.append_messages(KEY, [user("fresh")])
    meta = repo.load_meta(KEY)
    assert meta is not None
    reads.reset()
    history = repo.history(KEY, meta)
    assert reads.calls["Query"] == 1
    assert history.messages == repo.messages(KEY)
    expected = {
        "compact": ["m4", "m5"],
        "replace_oldest": ["summary", "m4", "m5"],
        "replace_one": ["summary", "m1", "m2", "m3", "m4", "m5"],
        "reset": ["fresh"],
    }[change]
    assert texts(history.messages) == expected


def test_an_append_not_landed_yet_is_read_once_it_has(services: Any) -> None:
    """Sequence numbers are reserved in the meta before the messages are written: a history read in between has
    fewer messages than the meta counts, so it is not kept, and the messages are read once they are there."""
    repo = services.sessions
    meta = repo.append_messages(KEY, [user("m0"), user("m1")])
    assert meta is not None
    repo.history(KEY, meta)

    def reserve(current: dict[str, Any]) -> bool:
        current["nextSeq"] = int(current["nextSeq"]) + 1
        current["messageCount"] = int(current["messageCount"]) + 1
        return True

    meta = repo.update_meta(KEY, reserve)  # another writer's reservation, its message still on its way
    assert texts(repo.history(KEY, meta).messages) == ["m0", "m1"]
    services.table.put(keys.message(KEY, str(meta["sessionId"]), 2), user("m2"))
    assert texts(repo.history(KEY, meta).messages) == ["m0", "m1", "m2"]


def test_a_meta_earlier_than_the_kept_history_is_read_again(services: Any, reads: Reads) -> None:
    """E.g. a session restored to an earlier state under a running gateway (an import): its meta is behind what the
    process kept, so what it holds is read again."""
    repo = services.sessions
    before = repo.append_messages(KEY, [user("m0"), user("m1")])
    assert before is not None
    now = repo.append_messages(KEY, [user("m2")])
    assert now is not None
    assert texts(repo.history(KEY, now).messages) == ["m0", "m1", "m2"]
    reads.reset()
    assert texts(repo.history(KEY, before).messages) == ["m0", "m1"]
    assert reads.calls["Query"] == 1


def test_a_message_too_large_for_an_item_is_kept_whole(services: Any, reads: Reads) -> None:
    repo = services.sessions
    big = "x" * (INLINE_MESSAGE_BYTES + 10)
    meta = repo.append_messages(KEY, [user("small"), user(big)])
    assert meta is not None
    cold = other_container(services).history(KEY, meta)
    assert texts(cold.messages) == ["small", big]
    assert texts(repo.history(KEY, meta).messages) == ["small", big]  # written through, body included


# --- a long session, turn by turn ------------------------------------------------------------------------------


def _respond(request: Any) -> Any:
    messages = request.body["messages"]
    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
    wants_tool = "tool" in str(messages[last_user]["content"])
    if wants_tool and not any(m["role"] == "tool" for m in messages[last_user:]):
        return reply(tool_calls=[call("gsv__ConfigGet", {"path": "model"})])
    return reply("done")


def _turns(agent: Any, sender: Any, llm: FakeLLM, reads: Reads, flows: Any, count: int) -> list[Any]:
    """Run `count` turns in one session (odd: plain, even: one tool call); per turn, the reads it made."""
    sfn = boto3.client("stepfunctions", region_name="us-east-1")
    llm.responder = _respond
    seen = []
    for number in range(1, count + 1):
        reads.reset()
        message = "use a tool" if number % 2 == 0 else "hello"
        run_id = agent.call("chat.send", {"sessionKey": KEY, "message": message})["runId"]
        final = final_of(sender, agent.connection_id, run_id, timeout=30)
        assert final["state"] == "final", final

        def finished() -> bool:
            listed = sfn.list_executions(stateMachineArn=flows["AgentTurnStateMachine"])["executions"]
            return all(e["status"] != "RUNNING" for e in listed if e["name"].startswith(run_id[:20]))

        wait_for(finished, timeout=30)
        seen.append((number, Counter(reads.calls), Counter(reads.items)))
    return seen


@pytest.fixture
def no_watch(monkeypatch: pytest.MonkeyPatch) -> None:
    """No ownership check while a model call runs (its reads depend on how long the call takes)."""
    from orbital.agent import turn

    monkeypatch.setattr(turn, "ABORT_CHECK_S", 3600.0)


def test_a_turns_reads_do_not_grow_with_the_sessions_length(
    agent: Any, sender: Any, llm: FakeLLM, reads: Reads, flows: Any, no_watch: None
) -> None:
    """A warm container: what a turn reads (calls and items, by operation) is the same at turn 30 as at turn 3 for
    plain turns, and at turn 30 as at turn 4 for turns with a tool call; no message is read twice."""
    seen = _turns(agent, sender, llm, reads, flows, 30)
    for parity in (1, 0):  # plain turns, turns with a tool call
        same_kind = [(calls, items) for number, calls, items in seen if number >= 3 and number % 2 == parity]
        assert all(pair == same_kind[0] for pair in same_kind), seen


def test_without_memory_a_step_reads_the_history_once_and_nothing_else_grows(
    agent: Any, sender: Any, llm: FakeLLM, reads: Reads, flows: Any, no_watch: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every step invocation in a container that kept nothing (the kept histories dropped before each step): the
    read calls of a turn do not grow; the items read grow by the history each model call is sent, read once."""
    from orbital.agent import turn

    step = turn.STEPS["turn"]

    def cold(services: Any, event: dict[str, Any]) -> dict[str, Any]:
        services.sessions.histories.clear()
        return step(services, event)

    monkeypatch.setitem(turn.STEPS, "turn", cold)
    seen = _turns(agent, sender, llm, reads, flows, 12)
    stored = 0  # messages in the session before the turn: a plain turn adds 2, a turn with a tool call 4
    others: dict[int, set[Any]] = {1: set(), 0: set()}
    for number, calls, items in seen:
        plain = number % 2 == 1
        sent = [stored + 1] if plain else [stored + 1, stored + 3]  # the history of each model call
        if number >= 3:
            others[number % 2].add((sum(calls.values()), items["Query"] - sum(sent), items["GetItem"]))
        stored += 2 if plain else 4
    assert all(len(found) == 1 for found in others.values()), seen
