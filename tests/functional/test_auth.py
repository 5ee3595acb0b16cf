"""The gateway token is the one credential: a configured `auth.token` never outlives it, and on AWS a rotation of
the token's secret takes effect within the cache's bounded age, without a deployment."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from orbital.aws import secrets

from tests.conftest import Rpc, wait_for

GATEWAY_TOKEN = "the-gateway-token-0123456789"
_ids = itertools.count(1)


def _socket(services: Any, token: str | None) -> tuple[Rpc, dict[str, Any] | None]:
    rpc = Rpc(services, f"auth-conn-{next(_ids)}")
    params: dict[str, Any] = {"minProtocol": 1, "client": {"mode": "client", "id": f"auth-{next(_ids)}"}}
    if token is not None:
        params["auth"] = {"token": token}
    return rpc, rpc.frame("connect", params)


def _accepted(services: Any, token: str | None) -> bool:
    _, answer = _socket(services, token)
    assert answer is not None
    return bool(answer["ok"])


@pytest.fixture
def gateway_token(aws: None, monkeypatch: pytest.MonkeyPatch) -> str:
    from orbital.settings import reset_settings

    monkeypatch.setenv("ORBITAL_AUTH_TOKEN", GATEWAY_TOKEN)
    reset_settings()
    return GATEWAY_TOKEN


def test_where_a_gateway_token_exists_a_configured_auth_token_is_no_credential(gateway_token: str, services: Any):
    services.config.set_path("auth.token", "left-in-config-by-an-earlier-version")  # stored before, say
    assert not _accepted(services, "left-in-config-by-an-earlier-version")
    assert not _accepted(services, None)
    assert _accepted(services, gateway_token)
    admin, _ = _socket(services, gateway_token)
    for path, value in (("auth.token", "new-config-token"), ("auth", {"token": "new-config-token"})):
        error = admin.error("config.set", {"path": path, "value": value})
        assert error["code"] == 400 and "gateway token" in error["message"], error
    assert not _accepted(services, "new-config-token")
    admin.call("config.set", {"path": "auth.token"})  # deleting the stale one is fine
    admin.call("config.set", {"path": "auth", "value": {}})
    assert "token" not in services.config.effective()["auth"]


def test_without_a_gateway_token_gsvs_configured_token_guards_connect(services: Any) -> None:
    """A local gateway started without a token (it serves this machine alone) honours `auth.token`, as GSV does."""
    assert _accepted(services, None)
    admin, _ = _socket(services, None)
    admin.call("config.set", {"path": "auth.token", "value": "set-from-the-ui-0123"})
    assert admin.call("config.get", {"path": "auth.token"})["value"] == "***"
    assert not _accepted(services, None)
    assert not _accepted(services, "wrong")
    assert _accepted(services, "set-from-the-ui-0123")


def test_a_rotated_secret_takes_effect_without_a_deployment(aws: None, monkeypatch: pytest.MonkeyPatch) -> None:
    import boto3
    from orbital.runtime.services import build_services
    from orbital.settings import get_settings, reset_settings

    from tests.conftest import FakeSender

    sm = boto3.client("secretsmanager", region_name="us-east-1")
    arn = sm.create_secret(Name="orbital-test/gateway-token", SecretString="first-token-0123456789")["ARN"]
    monkeypatch.setenv("ORBITAL_REQUIRE_TOKEN", "true")
    monkeypatch.setenv("ORBITAL_AUTH_TOKEN_SECRET", arn)
    monkeypatch.setattr(secrets, "MAX_AGE_S", 1)
    reset_settings()
    secrets.forget()
    services = build_services(get_settings(), sender=FakeSender())
    assert _accepted(services, "first-token-0123456789")
    sm.put_secret_value(SecretId=arn, SecretString="second-token-0123456789")
    wait_for(lambda: _accepted(services, "second-token-0123456789"), timeout=10, interval=0.2)
    assert not _accepted(services, "first-token-0123456789")
    # and a configured auth.token is no way around it
    services.config.set_path("auth.token", "config-token-0123456789")
    assert not _accepted(services, "config-token-0123456789")


def test_a_secret_holding_no_token_lets_nobody_in(aws: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A token secret rotated to something that is no text (stored as binary, or blank) must not turn the gateway
    open: `connect` then answers 503 to everyone, whatever it presents (the configured `auth.token` too)."""
    import boto3
    from orbital.runtime.services import build_services
    from orbital.settings import get_settings, reset_settings

    from tests.conftest import FakeSender

    sm = boto3.client("secretsmanager", region_name="us-east-1")
    arn = sm.create_secret(Name="orbital-test/binary-token", SecretBinary=b"\x00\x01not text")["ARN"]
    monkeypatch.setenv("ORBITAL_REQUIRE_TOKEN", "true")
    monkeypatch.setenv("ORBITAL_AUTH_TOKEN_SECRET", arn)
    reset_settings()
    secrets.forget()
    services = build_services(get_settings(), sender=FakeSender())
    services.config.set_path("auth.token", "config-token-0123456789")
    for presented in (None, "", "anything", "config-token-0123456789"):
        assert not _accepted(services, presented), presented
    answer = Rpc(services, "conn-binary").frame("connect", {"minProtocol": 1, "client": {"mode": "client"}})
    assert answer is not None and answer["error"]["code"] == 503


def test_a_secret_rotated_to_a_short_token_lets_nobody_in(
    aws: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The template refuses a token under 16 characters at deployment; one put into the secret by hand afterwards
    is refused by the handlers, with a clear log line, and nobody gets in with it."""
    import logging

    import boto3
    from orbital.runtime.services import build_services
    from orbital.settings import get_settings, reset_settings

    from tests.conftest import FakeSender

    sm = boto3.client("secretsmanager", region_name="us-east-1")
    arn = sm.create_secret(Name="orbital-test/short-token", SecretString="short-token")["ARN"]
    monkeypatch.setenv("ORBITAL_REQUIRE_TOKEN", "true")
    monkeypatch.setenv("ORBITAL_AUTH_TOKEN_SECRET", arn)
    reset_settings()
    secrets.forget()
    services = build_services(get_settings(), sender=FakeSender())
    caplog.set_level(logging.ERROR)
    for presented in (None, "short-token", "anything-else-0123456789"):
        assert not _accepted(services, presented), presented
    answer = Rpc(services, "conn-short").frame(
        "connect", {"minProtocol": 1, "client": {"mode": "client"}, "auth": {"token": "short-token"}}
    )
    assert answer is not None and answer["error"]["code"] == 503
    assert any("shorter than 16 characters" in r.getMessage() for r in caplog.records)
    assert "short-token" not in caplog.text
