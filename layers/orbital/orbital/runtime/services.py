"""The AWS composition root: the one place that chooses the ports of a gateway on AWS. It gives `Services` (the
ports, `orbital.ports.services`) the method registry of `orbital.methods`, whose hooks carry every family's reactions
(socket loss, deferred-call kinds, workflow steps, a run's replies and end, the native tools above the tools layer),
the DynamoDB table, the S3 workspace, the management API's sender, Step Functions and what API Gateway and Lambda can do
(`orbital.ports.capabilities.ON_AWS`). The local gateway has its own root (`orbital.local.services`).

Every Lambda entry point reaches its Services here (`get_services`: built once per warm container, at the first
event, never at import); the local gateway installs the Services its root built (`use_services`), and so do tests.
Code below the runtime is handed its Services and never comes here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from orbital import methods
from orbital.aws import clients
from orbital.aws.push import ManagementApiSender
from orbital.ports.capabilities import ON_AWS
from orbital.ports.services import Lazy, Services
from orbital.settings import Settings, get_settings
from orbital.store.backends.dynamo import DynamoTable
from orbital.store.table import Table
from orbital.store.workspace import Workspace

if TYPE_CHECKING:
    from orbital.ports.sender import Sender
    from orbital.ports.workflows import Workflows
    from orbital.store.portable import Items, Objects


def build_services(
    settings: Settings,
    *,
    sender: Sender | None = None,
    workflows: Workflows | None = None,
    table: Table | None = None,
    workspace: Workspace | None = None,
    portable: Callable[[], tuple[Items, Objects]] | None = None,
) -> Services:
    """The gateway's Services on AWS for `settings`: the registry of `orbital.methods`, assembled on its first use;
    the DynamoDB table, the S3 workspace, the management API's sender and Step Functions of the settings, each built
    on its first use. A test may give its own `sender`, `workflows`, `table`, `workspace` (and their `portable`
    form) instead."""
    return Services(
        settings,
        registry=methods.registry,
        table=table if table is not None else Lazy(functools.partial(_dynamo_table, settings)),
        workspace=workspace if workspace is not None else Lazy(functools.partial(_s3_workspace, settings)),
        sender=sender if sender is not None else Lazy(functools.partial(_configured_sender, settings)),
        workflows=workflows if workflows is not None else Lazy(_step_functions),
        backups=None,
        portable=portable or _portable(settings, given=table is not None or workspace is not None),
        capabilities=ON_AWS,
    )


def _dynamo_table(settings: Settings) -> Table:
    return DynamoTable(clients.dynamodb(), settings.table_name)


def _s3_workspace(settings: Settings) -> Workspace:
    from orbital.store.backends.s3 import S3Workspace  # lazy: built on first use, off the cold start

    return S3Workspace(clients.s3(), settings.bucket_name)


def _step_functions() -> Workflows:
    # lazy: off the socket functions' cold start (most of their requests start no execution)
    from orbital.aws.workflows import StepFunctionsWorkflows

    return StepFunctionsWorkflows(clients.stepfunctions())


def _configured_sender(settings: Settings) -> Sender:
    endpoint = settings.mgmt_endpoint
    if not endpoint:
        raise RuntimeError("no management endpoint configured (ORBITAL_WS_MGMT_ENDPOINT)")
    return _management_sender(settings, endpoint)


def _management_sender(settings: Settings, endpoint: str) -> Sender:
    return ManagementApiSender(endpoint, max_bytes=settings.max_frame_bytes)


def _portable(settings: Settings, *, given: bool) -> Callable[[], tuple[Items, Objects]]:
    """The DynamoDB table and S3 bucket of the settings as the portable archive's stores."""

    def open_stores() -> tuple[Items, Objects]:
        if given:
            raise RuntimeError("this gateway's stores were given without their portable form")
        from orbital.store.portable_aws import DynamoItems, S3Objects  # lazy: only moving agents needs them

        return DynamoItems(clients.dynamodb(), settings.table_name), S3Objects(clients.s3(), settings.bucket_name)

    return open_stores


def adopt_endpoint(services: Services, endpoint: str) -> None:
    """Post through the management endpoint of the API that invoked us when none was configured."""
    if not services.settings.mgmt_endpoint:
        services.adopt_sender(_management_sender(services.settings, endpoint))


@functools.cache
def _services_for(settings: Settings) -> Services:
    return build_services(settings)


_installed: Services | None = None


def get_services() -> Services:
    """The Services of this container: the one installed with `use_services` (the local gateway's, or a test's),
    else the AWS root's for the current settings, built once."""
    if _installed is not None:
        return _installed
    return _services_for(get_settings())


def use_services(services: Services | None) -> None:
    """Serve every entry point of this process with `services` (None: the AWS root's again)."""
    global _installed
    _installed = services


def reset_services() -> None:
    _services_for.cache_clear()
    use_services(None)
