"""A token by default: a real `orbital dev` (and `make dev`) without a token draws one into its data directory,
reuses it, prints the console's address with it in the fragment, and every `orbital` command of the same user finds
it by itself; no process the gateway starts shows the token on its command line; bad start options end in one line
and create nothing."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from orbital.client import GatewayClient

from tests.e2e.conftest import ROOT, GatewayProcess, end, free_port


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "ORBITAL_"))}
    env.update(extra)
    return env


def _orbital(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orbital.cli.main", *args],
        cwd=ROOT,
        env=env if env is not None else _env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def test_without_a_token_orbital_dev_draws_one_keeps_it_private_and_reuses_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    gw = GatewayProcess(data, auth="token").start()
    try:
        token_file = data / "token"
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        assert stat.S_IMODE(data.stat().st_mode) == 0o700
        token = token_file.read_text().strip()
        assert gw.token == token and len(token) >= 43  # 32 random bytes, URL-safe base64
        with GatewayClient(gw.url, timeout=15) as c, pytest.raises(Exception, match=r"401|nauthorized"):
            c.connect("client")
        with GatewayClient(gw.url, timeout=15) as c:
            assert c.connect("client", token=token)["type"] == "hello-ok"
        # `orbital call` run by the same user finds the token in the data directory by itself
        done = _orbital("call", "config.get", '{"path":"model"}', "--url", gw.url, env=_env(ORBITAL_DATA_DIR=str(data)))
        assert done.returncode == 0, done.stderr
        assert '"path": "model"' in done.stdout
        done = _orbital("call", "config.get", "--url", gw.url, "--data-dir", str(data))
        assert done.returncode == 0, done.stderr
        # a token that is not the gateway's: refused
        other = tmp_path / "other-token"
        other.write_text("not-the-gateways-token-0123456789\n")
        done = _orbital("call", "config.get", "--url", gw.url, "--token-file", str(other), "--data-dir", str(data))
        assert done.returncode == 1 and "not-the-gateways" not in done.stderr
    finally:
        gw.stop()
    assert f"/#token={token}" in gw.output  # the console's address, signed in by its fragment
    again = GatewayProcess(data, auth="token").start()
    try:
        assert again.token == token
    finally:
        again.stop()


def test_a_local_token_is_never_sent_to_a_gateway_elsewhere(tmp_path: Path) -> None:
    from orbital.protocol import local_token

    data = tmp_path / "data"
    data.mkdir()
    (data / "token").write_text("kept-token-0123456789abcdef\n")
    saved = dict(os.environ)
    try:
        for name in ("ORBITAL_TOKEN", "ORBITAL_URL"):
            os.environ.pop(name, None)
        os.environ["ORBITAL_DATA_DIR"] = str(data)
        assert local_token.resolve_token(gateway_url="ws://127.0.0.1:8765/ws") == "kept-token-0123456789abcdef"
        assert local_token.resolve_token(gateway_url="wss://gw.example.com/ws") is None
        os.environ["ORBITAL_TOKEN"] = "from-the-environment-0123"
        assert local_token.resolve_token(gateway_url="ws://127.0.0.1:8765/ws") == "from-the-environment-0123"
        given = tmp_path / "given"
        given.write_text("from-the-file-0123456789\n")
        assert local_token.resolve_token(token_file=str(given)) == "from-the-file-0123456789"
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _descendants(pid: int) -> list[int]:
    found = [pid]
    for task in Path(f"/proc/{pid}/task").iterdir():
        children = (task / "children").read_text().split() if (task / "children").exists() else []
        for child in children:
            found += _descendants(int(child))
    return found


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


@pytest.fixture
def make_dev(tmp_path: Path) -> Iterator[Any]:
    started: list[subprocess.Popen[str]] = []

    def run(*variables: str, env: dict[str, str]) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            ["make", "--no-print-directory", "dev", *variables],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        started.append(proc)
        return proc

    yield run
    for proc in started:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            end(proc, signal.SIGINT, 30)
        if proc.stdout:
            proc.stdout.close()


def _wait_listening(data: Path, proc: subprocess.Popen[str], timeout: float = 90) -> int:
    """The port `make dev` bound (from its runtime.json)."""
    import json
    import urllib.parse

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        try:
            info = json.loads((data / "runtime.json").read_text())
            return int(urllib.parse.urlsplit(info["httpUrl"]).port or 0)
        except (OSError, ValueError):
            time.sleep(0.05)
    raise AssertionError("make dev did not start")


def _step_functions_child_started(pid: int, timeout: float = 30) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = _descendants(pid)
        if any(b"sfn_worker" in _cmdline(p) or b"sfn_child" in _cmdline(p) for p in found):
            return found
        time.sleep(0.05)
    raise AssertionError(f"no Step Functions child among {[_cmdline(p) for p in _descendants(pid)]}")


def test_make_dev_with_a_token_puts_it_on_no_command_line(tmp_path: Path, make_dev: Any) -> None:
    data = tmp_path / "data"
    token = "make-dev-token-0123456789abcdef"
    # TOKEN from the environment (a variable given to make on its own command line would be visible in make's)
    proc = make_dev("PORT=0", f"DATA_DIR={data}", env=_env(TOKEN=token))
    _wait_listening(data, proc)
    processes = _step_functions_child_started(proc.pid)
    assert len(processes) >= 3  # make, orbital dev, the Step Functions interpreter
    assert all(token.encode() not in _cmdline(p) for p in processes), [_cmdline(p) for p in processes]
    assert any(b"orbital" in _cmdline(p) and b"dev" in _cmdline(p) for p in processes)
    assert not (data / "token").exists()  # the given token is the gateway's: nothing drawn
    port = int(__import__("json").loads((data / "runtime.json").read_text())["httpUrl"].rsplit(":", 1)[1])
    with GatewayClient(f"ws://127.0.0.1:{port}/ws", timeout=15) as c:
        assert c.connect("client", token=token)["type"] == "hello-ok"


def test_make_dev_without_a_token_draws_one_and_puts_it_on_no_command_line(tmp_path: Path, make_dev: Any) -> None:
    data = tmp_path / "data"
    proc = make_dev("PORT=0", f"DATA_DIR={data}", env=_env())
    _wait_listening(data, proc)
    processes = _step_functions_child_started(proc.pid)
    token = (data / "token").read_text().strip().encode()
    assert all(token not in _cmdline(p) for p in processes)


def test_make_dev_auth_same_user_is_token_less(tmp_path: Path, make_dev: Any) -> None:
    data = tmp_path / "data"
    proc = make_dev("PORT=0", f"DATA_DIR={data}", "AUTH=same-user", env=_env())
    port = _wait_listening(data, proc)
    assert not (data / "token").exists()
    with GatewayClient(f"ws://127.0.0.1:{port}/ws", timeout=15) as c:
        assert c.connect("client")["type"] == "hello-ok"


def test_a_token_on_the_command_line_warns(tmp_path: Path) -> None:
    done = _orbital("call", "config.get", "--url", f"ws://127.0.0.1:{free_port()}/ws", "--token", "t0ken-0123456789abc")
    assert done.returncode == 1
    assert "--token VALUE is deprecated" in done.stderr and "ORBITAL_TOKEN" in done.stderr


@pytest.mark.parametrize(
    ("args", "env", "says"),
    [
        (["--port", "70000"], {}, "port 70000 is out of range"),
        (["--port", "-1"], {}, "port -1 is out of range"),
        ([], {"ORBITAL_TOKEN": "short"}, "at least 16"),
    ],
)
def test_bad_start_options_end_in_one_line_and_create_nothing(
    tmp_path: Path, args: list[str], env: dict[str, str], says: str
) -> None:
    data = tmp_path / "data"
    done = _orbital("dev", "--data-dir", str(data), "--project", str(ROOT), *args, env=_env(**env))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and "Traceback" not in done.stderr, done.stderr
    assert not data.exists()


def test_a_data_dir_that_is_a_file_ends_in_one_line(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.write_text("not a directory")
    done = _orbital("dev", "--port", "0", "--data-dir", str(data), "--project", str(ROOT))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "is a file" in lines[0], done.stderr
    assert data.read_text() == "not a directory"


def test_a_busy_port_ends_in_one_line_and_creates_nothing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        done = _orbital("dev", "--port", str(port), "--data-dir", str(data), "--project", str(ROOT))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert lines == [f"orbital dev: port {port} is in use: PORT=… (orbital dev --port …) picks another"], done.stderr
    assert not data.exists()


def test_the_help_names_the_default_data_dir_and_describes_every_call_option() -> None:
    import argparse

    from orbital.cli.main import build_parser

    dev = _orbital("dev", "--help")
    assert "~/.orbital" in dev.stdout and "--auth" in dev.stdout
    call = _orbital("call", "--help")
    assert "--token-file" in call.stdout and "--token " not in call.stdout  # the deprecated option is not offered
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    described = [a for a in sub.choices["call"]._actions if a.help != argparse.SUPPRESS]
    assert {a.dest for a in described} >= {"method", "params", "url", "token_file", "data_dir", "client_id", "timeout"}
    assert all(a.help for a in described), [a.dest for a in described if not a.help]


def test_the_first_make_dev_says_what_it_is_doing_before_it_installs(tmp_path: Path) -> None:
    # -n: what make would run for a missing environment, in order (nothing is run)
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", "-B", "dev", f"VENV={tmp_path / 'venv'}", "PORT=0"],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    said = next(i for i, line in enumerate(lines) if "installing Orbital and its dependencies" in line)
    first_pip = next(i for i, line in enumerate(lines) if "pip install" in line)
    assert said < first_pip
    assert not any("--token" in line for line in lines)
