"""Exoclaw's dialect, piece by piece: which agent a conversation goes to (its bindings, most specific first), the
conversation's session key, chat.send's params in serde's words, and the frames of a run's events."""

from __future__ import annotations

import json
from typing import Any

import pytest
from orbital.agent import events
from orbital.dialects import base, exoclaw
from orbital.dialects.detect import EXOCLAW, XENO, detect
from orbital.domain import config as cfg
from orbital.domain.session_keys import canonicalize_with_config, resolve_agent_by_specificity
from orbital.store.subscriptions import Subscription

# --- bindings: peer > guild > team > account > channel ------------------------------------------------------------

BY_LEVEL = [  # least specific first, so the list order never decides between levels
    {"agentId": "by-channel", "match": {"channel": "discord"}},
    {"agentId": "by-account", "match": {"channel": "discord", "accountId": "acct"}},
    {"agentId": "by-team", "match": {"teamId": "t1"}},
    {"agentId": "by-guild", "match": {"channel": "discord", "guildId": "g1"}},
    {"agentId": "by-peer", "match": {"peer": {"id": "alice"}}},
]


def _config(bindings: list[dict[str, Any]], default: str | None = "home") -> dict[str, Any]:
    agents: dict[str, Any] = {"bindings": bindings}
    if default is not None:
        agents["list"] = [{"id": default, "default": True}]
    return cfg.effective({"agents": agents})


def _agent(config: dict[str, Any], **given: Any) -> str:
    conversation: dict[str, Any] = {"channel": "discord", "account_id": "acct", "peer_id": "alice", **given}
    return resolve_agent_by_specificity(config, **conversation)


def test_the_most_specific_matching_binding_wins_whatever_the_order():
    for bindings in (BY_LEVEL, list(reversed(BY_LEVEL))):
        config = _config(bindings)
        assert _agent(config, guild_id="g1", team_id="t1") == "by-peer"
        assert _agent(config, peer_id="bob", guild_id="g1", team_id="t1") == "by-guild"
        assert _agent(config, peer_id="bob", guild_id="g2", team_id="t1") == "by-team"
        assert _agent(config, peer_id="bob") == "by-account"
        assert _agent(config, peer_id="bob", account_id="other") == "by-channel"
        assert _agent(config, peer_id="bob", channel="telegram") == "home"


def test_every_given_field_must_match_exactly():
    config = _config(
        [
            {"agentId": "guarded", "match": {"channel": "discord", "accountId": "acct", "guildId": "g1"}},
            {"agentId": "case", "match": {"accountId": "Acct"}},
            {"agentId": "kind-only", "match": {"peer": {"kind": "group"}}},
            {"agentId": "other-peer", "match": {"peer": {"id": "bob"}}},
        ]
    )
    assert _agent(config) == "home"  # no guild: the guild binding is not a match; ids are case-sensitive
    assert _agent(config, guild_id="g1") == "guarded"
    assert _agent(config, account_id="Acct") == "case"
    assert _agent(config, peer_id="bob") == "other-peer"


def test_among_equally_specific_bindings_the_first_wins_and_ids_are_normalized():
    config = _config(
        [
            {"agentId": "First", "match": {"accountId": "acct"}},
            {"agentId": "second", "match": {"channel": "discord", "accountId": "acct"}},
        ]
    )
    assert _agent(config) == "first"


def test_without_bindings_the_default_agent():
    assert _agent(_config([])) == "home"
    assert _agent(_config([], default=None)) == "main"
    assert _agent(cfg.effective({"agents": {"bindings": "nonsense"}})) == "main"


# --- the conversation's session ------------------------------------------------------------------------------------


