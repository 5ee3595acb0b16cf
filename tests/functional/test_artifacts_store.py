"""Artifacts in the media store and install identities in the table, against moto's S3 and DynamoDB."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from orbital.store import artifacts, installs, keys


def test_an_artifact_is_stored_once_with_its_owner_and_digest(services: Any) -> None:
    data = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 40
    saved = artifacts.save(services.workspace, data, owner="user_1", mime_type="Image/PNG; q=1", filename="shot é.png")
    assert artifacts.NAME.match(saved.artifact_id)
    assert saved.artifact_id.endswith(".png")
    assert (saved.content_type, saved.size_bytes, saved.sha256) == (
        "image/png",
        len(data),
        hashlib.sha256(data).hexdigest(),
    )

    loaded = artifacts.load(services.workspace, saved.artifact_id)
    assert loaded is not None
    body, described = loaded
    assert body == data
    assert described.owner == "user_1"
    assert described.filename == "shot é.png"  # metadata is ASCII on S3; the name comes back as given
    assert described.sha256 == saved.sha256
    assert described.uploaded_at_ms == saved.uploaded_at_ms
    assert artifacts.head(services.workspace, saved.artifact_id) == described
    assert services.workspace.head(keys.media_object(saved.artifact_id)) is not None


def test_who_may_read_an_artifact(services: Any) -> None:
    saved = artifacts.save(services.workspace, b"x", owner="user_1", mime_type=None)
    assert saved.artifact_id.endswith(".bin")
    assert saved.content_type == "application/octet-stream"
    assert saved.readable_by("user_1")
    assert saved.readable_by(None)  # the gateway's own credential
    assert not saved.readable_by("user_2")
    assert not saved.readable_by(artifacts.GATEWAY_OWNER)
    mine = artifacts.save(services.workspace, b"y", owner=artifacts.GATEWAY_OWNER, mime_type="text/plain")
    assert not mine.readable_by("user_1")


def test_malformed_or_missing_ids_find_nothing(services: Any) -> None:
    for bad in ("../agents/main/SOUL.md", "x/y.png", "abc", "", "abc.PNG/..", "a" * 40 + ".png"):
        assert artifacts.load(services.workspace, bad) is None
        assert artifacts.head(services.workspace, bad) is None


def test_an_install_token_names_its_user_and_only_its_keyed_hash_is_stored(services: Any) -> None:
    gateway_token = "gw-token-0123456789abcdef"
    install, token = installs.register(
        services.table, "macos 15", now_ms=1_700_000_000_000, gateway_token=gateway_token
    )
    assert token.startswith(installs.TOKEN_PREFIX) and len(token) > 40
    assert install.user_id.startswith("user_") and install.install_id.startswith("inst_")
    assert installs.find(services.table, token, gateway_token=gateway_token) == install
    assert installs.find(services.table, token + "x", gateway_token=gateway_token) is None
    assert installs.find(services.table, "not-an-install-token", gateway_token=gateway_token) is None
    other, other_token = installs.register(services.table, "linux", now_ms=1, gateway_token=gateway_token)
    assert other.user_id != install.user_id and other_token != token
    stored = json.dumps([r.data | {"pk": r.pk, "sk": r.sk} for r in services.table.query(keys.INSTALLS_PK)])
    assert token not in stored and hashlib.sha256(token.encode()).hexdigest() not in stored


def test_a_new_gateway_token_ends_every_install_and_one_can_be_revoked(services: Any) -> None:
    first, token = installs.register(services.table, "linux", now_ms=1, gateway_token="old-token")
    second, token2 = installs.register(services.table, "linux", now_ms=2, gateway_token="old-token")
    assert installs.find(services.table, token, gateway_token="new-token") is None  # rotated: no way in
    assert [i.install_id for i in installs.listing(services.table)] == [first.install_id, second.install_id]
    assert installs.revoke(services.table, first.install_id)
    assert not installs.revoke(services.table, first.install_id)
    assert installs.find(services.table, token, gateway_token="old-token") is None
    assert installs.find(services.table, token2, gateway_token="old-token") == second
