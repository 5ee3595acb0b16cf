"""The narrow hooks by which the local gateway runs moto's Step Functions interpreter (ADR 0030).

moto interprets `statemachines/*.asl.json`, normally in a child process (`orbital.local.sfn_worker`): nothing else
available offline runs Amazon States Language. Its DynamoDB and S3 are not used: the local gateway keeps its state
in SQLite and files. What is adjusted here is only the interpreter's bookkeeping, each for a measured reason given
with it: its operations serialized as AWS's are atomic, task tokens answered by the execution that owns them,
executions indexed by name and the finished ones let go, definitions parsed once, and a Lambda task calling the
template function's handler directly (`_DirectLambda`) instead of moto's Lambda backend.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import importlib.util
import io
import logging
import os
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

from orbital.local.sfn_worker import WorkerRefusedError

_log = logging.getLogger("orbital.local")

ACCOUNT = "123456789012"
REGION = "us-east-1"

_functions: tuple[frozenset[str], Callable[[str, bytes | str | None], tuple[bytes, bool]]] | None = None
"""The template's function names and how to run one (in this process, or from the Step Functions process, in the
gateway's): what the state machines' Lambda tasks invoke."""


def use_functions(names: set[str], run: Callable[[str, bytes | str | None], tuple[bytes, bool]]) -> None:
    global _functions
    _functions = (frozenset(names), run)


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


_LOCK = threading.RLock()
"""Held around moto's Step Functions operations (`serialize_operations`)."""


def serialize_operations() -> None:
    """moto's Step Functions is not thread-safe where AWS is atomic: `start_execution` lists an execution before it
    is started, and `send_task_*` or `describe_execution` in another thread then trips over its missing status. Hold
    one lock around those operations so they behave as on AWS. Idempotent."""

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
        _LOCK,
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

        answering._orbital_serialized = True  # type: ignore[attr-defined]  # serialize_operations' lock is inside
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
    package = ModuleType("moto.batch", "moto.batch without its models (orbital.local.step_functions.skip_batch_models)")
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

    # and it builds a new boto3 Lambda client (tens of ms of CPU) for every Lambda task: keep one per endpoint, whose
    # invokes of the template's functions call their handlers directly (`_DirectLambda`)
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


def moto_action(
    handler_class: type, region: str, account: str, around: Callable[[], contextlib.AbstractContextManager[Any]]
) -> Callable[[str, dict[str, Any]], Any]:
    """Run one operation of a moto response class with `params` (boto3's parameters, which are the JSON protocol's
    request body) as its parsed request, inside `around`; its result as a dict. How the Step Functions process
    answers the gateway without moto's HTTP routing and request parsing (`orbital.local.sfn_child`), and the gateway
    itself when it interprets the state machines in its own process (`orbital.local.workflows.interpreted_here`)."""
    from moto.core.responses import ActionResult

    def run(method: str, params: dict[str, Any]) -> Any:
        handler = handler_class()
        handler.current_account = account
        handler.region = region
        handler.body = params
        handler.params = params
        handler.uri_match = {}
        handler.querystring = {}
        handler.automated_parameter_parsing = True
        with around():
            result = getattr(handler, method)()
            return result.result if isinstance(result, ActionResult) else {}

    return run


def error_answer(exc: BaseException, what: str = "") -> tuple[str, str, int]:
    """The AWS error (code, message, HTTP status) that moto's exception, or another answer's refusal, stands for."""
    from moto.core.exceptions import ServiceException
    from werkzeug.exceptions import HTTPException

    if isinstance(exc, WorkerRefusedError):
        return exc.error_code, exc.message, exc.status
    if isinstance(exc, HTTPException):
        code = str(getattr(exc, "error_type", "") or type(exc).__name__).rsplit("#", 1)[-1]
        return code, str(getattr(exc, "message", "") or exc.description or ""), int(exc.code or 400)
    if isinstance(exc, ServiceException):
        return str(exc.code), str(exc.message), 400
    _log.error("local Step Functions call failed: %s", what, exc_info=exc)
    return "InternalFailure", "local AWS emulation failed", 500
