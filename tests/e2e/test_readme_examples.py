"""The README's copy-paste examples (the blocks marked `<!-- tests/e2e/test_readme_examples.py: NAME -->`), run as
they are written by bash from the repository's directory, against a real `orbital dev` with a token, its data
directory at `~/.orbital` of a home of their own. Only the port is changed (8765 → the test gateway's, and
`ORBITAL_URL` names it for the `orbital` commands)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from orbital.client import GatewayClient, RpcFailedError

from tests.conftest import wait_for
from tests.e2e.conftest import ROOT, GatewayProcess
from tests.support.fake_llm import FakeLLM, reply

TOKEN = "readme-token-0123456789abcdef0123"
REPLY = "Hello from the agent"
BLOCK = re.compile(r"<!-- tests/e2e/test_readme_examples\.py: (\w+) -->\n```sh\n(.*?)\n```", re.S)


def readme_blocks() -> dict[str, str]:
    return dict(BLOCK.findall((ROOT / "README.md").read_text(encoding="utf-8")))


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, GatewayProcess]]:
    root = tmp_path_factory.mktemp("readme") / "home"
    data = root / ".orbital"
    with FakeLLM() as llm:
        llm.responder = lambda request: reply(REPLY, chunks=3)
        gw = GatewayProcess(data, token=TOKEN).start()
        try:
            token_file = data / "token"
            token_file.write_text(TOKEN + "\n", encoding="utf-8")
            token_file.chmod(0o600)
            with GatewayClient(gw.url, timeout=15) as c:
                c.connect("client", token=TOKEN)
                c.call("config.set", {"path": "model", "value": {"provider": "openai", "id": "gpt-test"}})
                c.call("config.set", {"path": "providers", "value": {"openai": {"baseUrl": f"{llm.base_url}/v1"}}})
                c.call("config.set", {"path": "apiKeys.openai", "value": "sk-test"})
            yield root, gw
        finally:
            gw.stop()


def run_block(name: str, home: tuple[Path, GatewayProcess]) -> str:
    root, gw = home
    text = readme_blocks()[name].replace("127.0.0.1:8765", f"127.0.0.1:{gw.port}")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "ORBITAL_"))}
    env["HOME"] = str(root)
    env["ORBITAL_URL"] = gw.url  # `orbital` commands without --url: the test gateway, not port 8765
    done = subprocess.run(["bash", "-c", text], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"{name}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def json_values(text: str) -> list[Any]:
    """Every JSON value of `text`, written one after another (curl prints no newline after a body)."""
    decoder = json.JSONDecoder()
    values, at = [], 0
    while at < len(text):
        if text[at].isspace():
            at += 1
            continue
        value, at = decoder.raw_decode(text, at)
        values.append(value)
    return values


def test_every_marked_block_is_tested() -> None:
    assert set(readme_blocks()) == {"http", "send", "read", "gsv", "xeno", "exoclaw", "windie", "approvals"}


def test_the_recommended_approval_policy(home: tuple[Path, GatewayProcess]) -> None:
    out = json_values(run_block("approvals", home))
    assert [v.get("ok") for v in out] == [True, True]
    _, gw = home
    with GatewayClient(gw.url, timeout=15) as c:
        c.connect("client", token=TOKEN)
        rules = c.call("config.get", {"path": "toolApproval.rules"})["value"]
        owners = c.call("config.get", {"path": "owners"})["value"]
        bad = {
            "id": "x",
            "tool": "*__Bash",
            "when": [{"path": "command", "op": "regex", "value": "("}],
            "decision": "ask",
        }
        with pytest.raises(RpcFailedError) as refused:  # "refuses a rule it cannot use ... with the reason"
            c.call("config.set", {"path": "toolApproval.rules", "value": [bad]})
        assert refused.value.code == 400 and "regex" in refused.value.message
        assert c.call("config.get", {"path": "toolApproval.rules"})["value"] == rules
    assert [(r["id"], r["tool"], r["decision"]) for r in rules] == [
        ("ask-shell", "*__Bash", "ask"),
        ("ask-process", "*__Process", "ask"),
        ("ask-write", "*__Write", "ask"),
        ("ask-edit", "*__Edit", "ask"),
    ]
    assert owners == ["telegram:123456789"]


@pytest.mark.skipif(shutil.which("curl") is None, reason="the HTTP examples use curl")
def test_the_http_examples(home: tuple[Path, GatewayProcess]) -> None:
    config, sessions, written = json_values(run_block("http", home))
    assert isinstance(config["config"], dict)
    assert isinstance(sessions["sessions"], list)
    assert written == {"ok": True, "path": "userTimezone"}


@pytest.mark.skipif(shutil.which("curl") is None, reason="the HTTP examples use curl")
def test_the_http_chat_example_reads_the_reply_with_session_preview(home: tuple[Path, GatewayProcess]) -> None:
    (started,) = json_values(run_block("send", home))
    assert started["status"] == "started" and started["runId"]
    _, gw = home

    def replied() -> bool:
        with GatewayClient(gw.url, timeout=15) as c:
            c.connect("client", token=TOKEN)
            messages = c.call("session.preview", {"sessionKey": "main", "limit": 1})["messages"]
        return bool(messages) and messages[-1]["role"] == "assistant"

    wait_for(replied, timeout=30)
    (preview,) = json_values(run_block("read", home))
    user, assistant = preview["messages"]
    assert user["role"] == "user" and user["content"] == "Hello"
    assert assistant["role"] == "assistant"
    assert [b["text"] for b in assistant["content"] if b["type"] == "text"] == [REPLY]


def test_the_gsv_example(home: tuple[Path, GatewayProcess]) -> None:
    assert run_block("gsv", home).strip() == REPLY


def test_the_xeno_example(home: tuple[Path, GatewayProcess]) -> None:
    frames = [json.loads(line) for line in run_block("xeno", home).splitlines()]
    assert frames[0] == {"jsonrpc": "2.0", "id": 1, "result": {"accepted": True}}
    streams = [f["params"] for f in frames if f.get("method") == "gateway.stream"]
    assert streams == [{"requestId": "readme-1", "content": REPLY, "isPartial": False}]
    assert frames[-1] == {"jsonrpc": "2.0", "method": "gateway.done", "params": {"requestId": "readme-1"}}


def test_the_exoclaw_example(home: tuple[Path, GatewayProcess]) -> None:
    hello, *frames = run_block("exoclaw", home).splitlines()
    assert json.loads(hello)["ok"] is True
    text = "".join(re.findall(r"'event': 'text', 'data': '([^']*)'", "\n".join(frames)))
    assert text == REPLY
    assert frames[-1] == "{'id': '1', 'event': 'done'}"


def test_the_windie_example(home: tuple[Path, GatewayProcess]) -> None:
    events = run_block("windie", home).splitlines()
    assert events[0].startswith("query-accepted ")
    assert events[-1] == f'streaming-complete {{"final_response": "{REPLY}"}}'
