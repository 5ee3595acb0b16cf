"""WindieOS's clients against a real `orbital dev` (dialects.md §3.9, checks 1-13): raw WebSockets speaking its
protocol as its SDKs do (the TypeScript SDK adds `user_id` and `timestamp` to every envelope and sends `tools.mode:
"client_only"`; the Python SDK sends a top-level `operating_system`), the scripted model over HTTP answering by rule
(`tests.support.rules`).

Two gateways for the module: `loopback` (no token: the claimed user is trusted) and `guarded` (a token, and the text
frames of a socket handled concurrently, as API Gateway does). Install tokens are registered in the gateway's store.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from orbital.client import GatewayClient
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection
from websockets.sync.client import connect as ws_connect

from tests.e2e.conftest import GatewayProcess, store_for
from tests.support import rules
from tests.support.agent import configure_fake_model
from tests.support.fake_llm import FakeLLM, Item, Request, reply
from tests.support.windie_sdk import sdk_refusals

TOKEN = "windie-e2e-token-0123456789abcdef"
SLOW = "SLOW_REPLY_W"
"""A message the model answers slowly (30 chunks, 0.2 s apart)."""
READ_FILE = {
    "name": "read_file",
    "description": "Read a UTF-8 text file from disk",
    "execution_target": "local_runtime",
    "schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    "argument_resolution": "passthrough",
}
TURN_FIELDS = {"id", "type", "payload", "turn_ref", "conversation_ref", "event_id", "sequence", "session_id", "user_id"}
ARTIFACT = re.compile(r"^[0-9a-f-]+\.[a-z0-9]+$")


def respond(request: Request) -> Item:
    messages = request.body.get("messages") if isinstance(request.body, dict) else None
    users = [m for m in messages or [] if isinstance(m, dict) and m.get("role") == "user"]
    if users and messages and messages[-1] is users[-1] and SLOW in json.dumps(users[-1].get("content")):
        return reply("slow " * 30, chunks=30, delay_per_chunk=0.2)
    return rules.respond(request)


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        server.responder = respond
        yield server


def _admin(gw: GatewayProcess) -> GatewayClient:
    client = GatewayClient(gw.url, timeout=20)
    client.connect("client", f"windie-admin-{uuid.uuid4().hex[:6]}", token=gw.token)
    return client


def _started(gw: GatewayProcess, llm: FakeLLM) -> GatewayProcess:
    gw.start()
    try:
        with _admin(gw) as admin:
            configure_fake_model(admin, llm.base_url)
    except Exception:
        gw.stop()
        raise
    return gw


@pytest.fixture(scope="module")
def loopback(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM) -> Iterator[GatewayProcess]:
    gw = _started(GatewayProcess(tmp_path_factory.mktemp("windie-loopback") / "data"), llm)
    yield gw
    gw.stop()


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM) -> Iterator[GatewayProcess]:
    data = tmp_path_factory.mktemp("windie-guarded") / "data"
    gw = _started(GatewayProcess(data, token=TOKEN, extra_args=["--concurrent-frames"]), llm)
    yield gw
    gw.stop()


@pytest.fixture(params=["loopback", "guarded"])
def gw(request: pytest.FixtureRequest) -> GatewayProcess:
    found: GatewayProcess = request.getfixturevalue(request.param)
    return found


# --- a WindieOS client ----------------------------------------------------------------------------------------------


class Windie:
    """What a WindieOS SDK does on the wire: a bearer at the upgrade, the handshake, then enveloped messages."""

    def __init__(
        self,
        gw: GatewayProcess,
        *,
        user: str | None = None,
        bearer: str | None = None,
        handshake: dict[str, Any] | None = None,
        sdk: str = "ts",
        query: str = "",
    ) -> None:
        token = bearer if bearer is not None else gw.token
        headers = {"Authorization": f"Bearer {token}"} if token else None
        self.user = user or f"user-{uuid.uuid4().hex[:8]}"
        self.sdk = sdk
        self.ws: ClientConnection = ws_connect(
            gw.url + query, open_timeout=10, close_timeout=2, max_size=None, additional_headers=headers
        )
        self.received: list[dict[str, Any]] = []
        self._unread: list[dict[str, Any]] = []
        if handshake is not False:
            self.send_raw(handshake if handshake is not None else self.handshake())

    def handshake(self, tools: list[dict[str, Any]] | None = None, mode: str = "default_plus_client") -> dict[str, Any]:
        definition: dict[str, Any] = {"version": 1, "tools": {"mode": mode}}
        if tools is not None:
            definition["tools"]["client_manifest"] = {"version": 1, "tools": tools}
        frame: dict[str, Any] = {"type": "handshake", "user_id": self.user, "agent_definition": definition}
        if self.sdk == "python":
            frame["operating_system"] = "Linux"
        return frame

    def __enter__(self) -> Windie:
        return self

    def __exit__(self, *_: Any) -> None:
        self.ws.close()

    def send_raw(self, frame: Any) -> None:
        self.ws.send(frame if isinstance(frame, str) else json.dumps(frame))

    def send(self, kind: str, payload: dict[str, Any], rid: str | None = None, **top: Any) -> str:
        rid = rid or str(uuid.uuid4())
        frame: dict[str, Any] = {"id": rid, "type": kind, "payload": payload, **top}
        if self.sdk == "ts":  # the TypeScript SDK's envelope
            frame.setdefault("user_id", self.user)
            frame.setdefault("timestamp", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        self.send_raw(frame)
        return rid

    def _read(self, timeout: float) -> dict[str, Any]:
        frame = json.loads(self.ws.recv(timeout=timeout))
        self.received.append(frame)
        return frame

    def take(self, wanted: Callable[[dict[str, Any]], bool], timeout: float = 60.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        for i, frame in enumerate(self._unread):
            if wanted(frame):
                return self._unread.pop(i)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no wanted frame within {timeout}s; unread: {self._unread}")
            frame = self._read(remaining)
            if wanted(frame):
                return frame
            self._unread.append(frame)

    def reply(self, rid: str, kind: str | None = None, timeout: float = 30.0) -> dict[str, Any]:
        return self.take(lambda f: f.get("id") == rid and (kind is None or f.get("type") == kind), timeout)

    def turn(self, rid: str, timeout: float = 90.0) -> list[dict[str, Any]]:
        """Every event of one turn, up to its `streaming-complete` or `error`."""
        events = []
        while True:
            event = self.take(lambda f: f.get("turn_ref") == rid or f.get("id") == rid, timeout)
            events.append(event)
            if event["type"] in ("streaming-complete", "error"):
                return events

    def query(self, rid: str, text: str, conversation: str, **payload: Any) -> list[dict[str, Any]]:
        self.send("query", {"text": text, "conversation_ref": conversation, **payload}, rid)
        return self.turn(rid)

    def closed(self, timeout: float = 15.0) -> int | None:
        """The close code once the server closed the socket (frames before it are kept)."""
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                self._unread.append(self._read(max(0.1, deadline - time.monotonic())))
        except ConnectionClosed as exc:
            return exc.rcvd.code if exc.rcvd is not None else None
        raise AssertionError("the socket was not closed")


def assert_turn(rid: str, conversation: str, user: str, events: list[dict[str, Any]]) -> None:
    """§3.2: every event of the turn carries its correlation fields; `sequence` increases; `event_id`s differ."""
    for event in events:
        assert TURN_FIELDS <= set(event), event
        assert event["id"] == rid and event["turn_ref"] == rid and event["conversation_ref"] == conversation
        assert event["user_id"] == user and isinstance(event["session_id"], str) and event["session_id"]
    sequences = [e["sequence"] for e in events]
    assert sequences == sorted(sequences) and len(set(sequences)) == len(sequences), sequences
    assert len({e["event_id"] for e in events}) == len(events)
    assert events[0]["type"] == "query-accepted"


def deltas(events: list[dict[str, Any]]) -> str:
    return "".join(e["payload"]["text"] for e in events if e["type"] == "streaming-response")


def conversation() -> str:
    return f"conv_{uuid.uuid4().hex[:8]}"


def _install(gw: GatewayProcess) -> tuple[str, str]:
    from orbital.store import installs

    services = store_for(gw)
    install, token = installs.register(
        services.table, "macOS", now_ms=int(time.time() * 1000), gateway_token=gw.token or ""
    )
    return install.user_id, token


# --- check 1: the client manifest ----------------------------------------------------------------------------------


def test_1_the_manifest_is_answered_accepted_and_rejected(gw: GatewayProcess) -> None:
    # (sent a moment after the upgrade: under load, past the loopback gateway's 250 ms, after Exoclaw's hello)
    client = Windie(gw, handshake=False)
    no_schema = {"name": "no_schema", "description": "x"}
    reserved = {**READ_FILE, "name": "gsv__ReadFile"}
    with client:
        client.send_raw(client.handshake([READ_FILE]))
        manifest = client.take(lambda f: f.get("type") == "client-tool-manifest")
        assert manifest["payload"]["accepted"] == [
            {"name": "read_file", "description": READ_FILE["description"], "execution_target": "local_runtime"}
        ]
        assert manifest["payload"]["rejected"] == []
    with Windie(gw, handshake=False) as other:
        other.send_raw(other.handshake([READ_FILE, no_schema, reserved]))
        rejected = other.take(lambda f: f.get("type") == "client-tool-manifest")["payload"]["rejected"]
        assert {"name": "gsv__ReadFile", "reason": "reserved backend tool names cannot be overridden"} in rejected
        assert [r["name"] for r in rejected] == ["no_schema", "gsv__ReadFile"]


# --- check 2: a bad handshake closes the socket --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("first", "query"),
    [
        pytest.param({"type": "handshake", "user_id": "u", "requested_agent_policy": {}}, "", id="removed-field"),
        pytest.param({"id": "q", "type": "query", "payload": {"text": "hi", "conversation_ref": "c"}}, "", id="query"),
        pytest.param("{not json", "?dialect=windie", id="invalid-json"),
        pytest.param({"type": "handshake", "user_id": "u", "operating_system": 7}, "", id="non-string-os"),
    ],
)
def test_2_an_invalid_first_frame_is_refused_with_1008(gw: GatewayProcess, first: Any, query: str) -> None:
    with Windie(gw, handshake=False, query=query) as client:
        client.send_raw(first)
        assert client.closed() == 1008
        (error,) = [f for f in client._unread if f["type"] == "error"]
        assert error["payload"]["message"].startswith("Invalid handshake")


# --- check 3: tokens -----------------------------------------------------------------------------------------------


def test_3_a_wrong_bearer_is_refused_at_the_upgrade(guarded: GatewayProcess) -> None:
    for wrong in ("wrong", "wnd_install_not-a-real-one"):
        with pytest.raises(InvalidStatus) as refused:
            Windie(guarded, bearer=wrong)
        assert refused.value.response.status_code == 401


def test_3_no_bearer_is_refused_after_the_handshake(guarded: GatewayProcess) -> None:
    with Windie(guarded, bearer="") as client:
        assert client.closed() == 1008
        assert client._unread[-1]["type"] == "error"


def test_3_an_install_token_is_its_user_and_speaks_windie_only(gw: GatewayProcess) -> None:
    user, token = _install(gw)
    conv = conversation()
    with Windie(gw, bearer=token, user="someone-else") as client:
        events = client.query("it-1", "reply with exactly: MINE", conv)
        assert_turn("it-1", conv, user, events)  # the token's user, not the claimed one
        schemas = next(e for e in events if e["type"] == "tool-schemas")["payload"]["tool_schemas"]
        offered = {s["function"]["name"] for s in schemas}
        assert offered == set()  # a guest: no backend tool, not even the agent's files
        assert events[-1]["payload"]["final_response"] == "MINE"
        # its GSV requests are refused, whatever it sends
        client.send_raw({"type": "req", "id": "g1", "method": "config.get", "params": {}})
        client.send("load-settings", {}, "after")
        assert client.reply("after")["type"] == "settings-loaded"
        assert not any(f.get("type") == "res" and f.get("ok") for f in client._unread + client.received)
        # provider keys are the gateway owner's business
        client.send("update-settings", {"provider_api_keys": {"openai": {"enabled": True, "api_key": "sk-x"}}}, "k")
        assert client.reply("k")["type"] == "error"
    with _admin(gw) as admin:
        entry = next(
            s
            for s in admin.call("sessions.list", {"limit": 500})["sessions"]
            if s.get("label") == f"windie:{user}:{conv}"
        )
        assert entry["sessionKey"].startswith("agent:")


# --- check 4: a turn and its correlation fields --------------------------------------------------------------------


@pytest.mark.parametrize("sdk", ["ts", "python"])
def test_4_a_query_streams_with_every_correlation_field(gw: GatewayProcess, sdk: str) -> None:
    with Windie(gw, sdk=sdk) as client:
        events = client.query("turn-1", "reply with exactly: PONG_W", "conv_a")
        assert_turn("turn-1", "conv_a", client.user, events)
        assert deltas(events) == "PONG_W"
        assert events[-1]["type"] == "streaming-complete" and events[-1]["payload"]["final_response"] == "PONG_W"
        kinds = [e["type"] for e in events]
        assert kinds[:3] == ["query-accepted", "system-prompt", "tool-schemas"]  # the conversation's first turn
        assert "token-count" in kinds and "assistant-message-full" in kinds
        assert all(s["type"] == "function" for s in events[2]["payload"]["tool_schemas"])
        again = client.query("turn-2", "reply with exactly: AGAIN", "conv_a")
        assert "system-prompt" not in [e["type"] for e in again]
        assert again[0]["session_id"] == events[0]["session_id"]


def test_4_sequences_are_numbered_per_turn_as_the_typescript_sdk_requires(gw: GatewayProcess) -> None:
    """The SDK keys sequences by `turn_ref` and takes a turn's events only numbered 1, 2, 3 ... with no gap
    (`tests.support.windie_sdk`, its rule applied to every frame each socket received): two turns streaming at once
    on one socket, a third at the same time on another socket of another user, a turn with a backend tool, a
    conversation's second turn, a turn answered at once (a command) and a compaction."""
    first, second, third = conversation(), conversation(), conversation()
    with Windie(gw) as one, Windie(gw) as two:
        one.send("query", {"text": SLOW, "conversation_ref": first}, "seq-a")
        one.send("query", {"text": "reply with exactly: SEQ_B", "conversation_ref": second}, "seq-b")
        two.send("query", {"text": SLOW, "conversation_ref": third}, "seq-c")
        turns = {"seq-b": one.turn("seq-b"), "seq-a": one.turn("seq-a"), "seq-c": two.turn("seq-c")}
        turns["seq-tool"] = one.query("seq-tool", "TOOL:gsv__ListFiles {}", first)
        turns["seq-again"] = two.query("seq-again", "reply with exactly: SEQ_AGAIN", third)
        turns["seq-command"] = one.query("seq-command", "/status", second)
        one.send("compact-history", {"conversation_ref": second, "force": True}, "seq-compact")
        one.take(lambda f: f.get("id") == "seq-compact" and f["type"] != "context-compaction-started")
    assert deltas(turns["seq-b"]) == "SEQ_B" and deltas(turns["seq-a"]).startswith("slow")
    assert [e["type"] for e in turns["seq-tool"]].count("tool-output") == 1
    for rid, events in turns.items():
        assert [e["sequence"] for e in events] == list(range(1, len(events) + 1)), (rid, events)
    compaction = [f for f in one.received if f.get("turn_ref") == "seq-compact"]
    assert [f["sequence"] for f in compaction] == [1, 2], compaction
    assert sdk_refusals(one.received) == [] and sdk_refusals(two.received) == []


