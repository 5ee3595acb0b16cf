"""Generated frames against the dispatcher and every method, with the real handlers over moto (state machines
included): no reply is a 500, nothing raises, the socket stays usable, and a rejected call changes no state.

The same kind of frames (their `type`, `method` and `id` any JSON value, lists and objects included, and each
dialect's own requests with fields of any type) go through the local bridge's routing, over real sockets of every
dialect on a real local gateway, and through the AWS WebSocket handler: no handler fails, no socket is closed, and
each socket still answers a good request of its dialect afterwards.

The number of frames per test comes from `ORBITAL_FUZZ_FRAMES` (default 100, so `make test` stays quick; `make fuzz`
runs 10,000 a test). Examples are derived from a fixed seed, so a run is repeatable; before each call the work an
earlier accepted call started in the background is let finish, so a state change is the call's own.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import boto3
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from orbital.dialects.detect import WINDIE_TYPES
from orbital.methods import registry

from tests.conftest import BUCKET, TABLE, Rpc

FRAMES = int(os.environ.get("ORBITAL_FUZZ_FRAMES", "100"))
FUZZ = settings(
    max_examples=FRAMES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)

SKIPPED = {"connect"}  # re-identifies the socket; fuzzed on a fresh socket of its own below
METHODS = sorted(set(registry().names()) - SKIPPED)
NAMES = st.sampled_from(["path", "value", "sessionKey", "message", "id", "limit", "offset", "tool", "args", "jobId"])

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=False)
    | st.text(max_size=40)
    | st.sampled_from(["", "..", "../etc/passwd", "agent:main:main", "/new", "*", "\x00", "a" * 300, "skills/x"])
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8) | NAMES, inner, max_size=4),
    max_leaves=12,
)


def params_for(method: str) -> st.SearchStrategy[Any]:
    """Mostly the method's own field names with values of any type (what gets past the first checks), sometimes
    anything at all."""
    spec = registry().get(method)
    fields = list(spec.params.model_fields) if spec is not None else []
    if not fields:
        return json_values
    shaped = st.dictionaries(st.sampled_from(fields), json_values, max_size=len(fields))
    return st.one_of(shaped, shaped, json_values)


requests = st.sampled_from(METHODS).flatmap(
    lambda method: st.fixed_dictionaries(
        {"type": st.just("req"), "id": st.text(min_size=1, max_size=12), "method": st.just(method)},
        optional={"params": params_for(method)},
    )
)
garbage = st.one_of(
    st.text(max_size=200),
    json_values.map(lambda v: json.dumps(v)),
    st.fixed_dictionaries(
        {"type": st.sampled_from(["req", "res", "evt", "bin", "x"])}, optional={"id": json_values}
    ).map(json.dumps),
)


def _state() -> tuple[Any, Any]:
    """Every item and object, read from moto's backends directly (its response serializer would cost more than the
    call under test)."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.dynamodb.models import dynamodb_backends
    from moto.s3.models import s3_backends

    table = dynamodb_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].get_table(TABLE)
    items = sorted(json.dumps(item.to_json(), sort_keys=True) for item in table.all_items())
    bucket = s3_backends[DEFAULT_ACCOUNT_ID]["aws"].get_bucket(BUCKET)
    objects = sorted((name, key.etag) for name, key in bucket.keys.items() if key is not None)
    return items, objects


_made: dict[str, Any] = {}


def _clients() -> tuple[Any, Any]:
    if not _made:
        _made["ddb"] = boto3.client("dynamodb", region_name="us-east-1")
        _made["s3"] = boto3.client("s3", region_name="us-east-1")
        _made["sfn"] = boto3.client("stepfunctions", region_name="us-east-1")
    return _made["ddb"], _made["s3"]


