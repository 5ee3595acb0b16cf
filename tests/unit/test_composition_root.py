"""The composition root (`orbital.runtime.services`) gives `Services` the registry of `orbital.methods`; `Services`
itself (`orbital.ports.services`) knows no family and makes the registry it is given on first use (ADR 0031)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import orbital
import pytest
from orbital import methods
from orbital.ports.capabilities import ON_AWS
from orbital.ports.services import Lazy, Services
from orbital.protocol.registry import Registry, Router
from orbital.runtime.services import build_services
from orbital.settings import Settings


def test_services_of_the_root_carry_the_registry_of_the_methods_and_its_run_hooks() -> None:
    services = build_services(Settings())
    assert services.registry is methods.registry()
    hooks = services.hooks
    assert {f.__module__ for f in hooks.on_run_reply} == {"orbital.channels.delivery"}
    assert {f.__module__ for f in hooks.on_run_ended} == {"orbital.agent.cron_runs"}
    assert {name: f.__module__ for name, f in hooks.native_tools.items()} == {
        "gsv__Cron": "orbital.agent.cron_runs",
        "gsv__Message": "orbital.channels.message_tool",
    }


def ports(**given: Any) -> dict[str, Any]:
    """Every port but the registry, none of them usable (a test that needs one gives it)."""

    def unused() -> Any:
        raise AssertionError("a port was built that the test does not use")

    return {
        "table": Lazy(unused),
        "workspace": Lazy(unused),
        "sender": Lazy(unused),
        "workflows": Lazy(unused),
        "backups": None,
        "portable": unused,
        "capabilities": ON_AWS,
        **given,
    }


def test_services_make_the_registry_they_are_given_once_on_first_use() -> None:
    made: list[Registry] = []

    def make() -> Registry:
        made.append(Registry())
        return made[-1]

    services = Services(Settings(), registry=make, **ports())
    assert made == []
    assert services.registry is services.registry
    assert len(made) == 1 and services.registry is made[0]


def test_services_take_a_registry_as_it_is() -> None:
    router = Router("only")
    registry = Registry()
    registry.include(router)
    assert Services(Settings(), registry=registry, **ports()).registry is registry


def test_services_build_a_lazy_port_once_on_first_use_and_take_a_port_as_it_is(tmp_path: Path) -> None:
    from orbital.store.backends.files import FileWorkspace

    built: list[FileWorkspace] = []

    def make() -> FileWorkspace:
        built.append(FileWorkspace(tmp_path / "objects"))
        return built[-1]

    with FileWorkspace(tmp_path / "given") as given:
        services = Services(Settings(), registry=Registry(), **ports(workspace=Lazy(make), table=given))
        assert built == []
        assert services.workspace is services.workspace is built[0] and len(built) == 1
        assert services.table is given  # not a table, but Services never looks: the root chose it
        built[0].close()


def test_a_sender_is_adopted_only_in_place_of_one_not_yet_built() -> None:
    from tests.conftest import FakeSender

    services = Services(Settings(), registry=Registry(), **ports())
    adopted = FakeSender()
    assert services.adopt_sender(adopted) and services.sender is adopted
    assert not services.adopt_sender(FakeSender()) and services.sender is adopted
    given = Services(Settings(), registry=Registry(), **ports(sender=adopted))
    assert not given.adopt_sender(FakeSender()) and given.sender is adopted


def test_a_native_tool_has_one_owner() -> None:
    first, second = Router("a"), Router("b")
    first.native_tool("gsv__X")(lambda env, args: {})
    second.native_tool("gsv__X")(lambda env, args: {})
    registry = Registry()
    registry.include(first)
    with pytest.raises(ValueError, match=r"native_tools\[gsv__X\]"):
        registry.include(second)


def test_services_open_their_own_table_and_bucket_as_portable_stores(aws: None) -> None:
    from orbital.settings import get_settings
    from orbital.store.portable_aws import DynamoItems, S3Objects

    settings = get_settings()
    items, objects = build_services(settings).portable_stores()
    assert isinstance(items, DynamoItems) and items.name == settings.table_name
    assert isinstance(objects, S3Objects) and objects.name == settings.bucket_name
    assert list(items.scan()) == []  # moto's table of the template, reachable


def test_stores_given_to_the_aws_root_come_with_their_portable_form(tmp_path: Path) -> None:
    from orbital.local.portable import TableItems, WorkspaceObjects
    from orbital.store.backends.database import Database
    from orbital.store.backends.files import FileWorkspace
    from orbital.store.backends.sqlite import SqliteTable

    with Database(tmp_path / "table.sqlite3") as db:
        table, workspace = SqliteTable(db), FileWorkspace(tmp_path / "objects")
        with pytest.raises(RuntimeError, match="without their portable form"):
            build_services(Settings(), table=table, workspace=workspace).portable_stores()
        made = (TableItems(table), WorkspaceObjects(workspace))
        given = build_services(Settings(), table=table, workspace=workspace, portable=lambda: made)
        assert given.portable_stores() == made
        workspace.close()


def test_the_local_root_builds_its_services_on_the_data_directory(tmp_path: Path) -> None:
    from orbital.local.portable import TableItems, WorkspaceObjects
    from orbital.local.services import build_local_services
    from orbital.local.store import LocalStore

    store = LocalStore.open(tmp_path / "data")
    try:
        from orbital.local.sender import BridgeSender
        from orbital.local.workflows import LocalWorkflows, stopped

        settings = Settings(local=True, mgmt_endpoint="http://127.0.0.1:1/local")
        workflows = LocalWorkflows(stopped)
        services = build_local_services(settings, store, workflows=workflows)
        assert services.workflows is workflows
        assert isinstance(services.sender, BridgeSender) and services.sender.bridge is None  # set by the gateway
        assert services.table is store.table and services.workspace is store.workspace
        items, objects = services.portable_stores()
        assert isinstance(items, TableItems) and isinstance(objects, WorkspaceObjects)
        assert services.backups is None
        caps = services.capabilities
        assert caps.binary_frames and caps.own_machine and not caps.bounded_requests
        assert caps.http_api_url == "http://127.0.0.1:1/local"
        assert build_services(settings).capabilities == ON_AWS  # the AWS root's, whatever the settings say
    finally:
        store.close()


# --- the roots are the only places that choose implementations ----------------------------------------------------

PACKAGE = Path(orbital.__file__).resolve().parent

ROOTS = {
    "runtime/services.py": "the AWS composition root",
    "local/services.py": "the local gateway's composition root",
    "local/store.py": "opens a data directory's table and workspace, for the local root and the tools that read it",
    "cli/portable.py": "`orbital export` / `import`: the tool's own stores, of a stack or of a data directory",
    "local/stack.py": "the local Step Functions stand-in: its Workflows backend is a view of its own process",
}
"""The modules of `orbital` that may construct a backend, each with why."""


def _backends() -> set[str]:
    """The names of the classes that implement a port: every subclass of the Table and Workspace ports, and the
    structural implementations of the others (the sender, the portable archive's stores)."""
    import importlib
    import pkgutil

    from orbital.aws import push, workflows
    from orbital.local import portable as local_portable
    from orbital.local import sender as local_sender
    from orbital.local import workflows as local_workflows
    from orbital.store import backends, portable_aws
    from orbital.store.table import Table
    from orbital.store.workspace import Workspace

    for module in pkgutil.iter_modules(backends.__path__):
        importlib.import_module(f"{backends.__name__}.{module.name}")
    found: set[str] = set()
    pending: list[type] = [Table, Workspace]
    while pending:
        for sub in pending.pop().__subclasses__():
            if sub.__module__.startswith("orbital."):
                found.add(sub.__name__)
            pending.append(sub)
    found |= {push.ManagementApiSender.__name__, portable_aws.DynamoItems.__name__, portable_aws.S3Objects.__name__}
    found |= {local_portable.TableItems.__name__, local_portable.WorkspaceObjects.__name__}
    found |= {workflows.StepFunctionsWorkflows.__name__, local_workflows.LocalWorkflows.__name__}
    found.add(local_sender.BridgeSender.__name__)
    return found


def _constructed(tree: ast.AST, names: set[str]) -> list[tuple[int, str]]:
    calls = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if name in names:
                calls.append((node.lineno, name))
    return calls


def test_only_the_composition_roots_construct_a_backend() -> None:
    names = _backends()
    assert {"DynamoTable", "SqliteTable", "S3Workspace", "FileWorkspace", "ManagementApiSender"} <= names
    assert {"StepFunctionsWorkflows", "LocalWorkflows", "BridgeSender"} <= names
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        if module in ROOTS:
            continue
        calls = _constructed(ast.parse(path.read_text(encoding="utf-8")), names)
        if calls:
            found[module] = calls
    assert found == {}, "construct backends only in a composition root (ADR 0049): " + repr(found)
    for module in ROOTS:
        assert (PACKAGE / module).exists(), module


def test_the_backend_check_sees_a_construction() -> None:
    tree = ast.parse("from x import DynamoTable\ntable = DynamoTable(client, 'name')\nother = m.S3Workspace(c)\n")
    assert _constructed(tree, {"DynamoTable", "S3Workspace"}) == [(2, "DynamoTable"), (3, "S3Workspace")]


def test_no_settings_local_below_the_entry_points_and_roots() -> None:
    """The middle layers ask the ports' capabilities (`orbital.ports.capabilities`), never `settings.local`: only
    the entry points (`runtime/` handlers, `cli/`, `local/`) and the roots read it."""
    middle = ("rest", "methods", "dialects", "channels", "agent", "tools", "engines", "ports", "store", "aws")
    found = []
    for layer in middle:
        for path in sorted((PACKAGE / layer).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute) and node.attr == "local" and _is_settings(node.value):
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert found == []


def _is_settings(node: ast.expr) -> bool:
    return (isinstance(node, ast.Name) and node.id == "settings") or (
        isinstance(node, ast.Attribute) and node.attr == "settings"
    )


def test_the_routes_reach_services_only_through_their_dependency() -> None:
    """No route looks its Services up: in `rest/` only the dependency (`rest/deps.py`) asks the root for it."""
    asking = []
    for path in sorted((PACKAGE / "rest").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "orbital.runtime.services":
                asking.append(path.name)
    assert asking == ["deps.py"]
