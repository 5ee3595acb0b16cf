"""WindieOS's REST routes (dialects.md §3.6, acceptance checks 14 and 15 of §3.9) against real services on moto,
through FastAPI's TestClient, with the request shapes WindieOS's SDKs send: install registration and identity,
artifacts (owner scoping, the local bytes and AWS's presigned redirect, GSV's media route), SDK introspection,
semantic summaries and titles through the scripted model over HTTP, embeddings through a fake OpenAI-compatible
server and a fake Bedrock endpoint over HTTP, and the 503s of what this gateway does not offer."""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from fastapi import Depends
from orbital.agent import semantic
from orbital.rest import windie
from orbital.rest.auth import Caller, gateway_only
from orbital.store import artifacts, keys

from tests.conftest import GATEWAY_TOKEN, NODE_RUNTIME
from tests.support.fake_llm import FakeLLM, error, reply

ARTIFACT_ID = re.compile(r"^[0-9a-f-]+\.[a-z0-9]+$")


# --- fixtures ----------------------------------------------------------------------------------------------------


@pytest.fixture
def gateway(services: Any) -> Iterator[Any]:
    """The test's services installed for the app, served as the local gateway serves them (its root's
    capabilities)."""
    from orbital.ports.capabilities import on_own_machine
    from orbital.runtime.services import use_services

    object.__setattr__(services, "settings", services.settings.model_copy(update={"local": True}))
    object.__setattr__(services, "capabilities", on_own_machine(None))
    use_services(services)
    yield services
    use_services(None)


@pytest.fixture
def on_aws(gateway: Any) -> Any:
    """The same gateway as a deployment sees itself (the AWS root's capabilities)."""
    from orbital.ports.capabilities import ON_AWS

    object.__setattr__(gateway, "settings", gateway.settings.model_copy(update={"local": False}))
    object.__setattr__(gateway, "capabilities", ON_AWS)
    return gateway