def _quiet(flows: dict[str, str]) -> None:
    """Let the work an accepted call started in the background (an agent turn of `chat.send` or
    `heartbeat.trigger`, a deferred call) end first, so that the state compared around the next call is its own."""
    import time

    _clients()
    sfn = _made["sfn"]

    def running() -> list[str]:
        return [
            ex["executionArn"]
            for arn in flows.values()
            for ex in sfn.list_executions(stateMachineArn=arn, statusFilter="RUNNING")["executions"]
        ]

    deadline = time.monotonic() + 15
    while running() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert running() == [], "background work did not end"


KEEP_ITEMS = 100
"""Past this many items the table and the bucket are emptied between two examples (and the socket connects again),
so comparing the state around a call stays cheap however many examples a run has (`make fuzz`: 10,000)."""


def _keep_small(rpc: Rpc) -> None:
    from orbital.local.template import load_template, table_definition

    from tests.conftest import ROOT

    ddb, s3 = _clients()
    if ddb.scan(TableName=TABLE, Select="COUNT", ConsistentRead=True)["Count"] <= KEEP_ITEMS:
        return
    ddb.delete_table(TableName=TABLE)
    _, definition = table_definition(load_template(ROOT / "template.yaml"))
    ddb.create_table(TableName=TABLE, **definition)
    for obj in s3.list_objects_v2(Bucket=BUCKET).get("Contents", []):
        s3.delete_object(Bucket=BUCKET, Key=obj["Key"])
    rpc.call("connect", {"minProtocol": 1, "client": {"mode": "client", "id": "fuzzer"}})


def _usable(rpc: Rpc) -> None:
    assert rpc.call("config.get", {"path": "userTimezone"})["path"] == "userTimezone"


@pytest.fixture
def socket(flows: Any, connect: Any) -> Rpc:
    rpc: Rpc = connect("client", "fuzzer")
    rpc.flows = flows  # type: ignore[attr-defined]
    return rpc


@FUZZ
@given(frame=requests)
def test_generated_requests(socket: Rpc, frame: dict[str, Any]) -> None:
    _quiet(socket.flows)  # type: ignore[attr-defined]
    _keep_small(socket)
    before = _state()
    outcome = socket.dispatcher.dispatch_text(socket.services, socket.connection_id, json.dumps(frame))
    outcome.run_after_reply()
    response = outcome.response
    if response is not None:
        assert response["type"] == "res" and response["id"] == frame["id"]
        if not response["ok"]:
            error = response["error"]
            assert isinstance(error.get("code"), int) and isinstance(error.get("message"), str) and error["message"]
            assert error["code"] != 500, f"{frame['method']}: {error}"
            assert _state() == before, f"{frame['method']} was refused ({error}) but changed the state"
    _usable(socket)


@FUZZ
@given(text=garbage)
def test_garbage_frames(socket: Rpc, text: str) -> None:
    _keep_small(socket)
    before = _state()
    outcome = socket.dispatcher.dispatch_text(socket.services, socket.connection_id, text)
    response = outcome.response
    if response is not None:
        assert response["ok"] is False and response["error"]["code"] != 500
    assert _state() == before
    _usable(socket)


@FUZZ
@given(params=params_for("connect"))
def test_generated_connects(flows: Any, services: Any, params: Any) -> None:
    rpc = Rpc(services, "fuzz-connect")
    response = rpc.frame("connect", params)
    assert response is not None
    if not response["ok"]:
        assert response["error"]["code"] != 500, response["error"]
    else:
        assert response["payload"]["type"] == "hello-ok"
    # whatever happened, the socket can still connect properly
    assert (
        rpc.call("connect", {"minProtocol": 1, "client": {"mode": "client", "id": "after-fuzz"}})["type"] == "hello-ok"
    )


# --- the local bridge's own routing, and every dialect behind it, over a real socket -----------------------------

