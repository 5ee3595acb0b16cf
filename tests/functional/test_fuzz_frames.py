"""Generated frames against the dispatcher and every method, with the real handlers over moto (state machines
included): no reply is a 500, nothing raises, the socket stays usable, and a rejected call changes no state.

The number of frames per test comes from `ORBITAL_FUZZ_FRAMES` (default 100, so `make test` stays quick; `make fuzz`
runs 10,000 a test). Examples are derived from a fixed seed, so a run is repeatable; before each call the work an
earlier accepted call started in the background is let finish, so a state change is the call's own.
"""

from __future__ import annotations

import json
import os
from typing import Any

import boto3
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
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
