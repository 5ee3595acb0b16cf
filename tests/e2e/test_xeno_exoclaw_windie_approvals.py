"""Tool approvals answered from xeno, Exoclaw and WindieOS clients: a real `orbital dev`, a real `orbital node`, the
scripted model over loopback, and a policy that asks before any shell command (`*__Bash`).

Each of these clients runs one turn at a time and waits for its end, so a run that pauses ends its turn with the
prompt as the reply. The client's next message answers it: anything but yes/no is answered with the reminder and
changes nothing; `yes` / `no` gets the engine's response as the start of that turn's reply, and the turn then
follows the run (the node's command runs, or not) to the model's final text and the turn's usual end."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from orbital.client import GatewayClient

from tests.e2e.conftest import GatewayProcess, NodeProcess
from tests.e2e.test_exoclaw import Exo, assert_well_formed, texts
from tests.e2e.test_windie import Windie, assert_turn, deltas
from tests.e2e.test_xeno import UnixXeno, WsXeno, notifications, socket_of
from tests.support import rules
from tests.support.agent import configure_fake_model, follow_run
from tests.support.fake_llm import FakeLLM
from tests.support.windie_sdk import sdk_refusals

NODE = "n1"
RULE = {"id": "ask-shell", "tool": "*__Bash", "decision": "ask", "reason": "runs a shell command"}
PAUSED = "Run paused: tool approval required.\nTool: n1__Bash\n"
REMINDER = "Run is paused waiting for tool approval ("
REPLY_LINE = 'Reply with "yes" to approve or "no" to deny.'
APPROVED = "Approved n1__Bash. Continuing run."
DENIED = "Denied n1__Bash. Continuing run without executing it."


def command(marker: str) -> str:
    """A message the scripted model answers with a shell command on the node, then with the command's output."""
    return "TOOL:n1__Bash " + json.dumps({"command": f"echo {marker}"})


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        server.responder = rules.respond
        yield server


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM) -> Iterator[GatewayProcess]:
    root = Path(tmp_path_factory.mktemp("approvals", numbered=True))
    gateway = GatewayProcess(root / "d").start()
    node = None
    try:
        with GatewayClient(gateway.url, timeout=20) as admin:
            admin.connect("client", "approvals-admin", token=gateway.token)
            configure_fake_model(admin, llm.base_url)
            admin.call("config.set", {"path": "toolApproval.rules", "value": [RULE]})
        node = NodeProcess(gateway, NODE, root / NODE / "ws").start()
        yield gateway
    finally:
        if node is not None:
            node.stop()
        gateway.stop()


def ran(llm: FakeLLM, marker: str) -> bool:
    """Whether the model was given the output of the node's `echo {marker}` (the command ran; a denial's result
    does not name the marker)."""
    for request in llm.requests:
        for message in request.body.get("messages") or []:
            if message.get("role") == "tool" and marker in str(message.get("content")):
                return True
    return False


# --- xeno ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("transport", ["unix", "ws"])
def test_xeno_the_prompt_ends_the_query_and_the_next_query_answers_it(
    gw: GatewayProcess, llm: FakeLLM, transport: str
) -> None:
    marker = f"xeno-{transport}-{uuid.uuid4().hex[:6]}"
    client = UnixXeno(socket_of(gw.data_dir)) if transport == "unix" else WsXeno(gw.url, forced=True)
    try:
        client.query(1, "r1", command(marker))
        assert client.answer_to(1)[0]["result"] == {"accepted": True}
        first = client.until_done("r1")
        (prompt,) = [m["params"]["content"] for m in notifications(first, "gateway.stream")]
        assert prompt.startswith(PAUSED) and "Policy rule: ask-shell" in prompt and prompt.endswith(REPLY_LINE)
        assert first[-1] == {"jsonrpc": "2.0", "method": "gateway.done", "params": {"requestId": "r1"}}

        client.query(2, "r2", "is it done yet?")
        client.answer_to(2)
        second = client.until_done("r2")
        (reminder,) = [m["params"]["content"] for m in notifications(second, "gateway.stream")]
        assert reminder.startswith(REMINDER) and reminder.endswith(REPLY_LINE)
        assert not ran(llm, marker)  # still waiting: nothing ran

        client.query(3, "r3", "yes")
        client.answer_to(3)
        third = client.until_done("r3")
        mine = [m for m in third if m["params"]["requestId"] == "r3"]
        streams = [m["params"] for m in notifications(mine, "gateway.stream")]
        assert [s["isPartial"] for s in streams] == [False, False]
        assert streams[0]["content"] == APPROVED
        assert marker in streams[1]["content"]  # the model's final text: the node's output
        assert len(notifications(mine, "gateway.done")) == 1 and mine[-1]["method"] == "gateway.done"
        assert notifications(mine, "gateway.stats")
        assert ran(llm, marker)
    finally:
        client.close()