@pytest.fixture
def with_token(gateway: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    """A gateway with a token (as every deployment has)."""
    object.__setattr__(gateway, "settings", gateway.settings.model_copy(update={"auth_token": GATEWAY_TOKEN}))
    return GATEWAY_TOKEN


@pytest.fixture
def http(gateway: Any) -> Iterator[Any]:
    from orbital.rest.app import create_app
    from starlette.testclient import TestClient

    with TestClient(create_app()) as client:
        yield client


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def register(http: Any, gateway: Any, headers: dict[str, str] | None = None) -> dict[str, Any]:
    gateway.config.set_path("windie.registration", True)
    answer = http.post("/api/install/register", json={"operating_system": "Linux"}, headers=headers or {})
    assert answer.status_code == 200, answer.text
    return answer.json()


def upload(http: Any, data: bytes, headers: dict[str, str], name: str = "shot.png", kind: str = "image/png") -> Any:
    return http.post("/api/artifacts/", files={"file": (name, data, kind)}, headers=headers)


PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4


# --- every route asks for a credential ---------------------------------------------------------------------------


def _windie_routes() -> list[tuple[str, str]]:
    from orbital.rest.app import create_app

    found = []
    for path, item in create_app().openapi()["paths"].items():
        # the routes for a caller without a credential: the pairing exchange swaps a one-time pairing code for a
        # device token (its refusals: tests/functional/test_device_tokens.py); an MCP server's login comes back to
        # the OAuth callback with its single-use state (tests/functional/test_mcp_oauth.py)
        if path.startswith("/api/") and path not in ("/api/v1/pair/exchange", "/api/mcp/oauth/callback"):
            for method in item:
                concrete = re.sub(r"\{[^}]+\}", "x", path)
                concrete = concrete.replace("/ocr/x", "/ocr/run").replace("/vision/x", "/vision/locate")
                found.append((method.upper(), concrete))
    return found


def test_every_windie_route_refuses_a_caller_without_the_token(
    with_token: str, http: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orbital.runtime.attempts import ATTEMPTS

    monkeypatch.setattr(ATTEMPTS, "limit", 1_000_000)  # wrong bearers on every route: never held back for it here
    routes = _windie_routes()
    assert len(routes) >= 20
    for method, path in routes:
        for headers in ({}, bearer("wrong"), bearer("wnd_install_forged")):
            answer = http.request(method, path, headers=headers, json={})
            assert answer.status_code == 401, (method, path, headers, answer.text)
            assert answer.json() == {"detail": "Not authenticated", "code": 401}
            assert answer.headers["www-authenticate"] == "Bearer"


# --- install identities ------------------------------------------------------------------------------------------


def test_registration_is_off_by_default(http: Any, gateway: Any) -> None:
    assert gateway.config.effective()["windie"]["registration"] is False
    answer = http.post("/api/install/register", json={"operating_system": "Windows"})
    assert answer.status_code == 403
    assert answer.json() == {"detail": windie.REGISTRATION_OFF, "code": 403}
    gateway.config.set_path("windie.registration", "yes")  # only true turns it on
    assert http.post("/api/install/register", json={"operating_system": "Windows"}).status_code == 403


def test_registration_when_configured_and_the_install_identity(http: Any, gateway: Any) -> None:
    made = register(http, gateway)
    assert made["success"] is True
    assert made["install_token"].startswith("wnd_install_")
    assert made["user_id"].startswith("user_") and made["install_id"]
    me = http.get("/api/install/me", headers=bearer(made["install_token"]))
    assert me.status_code == 200
    assert me.json() == {"success": True, "user_id": made["user_id"], "install_id": made["install_id"]}
    # the gateway's own credential is no install
    assert http.get("/api/install/me").status_code == 404
    assert http.get("/api/install/me").json() == {"detail": windie.NOT_AN_INSTALL, "code": 404}
    # only a keyed hash of the token is stored
    (item,) = gateway.table.query("INSTALLS")
    stored = json.dumps({"sk": item.sk, **item.data})
    assert made["install_token"] not in stored
    assert hashlib.sha256(made["install_token"].encode()).hexdigest() not in stored


def test_registration_needs_the_gateway_token_when_there_is_one(http: Any, gateway: Any, with_token: str) -> None:
    gateway.config.set_path("windie.registration", True)
    body = {"operating_system": "macOS"}
    assert http.post("/api/install/register", json=body).status_code == 401
    assert http.post("/api/install/register", json=body, headers=bearer("wrong")).status_code == 401
    made = register(http, gateway, bearer(with_token))
    # an install cannot register more installs
    answer = http.post("/api/install/register", json=body, headers=bearer(made["install_token"]))
    assert answer.status_code == 403
    assert (
        http.post("/api/install/register", json={"operating_system": 5}, headers=bearer(with_token)).status_code == 422
    )


def test_an_install_token_does_not_reach_gateway_only_routes(http: Any, gateway: Any, with_token: str) -> None:
    made = register(http, gateway, bearer(with_token))

    @http.app.get("/probe")
    def probe(caller: Caller = Depends(gateway_only)) -> dict[str, bool]:
        return {"gateway": caller.is_gateway}

    assert http.get("/probe", headers=bearer(made["install_token"])).status_code == 403
    assert http.get("/probe", headers=bearer(with_token)).json() == {"gateway": True}
    assert http.get("/probe").status_code == 401


# --- artifacts ---------------------------------------------------------------------------------------------------


def test_artifact_round_trip_of_a_few_megabytes(http: Any, gateway: Any, with_token: str) -> None:
    data = b"\xff\xd8\xff\xe0" + os.urandom(3 * 1024 * 1024 + 17)  # a JPEG's first bytes: its type is kept
    answer = upload(http, data, bearer(with_token), "screen.jpg", "image/jpeg")
    assert answer.status_code == 200, answer.text
    made = answer.json()
    assert ARTIFACT_ID.match(made["artifact_id"]) and made["artifact_id"].endswith(".jpg")
    assert made["size_bytes"] == len(data)
    assert made["sha256"] == hashlib.sha256(data).hexdigest()
    assert made["content_type"] == "image/jpeg"
    assert made["url"] == f"http://testserver/api/artifacts/{made['artifact_id']}"
    got = http.get(f"/api/artifacts/{made['artifact_id']}", headers=bearer(with_token))
    assert got.status_code == 200
    assert got.content == data
    assert got.headers["content-type"] == "image/jpeg"
    assert got.headers["x-content-type-options"] == "nosniff"
    # no bearer → 401 (§3.9 check 14); an upload with the gateway's token is private: no public media link
    assert http.get(f"/api/artifacts/{made['artifact_id']}").status_code == 401
    assert "public_url" not in made
    assert http.get(f"/media/{made['artifact_id']}").status_code == 404
    media = http.get(f"/media/{made['artifact_id']}", headers=bearer(with_token))
    assert media.status_code == 200 and media.content == data


def test_a_public_upload_is_media_until_its_link_expires(
    http: Any, gateway: Any, with_token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = gateway.now_ms()
    answer = http.post(
        "/api/artifacts/",
        files={"file": ("a.png", PNG, "image/png")},
        data={"public": "true"},
        headers=bearer(with_token),
    )
    assert answer.status_code == 200, answer.text
    made = answer.json()
    week = 7 * 24 * 3600 * 1000
    assert before + week <= made["expires_at"] <= gateway.now_ms() + week  # 7 days by default
    assert made["public_url"] == f"http://testserver/media/{made['artifact_id']}"
    assert http.get(f"/media/{made['artifact_id']}").content == PNG  # no credential needed
    # an older public object without an expiry of its own: its link ends its upload time plus the configured life
    old = artifacts.save(
        gateway.workspace,
        PNG,
        owner=artifacts.GATEWAY_OWNER,
        mime_type="image/png",
        now_ms=gateway.now_ms() - 2 * 24 * 3600 * 1000,
    )
    assert http.get(f"/media/{old.artifact_id}").status_code == 200
    gateway.config.set_path("media.publicLinkDays", 1)
    assert http.get(f"/media/{old.artifact_id}").status_code == 410
    assert artifacts.head(gateway.workspace, old.artifact_id) is None  # deleted
    # past its own expiry, the uploaded one is gone too
    later = made["expires_at"] + 1
    monkeypatch.setattr(gateway, "now_ms", lambda: later)
    assert http.get(f"/media/{made['artifact_id']}").status_code == 410
    # an install may not publish
    alice = register(http, gateway, bearer(with_token))["install_token"]
    refused = http.post(
        "/api/artifacts/", files={"file": ("a.png", PNG, "image/png")}, data={"public": "1"}, headers=bearer(alice)
    )
    assert refused.status_code == 403


def test_an_install_has_a_daily_upload_quota(http: Any, gateway: Any, with_token: str) -> None:
    alice = register(http, gateway, bearer(with_token))["install_token"]
    bob = register(http, gateway, bearer(with_token))["install_token"]
    gateway.config.set_path("windie.dailyUploads", 2)
    assert [upload(http, PNG, bearer(alice)).status_code for _ in range(2)] == [200, 200]
    over = upload(http, PNG, bearer(alice))
    assert over.status_code == 429 and "2 files a day" in over.json()["detail"]
    assert int(over.headers["retry-after"]) > 0
    assert upload(http, PNG, bearer(bob)).status_code == 200  # per install
    assert upload(http, PNG, bearer(with_token)).status_code == 200  # the gateway's own credential has none
    gateway.config.set_path("windie.dailyUploads", 100)
    gateway.config.set_path("windie.dailyUploadBytes", len(PNG) * 3 + 10)
    too_much = upload(http, PNG, bearer(alice))  # alice has 2 uploads: a third fits, a fourth would not
    assert too_much.status_code == 200
    refused = upload(http, PNG, bearer(alice))
    assert refused.status_code == 429 and f"{len(PNG) * 3 + 10} bytes a day" in refused.json()["detail"]
    assert upload(http, b"x", bearer(alice)).status_code == 200  # what was refused was not counted


def test_bytes_stored_as_an_image_are_served_as_one_only_when_they_are(
    http: Any, gateway: Any, with_token: str
) -> None:
    secret = b"root:$6$salted:19000:0:99999:7:::\n"
    session = "agent:main:main"
    name = "0b7e4c6a-5d1f-4e1a-9c3b-2f6d8a9e0c11.png"
    gateway.workspace.put(keys.session_media(session, name), secret, content_type="image/png")
    gateway.workspace.put(keys.session_media(session, "1b7e4c6a.png"), PNG, content_type="image/jpeg")
    assert http.get(f"/api/session-media/{session}/{name}", headers=bearer(with_token)).status_code == 404
    real = http.get(f"/api/session-media/{session}/1b7e4c6a.png", headers=bearer(with_token))
    assert real.status_code == 200 and real.headers["content-type"] == "image/png"  # what the bytes are
    # GSV's media route: an object stored as an image whose bytes are none is a download, never a picture
    fake = artifacts.save(gateway.workspace, secret, owner=artifacts.GATEWAY_OWNER, mime_type="image/png")
    served = http.get(f"/media/{fake.artifact_id}")
    assert served.status_code == 200 and served.content == secret
    assert served.headers["content-type"] == "application/octet-stream"
    assert served.headers["content-disposition"] == "attachment"
    assert served.headers["x-content-type-options"] == "nosniff"
    # and an upload declared as an image is stored as what its bytes are
    declared = upload(http, secret, bearer(with_token), "shadow.png", "image/png").json()
    assert declared["content_type"] == "application/octet-stream" and declared["artifact_id"].endswith(".bin")


def test_artifacts_are_their_owners(http: Any, gateway: Any, with_token: str) -> None:
    alice = register(http, gateway, bearer(with_token))["install_token"]
    bob = register(http, gateway, bearer(with_token))["install_token"]
    made = upload(http, PNG, bearer(alice)).json()
    path = f"/api/artifacts/{made['artifact_id']}"
    assert http.get(path, headers=bearer(alice)).content == PNG
    refused = http.get(path, headers=bearer(bob))
    assert refused.status_code == 404
    assert refused.json() == {"detail": windie.ARTIFACT_MISSING, "code": 404}
    assert http.get(path, headers=bearer(with_token)).content == PNG  # the gateway reads every one
    stored = artifacts.head(gateway.workspace, made["artifact_id"])
    assert stored is not None and stored.owner == http.get("/api/install/me", headers=bearer(alice)).json()["user_id"]
    # the gateway's own uploads are not an install's
    own = upload(http, PNG, bearer(with_token)).json()
    assert http.get(f"/api/artifacts/{own['artifact_id']}", headers=bearer(alice)).status_code == 404
    for missing in ("0000-0000.png", "not-an-id", "..%2F..%2Fconfig"):
        assert http.get(f"/api/artifacts/{missing}", headers=bearer(alice)).status_code == 404
    # nor does GSV's public media route hand an install's artifact to anyone else
    media = f"/media/{made['artifact_id']}"
    assert http.get(media).status_code == 404
    assert http.get(media, headers=bearer(bob)).status_code == 404
    assert http.get(media, headers=bearer("not-a-token")).status_code == 404
    assert http.get(media, headers=bearer(alice)).content == PNG
    assert http.get(media, headers=bearer(with_token)).content == PNG


def test_on_aws_an_artifact_is_a_redirect_to_a_presigned_url(http: Any, on_aws: Any) -> None:
    import requests

    made = upload(http, PNG, {}).json()
    answer = http.get(f"/api/artifacts/{made['artifact_id']}", follow_redirects=False)
    assert answer.status_code == 302
    location = answer.headers["location"]
    assert f"media/{made['artifact_id']}" in location and "Signature" in location
    assert answer.headers["cache-control"] == "no-store"
    fetched = requests.get(location, timeout=10)
    assert fetched.status_code == 200 and fetched.content == PNG


def test_bad_uploads_are_refused_and_store_nothing(http: Any, gateway: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    def stored() -> int:
        return len(gateway.workspace.listing("media/").keys)

    assert upload(http, b"", {}).status_code == 422
    wrong_field = http.post("/api/artifacts/", files={"image": ("a.png", PNG, "image/png")})
    assert wrong_field.status_code == 422 and "`file`" in wrong_field.json()["detail"]
    assert http.post("/api/artifacts/", json={"file": "x"}).status_code == 422
    broken = http.post(
        "/api/artifacts/", content=b"--x\r\nnonsense", headers={"Content-Type": "multipart/form-data; boundary=x"}
    )
    assert broken.status_code == 422
    two = [("file", ("a.png", PNG, "image/png")), ("file", ("b.png", PNG, "image/png"))]
    assert http.post("/api/artifacts/", files=two).status_code == 422
    no_boundary = http.post("/api/artifacts/", content=b"abc", headers={"Content-Type": "multipart/form-data"})
    assert no_boundary.status_code == 422 and "boundary" in no_boundary.json()["detail"]
    monkeypatch.setattr(artifacts, "MAX_ARTIFACT_BYTES", 1000)
    too_big = upload(http, b"x" * 1001, {})
    assert too_big.status_code == 413 and "1000 bytes" in too_big.json()["detail"]
    assert upload(http, b"x" * 1000, {}).status_code == 200
    assert stored() == 1


def test_a_body_over_the_upload_cap_is_refused_before_it_is_read(http: Any, gateway: Any) -> None:
    from orbital.rest import limits

    limit = limits.body_limit("POST", "/api/artifacts/")
    answer = http.post(
        "/api/artifacts/",
        content=b"",
        headers={"Content-Type": "multipart/form-data; boundary=x", "Content-Length": str(limit + 1)},
    )
    assert answer.status_code == 413


def test_an_upload_keeps_only_types_the_media_store_serves(http: Any, gateway: Any) -> None:
    page = upload(http, b"<script>alert(1)</script>", {}, "x.html", "text/html").json()
    assert page["content_type"] == "application/octet-stream" and page["artifact_id"].endswith(".bin")
    svg = upload(http, b"<svg onload='x()'/>", {}, "x.svg", "image/svg+xml").json()
    assert svg["content_type"] == "application/octet-stream"
    sniffed = upload(http, PNG, {}, "screenshot", "application/octet-stream").json()
    assert sniffed["content_type"] == "image/png"
    named = upload(http, b"%PDF-1.4 ...", {}, "../../etc/cv.pdf", "").json()
    assert named["content_type"] == "application/pdf"
    assert artifacts.head(gateway.workspace, named["artifact_id"]).filename == "cv.pdf"


# --- what this gateway does not offer ----------------------------------------------------------------------------


def test_runs_ocr_and_vision_answer_not_configured(http: Any, gateway: Any, with_token: str) -> None:
    auth = bearer(with_token)
    for method, path in (("POST", "/api/runs/"), ("GET", "/api/runs/run-1/events"), ("POST", "/api/runs")):
        answer = http.request(method, path, headers={**auth, "x-windie-runs-key": "k"}, json={})
        assert answer.status_code == 503 and answer.json() == {"detail": windie.RUNS_OFF, "code": 503}, path
    body = {"image": {"artifact_id": "shot.png"}, "text": "Search"}
    for op in windie.OCR_OPERATIONS:
        answer = http.post(f"/api/sdk/ocr/{op}", headers=auth, json=body)
        assert answer.status_code == 503 and answer.json() == {"detail": "OCR not configured", "code": 503}
    for op in windie.VISION_OPERATIONS:
        answer = http.post(f"/api/sdk/vision/{op}", headers=auth, json=body)
        assert answer.status_code == 503 and answer.json() == {"detail": "Vision not configured", "code": 503}
    assert http.post("/api/sdk/ocr/nope", headers=auth, json=body).status_code == 404


def test_the_transcription_socket_says_it_is_not_configured(http: Any, gateway: Any, with_token: str) -> None:
    from starlette.websockets import WebSocketDisconnect

    with pytest.raises(WebSocketDisconnect) as refused, http.websocket_connect("/ws/transcription"):
        pass
    assert refused.value.code == 1008
    with http.websocket_connect("/ws/transcription", headers=bearer(with_token)) as socket:
        assert socket.receive_json() == {"type": "error", "message": "Transcription not configured"}
        with pytest.raises(WebSocketDisconnect) as closed:
            socket.receive_text()
    assert closed.value.code == 1011
    assert closed.value.reason == "Transcription not configured"


# --- SDK introspection -------------------------------------------------------------------------------------------


def test_tool_schemas_and_capabilities(http: Any, gateway: Any, connect: Any) -> None:
    connect("node", "laptop")
    answer = http.get("/api/sdk/tool-schemas").json()
    names = [t["name"] for t in answer["canonical_tool_schemas"]]
    assert "gsv__ReadFile" in names and "laptop__Bash" in names
    read = next(t for t in answer["canonical_tool_schemas"] if t["name"] == "gsv__ReadFile")
    assert read["type"] == "function" and read["parameters"]["type"] == "object" and read["description"]
    assert answer["provider_tool_schemas"] == answer["canonical_tool_schemas"]
    assert answer["config"]["interaction_mode"] == "agent"
    chat = http.get("/api/sdk/tool-schemas", params={"interaction_mode": "chat"}).json()
    assert chat["provider_tool_schemas"] == [] and chat["config"]["interaction_mode"] == "chat"
    assert http.get("/api/sdk/tool-schemas", params={"interaction_mode": "bogus"}).status_code == 422

    bash = http.get("/api/sdk/tool-capabilities/laptop__Bash").json()
    assert bash["capability"]["execution_target"] == "node"
    assert bash["capability"]["node_id"] == "laptop" and bash["capability"]["capabilities"] == ["shell.exec"]
    assert bash["canonical_tool_schema"]["name"] == "laptop__Bash"
    assert bash["capability"]["host_role"] == "execution"
    # a node of GSV's last protocol-1 release declares no role: its capabilities make it an execution host
    late_runtime = {k: v for k, v in NODE_RUNTIME.items() if k != "hostRole"}
    connect("node", "late", nodeRuntime=late_runtime)
    late = http.get("/api/sdk/tool-capabilities/late__Bash").json()
    assert late["capability"]["host_role"] == "execution" and late["capability"]["node_id"] == "late"
    native = http.get("/api/sdk/tool-capabilities/gsv__ReadFile").json()
    assert native["capability"]["execution_target"] == "backend"
    missing = http.get("/api/sdk/tool-capabilities/nope")
    assert missing.status_code == 404 and missing.json() == {"detail": "Tool not found: nope", "code": 404}


def test_models_and_system_prompt_come_from_the_configuration(http: Any, gateway: Any) -> None:
    gateway.config.set_path("model", {"provider": "openai", "id": "gpt-test"})
    gateway.config.set_path("apiKeys.openai", "sk-models-SECRET-0123456789")
    gateway.config.set_path("systemPrompt", "You are WINDIE_PROMPT_MARK.")
    models = http.get("/api/sdk/models").json()
    assert models["config"] == {
        "model_mode": "online",
        "model_provider": "openai",
        "selected_model_id": "gpt-test",
        "interaction_mode": "agent",
    }
    assert models["models"][0]["id"] == "gpt-test" and models["models"][0]["display_name"] == "openai/gpt-test"
    assert "SECRET" not in json.dumps(models)
    overridden = http.get("/api/sdk/models", params={"model_id": "o3", "model_provider": "ollama"}).json()
    assert overridden["config"]["selected_model_id"] == "o3" and overridden["config"]["model_mode"] == "local"
    prompt = http.get("/api/sdk/system-prompt").json()
    assert prompt["system_prompt"].startswith("You are WINDIE_PROMPT_MARK.")
    assert "gsv__ReadFile" in prompt["system_prompt"] and "openai/gpt-test" in prompt["system_prompt"]
    assert prompt["config"]["selected_model_id"] == "gpt-test"
    # a user's choice (`update-settings`) is the model of that user's queries, and so of that user's previews
    gateway.table.put(
        ("WINDIESETTINGS", "u-chooser"), {"model_provider": "openai", "selected_model_id": "gpt-chosen@@variant"}
    )
    stale = http.get("/api/sdk/system-prompt", params={"user_id": "u-chooser"}).json()
    assert stale["config"]["selected_model_id"] == "gpt-test"  # a choice no provider offers (any more) is not used
    gateway.config.set_path("providers.openai.models", ["gpt-test", "gpt-chosen"])
    chosen = http.get("/api/sdk/system-prompt", params={"user_id": "u-chooser"}).json()
    assert chosen["config"]["selected_model_id"] == "gpt-chosen" and "openai/gpt-chosen" in chosen["system_prompt"]
    assert http.get("/api/sdk/models").json()["config"]["selected_model_id"] == "gpt-test"  # another user's


PREVIEW = {
    "user_query_raw": "open file",
    "include_tools": True,
    "workspace_path": "/Users/me/project",
    "messages": [
        {
            "role": "user",
            "content": "<system_context><active_window>Terminal</active_window></system_context>\n"
            "<user_query>open file</user_query>",
        }
    ],
}


def test_prompt_preview_and_query_plan(http: Any, gateway: Any, with_token: str) -> None:
    install = register(http, gateway, bearer(with_token))
    auth = bearer(install["install_token"])
    preview = http.post("/api/sdk/prompt-preview", json=PREVIEW, headers=auth)
    assert preview.status_code == 200, preview.text
    body = preview.json()
    assert set(body) >= {
        "config",
        "system_prompt",
        "prompt_messages",
        "canonical_tool_schemas",
        "provider_tool_schemas",
        "user_message_full",
        "prompt_token_count",
        "token_count_error",
    }
    assert body["prompt_messages"] == PREVIEW["messages"]
    meta = body["user_message_full"]["metadata"]
    assert meta["active_window"] == "Terminal" and meta["original_query"] == "open file"
    assert meta["injected_context"].startswith("<system_context>")
    assert isinstance(body["prompt_token_count"], int) and body["prompt_token_count"] > 100
    assert body["token_count_error"] is None

    manifest = {
        "tools": {
            "mode": "default_plus_client",
            "disabled_tools": ["gsv__ReadFile"],
            "client_manifest": {
                "version": 1,
                "tools": [
                    {"name": "read_file", "description": "Read", "execution_target": "local_runtime", "schema": {}},
                    {"name": "gsv__WriteFile", "description": "clash", "schema": {}},
                    {"name": "no_schema", "description": "x"},
                ],
            },
        }
    }
    owner = bearer(with_token)
    shaped = http.post("/api/sdk/prompt-preview", json={**PREVIEW, "agent_definition": manifest}, headers=owner).json()
    offered = [t["name"] for t in shaped["provider_tool_schemas"]]
    assert "read_file" in offered and "gsv__ReadFile" not in offered and "no_schema" not in offered
    assert offered.count("gsv__WriteFile") == 1
    assert "gsv__ReadFile" in [t["name"] for t in shaped["canonical_tool_schemas"]]
    guest = http.post("/api/sdk/prompt-preview", json={**PREVIEW, "agent_definition": manifest}, headers=auth).json()
    assert [t["name"] for t in guest["provider_tool_schemas"]] == ["read_file"]  # an install: its own tools only

    plan = http.post("/api/sdk/query-plan", json={**PREVIEW, "conversation_ref": "conv_sdk"}, headers=auth).json()
    assert plan["query_message"] == {
        "type": "query",
        "payload": {"text": "open file", "conversation_ref": "conv_sdk", "workspace_path": "/Users/me/project"},
    }
    # the events a first turn posts, as it posts them (no `user-message-full`: a query sends none)
    assert [e["type"] for e in plan["transparency_events"]] == ["system-prompt", "tool-schemas"]
    assert plan["transparency_events"][0]["payload"]["content"] == plan["system_prompt"]
    nested = plan["transparency_events"][1]["payload"]["tool_schemas"]
    assert [{"type": "function", **t["function"]} for t in nested] == plan["provider_tool_schemas"]


def test_an_installs_previews_are_restricted_as_its_socket_is(
    http: Any, gateway: Any, with_token: str, connect: Any
) -> None:
    connect("node", "laptop")
    notes = keys.workspace_object("main", "USER.md")
    gateway.workspace.put(notes, b"OWNER_PRIVATE_NOTES", content_type="text/markdown")
    install = register(http, gateway, bearer(with_token))
    auth = bearer(install["install_token"])
    schemas = http.get("/api/sdk/tool-schemas", headers=auth).json()
    assert schemas["canonical_tool_schemas"] == [] and schemas["provider_tool_schemas"] == []  # no backend tool
    prompt = http.get("/api/sdk/system-prompt", headers=auth).json()["system_prompt"]
    assert "laptop" not in prompt and "gsv__" not in prompt  # no node's tools, nor the node
    assert "OWNER_PRIVATE_NOTES" not in prompt  # nothing of the owner's workspace
    owners = http.get("/api/sdk/system-prompt", headers=bearer(with_token)).json()["system_prompt"]
    assert "laptop" in owners and "OWNER_PRIVATE_NOTES" in owners
    plan = http.post("/api/sdk/query-plan", json=PREVIEW, headers=auth).json()
    assert "OWNER_PRIVATE_NOTES" not in json.dumps(plan)
    for hidden in ("laptop__Bash", "gsv__ConfigGet", "gsv__ReadFile"):
        answer = http.get(f"/api/sdk/tool-capabilities/{hidden}", headers=auth)
        assert answer.status_code == 404, hidden  # not even that it exists
    only_mine = {"tools": {"mode": "client_only", "client_manifest": {"tools": [{"name": "note", "schema": {}}]}}}
    preview = http.post("/api/sdk/prompt-preview", json={**PREVIEW, "agent_definition": only_mine}, headers=auth)
    assert [t["name"] for t in preview.json()["provider_tool_schemas"]] == ["note"]
    # the gateway's own credential sees every tool
    everything = http.get("/api/sdk/tool-schemas", headers=bearer(with_token)).json()["provider_tool_schemas"]
    assert {"laptop__Bash", "gsv__ConfigGet"} <= {t["name"] for t in everything}


def test_an_agent_definition_a_handshake_would_refuse_is_422(http: Any, gateway: Any) -> None:
    for definition in (
        {"tools": {"mode": "everything"}},
        {"tools": {"disabled_capabilities": ["teleport"]}},
        {"version": 2},
    ):
        answer = http.post("/api/sdk/prompt-preview", json={**PREVIEW, "agent_definition": definition})
        assert answer.status_code == 422 and answer.json()["detail"].startswith("Invalid agent_definition: ")


def test_previews_of_another_user_are_refused(http: Any, gateway: Any, with_token: str) -> None:
    install = register(http, gateway, bearer(with_token))
    auth = bearer(install["install_token"])
    mine = http.post("/api/sdk/prompt-preview", json={**PREVIEW, "user_id": install["user_id"]}, headers=auth)
    assert mine.status_code == 200
    for path in ("/api/sdk/prompt-preview", "/api/sdk/query-plan"):
        answer = http.post(path, json={**PREVIEW, "user_id": "user_someone_else"}, headers=auth)
        assert answer.status_code == 403 and answer.json() == {"detail": windie.CROSS_USER, "code": 403}
    for path in ("/api/sdk/system-prompt", "/api/sdk/models", "/api/sdk/tool-schemas"):
        assert http.get(path, params={"user_id": "user_someone_else"}, headers=auth).status_code == 403
    # the gateway's credential may look at any user's
    assert (
        http.post("/api/sdk/query-plan", json={**PREVIEW, "user_id": "u2"}, headers=bearer(with_token)).status_code
        == 200
    )
    too_many = {**PREVIEW, "messages": [{"role": "user", "content": "x"}] * (windie.MAX_PREVIEW_MESSAGES + 1)}
    assert http.post("/api/sdk/prompt-preview", json=too_many, headers=auth).status_code == 422


# --- semantic summaries and titles through the configured model --------------------------------------------------


@pytest.fixture
def llm() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


@pytest.fixture
def model(gateway: Any, llm: FakeLLM) -> FakeLLM:
    gateway.config.set_path("model", {"provider": "openai", "id": "gpt-test"})
    gateway.config.set_path("providers", {"openai": {"baseUrl": f"{llm.base_url}/v1"}})
    gateway.config.set_path("apiKeys.openai", "sk-semantic-SECRET-0123456789")
    return llm


def _prompt_of(llm: FakeLLM, index: int = -1) -> str:
    messages = llm.requests[index].body["messages"]
    return "\n".join(str(m.get("content")) for m in messages if m["role"] == "user")


def test_summarize_through_the_configured_model(http: Any, model: FakeLLM) -> None:
    model.script(reply(json.dumps({"summary": "Ana plans trips.", "facts": ["Ana lives in Porto", 5, ""]})))
    body = {"conversations": ["user: I live in Porto\nassistant: nice", "user: book Lisbon"], "user_id": "user-123"}
    answer = http.post("/api/semantic/summarize", json=body)
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"summary": "Ana plans trips.", "facts": ["Ana lives in Porto"], "success": True}
    assert len(model.requests) == 1
    assert "I live in Porto" in _prompt_of(model) and "book Lisbon" in _prompt_of(model)
    assert model.requests[0].header("authorization") == "Bearer sk-semantic-SECRET-0123456789"
    assert http.get("/api/semantic/health").json() == {
        "status": "healthy",
        "message": "Semantic summarization service ready",
    }


def test_a_reply_that_is_not_json_is_the_summary(http: Any, model: FakeLLM) -> None:
    model.script(reply("The user likes tea."))
    answer = http.post("/api/semantic/summarize", json={"conversations": ["tea please"], "user_id": "u"}).json()
    assert answer == {"summary": "The user likes tea.", "facts": [], "success": True}


def test_title_through_the_configured_model(http: Any, model: FakeLLM) -> None:
    model.script(reply('Title: "Planning a trip to Lisbon."'))
    body = {"user_id": "u1", "user_message": "Help me plan Lisbon", "assistant_message": "Sure, when?"}
    answer = http.post("/api/semantic/title", json=body)
    assert answer.status_code == 200
    assert answer.json() == {"title": "Planning a trip to Lisbon", "success": True}
    assert "Help me plan Lisbon" in _prompt_of(model) and "Sure, when?" in _prompt_of(model)


def test_semantic_limits(http: Any, model: FakeLLM, gateway: Any, with_token: str) -> None:
    auth = bearer(with_token)
    big = "x" * (windie.MAX_TEXT_BYTES + 1)
    cases = [
        ("/api/semantic/summarize", {"conversations": ["a"] * 101, "user_id": "u"}),
        ("/api/semantic/summarize", {"conversations": [big], "user_id": "u"}),
        ("/api/semantic/summarize", {"conversations": ["é" * (windie.MAX_TEXT_BYTES // 2 + 1)], "user_id": "u"}),
        ("/api/semantic/summarize", {"conversations": ["a"], "user_id": "default_user"}),
        ("/api/semantic/summarize", {"conversations": ["a"]}),
        ("/api/semantic/title", {"user_message": big, "assistant_message": "a"}),
        ("/api/semantic/title", {"user_message": "a", "assistant_message": big}),
        ("/api/semantic/title", {"user_id": "default_user", "user_message": "a", "assistant_message": "a"}),
    ]
    for path, body in cases:
        assert http.post(path, json=body, headers=auth).status_code == 422, body.keys()
    install = register(http, gateway, auth)["install_token"]
    other = http.post(
        "/api/semantic/summarize", json={"conversations": ["a"], "user_id": "user_other"}, headers=bearer(install)
    )
    assert other.status_code == 403
    assert model.requests == []  # nothing refused reached the model
    at_limit = {"conversations": ["a" * windie.MAX_TEXT_BYTES] * 3, "user_id": "u"}
    model.script(reply('{"summary": "ok", "facts": []}'))
    assert http.post("/api/semantic/summarize", json=at_limit, headers=auth).status_code == 200


def test_semantic_without_a_configured_model_is_503(http: Any, gateway: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    health = http.get("/api/semantic/health")
    assert health.status_code == 503 and "not configured" in health.json()["detail"]
    answer = http.post("/api/semantic/summarize", json={"conversations": ["a"], "user_id": "u"})
    assert answer.status_code == 503 and "not configured" in answer.json()["detail"]
    title = http.post("/api/semantic/title", json={"user_message": "a", "assistant_message": "b"})
    assert title.status_code == 503 and "not configured" in title.json()["detail"]


def test_a_provider_failure_is_503_without_the_key(http: Any, model: FakeLLM) -> None:
    model.script(error(401, "Incorrect API key provided: sk-semantic-SECRET-0123456789"))
    answer = http.post("/api/semantic/title", json={"user_message": "a", "assistant_message": "b"})
    assert answer.status_code == 503
    assert "SECRET" not in answer.text and answer.json()["detail"]


# --- embeddings --------------------------------------------------------------------------------------------------


class FakeEmbeddings:
    """An OpenAI-compatible `/v1/embeddings` and a Bedrock `InvokeModel` endpoint on loopback, over real HTTP.
    `mode`: "ok", "hang" (no answer until released or 10 s), or "refuse" (401 echoing the presented key)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.mode = "ok"
        self.vector = [0.25, -0.5, 1.0, 0.0]
        self.released = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                fake.requests.append(
                    {
                        "path": self.path,
                        "headers": {k.lower(): v for k, v in self.headers.items()},
                        "body": json.loads(raw),
                    }
                )
                if fake.mode == "hang":
                    fake.released.wait(10)
                    return
                if fake.mode == "refuse":
                    key = self.headers.get("authorization", "")
                    self._send(401, {"error": {"message": f"Incorrect API key provided: {key}", "code": "bad_key"}})
                elif self.path.startswith("/model/"):
                    self._send(200, {"embedding": fake.vector, "inputTextTokenCount": 3})
                else:
                    item = {"object": "embedding", "index": 0, "embedding": fake.vector}
                    usage = {"prompt_tokens": 3, "total_tokens": 3}
                    self._send(200, {"object": "list", "data": [item], "model": "m", "usage": usage})

            def _send(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeEmbeddings:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@pytest.fixture
def embedder(gateway: Any) -> Iterator[FakeEmbeddings]:
    with FakeEmbeddings() as server:
        gateway.config.set_path("providers.embedder", {"baseUrl": f"{server.base_url}/v1"})
        gateway.config.set_path("apiKeys.embedder", "sk-embed-SECRET-abcdef0123")
        yield server


SDK_EMBEDDING = {"text": "hello world", "model_name": "default"}


def test_embeddings_not_configured_is_503(http: Any, gateway: Any, with_token: str) -> None:
    answer = http.post("/api/embeddings/", json=SDK_EMBEDDING, headers=bearer(with_token))
    assert answer.status_code == 503  # §3.9 check 15
    assert "not configured" in answer.json()["detail"]
    assert http.get("/api/embeddings/health", headers=bearer(with_token)).status_code == 503
    gateway.config.set_path("embeddings", {"provider": "openai", "model": "text-embedding-3-small"})
    os.environ.pop("OPENAI_API_KEY", None)
    missing_key = http.post("/api/embeddings/", json=SDK_EMBEDDING, headers=bearer(with_token))
    assert missing_key.status_code == 503 and "not configured" in missing_key.json()["detail"]


def test_embeddings_through_an_openai_compatible_server(http: Any, gateway: Any, embedder: FakeEmbeddings) -> None:
    gateway.config.set_path("embeddings", {"provider": "embedder", "model": "text-embedding-3-small", "dimensions": 4})
    answer = http.post("/api/embeddings/", json=SDK_EMBEDDING)
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "embedding": embedder.vector,
        "provider_id": "embedder",
        "model_id": "text-embedding-3-small",
        "model_name": "text-embedding-3-small",
        "dimension": 4,
        "embedding_space_version": "embedder:text-embedding-3-small:4",
    }
    sent = embedder.requests[0]
    assert sent["path"] == "/v1/embeddings"
    assert sent["body"]["input"] == "hello world" and sent["body"]["dimensions"] == 4
    assert sent["headers"]["authorization"] == "Bearer sk-embed-SECRET-abcdef0123"
    health = http.get("/api/embeddings/health").json()
    assert health["status"] == "healthy" and health["dimension"] == 4
    # the key is masked wherever the configuration is read
    assert gateway.config.masked()["apiKeys"]["embedder"] == "***"


def test_embedding_limits(http: Any, gateway: Any, embedder: FakeEmbeddings) -> None:
    gateway.config.set_path("embeddings", {"provider": "embedder", "model": "m"})
    for body in (
        {"text": "x" * 8193},
        {"text": ""},
        {"text": "a", "model_name": "m" * 129},
        {"model_name": "default"},
        {"text": 5},
    ):
        assert http.post("/api/embeddings/", json=body).status_code == 422, body
    assert http.post("/api/embeddings/", json={"text": "x" * 8192}).status_code == 200
    assert len(embedder.requests) == 1


def test_an_embeddings_call_that_hangs_ends_with_its_timeout(http: Any, gateway: Any, embedder: FakeEmbeddings) -> None:
    gateway.config.set_path("embeddings", {"provider": "embedder", "model": "m", "timeoutMs": 1000})
    embedder.mode = "hang"
    answer = http.post("/api/embeddings/", json=SDK_EMBEDDING)
    assert answer.status_code == 503 and "embedder" in answer.json()["detail"]


def test_a_refusing_embeddings_provider_is_503_without_the_key(
    http: Any, gateway: Any, embedder: FakeEmbeddings
) -> None:
    gateway.config.set_path("embeddings", {"provider": "embedder", "model": "m"})
    embedder.mode = "refuse"
    answer = http.post("/api/embeddings/", json=SDK_EMBEDDING)
    assert answer.status_code == 503
    assert "SECRET" not in answer.text and "401" in answer.json()["detail"]


def test_embeddings_through_bedrock_titan(http: Any, gateway: Any, embedder: FakeEmbeddings) -> None:
    gateway.config.set_path("providers.bedrock", {"baseUrl": embedder.base_url, "region": "us-east-1"})
    gateway.config.set_path("embeddings", {"provider": "bedrock", "model": "amazon.titan-embed-text-v2:0"})
    assert http.get("/api/embeddings/health").json()["dimension"] == 1024  # known before any call
    answer = http.post("/api/embeddings/", json=SDK_EMBEDDING)
    assert answer.status_code == 200, answer.text
    assert answer.json()["embedding"] == embedder.vector
    assert answer.json()["embedding_space_version"] == "bedrock:amazon.titan-embed-text-v2:0:4"
    sent = embedder.requests[-1]
    assert sent["path"] == "/model/amazon.titan-embed-text-v2%3A0/invoke"
    assert sent["body"] == {"inputText": "hello world"}
    assert sent["headers"]["authorization"].startswith("AWS4-HMAC-SHA256")


def test_conversations_beyond_the_window_are_summarized_in_turns(http: Any, model: FakeLLM, gateway: Any) -> None:
    gateway.config.set_path("providers.openai.contextWindow", 1000)  # batches of at most 8000 characters
    model.script(
        reply('{"summary": "first", "facts": ["likes tea"]}'),
        reply('{"summary": "second", "facts": ["lives in Porto"]}'),
    )
    body = {"conversations": ["a" * 5000 + " TEA", "b" * 5000 + " PORTO"], "user_id": "u"}
    answer = http.post("/api/semantic/summarize", json=body).json()
    assert answer == {"summary": "second", "facts": ["lives in Porto", "likes tea"], "success": True}
    assert len(model.requests) == 2
    assert "TEA" in _prompt_of(model, 0) and "PORTO" not in _prompt_of(model, 0)
    assert "PORTO" in _prompt_of(model, 1) and "<earlier_summary>\nfirst" in _prompt_of(model, 1)


def test_a_summary_that_would_take_too_many_calls_is_refused_before_any(
    http: Any, model: FakeLLM, gateway: Any
) -> None:
    gateway.config.set_path("providers.openai.contextWindow", 1000)  # batches of at most 8000 characters
    body = {"conversations": ["x" * 7000] * (semantic.MAX_BATCHES + 1), "user_id": "u"}
    answer = http.post("/api/semantic/summarize", json=body)
    assert answer.status_code == 504 and "fewer conversations" in answer.json()["detail"]
    assert model.requests == []


def test_on_aws_a_request_ends_within_api_gateways_time(
    http: Any, model: FakeLLM, on_aws: Any, embedder: FakeEmbeddings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """All of a request's model calls share one limit on AWS (API Gateway ends an integration at 29 s): a call
    with too little of it left is not made; an embeddings call's own longer timeout is cut to it."""
    monkeypatch.setattr(semantic, "AWS_CALL_MS", semantic.MIN_CALL_MS - 1)
    answer = http.post("/api/semantic/title", json={"user_message": "a", "assistant_message": "b"})
    assert answer.status_code == 504
    assert model.requests == []
    monkeypatch.setattr(semantic, "AWS_CALL_MS", 1000)
    on_aws.config.set_path("embeddings", {"provider": "embedder", "model": "m", "timeoutMs": 120_000})
    embedder.mode = "hang"  # answered only by the 1 s limit, not the configured 120 s
    answer = http.post("/api/embeddings/", json=SDK_EMBEDDING)
    assert answer.status_code == 503 and "embedder" in answer.json()["detail"]


def test_a_spent_token_budget_is_503(http: Any, model: FakeLLM, gateway: Any) -> None:
    gateway.config.set_path("budgets.daily", 1)
    answer = http.post("/api/semantic/title", json={"user_message": "a", "assistant_message": "b"})
    assert answer.status_code == 503 and "budget" in answer.json()["detail"].lower()
    assert model.requests == []
