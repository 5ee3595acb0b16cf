"""Spend caps in USD end to end (ADR 0044): the real `orbital dev` prices a run with the configured price, counts it
in its table, shows it in `spend.status`, and refuses the next `chat.send` with GSV's 429 once the limit is reached,
before any model call."""

from __future__ import annotations

from pathlib import Path

import pytest
from orbital.client import GatewayClient, RpcFailedError

from tests.e2e.conftest import GatewayProcess
from tests.support.agent import configure_fake_model, follow_run
from tests.support.fake_llm import FakeLLM, reply


def test_a_reached_cap_refuses_chat_send_with_the_gsv_sentence(tmp_path: Path) -> None:
    with FakeLLM() as llm:
        gateway = GatewayProcess(tmp_path / "data").start()
        try:
            with GatewayClient(gateway.url, timeout=15) as client:
                hello = client.connect("client", "spender")
                assert "spend.alert" in hello["features"]["events"]
                assert "spend.status" in hello["features"]["methods"]
                configure_fake_model(client, llm.base_url)
                price = {"inputPerMTok": 1000, "outputPerMTok": 2000}  # $0.001 / $0.002 per token
                client.call("config.set", {"path": "spend.prices", "value": {"openai/gpt-test": price}})
                client.call("config.set", {"path": "providers.openai.maxTokens", "value": 10})
                client.call("config.set", {"path": "spend.limits.daily", "value": 5})
                llm.script(reply("spent", usage={"input": 4960, "output": 10}))  # $4.98
                started = client.call("chat.send", {"sessionKey": "main", "message": "spend"})
                assert follow_run(client, started["runId"])[-1]["state"] == "final"
                status = client.call("spend.status", {})
                daily = next(p for p in status["periods"] if (p["scope"], p["period"]) == ("global", "daily"))
                assert daily["usedUsd"] == pytest.approx(4.98) and daily["limitUsd"] == 5
                with pytest.raises(RpcFailedError) as refused:
                    client.call("chat.send", {"sessionKey": "main", "message": "more"})
                assert refused.value.code == 429
                assert refused.value.message == "spend limit reached (daily: $4.98 / $5.00)"
                assert len(llm.requests) == 1  # the refused message never reached the model
        finally:
            gateway.stop()
