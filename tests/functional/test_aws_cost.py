"""What a turn costs on AWS: the counting of `bench/aws_cost.py` run on one kind of turn (so the bench cannot rot
silently), and the workspace listings a model call makes (each an S3 LIST request on AWS)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from orbital.domain.compaction import memory_file_date
from orbital.store import keys

from bench import aws_cost
from tests.support.agent import final_of
from tests.support.fake_llm import FakeLLM, reply


def test_the_bench_counts_a_plain_turn_the_same_every_time() -> None:
    first, second = aws_cost.count_plain_turn(rounds=2)
    for usage in (first, second):
        assert usage.requests["sfn.StartExecution"] == 1  # one execution per run
        assert usage.requests["dynamodb.GetItem"] > 0 and usage.requests["dynamodb.PutItem"] > 0
        assert usage.requests["apigatewaymanagementapi.PostToConnection"] > 0  # the run's chat events
        assert usage.requests["s3.ListObjectsV2"] == 2  # the agent's root and the global skills
        assert "secretsmanager.GetSecretValue" not in usage.requests  # a warm container has the token
        assert dict(usage.invocations) == {"WsMessageFunction": 1, "AgentStepsFunction": 1}
        assert usage.transitions == 4  # Kind, Turn, Route, Done
        assert usage.messages_in == 1 and usage.messages_out >= 2  # chat.send; its answer and the events
        assert usage.rru > 0 and usage.wru > 0 and usage.gb_seconds > 0
        assert usage.model_calls == 1 and usage.input_tokens > 0
        cost = aws_cost.dollars(usage)
        assert set(cost) == {
            "API Gateway",
            "Lambda",
            "Step Functions",
            "DynamoDB",
            "S3",
            "Secrets Manager",
            "EventBridge",
        }
        assert cost["Step Functions"] == 4 * aws_cost.PRICES["sfn.transition"][0]
        assert all(v >= 0 for v in cost.values()) and aws_cost.model_dollars(usage) > sum(cost.values())
    assert first.requests == second.requests  # turn 3 is counted as turn 2 was
    assert (first.transitions, first.messages_in, first.messages_out) == (
        second.transitions,
        second.messages_in,
        second.messages_out,
    )


def test_item_sizes_follow_dynamodbs_rules() -> None:
    assert aws_cost.item_size({"PK": {"S": "ab"}, "n": {"N": "12345"}, "b": {"BOOL": True}}) == 2 + 2 + 1 + 4 + 1 + 1
    assert aws_cost.item_size({"m": {"M": {"x": {"S": "y"}}}, "l": {"L": [{"S": "z"}]}}) == (1 + 3 + 1 + 1 + 1) + (
        1 + 3 + 1 + 1
    )
    big = {"PK": {"S": "x" * 5000}}
    assert aws_cost._read_units(aws_cost.item_size(big), True) == 2
    assert aws_cost._read_units(aws_cost.item_size(big), False) == 1
    assert aws_cost._write_units(None, big) == 5
    assert aws_cost._write_units(None, {**big, "GSI1PK": {"S": "i"}}) == 10  # and the index's copy


def _lists_in_a_turn(agent: Any, sender: Any, llm: FakeLLM, message: str) -> int:
    from orbital.aws import clients

    llm.script(reply("ok"))
    clients.reset_call_counts()
    started = agent.call("chat.send", {"sessionKey": "main", "message": message})
    assert final_of(sender, agent.connection_id, started["runId"])["state"] == "final"
    return clients.call_counts().get("s3.ListObjectsV2", 0)


def test_a_model_call_lists_only_the_directories_the_agent_has(
    agent: Any, sender: Any, llm: FakeLLM, services: Any
) -> None:
    """Every model call builds the prompt from the agent's workspace. Its root listing shows whether `memory/` and
    `skills/` exist: a directory that does not is not listed (two S3 LISTs a model call instead of four); one that
    does still reaches the prompt."""
    assert _lists_in_a_turn(agent, sender, llm, "first") == 2

    daily = f"memory/{memory_file_date(datetime.now(UTC))}.md"
    services.workspace.put(keys.workspace_object("main", daily), b"NOTE_OF_TODAY", content_type="text/markdown")
    skill = "---\nname: tidy\ndescription: SKILL_TO_TIDY\n---\n\n# tidy\n"
    services.workspace.put(
        keys.workspace_object("main", "skills/tidy/SKILL.md"), skill.encode(), content_type="text/markdown"
    )
    assert _lists_in_a_turn(agent, sender, llm, "second") == 4
    sent = json.dumps(llm.requests[-1].body)
    assert "NOTE_OF_TODAY" in sent and "SKILL_TO_TIDY" in sent
