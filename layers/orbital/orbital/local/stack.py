"""The AWS half of the local gateway: the template's functions and state machines, without AWS (ADR 0030).

The table and the bucket are not here: the local gateway keeps them in SQLite and files (`orbital.local.store`).
What remains of AWS is what nothing else can do offline: moto interprets `statemachines/*.asl.json` (a tool call's
timer, every agent turn, every wait), in a child process (`orbital.local.sfn_worker`) unless asked otherwise, and
their Lambda tasks call the template's Python handlers in this process, loaded from their CodeUri as Lambda would.
The gateway reaches them through the Workflows port's local backend (`workflows`: `orbital.local.workflows`).
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
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

from orbital.local import step_functions
from orbital.local import template as tpl
from orbital.local.bridge import request_id
from orbital.local.sfn_worker import StepFunctionsProcess
from orbital.local.step_functions import ACCOUNT, REGION, use_functions
from orbital.local.workflows import Call, LocalWorkflows, forwarded, interpreted_here, stopped

log = logging.getLogger("orbital.local")

ENDPOINT = "http://127.0.0.1:9"
"""The AWS endpoint the local gateway's settings name: nothing listens on the discard port, so a boto3 call that
nothing local answers (every AWS call has a local backend: none should) fails at once instead of reaching AWS."""

ROLE_ARN = f"arn:aws:iam::{ACCOUNT}:role/orbital-local"


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


def state_machine_requests(root: Path, template: dict[str, Any], *, role_arn: str = ROLE_ARN) -> dict[str, Any]:
    """The `CreateStateMachine` parameters of the template's state machines, by logical id (their definitions with
    the DefinitionSubstitutions resolved)."""
    requests: dict[str, Any] = {}
    resolver = _Resolver(template, tpl.functions(template))
    for logical_id, spec in tpl.state_machines(template).items():
        text = (root / spec["definition_uri"]).read_text()
        for key, value in spec["substitutions"].items():
            text = text.replace("${" + key + "}", resolver.resolve(value))
        requests[logical_id] = {"name": logical_id, "definition": text, "roleArn": role_arn, "type": spec["type"]}
    return requests


def create_state_machines(
    client: Callable[[str], Any], root: Path, template: dict[str, Any], *, role_arn: str = ROLE_ARN
) -> dict[str, str]:
    """Create the template's state machines with a boto3 client (`client(service)`). Returns their ARNs by logical
    id."""
    sfn = client("stepfunctions")
    return {
        logical_id: sfn.create_state_machine(**request)["stateMachineArn"]
        for logical_id, request in state_machine_requests(root, template, role_arn=role_arn).items()
    }


class _Resolver:
    """Resolve the few intrinsics DefinitionSubstitutions use (function ARNs)."""

    def __init__(self, template: dict[str, Any], functions: dict[str, Any]) -> None:
        self.functions = functions

    def resolve(self, value: Any) -> str:
        if isinstance(value, str):
            return value
        if isinstance(value, dict):
            if "Fn::GetAtt" in value:
                return f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{value['Fn::GetAtt'][0]}"
            if "Ref" in value and value["Ref"] in self.functions:
                return str(value["Ref"])
            if "Fn::Sub" in value and isinstance(value["Fn::Sub"], str):
                return value["Fn::Sub"].replace("${AWS::Region}", REGION).replace("${AWS::AccountId}", ACCOUNT)
        raise ValueError(f"cannot resolve substitution {value!r} locally")


class LocalStack:
    RESTARTS = 3
    """How often a minute the Step Functions process is started again after it died."""

    def __init__(self, root: Path, template_path: Path, *, step_functions_process: bool = True) -> None:
        self.root = root
        self.step_functions_process = step_functions_process and hasattr(socket, "socketpair") and os.name == "posix"
        """Interpret the state machines in a child process (orbital.local.sfn_worker, ADR 0017)."""
        self.states: StepFunctionsProcess | None = None
        self._restart_lock = threading.Lock()
        self._restarts: list[float] = []
        self._stopping = False
        self.template = tpl.load_template(template_path)
        self.functions = FunctionHost(root, self.template)
        self.state_machine_arns: dict[str, str] = {}
        self.endpoint = ENDPOINT
        self._call: Call = stopped
        """How a Step Functions call is answered now: the process, this process's interpreter, or not at all."""
        self.workflows = LocalWorkflows(self.call)
        """The Workflows port of the local gateway (its composition root gives it to Services)."""

    def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """One Step Functions operation with boto3's parameters, answered where the state machines run now."""
        return self._call(method, params)

    def start(self) -> None:
        """Start the Step Functions interpreter and create the template's state machines in it."""
        if self.step_functions_process:
            self.states = StepFunctionsProcess(on_exit=self._states_ended)
            try:
                self.states.spawn()
                self._connect(self.states)
            except Exception:
                self._interpret_here()
        if self.states is not None:
            self._serve_states(self.states)
        else:
            self._prepare_here()
        self.state_machine_arns = self._create_state_machines()

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
            self._create_state_machines()
            # lazy: moto and the Step Functions process load only when the state machines start
            from orbital.runtime.services import get_services

            get_services().armed_timers.clear()  # the timers of due calls it ran are gone with it: start them anew
            log.warning("the Step Functions process was started again (pid %s)", replacement.pid)

    def _connect(self, process: StepFunctionsProcess) -> None:
        process.connect(self.functions.specs, functools.partial(run_function, self.functions))

    def _create_state_machines(self) -> dict[str, str]:
        requests = state_machine_requests(self.root, self.template, role_arn=ROLE_ARN)
        return {
            logical_id: self.call("create_state_machine", r)["stateMachineArn"] for logical_id, r in requests.items()
        }

    def _serve_states(self, process: StepFunctionsProcess) -> None:
        """From now on `process` answers every Step Functions request of this stack."""
        self.states = process
        self._call = forwarded(lambda: self.states)

    def _interpret_here(self) -> None:
        """The Step Functions process could not start: interpret the state machines in this one (slower, same
        answers)."""
        log.warning("the Step Functions process did not start; interpreting state machines in this one", exc_info=True)
        if self.states is not None:
            self.states.stop()
        self.states = None

    def _prepare_here(self) -> None:
        step_functions.untrack_models()
        step_functions.cache_state_machine_parsing()
        step_functions.ready_task_callbacks()
        step_functions.serialize_operations()
        use_functions(set(self.functions.specs), functools.partial(run_function, self.functions))
        from moto.core.config import default_user_config

        default_user_config["stepfunctions"]["execute_state_machine"] = True
        self._call = interpreted_here(REGION)

    def stop(self) -> None:
        """Stop answering and end the Step Functions process (its executions do not outlive the gateway)."""
        self._call = stopped  # calls from now on fail, as to a server that is gone
        with self._restart_lock:
            self._stopping = True
            states, self.states = self.states, None
        if states is not None:
            states.stop()
