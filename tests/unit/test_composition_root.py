"""The composition root (`orbital.runtime.services`) gives `Services` the registry of `orbital.methods`; `Services`
itself (`orbital.ports.services`) knows no family and makes the registry it is given on first use (ADR 0031)."""

from __future__ import annotations

from pathlib import Path

import pytest
from orbital import methods
from orbital.ports.services import Services
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


def test_services_make_the_registry_they_are_given_once_on_first_use() -> None:
    made: list[Registry] = []

    def make() -> Registry:
        made.append(Registry())
        return made[-1]

    services = Services(Settings(), registry=make)
    assert made == []
    assert services.registry is services.registry
    assert len(made) == 1 and services.registry is made[0]


def test_services_take_a_registry_as_it_is() -> None:
    router = Router("only")
    registry = Registry()
    registry.include(router)
    assert Services(Settings(), registry=registry).registry is registry


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


def test_stores_given_by_a_composition_root_come_with_their_portable_form(tmp_path: Path) -> None:
    from orbital.local.portable import TableItems, WorkspaceObjects
    from orbital.runtime.services import use_portable_stores, use_storage
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
        use_storage(table, workspace)
        use_portable_stores(lambda: made)
        try:
            assert build_services(Settings()).portable_stores() == made  # what the local gateway does
        finally:
            use_storage(None, None)
            use_portable_stores(None)
