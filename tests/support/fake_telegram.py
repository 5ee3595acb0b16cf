"""A fake Telegram Bot API on loopback, over real HTTP, plus builders of realistic Update payloads.

    with FakeTelegram() as tg:
        tg.fail("sendMessage", 400, "Bad Request: chat not found")
        tg.fail("sendMessage", 429, "Too Many Requests: retry after 3", retry_after=3)
        tg.add_file("photo-big", b"...", file_path="photos/file_1.jpg")
        ... point the adapter at tg.base_url (channels.telegram.apiBaseUrl) ...
        assert tg.calls_to("sendMessage")[0].params["chat_id"] == 42

Served: `POST|GET /bot<token>/<method>` (JSON, form or query parameters) and `GET /file/bot<token>/<path>`.
Every request is recorded in `calls` (method — `"file"` for downloads —, token, params, content type). Known
tokens (`tokens`, by default `{TOKEN}`) are answered; others get 401 Unauthorized as Telegram does. `getMe` answers
`bot`; `setWebhook` / `deleteWebhook` / `getWebhookInfo` keep one webhook per token; `sendMessage` answers a message
with increasing ids and keeps it (with its inline keyboard) in `messages`, which `editMessageText` changes (refusing
an edit that changes nothing, as Telegram does); `answerCallbackQuery` answers true; `getFile` and downloads serve
files registered with `add_file`. A failure scripted with
`fail(method, ...)` answers the next call(s) of that method instead. Only 127.0.0.1 is used, on a free port.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

TOKEN = "4242424242:AAzz-DISTINCTIVE_fake_token_value_0123"
BOT = {"id": 4242424242, "is_bot": True, "first_name": "Orbital", "username": "orbital_test_bot"}


@dataclass
class Call:
    method: str
    token: str
    params: dict[str, Any]
    content_type: str = ""
    path: str = ""


@dataclass
class Failure:
    status: int
    description: str
    retry_after: int | None = None
    times: int = 1


@dataclass
class StoredFile:
    file_id: str
    data: bytes
    file_path: str
    file_size: int | None = None


@dataclass
class Webhook:
    url: str = ""
    secret_token: str | None = None
    allowed_updates: list[str] = field(default_factory=list)
    pending_update_count: int = 0
    last_error_message: str | None = None


class FakeTelegram:
    def __init__(self, *, bot: dict[str, Any] | None = None, tokens: set[str] | None = None) -> None:
        self.bot = dict(bot or BOT)
        self.tokens = set(tokens) if tokens is not None else {TOKEN}
        self.calls: list[Call] = []
        self.failures: dict[str, list[Failure]] = {}
        self.files: dict[str, StoredFile] = {}
        self.webhooks: dict[str, Webhook] = {}
        self.messages: dict[tuple[str, int], dict[str, Any]] = {}
        """What the bot sent, by (chat id, message id), as edited since."""
        self.held: dict[str, tuple[threading.Event, Callable[[dict[str, Any]], bool]]] = {}
        """Methods whose answers wait (the call is recorded and carried out first) until their event is set: those
        of their calls whose parameters the predicate accepts."""
        self._message_ids = itertools.count(1000)
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    # --- lifecycle ------------------------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeTelegram:
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-telegram", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeTelegram:
        return self.start()

    def __exit__(self, *_: Any) -> None:
        self.stop()

    # --- scripting ------------------------------------------------------------------------------------------------

    def fail(
        self, method: str, status: int, description: str, *, retry_after: int | None = None, times: int = 1
    ) -> None:
        with self._lock:
            self.failures.setdefault(method, []).append(Failure(status, description, retry_after, times))

    def add_file(
        self, file_id: str, data: bytes, *, file_path: str | None = None, file_size: int | None = None
    ) -> StoredFile:
        stored = StoredFile(file_id, data, file_path or f"documents/{file_id}.bin", file_size)
        self.files[file_id] = stored
        return stored

    def hold(self, method: str, when: Callable[[dict[str, Any]], bool] = lambda _: True) -> threading.Event:
        """Answers to the calls of `method` that `when` accepts wait until the returned event is set (at most 30 s):
        the call has been made and recorded, its caller has not heard back yet."""
        event = threading.Event()
        self.held[method] = (event, when)
        return event

    def webhook(self, token: str = TOKEN) -> Webhook:
        return self.webhooks.setdefault(token, Webhook())

    def calls_to(self, method: str) -> list[Call]:
        with self._lock:
            return [c for c in self.calls if c.method == method]

    def reset(self) -> None:
        with self._lock:
            self.calls.clear()
            self.failures.clear()

    # --- serving --------------------------------------------------------------------------------------------------

    def _take_failure(self, method: str) -> Failure | None:
        with self._lock:
            queue = self.failures.get(method)
            if not queue:
                return None
            failure = queue[0]
            failure.times -= 1
            if failure.times <= 0:
                queue.pop(0)
            return failure

    def _answer(self, method: str, token: str, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if token not in self.tokens:
            return 401, {"ok": False, "error_code": 401, "description": "Unauthorized"}
        failure = self._take_failure(method)
        if failure is not None:
            body: dict[str, Any] = {"ok": False, "error_code": failure.status, "description": failure.description}
            if failure.retry_after is not None:
                body["parameters"] = {"retry_after": failure.retry_after}
            return failure.status, body
        result: Any
        if method == "getMe":
            result = self.bot
        elif method == "sendMessage":
            if not params.get("chat_id") or not params.get("text"):
                return 400, {"ok": False, "error_code": 400, "description": "Bad Request: message text is empty"}
            result = {
                "message_id": next(self._message_ids),
                "date": 1700000000,
                "chat": {"id": params["chat_id"]},
                "from": self.bot,
                "text": params["text"],
            }
            if isinstance(params.get("reply_markup"), dict):
                result["reply_markup"] = params["reply_markup"]
            with self._lock:
                self.messages[(str(params["chat_id"]), result["message_id"])] = dict(result)
        elif method == "answerCallbackQuery":
            if not params.get("callback_query_id"):
                return 400, {"ok": False, "error_code": 400, "description": "Bad Request: query is too old"}
            result = True
        elif method == "editMessageText":
            with self._lock:
                found = self.messages.get((str(params.get("chat_id")), params.get("message_id")))
                if found is None:
                    return 400, {
                        "ok": False,
                        "error_code": 400,
                        "description": "Bad Request: message to edit not found",
                    }
                if found["text"] == params.get("text") and found.get("reply_markup") == params.get("reply_markup"):
                    return 400, {"ok": False, "error_code": 400, "description": "Bad Request: message is not modified"}
                found["text"] = params.get("text")
                found.pop("reply_markup", None)
                if isinstance(params.get("reply_markup"), dict):
                    found["reply_markup"] = params["reply_markup"]
                result = dict(found)
        elif method == "sendChatAction":
            result = True
        elif method == "setWebhook":
            hook = self.webhook(token)
            hook.url = str(params.get("url") or "")
            hook.secret_token = params.get("secret_token")
            hook.allowed_updates = list(params.get("allowed_updates") or [])
            result = True
        elif method == "deleteWebhook":
            self.webhooks[token] = Webhook()
            result = True
        elif method == "getWebhookInfo":
            hook = self.webhook(token)
            result = {
                "url": hook.url,
                "has_custom_certificate": False,
                "pending_update_count": hook.pending_update_count,
            }
            if hook.allowed_updates:
                result["allowed_updates"] = hook.allowed_updates
            if hook.last_error_message:
                result["last_error_date"] = 1700000000
                result["last_error_message"] = hook.last_error_message
        elif method == "getFile":
            stored = self.files.get(str(params.get("file_id")))
            if stored is None:
                return 400, {"ok": False, "error_code": 400, "description": "Bad Request: invalid file_id"}
            result = {"file_id": stored.file_id, "file_unique_id": f"u-{stored.file_id}"}
            result["file_size"] = stored.file_size if stored.file_size is not None else len(stored.data)
            result["file_path"] = stored.file_path
        else:
            return 404, {"ok": False, "error_code": 404, "description": "Not Found: method not found"}
        return 200, {"ok": True, "result": result}

    def _download(self, token: str, file_path: str) -> tuple[int, bytes]:
        if token not in self.tokens:
            return 401, b"Unauthorized"
        failure = self._take_failure("file")
        if failure is not None:
            return failure.status, failure.description.encode()
        for stored in self.files.values():
            if stored.file_path == file_path:
                return 200, stored.data
        return 404, b"Not Found"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_: Any) -> None:  # keep test output quiet
                pass

            def _params(self, query: str) -> tuple[dict[str, Any], str]:
                params: dict[str, Any] = {k: v[-1] for k, v in parse_qs(query).items()}
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
                if raw and content_type == "application/json":
                    body = json.loads(raw)
                    if isinstance(body, dict):
                        params.update(body)
                elif raw and content_type == "application/x-www-form-urlencoded":
                    for key, values in parse_qs(raw.decode()).items():
                        value: Any = values[-1]
                        if value[:1] in "[{":
                            try:
                                value = json.loads(value)
                            except ValueError:
                                pass
                        params[key] = value
                return params, content_type

            def _send(self, status: int, body: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _serve(self) -> None:
                parts = urlsplit(self.path)
                path = unquote(parts.path)
                params, content_type = self._params(parts.query)
                if path.startswith("/file/bot"):
                    token, _, file_path = path[len("/file/bot") :].partition("/")
                    with fake._lock:
                        fake.calls.append(Call("file", token, {"file_path": file_path}, content_type, path))
                    status, data = fake._download(token, file_path)
                    self._send(status, data, "application/octet-stream")
                    return
                if path.startswith("/bot"):
                    token, _, method = path[len("/bot") :].partition("/")
                    with fake._lock:
                        fake.calls.append(Call(method, token, params, content_type, path))
                    status, answer = fake._answer(method, token, params)
                    held = fake.held.get(method)
                    if held is not None and held[1](params):
                        held[0].wait(timeout=30)
                    self._send(status, json.dumps(answer).encode(), "application/json")
                    return
                self._send(404, b'{"ok":false,"error_code":404,"description":"Not Found"}', "application/json")

            def do_GET(self) -> None:
                self._serve()

            def do_POST(self) -> None:
                self._serve()

        return Handler


# --- Update builders ----------------------------------------------------------------------------------------------

_update_ids = itertools.count(500000)
_message_ids = itertools.count(1)
DATE = 1700000000
USER = {"id": 1111, "is_bot": False, "first_name": "Ada", "last_name": "Lovelace", "username": "ada"}
GROUP = {"id": -1001234567890, "type": "supergroup", "title": "Engine Room"}


def _private_chat(user: dict[str, Any]) -> dict[str, Any]:
    chat = {"id": user["id"], "type": "private", "first_name": user.get("first_name")}
    for key in ("last_name", "username"):
        if user.get(key):
            chat[key] = user[key]
    return chat


def _message(chat: dict[str, Any], user: dict[str, Any] | None, **fields: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"message_id": fields.pop("message_id", next(_message_ids)), "date": DATE, "chat": chat}
    if user is not None:
        message["from"] = user
    message.update({k: v for k, v in fields.items() if v is not None})
    return message


def update(kind: str, message: dict[str, Any], update_id: int | None = None) -> dict[str, Any]:
    return {"update_id": update_id if update_id is not None else next(_update_ids), kind: message}


def private_text(text: str, *, user: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    sender = user or USER
    return update("message", _message(_private_chat(sender), sender, text=text, **fields))


def group_text(
    text: str,
    *,
    user: dict[str, Any] | None = None,
    chat: dict[str, Any] | None = None,
    mention: str | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """A group message; with `mention` ("@name") the mention is appended to the text with its entity."""
    entities = []
    if mention:
        offset = len(text.encode("utf-16-le")) // 2 + (1 if text else 0)
        text = f"{text} {mention}" if text else mention
        entities.append({"type": "mention", "offset": offset, "length": len(mention)})
    return update(
        "message",
        _message(chat or GROUP, user or USER, text=text, entities=entities or None, **fields),
    )


def photo(caption: str | None = None, *, file_id: str = "photo-big", size: int = 2048, **fields: Any) -> dict:
    sizes = [
        {"file_id": "photo-small", "file_unique_id": "s", "width": 90, "height": 67, "file_size": 1200},
        {"file_id": file_id, "file_unique_id": "b", "width": 1280, "height": 960, "file_size": size},
        {"file_id": "photo-mid", "file_unique_id": "m", "width": 320, "height": 240, "file_size": 9000},
    ]
    return update("message", _message(_private_chat(USER), USER, photo=sizes, caption=caption, **fields))


def voice(*, file_id: str = "voice-1", duration: int = 3, size: int = 4000, **fields: Any) -> dict[str, Any]:
    item = {
        "file_id": file_id,
        "file_unique_id": "v",
        "duration": duration,
        "mime_type": "audio/ogg",
        "file_size": size,
    }
    return update("message", _message(_private_chat(USER), USER, voice=item, **fields))


def document(
    *, file_id: str = "doc-1", file_name: str = "report.pdf", mime_type: str = "application/pdf", size: int = 5000
) -> dict[str, Any]:
    item = {
        "file_id": file_id,
        "file_unique_id": "d",
        "file_name": file_name,
        "mime_type": mime_type,
        "file_size": size,
    }
    return update("message", _message(_private_chat(USER), USER, document=item))


_callback_ids = itertools.count(880000)


def callback_query(
    data: str,
    message: dict[str, Any],
    *,
    user: dict[str, Any] | None = None,
    query_id: str | None = None,
    update_id: int | None = None,
) -> dict[str, Any]:
    """A press of an inline button of `message` (a message the bot sent, as `FakeTelegram.messages` keeps it)."""
    presser = user or USER
    chat = message.get("chat") or {}
    chat_full = _private_chat(presser) if str(chat.get("id")) == str(presser["id"]) else {**GROUP, **chat}
    query = {
        "id": query_id or str(next(_callback_ids)),
        "from": presser,
        "message": {**message, "chat": chat_full},
        "chat_instance": "-4242",
        "data": data,
    }
    return {"update_id": update_id if update_id is not None else next(_update_ids), "callback_query": query}
