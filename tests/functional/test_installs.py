"""WindieOS installs: listed and revoked by the gateway's owner, refused once revoked, and all ended by a new
gateway token, at the WebSocket's upgrade as on the HTTP routes."""

from __future__ import annotations

from typing import Any

from orbital.runtime import gateway
from orbital.store import installs


def _upgrade(bearer: str) -> dict[str, Any]:
    event = {
        "requestContext": {"connectionId": "c-1", "routeKey": "$connect"},
        "headers": {"Authorization": f"Bearer {bearer}"},
    }
    return gateway.handle_connect(event)


def test_the_owner_lists_and_revokes_installs(token: str, connect: Any, services: Any) -> None:
    first, first_token = installs.register(services.table, "Windows", now_ms=5, gateway_token=token)
    second, _ = installs.register(services.table, "macOS", now_ms=7, gateway_token=token)
    owner = connect("client", "owner")
    listed = owner.call("installs.list")
    assert listed["count"] == 2
    assert listed["installs"][0] == {
        "installId": first.install_id,
        "userId": first.user_id,
        "operatingSystem": "Windows",
        "createdAt": 5,
    }
    assert first_token not in repr(listed)
    assert _upgrade(first_token) == {"statusCode": 200}

    assert owner.call("installs.revoke", {"installId": first.install_id}) == {
        "revoked": True,
        "installId": first.install_id,
    }
    assert _upgrade(first_token)["statusCode"] == 401  # refused from now on
    assert [i["installId"] for i in owner.call("installs.list")["installs"]] == [second.install_id]
    assert owner.error("installs.revoke", {"installId": first.install_id})["code"] == 404
    assert owner.error("installs.revoke", {})["code"] == 400


def test_a_new_gateway_token_ends_every_install(token: str, services: Any, monkeypatch: Any) -> None:
    _, install_token = installs.register(services.table, "Linux", now_ms=1, gateway_token=token)
    assert _upgrade(install_token) == {"statusCode": 200}
    from tests.conftest import reset_caches

    monkeypatch.setenv("ORBITAL_AUTH_TOKEN", "a-new-gateway-token-0123456789")
    reset_caches()
    assert _upgrade(install_token)["statusCode"] == 401


def test_over_http_too(token: str, services: Any) -> None:
    from orbital.rest.app import create_app
    from orbital.runtime.services import use_services
    from starlette.testclient import TestClient

    install, install_token = installs.register(services.table, "Linux", now_ms=1, gateway_token=token)
    use_services(services)
    try:
        http = TestClient(create_app())
        owner = {"Authorization": f"Bearer {token}"}
        listed = http.post("/api/v1/installs.list", headers=owner).json()
        assert [i["userId"] for i in listed["installs"]] == [install.user_id]
        mine = {"Authorization": f"Bearer {install_token}"}
        assert http.get("/api/install/me", headers=mine).json()["install_id"] == install.install_id
        assert http.post("/api/v1/installs.list", headers=mine).status_code == 403  # an install is no owner
        assert (
            http.post("/api/v1/installs.revoke", headers=owner, json={"installId": install.install_id}).status_code
            == 200
        )
        assert http.get("/api/install/me", headers=mine).status_code == 401
    finally:
        use_services(None)


def test_without_a_gateway_token_an_unknown_install_is_refused_not_taken_for_the_owner(services: Any) -> None:
    """A gateway without a token lets its own machine in without a credential, but a revoked install that shows its
    old token must not pass as the owner (an ignored bearer would)."""
    from orbital.rest.app import create_app
    from orbital.runtime.services import use_services
    from starlette.testclient import TestClient

    assert not services.settings.auth_token
    install, install_token = installs.register(services.table, "Linux", now_ms=1, gateway_token="")
    assert _upgrade(install_token) == {"statusCode": 200}
    installs.revoke(services.table, install.install_id)
    assert _upgrade(install_token)["statusCode"] == 401
    use_services(services)
    try:
        http = TestClient(create_app())
        stale = {"Authorization": f"Bearer {install_token}"}
        assert http.post("/api/v1/config.get", headers=stale).status_code == 401
        assert http.post("/api/v1/config.get").status_code == 200  # the machine's owner, no credential
    finally:
        use_services(None)