def test_4_a_gsv_client_sees_the_conversation(loopback: GatewayProcess) -> None:
    conv = conversation()
    with _admin(loopback) as admin, Windie(loopback) as client:
        client.query("seen-1", "reply with exactly: SEEN", conv)
        listed = admin.call("sessions.list", {"limit": 500})["sessions"]
        (entry,) = [s for s in listed if s.get("label") == f"windie:{client.user}:{conv}"]
        assert ":windie:group:" in entry["sessionKey"]
        preview = admin.call("session.preview", {"sessionKey": entry["sessionKey"]})
        assert [m["role"] for m in preview["messages"]] == ["user", "assistant"]
        client.send("query", {"text": "reply with exactly: LIVE", "conversation_ref": conv}, "seen-2")
        client.turn("seen-2")
        finals = []
        deadline = time.monotonic() + 30
        while not finals and time.monotonic() < deadline:
            event = admin.next_event("chat", timeout=deadline - time.monotonic())["payload"]
            if event.get("sessionKey") == entry["sessionKey"] and event.get("state") == "final":
                finals.append(event)
        assert finals


# --- checks 5 and 6: bad envelopes ---------------------------------------------------------------------------------


def test_5_an_unknown_envelope_key_is_an_error_and_the_socket_stays(gw: GatewayProcess) -> None:
    with Windie(gw) as client:
        client.send("load-settings", {}, "bad", foo=1)
        error = client.reply("bad")
        assert error["type"] == "error" and isinstance(error["payload"]["message"], str)
        assert "foo" in error["payload"]["message"]
        client.send("load-settings", {}, "good")
        assert client.reply("good")["type"] == "settings-loaded"