# --- Exoclaw ------------------------------------------------------------------------------------------------------


def test_exoclaw_no_denies_and_the_stream_follows_the_run(gw: GatewayProcess, llm: FakeLLM) -> None:
    marker = f"exo-{uuid.uuid4().hex[:6]}"
    params = {"channel": "cli", "account": f"acct-{uuid.uuid4().hex[:6]}", "peer": "main"}
    with Exo(gw) as exo:
        first = exo.chat("c1", {**params, "content": command(marker)})
        assert_well_formed("c1", first)
        assert [f["event"] for f in first if f["event"] == "tool_use"] == ["tool_use"]
        prompt = [f["data"] for f in first if f["event"] == "text"][-1]
        assert prompt.startswith(PAUSED) and prompt.endswith(REPLY_LINE)

        reminded = exo.chat("c2", {**params, "content": "hello?"})
        assert_well_formed("c2", reminded)
        assert texts(reminded).startswith(REMINDER)

        answered = exo.chat("c3", {**params, "content": "No"})
        assert_well_formed("c3", answered)
        said = texts(answered)
        assert said.startswith(DENIED + "\n\n")
        assert "denied by user" in said  # the model's final text: what the call answered
        results = [f["data"] for f in answered if f["event"] == "tool_result"]
        assert results and results[0]["is_error"] is True and "denied by user" in results[0]["content"]
        assert exo.quiet_after("c1", "c2", "c3") == []
    assert not ran(llm, marker)


# --- WindieOS -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sdk", ["ts", "python"])
def test_windie_the_prompt_completes_the_turn_and_yes_goes_on(gw: GatewayProcess, llm: FakeLLM, sdk: str) -> None:
    marker = f"windie-{sdk}-{uuid.uuid4().hex[:6]}"
    conv = f"conv-{uuid.uuid4().hex[:6]}"
    with Windie(gw, sdk=sdk) as client:
        first = client.query("turn-1", command(marker), conv)
        assert_turn("turn-1", conv, client.user, first)
        prompt = first[-1]["payload"]["final_response"]
        assert first[-1]["type"] == "streaming-complete"
        assert prompt.startswith(PAUSED) and prompt.endswith(REPLY_LINE)
        assert deltas(first).endswith(prompt)

        second = client.query("turn-2", "are you there?", conv)
        assert_turn("turn-2", conv, client.user, second)
        assert second[-1]["payload"]["final_response"].startswith(REMINDER)

        third = client.query("turn-3", "YES", conv)
        assert_turn("turn-3", conv, client.user, third)
        assert deltas(third).startswith(APPROVED + "\n\n")
        outputs = [e["payload"] for e in third if e["type"] == "tool-output"]
        assert outputs and outputs[0]["success"] is True and marker in outputs[0]["output"]
        assert third[-1]["type"] == "streaming-complete" and marker in third[-1]["payload"]["final_response"]
        assert sdk_refusals(client.received) == []
    assert ran(llm, marker)


def test_exoclaw_a_decision_made_elsewhere_adds_nothing_to_the_ended_stream(gw: GatewayProcess, llm: FakeLLM) -> None:
    """The paused stream ended with its `done`; an owner approving from a GSV client lets the run go on (the node
    runs the command) and the Exoclaw socket gets no second `done` for that request."""
    marker = f"exo-elsewhere-{uuid.uuid4().hex[:6]}"
    params = {"channel": "cli", "account": f"acct-{uuid.uuid4().hex[:6]}", "peer": "main"}
    with Exo(gw) as exo:
        first = exo.chat("e1", {**params, "content": command(marker)})
        assert_well_formed("e1", first)
        with GatewayClient(gw.url, timeout=20) as owner:
            owner.connect("client", f"owner-{uuid.uuid4().hex[:6]}", token=gw.token)
            mine = [a for a in owner.call("approval.list", {})["approvals"] if marker in json.dumps(a["args"])]
            (approval,) = mine
            resolved = owner.call("approval.resolve", {"approvalId": approval["approvalId"], "decision": "approve"})
            assert resolved["resolved"] is True
            ended = follow_run(owner, approval["runId"])  # the run went on to its end
            assert ended[-1]["state"] == "final"
        assert ran(llm, marker)
        assert exo.quiet_after("e1") == []