def test_a_conversation_key_is_stable_case_preserving_and_distinct():
    key = base.conversation_key("main", EXOCLAW, "Discord", "Acct", "Peer")
    assert key.startswith("agent:main:exoclaw:group:") and len(key.rsplit(":", 1)[1]) == 32
    assert base.conversation_key("main", EXOCLAW, "Discord", "Acct", "Peer") == key
    for config in (cfg.defaults(), cfg.effective({"session": {"dmScope": "per-peer", "mainKey": "home"}})):
        assert canonicalize_with_config(key, config) == key  # GSV's canonicalization leaves it alone
    others = {
        base.conversation_key("main", EXOCLAW, *ids)
        for ids in (("discord", "Acct", "Peer"), ("Discord", "acct", "Peer"), ("Discord", "Acct", "peer"))
    }
    others.add(base.conversation_key("main", EXOCLAW, "Discord", "Acct\x00Peer", ""))  # no two tuples collide
    others.add(base.conversation_key("work", EXOCLAW, "Discord", "Acct", "Peer"))
    assert len(others) == 5 and key not in others


# --- chat.send's params ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "problem"),
    [
        ({"channel": "ws"}, "missing field `account`"),
        (None, "missing field `channel`"),
        ({"account": "a", "content": "x"}, "missing field `channel`"),
        ({"channel": "ws", "account": "a"}, "missing field `content`"),
        ({"channel": None, "account": "a", "content": "x"}, "invalid type: null, expected a string"),
        ({"channel": "ws", "account": 5}, "invalid type: integer `5`, expected a string"),
        ({"channel": "ws", "account": "a", "content": True}, "invalid type: boolean `true`, expected a string"),
        (
            {"channel": "ws", "account": "a", "content": "x", "peer": 1.5},
            "invalid type: floating point `1.5`, expected a string",
        ),
        ({"channel": "ws", "account": "a", "content": "x", "team": []}, "invalid type: sequence, expected a string"),
        ({"channel": "ws", "account": "a", "content": "x", "guild": {}}, "invalid type: map, expected a string"),
        ("hello", 'invalid type: string "hello", expected struct ChatSendParams'),
        ({"channel": "ws", "account": "a", "content": " \n"}, "content must not be empty"),
    ],
)
def test_chat_send_params_are_refused_in_serdes_words(params: Any, problem: str):
    assert exoclaw._chat_params(params) == ({}, f"invalid chat.send params: {problem}")


def test_chat_send_params_defaults_and_extra_keys():
    values, problem = exoclaw._chat_params(
        {"channel": "ws", "account": "a", "content": "hi", "guild": None, "team": "t", "extra": 1}
    )
    assert problem is None
    assert values == {"channel": "ws", "account": "a", "content": "hi", "team": "t", "peer": "main"}


# --- detection -------------------------------------------------------------------------------------------------------


def test_which_first_frames_are_exoclaws():
    assert detect({"token": "x"}) == EXOCLAW
    assert detect({"id": 1, "method": "chat.send"}) == EXOCLAW
    assert detect({"jsonrpc": "2.0", "id": "1", "method": "ping"}) == EXOCLAW  # the Exoclaw UI sends jsonrpc
    assert detect({"jsonrpc": "2.0", "id": 1, "method": "gateway.initialize"}) == XENO
    assert detect({"id": "1", "method": "nope"}) is None
    assert detect({"type": "req", "id": "1", "method": "ping"}) == "gsv"
    assert detect(None) is None


# --- a run's events as Exoclaw frames --------------------------------------------------------------------------------


def _encode(payload: dict[str, Any]) -> list[Any]:
    sub = Subscription("run-1", "conn-1", EXOCLAW, "agent:main:exoclaw:group:x", {"id": "42"})
    return exoclaw.encode(None, sub, events.chat_payload("run-1", **payload))  # type: ignore[arg-type]