def test_6_a_query_without_conversation_ref_is_an_error_and_no_stream(gw: GatewayProcess) -> None:
    with Windie(gw) as client:
        client.send("query", {"text": "reply with exactly: NOPE"}, "q6")
        assert client.reply("q6")["type"] == "error"
        client.send("load-settings", {}, "after")
        client.reply("after", "settings-loaded")
        assert [f["type"] for f in client.received if f.get("id") == "q6"] == ["error"]


# --- checks 7 and 8: a tool on the client --------------------------------------------------------------------------


def _tool_client(gw: GatewayProcess, mode: str = "client_only") -> Windie:
    client = Windie(gw, handshake=False)
    client.send_raw(client.handshake([READ_FILE], mode=mode))
    client.take(lambda f: f.get("type") == "client-tool-manifest")
    return client


def test_7_a_client_tool_runs_on_the_client(gw: GatewayProcess) -> None:
    conv = conversation()
    with _tool_client(gw) as client:
        client.send("query", {"text": 'TOOL:read_file {"path":"a.txt"}', "conversation_ref": conv}, "t7")
        call = client.take(lambda f: f["type"] == "tool-call" and f["id"] == "t7")
        body = call["payload"]
        assert body["tool_name"] == "read_file" and body["parameters"] == {"path": "a.txt"}
        assert isinstance(body["request_id"], str) and isinstance(body["metadata"]["tool_call_id"], str)
        result = {"request_id": body["request_id"], "success": True, "data": {"output": "reply with exactly: DONE_W"}}
        client.send("tool-result", {**result, "error": None})
        events = client.turn("t7")
        assert_turn("t7", conv, client.user, [e for e in client.received if e.get("turn_ref") == "t7"])
        assert events[-1]["type"] == "streaming-complete" and events[-1]["payload"]["final_response"] == "DONE_W"
        assert not [e for e in client.received if e["type"] == "tool-output"]  # it ran here: no tool-output
        schemas = next(e for e in client.received if e["type"] == "tool-schemas" and e["id"] == "t7")
        assert [s["function"]["name"] for s in schemas["payload"]["tool_schemas"]] == ["read_file"]  # client_only
        # a tool the run was not offered is refused, not run
        events = client.query("t7-not-offered", "TOOL:gsv__ListFiles {}", conv)
        (refused,) = [e for e in events if e["type"] == "tool-output"]
        assert refused["payload"]["success"] is False and "not available" in refused["payload"]["output"]


