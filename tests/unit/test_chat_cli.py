"""`orbital chat` without a gateway or a terminal: the driver fed scripted frames, the views, the helpers."""

from __future__ import annotations

import io
import json
import queue
import subprocess
import sys
import threading
from typing import Any

import pytest
from orbital.cli import chat
from orbital.cli.chat import LOST, ChatDriver, PlainView, RichView, RunResult, Sent, ToolCall, views
from orbital.protocol.local_token import redact_url


class FakeConn:
    """Stands in for `chat.ChatConnection`: a queue of frames and scripted answers per method."""

    url = "ws://user:pw@gw.example:8765/ws?token=secret-in-url"

    def __init__(self, *frames: Any, answers: dict[str, Any] | None = None) -> None:
        self.events: queue.Queue[Any] = queue.Queue()
        for frame in frames:
            self.events.put(frame)
        self.answers = answers or {}
        self.calls: list[tuple[str, Any]] = []
        self.lost: str | None = None
        self.is_lost = False

    def call(self, method: str, params: Any = None, *, timeout: float | None = None) -> Any:
        self.calls.append((method, params))
        answer = self.answers.get(method)
        if isinstance(answer, Exception):
            raise answer
        return answer(params) if callable(answer) else answer


def evt(run_id: str | None, state: str, key: str = "main", **fields: Any) -> dict[str, Any]:
    return {"type": "evt", "event": "chat", "payload": {"runId": run_id, "sessionKey": key, "state": state, **fields}}


def assistant(text: str = "", *calls: tuple[str, str, Any]) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    content += [{"type": "toolCall", "id": i, "name": n, "arguments": a} for i, n, a in calls]
    return {"role": "assistant", "content": content}


def sent(text: str = "hi", run_id: str = "r1", **result: Any) -> Sent:
    return Sent(text, "main", run_id, {"status": "started", "runId": run_id, **result})


def transcript(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"sessionKey": "main", "messages": list(messages)}


class Recorder:
    def __init__(self) -> None:
        self.log: list[tuple[Any, ...]] = []

    def started(self, sent: Sent) -> None:
        self.log.append(("started", sent.run_id))

    def text(self, piece: str) -> None:
        self.log.append(("text", piece))

    def segment(self, text: str, streamed: str, calls: list[ToolCall]) -> None:
        self.log.append(("segment", text, streamed, [c.name for c in calls]))

    def tools(self, calls: list[ToolCall]) -> None:
        self.log.append(("tools", [c.name for c in calls]))

    def stopping(self, response: str | None) -> None:
        self.log.append(("stopping", response))

    def finished(self, result: RunResult, streamed: str) -> None:
        self.log.append(("finished", result.state, streamed))


def test_send_passes_key_text_and_a_fresh_run_id_after_dropping_stale_events():
    conn = FakeConn(
        evt("old", "final", message=assistant("stale")),
        answers={"chat.send": lambda p: {"status": "started", "runId": p["runId"]}},
    )
    out = ChatDriver(conn, "agent:main:web:dm:local").send("hello")
    assert conn.events.empty()
    method, params = conn.calls[0]
    assert method == "chat.send"
    assert params["sessionKey"] == "agent:main:web:dm:local" and params["message"] == "hello"
    assert out.run_id == params["runId"] and len(out.run_id) == 36
    assert out.status == "started"


def test_follow_keeps_only_its_run_under_its_key_and_ends_on_final():
    conn = FakeConn(
        evt("other", "delta", text="not mine"),
        evt("r1", "delta", key="agent:main:main", text="wrong key"),
        {"type": "evt", "event": "presence", "payload": {"runId": "r1"}},
        evt("r1", "delta", text="Hel"),
        evt("r1", "delta", text="lo"),
        evt("r1", "final", message=assistant("Hello")),
        evt("r1", "delta", text="after the end"),
        answers={"session.preview": transcript({"role": "user", "content": "hi"}, assistant("Hello"))},
    )
    view = Recorder()
    result = ChatDriver(conn, "main").follow(sent(), view, timeout=5)
    assert result.ok and result.text == "Hello" and result.streamed == "Hello"
    assert view.log == [("started", "r1"), ("text", "Hel"), ("text", "lo"), ("finished", "final", "Hello")]
    assert conn.events.get_nowait()["payload"]["text"] == "after the end"  # left for whoever reads next


def test_tool_calls_come_from_tool_events_and_partials_once_each():
    bash = {"id": "a", "name": "laptop__Bash", "arguments": {"command": "ls"}}
    listing = {"id": "b", "name": "gsv__ListFiles", "arguments": {}}
    conn = FakeConn(
        evt("r1", "delta", text="Looking."),
        evt("r1", "partial", message=assistant("Looking.", ("a", "laptop__Bash", {"command": "ls"}))),
        evt("r1", "tool", tools=[bash]),
        evt("r1", "tool", tools=[listing]),
        evt("r1", "delta", text="Done."),
        evt("r1", "final", message=assistant("Done.")),
    )
    view = Recorder()
    result = ChatDriver(conn, "main").follow(sent("list the files"), view, timeout=5)
    assert [c.id for c in result.tool_calls] == ["a", "b"]
    assert view.log[2] == ("segment", "Looking.", "Looking.", ["laptop__Bash"])
    assert ("tools", ["gsv__ListFiles"]) in view.log
    assert view.log[-1] == ("finished", "final", "Done.")
    assert result.as_json()["toolCalls"] == [bash, listing]
    assert conn.calls == []  # no transcript reads: the events say it all


