"""Shared fixtures: fake AWS credentials, moto-backed resources created from template.yaml, and an RPC helper."""

from __future__ import annotations

import asyncio
import copy
import functools
import itertools
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
EVENTS = ROOT / "events"
TABLE = "orbital-test"
BUCKET = "orbital-test-workspace"


def load_event(name: str) -> dict[str, Any]:
    return json.loads((EVENTS / name).read_text())


@functools.cache
def _parsed_template() -> dict[str, Any]:
    from orbital.local.template import load_template

    return load_template(ROOT / "template.yaml")


def template() -> dict[str, Any]:
    """template.yaml as `load_template` reads it, parsed once per test process (50 ms of CPU with PyYAML's loader,
    and hundreds of tests start from it); each caller gets its own copy to change."""
    return copy.deepcopy(_parsed_template())


@pytest.fixture(autouse=True)
def _aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in (
        "AWS_ENDPOINT_URL",
        "ORBITAL_AWS_ENDPOINT",
        "ORBITAL_AUTH_TOKEN",
        "ORBITAL_AUTH_TOKEN_SECRET",
        "ORBITAL_LOCAL",
    ):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("ORBITAL_TABLE", TABLE)
    monkeypatch.setenv("ORBITAL_BUCKET", BUCKET)
    monkeypatch.setenv("ORBITAL_WS_MGMT_ENDPOINT", "https://abc123.execute-api.us-east-1.amazonaws.com/test")
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    reset_caches()


def reset_caches() -> None:
    from orbital.aws import secrets
    from orbital.aws.clients import reset_clients
    from orbital.runtime.attempts import ATTEMPTS
    from orbital.runtime.services import reset_services
    from orbital.settings import reset_settings

    secrets.forget()
    ATTEMPTS.reset()  # failed credential attempts of earlier tests
    reset_settings()
    reset_clients()
    reset_services()


GATEWAY_TOKEN = "gateway-token-for-tests-0123456789"


@pytest.fixture
def token(monkeypatch: pytest.MonkeyPatch) -> str:
    """A gateway with a token (as on AWS always, and locally with `TOKEN`): `ORBITAL_AUTH_TOKEN`, read afresh."""
    from orbital.settings import reset_settings

    monkeypatch.setenv("ORBITAL_AUTH_TOKEN", GATEWAY_TOKEN)
    reset_settings()
    return GATEWAY_TOKEN


@pytest.fixture
def aws() -> Iterator[None]:
    """moto with the table and bucket of template.yaml."""
    from moto import mock_aws
    from orbital.local.template import table_definition

    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}, "lambda": {"use_docker": False}}):
        import boto3

        reset_caches()
        _, kwargs = table_definition(template())
        ddb = boto3.client("dynamodb", region_name="us-east-1")
        ddb.create_table(TableName=TABLE, **kwargs)
        boto3.client("s3", region_name="us-east-1").create_bucket(Bucket=BUCKET)
        yield
        reset_caches()


class FakeSender:
    """Records frames and closes instead of calling the management API."""

    def __init__(self) -> None:
        self.posts: list[tuple[str, Any]] = []
        self.closes: list[tuple[str, int, str]] = []
        self.gone: set[str] = set()

    def post(self, connection_id: str, frame: Any) -> bool:
        if connection_id in self.gone:
            return False
        self.posts.append((connection_id, frame))
        return True

    def close(self, connection_id: str, code: int = 1000, reason: str = "", *, notify: bool = True) -> None:
        self.closes.append((connection_id, code, reason))

    def frames_to(self, connection_id: str) -> list[Any]:
        return [f for cid, f in self.posts if cid == connection_id]


@pytest.fixture
def sender() -> FakeSender:
    return FakeSender()