def test_the_frames_of_each_event():
    assert _encode({"state": "delta", "text": "Hel"}) == [{"id": "42", "event": "text", "data": "Hel"}]
    tools = [
        {"id": "c1", "name": "gsv__ListFiles", "arguments": {"path": "/"}},
        {"id": "c2", "name": "x", "arguments": {}},
    ]
    assert _encode({"state": "tool", "tools": tools}) == [
        {"id": "42", "event": "tool_use", "data": {"id": "c1", "name": "gsv__ListFiles", "input": {"path": "/"}}},
        {"id": "42", "event": "tool_use", "data": {"id": "c2", "name": "x", "input": {}}},
    ]
    result = {
        "state": "toolResult",
        "toolCallId": "c1",
        "toolName": "gsv__ListFiles",
        "isError": False,
        "content": "[]",
    }
    assert _encode(result) == [
        {"id": "42", "event": "tool_result", "data": {"tool_use_id": "c1", "content": "[]", "is_error": False}}
    ]
    usage = {"state": "usage", "usage": {"input": 12, "output": 7, "cacheRead": 3, "totalTokens": 22}}
    assert _encode(usage) == [{"id": "42", "event": "usage", "data": {"input_tokens": 12, "output_tokens": 7}}]
    assert _encode({"state": "final", "message": {"role": "assistant", "content": []}}) == [
        {"id": "42", "event": "done"}
    ]
    assert _encode({"state": "partial", "message": {"role": "assistant", "content": []}}) == []


def test_errors_end_the_stream_and_a_providers_says_so():
    assert _encode({"state": "error", "error": "Run cancelled by user"}) == [
        {"id": "42", "event": "error", "data": "Run cancelled by user"},
        {"id": "42", "event": "done"},
    ]
    failed = {"state": "error", "error": "503 overloaded", "cause": events.PROVIDER_FAILED}
    assert _encode(failed)[0] == {"id": "42", "event": "error", "data": "provider error: 503 overloaded"}


def test_a_run_a_budget_stopped_between_model_calls_ends_with_exoclaws_error():
    from orbital.agent.turn import note_message
    from orbital.domain.budgets import NOTE_REASON, BudgetExceededError

    note = note_message(BudgetExceededError("daily", 10234, 10000, estimate=800).note(), NOTE_REASON)
    assert _encode({"state": "final", "message": note}) == [
        {"id": "42", "event": "error", "data": "token budget exceeded (daily: 10234/10000)"},
        {"id": "42", "event": "done"},
    ]


def test_a_tool_call_or_result_too_large_for_one_message_is_cut():
    big = "é" * 200_000  # 400 KB of UTF-8
    (result,) = _encode({"state": "toolResult", "toolCallId": "c1", "isError": False, "content": f"start{big}"})
    assert len(json.dumps(result, ensure_ascii=False).encode()) <= exoclaw.MAX_FRAME_BYTES
    assert result["data"]["content"].startswith("startéé") and result["data"]["content"].endswith(exoclaw.TRUNCATED)
    assert result["data"]["tool_use_id"] == "c1" and result["data"]["is_error"] is False
    (use,) = _encode(
        {"state": "tool", "tools": [{"id": "c2", "name": "gsv__WriteFile", "arguments": {"content": big}}]}
    )
    assert len(json.dumps(use, ensure_ascii=False).encode()) <= exoclaw.MAX_FRAME_BYTES
    assert use["data"]["input"].startswith('{"content": "éé') and use["data"]["input"].endswith(exoclaw.TRUNCATED)
    small = {"state": "toolResult", "toolCallId": "c3", "isError": True, "content": "x" * 1000}
    assert _encode(small)[0]["data"]["content"] == "x" * 1000


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("not json", "expecting value at line 1 column 1"),
        ('{"id": "1",\n "method": }', "expecting value at line 2 column 12"),
        ("[1]", "invalid type: sequence, expected struct Request"),
        ("null", "invalid type: null, expected struct Request"),
        ('{"method": "ping"}', "missing field `id`"),
        ('{"id": "1"}', "missing field `method`"),
        ('{"id": null, "method": "ping"}', "invalid type: null, expected a string or a number"),
        ('{"id": true, "method": "ping"}', "invalid type: boolean `true`, expected a string or a number"),
        ('{"id": "1", "method": 5}', "invalid type: integer `5`, expected a string"),
    ],
)
def test_what_is_no_request_is_a_parse_error(text: str, problem: str):
    try:
        frame = json.loads(text)
    except ValueError:
        frame = None
    assert exoclaw._parse_error(text, frame) == f"parse error: {problem}"
    assert exoclaw._parse_error('{"id": 1.5, "method": "x"}', {"id": 1.5, "method": "x"}) is None
