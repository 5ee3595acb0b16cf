"""The AWS half of the local gateway: a moto server in this process with the resources of template.yaml.

Lambda functions named in the template run in process: moto's Docker-free Lambda backend is patched so an invoke
(e.g. a Step Functions task) calls the function's Python handler, loaded from its CodeUri exactly as Lambda would.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import importlib.util
import inspect
import io
import json
import logging
import os
import socket
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from orbital.aws import clients as gateway_clients
from orbital.local import template as tpl
from orbital.local.bridge import request_id
from orbital.local.credentials import KEY_HEADER, Credentials, require_key
from orbital.local.inprocess import InProcessAws
from orbital.local.moto_shared import ACCOUNT, MOTO_LOCKS, REGION
from orbital.local.sfn_worker import StepFunctionsProcess, forward_requests

log = logging.getLogger("orbital.local")


@dataclass
class FakeLambdaContext:
    function_name: str
    memory_limit_in_mb: int = 512
    invoked_function_arn: str = ""
    aws_request_id: str = ""
    log_group_name: str = "/aws/lambda/local"
    log_stream_name: str = "local"

    def get_remaining_time_in_millis(self) -> int:
        return 29_000


class FunctionHost:
    """Loads each template function's handler from its CodeUri and invokes it with a Lambda-shaped context.

    The handler is called without the decorators that instrument it for Lambda (Powertools' logger context and
    metric flush, tracing): here each is a no-op (no Lambda context worth logging, metrics and tracing off), and
    together they cost about a sixth of the CPU of a cheap request. The handler's own body is what runs on Lambda."""

    def __init__(self, root: Path, template: dict[str, Any]) -> None:
        self.root = root
        self.specs = tpl.functions(template)
        self._modules: dict[str, ModuleType] = {}
        self._handlers: dict[str, Any] = {}
        self._lock = threading.Lock()
        self.invocations = 0

    def _load(self, logical_id: str) -> Any:
        handler = self._handlers.get(logical_id)
        if handler is not None:
            return handler
        with self._lock:
            module = self._modules.get(logical_id)
            if module is None:
                spec = self.specs[logical_id]
                module_name = spec["handler"].rsplit(".", 1)[0]
                path = self.root / spec["code_uri"] / f"{module_name}.py"
                import_name = f"orbital_fn_{logical_id}"
                loader = importlib.util.spec_from_file_location(import_name, path)
                if loader is None or loader.loader is None:
                    raise RuntimeError(f"cannot load handler for {logical_id} from {path}")
                module = importlib.util.module_from_spec(loader)
                sys.modules[import_name] = module
                loader.loader.exec_module(module)
                self._modules[logical_id] = module
            handler = inspect.unwrap(getattr(module, self.specs[logical_id]["handler"].rsplit(".", 1)[1]))
            self._handlers[logical_id] = handler
            return handler

    def invoke(self, logical_id: str, event: dict[str, Any], *, count: bool = True) -> Any:
        handler = self._load(logical_id)
        if count:
            self.invocations += 1
        ctx = FakeLambdaContext(
            function_name=logical_id,
            invoked_function_arn=f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{logical_id}",
            aws_request_id=request_id(),
        )
        return handler(event, ctx)


_host: FunctionHost | None = None
"""The functions of the running local stack (what moto's Lambda backend invokes)."""

_functions: tuple[frozenset[str], Callable[[str, bytes | str | None], tuple[bytes, bool]]] | None = None
"""The template's function names and how to run one (in this process, or from the Step Functions process, in the
gateway's): what the state machines' Lambda tasks invoke."""


def use_functions(names: set[str], run: Callable[[str, bytes | str | None], tuple[bytes, bool]]) -> None:
    global _functions
    _functions = (frozenset(names), run)


def run_function(host: FunctionHost, function_name: str, payload: bytes | str | None) -> tuple[bytes, bool]:
    """Invoke a template function in process: its JSON result, or (True for "failed") Lambda's error payload."""
    name = function_name.split(":")[-1]
    try:
        event = json.loads(payload) if payload else {}
        result = host.invoke(name, event)
    except Exception as exc:
        log.exception("local function %s failed", name)
        return json.dumps({"errorType": type(exc).__name__, "errorMessage": str(exc)}).encode(), True
    return json.dumps(result).encode(), False


def patch_lambda(host: FunctionHost) -> None:
    """Make moto's Docker-free Lambda backend run the template's Python handlers in this process."""
    global _host
    from moto.awslambda_simple.models import LambdaSimpleBackend

    _host = host
    use_functions(set(host.specs), functools.partial(run_function, host))

    def invoke(
        backend: Any, function_name: str, qualifier: Any, body: Any, headers: Any, response_headers: Any
    ) -> bytes:
        data, failed = run_function(host, function_name, body)
        if failed:
            response_headers["x-amz-function-error"] = "Unhandled"
        return data

    LambdaSimpleBackend.invoke = invoke  # type: ignore[method-assign,assignment]


