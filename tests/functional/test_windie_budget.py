"""A WindieOS query that cannot fit its token budget is refused before any run, in WindieOS's own shape: an `error`
frame of the turn, no `streaming-response` (the handlers on AWS over moto, the scripted model)."""

from __future__ import annotations

from typing import Any

from tests.functional.test_windie_aws import _connected, _frame
from tests.support import rules
from tests.support.fake_llm import FakeLLM


def test_a_query_that_cannot_fit_the_daily_budget_is_an_error_and_no_stream(
    token: Any, flows: Any, sender: Any, services: Any, agent: Any, llm: FakeLLM
) -> None:
    llm.responder = rules.respond
    services.config.set_path("budgets.daily", 50)  # less than any system prompt
    cid = _connected()
    query = {"id": "b1", "type": "query", "payload": {"text": "hello", "conversation_ref": "tight"}}
    answer = _frame(cid, query)  # the answer to the frame itself: nothing is streamed
    assert answer["type"] == "error" and answer["turn_ref"] == "b1"
    assert answer["payload"]["message"].startswith("Token budget exceeded (daily: 0/50)")
    posted = [f for f in sender.frames_to(cid) if isinstance(f, dict) and f.get("turn_ref") == "b1"]
    assert [f["type"] for f in posted if f["type"].startswith("streaming")] == []
    assert llm.requests == []
