"""The local gateway's composition root: the one place that chooses the ports of `orbital dev` (ADR 0049).

The table and workspace of its data directory (`orbital.local.store`: SQLite and files), their portable form
(`orbital.local.portable`), the bridge's sender (`orbital.local.sender`), the Step Functions process behind the
Workflows port (`orbital.local.workflows`), the data directory's backups when it persists, and what a long-running
process on its user's machine can do (`orbital.ports.capabilities`).
`orbital.local.server` builds one at start and installs it for the handlers it invokes
(`orbital.runtime.services.use_services`); the tools that open a data directory without a gateway build theirs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orbital import methods
from orbital.local.portable import TableItems, WorkspaceObjects
from orbital.local.sender import BridgeSender
from orbital.ports.capabilities import on_own_machine
from orbital.ports.services import Services
from orbital.settings import Settings

if TYPE_CHECKING:
    from orbital.local.store import LocalStore
    from orbital.ports.backups import Backups
    from orbital.ports.workflows import Workflows


def build_local_services(
    settings: Settings,
    store: LocalStore,
    *,
    workflows: Workflows,
    backups: Backups | None = None,
) -> Services:
    """The local gateway's Services on `store` (its data directory, open), with its Step Functions stand-in
    (`orbital.local.stack.LocalStack.workflows`) and `backups` when it keeps them. Its sender posts to the bridge
    the gateway sets on it (`BridgeSender.bridge`) once the bridge exists."""
    table, workspace = store.table, store.workspace
    return Services(
        settings,
        registry=methods.registry,
        table=table,
        workspace=workspace,
        sender=BridgeSender(max_bytes=settings.max_frame_bytes),
        workflows=workflows,
        backups=backups,
        portable=lambda: (TableItems(table), WorkspaceObjects(workspace)),
        # the bridge's management endpoint is on the gateway's own HTTP origin
        capabilities=on_own_machine(settings.mgmt_endpoint or None),
    )