@pytest.fixture
def services(aws: None, sender: FakeSender, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """Services on moto's DynamoDB and S3 (the AWS path). A test marked `atomic_table` keeps its items in the local
    runtime's SQLite table instead: one whose outcome rests on conditional writes racing atomically, as DynamoDB's
    do and plain moto's do not (two racing updates can both pass their condition there), or whose reads race writes
    from other threads (a query of plain moto's table can fail while another thread adds an item)."""
    from orbital.runtime.services import build_services
    from orbital.settings import get_settings

    if request.node.get_closest_marker("atomic_table") is None:
        yield build_services(get_settings(), sender=sender)
        return
    from orbital.store.backends.database import Database
    from orbital.store.backends.sqlite import SqliteTable

    with Database(tmp_path / "atomic-table.sqlite3") as db:
        yield build_services(get_settings(), sender=sender, table=SqliteTable(db))


_ids = itertools.count(1)


class Rpc:
    """Dispatch frames as a given socket, the way the WebSocket adapter does."""

    def __init__(self, services: Any, connection_id: str) -> None:
        from orbital.methods import registry
        from orbital.protocol.dispatch import Dispatcher

        self.services = services
        self.connection_id = connection_id
        self.dispatcher = Dispatcher(registry())

    def frame(self, method: str, params: Any = None) -> dict[str, Any] | None:
        frame: dict[str, Any] = {"type": "req", "id": f"r{next(_ids)}", "method": method}
        if params is not None:
            frame["params"] = params
        outcome = self.dispatcher.dispatch(self.services, self.connection_id, frame)
        outcome.run_after_reply()
        return outcome.response

    def call(self, method: str, params: Any = None) -> Any:
        """The payload of a successful call; raises AssertionError with the error otherwise."""
        res = self.frame(method, params)
        assert res is not None, f"{method}: no response"
        assert res["ok"], f"{method} failed: {res.get('error')}"
        return res.get("payload")

    def error(self, method: str, params: Any = None) -> dict[str, Any]:
        res = self.frame(method, params)
        assert res is not None and not res["ok"], f"{method}: expected an error, got {res}"
        return res["error"]


NODE_RUNTIME = {
    "hostRole": "execution",
    "hostCapabilities": ["filesystem.list", "filesystem.read", "filesystem.write", "shell.exec"],
    "toolCapabilities": {"Bash": ["shell.exec"], "Read": ["filesystem.read"]},
}
NODE_TOOLS = [
    {"name": "Bash", "description": "Run a shell command", "inputSchema": {"type": "object"}},
    {"name": "Read", "description": "Read a file", "inputSchema": {"type": "object"}},
]


@pytest.fixture
def connect(services: Any) -> Any:
    """connect(mode="client", id=..., **extra) -> Rpc for a freshly connected socket."""

    def _connect(mode: str = "client", client_id: str | None = None, **extra: Any) -> Rpc:
        cid = f"conn-{next(_ids)}"
        rpc = Rpc(services, cid)
        params: dict[str, Any] = {"minProtocol": 1, "client": {"mode": mode, "id": client_id or cid}}
        if mode == "node":
            params["tools"] = extra.pop("tools", NODE_TOOLS)
            params["nodeRuntime"] = extra.pop("nodeRuntime", NODE_RUNTIME)
        if mode == "channel":
            params["client"]["channel"] = extra.pop("channel", "test")
        if services.settings.auth_token:  # a gateway with a token: present it, as a real client would
            params["auth"] = {"token": services.settings.auth_token}
        params.update(extra)
        rpc.call("connect", params)
        return rpc

    return _connect


@pytest.fixture
def rpc(connect: Any) -> Any:
    """A connected client socket."""
    return connect("client", "test-client")


def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    _keep_bytecode()
    _share_botocore_data()
    # device tokens a developer saved by pairing (`orbital login --pair`) stay out of every test and its subprocesses
    config_home = tempfile.mkdtemp(prefix="orbital-test-config-")
    os.environ["XDG_CONFIG_HOME"] = config_home
    config.add_cleanup(lambda: shutil.rmtree(config_home, ignore_errors=True))


def _keep_bytecode() -> None:
    """Compiled modules are kept (in the checkout's ignored `__pycache__` directories) even where the environment
    says not to (`PYTHONDONTWRITEBYTECODE`): without them every pytest worker rewrites every test module's asserts
    again (about 13 s of CPU each) and every `orbital dev`, `orbital node` and CLI subprocess of the tests compiles
    the package again (about 0.4 s of CPU each, hundreds of them); ADR 0054."""
    sys.dont_write_bytecode = False
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


def _share_botocore_data() -> None:
    """One botocore data loader per test process instead of one per session. `orbital.aws.clients` makes a session
    for every client, as a Lambda container does once; tests reset the clients hundreds of times, and each new
    session would parse botocore's JSON service models (S3's alone is megabytes) again: about half the CPU time of a
    test on moto. The files do not change while the tests run and botocore does not change what it loaded (a
    session already hands the same loaded model to every client it makes). boto3 adds its own data directory to
    the loader of every session it makes: the shared loader's search paths take each directory once."""
    import botocore.loaders
    import botocore.session

    class SearchPaths(list[str]):
        def append(self, path: str) -> None:
            if path not in self:
                super().append(path)

    loaders: dict[str | None, botocore.loaders.Loader] = {}

    def loader(data_path: str | None) -> botocore.loaders.Loader:
        if data_path not in loaders:
            extra = (
                [os.path.expanduser(os.path.expandvars(p)) for p in data_path.split(os.pathsep)] if data_path else []
            )
            loaders[data_path] = botocore.loaders.Loader(extra_search_paths=SearchPaths(extra))
        return loaders[data_path]

    def register(session: botocore.session.Session) -> None:
        components = session._components  # type: ignore[attr-defined]
        components.lazy_register_component("data_loader", lambda: loader(session.get_config_variable("data_path")))

    botocore.session.Session._register_data_loader = register  # type: ignore[method-assign]


@pytest.fixture
def flows(aws: None, services: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The template's functions and state machines created in moto and executed by it; Lambda tasks run the real
    entry points in process. Every handler shares the test's `services` (and so its FakeSender)."""
    import functools

    import boto3
    from orbital.local import stack, step_functions
    from orbital.runtime.services import use_services

    cfn = template()

    def client(service: str) -> Any:
        return boto3.client(service, region_name="us-east-1")

    step_functions.index_executions()  # before the state machines exist: each gets the indexed list
    arns = stack.create_state_machines(client, ROOT, cfn)
    host = stack.FunctionHost(ROOT, cfn)
    step_functions.use_functions(set(host.specs), functools.partial(stack.run_function, host))
    step_functions.cache_state_machine_parsing()  # and Lambda tasks call the handlers in `host`
    monkeypatch.setenv("ORBITAL_DEFERRED_CALL_ARN", arns["DeferredCallStateMachine"])
    monkeypatch.setenv("ORBITAL_AGENT_TURN_ARN", arns["AgentTurnStateMachine"])
    from orbital.settings import get_settings, reset_settings

    reset_settings()
    object.__setattr__(services, "settings", get_settings())
    use_services(services)
    yield arns
    # let executions whose calls were answered finish; stop the rest (a worker that has not started yet cannot be
    # stopped, so give it a moment first)
    import contextlib

    sfn = client("stepfunctions")
    timers = sfn.list_executions(stateMachineArn=arns["DeferredCallStateMachine"], statusFilter="RUNNING")
    for execution in timers["executions"]:  # waits of calls due later: nothing to let finish
        with contextlib.suppress(Exception):
            sfn.stop_execution(executionArn=execution["executionArn"])
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        running = [
            ex["executionArn"]
            for arn in arns.values()
            for ex in sfn.list_executions(stateMachineArn=arn, statusFilter="RUNNING")["executions"]
        ]
        if not running:
            break
        time.sleep(0.05)
    for execution_arn in running:
        with contextlib.suppress(Exception):
            sfn.stop_execution(executionArn=execution_arn)
    use_services(None)


def wait_for(
    predicate: Callable[[], Any],
    timeout: float = 10.0,
    interval: float = 0.02,
    *,
    what: str = "the condition",
    sleep: Callable[[float], None] = time.sleep,
) -> Any:
    """Poll until predicate() is truthy (returns its value) or fail after `timeout` seconds, naming `what`. The one
    polling loop of the tests: a state that comes about in its own time (another process, thread or socket) is
    looked at until it holds, never waited for with a fixed sleep. `sleep(seconds)` waits between looks (a browser
    test waits on its page, which is what serves the page's routes meanwhile)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not seen within {timeout}s: {what}")
        sleep(interval)


async def wait_for_async(
    predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02, *, what: str = "the condition"
) -> Any:
    """`wait_for` inside an event loop: the same loop, sleeping with `asyncio.sleep` so that the tasks whose work
    the predicate looks at go on running meanwhile."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not seen within {timeout}s: {what}")
        await asyncio.sleep(interval)


def deferred_execution_arn(flows: dict[str, str], services: Any, call_id: str) -> str:
    """The deferred_call execution that answers `call_id` if it is still pending when due: the timer of the second
    its call is marked due in (`deferred.start_wait`)."""
    import math

    from orbital.engines import deferred
    from orbital.store import keys

    found = deferred.get(services, call_id)
    assert found is not None, f"no pending call {call_id}"
    first = math.ceil((found.call.created_at + found.call.timeout_ms) / 1000)
    for second in range(first, first + 3):
        if services.table.get(keys.call_due(second, call_id)) is not None:
            return timer_arn(flows, second)
    raise AssertionError(f"call {call_id} is not due in any second")


def timer_arn(flows: dict[str, str], second: int) -> str:
    """The ARN of the deferred_call execution (the timer) of `second`."""
    machine = flows["DeferredCallStateMachine"]
    return machine.replace(":stateMachine:", ":execution:") + f":due-{second}"
