"""Where a paired device keeps its token (`protocol/device_token.py`) and the order in which an `orbital` command
finds a token (`protocol/local_token.py`): --token-file, ORBITAL_TOKEN, the device token saved for the URL, the local
data directory's token."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from orbital.protocol import device_token, local_token

URL = "ws://127.0.0.1:8765/ws"


@pytest.fixture(autouse=True)
def config_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    monkeypatch.delenv("ORBITAL_TOKEN", raising=False)
    return home


def paired(role: str = "client", token: str = "device-secret-client-0123456789", url: str = URL) -> device_token.Paired:
    return device_token.Paired(token=token, token_id="dev_1", role=role, url=url)


def test_saved_private_in_the_config_dir(config_home: Path) -> None:
    path = device_token.save(paired(), name="laptop")
    assert path == config_home / "orbital" / "devices.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    record = json.loads(path.read_text())["gateways"][URL]["client"]
    assert record["token"] == "device-secret-client-0123456789"
    assert (record["tokenId"], record["role"], record["name"]) == ("dev_1", "client", "laptop")
    assert not [p for p in path.parent.iterdir() if p.name != "devices.json"]  # no temporary file left behind


def test_config_dir_default_is_dot_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert device_token.config_dir() == tmp_path / ".config" / "orbital"


def test_a_loose_config_dir_is_tightened(config_home: Path) -> None:
    (config_home / "orbital").mkdir(parents=True, mode=0o755)
    (config_home / "orbital").chmod(0o755)
    device_token.save(paired(), name="laptop")
    assert stat.S_IMODE((config_home / "orbital").stat().st_mode) == 0o700


def test_kept_per_url_and_kind() -> None:
    device_token.save(paired(), name="laptop")
    device_token.save(paired("node", "device-secret-node-0123456789"), name="box")
    device_token.save(paired(token="other-gateway-token-0123456789", url="wss://gw.example.com/ws"), name="laptop")
    assert device_token.find_token(URL) == "device-secret-client-0123456789"
    assert device_token.find_token(URL, ("node", "client")) == "device-secret-node-0123456789"
    assert device_token.find_token("wss://gw.example.com/ws") == "other-gateway-token-0123456789"
    assert device_token.find_token("ws://127.0.0.1:9999/ws") is None
    # the same gateway however its URL is written: case, a trailing slash, a query, a default port
    assert device_token.find_token("WS://127.0.0.1:8765/ws/?dialect=xeno") == "device-secret-client-0123456789"
    assert device_token.find_token("wss://GW.example.com:443/ws") == "other-gateway-token-0123456789"


def test_pairing_again_replaces_the_token_of_that_kind() -> None:
    device_token.save(paired(), name="laptop")
    device_token.save(paired(token="device-secret-newer-0123456789"), name="laptop")
    assert device_token.find_token(URL) == "device-secret-newer-0123456789"


def test_a_node_token_is_not_presented_by_client_commands() -> None:
    device_token.save(paired("node", "device-secret-node-0123456789"), name="box")
    assert device_token.find_token(URL) is None
    device_token.save(paired("channel", "device-secret-chan-0123456789"), name="bridge")
    assert device_token.find_token(URL, ("node", "client")) == "device-secret-node-0123456789"
    assert device_token.find(URL, "channel") is not None


def test_a_damaged_file_is_no_token(config_home: Path) -> None:
    (config_home / "orbital").mkdir(parents=True)
    (config_home / "orbital" / "devices.json").write_text("{not json")
    assert device_token.find_token(URL) is None
    device_token.save(paired(), name="laptop")  # and pairing again writes a good one
    assert device_token.find_token(URL) == "device-secret-client-0123456789"


def test_lookup_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "token").write_text("data-dir-token-0123456789\n")
    token_file = tmp_path / "given"
    token_file.write_text("file-token-0123456789\n")

    def resolve(**kw: object) -> str | None:
        return local_token.resolve_token(data_dir_arg=str(data), gateway_url=URL, **kw)  # type: ignore[arg-type]

    assert resolve() == "data-dir-token-0123456789"
    device_token.save(paired(), name="laptop")
    assert resolve() == "device-secret-client-0123456789"
    monkeypatch.setenv("ORBITAL_TOKEN", "env-token-0123456789")
    assert resolve() == "env-token-0123456789"
    assert resolve(token_file=str(token_file)) == "file-token-0123456789"


def test_a_device_token_goes_only_to_its_gateway(monkeypatch: pytest.MonkeyPatch) -> None:
    device_token.save(paired(url="wss://gw.example.com/ws"), name="laptop")
    assert local_token.resolve_token(gateway_url="wss://evil.example.com/ws") is None
    assert local_token.resolve_token(gateway_url="wss://gw.example.com/ws") == "device-secret-client-0123456789"


@pytest.mark.parametrize(
    ("url", "http_url", "expected"),
    [
        ("ws://127.0.0.1:8765/ws", None, ("ws://127.0.0.1:8765/ws", "http://127.0.0.1:8765")),
        ("wss://gw.example.com/ws", None, ("wss://gw.example.com/ws", "https://gw.example.com")),
        ("https://gw.example.com", None, ("wss://gw.example.com/ws", "https://gw.example.com")),
        (
            "wss://abc.execute-api.us-east-1.amazonaws.com/prod",
            "https://def.execute-api.us-east-1.amazonaws.com/",
            ("wss://abc.execute-api.us-east-1.amazonaws.com/prod", "https://def.execute-api.us-east-1.amazonaws.com"),
        ),
    ],
)
def test_endpoints(url: str, http_url: str | None, expected: tuple[str, str]) -> None:
    assert device_token.endpoints(url, http_url) == expected


def test_endpoints_that_cannot_be_told() -> None:
    with pytest.raises(ValueError, match="--http-url"):
        device_token.endpoints("wss://abc.execute-api.us-east-1.amazonaws.com/prod")
    with pytest.raises(ValueError, match="not a gateway URL"):
        device_token.endpoints("ftp://example.com")


def test_exchange_with_an_unreachable_gateway_says_so() -> None:
    from tests.e2e.conftest import free_port

    with pytest.raises(device_token.PairingFailedError, match=r"cannot reach http://127\.0\.0\.1"):
        device_token.exchange("ABCD2345", url=f"ws://127.0.0.1:{free_port()}/ws", name="x", timeout=5)


def test_the_xeno_bridge_presents_the_device_token_of_its_url() -> None:
    from orbital.cli.xeno_bridge import token_source

    device_token.save(paired(url="wss://gw.example.com/ws"), name="laptop")
    assert token_source(None, url="wss://gw.example.com/ws")() == "device-secret-client-0123456789"
    assert token_source(None, url="wss://other.example.com/ws")() is None


def test_devices_add_says_when_the_http_api_must_be_named(capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from orbital.cli import devices

    class Admin:
        def call(self, method: str, params: dict[str, object]) -> dict[str, object]:
            assert method == "device.pair.create"
            assert params == {"role": "client", "name": "phone"}
            return {"code": "K7QM2XWP", "expiresAt": 1_800_000_000_000}

    args = argparse.Namespace(
        role="client", name="phone", node_id=None, channel=None, account=None, direct=False, http_url=None, json=False
    )
    aws = "wss://abc.execute-api.us-east-1.amazonaws.com/prod"
    assert devices._add(Admin(), args, aws) == 0
    out = capsys.readouterr().out
    assert f"orbital login --pair K7QM2XWP --url {aws}\n" in out
    assert "add --http-url" in out
    args.http_url = "https://def.execute-api.us-east-1.amazonaws.com"
    assert devices._add(Admin(), args, aws) == 0
    out = capsys.readouterr().out
    assert f"--url {aws} --http-url https://def.execute-api.us-east-1.amazonaws.com\n" in out
    assert "add --http-url" not in out