containers = st.lists(json_values, min_size=1, max_size=3) | st.dictionaries(
    st.text(max_size=5), json_values, max_size=3
)
"""What cannot be a set member or a dict key (a list, an object): what a `method in {...}` test raises on."""
any_value = containers | json_values
kinds = st.sampled_from(["req", "bin", "res", "evt", "query", "stop-query", "list-models", "tool-result", "x"])
methods = st.sampled_from(["config.get", "chat.send", "ping", "status", "plugin.list", "gateway.query", "nope"])
routed = st.fixed_dictionaries(
    {"type": kinds, "method": any_value, "id": any_value},
    optional={"params": any_value, "payload": any_value},
)
"""A frame with a route (`type`) whose `method` and `id` are any JSON value: lists and objects included."""
unrouted = st.fixed_dictionaries(
    {"method": any_value | methods, "id": any_value},
    optional={"jsonrpc": st.sampled_from(["2.0", 2]) | any_value, "params": any_value, "token": any_value},
)
"""A frame without a `type` (xeno's and Exoclaw's), with any `method` and `id`."""
frame_fields = st.fixed_dictionaries(
    {},
    optional={
        "type": any_value | kinds,
        "method": any_value | methods,
        "id": any_value,
        "params": any_value,
        "payload": any_value,
        "jsonrpc": st.sampled_from(["2.0", 2, None]) | any_value,
        "token": any_value,
    },
)
"""Any mix of the fields the bridge and the dialect detectors look at first, each any JSON value."""


def _fields(*names: str) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional=dict.fromkeys(names, any_value))


def _attachments() -> st.SearchStrategy[Any]:
    entry = st.fixed_dictionaries(
        {"type": containers | st.sampled_from(["image", "document", "x"]), "path": any_value},
        optional={"mimeType": any_value},
    )
    return st.lists(entry, min_size=1, max_size=2) | any_value


ids = st.integers(min_value=0, max_value=99) | st.text(min_size=1, max_size=6)
shaped = {
    "gsv": routed.map(lambda f: {**f, "type": "req"}),
    "xeno": st.fixed_dictionaries(
        {
            "jsonrpc": st.just("2.0"),
            "id": ids,
            "method": st.sampled_from(["gateway.query", "gateway.query", "gateway.abort", "gateway.initialize"]),
            "params": st.fixed_dictionaries(
                {"attachments": _attachments()},
                optional={"requestId": any_value, "content": any_value, "context": _fields("type") | any_value},
            ),
        }
    ),
    "exoclaw": st.fixed_dictionaries(
        {"id": ids, "method": st.sampled_from(["chat.send", "ping", "status", "plugin.list"])},
        optional={"params": _fields("channel", "account", "peer", "content", "guild", "team") | any_value},
    ),
    "windie": st.fixed_dictionaries(
        {"id": ids, "type": st.sampled_from(sorted(WINDIE_TYPES))},
        optional={
            "payload": _fields("conversation_ref", "text", "content", "turn_ref", "request_id", "messages") | any_value
        },
    ),
}
"""Requests of each dialect's methods (its own socket's) whose fields hold any JSON value."""
bridge_texts = st.one_of(
    routed.map(json.dumps),
    unrouted.map(json.dumps),
    frame_fields.map(json.dumps),
    frame_fields.map(lambda f: json.dumps([f])),  # a batch
    garbage,
)


@FUZZ
@given(text=bridge_texts)
def test_the_bridge_routes_any_text(text: str) -> None:
    """The bridge picks a frame's route before any handler runs (on the event loop, not in a handler thread): any
    text gets a route, nothing raises (an exception there would end the socket's task: a close 1006)."""
    from orbital.local.bridge import Bridge

    routes = {"$default": {"function": "frame"}, "req": {"function": "frame"}, "bin": {"function": "frame"}}
    bridge = Bridge(lambda *_: None, routes, inline_methods=frozenset({"config.get"}))
    route, inline = bridge._route_for_text(text)
    assert route in routes and isinstance(inline, bool)


