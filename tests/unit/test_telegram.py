"""Telegram: update parsing, text splitting, the Bot API client and the adapter's outbound side against a fake Bot
API over real HTTP, and the `orbital channel` command."""

from __future__ import annotations

import base64
import json
import logging
import socket
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from orbital.channels import telegram
from orbital.channels.adapters import adapter_for
from orbital.channels.base import ChannelError, Outbound
from orbital.channels.telegram import BotApi, TelegramAdapter, parse_update, reply_target, split_text

from tests.support import fake_telegram as ft
from tests.support.fake_telegram import BOT, TOKEN, FakeTelegram

BOT_REF = {"id": BOT["id"], "username": BOT["username"]}


@pytest.fixture
def tg() -> Iterator[FakeTelegram]:
    with FakeTelegram() as server:
        yield server


@pytest.fixture(autouse=True)
def _fresh_bot_cache() -> None:
    telegram._bot_users.clear()


class StubConfig:
    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
        self.writes: list[tuple[str, Any]] = []

    def effective(self) -> dict[str, Any]:
        return self.data

    def set_path(self, path: str, value: Any) -> None:
        self.writes.append((path, value))
        node = self.data
        *parents, last = path.split(".")
        for seg in parents:
            node = node.setdefault(seg, {})
        node[last] = value


class StubServices:
    def __init__(self, data: dict[str, Any]) -> None:
        self.config = StubConfig(data)


def services_for(tg: FakeTelegram, **account: Any) -> Any:
    return StubServices(
        {"channels": {"telegram": {"apiBaseUrl": tg.base_url, "accounts": {"main": {"botToken": TOKEN, **account}}}}}
    )


# --- parsing ------------------------------------------------------------------------------------------------------


def test_private_text_is_a_dm_from_the_user() -> None:
    upd = ft.private_text("hello there", message_id=77)
    params = parse_update(upd, "main", bot=BOT_REF)
    assert params == {
        "channel": "telegram",
        "accountId": "main",
        "peer": {"kind": "dm", "id": "1111", "name": "Ada Lovelace", "handle": "ada"},
        "sender": {"id": "1111", "name": "Ada Lovelace", "handle": "ada"},
        "message": {"id": "1111:77", "text": "hello there", "timestamp": ft.DATE * 1000},
        "wasMentioned": False,
    }


def test_group_text_with_mention_is_a_group_message_that_mentions_the_bot() -> None:
    params = parse_update(ft.group_text("what do you think", mention="@orbital_test_bot"), "main", bot=BOT_REF)
    assert params is not None
    assert params["peer"] == {"kind": "group", "id": str(ft.GROUP["id"]), "name": "Engine Room"}
    assert params["sender"]["id"] == "1111"
    assert params["message"]["text"] == "what do you think @orbital_test_bot"
    assert params["wasMentioned"] is True


def test_mention_detection() -> None:
    plain = ft.group_text("just chatting")
    assert parse_update(plain, "main", bot=BOT_REF)["wasMentioned"] is False  # type: ignore[index]
    # someone else mentioned: not us
    other = ft.group_text("hey", mention="@someone_else")
    assert parse_update(other, "main", bot=BOT_REF)["wasMentioned"] is False  # type: ignore[index]
    # the entity offsets count UTF-16 units: an emoji before the mention shifts them
    emoji = ft.group_text("🚀🚀 look", mention="@Orbital_Test_Bot")
    assert parse_update(emoji, "main", bot=BOT_REF)["wasMentioned"] is True  # type: ignore[index]
    # a command addressed to the bot
    command = ft.group_text("/status@orbital_test_bot")
    command["message"]["entities"] = [{"type": "bot_command", "offset": 0, "length": 24}]
    assert parse_update(command, "main", bot=BOT_REF)["wasMentioned"] is True  # type: ignore[index]
    # a reply to one of the bot's messages
    reply = ft.group_text("and then?", reply_to_message={"message_id": 5, "date": ft.DATE, "from": BOT, "text": "hi"})
    params = parse_update(reply, "main", bot=BOT_REF)
    assert params is not None and params["wasMentioned"] is True
    assert params["message"]["replyToId"] == f"{ft.GROUP['id']}:5"
    assert params["message"]["replyToText"] == "hi"
    # without knowing the bot nothing counts as a mention
    assert parse_update(ft.group_text("x", mention="@orbital_test_bot"), "main")["wasMentioned"] is False  # type: ignore[index]


