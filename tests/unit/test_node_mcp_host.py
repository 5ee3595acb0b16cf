"""The node's stdio MCP servers, run for real: the test server of tests/support/mcp_stdio_server.py under the SDK's
stdio client, in the node's `McpHost`."""

from __future__ import annotations

import asyncio
import base64
import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from orbital.node.mcp import McpCallError, McpHost
from orbital.node.mcp_config import StdioServer

from tests.conftest import wait_for_async

ROOT = Path(__file__).resolve().parents[2]
SERVER = str(ROOT / "tests" / "support" / "mcp_stdio_server.py")


def server(name: str = "t", **changes: Any) -> StdioServer:
    return StdioServer(name, sys.executable, (SERVER,), **changes)


def hosted(test: Callable[[McpHost], Awaitable[None]], *servers: StdioServer, workspace: Path, **options: Any) -> None:
    async def main() -> None:
        options.setdefault("backoff_base", 0.05)
        host = McpHost(list(servers), node_id="laptop", workspace=workspace, **options)
        await host.start()
        try:
            await test(host)
        finally:
            await host.stop()

    asyncio.run(main())


def test_tools_are_listed_and_called(tmp_path: Path) -> None:
    async def check(host: McpHost) -> None:
        names = [d["name"] for d in host.definitions()]
        assert {"mcp__t__echo", "mcp__t__picture", "mcp__t__weather", "mcp__t__fail"} <= set(names)
        echo = next(d for d in host.definitions() if d["name"] == "mcp__t__echo")
        assert echo["inputSchema"]["properties"]["text"]["type"] == "string"
        assert "Echo the text back." in echo["description"]
        result = await host.call("mcp__t__echo", {"text": "hi"})
        assert result["content"][0] == {"type": "text", "text": "echo: hi"}
        picture = await host.call("mcp__t__picture", {})
        image = next(b for b in picture["content"] if b.get("type") == "image")
        assert image["mimeType"] == "image/png"
        assert base64.b64decode(image["data"]).startswith(b"\x89PNG")
        weather = await host.call("mcp__t__weather", {"city": "Oslo"})
        assert weather["structuredContent"] == {"city": "Oslo", "temperature": 21, "sky": "clear"}

    hosted(check, server(), workspace=tmp_path)


def test_an_error_result_and_bad_calls_are_the_calls_errors(tmp_path: Path) -> None:
    async def check(host: McpHost) -> None:
        with pytest.raises(McpCallError, match="the disk is on fire"):
            await host.call("mcp__t__fail", {"message": "the disk is on fire"})
        with pytest.raises(McpCallError, match="Tool not found"):
            await host.call("mcp__t__nope", {})
        with pytest.raises(McpCallError, match="args must be an object"):
            await host.call("mcp__t__echo", ["hi"])
        assert not host.owns("mcp__other__echo")
        assert not host.owns("Bash")

    hosted(check, server(), workspace=tmp_path)


def test_a_slow_call_is_cut_at_the_servers_timeout_and_the_server_serves_on(tmp_path: Path) -> None:
    async def check(host: McpHost) -> None:
        with pytest.raises(McpCallError, match="did not answer 'slow' within 1000 ms"):
            await host.call("mcp__t__slow", {"seconds": 60})
        assert (await host.call("mcp__t__echo", {"text": "still here"}))["content"][0]["text"] == "echo: still here"

    hosted(check, server(timeout_ms=1000), workspace=tmp_path)


def test_env_cwd_and_the_nodes_token_is_not_passed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORBITAL_TOKEN", "node-secret")
    monkeypatch.setenv("UNRELATED_SECRET", "nope")
    (tmp_path / "sub").mkdir()

    async def check(host: McpHost) -> None:
        async def env(name: str) -> str:
            return str((await host.call("mcp__t__env", {"name": name}))["content"][0]["text"])

        assert await env("API_KEY") == "given"
        assert await env("ORBITAL_TOKEN") == "<unset>"
        assert await env("UNRELATED_SECRET") == "<unset>"
        cwd = (await host.call("mcp__t__cwd", {}))["content"][0]["text"]
        assert Path(cwd).resolve() == (tmp_path / "sub").resolve()

    hosted(check, server(env={"API_KEY": "given"}, cwd="sub"), workspace=tmp_path)