def test_7_a_backend_tool_is_reported_as_tool_output(gw: GatewayProcess) -> None:
    with _tool_client(gw, mode="default_plus_client") as client:
        events = client.query("t7b", "TOOL:gsv__ListFiles {}", conversation())
        (output,) = [e for e in events if e["type"] == "tool-output"]
        assert output["payload"]["tool_name"] == "gsv__ListFiles" and output["payload"]["success"] is True
        assert not [e for e in events if e["type"] == "tool-call"]
        assert events[-1]["type"] == "streaming-complete"


def test_8_a_client_that_goes_away_fails_its_call_at_once(gw: GatewayProcess) -> None:
    conv = conversation()
    client = _tool_client(gw)
    with client:
        client.send("query", {"text": 'TOOL:read_file {"path":"a.txt"}', "conversation_ref": conv}, "t8")
        client.take(lambda f: f["type"] == "tool-call")
        session = next(f["session_id"] for f in client.received if f.get("turn_ref") == "t8")
    with _admin(gw) as admin:
        deadline = time.monotonic() + 30  # far less than timeouts.toolMs (5 minutes by default)
        while True:
            messages = admin.call("session.preview", {"sessionKey": session})["messages"]
            results = [m for m in messages if m.get("role") == "toolResult"]
            if results and messages[-1]["role"] == "assistant":
                break
            assert time.monotonic() < deadline, messages
            time.sleep(0.1)
        assert results[0]["isError"] is True and "Client disconnected" in json.dumps(results[0]["content"])