def test_edited_message_is_a_new_message() -> None:
    original = ft.private_text("first", message_id=9)
    edited = {"update_id": 1, "edited_message": {**original["message"], "text": "second", "edit_date": ft.DATE + 60}}
    a = parse_update(original, "main")
    b = parse_update(edited, "main")
    assert a is not None and b is not None
    assert b["message"]["id"] != a["message"]["id"]
    assert b["message"]["text"] == "second"
    assert b["message"]["timestamp"] == (ft.DATE + 60) * 1000
    assert reply_target(b["message"]["id"]) == 9


def test_channel_post_speaks_as_the_channel() -> None:
    chat = {"id": -1009, "type": "channel", "title": "News", "username": "news"}
    upd = ft.update("channel_post", {"message_id": 3, "date": ft.DATE, "chat": chat, "sender_chat": chat, "text": "x"})
    params = parse_update(upd, "main", bot=BOT_REF)
    assert params is not None
    assert params["peer"] == {"kind": "channel", "id": "-1009", "name": "News", "handle": "news"}
    assert params["sender"] == {"id": "-1009", "name": "News", "handle": "news"}


def test_group_kinds_and_forum_topics() -> None:
    basic = ft.group_text("hi", chat={"id": -55, "type": "group", "title": "Family"})
    assert parse_update(basic, "main")["peer"]["kind"] == "group"  # type: ignore[index]
    topic = ft.group_text("in a topic", message_thread_id=12, is_topic_message=True)
    assert parse_update(topic, "main")["peer"]["threadId"] == "12"  # type: ignore[index]
    # a reply thread outside a forum is not a topic
    thread = ft.group_text("reply thread", message_thread_id=12)
    assert "threadId" not in parse_update(thread, "main")["peer"]  # type: ignore[index]


def test_other_updates_and_service_messages_are_ignored() -> None:
    assert parse_update({"update_id": 1, "callback_query": {"id": "1"}}, "main") is None
    assert parse_update({"update_id": 1, "my_chat_member": {}}, "main") is None
    joined = ft.update("message", {"message_id": 1, "date": ft.DATE, "chat": ft.GROUP, "new_chat_members": [ft.USER]})
    assert parse_update(joined, "main") is None
    assert parse_update({"update_id": 1, "message": {"message_id": 1, "text": "no chat"}}, "main") is None


def test_media_entries() -> None:
    pic = parse_update(ft.photo("look at this", size=2048), "main")
    assert pic is not None
    assert pic["message"]["text"] == "look at this"
    assert pic["message"]["media"] == [{"type": "image", "mimeType": "image/jpeg", "fileId": "photo-big", "size": 2048}]
    note = parse_update(ft.voice(duration=4), "main")
    assert note is not None and note["message"]["text"] == ""
    assert note["message"]["media"] == [
        {"type": "audio", "mimeType": "audio/ogg", "fileId": "voice-1", "size": 4000, "duration": 4}
    ]
    doc = parse_update(ft.document(), "main")
    assert doc["message"]["media"][0] == {  # type: ignore[index]
        "type": "document",
        "mimeType": "application/pdf",
        "fileId": "doc-1",
        "filename": "report.pdf",
        "size": 5000,
    }
    video = ft.update(
        "message",
        {
            "message_id": 4,
            "date": ft.DATE,
            "chat": {"id": 1111, "type": "private", "first_name": "Ada"},
            "from": ft.USER,
            "video": {"file_id": "vid", "duration": 10, "mime_type": "video/mp4", "file_size": 100},
        },
    )
    assert parse_update(video, "main")["message"]["media"][0]["type"] == "video"  # type: ignore[index]


# --- text ---------------------------------------------------------------------------------------------------------


def test_split_text_keeps_everything_within_the_limit() -> None:
    assert split_text("short") == ["short"]
    assert split_text("   ") == []
    paragraphs = "\n\n".join(f"paragraph {i} " + "word " * 150 for i in range(20))
    pieces = split_text(paragraphs)
    assert len(pieces) > 1
    assert "".join(pieces) == paragraphs
    assert all(len(p) <= 4096 for p in pieces)
    assert all(p.endswith("\n\n") for p in pieces[:-1])  # cut after a paragraph
    # no break at all: a hard cut; astral characters count twice
    solid = "x" * 10000
    assert [len(p) for p in split_text(solid)] == [4096, 4096, 1808]
    emoji = "😀" * 3000
    pieces = split_text(emoji)
    assert "".join(pieces) == emoji and all(len(p) <= 2048 for p in pieces)


