"""A setting the schema refuses is a 400 over the HTTP API of a real `orbital dev`, naming the path, what was expected
and what was given, and nothing is stored; an unknown key is stored with its `warning`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.conftest import GatewayProcess

TOKEN = "config-schema-token-0123456789abcdef"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    gw = GatewayProcess(tmp_path_factory.mktemp("config-schema") / "data", token=TOKEN).start()
    yield gw
    gw.stop()


def _post(gw: GatewayProcess, method: str, body: Any) -> tuple[int, Any]:
    request = urllib.request.Request(
        f"{gw.http}/api/v1/{method}",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=15) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


@pytest.mark.parametrize(
    ("value", "expected", "got"),
    [("fast", "integer ≥ 1000", '"fast"'), (-5, "integer ≥ 1000", "-5")],
)
def test_a_wrong_timeout_over_http_is_a_400_and_nothing_is_stored(
    gateway: GatewayProcess, value: Any, expected: str, got: str
) -> None:
    status, body = _post(gateway, "config.set", {"path": "timeouts.toolMs", "value": value})
    assert status == 400, body
    assert body["detail"] == f"timeouts.toolMs: expected {expected}, got {got} (nothing was stored)"
    assert body["details"]["problems"] == [{"path": "timeouts.toolMs", "expected": expected, "got": got}]
    assert _post(gateway, "config.get", {"path": "timeouts.toolMs"}) == (
        200,
        {"path": "timeouts.toolMs", "value": 60000},
    )


def test_a_bogus_model_over_http_is_a_400_and_the_model_stays(gateway: GatewayProcess) -> None:
    status, body = _post(gateway, "config.set", {"path": "model", "value": "bogus"})
    assert status == 400 and "provider/model-id" in json.dumps(body), body
    status, body = _post(gateway, "config.get", {"path": "model"})
    assert (status, body["value"]) == (200, {"provider": "anthropic", "id": "claude-sonnet-4-20250514"})


def test_an_unknown_key_over_http_is_stored_with_a_warning(gateway: GatewayProcess) -> None:
    assert _post(gateway, "config.set", {"path": "modle", "value": "x"}) == (
        200,
        {"ok": True, "path": "modle", "warning": "unknown key `modle` — did you mean `model`?"},
    )
    assert _post(gateway, "config.get", {"path": "nothing.here"}) == (200, {"path": "nothing.here", "exists": False})


def test_orbital_call_prints_the_warning_on_stderr_and_a_refusal_with_its_path(gateway: GatewayProcess) -> None:
    env = {**os.environ, "ORBITAL_URL": gateway.url, "ORBITAL_TOKEN": TOKEN}
    command = [sys.executable, "-m", "orbital.cli.main", "call", "config.set"]
    done = subprocess.run(
        [*command, '{"path":"timeouts.toolMS","value":5000}'], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["warning"] == "unknown key `timeouts.toolMS` — did you mean `timeouts.toolMs`?"
    assert "warning: unknown key `timeouts.toolMS` — did you mean `timeouts.toolMs`?" in done.stderr
    refused = subprocess.run(
        [*command, '{"path":"timeouts.toolMs","value":"fast"}'], env=env, capture_output=True, text=True, timeout=60
    )
    assert refused.returncode == 1
    error = json.loads(refused.stderr.strip().splitlines()[-1])
    assert error["message"] == 'timeouts.toolMs: expected integer ≥ 1000, got "fast" (nothing was stored)'