def test_an_error_event_ends_the_run():
    conn = FakeConn(
        evt("r1", "delta", text="par"),
        evt("r1", "error", error="Model request rejected by openai (400): bad"),
        answers={"session.preview": transcript()},
    )
    result = ChatDriver(conn, "main").follow(sent(), Recorder(), timeout=5)
    assert (result.state, result.cause, result.text) == ("error", "run", "par")
    assert result.as_json() == {
        "runId": "r1",
        "sessionKey": "main",
        "state": "error",
        "text": "par",
        "error": "Model request rejected by openai (400): bad",
        "toolCalls": [],
    }


def test_the_deadline_ends_a_silent_run():
    result = ChatDriver(FakeConn(), "main").follow(sent(), Recorder(), timeout=0.3)
    assert (result.state, result.cause) == ("error", "timeout")
    assert "within 0.3 s" in str(result.error)


def test_a_lost_connection_ends_the_run_and_stays_visible():
    conn = FakeConn(evt("r1", "delta", text="so far"), LOST)
    conn.lost = "the connection dropped"
    result = ChatDriver(conn, "main").follow(sent(), Recorder())
    assert (result.state, result.cause, result.text) == ("error", "disconnected", "so far")
    assert "the connection dropped" in str(result.error)
    assert "secret-in-url" not in str(result.error) and "pw" not in str(result.error)
    assert conn.events.get_nowait() is LOST  # a later wait sees it too


def test_an_interrupt_sends_stop_and_waits_for_the_gateway_to_end_the_run():
    conn = FakeConn(
        evt("r1", "error", error="Run cancelled by user"),
        answers={
            "chat.send": {"status": "command", "command": "stop", "response": "Stopped run r1."},
            "session.preview": transcript(),
        },
    )
    flag = threading.Event()
    flag.set()
    view = Recorder()
    result = ChatDriver(conn, "main").follow(sent(), view, timeout=5, interrupt=flag)
    assert conn.calls[0] == ("chat.send", {"sessionKey": "main", "message": "/stop"})
    assert ("stopping", "Stopped run r1.") in view.log
    assert result.stop_requested and result.cause == "run" and result.error == "Run cancelled by user"


def test_a_second_interrupt_stops_waiting():
    flag = threading.Event()

    def stop(_: Any) -> dict[str, Any]:
        flag.set()  # Ctrl-C again while the stop is on its way
        return {"status": "command", "command": "stop", "response": "No run in progress."}

    flag.set()
    result = ChatDriver(FakeConn(answers={"chat.send": stop}), "main").follow(
        sent(), Recorder(), timeout=5, interrupt=flag
    )
    assert (result.state, result.cause, result.stop_requested) == ("error", "stopped", True)


def _follow_plain(*frames: Any, preview: Any = None) -> tuple[str, str, RunResult]:
    out, progress = io.StringIO(), io.StringIO()
    conn = FakeConn(*frames, answers={"session.preview": preview or transcript()})
    result = ChatDriver(conn, "main").follow(sent(), PlainView(out, progress), timeout=5)
    return out.getvalue(), progress.getvalue(), result


def test_plain_view_shows_each_text_once_and_tools_on_the_progress_stream():
    out, progress, _ = _follow_plain(
        evt("r1", "delta", text="Hel"),
        evt("r1", "delta", text="lo"),
        evt("r1", "partial", message=assistant("Hello", ("a", "gsv__ListFiles", {"path": "/"}))),
        evt("r1", "final", message=assistant("Bye")),  # no deltas for it: printed whole
    )
    assert out == "Hello\nBye\n"
    assert progress == '* gsv__ListFiles {"path":"/"}\n'


def test_plain_view_prints_the_rest_or_the_whole_text_when_the_stream_diverged():
    out, _, _ = _follow_plain(evt("r1", "delta", text="Hel"), evt("r1", "final", message=assistant("Hello")))
    assert out == "Hello\n"
    out, _, _ = _follow_plain(evt("r1", "delta", text="abc"), evt("r1", "final", message=assistant("xyz")))
    assert out == "abc\nxyz\n"
    out, progress, _ = _follow_plain(evt("r1", "delta", text="abc"), evt("r1", "error", error="boom"))
    assert out == "abc\n" and progress == "Error: boom\n"


def test_rich_view_ends_with_the_reply_rendered_once():
    from rich.console import Console

    buffer = io.StringIO()
    console = Console(file=buffer, width=60, force_terminal=False, color_system=None)
    conn = FakeConn(
        evt("r1", "delta", text="Some **bold**"),
        evt("r1", "delta", text="\nline two"),
        evt("r1", "final", message=assistant("Some **bold**\nline two")),
        answers={"session.preview": transcript()},
    )
    result = ChatDriver(conn, "main").follow(sent(), RichView(console), timeout=5)
    assert result.ok
    lines = [line.rstrip() for line in buffer.getvalue().splitlines() if line.strip()]
    assert lines == ["Some bold", "line two"]