def test_reply_target() -> None:
    assert reply_target("1111:77") == 77
    assert reply_target("-100123:5:e1700000060") == 5
    assert reply_target("42") == 42
    assert reply_target("abc") is None
    assert reply_target(None) is None


# --- the Bot API client -------------------------------------------------------------------------------------------


def test_client_calls_and_errors(tg: FakeTelegram) -> None:
    api = BotApi(TOKEN, base_url=tg.base_url)
    assert api.get_me()["username"] == "orbital_test_bot"
    sent = api.send_message(42, "hi", reply_to_message_id=7, message_thread_id=3)
    assert sent["message_id"] >= 1000
    call = tg.calls_to("sendMessage")[0]
    assert call.token == TOKEN
    assert call.content_type == "application/json"
    assert call.params == {
        "chat_id": 42,
        "text": "hi",
        "message_thread_id": 3,
        "reply_parameters": {"message_id": 7, "allow_sending_without_reply": True},
    }

    tg.fail("sendMessage", 400, "Bad Request: chat not found")
    with pytest.raises(ChannelError) as bad:
        api.send_message(43, "hi")
    assert bad.value.message == "Telegram sendMessage failed: Bad Request: chat not found"
    assert bad.value.code == 400

    tg.fail("sendMessage", 429, "Too Many Requests: retry after 3", retry_after=3)
    with pytest.raises(telegram.TelegramError) as slow:
        api.send_message(43, "hi")
    assert slow.value.code == 429 and slow.value.retry_after == 3
    assert "retry after 3" in slow.value.message

    tg.fail("sendMessage", 403, "Forbidden: bot was blocked by the user")
    with pytest.raises(ChannelError) as blocked:
        api.send_message(44, "hi")
    assert blocked.value.code == 403 and blocked.value.message.endswith("bot was blocked by the user")
    tg.fail("sendChatAction", 429, "Flood control exceeded", retry_after=7)
    with pytest.raises(telegram.TelegramError) as flood:
        api.send_chat_action(44)
    assert flood.value.message == "Telegram sendChatAction failed: Flood control exceeded (retry after 7 s)"

    wrong = BotApi("1:" + "b" * 30, base_url=tg.base_url)
    with pytest.raises(ChannelError) as unauthorized:
        wrong.get_me()
    assert unauthorized.value.message == "Telegram getMe failed: Unauthorized"
    for exc in (bad.value, slow.value, unauthorized.value):
        assert TOKEN not in str(exc) and tg.base_url not in str(exc)
        assert TOKEN not in "".join(traceback.format_exception(exc))


def test_client_never_shows_the_token(tg: FakeTelegram, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="orbital")
    # an error description that echoes the token is scrubbed
    tg.fail("getMe", 500, f"Internal error for bot{TOKEN}")
    api = BotApi(TOKEN, base_url=tg.base_url)
    with pytest.raises(ChannelError) as echoed:
        api.get_me()
    assert TOKEN not in echoed.value.message and "***" in echoed.value.message
    # nothing listens: the transport error names no URL
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed_port = sock.getsockname()[1]
    down = BotApi(TOKEN, base_url=f"http://127.0.0.1:{closed_port}", timeout=2)
    with pytest.raises(ChannelError) as unreachable:
        down.get_me()
    assert unreachable.value.message == "Telegram getMe failed: cannot reach the Bot API (ConnectionRefusedError)"
    # a malformed token is refused before any request, without echoing it
    with pytest.raises(ChannelError) as malformed:
        BotApi("not a token " + TOKEN, base_url=tg.base_url)
    assert TOKEN not in malformed.value.message
    assert TOKEN not in repr(api)
    for exc in (echoed.value, unreachable.value, malformed.value):
        assert TOKEN not in str(exc) and "/bot" not in str(exc)
        assert TOKEN not in "".join(traceback.format_exception(exc))
    assert all(TOKEN not in r.getMessage() for r in caplog.records)


def test_download_and_its_limit(tg: FakeTelegram) -> None:
    tg.add_file("f1", b"0123456789", file_path="documents/f1.txt")
    api = BotApi(TOKEN, base_url=tg.base_url)
    located = api.get_file("f1")
    assert located["file_path"] == "documents/f1.txt"
    assert api.download(located["file_path"]) == b"0123456789"
    with pytest.raises(ChannelError) as big:
        api.download("documents/f1.txt", max_bytes=4)
    assert big.value.code == 413 and "too large" in big.value.message
    with pytest.raises(ChannelError) as gone:
        api.download("documents/missing.txt")
    assert gone.value.message == "Telegram file download failed: HTTP 404"
    assert TOKEN not in big.value.message + gone.value.message