class _Failures(logging.Handler):
    """The errors the gateway logs (a handler that raised among them)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


class _Sockets:
    """One socket per dialect on a real local gateway (with a token), each past its own opening: GSV connected,
    xeno and Exoclaw authenticated, WindieOS handshaken."""

    def __init__(self, url: str, token: str) -> None:
        from websockets.sync.client import connect

        self.ws: dict[str, Any] = {}
        self.count = 0
        self.failures = _Failures()
        header = {"Authorization": f"Bearer {token}"}
        for dialect in ("gsv", "xeno", "exoclaw", "windie"):
            self.ws[dialect] = connect(f"{url}?dialect={dialect}", additional_headers=header, open_timeout=10)
        self.ws["gsv"].send(
            json.dumps(
                {
                    "type": "req",
                    "id": "c",
                    "method": "connect",
                    "params": {
                        "minProtocol": 1,
                        "client": {"id": "fuzz", "mode": "client", "version": "1", "platform": "test"},
                        "auth": {"token": token},
                    },
                }
            )
        )
        self._await("gsv", lambda f: f.get("id") == "c" and f.get("ok") is True)
        self.ws["exoclaw"].send(json.dumps({"token": token}))
        self._await("exoclaw", lambda f: f.get("ok") is True)
        self.ws["windie"].send(json.dumps({"type": "handshake", "user_id": "fuzz"}))
        for dialect in self.ws:
            self.usable(dialect)

    def _await(self, dialect: str, match: Any) -> dict[str, Any]:
        import time

        ws = self.ws[dialect]
        deadline = time.monotonic() + 30
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"no answer on the {dialect} socket"
            raw = ws.recv(timeout=left)  # a closed socket raises ConnectionClosed: the test fails
            try:
                frame = json.loads(raw)
            except ValueError:
                continue
            if isinstance(frame, dict) and match(frame):
                return frame

    def usable(self, dialect: str) -> None:
        """A good request of the socket's own dialect is answered (everything it got before is read past)."""
        self.count += 1
        rid = f"ok-{self.count}"
        good = {
            "gsv": {"type": "req", "id": rid, "method": "config.get", "params": {"path": "userTimezone"}},
            "xeno": {"jsonrpc": "2.0", "id": rid, "method": "gateway.nope"},
            "exoclaw": {"id": rid, "method": "ping"},
            "windie": {"id": rid, "type": "list-models", "payload": {}},
        }[dialect]
        self.ws[dialect].send(json.dumps(good))
        answer = self._await(dialect, lambda f: f.get("id") == rid)
        expected = {"gsv": "payload", "xeno": "error", "exoclaw": "result", "windie": "payload"}[dialect]
        assert expected in answer, answer

    def close(self) -> None:
        for ws in self.ws.values():
            ws.close()


@pytest.fixture
def dialect_sockets(tmp_path: Path) -> Any:
    """(Per test: the gateway reads the environment the test's fixtures set, on the handler path.)"""
    from tests.e2e.conftest import in_process_gateway

    token = "fuzz-token-0123456789abcdefghijklmnop"
    running = in_process_gateway(tmp_path / "gateway", token=token, xeno=False, persist=False)
    gw = next(running)
    failures = _Failures()
    logging.getLogger("orbital").addHandler(failures)  # (the handlers' logger does not propagate to the root's)
    sockets = _Sockets(gw.ws_url, token)
    sockets.failures = failures
    try:
        yield sockets
    finally:
        logging.getLogger("orbital").removeHandler(failures)
        sockets.close()
        running.close()


@FUZZ
@given(
    sent=st.sampled_from(sorted(shaped)).flatmap(
        lambda d: st.tuples(st.just(d), shaped[d].map(json.dumps) | shaped[d].map(json.dumps) | bridge_texts)
    )
)
def test_generated_frames_through_the_bridge(dialect_sockets: _Sockets, sent: tuple[str, str]) -> None:
    """Any frame on a socket of any dialect, through the real bridge and the real handlers: it gets the dialect's
    answer or none, no handler fails (a failure logs "handler for … failed": no answer where the protocol has one),
    the socket stays open and its next good request is answered."""
    dialect, text = sent
    dialect_sockets.failures.records.clear()
    dialect_sockets.ws[dialect].send(text)
    dialect_sockets.usable(dialect)
    failed = [
        f"{r.getMessage()}: {r.exc_info[1]!r}" if r.exc_info else r.getMessage()
        for r in dialect_sockets.failures.records
    ]
    assert failed == [], (dialect, text, failed)