def test_8_a_client_that_never_answers_is_bounded_by_the_tool_timeout(loopback: GatewayProcess) -> None:
    with _admin(loopback) as admin:
        admin.call("config.set", {"path": "timeouts.toolMs", "value": 1500})
        try:
            with _tool_client(loopback) as client:
                client.send(
                    "query", {"text": 'TOOL:read_file {"path":"a.txt"}', "conversation_ref": conversation()}, "t8b"
                )
                client.take(lambda f: f["type"] == "tool-call")
                events = client.turn("t8b", timeout=30)
                assert events[-1]["type"] == "streaming-complete"
                assert "timed out" in events[-1]["payload"]["final_response"]
        finally:
            admin.call("config.set", {"path": "timeouts.toolMs"})


# --- checks 9-11: settings and models ------------------------------------------------------------------------------


def test_9_settings_load_with_every_key_blank(gw: GatewayProcess) -> None:
    with Windie(gw) as client:
        client.send("load-settings", {"client_version": "1.0.0"}, "ls")
        config = client.reply("ls", "settings-loaded")["payload"]["config"]
        assert isinstance(config["model_provider"], str) and isinstance(config["selected_model_id"], str)
        assert config["provider_api_keys"] and all(v["api_key"] == "" for v in config["provider_api_keys"].values())
        assert "sk-e2e-key" not in json.dumps(client.received)


