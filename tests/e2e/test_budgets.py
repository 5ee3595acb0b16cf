"""Token budgets end to end (ADR 0026): the real `orbital dev` counts a run's tokens in its table, and the counters
are still there after the process is killed and started again on the same data directory."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from orbital.client import GatewayClient, RpcFailedError

from tests.e2e.conftest import GatewayProcess
from tests.support.agent import configure_fake_model, follow_run
from tests.support.fake_llm import FakeLLM, reply


def test_usage_counters_survive_a_restart(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with FakeLLM() as llm:
        gateway = GatewayProcess(data_dir).start()
        try:
            with GatewayClient(gateway.url, timeout=15) as client:
                client.connect("client", "budget-spender")
                configure_fake_model(client, llm.base_url)
                client.call("config.set", {"path": "budgets.daily", "value": 10_000})
                llm.script(reply("spent", usage={"input": 40, "output": 2}))
                started = client.call("chat.send", {"sessionKey": "main", "message": "spend a little"})
                assert follow_run(client, started["runId"])[-1]["state"] == "final"
                before = client.call("session.stats", {"sessionKey": "main"})["budget"]
                assert before["daily"]["used"] == 42 and before["daily"]["limit"] == 10_000
                assert before["monthly"]["used"] == 42 and before["monthly"]["limit"] is None
            assert gateway.proc is not None
            os.kill(gateway.proc.pid, signal.SIGKILL)  # no shutdown, no final checkpoint
            gateway.proc.wait(timeout=10)
        finally:
            gateway.stop()
        restarted = GatewayProcess(data_dir).start()
        try:
            with GatewayClient(restarted.url, timeout=15) as client:
                client.connect("client", "budget-checker")
                after = client.call("session.stats", {"sessionKey": "agent:main:someone-else"})["budget"]
                assert after["daily"] == before["daily"] and after["monthly"] == before["monthly"]
                client.call("config.set", {"path": "budgets.daily", "value": 42})
                with pytest.raises(RpcFailedError) as refused:
                    client.call("chat.send", {"sessionKey": "agent:main:someone-else", "message": "more"})
                assert refused.value.code == 429
                assert refused.value.message.startswith("Token budget exceeded (daily: 42/42): ")
                # room for the message, not for the system prompt: refused before the run too (the check estimates
                # what the first model call will reserve, its system prompt included)
                client.call("config.set", {"path": "budgets.daily", "value": 52})
                with pytest.raises(RpcFailedError) as refused:
                    client.call("chat.send", {"sessionKey": "agent:main:someone-else", "message": "more"})
                assert refused.value.message.startswith("Token budget exceeded (daily: 42/52): ")
                assert len(llm.requests) == 1
                assert client.call("session.stats", {"sessionKey": "main"})["budget"]["daily"]["used"] == 42
        finally:
            restarted.stop()