class _DirectLambda:
    """The Lambda client of the state machines' tasks: a synchronous invoke of a template function calls its handler
    directly (what moto's Lambda backend would do after botocore and its routing); anything else is the client's."""

    def __init__(self, wrapped: Any) -> None:
        self._wrapped = wrapped

    def __getattr__(self, name: str) -> Any:
        return getattr(self._wrapped, name)

    def invoke(self, **params: Any) -> dict[str, Any]:
        functions = _functions
        name = str(params.get("FunctionName", "")).split(":")[-1]
        synchronous = params.get("InvocationType", "RequestResponse") == "RequestResponse"
        if functions is None or not synchronous or "Qualifier" in params or name not in functions[0]:
            return self._wrapped.invoke(**params)
        from botocore.response import StreamingBody

        data, failed = functions[1](name, params.get("Payload"))
        response: dict[str, Any] = {
            "StatusCode": 200,
            "ExecutedVersion": "$LATEST",
            "Payload": StreamingBody(io.BytesIO(data), len(data)),
        }
        if failed:
            response["FunctionError"] = "Unhandled"
        return response


def make_moto_atomic(*, dynamodb: bool = True, step_functions: bool = True) -> None:
    """moto is not thread-safe where AWS is atomic, and here a request handler and a Step Functions task run at once:
    - DynamoDB applies a conditional write atomically; moto checks the condition, then writes, so two threads can
      both pass `st = :pending` (the claim of a deferred call relies on exactly one winner);
    - Step Functions: `start_execution` lists an execution before it is started, and `send_task_*` or
      `describe_execution` in another thread then trips over its missing status.
    Hold one lock per service around those operations so they behave as on AWS (for the services this process
    serves: the Step Functions process serves no DynamoDB, the gateway beside it no Step Functions). Idempotent."""

    def serialize(cls: type, names: tuple[str, ...], lock: threading.RLock) -> None:
        for name in names:
            method = getattr(cls, name)
            if getattr(method, "_orbital_serialized", False):
                continue

            def call(*args: Any, _method: Callable[..., Any] = method, **kwargs: Any) -> Any:
                with lock:
                    return _method(*args, **kwargs)

            call._orbital_serialized = True  # type: ignore[attr-defined]
            setattr(cls, name, call)

    if dynamodb:
        from moto.dynamodb.models import DynamoDBBackend

        from orbital.local.moto_updates import fast_update_items  # lazy, as moto above

        fast_update_items()  # under the lock, not around it

        serialize(
            DynamoDBBackend,
            (
                "put_item",
                "update_item",
                "delete_item",
                "transact_write_items",
                "get_item",
                "execute_transaction",
                "query",
                "scan",
            ),
            MOTO_LOCKS["dynamodb"],
        )
    if not step_functions:
        return
    from moto.stepfunctions.parser.models import StepFunctionsParserBackend

    serialize(
        StepFunctionsParserBackend,
        (
            "start_execution",
            "send_task_success",
            "send_task_failure",
            "send_task_heartbeat",
            "get_execution_history",
            "describe_execution",
            "stop_execution",
            "list_executions",
        ),
        MOTO_LOCKS["stepfunctions"],
    )


_answering = threading.local()


