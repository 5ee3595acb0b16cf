"""The local gateway's composition root: the one place that chooses the ports of `orbital dev` (ADR 0049).

The table and workspace of its data directory (`orbital.local.store`: SQLite and files), their portable form
(`orbital.local.portable`), the bridge's management API as the sender, the data directory's backups when it
persists, and what a long-running process on its user's machine can do (`orbital.ports.capabilities`).
`orbital.local.server` builds one at start and installs it for the handlers it invokes
(`orbital.runtime.services.use_services`); the tools that open a data directory without a gateway build theirs.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from orbital import methods
from orbital.aws.push import ManagementApiSender, Sender
from orbital.local.portable import TableItems, WorkspaceObjects
from orbital.ports.capabilities import on_own_machine
from orbital.ports.services import Lazy, Services
from orbital.settings import Settings

if TYPE_CHECKING:
    from orbital.local.store import LocalStore
    from orbital.ports.backups import Backups


def build_local_services(
    settings: Settings, store: LocalStore, *, backups: Backups | None = None, sender: Sender | None = None
) -> Services:
    """The local gateway's Services on `store` (its data directory, open): `backups` when it keeps them; the
    bridge's management API (the settings' endpoint) as the sender, unless `sender` is given."""
    table, workspace = store.table, store.workspace
    return Services(
        settings,
        registry=methods.registry,
        table=table,
        workspace=workspace,
        sender=sender if sender is not None else Lazy(functools.partial(_bridge_sender, settings)),
        backups=backups,
        portable=lambda: (TableItems(table), WorkspaceObjects(workspace)),
        # the bridge's management endpoint is on the gateway's own HTTP origin
        capabilities=on_own_machine(settings.mgmt_endpoint or None),
    )


def _bridge_sender(settings: Settings) -> Sender:
    if not settings.mgmt_endpoint:
        raise RuntimeError("no management endpoint configured (ORBITAL_WS_MGMT_ENDPOINT)")
    return ManagementApiSender(settings.mgmt_endpoint, local=True, max_bytes=settings.max_frame_bytes)
