"""The composition root: the one place that puts the gateway together. It gives `Services` (the ports,
`orbital.ports.services`) the method registry of `orbital.methods`, whose hooks carry every family's reactions
(socket loss, deferred-call kinds, workflow steps, a run's replies and end, the native tools above the tools layer).

Every entry point reaches its Services here (`get_services`): the Lambda functions through the runtime's handlers and
the HTTP app, the local gateway, and the tests (`build_services`, `use_services`). Code below the runtime is handed
its Services and never comes here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from orbital import methods
from orbital.ports.backups import Backups
from orbital.ports.services import Services
from orbital.settings import Settings, get_settings
from orbital.store.table import Table
from orbital.store.workspace import Workspace

if TYPE_CHECKING:
    from orbital.ports.sender import Sender
    from orbital.ports.workflows import Workflows
    from orbital.store.portable import Items, Objects

_storage: tuple[Table, Workspace] | None = None
"""The table and workspace the local gateway keeps in its data directory (`use_storage`); None: DynamoDB and S3."""
_backups: Backups | None = None
"""The local gateway's backups (`use_backups`); None on AWS."""
_portable: Callable[[], tuple[Items, Objects]] | None = None
"""What opens those as the portable archive's stores (`use_portable_stores`); None: DynamoDB and S3."""
_flows: tuple[Workflows, Sender] | None = None
"""The local gateway's Workflows and Sender (`use_flows`); None: Step Functions and the management API."""


def build_services(
    settings: Settings,
    *,
    sender: Sender | None = None,
    workflows: Workflows | None = None,
    table: Table | None = None,
    workspace: Workspace | None = None,
    portable: Callable[[], tuple[Items, Objects]] | None = None,
) -> Services:
    """The gateway's Services for `settings`: the registry of `orbital.methods`, assembled on its first use; the
    stores given (or to `use_storage`, with their portable form given to `use_portable_stores`), else DynamoDB and
    S3."""
    if table is None and workspace is None and _storage is not None:
        table, workspace = _storage
        portable = portable or _portable
    if _flows is not None:
        workflows = workflows or _flows[0]
        sender = sender or _flows[1]
    return Services(
        settings,
        sender=sender,
        workflows=workflows,
        registry=methods.registry,
        table=table,
        workspace=workspace,
        backups=_backups,
        portable=portable,
    )


def use_storage(table: Table | None, workspace: Workspace | None) -> None:
    """Build every Services from now on on this table and workspace (the local gateway's composition root passes
    its SQLite table and file workspace); None, None: DynamoDB and S3 again."""
    global _storage
    _storage = (table, workspace) if table is not None and workspace is not None else None
    _services_for.cache_clear()


def use_flows(workflows: Workflows | None, sender: Sender | None) -> None:
    """Build every Services from now on with these Workflows and Sender (the local gateway's composition root passes
    its Step Functions stand-in and its bridge's sender); None, None: Step Functions and the management API again."""
    global _flows
    _flows = (workflows, sender) if workflows is not None and sender is not None else None
    _services_for.cache_clear()


def use_backups(backups: Backups | None) -> None:
    """Give every Services from now on the local gateway's backups (its composition root passes them); None: none."""
    global _backups
    _backups = backups


def use_portable_stores(portable: Callable[[], tuple[Items, Objects]] | None) -> None:
    """What opens the stores given to `use_storage` as the portable archive's (`Services.portable_stores`: moving
    and cloning agents inside the gateway); None: none."""
    global _portable
    _portable = portable
    _services_for.cache_clear()


@functools.cache
def _services_for(settings: Settings) -> Services:
    return build_services(settings)


_override: Services | None = None


def get_services() -> Services:
    """The Services of this container (or the one installed with `use_services`, e.g. by tests)."""
    if _override is not None:
        return _override
    return _services_for(get_settings())


def use_services(services: Services | None) -> None:
    global _override
    _override = services


def reset_services() -> None:
    _services_for.cache_clear()
    use_services(None)