def test_a_server_that_exits_is_started_again(tmp_path: Path) -> None:
    starts = tmp_path / "starts"

    async def check(host: McpHost) -> None:
        with pytest.raises(McpCallError, match="failed to call 'crash'"):
            await host.call("mcp__t__crash", {})
        await wait_for_async(
            lambda: host.status()["t"]["starts"] >= 2 and host.status()["t"]["status"] == "ok", 30, what="a restart"
        )
        assert len(starts.read_text().splitlines()) == 2
        assert (await host.call("mcp__t__echo", {"text": "back"}))["content"][0]["text"] == "echo: back"

    hosted(check, server(env={"MCP_TEST_STARTS": str(starts)}), workspace=tmp_path)


def test_while_a_server_is_down_its_calls_say_so(tmp_path: Path) -> None:
    async def check(host: McpHost) -> None:
        with pytest.raises(McpCallError):
            await host.call("mcp__t__crash", {})
        await wait_for_async(lambda: host.status()["t"]["status"] == "restarting", 30, what="the exit noticed")
        with pytest.raises(McpCallError, match=r"MCP server t is not running \(restarting: exited\)"):
            await host.call("mcp__t__echo", {"text": "anyone?"})
        assert host.owns("mcp__t__echo")  # still announced while it is down

    hosted(check, server(), workspace=tmp_path, backoff_base=600)


def test_a_changed_tool_list_is_picked_up_and_reported(tmp_path: Path) -> None:
    changes: list[int] = []

    async def check(host: McpHost) -> None:
        before = len(changes)
        await host.call("mcp__t__grow", {"name": "fresh"})
        await wait_for_async(lambda: host.owns("mcp__t__fresh"), 30, what="the new tool")
        assert len(changes) > before
        assert (await host.call("mcp__t__fresh", {}))["content"][0]["text"] == "grown"

    hosted(check, server(), workspace=tmp_path, on_tools_changed=lambda: changes.append(1))


def test_a_server_that_cannot_start_makes_its_calls_fail_clearly(tmp_path: Path) -> None:
    async def check(host: McpHost) -> None:
        status = host.status()
        assert status["gone"]["status"] == "restarting"
        assert "command not found" in (status["gone"]["error"] or "")
        assert status["nowhere"]["error"] == f"working directory not found: {tmp_path / 'missing'}"
        assert status["dies"]["status"] in ("starting", "restarting")
        assert host.definitions() == []
        await wait_for_async(lambda: host.status()["dies"]["starts"] >= 3, 30, what="retries")

    hosted(
        check,
        StdioServer("gone", str(tmp_path / "no-such-command")),
        server("nowhere", cwd="missing"),
        server("dies", env={"MCP_TEST_EXIT_AT_START": "1"}),
        workspace=tmp_path,
    )


def test_a_server_that_never_answers_is_cut_at_the_start_timeout_and_stopped(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    hang = StdioServer(
        "mute",
        sys.executable,
        ("-c", f"import os, time; open({str(pids)!r}, 'a').write(f'{{os.getpid()}}\\n'); time.sleep(600)"),
    )

    async def check(host: McpHost) -> None:
        assert host.status()["mute"]["status"] == "restarting"
        assert host.status()["mute"]["error"] == "timed out"
        assert host.definitions() == []

    hosted(check, hang, workspace=tmp_path, start_timeout=0.5)
    for pid in pids.read_text().split():
        deadline = time.monotonic() + 10
        while _alive(int(pid)):
            assert time.monotonic() < deadline, f"server {pid} still runs after the host stopped"
            time.sleep(0.02)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as fh:  # a zombie (exited, not yet reaped by its parent) counts as gone
            return fh.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return True
