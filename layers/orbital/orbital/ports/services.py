"""The ports a method handler uses, built lazily once per warm container (or once per local gateway).

Besides the AWS-backed repositories this holds the method registry, so the runtime and the engines reach the
families' hooks (`hooks`) without importing the families themselves. The registry is given to it (by the
composition root, `orbital.runtime.services`): nothing here imports a method family.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from orbital.aws import clients
from orbital.aws.push import ManagementApiSender, Sender
from orbital.ports.lifecycle import disconnect
from orbital.settings import Settings
from orbital.store import http_answers
from orbital.store.backends.dynamo import DynamoTable
from orbital.store.config_repo import ConfigRepo
from orbital.store.connections import ConnectionRepo
from orbital.store.table import Table

if TYPE_CHECKING:
    from orbital.ports.backups import Backups
    from orbital.protocol.registry import Hooks, Registry
    from orbital.store.portable import Items, Objects
    from orbital.store.repos import GatewayRepo
    from orbital.store.sessions import SessionRepo
    from orbital.store.spend import SpendRepo
    from orbital.store.usage import UsageRepo
    from orbital.store.workspace import Workspace


class Services:
    def __init__(
        self,
        settings: Settings,
        *,
        registry: Registry | Callable[[], Registry],
        sender: Sender | None = None,
        table: Table | None = None,
        workspace: Workspace | None = None,
        backups: Backups | None = None,
        portable: Callable[[], tuple[Items, Objects]] | None = None,
    ) -> None:
        """`registry`: the method registry, or what makes it on first use (so a container that never needs the
        families' hooks never assembles them). `table` and `workspace`: the stores to use (the local gateway's in
        its data directory); by default DynamoDB and S3, built on first use. `backups`: the local backups' engine
        (the local gateway's; none on AWS). `portable`: what opens that table and workspace as the portable
        archive's stores (`portable_stores`); by default the DynamoDB table and S3 bucket of the settings."""
        self.settings = settings
        self._portable = portable
        self._stores_given = table is not None or workspace is not None
        if table is not None:
            self.__dict__["table"] = table
        if workspace is not None:
            self.__dict__["workspace"] = workspace
        self._sender = sender
        self.backups = backups
        """The local backups (ADR 0047): given by the local gateway; None on AWS."""
        self._registry: Registry | None = None
        self._make_registry: Callable[[], Registry] | None = None
        if callable(registry):
            self._make_registry = registry
        else:
            self._registry = registry
        self.armed_timers: set[int] = set()
        """Seconds whose timer of due calls this container has started (`engines.deferred.start_wait`)."""

    def now_ms(self) -> int:
        return int(time.time() * 1000)

    @property
    def registry(self) -> Registry:
        """The method registry this Services was given (made on first use when it was given as a callable)."""
        if self._registry is None:
            assert self._make_registry is not None
            self._registry = self._make_registry()
        return self._registry

    @property
    def hooks(self) -> Hooks:
        """The families' hooks: socket loss, node connect, deferred-call kinds, chunk frames, workflow steps."""
        return self.registry.hooks

    @functools.cached_property
    def table(self) -> Table:
        return DynamoTable(clients.dynamodb(), self.settings.table_name)

    @functools.cached_property
    def config(self) -> ConfigRepo:
        return ConfigRepo(self.table, default_model=self.settings.default_model)

    @functools.cached_property
    def connections(self) -> ConnectionRepo:
        return ConnectionRepo(self.table, self.settings.connection_ttl_seconds)

    @functools.cached_property
    def sessions(self) -> SessionRepo:
        from orbital.store.sessions import SessionRepo  # lazy: built on first use, off the cold start

        return SessionRepo(self.table, self.workspace)

    @functools.cached_property
    def workspace(self) -> Workspace:
        from orbital.store.backends.s3 import S3Workspace  # lazy: built on first use, off the cold start

        return S3Workspace(clients.s3(), self.settings.bucket_name)

    @functools.cached_property
    def gateway(self) -> GatewayRepo:
        from orbital.store.repos import GatewayRepo  # lazy: built on first use, off the cold start

        return GatewayRepo(self.table)

    @functools.cached_property
    def usage(self) -> UsageRepo:
        """The gateway's token usage per UTC day and month (daily and monthly budgets)."""
        from orbital.store.usage import UsageRepo  # lazy: built on first use, off the cold start

        return UsageRepo(self.table)

    @functools.cached_property
    def spend(self) -> SpendRepo:
        """The gateway's spend counters in micro-dollars (spend caps, ADR 0044)."""
        from orbital.store.spend import SpendRepo  # lazy: built on first use, off the cold start

        return SpendRepo(self.table)

    def portable_stores(self) -> tuple[Items, Objects]:
        """This gateway's own table and workspace as the stores of `orbital.store.portable` (whole items and objects
        in and out, as an export or an import moves them): given by the composition root for stores it gave (the
        local gateway's data directory), else the DynamoDB table and S3 bucket of the settings."""
        if self._portable is not None:
            return self._portable()
        if self._stores_given:
            raise RuntimeError("this gateway's stores were given without their portable form")
        from orbital.store.portable_aws import DynamoItems, S3Objects  # lazy: only moving agents needs them

        return DynamoItems(clients.dynamodb(), self.settings.table_name), S3Objects(
            clients.s3(), self.settings.bucket_name
        )

    @property
    def sender(self) -> Sender:
        if self._sender is None:
            endpoint = self.settings.mgmt_endpoint
            if not endpoint:
                raise RuntimeError("no management endpoint configured (ORBITAL_WS_MGMT_ENDPOINT)")
            self._sender = ManagementApiSender(
                endpoint, local=self.settings.local, max_bytes=self.settings.max_frame_bytes
            )
        return self._sender

    def use_endpoint(self, endpoint: str) -> None:
        """Adopt the management endpoint of the API that invoked us when none was configured."""
        if self._sender is None and not self.settings.mgmt_endpoint:
            self._sender = ManagementApiSender(
                endpoint, local=self.settings.local, max_bytes=self.settings.max_frame_bytes
            )

    def push(self, connection_id: str, frame: dict[str, Any]) -> bool:
        """Send a frame; a gone socket (410) is cleaned up and reported as False. A reply too large to send goes
        as a 413 error reply instead (the sender sees to it, on what it posts). An HTTP request's waiter id is no
        socket: nothing is posted to it (its answers are kept for it: `engines.deferred.answer`)."""
        if http_answers.is_waiter(connection_id):
            return False
        if self.sender.post(connection_id, frame):
            return True
        disconnect(self, connection_id)
        return False