def ready_task_callbacks() -> None:
    """moto answers `SendTaskSuccess` / `SendTaskFailure` / `SendTaskHeartbeat` by asking every execution in turn
    whether the token is its own, through the execution's environment. An execution just started has no environment
    yet (its thread sets it up), so the question fails with AttributeError and the token's own execution is never
    asked: the answer is lost and that execution waits for its timeout. Over HTTP botocore's retries hid it.
    During those three calls, list only running executions that have their environment (a token can belong to no
    other), newest first (the token answered is almost always a recent one's). A token of an execution already over
    gets InvalidToken (the callers treat each of the three errors alike: the execution is over). Idempotent."""
    from moto.stepfunctions.parser.models import StepFunctionsParserBackend

    index_executions()  # first: the listing below is over the indexed one
    if getattr(StepFunctionsParserBackend._get_executions, "_orbital_ready", False):
        return
    original_list = StepFunctionsParserBackend._get_executions

    def get_executions(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not getattr(_answering, "on", False):
            return original_list(self, *args, **kwargs)
        found = original_list(self, "RUNNING")  # type: ignore[arg-type]  # only a running execution waits for a token
        return [e for e in reversed(found) if getattr(getattr(e, "exec_worker", None), "env", None) is not None]

    get_executions._orbital_ready = True  # type: ignore[attr-defined]
    StepFunctionsParserBackend._get_executions = get_executions  # type: ignore[method-assign]

    for name in ("send_task_success", "send_task_failure", "send_task_heartbeat"):
        method = getattr(StepFunctionsParserBackend, name)

        def answering(*args: Any, _method: Callable[..., Any] = method, **kwargs: Any) -> Any:
            _answering.on = True
            try:
                return _method(*args, **kwargs)
            finally:
                _answering.on = False

        answering._orbital_serialized = True  # type: ignore[attr-defined]  # make_moto_atomic's lock is inside
        setattr(StepFunctionsParserBackend, name, answering)


FINISHED_EXECUTIONS_KEPT = 1000
"""Finished executions kept per state machine (AWS keeps them 90 days; a long-lived local gateway starts one per
tool call, and moto keeps each one's whole bookkeeping)."""


class _Executions(list[Any]):
    """A state machine's executions (moto's list, in start order) with an index by name and the set of those that
    may still be running. An execution leaves `live` when it is next seen finished; the oldest finished ones beyond
    `FINISHED_EXECUTIONS_KEPT` leave the list."""

    def __init__(self, items: Any = ()) -> None:
        super().__init__(items)
        self.by_name: dict[str, Any] = {}
        self.live: dict[int, Any] = {}
        self.finished: collections.deque[Any] = collections.deque()
        self._kept_live = 0  # how many were still running at the last sweep
        for execution in self:
            self._index(execution)

    def _index(self, execution: Any) -> None:
        self.by_name[str(execution.name)] = execution
        self.live[id(execution)] = execution

    def append(self, execution: Any) -> None:
        super().append(execution)
        self._index(execution)
        if len(self.live) > max(_LIVE_BEFORE_SWEEP, 2 * self._kept_live):  # amortized: not a scan per start
            self._sweep()
        else:
            _forget_finished_threads()

    def remove(self, execution: Any) -> None:
        super().remove(execution)
        self.live.pop(id(execution), None)
        name = str(execution.name)
        if self.by_name.get(name) is execution:
            del self.by_name[name]

    def _sweep(self) -> None:
        for key, execution in list(self.live.items()):
            status = getattr(execution, "exec_status", None)
            ended = status is not None and getattr(status, "value", status) != "RUNNING"
            if ended and self.live.pop(key, None) is not None:
                self.finished.append(execution)
        self._kept_live = len(self.live)
        while len(self.finished) > FINISHED_EXECUTIONS_KEPT:
            with contextlib.suppress(ValueError):
                self.remove(self.finished.popleft())
        _forget_finished_threads()

    def running(self) -> list[Any]:
        """The executions still running, oldest first."""
        self._sweep()
        return [e for e in self.live.values() if getattr(getattr(e, "exec_status", None), "value", None) == "RUNNING"]


_LIVE_BEFORE_SWEEP = 16
_THREADS_BEFORE_SWEEP = 64
_threads_kept = 0


def _forget_finished_threads() -> None:
    """moto's interpreter appends every thread it starts (three per execution) to one module-level list, and nothing
    reads or empties it: keep only the threads still running. The threads that ended at the front of the list (the
    oldest) leave at once; the whole list is looked at when it has grown past twice what the last look kept, so with
    many executions running a start does not look at all their threads."""
    from moto.stepfunctions.parser.utils import TMP_THREADS

    global _threads_kept
    ended, count = 0, len(TMP_THREADS)  # others only append meanwhile
    while ended < count and not TMP_THREADS[ended].is_alive():
        ended += 1
    if ended:
        del TMP_THREADS[:ended]
    if len(TMP_THREADS) > max(_THREADS_BEFORE_SWEEP, 2 * _threads_kept):
        TMP_THREADS[:] = [t for t in list(TMP_THREADS) if t.is_alive()]
        _threads_kept = len(TMP_THREADS)


def index_executions() -> None:
    """moto keeps every execution of a state machine in one list and scans all of it on every `StartExecution`
    (is the name taken?) and on every `SendTask*` (which running execution owns this token?): the cost of a call grows
    with every execution the gateway has ever run (a long-lived local gateway runs one per tool call). Give each
    state machine's list an index by name and a set of the executions still running, and answer those two questions
    from them. And keep the newest `FINISHED_EXECUTIONS_KEPT` finished executions, not all of them, and let go of
    the interpreter's finished threads: without these and `untrack_models`, a gateway's memory grew by about 56 MiB
    per thousand tool calls (docs/performance.md). Same results for what is kept; idempotent."""
    from moto.stepfunctions.models import StateMachine, StateMachineInstance
    from moto.stepfunctions.parser.models import StepFunctionsParserBackend

    if getattr(StateMachineInstance.__init__, "_orbital_indexed", False):
        return
    original_init = StateMachineInstance.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        self.executions = _Executions(self.executions)

    init._orbital_indexed = True  # type: ignore[attr-defined]
    StateMachineInstance.__init__ = init  # type: ignore[method-assign]

    original_idempotency = StateMachine._handle_name_input_idempotency

    def name_input_idempotency(self: Any, name: str, execution_input: str) -> Any:
        executions = self.executions
        if not isinstance(executions, _Executions):
            return original_idempotency(self, name, execution_input)
        found = executions.by_name.get(str(name))
        if found is None:
            return None
        # moto's own answer for the one execution with that name (the same execution, or ExecutionAlreadyExists)
        return original_idempotency(_OneExecution(found), name, execution_input)  # type: ignore[arg-type]

    StateMachine._handle_name_input_idempotency = name_input_idempotency  # type: ignore[method-assign]

    original_list = StepFunctionsParserBackend._get_executions

    def get_executions(self: Any, execution_status: Any = None) -> Any:
        if execution_status is None or getattr(execution_status, "value", execution_status) != "RUNNING":
            return original_list(self, execution_status)
        found: list[Any] = []
        for state_machine in self.state_machines:
            executions = state_machine.executions
            if isinstance(executions, _Executions):
                found.extend(executions.running())
            else:
                found.extend(e for e in executions if e.status == "RUNNING")
        return found

    StepFunctionsParserBackend._get_executions = get_executions  # type: ignore[method-assign]


class _OneExecution:
    """A stand-in state machine holding one execution (for moto's idempotency check on the indexed one)."""

    def __init__(self, execution: Any) -> None:
        self.executions = [execution]


_querying = threading.local()


def untrack_models() -> None:
    """moto keeps every instance of its models in a list on the model's class (`instances_tracked`, for its dashboard
    and its reset), for as long as the process lives: every copy of a DynamoDB item it makes (two per `UpdateItem`),
    every copy of a state machine (one per execution). A long-lived gateway's memory grew with every call it had
    ever answered. Track S3's objects only (its reset closes their temporary files); the others are freed when
    nothing else holds them. Idempotent."""
    from moto.core.common_models import BaseModel

    if getattr(BaseModel.__new__, "_orbital_untracked", False):
        return

    def new(cls: Any, *args: Any, **kwargs: Any) -> Any:
        instance = super(BaseModel, cls).__new__(cls)
        if cls.__module__.startswith("moto.s3."):
            cls.instances_tracked.append(instance)
        return instance

    new._orbital_untracked = True  # type: ignore[attr-defined]
    BaseModel.__new__ = new  # type: ignore[method-assign]


def cache_action_lookup() -> None:
    """moto looks up which actions a service's response class has with `inspect.getmembers` on every request (about
    a twentieth of a DynamoDB call here). The answer depends on the class alone: compute it once per class."""
    from moto.core import responses, utils

    if getattr(responses.method_names_from_class, "_orbital_cached", False):
        return
    original = utils.method_names_from_class

    @functools.cache
    def method_names(clazz: Any) -> frozenset[str]:
        return frozenset(original(clazz))

    method_names._orbital_cached = True  # type: ignore[attr-defined]
    responses.method_names_from_class = method_names  # type: ignore[assignment]


def _index_hash_attribute(table: Any, index_name: str) -> str | None:
    for index in [*table.global_indexes, *table.indexes]:
        if index.name == index_name:
            return next((k["AttributeName"] for k in index.schema if k["KeyType"] == "HASH"), None)
    return None


def fast_queries() -> None:
    """moto answers every Query by listing *all* items of the table and sorting them, then filtering: a query's cost
    grows with the whole table (about 1.5 s with 100,000 items here), not with the partition it reads. During a
    Query, let that listing be only what can match: the partition's items for a query on the table; for a query on
    an index by a string key, the items (in any order: the query sorts what matches itself) whose index key is that
    string, compared as plain strings (moto's own test of each item, on its typed values, still runs on what is
    left; over 61,000 items such a query takes half as long). Scans and everything else keep moto's listing. Same
    results; idempotent."""
    from moto.dynamodb.models.table import Table

    if getattr(Table.query, "_orbital_fast", False):
        return
    original_query, original_all_items = Table.query, Table.all_items

    def all_items(self: Any) -> list[Any]:
        wanted = getattr(_querying, "scope", None)
        if wanted is None or wanted[0] is not self:
            return original_all_items(self)
        _, index_name, hash_key = wanted
        if index_name is None and hash_key is not None and self.range_key_attr:
            partition = self.items.get(hash_key)
            return list(partition.values()) if partition else []
        if self.range_key_attr:
            everything = [item for partition in list(self.items.values()) for item in list(partition.values())]
        else:
            everything = list(self.items.values())
        attribute = _index_hash_attribute(self, index_name) if index_name is not None else None
        if attribute is None or hash_key is None or hash_key.type != "S" or not isinstance(hash_key.value, str):
            return everything
        # only items whose index key is that very string
        value = hash_key.value
        return [
            i for i in everything if (a := i.attrs.get(attribute)) is not None and a.type == "S" and a.value == value
        ]

    def query(self: Any, hash_key: Any, *args: Any, **kwargs: Any) -> Any:
        index_name = args[6] if len(args) > 6 else kwargs.get("index_name")
        outer = getattr(_querying, "scope", None)
        _querying.scope = (self, index_name, hash_key)
        try:
            return original_query(self, hash_key, *args, **kwargs)
        finally:
            _querying.scope = outer

    query._orbital_fast = True  # type: ignore[attr-defined]
    Table.query = query  # type: ignore[method-assign]
    Table.all_items = all_items  # type: ignore[method-assign]


def cache_update_expressions() -> None:
    """moto parses an `UpdateExpression` twice per `UpdateItem` (its response checks the placeholders, its backend
    applies it), ~0.13 ms each for `SET a = :a, b = :b REMOVE c, d`, and the gateway's repositories send the same
    few expressions over and over. Parse each text once; every caller gets its own copy of the tree (the validator
    rewrites it), unpickled in a fifth of the time of a parse. Invalid expressions raise as before. Idempotent."""
    import pickle

    from moto.dynamodb.parsing.expressions import UpdateExpressionParser  # type: ignore[attr-defined]

    original = UpdateExpressionParser.make
    if getattr(original, "_orbital_cached", False):
        return
    parsed: dict[str, bytes] = {}

    def make(cls: Any, expression_str: str) -> Any:
        frozen = parsed.get(expression_str)
        if frozen is not None:
            return pickle.loads(frozen)
        tree = original(expression_str)  # before anyone rewrites it
        if len(parsed) < 1024:
            try:
                parsed[expression_str] = pickle.dumps(tree, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception:
                pass
        return tree

    make._orbital_cached = True  # type: ignore[attr-defined]
    UpdateExpressionParser.make = classmethod(make)


def cache_conditions() -> None:
    """moto parses a `ConditionExpression` (and a query's `FilterExpression`) twice per request, its response to
    check the placeholders and its backend to evaluate it: ~0.1 ms each for `st = :pending`, a quarter of a claim's
    cost once its update is applied without moto's validator (`moto_updates`). The parsed condition depends only on
    the text, the name map and the values it uses, and evaluating it changes nothing: parse each such combination
    once and hand out the same tree, with the placeholders it found. Invalid ones raise as before. Idempotent."""
    from moto.dynamodb.comparisons import ConditionExpressionParser

    original = ConditionExpressionParser.parse
    if getattr(original, "_orbital_cached", False):
        return
    used: dict[tuple[Any, ...], tuple[str, ...]] = {}  # (text, names) -> the value placeholders it uses
    parsed: dict[tuple[Any, ...], tuple[Any, list[str], list[str]]] = {}
    lock = threading.Lock()
    kept = 1024

    def parse(self: Any) -> Any:
        text = self.condition_expression
        if not text:
            return original(self)
        names = self.expression_attribute_names or {}
        values = self.expression_attribute_values or {}
        try:
            shape = (text, tuple(sorted(names.items())))
        except TypeError:
            return original(self)
        placeholders = used.get(shape)
        key = None
        if placeholders is not None:
            key = (shape, tuple((p, repr(values.get(p))) for p in placeholders))
            if len(repr(key)) > 1024:
                key = None
            else:
                hit = parsed.get(key)
                if hit is not None:
                    op, names_found, values_found = hit
                    self.expr_attr_names_found.extend(names_found)
                    self.expr_attr_values_found.extend(values_found)
                    return op
        op = original(self)
        names_found, values_found = list(self.expr_attr_names_found), list(self.expr_attr_values_found)
        with lock:
            if len(used) >= kept or len(parsed) >= kept:
                used.clear()
                parsed.clear()
            if placeholders is None:
                used[shape] = tuple(values_found)
            elif key is not None:
                parsed[key] = (op, names_found, values_found)
        return op

    parse._orbital_cached = True  # type: ignore[attr-defined]
    ConditionExpressionParser.parse = parse  # type: ignore[method-assign]


def plain_string_keys() -> None:
    """moto hashes, compares and orders its typed values through `cast_value`, a property that asks the value five
    questions (a number? a set? a list? a map? null?) before it hands back a string as it is: about 1 us a hash and
    2 an equality, and every read or write of an item hashes and compares its keys in the table's dictionaries
    several times (13% of the instructions of a pending call's `PutItem`). For strings (the table's keys) the answer
    is the string: hash, compare and order two of them directly, with the same results; every other type goes to
    moto's own methods. Idempotent."""
    from moto.dynamodb.models.dynamo_type import DynamoType

    original_hash, original_eq, original_lt = DynamoType.__hash__, DynamoType.__eq__, DynamoType.__lt__
    if getattr(original_hash, "_orbital_plain", False):
        return

    def __hash__(self: Any) -> int:
        return hash(("S", self.value)) if self.type == "S" else original_hash(self)

    def __eq__(self: Any, other: Any) -> bool:
        if self.type != "S":
            return original_eq(self, other)
        return other.type == "S" and self.value == other.value

    def __lt__(self: Any, other: Any) -> bool:
        if self.type == "S" and other.type == "S":
            return bool(self.value < other.value)
        return original_lt(self, other)

    __hash__._orbital_plain = True  # type: ignore[attr-defined]
    __hash__._orbital_original = original_hash  # type: ignore[attr-defined]
    __eq__._orbital_original = original_eq  # type: ignore[attr-defined]
    __lt__._orbital_original = original_lt  # type: ignore[attr-defined]
    DynamoType.__hash__ = __hash__  # type: ignore[method-assign]
    DynamoType.__eq__ = __eq__  # type: ignore[method-assign]
    DynamoType.__lt__ = __lt__  # type: ignore[method-assign]


def skip_batch_models() -> None:
    """moto's Step Functions interpreter imports `moto.batch.utils` (for its Batch integration), and importing that
    runs `moto.batch`'s `__init__`, which loads the Batch, EC2 and ECS models: about 0.9 s, half of the local stack's
    start. Orbital's state machines never call Batch. Register `moto.batch` as a bare package, so its submodules
    still load from their files and only the models are left out (a Batch request to this stack would fail)."""
    if "moto.batch" in sys.modules:
        return
    spec = importlib.util.find_spec("moto.batch")
    if spec is None or not spec.submodule_search_locations:
        return
    package = ModuleType("moto.batch", "moto.batch without its models (orbital.local.stack.skip_batch_models)")
    package.__path__ = list(spec.submodule_search_locations)
    package.__package__ = "moto.batch"
    sys.modules["moto.batch"] = package


def _program_copier(program: Any) -> Callable[[], Any]:
    """A maker of fresh copies of a parsed program. Unpickling its pickle builds the same object graph as
    `copy.deepcopy` (moto's components define no copy or pickle hooks) in about a fifth of the time (0.14 against
    0.73 ms for deferred_call); a program that does not pickle is deep-copied."""
    import copy
    import pickle

    try:
        frozen = pickle.dumps(program, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        return lambda: copy.deepcopy(program)
    return lambda: pickle.loads(frozen)


def cache_state_machine_parsing() -> None:
    """moto parses a definition with ANTLR on every execution (~60-90 ms of CPU, contending with everything else in
    this one process). Parse each definition once and give every execution its own copy of the program."""
    skip_batch_models()
    from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser

    original = AmazonStateLanguageParser.parse
    if getattr(original, "_orbital_cached", False):
        return
    parsed: dict[str, tuple[Callable[[], Any], Any]] = {}
    lock = threading.Lock()

    def parse(definition: str) -> Any:
        with lock:
            hit = parsed.get(definition)
        if hit is None:
            program, tree = original(definition)
            hit = (_program_copier(program), tree)
            with lock:
                parsed[definition] = hit
        return hit[0](), hit[1]

    parse._orbital_cached = True  # type: ignore[attr-defined]
    AmazonStateLanguageParser.parse = staticmethod(parse)  # type: ignore[method-assign]

    # and it builds a new boto3 Lambda client (tens of ms of CPU) for every Lambda task: keep one per endpoint, and
    # let the local gateway serve it in process (ADR 0006)
    from moto.stepfunctions.parser.asl.component.state.exec.state_task import lambda_eval_utils

    build = lambda_eval_utils.boto_client_for
    clients: dict[tuple[Any, ...], Any] = {}

    def boto_client_for(region: str, service: str, state_credentials: Any = None) -> Any:
        from moto.core.models import botocore_stubber

        key = (region, service, botocore_stubber.enabled, os.environ.get("MOTO_PORT"))
        with lock:
            made = clients.get(key)
        if made is None:
            made = build(region=region, service=service, state_credentials=state_credentials)
            made = gateway_clients.offer_in_process(made) or made  # the local gateway answers it without HTTP
            if service == "lambda":
                made = _DirectLambda(made)
            with lock:
                clients[key] = made
        return made

    lambda_eval_utils.boto_client_for = boto_client_for

    # and it builds a new JSONPath parser (a PLY grammar, ~2 ms of CPU) for every path it evaluates: the parsed
    # expressions are immutable, so parse each distinct path once
    from moto.stepfunctions.parser.asl.component.common.path import result_path
    from moto.stepfunctions.parser.asl.utils import json_path

    for module in (json_path, result_path):
        module.parse = functools.lru_cache(maxsize=1024)(module.parse)  # type: ignore[attr-defined]


def provision(
    client: Callable[[str], Any],
    root: Path,
    template: dict[str, Any],
    *,
    table: str,
    bucket: str,
    create_table: bool = True,
) -> dict[str, str]:
    """Create the template's table, bucket, functions and state machines. Returns state machine ARNs by logical id."""
    if create_table:
        _, table_kwargs = tpl.table_definition(template)
        ddb = client("dynamodb")
        ddb.create_table(TableName=table, **table_kwargs)
        ttl = tpl.ttl_attribute(template)
        if ttl:
            ddb.update_time_to_live(TableName=table, TimeToLiveSpecification={"Enabled": True, "AttributeName": ttl})
        client("s3").create_bucket(Bucket=bucket)
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": ["lambda.amazonaws.com", "states.amazonaws.com"]},
                "Action": "sts:AssumeRole",
            }
        ],
    }
    role = client("iam").create_role(RoleName="orbital-local", AssumeRolePolicyDocument=json.dumps(trust))["Role"]
    lam = client("lambda")
    specs = tpl.functions(template)
    for logical_id, spec in specs.items():
        lam.create_function(
            FunctionName=logical_id,
            Runtime="python3.13",
            Role=role["Arn"],
            Handler=spec["handler"],
            Code={"ZipFile": b"PK\x05\x06" + b"\x00" * 18},
        )
    return create_state_machines(client, root, template, table=table, bucket=bucket, role_arn=role["Arn"])


