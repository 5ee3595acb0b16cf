"""What Orbital costs to run on AWS, per kind of turn: every AWS request counted on the AWS code path, priced.

Runs the AWS path in this process as the deployment runs it: moto's DynamoDB, S3, Secrets Manager and API Gateway
management API; the template's state machines executed by moto's Step Functions interpreter, their Lambda tasks
calling the template's handlers; the WebSocket routes answered by the `ws_connect` / `ws_message` entry points with
API Gateway's events; the scheduler's tick by `scheduler_tick`; the model is the scripted fake LLM over loopback.
Each kind of turn is run once to warm up (imports, the secret's read, first-use caches: a warm container), then
measured `--rounds` times, keeping the round with the least Lambda time (the counts are the same each round).
Counted, per kind:

- every AWS API call made through the one client factory (`orbital.aws.clients`), by service and operation;
- DynamoDB request units from the items' sizes (reads per 4 KB, eventually consistent at half; writes per 1 KB of
  the larger of the item before and after, the GSI's copy of an item that has its key again; transactions double);
- API Gateway messages: frames received (one per route invocation), frames sent (route responses and
  PostToConnection), each in 32 KB units;
- Lambda invocations per function, and their duration as measured here (handler time, rounded up to the ms), at
  the memory the template configures for that function (GB-seconds);
- Step Functions state transitions, from each execution's history (states entered; a timer still waiting is
  counted with the two states it will enter when due).

Then prints the dollars per 1,000 of each kind at the us-east-1 list prices of `PRICES` below, beside what the
model itself costs for the same turn at `MODEL_PRICE` (input tokens estimated from the requests the gateway sent,
at 4 characters a token; output tokens assumed, `OUTPUT_TOKENS_PER_CALL` per model call).

    .venv/bin/python bench/aws_cost.py [--rounds 3] [--json]

Durations are this machine's (shared, 2 cores, moto in process): read the Lambda GB-seconds as an order of size.
Every count is exact for this code; the test `tests/functional/test_aws_cost.py` checks them on one kind of turn.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import itertools
import json
import math
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "layers" / "orbital"))
sys.path.insert(0, str(ROOT))

# --- prices -----------------------------------------------------------------------------------------------------

PRICES_DATE = "2026-11-28"
PRICES: dict[str, tuple[float, str, str]] = {
    # key: (USD per unit, unit, source page)
    "apigw.message": (
        1.00 / 1e6,
        "WebSocket message (32 KB units), first 1 billion a month",
        "aws.amazon.com/api-gateway/pricing",
    ),
    "apigw.connection_minute": (0.25 / 1e6, "WebSocket connection minute", "aws.amazon.com/api-gateway/pricing"),
    "lambda.request": (0.20 / 1e6, "Lambda request", "aws.amazon.com/lambda/pricing"),
    "lambda.gb_second": (
        0.0000133334,
        "Lambda GB-second, arm64, first 7.5 billion a month",
        "aws.amazon.com/lambda/pricing",
    ),
    "sfn.transition": (
        0.025 / 1e3,
        "Step Functions Standard state transition",
        "aws.amazon.com/step-functions/pricing",
    ),
    "dynamodb.rru": (0.125 / 1e6, "DynamoDB on-demand read request unit", "aws.amazon.com/dynamodb/pricing/on-demand"),
    "dynamodb.wru": (0.625 / 1e6, "DynamoDB on-demand write request unit", "aws.amazon.com/dynamodb/pricing/on-demand"),
    "s3.tier1": (0.005 / 1e3, "S3 Standard PUT, COPY, POST, LIST request", "aws.amazon.com/s3/pricing"),
    "s3.tier2": (0.0004 / 1e3, "S3 Standard GET and other request", "aws.amazon.com/s3/pricing"),
    "secretsmanager.call": (0.05 / 1e4, "Secrets Manager API call", "aws.amazon.com/secrets-manager/pricing"),
    "scheduler.invocation": (
        1.00 / 1e6,
        "EventBridge Scheduler invocation (after 14 million free a month)",
        "aws.amazon.com/eventbridge/pricing",
    ),
}
"""AWS's us-east-1 list prices as of `PRICES_DATE`, without free tiers (the only table of prices in the bench).
Step Functions API calls (StartExecution, SendTask*), DynamoDB's and S3's DELETE, and API Gateway's
DeleteConnection are not charged by request."""

MODEL = "Claude Sonnet 4.6"
MODEL_PRICE = {"input_per_mtok": 3.00, "output_per_mtok": 15.00}
"""A typical mid-size model's list price per million tokens (Anthropic's, docs.anthropic.com/en/docs/about-claude/
pricing; Sonnet 4.5 costs the same), without prompt caching (caching lowers it)."""
OUTPUT_TOKENS_PER_CALL = 250
"""Output tokens assumed per model call (the scripted model's replies are a few words)."""
MODEL_WAIT_S = 5.0
"""Assumed seconds a real model call streams, which the `agent_steps` Lambda spends waiting (the fake answers at
once): priced separately as `model wait`."""

NODE_KEEPALIVE_S: float | None = None  # read from the node's own options (`orbital.node.agent.NodeOptions`)
API_GATEWAY_MAX_CONNECTION_S = 2 * 3600
"""API Gateway closes a WebSocket after 2 hours: a node connected for good reconnects that often."""
SCHEDULER_TICKS_PER_HOUR = 60
"""`scheduler_tick` runs every minute (template.yaml: rate(1 minute)) whether or not anything is due."""

MESSAGE_UNIT = 32 * 1024
TOKEN = "gateway-token-for-the-cost-bench-0123456789"
TABLE = "orbital-cost"
BUCKET = "orbital-cost-workspace"
MGMT = "https://abc123.execute-api.us-east-1.amazonaws.com/prod"
REGION = "us-east-1"


# --- what one kind of turn used ---------------------------------------------------------------------------------


@dataclass
class Usage:
    requests: Counter[str] = field(default_factory=Counter)
    rru: float = 0.0
    wru: float = 0.0
    messages_in: int = 0
    messages_out: int = 0
    invocations: Counter[str] = field(default_factory=Counter)
    gb_seconds: float = 0.0
    lambda_ms: Counter[str] = field(default_factory=Counter)
    transitions: int = 0
    model_calls: int = 0
    input_tokens: int = 0
    connection_minutes: float = 0.0
    scheduler_invocations: int = 0

    def __sub__(self, other: Usage) -> Usage:
        """What this used beyond `other` (durations: never below nothing, the two runs' times vary)."""
        out = self.combine(other, -1.0)
        out.lambda_ms = Counter({k: v for k, v in out.lambda_ms.items() if v > 0})
        out.gb_seconds = max(0.0, out.gb_seconds)
        return out

    def combine(self, other: Usage, factor: float) -> Usage:
        out = Usage()
        for name in ("requests", "invocations", "lambda_ms"):
            mine: dict[str, float] = dict(getattr(self, name))
            for key, value in getattr(other, name).items():
                mine[key] = mine.get(key, 0) + value * factor
            setattr(out, name, Counter({k: v for k, v in mine.items() if v}))
        for name in (
            "rru",
            "wru",
            "messages_in",
            "messages_out",
            "gb_seconds",
            "transitions",
            "model_calls",
            "input_tokens",
            "connection_minutes",
            "scheduler_invocations",
        ):
            setattr(out, name, getattr(self, name) + factor * getattr(other, name))
        return out

    def times(self, factor: float) -> Usage:
        return Usage().combine(self, factor)

    def plus(self, other: Usage) -> Usage:
        return self.combine(other, 1.0)


def dollars(usage: Usage) -> dict[str, float]:
    """Each service's share of one unit of `usage`, in USD."""

    def p(key: str) -> float:
        return PRICES[key][0]

    s3_tier1 = sum(v for k, v in usage.requests.items() if k.split(".")[-1] in S3_TIER1)
    s3_tier2 = sum(v for k, v in usage.requests.items() if k.startswith("s3.") and k.split(".")[-1] in S3_TIER2)
    secrets = sum(v for k, v in usage.requests.items() if k.startswith("secretsmanager."))
    return {
        "API Gateway": (usage.messages_in + usage.messages_out) * p("apigw.message")
        + usage.connection_minutes * p("apigw.connection_minute"),
        "Lambda": sum(usage.invocations.values()) * p("lambda.request") + usage.gb_seconds * p("lambda.gb_second"),
        "Step Functions": usage.transitions * p("sfn.transition"),
        "DynamoDB": usage.rru * p("dynamodb.rru") + usage.wru * p("dynamodb.wru"),
        "S3": s3_tier1 * p("s3.tier1") + s3_tier2 * p("s3.tier2"),
        "Secrets Manager": secrets * p("secretsmanager.call"),
        "EventBridge": usage.scheduler_invocations * p("scheduler.invocation"),
    }


S3_TIER1 = {
    "PutObject",
    "CopyObject",
    "PostObject",
    "ListObjects",
    "ListObjectsV2",
    "CreateMultipartUpload",
    "UploadPart",
    "CompleteMultipartUpload",
}
S3_TIER2 = {"GetObject", "HeadObject", "GetObjectAttributes"}


def model_dollars(usage: Usage) -> float:
    return (
        usage.input_tokens * MODEL_PRICE["input_per_mtok"]
        + usage.model_calls * OUTPUT_TOKENS_PER_CALL * MODEL_PRICE["output_per_mtok"]
    ) / 1e6


def model_wait_dollars(usage: Usage, memory_mb: int) -> float:
    """The `agent_steps` Lambda waiting `MODEL_WAIT_S` for each model call, at its memory."""
    return usage.model_calls * MODEL_WAIT_S * memory_mb / 1024 * PRICES["lambda.gb_second"][0]


# --- DynamoDB request units from item sizes ---------------------------------------------------------------------


def _value_size(value: dict[str, Any]) -> int:
    ((kind, inner),) = value.items()
    if kind == "S":
        return len(str(inner).encode())
    if kind == "N":
        digits = str(inner).lstrip("-").replace(".", "").lstrip("0") or "0"
        return (len(digits) + 1) // 2 + 1
    if kind == "B":
        return len(inner) if isinstance(inner, bytes | bytearray) else len(base64.b64decode(inner))
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(len(str(x).encode()) for x in inner)
    if kind == "NS":
        return sum(_value_size({"N": x}) for x in inner)
    if kind == "BS":
        return sum(len(x) for x in inner)
    if kind == "L":
        return 3 + sum(1 + _value_size(x) for x in inner)
    if kind == "M":
        return 3 + sum(1 + len(k.encode()) + _value_size(v) for k, v in inner.items())
    return 0


def item_size(item: dict[str, Any] | None) -> int:
    """DynamoDB's size of an item: its attribute names and values (the documented rules, to the byte or near)."""
    if not item:
        return 0
    return sum(len(name.encode()) + _value_size(value) for name, value in item.items())


def _read_units(size: int, consistent: bool) -> float:
    units = max(1, math.ceil(size / 4096))
    return float(units) if consistent else units / 2


def _write_units(before: dict[str, Any] | None, after: dict[str, Any] | None) -> float:
    units = max(1, math.ceil(max(item_size(before), item_size(after)) / 1024))
    if (before and "GSI1PK" in before) or (after and "GSI1PK" in after):  # the index's copy (projection ALL)
        units += max(1, math.ceil(max(item_size(before), item_size(after)) / 1024))
    return float(units)


_overhead = threading.local()
"""Per thread: the seconds the bench itself spent reading items to size them, inside a handler's time (taken off
the handler's duration)."""


def overhead_seconds() -> float:
    return float(getattr(_overhead, "seconds", 0.0))


class DynamoUnits:
    """Request units of the factory's DynamoDB client, from the items each request reads and writes (the items
    before and after a write are read with a client of its own, which nothing counts)."""

    def __init__(self, client: Any, raw: Any) -> None:
        self.raw = raw
        self.rru = 0.0
        self.wru = 0.0
        self._lock = threading.Lock()
        client.meta.events.register("before-parameter-build.dynamodb.*", self._before)
        client.meta.events.register("after-call.dynamodb.*", self._after)

    def _item(self, table: str, key: dict[str, Any]) -> dict[str, Any] | None:
        began = time.perf_counter()
        try:
            found = self.raw.get_item(TableName=table, Key=key, ConsistentRead=True).get("Item")
        finally:
            _overhead.seconds = overhead_seconds() + time.perf_counter() - began
        return found if isinstance(found, dict) else None

    def _writes(self, params: dict[str, Any], operation: str) -> list[tuple[str, dict[str, Any]]]:
        """(table, key) of each item a write touches."""
        if operation in ("PutItem",):
            item = params["Item"]
            return [(params["TableName"], {"PK": item["PK"], "SK": item["SK"]})]
        if operation in ("UpdateItem", "DeleteItem"):
            return [(params["TableName"], params["Key"])]
        if operation == "TransactWriteItems":
            out = []
            for entry in params["TransactItems"]:
                ((kind, body),) = entry.items()
                if kind == "Put":
                    out.append((body["TableName"], {"PK": body["Item"]["PK"], "SK": body["Item"]["SK"]}))
                elif kind in ("Update", "Delete"):
                    out.append((body["TableName"], body["Key"]))
            return out
        if operation == "BatchWriteItem":
            out = []
            for table, entries in params["RequestItems"].items():
                for entry in entries:
                    if "PutRequest" in entry:
                        item = entry["PutRequest"]["Item"]
                        out.append((table, {"PK": item["PK"], "SK": item["SK"]}))
                    else:
                        out.append((table, entry["DeleteRequest"]["Key"]))
            return out
        return []

    def _before(self, params: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
        touched = self._writes(params, model.name)
        context["orbital_cost"] = (dict(params), [(t, k, self._item(t, k)) for t, k in touched])

    def _after(self, http_response: Any, parsed: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
        stashed: tuple[dict[str, Any], list[Any]] = context.get("orbital_cost") or ({}, [])
        params, before = stashed
        operation = model.name
        read = 0.0
        written = 0.0
        if operation == "GetItem":
            read = _read_units(item_size(parsed.get("Item")), bool(params.get("ConsistentRead")))
        elif operation in ("Query", "Scan"):
            size = sum(item_size(i) for i in parsed.get("Items") or [])
            read = _read_units(size, bool(params.get("ConsistentRead")) and "IndexName" not in params)
        elif operation == "BatchGetItem":
            for table, items in (parsed.get("Responses") or {}).items():
                consistent = bool(params["RequestItems"][table].get("ConsistentRead"))
                read += sum(_read_units(item_size(i), consistent) for i in items)
        elif operation == "TransactGetItems":
            read = sum(2 * _read_units(item_size(r.get("Item")), True) for r in parsed.get("Responses") or [])
        elif before:
            factor = 2 if operation == "TransactWriteItems" else 1
            written = factor * sum(_write_units(old, self._item(t, k)) for t, k, old in before)
        elif operation == "ConditionCheckItem":
            read = 1.0
        with self._lock:
            self.rru += read
            self.wru += written


# --- the deployment, in this process ----------------------------------------------------------------------------


class _Timed:
    """Lambda invocations and their durations, per function."""

    def __init__(self) -> None:
        self.invocations: Counter[str] = Counter()
        self.ms: Counter[str] = Counter()
        self._lock = threading.Lock()

    def record(self, function: str, seconds: float) -> None:
        with self._lock:
            self.invocations[function] += 1
            self.ms[function] += math.ceil(seconds * 1000)


def _memory_mb(template: dict[str, Any]) -> dict[str, int]:
    default = int(((template.get("Globals") or {}).get("Function") or {}).get("MemorySize", 128))
    out = {}
    for name, res in template["Resources"].items():
        if res.get("Type") == "AWS::Serverless::Function":
            out[name] = int(res["Properties"].get("MemorySize", default))
    return out


_ids = itertools.count(1)


class Deployment:
    """The AWS path of one deployment: enter it (`with Deployment() as d:`) to get moto, the table, the bucket, the
    secret, the state machines and the handlers; `d.measure(action)` runs an action and returns what it used."""

    def __init__(self) -> None:
        self._saved_env: dict[str, str | None] = {}
        self._stack = contextlib.ExitStack()
        self.frames: list[tuple[str, Any]] = []
        self._frames_lock = threading.Lock()
        self.out_units = 0
        self.in_units = 0

    # -- setup
    def _env(self, values: dict[str, str | None]) -> None:
        for key, value in values.items():
            self._saved_env.setdefault(key, os.environ.get(key))
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value

    def __enter__(self) -> Deployment:
        self._env(
            {
                "AWS_ENDPOINT_URL": None,
                "ORBITAL_AWS_ENDPOINT": None,
                "ORBITAL_AUTH_TOKEN": None,
                "ORBITAL_LOCAL": None,
                "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_SESSION_TOKEN": "testing",
                "AWS_DEFAULT_REGION": REGION,
                "AWS_REGION": REGION,
                "ORBITAL_TABLE": TABLE,
                "ORBITAL_BUCKET": BUCKET,
                "ORBITAL_WS_MGMT_ENDPOINT": MGMT,
                "POWERTOOLS_METRICS_DISABLED": "true",
                "POWERTOOLS_TRACE_DISABLED": "true",
            }
        )
        try:
            self._start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _start(self) -> None:
        import functools

        import boto3
        from moto import mock_aws
        from orbital.aws import clients, secrets
        from orbital.local import stack, step_functions
        from orbital.local.template import load_template, table_definition
        from orbital.runtime.services import build_services, reset_services, use_services
        from orbital.settings import get_settings, reset_settings

        self._stack.enter_context(
            mock_aws(config={"stepfunctions": {"execute_state_machine": True}, "lambda": {"use_docker": False}})
        )

        def reset() -> None:
            secrets.forget()
            reset_settings()
            clients.reset_clients()
            reset_services()

        self._reset = reset
        self._reset()
        template = load_template(ROOT / "template.yaml")
        self.memory = _memory_mb(template)
        _, kwargs = table_definition(template)
        self.raw_ddb = boto3.client("dynamodb", region_name=REGION)
        self.raw_ddb.create_table(TableName=TABLE, **kwargs)
        boto3.client("s3", region_name=REGION).create_bucket(Bucket=BUCKET)
        secret = boto3.client("secretsmanager", region_name=REGION).create_secret(
            Name="orbital-cost-gateway-token", SecretString=TOKEN
        )
        self.sfn = boto3.client("stepfunctions", region_name=REGION)

        def client(service: str) -> Any:
            return boto3.client(service, region_name=REGION)

        step_functions.index_executions()
        self.arns = stack.create_state_machines(client, ROOT, template)
        self.host = stack.FunctionHost(ROOT, template)
        self.timed = _Timed()
        invoke = self.host.invoke

        def timed_invoke(logical_id: str, event: dict[str, Any], *, count: bool = True) -> Any:
            began, spent = time.perf_counter(), overhead_seconds()
            try:
                return invoke(logical_id, event, count=count)
            finally:
                self.timed.record(logical_id, time.perf_counter() - began - (overhead_seconds() - spent))

        self.host.invoke = timed_invoke  # type: ignore[method-assign]
        step_functions.use_functions(set(self.host.specs), functools.partial(stack.run_function, self.host))
        step_functions.cache_state_machine_parsing()
        self._env(
            {
                "ORBITAL_DEFERRED_CALL_ARN": self.arns["DeferredCallStateMachine"],
                "ORBITAL_AGENT_TURN_ARN": self.arns["AgentTurnStateMachine"],
                "ORBITAL_AUTH_TOKEN_SECRET": secret["ARN"],
            }
        )
        reset_settings()
        self.units = DynamoUnits(clients.dynamodb(), self.raw_ddb)
        self.services = build_services(get_settings(), sender=_RecordingSender(self))
        use_services(self.services)
        self._stack.callback(use_services, None)
        self._stack.callback(self._stop_executions)

    def __exit__(self, *_: Any) -> None:
        try:
            self._stack.close()
        finally:
            for key, value in self._saved_env.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            with contextlib.suppress(Exception):
                self._reset()

    def _stop_executions(self) -> None:
        for arn in self.arns.values():
            for ex in self.sfn.list_executions(stateMachineArn=arn, statusFilter="RUNNING")["executions"]:
                with contextlib.suppress(Exception):
                    self.sfn.stop_execution(executionArn=ex["executionArn"])

    # -- frames
    def record(self, connection_id: str, frame: Any, size: int) -> None:
        with self._frames_lock:
            self.frames.append((connection_id, frame))
            self.out_units += max(1, math.ceil(size / MESSAGE_UNIT))

    def frames_to(self, connection_id: str) -> list[Any]:
        with self._frames_lock:
            return [f for cid, f in self.frames if cid == connection_id]

    def open(self, *, bearer: bool = False) -> str:
        """`$connect` through the `ws_connect` entry point; the new socket's id."""
        cid = f"cost-{next(_ids)}"
        headers = {"Authorization": f"Bearer {TOKEN}"} if bearer else {}
        event = {
            "requestContext": {
                "connectionId": cid,
                "routeKey": "$connect",
                "eventType": "CONNECT",
                "domainName": "abc123.execute-api.us-east-1.amazonaws.com",
                "stage": "prod",
                "identity": {"sourceIp": "203.0.113.10"},
            },
            "headers": headers,
        }
        answer = self.host.invoke("WsConnectFunction", event)
        assert answer["statusCode"] == 200, answer
        return cid

    def send(self, cid: str, body: Any, route: str = "req") -> Any:
        """One text frame through the `ws_message` entry point; the route response's frame, if any."""
        text = body if isinstance(body, str) else json.dumps(body)
        self.in_units += max(1, math.ceil(len(text.encode()) / MESSAGE_UNIT))
        event = {
            "requestContext": {
                "connectionId": cid,
                "routeKey": route,
                "eventType": "MESSAGE",
                "domainName": "abc123.execute-api.us-east-1.amazonaws.com",
                "stage": "prod",
                "identity": {"sourceIp": "203.0.113.10"},
            },
            "body": text,
            "isBase64Encoded": False,
        }
        answer = self.host.invoke("WsMessageFunction", event)
        assert answer["statusCode"] == 200, answer
        if "body" not in answer:
            return None
        self.out_units += max(1, math.ceil(len(answer["body"].encode()) / MESSAGE_UNIT))
        return json.loads(answer["body"])

    def call(self, cid: str, method: str, params: Any = None) -> Any:
        frame: dict[str, Any] = {"type": "req", "id": f"r{next(_ids)}", "method": method}
        if params is not None:
            frame["params"] = params
        answer = self.send(cid, frame)
        if answer is None:  # answered by a post (a reply sent before after-reply actions)
            answer = next(f for f in reversed(self.frames_to(cid)) if f.get("id") == frame["id"])
        assert answer.get("ok"), answer
        return answer.get("payload")

    def connect(self, mode: str = "client", client_id: str | None = None, *, bearer: bool = False, **extra: Any) -> str:
        """A socket past its `connect`. Without `bearer` (as `orbital node` and the CLI connect), `$connect` arms the
        socket's authentication deadline: a deferred_call timer, due 10 s later."""
        cid = self.open(bearer=bearer)
        params: dict[str, Any] = {
            "minProtocol": 1,
            "client": {"mode": mode, "id": client_id or cid},
            "auth": {"token": TOKEN},
            **extra,
        }
        self.call(cid, "connect", params)
        return cid

    def close(self, cid: str) -> None:
        event = {
            "requestContext": {
                "connectionId": cid,
                "routeKey": "$disconnect",
                "eventType": "DISCONNECT",
                "domainName": "abc123.execute-api.us-east-1.amazonaws.com",
                "stage": "prod",
            }
        }
        self.host.invoke("WsDisconnectFunction", event)

    def tick(self) -> None:
        """The scheduler's minute, as EventBridge Scheduler invokes it."""
        self.host.invoke("SchedulerTickFunction", {"source": "aws.scheduler"})

    # -- executions
    def _executions(self) -> dict[str, str]:
        out = {}
        for arn in self.arns.values():
            for ex in self.sfn.list_executions(stateMachineArn=arn)["executions"]:
                out[ex["executionArn"]] = ex["status"]
        return out

    def settle(
        self, before: set[str], *, allow_waiting: bool = False, timers: bool = False, timeout: float = 30.0
    ) -> list[str]:
        """Wait until the executions started since `before` have finished (timers waiting to be due unless
        `timers`, and with `allow_waiting` a run waiting in AwaitTools, may go on); their ARNs."""
        deadline = time.monotonic() + timeout
        while True:
            new = {arn: status for arn, status in self._executions().items() if arn not in before}
            running = [
                arn
                for arn, status in new.items()
                if status == "RUNNING" and (timers or not self._waiting(arn, allow_waiting))
            ]
            if not running:
                return list(new)
            if time.monotonic() > deadline:
                raise AssertionError(f"executions still running: {running}")
            time.sleep(0.1)

    def _history(self, arn: str) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"executionArn": arn, "maxResults": 1000}
            if token:
                kwargs["nextToken"] = token
            page = self.sfn.get_execution_history(**kwargs)
            events += page["events"]
            token = page.get("nextToken")
            if not token:
                return events

    def _entered(self, arn: str) -> list[str]:
        return [e["stateEnteredEventDetails"]["name"] for e in self._history(arn) if "stateEnteredEventDetails" in e]

    def _waiting(self, arn: str, allow_waiting: bool) -> bool:
        """Whether an execution waits with nothing left to run: a timer until it is due, or (`allow_waiting`) a run
        whose AwaitTools task has registered its token (its Lambda task returned)."""
        events = self._history(arn)
        entered = [e["stateEnteredEventDetails"]["name"] for e in events if "stateEnteredEventDetails" in e]
        if not entered:
            return False
        if ":DeferredCallStateMachine:" in arn and entered[-1] == "WaitUntilDue":
            return True
        return allow_waiting and entered[-1] == "AwaitTools" and events[-1]["type"] == "TaskSubmitted"

    def transitions(self, arns: list[str]) -> int:
        total = 0
        for arn in arns:
            entered = self._entered(arn)
            total += len(entered)
            if entered and entered[-1] == "WaitUntilDue":
                total += 2  # AnswerDue and its end, when due
        return total

    # -- measuring
    def drain(self) -> None:
        """Let every timer running now run out (the authentication deadlines of sockets just opened), so that none
        ends inside a later measurement."""
        self.settle(set(), timers=True)

    def measure(
        self, action: Callable[[], Any], *, allow_waiting: bool = False, timers: bool = False, llm: Any = None
    ) -> Usage:
        from orbital.aws import clients

        before = set(self._executions())
        requests_before = len(llm.requests) if llm is not None else 0
        clients.reset_call_counts()
        rru, wru = self.units.rru, self.units.wru
        inv, ms = Counter(self.timed.invocations), Counter(self.timed.ms)
        in_units, out_units = self.in_units, self.out_units
        action()
        started = self.settle(before, allow_waiting=allow_waiting, timers=timers)
        usage = Usage()
        usage.requests = Counter(clients.call_counts())
        usage.rru, usage.wru = self.units.rru - rru, self.units.wru - wru
        usage.invocations = self.timed.invocations - inv
        usage.lambda_ms = self.timed.ms - ms
        usage.gb_seconds = sum(v / 1000 * self.memory[k] / 1024 for k, v in usage.lambda_ms.items())
        usage.messages_in = self.in_units - in_units
        usage.messages_out = self.out_units - out_units
        usage.transitions = self.transitions(started)
        usage.scheduler_invocations = usage.invocations.get("SchedulerTickFunction", 0)
        if llm is not None:
            sent = llm.requests[requests_before:]
            usage.model_calls = len(sent)
            usage.input_tokens = sum(len(json.dumps(r.body)) // 4 for r in sent)
        return usage

    def wait_frame(self, cid: str, predicate: Callable[[Any], bool], timeout: float = 30.0) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            for frame in self.frames_to(cid):
                if isinstance(frame, dict) and predicate(frame):
                    return frame
            if time.monotonic() > deadline:
                raise AssertionError(f"no such frame to {cid}")
            time.sleep(0.02)


class _RecordingSender:
    """The management API sender of a deployment (PostToConnection, DeleteConnection on moto, counted by the
    client factory), keeping what it posts so the bench can read a node's `tool.invoke` and a run's end."""

    def __init__(self, deployment: Deployment) -> None:
        from orbital.aws.push import ManagementApiSender

        self.deployment = deployment
        self.real = ManagementApiSender(MGMT)

    def post(self, connection_id: str, frame: dict[str, Any] | bytes) -> bool:
        from orbital.aws.push import post_data

        data = frame if isinstance(frame, bytes) else post_data(frame)
        self.deployment.record(connection_id, frame if isinstance(frame, dict) else None, len(data))
        return self.real.post(connection_id, frame)

    def close(self, connection_id: str, code: int = 1000, reason: str = "", *, notify: bool = True) -> None:
        self.real.close(connection_id, code, reason, notify=notify)


# --- the kinds of turn ------------------------------------------------------------------------------------------

NODE_TOOLS = [
    {"name": "Bash", "description": "Run a shell command", "inputSchema": {"type": "object"}},
    {"name": "Read", "description": "Read a file", "inputSchema": {"type": "object"}},
]
NODE_RUNTIME = {
    "hostRole": "execution",
    "hostCapabilities": ["filesystem.list", "filesystem.read", "filesystem.write", "shell.exec"],
    "toolCapabilities": {"Bash": ["shell.exec"], "Read": ["filesystem.read"]},
}


def _final(d: Deployment, cid: str, run_id: str) -> Any:
    return d.wait_frame(
        cid,
        lambda f: (
            f.get("event") == "chat"
            and (f.get("payload") or {}).get("runId") == run_id
            and (f.get("payload") or {}).get("state") in ("final", "error")
        ),
    )


def configure(d: Deployment, admin: str, base_url: str) -> None:
    d.call(admin, "config.set", {"path": "model", "value": {"provider": "openai", "id": "gpt-test"}})
    d.call(admin, "config.set", {"path": "providers", "value": {"openai": {"baseUrl": f"{base_url}/v1"}}})
    d.call(admin, "config.set", {"path": "apiKeys.openai", "value": "sk-test-key"})


def plain_turn(d: Deployment, client: str, llm: Any) -> Usage:
    def turn() -> None:
        run = f"plain-{next(_ids)}"
        d.call(client, "chat.send", {"sessionKey": "main", "message": "Say hello.", "runId": run})
        assert _final(d, client, run)["payload"]["state"] == "final"

    return d.measure(turn, llm=llm)


def node_tool_turn(d: Deployment, client: str, node: str, llm: Any) -> Usage:
    def turn() -> None:
        run = f"tool-{next(_ids)}"
        seen = len(d.frames_to(node))
        d.call(client, "chat.send", {"sessionKey": "main", "message": 'TOOL:box__Bash {"command": "ls"}', "runId": run})
        invoke = d.wait_frame(node, lambda f: f.get("event") == "tool.invoke" and f not in d.frames_to(node)[:seen])
        d.call(node, "tool.result", {"callId": invoke["payload"]["callId"], "result": {"stdout": "a\nb\n"}})
        assert _final(d, client, run)["payload"]["state"] == "final"

    return d.measure(turn, llm=llm)


def exoclaw_turn(d: Deployment, llm: Any) -> tuple[str, Callable[[], Usage]]:
    cid = d.open()
    assert d.send(cid, {"token": TOKEN}, route="$default")["ok"] is True

    def measured() -> Usage:
        def turn() -> None:
            rid = f"x{next(_ids)}"
            params = {"channel": "websocket", "account": "cost", "content": "Say hello."}
            assert d.send(cid, {"id": rid, "method": "chat.send", "params": params}, route="$default") is None
            d.wait_frame(cid, lambda f: f.get("id") == rid and f.get("event") == "done")

        return d.measure(turn, llm=llm)

    return cid, measured


def cron_run(d: Deployment, admin: str, llm: Any) -> Usage:
    """A due cron job's run: the tick that finds it and the run it starts (the idle tick is subtracted by the
    caller: it happens anyway)."""
    now = int(time.time() * 1000)
    job = {
        "name": f"cost-{next(_ids)}",
        "schedule": {"kind": "at", "atMs": now - 1000},
        "spec": {"mode": "task", "message": "Say hello.", "deliver": False},
    }
    d.call(admin, "cron.add", job)
    return d.measure(d.tick, llm=llm)


def paused_approval(d: Deployment, client: str, llm: Any) -> Usage:
    def turn() -> None:
        run = f"ask-{next(_ids)}"
        message = 'TOOL:gsv__WriteFile {"path": "cost-note.md", "content": "x"}'
        d.call(client, "chat.send", {"sessionKey": f"ask-{run}", "message": message, "runId": run})
        d.wait_frame(
            client,
            lambda f: (
                f.get("event") == "tool.approval.requested"
                or (
                    f.get("event") == "chat"
                    and (f.get("payload") or {}).get("runId") == run
                    and (f.get("payload") or {}).get("state") in ("paused", "final", "error")
                )
            ),
        )

    return d.measure(turn, allow_waiting=True, llm=llm)


@dataclass
class Report:
    per_kind: dict[str, Usage]
    notes: dict[str, str]
    memory: dict[str, int]


def secret_reads_per_hour() -> Usage:
    from orbital.aws import secrets

    usage = Usage()
    usage.requests["secretsmanager.GetSecretValue"] = 3600 // secrets.MAX_AGE_S
    return usage


def keepalive_s() -> float:
    from orbital.node.agent import NodeOptions

    return float(NodeOptions.__dataclass_fields__["keepalive"].default)  # type: ignore[arg-type]


def count_plain_turn(rounds: int = 1) -> list[Usage]:
    """A plain turn measured `rounds` times after a warm-up (what the test checks)."""
    from tests.support import rules
    from tests.support.fake_llm import FakeLLM

    with FakeLLM() as llm, Deployment() as d:
        llm.responder = rules.respond
        admin = d.connect("client", "admin", bearer=True)  # no authentication deadline: no timer to run out
        configure(d, admin, llm.base_url)
        plain_turn(d, admin, llm)
        return [plain_turn(d, admin, llm) for _ in range(rounds)]


def least(measure: Callable[[], Usage], rounds: int) -> Usage:
    """The round that took the least Lambda time (each does the same work; this machine's load varies)."""
    return min((measure() for _ in range(rounds)), key=lambda u: u.gb_seconds)


def run_all(rounds: int = 3) -> Report:
    from tests.support import rules
    from tests.support.fake_llm import FakeLLM

    per: dict[str, Usage] = {}
    notes: dict[str, str] = {}
    with FakeLLM() as llm, Deployment() as d:
        llm.responder = rules.respond
        admin = d.connect("client", "admin", bearer=True)  # no authentication deadline: no timer to run out
        configure(d, admin, llm.base_url)

        plain_turn(d, admin, llm)  # warm-up of each kind: imports, first reads, the secret
        per["plain chat turn"] = least(lambda: plain_turn(d, admin, llm), rounds)

        node = d.connect("node", "box", tools=NODE_TOOLS, nodeRuntime=NODE_RUNTIME)
        d.drain()
        node_tool_turn(d, admin, node, llm)
        per["turn with one node tool call"] = least(lambda: node_tool_turn(d, admin, node, llm), rounds)

        _, exo = exoclaw_turn(d, llm)
        d.drain()
        exo()
        per["Exoclaw chat.send turn"] = least(exo, rounds)

        idle_tick = least(lambda: d.measure(d.tick), rounds)
        cron_run(d, admin, llm)
        per["cron run (beyond the idle tick)"] = least(lambda: cron_run(d, admin, llm), rounds) - idle_tick

        # an idle node for an hour: keepalives, a reconnect every 2 hours, the minutes connected
        keep = least(lambda: d.measure(lambda: d.call(node, "tools.list")), rounds)
        fresh: list[str] = []
        reconnect = d.measure(  # with its authentication deadline's timer, run out
            lambda: fresh.append(d.connect("node", "box2", tools=NODE_TOOLS, nodeRuntime=NODE_RUNTIME)), timers=True
        )
        reconnect = reconnect.plus(d.measure(lambda: d.close(fresh[0])))
        per_hour = 3600 / keepalive_s()
        idle = keep.times(per_hour).plus(reconnect.times(3600 / API_GATEWAY_MAX_CONNECTION_S))
        idle.connection_minutes = 60
        per["idle connected node, per hour"] = idle
        notes["idle connected node, per hour"] = (
            f"{per_hour:.0f} keepalives (`tools.list` every {keepalive_s():.0f} s), a reconnect every 2 h, 60 min"
        )

        rule = {"id": "ask-writes", "tool": "gsv__WriteFile", "decision": "ask"}
        d.call(admin, "config.set", {"path": "toolApproval.rules", "value": [rule]})
        paused_approval(d, admin, llm)
        entering = least(lambda: paused_approval(d, admin, llm), rounds)
        waiting_tick = least(lambda: d.measure(d.tick), rounds)
        extra = waiting_tick - idle_tick
        if not extra.requests:  # the same work: what its duration differs by is this machine's noise
            extra.lambda_ms, extra.gb_seconds = Counter(), 0.0
        per["paused approval: the turn up to its pause"] = entering
        per["paused approval, per hour waiting"] = extra.times(SCHEDULER_TICKS_PER_HOUR)
        notes["paused approval, per hour waiting"] = (
            "a Step Functions task token wait is free; only what the minute's tick does more for it"
        )
        per["scheduler tick, per hour (fixed, nothing due)"] = idle_tick.times(SCHEDULER_TICKS_PER_HOUR)
        per["a warm container, per hour (its secret read)"] = secret_reads_per_hour()
        notes["a warm container, per hour (its secret read)"] = (
            "the gateway token is read again every 5 minutes by each warm container of ws_connect, ws_message and"
            " rest_api; this run's containers had read it already"
        )
        return Report(per, notes, dict(d.memory))


def _fmt_requests(usage: Usage) -> str:
    parts = []
    for key, value in sorted(usage.requests.items()):
        if abs(value) < 1e-9:
            continue
        parts.append(f"{key} {value:g}")
    return ", ".join(parts) or "none"


def print_report(report: Report) -> None:
    agent_mb = report.memory.get("AgentStepsFunction", 1024)
    print(
        f"AWS us-east-1 list prices of {PRICES_DATE}; model: {MODEL}, ${MODEL_PRICE['input_per_mtok']:.2f} in /"
        f" ${MODEL_PRICE['output_per_mtok']:.2f} out per MTok, {OUTPUT_TOKENS_PER_CALL} output tokens per call;"
        f" Lambda memory as template.yaml configures it (arm64)"
    )
    print()
    services = ["API Gateway", "Lambda", "Step Functions", "DynamoDB", "S3", "Secrets Manager", "EventBridge"]
    head = (
        f"{'per 1,000':<46}"
        + "".join(f"{s:>{max(10, len(s) + 3)}}" for s in services)
        + f"{'AWS total':>11}{'model wait':>11}{'model':>9}"
    )
    print(head)
    for kind, usage in report.per_kind.items():
        cost = dollars(usage)
        total = sum(cost.values())
        line = (
            f"{kind:<46}"
            + "".join(f"{cost[s] * 1000:>{max(10, len(s) + 3)}.4f}" for s in services)
            + f"{total * 1000:>11.4f}"
        )
        line += f"{model_wait_dollars(usage, agent_mb) * 1000:>11.4f}{model_dollars(usage) * 1000:>9.2f}"
        print(line)
    print(
        f"\nmodel wait: the agent_steps Lambda ({agent_mb} MB) waiting {MODEL_WAIT_S:.0f} s per model call"
        " (assumed; the scripted model answers at once)"
    )
    print("\nCounts (one of each):")
    for kind, usage in report.per_kind.items():
        print(f"- {kind}: {_fmt_requests(usage)}")
        inv = ", ".join(f"{k} {v:g} ({usage.lambda_ms[k]:.0f} ms)" for k, v in sorted(usage.invocations.items()) if v)
        print(
            f"    Lambda: {inv or 'none'}; {usage.gb_seconds:.4f} GB-s; Step Functions transitions"
            f" {usage.transitions:g}; DynamoDB {usage.rru:g} RRU, {usage.wru:g} WRU; API Gateway messages in"
            f" {usage.messages_in:g}, out {usage.messages_out:g}; model calls {usage.model_calls:g},"
            f" ~{usage.input_tokens:g} input tokens"
        )
        if kind in report.notes:
            print(f"    ({report.notes[kind]})")
    print("\nPrices:")
    for key, (price, unit, page) in PRICES.items():
        print(f"  {key:<26} ${price:.10f}  {unit}  ({page})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="the counts as JSON too")
    parser.add_argument("--rounds", type=int, default=3, help="measured runs of each kind (the least Lambda time)")
    args = parser.parse_args()
    report = run_all(args.rounds)
    print_report(report)
    if args.json:
        print(json.dumps({k: {**v.__dict__} for k, v in report.per_kind.items()}, default=dict, indent=1))


if __name__ == "__main__":
    main()