def test_10_a_model_choice_is_kept_and_used_by_the_next_query(gw: GatewayProcess, llm: FakeLLM) -> None:
    with _admin(gw) as admin:
        admin.call("config.set", {"path": "providers.openai.models", "value": ["gpt-test", "gpt-chosen"]})
    with Windie(gw) as client:
        client.send("update-settings", {"model_provider": "openai", "selected_model_id": "gpt-unlisted"}, "no")
        assert "not offered" in client.reply("no", "error")["payload"]["message"]
        choice = {"model_provider": "openai", "selected_model_id": "gpt-chosen@@variant", "wakeword_enabled": True}
        client.send("update-settings", choice, "us")
        updated = client.reply("us", "settings-updated")["payload"]["updated_keys"]
        assert {"model_provider", "selected_model_id"} <= set(updated)
        client.send("load-settings", {}, "ls")
        config = client.reply("ls", "settings-loaded")["payload"]["config"]
        assert config["selected_model_id"] == "gpt-chosen@@variant" and config["wakeword_enabled"] is True
        marker = f"reply with exactly: CHOSEN_{uuid.uuid4().hex[:6]}"
        client.query("after-choice", marker, conversation())
        (asked,) = [r for r in llm.requests if marker in json.dumps(r.body.get("messages"))]
        assert asked.body["model"] == "gpt-chosen"
        client.send("update-settings", {"model_mode": "nonsense"}, "bad")
        assert client.reply("bad")["type"] == "error"


