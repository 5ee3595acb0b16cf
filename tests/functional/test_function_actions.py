"""What `$disconnect` and the scheduler tick call on the table and the bucket, recorded from the real code under moto
(botocore's own events on the clients the services use), must be among the actions the template grants their
functions: the narrowed policies of template.yaml hold for the paths that touch the most (a transfer's staging
objects removed when its node leaves, or when its call is swept as overdue)."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from orbital.local import template as tpl
from orbital.ports import lifecycle
from orbital.runtime import scheduler
from orbital.store import keys

from tests.conftest import ROOT

IAM_ACTIONS = {
    "dynamodb": {
        "GetItem": "dynamodb:GetItem",
        "BatchGetItem": "dynamodb:BatchGetItem",
        "Query": "dynamodb:Query",
        "PutItem": "dynamodb:PutItem",
        "UpdateItem": "dynamodb:UpdateItem",
        "DeleteItem": "dynamodb:DeleteItem",
        "BatchWriteItem": "dynamodb:BatchWriteItem",
        "Scan": "dynamodb:Scan",
    },
    "s3": {
        "GetObject": "s3:GetObject",
        "HeadObject": "s3:GetObject",
        "PutObject": "s3:PutObject",
        "CopyObject": "s3:PutObject",
        "DeleteObject": "s3:DeleteObject",
        "DeleteObjects": "s3:DeleteObject",
        "ListObjectsV2": "s3:ListBucket",
    },
}
"""The IAM action each API call needs (a call not listed here fails the test: add it with its action)."""


def granted(logical_id: str) -> set[str]:
    resource = tpl.load_template(ROOT / "template.yaml")["Resources"][logical_id]
    found: set[str] = set()
    for policy in resource["Properties"]["Policies"]:
        for statement in policy.get("Statement", []) if isinstance(policy, dict) else []:
            action = statement["Action"]
            found.update([action] if isinstance(action, str) else action)
    return found


@contextlib.contextmanager
def recorded(services: Any) -> Iterator[set[str]]:
    """The IAM actions of the table and bucket calls this thread makes while the block runs."""
    made: set[str] = set()
    me = threading.get_ident()

    def note(event_name: str, **_: Any) -> None:
        _, service, operation = event_name.split(".", 2)
        if threading.get_ident() == me:
            made.add(IAM_ACTIONS[service].get(operation, f"{service}:{operation} (unmapped)"))

    clients = [services.table.client, services.workspace.client]
    for client in clients:
        client.meta.events.register("before-call.*.*", note, unique_id=f"actions-{id(made)}")
    try:
        yield made
    finally:
        for client in clients:
            client.meta.events.unregister("before-call.*.*", unique_id=f"actions-{id(made)}")


@pytest.fixture
def staged(flows: Any, connect: Any, sender: Any, services: Any) -> tuple[Any, int]:
    """A presigned upload from node `src` to the workspace, its staging object written, not yet complete."""
    src, client = connect("node", "src"), connect("client", "caller")
    client.frame("transfer.request", {"source": "src:big.bin", "destination": "gsv:big.bin", "mode": "presigned"})
    sent = [f["payload"] for f in sender.frames_to(src.connection_id) if f.get("event") == "transfer.send"]
    tid = sent[0]["transferId"]
    src.call("transfer.meta", {"transferId": tid, "size": 1000})
    start = [f["payload"] for f in sender.frames_to(src.connection_id) if f.get("event") == "transfer.start"]
    assert requests.put(start[0]["uploadUrl"], data=os.urandom(1000), timeout=10).status_code == 200
    assert services.workspace.head(keys.transfer_staging(tid)) is not None
    return src, tid


def test_a_disconnect_stays_within_its_functions_actions(services: Any, staged: tuple[Any, int]) -> None:
    src, tid = staged
    with recorded(services) as made:
        lifecycle.disconnect(services, src.connection_id)
    assert services.workspace.head(keys.transfer_staging(tid)) is None  # the path that removes objects ran
    assert made and made <= granted("WsDisconnectFunction"), made - granted("WsDisconnectFunction")
    assert "s3:DeleteObject" in made, made


def test_a_tick_stays_within_its_functions_actions(services: Any, staged: tuple[Any, int]) -> None:
    _, tid = staged
    services.workspace.put(keys.workspace_object("main", "HEARTBEAT.md"), b"# Checks\n", content_type="text/markdown")
    day = 24 * 3600 * 1000
    # the transfer's call long overdue; heartbeats scheduled and read (at noon UTC, within their active hours whatever
    # the time of day the test runs)
    later = (services.now_ms() // day + 1) * day + day // 2
    with recorded(services) as made:
        scheduler.tick(services, now_ms=later)
        scheduler.tick(services, now_ms=later + 3600 * 1000)
    assert services.workspace.head(keys.transfer_staging(tid)) is None  # swept as overdue: staging removed
    assert made and made <= granted("SchedulerTickFunction"), made - granted("SchedulerTickFunction")
    assert {"s3:DeleteObject", "s3:GetObject"} <= made
