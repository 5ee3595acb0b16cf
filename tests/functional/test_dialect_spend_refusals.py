"""A run a USD spend limit refuses is refused in each dialect's own words, before any stream (the handlers on AWS
over moto, the scripted model priced at a dollar a token under a $5 daily cap): Exoclaw a plain `spend limit
exceeded (daily: $0.00/$5.00)`, xeno `gateway.error` then `gateway.done`, WindieOS an `error` event of the turn. A
run stopped half-way ends with the engine's note, which Exoclaw turns into `error` then `done`."""

from __future__ import annotations

from typing import Any

import pytest
from orbital.agent.turn import note_message
from orbital.dialects import exoclaw
from orbital.domain import spend
from orbital.domain.spend import SpendExceededError
from orbital.store.subscriptions import Subscription

from tests.conftest import GATEWAY_TOKEN as TOKEN
from tests.functional import test_exoclaw_aws as exo
from tests.functional import test_windie_aws as windie
from tests.functional import test_xeno_on_aws as xeno
from tests.support.fake_llm import FakeLLM

SENTENCE = "spend limit reached (daily: $0.00 / $5.00)"


@pytest.fixture
def refused(agent: Any) -> None:
    price = {"inputPerMTok": 1_000_000, "outputPerMTok": 1_000_000}
    agent.call("config.set", {"path": "spend.prices", "value": {"openai/gpt-test": price}})
    agent.call("config.set", {"path": "spend.limits.daily", "value": 5})


def test_exoclaw_gets_its_plain_error_and_no_stream(token, flows, sender, services, agent, llm: FakeLLM, refused):
    cid = exo._authenticated(sender)
    params = {"channel": "websocket", "account": "me", "content": "hello"}
    answer = exo._frame(cid, {"id": "s1", "method": "chat.send", "params": params})
    assert answer == {"id": "s1", "error": "spend limit exceeded (daily: $0.00/$5.00)"}
    assert [f for f in sender.frames_to(cid) if isinstance(f, dict) and f.get("id") == "s1"] == []
    assert llm.requests == []


def test_xeno_gets_gateway_error_then_done(token, flows, sender, services, agent, llm: FakeLLM, refused):
    cid, opened = xeno._open(TOKEN)
    assert opened == {"statusCode": 200}
    query = {"requestId": "r1", "content": "hello", "context": {"type": "rpc"}}
    answer = xeno._send(cid, {"jsonrpc": "2.0", "id": 2, "method": "gateway.query", "params": query})
    frames = [*xeno._posted(sender, cid), answer]  # the last one is the route's response
    assert frames == [
        {"jsonrpc": "2.0", "id": 2, "result": {"accepted": True}},
        {"jsonrpc": "2.0", "method": "gateway.error", "params": {"requestId": "r1", "error": SENTENCE}},
        {"jsonrpc": "2.0", "method": "gateway.done", "params": {"requestId": "r1"}},
    ]
    assert llm.requests == []


def test_windie_gets_an_error_event_of_the_turn(token, flows, sender, services, agent, llm: FakeLLM, refused):
    cid = windie._connected()
    query = {"id": "q1", "type": "query", "payload": {"text": "hello", "conversation_ref": "c1"}}
    answer = windie._frame(cid, query)
    assert answer["type"] == "error" and answer["turn_ref"] == "q1" and answer["conversation_ref"] == "c1"
    assert answer["payload"]["message"] == SENTENCE
    posted = [f for f in sender.frames_to(cid) if isinstance(f, dict) and f.get("turn_ref") == "q1"]
    assert [f["type"] for f in posted if f["type"].startswith("streaming")] == []
    assert llm.requests == []


def test_a_run_stopped_half_way_ends_with_exoclaws_error_then_done(services: Any) -> None:
    """The stream's end when a run stopped half-way (a real gateway's run: tests/e2e/test_spend_caps_clients.py)."""
    note = note_message(SpendExceededError("daily", 4.98, 5.0).note(), spend.NOTE_REASON)  # as the run ends with it
    sub = Subscription(run_id="r", connection_id="c", dialect="exoclaw", session_key="k", ref={"id": "7"})
    frames = exoclaw.encode(services, sub, {"state": "final", "message": note})
    assert frames == [
        {"id": "7", "event": "error", "data": "spend limit exceeded (daily: $4.98/$5.00)"},
        {"id": "7", "event": "done"},
    ]
    said_by_model = {**note, "provider": "openai", "model": "gpt-test"}  # the model's own words are its reply
    assert exoclaw.encode(services, sub, {"state": "final", "message": said_by_model}) == [{"id": "7", "event": "done"}]