def create_state_machines(
    client: Callable[[str], Any], root: Path, template: dict[str, Any], *, table: str, bucket: str, role_arn: str
) -> dict[str, str]:
    """Create the template's state machines. Returns their ARNs by logical id."""
    arns: dict[str, str] = {}
    sfn = client("stepfunctions")
    resolver = _Resolver(template, tpl.functions(template), table, bucket)
    for logical_id, spec in tpl.state_machines(template).items():
        text = (root / spec["definition_uri"]).read_text()
        for key, value in spec["substitutions"].items():
            text = text.replace("${" + key + "}", resolver.resolve(value))
        arns[logical_id] = sfn.create_state_machine(
            name=logical_id, definition=text, roleArn=role_arn, type=spec["type"]
        )["stateMachineArn"]
    return arns


class _Resolver:
    """Resolve the few intrinsics DefinitionSubstitutions use (function ARNs, table/bucket names)."""

    def __init__(self, template: dict[str, Any], functions: dict[str, Any], table: str, bucket: str) -> None:
        self.kinds = {r: res.get("Type") for r, res in template["Resources"].items()}
        self.functions = functions
        self.table = table
        self.bucket = bucket

    def resolve(self, value: Any) -> str:
        if isinstance(value, str):
            return value
        if isinstance(value, dict):
            if "Fn::GetAtt" in value:
                return f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{value['Fn::GetAtt'][0]}"
            if "Ref" in value:
                ref = value["Ref"]
                if self.kinds.get(ref) == "AWS::DynamoDB::Table":
                    return self.table
                if self.kinds.get(ref) == "AWS::S3::Bucket":
                    return self.bucket
                if ref in self.functions:
                    return str(ref)
            if "Fn::Sub" in value and isinstance(value["Fn::Sub"], str):
                return value["Fn::Sub"].replace("${AWS::Region}", REGION).replace("${AWS::AccountId}", ACCOUNT)
        raise ValueError(f"cannot resolve substitution {value!r} locally")


