"""`orbital chat` against the real local gateway, with the scripted fake model server behind it.

One-shot runs go through `subprocess` (stdout is a pipe: plain text); the interactive prompt runs in a pseudo-
terminal that is the process's controlling terminal, so Ctrl-C is a real SIGINT from the line discipline.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from orbital.client import GatewayClient

from tests.conftest import wait_for
from tests.e2e.conftest import ROOT, GatewayProcess, free_port
from tests.support.fake_llm import FakeLLM, call, error, hang, reply

SLOW_TEXT = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMN"


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


def configure(gw: GatewayProcess, llm: FakeLLM) -> None:
    with GatewayClient(gw.url, timeout=15) as c:
        c.connect("client")
        c.call("config.set", {"path": "model", "value": {"provider": "openai", "id": "gpt-test"}})
        c.call("config.set", {"path": "providers", "value": {"openai": {"baseUrl": f"{llm.base_url}/v1"}}})
        c.call("config.set", {"path": "apiKeys.openai", "value": "sk-test"})


@pytest.fixture(scope="module")
def chat_gateway(gateway: GatewayProcess, llm: FakeLLM) -> GatewayProcess:
    configure(gateway, llm)
    return gateway


@pytest.fixture
def fake(llm: FakeLLM, chat_gateway: GatewayProcess) -> Iterator[FakeLLM]:
    llm.reset()
    yield llm
    llm.reset()


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "ORBITAL_"))}
    env["ORBITAL_HOME"] = str(home)
    env["ORBITAL_DATA_DIR"] = str(home / "no-gateway-here")  # never a token kept by a real gateway of this user
    env.update(extra)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def chat(
    gw: GatewayProcess | str, home: Path, *args: str, timeout: float = 60.0, token: str | None = None
) -> subprocess.CompletedProcess[str]:
    url = gw if isinstance(gw, str) else gw.url
    return subprocess.run(
        [sys.executable, "-m", "orbital.cli.main", "chat", "--url", url, *args],
        cwd=ROOT,
        env=_env(home, **({"ORBITAL_TOKEN": token} if token else {})),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def start_chat(url: str, home: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "orbital.cli.main", "chat", "--url", url, *args],
        cwd=ROOT,
        env=_env(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )


def run_in_progress(gw: GatewayProcess, session: str) -> bool:
    with GatewayClient(gw.url, timeout=15) as c:
        c.connect("client")
        status = c.call("chat.send", {"sessionKey": session, "message": "/status"})
    return "in progress" in str(status.get("response"))


def preview(gw: GatewayProcess, session: str) -> list[dict[str, Any]]:
    with GatewayClient(gw.url, timeout=15) as c:
        c.connect("client")
        return list(c.call("session.preview", {"sessionKey": session, "limit": 50})["messages"])


# --- one-shot -----------------------------------------------------------------------------------------------------


def test_one_shot_streams_the_reply_and_exits_0(fake, chat_gateway, tmp_path):
    fake.script(reply("Hello from the agent", chunks=4))
    done = chat(chat_gateway, tmp_path, "-m", "hi", "--session", "oneshot-1")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "Hello from the agent\n"
    assert done.stderr == ""
    assert fake.requests[0].stream  # the gateway streamed it, so the text came as deltas


def test_json_prints_one_object(fake, chat_gateway, tmp_path):
    fake.script(reply("Structured", chunks=2))
    done = chat(chat_gateway, tmp_path, "-m", "hi", "--json", "--session", "oneshot-json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)  # the whole of stdout is one JSON document
    assert set(out) == {"runId", "sessionKey", "state", "text", "message", "toolCalls"}
    assert out["state"] == "final"
    assert out["sessionKey"] == "oneshot-json"
    assert out["text"] == "Structured"
    assert out["message"]["role"] == "assistant"
    assert out["toolCalls"] == []
    assert re.fullmatch(r"[0-9a-f-]{36}", out["runId"])


def test_tool_calls_get_one_line_each(fake, chat_gateway, tmp_path):
    # a tool call without text (the gateway sends no `partial` for it), then one with text, then the answer
    fake.script(
        reply(tool_calls=[call("gsv__ListFiles", {})]),
        reply("Let me read it.", tool_calls=[call("gsv__ReadFile", {"path": "SOUL.md"})]),
        reply("Two files checked.", chunks=2),
    )
    done = chat(chat_gateway, tmp_path, "-m", "look around", "--session", "oneshot-tools")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "Let me read it.\nTwo files checked.\n"
    lines = done.stderr.splitlines()
    assert any(line.endswith("gsv__ListFiles {}") for line in lines), done.stderr
    assert any(line.endswith('gsv__ReadFile {"path":"SOUL.md"}') for line in lines), done.stderr
    assert len(lines) == 2

    fake.script(reply(tool_calls=[call("gsv__ListFiles", {"path": "/"})]), reply("Listed."))
    done = chat(chat_gateway, tmp_path, "-m", "again", "--json", "--session", "oneshot-tools")
    out = json.loads(done.stdout)
    assert [(c["name"], c["arguments"]) for c in out["toolCalls"]] == [("gsv__ListFiles", {"path": "/"})]
    assert out["text"] == "Listed."


def test_model_error_exits_1_with_the_message_on_stderr(fake, chat_gateway, tmp_path):
    fake.script(error(400, "bad"))
    done = chat(chat_gateway, tmp_path, "-m", "hi", "--session", "oneshot-error")
    assert done.returncode == 1
    assert done.stdout == ""
    assert "bad" in done.stderr and "400" in done.stderr

    fake.script(error(400, "bad"))
    done = chat(chat_gateway, tmp_path, "-m", "hi", "--json", "--session", "oneshot-error")
    assert done.returncode == 1
    out = json.loads(done.stdout)
    assert out["state"] == "error" and "bad" in out["error"]
    assert "message" not in out
    assert "bad" in done.stderr


def test_slash_commands_print_their_response(fake, chat_gateway, tmp_path):
    done = chat(chat_gateway, tmp_path, "-m", "/status", "--session", "oneshot-cmd")
    assert done.returncode == 0, done.stderr
    assert "Session:" in done.stdout
    assert "Model: openai/gpt-test" in done.stdout

    done = chat(chat_gateway, tmp_path, "-m", "/compact nope", "--session", "oneshot-cmd")
    assert done.returncode == 1
    assert "Usage: /compact" in done.stderr

    done = chat(chat_gateway, tmp_path, "-m", "/help", "--json", "--session", "oneshot-cmd")
    assert done.returncode == 0
    out = json.loads(done.stdout)
    assert out["status"] == "command" and out["command"] == "help" and "/new" in out["response"]
    assert fake.requests == []  # no command reached the model


def test_timeout_exits_1(fake, chat_gateway, tmp_path):
    fake.script(hang(20))
    started = time.monotonic()
    done = chat(chat_gateway, tmp_path, "-m", "hi", "--timeout", "1", "--session", "oneshot-timeout")
    assert done.returncode == 1
    assert time.monotonic() - started < 15
    assert "within 1 s" in done.stderr
    fake.release()
    wait_for(lambda: not run_in_progress(chat_gateway, "oneshot-timeout"), timeout=30)


def test_connection_failure_exits_1(tmp_path):
    done = chat(f"ws://127.0.0.1:{free_port()}/ws", tmp_path, "-m", "hi", token="s3cret-token-value")
    assert done.returncode == 1
    assert "cannot reach" in done.stderr
    assert "s3cret-token-value" not in done.stderr + done.stdout


def test_a_wrong_token_is_reported_and_never_printed(tmp_path):
    gw = GatewayProcess(tmp_path / "data", token="right-token-0123456789").start()
    try:
        done = chat(gw, tmp_path, "-m", "hi", token="wrong-token-0123456789")
    finally:
        gw.stop()
    assert done.returncode == 1
    assert "wrong-token" not in done.stderr + done.stdout
    assert "right-token" not in done.stderr + done.stdout
    assert done.stderr.startswith("orbital chat: ")


def test_a_stop_from_elsewhere_ends_the_run_with_exit_1(fake, chat_gateway, tmp_path):
    fake.script(reply(SLOW_TEXT, chunks=20, delay_per_chunk=0.2))
    proc = start_chat(chat_gateway.url, tmp_path, "-m", "slow", "-s", "stop-1")
    try:
        wait_for(lambda: run_in_progress(chat_gateway, "stop-1") and fake.requests, timeout=30)
        with GatewayClient(chat_gateway.url, timeout=15) as c:
            c.connect("client")
            stopped = c.call("chat.send", {"sessionKey": "stop-1", "message": "/stop"})
        assert stopped["response"].startswith("Stopped run")
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 1
    assert "Run cancelled by user" in err
    assert SLOW_TEXT not in out


def test_sigint_in_one_shot_stops_the_run(fake, chat_gateway, tmp_path):
    fake.script(reply(SLOW_TEXT, chunks=20, delay_per_chunk=0.2))
    proc = start_chat(chat_gateway.url, tmp_path, "-m", "slow", "-s", "sigint-1")
    try:
        wait_for(lambda: run_in_progress(chat_gateway, "sigint-1") and fake.requests, timeout=30)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        assert SLOW_TEXT not in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130
    assert "Stopped run" in err and "Run cancelled by user" in err
    assert not run_in_progress(chat_gateway, "sigint-1")


def test_a_dropped_connection_ends_with_an_error(llm, tmp_path):
    gw = GatewayProcess(tmp_path / "data").start()
    try:
        configure(gw, llm)
        llm.reset()
        llm.script(reply(SLOW_TEXT, chunks=20, delay_per_chunk=0.3))
        proc = start_chat(gw.url, tmp_path, "-m", "slow")
        try:
            wait_for(lambda: llm.requests, timeout=30)
            gw.stop()
            _, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    finally:
        gw.stop()
        llm.reset()
    assert proc.returncode == 1
    assert "lost" in err


# --- interactive, in a pseudo-terminal ----------------------------------------------------------------------------

ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][0-9A-Za-z]|\x1b[=>78DEHM]")


class Terminal:
    """A process on a pseudo-terminal (its controlling terminal): write keys, wait for text to appear."""

    def __init__(self, args: list[str], env: dict[str, str], *, rows: int = 40, cols: int = 120) -> None:
        import fcntl
        import pty
        import struct
        import termios

        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

        def controlling_tty() -> None:  # runs in the child after setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        self.proc = subprocess.Popen(
            args,
            cwd=ROOT,
            env=env,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
            preexec_fn=controlling_tty,
            close_fds=True,
        )
        os.close(slave)
        self.master = master
        self._raw = bytearray()
        self._lock = threading.Lock()
        self.mark = 0
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:
                return
            if not data:
                return
            with self._lock:
                self._raw.extend(data)
            for _ in range(data.count(b"\x1b[6n")):  # a cursor position request: answer like a terminal
                with contextlib.suppress(OSError):
                    os.write(self.master, b"\x1b[1;1R")

    def screen(self) -> str:
        with self._lock:
            raw = bytes(self._raw)
        return ANSI.sub("", raw.decode("utf-8", "replace")).replace("\r", "")

    def expect(self, pattern: str, timeout: float = 20.0) -> str:
        """Wait until `pattern` (a regex) appears after the last match; returns the text up to its end."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.screen()
            found = regex.search(text, self.mark)
            if found:
                seen = text[self.mark : found.end()]
                self.mark = found.end()
                return seen
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"{pattern!r} not seen; output after the mark:\n{self.screen()[self.mark :]}")

    def send(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    def wait(self, timeout: float = 20.0) -> int:
        return self.proc.wait(timeout=timeout)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        with contextlib.suppress(OSError):
            os.close(self.master)
        self._reader.join(timeout=5)


@pytest.fixture
def terminal(chat_gateway: GatewayProcess, tmp_path: Path) -> Iterator[Any]:
    if sys.platform == "win32":
        pytest.skip("needs a POSIX pseudo-terminal")
    opened: list[Terminal] = []

    def open_chat(session: str) -> Terminal:
        env = _env(tmp_path / "home")
        env.update(TERM="xterm-256color", COLUMNS="120", LINES="40")
        args = [sys.executable, "-m", "orbital.cli.main", "chat", "--url", chat_gateway.url, "--session", session]
        term = Terminal(args, env)
        opened.append(term)
        term.expect(r"Orbital chat")
        term.expect(rf"{re.escape(session)} │ Enter send")  # the prompt's toolbar
        return term

    yield open_chat
    for term in opened:
        term.close()


def test_interactive_streams_replies_runs_commands_and_keeps_history(fake, chat_gateway, tmp_path, terminal):
    term = terminal("pty-1")
    assert "Alt-Enter" in term.screen()

    fake.script(reply("Hello from the agent", chunks=3))
    term.send("hi there\r")
    term.expect(r"Hello from the agent")
    term.expect(r"pty-1 │")  # the prompt is back

    term.send("/status\r")
    term.expect(r"Session: pty-1 *\nMessages: 2")
    term.expect(r"pty-1 │")

    fake.script(reply("Two lines received", chunks=2))
    term.send("line one\x1b\rline two\r")  # Esc Enter: a new line; Enter: send
    term.expect(r"Two lines received")
    term.expect(r"pty-1 │")
    users = [m["content"] for m in preview(chat_gateway, "pty-1") if m["role"] == "user"]
    assert users == ["hi there", "line one\nline two"]

    term.send("\x03")  # Ctrl-C at an empty prompt: a hint, not an exit
    term.expect(r"Ctrl-C again")
    term.send("exit\r")
    assert term.wait() == 0

    history = (tmp_path / "home" / "chat_history").read_text()
    assert "+hi there" in history and "+line one\n+line two" in history and "+exit" in history


def test_interactive_ctrl_c_stops_the_reply_and_a_second_one_quits(fake, chat_gateway, terminal):
    term = terminal("pty-2")
    fake.script(reply(SLOW_TEXT, chunks=20, delay_per_chunk=0.2))
    term.send("go slow\r")
    term.expect(r"abcde")  # streaming has begun
    term.send("\x03")
    term.expect(r"Stopped run")
    term.expect(r"Run cancelled by user")
    term.expect(r"pty-2 │")  # the prompt is back
    assert SLOW_TEXT not in term.screen()
    assert not run_in_progress(chat_gateway, "pty-2")

    fake.script(reply("Still here", chunks=2))
    term.send("and now?\r")
    term.expect(r"Still here")
    term.expect(r"pty-2 │")

    term.send("\x03")
    term.expect(r"Ctrl-C again")
    term.send("\x03")
    assert term.wait() == 0


def test_interactive_reports_tool_calls_and_errors(fake, chat_gateway, terminal):
    term = terminal("pty-3")
    fake.script(reply(tool_calls=[call("gsv__ListFiles", {})]), reply("Found **8** files", chunks=2))
    term.send("list files\r")
    term.expect(r"⚙ gsv__ListFiles \{\}")
    term.expect(r"Found 8 files")  # rendered as markdown: no asterisks left
    term.expect(r"pty-3 │")

    fake.script(error(400, "bad"))
    term.send("fail please\r")
    term.expect(r"Error: .*bad")
    term.expect(r"pty-3 │")
    term.send("\x04")  # Ctrl-D
    assert term.wait() == 0


def test_interactive_chat_survives_a_gateway_restart(llm, tmp_path):
    """The gateway stops and comes back on the same port and data dir: the next message reconnects (retrying with
    backoff while it is down) and goes to the same session, as `orbital node` reconnects by itself."""
    if sys.platform == "win32":
        pytest.skip("needs a POSIX pseudo-terminal")
    gw = GatewayProcess(tmp_path / "data").start()
    term: Terminal | None = None
    try:
        configure(gw, llm)
        llm.reset()
        env = _env(tmp_path / "home")
        env.update(TERM="xterm-256color", COLUMNS="120", LINES="40")
        args = [sys.executable, "-m", "orbital.cli.main", "chat", "--url", gw.url, "--session", "restart-1"]
        term = Terminal(args, env)
        term.expect(r"restart-1 │ Enter send")
        llm.script(reply("Before the restart", chunks=2))
        term.send("first\r")
        term.expect(r"Before the restart")
        term.expect(r"restart-1 │")
        session_before = session_id(gw, "restart-1")

        port = gw.port
        gw.stop()
        term.send("second\r")
        term.expect(r"Connection lost")
        term.expect(r"next try in", timeout=30)  # the gateway is still down: it keeps trying
        term.send("\x03")  # Ctrl-C: stop trying for now, back to the prompt
        term.expect(r"stopped reconnecting")
        term.expect(r"restart-1 │")
        assert term.proc.poll() is None

        term.send("second\r")
        term.expect(r"Connection lost")
        term.expect(r"next try in", timeout=30)

        llm.script(reply("After the restart", chunks=2))
        gw.start(port=port)
        term.expect(r"Reconnected", timeout=60)
        term.expect(r"After the restart")
        term.expect(r"restart-1 │")
        assert session_id(gw, "restart-1") == session_before
        users = [m["content"] for m in preview(gw, "restart-1") if m["role"] == "user"]
        assert users == ["first", "second"]

        term.send("exit\r")
        assert term.wait() == 0
    finally:
        if term is not None:
            term.close()
        gw.stop()
        llm.reset()


def session_id(gw: GatewayProcess, session: str) -> str:
    with GatewayClient(gw.url, timeout=15) as c:
        c.connect("client")
        return str(c.call("session.get", {"sessionKey": session})["sessionId"])