# --- the adapter: outbound and media ------------------------------------------------------------------------------


def test_adapter_is_the_built_in_telegram_adapter() -> None:
    adapter = adapter_for("telegram")
    assert isinstance(adapter, TelegramAdapter) and adapter.channel == "telegram"


def test_send_replies_in_the_thread_and_returns_the_id(tg: FakeTelegram) -> None:
    services = services_for(tg)
    peer = {"kind": "group", "id": "-1001234567890", "name": "Engine Room", "threadId": "12"}
    message_id = TelegramAdapter().send(services, Outbound("main", peer, "hello", reply_to_id="-1001234567890:77"))
    (call,) = tg.calls_to("sendMessage")
    assert call.params == {
        "chat_id": -1001234567890,
        "text": "hello",
        "message_thread_id": 12,
        "reply_parameters": {"message_id": 77, "allow_sending_without_reply": True},
    }
    assert message_id is not None and reply_target(message_id) >= 1000  # type: ignore[operator]
    assert message_id.startswith("-1001234567890:")


def test_send_splits_long_text_and_replies_once(tg: FakeTelegram) -> None:
    services = services_for(tg)
    text = "\n".join(f"line {i}: " + "lorem ipsum " * 20 for i in range(60))
    TelegramAdapter().send(services, Outbound("main", {"kind": "dm", "id": "1111"}, text, reply_to_id="1111:5"))
    calls = tg.calls_to("sendMessage")
    assert len(calls) == len(split_text(text)) > 1
    assert "".join(c.params["text"] for c in calls) == text
    assert calls[0].params["reply_parameters"]["message_id"] == 5
    assert all("reply_parameters" not in c.params for c in calls[1:])
    assert all("message_thread_id" not in c.params for c in calls)


def test_send_errors_are_channel_errors(tg: FakeTelegram) -> None:
    tg.fail("sendMessage", 400, "Bad Request: chat not found")
    with pytest.raises(ChannelError) as exc:
        TelegramAdapter().send(services_for(tg), Outbound("main", {"kind": "dm", "id": "999"}, "hi"))
    assert exc.value.code == 400 and "chat not found" in exc.value.message
    no_token: Any = StubServices({"channels": {"telegram": {"accounts": {"main": {}}}}})
    with pytest.raises(ChannelError) as missing:
        TelegramAdapter().send(no_token, Outbound("main", {"kind": "dm", "id": "999"}, "hi"))
    assert "channels.telegram.accounts.main.botToken" in missing.value.message


def test_typing(tg: FakeTelegram) -> None:
    adapter = TelegramAdapter()
    services = services_for(tg)
    adapter.typing(services, "main", {"kind": "group", "id": "-100", "threadId": "4"}, True)
    adapter.typing(services, "main", {"kind": "group", "id": "-100"}, False)  # Telegram cannot stop it
    (call,) = tg.calls_to("sendChatAction")
    assert call.params == {"chat_id": -100, "action": "typing", "message_thread_id": 4}


def test_login_is_not_supported(tg: FakeTelegram) -> None:
    with pytest.raises(ChannelError) as exc:
        TelegramAdapter().login(services_for(tg), "main", False)
    assert exc.value.message == "Channel telegram does not support login flow" and exc.value.code == 400


def test_inbound_params_fetch_media(tg: FakeTelegram) -> None:
    tg.add_file("photo-big", b"\xff\xd8jpeg-bytes", file_path="photos/file_1.jpg")
    tg.add_file("voice-1", b"OggS-voice", file_path="voice/file_2.oga")
    adapter = TelegramAdapter()
    services = services_for(tg)
    pic = adapter.inbound_params(services, "main", ft.photo("caption", size=12))
    assert pic is not None
    (image,) = pic["message"]["media"]
    assert image == {
        "type": "image",
        "mimeType": "image/jpeg",
        "size": 12,
        "data": base64.b64encode(b"\xff\xd8jpeg-bytes").decode(),
    }
    note = adapter.inbound_params(services, "main", ft.voice())
    assert base64.b64decode(note["message"]["media"][0]["data"]) == b"OggS-voice"  # type: ignore[index]
    assert [c.method for c in tg.calls].count("getMe") == 1  # the bot's identity is remembered
    # over the Bot API's 20 MB: not fetched, a note instead
    huge = adapter.inbound_params(services, "main", ft.document(size=25 * 1024 * 1024))
    (entry,) = huge["message"]["media"]  # type: ignore[index]
    assert "data" not in entry and "fileId" not in entry
    assert entry["error"] == "File too large to download (25.0 MB > 20 MB Bot API limit)"
    # a file Telegram no longer has
    gone = adapter.inbound_params(services, "main", ft.document(file_id="unknown", size=10))
    assert gone["message"]["media"][0]["error"] == "Telegram getFile failed: Bad Request: invalid file_id"  # type: ignore[index]
    assert not [c for c in tg.calls_to("getFile") if c.params["file_id"] == "doc-1"]
    assert adapter.inbound_params(services, "main", {"update_id": 3, "poll": {}}) is None