# --- the same frames through the AWS handlers (`$default` and the `type` routes, as API Gateway selects them) ---


def _aws_frame(cid: str, text: str) -> Any:
    """A text frame through the route API Gateway selects for it (`$request.body.type`: `req` or `bin` when the body
    is a JSON object with that string `type`, else `$default`); the route response's frame, if any."""
    from orbital.runtime import gateway

    try:
        body = json.loads(text)
    except ValueError:
        body = None
    kind = body.get("type") if isinstance(body, dict) else None
    route = kind if kind in ("req", "bin") else "$default"
    context = {"connectionId": cid, "routeKey": route, "eventType": "MESSAGE"}
    answer = gateway.handle_message({"requestContext": context, "body": text, "isBase64Encoded": False})
    assert answer["statusCode"] == 200
    return json.loads(answer["body"]) if "body" in answer else None


@pytest.fixture
def aws_sockets(token: str, flows: Any, sender: Any, services: Any) -> dict[str, str]:
    """One socket per dialect on the AWS handlers, each past its opening (a bearer at `$connect`)."""
    from orbital.runtime import gateway

    cids = {}
    for dialect in ("gsv", "xeno", "exoclaw", "windie"):
        cid = f"fuzz-{dialect}"
        event = {
            "requestContext": {"connectionId": cid, "routeKey": "$connect", "eventType": "CONNECT"},
            "headers": {"Authorization": f"Bearer {token}"},
        }
        assert gateway.handle_connect(event)["statusCode"] == 200
        cids[dialect] = cid
    client = {"id": "fuzz", "mode": "client", "version": "1", "platform": "test"}
    connect = {"minProtocol": 1, "client": client, "auth": {"token": token}}
    assert _aws_frame(cids["gsv"], json.dumps({"type": "req", "id": "c", "method": "connect", "params": connect}))["ok"]
    assert _aws_frame(cids["exoclaw"], json.dumps({"token": token}))["ok"] is True  # the hello
    assert _aws_frame(cids["xeno"], json.dumps({"jsonrpc": "2.0", "id": 1, "method": "gateway.nope"}))["error"]
    assert _aws_frame(cids["windie"], json.dumps({"type": "handshake", "user_id": "fuzz"})) is None
    return cids


def _aws_usable(sender: Any, cid: str, dialect: str, n: int) -> None:
    rid = f"ok-{n}"
    good = {
        "gsv": {"type": "req", "id": rid, "method": "config.get", "params": {"path": "userTimezone"}},
        "xeno": {"jsonrpc": "2.0", "id": rid, "method": "gateway.nope"},
        "exoclaw": {"id": rid, "method": "ping"},
        "windie": {"id": rid, "type": "list-models", "payload": {}},
    }[dialect]
    answer = _aws_frame(cid, json.dumps(good))
    assert answer is not None and answer.get("id") == rid, answer
    assert not [c for c in sender.closes if c[0] == cid], sender.closes


@FUZZ
@given(
    sent=st.sampled_from(sorted(shaped)).flatmap(
        lambda d: st.tuples(st.just(d), shaped[d].map(json.dumps) | shaped[d].map(json.dumps) | bridge_texts)
    )
)
def test_generated_frames_through_the_aws_handlers(aws_sockets: dict[str, str], sender: Any, sent: Any) -> None:
    """The frames of the bridge's test, through the WebSocket handler of AWS: nothing raises (a Lambda that raises
    answers nothing a client understands), no socket is closed, and each still answers a good request."""
    dialect, text = sent
    _aws_frame(aws_sockets[dialect], text)
    _aws_usable(sender, aws_sockets[dialect], dialect, len(sender.posts))