class _MotoServer:
    """moto's server app on a free loopback port, in a thread, answering only this start's credentials (what
    `moto.server.ThreadedMotoServer` does, with `credentials.require_key` in front of the app)."""

    def __init__(self, key_id: str) -> None:
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
        from werkzeug.serving import make_server

        app = require_key(DomainDispatcherApplication(create_backend_app), key_id)
        self._server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=MotoRequestHandler)
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, name="orbital-moto", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._thread.join(timeout=10)
        self._server.server_close()


class MotoStack:
    RESTARTS = 3
    """How often a minute the Step Functions process is started again after it died."""

    def __init__(
        self, root: Path, template_path: Path, *, table: str, bucket: str, step_functions_process: bool = True
    ) -> None:
        self.root = root
        self.step_functions_process = step_functions_process and hasattr(socket, "socketpair") and os.name == "posix"
        """Interpret the state machines in a child process (orbital.local.sfn_worker, ADR 0017)."""
        self.states: StepFunctionsProcess | None = None
        self._restart_lock = threading.Lock()
        self._restarts: list[float] = []
        self._stopping = False
        self.template = tpl.load_template(template_path)
        self.table = table
        self.bucket = bucket
        self.functions = FunctionHost(root, self.template)
        self.state_machine_arns: dict[str, str] = {}
        self.endpoint = ""
        self.credentials = Credentials.draw()
        """What every request to the moto server must present (`orbital.local.credentials`)."""
        self.in_process: InProcessAws | None = None
        self._server: _MotoServer | None = None

    def start(self, *, in_process: bool = True) -> str:
        """Start the moto server and create the template's resources. With `in_process`, clients of this stack
        (and, once the gateway says so, its own) skip the HTTP hop (ADR 0006)."""
        if self.step_functions_process:
            self.states = StepFunctionsProcess(on_exit=self._states_ended)
            try:
                self.states.spawn()  # it loads moto while this process does
            except Exception:
                self._interpret_here()
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        self._server = _MotoServer(self.credentials.key_id)
        port = self._server.port
        os.environ["MOTO_PORT"] = str(port)
        self.endpoint = f"http://127.0.0.1:{port}"
        import requests

        requests.post(
            f"{self.endpoint}/moto-api/config",
            json={"stepfunctions": {"execute_state_machine": True}, "lambda": {"use_docker": False}},
            headers={KEY_HEADER: self.credentials.key_id},
            timeout=10,
        ).raise_for_status()
        self.in_process = InProcessAws(self.endpoint) if in_process else None
        if self.states is not None:
            try:
                self._connect(self.states)
            except Exception:
                self._interpret_here()
        self._patch_lambda()
        if self.states is not None:
            self._serve_states(self.states)
        self._create_resources()
        return self.endpoint

    def _states_ended(self, process: StepFunctionsProcess) -> None:
        """The Step Functions process died while the gateway runs: start another and create the state machines in
        it again (same names, so the same ARNs). The executions it had are gone; what waited on them is ended by
        the sweep of overdue calls, and an agent run by its stale check. At most `RESTARTS` a minute."""
        import time

        with self._restart_lock:
            if self._stopping or self.states is not process:
                return
            now = time.monotonic()
            self._restarts = [t for t in self._restarts if now - t < 60] + [now]
            if len(self._restarts) > self.RESTARTS:
                log.error("the Step Functions process keeps ending; not starting it again")
                return
            process.stop()
            replacement = StepFunctionsProcess(on_exit=self._states_ended)
            try:
                replacement.spawn()
                self._connect(replacement)
            except Exception:
                log.exception("could not start the Step Functions process again")
                replacement.stop()
                return
            self._serve_states(replacement)
            role = self.client("iam").get_role(RoleName="orbital-local")["Role"]["Arn"]
            create_state_machines(
                self.client, self.root, self.template, table=self.table, bucket=self.bucket, role_arn=role
            )
            # lazy: the Step Functions process imports this module too, and never builds the gateway's Services
            from orbital.runtime.services import get_services

            get_services().armed_timers.clear()  # the timers of due calls it ran are gone with it: start them anew
            log.warning("the Step Functions process was started again (pid %s)", replacement.pid)

    def _connect(self, process: StepFunctionsProcess) -> None:
        process.connect(self.functions.specs, functools.partial(run_function, self.functions))

    def _serve_states(self, process: StepFunctionsProcess) -> None:
        """From now on `process` answers every Step Functions request of this stack."""
        self.states = process
        forward_requests(process)
        if self.in_process is not None:
            self.in_process.states = process

    def _interpret_here(self) -> None:
        """The Step Functions process could not start: interpret the state machines in this one (slower, same
        answers)."""
        log.warning("the Step Functions process did not start; interpreting state machines in this one", exc_info=True)
        if self.states is not None:
            self.states.stop()
        self.states = None

    def stop(self) -> None:
        """Stop the server and drop moto's state (it lives in this process; the data dir has the snapshot)."""
        if self.in_process is not None:
            self.in_process.enabled = False  # clients built earlier now go over HTTP, to a server that is gone
        with self._restart_lock:
            self._stopping = True
            states, self.states = self.states, None
        if states is not None:
            forward_requests(None)
            states.stop()
        if self._server is not None:
            import requests

            try:
                requests.post(
                    f"{self.endpoint}/moto-api/reset", headers={KEY_HEADER: self.credentials.key_id}, timeout=10
                )
            except requests.RequestException:
                log.warning("could not reset the local AWS state on stop")
            self._server.stop()
            self._server = None

    def client(self, service: str) -> Any:
        import boto3

        made = boto3.client(
            service,
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=self.credentials.key_id,
            aws_secret_access_key=self.credentials.secret,
        )
        if self.in_process is not None:
            self.in_process.attach(made)
        return made

    def _patch_lambda(self) -> None:
        untrack_models()
        patch_lambda(self.functions)
        if self.states is None:  # interpreted here
            cache_state_machine_parsing()
            ready_task_callbacks()
        make_moto_atomic(step_functions=self.states is None)
        fast_queries()
        cache_update_expressions()
        cache_conditions()
        plain_string_keys()
        cache_action_lookup()

    def _create_resources(self) -> None:
        self.state_machine_arns = provision(self.client, self.root, self.template, table=self.table, bucket=self.bucket)
