"""The implementations of the table port the contract tests run against, each fresh for every test:

- `sqlite`: `SqliteTable` on a `Database` in the test's temporary directory;
- `dynamo`: `DynamoTable` on plain moto (`mock_aws`), the table created as template.yaml declares it (`PK`/`SK`, the
  `GSI1` index on `GSI1PK`/`GSI1SK`, TTL on `ttl`).

Plain moto here means the tests do not use the `aws` fixture (which makes moto's writes atomic with the local
stack's patches), so they check DynamoDB's behaviour as moto models it, not ours.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT

KINDS = ["sqlite", "dynamo"]
NAME = "orbital-contract"


@contextmanager
def plain_moto() -> Iterator[Any]:
    """A low-level DynamoDB client on plain moto."""
    import boto3
    from moto import mock_aws

    with mock_aws():
        yield boto3.client("dynamodb", region_name="us-east-1")


def create_table(client: Any, name: str) -> None:
    """The template's table, created as CloudFormation would (with its TTL attribute)."""
    from orbital.local.template import load_template, table_definition, ttl_attribute

    template = load_template(ROOT / "template.yaml")
    _, kwargs = table_definition(template)
    client.create_table(TableName=name, **kwargs)
    attribute = ttl_attribute(template)
    assert attribute == "ttl"
    client.update_time_to_live(TableName=name, TimeToLiveSpecification={"Enabled": True, "AttributeName": attribute})


@contextmanager
def open_table(kind: str, directory: Path, client: Any = None) -> Iterator[Any]:
    """A fresh table of `kind`; a DynamoDB one in `client`'s moto (default: a moto of its own)."""
    if kind == "sqlite":
        from orbital.store.backends.database import Database
        from orbital.store.backends.sqlite import SqliteTable

        with Database(directory / "orbital.db") as db:
            yield SqliteTable(db)
        return
    from orbital.store.backends.dynamo import DynamoTable

    with ExitStack() as stack:
        if client is None:
            client = stack.enter_context(plain_moto())
        name = f"{NAME}-{kind}"
        create_table(client, name)
        yield DynamoTable(client, name)


@pytest.fixture(params=KINDS)
def table(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    with open_table(request.param, tmp_path) as opened:
        yield opened