# --- the CLI ------------------------------------------------------------------------------------------------------


class RecordingClient:
    instances: list[RecordingClient] = []
    fail_with: Exception | None = None

    def __init__(self, url: str, *, timeout: float = 30.0) -> None:
        self.url = url
        self.calls: list[tuple[str, Any]] = []
        self.connected: tuple[Any, ...] = ()
        RecordingClient.instances.append(self)

    def __enter__(self) -> RecordingClient:
        return self

    def __exit__(self, *_: Any) -> None:
        pass

    def connect(self, mode: str, client_id: Any, *, token: str | None = None) -> dict[str, Any]:
        self.connected = (mode, token)
        return {}

    def call(self, method: str, params: Any = None) -> Any:
        if self.fail_with is not None:
            raise self.fail_with
        self.calls.append((method, params))
        return {"ok": True, "channel": "telegram", "accountId": params.get("accountId")}


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    import orbital.client
    from orbital.cli.main import main

    RecordingClient.instances = []
    RecordingClient.fail_with = None
    monkeypatch.setattr(orbital.client, "GatewayClient", RecordingClient)
    monkeypatch.delenv("TELEGRAM_BOT_TOKEN", raising=False)
    monkeypatch.delenv("ORBITAL_URL", raising=False)
    monkeypatch.delenv("ORBITAL_TOKEN", raising=False)
    monkeypatch.setenv("ORBITAL_DATA_DIR", str(tmp_path / "no-gateway-here"))  # no token kept by a real gateway
    return main


def test_cli_setup_status_remove(cli: Any, capsys: pytest.CaptureFixture[str], monkeypatch: Any) -> None:
    url = "https://example.test/channels/telegram/main/webhook"
    monkeypatch.setenv("ORBITAL_TOKEN", "gw")
    assert cli(["channel", "telegram", "setup", "--account", "main", "--webhook-url", url]) == 0
    monkeypatch.delenv("ORBITAL_TOKEN")
    client = RecordingClient.instances[-1]
    assert client.url == "ws://127.0.0.1:8765/ws" and client.connected == ("client", "gw")
    assert client.calls == [
        ("channel.start", {"channel": "telegram", "accountId": "main", "config": {"webhookUrl": url}})
    ]
    assert json.loads(capsys.readouterr().out)["accountId"] == "main"

    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", TOKEN)
    assert cli(["channel", "telegram", "setup", "--url", "ws://gw:1/ws"]) == 0
    client = RecordingClient.instances[-1]
    assert client.url == "ws://gw:1/ws"
    assert client.calls == [
        ("config.set", {"path": "channels.telegram.accounts.default.botToken", "value": TOKEN}),
        ("channel.start", {"channel": "telegram", "accountId": "default", "config": {}}),
    ]
    assert TOKEN not in capsys.readouterr().out

    assert cli(["channel", "telegram", "status"]) == 0
    assert RecordingClient.instances[-1].calls == [("channel.status", {"channel": "telegram"})]
    assert cli(["channel", "telegram", "status", "--account", "main"]) == 0
    assert RecordingClient.instances[-1].calls == [("channel.status", {"channel": "telegram", "accountId": "main"})]
    assert cli(["channel", "telegram", "remove", "--account", "main"]) == 0
    assert RecordingClient.instances[-1].calls == [("channel.stop", {"channel": "telegram", "accountId": "main"})]
    capsys.readouterr()

    from orbital.client import RpcFailedError

    RecordingClient.fail_with = RpcFailedError(400, "Telegram needs a public URL for its webhook")
    assert cli(["channel", "telegram", "setup", "--account", "main"]) == 1
    assert "Telegram needs a public URL" in capsys.readouterr().err