def test_rich_view_keeps_streamed_text_and_shows_the_error():
    from rich.console import Console

    buffer, errors = io.StringIO(), io.StringIO()
    console = Console(file=buffer, width=60, force_terminal=False, color_system=None)
    err_console = Console(file=errors, width=60, force_terminal=False, color_system=None)
    conn = FakeConn(evt("r1", "delta", text="half a"), evt("r1", "error", error="boom"))
    conn.answers["session.preview"] = transcript()
    ChatDriver(conn, "main").follow(sent(), RichView(console, err_console), timeout=5)
    assert buffer.getvalue().strip() == "half a"
    assert errors.getvalue().strip() == "Error: boom"


def test_keep_line_breaks_leaves_code_alone():
    text = "a\nb\n\n```\nx\ny\n```\nc"
    assert chat.keep_line_breaks(text) == "a  \nb\n\n```\nx\ny\n```\nc"
    assert chat.keep_line_breaks("one  \ntwo") == "one  \ntwo"


def test_helpers():
    assert chat.unshown("Hel", "Hello") == "lo"
    assert chat.unshown("abc", "xyz") is None
    assert redact_url("wss://u:p@example.com:443/ws?token=t#x") == "wss://example.com:443/ws"
    assert redact_url("ws://[::1]:8765/ws") == "ws://[::1]:8765/ws"
    assert views._fit("⚙ name " + "x" * 100, 20) == "⚙ name " + "x" * 12 + "…"
    assert views._fit("a\nb", 20) == "a b"
    assert ToolCall("1", "laptop__Bash", {"command": "ls -l"}).line() == 'laptop__Bash {"command":"ls -l"}'
    assert chat.text_of({"content": "plain"}) == "plain"
    assert chat.text_of(assistant("t", ("i", "n", {}))) == "t"
    final = RunResult("r", "main", "final", text="x", message={"role": "assistant"})
    assert set(final.as_json()) == {"runId", "sessionKey", "state", "text", "message", "toolCalls"}


def test_history_lives_under_orbital_home(monkeypatch, tmp_path):
    monkeypatch.setenv("ORBITAL_HOME", str(tmp_path / "h"))
    assert chat.history_path() == tmp_path / "h" / "chat_history"
    monkeypatch.delenv("ORBITAL_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert chat.history_path() == tmp_path / ".orbital" / "chat_history"


def test_the_command_is_registered_and_validates_its_options(capsys):
    from orbital.cli.main import build_parser, main

    args = build_parser().parse_args(["chat", "-m", "hi", "--json", "-s", "work", "--timeout", "5"])
    assert args.func is chat.run
    assert (args.message, args.json, args.session, args.timeout) == ("hi", True, "work", 5.0)
    assert main(["chat", "-m", "hi", "--timeout", "0"]) == 2
    assert main(["chat", "-m", "   "]) == 2
    assert main(["chat", "-m", "hi", "--session", " "]) == 2
    assert "orbital chat:" in capsys.readouterr().err


def _modules_loaded_by(code: str) -> list[str]:
    probe = f"import json, sys; {code}; print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    return list(json.loads(out.stdout))


def test_other_commands_do_not_load_the_terminal_libraries():
    loaded = _modules_loaded_by("from orbital.cli.main import build_parser; build_parser().parse_args(['call', 'x'])")
    assert not {"rich", "prompt_toolkit", "pygments", "markdown_it"} & set(loaded)
    # the chat module itself loads no socket library until it connects
    assert "websockets" not in _modules_loaded_by("import orbital.cli.chat")


@pytest.mark.parametrize("encoding,gear", [("utf-8", "⚙"), ("UTF8", "⚙"), ("ascii", "*"), (None, "*")])
def test_the_tool_mark_falls_back_to_ascii(encoding, gear):
    stream = io.TextIOWrapper(io.BytesIO(), encoding=encoding) if encoding else io.StringIO()
    assert views._gear(stream) == gear


def test_the_terminal_modes_are_changed_inside_and_restored_after_on_a_real_terminal() -> None:
    import os
    import pty
    import termios

    from orbital.cli.chat.terminal import _local_modes, line_input

    controller, terminal = pty.openpty()
    try:
        before = termios.tcgetattr(terminal)[3]
        with _local_modes(terminal, off=termios.ECHO):
            assert not termios.tcgetattr(terminal)[3] & termios.ECHO
            with line_input(terminal):  # a question asked while a reply streams: echo and whole lines again
                modes = termios.tcgetattr(terminal)[3]
                assert modes & termios.ECHO and modes & termios.ICANON
            assert not termios.tcgetattr(terminal)[3] & termios.ECHO
        assert termios.tcgetattr(terminal)[3] == before
        with _local_modes(controller + 1000, off=termios.ECHO):  # no terminal there: nothing to change, no error
            pass
    finally:
        os.close(controller)
        os.close(terminal)