def test_11_models_are_listed(gw: GatewayProcess) -> None:
    with Windie(gw) as client:
        client.send("list-models", {}, "lm")
        listed = client.reply("lm", "models-listed")["payload"]
        assert all(isinstance(listed[k], list) for k in ("local", "online", "vision"))
        assert listed["online"] and all({"id", "provider", "display_name"} <= set(m) for m in listed["online"])
        assert {"id": "gpt-test", "provider": "openai"}.items() <= next(
            m for m in listed["online"] if m["id"] == "gpt-test"
        ).items()


# --- check 12: rehydrate -------------------------------------------------------------------------------------------


def test_12_rehydrate_replaces_one_conversation_only(gw: GatewayProcess) -> None:
    with Windie(gw) as client:
        kept = client.query("r-a", "reply with exactly: KEEP", "conv_a_r")
        history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
        client.query("r-b", "reply with exactly: OLD", "conv_b")
        payload = {"conversation_ref": "conv_b", "messages": history, "rehydrate_mode": "replace"}
        client.send("rehydrate-conversation", {**payload, "workspace_path": "/tmp/x"}, "rh")
        with _admin(gw) as admin:
            listed = admin.call("sessions.list", {"limit": 500})["sessions"]
            b = next(s["sessionKey"] for s in listed if s.get("label") == f"windie:{client.user}:conv_b")
            deadline = time.monotonic() + 20  # nothing says it is done (frames may be handled concurrently)
            while True:
                shown = admin.call("session.preview", {"sessionKey": b})["messages"]
                if [(m["role"], _text(m)) for m in shown] == [("user", "hi"), ("assistant", "hello")]:
                    break
                assert time.monotonic() < deadline, shown
                time.sleep(0.05)
            a = admin.call("session.preview", {"sessionKey": kept[0]["session_id"]})["messages"]
            assert [_text(m) for m in a] == ["reply with exactly: KEEP", "KEEP"]
        # a missing screenshot is skipped; the text stays
        missing = [{"role": "user", "content": "look", "screenshot_ref": f"{uuid.uuid4()}.png"}]
        client.send("rehydrate-conversation", {"conversation_ref": "conv_b", "messages": missing}, "rh2")
        client.send("rehydrate-conversation", {"conversation_ref": "conv_b", "messages": "no"}, "rh3")
        assert client.reply("rh3")["type"] == "error"
        with _admin(gw) as admin:
            deadline = time.monotonic() + 20
            while [_text(m) for m in admin.call("session.preview", {"sessionKey": b})["messages"]] != ["look"]:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        client.send("load-settings", {}, "after")
        client.reply("after", "settings-loaded")
        assert [f for f in client.received if f.get("id") in ("rh", "rh2")] == []  # nothing on success


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content or [] if isinstance(b, dict))


# --- check 13: stop ------------------------------------------------------------------------------------------------


def test_13_stop_query_acks_and_nothing_follows(gw: GatewayProcess, llm: FakeLLM) -> None:
    conv = conversation()
    with Windie(gw) as client:
        client.send("query", {"text": SLOW, "conversation_ref": conv}, "s13")
        client.take(lambda f: f["type"] == "streaming-response" and f["id"] == "s13")
        client.send("stop-query", {"conversation_ref": conv}, "stop")
        ack = client.reply("stop", "stop-query-ack")
        assert ack["payload"]["stopped"] is True
        # the slow reply would have ended within 6 s: once the model server has nothing pending, nothing is coming
        deadline = time.monotonic() + 20
        while llm.pending and time.monotonic() < deadline:
            time.sleep(0.05)
        events = client.query("s13-next", "reply with exactly: NEXT", conv)
        assert events[-1]["payload"]["final_response"] == "NEXT"
        after_ack = client.received[client.received.index(ack) + 1 :]
        # the end of the turn never follows the acknowledgement; a piece of streamed text numbered just before the
        # stop may (ADR 0028), then none
        assert {f["type"] for f in after_ack if f.get("turn_ref") == "s13"} <= {"streaming-response"}
        streamed = deltas([f for f in client.received if f.get("turn_ref") == "s13"])
        assert streamed and len(streamed) < len("slow " * 30)  # and it was cut short: never the whole reply
        # nothing runs now: nothing is stopped
        client.send("stop-query", {"conversation_ref": conv}, "stop-again")
        assert client.reply("stop-again", "stop-query-ack")["payload"]["stopped"] is False


