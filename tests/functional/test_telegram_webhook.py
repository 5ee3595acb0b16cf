"""Telegram end to end on moto: the REST webhook (secret check, hand-off to the inbound pipeline; 200 for what was
processed or cannot be used, 503 for a passing failure so Telegram delivers again) and the adapter's control side
(start / stop / status) against the fake Bot API.

Most tests replace the inbound pipeline (`orbital.channels.inbound.receive(services, params) -> dict`) with a
recorder: the webhook's contract with it is the params dict, checked here. The last ones run the real pipeline."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from orbital.channels import telegram
from orbital.channels.base import ChannelError, Outbound
from orbital.channels.telegram import TelegramAdapter

from tests.support import fake_telegram as ft
from tests.support.fake_telegram import TOKEN, FakeTelegram

SECRET = "wh-secret_DISTINCTIVE_0123456789abcdef"
PUBLIC = "https://gateway.example.test"
HOOK = "/channels/telegram/main/webhook"
HEADER = "X-Telegram-Bot-Api-Secret-Token"


class Inbound:
    """Stands in for orbital.channels.inbound: records what the webhook hands over, optionally fails."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self.error: Exception | None = None

    def receive(self, services: Any, params: dict[str, Any]) -> dict[str, Any]:
        assert services is not None
        self.received.append(params)
        if self.error is not None:
            raise self.error
        return {"ok": True, "status": "started", "sessionKey": "agent:main:telegram:dm:1111"}


GATEWAY_TOKEN = "gateway-token-for-webhooks-0123"


@pytest.fixture(autouse=True)
def _gateway_token(monkeypatch: pytest.MonkeyPatch) -> None:
    """A gateway that takes webhooks has a token (a webhook makes it reachable from the internet)."""
    from orbital.settings import reset_settings

    monkeypatch.setenv("ORBITAL_AUTH_TOKEN", GATEWAY_TOKEN)
    reset_settings()


@pytest.fixture
def inbound(monkeypatch: pytest.MonkeyPatch) -> Inbound:
    from orbital.channels import inbound as module

    recorder = Inbound()
    monkeypatch.setattr(module, "receive", recorder.receive)
    return recorder


@pytest.fixture
def tg() -> Iterator[FakeTelegram]:
    with FakeTelegram() as server:
        yield server


@pytest.fixture
def gateway(services: Any, tg: FakeTelegram) -> Iterator[Any]:
    """`services` installed for the REST app, Telegram pointed at the fake Bot API."""
    from orbital.runtime.services import use_services

    telegram._bot_users.clear()
    services.config.set_path("channels.telegram.apiBaseUrl", tg.base_url)
    use_services(services)
    yield services
    use_services(None)


@pytest.fixture
def account(gateway: Any) -> Any:
    gateway.config.set_path("channels.telegram.accounts.main", {"botToken": TOKEN, "webhookSecret": SECRET})
    return gateway


@pytest.fixture
def http() -> Any:
    from orbital.rest.app import create_app
    from starlette.testclient import TestClient

    with TestClient(create_app()) as client:
        yield client


def post(http: Any, update: Any, secret: str | None = SECRET, path: str = HOOK) -> Any:
    headers = {HEADER: secret} if secret is not None else {}
    body = update if isinstance(update, bytes) else json.dumps(update).encode()
    return http.post(path, content=body, headers={"Content-Type": "application/json", **headers})


