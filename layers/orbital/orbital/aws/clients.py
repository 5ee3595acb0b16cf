"""The one boto3 client factory. Clients are created lazily, once per (service, endpoint), and counted.
`explicit_client` builds one, uncached, for tooling that works on a deployment named by the user (export, import).

`calls` counts every AWS API call made through these clients (`"dynamodb.GetItem": 3, …`); the benchmarks read it.
"""

from __future__ import annotations

import functools
import threading
from collections import Counter
from typing import TYPE_CHECKING, Any

from orbital.settings import get_settings

if TYPE_CHECKING:
    from botocore.client import BaseClient

calls: Counter[str] = Counter()
_calls_lock = threading.Lock()


def _count(event_name: str, **_kwargs: Any) -> None:
    # event_name: "before-call.<service>.<Operation>"
    service, operation = event_name.split(".", 2)[1:]
    count(service, operation)


def count(service: str, operation: str) -> None:
    """Count one AWS API call (for calls answered without going through botocore's events: the local backends of
    the Workflows and Sender ports)."""
    with _calls_lock:
        calls[f"{service}.{operation}"] += 1


def _config() -> Any:
    from botocore.config import Config

    return Config(
        retries={"max_attempts": 3, "mode": "standard"},
        connect_timeout=3,
        read_timeout=20,
        max_pool_connections=64,
        tcp_keepalive=True,
    )


@functools.cache
def client(service: str, endpoint_url: str | None = None, region: str | None = None) -> BaseClient:
    import boto3

    settings = get_settings()
    session = boto3.session.Session()
    kwargs: dict[str, Any] = {"region_name": region or settings.region, "config": _config()}
    endpoint = endpoint_url or settings.aws_endpoint
    if endpoint:
        kwargs["endpoint_url"] = endpoint
    made = session.client(service, **kwargs)
    made.meta.events.register("before-call.*.*", _count)
    return made


@functools.cache
def model_client(service: str, endpoint_url: str | None = None, region: str | None = None) -> BaseClient:
    """A client for model calls (bedrock-runtime): AWS itself or `endpoint_url`, never the local stand-in endpoint;
    no botocore retries (the provider layer has its own policy and time budget) and reads that may wait long."""
    import boto3
    from botocore.config import Config

    session = boto3.session.Session()
    config = Config(retries={"total_max_attempts": 1, "mode": "standard"}, connect_timeout=10, read_timeout=300)
    kwargs: dict[str, Any] = {"region_name": region or get_settings().region, "config": config}
    if endpoint_url:
        kwargs["endpoint_url"] = endpoint_url
    made = session.client(service, **kwargs)
    made.meta.events.register("before-call.*.*", _count)
    return made


def explicit_client(
    service: str,
    *,
    endpoint_url: str | None = None,
    region: str | None = None,
    profile: str | None = None,
) -> BaseClient:
    """A client of a deployment named on the command line rather than the one this process serves (`orbital export`
    and `orbital import`): the AWS credentials of `profile`, or the usual chain; `region`, else the profile's or the
    environment's (with an `endpoint_url`, us-east-1 when none is set). Not cached, never
    pointed at the gateway's own endpoint setting."""
    import boto3

    session = boto3.session.Session(profile_name=profile)
    chosen = region or session.region_name or ("us-east-1" if endpoint_url else None)
    if not chosen:
        raise ValueError("no AWS region: pass --region, or set AWS_REGION or a region in your AWS profile")
    kwargs: dict[str, Any] = {"region_name": chosen, "config": _config()}
    if endpoint_url:
        kwargs["endpoint_url"] = endpoint_url
    made = session.client(service, **kwargs)
    made.meta.events.register("before-call.*.*", _count)
    return made


def dynamodb() -> BaseClient:
    return client("dynamodb")


def s3() -> BaseClient:
    return client("s3")


def stepfunctions() -> BaseClient:
    return client("stepfunctions")


def secretsmanager() -> BaseClient:
    return client("secretsmanager")


def management(endpoint_url: str) -> BaseClient:
    """API Gateway management API client for one WebSocket API stage endpoint."""
    return client("apigatewaymanagementapi", endpoint_url)


def reset_clients() -> None:
    client.cache_clear()
    model_client.cache_clear()


def reset_call_counts() -> None:
    with _calls_lock:
        calls.clear()


def call_counts() -> dict[str, int]:
    with _calls_lock:
        return dict(calls)
