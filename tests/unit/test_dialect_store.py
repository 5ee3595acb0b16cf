"""What the dialects keep in the table, through their store modules, on both tables (SQLite, DynamoDB on moto):
WindieOS users' settings (`store.windie_settings`) and the run subscriptions' event counters, lookups and drops
(`store.subscriptions`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from orbital.store import subscriptions
from orbital.store.subscriptions import Subscription
from orbital.store.windie_settings import WindieSettingsRepo

from tests.contract.conftest import open_table


@pytest.fixture(params=["sqlite", "dynamo"])
def table(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    with open_table(request.param, tmp_path) as opened:
        yield opened


def _sub(run_id: str, connection_id: str, session: str = "agent:main:windie:group:x", **ref: Any) -> Subscription:
    return Subscription(run_id, connection_id, "windie", session, dict(ref))


def test_a_users_settings_are_what_was_saved_and_only_theirs(table: Any) -> None:
    repo = WindieSettingsRepo(table)
    assert repo.load("ann") == {}
    repo.save("ann", {"model_mode": "local", "updatedAt": 5})
    repo.save("bob", {"wakeword_enabled": True})
    assert repo.load("ann") == {"model_mode": "local", "updatedAt": 5}
    repo.save("ann", {"speech_mode_enabled": True})  # replaced, not merged
    assert repo.load("ann") == {"speech_mode_enabled": True}
    assert repo.load("bob") == {"wakeword_enabled": True}


def test_events_are_counted_on_a_subscription_in_one_run_until_it_is_gone(table: Any) -> None:
    sub = _sub("run-1", "conn-1")
    subscriptions.subscribe(table, sub)
    assert subscriptions.count_events(table, "run-1", "conn-1", 3) == 3
    assert subscriptions.count_events(table, "run-1", "conn-1", 2) == 5
    assert subscriptions.count_events(table, "run-1", "conn-2", 1) is None  # no such subscription: nothing counted
    subscriptions.drop(table, sub)
    assert subscriptions.count_events(table, "run-1", "conn-1", 1) is None
    assert subscriptions.of_run(table, "run-1") == []


def test_a_runs_subscriptions_and_every_subscription_are_found(table: Any) -> None:
    first = _sub("run-1", "conn-1", turn="t1")
    second = _sub("run-1", "conn-2", turn="t1")
    other = _sub("run-10", "conn-1", turn="t2")  # a run id the first one is a prefix of
    for sub in (first, second, other):
        subscriptions.subscribe(table, sub)
    assert sorted(s.connection_id for s in subscriptions.of_run(table, "run-1")) == ["conn-1", "conn-2"]
    assert {(s.run_id, s.connection_id, s.ref.get("turn")) for s in subscriptions.every(table)} == {
        ("run-1", "conn-1", "t1"),
        ("run-1", "conn-2", "t1"),
        ("run-10", "conn-1", "t2"),
    }
    assert [s.run_id for s in subscriptions.of_connection(table, "conn-2")] == ["run-1"]