def test_13_stop_query_names_its_turn_exactly_running_or_queued(gw: GatewayProcess, llm: FakeLLM) -> None:
    conv = conversation()
    with Windie(gw) as client:
        client.send("query", {"text": SLOW, "conversation_ref": conv}, "a b")
        client.take(lambda f: f["type"] == "streaming-response" and f["id"] == "a b")
        marker = f"QUEUED_{uuid.uuid4().hex[:6]}"
        client.send("query", {"text": f"reply with exactly: {marker}", "conversation_ref": conv}, "waits")
        client.reply("waits", "query-accepted")
        client.send("stop-query", {"conversation_ref": conv, "turn_ref": "a-b"}, "other")  # a turn that is not there
        assert client.reply("other", "stop-query-ack")["payload"]["stopped"] is False
        client.send("stop-query", {"conversation_ref": conv, "turn_ref": "waits"}, "queued")
        assert client.reply("queued", "stop-query-ack")["payload"]["stopped"] is True
        running = client.turn("a b")  # the running turn was left alone, and ends
        assert running[-1]["type"] == "streaming-complete" and deltas(running).startswith("slow")
        events = client.query("after", "reply with exactly: AFTER", conv)
        assert events[-1]["payload"]["final_response"] == "AFTER"
        assert [f["type"] for f in client.received if f.get("turn_ref") == "waits"] == ["query-accepted"]
        assert not [r for r in llm.requests if marker in json.dumps(r.body)]  # it never ran


# --- the rest of the protocol --------------------------------------------------------------------------------------


def test_wakeword_bundles_and_unknown_types(loopback: GatewayProcess) -> None:
    with Windie(loopback) as client:
        client.send("wakeword-detected", {}, "w")
        assert client.reply("w", "wakeword-activated")["payload"]["status"] == "listening"
        assert client.reply("w", "wakeword-greeting")["payload"]["text"]
        client.send("tool-bundle-result", {"bundle_id": "b", "status": "success", "step_results": []}, "tb")
        client.send("nonsense", {}, "n")
        assert client.reply("n")["type"] == "error"
        assert [f for f in client.received if f.get("id") == "tb"] == []


def test_compact_history(loopback: GatewayProcess) -> None:
    conv = conversation()
    with Windie(loopback) as client:
        client.query("c1", "reply with exactly: ONE", conv)
        client.send("compact-history", {"conversation_ref": conv, "force": True}, "ch")
        assert client.reply("ch", "context-compaction-started")["payload"]["conversation_ref"] == conv
        done = client.take(lambda f: f.get("id") == "ch" and f["type"] != "context-compaction-started")
        assert done["type"] in ("context-compaction-completed", "context-compaction-failed")
        assert done["conversation_ref"] == conv


def test_a_screenshot_artifact_reaches_the_model(gw: GatewayProcess, llm: FakeLLM) -> None:
    from orbital.store import artifacts

    png = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000") + b"\x00" * 16
    services = store_for(gw)
    mine = artifacts.save(services.workspace, png, owner=artifacts.GATEWAY_OWNER, mime_type="image/png")
    assert ARTIFACT.match(mine.artifact_id)
    marker = f"reply with exactly: SEEN_{uuid.uuid4().hex[:6]}"
    with Windie(gw) as client:
        refs = [mine.artifact_id, f"{uuid.uuid4()}.png"]  # the second is missing: skipped
        events = client.query("img", marker, conversation(), screenshot_refs=refs)
        assert events[-1]["type"] == "streaming-complete"
    (asked,) = [r for r in llm.requests if marker in json.dumps(r.body.get("messages"))]
    assert json.dumps(asked.body["messages"]).count("image") >= 1
