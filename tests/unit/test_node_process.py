"""Bash and Process tools with real subprocesses: foreground, workdir, timeouts, background sessions, exec events."""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from orbital.node.process import OutputBuffer, ProcessManager, resolve_shell
from orbital.node.tools import NodeToolError, NodeTools

from tests.conftest import wait_for

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX shell semantics")

DEADLINE_S = 15.0


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); check its state when /proc is there
    stat = Path(f"/proc/{pid}/stat")
    if stat.exists():
        try:
            return stat.read_text().split(")")[-1].split()[0] != "Z"
        except OSError:
            return False
    return True


class Events:
    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def __call__(self, event: dict[str, Any]) -> None:
        with self._lock:
            self.items.append(event)

    def kinds(self) -> list[str]:
        with self._lock:
            return [e["event"] for e in self.items]


@pytest.fixture(autouse=True)
def _fast_shell(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHELL", "/bin/sh")


@pytest.fixture
def events() -> Events:
    return Events()


@pytest.fixture
def tools(tmp_path: Path, events: Events) -> Iterator[NodeTools]:
    manager = ProcessManager(tmp_path, on_event=events)
    yield NodeTools(tmp_path, manager)
    manager.shutdown()


def test_echo_completes(tools: NodeTools, tmp_path: Path) -> None:
    result = tools.execute("Bash", {"command": "echo hello"})
    assert result["status"] == "completed"
    assert result["exitCode"] == 0
    assert result["signal"] is None
    assert result["timedOut"] is False
    assert "hello" in result["output"]
    assert result["tail"] == result["output"]
    assert result["truncated"] is False
    assert result["workdir"] == str(tmp_path)
    assert result["sessionId"]
    assert result["endedAt"] >= result["startedAt"]
    assert result["durationMs"] == result["endedAt"] - result["startedAt"]


def test_stderr_merged_and_failure_status(tools: NodeTools) -> None:
    result = tools.execute("Bash", {"command": "echo out; echo err 1>&2; exit 3"})
    assert result["status"] == "failed"
    assert result["exitCode"] == 3
    assert "out" in result["output"]
    assert "err" in result["output"]


def test_workdir_relative_to_workspace(tools: NodeTools, tmp_path: Path) -> None:
    (tmp_path / "sub" / "dir").mkdir(parents=True)
    result = tools.execute("Bash", {"command": "pwd", "workdir": "sub/dir"})
    assert result["output"].strip() == str((tmp_path / "sub" / "dir").resolve())
    assert result["workdir"] == str(tmp_path / "sub" / "dir")
    absolute = tools.execute("Bash", {"command": "pwd", "workdir": str(tmp_path / "sub")})
    assert absolute["output"].strip() == str((tmp_path / "sub").resolve())
    with pytest.raises(NodeToolError, match=r"^workdir does not exist: "):
        tools.execute("Bash", {"command": "pwd", "workdir": "missing"})


def test_empty_command_is_an_error(tools: NodeTools) -> None:
    with pytest.raises(NodeToolError, match=r"^command must not be empty$"):
        tools.execute("Bash", {"command": "   "})


def test_commands_do_not_see_the_gateway_token(tools: NodeTools, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORBITAL_TOKEN", "tok-secret")
    monkeypatch.setenv("ORBITAL_NODE_VISIBLE", "yes")
    result = tools.execute("Bash", {"command": 'echo "[$ORBITAL_TOKEN] [$ORBITAL_NODE_VISIBLE]"'})
    assert result["output"] == "[] [yes]\n"


def test_uses_shell_when_absolute(tools: NodeTools, monkeypatch: pytest.MonkeyPatch) -> None:
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("bash not installed")
    monkeypatch.setenv("SHELL", bash)
    assert resolve_shell() == bash
    assert tools.execute("Bash", {"command": 'echo "$BASH_VERSION"'})["output"].strip() != ""
    monkeypatch.setenv("SHELL", "bash")
    assert resolve_shell() == "/bin/sh"


def test_timeout_kills(tools: NodeTools) -> None:
    result = tools.execute("Bash", {"command": "echo started; sleep 30", "timeout": 200})
    assert result["timedOut"] is True
    assert result["status"] == "failed"
    assert result["exitCode"] is None
    assert result["signal"] in ("SIG15", "SIG9")
    assert "started" in result["output"]


def test_timeout_sigkill_when_term_is_ignored(tools: NodeTools) -> None:
    result = tools.execute("Bash", {"command": "trap '' TERM; echo ready; while :; do :; done", "timeout": 200})
    assert result["timedOut"] is True
    assert result["signal"] == "SIG9"


def test_output_cap_keeps_tail(tools: NodeTools) -> None:
    result = tools.execute("Bash", {"command": "i=0; while [ $i -lt 2500 ]; do printf '%099d\\n' $i; i=$((i+1)); done"})
    assert result["truncated"] is True
    assert len(result["output"]) == 200_000
    assert result["output"].endswith(f"{2499:099d}\n")
    assert len(result["tail"]) == 4000
    assert result["output"].endswith(result["tail"])


def test_output_buffer_cap() -> None:
    buffer = OutputBuffer(cap=10)
    buffer.append("0123456789")
    assert buffer.truncated is False
    buffer.append("abc")
    assert buffer.text() == "3456789abc"
    assert buffer.truncated is True
    assert buffer.tail(4) == "9abc"


def test_background_lifecycle(tools: NodeTools, tmp_path: Path, events: Events) -> None:
    started = tools.execute(
        "Bash", {"command": "echo first; while :; do sleep 0.05; done", "background": True}, call_id="call-1"
    )
    assert started["status"] == "running"
    assert started["pid"] > 0
    assert started["workdir"] == str(tmp_path)
    session_id = started["sessionId"]
    assert session_id

    listed = tools.execute("Process", {"action": "list"})
    assert listed["status"] == "completed"
    assert [s["sessionId"] for s in listed["sessions"]] == [session_id]
    assert session_id in listed["text"]

    poll = tools.execute("Process", {"action": "poll", "sessionId": session_id})
    assert poll["running"] is True
    assert poll["status"] == "running"

    log = wait_for(
        lambda: (r := tools.execute("Process", {"action": "log", "sessionId": session_id}))["log"] == "first" and r,
        DEADLINE_S,
        what="the first output line",
    )
    assert log["totalLines"] == 1
    assert log["status"] == "running"

    killed = tools.execute("Process", {"action": "kill", "sessionId": session_id})
    assert killed == {"status": "running", "sessionId": session_id, "message": "Kill signal sent"}
    final = wait_for(
        lambda: (r := tools.execute("Process", {"action": "poll", "sessionId": session_id}))["running"] is False and r,
        DEADLINE_S,
        what="the killed session to end",
    )
    assert final["status"] == "failed"
    assert final["signal"] == "SIG9"
    assert not pid_alive(started["pid"])

    wait_for(lambda: len(events.items) >= 2, DEADLINE_S, what="exec events")
    assert events.kinds() == ["started", "failed"]
    first, last = events.items
    assert first["callId"] == last["callId"] == "call-1"
    assert first["sessionId"] == last["sessionId"] == session_id
    assert last["signal"] == "SIG9"
    assert last["exitCode"] is None
    assert "first" in last["outputTail"]
    assert last["endedAt"] >= last["startedAt"]
    assert first["eventId"] != last["eventId"]

    after = tools.execute("Process", {"action": "kill", "sessionId": session_id})
    assert after == {"status": "failed", "error": f"Session {session_id} is not running"}


def test_background_finish_event(tools: NodeTools, events: Events) -> None:
    started = tools.execute("Bash", {"command": "read x; echo got:$x", "background": True}, call_id="call-2")
    session_id = started["sessionId"]
    written = tools.execute("Process", {"action": "submit", "sessionId": session_id, "data": "hi"})
    assert written == {"status": "running", "sessionId": session_id, "bytesWritten": 3}
    wait_for(lambda: "finished" in events.kinds(), DEADLINE_S, what="the finished event")
    finished = events.items[-1]
    assert finished["exitCode"] == 0
    assert "signal" not in finished
    assert finished["outputTail"].strip() == "got:hi"
    log = tools.execute("Process", {"action": "log", "sessionId": session_id})
    assert log["log"] == "got:hi"
    assert log["exitCode"] == 0
    assert log["status"] == "completed"


def test_background_quick_command_is_still_listed(tools: NodeTools, events: Events) -> None:
    for _ in range(5):
        started = tools.execute("Bash", {"command": "exit 4", "background": True})
        assert started["status"] == "running"
        poll = tools.execute("Process", {"action": "poll", "sessionId": started["sessionId"]})
        assert poll["status"] in ("running", "failed")
        session_id = started["sessionId"]

        def exited(sid: str = session_id) -> bool:
            return bool(tools.execute("Process", {"action": "poll", "sessionId": sid})["exitCode"] == 4)

        wait_for(exited, DEADLINE_S, what="the exit code")
    wait_for(lambda: len(events.items) == 10, DEADLINE_S, what="all exec events")
    assert events.kinds() == ["started", "failed"] * 5
    assert all("exitCode" in e and e["exitCode"] is None for e in events.items[::2])
    assert all(e["exitCode"] == 4 for e in events.items[1::2])


def test_write_without_newline(tools: NodeTools) -> None:
    started = tools.execute("Bash", {"command": "head -c 5; echo; echo done", "background": True})
    session_id = started["sessionId"]
    assert tools.execute("Process", {"action": "write", "sessionId": session_id, "data": "ab"})["bytesWritten"] == 2
    assert tools.execute("Process", {"action": "write", "sessionId": session_id, "data": "cde"})["bytesWritten"] == 3
    log = wait_for(
        lambda: (
            (r := tools.execute("Process", {"action": "log", "sessionId": session_id}))["log"].endswith("done") and r
        ),
        DEADLINE_S,
        what="the command to read its input",
    )
    assert log["log"] == "abcde\ndone"


def test_log_offset_and_limit(tools: NodeTools) -> None:
    started = tools.execute("Bash", {"command": "for i in 1 2 3 4 5 6; do echo L$i; done", "background": True})
    session_id = started["sessionId"]
    wait_for(
        lambda: tools.execute("Process", {"action": "poll", "sessionId": session_id})["running"] is False,
        DEADLINE_S,
        what="exit",
    )
    log = tools.execute("Process", {"action": "log", "sessionId": session_id, "offset": 2, "limit": 2})
    assert log["log"] == "L3\nL4"
    assert log["totalLines"] == 6
    assert log["truncated"] is True
    rest = tools.execute("Process", {"action": "log", "sessionId": session_id, "offset": 4})
    assert rest["log"] == "L5\nL6"
    assert rest["truncated"] is False


def test_background_timeout_event(tools: NodeTools, events: Events) -> None:
    tools.execute("Bash", {"command": "sleep 30", "background": True, "timeout": 100}, call_id="call-3")
    wait_for(lambda: "timed_out" in events.kinds(), DEADLINE_S, what="the timed_out event")
    assert events.kinds() == ["started", "timed_out"]
    assert events.items[-1]["callId"] == "call-3"


def test_yield_ms(tools: NodeTools, events: Events) -> None:
    quick = tools.execute("Bash", {"command": "echo quick", "yieldMs": 10_000})
    assert quick["status"] == "completed"
    assert events.items == []
    slow = tools.execute("Bash", {"command": "sleep 30", "yieldMs": 1})  # clamped up to 10 ms
    assert slow["status"] == "running"
    assert events.kinds() == ["started"]
    tools.execute("Process", {"action": "kill", "sessionId": slow["sessionId"]})
    wait_for(lambda: len(events.items) == 2, DEADLINE_S, what="the end event")


def test_process_failures_are_results(tools: NodeTools) -> None:
    assert tools.execute("Process", {"action": "poll", "sessionId": "nope"}) == {
        "status": "failed",
        "error": "No session found: nope",
    }
    assert tools.execute("Process", {"action": "poll"}) == {"status": "failed", "error": "sessionId is required"}
    assert tools.execute("Process", {"action": "dance"}) == {"status": "failed", "error": "Unknown action: dance"}
    assert tools.execute("Process", {}) == {"status": "failed", "error": "action is required"}
    assert tools.execute("Process", {"action": "list"}) == {
        "status": "completed",
        "sessions": [],
        "text": "No background sessions.",
    }


def test_shutdown_kills_background_processes(tmp_path: Path) -> None:
    manager = ProcessManager(tmp_path)
    started = manager.bash({"command": "sleep 60", "background": True})
    assert pid_alive(started["pid"])
    manager.shutdown()
    wait_for(lambda: not pid_alive(started["pid"]), DEADLINE_S, what="the background process to die")
    with pytest.raises(Exception, match="shutting down"):
        manager.bash({"command": "echo late"})