def all_logged(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(f"{r.getMessage()} {r.exc_text or ''} {r.args!r}" for r in caplog.records)


# --- the webhook --------------------------------------------------------------------------------------------------


def test_webhook_refuses_a_missing_or_wrong_secret(
    account: Any, http: Any, inbound: Inbound, tg: FakeTelegram, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="orbital")
    update = ft.private_text("let me in")
    for secret in (None, "", "wrong", SECRET + "x", SECRET[:-1]):
        res = post(http, update, secret)
        assert res.status_code == 401, secret
        assert res.json() == {"ok": False, "error": "unauthorized"}
    # the right secret, but for an account that does not exist
    assert post(http, update, SECRET, "/channels/telegram/other/webhook").status_code == 401
    # an account without a secret accepts nothing, not even an empty header
    account.config.set_path("channels.telegram.accounts.nosecret", {"botToken": TOKEN})
    assert post(http, update, "", "/channels/telegram/nosecret/webhook").status_code == 401
    assert post(http, update, "anything", "/channels/telegram/nosecret/webhook").status_code == 401
    assert inbound.received == []
    assert tg.calls == []  # nothing was processed: not even getMe
    assert SECRET not in all_logged(caplog)


def test_webhook_hands_updates_to_the_inbound_pipeline(account: Any, http: Any, inbound: Inbound) -> None:
    res = post(http, ft.private_text("hello", message_id=31))
    assert res.status_code == 200 and res.json() == {"ok": True}
    (params,) = inbound.received
    assert params == {
        "channel": "telegram",
        "accountId": "main",
        "peer": {"kind": "dm", "id": "1111", "name": "Ada Lovelace", "handle": "ada"},
        "sender": {"id": "1111", "name": "Ada Lovelace", "handle": "ada"},
        "message": {"id": "1111:31", "text": "hello", "timestamp": ft.DATE * 1000},
        "wasMentioned": False,
    }
    assert post(http, ft.group_text("ping", mention="@orbital_test_bot")).status_code == 200
    assert inbound.received[-1]["peer"]["kind"] == "group"
    assert inbound.received[-1]["wasMentioned"] is True


def test_webhook_fetches_media(account: Any, http: Any, inbound: Inbound, tg: FakeTelegram) -> None:
    import base64

    tg.add_file("photo-big", b"\xff\xd8\xff-picture", file_path="photos/file_9.jpg")
    assert post(http, ft.photo("what is this?", size=13)).status_code == 200
    (params,) = inbound.received
    assert params["message"]["text"] == "what is this?"
    (image,) = params["message"]["media"]
    assert image["type"] == "image" and image["mimeType"] == "image/jpeg"
    assert base64.b64decode(image["data"]) == b"\xff\xd8\xff-picture"
    assert [c.params for c in tg.calls_to("getFile")] == [{"file_id": "photo-big"}]


def test_webhook_asks_again_only_after_a_passing_failure(
    account: Any, http: Any, inbound: Inbound, tg: FakeTelegram, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="orbital")
    inbound.error = ChannelError(f"boom with {TOKEN} and {SECRET}", code=400)
    res = post(http, ft.private_text("this fails downstream"))
    assert res.status_code == 200 and res.json() == {"ok": True}
    assert len(inbound.received) == 1
    from botocore.exceptions import ClientError
    from orbital.errors import ConflictError

    throttled = ClientError({"Error": {"Code": "ThrottlingException", "Message": "slow down"}}, "PutItem")
    for passing in (throttled, ConflictError("session changed concurrently; try again", retryable=True)):
        inbound.error = passing
        again = post(http, ft.private_text("this too"))
        assert again.status_code == 503 and again.json() == {"ok": False, "error": "try again"}
    inbound.error = RuntimeError("a bug, not worth another delivery")
    assert post(http, ft.private_text("and this")).status_code == 200
    inbound.error = None
    # not JSON, not an object, an update kind we do not take, a service message: 200, nothing handed on
    for body in (b"{not json", b"[1, 2]", {"update_id": 9, "callback_query": {"id": "x"}}):
        assert post(http, body).status_code == 200
    assert len(inbound.received) == 4
    messages = [r.getMessage() for r in caplog.records if r.name == "orbital.rest"]
    assert any("ChannelError (code 400)" in m for m in messages)
    assert any("RuntimeError" in m for m in messages)
    assert any("ClientError" in m and "asking for it again" in m for m in messages)
    assert any("JSONDecodeError" in m for m in messages)
    logged = all_logged(caplog)
    assert TOKEN not in logged and SECRET not in logged and "boom" not in logged


def test_webhook_is_served_by_the_local_gateway(account: Any, inbound: Inbound) -> None:
    """`orbital dev` mounts the same HTTP app behind its WebSocket bridge."""
    from orbital.local.bridge import Bridge
    from orbital.rest.app import create_app
    from starlette.testclient import TestClient

    bridge = Bridge(lambda *_: None, {}, rest_app=create_app())
    with TestClient(bridge.app()) as client:
        assert post(client, ft.private_text("via the bridge"), "nope").status_code == 401
        assert post(client, ft.private_text("via the bridge")).status_code == 200
    assert [p["message"]["text"] for p in inbound.received] == ["via the bridge"]


# --- start / stop / status ----------------------------------------------------------------------------------------


def test_start_generates_stores_and_registers_the_secret(
    gateway: Any, rpc: Any, http: Any, inbound: Inbound, tg: FakeTelegram
) -> None:
    gateway.config.set_path("channels.telegram.publicBaseUrl", PUBLIC + "/")
    gateway.config.set_path("channels.telegram.accounts.main.botToken", TOKEN)
    result = TelegramAdapter().start(gateway, "main", {})
    assert result.ok
    assert result.data == {
        "accountId": "main",
        "mode": "webhook",
        "webhookUrl": PUBLIC + HOOK,
        "botUser": {"id": ft.BOT["id"], "username": "orbital_test_bot"},
    }
    stored = gateway.config.effective()["channels"]["telegram"]["accounts"]["main"]["webhookSecret"]
    assert isinstance(stored, str) and len(stored) >= 40
    (call,) = tg.calls_to("setWebhook")
    assert call.params == {
        "url": PUBLIC + HOOK,
        "secret_token": stored,
        "allowed_updates": ["message", "edited_message", "channel_post", "callback_query"],  # buttons of approvals
        "max_connections": 1,
    }
    # masked on every read path
    shown = rpc.call("config.get", {"path": "channels.telegram"})
    shown_text = json.dumps(shown)
    assert TOKEN not in shown_text and stored not in shown_text
    assert shown["value"]["accounts"]["main"] == {"botToken": "***", "webhookSecret": "***"}
    whole = json.dumps(rpc.call("config.get", {}))
    assert TOKEN not in whole and stored not in whole
    for path in ("botToken", "webhookSecret"):
        one = rpc.call("config.get", {"path": f"channels.telegram.accounts.main.{path}"})
        assert one["value"] == "***"
    # what Telegram now sends is accepted
    assert post(http, ft.private_text("after setup"), tg.webhook().secret_token).status_code == 200
    assert len(inbound.received) == 1
    # a second start keeps the secret
    TelegramAdapter().start(gateway, "main", {})
    assert gateway.config.effective()["channels"]["telegram"]["accounts"]["main"]["webhookSecret"] == stored


def test_start_with_an_explicit_url_keeps_it(account: Any, tg: FakeTelegram) -> None:
    url = "https://tunnel.example.test/channels/telegram/main/webhook"
    TelegramAdapter().start(account, "main", {"webhookUrl": url})
    assert tg.webhook().url == url and tg.webhook().secret_token == SECRET
    assert account.config.effective()["channels"]["telegram"]["accounts"]["main"]["webhookUrl"] == url
    # status recognizes it without being told again
    (entry,) = TelegramAdapter().status(account, "main")
    assert entry["connected"] is True


def test_start_without_a_url_says_what_to_set(account: Any, tg: FakeTelegram) -> None:
    with pytest.raises(ChannelError) as exc:
        TelegramAdapter().start(account, "main", {})
    assert exc.value.code == 400
    assert "channels.telegram.publicBaseUrl" in exc.value.message
    assert "channels.telegram.accounts.main.webhookUrl" in exc.value.message
    assert tg.calls_to("setWebhook") == []
    account.config.set_path("channels.telegram.accounts.bare", {})
    with pytest.raises(ChannelError) as no_token:
        TelegramAdapter().start(account, "bare", {"webhookUrl": PUBLIC})
    assert "channels.telegram.accounts.bare.botToken" in no_token.value.message


def test_start_is_refused_while_the_gateway_has_no_token(
    account: Any, tg: FakeTelegram, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a token a local gateway serves this machine alone: a webhook would open a way in from the internet
    (and its deliveries would be refused at the front door anyway). Nothing is registered with Telegram."""
    from orbital.settings import get_settings, reset_settings

    monkeypatch.delenv("ORBITAL_AUTH_TOKEN")
    reset_settings()
    object.__setattr__(account, "settings", get_settings())
    with pytest.raises(ChannelError) as exc:
        TelegramAdapter().start(account, "main", {"webhookUrl": PUBLIC + HOOK})
    assert exc.value.code == 400
    assert "no token" in exc.value.message and "TOKEN=" in exc.value.message
    assert tg.calls_to("setWebhook") == []
    assert "webhookUrl" not in account.config.effective()["channels"]["telegram"]["accounts"]["main"]


def test_status_stop_and_logout(account: Any, tg: FakeTelegram) -> None:
    adapter = TelegramAdapter()
    account.config.set_path("channels.telegram.publicBaseUrl", PUBLIC)
    adapter.start(account, "main", {})
    tg.webhook().pending_update_count = 2
    (entry,) = adapter.status(account, "main")
    assert entry == {
        "accountId": "main",
        "connected": True,
        "authenticated": True,
        "mode": "webhook",
        "extra": {
            "botUser": {"id": ft.BOT["id"], "username": "orbital_test_bot"},
            "webhookUrl": PUBLIC + HOOK,
            "pendingUpdates": 2,
        },
    }
    tg.webhook().last_error_message = "Wrong response from the webhook: 401 Unauthorized"
    (entry,) = adapter.status(account, "main")
    assert entry["error"] == "last delivery failed: Wrong response from the webhook: 401 Unauthorized"
    # a webhook registered before approvals had buttons does not get their presses: set it up again
    tg.webhook().allowed_updates = ["message", "edited_message", "channel_post"]
    (entry,) = adapter.status(account, "main")
    assert entry["connected"] is True and "button presses" in entry["error"] and "channel.start" in entry["error"]
    adapter.start(account, "main", {})
    assert "callback_query" in tg.webhook().allowed_updates
    tg.webhook().last_error_message = None
    assert "error" not in adapter.status(account, "main")[0]

    assert adapter.stop(account, "main").ok
    assert len(tg.calls_to("deleteWebhook")) == 1
    (entry,) = adapter.status(account, "main")
    assert entry["connected"] is False and entry["authenticated"] is True
    assert entry["error"] == "no webhook registered: run channel.start"
    assert adapter.logout(account, "main").data == {"accountId": "main"}
    assert len(tg.calls_to("deleteWebhook")) == 2

    # every configured account when none is named; a token Telegram refuses; an account never configured
    account.config.set_path("channels.telegram.accounts.revoked", {"botToken": "77:" + "r" * 35})
    entries = {e["accountId"]: e for e in adapter.status(account, None)}
    assert sorted(entries) == ["main", "revoked"]
    assert entries["revoked"]["authenticated"] is False
    assert entries["revoked"]["error"] == "Telegram getMe failed: Unauthorized"
    (unknown,) = adapter.status(account, "ghost")
    assert unknown["connected"] is False and "channels.telegram.accounts.ghost.botToken" in unknown["error"]


def test_the_token_and_secret_never_leak(
    account: Any, http: Any, inbound: Inbound, tg: FakeTelegram, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="orbital")
    adapter = TelegramAdapter()
    outputs: list[Any] = []
    tg.fail("setWebhook", 400, "Bad Request: bad webhook: HTTPS url must be provided for webhook")
    with pytest.raises(ChannelError) as refused:
        adapter.start(account, "main", {"webhookUrl": "http://plain.example.test/hook"})
    outputs.append(refused.value.message)
    outputs.append(adapter.start(account, "main", {"webhookUrl": PUBLIC + HOOK}).data)
    outputs.append(adapter.status(account, None))
    tg.fail("sendMessage", 429, "Too Many Requests: retry after 1", retry_after=1)
    with pytest.raises(ChannelError) as limited:
        adapter.send(account, Outbound("main", {"kind": "dm", "id": "1111"}, "hi"))
    outputs.append(limited.value.message)
    tg.fail("getFile", 500, "Internal Server Error")
    assert post(http, ft.voice()).status_code == 200
    outputs.append(inbound.received)
    tg.tokens.clear()  # the token is revoked: every call fails
    telegram._bot_users.clear()
    outputs.append(adapter.status(account, "main"))
    assert post(http, ft.private_text("after revocation")).status_code == 200
    outputs.append(inbound.received)
    text = json.dumps(outputs) + all_logged(caplog)
    assert TOKEN not in text and SECRET not in text
    assert TOKEN.split(":")[1] not in text
    assert inbound.received[0]["message"]["media"][0]["error"] == "Telegram getFile failed: Internal Server Error"


# --- with the real inbound pipeline -------------------------------------------------------------------------------


def test_unknown_senders_are_told_to_wait_once_per_message(account: Any, http: Any, tg: FakeTelegram) -> None:
    """No stand-in here: Telegram has no dmPolicy, so pairing applies (F7); the notice goes back through the Bot API
    as a reply. Message ids are per chat in Telegram, so two chats' message 31 are two messages, while a repeated
    delivery of one update is processed once."""
    first = ft.private_text("hello?", message_id=31)
    assert post(http, first).status_code == 200
    assert post(http, first).status_code == 200  # Telegram delivers it again
    other_user = {"id": 2222, "is_bot": False, "first_name": "Grace"}
    assert post(http, ft.private_text("me too", user=other_user, message_id=31)).status_code == 200
    replies = tg.calls_to("sendMessage")
    assert [(c.params["chat_id"], c.params["reply_parameters"]["message_id"]) for c in replies] == [
        (1111, 31),
        (2222, 31),
    ]
    assert all("Awaiting approval" in c.params["text"] for c in replies)


def test_channel_rpcs_drive_the_adapter(account: Any, rpc: Any, tg: FakeTelegram) -> None:
    started = rpc.call("channel.start", {"channel": "telegram", "accountId": "main", "config": {"webhookUrl": PUBLIC}})
    assert started["ok"] is True and started["accountId"] == "main" and started["webhookUrl"] == PUBLIC
    assert tg.webhook().url == PUBLIC and tg.webhook().secret_token == SECRET
    status = rpc.call("channel.status", {"channel": "telegram"})
    assert [(a["accountId"], a["connected"], a["authenticated"]) for a in status["accounts"]] == [("main", True, True)]
    error = rpc.error("channel.login", {"channel": "telegram", "accountId": "main"})
    assert (error["code"], error["message"]) == (400, "Channel telegram does not support login flow")
    assert rpc.call("channel.stop", {"channel": "telegram", "accountId": "main"})["ok"] is True
    assert tg.webhook().url == ""
    assert TOKEN not in json.dumps([started, status]) and SECRET not in json.dumps([started, status])


def test_a_message_is_answered_by_the_agent_through_the_bot_api(
    agent: Any, account: Any, http: Any, tg: FakeTelegram, llm: Any
) -> None:
    from tests.conftest import wait_for
    from tests.support.fake_llm import reply

    account.config.set_path("channels.telegram.dmPolicy", "open")
    llm.script(reply("Hello Ada!"), reply("A small picture."))
    assert post(http, ft.private_text("hi agent", message_id=40)).status_code == 200
    (answer,) = wait_for(lambda: [c for c in tg.calls_to("sendMessage") if c.params["text"] == "Hello Ada!"])
    assert answer.params["chat_id"] == 1111 and answer.params["reply_parameters"]["message_id"] == 40
    assert [c.params["action"] for c in tg.calls_to("sendChatAction")] == ["typing"]
    prompt = llm.requests[0].body["messages"][-1]["content"]
    assert prompt.startswith("[telegram · ") and prompt.endswith("hi agent")

    tg.add_file("photo-big", b"\xff\xd8\xff-picture", file_path="photos/file_9.jpg")
    assert post(http, ft.photo("what is this?", size=13)).status_code == 200
    wait_for(lambda: [c for c in tg.calls_to("sendMessage") if c.params["text"] == "A small picture."])
    content = llm.requests[1].body["messages"][-1]["content"]
    assert isinstance(content, list)
    assert [part["type"] for part in content] == ["text", "image_url"]
    assert content[1]["image_url"]["url"].startswith("data:image/jpeg;base64,")


def test_gsv_message_reaches_telegram_through_the_bot_api(
    agent: Any, account: Any, http: Any, tg: FakeTelegram, llm: Any, sender: Any
) -> None:
    from tests.conftest import wait_for
    from tests.support.agent import final_of
    from tests.support.fake_llm import call, reply

    account.config.set_path("channels.telegram.dmPolicy", "open")
    llm.script(reply("noted"))
    assert post(http, ft.private_text("remind me later", message_id=50)).status_code == 200
    wait_for(lambda: [c for c in tg.calls_to("sendMessage") if c.params["text"] == "noted"])
    llm.script(reply(tool_calls=[call("gsv__Message", {"text": "Reminder: stretch!"})]), reply("sent it"))
    started = agent.call("chat.send", {"sessionKey": "agent:main:desk", "message": "ping them"})
    final_of(sender, agent.connection_id, started["runId"])
    (sent,) = [c for c in tg.calls_to("sendMessage") if c.params["text"] == "Reminder: stretch!"]
    assert sent.params["chat_id"] == 1111
    result = json.loads(next(m["content"] for m in llm.requests[-1].body["messages"] if m["role"] == "tool"))
    assert result["sent"] is True and result["via"] == "api" and result["channel"] == "telegram"
    assert result["messageId"].startswith("1111:")
